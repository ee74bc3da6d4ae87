//! A service's run as a `Deployment` of one replica named after the run: its pod template is member
//! 0's pod (as for a workspace, with `restartPolicy: Always`, so the kubelet restarts the container
//! when it ends and counts it in the pod's `restartCount`), its readiness probe the service's ready
//! check (read from the run's labels [`LABEL_PORT`] and [`LABEL_READY`]), and its strategy a rolling
//! update that starts the new pod beside the old one and stops the old one once the new one is ready
//! (`maxSurge: 1`, `maxUnavailable: 0`). An update of the service is a rollout of the Deployment's
//! template ([`crate::KubeEngine`]'s `roll`). Pure: nothing here talks to the cluster.

use gpuhub_core::service::{LABEL_PORT, LABEL_READY, ReadyCheck};
use gpuhub_driver::{LABEL_RUN, RunSpec};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment};
use k8s_openapi::api::core::v1::{ExecAction, HTTPGetAction, Pod, PodTemplateSpec, Probe};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;

/// How long a rollout may take before Kubernetes reports it stalled (`ProgressDeadlineExceeded`), as
/// the hub's own rolling update's deadline.
pub const PROGRESS_DEADLINE_SECONDS: i32 = 300;

/// Whether a spec is a service's run.
pub fn is_service(spec: &RunSpec) -> bool {
    spec.labels.get("gpuhub.kind").is_some_and(|k| k == "service")
}

/// The readiness probe of a service's run: an HTTP GET of its ready path on its port, or its ready
/// command; `None` where the labels name no port.
pub fn readiness(spec: &RunSpec) -> Option<Probe> {
    let port: u16 = spec.labels.get(LABEL_PORT)?.parse().ok()?;
    let check = spec
        .labels
        .get(LABEL_READY)
        .and_then(|j| serde_json::from_str::<ReadyCheck>(j).ok())
        .unwrap_or_else(|| ReadyCheck::Http("/".into()));
    let mut probe = Probe {
        period_seconds: Some(2),
        timeout_seconds: Some(3),
        failure_threshold: Some(3),
        success_threshold: Some(1),
        ..Default::default()
    };
    match check {
        ReadyCheck::Http(path) => {
            probe.http_get =
                Some(HTTPGetAction { path: Some(path), port: IntOrString::Int(i32::from(port)), ..Default::default() })
        }
        ReadyCheck::Command(command) => probe.exec = Some(ExecAction { command: Some(command) }),
    }
    Some(probe)
}

/// The Deployment of service run `run` whose member pod is `pod` (made restartable and given the
/// readiness probe here).
pub fn deployment(
    spec: &RunSpec,
    run: &str,
    pod: &mut Pod,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
) -> Deployment {
    if let Some(ps) = pod.spec.as_mut() {
        ps.restart_policy = Some("Always".into());
        if let Some(c) = ps.containers.first_mut() {
            c.readiness_probe = readiness(spec);
        }
    }
    let template_meta = ObjectMeta { name: None, ..pod.metadata.clone() };
    Deployment {
        metadata: ObjectMeta {
            name: Some(run.to_owned()),
            labels: Some(labels),
            annotations: Some(annotations),
            ..Default::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(1),
            selector: LabelSelector {
                match_labels: Some(BTreeMap::from([(LABEL_RUN.to_owned(), run.to_owned())])),
                match_expressions: None,
            },
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_surge: Some(IntOrString::Int(1)),
                    max_unavailable: Some(IntOrString::Int(0)),
                }),
            }),
            progress_deadline_seconds: Some(PROGRESS_DEADLINE_SECONDS),
            revision_history_limit: Some(2),
            template: PodTemplateSpec { metadata: Some(template_meta), spec: pod.spec.clone() },
            ..Default::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::KubeConfig;
    use crate::spec::objects;

    fn service(ready: Option<&str>) -> RunSpec {
        let mut s =
            crate::spec::tests::run_spec("service", vec![crate::spec::tests::member(0, gpuhub_driver::GpuGrant::None)]);
        s.labels.insert(LABEL_PORT.into(), "8080".into());
        if let Some(r) = ready {
            s.labels.insert(LABEL_READY.into(), r.into());
        }
        s
    }

    #[test]
    fn a_services_readiness_check_is_its_pods_probe() {
        let objs =
            objects(&service(Some(r#"{"command":["test","-f","/tmp/ready"]}"#)), &KubeConfig::default()).unwrap();
        let d = objs.deployment.expect("a service is a deployment");
        let pod = d.spec.unwrap().template.spec.unwrap();
        assert_eq!(pod.restart_policy.as_deref(), Some("Always"));
        let probe = pod.containers[0].readiness_probe.clone().unwrap();
        assert_eq!(probe.exec.unwrap().command.unwrap(), ["test", "-f", "/tmp/ready"]);
        assert!(probe.http_get.is_none());
        // no check named: an HTTP GET of / on its port
        let probe = readiness(&service(None)).unwrap().http_get.unwrap();
        assert_eq!((probe.path.as_deref(), probe.port), (Some("/"), IntOrString::Int(8080)));
        // a workspace is a bare pod, restarted by nobody
        let ws = crate::spec::tests::run_spec(
            "workspace",
            vec![crate::spec::tests::member(0, gpuhub_driver::GpuGrant::None)],
        );
        let objs = objects(&ws, &KubeConfig::default()).unwrap();
        assert!(objs.deployment.is_none() && readiness(&ws).is_none());
        assert_eq!(objs.pods[0].spec.as_ref().unwrap().restart_policy.as_deref(), Some("Never"));
    }
}
