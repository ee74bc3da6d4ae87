//! `home_quota` and `home_backend`: how users' homes get their hard quotas, and the backend built from
//! them at start.

use super::{Config, ConfigError, EngineKind};
use gpuhub_homes::{DirHomes, Homes, LoopHomes, XfsHomes};
use serde::Deserialize;
use std::sync::Arc;

/// Which filesystem mechanism enforces home quotas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum HomeBackend {
    /// XFS project quotas where the homes directory is on XFS with `prjquota`; otherwise, with the
    /// Docker engine and as root, loop-mounted images; otherwise plain directories (no quota).
    #[default]
    Auto,
    /// Plain directories: no quota is enforced (a `home_quota` is then a config error).
    Dir,
    /// One loop-mounted ext4 image per user (one host: the Docker engine).
    Loop,
    /// XFS project quotas (the homes directory on XFS mounted with `prjquota`).
    Xfs,
}

impl std::str::FromStr for HomeBackend {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        match s {
            "auto" => Ok(Self::Auto),
            "dir" => Ok(Self::Dir),
            "loop" => Ok(Self::Loop),
            "xfs" => Ok(Self::Xfs),
            _ => Err(ConfigError::Invalid {
                key: "home_backend".into(),
                reason: format!("{s:?} is not auto, dir, loop or xfs"),
            }),
        }
    }
}

/// `GPUHUB_HOME_QUOTA`: a size, or empty / `none` for no default quota.
pub(super) fn parse_quota(key: &str, v: &str) -> Result<Option<gpuhub_core::Bytes>, ConfigError> {
    if v.is_empty() || v == "none" {
        return Ok(None);
    }
    gpuhub_core::Bytes::parse(v)
        .map(Some)
        .map_err(|e| ConfigError::Invalid { key: key.to_owned(), reason: e.to_string() })
}

/// The default quota is at least the least a loop image can hold.
pub(super) fn check(config: &Config) -> Result<(), ConfigError> {
    match config.home_quota {
        Some(q) if q.0 < gpuhub_homes::MIN_LOOP_QUOTA => Err(ConfigError::Invalid {
            key: "home_quota".into(),
            reason: format!("{q} is less than the least accepted, 16MiB"),
        }),
        _ => Ok(()),
    }
}

/// The homes backend `config` asks for, under `config.homes()`. A backend asked for by name that cannot
/// work here, or a `home_quota` with no backend able to enforce it, is an error naming why.
pub async fn build(config: &Config) -> Result<Arc<dyn Homes>, String> {
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
