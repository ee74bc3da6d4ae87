//! The layering of [`Config::load`] with figment: the defaults (each type's own), the file, then the
//! `GPUHUB_*` variables, each read through the table of [`crate::env::SETTINGS`].

use crate::env::{self, NOT_SERVER_SETTINGS};
use crate::{Config, ConfigError};
use figment::providers::{Format, Serialized, Toml};
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};
use std::collections::BTreeMap;
use std::path::Path;

/// The server's `GPUHUB_*` variables of one start, each read and checked: figment's top layer.
pub(crate) struct Variables {
    /// (the variable, its key, its value), in the order given; a later one wins.
    set: Vec<(String, &'static str, Value)>,
}

impl Variables {
    /// The server's variables of `env`; a value a setting cannot take, or an unknown `GPUHUB_` variable
    /// (not the client's, the containers' or the scripts'), is an error naming the variable.
    pub(crate) fn read(env: impl IntoIterator<Item = (String, String)>) -> Result<Self, ConfigError> {
        let mut set = Vec::new();
        for (var, v) in env {
            let Some(name) = var.strip_prefix("GPUHUB_") else { continue };
            match env::setting(name) {
                Some((key, read)) => {
                    let value = read(&v).map_err(|reason| ConfigError::Invalid { key: var.clone(), reason })?;
                    set.push((var, key, value));
                }
                // variables of the client, of containers and of the scripts share the prefix
                None if NOT_SERVER_SETTINGS.contains(&name) || env::container_variable(name) => {}
                None => return Err(ConfigError::Invalid { key: var.clone(), reason: env::unknown_variable(name) }),
            }
        }
        Ok(Self { set })
    }

    /// The first variable given that sets a key of `section` (`lxd`).
    fn first_in(&self, section: &str) -> Option<&str> {
        self.set.iter().find(|(_, key, _)| key.split('.').next() == Some(section)).map(|(var, _, _)| var.as_str())
    }

    /// The variable that sets `path` (`limits.max_apps`), if one does.
    fn setting(&self, path: &str) -> Option<&str> {
        self.set.iter().rev().find(|(_, key, _)| *key == path).map(|(var, _, _)| var.as_str())
    }

    /// Below the file: `[ldap]` and `[oidc]` with their required keys empty, where variables set some
    /// of their keys, so that variables alone make the section (and its check says what is missing).
    fn seeds(&self) -> Figment {
        let mut seeds = Figment::new();
        for (section, required) in [
            ("ldap", &["url", "user_base", "group_base"][..]),
            ("oidc", &["issuer_url", "client_id", "client_secret", "redirect_url"][..]),
        ] {
            if self.first_in(section).is_some() {
                let empty: BTreeMap<&str, &str> = required.iter().map(|k| (*k, "")).collect();
                seeds = seeds.merge(Serialized::default(section, empty));
            }
        }
        seeds
    }
}

impl Provider for Variables {
    fn metadata(&self) -> Metadata {
        Metadata::named("GPUHUB_ environment variables")
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        let mut root = Dict::new();
        for (_, key, value) in &self.set {
            let mut path: Vec<&str> = key.split('.').collect();
            let leaf = path.pop().unwrap_or_default();
            let mut dict = &mut root;
            for part in path {
                let entry = dict.entry(part.to_owned()).or_insert_with(|| Value::from(Dict::new()));
                if !matches!(entry, Value::Dict(..)) {
                    *entry = Value::from(Dict::new());
                }
                let Value::Dict(_, inner) = entry else { unreachable!("made a dict just above") };
                dict = inner;
            }
            dict.insert(leaf.to_owned(), value.clone());
        }
        Ok(Profile::Default.collect(root))
    }
}

/// An engine section's own check, in a sentence.
type EngineCheck = fn(&Config) -> Result<(), String>;

/// Defaults, then the file's `text` (from `path`, already checked by [`Config::from_toml`], whose
/// errors have the line and column figment's lack), then `vars`; then the engines' sections a
/// variable touched are checked, naming that variable.
pub(crate) fn layer(file: Option<(&Path, &str)>, vars: Variables) -> Result<Config, ConfigError> {
    let mut figment = vars.seeds();
    if let Some((_, text)) = file {
        figment = figment.merge(Toml::string(text));
    }
    let figment = figment.merge(&vars);
    let config: Config = figment.extract().map_err(|e| {
        let path = e.path.join(".");
        match (vars.setting(&path), file) {
            (Some(var), _) => ConfigError::Invalid { key: var.to_owned(), reason: e.kind.to_string() },
            (None, Some((p, _))) => ConfigError::Parse { path: p.into(), message: e.to_string() },
            (None, None) => ConfigError::Invalid { key: path, reason: e.kind.to_string() },
        }
    })?;
    let engine_checks: [(&str, EngineCheck); 2] =
        [("lxd", |c| c.lxd.check()), ("kubernetes", |c| c.kubernetes.check())];
    for (section, check) in engine_checks {
        if let Some(var) = vars.first_in(section) {
            check(&config).map_err(|reason| ConfigError::Invalid { key: var.to_owned(), reason })?;
        }
    }
    Ok(config)
}
