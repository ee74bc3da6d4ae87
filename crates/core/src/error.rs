//! The domain error: what can be wrong with a value before anything touches the outside world.

/// A value that breaks a rule of the domain. Every variant is the caller's fault (HTTP 4xx).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoreError {
    /// A quantity (memory, CPUs) could not be parsed.
    #[error("invalid quantity {input:?}: {reason}")]
    Quantity {
        /// The text as given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A name (user, workload, image) does not follow the naming rule.
    #[error("invalid {what} name {name:?}: {reason}")]
    Name {
        /// Which kind of name.
        what: &'static str,
        /// The name as given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A field of a request holds a value that is out of range or inconsistent.
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// The field, as the request spells it (`resources.cpus`).
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A state transition that the workload state machine does not allow.
    #[error("workload is {from}, cannot {action}")]
    Transition {
        /// The current state.
        from: crate::workload::WorkloadState,
        /// What was attempted.
        action: &'static str,
    },
}

impl CoreError {
    /// Shorthand for [`CoreError::Invalid`].
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Invalid { field: field.into(), reason: reason.into() }
    }
}
