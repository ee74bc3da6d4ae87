//! What every handler shares.

use crate::auth::LoginLimiter;
use crate::config::Config;
use crate::controller::ControllerHandle;
use gpuhub_core::node::NodeCapacity;
use gpuhub_driver::Runtime;
use gpuhub_store::Store;
use std::path::PathBuf;
use std::sync::Arc;

/// The server's shared state; cheap to clone.
#[derive(Debug, Clone)]
pub struct AppState {
    pub store: Store,
    pub runtime: Arc<dyn Runtime>,
    pub config: Arc<Config>,
    /// What this node offers (CPUs and memory after the host's reserve, GPUs from NVML or config).
    pub node: Arc<NodeCapacity>,
    pub controller: ControllerHandle,
    pub limiter: Arc<LoginLimiter>,
    /// Absolute data directory.
    pub data_dir: PathBuf,
    /// Connections to workspace apps.
    pub http_client: gpuhub_proxy::HttpClient,
    /// Where the SSH gateway listens, once bound.
    pub ssh_addr: Option<std::net::SocketAddr>,
}
