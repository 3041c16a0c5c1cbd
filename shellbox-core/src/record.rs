//! [`RecordingMachine`]: a JSON-lines transcript of everything done to a machine, and
//! [`replay`], which re-runs a transcript on another machine and reports where the two
//! diverge — "does my rollout behave the same on the simulator and on docker?"
//!
//! One JSON object per line, in the order the operations finished:
//! `{"op":"run","command":{…},"outcome":{"exit_code":0,"reason":"exited","stdout_sha256":…,
//! "stderr_sha256":…,"stdout_truncated":false,"stderr_truncated":false,"stdout":"…","stderr":"…"},
//! "elapsed_ms":1.2}`; `{"op":"upload","source":…,"target":…,"outcome":{"ok":true}}` (or
//! `{"error":"<kind>"}`); `download` and `download_file` likewise; `{"op":"close"}`. The
//! `command` is [`Command`]'s serde form. `stdout`/`stderr` keep the first
//! [`RECORDED_OUTPUT_BYTES`] bytes (lossy UTF-8) for reading; the digests cover everything
//! the command returned (within its own output limit).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{
    Command, CommandResult, Error, Event, EventStream, ExitReason, Machine, ShellSession, Snapshot,
};

/// Bytes of each output stream kept readable in a transcript line.
pub const RECORDED_OUTPUT_BYTES: usize = 4096;

/// What came of one operation, as recorded and as compared by [`replay`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Outcome {
    /// A command's result (digests decide equality; the kept text is for reading).
    Run(RunOutcome),
    /// A transfer or close that succeeded.
    Ok {
        /// Always true.
        ok: bool,
    },
    /// An operation that failed, by [`Error::kind`].
    Failed {
        /// The error's kind, e.g. `"not_found"`.
        error: String,
    },
}

/// A command's recorded result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunOutcome {
    /// The exit code (`None` when timed out).
    pub exit_code: Option<i32>,
    /// Why it ended.
    pub reason: ExitReason,
    /// SHA-256 (hex) of the stdout returned.
    pub stdout_sha256: String,
    /// SHA-256 (hex) of the stderr returned.
    pub stderr_sha256: String,
    /// Stdout was cut at the output limit.
    pub stdout_truncated: bool,
    /// Stderr was cut at the output limit.
    pub stderr_truncated: bool,
    /// The first [`RECORDED_OUTPUT_BYTES`] of stdout, lossy UTF-8.
    pub stdout: String,
    /// The first [`RECORDED_OUTPUT_BYTES`] of stderr, lossy UTF-8.
    pub stderr: String,
}

impl PartialEq for RunOutcome {
    /// Equal when status and digests agree (the kept text follows from the digests).
    fn eq(&self, other: &Self) -> bool {
        self.exit_code == other.exit_code
            && self.reason == other.reason
            && self.stdout_sha256 == other.stdout_sha256
            && self.stderr_sha256 == other.stderr_sha256
            && self.stdout_truncated == other.stdout_truncated
            && self.stderr_truncated == other.stderr_truncated
    }
}

impl Eq for RunOutcome {}

impl RunOutcome {
    fn of(result: &CommandResult) -> Self {
        RunOutcome {
            exit_code: result.exit_code,
            reason: result.reason,
            stdout_sha256: hex_sha256(&result.stdout),
            stderr_sha256: hex_sha256(&result.stderr),
            stdout_truncated: result.stdout_truncated,
            stderr_truncated: result.stderr_truncated,
            stdout: kept(&result.stdout),
            stderr: kept(&result.stderr),
        }
    }
}

/// One transcript line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Record {
    /// [`Machine::run`] or a finished [`Machine::run_stream`].
    Run {
        /// The command.
        command: Command,
        /// What came of it.
        outcome: Outcome,
        /// Wall time in milliseconds (informational; never compared).
        #[serde(default)]
        elapsed_ms: f64,
    },
    /// [`Machine::upload`].
    Upload {
        /// Host source.
        source: PathBuf,
        /// Guest target.
        target: String,
        /// What came of it.
        outcome: Outcome,
    },
    /// [`Machine::download`].
    Download {
        /// Guest source.
        source: String,
        /// Host target.
        target: PathBuf,
        /// What came of it.
        outcome: Outcome,
    },
    /// [`Machine::download_file`].
    DownloadFile {
        /// Guest source.
        source: String,
        /// Host target.
        target: PathBuf,
        /// The byte limit.
        max_bytes: u64,
        /// What came of it.
        outcome: Outcome,
    },
    /// [`Machine::close`].
    Close {
        /// What came of it.
        outcome: Outcome,
    },
}

fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn hex_sha256(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn kept(bytes: &[u8]) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(RECORDED_OUTPUT_BYTES)]).into_owned()
}

fn unit_outcome(result: &Result<(), Error>) -> Outcome {
    match result {
        Ok(()) => Outcome::Ok { ok: true },
        Err(e) => Outcome::Failed {
            error: e.kind().to_string(),
        },
    }
}

fn run_outcome(result: &Result<CommandResult, Error>) -> Outcome {
    match result {
        Ok(r) => Outcome::Run(RunOutcome::of(r)),
        Err(e) => Outcome::Failed {
            error: e.kind().to_string(),
        },
    }
}

type Sink = Arc<Mutex<Box<dyn Write + Send>>>;

/// A machine that writes every operation and its outcome to `sink` as JSON lines (see the
/// module docs), and otherwise behaves exactly as the machine inside.
///
/// A transcript that cannot be written is logged (`tracing::warn`) and never changes what
/// the machine returns.
pub struct RecordingMachine<M> {
    inner: M,
    sink: Sink,
}

impl<M: Machine> RecordingMachine<M> {
    /// Records `inner`'s operations to `sink` (a file, a `Vec<u8>` behind a writer, …).
    pub fn new(inner: M, sink: impl Write + Send + 'static) -> Self {
        RecordingMachine {
            inner,
            sink: Arc::new(Mutex::new(Box::new(sink))),
        }
    }

    /// The machine inside.
    pub fn inner(&self) -> &M {
        &self.inner
    }
}

fn write_record(sink: &Sink, record: &Record) {
    let mut line = match serde_json::to_vec(record) {
        Ok(line) => line,
        Err(e) => {
            tracing::warn!(error = %e, "transcript record could not be encoded");
            return;
        }
    };
    line.push(b'\n');
    let mut sink = sink.lock().unwrap_or_else(|p| p.into_inner());
    if let Err(e) = sink.write_all(&line).and_then(|()| sink.flush()) {
        tracing::warn!(error = %e, "transcript could not be written");
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl<M: Machine> Machine for RecordingMachine<M> {
    async fn run(&self, command: Command) -> Result<CommandResult, Error> {
        let started = Instant::now();
        let result = self.inner.run(command.clone()).await;
        write_record(
            &self.sink,
            &Record::Run {
                command,
                outcome: run_outcome(&result),
                elapsed_ms: started.elapsed().as_secs_f64() * 1000.0,
            },
        );
        result
    }

    /// Records the command when its stream ends (with what it returned); a stream dropped
    /// before its end is not recorded.
    async fn run_stream(&self, command: Command) -> Result<EventStream, Error> {
        let started = Instant::now();
        let stream = match self.inner.run_stream(command.clone()).await {
            Ok(s) => s,
            Err(e) => {
                write_record(
                    &self.sink,
                    &Record::Run {
                        command,
                        outcome: Outcome::Failed {
                            error: e.kind().to_string(),
                        },
                        elapsed_ms: started.elapsed().as_secs_f64() * 1000.0,
                    },
                );
                return Err(e);
            }
        };
        let sink = self.sink.clone();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let (mut out_digest, mut err_digest) = (Sha256::new(), Sha256::new());
        let mut command = Some(command);
        // The stream's one terminal item writes the record, once.
        let record_end = move |command: &mut Option<Command>, outcome: Outcome| {
            if let Some(command) = command.take() {
                let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
                write_record(
                    &sink,
                    &Record::Run {
                        command,
                        outcome,
                        elapsed_ms,
                    },
                );
            }
        };
        Ok(Box::pin(stream.map(move |event| {
            match &event {
                Ok(Event::Stdout(b)) => {
                    out_digest.update(b);
                    let room = RECORDED_OUTPUT_BYTES.saturating_sub(out.len());
                    out.extend_from_slice(&b[..b.len().min(room)]);
                }
                Ok(Event::Stderr(b)) => {
                    err_digest.update(b);
                    let room = RECORDED_OUTPUT_BYTES.saturating_sub(err.len());
                    err.extend_from_slice(&b[..b.len().min(room)]);
                }
                Ok(Event::Exit(status)) => {
                    let outcome = Outcome::Run(RunOutcome {
                        exit_code: status.exit_code,
                        reason: status.reason,
                        stdout_sha256: hex(&out_digest.clone().finalize()),
                        stderr_sha256: hex(&err_digest.clone().finalize()),
                        stdout_truncated: status.stdout_truncated,
                        stderr_truncated: status.stderr_truncated,
                        stdout: String::from_utf8_lossy(&out).into_owned(),
                        stderr: String::from_utf8_lossy(&err).into_owned(),
                    });
                    record_end(&mut command, outcome);
                }
                Err(e) => record_end(
                    &mut command,
                    Outcome::Failed {
                        error: e.kind().to_string(),
                    },
                ),
            }
            event
        })))
    }

    async fn upload(&self, source: &Path, target: &str) -> Result<(), Error> {
        let result = self.inner.upload(source, target).await;
        write_record(
            &self.sink,
            &Record::Upload {
                source: source.to_path_buf(),
                target: target.to_string(),
                outcome: unit_outcome(&result),
            },
        );
        result
    }

    async fn download(&self, source: &str, target: &Path) -> Result<(), Error> {
        let result = self.inner.download(source, target).await;
        write_record(
            &self.sink,
            &Record::Download {
                source: source.to_string(),
                target: target.to_path_buf(),
                outcome: unit_outcome(&result),
            },
        );
        result
    }

    async fn download_file(
        &self,
        source: &str,
        target: &Path,
        max_bytes: u64,
    ) -> Result<(), Error> {
        let result = self.inner.download_file(source, target, max_bytes).await;
        write_record(
            &self.sink,
            &Record::DownloadFile {
                source: source.to_string(),
                target: target.to_path_buf(),
                max_bytes,
                outcome: unit_outcome(&result),
            },
        );
        result
    }

    /// Not recorded: sessions are not part of a transcript yet.
    async fn open_shell(&self) -> Result<Arc<dyn ShellSession>, Error> {
        self.inner.open_shell().await
    }

    /// Not recorded: a transcript replays on a fresh machine of any backend, where a
    /// snapshot of this one cannot exist.
    async fn snapshot(&self) -> Result<Snapshot, Error> {
        self.inner.snapshot().await
    }

    async fn close(&self) -> Result<(), Error> {
        let result = self.inner.close().await;
        write_record(
            &self.sink,
            &Record::Close {
                outcome: unit_outcome(&result),
            },
        );
        result
    }
}

/// Where a replay differed from its transcript.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Divergence {
    /// 1-based line of the transcript.
    pub line: usize,
    /// The operation (`"run"`, `"upload"`, …).
    pub op: &'static str,
    /// What the transcript says came of it.
    pub recorded: Outcome,
    /// What came of it on the replaying machine.
    pub replayed: Outcome,
}

/// The result of [`replay`].
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReplayReport {
    /// Operations replayed.
    pub operations: usize,
    /// Every operation whose outcome differed, in order.
    pub divergences: Vec<Divergence>,
}

/// Re-runs a transcript written by [`RecordingMachine`] on `machine`, operation by operation
/// (commands with their recorded cwd, env, stdin, timeout, limit and user; transfers from
/// and to the recorded host paths — downloads into a fresh temporary directory, so a replay
/// never overwrites the original's files), and compares each outcome with the recorded one.
/// Timings are never compared. A recorded `close` is not replayed: the caller owns
/// `machine`.
///
/// # Errors
/// [`Error::InvalidInput`] for a line that is not a transcript record (naming the line);
/// [`Error::Io`] when the temporary directory cannot be made.
pub async fn replay(transcript: &str, machine: &dyn Machine) -> Result<ReplayReport, Error> {
    let scratch = tempfile::tempdir().map_err(|e| Error::io("create replay directory", e))?;
    let mut report = ReplayReport::default();
    for (index, line) in transcript.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let record: Record = serde_json::from_str(line).map_err(|e| {
            Error::invalid(format!("transcript line {}: not a record: {e}", index + 1))
        })?;
        let scratch_target = scratch.path().join(format!("line-{}", index + 1));
        let (op, recorded, replayed) = match record {
            Record::Run {
                command, outcome, ..
            } => ("run", outcome, run_outcome(&machine.run(command).await)),
            Record::Upload {
                source,
                target,
                outcome,
            } => (
                "upload",
                outcome,
                unit_outcome(&machine.upload(&source, &target).await),
            ),
            Record::Download {
                source, outcome, ..
            } => (
                "download",
                outcome,
                unit_outcome(&machine.download(&source, &scratch_target).await),
            ),
            Record::DownloadFile {
                source,
                max_bytes,
                outcome,
                ..
            } => (
                "download_file",
                outcome,
                unit_outcome(
                    &machine
                        .download_file(&source, &scratch_target, max_bytes)
                        .await,
                ),
            ),
            Record::Close { .. } => continue,
        };
        report.operations += 1;
        if recorded != replayed {
            report.divergences.push(Divergence {
                line: index + 1,
                op,
                recorded,
                replayed,
            });
        }
    }
    Ok(report)
}
