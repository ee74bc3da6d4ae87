//! The event stream: one task per engine polls Slurm every `poll_ms` (one `squeue -t all` in its text form
//! for every run;
//! `sacct` only for runs that just ended or left slurmctld's queue), diffs each run's members against
//! the last poll ([`Tracker`]) and sends `Started`, `Exited`, `Removed` to every subscriber. A poll that
//! fails (slurmctld or slurmdbd unreachable) sends nothing: no run is taken for gone because Slurm could
//! not be asked. The first poll only learns what is there.

use crate::engine::SlurmEngine;
use crate::parse::Phase;
use crate::status::{self, Exits};
use futures::StreamExt;
use gpuhub_driver::{EngineError, EngineEvent, EventStream, MemberState, RunStatus};
use std::collections::{HashMap, HashSet};
use std::sync::Weak;
use std::time::Duration;
use tokio::sync::broadcast;

/// A run as the last poll saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracked {
    pub status: RunStatus,
    /// Its bundle directory (gone once gpuhub removed it).
    pub dir: Option<String>,
}

/// Member states between polls.
#[derive(Debug, Default)]
pub struct Tracker {
    runs: HashMap<String, Tracked>,
    primed: bool,
}

impl Tracker {
    /// A run as last seen.
    pub fn get(&self, run: &str) -> Option<&Tracked> {
        self.runs.get(run)
    }

    /// Every run last seen.
    pub fn all(&self) -> impl Iterator<Item = (&String, &Tracked)> {
        self.runs.iter()
    }

    /// Takes one poll's complete picture of gpuhub's runs and returns what changed: a member seen
    /// running for the first time `Started`, one seen ended `Exited` (after `Started` if it was never seen
    /// running but ran on a node), a run no longer there `Removed` (each member). The first call only
    /// learns.
    pub fn update(&mut self, snapshot: Vec<Tracked>) -> Vec<EngineEvent> {
        let mut events = Vec::new();
        let mut next = HashMap::with_capacity(snapshot.len());
        for t in snapshot {
            let run = &t.status;
            if self.primed {
                let workload = run.workload().unwrap_or_default().to_owned();
                let before = self.runs.get(&run.id);
                for m in &run.members {
                    let prev = before
                        .and_then(|b| b.status.members.iter().find(|x| x.index == m.index))
                        .map_or(MemberState::Pending, |x| x.state);
                    let started =
                        EngineEvent::Started { run: run.id.clone(), workload: workload.clone(), member: m.index };
                    match (prev, m.state) {
                        (MemberState::Pending, MemberState::Running) => events.push(started),
                        (MemberState::Pending | MemberState::Running, MemberState::Exited(exit_code)) => {
                            if prev == MemberState::Pending && m.node.is_some() {
                                events.push(started);
                            }
                            events.push(EngineEvent::Exited {
                                run: run.id.clone(),
                                workload: workload.clone(),
                                member: m.index,
                                exit_code,
                            });
                        }
                        _ => {}
                    }
                }
            }
            next.insert(t.status.id.clone(), t);
        }
        if self.primed {
            let mut gone: Vec<&Tracked> =
                self.runs.iter().filter(|(id, _)| !next.contains_key(*id)).map(|(_, t)| t).collect();
            gone.sort_by(|a, b| a.status.id.cmp(&b.status.id));
            for t in gone {
                let workload = t.status.workload().unwrap_or_default().to_owned();
                for m in &t.status.members {
                    events.push(EngineEvent::Removed {
                        run: t.status.id.clone(),
                        workload: workload.clone(),
                        member: m.index,
                    });
                }
            }
        }
        self.runs = next;
        self.primed = true;
        events
    }
}

impl SlurmEngine {
    /// One poll: every gpuhub run now, reusing what `tracker` knows of runs that ended before.
    pub(crate) async fn poll(&self, tracker: &Tracker) -> Result<Vec<Tracked>, EngineError> {
        let queue = self.queue().await?;
        let mut snapshot = Vec::new();
        let mut seen = HashSet::new();
        let mut ended_now = Vec::new();
        for job in queue {
            let Some(meta) = status::meta(&job) else { continue };
            let id = job.id.to_string();
            seen.insert(id.clone());
            if job.phase() == Phase::Ended {
                if self.removed(&meta) {
                    continue;
                }
                match tracker.get(&id) {
                    Some(t) if t.status.ended() => snapshot.push(t.clone()),
                    _ => ended_now.push((job, meta)),
                }
                continue;
            }
            let status = status::run_status(&job, &meta, &Exits::default(), None);
            snapshot.push(Tracked { status, dir: meta.dir });
        }
        // runs that left slurmctld's queue: ended ones stay until removed; others are asked of accounting
        let mut vanished = Vec::new();
        for (id, t) in tracker.all() {
            if seen.contains(id) {
                continue;
            }
            if t.status.ended() {
                if t.dir.as_ref().is_some_and(|d| self.inner.bundles.run_dir(d).exists()) {
                    snapshot.push(t.clone());
                }
            } else if let Ok(n) = id.parse::<u64>() {
                vanished.push(n);
            }
        }
        let ids: Vec<u64> = ended_now.iter().map(|(j, _)| j.id).chain(vanished.iter().copied()).collect();
        let records = match self.acct(&ids).await {
            Ok(r) => r,
            Err(e) => {
                // accounting unreachable: keep what was known of these runs until it answers
                tracing::debug!(error = %e, "sacct failed in a poll; ended runs wait for the next one");
                for id in &ids {
                    if let Some(t) = tracker.get(&id.to_string()) {
                        snapshot.push(t.clone());
                    }
                }
                return Ok(snapshot);
            }
        };
        for (job, meta) in ended_now {
            let files = self.exit_files(meta.log_user(&job), job.id, meta.size);
            let exits = Exits { acct: records.get(&job.id), files };
            snapshot.push(Tracked { status: status::run_status(&job, &meta, &exits, None), dir: meta.dir });
        }
        for id in vanished {
            let Some(a) = records.get(&id) else {
                // neither slurmctld nor accounting knows it: gone (Removed)
                continue;
            };
            let job = a.as_job();
            let Some(meta) = status::meta(&job) else { continue };
            if self.removed(&meta) {
                continue;
            }
            let exits = Exits { acct: Some(a), files: self.exit_files(meta.log_user(&job), job.id, meta.size) };
            snapshot.push(Tracked { status: status::run_status(&job, &meta, &exits, None), dir: meta.dir });
        }
        Ok(snapshot)
    }

    /// A new subscriber to the event stream; starts the polling task if it is not running.
    pub(crate) fn subscribe(&self) -> EventStream {
        let rx = self.inner.events.subscribe();
        let mut poller = self.inner.poller.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if poller.as_ref().is_none_or(tokio::task::JoinHandle::is_finished) {
            let weak = std::sync::Arc::downgrade(&self.inner);
            let every = Duration::from_millis(self.inner.config.poll_ms);
            *poller = Some(tokio::spawn(poll_loop(weak, every)));
        }
        futures::stream::unfold(rx, |mut rx| async move {
            loop {
                match rx.recv().await {
                    Ok(ev) => return Some((Ok(ev), rx)),
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!(missed = n, "a subscriber of the Slurm engine's events fell behind");
                        continue;
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        })
        .boxed()
    }
}

/// Polls until the engine is dropped or nobody listens any more.
async fn poll_loop(engine: Weak<crate::engine::Inner>, every: Duration) {
    let mut tracker = Tracker::default();
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        ticker.tick().await;
        let Some(inner) = engine.upgrade() else { return };
        if inner.events.receiver_count() == 0 {
            return;
        }
        let e = SlurmEngine { inner };
        match e.poll(&tracker).await {
            Ok(snapshot) => {
                if failing {
                    tracing::info!("Slurm answers the engine's poll again");
                    failing = false;
                }
                for ev in tracker.update(snapshot) {
                    let _ = e.inner.events.send(ev);
                }
            }
            Err(err) => {
                if !failing {
                    tracing::warn!(error = %err, "cannot poll Slurm; no events until it answers");
                    failing = true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
