//! What can go wrong in a client command; each message fits on the one line the binary prints.

use std::path::PathBuf;

/// A client command failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No credentials file and no `GPUHUB_TOKEN`.
    #[error("not logged in: run gpuhub login --server URL --user NAME")]
    NotLoggedIn,
    /// The saved login belongs to another server than the one named; its token is not sent elsewhere.
    #[error("not logged in to {0}: run gpuhub login --server {0} --user NAME")]
    NotLoggedInTo(String),
    /// A token is known (from `GPUHUB_TOKEN`) but no server to send it to.
    #[error("no server: pass --server URL or set GPUHUB_SERVER")]
    NoServer,
    /// Neither `XDG_CONFIG_HOME` nor `HOME` is set, so there is nowhere to keep credentials.
    #[error("cannot find the config directory: set XDG_CONFIG_HOME or HOME")]
    NoConfigDir,
    /// The server URL does not parse or is not http(s).
    #[error("invalid server URL {url:?}: {reason}")]
    BadServerUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The connection to the server could not be made (refused, DNS, TLS, timeout).
    #[error("cannot reach {server}: {reason}")]
    Unreachable {
        /// The server URL.
        server: String,
        /// The underlying cause.
        reason: String,
    },
    /// The server refused the token: it expired, was revoked, or its account was disabled.
    #[error("{detail} (HTTP 401): run gpuhub login --server URL --user NAME")]
    Unauthorized {
        /// The problem's detail.
        detail: String,
    },
    /// The server answered with an error (an `application/problem+json` body); where it names several
    /// problems (a refused submission), each is printed on a line of its own, with its field.
    #[error("{}", api_text(.status, .detail, .errors))]
    Api {
        /// The HTTP status.
        status: u16,
        /// The problem's title (`Not Found`).
        title: String,
        /// The problem's detail, for a person.
        detail: String,
        /// Every problem of the request with its field (the problem's `errors`), where it lists them.
        errors: Vec<gpuhub_api::FieldProblem>,
    },
    /// The request failed after the connection was made (reset, broken stream).
    #[error("request to {url} failed: {reason}")]
    Http {
        /// The URL requested.
        url: String,
        /// The underlying cause.
        reason: String,
    },
    /// The server's answer is not what the API promises.
    #[error("unexpected response from {url}: {reason}")]
    BadResponse {
        /// The URL requested.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The credentials file or directory could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The credentials file is not valid JSON of the expected shape.
    #[error("{}: malformed credentials file: {reason}", path.display())]
    BadCredentials {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// Reading a password from the terminal or standard input failed, or it was unusable.
    #[error("password: {0}")]
    Password(String),
    /// The server does not run the SSH gateway (its `/api/v1/info` names no port).
    #[error("{0} runs no SSH gateway")]
    NoSshGateway(String),
    /// A program the command runs (`ssh`) could not be started.
    #[error("cannot run {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file named on the command line is not what the command needs.
    #[error("{}: {reason}", path.display())]
    BadFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The command line asks for something the command cannot do (nothing to change, an option
    /// that makes no sense there).
    #[error("{0}")]
    Usage(String),
    /// Writing to standard output failed.
    #[error("cannot write output: {0}")]
    Output(#[from] std::io::Error),
}

impl ClientError {
    /// The HTTP status, for errors the server answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Api { status, .. } => Some(*status),
            Self::Unauthorized { .. } => Some(401),
            _ => None,
        }
    }
}

/// An API error's words: its detail, or with several problems one line each (`resources.memory: …`).
fn api_text(status: &u16, detail: &str, errors: &[gpuhub_api::FieldProblem]) -> String {
    if errors.len() < 2 {
        return format!("{detail} (HTTP {status})");
    }
    let mut out = format!("{} problems (HTTP {status}):", errors.len());
    for p in errors {
        out.push_str("\n  ");
        // most details name their field already (`invalid resources.memory: …`)
        if !p.field.is_empty() && !p.detail.contains(&p.field) {
            out.push_str(&p.field);
            out.push_str(": ");
        }
        out.push_str(&p.detail);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuhub_api::FieldProblem;

    #[test]
    fn several_problems_print_one_a_line() {
        let at = |field: &str, detail: &str| FieldProblem { field: field.into(), detail: detail.into() };
        let api = |errors| ClientError::Api {
            status: 422,
            title: "Unprocessable Entity".into(),
            detail: "first".into(),
            errors,
        };
        assert_eq!(api(Vec::new()).to_string(), "first (HTTP 422)");
        assert_eq!(api(vec![at("name", "first")]).to_string(), "first (HTTP 422)");
        let text =
            api(vec![at("name", "invalid name: x"), at("resources.memory", "too little"), at("", "never")]).to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines, ["3 problems (HTTP 422):", "  invalid name: x", "  resources.memory: too little", "  never"]);
    }
}
