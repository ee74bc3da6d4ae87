//! The engine interface on LXD: a run is one container (one member), named after the run, made from the
//! run's image with its limits, mounts, GPUs and labels (config keys `user.gpuhub.*`), started with its
//! start script as init, and found again by its labels.

use crate::engine::{Container, LxdEngine};
use crate::images::{api_err, saved_alias};
use crate::spec::{self, ImageSettings, PROP_SOURCE};
use async_trait::async_trait;
use gpuhub_driver::{
    Capabilities, Engine, EngineError, EngineNode, EventStream, ExecHandle, ExecSpec, LogStream, MemberRef,
    MemberUsage, Placement, RunSpec, RunStatus,
};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::time::{Duration, Instant};

/// How often a stop is checked for having happened.
const STOP_POLL: Duration = Duration::from_millis(200);
/// How long a started container's start script may take to wait for its word, and how often it is checked.
const RELEASE_PATIENCE: Duration = Duration::from_secs(60);
const RELEASE_POLL: Duration = Duration::from_millis(10);
/// How long a removal waits for LXD to finish stopping a container.
const BUSY_PATIENCE: Duration = Duration::from_secs(30);

impl LxdEngine {
    /// Makes and starts the container of `spec`; on failure, whatever it made is removed.
    async fn create(&self, spec: &RunSpec) -> Result<String, EngineError> {
        let [m] = spec.members.as_slice() else {
            return Err(EngineError::Unsupported {
                engine: "lxd",
                what: format!("a run of {} members (one container per run)", spec.members.len()),
            });
        };
        if let Some(node) = m.node.as_deref().filter(|n| *n != self.inner.node.name) {
            return Err(EngineError::Rejected(format!(
                "member 0 is placed on node {node}, but this engine runs on {}",
                self.inner.node.name
            )));
        }
        let image = self.inner.images.ensure(&self.inner.api, &spec.image).await?;
        let name = spec::lxd_name(&spec.name);
        let gpu = spec::gpus(&self.inner.node, &m.gpus, &self.inner.control_devices, spec::device_numbers)?;
        let command = spec::command(spec, &image.settings)?;
        let cwd = spec
            .working_dir
            .clone()
            .or_else(|| image.settings.cwd.clone())
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| "/".into());
        let run_dir = self.run_dir(&name);
        self.make_run_dir(&run_dir, spec, &spec::init_script(&command, &cwd))?;
        let mut proxies = Vec::new();
        for port in &spec.ports {
            proxies.push((*port, free_port()?));
        }
        let body = spec::instance(
            spec,
            m,
            &name,
            &image.alias,
            &self.inner.config.storage_pool,
            self.inner.config.network.as_deref(),
            &run_dir,
            &proxies,
            gpu,
            &image.settings,
        )?;
        if let Err(e) = self.inner.api.json(http::Method::POST, "/1.0/instances", &body).await {
            let _ = std::fs::remove_dir_all(&run_dir);
            return Err(match e.code() {
                Some(409) => EngineError::Rejected(format!("a container named {name} exists already")),
                _ => api_err(e),
            });
        }
        if let Err(e) = self.set_state(&name, "start", false, -1).await {
            // LXD's own answer names only its helper's exit status: LXC's log says why
            let log = self.inner.api.get_text(&format!("/1.0/instances/{name}/logs/lxc.log")).await.unwrap_or_default();
            if let Err(e) = self.delete_instance(&name).await {
                tracing::warn!(container = %name, error = %e, "cannot remove the container of a failed start");
            }
            let _ = std::fs::remove_dir_all(&run_dir);
            return Err(explain_start(e, &log, spec));
        }
        self.loopback_up(&name).await;
        if let Err(e) = self.release(&name).await {
            let _ = self.set_state(&name, "stop", true, -1).await;
            if let Err(e) = self.delete_instance(&name).await {
                tracing::warn!(container = %name, error = %e, "cannot remove the container of a failed start");
            }
            let _ = std::fs::remove_dir_all(&run_dir);
            return Err(e);
        }
        Ok(name)
    }

    /// Makes a run's directory, owned by its user (mode 0700), with its start script.
    fn make_run_dir(&self, dir: &std::path::Path, spec: &RunSpec, script: &str) -> Result<(), EngineError> {
        let fs = |e: std::io::Error| EngineError::Engine(format!("cannot make {}: {e}", dir.display()));
        std::fs::create_dir_all(self.inner.config.runs_dir()).map_err(fs)?;
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(fs)?;
        }
        std::fs::DirBuilder::new().mode(0o700).create(dir).map_err(fs)?;
        let init = dir.join("init.sh");
        std::fs::write(&init, script).map_err(fs)?;
        std::fs::set_permissions(&init, std::fs::Permissions::from_mode(0o500)).map_err(fs)?;
        let go = dir.join(spec::GO);
        let fifo = rustix::fs::FileType::Fifo;
        rustix::fs::mknodat(rustix::fs::CWD, &go, fifo, rustix::fs::Mode::from_raw_mode(0o600), 0)
            .map_err(|e| fs(e.into()))?;
        let owner = Some(rustix::fs::Uid::from_raw(spec.identity.uid));
        let group = Some(rustix::fs::Gid::from_raw(spec.identity.gid));
        for p in [dir, init.as_path(), go.as_path()] {
            rustix::fs::chown(p, owner, group).map_err(|e| fs(e.into()))?;
        }
        Ok(())
    }

    /// Sends SIGTERM to every process of container `name` but its start script, which then writes the
    /// command's exit status and ends, stopping the container.
    async fn terminate(&self, name: &str) -> Result<(), EngineError> {
        let body = json!({
            "command": ["/bin/sh", "-c", "kill -TERM -1"],
            "wait-for-websocket": false,
            "interactive": false,
            "record-output": false,
        });
        self.inner
            .api
            .json(http::Method::POST, &format!("/1.0/instances/{name}/exec"), &body)
            .await
            .map(|_| ())
            .map_err(api_err)
    }

    /// Deletes container `name`, stopping it first if it runs; a container whose init just ended (or
    /// whose start failed) is still being stopped by LXD for a moment ("busy"), which is waited out.
    pub(crate) async fn delete_instance(&self, name: &str) -> Result<(), EngineError> {
        let deadline = Instant::now() + BUSY_PATIENCE;
        loop {
            match self.inner.api.delete(&format!("/1.0/instances/{name}")).await {
                Ok(_) => return Ok(()),
                Err(e) if e.not_found() => return Err(EngineError::NotFound(format!("container {name}"))),
                Err(e) if e.to_string().contains("is busy") && Instant::now() < deadline => {
                    tokio::time::sleep(STOP_POLL).await
                }
                Err(e) if e.to_string().contains("is running") && Instant::now() < deadline => {
                    let _ = self.set_state(name, "stop", true, -1).await;
                }
                Err(e) => return Err(api_err(e)),
            }
        }
    }

    /// Tells container `name`'s start script to run its command: a line into its [`spec::GO`] FIFO, once
    /// the script reads it (opening the FIFO for writing fails until then; the script reaches it within
    /// milliseconds of the start). An error when the container ended or never read it.
    async fn release(&self, name: &str) -> Result<(), EngineError> {
        use rustix::fs::{Mode, OFlags};
        let go = self.run_dir(name).join(spec::GO);
        let deadline = Instant::now() + RELEASE_PATIENCE;
        loop {
            match rustix::fs::open(&go, OFlags::WRONLY | OFlags::NONBLOCK | OFlags::CLOEXEC, Mode::empty()) {
                Ok(fd) => {
                    let file = std::fs::File::from(fd);
                    return std::io::Write::write_all(&mut &file, b"go\n")
                        .map_err(|e| EngineError::Engine(format!("cannot start the command of {name}: {e}")));
                }
                // no reader yet
                Err(rustix::io::Errno::NXIO) if Instant::now() < deadline => {
                    if !self.container(name).await?.running {
                        return Err(EngineError::Engine(format!(
                            "container {name} stopped before it ran its command: {}",
                            self.run_dir(name).join("log").display()
                        )));
                    }
                    tokio::time::sleep(RELEASE_POLL).await
                }
                Err(e) => {
                    return Err(EngineError::Engine(format!(
                        "cannot start the command of {name} ({}): {e}",
                        go.display()
                    )));
                }
            }
        }
    }

    /// Brings container `name`'s loopback up. Nothing in an application image's container does (no init
    /// of its own, and its user may not), and LXD's proxy devices connect to apps on 127.0.0.1 inside it:
    /// the host's `ip` in the container's network namespace (`nsenter`) does. A container that ended
    /// meanwhile is fine.
    async fn loopback_up(&self, name: &str) {
        let pid = match self.inner.api.get(&format!("/1.0/instances/{name}/state")).await {
            Ok(s) => s.get("pid").and_then(Value::as_i64).unwrap_or_default(),
            Err(_) => 0,
        };
        if pid <= 0 {
            return;
        }
        let target = pid.to_string();
        let out = tokio::process::Command::new("nsenter")
            .args(["--target", &target, "--net", "ip", "link", "set", "lo", "up"])
            .output()
            .await;
        match out {
            Ok(o) if o.status.success() => {}
            // a member that ended at once is no loss
            Ok(_) if !std::path::Path::new(&format!("/proc/{pid}")).exists() => {}
            Ok(o) => tracing::warn!(container = name, error = %String::from_utf8_lossy(&o.stderr).trim(),
                "cannot bring the container's loopback up: its apps cannot be reached"),
            Err(e) => {
                tracing::warn!(container = name, error = %e, "cannot run nsenter (util-linux) to bring the container's loopback up")
            }
        }
    }

    /// Adds a proxy device for container port `port` to running container `c`; its host port.
    async fn add_proxy(&self, c: &Container, port: u16) -> Result<u16, EngineError> {
        let host = free_port()?;
        let body = json!({"devices": {format!("port{port}"): spec::proxy_device(port, host)}});
        self.inner
            .api
            .json(http::Method::PATCH, &format!("/1.0/instances/{}", c.name), &body)
            .await
            .map_err(api_err)?;
        Ok(host)
    }
}

/// A port on 127.0.0.1 that is free now.
fn free_port() -> Result<u16, EngineError> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| EngineError::Engine(format!("cannot find a free port on 127.0.0.1: {e}")))?;
    l.local_addr().map(|a| a.port()).map_err(|e| EngineError::Engine(format!("cannot find a free port: {e}")))
}

/// A failed start, explained with the errors of LXC's log `log` (its first few); a user or group ID the
/// host has not delegated to root (newuidmap, newgidmap) is the run's to fix, and named so.
fn explain_start(e: EngineError, log: &str, spec: &RunSpec) -> EngineError {
    let errors: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" ERROR "))
        .map(|l| l.split_once(" - ").map_or(l, |(_, rest)| rest).trim())
        .take(3)
        .collect();
    let message = match &e {
        EngineError::Rejected(m) | EngineError::Engine(m) | EngineError::Unavailable(m) => m.clone(),
        other => other.to_string(),
    };
    let text = match errors.is_empty() {
        true => message,
        false => format!("{message} ({})", errors.join("; ")),
    };
    if text.contains("newuidmap") || text.contains("newgidmap") {
        return EngineError::Rejected(format!(
            "lxd cannot map uid {} / gid {} into the container: root must be allowed them in /etc/subuid and \
             /etc/subgid (scripts/setup-debian.sh adds root:1000:… ranges): {text}",
            spec.identity.uid, spec.identity.gid
        ));
    }
    match e {
        EngineError::Rejected(_) => EngineError::Rejected(text),
        EngineError::Unavailable(_) => EngineError::Unavailable(text),
        _ => EngineError::Engine(text),
    }
}

#[async_trait]
impl Engine for LxdEngine {
    fn name(&self) -> &'static str {
        "lxd"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            placement: Placement::Hub,
            multi_node: false,
            max_members: 1,
            exec: true,
            ingress: true,
            volumes: true,
            nfs: false,
            pull: true,
            gpu_shares: true,
            shared_ports: false,
            usage: true,
        }
    }

    async fn inventory(&self) -> Result<Vec<EngineNode>, EngineError> {
        Ok(vec![EngineNode { capacity: self.inner.node.clone(), up: true, state: "lxd".into() }])
    }

    async fn image_exists(&self, image: &str) -> Result<bool, EngineError> {
        self.inner.images.exists(&self.inner.api, image).await
    }

    async fn image_tags(&self, image: &str) -> Result<Vec<String>, EngineError> {
        if let Some((_, img)) = self.inner.images.by_alias(&self.inner.api, &saved_alias(image)).await? {
            let source = img.pointer(&format!("/properties/{PROP_SOURCE}")).and_then(Value::as_str);
            return Ok(source.map(str::to_owned).into_iter().collect());
        }
        Ok(self.inner.images.docker_image(image).await?.map(|(_, tags)| tags).unwrap_or_default())
    }

    async fn commit(&self, member: &MemberRef, reference: &str) -> Result<u64, EngineError> {
        let c = self.container(&member.run).await?;
        let api = &self.inner.api;
        let snap = format!("gpuhub-save-{}", std::process::id());
        let snaps = format!("/1.0/instances/{}/snapshots", c.name);
        let _ = api.delete(&format!("{snaps}/{snap}")).await;
        api.json(http::Method::POST, &snaps, &json!({"name": snap, "stateful": false})).await.map_err(api_err)?;
        let mut properties = serde_json::Map::new();
        for (k, v) in ImageSettings::from_properties(&c.config, "image.").properties() {
            properties.insert(k, v.into());
        }
        properties.insert(PROP_SOURCE.into(), reference.into());
        properties.insert("description".into(), format!("gpuhub: {reference}").into());
        let body = json!({
            "source": {"type": "snapshot", "name": format!("{}/{snap}", c.name)},
            "properties": properties,
            "public": false,
            // uncompressed: publishing a large workspace is several times faster, and its size is the
            // file system's, as Docker counts an image
            "compression_algorithm": "none",
        });
        let published = api.json(http::Method::POST, "/1.0/images", &body).await;
        let _ = api.delete(&format!("{snaps}/{snap}")).await;
        let published = published.map_err(api_err)?;
        let fp = published
            .get("fingerprint")
            .and_then(Value::as_str)
            .ok_or_else(|| EngineError::Engine(format!("lxd published no fingerprint: {published}")))?
            .to_owned();
        if let Some(old) = self.inner.images.set_alias(api, &saved_alias(reference), &fp).await? {
            let _ = api.delete(&format!("/1.0/images/{old}")).await;
        }
        let image = api.get(&format!("/1.0/images/{fp}")).await.map_err(api_err)?;
        Ok(image.get("size").and_then(Value::as_u64).unwrap_or_default())
    }

    /// Pulls into the hub's Docker daemon, which the engine takes every image from.
    async fn pull(
        &self,
        image: &str,
        auth: Option<&gpuhub_driver::RegistryAuth>,
        progress: &(dyn Fn(gpuhub_driver::PullProgress) + Send + Sync),
    ) -> Result<(), EngineError> {
        crate::pull::pull(&self.inner.config.images_dir(), image, auth, progress).await
    }

    async fn remove_image(&self, reference: &str) -> Result<(), EngineError> {
        let api = &self.inner.api;
        let Some((fp, _)) = self.inner.images.by_alias(api, &saved_alias(reference)).await? else {
            return Err(EngineError::NotFound(format!("image {reference}")));
        };
        api.delete(&format!("/1.0/images/{fp}")).await.map(|_| ()).map_err(api_err)
    }

    async fn submit(&self, spec: &RunSpec) -> Result<RunStatus, EngineError> {
        let name = self.create(spec).await?;
        self.observe(&name).await
    }

    async fn cancel(&self, run: &str, grace: Duration) -> Result<(), EngineError> {
        let c = self.container(run).await?;
        let ended = |c: &Container| !c.running || matches!(self.state(c), gpuhub_driver::MemberState::Exited(_));
        if ended(&c) {
            return Ok(());
        }
        if let Err(e) = self.terminate(&c.name).await {
            tracing::debug!(run, error = %e, "cannot send SIGTERM into the container; stopping it");
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            match self.container(run).await {
                Ok(c) if !ended(&c) => tokio::time::sleep(STOP_POLL).await,
                Ok(_) | Err(EngineError::NotFound(_)) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        match self.set_state(&c.name, "stop", true, -1).await {
            Ok(()) => Ok(()),
            // it stopped meanwhile
            Err(_) if !self.container(run).await?.running => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn remove(&self, run: &str) -> Result<(), EngineError> {
        let c = self.container(run).await?;
        if c.running {
            let _ = self.set_state(&c.name, "stop", true, -1).await;
        }
        match self.delete_instance(&c.name).await {
            Ok(()) => {}
            Err(EngineError::NotFound(_)) => return Err(EngineError::NotFound(format!("run {run}"))),
            Err(e) => return Err(e),
        }
        let dir = self.run_dir(&c.name);
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot remove a run's directory");
            }
        }
        Ok(())
    }

    async fn observe(&self, run: &str) -> Result<RunStatus, EngineError> {
        let c = self.container(run).await?;
        Ok(self.status(&c))
    }

    async fn list_runs(&self) -> Result<Vec<RunStatus>, EngineError> {
        Ok(self.containers().await?.iter().map(|c| self.status(c)).collect())
    }

    async fn events(&self) -> Result<EventStream, EngineError> {
        self.subscribe().await
    }

    async fn logs(&self, member: &MemberRef, follow: bool, tail: Option<u64>) -> Result<LogStream, EngineError> {
        let c = self.container(&member.run).await?;
        Ok(self.log_stream(&c.name, follow, tail))
    }

    async fn exec(&self, member: &MemberRef, spec: &ExecSpec) -> Result<ExecHandle, EngineError> {
        let c = self.container(&member.run).await?;
        if !c.running {
            return Err(EngineError::Rejected(format!("run {} is not running", member.run)));
        }
        self.start_exec(&c.name, spec).await
    }

    async fn endpoint(&self, member: &MemberRef, port: u16) -> Result<SocketAddr, EngineError> {
        let c = self.container(&member.run).await?;
        if !c.running {
            return Err(EngineError::Rejected(format!("run {} is not running", member.run)));
        }
        let host = match spec::proxied_port(&c.devices, port) {
            Some(p) => p,
            None => self.add_proxy(&c, port).await?,
        };
        Ok(SocketAddr::from(([127, 0, 0, 1], host)))
    }

    async fn usage(&self, run: &str) -> Result<Vec<MemberUsage>, EngineError> {
        let c = self.container(run).await?;
        if !c.running {
            return Ok(Vec::new());
        }
        let state = match self.inner.api.get(&format!("/1.0/instances/{}/state", c.name)).await {
            Ok(s) => s,
            Err(e) if e.not_found() => return Err(EngineError::NotFound(format!("run {run}"))),
            Err(e) => return Err(api_err(e)),
        };
        if state.get("status").and_then(Value::as_str) != Some("Running") {
            return Ok(Vec::new());
        }
        let num = |p: &str| state.pointer(p).and_then(Value::as_u64).unwrap_or_default();
        let limit = c
            .config
            .get("limits.memory")
            .and_then(Value::as_str)
            .and_then(|l| l.trim_end_matches('B').parse().ok())
            .map(gpuhub_core::Bytes);
        let index = self.status(&c).members.first().map(|m| m.index).unwrap_or(0);
        Ok(vec![MemberUsage {
            index,
            cpu_seconds: num("/cpu/usage") as f64 / 1e9,
            memory_used: gpuhub_core::Bytes(num("/memory/usage")),
            memory_limit: limit,
            // every process of the container, those of execs too (a lab's kernels), so that the monitor
            // and the memory guard attribute GPU processes to the member
            pids: match u32::try_from(num("/pid")) {
                Ok(init) if init > 0 => crate::procs::container_pids(&c.name, init),
                _ => Vec::new(),
            },
        }])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_is_explained_by_lxcs_log() {
        let log = "lxc t1 20261126 ERROR    conf - ../src/lxc/conf.c:lxc_map_ids:3708 - newuidmap failed to write \
                   mapping \"newuidmap: uid range [999-1000) -> [999-1000) not allowed\"\n\
                   lxc t1 20261126 ERROR    start - ../src/lxc/start.c:lxc_spawn:1788 - Failed to set up id mapping.\n\
                   lxc t1 20261126 WARN     start - other\n";
        let spec = crate::spec::tests::run();
        let e = explain_start(EngineError::Engine("lxd: Failed to run: forkstart".into()), log, &spec);
        let text = e.to_string();
        assert!(matches!(e, EngineError::Rejected(_)), "{e:?}");
        assert!(
            text.contains("/etc/subuid") && text.contains("uid range [999-1000) -> [999-1000) not allowed"),
            "{text}"
        );
        assert!(text.contains("Failed to set up id mapping") && !text.contains("other"), "{text}");
        let e = explain_start(EngineError::Engine("lxd: boom".into()), "", &spec);
        assert_eq!(e.to_string(), "container engine: lxd: boom");
    }
}
