//! `container_disk`: the cap on what each container writes outside its mounts (its writable layer); the
//! server checks at start that the engine enforces it.

use super::{Config, ConfigError};

/// The least cap accepted: below it a container could hardly start.
pub const MIN_CONTAINER_DISK: u64 = 16 << 20;

/// A cap, when set, is at least [`MIN_CONTAINER_DISK`].
pub(super) fn check(config: &Config) -> Result<(), ConfigError> {
    match config.container_disk {
        Some(d) if d.0 < MIN_CONTAINER_DISK => Err(ConfigError::Invalid {
            key: "container_disk".into(),
            reason: format!("{d} is less than the least accepted, 16MiB"),
        }),
        _ => Ok(()),
    }
}
