//! The one error type of this crate.

use std::time::Duration;

/// What can go wrong while configuring or asking an outside sign-in source.
///
/// The messages are lowercase and never contain a password, a client secret or a token.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// The username or the password is wrong, or the user does not exist: the two are deliberately
    /// not told apart, so that a caller cannot probe which usernames exist.
    #[error("invalid username or password")]
    InvalidCredentials,
    /// The password was empty. It is refused before any bind: an LDAP simple bind with a DN and an
    /// empty password is an unauthenticated bind, which some servers let succeed.
    #[error("empty password refused")]
    EmptyPassword,
    /// The configuration is unusable (bad URL, plaintext LDAP, unreadable CA file, missing
    /// placeholder, ...); the message says which field and why.
    #[error("invalid identity configuration: {0}")]
    Config(String),
    /// A directory entry lacks an attribute gpuhub needs (uidNumber or gidNumber), or its value is
    /// not a number that fits in 32 bits.
    #[error("directory entry {dn} has no usable {attribute}")]
    MissingAttribute {
        /// The DN of the entry.
        dn: String,
        /// The attribute that is missing or malformed.
        attribute: &'static str,
    },
    /// The user filter matched more than one entry, so the username is ambiguous.
    #[error("{count} directory entries match the username {username:?}")]
    AmbiguousUser {
        /// The username that was searched for.
        username: String,
        /// How many entries matched.
        count: usize,
    },
    /// The directory server could not be reached, the TLS handshake failed (for example a server
    /// certificate not signed by the configured CA), or an operation failed.
    #[error("directory error: {0}")]
    Directory(String),
    /// The directory server did not answer within the configured timeout.
    #[error("directory did not answer within {0:?}")]
    Timeout(Duration),
    /// The `state` returned to the redirect URL is not the one this login started with (a forged
    /// or mixed-up callback).
    #[error("openid connect state does not match the pending login")]
    StateMismatch,
    /// The provider could not be reached or discovered, or answered something unusable.
    #[error("openid connect provider error: {0}")]
    Provider(String),
    /// The provider refused to exchange the authorization code (wrong, expired or replayed code,
    /// wrong PKCE verifier, wrong client credentials).
    #[error("openid connect code exchange refused: {0}")]
    CodeExchange(String),
    /// The ID token did not verify (signature, issuer, audience, expiry, nonce, access token hash)
    /// or was absent.
    #[error("invalid id token: {0}")]
    InvalidIdToken(String),
    /// A claim gpuhub needs (the username claim) is in neither the ID token nor the userinfo.
    #[error("claim {0:?} missing from the id token and the userinfo")]
    MissingClaim(String),
}
