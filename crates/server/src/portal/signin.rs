//! Signing in through an OpenID provider in the browser: `/login/oidc` sends the browser to the
//! provider (authorization code with PKCE); `/login/oidc/callback` takes it back, makes or brings the
//! account in step and starts a session, then goes where the visitor was going.

use super::{api_error_page, page_error};
use crate::state::AppState;
use axum::extract::{Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

/// `?next=` of `/login/oidc`.
#[derive(Debug, Deserialize)]
pub struct Next {
    next: Option<String>,
}

/// Only a path of this site, else `/`: one leading `/` (never `//host` or `/\host`), and nothing a
/// browser drops or rewrites on the way (control characters, whitespace, backslashes, anything but
/// printable ASCII), neither as given nor percent-decoded once more. Always a valid `Location`.
fn local_path(next: Option<&str>) -> String {
    fn plain(s: &[u8]) -> bool {
        s.first() == Some(&b'/')
            && !matches!(s.get(1), Some(b'/' | b'\\'))
            && s.iter().all(|b| b.is_ascii_graphic() && *b != b'\\')
    }
    match next {
        Some(n) if plain(n.as_bytes()) && plain(&percent_decoded(n.as_bytes())) => n.to_owned(),
        _ => "/".to_owned(),
    }
}

/// `s` with each `%XX` replaced by its byte (a `%` not followed by two hex digits stays).
fn percent_decoded(s: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16);
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match (s[i], s.get(i + 1).copied().and_then(hex), s.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// `GET /login/oidc`: to the provider.
pub async fn begin(State(st): State<AppState>, Query(q): Query<Next>) -> Response {
    if !st.identities.oidc_enabled() {
        return page_error(StatusCode::NOT_FOUND, "no OpenID provider is configured here");
    }
    match st.identities.oidc_begin(&local_path(q.next.as_deref())).await {
        Ok(url) => Redirect::to(&url).into_response(),
        Err(e) => api_error_page(e),
    }
}

/// What the provider sends back.
#[derive(Debug, Deserialize)]
pub struct Callback {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

/// `GET /login/oidc/callback`: the provider's answer; a session and on to where the visitor was going.
pub async fn callback(State(st): State<AppState>, Query(cb): Query<Callback>) -> Response {
    if let Some(e) = cb.error {
        let why = cb.error_description.map(|d| format!("{e}: {d}")).unwrap_or(e);
        return page_error(StatusCode::FORBIDDEN, &format!("the OpenID provider refused the sign-in ({why})"));
    }
    let (Some(code), Some(state)) = (cb.code, cb.state) else {
        return page_error(StatusCode::BAD_REQUEST, "the provider's answer lacks code or state");
    };
    let done = async {
        let (outside, next) = st.identities.oidc_finish(&code, &state).await?;
        let user = crate::identity::account(&st, &outside).await?;
        if user.disabled {
            return Err(crate::error::ApiError::forbidden("account is disabled"));
        }
        // a browser sign-in: a session only, no API token
        let (_, cookie) = crate::api::account::new_session(&st, &user, false).await?;
        Ok((cookie, next))
    }
    .await;
    match done {
        Ok((cookie, next)) => {
            let mut resp = Redirect::to(&local_path(Some(&next))).into_response();
            match HeaderValue::from_str(&cookie) {
                Ok(v) => {
                    resp.headers_mut().insert(header::SET_COOKIE, v);
                    resp
                }
                Err(e) => api_error_page(crate::error::ApiError::internal(e)),
            }
        }
        Err(e) => api_error_page(e),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn next_stays_on_this_site() {
        use super::local_path;
        assert_eq!(local_path(Some("/workloads/nb")), "/workloads/nb");
        assert_eq!(local_path(Some("/workloads?cursor=a%3Db")), "/workloads?cursor=a%3Db");
        assert_eq!(local_path(Some("/")), "/");
        for bad in [
            None,
            Some(""),
            Some("https://evil.example"),
            Some("//evil.example"),
            Some("/\\evil"),
            Some("x"),
            Some("/\t/evil.example"),
            Some("/\n/evil.example"),
            Some("/ /evil.example"),
            Some("/%2F/evil.example"),
            Some("/%5Cevil"),
            Some("/%09/evil"),
            Some("/\u{e9}"),
            Some("/a\\b"),
        ] {
            assert_eq!(local_path(bad), "/", "{bad:?}");
        }
    }
}
