//! The one way out of the engine: [`SlurmCli`] runs a command (a Slurm command, or `getent`, `docker`,
//! `skopeo`, `umoci`) and returns its exit status and output, or starts a long-lived interactive one
//! (exec). [`ProcessCli`] does it with `tokio::process`; [`crate::fake::FakeCli`] records and answers
//! from a script, for tests.

mod process;
mod pty;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;

pub use process::ProcessCli;

/// One command to run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Cmd {
    /// The program: a path, or a name found on `PATH`.
    pub program: String,
    pub args: Vec<String>,
    /// Run it as this UID and GID (no supplementary groups) instead of as the hub.
    pub user: Option<(u32, u32)>,
    /// Bytes written to its stdin, which is then closed (else stdin is empty).
    pub stdin: Option<Vec<u8>>,
}

impl Cmd {
    /// `program args…`.
    pub fn new<I, S>(program: impl Into<String>, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Cmd { program: program.into(), args: args.into_iter().map(Into::into).collect(), user: None, stdin: None }
    }

    /// Run as `uid:gid`.
    pub fn as_user(mut self, uid: u32, gid: u32) -> Self {
        self.user = Some((uid, gid));
        self
    }

    /// Feed `input` to stdin.
    pub fn with_stdin(mut self, input: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(input.into());
        self
    }

    /// The program's base name (`sbatch` for `/opt/slurm/bin/sbatch`).
    pub fn name(&self) -> &str {
        self.program.rsplit('/').next().unwrap_or(&self.program)
    }

    /// The argument vector, program first, as text.
    pub fn argv(&self) -> Vec<&str> {
        std::iter::once(self.program.as_str()).chain(self.args.iter().map(String::as_str)).collect()
    }
}

impl fmt::Display for Cmd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.argv().join(" "))
    }
}

/// What a command did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CmdOutput {
    /// Its exit status; `None` when a signal ended it.
    pub status: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl CmdOutput {
    /// Exit status 0 with this output.
    pub fn ok(stdout: impl Into<Vec<u8>>) -> Self {
        CmdOutput { status: Some(0), stdout: stdout.into(), stderr: Vec::new() }
    }

    /// Exit status `status` with this error output.
    pub fn fail(status: i32, stderr: impl Into<Vec<u8>>) -> Self {
        CmdOutput { status: Some(status), stdout: Vec::new(), stderr: stderr.into() }
    }

    /// Whether it exited 0.
    pub fn success(&self) -> bool {
        self.status == Some(0)
    }

    /// stdout as text (lossy).
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// stderr as one trimmed line of text (lossy; lines joined with `; `).
    pub fn stderr_text(&self) -> String {
        let text = String::from_utf8_lossy(&self.stderr);
        text.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("; ")
    }
}

/// A process started with [`SlurmCli::spawn`], still running or not.
#[async_trait]
pub trait Interactive: Send + Sync + fmt::Debug {
    /// Waits for it to end and answers its exit code (128 + the signal when a signal ended it); any number
    /// of times.
    async fn wait(&self) -> std::io::Result<i64>;
    /// Resizes its pseudo-terminal (an error without one).
    fn resize(&self, cols: u16, rows: u16) -> std::io::Result<()>;
}

/// A started interactive process: its stdin, its output (stdout and stderr in one stream, or the
/// terminal's output), and a handle on it.
pub struct Spawned {
    pub input: Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    pub output: BoxStream<'static, std::io::Result<Bytes>>,
    pub process: Arc<dyn Interactive>,
}

impl fmt::Debug for Spawned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Spawned").field("process", &self.process).finish_non_exhaustive()
    }
}

/// Everything the engine runs outside itself.
#[async_trait]
pub trait SlurmCli: Send + Sync + fmt::Debug {
    /// Runs `cmd` to its end. An error means it could not be started (or was cut off by the time
    /// limit every command has), not that it failed.
    async fn run(&self, cmd: &Cmd) -> std::io::Result<CmdOutput>;
    /// Starts `cmd` attached: with a pseudo-terminal of `tty` (columns, rows) on the hub's side as its
    /// stdin, stdout and stderr, or with pipes.
    async fn spawn(&self, cmd: &Cmd, tty: Option<(u16, u16)>) -> std::io::Result<Spawned>;
}

/// A reader as a stream of chunks (at most 64 KiB each), until its end.
fn chunks<R: tokio::io::AsyncRead + Unpin + Send + 'static>(reader: R) -> BoxStream<'static, std::io::Result<Bytes>> {
    use futures::StreamExt;
    futures::stream::unfold(Some(reader), |reader| async move {
        let mut reader = reader?;
        let mut buf = vec![0u8; 64 * 1024];
        match tokio::io::AsyncReadExt::read(&mut reader, &mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(Bytes::from(buf)), Some(reader)))
            }
            Err(e) => Some((Err(e), None)),
        }
    })
    .boxed()
}
