//! Outside sign-in: accounts whose identity is an LDAP directory's or an OpenID provider's, made here at
//! their first sign-in and kept in step at every later one: role from the admin group, UID/GID from
//! `uidNumber`/`gidNumber` (LDAP), membership of member-listed queues from groups named like them.
//! Directory accounts are checked again every `identity_recheck_secs`: one removed upstream is disabled
//! (tokens revoked, connections closed, running work stopped). OpenID accounts' sessions and tokens last
//! `oidc_session_hours`, so one removed at the provider is out when they end.

use crate::config::Config;
use gpuhub_core::user::UserSource;
use gpuhub_identity::{Directory, IdentityError, LdapDirectory, OidcClient, OidcConfig, PendingLogin};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a browser has to come back from the OpenID provider.
const PENDING_TTL: Duration = Duration::from_secs(600);
/// The most sign-ins waiting on the provider at once (older ones are dropped first).
const MAX_PENDING: usize = 10_000;

/// Why a sign-in through an outside source failed.
#[derive(Debug, thiserror::Error)]
pub enum SignInError {
    /// No OpenID provider is configured.
    #[error("no OpenID provider is configured")]
    NoProvider,
    /// The provider cannot be reached or failed (try again later).
    #[error("the OpenID provider: {0}")]
    Provider(String),
    /// The sign-in is refused (unknown or expired, or the provider said no).
    #[error("{0}")]
    Refused(String),
}

/// The configured sign-in sources.
pub struct Identities {
    directory: Option<Arc<dyn Directory>>,
    oidc_config: Option<OidcConfig>,
    oidc: tokio::sync::OnceCell<OidcClient>,
    /// Sign-ins sent to the provider, by `state`: what `finish` needs, when, and where to go after.
    pending: Mutex<HashMap<String, (PendingLogin, Instant, String)>>,
    /// The host's accounts, which a directory's `uidNumber` must not be another's of.
    host: crate::hostids::HostAccounts,
}

impl fmt::Debug for Identities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identities")
            .field("directory", &self.directory.is_some())
            .field("oidc", &self.oidc_config)
            .finish_non_exhaustive()
    }
}

impl Identities {
    /// The sources `config` names; `directory` replaces the LDAP directory (a fake in tests).
    pub fn new(config: &Config, directory: Option<Arc<dyn Directory>>) -> Result<Self, String> {
        let directory = match (directory, &config.ldap) {
            (Some(d), _) => Some(d),
            (None, Some(l)) => Some(Arc::new(LdapDirectory::new(l.clone()).map_err(|e| format!("ldap: {e}"))?) as _),
            (None, None) => None,
        };
        Ok(Self {
            directory,
            oidc_config: config.oidc.clone(),
            oidc: tokio::sync::OnceCell::new(),
            pending: Mutex::default(),
            host: crate::hostids::HostAccounts::default(),
        })
    }

    /// These sources, with the host's accounts read from `host`.
    pub fn with_host(self, host: crate::hostids::HostAccounts) -> Self {
        Self { host, ..self }
    }

    /// The host's accounts.
    pub fn host(&self) -> &crate::hostids::HostAccounts {
        &self.host
    }

    /// The LDAP directory, when there is one.
    pub fn directory(&self) -> Option<&Arc<dyn Directory>> {
        self.directory.as_ref()
    }

    /// Whether users may sign in through an OpenID provider.
    pub fn oidc_enabled(&self) -> bool {
        self.oidc_config.is_some()
    }

    /// The provider's client, discovered at first use (and again after a failed discovery).
    async fn oidc(&self) -> Result<&OidcClient, SignInError> {
        let Some(cfg) = &self.oidc_config else { return Err(SignInError::NoProvider) };
        self.oidc.get_or_try_init(|| OidcClient::discover(cfg)).await.map_err(|e| SignInError::Provider(e.to_string()))
    }

    /// Where to send a browser to sign in at the provider; `next` is where it goes afterwards.
    pub async fn oidc_begin(&self, next: &str) -> Result<String, SignInError> {
        let (url, pending) = self.oidc().await?.begin();
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        p.retain(|_, (_, at, _)| now.duration_since(*at) < PENDING_TTL);
        if p.len() >= MAX_PENDING
            && let Some(oldest) = p.iter().min_by_key(|(_, (_, at, _))| *at).map(|(k, _)| k.clone())
        {
            p.remove(&oldest);
        }
        p.insert(pending.state.clone(), (pending, now, next.to_owned()));
        Ok(url)
    }

    /// The provider's answer (`code`, `state`) checked: who signed in, and where they were going. A
    /// state not handed out here (or used already, or too old) is refused.
    pub async fn oidc_finish(&self, code: &str, state: &str) -> Result<(Outside, String), SignInError> {
        let found = self.pending.lock().unwrap_or_else(|e| e.into_inner()).remove(state);
        let Some((pending, _, next)) = found.filter(|(_, at, _)| at.elapsed() < PENDING_TTL) else {
            return Err(SignInError::Refused("this sign-in is unknown or expired: start again".into()));
        };
        let user = self.oidc().await?.finish(pending, code, state).await.map_err(|e| match e {
            IdentityError::Provider(m) => SignInError::Provider(m),
            other => SignInError::Refused(format!("sign-in refused: {other}")),
        })?;
        let o = Outside {
            username: user.username,
            ids: None,
            groups: user.groups,
            admin: user.is_admin,
            source: UserSource::Oidc,
        };
        Ok((o, next))
    }
}

/// What an outside source says of someone who signed in.
#[derive(Debug, Clone)]
pub struct Outside {
    pub username: String,
    /// UID and GID (an LDAP directory's); `None`: gpuhub hands out a UID.
    pub ids: Option<(u32, u32)>,
    pub groups: Vec<String>,
    pub admin: bool,
    pub source: UserSource,
}
