//! [`NvmlInventory`]: the GPUs NVIDIA's management library reports.
//!
//! `nvml-wrapper` opens `libnvidia-ml.so.1` at run time, so the binary has no link-time dependency on the
//! driver and runs on hosts without one; there [`NvmlInventory::try_new`] returns
//! [`GpuError::NvmlUnavailable`]. The calls into NVML are thin; what they return is turned into gpuhub
//! types by the pure functions [`gpu_device`] and [`gpu_sample`], which are unit-tested without a GPU.
//! [`NvmlSampler`] measures what the GPUs do now; [`NvmlInventory::sampler`] makes one that shares the
//! inventory's loaded library.

mod sampler;
mod system;

pub use sampler::{NvmlProcess, NvmlSampler, NvmlUsage, gpu_sample};
pub use system::{NvmlSystem, cuda_version_string, mig_enabled};

use crate::{GpuError, GpuInventory, GpuSample};
use gpuhub_core::Bytes;
use gpuhub_core::node::GpuDevice;
use nvml_wrapper::Nvml;
use nvml_wrapper::error::NvmlError;
use std::ffi::OsStr;
use std::sync::Arc;

/// The library NVML is loaded from (found through the dynamic loader's search path).
pub const NVML_LIBRARY: &str = "libnvidia-ml.so.1";

/// What NVML says about one device, as plain data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvmlDeviceInfo {
    /// `nvmlDeviceGetUUID` (`GPU-8e1f…`).
    pub uuid: String,
    /// NVML's index of the device (`nvmlDeviceGetHandleByIndex`).
    pub index: u32,
    /// `nvmlDeviceGetName` (`NVIDIA H200`).
    pub name: String,
    /// Total framebuffer memory in bytes (`nvmlDeviceGetMemoryInfo_v2`).
    pub memory_total: u64,
    /// `nvmlDeviceGetMinorNumber`: the device node is `/dev/nvidia<minor>`; `None` where not supported.
    pub minor_number: Option<u32>,
}

/// Maps NVML's view of a device to a [`GpuDevice`].
pub fn gpu_device(info: NvmlDeviceInfo) -> GpuDevice {
    GpuDevice {
        uuid: info.uuid,
        index: info.index,
        model: info.name,
        memory: Bytes(info.memory_total),
        device: info.minor_number.map(|minor| format!("/dev/nvidia{minor}")),
        sharing: None,
    }
}

/// Sorts NVML errors into "no NVIDIA stack here" and real failures.
pub(crate) fn map_nvml_error(err: NvmlError) -> GpuError {
    match err {
        NvmlError::LibloadingError(_)
        | NvmlError::FailedToLoadSymbol(_)
        | NvmlError::LibraryNotFound
        | NvmlError::DriverNotLoaded => GpuError::NvmlUnavailable,
        other => GpuError::Nvml(other.to_string()),
    }
}

/// Loads NVML from `library` (a file name looked up by the dynamic loader, or a path).
fn load(library: &OsStr) -> Result<Arc<Nvml>, GpuError> {
    match Nvml::builder().lib_path(library).init() {
        Ok(nvml) => Ok(Arc::new(nvml)),
        Err(err) => {
            tracing::debug!(library = %library.to_string_lossy(), error = %err, "nvml init failed");
            Err(map_nvml_error(err))
        }
    }
}

/// Every device NVML reports, by index.
fn devices(nvml: &Nvml) -> Result<Vec<nvml_wrapper::Device<'_>>, GpuError> {
    let count = nvml.device_count().map_err(map_nvml_error)?;
    (0..count).map(|i| nvml.device_by_index(i).map_err(map_nvml_error)).collect()
}

/// The GPUs of this host as NVML reports them.
#[derive(Debug)]
pub struct NvmlInventory {
    nvml: Arc<Nvml>,
}

impl NvmlInventory {
    /// Loads [`NVML_LIBRARY`] and initializes NVML.
    ///
    /// # Errors
    /// [`GpuError::NvmlUnavailable`] when the library cannot be loaded or the driver is not running;
    /// [`GpuError::Nvml`] when NVML loads but refuses to initialize (no permission, …).
    pub fn try_new() -> Result<Self, GpuError> {
        Self::try_with_library(OsStr::new(NVML_LIBRARY))
    }

    /// Like [`NvmlInventory::try_new`], loading NVML from `library` (a file name looked up by the dynamic
    /// loader, or a path).
    pub fn try_with_library(library: &OsStr) -> Result<Self, GpuError> {
        Ok(NvmlInventory { nvml: load(library)? })
    }

    /// A sampler of the same GPUs, sharing this inventory's loaded library.
    pub fn sampler(&self) -> NvmlSampler {
        NvmlSampler::from_shared(Arc::clone(&self.nvml))
    }
}

impl GpuInventory for NvmlInventory {
    fn gpus(&self) -> Result<Vec<GpuDevice>, GpuError> {
        let mut gpus = Vec::new();
        for (index, device) in (0u32..).zip(devices(&self.nvml)?) {
            let minor_number = match device.minor_number() {
                Ok(minor) => Some(minor),
                Err(NvmlError::NotSupported) => None,
                Err(err) => return Err(map_nvml_error(err)),
            };
            gpus.push(gpu_device(NvmlDeviceInfo {
                uuid: device.uuid().map_err(map_nvml_error)?,
                index,
                name: device.name().map_err(map_nvml_error)?,
                memory_total: device.memory_info().map_err(map_nvml_error)?.total,
                minor_number,
            }));
        }
        Ok(gpus)
    }

    fn sample(&self) -> Result<Vec<GpuSample>, GpuError> {
        sampler::sample_all(&self.nvml)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuhub_core::quantity::GIB;

    #[test]
    fn maps_a_device() {
        let gpu = gpu_device(NvmlDeviceInfo {
            uuid: "GPU-8e1f0c2a-0000-1111-2222-333344445555".into(),
            index: 3,
            name: "NVIDIA H200".into(),
            memory_total: 141 * GIB,
            minor_number: Some(5),
        });
        assert_eq!(
            gpu,
            GpuDevice {
                uuid: "GPU-8e1f0c2a-0000-1111-2222-333344445555".into(),
                index: 3,
                model: "NVIDIA H200".into(),
                memory: Bytes(141 * GIB),
                device: Some("/dev/nvidia5".into()),
                sharing: None,
            }
        );
    }

    #[test]
    fn no_minor_number_means_no_device_node() {
        let gpu = gpu_device(NvmlDeviceInfo {
            uuid: "GPU-1".into(),
            index: 0,
            name: "Tesla T4".into(),
            memory_total: 16 * GIB,
            minor_number: None,
        });
        assert_eq!(gpu.device, None);
    }

    #[test]
    fn sorts_errors() {
        assert!(matches!(map_nvml_error(NvmlError::DriverNotLoaded), GpuError::NvmlUnavailable));
        assert!(matches!(map_nvml_error(NvmlError::LibraryNotFound), GpuError::NvmlUnavailable));
        assert!(matches!(map_nvml_error(NvmlError::FailedToLoadSymbol("x".into())), GpuError::NvmlUnavailable));
        match map_nvml_error(NvmlError::NoPermission) {
            GpuError::Nvml(msg) => assert!(!msg.is_empty()),
            other => panic!("expected Nvml, got {other:?}"),
        }
    }

    #[test]
    fn missing_library_is_unavailable() {
        let err =
            NvmlInventory::try_with_library(OsStr::new("/nonexistent/gpuhub-test/libnvidia-ml.so.1")).unwrap_err();
        assert!(matches!(err, GpuError::NvmlUnavailable), "{err:?}");
        assert_eq!(err.to_string(), "nvml is not available (libnvidia-ml.so.1 missing or nvidia driver not loaded)");
    }

    /// On a host without the NVIDIA stack (CI, this dev machine) NVML must fail cleanly; on a GPU host it
    /// must list GPUs with uuids and device nodes.
    #[test]
    fn default_library_loads_or_fails_cleanly() {
        match NvmlInventory::try_new() {
            Err(GpuError::NvmlUnavailable) => {}
            Err(other) => panic!("NVML failed with something other than unavailable: {other}"),
            Ok(inv) => {
                let gpus = inv.gpus().unwrap();
                for gpu in &gpus {
                    assert!(gpu.uuid.starts_with("GPU-") || gpu.uuid.starts_with("MIG-"), "{gpu:?}");
                    assert!(gpu.memory.get() > 0, "{gpu:?}");
                }
                let samples = inv.sample().unwrap();
                assert_eq!(samples.len(), gpus.len());
            }
        }
    }
}
