//! Starting workers: the [`Launcher`] seam. [`ProcessLauncher`] re-executes this binary as
//! `gpuhub gpu-check-worker` under the chosen UID and reads its JSON lines; the tests use
//! [`crate::fake::FakeLauncher`].

use crate::error::SeamError;
use crate::worker::WorkerEvent;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// The hidden subcommand a worker runs as.
pub const WORKER_COMMAND: &str = "gpu-check-worker";

/// Run by `sh -c` in the worker's own mount namespace: binds `$1` over `/dev/shm`, then runs the rest
/// as UID `$2` (when set) with its groups dropped.
const SHM_SCRIPT: &str = r#"shm=$1; uid=$2; shift 2
mount --bind "$shm" /dev/shm || exit 97
if [ -n "$uid" ]; then exec setpriv --reuid="$uid" --regid="$uid" --clear-groups -- "$@"; fi
exec "$@""#;

/// One worker to start.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerSpec {
    /// The UID (and GID) it runs as; `None`: as this process.
    pub uid: Option<u32>,
    /// The GPU it sees as device 0 (`CUDA_VISIBLE_DEVICES`); `None` under MPS, whose clients must not
    /// set it (the daemon's GPU is theirs).
    pub gpu: Option<String>,
    /// Memory to allocate, MiB.
    pub mib: u64,
    /// How long to keep the GPU busy once allocated, seconds.
    pub seconds: f64,
    /// More environment (MPS's pipe directory and client limits).
    pub env: Vec<(String, String)>,
    /// A directory to be the worker's `/dev/shm`, as an MPS daemon's private shared memory is a
    /// container's: the worker then runs in a mount namespace of its own (`unshare`), that directory
    /// bound over `/dev/shm`, and drops to its UID with `setpriv`.
    pub shm: Option<PathBuf>,
}

/// What waiting for a worker's next event gave.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// An event.
    Event(WorkerEvent),
    /// Nothing within the time.
    Timeout,
    /// Its output ended (it exited); with the last of what it wrote on stderr.
    Closed(String),
}

/// A started worker. Dropping it kills it.
pub trait Worker: std::fmt::Debug {
    /// Its PID, as NVML lists it.
    fn pid(&self) -> u32;
    /// Its next event, waiting at most `timeout`.
    fn next(&mut self, timeout: Duration) -> Next;
    /// Kills it (SIGKILL) and reaps it; nothing if it has exited.
    fn kill(&mut self);
}

/// Starts workers.
pub trait Launcher: std::fmt::Debug {
    /// Starts one.
    ///
    /// # Errors
    /// Why it could not be started.
    fn spawn(&self, spec: &WorkerSpec) -> Result<Box<dyn Worker>, SeamError>;
}

/// Runs this binary (its copy in a directory every UID may read, when workers run as another UID) as
/// `gpuhub gpu-check-worker`.
#[derive(Debug)]
pub struct ProcessLauncher {
    exe: PathBuf,
    /// The binary itself, tried where its copy cannot be executed (a `noexec` temporary directory).
    original: PathBuf,
    /// The directory holding the copy, removed on drop.
    copy_dir: Option<PathBuf>,
}

impl ProcessLauncher {
    /// Launches `exe`. When `shared` is set the binary is first copied into a fresh directory under
    /// `std::env::temp_dir()` that every UID may read and execute (the original may sit in a home that
    /// the worker's UID cannot enter); where that fails, or the copy cannot be executed (a `noexec`
    /// /tmp), the original is used.
    pub fn new(exe: PathBuf, shared: bool) -> Self {
        if shared {
            match copy_shared(&exe) {
                Ok((dir, copy)) => return Self { exe: copy, original: exe, copy_dir: Some(dir) },
                Err(e) => eprintln!("gpu-check: running workers from {} ({e})", exe.display()),
            }
        }
        Self { original: exe.clone(), exe, copy_dir: None }
    }

    fn command(exe: &Path, spec: &WorkerSpec) -> Command {
        let mut cmd = match &spec.shm {
            None => {
                let mut cmd = Command::new(exe);
                cmd.args(worker_args(spec));
                if let Some(uid) = spec.uid {
                    cmd.uid(uid).gid(uid);
                }
                cmd
            }
            Some(shm) => {
                // one PID throughout: unshare, sh, setpriv and the worker each exec the next
                let mut cmd = Command::new("unshare");
                cmd.args([
                    "--mount",
                    "--propagation",
                    "private",
                    "--",
                    "/bin/sh",
                    "-c",
                    SHM_SCRIPT,
                    "gpu-check-worker",
                ])
                .arg(shm)
                .arg(spec.uid.map(|u| u.to_string()).unwrap_or_default())
                .arg(exe)
                .args(worker_args(spec));
                cmd
            }
        };
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).current_dir("/");
        // a fresh CUDA environment: no inherited device choice, MPS pipe or MPS limits
        for var in [
            "CUDA_VISIBLE_DEVICES",
            "CUDA_MPS_PIPE_DIRECTORY",
            "CUDA_MPS_LOG_DIRECTORY",
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
        ] {
            cmd.env_remove(var);
        }
        if let Some(gpu) = &spec.gpu {
            cmd.env("CUDA_VISIBLE_DEVICES", gpu);
        }
        cmd.envs(spec.env.iter().map(|(k, v)| (k, v)));
        cmd
    }
}

fn copy_shared(exe: &Path) -> std::io::Result<(PathBuf, PathBuf)> {
    static COPIES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = COPIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("gpuhub-gpu-check-{}-{n}", std::process::id()));
    std::fs::create_dir(&dir)?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
    let copy = dir.join("gpuhub");
    let done =
        std::fs::copy(exe, &copy).and_then(|_| std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)));
    if let Err(e) = done {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(e);
    }
    Ok((dir, copy))
}

impl Drop for ProcessLauncher {
    fn drop(&mut self) {
        if let Some(dir) = &self.copy_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The arguments a worker is started with.
pub fn worker_args(spec: &WorkerSpec) -> Vec<String> {
    vec![WORKER_COMMAND.into(), "--mib".into(), spec.mib.to_string(), "--seconds".into(), spec.seconds.to_string()]
}

impl Launcher for ProcessLauncher {
    fn spawn(&self, spec: &WorkerSpec) -> Result<Box<dyn Worker>, SeamError> {
        let spawned = match Self::command(&self.exe, spec).spawn() {
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied && self.exe != self.original => {
                Self::command(&self.original, spec).spawn().map_err(|source| (self.original.clone(), source))
            }
            other => other.map_err(|source| (self.exe.clone(), source)),
        };
        let mut child = spawned.map_err(|(exe, source)| SeamError::Spawn { exe, source })?;
        let pid = child.id();
        let (tx, events) = channel();
        if let Some(stdout) = child.stdout.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    let event = serde_json::from_str::<WorkerEvent>(&line).map_err(|_| line);
                    if tx.send(event).is_err() {
                        break;
                    }
                }
            });
        }
        let stderr = Arc::new(Mutex::new(String::new()));
        let (stderr_ended, stderr_done) = channel();
        if let Some(mut err) = child.stderr.take() {
            let sink = Arc::clone(&stderr);
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = err.read(&mut buf) {
                    let mut s = sink.lock().unwrap_or_else(PoisonError::into_inner);
                    s.push_str(&String::from_utf8_lossy(&buf[..n]));
                    if s.len() > 8192 {
                        let cut = s.len() - 4096;
                        let cut = (cut..s.len()).find(|i| s.is_char_boundary(*i)).unwrap_or(s.len());
                        s.drain(..cut);
                    }
                }
                let _ = stderr_ended.send(());
            });
        }
        Ok(Box::new(ProcessWorker { child, pid, events, stderr, stderr_done }))
    }
}

/// A worker process.
#[derive(Debug)]
struct ProcessWorker {
    child: Child,
    pid: u32,
    /// Lines from its stdout: events, or lines that were not one.
    events: Receiver<Result<WorkerEvent, String>>,
    /// What it wrote on stderr (the last few KiB).
    stderr: Arc<Mutex<String>>,
    /// Says when its stderr ended.
    stderr_done: Receiver<()>,
}

impl ProcessWorker {
    fn stderr_tail(&self) -> String {
        let s = self.stderr.lock().unwrap_or_else(PoisonError::into_inner);
        let last: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).rev().take(3).collect();
        last.into_iter().rev().collect::<Vec<_>>().join(" / ")
    }
}

impl Worker for ProcessWorker {
    fn pid(&self) -> u32 {
        self.pid
    }

    fn next(&mut self, timeout: Duration) -> Next {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.events.recv_timeout(left) {
                Ok(Ok(event)) => return Next::Event(event),
                // a line that is not an event (a library's chatter): skip it
                Ok(Err(_)) => continue,
                Err(RecvTimeoutError::Timeout) => return Next::Timeout,
                Err(RecvTimeoutError::Disconnected) => {
                    // stdout closed: it exits; reap it and read the rest of its stderr
                    let status = self.child.wait().ok().map(|s| format!("exited: {s}"));
                    let _ = self.stderr_done.recv_timeout(Duration::from_secs(5));
                    let tail = self.stderr_tail();
                    let said =
                        [status.unwrap_or_default(), tail].into_iter().filter(|s| !s.is_empty()).collect::<Vec<_>>();
                    return Next::Closed(said.join("; "));
                }
            }
        }
    }

    fn kill(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

impl Drop for ProcessWorker {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_arguments() {
        let spec = WorkerSpec { uid: Some(65534), gpu: None, mib: 2048, seconds: 5.0, env: vec![], shm: None };
        assert_eq!(worker_args(&spec), ["gpu-check-worker", "--mib", "2048", "--seconds", "5"]);
    }

    /// A process that prints events and exits stands in for the worker: lines that are events come
    /// through, others are skipped, and the end says how it exited with its stderr.
    #[test]
    fn a_process_worker_reads_events_then_closes() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("worker.sh");
        std::fs::write(
            &script,
            "#!/bin/sh\necho 'chatter'\necho '{\"event\":\"allocated\",\"bytes\":5}'\necho 'oops' >&2\nexit 3\n",
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let launcher = ProcessLauncher::new(script, false);
        let spec = WorkerSpec { uid: None, gpu: Some("GPU-1".into()), mib: 1, seconds: 0.0, env: vec![], shm: None };
        let mut w = launcher.spawn(&spec).unwrap();
        assert!(w.pid() > 0);
        assert_eq!(w.next(Duration::from_secs(20)), Next::Event(WorkerEvent::Allocated { bytes: 5 }));
        match w.next(Duration::from_secs(20)) {
            Next::Closed(said) => assert!(said.contains("exit status: 3") && said.contains("oops"), "{said}"),
            other => panic!("expected the end, got {other:?}"),
        }
    }

    #[test]
    fn a_copy_that_cannot_run_falls_back_to_the_original() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("worker.sh");
        std::fs::write(&script, "#!/bin/sh\necho '{\"event\":\"allocated\",\"bytes\":7}'\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let launcher = ProcessLauncher::new(script, true);
        // as on a noexec /tmp
        std::fs::set_permissions(&launcher.exe, std::fs::Permissions::from_mode(0o644)).unwrap();
        let spec = WorkerSpec { uid: None, gpu: None, mib: 1, seconds: 0.0, env: vec![], shm: None };
        let mut w = launcher.spawn(&spec).unwrap();
        assert_eq!(w.next(Duration::from_secs(20)), Next::Event(WorkerEvent::Allocated { bytes: 7 }));
    }

    /// As root (CI, this dev machine), a worker runs as the UID asked for, from a copy it can reach
    /// (the original sits in a 0700 directory), with its GPU and without inherited MPS settings.
    #[test]
    fn a_worker_runs_as_the_uid_asked_for() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("not root: a worker cannot be started as another uid");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let script = dir.path().join("gpuhub");
        std::fs::write(
            &script,
            "#!/bin/sh\necho \"{\\\"event\\\":\\\"failed\\\",\\\"stage\\\":\\\"$(id -u):$(id -g):$(id -G)\\\",\\\"error\\\":\\\"$CUDA_VISIBLE_DEVICES;${CUDA_MPS_PIPE_DIRECTORY:-none};$1\\\"}\"\n",
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let launcher = ProcessLauncher::new(script, true);
        let spec =
            WorkerSpec { uid: Some(65534), gpu: Some("GPU-9".into()), mib: 1, seconds: 0.0, env: vec![], shm: None };
        let mut w = launcher.spawn(&spec).unwrap();
        assert_eq!(
            w.next(Duration::from_secs(20)),
            Next::Event(WorkerEvent::Failed {
                stage: "65534:65534:65534".into(),
                error: "GPU-9;none;gpu-check-worker".into()
            })
        );
    }

    /// As root, a worker given a shared-memory directory has it as its `/dev/shm` (as an MPS client in a
    /// container has its daemon's), runs as its UID, and keeps the PID it was started with (NVML lists
    /// that one).
    #[test]
    fn a_worker_with_the_daemons_shm_sees_it_as_dev_shm() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("not root: no mount namespace for a worker");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let shm = dir.path().join("shm");
        std::fs::create_dir(&shm).unwrap();
        std::fs::write(shm.join("marker-of-the-daemon"), "").unwrap();
        let script = dir.path().join("gpuhub");
        std::fs::write(
            &script,
            "#!/bin/sh\necho \"{\\\"event\\\":\\\"failed\\\",\\\"stage\\\":\\\"$(id -u):$(id -G):$$:$1\\\",\\\"error\\\":\\\"$(ls /dev/shm)\\\"}\"\n",
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let launcher = ProcessLauncher::new(script, false);
        let spec = WorkerSpec { uid: Some(65534), gpu: None, mib: 1, seconds: 0.0, env: vec![], shm: Some(shm) };
        let mut w = launcher.spawn(&spec).unwrap();
        let pid = w.pid();
        assert_eq!(
            w.next(Duration::from_secs(20)),
            Next::Event(WorkerEvent::Failed {
                stage: format!("65534:65534:{pid}:gpu-check-worker"),
                error: "marker-of-the-daemon".into()
            })
        );
        assert!(!std::fs::read_dir("/dev/shm").unwrap().any(|e| e.unwrap().file_name() == "marker-of-the-daemon"));
    }

    #[test]
    fn a_silent_worker_times_out_and_is_killed() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("worker.sh");
        std::fs::write(&script, "#!/bin/sh\nexec sleep 600\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let launcher = ProcessLauncher::new(script, false);
        let spec = WorkerSpec { uid: None, gpu: None, mib: 1, seconds: 0.0, env: vec![], shm: None };
        let mut w = launcher.spawn(&spec).unwrap();
        let pid = w.pid();
        assert_eq!(w.next(Duration::from_millis(200)), Next::Timeout);
        w.kill();
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "killed and reaped");
    }

    #[test]
    fn a_shared_copy_is_readable_by_all_and_removed_with_the_launcher() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("gpuhub");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        let launcher = ProcessLauncher::new(exe, true);
        let copy_dir = launcher.copy_dir.clone().expect("copied");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(&copy_dir), mode(&launcher.exe)), (0o755, 0o755));
        drop(launcher);
        assert!(!copy_dir.exists());
    }
}
