//! The Kubernetes API calls the engine makes, as RBAC rules: what its ServiceAccount's Role (and, for
//! nodes, ClusterRole) must grant, and all they need grant (`deploy/kubernetes/rbac.yaml` and the Helm
//! chart are checked against this list by the crate's `rbac` test).

/// One rule: an API group's resource and the verbs the engine uses on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// The API group (`""`: core).
    pub group: &'static str,
    /// The resource, with its subresource (`pods/log`).
    pub resource: &'static str,
    /// The verbs.
    pub verbs: &'static [&'static str],
    /// Whether the resource is cluster-wide (a ClusterRole grants it), not of the namespace.
    pub cluster: bool,
    /// Only needed with `volcano = true`.
    pub volcano_only: bool,
}

const fn ns(group: &'static str, resource: &'static str, verbs: &'static [&'static str]) -> Rule {
    Rule { group, resource, verbs, cluster: false, volcano_only: false }
}

/// Every call of the engine, by resource: submit creates pods, jobs and services (and podgroups), and a
/// service's Deployment, which its update patches (a rollout), its stop scales to nothing and remove
/// deletes, and observe lists (where its rollout stands);
/// observe, list_runs and the event watch list and watch pods and list jobs; cancel patches pods
/// (their deadline), deletes unscheduled ones, suspends jobs and watches the pods end; remove deletes
/// collections of jobs and pods and the service (and podgroup); logs get `pods/log`; exec creates
/// `pods/exec` (the websocket upgrade is authorised as `create` since Kubernetes 1.30), and an app's
/// port from outside the cluster (`app_access`) `pods/portforward` the same way; usage lists the
/// metrics API's pods (`metrics.k8s.io`); with `home_storage_class` submit creates the owner's home
/// claim; inventory lists nodes; a gang admitted by gpuhub (no Volcano) lists nodes and the live pods
/// of the whole cluster (what each node has free) and patches its gated pods (pin, ungate).
pub const REQUIRED_RBAC: &[Rule] = &[
    ns("", "pods", &["create", "delete", "deletecollection", "list", "patch", "watch"]),
    ns("", "pods/log", &["get"]),
    ns("", "pods/exec", &["create"]),
    ns("", "pods/portforward", &["create"]),
    ns("", "services", &["create", "delete"]),
    ns("", "persistentvolumeclaims", &["create"]),
    ns("batch", "jobs", &["create", "deletecollection", "list", "patch"]),
    ns("apps", "deployments", &["create", "delete", "list", "patch"]),
    ns("metrics.k8s.io", "pods", &["list"]),
    Rule {
        group: "scheduling.volcano.sh",
        resource: "podgroups",
        verbs: &["create", "delete"],
        cluster: false,
        volcano_only: true,
    },
    Rule { group: "", resource: "nodes", verbs: &["list"], cluster: true, volcano_only: false },
    Rule { group: "", resource: "pods", verbs: &["list"], cluster: true, volcano_only: false },
];
