//! A workspace saved as a personal image, on the real Docker engine through the `gpuhub` CLI: alice's
//! workspace writes a file into `/opt`; `gpuhub save` makes an image of it (owner only, listed by
//! `gpuhub images --mine`); a new job run `--image` with that name sees the file; bob can neither save
//! her workspace nor run her image by its name, its reference or its image ID (security review 2, N6),
//! its reference naming this installation; the per-user count limit refuses a second save; she
//! removes the image and it is gone from the engine. Needs root and Docker.

mod common;

use anyhow::{Result, ensure};
use common::{Hub, IMAGE, docker};

#[test]
fn a_saved_workspace_runs_again_with_its_files() -> Result<()> {
    let _serial = common::serial();
    common::ensure_image()?;
    // an image whose /opt its users may write (as framework images' environments are)
    let suffix = common::suffix();
    let base = format!("gpuhub-test/opt-writable:{suffix}");
    let maker = format!("opt-maker-{suffix}");
    docker(&["run", "--network", "none", "--name", &maker, IMAGE, "sh", "-c", "mkdir -p /opt && chmod 1777 /opt"])?;
    docker(&["commit", &maker, &base])?;
    docker(&["rm", &maker])?;

    let mut hub = Hub::start_configured("", "[limits]\nmax_personal_images = 1\n")?;
    let alice = hub.user("alice")?;
    let bob = hub.user("bob")?;
    let script = "echo made-in-the-workspace > /opt/hello.txt && echo ready && sleep 3600";
    alice.ok(&["run", "--workspace", "--name", "ws", "--image", &base, "--", "sh", "-c", script])?;
    alice.logs_until("ws", "ready")?;

    let err = bob.fails(&["save", "ws", "--as", "stolen"])?;
    ensure!(err.contains("404"), "bob saving alice's workspace: {err}");
    let saved = alice.ok(&["save", "ws", "--as", "myenv"])?;
    // gpuhub-user/<installation>/<user>/<name>
    let reference = saved
        .split(|c: char| c.is_whitespace() || c == '(' || c == ',')
        .find(|w| w.starts_with("gpuhub-user/"))
        .unwrap_or_default()
        .to_owned();
    let suffix = format!("/{}/myenv:latest", alice.name);
    ensure!(saved.contains("saved ws as myenv") && reference.ends_with(&suffix), "gpuhub save: {saved}");
    ensure!(reference.split('/').nth(1).is_some_and(|i| i.len() == 12), "namespaced by installation: {reference}");
    let mine = alice.ok(&["images", "--mine"])?;
    ensure!(mine.contains("myenv") && mine.contains(&reference) && mine.contains("ws"), "images --mine: {mine}");
    ensure!(!bob.ok(&["images", "--mine"])?.contains("myenv"), "bob lists alice's image");

    let out = alice.ok(&["run", "--name", "again", "--image", "myenv", "--follow", "--", "cat", "/opt/hello.txt"])?;
    ensure!(out.contains("made-in-the-workspace"), "a job of the saved image: {out}");
    let err = bob.fails(&["run", "--name", "theirs", "--image", "myenv", "--", "true"])?;
    ensure!(err.contains("422"), "bob running alice's image by name: {err}");
    let id = docker(&["image", "inspect", "-f", "{{.Id}}", &reference])?;
    for other_name in [reference.as_str(), id.trim(), &id.trim()["sha256:".len()..][..12]] {
        let err = bob.fails(&["run", "--name", "theirs", "--image", other_name, "--", "true"])?;
        ensure!(err.contains("another user's personal image"), "bob running alice's image as {other_name}: {err}");
    }

    let err = alice.fails(&["save", "ws", "--as", "second"])?;
    ensure!(err.contains("too many personal images"), "the count limit: {err}");
    // a workload made from it still has its container: the image stays until that is deleted
    let err = alice.fails(&["images", "--mine", "rm", "myenv"])?;
    ensure!(err.contains("409") && err.contains("using"), "removing an image in use: {err}");
    alice.ok(&["rm", "again"])?;
    alice.ok(&["images", "--mine", "rm", "myenv"])?;
    ensure!(docker(&["image", "inspect", &reference]).is_err(), "the image is still in the engine");
    ensure!(!alice.ok(&["images", "--mine"])?.contains("myenv"), "still listed");
    alice.ok(&["stop", "ws"])?;
    let _ = docker(&["rmi", &base]);
    Ok(())
}
