//! The engine against a real cluster, when `GPUHUB_TEST_KUBECONFIG` names a kubeconfig (its namespace
//! `gpuhub-test` must exist, with the rights of `deploy/kubernetes/rbac.yaml`): a job with its exit
//! code and output as its owner's uid, a workspace with exec and its pod ip, stopped with its record
//! kept, a two-member gang with its rank variables (admitted whole by gpuhub: gated, pinned, ungated),
//! a gang that fits nowhere left gated with why, and a service whose rollout crash-loops reported failed
//! and rolled back. Without the variable it prints why it skips.
//! Never run here (no cluster can be installed on the test machine): see README, "Kubernetes".

use futures::StreamExt;
use gpuhub_driver::{Engine, ExecSpec, Identity, LABEL_INSTANCE, LABEL_WORKLOAD, MemberRef, MemberState, RunSpec};
use gpuhub_kube::{KubeConfig, KubeEngine};
use gpuhub_testkit::process::eventually;
use gpuhub_testkit::run_spec;
use std::collections::BTreeMap;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(300);

async fn engine() -> Option<KubeEngine> {
    let Ok(path) = std::env::var("GPUHUB_TEST_KUBECONFIG") else {
        // straight to the process's stderr, past the test harness's capture: visible in CI's output
        let _ = std::io::Write::write_all(&mut std::io::stderr(), b"skipped: GPUHUB_TEST_KUBECONFIG is not set\n");
        return None;
    };
    let config = KubeConfig {
        kubeconfig: Some(path.into()),
        namespace: "gpuhub-test".into(),
        grace_seconds: 2,
        ..Default::default()
    };
    Some(KubeEngine::connect(config).await.expect("the cluster of GPUHUB_TEST_KUBECONFIG answers"))
}

fn image() -> String {
    std::env::var("GPUHUB_BUSYBOX_IMAGE").unwrap_or_else(|_| "busybox:1.36".into())
}

fn spec(name: &str, kind: &str, members: u32, command: &[&str]) -> RunSpec {
    let unique = format!("{name}-{}", std::process::id());
    let mut spec = RunSpec {
        name: unique.clone(),
        image: image(),
        command: command.iter().map(|s| (*s).to_owned()).collect(),
        labels: BTreeMap::from([
            (LABEL_WORKLOAD.to_owned(), unique),
            (LABEL_INSTANCE.to_owned(), "cluster-test".to_owned()),
            ("gpuhub.kind".to_owned(), kind.to_owned()),
        ]),
        identity: Identity { uid: 1001, gid: 1001, home: "/tmp".into(), ..run_spec(name, 0).identity },
        pids_limit: 256,
        ..run_spec(name, members)
    };
    for m in &mut spec.members {
        (m.node, m.cpu_milli, m.memory_bytes) = (None, 100, 64 << 20);
    }
    spec
}

/// Waits until every member of `run` has ended, by the engine's events; their exit codes.
async fn ended(e: &KubeEngine, run: &str) -> Vec<MemberState> {
    let mut events = e.events().await.unwrap();
    tokio::time::timeout(WAIT, async {
        loop {
            let r = e.observe(run).await.unwrap();
            if r.ended() {
                return r.members.iter().map(|m| m.state).collect();
            }
            match events.next().await {
                Some(Ok(_)) => {}
                Some(Err(_)) | None => events = e.events().await.unwrap(),
            }
        }
    })
    .await
    .expect("the run ended")
}

async fn output(e: &KubeEngine, run: &str, member: u32) -> String {
    let chunks: Vec<_> = e.logs(&MemberRef::new(run, member), false, None).await.unwrap().collect().await;
    chunks.into_iter().map(|c| String::from_utf8_lossy(&c.unwrap()).into_owned()).collect()
}

#[tokio::test]
async fn a_job_ends_with_its_code_and_output_as_its_owner() {
    let Some(e) = engine().await else { return };
    let run = e.submit(&spec("job", "job", 1, &["sh", "-c", "id -u; exit 3"])).await.unwrap();
    assert_eq!(ended(&e, &run.id).await, [MemberState::Exited(3)]);
    assert_eq!(output(&e, &run.id, 0).await.trim(), "1001");
    e.remove(&run.id).await.unwrap();
}

#[tokio::test]
async fn a_workspace_takes_exec_has_an_address_and_keeps_its_record_when_stopped() {
    let Some(e) = engine().await else { return };
    let run = e.submit(&spec("ws", "workspace", 1, &["sleep", "3600"])).await.unwrap();
    let m = MemberRef::new(&run.id, 0);
    let running = || async { Ok((e.observe(&run.id).await?.members[0].state == MemberState::Running).then_some(())) };
    eventually("the workspace runs", WAIT, Duration::from_millis(500), running).await.unwrap();
    let exec = ExecSpec { command: vec!["sh".into(), "-c".into(), "echo hi; exit 4".into()], ..Default::default() };
    let mut h = e.exec(&m, &exec).await.unwrap();
    let out: Vec<_> = h.output.by_ref().collect().await;
    assert!(out.iter().any(|c| c.as_ref().is_ok_and(|b| b.starts_with(b"hi"))));
    assert_eq!(tokio::time::timeout(WAIT, h.wait()).await.expect("the exec ends").unwrap(), 4);
    assert!(e.endpoint(&m, 8888).await.unwrap().ip().is_ipv4());
    e.cancel(&run.id, Duration::from_secs(2)).await.unwrap();
    let state = e.observe(&run.id).await.unwrap().members[0].state;
    assert!(matches!(state, MemberState::Exited(137 | 143)), "{state:?}");
    assert_eq!(e.observe(&run.id).await.unwrap().ended_by_engine(), None, "gpuhub's own stop");
    e.remove(&run.id).await.unwrap();
}

#[tokio::test]
async fn a_gang_of_two_gets_its_ranks_and_reaches_member_zero() {
    let Some(e) = engine().await else { return };
    let cmd = ["sh", "-c", "echo $RANK/$WORLD_SIZE; nslookup $MASTER_ADDR >/dev/null && echo resolved"];
    let run = e.submit(&spec("gang", "job", 2, &cmd)).await.unwrap();
    assert_eq!(ended(&e, &run.id).await, [MemberState::Exited(0), MemberState::Exited(0)]);
    assert!(output(&e, &run.id, 1).await.starts_with("1/2\nresolved"));
    e.remove(&run.id).await.unwrap();
}

/// Where the rollout of service run `run` stands, once it is `state`.
async fn rollout(e: &KubeEngine, run: &str, state: &str) -> BTreeMap<String, String> {
    let rolled = || async {
        let r = e.observe(run).await?;
        Ok((r.labels.get(gpuhub_core::service::LABEL_ROLLOUT).map(String::as_str) == Some(state)).then_some(r.labels))
    };
    eventually(&format!("the rollout of {run} is {state}"), WAIT, Duration::from_secs(1), rolled).await.unwrap()
}

#[tokio::test]
async fn a_gang_that_fits_nowhere_waits_gated_with_nothing_placed() {
    let Some(e) = engine().await else { return };
    let mut big = spec("huge", "job", 2, &["true"]);
    for m in &mut big.members {
        m.cpu_milli = 1 << 30; // a million CPUs each
    }
    let run = e.submit(&big).await.unwrap();
    // the Jobs make their pods (gated) a moment later; once all exist, the next look says why
    let waits = || async {
        let r = e.observe(&run.id).await?;
        let why =
            r.pending.as_ref().is_some_and(|p| p.message.contains("gpuhub admits a gang whole and the 2 members"));
        Ok(why.then_some(r))
    };
    let seen = eventually("why the gang waits", WAIT, Duration::from_secs(1), waits).await.unwrap();
    assert!(seen.pending.as_ref().unwrap().message.contains("do not fit at once"), "{seen:?}");
    assert!(seen.members.iter().all(|m| m.node.is_none() && m.state == MemberState::Pending), "{seen:?}");
    e.remove(&run.id).await.unwrap();
}

#[tokio::test]
async fn a_service_rollout_that_crash_loops_is_reported_failed_and_rolled_back() {
    let Some(e) = engine().await else { return };
    let v1 = spec("svc", "service", 1, &["sleep", "3600"]);
    let run = e.submit(&v1).await.unwrap();
    rollout(&e, &run.id, gpuhub_core::service::ROLLOUT_COMPLETE).await;
    let broken = RunSpec { command: vec!["sh".into(), "-c".into(), "exit 1".into()], ..v1.clone() };
    assert!(e.roll(&run.id, &broken).await.unwrap());
    let labels = rollout(&e, &run.id, gpuhub_core::service::ROLLOUT_FAILED).await;
    let why = labels.get(gpuhub_core::service::LABEL_ROLLOUT_WHY).cloned().unwrap_or_default();
    assert!(why.contains("CrashLoopBackOff"), "{why}");
    let serving = e.observe(&run.id).await.unwrap();
    assert_eq!(serving.members[0].state, MemberState::Running, "the old pod serves on: {serving:?}");
    assert!(e.roll(&run.id, &v1).await.unwrap(), "rolled back");
    rollout(&e, &run.id, gpuhub_core::service::ROLLOUT_COMPLETE).await;
    e.cancel(&run.id, Duration::from_secs(2)).await.unwrap();
    e.remove(&run.id).await.unwrap();
}
