//! Errors of the simulator.

use std::path::PathBuf;

/// Why a simulation could not run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A trace has a bad value.
    #[error("{path}:{line}: field `{field}`: {reason}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The column name.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// A trace is missing a column or has no rows.
    #[error("{path}: {reason}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A command-line argument is not valid.
    #[error("invalid argument {arg}: {reason}")]
    Arg {
        /// The argument (`--seeds`).
        arg: String,
        /// What is wrong.
        reason: String,
    },
    /// The plot could not be drawn.
    #[error("plot {path}: {reason}")]
    Plot {
        /// The output file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// Output could not be encoded.
    #[error("json output: {0}")]
    Json(#[from] serde_json::Error),
}
