//! Authentication: argon2id passwords, hashed bearer tokens and session cookies, the login rate limit,
//! and the [`Caller`] extractor every protected handler takes.

use crate::error::ApiError;
use crate::state::AppState;
use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use axum::extract::FromRequestParts;
use axum::http::{HeaderMap, header, request::Parts};
use base64::Engine;
use gpuhub_core::user::User;
use rand::RngCore;
use sha2::{Digest, Sha256};
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The name of the browser session cookie.
pub const SESSION_COOKIE: &str = "gpuhub_session";

/// Hashes a password with argon2id and a random salt (PHC string).
pub fn hash_password(password: &str) -> Result<String, ApiError> {
    let salt = SaltString::generate(&mut rand::rngs::OsRng);
    Argon2::default().hash_password(password.as_bytes(), &salt).map(|h| h.to_string()).map_err(ApiError::internal)
}

/// Checks a password against a PHC string.
pub fn verify_password(password: &str, phc: &str) -> bool {
    PasswordHash::new(phc).map(|h| Argon2::default().verify_password(password.as_bytes(), &h).is_ok()).unwrap_or(false)
}

/// Rules for a new password.
pub fn check_password(password: &str) -> Result<(), ApiError> {
    if password.chars().count() < 8 {
        return Err(ApiError::unprocessable("invalid password: must be at least 8 characters"));
    }
    if password.len() > 1024 {
        return Err(ApiError::unprocessable("invalid password: must be at most 1024 bytes"));
    }
    Ok(())
}

/// A new random token (URL-safe, 256 bits) and the hash under which it is stored.
pub fn new_token() -> (String, String) {
    let mut raw = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut raw);
    let token = format!("ghp_{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw));
    let hash = token_hash(&token);
    (token, hash)
}

/// The stored form of a token.
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// A random password for the first admin.
pub fn random_password() -> String {
    let mut raw = [0u8; 18];
    rand::rngs::OsRng.fill_bytes(&mut raw);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

/// Failed logins per user and per address in a sliding window.
#[derive(Debug)]
pub struct LoginLimiter {
    per_user: usize,
    per_addr: usize,
    window: Duration,
    failures: Mutex<HashMap<String, VecDeque<Instant>>>,
}

impl LoginLimiter {
    /// `per_user` failures per user (and four times as many per address) within `window`.
    pub fn new(per_user: usize, window: Duration) -> Self {
        Self { per_user, per_addr: per_user * 4, window, failures: Mutex::new(HashMap::new()) }
    }

    fn keys(user: &str, addr: Option<IpAddr>) -> [(String, bool); 2] {
        [(format!("u:{user}"), true), (format!("a:{}", addr.map(|a| a.to_string()).unwrap_or_default()), false)]
    }

    /// Refuses with 429 when the user or the address used up its failures; says how long to wait.
    pub fn check(&self, user: &str, addr: Option<IpAddr>, now: Instant) -> Result<(), ApiError> {
        let mut map = self.failures.lock().unwrap();
        for (key, is_user) in Self::keys(user, addr) {
            let limit = if is_user { self.per_user } else { self.per_addr };
            if let Some(q) = map.get_mut(&key) {
                while q.front().is_some_and(|t| now.duration_since(*t) > self.window) {
                    q.pop_front();
                }
                if q.len() >= limit {
                    let wait = self.window.saturating_sub(now.duration_since(q[0])).as_secs().max(1);
                    let mut e = ApiError::new(
                        axum::http::StatusCode::TOO_MANY_REQUESTS,
                        format!("too many failed logins; try again in {wait} seconds"),
                    );
                    e.retry_after = Some(wait);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Records a failure.
    pub fn fail(&self, user: &str, addr: Option<IpAddr>, now: Instant) {
        let mut map = self.failures.lock().unwrap();
        for (key, _) in Self::keys(user, addr) {
            map.entry(key).or_default().push_back(now);
        }
    }

    /// Forgets a user's failures after a successful login.
    pub fn succeed(&self, user: &str) {
        self.failures.lock().unwrap().remove(&format!("u:{user}"));
    }
}

/// The authenticated user of an API request, by `Authorization: Bearer <token>`.
///
/// The API ignores the session cookie on purpose: workspace apps are served from the hub's own origin
/// (`/w/…`), so a script in a user's app could otherwise call the API with a visitor's cookie. The
/// cookie opens only the pages that need it ([`browser_token`]).
#[derive(Debug, Clone)]
pub struct Caller(pub User);

/// The bearer token of a request, if any.
pub fn bearer_token(headers: &HeaderMap) -> Option<String> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")).map(|t| t.trim().to_owned())
}

/// The token of a browser page request: the bearer header, else the session cookie.
pub fn browser_token(headers: &HeaderMap) -> Option<String> {
    bearer_token(headers).or_else(|| cookie(headers, SESSION_COOKIE))
}

/// A cookie's value.
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

/// Resolves a token to its enabled user.
pub async fn user_for_token(state: &AppState, token: &str) -> Result<User, ApiError> {
    let found = state.store.token_user(&token_hash(token), chrono::Utc::now()).await?;
    match found {
        Some((user, _)) if !user.disabled => Ok(user),
        Some(_) => Err(ApiError::forbidden("account is disabled")),
        None => Err(ApiError::unauthorized("invalid or expired token; log in again")),
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let token = bearer_token(&parts.headers)
            .ok_or_else(|| ApiError::unauthorized("authentication required: send Authorization: Bearer <token>"))?;
        user_for_token(state, &token).await.map(Caller)
    }
}

impl Caller {
    /// Refuses non-admins with 403.
    pub fn require_admin(&self) -> Result<(), ApiError> {
        if self.0.is_admin() { Ok(()) } else { Err(ApiError::forbidden("this needs an admin account")) }
    }
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
    }

    #[test]
    fn tokens_are_random_and_hashed() {
        let (a, ha) = new_token();
        let (b, _) = new_token();
        assert_ne!(a, b);
        assert_eq!(token_hash(&a), ha);
        assert_eq!(ha.len(), 64);
    }

    #[test]
    fn limiter_blocks_then_recovers() {
        let l = LoginLimiter::new(3, Duration::from_secs(60));
        let t0 = Instant::now();
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        for _ in 0..3 {
            l.check("alice", Some(ip), t0).unwrap();
            l.fail("alice", Some(ip), t0);
        }
        let e = l.check("alice", Some(ip), t0).unwrap_err();
        assert_eq!(e.status, axum::http::StatusCode::TOO_MANY_REQUESTS);
        assert!(e.retry_after.is_some());
        // another user from the same address still may try (address limit is 12)
        l.check("bob", Some(ip), t0).unwrap();
        // after the window the user may try again
        l.check("alice", Some(ip), t0 + Duration::from_secs(61)).unwrap();
    }
}
