//! Login, sessions and accounts.

use crate::auth::{self, Caller, SESSION_COOKIE};
use crate::error::{ApiError, ApiJson};
use crate::state::AppState;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use gpuhub_core::api::{CreateUserRequest, LoginRequest, PatchUserRequest, Problem, TokenResponse, UserView};
use gpuhub_core::names;
use gpuhub_core::user::Role;
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

/// Logs in: returns an API token for the CLI and sets a session cookie for browsers.
#[utoipa::path(post, path = "/api/v1/login", tag = "auth", security(()), request_body = LoginRequest,
    responses((status = 200, body = TokenResponse), (status = 401, body = Problem), (status = 403, body = Problem), (status = 429, body = Problem)))]
pub async fn login(
    State(st): State<AppState>,
    ConnectInfo(addr): ConnectInfo<SocketAddr>,
    ApiJson(req): ApiJson<LoginRequest>,
) -> Result<Response, ApiError> {
    let now = Instant::now();
    st.limiter.check(&req.username, Some(addr.ip()), now)?;
    let found = match st.store.user_with_password_hash(&req.username).await {
        Ok(found) => Some(found),
        Err(gpuhub_store::StoreError::NotFound { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    let password = req.password.clone();
    let hash = found.as_ref().map(|(_, h)| h.clone()).unwrap_or_else(|| dummy_hash().to_owned());
    let ok = tokio::task::spawn_blocking(move || auth::verify_password(&password, &hash))
        .await
        .map_err(ApiError::internal)?;
    let user = match found {
        Some((user, _)) if ok => user,
        _ => {
            st.limiter.fail(&req.username, Some(addr.ip()), now);
            return Err(ApiError::unauthorized("invalid username or password"));
        }
    };
    if user.disabled {
        return Err(ApiError::forbidden("account is disabled"));
    }
    st.limiter.succeed(&req.username);
    let now = Utc::now();
    let (token, hash) = auth::new_token();
    st.store.insert_token(user.id, &hash, TokenKind::Api, now, None).await?;
    let (session, shash) = auth::new_token();
    let hours = st.config.session_hours;
    st.store.insert_token(user.id, &shash, TokenKind::Session, now, Some(now + chrono::Duration::hours(hours))).await?;
    let cookie = format!(
        "{SESSION_COOKIE}={session}; Path=/; HttpOnly; SameSite=Lax; Max-Age={}{}",
        hours * 3600,
        if st.config.secure_cookies { "; Secure" } else { "" }
    );
    let body = TokenResponse { token, username: user.username.clone(), role: user.role };
    let mut resp = axum::Json(body).into_response();
    resp.headers_mut().insert(header::SET_COOKIE, HeaderValue::from_str(&cookie).map_err(ApiError::internal)?);
    Ok(resp)
}

/// Ends the session or revokes the token this request carries.
#[utoipa::path(post, path = "/api/v1/logout", tag = "auth", responses((status = 204), (status = 401, body = Problem)))]
pub async fn logout(State(st): State<AppState>, _caller: Caller, headers: HeaderMap) -> Result<Response, ApiError> {
    if let Some(t) = auth::bearer_token(&headers) {
        st.store.delete_token(&auth::token_hash(&t)).await?;
    }
    let mut resp = StatusCode::NO_CONTENT.into_response();
    resp.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("gpuhub_session=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0"),
    );
    Ok(resp)
}

/// The logged-in account.
#[utoipa::path(get, path = "/api/v1/me", tag = "auth", responses((status = 200, body = UserView), (status = 401, body = Problem)))]
pub async fn me(Caller(user): Caller) -> axum::Json<UserView> {
    axum::Json(UserView::from(&user))
}

/// Every account (admin).
#[utoipa::path(get, path = "/api/v1/users", tag = "users", responses((status = 200, body = [UserView]), (status = 403, body = Problem)))]
pub async fn list_users(State(st): State<AppState>, caller: Caller) -> Result<axum::Json<Vec<UserView>>, ApiError> {
    caller.require_admin()?;
    Ok(axum::Json(st.store.list_users().await?.iter().map(UserView::from).collect()))
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
    let hash =
        tokio::task::spawn_blocking(move || auth::hash_password(&password)).await.map_err(ApiError::internal)??;
    let role = if req.admin { Role::Admin } else { Role::User };
    let user = st.store.create_user(&req.username, &hash, role, Utc::now()).await?;
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
    Ok(axum::Json(UserView::from(&st.store.get_user(&name).await?)))
}

/// Changes an account's password, role or disabled flag (admin). The last enabled admin stays one.
#[utoipa::path(patch, path = "/api/v1/users/{name}", tag = "users", request_body = PatchUserRequest,
    params(("name" = String, Path, description = "username")),
    responses((status = 200, body = UserView), (status = 403, body = Problem), (status = 404, body = Problem), (status = 409, body = Problem)))]
pub async fn patch_user(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    ApiJson(req): ApiJson<PatchUserRequest>,
) -> Result<axum::Json<UserView>, ApiError> {
    caller.require_admin()?;
    let user = st.store.get_user(&name).await?;
    let loses_admin = user.is_admin() && !user.disabled && (req.admin == Some(false) || req.disabled == Some(true));
    if loses_admin && enabled_admins(&st).await? <= 1 {
        return Err(ApiError::conflict(format!("{name} is the last enabled admin")));
    }
    if let Some(p) = &req.password {
        auth::check_password(p)?;
        let p = p.clone();
        let hash = tokio::task::spawn_blocking(move || auth::hash_password(&p)).await.map_err(ApiError::internal)??;
        st.store.set_password_hash(&name, &hash).await?;
    }
    if let Some(a) = req.admin {
        st.store.set_role(&name, if a { Role::Admin } else { Role::User }).await?;
    }
    if let Some(d) = req.disabled {
        st.store.set_disabled(&name, d).await?;
        if d {
            st.store.delete_user_tokens(user.id).await?;
        }
    }
    Ok(axum::Json(UserView::from(&st.store.get_user(&name).await?)))
}

/// Deletes an account (admin); refused while it has queued or running workloads.
#[utoipa::path(delete, path = "/api/v1/users/{name}", tag = "users", params(("name" = String, Path, description = "username")),
    responses((status = 204), (status = 403, body = Problem), (status = 404, body = Problem), (status = 409, body = Problem)))]
pub async fn delete_user(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    caller.require_admin()?;
    let user = st.store.get_user(&name).await?;
    if user.is_admin() && !user.disabled && enabled_admins(&st).await? <= 1 {
        return Err(ApiError::conflict(format!("{name} is the last enabled admin")));
    }
    let filter = WorkloadFilter {
        owner: Some(name.clone()),
        states: Some(vec![WorkloadState::Queued, WorkloadState::Starting, WorkloadState::Running]),
    };
    let active = st.store.list_workloads(&filter).await?;
    if !active.is_empty() {
        return Err(ApiError::conflict(format!("{name} has {} active workload(s); stop them first", active.len())));
    }
    st.store.delete_user(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}
