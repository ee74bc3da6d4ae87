//! A [`RunSpec`] as Kubernetes objects: one pod per member (bare for workspaces, the template of a
//! `Job` for jobs, of a `Deployment` for a service: [`crate::deploy`]), a headless `Service` giving a
//! gang's members their names, and a Volcano `PodGroup` for a gang where Volcano schedules. Pure:
//! nothing here talks to the cluster.

use crate::config::{KubeConfig, Sharing};
use gpuhub_driver::{
    DEFAULT_MASTER_PORT, EngineError, GpuGrant, LABEL_INSTANCE, LABEL_MEMBER, LABEL_MEMBERS, LABEL_RUN, LABEL_WORKLOAD,
    MemberSpec, RunSpec, rank_env,
};
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EnvVar, HostPathVolumeSource, NFSVolumeSource, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource, Pod, PodSecurityContext, PodSpec, PodTemplateSpec,
    ResourceRequirements, SeccompProfile, SecurityContext, Service, ServicePort, ServiceSpec, Volume, VolumeMount,
    VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::BTreeMap;

/// The annotation holding every gpuhub label of a run as JSON (label values in Kubernetes are limited
/// to 63 characters of a small alphabet; gpuhub's are not).
pub const ANNOTATION_LABELS: &str = "gpuhub.io/labels";
/// The annotation [`crate::KubeEngine`]'s cancel puts on a member's pod before it ends it, so that its
/// end is not taken for the cluster's own.
pub const ANNOTATION_CANCELLED: &str = "gpuhub.io/cancelled";
/// The container of every member's pod.
pub const CONTAINER: &str = "member";
/// The scheduling gate of a gang's pods until gpuhub admits the whole gang (no Volcano:
/// [`crate::gang`]).
pub const GANG_GATE: &str = "gpuhub.io/gang";
/// The Volcano annotation naming a pod's `PodGroup`.
pub const VOLCANO_GROUP: &str = "scheduling.k8s.io/group-name";

/// A run's objects, ready to create.
#[derive(Debug, Clone, PartialEq)]
pub struct RunObjects {
    /// The run's id: its object names' stem and the `gpuhub.run` label.
    pub run: String,
    /// One pod per member, in member order (for a job, each is a `Job`'s template; for a service, its
    /// `Deployment`'s).
    pub pods: Vec<Pod>,
    /// A service's `Deployment` of one replica, made in place of its pod.
    pub deployment: Option<k8s_openapi::api::apps::v1::Deployment>,
    /// One `Job` per member for a job (empty otherwise), each holding its member's pod as template.
    pub jobs: Vec<Job>,
    /// The headless service naming the members of a gang (`None` for one member).
    pub service: Option<Service>,
    /// The Volcano `PodGroup` of a gang, where Volcano schedules.
    pub pod_group: Option<serde_json::Value>,
    /// The owner's home as a claim of `home_storage_class`, made on first use and kept.
    pub home_claim: Option<PersistentVolumeClaim>,
}

/// Whether a pod still waits behind gpuhub's gang gate ([`GANG_GATE`]).
pub fn gated(pod: &Pod) -> bool {
    let gates = pod.spec.as_ref().and_then(|s| s.scheduling_gates.as_ref());
    gates.into_iter().flatten().any(|g| g.name == GANG_GATE)
}

/// The claim of `user`'s home: `home-<user>` as a DNS label.
pub fn home_claim_name(user: &str) -> String {
    dns_label(&format!("home-{user}"), 63)
}

/// The claim of `user`'s home in `class`, ReadWriteMany, of `size`.
fn home_claim(user: &str, class: &str, size: &str) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(home_claim_name(user)),
            labels: Some(BTreeMap::from([("gpuhub.home".to_owned(), dns_label(user, 63))])),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteMany".into()]),
            storage_class_name: Some(class.to_owned()),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([("storage".to_owned(), Quantity(size.to_owned()))])),
                limits: None,
            }),
            ..Default::default()
        }),
        status: None,
    }
}

/// `s` made a DNS label of at most `max` characters: lowercase, `-` for anything else, no `-` at
/// either end.
pub fn dns_label(s: &str, max: usize) -> String {
    let mut out: String =
        s.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
    out.truncate(max);
    let out = out.trim_matches('-').to_owned();
    if out.is_empty() { "x".into() } else { out }
}

/// A label value: at most 63 characters of `[A-Za-z0-9-_.]`, alphanumeric at both ends.
pub fn label_value(s: &str) -> String {
    let mut out: String =
        s.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '-' }).collect();
    out.truncate(63);
    out.trim_matches(|c: char| !c.is_ascii_alphanumeric()).to_owned()
}

/// The run id of a spec's name (a DNS label short enough for `<run>-<member>` and a `Job`'s pods): a
/// long name keeps its start and its end (where gpuhub puts what makes it unique).
pub fn run_id(name: &str) -> String {
    let full = dns_label(name, usize::MAX);
    if full.len() <= 50 {
        return full;
    }
    let head = full[..34].trim_end_matches('-');
    let tail = full[full.len() - 15..].trim_start_matches('-');
    format!("{head}-{tail}")
}

/// The name of member `i`'s pod (or `Job`).
pub fn member_name(run: &str, i: u32) -> String {
    format!("{run}-{i}")
}

/// The labels selecting a run's objects: the installation, workload, run and (for a pod) member.
pub(crate) fn selector_labels(spec: &RunSpec, run: &str, member: Option<u32>) -> BTreeMap<String, String> {
    let mut l = BTreeMap::new();
    for key in [LABEL_INSTANCE, LABEL_WORKLOAD] {
        if let Some(v) = spec.labels.get(key) {
            l.insert(key.to_owned(), label_value(v));
        }
    }
    l.insert(LABEL_RUN.to_owned(), run.to_owned());
    l.insert(LABEL_MEMBERS.to_owned(), spec.members.len().to_string());
    if let Some(i) = member {
        l.insert(LABEL_MEMBER.to_owned(), i.to_string());
    }
    l
}

/// Whether a spec is a job (its pods are owned by `Job`s) rather than a workspace or service.
pub fn is_job(spec: &RunSpec) -> bool {
    spec.labels.get("gpuhub.kind").is_some_and(|k| k == "job")
}

/// Every object of `spec` under `config`; an error for what the cluster cannot be asked (root, a
/// share without a sharing layer).
pub fn objects(spec: &RunSpec, config: &KubeConfig) -> Result<RunObjects, EngineError> {
    objects_named(spec, &run_id(&spec.name), config)
}

/// [`objects`] under the run id `run` (a service's rollout keeps its run's name).
pub fn objects_named(spec: &RunSpec, run: &str, config: &KubeConfig) -> Result<RunObjects, EngineError> {
    if spec.identity.uid == 0 || spec.identity.gid == 0 {
        return Err(EngineError::Rejected("members never run as root (uid or gid 0)".into()));
    }
    if spec.members.is_empty() {
        return Err(EngineError::Rejected("a run needs at least one member".into()));
    }
    let run = run.to_owned();
    let size = spec.members.len() as u32;
    let gang = size > 1;
    let host = |m: &MemberSpec| dns_label(&m.hostname, 63);
    let master_port = spec.env.get("MASTER_PORT").and_then(|p| p.parse().ok()).unwrap_or(DEFAULT_MASTER_PORT);
    let master = if gang { format!("{}.{run}", host(&spec.members[0])) } else { host(&spec.members[0]) };
    let annotations = BTreeMap::from([(
        ANNOTATION_LABELS.to_owned(),
        serde_json::to_string(&spec.labels).map_err(|e| EngineError::Engine(e.to_string()))?,
    )]);
    let mounts_home = spec
        .mounts
        .iter()
        .chain(spec.members.iter().flat_map(|m| &m.mounts))
        .any(|m| m.nfs.is_none() && m.target == spec.identity.home);
    let home_claim = config
        .home_storage_class
        .as_deref()
        .filter(|_| mounts_home)
        .map(|class| home_claim(&spec.identity.username, class, &config.home_size));
    let mut pods = Vec::new();
    for m in &spec.members {
        let mut env = spec.env.clone();
        env.extend(m.env.clone());
        env.extend(rank_env(m.index, size, &master, master_port));
        env.entry("HOME".into()).or_insert_with(|| spec.identity.home.clone());
        env.entry("USER".into()).or_insert_with(|| spec.identity.username.clone());
        let mut pod_annotations = annotations.clone();
        if config.volcano && gang {
            pod_annotations.insert(VOLCANO_GROUP.to_owned(), run.clone());
        }
        let home = home_claim.as_ref().map(|c| (spec.identity.home.as_str(), c.metadata.name.as_deref().unwrap_or("")));
        let (volumes, mounts) = volumes(spec.mounts.iter().chain(&m.mounts), &config.claims, home);
        let container = Container {
            name: CONTAINER.into(),
            image: Some(spec.image.clone()),
            command: (!spec.command.is_empty()).then(|| spec.command.clone()),
            env: Some(
                env.into_iter().map(|(name, value)| EnvVar { name, value: Some(value), value_from: None }).collect(),
            ),
            working_dir: spec.working_dir.clone(),
            resources: Some(resources(m, config)?),
            ports: (!spec.ports.is_empty()).then(|| {
                spec.ports
                    .iter()
                    .map(|p| ContainerPort { container_port: i32::from(*p), ..Default::default() })
                    .collect()
            }),
            security_context: Some(SecurityContext {
                allow_privilege_escalation: Some(false),
                privileged: Some(false),
                run_as_non_root: Some(true),
                capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), add: None }),
                ..Default::default()
            }),
            volume_mounts: (!mounts.is_empty()).then_some(mounts),
            ..Default::default()
        };
        let pod_spec = PodSpec {
            containers: vec![container],
            restart_policy: Some("Never".into()),
            hostname: Some(host(m)),
            subdomain: gang.then(|| run.clone()),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            termination_grace_period_seconds: Some(config.grace_seconds as i64),
            runtime_class_name: config.runtime_class.clone(),
            node_selector: (!config.node_selector.is_empty()).then(|| config.node_selector.clone()),
            scheduler_name: (config.volcano && gang).then(|| "volcano".to_owned()),
            // no gang scheduler: gpuhub admits the gang whole (crate::gang)
            scheduling_gates: (gang && !config.volcano)
                .then(|| vec![k8s_openapi::api::core::v1::PodSchedulingGate { name: GANG_GATE.to_owned() }]),
            security_context: Some(PodSecurityContext {
                run_as_user: Some(i64::from(spec.identity.uid)),
                run_as_group: Some(i64::from(spec.identity.gid)),
                run_as_non_root: Some(true),
                supplemental_groups: (!spec.identity.groups.is_empty())
                    .then(|| spec.identity.groups.iter().map(|g| i64::from(*g)).collect()),
                seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), localhost_profile: None }),
                // a claimed home is the owner's group's, so that the new volume is theirs to write
                fs_group: home_claim.is_some().then(|| i64::from(spec.identity.gid)),
                fs_group_change_policy: home_claim.is_some().then(|| "OnRootMismatch".to_owned()),
                ..Default::default()
            }),
            volumes: (!volumes.is_empty()).then_some(volumes),
            ..Default::default()
        };
        pods.push(Pod {
            metadata: ObjectMeta {
                name: Some(member_name(&run, m.index)),
                labels: Some(selector_labels(spec, &run, Some(m.index))),
                annotations: Some(pod_annotations),
                ..Default::default()
            },
            spec: Some(pod_spec),
            status: None,
        });
    }
    let jobs = if is_job(spec) {
        pods.iter()
            .zip(&spec.members)
            .map(|(pod, m)| Job {
                metadata: ObjectMeta {
                    name: Some(member_name(&run, m.index)),
                    labels: Some(selector_labels(spec, &run, Some(m.index))),
                    annotations: Some(annotations.clone()),
                    ..Default::default()
                },
                spec: Some(JobSpec {
                    backoff_limit: Some(0),
                    completions: Some(1),
                    parallelism: Some(1),
                    template: PodTemplateSpec { metadata: Some(pod.metadata.clone()), spec: pod.spec.clone() },
                    ..Default::default()
                }),
                status: None,
            })
            .collect()
    } else {
        Vec::new()
    };
    let service = gang.then(|| Service {
        metadata: ObjectMeta {
            name: Some(run.clone()),
            labels: Some(selector_labels(spec, &run, None)),
            annotations: Some(annotations.clone()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some(BTreeMap::from([(LABEL_RUN.to_owned(), run.clone())])),
            publish_not_ready_addresses: Some(true),
            ports: Some(vec![ServicePort {
                name: Some("rendezvous".into()),
                port: i32::from(master_port),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    });
    let pod_group = (config.volcano && gang).then(|| {
        serde_json::json!({
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": { "name": run, "labels": selector_labels(spec, &run, None) },
            "spec": { "minMember": size },
        })
    });
    let deployment = (crate::deploy::is_service(spec) && pods.len() == 1).then(|| {
        let labels = selector_labels(spec, &run, None);
        crate::deploy::deployment(spec, &run, &mut pods[0], labels, annotations.clone())
    });
    Ok(RunObjects { run, pods, deployment, jobs, service, pod_group, home_claim })
}

/// Requests and limits (equal: the member gets exactly its grant) of member `m`.
fn resources(m: &MemberSpec, config: &KubeConfig) -> Result<ResourceRequirements, EngineError> {
    let mut r = BTreeMap::from([
        ("cpu".to_owned(), Quantity(format!("{}m", m.cpu_milli))),
        ("memory".to_owned(), Quantity(m.memory_bytes.to_string())),
    ]);
    match &m.gpus {
        GpuGrant::None => {}
        GpuGrant::Whole { count, .. } => {
            r.insert(config.gpu_resource.clone(), Quantity(count.to_string()));
        }
        GpuGrant::Share { milli, memory, .. } => match config.sharing {
            Sharing::None => {
                return Err(EngineError::Rejected(
                    "a share of a GPU needs a sharing layer in the cluster (kubernetes.sharing = \"hami\" or \"mps\")"
                        .into(),
                ));
            }
            Sharing::Hami => {
                r.insert(config.gpu_resource.clone(), Quantity("1".into()));
                r.insert("nvidia.com/gpucores".into(), Quantity((milli.div_ceil(10)).clamp(1, 100).to_string()));
                if let Some(bytes) = memory {
                    r.insert("nvidia.com/gpumem".into(), Quantity((bytes / (1 << 20)).max(1).to_string()));
                }
            }
            Sharing::Mps => {
                r.insert(config.share_resource.clone(), Quantity("1".into()));
            }
        },
    }
    Ok(ResourceRequirements { limits: Some(r.clone()), requests: Some(r), claims: None })
}

/// The claim of `claims` (hub path → claim) that holds `source`, the longest path first, and the rest
/// of `source` below it (empty for the path itself).
fn claim_of<'c>(claims: &'c BTreeMap<String, String>, source: &str) -> Option<(&'c str, String)> {
    claims
        .iter()
        .filter_map(|(path, claim)| {
            let rest = source.strip_prefix(path.as_str())?;
            (rest.is_empty() || rest.starts_with('/'))
                .then(|| (path.len(), claim.as_str(), rest.trim_start_matches('/')))
        })
        .max_by_key(|(len, ..)| *len)
        .map(|(_, claim, rest)| (claim, rest.to_owned()))
}

/// The volumes and mounts of gpuhub's mounts: the home's claim for the mount at `home`'s path, a claim's
/// `subPath` where `claims` holds the source, else a node path (`hostPath`) or an NFS export.
fn volumes<'a>(
    mounts: impl Iterator<Item = &'a gpuhub_driver::Mount>,
    claims: &BTreeMap<String, String>,
    home: Option<(&str, &str)>,
) -> (Vec<Volume>, Vec<VolumeMount>) {
    let (mut vols, mut mounts_out) = (Vec::new(), Vec::new());
    for (i, m) in mounts.enumerate() {
        let name = format!("m{i}");
        let mut v = Volume { name: name.clone(), ..Default::default() };
        let mut sub_path = None;
        let home_claim = home.filter(|(target, _)| m.nfs.is_none() && m.target == *target).map(|(_, c)| c);
        match (&m.nfs, home_claim) {
            (_, Some(claim)) => {
                v.persistent_volume_claim = Some(PersistentVolumeClaimVolumeSource {
                    claim_name: claim.to_owned(),
                    read_only: Some(m.read_only),
                });
            }
            (Some(server), None) => {
                v.nfs = Some(NFSVolumeSource {
                    server: server.clone(),
                    path: m.source.clone(),
                    read_only: Some(m.read_only),
                })
            }
            (None, None) => match claim_of(claims, &m.source) {
                Some((claim, rest)) => {
                    v.persistent_volume_claim = Some(PersistentVolumeClaimVolumeSource {
                        claim_name: claim.to_owned(),
                        read_only: Some(m.read_only),
                    });
                    sub_path = (!rest.is_empty()).then_some(rest);
                }
                None => {
                    v.host_path = Some(HostPathVolumeSource { path: m.source.clone(), type_: Some("Directory".into()) })
                }
            },
        }
        vols.push(v);
        mounts_out.push(VolumeMount {
            name,
            mount_path: m.target.clone(),
            read_only: Some(m.read_only),
            sub_path,
            ..Default::default()
        });
    }
    (vols, mounts_out)
}

#[cfg(test)]
#[path = "spec_tests.rs"]
pub(crate) mod tests;
