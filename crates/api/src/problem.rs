//! The body of every error response.

use serde::{Deserialize, Serialize};

/// An RFC 9457 problem document, the body of every error response (`application/problem+json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Problem {
    /// A URI naming the kind of problem (`about:blank` when the status says it all).
    #[serde(rename = "type")]
    pub kind: String,
    pub title: String,
    pub status: u16,
    /// What exactly is wrong, for a person.
    pub detail: String,
    /// The request field at fault (`resources.gpus`, `name`), where one is: forms show the detail
    /// beside it. With several problems, the first one's (`errors[0].field`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Every problem of the request, each with its field (an RFC 9457 extension member): a refused
    /// submission names all that is wrong at once, `detail` and `field` being the first of them.
    /// Present whenever the problem names a field; absent for errors about no field (a 404, a 503).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldProblem>,
}

/// One problem of a request: the field it concerns and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FieldProblem {
    /// The field, as a path into the request body (`resources.memory`, `name`, `apps`); empty for
    /// the request as a whole.
    pub field: String,
    /// What is wrong with it, for a person (lowercase).
    pub detail: String,
}
