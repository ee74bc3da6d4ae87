use super::*;
use gpuhub_core::user::{Role, UserSource};

/// A host's `etc` as Debian 12 ships it, with a login account, Slurm's and `nobody`, and `extra` lines
/// appended to `passwd` and `group`.
fn debian(extra_passwd: &str, extra_group: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let defs = "# comment\nUID_MIN\t\t\t 1000\nUID_MAX\t\t\t60000\nGID_MIN\t\t\t 1000\nGID_MAX\t\t\t60000\n";
    std::fs::write(d.path().join("login.defs"), defs).unwrap();
    let passwd = "root:x:0:0:root:/root:/bin/bash\nana:x:1000:1000::/home/ana:/bin/bash\n\
                  slurm:x:64030:64030::/nonexistent:/usr/sbin/nologin\nnobody:x:65534:65534::/nonexistent:/usr/sbin/nologin\n";
    std::fs::write(d.path().join("passwd"), format!("{passwd}{extra_passwd}")).unwrap();
    let group = "root:x:0:\nana:x:1000:\nnogroup:x:65534:\n";
    std::fs::write(d.path().join("group"), format!("{group}{extra_group}")).unwrap();
    d
}

fn user(name: &str, uid: u32, gid: u32) -> User {
    User {
        id: 1,
        username: name.into(),
        role: Role::User,
        uid,
        gid,
        source: UserSource::Local,
        disabled: false,
        home_quota: None,
        created_at: chrono::DateTime::UNIX_EPOCH,
    }
}

#[test]
fn the_default_range_is_clear_of_a_debian_host() {
    let etc = debian("", "");
    let host = HostAccounts::new(etc.path());
    assert_eq!((host.read().unwrap().uid_max, host.read().unwrap().gid_max), (60_000, 60_000));
    host.check(UidRange::default(), &[], &[]).unwrap();
    // the range that was gpuhub's before: below UID_MAX, where useradd makes the host's accounts
    let e = host.check(UidRange { first: 10_000, last: 99_999 }, &[], &[]).unwrap_err().to_string();
    assert!(e.contains("uid_range 10000-99999 starts at or below the host's UID_MAX 60000"), "{e}");
    assert!(e.contains("login.defs"), "{e}");
}

#[test]
fn a_raised_gid_max_is_read_too() {
    let etc = debian("", "");
    std::fs::write(etc.path().join("login.defs"), "UID_MAX 60000\nGID_MAX 80000\n").unwrap();
    let e = HostAccounts::new(etc.path()).check(UidRange::default(), &[], &[]).unwrap_err().to_string();
    assert!(e.contains("GID_MAX 80000"), "{e}");
}

#[test]
fn a_range_holding_a_host_account_or_group_is_refused_naming_it() {
    let range = UidRange { first: 61_000, last: 99_999 };
    let etc = debian("", "");
    std::fs::write(etc.path().join("login.defs"), "UID_MAX 60000\n").unwrap();
    let e = HostAccounts::new(etc.path()).check(range, &[], &[]).unwrap_err().to_string();
    assert!(e.contains("uid_range 61000-99999 holds the host's account slurm (id 64030"), "{e}");
    assert!(e.contains("passwd"), "{e}");
    let etc = debian("", "backup-ops:x:75000:\n");
    let e = HostAccounts::new(etc.path()).check(UidRange::default(), &[], &[]).unwrap_err().to_string();
    assert!(e.contains("holds the host's group backup-ops (id 75000"), "{e}");
}

#[test]
fn a_gpuhub_users_own_account_and_a_teams_group_are_no_overlap() {
    // a Slurm cluster's account made for gpuhub's alice, with her UID, and the team folder's group
    let etc = debian("alice:x:70001:70001::/home/alice:/bin/sh\n", "alice:x:70001:\nvision:x:70500:\n");
    let host = HostAccounts::new(etc.path());
    let alice = user("alice", 70_001, 70_001);
    host.check(UidRange::default(), std::slice::from_ref(&alice), &[70_500]).unwrap();
    // the same account under another gpuhub user's name is one
    let e = host.check(UidRange::default(), &[user("alice", 70_002, 70_002)], &[70_500]).unwrap_err();
    assert!(e.to_string().contains("account alice (id 70001"), "{e}");
    assert_eq!(host.uid_owner(70_001, "alice").unwrap(), None);
    assert_eq!(host.uid_owner(70_001, "mallory").unwrap().as_deref(), Some("alice"));
    assert_eq!(
        host.shared_uids(&[user("bob", 1000, 1000), alice]).unwrap(),
        ["bob has uid 1000, which is the host's account ana"]
    );
}

#[test]
fn new_accounts_pass_over_every_host_id() {
    let etc = debian("svc:x:70002:70003::/:/bin/false\n", "");
    let taken = HostAccounts::new(etc.path()).taken();
    for id in [0, 1000, 64_030, 65_534, 70_002, 70_003] {
        assert!(taken.contains(&id), "{id}: {taken:?}");
    }
    // no files at all: nothing taken, defaults for the maxima
    let empty = tempfile::tempdir().unwrap();
    let host = HostAccounts::new(empty.path());
    assert!(host.taken().is_empty());
    assert_eq!(host.read().unwrap().uid_max, DEFAULT_ID_MAX);
}
