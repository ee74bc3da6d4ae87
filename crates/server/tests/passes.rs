//! The controller coalesces: a burst of submissions and runtime events shares scheduling passes
//! instead of running one per wake-up, and still starts everything.

use gpuhub_testkit as common;

use common::Hub;
use serde_json::json;

fn tiny(name: &str) -> serde_json::Value {
    json!({"name": name, "kind": "job", "image": "busybox:latest", "command": ["true"],
           "resources": {"cpus": 0.02, "memory": "64MiB", "gpus": 0}})
}

#[tokio::test]
async fn a_burst_of_two_hundred_shares_passes_and_all_start() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let token = hub.user(&admin, "alice").await;
    let controller = &hub.server.as_ref().unwrap().state.controller;
    let before = controller.passes();
    let names: Vec<String> = (0..200).map(|i| format!("burst-{i}")).collect();
    futures::future::join_all(names.iter().map(|n| hub.submit(&token, tiny(n)))).await;
    for n in &names {
        hub.wait_state(&token, n, "running").await;
    }
    let passes = controller.passes() - before;
    // 200 kicks and 200 `started` events: one pass each would be 400
    assert!(passes < 40, "{passes} passes for a burst of 200 submissions");
    assert!(passes >= 1);
}

#[tokio::test]
async fn a_lone_submission_starts_without_waiting_for_the_tick() {
    let hub = Hub::start_with(|c| c.reconcile_secs = 3600).await;
    let admin = hub.admin().await;
    let token = hub.user(&admin, "bob").await;
    hub.submit(&token, tiny("alone")).await;
    hub.wait_state(&token, "alone", "running").await;
}
