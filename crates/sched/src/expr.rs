//! Resource expressions (placeholder until the language lands).

use crate::model::Cluster;
use crate::state::{Shape, State};

/// An expression that could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExprError {
    /// Expressions are not available yet.
    #[error("resource expressions are not supported yet")]
    Unsupported,
}

/// Restricts `s` to the nodes and GPUs that satisfy `src`.
pub fn constrain(src: &str, _cluster: &Cluster, _st: &State, _s: &mut Shape) -> Result<(), ExprError> {
    let _ = src;
    Err(ExprError::Unsupported)
}
