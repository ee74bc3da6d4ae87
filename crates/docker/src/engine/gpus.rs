//! How a member's GPUs reach its container, and what it is told about them.

use crate::container::{DeviceMap, GpuAttach};
use gpuhub_core::node::NodeCapacity;
use gpuhub_driver::{EngineError, GpuGrant};
use std::collections::BTreeMap;

/// How GPUs reach containers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GpuMode {
    /// A device request per GPU UUID, served by the NVIDIA Container Toolkit (which also injects the
    /// driver's libraries).
    Nvidia,
    /// Bind exactly the granted GPUs' device nodes and the control nodes that exist; images carry their
    /// own user-space driver libraries.
    #[default]
    Devices,
    /// No GPUs are handed out.
    None,
}

/// The attachment and variables for `grant` on `node`. A member that holds no GPU sees none in either
/// mode (also under the NVIDIA runtime, whose images say `all`).
pub(crate) fn attach(
    mode: GpuMode,
    node: &NodeCapacity,
    grant: &GpuGrant,
    control: &[String],
) -> Result<(GpuAttach, BTreeMap<String, String>), EngineError> {
    let uuids = grant.uuids();
    let mut env = BTreeMap::new();
    if !matches!(grant, GpuGrant::None) && uuids.is_empty() {
        return Err(EngineError::Rejected(
            "the docker engine runs GPUs that gpuhub placed; this grant names none".into(),
        ));
    }
    if let Some(u) = uuids.iter().find(|u| !node.gpus.iter().any(|g| &g.uuid == *u)) {
        return Err(EngineError::Rejected(format!("GPU {u} is not a GPU of node {}", node.name)));
    }
    let attach = match mode {
        GpuMode::None => GpuAttach::None,
        _ if uuids.is_empty() => {
            env.insert("NVIDIA_VISIBLE_DEVICES".into(), "void".into());
            env.insert("CUDA_VISIBLE_DEVICES".into(), String::new());
            GpuAttach::None
        }
        GpuMode::Nvidia => {
            env.insert("NVIDIA_VISIBLE_DEVICES".into(), uuids.join(","));
            env.insert("NVIDIA_DRIVER_CAPABILITIES".into(), "compute,utility".into());
            GpuAttach::Nvidia { uuids }
        }
        GpuMode::Devices => {
            let mut devices: Vec<DeviceMap> = uuids
                .iter()
                .filter_map(|uuid| node.gpus.iter().find(|g| &g.uuid == uuid))
                .map(|g| DeviceMap {
                    host: g.device.clone().unwrap_or_else(|| format!("/dev/nvidia{}", g.index)),
                    container: format!("/dev/nvidia{}", g.index),
                })
                .collect();
            devices.extend(control.iter().map(|d| DeviceMap { host: d.clone(), container: d.clone() }));
            env.insert("NVIDIA_VISIBLE_DEVICES".into(), uuids.join(","));
            env.insert("CUDA_VISIBLE_DEVICES".into(), uuids.join(","));
            GpuAttach::Devices { devices }
        }
    };
    Ok((attach, env))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuhub_core::{Bytes, CpuMilli};

    fn node() -> NodeCapacity {
        let mut n = NodeCapacity::uniform("n", CpuMilli(8000), Bytes(16 << 30), 2, "H200", Bytes(141 << 30), "GPU-");
        for g in &mut n.gpus {
            g.device = Some(format!("/tmp/dev/nvidia{}", g.index));
        }
        n
    }

    fn whole(uuids: &[&str]) -> GpuGrant {
        GpuGrant::Whole { count: uuids.len() as u32, uuids: uuids.iter().map(|s| s.to_string()).collect() }
    }

    #[test]
    fn devices_mode_binds_exactly_the_granted_gpu() {
        let ctl = vec!["/dev/nvidiactl".to_string()];
        let (a, env) = attach(GpuMode::Devices, &node(), &whole(&["GPU-1"]), &ctl).unwrap();
        let GpuAttach::Devices { devices } = a else { panic!("{a:?}") };
        assert_eq!(devices[0], DeviceMap { host: "/tmp/dev/nvidia1".into(), container: "/dev/nvidia1".into() });
        assert_eq!(devices.len(), 2);
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "GPU-1");
        // a share is the GPU's device too
        let share = GpuGrant::Share { milli: 250, memory: None, uuid: Some("GPU-0".into()) };
        let (a, _) = attach(GpuMode::Devices, &node(), &share, &[]).unwrap();
        assert!(matches!(a, GpuAttach::Devices { devices } if devices[0].container == "/dev/nvidia0"));
    }

    #[test]
    fn nvidia_and_none_modes_and_refusals() {
        let (a, env) = attach(GpuMode::Nvidia, &node(), &whole(&["GPU-0", "GPU-1"]), &[]).unwrap();
        assert_eq!(a, GpuAttach::Nvidia { uuids: vec!["GPU-0".into(), "GPU-1".into()] });
        assert_eq!(env["NVIDIA_VISIBLE_DEVICES"], "GPU-0,GPU-1");
        let (a, env) = attach(GpuMode::Nvidia, &node(), &GpuGrant::None, &[]).unwrap();
        assert_eq!((a, env["NVIDIA_VISIBLE_DEVICES"].as_str()), (GpuAttach::None, "void"));
        assert_eq!(attach(GpuMode::None, &node(), &whole(&["GPU-0"]), &[]).unwrap().0, GpuAttach::None);
        let unplaced = GpuGrant::Whole { count: 1, uuids: vec![] };
        assert!(matches!(attach(GpuMode::Devices, &node(), &unplaced, &[]), Err(EngineError::Rejected(_))));
        assert!(matches!(attach(GpuMode::Devices, &node(), &whole(&["GPU-9"]), &[]), Err(EngineError::Rejected(_))));
    }
}
