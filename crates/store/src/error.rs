//! The store's error type.

/// What can go wrong talking to the database.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The row does not exist (the API maps this to 404).
    #[error("{what} {key} not found")]
    NotFound {
        /// The kind of row (`user`, `workload`, `image`, `ssh key`).
        what: &'static str,
        /// The key it was looked up by.
        key: String,
    },
    /// A unique constraint was violated (the API maps this to 409).
    #[error("{0}")]
    Conflict(String),
    /// The database refused or failed a query, or could not be reached.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// Bringing the schema up to date failed.
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A stored value could not be decoded into its domain type.
    #[error("corrupt stored value: {0}")]
    Corrupt(String),
}

/// The store's result type.
pub type Result<T> = std::result::Result<T, StoreError>;

impl StoreError {
    /// Shorthand for [`StoreError::NotFound`].
    pub(crate) fn not_found(what: &'static str, key: impl ToString) -> Self {
        Self::NotFound { what, key: key.to_string() }
    }
}

/// Turns a unique violation into [`StoreError::Conflict`] with `message`, anything else into
/// [`StoreError::Database`].
pub(crate) fn conflict(e: sqlx::Error, message: impl FnOnce() -> String) -> StoreError {
    match &e {
        sqlx::Error::Database(d) if d.is_unique_violation() => StoreError::Conflict(message()),
        _ => StoreError::Database(e),
    }
}

/// Whether `e` is a foreign key violation (a row names a parent that does not exist).
pub(crate) fn is_foreign_key_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_foreign_key_violation())
}
