//! The datasets admins register by name.

use crate::{Result, Store, StoreError};
use gpuhub_core::dataset::Dataset;
use sqlx::Row;
use sqlx::any::AnyRow;

fn dataset_from_row(row: &AnyRow) -> Result<Dataset> {
    Ok(Dataset {
        name: row.try_get("name")?,
        path: row.try_get("path")?,
        nfs: row.try_get("nfs")?,
        description: row.try_get("description")?,
    })
}

impl Store {
    /// Registers a dataset, or replaces the path and description of the one with that name (workloads
    /// already submitted keep the path they had).
    pub async fn upsert_dataset(&self, d: &Dataset) -> Result<()> {
        sqlx::query(
            "INSERT INTO datasets (name, path, description, nfs) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (name) DO UPDATE SET path = excluded.path, description = excluded.description, \
             nfs = excluded.nfs",
        )
        .bind(&d.name)
        .bind(&d.path)
        .bind(&d.description)
        .bind(d.nfs.as_deref())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The dataset `name`.
    pub async fn get_dataset(&self, name: &str) -> Result<Dataset> {
        let row = sqlx::query("SELECT name, path, description, nfs FROM datasets WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::not_found("dataset", name))?;
        dataset_from_row(&row)
    }

    /// Every dataset, by name.
    pub async fn list_datasets(&self) -> Result<Vec<Dataset>> {
        let rows = sqlx::query("SELECT name, path, description, nfs FROM datasets ORDER BY name")
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(dataset_from_row).collect()
    }

    /// Removes the dataset `name` (workloads already submitted keep mounting its path).
    pub async fn delete_dataset(&self, name: &str) -> Result<()> {
        let done = sqlx::query("DELETE FROM datasets WHERE name = $1").bind(name).execute(&self.pool).await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::not_found("dataset", name));
        }
        Ok(())
    }
}
