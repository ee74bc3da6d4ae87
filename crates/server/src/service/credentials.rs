//! Credentials: passwords (argon2id, hashed off the async threads, at most two at a time) and the
//! random tokens of the API and of browser sessions, kept only as hashes.

use super::ServiceError;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};

/// argon2id memory per hash, in KiB: OWASP's equal-strength alternative to 19 MiB with two passes is
/// 7 MiB with five (Password Storage Cheat Sheet), which keeps the server small while logins run.
const ARGON2_MEMORY_KIB: u32 = 7 * 1024;
/// argon2id passes over that memory.
const ARGON2_PASSES: u32 = 5;

/// The hasher new passwords use.
fn argon2() -> Argon2<'static> {
    let params = Params::new(ARGON2_MEMORY_KIB, ARGON2_PASSES, 1, None).expect("constant argon2 parameters are valid");
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
}

/// Hashes a password with argon2id and a random salt (PHC string).
pub fn hash_password(password: &str) -> Result<String, ServiceError> {
    let salt = SaltString::generate(&mut rand::rngs::OsRng);
    argon2().hash_password(password.as_bytes(), &salt).map(|h| h.to_string()).map_err(ServiceError::internal)
}

/// Checks a password against a PHC string (with the parameters the string names).
pub fn verify_password(password: &str, phc: &str) -> bool {
    PasswordHash::new(phc).map(|h| argon2().verify_password(password.as_bytes(), &h).is_ok()).unwrap_or(false)
}

/// Whether a stored hash was made with other parameters than [`hash_password`] uses now (older
/// installations hashed with 19 MiB): a successful login then stores a new hash.
pub fn needs_rehash(phc: &str) -> bool {
    let Ok(h) = PasswordHash::new(phc) else { return true };
    let current = argon2();
    h.algorithm.as_str() != "argon2id"
        || Params::try_from(&h)
            .map(|p| {
                let c = current.params();
                (p.m_cost(), p.t_cost(), p.p_cost()) != (c.m_cost(), c.t_cost(), c.p_cost())
            })
            .unwrap_or(true)
        || h.version != Some(Version::V0x13 as u32)
}

/// Password hashes computed at once: each argon2id run holds its memory (7 MiB; 19 MiB for hashes
/// of older installations), so logins in parallel would otherwise grow the server by that much each.
static HASHING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

/// [`verify_password`] off the async threads, at most [`HASHING`]'s permits at a time.
pub async fn verify_password_bounded(password: String, phc: String) -> Result<bool, ServiceError> {
    let _permit = HASHING.acquire().await.map_err(ServiceError::internal)?;
    tokio::task::spawn_blocking(move || verify_password(&password, &phc)).await.map_err(ServiceError::internal)
}

/// [`hash_password`] off the async threads, at most [`HASHING`]'s permits at a time.
pub async fn hash_password_bounded(password: String) -> Result<String, ServiceError> {
    let _permit = HASHING.acquire().await.map_err(ServiceError::internal)?;
    tokio::task::spawn_blocking(move || hash_password(&password)).await.map_err(ServiceError::internal)?
}

/// Rules for a new password.
pub fn check_password(password: &str) -> Result<(), ServiceError> {
    if password.chars().count() < 8 {
        return Err(ServiceError::invalid("invalid password: must be at least 8 characters"));
    }
    if password.len() > 1024 {
        return Err(ServiceError::invalid("invalid password: must be at most 1024 bytes"));
    }
    if password.chars().any(char::is_control) {
        return Err(ServiceError::invalid(
            "invalid password: must not contain control characters (NUL, newline, escape…)",
        ));
    }
    Ok(())
}

/// The prefix of API tokens: gpuhub's own, so that secret scanners name the right product (`ghp_` is
/// GitHub's).
pub const API_TOKEN_PREFIX: &str = "gpuhub_pat_";

/// The prefix of browser session tokens (the cookie's value).
pub const SESSION_TOKEN_PREFIX: &str = "gpuhub_ses_";

/// A new random token of `kind` (URL-safe, 256 bits, with gpuhub's prefix) and the hash it is stored under.
pub fn new_token(kind: gpuhub_store::TokenKind) -> (String, String) {
    let mut raw = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut raw);
    let prefix = match kind {
        gpuhub_store::TokenKind::Api => API_TOKEN_PREFIX,
        gpuhub_store::TokenKind::Session => SESSION_TOKEN_PREFIX,
    };
    let token = format!("{prefix}{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw));
    let hash = token_hash(&token);
    (token, hash)
}

/// The stored form of a token.
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// The id a token is shown and revoked by: a prefix of its hash (it reveals nothing of the secret).
pub fn token_id(hash: &str) -> &str {
    &hash[..gpuhub_store::TOKEN_ID_LEN.min(hash.len())]
}

/// A random password for the first admin.
pub fn random_password() -> String {
    let mut raw = [0u8; 18];
    rand::rngs::OsRng.fill_bytes(&mut raw);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords() {
        let h = hash_password("correct horse").unwrap();
        assert!(h.starts_with("$argon2id$"));
        assert!(verify_password("correct horse", &h));
        assert!(!verify_password("wrong horse", &h));
        assert!(!verify_password("x", "not a hash"));
        assert!(h.contains("m=7168,t=5,p=1"), "{h}");
        assert!(!needs_rehash(&h));
    }

    #[test]
    fn hashes_of_older_parameters_verify_and_are_renewed() {
        // argon2's old default (19 MiB, two passes), as installations before this change stored
        let old = Argon2::default()
            .hash_password(b"correct horse", &SaltString::generate(&mut rand::rngs::OsRng))
            .unwrap()
            .to_string();
        assert!(old.contains("m=19456,t=2,p=1"), "{old}");
        assert!(verify_password("correct horse", &old));
        assert!(needs_rehash(&old));
        assert!(needs_rehash("not a hash"));
    }

    #[test]
    fn tokens_are_random_hashed_and_prefixed() {
        let (a, ha) = new_token(gpuhub_store::TokenKind::Api);
        let (b, _) = new_token(gpuhub_store::TokenKind::Api);
        let (c, _) = new_token(gpuhub_store::TokenKind::Session);
        assert_ne!(a, b);
        assert!(a.starts_with("gpuhub_pat_") && c.starts_with("gpuhub_ses_") && !a.starts_with("ghp_"), "{a} {c}");
        assert_eq!(token_hash(&a), ha);
        assert_eq!(ha.len(), 64);
        assert_eq!(token_id(&ha), &ha[..16]);
    }
}
