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
    /// The database refused or failed a query.
    #[error("database error: {0}")]
    Database(sqlx::Error),
    /// The database cannot be reached or is busy for now (connection refused or lost, the pool's
    /// acquire timeout passed, PostgreSQL shutting down or starting, SQLite locked past its busy
    /// timeout); the same request may succeed later (the API maps this to 503).
    #[error("database unavailable: {0}")]
    Unavailable(sqlx::Error),
    /// The disk holding the database is full (SQLite: the data directory's; PostgreSQL: the server's);
    /// nothing was written (the API maps this to 507).
    #[error("database storage full: {0}")]
    StorageFull(sqlx::Error),
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
        _ => e.into(),
    }
}

impl From<sqlx::Error> for StoreError {
    /// Sorts a driver error into [`StoreError::Unavailable`], [`StoreError::StorageFull`] or
    /// [`StoreError::Database`].
    fn from(e: sqlx::Error) -> Self {
        match classify(&e) {
            Class::Unavailable => StoreError::Unavailable(e),
            Class::Full => StoreError::StorageFull(e),
            Class::Other => StoreError::Database(e),
        }
    }
}

enum Class {
    Unavailable,
    Full,
    Other,
}

fn classify(e: &sqlx::Error) -> Class {
    use sqlx::Error as E;
    match e {
        E::Io(io) if io.kind() == std::io::ErrorKind::StorageFull => Class::Full,
        E::Io(_) | E::Tls(_) | E::PoolTimedOut | E::PoolClosed | E::WorkerCrashed => Class::Unavailable,
        E::Database(d) => {
            let code = d.code().unwrap_or_default();
            let message = d.message();
            if message.contains("database or disk is full") {
                return Class::Full;
            }
            // SQLite reports numeric (extended) result codes; the primary code is the low byte
            if let Ok(n) = code.parse::<u32>() {
                return match n & 0xff {
                    13 => Class::Full,           // SQLITE_FULL
                    5 | 6 => Class::Unavailable, // SQLITE_BUSY, SQLITE_LOCKED
                    _ => Class::Other,
                };
            }
            // PostgreSQL SQLSTATEs
            match code.as_ref() {
                "53100" => Class::Full,                                      // disk_full
                "53300" | "57P01" | "57P02" | "57P03" => Class::Unavailable, // too many connections, shutdown, starting
                c if c.starts_with("08") => Class::Unavailable,              // connection exceptions
                _ => Class::Other,
            }
        }
        _ => Class::Other,
    }
}

impl StoreError {
    /// Whether the database could not be reached or was busy (see [`StoreError::Unavailable`]).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }
}

/// Whether `e` is a foreign key violation (a row names a parent that does not exist).
pub(crate) fn is_foreign_key_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_foreign_key_violation())
}

#[cfg(test)]
mod tests {
    use super::StoreError;
    use std::io::{Error, ErrorKind};

    #[test]
    fn driver_errors_are_sorted_by_what_a_client_can_do() {
        let unavailable = [
            sqlx::Error::PoolTimedOut,
            sqlx::Error::PoolClosed,
            sqlx::Error::Io(Error::from(ErrorKind::ConnectionRefused)),
            sqlx::Error::Io(Error::from(ErrorKind::UnexpectedEof)),
        ];
        for e in unavailable {
            assert!(StoreError::from(e).is_unavailable());
        }
        let full = StoreError::from(sqlx::Error::Io(Error::from(ErrorKind::StorageFull)));
        assert!(matches!(full, StoreError::StorageFull(_)), "{full:?}");
        let other = StoreError::from(sqlx::Error::RowNotFound);
        assert!(matches!(other, StoreError::Database(_)), "{other:?}");
        assert!(other.to_string().starts_with("database error: "));
    }
}
