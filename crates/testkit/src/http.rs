//! Small in-test HTTP servers, for the tests of clients (the CLI, the Kubernetes engine's exec stream,
//! the hub's proxy in front of a workload's app): an axum router served on `127.0.0.1:0`, the requests
//! it was sent recorded in a [`Recorder`], and the problem documents a gpuhub server answers errors
//! with.

use crate::recorder::Recorder;
use anyhow::Result;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::net::SocketAddr;

/// Serves `app` on `127.0.0.1:0` until the test's runtime ends; its address (a workload's app or
/// service on loopback, say, where a test needs the port).
pub async fn listen(app: Router) -> Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(addr)
}

/// [`listen`]; the base URL (`http://127.0.0.1:PORT`).
pub async fn serve(app: Router) -> Result<String> {
    Ok(format!("http://{}", listen(app).await?))
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: Method,
    /// Path and query.
    pub uri: String,
    /// The `Authorization` header.
    pub auth: Option<String>,
    pub body: Bytes,
}

impl Seen {
    /// The body as JSON; panics when it is not (the test expected JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a json body")
    }
}

/// `app` recording every request into `seen` before it handles it (bodies up to 1 MiB).
pub fn recording(app: Router, seen: &Recorder<Seen>) -> Router {
    let seen = seen.clone();
    app.layer(axum::middleware::from_fn(move |req: Request, next: Next| {
        let seen = seen.clone();
        async move {
            let (parts, body) = req.into_parts();
            let Ok(body) = axum::body::to_bytes(body, 1 << 20).await else {
                return StatusCode::PAYLOAD_TOO_LARGE.into_response();
            };
            let auth = parts.headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).map(str::to_owned);
            seen.push(Seen { method: parts.method.clone(), uri: parts.uri.to_string(), auth, body: body.clone() });
            next.run(Request::from_parts(parts, Body::from(body))).await
        }
    }))
}

/// A problem document (`application/problem+json`) of `status` saying `detail`, as the hub answers.
pub fn problem(status: StatusCode, detail: &str) -> Response {
    let body = json!({
        "type": "about:blank",
        "title": status.canonical_reason().unwrap_or(""),
        "status": status.as_u16(),
        "detail": detail,
    });
    (status, [(header::CONTENT_TYPE, "application/problem+json")], body.to_string()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_recorded_request_reaches_its_handler_whole() {
        let seen = Recorder::default();
        let app = Router::new().fallback(|body: String| async move { problem(StatusCode::NOT_FOUND, &body) });
        let url = serve(recording(app, &seen)).await.unwrap();
        let r = reqwest::Client::new()
            .post(format!("{url}/a?b=1"))
            .bearer_auth("tok")
            .body("{\"x\":1}")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404);
        assert_eq!(r.headers()[header::CONTENT_TYPE], "application/problem+json");
        let doc: Value = r.json().await.unwrap();
        assert_eq!((doc["title"].as_str(), doc["detail"].as_str()), (Some("Not Found"), Some("{\"x\":1}")));
        let s = seen.last();
        assert_eq!((&s.method, s.uri.as_str(), s.auth.as_deref()), (&Method::POST, "/a?b=1", Some("Bearer tok")));
        assert_eq!(s.json(), json!({"x": 1}));
    }
}
