//! The one typed configuration of `gpuhub serve`, layered with figment: defaults → file → environment
//! (`GPUHUB_…`). Settings only: what the server does with them (queue and priority policy, the
//! controller's and the monitor's settings, the homes backend) is the server's. The engines' sections
//! are the engine-neutral types of `gpuhub_driver::settings`, so no engine crate is needed here.

use gpuhub_core::node::GpuDevice;
use gpuhub_driver::settings::{kube::KubeConfig, lxd::LxdConfig, slurm::SlurmConfig};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

pub mod apps;
pub mod datasets;
pub mod disk;
pub mod env;
pub mod homes;
pub mod identity;
mod layers;
pub mod monitor;
pub mod net;
pub mod sharing;

/// How GPUs reach containers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum GpuMode {
    /// A device request per GPU UUID, served by the NVIDIA Container Toolkit.
    Nvidia,
    /// Bind exactly the assigned GPUs' device nodes and the control nodes that exist.
    #[default]
    Devices,
    /// No GPUs are handed out.
    None,
}

impl std::str::FromStr for GpuMode {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        match s {
            "nvidia" => Ok(Self::Nvidia),
            "devices" => Ok(Self::Devices),
            "none" => Ok(Self::None),
            _ => Err(ConfigError::Invalid {
                key: "gpu_mode".into(),
                reason: format!("{s:?} is not nvidia, devices or none"),
            }),
        }
    }
}

/// Which engine runs the workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// Docker on this host (gpuhub places; GPUs from NVML or `[[gpus]]`).
    #[default]
    Docker,
    /// A Slurm cluster (`[slurm]`; Slurm places, gpuhub submits and follows).
    Slurm,
    /// LXD on this host (`[lxd]`; gpuhub places; one system container per run).
    Lxd,
    /// A Kubernetes cluster (`[kubernetes]`; Kubernetes places, gpuhub submits pods and follows).
    Kubernetes,
}

impl std::str::FromStr for EngineKind {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        match s {
            "docker" => Ok(Self::Docker),
            "slurm" => Ok(Self::Slurm),
            "lxd" => Ok(Self::Lxd),
            "kubernetes" => Ok(Self::Kubernetes),
            _ => Err(ConfigError::Invalid {
                key: "engine".into(),
                reason: format!("{s:?} is not docker, slurm, lxd or kubernetes"),
            }),
        }
    }
}

/// What went wrong loading the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has unknown or mistyped keys.
    #[error("config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message, with line and column.
        message: String,
    },
    /// A value (from the file or the environment) is not acceptable.
    #[error("config {key}: {reason}")]
    Invalid {
        /// The key (`listen`, `GPUHUB_LISTEN`).
        key: String,
        /// Why.
        reason: String,
    },
}

/// Bounds on what one user may submit, so that no user can fill the database or the lists
/// (`[limits]`). Admins are exempt from the counts, not from the sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Workloads a user may have in any state (ended ones count until deleted).
    pub max_workloads_per_user: u64,
    /// Workloads a user may have waiting in the queue.
    pub max_queued_per_user: u64,
    /// Bytes of a workload's command: its arguments, and those of its apps' commands.
    pub max_command_bytes: usize,
    /// Bytes of a workload's environment: every name and value.
    pub max_env_bytes: usize,
    /// Apps a workload may declare.
    pub max_apps: usize,
    /// Personal images (saved workspaces) a user may keep.
    pub max_personal_images: u64,
    /// The most a user's personal images may hold together.
    pub max_personal_image_bytes: gpuhub_core::Bytes,
    /// Requests the whole server works on at once (each until its response's head); one more is
    /// answered `503` with `Retry-After` at once (`crate::overload`).
    pub max_in_flight: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_workloads_per_user: 5000,
            max_queued_per_user: 1000,
            max_command_bytes: 64 << 10,
            max_env_bytes: 64 << 10,
            max_apps: 16,
            max_personal_images: 10,
            max_personal_image_bytes: gpuhub_core::Bytes(100 << 30),
            max_in_flight: 2048,
        }
    }
}

impl Limits {
    /// Every limit is at least 1 (a huge value lifts one).
    fn check(&self) -> Result<(), ConfigError> {
        let named = [
            ("limits.max_workloads_per_user", self.max_workloads_per_user),
            ("limits.max_queued_per_user", self.max_queued_per_user),
            ("limits.max_command_bytes", self.max_command_bytes as u64),
            ("limits.max_env_bytes", self.max_env_bytes as u64),
            ("limits.max_apps", self.max_apps as u64),
            ("limits.max_personal_images", self.max_personal_images),
            ("limits.max_personal_image_bytes", self.max_personal_image_bytes.0),
            ("limits.max_in_flight", self.max_in_flight as u64),
        ];
        match named.into_iter().find(|(_, v)| *v == 0) {
            Some((key, _)) => Err(ConfigError::Invalid { key: key.into(), reason: "must be at least 1".into() }),
            None => Ok(()),
        }
    }
}

/// Credentials of one private registry. `Debug` prints no password.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryConfig {
    /// The registry as image references name it (`registry.example.org:5000`).
    pub server: String,
    pub username: String,
    pub password: String,
}

impl RegistryConfig {
    /// The credentials as the engines take them.
    pub fn auth(&self) -> gpuhub_driver::RegistryAuth {
        gpuhub_driver::RegistryAuth {
            server: self.server.clone(),
            username: self.username.clone(),
            password: self.password.clone(),
        }
    }
}

impl fmt::Debug for RegistryConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegistryConfig")
            .field("server", &self.server)
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Settings of the server. Every field has an embedded default, so an empty file is a valid config.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address of the HTTP API and web pages.
    pub listen: SocketAddr,
    /// The engine workloads run on: `docker` (this host), `slurm` (the cluster `[slurm]` names) or `lxd`
    /// (the LXD daemon of this host `[lxd]` names).
    pub engine: EngineKind,
    /// The Slurm cluster, with `engine = "slurm"`.
    pub slurm: SlurmConfig,
    /// The LXD daemon, with `engine = "lxd"`.
    pub lxd: LxdConfig,
    /// The Kubernetes cluster, with `engine = "kubernetes"`.
    pub kubernetes: KubeConfig,
    /// Where users' homes are (default `<data_dir>/homes`, private to the hub's user). With an engine of
    /// several nodes, a directory on storage every node mounts at the same path, which the users'
    /// accounts can traverse (it is made 0755; each home stays 0700 and its owner's).
    pub homes_dir: Option<PathBuf>,
    /// An LDAP directory users sign in with (`[ldap]`); absent: none.
    pub ldap: Option<gpuhub_identity::LdapConfig>,
    /// An OpenID provider users sign in through (`[oidc]`); absent: none.
    pub oidc: Option<gpuhub_identity::OidcConfig>,
    /// How often directory accounts are checked against the directory (removed upstream: disabled,
    /// tokens revoked), and the lifetime of OpenID accounts' sessions and tokens, in seconds.
    pub identity_recheck_secs: u64,
    /// The lifetime of an OpenID account's sessions and tokens, in hours (1…720).
    pub oidc_session_hours: i64,
    /// Where team folders are (default `<data_dir>/teams`); with an engine of several nodes, shared
    /// storage every node mounts at the same path.
    pub teams_dir: Option<PathBuf>,
    /// The hard quota of each home (`"10GiB"`), unless an admin gives a user their own; absent: none.
    pub home_quota: Option<gpuhub_core::Bytes>,
    /// What enforces home quotas: `auto`, `xfs`, `loop` or `dir` (see [`homes::HomeBackend`]).
    pub home_backend: homes::HomeBackend,
    /// The most each container may write outside its mounts (its writable layer: `/tmp`, `/`),
    /// `"20GiB"`; absent: no cap. Set, an engine that cannot enforce it stops the server at start.
    pub container_disk: Option<gpuhub_core::Bytes>,
    /// The UIDs (and GIDs) local accounts get, `"70000-99999"` (`GPUHUB_UID_RANGE`): above the host's
    /// `UID_MAX` and clear of its accounts and groups, checked at start (the server's `hostids`).
    pub uid_range: gpuhub_core::user::UidRange,
    /// Address of the SSH gateway.
    pub ssh_listen: SocketAddr,
    /// Where the SQLite database, homes and archived logs live.
    pub data_dir: PathBuf,
    /// `postgres://…` to use PostgreSQL; when absent, SQLite in `data_dir`. May hold a password.
    pub database_url: Option<String>,
    /// How GPUs reach containers.
    pub gpu_mode: GpuMode,
    /// GPUs declared by hand, used when NVML finds none (hosts without a driver, CI).
    pub gpus: Vec<GpuDevice>,
    /// Whether any image the engine already has may be run; when false, only catalog images (and
    /// those `image_allow` names).
    pub allow_any_image: bool,
    /// Images that may be pulled (and run) by reference: patterns with `*` (`localhost:5000/*`,
    /// `ghcr.io/lab/*`). Catalog images are pulled whatever this says.
    pub image_allow: Vec<String>,
    /// Credentials of private registries (`[[registries]]`), for pulls from them.
    pub registries: Vec<RegistryConfig>,
    /// Processes per container.
    pub pids_limit: i64,
    /// The host's `pid_max`, which all containers' `pids_limit`s together stay within (a quarter kept
    /// for the host; one user's work at most half the rest), checked at submission. Unset: read from
    /// `/proc/sys/kernel/pid_max` where the engine runs containers on this host (Docker); 0: no check.
    pub pid_max: Option<u64>,
    /// Keep containers off the host's own services (the API, the SSH gateway, databases) and the
    /// link-local range, with `iptables` rules per user bridge; `false` on hosts without iptables.
    pub isolate_host: bool,
    /// Where users' bridge networks get their subnets (Docker engine): an IPv4 pool such as
    /// `10.200.0.0/16`, carved into blocks of `network_prefix`, a deleted user's block used again. Unset:
    /// Docker's default address pools, which hold about 30 such networks.
    pub network_pool: Option<String>,
    /// The prefix length of each user's block of `network_pool` (26: 62 addresses a user, 1,024 users
    /// in a /16).
    pub network_prefix: u8,
    /// Seconds between SIGTERM and SIGKILL when stopping a workload.
    pub stop_grace_secs: u64,
    /// What becomes of a run the engine's own shutdown or restart killed (a `dockerd` upgraded or
    /// restarted without live restore, a Slurm node that failed): `requeue` (in its old place) or
    /// `fail`.
    pub on_engine_restart: gpuhub_core::stop::OnEngineRestart,
    /// Seconds between full reconciliations with the container engine.
    pub reconcile_secs: u64,
    /// Lifetime of a browser session, in hours.
    pub session_hours: i64,
    /// Mark session cookies `Secure` (serve behind TLS); app origins are then `https://`.
    pub secure_cookies: bool,
    /// Serve each workspace app on an origin of its own, `<app>--<workspace>--<owner>.<apps_domain>`
    /// (wildcard DNS to the hub), entered through a single-use handoff from the hub; unset, apps share
    /// the hub's origin under `/w/…` (path mode).
    pub apps_domain: Option<String>,
    /// The hub's URL as browsers reach it (`https://gpu.example.org`), where app origins send visitors
    /// to log in; by default the apps domain without its first label, with the scheme and port of the
    /// request.
    pub public_url: Option<String>,
    /// Failed logins allowed per user from one address in `login_window_secs`; that pair is then refused
    /// for the rest of the window, while more failures of the user (from anywhere) or of the address
    /// (for any user, past four times this) only slow each try, so the real user is never locked out.
    pub login_failures: usize,
    /// Days an API token from `POST /login` works (1…3650); browser sessions last `session_hours`.
    pub token_days: i64,
    /// Reverse proxies (addresses or CIDR blocks) whose `X-Forwarded-For` names the client for the login
    /// limit; from anyone else that header is ignored.
    pub trusted_proxies: Vec<String>,
    /// The window of the login rate limit.
    pub login_window_secs: u64,
    /// Memory held back from workloads for the host itself.
    pub reserved_memory: gpuhub_core::Bytes,
    /// CPUs (milli) held back from workloads for the host itself.
    pub reserved_cpu_milli: u64,
    /// The scheduler: placement `policy` (`auto` default, `fgd+`, `fgd`, `bestfit`, `spread`, `random`), `backfill`,
    /// `preemption` (off by default here: turn it on together with team queues), team `queues` with
    /// guarantees and borrowing limits, and GPU `reservations`. See `gpuhub_sched::Config`.
    pub scheduler: gpuhub_sched::Config,
    /// Half-life of the decayed usage that fair share compares, in hours.
    pub fair_share_half_life_hours: f64,
    /// Named priorities an admin grants (`high = 100`, `low = -50`), from -1000 to 1000. Users may
    /// lower their own work (priority -100…0) but go higher only through a class their queue allows.
    pub priority_classes: BTreeMap<String, i32>,
    /// Which priority classes each queue's users may ask for (`vision = ["high"]`; `"*"` for every
    /// queue, the default queue included). Admins may use any class or priority.
    pub queue_priority_classes: BTreeMap<String, Vec<String>>,
    /// Who may submit to each team queue (`vision = ["alice", "bob"]`); a configured queue not listed
    /// here is open to every user, and admins may use any queue. A user listed in exactly one queue
    /// is charged to it when a request names none.
    pub queue_members: BTreeMap<String, Vec<String>>,
    /// A HAMi-core `libvgpu.so` on the host. When set, a container holding a share of a GPU gets it
    /// preloaded through a read-only `/etc/ld.so.preload`, which caps the CUDA memory and compute of
    /// the container at its share. Without it, shares are scheduled and their limits are passed in
    /// the environment (`CUDA_DEVICE_MEMORY_LIMIT`, `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`) only.
    pub gpu_share_library: Option<PathBuf>,
    /// Whether admins may enter other users' workspaces by SSH as `<user>.<workspace>`.
    pub admins_enter_workspaces: bool,
    /// Whether admins may open other users' apps and terminals in a browser. Off by default: in path
    /// mode apps share the hub's origin, so a user's app could act in the admin's name in other
    /// workspaces.
    pub admins_open_apps: bool,
    /// The most output kept per workload run (`100MiB`, at least 1MiB): the container engine rotates
    /// older output away beyond about this much, and the archive of a finished run stops here with a
    /// line saying the log was truncated.
    pub log_max_bytes: gpuhub_core::Bytes,
    /// The admin password on first start (`GPUHUB_ADMIN_PASSWORD`); never written back.
    pub admin_password: Option<String>,
    /// The key sealing secrets at rest (S3 secret keys), 64 hex digits (`GPUHUB_SECRET_KEY`); unset:
    /// `<data_dir>/secret.key`, made on first start (0600). Never written back.
    pub secret_key: Option<String>,
    /// What the read cache of each object-storage dataset may hold on this host (`GPUHUB_DATASET_CACHE`).
    pub dataset_cache: gpuhub_core::Bytes,
    /// Per-user bounds on workloads and request sizes.
    pub limits: Limits,
    /// Sampling, its history and `/metrics` (`[monitor]`).
    pub monitor: monitor::MonitorConfig,
    /// Idle GPUs found and reclaimed (`[idle]`).
    pub idle: monitor::IdleConfig,
    /// How shares of GPUs are enforced: `mps`, `guard` or `none` (`GPUHUB_GPU_SHARING`); a GPU's own
    /// `[[gpus]] sharing` wins. Unset: `guard` where NVML measures the GPUs, else `none`.
    pub gpu_sharing: Option<gpuhub_core::node::GpuSharing>,
    /// The GPU memory guard (`[guard]`).
    pub guard: sharing::GuardConfig,
    /// gpuhub's MPS control daemons (`[mps]`).
    pub mps: sharing::MpsConfig,
}

/// A commented configuration for a local trial, which `gpuhub serve --init` writes.
pub const TRIAL_CONFIG: &str = include_str!("trial.toml");

/// The default of [`Config::log_max_bytes`].
pub const DEFAULT_LOG_MAX_BYTES: u64 = 100 << 20;
/// The least [`Config::log_max_bytes`] accepted.
pub const MIN_LOG_MAX_BYTES: u64 = 1 << 20;

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            engine: EngineKind::Docker,
            slurm: SlurmConfig::default(),
            lxd: LxdConfig::default(),
            kubernetes: KubeConfig::default(),
            homes_dir: None,
            image_allow: Vec::new(),
            registries: Vec::new(),
            teams_dir: None,
            ldap: None,
            oidc: None,
            identity_recheck_secs: 300,
            oidc_session_hours: 12,
            home_quota: None,
            home_backend: homes::HomeBackend::Auto,
            container_disk: None,
            uid_range: gpuhub_core::user::UidRange::default(),
            ssh_listen: SocketAddr::from(([127, 0, 0, 1], 2222)),
            data_dir: PathBuf::from("./gpuhub-data"),
            database_url: None,
            gpu_mode: GpuMode::Devices,
            gpus: Vec::new(),
            allow_any_image: true,
            pids_limit: 4096,
            pid_max: None,
            isolate_host: true,
            network_pool: None,
            network_prefix: 26,
            stop_grace_secs: 10,
            on_engine_restart: Default::default(),
            reconcile_secs: 30,
            session_hours: 24 * 7,
            secure_cookies: false,
            apps_domain: None,
            public_url: None,
            login_failures: 5,
            login_window_secs: 300,
            token_days: 30,
            trusted_proxies: Vec::new(),
            reserved_memory: gpuhub_core::Bytes(0),
            reserved_cpu_milli: 0,
            admins_enter_workspaces: true,
            admins_open_apps: false,
            scheduler: gpuhub_sched::Config {
                preemption: gpuhub_sched::Preemption { enabled: false, ..Default::default() },
                ..Default::default()
            },
            fair_share_half_life_hours: 24.0,
            queue_members: BTreeMap::new(),
            priority_classes: BTreeMap::new(),
            queue_priority_classes: BTreeMap::new(),
            gpu_share_library: None,
            log_max_bytes: gpuhub_core::Bytes(DEFAULT_LOG_MAX_BYTES),
            admin_password: None,
            secret_key: None,
            dataset_cache: gpuhub_core::Bytes(datasets::DEFAULT_CACHE),
            limits: Limits::default(),
            monitor: monitor::MonitorConfig::default(),
            idle: monitor::IdleConfig::default(),
            gpu_sharing: None,
            guard: sharing::GuardConfig::default(),
            mps: sharing::MpsConfig::default(),
        }
    }
}

/// Secrets are not printed.
impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("engine", &self.engine)
            .field("slurm", &self.slurm)
            .field("lxd", &self.lxd)
            .field("kubernetes", &self.kubernetes)
            .field("uid_range", &self.uid_range)
            .field("ssh_listen", &self.ssh_listen)
            .field("data_dir", &self.data_dir)
            .field("homes_dir", &self.homes_dir)
            .field("teams_dir", &self.teams_dir)
            .field("image_allow", &self.image_allow)
            .field("registries", &self.registries)
            .field("ldap", &self.ldap)
            .field("oidc", &self.oidc)
            .field("identity_recheck_secs", &self.identity_recheck_secs)
            .field("oidc_session_hours", &self.oidc_session_hours)
            .field("home_quota", &self.home_quota)
            .field("home_backend", &self.home_backend)
            .field("container_disk", &self.container_disk)
            .field("database_url", &self.database_url.as_deref().map(redact_url))
            .field("gpu_mode", &self.gpu_mode)
            .field("gpus", &self.gpus)
            .field("allow_any_image", &self.allow_any_image)
            .field("pids_limit", &self.pids_limit)
            .field("pid_max", &self.pid_max)
            .field("network_pool", &self.network_pool)
            .field("network_prefix", &self.network_prefix)
            .field("stop_grace_secs", &self.stop_grace_secs)
            .field("on_engine_restart", &self.on_engine_restart)
            .field("reconcile_secs", &self.reconcile_secs)
            .field("session_hours", &self.session_hours)
            .field("secure_cookies", &self.secure_cookies)
            .field("apps_domain", &self.apps_domain)
            .field("public_url", &self.public_url)
            .field("scheduler", &self.scheduler)
            .field("queue_members", &self.queue_members)
            .field("gpu_share_library", &self.gpu_share_library)
            .field("limits", &self.limits)
            .field("log_max_bytes", &self.log_max_bytes)
            .field("admin_password", &self.admin_password.as_ref().map(|_| "<redacted>"))
            .field("secret_key", &self.secret_key.as_ref().map(|_| "<redacted>"))
            .field("dataset_cache", &self.dataset_cache)
            .field("monitor", &self.monitor)
            .field("idle", &self.idle)
            .field("gpu_sharing", &self.gpu_sharing)
            .field("guard", &self.guard)
            .field("mps", &self.mps)
            .finish_non_exhaustive()
    }
}

pub fn names_or_none(names: &std::collections::BTreeSet<&str>) -> String {
    if names.is_empty() { "none".to_owned() } else { names.iter().copied().collect::<Vec<_>>().join(", ") }
}

/// `postgres://user:secret@host/db` → `postgres://user:<redacted>@host/db`.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let Some((cred, host)) = rest.rsplit_once('@') else { return url.to_owned() };
    match cred.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:<redacted>@{host}"),
        None => url.to_owned(),
    }
}

impl Config {
    /// Defaults, then `file` (or `./gpuhub.toml` when it exists and no file is named), then `GPUHUB_*`
    /// variables from `env`; then [`Config::check`].
    pub fn load(file: Option<&Path>, env: impl IntoIterator<Item = (String, String)>) -> Result<Self, ConfigError> {
        let default_file = Path::new("gpuhub.toml");
        let path = match file {
            Some(p) => Some(p),
            None if default_file.exists() => Some(default_file),
            None => None,
        };
        let text = match path {
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|source| ConfigError::Read { path: p.into(), source })?;
                // toml's own errors first: they have the line and column (and "did you mean")
                Self::from_toml(&text).map_err(|message| ConfigError::Parse { path: p.into(), message })?;
                Some((p, text))
            }
            None => None,
        };
        let vars = layers::Variables::read(env)?;
        let cfg = layers::layer(text.as_ref().map(|(p, t)| (*p, t.as_str())), vars)?;
        cfg.check()?;
        Ok(cfg)
    }

    /// Parses a TOML document over the defaults.
    pub fn from_toml(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| env::did_you_mean(e.to_string().trim_end()))
    }

    /// Every rule within and across keys (ranges, names, addresses, queues and their classes); `load`
    /// runs it, each error naming its key.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.reconcile_secs == 0 {
            return Err(ConfigError::Invalid { key: "reconcile_secs".into(), reason: "must be at least 1".into() });
        }
        self.check_auth()?;
        apps::check(self.apps_domain.as_deref(), self.public_url.as_deref())?;
        self.limits.check()?;
        homes::check(self)?;
        disk::check(self)?;
        identity::check(self)?;
        monitor::check(&self.monitor, &self.idle)?;
        sharing::check(self)?;
        datasets::check(self)?;
        self.network_block()?;
        if self.log_max_bytes.0 < MIN_LOG_MAX_BYTES {
            return Err(ConfigError::Invalid {
                key: "log_max_bytes".into(),
                reason: format!("{} is less than the least accepted, 1MiB", self.log_max_bytes),
            });
        }
        self.check_queues()
    }

    /// Token lifetime in range, trusted proxies parse.
    fn check_auth(&self) -> Result<(), ConfigError> {
        if !(1..=3650).contains(&self.token_days) {
            return Err(ConfigError::Invalid { key: "token_days".into(), reason: "must be from 1 to 3650".into() });
        }
        if !(1..=87_600).contains(&self.session_hours) {
            return Err(ConfigError::Invalid {
                key: "session_hours".into(),
                reason: "must be from 1 to 87600 (ten years)".into(),
            });
        }
        if self.login_failures == 0 {
            return Err(ConfigError::Invalid { key: "login_failures".into(), reason: "must be at least 1".into() });
        }
        self.trusted_proxy_nets()
            .map(|_| ())
            .map_err(|reason| ConfigError::Invalid { key: "trusted_proxies".into(), reason })
    }

    /// `network_pool` and `network_prefix`, checked: the pool (IPv4) and the length of each user's block
    /// of it, from the pool's own to 29; `None` without a pool.
    pub fn network_block(&self) -> Result<Option<(ipnet::Ipv4Net, u8)>, ConfigError> {
        let Some(pool) = self.network_pool.as_deref() else { return Ok(None) };
        let net: ipnet::Ipv4Net = pool.parse().map_err(|_| ConfigError::Invalid {
            key: "network_pool".into(),
            reason: format!("{pool:?} is not an IPv4 network such as 10.200.0.0/16"),
        })?;
        if self.network_prefix < net.prefix_len() || self.network_prefix > 29 {
            return Err(ConfigError::Invalid {
                key: "network_prefix".into(),
                reason: format!(
                    "{} does not fit network_pool {net}: it must be from {} to 29",
                    self.network_prefix,
                    net.prefix_len()
                ),
            });
        }
        Ok(Some((net.trunc(), self.network_prefix)))
    }

    /// `trusted_proxies`, parsed.
    pub fn trusted_proxy_nets(&self) -> Result<Vec<net::IpNet>, String> {
        self.trusted_proxies.iter().map(|s| s.parse()).collect()
    }

    /// Queue names follow the naming rule, are unique, and `queue_members` names only configured queues.
    fn check_queues(&self) -> Result<(), ConfigError> {
        let invalid = |key: String, reason: String| ConfigError::Invalid { key, reason };
        let mut seen = std::collections::BTreeSet::new();
        for q in &self.scheduler.queues {
            gpuhub_core::names::validate("queue", &q.name)
                .map_err(|e| invalid("scheduler.queues.name".into(), e.to_string()))?;
            if !seen.insert(q.name.as_str()) {
                return Err(invalid("scheduler.queues.name".into(), format!("queue {} is configured twice", q.name)));
            }
        }
        for (class, value) in &self.priority_classes {
            gpuhub_core::names::validate("priority class", class)
                .map_err(|e| invalid(format!("priority_classes.{class}"), e.to_string()))?;
            if !(-1000..=1000).contains(value) {
                return Err(invalid(format!("priority_classes.{class}"), "must be from -1000 to 1000".into()));
            }
        }
        for (queue, classes) in &self.queue_priority_classes {
            let key = format!("queue_priority_classes.{queue}");
            if queue != "*" && !seen.contains(queue.as_str()) {
                return Err(invalid(key, format!("no queue {queue} in [[scheduler.queues]] (or \"*\" for all)")));
            }
            if let Some(c) = classes.iter().find(|c| !self.priority_classes.contains_key(*c)) {
                return Err(invalid(key, format!("no priority class {c} in [priority_classes]")));
            }
        }
        for name in self.queue_members.keys() {
            if !seen.contains(name.as_str()) {
                return Err(invalid(
                    format!("queue_members.{name}"),
                    format!("no queue {name} in [[scheduler.queues]] (configured: {})", names_or_none(&seen)),
                ));
            }
        }
        Ok(())
    }

    /// Where users' homes are: `homes_dir`, or `<data_dir>/homes`.
    pub fn homes(&self) -> PathBuf {
        self.homes_dir.clone().unwrap_or_else(|| self.data_dir.join("homes"))
    }

    /// Where team folders are: `teams_dir`, or `<data_dir>/teams`.
    pub fn teams(&self) -> PathBuf {
        self.teams_dir.clone().unwrap_or_else(|| self.data_dir.join("teams"))
    }

    /// The database URL in effect: the configured one or SQLite in the data dir.
    pub fn effective_database_url(&self) -> String {
        match &self.database_url {
            Some(u) => u.clone(),
            None => format!("sqlite://{}", self.data_dir.join("gpuhub.db").display()),
        }
    }
}

#[cfg(test)]
mod tests;
