//! Accounts: signing in (the local password or the directory's), sessions and API tokens, passwords,
//! admins' changes to accounts, and what ends when an account is deleted.

use super::credentials;
use super::homes;
use super::{Kind, ServiceError};
use crate::state::AppState;
use gpuhub_api::{
    ChangePasswordRequest, CreateTokenRequest, CreateUserRequest, NewTokenView, PatchUserRequest, TokenResponse,
    TokenView, UserView,
};
use gpuhub_controller::ControlError;
use gpuhub_core::names;
use gpuhub_core::user::{Role, User, UserSource};
use gpuhub_store::{TokenKind, WorkloadFilter};
use std::sync::OnceLock;
use std::time::Instant;

/// A hash to verify against when the user does not exist, so that answering takes as long either way.
fn dummy_hash() -> &'static str {
    static H: OnceLock<String> = OnceLock::new();
    H.get_or_init(|| credentials::hash_password("gpuhub-dummy-password").unwrap_or_default())
}

/// Checks a sign-in with a password (the directory's where it decides, else the local hash): the
/// user, or [`Kind::Unauthenticated`] (wrong), [`Kind::Forbidden`] (disabled), [`Kind::TooMany`] (too many
/// failures from this user and address; further tries are slowed). The API's login and the login
/// page's form both sign in here.
pub async fn authenticate(
    st: &AppState,
    client: std::net::IpAddr,
    username: &str,
    password: &str,
) -> Result<User, ServiceError> {
    let now = Instant::now();
    let delay = st.limiter.check(username, client, now).map_err(|e| ServiceError {
        retry_after: Some(std::time::Duration::from_secs(e.wait_secs)),
        ..ServiceError::new(Kind::TooMany, e.to_string())
    })?;
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
        ServiceError::new(Kind::Unauthenticated, "invalid username or password")
    };
    // an account of the directory, or a name only the directory may know: the directory decides
    let local = found.as_ref().is_some_and(|(u, _)| u.source == UserSource::Local);
    if !local && st.identities.directory().is_some() {
        let Some(outside) = super::identity::directory_sign_in(st, username, password).await? else {
            return Err(fail());
        };
        let user = super::identity::outside_account(st, &outside).await?;
        if user.disabled {
            return Err(ServiceError::forbidden("account is disabled"));
        }
        st.limiter.succeed(username, client);
        return Ok(user);
    }
    let hash = match &found {
        Some((u, h)) if u.source == UserSource::Local => h.clone(),
        // an outside account signs in through its source only
        _ => dummy_hash().to_owned(),
    };
    let ok = credentials::verify_password_bounded(password.to_owned(), hash.clone()).await?;
    let user = match found {
        Some((user, _)) if ok && user.source == UserSource::Local => user,
        _ => return Err(fail()),
    };
    if user.disabled {
        return Err(ServiceError::forbidden("account is disabled"));
    }
    st.limiter.succeed(username, client);
    if credentials::needs_rehash(&hash) {
        // a hash of older parameters: store one of the current ones while the password is at hand
        let renewed = credentials::hash_password_bounded(password.to_owned()).await?;
        st.store.set_password_hash(&user.username, &renewed).await?;
    }
    Ok(user)
}

/// Refuses a password change for an account whose password is its source's ([`Kind::Conflict`]).
fn not_outside(user: &User) -> Result<(), ServiceError> {
    match user.source {
        UserSource::Local => Ok(()),
        s => Err(ServiceError::conflict(format!(
            "{} signs in through {}: its password is changed there, not here",
            user.username,
            if s == UserSource::Ldap { "the LDAP directory" } else { "the OpenID provider" }
        ))
        .at("password")),
    }
}

/// The most a token of `user` may live: `days`, or for an OpenID account at most `oidc_session_hours`
/// (such accounts cannot be checked with the provider later).
pub fn token_lifetime(st: &AppState, user: &User, days: i64) -> chrono::Duration {
    let asked = chrono::Duration::days(days);
    match user.source {
        UserSource::Oidc => asked.min(chrono::Duration::hours(st.config.oidc_session_hours)),
        _ => asked,
    }
}

/// A new browser session (and perhaps API token) of a user who signed in.
#[derive(Debug)]
pub struct NewSession {
    /// What the sign-in answers: the API token (when asked for), who, until when.
    pub answer: TokenResponse,
    /// The session's secret (the cookie's value).
    pub session: String,
    /// How long the session lasts.
    pub lasts: chrono::Duration,
}

/// A browser session for `user` and, with `token`, an API token.
pub async fn new_session(st: &AppState, user: &User, token: bool) -> Result<NewSession, ServiceError> {
    let now = st.clock.now();
    let mut expires = now + token_lifetime(st, user, st.config.token_days);
    let token = match token {
        true => {
            let (token, hash) = credentials::new_token(TokenKind::Api);
            st.store.insert_token(user.id, &hash, TokenKind::Api, now, Some(expires)).await?;
            Some(token)
        }
        false => None,
    };
    let (session, shash) = credentials::new_token(TokenKind::Session);
    let lasts = chrono::Duration::hours(st.config.session_hours).min(token_lifetime(st, user, st.config.token_days));
    st.store.insert_token(user.id, &shash, TokenKind::Session, now, Some(now + lasts)).await?;
    if token.is_none() {
        expires = now + lasts;
    }
    let answer = TokenResponse { token, username: user.username.clone(), role: user.role, expires_at: Some(expires) };
    Ok(NewSession { answer, session, lasts })
}

/// Ends the token or session `token` if it is a live one of an enabled account: the connections opened
/// with it close. Whether it was.
pub async fn end_token(st: &AppState, token: &str) -> Result<bool, ServiceError> {
    let hash = credentials::token_hash(token);
    // a token that cannot be looked up now is not ended here
    let Ok(Some((user, _))) = st.store.token_user(&hash, st.clock.now()).await else { return Ok(false) };
    if user.disabled {
        return Ok(false);
    }
    st.store.delete_token(&hash).await?;
    st.revocations.tokens_ended(&user.username);
    Ok(true)
}

/// `user`'s live tokens and sessions, oldest first; `current` (a hash) is marked.
pub async fn token_views(st: &AppState, user: &User, current: Option<&str>) -> Result<Vec<TokenView>, ServiceError> {
    let now = st.clock.now();
    let tokens = st.store.list_user_tokens(user.id).await?;
    Ok(tokens
        .into_iter()
        .filter(|t| t.expires_at.is_none_or(|e| e > now))
        .map(|t| TokenView {
            id: credentials::token_id(&t.hash).to_owned(),
            kind: t.kind.as_str().to_owned(),
            created_at: t.created_at,
            expires_at: t.expires_at,
            current: current == Some(t.hash.as_str()),
        })
        .collect())
}

/// Makes an API token for `user`, valid `days` (1 to `token_days`, that by default); its secret is in
/// the answer only.
pub async fn create_token(st: &AppState, user: &User, req: &CreateTokenRequest) -> Result<NewTokenView, ServiceError> {
    let most = st.config.token_days;
    let days = req.days.unwrap_or(most);
    if !(1..=most).contains(&days) {
        return Err(ServiceError::invalid_at("days", format!("invalid days: must be from 1 to {most} (token_days)")));
    }
    let now = st.clock.now();
    let expires_at = now + token_lifetime(st, user, days);
    let (token, hash) = credentials::new_token(TokenKind::Api);
    st.store.insert_token(user.id, &hash, TokenKind::Api, now, Some(expires_at)).await?;
    let id = credentials::token_id(&hash).to_owned();
    Ok(NewTokenView { id, token, expires_at })
}

/// Revokes `user`'s token or session `id`.
pub async fn delete_token(st: &AppState, user: &User, id: &str) -> Result<(), ServiceError> {
    match st.store.delete_user_token_by_id(user.id, id).await {
        Ok(()) => {
            st.revocations.tokens_ended(&user.username);
            Ok(())
        }
        Err(gpuhub_store::StoreError::NotFound { .. }) => {
            Err(ServiceError::not_found(format!("no token with id {id:?}")))
        }
        Err(e) => Err(e.into()),
    }
}

/// Changes `user`'s own password. Every other token and session of the account is revoked; `keep` (the
/// hash of the token the change came with) keeps working.
pub async fn change_password(
    st: &AppState,
    user: &User,
    keep: Option<&str>,
    req: &ChangePasswordRequest,
) -> Result<(), ServiceError> {
    not_outside(user)?;
    let (_, hash) = st.store.user_with_password_hash(&user.username).await?;
    let current = req.current_password.clone();
    let ok = credentials::verify_password_bounded(current, hash).await?;
    if !ok {
        return Err(ServiceError::forbidden("current_password is wrong"));
    }
    credentials::check_password(&req.new_password)?;
    let p = req.new_password.clone();
    let hash = credentials::hash_password_bounded(p).await?;
    st.store.set_password_hash(&user.username, &hash).await?;
    st.store.delete_user_tokens_except(user.id, keep).await?;
    // what was opened with the others (terminals, app WebSockets) closes now
    st.revocations.tokens_ended(&user.username);
    if let Some(left) = st.password_change.done(&user.username) {
        // the generated password is no longer the account's: neither required nor kept in a file
        st.store.set_setting(crate::state::password_change::SETTING, &left).await?;
        let _ = std::fs::remove_file(st.data_dir.join("initial-admin-password"));
    }
    Ok(())
}

/// Creates account `req` for admin `caller`; it gets the next free UID of `uid_range`.
pub async fn create_user(st: &AppState, caller: &User, req: &CreateUserRequest) -> Result<User, ServiceError> {
    super::require_admin(caller)?;
    names::validate("user", &req.username)?;
    credentials::check_password(&req.password)?;
    let password = req.password.clone();
    let hash = credentials::hash_password_bounded(password).await?;
    let role = if req.admin { Role::Admin } else { Role::User };
    Ok(st.store.create_user(&req.username, &hash, role, st.clock.now()).await?)
}

async fn enabled_admins(st: &AppState) -> Result<usize, ServiceError> {
    Ok(st.store.list_users().await?.iter().filter(|u| u.is_admin() && !u.disabled).count())
}

/// Changes account `name`'s password, role, disabled flag or home quota for admin `caller`. The last
/// enabled admin stays one; a home quota below what the home holds is refused and changes nothing. A
/// new password revokes every token and session of the account but `keep` (a hash: the caller's own,
/// when they change their own account). Disabling offboards ([`super::offboard::offboard`]).
pub async fn patch_user(
    st: &AppState,
    caller: &User,
    name: &str,
    keep: Option<&str>,
    req: &PatchUserRequest,
) -> Result<UserView, ServiceError> {
    super::require_admin(caller)?;
    let user = st.store.get_user(name).await?;
    let loses_admin = user.is_admin() && !user.disabled && (req.admin == Some(false) || req.disabled == Some(true));
    if loses_admin && enabled_admins(st).await? <= 1 {
        return Err(ServiceError::conflict(format!("{name} is the last enabled admin")));
    }
    if req.keep_workloads.is_some() && req.disabled != Some(true) {
        return Err(ServiceError::invalid("invalid keep_workloads: only with \"disabled\": true"));
    }
    let quota = match &req.home_quota {
        Some(q) => Some(homes::check_quota(st, &user, q).await?),
        None => None,
    };
    if let Some(p) = &req.password {
        not_outside(&user)?;
        credentials::check_password(p)?;
        let p = p.clone();
        let hash = credentials::hash_password_bounded(p).await?;
        st.store.set_password_hash(name, &hash).await?;
        let own = keep.filter(|_| caller.id == user.id);
        st.store.delete_user_tokens_except(user.id, own).await?;
        st.revocations.tokens_ended(name);
    }
    if let Some(a) = req.admin {
        st.store.set_role(name, if a { Role::Admin } else { Role::User }).await?;
    }
    if let Some(d) = req.disabled {
        if d {
            super::offboard::offboard(st, &user, req.keep_workloads.unwrap_or(false)).await?;
        } else {
            st.store.set_disabled(name, false).await?;
        }
        st.controller.kick();
    }
    if let Some(own) = quota {
        homes::set_quota(st, &user, own).await?;
    }
    Ok(homes::user_view(st, &st.store.get_user(name).await?).await)
}

/// Deletes account `name` for admin `caller`, and everything that was theirs: their workloads stopped
/// and deleted with their logs, their tokens, sessions and SSH keys removed, open connections closed,
/// their network and saved images removed, and their home archived (`archive_home`) or deleted. A new
/// account of the same name starts with nothing of the old one's.
pub async fn delete_user(st: &AppState, caller: &User, name: &str, archive_home: bool) -> Result<(), ServiceError> {
    super::require_admin(caller)?;
    let user = st.store.get_user(name).await?;
    if user.is_admin() && !user.disabled && enabled_admins(st).await? <= 1 {
        return Err(ServiceError::conflict(format!("{name} is the last enabled admin")));
    }
    if caller.id == user.id {
        return Err(ServiceError::conflict("you cannot delete your own account"));
    }
    // nothing of theirs starts from here on, and every open connection closes
    st.store.set_disabled(name, true).await?;
    st.store.delete_user_tokens(user.id).await?;
    st.revocations.revoke(name);
    let filter = WorkloadFilter { owner: Some(name.to_owned()), states: None };
    for w in st.store.list_workloads(&filter).await? {
        match st.controller.delete(&w.id).await {
            Ok(()) => {}
            Err(ControlError::NotFound(_) | ControlError::Store(gpuhub_store::StoreError::NotFound { .. })) => {}
            Err(e) => return Err(e.into()),
        }
    }
    // and, with their runs gone, their network (Docker has a few dozen address pools for all of them)
    let instance = super::images::installation(st).await?;
    let network = gpuhub_controller::spec::user_network(&instance, name);
    let labels = gpuhub_controller::spec::network_labels(&instance, name);
    match st.engine.remove_user_network(&network, &labels).await {
        Ok(()) => {}
        Err(e @ gpuhub_driver::EngineError::Unavailable(_)) => return Err(e.into()),
        Err(e) => tracing::warn!(%network, error = %e, "cannot remove a deleted user's network"),
    }
    homes::dispose(st, name, archive_home).await?;
    // their saved workspaces go with them
    for p in st.store.list_personal_images(name).await? {
        if let Err(e) = st.engine.remove_image(&p.reference).await {
            tracing::warn!(image = %p.reference, error = %e, "cannot remove a deleted user's image");
        }
        st.store.delete_personal_image(name, &p.name).await?;
    }
    st.store.delete_user(name).await?;
    Ok(())
}
