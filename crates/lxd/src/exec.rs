//! Exec into a member: LXD's exec operation with its websockets (`wait-for-websocket`): with a TTY one
//! socket carries the terminal both ways, without one stdin, stdout and stderr have a socket each; the
//! control socket takes window resizes. The operation's end gives the exit status.

use crate::engine::LxdEngine;
use crate::images::api_err;
use async_trait::async_trait;
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use gpuhub_driver::{EngineError, ExecControl, ExecHandle, ExecSpec};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::sync::{mpsc, watch};
use tokio_tungstenite::tungstenite::Message;

/// What runs a command without a terminal so that it outlives the hub: its output (stdout and stderr, one
/// stream, as [`ExecHandle::output`] is) goes through `cat`, and once the hub's end is gone (the hub
/// stopped or restarted: LXD closes the pipe) a second `cat` drains it to `/dev/null`, so an app started
/// with exec (JupyterLab) never writes into a broken pipe and dies of it, as a process of `docker exec`
/// does not. The command's exit status is passed out through fd 4 and is the script's own.
pub const DETACHED_OUTPUT: &str = "exec 3>&1; \
    s=$( { { \"$@\" 2>&1 3>&- 4>&-; echo $? >&4; } | { cat >&3 || cat >/dev/null; } 4>&-; } 4>&1 ); \
    exit \"${s:-1}\"";

/// The command LXD runs for `spec`: with a terminal as it is (a terminal ends with its client, as on
/// Docker), without one under [`DETACHED_OUTPUT`].
fn command(spec: &ExecSpec) -> Vec<String> {
    if spec.tty.is_some() {
        return spec.command.clone();
    }
    let mut cmd = vec!["/bin/sh".to_owned(), "-c".to_owned(), DETACHED_OUTPUT.to_owned(), "sh".to_owned()];
    cmd.extend(spec.command.iter().cloned());
    cmd
}

/// `uid:gid` as numbers.
fn user(spec: &ExecSpec) -> Result<(u32, u32), EngineError> {
    let bad = || EngineError::Rejected(format!("exec user {:?} is not uid:gid", spec.user));
    let (u, g) = spec.user.split_once(':').ok_or_else(bad)?;
    Ok((u.parse().map_err(|_| bad())?, g.parse().map_err(|_| bad())?))
}

impl LxdEngine {
    /// Starts `spec` in running container `name`.
    pub(crate) async fn start_exec(&self, name: &str, spec: &ExecSpec) -> Result<ExecHandle, EngineError> {
        if spec.command.is_empty() {
            return Err(EngineError::Rejected("exec needs a command".into()));
        }
        let (uid, gid) = user(spec)?;
        let (width, height) = spec.tty.unwrap_or((80, 24));
        let mut body = json!({
            "command": command(spec),
            "environment": spec.env,
            "wait-for-websocket": true,
            "interactive": spec.tty.is_some(),
            "width": width,
            "height": height,
            "user": uid,
            "group": gid,
            "record-output": false,
        });
        if let Some(cwd) = &spec.working_dir {
            body["cwd"] = cwd.clone().into();
        }
        let api = &self.inner.api;
        let op = api.start(http::Method::POST, &format!("/1.0/instances/{name}/exec"), &body).await.map_err(api_err)?;
        let fds = op.metadata.pointer("/metadata/fds").and_then(Value::as_object).cloned().unwrap_or_default();
        let secret = |k: &str| {
            fds.get(k)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| EngineError::Engine(format!("lxd's exec gave no websocket {k}")))
        };
        let control = api.websocket(&op.id, &secret("control")?).await.map_err(api_err)?;
        let fd0 = api.websocket(&op.id, &secret("0")?).await.map_err(api_err)?;
        let (fd1, fd2) = if spec.tty.is_some() {
            (None, None)
        } else {
            let a = api.websocket(&op.id, &secret("1")?).await.map_err(api_err)?;
            let b = api.websocket(&op.id, &secret("2")?).await.map_err(api_err)?;
            (Some(a), Some(b))
        };
        // control: resizes go out; nothing comes in that matters
        let (resize_tx, mut resize_rx) = mpsc::unbounded_channel::<String>();
        let (mut control_tx, mut control_rx) = control.split();
        tokio::spawn(async move {
            let mut resizes = true;
            loop {
                tokio::select! {
                    m = resize_rx.recv(), if resizes => match m {
                        Some(text) => { if control_tx.send(Message::text(text)).await.is_err() { return; } }
                        // the handle is gone: the control socket stays open until the exec ends, since
                        // LXD ends an exec whose control socket closes (an app started and left to run
                        // was killed with its handle)
                        None => resizes = false,
                    },
                    m = control_rx.next() => if !matches!(m, Some(Ok(_))) { return; },
                }
            }
        });
        // stdin: a pipe whose far end feeds socket 0
        let (input, mut input_rx) = tokio::io::duplex(64 * 1024);
        let (mut fd0_tx, fd0_rx) = fd0.split();
        let eof = std::sync::Arc::new(tokio::sync::Notify::new());
        let output_ended = eof.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                tokio::select! {
                    r = input_rx.read(&mut buf) => match r {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if fd0_tx.send(Message::binary(buf[..n].to_vec())).await.is_err() {
                                return;
                            }
                        }
                    },
                    _ = output_ended.notified() => break,
                }
            }
            let _ = fd0_tx.send(Message::Close(None)).await;
        });
        // LXD drops an output socket without a close frame once the process has ended: an error ends it
        let data = |m: Result<Message, tokio_tungstenite::tungstenite::Error>| async move {
            match m {
                Ok(Message::Binary(b)) => Some(Ok(b)),
                Ok(Message::Text(t)) => Some(Ok(Bytes::from(t.as_str().to_owned()))),
                _ => None,
            }
        };
        // an empty text message is LXD's end of output; with a terminal, LXD ends the operation only once
        // the client has closed its socket too, so stdin's is closed then
        let more = {
            let eof = eof.clone();
            move |m: &Result<Message, _>| {
                let end = match m {
                    Ok(Message::Text(t)) => t.is_empty(),
                    Ok(Message::Close(_)) | Err(_) => true,
                    Ok(_) => false,
                };
                if end {
                    eof.notify_one();
                }
                futures::future::ready(!end)
            }
        };
        let output = match (fd1, fd2) {
            (Some(a), Some(b)) => {
                drop(fd0_rx); // stdin's socket carries nothing back
                let (m1, m2) = (more.clone(), more);
                futures::stream::select(a.take_while(m1).filter_map(data), b.take_while(m2).filter_map(data)).boxed()
            }
            _ => fd0_rx.take_while(more).filter_map(data).boxed(),
        };
        // the operation's end is the process's: its status goes to every waiter
        let (exit_tx, exit) = watch::channel(None);
        let api = api.clone();
        let id = op.id.clone();
        tokio::spawn(async move {
            let code = match api.wait(&id, None).await {
                Ok(op) => op.metadata.get("return").and_then(Value::as_i64).unwrap_or(-1),
                Err(e) => {
                    tracing::debug!(exec = %id, error = %e, "lxd exec operation failed");
                    -1
                }
            };
            let _ = exit_tx.send(Some(code));
        });
        let exec = LxdExec { control: resize_tx, exit, tty: spec.tty.is_some() };
        Ok(ExecHandle::new(Box::pin(input), output, exec))
    }
}

/// An LXD exec: resizes go out on its control socket; its exit status is its operation's.
#[derive(Debug)]
struct LxdExec {
    control: mpsc::UnboundedSender<String>,
    exit: watch::Receiver<Option<i64>>,
    tty: bool,
}

#[async_trait]
impl ExecControl for LxdExec {
    /// Resizes the terminal; once the process has ended there is none left to resize, which is no
    /// failure.
    async fn resize(&self, cols: u16, rows: u16) -> Result<(), EngineError> {
        if !self.tty {
            return Err(EngineError::Rejected("the exec has no terminal".into()));
        }
        let msg = json!({"command": "window-resize", "args": {"width": cols.to_string(), "height": rows.to_string()}});
        let _ = self.control.send(msg.to_string());
        Ok(())
    }

    async fn wait(&self) -> Result<i64, EngineError> {
        let mut exit = self.exit.clone();
        let code = exit
            .wait_for(Option::is_some)
            .await
            .map_err(|_| EngineError::Engine("the exec's operation was no longer watched".into()))?;
        Ok(code.unwrap_or(-1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_without_a_terminal_keep_their_output_open() {
        let spec = ExecSpec { command: vec!["id".into(), "-u".into()], ..Default::default() };
        let cmd = command(&spec);
        assert_eq!(&cmd[..2], ["/bin/sh", "-c"]);
        assert_eq!(&cmd[3..], ["sh", "id", "-u"]);
        let tty = ExecSpec { tty: Some((80, 24)), ..spec };
        assert_eq!(command(&tty), ["id", "-u"]);
    }

    /// The wrapper in this host's `sh`: output and status pass through, stdin reaches the command.
    #[test]
    fn the_wrapper_passes_output_input_and_status() {
        use std::io::Write;
        let mut child = std::process::Command::new("sh")
            .args(["-c", DETACHED_OUTPUT, "sh", "sh", "-c", "read l; echo out $l; echo err >&2; exit 5"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(b"in\n").unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(5));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "out in\nerr\n");
    }

    #[test]
    fn exec_users_are_uid_gid() {
        let spec = |u: &str| ExecSpec { command: vec!["id".into()], user: u.into(), ..Default::default() };
        assert_eq!(user(&spec("1000:100")).unwrap(), (1000, 100));
        assert!(user(&spec("alice")).is_err());
        assert!(user(&spec("1000:x")).is_err());
    }
}
