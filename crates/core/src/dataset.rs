//! Datasets: directories an admin registers by name (a path every node has: local disk, or an NFS or
//! object-storage mount the node keeps), which workloads mount read-only at `/datasets/<name>`. A volume
//! in engine-neutral terms: each engine maps it to its own bind mount.

use crate::CoreError;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Where workloads find their datasets.
pub const DATASETS_DIR: &str = "/datasets";

/// A dataset as an admin registers it (`POST /api/v1/datasets`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Dataset {
    /// What users ask for (`imagenet`): the naming rule of workloads.
    pub name: String,
    /// The directory on every node (absolute, no `..`).
    pub path: String,
    /// A line for people choosing it.
    #[serde(default)]
    pub description: String,
}

/// A dataset a workload mounts: its name and the path it had when the workload was submitted (a later
/// change of the registration does not move running work).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DatasetMount {
    pub name: String,
    pub path: String,
}

impl DatasetMount {
    /// Where the workload sees it.
    pub fn target(&self) -> String {
        format!("{DATASETS_DIR}/{}", self.name)
    }
}

impl Dataset {
    /// The name follows the naming rule; the path is absolute, not `/`, without `..` or NUL.
    pub fn validate(&self) -> Result<(), CoreError> {
        crate::names::validate("dataset", &self.name)?;
        let p = &self.path;
        let bad = |reason: &str| Err(CoreError::invalid("path", format!("{p:?} {reason}")));
        if !p.starts_with('/') {
            return bad("is not an absolute path");
        }
        if p.split('/').any(|part| part == "..") || p.contains('\0') {
            return bad("must not hold '..' or NUL");
        }
        if p.trim_end_matches('/').is_empty() {
            return bad("is the root directory");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(name: &str, path: &str) -> Dataset {
        Dataset { name: name.into(), path: path.into(), description: String::new() }
    }

    #[test]
    fn rules() {
        assert!(d("imagenet", "/data/imagenet").validate().is_ok());
        for (name, path) in [("Bad", "/x"), ("x", "rel/x"), ("x", "/"), ("x", "/a/../etc"), ("x", "//")] {
            assert!(d(name, path).validate().is_err(), "{name} {path}");
        }
        let e = d("x", "rel").validate().unwrap_err();
        assert!(matches!(e, CoreError::Invalid { ref field, .. } if field == "path"), "{e}");
        assert_eq!(DatasetMount { name: "x".into(), path: "/d".into() }.target(), "/datasets/x");
    }
}
