//! SSH commands: `ssh-key add|list|rm`, `ssh` (the system ssh through the hub's gateway) and
//! `ssh-config` (`~/.ssh/config` entries for the caller's workspaces).

use super::{Out, print_json};
use crate::cli::{SshArgs, SshConfigArgs, SshKeyCommand};
use crate::http::{Api, decode};
use crate::table::{Table, age};
use crate::{ClientError, Context};
use chrono::{DateTime, Utc};
use gpuhub_api::WorkloadView;
use gpuhub_core::workload::WorkloadKind;
use reqwest::Method;
use reqwest::Url;
use serde::Deserialize;
use serde_json::json;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// A registered key, as `GET /api/v1/me/ssh-keys` lists it.
#[derive(Debug, Deserialize)]
pub(crate) struct KeyView {
    pub fingerprint: String,
    pub public_key: String,
    #[serde(default)]
    pub comment: String,
    pub created_at: DateTime<Utc>,
}

/// Where the gateway is and whom to log in as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Destination {
    /// The host of the server URL (an IPv6 address without brackets).
    pub host: String,
    /// The gateway's port, from `/api/v1/info`.
    pub port: u16,
    /// The SSH user: `<workspace>`, or `<owner>.<workspace>` for an admin entering another's.
    pub user: String,
}

/// `gpuhub ssh-key …`.
pub(crate) async fn key(api: &Api, json: bool, cmd: SshKeyCommand, out: Out<'_>) -> Result<(), ClientError> {
    let segs = ["me", "ssh-keys"];
    match cmd {
        SshKeyCommand::Add { file, identity } => {
            let line = read_public_key(&file)?;
            let challenge = api.get(&["me", "ssh-keys", "challenge"], &[]).await?;
            let url = api.url(&["me", "ssh-keys", "challenge"], &[]);
            let field = |k: &str| {
                challenge[k].as_str().map(str::to_owned).ok_or_else(|| ClientError::BadResponse {
                    url: url.to_string(),
                    reason: format!("no {k} in the challenge"),
                })
            };
            let (namespace, message) = (field("namespace")?, field("message")?);
            let identity = match identity {
                Some(p) => p,
                None => file.to_str().and_then(|f| f.strip_suffix(".pub")).map(PathBuf::from).ok_or_else(|| {
                    ClientError::BadFile {
                        path: file.clone(),
                        reason: "name the private key to sign with: --identity FILE".into(),
                    }
                })?,
            };
            let signature = sign(&identity, &namespace, &message).await?;
            let mut body = json!({ "key": line, "signature": signature });
            // which challenge was signed (a hub that issues challenges once each gives a nonce)
            if let Some(nonce) = challenge.get("nonce").and_then(|n| n.as_str()) {
                body["nonce"] = json!(nonce);
            }
            let v = api.send_json(Method::POST, &segs, &body).await?.unwrap_or_default();
            if json {
                return print_json(out, &v);
            }
            let k: KeyView = decode(&v, api.url(&segs, &[]).as_str())?;
            writeln!(out, "{}", k.fingerprint)?;
        }
        SshKeyCommand::List => {
            let v = serde_json::Value::Array(api.get_all_pages(&segs, &[]).await?);
            if json {
                return print_json(out, &v);
            }
            let keys: Vec<KeyView> = decode(&v, api.url(&segs, &[]).as_str())?;
            write!(out, "{}", keys_table(&keys, crate::clock::now()))?;
        }
        SshKeyCommand::Rm { fingerprint } => {
            let fp = normalize_fingerprint(&fingerprint);
            api.call(Method::DELETE, &["me", "ssh-keys", &fp], &[], None).await?;
            if !json {
                writeln!(out, "removed key {fp}")?;
            }
        }
    }
    Ok(())
}

/// The one public-key line of an OpenSSH `.pub` file; a private key is refused before it is sent.
pub(crate) fn read_public_key(path: &Path) -> Result<String, ClientError> {
    let text = std::fs::read_to_string(path).map_err(|source| ClientError::Io { path: path.to_owned(), source })?;
    let bad = |reason: String| ClientError::BadFile { path: path.to_owned(), reason };
    if text.contains("PRIVATE KEY") {
        let public = format!("{}.pub", path.display());
        return Err(bad(format!("this is a private key; give its public key instead ({public})")));
    }
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
    match lines.as_slice() {
        [one] => Ok((*one).to_owned()),
        [] => Err(bad("empty: expected one OpenSSH public key line (ssh-ed25519 AAAA… comment)".into())),
        _ => Err(bad(format!("{} keys: give one key per file", lines.len()))),
    }
}

/// Signs `message` with the private key `identity` (or the agent's key for it) using
/// `ssh-keygen -Y sign`; returns the armored signature. The private key is read only by ssh-keygen.
async fn sign(identity: &Path, namespace: &str, message: &str) -> Result<String, ClientError> {
    let dir = tempfile::tempdir().map_err(|source| ClientError::Io { path: std::env::temp_dir(), source })?;
    let msg = dir.path().join("challenge");
    std::fs::write(&msg, message).map_err(|source| ClientError::Io { path: msg.clone(), source })?;
    let out = tokio::process::Command::new("ssh-keygen")
        .args(["-q", "-Y", "sign", "-n", namespace, "-f"])
        .arg(identity)
        .arg(&msg)
        .stdin(std::process::Stdio::inherit())
        .output()
        .await
        .map_err(|source| ClientError::Io { path: PathBuf::from("ssh-keygen"), source })?;
    if !out.status.success() {
        return Err(ClientError::BadFile {
            path: identity.to_owned(),
            reason: format!(
                "ssh-keygen could not sign with this private key: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    let sig = dir.path().join("challenge.sig");
    std::fs::read_to_string(&sig).map_err(|source| ClientError::Io { path: sig, source })
}

/// `SHA256:…` as given, or with the prefix added to a bare hash.
pub(crate) fn normalize_fingerprint(fp: &str) -> String {
    let fp = fp.trim();
    if fp.contains(':') { fp.to_owned() } else { format!("SHA256:{fp}") }
}

/// The `ssh-key list` table: FINGERPRINT TYPE COMMENT AGE.
pub(crate) fn keys_table(keys: &[KeyView], now: DateTime<Utc>) -> String {
    let mut t = Table::new(&["FINGERPRINT", "TYPE", "COMMENT", "AGE"]);
    for k in keys {
        let kind = k.public_key.split_whitespace().next().unwrap_or("").to_owned();
        t.row(vec![k.fingerprint.clone(), kind, k.comment.clone(), age(k.created_at, now)]);
    }
    t.render("")
}

/// The gateway's host and port for this server: the URL's host, the port `/api/v1/info` names.
async fn gateway(api: &Api) -> Result<(String, u16, Option<HostKey>), ClientError> {
    let info = api.get(&["info"], &[]).await?;
    let port = info.get("ssh_port").and_then(serde_json::Value::as_u64).and_then(|p| u16::try_from(p).ok());
    let port = port.ok_or_else(|| ClientError::NoSshGateway(api.server().to_owned()))?;
    let text = |k: &str| info.get(k).and_then(serde_json::Value::as_str).map(str::to_owned);
    let key = match (text("ssh_host_key"), text("ssh_host_key_fingerprint")) {
        (Some(openssh), Some(fingerprint)) => Some(HostKey { openssh, fingerprint }),
        _ => None,
    };
    Ok((host_of(api.server())?, port, key))
}

/// The gateway's host key, as the server publishes it (`/api/v1/info`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostKey {
    /// `ssh-ed25519 AAAA…`.
    pub openssh: String,
    /// `SHA256:…`.
    pub fingerprint: String,
}

/// The host of a server URL as ssh takes it (IPv6 without brackets).
pub(crate) fn host_of(server: &str) -> Result<String, ClientError> {
    let bad = |reason: &str| ClientError::BadServerUrl { url: server.to_owned(), reason: reason.to_owned() };
    let url = Url::parse(server).map_err(|e| bad(&e.to_string()))?;
    match url.host_str() {
        Some(h) if !h.is_empty() => Ok(h.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(h).to_owned()),
        _ => Err(bad("has no host")),
    }
}

/// ssh's arguments: options, then `--` (so nothing after it is taken for an option), the destination
/// and the command.
pub(crate) fn ssh_argv(
    dest: &Destination,
    identity: Option<&Path>,
    options: &[String],
    command: &[String],
) -> Vec<OsString> {
    let mut argv: Vec<OsString> = vec!["-p".into(), dest.port.to_string().into()];
    if let Some(i) = identity {
        argv.extend(["-i".into(), i.as_os_str().to_owned()]);
    }
    for o in options {
        argv.extend(["-o".into(), o.into()]);
    }
    argv.push("--".into());
    argv.push(format!("{}@{}", dest.user, dest.host).into());
    argv.extend(command.iter().map(OsString::from));
    argv
}

/// `gpuhub ssh`: runs the system ssh (or `GPUHUB_SSH`) with the terminal, and returns its exit code
/// (128 + the signal when a signal ended it).
pub(crate) async fn ssh(ctx: &Context, api: &Api, args: SshArgs) -> Result<i32, ClientError> {
    let (host, port, _) = gateway(api).await?;
    let user = match &args.owner {
        Some(owner) => format!("{owner}.{}", args.name),
        None => args.name.clone(),
    };
    let dest = Destination { host, port, user };
    let mut cmd = std::process::Command::new(&ctx.ssh_program);
    cmd.args(ssh_argv(&dest, args.identity.as_deref(), &args.options, &args.command));
    let program = ctx.ssh_program.display().to_string();
    let mut child = tokio::process::Command::from(cmd)
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| ClientError::Spawn { program: program.clone(), source })?;
    // ssh shares the terminal: a Ctrl-C is for it (it exits, or passes the key on), not for us.
    let mut interrupts = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).ok();
    let status = loop {
        tokio::select! {
            status = child.wait() => break status.map_err(|source| ClientError::Spawn { program, source })?,
            Some(()) = async { match interrupts.as_mut() { Some(s) => s.recv().await, None => None } } => {}
        }
    };
    Ok(exit_code(status))
}

fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.code().or_else(|| status.signal().map(|s| 128 + s)).unwrap_or(255)
}

/// `gpuhub ssh-config`.
pub(crate) async fn config(api: &Api, args: SshConfigArgs, out: Out<'_>) -> Result<(), ClientError> {
    let (host, port, key) = gateway(api).await?;
    let v = api.get(&["workloads"], &[]).await?;
    let list: Vec<WorkloadView> = decode(&v, api.url(&["workloads"], &[]).as_str())?;
    let mut names: Vec<&str> =
        list.iter().filter(|w| w.kind == WorkloadKind::Workspace).map(|w| w.name.as_str()).collect();
    names.sort_unstable();
    let identity = match &args.identity {
        Some(p) => Some(std::path::absolute(p).map_err(|source| ClientError::Io { path: p.clone(), source })?),
        None => None,
    };
    write!(out, "{}", config_text(api.server(), &host, port, &names, identity.as_deref(), key.as_ref()))?;
    Ok(())
}

/// One `Host gpuhub-<name>` block per workspace, after a comment saying where they come from and, when
/// the server publishes it, the gateway's host key with its `known_hosts` line.
pub(crate) fn config_text(
    server: &str,
    host: &str,
    port: u16,
    names: &[&str],
    identity: Option<&Path>,
    key: Option<&HostKey>,
) -> String {
    let mut s = format!("# gpuhub workspaces at {server} (written by gpuhub ssh-config)\n");
    if let Some(k) = key {
        let known = if port == 22 { host.to_owned() } else { format!("[{host}]:{port}") };
        s.push_str(&format!(
            "# the gateway's host key is {}; its line for ~/.ssh/known_hosts:\n# {known} {}\n",
            k.fingerprint, k.openssh
        ));
    }
    if names.is_empty() {
        s.push_str("# (none yet: start one with gpuhub run --workspace)\n");
    }
    for name in names {
        s.push_str(&format!("Host gpuhub-{name}\n    HostName {host}\n    Port {port}\n    User {name}\n"));
        if let Some(i) = identity {
            s.push_str(&format!("    IdentityFile {}\n    IdentitiesOnly yes\n", config_value(i)));
        }
    }
    s
}

/// A path as an ssh_config value: quoted when it has spaces.
fn config_value(p: &Path) -> String {
    let s = p.display().to_string();
    if s.contains(char::is_whitespace) { format!("\"{s}\"") } else { s }
}

/// The ssh program a context runs: `GPUHUB_SSH` when set, else `ssh` from `PATH`.
pub(crate) fn ssh_program_from(var: Option<OsString>) -> PathBuf {
    var.filter(|v| !v.is_empty()).map_or_else(|| PathBuf::from("ssh"), PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn dest(user: &str) -> Destination {
        Destination { host: "gpu.example.org".into(), port: 2222, user: user.into() }
    }

    fn strings(v: Vec<OsString>) -> Vec<String> {
        v.into_iter().map(|s| s.into_string().unwrap()).collect()
    }

    #[test]
    fn argv_puts_the_destination_after_the_options() {
        assert_eq!(strings(ssh_argv(&dest("nb"), None, &[], &[])), ["-p", "2222", "--", "nb@gpu.example.org"]);
        let argv = ssh_argv(
            &dest("alice.nb"),
            Some(Path::new("/k/id")),
            &["StrictHostKeyChecking=no".into()],
            &["ls".into(), "-l".into()],
        );
        assert_eq!(
            strings(argv),
            [
                "-p",
                "2222",
                "-i",
                "/k/id",
                "-o",
                "StrictHostKeyChecking=no",
                "--",
                "alice.nb@gpu.example.org",
                "ls",
                "-l"
            ]
        );
    }

    #[test]
    fn hosts_of_server_urls() {
        assert_eq!(host_of("https://gpu.example.org/hub").unwrap(), "gpu.example.org");
        assert_eq!(host_of("http://127.0.0.1:8080").unwrap(), "127.0.0.1");
        assert_eq!(host_of("http://[::1]:8080").unwrap(), "::1");
        assert!(host_of("not a url").is_err());
    }

    #[test]
    fn config_blocks() {
        let text = config_text("http://h:1", "h", 2222, &["a", "nb"], None, None);
        assert_eq!(
            text,
            "# gpuhub workspaces at http://h:1 (written by gpuhub ssh-config)\n\
             Host gpuhub-a\n    HostName h\n    Port 2222\n    User a\n\
             Host gpuhub-nb\n    HostName h\n    Port 2222\n    User nb\n"
        );
        let text = config_text("http://h:1", "h", 22, &["nb"], Some(Path::new("/my keys/id")), None);
        assert!(text.ends_with("    User nb\n    IdentityFile \"/my keys/id\"\n    IdentitiesOnly yes\n"), "{text}");
        assert!(config_text("http://h:1", "h", 22, &[], None, None).contains("none yet"));
        // the host key, published by the server, with its known_hosts line
        let key = HostKey { openssh: "ssh-ed25519 AAAAC3".into(), fingerprint: "SHA256:abc".into() };
        let text = config_text("http://h:1", "h", 2222, &["nb"], None, Some(&key));
        assert!(
            text.starts_with(
                "# gpuhub workspaces at http://h:1 (written by gpuhub ssh-config)\n\
                 # the gateway's host key is SHA256:abc; its line for ~/.ssh/known_hosts:\n\
                 # [h]:2222 ssh-ed25519 AAAAC3\n"
            ),
            "{text}"
        );
        assert!(config_text("http://h:1", "h", 22, &[], None, Some(&key)).contains("\n# h ssh-ed25519 AAAAC3\n"));
    }

    #[test]
    fn public_key_files() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let line = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIH8AEj/Nz9zHuq2dT08fudab7gZbkHR+UCm0GtEye43Y me@laptop";
        assert_eq!(read_public_key(&write("k.pub", &format!("\n{line}\n"))).unwrap(), line);
        let e = read_public_key(&write("k", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Bl\n")).unwrap_err();
        assert!(e.to_string().contains("private key") && e.to_string().contains("k.pub"), "{e}");
        assert!(read_public_key(&write("e.pub", "\n")).unwrap_err().to_string().contains("empty"));
        let two = format!("{line}\n{line}\n");
        assert!(read_public_key(&write("two.pub", &two)).unwrap_err().to_string().contains("2 keys"));
        assert!(matches!(read_public_key(&dir.path().join("missing")), Err(ClientError::Io { .. })));
    }

    #[test]
    fn fingerprints_and_programs() {
        assert_eq!(normalize_fingerprint("SHA256:abc/d+e"), "SHA256:abc/d+e");
        assert_eq!(normalize_fingerprint(" abc/d+e "), "SHA256:abc/d+e");
        assert_eq!(ssh_program_from(None), PathBuf::from("ssh"));
        assert_eq!(ssh_program_from(Some("".into())), PathBuf::from("ssh"));
        assert_eq!(ssh_program_from(Some("/bin/fake".into())), PathBuf::from("/bin/fake"));
    }

    #[test]
    fn keys_rendering() {
        let t0 = Utc.with_ymd_and_hms(2025, 1, 1, 0, 0, 0).unwrap();
        let keys = [KeyView {
            fingerprint: "SHA256:abc".into(),
            public_key: "ssh-ed25519 AAAA".into(),
            comment: "me@laptop".into(),
            created_at: t0,
        }];
        assert_eq!(
            keys_table(&keys, t0 + chrono::Duration::hours(3)),
            "FINGERPRINT  TYPE         COMMENT    AGE\nSHA256:abc   ssh-ed25519  me@laptop  3h\n"
        );
    }

    #[test]
    fn exit_codes_of_signals() {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(exit_code(std::process::ExitStatus::from_raw(7 << 8)), 7);
        assert_eq!(exit_code(std::process::ExitStatus::from_raw(2)), 130, "SIGINT");
    }
}
