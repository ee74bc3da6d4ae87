//! Gangs on one Docker host, end to end (the real binary, CLI and Docker engine, fake GPU nodes): a
//! two-member gang with one GPU each starts both members or neither; each member prints its own rank,
//! reaches member 0 by its hostname on the run's own network and sees only its GPU; killing member 1
//! fails the run with member 1's code and stops member 0. Needs root and a Docker engine.

mod common;

use anyhow::{Context as _, Result, ensure};
use common::{Hub, IMAGE, docker, docker_inspect, gpu_nodes};
use serde_json::Value;

/// Small limits, so that many workloads fit the host.
const SMALL: [&str; 4] = ["--cpus", "0.1", "--memory", "32MiB"];

/// The container of member `member` of workload `w`.
fn member_container(w: &Value, member: u32) -> Result<String> {
    let id = w["id"].as_str().context("workload without id")?;
    let out = docker(&[
        "ps",
        "-aq",
        "--filter",
        &format!("label=gpuhub.workload={id}"),
        "--filter",
        &format!("label=gpuhub.member={member}"),
    ])?;
    let ids: Vec<&str> = out.split_whitespace().collect();
    ensure!(ids.len() == 1, "member {member} of {}: containers {ids:?}", w["name"]);
    Ok(ids[0].to_owned())
}

fn containers(w: &Value) -> Result<usize> {
    let id = w["id"].as_str().context("workload without id")?;
    Ok(docker(&["ps", "-aq", "--filter", &format!("label=gpuhub.workload={id}")])?.split_whitespace().count())
}

#[test]
fn a_two_member_gang_on_one_docker_host() -> Result<()> {
    let _serial = common::serial();
    let mut hub = Hub::start()?;
    let alice = hub.user("alice")?;

    // each member its own rank and GPU; member 1 fetches a page member 0 serves at MASTER_ADDR:MASTER_PORT
    let script = r#"echo "rank=$RANK world=$WORLD_SIZE local=$LOCAL_RANK master=$MASTER_ADDR:$MASTER_PORT host=$(hostname)"
ls /dev/nvidia*
if [ "$RANK" = 0 ]; then
  echo "from rank 0" > /tmp/index.html; httpd -p "$MASTER_PORT" -h /tmp; sleep 3
else
  for i in $(seq 100); do wget -q -O- "http://$MASTER_ADDR:$MASTER_PORT/" && break; sleep 0.1; done
fi"#;
    let mut args = vec!["run", "--name", "ddp", "--image", IMAGE, "--members", "2", "--gpus", "1", "--follow"];
    args.extend(SMALL);
    args.extend(["--", "sh", "-c", script]);
    let out = alice.ok(&args)?;
    ensure!(out.contains("rank=0 world=2 local=0 master=ddp-0:29500 host=ddp-0"), "member 0's output: {out:?}");
    let w = alice.inspect("ddp")?;
    ensure!(w["state"] == "succeeded" && w["size"] == 2, "ddp: {w:#}");
    let members = w["members"].as_array().context("members")?;
    ensure!(members.len() == 2, "{w:#}");
    let gpus: Vec<&str> = members.iter().filter_map(|m| m["gpus"][0].as_str()).collect();
    ensure!(gpus.len() == 2 && gpus[0] != gpus[1], "each member holds its own GPU: {w:#}");
    ensure!(members.iter().all(|m| m["state"] == "exited" && m["exit_code"] == 0), "{w:#}");
    let one = alice.ok(&["logs", "ddp", "--member", "1"])?;
    ensure!(one.contains("rank=1 world=2 local=0 master=ddp-0:29500 host=ddp-1"), "member 1's output: {one:?}");
    ensure!(one.contains("from rank 0"), "member 1 reached member 0 at MASTER_ADDR: {one:?}");
    // each sees exactly the node of its own GPU (GPU-fake-N is /dev/nvidiaN)
    for (i, log) in [(0, &out), (1, &one)] {
        let want = format!("/dev/nvidia{}", gpus[i].trim_start_matches("GPU-fake-"));
        ensure!(gpu_nodes(log) == [want.clone()], "member {i} sees {:?}, want [{want}]", gpu_nodes(log));
    }
    let fails = alice.fails(&["logs", "ddp", "--member", "2"])?;
    ensure!(fails.contains("no member 2"), "{fails}");

    // all or nothing: with one GPU held, a gang of two 1-GPU members waits and no member starts
    let mut hold = vec!["run", "--name", "hold", "--image", IMAGE, "--gpus", "1"];
    hold.extend(SMALL);
    hold.extend(["--", "sleep", "1000"]);
    alice.ok(&hold)?;
    alice.wait_until("hold", "running", |w| w["state"] == "running")?;
    let mut gang = vec!["run", "--name", "gang", "--image", IMAGE, "--members", "2", "--gpus", "1"];
    gang.extend(SMALL);
    gang.extend(["--", "sh", "-c", "trap 'exit 0' TERM; sleep 1000 & wait"]);
    alice.ok(&gang)?;
    let g = alice.wait_until("gang", "queued with a reason", |w| {
        w["state"] == "queued" && w["message"].as_str().is_some_and(|m| m != "queued")
    })?;
    ensure!(containers(&g)? == 0, "no member of a gang that does not fit starts: {g:#}");
    alice.ok(&["stop", "hold"])?;
    let g = alice.wait_until("gang", "running", |w| w["state"] == "running")?;
    ensure!(containers(&g)? == 2, "both members start: {g:#}");

    // member 1 killed: the run fails with its code and member 0 is stopped
    let (m0, m1) = (member_container(&g, 0)?, member_container(&g, 1)?);
    docker(&["kill", &m1])?;
    let g = alice.wait_until("gang", "failed", |w| w["state"] == "failed")?;
    ensure!(g["exit_code"] == 137, "the run fails with member 1's code: {g:#}");
    ensure!(g["message"].as_str().unwrap_or("").contains("member 1"), "{g:#}");
    let state = &docker_inspect(&m0)?["State"];
    ensure!(state["Running"] == false, "member 0 was stopped: {state}");
    ensure!(state["ExitCode"] == 0, "member 0 was stopped with SIGTERM, which it handles: {state}");
    // a gang has a network of its own, removed with the run
    let net = docker(&["inspect", "-f", "{{range $k, $v := .NetworkSettings.Networks}}{{$k}}{{end}}", &m0])?;
    ensure!(net.trim().ends_with("-net"), "member 0 was on the run's own network: {net}");
    alice.ok(&["rm", "gang"])?;
    let left = docker(&["network", "ls", "-q", "--filter", &format!("name={}", net.trim())])?;
    ensure!(left.trim().is_empty(), "the run's network is removed with it");
    Ok(())
}
