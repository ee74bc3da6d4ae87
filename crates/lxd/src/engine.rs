//! [`LxdEngine`]: the engine's state (the API, images, the event poller) and what its
//! operations share: finding a run's container, and reading a member's state from LXD and its run directory.

use crate::api::{Api, ApiError};
use crate::config::LxdConfig;
use crate::images::{Images, api_err};
use crate::spec;
use gpuhub_core::node::NodeCapacity;
use gpuhub_driver::{
    EngineError, EngineEvent, LABEL_MEMBER, LABEL_MEMBERS, LABEL_WORKLOAD, MemberState, MemberStatus, RunStatus,
};
use serde_json::{Map, Value};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

/// The exit status a member is given when its container stopped without its start script writing one
/// (killed: a forced stop, the memory limit, the host's shutdown).
pub const KILLED: i64 = 137;

/// gpuhub's engine on one LXD host. Cheap to clone.
#[derive(Debug, Clone)]
pub struct LxdEngine {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) config: LxdConfig,
    pub(crate) api: Api,
    pub(crate) node: NodeCapacity,
    pub(crate) images: Images,
    pub(crate) control_devices: Vec<String>,
    pub(crate) events: broadcast::Sender<EngineEvent>,
    pub(crate) poller: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(p) = self.poller.get_mut().ok().and_then(Option::take) {
            p.abort();
        }
    }
}

/// A container of gpuhub's, as LXD lists it.
#[derive(Debug, Clone)]
pub(crate) struct Container {
    pub(crate) name: String,
    pub(crate) running: bool,
    pub(crate) config: Map<String, Value>,
    pub(crate) devices: Map<String, Value>,
}

impl Container {
    pub(crate) fn from_value(v: &Value) -> Option<Self> {
        Some(Container {
            name: v.get("name")?.as_str()?.to_owned(),
            // a frozen container (LXD freezes one while it snapshots it: a workspace being saved) still
            // runs; only a stopped one has ended
            running: !matches!(v.get("status").and_then(Value::as_str), Some("Stopped" | "Error") | None),
            config: v.get("config").and_then(Value::as_object).cloned().unwrap_or_default(),
            devices: v.get("devices").and_then(Value::as_object).cloned().unwrap_or_default(),
        })
    }

    pub(crate) fn label(&self, key: &str) -> Option<&str> {
        self.config.get(&format!("{}{key}", spec::LABEL_PREFIX)).and_then(Value::as_str)
    }

    pub(crate) fn is_gpuhubs(&self) -> bool {
        self.label(LABEL_WORKLOAD).is_some()
    }
}

impl LxdEngine {
    /// Connects to the daemon `config` names on a host offering `node`: checks the settings, that LXD
    /// answers on its socket, that the storage pool exists, and makes the state directory; each failure
    /// in a sentence naming what was tried.
    pub async fn connect(config: LxdConfig, node: NodeCapacity) -> Result<Self, EngineError> {
        config.check().map_err(EngineError::Rejected)?;
        let engine = Self::new(config, node);
        engine.check().await?;
        Ok(engine)
    }

    /// The engine on the daemon `config` names, checking nothing.
    pub fn new(config: LxdConfig, node: NodeCapacity) -> Self {
        let (events, _) = broadcast::channel(4096);
        let api = Api::new(config.socket.clone(), config.project.clone());
        let images = Images::new(config.images_dir());
        let control_devices =
            spec::CONTROL_DEVICES.iter().filter(|d| std::path::Path::new(d).exists()).map(|d| d.to_string()).collect();
        LxdEngine {
            inner: Arc::new(Inner { config, api, node, images, control_devices, events, poller: Mutex::new(None) }),
        }
    }

    /// Its settings.
    pub fn config(&self) -> &LxdConfig {
        &self.inner.config
    }

    /// The REST API underneath.
    pub fn api(&self) -> &Api {
        &self.inner.api
    }

    /// What [`LxdEngine::connect`] checks.
    pub async fn check(&self) -> Result<(), EngineError> {
        let c = &self.inner.config;
        let server = self.inner.api.get("/1.0").await.map_err(|e| match e {
            ApiError::Unreachable { .. } => EngineError::Unavailable(format!(
                "{e}; is LXD installed and running? (apt-get install lxd; lxd --group root; \
                 `socket` in [lxd] or GPUHUB_LXD_SOCKET names another)"
            )),
            e => api_err(e),
        })?;
        if server.get("auth").and_then(Value::as_str) != Some("trusted") {
            return Err(EngineError::Unavailable(format!(
                "lxd at {} does not trust gpuhub (run gpuhub as root or in LXD's group)",
                c.socket.display()
            )));
        }
        let pool = format!("/1.0/storage-pools/{}", c.storage_pool);
        if let Err(e) = self.inner.api.get(&pool).await {
            return Err(EngineError::Unavailable(format!(
                "lxd at {} has no storage pool {} ({e}); make one (lxc storage create {} dir) or name another \
                 in lxd.storage_pool",
                c.socket.display(),
                c.storage_pool,
                c.storage_pool
            )));
        }
        for dir in [c.runs_dir(), c.images_dir()] {
            std::fs::create_dir_all(&dir)
                .map_err(|e| EngineError::Engine(format!("cannot make {}: {e}", dir.display())))?;
        }
        Ok(())
    }

    /// The run directory of container `name` on the host.
    pub(crate) fn run_dir(&self, name: &str) -> PathBuf {
        self.inner.config.runs_dir().join(name)
    }

    /// Container `name`, when it is one of gpuhub's; `NotFound` otherwise.
    pub(crate) async fn container(&self, name: &str) -> Result<Container, EngineError> {
        let not_found = || EngineError::NotFound(format!("run {name}"));
        if spec::lxd_name(name) != name {
            return Err(not_found());
        }
        let v = match self.inner.api.get(&format!("/1.0/instances/{name}")).await {
            Ok(v) => v,
            Err(e) if e.not_found() => return Err(not_found()),
            Err(e) => return Err(api_err(e)),
        };
        Container::from_value(&v).filter(Container::is_gpuhubs).ok_or_else(not_found)
    }

    /// Every container of gpuhub's.
    pub(crate) async fn containers(&self) -> Result<Vec<Container>, EngineError> {
        let all = self.inner.api.get("/1.0/instances?recursion=1").await.map_err(api_err)?;
        Ok(all
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Container::from_value)
            .filter(Container::is_gpuhubs)
            .collect())
    }

    /// The exit status container `name`'s start script wrote, if it has.
    pub(crate) fn exit_code(&self, name: &str) -> Option<i64> {
        std::fs::read_to_string(self.run_dir(name).join("exit")).ok()?.trim().parse().ok()
    }

    /// A member's state: ended with the status its start script wrote, as soon as it has (its last act:
    /// LXD may say the container runs for seconds more while it stops it); else running while its
    /// container runs; stopped without a status, [`KILLED`]; pending while it has never started (no
    /// output yet).
    pub(crate) fn state(&self, c: &Container) -> MemberState {
        if let Some(code) = self.exit_code(&c.name) {
            return MemberState::Exited(code);
        }
        if c.running {
            MemberState::Running
        } else if self.run_dir(&c.name).join("log").exists() {
            MemberState::Exited(KILLED)
        } else {
            MemberState::Pending
        }
    }

    /// The run a container is.
    pub(crate) fn status(&self, c: &Container) -> RunStatus {
        let mut labels = spec::labels(&c.config);
        let size = labels.get(LABEL_MEMBERS).and_then(|n| n.parse().ok()).unwrap_or(1);
        let index = labels.get(LABEL_MEMBER).and_then(|n| n.parse().ok()).unwrap_or(0);
        let gpus = labels
            .get(crate::LABEL_GPUS)
            .map(|g| g.split(',').filter(|p| !p.is_empty()).map(str::to_owned).collect())
            .unwrap_or_default();
        labels.retain(|k, _| k != LABEL_MEMBER && k != crate::LABEL_GPUS);
        RunStatus {
            id: c.name.clone(),
            labels,
            size,
            members: vec![MemberStatus {
                index,
                engine_id: c.name.clone(),
                node: Some(self.inner.node.name.clone()),
                state: self.state(c),
                gpus,
            }],
            pending: None,
        }
    }

    /// Sets container `name`'s power state (`start`, `stop`), waiting at most `timeout` seconds.
    pub(crate) async fn set_state(
        &self,
        name: &str,
        action: &str,
        force: bool,
        timeout: i64,
    ) -> Result<(), EngineError> {
        let body = serde_json::json!({"action": action, "force": force, "timeout": timeout});
        self.inner
            .api
            .json(http::Method::PUT, &format!("/1.0/instances/{name}/state"), &body)
            .await
            .map(|_| ())
            .map_err(api_err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frozen_container_still_runs() {
        let c = |status: &str| {
            let v = serde_json::json!({"name": "c", "status": status, "config": {"user.gpuhub.workload": "w"}});
            Container::from_value(&v).unwrap()
        };
        for (status, running) in
            [("Running", true), ("Frozen", true), ("Freezing", true), ("Stopped", false), ("Error", false)]
        {
            assert_eq!(c(status).running, running, "{status}");
        }
        assert!(c("Running").is_gpuhubs());
    }
}
