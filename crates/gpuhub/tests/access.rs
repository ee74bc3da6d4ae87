//! Workspace access, end to end: the real `gpuhub` binary as server and CLI, the local Docker engine, and
//! real clients — headless Chromium (WebDriver), JupyterLab's REST and WebSocket APIs, OpenSSH's `ssh`
//! and `scp` (in `tmux` for a terminal), and WebSockets to the browser terminal. Each test starts its own
//! server on a fresh data dir with its own users (random names). Needs root and a Docker engine;
//! `scripts/build-jupyter-image.sh` builds the workspace image on first use.

mod access_support;

use access_support::browser::Browser;
use access_support::channels::{self, Auth};
use access_support::ssh::{self as sshc, Key, Tmux};
use access_support::{Hub, PASSWORD, User, WAIT, describe, eventually, free_port, http};
use anyhow::{Context as _, Result, ensure};
use fantoccini::Locator;
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, CONTENT_TYPE, LOCATION, ORIGIN};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

/// Anything that should answer at once must within this (the checks' point: no hangs).
const PROMPT: Duration = Duration::from_secs(5);

/// The sha256 of a file, in hex.
fn sha256_file(path: &Path) -> Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Writes `mib` MiB from `/dev/urandom` to `path`.
fn random_file(path: &Path, mib: u64) -> Result<()> {
    let mut src = std::fs::File::open("/dev/urandom")?.take(mib << 20);
    let mut dst = std::fs::File::create(path)?;
    std::io::copy(&mut src, &mut dst)?;
    dst.flush()?;
    Ok(())
}

/// A user's key, registered with `gpuhub ssh-key add`, which prints its fingerprint.
async fn registered_key(hub: &Hub, user: &User) -> Result<(Key, String)> {
    let dir = hub.dir.path().join("keys");
    std::fs::create_dir_all(&dir)?;
    let key = sshc::keygen(&dir, &format!("{}-{}", user.name, access_support::suffix())).await?;
    let fp = user.ok(&["ssh-key", "add", &key.public.display().to_string()]).await?.trim().to_owned();
    ensure!(fp.starts_with("SHA256:") && !fp.contains(char::is_whitespace), "ssh-key add printed {fp:?}");
    Ok((key, fp))
}

/// An anonymous visit to the lab lands on the login page; logging in there returns to the lab, which
/// renders in headless Chromium. With the browser's session cookie, a kernel created over the lab's REST
/// API through the hub runs `1+1` over its channels WebSocket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jupyterlab_opens_in_chromium_after_login_and_runs_a_kernel() -> Result<()> {
    let _serial = access_support::serial().await;
    let t0 = Instant::now();
    let mut hub = Hub::start().await?;
    hub.add_jupyter_catalog_entry().await?;
    let alice = hub.user("alice").await?;
    alice.start_notebook("nb").await?;
    let lab = alice.app_url("nb", "lab");
    let lab_path = format!("/w/{}/nb/lab/", alice.name);

    let browser = Browser::start().await?;
    let c = &browser.client;
    c.goto(&lab).await?;
    let at = c.current_url().await?;
    ensure!(at.path() == "/login", "an anonymous browser is at {at}, not the login page");
    let next = at.query_pairs().find(|(k, _)| k == "next").map(|(_, v)| v.into_owned());
    ensure!(next.as_deref() == Some(lab_path.as_str()), "login page {at}: next should be {lab_path}");
    c.find(Locator::Css("input[name=username]")).await?.send_keys(&alice.name).await?;
    c.find(Locator::Css("input[name=password]")).await?.send_keys(PASSWORD).await?;
    c.find(Locator::Css("form button")).await?.click().await?;
    // the lab's shell renders and its launcher lists the kernels it fetched: page, scripts, styles and
    // API calls all came through the hub's proxy
    c.wait().at_most(WAIT).for_element(Locator::Css(".jp-LabShell")).await.context("no JupyterLab shell")?;
    c.wait().at_most(WAIT).for_element(Locator::Css(".jp-LauncherCard")).await.context("no launcher")?;
    let at = c.current_url().await?;
    ensure!(at.path().starts_with(&lab_path), "after login the browser is at {at}");
    let title = c.title().await?;
    ensure!(title.contains("JupyterLab"), "title {title:?}");
    let cookie = c.get_named_cookie("gpuhub_session").await.context("no session cookie")?;
    ensure!(cookie.http_only() == Some(true), "the session cookie is readable by scripts: {cookie}");
    let session = format!("gpuhub_session={}", cookie.value());
    browser.close().await?;

    let (kernel, cookie) = channels::create_kernel(&lab, &session).await?;
    let result = channels::execute(&lab, &kernel, &cookie, "1+1").await?;
    ensure!(result == "2", "1+1 gave {result:?}");
    eprintln!("jupyterlab test took {:?}", t0.elapsed());
    Ok(())
}

/// Logs the admin in on `/login?next=NEXT` in the browser; returns where the browser lands.
async fn land_after_login(hub: &Hub, browser: &Browser, next: &str) -> Result<reqwest::Url> {
    let c = &browser.client;
    c.goto(&format!("{}/login?next={next}", hub.url)).await?;
    let login = c.current_url().await?;
    c.find(Locator::Css("input[name=username]")).await?.send_keys("admin").await?;
    c.find(Locator::Css("input[name=password]")).await?.send_keys(access_support::ADMIN_PASSWORD).await?;
    c.find(Locator::Css("form button")).await?.click().await?;
    // the page navigates away once the login succeeded (a refused `next` goes to `/`, then `/login`)
    eventually("navigating after the login", WAIT, Duration::from_millis(100), || async {
        Ok((c.current_url().await? != login).then_some(()))
    })
    .await?;
    Ok(c.current_url().await?)
}

/// Checks that logging in with each `next` ends on the hub's own origin.
async fn login_stays_in_the_hub(nexts: &[&str]) -> Result<()> {
    let _serial = access_support::serial().await;
    let hub = Hub::start().await?;
    let browser = Browser::start().await?;
    let origin = reqwest::Url::parse(&hub.url)?.origin();
    let mut escaped = Vec::new();
    for next in nexts {
        let at = land_after_login(&hub, &browser, next).await?;
        if at.origin() != origin {
            escaped.push(format!("next={next} → {at}"));
        }
    }
    browser.close().await?;
    ensure!(escaped.is_empty(), "after logging in the browser left the hub: {escaped:?}");
    Ok(())
}

/// The login page returns only into this hub: a `next` naming another site (`https://host`, `//host`)
/// ends on the hub's own origin, a path of the hub is followed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_page_returns_only_into_the_hub() -> Result<()> {
    login_stays_in_the_hub(&["https://evil.example/x", "//evil.example/x", "/api/v1/health"]).await
}

/// The same for a `next` that starts with one slash but that browsers read as another site: `/\host`
/// (a backslash counts as a slash) and `/<TAB>/host` (tabs are dropped).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_page_refuses_next_that_browsers_read_as_another_site() -> Result<()> {
    login_stays_in_the_hub(&["/%5Cevil.example/x", "/%09/evil.example/x"]).await
}

/// OpenSSH through the gateway, with keys registered by `gpuhub ssh-key add`: commands run as the
/// owner's UID and pass their exit status back (`gpuhub ssh` and plain `ssh`, and through the block
/// `gpuhub ssh-config` prints); an interactive PTY session in tmux runs a shell and follows a resize;
/// `ssh -L` reaches JupyterLab; scp copies 100 MiB in and out intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openssh_through_the_gateway() -> Result<()> {
    let _serial = access_support::serial().await;
    let t0 = Instant::now();
    let mut hub = Hub::start().await?;
    hub.add_jupyter_catalog_entry().await?;
    let alice = hub.user("alice").await?;
    alice.start_notebook("nb").await?;
    let (key, fp) = registered_key(&hub, &alice).await?;
    let listed = alice.ok(&["ssh-key", "list"]).await?;
    ensure!(listed.lines().any(|l| l.starts_with(&fp)), "ssh-key list: {listed}");
    let keygen = std::process::Command::new("ssh-keygen").arg("-lf").arg(&key.public).output()?;
    ensure!(String::from_utf8(keygen.stdout)?.contains(&fp), "the fingerprint differs from ssh-keygen -lf's");
    let port = hub.ssh_port;
    let uid = alice.uid.to_string();

    // gpuhub ssh runs the system ssh, to <workspace>@<host of the server URL> on the gateway's port
    let keyfile = key.private.display().to_string();
    let mut args = vec!["ssh", "nb", "-i", &keyfile];
    for o in ["StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null", "BatchMode=yes", "IdentitiesOnly=yes"] {
        args.extend(["-o", o]);
    }
    let with = |cmd: &[&'static str]| [args.as_slice(), &["--"], cmd].concat();
    let out = alice.output(&with(&["id", "-u"])).await?;
    ensure!(out.status.success() && String::from_utf8(out.stdout.clone())?.trim() == uid, "id -u: {}", describe(&out));
    let out = alice.output(&with(&["exit", "7"])).await?;
    ensure!(out.status.code() == Some(7), "gpuhub ssh -- exit 7: {}", describe(&out));
    let out = sshc::run(sshc::ssh(port, &key, "nb@127.0.0.1", &["exit 7"]), WAIT).await?;
    ensure!(out.status.code() == Some(7), "ssh exit 7: {}", describe(&out));
    ensure!(sshc::ok(port, &key, "nb@127.0.0.1", &["id", "-u"]).await?.trim() == uid, "plain ssh id -u");

    // the ssh-config block works as written
    let config = hub.dir.path().join("ssh_config");
    std::fs::write(&config, alice.ok(&["ssh-config", "--identity", &keyfile]).await?)?;
    let mut cmd = tokio::process::Command::new("ssh");
    cmd.arg("-F").arg(&config).args(["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]);
    cmd.args(["-o", "BatchMode=yes", "-o", "IdentityAgent=none", "gpuhub-nb", "id", "-u"]);
    let out = sshc::run(cmd, WAIT).await?;
    ensure!(String::from_utf8_lossy(&out.stdout).trim() == uid, "ssh gpuhub-nb: {}", describe(&out));

    // an interactive login shell on a PTY, in tmux: it runs what is typed and follows a resize
    let line = format!("ssh -tt {} -- nb@127.0.0.1", sshc::options_line(port, &key));
    let tmux = Tmux::start(&line, 100, 30).await?;
    tmux.type_line("stty size").await?;
    tmux.wait_line("30 100").await?;
    tmux.type_line("echo $((6*7))").await?;
    tmux.wait_line("42").await?;
    tmux.resize(120, 40).await?;
    tmux.type_line("stty size").await?;
    tmux.wait_line("40 120").await?;
    tmux.type_line("id -u").await?;
    tmux.wait_line(&uid).await?;
    drop(tmux);

    // ssh -L to the lab's port on the container's loopback
    let local = free_port()?;
    let forward = format!("{local}:localhost:8888");
    let extra = ["-N", "-o", "ExitOnForwardFailure=yes", "-L", &forward];
    let mut tunnel = sshc::ssh_with(port, &key, &extra, "nb@127.0.0.1", &[]).spawn()?;
    let status_url = format!("http://127.0.0.1:{local}/w/{}/nb/lab/api/status", alice.name);
    let body = eventually("the lab through ssh -L", WAIT, Duration::from_millis(200), || {
        let exited = tunnel.try_wait();
        let url = status_url.clone();
        async move {
            if let Some(status) = exited? {
                anyhow::bail!("ssh -L exited: {status}");
            }
            let resp = match http().get(&url).send().await {
                Ok(r) if r.status() == StatusCode::OK => r,
                _ => return Ok(None),
            };
            Ok(Some(resp.text().await?))
        }
    })
    .await?;
    ensure!(body.contains("started"), "api/status through the tunnel: {body}");
    tunnel.kill().await?;

    // scp, 100 MiB each way (SFTP, through the image's sftp-server)
    let dir = hub.dir.path();
    let (up, down) = (dir.join("up.bin"), dir.join("down.bin"));
    random_file(&up, 100)?;
    let want = sha256_file(&up)?;
    let t = Instant::now();
    sshc::scp(port, &key, &up.display().to_string(), "nb@127.0.0.1:big.bin").await?;
    let up_time = t.elapsed();
    let remote = sshc::ok(port, &key, "nb@127.0.0.1", &["sha256sum", "big.bin"]).await?;
    ensure!(remote.split_whitespace().next() == Some(want.as_str()), "in the container: {remote}, want {want}");
    let t = Instant::now();
    sshc::scp(port, &key, "nb@127.0.0.1:big.bin", &down.display().to_string()).await?;
    let down_time = t.elapsed();
    ensure!(sha256_file(&down)? == want, "the copy back differs");
    eprintln!("scp 100 MiB: in {up_time:?}, out {down_time:?}; ssh test took {:?}", t0.elapsed());
    Ok(())
}

/// GET an app URL as someone; the status, content type and body.
async fn proxy_get(url: &str, auth: &Auth, accept: &str) -> Result<(StatusCode, String, String)> {
    let resp = auth.apply(http().get(url).header(ACCEPT, accept)).send().await?;
    let status = resp.status();
    let location = resp.headers().get(LOCATION).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let ctype = resp.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let body = resp.text().await?;
    Ok((status, if status.is_redirection() { location } else { ctype }, body))
}

/// Who gets in where: the owner, another user, an admin and an anonymous client against the app proxy
/// (HTTP status), the SSH gateway (login works, as the owner's UID, or is refused) and the browser
/// terminal (WebSocket handshake accepted, and a shell answers, or refused); an unregistered key and a
/// removed key are refused; a cross-site terminal handshake is refused. With the default config an
/// admin enters by SSH (`admins_enter_workspaces`) but does not open apps or terminals in a browser
/// (`admins_open_apps`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authorisation_matrix() -> Result<()> {
    let _serial = access_support::serial().await;
    let t0 = Instant::now();
    let mut hub = Hub::start().await?;
    let alice = hub.user("alice").await?;
    let bob = hub.user("bob").await?;
    let admin = hub.admin.clone();
    alice.start_web("ws", "true").await?;
    let app = format!("{}hello.txt", alice.app_url("ws", "web"));
    let (owner, other, root) =
        (Auth::Bearer(alice.token.clone()), Auth::Bearer(bob.token.clone()), Auth::Bearer(admin.token.clone()));

    // the app proxy
    let html = "text/html,application/xhtml+xml";
    for (who, auth, want) in [
        ("owner", &owner, StatusCode::OK),
        ("owner's browser session", &Auth::Cookie(alice.session_cookie(PASSWORD).await?), StatusCode::OK),
        ("other user", &other, StatusCode::NOT_FOUND),
        ("admin", &root, StatusCode::NOT_FOUND),
        ("anonymous API client", &Auth::Anonymous, StatusCode::UNAUTHORIZED),
    ] {
        let (status, _, body) = proxy_get(&app, auth, "*/*").await?;
        ensure!(status == want, "proxy, {who}: {status} {body}, want {want}");
    }
    let (status, location, _) = proxy_get(&app, &Auth::Anonymous, html).await?;
    let want = format!("/login?next=/w/{}/ws/web/hello.txt", alice.name);
    ensure!(status == StatusCode::SEE_OTHER && location == want, "anonymous browser: {status} → {location:?}");

    // the SSH gateway
    let port = hub.ssh_port;
    let (alice_key, alice_fp) = registered_key(&hub, &alice).await?;
    let (bob_key, _) = registered_key(&hub, &bob).await?;
    let (admin_key, _) = registered_key(&hub, &admin).await?;
    let stranger = sshc::keygen(hub.dir.path(), "unregistered").await?;
    let full = format!("{}.ws@127.0.0.1", alice.name);
    let uid = alice.uid.to_string();
    for (who, key, dest, works) in [
        ("owner", &alice_key, "ws@127.0.0.1", true),
        ("owner, qualified", &alice_key, full.as_str(), true),
        ("admin", &admin_key, full.as_str(), true),
        ("other user", &bob_key, full.as_str(), false),
        ("unregistered key", &stranger, "ws@127.0.0.1", false),
        ("unregistered key, qualified", &stranger, full.as_str(), false),
    ] {
        let out = sshc::run(sshc::ssh(port, key, dest, &["id", "-u"]), WAIT).await?;
        let stdout = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if works {
            ensure!(out.status.success() && stdout == uid, "ssh, {who}: {}", describe(&out));
        } else {
            let stderr = String::from_utf8_lossy(&out.stderr);
            ensure!(
                out.status.code() == Some(255) && stderr.contains("Permission denied"),
                "ssh, {who}: {}",
                describe(&out)
            );
        }
    }
    // bob's own namespace has no ws: his key is his, so he is told so (not alice's, which he cannot see)
    let out = sshc::run(sshc::ssh(port, &bob_key, "ws@127.0.0.1", &["id", "-u"]), WAIT).await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        out.status.code() == Some(1) && out.stdout.is_empty() && stderr.contains("you have no workspace named ws"),
        "ssh, other user, own namespace: {}",
        describe(&out)
    );
    // an admin's `gpuhub ssh --owner` lands in the owner's workspace, as the owner
    let admin_keyfile = admin_key.private.display().to_string();
    let mut args = vec!["ssh", "ws", "--owner", &alice.name, "-i", &admin_keyfile];
    for o in ["StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null", "BatchMode=yes", "IdentitiesOnly=yes"] {
        args.extend(["-o", o]);
    }
    args.extend(["--", "id", "-u"]);
    let out = admin.output(&args).await?;
    ensure!(String::from_utf8_lossy(&out.stdout).trim() == uid, "admin gpuhub ssh --owner: {}", describe(&out));
    // a removed key no longer works
    let (second, second_fp) = registered_key(&hub, &alice).await?;
    ensure!(sshc::ok(port, &second, "ws@127.0.0.1", &["id", "-u"]).await?.trim() == uid, "second key");
    ensure!(alice.ok(&["ssh-key", "rm", &second_fp]).await?.contains(&second_fp), "ssh-key rm");
    let out = sshc::run(sshc::ssh(port, &second, "ws@127.0.0.1", &["true"]), WAIT).await?;
    ensure!(out.status.code() == Some(255), "a removed key: {}", describe(&out));
    let listed = alice.ok(&["ssh-key", "list"]).await?;
    ensure!(listed.contains(&alice_fp) && !listed.contains(&second_fp), "ssh-key list: {listed}");

    // the browser terminal
    let term = channels::terminal_url(&hub.url, &alice.name, "ws");
    let mut ws = channels::connect(&term, &owner).await.map_err(|e| anyhow::anyhow!("terminal, owner: {e:?}"))?;
    channels::terminal_roundtrip(&mut ws, "echo hi", "hi").await?;
    ws.close(None).await.ok();
    for (who, auth, want) in [
        ("other user", &other, StatusCode::NOT_FOUND),
        ("admin", &root, StatusCode::NOT_FOUND),
        ("anonymous", &Auth::Anonymous, StatusCode::UNAUTHORIZED),
    ] {
        match channels::connect(&term, auth).await {
            Err(Ok(refused)) => ensure!(refused.status == want, "terminal, {who}: {refused:?}, want {want}"),
            Ok(_) => anyhow::bail!("terminal, {who}: the handshake was accepted"),
            Err(Err(e)) => return Err(e.context(format!("terminal, {who}"))),
        }
    }
    let mut req = tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(term.as_str())?;
    req.headers_mut().insert(ORIGIN, "http://evil.example".parse()?);
    req.headers_mut().insert("authorization", format!("Bearer {}", alice.token).parse()?);
    match tokio_tungstenite::connect_async(req).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => ensure!(r.status() == 403, "cross-site: {}", r.status()),
        other => anyhow::bail!("a cross-site terminal handshake: {:?}", other.map(|_| ())),
    }
    eprintln!("authorisation matrix took {:?}", t0.elapsed());
    Ok(())
}

/// A stopped workspace answers at once and says how to start it: the proxy with 503 problem+json
/// naming `gpuhub start`, ssh with the "not running" message and a non-zero exit, the terminal's
/// handshake with 503, and the terminal page in Chromium shows that message instead of "connecting…".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_workspace_answers_clearly_and_at_once() -> Result<()> {
    let _serial = access_support::serial().await;
    let t0 = Instant::now();
    let mut hub = Hub::start().await?;
    let alice = hub.user("alice").await?;
    alice.start_web("ws", "true").await?;
    let (key, _) = registered_key(&hub, &alice).await?;
    ensure!(sshc::ok(hub.ssh_port, &key, "ws@127.0.0.1", &["true"]).await.is_ok(), "ssh while running");
    alice.ok(&["stop", "ws"]).await?;
    alice.wait_state("ws", "stopped").await?;

    let t = Instant::now();
    let (status, ctype, body) =
        proxy_get(&format!("{}hello.txt", alice.app_url("ws", "web")), &Auth::Bearer(alice.token.clone()), "*/*")
            .await?;
    ensure!(t.elapsed() < PROMPT, "the proxy took {:?}", t.elapsed());
    ensure!(status == StatusCode::SERVICE_UNAVAILABLE, "proxy: {status} {body}");
    ensure!(ctype.starts_with("application/problem+json"), "proxy content type {ctype:?}");
    let problem: serde_json::Value = serde_json::from_str(&body)?;
    let detail = problem["detail"].as_str().unwrap_or_default();
    ensure!(detail.contains("gpuhub start ws") && detail.contains("not running"), "proxy detail {detail:?}");

    let t = Instant::now();
    let out = sshc::run(sshc::ssh(hub.ssh_port, &key, "ws@127.0.0.1", &["true"]), Duration::from_secs(30)).await?;
    ensure!(t.elapsed() < PROMPT, "ssh took {:?}", t.elapsed());
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success() && stderr.contains("not running") && stderr.contains("gpuhub start ws"),
        "ssh: {}",
        describe(&out)
    );

    let t = Instant::now();
    let term = channels::terminal_url(&hub.url, &alice.name, "ws");
    match channels::connect(&term, &Auth::Bearer(alice.token.clone())).await {
        Err(Ok(r)) => {
            ensure!(r.status == StatusCode::SERVICE_UNAVAILABLE && r.body.contains("gpuhub start"), "terminal: {r:?}")
        }
        Ok(_) => anyhow::bail!("the terminal of a stopped workspace accepted the handshake"),
        Err(Err(e)) => return Err(e),
    }
    ensure!(t.elapsed() < PROMPT, "the terminal took {:?}", t.elapsed());

    // the terminal page in a browser shows the server's answer instead of "connecting…"
    let browser = Browser::start().await?;
    let c = &browser.client;
    c.goto(&format!("{}/login?next=/terminal/{}/ws/", hub.url, alice.name)).await?;
    c.find(Locator::Css("input[name=username]")).await?.send_keys(&alice.name).await?;
    c.find(Locator::Css("input[name=password]")).await?.send_keys(PASSWORD).await?;
    c.find(Locator::Css("form button")).await?.click().await?;
    let shown = eventually("the terminal page's status", WAIT, Duration::from_millis(100), || async {
        let text = match c.find(Locator::Id("status")).await {
            Ok(e) => e.text().await?,
            Err(_) => return Ok(None),
        };
        Ok(text.contains("gpuhub start ws").then_some(text))
    })
    .await;
    let at = c.current_url().await?;
    browser.close().await?;
    let shown = shown.with_context(|| format!("the terminal page at {at}"))?;
    ensure!(shown.contains("not running"), "the terminal page says {shown:?}");
    eprintln!("stopped workspace test took {:?}", t0.elapsed());
    Ok(())
}
