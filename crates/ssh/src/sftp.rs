//! The sftp subsystem: OpenSSH's `sftp-server` from the image, run as the owner.
//!
//! `sftp-server` refuses to start for a UID without a passwd entry ("No user found for uid …"), and
//! images know nothing of gpuhub's users while the gateway never runs anything as root. When the UID has
//! no entry and the image has `libnss_wrapper` (Debian: `libnss-wrapper`), the server runs under
//! nss_wrapper with a passwd/group copy that adds the owner — the usual answer for arbitrary UIDs.

use crate::Target;
use futures::StreamExt;
use gpuhub_driver::{Engine, EngineError, ExecSpec, MemberRef};
use std::collections::BTreeMap;

/// Where images keep OpenSSH's sftp server.
const SERVERS: &str = "/usr/lib/openssh/sftp-server /usr/libexec/openssh/sftp-server /usr/lib/sftp-server";

/// The message for images without an sftp server.
pub(crate) const NO_SFTP: &str = "this workspace image has no sftp server (install openssh-sftp-server in the image)";

/// Prints one line: `none`, `direct SERVER`, `wrapped SERVER LIB` or `nouser SERVER`.
const PROBE: &str = r#"server=
for p in $GPUHUB_SFTP_SERVERS; do if [ -x "$p" ]; then server=$p; break; fi; done
if [ -z "$server" ]; then echo none; exit 0; fi
uid=$(id -u)
if command -v getent >/dev/null 2>&1; then
    getent passwd "$uid" >/dev/null 2>&1 && { echo "direct $server"; exit 0; }
elif grep -q "^[^:]*:[^:]*:$uid:" /etc/passwd 2>/dev/null; then
    echo "direct $server"; exit 0
fi
for lib in /usr/lib/*/libnss_wrapper.so /usr/lib64/libnss_wrapper.so /usr/lib/libnss_wrapper.so; do
    if [ -e "$lib" ]; then echo "wrapped $server $lib"; exit 0; fi
done
echo "nouser $server""#;

/// Runs `$0` (the server) under nss_wrapper (`$1`) with the owner added to passwd and group copies.
const WRAPPED: &str = r#"d="${TMPDIR:-/tmp}/.gpuhub-nss-$(id -u)"
mkdir -p "$d" 2>/dev/null && chmod 700 "$d" || exit 1
{ cat /etc/passwd 2>/dev/null; echo "$GPUHUB_NAME:x:$(id -u):$(id -g):gpuhub:$HOME:/bin/sh"; } >"$d/passwd" || exit 1
{ cat /etc/group 2>/dev/null; echo "$GPUHUB_NAME:x:$(id -g):"; } >"$d/group" || exit 1
LD_PRELOAD="$1" NSS_WRAPPER_PASSWD="$d/passwd" NSS_WRAPPER_GROUP="$d/group" exec "$0" 2>/dev/null"#;

/// How to run the sftp server in a container, or why it cannot run.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    /// This command (with the caller's user, env and working directory).
    Run(Vec<String>),
    /// Nothing can run; tell the client this.
    Refuse(String),
}

/// Finds out how to run the sftp server in `container` for `target`.
pub(crate) async fn plan(engine: &dyn Engine, member: &MemberRef, target: &Target) -> Result<Plan, EngineError> {
    let spec = ExecSpec {
        command: vec!["/bin/sh".into(), "-c".into(), PROBE.into()],
        user: target.user.clone(),
        env: BTreeMap::from([("GPUHUB_SFTP_SERVERS".to_string(), SERVERS.to_string())]),
        ..Default::default()
    };
    let mut handle = engine.exec(member, &spec).await?;
    drop(handle.input);
    let mut out = Vec::new();
    while let Some(chunk) = handle.output.next().await {
        out.extend_from_slice(&chunk?);
    }
    Ok(parse(&String::from_utf8_lossy(&out), target))
}

fn parse(out: &str, target: &Target) -> Plan {
    let line = out.lines().map(str::trim).rfind(|l| !l.is_empty()).unwrap_or("");
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        ["direct", server] => Plan::Run(vec![(*server).to_string()]),
        ["wrapped", server, lib] => {
            Plan::Run(vec!["/bin/sh".into(), "-c".into(), WRAPPED.into(), (*server).to_string(), (*lib).to_string()])
        }
        ["nouser", _] => Plan::Refuse(format!(
            "sftp-server cannot run as uid {uid}: the workspace image has no passwd entry for it \
             (install libnss-wrapper in the image, or add the user)",
            uid = target.user.split(':').next().unwrap_or(&target.user)
        )),
        _ => Plan::Refuse(NO_SFTP.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> Target {
        Target {
            login: "alice".into(),
            owner: "alice".into(),
            workspace: "nb".into(),
            user: "10000:10000".into(),
            home: "/home/alice".into(),
            member: Some(MemberRef::new("c", 0)),
            problem: None,
            lease: Default::default(),
        }
    }

    #[test]
    fn probe_answers() {
        assert_eq!(parse("none\n", &target()), Plan::Refuse(NO_SFTP.into()));
        assert_eq!(parse("", &target()), Plan::Refuse(NO_SFTP.into()));
        assert_eq!(
            parse("direct /usr/lib/openssh/sftp-server\n", &target()),
            Plan::Run(vec!["/usr/lib/openssh/sftp-server".into()])
        );
        let Plan::Run(cmd) = parse("wrapped /usr/lib/openssh/sftp-server /usr/lib/x/libnss_wrapper.so", &target())
        else {
            panic!("not run")
        };
        assert_eq!(cmd[3..], ["/usr/lib/openssh/sftp-server".to_string(), "/usr/lib/x/libnss_wrapper.so".into()]);
        let Plan::Refuse(msg) = parse("nouser /usr/lib/openssh/sftp-server", &target()) else { panic!("not refused") };
        assert!(msg.contains("uid 10000"), "{msg}");
    }
}
