//! [`Hub`]: an in-process server on `127.0.0.1:0`, and the calls and waits tests make on it.

use crate::{ADMIN_PASSWORD, config, fake, init_tracing, node_with};
use chrono::{DateTime, Utc};
use gpuhub_controller::clock::ManualClock;
use gpuhub_core::node::GpuSharing;
use gpuhub_driver::fake::FakeEngine;
use gpuhub_gpu::FakeGpuSampler;
use gpuhub_server::config::Config;
use gpuhub_server::{Seams, Server, start};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// An in-process hub (API, portal, SSH gateway) on `127.0.0.1:0` with a temp data dir, usually on the
/// recording fake engine.
#[derive(Debug)]
pub struct Hub {
    /// The running server (`None` between a stop and [`Hub::restart_from_nothing`]).
    pub server: Option<Server>,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// The fake engine the hub runs on (an unused one for a hub on another engine: [`Hub::start_on`]).
    pub runtime: Arc<FakeEngine>,
    /// Data dir and whatever else the test keeps beside it.
    pub dir: tempfile::TempDir,
    /// A client without cookies (bearer tokens only).
    pub http: reqwest::Client,
}

impl Hub {
    /// A hub with the kit's [`config`] on a fake engine with one two-GPU node.
    pub async fn start() -> Hub {
        Self::start_with(|_| {}).await
    }

    /// [`Hub::start`] with `tweak`ed configuration.
    pub async fn start_with(tweak: impl FnOnce(&mut Config)) -> Hub {
        Self::start_seams(Seams::default(), tweak).await
    }

    /// A hub like [`Hub::start_with`] whose server samples `gpus` (a scripted GPU sampler).
    pub async fn start_sampled(tweak: impl FnOnce(&mut Config), gpus: Arc<dyn gpuhub_gpu::GpuSampler>) -> Hub {
        Self::start_seams(Seams { gpus: Some(gpus), ..Default::default() }, tweak).await
    }

    /// A hub on the fake engine that reads the time and this host's GPUs through `seams` (a manual
    /// clock, a scripted GPU sampler), with `tweak`ed configuration.
    pub async fn start_seams(seams: Seams, tweak: impl FnOnce(&mut Config)) -> Hub {
        init_tracing();
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = config(dir.path());
        tweak(&mut cfg);
        Self::start_fake(dir, cfg, fake(), seams).await
    }

    /// A hub whose time and GPUs the test drives: the fake engine with one node ([`node_with`]) whose
    /// GPUs are shared in `modes`, a manual clock at `t0` and a scripted sampler of those GPUs, the
    /// monitor sampling every second, and the configuration `tweak`ed (given the hub's directory); the
    /// hub, its clock and its sampler.
    pub async fn start_scripted(
        t0: DateTime<Utc>,
        modes: &[GpuSharing],
        tweak: impl FnOnce(&mut Config, &Path),
    ) -> (Hub, Arc<ManualClock>, Arc<FakeGpuSampler>) {
        init_tracing();
        let clock = Arc::new(ManualClock::new(t0));
        let dir = tempfile::tempdir().unwrap();
        let node = node_with(modes);
        let engine = Arc::new(FakeEngine::new().with_nodes(vec![node.clone()]));
        let sampler = Arc::new(FakeGpuSampler::new(node.gpus));
        let mut cfg = config(dir.path());
        cfg.monitor.interval_secs = 1;
        tweak(&mut cfg, dir.path());
        let seams = Seams { clock: clock.clone(), gpus: Some(sampler.clone()), ..Default::default() };
        (Self::start_fake(dir, cfg, engine, seams).await, clock, sampler)
    }

    /// A hub on `dir` with `cfg`, the fake `engine` (its nodes as the test made them) and `seams`.
    pub async fn start_fake(dir: tempfile::TempDir, cfg: Config, engine: Arc<FakeEngine>, seams: Seams) -> Hub {
        let server = gpuhub_server::start_with(cfg, engine.clone(), seams).await.unwrap();
        Self::from_server(server, engine, dir)
    }

    /// A hub on `dir` with `cfg` and any engine (the `runtime` field then holds an unused fake).
    pub async fn start_on(dir: tempfile::TempDir, cfg: Config, engine: Arc<dyn gpuhub_driver::Engine>) -> Hub {
        let server = start(cfg, engine).await.unwrap();
        Self::from_server(server, fake(), dir)
    }

    /// A hub around a server the test started itself on `dir`, with `runtime` as its fake engine.
    pub fn from_server(server: Server, runtime: Arc<FakeEngine>, dir: tempfile::TempDir) -> Hub {
        let url = format!("http://{}", server.addr);
        Hub { server: Some(server), url, runtime, dir, http: reqwest::Client::new() }
    }

    /// The running server.
    pub fn server(&self) -> &Server {
        self.server.as_ref().expect("the hub's server runs")
    }

    /// Waits, on the controller's change feed, until `done` holds for `name`'s workload, at most `secs`.
    pub async fn wait_for(&self, token: &str, name: &str, secs: u64, done: impl Fn(&Value) -> bool) -> Value {
        let mut changes = self.server().state.controller.changes();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
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
        let mut rounds = self.server().state.metrics.rounds();
        for _ in 0..20 {
            let v = self.get(token, name).await;
            if done(&v) {
                return v;
            }
            tokio::time::timeout(Duration::from_secs(10), rounds.changed()).await.unwrap().unwrap();
        }
        panic!("{name}: condition not met after 20 rounds: {}", self.get(token, name).await);
    }

    /// Kicks the controller and returns once a whole pass has run since (its pass counter rises as each
    /// pass begins, so a second rise means the first pass ended): for what a pass must not do (a test
    /// that nothing changed). Nothing signals a pass's end: it polls, for at most 10 s.
    pub async fn full_pass(&self) {
        let c = &self.server().state.controller;
        let first = c.passes() + 1;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        for target in [first, first + 1] {
            c.kick();
            while c.passes() < target {
                assert!(tokio::time::Instant::now() < deadline, "no scheduling pass within 10s");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
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

    /// A request to the API with `token` and a JSON `body`; the status and the JSON answer (a string
    /// when it is none). Every 4xx and 5xx must be `application/problem+json`.
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

    /// Logs `user` in; their token.
    pub async fn login(&self, user: &str, password: &str) -> String {
        let (s, v) =
            self.call(Method::POST, "/api/v1/login", None, Some(json!({"username": user, "password": password}))).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        v["token"].as_str().unwrap().to_owned()
    }

    /// The first admin's token.
    pub async fn admin(&self) -> String {
        self.login("admin", ADMIN_PASSWORD).await
    }

    /// Creates the user `name` (password `NAME-password`) as `admin` and returns their token.
    pub async fn user(&self, admin: &str, name: &str) -> String {
        let body = json!({"username": name, "password": format!("{name}-password")});
        let (s, v) = self.call(Method::POST, "/api/v1/users", Some(admin), Some(body)).await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
        self.login(name, &format!("{name}-password")).await
    }

    /// Submits `body` as `token`'s owner, which must be accepted; the workload.
    pub async fn submit(&self, token: &str, body: Value) -> Value {
        let (s, v) = self.call(Method::POST, "/api/v1/workloads", Some(token), Some(body)).await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
        v
    }

    /// The workload `name`, as `token`'s owner sees it.
    pub async fn get(&self, token: &str, name: &str) -> Value {
        let (s, v) = self.call(Method::GET, &format!("/api/v1/workloads/{name}"), Some(token), None).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        v
    }

    /// Waits, on the controller's change feed (no sleeping), until `name` reaches `state`.
    pub async fn wait_state(&self, token: &str, name: &str, state: &str) -> Value {
        let mut changes = self.server().state.controller.changes();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
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
        self.server().state.store.get_workload_by_id(id).await.unwrap().run_id.expect("has a run")
    }
}
