//! The users' Images page: the catalog (what each image is for, the apps a workspace of it serves,
//! and a button that starts one), and the viewer's own saved images (size, where from, when) with a
//! delete button. Deleting is the API's own handler (`DELETE /api/v1/me/images/{name}`) with the viewer
//! as the caller: nobody deletes another's.

use super::notice::{Notice, back, notice};
use super::{Fields, Viewer, api_error_page, check_form, layout, only_navigation};
use crate::state::AppState;
use axum::extract::{Path, Query, Request, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use gpuhub_core::Bytes;
use maud::html;

/// `GET /images`: the catalog and the viewer's saved images.
pub async fn page(State(st): State<AppState>, viewer: Viewer, Query(n): Query<Notice>, req: Request) -> Response {
    if let Some(r) = only_navigation(&req) {
        return r;
    }
    let catalog = match st.store.list_images().await {
        Ok(c) => c,
        Err(e) => return api_error_page(e.into()),
    };
    let mine = match st.store.list_personal_images(&viewer.user.username).await {
        Ok(m) => m,
        Err(e) => return api_error_page(e.into()),
    };
    let body = html! {
        h1 { "Images" }
        (notice(&n))
        h2 { "The catalog" }
        @if catalog.is_empty() { p { "The catalog is empty: an admin adds images to it." } }
        ul.image-list { @for e in &catalog {
            li.image-entry data-image=(e.name) {
                div {
                    strong { (e.name) }
                    @if !e.description.is_empty() { " — " (e.description) }
                }
                div.ref { code { (e.image) } }
                @if e.apps.is_empty() {
                    div.apps { small { "No web apps: a terminal and SSH." } }
                } @else {
                    div.apps { "Apps: " @for a in &e.apps { span.badge { (a.name) } " " } }
                }
                (super::launch::launch_button(&viewer, &e.name, "Start a workspace"))
            }
        } }
        h2 { "Your saved images" }
        @if mine.is_empty() {
            p { "None yet. Save a running workspace of yours (its page, or " code { "gpuhub save NAME --as IMAGE" }
                ") to start new workspaces from it." }
        } @else {
            table.saved-images {
                thead { tr { th { "Name" } th { "Saved from" } th { "Size" } th { "Saved" } th {} } }
                tbody { @for p in &mine {
                    tr data-image=(p.name) {
                        td { (p.name) } td { (p.workload) } td { (Bytes(p.size_bytes)) }
                        td { (p.created_at.format("%Y-%m-%d %H:%M")) }
                        td {
                            (super::launch::launch_button(&viewer, &p.name, "Start"))
                            form.inline method="post" action={"/images/" (p.name) "/delete"} {
                                input type="hidden" name="_csrf" value=(viewer.csrf);
                                button.danger type="submit" { "Delete" }
                            }
                        }
                    }
                } }
            }
        }
    };
    layout(&st, &viewer, "Images", body).into_response()
}

/// `POST /images/{name}/delete`: deletes one of the viewer's saved images.
pub async fn delete(
    State(st): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
    headers: HeaderMap,
    axum::Form(f): Fields,
) -> Response {
    if let Some(r) = check_form(&viewer, &headers, &f) {
        return r;
    }
    let done = crate::service::images::delete_personal(&st, &viewer.user, &name).await;
    back("/images", done.map(|_| format!("image {name} deleted")).map_err(Into::into))
}
