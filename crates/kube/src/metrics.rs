//! Usage figures from the cluster's metrics API (`metrics.k8s.io/v1beta1` `PodMetrics`, served by
//! metrics-server): a member's CPU rate and working-set memory as the kubelet last measured them over
//! its window. The figures are a rate, while [`MemberUsage::cpu_seconds`] is cumulative, so each
//! pod's CPU time is the sum of its rates over the time between the samples' timestamps (the first
//! sample counts its own window). The capability is on while the metrics API answers: it is asked at
//! connect ([`KubeEngine::probe_metrics`]) and, while it does not answer, again at the engine's next
//! look at its nodes once [`METRICS_REPROBE`] has passed by the engine's clock (a metrics-server
//! installed later is picked up without a restart); one that stops answering (gone: 404 or 503) turns
//! the capability off until it answers again.

use crate::engine::{KubeEngine, api_err};
use crate::{spec, status};
use gpuhub_driver::{EngineError, LABEL_MEMBER, LABEL_RUN, MemberState, MemberUsage};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How long after the metrics API did not answer it is asked again.
pub const METRICS_REPROBE: Duration = Duration::from_secs(300);

/// A CPU quantity of the metrics API (`123456789n`, `250u`, `15m`, `2`) in cores.
pub fn cpu_cores(q: &str) -> Option<f64> {
    let (n, scale) = match q.char_indices().last()? {
        (i, 'n') => (&q[..i], 1e-9),
        (i, 'u') => (&q[..i], 1e-6),
        (i, 'm') => (&q[..i], 1e-3),
        _ => (q, 1.0),
    };
    n.parse::<f64>().ok().map(|v| v * scale)
}

/// A window (`30s`, `10.5s`, `1m0s`) in seconds.
fn window_seconds(w: &str) -> f64 {
    let mut total = 0.0;
    let mut num = String::new();
    for c in w.chars() {
        match c {
            'h' => total += num.parse::<f64>().unwrap_or(0.0) * 3600.0,
            'm' => total += num.parse::<f64>().unwrap_or(0.0) * 60.0,
            's' => total += num.parse::<f64>().unwrap_or(0.0),
            c => {
                num.push(c);
                continue;
            }
        }
        num.clear();
    }
    total
}

impl KubeEngine {
    fn pod_metrics(&self) -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk("metrics.k8s.io", "v1beta1", "PodMetrics");
        let ar = ApiResource::from_gvk_with_plural(&gvk, "pods");
        Api::namespaced_with(self.client.clone(), &self.config.namespace, &ar)
    }

    /// Asks the metrics API once for the namespace's pods: whether it answers sets the usage
    /// capability (on where it does); where it does not, it is asked again [`METRICS_REPROBE`] later.
    pub async fn probe_metrics(&self) -> bool {
        let ok = match self.pod_metrics().list(&ListParams::default().limit(1)).await {
            Ok(_) => true,
            Err(e) => {
                tracing::info!(
                    "kubernetes: no usage figures: the metrics api (metrics.k8s.io) does not answer: {e}; asking again in {}s",
                    METRICS_REPROBE.as_secs()
                );
                false
            }
        };
        *self.metrics.next_probe.lock().unwrap() = (!ok).then(|| (self.clock)() + METRICS_REPROBE);
        let was = self.metrics.available.swap(ok, Ordering::Relaxed);
        if ok && !was {
            tracing::info!("kubernetes: the metrics api (metrics.k8s.io) answers: usage figures are on");
        }
        ok
    }

    /// Where the metrics API did not answer and its time to be asked again has come (by the engine's
    /// clock), asks it again; whether it answers now.
    pub(crate) async fn reprobe_metrics(&self) -> bool {
        if self.has_metrics() {
            return true;
        }
        let due = self.metrics.next_probe.lock().unwrap().is_none_or(|at| (self.clock)() >= at);
        due && self.probe_metrics().await
    }

    /// Whether usage figures come from the metrics API.
    pub(crate) fn has_metrics(&self) -> bool {
        self.metrics.available.load(Ordering::Relaxed)
    }

    /// What each running member of `run` uses, from its pod's metrics; members without metrics yet
    /// (just started) are left out.
    pub(crate) async fn usage_of(&self, run: &str) -> Result<Vec<MemberUsage>, EngineError> {
        if !self.has_metrics() {
            return Err(EngineError::Unsupported { engine: "kubernetes", what: "usage (no metrics api)".into() });
        }
        let lp = ListParams::default().labels(&format!("{LABEL_RUN}={}", spec::label_value(run)));
        let pods = self.pods().list(&lp).await.map_err(|e| api_err("listing pods", e))?.items;
        if pods.is_empty() {
            return Err(EngineError::NotFound(format!("run {run}")));
        }
        let metrics = match self.pod_metrics().list(&lp).await {
            Ok(l) => l.items,
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 503 => {
                // metrics-server was removed (its APIService gone or unavailable): off until it answers
                tracing::info!("kubernetes: the metrics api stopped answering ({}): usage figures are off", s.message);
                self.metrics.available.store(false, Ordering::Relaxed);
                *self.metrics.next_probe.lock().unwrap() = Some((self.clock)() + METRICS_REPROBE);
                return Err(EngineError::Unsupported { engine: "kubernetes", what: "usage (no metrics api)".into() });
            }
            Err(e) => return Err(api_err("listing pod metrics", e)),
        };
        let mut out = Vec::new();
        let mut cpu = self.metrics.cpu.lock().unwrap();
        for pod in pods.iter().filter(|p| status::member_state(p) == MemberState::Running) {
            let name = pod.metadata.name.as_deref().unwrap_or_default();
            let Some(index) =
                pod.metadata.labels.as_ref().and_then(|l| l.get(LABEL_MEMBER)).and_then(|i| i.parse::<u32>().ok())
            else {
                continue;
            };
            let Some(m) = metrics.iter().find(|m| m.metadata.name.as_deref() == Some(name)) else { continue };
            let containers = m.data["containers"].as_array().cloned().unwrap_or_default();
            let usage = |key: &'static str| -> Vec<String> {
                containers.iter().filter_map(|c| c["usage"][key].as_str().map(str::to_owned)).collect()
            };
            let rate: f64 = usage("cpu").iter().filter_map(|q| cpu_cores(q)).sum();
            let memory: u64 = usage("memory").iter().filter_map(|q| crate::quantity_bytes(q)).sum();
            let Some(at) = m.data["timestamp"].as_str().and_then(|t| t.parse::<Timestamp>().ok()) else { continue };
            let key = pod.metadata.uid.clone().unwrap_or_else(|| name.to_owned());
            let seconds = match cpu.get(&key) {
                Some((_, last, total)) if at > *last => total + rate * at.duration_since(*last).as_secs_f64(),
                Some((_, _, total)) => *total,
                None => rate * m.data["window"].as_str().map_or(0.0, window_seconds),
            };
            if cpu.get(&key).is_none_or(|(_, last, _)| at > *last) {
                cpu.insert(key, (run.to_owned(), at, seconds));
            }
            let limit = pod
                .spec
                .as_ref()
                .and_then(|s| s.containers.first())
                .and_then(|c| c.resources.as_ref()?.limits.as_ref()?.get("memory"))
                .and_then(|q| crate::quantity_bytes(&q.0));
            out.push(MemberUsage {
                index,
                cpu_seconds: seconds,
                memory_used: gpuhub_core::Bytes(memory),
                memory_limit: limit.map(gpuhub_core::Bytes),
                pids: Vec::new(),
            });
        }
        // pods gone are forgotten
        let live: Vec<String> =
            pods.iter().map(|p| p.metadata.uid.clone().or(p.metadata.name.clone()).unwrap_or_default()).collect();
        cpu.retain(|k, (of, _, _)| of != run || live.contains(k));
        out.sort_by_key(|u| u.index);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_and_windows() {
        assert_eq!(cpu_cores("250000000n"), Some(0.25));
        assert_eq!(cpu_cores("1500u"), Some(0.0015));
        assert_eq!(cpu_cores("15m"), Some(0.015));
        assert_eq!(cpu_cores("2"), Some(2.0));
        assert_eq!(cpu_cores("x"), None);
        assert_eq!(window_seconds("30s"), 30.0);
        assert_eq!(window_seconds("10.5s"), 10.5);
        assert_eq!(window_seconds("1m0s"), 60.0);
    }
}
