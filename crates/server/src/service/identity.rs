//! Outside sign-in, the service's part (`crate::identity` holds the sources themselves): the accounts an
//! LDAP directory or an OpenID provider vouched for, made at their first sign-in and kept in step at every
//! later one, and the periodic recheck of directory accounts.

use super::{Kind, ServiceError};
use crate::identity::{Outside, SignInError};
use crate::state::AppState;
use gpuhub_core::user::{Role, User, UserSource};
use gpuhub_identity::IdentityError;
use gpuhub_store::StoreError;
use std::time::Duration;

impl From<SignInError> for ServiceError {
    fn from(e: SignInError) -> Self {
        match e {
            SignInError::NoProvider => Self::not_found(e.to_string()),
            SignInError::Provider(_) => Self::new(Kind::Unavailable, e.to_string()),
            SignInError::Refused(_) => Self::forbidden(e.to_string()),
        }
    }
}

/// The directory's answer to `username`/`password`: `Ok(None)` when the directory does not know them
/// or the password is wrong (the caller answers as for any wrong password); an unreachable directory
/// is [`Kind::Unavailable`].
pub async fn directory_sign_in(st: &AppState, username: &str, password: &str) -> Result<Option<Outside>, ServiceError> {
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
            Err(ServiceError::forbidden(format!("the directory's account cannot be used here: {e}")))
        }
        Err(e) => Err(ServiceError::new(Kind::Unavailable, format!("the LDAP directory: {e}"))),
    }
}

/// The account of someone an outside source vouched for: made at the first sign-in, brought in step
/// (role, UID/GID, queue memberships) at every later one. A local account of that name is not taken
/// over ([`Kind::Forbidden`]); an account whose group would be a team queue's is refused ([`Kind::Conflict`]).
pub async fn outside_account(st: &AppState, o: &Outside) -> Result<User, ServiceError> {
    gpuhub_core::names::validate("user", &o.username)
        .map_err(|e| ServiceError::forbidden(format!("the name {:?} cannot be a gpuhub account: {e}", o.username)))?;
    let role = if o.admin { Role::Admin } else { Role::User };
    let now = st.clock.now();
    // a team's folder would open to all of this account's work
    if let Some((_, gid)) = o.ids
        && let Some(q) = st.store.list_queues().await?.into_iter().find(|q| q.team_gid == Some(gid))
    {
        return Err(ServiceError::conflict(format!(
            "{}'s group {gid} in the directory is the team group of queue {}: an admin must give the team \
             another group before {} can sign in",
            o.username, q.name, o.username
        )));
    }
    // a directory's uidNumber that is another host account's would share that account's files
    if let Some((uid, _)) = o.ids {
        let owner = st.identities.host().uid_owner(uid, &o.username).map_err(ServiceError::internal)?;
        if let Some(owner) = owner {
            return Err(ServiceError::conflict(format!(
                "{}'s uid {uid} in the directory is the host's account {owner} ({}): an admin must give one of \
                 them another uid before {} can sign in",
                o.username,
                st.identities.host().passwd_path().display(),
                o.username
            )));
        }
    }
    let user = match st.store.get_user(&o.username).await {
        Ok(u) if u.source != o.source => {
            return Err(ServiceError::forbidden(format!(
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
async fn sync_queues(st: &AppState, username: &str, groups: &[String]) -> Result<(), ServiceError> {
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
pub async fn recheck(st: &AppState) -> Result<usize, ServiceError> {
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
                super::offboard::offboard(st, &u, false).await?;
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
