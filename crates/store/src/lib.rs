//! Persistence for gpuhub: users, API tokens and browser sessions, workloads, the image catalog, SSH
//! public keys, small settings, accounting's holdings and the monitor's history of samples, on SQLite or
//! PostgreSQL chosen at run time by URL.
//!
//! ```text
//! sqlite://PATH          a file, created when missing (WAL journal, foreign keys, 5 s busy timeout)
//! sqlite::memory:        a private in-memory database (one connection; for tests)
//! postgres://USER:PASSWORD@HOST:PORT/DATABASE
//! ```
//!
//! Both backends go through `sqlx`'s Any driver with the same SQL (`$1, $2…` placeholders). Timestamps
//! are stored as BIGINT unix milliseconds, so they keep millisecond precision; lists (`command`, `gpus`)
//! and maps (`env`) are JSON text. The schema lives in `migrations/sqlite` and `migrations/postgres`
//! and is brought up to date by [`Store::open`]. No other crate of gpuhub writes SQL.

mod codec;
mod datasets;
mod error;
mod history;
mod holdings;
mod images;
mod keys;
mod personal_images;
mod queues;
mod reservations;
mod samples;
mod settings;
mod tokens;
mod users;
mod workload_counts;
mod workload_pages;
mod workloads;

pub use error::{Result, StoreError};
pub use history::StateChange;
pub use keys::SshKeyRecord;
pub use samples::Downsampled;
pub use tokens::{TOKEN_ID_LEN, TokenKind, TokenRecord};
pub use users::TakenIds;
pub use workload_counts::ActiveCount;
pub use workload_pages::{CapReached, OwnerCaps, OwnerCounts, WorkloadCursor, WorkloadPage, WorkloadQuery};
pub use workloads::WorkloadFilter;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::migrate::Migrator;
use sqlx::{AnyPool, Executor};
use std::str::FromStr;
use std::time::Duration;

static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("./migrations/sqlite");
static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("./migrations/postgres");

/// Pragmas set on every SQLite connection: write-ahead log (readers do not block the writer), enforced
/// foreign keys, wait up to 5 s for a lock instead of failing, and `NORMAL` sync, which is durable
/// against application crashes and safe (never corrupt) in WAL mode.
const SQLITE_PRAGMAS: &str =
    "PRAGMA busy_timeout = 5000; PRAGMA journal_mode = WAL; PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL;";

/// How long a query waits for a PostgreSQL connection before failing with
/// [`StoreError::Unavailable`]: short, so that while the server is unreachable requests fail in seconds
/// (503) instead of hanging, and the pool reconnects on its own once it is back.
pub const POSTGRES_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// The database engine behind a [`Store`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// A SQLite file (or in-memory database).
    Sqlite,
    /// A PostgreSQL server.
    Postgres,
}

impl Backend {
    /// Picks the backend from a database URL's scheme (`sqlite:`, `postgres:` or `postgresql:`).
    pub fn from_url(url: &str) -> Option<Backend> {
        let scheme = url.split_once(':')?.0.to_ascii_lowercase();
        match scheme.as_str() {
            "sqlite" => Some(Backend::Sqlite),
            "postgres" | "postgresql" => Some(Backend::Postgres),
            _ => None,
        }
    }

    /// The backend's name, lowercase (`sqlite`, `postgres`).
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A handle on the database: a connection pool. Cloning is cheap and shares the pool.
#[derive(Debug, Clone)]
pub struct Store {
    pool: AnyPool,
    backend: Backend,
    /// Where local accounts' UIDs come from ([`Store::with_uids`]).
    uids: users::UidPolicy,
}

impl Store {
    /// Connects to the database at `url` (see the crate documentation for the forms) and brings its
    /// schema up to date. A SQLite file is created when missing; a PostgreSQL database must exist.
    pub async fn open(url: &str) -> Result<Store> {
        sqlx::any::install_default_drivers();
        let backend = Backend::from_url(url).ok_or_else(|| {
            sqlx::Error::Configuration(
                format!("unsupported database url {:?}: expected sqlite:// or postgres://", scheme_only(url)).into(),
            )
        })?;
        let pool = match backend {
            Backend::Sqlite => {
                let memory = is_sqlite_memory(url);
                let options = AnyConnectOptions::from_str(&sqlite_url(url))?;
                let pool_options = if memory {
                    // each connection to `:memory:` is its own database: keep exactly one, forever
                    AnyPoolOptions::new().min_connections(1).max_connections(1).idle_timeout(None).max_lifetime(None)
                } else {
                    AnyPoolOptions::new().max_connections(8)
                };
                pool_options
                    .acquire_timeout(Duration::from_secs(30))
                    .after_connect(|conn, _meta| {
                        Box::pin(async move {
                            conn.execute(SQLITE_PRAGMAS).await?;
                            Ok(())
                        })
                    })
                    .after_release(|conn, _meta| Box::pin(async move { Ok(sqlite_outside_transaction(conn).await) }))
                    .connect_with(options)
                    .await?
            }
            Backend::Postgres => {
                let options = AnyConnectOptions::from_str(url)?;
                AnyPoolOptions::new()
                    .max_connections(16)
                    .acquire_timeout(POSTGRES_ACQUIRE_TIMEOUT)
                    .connect_with(options)
                    .await?
            }
        };
        let migrator = match backend {
            Backend::Sqlite => &SQLITE_MIGRATIONS,
            Backend::Postgres => &POSTGRES_MIGRATIONS,
        };
        migrator.run(&pool).await?;
        let store = Store { pool, backend, uids: users::UidPolicy::default() };
        store.seed().await?;
        Ok(store)
    }

    /// Which database engine this store talks to.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Checks that the database answers (for health checks).
    pub async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// Closes every connection of the pool and waits for them to finish; later calls fail.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Rows the schema needs that depend on constants of the domain.
    async fn seed(&self) -> Result<()> {
        sqlx::query("INSERT INTO counters (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING")
            .bind(users::LAST_UID)
            .bind(i64::from(gpuhub_core::user::FIRST_UID) - 1)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

/// Whether a SQLite connection handed back to the pool is outside any transaction, as it must be; one
/// left inside one (sqlx's count of open transactions out of step with SQLite's, after a COMMIT or
/// ROLLBACK failed on a full disk) is closed, which rolls that transaction back. Kept, it would take
/// every later write into a transaction that never commits: acknowledged, then lost.
async fn sqlite_outside_transaction(conn: &mut sqlx::AnyConnection) -> bool {
    // BEGIN fails inside a transaction; outside one it opens one, which ROLLBACK closes at once
    match conn.execute("BEGIN").await {
        Ok(_) => conn.execute("ROLLBACK").await.is_ok(),
        Err(e) => {
            tracing::warn!(error = %e, "a database connection came back inside a transaction: closed, rolling it back");
            false
        }
    }
}

/// The URL's scheme, for error messages that must not echo a password.
fn scheme_only(url: &str) -> &str {
    url.split_once(':').map_or("", |(scheme, _)| scheme)
}

/// Whether a SQLite URL names an in-memory database.
fn is_sqlite_memory(url: &str) -> bool {
    url.contains(":memory:") || url.contains("mode=memory")
}

/// A SQLite URL that creates the file when missing, unless it already says which mode to open in.
fn sqlite_url(url: &str) -> String {
    if url.contains("mode=") || is_sqlite_memory(url) {
        url.to_owned()
    } else if url.contains('?') {
        format!("{url}&mode=rwc")
    } else {
        format!("{url}?mode=rwc")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_connection_released_inside_a_transaction_is_closed_not_reused() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("db").display());
        let store = Store::open(&url).await.unwrap();
        {
            // SQLite inside a transaction that sqlx does not know of: as after a COMMIT, then the
            // ROLLBACK of a dropped transaction, failed on a full disk
            let mut conn = store.pool.acquire().await.unwrap();
            conn.execute("BEGIN").await.unwrap();
        }
        for i in 0..8 {
            sqlx::query("INSERT INTO counters (name, value) VALUES ($1, 0)")
                .bind(format!("probe{i}"))
                .execute(&store.pool)
                .await
                .unwrap();
        }
        // every acknowledged write is there for another connection (before: they went into the
        // transaction that never ended, and another connection saw none)
        let other = Store::open(&url).await.unwrap();
        let seen: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM counters WHERE name LIKE 'probe%'")
            .fetch_one(&other.pool)
            .await
            .unwrap();
        assert_eq!(seen, 8);
    }

    #[test]
    fn backend_from_url() {
        assert_eq!(Backend::from_url("sqlite:///tmp/x.db"), Some(Backend::Sqlite));
        assert_eq!(Backend::from_url("sqlite::memory:"), Some(Backend::Sqlite));
        assert_eq!(Backend::from_url("postgres://u:p@h/db"), Some(Backend::Postgres));
        assert_eq!(Backend::from_url("PostgreSQL://u:p@h/db"), Some(Backend::Postgres));
        assert_eq!(Backend::from_url("mysql://h/db"), None);
        assert_eq!(Backend::from_url("no-scheme"), None);
    }

    #[test]
    fn sqlite_urls_create_files() {
        assert_eq!(sqlite_url("sqlite:///tmp/x.db"), "sqlite:///tmp/x.db?mode=rwc");
        assert_eq!(sqlite_url("sqlite:///tmp/x.db?cache=private"), "sqlite:///tmp/x.db?cache=private&mode=rwc");
        assert_eq!(sqlite_url("sqlite:///tmp/x.db?mode=ro"), "sqlite:///tmp/x.db?mode=ro");
        assert_eq!(sqlite_url("sqlite::memory:"), "sqlite::memory:");
    }

    #[tokio::test]
    async fn unsupported_url_is_refused_without_echoing_it() {
        let e = Store::open("mysql://root:secret@localhost/db").await.unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("unsupported database url \"mysql\""), "{msg}");
        assert!(!msg.contains("secret"), "{msg}");
    }
}
