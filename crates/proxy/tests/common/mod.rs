//! Test plumbing: servers on 127.0.0.1:0, the proxy mounted like the hub mounts it, a plain client.

#![allow(dead_code)]

use anyhow::Result;
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use axum::routing::any;
use gpuhub_proxy::HttpClient;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::net::SocketAddr;

pub const PREFIX: &str = "/w/alice/nb/lab/";
pub const HUB_COOKIE: &str = "gpuhub_session";

/// Serves `app` on 127.0.0.1 (with the peer address available to handlers).
pub async fn serve(app: Router) -> Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await.unwrap();
    });
    Ok(addr)
}

#[derive(Clone)]
struct Upstream {
    addr: SocketAddr,
    client: HttpClient,
}

async fn handler(State(up): State<Upstream>, req: Request) -> Response {
    gpuhub_proxy::forward(req, up.addr, PREFIX, &up.client).await
}

/// A hub-like server forwarding everything under [`PREFIX`] to `upstream`; other paths are 404.
pub async fn proxy_to(upstream: SocketAddr) -> Result<SocketAddr> {
    let state = Upstream { addr: upstream, client: HttpClient::new(&[HUB_COOKIE]) };
    let app =
        Router::new().route(&format!("{PREFIX}{{*rest}}"), any(handler)).route(PREFIX, any(handler)).with_state(state);
    serve(app).await
}

pub type TestClient = Client<HttpConnector, Body>;

pub fn client() -> TestClient {
    Client::builder(TokioExecutor::new()).build(HttpConnector::new())
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub mod cdp;
pub mod docker;
