//! The mocked API server: kube-rs's client over `tower_test`'s mocked service (as kube-rs's own tests
//! do), answering each request with what a handler written from the Kubernetes API reference says,
//! and recording every request (in the kit's `Recorder`, which a test can wait on).

#![allow(dead_code)]

use gpuhub_kube::{KubeConfig, KubeEngine};
use gpuhub_testkit::Recorder;
use http::{Request, Response};
use http_body_util::BodyExt;
use kube::client::Body;
use serde_json::{Value, json};
use std::sync::Arc;

/// A request the engine made.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    /// The query, percent-decoded.
    pub query: String,
    pub body: Value,
}

impl Seen {
    /// `METHOD path`.
    pub fn line(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

/// What the mocked API server answers.
#[derive(Debug)]
pub enum Reply {
    Json(u16, Value),
    Raw(u16, Vec<u8>),
    /// Never answers (an open watch with nothing to say).
    Hang,
}

pub type Handler = Arc<dyn Fn(&Seen) -> Reply + Send + Sync>;

/// An engine over a mocked API server answering with `handler`, and what it was asked.
pub fn engine(
    config: KubeConfig,
    handler: impl Fn(&Seen) -> Reply + Send + Sync + 'static,
) -> (KubeEngine, Recorder<Seen>) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let seen = Recorder::default();
    let log = seen.clone();
    tokio::spawn(async move {
        let mut hung = Vec::new();
        while let Some((req, send)) = handle.next_request().await {
            let (parts, body) = req.into_parts();
            let bytes = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let s = Seen {
                method: parts.method.to_string(),
                path: parts.uri.path().to_owned(),
                query: decode(parts.uri.query().unwrap_or("")),
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            };
            let reply = handler(&s);
            log.push(s);
            match reply {
                Reply::Json(code, v) => send.send_response(
                    Response::builder().status(code).body(Body::from(serde_json::to_vec(&v).unwrap())).unwrap(),
                ),
                Reply::Raw(code, b) => {
                    send.send_response(Response::builder().status(code).body(Body::from(b)).unwrap())
                }
                Reply::Hang => hung.push(send),
            }
        }
    });
    let client = kube::Client::new(service, "gpuhub");
    (KubeEngine::with_client(client, config), seen)
}

/// `s` with `%XX` and `+` decoded.
pub fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(v) => {
                        out.push(v);
                        i += 3;
                    }
                    Err(_) => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A `Status` failure as the API server sends it.
pub fn status(code: u16, reason: &str, message: &str) -> Reply {
    Reply::Json(
        code,
        json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code }),
    )
}

/// A list of `kind` (`PodList`) with `items`.
pub fn list(kind: &str, items: Vec<Value>) -> Reply {
    Reply::Json(
        200,
        json!({ "kind": kind, "apiVersion": "v1", "metadata": { "resourceVersion": "100" }, "items": items }),
    )
}

/// Member `member`'s pod of run `r` (workload `w-1`) with `status`.
pub fn pod(member: u32, status: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("r-{member}"),
            "namespace": "gpuhub",
            "uid": format!("uid-{member}"),
            "resourceVersion": "100",
            "creationTimestamp": "2026-11-26T06:00:00Z",
            "labels": { "gpuhub.run": "r", "gpuhub.member": member.to_string(), "gpuhub.members": "2", "gpuhub.workload": "w-1", "gpuhub.instance": "inst" },
            "annotations": { "gpuhub.io/labels": "{\"gpuhub.workload\":\"w-1\",\"gpuhub.instance\":\"inst\",\"gpuhub.kind\":\"job\"}" },
        },
        "spec": {
            "nodeName": "gpu1",
            "containers": [{ "name": "member", "image": "busybox", "resources": { "limits": { "nvidia.com/gpu": "1" } } }],
        },
        "status": status,
    })
}

/// A pod's status with its container in `state` (`{"running": {}}`, `{"terminated": {...}}`).
pub fn container(phase: &str, state: Value) -> Value {
    json!({
        "phase": phase,
        "podIP": "10.1.2.3",
        "containerStatuses": [{ "name": "member", "image": "busybox", "imageID": "", "ready": true, "restartCount": 0, "state": state }],
    })
}

pub fn running() -> Value {
    container("Running", json!({ "running": { "startedAt": "2026-11-26T06:00:01Z" } }))
}

pub fn exited(code: i32, reason: &str) -> Value {
    container(
        if code == 0 { "Succeeded" } else { "Failed" },
        json!({ "terminated": { "exitCode": code, "reason": reason } }),
    )
}
