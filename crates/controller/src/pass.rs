//! One scheduling pass: run-time limits, then — where gpuhub places — the scheduler's starts and
//! preemptions with an explanation for the rest, or — where the engine places — a submit of every
//! workload not yet in the engine's queue, explained by the engine's own pending reasons.

use crate::{ControlError, Controller, OWNER_DISABLED};
use chrono::{DateTime, Utc};
use gpuhub_core::lifecycle::Event;
use gpuhub_core::state::Explanation;
use gpuhub_core::stop::StopReason;
use gpuhub_core::workload::{Workload, WorkloadState};
use gpuhub_driver::Placement;
use gpuhub_store::WorkloadFilter;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;

/// `text` of the scheduler's (which names workloads by id: whose reserved start a workload would delay,
/// whom it waits behind, whom a victim makes room for) with every word that is a workload's id replaced
/// by its `owner/name`, as people know it.
fn named(text: &str, by_id: &HashMap<&str, &Workload>) -> String {
    text.split(' ')
        .map(|word| match by_id.get(word) {
            Some(w) => format!("{}/{}", w.owner, w.name),
            None => word.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

impl Controller {
    /// Starts what fits, in queue order, and records why the rest waits.
    pub async fn schedule(&mut self) {
        self.passes.fetch_add(1, Ordering::Relaxed);
        let began = std::time::Instant::now();
        if let Err(e) = self.try_schedule().await {
            tracing::error!(error = %e, "scheduling pass failed");
        }
        self.pass_seconds.observe(began.elapsed().as_secs_f64());
    }

    async fn try_schedule(&mut self) -> Result<(), ControlError> {
        let filter = WorkloadFilter {
            owner: None,
            states: Some(vec![WorkloadState::Queued, WorkloadState::Starting, WorkloadState::Running]),
        };
        let active = self.store.list_workloads(&filter).await?;
        let now = self.clock.now();
        self.stop_over_limit(&active, now).await?;
        let nodes = self.inventory.capacities();
        let default_node = nodes.first().map(|n| n.name.clone()).unwrap_or_default();
        let running: Vec<gpuhub_sched::Running> = active
            .iter()
            .filter(|w| w.state().holds_resources())
            .map(|w| crate::scheduling::running(&default_node, w, self.stopping.contains_key(&w.id)))
            // a service's rolling update holds its new run's resources beside the serving run's
            .chain(active.iter().filter_map(|w| crate::scheduling::rollout(&default_node, w)))
            .collect();
        let half_life = (self.settings.fair_share_half_life_hours * 3_600_000.0) as i64;
        self.usage.advance(&running, now.timestamp_millis(), half_life.max(1));
        // a service waiting out its backoff after its run ended is not started before then; the
        // controller wakes for it
        let backing_off = |w: &&Workload| w.service.as_ref().is_some_and(|s| s.backing_off(now));
        let restart_at = active.iter().filter(backing_off).filter_map(|w| w.service.as_ref()?.restart_at).min();
        self.next_deadline = self.next_deadline.into_iter().chain(restart_at).min();
        let waiting = |w: &&Workload| w.state() == WorkloadState::Queued && !w.waits_in_engine() && !backing_off(w);
        if !active.iter().any(|w| waiting(&w)) {
            self.publish_explanations(HashMap::new());
            return Ok(());
        }
        // a disabled account's queued work never starts (it waits, saying why, until re-enabled)
        let disabled: HashSet<String> =
            self.store.list_users().await?.into_iter().filter(|u| u.disabled).map(|u| u.username).collect();
        for w in active.iter().filter(waiting).filter(|w| disabled.contains(&w.owner)) {
            if w.message.as_deref() != Some(OWNER_DISABLED) {
                let mut w = w.clone();
                w.apply(Event::Waiting { message: OWNER_DISABLED.into() }, now)?;
                if self.store.update_workload_if(&w, WorkloadState::Queued).await? {
                    self.changed(&w.id);
                }
            }
        }
        let ready: Vec<&Workload> = active.iter().filter(waiting).filter(|w| !disabled.contains(&w.owner)).collect();
        tracing::debug!(ready = ready.len(), nodes = nodes.len(), placement = ?self.placement, "scheduling pass");
        match self.placement {
            Placement::Hub => self.place(&active, &ready, &running, &nodes, now).await,
            Placement::Engine => {
                for w in ready {
                    self.submit_queued(w.clone()).await?;
                }
                self.publish_explanations(HashMap::new());
                Ok(())
            }
        }
    }

    /// The explanations in force: `scheduled` (the scheduler's) and the engine's pending reasons.
    fn publish_explanations(&self, mut scheduled: HashMap<String, Explanation>) {
        scheduled.extend(self.engine_pending.iter().map(|(k, v)| (k.clone(), v.clone())));
        if let Ok(mut e) = self.explanations.write() {
            *e = scheduled;
        }
    }

    /// Stops every run past its run-time limit, and notes when the next one will be.
    async fn stop_over_limit(&mut self, active: &[Workload], now: DateTime<Utc>) -> Result<(), ControlError> {
        let (over, next) = crate::scheduling::over_limit(active, now);
        self.next_deadline = next;
        for w in over {
            let Some(run) = w.run_id.clone() else { continue };
            if self.stopping.contains_key(&w.id) {
                continue;
            }
            let limit = w.runtime_limit.unwrap_or_default();
            tracing::info!(workload = %w.id, %limit, "run-time limit reached; stopping");
            let mut w = w.clone();
            w.apply(Event::StopRequested { reason: StopReason::TimeLimit { limit, at: now } }, now)?;
            self.save(&w).await?;
            self.begin_stop(w.id.clone(), &run, self.settings.stop_grace, None);
        }
        Ok(())
    }

    /// gpuhub places: the scheduler decides starts and preemptions, and explains the rest.
    async fn place(
        &mut self,
        active: &[Workload],
        ready: &[&Workload],
        running: &[gpuhub_sched::Running],
        nodes: &[gpuhub_core::node::NodeCapacity],
        now: DateTime<Utc>,
    ) -> Result<(), ControlError> {
        let pending: Vec<gpuhub_sched::Pending> = ready.iter().map(|w| crate::scheduling::pending(w)).collect();
        let mut config = self.settings.scheduler.clone();
        // the queues in force are the store's: an admin's edit takes effect on the next pass
        config.queues = self.store.list_queues().await?.iter().map(crate::scheduling::queue_spec).collect();
        config.usage = self.usage.clone();
        config
            .reservations
            .extend(self.store.list_reservations(now).await?.into_iter().map(crate::scheduling::reservation));
        let decisions = gpuhub_sched::schedule(
            &crate::scheduling::cluster(nodes),
            running,
            &pending,
            &config,
            now.timestamp_millis(),
        );
        let by_id: HashMap<&str, &Workload> = active.iter().map(|w| (w.id.as_str(), w)).collect();
        tracing::debug!(starts = decisions.starts.len(), pending = decisions.pending.len(), "decided");

        let explained: HashMap<String, Explanation> = (decisions.pending.iter())
            .map(|e| {
                let w = by_id.get(e.id.as_str()).copied();
                let mut out = crate::unmet::explain(e, w, active, nodes, &config, now);
                out.message = named(&out.message, &by_id);
                (e.id.clone(), out)
            })
            .collect();
        let messages: Vec<(String, String)> = explained.iter().map(|(id, e)| (id.clone(), e.message.clone())).collect();
        // published before the messages are written: whoever a message's change wakes finds its
        // explanation too
        self.publish_explanations(explained);
        for (id, message) in messages {
            let Some(w) = by_id.get(id.as_str()) else { continue };
            if w.message.as_deref() != Some(message.as_str()) {
                let mut w = (*w).clone();
                w.apply(Event::Waiting { message }, now)?;
                if self.store.update_workload_if(&w, WorkloadState::Queued).await? {
                    self.changed(&w.id);
                }
            }
        }

        for p in decisions.preemptions {
            let Some(w) = by_id.get(p.id.as_str()) else { continue };
            let Some(run) = w.run_id.clone() else { continue };
            if self.stopping.contains_key(&p.id) {
                continue;
            }
            tracing::info!(victim = %p.id, for_id = %p.for_id, reason = %p.reason, "preempting");
            let mut victim = (*w).clone();
            let by = by_id.get(p.for_id.as_str());
            let reason = StopReason::Preempted {
                by: by.map_or_else(|| p.for_id.clone(), |b| format!("{}/{}", b.owner, b.name)),
                queue: by.map(|b| b.queue.clone()).unwrap_or_default(),
                at: now,
                detail: named(&p.reason, &by_id),
            };
            victim.apply(Event::StopRequested { reason }, now)?;
            self.save(&victim).await?;
            let grace = std::time::Duration::from_millis(u64::try_from(p.grace_ms).unwrap_or(0));
            self.begin_stop(p.id.clone(), &run, grace, None);
        }
        for start in decisions.starts {
            let Some(w) = by_id.get(start.id.as_str()) else { continue };
            self.launch((*w).clone(), start.placements).await?;
        }
        Ok(())
    }
}
