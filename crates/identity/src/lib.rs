//! gpuhub's outside sign-in sources, each behind a narrow interface so that the server can use them
//! without knowing the protocols:
//!
//! - an **LDAP directory** ([`LdapDirectory`], configured by [`LdapConfig`]) behind the
//!   [`Directory`] trait: a username and password in, a [`DirectoryUser`] with POSIX uid/gid
//!   numbers and group names out; [`FakeDirectory`] implements the same trait for tests of the
//!   code above;
//! - an **OpenID Connect provider** ([`OidcClient`], configured by [`OidcConfig`]): the
//!   authorization code flow with PKCE, in two steps, [`OidcClient::begin`] (a URL to send the
//!   browser to and a [`PendingLogin`] to keep) and [`OidcClient::finish`] (the callback's code
//!   and state in, a verified [`OidcUser`] out).
//!
//! Contract: nothing here stores sessions or users; every failure is an [`IdentityError`] whose
//! message carries no secret; a wrong password and an unknown user give the same
//! [`IdentityError::InvalidCredentials`]; LDAP passwords never travel without TLS unless the
//! configuration says `allow_plaintext`; configuration `Debug` output redacts passwords and
//! client secrets.

mod directory;
mod error;
mod ldap;
mod oidc;

pub use directory::{Directory, DirectoryUser, FakeCall, FakeDirectory};
pub use error::IdentityError;
pub use ldap::{LdapConfig, LdapDirectory, escape_filter_value};
pub use oidc::{OidcClient, OidcConfig, OidcUser, PendingLogin};
