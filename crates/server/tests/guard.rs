//! GPU shares enforced by gpuhub, on the fake engine, a scripted GPU sampler and the clock seam: the
//! memory guard warns a share whose processes use more GPU memory than granted, stops it after the grace
//! with the typed reason `gpu-memory-exceeded` (its figures kept, shown in the API and counted in
//! `/metrics`), and leaves shares within their grant, shares of `none` GPUs and whole GPUs alone; MPS
//! GPUs take shares of one user at a time, and a second user's share says why it waits.

use gpuhub_testkit as common;

use chrono::{DateTime, TimeDelta, Utc};
use common::{ADMIN_PASSWORD, Hub};
use gpuhub_controller::clock::ManualClock;
use gpuhub_core::Bytes;
use gpuhub_core::node::GpuSharing;
use gpuhub_driver::MemberUsage;
use gpuhub_gpu::{FakeGpuSampler, GpuProcess};
use reqwest::Method;
use serde_json::{Value, json};
use std::sync::Arc;

const GIB: u64 = 1 << 30;

fn share(name: &str, milli: u32, memory: &str) -> Value {
    json!({"name": name, "kind": "job", "image": "busybox:latest", "command": ["sleep", "infinity"],
        "resources": {"cpus": 1, "memory": "1GiB", "gpu_milli": milli, "gpu_memory": memory}})
}

/// A hub on a manual clock and a scripted sampler whose GPUs are in `modes`, guard grace 30 s.
async fn hub(modes: &[GpuSharing]) -> (Hub, Arc<ManualClock>, Arc<FakeGpuSampler>, DateTime<Utc>) {
    let t0: DateTime<Utc> = Utc::now();
    let (hub, clock, sampler) = Hub::start_scripted(t0, modes, |cfg, dir| {
        cfg.guard.grace_secs = 30;
        // MPS GPUs get gpuhub's own supervisor, running a scripted nvidia-cuda-mps-control; its directory
        // is one every user may enter, as MPS needs
        cfg.mps.control = Some(common::mps::scripted_control(dir).unwrap());
        cfg.mps.dir = Some(dir.join("mps"));
        cfg.mps.exclusive_process = false;
    })
    .await;
    (hub, clock, sampler, t0)
}

/// Runs `w` for `token` and gives its one member the host PID `pid`; returns the GPU it got.
async fn running_with_pid(hub: &Hub, token: &str, w: Value, pid: u32) -> String {
    let name = w["name"].as_str().unwrap().to_owned();
    hub.submit(token, w).await;
    let v = hub.wait_state(token, &name, "running").await;
    let run = hub.run(token, &name).await;
    let usage =
        MemberUsage { index: 0, cpu_seconds: 1.0, memory_used: Bytes(1 << 20), memory_limit: None, pids: vec![pid] };
    hub.runtime.set_usage(&run, vec![usage]);
    v["gpus"][0].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_over_its_gpu_memory_grant_is_warned_then_stopped_with_its_figures() {
    let (hub, clock, sampler, t0) = hub(&[GpuSharing::Guard]).await;
    let admin = hub.login("admin", ADMIN_PASSWORD).await;
    let alice = hub.user(&admin, "alice").await;
    let bob = hub.user(&admin, "bob").await;
    // alice's share and bob's share of the one GPU (guard: any users may share it)
    let gpu = running_with_pid(&hub, &alice, share("big", 500, "10GiB"), 4001).await;
    let bobs = running_with_pid(&hub, &bob, share("small", 250, "4GiB"), 4002).await;
    assert_eq!(gpu, bobs, "guard GPUs are shared across users");
    assert_eq!(gpu, "GPU-fake-0");
    // alice's process uses 12 GiB of her 10 GiB; bob's stays within his 4 GiB
    sampler.set(&gpu, 90.0, Bytes(15 * GIB));
    sampler.set_processes(
        &gpu,
        vec![
            GpuProcess { pid: 4001, memory_used: Bytes(12 * GIB) },
            GpuProcess { pid: 4002, memory_used: Bytes(3 * GIB) },
        ],
    );
    let v = hub.until_round(&alice, "big", |v| v["gpu_guard"].is_array()).await;
    let g = &v["gpu_guard"][0];
    assert_eq!(
        (g["member"].as_u64(), g["used_bytes"].as_u64(), g["granted_bytes"].as_u64()),
        (Some(0), Some(12 * GIB), Some(10 * GIB)),
        "{v}"
    );
    let stop_at: DateTime<Utc> = g["stop_at"].as_str().unwrap().parse().unwrap();
    assert!(stop_at >= t0 + TimeDelta::seconds(30), "{v}");
    assert_eq!(v["state"], "running", "warned, not stopped yet: {v}");
    assert!(hub.get(&bob, "small").await.get("gpu_guard").is_none());
    // the portal says so: the Nodes page marks her share over its grant and shows the GPU's mode, her
    // workloads page carries the warning
    let nodes = page(&hub, "alice", "/nodes").await;
    let holder = |who: &str| {
        let at = nodes.find(&format!("data-holder=\"{who}\"")).unwrap_or_else(|| panic!("no {who} in {nodes}"));
        nodes[at..nodes[at..].find("</li>").map_or(nodes.len(), |e| at + e)].to_owned()
    };
    let hers = holder("alice/big");
    assert!(hers.contains("data-over=\"true\"") && hers.contains("grant 10GiB"), "{hers}");
    assert!(hers.contains("uses 12GiB: over its grant"), "{hers}");
    let his = holder("bob/small");
    assert!(!his.contains("data-over") && his.contains("grant 4GiB, uses 3GiB"), "{his}");
    assert!(nodes.contains("data-sharing=\"guard\""), "{nodes}");
    let list = page(&hub, "alice", "/workloads").await;
    assert!(list.contains("uses 12GiB of GPU memory, above its grant of 10GiB; stopped at"), "{list}");

    // past the grace, still over: stopped, a job failed by the guard, with its figures
    clock.set(stop_at + TimeDelta::seconds(1));
    let v = hub.wait_for(&alice, "big", 30, |v| v["state"] == "failed").await;
    let i = &v["interruption"];
    assert_eq!(i["reason"], "gpu-memory-exceeded", "{v}");
    let detail = i["detail"].as_str().unwrap();
    assert!(detail.contains("used 12GiB of GPU memory on GPU-fake-0, above its grant of 10GiB"), "{detail}");
    assert!(v["message"].as_str().unwrap().contains("stopped by the GPU memory guard"), "{v}");
    // bob's share runs on
    assert_eq!(hub.get(&bob, "small").await["state"], "running");
    // the stored reason survives a read from the store (typed, not parsed from the message)
    let id = v["id"].as_str().unwrap();
    let stored = hub.server.as_ref().unwrap().state.store.get_workload_by_id(id).await.unwrap();
    assert!(
        matches!(stored.interruption, Some(gpuhub_core::stop::StopReason::GpuMemoryExceeded { used, granted, .. }) if used == 12 * GIB && granted == 10 * GIB),
        "{:?}",
        stored.interruption
    );
    // the admins' dashboard lists it as the guard's, with its figures
    hub.user(&admin, "root").await;
    let (s, v) = hub.call(Method::PATCH, "/api/v1/users/root", Some(&admin), Some(json!({"admin": true}))).await;
    assert!(s.is_success(), "{v}");
    let dashboard = page(&hub, "root", "/admin/dashboard").await;
    let row = dashboard.split("data-rule=\"guard\" data-workload=\"alice/big\"").nth(1).expect("the guard's stop");
    assert!(row.split("</tr>").next().unwrap().contains("above its grant of 10GiB"), "{row}");

    // /metrics: the GPU's mode, bob's grant, one warning and one stop
    let text = metrics(&hub).await;
    for line in [
        "gpuhub_gpu_sharing_mode{gpu=\"0\",UUID=\"GPU-fake-0\",Hostname=\"test-node\",mode=\"guard\"} 1",
        "gpuhub_gpu_sharing_mode{gpu=\"0\",UUID=\"GPU-fake-0\",Hostname=\"test-node\",mode=\"mps\"} 0",
        "gpuhub_guard_warnings_total 1",
        "gpuhub_guard_stops_total 1",
    ] {
        assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
    }
    assert!(
        text.lines().any(|l| l.starts_with("gpuhub_share_gpu_memory_granted_bytes{owner=\"bob\",workload=\"small\"")
            && l.ends_with(&format!(" {}", 4 * GIB))),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shares_of_none_gpus_and_whole_gpus_are_not_guarded() {
    let (hub, clock, sampler, t0) = hub(&[GpuSharing::Unenforced, GpuSharing::Guard, GpuSharing::Guard]).await;
    let admin = hub.login("admin", ADMIN_PASSWORD).await;
    let alice = hub.user(&admin, "alice").await;
    // the first share lands on GPU 0 (mode none); a whole GPU on another
    let gpu = running_with_pid(&hub, &alice, share("free", 500, "1GiB"), 5001).await;
    assert_eq!(gpu, "GPU-fake-0");
    let mut whole = common::job("whole", 1);
    whole["command"] = json!(["sleep", "infinity"]);
    let wgpu = running_with_pid(&hub, &alice, whole, 5002).await;
    for (g, pid) in [(&gpu, 5001), (&wgpu, 5002)] {
        sampler.set(g, 50.0, Bytes(60 * GIB));
        sampler.set_processes(g, vec![GpuProcess { pid, memory_used: Bytes(60 * GIB) }]);
    }
    // rounds go by, far past any grace: nobody is warned or stopped
    let mut rounds = hub.server.as_ref().unwrap().state.metrics.rounds();
    for s in [0, 100, 200] {
        clock.set(t0 + TimeDelta::seconds(s));
        tokio::time::timeout(std::time::Duration::from_secs(10), rounds.changed()).await.unwrap().unwrap();
    }
    // the member's figures were measured (so the guard could have judged them)
    hub.until_round(&alice, "free", |_| {
        let snap = hub.server.as_ref().unwrap().state.metrics.get();
        snap.members.iter().any(|m| m.workload == "free" && m.gpu_memory_used == Some(60 * GIB))
    })
    .await;
    for name in ["free", "whole"] {
        let v = hub.get(&alice, name).await;
        assert_eq!(v["state"], "running", "{v}");
        assert!(v.get("gpu_guard").is_none(), "{v}");
    }
    let (warnings, stops) = hub.server.as_ref().unwrap().state.guard.counts();
    assert_eq!((warnings, stops), (0, 0));
    let text = metrics(&hub).await;
    let line = "gpuhub_gpu_sharing_mode{gpu=\"0\",UUID=\"GPU-fake-0\",Hostname=\"test-node\",mode=\"none\"} 1";
    assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
    assert!(!text.contains("gpuhub_share_gpu_memory_granted_bytes{"), "a share of a none GPU has no grant series");
}

/// A portal page as `user` (made by `Hub::user`) sees it.
async fn page(hub: &Hub, user: &str, path: &str) -> String {
    let password = format!("{user}-password");
    let r = hub.http.post(format!("{}/api/v1/login", hub.url)).json(&json!({"username": user, "password": password}));
    let r = r.send().await.unwrap();
    assert!(r.status().is_success(), "login as {user}");
    let cookie = r.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
    let r = hub.http.get(format!("{}{path}", hub.url)).header("cookie", cookie).header("sec-fetch-mode", "navigate");
    let r = r.send().await.unwrap();
    assert!(r.status().is_success(), "{path}: {}", r.status());
    r.text().await.unwrap()
}

/// `/metrics`, as a scraper on loopback reads it.
async fn metrics(hub: &Hub) -> String {
    hub.http.get(format!("{}/metrics", hub.url)).send().await.unwrap().text().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mps_gpu_takes_shares_of_one_user_at_a_time_and_says_so() {
    let (hub, _clock, _sampler, _) = hub(&[GpuSharing::Mps, GpuSharing::Mps, GpuSharing::Mps]).await;
    let admin = hub.login("admin", ADMIN_PASSWORD).await;
    let alice = hub.user(&admin, "alice").await;
    let bob = hub.user(&admin, "bob").await;
    // alice takes half of one GPU, and a job of hers takes the two others whole
    let a = running_with_pid(&hub, &alice, share("a", 500, "10GiB"), 6001).await;
    let mut two = common::job("two", 2);
    two["command"] = json!(["sleep", "infinity"]);
    hub.submit(&alice, two).await;
    hub.wait_state(&alice, "two", "running").await;
    // her second share packs beside the first
    let a2 = running_with_pid(&hub, &alice, share("a2", 250, "10GiB"), 6002).await;
    assert_eq!(a, a2);
    // bob's share waits although a quarter of that GPU is free, and says why
    hub.submit(&bob, share("b", 250, "10GiB")).await;
    let v = hub
        .wait_for(&bob, "b", 30, |v| {
            v["explanation"]["message"].as_str().is_some_and(|m| m.contains("another user's shares"))
        })
        .await;
    assert_eq!(v["state"], "queued", "{v}");
    let m = v["explanation"]["message"].as_str().unwrap();
    assert!(m.contains("an MPS GPU serves one user at a time"), "{m}");
    // gpuhub's daemon of that GPU answered before her shares started, and their containers reach it
    let log = std::fs::read_to_string(common::mps::record(hub.dir.path())).unwrap();
    let first_daemon = log.lines().find(|l| l.starts_with("daemon "));
    assert!(first_daemon.is_some_and(|l| l.starts_with("daemon pid=") && l.contains(&format!(" gpu={a} "))), "{log}");
    let spec = hub
        .runtime
        .submitted()
        .into_iter()
        .find(|s| s.labels.get("gpuhub.name").map(String::as_str) == Some("a"))
        .unwrap();
    let m = &spec.members[0];
    assert_eq!(m.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=10240M");
    let pipe = hub.dir.path().join("mps").join(&a).join("pipe");
    assert!(m.mounts.iter().any(|x| x.source == pipe.display().to_string() && x.target == "/run/gpuhub/mps"), "{m:?}");
    assert!(m.mounts.iter().any(|x| x.target == "/dev/shm"), "{m:?}");
    let text = metrics(&hub).await;
    let up = format!("gpuhub_mps_daemon_up{{UUID=\"{a}\"}} 1");
    assert!(text.lines().any(|l| l == up), "no {up:?} in\n{text}");
    // once alice's shares end, bob's starts there
    for name in ["a", "a2"] {
        let (s, body) = hub.call(Method::POST, &format!("/api/v1/workloads/{name}/stop"), Some(&alice), None).await;
        assert!(s.is_success(), "{body}");
    }
    let v = hub.wait_state(&bob, "b", "running").await;
    assert_eq!(v["gpus"][0].as_str(), Some(a.as_str()), "{v}");
    // the daemons are stopped and their shared memory unmounted (a server leaves them to the next one)
    hub.server.as_ref().unwrap().state.mps.as_ref().expect("mps daemons are supervised").shutdown().await;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(&hub.dir.path().display().to_string()), "{mounts}");
}
