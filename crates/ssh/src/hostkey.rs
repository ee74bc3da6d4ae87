//! The gateway's ed25519 host key: generated on first start, then kept (mode 0600) so clients'
//! `known_hosts` entries stay valid across restarts.

use crate::SshError;
use rand::RngCore;
use russh::keys::PrivateKey;
use russh::keys::ssh_key::LineEnding;
use russh::keys::ssh_key::private::{Ed25519Keypair, KeypairData};
use std::io::Write;
use std::path::Path;

/// Loads the OpenSSH private key at `path`, or generates an ed25519 key and writes it there (creating
/// the parent directory; the file is mode 0600 and never overwritten).
pub fn load_or_generate_host_key(path: &Path) -> Result<PrivateKey, SshError> {
    let err = |reason: String| SshError::HostKey { path: path.display().to_string(), reason };
    match std::fs::read_to_string(path) {
        Ok(text) => {
            return PrivateKey::from_openssh(text.as_bytes())
                .map_err(|e| err(format!("cannot parse: {e}").to_lowercase()));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(format!("cannot read: {e}"))),
    }
    let mut seed = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut seed);
    let pair = Ed25519Keypair::from_seed(&seed);
    let key = PrivateKey::new(KeypairData::Ed25519(pair), "gpuhub host key")
        .map_err(|e| err(format!("cannot build key: {e}")))?;
    let text = key.to_openssh(LineEnding::LF).map_err(|e| err(format!("cannot encode: {e}")))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| err(format!("cannot create directory: {e}")))?;
    }
    let mut file = open_new_private(path).map_err(|e| err(format!("cannot create: {e}")))?;
    file.write_all(text.as_bytes()).and_then(|()| file.sync_all()).map_err(|e| err(format!("cannot write: {e}")))?;
    tracing::info!(path = %path.display(), fingerprint = %crate::fingerprint(key.public_key()), "generated ssh host key");
    Ok(key)
}

#[cfg(unix)]
fn open_new_private(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)
}

#[cfg(not(unix))]
fn open_new_private(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new().write(true).create_new(true).open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generates_once_then_reloads_the_same_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys/ssh_host_ed25519_key");
        let first = load_or_generate_host_key(&path).unwrap();
        let second = load_or_generate_host_key(&path).unwrap();
        assert_eq!(first.public_key(), second.public_key());
        assert_eq!(first.algorithm(), russh::keys::Algorithm::Ed25519);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let out = std::process::Command::new("ssh-keygen").arg("-lf").arg(&path).output().unwrap();
        assert!(out.status.success(), "ssh-keygen cannot read the host key");
        let shown = String::from_utf8_lossy(&out.stdout);
        assert!(shown.contains(&crate::fingerprint(first.public_key())), "{shown}");
    }

    #[test]
    fn garbage_key_file_is_an_error_not_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        std::fs::write(&path, "not a key").unwrap();
        let e = load_or_generate_host_key(&path).unwrap_err();
        assert!(e.to_string().contains("cannot parse"), "{e}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "not a key");
    }
}
