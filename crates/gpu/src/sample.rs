//! What the GPUs do now: [`GpuSample`]s from a [`GpuSampler`] — [`crate::NvmlSampler`] on a host with
//! NVIDIA's stack, [`FakeGpuSampler`] (scripted) in tests.

use crate::GpuError;
use gpuhub_core::Bytes;
use gpuhub_core::node::GpuDevice;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Mutex, PoisonError};

/// One GPU's use at one moment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuSample {
    /// The GPU's uuid (as in [`GpuDevice::uuid`]).
    pub uuid: String,
    /// The GPU's index on its host (as in [`GpuDevice::index`]).
    pub index: u32,
    /// The GPU's model (as in [`GpuDevice::model`]).
    pub model: String,
    /// Percent of the last sample period during which a kernel ran (0 to 100; 0 where the GPU does not
    /// report it).
    pub utilization_pct: f64,
    /// Device memory in use.
    pub memory_used: Bytes,
    /// Device memory in all.
    pub memory_total: Bytes,
    /// Power drawn now, in watts, where the GPU reports it.
    pub power_watts: Option<f64>,
    /// The GPU die's temperature in °C, where the GPU reports it.
    pub temperature_c: Option<f64>,
    /// The processes using the GPU (compute and graphics), by PID.
    pub processes: Vec<GpuProcess>,
}

/// A process using a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuProcess {
    /// Its PID, as the host sees it (match it against a member's PIDs, or its `/proc/<pid>/cgroup`).
    pub pid: u32,
    /// The GPU memory it uses (0 where the driver does not say).
    pub memory_used: Bytes,
}

/// Measures the GPUs of a host. Shared behind an `Arc` by the monitoring loop; a sample is a few driver
/// calls per GPU, cheap but blocking.
pub trait GpuSampler: Send + Sync + fmt::Debug {
    /// Every GPU's use now, ordered by index.
    fn sample(&self) -> Result<Vec<GpuSample>, GpuError>;
}

/// A scripted [`GpuSampler`] over a fixed list of GPUs (their model and memory come from the list):
/// every GPU is sampled, idle (0 %, no memory, no processes, no sensors) until a test says otherwise.
#[derive(Debug)]
pub struct FakeGpuSampler {
    state: Mutex<FakeState>,
}

#[derive(Debug)]
struct FakeState {
    /// By uuid, ordered by index when sampled.
    gpus: BTreeMap<String, GpuSample>,
    /// A failure every sample answers while set.
    failure: Option<String>,
}

impl FakeGpuSampler {
    /// Samples `gpus`, idle.
    pub fn new(gpus: Vec<GpuDevice>) -> Self {
        let gpus = gpus
            .into_iter()
            .map(|g| {
                let idle = GpuSample {
                    uuid: g.uuid.clone(),
                    index: g.index,
                    model: g.model,
                    utilization_pct: 0.0,
                    memory_used: Bytes(0),
                    memory_total: g.memory,
                    power_watts: None,
                    temperature_c: None,
                    processes: Vec::new(),
                };
                (g.uuid, idle)
            })
            .collect();
        Self { state: Mutex::new(FakeState { gpus, failure: None }) }
    }

    fn with_gpu(&self, uuid: &str, change: impl FnOnce(&mut GpuSample)) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(sample) = state.gpus.get_mut(uuid) {
            change(sample);
        }
    }

    /// GPU `uuid`'s utilization and memory in use from now on; a uuid not in the list is ignored.
    pub fn set(&self, uuid: &str, utilization_pct: f64, memory_used: Bytes) {
        self.with_gpu(uuid, |s| {
            s.utilization_pct = utilization_pct;
            s.memory_used = memory_used;
        });
    }

    /// The processes on GPU `uuid` from now on; a uuid not in the list is ignored.
    pub fn set_processes(&self, uuid: &str, processes: Vec<GpuProcess>) {
        self.with_gpu(uuid, |s| s.processes = processes);
    }

    /// GPU `uuid`'s power draw and temperature from now on; a uuid not in the list is ignored.
    pub fn set_sensors(&self, uuid: &str, power_watts: Option<f64>, temperature_c: Option<f64>) {
        self.with_gpu(uuid, |s| {
            s.power_watts = power_watts;
            s.temperature_c = temperature_c;
        });
    }

    /// Makes every sample fail with [`GpuError::Nvml`] carrying `message` (`Some`), as a GPU that fell
    /// off the bus would, or succeed again (`None`).
    pub fn set_failure(&self, message: Option<&str>) {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).failure = message.map(str::to_owned);
    }
}

impl GpuSampler for FakeGpuSampler {
    fn sample(&self) -> Result<Vec<GpuSample>, GpuError> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(message) = &state.failure {
            return Err(GpuError::Nvml(message.clone()));
        }
        let mut samples: Vec<GpuSample> = state.gpus.values().cloned().collect();
        samples.sort_by_key(|s| s.index);
        Ok(samples)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuhub_core::quantity::GIB;

    fn gpu(uuid: &str, index: u32, model: &str, gib: u64) -> GpuDevice {
        GpuDevice {
            uuid: uuid.into(),
            index,
            model: model.into(),
            memory: Bytes(gib * GIB),
            device: None,
            sharing: None,
        }
    }

    fn fake() -> FakeGpuSampler {
        // listed out of order: samples come by index
        FakeGpuSampler::new(vec![gpu("GPU-b", 1, "A100", 80), gpu("GPU-a", 0, "H200", 141)])
    }

    #[test]
    fn every_gpu_is_sampled_idle_by_default() {
        let samples = fake().sample().unwrap();
        assert_eq!(
            samples,
            [
                GpuSample {
                    uuid: "GPU-a".into(),
                    index: 0,
                    model: "H200".into(),
                    utilization_pct: 0.0,
                    memory_used: Bytes(0),
                    memory_total: Bytes(141 * GIB),
                    power_watts: None,
                    temperature_c: None,
                    processes: vec![],
                },
                GpuSample {
                    uuid: "GPU-b".into(),
                    index: 1,
                    model: "A100".into(),
                    utilization_pct: 0.0,
                    memory_used: Bytes(0),
                    memory_total: Bytes(80 * GIB),
                    power_watts: None,
                    temperature_c: None,
                    processes: vec![],
                },
            ]
        );
        assert!(FakeGpuSampler::new(vec![]).sample().unwrap().is_empty());
    }

    #[test]
    fn scripted_use_is_sampled_until_changed() {
        let f = fake();
        f.set("GPU-b", 87.5, Bytes(20 * GIB));
        let procs =
            vec![GpuProcess { pid: 4242, memory_used: Bytes(12 * GIB) }, GpuProcess { pid: 7, memory_used: Bytes(0) }];
        f.set_processes("GPU-b", procs.clone());
        f.set_sensors("GPU-a", Some(312.5), Some(61.0));
        f.set("GPU-nope", 50.0, Bytes(1));
        f.set_processes("GPU-nope", procs.clone());
        let s = f.sample().unwrap();
        assert_eq!(s.len(), 2, "an unknown uuid adds no gpu");
        assert_eq!((s[1].utilization_pct, s[1].memory_used, &s[1].processes), (87.5, Bytes(20 * GIB), &procs));
        assert_eq!((s[1].memory_total, s[1].power_watts), (Bytes(80 * GIB), None));
        assert_eq!((s[0].power_watts, s[0].temperature_c), (Some(312.5), Some(61.0)));
        assert_eq!((s[0].utilization_pct, s[0].memory_used, s[0].processes.len()), (0.0, Bytes(0), 0), "untouched");
        assert_eq!(f.sample().unwrap(), s, "a script holds until changed");
        f.set("GPU-b", 0.0, Bytes(0));
        f.set_processes("GPU-b", vec![]);
        assert_eq!(
            f.sample().unwrap(),
            fake()
                .sample()
                .map(|mut v| {
                    v[0].power_watts = Some(312.5);
                    v[0].temperature_c = Some(61.0);
                    v
                })
                .unwrap()
        );
    }

    #[test]
    fn a_scripted_failure_fails_every_sample_until_cleared() {
        let f = fake();
        f.set_failure(Some("gpu has fallen off the bus"));
        match f.sample() {
            Err(e @ GpuError::Nvml(_)) => assert_eq!(e.to_string(), "nvml: gpu has fallen off the bus"),
            other => panic!("expected a failure, got {other:?}"),
        }
        assert!(f.sample().is_err());
        f.set_failure(None);
        assert_eq!(f.sample().unwrap().len(), 2);
    }

    #[test]
    fn samples_round_trip_as_json() {
        let f = fake();
        f.set_processes("GPU-a", vec![GpuProcess { pid: 1, memory_used: Bytes(GIB) }]);
        f.set_sensors("GPU-a", Some(100.0), None);
        let s = f.sample().unwrap();
        let back: Vec<GpuSample> = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }
}
