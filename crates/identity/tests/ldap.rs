//! `LdapDirectory` against a real OpenLDAP `slapd` that each test starts in a temporary directory:
//! mdb backend, TLS with a CA and server certificate made here by the `openssl` CLI, StartTLS on
//! one port and LDAPS on another, users and POSIX groups loaded with `slapadd`.
//!
//! Needs Debian's `slapd` and `ldap-utils` (scripts/setup-debian.sh installs them); without them the
//! tests fail saying so, unless GPUHUB_SKIP_LDAP_TESTS=1.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use gpuhub_identity::{Directory, IdentityError, LdapConfig, LdapDirectory};
use ldap3::{LdapConnAsync, Scope};

const SUFFIX: &str = "dc=example,dc=org";
const ROOT_DN: &str = "cn=admin,dc=example,dc=org";
const ROOT_PW: &str = "root-secret";
const SLAPD: &str = "/usr/sbin/slapd";
const SLAPADD: &str = "/usr/sbin/slapadd";
const SLAPPASSWD: &str = "/usr/sbin/slappasswd";

/// Whether the tests should run; panics with install instructions when slapd is missing.
fn slapd_available() -> bool {
    if std::env::var("GPUHUB_SKIP_LDAP_TESTS").as_deref() == Ok("1") {
        eprintln!("GPUHUB_SKIP_LDAP_TESTS=1: LDAP tests skipped");
        return false;
    }
    for tool in [SLAPD, SLAPADD, SLAPPASSWD] {
        assert!(
            Path::new(tool).exists(),
            "{tool} not found: these tests run a real OpenLDAP server. Install it with \
             `DEBIAN_FRONTEND=noninteractive apt-get install -y slapd ldap-utils` (or run \
             scripts/setup-debian.sh), or set GPUHUB_SKIP_LDAP_TESTS=1 to skip them"
        );
    }
    true
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    ensure!(
        out.status.success(),
        "{cmd:?} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

/// Makes a self-signed CA `<name>.pem`/`<name>.key` in `dir`.
fn make_ca(dir: &Path, name: &str) -> Result<()> {
    run(Command::new("openssl")
        .current_dir(dir)
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
        .args(["-keyout", &format!("{name}.key"), "-out", &format!("{name}.pem"), "-subj", &format!("/CN={name}")])
        .args(["-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"]))?;
    Ok(())
}

/// A running slapd; killed (and its directory removed) on drop.
struct Slapd {
    child: Child,
    dir: tempfile::TempDir,
    starttls_url: String,
    ldaps_url: String,
    plain_url: String,
}

impl Drop for Slapd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Slapd {
    fn start() -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let d = dir.path();
        make_ca(d, "ca")?;
        make_ca(d, "other-ca")?;
        run(Command::new("openssl")
            .current_dir(d)
            .args(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"])
            .args(["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1"]))?;
        std::fs::write(
            d.join("ext.cnf"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
             keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
        )?;
        run(Command::new("openssl").current_dir(d).args([
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
            "-out",
            "server.pem",
        ]))?;
        std::fs::create_dir(d.join("db"))?;
        let p = |f: &str| d.join(f).display().to_string();
        // `allow bind_anon_dn` lets a bind with a DN and an empty password succeed (anonymously),
        // as some servers do: the empty-password test can then only pass if the client refuses
        // such a bind itself.
        let conf = format!(
            "include /etc/ldap/schema/core.schema\n\
             include /etc/ldap/schema/cosine.schema\n\
             include /etc/ldap/schema/nis.schema\n\
             include /etc/ldap/schema/inetorgperson.schema\n\
             modulepath /usr/lib/ldap\n\
             moduleload back_mdb\n\
             pidfile {pid}\n\
             TLSCACertificateFile {ca}\n\
             TLSCertificateFile {cert}\n\
             TLSCertificateKeyFile {key}\n\
             allow bind_anon_dn\n\
             database mdb\n\
             maxsize 16777216\n\
             suffix \"{SUFFIX}\"\n\
             rootdn \"{ROOT_DN}\"\n\
             rootpw {ROOT_PW}\n\
             directory {db}\n\
             access to attrs=userPassword by anonymous auth by self write by * none\n\
             access to * by * read\n",
            pid = p("slapd.pid"),
            ca = p("ca.pem"),
            cert = p("server.pem"),
            key = p("server.key"),
            db = p("db"),
        );
        std::fs::write(d.join("slapd.conf"), conf)?;
        let hash =
            |pw: &str| run(Command::new(SLAPPASSWD).args(["-h", "{SSHA}", "-s", pw])).map(|h| h.trim().to_owned());
        let person = |uid: &str, number: u32, hash: &str| {
            format!(
                "dn: uid={uid},ou=people,{SUFFIX}\nobjectClass: inetOrgPerson\nobjectClass: posixAccount\n\
                 uid: {uid}\ncn: {uid} example\nsn: example\ndisplayName: {uid} the tester\nuidNumber: {number}\n\
                 gidNumber: {number}\nhomeDirectory: /home/{uid}\nuserPassword: {hash}\n\n"
            )
        };
        let group = |cn: &str, gid: u32, member: &str| {
            format!(
                "dn: cn={cn},ou=groups,{SUFFIX}\nobjectClass: posixGroup\ncn: {cn}\ngidNumber: {gid}\n\
                 memberUid: {member}\n\n"
            )
        };
        let mut ldif = format!(
            "dn: {SUFFIX}\nobjectClass: dcObject\nobjectClass: organization\no: Example\ndc: example\n\n\
             dn: ou=people,{SUFFIX}\nobjectClass: organizationalUnit\nou: people\n\n\
             dn: ou=groups,{SUFFIX}\nobjectClass: organizationalUnit\nou: groups\n\n"
        );
        ldif += &person("alice", 20001, &hash("alice-pw")?);
        ldif += &person("bob", 20002, &hash("bob-pw")?);
        ldif += &person("carol", 20003, &hash("carol-pw")?);
        // dave has no uidNumber: an inetOrgPerson only
        ldif += &format!(
            "dn: uid=dave,ou=people,{SUFFIX}\nobjectClass: inetOrgPerson\nuid: dave\ncn: dave\nsn: d\n\
             userPassword: {}\n\n",
            hash("dave-pw")?
        );
        ldif += &group("gpuhub-admins", 30000, "bob");
        ldif += &group("vision", 30001, "alice");
        std::fs::write(d.join("data.ldif"), ldif)?;
        run(Command::new(SLAPADD).args(["-q", "-f", &p("slapd.conf"), "-l", &p("data.ldif")]))?;

        // both listeners held at once, so that the two ports differ
        let (a, b) = (TcpListener::bind("127.0.0.1:0")?, TcpListener::bind("127.0.0.1:0")?);
        let (starttls, ldaps) = (a.local_addr()?.port(), b.local_addr()?.port());
        drop((a, b));
        let starttls_url = format!("ldap://127.0.0.1:{starttls}");
        let ldaps_url = format!("ldaps://127.0.0.1:{ldaps}");
        let log = std::fs::File::create(d.join("slapd.log"))?;
        // -d keeps slapd in the foreground (so that it is this child and dies with the test)
        let child = Command::new(SLAPD)
            .args(["-f", &p("slapd.conf"), "-h", &format!("{starttls_url}/ {ldaps_url}/"), "-d", "0"])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting slapd")?;
        Ok(Slapd { child, dir, plain_url: starttls_url.clone(), starttls_url, ldaps_url })
    }

    /// Polls with an anonymous root DSE search (no TLS) until slapd answers, exits, or 20 s pass.
    async fn wait_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("slapd exited ({status}): {}", self.log());
            }
            let url = self.plain_url.clone();
            let probe = async move {
                let (conn, mut ldap) = LdapConnAsync::new(&url).await?;
                ldap3::drive!(conn);
                let res = ldap.search("", Scope::Base, "(objectClass=*)", vec!["namingContexts"]).await?.success();
                let _ = ldap.unbind().await;
                res
            }
            .await;
            match probe {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() > deadline => bail!("slapd not ready after 20 s ({e}): {}", self.log()),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("slapd.log")).unwrap_or_default()
    }

    fn ca(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A StartTLS configuration trusting the test CA, searching as the root DN.
    fn config(&self) -> LdapConfig {
        let mut c = LdapConfig::new(&self.starttls_url, format!("ou=people,{SUFFIX}"), format!("ou=groups,{SUFFIX}"));
        c.starttls = true;
        c.ca_file = Some(self.ca("ca.pem"));
        c.bind_dn = Some(ROOT_DN.into());
        c.bind_password = Some(ROOT_PW.into());
        c.timeout_secs = 5;
        c
    }

    fn directory(&self) -> LdapDirectory {
        LdapDirectory::new(self.config()).unwrap()
    }

    /// Deletes `uid` as the root DN, the way an administrator removes a user upstream.
    async fn delete_user(&self, uid: &str) -> Result<()> {
        let (conn, mut ldap) = LdapConnAsync::new(&self.plain_url).await?;
        ldap3::drive!(conn);
        ldap.simple_bind(ROOT_DN, ROOT_PW).await?.success()?;
        ldap.delete(&format!("uid={uid},ou=people,{SUFFIX}")).await?.success()?;
        ldap.unbind().await?;
        Ok(())
    }
}

/// Starts slapd (its setup commands on a blocking thread) and waits until it answers.
async fn slapd() -> Option<Slapd> {
    if !slapd_available() {
        return None;
    }
    let mut slapd = tokio::task::spawn_blocking(Slapd::start).await.unwrap().unwrap();
    slapd.wait_ready().await.unwrap();
    Some(slapd)
}

#[tokio::test]
async fn alice_signs_in_over_starttls_with_her_ids_and_groups() {
    let Some(slapd) = slapd().await else { return };
    let alice = slapd.directory().authenticate("alice", "alice-pw").await.unwrap();
    assert_eq!(alice.username, "alice");
    assert_eq!(alice.dn, format!("uid=alice,ou=people,{SUFFIX}"));
    assert_eq!((alice.uid_number, alice.gid_number), (20001, 20001));
    assert_eq!(alice.groups, ["vision"]);
    assert!(!alice.is_admin);
    assert_eq!(alice.display_name.as_deref(), Some("alice the tester"));
}

#[tokio::test]
async fn bob_is_admin_through_the_admin_group_and_anonymous_search_works() {
    let Some(slapd) = slapd().await else { return };
    let bob = slapd.directory().authenticate("bob", "bob-pw").await.unwrap();
    assert_eq!((bob.uid_number, bob.groups.as_slice(), bob.is_admin), (20002, &["gpuhub-admins".to_owned()][..], true));
    // the same without a service account: the ACL lets anyone search
    let mut config = slapd.config();
    config.bind_dn = None;
    config.bind_password = None;
    let bob = LdapDirectory::new(config).unwrap().authenticate("bob", "bob-pw").await.unwrap();
    assert!(bob.is_admin);
}

#[tokio::test]
async fn wrong_password_unknown_user_and_injection_are_invalid_credentials() {
    let Some(slapd) = slapd().await else { return };
    let dir = slapd.directory();
    for (user, pw) in
        [("alice", "bob-pw"), ("alice", "alice-pw "), ("mallory", "alice-pw"), ("*", "alice-pw"), ("a*", "alice-pw")]
    {
        let got = dir.authenticate(user, pw).await;
        assert!(matches!(got, Err(IdentityError::InvalidCredentials)), "{user}/{pw}: {got:?}");
    }
}

#[tokio::test]
async fn an_empty_password_is_refused_though_the_server_would_accept_it() {
    let Some(slapd) = slapd().await else { return };
    let got = slapd.directory().authenticate("alice", "").await;
    assert!(matches!(got, Err(IdentityError::EmptyPassword)), "{got:?}");
    // the server itself does accept that bind (anonymously): the refusal above is the client's
    let (conn, mut ldap) = LdapConnAsync::new(&slapd.plain_url).await.unwrap();
    ldap3::drive!(conn);
    let res = ldap.simple_bind(&format!("uid=alice,ou=people,{SUFFIX}"), "").await.unwrap();
    assert_eq!(res.rc, 0, "slapd was expected to allow an unauthenticated bind: {res}");
}

#[tokio::test]
async fn ldaps_works_too() {
    let Some(slapd) = slapd().await else { return };
    let mut config = slapd.config();
    config.url = slapd.ldaps_url.clone();
    config.starttls = false;
    let alice = LdapDirectory::new(config).unwrap().authenticate("alice", "alice-pw").await.unwrap();
    assert_eq!(alice.uid_number, 20001);
}

#[tokio::test]
async fn a_server_certificate_from_another_ca_is_refused() {
    let Some(slapd) = slapd().await else { return };
    for (url, starttls) in [(slapd.starttls_url.clone(), true), (slapd.ldaps_url.clone(), false)] {
        let mut config = slapd.config();
        config.url = url;
        config.starttls = starttls;
        config.ca_file = Some(slapd.ca("other-ca.pem"));
        let got = LdapDirectory::new(config).unwrap().authenticate("alice", "alice-pw").await;
        match got {
            Err(IdentityError::Directory(m)) => assert!(m.to_lowercase().contains("certificate"), "{m}"),
            other => panic!("starttls={starttls}: expected a TLS error, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_user_without_uid_number_gets_a_clear_error() {
    let Some(slapd) = slapd().await else { return };
    let got = slapd.directory().authenticate("dave", "dave-pw").await;
    assert!(matches!(got, Err(IdentityError::MissingAttribute { attribute: "uidNumber", .. })), "{got:?}");
    let wrong = slapd.directory().authenticate("dave", "nope").await;
    assert!(matches!(wrong, Err(IdentityError::InvalidCredentials)), "{wrong:?}");
}

#[tokio::test]
async fn lookup_finds_a_user_until_deleted_upstream() {
    let Some(slapd) = slapd().await else { return };
    let dir = slapd.directory();
    let carol = dir.authenticate("carol", "carol-pw").await.unwrap();
    assert_eq!(dir.lookup("carol").await.unwrap(), Some(carol));
    assert_eq!(dir.lookup("nobody").await.unwrap(), None);
    slapd.delete_user("carol").await.unwrap();
    assert_eq!(dir.lookup("carol").await.unwrap(), None);
    assert!(matches!(dir.authenticate("carol", "carol-pw").await, Err(IdentityError::InvalidCredentials)));
}

#[tokio::test]
async fn an_unreachable_server_is_an_error_not_a_hang() {
    if !slapd_available() {
        return;
    }
    let port = free_port().unwrap();
    let mut config = LdapConfig::new(format!("ldap://127.0.0.1:{port}"), "ou=people,dc=x", "ou=groups,dc=x");
    config.starttls = true;
    config.timeout_secs = 2;
    let started = Instant::now();
    let got = LdapDirectory::new(config).unwrap().authenticate("alice", "pw").await;
    assert!(matches!(got, Err(IdentityError::Directory(_) | IdentityError::Timeout(_))), "{got:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
}
