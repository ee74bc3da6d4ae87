//! `gpuhub serve` with `engine = "kubernetes"` stops at start, naming the kubeconfig and what was
//! tried, when the kubeconfig does not exist or its API server does not answer.

use anyhow::{Context as _, Result, ensure};
use gpuhub_testkit::process::{clean_async_command, free_port};
use std::time::Duration;

async fn serve(dir: &std::path::Path, kubeconfig: &std::path::Path) -> Result<(bool, String)> {
    let config = dir.join("gpuhub.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\nssh_listen = \"127.0.0.1:0\"\ndata_dir = \"{}\"\nengine = \"kubernetes\"\n\
             [kubernetes]\nkubeconfig = \"{}\"\n",
            dir.join("data").display(),
            kubeconfig.display()
        ),
    )?;
    // without the caller's GPUHUB_* (the kit's command), nor a pod's in-cluster address
    let mut cmd = clean_async_command(env!("CARGO_BIN_EXE_gpuhub"));
    let run = cmd.env_remove("KUBERNETES_SERVICE_HOST").args(["serve", "--config"]).arg(&config).output();
    let out = tokio::time::timeout(Duration::from_secs(60), run).await.context("gpuhub serve did not stop")??;
    Ok((out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned()))
}

#[tokio::test]
async fn serve_stops_naming_a_missing_kubeconfig() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let missing = dir.path().join("no-kubeconfig.yaml");
    let (ok, err) = serve(dir.path(), &missing).await?;
    ensure!(!ok, "gpuhub serve started without a kubeconfig");
    ensure!(err.contains("no-kubeconfig.yaml") && err.contains("does not exist"), "gpuhub serve's error: {err}");
    Ok(())
}

#[tokio::test]
async fn serve_stops_naming_the_kubeconfig_of_a_cluster_that_does_not_answer() -> Result<()> {
    let dir = tempfile::tempdir()?;
    // a port nothing listens on
    let port = free_port()?;
    let kubeconfig = dir.path().join("silent.yaml");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:{port}\n    \
             insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: x\n  context:\n    \
             cluster: c\n    user: u\ncurrent-context: x\n"
        ),
    )?;
    let (ok, err) = serve(dir.path(), &kubeconfig).await?;
    ensure!(!ok, "gpuhub serve started without a cluster");
    ensure!(
        err.contains("silent.yaml") && err.contains(&format!("127.0.0.1:{port}")) && err.contains("cannot reach"),
        "gpuhub serve's error: {err}"
    );
    Ok(())
}
