//! Datasets through the API, on the fake engine: registered by admins only (a directory of this host,
//! a valid name, the errors naming the field), listed to everyone, mounted read-only at
//! `/datasets/<name>` in the run the engine is given, refused by an unknown or repeated name (naming
//! the datasets there are), and kept by submitted work when the registration is removed.

use gpuhub_testkit as common;

use common::{ADMIN_PASSWORD, Hub};
use reqwest::{Method, StatusCode};
use serde_json::json;

#[tokio::test]
async fn datasets_are_registered_by_admins_and_mounted_read_only() {
    let hub = Hub::start().await;
    let admin = hub.login("admin", ADMIN_PASSWORD).await;
    let alice = hub.user(&admin, "alice").await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().display().to_string();
    let body = json!({"name": "corpus", "path": path, "description": "words"});

    let (s, v) = hub.call(Method::POST, "/api/v1/datasets", Some(&alice), Some(body.clone())).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    for (bad, field) in [
        (json!({"name": "Corpus", "path": path}), None),
        (json!({"name": "c", "path": "relative/dir"}), Some("path")),
        (json!({"name": "c", "path": "/no/such/dir/here"}), Some("path")),
        (json!({"name": "c", "path": path, "colour": 1}), None),
    ] {
        let (s, v) = hub.call(Method::POST, "/api/v1/datasets", Some(&admin), Some(bad.clone())).await;
        assert!(s == StatusCode::UNPROCESSABLE_ENTITY || s == StatusCode::BAD_REQUEST, "{bad}: {s} {v}");
        if let Some(f) = field {
            assert_eq!(v["field"], f, "{bad}: {v}");
        }
    }
    let (s, v) = hub.call(Method::POST, "/api/v1/datasets", Some(&admin), Some(body)).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let (s, v) = hub.call(Method::GET, "/api/v1/datasets", Some(&alice), None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v[0]["name"], "corpus", "{v}");

    // unknown and repeated names are refused, naming the field and the datasets there are
    let ask = |name: &str, datasets: serde_json::Value| {
        json!({"name": name, "kind": "job", "image": "busybox:latest", "command": ["true"],
            "resources": {"cpus": 0.1, "memory": "64MiB", "gpus": 0}, "datasets": datasets})
    };
    let (s, v) = hub.call(Method::POST, "/api/v1/workloads", Some(&alice), Some(ask("a", json!(["nope"])))).await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("datasets")), "{v}");
    assert!(v["detail"].as_str().unwrap().contains("(datasets: corpus)"), "{v}");
    let (s, v) =
        hub.call(Method::POST, "/api/v1/workloads", Some(&alice), Some(ask("b", json!(["corpus", "corpus"])))).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");

    // mounted read-only where the workload looks for it
    let w = hub.submit(&alice, ask("reader", json!(["corpus"]))).await;
    assert_eq!(w["datasets"], json!([{"name": "corpus", "path": path}]));
    hub.wait_state(&alice, "reader", "running").await;
    let run = hub.run(&alice, "reader").await;
    let spec = hub.runtime.spec(&run).unwrap();
    let m = spec.mounts.iter().find(|m| m.target == "/datasets/corpus").expect("the dataset is mounted");
    assert_eq!((m.source.as_str(), m.read_only), (path.as_str(), true));

    // removed: new work is refused, submitted work keeps it
    let (s, _) = hub.call(Method::DELETE, "/api/v1/datasets/corpus", Some(&alice), None).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, _) = hub.call(Method::DELETE, "/api/v1/datasets/corpus", Some(&admin), None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, v) = hub.call(Method::POST, "/api/v1/workloads", Some(&alice), Some(ask("c", json!(["corpus"])))).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("(datasets: none)"), "{v}");
    let v = hub.get(&alice, "reader").await;
    assert_eq!(v["datasets"][0]["name"], "corpus", "{v}");
}

/// An NFS export registered as a dataset: the engine is told to mount it itself (server and export,
/// read-only); malformed exports are refused naming `nfs`; an engine that cannot mount NFS refuses it.
#[tokio::test]
async fn nfs_exports_are_mounted_by_the_engine() {
    let hub = Hub::start().await;
    let admin = hub.login("admin", ADMIN_PASSWORD).await;
    let alice = hub.user(&admin, "alice").await;
    for bad in [
        json!({"name": "r", "nfs": "10.0.0.5"}),
        json!({"name": "r", "nfs": "a,o=rw:/x"}),
        json!({"name": "r", "nfs": "h:/x", "path": "/tmp"}),
    ] {
        let (s, v) = hub.call(Method::POST, "/api/v1/datasets", Some(&admin), Some(bad.clone())).await;
        assert_eq!((s, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("nfs")), "{bad}: {v}");
    }
    let body = json!({"name": "remote", "nfs": "10.0.0.5:/exports/remote", "description": "on the file server"});
    let (s, v) = hub.call(Method::POST, "/api/v1/datasets", Some(&admin), Some(body)).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let (_, v) = hub.call(Method::GET, "/api/v1/datasets", Some(&alice), None).await;
    assert_eq!((v[0]["nfs"].as_str(), v[0]["path"].as_str()), (Some("10.0.0.5:/exports/remote"), Some("")), "{v}");
    let job = json!({"name": "n", "kind": "job", "image": "busybox:latest", "command": ["true"],
        "resources": {"cpus": 0.1, "memory": "64MiB", "gpus": 0}, "datasets": ["remote"]});
    let w = hub.submit(&alice, job).await;
    assert_eq!(w["datasets"], json!([{"name": "remote", "path": "/exports/remote", "nfs": "10.0.0.5"}]));
    hub.wait_state(&alice, "n", "running").await;
    let spec = hub.runtime.spec(&hub.run(&alice, "n").await).unwrap();
    let m = spec.mounts.iter().find(|m| m.target == "/datasets/remote").expect("mounted");
    assert_eq!((m.source.as_str(), m.nfs.as_deref(), m.read_only), ("/exports/remote", Some("10.0.0.5"), true));
}

/// S3 datasets: malformed ones are refused with a 422 naming the field (the bucket URL, a missing
/// endpoint, one key without the other, two sources at once, a read-write directory), as is an S3
/// server that does not answer (nothing listens there), and a Slurm hub refuses them all (its nodes
/// would each need the mount); the secret key appears in no refusal.
#[tokio::test]
async fn s3_datasets_are_checked_naming_the_field() {
    let hub = Hub::start().await;
    let admin = hub.login("admin", ADMIN_PASSWORD).await;
    let alice = hub.user(&admin, "alice").await;
    let secret = "never-shown-8c1f";
    let s3 = |url: &str, endpoint: &str| json!({"url": url, "endpoint": endpoint, "access_key": "AKID", "secret_key": secret});
    let (s, v) = hub
        .call(
            Method::POST,
            "/api/v1/datasets",
            Some(&alice),
            Some(json!({"name": "b", "s3": s3("s3://bkt", "http://h")})),
        )
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    // a port nothing listens on
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let dead = format!("http://{dead}");
    for (bad, field, why) in [
        (json!({"name": "b", "s3": s3("http://bkt/x", "http://h")}), "s3.url", "s3://bucket/prefix"),
        (json!({"name": "b", "s3": s3("s3://Bad_Bucket", "http://h")}), "s3.url", "bucket name"),
        (json!({"name": "b", "s3": s3("s3://bkt/../etc", "http://h")}), "s3.url", "'..'"),
        (json!({"name": "b", "s3": {"url": "s3://bkt"}}), "s3.endpoint", "missing"),
        (json!({"name": "b", "s3": s3("s3://bkt", "ftp://h")}), "s3.endpoint", "http://"),
        (
            json!({"name": "b", "s3": {"url": "s3://bkt", "endpoint": "http://h", "access_key": "A"}}),
            "s3.secret_key",
            "missing",
        ),
        (json!({"name": "b", "path": "/tmp", "s3": s3("s3://bkt", "http://h")}), "s3", "one of path, nfs and s3"),
        (json!({"name": "b", "path": "/tmp", "read_only": false}), "read_only", "only object-storage"),
        (json!({"name": "b", "s3": s3("s3://bkt", &dead)}), "s3", "cannot be listed"),
    ] {
        let (s, v) = hub.call(Method::POST, "/api/v1/datasets", Some(&admin), Some(bad.clone())).await;
        assert_eq!((s, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some(field)), "{bad}: {v}");
        let detail = v["detail"].as_str().unwrap();
        assert!(detail.contains(why) && !detail.contains(secret), "{bad}: {v}");
    }
    let (s, v) = hub
        .call(
            Method::POST,
            "/api/v1/datasets",
            Some(&admin),
            Some(json!({"name": "b", "s3": {"url": "s3://bkt", "endpoint": "http://h", "colour": 1}})),
        )
        .await;
    assert!(s == StatusCode::UNPROCESSABLE_ENTITY || s == StatusCode::BAD_REQUEST, "{s} {v}");
    let (_, v) = hub.call(Method::GET, "/api/v1/datasets", Some(&admin), None).await;
    assert_eq!(v, json!([]), "nothing was registered");

    let slurm = Hub::start_with(|c| c.engine = gpuhub_server::config::EngineKind::Slurm).await;
    let admin = slurm.login("admin", ADMIN_PASSWORD).await;
    let body = json!({"name": "b", "s3": s3("s3://bkt", "http://h")});
    let (s, v) = slurm.call(Method::POST, "/api/v1/datasets", Some(&admin), Some(body)).await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("s3")), "{v}");
    assert!(v["detail"].as_str().unwrap().contains("mounts no object storage itself"), "{v}");
}
