//! Outside sign-in: accounts whose identity is an LDAP directory's or an OpenID provider's, made here at
//! their first sign-in and kept in step at every later one: role from the admin group, UID/GID from
//! `uidNumber`/`gidNumber` (LDAP), membership of member-listed queues from groups named like them.
//! Directory accounts are checked again every `identity_recheck_secs`: one removed upstream is disabled
//! (tokens revoked, connections closed, running work stopped). OpenID accounts' sessions and tokens last
//! `oidc_session_hours`, so one removed at the provider is out when they end.

use crate::config::Config;
use crate::error::ApiError;
use crate::state::AppState;
use gpuhub_core::user::{Role, User, UserSource};
use gpuhub_identity::{Directory, IdentityError, LdapDirectory, OidcClient, OidcConfig, PendingLogin};
use gpuhub_store::StoreError;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a browser has to come back from the OpenID provider.
const PENDING_TTL: Duration = Duration::from_secs(600);
/// The most sign-ins waiting on the provider at once (older ones are dropped first).
const MAX_PENDING: usize = 10_000;

/// The configured sign-in sources.
pub struct Identities {
    directory: Option<Arc<dyn Directory>>,
    oidc_config: Option<OidcConfig>,
    oidc: tokio::sync::OnceCell<OidcClient>,
    /// Sign-ins sent to the provider, by `state`: what `finish` needs, when, and where to go after.
    pending: Mutex<HashMap<String, (PendingLogin, Instant, String)>>,
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
        })
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
    async fn oidc(&self) -> Result<&OidcClient, ApiError> {
        let Some(cfg) = &self.oidc_config else { return Err(ApiError::not_found("no OpenID provider is configured")) };
        self.oidc
            .get_or_try_init(|| OidcClient::discover(cfg))
            .await
            .map_err(|e| ApiError::unavailable(format!("the OpenID provider: {e}")))
    }

    /// Where to send a browser to sign in at the provider; `next` is where it goes afterwards.
    pub async fn oidc_begin(&self, next: &str) -> Result<String, ApiError> {
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
    pub async fn oidc_finish(&self, code: &str, state: &str) -> Result<(Outside, String), ApiError> {
        let found = self.pending.lock().unwrap_or_else(|e| e.into_inner()).remove(state);
        let Some((pending, _, next)) = found.filter(|(_, at, _)| at.elapsed() < PENDING_TTL) else {
            return Err(ApiError::forbidden("this sign-in is unknown or expired: start again"));
        };
        let user = self.oidc().await?.finish(pending, code, state).await.map_err(|e| match e {
            IdentityError::Provider(m) => ApiError::unavailable(format!("the OpenID provider: {m}")),
            other => ApiError::forbidden(format!("sign-in refused: {other}")),
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

/// The directory's answer to `username`/`password`: `Ok(None)` when the directory does not know them
/// or the password is wrong (the caller answers as for any wrong password); an unreachable directory
/// is a 503.
pub async fn directory_sign_in(st: &AppState, username: &str, password: &str) -> Result<Option<Outside>, ApiError> {
    let Some(dir) = st.identities.directory() else { return Ok(None) };
    match dir.authenticate(username, password).await {
        Ok(u) => Ok(Some(Outside {
            username: u.username,
            ids: Some((u.uid_number, u.gid_number)),
            groups: u.groups,
            admin: u.is_admin,
            source: UserSource::Ldap,
        })),
        Err(IdentityError::InvalidCredentials | IdentityError::EmptyPassword) => Ok(None),
        Err(e @ (IdentityError::MissingAttribute { .. } | IdentityError::AmbiguousUser { .. })) => {
            Err(ApiError::forbidden(format!("the directory's account cannot be used here: {e}")))
        }
        Err(e) => Err(ApiError::unavailable(format!("the LDAP directory: {e}"))),
    }
}

/// The account of someone an outside source vouched for: made at the first sign-in, brought in step
/// (role, UID/GID, queue memberships) at every later one. A local account of that name is not taken
/// over (403); an account whose group would be a team queue's is refused (409).
pub async fn account(st: &AppState, o: &Outside) -> Result<User, ApiError> {
    gpuhub_core::names::validate("user", &o.username)
        .map_err(|e| ApiError::forbidden(format!("the name {:?} cannot be a gpuhub account: {e}", o.username)))?;
    let role = if o.admin { Role::Admin } else { Role::User };
    let now = st.clock.now();
    // a team's folder would open to all of this account's work
    if let Some((_, gid)) = o.ids
        && let Some(q) = st.store.list_queues().await?.into_iter().find(|q| q.team_gid == Some(gid))
    {
        return Err(ApiError::conflict(format!(
            "{}'s group {gid} in the directory is the team group of queue {}: an admin must give the team \
             another group before {} can sign in",
            o.username, q.name, o.username
        )));
    }
    let user = match st.store.get_user(&o.username).await {
        Ok(u) if u.source != o.source => {
            return Err(ApiError::forbidden(format!(
                "{} is a {} account here: sign in with its password",
                u.username,
                u.source.as_str()
            )));
        }
        Ok(u) => {
            let (uid, gid) = o.ids.unwrap_or((u.uid, u.gid));
            if (u.role, u.uid, u.gid) != (role, uid, gid) {
                st.store.sync_external_user(&u.username, role, uid, gid).await?;
            }
            st.store.get_user(&u.username).await?
        }
        Err(StoreError::NotFound { .. }) => match o.ids {
            Some(ids) => st.store.create_external_user(&o.username, role, ids, o.source, now).await?,
            None => {
                let u = st.store.create_user(&o.username, "!", role, now).await?;
                st.store.set_source(&u.username, o.source).await?;
                st.store.get_user(&u.username).await?
            }
        },
        Err(e) => return Err(e.into()),
    };
    sync_queues(st, &user.username, &o.groups).await?;
    Ok(user)
}

/// Puts `username` in every member-listed queue named like one of `groups`, and out of the others:
/// for outside accounts the source's groups are the membership.
async fn sync_queues(st: &AppState, username: &str, groups: &[String]) -> Result<(), ApiError> {
    let mut changed = false;
    for q in st.store.list_queues().await? {
        let Some(members) = &q.members else { continue };
        let (want, has) = (groups.contains(&q.name), members.iter().any(|m| m == username));
        if want == has {
            continue;
        }
        let mut next = q.clone();
        let list = next.members.get_or_insert_with(Vec::new);
        if want {
            list.push(username.to_owned());
        } else {
            list.retain(|m| m != username);
        }
        if st.store.update_queue_if(&q, &next, st.clock.now()).await? {
            changed = true;
        } else {
            tracing::warn!(queue = %q.name, user = username, "queue changed meanwhile: membership synced at the next sign-in");
        }
    }
    // a membership gained or lost may start (or hold) queued work
    if changed {
        st.controller.kick();
    }
    Ok(())
}

/// Checks every enabled directory account against the directory: one it no longer has is disabled
/// (and offboarded as an admin's disabling does); one whose role or UID changed is brought in step.
/// Returns how many were disabled.
pub async fn recheck(st: &AppState) -> Result<usize, ApiError> {
    let Some(dir) = st.identities.directory() else { return Ok(0) };
    let mut disabled = 0;
    for u in st.store.list_users().await? {
        if u.source != UserSource::Ldap || u.disabled {
            continue;
        }
        match dir.lookup(&u.username).await {
            Ok(Some(found)) => {
                let role = if found.is_admin { Role::Admin } else { Role::User };
                if (u.role, u.uid, u.gid) != (role, found.uid_number, found.gid_number) {
                    st.store.sync_external_user(&u.username, role, found.uid_number, found.gid_number).await?;
                }
            }
            Ok(None) => {
                tracing::info!(user = %u.username, "gone from the directory: disabled");
                crate::api::account::offboard(st, &u, false).await?;
                disabled += 1;
            }
            Err(e) => {
                // an unreachable directory disables nobody: checked again next time
                tracing::warn!(error = %e, "cannot check accounts against the directory");
                return Ok(disabled);
            }
        }
    }
    Ok(disabled)
}

/// Runs [`recheck`] every `identity_recheck_secs` until `until` ends.
pub async fn run(st: AppState, until: impl std::future::Future<Output = ()>) {
    if st.identities.directory().is_none() {
        return until.await;
    }
    let every = Duration::from_secs(st.config.identity_recheck_secs.max(1));
    tokio::pin!(until);
    loop {
        tokio::select! {
            _ = &mut until => return,
            _ = tokio::time::sleep(every) => {
                if let Err(e) = recheck(&st).await {
                    tracing::warn!(error = %e.detail, "directory recheck failed");
                }
            }
        }
    }
}
