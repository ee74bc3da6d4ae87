//! Mounts a test made (loop-mounted images, homes with quotas) undone when it ends, pass or fail.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The mount points in `mountinfo` (the text of `/proc/self/mountinfo`) at or under `root`, deepest
/// first (the order they can be unmounted in).
pub fn mount_points_under(mountinfo: &str, root: &Path) -> Vec<String> {
    let root = root.display().to_string();
    let below = format!("{}/", root.trim_end_matches('/'));
    let mut under: Vec<String> = mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| *m == root || m.starts_with(&below))
        .map(str::to_owned)
        .collect();
    under.sort_by_key(|m| std::cmp::Reverse(m.len()));
    under
}

/// Detaches (`umount -l`) every mount at or under `root`, deepest first; failures are ignored (a
/// test's cleanup).
pub fn unmount_under(root: &Path) {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for m in mount_points_under(&info, root) {
        let _ = Command::new("umount").arg("-l").arg(&m).stderr(Stdio::null()).status();
    }
}

/// Detaches every mount under its directory when dropped ([`unmount_under`]).
#[derive(Debug)]
pub struct UnmountOnDrop(pub PathBuf);

impl Drop for UnmountOnDrop {
    fn drop(&mut self) {
        unmount_under(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mounts_under_a_root_come_deepest_first_and_a_neighbour_is_not_one() {
        let info = "\
22 1 8:1 / / rw - ext4 /dev/sda1 rw
40 22 7:0 / /tmp/t1/homes rw - ext4 /dev/loop0 rw
41 40 7:1 / /tmp/t1/homes/alice rw - ext4 /dev/loop1 rw
42 22 7:2 / /tmp/t10 rw - ext4 /dev/loop2 rw
43 22 0:5 / /tmp/t1 rw - tmpfs tmpfs rw
";
        assert_eq!(mount_points_under(info, Path::new("/tmp/t1")), ["/tmp/t1/homes/alice", "/tmp/t1/homes", "/tmp/t1"]);
        assert!(mount_points_under(info, Path::new("/srv")).is_empty());
    }
}
