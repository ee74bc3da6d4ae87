//! Cursor pages for the list endpoints besides workloads (which have their own, with filters): the
//! `?limit=&cursor=` query, an opaque cursor over each list's unique sort key, and the `X-Next-Cursor`
//! and `Link` headers of a page that has a next one. Lists the store can page by an index (users) pass
//! the decoded key to it; the small ones (one user's tokens and keys, the image catalog, reservations,
//! nodes) are paged here over their sorted rows.

use crate::error::ApiError;
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use gpuhub_api::{NEXT_CURSOR_HEADER, PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX};
use serde::{Deserialize, Serialize};
use utoipa::IntoParams;

/// Which page of a list: `?limit=&cursor=`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PageQuery {
    /// Items per page, from 1 to 1000; default 100.
    #[serde(default)]
    #[param(value_type = Option<u32>)]
    limit: Option<String>,
    /// Where the page starts: the `X-Next-Cursor` of the previous page.
    #[serde(default)]
    cursor: Option<String>,
}

/// A page request, checked: how many, and the sort key the page starts after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// Items per page.
    pub limit: u32,
    /// The sort key of the last item of the previous page.
    pub after: Option<String>,
}

impl PageQuery {
    /// Checks the query: a bad limit or a cursor this server did not make is a 400 naming it.
    pub fn page(&self) -> Result<Page, ApiError> {
        let limit = match self.limit.as_deref() {
            None => PAGE_LIMIT_DEFAULT,
            Some(l) => l.trim().parse::<u32>().ok().filter(|n| (1..=PAGE_LIMIT_MAX).contains(n)).ok_or_else(|| {
                ApiError::bad_request(format!("invalid limit: {l:?} is not a number from 1 to {PAGE_LIMIT_MAX}"))
            })?,
        };
        let after = self.cursor.as_deref().map(decode).transpose()?;
        Ok(Page { limit, after })
    }
}

/// The checked page of a `?limit=&cursor=` query; an unknown parameter is a 400 naming it.
pub fn from_query(
    q: Result<axum::extract::Query<PageQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Page, ApiError> {
    let axum::extract::Query(q) = q.map_err(|e| {
        let text = e.body_text();
        let msg = text.strip_prefix("Failed to deserialize query string: ").unwrap_or(&text).to_owned();
        ApiError::bad_request(format!("invalid query: {msg}"))
    })?;
    q.page()
}

/// A sort key of a time and a unique id that orders as the time does (earliest first).
pub fn time_key(at: chrono::DateTime<chrono::Utc>, id: &str) -> String {
    // offset so that times before 1970 order right too
    format!("{:020}.{id}", i128::from(at.timestamp_millis()) + (1i128 << 62))
}

/// The opaque form of a sort key.
pub fn encode(key: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("k.{key}"))
}

/// Reads a cursor made by [`encode`].
fn decode(s: &str) -> Result<String, ApiError> {
    let bad = || {
        ApiError::bad_request(
            "invalid cursor: not one this server made; pass the X-Next-Cursor of the previous page unchanged",
        )
    };
    let bytes = URL_SAFE_NO_PAD.decode(s.trim()).map_err(|_| bad())?;
    let text = String::from_utf8(bytes).map_err(|_| bad())?;
    let key = text.strip_prefix("k.").ok_or_else(bad)?;
    if key.len() > 512 {
        return Err(bad());
    }
    Ok(key.to_owned())
}

/// One page of `items`, ordered by the unique `key`: those after `page.after`, at most `page.limit`,
/// and the key to continue after when more follow.
pub fn slice<T>(mut items: Vec<T>, key: impl Fn(&T) -> String, page: &Page) -> (Vec<T>, Option<String>) {
    items.sort_by_key(&key);
    if let Some(after) = &page.after {
        items.retain(|i| key(i) > *after);
    }
    let limit = page.limit as usize;
    let next = (items.len() > limit).then(|| key(&items[limit - 1]));
    items.truncate(limit);
    (items, next)
}

/// The JSON array of a page, with `X-Next-Cursor` and a `Link rel="next"` to `path` when more follow.
pub fn respond<T: Serialize>(items: Vec<T>, next: Option<String>, path: &str, page: &Page) -> Response {
    let mut resp = axum::Json(items).into_response();
    if let Some(key) = next {
        let cursor = encode(&key);
        let link = format!("<{path}?limit={}&cursor={cursor}>; rel=\"next\"", page.limit);
        let headers = resp.headers_mut();
        if let Ok(v) = HeaderValue::from_str(&cursor) {
            headers.insert(NEXT_CURSOR_HEADER, v);
        }
        if let Ok(v) = HeaderValue::from_str(&link) {
            headers.insert(axum::http::header::LINK, v);
        }
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(limit: u32, after: Option<&str>) -> Page {
        Page { limit, after: after.map(str::to_owned) }
    }

    #[test]
    fn slices_walk_the_whole_list_once() {
        let items: Vec<String> = (0..25).rev().map(|i| format!("u{i:02}")).collect();
        let (mut seen, mut after) = (Vec::new(), None);
        loop {
            let (p, next) = slice(items.clone(), Clone::clone, &page(10, after.as_deref()));
            seen.extend(p);
            match next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        let mut expected = items.clone();
        expected.sort();
        assert_eq!(seen, expected);
        let (p, next) = slice(items, Clone::clone, &page(25, None));
        assert_eq!((p.len(), next), (25, None), "an exact fit has no next page");
    }

    #[test]
    fn cursors_round_trip_and_refuse_garbage() {
        let q = PageQuery { limit: Some("5".into()), cursor: Some(encode("alice/ü ß")) };
        assert_eq!(q.page().unwrap(), page(5, Some("alice/ü ß")));
        for bad in ["%%%", "bm90LWEta2V5", ""] {
            let q = PageQuery { limit: None, cursor: Some(bad.into()) };
            assert!(q.page().unwrap_err().detail.contains("invalid cursor"), "{bad}");
        }
        for bad in ["0", "1001", "-1", "ten"] {
            let q = PageQuery { limit: Some(bad.into()), cursor: None };
            assert!(q.page().unwrap_err().detail.contains("invalid limit"), "{bad}");
        }
        assert_eq!(PageQuery::default().page().unwrap(), page(PAGE_LIMIT_DEFAULT, None));
    }
}
