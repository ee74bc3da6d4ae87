//! What people ask of the controller (through the service layer): stop, start again, delete; and the
//! end of a run's cancel, which finishes a stop.

use crate::{Command, ControlError, Controller, Reply};
use gpuhub_core::lifecycle::Event;
use gpuhub_core::stop::StopReason;
use gpuhub_core::workload::{Workload, WorkloadState};
use gpuhub_driver::{EngineError, MemberState};
use std::time::Duration;

impl Controller {
    pub(crate) async fn command(&mut self, cmd: Command) {
        match cmd {
            Command::Stop { id, reason, reply } => self.stop(id, reason, reply).await,
            Command::Start { id, reply } => {
                let _ = reply.send(self.start(&id).await);
            }
            Command::Delete { id, reply } => {
                let _ = reply.send(self.delete(&id).await);
            }
            Command::Edit { id, edit, by, reply } => {
                let _ = reply.send(self.edit(&id, &edit, &by).await);
            }
            Command::Stopped { id, result } => self.stopped(id, result).await,
            Command::Pulled { id, result } => self.pulled(id, result).await,
            Command::Update { id, terms, reply } => {
                let _ = reply.send(self.update(&id, terms).await);
            }
            Command::RolloutEnded { id, run, outcome } => self.rollout_ended(id, run, outcome).await,
        }
    }

    async fn stop(&mut self, id: String, reason: StopReason, reply: Reply<Workload>) {
        let mut w = match self.store.get_workload_by_id(&id).await {
            Ok(w) => w,
            Err(e) => return drop(reply.send(Err(e.into()))),
        };
        let live = w.has_live_run().then(|| w.run_id.clone()).flatten();
        if let Err(e) = w.apply(Event::StopRequested { reason }, self.clock.now()) {
            return drop(reply.send(Err(e.into())));
        }
        // an update under way ends with the service: its new run is stopped
        if let Err(e) = self.end_rollout_if_left(&mut w).await {
            return drop(reply.send(Err(e)));
        }
        if let Err(e) = self.save(&w).await {
            return drop(reply.send(Err(e.into())));
        }
        match live {
            Some(run) => self.begin_stop(id, &run, self.settings.stop_grace, Some(reply)),
            None => drop(reply.send(Ok(w))),
        }
    }

    /// Cancels a run in the background (SIGTERM, SIGKILL after `grace`); [`Command::Stopped`] records
    /// the outcome. `reply`, when given, is answered then.
    pub(crate) fn begin_stop(&mut self, id: String, run: &str, grace: Duration, reply: Option<Reply<Workload>>) {
        let first = !self.stopping.contains_key(&id);
        let waiting = self.stopping.entry(id.clone()).or_default();
        waiting.extend(reply);
        if first {
            let (engine, tx, run) = (self.engine.clone(), self.tx.clone(), run.to_owned());
            tokio::spawn(async move {
                let result = engine.cancel(&run, grace).await;
                let _ = tx.send(Command::Stopped { id, result }).await;
            });
        }
    }

    /// A cancel ended: the stopped run's outcome is recorded — for a stop with a reason, by that
    /// reason; for a gang whose member failed, by the members' exit codes.
    async fn stopped(&mut self, id: String, result: Result<(), EngineError>) {
        let waiting = self.stopping.remove(&id).unwrap_or_default();
        let outcome = async {
            let mut w = self.store.get_workload_by_id(&id).await?;
            match result {
                Ok(()) | Err(EngineError::NotFound(_)) => {}
                Err(e) => return Err(ControlError::from(e)),
            }
            if w.has_live_run() {
                self.record_stopped(&mut w).await?;
            }
            Ok(w)
        }
        .await;
        for reply in waiting {
            let _ = reply.send(match &outcome {
                Ok(w) => Ok(w.clone()),
                Err(e) => Err(ControlError::Conflict(e.to_string())),
            });
        }
    }

    async fn record_stopped(&mut self, w: &mut Workload) -> Result<(), ControlError> {
        let now = self.clock.now();
        let run = w.run_id.clone().unwrap_or_default();
        let seen = self.engine.observe(&run).await.ok();
        let code_of = |i: u32| {
            seen.as_ref()?.members.iter().find(|m| m.index == i).and_then(|m| match m.state {
                MemberState::Exited(c) => Some(c),
                _ => None,
            })
        };
        if w.interruption.is_some() {
            w.apply(Event::RunStopped { code: code_of(0) }, now)?;
        } else {
            // the rest of a gang whose member failed: each member's own code, killed ones as killed
            for i in 0..w.size.max(1) {
                if w.state().is_terminal() {
                    break;
                }
                w.apply(Event::MemberExited { index: i, code: code_of(i).unwrap_or(137) }, now)?;
            }
        }
        self.save(w).await?;
        self.end_rollout_if_left(w).await?;
        if w.state().is_terminal() || w.state() == WorkloadState::Queued {
            self.archive_logs(w);
        }
        Ok(())
    }

    async fn start(&mut self, id: &str) -> Result<Workload, ControlError> {
        let mut w = self.store.get_workload_by_id(id).await?;
        let before = w.state();
        w.apply(Event::Requeue, self.clock.now())?;
        if !self.store.update_workload_if(&w, before).await? {
            return Err(ControlError::Conflict("workload changed meanwhile; try again".into()));
        }
        self.changed(&w.id);
        Ok(w)
    }

    async fn delete(&mut self, id: &str) -> Result<(), ControlError> {
        let w = self.store.get_workload_by_id(id).await?;
        let rollout = w.service.as_ref().and_then(|s| s.rollout.as_ref()).and_then(|r| r.run.clone());
        if let Some(task) = self.rollouts.remove(id) {
            task.abort();
        }
        for run in w.run_id.iter().chain(rollout.iter()) {
            match self.engine.remove(run).await {
                Ok(()) | Err(EngineError::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.store.delete_workload(id, self.clock.now()).await?;
        crate::archive::remove_logs(&self.settings.data_dir, &w);
        self.engine_pending.remove(id);
        self.changed(id);
        Ok(())
    }
}
