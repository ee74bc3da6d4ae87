//! The gpuhub command-line client: everything `gpuhub` does besides `serve` and `sim`.
//!
//! The binary parses [`GlobalOpts`] and a [`ClientCommand`] and calls [`run`], which prints to standard
//! output and returns the exit code to use. Tests and tools call [`run_with`] with an explicit
//! [`Context`] (config directory, token, password) and any writer.
//!
//! Credentials live in `$XDG_CONFIG_HOME/gpuhub/credentials.json` (else `$HOME/.config/gpuhub/`), mode
//! 0600; `--server`/`GPUHUB_SERVER` override the saved server and `GPUHUB_TOKEN` the saved token.
//! `gpuhub ssh` runs `ssh` from `PATH`, or the program `GPUHUB_SSH` names.

mod cli;
mod clock;
mod commands;
pub mod credentials;
mod error;
pub mod http;
pub mod table;

pub use cli::queue::{QueueCommand, QueueSettings};
pub use cli::{
    ClientCli, ClientCommand, GlobalOpts, ImagesArgs, ImagesCommand, LoginArgs, LogsArgs, NameArgs, PsArgs, RunArgs,
    SshArgs, SshConfigArgs, SshKeyCommand, UserCommand,
};
pub use credentials::Credentials;
pub use error::ClientError;

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

/// What a client command reads besides its arguments, explicit so that tests need not set process-wide
/// environment variables.
#[derive(Clone)]
pub struct Context {
    /// The gpuhub config directory, holding `credentials.json` (`~/.config/gpuhub`).
    pub config_dir: PathBuf,
    /// A token that overrides the saved one (`GPUHUB_TOKEN`).
    pub token: Option<String>,
    /// A password to use instead of prompting or reading standard input (for tests).
    pub password: Option<String>,
    /// How often `run --follow` asks whether a workload has ended when its log stream could not say.
    pub poll_interval: Duration,
    /// The ssh client `gpuhub ssh` runs (`ssh`, or `GPUHUB_SSH`).
    pub ssh_program: PathBuf,
}

/// Leaves secrets out.
impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("config_dir", &self.config_dir)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("poll_interval", &self.poll_interval)
            .field("ssh_program", &self.ssh_program)
            .finish()
    }
}

impl Context {
    /// A context with this config directory, no token override and interactive passwords.
    pub fn new(config_dir: impl Into<PathBuf>) -> Self {
        Self {
            config_dir: config_dir.into(),
            token: None,
            password: None,
            poll_interval: Duration::from_secs(1),
            ssh_program: PathBuf::from("ssh"),
        }
    }

    /// The context of this process: the config directory from `XDG_CONFIG_HOME`/`HOME`, the token
    /// from `GPUHUB_TOKEN` when set and not empty.
    pub fn from_env() -> Result<Self, ClientError> {
        let mut ctx = Self::new(credentials::default_config_dir()?);
        ctx.token = std::env::var("GPUHUB_TOKEN").ok().filter(|t| !t.trim().is_empty());
        ctx.ssh_program = commands::ssh_program_from(std::env::var_os("GPUHUB_SSH"));
        Ok(ctx)
    }

    /// Uses `token` instead of the saved one.
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Runs `program` for `gpuhub ssh` instead of `ssh`.
    pub fn with_ssh_program(mut self, program: impl Into<PathBuf>) -> Self {
        self.ssh_program = program.into();
        self
    }

    /// Answers password prompts with `password`.
    pub fn with_password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }
}

/// Runs a client command for this process (environment, standard output) and returns the exit code to
/// use: 0, for `run --follow` the workload's exit code, for `ssh` ssh's.
pub async fn run(global: GlobalOpts, cmd: ClientCommand) -> Result<i32, ClientError> {
    let ctx = Context::from_env()?;
    let mut stdout = std::io::stdout();
    run_with(&ctx, global, cmd, &mut stdout).await
}

/// Runs a client command with an explicit context, writing what it prints to `out`; returns the exit
/// code as [`run`] does.
pub async fn run_with(
    ctx: &Context,
    global: GlobalOpts,
    cmd: ClientCommand,
    out: &mut (dyn Write + Send),
) -> Result<i32, ClientError> {
    let code = commands::dispatch(ctx, &global, cmd, out).await?;
    out.flush()?;
    Ok(code)
}
