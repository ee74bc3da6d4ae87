//! OpenSSH clients against the hub's gateway: keys from `ssh-keygen`, `ssh`/`scp` kept away from the
//! user's own configuration and agent, and `tmux` as the terminal of an interactive session.

use super::{WAIT, describe, eventually};
use anyhow::{Context as _, Result, anyhow, ensure};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

/// An ed25519 key pair on disk.
#[derive(Debug, Clone)]
pub struct Key {
    /// The private key file (`-i`).
    pub private: PathBuf,
    /// The `.pub` file.
    pub public: PathBuf,
}

impl Key {
    /// The public key's line.
    pub fn public_line(&self) -> Result<String> {
        Ok(std::fs::read_to_string(&self.public)?.trim().to_owned())
    }
}

/// Makes `DIR/NAME` and `DIR/NAME.pub` with `ssh-keygen` (no passphrase).
pub async fn keygen(dir: &Path, name: &str) -> Result<Key> {
    let private = dir.join(name);
    let out = tokio::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
        .arg(&private)
        .stdin(Stdio::null())
        .output()
        .await
        .context("run ssh-keygen")?;
    ensure!(out.status.success(), "ssh-keygen: {}", describe(&out));
    Ok(Key { public: private.with_extension("pub"), private })
}

/// Signs `message` with the key (`ssh-keygen -Y sign -n NAMESPACE`): the proof of possession the hub
/// asks for when a key is registered through the API.
pub async fn sign(key: &Key, namespace: &str, message: &str) -> Result<String> {
    let file = key.private.with_extension("challenge");
    std::fs::write(&file, message)?;
    let out = tokio::process::Command::new("ssh-keygen")
        .args(["-q", "-Y", "sign", "-n", namespace, "-f"])
        .arg(&key.private)
        .arg(&file)
        .stdin(Stdio::null())
        .output()
        .await
        .context("run ssh-keygen -Y sign")?;
    ensure!(out.status.success(), "ssh-keygen -Y sign: {}", describe(&out));
    Ok(std::fs::read_to_string(file.with_extension("challenge.sig"))?)
}

/// Options for `ssh` and `scp`: the gateway's port, only this key, no agent, no prompts, no
/// known-hosts file, no user config.
pub fn options(port: u16, key: &Key) -> Vec<String> {
    let mut v: Vec<String> = vec!["-F".into(), "/dev/null".into(), "-i".into(), key.private.display().to_string()];
    for o in [
        format!("Port={port}"),
        "IdentitiesOnly=yes".into(),
        "IdentityAgent=none".into(),
        "BatchMode=yes".into(),
        "StrictHostKeyChecking=no".into(),
        "UserKnownHostsFile=/dev/null".into(),
        "LogLevel=ERROR".into(),
        "ConnectTimeout=10".into(),
    ] {
        v.push("-o".into());
        v.push(o);
    }
    v
}

/// The same options as one shell-quoted string, for a command line tmux runs.
pub fn options_line(port: u16, key: &Key) -> String {
    options(port, key).iter().map(|o| format!("'{o}'")).collect::<Vec<_>>().join(" ")
}

/// `ssh OPTIONS -- DEST ARGS…`, not run yet.
pub fn ssh(port: u16, key: &Key, dest: &str, args: &[&str]) -> tokio::process::Command {
    ssh_with(port, key, &[], dest, args)
}

/// `ssh OPTIONS EXTRA -- DEST ARGS…`, not run yet.
pub fn ssh_with(port: u16, key: &Key, extra: &[&str], dest: &str, args: &[&str]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("ssh");
    cmd.args(options(port, key)).args(extra).arg("--").arg(dest).args(args).stdin(Stdio::null()).kill_on_drop(true);
    cmd
}

/// Runs a command to its end (at most `within`, a safety net) and returns its output.
pub async fn run(mut cmd: tokio::process::Command, within: Duration) -> Result<Output> {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let out = tokio::time::timeout(within, cmd.output()).await;
    out.map_err(|_| anyhow!("{cmd:?} ran longer than {within:?}"))?.context("spawn")
}

/// `ssh … DEST ARGS`, which must succeed; its standard output.
pub async fn ok(port: u16, key: &Key, dest: &str, args: &[&str]) -> Result<String> {
    let out = run(ssh(port, key, dest, args), WAIT).await?;
    ensure!(out.status.success(), "ssh {dest} {args:?}: {}", describe(&out));
    Ok(String::from_utf8(out.stdout)?)
}

/// `scp OPTIONS FROM TO`, which must succeed.
pub async fn scp(port: u16, key: &Key, from: &str, to: &str) -> Result<()> {
    let mut cmd = tokio::process::Command::new("scp");
    cmd.args(options(port, key)).args(["-q", "--", from, to]).stdin(Stdio::null()).kill_on_drop(true);
    let out = run(cmd, WAIT).await?;
    ensure!(out.status.success(), "scp {from} {to}: {}", describe(&out));
    Ok(())
}

/// A detached tmux session on a server of its own, running one command; the server is killed on drop.
#[derive(Debug)]
pub struct Tmux {
    socket: String,
}

impl Tmux {
    /// Starts `command` (a shell line) in a `cols`×`rows` window.
    pub async fn start(command: &str, cols: u16, rows: u16) -> Result<Tmux> {
        let tmux = Tmux { socket: format!("gpuhub-access-{}", super::suffix()) };
        let (x, y) = (cols.to_string(), rows.to_string());
        tmux.ok(&["new-session", "-d", "-s", "main", "-x", &x, "-y", &y, command]).await?;
        tmux.ok(&["set-option", "-t", "main", "remain-on-exit", "on"]).await?;
        Ok(tmux)
    }

    async fn ok(&self, args: &[&str]) -> Result<String> {
        let mut cmd = tokio::process::Command::new("tmux");
        cmd.args(["-L", &self.socket, "-f", "/dev/null"]).args(args).stdin(Stdio::null());
        let out = run(cmd, Duration::from_secs(30)).await?;
        ensure!(out.status.success(), "tmux {args:?}: {}", describe(&out));
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Types `text`, then Enter.
    pub async fn type_line(&self, text: &str) -> Result<()> {
        self.ok(&["send-keys", "-t", "main", "-l", text]).await?;
        self.ok(&["send-keys", "-t", "main", "Enter"]).await.map(drop)
    }

    /// The visible screen.
    pub async fn screen(&self) -> Result<String> {
        self.ok(&["capture-pane", "-p", "-t", "main"]).await
    }

    /// Waits until some screen line, trimmed, equals `line` (polling the screen: tmux has no signal for
    /// output); returns the screen.
    pub async fn wait_line(&self, line: &str) -> Result<String> {
        let what = format!("a line {line:?} on the tmux screen");
        let found = eventually(&what, WAIT, Duration::from_millis(100), || async {
            let screen = self.screen().await?;
            Ok(screen.lines().any(|l| l.trim() == line).then_some(screen))
        })
        .await;
        match found {
            Ok(screen) => Ok(screen),
            Err(e) => Err(e.context(format!("the screen:\n{}", self.screen().await.unwrap_or_default()))),
        }
    }

    /// Resizes the window (the client in it gets SIGWINCH).
    pub async fn resize(&self, cols: u16, rows: u16) -> Result<()> {
        self.ok(&["resize-window", "-t", "main", "-x", &cols.to_string(), "-y", &rows.to_string()]).await.map(drop)
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = std::process::Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}
