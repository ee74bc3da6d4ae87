//! Images in LXD. LXD has no registry of gpuhub's images (there is no image server here): an image is
//! converted once from the hub's Docker daemon, as the Slurm engine does (`skopeo copy docker-daemon:… oci:…`,
//! `umoci unpack`), into an LXD image (`metadata.yaml` and `rootfs/` in one tarball, `POST /1.0/images`)
//! whose alias names the Docker image's ID (`gpuhub-docker-<id>`), so a re-tagged image is converted
//! anew and an unchanged one never twice. The image's command, environment and working directory are
//! kept as image properties. A workspace saved as an image (`lxc publish` of a snapshot) gets the alias
//! `gpuhub-saved-<reference>` and keeps the reference in a property.

use crate::api::{Api, ApiError};
use crate::spec::{self, ImageSettings, PROP_SOURCE};
use gpuhub_driver::EngineError;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::process::Command;

/// An LXD image gpuhub runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// The alias containers are made from.
    pub alias: String,
    /// Its settings (command, environment, working directory).
    pub settings: ImageSettings,
}

/// The images under a directory where they are converted.
#[derive(Debug)]
pub struct Images {
    dir: PathBuf,
}

/// A lock per image alias, so that each image is converted once at a time in this process.
static LOCKS: std::sync::LazyLock<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>> =
    std::sync::LazyLock::new(Mutex::default);

/// The alias of a workspace saved as `reference`.
pub fn saved_alias(reference: &str) -> String {
    spec::lxd_name(&format!("gpuhub-saved-{reference}"))
}

/// The alias of the conversion of the Docker image whose ID is `id` (`sha256:…`).
pub fn docker_alias(id: &str) -> String {
    let hex = id.strip_prefix("sha256:").unwrap_or(id);
    format!("gpuhub-docker-{}", &hex[..hex.len().min(32)])
}

pub(crate) fn api_err(e: ApiError) -> EngineError {
    match e {
        ApiError::Unreachable { .. } => EngineError::Unavailable(e.to_string()),
        e if e.not_found() => EngineError::NotFound(e.to_string()),
        e if e.code() == Some(400) => EngineError::Rejected(e.to_string()),
        e => EngineError::Engine(e.to_string()),
    }
}

/// Runs `cmd`; its stdout, or an error naming it with its stderr.
async fn run(cmd: &mut Command, what: &str) -> Result<String, (bool, String)> {
    let out = cmd.output().await.map_err(|e| (false, format!("cannot run {what}: {e}")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err((true, format!("{what} failed: {}", String::from_utf8_lossy(&out.stderr).trim())))
    }
}

/// The reference skopeo's `docker-daemon:` transport takes: with a tag (`:latest` when none is given).
fn daemon_reference(image: &str) -> String {
    let last = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') || last.contains(':') { image.to_owned() } else { format!("{image}:latest") }
}

impl Images {
    /// Images converted under `dir`.
    pub fn new(dir: PathBuf) -> Self {
        Images { dir }
    }

    fn lock(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = LOCKS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        locks.entry(key.to_owned()).or_default().clone()
    }

    /// The image alias `alias` points at: its fingerprint and properties; `None` when there is no such alias.
    pub async fn by_alias(&self, api: &Api, alias: &str) -> Result<Option<(String, Value)>, EngineError> {
        match api.get(&format!("/1.0/images/aliases/{alias}")).await {
            Ok(a) => {
                let fp = a.get("target").and_then(Value::as_str).unwrap_or_default().to_owned();
                let image = api.get(&format!("/1.0/images/{fp}")).await.map_err(api_err)?;
                Ok(Some((fp, image)))
            }
            Err(e) if e.not_found() => Ok(None),
            Err(e) => Err(api_err(e)),
        }
    }

    /// The Docker daemon's ID of `image` and its tags; `None` when the daemon lacks it.
    pub async fn docker_image(&self, image: &str) -> Result<Option<(String, Vec<String>)>, EngineError> {
        let mut cmd = Command::new("docker");
        cmd.args(["image", "inspect", "--format", "{{.Id}} {{json .RepoTags}}", image]);
        match run(&mut cmd, "docker image inspect").await {
            Ok(out) => {
                let (id, tags) = out.trim().split_once(' ').unwrap_or((out.trim(), "[]"));
                Ok(Some((
                    id.to_owned(),
                    serde_json::from_str::<Option<Vec<String>>>(tags).ok().flatten().unwrap_or_default(),
                )))
            }
            Err((true, e)) if e.contains("No such image") || e.contains("No such object") => Ok(None),
            Err((_, e)) => Err(EngineError::Unavailable(e)),
        }
    }

    /// Whether `image` can run: a saved workspace, or an image the Docker daemon has.
    pub async fn exists(&self, api: &Api, image: &str) -> Result<bool, EngineError> {
        if self.by_alias(api, &saved_alias(image)).await?.is_some() {
            return Ok(true);
        }
        Ok(self.docker_image(image).await?.is_some())
    }

    /// The LXD image for `image`: a saved workspace of that name, else the conversion of the Docker
    /// daemon's image, made now unless it was before. `ImageNotFound` when neither exists.
    pub async fn ensure(&self, api: &Api, image: &str) -> Result<Image, EngineError> {
        let saved = saved_alias(image);
        if let Some((_, img)) = self.by_alias(api, &saved).await? {
            return Ok(Image { alias: saved, settings: settings_of(&img) });
        }
        let (id, _) = self.docker_image(image).await?.ok_or_else(|| EngineError::ImageNotFound(image.to_owned()))?;
        let alias = docker_alias(&id);
        let lock = self.lock(&alias);
        let _held = lock.lock().await;
        if let Some((_, img)) = self.by_alias(api, &alias).await? {
            return Ok(Image { alias, settings: settings_of(&img) });
        }
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| EngineError::Engine(format!("cannot make {}: {e}", self.dir.display())))?;
        let work = self.dir.join(format!(".{alias}.{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&work);
        let made = self.convert(api, image, &id, &alias, &work).await;
        let _ = std::fs::remove_dir_all(&work);
        let settings = made?;
        tracing::info!(image, alias, "converted a docker image into an lxd image");
        Ok(Image { alias, settings })
    }

    async fn convert(
        &self,
        api: &Api,
        image: &str,
        id: &str,
        alias: &str,
        work: &Path,
    ) -> Result<ImageSettings, EngineError> {
        let fail = |e: (bool, String)| EngineError::Engine(format!("converting {image}: {}", e.1));
        std::fs::create_dir_all(work)
            .map_err(|e| EngineError::Engine(format!("cannot make {}: {e}", work.display())))?;
        let layout = work.join("layout");
        let bundle = work.join("bundle");
        let source = format!("docker-daemon:{}", daemon_reference(image));
        let target = format!("oci:{}:latest", layout.display());
        run(Command::new("skopeo").args(["copy", "--quiet", &source, &target]), "skopeo copy").await.map_err(fail)?;
        let image_ref = format!("{}:latest", layout.display());
        let bundle_arg = bundle.display().to_string();
        run(Command::new("umoci").args(["unpack", "--image", &image_ref, &bundle_arg]), "umoci unpack")
            .await
            .map_err(fail)?;
        let config: Value = std::fs::read(bundle.join("config.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(|| EngineError::Engine(format!("converting {image}: umoci wrote no readable config.json")))?;
        let process = config.get("process").cloned().unwrap_or(Value::Null);
        let strings = |v: Option<&Value>| -> Vec<String> {
            v.and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                .unwrap_or_default()
        };
        let settings = ImageSettings {
            args: strings(process.get("args")),
            env: strings(process.get("env")),
            cwd: process.get("cwd").and_then(Value::as_str).map(str::to_owned),
        };
        let created =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default();
        let metadata = format!(
            "architecture: {}\ncreation_date: {created}\nproperties:\n  description: {}\n",
            std::env::consts::ARCH,
            serde_json::to_string(&format!("gpuhub: {image}")).unwrap_or_default(),
        );
        std::fs::write(bundle.join("metadata.yaml"), metadata)
            .map_err(|e| EngineError::Engine(format!("converting {image}: cannot write metadata.yaml: {e}")))?;
        let tarball = work.join("image.tar");
        let tar_arg = tarball.display().to_string();
        run(Command::new("tar").args(["-C", &bundle_arg, "-cf", &tar_arg, "metadata.yaml", "rootfs"]), "tar")
            .await
            .map_err(fail)?;
        let mut props = settings.properties();
        props.push((PROP_SOURCE.into(), image.to_owned()));
        props.push(("gpuhub.docker_id".into(), id.to_owned()));
        // a unified image's fingerprint is its tarball's SHA-256: one uploaded meanwhile (by another
        // process) is the same image
        let fp = match api.upload_image(&tarball, &props).await {
            Ok(fp) => fp,
            Err(e) if e.to_string().contains("same fingerprint already exists") => sha256_file(&tarball)?,
            Err(e) => return Err(api_err(e)),
        };
        self.set_alias(api, alias, &fp).await?;
        Ok(settings)
    }

    /// Points `alias` at the image `fp`, made or moved; returns the fingerprint it pointed at before.
    pub async fn set_alias(&self, api: &Api, alias: &str, fp: &str) -> Result<Option<String>, EngineError> {
        match api.get(&format!("/1.0/images/aliases/{alias}")).await {
            Ok(a) => {
                let old = a.get("target").and_then(Value::as_str).map(str::to_owned);
                let body = json!({"target": fp, "description": ""});
                api.json(http::Method::PUT, &format!("/1.0/images/aliases/{alias}"), &body).await.map_err(api_err)?;
                Ok(old.filter(|o| o != fp))
            }
            Err(e) if e.not_found() => {
                let body = json!({"name": alias, "target": fp, "description": ""});
                api.json(http::Method::POST, "/1.0/images/aliases", &body).await.map_err(api_err)?;
                Ok(None)
            }
            Err(e) => Err(api_err(e)),
        }
    }
}

/// The SHA-256 of `path`, in hex.
fn sha256_file(path: &Path) -> Result<String, EngineError> {
    use sha2::{Digest, Sha256};
    let mut f =
        std::fs::File::open(path).map_err(|e| EngineError::Engine(format!("cannot read {}: {e}", path.display())))?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut f, &mut hasher)
        .map_err(|e| EngineError::Engine(format!("cannot read {}: {e}", path.display())))?;
    Ok(hex::encode(hasher.finalize()))
}

/// The settings an LXD image's properties keep.
pub fn settings_of(image: &Value) -> ImageSettings {
    let props = image.get("properties").and_then(Value::as_object).cloned().unwrap_or_default();
    ImageSettings::from_properties(&props, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_are_lxd_names() {
        let a = docker_alias("sha256:673a20cb9d6022ae87502f96b3d16ebe4dcade6848cddcf44f7774f79935ebc0");
        assert_eq!(a, "gpuhub-docker-673a20cb9d6022ae87502f96b3d16ebe");
        assert_eq!(spec::lxd_name(&a), a);
        let s = saved_alias("gpuhub-inst/alice/tools:v1");
        assert_eq!(spec::lxd_name(&s), s);
        assert_ne!(s, saved_alias("gpuhub-inst/alice/tools:v2"));
        assert_eq!(daemon_reference("gpuhub/busybox"), "gpuhub/busybox:latest");
        assert_eq!(daemon_reference("localhost:5000/x"), "localhost:5000/x:latest");
    }
}
