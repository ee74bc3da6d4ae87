//! `ConfiguredInventory` against real device nodes: two `mknod` character devices in a tempdir (like
//! `/dev/nvidia0` and `/dev/nvidia1`, major 195) are accepted; a regular file and a missing path are not.
//! Making device nodes needs root (CAP_MKNOD); the tests run as root in CI.

use gpuhub_core::node::GpuDevice;
use gpuhub_gpu::{ConfiguredInventory, GpuError, GpuInventory};
use gpuhub_testkit::h200;
use gpuhub_testkit::process::gpu_device_node;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// A fake GPU device node (the kit's, as the hub's tests make them), checked to be a character device.
fn mknod(path: &Path, minor: u32) {
    gpu_device_node(path, minor).unwrap();
    assert!(std::fs::metadata(path).unwrap().file_type().is_char_device());
}

/// The kit's H200 `uuid` on `device`.
fn gpu(uuid: &str, device: &Path) -> GpuDevice {
    GpuDevice { device: Some(device.to_str().unwrap().to_owned()), ..h200(uuid, 0) }
}

#[test]
fn accepts_mknod_device_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let (n0, n1) = (dir.path().join("nvidia0"), dir.path().join("nvidia1"));
    mknod(&n0, 0);
    mknod(&n1, 1);

    let inv = ConfiguredInventory::new(vec![gpu("GPU-fake-0", &n0), gpu("GPU-fake-1", &n1)]).unwrap();
    let gpus = inv.gpus().unwrap();
    assert_eq!(gpus.len(), 2);
    assert_eq!((gpus[0].uuid.as_str(), gpus[0].index), ("GPU-fake-0", 0));
    assert_eq!((gpus[1].uuid.as_str(), gpus[1].index), ("GPU-fake-1", 1));
    assert_eq!(gpus[0].device.as_deref(), n0.to_str());
    assert_eq!(gpus[1].device.as_deref(), n1.to_str());
    let samples = inv.sample().unwrap();
    assert_eq!(samples.iter().map(|s| s.uuid.as_str()).collect::<Vec<_>>(), ["GPU-fake-0", "GPU-fake-1"]);
}

#[test]
fn rejects_a_regular_file() {
    let dir = tempfile::tempdir().unwrap();
    let node = dir.path().join("nvidia0");
    mknod(&node, 0);
    let file = dir.path().join("nvidia1");
    std::fs::write(&file, b"not a device").unwrap();

    let err = ConfiguredInventory::new(vec![gpu("GPU-fake-0", &node), gpu("GPU-fake-1", &file)]).unwrap_err();
    match &err {
        GpuError::InvalidConfig { gpu, reason } => {
            assert_eq!(gpu, "GPU-fake-1");
            assert_eq!(reason, &format!("device {} is not a character device", file.display()));
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    assert!(err.to_string().contains("GPU-fake-1") && err.to_string().contains(file.to_str().unwrap()), "{err}");
}

#[test]
fn rejects_a_missing_path() {
    let dir = tempfile::tempdir().unwrap();
    let node = dir.path().join("nvidia0");
    mknod(&node, 0);
    let missing = dir.path().join("nvidia7");

    let err = ConfiguredInventory::new(vec![gpu("GPU-fake-0", &node), gpu("GPU-fake-7", &missing)]).unwrap_err();
    assert_eq!(err.to_string(), format!("invalid gpu GPU-fake-7: device {} does not exist", missing.display()));
}
