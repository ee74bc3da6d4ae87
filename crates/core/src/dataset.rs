//! Datasets: directories an admin registers by name (a path every node has: local disk, or an NFS or
//! object-storage mount the node keeps), an NFS export the engine mounts, or an S3 bucket (or a prefix
//! of one) that the hub mounts on its host ([`S3Source`]), which workloads mount at `/datasets/<name>`,
//! read-only unless an object-storage dataset is registered read-write. A volume in engine-neutral
//! terms: each engine maps it to its own bind mount.

use crate::CoreError;
use serde::{Deserialize, Serialize};

mod s3;
pub use s3::{S3Source, SECRET_SET, Secret};

/// Where workloads find their datasets.
pub const DATASETS_DIR: &str = "/datasets";

/// A dataset as an admin registers it (`POST /api/v1/datasets`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Dataset {
    /// What users ask for (`imagenet`): the naming rule of workloads.
    pub name: String,
    /// The directory on every node (absolute, no `..`); empty for an NFS export.
    #[serde(default)]
    pub path: String,
    /// An NFS export the engine mounts itself, `server:/export/path` (instead of `path`); the server
    /// is best named by its address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nfs: Option<String>,
    /// An S3 bucket or a prefix of one, which the hub mounts on its host (instead of `path`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Source>,
    /// Workloads may not write it (the default); `false` is for object-storage datasets only.
    #[serde(default = "yes")]
    pub read_only: bool,
    /// A line for people choosing it.
    #[serde(default)]
    pub description: String,
    /// Set by the server in answers, ignored in requests: an object-storage dataset's mount on the hub's
    /// host, `mounted`, `mounting` or `down: <why>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(read_only))]
    pub status: Option<String>,
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

/// A dataset a workload mounts: its name and the path it had when the workload was submitted (a later
/// change of the registration does not move running work).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DatasetMount {
    pub name: String,
    /// The directory on the nodes, or with `nfs` the export's path on that server.
    pub path: String,
    /// The NFS server `path` is exported from; absent: a directory on the nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nfs: Option<String>,
    /// The bucket (`s3://bucket/prefix`) the hub mounts at `path` on its host; absent: not object storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<String>,
    /// Mounted read-only (absent: `true`).
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub read_only: bool,
}

impl DatasetMount {
    /// Where the workload sees it.
    pub fn target(&self) -> String {
        format!("{DATASETS_DIR}/{}", self.name)
    }
}

impl Dataset {
    /// The name follows the naming rule; exactly one of `path` and `nfs`; the path (or the export's) is
    /// absolute, not `/`, without `..` or NUL; an NFS server is a host name or address, nothing that
    /// could add mount options.
    pub fn validate(&self) -> Result<(), CoreError> {
        crate::names::validate("dataset", &self.name)?;
        if let Some(s3) = &self.s3 {
            if !self.path.is_empty() || self.nfs.is_some() {
                return Err(CoreError::invalid("s3", "give one of path, nfs and s3"));
            }
            return s3.validate();
        }
        if !self.read_only {
            return Err(CoreError::invalid(
                "read_only",
                "only object-storage (s3) datasets may be read-write; directories and NFS exports are read-only",
            ));
        }
        match (&self.nfs, self.path.is_empty()) {
            (Some(_), false) => return Err(CoreError::invalid("nfs", "give path or nfs, not both")),
            (None, true) => {
                return Err(CoreError::invalid(
                    "path",
                    "give the directory (path), an NFS export (nfs) or an S3 bucket (s3)",
                ));
            }
            (Some(n), true) => {
                let Some((server, export)) = n.split_once(":/") else {
                    return Err(CoreError::invalid("nfs", format!("{n:?} is not server:/export/path")));
                };
                let host_ok = !server.is_empty()
                    && server.len() <= 253
                    && server.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
                if !host_ok {
                    return Err(CoreError::invalid("nfs", format!("{server:?} is not a host name or IPv4 address")));
                }
                let export = format!("/{export}");
                if export.contains(',') || export.chars().any(char::is_whitespace) {
                    return Err(CoreError::invalid("nfs", format!("{export:?} must not hold commas or spaces")));
                }
                return check_path("nfs", &export);
            }
            (None, false) => {}
        }
        check_path("path", &self.path)?;
        refuse_protected(&self.path, &self.path, &[])
    }

    /// Where a workload mounts it from: the directory, or the export and its server; an object-storage
    /// dataset's path is where the hub mounts it on its host, which the server fills in.
    pub fn mount(&self) -> DatasetMount {
        let (path, nfs) = match self.nfs.as_deref().and_then(|n| n.split_once(":/")) {
            Some((server, export)) => (format!("/{export}"), Some(server.to_owned())),
            None => (self.path.clone(), None),
        };
        let s3 = self.s3.as_ref().map(|s| s.url.clone());
        DatasetMount { name: self.name.clone(), path, nfs, s3, read_only: self.read_only }
    }
}

/// `p` is absolute, not `/`, without `..` or NUL; a refusal names `field`.
fn check_path(field: &str, p: &str) -> Result<(), CoreError> {
    let bad = |reason: &str| Err(CoreError::invalid(field, format!("{p:?} {reason}")));
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

/// The host's own directories, which no dataset may be, be inside of or hold: what they show
/// (the host's configuration and secrets, its processes and devices, other containers' files) is not
/// data to hand to every workload.
pub const SYSTEM_DIRS: &[&str] = &[
    "/etc",
    "/proc",
    "/sys",
    "/dev",
    "/boot",
    "/root",
    "/run",
    "/var/run",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/usr",
    "/var/lib/docker",
    "/var/lib/containerd",
];

/// `p`'s parts with `.`, empty parts and `..` (each taking away the part before it) resolved.
fn parts(p: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for part in p.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            _ => out.push(part),
        }
    }
    out
}

/// Refuses, naming `shown` (the path as given), a dataset at `p` (as given, or where its symlinks
/// lead) that is, is inside of or holds one of the host's system directories ([`SYSTEM_DIRS`])
/// or one of `own`, the hub's own directories with what each is (`("/var/lib/gpuhub", "gpuhub's data
/// directory")`).
pub fn refuse_protected(shown: &str, p: &str, own: &[(&str, &str)]) -> Result<(), CoreError> {
    let path = parts(p);
    let bad = |reason: String| Err(CoreError::invalid("path", format!("{shown:?} {reason}")));
    if path.is_empty() {
        return bad("is the root directory".into());
    }
    let system = SYSTEM_DIRS.iter().map(|d| (*d, "the host's system directory"));
    for (dir, what) in system.chain(own.iter().copied()) {
        let d = parts(dir);
        if d.is_empty() {
            continue;
        }
        if path.starts_with(&d) {
            let how = if path.len() == d.len() { "is" } else { "is in" };
            return bad(format!("{how} {what} {dir}: workloads must not see it"));
        }
        if d.starts_with(&path) {
            return bad(format!("holds {what} {dir}: workloads must not see it"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(name: &str, path: &str) -> Dataset {
        Dataset {
            name: name.into(),
            path: path.into(),
            nfs: None,
            s3: None,
            read_only: true,
            description: String::new(),
            status: None,
        }
    }

    #[test]
    fn nfs_exports() {
        let nfs = |n: &str| Dataset { nfs: Some(n.into()), ..d("imagenet", "") };
        let m = nfs("10.0.0.5:/exports/imagenet").mount();
        assert_eq!((m.path.as_str(), m.nfs.as_deref()), ("/exports/imagenet", Some("10.0.0.5")));
        assert!(nfs("files.lab.example:/srv/data").validate().is_ok());
        for (bad, why) in [
            ("10.0.0.5", "server:/export"),
            (":/x", "host name"),
            ("a,o=rw:/x", "host name"),
            ("h:/a,rw", "commas"),
            ("h:/a/../etc", ".."),
            ("h:/", "root directory"),
        ] {
            let e = nfs(bad).validate().unwrap_err();
            assert!(matches!(e, CoreError::Invalid { ref field, .. } if field == "nfs"), "{bad}: {e}");
            assert!(e.to_string().contains(why), "{bad}: {e}");
        }
        let both = Dataset { nfs: Some("h:/x".into()), ..d("x", "/data") };
        assert!(both.validate().unwrap_err().to_string().contains("not both"));
        assert!(d("x", "").validate().is_err(), "neither");
        assert_eq!(
            d("x", "/data").mount(),
            DatasetMount { name: "x".into(), path: "/data".into(), nfs: None, s3: None, read_only: true }
        );
    }

    #[test]
    fn rules() {
        assert!(d("imagenet", "/data/imagenet").validate().is_ok());
        for (name, path) in [("Bad", "/x"), ("x", "rel/x"), ("x", "/"), ("x", "/a/../etc"), ("x", "//")] {
            assert!(d(name, path).validate().is_err(), "{name} {path}");
        }
        let e = d("x", "rel").validate().unwrap_err();
        assert!(matches!(e, CoreError::Invalid { ref field, .. } if field == "path"), "{e}");
        assert_eq!(
            DatasetMount { name: "x".into(), path: "/d".into(), nfs: None, s3: None, read_only: true }.target(),
            "/datasets/x"
        );
    }

    #[test]
    fn system_directories_are_no_datasets() {
        for (path, why) in [
            ("/etc", "is the host's system directory /etc"),
            ("/etc/ssl/", "is in the host's system directory /etc"),
            ("//proc/./self", "is in the host's system directory /proc"),
            ("/var", "holds the host's system directory /var/run"),
            ("/var/lib", "holds the host's system directory /var/lib/docker"),
            ("/lib64", "system directory /lib64"),
            ("/usr/share/data", "is in the host's system directory /usr"),
        ] {
            let e = d("x", path).validate().unwrap_err();
            assert!(matches!(e, CoreError::Invalid { ref field, .. } if field == "path"), "{e}");
            assert!(e.to_string().contains(why) && e.to_string().contains(&format!("{path:?}")), "{path}: {e}");
        }
        let own = [("/srv/gpuhub/data", "gpuhub's data directory")];
        for path in ["/srv/gpuhub/data", "/srv/gpuhub/data/logs", "/srv/gpuhub", "/srv"] {
            let e = refuse_protected(path, path, &own).unwrap_err();
            assert!(e.to_string().contains("gpuhub's data directory /srv/gpuhub/data"), "{path}: {e}");
        }
        for fine in ["/data/imagenet", "/srv/datasets", "/var/lib/datasets", "/mnt/nfs/x", "/home/shared/corpus"] {
            assert!(refuse_protected(fine, fine, &own).is_ok(), "{fine}");
        }
    }
}
