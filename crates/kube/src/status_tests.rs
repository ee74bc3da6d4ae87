use super::*;
use serde_json::json;

/// A member's pod as the API server returns it (fields as in the Kubernetes API reference, Pod v1).
pub(crate) fn pod(member: u32, status: serde_json::Value, extra_annotations: serde_json::Value) -> Pod {
    let mut annotations = json!({ "gpuhub.io/labels": "{\"gpuhub.workload\":\"w-1\",\"gpuhub.instance\":\"inst\"}" });
    if let (Some(a), Some(x)) = (annotations.as_object_mut(), extra_annotations.as_object()) {
        a.extend(x.clone());
    }
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("r-{member}"),
            "uid": format!("uid-{member}"),
            "labels": { "gpuhub.run": "r", "gpuhub.member": member.to_string(), "gpuhub.members": "2", "gpuhub.workload": "w-1" },
            "annotations": annotations,
        },
        "spec": {
            "nodeName": "gpu1",
            "containers": [{ "name": "member", "image": "busybox", "resources": { "limits": { "nvidia.com/gpu": "1" } } }],
        },
        "status": status,
    }))
    .unwrap()
}

fn terminated(phase: &str, code: i32, reason: &str) -> serde_json::Value {
    json!({
        "phase": phase,
        "containerStatuses": [{
            "name": "member", "image": "busybox", "imageID": "", "ready": false, "restartCount": 0,
            "state": { "terminated": { "exitCode": code, "reason": reason } },
        }],
    })
}

#[test]
fn phases_and_exit_codes() {
    let running = pod(
        0,
        json!({ "phase": "Running", "containerStatuses": [{ "name": "member", "image": "b", "imageID": "", "ready": true, "restartCount": 0, "state": { "running": {} } }] }),
        json!({}),
    );
    assert_eq!(member_state(&running), MemberState::Running);
    assert_eq!(member_state(&pod(0, terminated("Succeeded", 0, "Completed"), json!({}))), MemberState::Exited(0));
    assert_eq!(member_state(&pod(0, terminated("Failed", 3, "Error"), json!({}))), MemberState::Exited(3));
    // OOMKilled: the kernel's SIGKILL, 137, as on Docker; the run's own end
    let oom = pod(0, terminated("Failed", 137, "OOMKilled"), json!({}));
    assert_eq!(member_state(&oom), MemberState::Exited(137));
    assert_eq!(ended_by(&oom), None);
    assert_eq!(member_state(&pod(0, json!({ "phase": "Pending" }), json!({}))), MemberState::Pending);
}

#[test]
fn the_clusters_own_ends_are_typed() {
    // evicted by the kubelet (node pressure): no container status is left
    let evicted = pod(
        0,
        json!({ "phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory." }),
        json!({}),
    );
    assert_eq!(member_state(&evicted), MemberState::Exited(KILLED));
    assert_eq!(ended_by(&evicted), Some(ENDED_BY_EVICTED));
    let drained = pod(
        0,
        json!({ "phase": "Failed", "conditions": [{ "type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI" }] }),
        json!({}),
    );
    assert_eq!(ended_by(&drained), Some(ENDED_BY_EVICTED));
    let preempted = pod(
        1,
        json!({ "phase": "Failed", "conditions": [{ "type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler" }] }),
        json!({}),
    );
    assert_eq!(ended_by(&preempted), Some(ENDED_BY_PREEMPTED));
    let lost = pod(
        0,
        json!({ "phase": "Failed", "conditions": [{ "type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager" }] }),
        json!({}),
    );
    assert_eq!(ended_by(&lost), Some(gpuhub_driver::ENDED_BY_NODE_FAIL));
    let node_lost = pod(0, json!({ "phase": "Failed", "reason": "NodeLost" }), json!({}));
    assert_eq!(ended_by(&node_lost), Some(gpuhub_driver::ENDED_BY_NODE_FAIL));
    let deadline = json!({ "phase": "Failed", "reason": "DeadlineExceeded" });
    assert_eq!(ended_by(&pod(0, deadline.clone(), json!({}))), Some(ENDED_BY_DEADLINE));
    // gpuhub's own stop is no end of the cluster's
    assert_eq!(ended_by(&pod(0, deadline, json!({ "gpuhub.io/cancelled": "true" }))), None);
    let not_true = pod(
        0,
        json!({ "phase": "Running", "conditions": [{ "type": "DisruptionTarget", "status": "False", "reason": "PreemptionByScheduler" }] }),
        json!({}),
    );
    assert_eq!(ended_by(&not_true), None);
}

#[test]
fn a_run_of_pods_with_why_it_waits() {
    let unschedulable = json!({ "phase": "Pending", "conditions": [{ "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu." }] });
    let pods = [pod(1, unschedulable.clone(), json!({})), pod(0, unschedulable, json!({}))];
    let runs = runs(&pods, "nvidia.com/gpu");
    assert_eq!(runs.len(), 1);
    let r = &runs[0];
    assert_eq!((r.id.as_str(), r.size, r.workload()), ("r", 2, Some("w-1")));
    assert_eq!(r.members.iter().map(|m| m.index).collect::<Vec<_>>(), [0, 1]);
    assert_eq!(r.members[0].gpus, ["gpu1/gpu0"]);
    let p = r.pending.as_ref().unwrap();
    assert_eq!(p.reason, "resources");
    assert!(p.message.contains("Insufficient nvidia.com/gpu"), "{}", p.message);
    let image = json!({ "phase": "Pending", "containerStatuses": [{ "name": "member", "image": "b", "imageID": "", "ready": false, "restartCount": 0, "state": { "waiting": { "reason": "ImagePullBackOff", "message": "Back-off pulling image \"nope\"" } } }] });
    let pending = pending(&pod(0, image, json!({}))).unwrap();
    assert_eq!(pending.reason, "image");
    assert!(pending.message.contains("ImagePullBackOff"));
    // one member preempted: the run carries the cluster's word
    let pods = [
        pod(0, terminated("Failed", 143, "Error"), json!({})),
        pod(
            1,
            json!({ "phase": "Failed", "conditions": [{ "type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler" }] }),
            json!({}),
        ),
    ];
    let r = run_status("r", &pods.iter().collect::<Vec<_>>(), "nvidia.com/gpu");
    assert_eq!(r.ended_by_engine(), Some(ENDED_BY_PREEMPTED));
    assert!(r.ended());
    assert!(r.pending.is_none());
}

#[test]
fn a_services_pod_runs_on_between_its_containers_restarts() {
    // the kubelet restarts it (restartPolicy Always): its container's end is no end of the member
    let mut p = pod(0, terminated("Running", 1, "Error"), json!({}));
    assert_eq!(member_state(&p), MemberState::Exited(1), "a pod nobody restarts ended");
    p.spec.as_mut().unwrap().restart_policy = Some("Always".into());
    assert!(restarts_itself(&p) && !ready(&p));
    assert_eq!(member_state(&p), MemberState::Running);
    // its phase still ends it (a scale to nothing, an eviction)
    let mut failed = pod(0, terminated("Failed", 137, "Error"), json!({}));
    failed.spec.as_mut().unwrap().restart_policy = Some("Always".into());
    assert_eq!(member_state(&failed), MemberState::Exited(137));
}
