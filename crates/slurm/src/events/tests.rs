use super::*;
use gpuhub_driver::{LABEL_WORKLOAD, MemberStatus};
use std::collections::BTreeMap;

fn run(id: &str, states: &[MemberState]) -> Tracked {
    Tracked {
        status: RunStatus {
            id: id.into(),
            labels: BTreeMap::from([(LABEL_WORKLOAD.to_owned(), format!("w{id}"))]),
            size: states.len() as u32,
            members: states
                .iter()
                .enumerate()
                .map(|(i, s)| MemberStatus {
                    index: i as u32,
                    engine_id: format!("{id}.m{i}"),
                    node: (*s != MemberState::Pending).then(|| format!("node{}", i + 1)),
                    state: *s,
                    gpus: vec![],
                })
                .collect(),
            pending: None,
        },
        dir: Some(format!("d{id}")),
    }
}

fn started(run: &str, member: u32) -> EngineEvent {
    EngineEvent::Started { run: run.into(), workload: format!("w{run}"), member }
}

fn exited(run: &str, member: u32, exit_code: i64) -> EngineEvent {
    EngineEvent::Exited { run: run.into(), workload: format!("w{run}"), member, exit_code }
}

use MemberState::{Exited, Pending, Running};

#[test]
fn diffs_member_states_between_polls() {
    let mut t = Tracker::default();
    // the first poll only learns
    assert!(t.update(vec![run("1", &[Running, Running]), run("2", &[Pending])]).is_empty());
    // 2 starts; 1's members end (member 1 with 3)
    let ev = t.update(vec![run("1", &[Exited(0), Exited(3)]), run("2", &[Running])]);
    assert_eq!(ev, [exited("1", 0, 0), exited("1", 1, 3), started("2", 0)]);
    // nothing changed: nothing sent
    assert!(t.update(vec![run("1", &[Exited(0), Exited(3)]), run("2", &[Running])]).is_empty());
    // a new run that started and ended between two polls: Started then Exited
    let ev = t.update(vec![run("1", &[Exited(0), Exited(3)]), run("2", &[Running]), run("3", &[Exited(1)])]);
    assert_eq!(ev, [started("3", 0), exited("3", 0, 1)]);
    // run 1 removed, run 2 gone behind gpuhub's back
    let ev = t.update(vec![run("3", &[Exited(1)])]);
    assert_eq!(
        ev,
        [
            EngineEvent::Removed { run: "1".into(), workload: "w1".into(), member: 0 },
            EngineEvent::Removed { run: "1".into(), workload: "w1".into(), member: 1 },
            EngineEvent::Removed { run: "2".into(), workload: "w2".into(), member: 0 },
        ]
    );
}

#[test]
fn a_run_cancelled_while_pending_exits_without_starting() {
    let mut t = Tracker::default();
    t.update(vec![run("4", &[Pending])]);
    let mut cancelled = run("4", &[Exited(0)]);
    cancelled.status.members[0].node = None;
    assert_eq!(t.update(vec![cancelled]), [exited("4", 0, 0)]);
}
