//! Whether this engine caps what a container writes outside its mounts (its writable layer,
//! `--storage-opt size=`). `docker info` names the storage driver and its backing filesystem but not
//! whether overlay2's XFS has project quotas (`pquota`), so the engine is asked the one reliable way: a
//! container with a cap is created (never started) from an empty image imported for the purpose, and
//! both are removed again.

use crate::{DockerRuntime, error};
use bollard::container::{Config, CreateContainerOptions, RemoveContainerOptions};
use bollard::image::{CreateImageOptions, RemoveImageOptions};
use bollard::models::HostConfig;
use futures::TryStreamExt;
use gpuhub_driver::EngineError;
use std::collections::HashMap;

/// The cap the probe container asks for (any size will do: it never runs).
const PROBE_BYTES: u64 = 1 << 30;

/// An empty tar archive: two zero blocks of 512 bytes, padded to a record of 10240.
const EMPTY_TAR: [u8; 10240] = [0; 10240];

/// What `docker info` says of the engine's storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Storage {
    /// The storage driver (`overlay2`, `btrfs`, `zfs`).
    pub driver: String,
    /// The filesystem under it, in Docker's word (`extfs`, `xfs`), where the driver says.
    pub backing: Option<String>,
    /// Where the engine keeps containers (`/var/lib/docker`).
    pub root: String,
}

impl DockerRuntime {
    /// The engine's storage, as `docker info` describes it.
    pub async fn storage(&self) -> Result<Storage, EngineError> {
        let info = self.docker.info().await.map_err(|e| error::map(e, "the engine's info"))?;
        let backing = info
            .driver_status
            .unwrap_or_default()
            .into_iter()
            .find(|kv| kv.first().is_some_and(|k| k == "Backing Filesystem"))
            .and_then(|kv| kv.get(1).cloned());
        Ok(Storage {
            driver: info.driver.unwrap_or_else(|| "an unknown driver".into()),
            backing,
            root: info.docker_root_dir.unwrap_or_else(|| "/var/lib/docker".into()),
        })
    }

    /// Whether the engine caps containers' writable layers (`Ok(Ok(()))`), or why it cannot
    /// (`Ok(Err(why))`: a sentence naming its storage driver, the filesystem under it and Docker's own
    /// refusal); `Err`: the engine could not be asked.
    pub async fn disk_cap(&self) -> Result<Result<(), String>, EngineError> {
        let storage = self.storage().await?;
        let unique = format!(
            "{}-{}",
            std::process::id(),
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
        );
        let image = format!("gpuhub-disk-probe:{unique}");
        let import = CreateImageOptions {
            from_src: "-".to_owned(),
            repo: "gpuhub-disk-probe".to_owned(),
            tag: unique.clone(),
            ..Default::default()
        };
        self.docker
            .create_image(Some(import), Some(bytes::Bytes::from_static(&EMPTY_TAR)), None)
            .try_collect::<Vec<_>>()
            .await
            .map_err(|e| error::map(e, "an empty image for the disk cap probe"))?;
        let options = CreateContainerOptions { name: format!("gpuhub-disk-probe-{unique}"), platform: None };
        let config = Config {
            image: Some(image.clone()),
            cmd: Some(vec!["/never-run".to_owned()]),
            host_config: Some(HostConfig {
                network_mode: Some("none".to_owned()),
                storage_opt: Some(HashMap::from([("size".to_owned(), PROBE_BYTES.to_string())])),
                ..Default::default()
            }),
            ..Default::default()
        };
        let created = self.docker.create_container(Some(options), config).await;
        if let Ok(c) = &created {
            let force = RemoveContainerOptions { force: true, v: true, link: false };
            if let Err(e) = self.docker.remove_container(&c.id, Some(force)).await {
                tracing::warn!(container = %c.id, error = %e, "cannot remove the disk cap probe's container");
            }
        }
        let force = RemoveImageOptions { force: true, noprune: false };
        if let Err(e) = self.docker.remove_image(&image, Some(force), None).await {
            tracing::warn!(image = %image, error = %e, "cannot remove the disk cap probe's image");
        }
        match created {
            Ok(_) => Ok(Ok(())),
            Err(bollard::errors::Error::DockerResponseServerError { message, .. }) => {
                Ok(Err(cannot(&storage, message.trim())))
            }
            Err(e) => Err(error::map(e, "the disk cap probe's container")),
        }
    }
}

/// Why the engine cannot cap a writable layer, naming its storage and Docker's refusal.
fn cannot(storage: &Storage, refusal: &str) -> String {
    let on = storage.backing.as_deref().map(|b| format!(" on {b}")).unwrap_or_default();
    format!(
        "capping a container's writable layer needs Docker's overlay2 on XFS mounted with pquota (or the btrfs \
         or zfs storage driver), and this engine stores containers with {}{on} in {} (Docker: {refusal}); \
         move Docker's data root onto such a filesystem",
        storage.driver, storage.root
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_names_the_driver_and_the_filesystem() {
        let s = Storage { driver: "overlay2".into(), backing: Some("extfs".into()), root: "/var/lib/docker".into() };
        let why = cannot(&s, "--storage-opt is supported only for overlay over xfs with 'pquota' mount option");
        assert!(why.contains("with overlay2 on extfs in /var/lib/docker"), "{why}");
        assert!(why.contains("(Docker: --storage-opt is supported only"), "{why}");
        let s = Storage { backing: None, driver: "vfs".into(), ..s };
        assert!(cannot(&s, "no").contains("with vfs in /var/lib/docker"));
    }
}
