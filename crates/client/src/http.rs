//! The HTTP side: URLs under `/api/v1`, the bearer token, and problem+json errors turned into
//! [`ClientError`]s.

use crate::ClientError;
use gpuhub_api::{NEXT_CURSOR_HEADER, PAGE_LIMIT_MAX, Problem};
use reqwest::{Method, Response, StatusCode, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::time::Duration;

/// A connection to one gpuhub server, with or without a token.
#[derive(Debug, Clone)]
pub struct Api {
    http: reqwest::Client,
    base: Url,
    server: String,
    token: Option<String>,
}

/// Checks a server URL and returns it without trailing slashes. Without a scheme (`host:8080`), the hub
/// is reached over `http://` on this machine (localhost, loopback addresses) and `https://` elsewhere.
pub fn normalize_server(server: &str) -> Result<String, ClientError> {
    let bad = |reason: &str| ClientError::BadServerUrl { url: server.to_owned(), reason: reason.to_owned() };
    let trimmed = server.trim().trim_end_matches('/');
    let with_scheme;
    let s = if trimmed.contains("://") || trimmed.is_empty() || trimmed.contains(char::is_whitespace) {
        trimmed
    } else {
        let host = trimmed.split(['/', '?', '#']).next().unwrap_or_default();
        let name = match host.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or_default(),
            None => host.rsplit_once(':').map_or(host, |(h, _)| h),
        };
        let local = name == "localhost"
            || name.ends_with(".localhost")
            || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
        with_scheme = format!("{}://{trimmed}", if local { "http" } else { "https" });
        &with_scheme
    };
    let url = Url::parse(s).map_err(|e| bad(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad("must start with http:// or https://"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(bad("must not have a query or fragment"));
    }
    Ok(s.to_owned())
}

/// The innermost cause of an error, which is the part a person can act on ("Connection refused").
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

impl Api {
    /// A client for `server`; `token` is sent as `Authorization: Bearer …` when present.
    pub fn new(server: &str, token: Option<String>) -> Result<Self, ClientError> {
        let server = normalize_server(server)?;
        let base = Url::parse(&server)
            .map_err(|e| ClientError::BadServerUrl { url: server.clone(), reason: e.to_string() })?;
        let http = reqwest::Client::builder()
            .user_agent(concat!("gpuhub/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| ClientError::Unreachable { server: server.clone(), reason: root_cause(&e) })?;
        Ok(Self { http, base, server, token })
    }

    /// The server URL, normalized.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// `SERVER/api/v1/<segments…>?<query>`, each segment percent-encoded.
    pub fn url(&self, segments: &[&str], query: &[(&str, &str)]) -> Url {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .expect("http(s) URLs have a path")
            .pop_if_empty()
            .extend(["api", "v1"])
            .extend(segments);
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        url
    }

    /// Sends a request and returns the response if its status is a success, else the error it carries.
    pub async fn send(&self, method: Method, url: Url, body: Option<&Value>) -> Result<Response, ClientError> {
        let mut req = self.http.request(method, url.clone());
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        if let Some(body) = body {
            req = req.json(body);
        }
        let resp = req.send().await.map_err(|e| self.transport_error(&url, &e))?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        Err(self.problem(&url, resp).await)
    }

    /// Sends a request and returns the JSON body of its answer, `None` when there is none (204).
    pub async fn call(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Result<Option<Value>, ClientError> {
        let url = self.url(segments, query);
        let resp = self.send(method, url.clone(), body).await?;
        if resp.status() == StatusCode::NO_CONTENT {
            return Ok(None);
        }
        let bytes = resp.bytes().await.map_err(|e| self.transport_error(&url, &e))?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| ClientError::BadResponse { url: url.to_string(), reason: format!("not JSON: {e}") })
    }

    /// `GET`, expecting a JSON body.
    pub async fn get(&self, segments: &[&str], query: &[(&str, &str)]) -> Result<Value, ClientError> {
        let url = self.url(segments, query);
        self.call(Method::GET, segments, query, None).await?.ok_or_else(|| empty_body(&url))
    }

    /// `GET` of a list that comes in pages: follows the `X-Next-Cursor` of each page (asking for the
    /// largest pages from the second on) and returns the items of all pages, in order. The first request
    /// is the plain one, so servers that do not page answer it as before.
    pub async fn get_all_pages(&self, segments: &[&str], query: &[(&str, &str)]) -> Result<Vec<Value>, ClientError> {
        let max = PAGE_LIMIT_MAX.to_string();
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut q = query.to_vec();
            if let Some(c) = &cursor {
                q.extend([("limit", max.as_str()), ("cursor", c.as_str())]);
            }
            let url = self.url(segments, &q);
            let resp = self.send(Method::GET, url.clone(), None).await?;
            let next = resp.headers().get(NEXT_CURSOR_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned);
            let bytes = resp.bytes().await.map_err(|e| self.transport_error(&url, &e))?;
            let bad = |reason: String| ClientError::BadResponse { url: url.to_string(), reason };
            match serde_json::from_slice(&bytes).map_err(|e| bad(format!("not JSON: {e}")))? {
                Value::Array(page) => items.extend(page),
                _ => return Err(bad("expected a JSON array".into())),
            }
            match next {
                Some(n) if cursor.as_deref() == Some(n.as_str()) => {
                    return Err(bad("the server gave the same cursor again".into()));
                }
                Some(n) => cursor = Some(n),
                None => return Ok(items),
            }
        }
    }

    /// A request with a JSON body (serialized from `body`), expecting a JSON answer.
    pub async fn send_json<B: Serialize>(
        &self,
        method: Method,
        segments: &[&str],
        body: &B,
    ) -> Result<Option<Value>, ClientError> {
        let body = serde_json::to_value(body).expect("request bodies serialize");
        self.call(method, segments, &[], Some(&body)).await
    }

    /// Maps a failure to send or receive to "cannot reach" (no connection) or a failed request.
    pub fn transport_error(&self, url: &Url, e: &reqwest::Error) -> ClientError {
        if e.is_connect() || (e.is_timeout() && e.status().is_none()) {
            ClientError::Unreachable { server: self.server.clone(), reason: root_cause(e) }
        } else {
            ClientError::Http { url: url.to_string(), reason: root_cause(e) }
        }
    }

    /// Reads an error response: a problem document's detail, or the start of whatever body came.
    async fn problem(&self, url: &Url, resp: Response) -> ClientError {
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        let (title, detail, errors) = match serde_json::from_str::<Problem>(&text) {
            Ok(p) => {
                let detail = if p.detail.trim().is_empty() { p.title.clone() } else { p.detail };
                (p.title, detail, p.errors)
            }
            Err(_) => {
                let reason = status.canonical_reason().unwrap_or("error").to_lowercase();
                let first = text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
                let detail = if first.is_empty() {
                    format!("{reason} from {url}")
                } else {
                    format!("{reason}: {}", crate::table::truncate(first, 200))
                };
                (status.canonical_reason().unwrap_or("").to_owned(), detail, Vec::new())
            }
        };
        if status == StatusCode::UNAUTHORIZED && self.token.is_some() {
            return ClientError::Unauthorized { detail };
        }
        ClientError::Api { status: status.as_u16(), title, detail, errors }
    }
}

fn empty_body(url: &Url) -> ClientError {
    ClientError::BadResponse { url: url.to_string(), reason: "empty body".into() }
}

/// Reads a typed value out of a JSON answer.
pub fn decode<T: DeserializeOwned>(value: &Value, what: &str) -> Result<T, ClientError> {
    T::deserialize(value).map_err(|e| ClientError::BadResponse { url: what.to_owned(), reason: e.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_urls() {
        assert_eq!(normalize_server("http://h:8080/").unwrap(), "http://h:8080");
        assert_eq!(normalize_server(" https://h/gpuhub// ").unwrap(), "https://h/gpuhub");
        // without a scheme: http on this machine, https elsewhere
        assert_eq!(normalize_server("127.0.0.1:8080").unwrap(), "http://127.0.0.1:8080");
        assert_eq!(normalize_server("localhost:8080/").unwrap(), "http://localhost:8080");
        assert_eq!(normalize_server("[::1]:8080").unwrap(), "http://[::1]:8080");
        assert_eq!(normalize_server("gpu.example.org").unwrap(), "https://gpu.example.org");
        assert_eq!(normalize_server("gpu.example.org:8443").unwrap(), "https://gpu.example.org:8443");
        for bad in ["ftp://h", "not a url", "http://h/?x=1", "h:8080?x=1", ""] {
            let e = normalize_server(bad).unwrap_err().to_string();
            assert!(e.starts_with("invalid server URL"), "{bad}: {e}");
        }
    }

    #[test]
    fn urls_are_built_and_escaped() {
        let api = Api::new("http://h:1", None).unwrap();
        assert_eq!(api.url(&["workloads"], &[]).as_str(), "http://h:1/api/v1/workloads");
        assert_eq!(
            api.url(&["workloads", "a b/c", "logs"], &[("follow", "true")]).as_str(),
            "http://h:1/api/v1/workloads/a%20b%2Fc/logs?follow=true"
        );
        let api = Api::new("https://h/prefix/", None).unwrap();
        assert_eq!(api.url(&["me"], &[]).as_str(), "https://h/prefix/api/v1/me");
    }

    #[tokio::test]
    async fn refused_connection_says_cannot_reach() {
        // bind then drop to get a port nobody listens on
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let api = Api::new(&format!("http://127.0.0.1:{port}"), None).unwrap();
        let e = api.get(&["me"], &[]).await.unwrap_err().to_string();
        assert!(e.starts_with(&format!("cannot reach http://127.0.0.1:{port}: ")), "{e}");
        assert!(e.to_lowercase().contains("refused"), "{e}");
    }
}
