//! [`Directory`] over LDAP: configuration, RFC 4515 filter escaping, and [`LdapDirectory`].

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ldap3::{Ldap, LdapConnAsync, LdapConnSettings, LdapError, Scope, SearchEntry};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde::Deserialize;

use crate::{Directory, DirectoryUser, IdentityError};

/// The result code of a bind with a wrong password or an unknown DN (RFC 4511 invalidCredentials).
const RC_INVALID_CREDENTIALS: u32 = 49;

/// How gpuhub reaches an LDAP directory and finds users and groups in it.
///
/// Deserialised from gpuhub's configuration (unknown fields refused); check it with
/// [`LdapConfig::validate`] (which [`LdapDirectory::new`] does). `Debug` prints no password.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LdapConfig {
    /// `ldaps://host:port` (TLS from the start) or `ldap://host:port` with [`Self::starttls`].
    pub url: String,
    /// Upgrade an `ldap://` connection with StartTLS before anything else is sent.
    #[serde(default)]
    pub starttls: bool,
    /// Allow `ldap://` without StartTLS, passwords in the clear: for tests on loopback only.
    #[serde(default)]
    pub allow_plaintext: bool,
    /// A PEM file with the CA certificate(s) to trust for the server's certificate; the system's
    /// roots when absent.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// The service account's DN to search with; anonymous search when absent.
    #[serde(default)]
    pub bind_dn: Option<String>,
    /// The service account's password (required with, and only with, [`Self::bind_dn`]).
    #[serde(default)]
    pub bind_password: Option<String>,
    /// Where users are searched (subtree), e.g. `ou=people,dc=example,dc=org`.
    pub user_base: String,
    /// The filter that finds one user; `{username}` is replaced by the RFC 4515-escaped username.
    #[serde(default = "default_user_filter")]
    pub user_filter: String,
    /// Where groups are searched (subtree), e.g. `ou=groups,dc=example,dc=org`.
    pub group_base: String,
    /// The filter that finds a user's groups; `{username}` and `{dn}` are replaced by the escaped
    /// username and user DN.
    #[serde(default = "default_group_filter")]
    pub group_filter: String,
    /// The cn of the group whose members are gpuhub admins; `None` or empty: nobody is made admin
    /// by the directory.
    #[serde(default = "default_admin_group")]
    pub admin_group: Option<String>,
    /// Seconds each connection or operation may take.
    #[serde(default = "default_timeout_secs")]
    pub timeout_secs: u64,
}

fn default_user_filter() -> String {
    "(uid={username})".into()
}

fn default_group_filter() -> String {
    "(|(memberUid={username})(member={dn}))".into()
}

fn default_admin_group() -> Option<String> {
    Some("gpuhub-admins".into())
}

fn default_timeout_secs() -> u64 {
    10
}

impl fmt::Debug for LdapConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LdapConfig")
            .field("url", &self.url)
            .field("starttls", &self.starttls)
            .field("allow_plaintext", &self.allow_plaintext)
            .field("ca_file", &self.ca_file)
            .field("bind_dn", &self.bind_dn)
            .field("bind_password", &self.bind_password.as_ref().map(|_| "<redacted>"))
            .field("user_base", &self.user_base)
            .field("user_filter", &self.user_filter)
            .field("group_base", &self.group_base)
            .field("group_filter", &self.group_filter)
            .field("admin_group", &self.admin_group)
            .field("timeout_secs", &self.timeout_secs)
            .finish()
    }
}

impl LdapConfig {
    /// A configuration with the defaults for everything but the URL and the two bases: StartTLS
    /// off, system roots, anonymous search.
    pub fn new(url: impl Into<String>, user_base: impl Into<String>, group_base: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            starttls: false,
            allow_plaintext: false,
            ca_file: None,
            bind_dn: None,
            bind_password: None,
            user_base: user_base.into(),
            user_filter: default_user_filter(),
            group_base: group_base.into(),
            group_filter: default_group_filter(),
            admin_group: default_admin_group(),
            timeout_secs: default_timeout_secs(),
        }
    }

    /// Checks the configuration without contacting the server: a URL of scheme `ldap` or `ldaps`
    /// with a host; no plaintext `ldap://` unless StartTLS or `allow_plaintext`; no StartTLS on
    /// `ldaps://`; `bind_dn` and a non-empty `bind_password` together or neither; non-empty bases;
    /// filters in parentheses with their placeholders; a timeout of 1 to 300 seconds.
    pub fn validate(&self) -> Result<(), IdentityError> {
        let bad = |m: String| Err(IdentityError::Config(m));
        let Some((scheme, rest)) = self.url.split_once("://") else {
            return bad(format!("url {:?} is not ldap://host:port or ldaps://host:port", self.url));
        };
        let host = rest.split(['/', '?']).next().unwrap_or_default();
        if host.is_empty() {
            return bad(format!("url {:?} has no host", self.url));
        }
        match scheme.to_ascii_lowercase().as_str() {
            "ldaps" if self.starttls => return bad("starttls cannot be used with ldaps:// (already TLS)".into()),
            "ldaps" => {}
            "ldap" if !self.starttls && !self.allow_plaintext => {
                return bad(format!(
                    "url {:?} is plaintext: set starttls = true or use ldaps:// (allow_plaintext = true is for \
                     tests only)",
                    self.url
                ));
            }
            "ldap" => {}
            other => return bad(format!("url scheme {other:?} is not ldap or ldaps")),
        }
        match (&self.bind_dn, &self.bind_password) {
            (Some(_), None) | (None, Some(_)) => {
                return bad("bind_dn and bind_password must be given together".into());
            }
            (Some(dn), Some(pw)) if dn.is_empty() || pw.is_empty() => {
                return bad("bind_dn and bind_password must not be empty (that would be an anonymous bind)".into());
            }
            _ => {}
        }
        for (name, base) in [("user_base", &self.user_base), ("group_base", &self.group_base)] {
            if base.trim().is_empty() {
                return bad(format!("{name} is empty"));
            }
        }
        for (name, filter) in [("user_filter", &self.user_filter), ("group_filter", &self.group_filter)] {
            if !(filter.starts_with('(') && filter.ends_with(')')) {
                return bad(format!("{name} {filter:?} is not a filter in parentheses"));
            }
        }
        if !self.user_filter.contains("{username}") {
            return bad("user_filter has no {username} placeholder".into());
        }
        if !self.group_filter.contains("{username}") && !self.group_filter.contains("{dn}") {
            return bad("group_filter has neither a {username} nor a {dn} placeholder".into());
        }
        if !(1..=300).contains(&self.timeout_secs) {
            return bad(format!("timeout_secs {} is not between 1 and 300", self.timeout_secs));
        }
        Ok(())
    }

    fn admin_group(&self) -> Option<&str> {
        self.admin_group.as_deref().filter(|g| !g.is_empty())
    }
}

/// Escapes `value` for use as an assertion value in an LDAP search filter (RFC 4515 section 3):
/// `*`, `(`, `)`, `\` and NUL become `\2a`, `\28`, `\29`, `\5c` and `\00`; everything else, UTF-8
/// included, is kept.
pub fn escape_filter_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '*' => out.push_str("\\2a"),
            '(' => out.push_str("\\28"),
            ')' => out.push_str("\\29"),
            '\\' => out.push_str("\\5c"),
            '\0' => out.push_str("\\00"),
            c => out.push(c),
        }
    }
    out
}

/// Replaces each `{name}` placeholder of `template` by the escaped value given for it, in one pass
/// (so a value that itself contains `{dn}` is not substituted again). Unknown `{...}` are kept.
fn fill_filter(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    'outer: while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        rest = &rest[open..];
        for (name, value) in values {
            if let Some(after) =
                rest.strip_prefix('{').and_then(|r| r.strip_prefix(name)).and_then(|r| r.strip_prefix('}'))
            {
                out.push_str(&escape_filter_value(value));
                rest = after;
                continue 'outer;
            }
        }
        out.push('{');
        rest = &rest[1..];
    }
    out.push_str(rest);
    out
}

/// Reads the PEM certificates of `path` into a rustls client configuration trusting only them.
fn tls_config(path: &Path) -> Result<rustls::ClientConfig, IdentityError> {
    let config_err = |m: String| IdentityError::Config(m);
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| config_err(format!("ca_file {}: {e}", path.display())))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| config_err(format!("ca_file {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(config_err(format!("ca_file {} holds no PEM certificate", path.display())));
    }
    for cert in certs {
        roots.add(cert).map_err(|e| config_err(format!("ca_file {}: {e}", path.display())))?;
    }
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| config_err(format!("tls: {e}")))
        .map(|b| b.with_root_certificates(roots).with_no_client_auth())
}

/// A [`Directory`] backed by an LDAP server (OpenLDAP, 389-ds, Active Directory with POSIX
/// attributes, ...), reached over TLS (LDAPS or StartTLS).
///
/// Each call opens its own connections (one as the service account or anonymous for searches, a
/// fresh one for the user's bind) and closes them, so nothing is shared between users.
pub struct LdapDirectory {
    config: LdapConfig,
    tls: Option<Arc<rustls::ClientConfig>>,
    timeout: Duration,
}

impl fmt::Debug for LdapDirectory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LdapDirectory").field("config", &self.config).finish_non_exhaustive()
    }
}

impl LdapDirectory {
    /// Validates `config` and reads its CA file; contacts no server.
    pub fn new(config: LdapConfig) -> Result<Self, IdentityError> {
        config.validate()?;
        let tls = config.ca_file.as_deref().map(tls_config).transpose()?.map(Arc::new);
        let timeout = Duration::from_secs(config.timeout_secs);
        Ok(Self { config, tls, timeout })
    }

    /// The configuration this directory was made with.
    pub fn config(&self) -> &LdapConfig {
        &self.config
    }

    fn err(&self, e: LdapError) -> IdentityError {
        match e {
            LdapError::Timeout { .. } => IdentityError::Timeout(self.timeout),
            e => IdentityError::Directory(e.to_string()),
        }
    }

    /// Opens a connection (TLS established, StartTLS done), not yet bound.
    async fn connect(&self) -> Result<Ldap, IdentityError> {
        let mut settings = LdapConnSettings::new().set_conn_timeout(self.timeout).set_starttls(self.config.starttls);
        if let Some(tls) = &self.tls {
            settings = settings.set_config(tls.clone());
        }
        let connecting = LdapConnAsync::with_settings(settings, &self.config.url);
        let (conn, ldap) = tokio::time::timeout(self.timeout, connecting)
            .await
            .map_err(|_| IdentityError::Timeout(self.timeout))?
            .map_err(|e| self.err(e))?;
        tokio::spawn(async move {
            if let Err(e) = conn.drive().await {
                tracing::debug!(error = %e, "ldap connection ended with an error");
            }
        });
        Ok(ldap)
    }

    /// A connection bound as the service account, or anonymous when none is configured.
    async fn service_connection(&self) -> Result<Ldap, IdentityError> {
        let mut ldap = self.connect().await?;
        if let (Some(dn), Some(pw)) = (&self.config.bind_dn, &self.config.bind_password) {
            let res = ldap.with_timeout(self.timeout).simple_bind(dn, pw).await.map_err(|e| self.err(e))?;
            if res.rc != 0 {
                return Err(IdentityError::Directory(format!("service account {dn:?} bind refused: {res}")));
            }
        }
        Ok(ldap)
    }

    /// The one entry the user filter matches for `username`, if any.
    async fn find_user(&self, ldap: &mut Ldap, username: &str) -> Result<Option<SearchEntry>, IdentityError> {
        let filter = fill_filter(&self.config.user_filter, &[("username", username)]);
        let attrs = ["uid", "uidNumber", "gidNumber", "displayName", "cn"];
        let (entries, _) = ldap
            .with_timeout(self.timeout)
            .search(&self.config.user_base, Scope::Subtree, &filter, attrs)
            .await
            .and_then(|r| r.success())
            .map_err(|e| self.err(e))?;
        match entries.len() {
            0 => Ok(None),
            1 => Ok(entries.into_iter().next().map(SearchEntry::construct)),
            count => Err(IdentityError::AmbiguousUser { username: username.to_owned(), count }),
        }
    }

    /// The sorted cn's of the groups the group filter finds for the user.
    async fn groups(&self, ldap: &mut Ldap, username: &str, dn: &str) -> Result<Vec<String>, IdentityError> {
        let filter = fill_filter(&self.config.group_filter, &[("username", username), ("dn", dn)]);
        let (entries, _) = ldap
            .with_timeout(self.timeout)
            .search(&self.config.group_base, Scope::Subtree, &filter, ["cn"])
            .await
            .and_then(|r| r.success())
            .map_err(|e| self.err(e))?;
        let mut groups: Vec<String> = entries
            .into_iter()
            .filter_map(|e| SearchEntry::construct(e).attrs.remove("cn").and_then(|v| v.into_iter().next()))
            .collect();
        groups.sort();
        groups.dedup();
        Ok(groups)
    }

    /// The user of `entry` with `groups`, or an error naming a missing uidNumber/gidNumber.
    fn to_user(&self, username: &str, entry: SearchEntry, groups: Vec<String>) -> Result<DirectoryUser, IdentityError> {
        let first = |name: &str| entry.attrs.get(name).and_then(|v| v.first()).cloned();
        let number = |attribute: &'static str| {
            first(attribute)
                .and_then(|v| v.trim().parse::<u32>().ok())
                .ok_or_else(|| IdentityError::MissingAttribute { dn: entry.dn.clone(), attribute })
        };
        let uid_number = number("uidNumber")?;
        let gid_number = number("gidNumber")?;
        let is_admin = self.config.admin_group().is_some_and(|a| groups.iter().any(|g| g.eq_ignore_ascii_case(a)));
        let display_name = first("displayName").or_else(|| first("cn"));
        Ok(DirectoryUser {
            username: username.to_owned(),
            dn: entry.dn,
            uid_number,
            gid_number,
            groups,
            is_admin,
            display_name,
        })
    }

    /// Whether `password` binds as `dn`, on a fresh connection of its own.
    async fn check_password(&self, dn: &str, password: &str) -> Result<(), IdentityError> {
        let mut ldap = self.connect().await?;
        let res = ldap.with_timeout(self.timeout).simple_bind(dn, password).await.map_err(|e| self.err(e))?;
        let _ = ldap.unbind().await;
        match res.rc {
            0 => Ok(()),
            RC_INVALID_CREDENTIALS => Err(IdentityError::InvalidCredentials),
            _ => Err(IdentityError::Directory(format!("bind refused: {res}"))),
        }
    }

    async fn authenticate_on(
        &self,
        svc: &mut Ldap,
        username: &str,
        password: &str,
    ) -> Result<DirectoryUser, IdentityError> {
        let Some(entry) = self.find_user(svc, username).await? else {
            // the same bind a wrong password costs, as a name nobody has: an unknown user is not told
            // apart from a known one by how fast the refusal comes
            let nobody = format!("cn=gpuhub-no-such-user,{}", self.config.user_base);
            let _ = self.check_password(&nobody, password).await;
            return Err(IdentityError::InvalidCredentials);
        };
        self.check_password(&entry.dn, password).await?;
        let groups = self.groups(svc, username, &entry.dn).await?;
        self.to_user(username, entry, groups)
    }

    async fn lookup_on(&self, svc: &mut Ldap, username: &str) -> Result<Option<DirectoryUser>, IdentityError> {
        let Some(entry) = self.find_user(svc, username).await? else {
            return Ok(None);
        };
        let groups = self.groups(svc, username, &entry.dn).await?;
        self.to_user(username, entry, groups).map(Some)
    }
}

#[async_trait]
impl Directory for LdapDirectory {
    async fn authenticate(&self, username: &str, password: &str) -> Result<DirectoryUser, IdentityError> {
        // An empty simple bind is an unauthenticated bind (RFC 4513 5.1.2): refused before it is sent.
        if password.is_empty() {
            return Err(IdentityError::EmptyPassword);
        }
        if username.is_empty() {
            return Err(IdentityError::InvalidCredentials);
        }
        let mut svc = self.service_connection().await?;
        let result = self.authenticate_on(&mut svc, username, password).await;
        let _ = svc.unbind().await;
        result
    }

    async fn lookup(&self, username: &str) -> Result<Option<DirectoryUser>, IdentityError> {
        if username.is_empty() {
            return Ok(None);
        }
        let mut svc = self.service_connection().await?;
        let result = self.lookup_on(&mut svc, username).await;
        let _ = svc.unbind().await;
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> LdapConfig {
        let mut c = LdapConfig::new("ldap://ldap.example.org:389", "ou=people,dc=example,dc=org", "ou=groups,dc=x");
        c.starttls = true;
        c
    }

    fn config_err(c: &LdapConfig) -> String {
        match c.validate() {
            Err(IdentityError::Config(m)) => m,
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn escapes_the_rfc4515_specials() {
        assert_eq!(escape_filter_value("alice"), "alice");
        assert_eq!(escape_filter_value("*"), "\\2a");
        assert_eq!(escape_filter_value("a*)(uid=*"), "a\\2a\\29\\28uid=\\2a");
        assert_eq!(escape_filter_value("back\\slash"), "back\\5cslash");
        assert_eq!(escape_filter_value("nul\0"), "nul\\00");
        assert_eq!(escape_filter_value("jürgen"), "jürgen");
        assert_eq!(escape_filter_value(""), "");
    }

    #[test]
    fn fills_placeholders_once_and_escaped() {
        let g = default_group_filter();
        assert_eq!(
            fill_filter(&g, &[("username", "bob"), ("dn", "uid=bob,ou=people")]),
            "(|(memberUid=bob)(member=uid=bob,ou=people))"
        );
        // an injection attempt stays a literal value
        assert_eq!(fill_filter("(uid={username})", &[("username", "*)(uid=*")]), "(uid=\\2a\\29\\28uid=\\2a)");
        // a value holding a placeholder is not substituted again
        assert_eq!(
            fill_filter("(&(uid={username})(x={dn}))", &[("username", "{dn}"), ("dn", "D")]),
            "(&(uid={dn})(x=D))"
        );
        // unknown and unclosed braces are kept
        assert_eq!(fill_filter("(a={other})(b={username", &[("username", "u")]), "(a={other})(b={username");
    }

    #[test]
    fn defaults_come_from_serde() {
        let c: LdapConfig = toml::from_str(
            "url = \"ldaps://ldap:636\"\nuser_base = \"ou=people,dc=e\"\ngroup_base = \"ou=groups,dc=e\"\n",
        )
        .unwrap();
        assert_eq!(c.user_filter, "(uid={username})");
        assert_eq!(c.group_filter, "(|(memberUid={username})(member={dn}))");
        assert_eq!(c.admin_group.as_deref(), Some("gpuhub-admins"));
        assert_eq!(c.timeout_secs, 10);
        assert!(!c.starttls && !c.allow_plaintext && c.bind_dn.is_none() && c.ca_file.is_none());
        c.validate().unwrap();
        let unknown = toml::from_str::<LdapConfig>(
            "url = \"ldaps://l\"\nuser_base = \"a\"\ngroup_base = \"b\"\nbindpw = \"x\"\n",
        );
        assert!(unknown.unwrap_err().to_string().contains("unknown field"));
    }

    #[test]
    fn validation_refuses_plaintext_and_nonsense() {
        config().validate().unwrap();
        let mut c = config();
        c.starttls = false;
        assert!(config_err(&c).contains("plaintext"), "{}", config_err(&c));
        c.allow_plaintext = true;
        c.validate().unwrap();

        let mut c = config();
        c.url = "ldaps://ldap.example.org".into();
        assert!(config_err(&c).contains("starttls cannot"));
        c.starttls = false;
        c.validate().unwrap();

        for url in ["http://ldap", "ldap.example.org:389", "ldap://", "ldaps:///dc=x"] {
            let mut c = config();
            c.url = url.into();
            config_err(&c);
        }

        let mut c = config();
        c.bind_dn = Some("cn=svc".into());
        assert!(config_err(&c).contains("together"));
        c.bind_password = Some(String::new());
        assert!(config_err(&c).contains("anonymous bind"));
        c.bind_password = Some("pw".into());
        c.validate().unwrap();

        let mut c = config();
        c.user_filter = "(uid=alice)".into();
        assert!(config_err(&c).contains("{username}"));
        c.user_filter = "uid={username}".into();
        assert!(config_err(&c).contains("parentheses"));

        let mut c = config();
        c.group_filter = "(objectClass=posixGroup)".into();
        assert!(config_err(&c).contains("placeholder"));

        let mut c = config();
        c.user_base = " ".into();
        assert!(config_err(&c).contains("user_base"));

        let mut c = config();
        c.timeout_secs = 0;
        assert!(config_err(&c).contains("timeout_secs"));
    }

    #[test]
    fn debug_redacts_the_bind_password() {
        let mut c = config();
        c.bind_dn = Some("cn=svc,dc=example,dc=org".into());
        c.bind_password = Some("hunter2-very-secret".into());
        let printed = format!("{c:?}");
        assert!(!printed.contains("hunter2"), "{printed}");
        assert!(printed.contains("<redacted>") && printed.contains("cn=svc,dc=example,dc=org"), "{printed}");
        let dir = LdapDirectory::new(c).unwrap();
        assert!(!format!("{dir:?}").contains("hunter2"));
    }

    #[test]
    fn a_missing_or_empty_ca_file_is_a_config_error() {
        let mut c = config();
        c.ca_file = Some("/nonexistent/ca.pem".into());
        assert!(matches!(LdapDirectory::new(c.clone()), Err(IdentityError::Config(m)) if m.contains("ca_file")));
        let empty = tempfile::NamedTempFile::new().unwrap();
        c.ca_file = Some(empty.path().into());
        assert!(matches!(LdapDirectory::new(c), Err(IdentityError::Config(m)) if m.contains("no PEM")));
    }

    #[test]
    fn admin_group_is_matched_case_insensitively_and_can_be_off() {
        let dir = LdapDirectory::new(config()).unwrap();
        let entry = |uid: Option<&str>| {
            let mut attrs = std::collections::HashMap::new();
            if let Some(u) = uid {
                attrs.insert("uidNumber".to_owned(), vec![u.to_owned()]);
            }
            attrs.insert("gidNumber".to_owned(), vec!["100".to_owned()]);
            attrs.insert("cn".to_owned(), vec!["Bob B".to_owned()]);
            SearchEntry { dn: "uid=bob,dc=x".into(), attrs, bin_attrs: Default::default() }
        };
        let u = dir.to_user("bob", entry(Some("7")), vec!["GPUHUB-Admins".into()]).unwrap();
        assert!(u.is_admin);
        assert_eq!((u.uid_number, u.gid_number, u.display_name.as_deref()), (7, 100, Some("Bob B")));
        assert!(matches!(
            dir.to_user("bob", entry(None), vec![]),
            Err(IdentityError::MissingAttribute { attribute: "uidNumber", .. })
        ));
        assert!(matches!(
            dir.to_user("bob", entry(Some("-1")), vec![]),
            Err(IdentityError::MissingAttribute { attribute: "uidNumber", .. })
        ));
        let mut c = config();
        c.admin_group = Some(String::new());
        let dir = LdapDirectory::new(c).unwrap();
        assert!(!dir.to_user("bob", entry(Some("7")), vec!["gpuhub-admins".into()]).unwrap().is_admin);
    }
}
