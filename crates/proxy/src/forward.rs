//! Forwarding one request to a workspace app: headers fixed up, bodies streamed both ways, WebSocket
//! (and any HTTP/1.1) upgrades spliced after both sides switched protocols.

use axum::body::Body;
use axum::extract::{ConnectInfo, OriginalUri, Request};
use axum::response::{IntoResponse, Response};
use cookie::Cookie;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{StatusCode, Uri, Version};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Headers that describe one hop and are never forwarded (RFC 9110 §7.6.1), besides those a
/// `Connection` header names.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_FORWARDED_PREFIX: HeaderName = HeaderName::from_static("x-forwarded-prefix");

/// The connection pool to workspace apps plus what must never reach them. Cheap to clone; make one
/// per server.
#[derive(Debug, Clone)]
pub struct HttpClient {
    client: Client<HttpConnector, Body>,
    hub_cookies: Arc<[String]>,
}

impl HttpClient {
    /// A client that strips the hub's own cookies (by name, e.g. `gpuhub_session`) from requests, and
    /// refuses to let apps set cookies of those names.
    pub fn new(hub_cookies: &[&str]) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(10)));
        connector.set_nodelay(true);
        connector.enforce_http(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(32)
            .build(connector);
        Self { client, hub_cookies: hub_cookies.iter().map(|s| s.to_string()).collect() }
    }
}

/// Forwards `req` to the app at `upstream` (the container's IP and port) and streams its answer back.
///
/// The path and query go unchanged, as the browser sent them (the app is told `prefix`, e.g.
/// `/w/alice/nb/lab/`, as its base URL, like Jupyter's `base_url`); when the route was nested the
/// original URI is used. `Host` stays the browser's; `X-Forwarded-For/Proto/Host/Prefix` are set; the
/// hub's cookies and `Authorization` are removed. Bodies stream both ways without buffering; an
/// `Upgrade` (WebSocket) is passed on and, once the app switched protocols, both connections are
/// spliced. An unreachable app answers 502.
pub async fn forward(req: Request, upstream: SocketAddr, prefix: &str, client: &HttpClient) -> Response {
    forward_until(req, upstream, prefix, client, std::future::pending()).await
}

/// [`forward`], with an upgraded connection (a WebSocket) cut as soon as `stop` ends (the access it
/// was opened with was revoked).
pub async fn forward_until(
    mut req: Request,
    upstream: SocketAddr,
    prefix: &str,
    client: &HttpClient,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Response {
    let original = req.extensions().get::<OriginalUri>().map_or_else(|| req.uri().clone(), |o| o.0.clone());
    let path = original.path_and_query().map_or("/", |p| p.as_str());
    let Ok(uri) = format!("http://{upstream}{path}").parse::<Uri>() else {
        return (StatusCode::BAD_REQUEST, "invalid request path").into_response();
    };
    let peer = req.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
    let upgrade = upgrade_protocol(req.headers());
    let client_upgrade = upgrade.is_some().then(|| hyper::upgrade::on(&mut req));

    let (mut parts, body) = req.into_parts();
    let host = parts
        .headers
        .get(header::HOST)
        .cloned()
        .or_else(|| original.authority().and_then(|a| HeaderValue::from_str(a.as_str()).ok()));
    strip_hop_by_hop(&mut parts.headers);
    parts.headers.remove(header::AUTHORIZATION);
    strip_cookies(&mut parts.headers, &client.hub_cookies);
    if let Some(host) = &host {
        parts.headers.insert(header::HOST, host.clone());
    }
    set_forwarded(&mut parts.headers, peer, host.as_ref(), original.scheme_str(), prefix);
    if let Some(protocol) = &upgrade {
        parts.headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        parts.headers.insert(header::UPGRADE, protocol.clone());
    }
    parts.uri = uri;
    parts.version = Version::HTTP_11;

    let mut res = match client.client.request(Request::from_parts(parts, body)).await {
        Ok(res) => res,
        Err(e) => {
            tracing::debug!(%upstream, error = %e, "workspace app unreachable");
            let text = format!("the workspace app at port {} is not reachable\n", upstream.port());
            return (StatusCode::BAD_GATEWAY, text).into_response();
        }
    };

    if res.status() == StatusCode::SWITCHING_PROTOCOLS {
        let Some(client_upgrade) = client_upgrade else {
            return (StatusCode::BAD_GATEWAY, "the app switched protocols unasked\n").into_response();
        };
        let app_upgrade = hyper::upgrade::on(&mut res);
        tokio::spawn(async move {
            match tokio::try_join!(client_upgrade, app_upgrade) {
                Ok((browser, app)) => {
                    let (mut browser, mut app) = (TokioIo::new(browser), TokioIo::new(app));
                    tokio::select! {
                        r = tokio::io::copy_bidirectional(&mut browser, &mut app) => if let Err(e) = r {
                            tracing::debug!(error = %e, "upgraded connection ended");
                        },
                        () = stop => tracing::info!("upgraded connection closed: access revoked"),
                    }
                }
                Err(e) => tracing::debug!(error = %e, "upgrade failed"),
            }
        });
        let (mut parts, _) = res.into_parts();
        strip_set_cookies(&mut parts.headers, &client.hub_cookies);
        return Response::from_parts(parts, Body::empty());
    }

    let (mut parts, body) = res.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    strip_set_cookies(&mut parts.headers, &client.hub_cookies);
    Response::from_parts(parts, Body::new(body))
}

/// The protocol asked for in `Upgrade` when `Connection` says upgrade.
fn upgrade_protocol(headers: &HeaderMap) -> Option<HeaderValue> {
    let connection_upgrade = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    if connection_upgrade { headers.get(header::UPGRADE).cloned() } else { None }
}

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .collect();
    for name in named.iter().chain(HOP_BY_HOP.iter()) {
        headers.remove(name);
    }
}

/// Removes the hub's cookies from `Cookie`, keeping the app's own (Jupyter's `_xsrf`, …) as
/// `name=value` pairs; a piece that is no cookie (no name, no `=`) is not passed on either.
pub(crate) fn strip_cookies(headers: &mut HeaderMap, hub: &[String]) {
    let kept: Vec<String> = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(Cookie::split_parse)
        .filter_map(Result::ok)
        .filter(|c| !hub.iter().any(|h| h == c.name()))
        .map(|c| format!("{}={}", c.name(), c.value()))
        .collect();
    headers.remove(header::COOKIE);
    if !kept.is_empty() {
        if let Ok(v) = HeaderValue::from_str(&kept.join("; ")) {
            headers.insert(header::COOKIE, v);
        }
    }
}

/// Drops `Set-Cookie` headers that would set one of the hub's cookies (an app must not fixate or
/// overwrite the hub's session): each is parsed as a cookie, and one whose name is a hub cookie's
/// (any case, quoted or not) goes, as does one that does not parse (no name, no `=`, not UTF-8),
/// which a browser may still keep as a nameless cookie and send back as `name=value`.
pub(crate) fn strip_set_cookies(headers: &mut HeaderMap, hub: &[String]) {
    let all: Vec<HeaderValue> = headers.get_all(header::SET_COOKIE).iter().cloned().collect();
    if all.is_empty() {
        return;
    }
    headers.remove(header::SET_COOKIE);
    for v in all {
        let Ok(parsed) = std::str::from_utf8(v.as_bytes()).map_err(drop).and_then(|s| Cookie::parse(s).map_err(drop))
        else {
            continue;
        };
        let name = parsed.name().trim().trim_matches('"').trim();
        if name.is_empty() || hub.iter().any(|h| h.eq_ignore_ascii_case(name)) {
            continue;
        }
        headers.append(header::SET_COOKIE, v);
    }
}

fn set_forwarded(
    headers: &mut HeaderMap,
    peer: Option<SocketAddr>,
    host: Option<&HeaderValue>,
    scheme: Option<&str>,
    prefix: &str,
) {
    if let Some(peer) = peer {
        let prior: Vec<String> =
            headers.get_all(&X_FORWARDED_FOR).iter().filter_map(|v| v.to_str().ok()).map(str::to_string).collect();
        let mut chain = prior.join(", ");
        if !chain.is_empty() {
            chain.push_str(", ");
        }
        chain.push_str(&peer.ip().to_string());
        if let Ok(v) = HeaderValue::from_str(&chain) {
            headers.insert(&X_FORWARDED_FOR, v);
        }
    }
    // A TLS-terminating proxy in front of the hub says the scheme; otherwise it is what we serve.
    if !headers.contains_key(&X_FORWARDED_PROTO) {
        headers.insert(
            &X_FORWARDED_PROTO,
            HeaderValue::from_static(if scheme == Some("https") { "https" } else { "http" }),
        );
    }
    if !headers.contains_key(&X_FORWARDED_HOST) {
        if let Some(host) = host {
            headers.insert(&X_FORWARDED_HOST, host.clone());
        }
    }
    let prefix = prefix.trim_end_matches('/');
    match HeaderValue::from_str(if prefix.is_empty() { "/" } else { prefix }) {
        Ok(v) => {
            headers.insert(&X_FORWARDED_PREFIX, v);
        }
        Err(_) => {
            headers.remove(&X_FORWARDED_PREFIX);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hub() -> Vec<String> {
        vec!["gpuhub_session".to_string()]
    }

    #[test]
    fn hub_cookies_are_removed_and_others_kept() {
        let mut h = HeaderMap::new();
        h.append(header::COOKIE, HeaderValue::from_static("gpuhub_session=secret; _xsrf=abc"));
        h.append(header::COOKIE, HeaderValue::from_static("theme=dark;gpuhub_session=again"));
        strip_cookies(&mut h, &hub());
        assert_eq!(h.get_all(header::COOKIE).iter().collect::<Vec<_>>(), ["_xsrf=abc; theme=dark"]);
        let mut h = HeaderMap::new();
        h.append(header::COOKIE, HeaderValue::from_static("gpuhub_session=secret"));
        strip_cookies(&mut h, &hub());
        assert!(h.get(header::COOKIE).is_none());
        // spaces around a pair, a value holding '=', and pieces that are no cookie
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            HeaderValue::from_static(" a=1 ;; junk; =x; gpuhub_session=s; t=x=y; _xsrf=\"2|a|b\""),
        );
        strip_cookies(&mut h, &hub());
        assert_eq!(h.get_all(header::COOKIE).iter().collect::<Vec<_>>(), ["a=1; t=x=y; _xsrf=\"2|a|b\""]);
    }

    #[test]
    fn apps_cannot_set_the_hub_cookie() {
        let mut h = HeaderMap::new();
        h.append(header::SET_COOKIE, HeaderValue::from_static("gpuhub_session=evil; Path=/"));
        h.append(header::SET_COOKIE, HeaderValue::from_static("_xsrf=1; Path=/w/alice/nb/lab/"));
        strip_set_cookies(&mut h, &hub());
        assert_eq!(h.get_all(header::SET_COOKIE).iter().collect::<Vec<_>>(), ["_xsrf=1; Path=/w/alice/nb/lab/"]);
    }

    #[test]
    fn hop_by_hop_headers_go() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, HeaderValue::from_static("keep-alive, x-private"));
        h.insert("x-private", HeaderValue::from_static("1"));
        h.insert(header::TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
        h.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        assert!(upgrade_protocol(&h).is_none());
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, HeaderValue::from_static("keep-alive, Upgrade"));
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        assert_eq!(upgrade_protocol(&h).unwrap(), "websocket");
    }

    #[test]
    fn forwarded_headers() {
        let mut h = HeaderMap::new();
        h.insert(&X_FORWARDED_FOR, HeaderValue::from_static("203.0.113.9"));
        let peer: SocketAddr = "192.0.2.1:5555".parse().unwrap();
        set_forwarded(&mut h, Some(peer), Some(&HeaderValue::from_static("hub.example")), None, "/w/a/b/lab/");
        assert_eq!(h[&X_FORWARDED_FOR], "203.0.113.9, 192.0.2.1");
        assert_eq!(h[&X_FORWARDED_PROTO], "http");
        assert_eq!(h[&X_FORWARDED_HOST], "hub.example");
        assert_eq!(h[&X_FORWARDED_PREFIX], "/w/a/b/lab");
    }
}
