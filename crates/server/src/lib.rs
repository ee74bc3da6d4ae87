//! The gpuhub server: the HTTP API, the portal, authentication, the service layer the API, the portal
//! and the SSH gateway share, and the wiring of the controller (`gpuhub-controller`) that drives
//! workloads through an engine. Only this crate knows HTTP; it reaches engines only through [`gpuhub_driver::Engine`] and
//! the database only through [`gpuhub_store::Store`].

pub mod access;
pub mod activity;
pub mod api;
pub mod auth;
pub mod config;
pub mod error;
pub mod guard;
pub mod hostids;
pub mod identity;
pub mod idle;
pub mod metrics;
pub mod mps;
pub mod origins;
pub mod overload;
pub mod portal;
pub mod queues;
pub mod s3mounts;
pub mod secrets;
pub mod service;
pub mod setup;
pub mod state;

use crate::config::Config;
use crate::state::AppState;
use crate::state::limiter::LoginLimiter;
use gpuhub_controller::clock::{Clock, SystemClock};
use gpuhub_controller::{Controller, Inventory};
use gpuhub_core::user::Role;
use gpuhub_driver::Engine;
use gpuhub_store::Store;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The data directory could not be made or read.
    #[error("data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The database could not be opened or migrated.
    #[error("database: {0}")]
    Store(#[from] gpuhub_store::StoreError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The first admin could not be created.
    #[error("cannot create the first admin: {0}")]
    Bootstrap(String),
    /// The SSH gateway could not start.
    #[error("ssh gateway: {0}")]
    Ssh(#[from] gpuhub_ssh::SshError),
    /// Homes cannot get the quotas configured (`home_quota`, `home_backend`).
    #[error("{0}")]
    Homes(String),
    /// The engine cannot enforce the `container_disk` configured.
    #[error("{0}")]
    Disk(String),
    /// A sign-in source is configured wrongly (`[ldap]`, `[oidc]`).
    #[error("{0}")]
    Identity(String),
    /// The key that seals secrets cannot be read or made.
    #[error("{0}")]
    Secrets(#[from] secrets::SecretError),
    /// `uid_range` would share IDs with the host's accounts (security review N15).
    #[error("{0}")]
    HostIds(#[from] hostids::HostIdsError),
}

/// A running server.
#[derive(Debug)]
pub struct Server {
    /// Where the HTTP API listens.
    pub addr: SocketAddr,
    /// The shared state (tests reach the store through it).
    pub state: AppState,
    shutdown: watch::Sender<bool>,
    http: JoinHandle<()>,
    controller: JoinHandle<()>,
    ssh: JoinHandle<()>,
    monitor: JoinHandle<()>,
    idle: JoinHandle<()>,
    guard: JoinHandle<()>,
    recheck: JoinHandle<()>,
}

impl Server {
    /// Stops accepting, lets the controller finish its pass, and waits for both.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = self.http.await;
        let _ = self.controller.await;
        let _ = self.ssh.await;
        let _ = self.monitor.await;
        let _ = self.idle.await;
        let _ = self.guard.await;
        let _ = self.recheck.await;
        // the daemons keep serving the work that runs on: the next start takes them over
        if let Some(m) = &self.state.mps {
            m.detach().await;
        }
        self.state.s3.unmount_all().await;
    }

    /// Waits until the server stops (after [`Server::shutdown`] from elsewhere, or a fatal error).
    pub async fn wait(self) {
        let _ = self.http.await;
        let _ = self.shutdown.send(true);
        let _ = self.controller.await;
        let _ = self.ssh.await;
        let _ = self.monitor.await;
        let _ = self.idle.await;
        let _ = self.guard.await;
        let _ = self.recheck.await;
        // the daemons keep serving the work that runs on: the next start takes them over
        if let Some(m) = &self.state.mps {
            m.detach().await;
        }
        self.state.s3.unmount_all().await;
    }

    /// A sender that stops the server when `true` is sent.
    pub fn shutdown_handle(&self) -> watch::Sender<bool> {
        self.shutdown.clone()
    }
}

/// Creates the data directory and returns its absolute path. The directory and its `homes` and `logs`
/// are made (or made again) mode 0700: they hold the database, every user's home and output.
pub fn prepare_data_dir(dir: &Path) -> Result<PathBuf, ServeError> {
    use std::os::unix::fs::PermissionsExt;
    let err = |source| ServeError::DataDir { path: dir.to_owned(), source };
    for d in [dir.to_owned(), dir.join("homes"), dir.join("logs")] {
        std::fs::create_dir_all(&d).map_err(err)?;
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).map_err(err)?;
    }
    std::fs::canonicalize(dir).map_err(err)
}

/// Makes a homes directory outside the data directory: 0755, so that users' accounts on the nodes can
/// reach their own home (each home is 0700 and its owner's).
pub fn prepare_homes_dir(dir: &Path) -> Result<(), ServeError> {
    use std::os::unix::fs::PermissionsExt;
    let err = |source| ServeError::DataDir { path: dir.to_owned(), source };
    std::fs::create_dir_all(dir).map_err(err)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).map_err(err)
}

/// Makes the SQLite database file (when the URL names one) before the store opens it, mode 0600, and
/// narrows an existing one to 0600: it holds workload environments and hashed credentials. SQLite
/// gives its `-wal` and `-shm` files the database file's mode.
pub fn prepare_sqlite_file(url: &str) -> Result<(), ServeError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let Some(rest) = url.strip_prefix("sqlite://") else { return Ok(()) };
    let path = Path::new(rest.split('?').next().unwrap_or(rest));
    if path.as_os_str().is_empty() || rest.starts_with(":memory:") {
        return Ok(());
    }
    let err = |source| ServeError::DataDir { path: path.to_owned(), source };
    std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(path).map_err(err)?;
    for suffix in ["", "-wal", "-shm"] {
        let f = PathBuf::from(format!("{}{suffix}", path.display()));
        if f.exists() {
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
        }
    }
    Ok(())
}

/// On an empty database, creates `admin` with `GPUHUB_ADMIN_PASSWORD` or a random password, which is
/// printed once and written to `<data>/initial-admin-password` (mode 0600).
pub async fn bootstrap_admin(
    store: &Store,
    config: &Config,
    data_dir: &Path,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(), ServeError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if store.count_users().await? > 0 {
        return Ok(());
    }
    let (password, generated) = match &config.admin_password {
        Some(p) => (p.clone(), false),
        None => (auth::random_password(), true),
    };
    auth::check_password(&password)
        .map_err(|e| ServeError::Bootstrap(format!("GPUHUB_ADMIN_PASSWORD: {}", e.detail)))?;
    let hash = auth::hash_password(&password).map_err(|e| ServeError::Bootstrap(e.detail))?;
    store.create_user("admin", &hash, Role::Admin, now).await?;
    if generated {
        let path = data_dir.join("initial-admin-password");
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .map_err(|source| ServeError::DataDir { path: path.clone(), source })?;
        writeln!(f, "{password}").map_err(|source| ServeError::DataDir { path: path.clone(), source })?;
        // printed and left in a file: it must be changed at the first sign-in
        store.set_setting(state::password_change::SETTING, "admin").await?;
        println!("created the first admin account: user admin, password {password} (also in {})", path.display());
    } else {
        println!("created the first admin account: user admin, password from GPUHUB_ADMIN_PASSWORD");
    }
    Ok(())
}

/// `store` handing out `uid_range`, passing over the host's IDs, once the range is checked against the
/// host's accounts (`host`); gpuhub users who share a host account's UID already are warned about.
pub async fn uids_checked(store: Store, config: &Config, host: &hostids::HostAccounts) -> Result<Store, ServeError> {
    let users = store.list_users().await?;
    let teams: Vec<u32> = store.list_queues().await?.iter().filter_map(|q| q.team_gid).collect();
    host.check(config.uid_range, &users, &teams)?;
    for line in host.shared_uids(&users)? {
        tracing::warn!("{line}: its containers can reach that account's files; give one of them another uid");
        eprintln!("gpuhub: warning: {line}");
    }
    let reader = host.clone();
    Ok(store.with_uids(config.uid_range, Some(Arc::new(move || reader.taken()))))
}

/// This installation's id, made on first start and kept in the store: it labels every container, so
/// that servers sharing an engine never touch each other's.
pub async fn instance_id(store: &Store) -> Result<String, ServeError> {
    const KEY: &str = "instance_id";
    if let Some(id) = store.get_setting(KEY).await? {
        return Ok(id);
    }
    let id = uuid::Uuid::new_v4().simple().to_string();
    store.set_setting(KEY, &id).await?;
    Ok(id)
}

/// Opens the store, creates the first admin, starts the controller over `engine` and serves the API
/// on `config.listen` (port 0 picks a free one; see [`Server::addr`]).
pub async fn start(config: Config, engine: Arc<dyn Engine>) -> Result<Server, ServeError> {
    start_with_clock(config, engine, Arc::new(SystemClock)).await
}

/// [`start`] with the time read from `clock`.
pub async fn start_with_clock(
    config: Config,
    engine: Arc<dyn Engine>,
    clock: Arc<dyn Clock>,
) -> Result<Server, ServeError> {
    start_with(config, engine, Seams { clock, ..Seams::default() }).await
}

/// What a server reads the world through besides its engine: the clock, this host's GPU sampler and
/// the homes.
#[derive(Debug, Clone)]
pub struct Seams {
    /// Where the time comes from.
    pub clock: Arc<dyn Clock>,
    /// Measures this host's GPUs (NVML, or a scripted fake in tests); `None`: no GPU figures.
    pub gpus: Option<Arc<dyn gpuhub_gpu::GpuSampler>>,
    /// Makes homes and their quotas; `None`: the backend the config asks for (`home_backend`).
    pub homes: Option<Arc<dyn gpuhub_homes::Homes>>,
    /// The LDAP directory users sign in with; `None`: the one `[ldap]` configures, if any.
    pub directory: Option<Arc<dyn gpuhub_identity::Directory>>,
    /// Where the host's `passwd`, `group` and `login.defs` are read (`uid_range`'s checks); `None`:
    /// `/etc`.
    pub etc: Option<PathBuf>,
}

impl Default for Seams {
    fn default() -> Self {
        Self { clock: Arc::new(SystemClock), gpus: None, homes: None, directory: None, etc: None }
    }
}

/// [`start`] with the clock and GPU sampler given.
pub async fn start_with(config: Config, engine: Arc<dyn Engine>, seams: Seams) -> Result<Server, ServeError> {
    let Seams { clock, gpus, homes, directory, etc } = seams;
    // both ports first: one in use stops the server before it has made anything (the first admin and
    // its password among them)
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| ServeError::Bind { addr: config.listen, source })?;
    let ssh_listener = tokio::net::TcpListener::bind(config.ssh_listen).await.map_err(|source| {
        ServeError::Ssh(gpuhub_ssh::SshError::Bind { addr: config.ssh_listen.to_string(), source })
    })?;
    // a cap the engine cannot enforce stops the server before it has made anything
    setup::disk_enforced(&config, engine.as_ref()).map_err(ServeError::Disk)?;
    // a uid_range below the host's UID_MAX stops the server before it has made anything; its overlap
    // with the host's accounts is checked once the store says which of them are gpuhub users' own
    let host = hostids::HostAccounts::new(etc.unwrap_or_else(|| PathBuf::from(hostids::ETC)));
    host.above_max(config.uid_range)?;
    let data_dir = prepare_data_dir(&config.data_dir)?;
    let config = Config { data_dir: data_dir.clone(), ..config };
    if let Some(homes) = &config.homes_dir {
        prepare_homes_dir(homes)?;
    }
    prepare_sqlite_file(&config.effective_database_url())?;
    let store = Store::open(&config.effective_database_url()).await?;
    // the range clear of the host's accounts before the first account is made from it
    let store = uids_checked(store, &config, &host).await?;
    bootstrap_admin(&store, &config, &data_dir, clock.now()).await?;
    queues::seed(&store, &config, clock.now()).await?;
    let instance = instance_id(&store).await?;
    let inventory = Inventory::default();
    match engine.inventory().await {
        Ok(nodes) => inventory.set(nodes, clock.now()),
        Err(e) => {
            // the server still serves (lists, logs of ended runs); workloads stay queued until the
            // engine answers, and GET /api/v1/nodes says why
            tracing::error!(engine = engine.name(), error = %e, "cannot read the engine's nodes");
            eprintln!("gpuhub: the {} engine is not usable yet: {e}", engine.name());
            inventory.fail(e.to_string());
        }
    }
    let config = Arc::new(config);
    let homes = match homes {
        Some(h) => h,
        None => setup::homes(&config).await.map_err(ServeError::Homes)?,
    };
    let hub_places = engine.capabilities().placement == gpuhub_driver::Placement::Hub;
    let mps = mps::build(&config, &inventory.capacities(), hub_places);
    let mut settings = setup::controller(&config, homes.clone());
    settings.mps = mps.clone().map(|s| Arc::new(mps::Daemons(s)) as Arc<dyn gpuhub_controller::mps::MpsDaemons>);
    let settings = Arc::new(settings);
    let identities =
        Arc::new(identity::Identities::new(&config, directory).map_err(ServeError::Identity)?.with_host(host));
    let (controller, handle) =
        Controller::new(store.clone(), engine.clone(), settings, instance, clock.clone(), inventory.clone());
    let monitor_settings = setup::monitor(&config.monitor);
    let (monitor, metrics) =
        gpuhub_monitor::Monitor::new(store.clone(), engine.clone(), gpus, clock.clone(), inventory, monitor_settings);
    let limiter = Arc::new(LoginLimiter::new(config.login_failures, Duration::from_secs(config.login_window_secs)));
    let revocations = state::Revocations::default();
    let ssh_addr = ssh_listener.local_addr().map_err(|source| ServeError::Bind { addr: config.ssh_listen, source })?;
    let host_key = data_dir.join("ssh_host_ed25519_key");
    // the gateway's public key, published so that clients need not trust it on first use
    let host_public = gpuhub_ssh::load_or_generate_host_key(&host_key)?.public_key().clone();
    let gateway_engine = engine.clone();
    let secrets = Arc::new(secrets::SecretBox::load(config.secret_key.as_deref(), &data_dir)?);
    let s3 = Arc::new(s3mounts::S3Mounts::new(&data_dir, config.dataset_cache.0));
    let password_change = state::password_change::PasswordChange::from_setting(
        store.get_setting(state::password_change::SETTING).await?.as_deref(),
    );
    let state = AppState {
        store,
        engine,
        config: config.clone(),
        controller: handle,
        limiter,
        data_dir,
        http_client: origins::http_client(),
        origins: config
            .apps_domain
            .as_deref()
            .map(|d| Arc::new(origins::AppOrigins::new(d, config.secure_cookies, config.public_url.as_deref()))),
        ssh_addr: Some(ssh_addr),
        ssh_host_key: Some(state::HostKey {
            openssh: gpuhub_ssh::openssh_line(&host_public),
            fingerprint: gpuhub_ssh::fingerprint(&host_public),
        }),
        revocations,
        metrics,
        activity: activity::Activity::new(clock.clone()),
        clock,
        idle: Arc::default(),
        guard: Arc::default(),
        mps: mps.clone(),
        http_metrics: crate::metrics::HttpMetrics::default(),
        homes,
        identities,
        secrets,
        s3,
        password_change,
        active: Arc::default(),
        recent: Arc::default(),
        states: Arc::default(),
        node_views: Arc::default(),
    };
    api::datasets::mount_all(&state).await;
    let gateway = gpuhub_ssh::SshGateway::on_listener(
        ssh_listener,
        &host_key,
        access::ssh_backend(&state),
        gateway_engine,
        gpuhub_ssh::GatewayOptions::default(),
    )?;
    let (shutdown, rx) = watch::channel(false);
    let until = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let controller = tokio::spawn(controller.run(until(rx.clone())));
    let monitor = tokio::spawn(monitor.run(until(rx.clone())));
    let idle = tokio::spawn(idle::run(state.clone(), until(rx.clone())));
    let guard = tokio::spawn(guard::run(state.clone(), until(rx.clone())));
    let recheck = tokio::spawn(service::identity::run(state.clone(), until(rx.clone())));
    let ssh_stop = until(rx.clone());
    let ssh = tokio::spawn(async move {
        if let Err(e) = gateway.run(ssh_stop).await {
            tracing::error!(error = %e, "ssh gateway failed");
        }
    });
    tracing::info!(%ssh_addr, "ssh gateway listening");
    let addr = listener.local_addr().map_err(|source| ServeError::Bind { addr: config.listen, source })?;
    let app = router(state.clone());
    let http = tokio::spawn(async move {
        let svc = app.into_make_service_with_connect_info::<SocketAddr>();
        if let Err(e) = axum::serve(listener, svc).with_graceful_shutdown(until(rx)).await {
            tracing::error!(error = %e, "http server failed");
        }
    });
    tracing::info!(%addr, "gpuhub listening");
    match &config.apps_domain {
        Some(domain) => {
            tracing::info!(%domain, "apps on origins of their own: <app>--<workspace>--<owner>.{domain}");
            if !config.secure_cookies && origins::hub_is_parent_of_apps(domain, config.public_url.as_deref()) {
                tracing::warn!(
                    %domain,
                    "the hub's host is a parent domain of apps_domain: an app can set cookies for the hub; \
                     set secure_cookies (HTTPS: the session cookie becomes __Host-gpuhub_session, which no \
                     other host can set) or serve the hub outside apps_domain's parent"
                );
            }
        }
        None => tracing::warn!(
            "apps share the hub's origin (path mode, /w/…): a script in a user's app runs with the visitor's \
             session cookie on the hub's pages; set apps_domain (wildcard DNS) to give each app its own origin"
        ),
    }
    Ok(Server { addr, state, shutdown, http, controller, ssh, monitor, idle, guard, recheck })
}

/// The whole HTTP surface.
pub fn router(state: AppState) -> axum::Router {
    let (api, doc) = api::router();
    let doc = Arc::new(doc);
    api.route(
        "/api/v1/openapi.json",
        axum::routing::get(move || {
            let doc = doc.clone();
            async move { axum::Json((*doc).clone()) }
        }),
    )
    .route("/metrics", axum::routing::get(metrics::scrape))
    .merge(portal::router())
    .route("/w/{owner}/{workload}/{app}", axum::routing::any(access::app_root))
    .route(origins::MINT_PATH, axum::routing::get(origins::mint))
    .route("/w/{owner}/{workload}/{app}/", axum::routing::any(origins::app_proxy))
    .route("/w/{owner}/{workload}/{app}/{*rest}", axum::routing::any(origins::app_proxy))
    .route("/terminal/{owner}/{workload}", axum::routing::get(access::terminal))
    .route("/terminal/{owner}/{workload}/", axum::routing::get(access::terminal))
    .route("/terminal/{owner}/{workload}/{file}", axum::routing::get(access::terminal))
    .fallback(|| async { error::ApiError::not_found("no such endpoint") })
    // no page of the hub's own origin may be framed, nor take two session cookies
    .layer(axum::middleware::from_fn_with_state(state.clone(), auth::one_session_cookie))
    .layer(axum::middleware::from_fn(access::hub_guard))
    // an app's own origin is served by nothing else of the hub
    .layer(axum::middleware::from_fn_with_state(state.clone(), origins::dispatch))
    .layer(axum::middleware::map_response(error::problem_for_bare_errors))
    .layer(axum::middleware::map_response_with_state(state.clone(), error::name_full_data_dir))
    // a request beyond the cap is answered at once (503), before any work; counted by the metrics
    .layer(axum::middleware::from_fn_with_state(
        overload::InFlight::new(state.config.limits.max_in_flight),
        overload::limit,
    ))
    // outside the ones above, so that it sees the status the client gets
    .layer(axum::middleware::from_fn_with_state(state.http_metrics.clone(), metrics::track))
    .layer(tower_http::trace::TraceLayer::new_for_http())
    .with_state(state)
}
