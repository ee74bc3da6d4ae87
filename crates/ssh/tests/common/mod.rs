//! Fixtures for the gateway tests: real Docker containers, a test backend, OpenSSH client keys.

#![allow(dead_code)]

use anyhow::{Context, Result, bail, ensure};
use async_trait::async_trait;
use gpuhub_docker::{DockerEngine, DockerRuntime};

use gpuhub_ssh::{Denied, GatewayBackend, GatewayOptions, PublicKey, SshGateway, Target};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

pub const BUSYBOX: &str = "gpuhub/busybox:latest";
pub const JUPYTER: &str = "gpuhub/jupyter:latest";

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

pub use gpuhub_testkit::docker::{Container, UID, build_image};

/// The backend the gateway asks: one authorised key, workspaces by ssh user name.
#[derive(Debug, Default)]
pub struct TestBackend {
    pub authorized: String,
    pub targets: Mutex<HashMap<String, Target>>,
    pub asked: Mutex<Vec<(String, String)>>,
    /// Names sent here close the connections acting for them.
    pub revoked: std::sync::OnceLock<tokio::sync::broadcast::Sender<String>>,
}

impl TestBackend {
    /// Revokes `name`'s access: its open connections close.
    pub fn revoke(&self, name: &str) {
        let _ = self.revoked.get_or_init(|| tokio::sync::broadcast::channel(16).0).send(name.to_owned());
    }
}

#[async_trait]
impl GatewayBackend for TestBackend {
    async fn authorize(&self, ssh_user: &str, key: &PublicKey) -> Result<Target, Denied> {
        let fp = gpuhub_ssh::fingerprint(key);
        self.asked.lock().unwrap().push((ssh_user.to_string(), fp.clone()));
        if fp != self.authorized {
            return Err(Denied::NotAuthorized(ssh_user.to_string()));
        }
        self.targets.lock().unwrap().get(ssh_user).cloned().ok_or_else(|| Denied::NotAuthorized(ssh_user.to_string()))
    }

    fn revocations(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
        Some(self.revoked.get_or_init(|| tokio::sync::broadcast::channel(16).0).subscribe())
    }
}

/// An ed25519 key pair made by `ssh-keygen`.
pub struct ClientKey {
    pub path: PathBuf,
    pub fingerprint: String,
}

pub fn keygen(dir: &Path, name: &str) -> Result<ClientKey> {
    let path = dir.join(name);
    let out =
        Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"]).arg(&path).output()?;
    ensure!(out.status.success(), "ssh-keygen: {}", String::from_utf8_lossy(&out.stderr));
    let line = std::fs::read_to_string(path.with_extension("pub"))?;
    let key = gpuhub_ssh::parse_public_key(&line)?;
    let fingerprint = gpuhub_ssh::fingerprint(&key);
    let shown = Command::new("ssh-keygen").arg("-lf").arg(&path).output()?;
    ensure!(String::from_utf8_lossy(&shown.stdout).contains(&fingerprint), "fingerprints differ from ssh-keygen's");
    Ok(ClientKey { path, fingerprint })
}

/// Starts `image` running `command` as uid 10000 on its own network, through the real runtime.
pub async fn container(runtime: &DockerRuntime, image: &str, command: &[&str]) -> Result<Container> {
    let limits = gpuhub_testkit::docker::Limits { prefix: "ssh", cpu_milli: 1000, memory_bytes: 1 << 30 };
    gpuhub_testkit::docker::container(runtime, limits, image, command).await
}

/// A running gateway with a test backend and two client keys.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub good: ClientKey,
    pub bad: ClientKey,
    pub backend: Arc<TestBackend>,
    pub runtime: Arc<DockerRuntime>,
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Fixture {
    pub async fn start() -> Result<Self> {
        let _ = tracing_subscriber::fmt().with_env_filter("gpuhub_ssh=debug").with_test_writer().try_init();
        let dir = tempfile::tempdir()?;
        let good = keygen(dir.path(), "good")?;
        let bad = keygen(dir.path(), "bad")?;
        let backend = Arc::new(TestBackend { authorized: good.fingerprint.clone(), ..Default::default() });
        let runtime = Arc::new(DockerRuntime::connect().await?);
        let node =
            gpuhub_core::node::NodeCapacity::cpu_only("test", gpuhub_core::CpuMilli(1000), gpuhub_core::Bytes(1 << 30));
        let engine = Arc::new(DockerEngine::new((*runtime).clone(), node, gpuhub_docker::GpuMode::None));
        let options = GatewayOptions { auth_rejection_time: Duration::from_millis(50), ..Default::default() };
        let gateway =
            SshGateway::bind_with("127.0.0.1:0", &dir.path().join("host_key"), backend.clone(), engine, options)
                .await?;
        let addr = gateway.local_addr();
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(gateway.run(async move {
            let _ = stopped.await;
        }));
        Ok(Self { dir, good, bad, backend, runtime, addr, stop: Some(stop) })
    }

    /// Lets `ssh_user` into `container` (None: a stopped workspace).
    pub fn allow(&self, ssh_user: &str, workspace: &str, container: Option<&str>) {
        let target = Target {
            login: "alice".into(),
            owner: "alice".into(),
            workspace: workspace.into(),
            user: format!("{UID}:{UID}"),
            home: "/tmp".into(),
            member: container.map(|c| gpuhub_driver::MemberRef::new(c, 0)),
            problem: None,
            lease: Default::default(),
        };
        self.backend.targets.lock().unwrap().insert(ssh_user.to_string(), target);
    }

    /// OpenSSH client options for this gateway with `key`.
    pub fn ssh_options(&self, key: &ClientKey) -> Vec<String> {
        let mut o: Vec<String> = [
            "-F",
            "/dev/null",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "LogLevel=ERROR",
            "-o",
            "ConnectTimeout=10",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        o.push("-i".into());
        o.push(key.path.display().to_string());
        o
    }

    /// `ssh [extra] -p PORT user@127.0.0.1 args…`, with `stdin` fed in; fails after `limit`.
    pub async fn ssh(
        &self,
        key: &ClientKey,
        user: &str,
        extra: &[&str],
        args: &[&str],
        stdin: &[u8],
    ) -> Result<Output> {
        let mut cmd = tokio::process::Command::new("ssh");
        cmd.args(self.ssh_options(key)).args(extra).arg("-p").arg(self.addr.port().to_string());
        cmd.arg(format!("{user}@127.0.0.1")).args(args);
        run(cmd, stdin, Duration::from_secs(60)).await
    }

    /// `scp` with this gateway's options (`ws:` in a path means `ws@127.0.0.1:`).
    pub async fn scp(&self, key: &ClientKey, from: &str, to: &str) -> Result<Output> {
        let mut cmd = tokio::process::Command::new("scp");
        cmd.args(self.ssh_options(key)).arg("-P").arg(self.addr.port().to_string()).arg(from).arg(to);
        run(cmd, b"", Duration::from_secs(300)).await
    }
}

/// Runs a command with a time limit, feeding `stdin`.
pub async fn run(mut cmd: tokio::process::Command, stdin: &[u8], limit: Duration) -> Result<Output> {
    use tokio::io::AsyncWriteExt;
    cmd.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    cmd.kill_on_drop(true);
    let mut child = cmd.spawn().context("spawn")?;
    let mut input = child.stdin.take().unwrap();
    let data = stdin.to_vec();
    tokio::spawn(async move {
        let _ = input.write_all(&data).await;
    });
    match tokio::time::timeout(limit, child.wait_with_output()).await {
        Ok(out) => Ok(out?),
        Err(_) => bail!("{cmd:?} did not finish within {limit:?}"),
    }
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A free local TCP port (bound and released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}
