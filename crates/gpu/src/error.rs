//! What can go wrong finding GPUs and measuring the host.

use std::path::PathBuf;

/// An error from the GPU inventory or the host probes.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// The NVML library (`libnvidia-ml.so.1`) could not be loaded, or the NVIDIA driver is not running:
    /// the host has no usable NVIDIA stack. Callers fall back to the configured inventory.
    #[error("nvml is not available (libnvidia-ml.so.1 missing or nvidia driver not loaded)")]
    NvmlUnavailable,
    /// NVML loaded but a call failed (permissions, a GPU that fell off the bus, …).
    #[error("nvml: {0}")]
    Nvml(String),
    /// A configured GPU (`[[gpus]]` in the config file) breaks a rule.
    #[error("invalid gpu {gpu}: {reason}")]
    InvalidConfig {
        /// The GPU's uuid, or `#<position>` (counting from 0) when it has none.
        gpu: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A host file could not be read or did not hold what was expected.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error (`InvalidData` when the content could not be parsed).
        #[source]
        source: std::io::Error,
    },
}

impl GpuError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        GpuError::Io { path: path.into(), source }
    }

    pub(crate) fn invalid_data(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        GpuError::io(path, std::io::Error::new(std::io::ErrorKind::InvalidData, reason.into()))
    }
}
