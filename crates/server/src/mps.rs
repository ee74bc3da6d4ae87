//! gpuhub's MPS control daemons in the server: where gpuhub places work and some GPU of the engine's
//! inventory is in the `mps` sharing mode, one `gpuhub_mps::Supervisor` (configured by `[mps]`) is
//! handed to the controller, which makes a GPU's daemon answer before a share of it starts and keeps
//! only the daemons of GPUs holding shares; its health goes to `/metrics` and the Nodes page.

use crate::config::Config;
use futures::future::BoxFuture;
use gpuhub_controller::mps::{MpsDaemons, MpsEndpoint};
use gpuhub_core::node::{GpuSharing, NodeCapacity};
use std::collections::BTreeSet;

/// The supervisor's settings for the configuration's `[mps]`.
pub fn supervisor_config(config: &Config) -> gpuhub_mps::MpsConfig {
    let mut c = gpuhub_mps::MpsConfig::new(config.mps_dir());
    if let Some(p) = &config.mps.control {
        c.program = p.clone();
    }
    c.exclusive_process = config.mps.exclusive_process.then(|| std::path::PathBuf::from("nvidia-smi"));
    c
}

/// The supervisor as the controller's [`MpsDaemons`].
#[derive(Debug, Clone)]
pub struct Daemons(pub gpuhub_mps::Supervisor);

impl MpsDaemons for Daemons {
    fn ensure<'a>(&'a self, uuid: &'a str) -> BoxFuture<'a, Result<MpsEndpoint, String>> {
        Box::pin(async move {
            let e = self.0.ensure(uuid).await.map_err(|e| e.to_string())?;
            Ok(MpsEndpoint { pipe_dir: e.pipe_dir, shm_dir: e.shm_dir })
        })
    }

    fn retain(&self, wanted: &BTreeSet<String>) {
        self.0.retain(wanted);
    }
}

/// The supervisor for `nodes`, when one of their GPUs is in the `mps` mode and gpuhub places work
/// (`placement_by_hub`); none otherwise.
pub fn build(config: &Config, nodes: &[NodeCapacity], placement_by_hub: bool) -> Option<gpuhub_mps::Supervisor> {
    let any = nodes.iter().flat_map(|n| &n.gpus).any(|g| g.sharing == Some(GpuSharing::Mps));
    if !any {
        return None;
    }
    if !placement_by_hub {
        tracing::warn!("gpu_sharing = \"mps\" is ignored where the engine places work: its GPUs share as it decides");
        return None;
    }
    let cfg = supervisor_config(config);
    tracing::info!(dir = %cfg.dirs.gpu_dir("").display(), program = %cfg.program.display(), "mps daemons");
    Some(gpuhub_mps::Supervisor::new(cfg))
}
