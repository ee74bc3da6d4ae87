//! The ways into a running workspace, behind the hub's own authentication: the app proxy at
//! `/w/<owner>/<workspace>/<app>/…`, the browser terminal at `/terminal/<owner>/<workspace>/`, the login
//! page browsers are sent to, and the SSH gateway's authorisation backend.
//!
//! Who may pass is decided here, once for all three: the owner, and admins when the config allows
//! (`admins_open_apps` for the browser ways, `admins_enter_workspaces` for SSH). Anyone else gets 404,
//! as if the workspace did not exist.
//!
//! Without `apps_domain` (path mode), apps share the hub's origin, so an app's scripts run with the
//! visitor's session cookie. The cookie therefore opens only these pages, never the API (which takes
//! bearer tokens), and admins open other users' apps in a browser only when `admins_open_apps` says so:
//! a user's app could otherwise act in the admin's name on every workspace the admin can open. With
//! `apps_domain`, each app has an origin of its own ([`crate::origins`]) and none of this reaches it.

use crate::auth;
use crate::error::ApiError;
use crate::service::{self, Way};
use crate::state::AppState;
use async_trait::async_trait;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{FromRequestParts, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header, request::Parts};
use axum::response::{Html, IntoResponse, Redirect, Response};
use gpuhub_core::names;
use gpuhub_core::user::User;
use gpuhub_core::workload::{Workload, WorkloadState};
use gpuhub_ssh::{Denied, GatewayBackend, PublicKey, Target};
use std::sync::Arc;

/// Whether a request comes from a browser page load (sent to the login page) rather than an API client.
pub(crate) fn wants_html(headers: &HeaderMap) -> bool {
    headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("text/html"))
}

/// The caller, or the answer for an anonymous one: a redirect to the login page for browsers, 401 else.
pub(crate) async fn caller_or_login(st: &AppState, parts: &Parts) -> Result<User, Response> {
    let user = match auth::browser_token(st, &parts.headers) {
        Some(t) => auth::user_for_token(st, &t).await.ok(),
        None => None,
    };
    match user {
        Some(u) => Ok(u),
        None if wants_html(&parts.headers) => {
            let next = parts.uri.path_and_query().map_or("/", |p| p.as_str());
            Err(Redirect::to(&format!("/login?next={}", encode(next))).into_response())
        }
        None => Err(ApiError::unauthorized("authentication required: log in, or send Authorization: Bearer <token>")
            .into_response()),
    }
}

pub(crate) fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The workload `owner/name` if `user` may open it in a browser; 404 otherwise (also for another user's).
pub async fn enterable(st: &AppState, user: &User, owner: &str, name: &str) -> Result<Workload, ApiError> {
    Ok(service::enterable(st, user, owner, name, Way::Browser).await?)
}

/// `/w/{owner}/{workload}/{app}` → the same with a trailing slash (apps live under their prefix). A
/// segment that is no valid name is no app (404): decoded, it could hold what no `Location` can carry.
pub async fn app_root(Path((owner, name, app)): Path<(String, String, String)>) -> Response {
    let valid = [("user", &owner), ("workload", &name), ("app", &app)]
        .iter()
        .all(|(what, n)| gpuhub_core::names::validate(what, n).is_ok());
    if !valid {
        return ApiError::not_found("no such app").into_response();
    }
    Redirect::permanent(&format!("/w/{owner}/{name}/{app}/")).into_response()
}

/// Where app `app` of workspace `owner/name` listens, if `user` may open it: its address, its URL
/// prefix, the workload's id.
pub(crate) async fn target(
    st: &AppState,
    user: &User,
    owner: &str,
    name: &str,
    app: &str,
) -> Result<(std::net::SocketAddr, String, String), ApiError> {
    let w = if app == service::SERVICE_APP {
        service::reachable_service(st, user, owner, name).await?
    } else {
        enterable(st, user, owner, name).await?
    };
    let spec = w
        .apps
        .iter()
        .find(|a| a.name == app)
        .ok_or_else(|| ApiError::not_found(format!("workspace {name} has no app named {app:?}")))?;
    let member = service::running_member(&w).map_err(|e| {
        let mut e = ApiError::from(e);
        // on its way: worth trying again shortly (a browser's page reloads itself then)
        if matches!(w.state(), WorkloadState::Queued | WorkloadState::Pulling | WorkloadState::Starting) {
            e.retry_after = Some(APP_WAIT_RETRY_SECS);
        }
        e
    })?;
    // the port the app listens on: its own, or the one gpuhub gave it where members share a node
    let port = w.members.first().and_then(|m| m.ports.get(&spec.name)).copied().unwrap_or(spec.port);
    let upstream = st
        .engine
        .endpoint(&member, port)
        .await
        .map_err(|e| ApiError::new(StatusCode::BAD_GATEWAY, format!("workspace {name} cannot be reached: {e}")))?;
    Ok((upstream, spec.base_url(owner, name), w.id))
}

/// Forwards `req` to app `app` of `owner/name` for `user` (404 unless they may open it), counting it
/// as use of the workspace. An upgraded connection (a WebSocket) is cut once either account ends or
/// the token or session of hash `token` it was opened with does.
pub(crate) async fn forward_to_app(
    st: &AppState,
    user: &User,
    token: Option<String>,
    owner: &str,
    name: &str,
    app: &str,
    req: Request,
) -> Response {
    match target(st, user, owner, name, app).await {
        Ok((upstream, prefix, id)) => {
            st.activity.touch(&id);
            // a service is served at its root (told its prefix in X-Forwarded-Prefix), as any HTTP
            // server expects; a workspace's apps get the path as sent, their base URL included
            let req = if app == service::SERVICE_APP { strip_prefix(req, &prefix) } else { req };
            let names = vec![user.username.clone(), owner.to_owned()];
            let stop = st.revocations.closing(st.store.clone(), st.clock.clone(), names, token);
            gpuhub_proxy::forward_until(req, upstream, &prefix, &st.http_client, stop).await
        }
        // a person opening the app's link gets a page, not the API's problem (newcomer bug 5): what
        // state the workspace is in and what to do; one on its way reloads itself until it runs
        Err(e) if e.status == StatusCode::SERVICE_UNAVAILABLE && wants_page(req.headers()) => {
            let retry = e.retry_after;
            let mut resp = crate::error::page_error(e.status, &e.detail);
            if let Some(secs) = retry {
                resp.headers_mut().insert(header::REFRESH, axum::http::HeaderValue::from(secs));
                resp.headers_mut().insert(header::RETRY_AFTER, axum::http::HeaderValue::from(secs));
            }
            resp
        }
        Err(e) => e.into_response(),
    }
}

/// How soon a browser tries an app again while its workspace is on its way.
const APP_WAIT_RETRY_SECS: u64 = 5;

/// Whether a request is a browser's page load (it accepts HTML), not an API client's or a script's.
fn wants_page(headers: &HeaderMap) -> bool {
    headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("text/html"))
}

/// Service `owner/name` if it is open to the public (`"access": "public"`) and its owner's account is
/// enabled.
pub(crate) async fn public_service(st: &AppState, owner: &str, name: &str) -> Option<Workload> {
    let w = st.store.get_workload(owner, name).await.ok()?;
    let public = w.service.as_ref().is_some_and(|s| s.spec.access == gpuhub_core::service::ServiceAccess::Public);
    (public && !st.store.get_user(owner).await.ok()?.disabled).then_some(w)
}

/// Serves public service `w` to an anonymous visitor of its own origin: its port at its root, as
/// [`forward_to_app`] does for those who may enter it.
pub(crate) async fn forward_public(st: &AppState, w: &Workload, req: Request) -> Response {
    let Some(app) = w.apps.iter().find(|a| a.name == service::SERVICE_APP) else {
        return ApiError::not_found("no such app").into_response();
    };
    let member = match service::running_member(w) {
        Ok(m) => m,
        Err(e) => return ApiError::from(e).into_response(),
    };
    let port = w.members.first().and_then(|m| m.ports.get(&app.name)).copied().unwrap_or(app.port);
    let upstream = match st.engine.endpoint(&member, port).await {
        Ok(u) => u,
        Err(e) => {
            let detail = format!("service {} cannot be reached: {e}", w.name);
            return ApiError::new(StatusCode::BAD_GATEWAY, detail).into_response();
        }
    };
    let prefix = app.base_url(&w.owner, &w.name);
    st.activity.touch(&w.id);
    gpuhub_proxy::forward(strip_prefix(req, &prefix), upstream, &prefix, &st.http_client).await
}

/// `req` with `prefix` (`/w/alice/web/service/`) taken off its path (`/w/alice/web/service/a?b` → `/a?b`).
fn strip_prefix(mut req: Request, prefix: &str) -> Request {
    let Some(pq) = req.uri().path_and_query() else { return req };
    let rest = pq.as_str().strip_prefix(prefix.trim_end_matches('/')).unwrap_or(pq.as_str());
    let rest = if rest.starts_with('/') { rest.to_owned() } else { format!("/{rest}") };
    let mut parts = req.uri().clone().into_parts();
    if let Ok(p) = rest.parse() {
        parts.path_and_query = Some(p);
        if let Ok(uri) = axum::http::Uri::from_parts(parts) {
            // the proxy forwards the original URI's path: that is the one to change
            let original = req.extensions().get::<axum::extract::OriginalUri>().map(|o| o.0.clone());
            if let Some(original) = original {
                let mut op = original.into_parts();
                op.path_and_query = uri.path_and_query().cloned();
                if let Ok(o) = axum::http::Uri::from_parts(op) {
                    req.extensions_mut().insert(axum::extract::OriginalUri(o));
                }
            }
            *req.uri_mut() = uri;
        }
    }
    req
}

/// Refuses cross-site WebSocket handshakes (a browser sends `Origin`; it must be this host).
pub(crate) fn same_origin(headers: &HeaderMap) -> bool {
    let (Some(origin), Some(host)) = (headers.get(header::ORIGIN), headers.get(header::HOST)) else { return true };
    let (Ok(origin), Ok(host)) = (origin.to_str(), host.to_str()) else { return false };
    origin.split_once("://").is_some_and(|(_, rest)| rest == host)
}

/// Every answer of the hub's own origin (not an app's content under `/w/`, nor an app origin's) refuses
/// to be framed: `X-Frame-Options: DENY` and, where the page sets no policy of its own, a
/// `Content-Security-Policy` of `frame-ancestors 'none'` (the portal's own says so too).
pub async fn hub_guard(req: Request, next: axum::middleware::Next) -> Response {
    let app = req.uri().path().starts_with("/w/");
    let mut resp = next.run(req).await;
    if !app {
        let h = resp.headers_mut();
        h.insert(header::X_FRAME_OPTIONS, header::HeaderValue::from_static("DENY"));
        if !h.contains_key(header::CONTENT_SECURITY_POLICY) {
            h.insert(header::CONTENT_SECURITY_POLICY, header::HeaderValue::from_static("frame-ancestors 'none'"));
        }
    }
    resp
}

/// `/terminal/{owner}/{workload}/{file}`: the terminal page, its assets, and (`ws`) its WebSocket.
pub async fn terminal(State(st): State<AppState>, req: Request) -> Response {
    let (mut parts, _body) = req.into_parts();
    let segments: Vec<String> = parts.uri.path().split('/').skip(2).map(str::to_owned).collect();
    let (owner, name, file) = match segments.as_slice() {
        [o, n] => return Redirect::permanent(&format!("/terminal/{o}/{n}/")).into_response(),
        [o, n, f] => (o.clone(), n.clone(), f.clone()),
        _ => return ApiError::not_found("no such page").into_response(),
    };
    let user = match caller_or_login(&st, &parts).await {
        Ok(u) => u,
        Err(resp) => return resp,
    };
    let w = match enterable(&st, &user, &owner, &name).await {
        Ok(w) => w,
        Err(e) => return e.into_response(),
    };
    if file != "ws" {
        return gpuhub_proxy::asset(&file).unwrap_or_else(|| ApiError::not_found("no such file").into_response());
    }
    // a browser's cookie opens the terminal only from the hub's own pages: another origin (an app's,
    // any site's) is refused, and so is a handshake without `Origin`, which browsers always send (the
    // page's plain same-origin GET of this URL, which asks why a handshake failed, carries none)
    let by_cookie = auth::bearer_token(&parts.headers).is_none();
    let handshake = parts.headers.contains_key(header::UPGRADE);
    if !same_origin(&parts.headers) || (by_cookie && handshake && !parts.headers.contains_key(header::ORIGIN)) {
        return ApiError::forbidden("cross-origin terminal connections are refused").into_response();
    }
    let member = match service::running_member(&w) {
        Ok(m) => m,
        Err(e) => return ApiError::from(e).into_response(),
    };
    let upgrade = match WebSocketUpgrade::from_request_parts(&mut parts, &st).await {
        Ok(u) => u,
        Err(e) => return ApiError::bad_request(format!("expected a WebSocket upgrade: {e}")).into_response(),
    };
    let uid = match st.store.get_user(&w.owner).await {
        Ok(u) => u.uid,
        Err(e) => return ApiError::from(e).into_response(),
    };
    let exec = gpuhub_proxy::shell_exec(&format!("{uid}:{uid}"), &format!("/home/{}", w.owner), 80, 24);
    let engine = st.engine.clone();
    // the terminal closes as soon as the viewer's or the owner's access is revoked, or the token or
    // session it was opened with ends
    let token = auth::browser_token(&st, &parts.headers).map(|t| auth::token_hash(&t));
    let until_revoked =
        st.revocations.closing(st.store.clone(), st.clock.clone(), vec![user.username.clone(), w.owner.clone()], token);
    let (activity, id) = (st.activity.clone(), w.id.clone());
    upgrade.on_upgrade(move |socket| async move {
        // an open terminal is use of the workspace (the idle-GPU rule) until it closes
        let _session = activity.open(&id);
        tokio::select! {
            () = gpuhub_proxy::terminal(socket, engine, &member, exec) => {}
            () = until_revoked => tracing::info!(run = %member.run, "terminal closed: access revoked"),
        }
    })
}

/// The login page browsers are sent to; its script (`/static/login.js`) posts to `/api/v1/login` and
/// returns to `next`. Served through the portal's router, with its headers.
pub async fn login_page(State(st): State<AppState>, Query(q): Query<LoginQuery>) -> Html<String> {
    login_html(&st, q.next.as_deref(), None)
}

/// `?next=` of the login page: where the visitor was going.
#[derive(Debug, serde::Deserialize)]
pub struct LoginQuery {
    #[serde(default)]
    next: Option<String>,
}

/// The login page: a form the browser posts to `/login` itself where JavaScript is off (the login
/// script sends it to the API instead), carrying `next`, with `error` shown where a try failed.
pub(crate) fn login_html(st: &AppState, next: Option<&str>, error: Option<&str>) -> Html<String> {
    // with an OpenID provider, a link that signs in there (keeping where the visitor was going: the
    // login script adds `?next=` to it)
    let sso = if st.identities.oidc_enabled() {
        r#"<p class="sso"><a id="sso" href="/login/oidc">Sign in with single sign-on</a></p>"#
    } else {
        ""
    };
    let next = maud::html! { @if let Some(n) = next { input type="hidden" name="next" value=(n); } };
    let error = maud::html! { (error.unwrap_or_default()) };
    Html(
        LOGIN_HTML
            .replace("<!--sso-->", sso)
            .replace("<!--next-->", &next.into_string())
            .replace("<!--error-->", &error.into_string()),
    )
}

const LOGIN_HTML: &str = r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>gpuhub — log in</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="/static/portal.css"><script src="/static/login.js" defer></script></head>
<body class="login"><form id="f" method="post" action="/login"><h1>gpuhub</h1>
<label>User <input name="username" autocomplete="username" required autofocus></label>
<label>Password <input name="password" type="password" autocomplete="current-password" required></label>
<!--next--><button>Log in</button><div id="err" role="alert"><!--error--></div><!--sso--></form>
</body></html>"#;

/// The SSH gateway's view of the hub: keys registered through the API, workspaces found and entered
/// through the service layer (the same rules as the browser's, with `admins_enter_workspaces`).
#[derive(Debug)]
pub struct SshBackend {
    pub st: AppState,
}

#[async_trait]
impl GatewayBackend for SshBackend {
    async fn authorize(&self, ssh_user: &str, key: &PublicKey) -> Result<Target, Denied> {
        let denied = || Denied::NotAuthorized(ssh_user.to_owned());
        let fp = gpuhub_ssh::fingerprint(key);
        let user = (self.st.store.user_by_ssh_fingerprint(&fp).await)
            .map_err(|e| Denied::Backend(e.to_string()))?
            .ok_or_else(denied)?;
        let (owner, name) = match parse_ssh_user(ssh_user).ok_or_else(denied)? {
            (Some(o), n) => (o, n),
            (None, n) => (user.username.as_str(), n),
        };
        let w = match service::enterable(&self.st, &user, owner, name, Way::Ssh).await {
            Ok(w) => w,
            // the key is the caller's and the name their own: say that no such workspace is theirs
            Err(e) if e.kind == service::Kind::NotFound && owner == user.username && !user.disabled => {
                return Ok(Target {
                    login: user.username.clone(),
                    owner: owner.to_owned(),
                    workspace: name.to_owned(),
                    user: format!("{uid}:{uid}", uid = user.uid),
                    home: format!("/home/{owner}"),
                    member: None,
                    problem: Some(format!(
                        "you have no workspace named {name}: `gpuhub ps` lists yours, `gpuhub run --workspace` starts one"
                    )),
                    lease: gpuhub_ssh::Lease::default(),
                });
            }
            Err(e) if e.kind == service::Kind::NotFound => return Err(denied()),
            Err(e) => return Err(Denied::Backend(e.detail)),
        };
        let uid = self.st.store.get_user(owner).await.map_err(|e| Denied::Backend(e.to_string()))?.uid;
        Ok(Target {
            login: user.username.clone(),
            owner: owner.to_owned(),
            workspace: name.to_owned(),
            user: format!("{uid}:{uid}"),
            home: format!("/home/{owner}"),
            member: service::running_member(&w).ok(),
            problem: None,
            // an open SSH connection is use of the workspace (the idle-GPU rule) until it closes
            lease: gpuhub_ssh::Lease::new(self.st.activity.open(&w.id)),
        })
    }

    fn revocations(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
        Some(self.st.revocations.subscribe())
    }
}

/// The SSH login name of the gateway: `workspace` (the caller's own) or `owner.workspace`, each part a
/// valid name ([`gpuhub_core::names`]); anything else (path tricks, unicode, control characters, more
/// dots) is `None` and refused before any lookup.
pub fn parse_ssh_user(ssh_user: &str) -> Option<(Option<&str>, &str)> {
    let (owner, name) = match ssh_user.split_once('.') {
        Some((o, n)) => (Some(o), n),
        None => (None, ssh_user),
    };
    if owner.is_some_and(|o| names::validate("user", o).is_err()) || names::validate("workload", name).is_err() {
        return None;
    }
    Some((owner, name))
}

/// The backend as the gateway takes it.
pub fn ssh_backend(st: &AppState) -> Arc<dyn GatewayBackend> {
    Arc::new(SshBackend { st: st.clone() })
}
