//! The container engine restarted WITHOUT live restore while five jobs run, on a private `dockerd`
//! (the shared one is never touched): stopped with SIGTERM and started again (what a package upgrade
//! does: dockerd stops its containers, 143), or SIGKILLed and started again (a crash: the containers
//! outlive it under their shims and the restarted dockerd kills them). Either way the kills are the
//! engine's, not the jobs': each job is queued again in its old place with the typed reason
//! `engine-restarted` (in its interruption and its history), runs again once the engine answers (its
//! old container removed first) and ends with its own exit code. With `on_engine_restart = "fail"` it
//! fails instead, the reason recorded.

use crate::common::{ADMIN_PASSWORD, Hub, config, node};
use crate::engine::{IMAGE, PrivateDockerd, counts_by_workload, installed, is_root};
use gpuhub_core::stop::OnEngineRestart;
use gpuhub_docker::DockerRuntime;
use serde_json::{Value, json};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

/// (name, exit code of its second run)
const JOBS: [(&str, i64); 5] = [("j1", 0), ("j2", 1), ("j3", 2), ("j4", 3), ("j5", 42)];

/// A job that appends its name to `$HOME/starts` at every start; its first run sleeps until killed,
/// a second one ends with `code` after a second.
fn job(name: &str, code: i64) -> Value {
    let script = format!(
        "echo {name} >> $HOME/starts; if [ \"$(grep -c '^{name}$' $HOME/starts)\" -lt 2 ]; then sleep 600; fi; sleep 1; exit {code}"
    );
    json!({"name": name, "kind": "job", "image": IMAGE, "command": ["sh", "-c", script],
        "resources": {"cpus": 0.25, "memory": "64MiB", "gpus": 0}})
}

/// A private engine without live restore, the image loaded, and a hub on it.
async fn hub_on_private_engine(
    root: &std::path::Path,
    pool: &'static str,
    on_restart: OnEngineRestart,
) -> (PrivateDockerd, DockerRuntime, Hub) {
    let engine = PrivateDockerd::new(root, false, pool);
    engine.start();
    let load = format!("docker save {IMAGE} | docker -H {} load", engine.host());
    let loaded = Command::new("sh").args(["-c", &load]).stdout(Stdio::null()).status().unwrap();
    assert!(loaded.success(), "cannot load {IMAGE} into the private engine (run scripts/setup-debian.sh)");
    let rt = DockerRuntime::connect_unix(&engine.socket()).await.unwrap().with_host_isolation(false);
    assert!(!rt.live_restore().await.unwrap(), "docker info says LiveRestoreEnabled: false");
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.reconcile_secs = 1;
    cfg.gpu_mode = gpuhub_server::config::GpuMode::None;
    cfg.stop_grace_secs = 1;
    cfg.pids_limit = 1024;
    cfg.on_engine_restart = on_restart;
    let docker_engine = gpuhub_docker::DockerEngine::new(rt.clone(), node(0), gpuhub_docker::GpuMode::None);
    let hub = Hub::start_on(dir, cfg, Arc::new(docker_engine)).await;
    (engine, rt, hub)
}

fn skip(test: &str) -> bool {
    if !installed("dockerd") || !is_root() {
        println!("SKIPPED: {test} needs dockerd installed and root");
        return true;
    }
    false
}

/// Five jobs and a workspace through an engine stopped with `signal` and started again: the jobs run
/// again and end with their own codes, the workspace runs again with its home.
async fn five_jobs_through_a_restart(signal: &str, pool: &'static str) {
    let root = tempfile::Builder::new().prefix("ghr").tempdir_in("/tmp").unwrap();
    let (engine, rt, hub) = hub_on_private_engine(root.path(), pool, OnEngineRestart::Requeue).await;
    let admin = hub.login("admin", ADMIN_PASSWORD).await;
    let alice = hub.user(&admin, "alice").await;
    let store = hub.server.as_ref().unwrap().state.store.clone();
    let mut queued_at = Vec::new();
    for (name, code) in JOBS {
        let v = hub.submit(&alice, job(name, code)).await;
        queued_at.push(store.get_workload_by_id(v["id"].as_str().unwrap()).await.unwrap().queued_at);
    }
    let ws = json!({"name": "ws", "kind": "workspace", "image": IMAGE,
        "command": ["sh", "-c", "echo ws >> $HOME/starts; sleep 600"],
        "resources": {"cpus": 0.25, "memory": "64MiB", "gpus": 0}});
    hub.submit(&alice, ws).await;
    let t0 = Instant::now();
    for (name, _) in JOBS {
        hub.wait_for(&alice, name, 60, |v| v["state"] == "running").await;
    }
    hub.wait_for(&alice, "ws", 60, |v| v["state"] == "running").await;
    let all_running = t0.elapsed();

    engine.stop(signal);
    let stopped = t0.elapsed();
    let mut requeued = None;
    if signal == "-TERM" {
        // dockerd stopped its containers (143) and its event stream broke: queued again while it is down
        for (name, _) in JOBS {
            let v = hub.wait_for(&alice, name, 60, |v| v["state"] == "queued").await;
            assert_eq!(v["interruption"]["reason"], "engine-restarted", "{name}: {v}");
            assert!(v["interruption"]["next"].as_str().unwrap().starts_with("queued again in its old place"), "{v}");
            assert!(v["exit_code"].is_null(), "{v}");
        }
        requeued = Some(t0.elapsed());
    }
    let restart_at = t0.elapsed();
    engine.start();
    let back = t0.elapsed();

    let mut ended = Vec::new();
    for ((name, code), queued_at) in JOBS.into_iter().zip(queued_at) {
        let v = hub.wait_for(&alice, name, 120, |v| v["state"] == "succeeded" || v["state"] == "failed").await;
        assert_eq!(v["exit_code"], code, "{name} ends with its own code: {v}");
        assert_eq!(v["state"], if code == 0 { "succeeded" } else { "failed" }, "{v}");
        ended.push(format!("{name} {:.1} s", t0.elapsed().as_secs_f64()));
        // the engine restart is in its history, between its two runs
        let history = v["history"].as_array().unwrap();
        let states: Vec<&str> = history.iter().map(|e| e["state"].as_str().unwrap()).collect();
        let again = history
            .iter()
            .position(|e| {
                e["state"] == "queued" && e["message"].as_str().is_some_and(|m| m.starts_with("engine-restarted"))
            })
            .unwrap_or_else(|| panic!("{name}: no engine-restarted in its history: {v}"));
        assert!(states[..again].contains(&"running") && states[again..].contains(&"running"), "{name}: {states:?}");
        assert_eq!(states.iter().filter(|s| **s == "failed" || **s == "succeeded").count(), 1, "{name}: {states:?}");
        // its place in line is its submission's
        let w = store.get_workload_by_id(v["id"].as_str().unwrap()).await.unwrap();
        assert_eq!(w.queued_at, queued_at, "{name} kept its place in line");
    }
    println!(
        "timeline ({signal}, no live restore): all 5 running {:.1} s; dockerd {signal} {:.1} s; {}restarted {:.1} s, answering {:.1} s; ended: {}",
        all_running.as_secs_f64(),
        stopped.as_secs_f64(),
        requeued.map_or(String::new(), |t| format!("all 5 queued again {:.1} s; ", t.as_secs_f64())),
        restart_at.as_secs_f64(),
        back.as_secs_f64(),
        ended.join(", ")
    );

    // the workspace is back, with its home (the file its first run wrote), and its reason in its history
    let v = hub.wait_for(&alice, "ws", 60, |v| v["state"] == "running").await;
    let again = v["history"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["message"].as_str().is_some_and(|m| m.starts_with("engine-restarted")));
    assert!(again, "{v}");
    // one container per workload (the killed one was removed before its next started), each command run twice
    let counts = counts_by_workload(&rt).await;
    for name in JOBS.map(|(n, _)| n).into_iter().chain(["ws"]) {
        let v = hub.get(&alice, name).await;
        assert_eq!(counts.get(v["id"].as_str().unwrap()), Some(&1), "{name}: containers by workload {counts:?}");
    }
    assert_eq!(counts.len(), 6, "{counts:?}");
    let starts = std::fs::read_to_string(hub.dir.path().join("data/homes/alice/starts")).unwrap();
    let mut runs: Vec<&str> = starts.lines().collect();
    runs.sort();
    assert_eq!(runs, ["j1", "j1", "j2", "j2", "j3", "j3", "j4", "j4", "j5", "j5", "ws", "ws"], "runs of each");
    hub.server.unwrap().shutdown().await;
    drop(engine);
}

/// A package upgrade: dockerd stopped (SIGTERM, it stops its containers) and started again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockerd_restarted_without_live_restore_during_five_jobs() {
    if skip("dockerd_restarted_without_live_restore_during_five_jobs") {
        return;
    }
    five_jobs_through_a_restart("-TERM", "base=10.214.0.0/16,size=24").await;
}

/// A crash: dockerd SIGKILLed and started again; it kills the containers it finds running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockerd_killed_without_live_restore_during_five_jobs() {
    if skip("dockerd_killed_without_live_restore_during_five_jobs") {
        return;
    }
    five_jobs_through_a_restart("-KILL", "base=10.215.0.0/16,size=24").await;
}

/// `on_engine_restart = "fail"`: a job the engine's stop killed fails with the kill's code, the typed
/// reason kept in its interruption and history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_engine_restart_fail_fails_the_killed_job() {
    if skip("on_engine_restart_fail_fails_the_killed_job") {
        return;
    }
    let root = tempfile::Builder::new().prefix("ghf").tempdir_in("/tmp").unwrap();
    let (engine, rt, hub) =
        hub_on_private_engine(root.path(), "base=10.216.0.0/16,size=24", OnEngineRestart::Fail).await;
    let admin = hub.login("admin", ADMIN_PASSWORD).await;
    let alice = hub.user(&admin, "alice").await;
    hub.submit(&alice, job("j1", 0)).await;
    hub.wait_for(&alice, "j1", 60, |v| v["state"] == "running").await;
    engine.stop("-TERM");
    let v = hub.wait_for(&alice, "j1", 60, |v| v["state"] == "failed").await;
    assert_eq!(v["exit_code"], 143, "{v}");
    assert_eq!(v["interruption"]["reason"], "engine-restarted", "{v}");
    let last = v["history"].as_array().unwrap().last().unwrap().clone();
    assert!(last["message"].as_str().unwrap().contains("on_engine_restart = \"fail\""), "{v}");
    engine.start();
    // failed stays failed once the engine is back: three scheduling passes later nothing ran it again
    let controller = &hub.server.as_ref().unwrap().state.controller;
    let passes = controller.passes();
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    while controller.passes() < passes + 3 {
        assert!(Instant::now() < deadline, "no scheduling pass after the engine came back");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await; // passes have no change feed
    }
    assert_eq!(hub.get(&alice, "j1").await["state"], "failed");
    let starts = hub.dir.path().join("data/homes/alice/starts");
    assert_eq!(std::fs::read_to_string(starts).unwrap(), "j1\n");
    assert_eq!(counts_by_workload(&rt).await.len(), 1);
    hub.server.unwrap().shutdown().await;
    drop(engine);
}

/// A node that fails under a job on an engine that queues and places itself (Slurm's `NODE_FAIL`, here
/// the fake engine placing like Slurm): the job is queued again in its old place with the reason
/// `engine-restarted`, submitted anew, and ends with its own code; the failed run's code (0, as Slurm's
/// accounting says) is not taken for its success.
#[tokio::test]
async fn a_failed_node_queues_its_job_again() {
    let engine =
        Arc::new(gpuhub_driver::fake::FakeEngine::engine_placed().with_nodes(vec![node(0), node_named("node2")]));
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let hub = Hub::start_on(dir, cfg, engine.clone()).await;
    let admin = hub.login("admin", ADMIN_PASSWORD).await;
    let alice = hub.user(&admin, "alice").await;
    let body = json!({"name": "train", "kind": "job", "image": "busybox:latest", "command": ["true"],
        "resources": {"cpus": 1, "memory": "1GiB", "gpus": 0}});
    let v = hub.submit(&alice, body).await;
    let store = hub.server.as_ref().unwrap().state.store.clone();
    let queued_at = store.get_workload_by_id(v["id"].as_str().unwrap()).await.unwrap().queued_at;
    hub.wait_for(&alice, "train", 10, |v| v["state"] == "queued" && !v["members"].as_array().is_none_or(Vec::is_empty))
        .await;
    let first = hub.run(&alice, "train").await;
    engine.start_pending(&first, "test-node", &[]);
    hub.wait_for(&alice, "train", 10, |v| v["state"] == "running").await;

    engine.fail_node(&first, 0);
    let v = hub
        .wait_for(&alice, "train", 10, |v| v["interruption"]["reason"] == "engine-restarted" && v["state"] == "queued")
        .await;
    let detail = v["interruption"]["detail"].as_str().unwrap();
    assert!(detail.contains("NODE_FAIL"), "{v}");
    // submitted anew: a second run, which ends with its own code
    let v = hub
        .wait_for(&alice, "train", 10, |v| {
            v["state"] == "queued"
                && !v["members"].as_array().is_none_or(Vec::is_empty)
                && v.get("interruption").is_none()
        })
        .await;
    let second = hub.run(&alice, "train").await;
    assert_ne!(second, first, "{v}");
    engine.start_pending(&second, "node2", &[]);
    hub.wait_for(&alice, "train", 10, |v| v["state"] == "running").await;
    engine.exit(&second, 3);
    let v = hub.wait_for(&alice, "train", 10, |v| v["state"] == "failed").await;
    assert_eq!(v["exit_code"], 3, "{v}");
    let history: Vec<&str> = v["history"].as_array().unwrap().iter().filter_map(|e| e["message"].as_str()).collect();
    assert!(history.iter().any(|m| m.starts_with("engine-restarted:") && m.contains("NODE_FAIL")), "{history:?}");
    let w = store.get_workload_by_id(v["id"].as_str().unwrap()).await.unwrap();
    assert_eq!(w.queued_at, queued_at, "kept its place in line");
    hub.server.unwrap().shutdown().await;
}

fn node_named(name: &str) -> gpuhub_core::node::NodeCapacity {
    gpuhub_core::node::NodeCapacity { name: name.into(), ..node(0) }
}

/// A kill gpuhub did not ask for while the engine stays up (the OOM killer, a `docker kill`) is the
/// run's own end: held for the margin (15 s by the controller's clock, here a manual one), then
/// recorded with its code and no engine reason.
#[tokio::test]
async fn a_kill_without_an_outage_is_the_runs_own_end() {
    use gpuhub_controller::clock::{Clock, ManualClock};
    let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
    let engine = crate::common::fake();
    let dir = tempfile::tempdir().unwrap();
    let seams = gpuhub_server::Seams { clock: clock.clone(), ..Default::default() };
    let server = gpuhub_server::start_with(config(dir.path()), engine.clone(), seams).await.unwrap();
    let hub = Hub::from_server(server, engine.clone(), dir);
    let admin = hub.login("admin", ADMIN_PASSWORD).await;
    let alice = hub.user(&admin, "alice").await;
    hub.submit(&alice, crate::common::job("oom", 0)).await;
    hub.wait_for(&alice, "oom", 10, |v| v["state"] == "running").await;
    let controller = hub.server.as_ref().unwrap().state.controller.clone();
    let passes = controller.passes();
    engine.exit(&hub.run(&alice, "oom").await, 137);
    // the exit woke the controller (a pass follows every burst of events) and is held: still running
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    while controller.passes() <= passes {
        assert!(Instant::now() < deadline, "no pass after the exit");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await; // passes have no change feed
    }
    assert_eq!(hub.get(&alice, "oom").await["state"], "running", "held for the margin");
    let held_at = clock.now();
    clock.advance(chrono::TimeDelta::seconds(16));
    controller.kick();
    let v = hub.wait_for(&alice, "oom", 10, |v| v["state"] == "failed").await;
    assert_eq!(v["exit_code"], 137, "{v}");
    assert!(v.get("interruption").is_none(), "{v}");
    assert_eq!(v["message"], "killed (exit code 137; out of memory or SIGKILL)", "{v}");
    assert!(clock.now() >= held_at + chrono::TimeDelta::seconds(15));
    hub.server.unwrap().shutdown().await;
}
