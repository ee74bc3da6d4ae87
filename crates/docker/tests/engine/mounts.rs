//! A member's own mounts (an MPS share's pipe directory and its daemon's shared memory) reach that
//! member's container only, and a bind onto `/dev/shm` replaces Docker's own tmpfs there.

use crate::common::*;
use futures::StreamExt;
use gpuhub_core::node::NodeCapacity;
use gpuhub_core::{Bytes, CpuMilli};
use gpuhub_docker::{DockerEngine, GpuMode};
use gpuhub_driver::{Engine, GpuGrant, Identity, LABEL_OWNER, LABEL_WORKLOAD, MemberRef, MemberSpec, Mount, RunSpec};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;

fn bind(source: &std::path::Path, target: &str) -> Mount {
    Mount { source: source.display().to_string(), target: target.into(), read_only: false, nfs: None }
}

async fn member_output(engine: &DockerEngine, run: &str, member: u32) -> String {
    let mut logs = engine.logs(&MemberRef::new(run, member), true, None).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(PATIENCE, async {
        while let Some(chunk) = logs.next().await {
            out.extend_from_slice(&chunk.unwrap());
        }
    })
    .await
    .expect("the log stream ends when the member does");
    String::from_utf8(out).unwrap()
}

#[tokio::test]
async fn a_members_own_mounts_reach_only_its_container_and_replace_dev_shm() {
    let rt = runtime().await;
    let host = tempfile::tempdir().unwrap();
    let (pipe, shm) = (host.path().join("pipe"), host.path().join("shm"));
    for d in [host.path(), &pipe, &shm] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o1777)).unwrap();
    }
    std::fs::write(pipe.join("control"), "").unwrap();
    std::fs::write(shm.join("from-host"), "").unwrap();
    let member = |index: u32, mounts: Vec<Mount>| MemberSpec {
        index,
        hostname: format!("m{index}"),
        node: None,
        cpu_milli: 500,
        memory_bytes: 64 << 20,
        gpus: GpuGrant::None,
        env: BTreeMap::new(),
        mounts,
    };
    let run = unique("mounts");
    let script = "ls /dev/shm | tr '\\n' ' '; echo; ls /run/gpuhub/mps 2>&1 | tr '\\n' ' '; echo; \
                  touch /dev/shm/from-$RANK && echo wrote";
    let spec = RunSpec {
        image: IMAGE.to_owned(),
        command: vec!["sh".into(), "-c".into(), script.into()],
        labels: BTreeMap::from([
            (LABEL_OWNER.to_owned(), "tester".to_owned()),
            (LABEL_WORKLOAD.to_owned(), run.clone()),
        ]),
        identity: Identity {
            username: "tester".into(),
            account: "tester".into(),
            uid: 10000,
            gid: 10000,
            home: "/tmp".into(),
            groups: Vec::new(),
        },
        members: vec![member(0, vec![bind(&pipe, "/run/gpuhub/mps"), bind(&shm, "/dev/shm")]), member(1, Vec::new())],
        pids_limit: 64,
        ..gpuhub_testkit::run_spec(&run, 0)
    };
    let node = NodeCapacity::cpu_only("mounts-test", CpuMilli(2000), Bytes(1 << 30));
    let engine = DockerEngine::new(rt.clone(), node, GpuMode::None);
    let mut cleanup = Cleanup::default();
    cleanup.container(&format!("{run}-0"));
    cleanup.container(&format!("{run}-1"));
    cleanup.network(&DockerEngine::run_network(&run));
    engine.submit(&spec).await.unwrap();
    let (zero, one) = (member_output(&engine, &run, 0).await, member_output(&engine, &run, 1).await);
    let zero: Vec<&str> = zero.lines().map(str::trim).collect();
    assert_eq!(zero, ["from-host", "control", "wrote"], "member 0 sees the host's directories");
    assert!(shm.join("from-0").exists(), "what member 0 writes to /dev/shm is in the host's directory");
    let one: Vec<&str> = one.lines().map(str::trim).collect();
    assert_eq!(one[0], "", "member 1 has Docker's own, empty /dev/shm: {one:?}");
    assert!(one[1].contains("No such file or directory"), "member 1 has no pipe directory: {one:?}");
    assert_eq!(one[2], "wrote");
    assert!(!shm.join("from-1").exists());
    engine.remove(&run).await.unwrap();
}
