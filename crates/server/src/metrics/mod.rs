//! `GET /metrics`: Prometheus' text exposition format (0.0.4) of what the monitor measured last (GPUs
//! under dcgm-exporter's names and labels plus their holders, each running member), the store's
//! workload counts, the controller's scheduling passes and the API's latency.
//!
//! Who may scrape: both rules must pass. The client's address must lie in `monitor.metrics_allow`
//! (else 403), and when `monitor.metrics_token` is set the request must carry it as
//! `Authorization: Bearer <token>` (else 401). The client's address is the peer's, or, when the peer is
//! one of `trusted_proxies`, the one its `X-Forwarded-For` names ([`crate::auth::client_ip`]): behind a
//! reverse proxy on loopback every request would otherwise come from an allowed address. Users' API
//! tokens, admins' included, are not the metrics token: a scraper holds only the right to read metrics.

mod series;
mod sharing;
pub mod text;

pub use crate::state::http_metrics::{HttpMetrics, UNMATCHED, track};
pub use series::FAMILIES;

use crate::auth::{IpNet, client_ip};
use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use std::net::{IpAddr, SocketAddr};

/// The handler: the document, or a problem document (a 401 names the scheme in `WWW-Authenticate`).
pub async fn scrape(
    State(st): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    if let Err(e) = admit(&st, peer.ip(), &headers) {
        let unauthorized = e.status == axum::http::StatusCode::UNAUTHORIZED;
        let mut r = e.into_response();
        if unauthorized {
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"gpuhub metrics\""));
        }
        return r;
    }
    let body = series::render(&st).await;
    ([(header::CONTENT_TYPE, HeaderValue::from_static(text::CONTENT_TYPE))], body).into_response()
}

/// Applies the address (403) and token (401) rules.
fn admit(st: &AppState, peer: IpAddr, headers: &HeaderMap) -> Result<(), ApiError> {
    let cfg = &st.config.monitor;
    let trusted = st.config.trusted_proxy_nets().unwrap_or_default();
    let client = client_ip(peer, headers, &trusted);
    // the configuration was checked at load; an entry that does not parse allows nothing
    let allowed = cfg.metrics_allow.iter().filter_map(|a| a.parse::<IpNet>().ok()).any(|n| n.contains(client));
    if !allowed {
        return Err(ApiError::forbidden(format!(
            "/metrics is not served to {client}: the address is not in monitor.metrics_allow"
        )));
    }
    let Some(expected) = cfg.metrics_token.as_deref() else { return Ok(()) };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, t)| t.trim());
    match given {
        None => {
            Err(ApiError::unauthorized("/metrics needs the metrics token (monitor.metrics_token) as a bearer token"))
        }
        // digests compared, so the time taken says nothing about how much of the token was right
        Some(t) if Sha256::digest(t.as_bytes()) == Sha256::digest(expected.as_bytes()) => Ok(()),
        Some(_) => Err(ApiError::unauthorized("wrong metrics token")),
    }
}
