//! What a run's container is made of, from its [`RunSpec`]: the instance LXD is asked to create (its
//! config keys and devices) and the start script the container runs as its init. Pure functions, tested
//! here; the engine adds what needs the daemon (the image, the host ports of proxy devices).

use gpuhub_core::node::NodeCapacity;
use gpuhub_driver::{EngineError, GpuGrant, LABEL_MEMBER, LABEL_MEMBERS, LABEL_RUN, MemberSpec, RunSpec, rank_env};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;

/// Where a run's directory (its start script, output and exit status) is inside its container.
pub const RUN_MOUNT: &str = "/.gpuhub";
/// The config key prefix gpuhub's labels are kept under (`user.gpuhub.workload`).
pub const LABEL_PREFIX: &str = "user.";
/// The image properties gpuhub keeps an image's own settings in (copied by LXD into each container's
/// config as `image.<property>`).
pub const PROP_ARGS: &str = "gpuhub.args";
pub const PROP_ENV: &str = "gpuhub.env";
pub const PROP_CWD: &str = "gpuhub.cwd";
/// The reference an image was made from (a Docker image, or the name a workspace was saved as).
pub const PROP_SOURCE: &str = "gpuhub.source";
/// The config key keeping a run's `log_max_bytes` (outside `user.gpuhub.*`, which are its labels).
pub const LOG_MAX_KEY: &str = "user.gpuhub-engine.log_max_bytes";
/// Where a container's POSIX shared memory is, and the size of the tmpfs it gets there (Docker's default).
pub const SHM: &str = "/dev/shm";
pub const SHM_BYTES: u64 = 64 << 20;
/// The GPU control nodes a container with GPUs gets, where the host has them.
pub const CONTROL_DEVICES: [&str; 3] = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"];

/// An image's own settings: its default command, environment and working directory.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ImageSettings {
    pub args: Vec<String>,
    pub env: Vec<String>,
    pub cwd: Option<String>,
}

impl ImageSettings {
    /// The settings kept in an image's properties (or a container's `image.*` keys, with `prefix`).
    pub fn from_properties(props: &Map<String, Value>, prefix: &str) -> Self {
        let get = |k: &str| props.get(&format!("{prefix}{k}")).and_then(Value::as_str).unwrap_or_default().to_owned();
        ImageSettings {
            args: serde_json::from_str(&get(PROP_ARGS)).unwrap_or_default(),
            env: serde_json::from_str(&get(PROP_ENV)).unwrap_or_default(),
            cwd: Some(get(PROP_CWD)).filter(|c| !c.is_empty()),
        }
    }

    /// The properties that keep these settings.
    pub fn properties(&self) -> Vec<(String, String)> {
        vec![
            (PROP_ARGS.into(), serde_json::to_string(&self.args).unwrap_or_default()),
            (PROP_ENV.into(), serde_json::to_string(&self.env).unwrap_or_default()),
            (PROP_CWD.into(), self.cwd.clone().unwrap_or_default()),
        ]
    }
}

/// A name LXD takes for an instance or alias (letters, digits and hyphens, starting with a letter, at
/// most 63 characters) made from `name`: itself when it already is one, else a cleaned form with a hash of
/// `name` so that two names never meet.
pub fn lxd_name(name: &str) -> String {
    let ok = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.starts_with(|c: char| c.is_ascii_lowercase())
            && !s.ends_with('-')
            && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    if ok(name) {
        return name.to_owned();
    }
    let clean: String = name
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect::<String>()
        .split('-')
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("-");
    let hash = &hex::encode(Sha256::digest(name.as_bytes()))[..8];
    let head: String = clean.chars().take(50).collect();
    let head = head.trim_end_matches('-');
    if head.starts_with(|c: char| c.is_ascii_lowercase()) {
        format!("{head}-{hash}")
    } else {
        format!("g-{head}-{hash}").replace("--", "-")
    }
}

/// Quotes `s` for a POSIX shell.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The FIFO in a run's directory the start script waits on before it runs the command: the engine writes
/// a line once LXD has started the container and its loopback is up. A command that ended while LXD was
/// still starting its container left LXD busy for seconds (a 5 s start, then 10 s before it could be
/// removed), and an app could not be reached before its loopback was up.
pub const GO: &str = "go";

/// The start script, the container's init (`/bin/sh <RUN_MOUNT>/init.sh`, run as the member's user):
/// its output goes to `log`; it waits for the engine's word on [`GO`] (143 when a SIGTERM comes first),
/// then runs the command in the background and waits for it, so that a SIGTERM the engine sends to every
/// process (`kill -TERM -1`) reaches the command while the script survives to write the command's exit
/// status to `exit`. The container stops when the script ends.
pub fn init_script(command: &[String], cwd: &str) -> String {
    let cmd = command.iter().map(|a| shell_quote(a)).collect::<Vec<_>>().join(" ");
    format!(
        "exec >>{RUN_MOUNT}/log 2>&1\n\
         trap : TERM INT HUP\n\
         c=143\n\
         if read -r _ <{RUN_MOUNT}/{GO}; then\n\
         c=127\n\
         if cd {cwd}; then\n\
         \x20 {cmd} &\n\
         \x20 p=$!\n\
         \x20 while :; do wait $p; c=$?; kill -0 $p 2>/dev/null || break; done\n\
         fi\n\
         fi\n\
         echo $c >{RUN_MOUNT}/exit\n\
         exit $c\n",
        cwd = shell_quote(cwd),
    )
}

/// The command a member runs: the spec's, else the image's.
pub fn command(spec: &RunSpec, image: &ImageSettings) -> Result<Vec<String>, EngineError> {
    let cmd = if spec.command.is_empty() { image.args.clone() } else { spec.command.clone() };
    if cmd.is_empty() {
        return Err(EngineError::Rejected(format!("the image {} names no command and the run gives none", spec.image)));
    }
    Ok(cmd)
}

/// The environment of member `m`: the image's, the run's, the member's, then the rank and GPU variables
/// and the user's `HOME` and `USER`.
pub fn environment(
    spec: &RunSpec,
    m: &MemberSpec,
    image: &ImageSettings,
    gpu_env: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> =
        image.env.iter().filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
    env.insert("HOME".into(), spec.identity.home.clone());
    env.insert("USER".into(), spec.identity.account.clone());
    env.extend(spec.env.clone());
    env.extend(m.env.clone());
    let size = spec.members.len() as u32;
    let master = spec.members.first().map(|m| m.hostname.clone()).unwrap_or_default();
    let port = spec.env.get("MASTER_PORT").and_then(|p| p.parse().ok()).unwrap_or(gpuhub_driver::DEFAULT_MASTER_PORT);
    env.extend(rank_env(m.index, size, &master, port));
    env.extend(gpu_env.clone());
    env
}

/// A member's GPU devices and the variables that describe them.
pub type GpuAttach = (Map<String, Value>, BTreeMap<String, String>);

/// The devices and variables that give member `m` its GPUs (whole, or the one GPU of a share): each
/// granted GPU's device node and the
/// control nodes `control` (those this host has) as `unix-char` devices, readable by the member's user
/// (the image carries its own user-space driver, as in the Docker engine's `devices` mode). The devices
/// are given by their numbers (`numbers`: a host node's major and minor), as LXD takes a `source` only
/// under `/dev` and a GPU's node may be configured elsewhere.
pub fn gpus(
    node: &NodeCapacity,
    grant: &GpuGrant,
    control: &[String],
    numbers: impl Fn(&str) -> Result<(u32, u32), String>,
) -> Result<GpuAttach, EngineError> {
    let mut devices = Map::new();
    let mut env = BTreeMap::new();
    match grant {
        GpuGrant::None => {
            env.insert("NVIDIA_VISIBLE_DEVICES".into(), "void".into());
            env.insert("CUDA_VISIBLE_DEVICES".into(), String::new());
            return Ok((devices, env));
        }
        // a share is its GPU's device node too, as on Docker: its limits are in the member's
        // environment (and its MPS daemon's pipe directory and shared memory in its mounts)
        GpuGrant::Share { .. } | GpuGrant::Whole { .. } => {}
    }
    let uuids = grant.uuids();
    if uuids.is_empty() {
        return Err(EngineError::Rejected("the lxd engine runs GPUs that gpuhub placed; this grant names none".into()));
    }
    for u in &uuids {
        let g = node
            .gpus
            .iter()
            .find(|g| &g.uuid == u)
            .ok_or_else(|| EngineError::Rejected(format!("GPU {u} is not a GPU of node {}", node.name)))?;
        let host = g.device.clone().unwrap_or_else(|| format!("/dev/nvidia{}", g.index));
        devices.insert(format!("gpu{}", g.index), char_device(&host, &format!("/dev/nvidia{}", g.index), &numbers)?);
    }
    for (i, d) in control.iter().enumerate() {
        devices.insert(format!("gpuctl{i}"), char_device(d, d, &numbers)?);
    }
    env.insert("NVIDIA_VISIBLE_DEVICES".into(), uuids.join(","));
    env.insert("CUDA_VISIBLE_DEVICES".into(), uuids.join(","));
    Ok((devices, env))
}

/// A `unix-char` device at `path` in the container with the numbers of the host's node `host`, which
/// every user in the container may open (as Docker hands device nodes over).
fn char_device(
    host: &str,
    path: &str,
    numbers: &impl Fn(&str) -> Result<(u32, u32), String>,
) -> Result<Value, EngineError> {
    let (major, minor) = numbers(host).map_err(|e| EngineError::Engine(format!("GPU device node {host}: {e}")))?;
    Ok(json!({
        "type": "unix-char",
        "path": path,
        "major": major.to_string(),
        "minor": minor.to_string(),
        "mode": "0666",
    }))
}

/// The major and minor numbers of the character device node `path` on the host.
pub fn device_numbers(path: &str) -> Result<(u32, u32), String> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if !meta.file_type().is_char_device() {
        return Err("not a character device".into());
    }
    let rdev = meta.rdev();
    Ok((rustix::fs::major(rdev), rustix::fs::minor(rdev)))
}

/// The request that creates member `m`'s container `name` (not started) from the image `alias`, with its
/// run directory `run_dir` on the host, the `proxies` (container port → host port) its apps are reached
/// by, and the GPU `devices` and variables of [`gpus`].
#[allow(clippy::too_many_arguments)]
pub fn instance(
    spec: &RunSpec,
    m: &MemberSpec,
    name: &str,
    alias: &str,
    pool: &str,
    network: Option<&str>,
    run_dir: &Path,
    proxies: &[(u16, u16)],
    gpu: GpuAttach,
    image: &ImageSettings,
) -> Result<Value, EngineError> {
    let id = &spec.identity;
    if id.uid == 0 || id.gid == 0 {
        return Err(EngineError::Rejected("members never run as root (uid or gid 0)".into()));
    }
    let mut config = Map::new();
    let mut idmap = vec![format!("uid {} {}", id.uid, id.uid), format!("gid {} {}", id.gid, id.gid)];
    let mut groups: Vec<u32> = id.groups.iter().copied().filter(|g| *g != id.gid && *g != 0).collect();
    groups.sort_unstable();
    groups.dedup();
    idmap.extend(groups.iter().map(|g| format!("gid {g} {g}")));
    config.insert("raw.idmap".into(), idmap.join("\n").into());
    let mut lxc = vec![
        format!("lxc.init.cmd = /bin/sh {RUN_MOUNT}/init.sh"),
        format!("lxc.init.uid = {}", id.uid),
        format!("lxc.init.gid = {}", id.gid),
        // as Docker's no-new-privileges: no setuid program of the image makes the member root inside
        "lxc.no_new_privs = 1".to_owned(),
    ];
    if !groups.is_empty() {
        lxc.push(format!("lxc.init.groups = {}", groups.iter().map(u32::to_string).collect::<Vec<_>>().join(",")));
    }
    // an application image's container has no /dev/shm (nothing mounts one); Docker gives each container
    // a 64 MiB tmpfs there, which POSIX shared memory (Python's multiprocessing, PyTorch's DataLoader)
    // needs. A mount onto /dev/shm (an MPS share's daemon's shared memory) takes its place.
    if !spec.mounts.iter().chain(&m.mounts).any(|x| x.target.trim_end_matches('/') == SHM) {
        lxc.push(format!(
            "lxc.mount.entry = tmpfs dev/shm tmpfs rw,nosuid,nodev,create=dir,mode=1777,size={SHM_BYTES} 0 0"
        ));
    }
    config.insert("raw.lxc".into(), (lxc.join("\n") + "\n").into());
    config.insert("boot.autostart".into(), "false".into());
    if m.cpu_milli > 0 {
        // a quota per 100 ms period: 1500 milli-CPUs run 150 ms of each 100 ms
        config.insert("limits.cpu.allowance".into(), format!("{}ms/100ms", (m.cpu_milli / 10).max(1)).into());
    }
    if m.memory_bytes > 0 {
        config.insert("limits.memory".into(), format!("{}B", m.memory_bytes).into());
        config.insert("limits.memory.enforce".into(), "hard".into());
        config.insert("limits.memory.swap".into(), "false".into());
    }
    if spec.pids_limit > 0 {
        config.insert("limits.processes".into(), spec.pids_limit.to_string().into());
    }
    if let Some(max) = spec.log_max_bytes {
        config.insert(LOG_MAX_KEY.into(), max.to_string().into());
    }
    let (gpu_devices, gpu_env) = gpu;
    for (k, v) in environment(spec, m, image, &gpu_env) {
        config.insert(format!("environment.{k}"), v.into());
    }
    let size = spec.members.len();
    let mut labels = spec.labels.clone();
    labels.insert(LABEL_RUN.into(), spec.name.clone());
    labels.insert(LABEL_MEMBER.into(), m.index.to_string());
    labels.insert(LABEL_MEMBERS.into(), size.to_string());
    let held = m.gpus.uuids();
    if !held.is_empty() {
        labels.insert(crate::LABEL_GPUS.into(), held.join(","));
    }
    for (k, v) in labels {
        config.insert(format!("{LABEL_PREFIX}{k}"), v.into());
    }
    let mut devices = Map::new();
    devices.insert("root".into(), json!({"type": "disk", "path": "/", "pool": pool}));
    devices
        .insert("gpuhub".into(), json!({"type": "disk", "source": run_dir.display().to_string(), "path": RUN_MOUNT}));
    for (i, mount) in spec.mounts.iter().chain(&m.mounts).enumerate() {
        if mount.nfs.is_some() {
            return Err(EngineError::Unsupported { engine: "lxd", what: format!("the NFS mount of {}", mount.target) });
        }
        devices.insert(
            format!("mount{i}"),
            json!({"type": "disk", "source": mount.source, "path": mount.target, "readonly": mount.read_only.to_string()}),
        );
    }
    for (port, host) in proxies {
        devices.insert(format!("port{port}"), proxy_device(*port, *host));
    }
    devices.extend(gpu_devices);
    if let Some(net) = network {
        devices.insert("eth0".into(), json!({"type": "nic", "network": net, "name": "eth0"}));
    }
    Ok(json!({
        "name": name,
        "type": "container",
        "source": {"type": "image", "alias": alias},
        "profiles": [],
        "config": config,
        "devices": devices,
    }))
}

/// The proxy device that makes container port `port` reachable at `127.0.0.1:<host>` on the host: LXD's
/// forkproxy connects inside the container's network namespace, so no network is needed.
pub fn proxy_device(port: u16, host: u16) -> Value {
    json!({
        "type": "proxy",
        "listen": format!("tcp:127.0.0.1:{host}"),
        "connect": format!("tcp:127.0.0.1:{port}"),
        "bind": "host",
    })
}

/// The host port of the proxy device of `devices` that connects to container port `port`.
pub fn proxied_port(devices: &Map<String, Value>, port: u16) -> Option<u16> {
    let connect = format!("tcp:127.0.0.1:{port}");
    devices.values().find_map(|d| {
        if d.get("type")?.as_str()? != "proxy" || d.get("connect")?.as_str()? != connect {
            return None;
        }
        d.get("listen")?.as_str()?.rsplit(':').next()?.parse().ok()
    })
}

/// gpuhub's labels of a container, from its config keys.
pub fn labels(config: &Map<String, Value>) -> BTreeMap<String, String> {
    config
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix(LABEL_PREFIX)?.to_owned(), v.as_str()?.to_owned())))
        .filter(|(k, _)| k.starts_with("gpuhub."))
        .collect()
}

#[cfg(test)]
pub(crate) mod tests;
