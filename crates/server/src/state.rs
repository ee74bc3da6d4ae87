//! What every handler shares. The parts of it that other modules drive (the idle rule's and the guard's
//! memories, the request metrics) are defined here, below everything that uses the state.

pub mod active;
pub mod guard;
pub mod http_metrics;
pub mod idle;
pub mod limiter;
pub mod origins;
pub mod password_change;
pub mod recent;

use crate::config::Config;
use gpuhub_controller::ControllerHandle;
use gpuhub_controller::clock::Clock;
use gpuhub_core::node::NodeCapacity;
use gpuhub_driver::Engine;
use gpuhub_store::Store;
use std::path::PathBuf;
use std::sync::Arc;

/// The SSH gateway's host key as clients check it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostKey {
    /// `ssh-ed25519 AAAA…`, as `known_hosts` holds it.
    pub openssh: String,
    /// `SHA256:…`, as `ssh` shows it.
    pub fingerprint: String,
}

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
    pub limiter: Arc<limiter::LoginLimiter>,
    /// Absolute data directory.
    pub data_dir: PathBuf,
    /// Connections to workspace apps.
    pub http_client: gpuhub_proxy::HttpClient,
    /// The apps' own origins, with `apps_domain` set (else apps are served under `/w/…` of the hub).
    pub origins: Option<Arc<origins::AppOrigins>>,
    /// Where the SSH gateway listens, once bound.
    pub ssh_addr: Option<std::net::SocketAddr>,
    /// The SSH gateway's host key, once loaded.
    pub ssh_host_key: Option<HostKey>,
    /// Accounts whose access just ended: open SSH connections and browser terminals of them close.
    pub revocations: Revocations,
    /// The monitor's latest measurements of running members and GPUs.
    pub metrics: gpuhub_monitor::Latest,
    /// Use of workloads through the hub (apps, terminals, SSH), for the idle-GPU rule.
    pub activity: crate::activity::Activity,
    /// Idle workloads and owners' keeps.
    pub idle: Arc<idle::IdleWatch>,
    /// The GPU memory guard's memory and counts.
    pub guard: Arc<guard::GuardWatch>,
    /// gpuhub's MPS daemons, where a GPU is in the `mps` mode (their health for `/metrics` and the
    /// Nodes page).
    pub mps: Option<gpuhub_mps::Supervisor>,
    /// The API's request durations, for `/metrics`.
    pub http_metrics: http_metrics::HttpMetrics,
    /// Users' homes and their quotas (the same backend the controller makes them with).
    pub homes: Arc<dyn gpuhub_homes::Homes>,
    /// The outside sign-in sources (LDAP, OpenID).
    pub identities: Arc<crate::identity::Identities>,
    /// Seals the secrets the store keeps (S3 secret keys).
    pub secrets: Arc<crate::secrets::SecretBox>,
    /// The object-storage datasets mounted on this host.
    pub s3: Arc<crate::s3mounts::S3Mounts>,
    /// Accounts that must change their password before anything else (the first admin's generated one).
    pub password_change: password_change::PasswordChange,
    /// The workloads not over yet, kept between requests and followed through the controller's change
    /// feed and every submission ([`active::ActiveWorkloads`]); read with [`AppState::active`].
    pub active: Arc<active::ActiveWorkloads>,
    /// The holdings of the last weeks, kept between requests and followed through the controller's change
    /// feed ([`recent::RecentHoldings`]); read with [`AppState::holdings`].
    pub recent: Arc<recent::RecentHoldings>,
    /// The state changes of the last week, kept between requests the same way
    /// ([`recent::RecentStates`]); read with [`AppState::state_changes`].
    pub states: Arc<recent::RecentStates>,
    /// The nodes as `GET /api/v1/nodes` and the Nodes page show them, with the snapshot of
    /// [`AppState::active`] and the inventory's time they were made from: made again only once either
    /// moved.
    pub node_views: Arc<std::sync::Mutex<Option<NodeViewsCache>>>,
}

/// What [`AppState::node_views`] holds.
#[derive(Debug, Clone)]
pub struct NodeViewsCache {
    pub active: active::Snapshot,
    pub inventory_at: Option<chrono::DateTime<chrono::Utc>>,
    pub views: Vec<gpuhub_api::NodeView>,
}

impl AppState {
    /// The engine's nodes that take work, as last seen (CPUs and memory after the host's reserve,
    /// GPUs from NVML, the configuration or the engine).
    pub fn nodes(&self) -> Vec<NodeCapacity> {
        self.controller.inventory().capacities()
    }

    /// The workloads not over yet (pulling, queued, starting, running), oldest first, as the store
    /// holds them after every change announced so far.
    pub async fn active(&self) -> Result<active::Snapshot, gpuhub_store::StoreError> {
        self.active.get(&self.store, || self.controller.changes()).await
    }

    /// The holdings overlapping `from`–`to` (of `owner` only, when given), oldest first: what
    /// `Store::holdings` answers, from those kept between requests where the window is recent.
    pub async fn holdings(
        &self,
        window: (chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>),
        owner: Option<&str>,
    ) -> Result<Vec<gpuhub_core::usage::Holding>, gpuhub_store::StoreError> {
        let now = self.clock.now();
        match self.recent.holdings(&self.store, || self.controller.changes(), now, window, owner).await? {
            Some(h) => Ok(h),
            None => self.store.holdings(window.0, window.1, owner).await,
        }
    }

    /// The state changes of the workloads alive in `from`–`to`: what `Store::state_changes` answers,
    /// from those kept between requests where the window is recent.
    pub async fn state_changes(
        &self,
        window: (chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>),
    ) -> Result<Vec<Arc<gpuhub_store::StateChange>>, gpuhub_store::StoreError> {
        let now = self.clock.now();
        match self.states.changes(&self.store, || self.controller.changes(), now, window).await? {
            Some(c) => Ok(c),
            None => Ok(self.store.state_changes(window.0, window.1).await?.into_iter().map(Arc::new).collect()),
        }
    }
}

/// The names of accounts whose access ended (disabled, deleted), for everything that holds a
/// connection open in their name (the SSH gateway, browser terminals, proxied app WebSockets), and of
/// accounts some of whose tokens or sessions ended (a logout, a revoked token, a password change), for
/// the connections opened with one of them.
#[derive(Debug, Clone)]
pub struct Revocations {
    users: tokio::sync::broadcast::Sender<String>,
    tokens: tokio::sync::broadcast::Sender<String>,
}

impl Default for Revocations {
    fn default() -> Self {
        Self { users: tokio::sync::broadcast::channel(256).0, tokens: tokio::sync::broadcast::channel(256).0 }
    }
}

impl Revocations {
    /// Closes `username`'s open connections.
    pub fn revoke(&self, username: &str) {
        let _ = self.users.send(username.to_owned());
    }

    /// Some of `username`'s tokens or sessions ended: the connections opened with them close.
    pub fn tokens_ended(&self, username: &str) {
        let _ = self.tokens.send(username.to_owned());
    }

    /// Names revoked from now on.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<String> {
        self.users.subscribe()
    }

    /// A future that ends once a connection of `names` (the viewer, the workspace's owner) opened with
    /// the token or session of hash `token` must close: one of the accounts ended, or that token did
    /// (checked in the store whenever one of the viewer's tokens ends). Subscribed now, so nothing
    /// revoked after this call is missed.
    pub fn closing(
        &self,
        store: gpuhub_store::Store,
        clock: Arc<dyn Clock>,
        names: Vec<String>,
        token: Option<String>,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        use tokio::sync::broadcast::error::RecvError;
        let (mut users, mut tokens) = (self.users.subscribe(), self.tokens.subscribe());
        async move {
            let alive = |token: Option<String>, store: gpuhub_store::Store, clock: Arc<dyn Clock>| async move {
                let Some(t) = token else { return true };
                matches!(store.token_user(&t, clock.now()).await, Ok(Some((u, _))) if !u.disabled)
            };
            if !alive(token.clone(), store.clone(), clock.clone()).await {
                return;
            }
            loop {
                tokio::select! {
                    r = users.recv() => match r {
                        Ok(n) if names.contains(&n) => return,
                        Ok(_) => {}
                        Err(RecvError::Lagged(_)) => return,
                        Err(RecvError::Closed) => std::future::pending::<()>().await,
                    },
                    r = tokens.recv() => match r {
                        Ok(n) if names.first() == Some(&n) && !alive(token.clone(), store.clone(), clock.clone()).await => return,
                        Ok(_) => {}
                        Err(RecvError::Lagged(_)) if !alive(token.clone(), store.clone(), clock.clone()).await => return,
                        Err(RecvError::Lagged(_)) => {}
                        Err(RecvError::Closed) => std::future::pending::<()>().await,
                    },
                }
            }
        }
    }
}
