//! Object-storage datasets: an S3 bucket, or a prefix of one, that the hub mounts on its host and
//! workloads see at `/datasets/<name>`. The secret key is write-only: answers show [`SECRET_SET`].

use crate::CoreError;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What answers show in place of a secret that is set.
pub const SECRET_SET: &str = "<set>";

/// A secret (an S3 secret key): never serialized (it reads [`SECRET_SET`]) nor printed by `Debug`.
/// Past the API the server holds it sealed (`v1:…`), and the store keeps only that sealed text.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }

    /// The text itself (plain as a request gave it, or sealed as the server keeps it).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(SECRET_SET)
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Secret)
    }
}

/// An S3 bucket or prefix (`POST /api/v1/datasets` `{"s3": {…}}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct S3Source {
    /// `s3://bucket` or `s3://bucket/prefix`.
    pub url: String,
    /// The S3 server, `https://s3.example.org` or `http://10.0.0.5:9000` (required).
    #[serde(default)]
    pub endpoint: String,
    /// The region, where the server wants one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// The access key id; absent with `secret_key`: anonymous access (a public bucket).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_key: Option<String>,
    /// The secret key: write-only, stored encrypted, shown back as `"<set>"`. Sending `"<set>"` when
    /// changing a registration keeps the stored one (for the same endpoint and access key only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub secret_key: Option<Secret>,
}

impl S3Source {
    /// The bucket and the prefix (without slashes at either end; empty for the whole bucket).
    pub fn bucket_and_prefix(&self) -> (&str, &str) {
        let rest = self.url.strip_prefix("s3://").unwrap_or(&self.url);
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        (bucket, prefix.trim_matches('/'))
    }

    /// A bucket name as S3 has them; a prefix without `..`, control characters or `//`; an endpoint
    /// `http(s)://host[:port]` without credentials or spaces; both keys or neither.
    pub fn validate(&self) -> Result<(), CoreError> {
        let bad = |field: &str, reason: String| Err(CoreError::invalid(format!("s3.{field}"), reason));
        let Some(rest) = self.url.strip_prefix("s3://") else {
            return bad("url", format!("{:?} is not s3://bucket/prefix", self.url));
        };
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let bucket_ok = (3..=63).contains(&bucket.len())
            && bucket.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-')
            && bucket.starts_with(|c: char| c.is_ascii_alphanumeric())
            && bucket.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !bucket_ok {
            return bad(
                "url",
                format!(
                    "{bucket:?} is not a bucket name (3 to 63 of a-z, 0-9, '.' and '-', a letter or digit at each end)"
                ),
            );
        }
        let prefix = prefix.trim_end_matches('/');
        if prefix.len() > 1024
            || prefix.chars().any(char::is_control)
            || prefix.split('/').any(|p| p.is_empty() || p == "." || p == "..") && !prefix.is_empty()
        {
            return bad("url", format!("{prefix:?} is not a prefix (no '..', '.', '//' or control characters)"));
        }
        let endpoint = self.endpoint.trim();
        if endpoint.is_empty() {
            return bad("endpoint", "is missing: give the S3 server, e.g. https://s3.example.org".into());
        }
        let host = endpoint.strip_prefix("https://").or_else(|| endpoint.strip_prefix("http://"));
        let Some(host) = host.map(|h| h.trim_end_matches('/')) else {
            return bad("endpoint", format!("{endpoint:?} is not an http:// or https:// URL"));
        };
        let host_ok = !host.is_empty()
            && host.len() <= 260
            && host.chars().all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c));
        if !host_ok {
            return bad("endpoint", format!("{endpoint:?} is not http(s)://host[:port]"));
        }
        if let Some(r) = &self.region {
            if r.is_empty() || r.len() > 64 || !r.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
                return bad("region", format!("{r:?} is not a region name"));
            }
        }
        match (&self.access_key, &self.secret_key) {
            (Some(a), Some(s)) => {
                if a.is_empty() || a.len() > 128 || !a.chars().all(|c| c.is_ascii_graphic()) {
                    return bad("access_key", "must be 1 to 128 printable characters without spaces".into());
                }
                let s = s.expose();
                if s.is_empty() || s.len() > 256 || s.chars().any(char::is_control) {
                    return bad("secret_key", "must be 1 to 256 characters without control characters".into());
                }
            }
            (None, None) => {}
            (Some(_), None) => {
                return bad("secret_key", "is missing: give access_key and secret_key, or neither".into());
            }
            (None, Some(_)) => {
                return bad("access_key", "is missing: give access_key and secret_key, or neither".into());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::Dataset;

    fn src(url: &str, endpoint: &str) -> S3Source {
        S3Source {
            url: url.into(),
            endpoint: endpoint.into(),
            region: None,
            access_key: Some("AKID".into()),
            secret_key: Some(Secret::new("s3cr3t-value")),
        }
    }

    fn field_of(e: &CoreError) -> String {
        match e {
            CoreError::Invalid { field, .. } => field.clone(),
            other => panic!("not an invalid-field error: {other}"),
        }
    }

    #[test]
    fn good_sources() {
        for (url, endpoint, bucket, prefix) in [
            ("s3://imagenet", "http://127.0.0.1:9000", "imagenet", ""),
            ("s3://my-data.lab/train/2024/", "https://s3.example.org", "my-data.lab", "train/2024"),
            ("s3://abc/x", "http://[::1]:9000/", "abc", "x"),
        ] {
            let s = src(url, endpoint);
            assert!(s.validate().is_ok(), "{url} {endpoint}: {:?}", s.validate());
            assert_eq!(s.bucket_and_prefix(), (bucket, prefix));
        }
        let anonymous = S3Source { access_key: None, secret_key: None, ..src("s3://public", "https://s3.example.org") };
        assert!(anonymous.validate().is_ok());
    }

    #[test]
    fn bad_sources_name_their_field() {
        for (s, field, why) in [
            (src("http://bucket/x", "http://h"), "s3.url", "s3://bucket/prefix"),
            (src("s3://Bucket", "http://h"), "s3.url", "bucket name"),
            (src("s3://ab", "http://h"), "s3.url", "bucket name"),
            (src("s3://-ab", "http://h"), "s3.url", "bucket name"),
            (src("s3://abc/a/../b", "http://h"), "s3.url", "'..'"),
            (src("s3://abc/a//b", "http://h"), "s3.url", "'//'"),
            (src("s3://abc", ""), "s3.endpoint", "missing"),
            (src("s3://abc", "ftp://h"), "s3.endpoint", "http://"),
            (src("s3://abc", "http://user:pw@h"), "s3.endpoint", "host"),
            (src("s3://abc", "http://h --no-check"), "s3.endpoint", "host"),
            (S3Source { secret_key: None, ..src("s3://abc", "http://h") }, "s3.secret_key", "missing"),
            (S3Source { access_key: None, ..src("s3://abc", "http://h") }, "s3.access_key", "missing"),
            (S3Source { access_key: Some("a b".into()), ..src("s3://abc", "http://h") }, "s3.access_key", "spaces"),
            (S3Source { region: Some("us east".into()), ..src("s3://abc", "http://h") }, "s3.region", "region"),
        ] {
            let e = s.validate().unwrap_err();
            assert_eq!(field_of(&e), field, "{s:?}: {e}");
            assert!(e.to_string().contains(why), "{s:?}: {e}");
        }
    }

    #[test]
    fn the_secret_is_never_shown() {
        let s = src("s3://abc", "http://h");
        let json = serde_json::to_string(&s).unwrap();
        assert!(!json.contains("s3cr3t") && json.contains(r#""secret_key":"<set>""#), "{json}");
        let debug = format!("{s:?}");
        assert!(!debug.contains("s3cr3t") && debug.contains("redacted"), "{debug}");
        let back: S3Source =
            serde_json::from_str(r#"{"url":"s3://abc","endpoint":"http://h","access_key":"a","secret_key":"k"}"#)
                .unwrap();
        assert_eq!(back.secret_key.unwrap().expose(), "k");
        assert!(serde_json::from_str::<S3Source>(r#"{"url":"s3://abc","endpoint":"http://h","colour":1}"#).is_err());
    }

    #[test]
    fn datasets_with_s3() {
        let parse = |v: &str| serde_json::from_str::<Dataset>(v).unwrap();
        let d = parse(r#"{"name":"imagenet","s3":{"url":"s3://abc/train","endpoint":"http://h"},"read_only":false}"#);
        assert!(d.validate().is_ok(), "{:?}", d.validate());
        let m = d.mount();
        assert_eq!((m.s3.as_deref(), m.read_only), (Some("s3://abc/train"), false));
        assert!(
            parse(r#"{"name":"x","s3":{"url":"s3://abc","endpoint":"http://h"}}"#).read_only,
            "read-only by default"
        );
        let both = parse(r#"{"name":"x","path":"/data","s3":{"url":"s3://abc","endpoint":"http://h"}}"#);
        assert_eq!(field_of(&both.validate().unwrap_err()), "s3");
        let nfs_too = parse(r#"{"name":"x","nfs":"h:/x","s3":{"url":"s3://abc","endpoint":"http://h"}}"#);
        assert_eq!(field_of(&nfs_too.validate().unwrap_err()), "s3");
        let writable_dir = parse(r#"{"name":"x","path":"/data","read_only":false}"#);
        assert_eq!(field_of(&writable_dir.validate().unwrap_err()), "read_only");
        let no_endpoint = parse(r#"{"name":"x","s3":{"url":"s3://abc"}}"#).validate().unwrap_err();
        assert_eq!(field_of(&no_endpoint), "s3.endpoint", "{no_endpoint}");
    }
}
