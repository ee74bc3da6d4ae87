//! gpuhub's engine on one Docker host (API 1.41, Docker 20.10, and newer), through bollard. Only this
//! crate knows the Docker API.
//!
//! [`DockerEngine`] is the [`gpuhub_driver::Engine`]: one container per member of a run, a gang's members
//! on a network private to the run. [`DockerRuntime`] below it does single containers.
//!
//! Every container is created hardened whatever the spec says: no new privileges, every capability
//! dropped, never privileged, an init process as PID 1, swap off (memory and memory+swap equal), a pids
//! limit, a numeric non-root user, and no mount that reaches the engine's socket or state. A spec's
//! output cap becomes rotating `json-file` logs, so no container can fill the engine's disk with output.

mod cgroup;
mod config;
pub mod container;
mod disk;
mod engine;
mod error;
mod events;
mod exec;
mod firewall;
mod info;
pub mod network;

use bollard::Docker;
use bollard::container::{
    InspectContainerOptions, ListContainersOptions, LogsOptions, RemoveContainerOptions, StartContainerOptions,
    StopContainerOptions,
};
pub use cgroup::container_id_from_cgroup;
pub use container::{ContainerInfo, ContainerSpec, ContainerStatus, DeviceMap, GpuAttach};
pub use disk::Storage;
pub use engine::{DockerEngine, GpuMode};
use futures::{StreamExt, TryStreamExt};
use gpuhub_driver::{EngineError, EventStream, ExecHandle, ExecSpec, LABEL_WORKLOAD, LogStream};
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
    /// Where user networks' subnets come from (`None`: the engine's default address pools).
    network_pool: Option<network::NetworkPool>,
}

impl DockerRuntime {
    /// Connects to the engine `DOCKER_HOST` names (`unix://…`, `tcp://…`), or to the local socket
    /// `/var/run/docker.sock`, and settles on the newest API version both sides speak.
    pub async fn connect() -> Result<Self, EngineError> {
        let docker = Docker::connect_with_defaults()
            .map_err(|e| EngineError::Engine(format!("cannot connect to the docker engine: {e}")))?;
        let docker = docker
            .negotiate_version()
            .await
            .map_err(|e| EngineError::Engine(format!("cannot reach the docker engine: {e}")))?;
        let mut protected = Vec::new();
        if let Some(path) = std::env::var("DOCKER_HOST").ok().as_deref().and_then(|h| h.strip_prefix("unix://")) {
            protected.push(PathBuf::from(path));
        }
        Ok(Self::connected(docker, protected))
    }

    /// Connects to the engine listening on the unix socket `socket` (another engine than the default
    /// one: tests run a private `dockerd`), which is then protected like the default socket.
    pub async fn connect_unix(socket: &std::path::Path) -> Result<Self, EngineError> {
        let path = socket.to_str().ok_or_else(|| EngineError::Engine(format!("{} is not UTF-8", socket.display())))?;
        let docker = Docker::connect_with_unix(path, 120, bollard::API_DEFAULT_VERSION)
            .map_err(|e| EngineError::Engine(format!("cannot connect to the docker engine at {path}: {e}")))?;
        let docker = docker
            .negotiate_version()
            .await
            .map_err(|e| EngineError::Engine(format!("cannot reach the docker engine at {path}: {e}")))?;
        Ok(Self::connected(docker, vec![socket.to_path_buf()]))
    }

    /// A runtime on a connected client, protecting `protected` (the engine's sockets) from mounts.
    fn connected(docker: Docker, protected: Vec<PathBuf>) -> Self {
        Self {
            docker,
            protected: Arc::new(protected),
            network_lock: Arc::default(),
            isolate_host: true,
            network_pool: None,
        }
    }

    /// Whether containers on gpuhub's networks may reach the host's own services (by default they may
    /// not: `iptables` rules reject what they send to the host, replies to the host's own connections
    /// aside, and the link-local range). `false` makes no rules (hosts without iptables).
    pub fn with_host_isolation(mut self, on: bool) -> Self {
        self.isolate_host = on;
        self
    }

    /// Carves each user's network from `pool` rather than from the engine's default address pools.
    pub fn with_network_pool(mut self, pool: Option<network::NetworkPool>) -> Self {
        self.network_pool = pool;
        self
    }

    /// The API version in use after negotiation (`1.41` for Docker 20.10).
    pub fn api_version(&self) -> String {
        self.docker.client_version().to_string()
    }

    /// Whether the engine keeps containers running while it is stopped or restarted (`docker info`'s
    /// `LiveRestoreEnabled`). Without it a `dockerd` upgrade or crash kills every running container,
    /// which gpuhub then queues again (`on_engine_restart`).
    pub async fn live_restore(&self) -> Result<bool, EngineError> {
        let info = self.docker.info().await.map_err(|e| error::map(e, "the engine's info"))?;
        Ok(info.live_restore_enabled.unwrap_or(false))
    }
}

/// What `serve` says at start when the engine runs without live restore.
pub const NO_LIVE_RESTORE: &str = "the docker engine runs without live restore: restarting or upgrading dockerd \
     kills every running container (gpuhub queues their workloads again, see on_engine_restart); \
     scripts/setup-debian.sh turns it on in /etc/docker/daemon.json, then reload dockerd \
     (systemctl reload docker)";

/// Single containers. Every method speaks for gpuhub's containers only (those it labels).
impl DockerRuntime {
    /// Whether the engine has this image locally.
    pub async fn image_exists(&self, image: &str) -> Result<bool, EngineError> {
        match self.docker.inspect_image(image).await {
            Ok(_) => Ok(true),
            Err(e) if error::status(&e) == Some(404) => Ok(false),
            Err(e) => Err(error::map(e, image)),
        }
    }

    /// The tags of the image `image` (a reference or an image ID, as Docker resolves them); empty when
    /// the engine lacks it.
    pub async fn image_tags(&self, image: &str) -> Result<Vec<String>, EngineError> {
        match self.docker.inspect_image(image).await {
            Ok(i) => Ok(i.repo_tags.unwrap_or_default()),
            Err(e) if error::status(&e) == Some(404) => Ok(Vec::new()),
            Err(e) => Err(error::map(e, image)),
        }
    }

    /// Commits container `id` as the image `reference` (paused meanwhile, so the files are consistent);
    /// returns the image's size.
    pub async fn commit(&self, id: &str, reference: &str) -> Result<u64, EngineError> {
        let (repo, tag) = match reference.rsplit_once(':').filter(|(_, t)| !t.contains('/')) {
            Some((r, t)) => (r.to_owned(), t.to_owned()),
            None => (reference.to_owned(), "latest".to_owned()),
        };
        let options = bollard::image::CommitContainerOptions {
            container: id.to_owned(),
            repo,
            tag,
            pause: true,
            ..Default::default()
        };
        self.docker
            .commit_container(options, bollard::container::Config::<String>::default())
            .await
            .map_err(|e| error::map(e, id))?;
        let image = self.docker.inspect_image(reference).await.map_err(|e| error::map(e, reference))?;
        Ok(image.size.unwrap_or(0).max(0) as u64)
    }

    /// Removes the image `reference` (not forced: an image a container still uses stays).
    pub async fn remove_image(&self, reference: &str) -> Result<(), EngineError> {
        match self.docker.remove_image(reference, None, None).await {
            Ok(_) => Ok(()),
            Err(e) if error::status(&e) == Some(404) => Err(EngineError::NotFound(format!("image {reference}"))),
            Err(e) => Err(error::map(e, reference)),
        }
    }

    /// Pulls `image` from its registry, reporting progress per the engine's stream (layers by id).
    pub async fn pull(
        &self,
        image: &str,
        auth: Option<&gpuhub_driver::RegistryAuth>,
        progress: &(dyn Fn(gpuhub_driver::PullProgress) + Send + Sync),
    ) -> Result<(), EngineError> {
        let options = bollard::image::CreateImageOptions { from_image: image.to_owned(), ..Default::default() };
        let creds = auth.map(|a| bollard::auth::DockerCredentials {
            username: Some(a.username.clone()),
            password: Some(a.password.clone()),
            serveraddress: Some(a.server.clone()),
            ..Default::default()
        });
        let mut stream = self.docker.create_image(Some(options), None, creds);
        let mut layers: BTreeMap<String, (u64, u64, bool)> = BTreeMap::new();
        while let Some(item) = stream.next().await {
            let info = item.map_err(|e| pull_error(e, image))?;
            if let Some(e) = info.error {
                return Err(EngineError::Rejected(format!("pull of {image}: {e}")));
            }
            let status = info.status.unwrap_or_default();
            if let Some(id) = info.id.filter(|id| id.len() >= 12 && !id.contains(':')) {
                let l = layers.entry(id).or_default();
                if let Some(d) = &info.progress_detail {
                    l.0 = d.current.map_or(l.0, |c| c.max(0) as u64);
                    l.1 = d.total.map_or(l.1, |t| t.max(0) as u64);
                }
                // downloaded: all its bytes are here; in place once extracted (or there already)
                if matches!(status.as_str(), "Pull complete" | "Already exists" | "Download complete") {
                    l.0 = l.1.max(l.0);
                }
                if matches!(status.as_str(), "Pull complete" | "Already exists") {
                    l.2 = true;
                }
            }
            progress(gpuhub_driver::PullProgress {
                status,
                current_bytes: layers.values().map(|l| l.0).sum(),
                total_bytes: layers.values().map(|l| l.1).sum(),
                layers: layers.len() as u32,
                layers_done: layers.values().filter(|l| l.2).count() as u32,
            });
        }
        Ok(())
    }

    /// Creates (or finds) a bridge network of this name, isolated from others' networks, carrying
    /// `labels` (gpuhub's own: the owner, the installation id). An existing network is joined only
    /// when it is a gpuhub bridge whose labels include these.
    pub async fn ensure_network(&self, name: &str, labels: &BTreeMap<String, String>) -> Result<(), EngineError> {
        self.ensure_network_impl(name, labels).await
    }

    /// Creates a container; returns its id.
    pub async fn create(&self, spec: &ContainerSpec) -> Result<String, EngineError> {
        let (options, config) = config::create_request(spec, &self.protected)?;
        // A symlink must not smuggle the engine's socket in: check where each source really leads.
        for m in spec.mounts.iter().filter(|m| m.nfs.is_none()) {
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

    /// Starts a created container.
    pub async fn start(&self, id: &str) -> Result<(), EngineError> {
        self.docker.start_container(id, None::<StartContainerOptions<String>>).await.map_err(|e| error::map(e, id))
    }

    /// Stops with SIGTERM, then SIGKILL after `grace`. Stopping a stopped container is fine.
    pub async fn stop(&self, id: &str, grace: Duration) -> Result<(), EngineError> {
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

    /// Removes a container (forcibly). Removing a missing one is `NotFound`.
    pub async fn remove(&self, id: &str) -> Result<(), EngineError> {
        let options = RemoveContainerOptions { force: true, v: true, link: false };
        self.docker.remove_container(id, Some(options)).await.map_err(|e| error::map(e, id))
    }

    /// One container, now.
    pub async fn inspect(&self, id: &str) -> Result<ContainerInfo, EngineError> {
        let c =
            self.docker.inspect_container(id, None::<InspectContainerOptions>).await.map_err(|e| error::map(e, id))?;
        Ok(info::from_inspect(c))
    }

    /// The host PID of a running container's first process (its init); `None` when it is not running.
    pub async fn init_pid(&self, id: &str) -> Result<Option<u32>, EngineError> {
        let c =
            self.docker.inspect_container(id, None::<InspectContainerOptions>).await.map_err(|e| error::map(e, id))?;
        let state = c.state.unwrap_or_default();
        Ok(state.pid.filter(|_| state.running == Some(true)).and_then(|p| u32::try_from(p).ok()).filter(|p| *p > 0))
    }

    /// Every container carrying the workload label, running or not.
    pub async fn list_managed(&self) -> Result<Vec<ContainerInfo>, EngineError> {
        self.list_labelled(LABEL_WORKLOAD).await
    }

    /// Every container matching a label filter (`key` or `key=value`), running or not.
    pub async fn list_labelled(&self, label: &str) -> Result<Vec<ContainerInfo>, EngineError> {
        let options = ListContainersOptions {
            all: true,
            filters: HashMap::from([("label".to_owned(), vec![label.to_owned()])]),
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
                    Err(EngineError::NotFound(_)) => {}
                    Err(e) => return Err(e),
                },
            }
        }
        Ok(out)
    }

    /// stdout and stderr interleaved, as the engine delivers it (chunk by chunk, never collected); with
    /// `follow`, the stream ends when the container stops; with `tail`, only the last `tail` lines.
    pub async fn logs(&self, id: &str, follow: bool, tail: Option<u64>) -> Result<LogStream, EngineError> {
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

    /// Member events of containers with the workload label, from now on.
    pub async fn events(&self) -> Result<EventStream, EngineError> {
        Ok(events::subscribe(&self.docker))
    }

    /// Starts a process in a running container, attached to its stdin and output.
    pub async fn exec(&self, container: &str, spec: &ExecSpec) -> Result<ExecHandle, EngineError> {
        self.exec_impl(container, spec).await
    }
}

/// A failed pull in the registry's words: an unknown image or tag is `ImageNotFound`, a refusal
/// (unauthorized, a registry that cannot be reached) `Rejected`.
fn pull_error(e: bollard::errors::Error, image: &str) -> EngineError {
    match e {
        bollard::errors::Error::DockerResponseServerError { status_code: 404, message } => {
            EngineError::Rejected(format!("pull of {image}: {message}"))
        }
        bollard::errors::Error::DockerResponseServerError { message, .. } => {
            EngineError::Rejected(format!("pull of {image}: {message}"))
        }
        bollard::errors::Error::DockerStreamError { error } => {
            EngineError::Rejected(format!("pull of {image}: {error}"))
        }
        other => error::map(other, image),
    }
}
