//! Pulling on LXD: an image of a registry (Debian's `docker-registry` on a loopback port, holding the test
//! image pushed under a name of its own) that the hub's Docker daemon lacks is pulled into it, with the
//! progress of its layers, and then runs in an LXD container; with a private registry's credentials too
//! (through a Docker configuration of the pull's own); an unknown tag is refused in the registry's words.

use crate::common::*;
use gpuhub_driver::{Engine, EngineError, MemberState};
use std::process::Command;
use std::sync::Mutex;

/// The references pushed to the test's registry; untagged in the Docker daemon when dropped.
struct Pushed(Vec<String>);

impl Drop for Pushed {
    fn drop(&mut self) {
        for r in &self.0 {
            let _ = Command::new("docker").args(["rmi", r]).output();
        }
    }
}

fn docker(args: &[&str]) {
    let out = Command::new("docker").args(args).output().unwrap();
    assert!(out.status.success(), "docker {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test]
async fn a_registry_image_is_pulled_into_docker_on_first_use_and_runs() {
    if skipped() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(&dir.path().join("state")).await;
    let mut cleanup = Cleanup { engine: engine.clone(), runs: vec![], images: vec![] };
    let registry = gpuhub_testkit::registry::Registry::start().unwrap();
    let mut pushed = Pushed(vec![]);
    // the test image in the registry under a name of its own, which the Docker daemon then forgets
    let image = format!("{}/lxd-pull/busybox:{}", registry.addr, unique("t").replace("gpuhub-test-", ""));
    pushed.0.push(image.clone());
    docker(&["tag", IMAGE, &image]);
    docker(&["push", &image]);
    docker(&["rmi", &image]);
    assert!(!engine.image_exists(&image).await.unwrap(), "the daemon still has {image}");

    let seen = Mutex::new(Vec::new());
    engine.pull(&image, None, &|p| seen.lock().unwrap().push(p)).await.unwrap();
    assert!(engine.image_exists(&image).await.unwrap(), "{image} was not pulled");
    let seen = seen.into_inner().unwrap();
    // Docker has the test image's layers already (under its own name): the pull's last word only
    let last = seen.last().expect("progress");
    assert!(last.status.starts_with("Downloaded newer image for") && last.layers_done == last.layers, "{seen:?}");

    let name = unique("pulled");
    let status = engine.submit(&spec(&name, &image, "echo ran the pulled image", None)).await.unwrap();
    cleanup.runs.push(status.id.clone());
    let state = until_state(&engine, &status.id, |s| matches!(s, MemberState::Exited(_))).await;
    let out = output(&engine, &status.id).await;
    assert_eq!(state, MemberState::Exited(0), "{out}");
    assert!(out.contains("ran the pulled image"), "{out}");

    // with a private registry's credentials: `docker login` into the pull's own configuration (this
    // registry takes anyone), then the pull; root's Docker configuration is not touched
    let root_config = std::fs::read("/root/.docker/config.json").ok();
    let second = format!("{image}-auth");
    pushed.0.push(second.clone());
    docker(&["tag", IMAGE, &second]);
    docker(&["push", &second]);
    docker(&["rmi", &second]);
    let auth = gpuhub_driver::RegistryAuth {
        server: registry.addr.clone(),
        username: "robot".into(),
        password: "s3cret-pull-password".into(),
    };
    engine.pull(&second, Some(&auth), &|_| {}).await.unwrap();
    assert!(engine.image_exists(&second).await.unwrap(), "{second} was not pulled with credentials");
    assert_eq!(std::fs::read("/root/.docker/config.json").ok(), root_config, "root's docker configuration changed");

    // an unknown tag: refused in the registry's words; nothing is left in the state directory
    let missing = format!("{}/lxd-pull/busybox:no-such-tag", registry.addr);
    let e = engine.pull(&missing, None, &|_| {}).await.unwrap_err();
    assert!(matches!(&e, EngineError::Rejected(m) if m.contains("not found") || m.contains("unknown")), "{e:?}");
    let images = dir.path().join("state/images");
    let left: Vec<_> = std::fs::read_dir(&images).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(left.iter().all(|n| !n.to_string_lossy().starts_with(".pull-")), "{left:?}");
}
