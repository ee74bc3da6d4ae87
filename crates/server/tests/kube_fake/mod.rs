//! A fake Kubernetes API server in process on 127.0.0.1:0, for the hub on the real
//! `gpuhub_kube::KubeEngine`: objects kept in memory, a watch streaming their changes, and a "kubelet"
//! that starts each pod and ends a job's with the code its command exits with; exec streams
//! (`v5.channel.k8s.io`) and pods' logs. Shared by the kubernetes tests (API, portal, CLI).
#![allow(dead_code)]

use crate::common::{self, Hub};
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::routing::get;
use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

#[derive(Default)]
pub struct Cluster {
    /// The queries of the exec streams opened.
    pub execs: Vec<String>,
    pub pods: BTreeMap<String, Value>,
    pub jobs: BTreeMap<String, Value>,
    pub services: BTreeMap<String, Value>,
    pub rv: u64,
    /// Every pod event, with its resource version (what a watch from an older version replays).
    pub log: Vec<(u64, Value)>,
    /// The pods' IP (default 127.0.0.1, where the tests' apps listen; one the hub cannot reach for
    /// port-forward).
    pub pod_ip: Option<String>,
    /// The port-forwards opened, as `pod:port`.
    pub forwards: Vec<String>,
    /// The nodes and their GPUs (none: `node1` with 4).
    pub nodes: Vec<(String, u32)>,
    /// Whether metrics-server is installed (else the metrics API is not found).
    pub metrics: bool,
    /// The Deployments (a service's run), with `metadata.generation`.
    pub deployments: BTreeMap<String, Value>,
    /// Whether the deployment controller reports every rollout stalled (`ProgressDeadlineExceeded`).
    pub stall: bool,
    /// Whether a rollout's new pod runs without getting ready (until [`finish_rollouts`]).
    pub hold: bool,
}

#[derive(Clone)]
pub struct Api {
    pub cluster: Arc<Mutex<Cluster>>,
    pub events: broadcast::Sender<(u64, Value)>,
    /// How far the engine's clock is ahead of the system's.
    pub ahead: Arc<Mutex<std::time::Duration>>,
}

impl Api {
    pub fn emit(&self, c: &mut Cluster, kind: &str, pod: &Value) {
        c.rv += 1;
        let mut pod = pod.clone();
        pod["metadata"]["resourceVersion"] = json!(c.rv.to_string());
        let ev = json!({ "type": kind, "object": pod });
        c.log.push((c.rv, ev.clone()));
        let _ = self.events.send((c.rv, ev));
    }
}

pub fn query(q: &Option<String>, key: &str) -> Option<String> {
    q.as_deref()?.split('&').find_map(|kv| kv.strip_prefix(&format!("{key}="))).map(decode)
}

pub fn decode(s: &str) -> String {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            out.push(u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap(), 16).unwrap());
            i += 3;
        } else {
            out.push(if b[i] == b'+' { b' ' } else { b[i] });
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

/// Whether `obj` matches the label selector `k=v,k2` and field selector `metadata.name=x` of `q`.
pub fn matches(obj: &Value, q: &Option<String>) -> bool {
    let labels = &obj["metadata"]["labels"];
    let by_label = query(q, "labelSelector").is_none_or(|sel| {
        sel.split(',').all(|term| match term.split_once('=') {
            Some((k, v)) => labels[k] == v,
            None => !labels[term].is_null(),
        })
    });
    let by_field = query(q, "fieldSelector")
        .is_none_or(|f| f.strip_prefix("metadata.name=").is_some_and(|n| obj["metadata"]["name"] == n));
    by_label && by_field
}

pub fn list(kind: &str, rv: u64, items: Vec<Value>) -> axum::response::Response {
    let v = json!({ "kind": kind, "apiVersion": if kind == "JobList" { "batch/v1" } else { "v1" }, "metadata": { "resourceVersion": rv.to_string() }, "items": items });
    axum::Json(v).into_response()
}

use axum::response::IntoResponse;

pub fn not_found(name: &str) -> axum::response::Response {
    let s = json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "NotFound", "code": 404, "message": format!("{name} not found") });
    (StatusCode::NOT_FOUND, axum::Json(s)).into_response()
}

/// The exit code a command ends with: `exit N` at its end, else 0.
pub fn exit_code(pod: &Value) -> Option<i64> {
    let cmd = pod["spec"]["containers"][0]["command"].as_array()?;
    let last = cmd.last()?.as_str()?;
    Some(last.rsplit_once("exit ").and_then(|(_, n)| n.trim().parse().ok()).unwrap_or(0))
}

/// The node a pod is pinned to by a required node affinity on `metadata.name`.
pub fn pinned(pod: &Value) -> Option<String> {
    let terms = &pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
    terms["nodeSelectorTerms"][0]["matchFields"][0]["values"][0].as_str().map(str::to_owned)
}

/// Whether a pod is held by scheduling gates.
pub fn gated(pod: &Value) -> bool {
    pod["spec"]["schedulingGates"].as_array().is_some_and(|g| !g.is_empty())
}

/// The kubelet: a gated pod waits (`SchedulingGated`); another runs at once on the node it is pinned
/// to, else `node1`; a command that ends (one with `exit N`, or `true`) ends.
pub fn start(api: &Api, c: &mut Cluster, mut pod: Value) {
    let name = pod["metadata"]["name"].as_str().unwrap().to_owned();
    pod["metadata"]["uid"] = json!(format!("uid-{name}"));
    if pod["metadata"]["creationTimestamp"].is_null() {
        pod["metadata"]["creationTimestamp"] = json!("2026-11-26T06:00:00Z");
    }
    if gated(&pod) {
        pod["status"] = json!({ "phase": "Pending", "conditions": [{ "type": "PodScheduled", "status": "False", "reason": "SchedulingGated", "message": "Scheduling is blocked due to non-empty scheduling gates" }] });
        api.emit(c, "ADDED", &pod);
        c.pods.insert(name, pod);
        return;
    }
    pod["spec"]["nodeName"] = json!(pinned(&pod).unwrap_or_else(|| "node1".into()));
    let ip = c.pod_ip.clone().unwrap_or_else(|| "127.0.0.1".into());
    pod["status"] = json!({ "phase": "Running", "podIP": ip, "containerStatuses": [{ "name": "member", "image": "busybox", "imageID": "", "ready": true, "restartCount": 0, "state": { "running": {} } }] });
    let ends = pod["spec"]["containers"][0]["command"].as_array().is_some_and(|c| !c.iter().any(|a| a == "3600"));
    if pod["spec"]["restartPolicy"] == "Always" {
        // a Deployment's: its probe passes while it runs; one whose command ends is restarted by the
        // kubelet and crash-loops
        let code = exit_code(&pod).filter(|_| ends);
        let held = c.hold && pod["metadata"]["annotations"]["fake/generation"] != "1";
        let ready = code.is_none() && !held;
        pod["status"]["conditions"] = json!([{ "type": "Ready", "status": if ready { "True" } else { "False" } }]);
        if let Some(code) = code {
            pod["status"]["containerStatuses"][0]["ready"] = json!(false);
            pod["status"]["containerStatuses"][0]["restartCount"] = json!(3);
            pod["status"]["containerStatuses"][0]["state"] = json!({ "waiting": { "reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container" } });
            pod["status"]["containerStatuses"][0]["lastState"] =
                json!({ "terminated": { "exitCode": code, "reason": "Error" } });
        }
        api.emit(c, "ADDED", &pod);
        c.pods.insert(name, pod);
        return;
    }
    api.emit(c, "ADDED", &pod);
    if ends && let Some(code) = exit_code(&pod) {
        pod["status"]["phase"] = json!(if code == 0 { "Succeeded" } else { "Failed" });
        pod["status"]["containerStatuses"][0]["state"] =
            json!({ "terminated": { "exitCode": code, "reason": if code == 0 { "Completed" } else { "Error" } } });
        api.emit(c, "MODIFIED", &pod);
    }
    c.pods.insert(name, pod);
}

async fn pods_get(State(api): State<Api>, RawQuery(q): RawQuery) -> axum::response::Response {
    if query(&q, "watch").as_deref() == Some("true") {
        let from: u64 = query(&q, "resourceVersion").and_then(|v| v.parse().ok()).unwrap_or(0);
        let (backlog, rx) = {
            let c = api.cluster.lock().unwrap();
            (c.log.iter().filter(|(rv, _)| *rv > from).cloned().collect::<Vec<_>>(), api.events.subscribe())
        };
        let live = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.ok().map(|e| (e, rx)) });
        let q2 = q.clone();
        let body = futures::stream::iter(backlog).chain(live).filter_map(move |(_, ev)| {
            let keep = matches(&ev["object"], &q2);
            async move { keep.then(|| Ok::<_, std::convert::Infallible>(Bytes::from(format!("{ev}\n")))) }
        });
        return Body::from_stream(body).into_response();
    }
    let c = api.cluster.lock().unwrap();
    list("PodList", c.rv, c.pods.values().filter(|p| matches(p, &q)).cloned().collect())
}

/// Every namespace's pods (this fake has one), without those ended where the field selector says so.
async fn all_pods(State(api): State<Api>, RawQuery(q): RawQuery) -> axum::response::Response {
    let live = query(&q, "fieldSelector").is_some_and(|f| f.contains("status.phase!=Failed"));
    let c = api.cluster.lock().unwrap();
    let pods =
        c.pods.values().filter(|p| !live || !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed")));
    list("PodList", c.rv, pods.cloned().collect())
}

async fn pods_post(State(api): State<Api>, body: Bytes) -> axum::response::Response {
    let pod: Value = serde_json::from_slice(&body).unwrap();
    let mut c = api.cluster.lock().unwrap();
    start(&api, &mut c, pod.clone());
    (StatusCode::CREATED, axum::Json(pod)).into_response()
}

async fn pods_delete_all(State(api): State<Api>, RawQuery(q): RawQuery) -> axum::response::Response {
    let mut c = api.cluster.lock().unwrap();
    let gone: Vec<String> = c.pods.iter().filter(|(_, p)| matches(p, &q)).map(|(n, _)| n.clone()).collect();
    let mut items = Vec::new();
    for n in gone {
        let p = c.pods.remove(&n).unwrap();
        api.emit(&mut c, "DELETED", &p);
        items.push(p);
    }
    list("PodList", c.rv, items)
}

async fn pod_patch(
    State(api): State<Api>,
    Path((_, name)): Path<(String, String)>,
    body: Bytes,
) -> axum::response::Response {
    let patch: Value = serde_json::from_slice(&body).unwrap();
    let mut c = api.cluster.lock().unwrap();
    let Some(mut pod) = c.pods.get(&name).cloned() else { return not_found(&name) };
    for (k, v) in patch["metadata"]["annotations"].as_object().into_iter().flatten() {
        pod["metadata"]["annotations"][k] = v.clone();
    }
    if !patch["spec"]["affinity"].is_null() {
        assert!(gated(&pod), "a pod's affinity changes only while it is gated");
        pod["spec"]["affinity"] = patch["spec"]["affinity"].clone();
    }
    if patch["spec"].get("schedulingGates").is_some() && gated(&pod) {
        // ungated: the scheduler binds it (to its pin) and the kubelet starts it
        pod["spec"]["schedulingGates"] = patch["spec"]["schedulingGates"].clone();
        start(&api, &mut c, pod.clone());
        return axum::Json(pod).into_response();
    }
    if patch["spec"]["activeDeadlineSeconds"].is_number() && pod["status"]["phase"] == "Running" {
        // the kubelet stops it with SIGTERM, which the shell dies of
        pod["status"]["phase"] = json!("Failed");
        pod["status"]["reason"] = json!("DeadlineExceeded");
        pod["status"]["containerStatuses"][0]["state"] =
            json!({ "terminated": { "exitCode": 143, "reason": "Error" } });
        api.emit(&mut c, "MODIFIED", &pod);
    }
    c.pods.insert(name, pod.clone());
    axum::Json(pod).into_response()
}

async fn pod_delete(State(api): State<Api>, Path((_, name)): Path<(String, String)>) -> axum::response::Response {
    let mut c = api.cluster.lock().unwrap();
    match c.pods.remove(&name) {
        Some(p) => {
            api.emit(&mut c, "DELETED", &p);
            axum::Json(p).into_response()
        }
        None => not_found(&name),
    }
}

async fn pod_log(State(api): State<Api>, Path((_, name)): Path<(String, String)>) -> axum::response::Response {
    let c = api.cluster.lock().unwrap();
    let Some(p) = c.pods.get(&name) else { return not_found(&name) };
    let env = p["spec"]["containers"][0]["env"].as_array().cloned().unwrap_or_default();
    let var = |k: &str| env.iter().find(|v| v["name"] == k).and_then(|v| v["value"].as_str()).unwrap_or("").to_owned();
    format!("hello from {name}\nrank {} of {} at {}\n", var("RANK"), var("WORLD_SIZE"), var("MASTER_ADDR"))
        .into_response()
}

async fn jobs_get(State(api): State<Api>, RawQuery(q): RawQuery) -> axum::response::Response {
    let c = api.cluster.lock().unwrap();
    let jobs = c
        .jobs
        .values()
        .filter(|j| matches(j, &q))
        .map(|j| {
            // its status from its pod's phase
            let mut j = j.clone();
            let prefix = format!("{}-", j["metadata"]["name"].as_str().unwrap());
            let phase = c.pods.iter().find(|(n, _)| n.starts_with(&prefix)).map(|(_, p)| p["status"]["phase"].clone());
            j["status"] = match phase.as_ref().and_then(Value::as_str) {
                Some("Succeeded") => json!({ "succeeded": 1 }),
                Some("Failed") => json!({ "failed": 1 }),
                Some(_) => json!({ "active": 1 }),
                None => json!({}),
            };
            j
        })
        .collect();
    list("JobList", c.rv, jobs)
}

async fn jobs_post(State(api): State<Api>, body: Bytes) -> axum::response::Response {
    let job: Value = serde_json::from_slice(&body).unwrap();
    let mut c = api.cluster.lock().unwrap();
    let name = job["metadata"]["name"].as_str().unwrap().to_owned();
    let tpl = &job["spec"]["template"];
    let mut pod =
        json!({ "apiVersion": "v1", "kind": "Pod", "metadata": tpl["metadata"].clone(), "spec": tpl["spec"].clone() });
    pod["metadata"]["name"] = json!(format!("{name}-x7k2q"));
    start(&api, &mut c, pod);
    c.jobs.insert(name, job.clone());
    (StatusCode::CREATED, axum::Json(job)).into_response()
}

async fn jobs_delete_all(State(api): State<Api>, RawQuery(q): RawQuery) -> axum::response::Response {
    let mut c = api.cluster.lock().unwrap();
    c.jobs.retain(|_, j| !matches(j, &q));
    list("JobList", c.rv, vec![])
}

async fn job_patch(Path((_, name)): Path<(String, String)>) -> axum::response::Response {
    not_found(&name)
}

async fn services_post(State(api): State<Api>, body: Bytes) -> axum::response::Response {
    let svc: Value = serde_json::from_slice(&body).unwrap();
    api.cluster.lock().unwrap().services.insert(svc["metadata"]["name"].as_str().unwrap().to_owned(), svc.clone());
    (StatusCode::CREATED, axum::Json(svc)).into_response()
}

async fn service_delete(State(api): State<Api>, Path((_, name)): Path<(String, String)>) -> axum::response::Response {
    match api.cluster.lock().unwrap().services.remove(&name) {
        Some(s) => axum::Json(s).into_response(),
        None => not_found(&name),
    }
}

/// Every Deployment's rollout ends: its pods of the current template get ready, the others go.
pub fn finish_rollouts(api: &Api, c: &mut Cluster) {
    c.hold = false;
    let deployments: Vec<(String, u64)> =
        c.deployments.iter().map(|(n, d)| (n.clone(), d["metadata"]["generation"].as_u64().unwrap())).collect();
    for (name, generation) in deployments {
        for n in pods_of(c, &name) {
            let mut p = c.pods.remove(&n).unwrap();
            if p["metadata"]["annotations"]["fake/generation"] == generation.to_string().as_str() {
                p["status"]["conditions"] = json!([{ "type": "Ready", "status": "True" }]);
                api.emit(c, "MODIFIED", &p);
                c.pods.insert(n, p);
            } else {
                api.emit(c, "DELETED", &p);
            }
        }
    }
}

/// Deployment `name`'s pod of generation `generation`, from its template.
fn deployment_pod(dep: &Value, name: &str, generation: u64) -> Value {
    let tpl = &dep["spec"]["template"];
    let mut pod =
        json!({ "apiVersion": "v1", "kind": "Pod", "metadata": tpl["metadata"].clone(), "spec": tpl["spec"].clone() });
    pod["metadata"]["name"] = json!(format!("{name}-{generation}"));
    pod["metadata"]["annotations"]["fake/generation"] = json!(generation.to_string());
    pod["metadata"]["creationTimestamp"] = json!(format!("2026-11-26T06:{generation:02}:00Z"));
    pod
}

/// The pods of Deployment `name` (named `<name>-<generation>`).
fn pods_of(c: &Cluster, name: &str) -> Vec<String> {
    let stem = format!("{name}-");
    c.pods
        .iter()
        .filter(|(n, p)| {
            n.strip_prefix(&stem).is_some_and(|g| g.parse::<u64>().is_ok())
                && !p["metadata"]["annotations"]["fake/generation"].is_null()
        })
        .map(|(n, _)| n.clone())
        .collect()
}

fn pod_ready(p: &Value) -> bool {
    p["status"]["conditions"]
        .as_array()
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

async fn deployments_post(State(api): State<Api>, body: Bytes) -> axum::response::Response {
    let mut dep: Value = serde_json::from_slice(&body).unwrap();
    let name = dep["metadata"]["name"].as_str().unwrap().to_owned();
    dep["metadata"]["generation"] = json!(1);
    let mut c = api.cluster.lock().unwrap();
    start(&api, &mut c, deployment_pod(&dep, &name, 1));
    c.deployments.insert(name, dep.clone());
    (StatusCode::CREATED, axum::Json(dep)).into_response()
}

/// A rollout (a new template: a pod of the new generation beside the old one, which goes once the
/// new one is ready; back to a template a ready pod runs: the others go) or a scale (kept).
async fn deployment_patch(
    State(api): State<Api>,
    Path((_, name)): Path<(String, String)>,
    body: Bytes,
) -> axum::response::Response {
    let patch: Value = serde_json::from_slice(&body).unwrap();
    let mut c = api.cluster.lock().unwrap();
    let Some(mut dep) = c.deployments.get(&name).cloned() else { return not_found(&name) };
    if let Some(r) = patch["spec"].get("replicas") {
        dep["spec"]["replicas"] = r.clone();
    }
    if let Some(tpl) = patch["spec"].get("template") {
        let generation = dep["metadata"]["generation"].as_u64().unwrap() + 1;
        dep["metadata"]["generation"] = json!(generation);
        dep["spec"]["template"] = tpl.clone();
        // the terms (image and command; the rest names the attempt) of a ready pod: back to its template
        let terms = |c: &Value| (c["image"].clone(), c["command"].clone());
        let wanted = terms(&tpl["spec"]["containers"][0]);
        let pods = pods_of(&c, &name);
        let same =
            pods.iter().find(|n| terms(&c.pods[*n]["spec"]["containers"][0]) == wanted && pod_ready(&c.pods[*n]));
        let keep = match same {
            Some(n) => n.clone(),
            None => {
                let pod = deployment_pod(&dep, &name, generation);
                let new = pod["metadata"]["name"].as_str().unwrap().to_owned();
                start(&api, &mut c, pod);
                new
            }
        };
        if pod_ready(&c.pods[&keep]) {
            for old in pods.into_iter().filter(|n| *n != keep) {
                let p = c.pods.remove(&old).unwrap();
                api.emit(&mut c, "DELETED", &p);
            }
        }
    }
    c.deployments.insert(name, dep.clone());
    axum::Json(dep).into_response()
}

/// The Deployments with their status from their pods (all of the current template and ready:
/// complete), and `Progressing=False` where the cluster is told to stall.
async fn deployments_get(State(api): State<Api>, RawQuery(q): RawQuery) -> axum::response::Response {
    let c = api.cluster.lock().unwrap();
    let items: Vec<Value> = c
        .deployments
        .iter()
        .filter(|(_, d)| matches(d, &q))
        .map(|(name, d)| {
            let mut d = d.clone();
            let generation = d["metadata"]["generation"].as_u64().unwrap();
            let pods: Vec<&Value> = pods_of(&c, name).iter().map(|n| &c.pods[n]).collect();
            let updated = pods.iter().filter(|p| p["metadata"]["annotations"]["fake/generation"].as_str().and_then(|g| g.parse().ok()) == Some(generation)).count();
            let ready = pods.iter().filter(|p| pod_ready(p)).count();
            let progressing = if c.stall {
                json!({ "type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": format!("ReplicaSet \"{name}-{generation}\" has timed out progressing.") })
            } else {
                json!({ "type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated" })
            };
            d["status"] = json!({ "observedGeneration": generation, "replicas": pods.len(), "updatedReplicas": updated,
                "availableReplicas": ready, "conditions": [progressing] });
            d
        })
        .collect();
    let v = json!({ "kind": "DeploymentList", "apiVersion": "apps/v1", "metadata": { "resourceVersion": c.rv.to_string() }, "items": items });
    axum::Json(v).into_response()
}

async fn deployment_delete(
    State(api): State<Api>,
    Path((_, name)): Path<(String, String)>,
) -> axum::response::Response {
    let mut c = api.cluster.lock().unwrap();
    let Some(d) = c.deployments.remove(&name) else { return not_found(&name) };
    for n in pods_of(&c, &name) {
        let p = c.pods.remove(&n).unwrap();
        api.emit(&mut c, "DELETED", &p);
    }
    axum::Json(d).into_response()
}

/// An exec stream (`v5.channel.k8s.io`): the app says it started and runs until the hub lets go.
async fn pod_exec(
    ws: axum::extract::ws::WebSocketUpgrade,
    State(api): State<Api>,
    RawQuery(q): RawQuery,
) -> axum::response::Response {
    api.cluster.lock().unwrap().execs.push(q.unwrap_or_default());
    ws.protocols(["v5.channel.k8s.io"]).on_upgrade(|mut socket| async move {
        use axum::extract::ws::Message;
        let _ = socket.send(Message::Binary(Bytes::from_static(b"\x01app started\n"))).await;
        while let Some(Ok(_)) = socket.recv().await {}
    })
}

/// A port-forward stream (`portforward.k8s.io` over `v4.channel.k8s.io`): for its one port, channel 0
/// carries data and channel 1 errors, each opened by a frame of the port (little-endian); the data go
/// to the pod's port, which in this fake is 127.0.0.1's; a refused connection is told on the error
/// channel.
async fn pod_portforward(
    ws: axum::extract::ws::WebSocketUpgrade,
    State(api): State<Api>,
    Path((_, name)): Path<(String, String)>,
    RawQuery(q): RawQuery,
) -> axum::response::Response {
    use axum::extract::ws::Message;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let port: u16 = query(&q, "ports").and_then(|p| p.parse().ok()).unwrap_or(0);
    {
        let mut c = api.cluster.lock().unwrap();
        if !c.pods.contains_key(&name) {
            return not_found(&name);
        }
        c.forwards.push(format!("{name}:{port}"));
    }
    ws.protocols(["v4.channel.k8s.io"]).on_upgrade(move |mut socket| async move {
        let [lo, hi] = port.to_le_bytes();
        for ch in [0u8, 1] {
            let _ = socket.send(Message::Binary(Bytes::from(vec![ch, lo, hi]))).await;
        }
        let mut tcp = match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            Ok(t) => t,
            Err(e) => {
                let msg = format!("\x01error forwarding port {port} to pod {name}: {e}");
                let _ = socket.send(Message::Binary(Bytes::from(msg.into_bytes()))).await;
                return;
            }
        };
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            tokio::select! {
                m = socket.recv() => match m {
                    Some(Ok(Message::Binary(b))) if b.first() == Some(&0) => {
                        if tcp.write_all(&b[1..]).await.is_err() {
                            break;
                        }
                    }
                    Some(Ok(Message::Binary(_) | Message::Ping(_) | Message::Pong(_) | Message::Text(_))) => {}
                    _ => break,
                },
                n = tcp.read(&mut buf) => match n {
                    Ok(n) if n > 0 => {
                        let mut frame = vec![0u8];
                        frame.extend_from_slice(&buf[..n]);
                        if socket.send(Message::Binary(Bytes::from(frame))).await.is_err() {
                            break;
                        }
                    }
                    _ => break,
                },
            }
        }
        let _ = socket.send(Message::Close(None)).await;
    })
}

/// metrics-server's `PodMetrics` of the running pods the selector matches: half a core and 300 MiB
/// each, sampled now.
async fn pod_metrics(State(api): State<Api>, RawQuery(q): RawQuery) -> axum::response::Response {
    let c = api.cluster.lock().unwrap();
    if !c.metrics {
        return not_found("the server could not find the requested resource (metrics.k8s.io)");
    }
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let items = c
        .pods
        .values()
        .filter(|p| matches(p, &q) && p["status"]["phase"] == "Running")
        .map(|p| {
            json!({
                "kind": "PodMetrics", "apiVersion": "metrics.k8s.io/v1beta1",
                "metadata": { "name": p["metadata"]["name"], "labels": p["metadata"]["labels"] },
                "timestamp": now, "window": "1s",
                "containers": [{ "name": "member", "usage": { "cpu": "500m", "memory": "300Mi" } }],
            })
        })
        .collect();
    list("PodMetricsList", c.rv, items)
}

async fn nodes(State(api): State<Api>) -> axum::response::Response {
    let c = api.cluster.lock().unwrap();
    let nodes = if c.nodes.is_empty() { vec![("node1".to_owned(), 4)] } else { c.nodes.clone() };
    let nodes = nodes.into_iter().map(|(name, gpus)| json!({
        "metadata": { "name": name },
        "status": { "allocatable": { "cpu": "16", "memory": "64Gi", "nvidia.com/gpu": gpus.to_string() }, "conditions": [{ "type": "Ready", "status": "True" }] },
    }));
    list("NodeList", 1, nodes.collect())
}

/// A hub on the kubernetes engine over the fake API server, and the server's objects.
pub async fn hub() -> (Hub, Arc<Mutex<Cluster>>) {
    let (hub, cluster, _) = hub_and_engine().await;
    (hub, cluster)
}

/// [`hub`], with its engine and the fake API server's state (for a restart on them).
pub async fn hub_and_engine() -> (Hub, Arc<Mutex<Cluster>>, (Arc<gpuhub_kube::KubeEngine>, Api)) {
    hub_with(gpuhub_kube::KubeConfig::default(), None).await
}

/// [`hub_and_engine`] with the engine's settings and the pods' IP.
pub async fn hub_with(
    config: gpuhub_kube::KubeConfig,
    pod_ip: Option<&str>,
) -> (Hub, Arc<Mutex<Cluster>>, (Arc<gpuhub_kube::KubeEngine>, Api)) {
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_test_writer().try_init();
    let (events, _) = broadcast::channel(1024);
    let api = Api { cluster: Arc::default(), events, ahead: Arc::default() };
    api.cluster.lock().unwrap().pod_ip = pod_ip.map(str::to_owned);
    let cluster = api.cluster.clone();
    let api_handle = api.clone();
    let ns = "/api/v1/namespaces/{ns}";
    let app = axum::Router::new()
        .route(&format!("{ns}/pods"), get(pods_get).post(pods_post).delete(pods_delete_all))
        .route(&format!("{ns}/pods/{{name}}"), axum::routing::patch(pod_patch).delete(pod_delete))
        .route(&format!("{ns}/pods/{{name}}/log"), get(pod_log))
        .route(&format!("{ns}/pods/{{name}}/exec"), get(pod_exec))
        .route(&format!("{ns}/pods/{{name}}/portforward"), get(pod_portforward))
        .route("/apis/batch/v1/namespaces/{ns}/jobs", get(jobs_get).post(jobs_post).delete(jobs_delete_all))
        .route("/apis/batch/v1/namespaces/{ns}/jobs/{name}", axum::routing::patch(job_patch))
        .route(&format!("{ns}/services"), axum::routing::post(services_post))
        .route(&format!("{ns}/services/{{name}}"), axum::routing::delete(service_delete))
        .route("/apis/apps/v1/namespaces/{ns}/deployments", get(deployments_get).post(deployments_post))
        .route(
            "/apis/apps/v1/namespaces/{ns}/deployments/{name}",
            axum::routing::patch(deployment_patch).delete(deployment_delete),
        )
        .route("/api/v1/nodes", get(nodes))
        .route("/api/v1/pods", get(all_pods))
        .route("/apis/metrics.k8s.io/v1beta1/namespaces/{ns}/pods", get(pod_metrics))
        .with_state(api);
    let url = gpuhub_testkit::http::serve(app).await.unwrap();
    let ahead = api_handle.ahead.clone();
    let engine = gpuhub_kube::KubeEngine::with_url(&url, config).unwrap();
    let engine = Arc::new(engine.with_clock(move || std::time::SystemTime::now() + *ahead.lock().unwrap()));
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = common::config(dir.path());
    cfg.engine = gpuhub_server::config::EngineKind::Kubernetes;
    cfg.monitor.interval_secs = 1;
    (Hub::start_on(dir, cfg, engine.clone()).await, cluster, (engine, api_handle))
}
