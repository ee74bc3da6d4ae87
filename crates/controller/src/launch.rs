//! Starting a workload's run: record the intent (where gpuhub places), remove an earlier run, submit,
//! and record what the engine says; then start the workspace's apps once it runs.

use crate::mps::{self, MpsEndpoint};
use crate::reconcile::{explanation, members_of};
use crate::spec::{self, SpecContext};
use crate::start_error::StartError;
use crate::{ControlError, Controller, logfile};
use futures::StreamExt;
use gpuhub_core::lifecycle::Event;
use gpuhub_core::workload::{Member, Workload, WorkloadState};
use gpuhub_driver::{EngineError, ExecSpec, MemberRef, RunStatus};
use gpuhub_store::{StoreError, WorkloadFilter};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

impl Controller {
    /// gpuhub placed `w`: record each member's node and GPUs, then submit.
    pub(crate) async fn launch(
        &mut self,
        mut w: Workload,
        placements: Vec<gpuhub_sched::Placement>,
    ) -> Result<(), ControlError> {
        // the earlier run (preempted, killed by an engine restart) goes first, so that two never run at
        // once; an engine that cannot be asked leaves the workload queued, with that run, for a later pass
        if !self.remove_stale(w.stale_run().map(str::to_owned)).await {
            return Ok(());
        }
        let members = placements
            .into_iter()
            .enumerate()
            .map(|(i, p)| Member {
                node: Some(p.node),
                gpus: p.gpus.into_iter().map(|g| g.uuid).collect(),
                ..Member::pending(i as u32)
            })
            .collect();
        w.apply(Event::Placed { members }, self.clock.now())?;
        if !self.store.update_workload_if(&w, WorkloadState::Queued).await? {
            return Ok(()); // stopped or deleted meanwhile
        }
        self.changed(&w.id);
        self.submit_run(w, WorkloadState::Starting).await
    }

    /// The engine places: hand `w` to its queue.
    pub(crate) async fn submit_queued(&mut self, w: Workload) -> Result<(), ControlError> {
        if !self.remove_stale(w.stale_run().map(str::to_owned)).await {
            return Ok(());
        }
        self.submit_run(w, WorkloadState::Queued).await
    }

    /// Removes an earlier run; `false` when the engine cannot be reached (nothing may start then).
    async fn remove_stale(&self, run: Option<String>) -> bool {
        if let Some(old) = run {
            match self.engine.remove(&old).await {
                Ok(()) | Err(EngineError::NotFound(_)) => {}
                Err(e @ EngineError::Unavailable(_)) => {
                    tracing::warn!(error = %e, "cannot remove the earlier run {old}; starting later");
                    return false;
                }
                Err(e) => tracing::warn!(error = %e, "cannot remove the earlier run {old}"),
            }
        }
        true
    }

    /// Submits `w` (now in state `from`) and records the outcome.
    async fn submit_run(&mut self, mut w: Workload, from: WorkloadState) -> Result<(), ControlError> {
        let now = self.clock.now();
        let ports = match self.engine.capabilities().shared_ports {
            true => self.assign_ports(&w).await,
            false => Ok(BTreeMap::new()),
        };
        let (ports, outcome) = match ports {
            Ok(p) => {
                let outcome = self.make_run(&w, &p).await;
                (p, outcome)
            }
            Err(e) => (BTreeMap::new(), Err(StartError::Retry(e.to_string()))),
        };
        let applied = match outcome {
            Ok(run) => {
                if let Some(p) = &run.pending {
                    self.engine_pending.insert(w.id.clone(), explanation(p));
                }
                let e = Event::Submitted { run: run.id.clone(), members: members_of(&run), ports };
                let message = run.pending.as_ref().map(|p| p.message.clone());
                w.apply(e, now).and_then(|()| match message {
                    Some(m) if w.waits_in_engine() => w.apply(Event::Waiting { message: m }, now),
                    _ => Ok(()),
                })
            }
            Err(StartError::Retry(e)) => {
                // nothing ran: it waits in the queue again and starts once the engine answers
                tracing::warn!(workload = %w.id, error = %e, "cannot reach the engine to start workload; queued again");
                w.apply(Event::StartDeferred { why: e }, now)
            }
            Err(StartError::Failed(e)) => {
                tracing::warn!(workload = %w.id, error = %e, "cannot start workload");
                w.apply(Event::StartFailed { why: e }, now)
            }
        };
        applied?;
        // stopped or deleted while the engine was asked: leave what that recorded
        match self.store.get_workload_by_id(&w.id).await {
            Ok(cur) if cur.state() != from => return Ok(()),
            Err(StoreError::NotFound { .. }) => return Ok(()),
            _ => {}
        }
        self.after_change(&mut w, from).await?;
        Ok(())
    }

    pub(crate) async fn make_run(&self, w: &Workload, ports: &BTreeMap<String, u16>) -> Result<RunStatus, StartError> {
        let user = self.store.get_user(&w.owner).await?;
        let data_dir = &self.settings.data_dir;
        // a loop-mounted home changes size only while none of its owner's other work runs
        // one indexed row, not the owner's every run: a user with thousands running made each start
        // read them all (10,000 jobs started at 22 a second in the portal benchmark)
        let busy = self.store.holds_other(&w.owner, &w.id).await?;
        let quota = user.home_quota_or(self.settings.home_quota);
        match self.settings.homes.ensure(&w.owner, user.uid, quota, busy).await {
            Ok(_) => {}
            // the new size waits for a start with nothing else of theirs running; the home works as it is
            Err(gpuhub_homes::HomeError::Busy { .. }) => {
                self.settings.homes.ensure(&w.owner, user.uid, None, busy).await.map_err(home_failed)?;
            }
            Err(e) => return Err(home_failed(e)),
        }
        let share = match (&self.settings.gpu_share_library, w.resources.gpu_milli > 0) {
            (Some(lib), true) => Some((lib.clone(), share_preload(data_dir, lib).map_err(StartError::Failed)?)),
            _ => None,
        };
        let nodes = self.inventory.capacities();
        // an MPS client whose CUDA starts before its daemon answers runs without limits: daemons first
        let mps = self.mps_daemons(w, &nodes).await?;
        let attempt = uuid::Uuid::new_v4().simple().to_string();
        let cx = SpecContext {
            instance: &self.instance,
            uid: user.uid,
            gid: user.gid,
            homes_dir: &self.settings.homes_dir,
            nodes: &nodes,
            pids_limit: self.settings.pids_limit,
            log_max_bytes: self.settings.log_max_bytes,
            disk_bytes: w.disk.map(|b| b.0).or(self.settings.container_disk),
            share_library: share.as_ref().map(|(l, p)| (l.as_path(), p.as_path())),
            app_ports: ports,
            attempt: &attempt[..6],
            mps: &mps,
        };
        Ok(self.engine.submit(&spec::run_spec(w, &cx)).await?)
    }

    /// The answering MPS daemon of each MPS GPU `w` holds a share of. A daemon that does not answer
    /// (or no daemons at all) keeps `w` queued with the reason: started now, it would run unlimited.
    async fn mps_daemons(
        &self,
        w: &Workload,
        nodes: &[gpuhub_core::node::NodeCapacity],
    ) -> Result<BTreeMap<String, MpsEndpoint>, StartError> {
        let gpus = mps::mps_shares(w, nodes);
        let mut out = BTreeMap::new();
        for uuid in gpus {
            let Some(daemons) = &self.settings.mps else {
                return Err(StartError::Retry(format!(
                    "GPU {uuid} shares through MPS, but this hub runs no MPS daemons"
                )));
            };
            match daemons.ensure(&uuid).await {
                Ok(ep) => out.insert(uuid, ep),
                Err(why) => {
                    return Err(StartError::Retry(format!(
                        "a share of an MPS GPU starts only once its daemon answers: {why}"
                    )));
                }
            };
        }
        Ok(out)
    }

    /// Ports for `w`'s apps that no other active run's apps have (engines whose members share their
    /// node's network; two runs meeting on a node must not listen on the same port).
    async fn assign_ports(&self, w: &Workload) -> Result<BTreeMap<String, u16>, ControlError> {
        if w.apps.is_empty() {
            return Ok(BTreeMap::new());
        }
        let filter = WorkloadFilter {
            owner: None,
            states: Some(vec![WorkloadState::Queued, WorkloadState::Starting, WorkloadState::Running]),
        };
        let taken: BTreeSet<u16> = (self.store.list_workloads(&filter).await?.iter())
            .filter(|o| o.id != w.id)
            .flat_map(|o| o.members.iter().flat_map(|m| m.ports.values().copied()).collect::<Vec<_>>())
            .collect();
        let mut free = self.settings.app_ports.clone().filter(|p| !taken.contains(p));
        let mut out = BTreeMap::new();
        for app in &w.apps {
            let port = free.next().ok_or_else(|| {
                ControlError::Conflict(format!(
                    "no free port left for app {} in app_ports {:?}: every one is held by a running workspace",
                    app.name, self.settings.app_ports
                ))
            })?;
            out.insert(app.name.clone(), port);
        }
        Ok(out)
    }

    /// Starts the workload's apps that have a start command, as the owner, in member 0, each writing its
    /// output to `<data>/logs/<id>.<app>.log` (0600, cut at `log_max_bytes`). An app that fails to start
    /// is logged; the workload keeps running.
    pub(crate) async fn start_apps(&self, w: &Workload) {
        let (Some(run), false) = (w.run_id.clone(), w.apps.iter().all(|a| a.command.is_empty())) else { return };
        let uid = match self.store.get_user(&w.owner).await {
            Ok(u) => u.uid,
            Err(e) => return tracing::warn!(workload = %w.id, error = %e, "cannot start apps"),
        };
        let assigned = w.members.first().map(|m| m.ports.clone()).unwrap_or_default();
        for app in w.apps.iter().filter(|a| !a.command.is_empty()) {
            let mut app = app.clone();
            app.port = assigned.get(&app.name).copied().unwrap_or(app.port);
            let home = format!("/home/{}", w.owner);
            let exec = ExecSpec {
                command: app.start_command(&w.owner, &w.name),
                user: format!("{uid}:{uid}"),
                // the app learns where the hub serves it, for frameworks that need their base URL
                env: BTreeMap::from([
                    ("HOME".to_owned(), home.clone()),
                    ("GPUHUB_BASE_URL".to_owned(), app.base_url(&w.owner, &w.name)),
                    ("GPUHUB_PORT".to_owned(), app.port.to_string()),
                ]),
                working_dir: Some(home),
                tty: None,
            };
            match self.engine.exec(&MemberRef::new(&run, 0), &exec).await {
                Ok(handle) => {
                    let path = self.settings.data_dir.join("logs").join(format!("{}.{}.log", w.id, app.name));
                    let cap = self.settings.log_max_bytes;
                    tokio::spawn(async move {
                        let mut out = handle.output;
                        let copy = async {
                            let mut file = logfile::create_private(&path).await?;
                            logfile::copy_capped(&mut out, &mut file, cap).await
                        };
                        if let Err(e) = copy.await {
                            tracing::warn!(error = %e, "cannot write {}", path.display());
                        }
                        // past the cap (or a failed file), keep reading and drop it: the app must not
                        // find its output closed
                        while out.next().await.is_some() {}
                    });
                }
                Err(e) => tracing::warn!(workload = %w.id, app = %app.name, error = %e, "cannot start app"),
            }
        }
    }
}

/// The host file a container mounts as `/etc/ld.so.preload` to load the GPU-sharing library `lib`,
/// written on first use.
fn share_preload(data_dir: &Path, lib: &Path) -> Result<PathBuf, String> {
    if !lib.is_file() {
        return Err(format!("gpu_share_library {} is not a file on this host", lib.display()));
    }
    let path = data_dir.join("gpu-share").join("ld.so.preload");
    let want = format!("{}\n", spec::SHARE_LIBRARY_TARGET);
    if std::fs::read_to_string(&path).ok().as_deref() != Some(want.as_str()) {
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(path.parent().unwrap_or(data_dir))?;
            std::fs::write(&path, &want)
        };
        write().map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(path)
}

fn home_failed(e: gpuhub_homes::HomeError) -> StartError {
    StartError::Failed(format!("home directory: {e}"))
}
