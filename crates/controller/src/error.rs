//! What the controller answers a command with when it cannot carry it out.

use gpuhub_driver::EngineError;
use gpuhub_store::StoreError;

/// A command the controller could not carry out.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The workload does not exist (any more).
    #[error("{0}")]
    NotFound(String),
    /// The workload's state does not allow it (a stop of an ended workload, a start of a running one).
    #[error("{0}")]
    Conflict(String),
    /// The engine could not do it.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The store could not do it.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The controller is not running (the server is shutting down).
    #[error("the controller is not running")]
    Gone,
}

impl From<gpuhub_core::CoreError> for ControlError {
    fn from(e: gpuhub_core::CoreError) -> Self {
        Self::Conflict(e.to_string())
    }
}
