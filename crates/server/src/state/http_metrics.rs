//! API latency: a middleware on the whole router times every request from routing to the response's
//! head (a streamed body or an upgraded WebSocket is not waited for) into a histogram per method,
//! route template and status. The route is the matched template (`/api/v1/workloads/{name}`), never
//! the raw path, and unknown methods share one label, so the number of series stays bounded by the
//! routes the server has.

use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use gpuhub_core::histogram::{Histogram, HistogramSnapshot, LATENCY_BUCKETS};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

/// The route label of a request no route matched (answered by the fallback: 404).
pub const UNMATCHED: &str = "unmatched";

/// `(method, route, status)`.
type Key = (&'static str, String, u16);

/// Request durations by method, route and status; cheap to clone (shared).
#[derive(Debug, Clone, Default)]
pub struct HttpMetrics {
    series: Arc<Mutex<BTreeMap<Key, Arc<Histogram>>>>,
}

impl HttpMetrics {
    /// Records one request of `seconds`.
    pub fn observe(&self, method: &'static str, route: String, status: u16, seconds: f64) {
        let h = {
            let mut series = self.series.lock().unwrap_or_else(PoisonError::into_inner);
            series.entry((method, route, status)).or_insert_with(|| Arc::new(Histogram::new(LATENCY_BUCKETS))).clone()
        };
        h.observe(seconds);
    }

    /// Every series: method, route, status and its histogram, ordered by them.
    pub fn snapshot(&self) -> Vec<(&'static str, String, u16, HistogramSnapshot)> {
        let series: Vec<(Key, Arc<Histogram>)> = {
            let s = self.series.lock().unwrap_or_else(PoisonError::into_inner);
            s.iter().map(|(k, h)| (k.clone(), h.clone())).collect()
        };
        series.into_iter().map(|((m, r, s), h)| (m, r, s, h.snapshot())).collect()
    }
}

/// The method label: the standard methods by name, any other as `OTHER`.
fn method_label(m: &Method) -> &'static str {
    const KNOWN: [(Method, &str); 9] = [
        (Method::GET, "GET"),
        (Method::HEAD, "HEAD"),
        (Method::POST, "POST"),
        (Method::PUT, "PUT"),
        (Method::PATCH, "PATCH"),
        (Method::DELETE, "DELETE"),
        (Method::OPTIONS, "OPTIONS"),
        (Method::CONNECT, "CONNECT"),
        (Method::TRACE, "TRACE"),
    ];
    KNOWN.iter().find(|(k, _)| k == m).map_or("OTHER", |(_, s)| s)
}

/// The middleware (`axum::middleware::from_fn_with_state`), layered on every route and the fallback.
pub async fn track(State(metrics): State<HttpMetrics>, req: Request, next: Next) -> Response {
    let method = method_label(req.method());
    let route = req.extensions().get::<MatchedPath>().map_or_else(|| UNMATCHED.to_owned(), |p| p.as_str().to_owned());
    let began = Instant::now();
    let resp = next.run(req).await;
    metrics.observe(method, route, resp.status().as_u16(), began.elapsed().as_secs_f64());
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_outside_the_standard_ones_share_a_label() {
        assert_eq!(method_label(&Method::GET), "GET");
        assert_eq!(method_label(&Method::from_bytes(b"BREW").unwrap()), "OTHER");
    }

    #[test]
    fn observations_are_kept_per_method_route_and_status() {
        let m = HttpMetrics::default();
        m.observe("GET", "/a".into(), 200, 0.001);
        m.observe("GET", "/a".into(), 200, 2.0);
        m.observe("GET", "/a".into(), 404, 0.001);
        let s = m.snapshot();
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].0, s[0].1.as_str(), s[0].2, s[0].3.count), ("GET", "/a", 200, 2));
        assert_eq!((s[1].2, s[1].3.count), (404, 1));
    }
}
