//! Per-user networks: reachable within, isolated between.

use crate::common::*;
use gpuhub_docker::ContainerStatus;
use gpuhub_docker::DockerRuntime;
use gpuhub_driver::EngineError;
use std::collections::BTreeMap;

/// A client on `network` fetching `url` (2-second timeouts: `wget -T` crashes in Debian 12's busybox, so `timeout 2`): its output and exit code.
async fn fetch(rt: &DockerRuntime, cleanup: &mut Cleanup, network: &str, url: &str, tries: u32) -> (String, i64) {
    let script = format!(
        "for i in $(seq {tries}); do timeout 2 wget -q -O - {url} && exit 0; [ $i = {tries} ] || sleep 0.2; done; exit 1"
    );
    let mut s = spec(&unique("client"), &script);
    s.network = Some(network.to_owned());
    run_to_end(rt, cleanup, &s).await
}

#[tokio::test]
async fn users_networks_are_isolated_from_each_other() {
    let rt = runtime().await;
    let mut cleanup = Cleanup::default();
    let (net_a, net_b) = (unique("net-a"), unique("net-b"));
    cleanup.network(&net_a);
    cleanup.network(&net_b);
    rt.ensure_network(&net_a, &BTreeMap::new()).await.unwrap();
    rt.ensure_network(&net_b, &BTreeMap::new()).await.unwrap();
    rt.ensure_network(&net_b, &BTreeMap::new()).await.expect("ensuring twice is fine");
    let found = std::process::Command::new("docker")
        .args(["network", "ls", "-q", "--filter", &format!("name=^{net_b}$")])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&found.stdout).lines().count(), 1, "one network, not two");

    // A web server on B (as the unprivileged user: a high port).
    let mut server = spec(&unique("httpd"), "echo hello > /tmp/index.html && exec httpd -f -p 8080 -h /tmp");
    server.network = Some(net_b.clone());
    let server_id = run(&rt, &mut cleanup, &server).await;
    let info = rt.inspect(&server_id).await.unwrap();
    assert_eq!(info.status, ContainerStatus::Running);
    let ip = info.ip.expect("a running container has an address on its network");
    let url = format!("http://{ip}:8080/index.html");

    // Same network: reachable (retrying while httpd comes up).
    let (out, code) = fetch(&rt, &mut cleanup, &net_b, &url, 25).await;
    assert_eq!((out.as_str(), code), ("hello\n", 0));
    // Another user's network: not, though the server is up.
    let (out, code) = fetch(&rt, &mut cleanup, &net_a, &url, 1).await;
    assert_eq!(code, 1, "reached across networks: {out:?}");
    assert!(!out.contains("hello"));
    assert_eq!(rt.inspect(&server_id).await.unwrap().status, ContainerStatus::Running);
}

#[tokio::test]
async fn shared_or_foreign_networks_are_refused() {
    let rt = runtime().await;
    let mut cleanup = Cleanup::default();
    for name in ["bridge", "host", "none", ""] {
        assert!(matches!(rt.ensure_network(name, &BTreeMap::new()).await, Err(EngineError::Rejected(_))), "{name:?}");
    }
    let foreign = unique("foreign");
    cleanup.network(&foreign);
    let made = std::process::Command::new("docker").args(["network", "create", &foreign]).output().unwrap();
    assert!(made.status.success());
    assert!(
        matches!(rt.ensure_network(&foreign, &BTreeMap::new()).await, Err(EngineError::Rejected(_))),
        "not made by gpuhub"
    );

    // Another installation's network of the same name is not joined (security review finding 9).
    let shared_name = unique("two-installs");
    cleanup.network(&shared_name);
    let install = |id: &str| {
        BTreeMap::from([("gpuhub.owner".to_owned(), "alice".to_owned()), ("gpuhub.instance".to_owned(), id.to_owned())])
    };
    rt.ensure_network(&shared_name, &install("first")).await.unwrap();
    rt.ensure_network(&shared_name, &install("first")).await.expect("the same installation joins again");
    match rt.ensure_network(&shared_name, &install("second")).await {
        Err(EngineError::Rejected(why)) => assert!(why.contains("gpuhub.instance"), "{why}"),
        other => panic!("a second installation joined the first one's network: {other:?}"),
    }

    // Containers cannot join such networks either, nor one that does not exist.
    let mut s = spec(&unique("nonet"), "true");
    cleanup.container(&s.name);
    for (net, refused) in
        [("host", true), ("bridge", true), (foreign.as_str(), true), ("gpuhub-test-missing-net", false)]
    {
        s.network = Some(net.to_owned());
        match rt.create(&s).await {
            Err(EngineError::Rejected(_)) if refused => {}
            Err(EngineError::NotFound(_)) if !refused => {}
            other => panic!("network {net}: {other:?}"),
        }
    }
}

/// Security review finding 8: a listener on the host's `0.0.0.0` does not answer a container on a gpuhub
/// network, while the host still reaches the container (replies pass). Without isolation it would answer.
#[tokio::test]
async fn containers_do_not_reach_the_hosts_services() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                // read the request first: closing on unread bytes would reset the connection
                let (mut buf, mut got) = (vec![0u8; 4096], Vec::new());
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                // a newline at the end: a last partial line can miss the log of a container that exits at once
                let _ = s.write_all(b"HTTP/1.0 200 OK\r\ncontent-length: 10\r\n\r\nhost-here\n").await;
                let _ = s.shutdown().await;
            });
        }
    });
    let url = format!("http://$(ip route | awk '/default/ {{print $3}}'):{port}/");
    let labels = BTreeMap::new();
    for (isolated, expect_reached) in [(false, true), (true, false)] {
        let rt = runtime().await.with_host_isolation(isolated);
        let mut cleanup = Cleanup::default();
        let net = unique(if isolated { "isolated" } else { "open" });
        cleanup.network(&net);
        rt.ensure_network(&net, &labels).await.unwrap();
        let (out, code) = fetch(&rt, &mut cleanup, &net, &url, 3).await;
        assert_eq!(code == 0 && out.contains("host-here"), expect_reached, "isolated={isolated}: {out:?} ({code})");
    }
}

/// The `iptables` rules of a bridge, as `iptables -S` prints them, in both chains gpuhub uses.
fn rules_of(bridge: &str) -> Vec<String> {
    ["INPUT", "DOCKER-USER"]
        .iter()
        .flat_map(|chain| {
            let out = std::process::Command::new("iptables").args(["-w", "-S", chain]).output().unwrap();
            String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect::<Vec<_>>()
        })
        .filter(|l| l.split_whitespace().any(|w| w == bridge))
        .collect()
}

/// The rules of a deleted network's bridge do not pile up: creating the next network removes them.
#[tokio::test]
async fn rules_of_deleted_networks_are_swept() {
    let rt = runtime().await.with_host_isolation(true);
    let labels = BTreeMap::new();
    let mut cleanup = Cleanup::default();
    let gone = unique("swept");
    rt.ensure_network(&gone, &labels).await.unwrap();
    let out = std::process::Command::new("docker")
        .args(["network", "inspect", "-f", "{{index .Options \"com.docker.network.bridge.name\"}}", &gone])
        .output()
        .unwrap();
    let bridge = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(bridge.starts_with("gh-"), "{bridge:?}");
    assert_eq!(rules_of(&bridge).len(), 3, "{:?}", rules_of(&bridge));
    let rm = std::process::Command::new("docker").args(["network", "rm", &gone]).output().unwrap();
    assert!(rm.status.success());
    // deleting the network leaves its rules behind (Docker does not know them); the next creation
    // sweeps them, ours below or a concurrent test's, so their count is not asserted in between
    let next = unique("sweeper");
    cleanup.network(&next);
    rt.ensure_network(&next, &labels).await.unwrap();
    assert!(rules_of(&bridge).is_empty(), "{:?}", rules_of(&bridge));
}

/// Whether the engine has a network of exactly this name.
fn network_exists(name: &str) -> bool {
    let out = std::process::Command::new("docker")
        .args(["network", "ls", "-q", "--filter", &format!("name=^{name}$")])
        .output()
        .unwrap();
    !String::from_utf8_lossy(&out.stdout).trim().is_empty()
}

/// N11 (second security review): a user's network is made by their run and, once the user is deleted
/// (their runs removed first), removed by `remove_user_network`, so deleted users do not use up Docker's
/// address pools; the same user's network of another installation stays, and labels of another
/// installation remove nothing.
#[tokio::test]
async fn n11_a_users_network_goes_with_the_user() {
    use gpuhub_core::node::NodeCapacity;
    use gpuhub_core::{Bytes, CpuMilli};
    use gpuhub_docker::{DockerEngine, GpuMode};
    use gpuhub_driver::{Engine, GpuGrant, Identity, LABEL_INSTANCE, LABEL_OWNER, LABEL_WORKLOAD, MemberSpec, RunSpec};
    let rt = runtime().await;
    let engine =
        DockerEngine::new(rt.clone(), NodeCapacity::cpu_only("n11", CpuMilli(2000), Bytes(1 << 30)), GpuMode::None);
    let mut cleanup = Cleanup::default();
    let installs = [uuid::Uuid::new_v4().simple().to_string(), uuid::Uuid::new_v4().simple().to_string()];
    let network = |i: &str| format!("gpuhub-{}-u-alice", &i[..12]);
    let labels = |i: &str| {
        BTreeMap::from([(LABEL_OWNER.to_owned(), "alice".to_owned()), (LABEL_INSTANCE.to_owned(), i.to_owned())])
    };
    let mut runs = Vec::new();
    for i in &installs {
        let run = unique("n11");
        cleanup.container(&run);
        cleanup.network(&network(i));
        let mut run_labels = labels(i);
        run_labels.insert(LABEL_WORKLOAD.to_owned(), run.clone());
        let spec = RunSpec {
            image: IMAGE.to_owned(),
            command: vec!["true".into()],
            labels: run_labels,
            identity: Identity {
                username: "alice".into(),
                account: "alice".into(),
                uid: 10000,
                gid: 10000,
                home: "/tmp".into(),
                groups: Vec::new(),
            },
            network: Some(network(i)),
            members: vec![MemberSpec {
                index: 0,
                hostname: "n11".into(),
                node: None,
                cpu_milli: 500,
                memory_bytes: 64 << 20,
                gpus: GpuGrant::None,
                env: BTreeMap::new(),
                mounts: Vec::new(),
            }],
            pids_limit: 64,
            ..gpuhub_testkit::run_spec(&run, 0)
        };
        engine.submit(&spec).await.unwrap();
        assert!(network_exists(&network(i)), "the run made its owner's network");
        runs.push(run);
    }
    let (mine, theirs) = (&installs[0], &installs[1]);
    engine.remove(&runs[0]).await.unwrap();
    engine.remove_user_network(&network(mine), &labels(mine)).await.unwrap();
    assert!(!network_exists(&network(mine)), "the deleted user's network is gone");
    engine.remove_user_network(&network(mine), &labels(mine)).await.expect("a missing network is fine");
    assert!(network_exists(&network(theirs)), "the other installation's alice keeps hers");
    match engine.remove_user_network(&network(theirs), &labels(mine)).await {
        Err(EngineError::Rejected(why)) => assert!(why.contains("gpuhub.instance"), "{why}"),
        other => panic!("another installation's network was taken for ours: {other:?}"),
    }
    assert!(network_exists(&network(theirs)), "labels of another installation remove nothing");
    engine.remove(&runs[1]).await.unwrap();
}

/// The subnet Docker gave `network`.
fn subnet_of(network: &str) -> String {
    let out = std::process::Command::new("docker")
        .args(["network", "inspect", "-f", "{{range .IPAM.Config}}{{.Subnet}}{{end}}", network])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Security review N11 (its larger ask): users' networks come from one pool the admin names, block by
/// block, a freed block is used again, a full pool is refused in words that say what to change, and a
/// container on such a network has an address in its block.
#[tokio::test]
async fn user_networks_are_carved_from_the_admins_pool() {
    let pool = gpuhub_docker::network::NetworkPool::new("10.213.77.0/26".parse().unwrap(), 28).unwrap();
    let rt = runtime().await.with_network_pool(Some(pool));
    let mut cleanup = Cleanup::default();
    let names: Vec<String> = (0..5).map(|i| unique(&format!("pool{i}"))).collect();
    for n in &names {
        cleanup.network(n);
    }
    for n in &names[..3] {
        rt.ensure_network(n, &BTreeMap::new()).await.unwrap();
    }
    let subnets: Vec<String> = names[..3].iter().map(|n| subnet_of(n)).collect();
    assert_eq!(subnets, ["10.213.77.0/28", "10.213.77.16/28", "10.213.77.32/28"]);
    // a deleted user's block is the next one given
    rt.remove_user_network(&names[1], &BTreeMap::new()).await.unwrap();
    rt.ensure_network(&names[3], &BTreeMap::new()).await.unwrap();
    assert_eq!(subnet_of(&names[3]), "10.213.77.16/28");
    rt.ensure_network(&names[4], &BTreeMap::new()).await.unwrap();
    assert_eq!(subnet_of(&names[4]), "10.213.77.48/28");
    // full
    let more = unique("pool-full");
    cleanup.network(&more);
    match rt.ensure_network(&more, &BTreeMap::new()).await {
        Err(EngineError::Rejected(m)) => assert!(m.contains("no free block") && m.contains("network_pool"), "{m}"),
        other => panic!("a full pool: {other:?}"),
    }
    // a container on one of them gets an address in its block
    let mut s = spec(&unique("pooled"), "sleep 30");
    s.network = Some(names[4].clone());
    let id = run(&rt, &mut cleanup, &s).await;
    let ip = rt.inspect(&id).await.unwrap().ip.expect("an address");
    assert!(
        ip.starts_with("10.213.77.") && (49..63).contains(&ip.rsplit('.').next().unwrap().parse::<u8>().unwrap()),
        "{ip}"
    );
}
