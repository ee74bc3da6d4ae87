//! Creation (user, limits, hardening, refusals), logs, listing, stop and remove.

use crate::common::*;
use bollard::container::InspectContainerOptions;
use gpuhub_docker::ContainerStatus;
use gpuhub_docker::DockerRuntime;
use gpuhub_driver::{EngineError, LABEL_WORKLOAD, Mount};
use std::process::Command;
use std::time::Duration;

#[tokio::test]
async fn job_runs_as_the_given_user() {
    let rt = runtime().await;
    let mut cleanup = Cleanup::default();
    let (out, code) = run_to_end(&rt, &mut cleanup, &spec(&unique("user"), "id -u; id -g")).await;
    assert_eq!((out.as_str(), code), ("10000\n10000\n", 0));
}

#[tokio::test]
async fn limits_and_hardening_are_applied() {
    let rt = runtime().await;
    let mut cleanup = Cleanup::default();
    let name = unique("limits");
    let mut s =
        spec(&name, "grep -E '^(CapEff|CapPrm|NoNewPrivs):' /proc/self/status; cat /proc/1/comm; hostname; pwd");
    s.hostname = Some("job-host".into());
    s.working_dir = Some("/tmp".into());
    s.env.insert("GREETING".into(), "hi".into());
    let (out, code) = run_to_end(&rt, &mut cleanup, &s).await;
    assert_eq!(code, 0, "{out}");
    // What the process itself sees: no capabilities, no new privileges, an init as PID 1.
    assert!(out.contains("CapEff:\t0000000000000000"), "{out}");
    assert!(out.contains("CapPrm:\t0000000000000000"), "{out}");
    assert!(out.contains("NoNewPrivs:\t1"), "{out}");
    assert!(out.contains("docker-init\n") || out.contains("tini\n"), "PID 1 is the init: {out}");
    assert!(out.contains("job-host\n/tmp\n"), "{out}");

    // What the engine recorded.
    let docker = bollard::Docker::connect_with_defaults().unwrap();
    let c = docker.inspect_container(&name, None::<InspectContainerOptions>).await.unwrap();
    let h = c.host_config.unwrap();
    let limited_cpu =
        h.nano_cpus == Some(500_000_000) || (h.cpu_period == Some(100_000) && h.cpu_quota == Some(50_000));
    assert!(limited_cpu, "cpu limit: nano {:?}, quota {:?}/{:?}", h.nano_cpus, h.cpu_quota, h.cpu_period);
    assert_eq!(h.memory, Some(64 << 20));
    assert_eq!(h.memory_swap, h.memory, "no swap");
    assert_eq!(h.pids_limit, Some(64));
    assert!(h.security_opt.unwrap_or_default().iter().any(|o| o.starts_with("no-new-privileges")));
    assert_eq!(h.cap_drop, Some(vec!["ALL".to_owned()]));
    assert_eq!(h.cap_add.unwrap_or_default(), Vec::<String>::new());
    assert_ne!(h.privileged, Some(true));
    assert_eq!(h.init, Some(true));
    assert_eq!(h.network_mode.as_deref(), Some("none"), "no network asked: none given");
    let cfg = c.config.unwrap();
    assert_eq!(cfg.user.as_deref(), Some("10000:10000"));
    assert_eq!(cfg.labels.unwrap()[LABEL_WORKLOAD], name);
    assert!(cfg.env.unwrap().contains(&"GREETING=hi".to_owned()));
}

#[tokio::test]
async fn refuses_the_engine_socket_and_missing_images() {
    let rt = runtime().await;
    let mut cleanup = Cleanup::default();
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("innocent");
    std::os::unix::fs::symlink("/var/run/docker.sock", &link).unwrap();
    for source in ["/var/run/docker.sock", "/run/containerd/containerd.sock", "/var/run", link.to_str().unwrap()] {
        let mut s = spec(&unique("sock"), "true");
        cleanup.container(&s.name);
        s.mounts.push(Mount { source: source.to_owned(), target: "/engine".into(), read_only: true, nfs: None });
        assert!(matches!(rt.create(&s).await, Err(EngineError::Rejected(_))), "{source} must be refused");
        assert!(matches!(rt.inspect(&s.name).await, Err(EngineError::NotFound(_))), "nothing was created");
    }
    let mut s = spec(&unique("noimage"), "true");
    cleanup.container(&s.name);
    s.image = "gpuhub/does-not-exist:latest".into();
    assert!(!rt.image_exists(&s.image).await.unwrap());
    assert!(matches!(rt.create(&s).await, Err(EngineError::ImageNotFound(i)) if i == s.image));
}

#[tokio::test]
async fn bind_mounts_and_name_conflicts() {
    let rt = runtime().await;
    let mut cleanup = Cleanup::default();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("data.txt"), "from the host\n").unwrap();
    let mut s = spec(&unique("mount"), "cat /data/data.txt; touch /data/new 2>/dev/null || echo read-only");
    s.mounts.push(Mount {
        source: dir.path().to_str().unwrap().to_owned(),
        target: "/data".into(),
        read_only: true,
        nfs: None,
    });
    let (out, _) = run_to_end(&rt, &mut cleanup, &s).await;
    assert_eq!(out, "from the host\nread-only\n");
    assert!(matches!(rt.create(&s).await, Err(EngineError::Rejected(_))), "the name is taken");
    let mut missing = spec(&unique("nosrc"), "true");
    cleanup.container(&missing.name);
    missing.mounts.push(Mount {
        source: "/nonexistent/gpuhub".into(),
        target: "/data".into(),
        read_only: false,
        nfs: None,
    });
    assert!(matches!(rt.create(&missing).await, Err(EngineError::Rejected(_))), "a missing source is refused");
}

#[tokio::test]
async fn logs_follow_ends_with_the_container() {
    let rt = runtime().await;
    let mut cleanup = Cleanup::default();
    let id = run(&rt, &mut cleanup, &spec(&unique("logs"), "echo one; sleep 1; echo two >&2")).await;
    // Following from the start: it must see the later line and then end by itself.
    assert_eq!(output(&rt, &id).await, "one\ntwo\n");
    let mut again = rt.logs(&id, false, None).await.unwrap();
    let mut all = Vec::new();
    while let Some(chunk) = futures::StreamExt::next(&mut again).await {
        all.extend_from_slice(&chunk.unwrap());
    }
    assert_eq!(all, b"one\ntwo\n");
    assert!(matches!(rt.logs("gpuhub-test-no-such-container", true, None).await, Err(EngineError::NotFound(_))));
}

/// All of a log stream.
async fn read_all(rt: &DockerRuntime, id: &str, tail: Option<u64>) -> Vec<u8> {
    let mut stream = rt.logs(id, false, tail).await.unwrap();
    let mut all = Vec::new();
    while let Some(chunk) = futures::StreamExt::next(&mut stream).await {
        all.extend_from_slice(&chunk.unwrap());
    }
    all
}

#[tokio::test]
async fn output_is_capped_by_the_engine_and_tail_reads_the_end() {
    let rt = runtime().await;
    let mut cleanup = Cleanup::default();
    let mut capped = spec(&unique("logcap"), "seq 1 300000");
    capped.log_max_bytes = Some(2 << 20);
    let id = run(&rt, &mut cleanup, &capped).await;
    output(&rt, &id).await; // until it ends
    let out =
        Command::new("docker").args(["inspect", "--format", "{{json .HostConfig.LogConfig}}", &id]).output().unwrap();
    let log: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(log["Type"], "json-file", "{log}");
    assert_eq!(log["Config"]["max-size"], (1u64 << 20).to_string(), "{log}");
    assert_eq!(log["Config"]["max-file"], "2", "{log}");
    // about 2 MB of output in about 20 MB of json lines: the engine kept only the last files' worth
    let all = read_all(&rt, &id, None).await;
    assert!(!all.is_empty() && all.len() < 2 << 20, "kept {} bytes", all.len());
    assert!(all.ends_with(b"299999\n300000\n"));
    assert_eq!(read_all(&rt, &id, Some(2)).await, b"299999\n300000\n");
    assert_eq!(read_all(&rt, &id, Some(0)).await, b"");
}

#[tokio::test]
async fn list_managed_sees_labelled_containers_only() {
    let rt = runtime().await;
    let mut cleanup = Cleanup::default();
    let labelled = spec(&unique("listed"), "exit 7");
    let mut plain = spec(&unique("unlisted"), "true");
    plain.labels.clear();
    let created = spec(&unique("created"), "true");
    cleanup.container(&plain.name);
    cleanup.container(&created.name);
    let plain_id = rt.create(&plain).await.unwrap();
    let created_id = rt.create(&created).await.unwrap();
    let (_, code) = run_to_end(&rt, &mut cleanup, &labelled).await;
    assert_eq!(code, 7);

    let all = rt.list_managed().await.unwrap();
    let find = |name: &str| all.iter().find(|c| c.name == name);
    let exited = find(&labelled.name).expect("the labelled container is listed");
    assert_eq!(exited.status, ContainerStatus::Exited(7));
    assert_eq!(exited.labels[LABEL_WORKLOAD], labelled.name);
    let fresh = find(&created.name).expect("a created one is listed too");
    assert_eq!((fresh.id.as_str(), fresh.status), (created_id.as_str(), ContainerStatus::Created));
    assert!(find(&plain.name).is_none() && all.iter().all(|c| c.id != plain_id), "unlabelled is not listed");
}

#[tokio::test]
async fn stop_remove_and_not_found() {
    let rt = runtime().await;
    let mut cleanup = Cleanup::default();
    let s = spec(&unique("stop"), "sleep 300");
    let id = run(&rt, &mut cleanup, &s).await;
    let info = rt.inspect(&id).await.unwrap();
    assert_eq!((info.name.as_str(), info.status, info.ip), (s.name.as_str(), ContainerStatus::Running, None));
    rt.stop(&id, Duration::from_secs(10)).await.unwrap();
    // The init passes SIGTERM on to sleep, which dies of it: 128 + 15.
    assert_eq!(rt.inspect(&id).await.unwrap().status, ContainerStatus::Exited(143));
    rt.stop(&id, Duration::from_secs(10)).await.expect("stopping a stopped container is fine");
    rt.remove(&id).await.unwrap();
    assert!(matches!(rt.remove(&id).await, Err(EngineError::NotFound(_))));
    assert!(matches!(rt.inspect(&id).await, Err(EngineError::NotFound(_))));
    assert!(matches!(rt.stop(&id, Duration::ZERO).await, Err(EngineError::NotFound(_))));
    assert!(matches!(rt.start(&id).await, Err(EngineError::NotFound(_))));

    // A running container is removed by force.
    let id = run(&rt, &mut cleanup, &spec(&unique("force"), "sleep 300")).await;
    rt.remove(&id).await.unwrap();
    assert!(matches!(rt.inspect(&id).await, Err(EngineError::NotFound(_))));
}
