//! A fake member's output: text pushed by tests, and filler made only as it is read.

use crate::{EngineError, LogStream};
use futures::StreamExt;

/// A piece of a fake member's output.
#[derive(Debug, Clone)]
pub(crate) enum Output {
    Text(bytes::Bytes),
    /// This many copies of [`FILLER_LINE`], made only as they are read.
    Filler(u64),
    /// The stream fails here, as a container's does when it is removed under a reader.
    Failure(String),
}

/// The line [`super::FakeEngine::push_filler`] repeats: 64 bytes with its newline.
pub const FILLER_LINE: &[u8; 64] = b"gpuhub fake output: a line of filler to make a lot of output...\n";
/// Filler lines per chunk of the log stream (64 KiB).
pub(crate) const FILLER_LINES_PER_CHUNK: u64 = 1024;

/// Where the last `n` lines of `logs` begin: (piece, offset in it). A final newline ends the last line
/// rather than starting another.
pub(crate) fn tail_start(logs: &[Output], n: u64) -> (usize, u64) {
    let mut newlines = 0; // newlines seen that begin one of the wanted lines
    let mut last_byte = true;
    for (i, piece) in logs.iter().enumerate().rev() {
        match piece {
            Output::Text(t) => {
                for (at, b) in t.iter().enumerate().rev() {
                    let last = std::mem::take(&mut last_byte);
                    if *b == b'\n' && !last {
                        newlines += 1;
                        if newlines == n {
                            return (i, at as u64 + 1);
                        }
                    }
                }
            }
            Output::Filler(0) | Output::Failure(_) => {}
            Output::Filler(lines) => {
                // the newline ending each line begins the next one, but for the very last
                let last = std::mem::take(&mut last_byte);
                let ends = if last { lines - 1 } else { *lines };
                let wanted = n - newlines;
                if wanted <= ends {
                    let first_line = if last { lines - wanted } else { lines - wanted + 1 };
                    return (i, first_line * FILLER_LINE.len() as u64);
                }
                newlines += ends;
            }
        }
    }
    (0, 0)
}

/// The output from (piece, offset) on, as a stream made chunk by chunk.
pub(crate) fn output_stream(logs: Vec<Output>, (first, offset): (usize, u64)) -> LogStream {
    let chunk = bytes::Bytes::from(FILLER_LINE.repeat(FILLER_LINES_PER_CHUNK as usize));
    let pieces = logs.into_iter().enumerate().skip(first).flat_map(move |(i, piece)| {
        let skip = if i == first { offset } else { 0 };
        let chunks: Box<dyn Iterator<Item = Result<bytes::Bytes, EngineError>> + Send> = match piece {
            Output::Text(t) => Box::new(std::iter::once(Ok(t.slice(skip as usize..)))),
            Output::Failure(why) => Box::new(std::iter::once(Err(EngineError::Engine(why)))),
            Output::Filler(lines) => {
                let chunk = chunk.clone();
                let total = lines * FILLER_LINE.len() as u64;
                let step = chunk.len() as u64;
                Box::new(
                    (skip..total)
                        .step_by(step as usize)
                        .map(move |at| Ok(chunk.slice(..(total - at).min(step) as usize))),
                )
            }
        };
        chunks
    });
    futures::stream::iter(pieces.filter(|b| b.as_ref().map_or(true, |b| !b.is_empty()))).boxed()
}
