//! Sign-in through an OpenID Connect provider: authorization code flow with PKCE (S256), state and
//! nonce, ID token verified against the provider's published keys.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use openidconnect::core::{
    CoreAuthDisplay, CoreAuthPrompt, CoreErrorResponseType, CoreGenderClaim, CoreJsonWebKey,
    CoreJweContentEncryptionAlgorithm, CoreJwsSigningAlgorithm, CoreProviderMetadata, CoreResponseType,
    CoreRevocableToken, CoreRevocationErrorResponse, CoreTokenIntrospectionResponse, CoreTokenType,
};
use openidconnect::{
    AccessTokenHash, AdditionalClaims, AuthenticationFlow, AuthorizationCode, Client, ClientId, ClientSecret,
    CsrfToken, EmptyExtraTokenFields, EndpointMaybeSet, EndpointNotSet, EndpointSet, IdTokenFields, IssuerUrl, Nonce,
    OAuth2TokenResponse, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, RequestTokenError, Scope,
    StandardErrorResponse, StandardTokenResponse, TokenResponse, UserInfoClaims, reqwest,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::IdentityError;

/// How long one request to the provider (discovery, token, userinfo) may take.
const HTTP_TIMEOUT: Duration = Duration::from_secs(15);

/// How gpuhub signs users in through an OpenID Connect provider (Keycloak, Authentik, Dex, Google,
/// ...). Deserialised from gpuhub's configuration (unknown fields refused); `Debug` prints no
/// secret.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OidcConfig {
    /// The issuer, e.g. `https://id.example.org/realms/lab`; its
    /// `/.well-known/openid-configuration` is read by [`OidcClient::discover`].
    pub issuer_url: String,
    /// The client id registered at the provider.
    pub client_id: String,
    /// The client secret registered at the provider.
    pub client_secret: String,
    /// Where the provider sends the browser back with `code` and `state` (gpuhub's callback).
    pub redirect_url: String,
    /// Scopes asked for; must include `openid`.
    #[serde(default = "default_scopes")]
    pub scopes: Vec<String>,
    /// The claim that holds the gpuhub username.
    #[serde(default = "default_username_claim")]
    pub username_claim: String,
    /// The claim that holds the user's groups (a list of strings, or one string).
    #[serde(default = "default_groups_claim")]
    pub groups_claim: String,
    /// The group whose members are gpuhub admins; empty: nobody is made admin by the provider.
    #[serde(default = "default_admin_group")]
    pub admin_group: String,
}

fn default_scopes() -> Vec<String> {
    ["openid", "profile", "email"].map(String::from).to_vec()
}

fn default_username_claim() -> String {
    "preferred_username".into()
}

fn default_groups_claim() -> String {
    "groups".into()
}

fn default_admin_group() -> String {
    "gpuhub-admins".into()
}

impl fmt::Debug for OidcConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OidcConfig")
            .field("issuer_url", &self.issuer_url)
            .field("client_id", &self.client_id)
            .field("client_secret", &"<redacted>")
            .field("redirect_url", &self.redirect_url)
            .field("scopes", &self.scopes)
            .field("username_claim", &self.username_claim)
            .field("groups_claim", &self.groups_claim)
            .field("admin_group", &self.admin_group)
            .finish()
    }
}

impl OidcConfig {
    /// A configuration with the default scopes and claim names.
    pub fn new(
        issuer_url: impl Into<String>,
        client_id: impl Into<String>,
        client_secret: impl Into<String>,
        redirect_url: impl Into<String>,
    ) -> Self {
        Self {
            issuer_url: issuer_url.into(),
            client_id: client_id.into(),
            client_secret: client_secret.into(),
            redirect_url: redirect_url.into(),
            scopes: default_scopes(),
            username_claim: default_username_claim(),
            groups_claim: default_groups_claim(),
            admin_group: default_admin_group(),
        }
    }

    /// Checks the configuration without contacting the provider: URLs that parse, a client id,
    /// the `openid` scope, non-empty claim names.
    pub fn validate(&self) -> Result<(), IdentityError> {
        self.urls().map(|_| ())
    }

    fn urls(&self) -> Result<(IssuerUrl, RedirectUrl), IdentityError> {
        let bad = |m: String| IdentityError::Config(m);
        let issuer = IssuerUrl::new(self.issuer_url.clone())
            .map_err(|e| bad(format!("issuer_url {:?}: {e}", self.issuer_url)))?;
        let redirect = RedirectUrl::new(self.redirect_url.clone())
            .map_err(|e| bad(format!("redirect_url {:?}: {e}", self.redirect_url)))?;
        if self.client_id.is_empty() {
            return Err(bad("client_id is empty".into()));
        }
        if !self.scopes.iter().any(|s| s == "openid") {
            return Err(bad("scopes must include \"openid\"".into()));
        }
        if self.username_claim.is_empty() || self.groups_claim.is_empty() {
            return Err(bad("username_claim and groups_claim must not be empty".into()));
        }
        Ok((issuer, redirect))
    }
}

/// Every claim of a token, kept so that the configured claim names can be read, whatever they are.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(transparent)]
struct AllClaims(HashMap<String, Value>);

impl AdditionalClaims for AllClaims {}

type IdTokenExtra = IdTokenFields<
    AllClaims,
    EmptyExtraTokenFields,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJwsSigningAlgorithm,
>;
type OidcTokenResponse = StandardTokenResponse<IdTokenExtra, CoreTokenType>;
/// The openidconnect client as discovery leaves it: authorization endpoint known, token and
/// userinfo endpoints maybe.
type DiscoveredClient = Client<
    AllClaims,
    CoreAuthDisplay,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJsonWebKey,
    CoreAuthPrompt,
    StandardErrorResponse<CoreErrorResponseType>,
    OidcTokenResponse,
    CoreTokenIntrospectionResponse,
    CoreRevocableToken,
    CoreRevocationErrorResponse,
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
>;

/// What a caller keeps between [`OidcClient::begin`] and [`OidcClient::finish`] for one login
/// (in memory keyed by `state`, or serialised into a signed, encrypted cookie). `Debug` hides the
/// nonce and the PKCE verifier.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingLogin {
    /// The random `state` sent to the provider, expected back on the redirect.
    pub state: String,
    /// The random nonce the ID token must carry.
    pub nonce: String,
    /// The PKCE code verifier whose S256 challenge was sent.
    pub pkce_verifier: String,
}

impl fmt::Debug for PendingLogin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingLogin")
            .field("state", &self.state)
            .field("nonce", &"<redacted>")
            .field("pkce_verifier", &"<redacted>")
            .finish()
    }
}

/// A user signed in through the provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcUser {
    /// The provider's stable subject identifier (`sub`).
    pub subject: String,
    /// The value of the configured username claim.
    pub username: String,
    /// The `email` claim, when given.
    pub email: Option<String>,
    /// The values of the configured groups claim, sorted (empty when absent).
    pub groups: Vec<String>,
    /// Whether `groups` holds the configured admin group.
    pub is_admin: bool,
}

/// A client of one OpenID Connect provider, made by [`OidcClient::discover`].
pub struct OidcClient {
    config: OidcConfig,
    client: DiscoveredClient,
    http: reqwest::Client,
}

impl fmt::Debug for OidcClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OidcClient").field("config", &self.config).finish_non_exhaustive()
    }
}

/// The error and its sources, one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

impl OidcClient {
    /// Validates `config` and reads the provider's discovery document and signing keys.
    pub async fn discover(config: &OidcConfig) -> Result<Self, IdentityError> {
        let (issuer, redirect) = config.urls()?;
        // No redirects: following them would let a provider's answer point this client anywhere.
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(HTTP_TIMEOUT)
            .build()
            .map_err(|e| IdentityError::Provider(chain(&e)))?;
        let metadata = CoreProviderMetadata::discover_async(issuer, &http)
            .await
            .map_err(|e| IdentityError::Provider(format!("discovery of {}: {}", config.issuer_url, chain(&e))))?;
        let client = DiscoveredClient::from_provider_metadata(
            metadata,
            ClientId::new(config.client_id.clone()),
            Some(ClientSecret::new(config.client_secret.clone())),
        )
        .set_redirect_uri(redirect);
        Ok(Self { config: config.clone(), client, http })
    }

    /// The configuration this client was made with.
    pub fn config(&self) -> &OidcConfig {
        &self.config
    }

    /// Starts a login: the URL to send the browser to, and what to keep until the callback.
    pub fn begin(&self) -> (String, PendingLogin) {
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut request = self
            .client
            .authorize_url(
                AuthenticationFlow::<CoreResponseType>::AuthorizationCode,
                CsrfToken::new_random,
                Nonce::new_random,
            )
            .set_pkce_challenge(challenge);
        // openidconnect adds "openid" itself
        for scope in self.config.scopes.iter().filter(|s| *s != "openid") {
            request = request.add_scope(Scope::new(scope.clone()));
        }
        let (url, state, nonce) = request.url();
        let pending = PendingLogin {
            state: state.secret().clone(),
            nonce: nonce.secret().clone(),
            pkce_verifier: verifier.secret().clone(),
        };
        (url.to_string(), pending)
    }

    /// Completes a login from the redirect's `code` and `state`: checks the state, exchanges the
    /// code (with the PKCE verifier), verifies the ID token (signature, issuer, audience, expiry,
    /// nonce, access token hash) and reads the username and groups claims from it, or from the
    /// userinfo endpoint when the ID token lacks them.
    pub async fn finish(&self, pending: PendingLogin, code: &str, state: &str) -> Result<OidcUser, IdentityError> {
        if !constant_time_eq(pending.state.as_bytes(), state.as_bytes()) {
            return Err(IdentityError::StateMismatch);
        }
        let token = self
            .client
            .exchange_code(AuthorizationCode::new(code.to_owned()))
            .map_err(|e| IdentityError::Provider(chain(&e)))?
            .set_pkce_verifier(PkceCodeVerifier::new(pending.pkce_verifier))
            .request_async(&self.http)
            .await
            .map_err(|e| match e {
                RequestTokenError::ServerResponse(r) => IdentityError::CodeExchange(r.to_string()),
                e => IdentityError::Provider(format!("token request: {}", chain(&e))),
            })?;
        let id_token =
            token.id_token().ok_or_else(|| IdentityError::InvalidIdToken("the token response has none".into()))?;
        let verifier = self.client.id_token_verifier();
        let claims = id_token
            .claims(&verifier, &Nonce::new(pending.nonce))
            .map_err(|e| IdentityError::InvalidIdToken(chain(&e)))?;
        if let Some(expected) = claims.access_token_hash() {
            let invalid = |e: &dyn std::error::Error| IdentityError::InvalidIdToken(chain(e));
            let alg = id_token.signing_alg().map_err(|e| invalid(&e))?;
            let key = id_token.signing_key(&verifier).map_err(|e| invalid(&e))?;
            let actual = AccessTokenHash::from_token(token.access_token(), alg, key).map_err(|e| invalid(&e))?;
            if actual != *expected {
                return Err(IdentityError::InvalidIdToken("access token hash does not match".into()));
            }
        }
        let subject = claims.subject().to_string();
        let mut all = serde_json::to_value(claims).map_err(|e| IdentityError::InvalidIdToken(e.to_string()))?;
        let (user_claim, group_claim) = (&self.config.username_claim, &self.config.groups_claim);
        if all.get(user_claim).is_none() || all.get(group_claim).is_none() {
            if let Some(info) = self.userinfo(&token, &subject).await? {
                for (k, v) in info {
                    all.as_object_mut().map(|o| o.entry(k).or_insert(v));
                }
            }
        }
        user_from(&self.config, subject, &all)
    }

    /// The userinfo claims, or `None` when the provider has no userinfo endpoint.
    async fn userinfo(
        &self,
        token: &OidcTokenResponse,
        subject: &str,
    ) -> Result<Option<serde_json::Map<String, Value>>, IdentityError> {
        let Ok(request) = self
            .client
            .user_info(token.access_token().clone(), Some(openidconnect::SubjectIdentifier::new(subject.into())))
        else {
            return Ok(None);
        };
        let info: UserInfoClaims<AllClaims, CoreGenderClaim> = request
            .request_async(&self.http)
            .await
            .map_err(|e| IdentityError::Provider(format!("userinfo: {}", chain(&e))))?;
        match serde_json::to_value(info) {
            Ok(Value::Object(map)) => Ok(Some(map)),
            Ok(_) => Ok(None),
            Err(e) => Err(IdentityError::Provider(format!("userinfo: {e}"))),
        }
    }
}

/// Reads the claims `config` names out of the (verified) claims `all`.
fn user_from(config: &OidcConfig, subject: String, all: &Value) -> Result<OidcUser, IdentityError> {
    let username = match all.get(&config.username_claim) {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        _ => return Err(IdentityError::MissingClaim(config.username_claim.clone())),
    };
    let mut groups: Vec<String> = match all.get(&config.groups_claim) {
        Some(Value::Array(values)) => values.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect(),
        Some(Value::String(s)) => vec![s.clone()],
        _ => Vec::new(),
    };
    groups.sort();
    groups.dedup();
    let admin = &config.admin_group;
    let is_admin = !admin.is_empty() && groups.iter().any(|g| g == admin);
    let email = all.get("email").and_then(Value::as_str).map(str::to_owned);
    Ok(OidcUser { subject, username, email, groups, is_admin })
}

/// Compares two byte strings in time that depends only on their lengths.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> OidcConfig {
        OidcConfig::new("https://id.example.org/realms/lab", "gpuhub", "s3cr3t-client", "https://gpuhub/cb")
    }

    #[test]
    fn defaults_come_from_serde_and_unknown_fields_are_refused() {
        let c: OidcConfig = toml::from_str(
            "issuer_url = \"https://id\"\nclient_id = \"c\"\nclient_secret = \"s\"\nredirect_url = \"https://g/cb\"\n",
        )
        .unwrap();
        assert_eq!(c.scopes, ["openid", "profile", "email"]);
        assert_eq!((c.username_claim.as_str(), c.groups_claim.as_str()), ("preferred_username", "groups"));
        assert_eq!(c.admin_group, "gpuhub-admins");
        c.validate().unwrap();
        let err = toml::from_str::<OidcConfig>(
            "issuer_url = \"https://id\"\nclient_id = \"c\"\nclient_secret = \"s\"\nredirect_url = \"x\"\nsecret = 1\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
    }

    #[test]
    fn validation() {
        config().validate().unwrap();
        let mut c = config();
        c.scopes = vec!["profile".into()];
        assert!(matches!(c.validate(), Err(IdentityError::Config(m)) if m.contains("openid")));
        let mut c = config();
        c.redirect_url = "not a url".into();
        assert!(matches!(c.validate(), Err(IdentityError::Config(m)) if m.contains("redirect_url")));
        let mut c = config();
        c.issuer_url = "::".into();
        assert!(matches!(c.validate(), Err(IdentityError::Config(m)) if m.contains("issuer_url")));
        let mut c = config();
        c.client_id.clear();
        assert!(matches!(c.validate(), Err(IdentityError::Config(m)) if m.contains("client_id")));
    }

    #[test]
    fn debug_redacts_secrets() {
        let printed = format!("{:?}", config());
        assert!(!printed.contains("s3cr3t") && printed.contains("<redacted>"), "{printed}");
        let pending = PendingLogin { state: "st".into(), nonce: "n0nce".into(), pkce_verifier: "v3rifier".into() };
        let printed = format!("{pending:?}");
        assert!(!printed.contains("n0nce") && !printed.contains("v3rifier") && printed.contains("st"), "{printed}");
    }

    #[test]
    fn pending_login_round_trips_through_json() {
        let pending = PendingLogin { state: "a".into(), nonce: "b".into(), pkce_verifier: "c".into() };
        let json = serde_json::to_string(&pending).unwrap();
        assert_eq!(serde_json::from_str::<PendingLogin>(&json).unwrap(), pending);
    }

    #[test]
    fn claims_are_read_by_their_configured_names() {
        let all = serde_json::json!({
            "sub": "s-1", "preferred_username": "alice", "email": "a@x", "groups": ["vision", "gpuhub-admins", "vision"],
            "upn": "alice@corp", "role": "ops"
        });
        let u = user_from(&config(), "s-1".into(), &all).unwrap();
        assert_eq!(u.username, "alice");
        assert_eq!(u.email.as_deref(), Some("a@x"));
        assert_eq!(u.groups, ["gpuhub-admins", "vision"]);
        assert!(u.is_admin);
        let mut c = config();
        c.username_claim = "upn".into();
        c.groups_claim = "role".into();
        let u = user_from(&c, "s-1".into(), &all).unwrap();
        assert_eq!(
            (u.username.as_str(), u.groups.as_slice(), u.is_admin),
            ("alice@corp", &["ops".to_owned()][..], false)
        );
        c.username_claim = "nickname".into();
        assert!(matches!(user_from(&c, "s-1".into(), &all), Err(IdentityError::MissingClaim(n)) if n == "nickname"));
        c.username_claim = "upn".into();
        c.groups_claim = "absent".into();
        assert!(user_from(&c, "s-1".into(), &all).unwrap().groups.is_empty());
    }

    #[test]
    fn constant_time_eq_compares() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
