//! Users' home directories on the host, and the hard quotas on them.
//!
//! Every workload of a user mounts the same home (`<homes_dir>/<user>` on the host, `/home/<user>` in
//! each member). This crate makes that directory exist with the right owner, and — where a quota is
//! configured — makes the **filesystem** enforce it, so that a write past the quota fails inside the
//! container with `EDQUOT`/`ENOSPC` at once and touches nobody else's home (no periodic scan that notices
//! afterwards). Backends, behind [`Homes`]:
//!
//! - [`DirHomes`]: plain directories, no quota (the default, and what needs no root);
//! - [`LoopHomes`]: one ext4 image file per user (`<homes_dir>/.images/<user>.ext4`, sparse), loop-mounted
//!   on the home directory; the image's size is the quota. Grows online (`resize2fs`); shrinks only while
//!   none of the user's work runs (the image is unmounted, checked and shrunk);
//! - [`XfsHomes`]: where `homes_dir` is on XFS mounted with `prjquota`: each home is an XFS project (its
//!   id is the user's UID) with a hard block limit; changes apply at once in both directions;
//! - [`fake::FakeHomes`]: a recording fake for tests of the layers above.
//!
//! Contract: [`Homes::ensure`] is idempotent and leaves the home owned by `uid:uid`, mode 0700; a quota
//! of `None` means no limit from gpuhub; usage is what the filesystem reports, not an estimate.

pub mod fake;
mod loopfs;
mod xfs;

pub use loopfs::{LoopHomes, MIN_LOOP_QUOTA};
pub use xfs::XfsHomes;

use async_trait::async_trait;
use std::path::{Path, PathBuf};

/// What can go wrong with a home.
#[derive(Debug, thiserror::Error)]
pub enum HomeError {
    /// A filesystem operation failed.
    #[error("home of {user}: {what}: {source}")]
    Io {
        /// Whose home.
        user: String,
        /// What was being done.
        what: &'static str,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A tool the backend runs (`mkfs.ext4`, `mount`, `resize2fs`, `xfs_quota`) failed.
    #[error("home of {user}: {command} failed: {stderr}")]
    Command {
        /// Whose home.
        user: String,
        /// The command line.
        command: String,
        /// What it printed on stderr (or its exit status).
        stderr: String,
    },
    /// The quota asked for is below what the home already holds.
    #[error("home of {user} holds {used} bytes, more than the quota of {quota} bytes asked for")]
    BelowUsage {
        /// Whose home.
        user: String,
        /// Bytes in use.
        used: u64,
        /// The quota asked for.
        quota: u64,
    },
    /// The quota asked for is below the least the backend can make.
    #[error("a home quota must be at least {min} bytes (asked: {quota})")]
    TooSmall {
        /// The least quota.
        min: u64,
        /// The quota asked for.
        quota: u64,
    },
    /// The home must be unmounted for this (a loop image shrinking) and the user's work is running.
    #[error("the home of {user} can shrink only while none of their work runs: stop it first")]
    Busy {
        /// Whose home.
        user: String,
    },
    /// The backend cannot be used where the homes are (not XFS, no `prjquota`, not root).
    #[error("home quotas ({backend}) unavailable at {path}: {why}")]
    Unavailable {
        /// The backend's name.
        backend: &'static str,
        /// The homes directory.
        path: PathBuf,
        /// Why.
        why: String,
    },
}

/// How full one home is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HomeUsage {
    /// Bytes in use, as the filesystem counts them.
    pub used: u64,
    /// The hard limit in force; `None`: no limit.
    pub quota: Option<u64>,
}

/// Users' homes on this host.
#[async_trait]
pub trait Homes: Send + Sync + std::fmt::Debug {
    /// The backend's name: `dir`, `loop`, `xfs` (or `fake`).
    fn kind(&self) -> &'static str;

    /// Where `user`'s home is on the host (whether or not it exists yet).
    fn path(&self, user: &str) -> PathBuf;

    /// Whether this backend enforces the quotas `ensure` is given.
    fn enforces_quotas(&self) -> bool {
        true
    }

    /// Makes `user`'s home exist, owned by `uid:uid` with mode 0700, and ready to be mounted into a
    /// container, with `quota` bytes in force (when the backend enforces quotas and `quota` is set).
    /// An existing home keeps its files; its quota is changed to `quota` when it differs (refused with
    /// [`HomeError::BelowUsage`] when it holds more). `busy` says the user has work running: a backend
    /// that can only shrink an unmounted home refuses to shrink then.
    async fn ensure(&self, user: &str, uid: u32, quota: Option<u64>, busy: bool) -> Result<PathBuf, HomeError>;

    /// How full `user`'s home is; `None` when it does not exist yet.
    async fn usage(&self, user: &str) -> Result<Option<HomeUsage>, HomeError>;

    /// Detaches `user`'s home from the host (unmounts it) so that it can be moved or deleted, and
    /// returns every path that holds it (the directory, and the image file where there is one).
    async fn release(&self, user: &str) -> Result<Vec<PathBuf>, HomeError>;
}

/// Plain directories: no quota.
#[derive(Debug, Clone)]
pub struct DirHomes {
    root: PathBuf,
}

impl DirHomes {
    /// Homes under `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }
}

#[async_trait]
impl Homes for DirHomes {
    fn kind(&self) -> &'static str {
        "dir"
    }

    fn enforces_quotas(&self) -> bool {
        false
    }

    fn path(&self, user: &str) -> PathBuf {
        self.root.join(user)
    }

    async fn ensure(&self, user: &str, uid: u32, _quota: Option<u64>, _busy: bool) -> Result<PathBuf, HomeError> {
        let p = self.path(user);
        make_dir(user, &p, uid)?;
        Ok(p)
    }

    /// Plain directories are not measured (`None`): walking every file is the periodic scan this
    /// crate exists to avoid.
    async fn usage(&self, _user: &str) -> Result<Option<HomeUsage>, HomeError> {
        Ok(None)
    }

    async fn release(&self, user: &str) -> Result<Vec<PathBuf>, HomeError> {
        let p = self.path(user);
        Ok(if p.exists() { vec![p] } else { Vec::new() })
    }
}

/// Makes `path` a directory owned by `uid:uid`, mode 0700.
pub(crate) fn make_dir(user: &str, path: &Path, uid: u32) -> Result<(), HomeError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path).map_err(|e| io(user, "creating", e))?;
    std::os::unix::fs::chown(path, Some(uid), Some(uid)).map_err(|e| io(user, "changing owner", e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).map_err(|e| io(user, "setting mode", e))
}

pub(crate) fn io(user: &str, what: &'static str, source: std::io::Error) -> HomeError {
    HomeError::Io { user: user.to_owned(), what, source }
}

/// Runs `program args…`, returning its stdout; a failure names the command and its stderr.
pub(crate) async fn run(user: &str, program: &str, args: &[&str]) -> Result<String, HomeError> {
    run_codes(user, program, args, &[0]).await
}

/// [`run`], taking any of the exit codes `ok` as success (`e2fsck` exits 1 when it corrected something).
pub(crate) async fn run_codes(user: &str, program: &str, args: &[&str], ok: &[i32]) -> Result<String, HomeError> {
    let command = std::iter::once(program).chain(args.iter().copied()).collect::<Vec<_>>().join(" ");
    let out =
        tokio::process::Command::new(program).args(args).stdin(std::process::Stdio::null()).output().await.map_err(
            |e| HomeError::Command { user: user.to_owned(), command: command.clone(), stderr: e.to_string() },
        )?;
    if !out.status.code().is_some_and(|c| ok.contains(&c)) {
        let err = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        let stderr = if err.is_empty() { out.status.to_string() } else { err };
        return Err(HomeError::Command { user: user.to_owned(), command, stderr });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether `path` is a mount point, from `/proc/self/mountinfo` (its fifth field, with `\040`-style
/// escapes for spaces and the like).
pub(crate) fn is_mount_point(path: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else { return false };
    let want = path.to_string_lossy();
    info.lines().filter_map(|l| l.split(' ').nth(4)).any(|m| unescape_mount(m) == want)
}

fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Used bytes of the filesystem mounted at `path` (`statvfs`: blocks less free blocks).
pub(crate) fn fs_used(user: &str, path: &Path) -> Result<u64, HomeError> {
    let s = rustix::fs::statvfs(path).map_err(|e| io(user, "statvfs", e.into()))?;
    Ok(s.f_blocks.saturating_sub(s.f_bfree).saturating_mul(s.f_frsize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_read() {
        assert_eq!(unescape_mount("/srv/a\\040b"), "/srv/a b");
        assert_eq!(unescape_mount("/plain"), "/plain");
        assert_eq!(unescape_mount("/end\\04"), "/end\\04");
    }

    #[test]
    fn root_is_a_mount_point_and_a_fresh_dir_is_not() {
        assert!(is_mount_point(Path::new("/")));
        let d = tempfile::tempdir().unwrap();
        assert!(!is_mount_point(d.path()));
    }

    #[tokio::test]
    async fn dir_homes_are_private_and_counted() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let d = tempfile::tempdir().unwrap();
        let homes = DirHomes::new(d.path());
        assert_eq!(homes.usage("alice").await.unwrap(), None);
        let uid = rustix::process::getuid().as_raw();
        let p = homes.ensure("alice", uid, Some(1 << 30), false).await.unwrap();
        assert_eq!(p, d.path().join("alice"));
        let m = std::fs::metadata(&p).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o700);
        assert_eq!(m.uid(), uid);
        std::fs::write(p.join("f"), vec![7u8; 100_000]).unwrap();
        assert_eq!(homes.usage("alice").await.unwrap(), None, "plain directories are not measured");
        assert_eq!(homes.release("alice").await.unwrap(), vec![p]);
    }
}
