//! The GPUs of a host behind a narrow trait, [`GpuInventory`], and the host's CPU and memory capacity.
//!
//! Two inventories: [`NvmlInventory`] asks NVIDIA's management library (loaded at run time, so the
//! binary needs no driver to build or start), and [`ConfiguredInventory`] serves the `[[gpus]]` list of
//! the config file, for hosts without NVML and for tests. [`detect`] picks one.
//!
//! What the GPUs do now — utilization, memory, power, temperature and the processes on each — comes from
//! a [`GpuSampler`]: [`NvmlSampler`] on a host with NVIDIA's stack, [`FakeGpuSampler`] in tests.

mod configured;
mod error;
pub mod host;
pub mod nvml;
mod sample;

pub use configured::ConfiguredInventory;
pub use error::GpuError;
pub use host::{host_capacity, hostname};
pub use nvml::{NvmlInventory, NvmlSampler};
pub use sample::{FakeGpuSampler, GpuProcess, GpuSample, GpuSampler};

use gpuhub_core::node::GpuDevice;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Where the GPUs of a host come from.
pub trait GpuInventory: Send + Sync + fmt::Debug {
    /// The GPUs, ordered by index.
    fn gpus(&self) -> Result<Vec<GpuDevice>, GpuError>;
    /// The current use of each GPU, in the order of [`GpuInventory::gpus`] (as a [`GpuSampler`] of
    /// the same GPUs measures it).
    fn sample(&self) -> Result<Vec<GpuSample>, GpuError>;
}

/// Which inventory [`detect`] chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InventorySource {
    /// NVML loaded and reported at least one GPU.
    Nvml,
    /// The configured list (possibly empty).
    Configured,
}

impl fmt::Display for InventorySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            InventorySource::Nvml => "nvml",
            InventorySource::Configured => "configured",
        })
    }
}

/// NVML when it loads and reports at least one GPU, else the configured list.
///
/// The configured list is validated only when it is used. An invalid one is logged as an error and
/// replaced by an empty inventory so that the host still serves CPU workloads; callers that would
/// rather refuse to start use [`try_detect`].
pub fn detect(configured: Vec<GpuDevice>) -> (Box<dyn GpuInventory>, InventorySource) {
    match try_detect(configured) {
        Ok(found) => found,
        Err(err) => {
            tracing::error!(error = %err, "configured gpus are invalid; serving no gpus");
            (Box::new(ConfiguredInventory::default()), InventorySource::Configured)
        }
    }
}

/// Like [`detect`], but an invalid configured list (when it is the one used) is an error.
///
/// # Errors
/// [`GpuError::InvalidConfig`] from [`ConfiguredInventory::new`].
pub fn try_detect(configured: Vec<GpuDevice>) -> Result<(Box<dyn GpuInventory>, InventorySource), GpuError> {
    try_detect_with(NvmlInventory::try_new(), configured)
}

fn try_detect_with(
    nvml: Result<NvmlInventory, GpuError>,
    configured: Vec<GpuDevice>,
) -> Result<(Box<dyn GpuInventory>, InventorySource), GpuError> {
    let reason = match nvml {
        Ok(inv) => match inv.gpus() {
            Ok(gpus) if !gpus.is_empty() => {
                let models: Vec<&str> = gpus.iter().map(|g| g.model.as_str()).collect();
                tracing::info!(count = gpus.len(), ?models, "gpu inventory: nvml");
                if !configured.is_empty() {
                    tracing::warn!(count = configured.len(), "nvml found gpus; ignoring the configured [[gpus]]");
                }
                return Ok((Box::new(inv), InventorySource::Nvml));
            }
            Ok(_) => "nvml reports no gpus".to_owned(),
            Err(err) => format!("nvml failed to list gpus: {err}"),
        },
        Err(err) => err.to_string(),
    };
    let inv = ConfiguredInventory::new(configured)?;
    tracing::info!(count = inv.devices().len(), %reason, "gpu inventory: configured");
    Ok((Box::new(inv), InventorySource::Configured))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuhub_core::Bytes;
    use gpuhub_core::quantity::GIB;

    fn assert_inventory<T: GpuInventory>() {}

    #[test]
    fn inventories_are_send_sync_debug() {
        assert_inventory::<NvmlInventory>();
        assert_inventory::<ConfiguredInventory>();
    }

    fn assert_sampler<T: GpuSampler>() {}

    #[test]
    fn samplers_are_send_sync_debug() {
        assert_sampler::<NvmlSampler>();
        assert_sampler::<FakeGpuSampler>();
        let _shared: std::sync::Arc<dyn GpuSampler> = std::sync::Arc::new(FakeGpuSampler::new(vec![]));
    }

    fn configured() -> Vec<GpuDevice> {
        vec![GpuDevice {
            uuid: "fake-0".into(),
            index: 0,
            model: "H200".into(),
            memory: Bytes(141 * GIB),
            device: None,
            sharing: None,
        }]
    }

    #[test]
    fn falls_back_to_configured() {
        let (inv, source) = try_detect_with(Err(GpuError::NvmlUnavailable), configured()).unwrap();
        assert_eq!(source, InventorySource::Configured);
        assert_eq!(inv.gpus().unwrap(), configured());
        assert_eq!(inv.sample().unwrap().len(), 1);
        let (inv, source) = try_detect_with(Err(GpuError::Nvml("no permission".into())), vec![]).unwrap();
        assert_eq!(source, InventorySource::Configured);
        assert!(inv.gpus().unwrap().is_empty());
    }

    #[test]
    fn invalid_configured_list() {
        let mut bad = configured();
        bad[0].model = String::new();
        assert!(matches!(
            try_detect_with(Err(GpuError::NvmlUnavailable), bad).map(|(_, s)| s),
            Err(GpuError::InvalidConfig { .. })
        ));
    }

    /// Without the NVIDIA stack (CI, this dev machine) `detect` serves the configured list.
    #[test]
    fn detect_on_this_host() {
        let nvml_here = NvmlInventory::try_new().ok().and_then(|i| i.gpus().ok()).is_some_and(|g| !g.is_empty());
        let (inv, source) = detect(configured());
        if nvml_here {
            assert_eq!(source, InventorySource::Nvml);
        } else {
            assert_eq!(source, InventorySource::Configured);
            assert_eq!(inv.gpus().unwrap(), configured());
        }
        let mut bad = configured();
        bad[0].device = Some("/nonexistent/nvidia0".into());
        let (inv, source) = detect(bad);
        if !nvml_here {
            assert_eq!(source, InventorySource::Configured);
            assert!(inv.gpus().unwrap().is_empty());
        }
    }

    #[test]
    fn source_names() {
        assert_eq!(InventorySource::Nvml.to_string(), "nvml");
        assert_eq!(serde_json::to_string(&InventorySource::Configured).unwrap(), "\"configured\"");
    }
}
