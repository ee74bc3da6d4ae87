//! Login, sessions and accounts.

use super::homes;
use super::paging::{self, PageQuery};
use crate::auth::{self, Caller};
use crate::error::{ApiError, ApiJson};
use crate::state::AppState;
use axum::extract::rejection::QueryRejection;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use gpuhub_controller::ControlError;
use gpuhub_core::api::{
    ChangePasswordRequest, CreateTokenRequest, CreateUserRequest, LoginRequest, NewTokenView, PatchUserRequest,
    Problem, TokenResponse, TokenView, UserView,
};
use gpuhub_core::names;
use gpuhub_core::user::{Role, User, UserSource};
use gpuhub_core::workload::WorkloadState;
use gpuhub_store::{TokenKind, WorkloadFilter};
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Instant;

/// Liveness: answers while the server runs; needs no login.
#[utoipa::path(get, path = "/api/v1/health", tag = "auth", security(()), responses((status = 200, description = "the server runs")))]
pub async fn health() -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({"status": "ok"}))
}

/// A hash to verify against when the user does not exist, so that answering takes as long either way.
fn dummy_hash() -> &'static str {
    static H: OnceLock<String> = OnceLock::new();
    H.get_or_init(|| auth::hash_password("gpuhub-dummy-password").unwrap_or_default())
}

/// Logs in: returns an API token for the CLI (it expires after `token_days`) and sets a session cookie
/// for browsers. Failed tries are limited per user and address (429) and slow further tries.
#[utoipa::path(post, path = "/api/v1/login", tag = "auth", security(()), request_body = LoginRequest,
    responses((status = 200, body = TokenResponse), (status = 401, body = Problem), (status = 403, body = Problem), (status = 429, body = Problem)))]
pub async fn login(
    State(st): State<AppState>,
    ConnectInfo(addr): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<LoginRequest>,
) -> Result<Response, ApiError> {
    let client = auth::client_ip(addr.ip(), &headers, &st.config.trusted_proxy_nets().unwrap_or_default());
    let user = authenticate(&st, client, &req.username, &req.password).await?;
    let (body, cookie) = new_session(&st, &user, req.token).await?;
    session_response(body, &cookie)
}

/// Checks a sign-in with a password (the directory's where it decides, else the local hash): the
/// user, or 401 (wrong), 403 (disabled), 429 (too many failures from this user and address; further
/// tries are slowed). Shared by the API's login and the login page's form.
pub(crate) async fn authenticate(
    st: &AppState,
    client: std::net::IpAddr,
    username: &str,
    password: &str,
) -> Result<User, ApiError> {
    let now = Instant::now();
    let delay = st.limiter.check(username, client, now)?;
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let found = match st.store.user_with_password_hash(username).await {
        Ok(found) => Some(found),
        Err(gpuhub_store::StoreError::NotFound { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    let fail = || {
        st.limiter.fail(username, client, now);
        ApiError::unauthorized("invalid username or password")
    };
    // an account of the directory, or a name only the directory may know: the directory decides
    let local = found.as_ref().is_some_and(|(u, _)| u.source == UserSource::Local);
    if !local && st.identities.directory().is_some() {
        let Some(outside) = crate::identity::directory_sign_in(st, username, password).await? else {
            return Err(fail());
        };
        let user = crate::identity::account(st, &outside).await?;
        if user.disabled {
            return Err(ApiError::forbidden("account is disabled"));
        }
        st.limiter.succeed(username, client);
        return Ok(user);
    }
    let hash = match &found {
        Some((u, h)) if u.source == UserSource::Local => h.clone(),
        // an outside account signs in through its source only
        _ => dummy_hash().to_owned(),
    };
    let ok = auth::verify_password_bounded(password.to_owned(), hash.clone()).await?;
    let user = match found {
        Some((user, _)) if ok && user.source == UserSource::Local => user,
        _ => return Err(fail()),
    };
    if user.disabled {
        return Err(ApiError::forbidden("account is disabled"));
    }
    st.limiter.succeed(username, client);
    if auth::needs_rehash(&hash) {
        // a hash of older parameters: store one of the current ones while the password is at hand
        let renewed = auth::hash_password_bounded(password.to_owned()).await?;
        st.store.set_password_hash(&user.username, &renewed).await?;
    }
    Ok(user)
}

/// Refuses a password change for an account whose password is its source's (409).
fn not_outside(user: &User) -> Result<(), ApiError> {
    match user.source {
        UserSource::Local => Ok(()),
        s => Err(ApiError::conflict(format!(
            "{} signs in through {}: its password is changed there, not here",
            user.username,
            if s == UserSource::Ldap { "the LDAP directory" } else { "the OpenID provider" }
        ))
        .at("password")),
    }
}

/// The JSON answer of a sign-in with its session cookie set.
fn session_response(body: TokenResponse, cookie: &str) -> Result<Response, ApiError> {
    let mut resp = axum::Json(body).into_response();
    resp.headers_mut().insert(header::SET_COOKIE, HeaderValue::from_str(cookie).map_err(ApiError::internal)?);
    Ok(resp)
}

/// The most a token of `user` may live: `days`, or for an OpenID account at most `oidc_session_hours`
/// (such accounts cannot be checked with the provider later).
pub(crate) fn token_lifetime(st: &AppState, user: &User, days: i64) -> chrono::Duration {
    let asked = chrono::Duration::days(days);
    match user.source {
        UserSource::Oidc => asked.min(chrono::Duration::hours(st.config.oidc_session_hours)),
        _ => asked,
    }
}

/// A browser session for `user` and, with `token`, an API token: the answer and the session's cookie.
pub(crate) async fn new_session(st: &AppState, user: &User, token: bool) -> Result<(TokenResponse, String), ApiError> {
    let now = st.clock.now();
    let mut expires = now + token_lifetime(st, user, st.config.token_days);
    let token = match token {
        true => {
            let (token, hash) = auth::new_token(TokenKind::Api);
            st.store.insert_token(user.id, &hash, TokenKind::Api, now, Some(expires)).await?;
            Some(token)
        }
        false => None,
    };
    let (session, shash) = auth::new_token(TokenKind::Session);
    let lasts = chrono::Duration::hours(st.config.session_hours).min(token_lifetime(st, user, st.config.token_days));
    st.store.insert_token(user.id, &shash, TokenKind::Session, now, Some(now + lasts)).await?;
    let cookie = format!(
        "{}={session}; Path=/; HttpOnly; SameSite=Lax; Max-Age={}{}",
        auth::session_cookie_name(&st.config),
        lasts.num_seconds(),
        if st.config.secure_cookies { "; Secure" } else { "" }
    );
    if token.is_none() {
        expires = now + lasts;
    }
    let body = TokenResponse { token, username: user.username.clone(), role: user.role, expires_at: Some(expires) };
    Ok((body, cookie))
}

/// Logs out: revokes the bearer token and the browser session this request carries (either or both; a
/// browser logs out with its cookie alone), and clears the cookie.
#[utoipa::path(post, path = "/api/v1/logout", tag = "auth", responses((status = 204), (status = 401, body = Problem)))]
pub async fn logout(State(st): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    let mut revoked = 0;
    for token in [auth::bearer_token(&headers), auth::session_cookie(&st, &headers)].into_iter().flatten() {
        if let Ok(user) = auth::user_for_token(&st, &token).await {
            st.store.delete_token(&auth::token_hash(&token)).await?;
            st.revocations.tokens_ended(&user.username);
            revoked += 1;
        }
    }
    if revoked == 0 {
        return Err(ApiError::unauthorized("not logged in: no valid token or session to end"));
    }
    let mut resp = StatusCode::NO_CONTENT.into_response();
    resp.headers_mut().insert(header::SET_COOKIE, auth::clear_session_cookie(&st.config));
    Ok(resp)
}

/// The caller's API tokens and browser sessions (never the secrets), oldest first, in pages.
#[utoipa::path(get, path = "/api/v1/me/tokens", tag = "auth", params(PageQuery),
    responses((status = 200, body = [TokenView]), (status = 400, body = Problem), (status = 401, body = Problem)))]
pub async fn list_tokens(
    State(st): State<AppState>,
    Caller(user): Caller,
    headers: HeaderMap,
    q: Result<Query<PageQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let page = paging::from_query(q)?;
    let current = auth::bearer_token(&headers).map(|t| auth::token_hash(&t));
    let views = token_views(&st, &user, current.as_deref()).await?;
    let (views, next) = paging::slice(views, |t| paging::time_key(t.created_at, &t.id), &page);
    Ok(paging::respond(views, next, "/api/v1/me/tokens", &page))
}

/// `user`'s live tokens and sessions, oldest first; `current` (a hash) is marked.
pub(crate) async fn token_views(st: &AppState, user: &User, current: Option<&str>) -> Result<Vec<TokenView>, ApiError> {
    let now = st.clock.now();
    let tokens = st.store.list_user_tokens(user.id).await?;
    Ok(tokens
        .into_iter()
        .filter(|t| t.expires_at.is_none_or(|e| e > now))
        .map(|t| TokenView {
            id: auth::token_id(&t.hash).to_owned(),
            kind: t.kind.as_str().to_owned(),
            created_at: t.created_at,
            expires_at: t.expires_at,
            current: current == Some(t.hash.as_str()),
        })
        .collect())
}

/// Makes an API token for the caller, valid `days` (1 to `token_days`, that by default); its secret is
/// in the answer only.
#[utoipa::path(post, path = "/api/v1/me/tokens", tag = "auth", request_body = CreateTokenRequest,
    responses((status = 201, body = NewTokenView), (status = 401, body = Problem), (status = 422, body = Problem)))]
pub async fn create_token(
    State(st): State<AppState>,
    Caller(user): Caller,
    ApiJson(req): ApiJson<CreateTokenRequest>,
) -> Result<(StatusCode, axum::Json<NewTokenView>), ApiError> {
    let most = st.config.token_days;
    let days = req.days.unwrap_or(most);
    if !(1..=most).contains(&days) {
        return Err(ApiError::unprocessable(format!("invalid days: must be from 1 to {most} (token_days)")).at("days"));
    }
    let now = st.clock.now();
    let expires_at = now + token_lifetime(&st, &user, days);
    let (token, hash) = auth::new_token(TokenKind::Api);
    st.store.insert_token(user.id, &hash, TokenKind::Api, now, Some(expires_at)).await?;
    let id = auth::token_id(&hash).to_owned();
    Ok((StatusCode::CREATED, axum::Json(NewTokenView { id, token, expires_at })))
}

/// Revokes one of the caller's tokens or sessions by its id.
#[utoipa::path(delete, path = "/api/v1/me/tokens/{id}", tag = "auth", params(("id" = String, Path, description = "token id")),
    responses((status = 204), (status = 401, body = Problem), (status = 404, body = Problem)))]
pub async fn delete_token(
    State(st): State<AppState>,
    Caller(user): Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    match st.store.delete_user_token_by_id(user.id, &id).await {
        Ok(()) => {
            st.revocations.tokens_ended(&user.username);
            Ok(StatusCode::NO_CONTENT)
        }
        Err(gpuhub_store::StoreError::NotFound { .. }) => Err(ApiError::not_found(format!("no token with id {id:?}"))),
        Err(e) => Err(e.into()),
    }
}

/// Changes the caller's own password. Every other token and session of the account is revoked; the
/// token this request came with keeps working.
#[utoipa::path(post, path = "/api/v1/me/password", tag = "auth", request_body = ChangePasswordRequest,
    responses((status = 204), (status = 401, body = Problem), (status = 403, body = Problem), (status = 422, body = Problem)))]
pub async fn change_password(
    State(st): State<AppState>,
    Caller(user): Caller,
    headers: HeaderMap,
    ApiJson(req): ApiJson<ChangePasswordRequest>,
) -> Result<StatusCode, ApiError> {
    not_outside(&user)?;
    let (_, hash) = st.store.user_with_password_hash(&user.username).await?;
    let current = req.current_password.clone();
    let ok = auth::verify_password_bounded(current, hash).await?;
    if !ok {
        return Err(ApiError::forbidden("current_password is wrong"));
    }
    auth::check_password(&req.new_password)?;
    let p = req.new_password.clone();
    let hash = auth::hash_password_bounded(p).await?;
    st.store.set_password_hash(&user.username, &hash).await?;
    let keep = auth::bearer_token(&headers).map(|t| auth::token_hash(&t));
    st.store.delete_user_tokens_except(user.id, keep.as_deref()).await?;
    // what was opened with the others (terminals, app WebSockets) closes now
    st.revocations.tokens_ended(&user.username);
    Ok(StatusCode::NO_CONTENT)
}

/// The logged-in account, with how full its home is.
#[utoipa::path(get, path = "/api/v1/me", tag = "auth", responses((status = 200, body = UserView), (status = 401, body = Problem)))]
pub async fn me(State(st): State<AppState>, Caller(user): Caller) -> axum::Json<UserView> {
    axum::Json(homes::user_view(&st, &user).await)
}

/// Every account (admin), by username, in pages (`X-Next-Cursor` names the next).
#[utoipa::path(get, path = "/api/v1/users", tag = "users", params(PageQuery),
    responses((status = 200, body = [UserView]), (status = 400, body = Problem), (status = 403, body = Problem)))]
pub async fn list_users(
    State(st): State<AppState>,
    caller: Caller,
    q: Result<Query<PageQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let page = paging::from_query(q)?;
    let (users, more) = st.store.list_users_page(page.after.as_deref(), page.limit).await?;
    let next = if more { users.last().map(|u| u.username.clone()) } else { None };
    let mut views: Vec<UserView> = Vec::with_capacity(users.len());
    for u in &users {
        views.push(homes::user_view(&st, u).await);
    }
    Ok(paging::respond(views, next, "/api/v1/users", &page))
}

/// Creates an account (admin); it gets the next free UID from 10000 up.
#[utoipa::path(post, path = "/api/v1/users", tag = "users", request_body = CreateUserRequest,
    responses((status = 201, body = UserView), (status = 403, body = Problem), (status = 409, body = Problem), (status = 422, body = Problem)))]
pub async fn create_user(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(req): ApiJson<CreateUserRequest>,
) -> Result<(StatusCode, axum::Json<UserView>), ApiError> {
    caller.require_admin()?;
    names::validate("user", &req.username)?;
    auth::check_password(&req.password)?;
    let password = req.password.clone();
    let hash = auth::hash_password_bounded(password).await?;
    let role = if req.admin { Role::Admin } else { Role::User };
    let user = st.store.create_user(&req.username, &hash, role, st.clock.now()).await?;
    Ok((StatusCode::CREATED, axum::Json(UserView::from(&user))))
}

async fn enabled_admins(st: &AppState) -> Result<usize, ApiError> {
    Ok(st.store.list_users().await?.iter().filter(|u| u.is_admin() && !u.disabled).count())
}

/// One account (admin).
#[utoipa::path(get, path = "/api/v1/users/{name}", tag = "users", params(("name" = String, Path, description = "username")),
    responses((status = 200, body = UserView), (status = 403, body = Problem), (status = 404, body = Problem)))]
pub async fn get_user(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<axum::Json<UserView>, ApiError> {
    caller.require_admin()?;
    Ok(axum::Json(homes::user_view(&st, &st.store.get_user(&name).await?).await))
}

/// Changes an account's password, role, disabled flag or home quota (admin). The last enabled admin
/// stays one. A home quota below what the home holds is refused (409) and changes nothing.
///
/// A new password revokes every token and session of the account (but the caller's own). Disabling
/// offboards: tokens and sessions are revoked, open SSH connections and browser terminals close, running
/// work is stopped (unless `keep_workloads`), and queued work does not start while the account is disabled.
#[utoipa::path(patch, path = "/api/v1/users/{name}", tag = "users", request_body = PatchUserRequest,
    params(("name" = String, Path, description = "username")),
    responses((status = 200, body = UserView), (status = 403, body = Problem), (status = 404, body = Problem), (status = 409, body = Problem)))]
pub async fn patch_user(
    State(st): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    Path(name): Path<String>,
    ApiJson(req): ApiJson<PatchUserRequest>,
) -> Result<axum::Json<UserView>, ApiError> {
    caller.require_admin()?;
    let user = st.store.get_user(&name).await?;
    let loses_admin = user.is_admin() && !user.disabled && (req.admin == Some(false) || req.disabled == Some(true));
    if loses_admin && enabled_admins(&st).await? <= 1 {
        return Err(ApiError::conflict(format!("{name} is the last enabled admin")));
    }
    if req.keep_workloads.is_some() && req.disabled != Some(true) {
        return Err(ApiError::unprocessable("invalid keep_workloads: only with \"disabled\": true"));
    }
    let quota = match &req.home_quota {
        Some(q) => Some(homes::check_quota(&st, &user, q).await?),
        None => None,
    };
    if let Some(p) = &req.password {
        not_outside(&user)?;
        auth::check_password(p)?;
        let p = p.clone();
        let hash = auth::hash_password_bounded(p).await?;
        st.store.set_password_hash(&name, &hash).await?;
        let own =
            (caller.0.id == user.id).then(|| auth::bearer_token(&headers).map(|t| auth::token_hash(&t))).flatten();
        st.store.delete_user_tokens_except(user.id, own.as_deref()).await?;
        st.revocations.tokens_ended(&name);
    }
    if let Some(a) = req.admin {
        st.store.set_role(&name, if a { Role::Admin } else { Role::User }).await?;
    }
    if let Some(d) = req.disabled {
        if d {
            offboard(&st, &user, req.keep_workloads.unwrap_or(false)).await?;
        } else {
            st.store.set_disabled(&name, false).await?;
        }
        st.controller.kick();
    }
    if let Some(own) = quota {
        homes::set_quota(&st, &user, own).await?;
    }
    Ok(axum::Json(homes::user_view(&st, &st.store.get_user(&name).await?).await))
}

/// Disables `user`: tokens and sessions revoked, open SSH connections and browser terminals closed,
/// running work stopped (unless `keep_workloads`); queued work does not start while disabled.
pub(crate) async fn offboard(st: &AppState, user: &User, keep_workloads: bool) -> Result<(), ApiError> {
    st.store.set_disabled(&user.username, true).await?;
    st.store.delete_user_tokens(user.id).await?;
    st.revocations.revoke(&user.username);
    if !keep_workloads {
        stop_all(st, &user.username).await?;
    }
    st.controller.kick();
    Ok(())
}

/// Stops every starting or running workload of `owner`.
async fn stop_all(st: &AppState, owner: &str) -> Result<(), ApiError> {
    let filter = WorkloadFilter {
        owner: Some(owner.to_owned()),
        states: Some(vec![WorkloadState::Starting, WorkloadState::Running]),
    };
    // and what waits in an engine's own queue (Slurm), which would otherwise start there
    let queued = WorkloadFilter { owner: Some(owner.to_owned()), states: Some(vec![WorkloadState::Queued]) };
    let waiting = st.store.list_workloads(&queued).await?.into_iter().filter(|w| w.waits_in_engine());
    for w in st.store.list_workloads(&filter).await?.into_iter().chain(waiting) {
        let reason = gpuhub_core::stop::StopReason::OwnerDisabled { at: st.clock.now() };
        match st.controller.stop(&w.id, reason).await {
            Ok(_) => {}
            // it ended meanwhile
            Err(ControlError::Conflict(_) | ControlError::NotFound(_)) => {}
            Err(ControlError::Store(gpuhub_store::StoreError::NotFound { .. })) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// `DELETE /api/v1/users/{name}?home=archive|delete`.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct DeleteUserQuery {
    /// What becomes of the home directory: `archive` (default: moved to `<data_dir>/archive/`, out of
    /// every container's reach) or `delete`.
    #[serde(default)]
    #[param(inline)]
    home: HomeDisposal,
}

/// What becomes of a deleted user's home.
#[derive(Debug, Clone, Copy, Default, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum HomeDisposal {
    /// Moved to `<data_dir>/archive/home-<user>-<unix ms>`.
    #[default]
    Archive,
    /// Removed.
    Delete,
}

/// Deletes an account (admin) and everything that was theirs: their workloads are stopped and deleted
/// with their logs, their tokens, sessions and SSH keys removed, open connections closed, and their home
/// archived (default) or deleted. A new account of the same name starts with nothing of the old one's.
#[utoipa::path(delete, path = "/api/v1/users/{name}", tag = "users", params(("name" = String, Path, description = "username"), DeleteUserQuery),
    responses((status = 204), (status = 403, body = Problem), (status = 404, body = Problem), (status = 409, body = Problem)))]
pub async fn delete_user(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    crate::error::ApiQuery(q): crate::error::ApiQuery<DeleteUserQuery>,
) -> Result<StatusCode, ApiError> {
    caller.require_admin()?;
    let user = st.store.get_user(&name).await?;
    if user.is_admin() && !user.disabled && enabled_admins(&st).await? <= 1 {
        return Err(ApiError::conflict(format!("{name} is the last enabled admin")));
    }
    if caller.0.id == user.id {
        return Err(ApiError::conflict("you cannot delete your own account"));
    }
    // nothing of theirs starts from here on, and every open connection closes
    st.store.set_disabled(&name, true).await?;
    st.store.delete_user_tokens(user.id).await?;
    st.revocations.revoke(&name);
    let filter = WorkloadFilter { owner: Some(name.clone()), states: None };
    for w in st.store.list_workloads(&filter).await? {
        match st.controller.delete(&w.id).await {
            Ok(()) => {}
            Err(ControlError::NotFound(_) | ControlError::Store(gpuhub_store::StoreError::NotFound { .. })) => {}
            Err(e) => return Err(e.into()),
        }
    }
    // and, with their runs gone, their network (Docker has a few dozen address pools for all of them)
    let instance = super::personal::installation(&st).await?;
    let network = gpuhub_controller::spec::user_network(&instance, &name);
    let labels = gpuhub_controller::spec::network_labels(&instance, &name);
    match st.engine.remove_user_network(&network, &labels).await {
        Ok(()) => {}
        Err(e @ gpuhub_driver::EngineError::Unavailable(_)) => return Err(e.into()),
        Err(e) => tracing::warn!(%network, error = %e, "cannot remove a deleted user's network"),
    }
    homes::dispose(&st, &name, matches!(q.home, HomeDisposal::Archive)).await?;
    // their saved workspaces go with them
    for p in st.store.list_personal_images(&name).await? {
        if let Err(e) = st.engine.remove_image(&p.reference).await {
            tracing::warn!(image = %p.reference, error = %e, "cannot remove a deleted user's image");
        }
        st.store.delete_personal_image(&name, &p.name).await?;
    }
    st.store.delete_user(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}
