//! Usage figures from the metrics API (`metrics.k8s.io/v1beta1` `PodMetrics`, as metrics-server
//! serves them), against the mocked API server: the capability is on only where the metrics API
//! answers; a member's CPU time is its rates summed over the samples' timestamps, its memory the
//! containers' working set, its limit the pod's; members not running or without metrics yet are left
//! out; a run without pods is not found.

mod mock;

use gpuhub_core::Bytes;
use gpuhub_driver::{Engine, EngineError};
use gpuhub_kube::KubeConfig;
use mock::{engine, exited, list, pod, running, status};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

const METRICS: &str = "/apis/metrics.k8s.io/v1beta1/namespaces/gpuhub/pods";

fn metrics(name: &str, at: &str, cpu: &str, memory: &str) -> Value {
    json!({
        "kind": "PodMetrics", "apiVersion": "metrics.k8s.io/v1beta1",
        "metadata": { "name": name, "namespace": "gpuhub", "labels": { "gpuhub.run": "r" } },
        "timestamp": at, "window": "30s",
        "containers": [{ "name": "member", "usage": { "cpu": cpu, "memory": memory } }],
    })
}

#[tokio::test]
async fn cpu_and_memory_come_from_the_metrics_api_where_it_answers() {
    let sample = Arc::new(AtomicUsize::new(0));
    let n = sample.clone();
    let (e, seen) = engine(KubeConfig::default(), move |s| match s.path.as_str() {
        METRICS if s.query.contains("limit=1") => list("PodMetricsList", vec![]),
        METRICS => {
            // the kubelet's samples: 500m, then 1 core 30 s later, then no newer sample
            let i = n.fetch_add(1, Ordering::SeqCst);
            let (at, cpu) = match i {
                0 => ("2026-11-26T06:01:00Z", "500m"),
                1 => ("2026-11-26T06:01:30Z", "1"),
                _ => ("2026-11-26T06:01:30Z", "1"),
            };
            let mut items = vec![metrics("r-0", at, cpu, "100Mi")];
            if i > 0 {
                // member 1's first sample comes later (just started)
                items.push(metrics("r-1", at, "250000000n", "1Gi"));
            }
            list("PodMetricsList", items)
        }
        "/api/v1/namespaces/gpuhub/pods" => {
            let mut zero = pod(0, running());
            zero["spec"]["containers"][0]["resources"]["limits"]["memory"] = json!("1Gi");
            let ended = pod(2, exited(0, "Completed"));
            list("PodList", vec![zero, pod(1, running()), ended])
        }
        _ => status(404, "NotFound", "the server could not find the requested resource"),
    });
    assert!(!e.capabilities().usage, "off until the metrics api answered");
    assert!(e.probe_metrics().await);
    assert!(e.capabilities().usage);

    let first = e.usage("r").await.unwrap();
    assert_eq!(first.len(), 1, "member 1 has no metrics yet, member 2 ended: {first:?}");
    assert_eq!((first[0].index, first[0].cpu_seconds), (0, 15.0), "500m over its 30 s window");
    assert_eq!(first[0].memory_used, Bytes(100 << 20));
    assert_eq!(first[0].memory_limit, Some(Bytes(1 << 30)));
    let second = e.usage("r").await.unwrap();
    assert_eq!(second.iter().map(|u| u.index).collect::<Vec<_>>(), [0, 1]);
    assert_eq!(second[0].cpu_seconds, 45.0, "15 s, then 1 core for the 30 s between the samples");
    assert_eq!((second[1].cpu_seconds, second[1].memory_used), (7.5, Bytes(1 << 30)));
    assert_eq!(second[1].memory_limit, None);
    let third = e.usage("r").await.unwrap();
    assert_eq!(third[0].cpu_seconds, 45.0, "no newer sample: the same time");

    let asked: Vec<String> = seen.all().iter().filter(|s| s.path == METRICS).map(|s| s.query.clone()).collect();
    assert!(asked.iter().skip(1).all(|q| q.contains("labelSelector=gpuhub.run=r")), "{asked:?}");
}

#[tokio::test]
async fn without_a_metrics_api_usage_is_off_and_unsupported() {
    let (e, _) = engine(KubeConfig::default(), |s| match s.path.as_str() {
        "/api/v1/namespaces/gpuhub/pods" => list("PodList", vec![pod(0, running())]),
        _ => status(404, "NotFound", "the server could not find the requested resource"),
    });
    assert!(!e.probe_metrics().await);
    assert!(!e.capabilities().usage);
    assert!(matches!(e.usage("r").await, Err(EngineError::Unsupported { .. })));
}

#[tokio::test]
async fn a_run_without_pods_is_not_found() {
    let (e, _) = engine(KubeConfig::default(), |s| match s.path.as_str() {
        METRICS => list("PodMetricsList", vec![]),
        _ => list("PodList", vec![]),
    });
    assert!(e.probe_metrics().await);
    assert!(matches!(e.usage("gone").await, Err(EngineError::NotFound(_))));
}

#[tokio::test]
async fn a_metrics_api_installed_later_is_picked_up_at_the_next_probe_by_the_clock() {
    // metrics-server is installed while the hub runs: 404 until then
    let installed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let on = installed.clone();
    let (e, seen) = engine(KubeConfig::default(), move |s| match s.path.as_str() {
        METRICS if on.load(Ordering::SeqCst) => list("PodMetricsList", vec![]),
        "/api/v1/nodes" => list("NodeList", vec![]),
        _ => status(404, "NotFound", "the server could not find the requested resource"),
    });
    let now = Arc::new(std::sync::Mutex::new(std::time::SystemTime::UNIX_EPOCH));
    let clock = now.clone();
    let e = e.with_clock(move || *clock.lock().unwrap());
    let probes = || seen.all().iter().filter(|s| s.path == METRICS).count();
    assert!(!e.probe_metrics().await, "not installed at connect");
    assert!(!e.capabilities().usage);
    installed.store(true, Ordering::SeqCst);
    // within the wait, a look at the nodes does not ask again
    *now.lock().unwrap() += gpuhub_kube::METRICS_REPROBE - std::time::Duration::from_secs(1);
    e.inventory().await.unwrap();
    assert_eq!((probes(), e.capabilities().usage), (1, false));
    // once it has passed, the next look asks, and the capability is on without a restart
    *now.lock().unwrap() += std::time::Duration::from_secs(1);
    e.inventory().await.unwrap();
    assert_eq!((probes(), e.capabilities().usage), (2, true));
    // answering, it is not asked again at each look
    e.inventory().await.unwrap();
    assert_eq!(probes(), 2);
}

#[tokio::test]
async fn a_metrics_api_that_goes_away_turns_usage_off_until_it_answers_again() {
    let gone = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let g = gone.clone();
    let (e, _) = engine(KubeConfig::default(), move |s| match s.path.as_str() {
        METRICS if g.load(Ordering::SeqCst) => {
            status(503, "ServiceUnavailable", "the server is currently unable to handle the request")
        }
        METRICS => list("PodMetricsList", vec![]),
        "/api/v1/namespaces/gpuhub/pods" => list("PodList", vec![pod(0, running())]),
        _ => status(404, "NotFound", "the server could not find the requested resource"),
    });
    assert!(e.probe_metrics().await);
    gone.store(true, Ordering::SeqCst);
    assert!(matches!(e.usage("r").await, Err(EngineError::Unsupported { .. })));
    assert!(!e.capabilities().usage, "off once the metrics api stopped answering");
}
