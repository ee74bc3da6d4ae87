//! The web portal: server-rendered pages (maud, escaped by construction) for what a user does in a
//! browser, usable without JavaScript; a small script of its own (`/static/portal.js`) adds live
//! updates, log following and confirmations. Pages act with the session cookie, so every page and form
//! is guarded here: the session (else the login page), a CSRF token on every state-changing form (a
//! hash of the session, never stored), same-origin checks, and headers that forbid framing, inline
//! script and leaking the URL ([`guard`]). Lookup and authorisation are the service layer's
//! (`service::lookup`, `submit`, `stop`, `start`, `delete`), as for the API: another user's workload is
//! 404 here too.

mod admin;
mod charts;
mod dashboard;
mod form;
mod images;
mod launch;
mod nodes;
mod notice;
mod pages;
mod signin;
mod usage;
mod workload_chart;
mod workloads;

use crate::auth;
use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header, request::Parts};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use gpuhub_core::user::User;
use maud::{DOCTYPE, Markup, html};
use sha2::{Digest as _, Sha256};

/// The portal's routes (merged into the hub's router at its root).
pub fn router() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/", get(landing))
        .route("/workloads", get(workloads::list))
        .route("/events", get(workloads::events))
        .route("/new", get(form::page).post(form::submit))
        .route("/new/launch", axum::routing::post(launch::launch))
        .route("/images", get(images::page))
        .route("/images/{name}/delete", axum::routing::post(images::delete))
        .route("/workloads/{name}", get(workloads::detail))
        .route("/workloads/{name}/logs", get(workloads::logs))
        .route("/workloads/{name}/chart", get(workload_chart::fragment))
        .route("/workloads/{name}/{action}", get(workloads::confirm).post(workloads::act))
        .route("/nodes", get(pages::nodes))
        .route("/nodes/{node}", get(nodes::node_page))
        .route("/usage", get(usage::page))
        .route("/queues", get(pages::queue_list))
        .route("/account", get(pages::account_page))
        .route("/account/password", axum::routing::post(pages::change_password))
        .route("/account/tokens", axum::routing::post(pages::create_token))
        .route("/account/tokens/{id}/revoke", axum::routing::post(pages::revoke_token))
        .route("/account/keys", axum::routing::post(pages::add_key))
        .route("/account/keys/remove", axum::routing::post(pages::remove_key))
        .route("/admin/dashboard", get(dashboard::page))
        .route("/admin/users", get(admin::users).post(admin::add_user))
        .route("/admin/users/{name}/{what}", axum::routing::post(admin::change_user))
        .route("/admin/images", get(admin::images).post(admin::add_image))
        .route("/admin/images/{name}/remove", axum::routing::post(admin::remove_image))
        .route("/admin/queues", get(admin::queue_admin).post(admin::add_queue))
        .route("/admin/queues/{name}", axum::routing::post(admin::change_queue))
        .route("/admin/queues/{name}/remove", axum::routing::post(admin::remove_queue))
        .route("/admin/reservations", axum::routing::post(admin::add_reservation))
        .route("/admin/reservations/{id}/cancel", axum::routing::post(admin::cancel_reservation))
        .route("/logout", axum::routing::post(logout))
        .route("/login", get(crate::access::login_page).post(signin::login_form))
        .route("/login/oidc", get(signin::begin))
        .route("/login/oidc/callback", get(signin::callback))
        .route("/static/{file}", get(asset))
        .route("/favicon.ico", get(favicon))
        .layer(axum::middleware::map_response(guard))
}

/// The signed-in visitor of a portal page, with the CSRF token of their session.
#[derive(Clone)]
pub struct Viewer {
    /// Who.
    pub user: User,
    /// The token every form of theirs carries.
    pub csrf: String,
}

/// The token is a secret: not shown.
impl std::fmt::Debug for Viewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Viewer").field("user", &self.user.username).finish_non_exhaustive()
    }
}

impl FromRequestParts<AppState> for Viewer {
    type Rejection = Response;

    /// The session cookie's user; a browser without one is sent to log in and come back.
    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self, Response> {
        let session = auth::session_cookie(st, &parts.headers);
        let user = match &session {
            Some(t) => auth::user_for_token(st, t).await.ok(),
            None => None,
        };
        match (user, session) {
            (Some(user), Some(_))
                if st.password_change.required(&user.username)
                    && !crate::state::password_change::PasswordChange::portal_allows(parts.uri.path()) =>
            {
                let why = "Choose a new password first: the one the server generated at its first start was printed and \
                           written to a file.";
                Err(Redirect::to(&format!("/account?error={}", crate::access::encode(why))).into_response())
            }
            (Some(user), Some(token)) => Ok(Viewer { user, csrf: csrf_token(&token) }),
            _ => {
                let next = parts.uri.path_and_query().map_or("/", |p| p.as_str());
                Err(Redirect::to(&format!("/login?next={}", crate::access::encode(next))).into_response())
            }
        }
    }
}

/// The CSRF token of a session: a hash of its secret, so that only a page that knows the cookie's
/// value (the server's own) can name it.
fn csrf_token(session: &str) -> String {
    hex::encode(&Sha256::digest(format!("gpuhub-csrf\0{session}").as_bytes())[..16])
}

/// Whether a browser says a request comes from another site: its `Sec-Fetch-Site`, or an `Origin`
/// that is not this host.
pub(crate) fn from_another_site(headers: &HeaderMap) -> bool {
    let cross_site =
        headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()).is_some_and(|s| s != "same-origin" && s != "none");
    cross_site || !crate::access::same_origin(headers)
}

/// Refuses a state-changing request that is not the viewer's own form: a wrong or missing CSRF token
/// (its `_csrf` field), or a browser saying it comes from another site.
pub fn check_form(viewer: &Viewer, headers: &HeaderMap, fields: &[(String, String)]) -> Option<Response> {
    let token = field(fields, "_csrf").unwrap_or_default();
    if from_another_site(headers) {
        return Some(page_error(StatusCode::FORBIDDEN, "refused: this form was sent from another site"));
    }
    if token.is_empty() || token != viewer.csrf {
        return Some(page_error(
            StatusCode::FORBIDDEN,
            "refused: the form's security token is missing or stale; reload the page and try again",
        ));
    }
    None
}

/// `/`: the landing page is the viewer's workloads.
async fn landing(_viewer: Viewer) -> Redirect {
    Redirect::to("/workloads")
}

/// `POST /logout`: the API's logout (the session ends, its cookie is cleared), then the login page.
async fn logout(State(st): State<AppState>, viewer: Viewer, headers: HeaderMap, axum::Form(f): Fields) -> Response {
    if let Some(r) = check_form(&viewer, &headers, &f) {
        return r;
    }
    // the session this page was sent with (and a bearer token, as the API's logout takes both)
    let mut revoked = 0;
    for token in [crate::auth::bearer_token(&headers), crate::auth::session_cookie(&st, &headers)].into_iter().flatten()
    {
        match crate::service::accounts::end_token(&st, &token).await {
            Ok(true) => revoked += 1,
            Ok(false) => {}
            Err(e) => return api_error_page(e.into()),
        }
    }
    if revoked == 0 {
        return api_error_page(crate::error::ApiError::unauthorized("not logged in: no valid token or session to end"));
    }
    let mut resp = Redirect::to("/login").into_response();
    resp.headers_mut().insert(header::SET_COOKIE, crate::auth::clear_session_cookie(&st.config));
    resp
}

/// A form's fields as sent (form-urlencoded), in order.
pub type Fields = axum::Form<Vec<(String, String)>>;

/// The first value of field `name`.
pub fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// Headers of every portal answer: no framing, no inline or foreign script, no URL leaks, no caching
/// of pages that hold a user's data and a CSRF token.
async fn guard(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    let set = |h: &mut HeaderMap, k: header::HeaderName, v: &'static str| {
        h.insert(k, HeaderValue::from_static(v));
    };
    set(
        h,
        header::CONTENT_SECURITY_POLICY,
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; \
         form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    );
    set(h, header::X_FRAME_OPTIONS, "DENY");
    set(h, header::REFERRER_POLICY, "same-origin");
    set(h, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    if !h.contains_key(header::CACHE_CONTROL) {
        set(h, header::CACHE_CONTROL, "no-store");
    }
    resp
}

/// The page around `body`: the header with the viewer's ways around, and, for admins in path mode,
/// what that mode risks.
pub fn layout(st: &AppState, viewer: &Viewer, title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " — gpuhub" }
                link rel="stylesheet" href="/static/portal.css";
                link rel="icon" href="/static/favicon.svg" type="image/svg+xml";
                script src="/static/portal.js" defer {}
            }
            body {
                header {
                    a.brand href="/workloads" { "gpuhub" }
                    nav {
                        a href="/workloads" { "Workloads" }
                        a href="/new" { "New workload" }
                        a href="/nodes" { "Nodes" }
                        a href="/images" { "Images" }
                        a href="/usage" { "Usage" }
                        a href="/queues" { "Queues" }
                        a href="/account" { "Account" }
                        @if viewer.user.is_admin() {
                            a href="/admin/dashboard" { "Dashboard" }
                            a href="/admin/users" { "Users" }
                            a href="/admin/images" { "Image catalog" }
                        }
                    }
                    span.who { (viewer.user.username) @if viewer.user.is_admin() { " (admin)" } }
                    form.logout method="post" action="/logout" {
                        input type="hidden" name="_csrf" value=(viewer.csrf);
                        button type="submit" { "Log out" }
                    }
                }
                @if viewer.user.is_admin() && st.config.apps_domain.is_none() {
                    p.warning role="note" {
                        "Apps share this site's origin (path mode): a script in an app you open runs with your \
                         session on these pages. Set apps_domain (with wildcard DNS) to give each app an origin \
                         of its own."
                    }
                }
                main { (body) }
            }
        }
    }
}

pub use crate::error::page_error;

/// An API error as a page.
pub fn api_error_page(e: ApiError) -> Response {
    if e.status.is_server_error() {
        tracing::warn!(status = %e.status, detail = %e.detail, "portal page failed");
    }
    page_error(e.status, &e.detail)
}

const PORTAL_JS: &str = include_str!("portal.js");
const PORTAL_CSS: &str = include_str!("portal.css");
const LOGIN_JS: &str = include_str!("login.js");
const FAVICON: &str = include_str!("favicon.svg");

/// `/favicon.ico`: the icon (an SVG) for browsers that ask for it by that name (the login page, the
/// terminal).
async fn favicon() -> Response {
    ([(header::CONTENT_TYPE, "image/svg+xml"), (header::CACHE_CONTROL, "max-age=86400")], FAVICON).into_response()
}

/// `/static/{file}`: the portal's script and style.
async fn asset(axum::extract::Path(file): axum::extract::Path<String>) -> Response {
    let (body, kind) = match file.as_str() {
        "portal.js" => (PORTAL_JS, "text/javascript; charset=utf-8"),
        "portal.css" => (PORTAL_CSS, "text/css; charset=utf-8"),
        "login.js" => (LOGIN_JS, "text/javascript; charset=utf-8"),
        "favicon.svg" => (FAVICON, "image/svg+xml"),
        _ => return page_error(StatusCode::NOT_FOUND, "no such file"),
    };
    ([(header::CONTENT_TYPE, kind), (header::CACHE_CONTROL, "max-age=300")], body).into_response()
}

/// Whether a request is a top-level page load (pages that carry a CSRF token are only served so: a
/// script's `fetch` of them, from an app sharing this origin in path mode, is refused).
pub fn is_navigation(headers: &HeaderMap) -> bool {
    headers.get("sec-fetch-mode").and_then(|v| v.to_str().ok()).is_none_or(|m| m == "navigate")
}

/// Refuses a page holding a CSRF token to anything but a page load.
pub fn only_navigation(req: &Request) -> Option<Response> {
    (!is_navigation(req.headers())).then(|| page_error(StatusCode::FORBIDDEN, "this page opens only as a page"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csrf_tokens_are_per_session() {
        assert_ne!(csrf_token("a"), csrf_token("b"));
        assert_eq!(csrf_token("a"), csrf_token("a"));
        assert_eq!(csrf_token("a").len(), 32);
    }
}
