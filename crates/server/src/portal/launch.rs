//! Launch cards: the new-workload page opens with a card per catalog image ("JupyterLab", "VS Code in
//! the browser", "Terminal", …) and the Images page has the same button. One click submits a workspace
//! of that image with the default resources and no command, which stays up until it is stopped or
//! reclaimed as idle (`service::WORKSPACE_KEEP_ALIVE`), and goes to its page, where its apps open once
//! it runs. A card is there only while its image is in the catalog; the PyTorch image, too large to build
//! everywhere, has a card that says it is not installed and how an admin adds it, until it is.

use super::{Fields, Viewer, api_error_page, check_form, field};
use crate::error::ApiError;
use crate::service;
use crate::state::AppState;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use gpuhub_api::{CreateWorkloadRequest, ImageEntry, ResourceRequest};
use gpuhub_core::workload::WorkloadKind;
use maud::{Markup, html};
use std::collections::BTreeMap;

/// The form that starts a workspace of catalog (or saved) image `image` in one click.
pub fn launch_button(viewer: &Viewer, image: &str, label: &str) -> Markup {
    html! {
        form.inline.launch method="post" action="/new/launch" {
            input type="hidden" name="_csrf" value=(viewer.csrf);
            input type="hidden" name="image" value=(image);
            button type="submit" data-launch=(image) { (label) }
        }
    }
}

/// What a card says an image gives: its apps by name, else a terminal.
fn gives(e: &ImageEntry) -> String {
    if e.apps.is_empty() {
        return "a terminal in the browser and SSH".to_owned();
    }
    let apps: Vec<&str> = e.apps.iter().map(|a| a.name.as_str()).collect();
    format!("{} in the browser, a terminal and SSH", apps.join(", "))
}

/// The catalog name of the PyTorch image (`scripts/build-pytorch-image.sh` builds it; about 3 GiB, so
/// not every installation has it).
pub const PYTORCH: &str = "pytorch";

/// Whether the catalog has the PyTorch image: an entry of that name, or of an image built by the script.
fn has_pytorch(catalog: &[ImageEntry]) -> bool {
    catalog.iter().any(|e| e.name == PYTORCH || e.image.starts_with("gpuhub/pytorch:"))
}

/// The cards of the catalog, one per image, each a one-click workspace; while the catalog has no
/// PyTorch image, a "PyTorch job" card that cannot be started, saying how an admin adds it.
pub fn cards(viewer: &Viewer, catalog: &[ImageEntry]) -> Markup {
    html! {
        section.cards aria-labelledby="cards-title" {
            h2 #cards-title { "Start a workspace in one click" }
            ul.cards {
                @for e in catalog {
                    li.card data-image=(e.name) {
                        strong.card-title { @if e.description.is_empty() { (e.name) } @else { (e.description) } }
                        small { code { (e.name) } ": " (gives(e)) ". It runs until you stop it or it is reclaimed as idle." }
                        (launch_button(viewer, &e.name, "Start"))
                    }
                }
                @if !has_pytorch(catalog) {
                    li.card.absent data-image=(PYTORCH) aria-disabled="true" {
                        strong.card-title { "PyTorch job" }
                        small { "Not installed here: its image (PyTorch, NumPy and JupyterLab, about 3 GiB) is built on \
                                 the server. "
                            @if viewer.user.is_admin() { "Build it with " } @else { "An admin builds it with " }
                            code { "scripts/build-pytorch-image.sh" } " and adds it with "
                            code { "gpuhub images add pytorch gpuhub/pytorch:latest --description 'PyTorch job' --app 'lab:8888=jupyter lab …'" }
                            " (README: JupyterLab and the other images)." }
                        button type="button" disabled { "Not installed" }
                    }
                }
            }
        }
    }
}

/// `POST /new/launch` (`image`): a workspace of that image with the defaults; on to its page.
pub async fn launch(State(st): State<AppState>, viewer: Viewer, headers: HeaderMap, axum::Form(f): Fields) -> Response {
    if let Some(r) = check_form(&viewer, &headers, &f) {
        return r;
    }
    let image = field(&f, "image").unwrap_or_default().trim().to_owned();
    if image.is_empty() {
        return api_error_page(ApiError::unprocessable("invalid image: a launch names the image to start"));
    }
    let req = CreateWorkloadRequest {
        name: None,
        kind: WorkloadKind::Workspace,
        image,
        command: None,
        env: BTreeMap::new(),
        resources: ResourceRequest::default(),
        priority: None,
        priority_class: None,
        apps: Vec::new(),
        queue: None,
        constraint: None,
        runtime_limit: None,
        members: None,
        datasets: Vec::new(),
        teams: Vec::new(),
        service: None,
        disk: None,
    };
    match service::submit(&st, &viewer.user, &req).await {
        Ok(w) => Redirect::to(&format!("/workloads/{}", w.name)).into_response(),
        Err(e) => api_error_page(e.into()),
    }
}
