//! Home quotas through the API, with the recording fake of the homes backend: every start makes the
//! owner's home with the quota in force (the configured default or the user's own); `/me` and the
//! admin's user list show usage and quota; admins set, lift and reset a user's quota, a quota below
//! usage is a 409 and a malformed one a 422 on `home_quota`, both changing nothing; a user cannot change
//! quotas; deleting a user releases the home; a quota the configured backend cannot enforce stops the
//! server at start.

use gpuhub_testkit as common;

use common::Hub;
use gpuhub_homes::fake::{FakeHomes, HomeCall};
use reqwest::{Method, StatusCode};
use serde_json::json;
use std::sync::Arc;

const GIB: u64 = 1 << 30;

#[tokio::test]
async fn quotas_are_applied_shown_and_changed_by_admins() {
    let homes_dir = tempfile::tempdir().unwrap();
    let homes = Arc::new(FakeHomes::new(homes_dir.path()));
    let seams = gpuhub_server::Seams { homes: Some(homes.clone()), ..Default::default() };
    let hub = Hub::start_seams(seams, |c| c.home_quota = Some(gpuhub_core::Bytes(GIB))).await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let bob = hub.user(&admin, "bob").await;

    let (_, me) = hub.call(Method::GET, "/api/v1/me", Some(&alice), None).await;
    assert!(me.get("home").is_none(), "no home before the first start: {me}");
    let job = json!({"name": "j", "kind": "job", "image": "busybox:latest", "command": ["sleep", "1000"],
        "resources": {"cpus": 0.1, "memory": "64MiB", "gpus": 0}});
    hub.submit(&alice, job).await;
    hub.wait_state(&alice, "j", "running").await;
    let uid = me["uid"].as_u64().unwrap() as u32;
    assert_eq!(homes.calls(), vec![HomeCall::Ensure("alice".into(), uid, Some(GIB), false)]);

    homes.set_used("alice", 600 << 20);
    let (s, me) = hub.call(Method::GET, "/api/v1/me", Some(&alice), None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(me["home"], json!({"used_bytes": 600 << 20, "quota_bytes": GIB}), "{me}");
    let (_, users) = hub.call(Method::GET, "/api/v1/users", Some(&admin), None).await;
    let a = users.as_array().unwrap().iter().find(|u| u["username"] == "alice").unwrap();
    assert_eq!(a["home"]["quota_bytes"], GIB, "{users}");

    let patch = |q: &str| json!({"home_quota": q});
    let (s, v) = hub.call(Method::PATCH, "/api/v1/users/alice", Some(&alice), Some(patch("100GiB"))).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "a user raising their own quota: {v}");
    for (q, status) in [("500MiB", StatusCode::CONFLICT), ("lots", StatusCode::UNPROCESSABLE_ENTITY)] {
        let (s, v) = hub.call(Method::PATCH, "/api/v1/users/alice", Some(&admin), Some(patch(q))).await;
        assert_eq!((s, v["field"].as_str()), (status, Some("home_quota")), "{q}: {v}");
    }
    let (s, v) = hub.call(Method::PATCH, "/api/v1/users/alice", Some(&admin), Some(patch("1MiB"))).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "below the least quota: {v}");
    assert!(v["detail"].as_str().unwrap().contains("16MiB"), "{v}");
    let (_, me) = hub.call(Method::GET, "/api/v1/me", Some(&alice), None).await;
    assert_eq!(me["home"]["quota_bytes"], GIB, "a refused change changed the quota: {me}");

    // her own quota, applied at once (her job runs: the backend is told so)
    let (s, v) = hub.call(Method::PATCH, "/api/v1/users/alice", Some(&admin), Some(patch("2GiB"))).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!((v["home_quota"].as_str(), v["home"]["quota_bytes"].as_u64()), (Some("2GiB"), Some(2 * GIB)), "{v}");
    assert_eq!(homes.calls().last(), Some(&HomeCall::Ensure("alice".into(), uid, Some(2 * GIB), true)));
    let (_, v) = hub.call(Method::PATCH, "/api/v1/users/alice", Some(&admin), Some(patch("none"))).await;
    assert_eq!((v["home_quota"].as_str(), v["home"].get("quota_bytes")), (Some("none"), None), "{v}");
    let (_, v) = hub.call(Method::PATCH, "/api/v1/users/alice", Some(&admin), Some(patch("default"))).await;
    assert_eq!((v.get("home_quota"), v["home"]["quota_bytes"].as_u64()), (None, Some(GIB)), "{v}");

    // bob never started anything: his quota is stored, and his home made at his first start with it
    let (s, v) = hub.call(Method::PATCH, "/api/v1/users/bob", Some(&admin), Some(patch("3GiB"))).await;
    assert_eq!((s, v["home_quota"].as_str()), (StatusCode::OK, Some("3GiB")), "{v}");
    assert!(!homes.calls().iter().any(|c| matches!(c, HomeCall::Ensure(u, ..) if u == "bob")));
    let job = json!({"name": "b", "kind": "job", "image": "busybox:latest", "command": ["true"],
        "resources": {"cpus": 0.1, "memory": "64MiB", "gpus": 0}});
    hub.submit(&bob, job).await;
    hub.wait_state(&bob, "b", "running").await;
    assert!(
        homes.calls().iter().any(|c| matches!(c, HomeCall::Ensure(u, _, Some(q), _) if u == "bob" && *q == 3 * GIB))
    );

    let (s, _) = hub.call(Method::DELETE, "/api/v1/users/alice?home=delete", Some(&admin), None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    assert_eq!(homes.calls().last(), Some(&HomeCall::Release("alice".into())));
    assert!(!homes_dir.path().join("alice").exists(), "the deleted user's home is gone");
}

#[tokio::test]
async fn a_quota_nothing_can_enforce_stops_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = common::config(dir.path());
    cfg.home_quota = Some(gpuhub_core::Bytes(GIB));
    cfg.home_backend = gpuhub_server::config::homes::HomeBackend::Dir;
    let e = gpuhub_server::start(cfg, common::fake()).await.unwrap_err().to_string();
    assert!(e.contains("home_quota") && e.contains("dir"), "{e}");
    let e = gpuhub_server::config::Config::load(None, [("GPUHUB_HOME_QUOTA".to_owned(), "1MiB".to_owned())])
        .unwrap_err()
        .to_string();
    assert!(e.contains("home_quota") && e.contains("16MiB"), "{e}");
}
