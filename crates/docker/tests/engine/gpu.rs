//! GPUs as device nodes: a container sees exactly the nodes it is given. (The NVIDIA device-request path
//! needs the NVIDIA Container Toolkit and a GPU; its translation is unit-tested in `src/config.rs`.)

use crate::common::*;
use gpuhub_docker::{DeviceMap, GpuAttach};
use gpuhub_driver::EngineError;
use std::path::Path;
use std::process::Command;

/// Two fake GPU nodes (`c 195 0` and `c 195 1`, as the NVIDIA driver's) in a fresh directory.
fn fake_gpus() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for minor in ["0", "1"] {
        let node = dir.path().join(format!("nvidia{minor}"));
        let status = Command::new("mknod").arg(&node).args(["c", "195", minor]).status().unwrap();
        assert!(status.success(), "mknod needs root");
    }
    dir
}

fn map(dir: &Path, minors: &[u32]) -> GpuAttach {
    let devices = minors
        .iter()
        .map(|m| DeviceMap {
            host: dir.join(format!("nvidia{m}")).to_str().unwrap().to_owned(),
            container: format!("/dev/nvidia{m}"),
        })
        .collect();
    GpuAttach::Devices { devices }
}

#[tokio::test]
async fn a_container_sees_only_its_gpu_nodes() {
    let rt = runtime().await;
    let mut cleanup = Cleanup::default();
    let dir = fake_gpus();

    let mut one = spec(&unique("gpu1"), "ls /dev/nvidia*; echo visible=$NVIDIA_VISIBLE_DEVICES");
    one.gpus = map(dir.path(), &[1]);
    one.env.insert("NVIDIA_VISIBLE_DEVICES".into(), "all".into());
    let (out, code) = run_to_end(&rt, &mut cleanup, &one).await;
    assert_eq!((out.as_str(), code), ("/dev/nvidia1\nvisible=void\n", 0));

    let mut two = spec(&unique("gpu2"), "ls /dev/nvidia*");
    two.gpus = map(dir.path(), &[0, 1]);
    let (out, _) = run_to_end(&rt, &mut cleanup, &two).await;
    assert_eq!(out, "/dev/nvidia0\n/dev/nvidia1\n");

    let none = spec(&unique("gpu0"), "ls /dev/nvidia* 2>/dev/null; echo done");
    let (out, _) = run_to_end(&rt, &mut cleanup, &none).await;
    assert_eq!(out, "done\n");
}

#[tokio::test]
async fn a_given_node_is_usable_and_others_are_not() {
    let rt = runtime().await;
    let mut cleanup = Cleanup::default();
    let dir = fake_gpus();
    // The device cgroup allows the given node (opening it reaches the missing driver: ENXIO) and
    // denies any other, even one made inside the container (no CAP_MKNOD either).
    let mut s = spec(
        &unique("gpucg"),
        "cat /dev/nvidia1 2>&1 | grep -q 'No such device' && echo given-ok; \
         mknod /tmp/n0 c 195 0 2>/dev/null || echo mknod-denied",
    );
    s.gpus = map(dir.path(), &[1]);
    let (out, _) = run_to_end(&rt, &mut cleanup, &s).await;
    assert_eq!(out, "given-ok\nmknod-denied\n");

    let mut bad = spec(&unique("gpurel"), "true");
    bad.gpus =
        GpuAttach::Devices { devices: vec![DeviceMap { host: "nvidia0".into(), container: "/dev/nvidia0".into() }] };
    assert!(matches!(rt.create(&bad).await, Err(EngineError::Rejected(_))));
}
