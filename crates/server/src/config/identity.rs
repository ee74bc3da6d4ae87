//! `[ldap]`, `[oidc]` and `identity_recheck_secs`: the outside sign-in sources, from the file or from
//! `GPUHUB_LDAP_*` / `GPUHUB_OIDC_*`.

use super::{Config, ConfigError};
use gpuhub_identity::{LdapConfig, OidcConfig};

/// Applies one `GPUHUB_LDAP_*`/`GPUHUB_OIDC_*` variable (`name` without `GPUHUB_`); `None` when it is
/// none of them.
pub(super) fn apply_env(c: &mut Config, key: &str, name: &str, v: &str) -> Option<Result<(), ConfigError>> {
    let invalid = |reason: String| ConfigError::Invalid { key: key.to_owned(), reason };
    if let Some(field) = name.strip_prefix("LDAP_") {
        let l = c.ldap.get_or_insert_with(|| LdapConfig::new("", "", ""));
        let opt = |v: &str| (!v.is_empty()).then(|| v.to_owned());
        match field {
            "URL" => l.url = v.to_owned(),
            "STARTTLS" => match v.parse() {
                Ok(b) => l.starttls = b,
                Err(_) => return Some(Err(invalid(format!("{v:?} is not true or false")))),
            },
            "CA_FILE" => l.ca_file = opt(v).map(Into::into),
            "BIND_DN" => l.bind_dn = opt(v),
            "BIND_PASSWORD" => l.bind_password = opt(v),
            "USER_BASE" => l.user_base = v.to_owned(),
            "USER_FILTER" => l.user_filter = v.to_owned(),
            "GROUP_BASE" => l.group_base = v.to_owned(),
            "GROUP_FILTER" => l.group_filter = v.to_owned(),
            "ADMIN_GROUP" => l.admin_group = opt(v),
            _ => return None,
        }
        return Some(Ok(()));
    }
    if let Some(field) = name.strip_prefix("OIDC_").filter(|f| *f != "SESSION_HOURS") {
        let o = c.oidc.get_or_insert_with(|| OidcConfig::new("", "", "", ""));
        match field {
            "ISSUER_URL" => o.issuer_url = v.to_owned(),
            "CLIENT_ID" => o.client_id = v.to_owned(),
            "CLIENT_SECRET" => o.client_secret = v.to_owned(),
            "REDIRECT_URL" => o.redirect_url = v.to_owned(),
            "USERNAME_CLAIM" => o.username_claim = v.to_owned(),
            "GROUPS_CLAIM" => o.groups_claim = v.to_owned(),
            "ADMIN_GROUP" => o.admin_group = v.to_owned(),
            _ => return None,
        }
        return Some(Ok(()));
    }
    match name {
        "OIDC_SESSION_HOURS" => Some(v.parse().map(|h| c.oidc_session_hours = h).map_err(|e| invalid(format!("{e}")))),
        "IDENTITY_RECHECK_SECS" => {
            Some(v.parse().map(|s| c.identity_recheck_secs = s).map_err(|e| invalid(format!("{e}"))))
        }
        _ => None,
    }
}

/// Each source configured is valid on its own terms; the recheck is 1 s to a day.
pub(super) fn check(c: &Config) -> Result<(), ConfigError> {
    if let Some(l) = &c.ldap {
        l.validate().map_err(|e| ConfigError::Invalid { key: "ldap".into(), reason: e.to_string() })?;
    }
    if let Some(o) = &c.oidc {
        o.validate().map_err(|e| ConfigError::Invalid { key: "oidc".into(), reason: e.to_string() })?;
    }
    if !(1..=720).contains(&c.oidc_session_hours) {
        return Err(ConfigError::Invalid {
            key: "oidc_session_hours".into(),
            reason: "must be from 1 to 720 (a month)".into(),
        });
    }
    if !(1..=86_400).contains(&c.identity_recheck_secs) {
        return Err(ConfigError::Invalid {
            key: "identity_recheck_secs".into(),
            reason: "must be from 1 to 86400 (a day)".into(),
        });
    }
    Ok(())
}
