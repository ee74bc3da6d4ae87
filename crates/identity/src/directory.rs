//! The narrow trait gpuhub signs users in through when they come from a directory, and a recording
//! fake of it for tests of the code above.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;

use crate::IdentityError;

/// A user as a directory knows them, with what gpuhub needs to run their workloads as them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectoryUser {
    /// The username the user signs in with (the value the user filter matched).
    pub username: String,
    /// The user's distinguished name in the directory.
    pub dn: String,
    /// The POSIX user id (`uidNumber`).
    pub uid_number: u32,
    /// The POSIX primary group id (`gidNumber`).
    pub gid_number: u32,
    /// The common names (`cn`) of the groups the user is a member of, sorted.
    pub groups: Vec<String>,
    /// Whether the user is in the configured admin group.
    pub is_admin: bool,
    /// A name to show (`displayName`, else `cn`), when the entry has one.
    pub display_name: Option<String>,
}

/// A source of users that checks passwords: an LDAP directory in production, [`FakeDirectory`] in
/// tests.
///
/// Contract: [`Directory::authenticate`] returns [`IdentityError::InvalidCredentials`] both for an
/// unknown user and for a wrong password, refuses an empty password with
/// [`IdentityError::EmptyPassword`] without asking the server, and never returns a user without
/// uid and gid numbers. [`Directory::lookup`] returns `Ok(None)` for a user that is not (or no
/// longer) in the directory, so a caller re-checking signed-in users can disable the ones removed
/// upstream.
#[async_trait]
pub trait Directory: Send + Sync + std::fmt::Debug {
    /// Checks `username`'s password against the directory and returns the user with their groups.
    async fn authenticate(&self, username: &str, password: &str) -> Result<DirectoryUser, IdentityError>;

    /// Looks `username` up without a password (as the service account); `None` when absent.
    async fn lookup(&self, username: &str) -> Result<Option<DirectoryUser>, IdentityError>;
}

/// One call a [`FakeDirectory`] received (passwords are not recorded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FakeCall {
    /// [`Directory::authenticate`] for this username.
    Authenticate(String),
    /// [`Directory::lookup`] for this username.
    Lookup(String),
}

#[derive(Debug, Default)]
struct FakeState {
    users: HashMap<String, (DirectoryUser, String)>,
    calls: Vec<FakeCall>,
}

/// An in-memory [`Directory`] for tests: the test sets users and their passwords, and reads back
/// the calls made. Clones share the same state. It keeps the trait's contract (empty password
/// refused, unknown user and wrong password alike).
#[derive(Debug, Clone, Default)]
pub struct FakeDirectory {
    state: Arc<Mutex<FakeState>>,
}

impl FakeDirectory {
    /// An empty directory.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) `user`, who signs in with `password`.
    pub fn add_user(&self, user: DirectoryUser, password: &str) {
        self.with(|s| s.users.insert(user.username.clone(), (user, password.to_owned())));
    }

    /// Removes the user named `username`, as if deleted upstream; whether there was one.
    pub fn remove_user(&self, username: &str) -> bool {
        self.with(|s| s.users.remove(username).is_some())
    }

    /// The calls received so far, oldest first.
    pub fn calls(&self) -> Vec<FakeCall> {
        self.with(|s| s.calls.clone())
    }

    fn with<T>(&self, f: impl FnOnce(&mut FakeState) -> T) -> T {
        f(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

#[async_trait]
impl Directory for FakeDirectory {
    async fn authenticate(&self, username: &str, password: &str) -> Result<DirectoryUser, IdentityError> {
        self.with(|s| {
            s.calls.push(FakeCall::Authenticate(username.to_owned()));
            if password.is_empty() {
                return Err(IdentityError::EmptyPassword);
            }
            match s.users.get(username) {
                Some((user, pw)) if pw == password => Ok(user.clone()),
                _ => Err(IdentityError::InvalidCredentials),
            }
        })
    }

    async fn lookup(&self, username: &str) -> Result<Option<DirectoryUser>, IdentityError> {
        self.with(|s| {
            s.calls.push(FakeCall::Lookup(username.to_owned()));
            Ok(s.users.get(username).map(|(u, _)| u.clone()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> DirectoryUser {
        DirectoryUser {
            username: "alice".into(),
            dn: "uid=alice,ou=people,dc=example,dc=org".into(),
            uid_number: 20001,
            gid_number: 20001,
            groups: vec!["vision".into()],
            is_admin: false,
            display_name: None,
        }
    }

    #[tokio::test]
    async fn fake_keeps_the_contract_and_records_calls() {
        let dir = FakeDirectory::new();
        dir.add_user(alice(), "pw");
        assert_eq!(dir.authenticate("alice", "pw").await.unwrap(), alice());
        assert!(matches!(dir.authenticate("alice", "nope").await, Err(IdentityError::InvalidCredentials)));
        assert!(matches!(dir.authenticate("carol", "pw").await, Err(IdentityError::InvalidCredentials)));
        assert!(matches!(dir.authenticate("alice", "").await, Err(IdentityError::EmptyPassword)));
        assert_eq!(dir.lookup("alice").await.unwrap(), Some(alice()));
        assert!(dir.remove_user("alice"));
        assert_eq!(dir.lookup("alice").await.unwrap(), None);
        assert_eq!(
            dir.calls(),
            vec![
                FakeCall::Authenticate("alice".into()),
                FakeCall::Authenticate("alice".into()),
                FakeCall::Authenticate("carol".into()),
                FakeCall::Authenticate("alice".into()),
                FakeCall::Lookup("alice".into()),
                FakeCall::Lookup("alice".into()),
            ]
        );
    }
}
