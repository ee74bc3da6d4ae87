//! `container_disk`: the cap on what each container writes outside its mounts (its writable layer), and
//! the check at start that the engine enforces it.

use super::{Config, ConfigError};
use gpuhub_driver::Engine;

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

/// Whether `engine` enforces the `container_disk` of `config`: a cap it cannot enforce is an error naming
/// why (never a container that writes without limit while the admin believes it capped). Without a cap,
/// a warning that containers' writable layers are unlimited.
pub fn enforced(config: &Config, engine: &dyn Engine) -> Result<(), String> {
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
