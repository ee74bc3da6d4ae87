//! A pseudo-terminal on the hub's side for an interactive command (`srun --pty`), with rustix's safe
//! wrappers: the command gets the terminal's side as stdin, stdout and stderr; the hub reads and writes
//! the controlling side without blocking.

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use rustix::pty::OpenptFlags;
use rustix::termios::Winsize;
use std::io;
use std::os::fd::OwnedFd;
use std::process::Stdio;
use tokio::net::unix::pipe::{Receiver, Sender};

/// A terminal pair before the command starts.
#[derive(Debug)]
pub(super) struct Pty {
    master: OwnedFd,
}

fn winsize(cols: u16, rows: u16) -> Winsize {
    Winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 }
}

impl Pty {
    /// A new terminal of `cols` × `rows`.
    pub(super) fn open(cols: u16, rows: u16) -> io::Result<Self> {
        let master = rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
        rustix::pty::grantpt(&master)?;
        rustix::pty::unlockpt(&master)?;
        rustix::termios::tcsetwinsize(&master, winsize(cols, rows))?;
        Ok(Pty { master })
    }

    /// The terminal's side, opened once more, for one of the command's standard streams.
    pub(super) fn slave(&self) -> io::Result<Stdio> {
        let fd = rustix::pty::ioctl_tiocgptpeer(
            &self.master,
            OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC,
        )?;
        Ok(Stdio::from(fd))
    }

    /// The controlling side: a handle for resizing, and its output and input for async use (non-blocking
    /// descriptors of the one controlling side, driven by tokio's reactor as a pipe's ends are).
    pub(super) fn into_master(self) -> io::Result<(Master, BoxStream<'static, io::Result<Bytes>>, Sender)> {
        rustix::io::ioctl_fionbio(&self.master, true)?;
        let reader = Receiver::from_owned_fd_unchecked(self.master.try_clone()?)?;
        let writer = Sender::from_owned_fd_unchecked(self.master.try_clone()?)?;
        // reads fail with EIO once every copy of the terminal's side is closed: the command has ended
        let eio = rustix::io::Errno::IO.raw_os_error();
        let output = super::chunks(reader)
            .filter(move |r| futures::future::ready(!matches!(r, Err(e) if e.raw_os_error() == Some(eio))))
            .boxed();
        Ok((Master { control: self.master }, output, writer))
    }
}

/// The controlling side of a running command's terminal, for resizing it.
#[derive(Debug)]
pub(crate) struct Master {
    control: OwnedFd,
}

impl Master {
    /// Resizes the terminal.
    pub(crate) fn resize(&self, cols: u16, rows: u16) -> io::Result<()> {
        rustix::termios::tcsetwinsize(&self.control, winsize(cols, rows))?;
        Ok(())
    }
}
