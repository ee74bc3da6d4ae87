//! [`KubeEngine`] as a [`gpuhub_driver::Engine`], and the cluster's nodes as gpuhub's.

use crate::config::Sharing;
use crate::engine::{KubeEngine, MAX_MEMBERS, api_err};
use async_trait::async_trait;
use gpuhub_core::node::{GpuDevice, NodeCapacity};
use gpuhub_core::{Bytes, CpuMilli};
use gpuhub_driver::{
    Capabilities, Engine, EngineError, EngineNode, EventStream, ExecHandle, ExecSpec, LogStream, MemberRef,
    MemberUsage, Placement, RunSpec, RunStatus,
};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use std::net::SocketAddr;
use std::time::Duration;

/// A CPU quantity (`16`, `15500m`) in milli-CPUs.
pub fn quantity_milli(q: &str) -> Option<u64> {
    match q.strip_suffix('m') {
        Some(m) => m.parse().ok(),
        None => q.parse::<f64>().ok().map(|c| (c * 1000.0).round() as u64),
    }
}

/// A memory quantity (`131072Ki`, `128Gi`, `1G`, `1e9`, bytes) in bytes.
pub fn quantity_bytes(q: &str) -> Option<u64> {
    const UNITS: &[(&str, u64)] = &[
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("Pi", 1 << 50),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
        ("P", 1_000_000_000_000_000),
    ];
    for (suffix, mult) in UNITS {
        if let Some(n) = q.strip_suffix(suffix) {
            return n.parse::<u64>().ok().map(|n| n * mult);
        }
    }
    q.parse::<u64>().ok().or_else(|| q.parse::<f64>().ok().map(|f| f as u64))
}

/// A node as gpuhub sees it: its allocatable CPUs, memory and GPUs (`<node>/gpu<i>`: the cluster
/// names no GPU), its labels, and whether it takes work (`Ready` and not cordoned).
pub fn node_of(n: &Node, gpu_resource: &str) -> EngineNode {
    let name = n.metadata.name.clone().unwrap_or_default();
    let status = n.status.as_ref();
    let alloc = status.and_then(|s| s.allocatable.as_ref());
    let get = |k: &str| alloc.and_then(|a| a.get(k)).map(|q| q.0.clone());
    let cpus = get("cpu").and_then(|q| quantity_milli(&q)).unwrap_or(0);
    let memory = get("memory").and_then(|q| quantity_bytes(&q)).unwrap_or(0);
    let gpus = get(gpu_resource).and_then(|q| q.parse::<u32>().ok()).unwrap_or(0);
    let labels = n.metadata.labels.clone().unwrap_or_default();
    let model = labels.get("nvidia.com/gpu.product").cloned().unwrap_or_default();
    let gpu_memory = labels.get("nvidia.com/gpu.memory").and_then(|m| m.parse::<u64>().ok()).unwrap_or(0) << 20;
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    let cordoned = n.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
    let state = match (ready, cordoned) {
        (true, false) => "ready",
        (true, true) => "cordoned",
        (false, _) => "not ready",
    };
    EngineNode {
        capacity: NodeCapacity {
            gpus: (0..gpus)
                .map(|i| GpuDevice {
                    uuid: format!("{name}/gpu{i}"),
                    index: i,
                    model: model.clone(),
                    memory: Bytes(gpu_memory),
                    device: None,
                    sharing: None,
                })
                .collect(),
            name,
            cpus: CpuMilli(cpus),
            memory: Bytes(memory),
            labels,
        },
        up: ready && !cordoned,
        state: state.into(),
    }
}

#[async_trait]
impl Engine for KubeEngine {
    fn name(&self) -> &'static str {
        "kubernetes"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            placement: Placement::Engine,
            multi_node: true,
            max_members: MAX_MEMBERS,
            exec: true,
            ingress: true,
            volumes: true,
            nfs: true,
            pull: false,
            gpu_shares: self.config.sharing != Sharing::None,
            shared_ports: false,
            usage: self.has_metrics(),
        }
    }

    /// The cluster's nodes (where the metrics API did not answer, it is asked again when due).
    async fn inventory(&self) -> Result<Vec<EngineNode>, EngineError> {
        self.reprobe_metrics().await;
        let nodes: Api<Node> = Api::all(self.client.clone());
        let list = nodes.list(&ListParams::default()).await.map_err(|e| api_err("listing nodes", e))?;
        Ok(list.items.iter().map(|n| node_of(n, &self.config.gpu_resource)).collect())
    }

    /// The cluster's nodes pull images themselves when a pod starts: any image may be asked for, and
    /// one that cannot be pulled shows as the run's wait (`ErrImagePull`).
    async fn image_exists(&self, _image: &str) -> Result<bool, EngineError> {
        Ok(true)
    }

    async fn submit(&self, spec: &RunSpec) -> Result<RunStatus, EngineError> {
        self.create(spec).await
    }

    async fn cancel(&self, run: &str, grace: Duration) -> Result<(), EngineError> {
        self.end(run, grace).await
    }

    async fn remove(&self, run: &str) -> Result<(), EngineError> {
        self.close_forwards(run);
        if self.delete_all(run).await? { Ok(()) } else { Err(EngineError::NotFound(format!("run {run}"))) }
    }

    async fn observe(&self, run: &str) -> Result<RunStatus, EngineError> {
        self.run(run).await
    }

    async fn list_runs(&self) -> Result<Vec<RunStatus>, EngineError> {
        self.all_runs().await
    }

    async fn events(&self) -> Result<EventStream, EngineError> {
        Ok(self.watch())
    }

    async fn logs(&self, member: &MemberRef, follow: bool, tail: Option<u64>) -> Result<LogStream, EngineError> {
        self.logs_of(member, follow, tail).await
    }

    async fn exec(&self, member: &MemberRef, spec: &ExecSpec) -> Result<ExecHandle, EngineError> {
        self.exec_in(member, spec).await
    }

    async fn endpoint(&self, member: &MemberRef, port: u16) -> Result<SocketAddr, EngineError> {
        self.endpoint_of(member, port).await
    }

    /// From the metrics API where it answers (`metrics.k8s.io`): CPU and working-set memory.
    async fn usage(&self, run: &str) -> Result<Vec<MemberUsage>, EngineError> {
        self.usage_of(run).await
    }

    /// A service's run is a Deployment: its rollout is Kubernetes'.
    async fn roll(&self, run: &str, spec: &RunSpec) -> Result<bool, EngineError> {
        self.roll_out(run, spec).await.map(|()| true)
    }
}
