//! gpuhub on a Slurm cluster, end to end: the real binary with `engine = "slurm"` against the two-node
//! dev cluster (`scripts/slurm-dev-cluster.sh start`: 2 nodes × 2 fake GPUs, shards, crun), driven by the
//! real CLI, `curl`-like HTTP through the hub's proxy and OpenSSH through its gateway.
//!
//! Checks: a two-member gang with a GPU per member runs on both nodes, each member prints its rank and
//! its `CUDA_VISIBLE_DEVICES`, and members' exit codes come back; work that does not fit now waits with
//! Slurm's reason in `ps`/`inspect`, work that can never fit is refused; two half-GPU jobs share one
//! GPU through shards; a team member's job carries the team's group and writes its folder; a
//! workspace's inline HTTP app on a compute node answers through `/w/…` and `gpuhub ssh` runs `id -u`
//! in it; `gpuhub serve` killed with SIGKILL and restarted adopts the running job and records the one
//! that ended meanwhile with its exit code.
//!
//! Needs root and the dev cluster up. When it is not, the test fails saying how to start it, unless
//! `GPUHUB_SLURM_TESTS=skip`.

mod access_support;

use access_support::ssh as sshc;
use access_support::{Hub, User, WAIT, describe, eventually};
use anyhow::{Context as _, Result, bail, ensure};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const IMAGE: &str = "gpuhub/busybox:latest";
const SCRIPT: &str = "scripts/slurm-dev-cluster.sh";

/// The dev cluster's directory (the script's default).
fn cluster_dir() -> String {
    std::env::var("GPUHUB_SLURM_DIR").unwrap_or_else(|_| "/var/lib/gpuhub-slurm-dev".into())
}

/// Whether the cluster is up; `None` (after saying so) when the test is to be skipped.
fn cluster_up() -> Result<Option<()>> {
    let status = Command::new("bash").arg(access_support::repo_root().join(SCRIPT)).arg("status").output()?;
    if status.status.success() {
        return Ok(Some(()));
    }
    if std::env::var("GPUHUB_SLURM_TESTS").as_deref() == Ok("skip") {
        println!("SKIPPED: the Slurm dev cluster is not up and GPUHUB_SLURM_TESTS=skip");
        return Ok(None);
    }
    bail!("the Slurm dev cluster is not up: run `bash {SCRIPT} start` as root (or set GPUHUB_SLURM_TESTS=skip)")
}

/// The UIDs of these tests' hubs. The dev cluster's nodes are this machine, so each test makes host
/// accounts with its gpuhub users' UIDs (a cluster's accounts must have them): outside the default
/// `uid_range` (70000-99999), so that other hubs on this machine, which refuse a range holding a host
/// account (security review N15), never see them; above `UID_MAX` as any range must be.
const UID_RANGE: (u32, u32) = (120_000, 120_999);

/// Removes the host accounts and groups in [`UID_RANGE`] that an earlier run of these tests left
/// behind (killed before its accounts' drop): the hub would refuse a range holding them.
fn remove_stale_accounts() -> Result<()> {
    let stale = |file: &str| -> Result<Vec<String>> {
        Ok(std::fs::read_to_string(file)?
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                let id: u32 = f.get(2)?.parse().ok()?;
                (UID_RANGE.0..=UID_RANGE.1).contains(&id).then(|| f[0].to_owned())
            })
            .collect())
    };
    for name in stale("/etc/passwd")? {
        let out = Command::new("userdel").arg(&name).output()?;
        ensure!(out.status.success(), "userdel {name}: {}", String::from_utf8_lossy(&out.stderr));
    }
    for name in stale("/etc/group")? {
        let _ = Command::new("groupdel").arg(&name).output()?;
    }
    Ok(())
}

/// The gpuhub configuration for the dev cluster, with homes and team folders on directories the nodes
/// (this machine) can reach as the users.
fn slurm_config(homes: &Path, teams: &Path) -> String {
    let dir = cluster_dir();
    remove_stale_accounts().expect("removing stale test accounts");
    format!(
        "engine = \"slurm\"\nuid_range = \"{}-{}\"\nreconcile_secs = 2\nhomes_dir = \"{}\"\nteams_dir = \"{}\"\n[slurm]\nconf = \"{dir}/slurm.conf\"\n\
         partition = \"gpu\"\nbundle_dir = \"{dir}/bundles\"\nlog_dir = \"{dir}/gpuhub-logs\"\noci_root = \"{dir}/run/oci\"\n\
         init = \"/usr/bin/tini-static\"\nmap_usernames = true\npoll_ms = 500\n",
        UID_RANGE.0,
        UID_RANGE.1,
        homes.display(),
        teams.display()
    )
}

/// The GID of the team folder's group: the nodes' group database has it, alice among its members, as a
/// site's directory would (a rootless container cannot take on a group its user lacks).
const TEAM_GID: &str = "61001";

/// A Unix account named as the gpuhub user, with its gpuhub UID (jobs run as it), a member of a group
/// [`TEAM_GID`]; both removed on drop.
struct Account {
    name: String,
    group: String,
}

impl Account {
    fn new(user: &User) -> Result<Account> {
        let uid = user.uid.to_string();
        let group = format!("gh-team-{}", access_support::suffix());
        let _ = Command::new("userdel").arg(&user.name).output();
        let out = Command::new("groupadd").args(["-o", "-g", TEAM_GID, &group]).output()?;
        ensure!(out.status.success(), "groupadd {group}: {}", String::from_utf8_lossy(&out.stderr));
        let account = Account { name: user.name.clone(), group };
        // no subordinate IDs (useradd adds them where /etc/subuid exists, as the LXD engine's setup
        // makes it): with them, the rootless crun maps through newuidmap/newgidmap, which refuse a
        // process whose group (the team's) is not the account's and say so in the job's output
        let args = [
            "-M",
            "-s",
            "/bin/sh",
            "-u",
            &uid,
            "-o",
            "-G",
            &account.group,
            "-K",
            "SUB_UID_COUNT=0",
            "-K",
            "SUB_GID_COUNT=0",
            &user.name,
        ];
        let out = Command::new("useradd").args(args).output()?;
        ensure!(out.status.success(), "useradd {}: {}", user.name, String::from_utf8_lossy(&out.stderr));
        // Slurm finds a job's groups by its UID's name, the first account with that UID (other tests
        // on this machine keep accounts of the same UID): every such name is in the team group
        let passwd = String::from_utf8(Command::new("getent").arg("passwd").output()?.stdout)?;
        for name in passwd.lines().filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() > 2 && f[2] == uid && f[0] != user.name).then(|| f[0].to_owned())
        }) {
            let out = Command::new("gpasswd").args(["-a", &name, &account.group]).output()?;
            ensure!(out.status.success(), "gpasswd -a {name}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(account)
    }
}

impl Drop for Account {
    fn drop(&mut self) {
        // whatever a failed check left running in Slurm goes with the account
        let conf = format!("{}/slurm.conf", cluster_dir());
        let _ = Command::new("scancel").env("SLURM_CONF", conf).args(["-u", &self.name]).output();
        let _ = Command::new("userdel").arg(&self.name).output();
        let _ = Command::new("groupdel").arg(&self.group).output();
    }
}

/// `gpuhub run --name NAME --image IMAGE EXTRA -- sh -c SCRIPT`.
async fn run(user: &User, name: &str, extra: &[&str], script: &str) -> Result<String> {
    let mut args = vec!["run", "--name", name, "--image", IMAGE, "--cpus", "0.5", "--memory", "200MiB"];
    args.extend_from_slice(extra);
    args.extend(["--", "sh", "-c", script]);
    user.ok(&args).await
}

/// Waits until `done` holds for `name`'s view.
async fn until(user: &User, name: &str, what: &str, done: impl Fn(&Value) -> bool) -> Result<Value> {
    eventually(&format!("{name} {what}"), WAIT, Duration::from_millis(200), || async {
        let w = user.workload(name).await?;
        Ok(done(&w).then_some(w))
    })
    .await
}

fn ended(w: &Value) -> bool {
    w["state"].as_str().is_some_and(|s| ["succeeded", "failed", "stopped", "lost"].contains(&s))
}

/// `KEY=value` of the first line of `log` that has `KEY=`.
fn field(log: &str, key: &str) -> Option<String> {
    log.split_whitespace().find_map(|w| w.strip_prefix(&format!("{key}=")).map(str::to_owned))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpuhub_on_a_two_node_slurm_cluster() -> Result<()> {
    let _serial = access_support::serial().await;
    if cluster_up()?.is_none() {
        return Ok(());
    }
    access_support::ensure_image("build-busybox-image.sh").await?;
    let homes = tempfile::Builder::new().prefix("gpuhub-slurm-homes-").tempdir()?;
    std::fs::set_permissions(homes.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    let mut hub = Hub::start_with(&slurm_config(&homes.path().join("homes"), &homes.path().join("teams"))).await?;
    let mut alice = hub.user("alice").await?;
    let _account = Account::new(&alice)?;

    // the nodes as Slurm reports them, with their fake GPUs
    let (_, nodes) = alice.api(reqwest::Method::GET, "/api/v1/nodes", None).await?;
    let names: Vec<&str> = nodes.as_array().context("nodes")?.iter().filter_map(|n| n["name"].as_str()).collect();
    ensure!(names == ["node1", "node2"], "nodes: {nodes}");
    ensure!(nodes[0]["gpus"].as_array().map(Vec::len) == Some(2), "2 GPUs a node: {nodes}");

    // a gang of two members with a GPU each: one member per node, its rank and GPU; exit codes come back
    let script = r#"echo "rank=$RANK world=$WORLD_SIZE cuda=$CUDA_VISIBLE_DEVICES node=$(hostname) master=$MASTER_ADDR"
[ "$RANK" = 1 ] && exit 3; exit 0"#;
    run(&alice, "ddp", &["--members", "2", "--gpus", "1"], script).await?;
    let w = until(&alice, "ddp", "ended", ended).await?;
    ensure!(w["state"] == "failed" && w["exit_code"] == 3, "the run fails with member 1's code: {w:#}");
    let members = w["members"].as_array().context("members")?;
    let member_nodes: Vec<&str> = members.iter().filter_map(|m| m["node"].as_str()).collect();
    ensure!(member_nodes == ["node1", "node2"] || member_nodes == ["node2", "node1"], "one member a node: {w:#}");
    let codes: Vec<i64> = members.iter().filter_map(|m| m["exit_code"].as_i64()).collect();
    ensure!(codes == [0, 3], "each member's exit code: {w:#}");
    for i in 0..2u32 {
        let log = alice.ok(&["logs", "ddp", "--member", &i.to_string()]).await?;
        ensure!(field(&log, "rank") == Some(i.to_string()) && field(&log, "world").as_deref() == Some("2"), "{log:?}");
        ensure!(field(&log, "node").as_deref() == Some(member_nodes[i as usize]), "member {i} ran elsewhere: {log:?}");
        let cuda = field(&log, "cuda").unwrap_or_default();
        ensure!(cuda.len() == 1 && cuda.chars().all(|c| c.is_ascii_digit()), "member {i} sees one GPU: {log:?}");
        ensure!(field(&log, "master").as_deref() == Some(member_nodes[0]), "MASTER_ADDR is member 0's node: {log:?}");
    }

    // work that can never fit is refused by gpuhub; work that does not fit now waits with Slurm's reason
    let out = alice.output(&["run", "--name", "huge", "--image", IMAGE, "--gpus", "5", "--", "true"]).await?;
    let text = describe(&out);
    ensure!(
        !out.status.success() && text.contains("5 GPUs requested") && text.contains("has 2"),
        "a 5-GPU job: {text}"
    );
    run(&alice, "hold", &["--gpus", "1"], "sleep 600").await?;
    until(&alice, "hold", "running", |w| w["state"] == "running").await?;
    run(&alice, "wide", &["--members", "2", "--gpus", "2"], "sleep 600").await?;
    // once Slurm has looked at it: Resources (or Priority, behind other pending work), in gpuhub's words
    let wide = until(&alice, "wide", "waiting with Slurm's reason", |w| {
        let reason = w["explanation"]["reason"].as_str().unwrap_or("");
        w["state"] == "queued" && ["resources", "priority"].contains(&reason)
    })
    .await?;
    ensure!(wide["explanation"]["message"].as_str().unwrap_or("").contains("Slurm"), "{wide:#}");
    let reason = wide["explanation"]["reason"].as_str().unwrap_or("");
    ensure!(["resources", "priority"].contains(&reason), "Slurm's reason, in gpuhub's words: {wide:#}");
    ensure!(wide["explanation"]["position"].as_u64().is_some_and(|p| p >= 1), "its place in Slurm's queue: {wide:#}");
    let ps = alice.ok(&["ps"]).await?;
    let row = ps.lines().find(|l| l.starts_with("wide")).context("ps shows wide")?;
    ensure!(row.contains("queued") && row.contains("Slurm"), "ps: {ps}");
    alice.ok(&["stop", "hold"]).await?;
    until(&alice, "wide", "running", |w| w["state"] == "running").await?;
    alice.ok(&["stop", "wide"]).await?;

    // two half-GPU jobs share one GPU through shards
    run(&alice, "half-a", &["--gpus", "0.5"], "sleep 600").await?;
    run(&alice, "half-b", &["--gpus", "0.5"], "sleep 600").await?;
    let a = until(&alice, "half-a", "running", |w| w["state"] == "running").await?;
    let b = until(&alice, "half-b", "running", |w| w["state"] == "running").await?;
    ensure!(a["gpus"] == b["gpus"] && a["gpus"].as_array().map(Vec::len) == Some(1), "one GPU, shared: {a} {b}");
    alice.ok(&["stop", "half-a"]).await?;
    alice.ok(&["stop", "half-b"]).await?;

    // a team folder: the job keeps its user's groups on the node, the team's among them, so it writes
    // the folder as alice; her file is of the team's group (seen from the host: inside the container's
    // user namespace only her own IDs are mapped)
    let admin = hub.user_with_role("boss", true).await?;
    let team = format!("vision-{}", access_support::suffix());
    admin.ok(&["queue", "add", &team, "--members", &alice.name, "--team-gid", TEAM_GID]).await?;
    run(&alice, "team", &["--team", &team], &format!("echo hi > /team/{team}/f && cat /team/{team}/f")).await?;
    let w = until(&alice, "team", "ended", ended).await?;
    let log = alice.ok(&["logs", "team"]).await?;
    ensure!(w["state"] == "succeeded" && log.trim() == "hi", "the team job: {w:#} {log}");
    let file = homes.path().join("teams").join(&team).join("f");
    let meta = std::fs::metadata(&file).with_context(|| format!("{}", file.display()))?;
    use std::os::unix::fs::MetadataExt as _;
    ensure!(
        (u64::from(meta.uid()), meta.gid().to_string()) == (alice.uid, TEAM_GID.to_owned()),
        "{}: {meta:?}",
        file.display()
    );

    // a workspace's inline HTTP app on a compute node, through the hub's proxy; gpuhub ssh into it
    let site = format!("/tmp/www/w/{}/web/web", alice.name);
    let serve = format!(
        "mkdir -p {site}; echo hello-from-slurm > {site}/index.html; exec httpd -f -p $GPUHUB_PORT_WEB -h /tmp/www"
    );
    let mut args = vec!["run", "--workspace", "--name", "web", "--image", IMAGE, "--app", "web:8000"];
    args.extend(["--cpus", "0.5", "--memory", "200MiB", "--", "sh", "-c", &serve]);
    alice.ok(&args).await?;
    alice.wait_state("web", "running").await?;
    let page = format!("{}index.html", alice.app_url("web", "web"));
    alice.wait_http_ok(&page).await?;
    let body = access_support::http().get(&page).bearer_auth(&alice.token).send().await?.text().await?;
    ensure!(body.trim() == "hello-from-slurm", "the app answers through the hub: {body:?}");
    let keys = hub.dir.path().join("keys");
    std::fs::create_dir_all(&keys)?;
    let key = sshc::keygen(&keys, "alice").await?;
    alice.ok(&["ssh-key", "add", &key.public.display().to_string()]).await?;
    let keyfile = key.private.display().to_string();
    let mut ssh = vec!["ssh", "web", "-i", &keyfile];
    for o in ["StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null", "BatchMode=yes", "IdentitiesOnly=yes"] {
        ssh.extend(["-o", o]);
    }
    ssh.extend(["--", "id", "-u"]);
    let out = alice.output(&ssh).await?;
    ensure!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == alice.uid.to_string(),
        "gpuhub ssh web -- id -u: {}",
        describe(&out)
    );
    alice.ok(&["stop", "web"]).await?;

    // gpuhub killed mid-run: the running job is adopted, the one that ended meanwhile recorded
    run(&alice, "long", &[], "sleep 600").await?;
    run(&alice, "short", &[], "sleep 4; exit 7").await?;
    let long = until(&alice, "long", "running", |w| w["state"] == "running").await?;
    let short = until(&alice, "short", "running", |w| w["state"] == "running").await?;
    let short_job =
        short["members"][0]["engine_id"].as_str().context("short's step")?.split('.').next().unwrap_or("").to_owned();
    hub.kill()?;
    let conf = format!("{}/slurm.conf", cluster_dir());
    eventually("the short job ending in Slurm", WAIT, Duration::from_millis(250), || async {
        let out = Command::new("squeue")
            .env("SLURM_CONF", &conf)
            .args(["-h", "-t", "all", "-o", "%T", "-j", &short_job])
            .output()?;
        let state = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        Ok((!state.is_empty() && !["PENDING", "RUNNING", "COMPLETING", "CONFIGURING"].contains(&state.as_str()))
            .then_some(()))
    })
    .await?;
    hub.restart(&mut [&mut alice]).await?;
    let short = until(&alice, "short", "recorded", ended).await?;
    ensure!(short["state"] == "failed" && short["exit_code"] == 7, "ended meanwhile, its code recorded: {short:#}");
    let again = alice.workload("long").await?;
    ensure!(
        again["state"] == "running" && again["members"][0]["engine_id"] == long["members"][0]["engine_id"],
        "the running job is adopted, not started again: {again:#}"
    );
    alice.ok(&["stop", "long"]).await?;
    Ok(())
}

/// A service on Slurm is a job submitted again, after the backoff, when it exits: busybox's `httpd` on
/// the port gpuhub gives it (`$GPUHUB_PORT_SERVICE`, the nodes share their network) answers through the
/// hub; when its program exits (5, once a file appears in its home), it is queued again (`restarts` 1,
/// its message naming the code and the wait), resubmitted as a new job, and answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_on_slurm_is_a_job_submitted_again_when_it_exits() -> Result<()> {
    let _serial = access_support::serial().await;
    if cluster_up()?.is_none() {
        return Ok(());
    }
    access_support::ensure_image("build-busybox-image.sh").await?;
    let homes = tempfile::Builder::new().prefix("gpuhub-slurm-homes-").tempdir()?;
    std::fs::set_permissions(homes.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    let mut hub = Hub::start_with(&slurm_config(&homes.path().join("homes"), &homes.path().join("teams"))).await?;
    let alice = hub.user("alice").await?;
    let _account = Account::new(&alice)?;
    let script = r#"rm -f $HOME/die; mkdir -p /tmp/www; echo "run $(cat /proc/sys/kernel/random/uuid)" > /tmp/www/index.html
httpd -f -p $GPUHUB_PORT_SERVICE -h /tmp/www & while [ ! -e $HOME/die ]; do sleep 1; done; exit 5"#;
    let mut args = vec!["service", "run", "--name", "web", "--port", "8000", "--ready-http", "/index.html"];
    args.extend(["--image", IMAGE, "--cpus", "0.5", "--memory", "200MiB", "--", "sh", "-c", script]);
    let out = alice.ok(&args).await?;
    ensure!(out.trim_end().ends_with(&format!("/w/{}/web/service/", alice.name)), "its URL: {out}");
    let first = until(&alice, "web", "running", |w| w["state"] == "running").await?;
    let page = format!("{}index.html", alice.app_url("web", "service"));
    alice.wait_http_ok(&page).await?;
    let get = || async { access_support::http().get(&page).bearer_auth(&alice.token).send().await?.text().await };
    let body = get().await?;
    ensure!(body.starts_with("run "), "the service answers through the hub: {body:?}");
    let ready = until(&alice, "web", "ready", |w| w["service"]["ready"] == true).await?;
    ensure!(ready["restarts"] == 0, "{ready:#}");

    std::fs::write(homes.path().join("homes").join(&alice.name).join("die"), "")?;
    let again = until(&alice, "web", "queued again", |w| w["restarts"] == 1).await?;
    let message = again["message"].as_str().unwrap_or_default();
    ensure!(message.contains("exited with code 5; restarting in 10s (restart 1)"), "{again:#}");
    let second = until(&alice, "web", "running again", |w| w["state"] == "running" && w["restarts"] == 1).await?;
    let job =
        |w: &Value| w["members"][0]["engine_id"].as_str().unwrap_or_default().split('.').next().map(str::to_owned);
    ensure!(job(&first) != job(&second), "a new Slurm job: {first:#} {second:#}");
    alice.wait_http_ok(&page).await?;
    let body2 = get().await?;
    ensure!(body2.starts_with("run ") && body2 != body, "the new run answers: {body:?} then {body2:?}");
    alice.ok(&["stop", "web"]).await?;
    let stopped = until(&alice, "web", "stopped", ended).await?;
    ensure!(stopped["state"] == "stopped" && stopped["restarts"] == 1, "a stop ends it: {stopped:#}");

    // a running job's time limit extended through gpuhub is Slurm's too (`scontrol update`)
    run(&alice, "long", &["--time-limit", "2m"], "sleep 600").await?;
    let long = until(&alice, "long", "running", |w| w["state"] == "running").await?;
    let out = alice.ok(&["edit", "long", "--extend", "8m"]).await?;
    ensure!(out.contains("time limit 10m"), "gpuhub edit: {out}");
    let job =
        long["members"][0]["engine_id"].as_str().context("long's step")?.split('.').next().unwrap_or("").to_owned();
    let conf = format!("{}/slurm.conf", cluster_dir());
    let out = Command::new("scontrol").env("SLURM_CONF", conf).args(["show", "job", &job]).output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(text.contains("TimeLimit=00:10:00"), "Slurm's time limit: {text}");
    alice.ok(&["stop", "long"]).await?;
    Ok(())
}

/// Issue 21: an image whose root file system has no `/proc` (nor `/sys`, `/dev`), as `docker import`
/// of a plain root file system or `FROM scratch` make, failed on Slurm ("crun: cannot mkdir 'proc':
/// Permission denied"): the job's user cannot make mount points in the image's root. It runs now, as a
/// two-node gang, with `/proc` mounted in each member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_imported_image_without_proc_runs_as_a_gang_on_slurm() -> Result<()> {
    let _serial = access_support::serial().await;
    if cluster_up()?.is_none() {
        return Ok(());
    }
    access_support::ensure_image("build-busybox-image.sh").await?;
    // busybox's root file system without proc, sys, dev and run, imported as an image of its own
    let image = format!("gpuhub/noproc-{}:latest", access_support::suffix());
    let made = Command::new("sh")
        .args([
            "-euc",
            r#"d=$(mktemp -d); trap 'rm -rf "$d"' EXIT; c=$(docker create "$1" true)
docker export "$c" | tar -x -C "$d"; docker rm "$c" >/dev/null
rm -rf "$d/proc" "$d/sys" "$d/dev" "$d/run"; chmod 755 "$d"; tar -C "$d" -c . | docker import - "$2" >/dev/null"#,
            "sh",
            IMAGE,
            &image,
        ])
        .output()?;
    ensure!(made.status.success(), "importing the image: {}", describe(&made));
    let homes = tempfile::Builder::new().prefix("gpuhub-slurm-homes-").tempdir()?;
    std::fs::set_permissions(homes.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    let mut hub = Hub::start_with(&slurm_config(&homes.path().join("homes"), &homes.path().join("teams"))).await?;
    let alice = hub.user("alice").await?;
    let _account = Account::new(&alice)?;
    let script = r#"echo "rank=$RANK proc=$(test -r /proc/self/status && echo yes)""#;
    let args = ["run", "--name", "bare", "--image", &image, "--cpus", "0.5", "--memory", "200MiB"];
    alice.ok(&[&args[..], &["--members", "2", "--gpus", "1", "--", "sh", "-c", script]].concat()).await?;
    let w = until(&alice, "bare", "ended", ended).await?;
    let logs =
        [alice.ok(&["logs", "bare", "--member", "0"]).await?, alice.ok(&["logs", "bare", "--member", "1"]).await?];
    let _ = Command::new("docker").args(["rmi", "-f", &image]).output();
    ensure!(w["state"] == "succeeded", "the gang of an image without /proc: {w:#} {logs:?}");
    for (i, log) in logs.iter().enumerate() {
        ensure!(field(log, "rank") == Some(i.to_string()) && field(log, "proc").as_deref() == Some("yes"), "{log:?}");
    }
    Ok(())
}
