use super::*;
use crate::cli::CmdOutput;
use crate::fake::FakeCli;

/// The `config.json` umoci writes for gpuhub/busybox (trimmed).
fn umoci_config() -> Value {
    json!({
        "ociVersion": "1.0.0",
        "process": {"terminal": true, "user": {"uid": 0, "gid": 0}, "args": ["sh"],
                    "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TERM=xterm", "HOME=/root"],
                    "cwd": "/"},
        "root": {"path": "rootfs"},
        "hostname": "umoci-default",
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
                   {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs"}],
        "linux": {"uidMappings": [{"containerID": 0, "hostID": 1000, "size": 1}],
                  "namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}]}
    })
}

#[test]
fn image_keys_are_safe_and_distinct() {
    let k = image_key("gpuhub/busybox:latest");
    assert!(k.starts_with("gpuhub_busybox_latest-") && k.len() == "gpuhub_busybox_latest-".len() + 8, "{k}");
    assert_ne!(image_key("a/b:c"), image_key("a_b_c"));
    assert!(image_key("../../etc:x").chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)));
    assert!(!image_key("../x").starts_with('.'));
    assert_eq!(daemon_reference("busybox"), "busybox:latest");
    assert_eq!(daemon_reference("registry:5000/busybox"), "registry:5000/busybox:latest");
    assert_eq!(daemon_reference("busybox:1.36"), "busybox:1.36");
}

#[test]
fn image_config_is_shaped_like_the_dev_scripts() {
    let c = shape_image_config(umoci_config());
    assert_eq!(c["process"]["terminal"], json!(false));
    assert_eq!(c["root"]["readonly"], json!(true));
    assert!(c.get("hostname").is_none());
    assert!(c["linux"].get("uidMappings").is_none());
    let ns: Vec<&str> =
        c["linux"]["namespaces"].as_array().unwrap().iter().map(|n| n["type"].as_str().unwrap()).collect();
    assert_eq!(ns, ["pid", "ipc", "mount"]);
    let tmp: Vec<&Value> = c["mounts"].as_array().unwrap().iter().filter(|m| m["destination"] == "/tmp").collect();
    assert_eq!(tmp.len(), 1);
    assert_eq!(tmp[0]["options"], json!(["nosuid", "nodev", "mode=1777", "size=1g"]));
}

#[test]
fn run_config_env_mounts_and_mountpoints() {
    let dir = tempfile::tempdir().unwrap();
    let rootfs = dir.path().join("rootfs");
    for d in ["home", "etc", "opt/app"] {
        std::fs::create_dir_all(rootfs.join(d)).unwrap();
    }
    std::fs::write(rootfs.join("etc/hosts"), "").unwrap();
    let run = RunBundle {
        env: BTreeMap::from([
            ("HOME".to_owned(), "/home/alice".to_owned()),
            ("FOO".to_owned(), "1".to_owned()),
            ("CUDA_VISIBLE_DEVICES".to_owned(), String::new()),
        ]),
        working_dir: Some("/home/alice".into()),
        mounts: vec![
            Mount { source: "/srv/homes/alice".into(), target: "/home/alice".into(), read_only: false, nfs: None },
            Mount {
                source: "/srv/lib.so".into(),
                target: "/usr/local/lib/gpuhub/libvgpu.so".into(),
                read_only: true,
                nfs: None,
            },
            Mount { source: "/srv/data".into(), target: "/opt/app".into(), read_only: true, nfs: None },
        ],
        init: Some("/usr/bin/tini-static".into()),
        uid: 10001,
        gid: 10001,
        groups: Vec::new(),
    };
    let (c, make) = run_config(shape_image_config(umoci_config()), &rootfs, &run).unwrap();
    assert!(c["process"]["user"].get("additionalGids").is_none(), "no team: no supplementary groups");
    let teamed = RunBundle { groups: vec![60001], ..run.clone() };
    let (t, _) = run_config(shape_image_config(umoci_config()), &rootfs, &teamed).unwrap();
    assert_eq!(t["process"]["user"]["additionalGids"], json!([60001]));
    let env: Vec<&str> = c["process"]["env"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(
        env,
        [
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "TERM=xterm",
            "FOO=1",
            "HOME=/home/alice"
        ]
    );
    assert_eq!(c["process"]["cwd"], json!("/home/alice"));
    assert_eq!(c["root"], json!({"path": "rootfs", "readonly": true}));
    let mounts = c["mounts"].as_array().unwrap();
    let dest: Vec<&str> = mounts.iter().map(|m| m["destination"].as_str().unwrap()).collect();
    // /home is empty in the image: a tmpfs there holds the home's mountpoint
    assert_eq!(
        dest,
        [
            "/proc",
            "/tmp",
            "/dev/gpuhub-init",
            "/etc/hosts",
            "/home",
            "/home/alice",
            "/usr/local/lib/gpuhub/libvgpu.so",
            "/opt/app"
        ]
    );
    assert_eq!(mounts[2]["source"], json!("/usr/bin/tini-static"));
    assert_eq!(
        mounts[5],
        json!({"destination": "/home/alice", "type": "bind", "source": "/srv/homes/alice", "options": ["rbind", "rw", "nosuid", "nodev"]})
    );
    assert_eq!(mounts[7]["options"], json!(["rbind", "ro", "nosuid", "nodev"]));
    // the library's directory is not in the image: its mountpoint is made there (a
    // directory, since the source cannot be looked at here)
    assert_eq!(make, [(rootfs.join("usr/local/lib/gpuhub/libvgpu.so"), true)]);
    let bad = RunBundle {
        mounts: vec![Mount { source: "/x".into(), target: "rel".into(), read_only: true, nfs: None }],
        ..run.clone()
    };
    assert!(matches!(run_config(umoci_config(), &rootfs, &bad), Err(EngineError::Rejected(_))));
    let bad = RunBundle { working_dir: Some("home".into()), ..run };
    assert!(matches!(run_config(umoci_config(), &rootfs, &bad), Err(EngineError::Rejected(_))));
}

#[tokio::test]
async fn images_are_made_once_with_skopeo_and_umoci() {
    let dir = tempfile::tempdir().unwrap();
    let bundles = Bundles::new(dir.path().to_path_buf());
    let cli = FakeCli::new();
    // umoci's work is done by the test's answer
    let key = image_key("gpuhub/busybox:latest");
    let unpacked = dir.path().join("images").join(format!(".{key}.{}.bundle", std::process::id()));
    let layout = dir.path().join("images").join(format!(".{key}.{}.layout", std::process::id()));
    cli.on(&["skopeo", "copy"], CmdOutput::ok(""));
    cli.on_call(&["umoci", "unpack"], |cmd| {
        let target = std::path::PathBuf::from(cmd.args.last().unwrap());
        std::fs::create_dir_all(target.join("rootfs/bin")).unwrap();
        std::fs::write(target.join("config.json"), umoci_config().to_string()).unwrap();
        CmdOutput::ok("")
    });
    bundles.ensure_image(&cli, "gpuhub/busybox:latest").await.unwrap();
    assert!(bundles.image_ready("gpuhub/busybox:latest"));
    let made = bundles.image_dir("gpuhub/busybox:latest");
    for p in ["rootfs/etc/hosts", "rootfs/etc/resolv.conf", "rootfs/tmp", "rootfs/home"] {
        assert!(made.join(p).exists(), "{p}");
    }
    assert_eq!(bundles.image_config("gpuhub/busybox:latest").unwrap()["root"]["readonly"], json!(true));
    let argv: Vec<Vec<String>> = cli.calls().iter().map(|c| c.argv().iter().map(|s| s.to_string()).collect()).collect();
    assert_eq!(
        argv,
        [
            vec![
                "skopeo".to_owned(),
                "copy".into(),
                "--quiet".into(),
                "docker-daemon:gpuhub/busybox:latest".into(),
                format!("oci:{}:latest", layout.display()),
            ],
            vec![
                "umoci".to_owned(),
                "unpack".into(),
                "--rootless".into(),
                "--image".into(),
                format!("{}:latest", layout.display()),
                unpacked.display().to_string(),
            ],
        ]
    );
    // ready: nothing is run again
    bundles.ensure_image(&cli, "gpuhub/busybox:latest").await.unwrap();
    assert_eq!(cli.calls().len(), 2);
    // an image the daemon lacks
    cli.clear_rules();
    cli.on(&["skopeo"], CmdOutput::fail(1, "time=x level=fatal msg=\"initializing source docker-daemon:nope:latest: loading image from docker engine: Error response from daemon: No such image: nope:latest\""));
    assert!(matches!(bundles.ensure_image(&cli, "nope").await, Err(EngineError::ImageNotFound(i)) if i == "nope"));
}

#[test]
fn run_bundles_are_written_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let bundles = Bundles::new(dir.path().to_path_buf());
    let img = bundles.image_dir("img");
    std::fs::create_dir_all(img.join("rootfs/home")).unwrap();
    std::fs::write(img.join("config.json"), shape_image_config(umoci_config()).to_string()).unwrap();
    let me = (rustix::process::getuid().as_raw(), rustix::process::getgid().as_raw());
    let run = RunBundle { uid: me.0, gid: me.1, ..Default::default() };
    let path = bundles.write_run("gpuhub-x-w1.abc", "img", &run).unwrap();
    assert_eq!(std::fs::read_link(path.join("rootfs")).unwrap(), img.join("rootfs"));
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    assert!(bundles.write_run("gpuhub-x-w1.abc", "img", &run).is_err(), "exists already");
    assert!(bundles.remove_run("gpuhub-x-w1.abc").unwrap());
    assert!(!bundles.remove_run("gpuhub-x-w1.abc").unwrap());
    assert!(bundles.write_run("other", "missing-image", &run).is_err());
}

/// Issue 21: an image made with `docker import` or `FROM scratch` may lack `/proc` and the other mount
/// points, which crun cannot make as the job's user; the bundle gets them, and nothing outside its root.
#[test]
fn an_image_without_mount_points_gets_them() {
    let dir = tempfile::tempdir().unwrap();
    let rootfs = dir.path().join("rootfs");
    std::fs::create_dir_all(rootfs.join("bin")).unwrap();
    std::fs::write(rootfs.join("bin/sh"), b"").unwrap();
    let mut config = umoci_config();
    config["mounts"] = json!([
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
        {"destination": "/dev/pts", "type": "devpts", "source": "devpts"},
        {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup"},
        {"destination": "/bin/sh", "type": "bind", "source": "/bin/sh"},
        {"destination": "/../escape", "type": "tmpfs", "source": "tmpfs"},
        {"destination": "relative", "type": "tmpfs", "source": "tmpfs"}
    ]);
    make_mount_targets(&rootfs, &config).unwrap();
    for d in ["proc", "dev", "dev/pts", "sys", "sys/fs/cgroup"] {
        assert!(rootfs.join(d).is_dir(), "{d}");
    }
    assert!(rootfs.join("bin/sh").is_file(), "what the image has is left as it is");
    assert!(!dir.path().join("escape").exists() && !rootfs.join("relative").exists());
    make_mount_targets(&rootfs, &config).unwrap();
}
