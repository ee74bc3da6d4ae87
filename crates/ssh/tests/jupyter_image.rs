//! The gateway against the real JupyterLab image (built with scripts/build-jupyter-image.sh): scp of
//! 100 MiB in and out through sftp-server, and `ssh -L` to JupyterLab listening on the container's
//! loopback only (as VS Code's server does).

mod common;

use anyhow::{Result, ensure};
use common::*;
use std::process::Command;
use std::time::{Duration, Instant};

fn sha256(path: &std::path::Path) -> Result<String> {
    let out = Command::new("sha256sum").arg(path).output()?;
    ensure!(out.status.success());
    Ok(text(&out.stdout).split_whitespace().next().unwrap_or_default().to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn scp_100_mib_both_ways_and_forward_to_jupyterlab() -> Result<()> {
    build_image("build-jupyter-image.sh")?;
    let f = Fixture::start().await?;
    let lab = [
        "jupyter",
        "lab",
        "--no-browser",
        "--port",
        "8888",
        "--ServerApp.token=",
        "--ServerApp.password=",
        "--ServerApp.root_dir=/tmp",
    ];
    let c = container(&f.runtime, JUPYTER, &lab).await?;
    f.allow("nb", "nb", Some(&c.id));

    // The image's passwd does not know uid 10000: sftp-server runs under nss_wrapper.
    let out = f.ssh(&f.good, "nb", &[], &["id -u; getent passwd $(id -u) || echo no-entry"], b"").await?;
    assert_eq!(text(&out.stdout), format!("{UID}\nno-entry\n"), "{out:?}");

    let local = f.dir.path().join("big.bin");
    let made =
        Command::new("sh").arg("-c").arg(format!("head -c 104857600 /dev/urandom > '{}'", local.display())).status()?;
    ensure!(made.success());
    let want = sha256(&local)?;

    let started = Instant::now();
    let out = f.scp(&f.good, &local.display().to_string(), "nb@127.0.0.1:/tmp/big.bin").await?;
    ensure!(out.status.success(), "scp in: {}", text(&out.stderr));
    let upload = started.elapsed();
    let out = f.ssh(&f.good, "nb", &[], &["sha256sum /tmp/big.bin"], b"").await?;
    assert_eq!(text(&out.stdout).split_whitespace().next(), Some(want.as_str()), "{out:?}");
    let out = f.ssh(&f.good, "nb", &[], &["stat -c %u /tmp/big.bin"], b"").await?;
    assert_eq!(text(&out.stdout).trim(), UID, "the copy belongs to the owner");

    let back = f.dir.path().join("back.bin");
    let started = Instant::now();
    let out = f.scp(&f.good, "nb@127.0.0.1:/tmp/big.bin", &back.display().to_string()).await?;
    ensure!(out.status.success(), "scp out: {}", text(&out.stderr));
    let download = started.elapsed();
    assert_eq!(sha256(&back)?, want);
    let mib = |d: Duration| 100.0 / d.as_secs_f64();
    println!("scp 100 MiB: in {upload:?} ({:.1} MiB/s), out {download:?} ({:.1} MiB/s)", mib(upload), mib(download));

    // sftp works interactively too.
    let mut cmd = tokio::process::Command::new("sftp");
    cmd.args(f.ssh_options(&f.good)).args(["-b", "-", "-P", &f.addr.port().to_string(), "nb@127.0.0.1"]);
    let out = run(cmd, b"cd /tmp\nls -l big.bin\n", Duration::from_secs(60)).await?;
    ensure!(out.status.success(), "sftp: {}", text(&out.stderr));
    assert!(text(&out.stdout).contains("104857600"), "{}", text(&out.stdout));

    // ssh -L to JupyterLab, which listens on the container's 127.0.0.1 only.
    let port = free_port();
    let mut cmd = tokio::process::Command::new("ssh");
    cmd.args(f.ssh_options(&f.good)).args(["-N", "-L", &format!("{port}:localhost:8888")]);
    cmd.args(["-p", &f.addr.port().to_string(), "nb@127.0.0.1"]).kill_on_drop(true);
    let _tunnel = cmd.spawn()?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let api = loop {
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "5"])
            .arg(format!("http://127.0.0.1:{port}/api"))
            .output()?;
        if out.status.success() && text(&out.stdout).contains("version") {
            break text(&out.stdout);
        }
        ensure!(Instant::now() < deadline, "JupyterLab not reachable through ssh -L: {}", text(&out.stderr));
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(api.starts_with('{'), "{api}");
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg(format!("http://127.0.0.1:{port}/lab"))
        .output()?;
    assert_eq!(text(&out.stdout), "200", "{}", text(&out.stderr));
    Ok(())
}
