//! What every portal page with forms shares: the notice at its top (what the last action did, or why it
//! failed), the redirect back to it that carries one, and how a limit reads.

use crate::error::ApiError;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;

/// `?done=` (what the last action did) and `?error=` (why it failed), shown once at the top.
#[derive(Debug, Default, Deserialize)]
pub struct Notice {
    done: Option<String>,
    error: Option<String>,
}

pub(super) fn notice(n: &Notice) -> Markup {
    html! {
        @if let Some(d) = &n.done { p.done role="status" { (d) } }
        @if let Some(e) = &n.error { p.error role="alert" { (e) } }
    }
}

/// Back to `page` saying what happened (or why not).
pub(super) fn back(page: &str, outcome: Result<String, ApiError>) -> Response {
    let (key, text) = match outcome {
        Ok(done) => ("done", done),
        Err(e) => ("error", e.detail),
    };
    let text: String = text.chars().take(300).collect();
    let q = crate::access::encode(&text).replace('/', "%2F");
    Redirect::to(&format!("{page}?{key}={q}")).into_response()
}

/// `2 GPUs, 16 CPUs, 64GiB` of what a limit names.
pub(super) fn limit(l: &gpuhub_api::LimitView) -> String {
    let mut parts = Vec::new();
    if let Some(g) = l.gpus {
        parts.push(format!("{g} GPUs"));
    }
    if let Some(c) = l.cpus {
        parts.push(format!("{c} CPUs"));
    }
    if let Some(m) = l.memory {
        parts.push(m.to_string());
    }
    if parts.is_empty() { "no limit".to_owned() } else { parts.join(", ") }
}
