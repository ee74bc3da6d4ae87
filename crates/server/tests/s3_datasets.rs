//! S3 datasets through the API against a real S3 server (moto's, spawned on 127.0.0.1) with the real
//! rclone mount on this host and the fake engine: the secret key is stored sealed (it opens with the
//! hub's key and only for its dataset), kept when a registration is changed with `"<set>"`, refused as
//! `"<set>"` where none is stored for that endpoint and key id; the run gets the host mount read-only
//! (or read-write where registered so); /metrics has each mount's state; work naming an unmounted
//! dataset is a 503 naming it; a restart mounts it again and removing it unmounts it. Needs rclone,
//! FUSE and `moto_server` (`GPUHUB_SKIP_S3_TESTS=1` skips it).

use gpuhub_testkit as common;

use common::{ADMIN_PASSWORD, Hub};
use reqwest::{Method, StatusCode};
use serde_json::json;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const SECRET: &str = "srv-s3cr3t-Hq3Lr8";

struct Moto(Child, String);

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// moto's S3 server with the bucket `data` holding `train/a.txt`; `None` when skipped.
fn moto() -> Option<Moto> {
    for program in ["moto_server", "rclone", "fusermount3"] {
        let found = Command::new("sh").args(["-c", &format!("command -v {program}")]).output();
        if !found.is_ok_and(|o| o.status.success()) {
            if std::env::var("GPUHUB_SKIP_S3_TESTS").is_ok_and(|v| v == "1") {
                eprintln!("skipped: {program} is not installed (GPUHUB_SKIP_S3_TESTS=1)");
                return None;
            }
            panic!(
                "{program} is not installed: scripts/setup-debian.sh installs moto[server], rclone and fuse3; \
                 or set GPUHUB_SKIP_S3_TESTS=1 to skip the S3 dataset tests"
            );
        }
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = Command::new("moto_server")
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let moto = Moto(child, format!("http://127.0.0.1:{port}"));
    for _ in 0..300 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let rclone = |args: &[&str], stdin: &str| {
        let mut c = Command::new("rclone");
        c.env_clear().env("PATH", std::env::var("PATH").unwrap_or_default());
        for (k, v) in [("TYPE", "s3"), ("PROVIDER", "Other"), ("ENDPOINT", moto.1.as_str()), ("ENV_AUTH", "false")] {
            c.env(format!("RCLONE_CONFIG_M_{k}"), v);
        }
        c.env("RCLONE_CONFIG_M_ACCESS_KEY_ID", "AK").env("RCLONE_CONFIG_M_SECRET_ACCESS_KEY", "SK");
        let mut child = c.args(args).stdin(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), stdin.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "rclone {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    rclone(&["mkdir", "m:data"], "");
    rclone(&["rcat", "m:data/train/a.txt"], "abc\n");
    Some(moto)
}

fn mounted(path: &std::path::Path) -> bool {
    let want = path.display().to_string();
    std::fs::read_to_string("/proc/self/mountinfo").unwrap().lines().any(|l| l.split(' ').nth(4) == Some(&want))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_secrets_are_sealed_and_mounts_kept() {
    let Some(moto) = moto() else { return };
    let mut hub = Hub::start().await;
    let admin = hub.login("admin", ADMIN_PASSWORD).await;
    let alice = hub.user(&admin, "alice").await;
    let s3 =
        |secret: &str| json!({"url": "s3://data/train", "endpoint": moto.1, "access_key": "AK", "secret_key": secret});

    let body = json!({"name": "train", "s3": s3(SECRET), "description": "first"});
    let (s, v) = hub.call(Method::POST, "/api/v1/datasets", Some(&admin), Some(body)).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!((v["s3"]["secret_key"].as_str(), v["status"].as_str()), (Some("<set>"), Some("mounted")), "{v}");
    let state = &hub.server.as_ref().unwrap().state;
    let sealed = |state: &gpuhub_server::state::AppState, name: &'static str| {
        let state = state.clone();
        async move {
            let d = state.store.get_dataset(name).await.unwrap();
            d.s3.unwrap().secret_key.unwrap().expose().to_owned()
        }
    };
    let stored = sealed(state, "train").await;
    assert!(stored.starts_with("v1:") && !stored.contains(SECRET), "{stored}");
    assert_eq!(state.secrets.open("dataset:train", &stored).unwrap(), SECRET);
    assert!(state.secrets.open("dataset:other", &stored).is_err(), "bound to its dataset");

    // "<set>" keeps the stored key; where none is stored it is refused
    let body = json!({"name": "train", "s3": s3("<set>"), "description": "second"});
    let (s, v) = hub.call(Method::POST, "/api/v1/datasets", Some(&admin), Some(body)).await;
    assert_eq!((s, v["description"].as_str()), (StatusCode::CREATED, Some("second")), "{v}");
    assert_eq!(state.secrets.open("dataset:train", &sealed(state, "train").await).unwrap(), SECRET);
    let body = json!({"name": "fresh", "s3": s3("<set>")});
    let (s, v) = hub.call(Method::POST, "/api/v1/datasets", Some(&admin), Some(body)).await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("s3.secret_key")), "{v}");
    // nor is the stored key sent to another server
    let elsewhere =
        json!({"url": "s3://data/train", "endpoint": "http://127.0.0.1:9", "access_key": "AK", "secret_key": "<set>"});
    let (s, v) =
        hub.call(Method::POST, "/api/v1/datasets", Some(&admin), Some(json!({"name": "train", "s3": elsewhere}))).await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("s3.secret_key")), "{v}");

    // a read-write registration of the same bucket
    let body = json!({"name": "scratch", "s3": s3(SECRET), "read_only": false});
    let (s, v) = hub.call(Method::POST, "/api/v1/datasets", Some(&admin), Some(body)).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");

    // the run mounts the host's mount point
    let job = |name: &str, datasets: serde_json::Value| {
        json!({"name": name, "kind": "job", "image": "busybox:latest", "command": ["true"],
            "resources": {"cpus": 0.1, "memory": "64MiB", "gpus": 0}, "datasets": datasets})
    };
    let w = hub.submit(&alice, job("reader", json!(["train", "scratch"]))).await;
    assert_eq!(w["datasets"][0]["s3"], "s3://data/train", "{w}");
    hub.wait_state(&alice, "reader", "running").await;
    let spec = hub.runtime.spec(&hub.run(&alice, "reader").await).unwrap();
    let data = std::fs::canonicalize(hub.dir.path().join("data")).unwrap();
    for (target, dir, read_only) in [("/datasets/train", "train", true), ("/datasets/scratch", "scratch", false)] {
        let m = spec.mounts.iter().find(|m| m.target == target).expect("mounted");
        let host = data.join("datasets").join(dir);
        assert_eq!((m.source.as_str(), m.read_only), (host.to_str().unwrap(), read_only));
        assert!(mounted(&host), "{} is not mounted", host.display());
        assert_eq!(std::fs::read_to_string(host.join("a.txt")).unwrap(), "abc\n");
    }

    // /metrics says each mount is up
    let metrics = hub.http.get(format!("{}/metrics", hub.url)).send().await.unwrap().text().await.unwrap();
    for line in [
        "gpuhub_dataset_mount_up{dataset=\"train\"} 1",
        "gpuhub_dataset_mount_up{dataset=\"scratch\"} 1",
        "gpuhub_dataset_mount_restarts_total{dataset=\"train\"} 0",
    ] {
        assert!(metrics.lines().any(|l| l == line), "no {line:?} in /metrics:\n{metrics}");
    }

    // not mounted: new work is told so, naming the dataset
    state.s3.unmount("train").await;
    let (s, v) = hub.call(Method::POST, "/api/v1/workloads", Some(&alice), Some(job("later", json!(["train"])))).await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::SERVICE_UNAVAILABLE, Some("datasets")), "{v}");
    assert!(v["detail"].as_str().unwrap().contains("dataset train is not mounted"), "{v}");
    let (_, v) = hub.call(Method::GET, "/api/v1/datasets", Some(&alice), None).await;
    assert_eq!(v.as_array().unwrap().iter().find(|d| d["name"] == "train").unwrap()["status"], "down: not mounted");

    // a restart mounts every S3 dataset again; removal unmounts
    hub.restart().await;
    let train = data.join("datasets/train");
    for _ in 0..300 {
        if mounted(&train) && hub.server.as_ref().unwrap().state.s3.status("train").as_deref() == Some("mounted") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(mounted(&train), "not mounted again after a restart");
    let (s, _) = hub.call(Method::DELETE, "/api/v1/datasets/train", Some(&admin), None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    assert!(!mounted(&train), "still mounted after its removal");
    hub.server.take().unwrap().shutdown().await;
    assert!(!mounted(&data.join("datasets/scratch")), "still mounted after shutdown");
}
