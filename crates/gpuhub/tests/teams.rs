//! Team folders on the real Docker engine, through the `gpuhub` CLI: an admin gives the queue `vision`
//! members and a team group (`gpuhub queue add --team-gid`); alice's job (`--team`) writes into
//! `/team/<queue>` as herself with the team group among its groups, carol (another member) reads and
//! adds to it, and bob, who is not a member, is refused with a 422 saying so. Needs root and Docker.

mod common;

use anyhow::{Result, ensure};
use common::{Hub, IMAGE};

#[test]
fn members_share_a_team_folder_and_others_cannot_mount_it() -> Result<()> {
    let _serial = common::serial();
    let mut hub = Hub::start()?;
    let alice = hub.user("alice")?;
    let carol = hub.user("carol")?;
    let bob = hub.user("bob")?;
    let queue = format!("vision-{}", common::suffix());
    let members = format!("{},{}", alice.name, carol.name);
    hub.admin.ok(&["queue", "add", &queue, "--members", &members, "--team-gid", "61001"])?;

    let dir = format!("/team/{queue}");
    let write = format!("id -G; echo from-alice > {dir}/notes.txt && ls -ln {dir}/notes.txt");
    let out =
        alice.ok(&["run", "--name", "w", "--image", IMAGE, "--team", &queue, "--follow", "--", "sh", "-c", &write])?;
    ensure!(out.split_whitespace().any(|g| g == "61001"), "alice's job lacks the team group: {out}");
    // her file, of the team's group (the folder is set-group-id)
    ensure!(out.contains(" 61001 "), "the file's group: {out}");
    ensure!(alice.inspect("w")?["state"] == "succeeded", "alice's job");

    let read = format!("cat {dir}/notes.txt && echo from-carol >> {dir}/carol.txt && echo carol-wrote");
    let out =
        carol.ok(&["run", "--name", "r", "--image", IMAGE, "--team", &queue, "--follow", "--", "sh", "-c", &read])?;
    ensure!(out.contains("from-alice") && out.contains("carol-wrote"), "carol in the team folder: {out}");

    let err = bob.fails(&["run", "--name", "x", "--image", IMAGE, "--team", &queue, "--", "true"])?;
    ensure!(err.contains("is not a member of team") && err.contains("422"), "bob mounting the team folder: {err}");
    // and his own work sees nothing of it
    let out = bob.ok(&["run", "--name", "y", "--image", IMAGE, "--follow", "--", "sh", "-c", "ls /team 2>&1; true"])?;
    ensure!(!out.contains(&queue), "bob's job sees the team folder: {out}");
    Ok(())
}
