use super::*;

fn at(s: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(s, 0).unwrap()
}

fn queued(kind: WorkloadKind, size: u32) -> Workload {
    let mut w = Workload::new("i", "o", "n", kind, "x", at(0));
    w.size = size;
    // a message that looks like a preemption must not be taken for one
    w.message = Some("preempted: not really".into());
    w
}

fn placed(size: u32) -> Vec<Member> {
    (0..size).map(|i| Member { node: Some("n".into()), gpus: vec![format!("G{i}")], ..Member::pending(i) }).collect()
}

fn running(m: &[Member]) -> Vec<Member> {
    m.iter()
        .map(|m| Member { state: MemberPhase::Running, engine_id: Some(format!("c{}", m.index)), ..m.clone() })
        .collect()
}

/// A workload placed by gpuhub and running on the engine as run `r`.
fn started(kind: WorkloadKind, size: u32) -> Workload {
    let mut w = queued(kind, size);
    w.apply(Event::Placed { members: placed(size) }, at(1)).unwrap();
    assert_eq!(w.state, WorkloadState::Starting);
    w.apply(Event::Submitted { run: "r".into(), members: running(&w.members), ports: Default::default() }, at(2))
        .unwrap();
    assert_eq!((w.state, w.started_at), (WorkloadState::Running, Some(at(2))));
    w
}

#[test]
fn a_job_runs_and_keeps_what_it_held() {
    let mut w = started(WorkloadKind::Job, 1);
    w.apply(Event::MemberExited { index: 0, code: 0 }, at(5)).unwrap();
    assert_eq!((w.state, w.exit_code, w.finished_at), (WorkloadState::Succeeded, Some(0), Some(at(5))));
    assert_eq!(w.gpus, ["G0"], "a finished workload shows the GPUs it held");
    assert_eq!(w.members[0].state, MemberPhase::Exited);
    // an ended workload cannot end again, and a stop of it is refused without changing it
    let before = w.clone();
    assert!(w.apply(Event::StopRequested { reason: StopReason::User { by: "o".into(), at: at(6) } }, at(6)).is_err());
    assert!(w.apply(Event::MemberExited { index: 0, code: 3 }, at(6)).is_err());
    assert_eq!(w, before);
    // started again: queued, the old run kept only to be removed at the next launch
    w.apply(Event::Requeue, at(7)).unwrap();
    assert_eq!((w.state, w.queued_at, w.stale_run()), (WorkloadState::Queued, at(7), Some("r")));
    assert!(w.gpus.is_empty() && w.members.is_empty() && w.exit_code.is_none());
    assert!(w.clone().restore(WorkloadState::Running).apply(Event::Requeue, at(8)).is_err());
}

#[test]
fn exit_codes_decide_by_kind() {
    for (kind, code, want) in [
        (WorkloadKind::Job, 3, WorkloadState::Failed),
        (WorkloadKind::Workspace, 0, WorkloadState::Stopped),
        (WorkloadKind::Workspace, 1, WorkloadState::Failed),
    ] {
        let mut w = started(kind, 1);
        w.apply(Event::MemberExited { index: 0, code }, at(5)).unwrap();
        assert_eq!(w.state, want, "{kind:?} {code}");
    }
    let mut w = started(WorkloadKind::Job, 1);
    w.apply(Event::MemberExited { index: 0, code: 137 }, at(5)).unwrap();
    assert!(w.message.as_deref().unwrap().contains("out of memory or SIGKILL"));
}

#[test]
fn a_member_failing_fails_the_gang_with_its_code() {
    let mut w = started(WorkloadKind::Job, 2);
    w.apply(Event::MemberExited { index: 1, code: 7 }, at(5)).unwrap();
    assert!(w.failing(), "member 0 still runs and must be stopped");
    assert_eq!(w.state, WorkloadState::Running);
    // member 0 is killed by the controller's stop
    w.apply(Event::MemberExited { index: 0, code: 137 }, at(6)).unwrap();
    assert!(!w.failing());
    assert_eq!((w.state, w.exit_code), (WorkloadState::Failed, Some(7)));
    assert_eq!(w.message.as_deref(), Some("member 1 exited with code 7; the run failed"));
    // a gang whose members all succeed succeeds, whatever order they end in
    let mut w = started(WorkloadKind::Job, 2);
    w.apply(Event::MemberExited { index: 1, code: 0 }, at(5)).unwrap();
    assert!(!w.failing() && w.state == WorkloadState::Running);
    w.apply(Event::MemberExited { index: 0, code: 0 }, at(6)).unwrap();
    assert_eq!(w.state, WorkloadState::Succeeded);
}

#[test]
fn a_gang_runs_once_every_member_does() {
    let mut w = queued(WorkloadKind::Job, 2);
    w.apply(Event::Placed { members: placed(2) }, at(1)).unwrap();
    let mut half = running(&w.members);
    half[1].state = MemberPhase::Pending;
    w.apply(Event::Submitted { run: "r".into(), members: half, ports: Default::default() }, at(2)).unwrap();
    assert_eq!(w.state, WorkloadState::Starting);
    w.apply(Event::MemberRunning { index: 1, node: None, gpus: None }, at(3)).unwrap();
    assert_eq!((w.state, w.started_at), (WorkloadState::Running, Some(at(3))));
    assert_eq!(w.gpus, ["G0", "G1"]);
}

#[test]
fn a_run_that_ended_before_it_was_recorded_still_ends() {
    let mut w = queued(WorkloadKind::Job, 1);
    w.apply(Event::Placed { members: placed(1) }, at(1)).unwrap();
    let mut done = running(&w.members);
    done[0].state = MemberPhase::Exited;
    done[0].exit_code = Some(0);
    w.apply(Event::Submitted { run: "r".into(), members: done, ports: Default::default() }, at(2)).unwrap();
    assert_eq!((w.state, w.started_at.is_some()), (WorkloadState::Succeeded, true));
}

#[test]
fn an_engine_that_queues_keeps_the_workload_queued_with_its_run() {
    let mut w = queued(WorkloadKind::Job, 2);
    let pending: Vec<Member> = (0..2).map(Member::pending).collect();
    w.apply(
        Event::Submitted { run: "1001".into(), members: pending, ports: [("lab".to_owned(), 20000)].into() },
        at(1),
    )
    .unwrap();
    assert!(w.waits_in_engine());
    assert_eq!(w.members[0].ports["lab"], 20000);
    assert_eq!((w.state, w.run_id.as_deref()), (WorkloadState::Queued, Some("1001")));
    assert!(w.apply(Event::Placed { members: placed(2) }, at(2)).is_err(), "the engine places it, not gpuhub");
    w.apply(Event::Waiting { message: "slurm: Resources".into() }, at(2)).unwrap();
    for i in 0..2 {
        let gpus = Some(vec![format!("node{i}/gpu0")]);
        w.apply(Event::MemberRunning { index: i, node: Some(format!("node{i}")), gpus }, at(3)).unwrap();
    }
    assert_eq!(w.state, WorkloadState::Running);
    assert_eq!(w.members[1].node.as_deref(), Some("node1"));
    // a stop of a run waiting in the engine keeps the workload until the engine has cancelled it
    let mut q = queued(WorkloadKind::Job, 1);
    q.apply(
        Event::Submitted { run: "1002".into(), members: vec![Member::pending(0)], ports: Default::default() },
        at(1),
    )
    .unwrap();
    q.apply(Event::StopRequested { reason: StopReason::User { by: "o".into(), at: at(2) } }, at(2)).unwrap();
    assert_eq!(q.state, WorkloadState::Queued);
    q.apply(Event::RunStopped { code: None }, at(3)).unwrap();
    assert_eq!((q.state, q.message.as_deref()), (WorkloadState::Stopped, Some("stopped by o")));
}

#[test]
fn the_typed_reason_decides_not_the_message() {
    let pre =
        StopReason::Preempted { by: "alice/t3".into(), queue: "vision".into(), at: at(2), detail: "reclaim".into() };
    let mut w = started(WorkloadKind::Job, 1);
    w.apply(Event::StopRequested { reason: pre.clone() }, at(3)).unwrap();
    assert_eq!(w.state, WorkloadState::Running, "it runs until the stop lands");
    w.apply(Event::RunStopped { code: Some(143) }, at(4)).unwrap();
    assert_eq!((w.state, w.finished_at, w.gpus.len()), (WorkloadState::Queued, None, 0));
    assert_eq!(w.interruption, Some(pre));
    assert_eq!(w.message.as_deref(), Some("preempted by alice/t3: reclaim; queued again"));
    assert_eq!(w.stale_run(), Some("r"));
    // its next run is not taken for a failing one because of the preempted run's exit code
    w.apply(Event::Placed { members: placed(1) }, at(5)).unwrap();
    w.apply(Event::Submitted { run: "r2".into(), members: running(&w.members), ports: Default::default() }, at(6))
        .unwrap();
    assert_eq!((w.state, w.exit_code, w.failing()), (WorkloadState::Running, None, false));

    let mut w = started(WorkloadKind::Job, 1);
    w.apply(Event::RunStopped { code: Some(143) }, at(4)).unwrap();
    assert_eq!(w.state, WorkloadState::Stopped, "no reason is a plain stop, whatever the message says");

    let limit = StopReason::TimeLimit { limit: Seconds(60), at: at(3) };
    let mut w = started(WorkloadKind::Job, 1);
    w.apply(Event::StopRequested { reason: limit.clone() }, at(3)).unwrap();
    w.apply(Event::RunStopped { code: Some(143) }, at(4)).unwrap();
    assert_eq!(w.state, WorkloadState::Failed);
    assert_eq!(w.message.as_deref(), Some("reached its run-time limit of 1m"));
    let mut w = started(WorkloadKind::Workspace, 1);
    w.apply(Event::StopRequested { reason: limit.clone() }, at(3)).unwrap();
    w.apply(Event::RunStopped { code: None }, at(4)).unwrap();
    assert_eq!(w.state, WorkloadState::Stopped);
    // a job that finished by itself before the stop landed succeeded
    let mut w = started(WorkloadKind::Job, 1);
    w.apply(Event::StopRequested { reason: limit }, at(3)).unwrap();
    w.apply(Event::MemberExited { index: 0, code: 0 }, at(4)).unwrap();
    assert_eq!((w.state, w.interruption), (WorkloadState::Succeeded, None));

    let mut w = started(WorkloadKind::Workspace, 1);
    w.apply(Event::StopRequested { reason: StopReason::User { by: "bob".into(), at: at(3) } }, at(3)).unwrap();
    w.apply(Event::RunStopped { code: Some(0) }, at(4)).unwrap();
    assert_eq!((w.state, w.message.as_deref()), (WorkloadState::Stopped, Some("stopped by bob")));
}

#[test]
fn stops_before_a_start_and_failures_to_start() {
    let mut w = queued(WorkloadKind::Job, 1);
    w.apply(Event::StopRequested { reason: StopReason::User { by: "o".into(), at: at(1) } }, at(1)).unwrap();
    assert_eq!((w.state, w.message.as_deref()), (WorkloadState::Stopped, Some("stopped before it started")));

    let mut w = queued(WorkloadKind::Job, 1);
    w.apply(Event::Placed { members: placed(1) }, at(1)).unwrap();
    w.apply(Event::StartDeferred { why: "engine unavailable".into() }, at(2)).unwrap();
    assert_eq!((w.state, w.gpus.len(), w.run_id.as_ref()), (WorkloadState::Queued, 0, None));
    w.apply(Event::Placed { members: placed(1) }, at(3)).unwrap();
    w.apply(Event::StartFailed { why: "image gone".into() }, at(4)).unwrap();
    assert_eq!(w.state, WorkloadState::Failed);
    assert!(matches!(w.interruption, Some(StopReason::EngineFailure { .. })));

    let mut w = queued(WorkloadKind::Job, 1);
    w.apply(Event::Placed { members: placed(1) }, at(1)).unwrap();
    w.apply(Event::Orphaned, at(2)).unwrap();
    assert_eq!((w.state, w.message.as_deref()), (WorkloadState::Queued, Some("queued again after a restart")));

    let mut w = started(WorkloadKind::Workspace, 1);
    w.apply(Event::Lost { why: "container was removed outside gpuhub".into() }, at(5)).unwrap();
    assert_eq!((w.state, w.finished_at), (WorkloadState::Lost, Some(at(5))));
}

#[test]
fn late_events_of_an_old_run_change_nothing() {
    let mut w = started(WorkloadKind::Job, 1);
    w.apply(Event::MemberExited { index: 0, code: 0 }, at(5)).unwrap();
    w.apply(Event::Requeue, at(6)).unwrap();
    let before = w.clone();
    assert!(w.apply(Event::MemberExited { index: 0, code: 9 }, at(7)).is_err());
    assert!(w.apply(Event::MemberRunning { index: 0, node: None, gpus: None }, at(7)).is_err());
    assert_eq!(w, before);
}

#[test]
fn a_pull_queues_fails_or_is_stopped_and_holds_nothing() {
    let pulling = || {
        let mut w = queued(WorkloadKind::Job, 1).pull_first();
        w.message = Some("pulling x".into());
        w
    };
    let mut w = pulling();
    assert!(w.apply(Event::Placed { members: placed(1) }, at(1)).is_err(), "nothing is placed while pulling");
    let fetched = crate::pull::PullView {
        status: "Pull complete".into(),
        current_bytes: 24 << 20,
        total_bytes: 24 << 20,
        layers: 2,
        layers_done: 2,
    };
    w.apply(Event::Pulled { fetched: Some(fetched) }, at(5)).unwrap();
    assert_eq!(
        (w.state, w.queued_at, w.message.as_deref()),
        (WorkloadState::Queued, at(5), Some("pulled 24MiB (2 layers); queued"))
    );
    assert!(w.apply(Event::Pulled { fetched: None }, at(6)).is_err(), "only a pulling workload ends a pull");
    let mut w = pulling();
    w.apply(Event::Pulled { fetched: None }, at(5)).unwrap();
    assert_eq!(w.message.as_deref(), Some("pulled; queued"), "a pull that reported nothing");

    let mut w = pulling();
    w.apply(Event::PullFailed { why: "manifest unknown".into() }, at(3)).unwrap();
    assert_eq!((w.state, w.finished_at), (WorkloadState::Failed, Some(at(3))));
    assert_eq!(w.message.as_deref(), Some("could not pull x: manifest unknown"));
    assert!(
        matches!(w.interruption, Some(StopReason::EngineFailure { ref detail, .. }) if detail == "manifest unknown")
    );
    assert_eq!((w.held_since, w.held_until), (None, None), "a pull holds nothing");

    let mut w = pulling();
    w.apply(Event::StopRequested { reason: StopReason::User { by: "o".into(), at: at(2) } }, at(2)).unwrap();
    assert_eq!(w.state, WorkloadState::Stopped);
    assert!(w.apply(Event::PullFailed { why: "late".into() }, at(4)).is_err(), "a late pull result changes nothing");
}

#[test]
fn an_engine_restart_requeues_in_the_old_place_or_fails() {
    let reason = StopReason::EngineRestarted { detail: "the engine's event stream broke".into(), at: at(9) };
    let restarted = |requeue| Event::EngineRestarted { reason: reason.clone(), code: Some(143), requeue };
    // requeued: its place in line (queued_at) kept, holding nothing, the old run kept for removal
    let mut w = started(WorkloadKind::Job, 2);
    w.apply(restarted(true), at(10)).unwrap();
    assert_eq!((w.state, w.queued_at, w.held_until), (WorkloadState::Queued, at(0), Some(at(10))));
    assert_eq!((w.exit_code, w.finished_at, w.stale_run()), (None, None, Some("r")));
    assert!(w.gpus.is_empty() && w.members.is_empty());
    assert_eq!(w.interruption.as_ref().map(StopReason::name), Some("engine-restarted"));
    let m = w.message.clone().unwrap();
    assert_eq!(m, "engine-restarted: the engine's event stream broke; queued again in its old place");
    // its next run is a fresh one that ends with its own code
    w.apply(Event::Placed { members: placed(2) }, at(11)).unwrap();
    assert_eq!((w.run_id.as_deref(), w.interruption.as_ref()), (None, None));
    w.apply(Event::Submitted { run: "r2".into(), members: running(&w.members), ports: Default::default() }, at(12))
        .unwrap();
    w.apply(Event::MemberExited { index: 0, code: 3 }, at(13)).unwrap();
    w.apply(Event::MemberExited { index: 1, code: 0 }, at(13)).unwrap();
    assert_eq!((w.state, w.exit_code), (WorkloadState::Failed, Some(3)));
    // where the engine places (a Slurm node failed): submitted anew, its next run's end is its own
    let mut e = queued(WorkloadKind::Job, 1);
    let pending = |run: &str| Event::Submitted { run: run.into(), members: placed(1), ports: Default::default() };
    e.apply(pending("j1"), at(1)).unwrap();
    e.apply(Event::MemberRunning { index: 0, node: Some("n".into()), gpus: None }, at(2)).unwrap();
    e.apply(Event::EngineRestarted { reason: reason.clone(), code: Some(0), requeue: true }, at(3)).unwrap();
    assert_eq!((e.state, e.stale_run()), (WorkloadState::Queued, Some("j1")));
    e.apply(pending("j2"), at(4)).unwrap();
    assert_eq!((e.run_id.as_deref(), e.interruption.as_ref()), (Some("j2"), None));
    e.apply(Event::MemberRunning { index: 0, node: Some("n".into()), gpus: None }, at(5)).unwrap();
    e.apply(Event::MemberExited { index: 0, code: 3 }, at(6)).unwrap();
    assert_eq!((e.state, e.exit_code), (WorkloadState::Failed, Some(3)));
    // a workspace comes back too
    let mut ws = started(WorkloadKind::Workspace, 1);
    ws.apply(restarted(true), at(10)).unwrap();
    assert_eq!(ws.state, WorkloadState::Queued);
    // on_engine_restart = "fail": failed with the kill's code, the reason kept
    let mut f = started(WorkloadKind::Job, 1);
    f.apply(restarted(false), at(10)).unwrap();
    assert_eq!((f.state, f.exit_code, f.finished_at), (WorkloadState::Failed, Some(143), Some(at(10))));
    assert_eq!(f.interruption.as_ref().map(StopReason::name), Some("engine-restarted"));
    assert_eq!(
        f.message.as_deref(),
        Some(
            "engine-restarted: the engine's event stream broke; failed with exit code 143 (on_engine_restart = \"fail\")"
        )
    );
    // an ended workload, or a queued one without a run, is not killed by anything
    let before = f.clone();
    assert!(f.apply(restarted(true), at(11)).is_err());
    assert_eq!(f, before);
    assert!(queued(WorkloadKind::Job, 1).apply(restarted(true), at(11)).is_err());
}

#[test]
fn a_service_that_exits_is_queued_again_after_its_backoff_and_a_stop_ends_it() {
    use crate::service::{Service, ServiceAccess, ServiceSpec};
    let mut w = started(WorkloadKind::Service, 1);
    w.service = Some(Service::new(ServiceSpec { port: 8080, ready: None, access: ServiceAccess::Owner }));
    w.apply(Event::MemberExited { index: 0, code: 137 }, at(5)).unwrap();
    assert_eq!((w.state, w.exit_code, w.held_until), (WorkloadState::Queued, Some(137), Some(at(5))));
    assert!(w.members.is_empty() && w.gpus.is_empty() && w.stale_run() == Some("r"), "{w:?}");
    let s = w.service.clone().unwrap();
    assert_eq!((s.restarts, s.restart_at, s.crash_loop), (1, Some(at(15)), false));
    assert_eq!(w.message.as_deref(), Some("exited with code 137; restarting in 10s (restart 1)"));
    // started again, it runs; a stop by its owner ends it for good
    w.apply(Event::Placed { members: placed(1) }, at(20)).unwrap();
    w.apply(Event::Submitted { run: "r2".into(), members: running(&w.members), ports: Default::default() }, at(21))
        .unwrap();
    assert_eq!((w.state, w.exit_code), (WorkloadState::Running, None));
    let by = StopReason::User { by: "o".into(), at: at(30) };
    w.apply(Event::StopRequested { reason: by }, at(30)).unwrap();
    w.apply(Event::RunStopped { code: Some(143) }, at(31)).unwrap();
    assert_eq!((w.state, w.service.as_ref().unwrap().restarts), (WorkloadState::Stopped, 1));
    // a job that exits the same way is not restarted
    let mut j = started(WorkloadKind::Job, 1);
    j.apply(Event::MemberExited { index: 0, code: 137 }, at(5)).unwrap();
    assert_eq!(j.state, WorkloadState::Failed);
}

#[test]
fn a_service_run_that_never_ran_is_a_quick_failure_even_after_a_long_one() {
    use crate::service::{Service, ServiceAccess, ServiceSpec};
    let mut w = started(WorkloadKind::Service, 1);
    w.service = Some(Service::new(ServiceSpec { port: 1, ready: None, access: ServiceAccess::Owner }));
    // up for a day: no quick failure
    w.apply(Event::MemberExited { index: 0, code: 1 }, at(86_400)).unwrap();
    assert_eq!(w.service.as_ref().unwrap().failures, 1);
    // the next run exits while starting, long after the first one started: a quick failure
    w.apply(Event::Placed { members: placed(1) }, at(86_410)).unwrap();
    w.apply(Event::Submitted { run: "r2".into(), members: placed(1), ports: Default::default() }, at(86_411)).unwrap();
    w.apply(Event::MemberExited { index: 0, code: 1 }, at(86_412)).unwrap();
    let s = w.service.as_ref().unwrap();
    assert_eq!((w.state, s.failures, s.restarts), (WorkloadState::Queued, 2, 2), "{w:?}");
}

#[test]
fn a_rolling_update_switches_to_its_ready_run_or_fails_keeping_the_old_one() {
    use crate::service::{Rollout, Service, ServiceAccess, ServiceSpec, UpdateState};
    let mut w = started(WorkloadKind::Service, 1);
    w.service = Some(Service::new(ServiceSpec { port: 8080, ready: None, access: ServiceAccess::Owner }));
    let rollout = |s: i64| Rollout {
        image: "x:2".into(),
        command: vec!["v2".into()],
        env: Default::default(),
        change: "image x → x:2 (by o)".into(),
        run: None,
        members: placed(1),
        since: at(s),
        deadline: at(s + 300),
    };
    // only a running service begins one, and only one at a time; the switch needs its run
    let mut job = started(WorkloadKind::Job, 1);
    assert!(job.apply(Event::RolloutBegun { rollout: rollout(10) }, at(10)).is_err());
    w.apply(Event::RolloutBegun { rollout: rollout(10) }, at(10)).unwrap();
    assert!(w.apply(Event::RolloutBegun { rollout: rollout(11) }, at(11)).is_err());
    assert!(w.apply(Event::RolloutReady, at(11)).is_err());
    assert_eq!(w.service.as_ref().unwrap().update.as_ref().unwrap().state, UpdateState::Rolling);
    w.apply(Event::RolloutSubmitted { run: "r2".into(), members: running(&placed(1)) }, at(11)).unwrap();
    assert_eq!((w.run_id.as_deref(), w.image.as_str()), (Some("r"), "x"), "the old run serves meanwhile");
    w.apply(Event::RolloutReady, at(20)).unwrap();
    assert_eq!((w.run_id.as_deref(), w.image.as_str(), w.state), (Some("r2"), "x:2", WorkloadState::Running));
    assert_eq!((w.held_since, w.started_at, w.command.clone()), (Some(at(10)), Some(at(20)), vec!["v2".into()]));
    assert_eq!(w.members[0].engine_id.as_deref(), Some("c0"));
    let s = w.service.clone().unwrap();
    assert!(s.rollout.is_none() && s.update.unwrap().state == UpdateState::Done);
    assert_eq!(s.restarts, 0, "an update is no restart");
    // a failed one keeps the serving run and its terms
    w.apply(Event::RolloutBegun { rollout: rollout(30) }, at(30)).unwrap();
    w.apply(Event::RolloutFailed { why: "not ready".into() }, at(40)).unwrap();
    let update = w.service.as_ref().unwrap().update.clone().unwrap();
    assert_eq!(
        (update.state, update.message.as_str()),
        (UpdateState::Failed, "update failed: not ready; the old run kept serving, with the old terms")
    );
    assert_eq!((w.run_id.as_deref(), w.held_since), (Some("r2"), Some(at(10))));
    assert!(w.apply(Event::RolloutFailed { why: "again".into() }, at(41)).is_err(), "none under way");
    // restarts an engine makes itself are counted as they grow; a new member's count starts again
    for (count, want) in [(2, 2), (2, 2), (5, 5), (1, 6)] {
        w.apply(Event::EngineRestarts { count }, at(50)).unwrap();
        assert_eq!(w.service.as_ref().unwrap().restarts, want, "after a count of {count}");
    }
}
