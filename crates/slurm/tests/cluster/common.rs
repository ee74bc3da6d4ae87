//! The real dev cluster (`scripts/slurm-dev-cluster.sh`), its test users, and run specs for it.

use futures::TryStreamExt;
use gpuhub_driver::{
    Engine, GpuGrant, Identity, LABEL_INSTANCE, LABEL_OWNER, LABEL_WORKLOAD, MemberRef, MemberState, Mount, RunSpec,
    RunStatus,
};
use gpuhub_slurm::{SlurmConfig, SlurmEngine};
use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The tests share two nodes and four GPUs: one at a time.
static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The cluster's test accounts: gpuhub user → (cluster account, UID).
pub const USERS: [(&str, &str, u32); 2] = [("alice", "gpuhub-t1", 10001), ("bob", "gpuhub-t2", 10002)];

/// The dev cluster's directory.
pub fn dir() -> PathBuf {
    PathBuf::from(std::env::var("GPUHUB_SLURM_DIR").unwrap_or_else(|_| "/var/lib/gpuhub-slurm-dev".to_owned()))
}

/// The engine's settings for the dev cluster.
pub fn config() -> SlurmConfig {
    let d = dir();
    SlurmConfig {
        conf: Some(d.join("slurm.conf")),
        partition: Some("gpu".into()),
        accounts: USERS.iter().map(|(u, a, _)| ((*u).to_owned(), (*a).to_owned())).collect(),
        bundle_dir: d.join("bundles"),
        log_dir: d.join("gpuhub-logs"),
        oci_root: d.join("run/oci"),
        init: Some("/usr/bin/tini-static".into()),
        poll_ms: 300,
        ..SlurmConfig::default()
    }
}

/// Everything a cluster test holds: the lock, and an engine connected to the cluster.
pub struct Cluster {
    pub engine: SlurmEngine,
    /// This test's installation id (its runs' jobs are named after it).
    pub instance: String,
    _lock: tokio::sync::MutexGuard<'static, ()>,
}

/// The cluster, or `None` when `GPUHUB_SLURM_TESTS=skip` (said on stdout). Fails the test when the cluster
/// is not up, saying how to start it.
pub async fn cluster(test: &str) -> Option<Cluster> {
    if std::env::var("GPUHUB_SLURM_TESTS").as_deref() == Ok("skip") {
        println!("skipped {test}: GPUHUB_SLURM_TESTS=skip");
        return None;
    }
    let lock = LOCK.lock().await;
    assert!(
        rustix::process::getuid().is_root(),
        "the Slurm cluster tests run as root (they submit jobs as other users); or set GPUHUB_SLURM_TESTS=skip"
    );
    let conf = dir().join("slurm.conf");
    let ping = std::process::Command::new("scontrol").arg("ping").env("SLURM_CONF", &conf).output();
    let up = ping.as_ref().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("is UP"));
    assert!(
        up,
        "the Slurm dev cluster is not up ({}): start it with `scripts/slurm-dev-cluster.sh start` (as root), \
         or set GPUHUB_SLURM_TESTS=skip to skip these tests",
        conf.display()
    );
    for (_, account, uid) in USERS {
        let exists = std::process::Command::new("id").arg(account).output().is_ok_and(|o| o.status.success());
        if !exists {
            let st = std::process::Command::new("useradd")
                .args(["-u", &uid.to_string(), "-m", "-K", "SUB_UID_COUNT=0", "-K", "SUB_GID_COUNT=0", account])
                .status()
                .unwrap();
            assert!(st.success(), "useradd {account} failed");
        }
        // a clean slate: nothing of an earlier run of the tests left running
        let _ = std::process::Command::new("scancel").args(["-u", account]).env("SLURM_CONF", &conf).status();
    }
    // and no bundle (or job note) left by a test that failed before it cleaned up
    if let Ok(entries) = std::fs::read_dir(config().bundle_dir.join("runs")) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with("gpuhub-test") {
                let _ = std::fs::remove_dir_all(e.path()).or_else(|_| std::fs::remove_file(e.path()));
            }
        }
    }
    let engine = SlurmEngine::connect(config()).await.expect("connect to the dev cluster");
    let instance = format!("test{}{}", std::process::id(), &test[..test.len().min(3)]);
    Some(Cluster { engine, instance, _lock: lock })
}

impl Cluster {
    /// A run of `members` members for `user`, running `script` with `sh -c`, holding `gpus` each.
    pub fn spec(&self, user: &str, workload: &str, members: u32, gpus: GpuGrant, script: &str) -> RunSpec {
        let (_, account, uid) = USERS.iter().find(|(u, _, _)| *u == user).copied().unwrap();
        let home = format!("/home/{user}");
        let mut spec = RunSpec {
            name: format!("gpuhub-{user}-{workload}"),
            image: "gpuhub/busybox:latest".into(),
            command: vec!["sh".into(), "-c".into(), script.into()],
            env: BTreeMap::from([("GPUHUB_WORKLOAD".to_owned(), workload.to_owned())]),
            labels: BTreeMap::from([
                (LABEL_OWNER.to_owned(), user.to_owned()),
                (LABEL_WORKLOAD.to_owned(), workload.to_owned()),
                (LABEL_INSTANCE.to_owned(), self.instance.clone()),
            ]),
            identity: Identity {
                username: user.into(),
                account: account.into(),
                uid,
                gid: uid,
                home: home.clone(),
                groups: Vec::new(),
            },
            working_dir: Some(home.clone()),
            mounts: vec![Mount { source: format!("/home/{account}"), target: home, read_only: false, nfs: None }],
            pids_limit: 256,
            time_limit: Some(Duration::from_secs(600)),
            ..gpuhub_testkit::run_spec(workload, members)
        };
        for m in &mut spec.members {
            (m.node, m.cpu_milli, m.memory_bytes, m.gpus) = (None, 500, 200 << 20, gpus.clone());
        }
        spec
    }

    /// Observes `run` until `done` says so, for at most `limit`.
    pub async fn until(&self, run: &str, limit: Duration, done: impl Fn(&RunStatus) -> bool) -> RunStatus {
        let start = Instant::now();
        loop {
            let s = self.engine.observe(run).await.unwrap_or_else(|e| panic!("observe {run}: {e}"));
            if done(&s) {
                return s;
            }
            assert!(start.elapsed() < limit, "run {run} not there after {limit:?}: {s:#?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until every member of `run` runs.
    pub async fn running(&self, run: &str) -> RunStatus {
        self.until(run, Duration::from_secs(30), |s| s.members.iter().all(|m| m.state == MemberState::Running)).await
    }

    /// Waits until `run` has ended.
    pub async fn ended(&self, run: &str) -> RunStatus {
        self.until(run, Duration::from_secs(40), RunStatus::ended).await
    }

    /// A member's whole log.
    pub async fn log(&self, run: &str, member: u32) -> String {
        let chunks: Vec<bytes::Bytes> =
            self.engine.logs(&MemberRef::new(run, member), false, None).await.unwrap().try_collect().await.unwrap();
        String::from_utf8_lossy(&chunks.concat()).into_owned()
    }

    /// Waits until a member's log contains `text`.
    pub async fn log_contains(&self, run: &str, member: u32, text: &str) -> String {
        wait(Duration::from_secs(30), || async {
            let log = self.log(run, member).await;
            log.contains(text).then_some(log)
        })
        .await
        .unwrap_or_else(|| panic!("member {member} of run {run} never printed {text:?}"))
    }

    /// Cancels and removes runs (at the end of a test).
    pub async fn clean(&self, runs: &[&str]) {
        for r in runs {
            let _ = self.engine.cancel(r, Duration::ZERO).await;
            let _ = self.engine.remove(r).await;
        }
    }
}

/// Polls `f` every 100 ms until it gives something, for at most `limit`.
pub async fn wait<T, F, Fut>(limit: Duration, f: F) -> Option<T>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if start.elapsed() > limit {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
