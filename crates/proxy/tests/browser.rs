//! Headless Chromium through the proxy: JupyterLab renders and a kernel executes `1+1` from the page
//! (browser cookies, Origin checks and WebSockets included); the terminal page runs a shell.

mod common;

use anyhow::{Result, ensure};
use axum::Router;
use axum::extract::Path;
use axum::extract::ws::WebSocketUpgrade;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use common::cdp::Browser;
use common::docker::*;
use common::*;
use gpuhub_docker::DockerRuntime;
use std::sync::Arc;
use std::time::Duration;

/// Creates a kernel from the page and runs `1+1` over a browser WebSocket; resolves to the result.
const EXECUTE_FROM_PAGE: &str = r#"(async () => {
  const base = "PREFIX";
  const id = () => Math.random().toString(16).slice(2) + Date.now().toString(16);
  const xsrf = (document.cookie.match(/_xsrf=([^;]+)/) || [])[1] || "";
  const r = await fetch(base + "api/kernels", { method: "POST",
    headers: { "Content-Type": "application/json", "X-XSRFToken": xsrf }, body: JSON.stringify({ name: "python3" }) });
  if (r.status !== 201) return "create kernel: " + r.status + " " + (await r.text());
  const kernel = await r.json();
  const session = id(), msgId = id();
  const ws = new WebSocket(`ws://${location.host}${base}api/kernels/${kernel.id}/channels?session_id=${session}`);
  return await new Promise((resolve) => {
    ws.onopen = () => ws.send(JSON.stringify({
      header: { msg_id: msgId, username: "alice", session, msg_type: "execute_request", version: "5.3",
                date: new Date().toISOString() },
      parent_header: {}, metadata: {}, channel: "shell", buffers: [],
      content: { code: "1+1", silent: false, store_history: true, user_expressions: {}, allow_stdin: false,
                 stop_on_error: true } }));
    ws.onmessage = (e) => {
      const m = JSON.parse(e.data);
      if (m.parent_header && m.parent_header.msg_id === msgId && m.header.msg_type === "execute_result")
        resolve(m.content.data["text/plain"]);
    };
    ws.onclose = (e) => resolve("websocket closed " + e.code);
    setTimeout(() => resolve("timed out"), 60000);
  });
})()"#;

#[tokio::test(flavor = "multi_thread")]
async fn jupyterlab_opens_in_headless_chromium_and_runs_a_kernel() -> Result<()> {
    let runtime = DockerRuntime::connect().await?;
    let (_c, app) = jupyterlab(&runtime).await?;
    let proxy = proxy_to(app).await?;
    // Wait for the server, then let the browser open the lab.
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while client().get(format!("http://{proxy}{PREFIX}api").parse()?).await.map(|r| r.status()).ok()
        != Some(StatusCode::OK)
    {
        ensure!(std::time::Instant::now() < deadline, "jupyter did not come up");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mut browser = Browser::open(&format!("http://{proxy}{PREFIX}lab")).await?;
    // The shell renders and the launcher lists the kernels it fetched: scripts, styles and API calls
    // all went through the proxy.
    browser
        .wait_for(
            "!!document.querySelector('.jp-LabShell .jp-LauncherCard') \
             && document.body.innerText.includes('Python 3 (ipykernel)')",
            Duration::from_secs(90),
        )
        .await?;
    assert_eq!(browser.eval("location.pathname").await?, format!("{PREFIX}lab"));
    let result = browser.eval(&EXECUTE_FROM_PAGE.replace("PREFIX", PREFIX)).await?;
    assert_eq!(result, "2");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn terminal_page_runs_a_shell_in_headless_chromium() -> Result<()> {
    build_image("build-busybox-image.sh")?;
    let runtime = Arc::new(DockerRuntime::connect().await?);
    let c = container(&runtime, "gpuhub/busybox:latest", &["sleep", "100000"]).await?;
    let (dyn_runtime, id) = (common::docker::engine(&runtime), gpuhub_driver::MemberRef::new(&c.id, 0));
    let app = Router::new()
        .route("/t/", get(|| async { gpuhub_proxy::asset("").unwrap() }))
        .route(
            "/t/{name}",
            get(|Path(name): Path<String>| async move {
                gpuhub_proxy::asset(&name).unwrap_or_else(|| StatusCode::NOT_FOUND.into_response())
            }),
        )
        .route(
            "/t/ws",
            get(move |ws: WebSocketUpgrade| {
                let (runtime, id) = (dyn_runtime.clone(), id.clone());
                async move {
                    ws.on_upgrade(move |socket| async move {
                        let exec = gpuhub_proxy::shell_exec(&format!("{UID}:{UID}"), "/tmp", 80, 24);
                        gpuhub_proxy::terminal(socket, runtime, &id, exec).await;
                    })
                }
            }),
        );
    let addr = serve(app).await?;
    let mut browser = Browser::open(&format!("http://{addr}/t/")).await?;
    browser.wait_for("typeof term !== 'undefined' && ws.readyState === 1", Duration::from_secs(30)).await?;
    // Typed into xterm.js, as a user would.
    browser.eval(r#"term.input("echo hi-$((6*7)); stty size\r", true)"#).await?;
    let screen = "(() => { const b = term.buffer.active; let s = []; \
                  for (let i = 0; i < b.length; i++) s.push(b.getLine(i).translateToString(true)); \
                  return s.join('\\n'); })()";
    browser.wait_for(&format!("{screen}.split('\\n').includes('hi-42')"), Duration::from_secs(20)).await?;
    // The page sized the terminal to the window (fit addon), and told the server.
    let size = browser.eval("term.rows + ' ' + term.cols").await?;
    browser.wait_for(&format!("{screen}.split('\\n').includes({size})"), Duration::from_secs(20)).await?;
    browser.eval(r#"term.input("exit 5\r", true)"#).await?;
    browser
        .wait_for("document.getElementById('status').textContent.includes('status 5')", Duration::from_secs(20))
        .await?;
    Ok(())
}
