//! The datasets admins register by name. An object-storage dataset's secret key is kept as the server
//! gives it, sealed: the store never sees the plain text.

use crate::codec::get_bool;
use crate::{Result, Store, StoreError};
use gpuhub_core::dataset::{Dataset, S3Source, Secret};
use sqlx::Row;
use sqlx::any::AnyRow;

const COLUMNS: &str =
    "name, path, description, nfs, s3_url, s3_endpoint, s3_region, s3_access_key, s3_secret, read_only";

fn dataset_from_row(row: &AnyRow) -> Result<Dataset> {
    let s3_url: Option<String> = row.try_get("s3_url")?;
    let s3 = match s3_url {
        Some(url) => Some(S3Source {
            url,
            endpoint: row.try_get::<Option<String>, _>("s3_endpoint")?.unwrap_or_default(),
            region: row.try_get("s3_region")?,
            access_key: row.try_get("s3_access_key")?,
            secret_key: row.try_get::<Option<String>, _>("s3_secret")?.map(Secret::new),
        }),
        None => None,
    };
    Ok(Dataset {
        name: row.try_get("name")?,
        path: row.try_get("path")?,
        nfs: row.try_get("nfs")?,
        s3,
        read_only: get_bool(row, "read_only")?,
        description: row.try_get("description")?,
        status: None,
    })
}

impl Store {
    /// Registers a dataset, or replaces the registration of the one with that name (workloads already
    /// submitted keep the path they had). An S3 secret key is stored as given: the caller seals it.
    pub async fn upsert_dataset(&self, d: &Dataset) -> Result<()> {
        let s3 = d.s3.as_ref();
        sqlx::query(
            "INSERT INTO datasets (name, path, description, nfs, s3_url, s3_endpoint, s3_region, s3_access_key, \
             s3_secret, read_only) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
             ON CONFLICT (name) DO UPDATE SET path = excluded.path, description = excluded.description, \
             nfs = excluded.nfs, s3_url = excluded.s3_url, s3_endpoint = excluded.s3_endpoint, \
             s3_region = excluded.s3_region, s3_access_key = excluded.s3_access_key, \
             s3_secret = excluded.s3_secret, read_only = excluded.read_only",
        )
        .bind(&d.name)
        .bind(&d.path)
        .bind(&d.description)
        .bind(d.nfs.as_deref())
        .bind(s3.map(|s| s.url.as_str()))
        .bind(s3.map(|s| s.endpoint.as_str()))
        .bind(s3.and_then(|s| s.region.as_deref()))
        .bind(s3.and_then(|s| s.access_key.as_deref()))
        .bind(s3.and_then(|s| s.secret_key.as_ref()).map(Secret::expose))
        .bind(d.read_only)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The dataset `name`.
    pub async fn get_dataset(&self, name: &str) -> Result<Dataset> {
        let row = sqlx::query(&format!("SELECT {COLUMNS} FROM datasets WHERE name = $1"))
            .bind(name)
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::not_found("dataset", name))?;
        dataset_from_row(&row)
    }

    /// Every dataset, by name.
    pub async fn list_datasets(&self) -> Result<Vec<Dataset>> {
        let rows = sqlx::query(&format!("SELECT {COLUMNS} FROM datasets ORDER BY name")).fetch_all(&self.pool).await?;
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
