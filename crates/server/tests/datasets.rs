//! Datasets through the API, on the fake engine: registered by admins only (a directory of this host,
//! a valid name, the errors naming the field), listed to everyone, mounted read-only at
//! `/datasets/<name>` in the run the engine is given, refused by an unknown or repeated name (naming
//! the datasets there are), and kept by submitted work when the registration is removed.

mod common;

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
