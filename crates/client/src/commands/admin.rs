//! Cluster and account commands: `nodes`, `images [add]`, `user …`.

use super::{Out, print_json, read_password, role_str};
use crate::cli::{DatasetsCommand, ImagesCommand, UserCommand};
use crate::http::{Api, decode};
use crate::table::{Table, age, cores, size};
use crate::{ClientError, Context};
use chrono::{DateTime, Utc};
use gpuhub_api::{CreateUserRequest, ImageEntry, NodeView, PatchUserRequest, UserView};
use gpuhub_core::Bytes;
use gpuhub_core::dataset::{Dataset, S3Source, Secret};
use reqwest::Method;
use serde_json::Value;

/// `gpuhub nodes`.
pub(crate) async fn nodes(api: &Api, json: bool, out: Out<'_>) -> Result<(), ClientError> {
    let v = Value::Array(api.get_all_pages(&["nodes"], &[]).await?);
    if json {
        return print_json(out, &v);
    }
    let list: Vec<NodeView> = decode(&v, api.url(&["nodes"], &[]).as_str())?;
    write!(out, "{}", nodes_text(&list))?;
    Ok(())
}

/// One block per node: its CPUs and memory used/total, then one line per GPU with its holder.
pub(crate) fn nodes_text(list: &[NodeView]) -> String {
    let mut s = String::new();
    for (i, n) in list.iter().enumerate() {
        if i > 0 {
            s.push('\n');
        }
        // GPUs in use, shares counted in thousandths: `1.25/2`
        let milli: u64 = n
            .gpus
            .iter()
            .map(|g| if g.holder.is_some() { 1000 } else { g.shares.iter().map(|s| u64::from(s.milli)).sum() })
            .sum();
        let held = milli as f64 / 1000.0;
        let mut t = Table::new(&["NODE", "CPUS", "MEMORY", "GPUS"]);
        t.row(vec![
            n.name.clone(),
            format!("{}/{}", cores(n.cpus - n.cpus_free), cores(n.cpus)),
            format!("{}/{}", size(Bytes(n.memory.0.saturating_sub(n.memory_free.0))), size(n.memory)),
            format!("{held}/{}", n.gpus.len()),
        ]);
        s.push_str(&t.render(""));
        if n.gpus.is_empty() {
            continue;
        }
        let mut g = Table::new(&["GPU", "MODEL", "MEMORY", "SHARING", "HOLDER"]);
        for gpu in &n.gpus {
            let holder = match (&gpu.holder, gpu.shares.is_empty()) {
                (Some(h), _) => format!("{}/{}", h.owner, h.workload),
                (None, true) => "free".to_owned(),
                (None, false) => gpu
                    .shares
                    .iter()
                    .map(|s| format!("{}/{} {}", s.owner, s.workload, f64::from(s.milli) / 1000.0))
                    .collect::<Vec<_>>()
                    .join(", "),
            };
            let sharing = gpu.sharing.map_or("-", |m| m.as_str()).to_owned();
            g.row(vec![gpu.index.to_string(), gpu.model.clone(), size(gpu.memory), sharing, holder]);
        }
        s.push_str(&g.render("  "));
    }
    s
}

/// `gpuhub save WS --as NAME`.
pub(crate) async fn save(api: &Api, json: bool, workspace: &str, name: &str, out: Out<'_>) -> Result<(), ClientError> {
    let body = serde_json::json!({"as": name});
    let v = api.send_json(Method::POST, &["workloads", workspace, "save"], &body).await?.unwrap_or(Value::Null);
    if json {
        return print_json(out, &v);
    }
    let p: gpuhub_core::image::PersonalImage = decode(&v, api.url(&["workloads", workspace, "save"], &[]).as_str())?;
    writeln!(
        out,
        "saved {workspace} as {} ({}, {}); run it with --image {}",
        p.name,
        p.reference,
        gpuhub_core::quantity::Bytes(p.size_bytes),
        p.name
    )?;
    Ok(())
}

/// `gpuhub images --mine` and `gpuhub images --mine rm NAME`.
pub(crate) async fn my_images(
    api: &Api,
    json: bool,
    cmd: Option<ImagesCommand>,
    out: Out<'_>,
) -> Result<(), ClientError> {
    match cmd {
        None => {
            let v = api.get(&["me", "images"], &[]).await?;
            if json {
                return print_json(out, &v);
            }
            let list: Vec<gpuhub_core::image::PersonalImage> = decode(&v, api.url(&["me", "images"], &[]).as_str())?;
            let mut t = Table::new(&["NAME", "IMAGE", "SIZE", "FROM", "SAVED"]);
            for p in list {
                let size = gpuhub_core::quantity::Bytes(p.size_bytes).to_string();
                t.row(vec![p.name, p.reference, size, p.workload, p.created_at.format("%Y-%m-%d %H:%M").to_string()]);
            }
            write!(out, "{}", t.render(""))?;
        }
        Some(ImagesCommand::Rm { name }) => {
            api.call(Method::DELETE, &["me", "images", &name], &[], None).await?;
            if !json {
                writeln!(out, "removed your image {name}")?;
            }
        }
        Some(ImagesCommand::Add { .. }) => {
            return Err(ClientError::Usage(
                "images --mine add: save a workspace with `gpuhub save WS --as NAME`".into(),
            ));
        }
    }
    Ok(())
}

/// `gpuhub images` and `gpuhub images add`.
pub(crate) async fn images(api: &Api, json: bool, cmd: Option<ImagesCommand>, out: Out<'_>) -> Result<(), ClientError> {
    match cmd {
        None => {
            let v = Value::Array(api.get_all_pages(&["images"], &[]).await?);
            if json {
                return print_json(out, &v);
            }
            let list: Vec<ImageEntry> = decode(&v, api.url(&["images"], &[]).as_str())?;
            let mut t = Table::new(&["NAME", "IMAGE", "DESCRIPTION"]);
            for e in list {
                t.row(vec![e.name, e.image, e.description]);
            }
            write!(out, "{}", t.render(""))?;
        }
        Some(ImagesCommand::Add { name, image, description, apps }) => {
            let entry = ImageEntry { name, image, description, apps };
            let v = api.send_json(Method::POST, &["images"], &entry).await?;
            match v {
                Some(v) if json => print_json(out, &v)?,
                _ => writeln!(out, "added image {} ({})", entry.name, entry.image)?,
            }
        }
        Some(ImagesCommand::Rm { name }) => {
            api.call(Method::DELETE, &["images", &name], &[], None).await?;
            if !json {
                writeln!(out, "removed image {name} from the catalog")?;
            }
        }
    }
    Ok(())
}

/// `gpuhub datasets [add NAME PATH | rm NAME]`.
pub(crate) async fn datasets(
    ctx: &Context,
    api: &Api,
    json: bool,
    cmd: Option<DatasetsCommand>,
    out: Out<'_>,
) -> Result<(), ClientError> {
    match cmd {
        None => {
            let v = api.call(Method::GET, &["datasets"], &[], None).await?.unwrap_or(Value::Array(Vec::new()));
            if json {
                return print_json(out, &v);
            }
            let list: Vec<Dataset> = decode(&v, api.url(&["datasets"], &[]).as_str())?;
            let mut t = Table::new(&["NAME", "PATH", "MODE", "STATUS", "DESCRIPTION"]);
            for d in list {
                let source = match (&d.s3, d.nfs) {
                    (Some(s), _) => format!("{} at {}", s.url, s.endpoint),
                    (None, Some(n)) => format!("nfs {n}"),
                    (None, None) => d.path,
                };
                let mode = if d.read_only { "ro" } else { "rw" };
                let status = d.status.unwrap_or_else(|| "-".into());
                t.row(vec![d.name, source, mode.into(), status, d.description]);
            }
            write!(out, "{}", t.render(""))?;
        }
        Some(DatasetsCommand::Add {
            name,
            path,
            description,
            endpoint,
            region,
            access_key,
            secret_key_stdin,
            read_only: _,
            read_write,
        }) => {
            let source = path.clone();
            let s3 = if path.starts_with("s3://") {
                let secret_key = match &access_key {
                    Some(_) => Some(Secret::new(s3_secret(ctx, secret_key_stdin)?)),
                    None => None,
                };
                Some(S3Source {
                    url: path.clone(),
                    endpoint: endpoint.unwrap_or_default(),
                    region,
                    access_key,
                    secret_key,
                })
            } else if endpoint.is_some() || access_key.is_some() || region.is_some() {
                return Err(ClientError::Usage(
                    "--endpoint, --region and --access-key are for s3://bucket/prefix datasets".into(),
                ));
            } else {
                None
            };
            // `server:/export` is an NFS export; anything else a directory on the nodes
            let nfs = (s3.is_none() && !path.starts_with('/') && path.contains(":/")).then(|| path.clone());
            let path = if nfs.is_some() || s3.is_some() { String::new() } else { path };
            let d = Dataset { name, path, nfs, s3, read_only: !read_write, description, status: None };
            // a Secret serializes as "<set>" (answers never show it): the request carries the key itself
            let mut body = serde_json::to_value(&d).map_err(|e| ClientError::Usage(e.to_string()))?;
            if let Some(secret) = d.s3.as_ref().and_then(|s| s.secret_key.as_ref()) {
                body["s3"]["secret_key"] = Value::String(secret.expose().to_owned());
            }
            let v = api.send_json(Method::POST, &["datasets"], &body).await?;
            let mode = if d.read_only { "read-only" } else { "read-write" };
            match v {
                Some(v) if json => print_json(out, &v)?,
                Some(v) if d.s3.is_some() => {
                    let status = v["status"].as_str().unwrap_or("unknown");
                    writeln!(
                        out,
                        "added dataset {} ({source}), mounted {mode} at /datasets/{} ({status})",
                        d.name, d.name
                    )?
                }
                _ => writeln!(out, "added dataset {} ({source}), mounted {mode} at /datasets/{}", d.name, d.name)?,
            }
        }
        Some(DatasetsCommand::Rm { name }) => {
            api.call(Method::DELETE, &["datasets", &name], &[], None).await?;
            if !json {
                writeln!(out, "removed dataset {name}")?;
            }
        }
    }
    Ok(())
}

/// An S3 secret key: the first line of standard input, else `AWS_SECRET_ACCESS_KEY`, else typed at a
/// prompt; never an argument (others see those in `ps`).
fn s3_secret(ctx: &Context, stdin: bool) -> Result<String, ClientError> {
    if !stdin {
        if let Ok(k) = std::env::var("AWS_SECRET_ACCESS_KEY").map(|k| k.trim().to_owned()) {
            if !k.is_empty() {
                return Ok(k);
            }
        }
    }
    read_password(&Context { password: None, ..ctx.clone() }, stdin, "S3 secret key: ", false)
}

/// `gpuhub user …`.
pub(crate) async fn user(
    ctx: &Context,
    api: &Api,
    json: bool,
    cmd: UserCommand,
    out: Out<'_>,
) -> Result<(), ClientError> {
    let (v, done) = match cmd {
        UserCommand::List => {
            let v = Value::Array(api.get_all_pages(&["users"], &[]).await?);
            if json {
                return print_json(out, &v);
            }
            let list: Vec<UserView> = decode(&v, api.url(&["users"], &[]).as_str())?;
            write!(out, "{}", users_table(&list, crate::clock::now()))?;
            return Ok(());
        }
        UserCommand::Add { name, admin, password_stdin } => {
            let password = read_password(ctx, password_stdin, &format!("password for new user {name}: "), true)?;
            let req = CreateUserRequest { username: name.clone(), password, admin };
            let v = api.send_json(Method::POST, &["users"], &req).await?;
            let role = if admin { " (admin)" } else { "" };
            (v, format!("created user {name}{role}"))
        }
        UserCommand::Disable { name, keep_workloads } => {
            let patch = PatchUserRequest {
                disabled: Some(true),
                keep_workloads: keep_workloads.then_some(true),
                ..Default::default()
            };
            (api.send_json(Method::PATCH, &["users", &name], &patch).await?, format!("disabled user {name}"))
        }
        UserCommand::Quota { name, quota } => {
            let patch = PatchUserRequest { home_quota: Some(quota.clone()), ..Default::default() };
            let v = api.send_json(Method::PATCH, &["users", &name], &patch).await?;
            (v, format!("home quota of {name}: {quota}"))
        }
        UserCommand::Enable { name } => {
            let patch = PatchUserRequest { disabled: Some(false), ..Default::default() };
            (api.send_json(Method::PATCH, &["users", &name], &patch).await?, format!("enabled user {name}"))
        }
        UserCommand::Role { name, role } => {
            let patch = PatchUserRequest { admin: Some(role == "admin"), ..Default::default() };
            (
                api.send_json(Method::PATCH, &["users", &name], &patch).await?,
                format!("{name} is now {}", if role == "admin" { "an admin" } else { "a user" }),
            )
        }
        UserCommand::Password { name, password_stdin } => {
            let password = read_password(ctx, password_stdin, &format!("new password for {name}: "), true)?;
            let patch = PatchUserRequest { password: Some(password), ..Default::default() };
            (
                api.send_json(Method::PATCH, &["users", &name], &patch).await?,
                format!("set the password of {name}; their tokens and sessions are revoked"),
            )
        }
        UserCommand::Rm { name, delete_home } => {
            let home = if delete_home { "delete" } else { "archive" };
            let v = api.call(Method::DELETE, &["users", &name], &[("home", home)], None).await?;
            let what = if delete_home { "deleted" } else { "archived" };
            (v, format!("removed user {name} with their workloads; their home was {what}"))
        }
    };
    print_outcome(out, json, v, &done)
}

/// After a change: the answer as JSON with `--json` (nothing when there was none), else a line.
fn print_outcome(out: Out<'_>, json: bool, v: Option<Value>, done: &str) -> Result<(), ClientError> {
    match v {
        Some(v) if json => print_json(out, &v),
        _ if json => Ok(()),
        _ => {
            writeln!(out, "{done}")?;
            Ok(())
        }
    }
}

/// The `user list` table.
pub(crate) fn users_table(list: &[UserView], now: DateTime<Utc>) -> String {
    let mut t = Table::new(&["USERNAME", "ROLE", "UID", "STATUS", "HOME", "AGE"]);
    for u in list {
        let status = if u.disabled { "disabled" } else { "enabled" };
        t.row(vec![
            u.username.clone(),
            role_str(u.role).to_owned(),
            u.uid.to_string(),
            status.to_owned(),
            gpuhub_api::HomeView::text(u.home.as_ref()),
            age(u.created_at, now),
        ]);
    }
    t.render("")
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use gpuhub_api::{GpuHolder, GpuShareView, GpuView};
    use gpuhub_core::quantity::GIB;
    use gpuhub_core::user::Role;

    #[test]
    fn nodes_rendering() {
        let gpu = |index, holder: Option<(&str, &str)>| GpuView {
            uuid: format!("GPU-{index}"),
            index,
            model: "NVIDIA H200".into(),
            memory: Bytes(141 * GIB),
            holder: holder.map(|(o, w)| GpuHolder { owner: o.into(), workload: w.into() }),
            shares: vec![],
            sharing: None,
        };
        let list = [
            NodeView {
                name: "node-1".into(),
                state: "docker".into(),
                cpus: 16.0,
                cpus_free: 11.5,
                memory: Bytes(64 * GIB),
                memory_free: Bytes(56 * GIB),
                gpus: vec![
                    gpu(0, Some(("alice", "train"))),
                    gpu(1, None),
                    GpuView {
                        sharing: Some(gpuhub_core::node::GpuSharing::Mps),
                        shares: vec![
                            GpuShareView { owner: "bob".into(), workload: "nb".into(), milli: 250, memory: None },
                            GpuShareView {
                                owner: "carol".into(),
                                workload: "eval".into(),
                                milli: 500,
                                memory: Some(Bytes(GIB)),
                            },
                        ],
                        ..gpu(2, None)
                    },
                ],
            },
            NodeView {
                name: "cpu-only".into(),
                cpus: 4.0,
                cpus_free: 4.0,
                memory: Bytes(8 * GIB),
                memory_free: Bytes(8 * GIB),
                gpus: vec![],
                state: "docker".into(),
            },
        ];
        assert_eq!(
            nodes_text(&list),
            "NODE    CPUS    MEMORY      GPUS\n\
             node-1  4.5/16  8GiB/64GiB  1.75/3\n  \
             GPU  MODEL        MEMORY  SHARING  HOLDER\n  \
             0    NVIDIA H200  141GiB  -        alice/train\n  \
             1    NVIDIA H200  141GiB  -        free\n  \
             2    NVIDIA H200  141GiB  mps      bob/nb 0.25, carol/eval 0.5\n\
             \n\
             NODE      CPUS  MEMORY   GPUS\n\
             cpu-only  0/4   0B/8GiB  0/0\n"
        );
    }

    #[test]
    fn users_rendering() {
        let t0 = Utc.with_ymd_and_hms(2025, 1, 1, 0, 0, 0).unwrap();
        let u = |name: &str, role, disabled| UserView {
            username: name.into(),
            role,
            uid: 10_000,
            gid: 10_000,
            source: Default::default(),
            disabled,
            created_at: t0,
            home_quota: None,
            home: None,
        };
        let mut root = u("root", Role::Admin, false);
        root.home = Some(gpuhub_api::HomeView { used_bytes: 3 * GIB + GIB / 2, quota_bytes: Some(10 * GIB) });
        let s = users_table(&[root, u("bob", Role::User, true)], t0 + chrono::Duration::days(4));
        assert_eq!(
            s,
            "USERNAME  ROLE   UID    STATUS    HOME              AGE\n\
             root      admin  10000  enabled   3.50GiB of 10GiB  4d\n\
             bob       user   10000  disabled  -                 4d\n"
        );
    }
}
