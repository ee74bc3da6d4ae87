//! [`KubeEngine`]: the cluster's client, how it is reached, and the run operations (submit, observe,
//! cancel, remove) over pods, `Job`s, services and `PodGroup`s.

use crate::config::KubeConfig;
use crate::spec::{self, ANNOTATION_CANCELLED};
use crate::status;
use gpuhub_driver::{EngineError, LABEL_RUN, LABEL_WORKLOAD, MemberState, MemberStatus, RunSpec, RunStatus};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use std::sync::Arc;
use std::time::Duration;

/// How long connecting to the API server may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The most members one run may have.
pub const MAX_MEMBERS: u32 = 64;

/// gpuhub's engine on a Kubernetes cluster. Cheap to clone.
#[derive(Clone)]
pub struct KubeEngine {
    pub(crate) client: Client,
    pub(crate) config: Arc<KubeConfig>,
    /// The hub's local ends of the API server's port-forwards, by pod and port (`app_access`).
    pub(crate) forwards: crate::held::Forwards,
    /// Whether the metrics API answers, and the pods' CPU time summed from it.
    pub(crate) metrics: Arc<crate::held::Metrics>,
    /// The gangs it admits itself (no gang scheduler), and why those not admitted wait.
    pub(crate) gangs: Arc<crate::held::Gangs>,
    /// The time, for what the engine does again later (the metrics API's probe).
    pub(crate) clock: crate::held::Clock,
}

impl std::fmt::Debug for KubeEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeEngine").field("namespace", &self.config.namespace).finish_non_exhaustive()
    }
}

/// A kube-rs error as an engine error: unreachable, not found, refused, or the API server's failure.
pub(crate) fn api_err(what: &str, e: kube::Error) -> EngineError {
    match e {
        kube::Error::Api(s) if s.code == 404 => EngineError::NotFound(what.to_owned()),
        kube::Error::Api(s) if (400..500).contains(&s.code) => {
            EngineError::Rejected(format!("{what}: {} ({})", s.message, s.reason))
        }
        kube::Error::Api(s) => EngineError::Engine(format!("{what}: {} ({})", s.message, s.reason)),
        kube::Error::HyperError(_) | kube::Error::Service(_) => {
            EngineError::Unavailable(format!("the kubernetes api server does not answer ({what}): {e}"))
        }
        e => EngineError::Engine(format!("{what}: {e}")),
    }
}

impl KubeEngine {
    /// Reaches the cluster `config` names (its kubeconfig, or the in-cluster service account) and checks
    /// that it answers and lets gpuhub list pods in its namespace; the error names the kubeconfig and
    /// what was tried.
    pub async fn connect(config: KubeConfig) -> Result<Self, EngineError> {
        config.check().map_err(EngineError::Engine)?;
        let (mut kc, source) = match &config.kubeconfig {
            Some(path) => {
                if !path.exists() {
                    return Err(EngineError::Unavailable(format!(
                        "the kubeconfig {} (kubernetes.kubeconfig) does not exist; leave the key out to use the in-cluster service account",
                        path.display()
                    )));
                }
                let file = kube::config::Kubeconfig::read_from(path)
                    .map_err(|e| EngineError::Engine(format!("cannot read the kubeconfig {}: {e}", path.display())))?;
                let options = kube::config::KubeConfigOptions { context: config.context.clone(), ..Default::default() };
                let kc = kube::Config::from_custom_kubeconfig(file, &options)
                    .await
                    .map_err(|e| EngineError::Engine(format!("cannot use the kubeconfig {}: {e}", path.display())))?;
                (kc, format!("the kubeconfig {}", path.display()))
            }
            None => {
                let kc = kube::Config::incluster().map_err(|e| {
                    EngineError::Unavailable(format!(
                        "kubernetes.kubeconfig is not set and gpuhub does not run in a cluster (the in-cluster service account: {e})"
                    ))
                })?;
                (kc, "the in-cluster service account".to_owned())
            }
        };
        kc.default_namespace = config.namespace.clone();
        kc.connect_timeout = Some(CONNECT_TIMEOUT);
        let url = kc.cluster_url.to_string();
        let client = Client::try_from(kc)
            .map_err(|e| EngineError::Engine(format!("cannot make a kubernetes client from {source}: {e}")))?;
        let engine = Self::with_client(client, config);
        engine.check().await.map_err(|e| {
            EngineError::Unavailable(format!(
                "cannot reach the kubernetes api server {url} (from {source}): {}",
                crate::inner_message(&e)
            ))
        })?;
        engine.probe_metrics().await;
        Ok(engine)
    }

    /// The engine over any client (tests give one over a mocked service); checks nothing.
    pub fn with_client(client: Client, config: KubeConfig) -> Self {
        Self {
            client,
            config: Arc::new(config),
            forwards: Default::default(),
            metrics: Default::default(),
            gangs: Default::default(),
            clock: Arc::new(std::time::SystemTime::now),
        }
    }

    /// The engine reading the time from `clock` (tests move it on).
    pub fn with_clock(mut self, clock: impl Fn() -> std::time::SystemTime + Send + Sync + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// The engine over the API server at `url` with no credentials (an in-process fake API server in
    /// tests, `kubectl proxy`); checks nothing.
    pub fn with_url(url: &str, config: KubeConfig) -> Result<Self, EngineError> {
        let uri = url.parse().map_err(|e| EngineError::Engine(format!("{url:?} is not a url: {e}")))?;
        let mut kc = kube::Config::new(uri);
        kc.default_namespace = config.namespace.clone();
        let client =
            Client::try_from(kc).map_err(|e| EngineError::Engine(format!("cannot make a client for {url}: {e}")))?;
        Ok(Self::with_client(client, config))
    }

    /// Its settings.
    pub fn config(&self) -> &KubeConfig {
        &self.config
    }

    /// What [`KubeEngine::connect`] checks: the API server lists pods of the namespace to gpuhub.
    pub async fn check(&self) -> Result<(), EngineError> {
        self.pods().list(&ListParams::default().limit(1)).await.map_err(|e| api_err("listing pods", e))?;
        Ok(())
    }

    pub(crate) fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.config.namespace)
    }

    pub(crate) fn jobs(&self) -> Api<Job> {
        Api::namespaced(self.client.clone(), &self.config.namespace)
    }

    pub(crate) fn services(&self) -> Api<Service> {
        Api::namespaced(self.client.clone(), &self.config.namespace)
    }

    pub(crate) fn deployments(&self) -> Api<k8s_openapi::api::apps::v1::Deployment> {
        Api::namespaced(self.client.clone(), &self.config.namespace)
    }

    pub(crate) fn pod_groups(&self) -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk("scheduling.volcano.sh", "v1beta1", "PodGroup");
        let ar = ApiResource::from_gvk_with_plural(&gvk, "podgroups");
        Api::namespaced_with(self.client.clone(), &self.config.namespace, &ar)
    }

    /// Creates every object of `spec`, or none: what was made is deleted again when one fails.
    pub(crate) async fn create(&self, spec: &RunSpec) -> Result<RunStatus, EngineError> {
        if spec.members.len() as u32 > MAX_MEMBERS {
            return Err(EngineError::Rejected(format!("a run may have at most {MAX_MEMBERS} members")));
        }
        let objs = spec::objects(spec, &self.config)?;
        let run = objs.run.clone();
        let pp = PostParams::default();
        if let Some(claim) = &objs.home_claim {
            // the owner's home: made on first use, kept (never removed with a run)
            let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
                Api::namespaced(self.client.clone(), &self.config.namespace);
            match claims.create(&pp, claim).await {
                Ok(_) => tracing::info!(claim = ?claim.metadata.name, "kubernetes: made the home's claim"),
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(api_err("creating the owner's home claim", e)),
            }
        }
        let made = async {
            if let Some(svc) = &objs.service {
                self.services().create(&pp, svc).await.map_err(|e| api_err("creating the run's service", e))?;
            }
            if let Some(pg) = &objs.pod_group {
                let obj: DynamicObject =
                    serde_json::from_value(pg.clone()).map_err(|e| EngineError::Engine(e.to_string()))?;
                self.pod_groups()
                    .create(&pp, &obj)
                    .await
                    .map_err(|e| api_err("creating the run's volcano podgroup", e))?;
            }
            if let Some(d) = &objs.deployment {
                self.deployments().create(&pp, d).await.map_err(|e| api_err("creating the service's deployment", e))?;
            } else if objs.jobs.is_empty() {
                for p in &objs.pods {
                    self.pods().create(&pp, p).await.map_err(|e| api_err("creating a member's pod", e))?;
                }
            } else {
                for j in &objs.jobs {
                    self.jobs().create(&pp, j).await.map_err(|e| api_err("creating a member's job", e))?;
                }
            }
            Ok::<_, EngineError>(())
        }
        .await;
        if let Err(e) = made {
            if let Err(c) = self.delete_all(&run).await {
                tracing::warn!(run, error = %c, "cannot clean up after a failed submit");
            }
            return Err(match e {
                EngineError::Rejected(m) if m.contains("already exists") => {
                    EngineError::Rejected(format!("run {run} exists already: {m}"))
                }
                e => e,
            });
        }
        let size = objs.pods.len() as u32;
        let mut pending = None;
        if objs.pods.iter().any(spec::gated) {
            // admitted at once where it fits; else at a later look, when room frees
            match self.admit(&run).await {
                Ok(why) => {
                    pending = why.map(|message| gpuhub_driver::PendingInfo {
                        reason: "resources".into(),
                        message,
                        position: None,
                        estimated_start: None,
                    })
                }
                Err(e) => tracing::warn!(run, error = %e, "kubernetes: cannot admit the gang yet"),
            }
        }
        let members = objs
            .pods
            .iter()
            .enumerate()
            .map(|(i, p)| MemberStatus {
                index: i as u32,
                engine_id: p.metadata.name.clone().unwrap_or_default(),
                node: None,
                state: MemberState::Pending,
                gpus: Vec::new(),
            })
            .collect();
        Ok(RunStatus { id: run, labels: spec.labels.clone(), size, members, pending })
    }

    /// The runs whose objects match `selector`: their pods, with members whose `Job` has made no pod
    /// (yet, or any more) taken from the `Job`.
    pub(crate) async fn runs(&self, selector: &str) -> Result<Vec<RunStatus>, EngineError> {
        let lp = ListParams::default().labels(selector);
        let mut pods = self.pods().list(&lp).await.map_err(|e| api_err("listing pods", e))?.items;
        // a gang gpuhub admits itself: tried at each look, its pods read again once admitted
        let gangs: std::collections::BTreeSet<String> =
            pods.iter().filter(|p| spec::gated(p)).filter_map(|p| Some(status::member_of(p)?.0)).collect();
        let mut admitted = false;
        for run in &gangs {
            admitted |= matches!(self.admit(run).await, Ok(None));
        }
        if admitted {
            pods = self.pods().list(&lp).await.map_err(|e| api_err("listing pods", e))?.items;
        }
        let jobs = self.jobs().list(&lp).await.map_err(|e| api_err("listing jobs", e))?.items;
        let mut runs = status::runs(&pods, &self.config.gpu_resource);
        if pods.iter().any(status::restarts_itself) {
            // a service's: where its Deployment's rollout stands
            let deployments = self.deployments().list(&lp).await.map_err(|e| api_err("listing deployments", e))?.items;
            for d in &deployments {
                let Some(r) = runs.iter_mut().find(|r| d.metadata.name.as_ref() == Some(&r.id)) else { continue };
                let of_run: Vec<&Pod> =
                    pods.iter().filter(|p| status::member_of(p).is_some_and(|(id, _)| id == r.id)).collect();
                let (state, why) = status::rollout_state(d, &of_run);
                r.labels.insert(gpuhub_core::service::LABEL_ROLLOUT.to_owned(), state.to_owned());
                if let Some(why) = why {
                    r.labels.insert(gpuhub_core::service::LABEL_ROLLOUT_WHY.to_owned(), why);
                }
            }
        }
        let waiting = self.gangs.waiting.lock().unwrap().clone();
        for r in &mut runs {
            let gated = pods.iter().any(|p| spec::gated(p) && status::member_of(p).is_some_and(|(id, _)| id == r.id));
            if let (true, Some(why)) = (gated, waiting.get(&r.id)) {
                r.pending = Some(gpuhub_driver::PendingInfo {
                    reason: "resources".into(),
                    message: why.clone(),
                    position: None,
                    estimated_start: None,
                });
            }
        }
        for j in &jobs {
            let Some(labels) = j.metadata.labels.as_ref() else { continue };
            let (Some(run), Some(index)) = (labels.get(LABEL_RUN), labels.get(gpuhub_driver::LABEL_MEMBER)) else {
                continue;
            };
            let Ok(index) = index.parse::<u32>() else { continue };
            let state = match j.status.as_ref() {
                Some(s) if s.succeeded.unwrap_or(0) > 0 => MemberState::Exited(0),
                Some(s) if s.failed.unwrap_or(0) > 0 => MemberState::Exited(status::KILLED),
                _ => MemberState::Pending,
            };
            let member = MemberStatus {
                index,
                engine_id: j.metadata.name.clone().unwrap_or_default(),
                node: None,
                state,
                gpus: Vec::new(),
            };
            match runs.iter_mut().find(|r| &r.id == run) {
                Some(r) if r.members.iter().any(|m| m.index == index) => {}
                Some(r) => {
                    r.members.push(member);
                    r.members.sort_by_key(|m| m.index);
                }
                None => runs.push(RunStatus {
                    id: run.clone(),
                    labels: j
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(spec::ANNOTATION_LABELS))
                        .and_then(|s| serde_json::from_str(s).ok())
                        .unwrap_or_default(),
                    size: labels.get(gpuhub_driver::LABEL_MEMBERS).and_then(|s| s.parse().ok()).unwrap_or(1),
                    members: vec![member],
                    pending: None,
                }),
            }
        }
        Ok(runs)
    }

    /// One run, now.
    pub(crate) async fn run(&self, run: &str) -> Result<RunStatus, EngineError> {
        let selector = format!("{LABEL_RUN}={}", spec::label_value(run));
        self.runs(&selector)
            .await?
            .into_iter()
            .find(|r| r.id == run)
            .ok_or_else(|| EngineError::NotFound(format!("run {run}")))
    }

    /// Every run of gpuhub's in the namespace.
    pub(crate) async fn all_runs(&self) -> Result<Vec<RunStatus>, EngineError> {
        self.runs(LABEL_WORKLOAD).await
    }

    /// Rolls service run `run` over to `spec`'s terms: its Deployment's pod template is replaced, and
    /// Kubernetes starts the new pod beside the old one and stops the old one once the new one is ready.
    pub(crate) async fn roll_out(&self, run: &str, spec: &RunSpec) -> Result<(), EngineError> {
        let objs = spec::objects_named(spec, run, &self.config)?;
        let Some(template) = objs.deployment.and_then(|d| d.spec).map(|s| s.template) else {
            return Err(EngineError::Rejected("only a service's run is rolled out".into()));
        };
        let patch = serde_json::json!({ "spec": { "template": template } });
        self.deployments()
            .patch(run, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| api_err("rolling out the service's deployment", e))?;
        Ok(())
    }

    /// Ends every live member of `run` (a service's Deployment is scaled to nothing first, so that no
    /// pod replaces the one stopped): a pod on a node gets `activeDeadlineSeconds: 1` (the kubelet
    /// stops it with its grace and keeps its status, so the exit codes stay readable) and
    /// [`ANNOTATION_CANCELLED`]; a pod no node took is deleted. Waits until each has ended or is gone.
    pub(crate) async fn end(&self, run: &str, grace: Duration) -> Result<(), EngineError> {
        let selector = format!("{LABEL_RUN}={}", spec::label_value(run));
        let pods =
            self.pods().list(&ListParams::default().labels(&selector)).await.map_err(|e| api_err("listing pods", e))?;
        if pods.items.iter().any(status::restarts_itself) {
            let none = serde_json::json!({ "spec": { "replicas": 0 } });
            match self.deployments().patch(run, &PatchParams::default(), &Patch::Merge(&none)).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(api_err("scaling the service's deployment to nothing", e)),
            }
        }
        let jobs =
            self.jobs().list(&ListParams::default().labels(&selector)).await.map_err(|e| api_err("listing jobs", e))?;
        if pods.items.is_empty() && jobs.items.is_empty() {
            return Err(EngineError::NotFound(format!("run {run}")));
        }
        let patch = serde_json::json!({
            "metadata": { "annotations": { ANNOTATION_CANCELLED: "true" } },
            "spec": { "activeDeadlineSeconds": 1 },
        });
        let mut waiting = Vec::new();
        for p in &pods.items {
            let Some(name) = p.metadata.name.clone() else { continue };
            if matches!(status::member_state(p), MemberState::Exited(_)) {
                continue;
            }
            let bound = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
            let result = if bound {
                self.pods().patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.map(drop)
            } else {
                self.pods().delete(&name, &DeleteParams::default().grace_period(0)).await.map(drop)
            };
            match result {
                Ok(()) => waiting.push(name),
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(api_err("stopping a member's pod", e)),
            }
        }
        // a job's member that has no pod yet must not get one
        for j in jobs.items.iter().filter(|j| {
            j.status
                .as_ref()
                .is_none_or(|s| s.active.unwrap_or(0) + s.succeeded.unwrap_or(0) + s.failed.unwrap_or(0) == 0)
        }) {
            if let Some(name) = &j.metadata.name {
                let suspend = serde_json::json!({ "spec": { "suspend": true } });
                let _ = self.jobs().patch(name, &PatchParams::default(), &Patch::Merge(&suspend)).await;
            }
        }
        let patience = grace.max(Duration::from_secs(self.config.grace_seconds)) + Duration::from_secs(30);
        for name in waiting {
            let ended = kube::runtime::wait::await_condition(self.pods(), &name, |p: Option<&Pod>| {
                p.is_none_or(|p| matches!(status::member_state(p), MemberState::Exited(_)))
            });
            match tokio::time::timeout(patience, ended).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    return Err(EngineError::Unavailable(format!("while waiting for pod {name} to stop: {e}")));
                }
                Err(_) => {
                    return Err(EngineError::Engine(format!(
                        "pod {name} did not stop within {}s; is its node reachable?",
                        patience.as_secs()
                    )));
                }
            }
        }
        Ok(())
    }

    /// Deletes every object of `run` (jobs with their pods, pods, its service and podgroup); whether any
    /// was there.
    pub(crate) async fn delete_all(&self, run: &str) -> Result<bool, EngineError> {
        let selector = format!("{LABEL_RUN}={}", spec::label_value(run));
        let lp = ListParams::default().labels(&selector);
        let background = DeleteParams::background();
        let mut found = false;
        let jobs = self.jobs().delete_collection(&background, &lp).await.map_err(|e| api_err("deleting jobs", e))?;
        found |= jobs.left().is_some_and(|l| !l.items.is_empty());
        let pods = self.pods().delete_collection(&background, &lp).await.map_err(|e| api_err("deleting pods", e))?;
        found |= pods.left().is_some_and(|l| !l.items.is_empty());
        match self.services().delete(run, &DeleteParams::default()).await {
            Ok(_) => found = true,
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(api_err("deleting the run's service", e)),
        }
        // a service's: its replica set and pods go with it (a pod it made meanwhile too)
        match self.deployments().delete(run, &background).await {
            Ok(_) => found = true,
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(api_err("deleting the service's deployment", e)),
        }
        if self.config.volcano {
            match self.pod_groups().delete(run, &DeleteParams::default()).await {
                Ok(_) => found = true,
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(api_err("deleting the run's podgroup", e)),
            }
        }
        Ok(found)
    }
}
