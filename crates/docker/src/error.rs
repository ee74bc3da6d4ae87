//! Mapping of the engine's errors onto [`EngineError`].

use bollard::errors::Error;
use gpuhub_driver::EngineError;

/// The HTTP status of an engine error, when the engine answered at all.
pub(crate) fn status(e: &Error) -> Option<u16> {
    match e {
        Error::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

/// Maps an engine error: 404 → [`EngineError::NotFound`] naming `missing`, 400 and 409 →
/// [`EngineError::Rejected`], anything else → [`EngineError::Engine`].
pub(crate) fn map(e: Error, missing: &str) -> EngineError {
    match e {
        Error::DockerResponseServerError { status_code: 404, .. } => EngineError::NotFound(missing.to_owned()),
        Error::DockerResponseServerError { status_code: 400 | 409, message } => EngineError::Rejected(message),
        Error::DockerResponseServerError { status_code, message } => {
            EngineError::Engine(format!("status {status_code}: {message}"))
        }
        other if unreachable(&other) => EngineError::Unavailable(lower_first(&other.to_string())),
        other => EngineError::Engine(lower_first(&other.to_string())),
    }
}

/// Whether an error means the engine was not reached at all (so nothing was done).
fn unreachable(e: &Error) -> bool {
    matches!(e, Error::IOError { .. } | Error::HyperLegacyError { .. } | Error::SocketNotFoundError(_))
}

/// Maps an error of container creation: a 404 names the missing image or network.
pub(crate) fn map_create(e: Error, image: &str, network: Option<&str>) -> EngineError {
    match e {
        Error::DockerResponseServerError { status_code: 404, message } => {
            let lower = message.to_lowercase();
            match network {
                Some(net) if lower.contains("network") => EngineError::NotFound(format!("network {net}")),
                _ if lower.contains("image") => EngineError::ImageNotFound(image.to_owned()),
                _ => EngineError::NotFound(message),
            }
        }
        other => map(other, image),
    }
}

/// bollard's messages start with a capital; ours do not.
fn lower_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(status_code: u16, message: &str) -> Error {
        Error::DockerResponseServerError { status_code, message: message.to_owned() }
    }

    #[test]
    fn maps_statuses() {
        assert!(matches!(map(server(404, "No such container: x"), "x"), EngineError::NotFound(n) if n == "x"));
        assert!(matches!(map(server(409, "name in use"), "x"), EngineError::Rejected(m) if m == "name in use"));
        assert!(matches!(map(server(400, "bad"), "x"), EngineError::Rejected(_)));
        assert!(matches!(map(server(500, "boom"), "x"), EngineError::Engine(m) if m == "status 500: boom"));
        assert!(matches!(map(Error::RequestTimeoutError, "x"), EngineError::Engine(m) if m == "timeout error"));
        assert_eq!(status(&server(304, "")), Some(304));
        let gone = Error::SocketNotFoundError("/var/run/docker.sock".into());
        assert!(matches!(map(gone, "x"), EngineError::Unavailable(_)));
        let refused = Error::IOError { err: std::io::Error::from(std::io::ErrorKind::ConnectionRefused) };
        assert!(matches!(map(refused, "x"), EngineError::Unavailable(_)));
    }

    #[test]
    fn maps_create_404s() {
        let e = map_create(server(404, "No such image: gpuhub/nope:latest"), "gpuhub/nope:latest", None);
        assert!(matches!(e, EngineError::ImageNotFound(i) if i == "gpuhub/nope:latest"));
        let e = map_create(server(404, "network gpuhub-bob not found"), "img", Some("gpuhub-bob"));
        assert!(matches!(e, EngineError::NotFound(n) if n == "network gpuhub-bob"));
        let e = map_create(server(409, "Conflict. The container name is already in use"), "img", None);
        assert!(matches!(e, EngineError::Rejected(_)));
    }
}
