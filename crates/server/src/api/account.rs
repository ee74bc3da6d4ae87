//! Login, sessions and accounts.

use super::paging::{self, PageQuery};
use crate::auth::{self, Caller};
use crate::error::{ApiError, ApiJson};
use crate::service;
use crate::service::homes;
use crate::state::AppState;
use axum::extract::rejection::QueryRejection;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use gpuhub_api::{
    ChangePasswordRequest, CreateTokenRequest, CreateUserRequest, LoginRequest, NewTokenView, PatchUserRequest,
    Problem, TokenResponse, TokenView, UserView,
};
use std::net::SocketAddr;

/// Liveness: answers while the server runs; needs no login.
#[utoipa::path(get, path = "/api/v1/health", tag = "auth", security(()), responses((status = 200, description = "the server runs")))]
pub async fn health() -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({"status": "ok"}))
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
    let user = service::accounts::authenticate(&st, client, &req.username, &req.password).await?;
    let s = service::accounts::new_session(&st, &user, req.token).await?;
    session_response(s.answer, &auth::session_set_cookie(&st.config, &s.session, s.lasts))
}

/// The JSON answer of a sign-in with its session cookie set.
fn session_response(body: TokenResponse, cookie: &str) -> Result<Response, ApiError> {
    let mut resp = axum::Json(body).into_response();
    resp.headers_mut().insert(header::SET_COOKIE, HeaderValue::from_str(cookie).map_err(ApiError::internal)?);
    Ok(resp)
}

/// Logs out: revokes the bearer token and the browser session this request carries (either or both; a
/// browser logs out with its cookie alone), and clears the cookie.
#[utoipa::path(post, path = "/api/v1/logout", tag = "auth", responses((status = 204), (status = 401, body = Problem)))]
pub async fn logout(State(st): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    let mut revoked = 0;
    for token in [auth::bearer_token(&headers), auth::session_cookie(&st, &headers)].into_iter().flatten() {
        if service::accounts::end_token(&st, &token).await? {
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
    let views = service::accounts::token_views(&st, &user, current.as_deref()).await?;
    let (views, next) = paging::slice(views, |t| paging::time_key(t.created_at, &t.id), &page);
    Ok(paging::respond(views, next, "/api/v1/me/tokens", &page))
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
    let view = service::accounts::create_token(&st, &user, &req).await?;
    Ok((StatusCode::CREATED, axum::Json(view)))
}

/// Revokes one of the caller's tokens or sessions by its id.
#[utoipa::path(delete, path = "/api/v1/me/tokens/{id}", tag = "auth", params(("id" = String, Path, description = "token id")),
    responses((status = 204), (status = 401, body = Problem), (status = 404, body = Problem)))]
pub async fn delete_token(
    State(st): State<AppState>,
    Caller(user): Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    service::accounts::delete_token(&st, &user, &id).await?;
    Ok(StatusCode::NO_CONTENT)
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
    let keep = auth::bearer_token(&headers).map(|t| auth::token_hash(&t));
    service::accounts::change_password(&st, &user, keep.as_deref(), &req).await?;
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

/// Creates an account (admin); it gets the next free UID of `uid_range` (70000-99999 by default).
#[utoipa::path(post, path = "/api/v1/users", tag = "users", request_body = CreateUserRequest,
    responses((status = 201, body = UserView), (status = 403, body = Problem), (status = 409, body = Problem), (status = 422, body = Problem)))]
pub async fn create_user(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(req): ApiJson<CreateUserRequest>,
) -> Result<(StatusCode, axum::Json<UserView>), ApiError> {
    let user = service::accounts::create_user(&st, &caller.0, &req).await?;
    Ok((StatusCode::CREATED, axum::Json(UserView::from(&user))))
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
    let keep = auth::bearer_token(&headers).map(|t| auth::token_hash(&t));
    Ok(axum::Json(service::accounts::patch_user(&st, &caller.0, &name, keep.as_deref(), &req).await?))
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
    service::accounts::delete_user(&st, &caller.0, &name, matches!(q.home, HomeDisposal::Archive)).await?;
    Ok(StatusCode::NO_CONTENT)
}
