//! [`NvmlSampler`]: what each GPU does now, as NVML reports it — utilization
//! (`nvmlDeviceGetUtilizationRates`), memory (`nvmlDeviceGetMemoryInfo`), power
//! (`nvmlDeviceGetPowerUsage`, milliwatts), the die's temperature (`nvmlDeviceGetTemperature`) and the
//! processes with a compute or graphics context (`nvmlDeviceGet{Compute,Graphics}RunningProcesses_v3`)
//! with the GPU memory each uses. What NVML returns becomes a [`GpuSample`] in the pure [`gpu_sample`].
//!
//! A reading the GPU does not support (power or temperature on some boards, utilization on a GPU in
//! MIG mode, processes where the driver cannot list them) is left out rather than failing the sample;
//! a GPU that fails (fell off the bus, …) fails it.

use super::{devices, load, map_nvml_error};
use crate::{GpuError, GpuProcess, GpuSample, GpuSampler};
use gpuhub_core::Bytes;
use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::ProcessInfo;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::sync::Arc;

/// A process on a device, as NVML lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvmlProcess {
    /// Its PID.
    pub pid: u32,
    /// The device memory it uses, in bytes; `None` where NVML cannot say.
    pub used_memory: Option<u64>,
}

/// What NVML says about one device's current use, as plain data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvmlUsage {
    /// `nvmlDeviceGetUUID`.
    pub uuid: String,
    /// NVML's index of the device.
    pub index: u32,
    /// `nvmlDeviceGetName`.
    pub name: String,
    /// Percent of the last sample period during which a kernel ran; `None` where not supported.
    pub gpu_utilization: Option<u32>,
    /// Allocated framebuffer memory in bytes.
    pub memory_used: u64,
    /// Total framebuffer memory in bytes.
    pub memory_total: u64,
    /// Power drawn, in milliwatts; `None` where not supported.
    pub power_milliwatts: Option<u32>,
    /// The die's temperature in °C; `None` where not supported.
    pub temperature_c: Option<u32>,
    /// The compute processes and the graphics processes, as listed (a process with both kinds of
    /// context is in both).
    pub processes: Vec<NvmlProcess>,
}

/// Maps NVML's view of a device's use to a [`GpuSample`]: utilization clamped to 100 (0 where not
/// supported), milliwatts to watts, each process once (the larger memory figure where it is listed
/// twice, 0 where NVML cannot say), ordered by PID.
pub fn gpu_sample(usage: NvmlUsage) -> GpuSample {
    let mut processes: BTreeMap<u32, u64> = BTreeMap::new();
    for p in usage.processes {
        let used = processes.entry(p.pid).or_default();
        *used = (*used).max(p.used_memory.unwrap_or(0));
    }
    GpuSample {
        uuid: usage.uuid,
        index: usage.index,
        model: usage.name,
        utilization_pct: f64::from(usage.gpu_utilization.unwrap_or(0).min(100)),
        memory_used: Bytes(usage.memory_used),
        memory_total: Bytes(usage.memory_total),
        power_watts: usage.power_milliwatts.map(|mw| f64::from(mw) / 1000.0),
        temperature_c: usage.temperature_c.map(f64::from),
        processes: processes.into_iter().map(|(pid, used)| GpuProcess { pid, memory_used: Bytes(used) }).collect(),
    }
}

/// A reading the device may not support: `None` when it does not (or the driver lacks the call).
fn optional<T>(reading: Result<T, NvmlError>) -> Result<Option<T>, GpuError> {
    match reading {
        Ok(value) => Ok(Some(value)),
        Err(NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_)) => Ok(None),
        Err(err) => Err(map_nvml_error(err)),
    }
}

/// A process list: empty where the driver cannot list them (not supported, no permission).
fn process_list(listed: Result<Vec<ProcessInfo>, NvmlError>) -> Result<Vec<NvmlProcess>, GpuError> {
    match listed {
        Ok(list) => Ok(list
            .into_iter()
            .map(|p| NvmlProcess {
                pid: p.pid,
                used_memory: match p.used_gpu_memory {
                    UsedGpuMemory::Used(bytes) => Some(bytes),
                    UsedGpuMemory::Unavailable => None,
                },
            })
            .collect()),
        Err(err @ (NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_) | NvmlError::NoPermission)) => {
            tracing::debug!(error = %err, "nvml cannot list a gpu's processes");
            Ok(Vec::new())
        }
        Err(err) => Err(map_nvml_error(err)),
    }
}

/// Every device's use now, by index.
pub(crate) fn sample_all(nvml: &Nvml) -> Result<Vec<GpuSample>, GpuError> {
    let mut samples = Vec::new();
    for (index, device) in (0u32..).zip(devices(nvml)?) {
        let memory = device.memory_info().map_err(map_nvml_error)?;
        let mut processes = process_list(device.running_compute_processes())?;
        processes.extend(process_list(device.running_graphics_processes())?);
        samples.push(gpu_sample(NvmlUsage {
            uuid: device.uuid().map_err(map_nvml_error)?,
            index,
            name: device.name().map_err(map_nvml_error)?,
            gpu_utilization: optional(device.utilization_rates())?.map(|u| u.gpu),
            memory_used: memory.used,
            memory_total: memory.total,
            power_milliwatts: optional(device.power_usage())?,
            temperature_c: optional(device.temperature(TemperatureSensor::Gpu))?,
            processes,
        }));
    }
    Ok(samples)
}

/// What this host's GPUs do now, as NVML reports it.
#[derive(Debug)]
pub struct NvmlSampler {
    nvml: Arc<Nvml>,
}

impl NvmlSampler {
    /// Loads [`super::NVML_LIBRARY`] and initializes NVML (or use [`super::NvmlInventory::sampler`] to
    /// share an inventory's).
    ///
    /// # Errors
    /// [`GpuError::NvmlUnavailable`] when the library cannot be loaded or the driver is not running;
    /// [`GpuError::Nvml`] when NVML loads but refuses to initialize.
    pub fn try_new() -> Result<Self, GpuError> {
        Self::try_with_library(OsStr::new(super::NVML_LIBRARY))
    }

    /// Like [`NvmlSampler::try_new`], loading NVML from `library` (a file name looked up by the dynamic
    /// loader, or a path).
    pub fn try_with_library(library: &OsStr) -> Result<Self, GpuError> {
        Ok(Self { nvml: load(library)? })
    }

    pub(crate) fn from_shared(nvml: Arc<Nvml>) -> Self {
        Self { nvml }
    }
}

impl GpuSampler for NvmlSampler {
    fn sample(&self) -> Result<Vec<GpuSample>, GpuError> {
        sample_all(&self.nvml)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuhub_core::quantity::GIB;

    fn usage() -> NvmlUsage {
        NvmlUsage {
            uuid: "GPU-1".into(),
            index: 2,
            name: "NVIDIA H100 80GB HBM3".into(),
            gpu_utilization: Some(42),
            memory_used: GIB,
            memory_total: 80 * GIB,
            power_milliwatts: Some(312_456),
            temperature_c: Some(61),
            processes: vec![
                NvmlProcess { pid: 900, used_memory: Some(512 << 20) },
                NvmlProcess { pid: 31, used_memory: None },
                // compute and graphics: listed twice
                NvmlProcess { pid: 900, used_memory: Some(256 << 20) },
            ],
        }
    }

    #[test]
    fn maps_a_sample() {
        assert_eq!(
            gpu_sample(usage()),
            GpuSample {
                uuid: "GPU-1".into(),
                index: 2,
                model: "NVIDIA H100 80GB HBM3".into(),
                utilization_pct: 42.0,
                memory_used: Bytes(GIB),
                memory_total: Bytes(80 * GIB),
                power_watts: Some(312.456),
                temperature_c: Some(61.0),
                processes: vec![
                    GpuProcess { pid: 31, memory_used: Bytes(0) },
                    GpuProcess { pid: 900, memory_used: Bytes(512 << 20) },
                ],
            }
        );
    }

    #[test]
    fn unsupported_readings_and_odd_values() {
        let s = gpu_sample(NvmlUsage {
            gpu_utilization: None,
            power_milliwatts: None,
            temperature_c: None,
            processes: vec![],
            ..usage()
        });
        assert_eq!((s.utilization_pct, s.power_watts, s.temperature_c), (0.0, None, None));
        assert!(s.processes.is_empty());
        assert_eq!(gpu_sample(NvmlUsage { gpu_utilization: Some(250), ..usage() }).utilization_pct, 100.0);
    }

    #[test]
    fn unsupported_is_none_and_failures_are_errors() {
        assert_eq!(optional(Ok::<u32, NvmlError>(5)).unwrap(), Some(5));
        assert_eq!(optional::<u32>(Err(NvmlError::NotSupported)).unwrap(), None);
        assert_eq!(optional::<u32>(Err(NvmlError::FailedToLoadSymbol("x".into()))).unwrap(), None);
        assert!(matches!(optional::<u32>(Err(NvmlError::GpuLost)), Err(GpuError::Nvml(_))));
        assert!(process_list(Err(NvmlError::NoPermission)).unwrap().is_empty());
        assert!(process_list(Err(NvmlError::NotSupported)).unwrap().is_empty());
        assert!(matches!(process_list(Err(NvmlError::GpuLost)), Err(GpuError::Nvml(_))));
        let listed = vec![
            ProcessInfo {
                pid: 7,
                used_gpu_memory: UsedGpuMemory::Used(1024),
                gpu_instance_id: None,
                compute_instance_id: None,
            },
            ProcessInfo {
                pid: 8,
                used_gpu_memory: UsedGpuMemory::Unavailable,
                gpu_instance_id: None,
                compute_instance_id: None,
            },
        ];
        assert_eq!(
            process_list(Ok(listed)).unwrap(),
            [NvmlProcess { pid: 7, used_memory: Some(1024) }, NvmlProcess { pid: 8, used_memory: None }]
        );
    }

    #[test]
    fn missing_library_is_unavailable() {
        let err = NvmlSampler::try_with_library(OsStr::new("/nonexistent/gpuhub-test/libnvidia-ml.so.1")).unwrap_err();
        assert!(matches!(err, GpuError::NvmlUnavailable), "{err:?}");
    }

    /// Without the NVIDIA stack (CI, this dev machine) NVML fails cleanly; on a GPU host every GPU is
    /// sampled with sane figures.
    #[test]
    fn default_library_samples_or_fails_cleanly() {
        match NvmlSampler::try_new() {
            Err(GpuError::NvmlUnavailable) => {}
            Err(other) => panic!("NVML failed with something other than unavailable: {other}"),
            Ok(sampler) => {
                for s in sampler.sample().unwrap() {
                    assert!((0.0..=100.0).contains(&s.utilization_pct), "{s:?}");
                    assert!(s.memory_total.get() > 0 && s.memory_used <= s.memory_total, "{s:?}");
                    assert!(!s.model.is_empty(), "{s:?}");
                }
            }
        }
    }
}
