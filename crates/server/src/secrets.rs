//! Secrets at rest: what the hub must keep and use again (an S3 dataset's secret key) is sealed with
//! AES-256-GCM before it enters the store, bound to what it belongs to (the associated data names it,
//! so a sealed value moved to another row does not open). The key is `secret_key` (`GPUHUB_SECRET_KEY`,
//! 64 hex digits) or `<data_dir>/secret.key`, made once from the OS's random source, mode 0600. Losing
//! the key loses the secrets (register them again); the database alone does not give them away.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use rand::RngCore;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The key file in the data directory.
pub const KEY_FILE: &str = "secret.key";
/// What sealed text starts with (the format's version).
const PREFIX: &str = "v1:";
const NONCE_LEN: usize = 12;

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("cannot read or make the secret key {path}: {source}")]
    KeyFile { path: String, source: std::io::Error },
    #[error("the secret key {0} is not 64 hex digits")]
    BadKey(String),
    #[error("a sealed secret does not open with this key (was the secret key changed or the data moved?)")]
    Open,
}

/// Seals and opens secrets with the hub's key.
#[derive(Clone)]
pub struct SecretBox {
    cipher: Aes256Gcm,
}

impl std::fmt::Debug for SecretBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretBox(<key redacted>)")
    }
}

impl SecretBox {
    /// The key `configured` (hex), else that of `<data_dir>/secret.key`, made there (0600) when absent.
    pub fn load(configured: Option<&str>, data_dir: &Path) -> Result<Self, SecretError> {
        let path = data_dir.join(KEY_FILE);
        let shown = path.display().to_string();
        let io = |source| SecretError::KeyFile { path: shown.clone(), source };
        let hex_key = match configured {
            Some(k) => k.trim().to_owned(),
            None => match std::fs::read_to_string(&path) {
                Ok(k) => {
                    // kept private whatever an operator did to it
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
                    k.trim().to_owned()
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    let mut key = [0u8; 32];
                    rand::rngs::OsRng.fill_bytes(&mut key);
                    let k = hex::encode(key);
                    let mut f =
                        std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path).map_err(io)?;
                    f.write_all(format!("{k}\n").as_bytes()).and_then(|()| f.sync_all()).map_err(io)?;
                    tracing::info!(path = %path.display(), "made the key that seals secrets at rest");
                    k
                }
                Err(e) => return Err(io(e)),
            },
        };
        let shown_key = if configured.is_some() { "secret_key".to_owned() } else { path.display().to_string() };
        let bytes = hex::decode(&hex_key).map_err(|_| SecretError::BadKey(shown_key.clone()))?;
        let cipher = Aes256Gcm::new_from_slice(&bytes).map_err(|_| SecretError::BadKey(shown_key))?;
        Ok(Self { cipher })
    }

    /// `plain` sealed for `context` (what it belongs to, e.g. `dataset:imagenet`): `v1:` and the
    /// base64 of a fresh random nonce and the ciphertext with its tag.
    pub fn seal(&self, context: &str, plain: &str) -> String {
        let mut nonce = [0u8; NONCE_LEN];
        rand::rngs::OsRng.fill_bytes(&mut nonce);
        let sealed = self
            .cipher
            .encrypt(&Nonce::from(nonce), Payload { msg: plain.as_bytes(), aad: context.as_bytes() })
            .expect("AES-GCM seals any secret of a sane size");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        format!("{PREFIX}{}", STANDARD.encode(out))
    }

    /// The plain text of `sealed`, sealed for `context`.
    pub fn open(&self, context: &str, sealed: &str) -> Result<String, SecretError> {
        let raw = sealed.strip_prefix(PREFIX).and_then(|b| STANDARD.decode(b).ok()).ok_or(SecretError::Open)?;
        if raw.len() < NONCE_LEN {
            return Err(SecretError::Open);
        }
        let (nonce, body) = raw.split_at(NONCE_LEN);
        let nonce: [u8; NONCE_LEN] = nonce.try_into().map_err(|_| SecretError::Open)?;
        let plain = self
            .cipher
            .decrypt(&Nonce::from(nonce), Payload { msg: body, aad: context.as_bytes() })
            .map_err(|_| SecretError::Open)?;
        String::from_utf8(plain).map_err(|_| SecretError::Open)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_made_once_private_and_seals_per_context() {
        let dir = tempfile::tempdir().unwrap();
        let b = SecretBox::load(None, dir.path()).unwrap();
        let path = dir.path().join(KEY_FILE);
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let key = std::fs::read_to_string(&path).unwrap();
        let sealed = b.seal("dataset:a", "s3cr3t");
        assert!(sealed.starts_with("v1:") && !sealed.contains("s3cr3t"), "{sealed}");
        assert_ne!(sealed, b.seal("dataset:a", "s3cr3t"), "a fresh nonce each time");
        assert_eq!(b.open("dataset:a", &sealed).unwrap(), "s3cr3t");
        assert!(matches!(b.open("dataset:b", &sealed), Err(SecretError::Open)), "bound to its context");
        // loaded again: the same key, the same secrets
        let again = SecretBox::load(None, dir.path()).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), key);
        assert_eq!(again.open("dataset:a", &sealed).unwrap(), "s3cr3t");
        // another key opens nothing; a tampered value opens nothing
        let other = SecretBox::load(Some(&"ab".repeat(32)), dir.path()).unwrap();
        assert!(other.open("dataset:a", &sealed).is_err());
        let mut tampered = sealed.clone().into_bytes();
        let last = tampered.len() - 3;
        tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
        assert!(b.open("dataset:a", &String::from_utf8(tampered).unwrap()).is_err());
        assert!(b.open("dataset:a", "plain").is_err());
        assert!(matches!(SecretBox::load(Some("xyz"), dir.path()), Err(SecretError::BadKey(_))));
        assert!(!format!("{b:?}").contains(key.trim()));
    }
}
