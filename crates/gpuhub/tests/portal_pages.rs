//! The portal's launch cards, Images page, terminal page and admin dashboard in headless Chromium, on
//! the real `gpuhub` binary and the local Docker engine with one fake GPU (`mknod`), apps on their own
//! origins (`*.apps.localhost`). Alice goes from the login page to a running JupyterLab with one click
//! on the catalog's card (timed, printed); her Images page lists the catalog; her terminal page leads
//! back to the workspace's page; the dashboard is the admin's only. The admin's dashboard shows, per
//! hour, the GPU-hours `gpuhub usage` gives for that hour and the starts and waits the workloads'
//! histories (`GET /api/v1/workloads/{name}`) give; its top users equal `gpuhub usage` for the week.
//! Every portal page is under 300 KB with what it loads and, at 390 px (a phone), never wider than the screen.
//! Each page is saved at 1280×800 and 390×844 as `target/screenshots/pages-<page>-<width>.png`.

mod access_support;

use access_support::browser::{self, Browser};
use access_support::{Hub, PASSWORD, User, WAIT, eventually};
use anyhow::{Context as _, Result, ensure};
use chrono::{DateTime, Utc};
use fantoccini::{Client, Locator};
use gpuhub_testkit::process::fake_gpu;
use serde_json::Value;
use std::time::{Duration, Instant};

/// A portal page with everything it loads must be smaller than this.
const PAGE_BYTES: f64 = 300_000.0;

/// Checks the page's weight (its HTML and every file it loaded) and that at a phone's width it is no
/// wider than the screen; saves it at a desktop's and a phone's size.
async fn check_and_shoot(c: &Client, name: &str) -> Result<()> {
    let bytes = c
        .execute(
            "return document.documentElement.outerHTML.length + performance.getEntriesByType('resource')\
             .reduce(function (n, e) { return n + (e.decodedBodySize || 0); }, 0)",
            vec![],
        )
        .await?
        .as_f64()
        .context("page size")?;
    ensure!(bytes < PAGE_BYTES, "{name}: {bytes} bytes with what it loads");
    for (w, h) in [(1280, 800), (390, 844)] {
        c.set_window_size(w, h).await?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let wide = c
            .execute("return [document.documentElement.scrollWidth, document.documentElement.clientWidth]", vec![])
            .await?;
        let (scroll, client) = (wide[0].as_f64().unwrap_or(0.0), wide[1].as_f64().unwrap_or(0.0));
        browser::screenshot(c, &format!("pages-{name}-{w}")).await;
        if scroll > client + 1.0 {
            let over = c
                .execute(
                    "var w = document.documentElement.clientWidth; return Array.from(document.querySelectorAll('body *'))\
                     .filter(function (e) { return e.getBoundingClientRect().right > w + 1; }).slice(0, 8)\
                     .map(function (e) { return e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right); })",
                    vec![],
                )
                .await?;
            anyhow::bail!("{name} at {w} px scrolls sideways: {scroll} px wide in {client}; beyond the edge: {over}");
        }
    }
    c.set_window_size(1280, 800).await?;
    Ok(())
}

/// Logs `name` in through the login page, landing on `path`.
async fn sign_in(c: &Client, hub_url: &str, name: &str, path: &str) -> Result<()> {
    c.goto(&format!("{hub_url}{path}")).await?;
    c.wait().at_most(WAIT).for_element(Locator::Css("input[name=username]")).await?;
    browser::log_in(c, name, PASSWORD).await?;
    c.wait().at_most(WAIT).for_element(Locator::Css("main h1")).await?;
    Ok(())
}

/// Logs out from a portal page.
async fn sign_out(c: &Client, hub_url: &str) -> Result<()> {
    c.goto(&format!("{hub_url}/workloads")).await?;
    c.find(Locator::Css("form.logout button")).await?.click().await?;
    c.wait().at_most(WAIT).for_element(Locator::Css("input[name=username]")).await?;
    Ok(())
}

/// A time the API or the page wrote.
fn time(s: &str) -> Result<DateTime<Utc>> {
    Ok(DateTime::parse_from_rfc3339(s).with_context(|| format!("a time: {s:?}"))?.with_timezone(&Utc))
}

/// The starts of `names` by their histories: (when, seconds waited since it was queued).
async fn starts(owner: &User, names: &[&str]) -> Result<Vec<(DateTime<Utc>, f64)>> {
    let mut out = Vec::new();
    for name in names {
        let w = owner.workload(name).await?;
        let mut since: Option<DateTime<Utc>> = None;
        for e in w["history"].as_array().context("history")? {
            let at = time(e["at"].as_str().unwrap_or_default())?;
            match e["state"].as_str().unwrap_or_default() {
                "queued" | "pulling" => {
                    since.get_or_insert(at);
                }
                state => {
                    if let Some(s) = since.take() {
                        if state == "starting" || state == "running" {
                            out.push((at, (at - s).num_milliseconds() as f64 / 1000.0));
                        }
                    }
                }
            }
        }
    }
    Ok(out)
}

/// `gpuhub usage --json` over `from`–`to`: GPU-hours held, all rows together.
async fn usage_gpu_hours(admin: &User, from: &str, to: &str, user: Option<&str>) -> Result<f64> {
    let cli: Value = serde_json::from_str(&admin.ok(&["usage", "--from", from, "--to", to, "--json"]).await?)?;
    Ok(cli["rows"]
        .as_array()
        .context("rows")?
        .iter()
        .filter(|r| user.is_none_or(|u| r["user"] == u))
        .filter_map(|r| r["gpu_hours"].as_f64())
        .sum())
}

/// A number in a data attribute.
async fn data(e: &fantoccini::elements::Element, attr: &str) -> Result<Option<f64>> {
    Ok(e.attr(attr).await?.map(|v| v.parse()).transpose()?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cards_images_terminal_and_the_dashboard_in_a_browser() -> Result<()> {
    let _serial = access_support::serial().await;
    access_support::ensure_image("build-jupyter-image.sh").await?;
    access_support::ensure_image("build-busybox-image.sh").await?;
    let dev = tempfile::tempdir()?;
    let config = format!(
        "gpu_mode = \"devices\"\nreconcile_secs = 600\napps_domain = \"apps.localhost\"\n{}\n[monitor]\ninterval_secs = 1\n",
        fake_gpu(dev.path(), 0)?
    );
    let mut hub = Hub::start_with(&config).await?;
    hub.add_jupyter_catalog_entry().await?;
    hub.admin.ok(&["images", "add", "terminal", "gpuhub/busybox:latest", "--description", "Terminal"]).await?;
    let alice = hub.user("alice").await?;
    let root = hub.user_with_role("root", true).await?;
    let port = reqwest::Url::parse(&hub.url)?.port().context("port")?;
    let hub_url = format!("http://localhost:{port}");
    // the GPU is held for a few seconds, and a second job waits for it in the queue
    let busy = ["--gpus", "1", "--image", "gpuhub/busybox:latest", "--"];
    alice.ok(&[&["run", "--name", "blocker"][..], &busy, &["sleep", "5"]].concat()).await?;
    alice.wait_state("blocker", "running").await?;
    alice.ok(&[&["run", "--name", "waiter"][..], &busy, &["sleep", "1"]].concat()).await?;
    alice.wait_state("waiter", "succeeded").await?;

    // from the login page to a running JupyterLab: one click on the card
    let b = Browser::start().await?;
    let c = &b.client;
    let t0 = Instant::now();
    sign_in(c, &hub_url, &alice.name, "/new").await?;
    let card = c.find(Locator::Css("li.card[data-image=jupyter] button[data-launch]")).await?;
    card.click().await?;
    let ws = eventually("the workspace's page", WAIT, Duration::from_millis(100), || async {
        let path = c.current_url().await?.path().to_owned();
        Ok(path.strip_prefix("/workloads/").map(str::to_owned))
    })
    .await?;
    alice.wait_state(&ws, "running").await?;
    alice.wait_http_ok(&format!("{}api/status", alice.app_url(&ws, "lab"))).await?;
    c.wait().at_most(WAIT).for_element(Locator::LinkText("lab")).await?.click().await?;
    browser::at_host(c, &format!("lab--{ws}--{}.apps.localhost", alice.name)).await?;
    c.wait().at_most(WAIT).for_element(Locator::Css(".jp-LauncherCard")).await?;
    let took = t0.elapsed();
    println!("login to a running JupyterLab with one click on its card: {took:.1?}");
    browser::screenshot(c, "pages-card-lab").await;
    // and on to a notebook's first cell, run (the newcomer's measure: login to the first cell's output)
    c.find(Locator::Css(".jp-LauncherCard[data-category=Notebook]")).await?.click().await?;
    let out = browser::run_cell(c, "6*7").await;
    browser::screenshot(c, "pages-card-cell").await;
    ensure!(out?.trim() == "42", "the first cell's output");
    println!("login to a notebook's first cell run, through the card: {:.1?}", t0.elapsed());

    // alice's pages: the cards, her images, the terminal's way back; no dashboard for her
    c.goto(&format!("{hub_url}/new")).await?;
    ensure!(c.find(Locator::Css("li.card[data-image=terminal]")).await.is_ok(), "the terminal card");
    check_and_shoot(c, "new").await?;
    c.goto(&format!("{hub_url}/images")).await?;
    let entry = c.find(Locator::Css("li.image-entry[data-image=jupyter]")).await?.text().await?;
    ensure!(entry.contains("lab") && entry.contains("gpuhub/jupyter"), "the catalog's jupyter: {entry}");
    check_and_shoot(c, "images").await?;
    c.goto(&format!("{hub_url}/workloads/{ws}")).await?;
    check_and_shoot(c, "workspace").await?;
    c.goto(&format!("{hub_url}/terminal/{}/{ws}/", alice.name)).await?;
    let back = c.wait().at_most(WAIT).for_element(Locator::Id("back")).await?;
    ensure!(back.attr("href").await?.is_some_and(|h| h.contains(&format!("/workloads/{ws}"))), "the way back");
    browser::screenshot(c, "pages-terminal-1280").await;
    back.click().await?;
    eventually("back on the workspace's page", WAIT, Duration::from_millis(100), || async {
        Ok((c.current_url().await?.path() == format!("/workloads/{ws}")).then_some(()))
    })
    .await?;
    c.goto(&format!("{hub_url}/admin/dashboard")).await?;
    let text = c.find(Locator::Css("main")).await?.text().await?;
    ensure!(text.contains("only admins"), "alice at the dashboard: {text}");
    ensure!(c.find(Locator::LinkText("Dashboard")).await.is_err(), "no dashboard link for alice");
    sign_out(c, &hub_url).await?;

    // the admin's dashboard: each hour's GPU-hours are gpuhub usage's, its starts and waits the histories'
    sign_in(c, &hub_url, &root.name, "/admin/dashboard?range=day").await?;
    let started = starts(&alice, &["blocker", "waiter", &ws]).await?;
    let waited = started.iter().map(|s| s.1).fold(0.0, f64::max);
    ensure!(waited > 1.0, "the waiter waited: {started:?}");
    let rows = c.find_all(Locator::Css("table.dashboard-buckets tbody tr")).await?;
    ensure!(rows.len() == 24, "24 hours, not {}", rows.len());
    let (mut held_total, mut starts_total) = (0.0, 0);
    for row in &rows {
        let from = row.attr("data-from").await?.context("data-from")?;
        let to = row.attr("data-to").await?.context("data-to")?;
        let cell = row.find(Locator::Css("td[data-gpu-hours]")).await?;
        let shown = data(&cell, "data-gpu-hours").await?.context("gpu hours")?;
        let want = usage_gpu_hours(&root, &from, &to, None).await?;
        ensure!((shown - want).abs() < 1e-6, "{from}: the dashboard shows {shown} GPU-hours, gpuhub usage {want}");
        held_total += shown;
        let (f, t) = (time(&from)?, time(&to)?);
        let here: Vec<f64> = started.iter().filter(|(at, _)| *at >= f && *at < t).map(|s| s.1).collect();
        let count = data(&row.find(Locator::Css("td[data-starts]")).await?, "data-starts").await?.unwrap_or(0.0);
        ensure!(count as usize == here.len(), "{from}: {count} starts shown, the histories say {here:?}");
        starts_total += here.len();
        let longest = data(&row.find(Locator::Css("td.max-wait")).await?, "data-max-wait").await?;
        let want = here.iter().copied().reduce(f64::max);
        ensure!(
            longest.zip(want).is_none_or(|(a, b)| (a - b).abs() < 1e-3) && longest.is_some() == want.is_some(),
            "{from}: the longest wait shown {longest:?}, the histories say {want:?}"
        );
    }
    ensure!(held_total > 0.0 && starts_total == 3, "held {held_total} GPU-hours, {starts_total} starts");
    ensure!(c.find(Locator::Css("#dashboard-charts figure.chart svg")).await.is_ok(), "the charts");
    let cell = format!("table.top-users tr[data-user=\"{}\"] td[data-gpu-hours]", alice.name);
    let top = data(&c.find(Locator::Css(&cell)).await?, "data-gpu-hours").await?.context("alice's GPU-hours")?;
    let now = Utc::now();
    let week = usage_gpu_hours(
        &root,
        &(now - chrono::TimeDelta::days(7)).to_rfc3339(),
        &now.to_rfc3339(),
        Some(alice.name.as_str()),
    )
    .await?;
    ensure!((top - week).abs() < 1e-6, "alice's week: {top} on the dashboard, {week} by gpuhub usage");
    check_and_shoot(c, "dashboard").await?;
    c.goto(&format!("{hub_url}/admin/dashboard?range=week")).await?;
    check_and_shoot(c, "dashboard-week").await?;
    c.goto(&format!("{hub_url}/images")).await?;
    check_and_shoot(c, "images-admin").await?;
    c.goto(&format!("{hub_url}/new")).await?;
    check_and_shoot(c, "new-admin").await?;
    // and the portal's other pages: each under 300 KB, none wider than a phone
    for page in ["/workloads", "/usage", "/nodes", "/queues", "/account", "/admin/users", "/admin/images"] {
        c.goto(&format!("{hub_url}{page}")).await?;
        c.wait().at_most(WAIT).for_element(Locator::Css("main h1")).await?;
        check_and_shoot(c, &format!("admin{}", page.replace('/', "-"))).await?;
    }
    ensure!(took < WAIT, "login to JupyterLab took {took:?}");
    b.close().await?;
    hub.quiet();
    Ok(())
}
