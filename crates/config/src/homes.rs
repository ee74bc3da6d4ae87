//! `home_quota` and `home_backend`: how users' homes get their hard quotas (the server builds the
//! backend from them at start).

use super::{Config, ConfigError};
use serde::{Deserialize, Serialize};

/// Which filesystem mechanism enforces home quotas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
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
