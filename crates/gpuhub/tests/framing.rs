//! N2 of the second security review in headless Chromium, end to end (the real `gpuhub` binary on the
//! local Docker engine): a page of another origin of the same site — alice's own app on its origin under
//! `apps_domain = "apps.hub.localhost"`, beside the hub at `hub.localhost` (Chromium resolves
//! `*.localhost` to loopback; both are the site `hub.localhost`, so her `SameSite=Lax` cookie goes
//! along) — frames her browser terminal at the hub: the frame is not rendered, while the terminal opens
//! at the hub itself.

mod access_support;

use access_support::browser::{self, Browser};
use access_support::{Hub, PASSWORD, WAIT, eventually};
use anyhow::{Context as _, Result, ensure};
use fantoccini::Locator;
use std::time::Duration;

/// A page of alice's `web` app that frames her terminal at the hub and says when the frame loaded.
const FRAMER: &str = r#"<!doctype html><title>framer</title><body>
<iframe id="t" src="HUB/terminal/OWNER/ws/" width="800" height="400"
  onload="document.body.dataset.loaded = '1'"></iframe></body>"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n2_another_origin_cannot_frame_the_terminal() -> Result<()> {
    let _serial = access_support::serial().await;
    access_support::ensure_image("build-jupyter-image.sh").await?;
    let mut hub =
        Hub::start_with("gpu_mode = \"none\"\nreconcile_secs = 600\napps_domain = \"apps.hub.localhost\"\n").await?;
    let alice = hub.user("alice").await?;
    let port = reqwest::Url::parse(&hub.url)?.port().context("port")?;
    let hub_url = format!("http://hub.localhost:{port}");
    let framer = FRAMER.replace("HUB", &hub_url).replace("OWNER", &alice.name);
    alice.start_web("ws", &format!("cat > framer.html <<'EOF'\n{framer}\nEOF")).await?;
    let site_host = format!("web--ws--{}.apps.hub.localhost", alice.name);

    let browser = Browser::start().await?;
    let c = &browser.client;
    // alice signs in at the hub, where her terminal renders
    c.goto(&format!("{hub_url}/login?next=/terminal/{}/ws/", alice.name)).await?;
    browser::log_in(c, &alice.name, PASSWORD).await?;
    c.wait().at_most(WAIT).for_element(Locator::Css(".xterm")).await.context("the terminal at the hub")?;

    // her own app's page on its origin frames the terminal: the frame holds no terminal
    c.goto(&format!("{hub_url}/w/{}/ws/web/framer.html", alice.name)).await?;
    browser::at_host(c, &site_host).await?;
    eventually("the frame's load", WAIT, Duration::from_millis(100), || async {
        let body = c.find(Locator::Css("body")).await?;
        Ok(body.attr("data-loaded").await?)
    })
    .await?;
    let frame = c.find(Locator::Id("t")).await?;
    frame.enter_frame().await?;
    let seen = c
        .execute("return location.href + ' xterm=' + !!document.querySelector('.xterm')", vec![])
        .await?
        .as_str()
        .unwrap_or_default()
        .to_owned();
    c.enter_parent_frame().await?;
    browser::screenshot(c, "framing-terminal").await;
    browser.close().await?;
    eprintln!("the frame holds: {seen}");
    ensure!(
        !seen.contains("/terminal/") && seen.ends_with("xterm=false"),
        "the terminal rendered in the frame: {seen}"
    );
    Ok(())
}
