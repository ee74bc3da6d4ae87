//! The saved login: `credentials.json` in the config directory, readable by its owner only.

use crate::ClientError;
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::fmt;
use std::fs::{self, DirBuilder, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The file name inside the config directory.
pub const CREDENTIALS_FILE: &str = "credentials.json";

/// What `gpuhub login` saves and later commands read.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credentials {
    /// The server URL, without a trailing slash.
    pub server: String,
    /// Who logged in.
    pub username: String,
    /// The bearer token.
    pub token: String,
}

/// Leaves the token out, so credentials never end up in a log.
impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("server", &self.server)
            .field("username", &self.username)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// The gpuhub config directory given the values of `XDG_CONFIG_HOME` and `HOME`:
/// `$XDG_CONFIG_HOME/gpuhub` when that is set to an absolute path, else `$HOME/.config/gpuhub`.
pub fn config_dir_from(xdg_config_home: Option<OsString>, home: Option<OsString>) -> Option<PathBuf> {
    let xdg = xdg_config_home.map(PathBuf::from).filter(|p| p.is_absolute());
    let base = match xdg {
        Some(p) => p,
        None => PathBuf::from(home.filter(|h| !h.is_empty())?).join(".config"),
    };
    Some(base.join("gpuhub"))
}

/// The gpuhub config directory of this process, from its environment.
pub fn default_config_dir() -> Result<PathBuf, ClientError> {
    config_dir_from(std::env::var_os("XDG_CONFIG_HOME"), std::env::var_os("HOME")).ok_or(ClientError::NoConfigDir)
}

impl Credentials {
    /// Where the credentials live inside `config_dir`.
    pub fn path(config_dir: &Path) -> PathBuf {
        config_dir.join(CREDENTIALS_FILE)
    }

    /// Reads the saved credentials; `None` when there are none.
    pub fn load(config_dir: &Path) -> Result<Option<Self>, ClientError> {
        let path = Self::path(config_dir);
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(ClientError::Io { path, source }),
        };
        serde_json::from_str(&text).map(Some).map_err(|e| ClientError::BadCredentials { path, reason: e.to_string() })
    }

    /// Writes the credentials, replacing any saved before: the directory is made mode 0700 and the file
    /// 0600 from its creation on (written beside and renamed over, so a reader never sees half a file).
    pub fn save(&self, config_dir: &Path) -> Result<(), ClientError> {
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| ClientError::Io { path, source }
        };
        if let Some(parent) = config_dir.parent() {
            fs::create_dir_all(parent).map_err(io(parent))?;
        }
        match DirBuilder::new().mode(0o700).create(config_dir) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                fs::set_permissions(config_dir, fs::Permissions::from_mode(0o700)).map_err(io(config_dir))?;
            }
            Err(e) => return Err(io(config_dir)(e)),
        }
        let path = Self::path(config_dir);
        let tmp = config_dir.join(format!("{CREDENTIALS_FILE}.tmp"));
        match fs::remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(io(&tmp)(e)),
        }
        let mut body = serde_json::to_vec_pretty(self).expect("credentials serialize");
        body.push(b'\n');
        let mut file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp).map_err(io(&tmp))?;
        file.write_all(&body).and_then(|()| file.sync_all()).map_err(io(&tmp))?;
        drop(file);
        fs::rename(&tmp, &path).map_err(io(&path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds(token: &str) -> Credentials {
        Credentials { server: "http://h:1".into(), username: "alice".into(), token: token.into() }
    }

    fn mode(p: &Path) -> u32 {
        fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn config_dir_rules() {
        let d = config_dir_from(Some("/x/cfg".into()), Some("/home/a".into()));
        assert_eq!(d.unwrap(), Path::new("/x/cfg/gpuhub"));
        let d = config_dir_from(None, Some("/home/a".into()));
        assert_eq!(d.unwrap(), Path::new("/home/a/.config/gpuhub"));
        // relative or empty XDG_CONFIG_HOME is ignored, as the spec says
        let d = config_dir_from(Some("rel".into()), Some("/home/a".into()));
        assert_eq!(d.unwrap(), Path::new("/home/a/.config/gpuhub"));
        let d = config_dir_from(Some("".into()), Some("/home/a".into()));
        assert_eq!(d.unwrap(), Path::new("/home/a/.config/gpuhub"));
        assert_eq!(config_dir_from(None, None), None);
        assert_eq!(config_dir_from(None, Some("".into())), None);
    }

    #[test]
    fn save_is_private_and_round_trips() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = config_dir_from(Some(tmp.path().join("xdg").into()), None).unwrap();
        assert_eq!(Credentials::load(&dir).unwrap(), None);
        creds("t1").save(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&Credentials::path(&dir)), 0o600);
        assert_eq!(Credentials::load(&dir).unwrap(), Some(creds("t1")));
        let json: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(Credentials::path(&dir)).unwrap()).unwrap();
        assert_eq!(json, serde_json::json!({"server": "http://h:1", "username": "alice", "token": "t1"}));

        // a second save replaces the first and tightens loose permissions left by someone else
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(Credentials::path(&dir), fs::Permissions::from_mode(0o644)).unwrap();
        creds("t2").save(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&Credentials::path(&dir)), 0o600);
        assert_eq!(Credentials::load(&dir).unwrap().unwrap().token, "t2");
        assert!(!dir.join("credentials.json.tmp").exists());
    }

    #[test]
    fn malformed_file_is_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(Credentials::path(tmp.path()), "{not json").unwrap();
        let e = Credentials::load(tmp.path()).unwrap_err().to_string();
        assert!(e.contains("malformed credentials file") && e.contains("credentials.json"), "{e}");
    }

    #[test]
    fn debug_hides_the_token() {
        let s = format!("{:?}", creds("secret-token"));
        assert!(!s.contains("secret-token") && s.contains("alice"), "{s}");
    }
}
