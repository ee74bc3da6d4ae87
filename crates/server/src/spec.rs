//! From a workload to the container that runs it: the one place that decides limits, user, mounts,
//! network and GPU attachment. Pure: the caller supplies everything it reads.

use crate::config::GpuMode;
use gpuhub_core::node::NodeCapacity;
use gpuhub_core::workload::Workload;
use gpuhub_driver::{ContainerSpec, DeviceMap, GpuAttach, LABEL_OWNER, LABEL_WORKLOAD, Mount};
use std::collections::BTreeMap;
use std::path::Path;

/// The GPU control nodes a container gets in `devices` mode, when the host has them.
pub const CONTROL_DEVICES: [&str; 3] = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"];

/// The network of a user's containers: one bridge per user and installation, so users' containers cannot
/// reach each other, and two installations sharing an engine never share a user's bridge. Its labels are
/// [`network_labels`].
pub fn user_network(instance: &str, owner: &str) -> String {
    format!("gpuhub-{}-u-{owner}", &instance[..12.min(instance.len())])
}

/// The labels of a user's network: its owner and this installation (a network of the same name with other
/// labels is never joined).
pub fn network_labels(instance: &str, owner: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(LABEL_OWNER.to_owned(), owner.to_owned()), (LABEL_INSTANCE.to_owned(), instance.to_owned())])
}

/// The container name of a workload.
pub fn container_name(w: &Workload) -> String {
    format!("gpuhub-{}-{}-{}", w.owner, w.name, &w.id[..8.min(w.id.len())])
}

/// The home directory of a user on the host.
pub fn home_on_host(data_dir: &Path, owner: &str) -> std::path::PathBuf {
    data_dir.join("homes").join(owner)
}

/// Label naming the gpuhub installation that made a container; a server adopts, stops or removes only
/// containers carrying its own instance id, so several servers can share one engine.
pub const LABEL_INSTANCE: &str = "gpuhub.instance";

/// Everything a container spec needs beyond the workload.
#[derive(Debug)]
pub struct SpecContext<'a> {
    /// This installation's id (kept in the store).
    pub instance: &'a str,
    pub uid: u32,
    pub data_dir: &'a Path,
    pub node: &'a NodeCapacity,
    pub gpu_mode: GpuMode,
    pub control_devices: &'a [String],
    pub pids_limit: i64,
    /// The most output the engine keeps for the container (`log_max_bytes`).
    pub log_max_bytes: u64,
    /// The GPU-sharing library (HAMi-core `libvgpu.so`) and the host file that preloads it, for
    /// containers that hold a share of a GPU.
    pub share_library: Option<(&'a Path, &'a Path)>,
}

/// Where the GPU-sharing library is mounted in a container, and what the preload file names.
pub const SHARE_LIBRARY_TARGET: &str = "/usr/local/lib/gpuhub/libvgpu.so";

/// The limits a container holding a share of a GPU is told about: milli-GPU, its compute percentage and
/// its GPU memory (the amount asked for, else the share of the GPU's memory).
fn share_env(w: &Workload, node: &NodeCapacity, env: &mut BTreeMap<String, String>) {
    let milli = w.resources.gpu_milli;
    if milli == 0 {
        return;
    }
    let percent = milli.div_ceil(10).max(1);
    env.insert("GPUHUB_GPU_MILLI".into(), milli.to_string());
    env.insert("CUDA_DEVICE_SM_LIMIT".into(), percent.to_string());
    env.insert("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".into(), percent.to_string());
    let gpu_mem = w.gpus.first().and_then(|u| node.gpus.iter().find(|g| &g.uuid == u)).map_or(0, |g| g.memory.0);
    let bytes = match w.resources.gpu_memory {
        Some(b) => b.0,
        None => gpu_mem / 1000 * u64::from(milli),
    };
    let mib = bytes >> 20;
    if mib > 0 {
        env.insert("GPUHUB_GPU_MEMORY".into(), bytes.to_string());
        env.insert("CUDA_DEVICE_MEMORY_LIMIT".into(), format!("{mib}m"));
        env.insert("CUDA_DEVICE_MEMORY_SHARED_CACHE".into(), "/tmp/gpuhub-vgpu.cache".into());
        env.insert("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".into(), format!("0={mib}M"));
    }
}

/// The container for `w`, running as the owner's UID with the owner's home and exactly its GPUs.
pub fn container_spec(w: &Workload, cx: &SpecContext<'_>) -> ContainerSpec {
    let home = format!("/home/{}", w.owner);
    // the platform's variables are its own even for rows stored before the submit check refused them
    let mut env: BTreeMap<String, String> = w
        .env
        .iter()
        .filter(|(k, _)| gpuhub_core::env::reserved(k).is_none())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    env.insert("HOME".into(), home.clone());
    env.insert("USER".into(), w.owner.clone());
    env.insert("GPUHUB_WORKLOAD".into(), w.name.clone());
    let gpus = match cx.gpu_mode {
        GpuMode::None => GpuAttach::None,
        _ if w.gpus.is_empty() => {
            // hide every GPU from a container that holds none, also under the NVIDIA runtime
            env.insert("NVIDIA_VISIBLE_DEVICES".into(), "void".into());
            env.insert("CUDA_VISIBLE_DEVICES".into(), String::new());
            GpuAttach::None
        }
        GpuMode::Nvidia => {
            env.insert("NVIDIA_VISIBLE_DEVICES".into(), w.gpus.join(","));
            env.insert("NVIDIA_DRIVER_CAPABILITIES".into(), "compute,utility".into());
            GpuAttach::Nvidia { uuids: w.gpus.clone() }
        }
        GpuMode::Devices => {
            let mut devices: Vec<DeviceMap> = w
                .gpus
                .iter()
                .filter_map(|uuid| cx.node.gpus.iter().find(|g| &g.uuid == uuid))
                .map(|g| DeviceMap {
                    host: g.device.clone().unwrap_or_else(|| format!("/dev/nvidia{}", g.index)),
                    container: format!("/dev/nvidia{}", g.index),
                })
                .collect();
            devices.extend(cx.control_devices.iter().map(|d| DeviceMap { host: d.clone(), container: d.clone() }));
            env.insert("NVIDIA_VISIBLE_DEVICES".into(), w.gpus.join(","));
            env.insert("CUDA_VISIBLE_DEVICES".into(), w.gpus.join(","));
            GpuAttach::Devices { devices }
        }
    };
    share_env(w, cx.node, &mut env);
    let mut mounts = vec![Mount {
        source: home_on_host(cx.data_dir, &w.owner).display().to_string(),
        target: home.clone(),
        read_only: false,
    }];
    if let (Some((lib, preload)), true) = (cx.share_library, w.resources.gpu_milli > 0 && !w.gpus.is_empty()) {
        mounts.push(Mount { source: lib.display().to_string(), target: SHARE_LIBRARY_TARGET.into(), read_only: true });
        mounts.push(Mount {
            source: preload.display().to_string(),
            target: "/etc/ld.so.preload".into(),
            read_only: true,
        });
    }
    ContainerSpec {
        name: container_name(w),
        image: w.image.clone(),
        command: w.command.clone(),
        env,
        labels: BTreeMap::from([
            (LABEL_OWNER.to_owned(), w.owner.clone()),
            (LABEL_WORKLOAD.to_owned(), w.id.clone()),
            ("gpuhub.kind".to_owned(), w.kind.as_str().to_owned()),
            ("gpuhub.name".to_owned(), w.name.clone()),
            (LABEL_INSTANCE.to_owned(), cx.instance.to_owned()),
        ]),
        user: format!("{0}:{0}", cx.uid),
        hostname: Some(w.name.clone()),
        working_dir: Some(home.clone()),
        cpu_milli: w.resources.cpu_milli.0,
        memory_bytes: w.resources.memory.0,
        pids_limit: cx.pids_limit,
        mounts,
        network: Some(user_network(cx.instance, &w.owner)),
        gpus,
        log_max_bytes: Some(cx.log_max_bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuhub_core::node::GpuDevice;
    use gpuhub_core::workload::{Resources, WorkloadKind, WorkloadState};
    use gpuhub_core::{Bytes, CpuMilli};

    fn workload(gpus: &[&str]) -> Workload {
        let t = chrono::DateTime::from_timestamp(0, 0).unwrap();
        Workload {
            id: "0123456789abcdef".into(),
            name: "train".into(),
            owner: "alice".into(),
            kind: WorkloadKind::Job,
            image: "busybox".into(),
            command: vec!["true".into()],
            env: BTreeMap::from([("A".into(), "1".into())]),
            resources: Resources {
                cpu_milli: CpuMilli(1500),
                memory: Bytes(1 << 30),
                gpus: gpus.len() as u32,
                ..Resources::default()
            },
            priority: 0,
            queue: String::new(),
            constraint: None,
            runtime_limit: None,
            apps: Vec::new(),
            state: WorkloadState::Starting,
            gpus: gpus.iter().map(|s| s.to_string()).collect(),
            container_id: None,
            exit_code: None,
            message: None,
            interruption: None,
            created_at: t,
            queued_at: t,
            started_at: None,
            finished_at: None,
        }
    }

    fn node() -> NodeCapacity {
        NodeCapacity {
            name: "n".into(),
            cpus: CpuMilli(8000),
            memory: Bytes(16 << 30),
            gpus: (0..2)
                .map(|i| GpuDevice {
                    uuid: format!("GPU-{i}"),
                    index: i,
                    model: "H200".into(),
                    memory: Bytes(141 << 30),
                    device: Some(format!("/tmp/dev/nvidia{i}")),
                })
                .collect(),
            labels: Default::default(),
        }
    }

    #[test]
    fn devices_mode_binds_exactly_the_assigned_gpu() {
        let n = node();
        let ctl = vec!["/dev/nvidiactl".to_string()];
        let cx = SpecContext {
            instance: "i1",
            uid: 10001,
            data_dir: Path::new("/data"),
            node: &n,
            gpu_mode: GpuMode::Devices,
            control_devices: &ctl,
            pids_limit: 100,
            log_max_bytes: 1 << 20,
            share_library: None,
        };
        let s = container_spec(&workload(&["GPU-1"]), &cx);
        assert_eq!(s.user, "10001:10001");
        assert_eq!(s.cpu_milli, 1500);
        assert_eq!(s.log_max_bytes, Some(1 << 20), "the engine caps the output");
        assert_eq!(s.mounts[0].source, "/data/homes/alice");
        assert_eq!(s.mounts[0].target, "/home/alice");
        assert_eq!(s.network.as_deref(), Some("gpuhub-i1-u-alice"));
        assert_eq!(user_network("0123456789abcdef0123", "bob"), "gpuhub-0123456789ab-u-bob");
        assert_eq!(network_labels("i1", "bob")[LABEL_INSTANCE], "i1");
        assert_eq!(s.labels[LABEL_WORKLOAD], "0123456789abcdef");
        assert_eq!(s.labels[LABEL_INSTANCE], "i1");
        let GpuAttach::Devices { devices } = &s.gpus else { panic!("{:?}", s.gpus) };
        assert_eq!(devices[0], DeviceMap { host: "/tmp/dev/nvidia1".into(), container: "/dev/nvidia1".into() });
        assert_eq!(devices.len(), 2);
        assert_eq!(s.env["CUDA_VISIBLE_DEVICES"], "GPU-1");
    }

    #[test]
    fn nvidia_and_none_modes() {
        let n = node();
        let mut cx = SpecContext {
            instance: "i1",
            uid: 10000,
            data_dir: Path::new("/d"),
            node: &n,
            gpu_mode: GpuMode::Nvidia,
            control_devices: &[],
            pids_limit: 1,
            log_max_bytes: 1 << 20,
            share_library: None,
        };
        let s = container_spec(&workload(&["GPU-0", "GPU-1"]), &cx);
        assert_eq!(s.gpus, GpuAttach::Nvidia { uuids: vec!["GPU-0".into(), "GPU-1".into()] });
        let s = container_spec(&workload(&[]), &cx);
        assert_eq!(s.gpus, GpuAttach::None);
        assert_eq!(s.env["NVIDIA_VISIBLE_DEVICES"], "void");
        cx.gpu_mode = GpuMode::None;
        assert_eq!(container_spec(&workload(&["GPU-0"]), &cx).gpus, GpuAttach::None);
    }

    #[test]
    fn a_gpu_share_gets_its_limits_and_the_sharing_library() {
        let n = node();
        let (lib, preload) = (Path::new("/opt/hami/libvgpu.so"), Path::new("/data/gpu-share/ld.so.preload"));
        let cx = SpecContext {
            instance: "i1",
            uid: 10001,
            data_dir: Path::new("/data"),
            node: &n,
            gpu_mode: GpuMode::Devices,
            control_devices: &[],
            pids_limit: 100,
            log_max_bytes: 1 << 20,
            share_library: Some((lib, preload)),
        };
        let mut w = workload(&["GPU-1"]);
        w.resources.gpus = 0;
        w.resources.gpu_milli = 250;
        let s = container_spec(&w, &cx);
        // the shared GPU's device only; a quarter of its compute and of its 141GiB
        let GpuAttach::Devices { devices } = &s.gpus else { panic!("{:?}", s.gpus) };
        assert_eq!(devices.iter().map(|d| d.container.as_str()).collect::<Vec<_>>(), ["/dev/nvidia1"]);
        assert_eq!(s.env["GPUHUB_GPU_MILLI"], "250");
        assert_eq!(s.env["CUDA_DEVICE_SM_LIMIT"], "25");
        assert_eq!(s.env["CUDA_DEVICE_MEMORY_LIMIT"], format!("{}m", ((141u64 << 30) / 1000 * 250) >> 20));
        let preloaded: Vec<_> = s.mounts.iter().filter(|m| m.read_only).map(|m| m.target.as_str()).collect();
        assert_eq!(preloaded, [SHARE_LIBRARY_TARGET, "/etc/ld.so.preload"]);
        // an amount of GPU memory asked for is the cap
        w.resources.gpu_memory = Some(Bytes(10 << 30));
        let s = container_spec(&w, &cx);
        assert_eq!(s.env["CUDA_DEVICE_MEMORY_LIMIT"], "10240m");
        assert_eq!(s.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=10240M");
        // whole GPUs get neither the library nor share limits
        let s = container_spec(&workload(&["GPU-0"]), &cx);
        assert!(s.mounts.iter().all(|m| !m.read_only) && !s.env.contains_key("CUDA_DEVICE_MEMORY_LIMIT"));
    }
}
