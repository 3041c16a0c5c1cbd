//! `shellbox serve --stdio`: the machine contract as JSON lines, for other languages
//! (the Python package `shellbox` drives it). PROTOCOL.md in the repository specifies it; the
//! JSON forms are in [`wire`] and their JSON Schema ([`wire::schema`]) is checked in as
//! `PROTOCOL.schema.json`.
//!
//! One request per line on the input, one answer per line on the output; requests run
//! concurrently and are answered as they finish, so answers may come out of order (match
//! them by `id`). Nothing but protocol lines is written to the output; logs go to stderr.
//!
//! Bounds (every request's work is bounded by its own limits):
//! - a request line holds at most [`MAX_LINE_BYTES`]; a longer one is answered with an
//!   error (id `null`) and skipped;
//! - at most [`MAX_IN_FLIGHT`] requests run at once; further lines wait to be read;
//! - a `run` answer holds at most the command's `output_limit_bytes` per stream; a
//!   `run_stream` forwards chunks as the backend yields them and waits while the client is
//!   not reading (the output queue holds [`OUTPUT_QUEUE_LINES`] lines), so nothing grows
//!   without bound when a client reads slowly; `download_files` holds at most its
//!   `max_bytes`; `download_file` streams to its host file and holds a chunk at a time.
//!
//! End of input, a write error on the output (the client is gone), SIGTERM, SIGINT or
//! SIGHUP end the server: requests in flight are cancelled (their commands killed), every
//! machine it created and did not close is closed, then it exits. So a client that dies
//! leaves nothing behind.
//!
//! Trust: the server acts with the rights of the user that started it (host paths of
//! `upload`/`download` are read and written as that user), like the CLI. It is meant to be
//! a child process of one client over a private pipe, never a network service.

pub mod wire;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{FutureExt as _, StreamExt};
use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::task::JoinSet;

use crate::{Error, Event, Machine, MachineFactory};
use wire::*;

/// Longest request line in bytes (384 MiB: a 256 MiB stdin in base64 and the rest).
pub const MAX_LINE_BYTES: usize = 384 << 20;
/// Most requests running at once.
pub const MAX_IN_FLIGHT: usize = 4096;
/// Lines waiting to be written to the output before producers wait.
pub const OUTPUT_QUEUE_LINES: usize = 256;
/// How long closing the machines at shutdown may take in all.
pub const SHUTDOWN_CLOSE_TIMEOUT: Duration = Duration::from_secs(60);

/// An error answer: a core error's kind, message and fields, or a protocol problem.
#[derive(Debug)]
struct Failure {
    kind: &'static str,
    message: String,
    details: Map<String, Value>,
}

impl Failure {
    fn protocol(kind: &'static str, what: &'static str, message: impl Into<String>) -> Self {
        let mut details = Map::new();
        details.insert("protocol".into(), what.into());
        Failure {
            kind,
            message: message.into(),
            details,
        }
    }

    fn cancelled() -> Self {
        Failure::protocol("cancelled", "cancelled", "the request was cancelled")
    }

    fn to_json(&self) -> Value {
        json!({"kind": self.kind, "message": self.message, "details": self.details})
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        let mut details = Map::new();
        match &error {
            Error::Unsupported(u) => {
                details.insert("reason".into(), u.reason.clone().into());
            }
            Error::NotFound { path } => {
                details.insert("path".into(), path.clone().into());
            }
            Error::Transfer { path, reason } => {
                details.insert("path".into(), path.clone().into());
                details.insert("reason".into(), reason.clone().into());
            }
            Error::SandboxUnavailable { reasons } => {
                details.insert("reasons".into(), json!(reasons));
            }
            Error::TimedOut { operation, after } => {
                details.insert("operation".into(), operation.clone().into());
                details.insert("after".into(), json!(after.as_secs_f64()));
            }
            Error::Backend { operation, .. } | Error::Io { operation, .. } => {
                details.insert("operation".into(), operation.clone().into());
            }
            _ => {}
        }
        Failure {
            kind: error.kind(),
            message: error.to_string(),
            details,
        }
    }
}

type Answer = Result<Value, Failure>;

/// A factory and, for gc, the concrete docker one.
struct FactoryEntry {
    factory: Arc<dyn MachineFactory>,
    #[cfg(feature = "docker")]
    docker: Option<crate::docker::DockerMachineFactory>,
}

/// Handles, machines, requests in flight and the output queue of one server.
struct State {
    factories: Mutex<HashMap<u64, Arc<FactoryEntry>>>,
    machines: Mutex<HashMap<u64, Arc<dyn Machine>>>,
    /// Snapshots taken by `snapshot`, until `delete_snapshot` or the end of the session
    /// (dropping the last handle releases what the backend holds for it).
    snapshots: Mutex<HashMap<u64, crate::Snapshot>>,
    next_factory: AtomicU64,
    next_machine: AtomicU64,
    next_snapshot: AtomicU64,
    /// Request id (as JSON text) -> (this request's serial, the sender that cancels it). The
    /// serial keeps a finished request from removing a later one that reuses its id.
    in_flight: Mutex<HashMap<String, (u64, oneshot::Sender<()>)>>,
    next_serial: AtomicU64,
    out: mpsc::Sender<String>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl State {
    fn machine(&self, handle: u64) -> Result<Arc<dyn Machine>, Failure> {
        if let Some(m) = lock(&self.machines).get(&handle) {
            return Ok(m.clone());
        }
        if handle >= 1 && handle < self.next_machine.load(Ordering::SeqCst) {
            // Created by this server and closed since.
            return Err(Error::Closed.into());
        }
        Err(Failure::protocol(
            "invalid_input",
            "unknown_machine",
            format!("no machine {handle} was created by this server"),
        ))
    }

    fn snapshot(&self, handle: u64) -> Result<crate::Snapshot, Failure> {
        if let Some(s) = lock(&self.snapshots).get(&handle) {
            return Ok(s.clone());
        }
        if handle >= 1 && handle < self.next_snapshot.load(Ordering::SeqCst) {
            // Taken by this server and deleted since.
            return Err(Error::Closed.into());
        }
        Err(Failure::protocol(
            "invalid_input",
            "unknown_snapshot",
            format!("no snapshot {handle} was taken by this server"),
        ))
    }

    /// Keeps `machine` under a new handle.
    fn add_machine(&self, machine: Box<dyn Machine>) -> u64 {
        let handle = self.next_machine.fetch_add(1, Ordering::SeqCst);
        lock(&self.machines).insert(handle, Arc::from(machine));
        handle
    }

    fn factory(&self, handle: u64) -> Result<Arc<FactoryEntry>, Failure> {
        lock(&self.factories).get(&handle).cloned().ok_or_else(|| {
            Failure::protocol(
                "invalid_input",
                "unknown_factory",
                format!("no factory {handle} was made by this server"),
            )
        })
    }

    async fn send(&self, line: String) {
        // A closed queue means the writer is gone (the client left): nothing to tell.
        let _ = self.out.send(line).await;
    }
}

fn answer_line(id: &Value, answer: Answer) -> String {
    let value = match answer {
        Ok(result) => json!({"id": id, "result": result}),
        Err(failure) => json!({"id": id, "error": failure.to_json()}),
    };
    value.to_string()
}

fn params<T: DeserializeOwned>(method: &str, params: Value) -> Result<T, Failure> {
    serde_json::from_value(params).map_err(|e| {
        Failure::protocol(
            "invalid_input",
            "invalid_params",
            format!("invalid params of {method}: {e}"),
        )
    })
}

fn to_value<T: serde::Serialize>(value: &T) -> Answer {
    serde_json::to_value(value)
        .map_err(|e| Failure::protocol("io", "encode", format!("cannot encode the answer: {e}")))
}

/// A request's envelope.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope {
    /// Read from the raw value before (so malformed requests are answered by id too).
    #[allow(dead_code)]
    id: Value,
    method: String,
    #[serde(default)]
    params: Option<Value>,
}

const METHODS: [&str; 22] = [
    "factory",
    "check_environment",
    "create",
    "run",
    "run_stream",
    "cancel",
    "upload",
    "download",
    "download_file",
    "download_files",
    "close",
    "snapshot",
    "create_from",
    "fork",
    "delete_snapshot",
    "gc",
    "open_shell",
    "execute",
    "read",
    "write",
    "interrupt",
    "close_shell",
];

/// Serves on stdin and stdout until end of input or a termination signal; returns the exit
/// status: 0 after end of input, 128 + N after signal N.
///
/// When stdin and stdout are pipes (as the Python package starts the server), they are put
/// in non-blocking mode and polled by the runtime's reactor (`tokio::net::unix::pipe`):
/// `tokio::io::stdin`/`stdout` hand every read and write to the blocking thread pool, which
/// doubled the protocol's round trip. The flag belongs to the pipe's open file description,
/// which the client created for this process alone. Anything else (a terminal, a file,
/// shared with other processes) goes through `tokio::io::stdin`/`stdout`.
pub async fn serve_stdio() -> i32 {
    use std::os::fd::AsFd;
    use tokio::net::unix::pipe;
    let signal = termination_signal();
    let stdin = std::io::stdin();
    let input: Box<dyn AsyncRead + Unpin + Send> = match stdin
        .as_fd()
        .try_clone_to_owned()
        .and_then(pipe::Receiver::from_owned_fd)
    {
        Ok(pipe) => Box::new(pipe),
        Err(_) => Box::new(tokio::io::stdin()),
    };
    let stdout = std::io::stdout();
    let output: Box<dyn AsyncWrite + Unpin + Send> = match stdout
        .as_fd()
        .try_clone_to_owned()
        .and_then(pipe::Sender::from_owned_fd)
    {
        Ok(pipe) => Box::new(pipe),
        Err(_) => Box::new(tokio::io::stdout()),
    };
    serve(input, output, signal).await
}

/// Bounds of a server; the defaults are the module's constants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeOptions {
    /// Longest request line in bytes; default [`MAX_LINE_BYTES`].
    pub max_line_bytes: usize,
    /// Most requests running at once; default [`MAX_IN_FLIGHT`].
    pub max_in_flight: usize,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            max_line_bytes: MAX_LINE_BYTES,
            max_in_flight: MAX_IN_FLIGHT,
        }
    }
}

/// Serves requests read from `input`, writing answers to `output`, until end of input, a
/// write error, or `shutdown` resolving (with a signal number, returned as 128 + N). Then
/// cancels what is in flight and closes every machine it created. Returns the exit status.
pub async fn serve<R, W, S>(input: R, output: W, shutdown: S) -> i32
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
    S: std::future::Future<Output = i32>,
{
    serve_with(input, output, shutdown, ServeOptions::default()).await
}

/// [`serve`] with other bounds.
pub async fn serve_with<R, W, S>(input: R, output: W, shutdown: S, options: ServeOptions) -> i32
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
    S: std::future::Future<Output = i32>,
{
    let (out_tx, out_rx) = mpsc::channel::<String>(OUTPUT_QUEUE_LINES);
    let (gone_tx, mut gone_rx) = oneshot::channel::<()>();
    let writer = tokio::spawn(write_lines(output, out_rx, gone_tx));
    let (line_tx, mut line_rx) = mpsc::channel::<Line>(16);
    let reader = tokio::spawn(read_lines(input, line_tx, options.max_line_bytes));
    let state = Arc::new(State {
        factories: Mutex::new(HashMap::new()),
        machines: Mutex::new(HashMap::new()),
        snapshots: Mutex::new(HashMap::new()),
        next_factory: AtomicU64::new(1),
        next_machine: AtomicU64::new(1),
        next_snapshot: AtomicU64::new(1),
        in_flight: Mutex::new(HashMap::new()),
        next_serial: AtomicU64::new(0),
        out: out_tx,
    });
    let permits = Arc::new(Semaphore::new(options.max_in_flight.max(1)));
    let mut tasks = JoinSet::new();
    tokio::pin!(shutdown);
    let mut status = 0;
    loop {
        tokio::select! {
            line = line_rx.recv() => match line {
                Some(line) => {
                    let Ok(permit) = permits.clone().acquire_owned().await else { break };
                    handle_line(&state, &mut tasks, line, permit).await;
                }
                None => break,
            },
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            signal = &mut shutdown => {
                tracing::info!("serve: signal {signal}, closing every machine");
                status = 128 + signal;
                break;
            }
            _ = &mut gone_rx => {
                tracing::info!("serve: the output is closed, closing every machine");
                break;
            }
        }
    }
    reader.abort();
    // Cancel what is in flight: each request answers `cancelled` and drops its work, which
    // kills its command.
    let cancels: Vec<_> = lock(&state.in_flight).drain().collect();
    for (_, (_, cancel)) in cancels {
        let _ = cancel.send(());
    }
    let drain = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(SHUTDOWN_CLOSE_TIMEOUT, drain)
        .await
        .is_err()
    {
        tracing::warn!("serve: requests did not end in time; aborting them");
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
    }
    close_all(&state).await;
    drop(state);
    let _ = writer.await;
    status
}

/// Closes every machine still open, concurrently, within [`SHUTDOWN_CLOSE_TIMEOUT`].
async fn close_all(state: &State) {
    let machines: Vec<(u64, Arc<dyn Machine>)> = lock(&state.machines).drain().collect();
    let closes = machines.into_iter().map(|(handle, machine)| async move {
        if let Err(e) = machine.close().await {
            tracing::warn!("serve: closing machine {handle}: {e}");
        }
    });
    if tokio::time::timeout(SHUTDOWN_CLOSE_TIMEOUT, futures::future::join_all(closes))
        .await
        .is_err()
    {
        tracing::warn!("serve: closing the machines took longer than {SHUTDOWN_CLOSE_TIMEOUT:?}");
    }
}

/// One input line, or why there is none.
enum Line {
    Text(Vec<u8>),
    TooLong { bytes: usize, max: usize },
}

/// Reads lines of at most `max` bytes; a longer line is skipped up to its newline.
async fn read_lines<R: AsyncRead + Unpin>(input: R, lines: mpsc::Sender<Line>, max: usize) {
    let mut reader = BufReader::with_capacity(64 << 10, input);
    loop {
        let mut line = Vec::new();
        let mut too_long = 0usize;
        loop {
            let buf = match reader.fill_buf().await {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!("serve: reading the input: {e}");
                    return;
                }
            };
            if buf.is_empty() {
                // End of input; a last line without newline still counts.
                if !line.is_empty() {
                    let _ = lines.send(Line::Text(line)).await;
                } else if too_long > 0 {
                    let _ = lines
                        .send(Line::TooLong {
                            bytes: too_long,
                            max,
                        })
                        .await;
                }
                return;
            }
            let (chunk, done) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (&buf[..i], Some(i + 1)),
                None => (buf, None),
            };
            if too_long > 0 || line.len() + chunk.len() > max {
                too_long = too_long.max(line.len()) + chunk.len();
                line = Vec::new();
            } else {
                line.extend_from_slice(chunk);
            }
            let consumed = done.unwrap_or(buf.len());
            reader.consume(consumed);
            if done.is_some() {
                break;
            }
        }
        let item = if too_long > 0 {
            Line::TooLong {
                bytes: too_long,
                max,
            }
        } else {
            Line::Text(line)
        };
        if lines.send(item).await.is_err() {
            return;
        }
    }
}

/// Writes queued lines, flushing whenever the queue is empty; tells `gone` on a write error.
async fn write_lines<W: AsyncWrite + Unpin>(
    output: W,
    mut lines: mpsc::Receiver<String>,
    gone: oneshot::Sender<()>,
) {
    let mut out = tokio::io::BufWriter::with_capacity(64 << 10, output);
    while let Some(first) = lines.recv().await {
        let mut next = Some(first);
        let mut failed = false;
        while let Some(line) = next {
            if out.write_all(line.as_bytes()).await.is_err() || out.write_all(b"\n").await.is_err()
            {
                failed = true;
                break;
            }
            next = lines.try_recv().ok();
        }
        if failed || out.flush().await.is_err() {
            let _ = gone.send(());
            // Keep draining so producers never wait on a dead client.
            while lines.recv().await.is_some() {}
            return;
        }
    }
    let _ = out.flush().await;
}

/// Parses one line and answers it at once (protocol errors, `cancel`) or starts its work.
async fn handle_line(
    state: &Arc<State>,
    tasks: &mut JoinSet<()>,
    line: Line,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    let text = match line {
        Line::Text(text) => text,
        Line::TooLong { bytes, max } => {
            let f = Failure::protocol(
                "invalid_input",
                "line_too_long",
                format!("a request line of {bytes} bytes is longer than {max}"),
            );
            state.send(answer_line(&Value::Null, Err(f))).await;
            return;
        }
    };
    if text.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    let value: Value = match serde_json::from_slice(&text) {
        Ok(v) => v,
        Err(e) => {
            let f = Failure::protocol("invalid_input", "bad_json", format!("bad JSON: {e}"));
            state.send(answer_line(&Value::Null, Err(f))).await;
            return;
        }
    };
    // The id, when there is a usable one, so even a malformed request is answered by id.
    let id = match value.get("id") {
        Some(id @ (Value::String(_) | Value::Number(_))) => id.clone(),
        _ => Value::Null,
    };
    let envelope: Envelope = match serde_json::from_value(value) {
        Ok(e) => e,
        Err(e) => {
            let f = Failure::protocol(
                "invalid_input",
                "bad_request",
                format!("a request is {{\"id\", \"method\", \"params\"}}: {e}"),
            );
            state.send(answer_line(&id, Err(f))).await;
            return;
        }
    };
    if id.is_null() {
        let f = Failure::protocol(
            "invalid_input",
            "bad_request",
            "the request id must be a string or a number",
        );
        state.send(answer_line(&id, Err(f))).await;
        return;
    }
    let method = envelope.method;
    if !METHODS.contains(&method.as_str()) {
        let f = Failure::protocol(
            "invalid_input",
            "unknown_method",
            format!(
                "unknown method {method:?} (expected one of {})",
                METHODS.join(", ")
            ),
        );
        state.send(answer_line(&id, Err(f))).await;
        return;
    }
    let params_value = envelope.params.unwrap_or_else(|| json!({}));
    if method == "cancel" {
        // Answered in order, at once: the cancelled request answers `cancelled` itself.
        let answer = params::<CancelParams>("cancel", params_value).and_then(|p| {
            let cancel = lock(&state.in_flight).remove(&p.id.to_string());
            let cancelled = cancel.map(|(_, c)| c.send(()).is_ok()).unwrap_or(false);
            to_value(&CancelResult { cancelled })
        });
        state.send(answer_line(&id, answer)).await;
        return;
    }
    let key = id.to_string();
    let (cancel_tx, cancel_rx) = oneshot::channel();
    let serial = state.next_serial.fetch_add(1, Ordering::SeqCst);
    let duplicate = {
        let mut in_flight = lock(&state.in_flight);
        if in_flight.contains_key(&key) {
            true
        } else {
            in_flight.insert(key.clone(), (serial, cancel_tx));
            false
        }
    };
    if duplicate {
        let f = Failure::protocol(
            "invalid_input",
            "duplicate_id",
            format!("request id {key} is already in flight"),
        );
        state.send(answer_line(&id, Err(f))).await;
        return;
    }
    let state = state.clone();
    tasks.spawn(async move {
        let _permit = permit;
        // A panic in the work (a bug in a backend) is answered as a `backend` error, so
        // the line still gets its one answer and the client never waits forever.
        let work = std::panic::AssertUnwindSafe(dispatch(&state, &id, &method, params_value))
            .catch_unwind();
        let answer = tokio::select! {
            answer = work => answer.unwrap_or_else(|panic| {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic".to_string());
                Err(Error::backend(method.clone(), format!("internal error: {what}")).into())
            }),
            Ok(()) = cancel_rx => Err(Failure::cancelled()),
        };
        {
            let mut in_flight = lock(&state.in_flight);
            if in_flight.get(&key).is_some_and(|(s, _)| *s == serial) {
                in_flight.remove(&key);
            }
        }
        state.send(answer_line(&id, answer)).await;
    });
}

async fn dispatch(state: &Arc<State>, id: &Value, method: &str, p: Value) -> Answer {
    match method {
        "factory" => make_factory(state, params(method, p)?).await,
        "check_environment" => {
            let p: CheckEnvironmentParams = params(method, p)?;
            let entry = state.factory(p.factory)?;
            let spec = p.spec.into_core()?;
            entry
                .factory
                .check_environment(&p.requirements.into_core(), &spec)
                .await?;
            to_value(&Empty {})
        }
        "create" => {
            let p: CreateParams = params(method, p)?;
            let entry = state.factory(p.factory)?;
            let spec = p.spec.into_core()?;
            let machine = entry.factory.create(spec).await?;
            to_value(&CreateResult {
                machine: state.add_machine(machine),
            })
        }
        "run" => {
            let p: RunParams = params(method, p)?;
            let machine = state.machine(p.machine)?;
            let result = machine.run(p.command.into_core()?).await?;
            to_value(&WireResult::from(&result))
        }
        "run_stream" => {
            let p: RunParams = params(method, p)?;
            let machine = state.machine(p.machine)?;
            let mut stream = machine.run_stream(p.command.into_core()?).await?;
            while let Some(event) = stream.next().await {
                let event = match event? {
                    Event::Stdout(b) => WireEvent::Stdout(encode_bytes(&b)),
                    Event::Stderr(b) => WireEvent::Stderr(encode_bytes(&b)),
                    Event::Exit(status) => return to_value(&WireExitStatus::from(&status)),
                };
                state
                    .send(json!({"id": id, "event": event}).to_string())
                    .await;
            }
            Err(Error::backend("run_stream", "the stream ended without an exit event").into())
        }
        "upload" => {
            let p: UploadParams = params(method, p)?;
            let machine = state.machine(p.machine)?;
            machine.upload(Path::new(&p.source), &p.target).await?;
            to_value(&Empty {})
        }
        "download" => {
            let p: DownloadParams = params(method, p)?;
            let machine = state.machine(p.machine)?;
            machine.download(&p.source, Path::new(&p.target)).await?;
            to_value(&Empty {})
        }
        "download_file" => {
            let p: DownloadFileParams = params(method, p)?;
            let machine = state.machine(p.machine)?;
            let target = Path::new(&p.target);
            machine
                .download_file(&p.source, target, p.max_bytes)
                .await?;
            // The file just renamed into place; its size is what was written.
            let bytes = std::fs::symlink_metadata(target)
                .map_err(|e| Error::io(format!("stat {}", target.display()), e))?
                .len();
            to_value(&DownloadFileResult { bytes })
        }
        "download_files" => {
            let p: DownloadFilesParams = params(method, p)?;
            let machine = state.machine(p.machine)?;
            let limits = p.limits.into_core()?;
            let paths: Vec<&str> = p.paths.iter().map(String::as_str).collect();
            let files = crate::download_files(&*machine, &paths, limits).await?;
            let files = files
                .into_iter()
                .map(|(path, bytes)| (path, encode_bytes(&bytes)))
                .collect();
            to_value(&DownloadFilesResult { files })
        }
        "close" => {
            let p: MachineParams = params(method, p)?;
            // Closing twice is fine (close is idempotent); an unknown handle is not.
            let machine = lock(&state.machines).remove(&p.machine);
            match machine {
                Some(machine) => machine.close().await?,
                None => match state.machine(p.machine) {
                    Err(f) if f.kind == "closed" => {}
                    Err(f) => return Err(f),
                    Ok(_) => {}
                },
            }
            to_value(&Empty {})
        }
        "snapshot" => {
            let p: MachineParams = params(method, p)?;
            let snapshot = state.machine(p.machine)?.snapshot().await?;
            let handle = state.next_snapshot.fetch_add(1, Ordering::SeqCst);
            lock(&state.snapshots).insert(handle, snapshot);
            to_value(&SnapshotResult { snapshot: handle })
        }
        "create_from" => {
            let p: CreateFromParams = params(method, p)?;
            let entry = state.factory(p.factory)?;
            let snapshot = state.snapshot(p.snapshot)?;
            let spec = p.spec.into_core()?;
            let machine = entry.factory.create_from(&snapshot, spec).await?;
            to_value(&CreateResult {
                machine: state.add_machine(machine),
            })
        }
        "fork" => {
            let p: ForkParams = params(method, p)?;
            let entry = state.factory(p.factory)?;
            let source = state.machine(p.machine)?;
            let spec = p.spec.into_core()?;
            let machine = entry.factory.fork(&*source, spec).await?;
            to_value(&CreateResult {
                machine: state.add_machine(machine),
            })
        }
        "delete_snapshot" => {
            let p: SnapshotParams = params(method, p)?;
            // Deleting twice is fine (as close); an unknown handle is not.
            let snapshot = lock(&state.snapshots).remove(&p.snapshot);
            match snapshot {
                Some(snapshot) => snapshot.delete().await?,
                None => match state.snapshot(p.snapshot) {
                    Err(f) if f.kind == "closed" => {}
                    Err(f) => return Err(f),
                    Ok(_) => {}
                },
            }
            to_value(&Empty {})
        }
        "open_shell" => {
            let p: ShellParams = params(method, p)?;
            let shell = state.machine(p.machine)?.open_shell().await?;
            to_value(&OpenShellResult {
                interactive: shell.interactive(),
            })
        }
        "execute" => {
            let p: ExecuteParams = params(method, p)?;
            let wait = wait_seconds(p.wait)?;
            let shell = state.machine(p.machine)?.open_shell().await?;
            let update = shell
                .execute(&p.command, wait, p.output_limit_bytes)
                .await?;
            to_value(&WireShellUpdate::from(&update))
        }
        "read" => {
            let p: ReadParams = params(method, p)?;
            let wait = wait_seconds(p.wait)?;
            let shell = state.machine(p.machine)?.open_shell().await?;
            let update = shell.read(wait, p.output_limit_bytes).await?;
            to_value(&WireShellUpdate::from(&update))
        }
        "write" => {
            let p: WriteParams = params(method, p)?;
            let data = decode_data(&p.data)?;
            let shell = state.machine(p.machine)?.open_shell().await?;
            shell.write(&data).await?;
            to_value(&Empty {})
        }
        "interrupt" => {
            let p: ShellParams = params(method, p)?;
            state
                .machine(p.machine)?
                .open_shell()
                .await?
                .interrupt()
                .await?;
            to_value(&Empty {})
        }
        "close_shell" => {
            let p: ShellParams = params(method, p)?;
            state
                .machine(p.machine)?
                .open_shell()
                .await?
                .close()
                .await?;
            to_value(&Empty {})
        }
        "gc" => {
            let p: GcParams = params(method, p)?;
            let entry = state.factory(p.factory)?;
            gc(&entry).await
        }
        _ => Err(Failure::protocol(
            "invalid_input",
            "unknown_method",
            format!("unknown method {method:?}"),
        )),
    }
}

async fn make_factory(state: &State, p: FactoryParams) -> Answer {
    let entry: FactoryEntry = match p {
        FactoryParams::Sim(o) => sim_factory(o)?,
        FactoryParams::Local(o) => local_factory(o).await?,
        FactoryParams::Docker(o) => docker_factory(o).await?,
    };
    let backend = entry.factory.backend().to_string();
    let handle = state.next_factory.fetch_add(1, Ordering::SeqCst);
    lock(&state.factories).insert(handle, Arc::new(entry));
    to_value(&FactoryResult {
        factory: handle,
        backend,
    })
}

#[cfg_attr(
    all(feature = "sim", feature = "local", feature = "docker"),
    allow(dead_code)
)]
fn not_compiled(backend: &str) -> Failure {
    Error::unsupported(format!(
        "this build of shellbox has no {backend} backend (enable the cargo feature `{backend}`)"
    ))
    .into()
}

#[allow(unused_variables)]
fn sim_factory(o: SimFactoryOptions) -> Result<FactoryEntry, Failure> {
    #[cfg(feature = "sim")]
    {
        let d = crate::sim::SimOptions::default();
        let options = crate::sim::SimOptions {
            cpu_fuel: o.cpu_fuel.unwrap_or(d.cpu_fuel),
            disk_bytes: o.disk_bytes.unwrap_or(d.disk_bytes),
            output_bytes: o.output_bytes.unwrap_or(d.output_bytes),
            memory_bytes: o.memory_bytes.or(d.memory_bytes),
        };
        Ok(FactoryEntry {
            factory: Arc::new(crate::sim::SimMachineFactory::with_options(options)),
            #[cfg(feature = "docker")]
            docker: None,
        })
    }
    #[cfg(not(feature = "sim"))]
    Err(not_compiled("sim"))
}

#[allow(unused_variables)]
async fn local_factory(o: LocalFactoryOptions) -> Result<FactoryEntry, Failure> {
    #[cfg(feature = "local")]
    {
        let options = crate::local::LocalOptions {
            read_only: o.read_only.into_iter().map(Into::into).collect(),
            bin_dirs: o.bin_dirs.into_iter().map(Into::into).collect(),
            bwrap: o.bwrap.map(Into::into),
            hash_seed: o.hash_seed,
            package_cache: o.package_cache.map(Into::into),
            python_version: o.python_version,
            python_interpreter: o.python_interpreter.map(Into::into),
            system_directories: match o.system_directories.unwrap_or_default() {
                SystemDirectories::ReadOnly => crate::local::SystemDirectories::ReadOnly,
                SystemDirectories::CopyOnWrite => crate::local::SystemDirectories::CopyOnWrite,
            },
            ..crate::local::LocalOptions::default()
        };
        // Probing bwrap blocks for a moment: keep it off the runtime's workers.
        let factory =
            tokio::task::spawn_blocking(move || crate::local::LocalMachineFactory::new(options))
                .await
                .map_err(|e| Error::backend("start the local factory", e.to_string()))??;
        Ok(FactoryEntry {
            factory: Arc::new(factory),
            #[cfg(feature = "docker")]
            docker: None,
        })
    }
    #[cfg(not(feature = "local"))]
    Err(not_compiled("local"))
}

#[allow(unused_variables)]
async fn docker_factory(o: DockerFactoryOptions) -> Result<FactoryEntry, Failure> {
    #[cfg(feature = "docker")]
    {
        let mut factory = match &o.host {
            Some(host) => crate::docker::DockerMachineFactory::connect_to(host).await?,
            None => crate::docker::DockerMachineFactory::connect().await?,
        };
        if let Some(runtime) = o.runtime {
            factory = factory.runtime(runtime);
        }
        Ok(FactoryEntry {
            factory: Arc::new(factory.clone()),
            docker: Some(factory),
        })
    }
    #[cfg(not(feature = "docker"))]
    Err(not_compiled("docker"))
}

async fn gc(entry: &FactoryEntry) -> Answer {
    #[cfg(feature = "docker")]
    if let Some(docker) = &entry.docker {
        let report = crate::docker::gc(docker.docker()).await?;
        return to_value(&GcResult {
            removed: report.removed,
            kept: report.kept,
            other_hosts: report.other_hosts,
            failed: report.failed,
        });
    }
    #[cfg(feature = "local")]
    if entry.factory.backend() == "local" {
        let report = tokio::task::spawn_blocking(crate::local::gc)
            .await
            .map_err(|e| Error::backend("gc of local machine roots", e))??;
        let path = |p: &std::path::Path| p.display().to_string();
        return to_value(&GcResult {
            removed: report.removed.iter().map(|p| path(p)).collect(),
            kept: report.kept,
            other_hosts: report.skipped,
            failed: report
                .failed
                .iter()
                .map(|(p, why)| (path(p), why.clone()))
                .collect(),
        });
    }
    Err(Error::unsupported(format!(
        "gc cleans docker containers and local machine roots; {} machines leave nothing behind \
         once their process ends",
        entry.factory.backend()
    ))
    .into())
}

/// Resolves with the number of the first SIGTERM, SIGINT or SIGHUP this process receives
/// (15, 2 or 1; never, if the handlers cannot be installed): the signals on which `shellbox
/// run`, `shell` and `serve` stop what runs, close their machines and exit 128 + N. Each
/// call installs tokio's handlers, so the default action (ending the process) is replaced
/// from the first call on.
pub async fn termination_signal() -> i32 {
    use tokio::signal::unix::{signal, Signal, SignalKind};
    async fn next(signal: &mut Option<Signal>) {
        match signal {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending().await,
        }
    }
    let mut terminate = signal(SignalKind::terminate()).ok();
    let mut interrupt = signal(SignalKind::interrupt()).ok();
    let mut hangup = signal(SignalKind::hangup()).ok();
    tokio::select! {
        _ = next(&mut terminate) => 15,
        _ = next(&mut interrupt) => 2,
        _ = next(&mut hangup) => 1,
    }
}
