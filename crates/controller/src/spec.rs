//! From a workload to the run that executes it: the one place that decides members, limits, identity,
//! mounts, network and GPU grants, in engine-neutral terms (each engine translates the [`RunSpec`]).
//! Pure: the caller supplies everything it reads.

use crate::mps::{MpsEndpoint, is_mps_gpu};
use gpuhub_core::node::NodeCapacity;
use gpuhub_core::workload::Workload;
use gpuhub_driver::{GpuGrant, Identity, LABEL_INSTANCE, LABEL_OWNER, LABEL_WORKLOAD, MemberSpec, Mount, RunSpec};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// The network of a user's one-member runs on a single-host engine: one bridge per user and
/// installation, so users' containers cannot reach each other, and two installations sharing an engine
/// never share a user's bridge. Its labels are [`network_labels`].
pub fn user_network(instance: &str, owner: &str) -> String {
    format!("gpuhub-{}-u-{owner}", &instance[..12.min(instance.len())])
}

/// The labels of a user's network: its owner and this installation (a network of the same name with
/// other labels is never joined).
pub fn network_labels(instance: &str, owner: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(LABEL_OWNER.to_owned(), owner.to_owned()), (LABEL_INSTANCE.to_owned(), instance.to_owned())])
}

/// The name of a workload's run in the engine (Docker's container name for a one-member run): the
/// owner, the workload and its id, and `attempt`, which differs from every earlier run's, so that a
/// late event of an earlier run can never be taken for this one's.
pub fn run_name(w: &Workload, attempt: &str) -> String {
    format!("gpuhub-{}-{}-{}-{attempt}", w.owner, w.name, &w.id[..8.min(w.id.len())])
}

/// The hostname of member `index` of `w`: the workload's name, with the index for a gang.
pub fn hostname(w: &Workload, index: u32) -> String {
    if w.size > 1 { format!("{}-{index}", w.name) } else { w.name.clone() }
}

/// The home directory of a user on the host (and, for engines of several nodes, on every node), under
/// `homes_dir`.
pub fn home_on_host(homes_dir: &Path, owner: &str) -> std::path::PathBuf {
    homes_dir.join(owner)
}

/// The variable naming the port an app listens on (`GPUHUB_PORT_LAB` for app `lab`).
pub fn app_port_var(app: &str) -> String {
    format!("GPUHUB_PORT_{}", app.to_ascii_uppercase().replace('-', "_"))
}

/// Everything a run spec needs beyond the workload.
#[derive(Debug)]
pub struct SpecContext<'a> {
    /// This installation's id (kept in the store).
    pub instance: &'a str,
    /// The owner's UID.
    pub uid: u32,
    /// The owner's GID (the UID for local accounts, a directory's `gidNumber` otherwise).
    pub gid: u32,
    /// Where users' homes are (`homes_dir`).
    pub homes_dir: &'a Path,
    /// The engine's nodes (a share's GPU memory is read here).
    pub nodes: &'a [NodeCapacity],
    pub pids_limit: i64,
    /// The most output the engine keeps per member (`log_max_bytes`).
    pub log_max_bytes: u64,
    /// The most each member may write outside its mounts (`container_disk`); `None`: no cap.
    pub disk_bytes: Option<u64>,
    /// The GPU-sharing library (HAMi-core `libvgpu.so`) and the host file that preloads it, for members
    /// that hold a share of a GPU.
    pub share_library: Option<(&'a Path, &'a Path)>,
    /// The port each app listens on, when gpuhub assigned one (engines whose members share the node's
    /// network); absent apps listen on their declared port.
    pub app_ports: &'a BTreeMap<String, u16>,
    /// What tells this run apart from the workload's earlier ones (see [`run_name`]).
    pub attempt: &'a str,
    /// The MPS daemon of each GPU in the `mps` sharing mode that this run holds a share of, answering
    /// (the launch ensured it before building the spec).
    pub mps: &'a BTreeMap<String, MpsEndpoint>,
}

/// Where a member holding a share of an MPS GPU finds its daemon's pipe directory
/// (`CUDA_MPS_PIPE_DIRECTORY`); its `/dev/shm` is the daemon's shared memory.
pub const MPS_PIPE_TARGET: &str = "/run/gpuhub/mps";

/// The mounts and variables of a member holding a share of `gpu`, when it is an MPS GPU whose daemon
/// answers: its pipe directory (read-write, as NVIDIA's device plugin mounts it) and its shared memory
/// as `/dev/shm` (instead of the container's own), so the container's CUDA reaches the daemon without
/// the host's IPC. The share's limits are in [`share_env`].
fn mps_client(gpu: Option<&str>, cx: &SpecContext<'_>) -> (Vec<Mount>, Option<(String, String)>) {
    let Some(ep) = gpu.filter(|u| is_mps_gpu(cx.nodes, u)).and_then(|u| cx.mps.get(u)) else {
        return (Vec::new(), None);
    };
    let bind = |source: &std::path::Path, target: &str| Mount {
        source: source.display().to_string(),
        target: target.to_owned(),
        read_only: false,
        nfs: None,
    };
    let mounts = vec![bind(&ep.pipe_dir, MPS_PIPE_TARGET), bind(&ep.shm_dir, "/dev/shm")];
    (mounts, Some(("CUDA_MPS_PIPE_DIRECTORY".to_owned(), MPS_PIPE_TARGET.to_owned())))
}

/// Where the GPU-sharing library is mounted in a container, and what the preload file names.
pub const SHARE_LIBRARY_TARGET: &str = "/usr/local/lib/gpuhub/libvgpu.so";

/// The limits a member holding a share of `gpu` is told about: milli-GPU, its compute percentage and
/// its GPU memory (the amount asked for, else the share of the GPU's memory).
fn share_env(w: &Workload, gpu_memory: Option<u64>) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    let milli = w.resources.gpu_milli;
    if milli == 0 {
        return env;
    }
    let percent = milli.div_ceil(10).max(1);
    env.insert("GPUHUB_GPU_MILLI".into(), milli.to_string());
    env.insert("CUDA_DEVICE_SM_LIMIT".into(), percent.to_string());
    env.insert("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".into(), percent.to_string());
    let bytes = gpuhub_core::workload::share_memory(milli, w.resources.gpu_memory, gpu_memory.unwrap_or(0));
    let mib = bytes >> 20;
    if mib > 0 {
        env.insert("GPUHUB_GPU_MEMORY".into(), bytes.to_string());
        env.insert("CUDA_DEVICE_MEMORY_LIMIT".into(), format!("{mib}m"));
        env.insert("CUDA_DEVICE_MEMORY_SHARED_CACHE".into(), "/tmp/gpuhub-vgpu.cache".into());
        env.insert("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".into(), format!("0={mib}M"));
        // CUDA still reports the whole GPU's memory to a share (under MPS too), and frameworks that
        // size themselves by it over-ask: tell the two that read a hint from the environment, unless
        // the user set it (JAX preallocates this fraction of the total; TensorFlow grows on demand)
        let hint = |env: &mut BTreeMap<String, String>, k: &str, v: String| {
            if !w.env.contains_key(k) {
                env.insert(k.to_owned(), v);
            }
        };
        if let Some(total) = gpu_memory.filter(|t| *t > 0) {
            // rounded down to a hundredth, at least one
            let hundredths = (bytes.saturating_mul(100) / total).clamp(1, 100);
            hint(&mut env, "XLA_PYTHON_CLIENT_MEM_FRACTION", format!("{:.2}", hundredths as f64 / 100.0));
        }
        hint(&mut env, "TF_FORCE_GPU_ALLOW_GROWTH", "true".to_owned());
    }
    env
}

/// The GPUs member `index` is granted: those gpuhub placed (recorded in `w.members`), else a count or
/// share the engine places.
fn grant(w: &Workload, index: u32) -> GpuGrant {
    let placed: Vec<String> = w.members.iter().find(|m| m.index == index).map(|m| m.gpus.clone()).unwrap_or_default();
    let r = &w.resources;
    match (r.gpus, r.gpu_milli) {
        (0, 0) => GpuGrant::None,
        (0, milli) => GpuGrant::Share { milli, memory: r.gpu_memory.map(|b| b.0), uuid: placed.into_iter().next() },
        (count, _) => GpuGrant::Whole { count, uuids: placed },
    }
}

/// The run of `w`: `w.size` members, each as the owner's UID with the owner's home and exactly its GPUs.
pub fn run_spec(w: &Workload, cx: &SpecContext<'_>) -> RunSpec {
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
    let mut ports = Vec::new();
    for app in &w.apps {
        let port = cx.app_ports.get(&app.name).copied().unwrap_or(app.port);
        env.insert(app_port_var(&app.name), port.to_string());
        ports.push(port);
    }
    let members = (0..w.size.max(1))
        .map(|index| {
            let gpus = grant(w, index);
            let gpu_memory = gpus
                .uuids()
                .first()
                .and_then(|u| cx.nodes.iter().flat_map(|n| &n.gpus).find(|g| &g.uuid == u))
                .map(|g| g.memory.0);
            let mut env = share_env(w, gpu_memory);
            let share_of = match &gpus {
                GpuGrant::Share { uuid, .. } => uuid.as_deref(),
                _ => None,
            };
            let (mounts, mps_env) = mps_client(share_of, cx);
            env.extend(mps_env);
            MemberSpec {
                index,
                hostname: hostname(w, index),
                node: w.members.iter().find(|m| m.index == index).and_then(|m| m.node.clone()),
                cpu_milli: w.resources.cpu_milli.0,
                memory_bytes: w.resources.memory.0,
                gpus,
                env,
                mounts,
            }
        })
        .collect::<Vec<_>>();
    let mut mounts = vec![Mount {
        source: home_on_host(cx.homes_dir, &w.owner).display().to_string(),
        target: home.clone(),
        read_only: false,
        nfs: None,
    }];
    let shares = w.resources.gpu_milli > 0;
    if let (Some((lib, preload)), true) = (cx.share_library, shares) {
        mounts.push(Mount {
            source: lib.display().to_string(),
            target: SHARE_LIBRARY_TARGET.into(),
            read_only: true,
            nfs: None,
        });
        mounts.push(Mount {
            source: preload.display().to_string(),
            target: "/etc/ld.so.preload".into(),
            read_only: true,
            nfs: None,
        });
    }
    // the datasets it asked for, at the paths they had when it was submitted, read-only unless an
    // object-storage dataset was registered read-write
    mounts.extend(w.datasets.iter().map(|d| Mount {
        source: d.path.clone(),
        target: d.target(),
        read_only: d.read_only,
        nfs: d.nfs.clone(),
    }));
    // its team folders, read-write, with their groups carried by every process of the run
    mounts.extend(w.teams.iter().map(|t| Mount {
        source: t.path.clone(),
        target: t.target(),
        read_only: false,
        nfs: None,
    }));
    let mut labels = BTreeMap::from([
        (LABEL_OWNER.to_owned(), w.owner.clone()),
        (LABEL_WORKLOAD.to_owned(), w.id.clone()),
        ("gpuhub.kind".to_owned(), w.kind.as_str().to_owned()),
        ("gpuhub.name".to_owned(), w.name.clone()),
        (LABEL_INSTANCE.to_owned(), cx.instance.to_owned()),
    ]);
    // a service's port and readiness check, for engines that check it themselves (Kubernetes)
    if let Some(s) = &w.service {
        use gpuhub_core::service::{LABEL_PORT, LABEL_READY};
        let port = w.members.first().and_then(|m| m.ports.get("service")).copied().unwrap_or(s.spec.port);
        labels.insert(LABEL_PORT.to_owned(), port.to_string());
        labels.insert(LABEL_READY.to_owned(), s.spec.ready_check().to_label());
    }
    let mut groups: Vec<u32> = w.teams.iter().map(|t| t.gid).collect();
    groups.sort_unstable();
    groups.dedup();
    RunSpec {
        name: run_name(w, cx.attempt),
        image: w.image.clone(),
        command: w.command.clone(),
        env,
        labels,
        identity: Identity {
            username: w.owner.clone(),
            account: w.owner.clone(),
            uid: cx.uid,
            gid: cx.gid,
            home: home.clone(),
            groups,
        },
        working_dir: Some(home),
        mounts,
        network: Some(user_network(cx.instance, &w.owner)),
        members,
        pids_limit: cx.pids_limit,
        log_max_bytes: Some(cx.log_max_bytes),
        time_limit: w.runtime_limit.map(|s| Duration::from_secs(s.0)),
        queue: w.queue.clone(),
        ports,
        disk_bytes: cx.disk_bytes,
    }
}

#[cfg(test)]
mod tests;
