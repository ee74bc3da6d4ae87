//! Translation of a [`ContainerSpec`] into the engine's create request. Pure (no engine, no file
//! system), so every rule is unit-tested here; [`crate::DockerRuntime::create`] adds the checks that
//! need the host (symlinks of mount sources).

use crate::container::{ContainerSpec, GpuAttach};
use bollard::container::{Config, CreateContainerOptions, NetworkingConfig};
use bollard::models::{
    DeviceMapping, DeviceRequest, EndpointSettings, HostConfig, HostConfigLogConfig, Mount as EngineMount,
    MountTypeEnum,
};
use gpuhub_driver::EngineError;
use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

/// The variable the NVIDIA container runtime/hook reads to pick GPUs; gpuhub always sets it itself so
/// that neither an image (CUDA images say `all`) nor a user can widen the GPUs a container gets.
pub(crate) const NVIDIA_VISIBLE_DEVICES: &str = "NVIDIA_VISIBLE_DEVICES";

/// Paths whose exposure hands a container the container engine (its sockets, state or storage): a bind
/// mount of one of them, of anything inside them, or of a directory above them is refused.
const ENGINE_PATHS: &[&str] = &[
    "/run/docker.sock",
    "/var/run/docker.sock",
    "/run/docker",
    "/var/run/docker",
    "/run/containerd",
    "/var/run/containerd",
    "/var/lib/docker",
    "/var/lib/containerd",
];

/// File names of engine sockets, refused wherever they live.
const ENGINE_SOCKET_NAMES: &[&str] =
    &["docker.sock", "containerd.sock", "containerd.sock.ttrpc", "docker-containerd.sock"];

/// The create request for `spec`: its options (the name) and its configuration. Refuses, with
/// [`EngineError::Rejected`], a spec that is not complete or not safe to run (see [`validate`]).
pub(crate) fn create_request(
    spec: &ContainerSpec,
    protected: &[PathBuf],
) -> Result<(CreateContainerOptions<String>, Config<String>), EngineError> {
    validate(spec, protected)?;
    let options = CreateContainerOptions { name: spec.name.clone(), platform: None };

    let mut env: Vec<String> = spec
        .env
        .iter()
        .filter(|(k, _)| k.as_str() != NVIDIA_VISIBLE_DEVICES)
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let (devices, device_requests, visible) = match &spec.gpus {
        GpuAttach::None => (None, None, "void".to_owned()),
        GpuAttach::Devices { devices } => {
            let maps = devices
                .iter()
                .map(|d| DeviceMapping {
                    path_on_host: Some(d.host.clone()),
                    path_in_container: Some(d.container.clone()),
                    cgroup_permissions: Some("rwm".to_owned()),
                })
                .collect();
            (Some(maps), None, "void".to_owned())
        }
        GpuAttach::Nvidia { uuids } if uuids.is_empty() => (None, None, "void".to_owned()),
        GpuAttach::Nvidia { uuids } => {
            let request = DeviceRequest {
                driver: Some("nvidia".to_owned()),
                count: None,
                device_ids: Some(uuids.clone()),
                capabilities: Some(vec![vec!["gpu".to_owned()]]),
                options: None,
            };
            (None, Some(vec![request]), uuids.join(","))
        }
    };
    env.push(format!("{NVIDIA_VISIBLE_DEVICES}={visible}"));

    let mounts = spec.mounts.iter().map(engine_mount).collect();

    let host_config = HostConfig {
        nano_cpus: Some(to_i64(spec.cpu_milli.saturating_mul(1_000_000), "cpu_milli")?),
        memory: Some(to_i64(spec.memory_bytes, "memory_bytes")?),
        memory_swap: Some(to_i64(spec.memory_bytes, "memory_bytes")?),
        pids_limit: Some(spec.pids_limit),
        group_add: (!spec.groups.is_empty()).then(|| spec.groups.iter().map(u32::to_string).collect()),
        security_opt: Some(vec!["no-new-privileges".to_owned()]),
        cap_drop: Some(vec!["ALL".to_owned()]),
        privileged: Some(false),
        init: Some(true),
        mounts: Some(mounts),
        // Without a network of its own a container gets none: Docker's default bridge is shared by
        // every container on the host, so it would not be isolated from other users' work.
        network_mode: Some(spec.network.clone().unwrap_or_else(|| "none".to_owned())),
        devices,
        device_requests,
        log_config: spec.log_max_bytes.map(log_config),
        // the writable layer's cap: Docker refuses the container where its storage cannot enforce one
        storage_opt: spec.disk_bytes.map(|b| HashMap::from([("size".to_owned(), b.to_string())])),
        ..Default::default()
    };

    let config = Config {
        image: Some(spec.image.clone()),
        cmd: (!spec.command.is_empty()).then(|| spec.command.clone()),
        env: Some(env),
        labels: Some(spec.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<HashMap<_, _>>()),
        user: Some(spec.user.clone()),
        hostname: spec.hostname.clone(),
        working_dir: spec.working_dir.clone(),
        host_config: Some(host_config),
        networking_config: networking(spec),
        ..Default::default()
    };
    Ok((options, config))
}

/// The aliases a container answers to on its own network (a gang member's hostname), when it has any.
fn networking(spec: &ContainerSpec) -> Option<NetworkingConfig<String>> {
    let net = spec.network.as_ref().filter(|_| !spec.aliases.is_empty())?;
    let endpoint = EndpointSettings { aliases: Some(spec.aliases.clone()), ..Default::default() };
    Some(NetworkingConfig { endpoints_config: HashMap::from([(net.clone(), endpoint)]) })
}

/// Log files the engine keeps per container when output is capped: the current one and one rotated.
pub(crate) const LOG_FILES: u64 = 2;

/// The engine's own log files, capped at about `max_bytes` in all: the `json-file` driver (which
/// `docker logs` and the archive read) rotating [`LOG_FILES`] files of `max_bytes / LOG_FILES` each, so a
/// container's output cannot fill the engine's disk, whatever the daemon's default driver.
fn log_config(max_bytes: u64) -> HostConfigLogConfig {
    let per_file = max_bytes.div_ceil(LOG_FILES).max(1);
    HostConfigLogConfig {
        typ: Some("json-file".to_owned()),
        config: Some(HashMap::from([
            ("max-size".to_owned(), per_file.to_string()),
            ("max-file".to_owned(), LOG_FILES.to_string()),
        ])),
    }
}

fn to_i64(v: u64, what: &str) -> Result<i64, EngineError> {
    i64::try_from(v).map_err(|_| EngineError::Rejected(format!("{what} {v} is too large")))
}

/// Checks that a spec is complete and safe: a name and an image; a numeric non-root `uid:gid`; positive
/// CPU, memory and pids limits; absolute mount and device paths; no mount that exposes the engine.
pub(crate) fn validate(spec: &ContainerSpec, protected: &[PathBuf]) -> Result<(), EngineError> {
    let reject = |m: String| Err(EngineError::Rejected(m));
    if spec.name.is_empty() {
        return reject("container name is empty".into());
    }
    if spec.image.is_empty() {
        return reject("image is empty".into());
    }
    validate_user(&spec.user, false)?;
    if spec.cpu_milli == 0 {
        return reject("cpu limit is zero".into());
    }
    if spec.memory_bytes == 0 {
        return reject("memory limit is zero".into());
    }
    if spec.pids_limit <= 0 {
        return reject(format!("pids limit {} is not positive", spec.pids_limit));
    }
    if let Some(k) = spec.env.keys().find(|k| k.is_empty() || k.contains('=')) {
        return reject(format!("invalid environment variable name {k:?}"));
    }
    if let Some(net) = spec.network.as_deref().filter(|n| shared_network(n)) {
        return reject(format!("network {net:?} is not a user's own network"));
    }
    for m in &spec.mounts {
        if !Path::new(&m.target).is_absolute() {
            return reject(format!("mount target {} is not an absolute path", m.target));
        }
        // an NFS export is no path of this host
        if m.nfs.is_none() {
            check_mount_source(Path::new(&m.source), protected)?;
        }
    }
    if let GpuAttach::Devices { devices } = &spec.gpus {
        for d in devices {
            if !Path::new(&d.host).is_absolute() || !Path::new(&d.container).is_absolute() {
                return reject(format!("device {} -> {} needs absolute paths", d.host, d.container));
            }
        }
    }
    Ok(())
}

/// Whether a network (mode) is shared with the host or other users' containers (`none`, no network at
/// all, is not).
pub(crate) fn shared_network(name: &str) -> bool {
    name.is_empty() || matches!(name, "bridge" | "host" | "default") || name.starts_with("container:")
}

/// Checks a `uid:gid` user: both numeric and neither root's. `allow_empty` lets an exec inherit the
/// container's user.
pub(crate) fn validate_user(user: &str, allow_empty: bool) -> Result<(), EngineError> {
    if user.is_empty() && allow_empty {
        return Ok(());
    }
    let ids = user.split_once(':').and_then(|(u, g)| Some((u.parse::<u32>().ok()?, g.parse::<u32>().ok()?)));
    match ids {
        None => Err(EngineError::Rejected(format!("user {user:?} is not a numeric uid:gid"))),
        Some((0, _)) | Some((_, 0)) => Err(EngineError::Rejected(format!("user {user} is root's"))),
        Some(_) => Ok(()),
    }
}

/// A bind mount, or for an NFS export a volume of Docker's `local` driver that mounts it (`type=nfs`,
/// read-only when the mount is), named after the server and export so that runs share it.
fn engine_mount(m: &gpuhub_driver::Mount) -> EngineMount {
    let Some(server) = &m.nfs else {
        return EngineMount {
            target: Some(m.target.clone()),
            source: Some(m.source.clone()),
            typ: Some(MountTypeEnum::BIND),
            read_only: Some(m.read_only),
            ..Default::default()
        };
    };
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("{server}:{}", m.source).as_bytes());
    let o = if m.read_only { format!("addr={server},ro") } else { format!("addr={server}") };
    let options = HashMap::from([
        ("type".to_owned(), "nfs".to_owned()),
        ("o".to_owned(), o),
        ("device".to_owned(), format!(":{}", m.source)),
    ]);
    EngineMount {
        target: Some(m.target.clone()),
        source: Some(format!("gpuhub-nfs-{}", &hex::encode(digest)[..16])),
        typ: Some(MountTypeEnum::VOLUME),
        read_only: Some(m.read_only),
        volume_options: Some(bollard::models::MountVolumeOptions {
            no_copy: Some(true),
            driver_config: Some(bollard::models::MountVolumeOptionsDriverConfig {
                name: Some("local".to_owned()),
                options: Some(options),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Refuses a bind-mount source that is not absolute or that exposes the container engine: an engine
/// path (or one of `protected`), something inside one, a directory above one, or an engine socket by name.
pub(crate) fn check_mount_source(source: &Path, protected: &[PathBuf]) -> Result<(), EngineError> {
    if !source.is_absolute() {
        return Err(EngineError::Rejected(format!("mount source {} is not an absolute path", source.display())));
    }
    let path = normalize(source);
    let exposes = |engine: &Path| path.starts_with(engine) || engine.starts_with(&path);
    let named_socket = path.file_name().and_then(|n| n.to_str()).is_some_and(|n| ENGINE_SOCKET_NAMES.contains(&n));
    if named_socket || ENGINE_PATHS.iter().map(Path::new).chain(protected.iter().map(PathBuf::as_path)).any(exposes) {
        return Err(EngineError::Rejected(format!(
            "mount source {} would expose the container engine",
            source.display()
        )));
    }
    Ok(())
}

/// Resolves `.` and `..` without touching the file system (`/a/../b/./c` → `/b/c`).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container::DeviceMap;
    use gpuhub_driver::{LABEL_OWNER, LABEL_WORKLOAD, Mount};
    use std::collections::BTreeMap;

    fn spec() -> ContainerSpec {
        ContainerSpec {
            name: "gpuhub-alice-1".into(),
            image: "gpuhub/busybox:latest".into(),
            command: vec!["sh".into(), "-c".into(), "id -u".into()],
            env: BTreeMap::from([("A".to_owned(), "1".to_owned())]),
            labels: BTreeMap::from([
                (LABEL_OWNER.to_owned(), "alice".to_owned()),
                (LABEL_WORKLOAD.to_owned(), "w1".to_owned()),
            ]),
            user: "10000:10000".into(),
            hostname: Some("job1".into()),
            working_dir: Some("/home/alice".into()),
            cpu_milli: 1500,
            memory_bytes: 1 << 30,
            pids_limit: 256,
            mounts: vec![Mount {
                source: "/srv/home/alice".into(),
                target: "/home/alice".into(),
                read_only: false,
                nfs: None,
            }],
            network: Some("gpuhub-alice".into()),
            aliases: vec![],
            gpus: GpuAttach::None,
            log_max_bytes: None,
            groups: Vec::new(),
            disk_bytes: None,
        }
    }

    #[test]
    fn a_disk_cap_is_the_writable_layers_size() {
        let (_, c) = create_request(&spec(), &[]).unwrap();
        assert_eq!(host(&c).storage_opt, None, "no cap asked: none sent");
        let (_, c) = create_request(&ContainerSpec { disk_bytes: Some(20 << 30), ..spec() }, &[]).unwrap();
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["HostConfig"]["StorageOpt"], serde_json::json!({"size": (20u64 << 30).to_string()}));
    }

    #[test]
    fn a_gang_member_answers_to_its_hostname_on_its_network() {
        let (_, c) = create_request(&spec(), &[]).unwrap();
        assert!(c.networking_config.is_none());
        let (_, c) = create_request(&ContainerSpec { aliases: vec!["train-1".into()], ..spec() }, &[]).unwrap();
        let endpoints = c.networking_config.unwrap().endpoints_config;
        assert_eq!(endpoints["gpuhub-alice"].aliases, Some(vec!["train-1".to_owned()]));
    }

    #[test]
    fn an_nfs_export_is_a_volume_of_the_local_driver() {
        let nfs = Mount {
            source: "/exports/imagenet".into(),
            target: "/datasets/imagenet".into(),
            read_only: true,
            nfs: Some("10.0.0.5".into()),
        };
        let (_, c) = create_request(&ContainerSpec { mounts: vec![nfs.clone()], ..spec() }, &[]).unwrap();
        let m = &host(&c).mounts.as_ref().unwrap()[0];
        assert_eq!(
            (m.typ, m.read_only, m.target.as_deref()),
            (Some(MountTypeEnum::VOLUME), Some(true), Some("/datasets/imagenet"))
        );
        assert!(m.source.as_deref().unwrap().starts_with("gpuhub-nfs-"));
        let opts = m.volume_options.as_ref().unwrap().driver_config.as_ref().unwrap();
        assert_eq!(opts.name.as_deref(), Some("local"));
        let o = opts.options.as_ref().unwrap();
        assert_eq!(
            (o["type"].as_str(), o["o"].as_str(), o["device"].as_str()),
            ("nfs", "addr=10.0.0.5,ro", ":/exports/imagenet")
        );
        // another export, another volume; the same one, the same
        let other = Mount { source: "/exports/coco".into(), ..nfs.clone() };
        let (_, c2) = create_request(&ContainerSpec { mounts: vec![other], ..spec() }, &[]).unwrap();
        let (_, c3) = create_request(&ContainerSpec { mounts: vec![nfs], ..spec() }, &[]).unwrap();
        let name = |c: &Config<String>| host(c).mounts.as_ref().unwrap()[0].source.clone();
        assert_ne!(name(&c), name(&c2));
        assert_eq!(name(&c), name(&c3));
    }

    #[test]
    fn a_bind_onto_dev_shm_replaces_the_engines_own() {
        // an MPS client's /dev/shm is its daemon's tmpfs: a bind mount there makes Docker skip its own
        // shm tmpfs (as long as no ShmSize or IpcMode asks for one)
        let mut s = spec();
        s.mounts.push(Mount {
            source: "/run/gpuhub/mps/GPU-1/shm".into(),
            target: "/dev/shm".into(),
            read_only: false,
            nfs: None,
        });
        let (_, c) = create_request(&s, &[]).unwrap();
        let h = host(&c);
        let m = h.mounts.as_ref().unwrap().iter().find(|m| m.target.as_deref() == Some("/dev/shm")).unwrap();
        assert_eq!(
            (m.typ, m.source.as_deref(), m.read_only),
            (Some(MountTypeEnum::BIND), Some("/run/gpuhub/mps/GPU-1/shm"), Some(false))
        );
        assert_eq!((h.shm_size, h.ipc_mode.as_deref()), (None, None), "no IPC shared with the host or others");
    }

    #[test]
    fn supplementary_groups_are_added_and_none_by_default() {
        let (_, c) = create_request(&spec(), &[]).unwrap();
        assert_eq!(host(&c).group_add, None);
        let (_, c) = create_request(&ContainerSpec { groups: vec![60001, 60002], ..spec() }, &[]).unwrap();
        assert_eq!(host(&c).group_add, Some(vec!["60001".to_owned(), "60002".to_owned()]));
    }

    fn host(c: &Config<String>) -> &HostConfig {
        c.host_config.as_ref().unwrap()
    }

    fn env(c: &Config<String>) -> Vec<String> {
        c.env.clone().unwrap()
    }

    #[test]
    fn applies_every_limit_and_hardening() {
        let (opts, c) = create_request(&spec(), &[]).unwrap();
        assert_eq!(opts.name, "gpuhub-alice-1");
        assert_eq!(c.image.as_deref(), Some("gpuhub/busybox:latest"));
        assert_eq!(c.cmd, Some(vec!["sh".to_owned(), "-c".to_owned(), "id -u".to_owned()]));
        assert_eq!(c.user.as_deref(), Some("10000:10000"));
        assert_eq!(c.hostname.as_deref(), Some("job1"));
        assert_eq!(c.working_dir.as_deref(), Some("/home/alice"));
        assert_eq!(c.labels.as_ref().unwrap()[LABEL_WORKLOAD], "w1");
        assert_eq!(c.labels.as_ref().unwrap()[LABEL_OWNER], "alice");
        assert_eq!(env(&c), vec!["A=1".to_owned(), "NVIDIA_VISIBLE_DEVICES=void".to_owned()]);
        let h = host(&c);
        assert_eq!(h.nano_cpus, Some(1_500_000_000));
        assert_eq!(h.memory, Some(1 << 30));
        assert_eq!(h.memory_swap, Some(1 << 30));
        assert_eq!(h.pids_limit, Some(256));
        assert_eq!(h.security_opt, Some(vec!["no-new-privileges".to_owned()]));
        assert_eq!(h.cap_drop, Some(vec!["ALL".to_owned()]));
        assert_eq!(h.privileged, Some(false));
        assert_eq!(h.init, Some(true));
        assert_eq!(h.network_mode.as_deref(), Some("gpuhub-alice"));
        assert_eq!(h.devices, None);
        assert_eq!(h.device_requests, None);
        assert_eq!(h.binds, None, "bind mounts go through Mounts, which refuse a missing source");
        let m = &h.mounts.as_ref().unwrap()[0];
        assert_eq!(m.typ, Some(MountTypeEnum::BIND));
        assert_eq!((m.source.as_deref(), m.target.as_deref()), (Some("/srv/home/alice"), Some("/home/alice")));
        assert_eq!(m.read_only, Some(false));
    }

    #[test]
    fn output_is_capped_by_rotating_json_files() {
        let (_, c) = create_request(&spec(), &[]).unwrap();
        assert_eq!(host(&c).log_config, None, "no cap asked: the engine's defaults");
        let mut s = spec();
        s.log_max_bytes = Some(100 << 20);
        let (_, c) = create_request(&s, &[]).unwrap();
        let log = host(&c).log_config.clone().unwrap();
        assert_eq!(log.typ.as_deref(), Some("json-file"));
        let options = log.config.unwrap();
        assert_eq!(options["max-size"], (50u64 << 20).to_string());
        assert_eq!(options["max-file"], "2");
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["HostConfig"]["LogConfig"]["Config"]["max-file"], "2");
    }

    #[test]
    fn empty_command_and_no_network() {
        let mut s = spec();
        s.command.clear();
        s.network = None;
        s.hostname = None;
        let (_, c) = create_request(&s, &[]).unwrap();
        assert_eq!(c.cmd, None);
        assert_eq!(c.hostname, None);
        assert_eq!(host(&c).network_mode.as_deref(), Some("none"));
    }

    #[test]
    fn nvidia_is_a_device_request_for_exactly_those_uuids() {
        let mut s = spec();
        s.gpus = GpuAttach::Nvidia { uuids: vec!["GPU-aaa".into(), "GPU-bbb".into()] };
        s.env.insert(NVIDIA_VISIBLE_DEVICES.into(), "all".into());
        let (_, c) = create_request(&s, &[]).unwrap();
        let h = host(&c);
        let req = &h.device_requests.as_ref().unwrap()[..];
        assert_eq!(req.len(), 1);
        assert_eq!(req[0].driver.as_deref(), Some("nvidia"));
        assert_eq!(req[0].device_ids, Some(vec!["GPU-aaa".to_owned(), "GPU-bbb".to_owned()]));
        assert_eq!(req[0].capabilities, Some(vec![vec!["gpu".to_owned()]]));
        assert_eq!(req[0].count, None, "count and device ids are exclusive");
        assert_eq!(h.devices, None);
        assert_eq!(env(&c), vec!["A=1".to_owned(), "NVIDIA_VISIBLE_DEVICES=GPU-aaa,GPU-bbb".to_owned()]);
        // The request as it goes on the wire.
        let json = serde_json::to_value(h).unwrap();
        assert_eq!(
            json["DeviceRequests"],
            serde_json::json!([{"Driver": "nvidia", "DeviceIDs": ["GPU-aaa", "GPU-bbb"], "Capabilities": [["gpu"]]}])
        );
    }

    #[test]
    fn nvidia_without_uuids_gets_no_gpu() {
        let mut s = spec();
        s.gpus = GpuAttach::Nvidia { uuids: vec![] };
        let (_, c) = create_request(&s, &[]).unwrap();
        assert_eq!(host(&c).device_requests, None);
        assert!(env(&c).contains(&"NVIDIA_VISIBLE_DEVICES=void".to_owned()));
    }

    #[test]
    fn devices_are_mapped_rwm_and_hide_other_gpus() {
        let mut s = spec();
        s.gpus = GpuAttach::Devices {
            devices: vec![
                DeviceMap { host: "/dev/nvidia1".into(), container: "/dev/nvidia1".into() },
                DeviceMap { host: "/dev/nvidiactl".into(), container: "/dev/nvidiactl".into() },
            ],
        };
        s.env.insert(NVIDIA_VISIBLE_DEVICES.into(), "all".into());
        let (_, c) = create_request(&s, &[]).unwrap();
        let h = host(&c);
        let d = h.devices.as_ref().unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].path_on_host.as_deref(), Some("/dev/nvidia1"));
        assert_eq!(d[0].path_in_container.as_deref(), Some("/dev/nvidia1"));
        assert_eq!(d[0].cgroup_permissions.as_deref(), Some("rwm"));
        assert_eq!(h.device_requests, None);
        assert!(env(&c).contains(&"NVIDIA_VISIBLE_DEVICES=void".to_owned()));
        assert!(!env(&c).contains(&"NVIDIA_VISIBLE_DEVICES=all".to_owned()));
        let json = serde_json::to_value(h).unwrap();
        assert_eq!(
            json["Devices"][0],
            serde_json::json!({"PathOnHost": "/dev/nvidia1", "PathInContainer": "/dev/nvidia1", "CgroupPermissions": "rwm"})
        );
    }

    #[test]
    fn limits_on_the_wire() {
        let (_, c) = create_request(&spec(), &[]).unwrap();
        let json = serde_json::to_value(&c).unwrap();
        let h = &json["HostConfig"];
        assert_eq!(h["NanoCpus"], 1_500_000_000i64);
        assert_eq!(h["Memory"], 1i64 << 30);
        assert_eq!(h["MemorySwap"], 1i64 << 30);
        assert_eq!(h["PidsLimit"], 256);
        assert_eq!(h["SecurityOpt"], serde_json::json!(["no-new-privileges"]));
        assert_eq!(h["CapDrop"], serde_json::json!(["ALL"]));
        assert_eq!(h["Privileged"], false);
        assert_eq!(h["Init"], true);
        assert_eq!(json["User"], "10000:10000");
    }

    fn rejected(s: &ContainerSpec) -> bool {
        matches!(create_request(s, &[]), Err(EngineError::Rejected(_)))
    }

    #[test]
    fn refuses_engine_mounts() {
        for source in [
            "/var/run/docker.sock",
            "/run/docker.sock",
            "/run/containerd/containerd.sock",
            "/var/run/docker/containerd/containerd.sock",
            "/home/alice/../../var/run/docker.sock",
            "/var/run/docker.sock/",
            "/srv/elsewhere/docker.sock",
            "/var/lib/docker/overlay2",
            "/var/run",
            "/run",
            "/var",
            "/",
            "/../..",
        ] {
            let mut s = spec();
            s.mounts.push(Mount { source: source.into(), target: "/x".into(), read_only: true, nfs: None });
            assert!(rejected(&s), "{source} must be refused");
        }
        let mut s = spec();
        s.mounts = vec![Mount { source: "/srv/sock/engine".into(), target: "/x".into(), read_only: true, nfs: None }];
        assert!(create_request(&s, &[]).is_ok());
        assert!(matches!(create_request(&s, &[PathBuf::from("/srv/sock/engine")]), Err(EngineError::Rejected(_))));
        assert!(create_request(&spec(), &[PathBuf::from("/srv/sock/engine")]).is_ok());
    }

    #[test]
    fn refuses_incomplete_or_unsafe_specs() {
        let cases: Vec<fn(&mut ContainerSpec)> = vec![
            |s| s.name.clear(),
            |s| s.image.clear(),
            |s| s.user.clear(),
            |s| s.user = "0:0".into(),
            |s| s.user = "10000:0".into(),
            |s| s.user = "root".into(),
            |s| s.user = "10000".into(),
            |s| s.cpu_milli = 0,
            |s| s.memory_bytes = 0,
            |s| s.memory_bytes = u64::MAX,
            |s| s.pids_limit = 0,
            |s| s.pids_limit = -1,
            |s| {
                s.env.insert("A=B".into(), "x".into());
            },
            |s| s.network = Some("host".into()),
            |s| s.network = Some("bridge".into()),
            |s| s.network = Some("container:other".into()),
            |s| s.network = Some(String::new()),
            |s| s.mounts[0].source = "relative/dir".into(),
            |s| s.mounts[0].target = "relative".into(),
            |s| {
                s.gpus = GpuAttach::Devices {
                    devices: vec![DeviceMap { host: "nvidia0".into(), container: "/dev/nvidia0".into() }],
                }
            },
        ];
        for (i, change) in cases.iter().enumerate() {
            let mut s = spec();
            change(&mut s);
            assert!(rejected(&s), "case {i} must be refused: {s:?}");
        }
    }

    #[test]
    fn exec_user_may_be_empty() {
        assert!(validate_user("", true).is_ok());
        assert!(validate_user("", false).is_err());
        assert!(validate_user("10000:10000", true).is_ok());
        assert!(validate_user("0:10000", true).is_err());
    }
}
