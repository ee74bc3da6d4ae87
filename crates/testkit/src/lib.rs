//! gpuhub's shared test kit, a dev-dependency of the integration tests (`tests/` of each crate):
//!
//! - [`Hub`]: an in-process server on `127.0.0.1:0` (API, portal and SSH gateway) over a temp data dir
//!   and the recording [`FakeEngine`], with its admin, users and their tokens ([`Hub::admin`],
//!   [`Hub::user`]), calls that check every error is a problem document ([`Hub::call`]), and waits on
//!   the hub's own signals instead of sleeps ([`Hub::wait_state`] on the controller's change feed,
//!   [`Hub::until_round`] on the monitor's rounds);
//! - the fixtures around it: one [`node`] of fake [`h200`]s ([`node_with`] in sharing modes), the
//!   [`config`] every hub starts from, a [`job`] submission, and a [`run_spec`] that tests of the
//!   engines and the monitor change only where they are about something;
//! - [`Recorder`]: what a fake was asked, as a log a test waits on (each entry wakes the waiters);
//! - [`controller`]: the controller alone over the fake engine, a SQLite file store and a manual clock,
//!   restarted over the same store and engine (the controller's scenarios);
//! - [`mps`]: a scripted `nvidia-cuda-mps-control` for the MPS supervisor where no GPU exists;
//! - [`docker`]: real containers started through the Docker runtime as a workspace's would be, for the
//!   tests of the ways into one (`proxy`, `ssh`);
//! - [`slapd`] and [`oidc_provider`]: a real OpenLDAP `slapd` and a real OpenID provider
//!   (`oidc-provider-mock`), each started by the test (the identity crate's tests and gpuhub's);
//! - [`registry`]: a real image registry (`docker-registry`), a relay that holds a pull part-way, and a
//!   test image with a layer of its own pushed to it (gpuhub's pull tests, the LXD engine's);
//! - [`process`]: helpers of the tests that run the `gpuhub` binary as a subprocess (its output kept,
//!   commands without the caller's `GPUHUB_*`, polls of what gives no signal, fake GPU device nodes,
//!   users' containers removed);
//! - [`http`]: a small in-test HTTP server on `127.0.0.1:0` that records what it is sent (the CLI's
//!   tests, the Kubernetes engine's exec stream), and problem documents;
//! - [`program`]: fake programs (shell scripts, one that records its arguments);
//! - [`mounts`]: the mounts a test made (loop images, homes) undone when it ends.
//!
//! Only tests use it: `publish = false`, and the layering check (`scripts/check-layers.py`) keeps it on
//! the top layer, where no crate's `[dependencies]` can name it. Being test code, its fallible helpers
//! return `anyhow` errors.

pub mod controller;
pub mod docker;
pub mod http;
mod hub;
pub mod mounts;
pub mod mps;
pub mod oidc_provider;
pub mod postgres;
pub mod process;
pub mod program;
mod recorder;
pub mod registry;
pub mod slapd;

pub use hub::Hub;
pub use recorder::{CEILING, Recorder};

use gpuhub_core::node::{GpuDevice, GpuSharing, NodeCapacity};
use gpuhub_core::{Bytes, CpuMilli};
use gpuhub_driver::fake::FakeEngine;
use gpuhub_server::config::Config;
use serde_json::{Value, json};
use std::sync::Arc;

/// The first admin's password (`admin_password` of [`config`]).
pub const ADMIN_PASSWORD: &str = "admin-password";

/// The GPU `uuid` at `index`: an H200 of 141 GiB, no device node, no sharing.
pub fn h200(uuid: &str, index: u32) -> GpuDevice {
    GpuDevice { uuid: uuid.into(), index, model: "H200".into(), memory: Bytes(141 << 30), device: None, sharing: None }
}

/// The node `test-node`: 8 cores, 32 GiB and `gpus` [`h200`]s (`GPU-fake-0` …), no sharing.
pub fn node(gpus: u32) -> NodeCapacity {
    NodeCapacity {
        name: "test-node".into(),
        cpus: CpuMilli(8000),
        memory: Bytes(32 << 30),
        gpus: (0..gpus).map(|i| h200(&format!("GPU-fake-{i}"), i)).collect(),
        labels: Default::default(),
    }
}

pub use gpuhub_driver::fake::run_spec;

/// [`node`] with one GPU for each of `modes`, shared in that mode.
pub fn node_with(modes: &[GpuSharing]) -> NodeCapacity {
    let mut node = node(modes.len() as u32);
    for (g, m) in node.gpus.iter_mut().zip(modes) {
        g.sharing = Some(*m);
    }
    node
}

/// A fake engine that places like Docker, on one node with two GPUs.
pub fn fake() -> Arc<FakeEngine> {
    Arc::new(FakeEngine::new().with_nodes(vec![node(2)]))
}

/// A hub's configuration on `dir`: API and SSH gateway on `127.0.0.1:0`, data in `dir/data`, the first
/// admin's password [`ADMIN_PASSWORD`], the rest defaults.
pub fn config(dir: &std::path::Path) -> Config {
    Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        ssh_listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.join("data"),
        admin_password: Some(ADMIN_PASSWORD.into()),
        ..Config::default()
    }
}

/// A submission of the job `name` (busybox, `true`) asking for one core, 1 GiB and `gpus` GPUs.
pub fn job(name: &str, gpus: u32) -> Value {
    json!({"name": name, "kind": "job", "image": "busybox:latest", "command": ["true"], "resources": {"cpus": 1, "memory": "1GiB", "gpus": gpus}})
}

/// Logs through the test harness (shown for failing tests), at `RUST_LOG`'s level, else `warn`; once per
/// process.
pub fn init_tracing() {
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_test_writer().try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_with_modes_has_one_gpu_a_mode() {
        let n = node_with(&[GpuSharing::Guard, GpuSharing::Mps]);
        assert_eq!(n.gpus.len(), 2);
        assert_eq!(n.gpus[1].uuid, "GPU-fake-1");
        assert_eq!(
            n.gpus.iter().map(|g| g.sharing).collect::<Vec<_>>(),
            [Some(GpuSharing::Guard), Some(GpuSharing::Mps)]
        );
    }

    #[test]
    fn a_job_asks_for_its_gpus() {
        assert_eq!(job("a", 3)["resources"]["gpus"], 3);
        assert_eq!(job("a", 3)["name"], "a");
    }
}
