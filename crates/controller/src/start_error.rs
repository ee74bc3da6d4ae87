//! Why a launch did not start its workload, sorted by what happens next.

use gpuhub_driver::EngineError;
use gpuhub_store::StoreError;

/// A launch that did not start its workload.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StartError {
    /// The engine or the database was not reached, so nothing ran: the workload is queued again and
    /// starts when they answer (a dockerd restart must not fail the work that was about to start).
    #[error("{0}")]
    Retry(String),
    /// The start failed for good (a refused spec, a missing image, a broken home): the run failed.
    #[error("{0}")]
    Failed(String),
}

impl From<EngineError> for StartError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Unavailable(_) => Self::Retry(e.to_string()),
            other => Self::Failed(other.to_string()),
        }
    }
}

impl From<StoreError> for StartError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(_) => Self::Retry(e.to_string()),
            other => Self::Failed(other.to_string()),
        }
    }
}
