//! WebSocket clients through the hub: a Jupyter kernel's channels (messaging protocol v5) and the
//! browser terminal's socket, with the hub's bearer token or session cookie.

use super::{WAIT, http};
use anyhow::{Context as _, Result, bail, ensure};
use futures::{SinkExt, StreamExt};
use reqwest::StatusCode;
use reqwest::header::{AUTHORIZATION, COOKIE, HeaderValue, SET_COOKIE};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, Message};

/// A WebSocket connection to the hub.
pub type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// How a request proves who sends it.
#[derive(Debug, Clone)]
pub enum Auth {
    /// `Authorization: Bearer …`.
    Bearer(String),
    /// `Cookie: …` (the hub's `gpuhub_session=…`, perhaps with an app's own cookies).
    Cookie(String),
    /// Nothing.
    Anonymous,
}

impl Auth {
    fn header(&self) -> Option<(reqwest::header::HeaderName, String)> {
        match self {
            Auth::Bearer(t) => Some((AUTHORIZATION, format!("Bearer {t}"))),
            Auth::Cookie(c) => Some((COOKIE, c.clone())),
            Auth::Anonymous => None,
        }
    }

    /// Adds the header to a reqwest request.
    pub fn apply(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match self.header() {
            Some((k, v)) => req.header(k, v),
            None => req,
        }
    }
}

/// A WebSocket handshake the server refused: its status and body.
#[derive(Debug)]
pub struct Refused {
    pub status: StatusCode,
    pub body: String,
}

/// Opens a WebSocket at `url` (`ws://…`); `Err(Ok(refused))` when the server answered the handshake
/// with an error status, `Err(Err(e))` for anything else.
pub async fn connect(url: &str, auth: &Auth) -> Result<Socket, Result<Refused>> {
    let mut req = url.into_client_request().map_err(|e| Err(e.into()))?;
    if let Some((k, v)) = auth.header() {
        req.headers_mut().insert(k, HeaderValue::from_str(&v).map_err(|e| Err(e.into()))?);
    }
    match tokio::time::timeout(Duration::from_secs(30), tokio_tungstenite::connect_async(req)).await {
        Ok(Ok((ws, _))) => Ok(ws),
        Ok(Err(tungstenite::Error::Http(resp))) => {
            let status = StatusCode::from_u16(resp.status().as_u16()).map_err(|e| Err(e.into()))?;
            let body = String::from_utf8_lossy(resp.body().as_deref().unwrap_or_default()).into_owned();
            Err(Ok(Refused { status, body }))
        }
        Ok(Err(e)) => Err(Err(e.into())),
        Err(_) => Err(Err(anyhow::anyhow!("the WebSocket handshake at {url} took longer than 30 s"))),
    }
}

/// The browser terminal's socket of `owner/workspace` on the hub at `hub` (`http://…`).
pub fn terminal_url(hub: &str, owner: &str, workspace: &str) -> String {
    format!("{}/terminal/{owner}/{workspace}/ws", hub.replacen("http://", "ws://", 1))
}

/// Types `line` + Enter into a terminal socket and reads until a screen line equal to `want` comes;
/// returns everything read.
pub async fn terminal_roundtrip(ws: &mut Socket, line: &str, want: &str) -> Result<String> {
    ws.send(Message::text(json!({"resize": [100, 30]}).to_string())).await?;
    ws.send(Message::binary(format!("{line}\r").into_bytes())).await?;
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let text = String::from_utf8_lossy(&seen).into_owned();
        if text.split(['\r', '\n']).any(|l| l.trim() == want) {
            return Ok(text);
        }
        let msg = match tokio::time::timeout(left, ws.next()).await {
            Ok(Some(m)) => m?,
            Ok(None) => bail!("the terminal closed before {want:?}; output {text:?}"),
            Err(_) => bail!("no {want:?} from the terminal within 60 s; output {text:?}"),
        };
        match msg {
            Message::Binary(b) => seen.extend_from_slice(&b),
            Message::Text(t) => seen.extend_from_slice(t.as_bytes()),
            _ => {}
        }
    }
}

/// Jupyter's `_xsrf` cookie, from a page of the lab at `lab` (`…/w/<owner>/<ws>/lab/`).
pub async fn xsrf(lab: &str, auth: &Auth) -> Result<String> {
    let resp = auth.apply(http().get(format!("{lab}lab"))).send().await?;
    ensure!(resp.status() == StatusCode::OK, "{lab}lab: {}", resp.status());
    resp.headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|c| c.strip_prefix("_xsrf=").map(|v| v.split(';').next().unwrap_or("").to_owned()))
        .context("the lab set no _xsrf cookie")
}

/// Creates a `python3` kernel through the hub with the session cookie `session` (`gpuhub_session=…`);
/// returns its id and the cookie line to reach it with (the session plus Jupyter's `_xsrf`).
pub async fn create_kernel(lab: &str, session: &str) -> Result<(String, String)> {
    let token = xsrf(lab, &Auth::Cookie(session.to_owned())).await?;
    let cookie = format!("{session}; _xsrf={token}");
    let resp = http()
        .post(format!("{lab}api/kernels"))
        .header(COOKIE, &cookie)
        .header("X-XSRFToken", &token)
        .json(&json!({"name": "python3"}))
        .send()
        .await?;
    let status = resp.status();
    let kernel: Value = resp.json().await.unwrap_or(Value::Null);
    ensure!(status == StatusCode::CREATED, "create kernel: {status} {kernel}");
    Ok((kernel["id"].as_str().context("kernel id")?.to_owned(), cookie))
}

/// Runs `code` on a kernel over its channels socket; returns the `execute_result`'s `text/plain`.
pub async fn execute(lab: &str, kernel: &str, cookie: &str, code: &str) -> Result<String> {
    let session = format!("s-{}", super::suffix());
    let url = format!("{}api/kernels/{kernel}/channels?session_id={session}", lab.replacen("http://", "ws://", 1));
    let mut ws = connect(&url, &Auth::Cookie(cookie.to_owned())).await.map_err(|e| match e {
        Ok(r) => anyhow::anyhow!("kernel channels refused: {} {}", r.status, r.body),
        Err(e) => e,
    })?;
    let msg_id = format!("m-{}", super::suffix());
    let request = json!({
        "header": {"msg_id": msg_id, "username": "test", "session": session, "msg_type": "execute_request",
                   "version": "5.3", "date": "2026-01-01T00:00:00Z"},
        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
        "content": {"code": code, "silent": false, "store_history": true, "user_expressions": {},
                    "allow_stdin": false, "stop_on_error": true}
    });
    ws.send(Message::text(request.to_string())).await?;
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let msg = tokio::time::timeout(left, ws.next()).await.context("no execute_result")?.context("closed")??;
        let Message::Text(t) = msg else { continue };
        let v: Value = serde_json::from_str(t.as_str())?;
        if v["parent_header"]["msg_id"] != msg_id.as_str() {
            continue;
        }
        match v["header"]["msg_type"].as_str() {
            Some("execute_result") => {
                let _ = ws.close(None).await;
                return v["content"]["data"]["text/plain"].as_str().map(str::to_owned).context("no text/plain");
            }
            Some("error") => bail!("kernel error: {v}"),
            _ => {}
        }
    }
}
