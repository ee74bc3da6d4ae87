//! A fresh PostgreSQL database per test, on the server at `GPUHUB_TEST_POSTGRES_URL` (default
//! [`DEFAULT_URL`]), which must name a role allowed to create databases. Each test creates its own
//! `gpuhub_test_<random>` database there and drops it after, so tests run in parallel without seeing
//! each other: the store's cases on PostgreSQL and the hub's fault tests (the database cut off) take it
//! from here. A server that cannot be reached fails the test, saying how to start it.

use sqlx::{Connection, Executor, PgConnection};

/// Where the PostgreSQL tests connect when `GPUHUB_TEST_POSTGRES_URL` is not set.
pub const DEFAULT_URL: &str = "postgres://gpuhub:gpuhub@127.0.0.1:5432/postgres";

/// The PostgreSQL server URL the tests use.
pub fn url() -> String {
    std::env::var("GPUHUB_TEST_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned())
}

/// A database of its own on the test server; [`Database::drop_it`] removes it.
#[derive(Debug)]
pub struct Database {
    /// `gpuhub_test_<random>`.
    pub name: String,
    base: String,
}

impl Database {
    /// Creates an empty database on the server at [`url`].
    pub async fn create() -> Database {
        let base = url();
        let name = format!("gpuhub_test_{}", uuid::Uuid::new_v4().simple());
        let mut admin = admin_connection(&base).await;
        admin.execute(format!("CREATE DATABASE {name}").as_str()).await.unwrap();
        admin.close().await.unwrap();
        Database { name, base }
    }

    /// Its URL: the server's, naming this database.
    pub fn url(&self) -> String {
        with_database(&self.base, &self.name)
    }

    /// Drops it, closing whatever connections are still open to it.
    pub async fn drop_it(self) {
        let mut admin = admin_connection(&self.base).await;
        admin.execute(format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name).as_str()).await.unwrap();
        admin.close().await.unwrap();
    }
}

async fn admin_connection(url: &str) -> PgConnection {
    match PgConnection::connect(url).await {
        Ok(c) => c,
        Err(e) => panic!(
            "PostgreSQL is unreachable at {} ({e}). The PostgreSQL tests need a server: start it \
             (`service postgresql start`, or scripts/setup-debian.sh) and create the test role once \
             (`su postgres -c \"psql -c \\\"CREATE ROLE gpuhub LOGIN SUPERUSER PASSWORD 'gpuhub'\\\"\"`), \
             or point GPUHUB_TEST_POSTGRES_URL at a server where the role may create databases",
            redact(url)
        ),
    }
}

/// `url` with its database (path) replaced by `database`, keeping any query string.
pub fn with_database(url: &str, database: &str) -> String {
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
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => match url[s + 3..at].split_once(':') {
            Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
            None => url.to_owned(),
        },
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(with_database("postgres://u:p@h:5432/postgres", "x"), "postgres://u:p@h:5432/x");
        assert_eq!(
            with_database("postgres://u:p@h/postgres?sslmode=disable", "x"),
            "postgres://u:p@h/x?sslmode=disable"
        );
        assert_eq!(with_database("postgres://h", "x"), "postgres://h/x");
        assert_eq!(redact("postgres://u:secret@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact("postgres://h/db"), "postgres://h/db");
    }
}
