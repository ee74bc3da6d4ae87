//! Signing in through an OpenID provider in the browser: `/login/oidc` sends the browser to the
//! provider (authorization code with PKCE); `/login/oidc/callback` takes it back, makes or brings the
//! account in step and starts a session, then goes where the visitor was going. `POST /login` is the
//! login page's own form, which works without JavaScript (a session cookie, then `next`).

use super::{api_error_page, page_error};
use crate::state::AppState;
use axum::extract::{ConnectInfo, Form, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use std::net::SocketAddr;

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
        Err(e) => api_error_page(crate::service::ServiceError::from(e).into()),
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
        let (outside, next) =
            st.identities.oidc_finish(&code, &state).await.map_err(crate::service::ServiceError::from)?;
        let user = crate::service::identity::outside_account(&st, &outside).await?;
        if user.disabled {
            return Err(crate::error::ApiError::forbidden("account is disabled"));
        }
        // a browser sign-in: a session only, no API token
        let s = crate::service::accounts::new_session(&st, &user, false).await?;
        Ok((crate::auth::session_set_cookie(&st.config, &s.session, s.lasts), next))
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

/// The login form's fields (`next`: where the visitor was going).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoginForm {
    username: String,
    password: String,
    #[serde(default)]
    next: Option<String>,
}

/// `POST /login`: the login page's form sent by the browser itself (no JavaScript needed): checks the
/// password as the API's login does (the same limits), starts a session (no API token) and goes to
/// `next`, on this site only; a wrong password shows the page again with the reason. A form sent from
/// another site is refused (a login CSRF would sign the visitor in as someone else).
pub async fn login_form(
    State(st): State<AppState>,
    ConnectInfo(addr): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Form(f): Form<LoginForm>,
) -> Response {
    if super::from_another_site(&headers) {
        return page_error(StatusCode::FORBIDDEN, "log in from this site's own login page");
    }
    let next = local_path(f.next.as_deref());
    let client = crate::auth::client_ip(addr.ip(), &headers, &st.config.trusted_proxy_nets().unwrap_or_default());
    let done = async {
        let user = crate::service::accounts::authenticate(&st, client, &f.username, &f.password).await?;
        let s = crate::service::accounts::new_session(&st, &user, false).await?;
        Ok::<_, crate::error::ApiError>(crate::auth::session_set_cookie(&st.config, &s.session, s.lasts))
    }
    .await;
    match done {
        Ok(cookie) => match HeaderValue::from_str(&cookie) {
            Ok(v) => {
                let mut resp = Redirect::to(&next).into_response();
                resp.headers_mut().insert(header::SET_COOKIE, v);
                resp
            }
            Err(e) => api_error_page(crate::error::ApiError::internal(e)),
        },
        Err(e) if e.status.is_server_error() => api_error_page(e),
        Err(e) => {
            let mut resp = (e.status, crate::access::login_html(&st, Some(&next), Some(&e.detail))).into_response();
            if let Some(secs) = e.retry_after {
                resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
            }
            resp
        }
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
