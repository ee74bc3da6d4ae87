//! An in-process server on 127.0.0.1:0 with a temp SQLite file and the recording fake engine.
#![allow(dead_code)]

use gpuhub_core::node::{GpuDevice, NodeCapacity};
use gpuhub_core::{Bytes, CpuMilli};
use gpuhub_driver::fake::FakeEngine;
use gpuhub_server::config::Config;
use gpuhub_server::{Server, start};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::sync::Arc;

pub const ADMIN_PASSWORD: &str = "admin-password";

pub struct Hub {
    pub server: Option<Server>,
    pub url: String,
    pub runtime: Arc<FakeEngine>,
    pub dir: tempfile::TempDir,
    pub http: reqwest::Client,
}

pub fn node(gpus: u32) -> NodeCapacity {
    NodeCapacity {
        name: "test-node".into(),
        cpus: CpuMilli(8000),
        memory: Bytes(32 << 30),
        gpus: (0..gpus)
            .map(|i| GpuDevice {
                uuid: format!("GPU-fake-{i}"),
                index: i,
                model: "H200".into(),
                memory: Bytes(141 << 30),
                device: None,
                sharing: None,
            })
            .collect(),
        labels: Default::default(),
    }
}

/// A fake engine that places like Docker, on one node with two GPUs.
pub fn fake() -> Arc<FakeEngine> {
    Arc::new(FakeEngine::new().with_nodes(vec![node(2)]))
}

pub fn config(dir: &std::path::Path) -> Config {
    Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        ssh_listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.join("data"),
        admin_password: Some(ADMIN_PASSWORD.into()),
        ..Config::default()
    }
}

impl Hub {
    pub async fn start() -> Hub {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(tweak: impl FnOnce(&mut Config)) -> Hub {
        Self::start_seams(gpuhub_server::Seams::default(), tweak).await
    }

    /// A hub like [`Hub::start_with`] whose server samples `gpus` (a scripted GPU sampler).
    pub async fn start_sampled(tweak: impl FnOnce(&mut Config), gpus: Arc<dyn gpuhub_gpu::GpuSampler>) -> Hub {
        Self::start_seams(gpuhub_server::Seams { gpus: Some(gpus), ..Default::default() }, tweak).await
    }

    /// A hub on the fake engine that reads the time and this host's GPUs through `seams` (a manual
    /// clock, a scripted GPU sampler), with `tweak`ed configuration.
    pub async fn start_seams(seams: gpuhub_server::Seams, tweak: impl FnOnce(&mut Config)) -> Hub {
        let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into());
        let _ = tracing_subscriber::fmt().with_env_filter(filter).with_test_writer().try_init();
        let dir = tempfile::tempdir().unwrap();
        let runtime = fake();
        let mut cfg = config(dir.path());
        tweak(&mut cfg);
        let server = gpuhub_server::start_with(cfg, runtime.clone(), seams).await.unwrap();
        let url = format!("http://{}", server.addr);
        Hub { server: Some(server), url, runtime, dir, http: reqwest::Client::new() }
    }

    /// A hub on `dir` with `cfg` and any engine (the `runtime` field then holds an unused fake).
    pub async fn start_on(dir: tempfile::TempDir, cfg: Config, engine: Arc<dyn gpuhub_driver::Engine>) -> Hub {
        let server = start(cfg, engine).await.unwrap();
        let url = format!("http://{}", server.addr);
        Hub { server: Some(server), url, runtime: fake(), dir, http: reqwest::Client::new() }
    }

    /// Waits, on the controller's change feed, until `done` holds for `name`'s workload, at most `secs`.
    pub async fn wait_for(&self, token: &str, name: &str, secs: u64, done: impl Fn(&Value) -> bool) -> Value {
        let server = self.server.as_ref().unwrap();
        let mut changes = server.state.controller.changes();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(secs);
        loop {
            let v = self.get(token, name).await;
            if done(&v) {
                return v;
            }
            if tokio::time::timeout_at(deadline, changes.recv()).await.is_err() {
                panic!("{name}: condition not met within {secs} s: {v}");
            }
        }
    }

    /// Waits for monitoring rounds (the monitor's round signal, no sleeping) until `done` holds for
    /// `name`'s view; at most 20 rounds.
    pub async fn until_round(&self, token: &str, name: &str, done: impl Fn(&Value) -> bool) -> Value {
        let mut rounds = self.server.as_ref().unwrap().state.metrics.rounds();
        for _ in 0..20 {
            let v = self.get(token, name).await;
            if done(&v) {
                return v;
            }
            tokio::time::timeout(std::time::Duration::from_secs(10), rounds.changed()).await.unwrap().unwrap();
        }
        panic!("{name}: condition not met after 20 rounds: {}", self.get(token, name).await);
    }

    /// Stops this server and starts another on the same data dir and runtime (a restart).
    pub async fn restart(&mut self) {
        self.server.take().unwrap().shutdown().await;
        self.restart_from_nothing().await;
    }

    /// Starts a server on the data dir and runtime when none runs.
    pub async fn restart_from_nothing(&mut self) {
        let server = start(config(self.dir.path()), self.runtime.clone()).await.unwrap();
        self.url = format!("http://{}", server.addr);
        self.server = Some(server);
    }

    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut req = self.http.request(method, format!("{}{path}", self.url));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let ctype = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
        let text = resp.text().await.unwrap();
        if status.is_client_error() || status.is_server_error() {
            assert_eq!(ctype, "application/problem+json", "{status} {path}: {text}");
        }
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, v)
    }

    pub async fn login(&self, user: &str, password: &str) -> String {
        let (s, v) =
            self.call(Method::POST, "/api/v1/login", None, Some(json!({"username": user, "password": password}))).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        v["token"].as_str().unwrap().to_owned()
    }

    pub async fn admin(&self) -> String {
        self.login("admin", ADMIN_PASSWORD).await
    }

    /// Creates a user and returns their token.
    pub async fn user(&self, admin: &str, name: &str) -> String {
        let body = json!({"username": name, "password": format!("{name}-password")});
        let (s, v) = self.call(Method::POST, "/api/v1/users", Some(admin), Some(body)).await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
        self.login(name, &format!("{name}-password")).await
    }

    pub async fn submit(&self, token: &str, body: Value) -> Value {
        let (s, v) = self.call(Method::POST, "/api/v1/workloads", Some(token), Some(body)).await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
        v
    }

    pub async fn get(&self, token: &str, name: &str) -> Value {
        let (s, v) = self.call(Method::GET, &format!("/api/v1/workloads/{name}"), Some(token), None).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        v
    }

    /// Waits, on the controller's change feed (no sleeping), until `name` reaches `state`.
    pub async fn wait_state(&self, token: &str, name: &str, state: &str) -> Value {
        let server = self.server.as_ref().unwrap();
        let mut changes = server.state.controller.changes();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let v = self.get(token, name).await;
            if v["state"] == state {
                return v;
            }
            match tokio::time::timeout_at(deadline, changes.recv()).await {
                Ok(_) => {}
                Err(_) => panic!("{name} did not reach {state}: {v}"),
            }
        }
    }

    /// The fake engine's id of a workload's run.
    pub async fn run(&self, token: &str, name: &str) -> String {
        let v = self.get(token, name).await;
        let id = v["id"].as_str().unwrap();
        let server = self.server.as_ref().unwrap();
        server.state.store.get_workload_by_id(id).await.unwrap().run_id.expect("has a run")
    }
}

pub fn job(name: &str, gpus: u32) -> Value {
    json!({"name": name, "kind": "job", "image": "busybox:latest", "command": ["true"], "resources": {"cpus": 1, "memory": "1GiB", "gpus": gpus}})
}
