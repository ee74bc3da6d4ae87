//! The engine over the fake CLI: the exact commands it runs and what it makes of real answers.

use crate::bundle::{self, shape_image_config};
use crate::cli::{Cmd, CmdOutput};
use crate::fake::FakeCli;
use crate::testutil::run_spec;
use crate::{SlurmConfig, SlurmEngine};
use futures::{StreamExt, TryStreamExt};
use gpuhub_driver::{Engine, EngineError, ExecSpec, GpuGrant, MemberRef, MemberState, Placement};
use std::sync::Arc;
use std::time::Duration;

const SQUEUE_TEXT: &str = include_str!("../tests/fixtures/squeue-text.txt");
const GANG4: &str = include_str!("../tests/fixtures/scontrol-gang-4gpus.txt");
const SINFO: &str = include_str!("../tests/fixtures/sinfo.json");
const SINFO_DOWN: &str = include_str!("../tests/fixtures/sinfo-down.json");
const GANG: &str = include_str!("../tests/fixtures/scontrol-running-gang.txt");
const PENDING: &str = include_str!("../tests/fixtures/scontrol-pending.txt");

struct Env {
    _dir: tempfile::TempDir,
    cli: Arc<FakeCli>,
    engine: SlurmEngine,
    config: SlurmConfig,
    me: (u32, u32),
}

/// An engine over the fake, with the image bundle of `gpuhub/busybox:latest` made and account alice
/// mapped to this test's own user (so the files it makes can be given to it without root), or to UID
/// 10001 when the test runs as root.
fn env() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let config = SlurmConfig {
        bundle_dir: dir.path().join("bundles"),
        log_dir: dir.path().join("logs"),
        oci_root: "/var/lib/gpuhub-slurm-dev/run/oci".into(),
        map_usernames: true,
        poll_ms: 100,
        ..Default::default()
    };
    std::fs::create_dir_all(&config.log_dir).unwrap();
    let img = dir.path().join("bundles/images").join(bundle::image_key("gpuhub/busybox:latest"));
    std::fs::create_dir_all(img.join("rootfs/home")).unwrap();
    std::fs::create_dir_all(img.join("rootfs/etc")).unwrap();
    let base = serde_json::json!({"process": {"args": ["sh"], "env": ["PATH=/bin"], "cwd": "/"}, "root": {"path": "rootfs"}, "mounts": []});
    std::fs::write(img.join("config.json"), shape_image_config(base).to_string()).unwrap();
    let cli = Arc::new(FakeCli::new());
    // root may give files to anyone (runs never run as root); others only to themselves
    let me = match (rustix::process::getuid().as_raw(), rustix::process::getgid().as_raw()) {
        (0, _) => (10001, 10001),
        ids => ids,
    };
    cli.on(&["getent", "passwd", "alice"], CmdOutput::ok(format!("alice:x:{}:{}::/home/alice:/bin/sh\n", me.0, me.1)));
    let engine = SlurmEngine::with_cli(config.clone(), cli.clone());
    Env { _dir: dir, cli, engine, config, me }
}

fn argv(c: &Cmd) -> Vec<&str> {
    c.argv()
}

#[tokio::test]
async fn submit_runs_sbatch_as_the_account_with_the_script_on_stdin() {
    let e = env();
    e.cli.on(&["sbatch"], CmdOutput::ok("4242\n"));
    let spec = run_spec(2, GpuGrant::Whole { count: 1, uuids: vec![] });
    let status = e.engine.submit(&spec).await.unwrap();
    // scontrol had no answer: the run as submitted
    assert_eq!(status.id, "4242");
    assert_eq!(status.size, 2);
    assert!(status.members.iter().all(|m| m.state == MemberState::Pending));
    let sbatch = &e.cli.calls_to("sbatch")[0];
    let a = argv(sbatch);
    assert_eq!(a[1], "--parsable");
    assert_eq!(a[2], "--job-name=gpuhub-0123456789ab-w1");
    let comment = a[3].strip_prefix("--comment=").unwrap();
    let labels: std::collections::BTreeMap<String, String> = serde_json::from_str(comment).unwrap();
    assert_eq!(labels["gpuhub.workload"], "w1");
    assert_eq!(labels["gpuhub.members"], "2");
    let dir = labels["gpuhub.slurm.dir"].clone();
    assert!(dir.starts_with("gpuhub-0123456789ab-w1."), "{dir}");
    let log_dir = e.config.log_dir.join("alice");
    assert_eq!(
        &a[4..],
        [
            format!("--uid={}", e.me.0).as_str(),
            &format!("--gid={}", e.me.1),
            "--export=NONE",
            &format!("--chdir={}", log_dir.display()),
            &format!("--output={}/job-%j.batch.log", log_dir.display()),
            "--nodes=2",
            "--ntasks-per-node=1",
            "--cpus-per-task=2",
            "--mem=1024M",
            "--gres=gpu:1",
            "--no-requeue",
        ]
    );
    assert_eq!(sbatch.user, None, "sbatch runs as the hub (root) and names the user");
    let script = String::from_utf8(sbatch.stdin.clone().unwrap()).unwrap();
    let bundle_dir = e.config.bundle_dir.join("runs").join(&dir);
    assert!(script.contains(&format!("bundle='{}'\n", bundle_dir.display())), "{script}");
    assert!(script.contains("--relative=1"));
    // the run's bundle: its environment, home and working directory, owned by the account
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(bundle_dir.join("config.json")).unwrap()).unwrap();
    let env: Vec<&str> = config["process"]["env"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(env, ["PATH=/bin", "FOO=bar baz", "HOME=/home/alice"]);
    assert_eq!(config["process"]["cwd"], "/home/alice");
    assert!(log_dir.is_dir());
    // the hub's note of the run's job, beside its bundle
    let note = std::fs::read_to_string(e.config.bundle_dir.join("runs").join(format!("{dir}.job"))).unwrap();
    assert_eq!(note, "4242\n");
}

#[tokio::test]
async fn submit_refusals_leave_nothing_behind() {
    let e = env();
    // sbatch refuses (more GPUs than any node has): Rejected with Slurm's words, no bundle left
    e.cli.on(
        &["sbatch"],
        CmdOutput::fail(
            1,
            "sbatch: error: Batch job submission failed: Requested node configuration is not available\n",
        ),
    );
    let spec = run_spec(1, GpuGrant::Whole { count: 5, uuids: vec![] });
    let err = e.engine.submit(&spec).await.unwrap_err();
    assert!(
        matches!(&err, EngineError::Rejected(m) if m.contains("Requested node configuration is not available")),
        "{err:?}"
    );
    let runs = e.config.bundle_dir.join("runs");
    assert_eq!(std::fs::read_dir(&runs).unwrap().count(), 0);
    // slurmctld down: Unavailable
    e.cli.clear_rules();
    e.cli.on(&["getent", "passwd", "alice"], CmdOutput::ok(format!("alice:x:{}:{}::/h:/bin/sh\n", e.me.0, e.me.1)));
    e.cli.on(
        &["sbatch"],
        CmdOutput::fail(
            1,
            "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)\n",
        ),
    );
    assert!(matches!(e.engine.submit(&spec).await, Err(EngineError::Unavailable(_))));
    // an unmapped user without map_usernames
    let strict = SlurmEngine::with_cli(SlurmConfig { map_usernames: false, ..e.config.clone() }, e.cli.clone());
    let err = strict.submit(&spec).await.unwrap_err();
    assert!(matches!(&err, EngineError::Rejected(m) if m.contains("no cluster account")), "{err:?}");
    // an account that does not exist, and root
    e.cli.on(&["getent", "passwd", "bob"], CmdOutput::fail(2, ""));
    e.cli.on(&["getent", "passwd", "root"], CmdOutput::ok("root:x:0:0:root:/root:/bin/bash\n"));
    let mut bob = spec.clone();
    bob.identity.username = "bob".into();
    assert!(matches!(e.engine.submit(&bob).await, Err(EngineError::Rejected(m)) if m.contains("does not exist")));
    bob.identity.username = "root".into();
    assert!(matches!(e.engine.submit(&bob).await, Err(EngineError::Rejected(m)) if m.contains("root")));
    // an image neither bundled nor in Docker
    let mut other = spec.clone();
    other.image = "nope:1".into();
    e.cli.on(&["skopeo"], CmdOutput::fail(1, "Error response from daemon: No such image: nope:1"));
    assert!(matches!(e.engine.submit(&other).await, Err(EngineError::ImageNotFound(_))));
    assert_eq!(std::fs::read_dir(&runs).unwrap().count(), 0);
}

#[tokio::test]
async fn observe_list_and_pending_explanations_from_real_output() {
    let e = env();
    e.cli.on(&["scontrol", "show", "job", "-d", "23"], CmdOutput::ok(GANG));
    e.cli.on(&["scontrol", "show", "job", "-d", "26"], CmdOutput::ok(PENDING));
    e.cli.on(&["squeue", "-h", "-t", "PD"], CmdOutput::ok("26|4294901734|gpu\n28|0|gpu\n"));
    let s = e.engine.observe("23").await.unwrap();
    assert_eq!(s.members[1].node.as_deref(), Some("node2"));
    assert_eq!(s.members[0].gpus, ["node1/gpu0"]);
    let p = e.engine.observe("26").await.unwrap();
    let info = p.pending.unwrap();
    assert_eq!((info.reason.as_str(), info.position), ("resources", Some(1)));
    assert!(info.message.contains("Resources"));
    e.cli.on(
        &["scontrol", "show", "job", "-d", "999"],
        CmdOutput::fail(1, "slurm_load_jobs error: Invalid job id specified\n"),
    );
    e.cli.on(&["sacct", "-a", "-P", "-n", "-j", "999"], CmdOutput::ok(""));
    assert!(matches!(e.engine.observe("999").await, Err(EngineError::NotFound(_))));
    assert!(matches!(e.engine.observe("not-a-job").await, Err(EngineError::NotFound(_))));

    // list: every gpuhub job of the queue (4274's comment is not gpuhub's), the running one's GPUs from
    // scontrol, plus accounting's older ones (none here)
    e.cli.on(&["squeue", "-h", "-t", "all", "-o", crate::parse::squeue::TEXT_FORMAT], CmdOutput::ok(SQUEUE_TEXT));
    e.cli.on(&["scontrol", "show", "job", "-d", "4271"], CmdOutput::ok(GANG4));
    let asked = e.cli.calls_to("sacct").len();
    let runs = e.engine.list_runs().await.unwrap();
    let ids: Vec<&str> = runs.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["4271", "4272", "4273"]);
    assert_eq!(e.cli.calls_to("sacct").len(), asked, "nothing ended, nothing noted: no sacct");
    let gang = &runs[0];
    assert_eq!(gang.members[1].gpus, ["node2/gpu0", "node2/gpu1"]);
    assert_eq!(gang.members[0].node.as_deref(), Some("node1"));
    let w2 = &runs[1];
    assert_eq!(w2.pending.as_ref().map(|p| (p.reason.as_str(), p.position)), Some(("resources", Some(1))));
    assert_eq!(runs[2].pending.as_ref().map(|p| (p.reason.as_str(), p.position)), Some(("priority", Some(2))));
    assert_eq!(e.cli.calls_to("scontrol").iter().filter(|c| c.args.contains(&"4271".to_owned())).count(), 1);
    assert!(e.cli.calls_to("squeue").iter().all(|c| !c.args.contains(&"--json".to_owned())), "no JSON for one run");
}

#[tokio::test]
async fn runs_that_ended_while_the_hub_was_down_come_from_accounting() {
    let e = env();
    let runs_dir = e.config.bundle_dir.join("runs");
    std::fs::create_dir_all(runs_dir.join("gpuhub-x-w1.1")).unwrap();
    std::fs::create_dir_all(runs_dir.join("gpuhub-x-w3.1")).unwrap();
    // noted jobs: 501 (w1), 502 (removed: no directory), 503 (noted for w3 but it is another run's job)
    std::fs::write(runs_dir.join("gpuhub-x-w1.1.job"), "501\n").unwrap();
    std::fs::write(runs_dir.join("gone.job"), "502\n").unwrap();
    std::fs::write(runs_dir.join("gpuhub-x-w3.1.job"), "503\n").unwrap();
    let row = |id: &str, rest: &str| format!("{id}|{rest}\n");
    let comment = r#"{"gpuhub.members":"2","gpuhub.slurm.dir":"gpuhub-x-w1.1","gpuhub.workload":"w1"}"#;
    let steps = row("501", &format!("gpuhub-x-w1|FAILED|3:0|alice|node[1-2]|gpu|{comment}"))
        + &row("501.batch", "batch|FAILED|3:0||node1||")
        + &row("501.0", "m1|FAILED|3:0||node2||")
        + &row("501.1", "m0|CANCELLED|0:15||node1||")
        + &row(
            "503",
            r#"other|COMPLETED|0:0|bob|node1|gpu|{"gpuhub.members":"1","gpuhub.slurm.dir":"else","gpuhub.workload":"w9"}"#,
        );
    e.cli.on(&["squeue", "-h", "-t", "all", "-o"], CmdOutput::ok(""));
    e.cli.on(&["sacct"], CmdOutput::ok(steps));
    let runs = e.engine.list_runs().await.unwrap();
    assert_eq!(runs.len(), 1, "502 was removed; 503 is not w3's job");
    let r = &runs[0];
    assert_eq!(r.id, "501");
    assert_eq!(
        r.members.iter().map(|m| m.state).collect::<Vec<_>>(),
        [MemberState::Exited(143), MemberState::Exited(3)]
    );
    assert!(r.ended());
    assert!(!r.labels.contains_key("gpuhub.slurm.dir"));
    // accounting was asked for exactly the noted jobs of runs not removed, with their steps
    let sacct = e.cli.calls_to("sacct");
    assert_eq!(sacct.len(), 1);
    let ids = argv(&sacct[0])[5].split(',').map(str::to_owned).collect::<std::collections::BTreeSet<_>>();
    assert_eq!(ids, ["501".to_owned(), "503".to_owned()].into());
    assert_eq!(argv(&sacct[0])[..5], ["sacct", "-a", "-P", "-n", "-j"]);
}

#[tokio::test]
async fn cancel_pending_and_running_with_grace() {
    let e = env();
    e.cli.on(&["scontrol", "show", "job", "-d", "26"], CmdOutput::ok(PENDING));
    e.cli.once(&["squeue", "-h", "-t", "all", "-j", "26", "-o", "%T"], CmdOutput::ok("PENDING\n"));
    e.cli.on(&["squeue", "-h", "-t", "all", "-j", "26", "-o", "%T"], CmdOutput::ok("CANCELLED\n"));
    e.cli.on(&["scancel"], CmdOutput::ok(""));
    e.engine.cancel("26", Duration::from_secs(5)).await.unwrap();
    let sc: Vec<Vec<String>> = e.cli.calls_to("scancel").iter().map(|c| c.args.clone()).collect();
    assert_eq!(sc, [vec!["--state=PENDING".to_owned(), "26".into()]]);

    // running, ignoring SIGTERM for longer than the grace: TERM to the steps, then KILL to everything
    let e = env();
    e.cli.on(&["scontrol", "show", "job", "-d", "23"], CmdOutput::ok(GANG));
    // RUNNING until the grace and the script's moment are over (1 + 3 + 16 looks), then gone
    for _ in 0..20 {
        e.cli.once(&["squeue", "-h", "-t", "all", "-j", "23", "-o", "%T"], CmdOutput::ok("RUNNING\n"));
    }
    e.cli.on(
        &["squeue", "-h", "-t", "all", "-j", "23", "-o", "%T"],
        CmdOutput::fail(1, "slurm_load_jobs error: Invalid job id specified"),
    );
    e.cli.on(&["scancel"], CmdOutput::ok(""));
    e.cli
        .on(&["squeue", "-s", "-h", "-j", "23"], CmdOutput::ok("23.0|m1|node2\n23.1|m0|node1\n23.batch|batch|node1\n"));
    e.cli.on(&["srun"], CmdOutput::ok(""));
    e.engine.cancel("23", Duration::from_millis(300)).await.unwrap();
    // the members' containers are killed where they run, as the job's user, before Slurm's KILL
    let kills: Vec<Cmd> = e.cli.calls_to("srun");
    assert_eq!(kills.len(), 2);
    assert_eq!(kills[0].user, Some((10001, 10001)));
    assert_eq!(
        argv(&kills[0]),
        [
            "srun",
            "--jobid=23",
            "--overlap",
            "--nodelist=node2",
            "--nodes=1",
            "--ntasks=1",
            "--quiet",
            "crun",
            "--rootless=true",
            "--root=/var/lib/gpuhub-slurm-dev/run/oci",
            "kill",
            "node2.gpuhub-t1.23.0.0",
            "KILL",
        ]
    );
    let sc: Vec<Vec<String>> = e.cli.calls_to("scancel").iter().map(|c| c.args.clone()).collect();
    assert_eq!(
        sc,
        [
            vec!["--signal=TERM".to_owned(), "23".into()],
            vec!["--full".to_owned(), "--signal=KILL".into(), "23".into()],
            vec!["23".to_owned()],
        ]
    );
}

#[tokio::test]
async fn inventory_and_an_unreachable_controller() {
    let e = env();
    e.cli.on(&["sinfo", "--json"], CmdOutput::ok(SINFO));
    let nodes = e.engine.inventory().await.unwrap();
    assert_eq!(nodes.len(), 2);
    let n = &nodes[0];
    assert_eq!(n.capacity.name, "node1");
    assert_eq!(n.capacity.cpus.0, 4000);
    assert_eq!(n.capacity.memory.0, 4000 << 20);
    let gpus: Vec<(&str, u32, &str)> =
        n.capacity.gpus.iter().map(|g| (g.uuid.as_str(), g.index, g.model.as_str())).collect();
    assert_eq!(gpus, [("node1/gpu0", 0, "fake"), ("node1/gpu1", 1, "fake")]);
    assert!(n.up);
    assert_eq!(n.capacity.labels["slurm.partitions"], "gpu");
    // only the configured partitions' nodes
    let other = SlurmEngine::with_cli(SlurmConfig { partition: Some("cpu".into()), ..e.config.clone() }, e.cli.clone());
    assert!(other.inventory().await.unwrap().is_empty());

    // slurmctld down: sinfo exits 0 with an error entry; the error carries scontrol ping's words
    let e = env();
    e.cli.on(&["sinfo", "--json"], CmdOutput::ok(SINFO_DOWN));
    e.cli.on(&["scontrol", "ping"], CmdOutput::ok("Slurmctld(primary) at gpuhub-ctl is DOWN\n"));
    let err = e.engine.inventory().await.unwrap_err();
    assert!(matches!(&err, EngineError::Unavailable(m) if m.contains("is DOWN")), "{err:?}");
    // and connect says what to do
    e.cli.on(&["sbatch", "--version"], CmdOutput::ok("slurm 22.05.8"));
    for c in ["squeue", "sinfo", "scontrol", "scancel", "srun", "sacct"] {
        e.cli.on(&[c, "--version"], CmdOutput::ok("slurm 22.05.8"));
    }
    let err = e.engine.check().await.unwrap_err();
    assert!(
        err.to_string().contains("cannot reach slurmctld") && err.to_string().contains("slurm-dev-cluster.sh status"),
        "{err}"
    );
    // a missing command
    let e = env();
    e.cli.fail_to_start(&["sbatch"], std::io::ErrorKind::NotFound);
    let err = e.engine.check().await.unwrap_err();
    assert!(err.to_string().contains("cannot run sbatch: not found"), "{err}");
}

#[tokio::test]
async fn events_from_polls_and_none_while_slurm_is_unreachable() {
    let e = env();
    let runs = e.config.bundle_dir.join("runs");
    std::fs::create_dir_all(&runs).unwrap();
    let comment = r#"{"gpuhub.members":"1","gpuhub.slurm.dir":"d7","gpuhub.workload":"w7"}"#;
    let job = |state: &str, nodes: &str| {
        format!("700|{state}|None|gpu|100|2026-11-23T19:00:00|N/A|alice|10001|10001|N/A|{nodes}|{comment}\n")
    };
    std::fs::create_dir_all(runs.join("d7")).unwrap();
    let q: &[&str] = &["squeue", "-h", "-t", "all", "-o"];
    e.cli.once(q, CmdOutput::ok(job("PENDING", "")));
    e.cli.once(q, CmdOutput::ok(job("RUNNING", "node1")));
    // slurmctld goes away for two polls: nothing may be said about run 700
    e.cli.once(q, CmdOutput::fail(1, "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"));
    e.cli.once(q, CmdOutput::fail(1, "slurm_load_jobs error: Socket timed out on send/recv operation"));
    e.cli.on(q, CmdOutput::ok(job("FAILED", "node1")));
    e.cli.on(
        &["sacct", "-a", "-P", "-n", "-j", "700"],
        CmdOutput::ok("700|gpuhub-x-w7|FAILED|3:0|alice|node1|gpu|\n700.0|m0|FAILED|3:0||node1||\n"),
    );
    let events: Vec<_> =
        tokio::time::timeout(Duration::from_secs(10), e.engine.events().await.unwrap().take(2).try_collect())
            .await
            .unwrap()
            .unwrap();
    assert_eq!(
        events,
        [
            gpuhub_driver::EngineEvent::Started { run: "700".into(), workload: "w7".into(), member: 0 },
            gpuhub_driver::EngineEvent::Exited { run: "700".into(), workload: "w7".into(), member: 0, exit_code: 3 },
        ]
    );
    // removing it (its directory) makes the poll say Removed
    let mut stream = e.engine.events().await.unwrap();
    std::fs::remove_dir_all(runs.join("d7")).unwrap();
    let ev = tokio::time::timeout(Duration::from_secs(10), stream.next()).await.unwrap().unwrap().unwrap();
    assert_eq!(ev, gpuhub_driver::EngineEvent::Removed { run: "700".into(), workload: "w7".into(), member: 0 });
}

#[tokio::test]
async fn exec_logs_and_endpoint_of_a_running_member() {
    let e = env();
    e.cli.on(&["scontrol", "show", "job", "-d", "23"], CmdOutput::ok(GANG));
    e.cli
        .on(&["squeue", "-s", "-h", "-j", "23"], CmdOutput::ok("23.0|m1|node2\n23.1|m0|node1\n23.batch|batch|node1\n"));
    e.cli.on(&["srun"], CmdOutput::ok("10001\n"));
    let spec = ExecSpec { command: vec!["id".into(), "-u".into()], tty: Some((80, 24)), ..Default::default() };
    let mut h = e.engine.exec(&MemberRef::new("23", 1), &spec).await.unwrap();
    let out: Vec<bytes::Bytes> = h.output.by_ref().try_collect().await.unwrap();
    assert_eq!(out.concat(), b"10001\n");
    assert_eq!(h.wait().await.unwrap(), 0);
    h.resize(100, 30).await.unwrap();
    let (cmd, tty) = e.cli.spawned().pop().unwrap();
    assert_eq!(tty, Some((80, 24)));
    assert_eq!(cmd.user, Some((10001, 10001)), "as the job's user");
    assert_eq!(
        argv(&cmd),
        [
            "srun",
            "--jobid=23",
            "--overlap",
            "--nodelist=node2",
            "--nodes=1",
            "--ntasks=1",
            "--quiet",
            "--pty",
            "crun",
            "--rootless=true",
            "--root=/var/lib/gpuhub-slurm-dev/run/oci",
            "exec",
            "--tty",
            "--user=10001:10001",
            "node2.gpuhub-t1.23.0.0",
            "id",
            "-u",
        ]
    );
    let piped = e.engine.exec(&MemberRef::new("23", 1), &ExecSpec { tty: None, ..spec.clone() }).await.unwrap();
    assert!(matches!(piped.resize(100, 30).await, Err(EngineError::Rejected(_))), "no terminal to resize");
    assert!(matches!(e.engine.exec(&MemberRef::new("23", 2), &spec).await, Err(EngineError::NotFound(_))));

    // the endpoint is the member's node's address
    e.cli.on(&["sinfo", "--json"], CmdOutput::ok(SINFO));
    let addr = e.engine.endpoint(&MemberRef::new("23", 1), 8888).await.unwrap();
    assert_eq!(addr.to_string(), "10.250.77.12:8888");

    // logs: the member's file under the job user's directory
    let dir = e.config.log_dir.join("gpuhub-t1");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("job-23.m1.log"), "one\ntwo\nthree\n").unwrap();
    let text = |s: gpuhub_driver::LogStream| async move {
        let c: Vec<bytes::Bytes> = s.try_collect().await.unwrap();
        String::from_utf8(c.concat()).unwrap()
    };
    assert_eq!(text(e.engine.logs(&MemberRef::new("23", 1), false, Some(2)).await.unwrap()).await, "two\nthree\n");
    // following ends when the member's exit file appears
    std::fs::write(dir.join("job-23.m1.exit"), "0\n").unwrap();
    let followed = tokio::time::timeout(
        Duration::from_secs(5),
        text(e.engine.logs(&MemberRef::new("23", 1), true, None).await.unwrap()),
    );
    assert_eq!(followed.await.unwrap(), "one\ntwo\nthree\n");
}

#[tokio::test]
async fn many_running_gpu_runs_read_their_gpus_from_one_json_answer() {
    let e = env();
    let comment = r#"{"gpuhub.members":"1","gpuhub.workload":"w"}"#;
    let text: String = (1..=9)
        .map(|i| format!("{i}|RUNNING|None|gpu|1|N/A|N/A|alice|10001|10001|gres:gpu:1|node1|{comment}\n"))
        .collect();
    let json = serde_json::json!({"errors": [], "jobs": (1..=9).map(|i| serde_json::json!({
        "job_id": i, "job_state": "RUNNING", "nodes": "node1", "gres_detail": [format!("gpu:fake:1(IDX:{})", i % 2)],
        "job_resources": {"allocated_nodes": [{"nodename": "node1"}]}})).collect::<Vec<_>>()});
    e.cli.on(&["squeue", "-h", "-t", "all", "-o"], CmdOutput::ok(text));
    e.cli.on(&["squeue", "--json"], CmdOutput::ok(json.to_string()));
    let runs = e.engine.list_runs().await.unwrap();
    assert_eq!(runs.len(), 9);
    assert_eq!(runs[0].members[0].gpus, ["node1/gpu1"]);
    assert_eq!(runs[1].members[0].gpus, ["node1/gpu0"]);
    assert!(e.cli.calls_to("scontrol").is_empty());
}

#[test]
fn capabilities() {
    let e = env();
    let c = e.engine.capabilities();
    assert_eq!(c.placement, Placement::Engine);
    assert!(c.multi_node && c.exec && c.ingress && c.volumes && c.gpu_shares && c.shared_ports);
    assert!(!c.usage, "slurm does not measure members");
    assert_eq!(e.engine.name(), "slurm");
}

#[test]
fn no_disk_cap_and_says_why() {
    let why = env().engine.disk_cap().expect_err("crun bundles have no size limit");
    assert!(why.contains("crun") && why.contains("no per-container size limit"), "{why}");
}

#[tokio::test]
async fn usage_is_unsupported() {
    let e = env();
    match e.engine.usage("1234").await {
        Err(EngineError::Unsupported { engine, what }) => assert_eq!((engine, what.as_str()), ("slurm", "usage")),
        other => panic!("expected unsupported, got {other:?}"),
    }
    assert!(e.cli.calls().is_empty(), "nothing was asked of slurm");
}

#[tokio::test]
async fn a_time_limit_is_extended_with_scontrol_update() {
    let e = env();
    e.cli.on(&["scontrol", "show", "job", "-d", "23"], CmdOutput::ok(GANG));
    e.cli.on(&["scontrol", "update"], CmdOutput::ok(""));
    e.engine.extend_time_limit("23", Duration::from_secs(3 * 3600 + 30)).await.unwrap();
    let updates: Vec<Vec<String>> =
        e.cli.calls_to("scontrol").iter().filter(|c| c.args[0] == "update").map(|c| c.args.clone()).collect();
    assert_eq!(updates, [vec!["update".to_owned(), "JobId=23".into(), "TimeLimit=0-03:00:30".into()]]);
    // Slurm's refusal is the engine's error
    let e = env();
    e.cli.on(&["scontrol", "show", "job", "-d", "23"], CmdOutput::ok(GANG));
    e.cli.on(&["scontrol", "update"], CmdOutput::fail(1, "slurm_update error: Access/permission denied"));
    let err = e.engine.extend_time_limit("23", Duration::from_secs(60)).await.unwrap_err();
    assert!(err.to_string().contains("permission denied"), "{err}");
}
