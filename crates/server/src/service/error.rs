//! The service layer's errors: what went wrong in the domain's terms (not found, forbidden, invalid,
//! in conflict, unavailable…). Each front end maps a [`Kind`] to its own form: the API to a problem
//! document (`crate::error`), the portal to a page or a message beside a field, the SSH gateway to a
//! line of text. The errors of the layers below (store, engine, controller, core rules) are sorted
//! into kinds here, once.

use gpuhub_api::FieldProblem;
use std::time::Duration;

/// How long a client should wait before retrying when the database or the engine is unavailable.
pub const RETRY_AFTER: Duration = Duration::from_secs(5);

/// What kind of failure a [`ServiceError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The caller is not who they say (a wrong password, an unknown or expired token).
    Unauthenticated,
    /// Nothing the caller may see by that name.
    NotFound,
    /// The caller may see it but not do this.
    Forbidden,
    /// The request cannot be read (a cursor this server did not make, a number that is none).
    Malformed,
    /// The request's content is wrong (a field out of range, an unknown queue).
    Invalid,
    /// The object's state does not allow it now.
    Conflict,
    /// A per-user limit on counts is reached.
    TooMany,
    /// The object exists but is not usable now (a stopped workspace): try again once it runs.
    NotRunning,
    /// Something the service depends on is down for now.
    Unavailable,
    /// A dependency failed the request.
    Upstream,
    /// No room left to store it.
    StorageFull,
    /// A bug or an unexpected failure (logged where it happened; the detail says only that).
    Internal,
}

/// Why the service could not do what was asked, for a person.
#[derive(Debug, thiserror::Error)]
#[error("{detail}")]
pub struct ServiceError {
    /// What kind of failure.
    pub kind: Kind,
    /// What exactly is wrong.
    pub detail: String,
    /// The request field at fault, where one is (`resources.gpus`): forms show the error beside it.
    pub field: Option<String>,
    /// How long to wait before trying again, where waiting helps (the database is busy).
    pub retry_after: Option<Duration>,
    /// Every problem of the request, each with its field, where a check found several (a submission
    /// with a bad name and too little memory); `detail` and `field` are the first's. Empty otherwise.
    pub errors: Vec<FieldProblem>,
}

impl ServiceError {
    /// An error of `kind`.
    pub fn new(kind: Kind, detail: impl Into<String>) -> Self {
        Self { kind, detail: detail.into(), field: None, retry_after: None, errors: Vec::new() }
    }
    /// One error for several problems of a request ([`Kind::Invalid`] ones, in the order found): the
    /// first's kind, detail and field, and all of them in `errors`. `None` when there are none.
    pub fn all(problems: Vec<ServiceError>) -> Option<Self> {
        let errors = problems
            .iter()
            .map(|p| FieldProblem { field: p.field.clone().unwrap_or_default(), detail: p.detail.clone() })
            .collect();
        let first = problems.into_iter().next()?;
        Some(Self { errors, ..first })
    }
    /// [`Kind::Invalid`], naming the request field at fault.
    pub fn invalid_at(field: &str, detail: impl Into<String>) -> Self {
        Self::invalid(detail).at(field)
    }
    /// The same error, naming the request field at fault.
    pub fn at(mut self, field: &str) -> Self {
        self.field = Some(field.to_owned());
        self
    }
    /// [`Kind::Invalid`].
    pub fn invalid(detail: impl Into<String>) -> Self {
        Self::new(Kind::Invalid, detail)
    }
    /// [`Kind::NotFound`].
    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(Kind::NotFound, detail)
    }
    /// [`Kind::Forbidden`].
    pub fn forbidden(detail: impl Into<String>) -> Self {
        Self::new(Kind::Forbidden, detail)
    }
    /// [`Kind::Conflict`].
    pub fn conflict(detail: impl Into<String>) -> Self {
        Self::new(Kind::Conflict, detail)
    }
    /// [`Kind::Internal`]: `err` is logged; the caller reads only that something went wrong.
    pub fn internal(err: impl std::fmt::Display) -> Self {
        tracing::error!(error = %err, "internal error");
        Self::new(Kind::Internal, "internal error; see the server log")
    }
    /// [`Kind::StorageFull`]: no space left where gpuhub keeps `what`; nothing was written.
    pub fn storage_full(what: impl std::fmt::Display) -> Self {
        Self::new(Kind::StorageFull, format!("insufficient storage: {what}; free space and retry"))
    }
}

/// The problems of one request, gathered so that all are answered at once: a check that refuses the
/// request's content ([`Kind::Invalid`]) is noted and the next check runs; any other failure (the
/// database unavailable) ends the request at once.
#[derive(Debug, Default)]
pub struct Problems(Vec<ServiceError>);

impl Problems {
    /// The value of a check that passed; `None` with its refusal noted; any other error as it is.
    pub fn check<T>(&mut self, r: Result<T, ServiceError>) -> Result<Option<T>, ServiceError> {
        match r {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.kind == Kind::Invalid => {
                self.0.push(e);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
    /// Notes a refusal.
    pub fn push(&mut self, e: ServiceError) {
        self.0.push(e);
    }
    /// Whether nothing was refused so far.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// `Ok` when nothing was refused, else one error listing every refusal ([`ServiceError::all`]).
    pub fn finish(self) -> Result<(), ServiceError> {
        ServiceError::all(self.0).map_or(Ok(()), Err)
    }
}

impl From<gpuhub_store::StoreError> for ServiceError {
    fn from(e: gpuhub_store::StoreError) -> Self {
        use gpuhub_store::StoreError as S;
        match e {
            S::NotFound { .. } => Self::not_found(e.to_string()),
            S::Conflict(_) => Self::conflict(e.to_string()),
            S::Unavailable(_) => {
                tracing::warn!(error = %e, "database unavailable");
                Self {
                    retry_after: Some(RETRY_AFTER),
                    ..Self::new(Kind::Unavailable, "the database is unavailable (unreachable or busy); retry shortly")
                }
            }
            S::StorageFull(_) => {
                tracing::error!(error = %e, "database storage full");
                Self::storage_full("the database's disk is full (SQLite: the data directory's)")
            }
            other => Self::internal(other),
        }
    }
}

impl From<gpuhub_driver::EngineError> for ServiceError {
    fn from(e: gpuhub_driver::EngineError) -> Self {
        use gpuhub_driver::EngineError as E;
        match e {
            E::NotFound(_) => Self::not_found(e.to_string()),
            E::ImageNotFound(_) | E::Rejected(_) | E::Unsupported { .. } => Self::invalid(e.to_string()),
            E::Engine(_) => Self::new(Kind::Upstream, e.to_string()),
            E::Unavailable(_) => {
                Self { retry_after: Some(RETRY_AFTER), ..Self::new(Kind::Unavailable, format!("{e}; retry shortly")) }
            }
        }
    }
}

impl From<gpuhub_controller::ControlError> for ServiceError {
    fn from(e: gpuhub_controller::ControlError) -> Self {
        use gpuhub_controller::ControlError as C;
        match e {
            C::NotFound(d) => Self::not_found(d),
            C::Conflict(d) => Self::conflict(d),
            C::Engine(e) => e.into(),
            C::Store(e) => e.into(),
            C::Gone => Self::new(Kind::Unavailable, "the server is shutting down; retry shortly"),
        }
    }
}

impl From<gpuhub_core::CoreError> for ServiceError {
    fn from(e: gpuhub_core::CoreError) -> Self {
        match e {
            gpuhub_core::CoreError::Transition { .. } => Self::conflict(e.to_string()),
            gpuhub_core::CoreError::Invalid { ref field, .. } => {
                let field = field.clone();
                Self::invalid(e.to_string()).at(&field)
            }
            _ => Self::invalid(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lower_layers_errors_sort_into_domain_kinds() {
        let busy: ServiceError = gpuhub_store::StoreError::Unavailable(sqlx::Error::PoolTimedOut).into();
        assert_eq!((busy.kind, busy.retry_after), (Kind::Unavailable, Some(RETRY_AFTER)));
        let gone: ServiceError = gpuhub_controller::ControlError::Gone.into();
        assert_eq!((gone.kind, gone.retry_after), (Kind::Unavailable, None));
        let upstream: ServiceError = gpuhub_driver::EngineError::Engine("docker said no".into()).into();
        assert_eq!(upstream.kind, Kind::Upstream);
        let full: ServiceError = gpuhub_store::StoreError::StorageFull(sqlx::Error::PoolTimedOut).into();
        assert_eq!(full.kind, Kind::StorageFull);
        assert!(full.detail.starts_with("insufficient storage: "), "{}", full.detail);
    }

    #[test]
    fn several_problems_answer_as_the_first_with_all_listed() {
        assert!(ServiceError::all(Vec::new()).is_none());
        let e = ServiceError::all(vec![
            ServiceError::invalid_at("name", "invalid name: too long"),
            ServiceError::invalid("invalid request: no"),
            ServiceError::invalid_at("resources.memory", "invalid resources.memory: too little"),
        ])
        .unwrap();
        assert_eq!(
            (e.kind, e.detail.as_str(), e.field.as_deref()),
            (Kind::Invalid, "invalid name: too long", Some("name"))
        );
        let fields: Vec<&str> = e.errors.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(fields, ["name", "", "resources.memory"]);
        assert_eq!(e.errors[2].detail, "invalid resources.memory: too little");
    }

    #[test]
    fn an_internal_error_keeps_its_cause_out_of_the_detail() {
        let e = ServiceError::internal("secret path /var/lib/x: permission denied");
        assert_eq!(e.kind, Kind::Internal);
        assert!(!e.detail.contains("/var/lib/x"), "{}", e.detail);
    }
}
