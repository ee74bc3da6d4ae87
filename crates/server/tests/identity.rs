//! Sign-in through an LDAP directory, with the recording fake of the directory: a directory user's
//! account is made at the first sign-in with the directory's UID/GID (their containers run as those),
//! admin from the admin group, queue memberships from groups named like member-listed queues; a wrong
//! password is a 401 and repeated ones are rate-limited; a local account of the same name keeps its own
//! password; passwords of directory accounts are not changed here; a user removed from the directory
//! is disabled at the next check and their token stops working.

use gpuhub_testkit as common;

use common::{ADMIN_PASSWORD, Hub};
use gpuhub_identity::{DirectoryUser, FakeDirectory};
use reqwest::{Method, StatusCode};
use serde_json::json;
use std::sync::Arc;

fn person(name: &str, uid: u32, groups: &[&str], admin: bool) -> DirectoryUser {
    DirectoryUser {
        username: name.into(),
        dn: format!("uid={name},ou=people,dc=example,dc=org"),
        uid_number: uid,
        gid_number: uid + 10_000,
        groups: groups.iter().map(|g| g.to_string()).collect(),
        is_admin: admin,
        display_name: None,
    }
}

async fn login(hub: &Hub, user: &str, password: &str) -> (StatusCode, serde_json::Value) {
    hub.call(Method::POST, "/api/v1/login", None, Some(json!({"username": user, "password": password}))).await
}

#[tokio::test]
async fn directory_users_sign_in_with_their_ids_groups_and_role() {
    let dir = Arc::new(FakeDirectory::new());
    dir.add_user(person("alice", 20_001, &["vision"], false), "alice-ldap");
    dir.add_user(person("bob", 20_002, &["gpuhub-admins"], true), "bob-ldap");
    dir.add_user(person("dave", 20_004, &[], false), "dave-ldap");
    let seams = gpuhub_server::Seams { directory: Some(dir.clone()), ..Default::default() };
    let hub = Hub::start_seams(seams, |_| {}).await;
    let admin = hub.login("admin", ADMIN_PASSWORD).await;
    // a local account named like a directory user keeps its own password
    hub.user(&admin, "dave").await;
    let (s, v) = login(&hub, "dave", "dave-ldap").await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "the directory's password for a local account: {v}");
    for (q, members) in [("vision", json!(["carol"])), ("nlp", json!(["alice"]))] {
        let (s, v) =
            hub.call(Method::POST, "/api/v1/queues", Some(&admin), Some(json!({"name": q, "members": members}))).await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
    }

    let (s, v) = login(&hub, "alice", "alice-ldap").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let alice = v["token"].as_str().unwrap().to_owned();
    let (_, me) = hub.call(Method::GET, "/api/v1/me", Some(&alice), None).await;
    assert_eq!(
        (me["uid"].as_u64(), me["gid"].as_u64(), me["source"].as_str()),
        (Some(20_001), Some(30_001), Some("ldap")),
        "{me}"
    );
    assert_eq!(me["role"], "user");
    // groups named like member-listed queues are memberships: in vision, out of nlp
    let (_, qs) = hub.call(Method::GET, "/api/v1/queues", Some(&admin), None).await;
    let members = |q: &str| qs.as_array().unwrap().iter().find(|x| x["name"] == q).unwrap()["members"].clone();
    assert_eq!(members("vision"), json!(["carol", "alice"]));
    assert_eq!(members("nlp"), json!([]));
    let (s, v) = login(&hub, "bob", "bob-ldap").await;
    assert_eq!((s, v["role"].as_str()), (StatusCode::OK, Some("admin")), "{v}");

    // her containers run as the directory's UID and GID
    let job = json!({"name": "j", "kind": "job", "image": "busybox:latest", "command": ["id"],
        "resources": {"cpus": 0.1, "memory": "64MiB", "gpus": 0}});
    hub.submit(&alice, job).await;
    hub.wait_state(&alice, "j", "running").await;
    let spec = hub.runtime.spec(&hub.run(&alice, "j").await).unwrap();
    assert_eq!(spec.identity.user(), "20001:30001");

    // her password is the directory's
    let change = json!({"current_password": "alice-ldap", "new_password": "something-new-1"});
    let (s, v) = hub.call(Method::POST, "/api/v1/me/password", Some(&alice), Some(change)).await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    let (s, _) =
        hub.call(Method::PATCH, "/api/v1/users/alice", Some(&admin), Some(json!({"password": "x-y-z-1234"}))).await;
    assert_eq!(s, StatusCode::CONFLICT);

    // wrong passwords: 401, then the limiter's 429
    let mut statuses = Vec::new();
    for _ in 0..7 {
        statuses.push(login(&hub, "alice", "wrong").await.0);
    }
    assert_eq!(statuses[0], StatusCode::UNAUTHORIZED);
    assert_eq!(statuses.last(), Some(&StatusCode::TOO_MANY_REQUESTS), "{statuses:?}");
    let (s, _) = login(&hub, "nobody", "x").await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "an unknown user is a wrong password");

    // removed from the directory: disabled at the next check, her token refused
    dir.remove_user("alice");
    let st = &hub.server.as_ref().unwrap().state;
    assert_eq!(gpuhub_server::service::identity::recheck(st).await.unwrap(), 1);
    let (s, _) = hub.call(Method::GET, "/api/v1/me", Some(&alice), None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (_, u) = hub.call(Method::GET, "/api/v1/users/alice", Some(&admin), None).await;
    assert_eq!(u["disabled"], true, "{u}");
    assert_eq!(gpuhub_server::service::identity::recheck(st).await.unwrap(), 0, "bob is still there");
}
