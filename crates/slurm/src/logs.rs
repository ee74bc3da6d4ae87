//! Members' output: Slurm writes member i's stdout and stderr to `<log_dir>/<user>/job-<id>.m<i>.log`
//! on the node (shared storage); the hub streams that file chunk by chunk, never whole. With `follow` it
//! keeps reading as it grows until the member has ended: its `.exit` file is there (the batch script
//! writes it when the member's step returns) or the job is over.

use crate::engine::SlurmEngine;
use crate::parse::Phase;
use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use gpuhub_driver::{EngineError, LogStream, MemberRef};
use std::io::SeekFrom;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

/// Bytes read at a time.
pub const CHUNK: usize = 64 * 1024;
/// How often a followed log is looked at for more.
const FOLLOW_POLL: Duration = Duration::from_millis(250);
/// How often a followed member is checked for having ended (a Slurm command; the exit file is checked
/// at every look).
const ENDED_POLL: Duration = Duration::from_secs(2);

/// Whether a followed member has ended.
pub type Ended = Box<dyn FnMut() -> BoxFuture<'static, bool> + Send>;

/// The offset where the last `n` lines of `path` start (a final newline ends the last line, it does not
/// start another), reading backwards a chunk at a time.
pub async fn tail_offset(file: &mut tokio::fs::File, n: u64) -> std::io::Result<u64> {
    let len = file.metadata().await?.len();
    if n == 0 {
        return Ok(len);
    }
    let mut end = len;
    let mut seen = 0u64;
    let mut first = true;
    let mut buf = vec![0u8; CHUNK];
    while end > 0 {
        let start = end.saturating_sub(CHUNK as u64);
        let size = (end - start) as usize;
        file.seek(SeekFrom::Start(start)).await?;
        file.read_exact(&mut buf[..size]).await?;
        for i in (0..size).rev() {
            if buf[i] != b'\n' {
                continue;
            }
            if first && start + i as u64 == len - 1 {
                continue; // the last line's own newline
            }
            seen += 1;
            if seen == n {
                return Ok(start + i as u64 + 1);
            }
        }
        first = false;
        end = start;
    }
    Ok(0)
}

/// The file's content from `tail` lines before its end (all of it with `None`), then, with `ended`,
/// what is appended until `ended` says so; waits for the file to appear while following.
pub fn stream_file(path: PathBuf, tail: Option<u64>, ended: Option<Ended>) -> LogStream {
    let s = Reading { path, file: None, tail, ended, done: false, failed: false };
    futures::stream::unfold(s, |mut s| async move {
        loop {
            if s.failed {
                return None;
            }
            if s.file.is_none() {
                match tokio::fs::File::open(&s.path).await {
                    Ok(mut f) => {
                        if let Some(n) = s.tail {
                            match tail_offset(&mut f, n).await {
                                Ok(at) => {
                                    if let Err(e) = f.seek(SeekFrom::Start(at)).await {
                                        return Some((Err(io_err(&s.path, e)), finished(s)));
                                    }
                                }
                                Err(e) => return Some((Err(io_err(&s.path, e)), finished(s))),
                            }
                        }
                        s.file = Some(f);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => match s.ended.as_mut() {
                        None => return None,
                        Some(ended) => {
                            if s.done || ended().await {
                                return None;
                            }
                            tokio::time::sleep(FOLLOW_POLL).await;
                            continue;
                        }
                    },
                    Err(e) => return Some((Err(io_err(&s.path, e)), finished(s))),
                }
            }
            let file = s.file.as_mut()?;
            let mut buf = vec![0u8; CHUNK];
            match file.read(&mut buf).await {
                Ok(0) => {
                    if s.done {
                        return None;
                    }
                    let ended = s.ended.as_mut()?;
                    if ended().await {
                        // one more read: what was written before it ended
                        s.done = true;
                        continue;
                    }
                    tokio::time::sleep(FOLLOW_POLL).await;
                }
                Ok(n) => {
                    buf.truncate(n);
                    return Some((Ok(Bytes::from(buf)), s));
                }
                Err(e) => return Some((Err(io_err(&s.path, e)), finished(s))),
            }
        }
    })
    .boxed()
}

/// Where a log stream is.
struct Reading {
    path: PathBuf,
    file: Option<tokio::fs::File>,
    tail: Option<u64>,
    ended: Option<Ended>,
    /// The member has ended: read to the end once more, then stop.
    done: bool,
    /// An error was yielded: nothing follows it.
    failed: bool,
}

fn io_err(path: &Path, e: std::io::Error) -> EngineError {
    EngineError::Engine(format!("cannot read {}: {e}", path.display()))
}

/// The state after an error: the stream ends.
fn finished(mut s: Reading) -> Reading {
    s.failed = true;
    s
}

impl SlurmEngine {
    pub(crate) async fn member_logs(
        &self,
        member: &MemberRef,
        follow: bool,
        tail: Option<u64>,
    ) -> Result<LogStream, EngineError> {
        let f = self.find(&member.run).await?;
        if member.member >= f.meta.size {
            return Err(EngineError::NotFound(format!("member {} of run {}", member.member, member.run)));
        }
        let user = f.meta.log_user(&f.job);
        if user.is_empty() {
            return Err(EngineError::Engine(format!("Slurm does not say whose job {} is", f.job.id)));
        }
        let path = self.log_path(user, f.job.id, member.member);
        let ended = (follow && f.job.phase() != Phase::Ended).then(|| {
            let exit_file = path.with_extension("exit");
            let engine = self.clone();
            let job = f.job.id.to_string();
            let mut last_check: Option<Instant> = None;
            Box::new(move || {
                let engine = engine.clone();
                let job = job.clone();
                let exit_file = exit_file.clone();
                let ask = last_check.is_none_or(|t| t.elapsed() >= ENDED_POLL);
                if ask {
                    last_check = Some(Instant::now());
                }
                let fut: BoxFuture<'static, bool> = Box::pin(async move {
                    if exit_file.exists() {
                        return true;
                    }
                    if !ask {
                        return false;
                    }
                    // an unreachable slurmctld is not an end: keep following
                    matches!(engine.job_phase(&job).await, Ok(None | Some(Phase::Ended)))
                });
                fut
            }) as Ended
        });
        if f.job.phase() == Phase::Pending && !follow {
            return Ok(futures::stream::empty().boxed());
        }
        Ok(stream_file(path, tail, ended))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::TryStreamExt;
    use std::io::Write;

    async fn collect(s: LogStream) -> String {
        let chunks: Vec<Bytes> = s.try_collect().await.unwrap();
        String::from_utf8(chunks.concat()).unwrap()
    }

    #[tokio::test]
    async fn whole_tail_and_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m0.log");
        std::fs::write(&p, "a\nb\nc\n").unwrap();
        assert_eq!(collect(stream_file(p.clone(), None, None)).await, "a\nb\nc\n");
        assert_eq!(collect(stream_file(p.clone(), Some(2), None)).await, "b\nc\n");
        assert_eq!(collect(stream_file(p.clone(), Some(0), None)).await, "");
        assert_eq!(collect(stream_file(p.clone(), Some(9), None)).await, "a\nb\nc\n");
        std::fs::write(&p, "a\nb\nno newline").unwrap();
        assert_eq!(collect(stream_file(p.clone(), Some(1), None)).await, "no newline");
        // larger than a chunk: several chunks, none over CHUNK, the tail found across chunk borders
        let line = "x".repeat(99) + "\n";
        std::fs::write(&p, line.repeat(2000)).unwrap();
        let chunks: Vec<Bytes> = stream_file(p.clone(), None, None).try_collect().await.unwrap();
        assert!(chunks.len() >= 3 && chunks.iter().all(|c| c.len() <= CHUNK));
        assert_eq!(collect(stream_file(p.clone(), Some(700), None)).await, line.repeat(700));
        assert_eq!(collect(stream_file(dir.path().join("missing"), None, None)).await, "");
    }

    #[tokio::test]
    async fn follows_until_ended() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m0.log");
        let flag = dir.path().join("m0.exit");
        let ended: Ended = {
            let flag = flag.clone();
            Box::new(move || {
                let flag = flag.clone();
                Box::pin(async move { flag.exists() })
            })
        };
        let stream = stream_file(p.clone(), None, Some(ended));
        let writer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let mut f = std::fs::File::create(&p).unwrap();
            f.write_all(b"one\n").unwrap();
            tokio::time::sleep(Duration::from_millis(400)).await;
            f.write_all(b"two\n").unwrap();
            std::fs::write(&flag, "0\n").unwrap();
        });
        let text = tokio::time::timeout(Duration::from_secs(10), collect(stream)).await.unwrap();
        writer.await.unwrap();
        assert_eq!(text, "one\ntwo\n");
    }
}
