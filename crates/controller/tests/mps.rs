//! A share of a GPU in the `mps` mode starts only after its GPU's daemon answers, with the daemon's
//! directories mounted into its member; a daemon that cannot be started keeps it queued, saying why;
//! daemons of GPUs no longer shared are let go. Over a recording fake of the daemons and the kit's
//! controller (the fake engine, a SQLite file store and a manual clock); waits are on the controller's
//! change notices and the fake daemons' record.

use anyhow::Result;
use futures::future::BoxFuture;
use gpuhub_controller::clock::Clock as _;
use gpuhub_controller::mps::{MpsDaemons, MpsEndpoint};
use gpuhub_controller::spec::MPS_PIPE_TARGET;
use gpuhub_core::Bytes;
use gpuhub_core::node::GpuSharing;
use gpuhub_core::workload::{Workload, WorkloadState};
use gpuhub_driver::fake::FakeEngine;
use gpuhub_testkit::Recorder;
use gpuhub_testkit::controller::{Hub, Site, job, n1};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// What the fake daemons were asked, in order, and what the engine had been handed by then.
#[derive(Debug)]
struct FakeDaemons {
    engine: Arc<FakeEngine>,
    /// `ensure GPU-0 (submitted 0)`, `retain GPU-0,GPU-1`.
    calls: Recorder<String>,
    /// The error `ensure` answers; `None`: the daemon answers.
    broken: Mutex<Option<String>>,
}

impl MpsDaemons for FakeDaemons {
    fn ensure<'a>(&'a self, uuid: &'a str) -> BoxFuture<'a, Result<MpsEndpoint, String>> {
        Box::pin(async move {
            let submitted = self.engine.submitted().len();
            self.calls.push(format!("ensure {uuid} (submitted {submitted})"));
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
        self.calls.push(format!("retain {}", names.join(",")));
    }
}

/// A quarter of a GPU with 10 GiB of its memory, for `owner`.
fn share(id: &str, owner: &str, site: &Site) -> Workload {
    let mut w = job(id, owner, 0, site.clock.now());
    w.resources.gpu_milli = 250;
    w.resources.gpu_memory = Some(Bytes(10 << 30));
    w
}

/// A controller over one node with one GPU in the `mps` mode, and the fake daemons it asks.
async fn hub(broken: Option<&str>) -> Result<(Site, Hub, Arc<FakeDaemons>)> {
    let mut node = n1(1);
    node.gpus[0].sharing = Some(GpuSharing::Mps);
    let site = Site::with_node(node).await?;
    let daemons = Arc::new(FakeDaemons {
        engine: site.engine.clone(),
        calls: Recorder::default(),
        broken: Mutex::new(broken.map(str::to_owned)),
    });
    let hub = site.start_with(|s| s.mps = Some(daemons.clone())).await?;
    Ok((site, hub, daemons))
}

#[tokio::test]
async fn the_daemon_answers_before_the_share_is_submitted_with_its_mounts() -> Result<()> {
    let (site, hub, daemons) = hub(None).await?;
    hub.submit(&share("w1", "alice", &site)).await?;
    let w = hub.until("w1", "the share to start", |w| w.run_id.is_some()).await?;
    assert_eq!(w.members[0].gpus, ["GPU-0"]);
    let calls = daemons.calls.all();
    assert!(calls.contains(&"ensure GPU-0 (submitted 0)".to_owned()), "ensured before the submit: {calls:?}");
    let [spec] = hub.engine.submitted().try_into().map_err(|s| anyhow::anyhow!("{s:?}"))?;
    let m = &spec.members[0];
    let mounts: Vec<_> = m.mounts.iter().map(|x| (x.source.as_str(), x.target.as_str())).collect();
    assert_eq!(mounts, [("/run/mps/GPU-0/pipe", MPS_PIPE_TARGET), ("/run/mps/GPU-0/shm", "/dev/shm")]);
    assert_eq!(m.env["CUDA_MPS_PIPE_DIRECTORY"], MPS_PIPE_TARGET);
    assert_eq!(m.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=10240M");
    // while it runs its GPU is kept; once it has ended the GPU is let go
    daemons
        .calls
        .wait_for("a pass after the start", |calls| calls.iter().any(|c| c == "retain GPU-0").then_some(()))
        .await?;
    hub.engine.exit(w.run_id.as_deref().unwrap(), 0);
    hub.until_state("w1", WorkloadState::Succeeded).await?;
    let released =
        |calls: &[String]| calls.iter().rev().take_while(|c| c.starts_with("retain")).any(|c| c == "retain ");
    daemons.calls.wait_for("the GPU let go", |calls| released(calls).then_some(())).await?;
    Ok(())
}

#[tokio::test]
async fn a_daemon_that_does_not_answer_keeps_the_share_queued_saying_why() -> Result<()> {
    let why = "the MPS control program nvidia-cuda-mps-control was not found on PATH";
    let (site, hub, daemons) = hub(Some(why)).await?;
    hub.submit(&share("w2", "alice", &site)).await?;
    let w = hub.until("w2", "the failed ensure", |w| w.message.as_deref().is_some_and(|m| m.contains("MPS"))).await?;
    assert_eq!(w.state(), WorkloadState::Queued);
    let message = w.message.unwrap_or_default();
    assert!(message.contains("only once its daemon answers") && message.contains(why), "{message}");
    assert!(hub.engine.submitted().is_empty(), "nothing ran without its daemon");
    assert!(daemons.calls.all().iter().any(|c| c.starts_with("ensure GPU-0")));
    // once the daemon answers, the next pass starts it
    *daemons.broken.lock().unwrap() = None;
    hub.handle.kick();
    hub.until("w2", "the start", |w| w.run_id.is_some()).await?;
    assert_eq!(hub.engine.submitted().len(), 1);
    Ok(())
}
