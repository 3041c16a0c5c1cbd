//! The crate's error type.

use std::fmt;
use std::path::PathBuf;

/// Which input of a build differs from the one a finished root was built from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DifferingInput {
    /// The `python` argument (a CPython version or an interpreter path).
    Python,
    /// The lock file's contents (compared by SHA-256).
    Lock,
}

impl fmt::Display for DifferingInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DifferingInput::Python => "python",
            DifferingInput::Lock => "lock file",
        })
    }
}

/// Every error of building or opening a Python environment.
///
/// Each variant names what failed and on what (the path, the uv command line), so it can be
/// logged as it is; branch on the variant (or [`PyenvError::is_download_unavailable`]) rather
/// than on the text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PyenvError {
    /// No `uv` executable: not on the searched `PATH`, or the explicit
    /// [`BuildOptions::uv`](crate::BuildOptions::uv) path does not exist or cannot be run.
    #[error("uv is missing: {reason}; install it with `python3 -m pip install uv`")]
    UvMissing {
        /// What was looked for and where.
        reason: String,
    },

    /// A uv step exited unsuccessfully. The message is the reference library's: the
    /// shell-quoted uv command, `exited with status N:`, a newline and uv's stderr; then,
    /// when the builder set variables for the step, a last line naming them.
    #[error("{command} {}:\n{stderr}{}", describe_exit(*.exit_code), describe_env(env))]
    UvFailed {
        /// The shell-quoted command line, e.g. `uv pip sync --no-config ... /path/lock.txt`
        /// (the uv executable first; see [`UvStep::command_line`](crate::UvStep::command_line)).
        command: String,
        /// The shell-quoted `NAME=value` assignments the builder set for the step (e.g.
        /// `UV_PYTHON_INSTALL_DIR=/envs/a/python`), empty when none
        /// ([`UvStep::env_line`](crate::UvStep::env_line)).
        env: String,
        /// The exit status, or `None` when uv was killed by a signal.
        exit_code: Option<i32>,
        /// uv's stderr, lossily decoded.
        stderr: String,
    },

    /// `uv python install` could not download the requested CPython: no network, an
    /// unreachable download host or mirror (`UV_PYTHON_INSTALL_MIRROR`), or `UV_OFFLINE`.
    /// Distinct from [`PyenvError::UvFailed`] so callers can fall back to an existing
    /// interpreter path.
    #[error(
        "interpreter downloads are unavailable here: uv could not download CPython {version} \
         (pass the path of an installed interpreter instead, or set UV_PYTHON_INSTALL_MIRROR \
         to a reachable mirror); {command} {}:\n{stderr}{}",
        describe_exit(*.exit_code),
        describe_env(env)
    )]
    DownloadUnavailable {
        /// The CPython version that was requested.
        version: String,
        /// The shell-quoted `uv python install` command line.
        command: String,
        /// The shell-quoted assignments the builder set for it (`UV_PYTHON_INSTALL_DIR`,
        /// `UV_PYTHON_INSTALL_MIRROR`).
        env: String,
        /// The exit status, or `None` when uv was killed by a signal.
        exit_code: Option<i32>,
        /// uv's stderr, lossily decoded.
        stderr: String,
    },

    /// A requirement given to
    /// [`resolve_python_environment`](crate::resolve_python_environment) is empty, starts
    /// with `-` or holds CR, LF or NUL.
    #[error("invalid requirement {requirement:?}: {reason}")]
    InvalidRequirement {
        /// The requirement as given.
        requirement: String,
        /// Why it was refused.
        reason: String,
    },

    /// [`check_resolve`](crate::check_resolve) found that uv could not download the
    /// CPython version asked for: its download (the URL `uv python list --only-downloads`
    /// names, the mirror's when one is set) is not in `UV_PYTHON_CACHE_DIR` and cannot be
    /// reached from here (`UV_OFFLINE`, a missing `file:` mirror, a host that does not
    /// resolve or accept a connection, directly or through the proxy variables).
    #[error(
        "interpreter downloads are unavailable here: uv could not download CPython {version} \
         from {url} ({reason}; pass the path of an installed interpreter instead, or set \
         UV_PYTHON_INSTALL_MIRROR to a reachable mirror)"
    )]
    DownloadUnreachable {
        /// The CPython version that was requested.
        version: String,
        /// Where uv would download it from.
        url: String,
        /// Why it cannot be reached.
        reason: String,
    },

    /// uv could not download the CPython version a resolve asked for and no local
    /// interpreter was named (`python_interpreter`), so neither way to get a Python works.
    #[error(
        "no CPython {version} to build from: uv could not download it and no \
         python_interpreter was given; name a local CPython {version} with the \
         python_interpreter option (`shellbox run --python-interpreter PATH`), e.g. \
         /usr/bin/python3.X, or ask for the version of one this host has. {source}"
    )]
    InterpreterUnavailable {
        /// The requested version.
        version: String,
        /// The [`PyenvError::DownloadUnavailable`] of `uv python install` (or the
        /// [`PyenvError::DownloadUnreachable`] of [`check_resolve`](crate::check_resolve)).
        source: Box<PyenvError>,
    },

    /// The lock file could not be read.
    #[error("cannot read lock file {}: {source}", path.display())]
    LockUnreadable {
        /// The lock file as given.
        path: PathBuf,
        /// The read error.
        source: std::io::Error,
    },

    /// The `python` argument is neither a full CPython version (`X.Y.Z`) nor a path.
    #[error("invalid python {value:?}: {reason}")]
    InvalidPython {
        /// The argument as given.
        value: String,
        /// Why it was refused.
        reason: String,
    },

    /// The interpreter path does not exist, cannot run, or did not report its
    /// `sys.base_prefix`.
    #[error("interpreter {} is unusable: {reason}", path.display())]
    InterpreterUnusable {
        /// The interpreter path.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },

    /// The root is unusable as an environment root (no final component, e.g. `/` or `..`,
    /// or a newline in its path).
    #[error("invalid environment root {}: {reason}", root.display())]
    InvalidRoot {
        /// The root as given.
        root: PathBuf,
        /// Why it was refused.
        reason: String,
    },

    /// Another builder held the root's lock longer than
    /// [`BuildOptions::lock_timeout`](crate::BuildOptions::lock_timeout).
    #[error("timed out after {waited:?} waiting for another builder's lock {}", lock.display())]
    LockTimeout {
        /// The lock file beside the root.
        lock: PathBuf,
        /// How long this builder waited.
        waited: std::time::Duration,
    },

    /// The root holds a finished environment built from other inputs. It is never removed
    /// automatically: machines may be using it. The message ends with the existing
    /// marker's text, quoted as it stands (as the reference library shows it).
    #[error(
        "{} already holds a Python environment built from a different {input}: \
         it was built with {existing}, this build asks for {requested}; \
         remove that directory or choose another root. Its marker {}/{} reads:\n{}",
        root.display(),
        root.display(),
        crate::MARKER_NAME,
        marker.trim_end()
    )]
    InputsDiffer {
        /// The environment root.
        root: PathBuf,
        /// The first input that differs.
        input: DifferingInput,
        /// The recorded value (a python argument, or `sha256 <hex>` of the lock).
        existing: String,
        /// The requested value, in the same form.
        requested: String,
        /// The existing marker's full text, as read.
        marker: String,
    },

    /// [`PythonEnvironment::open`](crate::PythonEnvironment::open) found no completion
    /// marker: the root was never built, or its build did not finish.
    #[error("{} holds no finished Python environment (no {} marker)", root.display(), crate::MARKER_NAME)]
    NotBuilt {
        /// The environment root.
        root: PathBuf,
    },

    /// The completion marker exists but is not in the format this crate writes.
    #[error("unreadable completion marker {}: {reason}", path.display())]
    Marker {
        /// The marker file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },

    /// After a build, a symlink in the root points outside the root (and outside the
    /// external interpreter's prefix), so mounting the listed directories would not be enough.
    #[error(
        "{} is a symlink to {}, outside the environment's read-only directories",
        path.display(),
        target.display()
    )]
    NotSelfContained {
        /// The symlink.
        path: PathBuf,
        /// Its target as stored.
        target: PathBuf,
    },

    /// A filesystem or process operation of the builder itself failed.
    #[error("{operation} {}: {source}", path.display())]
    Io {
        /// What the builder was doing, e.g. `"create directory"`.
        operation: &'static str,
        /// The path concerned.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

impl PyenvError {
    /// Whether this is [`PyenvError::DownloadUnavailable`], [`PyenvError::DownloadUnreachable`]
    /// (or the [`PyenvError::InterpreterUnavailable`] wrapping either): the host cannot
    /// download interpreters, so only the interpreter-path form of `python` can work here.
    pub fn is_download_unavailable(&self) -> bool {
        matches!(
            self,
            PyenvError::DownloadUnavailable { .. }
                | PyenvError::DownloadUnreachable { .. }
                | PyenvError::InterpreterUnavailable { .. }
        )
    }

    pub(crate) fn io(
        operation: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        PyenvError::Io {
            operation,
            path: path.into(),
            source,
        }
    }
}

fn describe_env(env: &str) -> String {
    if env.is_empty() {
        String::new()
    } else {
        format!("\n(uv ran with {env})")
    }
}

fn describe_exit(code: Option<i32>) -> String {
    match code {
        Some(code) => format!("exited with status {code}"),
        None => "was killed by a signal".to_string(),
    }
}
