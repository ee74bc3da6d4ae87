//! Real containers for the terminal and JupyterLab tests.

use anyhow::Context;
use anyhow::Result;
use gpuhub_docker::DockerEngine;
use gpuhub_docker::DockerRuntime;
use gpuhub_driver::Engine;
use std::net::SocketAddr;

// UID: only the terminal tests name it
#[allow(unused_imports)]
pub use gpuhub_testkit::docker::{Container, UID, build_image};

/// The engine over `runtime` (no GPUs), as the terminal bridge takes it.
pub fn engine(runtime: &DockerRuntime) -> std::sync::Arc<dyn Engine> {
    let node =
        gpuhub_core::node::NodeCapacity::cpu_only("test", gpuhub_core::CpuMilli(1000), gpuhub_core::Bytes(1 << 30));
    std::sync::Arc::new(DockerEngine::new(runtime.clone(), node, gpuhub_docker::GpuMode::None))
}

/// Starts `image` running `command` as uid 10000 (HOME=/tmp) on its own network, through the real runtime.
pub async fn container(runtime: &DockerRuntime, image: &str, command: &[&str]) -> Result<Container> {
    let limits = gpuhub_testkit::docker::Limits { prefix: "proxy", cpu_milli: 2000, memory_bytes: 2 << 30 };
    gpuhub_testkit::docker::container(runtime, limits, image, command).await
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
