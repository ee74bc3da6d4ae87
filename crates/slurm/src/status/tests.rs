use super::*;
use crate::parse::{sacct, scontrol, squeue};

fn fixture_jobs() -> Vec<Job> {
    squeue::jobs(include_bytes!("../../tests/fixtures/squeue.json")).unwrap()
}

#[test]
fn running_gang_members_nodes_and_gpus() {
    let jobs = fixture_jobs();
    let gang = jobs.iter().find(|j| j.id == 23).unwrap();
    let m = meta(gang).unwrap();
    assert_eq!(m.size, 2);
    assert_eq!(m.labels.get("gpuhub.instance").map(String::as_str), Some("0123456789abcdef"));
    let s = run_status(gang, &m, &Exits::default(), None);
    assert_eq!(s.id, "23");
    assert_eq!(s.members.len(), 2);
    assert_eq!(s.members[0].node.as_deref(), Some("node1"));
    assert_eq!(s.members[1].node.as_deref(), Some("node2"));
    assert_eq!(s.members[0].gpus, ["node1/gpu0"]);
    assert_eq!(s.members[1].gpus, ["node2/gpu0"]);
    assert_eq!(s.members[1].state, MemberState::Running);
    assert_eq!(s.members[1].engine_id, "23.m1");
    assert!(s.pending.is_none() && !s.ended());
    // the two half-GPU jobs hold shards of the same GPU of node1
    let a = jobs.iter().find(|j| j.id == 24).unwrap();
    let b = jobs.iter().find(|j| j.id == 25).unwrap();
    let ga = run_status(a, &meta(a).unwrap(), &Exits::default(), None).members[0].gpus.clone();
    let gb = run_status(b, &meta(b).unwrap(), &Exits::default(), None).members[0].gpus.clone();
    assert_eq!(
        (ga.as_slice(), gb.as_slice()),
        (["node1/gpu1".to_owned()].as_slice(), ["node1/gpu1".to_owned()].as_slice())
    );
    // a job without gpuhub's comment is not a run
    assert!(jobs.iter().filter(|j| j.name == "plain").all(|j| meta(j).is_none()));
}

#[test]
fn ended_members_take_their_codes_from_files_then_steps_then_the_job() {
    let acct = sacct::jobs(include_str!("../../tests/fixtures/sacct-steps.txt")).unwrap();
    let j22 = scontrol::job(include_str!("../../tests/fixtures/scontrol-ended.txt")).unwrap();
    let m = RunMeta { size: 2, ..Default::default() };
    let s = run_status(&j22, &m, &Exits { acct: acct.get(&22), files: BTreeMap::new() }, None);
    assert_eq!(s.members.iter().map(|m| m.state).collect::<Vec<_>>(), [MemberState::Exited(7), MemberState::Exited(7)]);
    assert_eq!(s.members[1].node.as_deref(), Some("node2"), "from the step");
    assert!(s.ended());
    // killed steps: 128 + 9
    let j23 = acct.get(&23).unwrap();
    let s = run_status(
        &j23.as_job(),
        &meta(&j23.as_job()).unwrap(),
        &Exits { acct: Some(j23), files: BTreeMap::new() },
        None,
    );
    assert_eq!(s.members[0].state, MemberState::Exited(137));
    // the exit files first (accounting says 15:0 for a container step that exited 143), then the
    // steps, then the job's code
    let files = BTreeMap::from([(0, 143)]);
    let s = run_status(&j22, &m, &Exits { acct: acct.get(&22), files: files.clone() }, None);
    assert_eq!(
        s.members.iter().map(|m| m.state).collect::<Vec<_>>(),
        [MemberState::Exited(143), MemberState::Exited(7)]
    );
    let s = run_status(&j22, &m, &Exits { acct: None, files }, None);
    assert_eq!(
        s.members.iter().map(|m| m.state).collect::<Vec<_>>(),
        [MemberState::Exited(143), MemberState::Exited(0)]
    );
    // cancelled while pending: never ran, no node
    let j26 = acct.get(&26).unwrap();
    let s = run_status(
        &j26.as_job(),
        &meta(&j26.as_job()).unwrap(),
        &Exits { acct: Some(j26), files: BTreeMap::new() },
        None,
    );
    assert_eq!((s.members[0].state, s.members[0].node.clone()), (MemberState::Exited(0), None));
}

#[test]
fn comments_round_trip_without_the_private_key() {
    let labels = BTreeMap::from([("gpuhub.workload".to_owned(), "w9".to_owned())]);
    let c = comment(&labels, 3, "gpuhub-x-w9.1a", "alice01");
    assert_eq!(
        c,
        r#"{"gpuhub.members":"3","gpuhub.slurm.account":"alice01","gpuhub.slurm.dir":"gpuhub-x-w9.1a","gpuhub.workload":"w9"}"#
    );
    let job = Job { comment: c, user: "other-name-of-the-uid".into(), ..Job::default() };
    let m = meta(&job).unwrap();
    assert_eq!((m.size, m.dir.as_deref(), m.account.as_deref()), (3, Some("gpuhub-x-w9.1a"), Some("alice01")));
    assert!(!m.labels.contains_key(DIR_KEY) && !m.labels.contains_key(ACCOUNT_KEY));
    assert_eq!(m.log_user(&job), "alice01", "the account submitted for, not Slurm's name of its UID");
    let old = RunMeta { account: None, ..m };
    assert_eq!(old.log_user(&job), "other-name-of-the-uid");
    assert!(meta(&Job { comment: r#"{"other":"x"}"#.into(), ..Job::default() }).is_none());
    assert!(meta(&Job { comment: "not json".into(), ..Job::default() }).is_none());
}

#[test]
fn pending_reasons_positions_and_estimates() {
    let t = |r: &str| translate_reason(r).0;
    assert_eq!(t("Resources"), "resources");
    assert_eq!(t("Priority"), "priority");
    assert_eq!(t("ReqNodeNotAvail,_UnavailableNodes:node1"), "unschedulable");
    assert_eq!(t("PartitionDown"), "unschedulable");
    assert_eq!(t("NodeDown"), "unschedulable");
    assert_eq!(t("PartitionNodeLimit"), "unschedulable");
    assert_eq!(t("QOSMaxGRESPerUser"), "queue-limit");
    assert_eq!(t("AssocGrpGRES"), "queue-limit");
    assert_eq!(t("JobHeldUser"), "held");
    assert_eq!(t("JobHeldAdmin"), "held");
    assert_eq!(t("Dependency"), "dependency");
    assert_eq!(t("Reservation"), "reservation");
    assert_eq!(t("None"), "pending");

    let jobs = fixture_jobs();
    let pos = positions(&jobs);
    // 26 (Resources, high priority) is first of partition gpu; held 28 (priority 0) is after it
    assert_eq!((pos.get(&26), pos.get(&28)), (Some(&1), Some(&2)));
    assert!(!pos.contains_key(&23), "running jobs have no place");
    let mut two = vec![
        Job { id: 5, partition: "a".into(), priority: 10, submit_time: 50, state: "PENDING".into(), ..Job::default() },
        Job { id: 6, partition: "a".into(), priority: 10, submit_time: 40, state: "PENDING".into(), ..Job::default() },
        Job { id: 7, partition: "b".into(), priority: 1, state: "PENDING".into(), ..Job::default() },
    ];
    let p = positions(&two);
    assert_eq!((p[&6], p[&5], p[&7]), (1, 2, 1), "ties by submit time; per partition");
    two[0].priority = 11;
    assert_eq!(positions(&two)[&5], 1);

    let now = DateTime::from_timestamp(1_795_458_800, 0).unwrap();
    let pending = jobs.iter().find(|j| j.id == 26).unwrap();
    let info = pending_info(pending, Some(1), now);
    assert_eq!(info.reason, "resources");
    assert_eq!(info.message, "waiting in Slurm partition gpu: Resources (the resources it asks for are in use)");
    assert_eq!(info.position, Some(1));
    assert_eq!(info.estimated_start, None, "a year ahead is Slurm's unknown");
    let soon = Job { start_time: now.timestamp() + 600, ..pending.clone() };
    assert_eq!(pending_info(&soon, None, now).estimated_start, DateTime::from_timestamp(now.timestamp() + 600, 0));
    let s = run_status(pending, &meta(pending).unwrap(), &Exits::default(), Some(info.clone()));
    assert_eq!(s.pending, Some(info));
    assert!(s.members.iter().all(|m| m.state == MemberState::Pending && m.node.is_none()));
}

#[test]
fn a_job_its_node_failure_ended_says_so() {
    let labels = BTreeMap::from([("gpuhub.workload".to_owned(), "w1".to_owned())]);
    let job = |state: &str| Job {
        id: 30,
        state: state.into(),
        comment: comment(&labels, 1, "d", "alice"),
        nodes: vec!["node1".into()],
        ..Default::default()
    };
    let failed = job("NODE_FAIL");
    assert!(node_failed(&failed));
    let s = run_status(&failed, &meta(&failed).unwrap(), &Exits::default(), None);
    assert_eq!(s.ended_by_engine(), Some(gpuhub_driver::ENDED_BY_NODE_FAIL));
    assert!(s.ended(), "its member ended: {s:?}");
    // its own failure, a cancel, a time limit or a run still going are not the node's
    for state in ["FAILED", "CANCELLED by 0", "TIMEOUT", "RUNNING", "PENDING", "OUT_OF_MEMORY"] {
        let j = job(state);
        assert!(!node_failed(&j), "{state}");
        assert_eq!(run_status(&j, &meta(&j).unwrap(), &Exits::default(), None).ended_by_engine(), None, "{state}");
    }
}
