//! [`FakeCli`]: a recording, scriptable [`SlurmCli`] for tests. Every command is recorded; answers come
//! from rules matched by argument prefix, in the order they were added (a rule made with
//! [`FakeCli::once`] answers once, then steps aside). A command no rule answers fails with status 127
//! and says so, so a test never passes on a command it did not expect.

use crate::cli::{Cmd, CmdOutput, Interactive, SlurmCli, Spawned};
use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use std::io;
use std::sync::{Arc, Mutex};

/// Answers a command by running test code (to make the files a real command would make).
pub type Answer = Arc<dyn Fn(&Cmd) -> CmdOutput + Send + Sync>;

#[derive(Clone)]
enum Reply {
    Output(CmdOutput),
    /// Starting the command fails (`NotFound`: it is not installed).
    Error(io::ErrorKind),
    Call(Answer),
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Output(o) => f.debug_tuple("Output").field(o).finish(),
            Reply::Error(k) => f.debug_tuple("Error").field(k).finish(),
            Reply::Call(_) => f.write_str("Call(..)"),
        }
    }
}

#[derive(Debug)]
struct Rule {
    prefix: Vec<String>,
    reply: Reply,
    /// Answers left; `None` for ever.
    left: Option<usize>,
}

#[derive(Debug, Default)]
struct State {
    rules: Vec<Rule>,
    calls: Vec<Cmd>,
    spawned: Vec<(Cmd, Option<(u16, u16)>)>,
}

/// The fake.
#[derive(Debug, Default)]
pub struct FakeCli {
    state: Mutex<State>,
}

impl FakeCli {
    /// A fake with no rules: every command fails until told otherwise.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn add(&self, prefix: &[&str], reply: Reply, left: Option<usize>) {
        let prefix = prefix.iter().map(|s| (*s).to_owned()).collect();
        self.state().rules.push(Rule { prefix, reply, left });
    }

    /// Answers every command whose argv (program first) starts with `prefix` with `out`.
    pub fn on(&self, prefix: &[&str], out: CmdOutput) {
        self.add(prefix, Reply::Output(out), None);
    }

    /// Answers the next such command with `out`, once (rules added before it still come first).
    pub fn once(&self, prefix: &[&str], out: CmdOutput) {
        self.add(prefix, Reply::Output(out), Some(1));
    }

    /// Answers every command starting with `prefix` by calling `answer` (which may make files, as the
    /// real command would).
    pub fn on_call(&self, prefix: &[&str], answer: impl Fn(&Cmd) -> CmdOutput + Send + Sync + 'static) {
        self.add(prefix, Reply::Call(Arc::new(answer)), None);
    }

    /// Makes commands starting with `prefix` fail to start with `kind` (`NotFound`: not installed).
    pub fn fail_to_start(&self, prefix: &[&str], kind: io::ErrorKind) {
        self.add(prefix, Reply::Error(kind), None);
    }

    /// Drops every rule (the calls stay recorded).
    pub fn clear_rules(&self) {
        self.state().rules.clear();
    }

    /// Every command run so far, oldest first.
    pub fn calls(&self) -> Vec<Cmd> {
        self.state().calls.clone()
    }

    /// The commands run so far whose program's name is `name` (`sbatch`).
    pub fn calls_to(&self, name: &str) -> Vec<Cmd> {
        self.calls().into_iter().filter(|c| c.name() == name).collect()
    }

    /// The interactive commands started so far, with their terminal sizes.
    pub fn spawned(&self) -> Vec<(Cmd, Option<(u16, u16)>)> {
        self.state().spawned.clone()
    }

    fn answer(&self, cmd: &Cmd) -> Reply {
        let mut s = self.state();
        s.calls.push(cmd.clone());
        let argv = cmd.argv();
        for rule in &mut s.rules {
            if rule.left == Some(0) || rule.prefix.len() > argv.len() {
                continue;
            }
            if rule.prefix.iter().zip(&argv).all(|(p, a)| p == a) {
                if let Some(n) = &mut rule.left {
                    *n -= 1;
                }
                return rule.reply.clone();
            }
        }
        Reply::Output(CmdOutput::fail(127, format!("fake: no answer for `{cmd}`")))
    }
}

#[async_trait]
impl SlurmCli for FakeCli {
    async fn run(&self, cmd: &Cmd) -> io::Result<CmdOutput> {
        match self.answer(cmd) {
            Reply::Output(o) => Ok(o),
            Reply::Call(f) => Ok(f(cmd)),
            Reply::Error(kind) => Err(io::Error::new(kind, format!("fake: cannot start {}", cmd.name()))),
        }
    }

    /// Answers like [`FakeCli::run`]: the rule's stdout and stderr are the output, its status the exit code.
    async fn spawn(&self, cmd: &Cmd, tty: Option<(u16, u16)>) -> io::Result<Spawned> {
        let out = match self.answer(cmd) {
            Reply::Output(o) => o,
            Reply::Call(f) => f(cmd),
            Reply::Error(kind) => return Err(io::Error::new(kind, format!("fake: cannot start {}", cmd.name()))),
        };
        self.state().spawned.push((cmd.clone(), tty));
        let chunks = vec![Ok(Bytes::from(out.stdout)), Ok(Bytes::from(out.stderr))];
        let process = Arc::new(FakeProcess { code: i64::from(out.status.unwrap_or(-1)), tty: tty.is_some() });
        Ok(Spawned {
            input: Box::pin(tokio::io::sink()),
            output: futures::stream::iter(chunks)
                .filter(|c| futures::future::ready(!matches!(c, Ok(b) if b.is_empty())))
                .boxed(),
            process,
        })
    }
}

#[derive(Debug)]
struct FakeProcess {
    code: i64,
    tty: bool,
}

#[async_trait]
impl Interactive for FakeProcess {
    async fn wait(&self) -> io::Result<i64> {
        Ok(self.code)
    }

    fn resize(&self, _cols: u16, _rows: u16) -> io::Result<()> {
        if self.tty { Ok(()) } else { Err(io::Error::other("the process has no terminal")) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn rules_in_order_once_and_unanswered() {
        let f = FakeCli::new();
        f.once(&["squeue", "--json"], CmdOutput::ok("first"));
        f.on(&["squeue"], CmdOutput::ok("always"));
        let q = Cmd::new("squeue", ["--json"]);
        assert_eq!(f.run(&q).await.unwrap().stdout_text(), "first");
        assert_eq!(f.run(&q).await.unwrap().stdout_text(), "always");
        let other = f.run(&Cmd::new("sbatch", ["--parsable"])).await.unwrap();
        assert_eq!(other.status, Some(127));
        assert!(other.stderr_text().contains("no answer for `sbatch --parsable`"));
        f.fail_to_start(&["/opt/bin/sinfo"], io::ErrorKind::NotFound);
        let e = f.run(&Cmd::new("/opt/bin/sinfo", ["--json"])).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert_eq!(f.calls_to("squeue").len(), 2);
        assert_eq!(f.calls_to("sinfo").len(), 1);
    }
}
