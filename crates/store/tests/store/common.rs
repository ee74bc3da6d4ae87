//! The test harness: fresh databases on both backends, and the `both!` macro that runs a test body
//! on each.
//!
//! PostgreSQL is reached at `GPUHUB_TEST_POSTGRES_URL` (default [`DEFAULT_POSTGRES_URL`]), which must
//! name a role allowed to create databases; each test creates its own `gpuhub_test_<random>` database
//! there and drops it afterwards, so tests run in parallel without seeing each other. When PostgreSQL
//! cannot be reached the PostgreSQL tests fail, saying how to start it.

use chrono::{DateTime, TimeZone, Utc};
use gpuhub_store::{Backend, Store};
use sqlx::{Connection, Executor, PgConnection};
use std::future::Future;

/// Where the PostgreSQL tests connect when `GPUHUB_TEST_POSTGRES_URL` is not set.
pub const DEFAULT_POSTGRES_URL: &str = "postgres://gpuhub:gpuhub@127.0.0.1:5432/postgres";

/// Runs `body` once on each backend, as two tests named `<body>::sqlite` and `<body>::postgres`.
macro_rules! both {
    ($($body:ident),* $(,)?) => {$(
        mod $body {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                crate::common::on(gpuhub_store::Backend::Sqlite, super::$body).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                crate::common::on(gpuhub_store::Backend::Postgres, super::$body).await
            }
        }
    )*};
}

/// Runs `body` with a store opened on a fresh database of `backend`.
pub async fn on<F, Fut>(backend: Backend, body: F)
where
    F: FnOnce(Store) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    with_url(backend, move |url| async move {
        let store = Store::open(&url).await.unwrap();
        assert_eq!(store.backend(), backend);
        // a panicking body must still close the pool, or the database could not be dropped
        let outcome = tokio::spawn(body(store.clone())).await;
        store.close().await;
        if let Err(e) = outcome {
            std::panic::resume_unwind(e.into_panic());
        }
    })
    .await
}

/// Runs `body` with the URL of a fresh, empty database of `backend`, and removes the database after,
/// whether `body` passed or panicked. `body` must close the stores it opens.
pub async fn with_url<F, Fut>(backend: Backend, body: F)
where
    F: FnOnce(String) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    match backend {
        Backend::Sqlite => {
            let dir = tempfile::tempdir().unwrap();
            let url = format!("sqlite://{}", dir.path().join("gpuhub.db").display());
            let outcome = tokio::spawn(body(url)).await;
            drop(dir);
            if let Err(e) = outcome {
                std::panic::resume_unwind(e.into_panic());
            }
        }
        Backend::Postgres => {
            let base = postgres_url();
            let name = format!("gpuhub_test_{}", uuid::Uuid::new_v4().simple());
            let mut admin = admin_connection(&base).await;
            admin.execute(format!("CREATE DATABASE {name}").as_str()).await.unwrap();
            admin.close().await.unwrap();
            let outcome = tokio::spawn(body(with_database(&base, &name))).await;
            let mut admin = admin_connection(&base).await;
            admin.execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str()).await.unwrap();
            admin.close().await.unwrap();
            if let Err(e) = outcome {
                std::panic::resume_unwind(e.into_panic());
            }
        }
    }
}

/// The PostgreSQL server URL the tests use.
pub fn postgres_url() -> String {
    std::env::var("GPUHUB_TEST_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_POSTGRES_URL.to_owned())
}

async fn admin_connection(url: &str) -> PgConnection {
    match PgConnection::connect(url).await {
        Ok(c) => c,
        Err(e) => panic!(
            "PostgreSQL is unreachable at {} ({e}). The PostgreSQL tests need a server: start it \
             (`service postgresql start`) and create the test role once \
             (`su postgres -c \"psql -c \\\"CREATE ROLE gpuhub LOGIN SUPERUSER PASSWORD 'gpuhub'\\\"\"`), \
             or point GPUHUB_TEST_POSTGRES_URL at a server where the role may create databases",
            redact(url)
        ),
    }
}

/// `url` with its database (path) replaced by `database`, keeping any query string.
fn with_database(url: &str, database: &str) -> String {
    let (head, query) = match url.split_once('?') {
        Some((h, q)) => (h, Some(q)),
        None => (url, None),
    };
    let authority_start = head.find("://").map_or(0, |i| i + 3);
    let host_end = head[authority_start..].find('/').map_or(head.len(), |i| authority_start + i);
    let mut out = format!("{}/{database}", &head[..host_end]);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

/// `url` without its password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => match url[s + 3..at].split_once(':') {
            Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
            None => url.to_owned(),
        },
        _ => url.to_owned(),
    }
}

/// A fixed instant with whole milliseconds, plus `offset_ms`.
pub fn t(offset_ms: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 3, 14, 15, 9, 26).unwrap() + chrono::Duration::milliseconds(offset_ms)
}

#[test]
fn urls() {
    assert_eq!(with_database("postgres://u:p@h:5432/postgres", "x"), "postgres://u:p@h:5432/x");
    assert_eq!(with_database("postgres://u:p@h/postgres?sslmode=disable", "x"), "postgres://u:p@h/x?sslmode=disable");
    assert_eq!(with_database("postgres://h", "x"), "postgres://h/x");
    assert_eq!(redact("postgres://u:secret@h/db"), "postgres://u:***@h/db");
    assert_eq!(redact("postgres://h/db"), "postgres://h/db");
}
