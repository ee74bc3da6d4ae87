//! VS Code in the browser from its launch card, in headless Chromium, on the real `gpuhub` binary and
//! the local Docker engine: the image of `scripts/build-vscode-image.sh` (code-server, served under the
//! app's path by its `gpuhub-code-server`) in the catalog, one click on its card, then its app link
//! opens the workbench on the app's own origin (`*.apps.localhost`), whose explorer lists a folder of
//! the workspace: its files come over code-server's WebSocket, through the hub's proxy. The time from
//! the login page to the listed folder is printed. Screenshots: `target/screenshots/vscode-*.png`.

mod access_support;

use access_support::browser::{self, Browser};
use access_support::{Hub, PASSWORD, WAIT, eventually};
use anyhow::{Context as _, Result};
use fantoccini::Locator;
use std::time::{Duration, Instant};

/// The catalog entry's app (README): VS Code under the hub's prefix, without a login of its own.
const CODE_APP: &str = "code:8080=gpuhub-code-server {base_url} {port} --disable-workspace-trust";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vscode_opens_from_its_card() -> Result<()> {
    let _serial = access_support::serial().await;
    access_support::ensure_image("build-vscode-image.sh").await?;
    let mut hub =
        Hub::start_with("gpu_mode = \"none\"\nreconcile_secs = 600\napps_domain = \"apps.localhost\"\n").await?;
    let add = ["images", "add", "vscode", "gpuhub/vscode:latest", "--description", "VS Code in the browser"];
    hub.admin.ok(&[&add[..], &["--app", CODE_APP]].concat()).await?;
    let alice = hub.user("alice").await?;
    let port = reqwest::Url::parse(&hub.url)?.port().context("port")?;
    let hub_url = format!("http://localhost:{port}");

    let b = Browser::start().await?;
    let c = &b.client;
    let t0 = Instant::now();
    c.goto(&format!("{hub_url}/new")).await?;
    c.wait().at_most(WAIT).for_element(Locator::Css("input[name=username]")).await?;
    browser::log_in(c, &alice.name, PASSWORD).await?;
    let card = c.wait().at_most(WAIT).for_element(Locator::Css("li.card[data-image=vscode] button[data-launch]"));
    card.await.context("the VS Code card")?.click().await?;
    let ws = eventually("the workspace's page", WAIT, Duration::from_millis(100), || async {
        Ok(c.current_url().await?.path().strip_prefix("/workloads/").map(str::to_owned))
    })
    .await?;
    alice.wait_state(&ws, "running").await?;
    alice.wait_http_ok(&format!("{}healthz", alice.app_url(&ws, "code"))).await?;
    c.wait().at_most(WAIT).for_element(Locator::LinkText("code")).await?.click().await?;
    let at = browser::at_host(c, &format!("code--{ws}--{}.apps.localhost", alice.name)).await?;
    // a folder of the workspace's own: its files come from code-server over its WebSocket
    c.goto(&format!("{}?folder=/etc", at.as_str().split('?').next().unwrap_or_default())).await?;
    let listed = c.wait().at_most(WAIT).for_element(Locator::Css(".explorer-folders-view .monaco-list-row")).await;
    browser::screenshot(c, "vscode-workbench").await;
    listed.context("the explorer lists /etc of the workspace")?;
    println!("login to VS Code listing a folder of the workspace: {:.1?}", t0.elapsed());
    b.close().await?;
    hub.quiet();
    Ok(())
}
