//! The test harness: fresh databases on both backends, and the `both!` macro that runs a test body
//! on each.
//!
//! PostgreSQL's come from the test kit (`gpuhub_testkit::postgres`: a `gpuhub_test_<random>` database
//! of its own per test on the server at `GPUHUB_TEST_POSTGRES_URL`, dropped afterwards; a server that
//! cannot be reached fails the test, saying how to start it).

use chrono::{DateTime, TimeZone, Utc};
use gpuhub_store::{Backend, Store};
use gpuhub_testkit::postgres::Database;
use std::future::Future;

pub use gpuhub_testkit::postgres::url as postgres_url;

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
            let db = Database::create().await;
            let outcome = tokio::spawn(body(db.url())).await;
            db.drop_it().await;
            if let Err(e) = outcome {
                std::panic::resume_unwind(e.into_panic());
            }
        }
    }
}

/// A fixed instant with whole milliseconds, plus `offset_ms`.
pub fn t(offset_ms: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 3, 14, 15, 9, 26).unwrap() + chrono::Duration::milliseconds(offset_ms)
}
