//! What to run ([`Command`]) and what came of it ([`CommandResult`], [`Event`]).

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::validate::{validate_env, validate_guest_path};
use crate::Error;

/// The default per-stream output limit: 1 MiB, as in the reference library.
pub const DEFAULT_OUTPUT_LIMIT_BYTES: u64 = 1024 * 1024;

/// One command to run in a machine, built like [`std::process::Command`]:
///
/// ```
/// use std::time::Duration;
/// use shellbox_core::Command;
/// let cmd = Command::new("sh").arg("-c").arg("echo hi").timeout(Duration::from_secs(5));
/// assert_eq!(cmd.argv, ["sh", "-c", "echo hi"]);
/// ```
///
/// The program is looked up on the machine's `PATH`; a missing one exits 127.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Command {
    /// Program and arguments; must not be empty.
    pub argv: Vec<String>,
    /// Working directory (absolute, normalised); `None` uses the spec's workdir.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Variables set for this command, over the spec's.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Bytes written to the command's stdin, which is then closed. A command that exits
    /// without reading it is not an error.
    #[serde(default)]
    pub stdin: Bytes,
    /// Deadline for the whole command; `None` waits forever. On expiry every process of the
    /// command is killed and the result has [`ExitReason::TimedOut`].
    #[serde(default, with = "crate::serde_secs::option")]
    pub timeout: Option<Duration>,
    /// Bytes kept per stream (stdout and stderr separately); more is counted and discarded
    /// while the command runs. Default [`DEFAULT_OUTPUT_LIMIT_BYTES`].
    #[serde(default = "default_limit")]
    pub output_limit_bytes: u64,
    /// User name or numeric UID to run as; `None` keeps the backend's default user.
    #[serde(default)]
    pub user: Option<String>,
}

fn default_limit() -> u64 {
    DEFAULT_OUTPUT_LIMIT_BYTES
}

impl Command {
    /// A command running `program` with no arguments and every other field at its default.
    pub fn new(program: impl Into<String>) -> Self {
        Self::from_argv([program.into()])
    }

    /// A command with this whole argv (which [`Command::validate`] requires non-empty).
    pub fn from_argv<I, S>(argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            argv: argv.into_iter().map(Into::into).collect(),
            cwd: None,
            env: BTreeMap::new(),
            stdin: Bytes::new(),
            timeout: None,
            output_limit_bytes: DEFAULT_OUTPUT_LIMIT_BYTES,
            user: None,
        }
    }

    /// `sh -c script`.
    pub fn shell(script: impl Into<String>) -> Self {
        Self::from_argv(["sh".to_string(), "-c".to_string(), script.into()])
    }

    /// Appends one argument.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.argv.push(arg.into());
        self
    }

    /// Appends arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.argv.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets the working directory.
    pub fn cwd(mut self, cwd: impl Into<String>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    /// Sets one environment variable.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// Sets several environment variables.
    pub fn envs<I, K, V>(mut self, vars: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        self.env
            .extend(vars.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// Sets the bytes given on stdin.
    pub fn stdin(mut self, stdin: impl Into<Bytes>) -> Self {
        self.stdin = stdin.into();
        self
    }

    /// Sets the deadline.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sets the per-stream output limit in bytes.
    pub fn output_limit_bytes(mut self, limit: u64) -> Self {
        self.output_limit_bytes = limit;
        self
    }

    /// Sets the user (name or numeric UID).
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// Checks what every backend relies on before running anything.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when argv is empty, its program name (`argv[0]`) is empty or
    /// any argument holds a NUL byte, `cwd` is not an absolute normalised path, an env name
    /// is not `[A-Za-z_][A-Za-z0-9_]*` or holds NUL, `user` is empty or holds NUL, or an
    /// argument or `NAME=value` env string is longer than one `execve(2)` string may be
    /// (Linux's `MAX_ARG_STRLEN`, 128 KiB with its NUL:
    /// [`validate_exec_strings`](crate::validate::validate_exec_strings)).
    /// [`Error::Unsupported`] when `cwd` is inside `/proc`, `/sys` or `/dev`
    /// ([`validate_not_kernel_dir`](crate::validate::validate_not_kernel_dir)).
    pub fn validate(&self) -> Result<(), Error> {
        if self.argv.is_empty() {
            return Err(Error::invalid("argv is empty"));
        }
        if self.argv[0].is_empty() {
            return Err(Error::invalid("the program name (argv[0]) is empty"));
        }
        if let Some(arg) = self.argv.iter().find(|a| a.contains('\0')) {
            return Err(Error::invalid(format!(
                "argument {arg:?} contains a NUL byte"
            )));
        }
        if let Some(cwd) = &self.cwd {
            validate_guest_path(cwd).map_err(|e| match e {
                Error::InvalidInput(m) => Error::InvalidInput(format!("cwd: {m}")),
                other => other,
            })?;
            crate::validate::validate_not_kernel_dir("cwd", cwd)?;
        }
        validate_env(&self.env)?;
        crate::validate::validate_exec_strings(
            self.argv.iter().map(String::as_str),
            self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        )?;
        if let Some(user) = &self.user {
            if user.is_empty() || user.contains('\0') {
                return Err(Error::invalid(format!("bad user {user:?}")));
            }
        }
        Ok(())
    }
}

/// Why a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitReason {
    /// It finished by itself (including non-zero statuses, signals and failures to start).
    Exited,
    /// It hit its own timeout and was killed with every descendant.
    TimedOut,
}

/// How a command ended: the terminal [`Event`] of [`Machine::run_stream`](crate::Machine::run_stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitStatus {
    /// The shell-style exit code (128 + N for signal N); `None` when timed out.
    pub exit_code: Option<i32>,
    /// Why it ended.
    pub reason: ExitReason,
    /// The command wrote more to stdout than its output limit.
    pub stdout_truncated: bool,
    /// The command wrote more to stderr than its output limit.
    pub stderr_truncated: bool,
}

/// The outcome of [`Machine::run`](crate::Machine::run). The reference calls it `Result`.
///
/// Each stream holds at most the command's `output_limit_bytes`; its `*_truncated` flag is
/// true exactly when the command wrote more. A timed-out command has `exit_code: None`,
/// reason [`ExitReason::TimedOut`], and keeps the output it wrote before the kill.
#[doc(alias = "Result")]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandResult {
    /// The shell-style exit code; `None` when timed out.
    pub exit_code: Option<i32>,
    /// Captured stdout (at most the limit).
    pub stdout: Bytes,
    /// Captured stderr (at most the limit).
    pub stderr: Bytes,
    /// More stdout was written than kept.
    pub stdout_truncated: bool,
    /// More stderr was written than kept.
    pub stderr_truncated: bool,
    /// Why the command ended.
    pub reason: ExitReason,
}

impl CommandResult {
    /// True when the command exited with status 0.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0)
    }

    /// stdout as text, invalid UTF-8 replaced.
    pub fn stdout_lossy(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// stderr as text, invalid UTF-8 replaced.
    pub fn stderr_lossy(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// One item of a command's output stream. In JSON: `{"stdout": [bytes]}`,
/// `{"stderr": [bytes]}` or `{"exit": {...}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    /// Bytes the command wrote to stdout, within its output limit, in arrival order.
    Stdout(Bytes),
    /// Bytes the command wrote to stderr, within its output limit, in arrival order.
    Stderr(Bytes),
    /// The command ended; always the last event of a stream that did not fail.
    Exit(ExitStatus),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_and_validation() {
        let cmd = Command::new("echo")
            .args(["a", "b"])
            .cwd("/tmp")
            .env("K", "V")
            .envs([("L", "W")])
            .stdin("in")
            .timeout(Duration::from_secs(2))
            .output_limit_bytes(10)
            .user("65534");
        cmd.validate().unwrap();
        assert_eq!(cmd.argv, ["echo", "a", "b"]);
        assert!(Command::from_argv(Vec::<String>::new()).validate().is_err());
        assert!(Command::new("a\0").validate().is_err());
        assert!(Command::new("x").cwd("rel").validate().is_err());
        assert!(Command::new("x").env("A=B", "v").validate().is_err());
        assert!(Command::new("x").user("").validate().is_err());
        // Linux's MAX_ARG_STRLEN (128 KiB, the NUL included), per argument and variable.
        let max = crate::validate::EXEC_STRING_MAX_BYTES;
        Command::new("x")
            .arg("a".repeat(max - 1))
            .validate()
            .unwrap();
        Command::new("x")
            .env("A", "a".repeat(max - 3))
            .validate()
            .unwrap();
        for c in [
            Command::new("x").arg("a".repeat(max)),
            Command::new("x").env("A", "a".repeat(max - 2)),
        ] {
            let e = c.validate().unwrap_err();
            assert!(
                matches!(&e, Error::InvalidInput(m) if m.contains("MAX_ARG_STRLEN")),
                "{e:?}"
            );
        }
        assert_eq!(Command::shell("true").argv, ["sh", "-c", "true"]);
    }

    #[test]
    fn json_round_trip() {
        let cmd = Command::shell("cat")
            .stdin(vec![0u8, 255, 10])
            .timeout(Duration::from_millis(1500))
            .env("A", "1");
        let json = serde_json::to_string(&cmd).unwrap();
        assert!(json.contains(r#""timeout":1.5"#), "{json}");
        assert_eq!(serde_json::from_str::<Command>(&json).unwrap(), cmd);
        let minimal: Command = serde_json::from_str(r#"{"argv":["true"]}"#).unwrap();
        assert_eq!(minimal, Command::new("true"));
        assert!(
            serde_json::from_str::<Command>(r#"{"argv":["x"],"output_limit_bytes":-1}"#).is_err()
        );

        let result = CommandResult {
            exit_code: None,
            stdout: Bytes::from_static(b"partial"),
            stderr: Bytes::new(),
            stdout_truncated: true,
            stderr_truncated: false,
            reason: ExitReason::TimedOut,
        };
        let json = serde_json::to_string(&result).unwrap();
        assert!(json.contains(r#""reason":"timed_out""#), "{json}");
        assert_eq!(
            serde_json::from_str::<CommandResult>(&json).unwrap(),
            result
        );
        let status = ExitStatus {
            exit_code: Some(3),
            reason: ExitReason::Exited,
            stdout_truncated: false,
            stderr_truncated: true,
        };
        let json = serde_json::to_string(&status).unwrap();
        assert_eq!(serde_json::from_str::<ExitStatus>(&json).unwrap(), status);
        for event in [
            Event::Stdout(Bytes::from_static(b"o\xff")),
            Event::Stderr(Bytes::new()),
            Event::Exit(status),
        ] {
            let json = serde_json::to_string(&event).unwrap();
            assert_eq!(
                serde_json::from_str::<Event>(&json).unwrap(),
                event,
                "{json}"
            );
        }
    }
}
