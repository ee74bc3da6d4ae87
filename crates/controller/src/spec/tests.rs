use super::*;
use gpuhub_core::node::GpuSharing;
use gpuhub_core::workload::{AppSpec, Member, Resources, WorkloadState};
use gpuhub_core::{Bytes, CpuMilli, Seconds};
use std::collections::BTreeSet;
use std::path::PathBuf;

fn workload(gpus: &[&str]) -> Workload {
    let t = chrono::DateTime::from_timestamp(0, 0).unwrap();
    let mut w = crate::testutil::job("0123456789abcdef", t).restore(WorkloadState::Starting);
    w.name = "train".into();
    w.image = "busybox".into();
    w.command = vec!["true".into()];
    w.env = BTreeMap::from([("A".into(), "1".into()), ("LD_PRELOAD".into(), "/evil.so".into())]);
    w.resources = Resources {
        cpu_milli: CpuMilli(1500),
        memory: Bytes(1 << 30),
        gpus: gpus.len() as u32,
        ..Resources::default()
    };
    w.queue = "vision".into();
    w.runtime_limit = Some(Seconds(7200));
    w.gpus = gpus.iter().map(|s| s.to_string()).collect();
    w.members = vec![Member { node: Some("n".into()), gpus: w.gpus.clone(), ..Member::pending(0) }];
    w
}

fn nodes() -> Vec<NodeCapacity> {
    let mut n = NodeCapacity::uniform("n", CpuMilli(8000), Bytes(16 << 30), 2, "H200", Bytes(141 << 30), "GPU-");
    for g in &mut n.gpus {
        g.device = Some(format!("/tmp/dev/nvidia{}", g.index));
    }
    vec![n]
}

fn cx<'a>(nodes: &'a [NodeCapacity], ports: &'a BTreeMap<String, u16>) -> SpecContext<'a> {
    SpecContext {
        instance: "i1",
        uid: 10001,
        gid: 10001,
        homes_dir: Path::new("/data/homes"),
        nodes,
        pids_limit: 100,
        log_max_bytes: 1 << 20,
        disk_bytes: None,
        share_library: None,
        app_ports: ports,
        attempt: "r1",
        mps: &NO_MPS,
    }
}

static NO_MPS: BTreeMap<String, MpsEndpoint> = BTreeMap::new();

#[test]
fn one_member_as_the_owner_with_its_home_and_placed_gpu() {
    let (n, p) = (nodes(), BTreeMap::new());
    let s = run_spec(&workload(&["GPU-1"]), &cx(&n, &p));
    assert_eq!(s.name, "gpuhub-alice-train-01234567-r1");
    assert_eq!((s.identity.user(), s.identity.account.as_str()), ("10001:10001".to_owned(), "alice"));
    assert_eq!(s.mounts[0].source, "/data/homes/alice");
    assert_eq!(s.mounts[0].target, "/home/alice");
    assert_eq!(s.network.as_deref(), Some("gpuhub-i1-u-alice"));
    assert_eq!(user_network("0123456789abcdef0123", "bob"), "gpuhub-0123456789ab-u-bob");
    assert_eq!(network_labels("i1", "bob")[LABEL_INSTANCE], "i1");
    assert_eq!(s.labels[LABEL_WORKLOAD], "0123456789abcdef");
    assert_eq!(s.labels[LABEL_INSTANCE], "i1");
    assert_eq!((s.time_limit, s.queue.as_str()), (Some(Duration::from_secs(7200)), "vision"));
    assert_eq!(s.log_max_bytes, Some(1 << 20), "the engine caps the output");
    assert_eq!(s.env["A"], "1");
    assert!(!s.env.contains_key("LD_PRELOAD"), "the platform's variables are never the user's");
    let [m] = s.members.as_slice() else { panic!("{:?}", s.members) };
    assert_eq!((m.hostname.as_str(), m.node.as_deref(), m.cpu_milli), ("train", Some("n"), 1500));
    assert_eq!(m.gpus, GpuGrant::Whole { count: 1, uuids: vec!["GPU-1".into()] });
}

#[test]
fn the_disk_cap_reaches_the_run() {
    let (n, p) = (nodes(), BTreeMap::new());
    assert_eq!(run_spec(&workload(&["GPU-1"]), &cx(&n, &p)).disk_bytes, None, "no cap unless configured");
    let cx = SpecContext { disk_bytes: Some(20 << 30), ..cx(&n, &p) };
    assert_eq!(run_spec(&workload(&["GPU-1"]), &cx).disk_bytes, Some(20 << 30));
}

#[test]
fn a_gang_has_a_member_per_rank_and_an_unplaced_grant_for_engines_that_place() {
    let (n, p) = (nodes(), BTreeMap::new());
    let mut w = workload(&[]);
    w.size = 2;
    w.resources.gpus = 1;
    w.members.clear();
    let s = run_spec(&w, &cx(&n, &p));
    assert_eq!(s.members.iter().map(|m| m.hostname.as_str()).collect::<Vec<_>>(), ["train-0", "train-1"]);
    assert!(s.members.iter().all(|m| m.node.is_none() && m.gpus == GpuGrant::Whole { count: 1, uuids: vec![] }));
}

#[test]
fn a_gpu_share_gets_its_limits_and_the_sharing_library() {
    let (n, p) = (nodes(), BTreeMap::new());
    let (lib, preload) = (Path::new("/opt/hami/libvgpu.so"), Path::new("/data/gpu-share/ld.so.preload"));
    let cx = SpecContext { share_library: Some((lib, preload)), ..cx(&n, &p) };
    let mut w = workload(&["GPU-1"]);
    w.resources.gpus = 0;
    w.resources.gpu_milli = 250;
    let s = run_spec(&w, &cx);
    let m = &s.members[0];
    assert_eq!(m.gpus, GpuGrant::Share { milli: 250, memory: None, uuid: Some("GPU-1".into()) });
    assert_eq!(m.env["GPUHUB_GPU_MILLI"], "250");
    assert_eq!(m.env["CUDA_DEVICE_SM_LIMIT"], "25");
    assert_eq!(m.env["CUDA_DEVICE_MEMORY_LIMIT"], format!("{}m", ((141u64 << 30) / 1000 * 250) >> 20));
    let preloaded: Vec<_> = s.mounts.iter().filter(|m| m.read_only).map(|m| m.target.as_str()).collect();
    assert_eq!(preloaded, [SHARE_LIBRARY_TARGET, "/etc/ld.so.preload"]);
    // an amount of GPU memory asked for is the cap
    w.resources.gpu_memory = Some(Bytes(10 << 30));
    let s = run_spec(&w, &cx);
    assert_eq!(s.members[0].env["CUDA_DEVICE_MEMORY_LIMIT"], "10240m");
    assert_eq!(s.members[0].env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=10240M");
    // frameworks that size themselves by the GPU's total are told the share's fraction (10 of 141 GiB),
    // unless the user says otherwise
    assert_eq!(s.members[0].env["XLA_PYTHON_CLIENT_MEM_FRACTION"], "0.07");
    assert_eq!(s.members[0].env["TF_FORCE_GPU_ALLOW_GROWTH"], "true");
    w.env.insert("XLA_PYTHON_CLIENT_MEM_FRACTION".into(), "0.5".into());
    let s = run_spec(&w, &cx);
    assert!(!s.members[0].env.contains_key("XLA_PYTHON_CLIENT_MEM_FRACTION"));
    assert_eq!(s.env["XLA_PYTHON_CLIENT_MEM_FRACTION"], "0.5");
    // whole GPUs get neither the library nor share limits
    let s = run_spec(&workload(&["GPU-0"]), &cx);
    assert!(s.mounts.iter().all(|m| !m.read_only) && !s.members[0].env.contains_key("CUDA_DEVICE_MEMORY_LIMIT"));
}

#[test]
fn apps_learn_their_ports() {
    let n = nodes();
    let mut w = workload(&[]);
    w.apps = vec![
        AppSpec { name: "lab".into(), port: 8888, command: vec![] },
        AppSpec { name: "tensor-board".into(), port: 6006, command: vec![] },
    ];
    let none = BTreeMap::new();
    let s = run_spec(&w, &cx(&n, &none));
    assert_eq!((s.env["GPUHUB_PORT_LAB"].as_str(), s.ports.as_slice()), ("8888", &[8888, 6006][..]));
    assert_eq!(s.env["GPUHUB_PORT_TENSOR_BOARD"], "6006");
    let assigned = BTreeMap::from([("lab".to_owned(), 20001)]);
    let s = run_spec(&w, &cx(&n, &assigned));
    assert_eq!((s.env["GPUHUB_PORT_LAB"].as_str(), s.ports.as_slice()), ("20001", &[20001, 6006][..]));
}

/// Nodes whose GPU 0 shares in `zero`'s mode and GPU 1 in `one`'s.
fn shared_nodes(zero: Option<GpuSharing>, one: Option<GpuSharing>) -> Vec<NodeCapacity> {
    let mut n = nodes();
    n[0].gpus[0].sharing = zero;
    n[0].gpus[1].sharing = one;
    n
}

fn endpoint(uuid: &str) -> MpsEndpoint {
    MpsEndpoint {
        pipe_dir: PathBuf::from(format!("/run/gpuhub/mps/{uuid}/pipe")),
        shm_dir: PathBuf::from(format!("/run/gpuhub/mps/{uuid}/shm")),
    }
}

/// A share of 250 milli-GPU and 10 GiB, one member per GPU named.
fn share(gpus: &[&str]) -> Workload {
    let mut w = workload(&[]);
    w.resources.gpu_milli = 250;
    w.resources.gpu_memory = Some(Bytes(10 << 30));
    w.size = gpus.len() as u32;
    w.members = gpus
        .iter()
        .enumerate()
        .map(|(i, g)| Member { node: Some("n".into()), gpus: vec![g.to_string()], ..Member::pending(i as u32) })
        .collect();
    w
}

#[test]
fn an_mps_share_mounts_its_gpus_daemon_into_its_own_member() {
    let (n, p) = (shared_nodes(Some(GpuSharing::Mps), Some(GpuSharing::Mps)), BTreeMap::new());
    let mps = BTreeMap::from([("GPU-0".to_owned(), endpoint("GPU-0")), ("GPU-1".to_owned(), endpoint("GPU-1"))]);
    // a gang whose members hold shares of different GPUs: each reaches its own GPU's daemon
    let w = share(&["GPU-0", "GPU-1"]);
    assert_eq!(crate::mps::mps_shares(&w, &n), BTreeSet::from(["GPU-0".to_owned(), "GPU-1".to_owned()]));
    let s = run_spec(&w, &SpecContext { mps: &mps, ..cx(&n, &p) });
    for (m, gpu) in s.members.iter().zip(["GPU-0", "GPU-1"]) {
        let mounts: Vec<_> = m.mounts.iter().map(|x| (x.source.as_str(), x.target.as_str(), x.read_only)).collect();
        let (pipe, shm) = (format!("/run/gpuhub/mps/{gpu}/pipe"), format!("/run/gpuhub/mps/{gpu}/shm"));
        assert_eq!(mounts, [(pipe.as_str(), MPS_PIPE_TARGET, false), (shm.as_str(), "/dev/shm", false)]);
        assert_eq!(m.env["CUDA_MPS_PIPE_DIRECTORY"], MPS_PIPE_TARGET);
        assert_eq!(m.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=10240M");
        assert_eq!(m.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "25");
    }
    // the run's own mounts (every member's) carry none of it
    assert!(s.mounts.iter().all(|m| m.target != "/dev/shm" && m.target != MPS_PIPE_TARGET));
    assert!(!s.env.contains_key("CUDA_MPS_PIPE_DIRECTORY"));
}

#[test]
fn guard_shares_and_whole_gpus_get_no_mps() {
    let p = BTreeMap::new();
    let mps = BTreeMap::from([("GPU-0".to_owned(), endpoint("GPU-0")), ("GPU-1".to_owned(), endpoint("GPU-1"))]);
    // a share of a GPU in the guard mode, or of one whose mode is unresolved
    for sharing in [Some(GpuSharing::Guard), Some(GpuSharing::Unenforced), None] {
        let n = shared_nodes(sharing, sharing);
        let w = share(&["GPU-0"]);
        assert!(crate::mps::mps_shares(&w, &n).is_empty());
        let s = run_spec(&w, &SpecContext { mps: &mps, ..cx(&n, &p) });
        let m = &s.members[0];
        assert!(m.mounts.is_empty() && !m.env.contains_key("CUDA_MPS_PIPE_DIRECTORY"), "{sharing:?}: {m:?}");
        assert_eq!(m.env["GPUHUB_GPU_MILLI"], "250", "the share's limits are still told");
    }
    // a whole GPU in the mps mode is no MPS client
    let n = shared_nodes(Some(GpuSharing::Mps), Some(GpuSharing::Mps));
    let w = workload(&["GPU-1"]);
    assert!(crate::mps::mps_shares(&w, &n).is_empty());
    let s = run_spec(&w, &SpecContext { mps: &mps, ..cx(&n, &p) });
    assert!(s.members[0].mounts.is_empty() && !s.members[0].env.contains_key("CUDA_MPS_PIPE_DIRECTORY"));
}
