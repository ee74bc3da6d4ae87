//! The LXD engine against this machine's LXD daemon (installed and started by scripts/setup-debian.sh):
//! jobs, logs, exec, workspaces reached through `endpoint`, homes written as the user, cancel and remove,
//! saving a workspace as an image, shares of a (fake) GPU (`shares`) and pulls from a registry (`pull`). `GPUHUB_LXD_TESTS=skip` skips
//! them; otherwise a missing daemon fails.

mod common;
mod pull;
mod shares;

use common::*;
use futures::StreamExt;
use gpuhub_driver::{Engine, EngineError, EngineEvent, ExecSpec, MemberRef, MemberState};
use gpuhub_lxd::{LxdConfig, LxdEngine};
use std::os::unix::fs::MetadataExt;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn a_job_runs_as_its_user_with_its_limits_and_ends_with_its_exit_code() {
    if skipped() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path()).await;
    let home = home(dir.path());
    let mut events = engine.events().await.unwrap();
    let name = unique("job");
    let mut cleanup = Cleanup { engine: engine.clone(), runs: vec![], images: vec![] };
    // the job waits for the test's word (a file in its home) so that its limits can be read meanwhile
    let script = "echo uid=$(id -u) gid=$(id -g) pwd=$(pwd); echo \"$GREETING\" rank=$RANK; \
                  grep NoNewPrivs /proc/self/status; \
                  echo written > /home/tester/out.txt; \
                  while [ ! -e /home/tester/go ]; do sleep 0.05; done; echo last line; exit 3";
    let status = engine.submit(&spec(&name, IMAGE, script, Some(&home))).await.unwrap();
    cleanup.runs.push(status.id.clone());
    assert_eq!(status.labels.get(gpuhub_driver::LABEL_WORKLOAD), Some(&name));
    until_state(&engine, &status.id, |s| s == MemberState::Running).await;
    // its limits, as the host's cgroups have them (v1 or v2)
    let cgroup = |v1: &str, v2: &str| {
        let p = match std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
            true => format!("/sys/fs/cgroup/lxc.payload.{}/{v2}", status.id),
            false => format!("/sys/fs/cgroup/{v1}/lxc.payload.{}/{}", status.id, v2_to_v1(v2)),
        };
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}")).trim().to_owned()
    };
    let v2 = std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    assert_eq!(cgroup("memory", "memory.max"), (128u64 << 20).to_string());
    assert_eq!(cgroup("pids", "pids.max"), "64");
    if v2 {
        assert_eq!(cgroup("cpu", "cpu.max"), "50000 100000");
    } else {
        assert_eq!(cgroup("cpu", "cpu.max"), "50000");
        assert_eq!(cgroup("cpu", "cpu.cfs_period_us"), "100000");
    }
    std::fs::write(home.join("go"), "").unwrap();
    let state = until_state(&engine, &status.id, |s| matches!(s, MemberState::Exited(_))).await;
    let out = output(&engine, &status.id).await;
    assert_eq!(state, MemberState::Exited(3), "output: {out}");
    assert!(out.contains(&format!("uid={UID} gid={GID} pwd=/home/tester")), "{out}");
    assert!(out.contains("hello from lxd rank=0"), "{out}");
    assert!(out.contains("NoNewPrivs:\t1"), "no new privileges: {out}");
    let written = home.join("out.txt");
    assert_eq!(std::fs::read_to_string(&written).unwrap(), "written\n");
    let meta = std::fs::metadata(&written).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (UID, GID), "the home is written as the user");
    // the tail, and the run among the engine's runs
    let mut tail = engine.logs(&MemberRef::new(&status.id, 0), false, Some(1)).await.unwrap();
    let last = String::from_utf8(tail.next().await.unwrap().unwrap().to_vec()).unwrap();
    assert_eq!(last, "last line\n");
    let runs = engine.list_runs().await.unwrap();
    assert!(runs.iter().any(|r| r.id == status.id && r.ended()), "{runs:?}");
    // its events
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !seen.iter().any(|e| matches!(e, EngineEvent::Exited { run, .. } if *run == status.id)) {
        let e = tokio::time::timeout_at(deadline, events.next()).await.expect("an exit event").unwrap().unwrap();
        seen.push(e);
    }
    assert!(
        seen.contains(&EngineEvent::Exited { run: status.id.clone(), workload: name.clone(), member: 0, exit_code: 3 }),
        "{seen:?}"
    );
    engine.remove(&status.id).await.unwrap();
    cleanup.runs.clear();
    assert!(matches!(engine.observe(&status.id).await, Err(EngineError::NotFound(_))));
    assert!(matches!(engine.remove(&status.id).await, Err(EngineError::NotFound(_))));
}

#[tokio::test]
async fn exec_runs_as_the_user_with_and_without_a_terminal() {
    if skipped() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path()).await;
    let name = unique("exec");
    let mut cleanup = Cleanup { engine: engine.clone(), runs: vec![], images: vec![] };
    let status = engine.submit(&spec(&name, IMAGE, "exec sleep 300", None)).await.unwrap();
    cleanup.runs.push(status.id.clone());
    until_state(&engine, &status.id, |s| s == MemberState::Running).await;
    let member = MemberRef::new(&status.id, 0);
    // no terminal: stdin in, output out, the exit status
    let spec = ExecSpec {
        command: vec!["sh".into(), "-c".into(), "id -u; read line; echo got $line; exit 4".into()],
        user: format!("{UID}:{GID}"),
        ..Default::default()
    };
    let mut h = engine.exec(&member, &spec).await.unwrap();
    h.input.write_all(b"ping\n").await.unwrap();
    h.input.shutdown().await.unwrap();
    let mut out = Vec::new();
    while let Some(c) = tokio::time::timeout(PATIENCE, h.output.next()).await.expect("exec output") {
        out.extend_from_slice(&c.unwrap());
    }
    let out = String::from_utf8_lossy(&out);
    assert!(out.contains(&format!("{UID}\n")) && out.contains("got ping"), "{out}");
    assert_eq!(wait_exit(&h.process).await, 4);
    // an app started with exec outlives its client (the hub stopping): it goes on writing output
    let ticking = ExecSpec {
        command: vec![
            "sh".into(),
            "-c".into(),
            "i=0; while :; do i=$((i+1)); echo tick $i; echo $i >/tmp/ticks; sleep 0.02; done".into(),
        ],
        user: format!("{UID}:{GID}"),
        ..Default::default()
    };
    let mut h = engine.exec(&member, &ticking).await.unwrap();
    let first = tokio::time::timeout(PATIENCE, h.output.next()).await.expect("ticks").unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).starts_with("tick"), "{first:?}");
    // the whole handle goes, its process's control with it (LXD ended an exec whose control socket
    // closed: the hub's apps on LXD died with their handle)
    drop(h);
    let ticks = || async {
        let read = ExecSpec {
            command: vec!["cat".into(), "/tmp/ticks".into()],
            user: format!("{UID}:{GID}"),
            ..Default::default()
        };
        let mut h = engine.exec(&member, &read).await.unwrap();
        let mut out = Vec::new();
        while let Some(c) = h.output.next().await {
            out.extend_from_slice(&c.unwrap());
        }
        String::from_utf8_lossy(&out).trim().parse::<u64>().unwrap_or(0)
    };
    let at_drop = ticks().await;
    let start = std::time::Instant::now();
    while ticks().await < at_drop + 50 {
        assert!(start.elapsed() < PATIENCE, "the app stopped ticking once its client was gone");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // a terminal, resized (LXD 5.0 may drop what a terminal's process writes just before it exits: about
    // one quick command in five here; so this one lingers a moment after its output)
    let spec = ExecSpec {
        command: vec!["sh".into(), "-c".into(), "sleep 0.5; stty size; sleep 0.3; exit 5".into()],
        user: format!("{UID}:{GID}"),
        tty: Some((100, 30)),
        ..Default::default()
    };
    let mut h = engine.exec(&member, &spec).await.unwrap();
    h.resize(120, 40).await.unwrap();
    let mut out = Vec::new();
    while let Some(c) = tokio::time::timeout(PATIENCE, h.output.next()).await.expect("exec output") {
        out.extend_from_slice(&c.unwrap());
    }
    let out = String::from_utf8_lossy(&out);
    assert!(out.contains("40 120"), "{out}");
    assert_eq!(wait_exit(&h.process).await, 5);
    // usage of the running member
    let usage = engine.usage(&status.id).await.unwrap();
    assert_eq!(usage.len(), 1, "{usage:?}");
    assert_eq!(usage[0].memory_limit, Some(gpuhub_core::Bytes(128 << 20)));
    assert!(usage[0].memory_used.0 > 0, "{usage:?}");
}

/// The cgroup v1 file of a v2 one (`memory.max` → `memory.limit_in_bytes`, `cpu.max` → the quota).
fn v2_to_v1(file: &str) -> &str {
    match file {
        "memory.max" => "memory.limit_in_bytes",
        "cpu.max" => "cpu.cfs_quota_us",
        other => other,
    }
}

/// The exec's exit code, through its handle's wait (its operation's end).
async fn wait_exit(process: &gpuhub_driver::ExecProcess) -> i64 {
    tokio::time::timeout(PATIENCE, process.wait()).await.expect("the exec ends").unwrap()
}

#[tokio::test]
async fn a_workspace_app_is_reached_through_its_endpoint_and_cancel_stops_it() {
    if skipped() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path()).await;
    let home = home(dir.path());
    std::fs::write(home.join("index.html"), "served from lxd\n").unwrap();
    let name = unique("ws");
    let mut cleanup = Cleanup { engine: engine.clone(), runs: vec![], images: vec![] };
    let mut s = spec(&name, IMAGE, "exec httpd -f -p 127.0.0.1:8888 -h /home/tester", Some(&home));
    s.ports = vec![8888];
    let status = engine.submit(&s).await.unwrap();
    cleanup.runs.push(status.id.clone());
    until_state(&engine, &status.id, |s| s == MemberState::Running).await;
    let member = MemberRef::new(&status.id, 0);
    let addr = engine.endpoint(&member, 8888).await.unwrap();
    assert!(addr.ip().is_loopback(), "{addr}");
    let body = http_get(addr, "/index.html").await;
    assert!(body.contains("served from lxd"), "{body}");
    // a port not asked for at submit gets a proxy device when first reached
    let exec = ExecSpec {
        command: vec!["sh".into(), "-c".into(), "httpd -p 127.0.0.1:9999 -h /home/tester".into()],
        user: format!("{UID}:{GID}"),
        ..Default::default()
    };
    let h = engine.exec(&member, &exec).await.unwrap();
    assert_eq!(wait_exit(&h.process).await, 0);
    let other = engine.endpoint(&member, 9999).await.unwrap();
    assert_ne!(other, addr);
    assert!(http_get(other, "/index.html").await.contains("served from lxd"));
    // cancel: SIGTERM reaches the app, which ends; the member's status is SIGTERM's
    let started = std::time::Instant::now();
    engine.cancel(&status.id, Duration::from_secs(30)).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(20), "cancel waited {:?}", started.elapsed());
    let state = engine.observe(&status.id).await.unwrap().members[0].state;
    assert_eq!(state, MemberState::Exited(143));
    assert!(matches!(engine.endpoint(&member, 8888).await, Err(EngineError::Rejected(_))));
    engine.cancel(&status.id, Duration::from_secs(1)).await.unwrap();
}

async fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    let start = std::time::Instant::now();
    loop {
        if let Ok(mut s) = tokio::net::TcpStream::connect(addr).await {
            let req = format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n");
            if s.write_all(req.as_bytes()).await.is_ok() {
                let mut out = String::new();
                if s.read_to_string(&mut out).await.is_ok() && out.starts_with("HTTP/") {
                    return out;
                }
            }
        }
        assert!(start.elapsed() < PATIENCE, "nothing answers at {addr}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_workspace_saved_as_an_image_runs_again_with_its_files() {
    if skipped() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path()).await;
    let name = unique("save");
    let reference = format!("gpuhub-test/{name}:v1");
    let mut cleanup = Cleanup { engine: engine.clone(), runs: vec![], images: vec![reference.clone()] };
    let status = engine.submit(&spec(&name, IMAGE, "echo kept > /tmp/kept.txt; exec sleep 300", None)).await.unwrap();
    cleanup.runs.push(status.id.clone());
    until_state(&engine, &status.id, |s| s == MemberState::Running).await;
    let start = std::time::Instant::now();
    while !dir.path().join("runs").join(&status.id).join("log").exists() || start.elapsed() < Duration::from_millis(300)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!engine.image_exists(&reference).await.unwrap());
    // the workspace runs throughout its saving (LXD freezes it while it snapshots it)
    let committing = {
        let (engine, member, reference) = (engine.clone(), MemberRef::new(&status.id, 0), reference.clone());
        tokio::spawn(async move { engine.commit(&member, &reference).await })
    };
    while !committing.is_finished() {
        let state = engine.observe(&status.id).await.unwrap().members[0].state;
        assert_eq!(state, MemberState::Running, "while it is saved");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let size = committing.await.unwrap().unwrap();
    assert!(size > 100_000, "size {size}");
    assert!(engine.image_exists(&reference).await.unwrap());
    assert_eq!(engine.image_tags(&reference).await.unwrap(), vec![reference.clone()]);
    // the saved workspace still runs
    assert_eq!(engine.observe(&status.id).await.unwrap().members[0].state, MemberState::Running);
    let again = unique("saved");
    let run = engine.submit(&spec(&again, &reference, "cat /tmp/kept.txt; id -u", None)).await.unwrap();
    cleanup.runs.push(run.id.clone());
    let state = until_state(&engine, &run.id, |s| matches!(s, MemberState::Exited(_))).await;
    let out = output(&engine, &run.id).await;
    assert_eq!(state, MemberState::Exited(0), "{out}");
    assert!(out.contains("kept") && out.contains(&UID.to_string()), "{out}");
    engine.remove(&run.id).await.unwrap();
    engine.remove_image(&reference).await.unwrap();
    assert!(!engine.image_exists(&reference).await.unwrap());
    assert!(matches!(engine.remove_image(&reference).await, Err(EngineError::NotFound(_))));
}

#[tokio::test]
async fn an_absent_daemon_is_named_with_its_socket() {
    let dir = tempfile::tempdir().unwrap();
    let config = LxdConfig { socket: dir.path().join("no-lxd.socket"), ..Default::default() };
    let node = gpuhub_core::node::NodeCapacity::uniform(
        "n",
        gpuhub_core::CpuMilli(1000),
        gpuhub_core::Bytes(1 << 30),
        0,
        "none",
        gpuhub_core::Bytes(0),
        "GPU-",
    );
    let e = LxdEngine::connect(config, node).await.unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, EngineError::Unavailable(_)), "{e:?}");
    assert!(text.contains("no-lxd.socket") && text.contains("is LXD installed and running"), "{text}");
}

#[tokio::test]
async fn an_image_the_docker_daemon_lacks_is_not_found() {
    if skipped() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path()).await;
    let missing = "gpuhub-test/no-such-image:never";
    assert!(!engine.image_exists(missing).await.unwrap());
    let e = engine.submit(&spec(&unique("missing"), missing, "true", None)).await.unwrap_err();
    assert!(matches!(e, EngineError::ImageNotFound(_)), "{e:?}");
}

/// `network`: the container gets `eth0` on that managed LXD network (made here on a subnet of its own,
/// without NAT or firewall rules, and removed again).
#[tokio::test]
async fn a_configured_network_gives_the_container_its_nic() {
    if skipped() {
        return;
    }
    let net = format!("gpuhubt{}", std::process::id() % 100_000);
    let made = std::process::Command::new("lxc")
        .args(["network", "create", &net, "ipv4.address=10.213.77.1/24", "ipv4.nat=false", "ipv4.firewall=false"])
        .args(["ipv6.address=none", "ipv6.firewall=false"])
        .output()
        .unwrap();
    assert!(made.status.success(), "lxc network create: {}", String::from_utf8_lossy(&made.stderr));
    struct Net(String);
    impl Drop for Net {
        fn drop(&mut self) {
            let _ = std::process::Command::new("lxc").args(["network", "delete", &self.0]).output();
        }
    }
    let _net = Net(net.clone());
    let dir = tempfile::tempdir().unwrap();
    let plain = engine(dir.path()).await;
    let config = LxdConfig { state_dir: dir.path().to_owned(), network: Some(net), ..plain.config().clone() };
    let node = gpuhub_core::node::NodeCapacity::uniform(
        "lxd-test",
        gpuhub_core::CpuMilli(2000),
        gpuhub_core::Bytes(4 << 30),
        0,
        "none",
        gpuhub_core::Bytes(0),
        "GPU-",
    );
    let engine = LxdEngine::connect(config, node).await.unwrap();
    let name = unique("net");
    let mut cleanup = Cleanup { engine: engine.clone(), runs: vec![], images: vec![] };
    let status = engine.submit(&spec(&name, IMAGE, "ip -o link show eth0", None)).await.unwrap();
    cleanup.runs.push(status.id.clone());
    let state = until_state(&engine, &status.id, |s| matches!(s, MemberState::Exited(_))).await;
    let out = output(&engine, &status.id).await;
    assert_eq!(state, MemberState::Exited(0), "{out}");
    assert!(out.contains("eth0"), "{out}");
}

/// `log_max_bytes`: a member's output is kept at about that much, its newest part, while it runs.
#[tokio::test]
async fn output_is_capped_at_log_max_bytes_keeping_the_newest() {
    if skipped() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path()).await;
    let home = home(dir.path());
    let _events = engine.events().await.unwrap(); // the poller keeps the cap
    let name = unique("cap");
    let mut cleanup = Cleanup { engine: engine.clone(), runs: vec![], images: vec![] };
    // 10,000 lines of 14 bytes (140 kB), then the last line once the test says so
    let script = "i=0; while [ $i -lt 10000 ]; do echo \"line $(printf %08d $i)\"; i=$((i+1)); done; \
                  echo printed > /home/tester/printed; \
                  while [ ! -e /home/tester/go ]; do sleep 0.05; done; echo the-last-line";
    let mut s = spec(&name, IMAGE, script, Some(&home));
    s.log_max_bytes = Some(64 << 10);
    let status = engine.submit(&s).await.unwrap();
    cleanup.runs.push(status.id.clone());
    let log = dir.path().join("runs").join(&status.id).join("log");
    let start = std::time::Instant::now();
    loop {
        let printed = home.join("printed").exists();
        let len = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
        if printed && len <= 64 << 10 {
            break;
        }
        assert!(start.elapsed() < PATIENCE, "the output is still {len} bytes");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    std::fs::write(home.join("go"), "").unwrap();
    let state = until_state(&engine, &status.id, |s| matches!(s, MemberState::Exited(_))).await;
    assert_eq!(state, MemberState::Exited(0));
    let out = output(&engine, &status.id).await;
    assert!(out.len() <= 64 << 10, "{} bytes kept", out.len());
    assert!(
        out.ends_with("line 00009999\nthe-last-line\n"),
        "the newest output: {:?}",
        &out[out.len().saturating_sub(80)..]
    );
    assert!(!out.contains("line 00000000"), "the oldest output is gone");
}

/// A user ID root may not map (below the ranges setup-debian.sh delegates) is refused at submit, saying
/// where to allow it, and nothing is left behind.
#[tokio::test]
async fn a_uid_root_may_not_map_is_refused_naming_subuid() {
    if skipped() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path()).await;
    let name = unique("subuid");
    let mut s = spec(&name, IMAGE, "true", None);
    s.identity.uid = 999;
    s.identity.gid = 999;
    let e = engine.submit(&s).await.unwrap_err();
    assert!(matches!(e, EngineError::Rejected(_)), "{e:?}");
    let text = e.to_string();
    assert!(text.contains("/etc/subuid") && text.contains("not allowed"), "{text}");
    let runs = engine.list_runs().await.unwrap();
    assert!(runs.iter().all(|r| r.id != gpuhub_lxd::spec::lxd_name(&name)), "a container is left: {runs:?}");
    assert!(!dir.path().join("runs").join(gpuhub_lxd::spec::lxd_name(&name)).exists());
}
