//! `gpuhub gpu-check` on a host without an NVIDIA GPU or driver (this machine, CI): one sentence and
//! exit code 3, as a table and as JSON. On a GPU host the test says so and checks nothing else: the
//! real run is `gpuhub gpu-check` itself.

use gpuhub_testkit::process::{clean_command, describe};
use std::process::Output;

/// `gpuhub ARGS`, without this process's `GPUHUB_*` variables (the kit's command), its output kept.
fn gpuhub(args: &[&str]) -> Output {
    clean_command(env!("CARGO_BIN_EXE_gpuhub")).args(args).output().expect("run gpuhub")
}

fn gpu_check(args: &[&str]) -> Output {
    gpuhub(&[&["gpu-check"], args].concat())
}

fn nvml_here() -> bool {
    gpuhub_gpu::NvmlInventory::try_new().is_ok()
}

#[test]
fn without_a_gpu_it_says_so_and_exits_3() {
    if nvml_here() {
        eprintln!("NVML loads on this host: the no-GPU answer cannot be checked here");
        return;
    }
    let out = gpu_check(&[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    assert_eq!(
        stdout,
        "gpu-check: no NVIDIA GPU or driver on this host: nvml is not available (libnvidia-ml.so.1 missing or nvidia driver not loaded)\n"
    );

    let out = gpu_check(&["--json", "--skip-mps"]);
    assert_eq!(out.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["ok"], false);
    assert!(
        v["no_gpu"].as_str().is_some_and(|s| s.starts_with("gpu-check: no NVIDIA GPU or driver on this host: ")),
        "{v}"
    );
}

#[test]
fn the_worker_says_when_cuda_cannot_load() {
    if nvml_here() {
        eprintln!("NVML loads on this host: the worker would load a real GPU");
        return;
    }
    let out = gpuhub(&["gpu-check-worker", "--mib", "1", "--seconds", "0"]);
    assert_eq!(out.status.code(), Some(1));
    let line = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(line.trim()).expect("one json line");
    assert_eq!((v["event"].as_str(), v["stage"].as_str()), (Some("failed"), Some("driver")), "{v}");
    assert!(v["error"].as_str().is_some_and(|e| e.contains("cuda")), "{v}");
    assert!(out.stderr.is_empty(), "no panic message: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn the_worker_is_hidden_from_help() {
    let out = gpuhub(&["--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("gpu-check"), "{help}");
    assert!(!help.contains("gpu-check-worker"), "{help}");
}
