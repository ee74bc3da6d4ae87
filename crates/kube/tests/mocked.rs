//! The engine against the mocked API server (request/response pairs from the Kubernetes API
//! reference): submit (a workspace, a gang job with and without Volcano, a failed submit cleaned up),
//! observe and list_runs (reconciliation after a restart, every stop reason), cancel, remove, the
//! event watch, logs, endpoints and inventory. Exec is in `exec.rs` (it needs a real upgrade).

mod mock;

use futures::StreamExt;
use gpuhub_driver::{
    Engine, EngineError, EngineEvent, GpuGrant, Identity, LABEL_INSTANCE, LABEL_WORKLOAD, MemberRef, MemberState,
    RunSpec,
};
use gpuhub_kube::KubeConfig;
use gpuhub_testkit::run_spec;
use mock::{Reply, container, engine, exited, list, pod, running, status};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

const PODS: &str = "/api/v1/namespaces/gpuhub/pods";
const JOBS: &str = "/apis/batch/v1/namespaces/gpuhub/jobs";
const SERVICES: &str = "/api/v1/namespaces/gpuhub/services";

/// Run `r` of alice's (uid 1001) for workload `w-1` of instance `inst`: `members` members of one core,
/// 1 GiB and one GPU, placed by the cluster, exiting with 3; port 8888.
fn spec(kind: &str, members: u32) -> RunSpec {
    let mut spec = RunSpec {
        image: "busybox".into(),
        command: vec!["sh".into(), "-c".into(), "exit 3".into()],
        labels: BTreeMap::from([
            (LABEL_WORKLOAD.to_owned(), "w-1".to_owned()),
            (LABEL_INSTANCE.to_owned(), "inst".to_owned()),
            ("gpuhub.kind".to_owned(), kind.to_owned()),
        ]),
        identity: Identity { uid: 1001, gid: 1001, home: "/home/alice".into(), ..run_spec("r", 0).identity },
        pids_limit: 1024,
        ports: vec![8888],
        ..run_spec("r", members)
    };
    for m in &mut spec.members {
        m.node = None;
        m.gpus = GpuGrant::Whole { count: 1, uuids: vec![] };
    }
    spec
}

/// The API server's answer to a create: the object, with a uid.
fn created(s: &mock::Seen) -> Reply {
    let mut obj = s.body.clone();
    obj["metadata"]["uid"] = json!("u-1");
    obj["metadata"]["resourceVersion"] = json!("1");
    Reply::Json(201, obj)
}

#[tokio::test]
async fn a_workspace_is_one_pod_created_with_its_terms() {
    let (e, seen) = engine(KubeConfig::default(), |s| match (s.method.as_str(), s.path.as_str()) {
        ("POST", PODS) => created(s),
        _ => status(404, "NotFound", "unexpected"),
    });
    let run = e.submit(&spec("workspace", 1)).await.unwrap();
    assert_eq!((run.id.as_str(), run.size, run.members.len()), ("r", 1, 1));
    assert_eq!(run.members[0].state, MemberState::Pending);
    let seen = seen.all();
    assert_eq!(seen.iter().map(mock::Seen::line).collect::<Vec<_>>(), [format!("POST {PODS}")]);
    let pod = &seen[0].body;
    assert_eq!(pod["metadata"]["name"], "r-0");
    assert_eq!(pod["spec"]["securityContext"]["runAsUser"], 1001);
    assert_eq!(pod["spec"]["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
    assert_eq!(pod["spec"]["containers"][0]["securityContext"]["capabilities"]["drop"][0], "ALL");
    assert_eq!(pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"], "1");
    assert_eq!(pod["spec"]["containers"][0]["ports"][0]["containerPort"], 8888);
}

#[tokio::test]
async fn a_gang_job_gets_its_service_podgroup_and_jobs() {
    let config = KubeConfig { volcano: true, ..Default::default() };
    let (e, seen) = engine(config, |s| match s.method.as_str() {
        "POST" => created(s),
        _ => status(404, "NotFound", "unexpected"),
    });
    let run = e.submit(&spec("job", 2)).await.unwrap();
    assert_eq!((run.size, run.members.len()), (2, 2));
    let seen = seen.all();
    let lines: Vec<_> = seen.iter().map(mock::Seen::line).collect();
    assert_eq!(
        lines,
        [
            format!("POST {SERVICES}"),
            "POST /apis/scheduling.volcano.sh/v1beta1/namespaces/gpuhub/podgroups".to_owned(),
            format!("POST {JOBS}"),
            format!("POST {JOBS}"),
        ]
    );
    assert_eq!(seen[0].body["spec"]["clusterIP"], "None");
    assert_eq!(seen[1].body["spec"]["minMember"], 2);
    let tpl = &seen[3].body["spec"]["template"];
    assert_eq!(tpl["spec"]["schedulerName"], "volcano");
    let env = tpl["spec"]["containers"][0]["env"].as_array().unwrap();
    let var = |k: &str| env.iter().find(|v| v["name"] == k).map(|v| v["value"].clone()).unwrap();
    assert_eq!((var("RANK"), var("WORLD_SIZE"), var("MASTER_ADDR")), (json!("1"), json!("2"), json!("r-0.r")));
}

#[tokio::test]
async fn a_failed_submit_leaves_nothing_behind() {
    let (e, seen) = engine(KubeConfig::default(), |s| match (s.method.as_str(), s.path.as_str()) {
        ("POST", SERVICES) => created(s),
        ("POST", JOBS) if s.body["metadata"]["name"] == "r-1" => {
            status(403, "Forbidden", "exceeded quota: gpus, requested: nvidia.com/gpu=1, used: 8, limited: 8")
        }
        ("POST", JOBS) => created(s),
        ("DELETE", JOBS | PODS) => list(if s.path == JOBS { "JobList" } else { "PodList" }, vec![]),
        ("DELETE", p) if p == format!("{SERVICES}/r") => {
            Reply::Json(200, json!({ "kind": "Status", "status": "Success" }))
        }
        _ => status(404, "NotFound", "unexpected"),
    });
    let err = e.submit(&spec("job", 2)).await.unwrap_err();
    assert!(matches!(&err, EngineError::Rejected(m) if m.contains("exceeded quota")), "{err}");
    let seen = seen.all();
    let lines: Vec<_> = seen.iter().map(mock::Seen::line).collect();
    assert!(lines.contains(&format!("DELETE {JOBS}")), "{lines:?}");
    assert!(lines.contains(&format!("DELETE {PODS}")), "{lines:?}");
    assert!(lines.contains(&format!("DELETE {SERVICES}/r")), "{lines:?}");
    let del = seen.iter().find(|s| s.line() == format!("DELETE {JOBS}")).unwrap();
    assert!(del.query.contains("labelSelector=gpuhub.run=r"), "{}", del.query);
    assert_eq!(del.body["propagationPolicy"], "Background");
}

#[tokio::test]
async fn runs_are_found_again_with_every_stop_reason() {
    // after a restart: the hub lists what carries gpuhub.workload; a job whose pod is not made yet
    // is a waiting member, not a run cut short
    let pods = vec![
        pod(0, exited(137, "OOMKilled")),
        pod(1, json!({ "phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory." })),
    ];
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {
            "name": "q-0", "labels": { "gpuhub.run": "q", "gpuhub.member": "0", "gpuhub.members": "1", "gpuhub.workload": "w-2" },
            "annotations": { "gpuhub.io/labels": "{\"gpuhub.workload\":\"w-2\"}" },
        },
        "spec": { "template": { "spec": { "containers": [{ "name": "member", "image": "busybox" }] } } },
        "status": {},
    });
    let (e, seen) = engine(KubeConfig::default(), move |s| match (s.method.as_str(), s.path.as_str()) {
        ("GET", PODS) if s.query.contains("labelSelector=gpuhub.workload") => list("PodList", pods.clone()),
        ("GET", JOBS) if s.query.contains("labelSelector=gpuhub.workload") => list("JobList", vec![job.clone()]),
        ("GET", PODS | JOBS) => list("List", vec![]),
        _ => status(404, "NotFound", "unexpected"),
    });
    let runs = e.list_runs().await.unwrap();
    assert_eq!(runs.len(), 2);
    let r = runs.iter().find(|r| r.id == "r").unwrap();
    assert_eq!(
        r.members.iter().map(|m| m.state).collect::<Vec<_>>(),
        [MemberState::Exited(137), MemberState::Exited(137)]
    );
    assert_eq!(r.ended_by_engine(), Some(gpuhub_kube::status::ENDED_BY_EVICTED));
    assert_eq!(r.workload(), Some("w-1"));
    let q = runs.iter().find(|r| r.id == "q").unwrap();
    assert_eq!((q.size, q.members[0].state, q.workload()), (1, MemberState::Pending, Some("w-2")));
    // a run the cluster does not have
    let err = e.observe("gone").await.unwrap_err();
    assert!(matches!(err, EngineError::NotFound(_)), "{err}");
    let queries: Vec<_> = seen.all().iter().map(|s| s.query.clone()).collect();
    assert!(queries.iter().any(|q| q.contains("labelSelector=gpuhub.run=gone")), "{queries:?}");
}

#[tokio::test]
async fn every_stop_reason_through_observe() {
    let cases = [
        (exited(0, "Completed"), MemberState::Exited(0), None),
        (exited(3, "Error"), MemberState::Exited(3), None),
        (exited(137, "OOMKilled"), MemberState::Exited(137), None),
        (json!({ "phase": "Failed", "reason": "Evicted" }), MemberState::Exited(137), Some("evicted")),
        (
            json!({ "phase": "Failed", "conditions": [{ "type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler" }] }),
            MemberState::Exited(137),
            Some("preempted"),
        ),
        (json!({ "phase": "Failed", "reason": "NodeLost" }), MemberState::Exited(137), Some("node-fail")),
        (
            json!({ "phase": "Failed", "reason": "DeadlineExceeded" }),
            MemberState::Exited(137),
            Some("deadline-exceeded"),
        ),
        (running(), MemberState::Running, None),
    ];
    for (st, state, ended_by) in cases {
        let body = pod(0, st.clone());
        let (e, _) = engine(KubeConfig::default(), move |s| match (s.method.as_str(), s.path.as_str()) {
            ("GET", PODS) => list("PodList", vec![body.clone()]),
            ("GET", JOBS) => list("JobList", vec![]),
            _ => status(404, "NotFound", "unexpected"),
        });
        let r = e.observe("r").await.unwrap();
        assert_eq!(r.members[0].state, state, "{st}");
        assert_eq!(r.ended_by_engine(), ended_by, "{st}");
    }
}

#[tokio::test]
async fn cancel_ends_placed_members_by_deadline_and_deletes_waiting_ones() {
    let (e, seen) = engine(KubeConfig::default(), |s| match (s.method.as_str(), s.path.as_str()) {
        ("GET", PODS) if s.query.contains("fieldSelector=metadata.name=r-0") => {
            // the kubelet has stopped it: SIGTERM's 143, its record kept
            let mut p = pod(0, exited(143, "Error"));
            p["metadata"]["annotations"]["gpuhub.io/cancelled"] = json!("true");
            list("PodList", vec![p])
        }
        // the waiting member is gone
        ("GET", PODS) if s.query.contains("fieldSelector=metadata.name=r-1") => list("PodList", vec![]),
        ("GET", PODS) => {
            let mut waiting = pod(1, json!({ "phase": "Pending" }));
            waiting["spec"].as_object_mut().unwrap().remove("nodeName");
            list("PodList", vec![pod(0, running()), waiting])
        }
        ("GET", JOBS) => list("JobList", vec![]),
        ("PATCH", p) if p == format!("{PODS}/r-0") => Reply::Json(200, pod(0, running())),
        ("DELETE", p) if p == format!("{PODS}/r-1") => Reply::Json(200, pod(1, json!({ "phase": "Pending" }))),
        _ => status(404, "NotFound", "unexpected"),
    });
    e.cancel("r", Duration::from_secs(10)).await.unwrap();
    let seen = seen.all();
    let patch = seen.iter().find(|s| s.method == "PATCH").unwrap();
    assert_eq!(patch.body["spec"]["activeDeadlineSeconds"], 1);
    assert_eq!(patch.body["metadata"]["annotations"]["gpuhub.io/cancelled"], "true");
    let del = seen.iter().find(|s| s.method == "DELETE").unwrap();
    assert_eq!(del.path, format!("{PODS}/r-1"));
    assert_eq!(del.body["gracePeriodSeconds"], 0);
}

#[tokio::test]
async fn remove_deletes_everything_of_the_run_and_a_missing_run_is_not_found() {
    let (e, seen) = engine(KubeConfig::default(), |s| match (s.method.as_str(), s.path.as_str()) {
        ("DELETE", JOBS) => list("JobList", vec![]),
        ("DELETE", PODS) if s.query.contains("gpuhub.run=r") => list("PodList", vec![pod(0, exited(0, "Completed"))]),
        ("DELETE", PODS) => list("PodList", vec![]),
        _ => status(404, "NotFound", "services \"x\" not found"),
    });
    e.remove("r").await.unwrap();
    let err = e.remove("gone").await.unwrap_err();
    assert!(matches!(err, EngineError::NotFound(_)), "{err}");
    let lines: Vec<_> = seen.all().iter().map(mock::Seen::line).collect();
    assert_eq!(&lines[..3], [format!("DELETE {JOBS}"), format!("DELETE {PODS}"), format!("DELETE {SERVICES}/r")]);
}

#[tokio::test]
async fn events_come_from_a_watch_and_a_broken_watch_ends_the_stream() {
    let watch_body = [
        json!({ "type": "MODIFIED", "object": pod(0, exited(137, "OOMKilled")) }),
        json!({ "type": "ADDED", "object": pod(1, running()) }),
        json!({ "type": "DELETED", "object": pod(0, exited(137, "OOMKilled")) }),
    ]
    .iter()
    .map(|v| format!("{v}\n"))
    .collect::<String>();
    let watches = std::sync::atomic::AtomicU32::new(0);
    let (e, seen) = engine(KubeConfig::default(), move |s| match (s.method.as_str(), s.path.as_str()) {
        ("GET", PODS) if s.query.contains("watch=true") => {
            if watches.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                Reply::Raw(200, watch_body.clone().into_bytes())
            } else {
                Reply::Hang
            }
        }
        // the initial listing: member 0 runs (known, no event: events are from now on)
        ("GET", PODS) => list("PodList", vec![pod(0, running())]),
        _ => status(404, "NotFound", "unexpected"),
    });
    let mut events = e.events().await.unwrap();
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(tokio::time::timeout(Duration::from_secs(10), events.next()).await.unwrap().unwrap().unwrap());
    }
    let (run, workload) = ("r".to_owned(), "w-1".to_owned());
    assert_eq!(
        got,
        [
            EngineEvent::Exited { run: run.clone(), workload: workload.clone(), member: 0, exit_code: 137 },
            EngineEvent::Started { run: run.clone(), workload: workload.clone(), member: 1 },
            EngineEvent::Removed { run, workload, member: 0 },
        ]
    );
    assert!(seen.all()[0].query.contains("labelSelector=gpuhub.workload"));

    let (e, _) = engine(KubeConfig::default(), |_| status(500, "InternalError", "etcd is down"));
    let mut events = e.events().await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), events.next()).await.unwrap().unwrap();
    assert!(matches!(&first, Err(EngineError::Unavailable(m)) if m.contains("watch")), "{first:?}");
    assert!(events.next().await.is_none(), "the stream ends at its first error");
}

#[tokio::test]
async fn logs_follow_a_members_pod() {
    let (e, seen) = engine(KubeConfig::default(), |s| match (s.method.as_str(), s.path.as_str()) {
        ("GET", PODS) => list("PodList", vec![pod(0, running())]),
        ("GET", p) if p == format!("{PODS}/r-0/log") => Reply::Raw(200, b"epoch 1\nepoch 2\n".to_vec()),
        _ => status(404, "NotFound", "unexpected"),
    });
    let out: Vec<_> = e.logs(&MemberRef::new("r", 0), true, Some(2)).await.unwrap().collect().await;
    let text: String = out.into_iter().map(|c| String::from_utf8(c.unwrap().to_vec()).unwrap()).collect();
    assert_eq!(text, "epoch 1\nepoch 2\n");
    let seen = seen.all();
    let q = &seen.iter().find(|s| s.path.ends_with("/log")).unwrap().query;
    assert!(q.contains("follow=true") && q.contains("tailLines=2") && q.contains("container=member"), "{q}");
    assert!(seen[0].query.contains("labelSelector=gpuhub.run=r,gpuhub.member=0"), "{}", seen[0].query);
}

#[tokio::test]
async fn endpoints_are_pod_ips_of_running_members() {
    let (e, _) = engine(KubeConfig::default(), |s| match (s.method.as_str(), s.path.as_str()) {
        ("GET", PODS) if s.query.contains("gpuhub.member=0") => list("PodList", vec![pod(0, running())]),
        ("GET", PODS) => {
            list("PodList", vec![pod(1, container("Pending", json!({ "waiting": { "reason": "ContainerCreating" } })))])
        }
        _ => status(404, "NotFound", "unexpected"),
    });
    assert_eq!(e.endpoint(&MemberRef::new("r", 0), 8888).await.unwrap(), "10.1.2.3:8888".parse().unwrap());
    let err = e.endpoint(&MemberRef::new("r", 1), 8888).await.unwrap_err();
    assert!(err.to_string().contains("not running"), "{err}");
}

#[tokio::test]
async fn inventory_lists_nodes_with_their_gpus() {
    let (e, _) = engine(KubeConfig::default(), |s| match (s.method.as_str(), s.path.as_str()) {
        ("GET", "/api/v1/nodes") => list(
            "NodeList",
            vec![
                json!({
                    "metadata": { "name": "gpu1", "labels": { "nvidia.com/gpu.product": "NVIDIA-H100", "nvidia.com/gpu.memory": "81559" } },
                    "status": { "allocatable": { "cpu": "15500m", "memory": "131072Ki", "nvidia.com/gpu": "4" }, "conditions": [{ "type": "Ready", "status": "True" }] },
                }),
                json!({
                    "metadata": { "name": "cpu1" },
                    "spec": { "unschedulable": true },
                    "status": { "allocatable": { "cpu": "8", "memory": "32Gi" }, "conditions": [{ "type": "Ready", "status": "True" }] },
                }),
            ],
        ),
        _ => status(404, "NotFound", "unexpected"),
    });
    let nodes = e.inventory().await.unwrap();
    assert_eq!(nodes.len(), 2);
    let g = &nodes[0];
    assert_eq!((g.capacity.cpus.0, g.capacity.memory.0, g.capacity.gpus.len(), g.up), (15500, 131072 << 10, 4, true));
    assert_eq!(g.capacity.gpus[3].uuid, "gpu1/gpu3");
    assert_eq!(g.capacity.gpus[0].model, "NVIDIA-H100");
    assert_eq!((nodes[1].up, nodes[1].state.as_str(), nodes[1].capacity.memory.0), (false, "cordoned", 32 << 30));
    assert!(e.image_exists("anything:latest").await.unwrap(), "the nodes pull");
    let caps = e.capabilities();
    assert_eq!(caps.placement, gpuhub_driver::Placement::Engine);
    assert!(caps.exec && caps.ingress && !caps.usage && !caps.gpu_shares);
    assert!(matches!(e.usage("r").await.unwrap_err(), EngineError::Unsupported { .. }));
}

const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/gpuhub/deployments";

/// The Deployment named `r` as the API server answers a patch of it.
fn deployment_r() -> Reply {
    Reply::Json(
        200,
        json!({ "apiVersion": "apps/v1", "kind": "Deployment", "metadata": { "name": "r" },
            "spec": { "selector": { "matchLabels": { "gpuhub.run": "r" } }, "template": {} } }),
    )
}

/// Deployment `r` at `generation` with `replicas` pods (one of the current template, available), and
/// its status's `conditions`.
fn deployment(generation: i64, replicas: i64, conditions: serde_json::Value) -> serde_json::Value {
    json!({ "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": "r", "generation": generation, "labels": { "gpuhub.run": "r" } },
        "spec": { "replicas": 1, "selector": { "matchLabels": { "gpuhub.run": "r" } }, "template": {} },
        "status": { "observedGeneration": generation, "replicas": replicas, "updatedReplicas": 1, "availableReplicas": 1,
            "conditions": conditions } })
}

/// Where a service's rollout stands is read from its Deployment and pods at each look: complete once
/// only the new pod is left; failed, with Kubernetes' reason, where the new pod crash-loops (before the
/// deadline) or the Deployment reports `ProgressDeadlineExceeded`.
#[tokio::test]
async fn a_stalled_rollout_is_reported_with_its_reason() {
    let stage = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let at = stage.clone();
    let (e, _) = engine(KubeConfig::default(), move |s| {
        let stage = at.load(std::sync::atomic::Ordering::SeqCst);
        let mut old = pod(0, running());
        old["spec"]["restartPolicy"] = json!("Always");
        old["status"]["conditions"] = json!([{ "type": "Ready", "status": "True" }]);
        let mut new = pod(
            0,
            container(
                "Running",
                json!({ "waiting": { "reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container" } }),
            ),
        );
        new["metadata"]["name"] = json!("r-7f9c-new");
        new["spec"]["restartPolicy"] = json!("Always");
        new["status"]["containerStatuses"][0]["restartCount"] = json!(3);
        new["status"]["containerStatuses"][0]["lastState"] =
            json!({ "terminated": { "exitCode": 1, "reason": "Error" } });
        match (s.method.as_str(), s.path.as_str(), stage) {
            ("GET", PODS, 0) => list("PodList", vec![old]),
            ("GET", PODS, _) => list("PodList", vec![old, new]),
            ("GET", JOBS, _) => list("JobList", vec![]),
            ("GET", DEPLOYMENTS, 0) => list(
                "DeploymentList",
                vec![deployment(
                    1,
                    1,
                    json!([{ "type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable" }]),
                )],
            ),
            ("GET", DEPLOYMENTS, 1) => list(
                "DeploymentList",
                vec![deployment(
                    2,
                    2,
                    json!([{ "type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated" }]),
                )],
            ),
            ("GET", DEPLOYMENTS, _) => list(
                "DeploymentList",
                vec![deployment(
                    2,
                    2,
                    json!([{ "type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "ReplicaSet \"r-7f9c\" has timed out progressing." }]),
                )],
            ),
            _ => status(404, "NotFound", "unexpected"),
        }
    });
    let labels = |r: gpuhub_driver::RunStatus| {
        (r.labels.get("gpuhub.rollout").cloned(), r.labels.get("gpuhub.rollout.why").cloned())
    };
    assert_eq!(labels(e.observe("r").await.unwrap()), (Some("complete".into()), None));
    stage.store(1, std::sync::atomic::Ordering::SeqCst);
    let (state, why) = labels(e.observe("r").await.unwrap());
    assert_eq!(state.as_deref(), Some("failed"));
    assert_eq!(
        why.as_deref(),
        Some("the new pod r-7f9c-new crash-loops (CrashLoopBackOff, restarted 3 times, its last exit code 1)")
    );
    stage.store(2, std::sync::atomic::Ordering::SeqCst);
    let (state, why) = labels(e.observe("r").await.unwrap());
    assert_eq!(state.as_deref(), Some("failed"));
    assert!(
        why.unwrap().contains("stalled (ProgressDeadlineExceeded): ReplicaSet \"r-7f9c\" has timed out progressing.")
    );
}

/// A service's run is a Deployment of one replica (its pod restarted by the kubelet, its readiness
/// check a probe, rolled out by a rolling update that keeps the old pod until the new one is ready):
/// an update patches its template (a rollout), its status comes from the ready pod while two run and
/// counts the kubelet's restarts, a stop scales it to nothing, remove deletes it.
#[tokio::test]
async fn a_service_is_a_deployment_rolled_out_scaled_to_nothing_and_removed() {
    let served = || {
        let mut p = pod(0, running());
        p["spec"]["restartPolicy"] = json!("Always");
        p["status"]["conditions"] = json!([{ "type": "Ready", "status": "True" }]);
        p["status"]["containerStatuses"][0]["restartCount"] = json!(2);
        p
    };
    let (e, seen) = engine(KubeConfig::default(), move |s| match (s.method.as_str(), s.path.as_str()) {
        ("POST", DEPLOYMENTS) => created(s),
        ("PATCH", p) if p == format!("{DEPLOYMENTS}/r") => deployment_r(),
        ("GET", PODS) if s.query.contains("fieldSelector") => list("PodList", vec![]),
        ("GET", PODS) => {
            // the rollout's new pod, created later, not ready yet, beside the serving one
            let mut new = pod(0, container("Running", json!({ "running": {} })));
            new["metadata"]["name"] = json!("r-7f9c-new");
            new["metadata"]["creationTimestamp"] = json!("2026-11-26T07:00:00Z");
            new["spec"]["restartPolicy"] = json!("Always");
            list("PodList", vec![served(), new])
        }
        ("GET", JOBS) => list("JobList", vec![]),
        ("GET", DEPLOYMENTS) => list("DeploymentList", vec![deployment(2, 2, json!([]))]),
        ("PATCH", p) if p == format!("{PODS}/r-0") || p == format!("{PODS}/r-7f9c-new") => Reply::Json(200, served()),
        ("DELETE", JOBS | PODS) => list(if s.path == JOBS { "JobList" } else { "PodList" }, vec![]),
        ("DELETE", p) if p == format!("{DEPLOYMENTS}/r") => {
            Reply::Json(200, json!({ "kind": "Status", "apiVersion": "v1", "status": "Success" }))
        }
        _ => status(404, "NotFound", "unexpected"),
    });
    let mut service = spec("service", 1);
    service.labels.insert("gpuhub.service.port".into(), "8080".into());
    service.labels.insert("gpuhub.service.ready".into(), r#"{"http":"/healthz"}"#.into());
    let run = e.submit(&service).await.unwrap();
    assert_eq!((run.id.as_str(), run.members.len()), ("r", 1));
    let mut update = service.clone();
    update.name = "r-with-another-attempt".into();
    update.image = "busybox:2".into();
    assert!(e.roll("r", &update).await.unwrap());
    let seen_run = e.observe("r").await.unwrap();
    e.cancel("r", Duration::from_secs(1)).await.unwrap();
    e.remove("r").await.unwrap();

    let seen = seen.all();
    let lines: Vec<_> = seen.iter().map(mock::Seen::line).collect();
    assert_eq!(lines[0], format!("POST {DEPLOYMENTS}"), "no bare pod: {lines:?}");
    assert!(!lines.contains(&format!("POST {PODS}")), "{lines:?}");
    let d = &seen[0].body;
    assert_eq!((d["metadata"]["name"].clone(), d["spec"]["replicas"].clone()), (json!("r"), json!(1)));
    assert_eq!(d["spec"]["selector"]["matchLabels"], json!({ "gpuhub.run": "r" }));
    assert_eq!(
        d["spec"]["strategy"],
        json!({ "type": "RollingUpdate", "rollingUpdate": { "maxSurge": 1, "maxUnavailable": 0 } })
    );
    let tpl = &d["spec"]["template"];
    assert_eq!(tpl["metadata"]["labels"]["gpuhub.member"], "0");
    assert_eq!(tpl["spec"]["restartPolicy"], "Always");
    assert_eq!(tpl["spec"]["securityContext"]["runAsUser"], 1001, "run as the owner, as a workspace");
    let probe = &tpl["spec"]["containers"][0]["readinessProbe"];
    assert_eq!(probe["httpGet"], json!({ "path": "/healthz", "port": 8080 }));
    // the update: the template of the same Deployment, with the new terms
    let roll = seen.iter().find(|s| s.method == "PATCH" && s.path == format!("{DEPLOYMENTS}/r")).unwrap();
    assert_eq!(roll.body["spec"]["template"]["spec"]["containers"][0]["image"], "busybox:2");
    assert_eq!(roll.body["spec"]["template"]["metadata"]["labels"]["gpuhub.run"], "r");
    // while both pods run, the ready one is the member; the kubelet's restarts are reported
    assert_eq!(seen_run.members.len(), 1, "{seen_run:?}");
    assert_eq!(seen_run.members[0].engine_id, "r-0");
    assert_eq!(seen_run.labels.get("gpuhub.restarts").map(String::as_str), Some("2"));
    assert_eq!(seen_run.labels.get("gpuhub.rollout").map(String::as_str), Some("progressing"), "{seen_run:?}");
    // a stop scales it to nothing first, so no pod replaces the stopped one
    let scale = seen.iter().filter(|s| s.method == "PATCH" && s.path == format!("{DEPLOYMENTS}/r")).nth(1);
    assert_eq!(scale.unwrap().body, json!({ "spec": { "replicas": 0 } }));
    assert!(lines.contains(&format!("DELETE {DEPLOYMENTS}/r")), "{lines:?}");
}

#[tokio::test]
async fn a_home_claim_is_made_on_first_use_and_kept_after() {
    const CLAIMS: &str = "/api/v1/namespaces/gpuhub/persistentvolumeclaims";
    let made = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let m = made.clone();
    let config = KubeConfig { home_storage_class: Some("cephfs".into()), ..Default::default() };
    let (e, seen) = engine(config, move |s| match (s.method.as_str(), s.path.as_str()) {
        // the first run makes it, the next finds it there (409 AlreadyExists)
        ("POST", CLAIMS) if !m.swap(true, std::sync::atomic::Ordering::SeqCst) => created(s),
        ("POST", CLAIMS) => status(409, "AlreadyExists", "persistentvolumeclaims \"home-alice\" already exists"),
        ("POST", PODS) => created(s),
        _ => status(404, "NotFound", "unexpected"),
    });
    let mut ws = spec("workspace", 1);
    ws.mounts.push(gpuhub_driver::Mount {
        source: "/srv/homes/alice".into(),
        target: "/home/alice".into(),
        read_only: false,
        nfs: None,
    });
    e.submit(&ws).await.unwrap();
    ws.name = "r2".into();
    e.submit(&ws).await.expect("a home claim already there is the user's");
    let seen = seen.all();
    let lines: Vec<String> = seen.iter().map(mock::Seen::line).collect();
    let (claim, pod) = (format!("POST {CLAIMS}"), format!("POST {PODS}"));
    assert_eq!(lines, [claim.clone(), pod.clone(), claim, pod]);
    assert_eq!(seen[0].body["metadata"]["name"], "home-alice");
    assert_eq!(seen[0].body["spec"]["storageClassName"], "cephfs");
    assert_eq!(seen[0].body["spec"]["resources"]["requests"]["storage"], "10Gi");
    assert_eq!(seen[1].body["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"], "home-alice");
    assert_eq!(seen[1].body["spec"]["securityContext"]["fsGroup"], 1001);
}
