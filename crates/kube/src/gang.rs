//! A gang admitted whole where no gang scheduler runs (`volcano = false`): kube-scheduler places pods
//! one by one, so a gang's members could start some now and the rest whenever room frees (holding
//! GPUs while waiting for each other). gpuhub admits the gang itself instead:
//!
//! 1. every member's pod is made gated ([`GANG_GATE`] in `spec.schedulingGates`, GA since Kubernetes
//!    1.30): kube-scheduler leaves a gated pod alone, and it holds nothing;
//! 2. once all the gang's pods exist, gpuhub reads the nodes (allocatable, `Ready`, not cordoned, no
//!    `NoSchedule`/`NoExecute` taint, the engine's node selector) and what every live pod of the
//!    cluster requests on each, and picks a node per member ([`place`], best fit by GPUs);
//! 3. where every member has one, each gated pod is pinned to its node (a required node affinity on
//!    `metadata.name`, which may be set on a gated pod) and then every gate is removed; where one has
//!    none, nothing is ungated and the run's pending reason says which member fits nowhere and what
//!    each node has free.
//!
//! Admission is tried when the run is made, at each look at it (observe, list_runs) and when the event
//! watch sees a pod end (room freed). A pin is still checked by kube-scheduler and the kubelet: room
//! taken between gpuhub's reading and the binding (by a pod outside gpuhub) leaves that member pending
//! on its node until the room is back, never placed elsewhere apart from the others.

use crate::engine::{KubeEngine, api_err};
use crate::spec;
use gpuhub_driver::{EngineError, LABEL_MEMBER, LABEL_MEMBERS, LABEL_RUN, LABEL_WORKLOAD};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use std::collections::{BTreeMap, BTreeSet};

pub use crate::spec::{GANG_GATE, gated};

/// What a member asks, or a node has free: milli-CPUs, memory bytes, GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Amount {
    /// Milli-CPUs.
    pub cpu: u64,
    /// Memory in bytes.
    pub memory: u64,
    /// Whole GPUs.
    pub gpus: u64,
}

impl Amount {
    fn holds(&self, need: &Amount) -> bool {
        self.cpu >= need.cpu && self.memory >= need.memory && self.gpus >= need.gpus
    }

    fn take(&mut self, need: &Amount) {
        self.cpu = self.cpu.saturating_sub(need.cpu);
        self.memory = self.memory.saturating_sub(need.memory);
        self.gpus = self.gpus.saturating_sub(need.gpus);
    }
}

impl std::fmt::Display for Amount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let gib = self.memory as f64 / f64::from(1u32 << 30);
        write!(f, "{} GPUs, {} CPUs, {gib:.1} GiB", self.gpus, self.cpu as f64 / 1000.0)
    }
}

/// What a pod requests (its containers' requests, else limits).
pub fn requests(pod: &Pod, gpu_resource: &str) -> Amount {
    let mut a = Amount::default();
    for c in pod.spec.iter().flat_map(|s| &s.containers) {
        let r = c.resources.as_ref();
        let get = |k: &str| {
            let q = r.and_then(|r| r.requests.as_ref()?.get(k)).or_else(|| r.and_then(|r| r.limits.as_ref()?.get(k)));
            q.map(|q| q.0.clone())
        };
        a.cpu += get("cpu").and_then(|q| crate::quantity_milli(&q)).unwrap_or(0);
        a.memory += get("memory").and_then(|q| crate::quantity_bytes(&q)).unwrap_or(0);
        a.gpus += get(gpu_resource).and_then(|q| q.parse::<u64>().ok()).unwrap_or(0);
    }
    a
}

/// The node a pod is on, or the one gpuhub pinned it to (bound or about to be).
pub fn node_of_pod(pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    if let Some(n) = &spec.node_name {
        return Some(n.clone());
    }
    let required =
        spec.affinity.as_ref()?.node_affinity.as_ref()?.required_during_scheduling_ignored_during_execution.as_ref()?;
    let term = required.node_selector_terms.first()?;
    let field = term.match_fields.as_ref()?.iter().find(|f| f.key == "metadata.name" && f.operator == "In")?;
    field.values.as_ref()?.first().cloned()
}

/// What each node that takes the engine's pods has free: its allocatable less what the live pods on
/// it (or pinned to it) request.
pub fn free(
    nodes: &[Node],
    pods: &[Pod],
    gpu_resource: &str,
    selector: &BTreeMap<String, String>,
) -> Vec<(String, Amount)> {
    let mut used: BTreeMap<String, Amount> = BTreeMap::new();
    for p in pods {
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) {
            continue;
        }
        if let Some(n) = node_of_pod(p) {
            let r = requests(p, gpu_resource);
            let u = used.entry(n).or_default();
            (u.cpu, u.memory, u.gpus) = (u.cpu + r.cpu, u.memory + r.memory, u.gpus + r.gpus);
        }
    }
    let mut out = Vec::new();
    for n in nodes {
        let node = crate::node_of(n, gpu_resource);
        let tainted = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .any(|t| matches!(t.effect.as_str(), "NoSchedule" | "NoExecute"));
        let selected = selector.iter().all(|(k, v)| node.capacity.labels.get(k) == Some(v));
        if !node.up || tainted || !selected {
            continue;
        }
        let mut a =
            Amount { cpu: node.capacity.cpus.0, memory: node.capacity.memory.0, gpus: node.capacity.gpus.len() as u64 };
        if let Some(u) = used.get(&node.capacity.name) {
            a.take(u);
        }
        out.push((node.capacity.name, a));
    }
    out
}

/// A node for each member (by index) where all fit at once, largest first, each on the node it leaves
/// the fewest GPUs free on (then the fewest CPUs, then by name); or why the gang does not fit.
pub fn place(free: &[(String, Amount)], members: &[(u32, Amount)]) -> Result<BTreeMap<u32, String>, String> {
    let mut left: Vec<(String, Amount)> = free.to_vec();
    let mut order: Vec<&(u32, Amount)> = members.iter().collect();
    order.sort_by_key(|(i, a)| (std::cmp::Reverse((a.gpus, a.cpu, a.memory)), *i));
    let mut out = BTreeMap::new();
    for (index, need) in order {
        let best = left.iter_mut().filter(|(_, f)| f.holds(need)).min_by(|(an, a), (bn, b)| {
            (a.gpus - need.gpus, a.cpu - need.cpu, an.as_str()).cmp(&(
                b.gpus - need.gpus,
                b.cpu - need.cpu,
                bn.as_str(),
            ))
        });
        match best {
            Some((name, f)) => {
                f.take(need);
                out.insert(*index, name.clone());
            }
            None => {
                let nodes: Vec<String> = if free.is_empty() {
                    vec!["no node takes its pods".into()]
                } else {
                    left.iter().map(|(n, f)| format!("{n} {f}")).collect()
                };
                return Err(format!(
                    "gpuhub admits a gang whole and the {} members do not fit at once: member {index} needs {need} \
                     and no node has that free beside the members placed before it (free: {})",
                    members.len(),
                    nodes.join("; ")
                ));
            }
        }
    }
    Ok(out)
}

impl KubeEngine {
    /// Admits gang `run` if all its pods exist and fit at once (pinned, then ungated together); `None`
    /// when admitted or nothing waits, else why it waits (kept for the run's pending reason).
    pub(crate) async fn admit(&self, run: &str) -> Result<Option<String>, EngineError> {
        let _one = self.gangs.admitting.lock().await;
        let lp = ListParams::default().labels(&format!("{LABEL_RUN}={}", spec::label_value(run)));
        let pods = self.pods().list(&lp).await.map_err(|e| api_err("listing pods", e))?.items;
        let gated_pods: Vec<&Pod> = pods.iter().filter(|p| gated(p)).collect();
        if gated_pods.is_empty() {
            self.gangs.waiting.lock().unwrap().remove(run);
            return Ok(None);
        }
        let size: usize = pods
            .iter()
            .find_map(|p| p.metadata.labels.as_ref()?.get(LABEL_MEMBERS)?.parse().ok())
            .unwrap_or(pods.len());
        let indexes: BTreeSet<&str> =
            pods.iter().filter_map(|p| p.metadata.labels.as_ref()?.get(LABEL_MEMBER).map(String::as_str)).collect();
        let why = if indexes.len() < size {
            Some(format!(
                "gpuhub admits a gang whole: waiting for all {size} members' pods to exist ({} so far)",
                indexes.len()
            ))
        } else {
            let nodes: Api<Node> = Api::all(self.client.clone());
            let nodes = nodes.list(&ListParams::default()).await.map_err(|e| api_err("listing nodes", e))?.items;
            let all: Api<Pod> = Api::all(self.client.clone());
            let live = ListParams::default().fields("status.phase!=Succeeded,status.phase!=Failed");
            let all = all.list(&live).await.map_err(|e| api_err("listing the cluster's pods", e))?.items;
            let gpu = &self.config.gpu_resource;
            let free = free(&nodes, &all, gpu, &self.config.node_selector);
            let members: Vec<(u32, Amount)> =
                gated_pods.iter().filter_map(|p| Some((crate::status::member_of(p)?.1, requests(p, gpu)))).collect();
            match place(&free, &members) {
                Ok(nodes) => {
                    self.pin_and_ungate(&gated_pods, &nodes).await?;
                    tracing::info!(run, ?nodes, "kubernetes: the gang is admitted whole");
                    None
                }
                Err(why) => Some(why),
            }
        };
        let mut waiting = self.gangs.waiting.lock().unwrap();
        match &why {
            Some(w) => waiting.insert(run.to_owned(), w.clone()),
            None => waiting.remove(run),
        };
        Ok(why)
    }

    /// Pins every gated pod to its node, then (all pinned) removes every gate.
    async fn pin_and_ungate(&self, pods: &[&Pod], nodes: &BTreeMap<u32, String>) -> Result<(), EngineError> {
        let pp = PatchParams::default();
        let named = |p: &&Pod| Some((p.metadata.name.clone()?, nodes.get(&crate::status::member_of(p)?.1)?.clone()));
        let pins: Vec<(String, String)> = pods.iter().filter_map(named).collect();
        for (name, node) in &pins {
            let pin = serde_json::json!({ "spec": { "affinity": { "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": { "nodeSelectorTerms": [
                    { "matchFields": [{ "key": "metadata.name", "operator": "In", "values": [node] }] },
                ] },
            } } } });
            self.pods().patch(name, &pp, &Patch::Merge(&pin)).await.map_err(|e| api_err("pinning a gang's pod", e))?;
        }
        let open = serde_json::json!({ "spec": { "schedulingGates": null } });
        for (name, _) in &pins {
            self.pods()
                .patch(name, &pp, &Patch::Merge(&open))
                .await
                .map_err(|e| api_err("removing a gang's scheduling gate", e))?;
        }
        Ok(())
    }

    /// Tries to admit every gang that waits (room may have freed); failures are logged.
    pub(crate) async fn admit_waiting(&self) {
        let lp = ListParams::default().labels(LABEL_WORKLOAD);
        let pods = match self.pods().list(&lp).await {
            Ok(l) => l.items,
            Err(e) => return tracing::warn!(error = %e, "kubernetes: cannot list pods to admit waiting gangs"),
        };
        let runs: BTreeSet<String> =
            pods.iter().filter(|p| gated(p)).filter_map(|p| Some(crate::status::member_of(p)?.0)).collect();
        for run in runs {
            if let Err(e) = self.admit(&run).await {
                tracing::warn!(run, error = %e, "kubernetes: cannot admit a waiting gang");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn amount(gpus: u64) -> Amount {
        Amount { cpu: 1000, memory: 1 << 30, gpus }
    }

    #[test]
    fn a_gang_is_placed_whole_or_not_at_all() {
        let free = vec![("a".to_owned(), amount(2)), ("b".to_owned(), amount(4))];
        // 1 + 3: the larger first, on b; the 1 then on b's last GPU (best fit), keeping a whole
        let small = Amount { cpu: 0, memory: 0, gpus: 1 };
        let p = place(&free, &[(0, small), (1, amount(3))]).unwrap();
        assert_eq!((p[&0].as_str(), p[&1].as_str()), ("b", "b"));
        // 2 + 3: the 3 on b, the 2 on a, never two on one node that cannot hold both
        let p = place(&free, &[(0, amount(2)), (1, amount(3))]).unwrap();
        assert_eq!((p[&0].as_str(), p[&1].as_str()), ("a", "b"));
        // 3 + 3: each fits somewhere alone, never both at once
        let why = place(&free, &[(0, amount(3)), (1, amount(3))]).unwrap_err();
        assert!(why.contains("member 1 needs 3 GPUs") && why.contains("a 2 GPUs"), "{why}");
        assert!(place(&[], &[(0, amount(0))]).unwrap_err().contains("no node takes its pods"));
    }
}
