//! Apps on origins of their own (`apps_domain`). Each app of a workspace is served at
//! `<label>.<apps_domain>` ([`label`]), so that its scripts share nothing with the hub's origin: the
//! browser never sends the hub's session cookie there, and nothing served there can read the hub's
//! pages or call its API as the visitor.
//!
//! The way in is a handoff, as JupyterHub does for single-user servers: the hub's `/w/<owner>/<ws>/
//! <app>/…`, opened with the hub's session, checks that the visitor may open the app and mints a code
//! that is single-use, lives a minute, and names that one origin. The code is bound to the browser that
//! asked for it: the hub sends it to `<app origin>/_gpuhub/bind?code=…`, which sets a random bind
//! cookie there (`gpuhub_bind`, `HttpOnly`, path `/_gpuhub/`) and sends its hash back to the hub's
//! `/_gpuhub/mint`; the hub, seeing the same hub session the code was minted for, binds the code to that
//! hash and sends the browser to `<app origin>/_gpuhub/handoff?code=…`, which takes it only with the
//! bind cookie. A code sent to another browser (a link in a mail, another user's page) opens nothing:
//! that browser has neither the hub session at the mint nor the cookie at the handoff. Redeemed, the code
//! becomes an app session: a cookie (`gpuhub_app`, `HttpOnly`, host-only) valid on that origin alone,
//! and only while the hub session it came from is (logging out at the hub ends it). The cookies never
//! reach the app: the proxy strips them like the hub's own. An app origin serves its own app's prefix
//! and the handoff, nothing else of the hub.

use crate::auth;
use crate::error::ApiError;
use crate::state::AppState;
pub use crate::state::origins::AppOrigins;
use crate::state::origins::{AppSession, Handoff};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::{DateTime, Utc};
use gpuhub_core::user::User;
use sha2::{Digest as _, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;

/// The cookie of an app session, on an app's origin only.
pub const APP_COOKIE: &str = "gpuhub_app";
/// Where an app origin redeems a handoff code.
pub const HANDOFF_PATH: &str = "/_gpuhub/handoff";
/// Where an app origin sets its bind cookie for a code and sends its hash back to the hub.
pub const BIND_PATH: &str = "/_gpuhub/bind";
/// Where the hub binds a code to the bind cookie's hash (the hub's origin, with its session).
pub const MINT_PATH: &str = "/_gpuhub/mint";
/// The cookie that binds a handoff code to the browser that asked for it, on an app origin only.
pub const BIND_COOKIE: &str = "gpuhub_bind";
/// How long a handoff code may wait to be redeemed.
const HANDOFF_SECS: i64 = 60;
/// Codes and sessions kept at most; the oldest go first beyond this (a flood cannot grow memory).
const MAX_ENTRIES: usize = 100_000;

/// The host label of app `app` of workspace `ws` of `owner`: `<app>--<ws>--<owner>` where that is one
/// DNS label (at most 63 characters, no name holding `--`), else `h--` and 26 hex digits of a SHA-256 of
/// the three. Distinct apps get distinct labels: names never start or end with `-`, so in the readable
/// form every `--` separates, and it has three parts where the hashed one has two. A service's port (its
/// app `service`) has the label `<name>--<owner>`: two parts, never `h` first (the hashed form's).
pub fn label(owner: &str, ws: &str, app: &str) -> String {
    let service = app == crate::service::SERVICE_APP;
    let readable = if service { format!("{ws}--{owner}") } else { format!("{app}--{ws}--{owner}") };
    if readable.len() <= 63 && ![owner, ws, app].iter().any(|n| n.contains("--")) && !(service && ws == "h") {
        return readable;
    }
    let digest = Sha256::digest(format!("{owner}/{ws}/{app}").as_bytes());
    format!("h--{}", &hex::encode(digest)[..26])
}

/// Whether the hub's host (`public_url`'s, else the apps domain less its first label, as the app
/// origins send visitors back to) is a parent domain of `apps_domain`: an app's origin may then set
/// cookies for the hub's host, the session cookie among them unless its name has the `__Host-` prefix
/// (`secure_cookies`).
pub fn hub_is_parent_of_apps(apps_domain: &str, public_url: Option<&str>) -> bool {
    let apps = apps_domain.trim_end_matches('.').to_ascii_lowercase();
    let hub = match public_url {
        Some(u) => {
            let rest = u.split_once("://").map_or(u, |(_, r)| r);
            let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
            let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            strip_port(authority).trim_end_matches('.').to_ascii_lowercase()
        }
        None => apps.split_once('.').map_or(String::new(), |(_, parent)| parent.to_owned()),
    };
    !hub.is_empty() && apps.ends_with(&format!(".{hub}"))
}

impl AppOrigins {
    /// App origins under `domain`; `https` when the hub is served over TLS; `public_url` as configured.
    pub fn new(domain: &str, https: bool, public_url: Option<&str>) -> Self {
        let public = public_url.map(|u| u.trim_end_matches('/').to_owned());
        Self { domain: domain.to_owned(), https, public, handoffs: Mutex::default(), sessions: Mutex::default() }
    }

    /// The label of the app origin a request's `Host` names, if it names one.
    pub fn label_of(&self, headers: &HeaderMap) -> Option<String> {
        let host = headers.get(header::HOST)?.to_str().ok()?;
        let name = strip_port(host).to_ascii_lowercase();
        let label = name.strip_suffix(&self.domain)?.strip_suffix('.')?;
        (!label.is_empty() && !label.contains('.')).then(|| label.to_owned())
    }

    fn scheme(&self) -> &'static str {
        if self.https { "https" } else { "http" }
    }

    /// The URL of `label`'s origin as the browser reaches it, on the port it used for `headers`' host.
    pub(crate) fn origin(&self, label: &str, headers: &HeaderMap) -> String {
        format!("{}://{label}.{}{}", self.scheme(), self.domain, port_of(headers))
    }

    /// The hub's URL for a visitor of an app origin: `public_url`, else the apps domain less its first
    /// label, with this request's scheme and port.
    fn hub(&self, headers: &HeaderMap) -> String {
        if let Some(p) = &self.public {
            return p.clone();
        }
        let parent = self.domain.split_once('.').map_or(self.domain.as_str(), |(_, rest)| rest);
        format!("{}://{parent}{}", self.scheme(), port_of(headers))
    }

    /// Mints a code for the hub session `session` (its hash) to enter app origin `label` at `next`, and
    /// returns the redirect to that origin's bind step.
    pub fn hand_off(&self, st: &AppState, session: String, label: &str, next: &str, headers: &HeaderMap) -> Response {
        let (code, key) = secret();
        let now = st.clock.now();
        let expires = now + chrono::Duration::seconds(HANDOFF_SECS);
        {
            let mut map = self.handoffs.lock().unwrap();
            prune(&mut map, now, |h| h.expires);
            map.insert(key, Handoff { session, label: label.to_owned(), next: next.to_owned(), bind: None, expires });
        }
        let to = format!("{}{BIND_PATH}?code={code}", self.origin(label, headers));
        private(Redirect::to(&to).into_response())
    }

    /// `GET /_gpuhub/bind?code=…` on app origin `label`: sets a fresh bind cookie on this origin and sends
    /// its hash, with the code, to the hub's mint (the code is not spent here).
    fn bind(&self, st: &AppState, label: &str, req: &Request) -> Response {
        let code = query_value(req, "code");
        let now = st.clock.now();
        let known = code.is_some_and(|c| {
            self.handoffs.lock().unwrap().get(&hash(c)).is_some_and(|h| h.expires > now && h.label == label)
        });
        let (Some(code), true) = (code, known) else { return stale() };
        let (nonce, bind) = secret();
        let cookie = format!(
            "{BIND_COOKIE}={nonce}; Path=/_gpuhub/; Max-Age={HANDOFF_SECS}; HttpOnly; SameSite=Lax{}",
            if self.https { "; Secure" } else { "" }
        );
        let to = format!("{}{MINT_PATH}?code={code}&bind={bind}", self.hub(req.headers()));
        let mut resp = private(Redirect::to(&to).into_response());
        if let Ok(v) = HeaderValue::from_str(&cookie) {
            resp.headers_mut().append(header::SET_COOKIE, v);
        }
        resp
    }

    /// `GET /_gpuhub/mint?code=…&bind=…` at the hub, with the hub session the code was minted for: binds
    /// the code to the bind cookie's hash and sends the browser to the app origin's handoff. Another
    /// session (the code sent to someone else's browser) spends the code and opens nothing.
    pub fn mint(&self, st: &AppState, req: &Request) -> Response {
        let (Some(code), Some(bind)) = (query_value(req, "code"), query_value(req, "bind")) else { return stale() };
        let session = auth::session_cookie(st, req.headers()).map(|s| auth::token_hash(&s));
        let now = st.clock.now();
        let mut map = self.handoffs.lock().unwrap();
        let key = hash(code);
        let label = match map.get_mut(&key) {
            Some(h) if h.expires > now && h.bind.is_none() && session.as_deref() == Some(h.session.as_str()) => {
                h.bind = Some(bind.to_owned());
                h.label.clone()
            }
            _ => {
                map.remove(&key);
                return stale();
            }
        };
        drop(map);
        let to = format!("{}{HANDOFF_PATH}?code={code}", self.origin(&label, req.headers()));
        private(Redirect::to(&to).into_response())
    }

    /// `GET /_gpuhub/handoff?code=…` on app origin `label`: the code, once, in time and with the bind
    /// cookie it was bound to, becomes an app session cookie for this origin, and the visitor goes where
    /// the hub sent them.
    fn redeem(&self, st: &AppState, label: &str, req: &Request) -> Response {
        let code = query_value(req, "code");
        let now = st.clock.now();
        let handoff = code.and_then(|c| self.handoffs.lock().unwrap().remove(&hash(c)));
        let bound = auth::cookie(req.headers(), BIND_COOKIE).map(|n| hash(&n));
        let Some(h) = handoff.filter(|h| h.expires > now && h.label == label && h.bind.is_some() && h.bind == bound)
        else {
            return stale();
        };
        let (token, key) = secret();
        let expires = now + chrono::Duration::hours(st.config.session_hours);
        {
            let mut map = self.sessions.lock().unwrap();
            prune(&mut map, now, |s| s.expires);
            map.insert(key, AppSession { session: h.session, label: label.to_owned(), expires });
        }
        let cookie =
            format!("{APP_COOKIE}={token}; Path=/; HttpOnly; SameSite=Lax{}", if self.https { "; Secure" } else { "" });
        let mut resp = private(Redirect::to(&h.next).into_response());
        if let Ok(v) = HeaderValue::from_str(&cookie) {
            resp.headers_mut().append(header::SET_COOKIE, v);
        }
        let spent = format!("{BIND_COOKIE}=; Path=/_gpuhub/; Max-Age=0; HttpOnly; SameSite=Lax");
        if let Ok(v) = HeaderValue::from_str(&spent) {
            resp.headers_mut().append(header::SET_COOKIE, v);
        }
        resp
    }

    /// The visitor of app origin `label`: by bearer token, else by this origin's app session while its
    /// hub session lasts; with the hash of that token or hub session.
    async fn visitor(&self, st: &AppState, label: &str, headers: &HeaderMap) -> Result<(User, String), ApiError> {
        if let Some(t) = auth::bearer_token(headers) {
            return Ok((auth::user_for_token(st, &t).await?, auth::token_hash(&t)));
        }
        let now = st.clock.now();
        let session = auth::cookie(headers, APP_COOKIE).and_then(|c| {
            let map = self.sessions.lock().unwrap();
            map.get(&hash(&c)).filter(|s| s.label == label && s.expires > now).map(|s| s.session.clone())
        });
        let Some(session) = session else {
            return Err(ApiError::unauthorized("authentication required: open the app from the hub"));
        };
        match st.store.token_user(&session, st.clock.now()).await? {
            Some((u, _)) if !u.disabled => Ok((u, session)),
            Some(_) => Err(ApiError::forbidden("account is disabled")),
            None => Err(ApiError::unauthorized("your hub session ended: open the app from the hub again")),
        }
    }
}

/// `/w/{owner}/{workload}/{app}/…`: forwards HTTP and WebSockets to the app's port in the container.
/// With `apps_domain` set, a browser (the session cookie, no bearer token) is handed off to the app's
/// own origin instead (here): the hub's origin never serves app content to a cookie.
pub async fn app_proxy(State(st): State<AppState>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let segments: Vec<String> = parts.uri.path().split('/').skip(2).take(3).map(str::to_owned).collect();
    let [owner, name, app] = segments.as_slice() else {
        return ApiError::not_found("no such app").into_response();
    };
    let user = match crate::access::caller_or_login(&st, &parts).await {
        Ok(u) => u,
        // an anonymous visitor of a public service goes to its own origin, where it is served to them
        Err(resp) => match (&st.origins, auth::browser_token(&st, &parts.headers)) {
            (Some(origins), None)
                if app == crate::service::SERVICE_APP
                    && crate::access::public_service(&st, owner, name).await.is_some() =>
            {
                let next = parts.uri.path_and_query().map_or("/", |p| p.as_str());
                let label = label(owner, name, app);
                return Redirect::to(&format!("{}{next}", origins.origin(&label, &parts.headers))).into_response();
            }
            _ => return resp,
        },
    };
    let cookie_session =
        auth::bearer_token(&parts.headers).is_none().then(|| auth::session_cookie(&st, &parts.headers));
    if let (Some(origins), Some(Some(session))) = (st.origins.clone(), cookie_session) {
        if let Err(e) = crate::access::target(&st, &user, owner, name, app).await {
            return e.into_response();
        }
        let next = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let label = label(owner, name, app);
        return origins.hand_off(&st, auth::token_hash(&session), &label, next, &parts.headers);
    }
    let token = auth::browser_token(&st, &parts.headers).map(|t| auth::token_hash(&t));
    crate::access::forward_to_app(&st, &user, token, owner, name, app, Request::from_parts(parts, body)).await
}

/// A proxy client that never forwards the hub's session cookie.
pub fn http_client() -> gpuhub_proxy::HttpClient {
    gpuhub_proxy::HttpClient::new(&[auth::SESSION_COOKIE, auth::SECURE_SESSION_COOKIE, APP_COOKIE, BIND_COOKIE])
}

/// `GET /_gpuhub/mint` at the hub (see [`AppOrigins::mint`]); 404 without `apps_domain`.
pub async fn mint(State(st): State<AppState>, req: Request) -> Response {
    match st.origins.clone() {
        Some(origins) => origins.mint(&st, &req),
        None => ApiError::not_found("no app origins here: apps_domain is not set").into_response(),
    }
}

/// The value of `name` in a request's query (codes and hashes: no escapes).
fn query_value<'r>(req: &'r Request, name: &str) -> Option<&'r str> {
    req.uri().query()?.split('&').find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
}

/// The answer to a code that is spent, stale, for another app, or in another browser than the one that
/// asked for it.
fn stale() -> Response {
    private(
        ApiError::bad_request(
            "this sign-in link is used, expired, for another app or opened in another browser: open the app from \
             the hub again",
        )
        .into_response(),
    )
}

/// Sends every request whose `Host` is an app origin to [`serve`], the rest on into the hub.
pub async fn dispatch(
    axum::extract::State(st): axum::extract::State<AppState>,
    req: Request,
    next: axum::middleware::Next,
) -> Response {
    match st.origins.clone() {
        Some(origins) => match origins.label_of(req.headers()) {
            Some(label) => serve(st, &origins, label, req).await,
            None => next.run(req).await,
        },
        None => next.run(req).await,
    }
}

/// Every request whose `Host` is an app origin: the handoff, or the app's own prefix through the proxy;
/// nothing else of the hub is served there.
pub async fn serve(st: AppState, origins: &AppOrigins, label: String, req: Request) -> Response {
    let path = req.uri().path().to_owned();
    if path == HANDOFF_PATH {
        return origins.redeem(&st, &label, &req);
    }
    if path == BIND_PATH {
        return origins.bind(&st, &label, &req);
    }
    let segments: Vec<&str> = path.split('/').collect();
    let triple = match segments.as_slice() {
        ["", "w", o, n, a, ..] if label == self::label(o, n, a) => Some((o.to_string(), n.to_string(), a.to_string())),
        _ => None,
    };
    let Some((owner, name, app)) = triple else {
        // the bare origin goes to its app, where the label says which (the readable form does)
        if path == "/" {
            let (app, ws, owner) = match label.split("--").collect::<Vec<_>>()[..] {
                [app, ws, owner] => (app, ws, owner),
                [ws, owner] => (crate::service::SERVICE_APP, ws, owner),
                _ => ("", "", ""),
            };
            if !app.is_empty() && self::label(owner, ws, app) == label {
                return Redirect::to(&format!("/w/{owner}/{ws}/{app}/")).into_response();
            }
        }
        return ApiError::not_found("no such page: this origin serves its own app only").into_response();
    };
    if segments.len() == 5 {
        return Redirect::permanent(&format!("/w/{owner}/{name}/{app}/")).into_response();
    }
    let visitor = origins.visitor(&st, &label, req.headers()).await;
    // a public service is served to anyone on its own origin
    if visitor.as_ref().is_err_and(|e| e.status == StatusCode::UNAUTHORIZED) && app == crate::service::SERVICE_APP {
        if let Some(w) = crate::access::public_service(&st, &owner, &name).await {
            return crate::access::forward_public(&st, &w, req).await;
        }
    }
    let (user, token) = match visitor {
        Ok(found) => found,
        Err(e) if e.status == StatusCode::UNAUTHORIZED && crate::access::wants_html(req.headers()) => {
            let back = req.uri().path_and_query().map_or(path.as_str(), |p| p.as_str());
            return private(Redirect::to(&format!("{}{back}", origins.hub(req.headers()))).into_response());
        }
        Err(e) => return e.into_response(),
    };
    if req.headers().contains_key(header::UPGRADE) && !crate::access::same_origin(req.headers()) {
        return ApiError::forbidden("cross-origin WebSocket connections to an app are refused").into_response();
    }
    crate::access::forward_to_app(&st, &user, Some(token), &owner, &name, &app, req).await
}

/// `host[:port]` → `host` (an IPv6 literal keeps its brackets).
fn strip_port(host: &str) -> &str {
    match host.rfind(':') {
        Some(i) if !host[i..].contains(']') => &host[..i],
        _ => host,
    }
}

/// `:port` of the request's `Host`, or nothing.
fn port_of(headers: &HeaderMap) -> String {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    let name = strip_port(host);
    host[name.len()..].to_owned()
}

/// A new random secret and the hash it is kept by.
fn secret() -> (String, String) {
    let (token, _) = auth::new_token(gpuhub_store::TokenKind::Session);
    let token = token.trim_start_matches(auth::SESSION_TOKEN_PREFIX).to_owned();
    let key = hash(&token);
    (token, key)
}

fn hash(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

/// Drops expired entries; beyond [`MAX_ENTRIES`], the ones closest to expiry too.
fn prune<T>(map: &mut HashMap<String, T>, now: DateTime<Utc>, expires: impl Fn(&T) -> DateTime<Utc>) {
    map.retain(|_, v| expires(v) > now);
    if map.len() >= MAX_ENTRIES {
        let mut by: Vec<(DateTime<Utc>, String)> = map.iter().map(|(k, v)| (expires(v), k.clone())).collect();
        by.sort();
        for (_, k) in by.into_iter().take(map.len() + 1 - MAX_ENTRIES) {
            map.remove(&k);
        }
    }
}

/// Not cached, and no `Referer` carrying a code onwards.
fn private(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_dns_labels_and_distinct() {
        assert_eq!(label("alice", "nb", "lab"), "lab--nb--alice");
        let cases = [("a", "b--c", "d"), ("a--b", "c", "d"), ("a", "b", "c--d"), ("x", "y", "h"), ("a", "b", "c")];
        let labels: std::collections::BTreeSet<String> = cases.iter().map(|(o, w, a)| label(o, w, a)).collect();
        assert_eq!(labels.len(), cases.len(), "{labels:?}");
        // a service's origin: its name and owner
        assert_eq!(label("alice", "web", "service"), "web--alice");
        assert!(label("alice", "h", "service").starts_with("h--"), "never taken for a hashed label");
        let long = "a".repeat(40);
        for l in [label(&long, &long, "lab"), label("a", "b--c", "d")] {
            assert!(l.starts_with("h--") && l.len() == 29, "{l}");
            assert!(l.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'), "{l}");
        }
    }

    #[test]
    fn hosts_name_app_origins_only_under_the_domain() {
        let o = AppOrigins::new("apps.localhost", false, None);
        let h = |host: &str| {
            let mut m = HeaderMap::new();
            m.insert(header::HOST, HeaderValue::from_str(host).unwrap());
            m
        };
        assert_eq!(o.label_of(&h("lab--nb--alice.apps.localhost:8080")).as_deref(), Some("lab--nb--alice"));
        assert_eq!(o.label_of(&h("LAB--nb--alice.Apps.Localhost")).as_deref(), Some("lab--nb--alice"));
        for not in ["apps.localhost", "localhost:8080", "a.b.apps.localhost", "xapps.localhost", ".apps.localhost"] {
            assert_eq!(o.label_of(&h(not)), None, "{not}");
        }
        assert_eq!(o.hub(&h("lab--nb--alice.apps.localhost:8080")), "http://localhost:8080");
        assert_eq!(o.origin("x", &h("localhost:9")), "http://x.apps.localhost:9");
        let p = AppOrigins::new("apps.example.net", true, Some("https://gpu.example.org/"));
        assert_eq!(p.hub(&h("x.apps.example.net")), "https://gpu.example.org");
        assert_eq!(strip_port("[::1]:80"), "[::1]");
        assert_eq!(strip_port("[::1]"), "[::1]");
    }

    #[test]
    fn a_hub_on_a_parent_domain_of_the_apps_is_named() {
        assert!(hub_is_parent_of_apps("apps.example.org", Some("https://example.org/")));
        assert!(hub_is_parent_of_apps("apps.localhost", None));
        assert!(hub_is_parent_of_apps("apps.gpu.example.org", Some("https://gpu.example.org:8443")));
        assert!(!hub_is_parent_of_apps("apps.example.net", Some("https://gpu.example.org")));
        assert!(!hub_is_parent_of_apps("apps.example.org", Some("https://gpu.example.org")));
    }

    #[test]
    fn pruning_bounds_the_maps() {
        let now = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let mut m: HashMap<String, DateTime<Utc>> = HashMap::new();
        m.insert("old".into(), now - chrono::Duration::seconds(1));
        m.insert("new".into(), now + chrono::Duration::seconds(1));
        prune(&mut m, now, |e| *e);
        assert_eq!(m.keys().collect::<Vec<_>>(), ["new"]);
    }
}
