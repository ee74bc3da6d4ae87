//! Crash consistency (issue 27): the real `gpuhub serve` (SQLite, the real Docker engine, two fake GPU
//! device nodes) is SIGKILLed at a random moment while a client submits jobs one after another, started
//! again on the same data directory, and checked, round after round:
//!
//! - every submission the client saw acknowledged is there, once (names are unique, each workload has
//!   one state);
//! - no container of the test's user is without a workload, and no workload has two containers;
//! - the workloads the hub says run are those whose container runs (allocations equal running
//!   containers), and no GPU is held by two of them; each one's container has exactly its GPUs.
//!
//! At the end every job has ended `succeeded` with exit code 0 (each ran `sleep`, then `exit 0`, however
//! often the hub died meanwhile). `GPUHUB_CRASH_ROUNDS` sets the rounds (10 unless set; CI's bound is
//! about two minutes); the random seed is printed (`GPUHUB_CRASH_SEED` replays one). Needs root (mknod)
//! and a Docker engine, like the other end-to-end tests.

mod common;

use anyhow::{Context as _, Result, bail, ensure};
use common::{Hub, IMAGE, User, docker, docker_inspect, host_devices};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A small deterministic generator (xorshift64*), seeded and printed, so a failing run can be replayed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

fn env_number(name: &str, default: u64) -> Result<u64> {
    match std::env::var(name) {
        Ok(v) => v.parse().with_context(|| format!("{name}={v:?} is not a number")),
        Err(_) => Ok(default),
    }
}

/// `gpuhub run` of job `name` (every third with one GPU): whether the hub acknowledged it, else what
/// the CLI said.
fn submit(user: &User, name: &str, gpu: bool) -> Result<Result<(), String>> {
    let mut args = vec!["run", "--name", name, "--image", IMAGE, "--cpus", "0.1", "--memory", "32MiB"];
    if gpu {
        args.extend(["--gpus", "1"]);
    }
    args.extend(["--", "sh", "-c", "sleep 1; exit 0"]);
    let out = user.output(&args)?;
    Ok(if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).trim().to_owned()) })
}

/// A container of the user: id, its workload's id, whether it runs.
struct Container {
    id: String,
    workload: String,
    running: bool,
}

fn containers(owner: &str) -> Result<Vec<Container>> {
    let label = format!("label=gpuhub.owner={owner}");
    let out = docker(&[
        "ps",
        "-a",
        "--no-trunc",
        "--filter",
        &label,
        "--format",
        "{{.ID}}|{{.Label \"gpuhub.workload\"}}|{{.State}}",
    ])?;
    out.lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let mut parts = l.split('|');
            let (id, workload, state) = (parts.next(), parts.next(), parts.next());
            Ok(Container {
                id: id.context("no id")?.to_owned(),
                workload: workload.context("no workload label")?.to_owned(),
                running: state == Some("running"),
            })
        })
        .collect()
}

fn workloads(user: &User) -> Result<Vec<Value>> {
    Ok(user.json(&["ps"])?.as_array().context("ps --json is no list")?.clone())
}

/// The invariants over one snapshot (the hub's list, the engine's containers, the hub's list again,
/// unchanged): what is wrong, if anything.
fn violations(hub: &Hub, user: &User, acknowledged: &[String]) -> Result<Option<String>> {
    let before = workloads(user)?;
    let cs = containers(&user.name)?;
    let after = workloads(user)?;
    let states = |ws: &[Value]| ws.iter().map(|w| (w["id"].clone(), w["state"].clone())).collect::<Vec<_>>();
    if states(&before) != states(&after) {
        return Ok(Some("the workloads changed while they were looked at".into()));
    }
    let mut by_name: BTreeMap<&str, &Value> = BTreeMap::new();
    for w in &after {
        let name = w["name"].as_str().context("workload without name")?;
        if by_name.insert(name, w).is_some() {
            return Ok(Some(format!("workload {name} is listed twice")));
        }
    }
    if let Some(lost) = acknowledged.iter().find(|n| !by_name.contains_key(n.as_str())) {
        return Ok(Some(format!("the acknowledged submission {lost} is gone")));
    }
    let by_id: BTreeMap<&str, &Value> = after.iter().filter_map(|w| Some((w["id"].as_str()?, w))).collect();
    let mut per_workload: BTreeMap<&str, Vec<&Container>> = BTreeMap::new();
    for c in &cs {
        if !by_id.contains_key(c.workload.as_str()) {
            return Ok(Some(format!("container {} has no workload ({})", &c.id[..12], c.workload)));
        }
        per_workload.entry(c.workload.as_str()).or_default().push(c);
    }
    if let Some((w, list)) = per_workload.iter().find(|(_, l)| l.len() > 1) {
        return Ok(Some(format!("workload {} has {} containers", by_id[w]["name"], list.len())));
    }
    let mut held = BTreeSet::new();
    for (id, w) in &by_id {
        let state = w["state"].as_str().unwrap_or("");
        let container = per_workload.get(id).and_then(|l| l.first());
        let runs = container.is_some_and(|c| c.running);
        match (state, runs) {
            ("running", false) => return Ok(Some(format!("{} is running without a running container", w["name"]))),
            ("running" | "starting", true) => {}
            (other, true) => return Ok(Some(format!("{} is {other} but its container runs", w["name"]))),
            _ => {}
        }
        if state != "running" {
            continue;
        }
        let gpus: Vec<String> =
            w["gpus"].as_array().into_iter().flatten().filter_map(|g| g.as_str().map(str::to_owned)).collect();
        for g in &gpus {
            if !held.insert(g.clone()) {
                return Ok(Some(format!("GPU {g} is held twice (by {} and another)", w["name"])));
            }
        }
        if let Some(c) = container {
            let devices = host_devices(&docker_inspect(&c.id)?)
                .into_iter()
                .filter(|d| hub.server.devices.iter().any(|p| p.as_os_str() == d.as_str()))
                .count();
            if devices != gpus.len() {
                return Ok(Some(format!("{} holds {} GPUs, its container has {devices}", w["name"], gpus.len())));
            }
        }
    }
    Ok(None)
}

/// Waits (at most a minute) for a snapshot without violations; fails with the last one seen.
fn consistent(hub: &Hub, user: &User, acknowledged: &[String]) -> Result<Duration> {
    let t = Instant::now();
    loop {
        match violations(hub, user, acknowledged)? {
            None => return Ok(t.elapsed()),
            Some(v) if t.elapsed() > Duration::from_secs(60) => bail!("inconsistent after {:?}: {v}", t.elapsed()),
            Some(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

#[test]
fn sigkill_during_submissions_leaves_workloads_and_containers_consistent() -> Result<()> {
    let _serial = common::serial();
    let rounds = env_number("GPUHUB_CRASH_ROUNDS", 10)?;
    let seed = env_number(
        "GPUHUB_CRASH_SEED",
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_nanos() as u64 | 1,
    )?;
    println!("crash: {rounds} rounds, seed {seed} (GPUHUB_CRASH_SEED={seed} replays it)");
    let mut rng = Rng(seed.max(1));
    let started = Instant::now();
    let mut hub = Hub::start_with("reconcile_secs = 1")?;
    let user = hub.user("crash")?;
    let acknowledged = Mutex::new(Vec::<String>::new());
    let refusals = Mutex::new(Vec::<String>::new());
    let mut next = 0usize;
    for round in 0..rounds {
        // a client submits one job after another; the hub is killed after a random while, maybe in the
        // middle of a submission (that one may or may not be stored: it was never acknowledged)
        let kill_after = Duration::from_millis(200 + rng.below(2300));
        let stop = AtomicBool::new(false);
        let first = next;
        let tried = std::thread::scope(|s| -> Result<usize> {
            let client = s.spawn(|| -> Result<usize> {
                let mut n = first;
                while !stop.load(Ordering::SeqCst) {
                    let name = format!("r{round}-{n}");
                    match submit(&user, &name, n % 3 == 0)? {
                        Ok(()) => acknowledged.lock().unwrap().push(name),
                        Err(e) => {
                            // at the user's limit of live containers: give a job the time to end
                            if e.contains("too many containers") {
                                std::thread::sleep(Duration::from_millis(250));
                            }
                            refusals.lock().unwrap().push(e);
                        }
                    }
                    n += 1;
                }
                Ok(n)
            });
            std::thread::sleep(kill_after);
            let killed = hub.server.kill();
            stop.store(true, Ordering::SeqCst);
            let n = client.join().map_err(|_| anyhow::anyhow!("the client panicked"))??;
            killed?;
            Ok(n)
        })?;
        next = tried;
        hub.server.restart()?;
        let acked = acknowledged.lock().unwrap().clone();
        let refused: Vec<String> = std::mem::take(&mut *refusals.lock().unwrap());
        // a submission is refused only by the hub's own limit on a user's live containers, or fails to
        // reach the hub as it is killed: never with a server error
        let (mut at_kill, mut limit) = (0, 0);
        for r in &refused {
            if r.contains("too many containers") {
                limit += 1;
            } else if r.contains("cannot reach") || r.contains("failed: ") {
                at_kill += 1;
            } else {
                bail!("round {round}: a submission was refused so: {r}");
            }
        }
        ensure!(at_kill <= 2, "round {round}: {at_kill} submissions failed to reach the hub: {refused:?}");
        let took = consistent(&hub, &user, &acked)?;
        let ws = workloads(&user)?;
        let count = |s: &str| ws.iter().filter(|w| w["state"] == s).count();
        println!(
            "crash: round {round}: killed after {kill_after:?}, {} submissions tried ({limit} refused by the \
             per-user container limit, {at_kill} cut by the kill), {} acknowledged in all; consistent {took:.1?} after the restart: {} workloads ({} queued, {} starting, {} running, {} \
             succeeded), {} containers",
            tried - first,
            acked.len(),
            ws.len(),
            count("queued"),
            count("starting"),
            count("running"),
            count("succeeded"),
            containers(&user.name)?.len()
        );
    }
    // every job ends by itself, with its own exit code, however often the hub died
    let acked = acknowledged.into_inner().unwrap();
    ensure!(!acked.is_empty(), "no submission was acknowledged in {rounds} rounds");
    let deadline = Instant::now() + Duration::from_secs(180);
    let ws = loop {
        let ws = workloads(&user)?;
        if ws.iter().all(|w| !matches!(w["state"].as_str(), Some("queued" | "starting" | "running"))) {
            break ws;
        }
        ensure!(Instant::now() < deadline, "jobs still live after 180 s: {ws:#?}");
        std::thread::sleep(Duration::from_millis(250));
    };
    consistent(&hub, &user, &acked)?;
    for w in &ws {
        ensure!(w["state"] == "succeeded" && w["exit_code"] == 0, "job {} ended so: {w:#}", w["name"]);
    }
    println!(
        "crash: all {} jobs ({} acknowledged) succeeded with exit code 0 after {rounds} kills; {:.1?} in all",
        ws.len(),
        acked.len(),
        started.elapsed()
    );
    Ok(())
}
