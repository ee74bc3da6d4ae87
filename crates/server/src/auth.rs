//! Authentication: argon2id passwords, hashed bearer tokens and session cookies, the login rate limit,
//! and the [`Caller`] extractor every protected handler takes.

use crate::error::ApiError;
use crate::state::AppState;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
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

/// The name of the browser session cookie where cookies are not `Secure` (plain HTTP).
pub const SESSION_COOKIE: &str = "gpuhub_session";
/// Its name with `secure_cookies`: the `__Host-` prefix makes browsers keep it only when set by this
/// host itself, `Secure`, `Path=/` and without `Domain`, so no other host (an app's origin) can set,
/// shadow or fixate it.
pub const SECURE_SESSION_COOKIE: &str = "__Host-gpuhub_session";

/// The session cookie's name under `config`.
pub fn session_cookie_name(config: &crate::config::Config) -> &'static str {
    if config.secure_cookies { SECURE_SESSION_COOKIE } else { SESSION_COOKIE }
}

/// The `Set-Cookie` that clears the session cookie.
pub fn clear_session_cookie(config: &crate::config::Config) -> header::HeaderValue {
    header::HeaderValue::from_static(if config.secure_cookies {
        "__Host-gpuhub_session=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0; Secure"
    } else {
        "gpuhub_session=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0"
    })
}

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
pub fn hash_password(password: &str) -> Result<String, ApiError> {
    let salt = SaltString::generate(&mut rand::rngs::OsRng);
    argon2().hash_password(password.as_bytes(), &salt).map(|h| h.to_string()).map_err(ApiError::internal)
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
pub async fn verify_password_bounded(password: String, phc: String) -> Result<bool, ApiError> {
    let _permit = HASHING.acquire().await.map_err(ApiError::internal)?;
    tokio::task::spawn_blocking(move || verify_password(&password, &phc)).await.map_err(ApiError::internal)
}

/// [`hash_password`] off the async threads, at most [`HASHING`]'s permits at a time.
pub async fn hash_password_bounded(password: String) -> Result<String, ApiError> {
    let _permit = HASHING.acquire().await.map_err(ApiError::internal)?;
    tokio::task::spawn_blocking(move || hash_password(&password)).await.map_err(ApiError::internal)?
}

/// Rules for a new password.
pub fn check_password(password: &str) -> Result<(), ApiError> {
    if password.chars().count() < 8 {
        return Err(ApiError::unprocessable("invalid password: must be at least 8 characters"));
    }
    if password.len() > 1024 {
        return Err(ApiError::unprocessable("invalid password: must be at most 1024 bytes"));
    }
    if password.chars().any(char::is_control) {
        return Err(ApiError::unprocessable(
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

/// An address or a CIDR block (`10.0.0.0/8`, `::1`), for `trusted_proxies` and the `/metrics`
/// allowlist: an [`ipnet::IpNet`] that also takes a bare address (a block of one), and that an
/// IPv4-mapped IPv6 address (`::ffff:10.0.0.1`, as a dual-stack listener sees IPv4 peers) matches as
/// its IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet(ipnet::IpNet);

impl std::str::FromStr for IpNet {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a.trim(), Some(p.trim())),
            None => (s.trim(), None),
        };
        let addr: IpAddr = a.parse().map_err(|_| format!("{s:?} is not an IP address or CIDR block"))?;
        let net = match p {
            None => ipnet::IpNet::from(addr),
            Some(p) => {
                let prefix = p.parse::<u8>().map_err(|_| format!("{s:?}: bad prefix length"))?;
                ipnet::IpNet::new(addr, prefix).map_err(|_| format!("{s:?}: bad prefix length"))?
            }
        };
        Ok(IpNet(net))
    }
}

impl IpNet {
    /// Whether `ip` lies in this block.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        self.0.contains(&ip)
    }
}

/// The client's address: the peer, or, when the peer is a trusted proxy, the right-most address of
/// `X-Forwarded-For` that is not itself a trusted proxy (the left part of that header is the client's
/// own word and is never believed).
pub fn client_ip(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> IpAddr {
    let is_trusted = |ip: IpAddr| trusted.iter().any(|n| n.contains(ip));
    if !is_trusted(peer) {
        return peer;
    }
    let hops: Vec<IpAddr> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|h| h.trim().parse().ok())
        .collect();
    hops.iter().rev().copied().find(|ip| !is_trusted(*ip)).or_else(|| hops.first().copied()).unwrap_or(peer)
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum LimitKey {
    Pair(String, IpAddr),
    User(String),
    Addr(IpAddr),
}

/// Failed logins in a sliding window, kept so that an attacker is slowed without locking the real
/// user out: a (user, address) pair that used up its failures is refused for the rest of the window;
/// failures of a user from every address, and of an address for every user, only add a growing delay
/// (doubling from 250 ms up to 8 s). The correct password from another address still works.
#[derive(Debug)]
pub struct LoginLimiter {
    per_pair: usize,
    window: Duration,
    failures: Mutex<HashMap<LimitKey, VecDeque<Instant>>>,
}

/// Most entries the limiter keeps before it forgets expired ones (bounded memory under a spray).
const LIMITER_ENTRIES: usize = 10_000;

/// The longest delay the limiter adds.
pub const MAX_LOGIN_DELAY: Duration = Duration::from_secs(8);

impl LoginLimiter {
    /// `per_pair` failures per user and address within `window`.
    pub fn new(per_pair: usize, window: Duration) -> Self {
        Self { per_pair: per_pair.max(1), window, failures: Mutex::new(HashMap::new()) }
    }

    fn count(&self, map: &mut HashMap<LimitKey, VecDeque<Instant>>, key: &LimitKey, now: Instant) -> usize {
        let Some(q) = map.get_mut(key) else { return 0 };
        while q.front().is_some_and(|t| now.duration_since(*t) > self.window) {
            q.pop_front();
        }
        q.len()
    }

    fn backoff(excess: usize) -> Duration {
        if excess == 0 {
            return Duration::ZERO;
        }
        let exp = u32::try_from(excess - 1).unwrap_or(u32::MAX).min(6);
        (Duration::from_millis(250) * 2u32.pow(exp)).min(MAX_LOGIN_DELAY)
    }

    /// Refuses with 429 when this user from this address used up its failures (saying how long to wait);
    /// otherwise the delay to wait before checking the password.
    pub fn check(&self, user: &str, addr: IpAddr, now: Instant) -> Result<Duration, ApiError> {
        let mut map = self.failures.lock().unwrap();
        let pair = LimitKey::Pair(user.to_owned(), addr);
        if self.count(&mut map, &pair, now) >= self.per_pair {
            let first = map.get(&pair).and_then(|q| q.front().copied()).unwrap_or(now);
            let wait = self.window.saturating_sub(now.duration_since(first)).as_secs().max(1);
            let mut e = ApiError::new(
                axum::http::StatusCode::TOO_MANY_REQUESTS,
                format!("too many failed logins for {user} from this address; try again in {wait} seconds"),
            );
            e.retry_after = Some(wait);
            return Err(e);
        }
        let by_user = self.count(&mut map, &LimitKey::User(user.to_owned()), now);
        let by_addr = self.count(&mut map, &LimitKey::Addr(addr), now);
        Ok(Self::backoff(by_user.saturating_sub(self.per_pair))
            .max(Self::backoff(by_addr.saturating_sub(self.per_pair * 4))))
    }

    /// Records a failure.
    pub fn fail(&self, user: &str, addr: IpAddr, now: Instant) {
        let mut map = self.failures.lock().unwrap();
        if map.len() + 3 > LIMITER_ENTRIES {
            self.make_room(&mut map, now);
        }
        // a count beyond this changes nothing (the delay is at its longest): older failures go
        let longest = self.per_pair * 4 + 8;
        for key in [LimitKey::Pair(user.to_owned(), addr), LimitKey::User(user.to_owned()), LimitKey::Addr(addr)] {
            let q = map.entry(key).or_default();
            q.push_back(now);
            while q.len() > longest {
                q.pop_front();
            }
        }
    }

    /// Forgets expired entries, and if that is not enough, those whose last failure is oldest, down to
    /// three quarters of [`LIMITER_ENTRIES`] (so that a spray of names costs one sort per many
    /// failures, and what was failed most recently, such as the sprayer's own address, is kept).
    fn make_room(&self, map: &mut HashMap<LimitKey, VecDeque<Instant>>, now: Instant) {
        let window = self.window;
        map.retain(|_, q| q.back().is_some_and(|t| now.duration_since(*t) <= window));
        let keep = LIMITER_ENTRIES * 3 / 4;
        if map.len() <= keep {
            return;
        }
        let mut lasts: Vec<Instant> = map.values().filter_map(|q| q.back().copied()).collect();
        let drop = lasts.len() - keep;
        let (_, cut, _) = lasts.select_nth_unstable(drop - 1);
        let cut = *cut;
        map.retain(|_, q| q.back().is_some_and(|t| *t > cut));
    }

    /// Entries kept now (users, addresses and pairs with failures).
    pub fn entries(&self) -> usize {
        self.failures.lock().unwrap().len()
    }

    /// Forgets the failures of this user from this address after a successful login.
    pub fn succeed(&self, user: &str, addr: IpAddr) {
        self.failures.lock().unwrap().remove(&LimitKey::Pair(user.to_owned(), addr));
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
pub fn browser_token(st: &AppState, headers: &HeaderMap) -> Option<String> {
    bearer_token(headers).or_else(|| session_cookie(st, headers))
}

/// The session cookie's value (of this configuration's name only).
pub fn session_cookie(st: &AppState, headers: &HeaderMap) -> Option<String> {
    cookie(headers, session_cookie_name(&st.config))
}

/// How many cookies named `name` a request carries.
pub fn cookie_count(headers: &HeaderMap, name: &str) -> usize {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(::cookie::Cookie::split_parse)
        .filter_map(Result::ok)
        .filter(|c| c.name() == name)
        .count()
}

/// Refuses (401, the cookies cleared) a request of the hub's own origin that carries more than one
/// session cookie: another host of the site (an app's origin) may have set one for a parent domain
/// with a longer path, which the browser sends first, to sign the visitor into someone else's session.
/// Besides the hub's own, the foreign one is cleared too: its path is one of the request path's
/// prefixes (the browser sent it) and its domain the host or one of its parents.
pub async fn one_session_cookie(
    axum::extract::State(st): axum::extract::State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if cookie_count(req.headers(), session_cookie_name(&st.config)) > 1 {
        let mut resp = ApiError::unauthorized(
            "more than one session cookie: another site may have set one; the cookie is cleared, log in again",
        )
        .into_response();
        resp.headers_mut().insert(header::SET_COOKIE, clear_session_cookie(&st.config));
        let host = req.headers().get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or_default();
        for clear in foreign_clears(session_cookie_name(&st.config), host, req.uri().path()) {
            if let Ok(v) = header::HeaderValue::from_str(&clear) {
                resp.headers_mut().append(header::SET_COOKIE, v);
            }
        }
        return resp;
    }
    next.run(req).await
}

/// A cookie's value.
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(::cookie::Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|c| c.name() == name)
        .map(|c| c.value().to_owned())
}

/// `Set-Cookie` values that delete a cookie `name` set by another host of the site: for the request's
/// host (`host[:port]`, a name, not an address) and each of its parent domains, for each prefix of
/// `path` (with and without its trailing slash), at most 8 segments deep.
fn foreign_clears(name: &str, host: &str, path: &str) -> Vec<String> {
    let host =
        host.rsplit_once(':').map_or(host, |(h, p)| if p.bytes().all(|b| b.is_ascii_digit()) { h } else { host });
    if host.is_empty() || host.parse::<IpAddr>().is_ok() || host.starts_with('[') || name.starts_with("__Host-") {
        return Vec::new();
    }
    let labels: Vec<&str> = host.split('.').collect();
    let domains: Vec<String> = (0..labels.len().saturating_sub(1)).map(|i| labels[i..].join(".")).collect();
    let mut paths = vec!["/".to_owned()];
    let mut at = String::new();
    for seg in path.split('/').filter(|s| !s.is_empty()).take(8) {
        at = format!("{at}/{seg}");
        paths.extend([at.clone(), format!("{at}/")]);
    }
    let mut out = Vec::new();
    for d in &domains {
        for p in &paths {
            out.push(format!("{name}=; Domain={d}; Path={p}; Max-Age=0"));
        }
    }
    for p in paths.iter().skip(1) {
        out.push(format!("{name}=; Path={p}; Max-Age=0"));
    }
    out
}

/// Resolves a token to its enabled user.
pub async fn user_for_token(state: &AppState, token: &str) -> Result<User, ApiError> {
    let found = state.store.token_user(&token_hash(token), state.clock.now()).await?;
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
    fn foreign_session_cookies_are_cleared_on_every_parent_domain_and_path_prefix() {
        let c = foreign_clears("gpuhub_session", "hub.example.org:8080", "/terminal/alice/nb/");
        for want in [
            "gpuhub_session=; Domain=example.org; Path=/terminal; Max-Age=0",
            "gpuhub_session=; Domain=hub.example.org; Path=/terminal/alice/nb/; Max-Age=0",
            "gpuhub_session=; Domain=example.org; Path=/; Max-Age=0",
            "gpuhub_session=; Path=/terminal/alice; Max-Age=0",
        ] {
            assert!(c.contains(&want.to_owned()), "{want} not in {c:?}");
        }
        assert!(!c.iter().any(|v| v.contains("Domain=org;")));
        assert!(foreign_clears("gpuhub_session", "127.0.0.1:80", "/a").is_empty());
        assert!(foreign_clears("gpuhub_session", "[::1]:80", "/a").is_empty());
        assert!(foreign_clears("__Host-gpuhub_session", "hub.example.org", "/a").is_empty());
        assert!(foreign_clears("gpuhub_session", "h.example.org", &"/x".repeat(100)).len() < 60);
    }

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

    #[test]
    fn limiter_refuses_the_pair_and_only_slows_the_rest() {
        let l = LoginLimiter::new(3, Duration::from_secs(60));
        let t0 = Instant::now();
        let (attacker, alice_ip): (IpAddr, IpAddr) = ("203.0.113.9".parse().unwrap(), "198.51.100.7".parse().unwrap());
        for _ in 0..3 {
            assert_eq!(l.check("alice", attacker, t0).unwrap(), Duration::ZERO);
            l.fail("alice", attacker, t0);
        }
        let e = l.check("alice", attacker, t0).unwrap_err();
        assert_eq!(e.status, axum::http::StatusCode::TOO_MANY_REQUESTS);
        assert!(e.retry_after.is_some());
        // the real user from elsewhere is not locked out, nor another user from the attacker's address
        assert_eq!(l.check("alice", alice_ip, t0).unwrap(), Duration::ZERO);
        assert_eq!(l.check("bob", attacker, t0).unwrap(), Duration::ZERO);
        // more failures for alice from other addresses slow every try for her, boundedly
        for i in 0..20u8 {
            l.fail("alice", IpAddr::from([192, 0, 2, i]), t0);
        }
        let d = l.check("alice", alice_ip, t0).unwrap();
        assert!(d > Duration::ZERO && d <= MAX_LOGIN_DELAY, "{d:?}");
        // after the window everything is forgotten
        let later = t0 + Duration::from_secs(61);
        assert_eq!(l.check("alice", attacker, later).unwrap(), Duration::ZERO);
    }

    #[test]
    fn a_spray_of_names_keeps_the_limiter_bounded_and_the_sprayer_slowed() {
        let l = LoginLimiter::new(3, Duration::from_secs(300));
        let t0 = Instant::now();
        let sprayer: IpAddr = "203.0.113.9".parse().unwrap();
        for i in 0..(3 * LIMITER_ENTRIES) {
            let at = t0 + Duration::from_millis(i as u64);
            l.fail(&format!("user{i}"), IpAddr::from([198, 51, (i >> 8) as u8, i as u8]), at);
            l.fail(&format!("name{i}"), sprayer, at);
            assert!(l.entries() <= LIMITER_ENTRIES, "{} entries after {i}", l.entries());
        }
        let now = t0 + Duration::from_millis(3 * LIMITER_ENTRIES as u64);
        // the sprayer's address failed last of all: it is kept, and still slowed to the longest delay
        assert_eq!(l.check("someone", sprayer, now).unwrap(), MAX_LOGIN_DELAY);
        // each key's failures are bounded too: the address's count stops at what the delay needs
        let longest = l.failures.lock().unwrap().values().map(VecDeque::len).max().unwrap();
        assert!(longest <= 3 * 4 + 8, "{longest}");
        // the most recent entries survive the spray
        let last = 3 * LIMITER_ENTRIES - 1;
        let map = l.failures.lock().unwrap();
        assert!(map.contains_key(&LimitKey::Pair(format!("name{last}"), sprayer)));
        assert!(map.contains_key(&LimitKey::User(format!("user{last}"))));
        drop(map);
        // and once the window has passed, everything old is forgotten at the next room-making
        let later = now + Duration::from_secs(301);
        l.fail("x", sprayer, later);
        for i in 0..LIMITER_ENTRIES {
            l.fail(&format!("again{i}"), sprayer, later);
        }
        assert!(l.entries() <= LIMITER_ENTRIES);
    }

    #[test]
    fn forwarded_for_is_believed_only_from_trusted_proxies() {
        let trusted: Vec<IpNet> = vec!["127.0.0.1".parse().unwrap(), "10.0.0.0/8".parse().unwrap()];
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", "1.1.1.1, 203.0.113.9, 10.1.2.3".parse().unwrap());
        let proxy: IpAddr = "127.0.0.1".parse().unwrap();
        let stranger: IpAddr = "198.51.100.1".parse().unwrap();
        assert_eq!(client_ip(proxy, &h, &trusted), "203.0.113.9".parse::<IpAddr>().unwrap());
        assert_eq!(client_ip(stranger, &h, &trusted), stranger);
        assert_eq!(client_ip(proxy, &HeaderMap::new(), &trusted), proxy);
        assert_eq!(client_ip(proxy, &h, &[]), proxy);
        let v6: IpNet = "::ffff:127.0.0.1".parse().unwrap();
        assert!(!v6.contains("127.0.0.2".parse().unwrap()) || v6.contains("127.0.0.1".parse().unwrap()));
        assert!("127.0.0.0/8".parse::<IpNet>().unwrap().contains("::ffff:127.0.0.5".parse().unwrap()));
        assert!("0.0.0.0/0".parse::<IpNet>().unwrap().contains("8.8.8.8".parse().unwrap()));
        assert!("10.0.0.0/33".parse::<IpNet>().is_err() && "x".parse::<IpNet>().is_err());
        // a block given with host bits set is the block (ipnet keeps the address, contains masks it)
        let odd: IpNet = " 10.1.2.3/8 ".parse().unwrap();
        assert!(odd.contains("10.200.0.1".parse().unwrap()) && !odd.contains("11.0.0.1".parse().unwrap()));
        let v6: IpNet = "fd00::/8".parse().unwrap();
        assert!(v6.contains("fd12::1".parse().unwrap()) && !v6.contains("10.0.0.1".parse().unwrap()));
        assert!("::1/129".parse::<IpNet>().is_err() && "10.0.0.0/x".parse::<IpNet>().is_err());
    }

    #[test]
    fn cookies_are_read_by_name_from_every_cookie_header() {
        let mut h = HeaderMap::new();
        h.append(header::COOKIE, "a=1; gpuhub_session=s1;junk;; c=x=y".parse().unwrap());
        h.append(header::COOKIE, "gpuhub_session=s2".parse().unwrap());
        assert_eq!(cookie(&h, "a").as_deref(), Some("1"));
        assert_eq!(cookie(&h, "c").as_deref(), Some("x=y"), "a value may hold '='");
        assert_eq!(cookie(&h, "gpuhub_session").as_deref(), Some("s1"), "the first one sent");
        assert_eq!(cookie_count(&h, "gpuhub_session"), 2);
        assert_eq!((cookie(&h, "junk"), cookie(&h, "gpuhub")), (None, None));
        assert_eq!(cookie_count(&h, "missing"), 0);
    }
}
