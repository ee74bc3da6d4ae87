//! `LdapDirectory` against a real OpenLDAP `slapd` that each test starts in a temporary directory:
//! mdb backend, TLS with a CA and server certificate made here by the `openssl` CLI, StartTLS on
//! one port and LDAPS on another, users and POSIX groups loaded with `slapadd`.
//!
//! Needs Debian's `slapd` and `ldap-utils` (scripts/setup-debian.sh installs them); without them the
//! tests fail saying so, unless GPUHUB_SKIP_LDAP_TESTS=1.

use gpuhub_testkit::slapd as slapd_support;

use gpuhub_identity::{Directory, IdentityError, LdapConfig, LdapDirectory};
use ldap3::LdapConnAsync;
use slapd_support::*;
use std::time::{Duration, Instant};

#[tokio::test]
async fn alice_signs_in_over_starttls_with_her_ids_and_groups() {
    let Some(slapd) = slapd().await else { return };
    let alice = slapd.directory().authenticate("alice", "alice-pw").await.unwrap();
    assert_eq!(alice.username, "alice");
    assert_eq!(alice.dn, format!("uid=alice,ou=people,{SUFFIX}"));
    assert_eq!((alice.uid_number, alice.gid_number), (20001, 20001));
    assert_eq!(alice.groups, ["vision"]);
    assert!(!alice.is_admin);
    assert_eq!(alice.display_name.as_deref(), Some("alice the tester"));
}

#[tokio::test]
async fn bob_is_admin_through_the_admin_group_and_anonymous_search_works() {
    let Some(slapd) = slapd().await else { return };
    let bob = slapd.directory().authenticate("bob", "bob-pw").await.unwrap();
    assert_eq!((bob.uid_number, bob.groups.as_slice(), bob.is_admin), (20002, &["gpuhub-admins".to_owned()][..], true));
    // the same without a service account: the ACL lets anyone search
    let mut config = slapd.config();
    config.bind_dn = None;
    config.bind_password = None;
    let bob = LdapDirectory::new(config).unwrap().authenticate("bob", "bob-pw").await.unwrap();
    assert!(bob.is_admin);
}

#[tokio::test]
async fn wrong_password_unknown_user_and_injection_are_invalid_credentials() {
    let Some(slapd) = slapd().await else { return };
    let dir = slapd.directory();
    for (user, pw) in
        [("alice", "bob-pw"), ("alice", "alice-pw "), ("mallory", "alice-pw"), ("*", "alice-pw"), ("a*", "alice-pw")]
    {
        let got = dir.authenticate(user, pw).await;
        assert!(matches!(got, Err(IdentityError::InvalidCredentials)), "{user}/{pw}: {got:?}");
    }
}

#[tokio::test]
async fn an_empty_password_is_refused_though_the_server_would_accept_it() {
    let Some(slapd) = slapd().await else { return };
    let got = slapd.directory().authenticate("alice", "").await;
    assert!(matches!(got, Err(IdentityError::EmptyPassword)), "{got:?}");
    // the server itself does accept that bind (anonymously): the refusal above is the client's
    let (conn, mut ldap) = LdapConnAsync::new(&slapd.plain_url).await.unwrap();
    ldap3::drive!(conn);
    let res = ldap.simple_bind(&format!("uid=alice,ou=people,{SUFFIX}"), "").await.unwrap();
    assert_eq!(res.rc, 0, "slapd was expected to allow an unauthenticated bind: {res}");
}

#[tokio::test]
async fn ldaps_works_too() {
    let Some(slapd) = slapd().await else { return };
    let mut config = slapd.config();
    config.url = slapd.ldaps_url.clone();
    config.starttls = false;
    let alice = LdapDirectory::new(config).unwrap().authenticate("alice", "alice-pw").await.unwrap();
    assert_eq!(alice.uid_number, 20001);
}

#[tokio::test]
async fn a_server_certificate_from_another_ca_is_refused() {
    let Some(slapd) = slapd().await else { return };
    for (url, starttls) in [(slapd.starttls_url.clone(), true), (slapd.ldaps_url.clone(), false)] {
        let mut config = slapd.config();
        config.url = url;
        config.starttls = starttls;
        config.ca_file = Some(slapd.ca("other-ca.pem"));
        let got = LdapDirectory::new(config).unwrap().authenticate("alice", "alice-pw").await;
        match got {
            Err(IdentityError::Directory(m)) => assert!(m.to_lowercase().contains("certificate"), "{m}"),
            other => panic!("starttls={starttls}: expected a TLS error, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_user_without_uid_number_gets_a_clear_error() {
    let Some(slapd) = slapd().await else { return };
    let got = slapd.directory().authenticate("dave", "dave-pw").await;
    assert!(matches!(got, Err(IdentityError::MissingAttribute { attribute: "uidNumber", .. })), "{got:?}");
    let wrong = slapd.directory().authenticate("dave", "nope").await;
    assert!(matches!(wrong, Err(IdentityError::InvalidCredentials)), "{wrong:?}");
}

#[tokio::test]
async fn lookup_finds_a_user_until_deleted_upstream() {
    let Some(slapd) = slapd().await else { return };
    let dir = slapd.directory();
    let carol = dir.authenticate("carol", "carol-pw").await.unwrap();
    assert_eq!(dir.lookup("carol").await.unwrap(), Some(carol));
    assert_eq!(dir.lookup("nobody").await.unwrap(), None);
    slapd.delete_user("carol").await.unwrap();
    assert_eq!(dir.lookup("carol").await.unwrap(), None);
    assert!(matches!(dir.authenticate("carol", "carol-pw").await, Err(IdentityError::InvalidCredentials)));
}

#[tokio::test]
async fn an_unreachable_server_is_an_error_not_a_hang() {
    if !slapd_available() {
        return;
    }
    let port = free_port().unwrap();
    let mut config = LdapConfig::new(format!("ldap://127.0.0.1:{port}"), "ou=people,dc=x", "ou=groups,dc=x");
    config.starttls = true;
    config.timeout_secs = 2;
    let started = Instant::now();
    let got = LdapDirectory::new(config).unwrap().authenticate("alice", "pw").await;
    assert!(matches!(got, Err(IdentityError::Directory(_) | IdentityError::Timeout(_))), "{got:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
}
