//! Security review N15: gpuhub's UIDs must not be the host's. The server reads the host's `passwd`,
//! `group` and `login.defs` from a directory of the test's (the `etc` seam), never the real `/etc`.

use gpuhub_testkit as common;

use common::{Hub, config, fake};
use gpuhub_server::Seams;
use reqwest::{Method, StatusCode};
use serde_json::json;
use std::path::Path;

/// A Debian 12 host's account files, with `extra` lines in `passwd`.
fn etc(extra_passwd: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("login.defs"), "UID_MIN 1000\nUID_MAX 60000\nGID_MIN 1000\nGID_MAX 60000\n").unwrap();
    let passwd = format!(
        "root:x:0:0:root:/root:/bin/bash\nana:x:1000:1000::/home/ana:/bin/bash\n\
         nobody:x:65534:65534::/nonexistent:/usr/sbin/nologin\n{extra_passwd}"
    );
    std::fs::write(d.path().join("passwd"), passwd).unwrap();
    std::fs::write(d.path().join("group"), "root:x:0:\nana:x:1000:\nnogroup:x:65534:\n").unwrap();
    d
}

fn seams(etc: &Path) -> Seams {
    Seams { etc: Some(etc.to_owned()), ..Default::default() }
}

/// What `start_with` says for `range` on the host `etc` (the server must not start).
async fn refusal(etc: &Path, range: &str) -> (String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.uid_range = range.parse().unwrap();
    match gpuhub_server::start_with(cfg, fake(), seams(etc)).await {
        Ok(_) => panic!("uid_range {range} was accepted"),
        Err(e) => (e.to_string(), dir),
    }
}

/// By default the first account (the admin) and the next get UIDs above the host's `UID_MAX`; before,
/// they got 10000 and 10001, which useradd hands to the host's own accounts.
#[tokio::test]
async fn n15_accounts_get_uids_above_the_hosts_uid_max() {
    let etc = etc("");
    let hub = Hub::start_seams(seams(etc.path()), |_| {}).await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let (_, me) = hub.call(Method::GET, "/api/v1/me", Some(&alice), None).await;
    let uid = me["uid"].as_u64().unwrap();
    assert!(uid > 60_000 && uid != 65_534, "alice's uid {uid} is at or below UID_MAX 60000: {me}");
    assert_eq!(me["gid"], uid, "{me}");
}

/// A range at or below `UID_MAX`, or holding a host account, stops the server naming the range and the
/// account; a host account made after the start is passed over by the next new account.
#[tokio::test]
async fn n15_a_range_overlapping_the_hosts_accounts_stops_the_server() {
    let etc = etc("backup:x:80005:80005::/var/backups:/usr/sbin/nologin\n");
    let (e, dir) = refusal(etc.path(), "10000-99999").await;
    assert!(e.contains("uid_range 10000-99999 starts at or below the host's UID_MAX 60000"), "{e}");
    assert!(!dir.path().join("data").exists(), "the server made its data directory before refusing");
    let (e, _) = refusal(etc.path(), "80000-80100").await;
    assert!(e.contains("uid_range 80000-80100 holds the host's account backup (id 80005"), "{e}");
    assert!(e.contains(&etc.path().join("passwd").display().to_string()), "names the file: {e}");

    let hub = Hub::start_seams(seams(etc.path()), |c| c.uid_range = "81000-81010".parse().unwrap()).await;
    let admin = hub.admin().await;
    let (_, me) = hub.call(Method::GET, "/api/v1/me", Some(&admin), None).await;
    assert_eq!(me["uid"], 81_000, "{me}");
    let passwd = std::fs::read_to_string(etc.path().join("passwd")).unwrap();
    std::fs::write(etc.path().join("passwd"), format!("{passwd}late:x:81001:81001::/:/bin/false\n")).unwrap();
    let alice = hub.user(&admin, "alice").await;
    let (_, me) = hub.call(Method::GET, "/api/v1/me", Some(&alice), None).await;
    assert_eq!(me["uid"], 81_002, "the host's late account (81001) passed over: {me}");
}

/// A directory's `uidNumber` stays the account's own, unless it is another host account's: that sign-in
/// is refused naming the host account; a host account of the same name (its own) is no collision.
#[tokio::test]
async fn n15_a_directory_uid_of_another_host_account_is_refused() {
    let dir = std::sync::Arc::new(gpuhub_identity::FakeDirectory::new());
    let person = |name: &str, uid: u32| gpuhub_identity::DirectoryUser {
        username: name.into(),
        dn: format!("uid={name},ou=people,dc=example,dc=org"),
        uid_number: uid,
        gid_number: 5000,
        groups: vec![],
        is_admin: false,
        display_name: None,
    };
    dir.add_user(person("dora", 1000), "dora-ldap");
    dir.add_user(person("ana", 1000), "ana-ldap");
    dir.add_user(person("emil", 5002), "emil-ldap");
    let etc = etc("");
    let hub = Hub::start_seams(Seams { directory: Some(dir), ..seams(etc.path()) }, |_| {}).await;
    let (s, v) =
        hub.call(Method::POST, "/api/v1/login", None, Some(json!({"username": "dora", "password": "dora-ldap"}))).await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    let detail = v["detail"].as_str().unwrap();
    assert!(detail.contains("dora's uid 1000 in the directory is the host's account ana"), "{v}");
    for who in ["ana", "emil"] {
        let token = hub.login(who, &format!("{who}-ldap")).await;
        let (_, me) = hub.call(Method::GET, "/api/v1/me", Some(&token), None).await;
        assert_eq!(me["uid"], if who == "ana" { 1000 } else { 5002 }, "{me}");
    }
}
