//! gpuhub's engine on a Kubernetes cluster: [`KubeEngine`], the [`gpuhub_driver::Engine`] over the
//! Kubernetes API through kube-rs. Only this crate knows Kubernetes.
//!
//! Kubernetes places (as Slurm does): gpuhub submits and follows. A run's id is a DNS label made of its
//! name; member i is the pod `<run>-<i>` (a workspace's or service's pod is gpuhub's own; a job's is the
//! template of the `Job` `<run>-<i>`, `backoffLimit: 0`). Pods carry the selection labels
//! (`gpuhub.instance`, `gpuhub.workload`, `gpuhub.run`, `gpuhub.member`, `gpuhub.members`) and every
//! gpuhub label as JSON in the annotation `gpuhub.io/labels` (how `list_runs` finds runs again after a
//! restart). Members run as the owner's UID/GID, non-root, no privilege escalation, every capability
//! dropped, seccomp `RuntimeDefault`, with requests = limits of CPU, memory and GPUs ([`spec`]). A gang
//! gets a headless service named after the run, so member i is `<host_i>.<run>` and `MASTER_ADDR` is
//! member 0's; with `volcano = true` a `PodGroup` with `minMember` = members as well, else gpuhub
//! admits the gang whole itself ([`gang`]: gated pods, pinned and ungated together once all fit).
//!
//! Stopping keeps the record: a member's pod gets `activeDeadlineSeconds: 1` and the kubelet stops it
//! with its grace, leaving the pod `Failed` with its container's exit code; [`status`] tells the
//! cluster's own ends (eviction, preemption, a lost node) from the run's, as
//! [`gpuhub_driver::LABEL_ENDED_BY`].

mod access;
pub mod config;
pub mod deploy;
mod engine;
mod forward;
pub mod gang;
mod held;
mod imp;
mod metrics;
pub mod rbac;
pub mod spec;
pub mod status;

pub use access::{exec_command, exit_code};
pub use config::{AppAccess, KubeConfig, Sharing};
pub use engine::{CONNECT_TIMEOUT, KubeEngine, MAX_MEMBERS};
pub use imp::{node_of, quantity_bytes, quantity_milli};
pub use metrics::{METRICS_REPROBE, cpu_cores};
pub use rbac::{REQUIRED_RBAC, Rule};

/// The message of an engine error without the variant's prefix.
pub(crate) fn inner_message(e: &gpuhub_driver::EngineError) -> String {
    use gpuhub_driver::EngineError;
    match e {
        EngineError::NotFound(m)
        | EngineError::ImageNotFound(m)
        | EngineError::Rejected(m)
        | EngineError::Engine(m)
        | EngineError::Unavailable(m) => m.clone(),
        e => e.to_string(),
    }
}
