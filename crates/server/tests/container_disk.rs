//! `container_disk` (security review 2, N1: a job's `dd` into `/tmp` filled the host's disk): every run
//! carries the cap to its engine, and a cap the engine cannot enforce stops the server at start, saying
//! why, instead of running containers that write without limit.

mod common;

use common::*;
use gpuhub_driver::fake::Call;
use gpuhub_server::ServeError;
use std::sync::Arc;

const CAP: u64 = 20 << 30;

fn capped(dir: &std::path::Path) -> gpuhub_server::config::Config {
    gpuhub_server::config::Config { container_disk: Some(gpuhub_core::Bytes(CAP)), ..config(dir) }
}

/// An engine that caps writable layers gets the cap in every run it is given.
#[tokio::test]
async fn every_run_carries_the_cap_to_an_engine_that_enforces_it() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = fake();
    runtime.set_disk_cap(Ok(()));
    let server = gpuhub_server::start_with(capped(dir.path()), runtime.clone(), Default::default()).await.unwrap();
    let url = format!("http://{}", server.addr);
    let hub = Hub { server: Some(server), url, runtime, dir, http: reqwest::Client::new() };
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
