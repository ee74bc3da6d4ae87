//! What the controller takes from the configuration (the server maps its typed config onto this).

use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The controller's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The absolute data directory (logs).
    pub data_dir: PathBuf,
    /// Where users' homes are: `<data_dir>/homes` unless configured elsewhere (shared storage, for
    /// engines of several nodes).
    pub homes_dir: PathBuf,
    /// Makes homes exist with their quotas before a run starts (plain directories by default).
    pub homes: Arc<dyn gpuhub_homes::Homes>,
    /// The home quota of users without their own, in bytes; `None`: no quota.
    pub home_quota: Option<u64>,
    /// Credentials of private registries, used to pull images from them.
    pub registries: Vec<gpuhub_driver::RegistryAuth>,
    /// SIGTERM, then SIGKILL after this, when a person stops a run.
    pub stop_grace: Duration,
    /// Full reconciliation with the engine (and a fresh inventory) this often.
    pub reconcile: Duration,
    /// The scheduler's settings (the queues are read from the store on every pass).
    pub scheduler: gpuhub_sched::Config,
    /// Decay of the usage fair share compares, in hours.
    pub fair_share_half_life_hours: f64,
    /// Output kept per run and member (also the engines' log cap).
    pub log_max_bytes: u64,
    /// Processes per member.
    pub pids_limit: i64,
    /// The most each member may write outside its mounts, in bytes (`container_disk`); `None`: no cap.
    pub container_disk: Option<u64>,
    /// The GPU-sharing library (HAMi-core) mounted into members holding a share, when set.
    pub gpu_share_library: Option<PathBuf>,
    /// Ports the apps of runs get on engines whose members share their node's network.
    pub app_ports: RangeInclusive<u16>,
    /// The MPS daemons of GPUs in the `mps` sharing mode (engines where gpuhub places); `None`: none run,
    /// and a share of such a GPU waits in the queue saying so.
    pub mps: Option<Arc<dyn crate::mps::MpsDaemons>>,
    /// What becomes of a run the engine's own shutdown or restart killed (`on_engine_restart`).
    pub on_engine_restart: gpuhub_core::stop::OnEngineRestart,
    /// How long an exit with a kill code gpuhub did not ask for is held to see whether the engine is
    /// going away (its event stream breaking), and how long after the engine's return a run found
    /// killed counts as killed by its restart. A stopping `dockerd` gives each container its stop
    /// timeout (10s by default) before SIGKILL, and only then ends its event stream.
    pub engine_restart_margin: Duration,
    /// How often a rolling update's new run is checked for readiness.
    pub rollout_poll: Duration,
    /// How long a service's old run goes on after its URL switched to the new run (requests sent to it
    /// before the switch are answered), before it is stopped.
    pub rollout_drain: Duration,
}

/// The default [`Settings::engine_restart_margin`].
pub const ENGINE_RESTART_MARGIN: Duration = Duration::from_secs(15);

impl Default for Settings {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("./gpuhub-data"),
            homes_dir: PathBuf::from("./gpuhub-data/homes"),
            homes: Arc::new(gpuhub_homes::DirHomes::new("./gpuhub-data/homes")),
            home_quota: None,
            registries: Vec::new(),
            stop_grace: Duration::from_secs(10),
            reconcile: Duration::from_secs(30),
            scheduler: gpuhub_sched::Config::default(),
            fair_share_half_life_hours: 24.0,
            log_max_bytes: 100 << 20,
            pids_limit: 4096,
            container_disk: None,
            gpu_share_library: None,
            app_ports: 20000..=29999,
            mps: None,
            on_engine_restart: Default::default(),
            engine_restart_margin: ENGINE_RESTART_MARGIN,
            rollout_poll: Duration::from_millis(500),
            rollout_drain: Duration::from_secs(2),
        }
    }
}
