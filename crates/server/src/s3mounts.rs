//! Object-storage datasets mounted on the hub's host: one `rclone mount` (FUSE) per S3 dataset at
//! `<data_dir>/datasets/<name>`, which containers bind-mount like any dataset directory. The server keeps
//! each: mounted at start and on registration, watched and mounted again when rclone dies, unmounted on
//! removal and at shutdown; its state is the dataset's `status`.
//!
//! Why a FUSE mount with rclone's full VFS cache rather than s3fs or a synced copy: a training job reads
//! the same files every epoch, often at random offsets; `--vfs-cache-mode full` keeps what was read as
//! sparse files on the hub's disk (later epochs read local disk, not the network), reads ahead in chunks,
//! serves a file's first bytes before the whole object arrives, and evicts the least recently used past
//! `dataset_cache` — a cap a synced copy (the whole dataset on disk before the job starts) and s3fs (no
//! size-bounded eviction) lack. Credentials reach rclone in its environment (`RCLONE_CONFIG_…`), never on
//! its command line. rclone is started under `setpriv --pdeathsig TERM`, so it unmounts itself when the
//! server dies; a mount left behind anyway is lazily unmounted at the next start.

use gpuhub_core::dataset::S3Source;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::watch;

/// Whether the containers of `engine` run on this host, where the server mounts S3 datasets and sees
/// registered directories: Docker's and LXD's do; Slurm's and Kubernetes' run on other nodes.
pub fn reached_by(engine: crate::config::EngineKind) -> bool {
    matches!(engine, crate::config::EngineKind::Docker | crate::config::EngineKind::Lxd)
}

/// The rclone remote the environment defines.
const REMOTE: &str = "GPUHUB_S3";
/// How long a mount may take to appear.
const MOUNT_WAIT: Duration = Duration::from_secs(30);
/// The longest pause between attempts of a mount that keeps dying.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// A dataset's S3 source with its secret key in plain text, as rclone needs it.
#[derive(Clone)]
pub struct Plain {
    pub source: S3Source,
    pub secret: Option<String>,
}

impl std::fmt::Debug for Plain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plain").field("source", &self.source).finish_non_exhaustive()
    }
}

struct Entry {
    status: Arc<Mutex<String>>,
    restarts: Arc<std::sync::atomic::AtomicU32>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

/// The S3 datasets mounted on this host.
pub struct S3Mounts {
    root: PathBuf,
    cache_max: u64,
    entries: Mutex<HashMap<String, Entry>>,
}

impl std::fmt::Debug for S3Mounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Mounts").field("root", &self.root).finish_non_exhaustive()
    }
}

impl S3Mounts {
    /// Mounts under `<data_dir>/datasets`, each with a read cache of at most `cache_max` bytes.
    pub fn new(data_dir: &Path, cache_max: u64) -> Self {
        Self { root: data_dir.join("datasets"), cache_max, entries: Mutex::default() }
    }

    /// Where dataset `name` is mounted on this host.
    pub fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// The state of dataset `name`'s mount: `mounted`, `mounting` or `down: <why>`; `None`: not kept.
    pub fn status(&self, name: &str) -> Option<String> {
        self.entries.lock().unwrap().get(name).map(|e| e.status.lock().unwrap().clone())
    }

    /// Each kept mount by dataset name: whether it is mounted, and how often it was mounted again after
    /// rclone died (for `/metrics`).
    pub fn health(&self) -> Vec<(String, bool, u32)> {
        let entries = self.entries.lock().unwrap();
        let mut out: Vec<(String, bool, u32)> = entries
            .iter()
            .map(|(name, e)| {
                let up = *e.status.lock().unwrap() == "mounted";
                (name.clone(), up, e.restarts.load(std::sync::atomic::Ordering::Relaxed))
            })
            .collect();
        out.sort();
        out
    }

    /// Checks that `src` answers (lists the prefix), naming rclone's complaint when not.
    pub async fn check(&self, src: &Plain) -> Result<(), String> {
        let mut cmd = rclone(src);
        cmd.args(["lsf", "--max-depth", "1", "--low-level-retries", "1", "--retries", "1", "--contimeout", "10s"]);
        cmd.arg(remote_path(&src.source));
        let run = tokio::time::timeout(Duration::from_secs(60), cmd.output()).await;
        match run {
            Err(_) => Err("the S3 server did not answer within 60s".into()),
            Ok(Err(e)) => Err(format!("cannot run rclone ({e}); install it (apt-get install rclone fuse3)")),
            Ok(Ok(out)) if out.status.success() => Ok(()),
            Ok(Ok(out)) => Err(last_error(&String::from_utf8_lossy(&out.stderr))),
        }
    }

    /// Mounts dataset `name` (again, if it was: a changed registration) and keeps it mounted; waits
    /// for the first mount, whose failure is the error.
    pub async fn mount(&self, name: &str, src: Plain, read_only: bool) -> Result<(), String> {
        self.unmount(name).await;
        let dir = self.path(name);
        let cache = self.root.join(".cache").join(name);
        let status = Arc::new(Mutex::new("mounting".to_owned()));
        let (stop, stop_rx) = watch::channel(false);
        let (first_tx, mut first_rx) = watch::channel(None::<Result<(), String>>);
        let restarts = Arc::default();
        let job = Job {
            dir,
            cache,
            src,
            read_only,
            cache_max: self.cache_max,
            status: status.clone(),
            restarts: Arc::clone(&restarts),
        };
        let task = tokio::spawn(job.keep(stop_rx, first_tx));
        self.entries.lock().unwrap().insert(name.to_owned(), Entry { status, restarts, stop, task });
        let first = first_rx.wait_for(Option::is_some).await.map(|r| r.clone()).ok().flatten();
        first.unwrap_or_else(|| Err("the mount's keeper ended".into()))
    }

    /// Unmounts dataset `name` and stops keeping it (nothing when it was not kept).
    pub async fn unmount(&self, name: &str) {
        let entry = self.entries.lock().unwrap().remove(name);
        if let Some(e) = entry {
            let _ = e.stop.send(true);
            let _ = e.task.await;
        }
    }

    /// Unmounts dataset `name` and removes its cache (the dataset is gone).
    pub async fn remove(&self, name: &str) {
        self.unmount(name).await;
        let _ = std::fs::remove_dir_all(self.root.join(".cache").join(name));
    }

    /// Unmounts every dataset (shutdown); their caches stay for the next start, with any write to a
    /// read-write dataset that rclone had not uploaded yet (it uploads those when it mounts again).
    pub async fn unmount_all(&self) {
        let names: Vec<String> = self.entries.lock().unwrap().keys().cloned().collect();
        for n in names {
            self.unmount(&n).await;
        }
    }

    /// Lazily unmounts what a server that died left mounted under the datasets directory.
    pub async fn sweep(&self) {
        let Ok(dirs) = std::fs::read_dir(&self.root) else { return };
        for d in dirs.flatten() {
            let p = d.path();
            if is_mounted(&p) {
                tracing::warn!(path = %p.display(), "unmounting a dataset mount left by an earlier run");
                lazy_unmount(&p).await;
            }
        }
    }
}

/// One mount's keeper.
struct Job {
    dir: PathBuf,
    cache: PathBuf,
    src: Plain,
    read_only: bool,
    cache_max: u64,
    status: Arc<Mutex<String>>,
    restarts: Arc<std::sync::atomic::AtomicU32>,
}

impl Job {
    fn set(&self, s: impl Into<String>) {
        *self.status.lock().unwrap() = s.into();
    }

    /// Mounts, waits on rclone, mounts again after a pause when it dies; until `stop`.
    async fn keep(self, mut stop: watch::Receiver<bool>, first: watch::Sender<Option<Result<(), String>>>) {
        let mut backoff = Duration::from_secs(1);
        loop {
            let outcome = self.once(&mut stop, &first).await;
            match outcome {
                Ended::Stopped => break,
                Ended::Died(why) => {
                    tracing::error!(dir = %self.dir.display(), %why, "dataset mount down; mounting again");
                    // a mount that served starts the pauses afresh
                    if *self.status.lock().unwrap() == "mounted" {
                        backoff = Duration::from_secs(1);
                    }
                    self.set(format!("down: {why}"));
                    first.send_if_modified(|f| f.is_none().then(|| *f = Some(Err(why.clone()))).is_some());
                }
            }
            let stopped = async {
                let _ = stop.wait_for(|s| *s).await;
            };
            tokio::select! {
                () = stopped => break,
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
            self.restarts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        lazy_unmount(&self.dir).await;
        let _ = std::fs::remove_dir(&self.dir);
    }

    async fn once(&self, stop: &mut watch::Receiver<bool>, first: &watch::Sender<Option<Result<(), String>>>) -> Ended {
        if is_mounted(&self.dir) {
            lazy_unmount(&self.dir).await;
        }
        if let Err(e) = prepare(&self.dir, &self.cache) {
            return Ended::Died(format!("cannot make {}: {e}", self.dir.display()));
        }
        let mut child = match self.spawn() {
            Ok(c) => c,
            Err(e) => return Ended::Died(format!("cannot run rclone ({e}); install rclone and fuse3")),
        };
        let (err_tx, err_rx) = watch::channel(String::new());
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(l)) = lines.next_line().await {
                    if !l.contains("Config file") {
                        tracing::info!(target: "gpuhub::rclone", "{l}");
                        let _ = err_tx.send(l);
                    }
                }
            });
        }
        // mounted once the kernel lists it (rclone has no signal for it short of --daemon)
        let deadline = tokio::time::Instant::now() + MOUNT_WAIT;
        while !is_mounted(&self.dir) {
            if let Ok(Some(code)) = child.try_wait() {
                return Ended::Died(format!("rclone exited ({code}): {}", last_error(&err_rx.borrow())));
            }
            if tokio::time::Instant::now() > deadline || *stop.borrow() {
                terminate(&mut child).await;
                if *stop.borrow() {
                    return Ended::Stopped;
                }
                return Ended::Died(format!("not mounted within {}s", MOUNT_WAIT.as_secs()));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.set("mounted");
        tracing::info!(dir = %self.dir.display(), url = %self.src.source.url, "dataset mounted");
        first.send_if_modified(|f| f.is_none().then(|| *f = Some(Ok(()))).is_some());
        let stopped = async {
            let _ = stop.wait_for(|s| *s).await;
        };
        tokio::select! {
            () = stopped => {
                terminate(&mut child).await;
                Ended::Stopped
            }
            code = child.wait() => {
                let code = code.map(|c| c.to_string()).unwrap_or_else(|e| e.to_string());
                Ended::Died(format!("rclone exited ({code}): {}", last_error(&err_rx.borrow())))
            }
        }
    }

    fn spawn(&self) -> std::io::Result<Child> {
        let mut cmd = Command::new("setpriv");
        cmd.args(["--pdeathsig", "TERM", "--", "rclone"]);
        apply_env(&mut cmd, &self.src);
        cmd.arg("mount").arg(remote_path(&self.src.source)).arg(&self.dir);
        cmd.args(["--allow-other", "--vfs-cache-mode", "full", "--dir-cache-time", "1m", "--log-level", "NOTICE"]);
        cmd.arg("--cache-dir").arg(&self.cache);
        cmd.arg("--vfs-cache-max-size").arg(format!("{}B", self.cache_max));
        // every UID reads; a read-write dataset is writable by every UID too
        if self.read_only {
            cmd.args(["--read-only", "--umask", "0022"]);
        } else {
            cmd.args(["--umask", "0000"]);
        }
        cmd.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null());
        cmd.stderr(std::process::Stdio::piped()).kill_on_drop(true);
        cmd.spawn()
    }
}

enum Ended {
    Stopped,
    Died(String),
}

/// `rclone` with only the environment it needs: the remote's settings (credentials there, not in
/// arguments `ps` shows) and none of the host's AWS variables.
fn rclone(src: &Plain) -> Command {
    let mut cmd = Command::new("rclone");
    apply_env(&mut cmd, src);
    cmd.kill_on_drop(true);
    cmd
}

fn apply_env(cmd: &mut Command, src: &Plain) {
    cmd.env_clear();
    for keep in ["PATH", "HOME", "TZ"] {
        if let Ok(v) = std::env::var(keep) {
            cmd.env(keep, v);
        }
    }
    let var = |k: &str| format!("RCLONE_CONFIG_{REMOTE}_{k}");
    cmd.env(var("TYPE"), "s3").env(var("PROVIDER"), "Other").env(var("ENV_AUTH"), "false");
    cmd.env(var("ENDPOINT"), &src.source.endpoint).env(var("FORCE_PATH_STYLE"), "true");
    if let Some(r) = &src.source.region {
        cmd.env(var("REGION"), r);
    }
    if let (Some(a), Some(s)) = (&src.source.access_key, &src.secret) {
        cmd.env(var("ACCESS_KEY_ID"), a).env(var("SECRET_ACCESS_KEY"), s);
    }
}

fn remote_path(s: &S3Source) -> String {
    let (bucket, prefix) = s.bucket_and_prefix();
    if prefix.is_empty() { format!("{REMOTE}:{bucket}") } else { format!("{REMOTE}:{bucket}/{prefix}") }
}

/// The last line of rclone's complaint that says something.
fn last_error(stderr: &str) -> String {
    let line = stderr.lines().rev().find(|l| !l.trim().is_empty() && !l.contains("Config file")).unwrap_or("");
    // rclone's lines begin with a date and time
    let line = line.splitn(3, ' ').nth(2).filter(|_| line.starts_with("20")).unwrap_or(line);
    if line.is_empty() { "no reason given".into() } else { line.trim().to_owned() }
}

/// The mount point (0000 while nothing is mounted: a job never reads an empty directory as its dataset)
/// and the cache directory (0700).
fn prepare(dir: &Path, cache: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(cache)?;
    if !dir.exists() {
        std::fs::create_dir(dir)?;
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o000))
}

/// Whether `p` is a mount point (the kernel's mount table names it).
fn is_mounted(p: &Path) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else { return false };
    let want = p.display().to_string();
    table.lines().any(|l| l.split(' ').nth(4).is_some_and(|m| unescape(m) == want))
}

/// A mount point as the mount table writes it (`\040` for a space).
fn unescape(m: &str) -> String {
    m.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
}

/// Asks rclone to end (it unmounts on SIGTERM), then kills it after a while.
async fn terminate(child: &mut Child) {
    if let Some(pid) = child.id() {
        let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status().await;
        if tokio::time::timeout(Duration::from_secs(10), child.wait()).await.is_ok() {
            return;
        }
    }
    let _ = child.kill().await;
}

async fn lazy_unmount(p: &Path) {
    if !is_mounted(p) {
        return;
    }
    let done = Command::new("fusermount3").arg("-uz").arg(p).status().await;
    if !done.is_ok_and(|s| s.success()) {
        let _ = Command::new("umount").arg("-l").arg(p).status().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rclone_lines() {
        let err = "2026/11/26 05:53:54 NOTICE: Config file \"/x\" not found - using defaults\n\
                   2026/11/26 05:53:54 Failed to create file system for \"r:b\": AccessDenied\n";
        assert_eq!(last_error(err), "Failed to create file system for \"r:b\": AccessDenied");
        assert_eq!(last_error(""), "no reason given");
        let s = |url: &str| S3Source {
            url: url.into(),
            endpoint: "http://h".into(),
            region: None,
            access_key: None,
            secret_key: None,
        };
        assert_eq!(remote_path(&s("s3://bkt")), "GPUHUB_S3:bkt");
        assert_eq!(remote_path(&s("s3://bkt/a/b/")), "GPUHUB_S3:bkt/a/b");
        assert_eq!(unescape("/a\\040b"), "/a b");
        assert!(is_mounted(Path::new("/proc")) && !is_mounted(Path::new("/no/such/dir")));
    }
}
