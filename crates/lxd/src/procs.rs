//! The host PIDs of every process of a container, for the monitor to attribute GPU processes (NVML
//! lists host PIDs) to the member that runs them, as the memory guard needs.
//!
//! LXD reports only a container's init PID; a member's GPU work runs in its children and in processes
//! started by exec (JupyterLab's kernels, SSH sessions), which LXD attaches to the container's cgroup.
//! So the PIDs are read from the cgroup the init is in (`lxc.payload.<name>`) and every cgroup below it:
//! on cgroup v2 LXC puts exec'd processes in a `.lxc` child cgroup, on v1 beside the init. The
//! hierarchy is the init's cgroup v2 one where the container has one (not the root), else its v1 `pids`
//! hierarchy (LXD's `limits.processes`), else its v1 `memory` one. The init's `/proc/<pid>/cgroup` and
//! the reader's `/proc/self/mountinfo` say where those are mounted; parsing is pure and tested on
//! sample contents.

use gpuhub_driver::cgroup::cgroup_mounts;
use std::path::{Path, PathBuf};

/// The directory of the cgroup whose subtree holds container `name`'s processes, from its init's
/// `/proc/<pid>/cgroup` and the reader's mountinfo; `None` when the init is in none of its own (the
/// PID belongs to another process now, or no hierarchy is mounted).
pub(crate) fn container_cgroup(name: &str, proc_cgroup: &str, mountinfo: &str) -> Option<PathBuf> {
    let mounts = cgroup_mounts(mountinfo);
    // LXD's cgroup of the container: `lxc.payload.<name>`, or `lxc.payload.<project>_<name>`; the
    // path is cut there, as the init may sit in a cgroup below it
    let own = |seg: &str| {
        seg.strip_prefix("lxc.payload.")
            .is_some_and(|rest| rest == name || rest.strip_suffix(name).is_some_and(|p| p.ends_with('_')))
    };
    let lines: Vec<(&str, String)> = proc_cgroup
        .lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            let segments: Vec<&str> = path.split('/').collect();
            let at = segments.iter().position(|s| own(s))?;
            Some((controllers, segments[..=at].join("/")))
        })
        .collect();
    let v2 = lines.iter().find(|(c, _)| c.is_empty()).and_then(|(_, path)| {
        let mount = mounts.iter().find(|m| m.controllers.is_none())?;
        mount.dir_of(path).ok()
    });
    let v1 = |controller: &str| {
        let (_, path) = lines.iter().find(|(c, _)| c.split(',').any(|x| x == controller))?;
        let mount = mounts.iter().find(|m| m.carries(controller))?;
        mount.dir_of(path).ok()
    };
    v2.or_else(|| v1("pids")).or_else(|| v1("memory"))
}

/// The PIDs in the `cgroup.procs` of `dir` and of every cgroup below it, ascending; unreadable files
/// (a cgroup removed meanwhile) are skipped.
pub(crate) fn subtree_pids(dir: &Path) -> Vec<u32> {
    let mut pids = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        if let Ok(text) = std::fs::read_to_string(d.join("cgroup.procs")) {
            pids.extend(text.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
        }
        if let Ok(entries) = std::fs::read_dir(&d) {
            todo.extend(entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()));
        }
    }
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// The host PIDs of container `name`'s processes, its init `init` first among them; just the init when
/// its cgroup cannot be read (said at debug level).
pub(crate) fn container_pids(name: &str, init: u32) -> Vec<u32> {
    let read = |p: &str| std::fs::read_to_string(p);
    let dir = match (read(&format!("/proc/{init}/cgroup")), read("/proc/self/mountinfo")) {
        (Ok(cg), Ok(mi)) => container_cgroup(name, &cg, &mi),
        _ => None,
    };
    let Some(dir) = dir else {
        tracing::debug!(container = name, init, "cannot find the container's cgroup: only its init is attributed");
        return vec![init];
    };
    let mut pids = subtree_pids(&dir);
    if !pids.contains(&init) {
        pids.insert(0, init);
    }
    pids
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This machine's kind of host: hybrid (v1 controllers and the unified v2 hierarchy).
    const HYBRID_MOUNTINFO: &str = "\
25 30 0:22 / /sys rw,nosuid shared:7 - sysfs sysfs rw
32 25 0:27 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
33 32 0:28 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
40 32 0:35 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:21 - cgroup cgroup rw,pids
41 32 0:36 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:22 - cgroup cgroup rw,memory
";

    const PROC_CGROUP: &str = "\
9:name=systemd:/lxc.payload.c1
8:pids:/lxc.payload.c1
4:memory:/lxc.payload.c1
0::/lxc.payload.c1
";

    #[test]
    fn the_containers_cgroup_is_its_v2_one_else_its_v1_pids_or_memory_one() {
        let dir = container_cgroup("c1", PROC_CGROUP, HYBRID_MOUNTINFO);
        assert_eq!(dir, Some(PathBuf::from("/sys/fs/cgroup/unified/lxc.payload.c1")));
        // v1 only: no unified hierarchy mounted
        let v1: String =
            HYBRID_MOUNTINFO.lines().filter(|l| !l.contains("cgroup2")).map(|l| format!("{l}\n")).collect();
        assert_eq!(container_cgroup("c1", PROC_CGROUP, &v1), Some(PathBuf::from("/sys/fs/cgroup/pids/lxc.payload.c1")));
        let no_pids: String = v1.lines().filter(|l| !l.ends_with("rw,pids")).map(|l| format!("{l}\n")).collect();
        assert_eq!(
            container_cgroup("c1", PROC_CGROUP, &no_pids),
            Some(PathBuf::from("/sys/fs/cgroup/memory/lxc.payload.c1"))
        );
        // pure v2, in a project (lxc.payload.<project>_<name>), mounted at /sys/fs/cgroup
        let v2 = "30 25 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n";
        let cg = "0::/lxc.payload.team_c1/.lxc\n";
        assert_eq!(container_cgroup("c1", cg, v2), Some(PathBuf::from("/sys/fs/cgroup/lxc.payload.team_c1")));
        // a gpuhub inside a cgroup namespace sees the hierarchy from its own root
        let nested = "30 25 0:26 /outer /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            container_cgroup("c1", "0::/outer/lxc.payload.c1\n", nested),
            Some(PathBuf::from("/sys/fs/cgroup/lxc.payload.c1"))
        );
    }

    #[test]
    fn a_pid_outside_the_container_is_none_of_its_cgroups() {
        // the init ended and its PID is another process's (gpuhub's own, a user session's)
        assert_eq!(container_cgroup("c1", "0::/user.slice/session-1.scope\n", HYBRID_MOUNTINFO), None);
        assert_eq!(container_cgroup("c1", "0::/lxc.payload.c10\n", HYBRID_MOUNTINFO), None, "another container");
        assert_eq!(container_cgroup("c1", PROC_CGROUP, ""), None, "nothing mounted");
        assert_eq!(container_cgroup("c1", "0::/lxc.payload.xc1\n", HYBRID_MOUNTINFO), None, "another name");
        assert_eq!(container_cgroup("c1", "0::/../lxc.payload.c1\n", HYBRID_MOUNTINFO), None, "out of its hierarchy");
    }

    #[test]
    fn every_cgroup_below_counts_and_mount_points_are_unescaped() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join(".lxc/deeper")).unwrap();
        std::fs::write(d.path().join("cgroup.procs"), "40\n7\n").unwrap();
        std::fs::write(d.path().join(".lxc/cgroup.procs"), "99\n7\n").unwrap();
        std::fs::write(d.path().join(".lxc/deeper/cgroup.procs"), "").unwrap();
        assert_eq!(subtree_pids(d.path()), [7, 40, 99]);
        assert_eq!(subtree_pids(&d.path().join("gone")), Vec::<u32>::new());
    }
}
