//! The contract's error type.

use std::time::Duration;

/// A backend cannot provide what a [`MachineSpec`](crate::MachineSpec) or a
/// [`Command`](crate::Command) asks for: an image source it cannot run, a resource it
/// cannot enforce, a user it cannot switch to, a read-only target.
///
/// The reference library raises `UnsupportedMachineSpec` (a `ValueError`) in the same
/// places. Callers usually react by picking another backend, so the reason is meant
/// for people, not for matching.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported machine spec: {reason}")]
pub struct UnsupportedMachineSpec {
    /// What was asked for and why this backend cannot provide it.
    pub reason: String,
}

impl UnsupportedMachineSpec {
    /// An unsupported-spec error with this reason.
    pub fn new(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
        }
    }
}

/// Every error the machine contract returns.
///
/// Each variant says what failed and on what (the operation, the path, the command), so a
/// caller can log it as it is. Branch on the helpers ([`Error::is_unsupported`],
/// [`Error::is_timeout`], [`Error::is_retryable`], [`Error::kind`]) rather than on the text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The backend cannot provide the requested machine or command.
    #[error(transparent)]
    Unsupported(#[from] UnsupportedMachineSpec),

    /// Malformed input: empty argv, a NUL byte, a bad environment name, a relative or
    /// unnormalised path, a zero resource count.
    #[error("invalid input: {0}")]
    InvalidInput(String),

    /// The machine was closed (by [`Machine::close`](crate::Machine::close), or by the
    /// backend after a failure); it runs nothing more.
    #[error("machine is closed")]
    Closed,

    /// A wrapper's limit was reached and it was told not to wait (e.g.
    /// [`LimitFactory::fail_fast`](crate::LimitFactory::fail_fast)), or a backend's budget
    /// shared by the machines of this process is spent (local: the host memory its tmpfs
    /// file systems may hold). Retryable: closing a machine gives room.
    #[error("limit reached: {0}")]
    LimitReached(String),

    /// A persistent shell session cannot do this now: `execute` while a command still
    /// runs, or `read`, `write` or `interrupt` with nothing running (REFERENCE.md 2).
    #[error("shell session: {0}")]
    ShellState(String),

    /// A transfer source does not exist (`path` is the host or guest path as given). Its
    /// message is the OS's words, as the reference's local backend says it:
    /// `No such file or directory: <path>`.
    #[error("No such file or directory: {path}")]
    NotFound {
        /// The missing path.
        path: String,
    },

    /// A transfer was refused or failed: a symlink leading out of the machine, an unsafe
    /// archive entry, a read-only target, a copy error.
    #[error("transfer of {path} failed: {reason}")]
    Transfer {
        /// The guest or host path the transfer concerned.
        path: String,
        /// What went wrong.
        reason: String,
    },

    /// A bounded download ([`download_files`](crate::download_files)) went over its file or
    /// byte budget. Nothing was returned.
    #[error("download limit exceeded: {0}")]
    DownloadLimitExceeded(String),

    /// The machine died or exhausted a budget (the simulator's CPU fuel, memory, disk or
    /// output). It is closed; later calls return [`Error::Closed`].
    #[error("machine terminated: {0}")]
    Terminated(String),

    /// The local backend found no bubblewrap that can sandbox on this host. One entry per
    /// candidate tried, `"<candidate>: <why it failed>"`.
    #[error("no sandbox is available: {}", .reasons.join("; "))]
    SandboxUnavailable {
        /// Why each candidate failed.
        reasons: Vec<String>,
    },

    /// An infrastructure operation (not a command: those report
    /// [`ExitReason::TimedOut`](crate::ExitReason::TimedOut)) did not finish in time.
    #[error("{operation} timed out after {after:?}")]
    TimedOut {
        /// What was being done.
        operation: String,
        /// How long it was given.
        after: Duration,
    },

    /// The engine or runtime behind the backend failed (Docker Engine, bwrap's own set-up).
    #[error("{operation} failed: {source}")]
    Backend {
        /// What was being done, e.g. `"create container"`.
        operation: String,
        /// The underlying error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },

    /// A host I/O error while doing `operation`.
    #[error("{operation}: {source}")]
    Io {
        /// What was being done, usually with the path.
        operation: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// An [`Error::InvalidInput`] with this message.
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::InvalidInput(message.into())
    }

    /// An [`Error::Unsupported`] with this reason.
    pub fn unsupported(reason: impl Into<String>) -> Self {
        Error::Unsupported(UnsupportedMachineSpec::new(reason))
    }

    /// An [`Error::Transfer`] about `path`.
    pub fn transfer(path: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Transfer {
            path: path.into(),
            reason: reason.into(),
        }
    }

    /// An [`Error::NotFound`] about `path`.
    pub fn not_found(path: impl Into<String>) -> Self {
        Error::NotFound { path: path.into() }
    }

    /// An [`Error::Io`] for `operation`.
    pub fn io(operation: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            operation: operation.into(),
            source,
        }
    }

    /// An [`Error::Backend`] for `operation`.
    pub fn backend(
        operation: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        Error::Backend {
            operation: operation.into(),
            source: source.into(),
        }
    }

    /// True for [`Error::Unsupported`]: another backend or spec may work.
    pub fn is_unsupported(&self) -> bool {
        matches!(self, Error::Unsupported(_))
    }

    /// True for [`Error::TimedOut`]: an infrastructure step ran out of time.
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::TimedOut { .. })
    }

    /// True when trying the same operation again may succeed: infrastructure time-outs,
    /// engine failures, host I/O errors and a wrapper's reached limit. Bad input, unsupported specs, closed
    /// machines and refused transfers are final.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::TimedOut { .. }
                | Error::Backend { .. }
                | Error::Io { .. }
                | Error::LimitReached(_)
        )
    }

    /// A stable snake_case name of the variant, e.g. `"invalid_input"`; the CLI prints it in
    /// `{"error": {"kind": ...}}`.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Unsupported(_) => "unsupported",
            Error::InvalidInput(_) => "invalid_input",
            Error::Closed => "closed",
            Error::NotFound { .. } => "not_found",
            Error::ShellState(_) => "shell_state",
            Error::LimitReached(_) => "limit_reached",
            Error::Transfer { .. } => "transfer",
            Error::DownloadLimitExceeded(_) => "download_limit_exceeded",
            Error::Terminated(_) => "terminated",
            Error::SandboxUnavailable { .. } => "sandbox_unavailable",
            Error::TimedOut { .. } => "timed_out",
            Error::Backend { .. } => "backend",
            Error::Io { .. } => "io",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_helpers() {
        let e = Error::unsupported("gpus");
        assert!(e.is_unsupported());
        assert_eq!(e.kind(), "unsupported");
        assert_eq!(e.to_string(), "unsupported machine spec: gpus");
        let t = Error::TimedOut {
            operation: "kill".into(),
            after: Duration::from_secs(1),
        };
        assert!(t.is_timeout() && t.is_retryable());
        assert!(!Error::Closed.is_retryable());
        assert!(Error::Closed.to_string().contains("closed"));
        let s = Error::SandboxUnavailable {
            reasons: vec!["a: x".into(), "b: y".into()],
        };
        assert_eq!(s.to_string(), "no sandbox is available: a: x; b: y");
    }
}
