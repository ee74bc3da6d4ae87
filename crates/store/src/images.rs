//! The admin-curated image catalog.

use crate::codec::{get_json, to_json};
use crate::{Result, Store, StoreError};
use gpuhub_core::catalog::ImageEntry;
use sqlx::Row;
use sqlx::any::AnyRow;

fn image_from_row(row: &AnyRow) -> Result<ImageEntry> {
    Ok(ImageEntry {
        name: row.try_get("name")?,
        image: row.try_get("image")?,
        description: row.try_get("description")?,
        apps: get_json(row, "apps")?,
    })
}

impl Store {
    /// Adds a catalog entry, or replaces the reference and description of the entry with that name.
    pub async fn upsert_image(&self, e: &ImageEntry) -> Result<()> {
        sqlx::query(
            "INSERT INTO images (name, image, description, apps) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (name) DO UPDATE SET image = excluded.image, description = excluded.description, \
             apps = excluded.apps",
        )
        .bind(&e.name)
        .bind(&e.image)
        .bind(&e.description)
        .bind(to_json("apps", &e.apps)?)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The catalog entry `name`.
    pub async fn get_image(&self, name: &str) -> Result<ImageEntry> {
        let row = sqlx::query("SELECT name, image, description, apps FROM images WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::not_found("image", name))?;
        image_from_row(&row)
    }

    /// The whole catalog, ordered by name.
    pub async fn list_images(&self) -> Result<Vec<ImageEntry>> {
        let rows = sqlx::query("SELECT name, image, description, apps FROM images ORDER BY name")
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(image_from_row).collect()
    }

    /// Removes the catalog entry `name` (workloads already using its image are unaffected).
    pub async fn delete_image(&self, name: &str) -> Result<()> {
        let done = sqlx::query("DELETE FROM images WHERE name = $1").bind(name).execute(&self.pool).await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::not_found("image", name));
        }
        Ok(())
    }
}
