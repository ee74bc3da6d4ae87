//! Images pulled on first use, on the fake engine and its scripted registry: an image `image_allow`
//! names that the engine lacks is submitted `pulling`, shows the pull's progress in the API, is pulled
//! with its registry's configured credentials and then queued and run; a registry's refusal fails the
//! workload with the registry's words; a stop while pulling stops it; a reference no policy allows is
//! a 422 on `image` naming the policy; credentials never show in the configuration's `Debug`.

use gpuhub_testkit as common;

use common::Hub;
use gpuhub_driver::fake::Call;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::time::Duration;

fn job(name: &str, image: &str) -> Value {
    json!({"name": name, "kind": "job", "image": image, "command": ["sleep", "100"],
        "resources": {"cpus": 0.1, "memory": "64MiB", "gpus": 0}})
}

#[tokio::test]
async fn allowed_images_are_pulled_with_progress_and_others_refused() {
    let hub = Hub::start_with(|c| {
        c.allow_any_image = false;
        c.image_allow = vec!["registry.test/*".into()];
        c.registries = vec![gpuhub_server::config::RegistryConfig {
            server: "registry.test".into(),
            username: "robot".into(),
            password: "s3cret-pw".into(),
        }];
    })
    .await;
    let cfg = format!("{:?}", hub.server.as_ref().unwrap().state.config);
    assert!(!cfg.contains("s3cret-pw") && cfg.contains("robot"), "registry password in Debug: {cfg}");
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    hub.runtime.set_registry("registry.test/ok:1", Ok(()));
    hub.runtime.set_registry("registry.test/bad:1", Err("manifest unknown: no such tag".into()));
    hub.runtime.hold_pulls(true);

    let w = hub.submit(&alice, job("p", "registry.test/ok:1")).await;
    assert_eq!(
        (w["state"].as_str(), w["message"].as_str()),
        (Some("pulling"), Some("pulling registry.test/ok:1")),
        "{w}"
    );
    // the pull's progress, as the engine reports it (half-way, held there)
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let v = loop {
        let v = hub.get(&alice, "p").await;
        if v["pull"]["current_bytes"] == 500 {
            break v;
        }
        assert!(tokio::time::Instant::now() < deadline, "no progress shown: {v}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(v["state"], "pulling");
    assert_eq!(
        v["pull"],
        json!({"status": "Downloading", "current_bytes": 500, "total_bytes": 1000, "layers": 1, "layers_done": 0})
    );
    hub.runtime.hold_pulls(false);
    hub.wait_state(&alice, "p", "running").await;
    assert!(hub.runtime.calls().contains(&Call::Pull("registry.test/ok:1".into(), Some("robot".into()))));
    let (_, h) = hub.call(Method::GET, "/api/v1/workloads/p", Some(&alice), None).await;
    let states: Vec<&str> = h["history"].as_array().unwrap().iter().filter_map(|s| s["state"].as_str()).collect();
    assert_eq!(&states[..3], ["pulling", "queued", "starting"], "{h}");
    assert_eq!(h["history"][1]["message"], "pulled 1000B (1 layer); queued", "what it fetched is kept: {h}");

    // the registry refuses: failed, in its words
    hub.submit(&alice, job("b", "registry.test/bad:1")).await;
    let v = hub.wait_state(&alice, "b", "failed").await;
    let m = v["message"].as_str().unwrap();
    assert!(m.contains("could not pull registry.test/bad:1") && m.contains("manifest unknown: no such tag"), "{v}");

    // stopped while pulling
    hub.runtime.set_registry("registry.test/slow:1", Ok(()));
    hub.runtime.hold_pulls(true);
    hub.submit(&alice, job("s", "registry.test/slow:1")).await;
    let (s, v) = hub.call(Method::POST, "/api/v1/workloads/s/stop", Some(&alice), None).await;
    assert!(s.is_success(), "{s} {v}");
    let v = hub.wait_state(&alice, "s", "stopped").await;
    assert_eq!(v["message"], "stopped while its image was pulled", "{v}");
    hub.runtime.hold_pulls(false);

    // an engine that cannot pull (the Slurm engine) refuses at once, saying where to pull
    hub.runtime.set_can_pull(false);
    hub.runtime.set_registry("registry.test/later:1", Ok(()));
    let (s, v) =
        hub.call(Method::POST, "/api/v1/workloads", Some(&alice), Some(job("l", "registry.test/later:1"))).await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("image")), "{v}");
    assert!(v["detail"].as_str().unwrap().contains("pulls no images"), "{v}");
    hub.runtime.set_can_pull(true);

    // no policy lets these be run or pulled
    let (s, v) =
        hub.call(Method::POST, "/api/v1/workloads", Some(&alice), Some(job("x", "docker.io/library/python:3"))).await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("image")), "{v}");
    assert!(v["detail"].as_str().unwrap().contains("registry docker.io is not allowed"), "{v}");
}
