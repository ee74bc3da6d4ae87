//! The Slurm engine on the dev cluster (`scripts/slurm-dev-cluster.sh start`, as root):
//!
//! 1. submit → running through `SlurmEngine` against a plain `sbatch` of the same command as the same
//!    user (median of 20 each, alternating, each submitted when every node is idle), measured twice:
//!    until Slurm says RUNNING (`observe` for the engine, `squeue` for plain sbatch) and until the
//!    command's first line is in its output file;
//! 2. the cost of one observe of everything (`list_runs`, and the event poll's `squeue --json`) with
//!    1,000 held jobs in the queue more than before (slurmctld also keeps ended jobs for `MinJobAge`, and
//!    `squeue --json` lists them too).
//!
//! `cargo bench -p gpuhub-slurm --bench slurm` (`GPUHUB_SLURM_BENCH_N`, `GPUHUB_SLURM_BENCH_QUEUE` to change
//! 20 and 1,000).

use gpuhub_driver::{
    Engine, GpuGrant, Identity, LABEL_INSTANCE, LABEL_OWNER, LABEL_WORKLOAD, MemberSpec, MemberState, RunSpec,
};
use gpuhub_slurm::{SlurmConfig, SlurmEngine};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const ACCOUNT: &str = "gpuhub-t1";
const UID: u32 = 10001;
const FILLER: &str = "gpuhub-t2";

fn dir() -> PathBuf {
    PathBuf::from(std::env::var("GPUHUB_SLURM_DIR").unwrap_or_else(|_| "/var/lib/gpuhub-slurm-dev".to_owned()))
}

fn config() -> SlurmConfig {
    let d = dir();
    SlurmConfig {
        conf: Some(d.join("slurm.conf")),
        partition: Some("gpu".into()),
        accounts: BTreeMap::from([("alice".to_owned(), ACCOUNT.to_owned())]),
        bundle_dir: d.join("bundles"),
        log_dir: d.join("gpuhub-logs"),
        oci_root: d.join("run/oci"),
        init: Some("/usr/bin/tini-static".into()),
        ..SlurmConfig::default()
    }
}

fn slurm(cmd: &str) -> Command {
    let mut c = Command::new(cmd);
    c.env("SLURM_CONF", dir().join("slurm.conf"));
    c
}

fn spec(i: usize, script: &str) -> RunSpec {
    RunSpec {
        name: format!("bench-{i}"),
        image: "gpuhub/busybox:latest".into(),
        command: vec!["sh".into(), "-c".into(), script.into()],
        env: BTreeMap::new(),
        labels: BTreeMap::from([
            (LABEL_OWNER.to_owned(), "alice".to_owned()),
            (LABEL_WORKLOAD.to_owned(), format!("bench-{i}")),
            (LABEL_INSTANCE.to_owned(), "benchmark".to_owned()),
        ]),
        identity: Identity {
            username: "alice".into(),
            account: ACCOUNT.into(),
            uid: UID,
            gid: UID,
            home: "/tmp".into(),
            groups: Vec::new(),
        },
        working_dir: None,
        mounts: vec![],
        network: None,
        members: vec![MemberSpec {
            index: 0,
            hostname: "bench".into(),
            node: None,
            cpu_milli: 1000,
            memory_bytes: 250 << 20,
            gpus: GpuGrant::None,
            env: BTreeMap::new(),
            mounts: Vec::new(),
        }],
        pids_limit: 256,
        log_max_bytes: None,
        time_limit: None,
        queue: String::new(),
        ports: vec![],
        disk_bytes: None,
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

async fn until<F: FnMut() -> bool>(mut f: F) {
    let limit = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < limit, "gave up after 60 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn contains(path: &Path, text: &str) -> bool {
    std::fs::read_to_string(path).is_ok_and(|s| s.contains(text))
}

/// Waits until every node is idle, and then a while (`GPUHUB_SLURM_BENCH_SETTLE_MS`, default 3000): the
/// scheduler gives a node whose job just ended no new job at once, which would measure Slurm's own
/// pause instead of what gpuhub adds.
async fn nodes_idle() {
    until(|| {
        let out = slurm("sinfo").args(["-h", "-N", "-o", "%T"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).lines().all(|l| l.trim() == "idle")
    })
    .await;
    let settle = std::env::var("GPUHUB_SLURM_BENCH_SETTLE_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(3000);
    tokio::time::sleep(Duration::from_millis(settle)).await;
}

fn squeue_state(job: &str) -> String {
    let out = slurm("squeue").args(["-h", "-t", "all", "-j", job, "-o", "%T"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// One engine submission: (to RUNNING, to the first line).
async fn engine_once(engine: &SlurmEngine, i: usize) -> (Duration, Duration) {
    let t = Instant::now();
    let run = engine.submit(&spec(i, "echo started; sleep 60")).await.unwrap();
    let running = loop {
        let s = engine.observe(&run.id).await.unwrap();
        if s.members[0].state == MemberState::Running {
            break t.elapsed();
        }
        assert!(t.elapsed() < Duration::from_secs(60));
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let log = config().log_dir.join(ACCOUNT).join(format!("job-{}.m0.log", run.id));
    until(|| contains(&log, "started")).await;
    let first = t.elapsed();
    engine.cancel(&run.id, Duration::ZERO).await.unwrap();
    engine.remove(&run.id).await.unwrap();
    (running, first)
}

/// One plain `sbatch` of the same command, as the same user: (to RUNNING, to the first line).
async fn sbatch_once(i: usize) -> (Duration, Duration) {
    let out_file = config().log_dir.join(ACCOUNT).join(format!("plain-{i}-{}.out", std::process::id()));
    let t = Instant::now();
    let out = slurm("sbatch")
        .args([
            "--parsable",
            &format!("--uid={UID}"),
            &format!("--gid={UID}"),
            "--export=NONE",
            "--partition=gpu",
            "--cpus-per-task=1",
            "--mem=250M",
            &format!("--output={}", out_file.display()),
            "--wrap=echo started; sleep 60",
        ])
        .current_dir("/tmp")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let job = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    until(|| squeue_state(&job) == "RUNNING").await;
    let running = t.elapsed();
    until(|| contains(&out_file, "started")).await;
    let first = t.elapsed();
    slurm("scancel").arg(&job).status().unwrap();
    // as the engine's cancel does: the next submission finds the node free
    until(|| !matches!(squeue_state(&job).as_str(), "RUNNING" | "COMPLETING" | "PENDING")).await;
    let _ = std::fs::remove_file(&out_file);
    (running, first)
}

async fn list_cost(engine: &SlurmEngine, rounds: usize) -> Cost {
    let mut list = Vec::new();
    let mut runs = 0;
    for _ in 0..rounds {
        let t = Instant::now();
        runs = engine.list_runs().await.unwrap().len();
        list.push(t.elapsed());
    }
    let mut poll = Vec::new();
    let mut json = Vec::new();
    let (mut lines, mut bytes, mut json_bytes) = (0, 0, 0);
    for _ in 0..rounds {
        // what the event poller runs, parsed as it parses it
        let t = Instant::now();
        let out =
            slurm("squeue").args(["-h", "-t", "all", "-o", gpuhub_slurm::parse::squeue::TEXT_FORMAT]).output().unwrap();
        let jobs = gpuhub_slurm::parse::squeue::text_jobs(&String::from_utf8_lossy(&out.stdout)).unwrap();
        poll.push(t.elapsed());
        (lines, bytes) = (jobs.len(), out.stdout.len());
        let t = Instant::now();
        let out = slurm("squeue").arg("--json").output().unwrap();
        gpuhub_slurm::parse::squeue::jobs(&out.stdout).unwrap();
        json.push(t.elapsed());
        json_bytes = out.stdout.len();
    }
    Cost { list: median(list), runs, poll: median(poll), jobs: lines, bytes, json: median(json), json_bytes }
}

/// What one look at everything cost.
struct Cost {
    list: Duration,
    runs: usize,
    poll: Duration,
    jobs: usize,
    bytes: usize,
    json: Duration,
    json_bytes: usize,
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes --bench; `cargo test --all-targets` runs this without it: then do nothing
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let n: usize = std::env::var("GPUHUB_SLURM_BENCH_N").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    let queue: usize = std::env::var("GPUHUB_SLURM_BENCH_QUEUE").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    let engine = match SlurmEngine::connect(config()).await {
        Ok(e) => e,
        Err(e) => {
            eprintln!("the Slurm benchmark needs the dev cluster (scripts/slurm-dev-cluster.sh start, as root): {e}");
            std::process::exit(2);
        }
    };
    for user in [ACCOUNT, FILLER] {
        let _ = slurm("scancel").args(["-u", user]).status();
    }
    // warm up: the image's bundle, the user's log directory
    engine_once(&engine, 9999).await;
    sbatch_once(9999).await;

    let (mut e_run, mut e_first, mut p_run, mut p_first) = (vec![], vec![], vec![], vec![]);
    for i in 0..n {
        nodes_idle().await;
        let (r, f) = engine_once(&engine, i).await;
        e_run.push(r);
        e_first.push(f);
        nodes_idle().await;
        let (r, f) = sbatch_once(i).await;
        p_run.push(r);
        p_first.push(f);
    }
    let (er, ef, pr, pf) = (median(e_run), median(e_first), median(p_run), median(p_first));
    println!("submit -> running, median of {n} (one member, no GPU, busybox; plain sbatch --wrap as the same user):");
    println!(
        "  Slurm says RUNNING:  engine {}  sbatch {}  ratio {:.2}",
        ms(er),
        ms(pr),
        er.as_secs_f64() / pr.as_secs_f64()
    );
    println!(
        "  first line printed:  engine {}  sbatch {}  ratio {:.2}",
        ms(ef),
        ms(pf),
        ef.as_secs_f64() / pf.as_secs_f64()
    );

    // a few gpuhub runs, then the queue filled with held jobs
    let mut ours = Vec::new();
    for i in 0..3 {
        ours.push(engine.submit(&spec(20_000 + i, "sleep 600")).await.unwrap().id);
    }
    let before = list_cost(&engine, 10).await;
    let t = Instant::now();
    let mut handles = Vec::new();
    for chunk in 0..8 {
        let per = queue / 8 + usize::from(chunk < queue % 8);
        handles.push(tokio::task::spawn_blocking(move || {
            for _ in 0..per {
                let out = slurm("sbatch")
                    .args(["--parsable", "--hold", "--uid=10002", "--gid=10002", "--export=NONE", "--output=/dev/null"])
                    .args(["--job-name=filler", "--wrap=true"])
                    .current_dir("/tmp")
                    .output()
                    .unwrap();
                assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    println!("\nfilled the queue with {queue} held jobs in {:.1} s", t.elapsed().as_secs_f64());
    let after = list_cost(&engine, 10).await;
    let one = {
        let mut v = Vec::new();
        for _ in 0..10 {
            let t = Instant::now();
            engine.observe(&ours[0]).await.unwrap();
            v.push(t.elapsed());
        }
        median(v)
    };
    println!(
        "observe cost, median of 10 (3 gpuhub runs among them; slurmctld also holds the jobs that ended within MinJobAge):"
    );
    for (what, c) in [("before", &before), (&format!("with {queue} more"), &after)] {
        println!(
            "  {what:>14}: {} jobs in squeue -t all; list_runs {} ({} runs); poll (squeue text) {} ({} KiB); squeue --json {} ({} KiB)",
            c.jobs,
            ms(c.list),
            c.runs,
            ms(c.poll),
            c.bytes / 1024,
            ms(c.json),
            c.json_bytes / 1024
        );
    }
    println!("  observe one run:        with {queue} jobs {}", ms(one));
    let _ = slurm("scancel").args(["-u", FILLER]).status();
    for id in &ours {
        let _ = engine.cancel(id, Duration::ZERO).await;
        let _ = engine.remove(id).await;
    }
}
