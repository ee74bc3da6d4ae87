//! The service account's rights are exactly what the engine uses: every API call the engine makes
//! (recorded against the mocked API server, one call of every operation) is in
//! [`gpuhub_kube::REQUIRED_RBAC`], and the Role and ClusterRole of `deploy/kubernetes/rbac.yaml` and of
//! the Helm chart grant every rule of that list and nothing more.

mod mock;

use futures::StreamExt;
use gpuhub_driver::{Engine, Identity, LABEL_INSTANCE, LABEL_WORKLOAD, MemberRef, RunSpec};
use gpuhub_kube::{KubeConfig, REQUIRED_RBAC};
use mock::{Reply, exited, list, pod, running};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// (API group, resource with subresource, verb, cluster-wide) of a request.
fn rbac_of(s: &mock::Seen) -> (String, String, String, bool) {
    let seg: Vec<&str> = s.path.trim_start_matches('/').split('/').collect();
    let (group, rest) = match seg[0] {
        "api" => ("", &seg[2..]),
        _ => (seg[1], &seg[3..]),
    };
    let (cluster, rest) = match rest {
        ["namespaces", _, rest @ ..] => (false, rest),
        rest => (true, rest),
    };
    let resource = match rest {
        [r, _, sub] => format!("{r}/{sub}"),
        [r, ..] => (*r).to_owned(),
        [] => String::new(),
    };
    let named = rest.len() >= 2;
    let verb = match (s.method.as_str(), named) {
        ("GET", false) if s.query.contains("watch=true") => "watch",
        ("GET", false) => "list",
        // a websocket upgrade (exec, port-forward) is authorised as create
        ("GET", true) if resource.ends_with("/exec") || resource.ends_with("/portforward") => "create",
        ("GET", true) => "get",
        ("POST", _) => "create",
        ("PATCH", _) => "patch",
        ("PUT", _) => "update",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        (m, _) => panic!("unexpected method {m}"),
    };
    (group.to_owned(), resource, verb.to_owned(), cluster)
}

/// Run `r` of user `a` (uid 1001) with a home mount, two members of 0.1 core and 1 MiB placed by the
/// cluster.
fn spec() -> RunSpec {
    let mut spec = RunSpec {
        image: "busybox".into(),
        labels: BTreeMap::from([
            (LABEL_WORKLOAD.to_owned(), "w-1".to_owned()),
            (LABEL_INSTANCE.to_owned(), "inst".to_owned()),
            ("gpuhub.kind".to_owned(), "job".to_owned()),
        ]),
        identity: Identity {
            username: "a".into(),
            account: "a".into(),
            uid: 1001,
            gid: 1001,
            home: "/home/a".into(),
            groups: vec![],
        },
        mounts: vec![gpuhub_driver::Mount {
            source: "/srv/homes/a".into(),
            target: "/home/a".into(),
            read_only: false,
            nfs: None,
        }],
        pids_limit: 100,
        ..gpuhub_testkit::run_spec("r", 2)
    };
    for m in &mut spec.members {
        (m.node, m.cpu_milli, m.memory_bytes) = (None, 100, 1 << 20);
    }
    spec
}

#[tokio::test]
async fn every_call_the_engine_makes_is_in_required_rbac() {
    let config = KubeConfig { volcano: true, home_storage_class: Some("fast".into()), ..Default::default() };
    let handler = |s: &mock::Seen| {
        let named = s.path.trim_end_matches('/').rsplit('/').next().is_some_and(|last| last.starts_with("r"));
        match s.method.as_str() {
            "GET" if s.query.contains("watch=true") => Reply::Hang,
            "GET" if s.path.ends_with("/log") => Reply::Raw(200, b"x\n".to_vec()),
            "GET" if s.path.ends_with("/nodes") => list(
                "NodeList",
                vec![json!({
                    "metadata": { "name": "node1" },
                    "status": { "allocatable": { "cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4" }, "conditions": [{ "type": "Ready", "status": "True" }] },
                })],
            ),
            "GET" if s.path.ends_with("/jobs") => list(
                "JobList",
                vec![json!({
                    "apiVersion": "batch/v1", "kind": "Job",
                    "metadata": { "name": "r-1", "labels": { "gpuhub.run": "r", "gpuhub.member": "1", "gpuhub.members": "2" } },
                    "status": {},
                })],
            ),
            "GET" if s.path.ends_with("/deployments") => list("DeploymentList", vec![]),
            // the cluster's live pods, for a gang gpuhub admits
            "GET" if s.path == "/api/v1/pods" => list("PodList", vec![pod(0, running())]),
            "GET" if s.query.contains("gpuhub.run=rg") => {
                let gated = |i: u32| {
                    let mut p = pod(i, json!({ "phase": "Pending" }));
                    p["metadata"]["name"] = json!(format!("rg-{i}"));
                    p["metadata"]["labels"]["gpuhub.run"] = json!("rg");
                    p["spec"].as_object_mut().unwrap().remove("nodeName");
                    p["spec"]["schedulingGates"] = json!([{ "name": gpuhub_kube::gang::GANG_GATE }]);
                    p
                };
                list("PodList", vec![gated(0), gated(1)])
            }
            "GET" if s.query.contains("fieldSelector") => list("PodList", vec![pod(0, exited(143, "Error"))]),
            "GET" if s.query.contains("gpuhub.run=rs") => {
                let mut served = pod(0, running());
                served["spec"]["restartPolicy"] = json!("Always");
                list("PodList", vec![served])
            }
            "GET" if s.query.contains("gpuhub.member=0") => list("PodList", vec![pod(0, running())]),
            "GET" => {
                let mut waiting = pod(1, json!({ "phase": "Pending" }));
                waiting["spec"].as_object_mut().unwrap().remove("nodeName");
                list("PodList", vec![pod(0, running()), waiting])
            }
            "POST" => {
                let mut o = s.body.clone();
                o["metadata"]["uid"] = json!("u");
                Reply::Json(201, o)
            }
            "PATCH" if s.path.contains("/deployments/") => Reply::Json(
                200,
                json!({ "apiVersion": "apps/v1", "kind": "Deployment", "metadata": { "name": "rs" }, "spec": {
                    "selector": { "matchLabels": { "gpuhub.run": "rs" } }, "template": {} } }),
            ),
            "PATCH" => Reply::Json(200, pod(0, running())),
            "DELETE" if named => Reply::Json(200, json!({ "kind": "Status", "apiVersion": "v1", "status": "Success" })),
            "DELETE" if s.path.ends_with("/jobs") => list("JobList", vec![]),
            "DELETE" => list("PodList", vec![pod(0, running())]),
            _ => mock::status(405, "MethodNotAllowed", "unexpected"),
        }
    };
    let (e, seen) = mock::engine(config, handler);
    e.submit(&spec()).await.unwrap();
    // a gang without volcano: gated, then admitted by gpuhub (the nodes, the cluster's pods, pin, ungate)
    let (plain, plain_seen) = mock::engine(KubeConfig::default(), handler);
    let mut gang = spec();
    gang.name = "rg".into();
    plain.submit(&gang).await.unwrap();
    let gates: Vec<_> = plain_seen.all().iter().filter(|s| s.method == "PATCH").map(|s| s.path.clone()).collect();
    let all: Vec<_> = plain_seen.all().iter().map(|s| format!("{} {}", s.line(), s.query)).collect();
    assert_eq!(gates.len(), 4, "each of the two pods pinned, then ungated: {all:#?}");
    let mut workspace = spec();
    workspace.labels.insert("gpuhub.kind".into(), "workspace".into());
    workspace.members.truncate(1);
    e.submit(&workspace).await.unwrap();
    // a service: its Deployment made, rolled out (where it stands read), scaled to nothing by a stop
    let mut service = workspace.clone();
    service.name = "rs".into();
    service.labels.insert("gpuhub.kind".into(), "service".into());
    service.labels.insert("gpuhub.service.port".into(), "8080".into());
    e.submit(&service).await.unwrap();
    assert!(e.roll("rs", &service).await.unwrap());
    let _ = e.observe("rs").await; // the mock's pod is labelled run r: only the calls count here
    e.cancel("rs", Duration::from_secs(1)).await.unwrap();
    e.observe("r").await.unwrap();
    e.list_runs().await.unwrap();
    e.inventory().await.unwrap();
    let m = MemberRef::new("r", 0);
    e.logs(&m, true, None).await.unwrap().collect::<Vec<_>>().await;
    e.endpoint(&m, 8888).await.unwrap();
    // usage figures from the metrics api
    e.probe_metrics().await;
    e.usage("r").await.unwrap();
    e.cancel("r", Duration::from_secs(1)).await.unwrap();
    e.remove("r").await.unwrap();
    let mut events = e.events().await.unwrap();
    // the watch's first listing and its watch are made; nothing comes
    assert!(tokio::time::timeout(Duration::from_millis(300), events.next()).await.is_err());
    let calls: BTreeSet<_> = seen.all().iter().chain(plain_seen.all().iter()).map(rbac_of).collect();
    for (group, resource, verb, cluster) in &calls {
        let rule = REQUIRED_RBAC.iter().find(|r| r.group == group && r.resource == resource && r.cluster == *cluster);
        assert!(
            rule.is_some_and(|r| r.verbs.contains(&verb.as_str())),
            "the engine calls {verb} on {group}/{resource}, which REQUIRED_RBAC lacks"
        );
    }
    // and every rule but exec (its websocket is tested in exec.rs) and port-forward (below) is used
    for r in REQUIRED_RBAC.iter().filter(|r| r.resource != "pods/exec" && r.resource != "pods/portforward") {
        for v in r.verbs {
            assert!(
                calls.iter().any(|(g, res, verb, c)| g == r.group && res == r.resource && verb == v && *c == r.cluster),
                "REQUIRED_RBAC grants {v} on {}/{} that no call uses",
                r.group,
                r.resource
            );
        }
    }
}

#[tokio::test]
async fn a_port_forward_is_in_required_rbac() {
    let config = KubeConfig { app_access: gpuhub_kube::AppAccess::PortForward, ..Default::default() };
    let (e, seen) = mock::engine(config, |s| match s.method.as_str() {
        "GET" if s.path.ends_with("/portforward") => mock::status(403, "Forbidden", "not in this mock"),
        "GET" => list("PodList", vec![pod(0, running())]),
        _ => mock::status(405, "MethodNotAllowed", "unexpected"),
    });
    let at = e.endpoint(&MemberRef::new("r", 0), 8888).await.unwrap();
    assert!(at.ip().is_loopback(), "the forward's local end: {at}");
    assert_eq!(e.endpoint(&MemberRef::new("r", 0), 8888).await.unwrap(), at, "one listener per pod and port");
    // a connection to it is one port-forward of the pod's port
    let _conn = tokio::net::TcpStream::connect(at).await.unwrap();
    let forward = seen
        .wait_for("a port-forward asked of the api server", |seen| {
            seen.iter().find(|s| s.path.ends_with("/portforward")).cloned()
        })
        .await
        .unwrap();
    assert_eq!(forward.path, "/api/v1/namespaces/gpuhub/pods/r-0/portforward");
    assert!(forward.query.contains("ports=8888"), "{}", forward.query);
    let (group, resource, verb, cluster) = rbac_of(&forward);
    let rule = REQUIRED_RBAC.iter().find(|r| r.group == group && r.resource == resource && r.cluster == cluster);
    assert!(rule.is_some_and(|r| r.verbs == [verb.as_str()]), "{group}/{resource} {verb} in REQUIRED_RBAC");
    // removing the run closes its forward's listener
    let _ = e.remove("r").await;
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        while tokio::net::TcpStream::connect(at).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    assert!(closed.await.is_ok(), "the forward's listener is closed once its run is removed");
}

/// (group, resource, verb) granted by the rules of every object of `kind` in `docs`.
fn granted(docs: &[Value], kind: &str) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for d in docs.iter().filter(|d| d["kind"] == kind) {
        for rule in d["rules"].as_array().unwrap() {
            for g in rule["apiGroups"].as_array().unwrap() {
                for r in rule["resources"].as_array().unwrap() {
                    for v in rule["verbs"].as_array().unwrap() {
                        let (g, r, v) = (g.as_str().unwrap(), r.as_str().unwrap(), v.as_str().unwrap());
                        assert!(g != "*" && r != "*" && v != "*", "a wildcard in {kind}: {rule}");
                        out.insert((g.to_owned(), r.to_owned(), v.to_owned()));
                    }
                }
            }
        }
    }
    out
}

fn check(path: &str, text: &str) {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).unwrap_or_else(|e| panic!("{path}: {e}"));
    let need = |cluster: bool| -> BTreeSet<(String, String, String)> {
        REQUIRED_RBAC
            .iter()
            .filter(|r| r.cluster == cluster)
            .flat_map(|r| r.verbs.iter().map(|v| (r.group.to_owned(), r.resource.to_owned(), (*v).to_owned())))
            .collect()
    };
    assert_eq!(granted(&docs, "Role"), need(false), "{path}: the Role is not REQUIRED_RBAC's namespaced rules");
    assert_eq!(
        granted(&docs, "ClusterRole"),
        need(true),
        "{path}: the ClusterRole is not REQUIRED_RBAC's cluster rules"
    );
    for (binding, role) in [("RoleBinding", "Role"), ("ClusterRoleBinding", "ClusterRole")] {
        let b = docs.iter().find(|d| d["kind"] == binding).unwrap_or_else(|| panic!("{path}: no {binding}"));
        assert_eq!(b["roleRef"]["kind"], role, "{path}");
        assert_eq!(b["subjects"][0]["kind"], "ServiceAccount", "{path}");
        assert_eq!(b["subjects"][0]["name"], "gpuhub", "{path}");
    }
    assert!(docs.iter().any(|d| d["kind"] == "ServiceAccount" && d["metadata"]["name"] == "gpuhub"), "{path}");
}

#[test]
fn the_manifests_and_the_chart_grant_exactly_required_rbac() {
    check("deploy/kubernetes/rbac.yaml", include_str!("../../../deploy/kubernetes/rbac.yaml"));
    check("deploy/helm/gpuhub/templates/rbac.yaml", include_str!("../../../deploy/helm/gpuhub/templates/rbac.yaml"));
}

#[test]
fn a_broader_role_is_caught() {
    let text = include_str!("../../../deploy/kubernetes/rbac.yaml")
        .replace("\"list\", \"patch\", \"watch\"]", "\"list\", \"patch\", \"watch\", \"get\"]");
    assert!(
        std::panic::catch_unwind(|| check("broader", &text)).is_err(),
        "a role granting more than REQUIRED_RBAC passes"
    );
    let text =
        include_str!("../../../deploy/kubernetes/rbac.yaml").replace("resources: [\"pods/log\"]", "resources: [\"*\"]");
    assert!(std::panic::catch_unwind(|| check("wildcard", &text)).is_err());
}
