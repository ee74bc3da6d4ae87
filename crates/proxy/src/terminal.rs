//! The browser terminal: a WebSocket bridged to a process on a pseudo-terminal in the workspace, and the
//! xterm.js page that drives it.
//!
//! Protocol: binary frames carry terminal bytes both ways (a text frame from the browser that is not a
//! control message is typed in as well); a text frame `{"resize":[cols,rows]}` resizes the terminal.
//! When the process ends the server sends `{"exit":CODE}` (or `{"error":"…"}` when it could not start)
//! and closes the socket.

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use gpuhub_driver::{Engine, ExecSpec, MemberRef};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// How long a terminal whose output has ended waits for its process's exit code.
const EXIT_WAIT: Duration = Duration::from_secs(10);

/// The terminal page. Serve it at `<base>/` and [`asset`]s next to it (`<base>/xterm.js`, …); it opens
/// its WebSocket at `<base>/ws` (relative to itself; override with `data-ws` on `<body>`).
pub const TERMINAL_HTML: &str = include_str!("../assets/terminal.html");
/// xterm.js 6.0.0 (`@xterm/xterm`, MIT; see `assets/LICENSE-xterm`).
pub const XTERM_JS: &str = include_str!("../assets/xterm.js");
/// xterm.js's stylesheet.
pub const XTERM_CSS: &str = include_str!("../assets/xterm.css");
/// xterm.js's fit addon 0.11.0 (`@xterm/addon-fit`, MIT; see `assets/LICENSE-addon-fit`).
pub const XTERM_FIT_JS: &str = include_str!("../assets/addon-fit.js");
/// The licenses of the vendored xterm.js files, to serve or ship with the binary.
pub const XTERM_LICENSES: &str =
    concat!(include_str!("../assets/LICENSE-xterm"), "\n", include_str!("../assets/LICENSE-addon-fit"));

/// The terminal page's static files by name (`""`/`index.html`, `xterm.js`, `xterm.css`,
/// `addon-fit.js`, `LICENSE`), with their content type; `None` for other names.
pub fn asset(name: &str) -> Option<Response> {
    let (body, kind) = match name {
        "" | "index.html" => (TERMINAL_HTML, "text/html; charset=utf-8"),
        "xterm.js" => (XTERM_JS, "text/javascript; charset=utf-8"),
        "addon-fit.js" => (XTERM_FIT_JS, "text/javascript; charset=utf-8"),
        "xterm.css" => (XTERM_CSS, "text/css; charset=utf-8"),
        "LICENSE" => (XTERM_LICENSES, "text/plain; charset=utf-8"),
        _ => return None,
    };
    Some(([(header::CONTENT_TYPE, kind), (header::CACHE_CONTROL, "max-age=3600")], body).into_response())
}

/// A login shell (bash when the image has it, else sh) as `user` (`uid:gid`) in `home`, on a terminal
/// of `cols`×`rows`.
pub fn shell_exec(user: &str, home: &str, cols: u16, rows: u16) -> ExecSpec {
    ExecSpec {
        command: vec![
            "/bin/sh".into(),
            "-c".into(),
            "if [ -x /bin/bash ]; then exec /bin/bash -l; fi; exec /bin/sh -l".into(),
        ],
        user: user.to_string(),
        env: BTreeMap::from([
            ("HOME".to_string(), home.to_string()),
            ("TERM".to_string(), "xterm-256color".to_string()),
            ("COLORTERM".to_string(), "truecolor".to_string()),
        ]),
        working_dir: Some(home.to_string()),
        tty: Some((cols, rows)),
    }
}

#[derive(Deserialize)]
struct Control {
    resize: Option<(u16, u16)>,
}

/// Bridges `ws` to a process started in `member` per `exec` (given a TTY of 80×24 when it has none)
/// until either side ends. The caller has already decided the user may do this.
pub async fn terminal(mut ws: WebSocket, engine: Arc<dyn Engine>, member: &MemberRef, mut exec: ExecSpec) {
    if exec.tty.is_none() {
        exec.tty = Some((80, 24));
    }
    let handle = match engine.exec(member, &exec).await {
        Ok(h) => h,
        Err(e) => {
            let text = serde_json::json!({ "error": format!("cannot start the terminal: {e}") }).to_string();
            let _ = ws.send(Message::Text(text.into())).await;
            let _ = ws.send(Message::Close(Some(close(1011, "cannot start")))).await;
            return;
        }
    };
    let gpuhub_driver::ExecHandle { mut input, mut output, process } = handle;
    let (mut sender, mut receiver) = ws.split();

    let resizer = process.clone();
    // Browser → process. Ends when the browser goes away or the process's stdin closes, and with this
    // bridge: dropped (its caller closing it, on a revocation), it is aborted too, never left typing.
    let mut upstream = AbortOnDrop(tokio::spawn(async move {
        while let Some(Ok(msg)) = receiver.next().await {
            let bytes = match msg {
                Message::Binary(b) => b,
                Message::Text(t) => match serde_json::from_str::<Control>(t.as_str()) {
                    Ok(Control { resize: Some((cols, rows)) }) => {
                        if let Err(e) = resizer.resize(cols.max(1), rows.max(1)).await {
                            tracing::debug!(error = %e, "terminal resize failed");
                        }
                        continue;
                    }
                    Ok(_) => continue,
                    Err(_) => bytes::Bytes::copy_from_slice(t.as_bytes()),
                },
                Message::Close(_) => break,
                Message::Ping(_) | Message::Pong(_) => continue,
            };
            if input.write_all(&bytes).await.and(input.flush().await).is_err() {
                break;
            }
        }
        let _ = input.shutdown().await;
    }));

    // Process → browser, until its output ends (the process exited) or the browser left.
    let ended = loop {
        tokio::select! {
            chunk = output.next() => match chunk {
                Some(Ok(bytes)) => {
                    if sender.send(Message::Binary(bytes)).await.is_err() {
                        break false;
                    }
                }
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "terminal output failed");
                    break true;
                }
                None => break true,
            },
            _ = &mut upstream.0 => break false,
        }
    };
    upstream.0.abort();
    if ended {
        drop(output);
        // the engine's signal of the process's end; one that closed its terminal but lingers on is not
        // waited for past EXIT_WAIT (the page is told no code)
        let code = tokio::time::timeout(EXIT_WAIT, process.wait()).await.ok().and_then(Result::ok);
        let text = serde_json::json!({ "exit": code }).to_string();
        let _ = sender.send(Message::Text(text.into())).await;
        let _ = sender.send(Message::Close(Some(close(1000, "process exited")))).await;
    }
}

/// A task aborted when its handle is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn close(code: u16, reason: &'static str) -> CloseFrame {
    CloseFrame { code, reason: Utf8Bytes::from_static(reason) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assets_are_served_with_types() {
        let r = asset("xterm.js").unwrap();
        assert_eq!(r.headers()[header::CONTENT_TYPE], "text/javascript; charset=utf-8");
        assert!(asset("").is_some() && asset("xterm.css").is_some() && asset("LICENSE").is_some());
        assert!(asset("../Cargo.toml").is_none());
        assert!(TERMINAL_HTML.contains("xterm.js") && TERMINAL_HTML.contains("resize"));
        assert!(XTERM_LICENSES.contains("Permission is hereby granted"));
    }

    #[test]
    fn control_messages() {
        let c: Control = serde_json::from_str(r#"{"resize":[120,40]}"#).unwrap();
        assert_eq!(c.resize, Some((120, 40)));
        assert!(serde_json::from_str::<Control>("ls -l\n").is_err());
    }
}
