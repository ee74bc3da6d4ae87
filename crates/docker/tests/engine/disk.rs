//! The cap on a container's writable layer (`--storage-opt size=`, security review 2, N1): the engine is
//! asked whether its storage enforces one, and a cap it cannot enforce is refused, never ignored.
//! This machine's engine keeps containers with overlay2 on ext4, which cannot; a host that can (overlay2
//! on XFS with `pquota`) could not be tried here: this kernel has no XFS quota support.

use crate::common::*;
use gpuhub_docker::ContainerSpec;
use gpuhub_driver::EngineError;

#[tokio::test]
async fn the_probe_says_whether_the_storage_caps_and_names_it() {
    let rt = runtime().await;
    let storage = rt.storage().await.unwrap();
    let answer = rt.disk_cap().await.unwrap();
    let on_xfs = storage.backing.as_deref() == Some("xfs");
    if storage.driver == "overlay2" && !on_xfs {
        let why = answer.expect_err("overlay2 off XFS cannot cap a writable layer");
        let backing = storage.backing.clone().unwrap();
        assert!(why.contains(&format!("with overlay2 on {backing} in {}", storage.root)), "{why}");
        assert!(why.contains("XFS mounted with pquota"), "{why}");
        assert!(why.contains("Docker: --storage-opt is supported only for overlay over xfs"), "{why}");
        eprintln!("{why}");
    } else {
        eprintln!("this engine stores containers with {} on {:?}: {answer:?}", storage.driver, storage.backing);
    }
    // the probe leaves nothing behind
    let left = std::process::Command::new("docker").args(["images", "-q", "gpuhub-disk-probe"]).output().unwrap();
    assert!(String::from_utf8_lossy(&left.stdout).trim().is_empty(), "the probe's image is left");
    let left = std::process::Command::new("docker")
        .args(["ps", "-aq", "--filter", "name=gpuhub-disk-probe"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&left.stdout).trim().is_empty(), "the probe's container is left");
}

#[tokio::test]
async fn a_cap_the_engine_cannot_enforce_makes_no_container() {
    let rt = runtime().await;
    // (read from `docker info`: a probe here would race the other test's check that probes leave nothing)
    let storage = rt.storage().await.unwrap();
    if storage.driver != "overlay2" || storage.backing.as_deref() == Some("xfs") {
        eprintln!("this engine may cap writable layers ({storage:?}): nothing to refuse");
        return;
    }
    let name = unique("disk");
    let spec = ContainerSpec { disk_bytes: Some(64 << 20), ..spec(&name, "dd if=/dev/zero of=/tmp/f bs=1M count=128") };
    let err = rt.create(&spec).await.expect_err("a cap that cannot be enforced is refused, not ignored");
    assert!(matches!(&err, EngineError::Engine(m) | EngineError::Rejected(m) if m.contains("storage-opt")), "{err:?}");
    assert!(matches!(rt.inspect(&name).await, Err(EngineError::NotFound(_))), "no container was made");
}
