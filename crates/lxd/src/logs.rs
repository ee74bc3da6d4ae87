//! Members' output: the start script sends the command's stdout and stderr to `log` in the run's
//! directory, which the hub reads on the host chunk by chunk, never whole; with `follow` it keeps reading
//! as the file grows until the member has ended (its container stopped).

use crate::engine::LxdEngine;
use bytes::Bytes;
use futures::StreamExt;
use gpuhub_driver::{EngineError, LogStream, MemberState};
use std::io::SeekFrom;
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

/// Bytes read at a time.
pub const CHUNK: usize = 64 * 1024;
/// How often a followed log is looked at for more.
const FOLLOW_POLL: Duration = Duration::from_millis(250);

/// The offset where the last `n` lines of `file` start (a final newline ends the last line, it does not
/// start another), reading backwards a chunk at a time.
pub async fn tail_offset(file: &mut tokio::fs::File, n: u64) -> std::io::Result<u64> {
    let len = file.metadata().await?.len();
    if n == 0 {
        return Ok(len);
    }
    let (mut end, mut seen) = (len, 0u64);
    let mut buf = vec![0u8; CHUNK];
    while end > 0 {
        let start = end.saturating_sub(CHUNK as u64);
        let size = (end - start) as usize;
        file.seek(SeekFrom::Start(start)).await?;
        file.read_exact(&mut buf[..size]).await?;
        for i in (0..size).rev() {
            let at = start + i as u64;
            if buf[i] != b'\n' || at == len - 1 {
                continue;
            }
            seen += 1;
            if seen == n {
                return Ok(at + 1);
            }
        }
        end = start;
    }
    Ok(0)
}

/// Where a log stream is.
struct Reading {
    engine: Option<LxdEngine>,
    name: String,
    path: PathBuf,
    file: Option<tokio::fs::File>,
    tail: Option<u64>,
    /// The member has ended: read to the end once more, then stop.
    done: bool,
}

impl Reading {
    /// Whether the member has ended (or its container is gone).
    async fn ended(&self) -> bool {
        let Some(engine) = &self.engine else { return true };
        match engine.container(&self.name).await {
            Ok(c) => matches!(engine.state(&c), MemberState::Exited(_)),
            Err(_) => true,
        }
    }
}

/// Keeps the output file `path` at about `cap` bytes at most: once it is longer, its oldest part is cut
/// off in place (`fallocate` collapsing whole blocks from its start), keeping about the last half of the
/// cap; the start script appends (`>>`), so it goes on writing at the new end. Where the file system
/// cannot collapse (tmpfs, NFS), the file is emptied instead. Returns the bytes cut off.
pub fn cap(path: &std::path::Path, cap: u64) -> std::io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let file = std::fs::OpenOptions::new().write(true).open(path)?;
    let meta = file.metadata()?;
    if meta.len() <= cap {
        return Ok(0);
    }
    let block = meta.blksize().max(512);
    let cut = (meta.len() - cap / 2) / block * block;
    if cut == 0 {
        return Ok(0);
    }
    match rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::COLLAPSE_RANGE, 0, cut) {
        Ok(()) => Ok(cut),
        Err(rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::INVAL) => {
            file.set_len(0)?;
            Ok(meta.len())
        }
        Err(e) => Err(e.into()),
    }
}

fn io_err(path: &std::path::Path, e: std::io::Error) -> EngineError {
    EngineError::Engine(format!("cannot read {}: {e}", path.display()))
}

impl LxdEngine {
    /// Container `name`'s output from `tail` lines before its end (all of it with `None`), then, with
    /// `follow`, what is appended until the member ends.
    pub(crate) fn log_stream(&self, name: &str, follow: bool, tail: Option<u64>) -> LogStream {
        let s = Reading {
            engine: follow.then(|| self.clone()),
            name: name.to_owned(),
            path: self.run_dir(name).join("log"),
            file: None,
            tail,
            done: false,
        };
        futures::stream::unfold(Some(s), |s| async move {
            let mut s = s?;
            loop {
                if s.file.is_none() {
                    match tokio::fs::File::open(&s.path).await {
                        Ok(mut f) => {
                            if let Some(n) = s.tail {
                                let at = match tail_offset(&mut f, n).await {
                                    Ok(at) => at,
                                    Err(e) => return Some((Err(io_err(&s.path, e)), None)),
                                };
                                if let Err(e) = f.seek(SeekFrom::Start(at)).await {
                                    return Some((Err(io_err(&s.path, e)), None));
                                }
                            }
                            s.file = Some(f);
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                            if s.engine.is_none() || s.done || s.ended().await {
                                return None;
                            }
                            tokio::time::sleep(FOLLOW_POLL).await;
                            continue;
                        }
                        Err(e) => return Some((Err(io_err(&s.path, e)), None)),
                    }
                }
                let file = s.file.as_mut()?;
                let mut buf = vec![0u8; CHUNK];
                match file.read(&mut buf).await {
                    Ok(0) => {
                        if s.engine.is_none() || s.done {
                            return None;
                        }
                        if s.ended().await {
                            s.done = true; // one more read: what was written before it ended
                            continue;
                        }
                        tokio::time::sleep(FOLLOW_POLL).await;
                    }
                    Ok(n) => {
                        buf.truncate(n);
                        return Some((Ok(Bytes::from(buf)), Some(s)));
                    }
                    Err(e) => return Some((Err(io_err(&s.path, e)), None)),
                }
            }
        })
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_capped_log_keeps_its_newest_part_and_takes_appends_at_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let mut writer = std::fs::OpenOptions::new().create(true).append(true).open(&path).unwrap();
        for i in 0..20_000 {
            writeln!(writer, "line {i:08}").unwrap();
        }
        let before = std::fs::metadata(&path).unwrap().len();
        assert_eq!(cap(&path, 1 << 20).unwrap(), 0, "under the cap");
        let cut = cap(&path, 64 << 10).unwrap();
        let after = std::fs::read_to_string(&path).unwrap();
        assert_eq!(after.len() as u64, before - cut);
        assert!(after.len() <= 64 << 10 && after.len() >= 16 << 10, "{} bytes left", after.len());
        assert!(after.ends_with("line 00019999\n"), "the newest output is kept");
        writeln!(writer, "after the cut").unwrap();
        let after = std::fs::read_to_string(&path).unwrap();
        assert!(after.ends_with("line 00019999\nafter the cut\n"), "appends land at the new end");
    }

    #[tokio::test]
    async fn the_tail_starts_n_lines_before_the_end() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(b"one\ntwo\nthree\n").unwrap();
        let mut file = tokio::fs::File::open(f.path()).await.unwrap();
        assert_eq!(tail_offset(&mut file, 1).await.unwrap(), 8);
        assert_eq!(tail_offset(&mut file, 2).await.unwrap(), 4);
        assert_eq!(tail_offset(&mut file, 5).await.unwrap(), 0);
        assert_eq!(tail_offset(&mut file, 0).await.unwrap(), 14);
    }
}
