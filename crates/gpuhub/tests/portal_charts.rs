//! The portal's charts in headless Chromium, on the real `gpuhub` binary and the local Docker engine
//! with one fake GPU (`mknod`): alice's GPU-hours on the Usage page equal `gpuhub usage --json` for
//! the page's window; her workload's page charts its life; the Nodes page is a grid of GPU tiles; the
//! admin's Usage page lists her. Each page is saved at 1280×800 and 390×844 (a phone) as
//! `target/screenshots/charts-<page>-<width>.png`.

mod access_support;

use access_support::browser::{self, Browser};
use access_support::{Hub, PASSWORD, WAIT, eventually};
use anyhow::{Context as _, Result, ensure};
use fantoccini::{Client, Locator};
use gpuhub_testkit::process::fake_gpu;
use serde_json::Value;
use std::time::Duration;

/// Saves the page at a desktop's and a phone's size, scrolled to the element `#at` where given.
async fn shots(c: &Client, name: &str, at: Option<&str>) -> Result<()> {
    for (w, h) in [(1280, 800), (390, 844)] {
        c.set_window_size(w, h).await?;
        if let Some(id) = at {
            c.execute(&format!("document.getElementById('{id}').scrollIntoView()"), vec![]).await?;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        browser::screenshot(c, &format!("charts-{name}-{w}")).await;
    }
    c.set_window_size(1280, 800).await?;
    Ok(())
}

/// Logs `name` in through the login page, landing on `path`.
async fn sign_in(c: &Client, hub_url: &str, name: &str, password: &str, path: &str) -> Result<()> {
    c.goto(&format!("{hub_url}{path}")).await?;
    c.wait().at_most(WAIT).for_element(Locator::Css("input[name=username]")).await?;
    browser::log_in(c, name, password).await?;
    c.wait().at_most(WAIT).for_element(Locator::Css("main h1")).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_usage_page_charts_and_gpu_grid_in_a_browser() -> Result<()> {
    let _serial = access_support::serial().await;
    access_support::ensure_image("build-busybox-image.sh").await?;
    let dev = tempfile::tempdir()?;
    let config = format!(
        "gpu_mode = \"devices\"\nreconcile_secs = 600\n{}\n[monitor]\ninterval_secs = 1\n",
        fake_gpu(dev.path(), 0)?
    );
    let mut hub = Hub::start_with(&config).await?;
    let alice = hub.user("alice").await?;
    let root = hub.user_with_role("root", true).await?;
    let port = reqwest::Url::parse(&hub.url)?.port().context("port")?;
    let hub_url = format!("http://localhost:{port}");
    // a job that holds the GPU for a few seconds, and a workspace that runs on
    alice
        .ok(&["run", "--name", "train", "--gpus", "1", "--image", "gpuhub/busybox:latest", "--", "sleep", "6"])
        .await?;
    alice.wait_state("train", "succeeded").await?;
    alice
        .ok(&[
            "run",
            "--name",
            "ws",
            "--workspace",
            "--cpus",
            "0.5",
            "--image",
            "gpuhub/busybox:latest",
            "--",
            "sh",
            "-c",
            "while :; do :; done",
        ])
        .await?;
    alice.wait_state("ws", "running").await?;
    tokio::time::sleep(Duration::from_secs(4)).await;

    let b = Browser::start().await?;
    let c = &b.client;
    sign_in(c, &hub_url, &alice.name, PASSWORD, "/usage?range=day").await?;
    let summary = c.find(Locator::Css("table.usage-summary")).await?;
    let from = summary.attr("data-from").await?.context("data-from")?;
    let to = summary.attr("data-to").await?.context("data-to")?;
    let cell = c.find(Locator::Css(&format!("tr[data-group=\"{}\"] td[data-gpu-hours]", alice.name))).await?;
    let shown: f64 = cell.attr("data-gpu-hours").await?.context("data-gpu-hours")?.parse()?;
    let cli: Value = serde_json::from_str(&alice.ok(&["usage", "--from", &from, "--to", &to, "--json"]).await?)?;
    let want = cli["rows"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["user"] == alice.name.as_str()))
        .and_then(|r| r["gpu_hours"].as_f64())
        .with_context(|| format!("gpuhub usage: {cli}"))?;
    ensure!((shown - want).abs() < 1e-9 && want > 0.0, "the page shows {shown} GPU-hours, gpuhub usage {want}");
    ensure!(c.find(Locator::Css("figure.chart svg rect")).await.is_ok(), "no bars in the usage chart");
    shots(c, "usage", None).await?;

    // the workspace's page: its charts fill in while it runs
    c.goto(&format!("{hub_url}/workloads/ws")).await?;
    eventually("ws's charts", WAIT, Duration::from_millis(500), || async {
        Ok(c.find(Locator::Css("#charts figure.chart svg")).await.is_ok().then_some(()))
    })
    .await?;
    let refreshed = eventually("ws's charts fetched again", WAIT, Duration::from_millis(500), || async {
        let n = c.find(Locator::Css("#charts")).await?.attr("data-refreshed").await?;
        Ok(n.filter(|n| n != "0"))
    })
    .await;
    shots(c, "workload", Some("charts")).await?;
    refreshed?;
    c.goto(&format!("{hub_url}/workloads/train")).await?;
    shots(c, "workload-ended", Some("charts")).await?;
    c.goto(&format!("{hub_url}/nodes")).await?;
    let tile = c.find(Locator::Css(".tile[data-gpu=\"GPU-fake-0\"]")).await?;
    ensure!(tile.text().await?.contains("H200"), "the GPU's tile");
    shots(c, "nodes", None).await?;
    let node = c.find(Locator::Css("section.node")).await?.attr("data-node").await?.context("data-node")?;
    c.goto(&format!("{hub_url}/nodes/{node}?range=hour")).await?;
    shots(c, "node", None).await?;

    // the admin: everyone's usage, alice's row among it
    c.goto(&format!("{hub_url}/workloads")).await?;
    c.find(Locator::Css("form.logout button")).await?.click().await?;
    c.wait().at_most(WAIT).for_element(Locator::Css("input[name=username]")).await?;
    sign_in(c, &hub_url, &root.name, PASSWORD, "/usage?range=day").await?;
    let row = format!("tr[data-group=\"{}\"] td[data-gpu-hours]", alice.name);
    let found = c.wait().at_most(WAIT).for_element(Locator::Css(&row)).await;
    if found.is_err() {
        browser::screenshot(c, "charts-failed").await;
        let text = c.find(Locator::Css("body")).await?.text().await?;
        anyhow::bail!("no row for {} on the admin's usage page at {}: {text}", alice.name, c.current_url().await?);
    }
    let cell = found?;
    let admin_shown: f64 = cell.attr("data-gpu-hours").await?.context("data-gpu-hours")?.parse()?;
    ensure!((admin_shown - want).abs() < 1e-9, "the admin's page shows {admin_shown} for alice, not {want}");
    shots(c, "usage-admin", None).await?;
    b.close().await?;
    hub.quiet();
    Ok(())
}
