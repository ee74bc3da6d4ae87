//! Shared helpers: the engine on this machine's LXD daemon (or the test's failure naming why not), specs,
//! cleanup and bounded waits.

use gpuhub_core::node::NodeCapacity;
use gpuhub_core::{Bytes, CpuMilli};
use gpuhub_driver::{
    Engine, GpuGrant, Identity, LABEL_INSTANCE, LABEL_OWNER, LABEL_WORKLOAD, MemberRef, MemberSpec, MemberState,
    RunSpec,
};
use gpuhub_lxd::{LxdConfig, LxdEngine};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The test image, built by the repository's script when missing.
pub const IMAGE: &str = gpuhub_testkit::docker::BUSYBOX;
/// The safety net on every wait: far above what any of these needs.
pub const PATIENCE: Duration = Duration::from_secs(120);
/// The user members run as.
pub const UID: u32 = 10000;
pub const GID: u32 = 10001;

/// Whether the tests are to be skipped (`GPUHUB_LXD_TESTS=skip`), said once per test.
pub fn skipped() -> bool {
    let skip = std::env::var("GPUHUB_LXD_TESTS").is_ok_and(|v| v == "skip");
    if skip {
        eprintln!("skipped: GPUHUB_LXD_TESTS=skip");
    }
    skip
}

/// The engine on this machine's LXD daemon with its run directories under `state`, and the test image
/// in the Docker daemon. Fails naming what is missing: the daemon is part of the test setup
/// (scripts/setup-debian.sh starts it).
pub async fn engine(state: &std::path::Path) -> LxdEngine {
    let node = NodeCapacity::uniform("lxd-test", CpuMilli(2000), Bytes(4 << 30), 0, "none", Bytes(0), "GPU-");
    engine_on(state, node).await
}

/// [`engine`] on a host offering `node` (its GPUs).
pub async fn engine_on(state: &std::path::Path, node: NodeCapacity) -> LxdEngine {
    gpuhub_testkit::docker::ensure_busybox();
    let config = LxdConfig { state_dir: state.to_owned(), poll_ms: 200, ..Default::default() };
    match LxdEngine::connect(config, node).await {
        Ok(e) => e,
        Err(e) => panic!(
            "no LXD daemon to test against: {e}\n(scripts/setup-debian.sh installs and starts one; \
             GPUHUB_LXD_TESTS=skip skips these tests)"
        ),
    }
}

/// A name no other test (or earlier run) uses.
pub fn unique(what: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("gpuhub-test-{what}-{}-{nanos:x}", std::process::id())
}

/// A one-member run of `image` running `script` with `sh -c` as UID:GID, with `home` (a host directory)
/// mounted at /home/tester.
pub fn spec(name: &str, image: &str, script: &str, home: Option<&std::path::Path>) -> RunSpec {
    let mounts = home
        .map(|h| gpuhub_driver::Mount {
            source: h.display().to_string(),
            target: "/home/tester".into(),
            read_only: false,
            nfs: None,
        })
        .into_iter()
        .collect();
    RunSpec {
        image: image.to_owned(),
        command: vec!["sh".into(), "-c".into(), script.into()],
        env: BTreeMap::from([("GREETING".to_owned(), "hello from lxd".to_owned())]),
        labels: BTreeMap::from([
            (LABEL_OWNER.to_owned(), "tester".to_owned()),
            (LABEL_WORKLOAD.to_owned(), name.to_owned()),
            (LABEL_INSTANCE.to_owned(), "lxd-tests".to_owned()),
        ]),
        identity: Identity {
            username: "tester".into(),
            account: "tester".into(),
            uid: UID,
            gid: GID,
            home: "/home/tester".into(),
            groups: vec![],
        },
        working_dir: home.map(|_| "/home/tester".to_owned()),
        mounts,
        members: vec![MemberSpec {
            index: 0,
            hostname: name.to_owned(),
            node: None,
            cpu_milli: 500,
            memory_bytes: 128 << 20,
            gpus: GpuGrant::None,
            env: BTreeMap::new(),
            mounts: vec![],
        }],
        pids_limit: 64,
        ..gpuhub_testkit::run_spec(name, 0)
    }
}

/// A directory owned by UID:GID (a home).
pub fn home(parent: &std::path::Path) -> std::path::PathBuf {
    let dir = parent.join("home");
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(UID), Some(GID)).unwrap();
    dir
}

/// Removes the runs a test made, even when it fails.
#[derive(Debug)]
pub struct Cleanup {
    pub engine: LxdEngine,
    pub runs: Vec<String>,
    pub images: Vec<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let engine = self.engine.clone();
        let runs = std::mem::take(&mut self.runs);
        let images = std::mem::take(&mut self.images);
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                for r in runs {
                    let _ = engine.remove(&r).await;
                }
                for i in images {
                    let _ = engine.remove_image(&i).await;
                }
            });
        })
        .join();
    }
}

/// Waits until member 0 of `run` is in a state `done` accepts; the state.
pub async fn until_state(engine: &LxdEngine, run: &str, done: impl Fn(MemberState) -> bool) -> MemberState {
    let start = Instant::now();
    loop {
        let st = engine.observe(run).await.unwrap();
        let state = st.members[0].state;
        if done(state) {
            return state;
        }
        assert!(start.elapsed() < PATIENCE, "run {run} still {state:?} after {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Member 0's whole output.
pub async fn output(engine: &LxdEngine, run: &str) -> String {
    use futures::StreamExt;
    let mut s = engine.logs(&MemberRef::new(run, 0), false, None).await.unwrap();
    let mut out = Vec::new();
    while let Some(chunk) = s.next().await {
        out.extend_from_slice(&chunk.unwrap());
    }
    String::from_utf8_lossy(&out).into_owned()
}
