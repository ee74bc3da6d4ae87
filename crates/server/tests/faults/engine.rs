//! The container engine killed (SIGKILL) and restarted while five jobs run, on a private `dockerd`
//! started for this test (the shared one is never touched). With `--live-restore` the jobs keep running
//! while the engine is away; gpuhub keeps answering, follows the engine again when it is back, and
//! records each job's own exit code, having created and started exactly one container per job.
//! Without live restore (`restart.rs`) the engine's stop or restart kills the jobs: gpuhub queues them
//! again in their old place (`engine-restarted`), and they run again and end with their own codes.

use crate::common::{ADMIN_PASSWORD, Hub, config, node};
use gpuhub_docker::DockerRuntime;
use gpuhub_driver::LABEL_WORKLOAD;
use reqwest::{Method, StatusCode};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) const IMAGE: &str = "gpuhub/busybox:latest";

/// A private engine in a temp dir. Dropping it removes its containers and networks and stops it.
pub(crate) struct PrivateDockerd {
    root: PathBuf,
    daemon: std::sync::Mutex<Option<std::process::Child>>,
    /// `--live-restore`: containers outlive the daemon.
    live_restore: bool,
    /// The address pool of its networks (`base=10.213.0.0/16,size=24`), one per engine running at once.
    pool: &'static str,
}

impl PrivateDockerd {
    pub(crate) fn new(root: &std::path::Path, live_restore: bool, pool: &'static str) -> Self {
        Self { root: root.to_path_buf(), daemon: Default::default(), live_restore, pool }
    }

    pub(crate) fn socket(&self) -> PathBuf {
        self.root.join("docker.sock")
    }

    pub(crate) fn host(&self) -> String {
        format!("unix://{}", self.socket().display())
    }

    /// Starts dockerd and waits until it answers (polling: a starting daemon signals nothing).
    pub(crate) fn start(&self) {
        let _ = std::fs::remove_file(self.root.join("pid")); // a killed daemon leaves it behind
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.root.join("dockerd.log")).unwrap();
        let r = |p: &str| self.root.join(p).display().to_string();
        // a config file of its own: the host's /etc/docker/daemon.json (live-restore, turned on by
        // scripts/setup-debian.sh) would otherwise decide for it, or clash with the flag
        std::fs::write(self.root.join("daemon.json"), "{}\n").unwrap();
        let child = Command::new("dockerd")
            .args(["--config-file", &r("daemon.json")])
            .args(["--host", &self.host(), "--data-root", &r("data"), "--exec-root", &r("exec")])
            .args(["--pidfile", &r("pid"), "--bridge", "none", "--iptables=false", "--ip-masq=false"])
            .args(["--default-address-pool", self.pool])
            .args(self.live_restore.then_some("--live-restore"))
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("dockerd starts");
        *self.daemon.lock().unwrap() = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.docker(&["version"]).status().is_ok_and(|s| s.success()) {
            if Instant::now() >= deadline {
                let log = std::fs::read_to_string(self.root.join("dockerd.log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().filter(|l| !l.contains("[core]")).take(15).collect();
                panic!("private dockerd did not start; the end of its log:\n{}", tail.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub(crate) fn docker(&self, args: &[&str]) -> Command {
        let mut c = Command::new("docker");
        c.args(["-H", &self.host()]).args(args).stdout(Stdio::null()).stderr(Stdio::null());
        c
    }

    /// Sends `signal` to the daemon and waits for it to end, then ends the containerd it started as a
    /// crash ends it. (That containerd dies of SIGPIPE at its next log line once the daemon is gone, but
    /// a child of this test inherits Rust's ignored SIGPIPE and lives on half-dead: a daemon started
    /// then takes it for a live one, waits for its socket in vain and gives up, "timeout waiting for
    /// containerd to start".) The containers' shims live on either way.
    pub(crate) fn stop(&self, signal: &str) {
        if let Some(mut child) = self.daemon.lock().unwrap().take() {
            let _ = Command::new("kill").args([signal, &child.id().to_string()]).status();
            let _ = child.wait();
        }
        let pidfile = self.root.join("exec/containerd/containerd.pid");
        let Some(pid) = std::fs::read_to_string(pidfile).ok().and_then(|p| p.trim().parse::<u32>().ok()) else {
            return;
        };
        let config = self.root.join("exec/containerd/containerd.toml").display().to_string();
        if processes_naming(&config).contains(&pid) {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        // not our child: no exit to wait on, so its /proc entry is watched until it is reaped (a
        // zombie still counts as running for the next daemon)
        let proc = PathBuf::from(format!("/proc/{pid}"));
        while proc.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for PrivateDockerd {
    fn drop(&mut self) {
        let ids = Command::new("docker").args(["-H", &self.host(), "ps", "-aq"]).output();
        if let Ok(out) = ids {
            for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = self.docker(&["rm", "-f", id]).status();
            }
        }
        let _ = self.docker(&["network", "prune", "-f"]).status();
        self.stop("-TERM");
        // containerd's shims outlive the daemon: end those of this engine (their command line names
        // its exec root), then undo the mounts it leaves (its data root, overlays, network namespaces)
        let root = self.root.display().to_string();
        for pid in processes_naming(&root) {
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
        gpuhub_testkit::mounts::unmount_under(&self.root);
    }
}

/// Ids of the processes whose command line contains `needle`.
fn processes_naming(needle: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).replace('\0', " ").contains(needle))
        })
        .collect()
}

pub(crate) fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

pub(crate) fn installed(bin: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {bin}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub(crate) async fn counts_by_workload(rt: &DockerRuntime) -> BTreeMap<String, usize> {
    let mut by = BTreeMap::new();
    for c in rt.list_managed().await.unwrap() {
        *by.entry(c.labels.get(LABEL_WORKLOAD).cloned().unwrap_or_default()).or_insert(0) += 1;
    }
    by
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockerd_killed_and_restarted_during_five_jobs() {
    if !installed("dockerd") || !is_root() {
        println!("SKIPPED: dockerd_killed_and_restarted_during_five_jobs needs dockerd installed and root");
        return;
    }
    let root = tempfile::Builder::new().prefix("ghd").tempdir_in("/tmp").unwrap();
    let engine = PrivateDockerd::new(root.path(), true, "base=10.213.0.0/16,size=24");
    engine.start();
    let load = format!("docker save {IMAGE} | docker -H {} load", engine.host());
    let loaded = Command::new("sh").args(["-c", &load]).stdout(Stdio::null()).status().unwrap();
    assert!(loaded.success(), "cannot load {IMAGE} into the private engine (run scripts/setup-debian.sh)");

    let rt = DockerRuntime::connect_unix(&engine.socket()).await.unwrap().with_host_isolation(false);
    assert!(rt.live_restore().await.unwrap(), "docker info says LiveRestoreEnabled");
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.reconcile_secs = 1;
    cfg.gpu_mode = gpuhub_server::config::GpuMode::None;
    cfg.stop_grace_secs = 1;
    // five jobs of one user: at 4096 each a pid_max of 32768 holds three of one user's
    cfg.pids_limit = 1024;
    let docker_engine = gpuhub_docker::DockerEngine::new(rt.clone(), node(0), gpuhub_docker::GpuMode::None);
    let hub = Hub::start_on(dir, cfg, Arc::new(docker_engine)).await;
    let admin = hub.login("admin", ADMIN_PASSWORD).await;
    let alice = hub.user(&admin, "alice").await;

    // (name, seconds, exit code): two end while the engine is down, three after it is back
    let jobs = [("j1", 3, 0), ("j2", 4, 1), ("j3", 9, 2), ("j4", 10, 3), ("j5", 11, 42)];
    for (name, secs, code) in jobs {
        let body = json!({"name": name, "kind": "job", "image": IMAGE,
            "command": ["sh", "-c", format!("echo {name} >> $HOME/starts; sleep {secs}; exit {code}")],
            "resources": {"cpus": 0.5, "memory": "64MiB", "gpus": 0}});
        hub.submit(&alice, body).await;
    }
    let t0 = Instant::now();
    for (name, ..) in jobs {
        hub.wait_for(&alice, name, 60, |v| v["state"] == "running").await;
    }
    let all_running = t0.elapsed();

    engine.stop("-KILL");
    let killed = t0.elapsed();
    // the engine is down: the API keeps answering from the store
    let (s, list) = hub.call(Method::GET, "/api/v1/workloads", Some(&alice), None).await;
    assert_eq!(s, StatusCode::OK, "{list}");
    assert_eq!(list.as_array().unwrap().len(), 5, "{list}");
    for (name, ..) in jobs {
        let v = hub.get(&alice, name).await;
        assert_eq!(v["state"], "running", "{v}");
    }
    // a submission needs the engine (its image is checked): refused with a problem naming it, nothing stored
    let body = json!({"name": "j6", "kind": "job", "image": IMAGE, "command": ["true"],
        "resources": {"cpus": 0.5, "memory": "64MiB", "gpus": 0}});
    let (s, v) = hub.call(Method::POST, "/api/v1/workloads", Some(&alice), Some(body)).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    assert!(v["detail"].as_str().unwrap().starts_with("container engine unavailable"), "{v}");
    let (s, _) = hub.call(Method::GET, "/api/v1/workloads/j6", Some(&alice), None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    // stay down long enough for j1 and j2 to end meanwhile (the fault's duration, not a wait for a signal)
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (s, v) = hub.call(Method::GET, "/api/v1/workloads/j1", Some(&alice), None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let restart_at = t0.elapsed();
    engine.start();
    let back = t0.elapsed();

    let mut ended = Vec::new();
    for (name, _, code) in jobs {
        let v = hub.wait_for(&alice, name, 60, |v| v["state"] == "succeeded" || v["state"] == "failed").await;
        assert_eq!(v["exit_code"], code, "{name}: {v}");
        assert_eq!(v["state"], if code == 0 { "succeeded" } else { "failed" }, "{v}");
        ended.push(format!("{name} {:.1} s", t0.elapsed().as_secs_f64()));
    }
    println!(
        "timeline: all 5 running {:.1} s; dockerd SIGKILL {:.1} s; restarted {:.1} s, answering {:.1} s; ended: {}",
        all_running.as_secs_f64(),
        killed.as_secs_f64(),
        restart_at.as_secs_f64(),
        back.as_secs_f64(),
        ended.join(", ")
    );

    // exactly one container per job, the one the store names, never started twice
    let counts = counts_by_workload(&rt).await;
    let server = hub.server.as_ref().unwrap();
    for (name, ..) in jobs {
        let v = hub.get(&alice, name).await;
        let id = v["id"].as_str().unwrap();
        assert_eq!(counts.get(id), Some(&1), "{name}: containers by workload {counts:?}");
        let w = server.state.store.get_workload_by_id(id).await.unwrap();
        let run = w.run_id.expect("has a run");
        assert!(counts.contains_key(id), "{name}: store names {run}");
    }
    // each command ran exactly once: every run appends its name to a file in the persistent home
    let starts = std::fs::read_to_string(hub.dir.path().join("data/homes/alice/starts")).unwrap();
    let mut runs: Vec<&str> = starts.lines().collect();
    runs.sort();
    assert_eq!(runs, ["j1", "j2", "j3", "j4", "j5"], "runs of each job");
    assert_eq!(counts.len(), 5, "{counts:?}");
    hub.server.unwrap().shutdown().await;
    drop(engine);
}
