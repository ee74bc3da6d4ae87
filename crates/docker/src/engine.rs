//! [`DockerEngine`]: the engine interface on one Docker host. gpuhub places (the host is the one node);
//! each member of a run is a container named `<run>` (one member) or `<run>-<i>`, labelled with its
//! run and index. A run of several members (a gang) gets a bridge network of its own, on which each
//! member answers to its hostname, so `MASTER_ADDR` (member 0's hostname) resolves for the others.

mod gpus;

use crate::DockerRuntime;
use crate::cgroup::{self, HostFiles, ReadError};
use crate::container::{ContainerInfo, ContainerSpec, ContainerStatus};
use async_trait::async_trait;
use gpuhub_core::node::NodeCapacity;
use gpuhub_driver::{
    Capabilities, DEFAULT_MASTER_PORT, Engine, EngineError, EngineNode, EventStream, ExecHandle, ExecSpec,
    LABEL_INSTANCE, LABEL_MEMBER, LABEL_MEMBERS, LABEL_OWNER, LABEL_RUN, LABEL_WORKLOAD, LogStream, MemberRef,
    MemberState, MemberStatus, MemberUsage, Placement, RunSpec, RunStatus, rank_env,
};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::Duration;

pub use gpus::GpuMode;

/// Label listing the GPU UUIDs a member's container was given (comma-separated).
pub const LABEL_GPUS: &str = "gpuhub.gpus";

/// The GPU control nodes a container gets in `devices` mode, when the host has them.
pub const CONTROL_DEVICES: [&str; 3] = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"];

/// The most members one run may have on one host.
pub const MAX_MEMBERS: u32 = 64;

/// gpuhub's engine on one Docker host.
#[derive(Debug, Clone)]
pub struct DockerEngine {
    rt: DockerRuntime,
    node: NodeCapacity,
    gpu_mode: GpuMode,
    control_devices: Vec<String>,
    /// What [`Engine::disk_cap`] answers ([`DockerRuntime::disk_cap`]'s finding).
    disk_cap: Result<(), String>,
}

impl DockerEngine {
    /// The engine on `rt`, whose host offers `node`, handing GPUs to containers as `gpu_mode` says (with
    /// the GPU control nodes of [`CONTROL_DEVICES`] this host has, in `devices` mode).
    pub fn new(rt: DockerRuntime, node: NodeCapacity, gpu_mode: GpuMode) -> Self {
        let control_devices =
            CONTROL_DEVICES.iter().filter(|d| std::path::Path::new(d).exists()).map(|d| d.to_string()).collect();
        let disk_cap = Err("its storage was not asked whether it can cap containers' writable layers".into());
        Self { rt, node, gpu_mode, control_devices, disk_cap }
    }

    /// The engine saying that it caps each container's writable layer (`Ok`) or why it cannot, as
    /// [`DockerRuntime::disk_cap`] found.
    pub fn with_disk_cap(mut self, answer: Result<(), String>) -> Self {
        self.disk_cap = answer;
        self
    }

    /// The single-container runtime underneath.
    pub fn runtime(&self) -> &DockerRuntime {
        &self.rt
    }

    /// The name of the network private to a run of several members.
    pub fn run_network(run: &str) -> String {
        format!("{run}-net")
    }

    /// The containers of `member`'s run, or `NotFound`.
    async fn container(&self, member: &MemberRef) -> Result<ContainerInfo, EngineError> {
        let found = self.containers_of(&member.run).await?;
        found
            .into_iter()
            .find(|c| member_index(c) == member.member)
            .ok_or_else(|| EngineError::NotFound(format!("member {} of run {}", member.member, member.run)))
    }

    /// The containers of a run: those labelled with it, or (a container made before runs had labels) the
    /// container whose id or name is the run's.
    async fn containers_of(&self, run: &str) -> Result<Vec<ContainerInfo>, EngineError> {
        let labelled = self.rt.list_labelled(&format!("{LABEL_RUN}={run}")).await?;
        if !labelled.is_empty() {
            return Ok(labelled);
        }
        match self.rt.inspect(run).await {
            Ok(c) if c.labels.contains_key(LABEL_WORKLOAD) && !c.labels.contains_key(LABEL_RUN) => Ok(vec![c]),
            Ok(_) | Err(EngineError::NotFound(_)) => Err(EngineError::NotFound(format!("run {run}"))),
            Err(e) => Err(e),
        }
    }

    fn status(&self, run: &str, mut containers: Vec<ContainerInfo>) -> RunStatus {
        containers.sort_by_key(member_index);
        let labels = containers.first().map(|c| c.labels.clone()).unwrap_or_default();
        let size = labels.get(LABEL_MEMBERS).and_then(|n| n.parse().ok()).unwrap_or(1);
        let members = containers
            .iter()
            .map(|c| MemberStatus {
                index: member_index(c),
                engine_id: c.id.clone(),
                node: Some(self.node.name.clone()),
                state: match c.status {
                    ContainerStatus::Created => MemberState::Pending,
                    ContainerStatus::Running => MemberState::Running,
                    ContainerStatus::Exited(code) => MemberState::Exited(code),
                },
                gpus: c.labels.get(LABEL_GPUS).map(|g| split_list(g)).unwrap_or_default(),
            })
            .collect();
        // the run's own labels, without the per-member ones
        let labels = labels.into_iter().filter(|(k, _)| ![LABEL_MEMBER, LABEL_GPUS].contains(&k.as_str())).collect();
        RunStatus { id: run.to_owned(), labels, size, members, pending: None }
    }

    /// The container of each member of `spec`, on `network`.
    fn container_specs(&self, spec: &RunSpec, network: Option<&str>) -> Result<Vec<ContainerSpec>, EngineError> {
        let size = spec.members.len() as u32;
        let master = spec.members.first().map(|m| m.hostname.clone()).unwrap_or_default();
        let master_port = spec.env.get("MASTER_PORT").and_then(|p| p.parse().ok()).unwrap_or(DEFAULT_MASTER_PORT);
        let mut out = Vec::with_capacity(spec.members.len());
        for m in &spec.members {
            if let Some(node) = m.node.as_deref().filter(|n| *n != self.node.name) {
                return Err(EngineError::Rejected(format!(
                    "member {} is placed on node {node}, but this engine runs on {}",
                    m.index, self.node.name
                )));
            }
            let mut env = spec.env.clone();
            env.extend(m.env.clone());
            env.extend(rank_env(m.index, size, &master, master_port));
            let (gpus, gpu_env) = gpus::attach(self.gpu_mode, &self.node, &m.gpus, &self.control_devices)?;
            env.extend(gpu_env);
            let mut labels = spec.labels.clone();
            labels.insert(LABEL_RUN.to_owned(), spec.name.clone());
            labels.insert(LABEL_MEMBER.to_owned(), m.index.to_string());
            labels.insert(LABEL_MEMBERS.to_owned(), size.to_string());
            let held = m.gpus.uuids();
            if !held.is_empty() {
                labels.insert(LABEL_GPUS.to_owned(), held.join(","));
            }
            out.push(ContainerSpec {
                name: if size == 1 { spec.name.clone() } else { format!("{}-{}", spec.name, m.index) },
                image: spec.image.clone(),
                command: spec.command.clone(),
                env,
                labels,
                user: spec.identity.user(),
                hostname: Some(m.hostname.clone()),
                working_dir: spec.working_dir.clone(),
                cpu_milli: m.cpu_milli,
                memory_bytes: m.memory_bytes,
                pids_limit: spec.pids_limit,
                mounts: member_mounts(spec, m),
                network: network.map(str::to_owned),
                aliases: if size > 1 { vec![m.hostname.clone()] } else { Vec::new() },
                gpus,
                log_max_bytes: spec.log_max_bytes,
                groups: spec.identity.groups.clone(),
                disk_bytes: spec.disk_bytes,
            });
        }
        Ok(out)
    }

    /// Undoes a submit that failed part-way: removes what it made.
    async fn undo(&self, created: &[String], network: Option<&str>) {
        for id in created {
            if let Err(e) = self.rt.remove(id).await {
                tracing::warn!(container = %id, error = %e, "cannot remove a container of a failed submit");
            }
        }
        if let Some(net) = network {
            let _ = self.rt.remove_network(net).await;
        }
    }
}

/// The mounts of member `m`'s container: the run's, then the member's own (an MPS share's pipe directory
/// and its daemon's shared memory, whose bind onto `/dev/shm` takes the place of Docker's own tmpfs there).
fn member_mounts(spec: &RunSpec, m: &gpuhub_driver::MemberSpec) -> Vec<gpuhub_driver::Mount> {
    spec.mounts.iter().chain(&m.mounts).cloned().collect()
}

/// A container's index in its run (0 for a container made before runs had labels).
fn member_index(c: &ContainerInfo) -> u32 {
    c.labels.get(LABEL_MEMBER).and_then(|m| m.parse().ok()).unwrap_or(0)
}

fn split_list(s: &str) -> Vec<String> {
    s.split(',').filter(|p| !p.is_empty()).map(str::to_owned).collect()
}

#[async_trait]
impl Engine for DockerEngine {
    fn name(&self) -> &'static str {
        "docker"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            placement: Placement::Hub,
            multi_node: false,
            max_members: MAX_MEMBERS,
            exec: true,
            ingress: true,
            volumes: true,
            nfs: true,
            pull: true,
            gpu_shares: true,
            shared_ports: false,
            usage: true,
        }
    }

    fn disk_cap(&self) -> Result<(), String> {
        self.disk_cap.clone()
    }

    async fn inventory(&self) -> Result<Vec<EngineNode>, EngineError> {
        Ok(vec![EngineNode { capacity: self.node.clone(), up: true, state: "docker".into() }])
    }

    async fn image_exists(&self, image: &str) -> Result<bool, EngineError> {
        self.rt.image_exists(image).await
    }

    async fn image_tags(&self, image: &str) -> Result<Vec<String>, EngineError> {
        self.rt.image_tags(image).await
    }

    async fn remove_user_network(&self, network: &str, labels: &BTreeMap<String, String>) -> Result<(), EngineError> {
        self.rt.remove_user_network(network, labels).await
    }

    async fn commit(&self, member: &MemberRef, reference: &str) -> Result<u64, EngineError> {
        let c = self.container(member).await?;
        self.rt.commit(&c.id, reference).await
    }

    async fn remove_image(&self, reference: &str) -> Result<(), EngineError> {
        self.rt.remove_image(reference).await
    }

    async fn pull(
        &self,
        image: &str,
        auth: Option<&gpuhub_driver::RegistryAuth>,
        progress: &(dyn Fn(gpuhub_driver::PullProgress) + Send + Sync),
    ) -> Result<(), EngineError> {
        self.rt.pull(image, auth, progress).await
    }

    /// Creates every member's container, then starts them; a failure at any step removes what was made,
    /// so all members run or none.
    async fn submit(&self, spec: &RunSpec) -> Result<RunStatus, EngineError> {
        let size = spec.members.len() as u32;
        if size == 0 || size > MAX_MEMBERS {
            return Err(EngineError::Rejected(format!("a run has 1 to {MAX_MEMBERS} members, not {size}")));
        }
        let owner = spec.labels.get(LABEL_OWNER).cloned().unwrap_or_default();
        let mut net_labels = BTreeMap::from([(LABEL_OWNER.to_owned(), owner)]);
        if let Some(i) = spec.labels.get(LABEL_INSTANCE) {
            net_labels.insert(LABEL_INSTANCE.to_owned(), i.clone());
        }
        // a gang talks on a network of its own; one member uses the owner's network
        let private = (size > 1).then(|| Self::run_network(&spec.name));
        let network = match (&private, &spec.network) {
            (Some(p), _) => {
                net_labels.insert(LABEL_RUN.to_owned(), spec.name.clone());
                Some(p.clone())
            }
            (None, n) => n.clone(),
        };
        let containers = self.container_specs(spec, network.as_deref())?;
        if let Some(net) = &network {
            self.rt.ensure_network(net, &net_labels).await?;
        }
        let mut created = Vec::with_capacity(containers.len());
        for c in &containers {
            match self.rt.create(c).await {
                Ok(id) => created.push(id),
                Err(e) => {
                    self.undo(&created, private.as_deref()).await;
                    return Err(e);
                }
            }
        }
        for id in &created {
            if let Err(e) = self.rt.start(id).await {
                self.undo(&created, private.as_deref()).await;
                return Err(e);
            }
        }
        let infos = self.containers_of(&spec.name).await?;
        Ok(self.status(&spec.name, infos))
    }

    async fn cancel(&self, run: &str, grace: Duration) -> Result<(), EngineError> {
        let containers = self.containers_of(run).await?;
        let stops = containers.iter().map(|c| self.rt.stop(&c.id, grace));
        for r in futures::future::join_all(stops).await {
            match r {
                Ok(()) | Err(EngineError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    async fn remove(&self, run: &str) -> Result<(), EngineError> {
        let containers = self.containers_of(run).await?;
        let gang = containers.iter().any(|c| c.labels.get(LABEL_MEMBERS).is_some_and(|n| n != "1"));
        for c in &containers {
            match self.rt.remove(&c.id).await {
                Ok(()) | Err(EngineError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        if gang {
            self.rt.remove_network(&Self::run_network(run)).await?;
        }
        Ok(())
    }

    async fn observe(&self, run: &str) -> Result<RunStatus, EngineError> {
        let containers = self.containers_of(run).await?;
        Ok(self.status(run, containers))
    }

    async fn list_runs(&self) -> Result<Vec<RunStatus>, EngineError> {
        let mut runs: HashMap<String, Vec<ContainerInfo>> = HashMap::new();
        for c in self.rt.list_managed().await? {
            let run = c.labels.get(LABEL_RUN).cloned().unwrap_or_else(|| c.id.clone());
            runs.entry(run).or_default().push(c);
        }
        let mut out: Vec<RunStatus> = runs.into_iter().map(|(run, cs)| self.status(&run, cs)).collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    async fn events(&self) -> Result<EventStream, EngineError> {
        self.rt.events().await
    }

    async fn logs(&self, member: &MemberRef, follow: bool, tail: Option<u64>) -> Result<LogStream, EngineError> {
        let c = self.container(member).await?;
        self.rt.logs(&c.id, follow, tail).await
    }

    async fn exec(&self, member: &MemberRef, spec: &ExecSpec) -> Result<ExecHandle, EngineError> {
        let c = self.container(member).await?;
        self.rt.exec(&c.id, spec).await
    }

    async fn endpoint(&self, member: &MemberRef, port: u16) -> Result<SocketAddr, EngineError> {
        let c = self.container(member).await?;
        let ip = c.ip.ok_or_else(|| {
            EngineError::Rejected(format!(
                "member {} of run {} has no address on its network",
                member.member, member.run
            ))
        })?;
        let ip = ip.parse().map_err(|e| EngineError::Engine(format!("container address {ip:?}: {e}")))?;
        Ok(SocketAddr::new(ip, port))
    }

    /// Reads each running member container's cgroup on this host (found from the container's init PID,
    /// so either cgroup driver, v1 or v2); a member that ends meanwhile is left out.
    async fn usage(&self, run: &str) -> Result<Vec<MemberUsage>, EngineError> {
        let mut containers = self.containers_of(run).await?;
        containers.sort_by_key(member_index);
        let mut running = Vec::with_capacity(containers.len());
        for c in containers.iter().filter(|c| c.status == ContainerStatus::Running) {
            match self.rt.init_pid(&c.id).await {
                Ok(Some(pid)) => running.push((member_index(c), c.id.clone(), pid)),
                Ok(None) | Err(EngineError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        let read = move || {
            let mut out = Vec::with_capacity(running.len());
            for (index, id, pid) in running {
                match cgroup::read_usage(&HostFiles, pid, &id) {
                    Ok(u) => out.push(MemberUsage {
                        index,
                        cpu_seconds: u.cpu_seconds,
                        memory_used: u.memory_used,
                        memory_limit: u.memory_limit,
                        pids: u.pids,
                    }),
                    Err(ReadError::Gone) => {}
                    Err(ReadError::Failed(why)) => {
                        return Err(EngineError::Engine(format!("usage of container {id}: {why}")));
                    }
                }
            }
            Ok(out)
        };
        tokio::task::spawn_blocking(read)
            .await
            .map_err(|e| EngineError::Engine(format!("reading the cgroups of run {run} failed: {e}")))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuhub_driver::{GpuGrant, Identity, MemberSpec, Mount};

    fn bind(source: &str, target: &str) -> Mount {
        Mount { source: source.into(), target: target.into(), read_only: false, nfs: None }
    }

    #[test]
    fn each_member_gets_the_runs_mounts_and_its_own() {
        let member = |index: u32, mounts: Vec<Mount>| MemberSpec {
            index,
            hostname: format!("train-{index}"),
            node: None,
            cpu_milli: 1000,
            memory_bytes: 1 << 30,
            gpus: GpuGrant::None,
            env: BTreeMap::new(),
            mounts,
        };
        let mps =
            vec![bind("/run/gpuhub/mps/GPU-1/pipe", "/run/gpuhub/mps"), bind("/run/gpuhub/mps/GPU-1/shm", "/dev/shm")];
        let base = gpuhub_driver::fake::run_spec("gpuhub-alice-train-1", 0);
        let spec = RunSpec {
            image: "busybox".into(),
            identity: Identity { home: "/home/alice".into(), ..base.identity.clone() },
            mounts: vec![bind("/data/homes/alice", "/home/alice")],
            members: vec![member(0, mps.clone()), member(1, Vec::new())],
            pids_limit: 100,
            ..base
        };
        let targets = |m: &MemberSpec| member_mounts(&spec, m).into_iter().map(|m| m.target).collect::<Vec<_>>();
        assert_eq!(targets(&spec.members[0]), ["/home/alice", "/run/gpuhub/mps", "/dev/shm"]);
        assert_eq!(targets(&spec.members[1]), ["/home/alice"], "another member's MPS mounts are not its own");
    }
}
