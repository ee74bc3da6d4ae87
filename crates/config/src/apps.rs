//! Apps on origins of their own: `apps_domain` and `public_url`, checked.

use super::ConfigError;

/// Checks `apps_domain` (a DNS name under which every app gets a host of its own) and `public_url`
/// (the hub's URL as browsers reach it).
pub(super) fn check(apps_domain: Option<&str>, public_url: Option<&str>) -> Result<(), ConfigError> {
    let invalid = |key: &str, reason: String| ConfigError::Invalid { key: key.into(), reason };
    if let Some(url) = public_url {
        parse_origin(url).map_err(|r| invalid("public_url", r))?;
    }
    let Some(domain) = apps_domain else { return Ok(()) };
    let labels: Vec<&str> = domain.split('.').collect();
    let label_ok = |l: &&str| {
        !l.is_empty()
            && l.len() <= 63
            && l.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if domain.len() > 190 || !labels.iter().all(label_ok) {
        return Err(invalid(
            "apps_domain",
            format!(
                "{domain:?} is not a DNS name in lowercase without a port (for example apps.gpu.example.org, \
                 with a wildcard DNS record *.apps.gpu.example.org)"
            ),
        ));
    }
    if labels.len() < 2 && public_url.is_none() {
        return Err(invalid(
            "apps_domain",
            format!(
                "{domain:?} has one label: set public_url too (the hub's address is the apps domain without its first label by default)"
            ),
        ));
    }
    Ok(())
}

/// `http(s)://host[:port][/]` → (`https`?, `host[:port]`); anything else (a path, a query, a user) is
/// an error naming what is wrong.
pub fn parse_origin(url: &str) -> Result<(bool, String), String> {
    let (https, rest) = if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = url.strip_prefix("http://") {
        (false, r)
    } else {
        return Err(format!("{url:?} does not start with http:// or https://"));
    };
    let host = rest.strip_suffix('/').unwrap_or(rest);
    if host.is_empty() || host.contains(['/', '?', '#', '@', ' ']) {
        return Err(format!("{url:?} must be a scheme and a host (and port) only, such as https://gpu.example.org"));
    }
    Ok((https, host.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domains_and_urls() {
        assert!(check(Some("apps.gpu.example.org"), None).is_ok());
        assert!(check(Some("apps.localhost"), None).is_ok());
        assert!(check(Some("localhost"), Some("http://127.0.0.1:8080")).is_ok());
        for bad in ["", "Apps.example.org", "apps.example.org:8080", "*.apps.example.org", "a..b", "-a.b", "localhost"]
        {
            assert!(check(Some(bad), None).is_err(), "{bad}");
        }
        assert_eq!(parse_origin("https://gpu.example.org/").unwrap(), (true, "gpu.example.org".into()));
        assert_eq!(parse_origin("http://localhost:8080").unwrap(), (false, "localhost:8080".into()));
        for bad in ["gpu.example.org", "https://gpu.example.org/hub", "https://u@h", "ftp://h", "https://"] {
            assert!(parse_origin(bad).is_err(), "{bad}");
        }
    }
}
