//! Real containers for the terminal and JupyterLab tests.

use anyhow::Context;
use anyhow::{Result, ensure};
use gpuhub_docker::DockerRuntime;
use gpuhub_docker::{ContainerSpec, DockerEngine};
use gpuhub_driver::Engine;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

pub const UID: &str = "10000";

/// Runs a build script of the repository; the test fails when it does.
pub fn build_image(script: &str) -> Result<()> {
    static LOCK: Mutex<()> = Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let status = Command::new("bash").arg(root.join("scripts").join(script)).status()?;
    ensure!(status.success(), "{script} failed: {status}");
    Ok(())
}

/// A container removed (with its network) when dropped.
#[derive(Debug)]
pub struct Container {
    pub id: String,
    pub network: String,
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rm", "-f", &self.id]).output();
        let _ = Command::new("docker").args(["network", "rm", &self.network]).output();
    }
}

/// The engine over `runtime` (no GPUs), as the terminal bridge takes it.
pub fn engine(runtime: &DockerRuntime) -> std::sync::Arc<dyn Engine> {
    let node =
        gpuhub_core::node::NodeCapacity::cpu_only("test", gpuhub_core::CpuMilli(1000), gpuhub_core::Bytes(1 << 30));
    std::sync::Arc::new(DockerEngine::new(runtime.clone(), node, gpuhub_docker::GpuMode::None))
}

/// Starts `image` running `command` as uid 10000 (HOME=/tmp) on its own network, through the real runtime.
pub async fn container(runtime: &DockerRuntime, image: &str, command: &[&str]) -> Result<Container> {
    let tag = uuid::Uuid::new_v4().simple().to_string()[..10].to_string();
    let network = format!("gpuhub-test-proxy-{tag}");
    runtime.ensure_network(&network, &BTreeMap::new()).await?;
    let spec = ContainerSpec {
        name: format!("gpuhub-test-proxy-{tag}"),
        image: image.to_string(),
        command: command.iter().map(|s| s.to_string()).collect(),
        env: BTreeMap::from([("HOME".to_string(), "/tmp".to_string())]),
        // a workload's label: the engine takes a container without a run label as a run of its own
        labels: BTreeMap::from([(gpuhub_driver::LABEL_WORKLOAD.to_string(), format!("proxy-test-{tag}"))]),
        user: format!("{UID}:{UID}"),
        hostname: Some("ws".into()),
        working_dir: Some("/tmp".into()),
        cpu_milli: 2000,
        memory_bytes: 2 << 30,
        pids_limit: 512,
        mounts: vec![],
        network: Some(network.clone()),
        aliases: vec![],
        gpus: Default::default(),
        log_max_bytes: None,
        groups: Vec::new(),
        disk_bytes: None,
    };
    let id = match runtime.create(&spec).await {
        Ok(id) => id,
        Err(e) => {
            let _ = Command::new("docker").args(["network", "rm", &network]).output();
            return Err(e.into());
        }
    };
    let c = Container { id, network };
    runtime.start(&c.id).await?;
    Ok(c)
}

/// Starts JupyterLab with base_url = PREFIX; returns the container and its app address.
pub async fn jupyterlab(runtime: &DockerRuntime) -> Result<(Container, SocketAddr)> {
    build_image("build-jupyter-image.sh")?;
    let base = format!("--ServerApp.base_url={}", super::PREFIX);
    let cmd = [
        "jupyter",
        "lab",
        &base,
        "--ServerApp.token=",
        "--ServerApp.password=",
        "--ServerApp.ip=0.0.0.0",
        "--ServerApp.allow_remote_access=True",
        "--ServerApp.root_dir=/tmp",
        "--no-browser",
        "--port",
        "8888",
    ];
    let c = container(runtime, "gpuhub/jupyter:latest", &cmd).await?;
    let ip = runtime.inspect(&c.id).await?.ip.context("container has no ip")?;
    Ok((c, SocketAddr::new(ip.parse()?, 8888)))
}
