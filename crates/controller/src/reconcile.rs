//! Bringing the store in line with what the engine has: at start and every `reconcile` interval. A
//! failed look at the engine (unreachable, a brief outage of its controller) changes nothing.

use crate::events::member_events;
use crate::{ControlError, Controller};
use gpuhub_core::lifecycle::Event;
use gpuhub_core::state::Explanation;
use gpuhub_core::workload::{Member, MemberPhase, Workload, WorkloadState};
use gpuhub_driver::{LABEL_INSTANCE, MemberState, PendingInfo, Placement, RunStatus};
use gpuhub_store::{StoreError, WorkloadFilter};
use std::collections::BTreeMap;

/// The store's form of the members the engine reports.
pub(crate) fn members_of(run: &RunStatus) -> Vec<Member> {
    run.members
        .iter()
        .map(|m| Member {
            node: m.node.clone(),
            state: match m.state {
                MemberState::Pending => MemberPhase::Pending,
                MemberState::Running => MemberPhase::Running,
                MemberState::Exited(_) => MemberPhase::Exited,
            },
            gpus: m.gpus.clone(),
            exit_code: match m.state {
                MemberState::Exited(c) => Some(c),
                _ => None,
            },
            engine_id: Some(m.engine_id.clone()),
            ..Member::pending(m.index)
        })
        .collect()
}

/// The explanation of a run waiting in the engine's queue.
pub(crate) fn explanation(p: &PendingInfo) -> Explanation {
    Explanation {
        reason: p.reason.clone(),
        message: p.message.clone(),
        position: p.position.unwrap_or(0),
        estimated_start: p.estimated_start,
    }
}

impl Controller {
    /// Brings the store in line with what the engine has.
    pub async fn reconcile(&mut self) {
        self.refresh_inventory().await;
        if let Err(e) = self.try_reconcile().await {
            tracing::error!(error = %e, "reconciliation failed");
        }
    }

    /// Asks the engine for its nodes; on failure keeps the last ones and records why.
    pub(crate) async fn refresh_inventory(&mut self) {
        match self.engine.inventory().await {
            Ok(nodes) => {
                self.remember_models(&nodes).await;
                self.inventory.set(nodes, self.clock.now());
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the engine's nodes");
                self.inventory.fail(e.to_string());
            }
        }
    }

    /// Writes the model of every GPU the engine names to the store when they changed, so usage by GPU
    /// model survives a GPU leaving the inventory. A failure is logged and tried again next time.
    async fn remember_models(&mut self, nodes: &[gpuhub_driver::EngineNode]) {
        let mut models: Vec<(String, String)> =
            nodes.iter().flat_map(|n| n.capacity.gpus.iter().map(|g| (g.uuid.clone(), g.model.clone()))).collect();
        models.sort();
        if models == self.models_known {
            return;
        }
        match self.store.remember_gpu_models(&models).await {
            Ok(()) => self.models_known = models,
            Err(e) => tracing::warn!(error = %e, "cannot remember the GPUs' models"),
        }
    }

    async fn try_reconcile(&mut self) -> Result<(), ControlError> {
        let runs = self.engine.list_runs().await?;
        self.restarts.answered(self.clock.now());
        let mut by_workload: BTreeMap<String, Vec<RunStatus>> = BTreeMap::new();
        // runs of other installations sharing this engine are none of our business
        for r in runs.into_iter().filter(|r| r.labels.get(LABEL_INSTANCE) == Some(&self.instance)) {
            if let Some(w) = r.workload().map(str::to_owned) {
                by_workload.entry(w).or_default().push(r);
            }
        }
        let states = vec![WorkloadState::Queued, WorkloadState::Starting, WorkloadState::Running];
        let active = self.store.list_workloads(&WorkloadFilter { owner: None, states: Some(states) }).await?;
        self.reconcile_rollouts(&active, &by_workload).await?;
        for w in active.into_iter().filter(|w| w.state().holds_resources() || w.waits_in_engine()) {
            // a stop under way decides, and so does the outcome of a held exit (restart.rs)
            if self.stopping.contains_key(&w.id) || self.restarts.holds(&w.id) {
                continue;
            }
            let found = by_workload.get(&w.id).and_then(|rs| {
                rs.iter().find(|r| Some(&r.id) == w.run_id.as_ref()).or_else(|| {
                    // an intent recorded, its submit made, the crash before its run id was saved
                    (w.run_id.is_none() && w.state() == WorkloadState::Starting).then(|| rs.first()).flatten()
                })
            });
            self.reconcile_one(w, found.cloned()).await?;
        }
        // runs whose workload is gone or has ended
        for (wid, rs) in by_workload {
            match self.store.get_workload_by_id(&wid).await {
                Err(StoreError::NotFound { .. }) => {
                    for r in rs {
                        tracing::info!(run = %r.id, "removing the run of deleted workload {wid}");
                        let _ = self.engine.remove(&r.id).await;
                    }
                }
                Ok(w) if w.state().is_terminal() && !self.stopping.contains_key(&wid) => {
                    for r in
                        rs.iter().filter(|r| r.members.iter().any(|m| m.state != MemberState::Pending) && !r.ended())
                    {
                        tracing::info!(run = %r.id, "stopping the run of ended workload {wid}");
                        let _ = self.engine.cancel(&r.id, self.settings.stop_grace).await;
                    }
                }
                Ok(_) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Each rolling update under way goes on being watched (after a restart of the hub, its watch is
    /// made again while its new run lives), or fails: the service left `running`, or its new run is gone.
    async fn reconcile_rollouts(
        &mut self,
        active: &[Workload],
        runs: &BTreeMap<String, Vec<RunStatus>>,
    ) -> Result<(), ControlError> {
        for w in active {
            let Some(r) = w.service.as_ref().and_then(|s| s.rollout.as_ref()) else { continue };
            if self.rollouts.contains_key(&w.id) || self.stopping.contains_key(&w.id) {
                continue;
            }
            let mut w = w.clone();
            if w.state() != WorkloadState::Running {
                self.end_rollout_if_left(&mut w).await?;
                continue;
            }
            let seen = r.run.as_ref().and_then(|run| runs.get(&w.id)?.iter().find(|s| &s.id == run));
            match seen {
                Some(s) if !s.ended() => self.watch_rollout(&w),
                _ => {
                    // a new run made before a crash recorded it is none of the serving run's: it goes
                    let serving = w.run_id.clone();
                    for other in runs.get(&w.id).into_iter().flatten().filter(|s| Some(&s.id) != serving.as_ref()) {
                        self.retire(other.id.clone(), std::time::Duration::ZERO);
                    }
                    drop(self.fail_rollout(w, "its new run is gone from the engine".into()).await?)
                }
            }
        }
        Ok(())
    }

    async fn reconcile_one(&mut self, mut w: Workload, found: Option<RunStatus>) -> Result<(), ControlError> {
        let orig = w.clone();
        let now = self.clock.now();
        // killed by the engine on its way back from an outage, or ended by the engine itself (a Slurm
        // node that failed): queued again (or failed), never its own end
        if let Some(run) = &found
            && w.has_live_run()
            && w.run_id.as_ref() == Some(&run.id)
        {
            if let Some((reason, code)) = self.ended_by_engine(run) {
                self.killed_by_restart(w, reason, code).await;
                return Ok(());
            }
            if let Some((reason, code)) = self.killed_on_return(run) {
                self.killed_by_restart(w, reason, Some(code)).await;
                return Ok(());
            }
        }
        match found {
            Some(run) => {
                let hub = self.placement == Placement::Hub;
                let cut_short = run.members.len() < run.size as usize
                    || (hub
                        && w.state() == WorkloadState::Starting
                        && run.members.iter().any(|m| m.state == MemberState::Pending));
                if cut_short && w.state() == WorkloadState::Starting {
                    // a submit interrupted part-way: not every member was made (or started); nothing
                    // of it counts, and the workload waits again
                    tracing::info!(workload = %w.id, run = %run.id, "removing a run cut short by a restart");
                    let _ = self.engine.remove(&run.id).await;
                    w.apply(Event::Orphaned, now)?;
                } else {
                    if w.run_id.is_none() {
                        w.apply(
                            Event::Submitted {
                                run: run.id.clone(),
                                members: members_of(&run),
                                ports: Default::default(),
                            },
                            now,
                        )?;
                    }
                    for e in member_events(&run) {
                        if w.has_live_run() {
                            w.apply(e, now)?;
                        }
                    }
                    // restarts the engine made itself (a Kubernetes Deployment's pod)
                    let restarts = run.labels.get(gpuhub_core::service::LABEL_RESTARTS).and_then(|n| n.parse().ok());
                    if let (Some(count), Some(s)) = (restarts, &w.service)
                        && count != s.engine_restarts
                        && w.has_live_run()
                    {
                        w.apply(Event::EngineRestarts { count }, now)?;
                    }
                    match (&run.pending, w.waits_in_engine()) {
                        (Some(p), true) => {
                            let e = explanation(p);
                            if w.message.as_deref() != Some(e.message.as_str()) {
                                w.apply(Event::Waiting { message: e.message.clone() }, now)?;
                            }
                            self.engine_pending.insert(w.id.clone(), e);
                        }
                        _ => {
                            self.engine_pending.remove(&w.id);
                        }
                    }
                }
            }
            None if w.state() == WorkloadState::Starting => w.apply(Event::Orphaned, now)?,
            None => w.apply(Event::Lost { why: "its run disappeared from the engine".into() }, now)?,
        }
        if w != orig {
            self.after_change(&mut w, orig.state()).await?;
        }
        Ok(())
    }
}
