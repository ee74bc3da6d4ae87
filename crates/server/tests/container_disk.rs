//! `container_disk` (security review 2, N1: a job's `dd` into `/tmp` filled the host's disk): every run
//! carries the cap to its engine, and a cap the engine cannot enforce stops the server at start, saying
//! why, instead of running containers that write without limit. A workload may ask for its own cap
//! (`disk`) within its queue's `max_disk`, which also caps the default.

use gpuhub_testkit as common;

use common::*;
use gpuhub_driver::fake::Call;
use gpuhub_server::ServeError;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::sync::Arc;

const CAP: u64 = 20 << 30;

fn capped(dir: &std::path::Path) -> gpuhub_server::config::Config {
    gpuhub_server::config::Config { container_disk: Some(gpuhub_core::Bytes(CAP)), ..config(dir) }
}

/// A hub with `container_disk` of `CAP` on an engine that enforces it.
async fn capped_hub() -> Hub {
    let dir = tempfile::tempdir().unwrap();
    let runtime = fake();
    runtime.set_disk_cap(Ok(()));
    let server = gpuhub_server::start_with(capped(dir.path()), runtime.clone(), Default::default()).await.unwrap();
    Hub::from_server(server, runtime, dir)
}

/// Submits `name` to `queue` asking for `disk` (none when `None`): the answer's status and body.
async fn submit_disk(hub: &Hub, token: &str, name: &str, queue: &str, disk: Option<&str>) -> (StatusCode, Value) {
    let mut body = job(name, 0);
    body["queue"] = json!(queue);
    if let Some(d) = disk {
        body["disk"] = json!(d);
    }
    hub.call(Method::POST, "/api/v1/workloads", Some(token), Some(body)).await
}

/// Once `name` runs: the cap its run was given, and the one its view shows.
async fn cap_of(hub: &Hub, token: &str, name: &str) -> (Option<u64>, Value) {
    let v = hub.wait_state(token, name, "running").await;
    let id = v["id"].as_str().unwrap().to_owned();
    let spec = hub.runtime.calls().into_iter().find_map(|c| match c {
        Call::Submit(s) if s.labels.values().any(|l| *l == id) => Some(s),
        _ => None,
    });
    (spec.expect("its run was submitted").disk_bytes, v["disk"].clone())
}

async fn queue_with_max(hub: &Hub, admin: &str, name: &str, max: &str) {
    let body = json!({"name": name, "max_disk": max});
    let (s, v) = hub.call(Method::POST, "/api/v1/queues", Some(admin), Some(body)).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(v["max_disk"], max);
}

/// A request within its queue's maximum is the run's cap; one above it is refused naming the queue and
/// its maximum; no request gets the admin's default.
#[tokio::test]
async fn a_workloads_disk_is_its_runs_cap_within_its_queues_maximum() {
    let hub = capped_hub().await;
    let admin = hub.admin().await;
    queue_with_max(&hub, &admin, "vision", "50GiB").await;
    let (s, v) = submit_disk(&hub, &admin, "big", "vision", Some("40GiB")).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(cap_of(&hub, &admin, "big").await, (Some(40 << 30), json!("40GiB")));
    let (s, v) = submit_disk(&hub, &admin, "huge", "vision", Some("60GiB")).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert_eq!(v["detail"], "invalid disk: 60GiB is above queue vision's maximum of 50GiB (max_disk)", "{v}");
    let (s, v) = submit_disk(&hub, &admin, "tiny", "vision", Some("1MiB")).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    let (s, v) = submit_disk(&hub, &admin, "plain", "vision", None).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(cap_of(&hub, &admin, "plain").await, (Some(CAP), json!("20GiB")), "the admin's default");
}

/// A queue whose maximum is below the admin's default caps the default at it.
#[tokio::test]
async fn a_queues_maximum_below_the_default_caps_it() {
    let hub = capped_hub().await;
    let admin = hub.admin().await;
    queue_with_max(&hub, &admin, "small", "10GiB").await;
    let (s, v) = submit_disk(&hub, &admin, "plain", "small", None).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(cap_of(&hub, &admin, "plain").await, (Some(10 << 30), json!("10GiB")));
}

/// A queued workload moved by an admin to a queue whose maximum is below its cap is refused, naming both;
/// one within it moves.
#[tokio::test]
async fn a_queued_workload_moves_only_to_a_queue_whose_maximum_holds_its_cap() {
    let hub = capped_hub().await;
    let admin = hub.admin().await;
    queue_with_max(&hub, &admin, "small", "10GiB").await;
    queue_with_max(&hub, &admin, "roomy", "30GiB").await;
    // both GPUs held, so what asks for one waits
    hub.submit(
        &admin,
        json!({"name": "blocker", "kind": "workspace", "image": "busybox:latest",
        "resources": {"cpus": 1, "memory": "1GiB", "gpus": 2}}),
    )
    .await;
    hub.wait_state(&admin, "blocker", "running").await;
    for (name, disk) in [("own", Some("20GiB")), ("default", None)] {
        let mut body = job(name, 1);
        if let Some(d) = disk {
            body["disk"] = json!(d);
        }
        let (s, v) = hub.call(Method::POST, "/api/v1/workloads", Some(&admin), Some(body)).await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
        let (s, v) = hub
            .call(Method::PATCH, &format!("/api/v1/workloads/{name}"), Some(&admin), Some(json!({"queue": "small"})))
            .await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{name}: {v}");
        let want = format!(
            "invalid queue: {name}'s disk cap (20GiB) is above queue small's maximum of 10GiB (max_disk); \
             submit it anew in that queue"
        );
        assert_eq!(v["detail"], want.as_str(), "{v}");
        assert_ne!(hub.get(&admin, name).await["queue"], "small", "not moved");
        let (s, v) = hub
            .call(Method::PATCH, &format!("/api/v1/workloads/{name}"), Some(&admin), Some(json!({"queue": "roomy"})))
            .await;
        assert_eq!(s, StatusCode::OK, "{name}: {v}");
        assert_eq!(v["queue"], "roomy", "{v}");
    }
}

/// On an engine that cannot cap a writable layer (and no `container_disk`), a request for a cap and a
/// queue maximum are refused with the engine's reason, never run unenforced.
#[tokio::test]
async fn a_cap_the_engine_cannot_enforce_is_refused_with_its_reason() {
    let hub = Hub::start().await;
    hub.runtime.set_disk_cap(Err("its storage keeps no per-container quota".into()));
    let admin = hub.admin().await;
    let (s, v) = submit_disk(&hub, &admin, "capped", "", Some("5GiB")).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert_eq!(
        v["detail"],
        "invalid disk: the fake engine cannot cap what a container writes outside its mounts: its storage keeps \
         no per-container quota",
        "{v}"
    );
    let body = json!({"name": "vision", "max_disk": "50GiB"});
    let (s, v) = hub.call(Method::POST, "/api/v1/queues", Some(&admin), Some(body)).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("its storage keeps no per-container quota"), "{v}");
    // without a request nothing is capped, as before
    let (s, v) = submit_disk(&hub, &admin, "free", "", None).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(cap_of(&hub, &admin, "free").await, (None, Value::Null));
}

/// An engine that caps writable layers gets the cap in every run it is given.
#[tokio::test]
async fn every_run_carries_the_cap_to_an_engine_that_enforces_it() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = fake();
    runtime.set_disk_cap(Ok(()));
    let server = gpuhub_server::start_with(capped(dir.path()), runtime.clone(), Default::default()).await.unwrap();
    let hub = Hub::from_server(server, runtime, dir);
    let admin = hub.admin().await;
    hub.submit(&admin, job("fill-tmp", 0)).await;
    hub.wait_state(&admin, "fill-tmp", "running").await;
    let caps: Vec<Option<u64>> = hub
        .runtime
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::Submit(s) => Some(s.disk_bytes),
            _ => None,
        })
        .collect();
    assert_eq!(caps, [Some(CAP)], "the run's containers are capped at container_disk");
}

/// Without `container_disk` nothing is capped (as before), and the server still starts.
#[tokio::test]
async fn no_cap_unless_configured() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    hub.submit(&admin, job("free", 0)).await;
    hub.wait_state(&admin, "free", "running").await;
    let submitted = hub.runtime.calls().into_iter().find_map(|c| match c {
        Call::Submit(s) => Some(s),
        _ => None,
    });
    assert_eq!(submitted.unwrap().disk_bytes, None);
}

/// An engine that cannot enforce the cap stops the server before it has made anything, with the
/// engine's reason and what to do.
#[tokio::test]
async fn a_cap_the_engine_cannot_enforce_stops_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = fake();
    runtime.set_disk_cap(Err("its storage keeps no per-container quota".into()));
    let err = gpuhub_server::start_with(capped(dir.path()), runtime, Default::default()).await.unwrap_err();
    assert!(matches!(err, ServeError::Disk(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        "container_disk = \"20GiB\" cannot be enforced by the fake engine: its storage keeps no per-container \
         quota; or unset container_disk (containers' writable layers are then unlimited)"
    );
    assert!(!dir.path().join("data").exists(), "nothing was made");
}

/// This machine's Docker keeps containers with overlay2 on ext4, which cannot cap a writable layer: the
/// engine finds that out itself, and the server refuses to start naming the filesystem.
#[tokio::test]
async fn the_real_docker_engine_here_refuses_a_cap_naming_its_filesystem() {
    let rt = gpuhub_docker::DockerRuntime::connect().await.expect("a docker engine on this machine");
    let storage = rt.storage().await.unwrap();
    if storage.driver != "overlay2" || storage.backing.as_deref() == Some("xfs") {
        eprintln!("this engine may cap writable layers ({storage:?}): nothing to refuse");
        return;
    }
    let answer = rt.disk_cap().await.unwrap();
    let engine = gpuhub_docker::DockerEngine::new(rt, node(0), gpuhub_docker::GpuMode::None).with_disk_cap(answer);
    let dir = tempfile::tempdir().unwrap();
    let err = gpuhub_server::start_with(capped(dir.path()), Arc::new(engine), Default::default()).await.unwrap_err();
    let text = err.to_string();
    let backing = storage.backing.unwrap();
    assert!(text.starts_with("container_disk = \"20GiB\" cannot be enforced by the docker engine: "), "{text}");
    assert!(text.contains(&format!("stores containers with overlay2 on {backing}")), "{text}");
    assert!(text.contains("overlay2 on XFS mounted with pquota"), "{text}");
    assert!(text.ends_with("or unset container_disk (containers' writable layers are then unlimited)"), "{text}");
}
