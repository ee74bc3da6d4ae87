//! `secret_key` (the key that seals secrets at rest) and `dataset_cache` (the read cache of each
//! object-storage dataset on the hub's host).

use super::{Config, ConfigError};

/// The read cache of each object-storage dataset unless `dataset_cache` says otherwise: 20GiB.
pub const DEFAULT_CACHE: u64 = 20 << 30;

/// A secret key is 64 hex digits (32 bytes); a cache holds at least 64MiB.
pub(super) fn check(cfg: &Config) -> Result<(), ConfigError> {
    if let Some(k) = &cfg.secret_key {
        if k.len() != 64 || !k.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(ConfigError::Invalid {
                key: "secret_key".into(),
                reason: "must be 64 hex digits (32 bytes; e.g. from `openssl rand -hex 32`)".into(),
            });
        }
    }
    if cfg.dataset_cache.0 < 64 << 20 {
        return Err(ConfigError::Invalid {
            key: "dataset_cache".into(),
            reason: format!("{} is less than the least accepted, 64MiB", cfg.dataset_cache),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_caches() {
        let mut cfg = Config::default();
        assert!(check(&cfg).is_ok());
        for bad in ["abc", &"g".repeat(64), &"0".repeat(63)] {
            cfg.secret_key = Some(bad.to_owned());
            let e = check(&cfg).unwrap_err().to_string();
            assert!(e.contains("secret_key") && e.contains("64 hex digits"), "{bad}: {e}");
        }
        cfg.secret_key = Some("ab".repeat(32));
        assert!(check(&cfg).is_ok());
        let var = |v: &str| Config::load(None, [("GPUHUB_DATASET_CACHE".to_owned(), v.to_owned())]);
        assert!(var("1MiB").unwrap_err().to_string().contains("dataset_cache"));
        assert!(var("lots").unwrap_err().to_string().contains("GPUHUB_DATASET_CACHE"));
        assert_eq!(var("1GiB").unwrap().dataset_cache, gpuhub_core::Bytes(1 << 30));
    }
}
