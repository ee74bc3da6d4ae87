//! The foundation's acceptance checks, end to end: the real `gpuhub` binary as server and CLI, a real
//! Docker engine, fake GPU device nodes (`mknod`). Each test starts its own server on a fresh data dir
//! and its own users; waits follow the logs (`logs -f`, `run --follow`) and poll `inspect` only where
//! nothing signals. Needs root (mknod, chown of homes) and a Docker engine.

mod common;

use anyhow::{Context as _, Result, bail, ensure};
use common::{
    Hub, IMAGE, PASSWORD, User, container_of, docker, docker_inspect, exclusive_gpus, gpu_holders, gpu_nodes,
    host_devices,
};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

/// Small limits, so that many workloads fit the host.
const SMALL: [&str; 4] = ["--cpus", "0.1", "--memory", "32MiB"];

/// `gpuhub run --name NAME --image busybox EXTRA -- sh -c SCRIPT` as `user`; returns what it printed.
fn run(user: &User, name: &str, extra: &[&str], script: &str) -> Result<String> {
    let mut args = vec!["run", "--name", name, "--image", IMAGE];
    args.extend_from_slice(extra);
    args.extend(["--", "sh", "-c", script]);
    user.ok(&args)
}

fn with_gpus<'a>(gpus: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["--gpus", gpus];
    v.extend_from_slice(extra);
    v
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().into_iter().flatten().filter_map(|s| s.as_str().map(str::to_owned)).collect()
}

/// The GPU device nodes (not control nodes) a container gets, as host paths of the test's fake GPUs.
fn gpu_devices_of(hub: &Hub, container: &Value) -> Vec<String> {
    host_devices(container)
        .into_iter()
        .filter(|d| hub.server.devices.iter().any(|p| p.as_os_str() == d.as_str()))
        .collect()
}

/// A one-GPU job sees exactly one GPU node, runs as the user's UID (from `uid_range`, 70000–99999 by
/// default, above the host's `UID_MAX`), and its container has the
/// requested limits and none of the ways out: no privileges, no capabilities, no engine socket.
#[test]
fn job_sees_one_gpu_and_runs_confined() -> Result<()> {
    let _serial = common::serial();
    let mut hub = Hub::start()?;
    let alice = hub.user("alice")?;
    let uid = alice.json(&["whoami"])?["uid"].as_u64().context("whoami has no uid")?;
    ensure!((70_000..=99_999).contains(&uid), "alice got uid {uid}, want one of uid_range 70000-99999");

    let out = run(
        &alice,
        "j1",
        &["--gpus", "1", "--cpus", "0.5", "--memory", "256MiB", "--follow"],
        "id -u; id -g; ls /dev/nvidia*",
    )?;
    let lines: Vec<&str> = out.lines().collect();
    ensure!(lines.first() == Some(&"j1"), "run prints the name first: {out:?}");
    let want = uid.to_string();
    ensure!(
        lines.get(1) == Some(&want.as_str()) && lines.get(2) == Some(&want.as_str()),
        "id -u/-g: {out:?}, want {uid}"
    );
    let seen = gpu_nodes(&out);
    ensure!(seen.len() == 1, "the job sees GPU nodes {seen:?}, want exactly one; output {out:?}");

    let w = alice.inspect("j1")?;
    ensure!(w["state"] == "succeeded" && w["exit_code"] == 0, "j1: {w:#}");
    let c = docker_inspect(&container_of(&w)?)?;
    let hc = &c["HostConfig"];
    let (nano, quota, period) = (
        hc["NanoCpus"].as_i64().unwrap_or(0),
        hc["CpuQuota"].as_i64().unwrap_or(0),
        hc["CpuPeriod"].as_i64().unwrap_or(0),
    );
    ensure!(
        nano == 500_000_000 || (period > 0 && quota * 2 == period),
        "CPU limit of 0.5: NanoCpus {nano}, CpuQuota {quota}, CpuPeriod {period}"
    );
    ensure!(hc["Memory"] == 256 << 20, "Memory {}", hc["Memory"]);
    ensure!(hc["MemorySwap"] == hc["Memory"], "MemorySwap {} != Memory {}", hc["MemorySwap"], hc["Memory"]);
    let security = strings(&hc["SecurityOpt"]);
    ensure!(
        security.iter().any(|s| s == "no-new-privileges" || s == "no-new-privileges:true"),
        "SecurityOpt {security:?}"
    );
    ensure!(strings(&hc["CapDrop"]).iter().any(|s| s.eq_ignore_ascii_case("ALL")), "CapDrop {}", hc["CapDrop"]);
    ensure!(strings(&hc["CapAdd"]).is_empty(), "CapAdd {}", hc["CapAdd"]);
    ensure!(hc["Privileged"] == false, "Privileged {}", hc["Privileged"]);
    ensure!(c["Config"]["User"] == format!("{uid}:{uid}"), "User {}", c["Config"]["User"]);
    let mounts = format!("{} {}", c["Mounts"], hc["Binds"]);
    ensure!(!mounts.contains("docker.sock"), "the engine socket is mounted: {mounts}");
    let targets: Vec<&str> =
        c["Mounts"].as_array().into_iter().flatten().filter_map(|m| m["Destination"].as_str()).collect();
    ensure!(targets == [format!("/home/{}", alice.name)], "mounts {targets:?}, want only the home");
    let gpus = gpu_devices_of(&hub, &c);
    ensure!(gpus.len() == 1, "the container gets GPU nodes {gpus:?}, want one");
    let mapped = hc["Devices"].as_array().into_iter().flatten().find(|d| d["PathOnHost"] == gpus[0].as_str());
    ensure!(
        mapped.is_some_and(|d| d["PathInContainer"] == seen[0].as_str()),
        "{} is not mapped to {}",
        gpus[0],
        seen[0]
    );

    // without GPUs there are none to see, and `run --follow` exits with the job's code
    let out = alice.output(&[
        "run",
        "--name",
        "j2",
        "--image",
        IMAGE,
        "--follow",
        "--",
        "sh",
        "-c",
        "ls /dev/nvidia*; exit 7",
    ])?;
    ensure!(out.status.code() == Some(7), "run --follow of `exit 7`: {}", common::describe(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(gpu_nodes(&text).is_empty(), "a job without GPUs sees {:?}", gpu_nodes(&text));
    Ok(())
}

/// Two jobs hold both GPUs; a third waits (`queued`, saying it waits for a GPU) and runs on the GPU that
/// `gpuhub stop` frees. No GPU is ever held by two workloads, also while a burst of jobs churns.
#[test]
fn third_gpu_job_queues_until_a_gpu_is_freed() -> Result<()> {
    let _serial = common::serial();
    let mut hub = Hub::start()?;
    let alice = hub.user("alice")?;
    let one = with_gpus("1", &SMALL);
    for name in ["hold-a", "hold-b"] {
        run(&alice, name, &one, "echo ready; exec sleep 1000")?;
        alice.logs_until(name, "ready")?;
    }
    let holders = gpu_holders(&alice)?;
    let held: BTreeSet<String> = holders.values().flatten().cloned().collect();
    let want: BTreeSet<String> = ["hold-a", "hold-b"].iter().map(|n| format!("{}/{n}", alice.name)).collect();
    ensure!(holders.len() == 2 && held == want, "holders {holders:?}, want each GPU held by one of {want:?}");
    exclusive_gpus(&hub.admin)?;

    run(&alice, "third", &one, "ls /dev/nvidia*; echo ready; exec sleep 1000")?;
    let q = alice
        .wait_until("third", "queued with a reason", |w| w["message"].as_str().is_some_and(|m| m.contains("GPU")))?;
    ensure!(q["state"] == "queued" && q["gpus"] == json!([]), "third: {q:#}");
    ensure!(q["message"].as_str().is_some_and(|m| m.contains("waiting")), "third's reason: {}", q["message"]);
    ensure!(gpu_holders(&alice)? == holders, "the queued job changed the holders");

    let freed = alice.inspect("hold-a")?["gpus"][0].as_str().context("hold-a holds no GPU")?.to_owned();
    let out = alice.ok(&["stop", "hold-a"])?;
    ensure!(out.trim() == "hold-a: stopped", "stop printed {out:?}");
    let seen = alice.logs_until("third", "ready")?;
    ensure!(gpu_nodes(&seen).len() == 1, "third sees {seen:?}");
    let t = alice.inspect("third")?;
    ensure!(t["state"] == "running" && t["gpus"] == json!([freed]), "third should run on {freed}: {t:#}");
    let holders = gpu_holders(&alice)?;
    ensure!(holders[&freed].as_deref() == Some(format!("{}/third", alice.name).as_str()), "holders {holders:?}");
    exclusive_gpus(&hub.admin)?;
    let dev_b = gpu_devices_of(&hub, &docker_inspect(&container_of(&alice.inspect("hold-b")?)?)?);
    let dev_t = gpu_devices_of(&hub, &docker_inspect(&container_of(&t)?)?);
    ensure!(dev_b.len() == 1 && dev_t.len() == 1 && dev_b != dev_t, "devices of hold-b {dev_b:?}, of third {dev_t:?}");
    alice.ok(&["stop", "hold-b"])?;
    alice.ok(&["stop", "third"])?;

    // a burst of four one-GPU jobs on two GPUs: sample who holds what until every one has run
    let burst: Vec<String> = (0..4).map(|i| format!("burst-{i}")).collect();
    for name in &burst {
        run(&alice, name, &one, "ls /dev/nvidia*; sleep 1")?;
    }
    let done = AtomicBool::new(false);
    let (followed, samples) = std::thread::scope(|s| {
        let sampler = s.spawn(|| -> Result<usize> {
            let mut n = 0;
            while !done.load(Ordering::SeqCst) {
                exclusive_gpus(&hub.admin)?;
                let holders: Vec<String> = gpu_holders(&alice)?.into_values().flatten().collect();
                let distinct: BTreeSet<&String> = holders.iter().collect();
                ensure!(distinct.len() == holders.len(), "a one-GPU job holds two GPUs: {holders:?}");
                n += 1;
            }
            Ok(n)
        });
        let followed = burst.iter().try_for_each(|name| {
            let out = alice.ok(&["logs", "-f", name])?;
            ensure!(gpu_nodes(&out).len() == 1, "{name} saw {out:?}");
            Ok(())
        });
        done.store(true, Ordering::SeqCst);
        (followed, sampler.join().expect("sampler panicked"))
    });
    followed?;
    ensure!(samples? > 0, "the holders were never sampled");
    for name in &burst {
        let w = alice.wait_until(name, "ended", |w| w["state"] != "running" && w["state"] != "starting")?;
        ensure!(w["state"] == "succeeded", "{name}: {w:#}");
    }
    Ok(())
}

/// Bob can neither see nor touch alice's workloads (each attempt a non-zero exit saying there is no such
/// workload), even naming her as owner; names are per user; the admin sees and reaches everything.
#[test]
fn users_cannot_reach_each_others_workloads() -> Result<()> {
    let _serial = common::serial();
    let mut hub = Hub::start()?;
    let alice = hub.user("alice")?;
    let bob = hub.user("bob")?;
    run(&alice, "secret", &SMALL, "echo alice-secret; echo ready; exec sleep 1000")?;
    alice.logs_until("secret", "ready")?;
    let out = run(&alice, "done", &[&SMALL[..], &["--follow"]].concat(), "echo alice-done")?;
    ensure!(out.contains("alice-done"), "{out:?}");

    let ps = bob.ok(&["ps"])?;
    ensure!(!ps.contains("secret") && !ps.contains("done") && ps.lines().count() == 1, "bob's ps: {ps:?}");
    ensure!(bob.json(&["ps"])? == json!([]), "bob's ps --json");
    let e = bob.fails(&["ps", "--all"])?;
    ensure!(e.contains("admin"), "bob's ps --all: {e:?}");
    let attempts: [&[&str]; 10] = [
        &["inspect", "secret"],
        &["logs", "secret"],
        &["logs", "-f", "secret"],
        &["stop", "secret"],
        &["rm", "secret"],
        &["logs", "done"],
        &["start", "done"],
        &["rm", "done"],
        &["inspect", "secret", "--owner", &alice.name],
        &["stop", "secret", "--owner", &alice.name],
    ];
    for args in attempts {
        let out = bob.output(args)?;
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        ensure!(!out.status.success(), "bob `gpuhub {}` succeeded: {stdout:?}", args.join(" "));
        ensure!(stderr.contains("no workload named"), "bob `gpuhub {}`: {stderr:?}", args.join(" "));
        ensure!(!stdout.contains("alice-"), "bob `gpuhub {}` printed alice's output: {stdout:?}", args.join(" "));
    }
    let s = alice.inspect("secret")?;
    ensure!(s["state"] == "running", "after bob's attempts alice's secret is {}", s["state"]);
    ensure!(alice.inspect("done")?["state"] == "succeeded", "alice's done changed");

    // the same name is bob's own
    run(&bob, "secret", &[&SMALL[..], &["--follow"]].concat(), "echo bob-secret")?;
    let mine = bob.json(&["ps"])?;
    ensure!(mine.as_array().map(Vec::len) == Some(1) && mine[0]["owner"] == bob.name.as_str(), "bob's ps: {mine:#}");
    ensure!(alice.inspect("secret")?["state"] == "running", "bob's secret touched alice's");

    let all = hub.admin.json(&["ps", "--all"])?;
    let owned: BTreeSet<(String, String)> = all
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| (w["owner"].as_str().unwrap_or("").to_owned(), w["name"].as_str().unwrap_or("").to_owned()))
        .collect();
    for (owner, name) in [(&alice.name, "secret"), (&alice.name, "done"), (&bob.name, "secret")] {
        ensure!(owned.contains(&(owner.clone(), name.to_owned())), "admin ps --all lacks {owner}/{name}: {owned:?}");
    }
    let table = hub.admin.ok(&["ps", "--all"])?;
    ensure!(table.contains(&alice.name) && table.contains(&bob.name), "admin ps --all: {table}");
    let logs = hub.admin.ok(&["logs", "secret", "--owner", &alice.name])?;
    ensure!(logs.contains("alice-secret"), "admin logs of alice's secret: {logs:?}");
    hub.admin.ok(&["stop", "secret", "--owner", &alice.name])?;
    ensure!(alice.inspect("secret")?["state"] == "stopped", "the admin's stop did not stop alice's secret");
    Ok(())
}

/// Bad requests are answered 4xx with a problem document naming what is wrong, and create nothing; the
/// CLI says why in one line and exits non-zero.
#[test]
fn bad_input_is_refused_with_a_problem_naming_it() -> Result<()> {
    let _serial = common::serial();
    let mut hub = Hub::start()?;
    let alice = hub.user("alice")?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(bad_requests(&hub.server.url(), &alice.name))?;

    let out = alice.output(&["run", "--image", "gpuhub/no-such-image:1", "--", "true"])?;
    let stderr = String::from_utf8(out.stderr.clone())?;
    ensure!(!out.status.success(), "run with an unknown image: {}", common::describe(&out));
    ensure!(stderr.lines().count() == 1, "want a one-line reason, got {stderr:?}");
    ensure!(stderr.contains("invalid image") && stderr.contains("gpuhub/no-such-image:1"), "reason {stderr:?}");
    ensure!(out.stdout.is_empty(), "stdout {:?}", String::from_utf8_lossy(&out.stdout));
    ensure!(alice.json(&["ps"])? == json!([]), "a refused request created a workload");
    Ok(())
}

async fn bad_requests(base: &str, user: &str) -> Result<()> {
    let http = reqwest::Client::new();
    let login: Value = http
        .post(format!("{base}/api/v1/login"))
        .json(&json!({"username": user, "password": PASSWORD}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let token = login["token"].as_str().context("login gave no token")?;
    let cases: [(&str, Value, &[&str]); 5] = [
        ("unknown field", json!({"kind": "job", "image": IMAGE, "colour": "red"}), &["colour"]),
        ("unknown resource", json!({"kind": "job", "image": IMAGE, "resources": {"gpu": 1}}), &["gpu"]),
        ("negative CPUs", json!({"kind": "job", "image": IMAGE, "resources": {"cpus": -1}}), &["resources.cpus"]),
        (
            "unknown image",
            json!({"kind": "job", "image": "gpuhub/no-such-image:1"}),
            &["image", "gpuhub/no-such-image:1"],
        ),
        ("99 GPUs on 2", json!({"kind": "job", "image": IMAGE, "resources": {"gpus": 99}}), &["resources.gpus", "99"]),
    ];
    for (what, body, words) in cases {
        let resp = http.post(format!("{base}/api/v1/workloads")).bearer_auth(token).json(&body).send().await?;
        let status = resp.status();
        let ctype = resp.headers().get(reqwest::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
        let ctype = ctype.to_owned();
        let text = resp.text().await?;
        ensure!(status.is_client_error(), "{what}: HTTP {status}, want 4xx; body {text}");
        ensure!(ctype.starts_with("application/problem+json"), "{what}: content-type {ctype:?}");
        let problem: Value = serde_json::from_str(&text).with_context(|| format!("{what}: body {text:?}"))?;
        ensure!(problem["status"] == status.as_u16(), "{what}: problem status {} vs HTTP {status}", problem["status"]);
        ensure!(problem["title"].is_string() && problem["type"].is_string(), "{what}: problem {problem}");
        let detail = problem["detail"].as_str().unwrap_or("");
        for word in words {
            ensure!(detail.contains(word), "{what}: detail {detail:?} does not name {word:?}");
        }
    }
    let list: Value = http
        .get(format!("{base}/api/v1/workloads"))
        .bearer_auth(token)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    ensure!(list == json!([]), "refused requests created workloads: {list}");
    Ok(())
}

/// SIGKILL the server while a job runs, a workspace runs and a two-GPU job waits; the job ends while no
/// server runs. After a restart on the same data dir every workload is still there: the job `failed` with
/// code 3 and its whole output, the workspace adopted (same container, not restarted), the waiting job
/// runs. A stopped and started workspace finds what it wrote in its home.
#[test]
fn sigkill_and_restart_keep_every_workload() -> Result<()> {
    let _serial = common::serial();
    let mut hub = Hub::start()?;
    let alice = hub.user("alice")?;
    let ws_script = "echo \"home $HOME\"; echo \"previous starts: $(cat $HOME/starts 2>/dev/null | wc -l)\"; \
                     echo x >> $HOME/starts; echo ready; exec sleep 1000";
    run(&alice, "ws", &[&["--workspace"][..], &SMALL[..]].concat(), ws_script)?;
    let first = alice.logs_until("ws", "ready")?;
    ensure!(first.contains(&format!("home /home/{}", alice.name)), "workspace output {first:?}");
    ensure!(first.contains("previous starts: 0"), "workspace output {first:?}");
    run(&alice, "job", &with_gpus("1", &SMALL), "echo before; sleep 3; echo after; exit 3")?;
    alice.logs_until("job", "before")?;
    run(&alice, "big", &with_gpus("2", &SMALL), "ls /dev/nvidia*; echo big-ran")?;
    let big = alice
        .wait_until("big", "queued with a reason", |w| w["message"].as_str().is_some_and(|m| m.contains("GPU")))?;
    ensure!(big["state"] == "queued", "big: {big:#}");
    let ws_container = container_of(&alice.inspect("ws")?)?;
    let ws_started = docker_inspect(&ws_container)?["State"]["StartedAt"].clone();
    let job_container = container_of(&alice.inspect("job")?)?;

    hub.server.kill()?;
    let code = docker(&["wait", &job_container])?;
    ensure!(code == "3", "the job's container exited with {code}");
    hub.server.restart()?;

    let job = alice.wait_until("job", "ended", |w| w["state"] != "running" && w["state"] != "starting")?;
    ensure!(job["state"] == "failed" && job["exit_code"] == 3, "job after the restart: {job:#}");
    let logs = alice.ok(&["logs", "job"])?;
    ensure!(logs.lines().collect::<Vec<_>>() == ["before", "after"], "job logs {logs:?}");
    let ws = alice.inspect("ws")?;
    ensure!(ws["state"] == "running", "workspace after the restart: {ws:#}");
    ensure!(container_of(&ws)? == ws_container, "the workspace got a new container");
    let c = docker_inspect(&ws_container)?;
    ensure!(
        c["State"]["Running"] == true && c["State"]["StartedAt"] == ws_started,
        "workspace container {}",
        c["State"]
    );
    let out = alice.ok(&["logs", "-f", "big"])?;
    ensure!(gpu_nodes(&out).len() == 2 && out.contains("big-ran"), "big's output {out:?}");
    ensure!(alice.inspect("big")?["state"] == "succeeded", "big did not succeed");

    let out = alice.ok(&["stop", "ws"])?;
    ensure!(out.trim() == "ws: stopped", "stop printed {out:?}");
    let out = alice.ok(&["start", "ws"])?;
    ensure!(out.trim() == "ws: queued", "start printed {out:?}");
    // `running` first: `logs -f` of a re-queued workload may replay its previous run (see
    // `logs_follow_of_a_requeued_workspace_waits_for_its_new_run`)
    alice.wait_until("ws", "running again", |w| w["state"] == "running")?;
    let second = alice.logs_until("ws", "ready")?;
    ensure!(second.contains("previous starts: 1"), "the home lost its file: second run printed {second:?}");
    let ws = alice.inspect("ws")?;
    ensure!(container_of(&ws)? != ws_container, "a started workspace runs in a new container");
    alice.ok(&["stop", "ws"])?;
    let starts = std::fs::read_to_string(hub.server.data_dir.join("homes").join(&alice.name).join("starts"))?;
    ensure!(starts.lines().count() == 2, "home file on the host: {starts:?}");
    Ok(())
}

/// `logs -f` of a queued workload waits for it to start, as the API promises, also when it was queued
/// again after an earlier run: it must neither replay the previous run nor end.
#[test]
fn logs_follow_of_a_requeued_workspace_waits_for_its_new_run() -> Result<()> {
    let _serial = common::serial();
    let mut hub = Hub::start()?;
    let alice = hub.user("alice")?;
    let script =
        "echo \"run $(cat $HOME/runs 2>/dev/null | wc -l)\"; echo x >> $HOME/runs; echo ready; exec sleep 1000";
    run(&alice, "ws", &[&["--workspace"][..], &with_gpus("2", &SMALL)].concat(), script)?;
    alice.logs_until("ws", "ready")?;
    alice.ok(&["stop", "ws"])?;
    run(&alice, "blocker", &with_gpus("1", &SMALL), "echo ready; exec sleep 1000")?;
    alice.logs_until("blocker", "ready")?;
    alice.ok(&["start", "ws"])?;
    alice.wait_until("ws", "queued for GPUs", |w| {
        w["state"] == "queued" && w["message"].as_str().is_some_and(|m| m.contains("GPU"))
    })?;
    let mut follower = alice.follow("ws")?;
    // while ws waits its stream stays open and silent; a bounded look, since nothing signals "nothing"
    match follower.next_line(Duration::from_secs(3)) {
        Err(RecvTimeoutError::Timeout) => {}
        Ok(line) => bail!("logs -f of the queued ws printed {line:?}, from its previous run"),
        Err(RecvTimeoutError::Disconnected) => bail!("logs -f of the queued ws ended at once"),
    }
    alice.ok(&["stop", "blocker"])?;
    let out = follower.until("ready")?;
    ensure!(out.starts_with("run 1\n"), "logs -f of the restarted ws: {out:?}");
    alice.ok(&["stop", "ws"])?;
    Ok(())
}

/// GPU shares and run-time limits on the real engine: two half-GPU jobs run at once on the same GPU
/// device, each told its share; a whole-GPU job gets the other GPU; a job past its `--time-limit` is
/// stopped and fails with the reason.
#[test]
fn gpu_shares_and_time_limits_on_the_engine() -> Result<()> {
    let _serial = common::serial();
    let mut hub = Hub::start()?;
    let alice = hub.user("alice")?;
    // both halves hold their GPU until told to end, so they must run at the same time
    let script = "trap 'exit 0' TERM; ls /dev/nvidia*; echo milli=$GPUHUB_GPU_MILLI; \
                  echo mem=$CUDA_DEVICE_MEMORY_LIMIT; echo ready; while true; do sleep 0.1; done";
    run(&alice, "h1", &with_gpus("0.5", &SMALL), script)?;
    let mut extra = with_gpus("0.5", &SMALL);
    extra.extend(["--gpu-memory", "1GiB"]);
    run(&alice, "h2", &extra, script)?;
    let out1 = alice.logs_until("h1", "ready")?;
    let out2 = alice.logs_until("h2", "ready")?;
    ensure!(out1.contains("milli=500\n") && out2.contains("milli=500\nmem=1024m\n"), "{out1:?} {out2:?}");
    let (d1, d2) = (gpu_nodes(&out1), gpu_nodes(&out2));
    ensure!(d1.len() == 1 && d1 == d2, "the halves see GPU nodes {d1:?} and {d2:?}, want the same one");
    let h1 = alice.inspect("h1")?;
    let h2 = alice.inspect("h2")?;
    ensure!(h1["state"] == "running" && h2["state"] == "running", "{h1:#} {h2:#}");
    ensure!(h1["gpus"] == h2["gpus"], "h1 holds {} and h2 {}", h1["gpus"], h2["gpus"]);
    let whole = run(&alice, "w", &with_gpus("1", &SMALL), "ls /dev/nvidia*")?;
    ensure!(whole.trim() == "w", "{whole}");
    let w = alice.wait_until("w", "succeeded", |w| w["state"] == "succeeded")?;
    ensure!(w["gpus"].as_array().map(Vec::len) == Some(1) && w["gpus"] != h1["gpus"], "what it held, whole: {w:#}");
    let out = alice.ok(&["logs", "w"])?;
    let dw = gpu_nodes(&out);
    ensure!(dw.len() == 1 && dw != d1, "the whole-GPU job sees {dw:?}; the shared GPU is {d1:?}");
    let nodes = alice.ok(&["nodes"])?;
    ensure!(nodes.contains(&format!("{}/h1 0.5", alice.name)), "gpuhub nodes shows the shares: {nodes}");
    for n in ["h1", "h2"] {
        alice.ok(&["stop", n])?;
    }

    run(&alice, "slow", &["--time-limit", "2s", "--cpus", "0.1", "--memory", "32MiB"], "sleep 600")?;
    let slow = alice.wait_until("slow", "failed", |w| w["state"] == "failed")?;
    let msg = slow["message"].as_str().unwrap_or_default();
    ensure!(msg.contains("reached its run-time limit of 2s"), "slow: {slow:#}");
    let ps = alice.ok(&["ps"])?;
    ensure!(ps.lines().any(|l| l.starts_with("slow ") && l.contains("failed")), "{ps}");
    Ok(())
}
