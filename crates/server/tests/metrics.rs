//! The monitor's figures through the API: a running workload's history (written by the monitor every
//! round, read back as means per step, thinned out by age), the GPUs' history, and the latest round,
//! each as its caller may see it. The time is a manual clock and rounds are awaited on the monitor's
//! round counter, never slept for.

use gpuhub_testkit as common;

use chrono::{DateTime, TimeZone, Utc};
use common::{Hub, job, node};
use gpuhub_controller::clock::ManualClock;
use gpuhub_core::Bytes;
use gpuhub_core::metrics::MetricsSnapshot;
use gpuhub_core::quantity::GIB;
use gpuhub_driver::MemberUsage;
use gpuhub_gpu::{FakeGpuSampler, GpuProcess};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::sync::Arc;

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 1, 10, 0, 0).unwrap()
}

fn at(secs: i64) -> String {
    (t0() + chrono::Duration::seconds(secs)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Waits for the monitor's next published round that `done` accepts, at most 20 rounds.
async fn round_where(hub: &Hub, done: impl Fn(&MetricsSnapshot) -> bool) -> Arc<MetricsSnapshot> {
    let metrics = &hub.server.as_ref().unwrap().state.metrics;
    let mut rounds = metrics.rounds();
    for _ in 0..20 {
        tokio::time::timeout(std::time::Duration::from_secs(10), rounds.changed())
            .await
            .expect("the monitor publishes a round every second")
            .unwrap();
        let s = metrics.get();
        if done(&s) {
            return s;
        }
    }
    panic!("no round as expected in 20: last {:?}", metrics.get());
}

/// Waits for a round taken at `when`, then for the next one: by then the first is in the history.
async fn written(hub: &Hub, when: DateTime<Utc>) -> Arc<MetricsSnapshot> {
    let s = round_where(hub, |s| s.at == Some(when)).await;
    round_where(hub, |_| true).await;
    s
}

fn usage(cpu_seconds: f64) -> Vec<MemberUsage> {
    vec![MemberUsage {
        index: 0,
        cpu_seconds,
        memory_used: Bytes(GIB),
        memory_limit: Some(Bytes(2 * GIB)),
        pids: vec![4242],
    }]
}

#[tokio::test]
async fn a_workloads_history_and_the_live_round() {
    let clock = Arc::new(ManualClock::new(t0()));
    let gpus = Arc::new(FakeGpuSampler::new(node(2).gpus));
    let seams = gpuhub_server::Seams { clock: clock.clone(), gpus: Some(gpus.clone()), ..Default::default() };
    let hub = Hub::start_seams(seams, |c| {
        c.monitor.interval_secs = 1;
        c.monitor.raw_hours = 1;
        c.monitor.minute_days = 1;
    })
    .await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let bob = hub.user(&admin, "bob").await;

    // alice's job holds a GPU, works it at 50 % with 8 GiB of its own, one core and a half
    hub.submit(&alice, job("train", 1)).await;
    let v = hub.wait_state(&alice, "train", "running").await;
    let gpu = v["gpus"][0].as_str().unwrap().to_owned();
    let run = hub.run(&alice, "train").await;
    gpus.set(&gpu, 50.0, Bytes(10 * GIB));
    gpus.set_processes(&gpu, vec![GpuProcess { pid: 4242, memory_used: Bytes(8 * GIB) }]);
    gpus.set_sensors(&gpu, Some(250.0), Some(60.0));
    hub.runtime.set_usage(&run, usage(100.0));
    round_where(&hub, |s| s.members.iter().any(|m| m.workload == "train")).await;
    for (secs, cpu) in [(10, 115.0), (20, 130.0)] {
        clock.advance(chrono::Duration::seconds(10));
        hub.runtime.set_usage(&run, usage(cpu));
        let s = round_where(&hub, |s| s.at == Some(t0() + chrono::Duration::seconds(secs))).await;
        assert_eq!(s.members[0].cpu_cores, Some(1.5), "{s:?}");
    }
    written(&hub, t0() + chrono::Duration::seconds(20)).await;

    // the history at the sampling step: the first sample has no CPU figure yet
    let path = format!("/api/v1/workloads/train/metrics?from={}&to={}&step=10", at(0), at(30));
    let (s, h) = hub.call(Method::GET, &path, Some(&alice), None).await;
    assert_eq!(s, StatusCode::OK, "{h}");
    assert_eq!(
        (h["workload"].as_str(), h["owner"].as_str(), h["step_secs"].as_u64()),
        (Some("train"), Some("alice"), Some(10))
    );
    let points = h["points"].as_array().unwrap();
    assert_eq!(points.len(), 3, "{h}");
    assert_eq!(
        points[0],
        json!({"member": 0, "at": at(0), "memory_used": GIB, "memory_limit": 2 * GIB,
            "gpu_utilization_pct": 50.0, "gpu_memory_used": 8 * GIB})
    );
    assert_eq!((points[1]["at"].as_str(), points[1]["cpu_cores"].as_f64()), (Some(at(10).as_str()), Some(1.5)));
    assert_eq!(points[2]["cpu_cores"].as_f64(), Some(1.5));
    // a coarser step averages what it holds
    let coarse = format!("/api/v1/workloads/train/metrics?from={}&to={}&step=20", at(0), at(40));
    let (_, h) = hub.call(Method::GET, &coarse, Some(&alice), None).await;
    let cpu: Vec<_> = h["points"].as_array().unwrap().iter().map(|p| p["cpu_cores"].as_f64()).collect();
    assert_eq!(cpu, [Some(1.5), Some(1.5)]);

    // who may see it: as GET /api/v1/workloads/{name}
    let (s, v) = hub.call(Method::GET, &path, Some(&bob), None).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    let (s, _) = hub.call(Method::GET, &format!("{path}&owner=alice"), Some(&bob), None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, v) = hub.call(Method::GET, &format!("{path}&owner=alice"), Some(&admin), None).await;
    assert_eq!((s, v["points"].as_array().map(Vec::len)), (StatusCode::OK, Some(3)));
    let (s, _) = hub.call(Method::GET, &path, None, None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);

    // bad windows are 400s that name the problem
    for (query, says) in [
        ("step=0", "step must be at least 1"),
        ("from=soon", "from \"soon\""),
        (&*format!("from={}&to={}", at(60), at(0)), "must be before"),
        ("from=2026-10-01&step=1", "points per series"),
        ("colour=red", "colour"),
        ("step=-5", "invalid query"),
    ] {
        let (s, v) =
            hub.call(Method::GET, &format!("/api/v1/workloads/train/metrics?{query}"), Some(&alice), None).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{query}: {v}");
        assert!(v["detail"].as_str().unwrap().contains(says), "{query}: {v}");
    }
    // by default, the last hour
    let (_, v) = hub.call(Method::GET, "/api/v1/workloads/train/metrics", Some(&alice), None).await;
    assert_eq!((v["from"].as_str(), v["step_secs"].as_u64()), (Some(at(20 - 3600).as_str()), Some(10)));
    assert_eq!(v["points"].as_array().unwrap().len(), 2, "to is now (0:20), exclusive: {v}");

    // the GPUs' history, for any signed-in user; one node's, or a 404 for a node there is not (rounds at
    // 10:00 measured the GPUs before they were set to work: from 10:00:10 on)
    let gpu_path = format!("/api/v1/nodes/metrics?from={}&to={}&step=20", at(10), at(30));
    let (s, v) = hub.call(Method::GET, &gpu_path, Some(&bob), None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let busy = gpu_point(&v, &gpu);
    assert_eq!(
        busy,
        json!({"node": "test-node", "uuid": gpu, "at": at(10), "utilization_pct": 50.0, "memory_used": 10 * GIB,
            "memory_total": 141 * GIB, "power_watts": 250.0, "temperature_c": 60.0})
    );
    assert_eq!(v["points"].as_array().unwrap().len(), 2, "both GPUs: {v}");
    let (s, v) = hub.call(Method::GET, &format!("{gpu_path}&node=test-node"), Some(&bob), None).await;
    assert_eq!((s, v["points"].as_array().map(Vec::len)), (StatusCode::OK, Some(2)));
    let (s, v) = hub.call(Method::GET, &format!("{gpu_path}&node=elsewhere"), Some(&bob), None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert!(v["detail"].as_str().unwrap().contains("test-node"), "{v}");
    let (s, _) = hub.call(Method::GET, &gpu_path, None, None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);

    // the live round: alice sees her member and herself among the GPU's holders; bob sees the GPU's
    // figures but no member and no holder of alice's; admins see all
    let (_, live) = hub.call(Method::GET, "/api/v1/metrics/live", Some(&alice), None).await;
    assert_eq!(live["members"].as_array().unwrap().len(), 1, "{live}");
    assert_eq!(live["members"][0]["workload"], "train");
    assert_eq!(gpu_of(&live, &gpu)["holders"], json!(["alice/train"]));
    let (_, live) = hub.call(Method::GET, "/api/v1/metrics/live", Some(&bob), None).await;
    assert_eq!(live["members"], json!([]), "{live}");
    let seen = gpu_of(&live, &gpu);
    assert_eq!((seen["utilization_pct"].as_f64(), seen.get("holders")), (Some(50.0), None), "{live}");
    let (_, live) = hub.call(Method::GET, "/api/v1/metrics/live", Some(&admin), None).await;
    assert_eq!(
        (live["members"].as_array().unwrap().len(), &gpu_of(&live, &gpu)["holders"]),
        (1, &json!(["alice/train"]))
    );

    // two hours on, the monitor thins out what is older than raw_hours (1): the three samples of 10:00
    // are one 1-minute mean
    clock.advance(chrono::Duration::hours(2));
    written(&hub, t0() + chrono::Duration::seconds(2 * 3600 + 20)).await;
    let (_, h) = hub.call(Method::GET, &path, Some(&alice), None).await;
    let points = h["points"].as_array().unwrap();
    assert_eq!(points.len(), 1, "{h}");
    assert_eq!(
        points[0],
        json!({"member": 0, "at": at(0), "cpu_cores": 1.5, "memory_used": GIB, "memory_limit": 2 * GIB,
            "gpu_utilization_pct": 50.0, "gpu_memory_used": 8 * GIB})
    );

    // each route is in the OpenAPI document with its doc comment, and the shapes it answers
    let (_, doc) = hub.call(Method::GET, "/api/v1/openapi.json", None, None).await;
    for p in ["/api/v1/workloads/{name}/metrics", "/api/v1/nodes/metrics"] {
        let op = &doc["paths"][p]["get"];
        assert!(op["summary"].is_string() && op["description"].is_string(), "{p}: {op}");
        let query: Vec<_> = op["parameters"].as_array().unwrap().iter().filter(|q| q["in"] == "query").collect();
        assert!(query.len() >= 3 && query.iter().all(|q| q["required"] != true), "{p}: {op}");
    }
    assert!(doc["paths"]["/api/v1/metrics/live"]["get"]["description"].is_string());
    for schema in ["WorkloadHistory", "MemberPoint", "GpuHistory", "GpuPoint", "MetricsSnapshot"] {
        assert!(doc["components"]["schemas"][schema].is_object(), "{schema} missing from the OpenAPI document");
    }
    hub.server.unwrap().shutdown().await;
}

fn gpu_point(v: &Value, uuid: &str) -> Value {
    v["points"].as_array().unwrap().iter().find(|p| p["uuid"] == uuid).cloned().unwrap_or(Value::Null)
}

fn gpu_of(live: &Value, uuid: &str) -> Value {
    live["gpus"].as_array().unwrap().iter().find(|g| g["uuid"] == uuid).cloned().unwrap_or(Value::Null)
}
