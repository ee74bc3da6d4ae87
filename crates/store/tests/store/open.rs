//! Opening databases: persistence across opens, idempotent migrations, SQLite specifics.

use crate::common::{t, with_url};
use gpuhub_core::user::{FIRST_UID, Role};
use gpuhub_store::{Backend, Store};

async fn reopen(url: String) {
    let s = Store::open(&url).await.unwrap();
    s.ping().await.unwrap();
    let alice = s.create_user("alice", "h", Role::Admin, t(0)).await.unwrap();
    s.create_user("bob", "h", Role::User, t(0)).await.unwrap();
    s.delete_user("bob").await.unwrap();
    s.set_setting("k", "v").await.unwrap();
    s.close().await;

    // a second open finds the schema current and the data (and the UID counter) in place
    let s = Store::open(&url).await.unwrap();
    assert_eq!(s.get_user("alice").await.unwrap(), alice);
    assert_eq!(s.get_setting("k").await.unwrap().as_deref(), Some("v"));
    assert_eq!(s.create_user("carol", "h", Role::User, t(0)).await.unwrap().uid, FIRST_UID + 2);
    // two stores on one database at once
    let other = Store::open(&url).await.unwrap();
    assert_eq!(other.count_users().await.unwrap(), 2);
    other.close().await;
    s.close().await;
    assert!(s.ping().await.is_err(), "a closed store refuses work");
}

#[tokio::test]
async fn reopen_sqlite() {
    with_url(Backend::Sqlite, reopen).await
}

#[tokio::test]
async fn reopen_postgres() {
    with_url(Backend::Postgres, reopen).await
}

#[tokio::test]
async fn sqlite_file_is_created_with_a_write_ahead_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub-dir-does-not-matter.db");
    assert!(!path.exists());
    let s = Store::open(&format!("sqlite://{}", path.display())).await.unwrap();
    assert_eq!(s.backend(), Backend::Sqlite);
    s.create_user("alice", "h", Role::User, t(0)).await.unwrap();
    assert!(path.exists());
    let wal = dir.path().join("sub-dir-does-not-matter.db-wal");
    assert!(wal.exists(), "journal_mode=WAL keeps a -wal file next to the database while it is open");
    s.close().await;
}

#[tokio::test]
async fn sqlite_in_memory() {
    let s = Store::open("sqlite::memory:").await.unwrap();
    s.create_user("alice", "h", Role::User, t(0)).await.unwrap();
    // every clone shares the one in-memory database
    let c = s.clone();
    let got = tokio::spawn(async move { c.get_user("alice").await.unwrap() }).await.unwrap();
    assert_eq!(got.uid, FIRST_UID);
    assert_eq!(s.count_users().await.unwrap(), 1);
}

#[tokio::test]
async fn postgres_database_must_exist() {
    let url = crate::common::postgres_url();
    let (base, _) = url.rsplit_once('/').unwrap();
    let e = Store::open(&format!("{base}/gpuhub_test_does_not_exist")).await.unwrap_err();
    assert!(matches!(e, gpuhub_store::StoreError::Database(_)), "{e:?}");
    assert!(e.to_string().starts_with("database error: "), "{e}");
}

#[tokio::test]
async fn sqlite_locked_past_the_busy_timeout_is_unavailable_then_works() {
    use sqlx::{Connection, Executor};
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("gpuhub.db").display());
    let s = Store::open(&url).await.unwrap();
    // another writer holds the write lock longer than the store's 5 s busy timeout
    let mut other = sqlx::SqliteConnection::connect(&url).await.unwrap();
    other.execute("BEGIN IMMEDIATE").await.unwrap();
    let e = s.set_setting("k", "v").await.unwrap_err();
    assert!(e.is_unavailable(), "{e:?}");
    assert!(e.to_string().starts_with("database unavailable: "), "{e}");
    other.execute("ROLLBACK").await.unwrap();
    other.close().await.unwrap();
    s.set_setting("k", "v").await.unwrap();
    assert_eq!(s.get_setting("k").await.unwrap().as_deref(), Some("v"));
}
