//! Fairness: priority comes from the queue's policy, not the user's word; a partial per-user limit
//! limits only what it names.

use gpuhub_testkit as common;

use common::*;
use reqwest::{Method, StatusCode};
use serde_json::json;

fn config(c: &mut gpuhub_server::config::Config) {
    c.scheduler = gpuhub_server::config::Config::from_toml(
        "[[scheduler.queues]]\nname = \"lab\"\nuser_limit = { gpu_milli = 1000 }\n\
         [[scheduler.queues]]\nname = \"urgent\"\n",
    )
    .unwrap()
    .scheduler;
    c.priority_classes.insert("high".into(), 100);
    c.queue_priority_classes.insert("urgent".into(), vec!["high".into()]);
}

fn sleeper(name: &str, gpus: u32, extra: serde_json::Value) -> serde_json::Value {
    let mut j = job(name, gpus);
    j["command"] = json!(["sleep", "1000"]);
    for (k, v) in extra.as_object().unwrap() {
        j[k] = v.clone();
    }
    j
}

#[tokio::test]
async fn a_users_priority_does_not_jump_the_queue_unless_the_queue_allows_it() {
    let hub = Hub::start_with(config).await;
    let admin = hub.admin().await;
    let (alice, bob) = (hub.user(&admin, "alice").await, hub.user(&admin, "bob").await);
    hub.submit(&admin, sleeper("blocker", 2, json!({}))).await;
    hub.wait_state(&admin, "blocker", "running").await;
    hub.submit(&bob, sleeper("first", 2, json!({}))).await;

    // a plain user's word is not enough
    for (body, field) in [
        (sleeper("jump", 2, json!({"priority": 100})), "priority"),
        (sleeper("jump", 2, json!({"priority_class": "high"})), "priority_class"),
        (sleeper("jump", 2, json!({"priority": 1, "priority_class": "high", "queue": "urgent"})), "priority"),
    ] {
        let (s, v) = hub.call(Method::POST, "/api/v1/workloads", Some(&alice), Some(body)).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
        assert!(v["detail"].as_str().unwrap().starts_with(&format!("invalid {field}")), "{v}");
    }
    // lowering one's own priority is always fine; the class the queue allows goes first
    hub.submit(&alice, sleeper("nice", 2, json!({"priority": -10}))).await;
    let v = hub.submit(&alice, sleeper("jump", 2, json!({"priority_class": "high", "queue": "urgent"}))).await;
    assert_eq!(v["priority"], 100);
    let (s, _) = hub.call(Method::POST, "/api/v1/workloads/blocker/stop", Some(&admin), None).await;
    assert_eq!(s, StatusCode::OK);
    hub.wait_state(&alice, "jump", "running").await;
    assert_eq!(hub.get(&bob, "first").await["state"], "queued");
}

#[tokio::test]
async fn a_partial_user_limit_limits_only_what_it_names() {
    let hub = Hub::start_with(config).await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    // the CPU and memory the limit leaves out are not limited to zero
    hub.submit(&alice, sleeper("one", 1, json!({"queue": "lab"}))).await;
    hub.wait_state(&alice, "one", "running").await;
    hub.submit(&alice, sleeper("two", 1, json!({"queue": "lab"}))).await;
    hub.server.as_ref().unwrap().state.controller.kick();
    let two = hub.get(&alice, "two").await;
    assert_eq!(two["state"], "queued", "{two}");
    let (s, v) = hub
        .call(Method::POST, "/api/v1/workloads", Some(&alice), Some(sleeper("big", 2, json!({"queue": "lab"}))))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "more GPUs than the user limit can never start: {v}");
    let (_, queues) = hub.call(Method::GET, "/api/v1/queues", Some(&alice), None).await;
    let lab = queues.as_array().unwrap().iter().find(|q| q["name"] == "lab").unwrap().clone();
    assert_eq!(lab["user_limit"], json!({"gpus": 1.0}), "{lab}");
}
