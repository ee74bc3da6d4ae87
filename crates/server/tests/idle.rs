//! Idle GPUs found and reclaimed, on the fake engine and a scripted GPU sampler with the clock seam:
//! an idle GPU workspace is warned after `after`, kept when its owner asks, stopped after the grace with
//! the typed reason `idle` (its home survives and it starts again); a busy one, and one used through
//! the hub's app proxy, are left alone.

use gpuhub_testkit as common;

use chrono::{DateTime, TimeDelta, Utc};
use common::{ADMIN_PASSWORD, Hub, config};
use gpuhub_controller::clock::ManualClock;
use gpuhub_core::Bytes;
use gpuhub_driver::MemberUsage;
use gpuhub_gpu::FakeGpuSampler;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::sync::Arc;

fn workspace(name: &str, apps: Value) -> Value {
    json!({"name": name, "kind": "workspace", "image": "busybox:latest", "command": ["sleep", "infinity"],
        "resources": {"cpus": 1, "memory": "1GiB", "gpus": 1}, "apps": apps})
}

/// A one-page HTTP app on loopback: answers every request with 200.
async fn tiny_app() -> u16 {
    let app = axum::Router::new().fallback(|| async { "hello" });
    common::http::listen(app).await.unwrap().port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_gpu_workspace_is_warned_then_stopped_and_a_busy_or_used_one_is_left_alone() {
    let t0: DateTime<Utc> = Utc::now();
    let clock = Arc::new(ManualClock::new(t0));
    let dir = tempfile::tempdir().unwrap();
    let engine = Arc::new(gpuhub_driver::fake::FakeEngine::new().with_nodes(vec![common::node(3)]));
    engine.set_endpoint("127.0.0.1".parse().unwrap());
    let sampler = Arc::new(FakeGpuSampler::new(common::node(3).gpus));
    let mut cfg = config(dir.path());
    cfg.homes_dir = Some(dir.path().join("homes"));
    cfg.monitor.interval_secs = 1;
    cfg.idle.after_secs = 3600;
    cfg.idle.grace_secs = 1800;
    let seams = gpuhub_server::Seams { clock: clock.clone(), gpus: Some(sampler.clone()), ..Default::default() };
    let hub = Hub::start_fake(dir, cfg, engine.clone(), seams).await;
    let admin = hub.login("admin", ADMIN_PASSWORD).await;
    let alice = hub.user(&admin, "alice").await;
    let port = tiny_app().await;

    let mut gpu_of = std::collections::HashMap::new();
    for (name, apps) in [("idle", json!([])), ("busy", json!([])), ("used", json!([{"name": "lab", "port": port}]))] {
        hub.submit(&alice, workspace(name, apps)).await;
        let v = hub.wait_state(&alice, name, "running").await;
        let run = hub.run(&alice, name).await;
        let usage = MemberUsage {
            index: 0,
            cpu_seconds: 1.0,
            memory_used: Bytes(100 << 20),
            memory_limit: Some(Bytes(1 << 30)),
            pids: vec![],
        };
        engine.set_usage(&run, vec![usage]);
        gpu_of.insert(name, v["gpus"][0].as_str().unwrap().to_owned());
    }
    sampler.set(&gpu_of["idle"], 1.0, Bytes(0));
    sampler.set(&gpu_of["used"], 0.0, Bytes(0));
    sampler.set(&gpu_of["busy"], 80.0, Bytes(40 << 30));
    let home_file = hub.dir.path().join("homes/alice/notes.txt");
    std::fs::write(&home_file, "keep me").unwrap();
    let app = |hub: &Hub| {
        let req = hub.http.get(format!("{}/w/alice/used/lab/", hub.url)).bearer_auth(&alice);
        async move {
            let r = req.send().await.unwrap();
            assert_eq!(r.status(), StatusCode::OK);
        }
    };

    // idle from the first round on; not warned yet
    let v = hub.until_round(&alice, "idle", |v| v["idle"]["since"].is_string()).await;
    assert!(v["idle"].get("warned_at").is_none(), "{v}");
    // an hour later: warned, with the time of the stop; the busy one is not idle
    clock.set(t0 + TimeDelta::seconds(3600));
    let v = hub.until_round(&alice, "idle", |v| v["idle"]["warned_at"].is_string()).await;
    let stop_at: DateTime<Utc> = v["idle"]["stop_at"].as_str().unwrap().parse().unwrap();
    assert_eq!(stop_at, t0 + TimeDelta::seconds(3600 + 1800), "{v}");
    assert!(hub.get(&alice, "busy").await.get("idle").is_none());
    // a request through the app proxy is use: its idle GPU is forgiven (a warning withdrawn)
    app(&hub).await;
    hub.until_round(&alice, "used", |v| v["idle"].get("warned_at").is_none()).await;
    // the admin's report lists it; a user may not read the report
    let (s, report) = hub.call(Method::GET, "/api/v1/idle", Some(&admin), None).await;
    assert_eq!(s, StatusCode::OK, "{report}");
    assert!(
        report.as_array().unwrap().iter().any(|r| r["workload"] == "alice/idle" && r["idle"]["stop_at"].is_string()),
        "{report}"
    );
    let (s, _) = hub.call(Method::GET, "/api/v1/idle", Some(&alice), None).await;
    assert_eq!(s, StatusCode::FORBIDDEN);

    // the owner keeps it for an hour (more than the server allows is refused): the warning is withdrawn
    let keep =
        |hours: u32| hub.call(Method::POST, "/api/v1/workloads/idle/keep", Some(&alice), Some(json!({"hours": hours})));
    let (s, v) = keep(99).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    let (s, v) = keep(1).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let v = hub
        .until_round(&alice, "idle", |v| v["idle"]["kept_until"].is_string() && v["idle"].get("warned_at").is_none())
        .await;
    assert_eq!(v["state"], "running");

    // past the keep: warned again; past the grace: stopped, for being idle
    let t1 = t0 + TimeDelta::seconds(2 * 3600 + 1);
    clock.set(t1);
    let v = hub.until_round(&alice, "idle", |v| v["idle"]["warned_at"].is_string()).await;
    let stop_at: DateTime<Utc> = v["idle"]["stop_at"].as_str().unwrap().parse().unwrap();
    assert_eq!(stop_at, t1 + TimeDelta::seconds(1800));
    app(&hub).await;
    clock.set(stop_at);
    app(&hub).await;
    let mut rounds = hub.server.as_ref().unwrap().state.metrics.rounds();
    rounds.changed().await.unwrap();
    let v = hub.wait_state(&alice, "idle", "stopped").await;
    assert_eq!(v["interruption"]["reason"], "idle", "{v}");
    assert!(v["interruption"]["detail"].as_str().unwrap().contains("below 5 %"), "{v}");
    assert_eq!(std::fs::read_to_string(&home_file).unwrap(), "keep me", "the home survives");
    assert_eq!(hub.get(&alice, "busy").await["state"], "running");
    assert_eq!(hub.get(&alice, "used").await["state"], "running");
    // the admin's dashboard lists the reclaim, by the idle rule, with its words
    let login = json!({"username": "admin", "password": ADMIN_PASSWORD});
    let r = hub.http.post(format!("{}/api/v1/login", hub.url)).json(&login).send().await.unwrap();
    let cookie = r.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
    let r = hub.http.get(format!("{}/admin/dashboard", hub.url)).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let page = r.text().await.unwrap();
    let row = page.split("data-rule=\"idle\" data-workload=\"alice/idle\"").nth(1).expect("the reclaim listed");
    assert!(row.split("</tr>").next().unwrap().contains("below 5 %"), "{row}");
    // and it starts again
    let (s, v) = hub.call(Method::POST, "/api/v1/workloads/idle/start", Some(&alice), None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    hub.wait_state(&alice, "idle", "running").await;

    // accounting: each held its GPU from t0 until now; used, as the monitor measured it, 1 %, 80 %, 0 %
    let q = format!(
        "/api/v1/usage?by=user&from={}&to={}",
        (t0 - TimeDelta::hours(1)).format("%Y-%m-%dT%H:%M:%SZ"),
        (stop_at + TimeDelta::hours(1)).format("%Y-%m-%dT%H:%M:%SZ")
    );
    let (s, v) = hub.call(Method::GET, &q, Some(&alice), None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let held = (stop_at - t0).num_milliseconds() as f64 / 3_600_000.0;
    let row = &v["rows"][0];
    let close = |a: f64, b: f64| (a - b).abs() < 1e-6 * b.max(1.0);
    assert!(close(row["gpu_hours"].as_f64().unwrap(), 3.0 * held), "{v}");
    assert!(close(row["gpu_used_hours"].as_f64().unwrap(), 0.81 * held), "{v}");
    assert!(close(row["memory_used_gib_hours"].as_f64().unwrap(), 3.0 * held * 100.0 / 1024.0), "{v}");
    hub.server.unwrap().shutdown().await;
}
