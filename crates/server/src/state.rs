//! What every handler shares.

use crate::auth::LoginLimiter;
use crate::config::Config;
use gpuhub_controller::ControllerHandle;
use gpuhub_controller::clock::Clock;
use gpuhub_core::node::NodeCapacity;
use gpuhub_driver::Engine;
use gpuhub_store::Store;
use std::path::PathBuf;
use std::sync::Arc;

/// The server's shared state; cheap to clone.
#[derive(Debug, Clone)]
pub struct AppState {
    pub store: Store,
    /// The engine workloads run on.
    pub engine: Arc<dyn Engine>,
    pub config: Arc<Config>,
    /// Where the time comes from.
    pub clock: Arc<dyn Clock>,
    pub controller: ControllerHandle,
    pub limiter: Arc<LoginLimiter>,
    /// Absolute data directory.
    pub data_dir: PathBuf,
    /// Connections to workspace apps.
    pub http_client: gpuhub_proxy::HttpClient,
    /// The apps' own origins, with `apps_domain` set (else apps are served under `/w/…` of the hub).
    pub origins: Option<Arc<crate::origins::AppOrigins>>,
    /// Where the SSH gateway listens, once bound.
    pub ssh_addr: Option<std::net::SocketAddr>,
    /// Accounts whose access just ended: open SSH connections and browser terminals of them close.
    pub revocations: Revocations,
    /// The monitor's latest measurements of running members and GPUs.
    pub metrics: gpuhub_monitor::Latest,
    /// Use of workloads through the hub (apps, terminals, SSH), for the idle-GPU rule.
    pub activity: crate::activity::Activity,
    /// Idle workloads and owners' keeps.
    pub idle: Arc<crate::idle::IdleWatch>,
    /// The GPU memory guard's memory and counts.
    pub guard: Arc<crate::guard::GuardWatch>,
    /// gpuhub's MPS daemons, where a GPU is in the `mps` mode (their health for `/metrics` and the
    /// Nodes page).
    pub mps: Option<gpuhub_mps::Supervisor>,
    /// The API's request durations, for `/metrics`.
    pub http_metrics: crate::metrics::HttpMetrics,
    /// Users' homes and their quotas (the same backend the controller makes them with).
    pub homes: Arc<dyn gpuhub_homes::Homes>,
    /// The outside sign-in sources (LDAP, OpenID).
    pub identities: Arc<crate::identity::Identities>,
}

impl AppState {
    /// The engine's nodes that take work, as last seen (CPUs and memory after the host's reserve,
    /// GPUs from NVML, the configuration or the engine).
    pub fn nodes(&self) -> Vec<NodeCapacity> {
        self.controller.inventory().capacities()
    }
}

/// The names of accounts whose access ended (disabled, deleted), for everything that holds a
/// connection open in their name (the SSH gateway, browser terminals).
#[derive(Debug, Clone)]
pub struct Revocations(tokio::sync::broadcast::Sender<String>);

impl Default for Revocations {
    fn default() -> Self {
        Self(tokio::sync::broadcast::channel(256).0)
    }
}

impl Revocations {
    /// Closes `username`'s open connections.
    pub fn revoke(&self, username: &str) {
        let _ = self.0.send(username.to_owned());
    }

    /// Names revoked from now on.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<String> {
        self.0.subscribe()
    }
}
