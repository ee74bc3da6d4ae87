//! A running service's rolling update: a run of the new terms starts beside the serving one (with a
//! holding of its own, placed by the scheduler beside everything that runs), the service's URL keeps
//! going to the serving run until the new one passes its readiness check, then the workload switches
//! to the new run (`Event::RolloutReady`: its run, members, GPUs and terms) and the old run is stopped
//! after [`crate::Settings::rollout_drain`]. A new run that is not ready by the rollout's deadline (read
//! through the clock), or that ends, fails the update: it is stopped and the serving run goes on with
//! the old terms. Where both runs cannot be held at once, or the engine places itself, the caller
//! updates by stop-then-start instead ([`Update::NotRolled`] says why).

use crate::reconcile::members_of;
use crate::{Command, ControlError, Controller};
use gpuhub_core::lifecycle::Event;
use gpuhub_core::service::{ROLLOUT_DEADLINE, Rollout};
use gpuhub_core::workload::{Member, Workload, WorkloadState};
use gpuhub_driver::{EngineError, Placement};
use gpuhub_store::WorkloadFilter;
use std::collections::BTreeMap;

/// A service's new terms.
#[derive(Debug, Clone)]
pub struct Terms {
    /// The new image.
    pub image: String,
    /// The new command.
    pub command: Vec<String>,
    /// The new environment.
    pub env: BTreeMap<String, String>,
    /// What changes and by whom, for the history (`image a → b, command (by alice)`).
    pub change: String,
}

/// What became of an update asked of the controller.
#[derive(Debug, Clone)]
pub enum Update {
    /// A rolling update is under way (or already failed to start its new run: see the service's
    /// `update`); the workload as it is now.
    Rolling(Box<Workload>),
    /// Not rolled, for this reason: the caller stops the service and starts it with the new terms.
    NotRolled(String),
}

/// The id the scheduler knows a rollout's new run by.
fn rollout_id(w: &Workload) -> String {
    format!("{}#update", w.id)
}

impl Controller {
    /// Begins a rolling update of service `id` to `terms`, or says why it is not rolled.
    pub(crate) async fn update(&mut self, id: &str, terms: Terms) -> Result<Update, ControlError> {
        let mut w = self.store.get_workload_by_id(id).await?;
        if w.service.as_ref().is_some_and(|s| s.rollout.is_some()) {
            return Err(ControlError::Conflict(format!(
                "an update of {} is under way; wait until it ends (its view's service.update says how it goes)",
                w.name
            )));
        }
        if self.placement == Placement::Engine && w.has_live_run() && !self.stopping.contains_key(id) {
            return self.roll_in_engine(w, terms).await;
        }
        if self.placement != Placement::Hub || self.engine.capabilities().shared_ports {
            let why = format!("the {} engine does not run two runs of a service side by side", self.engine.name());
            return Ok(Update::NotRolled(why));
        }
        if w.state() != WorkloadState::Running || !w.has_live_run() || self.stopping.contains_key(id) {
            return Ok(Update::NotRolled("it was not serving".into()));
        }
        let placements = match self.place_beside(&w).await? {
            Ok(p) => p,
            Err(why) => return Ok(Update::NotRolled(format!("both runs cannot be held at once ({why})"))),
        };
        let now = self.clock.now();
        let members = (placements.into_iter().enumerate())
            .map(|(i, p)| Member {
                node: Some(p.node),
                gpus: p.gpus.into_iter().map(|g| g.uuid).collect(),
                ..Member::pending(i as u32)
            })
            .collect();
        let rollout = Rollout {
            image: terms.image,
            command: terms.command,
            env: terms.env,
            change: terms.change,
            run: None,
            members,
            since: now,
            deadline: now + ROLLOUT_DEADLINE,
        };
        w.apply(Event::RolloutBegun { rollout: rollout.clone() }, now)?;
        self.noted(&w, false).await?;
        tracing::info!(workload = %w.id, change = %rollout.change, "rolling update begins");
        let mut next = w.clone();
        (next.image, next.command, next.env, next.members) =
            (rollout.image, rollout.command, rollout.env, rollout.members);
        match self.make_run(&next, &BTreeMap::new()).await {
            Ok(run) => {
                w.apply(Event::RolloutSubmitted { run: run.id.clone(), members: members_of(&run) }, now)?;
                self.save(&w).await?;
                self.watch_rollout(&w);
            }
            Err(e) => {
                let why = format!("the new run could not start: {e}");
                return Ok(Update::Rolling(Box::new(self.fail_rollout(w, why).await?)));
            }
        }
        Ok(Update::Rolling(Box::new(w)))
    }

    /// An engine that places may roll the service's run over to the new terms itself (a Kubernetes
    /// Deployment's rollout: the run stays, the engine starts the new pod beside the old one and
    /// switches once it is ready); one that does not leaves it to stop-then-start. The update is under
    /// way until the engine reports its rollout complete (`Event::RolloutReady`: the new terms are the
    /// workload's) or failed, or the deadline passes (`Event::RolloutFailed` with the engine's reason;
    /// the engine is rolled back to the old terms).
    async fn roll_in_engine(&mut self, mut w: Workload, terms: Terms) -> Result<Update, ControlError> {
        let Some(run) = w.run_id.clone() else { return Ok(Update::NotRolled("it was not serving".into())) };
        let now = self.clock.now();
        let rollout = Rollout {
            image: terms.image,
            command: terms.command,
            env: terms.env,
            change: terms.change,
            run: None,
            members: w.members.clone(),
            since: now,
            deadline: now + ROLLOUT_DEADLINE,
        };
        let mut next = w.clone();
        (next.image, next.command, next.env) = (rollout.image.clone(), rollout.command.clone(), rollout.env.clone());
        if w.clone().apply(Event::RolloutBegun { rollout: rollout.clone() }, now).is_err() {
            return Ok(Update::NotRolled("it was not serving".into()));
        }
        if !self.engine.roll(&run, &self.engine_spec(&next).await?).await? {
            let why = format!("the {} engine does not run two runs of a service side by side", self.engine.name());
            return Ok(Update::NotRolled(why));
        }
        w.apply(Event::RolloutBegun { rollout }, now)?;
        // the engine's rollout keeps the run: its "new run" is the serving one, rolled in place
        w.apply(Event::RolloutSubmitted { run: run.clone(), members: w.members.clone() }, now)?;
        self.noted(&w, false).await?;
        tracing::info!(workload = %w.id, %run, "the engine rolls the service out");
        self.watch_rollout(&w);
        Ok(Update::Rolling(Box::new(w)))
    }

    /// The run spec of `w` (its terms) as an engine that rolls a service itself is given it.
    async fn engine_spec(&self, w: &Workload) -> Result<gpuhub_driver::RunSpec, ControlError> {
        let user = self.store.get_user(&w.owner).await?;
        let nodes = self.inventory.capacities();
        let attempt = uuid::Uuid::new_v4().simple().to_string();
        let ports = w.members.first().map(|m| m.ports.clone()).unwrap_or_default();
        let cx = crate::spec::SpecContext {
            instance: &self.instance,
            uid: user.uid,
            gid: user.gid,
            homes_dir: &self.settings.homes_dir,
            nodes: &nodes,
            pids_limit: self.settings.pids_limit,
            log_max_bytes: self.settings.log_max_bytes,
            disk_bytes: w.disk.map(|b| b.0).or(self.settings.container_disk),
            share_library: None,
            app_ports: &ports,
            attempt: &attempt[..6],
            mps: &BTreeMap::new(),
        };
        Ok(crate::spec::run_spec(w, &cx))
    }

    /// Where a second run of `w` would go beside everything that holds resources now (the scheduler's
    /// placement, preemption off), or the scheduler's reason why it fits nowhere.
    async fn place_beside(&self, w: &Workload) -> Result<Result<Vec<gpuhub_sched::Placement>, String>, ControlError> {
        let filter =
            WorkloadFilter { owner: None, states: Some(vec![WorkloadState::Starting, WorkloadState::Running]) };
        let active = self.store.list_workloads(&filter).await?;
        let nodes = self.inventory.capacities();
        let default_node = nodes.first().map(|n| n.name.clone()).unwrap_or_default();
        let running: Vec<gpuhub_sched::Running> = (active.iter())
            .map(|o| crate::scheduling::running(&default_node, o, self.stopping.contains_key(&o.id)))
            .chain(active.iter().filter_map(|o| crate::scheduling::rollout(&default_node, o)))
            .collect();
        let now = self.clock.now();
        let mut config = self.settings.scheduler.clone();
        config.queues = self.store.list_queues().await?.iter().map(crate::scheduling::queue_spec).collect();
        config.usage = self.usage.clone();
        config.preemption.enabled = false;
        config
            .reservations
            .extend(self.store.list_reservations(now).await?.into_iter().map(crate::scheduling::reservation));
        let pending = gpuhub_sched::Pending { id: rollout_id(w), ..crate::scheduling::pending(w) };
        let d = gpuhub_sched::schedule(
            &crate::scheduling::cluster(&nodes),
            &running,
            std::slice::from_ref(&pending),
            &config,
            now.timestamp_millis(),
        );
        Ok(match d.starts.into_iter().find(|s| s.id == pending.id) {
            Some(s) => Ok(s.placements),
            None => Err(d.pending.first().map_or_else(|| "no node has room".into(), |e| e.message.clone())),
        })
    }

    /// Checks the rollout's new run until it is ready or its deadline passes, in the background;
    /// [`Command::RolloutEnded`] says which.
    pub(crate) fn watch_rollout(&mut self, w: &Workload) {
        let Some(service) = &w.service else { return };
        let Some((run, deadline)) = service.rollout.as_ref().and_then(|r| Some((r.run.clone()?, r.deadline))) else {
            return;
        };
        let (engine, store, clock, tx) = (self.engine.clone(), self.store.clone(), self.clock.clone(), self.tx.clone());
        let (id, owner, check, port) = (w.id.clone(), w.owner.clone(), service.spec.ready_check(), service.spec.port);
        let poll = self.settings.rollout_poll;
        let in_engine = w.run_id.as_ref() == Some(&run);
        let task = tokio::spawn(async move {
            let outcome = if in_engine {
                engine_rollout(&*engine, &*clock, &run, deadline, poll).await
            } else {
                hub_rollout(&*engine, &store, &*clock, (&owner, &check, port), &run, deadline, poll).await
            };
            let _ = tx.send(Command::RolloutEnded { id, run, outcome }).await;
        });
        if let Some(old) = self.rollouts.insert(w.id.clone(), task.abort_handle()) {
            old.abort();
        }
    }

    /// The watch of `id`'s rollout of `run` ended: switch to the new run, or fail the update.
    pub(crate) async fn rollout_ended(&mut self, id: String, run: String, outcome: Result<(), String>) {
        let done = async {
            let w = self.store.get_workload_by_id(&id).await?;
            let current = w.service.as_ref().and_then(|s| s.rollout.as_ref()).and_then(|r| r.run.as_deref());
            if current != Some(run.as_str()) {
                return Ok(()); // an earlier rollout's watch
            }
            self.rollouts.remove(&id);
            match outcome {
                Ok(()) => self.switch(w).await,
                Err(why) => self.fail_rollout(w, why).await.map(drop),
            }
        };
        if let Err(e) = done.await {
            tracing::error!(workload = %id, error = %e, "cannot end a rolling update");
        }
    }

    /// The new run is ready: it serves from now on; the old one is stopped after the drain.
    async fn switch(&mut self, mut w: Workload) -> Result<(), ControlError> {
        let old = w.run_id.clone();
        w.apply(Event::RolloutReady, self.clock.now())?;
        self.noted(&w, true).await?;
        tracing::info!(workload = %w.id, run = ?w.run_id, "rolling update done; the new run serves");
        self.start_apps(&w).await;
        // an engine's own rollout kept the run (its old pod is gone already)
        if let Some(old) = old.filter(|old| w.run_id.as_ref() != Some(old)) {
            self.retire(old, self.settings.rollout_drain);
        }
        Ok(())
    }

    /// The update failed for `why`: its new run (if any) is stopped; the serving run goes on.
    pub(crate) async fn fail_rollout(&mut self, mut w: Workload, why: String) -> Result<Workload, ControlError> {
        let run = w.service.as_ref().and_then(|s| s.rollout.as_ref()).and_then(|r| r.run.clone());
        w.apply(Event::RolloutFailed { why }, self.clock.now())?;
        self.noted(&w, false).await?;
        tracing::info!(workload = %w.id, "rolling update failed; the serving run goes on");
        if let Some(task) = self.rollouts.remove(&w.id) {
            task.abort();
        }
        match run {
            // the engine rolled the serving run itself: it is rolled back to the old terms
            Some(run) if w.run_id.as_ref() == Some(&run) => {
                let back = match self.engine_spec(&w).await {
                    Ok(spec) => self.engine.roll(&run, &spec).await.map_err(ControlError::from),
                    Err(e) => Err(e),
                };
                if let Err(e) = back {
                    tracing::warn!(workload = %w.id, %run, error = %e, "cannot roll the service back to its old terms");
                }
            }
            Some(run) => self.retire(run, std::time::Duration::ZERO),
            None => {}
        }
        Ok(w)
    }

    /// A service that left `running` while an update was under way (stopped, ended, preempted): the
    /// update fails, its new run is stopped.
    pub(crate) async fn end_rollout_if_left(&mut self, w: &mut Workload) -> Result<(), ControlError> {
        let rolling = w.service.as_ref().is_some_and(|s| s.rollout.is_some());
        if rolling && (w.state() != WorkloadState::Running || w.interruption.is_some()) {
            let why = match &w.interruption {
                Some(reason) => format!("the service was stopped during the update ({})", reason.summary()),
                None => "the serving run ended during the update".to_owned(),
            };
            *w = self.fail_rollout(w.clone(), why).await?;
        }
        Ok(())
    }

    /// Stops run `run` after `drain` (requests already sent to it are answered), then removes it.
    pub(crate) fn retire(&self, run: String, drain: std::time::Duration) {
        let (engine, grace) = (self.engine.clone(), self.settings.stop_grace);
        tokio::spawn(async move {
            tokio::time::sleep(drain).await;
            match engine.cancel(&run, grace).await {
                Ok(()) | Err(EngineError::NotFound(_)) => {}
                Err(e) => return tracing::warn!(error = %e, "cannot stop the replaced run {run}"),
            }
            if let Err(e) = engine.remove(&run).await {
                tracing::warn!(error = %e, "cannot remove the replaced run {run}");
            }
        });
    }

    /// Writes `w` (with its terms where `spec`) and its service's update report as a note in its history.
    async fn noted(&self, w: &Workload, spec: bool) -> Result<(), ControlError> {
        let Some(report) = w.service.as_ref().and_then(|s| s.update.as_ref()) else {
            self.save(w).await?;
            return Ok(());
        };
        self.store.update_workload_noted(w, spec, &report.message, report.at).await?;
        self.changed(&w.id);
        Ok(())
    }
}

/// Checks the hub's rollout's new run until it passes its readiness check (`Ok`) or `deadline` passes.
async fn hub_rollout(
    engine: &dyn gpuhub_driver::Engine,
    store: &gpuhub_store::Store,
    clock: &dyn crate::clock::Clock,
    (owner, check, port): (&str, &gpuhub_core::service::ReadyCheck, u16),
    run: &str,
    deadline: chrono::DateTime<chrono::Utc>,
    poll: std::time::Duration,
) -> Result<(), String> {
    loop {
        if crate::ready::check(engine, store, owner, check, run, port).await {
            return Ok(());
        }
        if clock.now() >= deadline {
            let wait = gpuhub_core::Seconds(ROLLOUT_DEADLINE.num_seconds().max(0) as u64);
            return Err(format!("the new run did not pass its readiness check within {wait}"));
        }
        tokio::time::sleep(poll).await;
    }
}

/// Follows an engine's own rollout of `run` (its status's `LABEL_ROLLOUT`) until it completes (`Ok`),
/// the engine reports it failed (with the engine's reason), or `deadline` passes.
async fn engine_rollout(
    engine: &dyn gpuhub_driver::Engine,
    clock: &dyn crate::clock::Clock,
    run: &str,
    deadline: chrono::DateTime<chrono::Utc>,
    poll: std::time::Duration,
) -> Result<(), String> {
    use gpuhub_core::service::{LABEL_ROLLOUT, LABEL_ROLLOUT_WHY, ROLLOUT_COMPLETE, ROLLOUT_FAILED};
    loop {
        match engine.observe(run).await {
            Ok(s) => match s.labels.get(LABEL_ROLLOUT).map(String::as_str) {
                Some(ROLLOUT_COMPLETE) => return Ok(()),
                Some(ROLLOUT_FAILED) => {
                    let why = s.labels.get(LABEL_ROLLOUT_WHY).cloned();
                    return Err(
                        why.unwrap_or_else(|| format!("the {} engine reports the rollout failed", engine.name()))
                    );
                }
                _ => {}
            },
            Err(e) => tracing::debug!(run, error = %e, "cannot look at the engine's rollout"),
        }
        if clock.now() >= deadline {
            let wait = gpuhub_core::Seconds(ROLLOUT_DEADLINE.num_seconds().max(0) as u64);
            return Err(format!("the {} engine's rollout did not complete within {wait}", engine.name()));
        }
        tokio::time::sleep(poll).await;
    }
}
