//! Accounts: UID assignment, conflicts, look-ups, changes, deletion with its cascade.

use crate::common::t;
use chrono::{Duration, SubsecRound};
use gpuhub_core::user::{FIRST_UID, Role, UidRange, UserSource};
use gpuhub_store::{SshKeyRecord, Store, StoreError, TokenKind};

both!(uids_start_at_first_uid_and_are_never_reused, username_conflict, lookups, changes, delete_cascades);
both!(concurrent_creations_get_distinct_uids, concurrent_account_churn);
both!(uids_come_from_the_range_passing_over_the_hosts_ids, a_new_range_starts_at_its_first);

async fn uids_start_at_first_uid_and_are_never_reused(s: Store) {
    assert_eq!(s.count_users().await.unwrap(), 0);
    let alice = s.create_user("alice", "h1", Role::Admin, t(0)).await.unwrap();
    let bob = s.create_user("bob", "h2", Role::User, t(1)).await.unwrap();
    assert_eq!(alice.uid, FIRST_UID);
    assert_eq!(bob.uid, FIRST_UID + 1);
    assert_ne!(alice.id, bob.id);

    // deleting the newest user must not hand their UID out again
    s.delete_user("bob").await.unwrap();
    let carol = s.create_user("carol", "h3", Role::User, t(2)).await.unwrap();
    assert_eq!(carol.uid, FIRST_UID + 2);
    // not even when everyone is gone, nor when a name comes back
    s.delete_user("alice").await.unwrap();
    s.delete_user("carol").await.unwrap();
    assert_eq!(s.count_users().await.unwrap(), 0);
    let bob2 = s.create_user("bob", "h4", Role::User, t(3)).await.unwrap();
    assert_eq!(bob2.uid, FIRST_UID + 3);
    assert_ne!(bob2.id, bob.id, "database ids are not reused either");
}

async fn username_conflict(s: Store) {
    s.create_user("alice", "h1", Role::User, t(0)).await.unwrap();
    let e = s.create_user("alice", "other", Role::Admin, t(1)).await.unwrap_err();
    assert!(matches!(&e, StoreError::Conflict(m) if m.contains("alice")), "{e:?}");
    assert_eq!(e.to_string(), "user alice already exists");
    // the first account is untouched
    let (alice, hash) = s.user_with_password_hash("alice").await.unwrap();
    assert_eq!((alice.role, hash.as_str()), (Role::User, "h1"));
    // a refused creation does not use up a UID
    let bob = s.create_user("bob", "h", Role::User, t(2)).await.unwrap();
    assert_eq!(bob.uid, FIRST_UID + 1);
    assert_eq!(s.count_users().await.unwrap(), 2);
}

async fn lookups(s: Store) {
    // sub-millisecond precision is dropped, consistently in the returned and the stored user
    let now = t(0) + Duration::nanoseconds(123_456_789);
    let created = s.create_user("zed", "hz", Role::User, now).await.unwrap();
    assert_eq!(created.created_at, now.trunc_subsecs(3));
    let admin = s.create_user("amy", "ha", Role::Admin, t(5)).await.unwrap();
    let mid = s.create_user("mia", "hm", Role::User, t(7)).await.unwrap();

    assert_eq!(s.get_user("zed").await.unwrap(), created);
    assert_eq!(s.get_user_by_id(admin.id).await.unwrap(), admin);
    assert!(s.get_user("amy").await.unwrap().is_admin());
    let (u, h) = s.user_with_password_hash("mia").await.unwrap();
    assert_eq!((u, h.as_str()), (mid.clone(), "hm"));
    assert_eq!(s.list_users().await.unwrap(), vec![admin.clone(), mid.clone(), created.clone()]);
    assert_eq!(s.count_users().await.unwrap(), 3);
    // pages by username
    assert_eq!(s.list_users_page(None, 2).await.unwrap(), (vec![admin.clone(), mid.clone()], true));
    assert_eq!(s.list_users_page(Some("mia"), 2).await.unwrap(), (vec![created.clone()], false));
    assert_eq!(s.list_users_page(Some("amy"), 2).await.unwrap(), (vec![mid, created], false));
    assert_eq!(s.list_users_page(Some("zed"), 2).await.unwrap(), (vec![], false));

    for e in [
        s.get_user("nobody").await.unwrap_err(),
        s.user_with_password_hash("nobody").await.unwrap_err(),
        s.get_user_by_id(987_654).await.unwrap_err(),
    ] {
        assert!(matches!(e, StoreError::NotFound { what: "user", .. }), "{e:?}");
    }
    assert_eq!(s.get_user("nobody").await.unwrap_err().to_string(), "user nobody not found");
}

async fn changes(s: Store) {
    let u = s.create_user("alice", "old", Role::User, t(0)).await.unwrap();
    s.set_password_hash("alice", "new").await.unwrap();
    s.set_role("alice", Role::Admin).await.unwrap();
    s.set_disabled("alice", true).await.unwrap();
    let (got, hash) = s.user_with_password_hash("alice").await.unwrap();
    assert_eq!(hash, "new");
    assert_eq!(got, gpuhub_core::user::User { role: Role::Admin, disabled: true, ..u.clone() });
    s.set_disabled("alice", false).await.unwrap();
    s.set_role("alice", Role::User).await.unwrap();
    assert_eq!(s.get_user("alice").await.unwrap(), u);
    // a home quota: bytes, none (0), back to the default; in lists too
    s.set_home_quota("alice", Some(20 << 30)).await.unwrap();
    assert_eq!(s.get_user("alice").await.unwrap().home_quota, Some(20 << 30));
    assert_eq!(s.list_users().await.unwrap()[0].home_quota, Some(20 << 30));
    s.set_home_quota("alice", Some(0)).await.unwrap();
    assert_eq!(s.get_user("alice").await.unwrap().home_quota, Some(0));
    s.set_home_quota("alice", None).await.unwrap();
    assert_eq!(s.get_user("alice").await.unwrap(), u);
    assert!(matches!(s.set_home_quota("ghost", None).await.unwrap_err(), StoreError::NotFound { .. }));
    // an account from a directory: its own UID and GID, no password, synced later
    use gpuhub_core::user::UserSource;
    let d = s.create_external_user("dora", Role::User, (20_001, 30_001), UserSource::Ldap, t(1)).await.unwrap();
    assert_eq!((d.uid, d.gid, d.source), (20_001, 30_001, UserSource::Ldap));
    assert_eq!(s.get_user("dora").await.unwrap(), d);
    assert_eq!((u.gid, u.source), (u.uid, UserSource::Local), "a local account's GID is its UID");
    let taken = s.create_external_user("other", Role::User, (20_001, 1), UserSource::Ldap, t(1)).await;
    assert!(matches!(taken, Err(StoreError::Conflict(_))), "{taken:?}");
    s.sync_external_user("dora", Role::Admin, 20_002, 30_002).await.unwrap();
    let d2 = s.get_user("dora").await.unwrap();
    assert_eq!((d2.role, d2.uid, d2.gid), (Role::Admin, 20_002, 30_002));
    let (_, hash) = s.user_with_password_hash("dora").await.unwrap();
    assert_eq!(hash, "!", "no password of its own");

    for e in [
        s.set_password_hash("ghost", "x").await.unwrap_err(),
        s.set_role("ghost", Role::Admin).await.unwrap_err(),
        s.set_disabled("ghost", true).await.unwrap_err(),
        s.delete_user("ghost").await.unwrap_err(),
    ] {
        assert!(matches!(&e, StoreError::NotFound { what: "user", key } if key == "ghost"), "{e:?}");
    }
}

fn key(fp: &str) -> SshKeyRecord {
    SshKeyRecord {
        fingerprint: fp.to_owned(),
        public_key: format!("ssh-ed25519 AAAA{fp}"),
        comment: "me@laptop".to_owned(),
        created_at: t(0),
    }
}

async fn delete_cascades(s: Store) {
    let alice = s.create_user("alice", "h", Role::User, t(0)).await.unwrap();
    let bob = s.create_user("bob", "h", Role::User, t(0)).await.unwrap();
    s.insert_token(alice.id, "a-api", TokenKind::Api, t(0), None).await.unwrap();
    s.insert_token(alice.id, "a-session", TokenKind::Session, t(0), Some(t(3_600_000))).await.unwrap();
    s.insert_token(bob.id, "b-api", TokenKind::Api, t(0), None).await.unwrap();
    s.add_ssh_key(alice.id, &key("SHA256:alice")).await.unwrap();
    s.add_ssh_key(bob.id, &key("SHA256:bob")).await.unwrap();
    let w = crate::workloads::sample("alice", "train", "w-1");
    s.insert_workload(&w).await.unwrap();

    s.delete_user("alice").await.unwrap();

    assert!(matches!(s.get_user("alice").await, Err(StoreError::NotFound { .. })));
    assert!(s.token_user("a-api", t(1)).await.unwrap().is_none());
    assert!(s.token_user("a-session", t(1)).await.unwrap().is_none());
    assert!(s.list_user_tokens(alice.id).await.unwrap().is_empty());
    assert!(s.user_by_ssh_fingerprint("SHA256:alice").await.unwrap().is_none());
    assert!(s.list_ssh_keys(alice.id).await.unwrap().is_empty());
    // the secrets and keys of the deleted account can be registered again by someone else
    s.insert_token(bob.id, "a-api", TokenKind::Api, t(0), None).await.unwrap();
    s.add_ssh_key(bob.id, &key("SHA256:alice")).await.unwrap();
    // other users keep theirs; workloads stay
    assert_eq!(s.token_user("b-api", t(1)).await.unwrap().unwrap().0, bob);
    assert_eq!(s.user_by_ssh_fingerprint("SHA256:bob").await.unwrap(), Some(bob));
    assert_eq!(s.get_workload_by_id("w-1").await.unwrap(), w);
}

async fn concurrent_creations_get_distinct_uids(s: Store) {
    let tasks: Vec<_> = (0..24)
        .map(|i| {
            let s = s.clone();
            tokio::spawn(async move { s.create_user(&format!("user{i:02}"), "h", Role::User, t(i)).await.unwrap() })
        })
        .collect();
    let mut uids = Vec::new();
    for task in tasks {
        uids.push(task.await.unwrap().uid);
    }
    uids.sort_unstable();
    assert_eq!(uids, (FIRST_UID..FIRST_UID + 24).collect::<Vec<_>>());
    assert_eq!(s.count_users().await.unwrap(), 24);
}

/// Many writers at once on every table an account touches: SQLite must wait for its write lock
/// rather than fail, and every cascade must still hold.
async fn concurrent_account_churn(s: Store) {
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let s = s.clone();
            tokio::spawn(async move {
                let name = format!("churn{i:02}");
                for round in 0..3 {
                    let u = s.create_user(&name, "h", Role::User, t(round)).await.unwrap();
                    s.insert_token(u.id, &format!("{name}-{round}"), TokenKind::Api, t(0), None).await.unwrap();
                    s.add_ssh_key(u.id, &key(&format!("SHA256:{name}-{round}"))).await.unwrap();
                    s.set_disabled(&name, true).await.unwrap();
                    assert!(s.token_user(&format!("{name}-{round}"), t(1)).await.unwrap().unwrap().0.disabled);
                    s.delete_user(&name).await.unwrap();
                }
                s.create_user(&name, "h", Role::User, t(9)).await.unwrap()
            })
        })
        .collect();
    let mut uids = Vec::new();
    for task in tasks {
        uids.push(task.await.unwrap().uid);
    }
    uids.sort_unstable();
    uids.dedup();
    assert_eq!(uids.len(), 16);
    assert!(uids.iter().all(|&u| (FIRST_UID..FIRST_UID + 64).contains(&u)));
    assert_eq!(s.count_users().await.unwrap(), 16);
    for u in s.list_users().await.unwrap() {
        assert!(s.list_user_tokens(u.id).await.unwrap().is_empty());
        assert!(s.list_ssh_keys(u.id).await.unwrap().is_empty());
    }
    // 16 users x 4 creations each: exactly 64 UIDs were handed out
    assert_eq!(s.create_user("last", "h", Role::User, t(0)).await.unwrap().uid, FIRST_UID + 64);
}

/// Security review N15: a range of the admin's choosing, the host's accounts' IDs passed over (asked at
/// each creation, so an account the host made after the start counts), and a used-up range refused.
async fn uids_come_from_the_range_passing_over_the_hosts_ids(s: Store) {
    let host = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::from([80_001])));
    let seen = host.clone();
    let taken: gpuhub_store::TakenIds = std::sync::Arc::new(move || seen.lock().unwrap().clone());
    let s = s.with_uids(UidRange { first: 80_000, last: 80_004 }, Some(taken));
    assert_eq!(s.create_user("alice", "h", Role::User, t(0)).await.unwrap().uid, 80_000);
    assert_eq!(s.create_user("bob", "h", Role::User, t(0)).await.unwrap().uid, 80_002, "the host's 80001");
    host.lock().unwrap().insert(80_003);
    assert_eq!(s.create_user("carol", "h", Role::User, t(0)).await.unwrap().uid, 80_004, "made after the start");
    let e = s.create_user("dave", "h", Role::User, t(0)).await.unwrap_err();
    assert!(matches!(&e, StoreError::Conflict(m) if m.contains("uid_range 80000-80004")), "{e:?}");
    assert!(s.get_user("dave").await.is_err(), "nothing made");
}

/// A database whose accounts came from another range (10000 up, before N15) hands out the new range
/// from its first, above any account of the range an outside source brought.
async fn a_new_range_starts_at_its_first(s: Store) {
    let old = s.clone().with_uids(UidRange { first: 10_000, last: 10_999 }, None);
    assert_eq!(old.create_user("alice", "h", Role::User, t(0)).await.unwrap().uid, 10_000);
    assert_eq!(old.create_user("bob", "h", Role::User, t(0)).await.unwrap().uid, 10_001);
    assert_eq!(s.create_user("carol", "h", Role::User, t(0)).await.unwrap().uid, FIRST_UID);
    s.create_external_user("dan", Role::User, (FIRST_UID + 5, 100), UserSource::Ldap, t(0)).await.unwrap();
    assert_eq!(s.create_user("erin", "h", Role::User, t(0)).await.unwrap().uid, FIRST_UID + 6);
    // and back: the old range goes on where it was, above bob
    assert_eq!(old.create_user("fay", "h", Role::User, t(0)).await.unwrap().uid, 10_002);
}
