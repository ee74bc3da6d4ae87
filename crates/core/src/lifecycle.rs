//! The workload state machine: [`Workload::apply`] is the one function through which a workload's
//! state changes. Every event names what happened (a placement, a member's exit, a stop for a typed
//! reason); `apply` checks that it may happen now and sets state, members, GPUs, exit code, message and
//! times together, so no caller can leave a workload half-moved.
//!
//! ```text
//!            Placed            all members Running
//! queued ───────────▶ starting ─────────────────▶ running ──▶ succeeded | failed | stopped
//!   ▲ │ Submitted (engine queues; stays queued with a run)        │
//!   │ └──────────────── MemberRunning … ──────────────────────────┘
//!   └── Requeue, a preemption's RunStopped, EngineRestarted, StartDeferred, Orphaned   Lost: the run vanished
//! ```

use crate::stop::StopReason;
use crate::workload::{Member, MemberPhase, Workload, WorkloadKind, WorkloadState};
use crate::{CoreError, Seconds};
use chrono::{DateTime, Utc};

/// The message of a workload stopped at its run-time limit.
pub const TIME_LIMIT: &str = "reached its run-time limit";

/// Something that happened to a workload.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Its owner or an admin queues an ended workload again.
    Requeue,
    /// Its image is in the engine now: it waits for resources.
    Pulled {
        /// How far the pull's last report went (what it fetched), when one came.
        fetched: Option<crate::pull::PullView>,
    },
    /// Its image could not be pulled.
    PullFailed {
        /// The registry's (or the engine's) words.
        why: String,
    },
    /// The scheduler says why it waits (a message only; no state changes).
    Waiting {
        /// One line for people.
        message: String,
    },
    /// gpuhub placed it: the members with their nodes and GPUs, recorded before the engine is asked.
    Placed {
        /// One per member, pending.
        members: Vec<Member>,
    },
    /// The engine took its run: `members` as the engine reports them. Where gpuhub placed, the run
    /// starts (`starting`); where the engine places, the workload waits in the engine's queue (stays
    /// `queued`, now with a run).
    Submitted {
        /// The engine's id of the run.
        run: String,
        /// The members as the engine reports them.
        members: Vec<Member>,
        /// The ports gpuhub gave its apps (engines whose members share their node's network), kept
        /// with member 0.
        ports: std::collections::BTreeMap<String, u16>,
    },
    /// Starting it could not reach the engine or the database: nothing ran; it waits again.
    StartDeferred {
        /// The error.
        why: String,
    },
    /// The engine refused to start it.
    StartFailed {
        /// The engine's words.
        why: String,
    },
    /// A member runs (on `node`, holding `gpus`, when the engine says).
    MemberRunning {
        /// Its index.
        index: u32,
        /// Where, when the engine placed it.
        node: Option<String>,
        /// The GPUs it holds, when the engine says.
        gpus: Option<Vec<String>>,
    },
    /// A member's main process ended.
    MemberExited {
        /// Its index.
        index: u32,
        /// Its exit code.
        code: i64,
    },
    /// A stop was asked for `reason`. A workload without a run ends at once; one with a run keeps its
    /// state until [`Event::RunStopped`].
    StopRequested {
        /// Why.
        reason: StopReason,
    },
    /// The run asked to stop has ended; `code` is member 0's exit code when known.
    RunStopped {
        /// Member 0's exit code.
        code: Option<i64>,
    },
    /// The run vanished behind gpuhub's back (removed by hand, its node gone).
    Lost {
        /// What was seen.
        why: String,
    },
    /// After a restart: the intent to start was recorded but the engine has no run. Nothing ran.
    Orphaned,
    /// The engine's own shutdown or restart killed the run (`reason` is an
    /// [`StopReason::EngineRestarted`]), member 0 ending with `code` when known. With `requeue` it is
    /// queued again in its old place (its submit time), the ended run kept to be removed before the next
    /// one starts; otherwise it fails with that code.
    EngineRestarted {
        /// Why, typed.
        reason: StopReason,
        /// Member 0's exit code, when known.
        code: Option<i64>,
        /// Queue it again (`on_engine_restart = "requeue"`), or fail it.
        requeue: bool,
    },
    /// A running service's rolling update begins: a run of the new terms is placed beside the serving
    /// one (its own holding opens).
    RolloutBegun {
        /// The new terms and where the new run is placed.
        rollout: crate::service::Rollout,
    },
    /// The engine took the rolling update's new run.
    RolloutSubmitted {
        /// The engine's id of the new run.
        run: String,
        /// Its members as the engine reports them.
        members: Vec<Member>,
    },
    /// The rolling update's new run passed its readiness check: it serves from now on, with the new
    /// terms; the old run is to be stopped (its holding closes).
    RolloutReady,
    /// The rolling update failed: the new run is to be stopped (its holding closes), the serving one
    /// goes on with the old terms.
    RolloutFailed {
        /// Why, for people.
        why: String,
    },
    /// An engine that rolls a service itself (a Kubernetes Deployment) took the new terms for its run:
    /// the run stays, its terms are the new ones.
    RolledByEngine {
        /// The new terms and what changed.
        rollout: crate::service::Rollout,
        /// What the engine does, for people.
        how: String,
    },
    /// The engine restarted a service's member itself `count` times in all (its own restart policy).
    EngineRestarts {
        /// The engine's count for the run's member.
        count: u32,
    },
}

impl Event {
    fn name(&self) -> &'static str {
        match self {
            Event::Requeue => "start",
            Event::Pulled { .. } => "end its pull",
            Event::PullFailed { .. } => "fail its pull",
            Event::Waiting { .. } => "wait",
            Event::Placed { .. } => "be placed",
            Event::Submitted { .. } => "be submitted",
            Event::StartDeferred { .. } => "be queued again",
            Event::StartFailed { .. } => "fail to start",
            Event::MemberRunning { .. } => "run",
            Event::MemberExited { .. } => "exit",
            Event::StopRequested { .. } => "stop",
            Event::RunStopped { .. } => "end its stop",
            Event::Lost { .. } => "be lost",
            Event::Orphaned => "be queued again after a restart",
            Event::EngineRestarted { .. } => "be killed by an engine restart",
            Event::RolloutBegun { .. } => "begin a rolling update",
            Event::RolloutSubmitted { .. } => "submit a rolling update's run",
            Event::RolloutReady => "switch to its updated run",
            Event::RolloutFailed { .. } => "fail its rolling update",
            Event::RolledByEngine { .. } => "be rolled out by its engine",
            Event::EngineRestarts { .. } => "count the engine's restarts",
        }
    }
}

impl Workload {
    /// Applies `event` at `now`: the only way a workload's state changes. An event that cannot happen
    /// in the current state is a [`CoreError::Transition`] and changes nothing.
    ///
    /// Entering a state that holds resources from one that does not opens a holding
    /// (`held_since = now`); leaving it closes the holding (`held_until = now`). Accounting counts
    /// exactly these intervals.
    pub fn apply(&mut self, event: Event, now: DateTime<Utc>) -> Result<(), CoreError> {
        let held = self.state.holds_resources();
        self.transition(event, now)?;
        match (held, self.state.holds_resources()) {
            (false, true) => {
                self.held_since = Some(now);
                self.held_until = None;
            }
            (true, false) => self.held_until = Some(now),
            _ => {}
        }
        Ok(())
    }

    fn transition(&mut self, event: Event, now: DateTime<Utc>) -> Result<(), CoreError> {
        use WorkloadState::*;
        let refuse = |w: &Workload, e: &Event| Err(CoreError::Transition { from: w.state, action: e.name() });
        match (&event, self.state) {
            (Event::Requeue, Succeeded | Failed | Stopped | Lost) => {
                self.state = Queued;
                self.exit_code = None;
                self.gpus.clear();
                self.members.clear(); // the run id stays: the next launch removes that run first
                self.finished_at = None;
                self.queued_at = now;
                self.message = Some("queued".into());
                self.interruption = None;
                if let Some(s) = self.service.as_mut() {
                    s.reset();
                }
            }
            (Event::Pulled { fetched }, Pulling) => {
                self.state = Queued;
                self.queued_at = now;
                let pulled = fetched.as_ref().map_or_else(|| "pulled".into(), crate::pull::PullView::summary);
                self.message = Some(format!("{pulled}; queued"));
            }
            (Event::PullFailed { why }, Pulling) => {
                self.state = Failed;
                self.finished_at = Some(now);
                self.message = Some(format!("could not pull {}: {why}", self.image));
                self.interruption = Some(StopReason::EngineFailure { detail: why.clone(), at: now });
            }
            (Event::Waiting { message }, Queued) => self.message = Some(message.clone()),
            (Event::Placed { members }, Queued) if !self.waits_in_engine() => {
                self.state = Starting;
                self.exit_code = None; // an earlier run's (a preempted one's) is not this run's
                self.gpus = members.iter().flat_map(|m| m.gpus.iter().cloned()).collect();
                self.members = members.clone();
                self.run_id = None;
                self.message = None;
                self.interruption = None;
            }
            (Event::Submitted { run, members, ports }, Queued | Starting) => {
                if self.state == Queued {
                    self.exit_code = None; // an earlier run's (a preempted one's) is not this run's
                    // nor is what ended that run and queued it again: left, it would take this run's
                    // own end for a stop under way (where gpuhub places, `Placed` clears it)
                    if matches!(
                        self.interruption,
                        Some(StopReason::EngineRestarted { .. } | StopReason::Preempted { .. })
                    ) {
                        self.interruption = None;
                    }
                }
                self.run_id = Some(run.clone());
                self.merge_members(members);
                if !ports.is_empty() {
                    self.member_mut(0).ports = ports.clone();
                }
                // members that already ran (and perhaps ended) count as events of their own
                for m in members.iter().filter(|m| m.state != MemberPhase::Pending) {
                    let (node, gpus) = (m.node.clone(), Some(m.gpus.clone()).filter(|g| !g.is_empty()));
                    self.apply(Event::MemberRunning { index: m.index, node, gpus }, now)?;
                }
                for m in members.iter().filter(|m| m.state == MemberPhase::Exited) {
                    self.apply(Event::MemberExited { index: m.index, code: m.exit_code.unwrap_or(-1) }, now)?;
                }
            }
            (Event::StartDeferred { why }, Queued | Starting) => {
                self.state = Queued;
                self.gpus.clear();
                self.members.clear();
                self.run_id = None;
                self.message = Some(format!("queued again: {why}"));
            }
            (Event::StartFailed { why }, Queued | Starting) => {
                self.state = Failed;
                self.gpus.clear();
                self.finished_at = Some(now);
                self.message = Some(format!("could not start: {why}"));
                self.interruption = Some(StopReason::EngineFailure { detail: why.clone(), at: now });
            }
            (Event::MemberRunning { index, node, gpus }, Starting | Running | Queued) if self.has_live_run() => {
                let m = self.member_mut(*index);
                if m.state == MemberPhase::Pending {
                    m.state = MemberPhase::Running;
                }
                if node.is_some() {
                    m.node = node.clone();
                }
                if let Some(g) = gpus {
                    m.gpus = g.clone();
                }
                self.gpus = self.members.iter().flat_map(|m| m.gpus.iter().cloned()).collect();
                let size = self.size.max(1) as usize;
                let all = self.members.len() >= size && self.members.iter().all(|m| m.state != MemberPhase::Pending);
                if all && self.state != Running {
                    self.state = Running;
                    self.started_at = Some(now);
                    self.message = None;
                }
            }
            (Event::MemberExited { index, code }, Starting | Running | Queued) if self.has_live_run() => {
                let m = self.member_mut(*index);
                if m.state == MemberPhase::Exited {
                    return Ok(());
                }
                m.state = MemberPhase::Exited;
                m.exit_code = Some(*code);
                let (index, code) = (*index, *code);
                self.started_at.get_or_insert(now);
                if self.interruption.is_some() {
                    // a stop is under way: its RunStopped decides once every member has ended
                    if self.all_exited() {
                        self.end_stopped(self.members.first().and_then(|m| m.exit_code), now);
                    }
                } else if code != 0 && self.exit_code.is_none() && !self.all_exited() {
                    // a member failing fails the run: the others are stopped (the controller sees
                    // `failing`) and the run ends failed with this member's code
                    self.exit_code = Some(code);
                    self.message = Some(format!("member {index} exited with code {code}; stopping the others"));
                } else if self.all_exited() {
                    let code = self.exit_code.unwrap_or_else(|| {
                        self.members.iter().filter_map(|m| m.exit_code).find(|c| *c != 0).unwrap_or(0)
                    });
                    self.end(code, now);
                }
            }
            (Event::StopRequested { reason }, Pulling) => {
                self.interruption = Some(reason.clone());
                self.state = Stopped;
                self.finished_at = Some(now);
                self.message = Some("stopped while its image was pulled".into());
            }
            (Event::StopRequested { reason }, Queued | Starting | Running) => {
                self.interruption = Some(reason.clone());
                if let StopReason::TimeLimit { limit, .. } = reason {
                    self.message = Some(format!("{TIME_LIMIT} of {limit}"));
                } else if let StopReason::Preempted { detail, .. } = reason {
                    self.message = Some(format!("preempted: {detail}"));
                } else if let StopReason::GpuMemoryExceeded { detail, .. } = reason {
                    self.message = Some(format!("stopping: {detail}"));
                }
                if self.run_id.is_none() && self.state == Queued {
                    self.state = Stopped;
                    self.gpus.clear();
                    self.finished_at = Some(now);
                    self.message = Some("stopped before it started".into());
                }
            }
            (Event::RunStopped { code }, Queued | Starting | Running) => self.end_stopped(*code, now),
            (Event::Lost { why }, Queued | Starting | Running) => {
                self.state = Lost;
                self.finished_at = Some(now);
                self.message = Some(why.clone());
                self.interruption = Some(StopReason::EngineFailure { detail: why.clone(), at: now });
            }
            (Event::EngineRestarted { reason, code, requeue }, Starting | Running | Queued) if self.has_live_run() => {
                let what = match reason {
                    StopReason::EngineRestarted { detail, .. } => detail.clone(),
                    other => other.summary(),
                };
                self.interruption = Some(reason.clone());
                for m in self.members.iter_mut().filter(|m| m.state != MemberPhase::Exited) {
                    m.state = MemberPhase::Exited;
                }
                if *requeue {
                    // its place in line is its submit time (`queued_at`, kept), as for a preemption
                    self.state = Queued;
                    self.exit_code = None;
                    self.finished_at = None;
                    self.gpus.clear();
                    self.members.clear(); // the run id stays: the next launch removes that run first
                    self.message = Some(format!("{}: {what}; queued again in its old place", reason.name()));
                } else {
                    self.state = Failed;
                    self.exit_code = *code;
                    self.finished_at = Some(now);
                    let code = code.map_or_else(String::new, |c| format!(" with exit code {c}"));
                    self.message =
                        Some(format!("{}: {what}; failed{code} (on_engine_restart = \"fail\")", reason.name()));
                }
            }
            (Event::Orphaned, Starting | Queued) => {
                self.state = Queued;
                self.gpus.clear();
                self.members.clear();
                self.run_id = None;
                self.message = Some("queued again after a restart".into());
            }
            (
                Event::RolloutBegun { .. }
                | Event::RolloutSubmitted { .. }
                | Event::RolloutReady
                | Event::RolloutFailed { .. }
                | Event::RolledByEngine { .. }
                | Event::EngineRestarts { .. },
                _,
            ) => {
                if !self.roll(&event, now) {
                    return refuse(self, &event);
                }
            }
            (e, _) => return refuse(self, e),
        }
        Ok(())
    }

    /// A rolling update's events (see [`crate::service::Rollout`]); `false` when `event` cannot happen
    /// now: a rollout begins only for a running service without one, and the others need one under way
    /// (its run submitted, for the switch).
    fn roll(&mut self, event: &Event, now: DateTime<Utc>) -> bool {
        use crate::service::{UpdateReport, UpdateState};
        let live = self.has_live_run();
        let running = self.state == WorkloadState::Running && live;
        let Some(service) = self.service.as_mut().filter(|_| self.kind == WorkloadKind::Service) else {
            return false;
        };
        match (event, service.rollout.as_mut()) {
            (Event::RolloutBegun { rollout }, None) if running => {
                service.update = Some(UpdateReport {
                    state: UpdateState::Rolling,
                    at: now,
                    message: format!(
                        "updating: {}; a new run starts beside the serving one, which serves until the new \
                         one is ready",
                        rollout.change
                    ),
                });
                service.rollout = Some(rollout.clone());
            }
            (Event::RolloutSubmitted { run, members }, Some(r)) if r.run.is_none() => {
                r.run = Some(run.clone());
                for seen in members {
                    if let Some(m) = r.members.iter_mut().find(|m| m.index == seen.index) {
                        m.engine_id = seen.engine_id.clone().or(m.engine_id.take());
                        if seen.node.is_some() {
                            m.node = seen.node.clone();
                        }
                        if !seen.gpus.is_empty() {
                            m.gpus = seen.gpus.clone();
                        }
                    }
                }
            }
            (Event::RolloutReady, Some(r)) if running && r.run.is_some() => {
                let r = service.rollout.take().unwrap_or_else(|| unreachable!("matched above"));
                service.update = Some(UpdateReport {
                    state: UpdateState::Done,
                    at: now,
                    message: format!("updated: {}; the new run serves, the old one is stopped", r.change),
                });
                self.run_id = r.run;
                self.members = r.members;
                for m in &mut self.members {
                    m.state = MemberPhase::Running;
                }
                self.gpus = self.members.iter().flat_map(|m| m.gpus.iter().cloned()).collect();
                (self.image, self.command, self.env) = (r.image, r.command, r.env);
                // the new run's holding, open since it started beside the old one, is the workload's now
                self.held_since = Some(r.since);
                self.held_until = None;
                self.started_at = Some(now);
                self.exit_code = None;
                self.message = None;
            }
            (Event::RolledByEngine { rollout: r, how }, None) if live => {
                service.update = Some(UpdateReport {
                    state: UpdateState::Done,
                    at: now,
                    message: format!("updated: {}; {how}", r.change),
                });
                (self.image, self.command, self.env) = (r.image.clone(), r.command.clone(), r.env.clone());
            }
            (Event::EngineRestarts { count }, _) => service.engine_restarted(*count),
            (Event::RolloutFailed { why }, Some(_)) => {
                service.rollout = None;
                service.update = Some(UpdateReport {
                    state: UpdateState::Failed,
                    at: now,
                    message: format!("update failed: {why}; the old run kept serving, with the old terms"),
                });
            }
            _ => return false,
        }
        true
    }

    /// Whether a member failed and the others are still being stopped.
    pub fn failing(&self) -> bool {
        self.state.holds_resources()
            && self.interruption.is_none()
            && self.exit_code.is_some_and(|c| c != 0)
            && !self.all_exited()
    }

    /// The run of an earlier attempt a queued workload still names (ended, not yet removed from the
    /// engine): the next launch removes it first.
    pub fn stale_run(&self) -> Option<&str> {
        (self.state == WorkloadState::Queued && self.members.is_empty()).then_some(self.run_id.as_deref()).flatten()
    }

    /// Whether it waits in the queue of an engine that places itself (submitted, not yet running).
    pub fn waits_in_engine(&self) -> bool {
        self.state == WorkloadState::Queued && self.run_id.is_some() && !self.members.is_empty()
    }

    /// Whether its run is the current one: it holds resources, or waits in the engine.
    pub fn has_live_run(&self) -> bool {
        self.run_id.is_some() && (self.state.holds_resources() || self.waits_in_engine())
    }

    fn all_exited(&self) -> bool {
        self.members.len() >= self.size.max(1) as usize && self.members.iter().all(|m| m.state == MemberPhase::Exited)
    }

    fn member_mut(&mut self, index: u32) -> &mut Member {
        if let Some(i) = self.members.iter().position(|m| m.index == index) {
            return &mut self.members[i];
        }
        self.members.push(Member::pending(index));
        self.members.sort_by_key(|m| m.index);
        let i = self.members.iter().position(|m| m.index == index).unwrap_or(0);
        &mut self.members[i]
    }

    fn merge_members(&mut self, seen: &[Member]) {
        for s in seen {
            let m = self.member_mut(s.index);
            m.engine_id = s.engine_id.clone().or(m.engine_id.take());
            if s.node.is_some() {
                m.node = s.node.clone();
            }
            if !s.gpus.is_empty() {
                m.gpus = s.gpus.clone();
            }
        }
        self.gpus = self.members.iter().flat_map(|m| m.gpus.iter().cloned()).collect();
    }

    /// The run ended by itself with `code`.
    fn end(&mut self, code: i64, now: DateTime<Utc>) {
        if let Some(service) = self.service.as_mut().filter(|_| self.kind == WorkloadKind::Service) {
            // a service is kept running: queued again, to start once its backoff has passed; the run id
            // stays (the next launch removes that run first). How long this run lasted counts from its
            // holding's start (`started_at` may be an earlier run's when this one never ran)
            let message = service.ended(code, self.held_since, now);
            self.state = WorkloadState::Queued;
            self.exit_code = Some(code);
            self.gpus.clear();
            self.members.clear();
            self.message = Some(message);
            return;
        }
        self.state = match (self.kind, code) {
            (WorkloadKind::Job, 0) => WorkloadState::Succeeded,
            (WorkloadKind::Job, _) => WorkloadState::Failed,
            // a workspace whose main process ends on its own is stopped with code 0, failed otherwise
            (WorkloadKind::Workspace | WorkloadKind::Service, 0) => WorkloadState::Stopped,
            (WorkloadKind::Workspace | WorkloadKind::Service, _) => WorkloadState::Failed,
        };
        self.exit_code = Some(code);
        self.finished_at = Some(now);
        let failed_member = self.members.iter().find(|m| m.exit_code == Some(code) && code != 0 && self.size > 1);
        self.message = Some(match (self.state, code, failed_member) {
            (WorkloadState::Succeeded, _, _) => "exited with code 0".into(),
            (_, c, Some(m)) => format!("member {} exited with code {c}; the run failed", m.index),
            (_, 137, None) => "killed (exit code 137; out of memory or SIGKILL)".into(),
            (_, c, None) => format!("exited with code {c}"),
        });
    }

    /// The run stopped from outside ended, member 0 with `code` (if known): what it becomes follows its
    /// typed reason, never its message. A preempted workload goes back to the queue in its old place
    /// (its submit time); one at its time limit ends (a job as failed); one stopped by a person or for a
    /// disabled owner is stopped; a job that exited 0 by itself before a preemption or its time limit
    /// reached it succeeded.
    fn end_stopped(&mut self, code: Option<i64>, now: DateTime<Utc>) {
        self.exit_code = code;
        self.finished_at = Some(now);
        for m in self.members.iter_mut().filter(|m| m.state != MemberPhase::Exited) {
            m.state = MemberPhase::Exited;
        }
        let by_system = matches!(self.interruption, Some(StopReason::Preempted { .. } | StopReason::TimeLimit { .. }));
        if by_system && self.kind == WorkloadKind::Job && code == Some(0) {
            self.state = WorkloadState::Succeeded;
            self.message = Some("exited with code 0".into());
            self.interruption = None;
            return;
        }
        let why = self.interruption.as_ref().map(StopReason::summary);
        match &self.interruption {
            Some(StopReason::Preempted { detail, .. }) => {
                self.state = WorkloadState::Queued;
                self.finished_at = None;
                self.gpus.clear();
                self.members.clear(); // the run id stays: the next launch removes that run first
                self.message = Some(format!("{}: {detail}; queued again", why.unwrap_or_default()));
            }
            Some(StopReason::TimeLimit { limit, .. }) => {
                self.state = match self.kind {
                    WorkloadKind::Job => WorkloadState::Failed,
                    WorkloadKind::Workspace | WorkloadKind::Service => WorkloadState::Stopped,
                };
                self.message = Some(format!("{TIME_LIMIT} of {limit}"));
            }
            // a job that outgrew its GPU memory did not finish its work: it failed, by the guard
            Some(StopReason::GpuMemoryExceeded { detail, .. }) => {
                self.state = match self.kind {
                    WorkloadKind::Job => WorkloadState::Failed,
                    WorkloadKind::Workspace | WorkloadKind::Service => WorkloadState::Stopped,
                };
                self.message = Some(format!("stopped by the GPU memory guard: {detail}"));
            }
            Some(_) => {
                self.state = WorkloadState::Stopped;
                self.message = why;
            }
            None => {
                self.state = WorkloadState::Stopped;
                self.message = Some("stopped".into());
            }
        }
    }
}

/// Seconds as the interruption of a time limit carries them (for callers building one).
pub fn time_limit(limit: Seconds, at: DateTime<Utc>) -> StopReason {
    StopReason::TimeLimit { limit, at }
}

#[cfg(test)]
mod tests;
