//! Editing a workload after submission (`PATCH /api/v1/workloads/{name}`): its owner lengthens the
//! time limit within the queue's maximum, an admin moves a queued one to another priority or queue;
//! each refusal is a problem naming why, and each change is in the workload's history.

use gpuhub_testkit as common;

use chrono::{DateTime, TimeDelta, Utc};
use common::{Hub, config, job};
use gpuhub_controller::clock::ManualClock;
use gpuhub_sched::QueueSpec;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::sync::Arc;

async fn hub() -> (Hub, Arc<ManualClock>, String, String) {
    let t0: DateTime<Utc> = Utc::now();
    let clock = Arc::new(ManualClock::new(t0));
    let dir = tempfile::tempdir().unwrap();
    let engine = common::fake();
    let mut cfg = config(dir.path());
    cfg.scheduler.queues = vec![QueueSpec::open("vision"), QueueSpec::open("nlp")];
    let seams = gpuhub_server::Seams { clock: clock.clone(), ..Default::default() };
    let hub = Hub::start_fake(dir, cfg, engine, seams).await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    (hub, clock, admin, alice)
}

fn with(mut v: Value, key: &str, val: Value) -> Value {
    v[key] = val;
    v
}

async fn patch(hub: &Hub, token: &str, path: &str, body: Value) -> (StatusCode, Value) {
    hub.call(Method::PATCH, &format!("/api/v1/workloads/{path}"), Some(token), Some(body)).await
}

fn history_notes(v: &Value) -> Vec<String> {
    v["history"].as_array().unwrap().iter().filter_map(|e| e["message"].as_str().map(str::to_owned)).collect()
}

#[tokio::test]
async fn an_owner_extends_a_running_job_within_its_queue_maximum() {
    let (hub, clock, admin, alice) = hub().await;
    let (s, v) =
        hub.call(Method::PATCH, "/api/v1/queues/vision", Some(&admin), Some(json!({"max_runtime": "3h"}))).await;
    assert_eq!((s, &v["max_runtime"]), (StatusCode::OK, &json!("3h")), "{v}");
    // a limit above the queue's maximum is refused at submit too
    let long = with(with(job("long", 1), "queue", json!("vision")), "runtime_limit", json!("4h"));
    let (s, v) = hub.call(Method::POST, "/api/v1/workloads", Some(&alice), Some(long)).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("above queue vision's maximum run time of 3h"), "{v}");

    let t = with(with(job("t", 1), "queue", json!("vision")), "runtime_limit", json!("1h"));
    hub.submit(&alice, t).await;
    hub.wait_state(&alice, "t", "running").await;
    let (s, v) = patch(&hub, &alice, "t", json!({"time_limit": "2h"})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["runtime_limit"], "2h", "{v}");
    assert!(history_notes(&v).iter().any(|n| n == "run-time limit 1h → 2h (by alice)"), "{v}");
    // refusals name the problem and change nothing
    let cases = [
        (json!({"runtime_limit": "30m"}), StatusCode::UNPROCESSABLE_ENTITY, "not longer than its present limit of 2h"),
        (json!({"runtime_limit": "4h"}), StatusCode::UNPROCESSABLE_ENTITY, "maximum run time of 3h"),
        (json!({"priority": 5}), StatusCode::FORBIDDEN, "only an admin"),
        (json!({}), StatusCode::UNPROCESSABLE_ENTITY, "nothing to change"),
    ];
    for (body, status, want) in cases {
        let (s, v) = patch(&hub, &alice, "t", body.clone()).await;
        assert_eq!(s, status, "{body}: {v}");
        assert!(v["detail"].as_str().unwrap().contains(want), "{body}: want {want:?} in {v}");
    }
    let (s, v) = patch(&hub, &alice, "t", json!({"runtime_limit": "3h", "colour": 1})).await;
    assert!(s.is_client_error() && v["detail"].as_str().unwrap().contains("colour"), "{s} {v}");
    let (s, v) = patch(&hub, &alice, "nope", json!({"runtime_limit": "3h"})).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    assert_eq!(hub.get(&alice, "t").await["runtime_limit"], "2h");

    // past the old limit it still runs; past the new one it is stopped
    clock.advance(TimeDelta::minutes(90));
    hub.full_pass().await;
    let v = hub.get(&alice, "t").await;
    assert_eq!(v["state"], "running", "{v}");
    clock.advance(TimeDelta::minutes(31));
    hub.server.as_ref().unwrap().state.controller.kick();
    let v = hub.wait_state(&alice, "t", "failed").await;
    assert!(v["message"].as_str().unwrap().contains("reached its run-time limit of 2h"), "{v}");
    // an ended workload's limit cannot change
    let (s, v) = patch(&hub, &alice, "t", json!({"runtime_limit": "3h"})).await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("failed, cannot change its run-time limit"), "{v}");
}

#[tokio::test]
async fn an_admin_changes_a_queued_jobs_priority_and_queue() {
    let (hub, _clock, admin, alice) = hub().await;
    hub.submit(&alice, job("big", 2)).await;
    hub.wait_state(&alice, "big", "running").await;
    hub.submit(&alice, with(job("small", 1), "queue", json!("vision"))).await;
    hub.wait_state(&alice, "small", "queued").await;
    let (s, v) = patch(&hub, &admin, "small?owner=alice", json!({"priority": 10, "queue": "nlp"})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!((&v["priority"], &v["queue"]), (&json!(10), &json!("nlp")), "{v}");
    let notes = history_notes(&hub.get(&alice, "small").await);
    assert!(notes.iter().any(|n| n == "priority 0 → 10, queue vision → queue nlp (by admin)"), "{notes:?}");
    let (s, v) = patch(&hub, &admin, "small?owner=alice", json!({"queue": "nope"})).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("invalid queue"), "{v}");
    // a running workload keeps its priority and queue
    let (s, v) = patch(&hub, &admin, "big?owner=alice", json!({"priority": 10})).await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("running, cannot change its priority or queue"), "{v}");
    // the moved job still starts once the GPUs are free
    let run = hub.run(&alice, "big").await;
    hub.runtime.exit(&run, 0);
    hub.wait_state(&alice, "small", "running").await;
}

/// Where the engine queues (Slurm, here its recording fake), a workload waiting in the engine's queue
/// was submitted for its team queue: it cannot move to another (409 naming why), while its time limit
/// may still grow.
#[tokio::test]
async fn a_workload_waiting_in_the_engines_queue_keeps_its_queue() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.scheduler.queues = vec![QueueSpec::open("vision"), QueueSpec::open("nlp")];
    let engine = Arc::new(gpuhub_driver::fake::FakeEngine::engine_placed().with_nodes(vec![common::node(2)]));
    let hub = Hub::start_on(dir, cfg, engine).await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let j = with(with(job("j", 1), "queue", json!("vision")), "runtime_limit", json!("1h"));
    hub.submit(&alice, j).await;
    // submitted: it waits in the engine's queue (members pending)
    hub.wait_for(&alice, "j", 10, |v| v["members"].as_array().is_some_and(|m| !m.is_empty())).await;
    let (s, v) = patch(&hub, &admin, "j?owner=alice", json!({"queue": "nlp"})).await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert!(
        v["detail"].as_str().unwrap().contains("already waits in the fake engine's own queue under queue vision"),
        "{v}"
    );
    let (s, v) = patch(&hub, &alice, "j", json!({"runtime_limit": "2h"})).await;
    assert_eq!((s, &v["runtime_limit"]), (StatusCode::OK, &json!("2h")), "{v}");
}
