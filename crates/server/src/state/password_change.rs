//! Accounts that must choose a new password before anything else: the first admin's, when the server
//! generated it (printed at the first start and left in `initial-admin-password`, where anyone who can
//! read the data directory or the log finds it). Kept in the store's settings as
//! [`SETTING`] (names separated by commas), and held here for every request to check.

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};

/// The store's setting that lists them.
pub const SETTING: &str = "password_change_required";

/// The accounts that must change their password; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct PasswordChange(Arc<RwLock<BTreeSet<String>>>);

impl PasswordChange {
    /// From the setting's value (`None`: nobody).
    pub fn from_setting(value: Option<&str>) -> Self {
        let names = value.unwrap_or_default().split(',').map(str::trim).filter(|n| !n.is_empty());
        Self(Arc::new(RwLock::new(names.map(str::to_owned).collect())))
    }

    /// Whether `username` must change their password first.
    pub fn required(&self, username: &str) -> bool {
        self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner).contains(username)
    }

    /// `username` changed their password: the setting's new value, or `None` when they were not listed.
    pub fn done(&self, username: &str) -> Option<String> {
        let mut names = self.0.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        names.remove(username).then(|| names.iter().cloned().collect::<Vec<_>>().join(","))
    }

    /// What a request of `method` to the API's `path` may do while its account must change its
    /// password: change it, sign out, or ask who it is.
    pub fn api_allows(method: &axum::http::Method, path: &str) -> bool {
        use axum::http::Method;
        matches!(
            (method, path),
            (&Method::POST, "/api/v1/me/password") | (&Method::POST, "/api/v1/logout") | (&Method::GET, "/api/v1/me")
        )
    }

    /// The portal's pages such an account may open: its Account page (the form), the change, and
    /// signing out.
    pub fn portal_allows(path: &str) -> bool {
        matches!(path, "/account" | "/account/password" | "/logout")
    }
}

/// Why a request of such an account is refused, in words for the API and the portal.
pub const REFUSAL: &str = "the password this account was given at the server's first start must be changed first: \
     `gpuhub passwd` (POST /api/v1/me/password), or the portal's Account page";

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Method;

    #[test]
    fn listed_until_changed() {
        let p = PasswordChange::from_setting(Some("admin, root,"));
        assert!(p.required("admin") && p.required("root") && !p.required("alice"));
        assert_eq!(p.done("alice"), None);
        assert_eq!(p.done("admin").as_deref(), Some("root"));
        assert!(!p.required("admin"));
        assert_eq!(p.clone().done("root").as_deref(), Some(""), "clones share the list");
        assert!(!PasswordChange::from_setting(None).required("admin"));
        assert!(PasswordChange::api_allows(&Method::POST, "/api/v1/me/password"));
        assert!(!PasswordChange::api_allows(&Method::GET, "/api/v1/workloads"));
        assert!(!PasswordChange::api_allows(&Method::DELETE, "/api/v1/me"));
        assert!(PasswordChange::portal_allows("/account") && !PasswordChange::portal_allows("/admin/users"));
    }
}
