//! Personal images: workspaces saved by their owners.

use crate::codec::{get_time, get_u64, ms};
use crate::error::conflict;
use crate::{Result, Store, StoreError};
use gpuhub_core::image::PersonalImage;
use sqlx::Row;
use sqlx::any::AnyRow;

const COLUMNS: &str = "owner, name, reference, size_bytes, workload, created_at";

fn from_row(row: &AnyRow) -> Result<PersonalImage> {
    Ok(PersonalImage {
        owner: row.try_get("owner")?,
        name: row.try_get("name")?,
        reference: row.try_get("reference")?,
        size_bytes: get_u64(row, "size_bytes")?,
        workload: row.try_get("workload")?,
        created_at: get_time(row, "created_at")?,
    })
}

impl Store {
    /// Records a personal image; [`StoreError::Conflict`] when the owner has one of that name.
    pub async fn insert_personal_image(&self, p: &PersonalImage) -> Result<()> {
        sqlx::query(&format!("INSERT INTO personal_images ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6)"))
            .bind(&p.owner)
            .bind(&p.name)
            .bind(&p.reference)
            .bind(i64::try_from(p.size_bytes).unwrap_or(i64::MAX))
            .bind(&p.workload)
            .bind(ms(p.created_at))
            .execute(&self.pool)
            .await
            .map_err(|e| conflict(e, || format!("{} has an image named {} already", p.owner, p.name)))?;
        Ok(())
    }

    /// `owner`'s personal images, by name.
    pub async fn list_personal_images(&self, owner: &str) -> Result<Vec<PersonalImage>> {
        let rows = sqlx::query(&format!("SELECT {COLUMNS} FROM personal_images WHERE owner = $1 ORDER BY name"))
            .bind(owner)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(from_row).collect()
    }

    /// `owner`'s personal image `name`.
    pub async fn get_personal_image(&self, owner: &str, name: &str) -> Result<PersonalImage> {
        let row = sqlx::query(&format!("SELECT {COLUMNS} FROM personal_images WHERE owner = $1 AND name = $2"))
            .bind(owner)
            .bind(name)
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::not_found("image", name))?;
        from_row(&row)
    }

    /// Forgets `owner`'s personal image `name`.
    pub async fn delete_personal_image(&self, owner: &str, name: &str) -> Result<()> {
        let done = sqlx::query("DELETE FROM personal_images WHERE owner = $1 AND name = $2")
            .bind(owner)
            .bind(name)
            .execute(&self.pool)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::not_found("image", name));
        }
        Ok(())
    }
}
