//! Specs for unit tests.

use gpuhub_driver::{GpuGrant, Identity, LABEL_INSTANCE, LABEL_OWNER, LABEL_WORKLOAD, MemberSpec, Mount, RunSpec};
use std::collections::BTreeMap;

/// A run of `members` members of 2 CPUs, 1 GiB and `gpus` each, for user alice, workload w1.
pub(crate) fn run_spec(members: u32, gpus: GpuGrant) -> RunSpec {
    RunSpec {
        name: "gpuhub-alice-train-0123abcd".into(),
        image: "gpuhub/busybox:latest".into(),
        command: vec!["sh".into(), "-c".into(), "echo it's $RANK".into()],
        env: BTreeMap::from([("FOO".to_owned(), "bar baz".to_owned())]),
        labels: BTreeMap::from([
            (LABEL_OWNER.to_owned(), "alice".to_owned()),
            (LABEL_WORKLOAD.to_owned(), "w1".to_owned()),
            (LABEL_INSTANCE.to_owned(), "0123456789abcdef0123".to_owned()),
        ]),
        identity: Identity {
            username: "alice".into(),
            account: "alice".into(),
            uid: 10000,
            gid: 10000,
            home: "/home/alice".into(),
            groups: Vec::new(),
        },
        working_dir: Some("/home/alice".into()),
        mounts: vec![Mount {
            source: "/srv/homes/alice".into(),
            target: "/home/alice".into(),
            read_only: false,
            nfs: None,
        }],
        network: None,
        members: (0..members)
            .map(|index| MemberSpec {
                index,
                hostname: format!("train-{index}"),
                node: None,
                cpu_milli: 1500,
                memory_bytes: 1 << 30,
                gpus: gpus.clone(),
                env: BTreeMap::new(),
                mounts: Vec::new(),
            })
            .collect(),
        pids_limit: 1024,
        log_max_bytes: None,
        time_limit: None,
        queue: String::new(),
        ports: vec![8888],
        disk_bytes: None,
    }
}
