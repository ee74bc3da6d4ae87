//! Images pulled on first use from a real registry: Debian's `docker-registry`, started by the test on
//! loopback, serves an image (busybox with a 24 MiB layer of its own) that the local Docker engine does
//! not have, through a relay that holds the pull part-way until the test has seen its progress in the
//! API. With `image_allow` naming that registry, `gpuhub run --follow` submits it `pulling`, prints the
//! pull's progress and what it fetched, and runs it once pulled; a registry no pattern names is
//! refused with the policy's reason, and a tag the registry lacks fails the workload in the registry's
//! words. Needs root, Docker and docker-registry.

mod common;
use gpuhub_testkit::registry as registry_support;

use anyhow::{Context, Result, ensure};
use common::{Hub, IMAGE, docker};
use registry_support::{Registry, Valve, push_test_image};
use std::process::Stdio;
use std::time::{Duration, Instant};

#[test]
fn an_allowed_image_is_pulled_on_first_use_with_progress() -> Result<()> {
    let _serial = common::serial();
    common::ensure_image()?;
    let registry = Registry::start()?;
    let suffix = common::suffix();
    let valve = Valve::start(&registry.addr, 2 << 20)?;
    // pushed to the registry, pulled through the valve
    let image = format!("{}/{}", valve.addr, push_test_image(&registry.addr, IMAGE, &suffix)?);

    let mut hub = Hub::start_with(&format!("image_allow = [\"{}/*\"]", valve.addr))?;
    let alice = hub.user("alice")?;
    let run = alice
        .cmd(&[
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
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    // the pull stands part-way at the valve: the API shows how far it is
    let deadline = Instant::now() + common::WAIT;
    let w = loop {
        let out = alice.output(&["--json", "inspect", "pulled"])?;
        if out.status.success() {
            let w: serde_json::Value = serde_json::from_slice(&out.stdout)?;
            if w["pull"]["current_bytes"].as_u64().unwrap_or(0) > 0 {
                break w;
            }
            ensure!(w["state"] == "pulling", "no progress seen while pulling: {w:#}");
        }
        ensure!(Instant::now() < deadline, "no pull progress through the API: {}", common::describe(&out));
        std::thread::sleep(Duration::from_millis(50));
    };
    let p = &w["pull"];
    let (current, total) = (p["current_bytes"].as_u64().unwrap_or(0), p["total_bytes"].as_u64().unwrap_or(0));
    ensure!(total >= 24 << 20 && current < total, "the progress of a 24MiB layer held at 2MiB: {p}");
    ensure!(p["layers"].as_u64() >= Some(1) && p["layers_done"].as_u64() < p["layers"].as_u64(), "layers: {p}");
    valve.open();
    let out = run.wait_with_output()?;
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    ensure!(out.status.success() && stdout.contains("pulled-ok"), "the pulled image ran: {stdout} {stderr}");
    ensure!(stderr.contains(&format!("pulling {image}")), "no pull progress printed: {stderr}");
    // the bar's figures come and go with the CLI's polls; what the pull fetched is told at its end
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

    let missing = format!("{}/pull-test/busybox:no-such-tag", valve.addr);
    let out = alice.output(&["run", "--name", "missing", "--image", &missing, "--follow", "--", "true"])?;
    ensure!(!out.status.success(), "a tag the registry lacks ran");
    let w = alice.inspect("missing")?;
    let m = w["message"].as_str().unwrap_or_default();
    ensure!(w["state"] == "failed" && m.contains("could not pull") && m.contains("not found"), "{w:#}");
    let _ = docker(&["rmi", &image]);
    drop(registry);
    Ok(())
}
