//! [`ConfiguredInventory`]: GPUs listed in the config file (`[[gpus]]`), for hosts without NVML and for
//! tests, where the "GPU" may be any character device (a `mknod` node).

use crate::{GpuError, GpuInventory, GpuSample};
use gpuhub_core::Bytes;
use gpuhub_core::node::GpuDevice;
use std::collections::BTreeMap;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// A validated, fixed list of GPUs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfiguredInventory {
    gpus: Vec<GpuDevice>,
}

impl ConfiguredInventory {
    /// Validates the configured GPUs and keeps them ordered by index.
    ///
    /// `index` defaults to 0 when omitted in the config file, so all GPUs with index 0 except the first
    /// take their position in the list (counting from 0): a list without any index is numbered
    /// 0, 1, 2, …, and an index given explicitly is kept. Then:
    /// - uuids are non-empty and unique, and indexes are unique;
    /// - `model` is non-empty and `memory` is above zero;
    /// - `device`, when given, is an absolute path to an existing character device (checked now, on
    ///   this host).
    ///
    /// # Errors
    /// [`GpuError::InvalidConfig`] naming the first offending GPU (its uuid, or `#<position>`).
    pub fn new(gpus: Vec<GpuDevice>) -> Result<Self, GpuError> {
        let gpus = fill_indexes(gpus);
        let mut uuids: BTreeMap<&str, usize> = BTreeMap::new();
        let mut indexes: BTreeMap<u32, &str> = BTreeMap::new();
        for (position, gpu) in gpus.iter().enumerate() {
            let name = if gpu.uuid.trim().is_empty() { format!("#{position}") } else { gpu.uuid.clone() };
            let invalid = |reason: String| GpuError::InvalidConfig { gpu: name.clone(), reason };
            if gpu.uuid.trim().is_empty() {
                return Err(invalid("uuid must not be empty".into()));
            }
            if let Some(first) = uuids.insert(&gpu.uuid, position) {
                return Err(invalid(format!("uuid is used by gpu #{first} too")));
            }
            if let Some(other) = indexes.insert(gpu.index, &gpu.uuid) {
                return Err(invalid(format!(
                    "index {} is used by gpu {other} too (give every gpu an index, or none)",
                    gpu.index
                )));
            }
            if gpu.model.trim().is_empty() {
                return Err(invalid("model must not be empty".into()));
            }
            if gpu.memory == Bytes(0) {
                return Err(invalid("memory must be above zero".into()));
            }
            if let Some(device) = &gpu.device {
                check_device(device).map_err(invalid)?;
            }
        }
        let mut gpus = gpus;
        gpus.sort_by_key(|g| g.index);
        Ok(ConfiguredInventory { gpus })
    }

    /// The GPUs, ordered by index.
    pub fn devices(&self) -> &[GpuDevice] {
        &self.gpus
    }
}

/// Gives every GPU with index 0 but the first its position in the list.
fn fill_indexes(mut gpus: Vec<GpuDevice>) -> Vec<GpuDevice> {
    let mut seen_zero = false;
    for (position, gpu) in (0u32..).zip(gpus.iter_mut()) {
        if gpu.index == 0 {
            if seen_zero {
                gpu.index = position;
            }
            seen_zero = true;
        }
    }
    gpus
}

/// Checks that `device` is an absolute path to a character device; the error is the reason.
fn check_device(device: &str) -> Result<(), String> {
    let path = Path::new(device);
    if device.is_empty() {
        return Err("device must not be empty (leave it out for no device node)".into());
    }
    if !path.is_absolute() {
        return Err(format!("device {device} must be an absolute path"));
    }
    match std::fs::metadata(path) {
        Ok(meta) if meta.file_type().is_char_device() => Ok(()),
        Ok(_) => Err(format!("device {device} is not a character device")),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Err(format!("device {device} does not exist")),
        Err(err) => Err(format!("device {device} cannot be inspected: {err}")),
    }
}

impl GpuInventory for ConfiguredInventory {
    fn gpus(&self) -> Result<Vec<GpuDevice>, GpuError> {
        Ok(self.gpus.clone())
    }

    /// Configured GPUs have no telemetry: idle, with no memory in use.
    fn sample(&self) -> Result<Vec<GpuSample>, GpuError> {
        Ok(self
            .gpus
            .iter()
            .map(|g| GpuSample {
                uuid: g.uuid.clone(),
                index: g.index,
                model: g.model.clone(),
                utilization_pct: 0.0,
                memory_used: Bytes(0),
                memory_total: g.memory,
                power_watts: None,
                temperature_c: None,
                processes: Vec::new(),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuhub_core::quantity::GIB;

    fn gpu(uuid: &str, index: u32) -> GpuDevice {
        GpuDevice {
            uuid: uuid.into(),
            index,
            model: "H200".into(),
            memory: Bytes(141 * GIB),
            device: None,
            sharing: None,
        }
    }

    fn reason(gpus: Vec<GpuDevice>) -> (String, String) {
        match ConfiguredInventory::new(gpus) {
            Err(GpuError::InvalidConfig { gpu, reason }) => (gpu, reason),
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }

    #[test]
    fn empty_is_fine() {
        let inv = ConfiguredInventory::new(vec![]).unwrap();
        assert!(inv.gpus().unwrap().is_empty());
        assert!(inv.sample().unwrap().is_empty());
    }

    #[test]
    fn fills_missing_indexes_by_position() {
        let inv = ConfiguredInventory::new(vec![gpu("a", 0), gpu("b", 0), gpu("c", 0)]).unwrap();
        let idx: Vec<_> = inv.gpus().unwrap().iter().map(|g| (g.uuid.clone(), g.index)).collect();
        assert_eq!(idx, [("a".to_owned(), 0), ("b".to_owned(), 1), ("c".to_owned(), 2)]);

        // an index given for some: the others still take their position
        let inv = ConfiguredInventory::new(vec![gpu("a", 0), gpu("b", 1), gpu("c", 0)]).unwrap();
        let idx: Vec<_> = inv.gpus().unwrap().iter().map(|g| g.index).collect();
        assert_eq!(idx, [0, 1, 2]);
    }

    #[test]
    fn keeps_explicit_indexes_and_orders_by_them() {
        let inv = ConfiguredInventory::new(vec![gpu("a", 1), gpu("b", 0), gpu("c", 7)]).unwrap();
        let order: Vec<_> = inv.gpus().unwrap().into_iter().map(|g| (g.uuid, g.index)).collect();
        assert_eq!(order, [("b".to_owned(), 0), ("a".to_owned(), 1), ("c".to_owned(), 7)]);
        assert_eq!(inv.devices().len(), 3);
    }

    #[test]
    fn rejects_duplicates() {
        let (g, r) = reason(vec![gpu("a", 0), gpu("a", 1)]);
        assert_eq!((g.as_str(), r.as_str()), ("a", "uuid is used by gpu #0 too"));
        // c (position 2, no index) takes index 2, which a claims
        let (g, r) = reason(vec![gpu("a", 2), gpu("b", 0), gpu("c", 0)]);
        assert_eq!(g, "c");
        assert!(r.starts_with("index 2 is used by gpu a too"), "{r}");
        let (g, _) = reason(vec![gpu("a", 3), gpu("b", 3)]);
        assert_eq!(g, "b");
    }

    #[test]
    fn rejects_bad_fields() {
        let (g, r) = reason(vec![gpu("a", 0), gpu(" ", 1)]);
        assert_eq!((g.as_str(), r.as_str()), ("#1", "uuid must not be empty"));
        let (g, r) = reason(vec![GpuDevice { model: String::new(), ..gpu("a", 0) }]);
        assert_eq!((g.as_str(), r.as_str()), ("a", "model must not be empty"));
        let (_, r) = reason(vec![GpuDevice { memory: Bytes(0), ..gpu("a", 0) }]);
        assert_eq!(r, "memory must be above zero");
    }

    #[test]
    fn checks_device_nodes() {
        let ok = ConfiguredInventory::new(vec![GpuDevice { device: Some("/dev/null".into()), ..gpu("a", 0) }]);
        assert_eq!(ok.unwrap().gpus().unwrap()[0].device.as_deref(), Some("/dev/null"));

        let (g, r) = reason(vec![GpuDevice { device: Some("/nonexistent/nvidia0".into()), ..gpu("a", 0) }]);
        assert_eq!((g.as_str(), r.as_str()), ("a", "device /nonexistent/nvidia0 does not exist"));
        let (_, r) = reason(vec![GpuDevice { device: Some("/proc/meminfo".into()), ..gpu("a", 0) }]);
        assert_eq!(r, "device /proc/meminfo is not a character device");
        let (_, r) = reason(vec![GpuDevice { device: Some("/dev".into()), ..gpu("a", 0) }]);
        assert_eq!(r, "device /dev is not a character device");
        let (_, r) = reason(vec![GpuDevice { device: Some("dev/null".into()), ..gpu("a", 0) }]);
        assert_eq!(r, "device dev/null must be an absolute path");
        let (_, r) = reason(vec![GpuDevice { device: Some(String::new()), ..gpu("a", 0) }]);
        assert!(r.starts_with("device must not be empty"), "{r}");
    }

    #[test]
    fn error_message_names_gpu_and_path() {
        let err = ConfiguredInventory::new(vec![GpuDevice {
            device: Some("/nonexistent/nvidia0".into()),
            ..gpu("GPU-x", 0)
        }])
        .unwrap_err();
        assert_eq!(err.to_string(), "invalid gpu GPU-x: device /nonexistent/nvidia0 does not exist");
    }

    #[test]
    fn samples_are_idle() {
        let inv = ConfiguredInventory::new(vec![gpu("a", 0)]).unwrap();
        assert_eq!(
            inv.sample().unwrap(),
            [GpuSample {
                uuid: "a".into(),
                index: 0,
                model: "H200".into(),
                utilization_pct: 0.0,
                memory_used: Bytes(0),
                memory_total: Bytes(141 * GIB),
                power_watts: None,
                temperature_c: None,
                processes: vec![],
            }]
        );
    }
}
