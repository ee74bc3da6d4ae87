//! A run's pods as gpuhub's [`RunStatus`]: members' states from pod phases and container states,
//! exit codes, why a run waits (the scheduler's `PodScheduled` condition, an image that cannot be
//! pulled), and the ends that are the cluster's rather than the run's own (eviction, preemption, a lost
//! node), as [`LABEL_ENDED_BY`]; where a service's rollout stands ([`rollout_state`]).

use crate::spec::{ANNOTATION_CANCELLED, ANNOTATION_LABELS, CONTAINER};
use gpuhub_driver::{
    ENDED_BY_NODE_FAIL, LABEL_ENDED_BY, LABEL_MEMBER, LABEL_MEMBERS, LABEL_RUN, MemberState, MemberStatus, PendingInfo,
    RunStatus,
};
use k8s_openapi::api::core::v1::Pod;
use std::collections::BTreeMap;

/// [`LABEL_ENDED_BY`] of a member the kubelet evicted (node pressure) or the API evicted (a drain).
pub const ENDED_BY_EVICTED: &str = "evicted";
/// [`LABEL_ENDED_BY`] of a member the scheduler preempted for a pod of higher priority.
pub const ENDED_BY_PREEMPTED: &str = "preempted";
/// [`LABEL_ENDED_BY`] of a member ended by its `activeDeadlineSeconds` that gpuhub did not set.
pub const ENDED_BY_DEADLINE: &str = "deadline-exceeded";

/// The exit code of a member the cluster ended without its container reporting one (evicted before it
/// started, its node lost): killed, as SIGKILL.
pub const KILLED: i64 = 137;

/// The run id and member index of a pod gpuhub made, from its labels.
pub fn member_of(pod: &Pod) -> Option<(String, u32)> {
    let labels = pod.metadata.labels.as_ref()?;
    Some((labels.get(LABEL_RUN)?.clone(), labels.get(LABEL_MEMBER)?.parse().ok()?))
}

/// The gpuhub labels a pod carries (its annotation).
pub fn gpuhub_labels(pod: &Pod) -> BTreeMap<String, String> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_LABELS))
        .and_then(|j| serde_json::from_str(j).ok())
        .unwrap_or_default()
}

/// Whether the kubelet restarts the pod's container when it ends (`restartPolicy: Always`: a service's
/// pod, made by its Deployment): its container's end is no end of the member.
pub fn restarts_itself(pod: &Pod) -> bool {
    pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) == Some("Always")
}

/// Whether the pod's readiness probe passes (its `Ready` condition).
pub fn ready(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.into_iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True")
}

/// How many times the kubelet restarted the pod's container.
pub fn restart_count(pod: &Pod) -> u32 {
    let status = pod.status.as_ref().and_then(|s| s.container_statuses.as_ref());
    let container = status.and_then(|cs| cs.iter().find(|c| c.name == CONTAINER));
    container.map_or(0, |c| u32::try_from(c.restart_count).unwrap_or(0))
}

/// The state of one member's pod.
pub fn member_state(pod: &Pod) -> MemberState {
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    if restarts_itself(pod) && matches!(phase, "Running" | "Pending") {
        // between a container's end and its restart the pod runs on: only its phase ends it
        return if phase == "Running" { MemberState::Running } else { MemberState::Pending };
    }
    let container =
        status.and_then(|s| s.container_statuses.as_ref()).and_then(|cs| cs.iter().find(|c| c.name == CONTAINER));
    let terminated = container.and_then(|c| c.state.as_ref()).and_then(|s| s.terminated.as_ref());
    if let Some(t) = terminated {
        return MemberState::Exited(i64::from(t.exit_code));
    }
    match phase {
        "Succeeded" => MemberState::Exited(0),
        "Failed" => MemberState::Exited(KILLED),
        "Running" => MemberState::Running,
        _ => MemberState::Pending,
    }
}

/// How the cluster ended a member's pod itself, if it did: evicted, preempted, its node lost, or a
/// deadline gpuhub did not set ([`ANNOTATION_CANCELLED`] marks gpuhub's own).
pub fn ended_by(pod: &Pod) -> Option<&'static str> {
    let status = pod.status.as_ref()?;
    let cancelled = pod.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(ANNOTATION_CANCELLED));
    let disruption = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionTarget" && c.status == "True")
        .and_then(|c| c.reason.as_deref());
    match (status.reason.as_deref(), disruption) {
        (_, Some("PreemptionByScheduler")) => Some(ENDED_BY_PREEMPTED),
        (Some("Evicted"), _) | (_, Some("EvictionByEvictionAPI" | "TerminationByKubelet")) => Some(ENDED_BY_EVICTED),
        (Some("NodeLost"), _) | (_, Some("DeletionByTaintManager" | "DeletionByPodGC")) => Some(ENDED_BY_NODE_FAIL),
        (Some("DeadlineExceeded"), _) if !cancelled => Some(ENDED_BY_DEADLINE),
        _ => None,
    }
}

/// Why a waiting member's pod waits, if it does: not scheduled yet, or its image cannot be pulled.
pub fn pending(pod: &Pod) -> Option<PendingInfo> {
    let status = pod.status.as_ref();
    let waiting = status
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == CONTAINER))
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.waiting.as_ref());
    if let Some(w) = waiting
        && let Some(reason @ ("ErrImagePull" | "ImagePullBackOff" | "InvalidImageName")) = w.reason.as_deref()
    {
        let message = w.message.clone().unwrap_or_default();
        return Some(PendingInfo {
            reason: "image".into(),
            message: format!("kubernetes cannot pull the image ({reason}): {message}"),
            position: None,
            estimated_start: None,
        });
    }
    let scheduled =
        status.and_then(|s| s.conditions.as_ref()).and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"));
    match scheduled {
        Some(c) if c.status == "True" => None,
        Some(c) => {
            let reason = c.reason.clone().unwrap_or_default();
            let message = c.message.clone().unwrap_or_default();
            let kind = if message.contains("Insufficient") {
                "resources"
            } else if reason == "Unschedulable" {
                "unschedulable"
            } else {
                "resources"
            };
            Some(PendingInfo {
                reason: kind.into(),
                message: format!("the kubernetes scheduler has not placed it ({reason}): {message}"),
                position: None,
                estimated_start: None,
            })
        }
        None if member_state(pod) == MemberState::Pending => Some(PendingInfo {
            reason: "resources".into(),
            message: "waiting for the kubernetes scheduler".into(),
            position: None,
            estimated_start: None,
        }),
        None => None,
    }
}

/// The runs of `pods` (gpuhub's: the others are left out), by run id.
pub fn runs(pods: &[Pod], gpu_resource: &str) -> Vec<RunStatus> {
    let mut by_run: BTreeMap<String, Vec<&Pod>> = BTreeMap::new();
    for p in pods {
        if let Some((run, _)) = member_of(p) {
            by_run.entry(run).or_default().push(p);
        }
    }
    by_run.into_iter().map(|(run, pods)| run_status(&run, &pods, gpu_resource)).collect()
}

/// One run from its pods (at least one).
pub fn run_status(run: &str, pods: &[&Pod], gpu_resource: &str) -> RunStatus {
    let mut labels = pods.first().map(|p| gpuhub_labels(p)).unwrap_or_default();
    let size = pods
        .iter()
        .find_map(|p| p.metadata.labels.as_ref()?.get(LABEL_MEMBERS)?.parse().ok())
        .unwrap_or(pods.len() as u32);
    // a service's rollout has two pods for its member for a while: the ready one serves (else the
    // running one, else the newest)
    let mut chosen: BTreeMap<u32, &Pod> = BTreeMap::new();
    for p in pods {
        let Some((_, index)) = member_of(p) else { continue };
        let key = |p: &Pod| {
            let created = p.metadata.creation_timestamp.as_ref().map(|t| t.0);
            (ready(p), member_state(p) == MemberState::Running, created)
        };
        if chosen.get(&index).is_none_or(|c| key(p) > key(c)) {
            chosen.insert(index, p);
        }
    }
    let pods: Vec<&Pod> = chosen.into_values().collect();
    if let Some(p) = pods.iter().find(|p| restarts_itself(p)) {
        labels.insert(gpuhub_core::service::LABEL_RESTARTS.to_owned(), restart_count(p).to_string());
    }
    let mut members: Vec<MemberStatus> = pods
        .iter()
        .filter_map(|p| {
            let (_, index) = member_of(p)?;
            let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
            let count = p
                .spec
                .as_ref()
                .and_then(|s| s.containers.iter().find(|c| c.name == CONTAINER))
                .and_then(|c| c.resources.as_ref()?.limits.as_ref()?.get(gpu_resource).cloned())
                .and_then(|q| q.0.parse::<u32>().ok())
                .unwrap_or(0);
            let gpus = match &node {
                Some(n) => (0..count).map(|i| format!("{n}/gpu{i}")).collect(),
                None => Vec::new(),
            };
            Some(MemberStatus {
                index,
                engine_id: p.metadata.name.clone().unwrap_or_default(),
                node,
                state: member_state(p),
                gpus,
            })
        })
        .collect();
    members.sort_by_key(|m| m.index);
    if let Some(how) = pods.iter().find_map(|p| ended_by(p)) {
        labels.insert(LABEL_ENDED_BY.to_owned(), how.to_owned());
    }
    let pending = if members.iter().all(|m| m.state == MemberState::Pending) {
        pods.iter().find_map(|p| pending(p))
    } else {
        None
    };
    RunStatus { id: run.to_owned(), labels, size, members, pending }
}

/// Where the rollout of service Deployment `d` stands, from its status and its pods: failed where
/// Kubernetes says it stalled (`Progressing=False`, `ProgressDeadlineExceeded`) or, before that, where
/// a pod that is not ready crash-loops (`CrashLoopBackOff`) while the Deployment has not completed
/// (the new ReplicaSet's: the old pod serves on); complete once every replica is of the current
/// template and available and no old one is left; else progressing. The state is one of
/// [`gpuhub_core::service`]'s `ROLLOUT_*`, with why where it failed.
pub fn rollout_state(d: &k8s_openapi::api::apps::v1::Deployment, pods: &[&Pod]) -> (&'static str, Option<String>) {
    use gpuhub_core::service::{ROLLOUT_COMPLETE, ROLLOUT_FAILED, ROLLOUT_PROGRESSING};
    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let Some(st) = d.status.as_ref() else { return (ROLLOUT_PROGRESSING, None) };
    let stalled = st.conditions.iter().flatten().find(|c| {
        c.type_ == "Progressing" && c.status == "False" && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
    });
    if let Some(c) = stalled {
        let message = c.message.clone().unwrap_or_default();
        return (
            ROLLOUT_FAILED,
            Some(format!("kubernetes reports the rollout stalled (ProgressDeadlineExceeded): {message}")),
        );
    }
    let observed = st.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(0);
    let updated = st.updated_replicas.unwrap_or(0);
    let complete = observed
        && updated == want
        && st.replicas.unwrap_or(0) == updated
        && st.available_replicas.unwrap_or(0) >= want;
    if complete {
        return (ROLLOUT_COMPLETE, None);
    }
    for p in pods.iter().filter(|p| !ready(p)) {
        let statuses = p.status.as_ref().and_then(|s| s.container_statuses.as_ref());
        let Some(c) = statuses.into_iter().flatten().find(|c| c.name == CONTAINER) else { continue };
        let Some(w) = c.state.as_ref().and_then(|s| s.waiting.as_ref()) else { continue };
        if w.reason.as_deref() == Some("CrashLoopBackOff") {
            let last = c.last_state.as_ref().and_then(|s| s.terminated.as_ref());
            let code = last.map(|t| format!(", its last exit code {}", t.exit_code)).unwrap_or_default();
            return (
                ROLLOUT_FAILED,
                Some(format!(
                    "the new pod {} crash-loops (CrashLoopBackOff, restarted {} times{code})",
                    p.metadata.name.as_deref().unwrap_or("?"),
                    c.restart_count
                )),
            );
        }
    }
    (ROLLOUT_PROGRESSING, None)
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;
