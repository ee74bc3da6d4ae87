//! Conversions between domain values and the column types both backends share through the Any driver:
//! BIGINT, TEXT and (PostgreSQL only) BOOLEAN.

use crate::{Result, StoreError};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde::de::DeserializeOwned;
use sqlx::Row;
use sqlx::any::AnyRow;

/// A timestamp as unix milliseconds (sub-millisecond precision is dropped).
pub(crate) fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

/// An optional timestamp as unix milliseconds.
pub(crate) fn opt_ms(t: Option<DateTime<Utc>>) -> Option<i64> {
    t.map(ms)
}

/// Reads a non-null millisecond timestamp column.
pub(crate) fn get_time(row: &AnyRow, col: &str) -> Result<DateTime<Utc>> {
    let v: i64 = row.try_get(col)?;
    DateTime::from_timestamp_millis(v).ok_or_else(|| StoreError::Corrupt(format!("{col}: timestamp {v} out of range")))
}

/// Reads a nullable millisecond timestamp column.
pub(crate) fn get_opt_time(row: &AnyRow, col: &str) -> Result<Option<DateTime<Utc>>> {
    let v: Option<i64> = row.try_get(col)?;
    v.map(|v| {
        DateTime::from_timestamp_millis(v)
            .ok_or_else(|| StoreError::Corrupt(format!("{col}: timestamp {v} out of range")))
    })
    .transpose()
}

/// Reads a flag: BOOLEAN on PostgreSQL, 0/1 INTEGER on SQLite (which has no boolean values).
pub(crate) fn get_bool(row: &AnyRow, col: &str) -> Result<bool> {
    match row.try_get::<bool, _>(col) {
        Ok(b) => Ok(b),
        Err(_) => Ok(row.try_get::<i64, _>(col)? != 0),
    }
}

/// Reads an integer column into a narrower type, calling a value out of range corrupt.
pub(crate) fn get_int<T: TryFrom<i64>>(row: &AnyRow, col: &str) -> Result<T> {
    let v: i64 = row.try_get(col)?;
    T::try_from(v).map_err(|_| StoreError::Corrupt(format!("{col}: {v} out of range")))
}

/// Reads a text column and parses it with `FromStr`.
pub(crate) fn get_parsed<T: std::str::FromStr>(row: &AnyRow, col: &str) -> Result<T>
where
    T::Err: std::fmt::Display,
{
    let v: String = row.try_get(col)?;
    v.parse().map_err(|e| StoreError::Corrupt(format!("{col}: {e}")))
}

/// Encodes a value for a JSON TEXT column.
pub(crate) fn to_json<T: Serialize + ?Sized>(what: &str, v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

/// Reads a JSON TEXT column.
pub(crate) fn get_json<T: DeserializeOwned>(row: &AnyRow, col: &str) -> Result<T> {
    let v: String = row.try_get(col)?;
    serde_json::from_str(&v).map_err(|e| StoreError::Corrupt(format!("{col}: {e}")))
}

/// Stores a `u64` in a signed BIGINT column, bit for bit (values above `i64::MAX` read back exactly).
pub(crate) fn u64_to_db(v: u64) -> i64 {
    v as i64
}

/// The inverse of [`u64_to_db`].
pub(crate) fn get_u64(row: &AnyRow, col: &str) -> Result<u64> {
    Ok(row.try_get::<i64, _>(col)? as u64)
}
