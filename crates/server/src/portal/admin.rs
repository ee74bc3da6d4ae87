//! The admins' pages: users (add, enable or disable, role, password), the image catalog (add with its
//! apps, remove), team queues (add, change guarantee, borrowing, weight and members, remove) and GPU
//! reservations (book, cancel). Anyone else gets 403. Every action is the API's own handler called with
//! the admin as the caller.

use super::notice::{Notice, back, limit, notice};
use super::{Fields, Viewer, api_error_page, check_form, field, layout, only_navigation, page_error};
use crate::error::ApiError;
use crate::service;
use crate::state::AppState;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use gpuhub_api::{CreateReservationRequest, CreateUserRequest, ImageEntry, LimitView, PatchUserRequest};
use gpuhub_core::queue::{CreateQueueRequest, LimitPatch, QueuePatch};
use maud::{Markup, html};

/// Admin pages answer 403 to anyone else.
fn admin_only(viewer: &Viewer) -> Option<Response> {
    (!viewer.user.is_admin()).then(|| page_error(StatusCode::FORBIDDEN, "only admins may open this page"))
}

/// Refuses an admin form from anyone but an admin, or that is not the admin's own ([`check_form`]).
fn admin_form(viewer: &Viewer, headers: &HeaderMap, fields: &[(String, String)]) -> Option<Response> {
    admin_only(viewer).or_else(|| check_form(viewer, headers, fields))
}

/// `GET /admin/users`: every account, with a form to add one, and per account: enable or disable,
/// make admin or not, reset the password.
pub async fn users(State(st): State<AppState>, viewer: Viewer, Query(n): Query<Notice>, req: Request) -> Response {
    if let Some(r) = admin_only(&viewer).or_else(|| only_navigation(&req)) {
        return r;
    }
    let users = match st.store.list_users().await {
        Ok(u) => u,
        Err(e) => return api_error_page(e.into()),
    };
    let mut homes = Vec::with_capacity(users.len());
    for u in &users {
        homes.push(crate::service::homes::user_view(&st, u).await.home);
    }
    let csrf = viewer.csrf.clone();
    let button = |action: &str, user: &str, label: &str| -> Markup {
        html! { form.inline method="post" action={"/admin/users/" (user) "/" (action)} {
            input type="hidden" name="_csrf" value=(csrf);
            button type="submit" { (label) }
        } }
    };
    let body = html! {
        h1 { "Users" }
        (notice(&n))
        form.new method="post" action="/admin/users" {
            input type="hidden" name="_csrf" value=(viewer.csrf);
            label { "User name " input name="username" autocomplete="off"; }
            label { "Password " input type="password" name="password" autocomplete="new-password"; }
            label { input type="checkbox" name="admin" value="true"; " admin" }
            button type="submit" { "Add user" }
        }
        table.users {
            thead { tr { th { "User" } th { "Role" } th { "UID" } th { "State" } th { "Home" } th {} } }
            tbody { @for (u, home) in users.iter().zip(&homes) {
                tr data-user=(u.username) {
                    td { (u.username) } td { @if u.is_admin() { "admin" } @else { "user" } } td { (u.uid) }
                    td { @if u.disabled { "disabled" } @else { "enabled" } }
                    td.home { (gpuhub_api::HomeView::text(home.as_ref())) }
                    td {
                        @if u.disabled { (button("enable", &u.username, "Enable")) }
                        @else { (button("disable", &u.username, "Disable")) }
                        @if u.is_admin() { (button("user", &u.username, "Make user")) }
                        @else { (button("admin", &u.username, "Make admin")) }
                        form.inline method="post" action={"/admin/users/" (u.username) "/password"} {
                            input type="hidden" name="_csrf" value=(viewer.csrf);
                            input type="password" name="password" placeholder="new password" autocomplete="new-password";
                            button type="submit" { "Reset password" }
                        }
                        form.inline method="post" action={"/admin/users/" (u.username) "/quota"} {
                            input type="hidden" name="_csrf" value=(viewer.csrf);
                            input name="home_quota" placeholder="20GiB, none, default" size="12"
                                value=[gpuhub_core::user::home_quota_text(u.home_quota)];
                            button type="submit" { "Set quota" }
                        }
                        " " a href={"/workloads?owner=" (u.username)} { "workloads" }
                    }
                }
            } }
        }
    };
    layout(&st, &viewer, "Users", body).into_response()
}

/// `POST /admin/users`: the API's account creation.
pub async fn add_user(
    State(st): State<AppState>,
    viewer: Viewer,
    headers: HeaderMap,
    axum::Form(f): Fields,
) -> Response {
    if let Some(r) = admin_form(&viewer, &headers, &f) {
        return r;
    }
    let req = CreateUserRequest {
        username: field(&f, "username").unwrap_or_default().trim().to_owned(),
        password: field(&f, "password").unwrap_or_default().to_owned(),
        admin: field(&f, "admin") == Some("true"),
    };
    let name = req.username.clone();
    let done = service::accounts::create_user(&st, &viewer.user, &req).await;
    back("/admin/users", done.map(|_| format!("user {name} added")).map_err(Into::into))
}

/// `POST /admin/users/{name}/{enable|disable|admin|user|password|quota}`: the API's account change.
pub async fn change_user(
    State(st): State<AppState>,
    viewer: Viewer,
    Path((name, what)): Path<(String, String)>,
    headers: HeaderMap,
    axum::Form(f): Fields,
) -> Response {
    if let Some(r) = admin_form(&viewer, &headers, &f) {
        return r;
    }
    let none = PatchUserRequest::default();
    let (req, said) = match what.as_str() {
        "enable" => (PatchUserRequest { disabled: Some(false), ..none }, "enabled"),
        "disable" => (PatchUserRequest { disabled: Some(true), ..none }, "disabled"),
        "admin" => (PatchUserRequest { admin: Some(true), ..none }, "made an admin"),
        "user" => (PatchUserRequest { admin: Some(false), ..none }, "made a user"),
        "password" => {
            let p = field(&f, "password").unwrap_or_default().to_owned();
            (PatchUserRequest { password: Some(p), ..none }, "given a new password")
        }
        "quota" => {
            let q = field(&f, "home_quota").unwrap_or_default().trim().to_owned();
            (PatchUserRequest { home_quota: Some(q), ..none }, "given a new home quota")
        }
        _ => return page_error(StatusCode::NOT_FOUND, "no such action"),
    };
    let done = service::accounts::patch_user(&st, &viewer.user, &name, None, &req).await;
    back("/admin/users", done.map(|_| format!("{name} {said}")).map_err(Into::into))
}

/// `GET /admin/images`: the catalog, with a form to add an image (with its apps).
pub async fn images(State(st): State<AppState>, viewer: Viewer, Query(n): Query<Notice>, req: Request) -> Response {
    if let Some(r) = admin_only(&viewer).or_else(|| only_navigation(&req)) {
        return r;
    }
    let list = match st.store.list_images().await {
        Ok(l) => l,
        Err(e) => return api_error_page(e.into()),
    };
    let body = html! {
        h1 { "Image catalog" }
        (notice(&n))
        table.images {
            thead { tr { th { "Name" } th { "Image" } th { "Description" } th { "Apps" } th {} } }
            tbody { @for e in &list {
                tr data-image=(e.name) {
                    td { (e.name) } td.image { (e.image) } td { (e.description) }
                    td { @for a in &e.apps { code { (a.name) ":" (a.port) } " " } }
                    td { form.inline method="post" action={"/admin/images/" (e.name) "/remove"} {
                        input type="hidden" name="_csrf" value=(viewer.csrf);
                        button type="submit" { "Remove" }
                    } }
                }
            } }
        }
        h2 { "Add an image" }
        form.new method="post" action="/admin/images" {
            input type="hidden" name="_csrf" value=(viewer.csrf);
            label { "Name (what users pick) " input name="name"; }
            label { "Image reference (the engine must have it) " input name="image" placeholder="gpuhub/jupyter:latest"; }
            label { "Description " input name="description"; }
            label { "Apps (one name:port=command a line; {base_url} and {port} are filled in) " textarea name="apps" rows="3" {} }
            button type="submit" { "Add image" }
        }
    };
    layout(&st, &viewer, "Image catalog", body).into_response()
}

/// `POST /admin/images`: the API's catalog entry.
pub async fn add_image(
    State(st): State<AppState>,
    viewer: Viewer,
    headers: HeaderMap,
    axum::Form(f): Fields,
) -> Response {
    if let Some(r) = admin_form(&viewer, &headers, &f) {
        return r;
    }
    let mut apps = Vec::new();
    for line in field(&f, "apps").unwrap_or_default().lines().map(str::trim).filter(|l| !l.is_empty()) {
        match gpuhub_core::parse::catalog_app(line) {
            Ok(a) => apps.push(a),
            Err(e) => return back("/admin/images", Err(ApiError::unprocessable(format!("invalid apps: {e}")))),
        }
    }
    let entry = ImageEntry {
        name: field(&f, "name").unwrap_or_default().trim().to_owned(),
        image: field(&f, "image").unwrap_or_default().trim().to_owned(),
        description: field(&f, "description").unwrap_or_default().trim().to_owned(),
        apps,
    };
    let name = entry.name.clone();
    let done = service::catalog::create_image(&st, &viewer.user, entry).await;
    back("/admin/images", done.map(|_| format!("image {name} added")).map_err(Into::into))
}

/// `POST /admin/images/{name}/remove`: the API's catalog removal.
pub async fn remove_image(
    State(st): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
    headers: HeaderMap,
    axum::Form(f): Fields,
) -> Response {
    if let Some(r) = admin_form(&viewer, &headers, &f) {
        return r;
    }
    let done = service::catalog::delete_image(&st, &viewer.user, &name).await;
    back("/admin/images", done.map(|_| format!("image {name} removed")).map_err(Into::into))
}

/// A limit from the form's `<prefix>_gpus`, `<prefix>_cpus`, `<prefix>_memory` (empty: not limited).
fn limit_fields(f: &[(String, String)], prefix: &str) -> Result<Option<LimitView>, ApiError> {
    let text = |k: &str| field(f, &format!("{prefix}_{k}")).map(str::trim).filter(|v| !v.is_empty());
    let number = |k: &str| -> Result<Option<f64>, ApiError> {
        text(k)
            .map(|v| {
                v.parse::<f64>()
                    .map_err(|_| ApiError::unprocessable(format!("invalid {prefix}.{k}: {v:?} is not a number")))
            })
            .transpose()
    };
    let memory = text("memory")
        .map(|v| {
            gpuhub_core::Bytes::parse(v).map_err(|e| ApiError::unprocessable(format!("invalid {prefix}.memory: {e}")))
        })
        .transpose()?;
    let l = LimitView { gpus: number("gpus")?, cpus: number("cpus")?, memory };
    Ok((l.gpus.is_some() || l.cpus.is_some() || l.memory.is_some()).then_some(l))
}

/// The form's `members` (names separated by commas or blanks; empty: everyone).
fn members_field(f: &[(String, String)]) -> Option<Vec<String>> {
    let m: Vec<String> = field(f, "members")
        .unwrap_or_default()
        .split([',', ' ', '\n'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    (!m.is_empty()).then_some(m)
}

/// The form's `team_gid` (empty: no team folder).
fn team_gid_field(f: &[(String, String)]) -> Result<Option<u32>, ApiError> {
    match field(f, "team_gid").map(str::trim).filter(|g| !g.is_empty()) {
        None => Ok(None),
        Some(g) => g
            .parse()
            .map(Some)
            .map_err(|_| ApiError::unprocessable(format!("invalid team_gid: {g:?} is not a group id")).at("team_gid")),
    }
}

/// The inputs of a limit, filled with `l`.
fn limit_inputs(prefix: &str, l: Option<&LimitView>) -> Markup {
    let v = |x: Option<String>| x.unwrap_or_default();
    html! {
        input name={(prefix) "_gpus"} size="4" placeholder="GPUs" value=(v(l.and_then(|l| l.gpus).map(|g| g.to_string())));
        input name={(prefix) "_cpus"} size="4" placeholder="CPUs" value=(v(l.and_then(|l| l.cpus).map(|c| c.to_string())));
        input name={(prefix) "_memory"} size="7" placeholder="memory" value=(v(l.and_then(|l| l.memory).map(|m| m.to_string())));
    }
}

/// `GET /admin/queues`: the Queues page (`/queues`), which shows an admin the forms too (the newcomer
/// found two pages, "Queues" and "Admin queues"); its notice goes with it.
pub async fn queue_admin(viewer: Viewer, req: Request) -> Response {
    if let Some(r) = admin_only(&viewer) {
        return r;
    }
    let to = match req.uri().query() {
        Some(q) => format!("/queues?{q}"),
        None => "/queues".to_owned(),
    };
    axum::response::Redirect::to(&to).into_response()
}

/// What the Queues page adds for an admin: every team queue with its settings to change, a form to add
/// one, and the GPU reservations (book one, cancel).
pub(super) async fn queue_forms(
    st: &AppState,
    viewer: &Viewer,
    views: &[gpuhub_api::QueueView],
) -> Result<Markup, Response> {
    let booked = match service::reservations::current(st, st.clock.now()).await {
        Ok(r) => r,
        Err(e) => return Err(api_error_page(e.into())),
    };
    let csrf = viewer.csrf.clone();
    Ok(html! {
        h2 { "Change the queues" }
        @for q in views {
            form.new.queue method="post" action={"/admin/queues/" (q.name)} data-queue=(q.name) {
                h2 { (q.name) " " small { (q.running) " running, " (q.queued) " waiting; holds " (q.used.gpus) " GPUs" } }
                input type="hidden" name="_csrf" value=(csrf);
                label { "Guarantee " span { (limit_inputs("guarantee", Some(&LimitView { gpus: Some(q.guarantee.gpus), cpus: Some(q.guarantee.cpus), memory: Some(q.guarantee.memory) }))) } }
                label { "May borrow up to (" (q.borrow_limit.as_ref().map_or("no limit".to_owned(), limit)) ") " span { (limit_inputs("borrow", q.borrow_limit.as_ref())) } }
                label { "Weight " input name="weight" value=(q.weight); }
                label { "Members (empty: everyone) " input name="members" value=(q.members.clone().unwrap_or_default().join(", ")); }
                label { "Team folder group (GID; empty: none) " input name="team_gid" inputmode="numeric" value=[q.team_gid]; }
                button type="submit" { "Save" }
            }
            form.inline method="post" action={"/admin/queues/" (q.name) "/remove"} {
                input type="hidden" name="_csrf" value=(csrf);
                button.danger type="submit" { "Remove " (q.name) }
            }
        }
        h2 { "Add a queue" }
        form.new method="post" action="/admin/queues" {
            input type="hidden" name="_csrf" value=(csrf);
            label { "Name " input name="name"; }
            label { "Guarantee " span { (limit_inputs("guarantee", None)) } }
            label { "Members (empty: everyone) " input name="members"; }
            label { "Team folder group (GID; empty: none) " input name="team_gid" inputmode="numeric"; }
            button type="submit" { "Add queue" }
        }
        h2 { "Reservations" }
        table.reservations {
            thead { tr { th { "Id" } th { "Queue" } th { "GPUs" } th { "From" } th { "To" } th {} } }
            tbody { @for r in &booked {
                tr data-reservation=(r.id) {
                    td { (r.id) } td { (r.queue) } td { (r.gpus) @if let Some(m) = &r.model { " " (m) } }
                    td { (r.start.format("%Y-%m-%d %H:%M UTC")) } td { (r.end.format("%Y-%m-%d %H:%M UTC")) }
                    td { form.inline method="post" action={"/admin/reservations/" (r.id) "/cancel"} {
                        input type="hidden" name="_csrf" value=(csrf);
                        button type="submit" { "Cancel" }
                    } }
                }
            } }
        }
        form.new method="post" action="/admin/reservations" {
            input type="hidden" name="_csrf" value=(csrf);
            label { "Queue " input name="queue"; }
            label { "GPUs " input name="gpus" inputmode="numeric"; }
            label { "GPU model (optional) " input name="model"; }
            label { "From (UTC, 2030-01-01T09:00:00Z) " input name="start"; }
            label { "To " input name="end"; }
            button type="submit" { "Book" }
        }
    })
}

/// `POST /admin/queues`: the API's queue creation.
pub async fn add_queue(
    State(st): State<AppState>,
    viewer: Viewer,
    headers: HeaderMap,
    axum::Form(f): Fields,
) -> Response {
    if let Some(r) = admin_form(&viewer, &headers, &f) {
        return r;
    }
    let guarantee = match limit_fields(&f, "guarantee") {
        Ok(g) => g,
        Err(e) => return back("/queues", Err(e)),
    };
    let name = field(&f, "name").unwrap_or_default().trim().to_owned();
    let team_gid = match team_gid_field(&f) {
        Ok(g) => g,
        Err(e) => return back("/queues", Err(e)),
    };
    let req = CreateQueueRequest {
        name: name.clone(),
        guarantee,
        borrow_limit: None,
        user_limit: None,
        weight: None,
        members: members_field(&f),
        priority_classes: None,
        team_gid,
        max_runtime: None,
        max_disk: None,
    };
    let done = service::queues::create(&st, &viewer.user, &req).await;
    back("/queues", done.map(|_| format!("queue {name} added")).map_err(Into::into))
}

/// `POST /admin/queues/{name}`: the API's queue change (guarantee, borrowing limit, weight, members).
pub async fn change_queue(
    State(st): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
    headers: HeaderMap,
    axum::Form(f): Fields,
) -> Response {
    if let Some(r) = admin_form(&viewer, &headers, &f) {
        return r;
    }
    let patch_of = |l: Option<LimitView>| {
        Some(l.map(|l| LimitPatch { gpus: Some(l.gpus), cpus: Some(l.cpus), memory: Some(l.memory) }))
    };
    let (guarantee, borrow) = match (limit_fields(&f, "guarantee"), limit_fields(&f, "borrow")) {
        (Ok(g), Ok(b)) => (g, b),
        (Err(e), _) | (_, Err(e)) => return back("/queues", Err(e)),
    };
    let weight = match field(&f, "weight").map(str::trim).filter(|w| !w.is_empty()).map(str::parse::<f64>) {
        None => Some(None),
        Some(Ok(w)) => Some(Some(w)),
        Some(Err(_)) => return back("/queues", Err(ApiError::unprocessable("invalid weight: not a number"))),
    };
    let team_gid = match team_gid_field(&f) {
        Ok(g) => Some(g),
        Err(e) => return back("/queues", Err(e)),
    };
    let patch = QueuePatch {
        guarantee: patch_of(guarantee),
        borrow_limit: patch_of(borrow),
        weight,
        members: Some(members_field(&f)),
        team_gid,
        ..Default::default()
    };
    let done = service::queues::patch(&st, &viewer.user, &name, &patch).await;
    back("/queues", done.map(|_| format!("queue {name} saved")).map_err(Into::into))
}

/// `POST /admin/queues/{name}/remove`: the API's queue removal.
pub async fn remove_queue(
    State(st): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
    headers: HeaderMap,
    axum::Form(f): Fields,
) -> Response {
    if let Some(r) = admin_form(&viewer, &headers, &f) {
        return r;
    }
    let done = service::queues::delete(&st, &viewer.user, &name).await;
    back("/queues", done.map(|_| format!("queue {name} removed")).map_err(Into::into))
}

/// `POST /admin/reservations`: the API's booking.
pub async fn add_reservation(
    State(st): State<AppState>,
    viewer: Viewer,
    headers: HeaderMap,
    axum::Form(f): Fields,
) -> Response {
    if let Some(r) = admin_form(&viewer, &headers, &f) {
        return r;
    }
    let text = |k: &str| field(&f, k).unwrap_or_default().trim().to_owned();
    let time = |k: &str| {
        text(k)
            .parse::<chrono::DateTime<chrono::Utc>>()
            .map_err(|e| ApiError::unprocessable(format!("invalid {k}: {e}")))
    };
    let req = match (text("gpus").parse::<u32>(), time("start"), time("end")) {
        (Ok(gpus), Ok(start), Ok(end)) => CreateReservationRequest {
            id: None,
            queue: text("queue"),
            gpus,
            model: Some(text("model")).filter(|m| !m.is_empty()),
            start,
            end,
        },
        (Err(_), _, _) => {
            return back("/queues", Err(ApiError::unprocessable("invalid gpus: not a whole number")));
        }
        (_, Err(e), _) | (_, _, Err(e)) => return back("/queues", Err(e)),
    };
    let done = service::reservations::create(&st, &viewer.user, req).await;
    back("/queues", done.map(|r| format!("reservation {} booked", r.id)).map_err(Into::into))
}

/// `POST /admin/reservations/{id}/cancel`: the API's cancellation.
pub async fn cancel_reservation(
    State(st): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
    headers: HeaderMap,
    axum::Form(f): Fields,
) -> Response {
    if let Some(r) = admin_form(&viewer, &headers, &f) {
        return r;
    }
    let done = service::reservations::delete(&st, &viewer.user, &id).await;
    back("/queues", done.map(|_| format!("reservation {id} cancelled")).map_err(Into::into))
}
