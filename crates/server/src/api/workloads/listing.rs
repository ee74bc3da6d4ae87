//! The parts of the workloads API that keep lists and submissions bounded: the query of a page of
//! workloads and its opaque cursor, and the per-user limits on what a submission may hold.

use crate::auth::Caller;
use crate::error::ApiError;
use crate::service::listing::{PAGE_MAX_BYTES, decode_cursor, encode_cursor};
use axum::extract::rejection::QueryRejection;
use axum::http::HeaderValue;
use axum::response::Response;
use gpuhub_api::{NEXT_CURSOR_HEADER, PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX};
use gpuhub_core::workload::WorkloadState;
use gpuhub_store::{WorkloadCursor, WorkloadQuery};
use serde::Deserialize;
use utoipa::IntoParams;

/// Which workloads `GET /api/v1/workloads` lists, and which page of them.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Every user's workloads (admins only).
    #[serde(default)]
    all: bool,
    /// Only this user's workloads (admins; a user may name themselves).
    #[serde(default)]
    owner: Option<String>,
    /// Only workloads in these states, comma-separated (`queued,running`).
    #[serde(default)]
    state: Option<String>,
    /// Only `job`s or only `workspace`s.
    #[serde(default)]
    kind: Option<String>,
    /// Only workloads charged to this team queue (empty: the default queue).
    #[serde(default)]
    queue: Option<String>,
    /// Workloads per page, from 1 to 1000; default 100.
    #[serde(default)]
    #[param(value_type = Option<u32>)]
    limit: Option<String>,
    /// Where the page starts: the `X-Next-Cursor` of the previous page, with the same filters.
    #[serde(default)]
    cursor: Option<String>,
}

/// A query string that does not fit [`ListQuery`] (an unknown parameter…) is a problem naming it.
pub fn query_error(e: QueryRejection) -> ApiError {
    let text = e.body_text();
    let msg = text.strip_prefix("Failed to deserialize query string: ").unwrap_or(&text);
    ApiError::bad_request(format!("invalid query: {msg}"))
}

impl ListQuery {
    /// The store query for `caller`: their own workloads unless an admin asks for `all` or an `owner`.
    pub fn resolve(&self, caller: &Caller) -> Result<WorkloadQuery, ApiError> {
        let me = &caller.0.username;
        let owner = match (&self.owner, self.all) {
            (Some(o), _) if o == me => Some(o.clone()),
            (Some(o), _) => {
                caller.require_admin().map_err(|_| {
                    ApiError::forbidden(format!("invalid owner: only admins may list the workloads of {o:?}"))
                })?;
                Some(o.clone())
            }
            (None, true) => {
                caller.require_admin()?;
                None
            }
            (None, false) => Some(me.clone()),
        };
        let limit = match self.limit.as_deref() {
            None => PAGE_LIMIT_DEFAULT,
            Some(l) => l.trim().parse::<u32>().ok().filter(|n| (1..=PAGE_LIMIT_MAX).contains(n)).ok_or_else(|| {
                ApiError::bad_request(format!("invalid limit: {l:?} is not a number from 1 to {PAGE_LIMIT_MAX}"))
            })?,
        };
        let states = match self.state.as_deref() {
            None => None,
            Some(list) => Some(
                list.split(',')
                    .map(|s| s.trim().parse::<WorkloadState>())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| ApiError::bad_request(format!("invalid state: {e}")))?,
            ),
        };
        let kind = self
            .kind
            .as_deref()
            .map(str::parse)
            .transpose()
            .map_err(|e| ApiError::bad_request(format!("invalid kind: {e}")))?;
        let after = self.cursor.as_deref().map(decode_cursor).transpose()?;
        Ok(WorkloadQuery {
            owner,
            states,
            kind,
            queue: self.queue.clone(),
            after,
            limit,
            max_bytes: Some(PAGE_MAX_BYTES),
        })
    }
}

/// Points `resp` at the next page: `X-Next-Cursor` and a `Link` with `rel="next"` that repeats the
/// request's own query (`raw`) with the new cursor.
pub fn set_next(resp: &mut Response, raw: Option<&str>, next: &WorkloadCursor) {
    let cursor = encode_cursor(next);
    let mut pairs: Vec<&str> =
        raw.unwrap_or("").split('&').filter(|p| !p.is_empty() && !p.starts_with("cursor=")).collect();
    let cursor_pair = format!("cursor={cursor}");
    pairs.push(&cursor_pair);
    let link = format!("</api/v1/workloads?{}>; rel=\"next\"", pairs.join("&"));
    let headers = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&cursor) {
        headers.insert(NEXT_CURSOR_HEADER, v);
    }
    if let Ok(v) = HeaderValue::from_str(&link) {
        headers.insert(axum::http::header::LINK, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;

    #[test]
    fn cursors_round_trip_and_refuse_garbage() {
        let c = WorkloadCursor { created_at_ms: 1_741_964_966_123, id: "0b7c2d1e".into() };
        let s = encode_cursor(&c);
        assert!(s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'), "{s}");
        assert_eq!(decode_cursor(&s).unwrap(), c);
        let neg = WorkloadCursor { created_at_ms: -5, id: "x.y".into() };
        assert_eq!(decode_cursor(&encode_cursor(&neg)).unwrap(), neg);
        for bad in ["", "!!", "bm9kb3Q", &URL_SAFE_NO_PAD.encode("12."), &URL_SAFE_NO_PAD.encode("x.id")] {
            let e = ApiError::from(decode_cursor(bad).unwrap_err());
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{bad}");
            assert!(e.detail.starts_with("invalid cursor"), "{bad}: {}", e.detail);
        }
    }

    #[test]
    fn the_next_link_keeps_the_filters_and_replaces_the_cursor() {
        let next = WorkloadCursor { created_at_ms: 7, id: "a".into() };
        let mut resp = Response::new(axum::body::Body::empty());
        set_next(&mut resp, Some("state=queued,running&cursor=old&limit=5"), &next);
        let c = encode_cursor(&next);
        assert_eq!(resp.headers()[NEXT_CURSOR_HEADER], c.as_str());
        let link = format!("</api/v1/workloads?state=queued,running&limit=5&cursor={c}>; rel=\"next\"");
        assert_eq!(resp.headers()["link"], link.as_str());
        set_next(&mut resp, None, &next);
        assert_eq!(resp.headers()["link"], format!("</api/v1/workloads?cursor={c}>; rel=\"next\"").as_str());
    }
}
