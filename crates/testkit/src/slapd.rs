//! A real OpenLDAP `slapd` for tests, started in a temporary directory: mdb backend, TLS with a CA and
//! server certificate made by the `openssl` CLI, StartTLS on one port and LDAPS on another, users alice
//! (uidNumber 20001, group vision), bob (20002, gpuhub-admins), carol (20003) and dave (no uidNumber).
//! Used by the identity crate's tests and gpuhub's end-to-end tests.

pub use crate::process::free_port;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use gpuhub_identity::{LdapConfig, LdapDirectory};
use ldap3::{LdapConnAsync, Scope};

pub const SUFFIX: &str = "dc=example,dc=org";
pub const ROOT_DN: &str = "cn=admin,dc=example,dc=org";
pub const ROOT_PW: &str = "root-secret";
pub const SLAPD: &str = "/usr/sbin/slapd";
pub const SLAPADD: &str = "/usr/sbin/slapadd";
pub const SLAPPASSWD: &str = "/usr/sbin/slappasswd";

/// Whether the tests should run; panics with install instructions when slapd is missing.
pub fn slapd_available() -> bool {
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

/// Runs `cmd`, which must succeed; its standard output.
pub fn run(cmd: &mut Command) -> Result<String> {
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
pub fn make_ca(dir: &Path, name: &str) -> Result<()> {
    run(Command::new("openssl")
        .current_dir(dir)
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
        .args(["-keyout", &format!("{name}.key"), "-out", &format!("{name}.pem"), "-subj", &format!("/CN={name}")])
        .args(["-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"]))?;
    Ok(())
}

/// A running slapd; killed (and its directory removed) on drop.
#[derive(Debug)]
pub struct Slapd {
    pub child: Child,
    pub dir: tempfile::TempDir,
    pub starttls_url: String,
    pub ldaps_url: String,
    pub plain_url: String,
}

impl Drop for Slapd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Slapd {
    pub fn start() -> Result<Self> {
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
    pub async fn wait_ready(&mut self) -> Result<()> {
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

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("slapd.log")).unwrap_or_default()
    }

    pub fn ca(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A StartTLS configuration trusting the test CA, searching as the root DN.
    pub fn config(&self) -> LdapConfig {
        let mut c = LdapConfig::new(&self.starttls_url, format!("ou=people,{SUFFIX}"), format!("ou=groups,{SUFFIX}"));
        c.starttls = true;
        c.ca_file = Some(self.ca("ca.pem"));
        c.bind_dn = Some(ROOT_DN.into());
        c.bind_password = Some(ROOT_PW.into());
        c.timeout_secs = 5;
        c
    }

    pub fn directory(&self) -> LdapDirectory {
        LdapDirectory::new(self.config()).unwrap()
    }

    /// Deletes `uid` as the root DN, the way an administrator removes a user upstream.
    pub async fn delete_user(&self, uid: &str) -> Result<()> {
        let (conn, mut ldap) = LdapConnAsync::new(&self.plain_url).await?;
        ldap3::drive!(conn);
        ldap.simple_bind(ROOT_DN, ROOT_PW).await?.success()?;
        ldap.delete(&format!("uid={uid},ou=people,{SUFFIX}")).await?.success()?;
        ldap.unbind().await?;
        Ok(())
    }
}

/// Starts slapd (its setup commands on a blocking thread) and waits until it answers.
pub async fn slapd() -> Option<Slapd> {
    if !slapd_available() {
        return None;
    }
    let mut slapd = tokio::task::spawn_blocking(Slapd::start).await.unwrap().unwrap();
    slapd.wait_ready().await.unwrap();
    Some(slapd)
}
