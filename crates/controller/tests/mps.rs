//! A share of a GPU in the `mps` mode starts only after its GPU's daemon answers, with the daemon's
//! directories mounted into its member; a daemon that cannot be started keeps it queued, saying why;
//! daemons of GPUs no longer shared are let go. Over a recording fake of the daemons, the fake engine
//! and an in-memory store.

use anyhow::{Context, Result};
use chrono::Utc;
use futures::future::BoxFuture;
use gpuhub_controller::clock::SystemClock;
use gpuhub_controller::mps::{MpsDaemons, MpsEndpoint};
use gpuhub_controller::spec::MPS_PIPE_TARGET;
use gpuhub_controller::{Controller, Inventory, Settings};
use gpuhub_core::node::{GpuSharing, NodeCapacity};
use gpuhub_core::user::Role;
use gpuhub_core::workload::{Resources, Workload, WorkloadKind, WorkloadState};
use gpuhub_core::{Bytes, CpuMilli};
use gpuhub_driver::fake::FakeEngine;
use gpuhub_store::Store;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the fake daemons were asked, in order, and what the engine had been handed by then.
#[derive(Debug)]
struct FakeDaemons {
    engine: Arc<FakeEngine>,
    /// `ensure GPU-0 (submitted 0)`, `retain GPU-0,GPU-1`.
    calls: Mutex<Vec<String>>,
    /// The error `ensure` answers; `None`: the daemon answers.
    broken: Mutex<Option<String>>,
}

impl FakeDaemons {
    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

impl MpsDaemons for FakeDaemons {
    fn ensure<'a>(&'a self, uuid: &'a str) -> BoxFuture<'a, Result<MpsEndpoint, String>> {
        Box::pin(async move {
            let submitted = self.engine.submitted().len();
            self.calls.lock().unwrap().push(format!("ensure {uuid} (submitted {submitted})"));
            match self.broken.lock().unwrap().clone() {
                Some(why) => Err(why),
                None => Ok(MpsEndpoint {
                    pipe_dir: PathBuf::from(format!("/run/mps/{uuid}/pipe")),
                    shm_dir: PathBuf::from(format!("/run/mps/{uuid}/shm")),
                }),
            }
        })
    }

    fn retain(&self, wanted: &BTreeSet<String>) {
        let names: Vec<&str> = wanted.iter().map(String::as_str).collect();
        self.calls.lock().unwrap().push(format!("retain {}", names.join(",")));
    }
}

fn share(id: &str, owner: &str) -> Workload {
    let mut w = Workload::new(id, owner, id, WorkloadKind::Job, "busybox:latest", Utc::now());
    w.command = vec!["true".into()];
    w.resources = Resources {
        cpu_milli: CpuMilli(1000),
        memory: Bytes(1 << 30),
        gpus: 0,
        gpu_milli: 250,
        gpu_memory: Some(Bytes(10 << 30)),
    };
    w
}

struct Hub {
    store: Store,
    engine: Arc<FakeEngine>,
    daemons: Arc<FakeDaemons>,
    handle: gpuhub_controller::ControllerHandle,
    _stop: tokio::sync::oneshot::Sender<()>,
    _dir: tempfile::TempDir,
}

/// A controller over one node with one GPU in the `mps` mode, and the fake daemons.
async fn hub(broken: Option<&str>) -> Result<Hub> {
    let dir = tempfile::tempdir()?;
    let store = Store::open("sqlite::memory:").await?;
    store.create_user("alice", "x", Role::User, Utc::now()).await?;
    let mut node = NodeCapacity::uniform("n1", CpuMilli(8000), Bytes(16 << 30), 1, "H200", Bytes(141 << 30), "GPU-");
    node.gpus[0].sharing = Some(GpuSharing::Mps);
    let engine = Arc::new(FakeEngine::new().with_nodes(vec![node]));
    let daemons = Arc::new(FakeDaemons {
        engine: engine.clone(),
        calls: Mutex::default(),
        broken: Mutex::new(broken.map(str::to_owned)),
    });
    let settings = Settings {
        data_dir: dir.path().to_owned(),
        homes_dir: dir.path().join("homes"),
        homes: Arc::new(gpuhub_homes::DirHomes::new(dir.path().join("homes"))),
        mps: Some(daemons.clone()),
        ..Settings::default()
    };
    let (controller, handle) = Controller::new(
        store.clone(),
        engine.clone(),
        Arc::new(settings),
        "instance-0123456789".into(),
        Arc::new(SystemClock),
        Inventory::default(),
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(controller.run(async move {
        let _ = stopped.await;
    }));
    Ok(Hub { store, engine, daemons, handle, _stop: stop, _dir: dir })
}

impl Hub {
    /// Waits (on the controller's change notices) until `id` satisfies `done`; gives up after a minute.
    async fn until(&self, id: &str, what: &str, done: impl Fn(&Workload) -> bool) -> Result<Workload> {
        let mut changes = self.handle.changes();
        let wait = async {
            loop {
                let w = self.store.get_workload_by_id(id).await?;
                if done(&w) {
                    return Ok::<_, anyhow::Error>(w);
                }
                self.handle.kick();
                let _ = tokio::time::timeout(Duration::from_millis(200), changes.recv()).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(60), wait).await.with_context(|| format!("waiting for {what}"))?
    }
}

#[tokio::test]
async fn the_daemon_answers_before_the_share_is_submitted_with_its_mounts() -> Result<()> {
    let hub = hub(None).await?;
    hub.store.insert_workload(&share("w1", "alice")).await?;
    hub.handle.kick();
    let w = hub.until("w1", "the share to start", |w| w.run_id.is_some()).await?;
    assert_eq!(w.members[0].gpus, ["GPU-0"]);
    let calls = hub.daemons.calls();
    assert!(calls.contains(&"ensure GPU-0 (submitted 0)".to_owned()), "ensured before the submit: {calls:?}");
    let [spec] = hub.engine.submitted().try_into().map_err(|s| anyhow::anyhow!("{s:?}"))?;
    let m = &spec.members[0];
    let mounts: Vec<_> = m.mounts.iter().map(|x| (x.source.as_str(), x.target.as_str())).collect();
    assert_eq!(mounts, [("/run/mps/GPU-0/pipe", MPS_PIPE_TARGET), ("/run/mps/GPU-0/shm", "/dev/shm")]);
    assert_eq!(m.env["CUDA_MPS_PIPE_DIRECTORY"], MPS_PIPE_TARGET);
    assert_eq!(m.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=10240M");
    // while it runs its GPU is kept; once it has ended the GPU is let go
    let kept = |calls: &[String]| calls.iter().any(|c| c == "retain GPU-0");
    hub.until("w1", "a pass after the start", |_| kept(&hub.daemons.calls())).await?;
    hub.engine.exit(w.run_id.as_deref().unwrap(), 0);
    hub.until("w1", "the end", |w| w.state() == WorkloadState::Succeeded).await?;
    let released =
        |calls: &[String]| calls.iter().rev().take_while(|c| c.starts_with("retain")).any(|c| c == "retain ");
    hub.until("w1", "the GPU let go", |_| released(&hub.daemons.calls())).await?;
    Ok(())
}

#[tokio::test]
async fn a_daemon_that_does_not_answer_keeps_the_share_queued_saying_why() -> Result<()> {
    let why = "the MPS control program nvidia-cuda-mps-control was not found on PATH";
    let hub = hub(Some(why)).await?;
    hub.store.insert_workload(&share("w2", "alice")).await?;
    hub.handle.kick();
    let w = hub.until("w2", "the failed ensure", |w| w.message.as_deref().is_some_and(|m| m.contains("MPS"))).await?;
    assert_eq!(w.state(), WorkloadState::Queued);
    let message = w.message.unwrap_or_default();
    assert!(message.contains("only once its daemon answers") && message.contains(why), "{message}");
    assert!(hub.engine.submitted().is_empty(), "nothing ran without its daemon");
    assert!(hub.daemons.calls().iter().any(|c| c.starts_with("ensure GPU-0")));
    // once the daemon answers, the next pass starts it
    *hub.daemons.broken.lock().unwrap() = None;
    hub.until("w2", "the start", |w| w.run_id.is_some()).await?;
    assert_eq!(hub.engine.submitted().len(), 1);
    Ok(())
}
