//! Latency of a small response and throughput of a 100 MiB download, directly from a local upstream and
//! through `gpuhub_proxy::forward`. Run: `cargo run --release -p gpuhub-proxy --example proxy_bench`.

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use axum::routing::{any, get};
use bytes::Bytes;
use gpuhub_proxy::HttpClient;
use http_body_util::BodyExt;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const PREFIX: &str = "/w/alice/nb/app/";
const MIB: usize = 1 << 20;

async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

async fn forward(State((up, client)): State<(SocketAddr, HttpClient)>, req: Request) -> Response {
    gpuhub_proxy::forward(req, up, PREFIX, &client).await
}

type C = Client<HttpConnector, Body>;

async fn fetch(client: &C, url: &str) -> usize {
    let res = client.get(url.parse().unwrap()).await.unwrap();
    let mut body = res.into_body();
    let mut n = 0;
    while let Some(frame) = body.frame().await {
        n += frame.unwrap().data_ref().map_or(0, Bytes::len);
    }
    n
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn small(client: &C, base: &str, n: usize) -> (Duration, Duration, Duration, f64) {
    let url = format!("{base}small");
    for _ in 0..100 {
        fetch(client, &url).await;
    }
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        fetch(client, &url).await;
        times.push(t.elapsed());
    }
    times.sort();
    // Throughput with 16 concurrent clients.
    let started = Instant::now();
    let per = 500;
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move {
                for _ in 0..per {
                    fetch(&client, &url).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let rps = (16 * per) as f64 / started.elapsed().as_secs_f64();
    let mean = times.iter().sum::<Duration>() / n as u32;
    (mean, percentile(&times, 0.5), percentile(&times, 0.99), rps)
}

async fn big(client: &C, base: &str) -> f64 {
    let url = format!("{base}big");
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        assert_eq!(fetch(client, &url).await, 100 * MIB);
        best = best.min(t.elapsed().as_secs_f64());
    }
    100.0 / best
}

#[tokio::main]
async fn main() {
    let chunk = Bytes::from(vec![b'x'; MIB]);
    let upstream = Router::new().route(&format!("{PREFIX}small"), get(|| async { "ok" })).route(
        &format!("{PREFIX}big"),
        get(move || {
            let chunk = chunk.clone();
            async move {
                Body::from_stream(futures::stream::iter((0..100).map(move |_| Ok::<_, std::io::Error>(chunk.clone()))))
            }
        }),
    );
    let up = serve(upstream).await;
    let proxy = Router::new()
        .route(&format!("{PREFIX}{{*rest}}"), any(forward))
        .with_state((up, HttpClient::new(&["gpuhub_session"])));
    let proxied = serve(proxy).await;
    let client: C = Client::builder(TokioExecutor::new()).build(HttpConnector::new());

    println!(
        "{:<10} {:>10} {:>10} {:>10} {:>12} {:>16}",
        "path", "mean", "p50", "p99", "req/s (x16)", "100 MiB (MiB/s)"
    );
    for (name, addr) in [("direct", up), ("proxied", proxied)] {
        let base = format!("http://{addr}{PREFIX}");
        let (mean, p50, p99, rps) = small(&client, &base, 2000).await;
        let mibs = big(&client, &base).await;
        println!("{name:<10} {mean:>10.1?} {p50:>10.1?} {p99:>10.1?} {rps:>12.0} {mibs:>16.0}");
    }
}
