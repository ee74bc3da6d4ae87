//! The host's mounted cgroup hierarchies, for engines whose members are processes on this host (Docker,
//! LXD): which hierarchy a cgroup path of `/proc/<pid>/cgroup` lives in, and where its directory is.

use std::path::PathBuf;

/// A mounted cgroup hierarchy, from a mountinfo text (`/proc/self/mountinfo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMount {
    /// The cgroup the mount shows as its root (`/` but in a cgroup namespace or a bind mount).
    pub root: String,
    /// Where it is mounted (`/sys/fs/cgroup/memory`).
    pub mount_point: PathBuf,
    /// The v1 controllers it carries; `None` for cgroup v2.
    pub controllers: Option<Vec<String>>,
}

impl CgroupMount {
    /// Whether it is the v1 hierarchy of `controller`.
    pub fn carries(&self, controller: &str) -> bool {
        self.controllers.as_ref().is_some_and(|cs| cs.iter().any(|c| c == controller))
    }

    /// The directory of cgroup `path` under this mount; the error says why there is none (outside the
    /// hierarchy, or climbing out of it).
    pub fn dir_of(&self, path: &str) -> Result<PathBuf, String> {
        let root = self.root.trim_end_matches('/');
        let rel = path.strip_prefix(root).filter(|r| r.is_empty() || r.starts_with('/')).ok_or_else(|| {
            format!("cgroup {path} is outside the hierarchy mounted at {}", self.mount_point.display())
        })?;
        if rel.split('/').any(|s| s == "..") {
            return Err(format!("cgroup path {path} leaves its hierarchy"));
        }
        Ok(self.mount_point.join(rel.trim_start_matches('/')))
    }
}

/// The cgroup mounts in a mountinfo text (`id parent major:minor root mount-point options [optional
/// fields…] - fstype source super-options`).
pub fn cgroup_mounts(mountinfo: &str) -> Vec<CgroupMount> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (before, after) = line.split_once(" - ")?;
            let fields: Vec<&str> = before.split(' ').collect();
            let (root, mount_point) = (fields.get(3)?, fields.get(4)?);
            let mut after = after.split(' ');
            let (fstype, _source, options) = (after.next()?, after.next()?, after.next().unwrap_or(""));
            let controllers = match fstype {
                "cgroup2" => None,
                "cgroup" => Some(options.split(',').map(str::to_owned).collect()),
                _ => return None,
            };
            Some(CgroupMount { root: unescape(root), mount_point: PathBuf::from(unescape(mount_point)), controllers })
        })
        .collect()
}

/// Undoes mountinfo's octal escapes (`\040` for a space, `\011`, `\012`, `\134`).
fn unescape(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal =
            bytes.get(i + 1..i + 4).filter(|d| bytes[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match octal.map(|d| d.iter().fold(0u32, |n, b| n * 8 + u32::from(b - b'0'))) {
            Some(n) if n <= 0xff => {
                out.push(n as u8);
                i += 4;
            }
            _ => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
25 30 0:22 / /sys rw,nosuid - sysfs sysfs rw
31 25 0:26 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
32 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
33 25 0:28 /lxc.payload.c1 /sys/fs/cg\\040roup/unified rw - cgroup2 cgroup2 rw
";

    #[test]
    fn cgroup_mounts_are_read_with_their_controllers_and_unescaped() {
        let m = cgroup_mounts(MOUNTINFO);
        assert_eq!(m.len(), 3, "{m:?}");
        assert!(m[0].carries("memory") && !m[0].carries("cpu"));
        assert!(m[1].carries("cpuacct"));
        assert_eq!(m[2].controllers, None);
        assert_eq!(m[2].mount_point, PathBuf::from("/sys/fs/cg roup/unified"));
        assert_eq!(unescape(r"a\134b\011c\777"), "a\\b\tc\\777");
    }

    #[test]
    fn a_cgroups_directory_is_under_its_mounts_root_only() {
        let m = cgroup_mounts(MOUNTINFO);
        assert_eq!(m[0].dir_of("/docker/abc").unwrap(), PathBuf::from("/sys/fs/cgroup/memory/docker/abc"));
        assert_eq!(m[2].dir_of("/lxc.payload.c1/.lxc").unwrap(), PathBuf::from("/sys/fs/cg roup/unified/.lxc"));
        assert!(m[2].dir_of("/lxc.payload.c10").unwrap_err().contains("outside"));
        assert!(m[2].dir_of("/lxc.payload.c1/../x").unwrap_err().contains("leaves"));
    }
}
