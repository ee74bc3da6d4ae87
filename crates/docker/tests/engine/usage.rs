//! What members use, measured from their cgroups: a member holding about 200 MiB of anonymous memory
//! under a 256 MiB limit reports it (and its CPU time and processes), an idle one far less, an ended run
//! nothing, a removed one is not found.

use crate::common::*;
use gpuhub_core::node::NodeCapacity;
use gpuhub_core::quantity::MIB;
use gpuhub_core::{Bytes, CpuMilli};
use gpuhub_docker::{DockerEngine, GpuMode, container_id_from_cgroup};
use gpuhub_driver::{
    Engine, EngineError, GpuGrant, Identity, LABEL_OWNER, LABEL_WORKLOAD, MemberSpec, MemberUsage, RunSpec,
};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A run of two members: member 0 (256 MiB) fills and keeps 200 MiB — `dd`'s block buffer, filled by
/// reading `/dev/zero` and held while `dd` waits forever to write it into a pipe nobody reads — and
/// member 1 (64 MiB) only sleeps.
fn two_members(name: &str) -> RunSpec {
    let member = |index: u32, memory_bytes: u64| MemberSpec {
        index,
        hostname: format!("m{index}"),
        node: None,
        cpu_milli: 1000,
        memory_bytes,
        gpus: GpuGrant::None,
        env: BTreeMap::new(),
        mounts: Vec::new(),
    };
    RunSpec {
        image: IMAGE.to_owned(),
        command: vec![
            "sh".into(),
            "-c".into(),
            r#"if [ "$RANK" = 0 ]; then dd if=/dev/zero bs=200M count=1 | sleep 600; else exec sleep 600; fi"#.into(),
        ],
        labels: BTreeMap::from([
            (LABEL_OWNER.to_owned(), "tester".to_owned()),
            (LABEL_WORKLOAD.to_owned(), name.to_owned()),
        ]),
        identity: Identity {
            username: "tester".into(),
            account: "tester".into(),
            uid: 10000,
            gid: 10000,
            home: "/tmp".into(),
            groups: Vec::new(),
        },
        members: vec![member(0, 256 * MIB), member(1, 64 * MIB)],
        pids_limit: 64,
        ..gpuhub_testkit::run_spec(name, 0)
    }
}

fn mib(b: Bytes) -> f64 {
    b.get() as f64 / MIB as f64
}

#[tokio::test]
async fn members_report_what_their_cgroups_use() {
    let rt = runtime().await;
    let node = NodeCapacity::cpu_only("usage-test", CpuMilli(2000), Bytes(1 << 30));
    let engine = DockerEngine::new(rt.clone(), node, GpuMode::None);
    assert!(engine.capabilities().usage);
    let mut cleanup = Cleanup::default();
    let run = unique("usage");
    cleanup.container(&format!("{run}-0"));
    cleanup.container(&format!("{run}-1"));
    cleanup.network(&DockerEngine::run_network(&run));
    let status = engine.submit(&two_members(&run)).await.unwrap();

    // Until member 0 holds its memory (dd says nothing until it ends, which it never does).
    let deadline = Instant::now() + PATIENCE;
    let usage: Vec<MemberUsage> = loop {
        let usage = engine.usage(&run).await.unwrap();
        if usage.len() == 2 && usage[0].memory_used.get() >= 180 * MIB {
            break usage;
        }
        assert!(Instant::now() < deadline, "member 0 never held 180 MiB: {usage:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (busy, idle) = (&usage[0], &usage[1]);
    eprintln!(
        "member 0: {:.1} MiB of {:?} MiB, {:.3} s CPU, pids {:?}; member 1: {:.1} MiB of {:?} MiB, {:.3} s CPU",
        mib(busy.memory_used),
        busy.memory_limit.map(mib),
        busy.cpu_seconds,
        busy.pids,
        mib(idle.memory_used),
        idle.memory_limit.map(mib),
        idle.cpu_seconds
    );
    assert_eq!((busy.index, idle.index), (0, 1));
    assert!(busy.memory_used.get() <= 256 * MIB, "{busy:?}");
    assert_eq!(busy.memory_limit, Some(Bytes(256 * MIB)));
    assert!(busy.cpu_seconds > 0.0, "zeroing 200 MiB takes CPU time: {busy:?}");
    assert_eq!(idle.memory_limit, Some(Bytes(64 * MIB)));
    assert!(idle.memory_used.get() < 16 * MIB, "an idle member holds little: {idle:?}");

    // The processes are the members' own: init, sh, dd and sleep in member 0; each PID's cgroup names
    // its container.
    assert!(busy.pids.len() >= 3, "{busy:?}");
    assert!(!idle.pids.is_empty(), "{idle:?}");
    for (u, member) in [(busy, &status.members[0]), (idle, &status.members[1])] {
        let init = rt.init_pid(&member.engine_id).await.unwrap().expect("a running member has a pid");
        assert!(u.pids.contains(&init), "the init {init} is among {:?}", u.pids);
        for pid in &u.pids {
            let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
            assert_eq!(container_id_from_cgroup(&text).as_deref(), Some(member.engine_id.as_str()), "{text}");
        }
    }

    // Ended members are left out; a removed run is not found.
    engine.cancel(&run, Duration::ZERO).await.unwrap();
    assert_eq!(engine.usage(&run).await.unwrap(), []);
    engine.remove(&run).await.unwrap();
    assert!(matches!(engine.usage(&run).await, Err(EngineError::NotFound(_))));
    assert!(matches!(engine.usage(&unique("never")).await, Err(EngineError::NotFound(_))));
}
