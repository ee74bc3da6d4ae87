use super::*;
use gpuhub_driver::{Identity, Mount};

pub(crate) fn member(index: u32, gpus: GpuGrant) -> MemberSpec {
    MemberSpec {
        index,
        hostname: format!("train-{index}"),
        node: None,
        cpu_milli: 2500,
        memory_bytes: 4 << 30,
        gpus,
        env: BTreeMap::from([("SHARE".to_owned(), "x".to_owned())]),
        mounts: Vec::new(),
    }
}

pub(crate) fn run_spec(kind: &str, members: Vec<MemberSpec>) -> RunSpec {
    RunSpec {
        name: "gpuhub-Alice_train-0123abcd".into(),
        image: "pytorch/pytorch:2.4".into(),
        command: vec!["python".into(), "train.py".into()],
        env: BTreeMap::from([("EPOCHS".to_owned(), "3".to_owned())]),
        labels: BTreeMap::from([
            (LABEL_WORKLOAD.to_owned(), "w-1".to_owned()),
            (LABEL_INSTANCE.to_owned(), "inst".to_owned()),
            ("gpuhub.kind".to_owned(), kind.to_owned()),
            ("gpuhub.name".to_owned(), "a name with spaces, longer than a label value may be at all: 63".to_owned()),
        ]),
        identity: Identity {
            username: "alice".into(),
            account: "alice".into(),
            uid: 1001,
            gid: 1001,
            home: "/home/alice".into(),
            groups: vec![2001],
        },
        working_dir: Some("/home/alice".into()),
        mounts: vec![
            Mount { source: "/srv/homes/alice".into(), target: "/home/alice".into(), read_only: false, nfs: None },
            Mount { source: "/export/ds".into(), target: "/data/ds".into(), read_only: true, nfs: Some("nfs1".into()) },
        ],
        network: None,
        members,
        pids_limit: 4096,
        log_max_bytes: None,
        time_limit: None,
        queue: String::new(),
        ports: vec![8888],
        disk_bytes: None,
    }
}

#[test]
fn a_workspace_is_one_locked_down_pod_with_its_grant() {
    let spec = run_spec("workspace", vec![member(0, GpuGrant::Whole { count: 2, uuids: vec![] })]);
    let o = objects(&spec, &KubeConfig::default()).unwrap();
    assert_eq!(o.run, "gpuhub-alice-train-0123abcd");
    assert!(o.jobs.is_empty() && o.service.is_none() && o.pod_group.is_none());
    let pod = &o.pods[0];
    assert_eq!(pod.metadata.name.as_deref(), Some("gpuhub-alice-train-0123abcd-0"));
    let labels = pod.metadata.labels.as_ref().unwrap();
    assert_eq!(labels[LABEL_RUN], o.run);
    assert_eq!(labels[LABEL_MEMBER], "0");
    let stored: BTreeMap<String, String> =
        serde_json::from_str(&pod.metadata.annotations.as_ref().unwrap()[ANNOTATION_LABELS]).unwrap();
    assert_eq!(stored, spec.labels, "every gpuhub label survives in the annotation");
    let ps = pod.spec.as_ref().unwrap();
    let sc = ps.security_context.as_ref().unwrap();
    assert_eq!((sc.run_as_user, sc.run_as_group, sc.run_as_non_root), (Some(1001), Some(1001), Some(true)));
    assert_eq!(sc.supplemental_groups.as_deref(), Some(&[2001][..]));
    assert_eq!(sc.seccomp_profile.as_ref().unwrap().type_, "RuntimeDefault");
    assert_eq!(ps.restart_policy.as_deref(), Some("Never"));
    assert_eq!(ps.automount_service_account_token, Some(false));
    assert_eq!(ps.subdomain, None);
    let c = &ps.containers[0];
    let csc = c.security_context.as_ref().unwrap();
    assert_eq!(csc.allow_privilege_escalation, Some(false));
    assert_eq!(csc.capabilities.as_ref().unwrap().drop.as_deref(), Some(&["ALL".to_owned()][..]));
    let limits = c.resources.as_ref().unwrap().limits.as_ref().unwrap();
    assert_eq!(limits["cpu"].0, "2500m");
    assert_eq!(limits["memory"].0, (4u64 << 30).to_string());
    assert_eq!(limits["nvidia.com/gpu"].0, "2");
    assert_eq!(c.resources.as_ref().unwrap().requests.as_ref(), Some(limits));
    let env: BTreeMap<_, _> =
        c.env.as_ref().unwrap().iter().map(|e| (e.name.as_str(), e.value.clone().unwrap_or_default())).collect();
    assert_eq!((env["RANK"].as_str(), env["WORLD_SIZE"].as_str()), ("0", "1"));
    assert_eq!(env["MASTER_ADDR"], "train-0");
    assert_eq!((env["EPOCHS"].as_str(), env["SHARE"].as_str(), env["HOME"].as_str()), ("3", "x", "/home/alice"));
    let vols = ps.volumes.as_ref().unwrap();
    assert_eq!(vols[0].host_path.as_ref().unwrap().path, "/srv/homes/alice");
    assert_eq!(vols[1].nfs.as_ref().unwrap().server, "nfs1");
    assert_eq!(c.volume_mounts.as_ref().unwrap()[1].read_only, Some(true));
    assert_eq!(c.ports.as_ref().unwrap()[0].container_port, 8888);
}

#[test]
fn a_gang_job_has_jobs_a_headless_service_and_a_podgroup_with_volcano() {
    let spec = run_spec("job", vec![member(0, GpuGrant::None), member(1, GpuGrant::None)]);
    let config = KubeConfig { volcano: true, runtime_class: Some("nvidia".into()), ..Default::default() };
    let o = objects(&spec, &config).unwrap();
    assert_eq!(o.jobs.len(), 2);
    let job = o.jobs[1].spec.as_ref().unwrap();
    assert_eq!(job.backoff_limit, Some(0));
    let tpl = job.template.spec.as_ref().unwrap();
    assert_eq!(tpl.subdomain.as_deref(), Some(o.run.as_str()));
    assert_eq!(tpl.hostname.as_deref(), Some("train-1"));
    assert_eq!(tpl.scheduler_name.as_deref(), Some("volcano"));
    assert_eq!(tpl.runtime_class_name.as_deref(), Some("nvidia"));
    let tpl_meta = job.template.metadata.as_ref().unwrap();
    assert_eq!(tpl_meta.annotations.as_ref().unwrap()[VOLCANO_GROUP], o.run);
    let env = tpl.containers[0].env.as_ref().unwrap();
    let get = |k: &str| env.iter().find(|e| e.name == k).and_then(|e| e.value.clone()).unwrap();
    assert_eq!((get("RANK").as_str(), get("WORLD_SIZE").as_str()), ("1", "2"));
    assert_eq!(get("MASTER_ADDR"), format!("train-0.{}", o.run));
    let svc = o.service.as_ref().unwrap().spec.as_ref().unwrap();
    assert_eq!(svc.cluster_ip.as_deref(), Some("None"));
    assert_eq!(svc.selector.as_ref().unwrap()[LABEL_RUN], o.run);
    assert_eq!(o.pod_group.as_ref().unwrap()["spec"]["minMember"], 2);
    // without volcano: no podgroup, the default scheduler
    let o = objects(&spec, &KubeConfig::default()).unwrap();
    assert!(o.pod_group.is_none());
    assert_eq!(o.jobs[0].spec.as_ref().unwrap().template.spec.as_ref().unwrap().scheduler_name, None);
}

#[test]
fn shares_go_through_the_configured_sharing_layer_and_root_is_refused() {
    let share = GpuGrant::Share { milli: 250, memory: Some(10 << 30), uuid: None };
    let spec = run_spec("job", vec![member(0, share)]);
    let e = objects(&spec, &KubeConfig::default()).unwrap_err();
    assert!(e.to_string().contains("sharing layer"), "{e}");
    let hami = objects(&spec, &KubeConfig { sharing: Sharing::Hami, ..Default::default() }).unwrap();
    let limits = hami.pods[0].spec.as_ref().unwrap().containers[0].resources.clone().unwrap().limits.unwrap();
    assert_eq!(
        (
            limits["nvidia.com/gpu"].0.as_str(),
            limits["nvidia.com/gpucores"].0.as_str(),
            limits["nvidia.com/gpumem"].0.as_str()
        ),
        ("1", "25", "10240")
    );
    let mps = objects(&spec, &KubeConfig { sharing: Sharing::Mps, ..Default::default() }).unwrap();
    let limits = mps.pods[0].spec.as_ref().unwrap().containers[0].resources.clone().unwrap().limits.unwrap();
    assert_eq!(limits["nvidia.com/gpu.shared"].0, "1");
    assert!(!limits.contains_key("nvidia.com/gpu"));
    let mut root = run_spec("job", vec![member(0, GpuGrant::None)]);
    root.identity.uid = 0;
    assert!(objects(&root, &KubeConfig::default()).unwrap_err().to_string().contains("root"));
}

#[test]
fn names_and_label_values_are_what_kubernetes_takes() {
    assert_eq!(dns_label("--Alice_B--", 63), "alice-b");
    assert_eq!(dns_label("", 63), "x");
    assert_eq!(run_id(&"a".repeat(80)).len(), 50);
    // a long name keeps the end that makes it unique
    let long = "gpuhub-alexandra-a-rather-long-experiment-name-for-sweeps-55b36dc4-962e7b";
    let id = run_id(long);
    assert!(id.len() <= 50 && id.ends_with("55b36dc4-962e7b") && id.starts_with("gpuhub-alexandra"), "{id}");
    assert_ne!(run_id(long), run_id(&long.replace("962e7b", "a1b2c3")));
    assert_eq!(label_value("a b/c"), "a-b-c");
    assert_eq!(label_value(&"x".repeat(70)).len(), 63);
}

/// Issue 25: homes, team folders and datasets on a PersistentVolumeClaim rather than a path on every
/// node: a mount under a claimed hub path is the claim at the rest of the path (`subPath`), the
/// longest claimed path winning; other mounts stay node paths or NFS.
#[test]
fn mounts_under_a_claimed_path_are_the_claim_at_a_sub_path() {
    let mut spec = run_spec("workspace", vec![member(0, GpuGrant::None)]);
    spec.mounts.push(Mount {
        source: "/srv/teams/vision".into(),
        target: "/team/vision".into(),
        read_only: false,
        nfs: None,
    });
    spec.mounts.push(Mount { source: "/srv".into(), target: "/all".into(), read_only: true, nfs: None });
    spec.mounts.push(Mount { source: "/srvx/other".into(), target: "/other".into(), read_only: false, nfs: None });
    let config = KubeConfig {
        claims: BTreeMap::from([
            ("/srv".to_owned(), "gpuhub-storage".to_owned()),
            ("/srv/teams".to_owned(), "teams".to_owned()),
        ]),
        ..Default::default()
    };
    let o = objects(&spec, &config).unwrap();
    let ps = o.pods[0].spec.as_ref().unwrap();
    let vols = ps.volumes.as_ref().unwrap();
    let mounts = ps.containers[0].volume_mounts.as_ref().unwrap();
    let claim = |i: usize| vols[i].persistent_volume_claim.as_ref().map(|c| (c.claim_name.as_str(), c.read_only));
    // the home, under /srv
    assert_eq!(claim(0), Some(("gpuhub-storage", Some(false))));
    assert_eq!((mounts[0].mount_path.as_str(), mounts[0].sub_path.as_deref()), ("/home/alice", Some("homes/alice")));
    assert!(vols[0].host_path.is_none());
    // NFS stays NFS
    assert_eq!(vols[1].nfs.as_ref().unwrap().server, "nfs1");
    assert_eq!(mounts[1].sub_path, None);
    // the longest claimed path wins
    assert_eq!(claim(2), Some(("teams", Some(false))));
    assert_eq!(mounts[2].sub_path.as_deref(), Some("vision"));
    // the claimed path itself: the whole claim, read-only as asked
    assert_eq!(claim(3), Some(("gpuhub-storage", Some(true))));
    assert_eq!(mounts[3].sub_path, None);
    // a path that only begins with the same letters is not under it
    assert_eq!(vols[4].host_path.as_ref().unwrap().path, "/srvx/other");
    assert!(vols[4].persistent_volume_claim.is_none());
}

/// With `home_storage_class`, the home is the owner's claim `home-<user>` of that class (no subPath,
/// even under a claimed path), the pod's fsGroup the owner's group; the other mounts are as before.
#[test]
fn a_home_is_the_owners_claim_of_the_storage_class() {
    let spec = run_spec("workspace", vec![member(0, GpuGrant::None)]);
    let config = KubeConfig {
        home_storage_class: Some("cephfs".into()),
        home_size: "50Gi".into(),
        claims: BTreeMap::from([("/srv".to_owned(), "gpuhub-storage".to_owned())]),
        ..Default::default()
    };
    let o = objects(&spec, &config).unwrap();
    let claim = o.home_claim.as_ref().expect("the home's claim");
    assert_eq!(claim.metadata.name.as_deref(), Some("home-alice"));
    let cs = claim.spec.as_ref().unwrap();
    assert_eq!(cs.storage_class_name.as_deref(), Some("cephfs"));
    assert_eq!(cs.access_modes.as_deref(), Some(&["ReadWriteMany".to_owned()][..]));
    assert_eq!(cs.resources.as_ref().unwrap().requests.as_ref().unwrap()["storage"].0, "50Gi");
    let ps = o.pods[0].spec.as_ref().unwrap();
    let vols = ps.volumes.as_ref().unwrap();
    let mounts = ps.containers[0].volume_mounts.as_ref().unwrap();
    let home = vols[0].persistent_volume_claim.as_ref().expect("the home is a claim");
    assert_eq!((home.claim_name.as_str(), mounts[0].mount_path.as_str()), ("home-alice", "/home/alice"));
    assert_eq!(mounts[0].sub_path, None);
    assert_eq!(vols[1].nfs.as_ref().unwrap().server, "nfs1", "nfs stays nfs");
    let sc = ps.security_context.as_ref().unwrap();
    assert_eq!((sc.fs_group, sc.fs_group_change_policy.as_deref()), (Some(1001), Some("OnRootMismatch")));

    // without the class, or without a home mount, no claim and no fsGroup
    let o = objects(&spec, &KubeConfig::default()).unwrap();
    assert!(o.home_claim.is_none());
    assert!(o.pods[0].spec.as_ref().unwrap().security_context.as_ref().unwrap().fs_group.is_none());
    let mut no_home = spec.clone();
    no_home.mounts.remove(0);
    assert!(objects(&no_home, &config).unwrap().home_claim.is_none());
}
