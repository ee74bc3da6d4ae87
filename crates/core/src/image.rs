//! Image references and the policy on which may be pulled: admins list patterns (`image_allow`), `*`
//! standing for any run of characters (`registry.example.org/*`, `localhost:5000/team/*:*`); and
//! personal images, workspaces saved by their owners.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// A workspace saved as an image by its owner (`gpuhub save`): theirs alone, run by its name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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

/// The repository prefix of every personal image.
pub const PERSONAL_PREFIX: &str = "gpuhub-user/";

/// Where `owner`'s personal image `name` of the installation `instance` lives in the engine:
/// `gpuhub-user/<instance12>/<owner>/<name>:latest`, so that two installations sharing an engine never
/// share one. Images saved before keep the reference recorded with them (`gpuhub-user/<owner>/<name>`).
pub fn personal_reference(instance: &str, owner: &str, name: &str) -> String {
    format!("{PERSONAL_PREFIX}{}/{owner}/{name}:latest", &instance[..12.min(instance.len())])
}

/// Whether `reference` names a repository of the personal images (`gpuhub-user/…`, also spelt with
/// Docker Hub's registry in front, which Docker takes for the same local name).
pub fn is_personal(reference: &str) -> bool {
    let local =
        ["docker.io/", "index.docker.io/"].iter().find_map(|hub| reference.strip_prefix(hub)).unwrap_or(reference);
    local.starts_with(PERSONAL_PREFIX)
}

/// The longest repository name (registry included) the distribution spec allows.
pub const MAX_NAME_LEN: usize = 255;

/// Checks `reference` against the distribution spec's reference grammar (what Docker itself parses):
/// `[registry[:port]/]path[:tag][@digest]`, the path's components lowercase letters and digits joined
/// by `.`, `_`, `__` or dashes, the tag `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`, the digest
/// `algorithm:hex` (at least 32 hex digits). The refusal says what is wrong, lowercase.
pub fn check_reference(reference: &str) -> Result<(), String> {
    if reference.is_empty() {
        return Err("it is empty".into());
    }
    let (named, digest) = match reference.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (reference, None),
    };
    if let Some(d) = digest {
        check_digest(d)?;
    }
    // a tag is after the last `:` when no `/` follows it (a `:` before a `/` is a registry's port)
    let (name, tag) = match named.rsplit_once(':') {
        Some((n, t)) if !t.contains('/') => (n, Some(t)),
        _ => (named, None),
    };
    if let Some(t) = tag {
        let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
        let ok = t.len() <= 128 && t.starts_with(word) && t.chars().all(|c| word(c) || c == '.' || c == '-');
        if !ok {
            return Err(format!(
                "tag {t:?} is not letters, digits, '_', '.' or '-' (starting with no '.' or '-', at most 128)"
            ));
        }
    }
    if name.is_empty() {
        return Err("it names no repository".into());
    }
    if name.len() > MAX_NAME_LEN {
        return Err(format!("its repository name is longer than {MAX_NAME_LEN} characters"));
    }
    let mut parts: Vec<&str> = name.split('/').collect();
    if parts.len() > 1 && !path_component(parts[0]) {
        check_domain(parts[0])?;
        parts.remove(0);
    }
    match parts.iter().find(|p| !path_component(p)) {
        Some(p) => {
            Err(format!("path component {p:?} is not lowercase letters and digits joined by '.', '_', '__' or dashes"))
        }
        None => Ok(()),
    }
}

/// `[a-z0-9]+(?:(?:[._]|__|[-]*)[a-z0-9]+)*`.
fn path_component(p: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    if !p.starts_with(alnum) || !p.ends_with(alnum) {
        return false;
    }
    p.split(alnum)
        .filter(|sep| !sep.is_empty())
        .all(|sep| matches!(sep, "." | "_" | "__") || sep.bytes().all(|b| b == b'-'))
}

/// `host[:port]`: domain components (letters, digits, inner dashes) joined by `.`, or `[IPv6]`.
fn check_domain(d: &str) -> Result<(), String> {
    let bad = || Err(format!("registry {d:?} is not a host name with an optional port"));
    let (host, port) = match d.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') => (h, Some(p)),
        _ => (d, None),
    };
    if port.is_some_and(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit())) {
        return bad();
    }
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return if v6.parse::<std::net::Ipv6Addr>().is_ok() { Ok(()) } else { bad() };
    }
    let component = |c: &str| {
        !c.is_empty()
            && !c.starts_with('-')
            && !c.ends_with('-')
            && c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if host.split('.').all(component) { Ok(()) } else { bad() }
}

/// `algorithm:hex`: components `[A-Za-z][A-Za-z0-9]*` joined by `+`, `.`, `_` or `-`, then at least 32
/// hex digits.
fn check_digest(d: &str) -> Result<(), String> {
    let bad = || Err(format!("digest {d:?} is not algorithm:hex (such as sha256: and 64 hex digits)"));
    let Some((algo, hex)) = d.split_once(':') else { return bad() };
    let component =
        |c: &str| c.starts_with(|c: char| c.is_ascii_alphabetic()) && c.bytes().all(|b| b.is_ascii_alphanumeric());
    let algo_ok = algo.split(['+', '.', '_', '-']).all(component);
    if algo_ok && hex.len() >= 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()) { Ok(()) } else { bad() }
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
    if allow.is_empty() {
        // the newcomer read "image_allow lets images be pulled only from none"
        return Err(format!(
            "{reference} cannot be pulled: image_allow names no image, so only the catalog's are pulled (an admin \
             adds it with `gpuhub images add NAME {reference}`, or a pattern of it to image_allow)"
        ));
    }
    let listed = allow.join(", ");
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
    fn personal_images_are_named_per_installation() {
        let r = personal_reference("0123456789abcdef", "alice", "env");
        assert_eq!(r, "gpuhub-user/0123456789ab/alice/env:latest");
        assert!(check_reference(&r).is_ok());
        for yes in
            [r.as_str(), "gpuhub-user/alice/env:latest", "docker.io/gpuhub-user/a/b", "index.docker.io/gpuhub-user/x"]
        {
            assert!(is_personal(yes), "{yes}");
        }
        for no in ["busybox", "ghcr.io/gpuhub-user/a/b", "gpuhub-users/a", "library/gpuhub-user"] {
            assert!(!is_personal(no), "{no}");
        }
    }

    #[test]
    fn references_follow_the_distribution_grammar() {
        let digest = format!("sha256:{}", "0a".repeat(32));
        for good in [
            "busybox".to_owned(),
            "busybox:latest".to_owned(),
            "library/busybox:1.36.1-musl".to_owned(),
            "localhost:5000/team/img-a__b.c:V1.0_x".to_owned(),
            "registry.example.org/a/b---c/d_e".to_owned(),
            "Registry.Example.org:443/a".to_owned(),
            "[::1]:5000/a/b".to_owned(),
            format!("busybox@{digest}"),
            format!("ghcr.io/o/r:t@{digest}"),
            "gpuhub-user/alice/nb:latest".to_owned(),
            "sha256".to_owned(),
            format!("a:{}", "t".repeat(128)),
        ] {
            assert_eq!(check_reference(&good), Ok(()), "{good}");
        }
        for (bad, why) in [
            ("", "empty"),
            ("busybox/../../containers/x/json", "\"..\""),
            ("../x", "\"..\""),
            ("a/./b", "\".\""),
            ("a//b", "\"\""),
            ("/a", "\"\""),
            ("a/", "\"\""),
            ("Busybox", "\"Busybox\""),
            ("team/Img", "\"Img\""),
            ("a..b", "\"a..b\""),
            ("a._b", "\"a._b\""),
            ("a___b", "\"a___b\""),
            ("-x", "\"-x\""),
            ("a/b_", "\"b_\""),
            ("busybox:", "tag \"\""),
            ("busybox:-x", "tag"),
            ("busybox:.x", "tag"),
            ("busybox:a b", "tag"),
            ("busybox:a?b", "tag"),
            ("busybox@", "digest"),
            ("busybox@sha256:zz", "digest"),
            ("busybox@sha256:0a0a", "digest"),
            ("busybox@:0a", "digest"),
            ("a@b@c", "digest"),
            (":tag", "no repository"),
            ("localhost:x/a", "registry"),
            ("my-host-.example/a", "registry"),
            ("[::zz]:5000/a", "registry"),
        ] {
            let e = check_reference(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        assert!(check_reference(&format!("a:{}", "t".repeat(129))).is_err());
        assert!(check_reference(&"a".repeat(256)).is_err());
    }

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
        let e = check_pull(&[], "x").unwrap_err();
        assert!(
            !e.contains("none") && e.contains("image_allow names no image") && e.contains("images add NAME x"),
            "{e}"
        );
    }
}
