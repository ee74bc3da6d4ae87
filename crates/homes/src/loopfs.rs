//! Homes as loop-mounted ext4 images, one per user: the image's size is the quota.

use crate::{HomeError, HomeUsage, Homes, fs_used, io, is_mount_point, make_dir, run};
use async_trait::async_trait;
use std::path::{Path, PathBuf};

/// The least quota a loop home can have (ext4 needs room for its own metadata and journal).
pub const MIN_LOOP_QUOTA: u64 = 16 << 20;

/// One ext4 image per user under `<root>/.images/`, sparse (it takes on the host disk only what is
/// written), loop-mounted `nosuid,nodev` on `<root>/<user>`. Needs root (`mount`) and e2fsprogs.
#[derive(Debug)]
pub struct LoopHomes {
    root: PathBuf,
    /// One change at a time: two starts of the same user's work must not both make the image.
    lock: tokio::sync::Mutex<()>,
}

impl LoopHomes {
    /// Homes under `root`, images under `root/.images` (made 0700).
    pub fn new(root: impl Into<PathBuf>) -> Result<Self, HomeError> {
        use std::os::unix::fs::PermissionsExt;
        let root = root.into();
        let images = root.join(".images");
        let unavailable = |why: String| HomeError::Unavailable { backend: "loop", path: root.clone(), why };
        std::fs::create_dir_all(&images)
            .map_err(|e| unavailable(format!("cannot create {}: {e}", images.display())))?;
        std::fs::set_permissions(&images, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| unavailable(e.to_string()))?;
        if !rustix::process::geteuid().is_root() {
            return Err(unavailable("loop-mounting needs root".into()));
        }
        Ok(Self { root, lock: tokio::sync::Mutex::new(()) })
    }

    fn image(&self, user: &str) -> PathBuf {
        self.root.join(".images").join(format!("{user}.ext4"))
    }

    async fn mount(&self, user: &str, image: &Path, dir: &Path) -> Result<(), HomeError> {
        if is_mount_point(dir) {
            return Ok(());
        }
        std::fs::create_dir_all(dir).map_err(|e| io(user, "creating", e))?;
        run(user, "mount", &["-o", "loop,nosuid,nodev", &s(image), &s(dir)]).await?;
        Ok(())
    }

    /// Makes the image (sparse, `quota` bytes) and its filesystem, owned by `uid`, and mounts it on
    /// `dir`. Files already in a plain `dir` are copied in first; if they do not fit, nothing changes.
    async fn create(&self, user: &str, uid: u32, quota: u64, dir: &Path) -> Result<(), HomeError> {
        let image = self.image(user);
        let f = std::fs::File::create(&image).map_err(|e| io(user, "creating image", e))?;
        f.set_len(quota).map_err(|e| io(user, "sizing image", e))?;
        drop(f);
        let owner = format!("root_owner={uid}:{uid}");
        let made = run(user, "mkfs.ext4", &["-q", "-F", "-m", "0", "-E", &owner, &s(&image)]).await;
        if let Err(e) = made {
            let _ = std::fs::remove_file(&image);
            return Err(e);
        }
        let old = dir.exists() && std::fs::read_dir(dir).map(|mut d| d.next().is_some()).unwrap_or(false);
        if !old {
            self.mount(user, &image, dir).await?;
            let _ = std::fs::remove_dir(dir.join("lost+found"));
            return make_dir(user, dir, uid);
        }
        // a plain home from before quotas: its files move into the image
        let aside = self.root.join(".images").join(format!("{user}.before-quota"));
        std::fs::rename(dir, &aside).map_err(|e| io(user, "moving the old home aside", e))?;
        let undo = |e: HomeError| {
            let _ = std::fs::remove_dir_all(dir);
            let _ = std::fs::rename(&aside, dir);
            let _ = std::fs::remove_file(&image);
            e
        };
        if let Err(e) = self.mount(user, &image, dir).await {
            return Err(undo(e));
        }
        let _ = std::fs::remove_dir(dir.join("lost+found"));
        let copied = run(user, "cp", &["-a", "--", &format!("{}/.", s(&aside)), &s(dir)]).await;
        if let Err(e) = copied {
            let _ = run(user, "umount", &[&s(dir)]).await;
            return Err(undo(e));
        }
        make_dir(user, dir, uid)?;
        std::fs::remove_dir_all(&aside).map_err(|e| io(user, "removing the old home", e))
    }

    /// Gives the mounted image `quota` bytes. Grows online where the kernel lets it (`resize2fs` on the
    /// mounted filesystem needs `CAP_SYS_RESOURCE`); otherwise, and to shrink, it works on the image
    /// unmounted, which it does only while none of the user's work runs (`busy` false).
    async fn resize(&self, user: &str, image: &Path, dir: &Path, quota: u64, busy: bool) -> Result<(), HomeError> {
        let size = std::fs::metadata(image).map_err(|e| io(user, "reading image", e))?.len();
        if quota == size {
            return Ok(());
        }
        if quota > size {
            match grow_online(user, image, dir, quota).await {
                Ok(()) => return Ok(()),
                Err(e) => {
                    tracing::debug!(user, error = %e, "cannot grow a home online; growing it unmounted");
                    set_len(user, image, size)?;
                }
            }
        } else {
            let used = fs_used(user, dir)?;
            // the filesystem's own metadata needs room beyond the files: keep an eighth spare
            if used.saturating_add(quota / 8) > quota {
                return Err(HomeError::BelowUsage { user: user.to_owned(), used, quota });
            }
        }
        if busy {
            return Err(HomeError::Busy { user: user.to_owned() });
        }
        run(user, "umount", &[&s(dir)]).await?;
        let resized = async {
            // 0: clean; 1: it corrected something (both fine to resize)
            crate::run_codes(user, "e2fsck", &["-f", "-p", &s(image)], &[0, 1]).await?;
            if quota > size {
                set_len(user, image, quota)?;
            }
            run(user, "resize2fs", &[&s(image), &format!("{}K", quota / 1024)]).await?;
            set_len(user, image, quota)
        }
        .await;
        self.mount(user, image, dir).await?;
        resized
    }
}

fn set_len(user: &str, image: &Path, len: u64) -> Result<(), HomeError> {
    let f = std::fs::OpenOptions::new().write(true).open(image).map_err(|e| io(user, "opening image", e))?;
    f.set_len(len).map_err(|e| io(user, "resizing image", e))
}

/// Grows the image and the filesystem mounted from it in place.
async fn grow_online(user: &str, image: &Path, dir: &Path, quota: u64) -> Result<(), HomeError> {
    set_len(user, image, quota)?;
    let dev = run(user, "findmnt", &["-n", "-o", "SOURCE", "--mountpoint", &s(dir)]).await?;
    let dev = dev.trim();
    run(user, "losetup", &["-c", dev]).await?;
    run(user, "resize2fs", &[dev]).await?;
    Ok(())
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

#[async_trait]
impl Homes for LoopHomes {
    fn kind(&self) -> &'static str {
        "loop"
    }

    fn path(&self, user: &str) -> PathBuf {
        self.root.join(user)
    }

    async fn ensure(&self, user: &str, uid: u32, quota: Option<u64>, busy: bool) -> Result<PathBuf, HomeError> {
        if let Some(q) = quota.filter(|q| *q < MIN_LOOP_QUOTA) {
            return Err(HomeError::TooSmall { min: MIN_LOOP_QUOTA, quota: q });
        }
        let _one = self.lock.lock().await;
        let dir = self.path(user);
        let image = self.image(user);
        match (image.exists(), quota) {
            // no quota and none before: a plain directory
            (false, None) => make_dir(user, &dir, uid)?,
            (false, Some(q)) => self.create(user, uid, q, &dir).await?,
            (true, q) => {
                self.mount(user, &image, &dir).await?;
                if let Some(q) = q {
                    self.resize(user, &image, &dir, q, busy).await?;
                }
                make_dir(user, &dir, uid)?;
            }
        }
        Ok(dir)
    }

    async fn usage(&self, user: &str) -> Result<Option<HomeUsage>, HomeError> {
        let _one = self.lock.lock().await;
        let dir = self.path(user);
        let image = self.image(user);
        if !image.exists() {
            // a plain directory (no quota yet): not measured, as with `DirHomes`
            return Ok(None);
        }
        self.mount(user, &image, &dir).await?;
        let quota = std::fs::metadata(&image).map_err(|e| io(user, "reading image", e))?.len();
        Ok(Some(HomeUsage { used: fs_used(user, &dir)?, quota: Some(quota) }))
    }

    async fn release(&self, user: &str) -> Result<Vec<PathBuf>, HomeError> {
        let _one = self.lock.lock().await;
        let dir = self.path(user);
        if is_mount_point(&dir) && run(user, "umount", &[&s(&dir)]).await.is_err() {
            // still held (a container being torn down): detach now, freed when the last user goes
            run(user, "umount", &["-l", &s(&dir)]).await?;
        }
        Ok([dir, self.image(user)].into_iter().filter(|p| p.exists()).collect())
    }
}
