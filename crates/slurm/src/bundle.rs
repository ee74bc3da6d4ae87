//! OCI bundles under `bundle_dir`, on storage every node reads at the same path:
//!
//! - `images/<key>/`: an image's root file system and base `config.json`, made once per image (under a
//!   lock) from the local Docker daemon's image with `skopeo copy docker-daemon:… oci:…` and `umoci unpack
//!   --rootless`, then shaped as `scripts/slurm-dev-cluster.sh bundle` shapes its bundles: the node's
//!   network and hostname, a read-only root, a private tmpfs `/tmp`; the user and ID mappings are the
//!   `oci.conf` wrapper's to set per job.
//! - `runs/<job name>.<nonce>/`: one run's bundle, owned by its user (mode 0700): a `config.json` with the
//!   run's environment, working directory and mounts (the owner's home), and `rootfs`, a link to the
//!   image's root file system (Slurm 22.05 takes a bundle's root from `<bundle>/rootfs`, whatever
//!   `root.path` says). Beside it `runs/<job name>.<nonce>.job`, the hub's, holds the job id. gpuhub's
//!   `remove` deletes both; a run whose directory is gone counts as removed.

use crate::cli::{Cmd, SlurmCli};
use crate::error;
use gpuhub_driver::{EngineError, Mount};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The bundle store.
#[derive(Debug)]
pub struct Bundles {
    root: PathBuf,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// What one run's `config.json` says beyond its image's.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunBundle {
    /// Variables every member gets (the image's, then these over them).
    pub env: BTreeMap<String, String>,
    pub working_dir: Option<String>,
    pub mounts: Vec<Mount>,
    /// The node's static init, bound at [`INIT_PATH`] (read-only).
    pub init: Option<String>,
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (`process.user.additionalGids`). A rootless runtime (Slurm runs it as the
    /// job's user) cannot set them and keeps the groups the node gave the step instead: there a team's
    /// group reaches the container only when its members have it in the nodes' group database.
    pub groups: Vec<u32>,
}

/// Where a member's init is inside its container: on the `/dev` tmpfs every bundle has, so the image
/// needs no mountpoint for it.
pub const INIT_PATH: &str = "/dev/gpuhub-init";

/// The directory name of an image's bundle: the reference made safe (`[A-Za-z0-9_.-]`), and a hash of
/// the reference so that two references never share one (`gpuhub/busybox:latest` →
/// `gpuhub_busybox_latest-<8 hex>`).
pub fn image_key(image: &str) -> String {
    let safe: String = image
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_' { c } else { '_' })
        .take(80)
        .collect();
    let hash = Sha256::digest(image.as_bytes());
    format!("{}-{}", safe.trim_start_matches(['.', '-']), &hex::encode(hash)[..8])
}

/// The reference skopeo's `docker-daemon:` transport takes: with a tag (`:latest` when none is given).
fn daemon_reference(image: &str) -> String {
    let last = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') || last.contains(':') { image.to_owned() } else { format!("{image}:latest") }
}

fn fs_err(what: &str, path: &Path, e: std::io::Error) -> EngineError {
    EngineError::Engine(format!("{what} {}: {e}", path.display()))
}

impl Bundles {
    /// The store under `root`.
    pub fn new(root: PathBuf) -> Self {
        Bundles { root, locks: Mutex::default() }
    }

    /// `<root>/images/<key>`.
    pub fn image_dir(&self, image: &str) -> PathBuf {
        self.root.join("images").join(image_key(image))
    }

    /// `<root>/runs/<name>`.
    pub fn run_dir(&self, name: &str) -> PathBuf {
        self.root.join("runs").join(name)
    }

    /// Whether the image's bundle is there.
    pub fn image_ready(&self, image: &str) -> bool {
        let dir = self.image_dir(image);
        dir.join("config.json").is_file() && dir.join("rootfs").is_dir()
    }

    fn lock(&self, image: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        locks.entry(image.to_owned()).or_default().clone()
    }

    /// Makes the image's bundle from the local Docker daemon's image unless it is there; once per image
    /// at a time. `ImageNotFound` when the daemon has no such image.
    pub async fn ensure_image(&self, cli: &dyn SlurmCli, image: &str) -> Result<(), EngineError> {
        let lock = self.lock(image);
        let _held = lock.lock().await;
        if self.image_ready(image) {
            return Ok(());
        }
        let images = self.root.join("images");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&images)
            .map_err(|e| fs_err("cannot make", &images, e))?;
        let key = image_key(image);
        let pid = std::process::id();
        let layout = images.join(format!(".{key}.{pid}.layout"));
        let unpacked = images.join(format!(".{key}.{pid}.bundle"));
        let _ = std::fs::remove_dir_all(&layout);
        let _ = std::fs::remove_dir_all(&unpacked);
        let result = self.make_image(cli, image, &layout, &unpacked).await;
        let _ = std::fs::remove_dir_all(&layout);
        if result.is_err() {
            let _ = std::fs::remove_dir_all(&unpacked);
        }
        result
    }

    async fn make_image(
        &self,
        cli: &dyn SlurmCli,
        image: &str,
        layout: &Path,
        unpacked: &Path,
    ) -> Result<(), EngineError> {
        let layout_ref = format!("oci:{}:latest", layout.display());
        let source = format!("docker-daemon:{}", daemon_reference(image));
        let copy = Cmd::new("skopeo", ["copy", "--quiet", source.as_str(), layout_ref.as_str()]);
        let out = cli.run(&copy).await.map_err(|e| error::from_io(&copy, &e))?;
        if !out.success() {
            let text = out.stderr_text();
            if text.contains("No such image") || text.contains("does not exist") || text.contains("not found") {
                return Err(EngineError::ImageNotFound(image.to_owned()));
            }
            return Err(EngineError::Engine(format!("{copy} failed: {text}")));
        }
        let image_ref = format!("{}:latest", layout.display());
        let target = unpacked.to_string_lossy().into_owned();
        let unpack = Cmd::new("umoci", ["unpack", "--rootless", "--image", image_ref.as_str(), target.as_str()]);
        let out = cli.run(&unpack).await.map_err(|e| error::from_io(&unpack, &e))?;
        if !out.success() {
            return Err(EngineError::Engine(format!("{unpack} failed: {}", out.stderr_text())));
        }
        let config_path = unpacked.join("config.json");
        let text = std::fs::read(&config_path).map_err(|e| fs_err("cannot read", &config_path, e))?;
        let config: Value = serde_json::from_slice(&text)
            .map_err(|e| EngineError::Engine(format!("umoci wrote an unreadable {}: {e}", config_path.display())))?;
        let config = shape_image_config(config);
        write_json(&config_path, &config, 0o644)?;
        let rootfs = unpacked.join("rootfs");
        make_mount_targets(&rootfs, &config)?;
        for dir in ["etc", "tmp", "home"] {
            let p = rootfs.join(dir);
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(&p)
                .map_err(|e| fs_err("cannot make", &p, e))?;
        }
        for file in ["etc/resolv.conf", "etc/hosts"] {
            let p = rootfs.join(file);
            if std::fs::symlink_metadata(&p).is_err() {
                std::fs::write(&p, b"").map_err(|e| fs_err("cannot make", &p, e))?;
            }
        }
        std::fs::set_permissions(unpacked, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| fs_err("cannot chmod", unpacked, e))?;
        let dest = self.image_dir(image);
        let _ = std::fs::remove_dir_all(&dest);
        std::fs::rename(unpacked, &dest).map_err(|e| fs_err("cannot move the bundle to", &dest, e))?;
        tracing::info!(image, bundle = %dest.display(), "made the OCI bundle of an image");
        Ok(())
    }

    /// The image bundle's `config.json`.
    pub fn image_config(&self, image: &str) -> Result<Value, EngineError> {
        let path = self.image_dir(image).join("config.json");
        let text = std::fs::read(&path).map_err(|e| fs_err("cannot read", &path, e))?;
        serde_json::from_slice(&text).map_err(|e| EngineError::Engine(format!("{}: {e}", path.display())))
    }

    /// Writes run `name`'s bundle; fails when it exists. The directory belongs to the run's user.
    pub fn write_run(&self, name: &str, image: &str, run: &RunBundle) -> Result<PathBuf, EngineError> {
        let rootfs = self.image_dir(image).join("rootfs");
        let base = self.image_config(image)?;
        let (config, mountpoints) = run_config(base, &rootfs, run)?;
        for (path, is_dir) in &mountpoints {
            make_mountpoint(path, *is_dir)?;
        }
        let runs = self.root.join("runs");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&runs)
            .map_err(|e| fs_err("cannot make", &runs, e))?;
        let dir = self.run_dir(name);
        std::fs::DirBuilder::new().mode(0o700).create(&dir).map_err(|e| fs_err("cannot make", &dir, e))?;
        let result = (|| {
            write_json(&dir.join("config.json"), &config, 0o600)?;
            std::os::unix::fs::symlink(&rootfs, dir.join("rootfs"))
                .map_err(|e| fs_err("cannot link", &dir.join("rootfs"), e))?;
            for p in [dir.join("config.json"), dir.clone()] {
                std::os::unix::fs::chown(&p, Some(run.uid), Some(run.gid))
                    .map_err(|e| fs_err("cannot chown", &p, e))?;
            }
            Ok(())
        })();
        if let Err(e) = result {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e);
        }
        Ok(dir)
    }

    /// The working directory run `name`'s members start in (what exec starts in too).
    pub fn run_cwd(&self, name: &str) -> Option<String> {
        let text = std::fs::read(self.run_dir(name).join("config.json")).ok()?;
        let config: Value = serde_json::from_slice(&text).ok()?;
        config.pointer("/process/cwd").and_then(Value::as_str).map(str::to_owned)
    }

    /// Notes that run `name` is job `job` (`runs/<name>.job`, the hub's own, beside the run's directory,
    /// which belongs to its user): how a restarted hub finds the runs that ended while it was down.
    pub fn record_job(&self, name: &str, job: u64) -> Result<(), EngineError> {
        let path = self.root.join("runs").join(format!("{name}.job"));
        std::fs::write(&path, format!("{job}\n")).map_err(|e| fs_err("cannot write", &path, e))
    }

    /// Every run not removed that has a job recorded: `(run directory name, job id)`.
    pub fn recorded_jobs(&self) -> Vec<(String, u64)> {
        let Ok(entries) = std::fs::read_dir(self.root.join("runs")) else { return Vec::new() };
        entries
            .flatten()
            .filter_map(|e| {
                let file = e.file_name().to_string_lossy().into_owned();
                let name = file.strip_suffix(".job")?.to_owned();
                let job = std::fs::read_to_string(e.path()).ok()?.trim().parse().ok()?;
                self.run_dir(&name).is_dir().then_some((name, job))
            })
            .collect()
    }

    /// Deletes run `name`'s bundle and its job note; `false` when there was no bundle.
    pub fn remove_run(&self, name: &str) -> Result<bool, EngineError> {
        let note = self.root.join("runs").join(format!("{name}.job"));
        match std::fs::remove_file(&note) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(fs_err("cannot remove", &note, e)),
        }
        let dir = self.run_dir(name);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(fs_err("cannot remove", &dir, e)),
        }
    }
}

fn write_json(path: &Path, v: &Value, mode: u32) -> Result<(), EngineError> {
    let text = serde_json::to_vec_pretty(v).map_err(|e| EngineError::Engine(format!("{}: {e}", path.display())))?;
    std::fs::write(path, text).map_err(|e| fs_err("cannot write", path, e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|e| fs_err("cannot chmod", path, e))
}

/// An image's `config.json` as the nodes run it: no terminal, a read-only root, the node's network and
/// hostname, no ID mappings (the `oci.conf` wrapper sets them per job), a private tmpfs `/tmp`.
pub fn shape_image_config(mut c: Value) -> Value {
    c["process"]["terminal"] = json!(false);
    c["root"]["readonly"] = json!(true);
    if let Some(ns) = c.pointer_mut("/linux/namespaces").and_then(Value::as_array_mut) {
        ns.retain(|n| !matches!(n.get("type").and_then(Value::as_str), Some("network" | "uts")));
    }
    if let Some(o) = c.as_object_mut() {
        o.remove("hostname");
    }
    if let Some(l) = c.get_mut("linux").and_then(Value::as_object_mut) {
        l.remove("uidMappings");
        l.remove("gidMappings");
    }
    let mut mounts: Vec<Value> = c.get("mounts").and_then(Value::as_array).cloned().unwrap_or_default();
    mounts.retain(|m| m.get("destination").and_then(Value::as_str) != Some("/tmp"));
    mounts.push(json!({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
                       "options": ["nosuid", "nodev", "mode=1777", "size=1g"]}));
    c["mounts"] = Value::Array(mounts);
    c
}

/// The variables gpuhub never passes on: which GPUs a member sees is Slurm's to say (the `oci.conf`
/// wrapper sets them from the step's allocation).
pub const GPU_VARIABLES: [&str; 3] = ["CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL"];

/// A run's `config.json` from its image's, and the mountpoints to make in the image's root first
/// (`(path on the hub, is a directory)`): a mount whose target the read-only image lacks goes on a
/// tmpfs when the target's parent is an empty directory of the image (`/home`: the owner's home),
/// else its mountpoint is made in the image's root (empty, owned by root).
pub fn run_config(mut c: Value, rootfs: &Path, run: &RunBundle) -> Result<(Value, Vec<(PathBuf, bool)>), EngineError> {
    let mut env: Vec<String> = c
        .pointer("/process/env")
        .and_then(Value::as_array)
        .map_or_else(Vec::new, |a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect());
    for (k, v) in &run.env {
        if GPU_VARIABLES.contains(&k.as_str()) {
            continue;
        }
        env.retain(|e| e.split_once('=').map_or(e.as_str(), |(n, _)| n) != k);
        env.push(format!("{k}={v}"));
    }
    env.retain(|e| !GPU_VARIABLES.contains(&e.split_once('=').map_or(e.as_str(), |(n, _)| n)));
    c["process"]["env"] = json!(env);
    c["process"]["terminal"] = json!(false);
    if let Some(wd) = &run.working_dir {
        if !wd.starts_with('/') {
            return Err(EngineError::Rejected(format!("the working directory must be absolute, not {wd:?}")));
        }
        c["process"]["cwd"] = json!(wd);
    }
    c["root"] = json!({"path": "rootfs", "readonly": true});
    let mut mounts: Vec<Value> = c.get("mounts").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut make = Vec::new();
    let mut tmpfs_at: Vec<String> = Vec::new();
    if let Some(init) = &run.init {
        mounts.push(json!({"destination": INIT_PATH, "type": "bind", "source": init, "options": ["bind", "ro", "nosuid", "nodev"]}));
    }
    if rootfs.join("etc/hosts").exists() {
        mounts.push(
            json!({"destination": "/etc/hosts", "type": "bind", "source": "/etc/hosts", "options": ["rbind", "ro"]}),
        );
    }
    for m in &run.mounts {
        let target = Path::new(&m.target);
        if !target.is_absolute() || m.target.split('/').any(|p| p == "..") {
            return Err(EngineError::Rejected(format!("a mount target must be an absolute path, not {:?}", m.target)));
        }
        let inside = rootfs.join(m.target.trim_start_matches('/'));
        if std::fs::symlink_metadata(&inside).is_err() {
            let parent = target.parent().unwrap_or(Path::new("/"));
            let parent_inside = rootfs.join(parent.to_string_lossy().trim_start_matches('/'));
            let empty_dir = parent != Path::new("/")
                && std::fs::read_dir(&parent_inside).map(|mut d| d.next().is_none()).unwrap_or(false);
            let parent_text = parent.to_string_lossy().into_owned();
            if empty_dir || tmpfs_at.contains(&parent_text) {
                if !tmpfs_at.contains(&parent_text) {
                    mounts.push(json!({"destination": parent_text, "type": "tmpfs", "source": "tmpfs",
                                       "options": ["nosuid", "nodev", "mode=755", "size=64k"]}));
                    tmpfs_at.push(parent_text);
                }
            } else {
                let is_dir = std::fs::metadata(&m.source).map(|md| md.is_dir()).unwrap_or(true);
                make.push((inside, is_dir));
            }
        }
        let mode = if m.read_only { "ro" } else { "rw" };
        mounts.push(json!({"destination": m.target, "type": "bind", "source": m.source,
                           "options": ["rbind", mode, "nosuid", "nodev"]}));
    }
    c["mounts"] = Value::Array(mounts);
    c["annotations"]["org.gpuhub.uid"] = json!(run.uid.to_string());
    if !run.groups.is_empty() {
        c["process"]["user"]["additionalGids"] = json!(run.groups);
    }
    Ok((c, make))
}

/// Makes, in an image's root file system, the directory each of its `config.json` mounts needs
/// (`/proc`, `/sys`, `/dev`, `/dev/pts`, …) where the image lacks it. An image made with `docker import`
/// or `FROM scratch` may have none of them, and the runtime, run as the job's user on the read-only
/// root, cannot make them ("crun: cannot mkdir 'proc': Permission denied"): the hub makes them once,
/// as the bundle's owner. Destinations that are not plain absolute paths are left to the runtime.
pub fn make_mount_targets(rootfs: &Path, config: &Value) -> Result<(), EngineError> {
    let mounts = config.get("mounts").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    for dest in mounts.iter().filter_map(|m| m.get("destination").and_then(Value::as_str)) {
        let relative = dest.trim_start_matches('/');
        if !dest.starts_with('/') || relative.is_empty() || relative.split('/').any(|p| p == ".." || p == ".") {
            continue;
        }
        let path = rootfs.join(relative);
        if std::fs::symlink_metadata(&path).is_err() {
            make_mountpoint(&path, true)?;
        }
    }
    Ok(())
}

fn make_mountpoint(path: &Path, is_dir: bool) -> Result<(), EngineError> {
    if is_dir {
        std::fs::DirBuilder::new().recursive(true).mode(0o755).create(path).map_err(|e| fs_err("cannot make", path, e))
    } else {
        if let Some(parent) = path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(parent)
                .map_err(|e| fs_err("cannot make", parent, e))?;
        }
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map(drop)
            .map_err(|e| fs_err("cannot make", path, e))
    }
}

/// The command an image runs when a run names none (`process.args` of its `config.json`).
pub fn default_command(config: &Value) -> Vec<String> {
    config
        .pointer("/process/args")
        .and_then(Value::as_array)
        .map_or_else(Vec::new, |a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
}

#[cfg(test)]
mod tests;
