//! Homes as XFS projects: where the homes directory is on XFS mounted with `prjquota`, each home is a
//! project (id = the user's UID) with a hard block limit, set and read with `xfs_quota`.

use crate::{HomeError, HomeUsage, Homes, make_dir, run};
use async_trait::async_trait;
use std::path::{Path, PathBuf};

/// Homes under an XFS directory with project quotas on.
#[derive(Debug)]
pub struct XfsHomes {
    root: PathBuf,
    /// The mount point of the filesystem holding `root` (what `xfs_quota` is pointed at).
    mount: PathBuf,
}

impl XfsHomes {
    /// Homes under `root`, which must be on XFS mounted with `prjquota` (or `pquota`); the error says
    /// what was found otherwise.
    pub async fn new(root: impl Into<PathBuf>) -> Result<Self, HomeError> {
        let root = root.into();
        std::fs::create_dir_all(&root).map_err(|e| HomeError::Unavailable {
            backend: "xfs",
            path: root.clone(),
            why: e.to_string(),
        })?;
        let unavailable = |why: String| HomeError::Unavailable { backend: "xfs", path: root.clone(), why };
        let found = run("-", "findmnt", &["-n", "-o", "FSTYPE,OPTIONS,TARGET", "--target", &s(&root)])
            .await
            .map_err(|e| unavailable(e.to_string()))?;
        let (fstype, options, mount) =
            parse_findmnt(&found).ok_or_else(|| unavailable(format!("findmnt said {found:?}")))?;
        if fstype != "xfs" {
            return Err(unavailable(format!("the filesystem there is {fstype}, not xfs")));
        }
        if !options.split(',').any(|o| matches!(o, "prjquota" | "pquota" | "pqnoenforce")) {
            return Err(unavailable(format!("{mount} is not mounted with prjquota (options: {options})")));
        }
        if options.split(',').any(|o| o == "pqnoenforce") {
            return Err(unavailable(format!("{mount} counts project quotas but does not enforce them (pqnoenforce)")));
        }
        if !rustix::process::geteuid().is_root() {
            return Err(unavailable("setting project quotas needs root".into()));
        }
        Ok(Self { root, mount: PathBuf::from(mount) })
    }

    async fn xfs_quota(&self, user: &str, cmd: &str) -> Result<String, HomeError> {
        run(user, "xfs_quota", &["-x", "-c", cmd, &s(&self.mount)]).await
    }

    /// The project id `dir` carries (0: none).
    async fn project_of(&self, user: &str, dir: &Path) -> Result<u32, HomeError> {
        let out = run(user, "xfs_io", &["-r", "-c", "lsproj", &s(dir)]).await?;
        Ok(out.split('=').nth(1).and_then(|v| v.trim().parse().ok()).unwrap_or(0))
    }

    /// (used, hard limit) in bytes of project `id`.
    async fn report(&self, user: &str, id: u32) -> Result<(u64, u64), HomeError> {
        let out = self.xfs_quota(user, &format!("quota -p -N -b {id}")).await?;
        Ok(parse_quota_line(&out).unwrap_or((0, 0)))
    }
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// `FSTYPE OPTIONS TARGET` as `findmnt -n -o FSTYPE,OPTIONS,TARGET` prints them.
fn parse_findmnt(out: &str) -> Option<(String, String, String)> {
    let mut it = out.split_whitespace();
    Some((it.next()?.to_owned(), it.next()?.to_owned(), it.next()?.to_owned()))
}

/// `xfs_quota -c 'quota -p -N -b ID'`'s line: `device used soft hard warn grace`, in KiB; `None` when
/// the project has no record yet.
fn parse_quota_line(out: &str) -> Option<(u64, u64)> {
    let f: Vec<&str> = out.split_whitespace().collect();
    let used: u64 = f.get(1)?.parse().ok()?;
    let hard: u64 = f.get(3)?.parse().ok()?;
    Some((used * 1024, hard * 1024))
}

#[async_trait]
impl Homes for XfsHomes {
    fn kind(&self) -> &'static str {
        "xfs"
    }

    fn path(&self, user: &str) -> PathBuf {
        self.root.join(user)
    }

    async fn ensure(&self, user: &str, uid: u32, quota: Option<u64>, _busy: bool) -> Result<PathBuf, HomeError> {
        let dir = self.path(user);
        make_dir(user, &dir, uid)?;
        if self.project_of(user, &dir).await? != uid {
            // marks the tree (and what is made in it from now on) as project `uid`
            self.xfs_quota(user, &format!("project -s -p {} {uid}", s(&dir))).await?;
        }
        let (used, hard) = self.report(user, uid).await?;
        let want = quota.map(|q| q.div_ceil(1024) * 1024).unwrap_or(0);
        if want != hard {
            if want > 0 && used > want {
                return Err(HomeError::BelowUsage { user: user.to_owned(), used, quota: want });
            }
            self.xfs_quota(user, &format!("limit -p bhard={}k {uid}", want / 1024)).await?;
        }
        Ok(dir)
    }

    async fn usage(&self, user: &str) -> Result<Option<HomeUsage>, HomeError> {
        let dir = self.path(user);
        if !dir.exists() {
            return Ok(None);
        }
        let id = self.project_of(user, &dir).await?;
        if id == 0 {
            // not a project yet: a plain directory, not measured
            return Ok(None);
        }
        let (used, hard) = self.report(user, id).await?;
        Ok(Some(HomeUsage { used, quota: (hard > 0).then_some(hard) }))
    }

    async fn release(&self, user: &str) -> Result<Vec<PathBuf>, HomeError> {
        let dir = self.path(user);
        Ok(if dir.exists() { vec![dir] } else { Vec::new() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xfs_quota_lines_are_read_in_bytes() {
        assert_eq!(parse_quota_line("/dev/loop3 1024 0 2048 00 [--------]\n"), Some((1 << 20, 2 << 20)));
        assert_eq!(parse_quota_line(""), None);
        assert_eq!(
            parse_findmnt("xfs rw,relatime,prjquota /srv/homes\n"),
            Some(("xfs".into(), "rw,relatime,prjquota".into(), "/srv/homes".into()))
        );
    }
}
