//! Member events from the engine, applied to the workload whose current run they concern.

use crate::Controller;
use gpuhub_core::lifecycle::Event;
use gpuhub_core::workload::{Workload, WorkloadState};
use gpuhub_driver::{EngineEvent, MemberState, MemberStatus, Placement, RunStatus};
use gpuhub_store::StoreError;

/// The lifecycle events that say what the engine reports of `run`'s members: each running or ended
/// member runs (with its node and GPUs), then each ended one exits.
pub(crate) fn member_events(run: &RunStatus) -> Vec<Event> {
    let running = |m: &MemberStatus| Event::MemberRunning {
        index: m.index,
        node: m.node.clone(),
        gpus: Some(m.gpus.clone()).filter(|g| !g.is_empty()),
    };
    let mut out: Vec<Event> = run.members.iter().filter(|m| m.state != MemberState::Pending).map(running).collect();
    out.extend(run.members.iter().filter_map(|m| match m.state {
        MemberState::Exited(code) => Some(Event::MemberExited { index: m.index, code }),
        _ => None,
    }));
    out
}

impl Controller {
    pub(crate) async fn event(&mut self, ev: EngineEvent) {
        let (run, workload) = ev.run();
        if self.stopping.contains_key(workload) {
            return; // the cancel's own completion records the outcome
        }
        let mut w = match self.store.get_workload_by_id(workload).await {
            Ok(w) => w,
            Err(StoreError::NotFound { .. }) => return,
            Err(e) => return tracing::error!(error = %e, "event for {workload}"),
        };
        // a rolling update's new run: its end fails the update (its start is seen by the readiness watch)
        let rollout = w.service.as_ref().and_then(|s| s.rollout.as_ref()).and_then(|r| r.run.as_deref());
        // (an engine's own rollout keeps the serving run: its events are the run's)
        if rollout == Some(run) && w.run_id.as_deref() != Some(run) {
            let why = match &ev {
                EngineEvent::Exited { exit_code, .. } => Some(format!("exited with code {exit_code}")),
                EngineEvent::Removed { .. } => Some("was removed outside gpuhub".to_owned()),
                EngineEvent::Started { .. } => None,
            };
            if let Some(why) = why {
                let why = format!("the new run {why} before it was ready");
                if let Err(e) = self.fail_rollout(w, why).await {
                    tracing::error!(error = %e, "cannot record a failed update");
                }
            }
            return;
        }
        if w.run_id.as_deref() != Some(run) || !w.has_live_run() {
            return; // an earlier run's, or one that ended already
        }
        // an engine that queues says itself when it ended a run (a Slurm node failed): only a fresh look tells
        if matches!(ev, EngineEvent::Exited { .. })
            && self.placement == Placement::Engine
            && !self.stopping.contains_key(&w.id)
            && let Ok(seen) = self.engine.observe(run).await
            && let Some((reason, code)) = self.ended_by_engine(&seen)
        {
            return self.killed_by_restart(w, reason, code).await;
        }
        // a kill gpuhub did not ask for: the engine's restart's, or held to see (restart.rs)
        if let EngineEvent::Exited { member, exit_code, .. } = &ev
            && self.kill_handled(&w, *member, *exit_code).await
        {
            return;
        }
        let before = w.state();
        let now = self.clock.now();
        let applied = match ev {
            EngineEvent::Started { member, .. } if self.placement == Placement::Engine => {
                // the engine placed it: where, and on which GPUs, only a fresh look tells
                match self.engine.observe(run).await {
                    Ok(seen) => member_events(&seen).into_iter().try_for_each(|e| w.apply(e, now)),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot observe run {run}");
                        w.apply(Event::MemberRunning { index: member, node: None, gpus: None }, now)
                    }
                }
            }
            EngineEvent::Started { member, .. } => {
                w.apply(Event::MemberRunning { index: member, node: None, gpus: None }, now)
            }
            EngineEvent::Exited { member, exit_code, .. } => {
                w.apply(Event::MemberExited { index: member, code: exit_code }, now)
            }
            EngineEvent::Removed { member, .. } => {
                w.apply(Event::Lost { why: format!("member {member}'s container was removed outside gpuhub") }, now)
            }
        };
        if let Err(e) = applied {
            return tracing::warn!(workload = %w.id, error = %e, "engine event does not apply");
        }
        if let Err(e) = self.after_change(&mut w, before).await {
            tracing::error!(error = %e, workload = %w.id, "cannot record event");
        }
    }

    /// Saves a workload the engine changed and does what follows from the change: one that began running
    /// starts its apps (before it is saved), a gang whose member failed has the others stopped, a run that
    /// ended is archived.
    pub(crate) async fn after_change(&mut self, w: &mut Workload, before: WorkloadState) -> Result<(), StoreError> {
        if let Err(e) = self.end_rollout_if_left(w).await {
            tracing::error!(workload = %w.id, error = %e, "cannot end an update under way");
        }
        if w.state() == WorkloadState::Running && before != WorkloadState::Running {
            // its apps are up (or starting) by the time anyone sees it running
            self.engine_pending.remove(&w.id);
            self.start_apps(w).await;
        }
        self.save(w).await?;
        if w.failing() {
            if let Some(run) = w.run_id.clone() {
                tracing::info!(workload = %w.id, "a member failed; stopping the others");
                self.begin_stop(w.id.clone(), &run, self.settings.stop_grace, None);
            }
        }
        if w.state().is_terminal() && !before.is_terminal() {
            self.engine_pending.remove(&w.id);
            self.archive_logs(w);
        }
        Ok(())
    }
}
