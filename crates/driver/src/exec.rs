//! A process started inside a running member ([`crate::Engine::exec`]). Its [`ExecHandle`] carries all
//! there is to it: its stdin, its output, and the engine's hold on the process ([`ExecProcess`]), through
//! which callers resize its terminal and wait for its exit code. An exec has no id to look up and nothing
//! is polled: each engine's wait resolves on the engine's own signal (Docker: the attached output's end,
//! then one inspect; Slurm: the `srun` child's exit; LXD: the exec operation's end; Kubernetes: the exec
//! stream's closing status).

use crate::{EngineError, LogStream};
use async_trait::async_trait;
use futures::{Stream, StreamExt};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

/// An exec's stdin.
pub type ExecInput = Pin<Box<dyn AsyncWrite + Send>>;

/// What an engine keeps of one exec, so that its handle can resize its terminal and learn how it ended.
/// Implemented by each engine for its own execs.
#[async_trait]
pub trait ExecControl: Send + Sync + std::fmt::Debug {
    /// Resizes the process's pseudo-terminal. An exec without one is [`EngineError::Rejected`]; one that
    /// has ended may be resized harmlessly or refused, as the engine can tell.
    async fn resize(&self, cols: u16, rows: u16) -> Result<(), EngineError>;
    /// Waits until the process has ended and answers its exit code (128 + the signal where a signal ended
    /// it, where the engine tells). Callable any number of times, from any clone of the handle. Some
    /// engines learn of the end only from the output's: read [`ExecHandle::output`] to its end (or drop
    /// it) first, else this may wait for as long as the process runs.
    async fn wait(&self) -> Result<i64, EngineError>;
}

/// The engine's hold on an exec's process: resize its terminal, wait for its exit code. Cheap to clone,
/// so that the half that writes (resizes) and the half that reads (waits) can go to different tasks.
#[derive(Debug, Clone)]
pub struct ExecProcess(Arc<dyn ExecControl>);

impl ExecProcess {
    /// The process as `control` holds it.
    pub fn new(control: impl ExecControl + 'static) -> Self {
        ExecProcess(Arc::new(control))
    }

    /// Resizes its pseudo-terminal (see [`ExecControl::resize`]).
    pub async fn resize(&self, cols: u16, rows: u16) -> Result<(), EngineError> {
        self.0.resize(cols, rows).await
    }

    /// Its exit code once it has ended (see [`ExecControl::wait`]).
    pub async fn wait(&self) -> Result<i64, EngineError> {
        self.0.wait().await
    }
}

/// A process started inside a running member: write to its stdin, read its output, resize its terminal
/// and wait for its exit code through the handle (or take it apart for several tasks: the fields are
/// public, and [`ExecProcess`] clones).
pub struct ExecHandle {
    /// The process's stdin.
    pub input: ExecInput,
    /// stdout and stderr (one stream; with a TTY they are one anyway). Ends when the process ends.
    pub output: LogStream,
    /// Resizes and waits.
    pub process: ExecProcess,
}

impl ExecHandle {
    /// A handle of these parts.
    pub fn new(input: ExecInput, output: LogStream, control: impl ExecControl + 'static) -> Self {
        ExecHandle { input, output, process: ExecProcess::new(control) }
    }

    /// Writes `data` to the process's stdin, all of it, and flushes it.
    pub async fn write(&mut self, data: &[u8]) -> std::io::Result<()> {
        self.input.write_all(data).await?;
        self.input.flush().await
    }

    /// Resizes its pseudo-terminal (see [`ExecControl::resize`]). The future holds no borrow of the
    /// handle (which is not `Sync`: its stdin and output are not), so it is `Send` where the handle is.
    pub fn resize(&self, cols: u16, rows: u16) -> impl Future<Output = Result<(), EngineError>> + Send + 'static {
        let process = self.process.clone();
        async move { process.resize(cols, rows).await }
    }

    /// Its exit code once it has ended (see [`ExecControl::wait`]); `Send` as [`ExecHandle::resize`] is.
    pub fn wait(&self) -> impl Future<Output = Result<i64, EngineError>> + Send + 'static {
        let process = self.process.clone();
        async move { process.wait().await }
    }
}

impl std::fmt::Debug for ExecHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecHandle").field("process", &self.process).finish_non_exhaustive()
    }
}

/// Signals that an exec's output has ended, for engines that learn of the process's end from it (see
/// [`watch_end`]).
#[derive(Debug, Clone)]
pub struct OutputEnd(watch::Receiver<()>);

impl OutputEnd {
    /// Resolves once the output has ended: read to its end, failed, or dropped.
    pub async fn ended(&self) {
        let mut rx = self.0.clone();
        // nothing is ever sent: the sender's drop is the signal
        while rx.changed().await.is_ok() {}
    }
}

/// `output`, and a signal of its end: its last chunk read, an error, or the stream dropped.
pub fn watch_end(output: LogStream) -> (LogStream, OutputEnd) {
    let (tx, rx) = watch::channel(());
    (Watched { inner: output, end: Some(tx) }.boxed(), OutputEnd(rx))
}

struct Watched {
    inner: LogStream,
    end: Option<watch::Sender<()>>,
}

impl Stream for Watched {
    type Item = Result<bytes::Bytes, EngineError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let next = this.inner.poll_next_unpin(cx);
        if matches!(next, Poll::Ready(None | Some(Err(_)))) {
            this.end = None;
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::TryStreamExt;
    use std::time::Duration;

    fn chunks(n: usize) -> LogStream {
        futures::stream::iter((0..n).map(|i| Ok(bytes::Bytes::from(format!("{i}\n"))))).boxed()
    }

    async fn ended_within(end: &OutputEnd, ms: u64) -> bool {
        tokio::time::timeout(Duration::from_millis(ms), end.ended()).await.is_ok()
    }

    #[tokio::test]
    async fn the_end_is_signalled_once_the_output_is_read_to_its_end() {
        let (mut out, end) = watch_end(chunks(2));
        assert_eq!(out.next().await.unwrap().unwrap(), "0\n");
        assert!(!ended_within(&end, 20).await, "one chunk is left");
        assert_eq!(out.next().await.unwrap().unwrap(), "1\n");
        assert!(out.next().await.is_none());
        assert!(ended_within(&end, 1000).await);
        // every clone, any number of times, and the stream still held
        assert!(ended_within(&end.clone(), 1000).await && ended_within(&end, 1000).await);
        drop(out);
    }

    #[tokio::test]
    async fn an_error_or_a_drop_ends_it_too() {
        let failing = futures::stream::iter([Err(EngineError::Unavailable("cut".into()))]).boxed();
        let (out, end) = watch_end(failing);
        assert!(out.try_collect::<Vec<_>>().await.is_err());
        assert!(ended_within(&end, 1000).await);

        let (out, end) = watch_end(futures::stream::pending().boxed());
        assert!(!ended_within(&end, 20).await, "a stream that is still open has not ended");
        drop(out);
        assert!(ended_within(&end, 1000).await);
    }

    #[derive(Debug)]
    struct Exited(i64);

    #[async_trait]
    impl ExecControl for Exited {
        async fn resize(&self, cols: u16, rows: u16) -> Result<(), EngineError> {
            Err(EngineError::Rejected(format!("no terminal to make {cols}x{rows}")))
        }
        async fn wait(&self) -> Result<i64, EngineError> {
            Ok(self.0)
        }
    }

    #[tokio::test]
    async fn a_handle_writes_resizes_and_waits_through_its_parts() {
        let (input, mut typed) = tokio::io::duplex(64);
        let mut h = ExecHandle::new(Box::pin(input), chunks(0), Exited(7));
        h.write(b"ls\n").await.unwrap();
        let mut buf = [0u8; 3];
        tokio::io::AsyncReadExt::read_exact(&mut typed, &mut buf).await.unwrap();
        assert_eq!(&buf, b"ls\n");
        assert!(matches!(h.resize(80, 24).await, Err(EngineError::Rejected(m)) if m.contains("80x24")));
        let process = h.process.clone();
        assert_eq!((h.wait().await.unwrap(), process.wait().await.unwrap()), (7, 7));
        assert!(format!("{h:?}").contains("Exited(7)"));
        // a task holding the handle across its wait is Send (the handle is not Sync)
        let task = tokio::spawn(async move {
            let code = h.wait().await;
            drop(h);
            code
        });
        assert_eq!(task.await.unwrap().unwrap(), 7);
    }
}
