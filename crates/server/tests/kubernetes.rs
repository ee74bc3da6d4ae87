//! The API on the Kubernetes engine behaves as on Docker, through the service layer: the hub runs on
//! the real `gpuhub_kube::KubeEngine`, which talks to an in-process fake API server on 127.0.0.1:0
//! (objects kept in memory, a watch streaming their changes, and a "kubelet" that starts each pod and
//! ends a job's with the code its command exits with). A job succeeds and fails with its code, a
//! two-member gang gets its ranks and its headless service, a workspace runs until stopped (its stop
//! by the pod's deadline keeps its record), its output comes through the API server's log, and a
//! workspace's JupyterLab, started through the exec stream, is served through the hub's proxy.

mod common;

use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::routing::get;
use common::Hub;
use futures::StreamExt;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

#[derive(Default)]
struct Cluster {
    /// The queries of the exec streams opened.
    execs: Vec<String>,
    pods: BTreeMap<String, Value>,
    jobs: BTreeMap<String, Value>,
    services: BTreeMap<String, Value>,
    rv: u64,
    /// Every pod event, with its resource version (what a watch from an older version replays).
    log: Vec<(u64, Value)>,
}

#[derive(Clone)]
struct Api {
    cluster: Arc<Mutex<Cluster>>,
    events: broadcast::Sender<(u64, Value)>,
}

impl Api {
    fn emit(&self, c: &mut Cluster, kind: &str, pod: &Value) {
        c.rv += 1;
        let mut pod = pod.clone();
        pod["metadata"]["resourceVersion"] = json!(c.rv.to_string());
        let ev = json!({ "type": kind, "object": pod });
        c.log.push((c.rv, ev.clone()));
        let _ = self.events.send((c.rv, ev));
    }
}

fn query(q: &Option<String>, key: &str) -> Option<String> {
    q.as_deref()?.split('&').find_map(|kv| kv.strip_prefix(&format!("{key}="))).map(decode)
}

fn decode(s: &str) -> String {
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
fn matches(obj: &Value, q: &Option<String>) -> bool {
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

fn list(kind: &str, rv: u64, items: Vec<Value>) -> axum::response::Response {
    let v = json!({ "kind": kind, "apiVersion": if kind == "JobList" { "batch/v1" } else { "v1" }, "metadata": { "resourceVersion": rv.to_string() }, "items": items });
    axum::Json(v).into_response()
}

use axum::response::IntoResponse;

fn not_found(name: &str) -> axum::response::Response {
    let s = json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "NotFound", "code": 404, "message": format!("{name} not found") });
    (StatusCode::NOT_FOUND, axum::Json(s)).into_response()
}

/// The exit code a command ends with: `exit N` at its end, else 0.
fn exit_code(pod: &Value) -> Option<i64> {
    let cmd = pod["spec"]["containers"][0]["command"].as_array()?;
    let last = cmd.last()?.as_str()?;
    Some(last.rsplit_once("exit ").and_then(|(_, n)| n.trim().parse().ok()).unwrap_or(0))
}

/// The kubelet: the pod runs at once on `node1`; a command that ends (one with `exit N`, or `true`) ends.
fn start(api: &Api, c: &mut Cluster, mut pod: Value) {
    let name = pod["metadata"]["name"].as_str().unwrap().to_owned();
    pod["metadata"]["uid"] = json!(format!("uid-{name}"));
    pod["metadata"]["creationTimestamp"] = json!("2026-11-26T06:00:00Z");
    pod["spec"]["nodeName"] = json!("node1");
    pod["status"] = json!({ "phase": "Running", "podIP": "127.0.0.1", "containerStatuses": [{ "name": "member", "image": "busybox", "imageID": "", "ready": true, "restartCount": 0, "state": { "running": {} } }] });
    api.emit(c, "ADDED", &pod);
    let ends = pod["spec"]["containers"][0]["command"].as_array().is_some_and(|c| !c.iter().any(|a| a == "3600"));
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
    format!("rank {} of {} at {}\n", var("RANK"), var("WORLD_SIZE"), var("MASTER_ADDR")).into_response()
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

async fn nodes() -> axum::response::Response {
    let node = json!({
        "metadata": { "name": "node1" },
        "status": { "allocatable": { "cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4" }, "conditions": [{ "type": "Ready", "status": "True" }] },
    });
    list("NodeList", 1, vec![node])
}

/// A hub on the kubernetes engine over the fake API server, and the server's objects.
async fn hub() -> (Hub, Arc<Mutex<Cluster>>) {
    let (hub, cluster, _) = hub_and_engine().await;
    (hub, cluster)
}

/// [`hub`], with its engine and the fake API server's state (for a restart on them).
async fn hub_and_engine() -> (Hub, Arc<Mutex<Cluster>>, (Arc<gpuhub_kube::KubeEngine>, Api)) {
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_test_writer().try_init();
    let (events, _) = broadcast::channel(1024);
    let api = Api { cluster: Arc::default(), events };
    let cluster = api.cluster.clone();
    let api_handle = api.clone();
    let ns = "/api/v1/namespaces/{ns}";
    let app = axum::Router::new()
        .route(&format!("{ns}/pods"), get(pods_get).post(pods_post).delete(pods_delete_all))
        .route(&format!("{ns}/pods/{{name}}"), axum::routing::patch(pod_patch).delete(pod_delete))
        .route(&format!("{ns}/pods/{{name}}/log"), get(pod_log))
        .route(&format!("{ns}/pods/{{name}}/exec"), get(pod_exec))
        .route("/apis/batch/v1/namespaces/{ns}/jobs", get(jobs_get).post(jobs_post).delete(jobs_delete_all))
        .route("/apis/batch/v1/namespaces/{ns}/jobs/{name}", axum::routing::patch(job_patch))
        .route(&format!("{ns}/services"), axum::routing::post(services_post))
        .route(&format!("{ns}/services/{{name}}"), axum::routing::delete(service_delete))
        .route("/api/v1/nodes", get(nodes))
        .with_state(api);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let engine = Arc::new(
        gpuhub_kube::KubeEngine::with_url(&format!("http://{addr}"), gpuhub_kube::KubeConfig::default()).unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = common::config(dir.path());
    cfg.engine = gpuhub_server::config::EngineKind::Kubernetes;
    (Hub::start_on(dir, cfg, engine.clone()).await, cluster, (engine, api_handle))
}

fn job(name: &str, command: &str) -> Value {
    json!({ "name": name, "kind": "job", "image": "busybox:latest", "command": ["sh", "-c", command], "resources": { "cpus": 1, "memory": "1GiB", "gpus": 1 } })
}

#[tokio::test]
async fn a_job_succeeds_or_fails_with_its_code() {
    let (hub, cluster) = hub().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    hub.submit(&alice, job("ok", "true")).await;
    hub.submit(&alice, job("bad", "exit 3")).await;
    let ok = hub.wait_for(&alice, "ok", 20, |w| w["state"] == "succeeded").await;
    assert_eq!(ok["members"][0]["exit_code"], 0, "{ok}");
    let bad = hub.wait_for(&alice, "bad", 20, |w| w["state"] == "failed").await;
    assert_eq!(bad["members"][0]["exit_code"], 3, "{bad}");
    let c = cluster.lock().unwrap();
    let pod = c.pods.values().find(|p| p["metadata"]["labels"]["gpuhub.workload"] == ok["id"]).expect("its pod");
    assert_eq!(pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"], "1");
    assert_eq!(pod["spec"]["securityContext"]["runAsNonRoot"], true);
    assert!(c.jobs.len() == 2, "a job's pod is a Job's");
}

#[tokio::test]
async fn a_gang_of_two_gets_its_ranks_and_a_headless_service() {
    let (hub, cluster) = hub().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let mut gang = job("ddp", "true");
    gang["members"] = json!(2);
    hub.submit(&alice, gang).await;
    let w = hub.wait_for(&alice, "ddp", 20, |w| w["state"] == "succeeded").await;
    assert_eq!(w["members"].as_array().unwrap().len(), 2, "{w}");
    let (s, out) = hub.call(Method::GET, "/api/v1/workloads/ddp/logs?member=1", Some(&alice), None).await;
    assert_eq!(s, StatusCode::OK);
    let text = out.as_str().map(str::to_owned).unwrap_or_else(|| out.to_string());
    assert!(text.contains("rank 1 of 2 at ddp-0."), "{text}");
    assert_eq!(cluster.lock().unwrap().services.len(), 1, "the gang's headless service");
}

#[tokio::test]
async fn a_workspace_runs_until_stopped_and_keeps_its_record() {
    let (hub, cluster) = hub().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let ws = json!({ "name": "dev", "kind": "workspace", "image": "busybox:latest", "command": ["sleep", "3600"], "resources": { "cpus": 1, "memory": "1GiB", "gpus": 0 } });
    hub.submit(&alice, ws).await;
    hub.wait_for(&alice, "dev", 20, |w| w["state"] == "running").await;
    let (s, v) = hub.call(Method::POST, "/api/v1/workloads/dev/stop", Some(&alice), None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let w = hub.wait_for(&alice, "dev", 20, |w| w["state"] == "stopped").await;
    assert_eq!(w["exit_code"], 143, "{w}");
    let pod = cluster.lock().unwrap().pods.values().next().cloned().expect("the stopped pod is kept");
    assert_eq!(pod["metadata"]["annotations"]["gpuhub.io/cancelled"], "true");
}

#[tokio::test]
async fn a_workspace_with_jupyterlab_is_served_through_the_hubs_proxy() {
    // the lab, at the pod's ip (the fake cluster's pods are at 127.0.0.1) and the app's port
    let lab = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = lab.local_addr().unwrap().port();
    let app =
        axum::Router::new().fallback(|uri: axum::http::Uri| async move { format!("<title>JupyterLab</title> {uri}") });
    tokio::spawn(async move { axum::serve(lab, app).await });
    let (hub, cluster) = hub().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let ws = json!({
        "name": "nb", "kind": "workspace", "image": "jupyter/base-notebook:latest", "command": ["sleep", "3600"],
        "resources": { "cpus": 1, "memory": "1GiB", "gpus": 0 },
        "apps": [{ "name": "lab", "port": port, "command": ["jupyter", "lab", "--port={port}"] }],
    });
    hub.submit(&alice, ws).await;
    hub.wait_for(&alice, "nb", 20, |w| w["state"] == "running").await;
    let url = format!("{}/w/alice/nb/lab/lab/tree", hub.url);
    let mut body = String::new();
    for _ in 0..200 {
        let r = hub.http.get(&url).bearer_auth(&alice).send().await.unwrap();
        if r.status() == StatusCode::OK {
            body = r.text().await.unwrap();
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(body.contains("JupyterLab"), "the lab through the hub's proxy: {body:?}");
    let execs = cluster.lock().unwrap().execs.clone();
    assert!(execs.iter().any(|q| q.contains("command=jupyter")), "the lab was started by exec: {execs:?}");
}

#[tokio::test]
async fn after_a_restart_runs_are_found_again_and_an_end_meanwhile_is_recorded() {
    let (mut hub, cluster, (engine, api)) = hub_and_engine().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    for name in ["stays", "ends"] {
        let ws = json!({ "name": name, "kind": "workspace", "image": "busybox:latest", "command": ["sleep", "3600"], "resources": { "cpus": 1, "memory": "1GiB", "gpus": 0 } });
        hub.submit(&alice, ws).await;
        hub.wait_for(&alice, name, 20, |w| w["state"] == "running").await;
    }
    let ends_id = hub.get(&alice, "ends").await["id"].clone();
    hub.server.take().unwrap().shutdown().await;
    // while the hub is down, one workspace's command ends with 5
    {
        let mut c = cluster.lock().unwrap();
        let name = c
            .pods
            .iter()
            .find(|(_, p)| p["metadata"]["labels"]["gpuhub.workload"] == ends_id)
            .map(|(n, _)| n.clone())
            .unwrap();
        let mut pod = c.pods[&name].clone();
        pod["status"]["phase"] = json!("Failed");
        pod["status"]["containerStatuses"][0]["state"] = json!({ "terminated": { "exitCode": 5, "reason": "Error" } });
        api.emit(&mut c, "MODIFIED", &pod);
        c.pods.insert(name, pod);
    }
    let mut cfg = common::config(hub.dir.path());
    cfg.engine = gpuhub_server::config::EngineKind::Kubernetes;
    let server = gpuhub_server::start(cfg, engine).await.unwrap();
    hub.url = format!("http://{}", server.addr);
    hub.server = Some(server);
    let alice = hub.login("alice", "alice-password").await;
    let ended = hub.wait_for(&alice, "ends", 20, |w| w["state"] == "failed").await;
    assert_eq!(ended["exit_code"], 5, "{ended}");
    let stays = hub.get(&alice, "stays").await;
    assert_eq!(stays["state"], "running", "{stays}");
}
