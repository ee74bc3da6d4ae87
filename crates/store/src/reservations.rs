//! Bookings of GPUs for a team queue during a time window, made by admins through the API.

use crate::codec::{get_int, get_time, ms};
use crate::error::conflict;
use crate::{Result, Store, StoreError};
use chrono::{DateTime, Utc};
use gpuhub_core::reservation::ReservationView;
use sqlx::Row;
use sqlx::any::AnyRow;

const COLUMNS: &str = "id, queue, gpus, model, start_ms, end_ms, created_by";

fn reservation_from_row(row: &AnyRow) -> Result<ReservationView> {
    Ok(ReservationView {
        id: row.try_get("id")?,
        queue: row.try_get("queue")?,
        gpus: get_int(row, "gpus")?,
        model: row.try_get("model")?,
        start: get_time(row, "start_ms")?,
        end: get_time(row, "end_ms")?,
        created_by: row.try_get("created_by")?,
    })
}

impl Store {
    /// Stores a booking made at `now`. [`StoreError::Conflict`] if its id is taken.
    pub async fn insert_reservation(&self, r: &ReservationView, now: DateTime<Utc>) -> Result<()> {
        sqlx::query(&format!(
            "INSERT INTO reservations ({COLUMNS}, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
        ))
        .bind(&r.id)
        .bind(&r.queue)
        .bind(i64::from(r.gpus))
        .bind(r.model.as_deref())
        .bind(ms(r.start))
        .bind(ms(r.end))
        .bind(&r.created_by)
        .bind(ms(now))
        .execute(&self.pool)
        .await
        .map_err(|e| conflict(e, || format!("reservation {} already exists", r.id)))?;
        Ok(())
    }

    /// The bookings whose window ends after `after`, by start time then id.
    pub async fn list_reservations(&self, after: DateTime<Utc>) -> Result<Vec<ReservationView>> {
        let rows = sqlx::query(&format!("SELECT {COLUMNS} FROM reservations WHERE end_ms > $1 ORDER BY start_ms, id"))
            .bind(ms(after))
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(reservation_from_row).collect()
    }

    /// Removes the booking `id`.
    pub async fn delete_reservation(&self, id: &str) -> Result<()> {
        let done = sqlx::query("DELETE FROM reservations WHERE id = $1").bind(id).execute(&self.pool).await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::not_found("reservation", id));
        }
        Ok(())
    }
}
