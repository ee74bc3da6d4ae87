//! Runs the container engine's own shutdown or restart killed (issue 27): a `dockerd` stopped by a
//! package upgrade SIGTERMs its containers (143, or 137 after their stop timeout) and says so as `die`
//! events before its event stream breaks; one restarted after a crash without live restore kills the
//! containers it finds still running before it answers again. Neither is the run's own end.
//!
//! The controller tells them apart by the engine's events and their timing
//! ([`gpuhub_core::stop::killed_by_engine`]): an exit with a kill code that gpuhub did not ask for is
//! held for [`Settings::engine_restart_margin`](crate::Settings) instead of being recorded at once. If
//! the event stream breaks meanwhile, the engine went away: every held exit is an engine restart's. If
//! not, the exit is recorded as the run's own when the margin has passed. After the stream broke, the
//! first reconciliation that reaches the engine again finds the runs it killed on its way back
//! (exited with a kill code, within the margin of its return). Each such run is queued again in its old
//! place, or failed where the admin chose `on_engine_restart = "fail"`, with the typed reason
//! `engine-restarted` in its interruption and history.
//!
//! An engine that says itself that it ended a run (a Slurm job whose node failed, `NODE_FAIL`: the
//! run's status carries [`gpuhub_driver::LABEL_ENDED_BY`]) is believed at once, at reconciliation or when
//! a member's exit comes.

use crate::Controller;
use chrono::{DateTime, Utc};
use gpuhub_core::lifecycle::Event;
use gpuhub_core::stop::{EngineOutage, OnEngineRestart, StopReason, engine_kill_code, killed_by_engine};
use gpuhub_core::workload::Workload;
use gpuhub_store::StoreError;
use std::collections::BTreeMap;

/// A member's exit with a kill code, not yet recorded.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Held {
    pub run: String,
    pub code: i64,
    /// When its event came.
    pub seen: DateTime<Utc>,
}

/// What the controller knows of the engine's comings and goings.
#[derive(Debug, Default)]
pub(crate) struct Restarts {
    /// The engine's last outage (its event stream broke), if it had one since gpuhub started.
    pub outage: Option<EngineOutage>,
    /// Held exits by workload and member.
    pub held: BTreeMap<(String, u32), Held>,
}

impl Restarts {
    /// The event stream broke at `now`: an outage begins, unless one is open already.
    pub fn broke(&mut self, now: DateTime<Utc>) {
        if self.outage.is_none_or(|o| o.back.is_some()) {
            self.outage = Some(EngineOutage { broke: now, back: None });
        }
    }

    /// The engine answered at `now`: an open outage ends.
    pub fn answered(&mut self, now: DateTime<Utc>) {
        if let Some(o) = self.outage.as_mut().filter(|o| o.back.is_none()) {
            o.back = Some(now);
        }
    }

    /// Whether an exit of a workload is held.
    pub fn holds(&self, workload: &str) -> bool {
        self.held.keys().any(|(w, _)| w == workload)
    }

    /// When the earliest held exit is to be recorded as the run's own.
    pub fn next_release(&self, margin: chrono::Duration) -> Option<DateTime<Utc>> {
        self.held.values().map(|h| h.seen + margin).min()
    }

    /// The held exits whose margin has passed at `now`, taken out.
    pub fn due(&mut self, now: DateTime<Utc>, margin: chrono::Duration) -> Vec<((String, u32), Held)> {
        let due: Vec<_> = self.held.iter().filter(|(_, h)| h.seen + margin <= now).map(|(k, _)| k.clone()).collect();
        due.into_iter().filter_map(|k| self.held.remove(&k).map(|h| (k, h))).collect()
    }
}

/// The typed reason, with what was seen in words.
fn reason(outage: &EngineOutage, what: &str) -> StopReason {
    let detail = match outage.back {
        Some(back) => format!(
            "the container engine went away at {} and answered again at {}; {what}",
            outage.broke.format("%H:%M:%S%.3f UTC"),
            back.format("%H:%M:%S%.3f UTC")
        ),
        None => format!("the container engine went away at {}; {what}", outage.broke.format("%H:%M:%S%.3f UTC")),
    };
    StopReason::EngineRestarted { detail, at: outage.broke }
}

impl Controller {
    fn margin(&self) -> chrono::Duration {
        chrono::Duration::from_std(self.settings.engine_restart_margin).unwrap_or(chrono::Duration::seconds(15))
    }

    /// Whether the exit of `w`'s member with `code` was taken care of here: a kill gpuhub did not ask
    /// for (no stop of its own under way) is an engine restart's when it comes within the margin of
    /// the engine's return (a restarted engine killing what it found running), and is held otherwise.
    pub(crate) async fn kill_handled(&mut self, w: &Workload, member: u32, code: i64) -> bool {
        if !engine_kill_code(code) || w.interruption.is_some() || self.stopping.contains_key(&w.id) {
            return false;
        }
        let Some(run) = w.run_id.clone() else { return false };
        let seen = self.clock.now();
        if let Some(outage) = self.restarts.outage.filter(|o| o.back.is_some())
            && killed_by_engine(code, seen, Some(&outage), self.margin())
        {
            let what = format!("member {member} was killed (exit code {code}) as it answered again");
            self.killed_by_restart(w.clone(), reason(&outage, &what), Some(code)).await;
            return true;
        }
        tracing::info!(workload = %w.id, member, code, "a kill gpuhub did not ask for: held to see whether the engine is going away");
        self.restarts.held.insert((w.id.clone(), member), Held { run, code, seen });
        self.next_release = self.restarts.next_release(self.margin());
        true
    }

    /// The engine's event stream broke: the engine went away, and every held exit was its doing.
    pub(crate) async fn engine_went_away(&mut self) {
        let now = self.clock.now();
        self.restarts.broke(now);
        let Some(outage) = self.restarts.outage else { return };
        let held = std::mem::take(&mut self.restarts.held);
        self.next_release = None;
        let mut by_workload: BTreeMap<String, Vec<(u32, Held)>> = BTreeMap::new();
        for ((w, m), h) in held {
            by_workload.entry(w).or_default().push((m, h));
        }
        for (id, exits) in by_workload {
            let Some(mut w) = self.load_current(&id, &exits[0].1.run).await else { continue };
            let margin = self.margin();
            let (member, h) = &exits[0];
            if !killed_by_engine(h.code, h.seen, Some(&outage), margin) {
                self.record_exits(&mut w, &exits).await;
                continue;
            }
            let ms = (outage.broke - h.seen).num_milliseconds();
            let what =
                format!("member {member} was killed (exit code {}) {ms}ms before its event stream broke", h.code);
            self.killed_by_restart(w, reason(&outage, &what), Some(h.code)).await;
        }
    }

    /// Records the held exits whose margin has passed as the runs' own ends.
    pub(crate) async fn release_held(&mut self) {
        let due = self.restarts.due(self.clock.now(), self.margin());
        self.next_release = self.restarts.next_release(self.margin());
        for ((id, member), h) in due {
            if let Some(mut w) = self.load_current(&id, &h.run).await {
                self.record_exits(&mut w, &[(member, h)]).await;
            }
        }
    }

    /// Whether a run the reconciliation found (after the engine came back) was killed by the engine's
    /// restart: a member ended with a kill code within the margin of the engine's return.
    pub(crate) fn killed_on_return(&self, run: &gpuhub_driver::RunStatus) -> Option<(StopReason, i64)> {
        let outage = self.restarts.outage.filter(|o| o.back.is_some())?;
        let now = self.clock.now();
        run.members.iter().find_map(|m| match m.state {
            gpuhub_driver::MemberState::Exited(code) if killed_by_engine(code, now, Some(&outage), self.margin()) => {
                let what = format!(
                    "member {} was found killed (exit code {code}) when it answered again, as an engine restarted without live restore does",
                    m.index
                );
                Some((reason(&outage, &what), code))
            }
            _ => None,
        })
    }

    /// The typed reason of a run the engine says it ended itself (a Slurm node that failed), if it did.
    pub(crate) fn ended_by_engine(&self, run: &gpuhub_driver::RunStatus) -> Option<(StopReason, Option<i64>)> {
        let detail = match run.ended_by_engine()? {
            gpuhub_driver::ENDED_BY_NODE_FAIL => format!("a node of run {} failed under it (Slurm NODE_FAIL)", run.id),
            other => format!("the engine ended run {} itself ({other})", run.id),
        };
        let code = run.members.iter().find_map(|m| match m.state {
            gpuhub_driver::MemberState::Exited(c) => Some(c),
            _ => None,
        });
        Some((StopReason::EngineRestarted { detail, at: self.clock.now() }, code))
    }

    /// Queues `w` again (or fails it, as configured) for `reason`, and saves it.
    pub(crate) async fn killed_by_restart(&mut self, mut w: Workload, reason: StopReason, code: Option<i64>) {
        let before = w.state();
        let requeue = self.settings.on_engine_restart == OnEngineRestart::Requeue;
        tracing::warn!(workload = %w.id, requeue, "its run was ended by the engine (its restart, a failed node)");
        if let Err(e) = w.apply(Event::EngineRestarted { reason, code, requeue }, self.clock.now()) {
            return tracing::warn!(workload = %w.id, error = %e, "engine restart does not apply");
        }
        if let Err(e) = self.after_change(&mut w, before).await {
            tracing::error!(error = %e, workload = %w.id, "cannot record an engine restart");
        }
    }

    async fn record_exits(&mut self, w: &mut Workload, exits: &[(u32, Held)]) {
        let before = w.state();
        let now = self.clock.now();
        for (member, h) in exits {
            if w.has_live_run()
                && let Err(e) = w.apply(Event::MemberExited { index: *member, code: h.code }, now)
            {
                tracing::warn!(workload = %w.id, error = %e, "held exit does not apply");
            }
        }
        if let Err(e) = self.after_change(w, before).await {
            tracing::error!(error = %e, workload = %w.id, "cannot record an exit");
        }
    }

    /// Workload `id` while `run` is still its live run and no stop of gpuhub's is under way.
    async fn load_current(&self, id: &str, run: &str) -> Option<Workload> {
        if self.stopping.contains_key(id) {
            return None;
        }
        match self.store.get_workload_by_id(id).await {
            Ok(w) if w.run_id.as_deref() == Some(run) && w.has_live_run() => Some(w),
            Ok(_) | Err(StoreError::NotFound { .. }) => None,
            Err(e) => {
                tracing::error!(error = %e, "cannot read workload {id}");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + s, 0).unwrap()
    }

    #[test]
    fn an_outage_opens_once_and_closes_when_the_engine_answers() {
        let mut r = Restarts::default();
        r.answered(t(0));
        assert_eq!(r.outage, None, "no outage, nothing to end");
        r.broke(t(10));
        r.broke(t(12)); // a resubscription that fails again is the same outage
        assert_eq!(r.outage, Some(EngineOutage { broke: t(10), back: None }));
        r.answered(t(20));
        r.answered(t(30));
        assert_eq!(r.outage, Some(EngineOutage { broke: t(10), back: Some(t(20)) }));
        r.broke(t(40));
        assert_eq!(r.outage, Some(EngineOutage { broke: t(40), back: None }), "a new outage");
    }

    #[test]
    fn held_exits_are_released_after_the_margin() {
        let margin = chrono::Duration::seconds(15);
        let mut r = Restarts::default();
        r.held.insert(("w1".into(), 0), Held { run: "r1".into(), code: 143, seen: t(0) });
        r.held.insert(("w2".into(), 1), Held { run: "r2".into(), code: 137, seen: t(5) });
        assert!(r.holds("w1") && r.holds("w2") && !r.holds("w3"));
        assert_eq!(r.next_release(margin), Some(t(15)));
        assert!(r.due(t(14), margin).is_empty());
        let due = r.due(t(15), margin);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].0, ("w1".to_owned(), 0));
        assert_eq!(r.next_release(margin), Some(t(20)));
        assert!(!r.holds("w1"));
    }
}
