//! Images pulled on first use from a real registry: Debian's `docker-registry`, started by the test on
//! loopback, serves an image (busybox with a 24 MiB layer of its own) that the local Docker engine does
//! not have. With `image_allow` naming that registry, `gpuhub run --follow` submits it `pulling`, prints
//! the pull's progress as the API reports it, and runs it once pulled; a registry no pattern names is
//! refused with the policy's reason, and a tag the registry lacks fails the workload in the registry's
//! words. Needs root, Docker and docker-registry.

mod common;

use anyhow::{Context, Result, ensure};
use common::{Hub, IMAGE, docker};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `docker-registry serve` on a free loopback port; killed when dropped.
struct Registry {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Registry {
    fn start() -> Result<Registry> {
        let dir = tempfile::tempdir()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let addr = format!("127.0.0.1:{port}");
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {addr}\n",
                dir.path().join("data").display()
            ),
        )?;
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("docker-registry (apt-get install docker-registry)")?;
        let mut r = Registry { child, addr, _dir: dir };
        let deadline = Instant::now() + Duration::from_secs(20);
        while common::http_get(&format!("http://{}", r.addr), "/v2/").is_err() {
            ensure!(r.child.try_wait()?.is_none(), "docker-registry exited");
            ensure!(Instant::now() < deadline, "docker-registry did not answer within 20 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(r)
    }
}

#[test]
fn an_allowed_image_is_pulled_on_first_use_with_progress() -> Result<()> {
    let _serial = common::serial();
    common::ensure_image()?;
    let registry = Registry::start()?;
    let suffix = common::suffix();
    let image = format!("{}/pull-test/busybox:{suffix}", registry.addr);
    // an image of our own with a layer big enough for the pull to show progress, pushed, then
    // removed from the engine
    let maker = format!("pull-maker-{suffix}");
    docker(&[
        "run",
        "--network",
        "none",
        "--name",
        &maker,
        IMAGE,
        "dd",
        "if=/dev/urandom",
        "of=/blob",
        "bs=1M",
        "count=24",
    ])?;
    docker(&["commit", &maker, &image])?;
    docker(&["rm", &maker])?;
    docker(&["push", &image])?;
    docker(&["rmi", &image])?;

    let mut hub = Hub::start_with(&format!("image_allow = [\"{}/*\"]", registry.addr))?;
    let alice = hub.user("alice")?;
    let out = alice.output(&[
        "run",
        "--name",
        "pulled",
        "--image",
        &image,
        "--follow",
        "--",
        "sh",
        "-c",
        "ls -l /blob && echo pulled-ok",
    ])?;
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    ensure!(out.status.success() && stdout.contains("pulled-ok"), "the pulled image ran: {stdout} {stderr}");
    ensure!(stderr.contains(&format!("pulling {image}")), "no pull progress printed: {stderr}");
    // the bar's figures come and go with the polls (a local pull can be over between two); what it
    // fetched is told at its end in any case
    let end = stderr.lines().find(|l| l.starts_with(&format!("{image}: pulled "))).context(stderr.to_string())?;
    ensure!(end.contains("MiB (") && end.contains("layers); queued"), "the pull's end shows no figures: {end}");
    let w = alice.inspect("pulled")?;
    let states: Vec<&str> =
        w["history"].as_array().context("history")?.iter().filter_map(|s| s["state"].as_str()).collect();
    ensure!(states.starts_with(&["pulling", "queued"]), "history: {states:?}");
    docker(&["image", "inspect", &image]).context("the engine has the image now")?;

    let other = "127.0.0.2:5999/x:1";
    let err = alice.fails(&["run", "--name", "no", "--image", other, "--", "true"])?;
    ensure!(err.contains("registry 127.0.0.2:5999 is not allowed"), "a disallowed registry: {err}");

    let missing = format!("{}/pull-test/busybox:no-such-tag", registry.addr);
    let out = alice.output(&["run", "--name", "missing", "--image", &missing, "--follow", "--", "true"])?;
    ensure!(!out.status.success(), "a tag the registry lacks ran");
    let w = alice.inspect("missing")?;
    let m = w["message"].as_str().unwrap_or_default();
    ensure!(w["state"] == "failed" && m.contains("could not pull") && m.contains("not found"), "{w:#}");
    let _ = docker(&["rmi", &image]);
    drop(registry);
    Ok(())
}
