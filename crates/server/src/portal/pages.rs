//! The portal's other pages: nodes (every GPU and who holds it), team queues and the viewer's account
//! (password, tokens and sessions, SSH keys). Every action
//! calls the API's own handler with the viewer as the caller, so that what is allowed and what is
//! checked is the API's, once.

use super::notice::{Notice, back, limit, notice};
use super::{Fields, Viewer, api_error_page, check_form, field, layout, only_navigation};
use crate::auth;
use crate::error::ApiError;
use crate::service;
use crate::state::AppState;
use axum::extract::{Path, Query, Request, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use gpuhub_api::{ChangePasswordRequest, CreateTokenRequest};
use maud::html;

/// `GET /nodes`: each node's CPUs and memory (free of total) and each GPU with whoever holds it, whole
/// or in shares.
pub async fn nodes(State(st): State<AppState>, viewer: Viewer, req: Request) -> Response {
    // each GPU a tile (`portal::nodes`), with this page's words on each sharing mode
    let views = service::catalog::node_views(&st).await.map_err(Into::into);
    super::nodes::page(st, viewer, req, views, sharing_help).await
}

/// What a GPU's sharing mode promises, for the Nodes page's tooltip.
fn sharing_help(mode: Option<gpuhub_core::node::GpuSharing>) -> &'static str {
    use gpuhub_core::node::GpuSharing;
    match mode {
        Some(GpuSharing::Mps) => {
            "MPS: gpuhub's MPS daemon caps each share's memory and compute; shares go to one user at a time"
        }
        Some(GpuSharing::Guard) => {
            "guard: any users share it; a share above its GPU memory grant is warned, then stopped"
        }
        Some(GpuSharing::Unenforced) | None => "none: shares are scheduled, nothing enforces their limits",
    }
}

/// `GET /queues`: guarantees, use, borrowing limits and what waits, per team queue.
pub async fn queue_list(State(st): State<AppState>, viewer: Viewer, Query(n): Query<Notice>, req: Request) -> Response {
    if let Some(r) = only_navigation(&req) {
        return r;
    }
    let views = match service::queues::views(&st, &viewer.user).await {
        Ok(v) => v,
        Err(e) => return api_error_page(e.into()),
    };
    // one page: an admin changes the queues and books reservations here too
    let forms = match viewer.user.is_admin() {
        true => match super::admin::queue_forms(&st, &viewer, &views).await {
            Ok(f) => Some(f),
            Err(r) => return r,
        },
        false => None,
    };
    let body = html! {
        h1 { "Queues" }
        (notice(&n))
        @if views.is_empty() { p { "No team queues: everything runs in the default queue." } } @else {
            table.queues {
                thead { tr { th { "Queue" } th { "Guaranteed GPUs" } th { "In use" } th { "May borrow up to" }
                    th { "Running" } th { "Waiting" } th { "Open to you" } } }
                tbody { @for q in &views {
                    tr data-queue=(q.name) {
                        td { (q.name) }
                        td { (q.guarantee.gpus) " GPUs, " (q.guarantee.cpus) " CPUs, " (q.guarantee.memory) }
                        td { (q.used.gpus) " GPUs, " (q.used.cpus) " CPUs, " (q.used.memory) }
                        td { @match &q.borrow_limit { Some(l) => (limit(l)), None => "no limit" } }
                        td { (q.running) }
                        td { (q.queued) }
                        td { @if q.open_to_you { "yes" } @else { "no" } }
                    }
                } }
            }
        }
        @if let Some(f) = forms { (f) }
    };
    layout(&st, &viewer, "Queues", body).into_response()
}

/// `GET /account`: change the password, the tokens and sessions (revoke), the SSH keys (remove; adding
/// one needs proof of its private half, which `gpuhub ssh-key add` gives).
pub async fn account_page(
    State(st): State<AppState>,
    viewer: Viewer,
    Query(n): Query<Notice>,
    req: Request,
) -> Response {
    if let Some(r) = only_navigation(&req) {
        return r;
    }
    let session = auth::session_cookie(&st, req.headers()).map(|t| auth::token_hash(&t));
    let tokens = match service::accounts::token_views(&st, &viewer.user, session.as_deref()).await {
        Ok(t) => t,
        Err(e) => return api_error_page(e.into()),
    };
    let challenge = match service::keys::new_challenge(&st, &viewer.user).await {
        Ok(c) => c,
        Err(e) => return api_error_page(e.into()),
    };
    let keys = match st.store.list_ssh_keys(viewer.user.id).await {
        Ok(k) => k,
        Err(e) => return api_error_page(e.into()),
    };
    let home = crate::service::homes::user_view(&st, &viewer.user).await.home;
    let body = html! {
        h1 { "Account" }
        (notice(&n))
        p { "You are " strong { (viewer.user.username) } " (UID " (viewer.user.uid) ")." }
        p.home { "Home (/home/" (viewer.user.username) "): " (gpuhub_api::HomeView::text(home.as_ref())) }
        h2 { "Password" }
        form.new method="post" action="/account/password" {
            input type="hidden" name="_csrf" value=(viewer.csrf);
            label { "Current password " input type="password" name="current_password" autocomplete="current-password"; }
            label { "New password " input type="password" name="new_password" autocomplete="new-password"; }
            button type="submit" { "Change password" }
            small { "Every other session and token of yours is ended; this one stays." }
        }
        h2 { "Tokens and sessions" }
        table.tokens {
            thead { tr { th { "Id" } th { "Kind" } th { "Created" } th { "Expires" } th {} } }
            tbody { @for t in &tokens {
                tr data-token=(t.id) {
                    td { code { (t.id) } } td { (t.kind) @if t.current { " (this one)" } }
                    td { (t.created_at.format("%Y-%m-%d %H:%M")) }
                    td { @if let Some(e) = t.expires_at { (e.format("%Y-%m-%d %H:%M")) } @else { "never" } }
                    td { form method="post" action={"/account/tokens/" (t.id) "/revoke"} {
                        input type="hidden" name="_csrf" value=(viewer.csrf);
                        button type="submit" { "Revoke" }
                    } }
                }
            } }
        }
        form.new method="post" action="/account/tokens" {
            input type="hidden" name="_csrf" value=(viewer.csrf);
            label { "New API token, valid for days " input name="days" value=(st.config.token_days) inputmode="numeric"; }
            button type="submit" { "Create token" }
        }
        h2 { "SSH keys" }
        @if keys.is_empty() { p { "None yet." } }
        ul.keys { @for k in &keys {
            li { code { (k.fingerprint) } " " (k.comment) " "
                form.inline method="post" action="/account/keys/remove" {
                    input type="hidden" name="_csrf" value=(viewer.csrf);
                    input type="hidden" name="fingerprint" value=(k.fingerprint);
                    button type="submit" { "Remove" }
                }
            }
        } }
        p { "Add a key with " code { "gpuhub ssh-key add ~/.ssh/id_ed25519.pub" }
            ", or here: the hub needs proof that you hold the private key, a signature of this account's \
            challenge that you make on your machine (the private key never leaves it):" }
        pre.copy #challenge-command { (sign_command(&challenge.message)) }
        p.hint { "The challenge serves once, until " (challenge.expires_at.format("%H:%M UTC")) "." }
        form.new method="post" action="/account/keys" {
            input type="hidden" name="_csrf" value=(viewer.csrf);
            input type="hidden" name="nonce" value=(challenge.nonce);
            label { "Public key (the line of ~/.ssh/id_ed25519.pub) " textarea name="key" rows="2" {} }
            label { "Signature (all of challenge.txt.sig) " textarea name="signature" rows="6" {} }
            button type="submit" { "Add key" }
        }
        @if let (Some(addr), Some(k)) = (st.ssh_addr, &st.ssh_host_key) {
            h3 { "The SSH gateway" }
            p { "Port " (addr.port()) ". Its host key, which ssh shows on your first login: "
                code.host-key { (k.fingerprint) } ". " code { "gpuhub ssh-config" } " writes the line for "
                code { "~/.ssh/known_hosts" } " too:" }
            pre.copy #host-key { (k.openssh) }
        }
    };
    layout(&st, &viewer, "Account", body).into_response()
}

/// `POST /account/password`: the API's password change, keeping this session.
pub async fn change_password(
    State(st): State<AppState>,
    viewer: Viewer,
    headers: HeaderMap,
    axum::Form(f): Fields,
) -> Response {
    if let Some(r) = check_form(&viewer, &headers, &f) {
        return r;
    }
    let req = ChangePasswordRequest {
        current_password: field(&f, "current_password").unwrap_or_default().to_owned(),
        new_password: field(&f, "new_password").unwrap_or_default().to_owned(),
    };
    // the session this page was sent with is the one to keep
    let keep = auth::session_cookie(&st, &headers).map(|t| auth::token_hash(&t));
    let done = service::accounts::change_password(&st, &viewer.user, keep.as_deref(), &req).await;
    let done = done.map(|_| "password changed; your other sessions and tokens are ended".to_owned());
    back("/account", done.map_err(Into::into))
}

/// `POST /account/tokens` (`days`): the API's token creation; the secret is shown on this page once.
pub async fn create_token(
    State(st): State<AppState>,
    viewer: Viewer,
    headers: HeaderMap,
    axum::Form(f): Fields,
) -> Response {
    if let Some(r) = check_form(&viewer, &headers, &f) {
        return r;
    }
    let days = match field(&f, "days").map(str::trim).filter(|d| !d.is_empty()).map(str::parse::<i64>) {
        None => None,
        Some(Ok(d)) => Some(d),
        Some(Err(_)) => return back("/account", Err(ApiError::unprocessable("invalid days: not a whole number"))),
    };
    let t = match service::accounts::create_token(&st, &viewer.user, &CreateTokenRequest { days }).await {
        Ok(t) => t,
        Err(e) => return back("/account", Err(e.into())),
    };
    let body = html! {
        h1 { "New API token" }
        p { "Copy it now: it is not shown again. It expires " (t.expires_at.format("%Y-%m-%d %H:%M UTC")) "." }
        pre.copy #token { (t.token) }
        p { "Use it as " code { "Authorization: Bearer …" } " or " code { "GPUHUB_TOKEN" } ". " a href="/account" { "Back to your account" } }
    };
    layout(&st, &viewer, "New API token", body).into_response()
}

/// `POST /account/tokens/{id}/revoke`.
pub async fn revoke_token(
    State(st): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
    headers: HeaderMap,
    axum::Form(f): Fields,
) -> Response {
    if let Some(r) = check_form(&viewer, &headers, &f) {
        return r;
    }
    let done = service::accounts::delete_token(&st, &viewer.user, &id).await;
    back("/account", done.map(|_| format!("token {id} revoked")).map_err(Into::into))
}

/// The shell lines that sign `challenge` with the usual private key (the challenge holds only a
/// fixed text, a user name, the hub's id, a hex nonce and a time: nothing to quote).
fn sign_command(challenge: &str) -> String {
    format!(
        "printf '{}' > challenge.txt\nssh-keygen -Y sign -n {} -f ~/.ssh/id_ed25519 challenge.txt",
        challenge.replace('\n', "\\n"),
        gpuhub_ssh::REGISTRATION_NAMESPACE
    )
}

/// `POST /account/keys` (`key`, `signature`, `nonce`): the API's key registration, with its proof.
pub async fn add_key(
    State(st): State<AppState>,
    viewer: Viewer,
    headers: HeaderMap,
    axum::Form(f): Fields,
) -> Response {
    if let Some(r) = check_form(&viewer, &headers, &f) {
        return r;
    }
    let req = service::keys::AddKeyRequest {
        key: field(&f, "key").unwrap_or_default().trim().to_owned(),
        signature: field(&f, "signature").map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned),
        nonce: field(&f, "nonce").map(str::trim).map(str::to_owned),
    };
    let done = service::keys::add(&st, &viewer.user, req).await;
    back("/account", done.map(|_| "key added".to_owned()).map_err(Into::into))
}

/// `POST /account/keys/remove` (`fingerprint`).
pub async fn remove_key(
    State(st): State<AppState>,
    viewer: Viewer,
    headers: HeaderMap,
    axum::Form(f): Fields,
) -> Response {
    if let Some(r) = check_form(&viewer, &headers, &f) {
        return r;
    }
    let fp = field(&f, "fingerprint").unwrap_or_default().to_owned();
    let done = service::keys::delete(&st, &viewer.user, &fp).await;
    back("/account", done.map(|_| format!("key {fp} removed")).map_err(Into::into))
}
