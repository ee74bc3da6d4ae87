//! The portal in headless Chromium, end to end: the real `gpuhub` binary on the local Docker engine
//! with one fake GPU (`mknod`), apps on their own origins (`*.apps.localhost`). Alice logs in, submits a
//! job with half a GPU from the form and watches it go queued → running → succeeded on her list without
//! a reload, reads its logs on its page and deletes it; a form asking for 99 GPUs shows the API's error
//! beside the GPUs field; she creates a workspace from the Jupyter catalog image, opens JupyterLab from
//! its page (on the lab's own origin) and runs a cell; bob, logged in, gets 404 for her workspace's
//! page and at her lab's origin; the admin adds a user and a catalog image from the admin pages. Each
//! page's screenshot is written to `target/screenshots/portal-*.png`. A workload whose image is pulled
//! from a real registry (held part-way by a relay) shows the pull's bar on its page, which the page's
//! script fetches again while it lasts, and then the workload's end, all without a reload. A form with
//! three bad fields shows each problem beside its field at once, keeping what was typed, and `gpuhub run`
//! prints each problem of a refused submission on a line of its own.

mod access_support;
use gpuhub_testkit::registry as registry_support;

use access_support::browser::{self, Browser};
use access_support::{Hub, PASSWORD, WAIT, eventually};
use anyhow::{Context as _, Result, ensure};
use fantoccini::{Client, Locator};
use gpuhub_testkit::process::fake_gpu;
use std::time::{Duration, Instant};

/// Fills the form field `name` (an input, a textarea) with `value`.
async fn fill(c: &Client, name: &str, value: &str) -> Result<()> {
    let e = c.find(Locator::Css(&format!("[name={name}]"))).await.with_context(|| format!("no field {name}"))?;
    e.clear().await?;
    e.send_keys(value).await?;
    Ok(())
}

/// Picks `value` in the select `name`.
async fn pick(c: &Client, name: &str, value: &str) -> Result<()> {
    let select = c.find(Locator::Css(&format!("select[name={name}]"))).await?;
    select.select_by_value(value).await?;
    Ok(())
}

/// The state the list shows for `name`, if it lists it.
async fn listed_state(c: &Client, name: &str) -> Result<Option<String>> {
    match c.find(Locator::Css(&format!("tr[data-name=\"{name}\"]"))).await {
        Ok(row) => Ok(row.attr("data-state").await?),
        Err(_) => Ok(None),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_works_in_the_portal_and_another_cannot_see_it() -> Result<()> {
    let _serial = access_support::serial().await;
    let t0 = Instant::now();
    access_support::ensure_image("build-jupyter-image.sh").await?;
    access_support::ensure_image("build-busybox-image.sh").await?;
    let dev = tempfile::tempdir()?;
    let config = format!(
        "gpu_mode = \"devices\"\nreconcile_secs = 600\napps_domain = \"apps.localhost\"\n{}",
        fake_gpu(dev.path(), 0)?
    );
    let mut hub = Hub::start_with(&config).await?;
    hub.add_jupyter_catalog_entry().await?;
    let alice = hub.user("alice").await?;
    let bob = hub.user("bob").await?;
    let port = reqwest::Url::parse(&hub.url)?.port().context("port")?;
    let hub_url = format!("http://localhost:{port}");
    // the GPU is taken for a few seconds, so that the half-GPU job waits in the queue first
    alice
        .ok(&["run", "--name", "blocker", "--gpus", "1", "--image", "gpuhub/busybox:latest", "--", "sleep", "15"])
        .await?;
    alice.wait_state("blocker", "running").await?;

    let b = Browser::start().await?;
    let c = &b.client;
    c.goto(&format!("{hub_url}/")).await?;
    browser::log_in(c, &alice.name, PASSWORD).await?;
    let at = browser::at_host(c, "localhost").await?;
    c.wait().at_most(WAIT).for_element(Locator::Css("table.workloads")).await.context("no list after login")?;
    ensure!(c.current_url().await?.path() == "/workloads", "after login at {at}");
    browser::screenshot(c, "portal-workloads").await;

    // a job with half a GPU, from the form
    c.find(Locator::LinkText("New workload")).await?.click().await?;
    c.wait().at_most(WAIT).for_element(Locator::Css("form.new")).await?;
    fill(c, "name", "half").await?;
    fill(c, "image_other", "gpuhub/busybox:latest").await?;
    fill(c, "command", "sh -c 'echo started; sleep 4; echo all done'").await?;
    fill(c, "cpus", "0.5").await?;
    fill(c, "memory", "64MiB").await?;
    fill(c, "gpus", "0.5").await?;
    browser::screenshot(c, "portal-new").await;
    c.find(Locator::Css("form.new button[type=submit]")).await?.click().await?;
    eventually("the job's page", WAIT, Duration::from_millis(100), || async {
        Ok((c.current_url().await?.path() == "/workloads/half").then_some(()))
    })
    .await?;
    // on the list, without a reload: queued → running → succeeded
    c.goto(&format!("{hub_url}/workloads")).await?;
    c.execute("window.gpuhubMarker = 'same page'", vec![]).await?;
    let seen: std::sync::Mutex<Vec<String>> = std::sync::Mutex::default();
    eventually("half to succeed on the list", WAIT, Duration::from_millis(100), || async {
        let Some(s) = listed_state(c, "half").await? else { return Ok(None) };
        let mut seen = seen.lock().unwrap();
        if seen.last() != Some(&s) {
            seen.push(s.clone());
        }
        Ok((s == "succeeded").then_some(()))
    })
    .await
    .with_context(|| format!("states seen: {:?}", seen.lock().unwrap()))?;
    let states = seen.into_inner().unwrap();
    let marker = c.execute("return window.gpuhubMarker || null", vec![]).await?;
    ensure!(marker == "same page", "the list was reloaded");
    let want = ["queued", "starting", "running", "succeeded"];
    ensure!(
        states.iter().all(|s| want.contains(&s.as_str())) && states.first().map(String::as_str) == Some("queued"),
        "the list showed {states:?}"
    );
    ensure!(states.iter().any(|s| s == "running"), "running was never shown: {states:?}");
    browser::screenshot(c, "portal-list-live").await;

    // its page: the GPU share it held and its logs; then delete it, confirmed
    c.find(Locator::LinkText("half")).await?.click().await?;
    let logs = eventually("the job's logs", WAIT, Duration::from_millis(200), || async {
        let text = c.find(Locator::Id("logs")).await?.text().await?;
        Ok(text.contains("all done").then_some(text))
    })
    .await?;
    ensure!(logs.contains("started"), "logs: {logs}");
    let page = c.find(Locator::Css("main")).await?.text().await?;
    ensure!(page.contains("0.5 of a GPU") && page.contains("GPU-fake-0"), "the job's page: {page}");
    browser::screenshot(c, "portal-workload").await;
    c.find(Locator::LinkText("Delete…")).await?.click().await?;
    c.wait().at_most(WAIT).for_element(Locator::Id("confirm")).await?.click().await?;
    eventually("half gone from the list", WAIT, Duration::from_millis(100), || async {
        let at = c.current_url().await?;
        Ok((at.path() == "/workloads" && listed_state(c, "half").await?.is_none()).then_some(()))
    })
    .await?;
    let (s, _) = alice.api(reqwest::Method::GET, "/api/v1/workloads/half", None).await?;
    ensure!(s == reqwest::StatusCode::NOT_FOUND, "half after deleting: {s}");

    // 99 GPUs: the API's error beside the GPUs field
    c.goto(&format!("{hub_url}/new")).await?;
    fill(c, "image_other", "gpuhub/busybox:latest").await?;
    fill(c, "gpus", "99").await?;
    c.find(Locator::Css("form.new button[type=submit]")).await?.click().await?;
    let shown = c.wait().at_most(WAIT).for_element(Locator::Id("gpus-error")).await?.text().await?;
    ensure!(shown.contains("99 GPUs"), "beside the GPUs field: {shown:?}");
    browser::screenshot(c, "portal-form-error").await;

    // a workspace from the Jupyter catalog image; JupyterLab from its page, on its own origin
    c.goto(&format!("{hub_url}/new")).await?;
    c.find(Locator::Css("input[name=kind][value=workspace]")).await?.click().await?;
    fill(c, "name", "nb").await?;
    pick(c, "image", "jupyter").await?;
    fill(c, "command", "sleep infinity").await?;
    fill(c, "memory", "2GiB").await?;
    c.find(Locator::Css("form.new button[type=submit]")).await?.click().await?;
    eventually("nb running on its page", WAIT, Duration::from_millis(200), || async {
        let state = match c.find(Locator::Css("#live .state .badge")).await {
            Ok(e) => e.text().await?,
            Err(_) => return Ok(None),
        };
        Ok((state == "running").then_some(()))
    })
    .await?;
    browser::screenshot(c, "portal-workspace").await;
    alice.wait_http_ok(&format!("{}api/status", alice.app_url("nb", "lab"))).await?;
    c.find(Locator::LinkText("lab")).await?.click().await?;
    let lab_host = format!("lab--nb--{}.apps.localhost", alice.name);
    browser::at_host(c, &lab_host).await?;
    c.wait().at_most(WAIT).for_element(Locator::Css(".jp-LauncherCard[data-category=Notebook]")).await?.click().await?;
    let out = browser::run_cell(c, "6*7").await;
    browser::screenshot(c, "portal-lab").await;
    ensure!(out?.trim() == "42", "the cell's output");

    // bob: 404 for alice's workspace at the hub and at her lab's origin
    c.goto(&format!("{hub_url}/workloads")).await?;
    c.find(Locator::Css("form.logout button")).await?.click().await?;
    browser::at_host(c, "localhost").await?;
    c.wait().at_most(WAIT).for_element(Locator::Css("input[name=username]")).await?;
    browser::log_in(c, &bob.name, PASSWORD).await?;
    c.wait().at_most(WAIT).for_element(Locator::Css("main")).await?;
    for path in ["/workloads/nb".to_owned(), format!("/workloads/nb?owner={}", alice.name)] {
        c.goto(&format!("{hub_url}{path}")).await?;
        let text = c.find(Locator::Css("body")).await?.text().await?;
        ensure!(text.contains("404"), "bob at {path}: {text}");
    }
    browser::screenshot(c, "portal-not-found").await;
    c.goto(&format!("http://{lab_host}:{port}/w/{}/nb/lab/", alice.name)).await?;
    browser::at_host(c, "localhost").await?;
    let text = c.find(Locator::Css("body")).await?.text().await?;
    ensure!(text.contains("404"), "bob at alice's lab origin: {text}");
    browser::screenshot(c, "portal-bob-at-lab").await;

    // the admin adds a user and an image from the admin pages
    c.goto(&format!("{hub_url}/workloads")).await?;
    c.find(Locator::Css("form.logout button")).await?.click().await?;
    c.wait().at_most(WAIT).for_element(Locator::Css("input[name=username]")).await?;
    browser::log_in(c, "admin", access_support::ADMIN_PASSWORD).await?;
    c.wait().at_most(WAIT).for_element(Locator::Css("main")).await?;
    c.find(Locator::LinkText("Users")).await?.click().await?;
    let carol = format!("carol-{}", access_support::suffix());
    fill(c, "username", &carol).await?;
    fill(c, "password", "carol-password-1").await?;
    c.find(Locator::Css("form.new button[type=submit]")).await?.click().await?;
    c.wait().at_most(WAIT).for_element(Locator::Css(&format!("tr[data-user=\"{carol}\"]"))).await?;
    browser::screenshot(c, "portal-admin-users").await;
    c.find(Locator::LinkText("Image catalog")).await?.click().await?;
    fill(c, "name", "plain").await?;
    fill(c, "image", "gpuhub/busybox:latest").await?;
    fill(c, "description", "busybox, for quick jobs").await?;
    c.find(Locator::Css("form.new button[type=submit]")).await?.click().await?;
    c.wait().at_most(WAIT).for_element(Locator::Css("tr[data-image=plain]")).await?;
    browser::screenshot(c, "portal-admin-images").await;
    let (s, v) = hub.admin.api(reqwest::Method::GET, &format!("/api/v1/users/{carol}"), None).await?;
    ensure!(s == reqwest::StatusCode::OK, "carol after the admin page: {s} {v}");
    b.close().await?;
    eprintln!("portal walk took {:?}", t0.elapsed());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_shows_its_progress_on_the_workloads_page() -> Result<()> {
    let _serial = access_support::serial().await;
    access_support::ensure_image("build-busybox-image.sh").await?;
    let registry = registry_support::Registry::start()?;
    let valve = registry_support::Valve::start(&registry.addr, 2 << 20)?;
    let path = registry_support::push_test_image(&registry.addr, "gpuhub/busybox:latest", &access_support::suffix())?;
    let image = format!("{}/{path}", valve.addr);
    let mut hub = Hub::start_with(&format!("image_allow = [\"{}/*\"]", valve.addr)).await?;
    let alice = hub.user("alice").await?;
    alice.ok(&["run", "--name", "pulled", "--image", &image, "--", "sh", "-c", "echo pulled-ok"]).await?;

    let b = Browser::start().await?;
    let c = &b.client;
    c.goto(&format!("{}/", hub.url)).await?;
    browser::log_in(c, &alice.name, PASSWORD).await?;
    c.wait().at_most(WAIT).for_element(Locator::Css("table.workloads")).await.context("no list after login")?;
    c.goto(&format!("{}/workloads/pulled", hub.url)).await?;
    c.execute("window.gpuhubMarker = 'same page'", vec![]).await?;
    // held at the relay: the bar with its figures, fetched again by the page's script (no state
    // changes while the pull stands, so no events)
    let probe = "const p = document.querySelector('#live progress'); \
                 const l = document.getElementById('live'); \
                 return p ? [Number(p.value), Number(p.max), Number(l.dataset.refreshed || 0), \
                             document.querySelector('#live p.pull').textContent] : null";
    let shown = eventually("the pull's bar, refreshed", WAIT, Duration::from_millis(100), || async {
        let v = c.execute(probe, vec![]).await?;
        Ok(v.as_array().filter(|a| a[2].as_u64() >= Some(2)).cloned())
    })
    .await?;
    browser::screenshot(c, "portal-pull").await;
    let stop = c.find(Locator::Css("section.actions a.button")).await?.text().await?;
    ensure!(stop == "Stop…", "a pulling workload can be stopped from its page: {stop}");
    let (value, max) = (shown[0].as_u64().unwrap_or(0), shown[1].as_u64().unwrap_or(0));
    let text = shown[3].as_str().unwrap_or_default();
    ensure!(value > 0 && value < max && max >= 24 << 20, "the bar: {shown:?}");
    ensure!(text.contains(&format!("Pulling {image}: ")) && text.contains("MiB ("), "the line: {text}");
    valve.open();
    // the pull's end and the job's reach the page; it no longer asks for the bar
    let badge = "return [document.querySelector('#live .badge').textContent, \
                 document.querySelector('#live [data-poll]') === null]";
    eventually("the job's end on the page", WAIT, Duration::from_millis(100), || async {
        let v = c.execute(badge, vec![]).await?;
        Ok((v[0] == "succeeded" && v[1] == true).then_some(()))
    })
    .await?;
    // the log, followed from before the pull's end
    eventually("the job's output on the page", WAIT, Duration::from_millis(100), || async {
        Ok(c.find(Locator::Id("logs")).await?.text().await?.contains("pulled-ok").then_some(()))
    })
    .await?;
    let history = c.find(Locator::Css("ol.history")).await?.text().await?;
    ensure!(history.contains("pulled 24.") && history.contains("layers); queued"), "the history: {history}");
    let marker = c.execute("return window.gpuhubMarker || null", vec![]).await?;
    ensure!(marker == "same page", "the page was reloaded");
    b.close().await?;
    // the pulled image (a layer of its own) goes, or each run leaves 24 MiB behind
    let _ = std::process::Command::new("docker").args(["rmi", image.as_str()]).output();
    Ok(())
}

/// The text of the element `#id`, if the page has one.
async fn text_of(c: &Client, id: &str) -> Result<Option<String>> {
    match c.find(Locator::Id(id)).await {
        Ok(e) => Ok(Some(e.text().await?)),
        Err(_) => Ok(None),
    }
}

/// The value the form field `name` holds now.
async fn value_of(c: &Client, name: &str) -> Result<String> {
    let e = c.find(Locator::Css(&format!("[name={name}]"))).await?;
    Ok(e.prop("value").await?.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_form_shows_every_problem_beside_its_field_and_the_cli_one_a_line() -> Result<()> {
    let _serial = access_support::serial().await;
    access_support::ensure_image("build-busybox-image.sh").await?;
    let mut hub = Hub::start_with("gpu_mode = \"none\"\nreconcile_secs = 600\n").await?;
    let alice = hub.user("alice").await?;
    let port = reqwest::Url::parse(&hub.url)?.port().context("port")?;
    let hub_url = format!("http://localhost:{port}");

    let b = Browser::start().await?;
    let c = &b.client;
    c.goto(&format!("{hub_url}/new")).await?;
    browser::log_in(c, &alice.name, PASSWORD).await?;
    c.wait().at_most(WAIT).for_element(Locator::Css("form.new")).await.context("no form after login")?;
    // three bad fields (too little memory, a time limit over a year, an app declared twice) among good ones
    fill(c, "name", "keep-me").await?;
    fill(c, "image_other", "gpuhub/busybox:latest").await?;
    fill(c, "command", "python train.py").await?;
    fill(c, "cpus", "2").await?;
    fill(c, "memory", "1MiB").await?;
    fill(c, "runtime_limit", "400d").await?;
    c.execute("document.getElementById('advanced').open = true", vec![]).await?;
    fill(c, "apps", "web:8000\nweb:8001").await?;
    c.find(Locator::Css("form.new button[type=submit]")).await?.click().await?;
    c.wait().at_most(WAIT).for_element(Locator::Css(".error-summary")).await.context("no problems shown")?;
    let shown = [
        ("memory", text_of(c, "memory-error").await?, "6MiB"),
        ("runtime_limit", text_of(c, "runtime_limit-error").await?, "366d"),
        ("apps", text_of(c, "apps-error").await?, "declared twice"),
    ];
    for (field, text, want) in &shown {
        ensure!(text.as_deref().is_some_and(|t| t.contains(want)), "beside {field}: {text:?}");
    }
    // each message right after its own field: the element before it holds that field
    for (field, _, _) in &shown {
        let at = c
            .execute(
                "var e = document.getElementById(arguments[0] + '-error'); var p = e && e.previousElementSibling; \
                 return p ? !!p.querySelector('[name=' + arguments[0] + ']') : false",
                vec![serde_json::json!(field)],
            )
            .await?;
        ensure!(at == true, "the message about {field} is not beside its field");
    }
    for good in ["name-error", "cpus-error", "image-error", "command-error", "gpus-error"] {
        ensure!(text_of(c, good).await?.is_none(), "a message {good} about a good field");
    }
    for (field, typed) in [
        ("name", "keep-me"),
        ("image_other", "gpuhub/busybox:latest"),
        ("command", "python train.py"),
        ("cpus", "2"),
        ("memory", "1MiB"),
        ("runtime_limit", "400d"),
    ] {
        let kept = value_of(c, field).await?;
        ensure!(kept == typed, "{field} kept {kept:?}, not {typed:?}");
    }
    browser::screenshot(c, "portal-form-every-error").await;
    b.close().await?;

    // the client binary: every problem, one a line, and a failing exit
    let out = alice
        .output(&[
            "run",
            "--name",
            "Bad Name",
            "--image",
            "gpuhub/busybox:latest",
            "--memory",
            "1MiB",
            "--time-limit",
            "400d",
            "--",
            "true",
        ])
        .await?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(!out.status.success(), "gpuhub run succeeded: {err}");
    let lines: Vec<&str> = err.lines().collect();
    ensure!(lines.first() == Some(&"error: 3 problems (HTTP 422):"), "{err}");
    ensure!(lines.len() == 4 && lines[2].contains("resources.memory") && lines[3].contains("runtime_limit"), "{err}");
    let (s, list) = alice.api(reqwest::Method::GET, "/api/v1/workloads", None).await?;
    ensure!(s == reqwest::StatusCode::OK && list.as_array().is_some_and(Vec::is_empty), "stored: {list}");
    Ok(())
}
