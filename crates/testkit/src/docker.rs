//! Real containers for the tests of the ways into a workspace (`proxy`, `ssh`): started through the real
//! Docker runtime as a workspace's would be, removed with their network when dropped.

use gpuhub_docker::{ContainerSpec, DockerRuntime};
use std::collections::BTreeMap;
use std::process::Command;
use std::sync::{Mutex, Once};

/// The UID (and GID) a test container runs as.
pub const UID: &str = "10000";

/// The local test image `scripts/build-busybox-image.sh` builds.
pub const BUSYBOX: &str = "gpuhub/busybox:latest";

/// Builds [`BUSYBOX`] once in a process when the local Docker engine does not have it; panics when the
/// build fails.
pub fn ensure_busybox() {
    static BUILT: Once = Once::new();
    BUILT.call_once(|| {
        let present = Command::new("docker").args(["image", "inspect", BUSYBOX]).output().unwrap().status.success();
        if !present {
            let script = crate::process::repo_root().join("scripts/build-busybox-image.sh");
            let out = Command::new("bash").arg(script).output().unwrap();
            assert!(out.status.success(), "building {BUSYBOX} failed: {}", String::from_utf8_lossy(&out.stderr));
        }
    });
}

/// Runs `scripts/SCRIPT` of the repository (an image build; one at a time in a process); an error when
/// it fails.
pub fn build_image(script: &str) -> anyhow::Result<()> {
    static LOCK: Mutex<()> = Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let status = Command::new("bash").arg(crate::process::repo_root().join("scripts").join(script)).status()?;
    anyhow::ensure!(status.success(), "{script} failed: {status}");
    Ok(())
}

/// A container removed (with its network) when dropped.
#[derive(Debug)]
pub struct Container {
    pub id: String,
    pub network: String,
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rm", "-f", &self.id]).output();
        let _ = Command::new("docker").args(["network", "rm", &self.network]).output();
    }
}

/// What a test container gets besides its image and command.
#[derive(Debug, Clone, Copy)]
pub struct Limits<'a> {
    /// Its container and network are named `gpuhub-test-PREFIX-TAG`, its workload label `PREFIX-test-TAG`.
    pub prefix: &'a str,
    pub cpu_milli: u64,
    pub memory_bytes: u64,
}

/// Starts `image` running `command` as [`UID`] (`HOME=/tmp`, hostname `ws`) on a network of its own,
/// through the real runtime.
pub async fn container(
    runtime: &DockerRuntime,
    limits: Limits<'_>,
    image: &str,
    command: &[&str],
) -> anyhow::Result<Container> {
    let tag = uuid::Uuid::new_v4().simple().to_string()[..10].to_string();
    let network = format!("gpuhub-test-{}-{tag}", limits.prefix);
    runtime.ensure_network(&network, &BTreeMap::new()).await?;
    let spec = ContainerSpec {
        name: format!("gpuhub-test-{}-{tag}", limits.prefix),
        image: image.to_string(),
        command: command.iter().map(|s| s.to_string()).collect(),
        env: BTreeMap::from([("HOME".to_string(), "/tmp".to_string())]),
        // a workload's label: the engine takes a container without a run label as a run of its own
        labels: BTreeMap::from([(gpuhub_driver::LABEL_WORKLOAD.to_string(), format!("{}-test-{tag}", limits.prefix))]),
        user: format!("{UID}:{UID}"),
        hostname: Some("ws".into()),
        working_dir: Some("/tmp".into()),
        cpu_milli: limits.cpu_milli,
        memory_bytes: limits.memory_bytes,
        pids_limit: 512,
        mounts: vec![],
        network: Some(network.clone()),
        aliases: vec![],
        gpus: Default::default(),
        log_max_bytes: None,
        groups: Vec::new(),
        disk_bytes: None,
    };
    let id = match runtime.create(&spec).await {
        Ok(id) => id,
        Err(e) => {
            let _ = Command::new("docker").args(["network", "rm", &network]).output();
            return Err(e.into());
        }
    };
    let c = Container { id, network };
    runtime.start(&c.id).await?;
    Ok(c)
}
