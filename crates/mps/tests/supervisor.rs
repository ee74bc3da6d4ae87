//! The supervisor against a fake `nvidia-cuda-mps-control` (the kit's `mps::scripted_control`, which the
//! hub's MPS tests use too): a shell script that records how it was run (arguments and environment) to
//! a file, makes the pipe directory's `control` and pid file like the real daemon, answers commands
//! when a daemon runs, and exits on `quit`.

use anyhow::{Context, Result, bail};
use gpuhub_mps::{MpsConfig, MpsHealth, Supervisor};
use gpuhub_testkit::process::eventually;
use gpuhub_testkit::{mps, program};
use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

struct Fixture {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    record: PathBuf,
    program: PathBuf,
}

impl Fixture {
    fn new() -> Result<Self> {
        let tmp = tempfile::tempdir()?;
        // MPS servers run as their clients' users: the kit makes the directory above the root open to
        // them
        let program = mps::scripted_control(tmp.path())?;
        Ok(Self { root: tmp.path().join("mps"), record: mps::record(tmp.path()), _tmp: tmp, program })
    }

    fn config(&self) -> MpsConfig {
        MpsConfig {
            program: self.program.clone(),
            private_shm: false,
            start_timeout: Duration::from_secs(20),
            stop_timeout: Duration::from_secs(5),
            restart_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(100),
            adopted_poll: Duration::from_millis(20),
            ..MpsConfig::new(&self.root)
        }
    }

    fn record(&self) -> String {
        std::fs::read_to_string(&self.record).unwrap_or_default()
    }

    fn daemon_lines(&self) -> Vec<String> {
        self.record().lines().filter(|l| l.starts_with("daemon pid=")).map(str::to_owned).collect()
    }
}

/// Waits (on the supervisor's change counter, not a clock) until `done` holds for its health; gives up
/// after a minute so a broken supervisor fails the test instead of hanging it.
async fn until(sup: &Supervisor, what: &str, done: impl Fn(&[MpsHealth]) -> bool) -> Result<Vec<MpsHealth>> {
    let mut changes = sup.subscribe();
    let wait = async {
        loop {
            let h = sup.health();
            if done(&h) {
                return Ok::<_, anyhow::Error>(h);
            }
            changes.changed().await?;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), wait).await.with_context(|| format!("waiting for {what}"))?
}

fn kill(pid: u32) -> Result<()> {
    let ok = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status()?.success();
    if !ok {
        bail!("cannot kill {pid}");
    }
    Ok(())
}

fn health_of<'a>(h: &'a [MpsHealth], uuid: &str) -> Option<&'a MpsHealth> {
    h.iter().find(|d| d.uuid == uuid)
}

#[tokio::test]
async fn one_daemon_per_gpu_with_its_own_environment() -> Result<()> {
    let f = Fixture::new()?;
    let sup = Supervisor::new(f.config());
    let a = sup.ensure("GPU-a").await?;
    let b = sup.ensure("GPU-b").await?;
    // a second ensure of a running daemon starts nothing
    assert_eq!(sup.ensure("GPU-a").await?, a);
    assert_eq!(a.pipe_dir, f.root.join("GPU-a/pipe"));
    assert_eq!(b.shm_dir, f.root.join("GPU-b/shm"));
    let daemons = f.daemon_lines();
    assert_eq!(daemons.len(), 2, "{}", f.record());
    for (uuid, ep) in [("GPU-a", &a), ("GPU-b", &b)] {
        let want = format!(
            "daemon pid={} args=-f gpu={uuid} pipe={} log={}",
            ep.pid,
            f.root.join(uuid).join("pipe").display(),
            f.root.join(uuid).join("log").display()
        );
        assert!(daemons.contains(&want), "{want} not in {daemons:?}");
    }
    // it answered before ensure returned: a command reached the running daemon
    assert!(f.record().contains("client get_server_list gpu=GPU-a"), "{}", f.record());
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&a.shm_dir), 0o1777);
    assert_eq!(mode(&a.pipe_dir), 0o1777, "users' MPS servers open their log and sockets there");
    let h = sup.health();
    assert_eq!(
        h.iter().map(|d| (d.uuid.as_str(), d.running, d.restarts)).collect::<Vec<_>>(),
        [("GPU-a", true, 0), ("GPU-b", true, 0)]
    );
    assert!(h.iter().all(|d| !d.private_shm && d.note.as_deref().is_some_and(|n| n.contains("/dev/shm"))));
    sup.shutdown().await;
    assert_eq!(f.record().matches("daemon quit").count(), 2, "{}", f.record());
    Ok(())
}

#[tokio::test]
async fn a_killed_daemon_is_started_again() -> Result<()> {
    let f = Fixture::new()?;
    let sup = Supervisor::new(f.config());
    let first = sup.ensure("GPU-k").await?;
    kill(first.pid)?;
    let h = until(&sup, "a restarted daemon", |h| {
        health_of(h, "GPU-k").is_some_and(|d| d.running && d.restarts == 1 && d.pid != Some(first.pid))
    })
    .await?;
    let d = health_of(&h, "GPU-k").unwrap();
    let why = d.last_error.as_deref().unwrap_or_default();
    assert!(why.contains("the daemon") && why.contains("signal: 9"), "{why}");
    // the new one answers and is a new process with the same environment
    let second = sup.ensure("GPU-k").await?;
    assert_eq!(Some(second.pid), d.pid);
    assert_eq!(f.daemon_lines().len(), 2, "{}", f.record());
    sup.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn retain_stops_the_daemons_of_gpus_no_longer_shared() -> Result<()> {
    let f = Fixture::new()?;
    let sup = Supervisor::new(f.config());
    let a = sup.ensure("GPU-a").await?;
    sup.ensure("GPU-b").await?;
    sup.retain(&BTreeSet::from(["GPU-b".to_owned()]));
    assert_eq!(sup.health().iter().map(|d| d.uuid.as_str()).collect::<Vec<_>>(), ["GPU-b"]);
    // a GPU wanted but not yet supervised (gpuhub restarted under running shares) gets its daemon
    sup.retain(&BTreeSet::from(["GPU-b".to_owned(), "GPU-c".to_owned()]));
    until(&sup, "GPU-c's daemon", |h| health_of(h, "GPU-c").is_some_and(|d| d.running)).await?;
    // ensuring GPU-a again waits for the old one to be gone, then starts a new one
    let again = sup.ensure("GPU-a").await?;
    assert_ne!(again.pid, a.pid);
    let record = f.record();
    assert!(record.contains("client quit gpu=GPU-a"), "{record}");
    assert!(record.contains("daemon quit gpu=GPU-a"), "{record}");
    assert!(!record.contains("quit gpu=GPU-b"), "{record}");
    sup.shutdown().await;
    assert!(sup.health().is_empty());
    Ok(())
}

#[tokio::test]
async fn a_missing_program_is_a_clear_error() -> Result<()> {
    let f = Fixture::new()?;
    let missing = f.root.join("nowhere/nvidia-cuda-mps-control");
    let sup = Supervisor::new(MpsConfig { program: missing.clone(), ..f.config() });
    let e = sup.ensure("GPU-a").await.unwrap_err().to_string();
    assert!(e.contains(&format!("the MPS control program {} was not found", missing.display())), "{e}");
    let on_path = Supervisor::new(MpsConfig { program: "gpuhub-test-no-mps-control".into(), ..f.config() });
    let e = on_path.ensure("GPU-a").await.unwrap_err().to_string();
    assert!(e.contains("gpuhub-test-no-mps-control was not found on PATH"), "{e}");
    assert!(sup.ensure("../etc").await.unwrap_err().to_string().contains("is not a GPU uuid"));
    // a GPU it is told to keep shows the same in its health, and is tried again
    sup.retain(&BTreeSet::from(["GPU-a".to_owned()]));
    let h = until(&sup, "the failure in the health", |h| {
        health_of(h, "GPU-a").is_some_and(|d| d.restarts >= 1 && d.last_error.is_some())
    })
    .await?;
    let d = health_of(&h, "GPU-a").unwrap();
    assert!(!d.running && d.pid.is_none(), "{d:?}");
    assert!(d.last_error.as_deref().unwrap().contains(&format!("{} was not found", missing.display())), "{d:?}");
    sup.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn a_root_that_users_cannot_reach_is_refused() -> Result<()> {
    let f = Fixture::new()?;
    // like a root inside the 0700 data directory
    let closed = f.root.parent().unwrap().join("data");
    std::fs::create_dir(&closed)?;
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700))?;
    let sup = Supervisor::new(MpsConfig { dirs: gpuhub_mps::MpsDirs::new(closed.join("mps")), ..f.config() });
    let e = sup.ensure("GPU-a").await.unwrap_err().to_string();
    assert!(e.contains(&format!("{} is not searchable by others", closed.display())), "{e}");
    assert!(f.daemon_lines().is_empty(), "no daemon started: {}", f.record());
    sup.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn a_daemon_that_cannot_start_is_reported_and_tried_again() -> Result<()> {
    let f = Fixture::new()?;
    // a program that exits at once, saying why
    let broken =
        program::script(f.root.parent().unwrap(), "broken-mps-control", "echo 'cannot open the GPU' >&2\nexit 3\n")?;
    let sup = Supervisor::new(MpsConfig { program: broken, ..f.config() });
    let e = sup.ensure("GPU-x").await.unwrap_err().to_string();
    assert!(e.starts_with("the MPS daemon of GPU GPU-x is not running: the daemon exit status: 3"), "{e}");
    assert!(e.contains("cannot open the GPU"), "{e}");
    let h = until(&sup, "a second try", |h| health_of(h, "GPU-x").is_some_and(|d| d.restarts >= 1)).await?;
    let d = health_of(&h, "GPU-x").unwrap();
    assert!(!d.running && d.last_error.as_deref().is_some_and(|w| w.contains("exit status: 3")), "{d:?}");
    sup.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn a_daemon_left_running_is_adopted_not_started_twice() -> Result<()> {
    let f = Fixture::new()?;
    // a daemon an earlier gpuhub started and left running when it went away
    let dirs = gpuhub_mps::MpsDirs::new(&f.root);
    std::fs::create_dir_all(dirs.pipe_dir("GPU-a"))?;
    let mut left =
        std::process::Command::new(&f.program).arg("-f").envs(gpuhub_mps::daemon_env(&dirs, "GPU-a")).spawn()?;
    let control = dirs.pipe_dir("GPU-a").join("control");
    // a file another process makes: nothing signals it
    let listening = || async { Ok(control.exists().then_some(())) };
    eventually("the left daemon to listen", Duration::from_secs(60), Duration::from_millis(10), listening).await?;
    let sup = Supervisor::new(f.config());
    let adopted = sup.ensure("GPU-a").await?;
    assert_eq!(adopted.pid, left.id());
    assert!(sup.health()[0].adopted);
    assert_eq!(f.daemon_lines().len(), 1, "started once: {}", f.record());
    // stopping it through the adopter quits it
    sup.shutdown().await;
    assert!(left.wait()?.success());
    assert!(f.record().contains("daemon quit gpu=GPU-a"), "{}", f.record());
    Ok(())
}

#[tokio::test]
async fn a_detached_supervisor_leaves_its_daemons_for_the_next_to_adopt() -> Result<()> {
    let f = Fixture::new()?;
    let first = Supervisor::new(f.config());
    let ep = first.ensure("GPU-a").await?;
    // gpuhub exits: the daemon goes on serving the work that runs through it
    first.detach().await;
    assert!(first.health().is_empty());
    assert!(!f.record().contains("quit"), "{}", f.record());
    assert!(
        std::fs::read_to_string(f.root.join("GPU-a/pipe/nvidia-cuda-mps-control.pid"))?.trim() == ep.pid.to_string()
    );
    // the next gpuhub finds it answering and takes it over
    let next = Supervisor::new(f.config());
    let adopted = next.ensure("GPU-a").await?;
    assert_eq!(adopted.pid, ep.pid);
    assert!(next.health()[0].adopted);
    assert_eq!(f.daemon_lines().len(), 1, "started once: {}", f.record());
    next.shutdown().await;
    assert!(f.record().contains("daemon quit gpu=GPU-a"), "{}", f.record());
    Ok(())
}

#[tokio::test]
async fn the_gpu_is_exclusive_to_its_mps_server_while_the_daemon_runs() -> Result<()> {
    let f = Fixture::new()?;
    let smi = program::script(
        f.root.parent().unwrap(),
        "nvidia-smi",
        &format!("echo \"nvidia-smi $*\" >> {}\n", f.record.display()),
    )?;
    let sup = Supervisor::new(MpsConfig { exclusive_process: Some(smi), ..f.config() });
    sup.ensure("GPU-x").await?;
    sup.shutdown().await;
    let order: Vec<String> = f
        .record()
        .lines()
        .filter(|l| l.starts_with("nvidia-smi") || l.starts_with("daemon"))
        .map(|l| l.split(" pid=").next().unwrap_or(l).to_owned())
        .collect();
    assert_eq!(
        order,
        [
            "nvidia-smi -i GPU-x -c EXCLUSIVE_PROCESS",
            "daemon",
            "daemon quit gpu=GPU-x",
            "nvidia-smi -i GPU-x -c DEFAULT"
        ]
    );
    Ok(())
}

/// As root, the daemon gets the GPU's own tmpfs as `/dev/shm`, in a namespace of its own: what it writes
/// there appears in `<root>/<uuid>/shm`, not in the host's `/dev/shm`.
#[tokio::test]
async fn as_root_the_daemon_has_the_gpus_tmpfs_as_dev_shm() -> Result<()> {
    if !rustix_is_root() {
        eprintln!("skipped: needs root to mount a tmpfs and unshare the mount namespace");
        return Ok(());
    }
    let f = Fixture::new()?;
    let mark = format!("gpuhub-mps-test-{}", std::process::id());
    let fake = std::fs::read_to_string(&f.program)?.replace("$FAKE_SHM_MARK", &mark);
    let fake = fake.strip_prefix("#!/bin/sh\n").context("a shell script")?;
    let program = program::script(f.root.parent().unwrap(), "marking-mps-control", fake)?;
    let sup = Supervisor::new(MpsConfig { program, private_shm: true, ..f.config() });
    let ep = sup.ensure("GPU-ns").await?;
    assert!(ep.shm_dir.join(&mark).exists(), "the daemon's /dev/shm is the GPU's tmpfs");
    assert!(!Path::new("/dev/shm").join(&mark).exists(), "the host's /dev/shm is untouched");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")?;
    assert!(mounts.contains(&ep.shm_dir.display().to_string()), "a tmpfs is mounted on the shm directory");
    sup.shutdown().await;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")?;
    assert!(!mounts.contains(&ep.shm_dir.display().to_string()), "unmounted once the daemon stopped");
    Ok(())
}

fn rustix_is_root() -> bool {
    std::process::Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}
