//! The gateway against OpenSSH's clients and real busybox containers on Docker.

mod common;

use anyhow::{Result, ensure};
use common::*;
use std::process::Command;
use std::time::{Duration, Instant};

/// A busybox workspace serving /tmp/www over HTTP on 8080 (all addresses) and 8081 (loopback only).
async fn busybox(f: &Fixture) -> Result<Container> {
    build_image("build-busybox-image.sh")?;
    let script = "mkdir -p /tmp/www && echo hello-from-the-workspace > /tmp/www/hello.txt \
                  && httpd -p 8080 -h /tmp/www && httpd -p 127.0.0.1:8081 -h /tmp/www && exec sleep 100000";
    container(&f.runtime, BUSYBOX, &["sh", "-c", script]).await
}

#[tokio::test(flavor = "multi_thread")]
async fn commands_run_as_the_owner_with_exit_status_and_stdin() -> Result<()> {
    let f = Fixture::start().await?;
    let c = busybox(&f).await?;
    f.allow("ws", "ws", Some(&c.id));

    let out = f.ssh(&f.good, "ws", &[], &["id", "-u"], b"").await?;
    ensure!(out.status.success(), "ssh id -u: {out:?}");
    assert_eq!(text(&out.stdout), format!("{UID}\n"));

    let out = f.ssh(&f.good, "ws", &[], &["sh -c 'exit 7'"], b"").await?;
    assert_eq!(out.status.code(), Some(7), "{out:?}");

    let out = f.ssh(&f.good, "ws", &[], &["false"], b"").await?;
    assert_eq!(out.status.code(), Some(1), "{out:?}");

    // stdin reaches the process and its end is passed on (wc would wait forever otherwise).
    let out = f.ssh(&f.good, "ws", &[], &["wc -c"], &vec![b'x'; 300_000]).await?;
    ensure!(out.status.success(), "{out:?}");
    assert_eq!(text(&out.stdout).trim(), "300000");

    // HOME, USER and the working directory are the owner's.
    let out = f.ssh(&f.good, "ws", &[], &["echo $HOME $USER $(pwd)"], b"").await?;
    assert_eq!(text(&out.stdout), "/tmp alice /tmp\n", "{out:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn wrong_keys_and_unknown_users_are_refused() -> Result<()> {
    let f = Fixture::start().await?;
    let c = busybox(&f).await?;
    f.allow("ws", "ws", Some(&c.id));

    let out = f.ssh(&f.bad, "ws", &[], &["id", "-u"], b"").await?;
    assert_eq!(out.status.code(), Some(255), "{out:?}");
    assert!(text(&out.stderr).contains("Permission denied (publickey)"), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty());

    let out = f.ssh(&f.good, "nobody-here", &[], &["id", "-u"], b"").await?;
    assert_eq!(out.status.code(), Some(255), "{out:?}");
    assert!(text(&out.stderr).contains("Permission denied (publickey)"), "{}", text(&out.stderr));

    // Passwords are never offered, even when the client would try them.
    let mut cmd = tokio::process::Command::new("ssh");
    cmd.args(f.ssh_options(&f.bad)).args(["-o", "PreferredAuthentications=password,keyboard-interactive"]);
    cmd.args(["-p", &f.addr.port().to_string(), "ws@127.0.0.1", "true"]);
    let out = run(cmd, b"", Duration::from_secs(30)).await?;
    assert_eq!(out.status.code(), Some(255));
    assert!(text(&out.stderr).contains("Permission denied (publickey)"), "{}", text(&out.stderr));

    let asked = f.backend.asked.lock().unwrap().clone();
    assert!(asked.iter().any(|(u, fp)| u == "ws" && *fp == f.bad.fingerprint), "{asked:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn stopped_workspaces_get_a_clear_message_quickly() -> Result<()> {
    let f = Fixture::start().await?;
    f.allow("stopped", "stopped", None);
    let started = Instant::now();
    let out = f.ssh(&f.good, "stopped", &[], &["id", "-u"], b"").await?;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        text(&out.stderr).contains("workspace stopped is not running: start it with `gpuhub start stopped`"),
        "{}",
        text(&out.stderr)
    );
    // An interactive login says the same and does not hang.
    let out = f.ssh(&f.good, "stopped", &["-tt"], &[], b"").await?;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text(&out.stderr).contains("workspace stopped is not running"), "{out:?}");

    // A workspace whose container stopped after the server looked.
    let c = busybox(&f).await?;
    f.allow("gone", "gone", Some(&c.id));
    let out = f.ssh(&f.good, "gone", &[], &["true"], b"").await?;
    assert!(out.status.success(), "{out:?}");
    let stop = Command::new("docker").args(["stop", "-t", "0", &c.id]).output()?;
    ensure!(stop.status.success());
    let out = f.ssh(&f.good, "gone", &[], &["true"], b"").await?;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text(&out.stderr).contains("workspace gone is not running"), "{}", text(&out.stderr));
    assert!(started.elapsed() < Duration::from_secs(30), "took {:?}", started.elapsed());
    Ok(())
}

/// A tmux session of its own (own server socket), killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn cmd(&self, args: &[&str]) -> Result<String> {
        let out = Command::new("tmux").arg("-L").arg(&self.socket).args(args).output()?;
        ensure!(out.status.success(), "tmux {args:?}: {}", text(&out.stderr));
        Ok(text(&out.stdout))
    }

    fn screen(&self) -> Result<String> {
        self.cmd(&["capture-pane", "-p", "-t", "t"])
    }

    async fn wait_for(&self, what: &str, pred: impl Fn(&str) -> bool) -> Result<String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let screen = self.screen()?;
            if pred(&screen) {
                return Ok(screen);
            }
            ensure!(Instant::now() < deadline, "no {what} on the screen:\n{screen}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").arg("-L").arg(&self.socket).arg("kill-server").output();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn interactive_pty_sessions_work_and_resize() -> Result<()> {
    let f = Fixture::start().await?;
    let c = busybox(&f).await?;
    f.allow("ws", "ws", Some(&c.id));

    let mut ssh = vec!["ssh".to_string()];
    ssh.extend(f.ssh_options(&f.good));
    ssh.extend(["-tt".into(), "-p".into(), f.addr.port().to_string(), "ws@127.0.0.1".into()]);
    let line = ssh.iter().map(|a| format!("'{a}'")).collect::<Vec<_>>().join(" ");
    let tmux = Tmux { socket: format!("gpuhub-ssh-test-{}", std::process::id()) };
    tmux.cmd(&["-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", "120", "-y", "40", &line])?;

    // busybox sh -l shows a prompt ending in "$ " for a non-root user.
    tmux.wait_for("prompt", |s| s.lines().any(|l| l.trim_end().ends_with('$'))).await?;
    tmux.cmd(&["send-keys", "-t", "t", "echo $((6*7))", "Enter"])?;
    tmux.wait_for("42", |s| s.lines().any(|l| l.trim() == "42")).await?;

    // The terminal has the client's size, and follows it.
    tmux.cmd(&["send-keys", "-t", "t", "stty size", "Enter"])?;
    tmux.wait_for("40 120", |s| s.lines().any(|l| l.trim() == "40 120")).await?;
    tmux.cmd(&["resize-window", "-t", "t", "-x", "100", "-y", "30"])?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    tmux.cmd(&["send-keys", "-t", "t", "clear; stty size", "Enter"])?;
    tmux.wait_for("30 100", |s| s.lines().any(|l| l.trim() == "30 100")).await?;

    // It is a real terminal: isatty, and id -u is the owner's.
    tmux.cmd(&["send-keys", "-t", "t", "clear; [ -t 0 ] && echo tty-$(id -u)", "Enter"])?;
    tmux.wait_for("tty line", |s| s.lines().any(|l| l.trim() == format!("tty-{UID}"))).await?;

    // Leaving the shell ends the ssh session (the tmux session goes away with it).
    tmux.cmd(&["send-keys", "-t", "t", "exit", "Enter"])?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while tmux.cmd(&["has-session", "-t", "t"]).is_ok() {
        ensure!(Instant::now() < deadline, "ssh did not end after exit:\n{}", tmux.screen()?);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

async fn curl_until(url: &str) -> Result<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = Command::new("curl").args(["-sS", "--max-time", "5", url]).output()?;
        if out.status.success() {
            return Ok(text(&out.stdout));
        }
        ensure!(Instant::now() < deadline, "curl {url}: {}", text(&out.stderr));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn local_port_forwarding_reaches_the_container_only() -> Result<()> {
    let f = Fixture::start().await?;
    let c = busybox(&f).await?;
    f.allow("ws", "ws", Some(&c.id));
    let (direct, looped, forbidden) = (free_port(), free_port(), free_port());
    let forwards =
        [format!("{direct}:localhost:8080"), format!("{looped}:127.0.0.1:8081"), format!("{forbidden}:example.com:80")];
    let mut cmd = tokio::process::Command::new("ssh");
    // Refused channels are reported at level INFO (the first value of an option wins).
    cmd.args(["-o", "LogLevel=INFO"]).args(f.ssh_options(&f.good)).arg("-N");
    for fw in &forwards {
        cmd.arg("-L").arg(fw);
    }
    cmd.args(["-p", &f.addr.port().to_string(), "ws@127.0.0.1"]);
    cmd.kill_on_drop(true).stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn()?;

    let body = curl_until(&format!("http://127.0.0.1:{direct}/hello.txt")).await?;
    assert_eq!(body, "hello-from-the-workspace\n");
    // Served only on the container's loopback: reached through a relay inside the container.
    let body = curl_until(&format!("http://127.0.0.1:{looped}/hello.txt")).await?;
    assert_eq!(body, "hello-from-the-workspace\n");
    // Anything but the container is refused.
    let out =
        Command::new("curl").args(["-sS", "--max-time", "5"]).arg(format!("http://127.0.0.1:{forbidden}/")).output()?;
    assert!(!out.status.success(), "forwarding to another host worked: {}", text(&out.stdout));

    child.start_kill()?;
    let out = child.wait_with_output().await?;
    assert!(text(&out.stderr).contains("only ports of workspace ws can be forwarded"), "{}", text(&out.stderr));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn images_without_sftp_server_say_so() -> Result<()> {
    let f = Fixture::start().await?;
    let c = busybox(&f).await?;
    f.allow("ws", "ws", Some(&c.id));
    let started = Instant::now();
    let mut cmd = tokio::process::Command::new("sftp");
    cmd.args(f.ssh_options(&f.good)).args(["-b", "-", "-P", &f.addr.port().to_string(), "ws@127.0.0.1"]);
    let out = run(cmd, b"ls\n", Duration::from_secs(30)).await?;
    assert!(!out.status.success(), "{out:?}");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("this workspace image has no sftp server (install openssh-sftp-server in the image)"),
        "{stderr}"
    );

    let local = f.dir.path().join("x");
    std::fs::write(&local, "x")?;
    let out = f.scp(&f.good, &local.display().to_string(), "ws@127.0.0.1:/tmp/x").await?;
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("has no sftp server"), "{}", text(&out.stderr));
    assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());
    Ok(())
}

/// Security review finding 1: an open session ends when its account's access is revoked (an account
/// disabled or deleted), while another account's revocation leaves it alone.
#[tokio::test(flavor = "multi_thread")]
async fn an_open_session_closes_when_its_account_is_revoked() -> Result<()> {
    use tokio::io::AsyncBufReadExt;
    let f = Fixture::start().await?;
    let c = busybox(&f).await?;
    f.allow("ws", "ws", Some(&c.id));
    let mut cmd = tokio::process::Command::new("ssh");
    cmd.args(f.ssh_options(&f.good)).arg("-p").arg(f.addr.port().to_string()).arg("ws@127.0.0.1");
    cmd.arg("echo started; sleep 600; echo survived");
    cmd.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    cmd.kill_on_drop(true);
    let mut child = cmd.spawn()?;
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(60), lines.next_line()).await??;
    assert_eq!(first.as_deref(), Some("started"));
    f.backend.revoke("bob");
    f.backend.revoke("alice");
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .map_err(|_| anyhow::anyhow!("the session outlived its account's revocation"))??;
    assert!(!status.success(), "{status:?}");
    assert_eq!(lines.next_line().await?, None, "nothing after the revocation");
    Ok(())
}
