//! The HTTP API under `/api/v1`, and the OpenAPI document generated from these handlers.

pub(crate) mod account;
pub(crate) mod catalog;
pub(crate) mod datasets;
mod idle;
pub(crate) mod keys;
pub(crate) mod metrics;
mod paging;
pub(crate) mod personal;
pub(crate) mod problems;
pub(crate) mod queues;
pub(crate) mod reservations;
pub(crate) mod usage;
pub(crate) mod workloads;

use crate::state::AppState;
use axum::Router;
use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

#[derive(OpenApi)]
#[openapi(
    info(title = "gpuhub", description = "Share GPU servers among users, safely and fairly."),
    modifiers(&BearerAuth),
    security(("bearer" = []))
)]
struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The API routes and their OpenAPI document.
pub fn router() -> (Router<AppState>, utoipa::openapi::OpenApi) {
    let (router, doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(account::health))
        .routes(routes!(account::login))
        .routes(routes!(account::logout))
        .routes(routes!(account::me))
        .routes(routes!(account::list_tokens, account::create_token))
        .routes(routes!(account::delete_token))
        .routes(routes!(account::change_password))
        .routes(routes!(account::list_users, account::create_user))
        .routes(routes!(account::get_user, account::patch_user, account::delete_user))
        .routes(routes!(workloads::list_workloads, workloads::create_workload))
        .routes(routes!(workloads::get_workload, workloads::delete_workload, workloads::edit_workload))
        .routes(routes!(workloads::stop_workload))
        .routes(routes!(workloads::start_workload))
        .routes(routes!(workloads::workload_logs))
        .routes(routes!(keys::add_key, keys::list_keys))
        .routes(routes!(keys::delete_key))
        .routes(routes!(keys::key_challenge))
        .routes(routes!(keys::info))
        .routes(routes!(catalog::list_nodes))
        .routes(routes!(queues::list_queues, queues::create_queue))
        .routes(routes!(queues::patch_queue, queues::delete_queue))
        .routes(routes!(reservations::list_reservations, reservations::create_reservation))
        .routes(routes!(reservations::delete_reservation))
        .routes(routes!(catalog::list_images, catalog::create_image))
        .routes(routes!(catalog::delete_image))
        .routes(routes!(personal::save_workload))
        .routes(routes!(personal::list_mine))
        .routes(routes!(personal::delete_mine))
        .routes(routes!(datasets::list_datasets, datasets::create_dataset))
        .routes(routes!(datasets::delete_dataset))
        .routes(routes!(usage::usage))
        .routes(routes!(idle::keep_workload))
        .routes(routes!(idle::idle_report))
        .routes(routes!(metrics::workload_metrics))
        .routes(routes!(metrics::node_metrics))
        .routes(routes!(metrics::live_metrics))
        .split_for_parts();
    (router, problems::document(doc))
}

/// The OpenAPI document (for `gpuhub openapi` and tests).
pub fn openapi() -> utoipa::openapi::OpenApi {
    router().1
}
