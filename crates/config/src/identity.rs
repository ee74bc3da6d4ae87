//! `[ldap]`, `[oidc]` and `identity_recheck_secs`: the outside sign-in sources, from the file or from
//! `GPUHUB_LDAP_*` / `GPUHUB_OIDC_*`, checked.

use super::{Config, ConfigError};

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
