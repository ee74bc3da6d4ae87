//! Apps on origins of their own (`apps_domain = "apps.localhost"`; Chromium resolves `*.localhost` to
//! loopback), end to end: the real `gpuhub` binary on the local Docker engine and headless Chromium.
//! Alice logs in at the hub, is handed off to JupyterLab on `lab--nb--<alice>.apps.localhost` and runs a
//! cell there; a page served by her own app tries to read a hub page and the API with her credentials
//! and to create a workload (all fail, while it reads its own origin); logging out at the hub closes
//! her app's origin; bob, logged in, cannot open her lab through the hub or at its origin.

mod access_support;

use access_support::browser::{self, Browser};
use access_support::{Hub, PASSWORD, WAIT, eventually};
use anyhow::{Context as _, Result, ensure};
use fantoccini::Locator;
use reqwest::Method;
use serde_json::Value;
use std::time::{Duration, Instant};

/// A page of alice's `web` app whose script probes, with the visitor's credentials, its own origin
/// and the hub (given as `?hub=`): a portal page, the API, and a blind state-changing request.
const PROBE: &str = r#"<!doctype html><title>probe</title><script>
async function probe(url, init) {
  try { const r = await fetch(url, Object.assign({credentials: 'include'}, init || {}));
        const t = await r.text(); return 'read ' + r.status + ' ' + t.slice(0, 60); }
  catch (e) { return 'blocked ' + e.name; }
}
(async () => {
  const hub = new URLSearchParams(location.search).get('hub');
  const body = JSON.stringify({name: 'pwned', kind: 'job', image: 'busybox:latest', command: ['true']});
  const out = {
    own: await probe('hello.txt'),
    page: await probe(hub + '/terminal/' + document.body.dataset.owner + '/nb/'),
    me: await probe(hub + '/api/v1/me'),
    list: await probe(hub + '/api/v1/workloads'),
    post: await probe(hub + '/api/v1/workloads', {method: 'POST', mode: 'no-cors', body: body}),
  };
  document.body.dataset.result = JSON.stringify(out);
})();
</script><body data-owner="OWNER">probing</body>"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jupyterlab_on_its_own_origin_and_an_apps_scripts_cannot_act_at_the_hub() -> Result<()> {
    let _serial = access_support::serial().await;
    let t0 = Instant::now();
    access_support::ensure_image("build-jupyter-image.sh").await?;
    let mut hub =
        Hub::start_with("gpu_mode = \"none\"\nreconcile_secs = 600\napps_domain = \"apps.localhost\"\n").await?;
    hub.add_jupyter_catalog_entry().await?;
    let alice = hub.user("alice").await?;
    let bob = hub.user("bob").await?;
    alice.start_notebook("nb").await?;
    let probe = PROBE.replace("OWNER", &alice.name);
    alice.start_web("site", &format!("cat > probe.html <<'EOF'\n{probe}\nEOF")).await?;
    // the browser's hub is `localhost`: app origins are `*.apps.localhost` on the same port
    let port = reqwest::Url::parse(&hub.url)?.port().context("port")?;
    let hub_url = format!("http://localhost:{port}");
    let lab_host = format!("lab--nb--{}.apps.localhost", alice.name);
    let site_host = format!("web--site--{}.apps.localhost", alice.name);

    let browser = Browser::start().await?;
    let c = &browser.client;
    // alice opens her lab at the hub: log in, handed off to the lab's origin, the lab renders there
    c.goto(&format!("{hub_url}/w/{}/nb/lab/", alice.name)).await?;
    let login = c.current_url().await?;
    ensure!(login.path() == "/login" && login.host_str() == Some("localhost"), "anonymous at {login}");
    browser::log_in(c, &alice.name, PASSWORD).await?;
    let at = browser::at_host(c, &lab_host).await?;
    ensure!(at.path().starts_with(&format!("/w/{}/nb/lab", alice.name)), "the lab at {at}");
    c.wait().at_most(WAIT).for_element(Locator::Css(".jp-LauncherCard")).await.context("no launcher")?;
    ensure!(c.get_named_cookie("gpuhub_session").await.is_err(), "the hub's cookie is not on the lab's origin");
    let app = c.get_named_cookie("gpuhub_app").await.context("no app session cookie on the lab's origin")?;
    ensure!(app.http_only() == Some(true) && app.domain().is_none_or(|d| !d.starts_with('.')), "app cookie {app}");
    // a notebook, and a cell run in it
    c.find(Locator::Css(".jp-LauncherCard[data-category=Notebook]")).await?.click().await?;
    let out = browser::run_cell(c, "6*7").await;
    browser::screenshot(c, "origins-lab").await;
    let out = out?;
    ensure!(out.trim() == "42", "the cell printed {out:?}");

    // a page of alice's own app, with alice's credentials in the browser, cannot read the hub or act there
    c.goto(&format!("{hub_url}/w/{}/site/web/probe.html?hub={hub_url}", alice.name)).await?;
    browser::at_host(c, &site_host).await?;
    let result = eventually("the probe's result", WAIT, Duration::from_millis(200), || async {
        let body = c.find(Locator::Css("body")).await?;
        Ok(body.attr("data-result").await?)
    })
    .await?;
    browser::screenshot(c, "origins-probe").await;
    let r: Value = serde_json::from_str(&result)?;
    eprintln!("the probe in alice's app: {r}");
    ensure!(r["own"].as_str().is_some_and(|s| s.starts_with("read 200 hello")), "its own origin: {r}");
    for probe in ["page", "me", "list"] {
        ensure!(r[probe].as_str().is_some_and(|s| s.starts_with("blocked")), "{probe} was read: {r}");
    }
    let (s, v) = alice.api(Method::GET, "/api/v1/workloads/pwned", None).await?;
    ensure!(s == reqwest::StatusCode::NOT_FOUND, "the blind POST made a workload: {s} {v}");

    // logging out at the hub closes the lab's origin too: back there, the browser is sent to log in
    c.goto(&format!("{hub_url}/login")).await?;
    c.execute("return fetch('/api/v1/logout', {method: 'POST'}).then(r => r.status)", vec![]).await?;
    c.goto(&format!("http://{lab_host}:{port}/w/{}/nb/lab/", alice.name)).await?;
    let at = browser::at_host(c, "localhost").await?;
    ensure!(at.path() == "/login", "after logging out, the lab sends the browser to {at}");

    // bob, logged in, gets 404 for alice's lab at the hub, and at the lab's origin is sent back there
    browser::log_in(c, &bob.name, PASSWORD).await?;
    eventually("bob's 404", WAIT, Duration::from_millis(200), || async {
        let at = c.current_url().await?;
        let text = c.find(Locator::Css("body")).await?.text().await?;
        Ok((at.host_str() == Some("localhost") && text.contains("404")).then_some(()))
    })
    .await
    .context("bob opening alice's lab")?;
    c.goto(&format!("http://{lab_host}:{port}/w/{}/nb/lab/", alice.name)).await?;
    let at = browser::at_host(c, "localhost").await?;
    let text = c.find(Locator::Css("body")).await?.text().await?;
    ensure!(text.contains("404"), "bob at alice's lab origin ended at {at}: {text}");
    browser.close().await?;
    eprintln!("app origins test took {:?}", t0.elapsed());
    Ok(())
}
