//! The commands: each turns its arguments into API calls and prints a table, a line or JSON.

mod account;
mod admin;
pub mod edit;
pub mod queues;
mod sched;
pub mod service;
mod ssh;
pub mod stats;
mod usage;
mod workloads;

pub(crate) use ssh::ssh_program_from;

use crate::cli::{ClientCommand, GlobalOpts, LoginArgs};
use crate::credentials::Credentials;
use crate::http::{Api, decode};
use crate::{ClientError, Context};
use gpuhub_api::{LoginRequest, TokenResponse, UserView};
use gpuhub_core::user::Role;
use reqwest::Method;
use serde_json::Value;
use std::io::{BufRead, Write};

/// Where command output goes.
pub(crate) type Out<'a> = &'a mut (dyn Write + Send);

/// Runs one command; returns the exit code.
pub(crate) async fn dispatch(
    ctx: &Context,
    global: &GlobalOpts,
    cmd: ClientCommand,
    out: Out<'_>,
) -> Result<i32, ClientError> {
    if let ClientCommand::Login(args) = cmd {
        login(ctx, global, &args, out).await?;
        return Ok(0);
    }
    let api = connect(ctx, global)?;
    let json = global.json;
    match cmd {
        ClientCommand::Login(_) => unreachable!("handled above"),
        ClientCommand::Whoami => whoami(&api, json, out).await?,
        ClientCommand::Tokens { command } => account::tokens(&api, json, command, out).await?,
        ClientCommand::Passwd { password_stdin } => account::passwd(ctx, &api, password_stdin, out).await?,
        ClientCommand::Run(args) => return workloads::run(ctx, &api, json, *args, out).await,
        ClientCommand::Service { command } => return service::service(ctx, &api, json, command, out).await,
        ClientCommand::Ps(args) => workloads::ps(&api, json, args.all, out).await?,
        ClientCommand::Logs(args) => {
            let source = workloads::Source { app: args.app.as_deref(), member: args.member };
            workloads::logs(&api, &args.name, args.owner.as_deref(), source, args.follow, out).await?;
        }
        ClientCommand::Stop(n) => workloads::action(&api, json, &n.name, n.owner.as_deref(), "stop", out).await?,
        ClientCommand::Start(n) => workloads::action(&api, json, &n.name, n.owner.as_deref(), "start", out).await?,
        ClientCommand::Rm(n) => workloads::rm(&api, json, &n.name, n.owner.as_deref(), out).await?,
        ClientCommand::Inspect(n) => workloads::inspect(&api, json, &n.name, n.owner.as_deref(), out).await?,
        ClientCommand::Nodes => admin::nodes(&api, json, out).await?,
        ClientCommand::Queues => sched::queues(&api, json, out).await?,
        ClientCommand::Queue { command } => queues::queue(&api, json, command, out).await?,
        ClientCommand::Reservations(args) => {
            sched::reservations(&api, json, args.command, crate::clock::now(), out).await?
        }
        ClientCommand::Usage(args) => usage::usage(&api, json, args, out).await?,
        ClientCommand::Keep(args) => usage::keep(&api, json, args, out).await?,
        ClientCommand::Idle => usage::idle(&api, json, crate::clock::now(), out).await?,
        ClientCommand::Stats(args) => stats::stats(&api, json, args, out).await?,
        ClientCommand::Edit(args) => edit::edit(&api, json, args, out).await?,
        ClientCommand::Top(args) => stats::top(&api, json, args, out).await?,
        ClientCommand::Images(args) if args.mine => admin::my_images(&api, json, args.command, out).await?,
        ClientCommand::Images(args) => admin::images(&api, json, args.command, out).await?,
        ClientCommand::Save { workspace, name } => admin::save(&api, json, &workspace, &name, out).await?,
        ClientCommand::Datasets(args) => admin::datasets(ctx, &api, json, args.command, out).await?,
        ClientCommand::User { command } => admin::user(ctx, &api, json, command, out).await?,
        ClientCommand::SshKey { command } => ssh::key(&api, json, command, out).await?,
        ClientCommand::Ssh(args) => {
            // ssh writes to the terminal itself: what was printed so far must come first
            out.flush()?;
            return ssh::ssh(ctx, &api, args).await;
        }
        ClientCommand::SshConfig(args) => ssh::config(&api, args, out).await?,
    }
    Ok(0)
}

/// The API client for a logged-in command: server from the options or the saved login, token from the
/// context or the saved login. The saved token goes only to the server it was issued by.
fn connect(ctx: &Context, global: &GlobalOpts) -> Result<Api, ClientError> {
    let saved = Credentials::load(&ctx.config_dir)?;
    let server = global.server.clone().or_else(|| saved.as_ref().map(|c| c.server.clone()));
    if let Some(token) = ctx.token.clone() {
        return match server {
            Some(server) => Api::new(&server, Some(token)),
            None => Err(ClientError::NoServer),
        };
    }
    let (Some(saved), Some(server)) = (saved, server) else { return Err(ClientError::NotLoggedIn) };
    let api = Api::new(&server, Some(saved.token.clone()))?;
    if api.server() != Api::new(&saved.server, None)?.server() {
        return Err(ClientError::NotLoggedInTo(api.server().to_owned()));
    }
    Ok(api)
}

/// `gpuhub login`: exchanges a password for a token and saves it.
async fn login(ctx: &Context, global: &GlobalOpts, args: &LoginArgs, out: Out<'_>) -> Result<(), ClientError> {
    let server = match &global.server {
        Some(s) => s.clone(),
        None => Credentials::load(&ctx.config_dir)?.map(|c| c.server).ok_or(ClientError::NoServer)?,
    };
    let api = Api::new(&server, None)?;
    let prompt = format!("password for {} at {}: ", args.user, api.server());
    let password = read_password(ctx, args.password_stdin, &prompt, false)?;
    let req = LoginRequest { username: args.user.clone(), password, token: true };
    let answer = api.send_json(Method::POST, &["login"], &req).await?;
    let url = api.url(&["login"], &[]).to_string();
    let resp: TokenResponse = decode(&answer.unwrap_or(Value::Null), &url)?;
    let token = resp.token.ok_or_else(|| ClientError::BadResponse { url: url.clone(), reason: "no token".into() })?;
    let creds = Credentials { server: api.server().to_owned(), username: resp.username.clone(), token };
    creds.save(&ctx.config_dir)?;
    if global.json {
        let shown = serde_json::json!({"server": creds.server, "username": resp.username, "role": resp.role});
        print_json(out, &shown)
    } else {
        writeln!(out, "logged in to {} as {} ({})", creds.server, resp.username, role_str(resp.role))?;
        Ok(())
    }
}

/// `gpuhub whoami`.
async fn whoami(api: &Api, json: bool, out: Out<'_>) -> Result<(), ClientError> {
    let v = api.get(&["me"], &[]).await?;
    if json {
        return print_json(out, &v);
    }
    let me: UserView = decode(&v, api.url(&["me"], &[]).as_str())?;
    let disabled = if me.disabled { ", disabled" } else { "" };
    writeln!(out, "{} ({}{disabled}) at {}", me.username, role_str(me.role), api.server())?;
    // the id one's containers run as and one's files are owned by
    writeln!(out, "uid {}, gid {}", me.uid, me.gid)?;
    if let Some(h) = &me.home {
        writeln!(out, "home: {}", gpuhub_api::HomeView::text(Some(h)))?;
    }
    Ok(())
}

/// Pretty JSON and a newline.
pub(crate) fn print_json(out: Out<'_>, v: &Value) -> Result<(), ClientError> {
    serde_json::to_writer_pretty(&mut *out, v).map_err(std::io::Error::from)?;
    writeln!(out)?;
    Ok(())
}

/// The lowercase name of a role.
pub(crate) fn role_str(r: Role) -> &'static str {
    match r {
        Role::Admin => "admin",
        Role::User => "user",
    }
}

/// A password: the context's, the first line of standard input, or typed at a prompt without echo
/// (twice when `confirm`).
pub(crate) fn read_password(ctx: &Context, stdin: bool, prompt: &str, confirm: bool) -> Result<String, ClientError> {
    let pw = if let Some(p) = &ctx.password {
        p.clone()
    } else if stdin {
        first_line(std::io::stdin().lock())?
    } else {
        let err = |e: std::io::Error| ClientError::Password(format!("cannot read from the terminal: {e}"));
        let p = rpassword::prompt_password(prompt).map_err(err)?;
        if confirm && rpassword::prompt_password("again: ").map_err(err)? != p {
            return Err(ClientError::Password("the two entries differ".into()));
        }
        p
    };
    if pw.is_empty() {
        return Err(ClientError::Password("empty".into()));
    }
    Ok(pw)
}

/// The first line of `r`, without its line ending.
fn first_line(mut r: impl BufRead) -> Result<String, ClientError> {
    let mut line = String::new();
    r.read_line(&mut line).map_err(|e| ClientError::Password(format!("cannot read standard input: {e}")))?;
    let trimmed = line.strip_suffix('\n').unwrap_or(&line);
    Ok(trimmed.strip_suffix('\r').unwrap_or(trimmed).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_line_strips_the_ending_only() {
        assert_eq!(first_line(&b"s3cret \nnext\n"[..]).unwrap(), "s3cret ");
        assert_eq!(first_line(&b"pw\r\n"[..]).unwrap(), "pw");
        assert_eq!(first_line(&b"no newline"[..]).unwrap(), "no newline");
        assert_eq!(first_line(&b""[..]).unwrap(), "");
    }

    #[test]
    fn context_password_wins_and_empty_is_refused() {
        let ctx = Context::new("/nonexistent").with_password("pw");
        assert_eq!(read_password(&ctx, true, "", false).unwrap(), "pw");
        let ctx = Context::new("/nonexistent").with_password("");
        assert_eq!(read_password(&ctx, true, "", false).unwrap_err().to_string(), "password: empty");
    }

    #[test]
    fn connect_needs_a_login() {
        let tmp = tempfile::tempdir().unwrap();
        let ctx = Context::new(tmp.path());
        let e = connect(&ctx, &GlobalOpts::default()).unwrap_err().to_string();
        assert_eq!(e, "not logged in: run gpuhub login --server URL --user NAME");
        let g = GlobalOpts { server: Some("http://h:1".into()), json: false };
        assert!(matches!(connect(&ctx, &g), Err(ClientError::NotLoggedIn)));
        // a token from the environment needs a server from somewhere
        let ctx = ctx.with_token("t");
        assert!(matches!(connect(&ctx, &GlobalOpts::default()), Err(ClientError::NoServer)));
        assert_eq!(connect(&ctx, &g).unwrap().server(), "http://h:1");
    }

    #[test]
    fn saved_login_and_overrides() {
        let tmp = tempfile::tempdir().unwrap();
        let saved = Credentials { server: "http://saved:1".into(), username: "a".into(), token: "t".into() };
        saved.save(tmp.path()).unwrap();
        let ctx = Context::new(tmp.path());
        assert_eq!(connect(&ctx, &GlobalOpts::default()).unwrap().server(), "http://saved:1");
        let g = GlobalOpts { server: Some("http://saved:1/".into()), json: false };
        assert_eq!(connect(&ctx, &g).unwrap().server(), "http://saved:1");
        // the saved token is never sent to another server
        let g = GlobalOpts { server: Some("http://other:2/".into()), json: false };
        let e = connect(&ctx, &g).unwrap_err().to_string();
        assert_eq!(e, "not logged in to http://other:2: run gpuhub login --server http://other:2 --user NAME");
        // an explicit token may go anywhere it is told
        assert_eq!(connect(&ctx.with_token("x"), &g).unwrap().server(), "http://other:2");
    }
}
