//! `gpuhub serve` on Docker says at start whether the engine keeps containers through its own restart:
//! a warning, in its log and on stderr, when `docker info` says `LiveRestoreEnabled: false` (an upgrade
//! or crash of dockerd then kills every running container, which gpuhub queues again); a log line when it
//! is on (as `scripts/setup-debian.sh` makes it). The real binary against this host's Docker engine,
//! whichever way it is set. Needs root and a Docker engine.

mod common;

use anyhow::{Context as _, Result, ensure};
use std::process::Command;

#[test]
fn serve_says_whether_the_engine_has_live_restore() -> Result<()> {
    let _serial = common::serial();
    let out = Command::new("docker").args(["info", "--format", "{{.LiveRestoreEnabled}}"]).output()?;
    ensure!(out.status.success(), "docker info: {}", String::from_utf8_lossy(&out.stderr));
    let live_restore = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let server = common::Server::start(0).context("gpuhub serve")?;
    let log = server.log();
    let warning = "gpuhub: warning: the docker engine runs without live restore: restarting or upgrading dockerd \
                   kills every running container";
    match live_restore.as_str() {
        "false" => ensure!(log.contains(warning), "no warning on stderr; the server's output:\n{log}"),
        "true" => {
            ensure!(!log.contains(warning), "a warning though live restore is on:\n{log}");
            ensure!(log.contains("docker engine: live restore enabled"), "the server's output:\n{log}");
        }
        other => anyhow::bail!("docker info says LiveRestoreEnabled {other:?}"),
    }
    Ok(())
}
