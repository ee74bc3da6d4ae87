//! Workload output on disk, in bounded memory: archiving a log stream to a file chunk by chunk up to a
//! cap, finding where the last lines of a file begin by reading it backwards in blocks, and reading a
//! range of a file as a stream. Nothing here holds more than one chunk or block of output at a time.

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use std::io::SeekFrom;
use std::path::Path;
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

/// Size of the blocks read from a log file (forwards and backwards).
const BLOCK: usize = 64 * 1024;

/// How an archive ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Archived {
    /// Bytes of output written (without the truncation note).
    pub bytes: u64,
    /// Whether output was left out because it went past the cap.
    pub truncated: bool,
}

/// The line that ends a log cut at `cap` bytes.
pub fn truncation_note(cap: u64) -> String {
    format!(
        "[gpuhub: log truncated: the output went past log_max_bytes ({}); the rest was not kept]\n",
        gpuhub_core::Bytes(cap)
    )
}

/// Creates (or empties) `path` readable by the server's user only (0600).
pub async fn create_private(path: &Path) -> std::io::Result<tokio::fs::File> {
    use std::os::unix::fs::PermissionsExt;
    let file = tokio::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path).await?;
    // an existing file keeps its mode through `open`
    file.set_permissions(std::fs::Permissions::from_mode(0o600)).await?;
    Ok(file)
}

/// Writes `stream` to `file` chunk by chunk, stopping at `cap` bytes of output; a cut log ends with
/// [`truncation_note`] on a line of its own. The stream is dropped (not drained) once the cap is reached.
/// A stream error ends the archive like the end of the stream (what came before is kept).
pub async fn copy_capped<S, E>(mut stream: S, file: &mut tokio::fs::File, cap: u64) -> std::io::Result<Archived>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let mut written = 0u64;
    let mut last = b'\n';
    while let Some(item) = stream.next().await {
        let chunk = match item {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "log stream failed; keeping what came before");
                break;
            }
        };
        let room = cap - written;
        let take = usize::try_from(room).unwrap_or(usize::MAX).min(chunk.len());
        if take > 0 {
            file.write_all(&chunk[..take]).await?;
            written += take as u64;
            last = chunk[take - 1];
        }
        if take < chunk.len() {
            let sep = if last == b'\n' { "" } else { "\n" };
            file.write_all(format!("{sep}{}", truncation_note(cap)).as_bytes()).await?;
            file.flush().await?;
            return Ok(Archived { bytes: written, truncated: true });
        }
    }
    file.flush().await?;
    Ok(Archived { bytes: written, truncated: false })
}

/// Where the last `n` lines of the first `len` bytes of `file` begin, read backwards in blocks. A
/// final newline ends the last line rather than starting another; fewer lines than `n` give 0.
pub async fn tail_offset(file: &mut tokio::fs::File, len: u64, n: u64) -> std::io::Result<u64> {
    if n == 0 {
        return Ok(len);
    }
    let mut block = vec![0u8; BLOCK];
    let mut end = len;
    let mut newlines = 0u64;
    let mut last_byte = true;
    while end > 0 {
        let start = end.saturating_sub(BLOCK as u64);
        let buf = &mut block[..(end - start) as usize];
        file.seek(SeekFrom::Start(start)).await?;
        file.read_exact(buf).await?;
        for (i, b) in buf.iter().enumerate().rev() {
            if std::mem::take(&mut last_byte) {
                continue; // a newline here ends the last line; anything else is the last line
            }
            if *b == b'\n' {
                newlines += 1;
                if newlines == n {
                    return Ok(start + i as u64 + 1);
                }
            }
        }
        end = start;
    }
    Ok(0)
}

/// Bytes `start..start + len` of `file`, as a stream of blocks.
pub fn read_range(
    file: tokio::fs::File,
    start: u64,
    len: u64,
) -> impl Stream<Item = std::io::Result<Bytes>> + Send + 'static {
    futures::stream::unfold((file, start, len, false), |(mut file, at, left, sought)| async move {
        if left == 0 {
            return None;
        }
        if !sought && let Err(e) = file.seek(SeekFrom::Start(at)).await {
            return Some((Err(e), (file, at, 0, true)));
        }
        let mut buf = BytesMut::zeroed(usize::try_from(left).unwrap_or(BLOCK).min(BLOCK));
        match file.read(&mut buf).await {
            Ok(0) => None, // shorter than it was
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(buf.freeze()), (file, at + n as u64, left - n as u64, true)))
            }
            Err(e) => Some((Err(e), (file, at, 0, true))),
        }
    })
}

/// At most `limit` bytes of `stream`; it is not polled again once they have passed (a followed log
/// ends there).
pub fn take_bytes<S, E>(stream: S, limit: u64) -> impl Stream<Item = Result<Bytes, E>> + Send + 'static
where
    S: Stream<Item = Result<Bytes, E>> + Send + Unpin + 'static,
    E: Send + 'static,
{
    futures::stream::unfold((stream, limit), |(mut stream, left)| async move {
        if left == 0 {
            return None;
        }
        match stream.next().await? {
            Ok(mut chunk) => {
                if chunk.len() as u64 > left {
                    chunk.truncate(left as usize);
                }
                let left = left - chunk.len() as u64;
                Some((Ok(chunk), (stream, left)))
            }
            Err(e) => Some((Err(e), (stream, left))),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(parts: &[&str]) -> impl Stream<Item = Result<Bytes, String>> + Unpin {
        futures::stream::iter(parts.iter().map(|p| Ok(Bytes::copy_from_slice(p.as_bytes()))).collect::<Vec<_>>())
    }

    async fn archive(parts: &[&str], cap: u64) -> (Archived, String, u32) {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.log");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut f = create_private(&path).await.unwrap();
        let a = copy_capped(chunks(parts), &mut f, cap).await.unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        (a, std::fs::read_to_string(&path).unwrap(), mode)
    }

    #[tokio::test]
    async fn archives_up_to_the_cap_and_says_so() {
        let (a, text, mode) = archive(&["one\n", "two\n"], 100).await;
        assert_eq!((a, text.as_str(), mode), (Archived { bytes: 8, truncated: false }, "one\ntwo\n", 0o600));
        let (a, text, _) = archive(&["one\n", "two\n", "three\n"], 8).await;
        assert_eq!(a, Archived { bytes: 8, truncated: true });
        assert_eq!(text, format!("one\ntwo\n{}", truncation_note(8)));
        let (a, text, _) = archive(&["one\ntw", "o\n"], 6).await;
        assert_eq!(a, Archived { bytes: 6, truncated: true });
        assert_eq!(text, format!("one\ntw\n{}", truncation_note(6)));
        assert!(truncation_note(100 << 20).contains("log_max_bytes (100MiB)"));
    }

    #[tokio::test]
    async fn an_exact_fit_is_not_truncated() {
        let (a, text, _) = archive(&["one\n", "two\n"], 8).await;
        assert_eq!((a, text.as_str()), (Archived { bytes: 8, truncated: false }, "one\ntwo\n"));
    }

    async fn tail_of(text: &[u8], n: u64) -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.log");
        std::fs::write(&path, text).unwrap();
        let mut f = tokio::fs::File::open(&path).await.unwrap();
        let at = tail_offset(&mut f, text.len() as u64, n).await.unwrap();
        let mut out = Vec::new();
        let mut s = std::pin::pin!(read_range(f, at, text.len() as u64 - at));
        while let Some(b) = s.next().await {
            out.extend_from_slice(&b.unwrap());
        }
        out
    }

    #[tokio::test]
    async fn tail_counts_lines_across_blocks() {
        let mut text = Vec::new();
        for i in 0..30_000 {
            text.extend_from_slice(format!("line {i}\n").as_bytes());
        }
        text.extend_from_slice(&vec![b'x'; 3 * BLOCK]); // a last line longer than a block, unfinished
        for n in [0u64, 1, 2, 3, 29_999, 30_000, 30_001, 40_000] {
            let want: Vec<&[u8]> = text.split_inclusive(|b| *b == b'\n').collect();
            let want = want[want.len().saturating_sub(n as usize)..].concat();
            assert_eq!(tail_of(&text, n).await, want, "tail {n}");
        }
        assert_eq!(tail_of(b"a\nb\n", 1).await, b"b\n");
        assert_eq!(tail_of(b"a\nb\n\n", 1).await, b"\n");
        assert_eq!(tail_of(b"", 3).await, b"");
    }

    #[tokio::test]
    async fn limits_bytes_without_polling_further() {
        let s = chunks(&["abc", "def"]).chain(futures::stream::pending());
        let out: Vec<_> = take_bytes(Box::pin(s), 4).collect().await;
        assert_eq!(out, vec![Ok(Bytes::from("abc")), Ok(Bytes::from("d"))]);
    }
}
