//! Shares of one GPU on LXD, as the controller asks for them on Docker: two users' shares of the same
//! (fake: a `mknod` node with NVIDIA's major) GPU run at once, each with the GPU's device node and its
//! limits in its environment; an MPS share has its daemon's pipe directory and shared memory mounted
//! (disk devices, written as the user through the 1:1 map), a share without MPS a tmpfs `/dev/shm` of
//! its own; and `usage` lists every process of the container, those of an exec too, by host PID, so
//! that the monitor's memory guard attributes a share's GPU processes to it.

use crate::common::*;
use gpuhub_core::node::NodeCapacity;
use gpuhub_core::{Bytes, CpuMilli};
use gpuhub_driver::{Engine, ExecSpec, GpuGrant, MemberRef, MemberState, Mount};
use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

/// The second user.
const UID_B: u32 = 10002;
const GID_B: u32 = 10003;

/// A host with one fake GPU, `GPU-0`, whose device node is made under `dir`.
fn node_with_fake_gpu(dir: &Path) -> NodeCapacity {
    let dev = dir.join("nvidia0");
    let out = Command::new("mknod").arg(&dev).args(["c", "195", "0"]).output().unwrap();
    assert!(out.status.success(), "mknod needs root: {}", String::from_utf8_lossy(&out.stderr));
    let mut node =
        NodeCapacity::uniform("lxd-test", CpuMilli(2000), Bytes(4 << 30), 1, "H200", Bytes(16 << 30), "GPU-");
    node.gpus[0].device = Some(dev.display().to_string());
    node
}

/// The variables the controller gives a share of half of a 16 GiB GPU, with 4 GiB.
fn share_env() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("GPUHUB_GPU_MILLI".to_owned(), "500".to_owned()),
        ("GPUHUB_GPU_MEMORY".to_owned(), (4u64 << 30).to_string()),
        ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".to_owned(), "50".to_owned()),
        ("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".to_owned(), "0=4096M".to_owned()),
        ("XLA_PYTHON_CLIENT_MEM_FRACTION".to_owned(), "0.25".to_owned()),
    ])
}

/// A directory owned by `uid:gid` with `mode`.
fn dir_of(path: &Path, uid: u32, gid: u32, mode: u32) -> std::path::PathBuf {
    std::fs::create_dir_all(path).unwrap();
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    path.to_owned()
}

/// The host PIDs of the processes whose command line is exactly `args`.
fn host_pids(args: &[&str]) -> Vec<u32> {
    let want: Vec<u8> = args.iter().flat_map(|a| a.bytes().chain([0])).collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .collect()
}

#[tokio::test]
async fn two_users_shares_of_one_gpu_run_at_once_with_their_limits_and_mps_mounts() {
    if skipped() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let engine = engine_on(&dir.path().join("state"), node_with_fake_gpu(dir.path())).await;
    let mut cleanup = Cleanup { engine: engine.clone(), runs: vec![], images: vec![] };
    let share = GpuGrant::Share { milli: 500, memory: Some(4 << 30), uuid: Some("GPU-0".into()) };
    // a stamp no other process on this host has in its command line
    let stamp = 700_000 + std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_micros();
    let report = "ls -ln /dev/nvidia0 | cut -c1; echo cvd=$CUDA_VISIBLE_DEVICES milli=$GPUHUB_GPU_MILLI \
                  mem=$GPUHUB_GPU_MEMORY limit=$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT \
                  threads=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE xla=$XLA_PYTHON_CLIENT_MEM_FRACTION; \
                  grep ' /dev/shm ' /proc/mounts | cut -d' ' -f3; echo from-$(id -u) > /dev/shm/client && echo shm-ok";

    // user A's share of an MPS GPU: its daemon's pipe directory (its `control` pipe) and shared memory
    let home_a = home(dir.path());
    let pipe = dir_of(&dir.path().join("mps/GPU-0/pipe"), 0, 0, 0o755);
    std::fs::write(pipe.join("control"), "the daemon's pipe\n").unwrap();
    let shm = dir_of(&dir.path().join("mps/GPU-0/shm"), 0, 0, 0o1777);
    std::fs::write(shm.join("daemon"), "the daemon's shared memory\n").unwrap();
    let name_a = unique("share-a");
    let script_a = format!(
        "{report}; echo pipe=$CUDA_MPS_PIPE_DIRECTORY; cat /run/gpuhub/mps/control /dev/shm/daemon; \
         sleep {stamp} & while [ ! -e /home/tester/go ]; do sleep 0.05; done; kill $!; echo done"
    );
    let mut a = spec(&name_a, IMAGE, &script_a, Some(&home_a));
    let bind = |source: &Path, target: &str| Mount {
        source: source.display().to_string(),
        target: target.to_owned(),
        read_only: false,
        nfs: None,
    };
    let m = &mut a.members[0];
    m.gpus = share.clone();
    m.env = share_env();
    m.env.insert("CUDA_MPS_PIPE_DIRECTORY".into(), "/run/gpuhub/mps".into());
    m.mounts = vec![bind(&pipe, "/run/gpuhub/mps"), bind(&shm, "/dev/shm")];

    // user B's share of the same GPU (no MPS): a /dev/shm of its own
    let home_b = dir_of(&dir.path().join("home-b"), UID_B, GID_B, 0o755);
    let name_b = unique("share-b");
    let script_b = format!("{report}; while [ ! -e /home/tester/go ]; do sleep 0.05; done; echo done");
    let mut b = spec(&name_b, IMAGE, &script_b, Some(&home_b));
    (b.identity.uid, b.identity.gid) = (UID_B, GID_B);
    b.members[0].gpus = share.clone();
    b.members[0].env = share_env();

    let run_a = engine.submit(&a).await.unwrap().id;
    cleanup.runs.push(run_a.clone());
    let run_b = engine.submit(&b).await.unwrap().id;
    cleanup.runs.push(run_b.clone());
    for run in [&run_a, &run_b] {
        until_state(&engine, run, |s| s == MemberState::Running).await;
    }
    // both report while both run
    let start = std::time::Instant::now();
    let (mut out_a, mut out_b) = (String::new(), String::new());
    while !(out_a.contains("shm-ok") && out_a.contains("the daemon's shared memory") && out_b.contains("shm-ok")) {
        assert!(start.elapsed() < PATIENCE, "the shares did not report:\nA: {out_a}\nB: {out_b}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        (out_a, out_b) = (output(&engine, &run_a).await, output(&engine, &run_b).await);
    }
    let limits = format!("cvd=GPU-0 milli=500 mem={} limit=0=4096M threads=50 xla=0.25", 4u64 << 30);
    for out in [&out_a, &out_b] {
        assert!(out.starts_with("c\n"), "the GPU's node is a character device: {out}");
        assert!(out.contains(&limits), "{out}");
    }
    assert!(out_a.contains("pipe=/run/gpuhub/mps\nthe daemon's pipe\n"), "{out_a}");
    assert!(out_b.contains("\ntmpfs\nshm-ok"), "B's /dev/shm is a tmpfs of its own: {out_b}");
    assert!(!out_b.contains("the daemon"), "{out_b}");
    // A wrote into the daemon's shared memory as its user (the 1:1 map); B did not
    let client = shm.join("client");
    assert_eq!(std::fs::read_to_string(&client).unwrap(), format!("from-{UID}\n"));
    assert_eq!(std::fs::metadata(&client).unwrap().uid(), UID);

    // usage lists every process of A's container by host PID: its command's child and an exec's process
    let exec = ExecSpec {
        command: vec!["sleep".into(), (stamp + 1).to_string()],
        user: format!("{UID}:{GID}"),
        ..Default::default()
    };
    let handle = engine.exec(&MemberRef::new(&run_a, 0), &exec).await.unwrap();
    let (child, execd) = (stamp.to_string(), (stamp + 1).to_string());
    let start = std::time::Instant::now();
    let (child_pids, exec_pids) = loop {
        let (c, e) = (host_pids(&["sleep", &child]), host_pids(&["sleep", &execd]));
        if !c.is_empty() && !e.is_empty() {
            break (c, e);
        }
        assert!(start.elapsed() < PATIENCE, "the sleeps never ran: {c:?} {e:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let usage = engine.usage(&run_a).await.unwrap();
    assert_eq!(usage.len(), 1, "{usage:?}");
    let pids = &usage[0].pids;
    for p in child_pids.iter().chain(&exec_pids) {
        assert!(pids.contains(p), "pid {p} of the container is not attributed to it: {pids:?}");
    }
    let usage_b = engine.usage(&run_b).await.unwrap();
    assert!(usage_b[0].pids.iter().all(|p| !pids.contains(p)), "B's processes are B's: {usage_b:?}");
    drop(handle);

    for home in [&home_a, &home_b] {
        std::fs::write(home.join("go"), "").unwrap();
    }
    for run in [&run_a, &run_b] {
        let state = until_state(&engine, run, |s| matches!(s, MemberState::Exited(_))).await;
        assert_eq!(state, MemberState::Exited(0), "{}", output(&engine, run).await);
    }
}
