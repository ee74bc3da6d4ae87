//! LXD's REST API on its Unix socket: one HTTP/1.1 connection per request (LXD answers on the socket at
//! once, and a connection per request keeps a hung request from blocking others), JSON answers in LXD's
//! envelope (`sync`, `async` with an operation, `error`), operations waited for with
//! `/1.0/operations/<id>/wait`, and the websockets of an exec.

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{BodyExt, Full, StreamBody, combinators::UnsyncBoxBody};
use hyper::body::Frame;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::net::UnixStream;

/// What can go wrong talking to LXD.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The socket cannot be reached (LXD not running, not installed, no permission).
    #[error("cannot reach lxd at {socket}: {source}")]
    Unreachable {
        socket: String,
        #[source]
        source: std::io::Error,
    },
    /// The HTTP exchange failed part-way.
    #[error("lxd request {what} failed: {message}")]
    Transport { what: String, message: String },
    /// LXD answered with an error.
    #[error("lxd: {message} ({what}, {code})")]
    Lxd { what: String, code: u16, message: String },
    /// LXD's answer was not what its API describes.
    #[error("lxd request {what}: unexpected answer: {message}")]
    Answer { what: String, message: String },
}

impl ApiError {
    /// The HTTP status LXD answered with, for an error answer.
    pub fn code(&self) -> Option<u16> {
        match self {
            ApiError::Lxd { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether LXD said that the thing does not exist.
    pub fn not_found(&self) -> bool {
        self.code() == Some(404)
    }
}

/// A request body.
pub type Body = UnsyncBoxBody<Bytes, std::io::Error>;

/// LXD's REST API at `socket`, in `project`.
#[derive(Debug, Clone)]
pub struct Api {
    socket: PathBuf,
    project: String,
}

/// An LXD operation's end, as `/wait` reports it.
#[derive(Debug, Clone)]
pub struct Operation {
    /// Its id (the last part of its URL).
    pub id: String,
    /// What the operation says it made or found (`fingerprint`, an exec's `return`, its websockets' `fds`).
    pub metadata: Value,
}

impl Api {
    /// The API at `socket`, in `project`.
    pub fn new(socket: impl Into<PathBuf>, project: impl Into<String>) -> Self {
        Api { socket: socket.into(), project: project.into() }
    }

    /// The socket's path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// `path` with the project as a query parameter.
    fn url(&self, path: &str) -> String {
        let sep = if path.contains('?') { '&' } else { '?' };
        if self.project == "default" { path.to_owned() } else { format!("{path}{sep}project={}", self.project) }
    }

    /// A connection to the socket.
    pub async fn connect(&self) -> Result<UnixStream, ApiError> {
        UnixStream::connect(&self.socket)
            .await
            .map_err(|source| ApiError::Unreachable { socket: self.socket.display().to_string(), source })
    }

    /// Sends one request and reads LXD's whole answer: its HTTP status and JSON body.
    async fn send(
        &self,
        method: http::Method,
        path: &str,
        body: Body,
        headers: &[(&str, String)],
    ) -> Result<(u16, Value), ApiError> {
        let what = format!("{method} {path}");
        let (status, bytes) = self.send_raw(method, path, body, headers).await?;
        if bytes.is_empty() {
            return Ok((status, Value::Null));
        }
        let value = serde_json::from_slice(&bytes).map_err(|e| ApiError::Answer {
            what,
            message: format!("{e}: {}", String::from_utf8_lossy(&bytes[..bytes.len().min(300)])),
        })?;
        Ok((status, value))
    }

    /// Sends one request and reads LXD's whole answer: its HTTP status and body.
    async fn send_raw(
        &self,
        method: http::Method,
        path: &str,
        body: Body,
        headers: &[(&str, String)],
    ) -> Result<(u16, Bytes), ApiError> {
        let what = format!("{method} {path}");
        let transport = |e: &dyn std::fmt::Display| ApiError::Transport { what: what.clone(), message: e.to_string() };
        let stream = self.connect().await?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| transport(&e))?;
        let driver = tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut req = http::Request::builder().method(method).uri(self.url(path)).header("host", "lxd");
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        let req = req.body(body).map_err(|e| transport(&e))?;
        let answer = async {
            let resp = sender.send_request(req).await.map_err(|e| transport(&e))?;
            let status = resp.status().as_u16();
            let bytes = resp.into_body().collect().await.map_err(|e| transport(&e))?.to_bytes();
            Ok((status, bytes))
        }
        .await;
        driver.abort();
        answer
    }

    /// `GET path` of a plain-text answer (an instance's log file); an error unless LXD answers 200.
    pub async fn get_text(&self, path: &str) -> Result<String, ApiError> {
        let (status, bytes) = self.send_raw(http::Method::GET, path, empty(), &[]).await?;
        if status != 200 {
            let message = String::from_utf8_lossy(&bytes[..bytes.len().min(300)]).into_owned();
            return Err(ApiError::Lxd { what: format!("GET {path}"), code: status, message });
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Sends a request and unwraps LXD's envelope: the `metadata` of a `sync` answer, the operation of an
    /// `async` one (as `{"operation": id}` plus its metadata), an [`ApiError::Lxd`] for an `error`.
    async fn call(
        &self,
        method: http::Method,
        path: &str,
        body: Body,
        headers: &[(&str, String)],
    ) -> Result<Value, ApiError> {
        let what = format!("{method} {path}");
        let (status, v) = self.send(method, path, body, headers).await?;
        match v.get("type").and_then(Value::as_str) {
            Some("sync") => Ok(v.get("metadata").cloned().unwrap_or(Value::Null)),
            Some("async") => {
                let op = v.get("operation").and_then(Value::as_str).unwrap_or_default();
                let id = op.rsplit('/').next().unwrap_or_default().to_owned();
                Ok(serde_json::json!({"operation": id, "metadata": v.get("metadata").cloned().unwrap_or(Value::Null)}))
            }
            Some("error") | None => {
                let code = v.get("error_code").and_then(Value::as_u64).map(|c| c as u16).unwrap_or(status);
                let message = v.get("error").and_then(Value::as_str).unwrap_or("no message").to_owned();
                Err(ApiError::Lxd { what, code, message })
            }
            Some(other) => Err(ApiError::Answer { what, message: format!("answer of type {other}") }),
        }
    }

    /// `GET path`: the answer's metadata.
    pub async fn get(&self, path: &str) -> Result<Value, ApiError> {
        self.call(http::Method::GET, path, empty(), &[]).await
    }

    /// A request with a JSON body; an operation it starts is waited for (its metadata is the answer).
    pub async fn json(&self, method: http::Method, path: &str, body: &Value) -> Result<Value, ApiError> {
        let v = self.call(method, path, json_body(body), &[("content-type", "application/json".into())]).await?;
        self.finish(v).await
    }

    /// A request with a JSON body whose operation is not waited for: `(operation id, its metadata)`.
    pub async fn start(&self, method: http::Method, path: &str, body: &Value) -> Result<Operation, ApiError> {
        let v =
            self.call(method.clone(), path, json_body(body), &[("content-type", "application/json".into())]).await?;
        let id = v
            .get("operation")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| ApiError::Answer { what: format!("{method} {path}"), message: "no operation".into() })?;
        Ok(Operation { id, metadata: v.get("metadata").cloned().unwrap_or(Value::Null) })
    }

    /// `DELETE path`, waited for.
    pub async fn delete(&self, path: &str) -> Result<Value, ApiError> {
        let v = self.call(http::Method::DELETE, path, empty(), &[]).await?;
        self.finish(v).await
    }

    /// Uploads `file` as a new image (`POST /1.0/images`), with `properties`; returns its fingerprint.
    pub async fn upload_image(&self, file: &Path, properties: &[(String, String)]) -> Result<String, ApiError> {
        let what = format!("POST /1.0/images ({})", file.display());
        let f = tokio::fs::File::open(file)
            .await
            .map_err(|e| ApiError::Transport { what: what.clone(), message: e.to_string() })?;
        let chunks = futures::stream::unfold(f, |mut f| async move {
            use tokio::io::AsyncReadExt;
            let mut buf = vec![0u8; 1 << 20];
            match f.read(&mut buf).await {
                Ok(0) => None,
                Ok(n) => {
                    buf.truncate(n);
                    Some((Ok(Frame::data(Bytes::from(buf))), f))
                }
                Err(e) => Some((Err(e), f)),
            }
        });
        let body = BodyExt::boxed_unsync(StreamBody::new(chunks.boxed()));
        let props =
            properties.iter().map(|(k, v)| format!("{}={}", encode(k), encode(v))).collect::<Vec<_>>().join("&");
        let headers = [
            ("content-type", "application/octet-stream".to_owned()),
            ("x-lxd-public", "0".to_owned()),
            ("x-lxd-properties", props),
        ];
        let v = self.call(http::Method::POST, "/1.0/images", body, &headers).await?;
        let done = self.finish(v).await?;
        done.get("fingerprint")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| ApiError::Answer { what, message: format!("no fingerprint in {done}") })
    }

    /// Waits for the operation an answer started, if it started one: its metadata, or its error.
    async fn finish(&self, v: Value) -> Result<Value, ApiError> {
        match v.get("operation").and_then(Value::as_str) {
            Some(id) => Ok(self.wait(id, None).await?.metadata),
            None => Ok(v),
        }
    }

    /// Waits for operation `id` to end (at most `timeout`); an error when it failed.
    pub async fn wait(&self, id: &str, timeout: Option<Duration>) -> Result<Operation, ApiError> {
        let t = timeout.map_or(-1, |t| t.as_secs().max(1) as i64);
        let path = format!("/1.0/operations/{id}/wait?timeout={t}");
        let op = self.get(&path).await?;
        let status = op.get("status").and_then(Value::as_str).unwrap_or_default();
        if status == "Failure" || status == "Cancelled" {
            let message = op.get("err").and_then(Value::as_str).unwrap_or(status).to_owned();
            return Err(ApiError::Lxd { what: format!("operation {id}"), code: 500, message });
        }
        Ok(Operation { id: id.to_owned(), metadata: op.get("metadata").cloned().unwrap_or(Value::Null) })
    }

    /// The websocket of operation `id` with `secret` (an exec's stdin, output or control), over the socket.
    pub async fn websocket(
        &self,
        id: &str,
        secret: &str,
    ) -> Result<tokio_tungstenite::WebSocketStream<UnixStream>, ApiError> {
        let path = self.url(&format!("/1.0/operations/{id}/websocket?secret={secret}"));
        let stream = self.connect().await?;
        let (ws, _) = tokio_tungstenite::client_async(format!("ws://lxd{path}"), stream).await.map_err(|e| {
            ApiError::Transport { what: format!("websocket of operation {id}"), message: e.to_string() }
        })?;
        Ok(ws)
    }
}

fn empty() -> Body {
    Full::new(Bytes::new()).map_err(|never| match never {}).boxed_unsync()
}

fn json_body(v: &Value) -> Body {
    Full::new(Bytes::from(v.to_string())).map_err(|never| match never {}).boxed_unsync()
}

/// Percent-encodes `s` for a query string (everything but unreserved characters).
pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_encoded_and_projects_named() {
        assert_eq!(encode("gpuhub/busybox:latest"), "gpuhub%2Fbusybox%3Alatest");
        assert_eq!(encode("a b&c=d"), "a%20b%26c%3Dd");
        let api = Api::new("/s", "default");
        assert_eq!(api.url("/1.0/instances"), "/1.0/instances");
        let api = Api::new("/s", "course");
        assert_eq!(api.url("/1.0/instances"), "/1.0/instances?project=course");
        assert_eq!(api.url("/1.0/instances?recursion=1"), "/1.0/instances?recursion=1&project=course");
    }

    #[tokio::test]
    async fn a_missing_socket_names_itself() {
        let api = Api::new("/nonexistent/lxd.socket", "default");
        let e = api.get("/1.0").await.unwrap_err();
        assert!(e.to_string().contains("/nonexistent/lxd.socket"), "{e}");
    }
}
