//! The MPS daemons of GPUs in the `mps` sharing mode, as the controller needs them: started and
//! answering before a run holding a share of such a GPU is submitted, stopped once no share holds the
//! GPU. The controller knows nothing of MPS itself; the server hands it an implementation (over
//! `gpuhub-mps`'s supervisor) in [`crate::Settings::mps`].
//!
//! Order matters: a CUDA client that initialises before its GPU's daemon answers runs without MPS, that
//! is without the share's limits, and nothing tells it later. So a share whose daemon cannot be made to
//! answer is not started at all: the workload goes back to the queue with the daemon's error as its
//! message, and is tried again at the next pass.

use crate::Controller;
use futures::future::BoxFuture;
use gpuhub_core::node::{GpuSharing, NodeCapacity};
use gpuhub_core::workload::{Workload, WorkloadState};
use gpuhub_store::WorkloadFilter;
use std::collections::BTreeSet;
use std::path::PathBuf;

/// Where a client container reaches the MPS daemon of one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpsEndpoint {
    /// The daemon's pipe directory on the host, mounted read-write at [`crate::spec::MPS_PIPE_TARGET`].
    pub pipe_dir: PathBuf,
    /// The daemon's shared-memory tmpfs on the host, mounted as the container's `/dev/shm`.
    pub shm_dir: PathBuf,
}

/// The MPS control daemons of this host's GPUs, one per GPU.
pub trait MpsDaemons: Send + Sync + std::fmt::Debug {
    /// Makes GPU `uuid`'s daemon run and answer (starting it if needed); `Err` says why it does not, in
    /// words for the workload's owner.
    fn ensure<'a>(&'a self, uuid: &'a str) -> BoxFuture<'a, Result<MpsEndpoint, String>>;

    /// Keeps the daemons of exactly the GPUs in `wanted` (those holding MPS shares): stops the others, and
    /// starts (without waiting) those not yet supervised, such as after a restart of gpuhub.
    fn retain(&self, wanted: &BTreeSet<String>);
}

/// Whether GPU `uuid` of `nodes` is in the `mps` sharing mode.
pub fn is_mps_gpu(nodes: &[NodeCapacity], uuid: &str) -> bool {
    nodes.iter().flat_map(|n| &n.gpus).any(|g| g.uuid == uuid && g.sharing == Some(GpuSharing::Mps))
}

/// The GPUs in the `mps` mode on which `w` holds a share (only shares; whole GPUs are never MPS
/// clients), from the members' recorded GPUs.
pub fn mps_shares(w: &Workload, nodes: &[NodeCapacity]) -> BTreeSet<String> {
    if w.resources.gpus > 0 || w.resources.gpu_milli == 0 {
        return BTreeSet::new();
    }
    w.members.iter().flat_map(|m| &m.gpus).filter(|u| is_mps_gpu(nodes, u)).cloned().collect()
}

impl Controller {
    /// Keeps the MPS daemons of the GPUs that starting or running workloads hold shares of, and only
    /// those (after a restart of gpuhub this also takes the daemons of running shares back under
    /// supervision). Done after every pass; a failed look at the store changes nothing.
    pub(crate) async fn retain_mps(&self) {
        let Some(mps) = self.settings.mps.as_ref() else { return };
        let nodes = self.inventory.capacities();
        let any = nodes.iter().flat_map(|n| &n.gpus).any(|g| g.sharing == Some(GpuSharing::Mps));
        let mut wanted = BTreeSet::new();
        if any {
            let active =
                WorkloadFilter { owner: None, states: Some(vec![WorkloadState::Starting, WorkloadState::Running]) };
            match self.store.list_workloads(&active).await {
                Ok(ws) => wanted.extend(ws.iter().flat_map(|w| mps_shares(w, &nodes))),
                Err(e) => return tracing::warn!(error = %e, "cannot list the workloads holding MPS shares"),
            }
        }
        mps.retain(&wanted);
    }
}
