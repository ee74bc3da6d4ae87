//! The run spec's translation into an LXD instance; [`run`] is a spec the other modules' tests share.

use super::*;
use gpuhub_core::{Bytes, CpuMilli};
use gpuhub_driver::{Identity, LABEL_WORKLOAD, Mount};

pub(crate) fn run() -> RunSpec {
    RunSpec {
        name: "gpuhub-alice-train-0123abcd".into(),
        image: "gpuhub/busybox:latest".into(),
        command: vec![],
        env: BTreeMap::from([("A".to_owned(), "run".to_owned())]),
        labels: BTreeMap::from([(LABEL_WORKLOAD.to_owned(), "w1".to_owned())]),
        identity: Identity {
            username: "alice".into(),
            account: "alice".into(),
            uid: 10000,
            gid: 10000,
            home: "/home/alice".into(),
            groups: vec![20000, 10000],
        },
        working_dir: None,
        mounts: vec![Mount {
            source: "/srv/homes/alice".into(),
            target: "/home/alice".into(),
            read_only: false,
            nfs: None,
        }],
        network: None,
        members: vec![MemberSpec {
            index: 0,
            hostname: "train-0".into(),
            node: None,
            cpu_milli: 1500,
            memory_bytes: 1 << 30,
            gpus: GpuGrant::None,
            env: BTreeMap::new(),
            mounts: vec![],
        }],
        pids_limit: 256,
        log_max_bytes: Some(1 << 20),
        time_limit: None,
        queue: String::new(),
        ports: vec![8888],
        disk_bytes: None,
    }
}

/// The numbers of the host's GPU nodes: NVIDIA's major, the index (255 for the control node).
fn numbers(path: &str) -> Result<(u32, u32), String> {
    let minor = path.strip_prefix("/dev/nvidia").and_then(|i| i.parse().ok()).unwrap_or(255);
    Ok((195, minor))
}

fn node() -> NodeCapacity {
    NodeCapacity::uniform("n", CpuMilli(8000), Bytes(16 << 30), 2, "H200", Bytes(141 << 30), "GPU-")
}

#[test]
fn names_are_lxd_names_and_distinct() {
    assert_eq!(lxd_name("gpuhub-alice-train-0123abcd"), "gpuhub-alice-train-0123abcd");
    let a = lxd_name("gpuhub-Alice_train.x");
    assert!(a.starts_with("gpuhub-alice-train-x-") && a.len() <= 63, "{a}");
    assert_ne!(lxd_name("a.b"), lxd_name("a_b"));
    let long = lxd_name(&"x".repeat(100));
    assert!(long.len() <= 63, "{long}");
    assert!(lxd_name("0abc").starts_with("g-0abc-"));
}

#[test]
fn the_start_script_quotes_the_command_and_keeps_its_status() {
    let s = init_script(&["sh".into(), "-c".into(), "echo 'it''s' $HOME".into()], "/home/a b");
    assert!(s.contains(r"'sh' '-c' 'echo '\''it'\'''\''s'\'' $HOME' &"), "{s}");
    assert!(s.contains("cd '/home/a b'"), "{s}");
    assert!(s.contains("echo $c >/.gpuhub/exit"), "{s}");
    assert!(s.contains("if read -r _ </.gpuhub/go; then"), "the command waits for the engine's word: {s}");
    assert!(s.starts_with("exec >>/.gpuhub/log 2>&1\n"), "{s}");
}

#[test]
fn the_instance_maps_the_user_and_sets_limits_mounts_labels_and_ports() {
    let spec = run();
    let image = ImageSettings { args: vec!["sh".into()], env: vec!["PATH=/bin".into(), "A=image".into()], cwd: None };
    let gpu = gpus(&node(), &GpuGrant::None, &[], numbers).unwrap();
    let v = instance(
        &spec,
        &spec.members[0],
        "c1",
        "img",
        "default",
        None,
        Path::new("/run/c1"),
        &[(8888, 40000)],
        gpu,
        &image,
    )
    .unwrap();
    let c = &v["config"];
    assert_eq!(c["raw.idmap"], "uid 10000 10000\ngid 10000 10000\ngid 20000 20000");
    let lxc = c["raw.lxc"].as_str().unwrap();
    assert!(lxc.contains("lxc.init.uid = 10000") && lxc.contains("lxc.init.groups = 20000"), "{lxc}");
    assert!(lxc.contains("lxc.no_new_privs = 1"), "{lxc}");
    assert_eq!(c["limits.cpu.allowance"], "150ms/100ms");
    assert_eq!(c["limits.memory"], format!("{}B", 1u64 << 30));
    assert_eq!(c["limits.processes"], "256");
    assert_eq!(c["boot.autostart"], "false");
    assert_eq!(c["environment.A"], "run", "the run's variables override the image's");
    assert_eq!(c["environment.PATH"], "/bin");
    assert_eq!(c["environment.RANK"], "0");
    assert_eq!(c["environment.CUDA_VISIBLE_DEVICES"], "");
    assert_eq!(c["user.gpuhub.workload"], "w1");
    assert_eq!(c["user.gpuhub.run"], "gpuhub-alice-train-0123abcd");
    assert_eq!(c[LOG_MAX_KEY], (1u64 << 20).to_string());
    let d = &v["devices"];
    assert_eq!(d["root"]["pool"], "default");
    assert_eq!(d["gpuhub"]["source"], "/run/c1");
    assert_eq!(d["mount0"]["path"], "/home/alice");
    assert_eq!(d["mount0"]["readonly"], "false");
    assert_eq!(d["port8888"]["listen"], "tcp:127.0.0.1:40000");
    assert_eq!(proxied_port(d.as_object().unwrap(), 8888), Some(40000));
    assert_eq!(proxied_port(d.as_object().unwrap(), 22), None);
    assert!(d.get("eth0").is_none(), "no network unless one is configured");
    let labels = labels(c.as_object().unwrap());
    assert_eq!(labels.get("gpuhub.workload").map(String::as_str), Some("w1"));
    assert!(labels.keys().all(|k| k.starts_with("gpuhub.")), "the cap is no label: {labels:?}");
}

#[test]
fn root_and_nfs_are_refused() {
    let image = ImageSettings::default();
    let mut spec = run();
    spec.identity.uid = 0;
    let gpu = || gpus(&node(), &GpuGrant::None, &[], numbers).unwrap();
    let p = Path::new("/r");
    assert!(instance(&spec, &spec.members[0], "c", "i", "p", None, p, &[], gpu(), &image).is_err());
    let mut spec = run();
    spec.mounts[0].nfs = Some("nfs.example".into());
    let e = instance(&spec, &spec.members[0], "c", "i", "p", None, p, &[], gpu(), &image).unwrap_err();
    assert!(matches!(e, EngineError::Unsupported { .. }), "{e:?}");
    assert!(command(&run(), &image).is_err(), "no command anywhere");
}

#[test]
fn a_share_is_its_gpus_device_node_with_its_limits_and_its_mps_mounts() {
    let share = GpuGrant::Share { milli: 250, memory: Some(10 << 30), uuid: Some("GPU-1".into()) };
    let (devices, env) = gpus(&node(), &share, &["/dev/nvidiactl".to_owned()], numbers).unwrap();
    assert_eq!(
        (devices["gpu1"]["path"].as_str(), devices["gpu1"]["minor"].as_str()),
        (Some("/dev/nvidia1"), Some("1"))
    );
    assert_eq!(devices["gpuctl0"]["path"], "/dev/nvidiactl");
    assert!(devices.get("gpu0").is_none(), "only the share's GPU");
    assert_eq!(env["CUDA_VISIBLE_DEVICES"], "GPU-1");
    let unplaced = GpuGrant::Share { milli: 250, memory: None, uuid: None };
    assert!(matches!(gpus(&node(), &unplaced, &[], numbers), Err(EngineError::Rejected(_))));
    // the controller's share variables and an MPS daemon's pipe directory and shared memory
    let mut spec = run();
    let m = &mut spec.members[0];
    m.gpus = share.clone();
    m.env = BTreeMap::from([
        ("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".to_owned(), "0=10240M".to_owned()),
        ("CUDA_MPS_PIPE_DIRECTORY".to_owned(), "/run/gpuhub/mps".to_owned()),
    ]);
    let bind = |source: &str, target: &str| Mount {
        source: source.into(),
        target: target.into(),
        read_only: false,
        nfs: None,
    };
    m.mounts =
        vec![bind("/run/gpuhub/mps/GPU-1/pipe", "/run/gpuhub/mps"), bind("/run/gpuhub/mps/GPU-1/shm", "/dev/shm")];
    let gpu = gpus(&node(), &share, &[], numbers).unwrap();
    let v =
        instance(&spec, &spec.members[0], "c", "i", "p", None, Path::new("/r"), &[], gpu, &ImageSettings::default())
            .unwrap();
    let (c, d) = (&v["config"], &v["devices"]);
    assert_eq!(c["environment.CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=10240M");
    assert_eq!(c["environment.CUDA_VISIBLE_DEVICES"], "GPU-1");
    assert_eq!(c["user.gpuhub.gpus"], "GPU-1");
    assert_eq!(d["gpu1"]["type"], "unix-char");
    let disk = |target: &str| d.as_object().unwrap().values().find(|x| x["path"] == target).cloned();
    let pipe = disk("/run/gpuhub/mps").expect("the pipe directory is a disk device");
    assert_eq!((pipe["type"].as_str(), pipe["source"].as_str()), (Some("disk"), Some("/run/gpuhub/mps/GPU-1/pipe")));
    assert_eq!(pipe["readonly"], "false");
    let shm = disk("/dev/shm").expect("the daemon's shared memory is a disk device");
    assert_eq!(shm["source"], "/run/gpuhub/mps/GPU-1/shm");
    let lxc = c["raw.lxc"].as_str().unwrap();
    assert!(!lxc.contains("dev/shm"), "no tmpfs of its own under the daemon's: {lxc}");
}

#[test]
fn every_container_gets_a_dev_shm_tmpfs_as_on_docker() {
    let spec = run();
    let gpu = gpus(&node(), &GpuGrant::None, &[], numbers).unwrap();
    let v =
        instance(&spec, &spec.members[0], "c", "i", "p", None, Path::new("/r"), &[], gpu, &ImageSettings::default())
            .unwrap();
    let lxc = v["config"]["raw.lxc"].as_str().unwrap();
    assert!(
        lxc.contains("lxc.mount.entry = tmpfs dev/shm tmpfs rw,nosuid,nodev,create=dir,mode=1777,size=67108864 0 0\n"),
        "{lxc}"
    );
}

#[test]
fn whole_gpus_are_their_device_nodes() {
    let grant = GpuGrant::Whole { count: 1, uuids: vec!["GPU-1".into()] };
    let (devices, env) = gpus(&node(), &grant, &["/dev/nvidiactl".to_owned()], numbers).unwrap();
    assert_eq!(devices["gpu1"]["path"], "/dev/nvidia1");
    assert_eq!((devices["gpu1"]["major"].as_str(), devices["gpu1"]["minor"].as_str()), (Some("195"), Some("1")));
    assert_eq!(devices["gpu1"]["type"], "unix-char");
    assert_eq!(devices["gpuctl0"]["path"], "/dev/nvidiactl");
    assert_eq!(devices["gpuctl0"]["minor"], "255");
    assert_eq!(env["CUDA_VISIBLE_DEVICES"], "GPU-1");
    let missing = GpuGrant::Whole { count: 1, uuids: vec!["GPU-9".into()] };
    assert!(gpus(&node(), &missing, &[], numbers).is_err());
    let gone = |_: &str| Err("no such file".to_owned());
    let e = gpus(&node(), &grant, &[], gone).unwrap_err();
    assert!(e.to_string().contains("/dev/nvidia1: no such file"), "{e}");
    // a host's real character device (the null device) by its numbers
    assert_eq!(device_numbers("/dev/null"), Ok((1, 3)));
    assert!(device_numbers("/etc/hostname").is_err());
}
