//! A running service's update is rolling: the new run starts beside the serving one, the URL keeps
//! going to the old run until the new one passes its readiness check, then switches and the old run
//! is stopped; a new run not ready by the deadline (read through the clock seam) or ending fails the
//! update, and the old run goes on with the old terms. Where both cannot be held at once it is
//! stop-then-start, and the history says why. On the recording fake engine with a manual clock (the
//! readiness check is a real HTTP GET of a server in this test); on real Docker through the real
//! binary in `crates/gpuhub/tests/services.rs`.

use gpuhub_testkit as common;

use chrono::{DateTime, TimeDelta, Utc};
use common::{ADMIN_PASSWORD, Hub, config};
use gpuhub_controller::clock::{Clock, ManualClock};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A hub on the fake engine whose controller reads `clock`.
async fn hub_on(engine: Arc<gpuhub_driver::fake::FakeEngine>, clock: Arc<ManualClock>) -> Hub {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let seams = gpuhub_server::Seams { clock, ..Default::default() };
    Hub::start_fake(dir, cfg, engine, seams).await
}

/// An HTTP server on loopback whose `/ready` answers 200 while `ready` holds, 503 otherwise.
async fn readiness(ready: Arc<AtomicBool>) -> u16 {
    let app = axum::Router::new().fallback(move || {
        let ready = ready.clone();
        async move {
            match ready.load(Ordering::SeqCst) {
                true => (axum::http::StatusCode::OK, "ready"),
                false => (axum::http::StatusCode::SERVICE_UNAVAILABLE, "not yet"),
            }
        }
    });
    common::http::listen(app).await.unwrap().port()
}

fn notes(v: &Value) -> Vec<String> {
    v["history"].as_array().unwrap().iter().filter_map(|e| e["message"].as_str().map(str::to_owned)).collect()
}

/// A page of the portal as `user` (a browser session from the login API).
async fn portal_page(hub: &Hub, user: &str, path: &str) -> String {
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let login = json!({"username": user, "password": format!("{user}-password")});
    let r = http.post(format!("{}/api/v1/login", hub.url)).json(&login).send().await.unwrap();
    let cookie = r.headers()[reqwest::header::SET_COOKIE].to_str().unwrap().split(';').next().unwrap().to_owned();
    let r = http
        .get(format!("{}{path}", hub.url))
        .header("sec-fetch-mode", "navigate")
        .header(reqwest::header::COOKIE, cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "{path}");
    r.text().await.unwrap()
}

async fn patch(hub: &Hub, token: &str, body: Value) -> Value {
    let (s, v) = hub.call(Method::PATCH, "/api/v1/workloads/web", Some(token), Some(body)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_rolls_switching_once_the_new_run_is_ready_and_fails_keeping_the_old_one() {
    let t0: DateTime<Utc> = DateTime::from_timestamp(Utc::now().timestamp(), 0).unwrap();
    let clock = Arc::new(ManualClock::new(t0));
    let engine = common::fake();
    engine.set_endpoint("127.0.0.1".parse().unwrap());
    let ready = Arc::new(AtomicBool::new(true));
    let port = readiness(ready.clone()).await;
    let hub = hub_on(engine.clone(), clock.clone()).await;
    let admin = hub.login("admin", ADMIN_PASSWORD).await;
    let alice = hub.user(&admin, "alice").await;
    let body = json!({"name": "web", "kind": "service", "image": "busybox:latest", "command": ["httpd", "v1"],
        "resources": {"cpus": 1, "memory": "1GiB"}, "service": {"port": port, "ready": {"http": "/ready"}}});
    hub.submit(&alice, body).await;
    hub.wait_state(&alice, "web", "running").await;
    let old = hub.run(&alice, "web").await;

    // the new run starts beside the old one, which serves until the new one is ready
    ready.store(false, Ordering::SeqCst);
    clock.advance(TimeDelta::seconds(60));
    let t1 = clock.now();
    let v = patch(&hub, &alice, json!({"command": ["httpd", "v2"]})).await;
    assert_eq!(v["service"]["update"]["state"], "rolling", "{v}");
    assert_eq!(v["command"], json!(["httpd", "v1"]), "the old terms serve until the switch: {v}");
    let running = engine.running();
    assert_eq!(running.len(), 2, "both runs: {running:?}");
    let new = running.iter().find(|r| **r != old).unwrap().clone();
    assert_eq!(engine.spec(&new).unwrap().command, ["httpd", "v2"]);
    assert_eq!(hub.run(&alice, "web").await, old, "the URL goes to the old run");
    // while it rolls, another update is refused
    let (s, v) = hub.call(Method::PATCH, "/api/v1/workloads/web", Some(&alice), Some(json!({"command": ["x"]}))).await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("under way"), "{v}");

    // ready: the workload switches to the new run and its terms; the old run is stopped
    clock.advance(TimeDelta::seconds(60));
    let t2 = clock.now();
    ready.store(true, Ordering::SeqCst);
    let v = hub.wait_for(&alice, "web", 20, |v| v["service"]["update"]["state"] == "done").await;
    assert_eq!((v["state"].as_str(), v["command"].clone()), (Some("running"), json!(["httpd", "v2"])), "{v}");
    assert_eq!(hub.run(&alice, "web").await, new);
    assert_eq!(v["restarts"], 0, "an update is no restart: {v}");
    let n = notes(&v);
    assert!(n.iter().any(|m| m.starts_with("updating: command (by alice); a new run starts beside")), "{n:?}");
    assert!(n.iter().any(|m| m == "updated: command (by alice); the new run serves, the old one is stopped"), "{n:?}");
    for _ in 0..100 {
        if !engine.running().contains(&old) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(engine.running(), std::slice::from_ref(&new), "the old run is stopped after the drain");
    // each run held its own: the old one until the switch, the new one from its start beside it
    let store = &hub.server.as_ref().unwrap().state.store;
    let held: Vec<_> = (store.holdings(t0 - TimeDelta::hours(1), t2 + TimeDelta::hours(1), Some("alice")).await)
        .unwrap()
        .into_iter()
        .map(|h| (h.since, h.until))
        .collect();
    assert_eq!(held, [(t0, Some(t2)), (t1, None)]);

    // a new run that never gets ready: past the deadline the update fails and the old run goes on
    ready.store(false, Ordering::SeqCst);
    let v = patch(&hub, &alice, json!({"command": ["httpd", "v3"]})).await;
    assert_eq!(v["service"]["update"]["state"], "rolling", "{v}");
    let third = engine.running().into_iter().find(|r| *r != new).expect("a third run");
    clock.advance(TimeDelta::seconds(301));
    let v = hub.wait_for(&alice, "web", 20, |v| v["service"]["update"]["state"] == "failed").await;
    let msg = v["service"]["update"]["message"].as_str().unwrap();
    assert!(msg.contains("the new run did not pass its readiness check within 5m"), "{v}");
    assert!(msg.ends_with("the old run kept serving, with the old terms"), "{v}");
    assert_eq!((v["state"].as_str(), v["command"].clone()), (Some("running"), json!(["httpd", "v2"])), "{v}");
    assert_eq!(hub.run(&alice, "web").await, new);
    assert!(notes(&v).iter().any(|m| m.starts_with("update failed: the new run did not pass")), "{v}");
    let page = portal_page(&hub, "alice", "/workloads/web").await;
    assert!(
        page.contains("data-update=\"failed\"") && page.contains("the old run kept serving, with the old terms"),
        "the workload's page shows how the update went: {page}"
    );
    assert!(!page.contains("restart 1") && page.contains("data-mark=\"changed\""), "updates are no restarts: {page}");
    for _ in 0..50 {
        if !engine.running().contains(&third) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(engine.running(), std::slice::from_ref(&new), "the failed update's run is stopped");

    // a new run that exits fails it at once
    let _ = patch(&hub, &alice, json!({"command": ["httpd", "v4"]})).await;
    let fourth = engine.running().into_iter().find(|r| *r != new).expect("a fourth run");
    engine.exit(&fourth, 3);
    let v = hub
        .wait_for(&alice, "web", 20, |v| {
            v["service"]["update"]["state"] == "failed"
                && v["service"]["update"]["message"].as_str().unwrap().contains("code 3")
        })
        .await;
    assert!(
        v["service"]["update"]["message"]
            .as_str()
            .unwrap()
            .contains("the new run exited with code 3 before it was ready"),
        "{v}"
    );
    assert_eq!(hub.run(&alice, "web").await, new);

    // a stop during an update ends both runs
    let _ = patch(&hub, &alice, json!({"command": ["httpd", "v5"]})).await;
    assert_eq!(engine.running().len(), 2);
    let (s, v) = hub.call(Method::POST, "/api/v1/workloads/web/stop", Some(&alice), None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let v = hub.wait_for(&alice, "web", 20, |v| v["state"] == "stopped").await;
    assert_eq!(v["service"]["update"]["state"], "failed", "{v}");
    for _ in 0..50 {
        if engine.running().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(engine.running(), Vec::<String>::new());
}

/// Where the node cannot hold both runs, the update stops the old run, then starts the new one, and
/// says so in the history.
#[tokio::test]
async fn an_update_that_does_not_fit_beside_is_stop_then_start() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let body = json!({"name": "web", "kind": "service", "image": "busybox:latest", "command": ["httpd"],
        "resources": {"cpus": 1, "memory": "20GiB"}, "service": {"port": 8080}});
    hub.submit(&alice, body).await;
    hub.wait_state(&alice, "web", "running").await;
    let old = hub.run(&alice, "web").await;
    let v = patch(&hub, &alice, json!({"env": {"MODE": "v2"}})).await;
    assert!(v["service"]["update"].is_null(), "{v}");
    let v = hub.wait_for(&alice, "web", 20, |v| v["state"] == "running" && v["env"]["MODE"] == "v2").await;
    assert_ne!(hub.run(&alice, "web").await, old);
    let n = notes(&v);
    assert!(
        n.iter()
            .any(|m| m
                .starts_with("updated: environment (by alice); stop-then-start: both runs cannot be held at once (")),
        "{n:?}"
    );
}

/// A hub on the fake engine whose service `web` (alice's, `httpd v1`, ready while `ready` holds) is
/// running: the hub, alice's token and the serving run.
async fn serving_web(ready: &Arc<AtomicBool>) -> (Hub, String, String) {
    let port = readiness(ready.clone()).await;
    let hub = Hub::start().await;
    hub.runtime.set_endpoint("127.0.0.1".parse().unwrap());
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let body = json!({"name": "web", "kind": "service", "image": "busybox:latest", "command": ["httpd", "v1"],
        "resources": {"cpus": 1, "memory": "1GiB"}, "service": {"port": port, "ready": {"http": "/ready"}}});
    hub.submit(&alice, body).await;
    hub.wait_state(&alice, "web", "running").await;
    let old = hub.run(&alice, "web").await;
    (hub, alice, old)
}

/// A rolling update under way when the hub restarts goes on: reconciliation finds its new run and
/// watches it again, and the service switches once it is ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_goes_on_after_the_hub_restarts() {
    let ready = Arc::new(AtomicBool::new(true));
    let (mut hub, alice, old) = serving_web(&ready).await;
    ready.store(false, Ordering::SeqCst);
    let v = patch(&hub, &alice, json!({"command": ["httpd", "v2"]})).await;
    assert_eq!(v["service"]["update"]["state"], "rolling", "{v}");
    hub.restart().await;
    let alice = hub.login("alice", "alice-password").await;
    let v = hub.get(&alice, "web").await;
    assert_eq!((v["service"]["update"]["state"].as_str(), v["state"].as_str()), (Some("rolling"), Some("running")));
    assert_eq!(hub.run(&alice, "web").await, old, "the old run serves on");
    ready.store(true, Ordering::SeqCst);
    let v = hub.wait_for(&alice, "web", 20, |v| v["service"]["update"]["state"] == "done").await;
    assert_eq!(v["command"], json!(["httpd", "v2"]), "{v}");
    assert_ne!(hub.run(&alice, "web").await, old);
}

/// A rolling update whose new run is gone when the hub comes back fails, and the old run serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_whose_new_run_is_gone_after_a_restart_fails() {
    let ready = Arc::new(AtomicBool::new(true));
    let (mut hub, alice, old) = serving_web(&ready).await;
    ready.store(false, Ordering::SeqCst);
    patch(&hub, &alice, json!({"command": ["httpd", "v2"]})).await;
    let new = hub.runtime.running().into_iter().find(|r| *r != old).expect("the new run");
    hub.server.take().unwrap().shutdown().await;
    hub.runtime.vanish(&new);
    hub.restart_from_nothing().await;
    let alice = hub.login("alice", "alice-password").await;
    let v = hub.wait_for(&alice, "web", 20, |v| v["service"]["update"]["state"] == "failed").await;
    let message = v["service"]["update"]["message"].as_str().unwrap();
    assert!(message.starts_with("update failed: its new run is gone from the engine"), "{v}");
    assert_eq!((v["state"].as_str(), v["command"].clone()), (Some("running"), json!(["httpd", "v1"])));
    assert_eq!(hub.run(&alice, "web").await, old);
}
