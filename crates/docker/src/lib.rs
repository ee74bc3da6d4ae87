//! [`DockerRuntime`]: gpuhub's [`Runtime`] on a Docker engine (API 1.41, Docker 20.10, and newer),
//! through bollard. Only this crate knows the Docker API.
//!
//! Every container is created hardened whatever the spec says: no new privileges, every capability
//! dropped, never privileged, an init process as PID 1, swap off (memory and memory+swap equal), a pids
//! limit, a numeric non-root user, and no mount that reaches the engine's socket or state. A spec's
//! output cap becomes rotating `json-file` logs, so no container can fill the engine's disk with output.

mod config;
mod error;
mod events;
mod exec;
mod firewall;
mod info;
mod network;

use async_trait::async_trait;
use bollard::Docker;
use bollard::container::{
    InspectContainerOptions, ListContainersOptions, LogsOptions, RemoveContainerOptions, StartContainerOptions,
    StopContainerOptions,
};
use futures::{StreamExt, TryStreamExt};
use gpuhub_driver::{
    ContainerInfo, ContainerSpec, EventStream, ExecHandle, ExecSpec, LABEL_WORKLOAD, LogStream, Runtime, RuntimeError,
};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// A connection to a Docker engine. Cheap to clone (clones share the connection pool).
#[derive(Debug, Clone)]
pub struct DockerRuntime {
    docker: Docker,
    /// Engine paths beyond the usual ones that must never be mounted (the socket `DOCKER_HOST` names).
    protected: Arc<Vec<PathBuf>>,
    network_lock: Arc<tokio::sync::Mutex<()>>,
    /// Whether gpuhub's bridges are kept off the host's own services (see `firewall`).
    isolate_host: bool,
}

impl DockerRuntime {
    /// Connects to the engine `DOCKER_HOST` names (`unix://…`, `tcp://…`), or to the local socket
    /// `/var/run/docker.sock`, and settles on the newest API version both sides speak.
    pub async fn connect() -> Result<Self, RuntimeError> {
        let docker = Docker::connect_with_defaults()
            .map_err(|e| RuntimeError::Engine(format!("cannot connect to the docker engine: {e}")))?;
        let docker = docker
            .negotiate_version()
            .await
            .map_err(|e| RuntimeError::Engine(format!("cannot reach the docker engine: {e}")))?;
        let mut protected = Vec::new();
        if let Some(path) = std::env::var("DOCKER_HOST").ok().as_deref().and_then(|h| h.strip_prefix("unix://")) {
            protected.push(PathBuf::from(path));
        }
        Ok(Self { docker, protected: Arc::new(protected), network_lock: Arc::default(), isolate_host: true })
    }

    /// Connects to the engine listening on the unix socket `socket` (another engine than the default
    /// one: tests run a private `dockerd`), which is then protected like the default socket.
    pub async fn connect_unix(socket: &std::path::Path) -> Result<Self, RuntimeError> {
        let path = socket.to_str().ok_or_else(|| RuntimeError::Engine(format!("{} is not UTF-8", socket.display())))?;
        let docker = Docker::connect_with_unix(path, 120, bollard::API_DEFAULT_VERSION)
            .map_err(|e| RuntimeError::Engine(format!("cannot connect to the docker engine at {path}: {e}")))?;
        let docker = docker
            .negotiate_version()
            .await
            .map_err(|e| RuntimeError::Engine(format!("cannot reach the docker engine at {path}: {e}")))?;
        let protected = vec![socket.to_path_buf()];
        Ok(Self { docker, protected: Arc::new(protected), network_lock: Arc::default(), isolate_host: true })
    }

    /// Whether containers on gpuhub's networks may reach the host's own services (by default they may
    /// not: `iptables` rules reject what they send to the host, replies to the host's own connections
    /// aside, and the link-local range). `false` makes no rules (hosts without iptables).
    pub fn with_host_isolation(mut self, on: bool) -> Self {
        self.isolate_host = on;
        self
    }

    /// The API version in use after negotiation (`1.41` for Docker 20.10).
    pub fn api_version(&self) -> String {
        self.docker.client_version().to_string()
    }
}

#[async_trait]
impl Runtime for DockerRuntime {
    async fn image_exists(&self, image: &str) -> Result<bool, RuntimeError> {
        match self.docker.inspect_image(image).await {
            Ok(_) => Ok(true),
            Err(e) if error::status(&e) == Some(404) => Ok(false),
            Err(e) => Err(error::map(e, image)),
        }
    }

    async fn ensure_network(&self, name: &str, labels: &BTreeMap<String, String>) -> Result<(), RuntimeError> {
        self.ensure_network_impl(name, labels).await
    }

    async fn create(&self, spec: &ContainerSpec) -> Result<String, RuntimeError> {
        let (options, config) = config::create_request(spec, &self.protected)?;
        // A symlink must not smuggle the engine's socket in: check where each source really leads.
        for m in &spec.mounts {
            if let Ok(real) = tokio::fs::canonicalize(&m.source).await {
                config::check_mount_source(&real, &self.protected)?;
            }
        }
        if let Some(net) = spec.network.as_deref().filter(|n| *n != "none") {
            self.check_network(net).await?;
        }
        let created = self
            .docker
            .create_container(Some(options), config)
            .await
            .map_err(|e| error::map_create(e, &spec.image, spec.network.as_deref()))?;
        for w in &created.warnings {
            tracing::warn!(container = %spec.name, warning = %w, "docker warned at creation");
        }
        Ok(created.id)
    }

    async fn start(&self, id: &str) -> Result<(), RuntimeError> {
        self.docker.start_container(id, None::<StartContainerOptions<String>>).await.map_err(|e| error::map(e, id))
    }

    async fn stop(&self, id: &str, grace: Duration) -> Result<(), RuntimeError> {
        let secs = grace.as_secs() + u64::from(grace.subsec_nanos() > 0);
        let options = StopContainerOptions { t: i64::try_from(secs).unwrap_or(i64::MAX) };
        // The engine answers only once the container is down: give the request the grace and more.
        let longer;
        let docker = if secs.saturating_add(30) > self.docker.timeout().as_secs() {
            longer = self.docker.clone().with_timeout(Duration::from_secs(secs.saturating_add(60)));
            &longer
        } else {
            &self.docker
        };
        // A stopped container answers 304, which is success.
        docker.stop_container(id, Some(options)).await.map_err(|e| error::map(e, id))
    }

    async fn remove(&self, id: &str) -> Result<(), RuntimeError> {
        let options = RemoveContainerOptions { force: true, v: true, link: false };
        self.docker.remove_container(id, Some(options)).await.map_err(|e| error::map(e, id))
    }

    async fn inspect(&self, id: &str) -> Result<ContainerInfo, RuntimeError> {
        let c =
            self.docker.inspect_container(id, None::<InspectContainerOptions>).await.map_err(|e| error::map(e, id))?;
        Ok(info::from_inspect(c))
    }

    async fn list_managed(&self) -> Result<Vec<ContainerInfo>, RuntimeError> {
        let options = ListContainersOptions {
            all: true,
            filters: HashMap::from([("label".to_owned(), vec![LABEL_WORKLOAD.to_owned()])]),
            ..Default::default()
        };
        let summaries = self.docker.list_containers(Some(options)).await.map_err(|e| error::map(e, "containers"))?;
        let mut out = Vec::with_capacity(summaries.len());
        for s in summaries {
            let id = s.id.clone().unwrap_or_default();
            match info::from_summary(s) {
                Some(i) => out.push(i),
                // The listing does not say how it ended: ask (it may be gone meanwhile).
                None => match self.inspect(&id).await {
                    Ok(i) => out.push(i),
                    Err(RuntimeError::NotFound(_)) => {}
                    Err(e) => return Err(e),
                },
            }
        }
        Ok(out)
    }

    async fn logs(&self, id: &str, follow: bool, tail: Option<u64>) -> Result<LogStream, RuntimeError> {
        // The log request fails only once read: make a missing container an error now.
        self.docker.inspect_container(id, None::<InspectContainerOptions>).await.map_err(|e| error::map(e, id))?;
        let options = LogsOptions {
            follow,
            stdout: true,
            stderr: true,
            timestamps: false,
            tail: tail.map_or_else(|| "all".to_owned(), |n| n.to_string()),
            ..Default::default()
        };
        let id = id.to_owned();
        Ok(self
            .docker
            .logs(&id, Some(options))
            .map_ok(bollard::container::LogOutput::into_bytes)
            .map_err(move |e| error::map(e, &id))
            .boxed())
    }

    async fn events(&self) -> Result<EventStream, RuntimeError> {
        Ok(events::subscribe(&self.docker))
    }

    async fn exec(&self, container: &str, spec: &ExecSpec) -> Result<ExecHandle, RuntimeError> {
        self.exec_impl(container, spec).await
    }

    async fn exec_resize(&self, exec_id: &str, cols: u16, rows: u16) -> Result<(), RuntimeError> {
        self.exec_resize_impl(exec_id, cols, rows).await
    }

    async fn exec_exit_code(&self, exec_id: &str) -> Result<Option<i64>, RuntimeError> {
        self.exec_exit_code_impl(exec_id).await
    }
}
