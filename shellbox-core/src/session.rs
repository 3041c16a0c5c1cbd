//! Persistent shell sessions: one shell per machine whose state outlives each call.
//!
//! The reference library's `ShellSession` contract (REFERENCE.md section 2). An
//! *interactive* session is a real shell on a pseudo-terminal: `execute` may return
//! [`ShellStatus::Running`] and the command is then followed with `read`, fed with `write`
//! and stopped with `interrupt`. A *non-interactive* session (the simulator's) runs each
//! command to completion; `read` and `write` are [`Error::Unsupported`].

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::Error;

/// Where a session's command stands after a call (REFERENCE.md 1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShellStatus {
    /// The command is still running; follow it with [`ShellSession::read`].
    Running,
    /// The command finished; [`ShellUpdate::exit_code`] holds its status.
    Completed,
    /// The shell itself exited (`exit`, killed); the next `execute` starts a fresh shell in
    /// the machine's workdir, files kept.
    Reset,
}

/// What one session call saw: the output that arrived during the call (at most the call's
/// `output_limit_bytes`; `truncated` when more arrived and was dropped — it cannot be read
/// later), and where the command stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShellUpdate {
    /// Output received during this call (stdout and stderr merged on interactive sessions).
    pub output: Bytes,
    /// Where the command stands.
    pub status: ShellStatus,
    /// The command's exit status when [`ShellStatus::Completed`]; otherwise `None`.
    pub exit_code: Option<i32>,
    /// More output arrived during this call than `output_limit_bytes`; the rest was dropped.
    pub truncated: bool,
}

/// The default `wait` of [`ShellSession::execute`] (the reference's 120 s).
pub const DEFAULT_EXECUTE_WAIT: Duration = Duration::from_secs(120);

/// Checks a command line for [`ShellSession::execute`]: every backend calls it first.
///
/// # Errors
/// [`Error::InvalidInput`] when `command` holds a NUL byte: no shell can take one (a shell
/// reads C strings; bash drops the byte with a warning, ash ends the line there), as
/// [`Command`](crate::Command) refuses one in an argument.
pub fn check_command(command: &str) -> Result<(), Error> {
    if command.contains('\0') {
        return Err(Error::invalid(
            "the command contains a NUL byte, which no shell can take",
        ));
    }
    Ok(())
}

/// One persistent shell of a machine ([`Machine::open_shell`](crate::Machine::open_shell)).
///
/// The shell's cwd, variables, functions, options and (interactive) background jobs persist
/// across calls; a [`Machine::run`](crate::Machine::run) on the same machine never sees
/// them. At most one command runs at a time. Closing the machine closes its session.
#[async_trait]
pub trait ShellSession: Send + Sync {
    /// True for a shell on a pseudo-terminal (local, docker); false for the simulator's,
    /// which runs each command to completion.
    fn interactive(&self) -> bool;

    /// Starts `command` (a shell command line, heredocs allowed) and gathers its output for
    /// up to `wait`, as [`ShellSession::read`] does. A non-interactive session runs it to
    /// completion whatever `wait` is.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when `command` holds a NUL byte ([`check_command`]);
    /// [`Error::ShellState`] while a previous command still runs; [`Error::Closed`] after
    /// the session or machine closed; the backend's failures.
    async fn execute(
        &self,
        command: &str,
        wait: Duration,
        output_limit_bytes: u64,
    ) -> Result<ShellUpdate, Error>;

    /// Gathers the running command's output until it completes ([`ShellStatus::Completed`]
    /// with its exit code), the shell exits ([`ShellStatus::Reset`]) or `wait` elapses
    /// ([`ShellStatus::Running`] with what arrived so far).
    ///
    /// # Errors
    /// [`Error::ShellState`] when no command is running; [`Error::Unsupported`] on a
    /// non-interactive session; [`Error::Closed`].
    async fn read(&self, wait: Duration, output_limit_bytes: u64) -> Result<ShellUpdate, Error>;

    /// Sends raw bytes to the running command's terminal input.
    ///
    /// The terminal's input is canonical (unless the command changes it, `stty raw`): a
    /// reader gets whole lines, and the line discipline keeps at most 4095 bytes of one line
    /// (Linux's `N_TTY_BUF_SIZE` less the newline); the rest of a longer line is dropped
    /// by the kernel, as on any terminal. Send long data as several lines, or to a file
    /// with [`Machine::upload`](crate::Machine::upload).
    ///
    /// # Errors
    /// [`Error::ShellState`] when no command is running; [`Error::Unsupported`] on a
    /// non-interactive session; [`Error::Closed`].
    async fn write(&self, data: &[u8]) -> Result<(), Error>;

    /// Delivers SIGINT to the terminal's foreground process group (interactive), or stops
    /// the active command (non-interactive); an interrupted `sleep` then completes with 130.
    ///
    /// # Errors
    /// [`Error::ShellState`] when no command is running (interactive); [`Error::Closed`].
    async fn interrupt(&self) -> Result<(), Error>;

    /// Ends the shell and everything it started. Idempotent.
    ///
    /// # Errors
    /// The backend's failure to release something; the session is closed anyway.
    async fn close(&self) -> Result<(), Error>;
}
