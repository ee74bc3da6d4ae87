//! Overload: the requests the server works on at once, each until its response's head, are capped
//! (`[limits] max_in_flight`). One more is answered at once with `503` and `Retry-After: 1`, never
//! queued, so a flood costs bounded memory and time and no client hangs waiting for an answer. A
//! streamed body (logs followed, the portal's live updates) or an upgraded WebSocket holds no place
//! once its head is sent, and a followed log takes none at all (it waits for a queued workload's start
//! before its head).

use crate::error::ApiError;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use tokio::sync::Semaphore;

/// Seconds an overloaded server asks a client to wait.
pub const RETRY_AFTER_SECS: u64 = 1;

/// The places for requests in progress; cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct InFlight {
    permits: Arc<Semaphore>,
    limit: usize,
}

impl InFlight {
    /// At most `limit` requests at once (at least one).
    pub fn new(limit: usize) -> Self {
        let limit = limit.clamp(1, Semaphore::MAX_PERMITS);
        Self { permits: Arc::new(Semaphore::new(limit)), limit }
    }

    /// Requests in progress now.
    pub fn in_progress(&self) -> usize {
        self.limit - self.permits.available_permits()
    }
}

/// Whether a request may wait long before its answer's head, by design, and so takes no place: a
/// followed log of a workload not started yet waits (signalled) for its start before it answers.
fn waits_by_design(req: &Request) -> bool {
    let uri = req.uri();
    uri.path().starts_with("/api/v1/workloads/")
        && uri.path().ends_with("/logs")
        && uri.query().is_some_and(|q| q.split('&').any(|p| p == "follow=true" || p == "follow=1"))
}

/// The middleware (`axum::middleware::from_fn_with_state`), layered on every route and the fallback.
pub async fn limit(State(places): State<InFlight>, req: Request, next: Next) -> Response {
    if waits_by_design(&req) {
        return next.run(req).await;
    }
    let Ok(place) = places.permits.clone().try_acquire_owned() else {
        let mut e = ApiError::unavailable(format!(
            "the server is busy: {} requests in progress (limits.max_in_flight); retry in {RETRY_AFTER_SECS} second",
            places.limit
        ));
        e.retry_after = Some(RETRY_AFTER_SECS);
        return e.into_response();
    };
    let resp = next.run(req).await;
    drop(place);
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{StatusCode, header};
    use tokio::sync::{Notify, watch};

    /// A router whose `/slow` answers once `release` turns true, behind a limit of `n`.
    fn app(n: usize, release: watch::Receiver<bool>, entered: Arc<Notify>) -> (axum::Router, InFlight) {
        let places = InFlight::new(n);
        let router = axum::Router::new()
            .route(
                "/slow",
                axum::routing::get(move || {
                    let (mut release, entered) = (release.clone(), entered.clone());
                    async move {
                        entered.notify_one();
                        let _ = release.wait_for(|go| *go).await;
                        "done"
                    }
                }),
            )
            .route("/fast", axum::routing::get(|| async { "fast" }))
            .route("/api/v1/workloads/{name}/logs", axum::routing::get(|| async { "log" }))
            .layer(axum::middleware::from_fn_with_state(places.clone(), limit));
        (router, places)
    }

    /// Serves `router` on 127.0.0.1:0; its base URL.
    async fn serve(router: axum::Router) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn one_request_beyond_the_limit_is_refused_at_once_and_the_place_comes_back() {
        let (release, go) = watch::channel(false);
        let entered = Arc::new(Notify::new());
        let (router, places) = app(2, go, entered.clone());
        let base = serve(router).await;
        let http = reqwest::Client::new();
        let mut held = Vec::new();
        for _ in 0..2 {
            let req = http.get(format!("{base}/slow")).send();
            held.push(tokio::spawn(async move { req.await.unwrap() }));
            entered.notified().await;
        }
        assert_eq!(places.in_progress(), 2);
        // the third is answered without waiting for the two
        let resp = http.get(format!("{base}/fast")).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "1");
        assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/problem+json");
        let text = resp.text().await.unwrap();
        assert!(text.contains("limits.max_in_flight"), "{text}");
        // a followed log may wait for its workload's start before it answers: it takes no place
        let resp = http.get(format!("{base}/api/v1/workloads/w/logs?tail=5&follow=true")).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let resp = http.get(format!("{base}/api/v1/workloads/w/logs?tail=5")).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        // the two finish, and their places are free again
        release.send(true).unwrap();
        for h in held {
            assert_eq!(h.await.unwrap().status(), StatusCode::OK);
        }
        assert_eq!(places.in_progress(), 0);
        let resp = http.get(format!("{base}/fast")).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
    }

    #[test]
    fn a_zero_limit_is_one() {
        assert_eq!(InFlight::new(0).limit, 1);
    }
}
