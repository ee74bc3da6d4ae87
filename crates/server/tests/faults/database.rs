//! PostgreSQL unreachable for a while: a TCP proxy between the hub and the real server is cut (open
//! connections closed, new ones refused) and restored. The shared server itself is never touched.

use crate::common::{ADMIN_PASSWORD, Hub, config, node};
use gpuhub_driver::fake::FakeEngine;
use gpuhub_testkit::postgres::{self, Database};
use reqwest::{Method, StatusCode};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// `postgres://user:pass@host:port/db` → (`postgres://user:pass@`, `host:port`).
fn split_url(url: &str) -> (String, String) {
    let (scheme_auth, rest) = url.split_at(url.rfind('@').expect("url has credentials") + 1);
    let host = rest.split('/').next().unwrap().to_owned();
    (scheme_auth.to_owned(), host)
}

/// A TCP proxy that can be cut: when `cut` is true it closes the connections it carries and closes
/// every new one at once, as a stopped server would.
struct Proxy {
    addr: std::net::SocketAddr,
    cut: watch::Sender<bool>,
}

impl Proxy {
    async fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (cut, rx) = watch::channel(false);
        tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else { return };
                if *rx.borrow() {
                    drop(client); // refused: closed before a byte is exchanged
                    continue;
                }
                let (upstream, mut rx) = (upstream.clone(), rx.clone());
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(&upstream).await else { return };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = rx.wait_for(|cut| *cut) => {}
                    }
                });
            }
        });
        Proxy { addr, cut }
    }

    fn set_cut(&self, cut: bool) {
        self.cut.send_replace(cut);
    }
}

#[tokio::test]
async fn postgres_unreachable_answers_503_and_recovers_without_a_restart() {
    let db = Database::create().await;
    let (auth, host) = split_url(&postgres::url());
    let proxy = Proxy::start(host).await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.database_url = Some(format!("{auth}{}/{}", proxy.addr, db.name));
    cfg.reconcile_secs = 1;
    let fake = Arc::new(FakeEngine::new().with_nodes(vec![node(2)]));
    let mut hub = Hub::start_on(dir, cfg, fake.clone()).await;
    hub.runtime = fake.clone();
    let admin = hub.login("admin", ADMIN_PASSWORD).await;
    let alice = hub.user(&admin, "alice").await;
    hub.submit(&alice, crate::common::job("before", 0)).await;
    hub.wait_state(&alice, "before", "running").await;
    let cid = hub.run(&alice, "before").await;

    proxy.set_cut(true);
    let cut_at = Instant::now();
    // the job ends while the database is away: the event cannot be recorded now
    fake.exit(&cid, 3);
    let mut fail_times = Vec::new();
    for (method, path, body) in [
        (Method::GET, "/api/v1/workloads".to_owned(), None),
        (Method::GET, "/api/v1/workloads/before".to_owned(), None),
        (Method::POST, "/api/v1/workloads".to_owned(), Some(crate::common::job("during", 0))),
    ] {
        let started = Instant::now();
        let resp = {
            let mut req = hub.http.request(method.clone(), format!("{}{path}", hub.url)).bearer_auth(&alice);
            if let Some(b) = body {
                req = req.json(&b);
            }
            req.send().await.unwrap()
        };
        let took = started.elapsed();
        fail_times.push(took);
        let status = resp.status();
        let ctype = resp.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned());
        let retry = resp.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
        let text = resp.text().await.unwrap();
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{method} {path} with the database cut: {text}");
        assert_eq!(ctype.as_deref(), Some("application/problem+json"), "{text}");
        assert!(retry.is_some_and(|r| r.parse::<u64>().is_ok()), "{method} {path}: no Retry-After");
        assert!(text.contains("database is unavailable"), "{text}");
        println!("with the database cut: {method} {path} → 503 in {:.2} s", took.as_secs_f64());
    }

    proxy.set_cut(false);
    let restored_at = Instant::now();
    println!("database cut for {:.2} s", (restored_at - cut_at).as_secs_f64());
    // the pool reconnects by itself: poll until a request succeeds (nothing else signals it)
    let recovered = loop {
        let (s, v) = hub.call(Method::GET, "/api/v1/workloads", Some(&alice), None).await;
        if s == StatusCode::OK {
            break restored_at.elapsed();
        }
        assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{v}");
        assert!(restored_at.elapsed() < Duration::from_secs(60), "the hub did not recover: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    println!("first successful request {:.2} s after the database came back", recovered.as_secs_f64());

    // the exit that happened during the cut is recorded by the next reconciliation, with its code
    let v = hub.wait_for(&alice, "before", 20, |v| v["state"] == "failed").await;
    assert_eq!(v["exit_code"], 3, "{v}");
    // the submission refused during the cut stored nothing; new work runs
    let (s, _) = hub.call(Method::GET, "/api/v1/workloads/during", Some(&alice), None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    hub.submit(
        &alice,
        json!({"name": "after", "kind": "job", "image": "busybox:latest", "command": ["true"],
        "resources": {"cpus": 1, "memory": "1GiB", "gpus": 0}}),
    )
    .await;
    let after = hub.wait_state(&alice, "after", "running").await;
    fake.exit(&hub.run(&alice, "after").await, 0);
    hub.wait_state(&alice, "after", "succeeded").await;
    assert!(after["id"].is_string());

    hub.server.take().unwrap().shutdown().await;
    db.drop_it().await;
}
