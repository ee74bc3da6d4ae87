//! Image references and the policy on which may be pulled: admins list patterns (`image_allow`), `*`
//! standing for any run of characters (`registry.example.org/*`, `localhost:5000/team/*:*`); and
//! personal images, workspaces saved by their owners.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A workspace saved as an image by its owner (`gpuhub save`): theirs alone, run by its name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PersonalImage {
    pub owner: String,
    /// What the owner runs it by (`gpuhub run --image NAME`).
    pub name: String,
    /// The engine's reference ([`personal_reference`]), which an admin may publish to the catalog.
    pub reference: String,
    pub size_bytes: u64,
    /// The workspace it was saved from.
    pub workload: String,
    pub created_at: DateTime<Utc>,
}

/// Where `owner`'s personal image `name` lives in the engine: `gpuhub-user/<owner>/<name>:latest`.
pub fn personal_reference(owner: &str, name: &str) -> String {
    format!("gpuhub-user/{owner}/{name}:latest")
}

/// The registry an image reference names: its first part when that looks like a host (has a `.` or a
/// `:`, or is `localhost`), else Docker Hub's `docker.io`.
pub fn registry_of(reference: &str) -> &str {
    match reference.split_once('/') {
        Some((first, _)) if first.contains('.') || first.contains(':') || first == "localhost" => first,
        _ => "docker.io",
    }
}

/// Whether `pattern` (with `*` for any run of characters, `/` included) matches all of `s`.
pub fn glob(pattern: &str, s: &str) -> bool {
    let (p, s) = (pattern.as_bytes(), s.as_bytes());
    let (mut pi, mut si) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while si < s.len() {
        if pi < p.len() && p[pi] != b'*' && p[pi] == s[si] {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some(pi);
            mark = si;
            pi += 1;
        } else if let Some(st) = star {
            pi = st + 1;
            mark += 1;
            si = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == b'*')
}

/// Whether `reference` may be pulled under `allow`; the refusal says why, naming the registry when no
/// pattern is of it, and the patterns there are.
pub fn check_pull(allow: &[String], reference: &str) -> Result<(), String> {
    if allow.iter().any(|p| glob(p, reference)) {
        return Ok(());
    }
    let listed = if allow.is_empty() { "none".to_owned() } else { allow.join(", ") };
    let registry = registry_of(reference);
    let of_registry = allow.iter().any(|p| glob(p.split('/').next().unwrap_or(""), registry));
    if of_registry {
        Err(format!("{reference} is not among the images image_allow lets be pulled ({listed})"))
    } else {
        Err(format!("registry {registry} is not allowed: image_allow lets images be pulled only from {listed}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registries_are_read_off_references() {
        assert_eq!(registry_of("python:3.12"), "docker.io");
        assert_eq!(registry_of("library/python"), "docker.io");
        assert_eq!(registry_of("localhost:5000/busybox:1"), "localhost:5000");
        assert_eq!(registry_of("localhost/x"), "localhost");
        assert_eq!(registry_of("ghcr.io/org/img@sha256:ab"), "ghcr.io");
    }

    #[test]
    fn globs_match_whole_strings() {
        assert!(glob("localhost:5000/*", "localhost:5000/team/img:1"));
        assert!(glob("*", "anything"));
        assert!(glob("a*c*e", "abcde"));
        assert!(!glob("localhost:5000/*", "localhost:5001/img"));
        assert!(!glob("img:1", "img:10"));
        assert!(glob("img:*", "img:"));
        assert!(!glob("", "x"));
    }

    #[test]
    fn refusals_name_the_registry_or_the_image() {
        let allow = vec!["localhost:5000/*".to_owned()];
        assert!(check_pull(&allow, "localhost:5000/busybox:1").is_ok());
        let e = check_pull(&allow, "docker.io/library/python:3").unwrap_err();
        assert!(e.contains("registry docker.io is not allowed") && e.contains("localhost:5000/*"), "{e}");
        let narrow = vec!["localhost:5000/team/*".to_owned()];
        let e = check_pull(&narrow, "localhost:5000/other/x").unwrap_err();
        assert!(e.contains("not among the images"), "{e}");
        assert!(check_pull(&[], "x").unwrap_err().contains("only from none"));
    }
}
