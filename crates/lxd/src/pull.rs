//! Pulling an image for the LXD engine: into the hub's Docker daemon (`docker pull`), where the engine
//! takes every image from (see [`crate::images`]), so that a registry image runs on LXD as on Docker,
//! pulled on first use. A private registry's credentials reach `docker login` on its standard input, in a
//! Docker configuration directory of the pull's own (0700, removed after), never in root's. The progress
//! is read from `docker pull`'s lines (`<layer>: <status>`).

use gpuhub_driver::{EngineError, PullProgress, RegistryAuth};
use std::collections::BTreeSet;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

/// What `docker pull`'s lines said so far.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    layers: BTreeSet<String>,
    done: BTreeSet<String>,
    status: String,
}

impl Progress {
    /// Takes one line of `docker pull`'s output; the progress when it was a layer's step or the pull's
    /// last word (`Status: Downloaded newer image for …`; the only one when Docker had every layer).
    pub(crate) fn line(&mut self, line: &str) -> Option<PullProgress> {
        let (layer, status) = line.trim().split_once(": ")?;
        if layer != "Status" {
            if layer.len() < 12 || !layer.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            self.layers.insert(layer.to_owned());
            if status.starts_with("Pull complete") || status.starts_with("Already exists") {
                self.done.insert(layer.to_owned());
            }
        }
        self.status = status.trim().to_owned();
        Some(PullProgress {
            status: self.status.clone(),
            current_bytes: 0,
            total_bytes: 0,
            layers: self.layers.len() as u32,
            layers_done: self.done.len() as u32,
        })
    }
}

/// The registry's words in a failed `docker` command's standard error.
fn refusal(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let text = text.trim();
    text.strip_prefix("Error response from daemon: ").unwrap_or(text).to_owned()
}

/// A directory of its own under `dir` for one pull's Docker configuration.
fn config_dir(dir: &Path) -> Result<PathBuf, EngineError> {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    let path = dir.join(format!(".pull-{}-{nanos}", std::process::id()));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&path)
        .map_err(|e| EngineError::Engine(format!("cannot make {}: {e}", path.display())))?;
    Ok(path)
}

/// Removes a pull's configuration directory when it goes (also when the pull is dropped half-way).
struct Remove(PathBuf);

impl Drop for Remove {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Pulls `image` into the hub's Docker daemon, with `auth` for a private registry, keeping a private
/// configuration under `work` while it runs; a registry's refusal is `Rejected` in its words.
pub(crate) async fn pull(
    work: &Path,
    image: &str,
    auth: Option<&RegistryAuth>,
    progress: &(dyn Fn(PullProgress) + Send + Sync),
) -> Result<(), EngineError> {
    let config = config_dir(work)?;
    let _remove = Remove(config.clone());
    let docker = |args: &[&str]| {
        let mut cmd = Command::new("docker");
        cmd.arg("--config").arg(&config).args(args).kill_on_drop(true);
        cmd
    };
    let io = |what: &str, e: std::io::Error| EngineError::Unavailable(format!("cannot run docker {what}: {e}"));
    if let Some(a) = auth {
        let mut login = docker(&["login", "--username", &a.username, "--password-stdin", &a.server])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| io("login", e))?;
        if let Some(mut stdin) = login.stdin.take() {
            stdin.write_all(a.password.as_bytes()).await.map_err(|e| io("login", e))?;
        }
        let out = login.wait_with_output().await.map_err(|e| io("login", e))?;
        if !out.status.success() {
            return Err(EngineError::Rejected(format!("pull of {image}: {}", refusal(&out.stderr))));
        }
    }
    let mut child = docker(&["pull", image])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| io("pull", e))?;
    let mut lines =
        BufReader::new(child.stdout.take().ok_or_else(|| io("pull", std::io::ErrorKind::Other.into()))?).lines();
    let mut seen = Progress::default();
    while let Ok(Some(line)) = lines.next_line().await {
        if let Some(p) = seen.line(&line) {
            progress(p);
        }
    }
    let out = child.wait_with_output().await.map_err(|e| io("pull", e))?;
    if !out.status.success() {
        return Err(EngineError::Rejected(format!("pull of {image}: {}", refusal(&out.stderr))));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_and_their_steps_are_counted_from_dockers_lines() {
        let mut p = Progress::default();
        assert_eq!(p.line("latest: Pulling from library/busybox"), None);
        let a = p.line("9ad63333ebc9: Pulling fs layer").unwrap();
        assert_eq!((a.layers, a.layers_done, a.status.as_str()), (1, 0, "Pulling fs layer"));
        p.line("0f8b424aa0b9: Already exists");
        p.line("9ad63333ebc9: Download complete");
        let d = p.line("9ad63333ebc9: Pull complete").unwrap();
        assert_eq!((d.layers, d.layers_done), (2, 2));
        assert_eq!(p.line("Digest: sha256:5c9a0b4e0a"), None, "not a layer");
        let last = p.line("Status: Downloaded newer image for busybox:latest").unwrap();
        assert_eq!((last.status.as_str(), last.layers_done), ("Downloaded newer image for busybox:latest", 2));
        assert_eq!(
            refusal(b"Error response from daemon: manifest for x:nope not found: manifest unknown\n"),
            "manifest for x:nope not found: manifest unknown"
        );
    }
}
