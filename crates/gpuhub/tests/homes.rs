//! Home quotas on the real Docker engine, through the `gpuhub` CLI, with `home_quota = "1GiB"` (as root
//! here the backend is a loop-mounted ext4 image per user): a job writing 1.5 GiB into its 1 GiB home
//! fails inside the container with the filesystem's "No space left on device"; bob's home is untouched
//! and still writable; `df` in the container shows the quota, not the host's disk; usage shows in
//! `whoami` and the admin's user list; an admin raises a quota, and one below what the home holds is
//! refused. Needs root, e2fsprogs and a Docker engine.

mod common;

use anyhow::{Result, ensure};
use common::{Hub, IMAGE};

#[test]
fn a_home_quota_is_enforced_by_the_filesystem() -> Result<()> {
    let _serial = common::serial();
    let mut hub = Hub::start_with("home_quota = \"1GiB\"")?;
    let alice = hub.user("alice")?;
    let bob = hub.user("bob")?;

    let out = bob.ok(&[
        "run",
        "--name",
        "keep",
        "--image",
        IMAGE,
        "--follow",
        "--",
        "sh",
        "-c",
        "echo mine > $HOME/keep.txt",
    ])?;
    ensure!(!out.contains("error"), "bob's first job: {out}");

    let fill = "df -k $HOME | tail -n 1; dd if=/dev/zero of=$HOME/big bs=1M count=1536";
    let out = alice.output(&["run", "--name", "fill", "--image", IMAGE, "--follow", "--", "sh", "-c", fill])?;
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    ensure!(said.contains("No space left on device"), "writing past the quota: {said}");
    let w = alice.inspect("fill")?;
    ensure!(w["state"] == "failed", "the job that filled its home: {w:#}");
    // df in the container sees the home's own filesystem: about 1 GiB, not the host's disk
    let df_kib: u64 = said
        .lines()
        .find(|l| l.contains("/home/"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    ensure!((900_000..=1_100_000).contains(&df_kib), "df in the container: {df_kib} KiB ({said})");

    let me = alice.ok(&["whoami"])?;
    ensure!(me.contains("of 1GiB"), "whoami: {me}");
    let users = hub.admin.ok(&["user", "list"])?;
    ensure!(users.contains("HOME") && users.contains("of 1GiB"), "user list: {users}");
    let v: serde_json::Value = serde_json::from_str(&alice.ok(&["whoami", "--json"])?)?;
    let used = v["home"]["used_bytes"].as_u64().unwrap_or(0);
    ensure!(used > 900 << 20 && v["home"]["quota_bytes"] == 1u64 << 30, "GET /me: {v:#}");

    // bob's home is untouched and writable
    let out = bob.ok(&[
        "run",
        "--name",
        "after",
        "--image",
        IMAGE,
        "--follow",
        "--",
        "sh",
        "-c",
        "cat $HOME/keep.txt; dd if=/dev/zero of=$HOME/ten bs=1M count=10 2>/dev/null && echo wrote-ten",
    ])?;
    ensure!(out.contains("mine") && out.contains("wrote-ten"), "bob after alice filled hers: {out}");

    // an admin raises alice's quota (nothing of hers runs: applied at once); the write fits now
    let name = alice.name.clone();
    hub.admin.ok(&["user", "quota", &name, "2GiB"])?;
    ensure!(alice.ok(&["whoami"])?.contains("of 2GiB"), "after the raise");
    let out = alice.ok(&[
        "run",
        "--name",
        "fits",
        "--image",
        IMAGE,
        "--follow",
        "--",
        "sh",
        "-c",
        "rm -f $HOME/big; dd if=/dev/zero of=$HOME/big bs=1M count=1536 2>/dev/null && echo fits",
    ])?;
    ensure!(out.contains("fits"), "1.5 GiB in a 2 GiB home: {out}");
    // a quota below what the home holds is refused, naming it, and changes nothing
    let err = hub.admin.fails(&["user", "quota", &name, "100MiB"])?;
    ensure!(err.contains("holds") && err.contains("home_quota"), "shrinking below usage: {err}");
    ensure!(alice.ok(&["whoami"])?.contains("of 2GiB"), "the refused change changed the quota");
    let err = hub.admin.fails(&["user", "quota", &name, "lots"])?;
    ensure!(err.contains("home_quota"), "a malformed quota: {err}");
    // a user cannot change quotas
    let err = alice.fails(&["user", "quota", &name, "100GiB"])?;
    ensure!(err.contains("403") || err.to_lowercase().contains("admin"), "a user raising their quota: {err}");
    Ok(())
}
