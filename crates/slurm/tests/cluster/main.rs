//! The Slurm engine against the real dev cluster (`scripts/slurm-dev-cluster.sh start` first; run as
//! root). Without the cluster these tests fail and say how to start it, unless `GPUHUB_SLURM_TESTS=skip`.
//! They run one at a time (they share the cluster's four GPUs).

mod common;

use common::{cluster, wait};
use futures::{StreamExt, TryStreamExt};
use gpuhub_driver::{Engine, EngineError, EngineEvent, ExecSpec, GpuGrant, MemberRef, MemberState};
use gpuhub_slurm::SlurmEngine;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn whole(count: u32) -> GpuGrant {
    GpuGrant::Whole { count, uuids: vec![] }
}

/// (1) A gang of two members with one GPU each runs on both nodes; each member prints its rank and GPU;
/// the exit codes come back per member; a failing member fails the run with its code and stops the other.
#[tokio::test]
async fn gang_on_two_nodes_with_ranks_gpus_and_exit_codes() {
    let Some(c) = cluster("gang").await else { return };
    let mut events = c.engine.events().await.unwrap();
    let script = "echo rank=$RANK world=$WORLD_SIZE local=$LOCAL_RANK gpus=$CUDA_VISIBLE_DEVICES node=$(hostname) \
                  master=$MASTER_ADDR:$MASTER_PORT member=$GPUHUB_MEMBER uid=$(id -u) home=$HOME pwd=$(pwd)";
    // member 1 reaches member 0 at MASTER_ADDR, the first node's host name, which the container's
    // /etc/hosts (the node's) resolves (busybox's `wget -T` crashes: no -T)
    let port = 19000 + (std::process::id() % 1000) as u16;
    let script = format!(
        "{script}; if [ $RANK = 0 ]; then httpd -f -p {port} -h /etc & sleep 4; kill $!; \
         else sleep 1; echo master says $(wget -q -O - http://$MASTER_ADDR:{port}/passwd | head -n 1); fi; echo done"
    );
    let ok = c.engine.submit(&c.spec("alice", "gang-ok", 2, whole(1), &script)).await.unwrap();
    // member 1's log, followed from before it starts until it ends
    let followed = {
        let engine = c.engine.clone();
        let run = ok.id.clone();
        tokio::spawn(async move {
            let s = engine.logs(&MemberRef::new(run, 1), true, None).await.unwrap();
            let chunks: Vec<bytes::Bytes> = s.try_collect().await.unwrap();
            String::from_utf8_lossy(&chunks.concat()).into_owned()
        })
    };
    let s = c.ended(&ok.id).await;
    let followed =
        tokio::time::timeout(Duration::from_secs(10), followed).await.expect("follow ends with the member").unwrap();
    assert!(followed.contains("rank=1 ") && followed.ends_with("done\n"), "{followed:?}");
    assert!(followed.contains("master says root:x:0:0:"), "member 1 reached member 0 at MASTER_ADDR: {followed:?}");
    assert_eq!(s.members.iter().map(|m| m.state).collect::<Vec<_>>(), [MemberState::Exited(0), MemberState::Exited(0)]);
    let nodes: Vec<_> = s.members.iter().map(|m| m.node.clone().unwrap()).collect();
    assert_eq!(nodes, ["node1", "node2"], "one member per node");
    for i in 0..2u32 {
        let log = c.log(&ok.id, i).await;
        println!("member {i}: {log}");
        assert!(log.contains(&format!("rank={i} world=2 local=0 gpus=")), "{log}");
        assert!(log.contains(&format!("node={} master=node1:29500 member={i} uid=10001", nodes[i as usize])), "{log}");
        assert!(log.contains("home=/home/alice pwd=/home/alice"), "{log}");
        let gpus = log.split("gpus=").nth(1).unwrap().split_whitespace().next().unwrap_or("");
        assert!(gpus == "0" || gpus == "1", "one GPU index: {log}");
    }
    // the events said so too
    let seen: Vec<EngineEvent> = tokio::time::timeout(
        Duration::from_secs(15),
        events.by_ref().try_filter(|e| futures::future::ready(e.run().0 == ok.id)).take(4).try_collect(),
    )
    .await
    .expect("four events for the run")
    .unwrap();
    let exits: Vec<_> = seen.iter().filter(|e| matches!(e, EngineEvent::Exited { exit_code: 0, .. })).collect();
    assert_eq!(exits.len(), 2, "{seen:?}");

    // member 1 fails with 3 after a second; member 0 would sleep for minutes but is stopped
    let script = "if [ $RANK = 1 ]; then sleep 1; echo failing; exit 3; fi; echo waiting; sleep 300";
    let started = Instant::now();
    let bad = c.engine.submit(&c.spec("alice", "gang-fail", 2, whole(1), script)).await.unwrap();
    let s = c.ended(&bad.id).await;
    println!("failed gang: {:?} after {:?}", s.members.iter().map(|m| m.state).collect::<Vec<_>>(), started.elapsed());
    assert_eq!(s.members[1].state, MemberState::Exited(3));
    // stopped by SIGTERM (passed on by the init, tini) within the script's grace
    assert_eq!(s.members[0].state, MemberState::Exited(143), "{s:?}");
    assert!(started.elapsed() < Duration::from_secs(10), "the other member was stopped, not waited for");
    c.clean(&[&ok.id, &bad.id]).await;
}

/// (2) A run asking for more GPUs than are free waits with Slurm's reason; one asking for more than the
/// cluster has (5) is refused by sbatch, and that is `Rejected` with Slurm's words.
#[tokio::test]
async fn waiting_for_gpus_and_asking_for_too_many() {
    let Some(c) = cluster("pending").await else { return };
    let hog = c.engine.submit(&c.spec("alice", "hog", 2, whole(2), "sleep 300")).await.unwrap();
    c.running(&hog.id).await;
    let waiting = c.engine.submit(&c.spec("bob", "waits", 1, whole(1), "true")).await.unwrap();
    let s = c
        .until(&waiting.id, Duration::from_secs(15), |s| s.pending.as_ref().is_some_and(|p| p.reason == "resources"))
        .await;
    let p = s.pending.unwrap();
    println!("pending: {p:?}");
    assert_eq!(p.message, "waiting in Slurm partition gpu: Resources (the resources it asks for are in use)");
    assert_eq!(p.position, Some(1));
    assert!(s.members.iter().all(|m| m.state == MemberState::Pending && m.node.is_none()));
    // list_runs explains it the same way
    let listed = c.engine.list_runs().await.unwrap();
    let l = listed.iter().find(|r| r.id == waiting.id).unwrap();
    assert_eq!(l.pending.as_ref().map(|p| p.reason.as_str()), Some("resources"));

    let err = c.engine.submit(&c.spec("alice", "too-many", 1, whole(5), "true")).await.unwrap_err();
    println!("5 GPUs: {err}");
    assert!(
        matches!(&err, EngineError::Rejected(m) if m.contains("Requested node configuration is not available")),
        "{err:?}"
    );
    // the waiting run starts once the GPUs are free
    c.engine.cancel(&hog.id, Duration::ZERO).await.unwrap();
    c.ended(&waiting.id).await;
    c.clean(&[&hog.id, &waiting.id]).await;
}

/// (3) Two half-GPU runs hold shards of one GPU at the same time.
#[tokio::test]
async fn two_half_gpu_runs_share_one_gpu() {
    let Some(c) = cluster("shards").await else { return };
    let half = GpuGrant::Share { milli: 500, memory: Some(4 << 30), uuid: None };
    let script = "echo gpus=$CUDA_VISIBLE_DEVICES shards=$SLURM_SHARDS_ON_NODE; sleep 300";
    let a = c.engine.submit(&c.spec("alice", "half-a", 1, half.clone(), script)).await.unwrap();
    let b = c.engine.submit(&c.spec("bob", "half-b", 1, half, script)).await.unwrap();
    let sa = c.running(&a.id).await;
    let sb = c.running(&b.id).await;
    println!("a: {:?} b: {:?}", sa.members[0], sb.members[0]);
    assert_eq!(sa.members[0].gpus.len(), 1);
    assert_eq!(sa.members[0].gpus, sb.members[0].gpus, "the same GPU of the same node");
    let la = c.log_contains(&a.id, 0, "shards=").await;
    let lb = c.log_contains(&b.id, 0, "shards=").await;
    assert!(la.contains("shards=2") && lb.contains("shards=2"), "{la} {lb}");
    let idx = sa.members[0].gpus[0].rsplit("gpu").next().unwrap().to_owned();
    assert!(la.contains(&format!("gpus={idx} ")) && lb.contains(&format!("gpus={idx} ")), "{la} {lb}");
    c.clean(&[&a.id, &b.id]).await;
}

/// (4) A long-running member's TCP listener is reachable at `endpoint()` from the hub, and exec runs
/// as the account's UID, with and without a terminal.
#[tokio::test]
async fn endpoint_and_exec_into_a_workspace() {
    let Some(c) = cluster("workspace").await else { return };
    let port = 18000 + (std::process::id() % 1000) as u16;
    let script = format!("echo listening; exec httpd -f -p {port} -h /etc");
    let ws = c.engine.submit(&c.spec("alice", "ws", 1, GpuGrant::None, &script)).await.unwrap();
    c.running(&ws.id).await;
    c.log_contains(&ws.id, 0, "listening").await;
    let member = MemberRef::new(ws.id.clone(), 0);
    let addr = c.engine.endpoint(&member, port).await.unwrap();
    println!("endpoint: {addr}");
    let reply = wait(Duration::from_secs(10), || async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(b"GET /hostname HTTP/1.0\r\n\r\n").await.ok()?;
        let mut buf = String::new();
        s.read_to_string(&mut buf).await.ok()?;
        Some(buf)
    })
    .await
    .expect("the member's port answers at its endpoint");
    assert!(reply.starts_with("HTTP/1."), "{reply}");

    // exec without a terminal
    let spec = ExecSpec { command: vec!["id".into(), "-u".into()], ..Default::default() };
    let mut h = c.engine.exec(&member, &spec).await.unwrap();
    let out: Vec<bytes::Bytes> = h.output.by_ref().try_collect().await.unwrap();
    assert_eq!(String::from_utf8_lossy(&out.concat()), "10001\n");
    let code = tokio::time::timeout(Duration::from_secs(5), h.wait()).await.expect("the exec ends").unwrap();
    assert_eq!(code, 0);

    // with a terminal: a shell that answers, is resized, and exits with a code of its own
    let spec = ExecSpec { command: vec!["sh".into()], tty: Some((80, 24)), ..Default::default() };
    let mut t = c.engine.exec(&member, &spec).await.unwrap();
    t.resize(120, 40).await.unwrap();
    t.input.write_all(b"id -u; test -t 0 && echo is-a-tty; stty size; exit 5\n").await.unwrap();
    let out: Vec<bytes::Bytes> = tokio::time::timeout(Duration::from_secs(20), t.output.by_ref().try_collect())
        .await
        .expect("the shell ends")
        .unwrap();
    let text = String::from_utf8_lossy(&out.concat()).into_owned();
    println!("tty exec: {text:?}");
    assert!(text.contains("10001") && text.contains("is-a-tty"), "{text:?}");
    assert!(text.contains("40 120"), "the resize reached the terminal: {text:?}");
    let code = tokio::time::timeout(Duration::from_secs(5), t.wait()).await.expect("the shell's srun ends").unwrap();
    assert_eq!(code, 5);
    c.clean(&[&ws.id]).await;
}

/// (5) A new engine (gpuhub restarted) finds a run still running and one that ended meanwhile, with its
/// true exit code.
#[tokio::test]
async fn a_restarted_hub_finds_running_and_ended_runs() {
    let Some(c) = cluster("restart").await else { return };
    let (running, ended) = {
        let before = SlurmEngine::connect(common::config()).await.unwrap();
        let r = before.submit(&c.spec("alice", "keeps-running", 1, GpuGrant::None, "sleep 300")).await.unwrap();
        let e = before.submit(&c.spec("bob", "ends-meanwhile", 1, whole(1), "sleep 1; exit 7")).await.unwrap();
        (r.id, e.id)
    };
    // "gpuhub is down" while the second run ends
    wait(Duration::from_secs(30), || async {
        let out = std::process::Command::new("squeue")
            .args(["-h", "-t", "all", "-j", &ended, "-o", "%T"])
            .env("SLURM_CONF", common::dir().join("slurm.conf"))
            .output()
            .ok()?;
        let state = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        (!state.is_empty() && state != "RUNNING" && state != "PENDING" && state != "COMPLETING").then_some(())
    })
    .await
    .expect("the second run ends");
    let after = SlurmEngine::connect(common::config()).await.unwrap();
    let runs = after.list_runs().await.unwrap();
    let r = runs.iter().find(|r| r.id == running).expect("the running run is found again");
    assert_eq!(r.workload(), Some("keeps-running"));
    assert_eq!(r.labels.get("gpuhub.instance"), Some(&c.instance));
    assert!(r.members[0].state == MemberState::Running || r.members[0].state == MemberState::Pending, "{r:?}");
    let e = runs.iter().find(|r| r.id == ended).expect("the ended run is found");
    assert_eq!(e.members[0].state, MemberState::Exited(7), "{e:?}");
    assert_eq!(e.workload(), Some("ends-meanwhile"));
    // removed runs are gone from the list
    after.remove(&ended).await.unwrap();
    assert!(after.list_runs().await.unwrap().iter().all(|r| r.id != ended));
    assert!(matches!(after.observe(&ended).await, Err(EngineError::NotFound(_))));
    c.clean(&[&running]).await;
}

/// (6) Cancel with grace: a member that handles SIGTERM ends with its own code inside the grace; one that
/// ignores it is killed once the grace is over.
#[tokio::test]
async fn cancel_with_grace() {
    let Some(c) = cluster("cancel").await else { return };
    let polite = "trap 'echo got TERM; exit 42' TERM; echo ready; while :; do sleep 0.2; done";
    let stubborn = "trap '' TERM; echo ready; while :; do sleep 0.2; done";
    let p = c.engine.submit(&c.spec("alice", "polite", 1, GpuGrant::None, polite)).await.unwrap();
    let s = c.engine.submit(&c.spec("bob", "stubborn", 1, GpuGrant::None, stubborn)).await.unwrap();
    c.log_contains(&p.id, 0, "ready").await;
    c.log_contains(&s.id, 0, "ready").await;
    let t = Instant::now();
    c.engine.cancel(&p.id, Duration::from_secs(10)).await.unwrap();
    let polite_took = t.elapsed();
    let t = Instant::now();
    c.engine.cancel(&s.id, Duration::from_secs(2)).await.unwrap();
    let stubborn_took = t.elapsed();
    println!("polite cancel {polite_took:?}, stubborn cancel {stubborn_took:?}");
    assert!(polite_took < Duration::from_secs(8), "ended on SIGTERM, not at the grace's end");
    assert!(
        stubborn_took >= Duration::from_secs(2) && stubborn_took < Duration::from_secs(6),
        "killed soon after the grace"
    );
    let ps = c.ended(&p.id).await;
    assert_eq!(ps.members[0].state, MemberState::Exited(42));
    assert!(c.log(&p.id, 0).await.contains("got TERM"));
    let ss = c.ended(&s.id).await;
    assert!(matches!(ss.members[0].state, MemberState::Exited(137)), "{ss:?}");
    // cancelling an ended run is fine; cancelling a pending one takes it out of the queue
    c.engine.cancel(&p.id, Duration::from_secs(1)).await.unwrap();
    c.clean(&[&p.id, &s.id]).await;
}

/// Inventory of the cluster: its nodes and GPUs, named as `observe` names the GPUs runs hold.
#[tokio::test]
async fn inventory_names_gpus_like_runs_do() {
    let Some(c) = cluster("inventory").await else { return };
    let nodes = c.engine.inventory().await.unwrap();
    let names: Vec<&str> = nodes.iter().map(|n| n.capacity.name.as_str()).collect();
    assert_eq!(names, ["node1", "node2"]);
    for n in &nodes {
        assert!(n.up, "{n:?}");
        let gpus: Vec<&str> = n.capacity.gpus.iter().map(|g| g.uuid.as_str()).collect();
        assert_eq!(gpus, [format!("{}/gpu0", n.capacity.name), format!("{}/gpu1", n.capacity.name)]);
        assert_eq!(n.capacity.gpus[0].model, "fake");
    }
    assert!(c.engine.image_exists("gpuhub/busybox:latest").await.unwrap());
    assert!(!c.engine.image_exists("gpuhub/does-not-exist:1").await.unwrap());
}

/// (7) slurmctld goes away for a while under a running run: polls fail and say nothing (no member is
/// taken for gone), `inventory` is `Unavailable` with Slurm's words, and once slurmctld is back the run
/// is still running and its events resume.
#[tokio::test]
async fn a_slurmctld_outage_is_not_the_end_of_running_work() {
    let Some(c) = cluster("outage").await else { return };
    let run = c.engine.submit(&c.spec("alice", "survives", 1, GpuGrant::None, "sleep 300")).await.unwrap();
    c.running(&run.id).await;
    let mut events = c.engine.events().await.unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await; // the poller has seen the run
    let pid_file = common::dir().join("run/slurmctld.pid");
    let pid: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    rustix::process::kill_process(rustix::process::Pid::from_raw(pid).unwrap(), rustix::process::Signal::TERM).unwrap();
    wait(Duration::from_secs(15), || async { (!std::path::Path::new(&format!("/proc/{pid}")).exists()).then_some(()) })
        .await
        .expect("slurmctld stops");
    let err = c.engine.inventory().await.unwrap_err();
    println!("inventory while slurmctld is down: {err}");
    assert!(matches!(&err, EngineError::Unavailable(m) if m.contains("DOWN")), "{err:?}");
    assert!(matches!(c.engine.observe(&run.id).await, Err(EngineError::Unavailable(_))));
    let silent = tokio::time::timeout(Duration::from_secs(12), events.next()).await;
    assert!(silent.is_err(), "no event while slurmctld is down: {silent:?}");
    let start = std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/slurm-dev-cluster.sh"))
        .arg("start")
        .output()
        .unwrap();
    assert!(start.status.success(), "{}", String::from_utf8_lossy(&start.stderr));
    let s = c.running(&run.id).await;
    assert_eq!(s.members[0].state, MemberState::Running);
    c.engine.cancel(&run.id, Duration::from_secs(5)).await.unwrap();
    let ev =
        tokio::time::timeout(Duration::from_secs(15), events.next()).await.expect("events resume").unwrap().unwrap();
    assert!(matches!(&ev, EngineEvent::Exited { run: r, exit_code: 143, .. } if *r == run.id), "{ev:?}");
    c.clean(&[&run.id]).await;
}
