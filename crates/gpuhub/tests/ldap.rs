//! Signing in with an LDAP directory, end to end: a real OpenLDAP `slapd` started by the test (TLS from
//! a CA the test makes, StartTLS), gpuhub configured with `[ldap]`, the real `gpuhub` CLI and the real
//! Docker engine. alice signs in with her directory password and her job runs as her `uidNumber`; bob,
//! in the `gpuhub-admins` group, is an admin; a wrong password is refused and, repeated, rate-limited.
//! Needs root, Docker, slapd/ldap-utils and openssl (scripts/setup-debian.sh installs them).

mod common;
use gpuhub_testkit::slapd as slapd_support;

use anyhow::{Result, ensure};
use common::{Hub, IMAGE};
use slapd_support::{ROOT_DN, ROOT_PW, SUFFIX, Slapd};

#[test]
fn directory_users_sign_in_and_run_as_their_uid() -> Result<()> {
    if !slapd_support::slapd_available() {
        return Ok(());
    }
    let _serial = common::serial();
    let rt = tokio::runtime::Runtime::new()?;
    let mut slapd = Slapd::start()?;
    rt.block_on(slapd.wait_ready())?;
    let ldap = format!(
        "[ldap]\nurl = \"{}\"\nstarttls = true\nca_file = \"{}\"\nbind_dn = \"{ROOT_DN}\"\nbind_password = \"{ROOT_PW}\"\n\
         user_base = \"ou=people,{SUFFIX}\"\ngroup_base = \"ou=groups,{SUFFIX}\"\n",
        slapd.starttls_url,
        slapd.ca("ca.pem").display()
    );
    let mut hub = Hub::start_configured("", &ldap)?;

    let alice = hub.sign_in("alice", "alice-pw")?;
    let me = alice.ok(&["whoami"])?;
    ensure!(me.starts_with("alice (user)"), "whoami: {me}");
    let out = alice.ok(&[
        "run",
        "--name",
        "ids",
        "--image",
        IMAGE,
        "--follow",
        "--",
        "sh",
        "-c",
        "echo uid=$(id -u) gid=$(id -g)",
    ])?;
    ensure!(out.contains("uid=20001 gid=20001"), "alice's job runs as her uidNumber: {out}");
    // no admin: not in the directory's admin group
    let err = alice.fails(&["user", "list"])?;
    ensure!(err.contains("403") || err.to_lowercase().contains("admin"), "alice is no admin: {err}");

    let bob = hub.sign_in("bob", "bob-pw")?;
    let users = bob.ok(&["user", "list"])?;
    ensure!(
        users.contains("alice") && users.contains("bob"),
        "bob, an admin through gpuhub-admins, lists users: {users}"
    );

    let first = hub.sign_in_fails("alice", "not-her-password")?;
    ensure!(first.contains("invalid username or password"), "a wrong password: {first}");
    let mut last = String::new();
    for _ in 0..6 {
        last = hub.sign_in_fails("alice", "not-her-password")?;
    }
    ensure!(last.contains("429") || last.to_lowercase().contains("too many"), "repeated wrong passwords: {last}");
    drop(slapd);
    Ok(())
}
