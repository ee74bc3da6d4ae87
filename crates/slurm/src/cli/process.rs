//! [`ProcessCli`]: commands as child processes (`tokio::process`), with a clean environment.

use super::pty::Pty;
use super::{Cmd, CmdOutput, Interactive, SlurmCli, Spawned};
use async_trait::async_trait;
use futures::StreamExt;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;

/// The `PATH` commands get when the hub's own has none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Runs commands as child processes of the hub, each with a clean environment: `PATH` (the hub's),
/// `SLURM_CONF` (when configured), `LC_ALL=C` (Slurm's text in one form), and for commands run as the
/// hub also its `HOME` and `DOCKER_HOST`. A command taking longer than the time limit is killed.
#[derive(Debug, Clone)]
pub struct ProcessCli {
    env: Vec<(String, String)>,
    hub_env: Vec<(String, String)>,
    timeout: Duration,
}

impl ProcessCli {
    /// Commands with `SLURM_CONF=conf` (when given), each cut off after `timeout`.
    pub fn new(conf: Option<&std::path::Path>, timeout: Duration) -> Self {
        let mut env = vec![
            ("PATH".to_owned(), std::env::var("PATH").unwrap_or_else(|_| DEFAULT_PATH.to_owned())),
            ("LC_ALL".to_owned(), "C".to_owned()),
        ];
        if let Some(conf) = conf {
            env.push(("SLURM_CONF".to_owned(), conf.to_string_lossy().into_owned()));
        }
        let hub_env = ["HOME", "DOCKER_HOST", "XDG_RUNTIME_DIR"]
            .iter()
            .filter_map(|k| std::env::var(k).ok().map(|v| ((*k).to_owned(), v)))
            .collect();
        ProcessCli { env, hub_env, timeout }
    }

    fn command(&self, cmd: &Cmd) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(&cmd.program);
        c.args(&cmd.args).env_clear().envs(self.env.iter().map(|(k, v)| (k, v))).kill_on_drop(true);
        match cmd.user {
            // std drops the supplementary groups when it changes the UID as root
            Some((uid, gid)) => {
                c.uid(uid).gid(gid).current_dir("/");
            }
            None => {
                c.envs(self.hub_env.iter().map(|(k, v)| (k, v)));
            }
        }
        c
    }
}

#[async_trait]
impl SlurmCli for ProcessCli {
    async fn run(&self, cmd: &Cmd) -> io::Result<CmdOutput> {
        let mut c = self.command(cmd);
        c.stdin(if cmd.stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn()?;
        if let (Some(input), Some(mut stdin)) = (cmd.stdin.clone(), child.stdin.take()) {
            tokio::spawn(async move {
                // a command that does not read its input closes the pipe: that is its business
                let _ = stdin.write_all(&input).await;
            });
        }
        let out = tokio::time::timeout(self.timeout, child.wait_with_output()).await.map_err(|_| {
            io::Error::new(io::ErrorKind::TimedOut, format!("{} took more than {:?}", cmd.name(), self.timeout))
        })??;
        Ok(CmdOutput { status: out.status.code(), stdout: out.stdout, stderr: out.stderr })
    }

    async fn spawn(&self, cmd: &Cmd, tty: Option<(u16, u16)>) -> io::Result<Spawned> {
        let mut c = self.command(cmd);
        match tty {
            Some((cols, rows)) => {
                let pty = Pty::open(cols, rows)?;
                c.stdin(pty.slave()?).stdout(pty.slave()?).stderr(pty.slave()?);
                let child = c.spawn()?;
                let pid = child.id();
                // the child holds the terminal's other side now; the parent's copies go with `c`
                drop(c);
                let (master, output, input) = pty.into_master()?;
                let process = Arc::new(Process { exit: watch_exit(child), pty: Some(master), pid });
                Ok(Spawned { input: Box::pin(input), output, process })
            }
            None => {
                c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
                let mut child = c.spawn()?;
                let input = child.stdin.take().ok_or_else(|| io::Error::other("no stdin pipe"))?;
                let stdout = child.stdout.take().ok_or_else(|| io::Error::other("no stdout pipe"))?;
                let stderr = child.stderr.take().ok_or_else(|| io::Error::other("no stderr pipe"))?;
                let output = futures::stream::select(super::chunks(stdout), super::chunks(stderr)).boxed();
                let pid = child.id();
                let process = Arc::new(Process { exit: watch_exit(child), pty: None, pid });
                Ok(Spawned { input: Box::pin(input), output, process })
            }
        }
    }
}

/// An exit status as gpuhub reports it: the code, or 128 + the signal.
fn exit_code(status: ExitStatus) -> i64 {
    match (status.code(), status.signal()) {
        (Some(code), _) => i64::from(code),
        (None, Some(sig)) => 128 + i64::from(sig),
        (None, None) => -1,
    }
}

/// How a process ended, once it has; `Err`: why its status could not be had.
type Exit = Option<Result<i64, String>>;

/// Waits for `child` in a task of its own, which tells its end to every waiter.
fn watch_exit(mut child: tokio::process::Child) -> watch::Receiver<Exit> {
    let (tx, rx) = watch::channel(None);
    tokio::spawn(async move {
        let status = child.wait().await.map(exit_code).map_err(|e| e.to_string());
        let _ = tx.send(Some(status));
    });
    rx
}

#[derive(Debug)]
struct Process {
    exit: watch::Receiver<Exit>,
    pty: Option<super::pty::Master>,
    pid: Option<u32>,
}

#[async_trait]
impl Interactive for Process {
    async fn wait(&self) -> io::Result<i64> {
        let mut exit = self.exit.clone();
        let ended =
            exit.wait_for(Option::is_some).await.map_err(|_| io::Error::other("the process's waiter is gone"))?;
        ended.clone().unwrap_or_else(|| Err("no exit status".into())).map_err(io::Error::other)
    }

    fn resize(&self, cols: u16, rows: u16) -> io::Result<()> {
        let pty = self.pty.as_ref().ok_or_else(|| io::Error::other("the process has no terminal"))?;
        pty.resize(cols, rows)?;
        // srun holds the terminal without it being its controlling one: tell it the size changed
        if let Some(pid) = self.pid.and_then(|p| i32::try_from(p).ok()).and_then(rustix::process::Pid::from_raw) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::WINCH);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use futures::TryStreamExt;

    #[tokio::test]
    async fn runs_with_a_clean_environment_and_stdin() {
        let cli = ProcessCli::new(Some(std::path::Path::new("/etc/slurm-test.conf")), Duration::from_secs(10));
        let out = cli
            .run(&Cmd::new("sh", ["-c", "echo $SLURM_CONF $LC_ALL; cat; echo err >&2; exit 3"]).with_stdin("in\n"))
            .await
            .unwrap();
        assert_eq!(out.stdout_text(), "/etc/slurm-test.conf C\nin\n");
        assert_eq!((out.status, out.stderr_text().as_str()), (Some(3), "err"));
        let err = cli.run(&Cmd::new("/nonexistent/sbatch", Vec::<String>::new())).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        let slow = ProcessCli::new(None, Duration::from_millis(200));
        let err = slow.run(&Cmd::new("sleep", ["5"])).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    }

    #[tokio::test]
    async fn spawns_with_pipes_and_with_a_terminal() {
        let cli = ProcessCli::new(None, Duration::from_secs(10));
        let mut s = cli.spawn(&Cmd::new("sh", ["-c", "read x; echo got $x; exit 4"]), None).await.unwrap();
        s.input.write_all(b"hi\n").await.unwrap();
        let out: Vec<Bytes> = s.output.try_collect().await.unwrap();
        assert_eq!(out.concat(), b"got hi\n");
        assert_eq!(wait_exit(&*s.process).await, 4);
        assert_eq!(wait_exit(&*s.process).await, 4, "again");
        assert!(s.process.resize(80, 24).is_err(), "no terminal");

        let mut t = cli
            .spawn(&Cmd::new("sh", ["-c", "stty size; test -t 0 && echo tty; read x; exit 5"]), Some((100, 30)))
            .await
            .unwrap();
        t.process.resize(120, 40).unwrap();
        t.input.write_all(b"bye\n").await.unwrap();
        let out: Vec<Bytes> = t.output.try_collect().await.unwrap();
        let text = String::from_utf8_lossy(&out.concat()).into_owned();
        assert!(text.contains("tty"), "{text:?}");
        assert!(text.contains("30 100") || text.contains("40 120"), "{text:?}");
        assert_eq!(wait_exit(&*t.process).await, 5);
    }

    async fn wait_exit(p: &dyn Interactive) -> i64 {
        tokio::time::timeout(Duration::from_secs(10), p.wait()).await.expect("the process ends").unwrap()
    }
}
