//! What the server's parts take from the configuration at start: the controller's and the monitor's
//! settings, the homes backend, and the check that the engine enforces `container_disk`. The
//! configuration (`gpuhub_config`) holds the settings only; these need the parts' own crates.

use crate::config::homes::HomeBackend;
use crate::config::{Config, EngineKind};
use gpuhub_driver::Engine;
use gpuhub_homes::{DirHomes, Homes, LoopHomes, XfsHomes};
use std::sync::Arc;
use std::time::Duration;

/// What the controller takes from the configuration.
pub fn controller(config: &Config, homes: Arc<dyn Homes>) -> gpuhub_controller::Settings {
    gpuhub_controller::Settings {
        data_dir: config.data_dir.clone(),
        homes_dir: config.homes(),
        homes,
        home_quota: config.home_quota.map(|q| q.0),
        registries: config.registries.iter().map(crate::config::RegistryConfig::auth).collect(),
        stop_grace: Duration::from_secs(config.stop_grace_secs),
        on_engine_restart: config.on_engine_restart,
        reconcile: Duration::from_secs(config.reconcile_secs.max(1)),
        scheduler: config.scheduler.clone(),
        fair_share_half_life_hours: config.fair_share_half_life_hours,
        log_max_bytes: config.log_max_bytes.0,
        pids_limit: config.pids_limit,
        container_disk: config.container_disk.map(|b| b.0),
        gpu_share_library: config.gpu_share_library.clone(),
        ..gpuhub_controller::Settings::default()
    }
}

/// The monitor's settings (`[monitor]`): the interval, and the history's retention (`raw_hours`,
/// `minute_days`, `hour_days`).
pub fn monitor(m: &crate::config::monitor::MonitorConfig) -> gpuhub_monitor::MonitorSettings {
    let hours = |h: u64| Duration::from_secs(h.saturating_mul(3600));
    gpuhub_monitor::MonitorSettings {
        interval: Duration::from_secs(m.interval_secs),
        history: gpuhub_monitor::HistoryRetention {
            raw: hours(m.raw_hours),
            minute: hours(m.minute_days.saturating_mul(24)),
            hour: hours(m.hour_days.saturating_mul(24)),
        },
    }
}

/// The homes backend `config` asks for, under `config.homes()`. A backend asked for by name that cannot
/// work here, or a `home_quota` with no backend able to enforce it, is an error naming why.
pub async fn homes(config: &Config) -> Result<Arc<dyn Homes>, String> {
    let root = config.homes();
    let named = |e: gpuhub_homes::HomeError| format!("home_backend: {e}");
    let homes: Arc<dyn Homes> = match config.home_backend {
        HomeBackend::Dir => Arc::new(DirHomes::new(&root)),
        HomeBackend::Loop => Arc::new(LoopHomes::new(&root).map_err(named)?),
        HomeBackend::Xfs => Arc::new(XfsHomes::new(&root).await.map_err(named)?),
        HomeBackend::Auto => match XfsHomes::new(&root).await {
            Ok(x) => Arc::new(x),
            Err(xfs) => match (config.engine, LoopHomes::new(&root)) {
                (EngineKind::Docker, Ok(l)) => Arc::new(l),
                (_, lo) if config.home_quota.is_some() => {
                    let lo = lo.err().map(|e| e.to_string()).unwrap_or_else(|| "only with the docker engine".into());
                    return Err(format!(
                        "home_quota: no way to enforce it here ({xfs}; loop images: {lo}); \
                         put homes_dir on XFS mounted with prjquota, or leave home_quota unset"
                    ));
                }
                _ => Arc::new(DirHomes::new(&root)),
            },
        },
    };
    if config.home_quota.is_some() && !homes.enforces_quotas() {
        return Err("home_quota: home_backend = \"dir\" enforces no quota; choose auto, loop or xfs".into());
    }
    tracing::info!(backend = homes.kind(), quota = ?config.home_quota.map(|q| q.to_string()), "homes");
    Ok(homes)
}

/// Whether `engine` enforces the `container_disk` of `config`: a cap it cannot enforce is an error naming
/// why (never a container that writes without limit while the admin believes it capped). Without a cap,
/// a warning that containers' writable layers are unlimited.
pub fn disk_enforced(config: &Config, engine: &dyn Engine) -> Result<(), String> {
    let Some(cap) = config.container_disk else {
        tracing::warn!(
            engine = engine.name(),
            "container_disk is unset: what containers write outside their mounts (/tmp, /) is unlimited, \
             and one workload can fill the disk the engine keeps containers on"
        );
        return Ok(());
    };
    match engine.disk_cap() {
        Ok(()) => {
            tracing::info!(engine = engine.name(), cap = %cap, "each container's writable layer is capped");
            Ok(())
        }
        Err(why) => Err(format!(
            "container_disk = \"{cap}\" cannot be enforced by the {} engine: {why}; or unset container_disk \
             (containers' writable layers are then unlimited)",
            engine.name()
        )),
    }
}
