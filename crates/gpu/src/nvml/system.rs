//! What NVML says about the host's driver and each GPU's MIG mode: read-only queries for `gpuhub
//! gpu-check`'s header and inventory rows.

use super::{NvmlInventory, devices, map_nvml_error};
use crate::GpuError;
use nvml_wrapper::error::NvmlError;

/// The driver NVML belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvmlSystem {
    /// `nvmlSystemGetDriverVersion` (`580.95.05`).
    pub driver_version: String,
    /// `nvmlSystemGetCudaDriverVersion_v2`: the newest CUDA the driver supports, as CUDA writes it
    /// (`13000` for 13.0); `None` where the driver lacks the call.
    pub cuda_driver_version: Option<i32>,
}

/// A CUDA version as CUDA encodes it (`1000 × major + 10 × minor`) written `major.minor`.
pub fn cuda_version_string(encoded: i32) -> String {
    format!("{}.{}", encoded / 1000, (encoded % 1000) / 10)
}

/// MIG mode from NVML's `current` figure (`NVML_DEVICE_MIG_ENABLE` is 1).
pub fn mig_enabled(current: u32) -> bool {
    current == 1
}

impl NvmlInventory {
    /// The driver's version and the CUDA version it supports.
    ///
    /// # Errors
    /// [`GpuError::Nvml`] when NVML cannot tell the driver's version.
    pub fn system(&self) -> Result<NvmlSystem, GpuError> {
        let driver_version = self.nvml.sys_driver_version().map_err(map_nvml_error)?;
        let cuda_driver_version = match self.nvml.sys_cuda_driver_version() {
            Ok(v) => Some(v),
            Err(NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_)) => None,
            Err(err) => return Err(map_nvml_error(err)),
        };
        Ok(NvmlSystem { driver_version, cuda_driver_version })
    }

    /// Each GPU's current MIG mode, by index: `Some(true)` enabled, `Some(false)` disabled, `None`
    /// where the GPU has no MIG.
    ///
    /// # Errors
    /// [`GpuError::Nvml`] when a GPU cannot be asked.
    pub fn mig_modes(&self) -> Result<Vec<Option<bool>>, GpuError> {
        devices(&self.nvml)?
            .iter()
            .map(|device| match device.mig_mode() {
                Ok(mode) => Ok(Some(mig_enabled(mode.current))),
                Err(NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_)) => Ok(None),
                Err(err) => Err(map_nvml_error(err)),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_versions_are_written_major_minor() {
        assert_eq!(cuda_version_string(13000), "13.0");
        assert_eq!(cuda_version_string(12040), "12.4");
        assert_eq!(cuda_version_string(11080), "11.8");
    }

    #[test]
    fn mig_mode_figures() {
        assert!(mig_enabled(1));
        assert!(!mig_enabled(0));
    }
}
