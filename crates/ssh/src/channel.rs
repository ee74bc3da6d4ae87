//! One SSH session channel: collects the client's `pty-req`/`env`, then starts a shell, a command or
//! the sftp server in the container and bridges it both ways until the process exits.

use crate::{Shared, Target};
use futures::StreamExt;
use gpuhub_driver::{EngineError, ExecHandle, ExecProcess, ExecSpec};
use russh::server::Msg;
use russh::{Channel, ChannelMsg, ChannelWriteHalf};
use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// A login shell: bash when the image has it, else sh.
const SHELL: &str = "if [ -x /bin/bash ]; then exec /bin/bash -l; fi; exec /bin/sh -l";

/// How long a channel whose process's output has ended waits for its exit code.
const EXIT_WAIT: Duration = Duration::from_secs(10);

/// What the client asked the channel to run.
#[derive(Debug)]
enum Kind {
    Shell,
    Command(String),
    Sftp,
}

type Writer = Arc<ChannelWriteHalf<Msg>>;
type Stdin = Pin<Box<dyn AsyncWrite + Send>>;

/// The message for a workspace that is not running.
pub(crate) fn not_running(target: &Target) -> String {
    format!("workspace {ws} is not running: start it with `gpuhub start {ws}`", ws = target.workspace)
}

/// Serves one session channel until the client closes it or the process ends.
pub(crate) async fn serve(shared: Arc<Shared>, target: Target, channel: Channel<Msg>) {
    let (mut rx, tx) = channel.split();
    let tx: Writer = Arc::new(tx);
    let mut pty: Option<(String, u16, u16)> = None;
    let mut env = BTreeMap::new();
    let mut started = false;
    let mut process: Option<ExecProcess> = None;
    let mut stdin: Option<Stdin> = None;
    while let Some(msg) = rx.wait().await {
        match msg {
            ChannelMsg::RequestPty { term, col_width, row_height, .. } => {
                pty = Some((term, clamp(col_width), clamp(row_height)));
            }
            ChannelMsg::SetEnv { variable_name, variable_value, .. } if allowed_env(&variable_name) => {
                env.insert(variable_name, variable_value);
            }
            ChannelMsg::WindowChange { col_width, row_height, .. } => {
                let (cols, rows) = (clamp(col_width), clamp(row_height));
                if let Some(p) = pty.as_mut() {
                    (p.1, p.2) = (cols, rows);
                }
                if let Some(p) = &process {
                    if let Err(e) = p.resize(cols, rows).await {
                        tracing::debug!(error = %e, "exec resize failed");
                    }
                }
            }
            ChannelMsg::RequestShell { .. } | ChannelMsg::Exec { .. } | ChannelMsg::RequestSubsystem { .. }
                if started => {}
            ChannelMsg::RequestShell { .. } => {
                started = true;
                (process, stdin) = start(&shared, &target, &tx, Kind::Shell, pty.as_ref(), &env).await;
            }
            ChannelMsg::Exec { command, .. } => {
                started = true;
                let command = String::from_utf8_lossy(&command).into_owned();
                (process, stdin) = start(&shared, &target, &tx, Kind::Command(command), pty.as_ref(), &env).await;
            }
            ChannelMsg::RequestSubsystem { name, .. } => {
                started = true;
                if name == "sftp" {
                    (process, stdin) = start(&shared, &target, &tx, Kind::Sftp, None, &env).await;
                } else {
                    fail(&tx, &format!("unknown subsystem {name}"), false).await;
                }
            }
            ChannelMsg::Data { data } => {
                if let Some(input) = stdin.as_mut() {
                    if input.write_all(&data).await.and(input.flush().await).is_err() {
                        stdin = None;
                    }
                }
            }
            ChannelMsg::Eof => {
                if let Some(mut input) = stdin.take() {
                    let _ = input.shutdown().await;
                }
            }
            ChannelMsg::Close => break,
            _ => {}
        }
    }
}

fn clamp(n: u32) -> u16 {
    u16::try_from(n).unwrap_or(u16::MAX)
}

fn allowed_env(name: &str) -> bool {
    name == "LANG" || name.starts_with("LC_") || name == "COLORTERM" || name == "TZ"
}

/// Starts the process for `kind`; returns it (to resize) and its stdin, or (after telling the client why and
/// closing the channel) nothing.
async fn start(
    shared: &Shared,
    target: &Target,
    tx: &Writer,
    kind: Kind,
    pty: Option<&(String, u16, u16)>,
    client_env: &BTreeMap<String, String>,
) -> (Option<ExecProcess>, Option<Stdin>) {
    let crlf = pty.is_some();
    if let Some(problem) = &target.problem {
        fail(tx, problem, crlf).await;
        return (None, None);
    }
    let Some(member) = target.member.as_ref() else {
        fail(tx, &not_running(target), crlf).await;
        return (None, None);
    };
    let mut env = client_env.clone();
    env.insert("HOME".into(), target.home.clone());
    env.insert("USER".into(), target.owner.clone());
    env.insert("LOGNAME".into(), target.owner.clone());
    if let Some((term, _, _)) = pty {
        env.insert("TERM".into(), if term.is_empty() { "xterm".into() } else { term.clone() });
    }
    let command = match &kind {
        Kind::Shell => vec!["/bin/sh".into(), "-c".into(), SHELL.into()],
        Kind::Command(cmd) => vec!["/bin/sh".into(), "-c".into(), cmd.clone()],
        Kind::Sftp => match crate::sftp::plan(shared.engine.as_ref(), member, target).await {
            Ok(crate::sftp::Plan::Run(command)) => {
                let name: String = target
                    .owner
                    .chars()
                    .map(|c| if c.is_ascii_alphanumeric() || "_.-".contains(c) { c } else { '_' })
                    .collect();
                env.insert("GPUHUB_NAME".into(), name);
                command
            }
            Ok(crate::sftp::Plan::Refuse(message)) => {
                fail(tx, &message, false).await;
                return (None, None);
            }
            Err(e) => {
                fail(tx, &exec_failed(target, &e), false).await;
                return (None, None);
            }
        },
    };
    let spec = ExecSpec {
        command,
        user: target.user.clone(),
        env,
        working_dir: Some(target.home.clone()),
        tty: pty.map(|&(_, cols, rows)| (cols, rows)),
    };
    let handle = match shared.engine.exec(member, &spec).await {
        Ok(h) => h,
        Err(e) => {
            fail(tx, &exec_failed(target, &e), crlf).await;
            return (None, None);
        }
    };
    let ExecHandle { input, output, process } = handle;
    if let Some((cols, rows)) = spec.tty {
        // Engines differ in whether the initial console size sticks; set it once more.
        let _ = process.resize(cols, rows).await;
    }
    tokio::spawn(pump(process.clone(), output, tx.clone()));
    (Some(process), Some(input))
}

/// Copies the process's output to the channel, then sends its exit status (once the engine has it), EOF
/// and close.
async fn pump(process: ExecProcess, mut output: gpuhub_driver::LogStream, tx: Writer) {
    while let Some(chunk) = output.next().await {
        match chunk {
            Ok(bytes) => {
                if tx.data_bytes(bytes).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "exec output failed");
                break;
            }
        }
    }
    drop(output);
    // the engine's signal of the process's end; one that closed its output but lingers on is not waited
    // for past EXIT_WAIT (the channel closes without an exit status)
    match tokio::time::timeout(EXIT_WAIT, process.wait()).await {
        Ok(Ok(code)) => {
            let _ = tx.exit_status(u32::try_from(code).unwrap_or(255)).await;
        }
        Ok(Err(e)) => tracing::debug!(error = %e, "exec exit code unavailable"),
        Err(_) => tracing::debug!("the exec's output ended but its process did not"),
    }
    let _ = tx.eof().await;
    let _ = tx.close().await;
}

fn exec_failed(target: &Target, e: &EngineError) -> String {
    let text = e.to_string();
    if matches!(e, EngineError::NotFound(_)) || text.contains("is not running") {
        not_running(target)
    } else {
        format!("cannot start a process in workspace {}: {text}", target.workspace)
    }
}

/// Tells the client why nothing runs (on stderr), then exit status 1, EOF and close.
async fn fail(tx: &Writer, message: &str, crlf: bool) {
    let line = if crlf { format!("{message}\r\n") } else { format!("{message}\n") };
    let _ = tx.extended_data_bytes(1, line.into_bytes()).await;
    let _ = tx.exit_status(1).await;
    let _ = tx.eof().await;
    let _ = tx.close().await;
}
