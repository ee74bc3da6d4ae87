//! Authentication: argon2id passwords, hashed bearer tokens and session cookies, the login rate limit,
//! and the [`Caller`] extractor every protected handler takes.

use crate::error::ApiError;
use crate::state::AppState;
use crate::state::password_change::PasswordChange;
use axum::extract::FromRequestParts;
use axum::http::{HeaderMap, header, request::Parts};
use gpuhub_core::user::User;
use std::net::IpAddr;

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

/// The `Set-Cookie` of a new browser session `session` that lasts `lasts`.
pub fn session_set_cookie(config: &crate::config::Config, session: &str, lasts: chrono::Duration) -> String {
    format!(
        "{}={session}; Path=/; HttpOnly; SameSite=Lax; Max-Age={}{}",
        session_cookie_name(config),
        lasts.num_seconds(),
        if config.secure_cookies { "; Secure" } else { "" }
    )
}

// the credentials themselves (passwords, tokens) are the service layer's; the HTTP side reads them here
pub use crate::service::credentials::{
    API_TOKEN_PREFIX, SESSION_TOKEN_PREFIX, check_password, hash_password, hash_password_bounded, needs_rehash,
    new_token, random_password, token_hash, token_id, verify_password, verify_password_bounded,
};

pub use crate::config::net::IpNet;

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

pub use crate::state::limiter::{LoginLimiter, MAX_LOGIN_DELAY};

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
        let Some(token) = bearer_token(&parts.headers) else {
            // a browser signed in to the portal sends its session cookie, which the API does not take
            // (the newcomer's 401 at /api/v1/… in the same browser): say so, and where a token comes from
            return Err(ApiError::unauthorized(match session_cookie(state, &parts.headers) {
                Some(_) => {
                    "the API takes a token, not the portal's session cookie: make one on the portal's Account page \
                     (or gpuhub tokens create) and send it as Authorization: Bearer <token>"
                }
                None => "authentication required: send Authorization: Bearer <token>",
            }));
        };
        let user = user_for_token(state, &token).await?;
        if state.password_change.required(&user.username)
            && !PasswordChange::api_allows(&parts.method, parts.uri.path())
        {
            return Err(ApiError::forbidden(crate::state::password_change::REFUSAL));
        }
        Ok(Caller(user))
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
