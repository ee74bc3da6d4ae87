//! Accounts.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The first UID/GID handed to a local account by default; users' containers run as their own UID,
/// never as root. Above Debian's `UID_MAX` (60000, `/etc/login.defs`), the IDs Debian allocates itself
/// (60000–64999) and `nobody` (65534), so that no user of gpuhub shares an ID with a host account.
pub const FIRST_UID: u32 = 70_000;
/// The last UID handed out by default: below `useradd`'s first subordinate ID (`SUB_UID_MIN`, 100000),
/// which a host account's rootless containers map their root to.
pub const LAST_UID: u32 = 99_999;

/// The UIDs (and GIDs) local accounts are given, `first` to `last` inclusive (`uid_range`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UidRange {
    /// The first ID handed out.
    pub first: u32,
    /// The last ID handed out.
    pub last: u32,
}

impl Default for UidRange {
    fn default() -> Self {
        Self { first: FIRST_UID, last: LAST_UID }
    }
}

impl UidRange {
    /// Whether `id` is in the range.
    pub fn contains(&self, id: u32) -> bool {
        (self.first..=self.last).contains(&id)
    }
}

impl std::fmt::Display for UidRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

/// `"70000-99999"`: two IDs, the first at least 1000 and not above the last.
impl std::str::FromStr for UidRange {
    type Err = crate::CoreError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |reason: String| crate::CoreError::Invalid { field: "uid_range".into(), reason };
        let (a, b) = s.split_once('-').ok_or_else(|| bad(format!("{s:?} is not FIRST-LAST (\"70000-99999\")")))?;
        let id = |t: &str| t.trim().parse::<u32>().map_err(|_| bad(format!("{t:?} in {s:?} is no uid")));
        let (first, last) = (id(a)?, id(b)?);
        if first < 1000 {
            return Err(bad(format!("{s:?} starts below 1000, among the host's system accounts")));
        }
        if first > last || last == u32::MAX {
            return Err(bad(format!("{s:?} is empty or ends at the invalid uid {}", u32::MAX)));
        }
        Ok(Self { first, last })
    }
}

impl Serialize for UidRange {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for UidRange {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

/// What an account may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Manages users, images and sees every workload.
    Admin,
    /// Runs and sees their own workloads.
    User,
}

/// Where an account's identity comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum UserSource {
    /// Made here, with a password kept here (hashed).
    #[default]
    Local,
    /// An LDAP directory's: signs in with the directory's password; UID/GID are its `uidNumber` and
    /// `gidNumber`; checked against the directory again from time to time.
    Ldap,
    /// An OpenID provider's: signs in through the provider in a browser.
    Oidc,
}

impl UserSource {
    /// How it is stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            UserSource::Local => "local",
            UserSource::Ldap => "ldap",
            UserSource::Oidc => "oidc",
        }
    }

    /// The stored spelling back; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        [UserSource::Local, UserSource::Ldap, UserSource::Oidc].into_iter().find(|v| v.as_str() == s)
    }
}

/// An account as the platform knows it (the password hash stays in the store).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// Database id.
    pub id: i64,
    /// Login name, unique; see [`crate::names`].
    pub username: String,
    /// Admin or user.
    pub role: Role,
    /// The UID the user's containers run as: from [`FIRST_UID`] up for local accounts, the directory's
    /// `uidNumber` for LDAP ones.
    pub uid: u32,
    /// The GID the user's containers run as: the UID for local accounts, `gidNumber` for LDAP ones.
    pub gid: u32,
    /// Where the identity comes from.
    pub source: UserSource,
    /// A disabled user can neither log in nor use a token; their workloads stay.
    pub disabled: bool,
    /// The user's own home quota in bytes, set by an admin; `None`: the configured default; `Some(0)`:
    /// no quota.
    pub home_quota: Option<u64>,
    /// When the account was made.
    pub created_at: DateTime<Utc>,
}

impl User {
    /// Whether this account is an admin.
    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    /// The home quota in force for this user: their own, or `default`; `None` is no quota.
    pub fn home_quota_or(&self, default: Option<u64>) -> Option<u64> {
        match self.home_quota {
            Some(0) => None,
            Some(q) => Some(q),
            None => default,
        }
    }
}

/// A home quota as an admin writes it: `"20GiB"` (or bytes), `"none"` (no quota) or `"default"` (the
/// configured one). Returns what [`User::home_quota`] stores.
pub fn parse_home_quota(s: &str) -> Result<Option<u64>, crate::CoreError> {
    match s.trim() {
        "default" => Ok(None),
        "none" => Ok(Some(0)),
        q => match crate::quantity::Bytes::parse(q) {
            Ok(b) if b.0 > 0 => Ok(Some(b.0)),
            Ok(_) => Err(crate::CoreError::invalid("home_quota", "0 is not a quota: say \"none\" for no quota")),
            Err(e) => Err(crate::CoreError::invalid("home_quota", format!("{e} (or \"none\", \"default\")"))),
        },
    }
}

/// How [`User::home_quota`] reads in the API: `"20GiB"`, `"none"`, or absent for the default.
pub fn home_quota_text(q: Option<u64>) -> Option<String> {
    q.map(|q| if q == 0 { "none".to_owned() } else { crate::quantity::Bytes(q).to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uid_ranges_read_and_refuse_nonsense() {
        assert_eq!("70000-99999".parse::<UidRange>().unwrap(), UidRange::default());
        assert_eq!(UidRange::default().to_string(), "70000-99999");
        assert!(UidRange { first: 5, last: 6 }.contains(6) && !UidRange { first: 5, last: 6 }.contains(7));
        for bad in ["70000", "a-b", "99999-70000", "0-99", "70000-4294967295", ""] {
            let e = bad.parse::<UidRange>().unwrap_err().to_string();
            assert!(e.contains("uid_range"), "{bad}: {e}");
        }
    }

    #[test]
    fn home_quotas_read_and_fall_back() {
        assert_eq!(parse_home_quota("20GiB").unwrap(), Some(20 << 30));
        assert_eq!(parse_home_quota("none").unwrap(), Some(0));
        assert_eq!(parse_home_quota("default").unwrap(), None);
        for bad in ["0", "lots", "-1GiB", ""] {
            let e = parse_home_quota(bad).unwrap_err();
            assert!(matches!(e, crate::CoreError::Invalid { ref field, .. } if field == "home_quota"), "{bad}: {e}");
        }
        let mut u = User {
            id: 1,
            username: "alice".into(),
            role: Role::User,
            uid: FIRST_UID,
            gid: FIRST_UID,
            source: UserSource::Local,
            disabled: false,
            home_quota: None,
            created_at: DateTime::<Utc>::MIN_UTC,
        };
        assert_eq!(u.home_quota_or(Some(10)), Some(10));
        u.home_quota = Some(0);
        assert_eq!(u.home_quota_or(Some(10)), None);
        u.home_quota = Some(20);
        assert_eq!(u.home_quota_or(None), Some(20));
        assert_eq!(home_quota_text(Some(20 << 30)).as_deref(), Some("20GiB"));
        assert_eq!(home_quota_text(Some(0)).as_deref(), Some("none"));
        for s in [UserSource::Local, UserSource::Ldap, UserSource::Oidc] {
            assert_eq!(UserSource::parse(s.as_str()), Some(s));
        }
        assert_eq!(UserSource::parse("kerberos"), None);
    }
}
