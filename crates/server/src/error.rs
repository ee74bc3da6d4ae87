//! API errors: every failure leaves as an RFC 9457 `application/problem+json` document.

use crate::service::{Kind, ServiceError};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use gpuhub_api::{FieldProblem, Problem};

/// The `Retry-After` (seconds) of a 503 answered while the database is unavailable.
pub const DATABASE_RETRY_AFTER_SECS: u64 = crate::service::RETRY_AFTER.as_secs();

/// An error answered to an HTTP client.
#[derive(Debug, thiserror::Error)]
#[error("{status}: {detail}")]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// What exactly is wrong, for a person.
    pub detail: String,
    /// Seconds to wait before retrying (429, 503).
    pub retry_after: Option<u64>,
    /// The request field at fault, where one is (shown as the problem's `field`).
    pub field: Option<String>,
    /// Every problem of the request with its field, where there were several (the problem's `errors`;
    /// empty: the one `field` and `detail`, if a field is named).
    pub errors: Vec<FieldProblem>,
}

impl ApiError {
    /// An error with this status and detail.
    pub fn new(status: StatusCode, detail: impl Into<String>) -> Self {
        Self { status, detail: detail.into(), retry_after: None, field: None, errors: Vec::new() }
    }
    /// The same error, naming the request field at fault.
    pub fn at(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }
    /// 400.
    pub fn bad_request(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, detail)
    }
    /// 401.
    pub fn unauthorized(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, detail)
    }
    /// 403.
    pub fn forbidden(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, detail)
    }
    /// 404.
    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, detail)
    }
    /// 409.
    pub fn conflict(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, detail)
    }
    /// 422.
    pub fn unprocessable(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, detail)
    }
    /// 507: no space left where gpuhub keeps `what`; nothing was written.
    pub fn unavailable(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, detail)
    }

    pub fn insufficient_storage(what: impl std::fmt::Display) -> Self {
        Self::new(StatusCode::INSUFFICIENT_STORAGE, format!("insufficient storage: {what}; free space and retry"))
    }
    /// 500: the detail is logged, the client sees a generic one.
    pub fn internal(err: impl std::fmt::Display) -> Self {
        tracing::error!(error = %err, "internal error");
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal error; see the server log")
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // one problem about a field is listed in `errors` too: a client reads that list alone
        let errors = match (self.errors, &self.field) {
            (e, Some(field)) if e.is_empty() => {
                vec![FieldProblem { field: field.clone(), detail: self.detail.clone() }]
            }
            (e, _) => e,
        };
        let problem = Problem {
            kind: "about:blank".into(),
            title: self.status.canonical_reason().unwrap_or("error").to_owned(),
            status: self.status.as_u16(),
            detail: self.detail,
            field: self.field,
            errors,
        };
        let mut resp = (self.status, axum::Json(problem)).into_response();
        resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        if let Some(secs) = self.retry_after {
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        resp
    }
}

/// Turns error responses made outside the handlers (405 from the router, 413 from a body limit…) into
/// problem documents, so that every error an API client sees has the same shape; HTML pages (the
/// portal's, an app's) stay pages.
pub async fn problem_for_bare_errors(resp: Response) -> Response {
    let status = resp.status();
    let is_problem =
        resp.headers().get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/problem+json"));
    // pages for people (the portal's error pages, an app's own) are left as they are
    let is_page = resp.headers().get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"text/html"));
    if !(status.is_client_error() || status.is_server_error()) || is_problem || is_page {
        return resp;
    }
    let allow = resp.headers().get(header::ALLOW).cloned();
    let detail = match status {
        StatusCode::METHOD_NOT_ALLOWED => format!(
            "method not allowed here{}",
            allow.as_ref().and_then(|a| a.to_str().ok()).map(|a| format!("; allowed: {a}")).unwrap_or_default()
        ),
        s => s.canonical_reason().unwrap_or("error").to_lowercase(),
    };
    let mut out = ApiError::new(status, detail).into_response();
    if let Some(a) = allow {
        out.headers_mut().insert(header::ALLOW, a);
    }
    out
}

/// Names the data directory in every 507 when the database is the SQLite file in it, so that the
/// person reading the error knows which disk to free.
pub async fn name_full_data_dir(
    axum::extract::State(state): axum::extract::State<crate::state::AppState>,
    resp: Response,
) -> Response {
    if resp.status() != StatusCode::INSUFFICIENT_STORAGE || state.store.backend() != gpuhub_store::Backend::Sqlite {
        return resp;
    }
    ApiError::insufficient_storage(format!("no space left in the data directory {}", state.data_dir.display()))
        .into_response()
}

/// The errors of the layers below answer as the service layer sorts them ([`ServiceError`]).
macro_rules! through_service {
    ($($t:ty),*) => {$(
        impl From<$t> for ApiError {
            fn from(e: $t) -> Self {
                ServiceError::from(e).into()
            }
        }
    )*};
}
through_service!(
    gpuhub_core::CoreError,
    gpuhub_store::StoreError,
    gpuhub_driver::EngineError,
    gpuhub_controller::ControlError
);

/// A service error as an HTTP answer: its kind picks the status.
impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        let status = match e.kind {
            Kind::Unauthenticated => StatusCode::UNAUTHORIZED,
            Kind::NotFound => StatusCode::NOT_FOUND,
            Kind::Forbidden => StatusCode::FORBIDDEN,
            Kind::Malformed => StatusCode::BAD_REQUEST,
            Kind::Invalid => StatusCode::UNPROCESSABLE_ENTITY,
            Kind::Conflict => StatusCode::CONFLICT,
            Kind::TooMany => StatusCode::TOO_MANY_REQUESTS,
            Kind::NotRunning | Kind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Kind::Upstream => StatusCode::BAD_GATEWAY,
            Kind::StorageFull => StatusCode::INSUFFICIENT_STORAGE,
            // logged where it was made ([`ServiceError::internal`])
            Kind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Self {
            field: e.field,
            errors: e.errors,
            retry_after: e.retry_after.map(|d| d.as_secs()),
            ..Self::new(status, e.detail)
        }
    }
}

/// A JSON body extractor whose rejections are problem documents naming the field at fault.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiJson<T>(pub T);

impl<T, S> axum::extract::FromRequest<S> for ApiJson<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        use axum::extract::rejection::JsonRejection;
        if !json_content_type(req.headers()) {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "expected a body with content-type application/json",
            ));
        }
        let bytes = match bytes::Bytes::from_request(req, state).await {
            Ok(b) => b,
            // the rejection's own status: a body over the limit is 413, not 400
            Err(e) => return Err(ApiError::new(e.status(), e.body_text())),
        };
        // every request body is an object: serde would also read a struct from a positional array
        if bytes.iter().find(|b| !b.is_ascii_whitespace()).is_some_and(|&b| b == b'[') {
            return Err(ApiError::unprocessable("invalid request body: expected a JSON object, not an array"));
        }
        match axum::Json::<T>::from_bytes(&bytes) {
            Ok(axum::Json(v)) => Ok(Self(v)),
            Err(JsonRejection::JsonDataError(e)) => Err(ApiError::unprocessable(body_error(&e.body_text()))),
            Err(JsonRejection::JsonSyntaxError(e)) => Err(ApiError::bad_request(body_error(&e.body_text()))),
            Err(JsonRejection::MissingJsonContentType(_)) => Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "expected a body with content-type application/json",
            )),
            // the rejection's own status: a body over the limit is 413, not 400
            Err(e) => Err(ApiError::new(e.status(), e.body_text())),
        }
    }
}

/// Whether the request says its body is JSON (`application/json`, or a `+json` type).
fn json_content_type(headers: &axum::http::HeaderMap) -> bool {
    let Some(ct) = headers.get(axum::http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = ct.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// axum's text with serde's path (`resources.cpus: invalid type…`), which names the field.
fn body_error(text: &str) -> String {
    let msg = text
        .strip_prefix("Failed to deserialize the JSON body into the target type: ")
        .or_else(|| text.strip_prefix("Failed to parse the request body as JSON: "))
        .unwrap_or(text);
    format!("invalid request body: {msg}")
}

/// A query-string extractor whose rejections are 400 problem documents naming the parameter at fault
/// (`invalid query: unknown field `bogus`…`), not axum's bare text.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiQuery<T>(pub T);

impl<T, S> axum::extract::FromRequestParts<S> for ApiQuery<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(Self(v)),
            Err(e) => Err(query_error(&e.body_text())),
        }
    }
}

/// A 400 naming what is wrong with a query string.
pub fn query_error(text: &str) -> ApiError {
    let msg = text.strip_prefix("Failed to deserialize query string: ").unwrap_or(text);
    ApiError::bad_request(format!("invalid query: {msg}"))
}

impl<T: serde::Serialize> IntoResponse for ApiJson<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

/// An error as a page (for browsers), with the status.
pub fn page_error(status: StatusCode, detail: &str) -> Response {
    let body = maud::html! {
        (maud::DOCTYPE)
        html lang="en" {
            head { meta charset="utf-8"; title { (status.as_u16()) " — gpuhub" } link rel="stylesheet" href="/static/portal.css";
                link rel="icon" href="/static/favicon.svg" type="image/svg+xml"; }
            body { main {
                h1 { (status.as_u16()) " " (status.canonical_reason().unwrap_or("error")) }
                p.error { (detail) }
                p { a href="/workloads" { "Back to your workloads" } }
            } }
        }
    };
    (status, body).into_response()
}
