//! `[kubernetes]`: which cluster, which namespace, and how gpuhub's grants become pod resources.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// How a share of a GPU is asked of the cluster's sharing layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Sharing {
    /// No sharing layer: a share is refused at submit.
    #[default]
    None,
    /// HAMi: `nvidia.com/gpu: 1` with `nvidia.com/gpumem` (MiB) and `nvidia.com/gpucores` (percent).
    Hami,
    /// NVIDIA's device plugin with MPS sharing: one replica of [`KubeConfig::share_resource`].
    Mps,
}

/// How the hub reaches a member's app ports (JupyterLab, a service's port).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum AppAccess {
    /// The pod's IP when the hub runs in the cluster (no `kubeconfig`), the API server's
    /// port-forward otherwise.
    #[default]
    Auto,
    /// The pod's IP: the hub reaches the cluster's pod network.
    PodIp,
    /// The API server's port-forward (`pods/portforward`): a hub outside the cluster.
    PortForward,
}

/// The Kubernetes engine's settings (`engine = "kubernetes"` with a `[kubernetes]` section). Unknown
/// keys are refused.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubeConfig {
    /// The kubeconfig file to reach the cluster with; unset: the pod's own service account (gpuhub
    /// running in the cluster, `KUBERNETES_SERVICE_HOST`).
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig's context to use (default its current one).
    pub context: Option<String>,
    /// The namespace gpuhub's pods, jobs and services live in (default `gpuhub`).
    pub namespace: String,
    /// The RuntimeClass members' pods run with (`nvidia`), default none (the cluster's default).
    pub runtime_class: Option<String>,
    /// Node labels every member's pod must match (`nodeSelector`).
    pub node_selector: BTreeMap<String, String>,
    /// The extended resource a whole GPU is (default `nvidia.com/gpu`).
    pub gpu_resource: String,
    /// The sharing layer shares of a GPU go through (`none`, `hami`, `mps`; default `none`).
    pub sharing: Sharing,
    /// With `sharing = "mps"`, the resource one share is (default `nvidia.com/gpu.shared`).
    pub share_resource: String,
    /// Whether gangs are Volcano `PodGroup`s (`minMember` = members, pods scheduled by `volcano`);
    /// default false: gpuhub creates all members or none.
    pub volcano: bool,
    /// Seconds between SIGTERM and SIGKILL when a member is stopped (the pods'
    /// `terminationGracePeriodSeconds`, fixed at submit; default 30).
    pub grace_seconds: u64,
    /// Hub paths that are PersistentVolumeClaims in the cluster (`"/srv/gpuhub" = "gpuhub-storage"`):
    /// a mount whose source lies under a key (homes, team folders, datasets) is that claim, at the
    /// rest of the path as its `subPath`, so the storage needs no path on every node. The claim is
    /// the cluster's (ReadWriteMany, in `namespace`), mounted on the hub at the key's path.
    pub claims: BTreeMap<String, String>,
    /// How app ports are reached (`auto`, `pod-ip`, `port-forward`; default `auto`: the pod's IP in the
    /// cluster, the API server's port-forward with a `kubeconfig`).
    pub app_access: AppAccess,
    /// The StorageClass homes are claims of: each user's home is the PersistentVolumeClaim
    /// `home-<user>` of this class (ReadWriteMany, [`KubeConfig::home_size`]), made on the user's first
    /// run and kept; unset (the default): homes are mounted as the other paths.
    pub home_storage_class: Option<String>,
    /// The storage each home's claim asks for (default `10Gi`).
    pub home_size: String,
}

impl Default for KubeConfig {
    fn default() -> Self {
        Self {
            kubeconfig: None,
            context: None,
            namespace: "gpuhub".into(),
            runtime_class: None,
            node_selector: BTreeMap::new(),
            gpu_resource: "nvidia.com/gpu".into(),
            sharing: Sharing::None,
            share_resource: "nvidia.com/gpu.shared".into(),
            volcano: false,
            grace_seconds: 30,
            claims: BTreeMap::new(),
            app_access: AppAccess::Auto,
            home_storage_class: None,
            home_size: "10Gi".into(),
        }
    }
}

impl KubeConfig {
    /// What is wrong with the settings, in a sentence; `Ok` when nothing is.
    pub fn check(&self) -> Result<(), String> {
        if !is_dns_label(&self.namespace) {
            return Err(format!(
                "kubernetes.namespace {:?} is not a DNS label (lowercase letters, digits, '-')",
                self.namespace
            ));
        }
        if self.gpu_resource.is_empty() || !self.gpu_resource.contains('/') {
            return Err(format!(
                "kubernetes.gpu_resource {:?} is not an extended resource (domain/name)",
                self.gpu_resource
            ));
        }
        if self.sharing == Sharing::Mps && !self.share_resource.contains('/') {
            return Err(format!(
                "kubernetes.share_resource {:?} is not an extended resource (domain/name)",
                self.share_resource
            ));
        }
        for (path, claim) in &self.claims {
            if !path.starts_with('/') || path == "/" || path.ends_with('/') || path.split('/').any(|p| p == "..") {
                return Err(format!(
                    "kubernetes.claims: {path:?} is not an absolute path below / without a trailing '/'"
                ));
            }
            if !claim.split('.').all(is_dns_label) || claim.len() > 253 {
                return Err(format!("kubernetes.claims: {claim:?} (for {path}) is not a claim's name (a DNS name)"));
            }
        }
        if let Some(class) = &self.home_storage_class
            && (!class.split('.').all(is_dns_label) || class.len() > 253)
        {
            return Err(format!("kubernetes.home_storage_class {class:?} is not a storage class's name (a DNS name)"));
        }
        if !self.home_size.starts_with(|c: char| c.is_ascii_digit())
            || !self.home_size.chars().all(|c| c.is_ascii_alphanumeric() || c == '.')
        {
            return Err(format!("kubernetes.home_size {:?} is not a quantity of storage (10Gi)", self.home_size));
        }
        if let Some(p) = &self.kubeconfig
            && p.as_os_str().is_empty()
        {
            return Err("kubernetes.kubeconfig is empty: leave it out to use the in-cluster service account".into());
        }
        Ok(())
    }
}

impl KubeConfig {
    /// Whether app ports go through the API server's port-forward rather than to the pod's IP.
    pub fn port_forward(&self) -> bool {
        match self.app_access {
            AppAccess::Auto => self.kubeconfig.is_some(),
            AppAccess::PodIp => false,
            AppAccess::PortForward => true,
        }
    }
}

/// Whether `s` is an RFC 1123 label (what namespaces and pod names' parts must be).
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_unknown_keys() {
        let c: KubeConfig = toml::from_str("").unwrap();
        assert_eq!(c, KubeConfig::default());
        assert!(c.check().is_ok());
        let c: KubeConfig = toml::from_str(
            "kubeconfig = \"/etc/gpuhub/kubeconfig\"\nnamespace = \"ml\"\nsharing = \"hami\"\n[node_selector]\n\"gpu\" = \"yes\"",
        )
        .unwrap();
        assert_eq!(c.namespace, "ml");
        assert_eq!(c.sharing, Sharing::Hami);
        assert_eq!(c.node_selector["gpu"], "yes");
        let e = toml::from_str::<KubeConfig>("namespaces = \"x\"").unwrap_err();
        assert!(e.to_string().contains("namespaces"), "{e}");
        let bad = KubeConfig { namespace: "ML_jobs".into(), ..Default::default() };
        assert!(bad.check().unwrap_err().contains("DNS label"));
        let bad = KubeConfig { gpu_resource: "gpu".into(), ..Default::default() };
        assert!(bad.check().unwrap_err().contains("extended resource"));
        let c: KubeConfig = toml::from_str("[claims]\n\"/srv/gpuhub\" = \"gpuhub-storage\"").unwrap();
        assert_eq!(c.claims["/srv/gpuhub"], "gpuhub-storage");
        assert!(c.check().is_ok());
        for (path, claim) in [("srv", "c"), ("/", "c"), ("/srv/", "c"), ("/srv/../etc", "c"), ("/srv", "Homes_1")] {
            let bad = KubeConfig { claims: BTreeMap::from([(path.into(), claim.into())]), ..Default::default() };
            assert!(bad.check().unwrap_err().contains("kubernetes.claims"), "{path} {claim}");
        }
    }

    #[test]
    fn apps_go_through_port_forward_from_outside_the_cluster() {
        assert!(!KubeConfig::default().port_forward(), "in the cluster: the pod's ip");
        let outside = KubeConfig { kubeconfig: Some("/etc/gpuhub/kubeconfig".into()), ..Default::default() };
        assert!(outside.port_forward(), "with a kubeconfig: port-forward");
        let c: KubeConfig = toml::from_str("kubeconfig = \"/k\"\napp_access = \"pod-ip\"").unwrap();
        assert!(!c.port_forward());
        let c: KubeConfig = toml::from_str("app_access = \"port-forward\"").unwrap();
        assert!(c.port_forward());
        assert!(toml::from_str::<KubeConfig>("app_access = \"tunnel\"").is_err());
    }

    #[test]
    fn homes_as_claims_of_a_storage_class() {
        let c: KubeConfig = toml::from_str("home_storage_class = \"cephfs\"\nhome_size = \"50Gi\"").unwrap();
        assert_eq!((c.home_storage_class.as_deref(), c.home_size.as_str()), (Some("cephfs"), "50Gi"));
        assert!(c.check().is_ok());
        let bad = KubeConfig { home_storage_class: Some("Fast_SSD".into()), ..Default::default() };
        assert!(bad.check().unwrap_err().contains("home_storage_class"));
        let bad = KubeConfig { home_size: "lots".into(), ..Default::default() };
        assert!(bad.check().unwrap_err().contains("home_size"));
    }
}
