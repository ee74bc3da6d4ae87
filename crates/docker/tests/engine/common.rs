//! Shared helpers: the image, unique names, specs, cleanup, and bounded waits.

use futures::StreamExt;
use gpuhub_docker::DockerRuntime;
use gpuhub_docker::{ContainerSpec, ContainerStatus, GpuAttach};
use gpuhub_driver::{LABEL_OWNER, LABEL_WORKLOAD};
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

/// The test image, built by the repository's script when missing.
pub const IMAGE: &str = gpuhub_testkit::docker::BUSYBOX;
/// The safety net on every wait: far above what any of these needs.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A runtime connected to the local engine, with the test image present.
pub async fn runtime() -> DockerRuntime {
    gpuhub_testkit::docker::ensure_busybox();
    let rt = DockerRuntime::connect().await.expect("a docker engine on this machine");
    assert!(rt.image_exists(IMAGE).await.unwrap());
    rt
}

/// A name no other test (or earlier run) uses.
pub fn unique(what: &str) -> String {
    format!("gpuhub-test-{what}-{}", &uuid::Uuid::new_v4().simple().to_string()[..12])
}

/// A labelled container spec running `script` with `sh -c` as 10000:10000.
pub fn spec(name: &str, script: &str) -> ContainerSpec {
    ContainerSpec {
        name: name.to_owned(),
        image: IMAGE.to_owned(),
        command: vec!["sh".into(), "-c".into(), script.into()],
        env: BTreeMap::new(),
        labels: BTreeMap::from([
            (LABEL_OWNER.to_owned(), "tester".to_owned()),
            (LABEL_WORKLOAD.to_owned(), name.to_owned()),
        ]),
        user: "10000:10000".into(),
        hostname: None,
        working_dir: None,
        cpu_milli: 500,
        memory_bytes: 64 << 20,
        pids_limit: 64,
        mounts: vec![],
        network: None,
        aliases: vec![],
        gpus: GpuAttach::None,
        log_max_bytes: None,
        groups: Vec::new(),
        disk_bytes: None,
    }
}

/// Removes what a test made, even when it fails: containers first, then networks.
#[derive(Debug, Default)]
pub struct Cleanup {
    containers: Vec<String>,
    networks: Vec<String>,
}

impl Cleanup {
    /// Remembers a container (by name or id) to remove.
    pub fn container(&mut self, name: &str) {
        self.containers.push(name.to_owned());
    }

    /// Remembers a network to remove.
    pub fn network(&mut self, name: &str) {
        self.networks.push(name.to_owned());
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if !self.containers.is_empty() {
            let _ = Command::new("docker").args(["rm", "-f", "-v"]).args(&self.containers).output();
        }
        if !self.networks.is_empty() {
            let _ = Command::new("docker").args(["network", "rm"]).args(&self.networks).output();
        }
    }
}

/// Creates and starts a container; returns its id.
pub async fn run(rt: &DockerRuntime, cleanup: &mut Cleanup, spec: &ContainerSpec) -> String {
    cleanup.container(&spec.name);
    let id = rt.create(spec).await.unwrap();
    rt.start(&id).await.unwrap();
    id
}

/// Everything the container writes, read with `follow` (so: until it ends).
pub async fn output(rt: &DockerRuntime, id: &str) -> String {
    let mut logs = rt.logs(id, true, None).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(PATIENCE, async {
        while let Some(chunk) = logs.next().await {
            out.extend_from_slice(&chunk.unwrap());
        }
    })
    .await
    .expect("the log stream ends when the container does");
    String::from_utf8(out).unwrap()
}

/// Runs a container to its end: its output and exit code.
pub async fn run_to_end(rt: &DockerRuntime, cleanup: &mut Cleanup, spec: &ContainerSpec) -> (String, i64) {
    let id = run(rt, cleanup, spec).await;
    let out = output(rt, &id).await;
    match rt.inspect(&id).await.unwrap().status {
        ContainerStatus::Exited(code) => (out, code),
        other => panic!("{} still {other:?} after its log ended; output {out:?}", spec.name),
    }
}
