//! Bounded output capture shared by every backend.
//!
//! A command's output is cut per stream at its `output_limit_bytes` while it runs: the first
//! N bytes are kept, the rest is read (so the writer never blocks on a full pipe) and
//! counted, never stored. [`Machine::run`](crate::Machine::run) is [`collect`] over
//! [`Machine::run_stream`](crate::Machine::run_stream), so the two cannot disagree.

use std::pin::Pin;

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;

use crate::{CommandResult, Error, Event, ExitReason, ExitStatus};

/// The stream [`Machine::run_stream`](crate::Machine::run_stream) returns: output events in
/// arrival order, then exactly one terminal item, an [`Event::Exit`] or an `Err`.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<Event, Error>> + Send>>;

/// Read size of [`pump_reader`]: 64 KiB.
pub const READ_CHUNK_BYTES: usize = 64 * 1024;

/// Keeps the first `limit` bytes of one stream and remembers whether more came.
#[derive(Debug, Clone)]
pub struct OutputLimiter {
    limit: u64,
    kept: u64,
    truncated: bool,
}

impl OutputLimiter {
    /// A limiter keeping at most `limit_bytes`.
    pub fn new(limit_bytes: u64) -> Self {
        Self {
            limit: limit_bytes,
            kept: 0,
            truncated: false,
        }
    }

    /// Takes one chunk and returns the part within the limit (`None` when nothing of it is
    /// kept). Marks the stream truncated when any byte is dropped.
    pub fn admit(&mut self, mut chunk: Bytes) -> Option<Bytes> {
        if chunk.is_empty() {
            return None;
        }
        let room = self.limit - self.kept;
        if (chunk.len() as u64) > room {
            self.truncated = true;
            chunk.truncate(room as usize);
        }
        self.kept += chunk.len() as u64;
        (!chunk.is_empty()).then_some(chunk)
    }

    /// Whether any byte was dropped.
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// Bytes kept so far.
    pub fn kept_bytes(&self) -> u64 {
        self.kept
    }
}

/// Which output stream a chunk belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputKind {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl OutputKind {
    /// Wraps a chunk in the matching [`Event`].
    pub fn event(self, chunk: Bytes) -> Event {
        match self {
            OutputKind::Stdout => Event::Stdout(chunk),
            OutputKind::Stderr => Event::Stderr(chunk),
        }
    }
}

/// Reads `reader` to EOF in [`READ_CHUNK_BYTES`] chunks, sending the part within
/// `limit_bytes` as events of `kind` on `tx` and discarding the rest. Keeps draining after
/// the limit and after the receiver is gone, so the writer never blocks on a full pipe.
///
/// Returns whether output was dropped by the limit.
///
/// # Errors
/// The reader's I/O error, if any (what was read before it was sent).
pub async fn pump_reader<R: AsyncRead + Unpin>(
    mut reader: R,
    kind: OutputKind,
    limit_bytes: u64,
    tx: mpsc::Sender<Result<Event, Error>>,
) -> std::io::Result<bool> {
    let mut limiter = OutputLimiter::new(limit_bytes);
    let mut buf = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let mut receiver_alive = true;
    loop {
        buf.reserve(READ_CHUNK_BYTES);
        let n = reader.read_buf(&mut buf).await?;
        if n == 0 {
            return Ok(limiter.truncated());
        }
        let chunk = buf.split().freeze();
        if let Some(kept) = limiter.admit(chunk) {
            if receiver_alive && tx.send(Ok(kind.event(kept))).await.is_err() {
                receiver_alive = false;
            }
        }
    }
}

/// Gathers a whole event stream into a [`CommandResult`], applying `limit_bytes` per stream
/// again (so a backend that over-sends cannot break the contract).
///
/// # Errors
/// The stream's own error, or [`Error::Backend`] when it ends without an
/// [`Event::Exit`].
pub async fn collect(mut stream: EventStream, limit_bytes: u64) -> Result<CommandResult, Error> {
    let mut stdout = BytesMut::new();
    let mut stderr = BytesMut::new();
    let mut out_limit = OutputLimiter::new(limit_bytes);
    let mut err_limit = OutputLimiter::new(limit_bytes);
    while let Some(item) = stream.next().await {
        match item? {
            Event::Stdout(chunk) => {
                if let Some(kept) = out_limit.admit(chunk) {
                    stdout.extend_from_slice(&kept);
                }
            }
            Event::Stderr(chunk) => {
                if let Some(kept) = err_limit.admit(chunk) {
                    stderr.extend_from_slice(&kept);
                }
            }
            Event::Exit(status) => {
                return Ok(CommandResult {
                    exit_code: status.exit_code,
                    stdout: stdout.freeze(),
                    stderr: stderr.freeze(),
                    stdout_truncated: status.stdout_truncated || out_limit.truncated(),
                    stderr_truncated: status.stderr_truncated || err_limit.truncated(),
                    reason: status.reason,
                });
            }
        }
    }
    Err(Error::backend(
        "collect command output",
        "the event stream ended without an exit status",
    ))
}

/// Turns a finished [`CommandResult`] into the event stream that yields it: what a backend
/// that computes the whole result at once (the simulator) returns from `run_stream`.
pub fn result_stream(result: CommandResult) -> EventStream {
    let mut events = Vec::with_capacity(3);
    if !result.stdout.is_empty() {
        events.push(Ok(Event::Stdout(result.stdout)));
    }
    if !result.stderr.is_empty() {
        events.push(Ok(Event::Stderr(result.stderr)));
    }
    events.push(Ok(Event::Exit(ExitStatus {
        exit_code: result.exit_code,
        reason: result.reason,
        stdout_truncated: result.stdout_truncated,
        stderr_truncated: result.stderr_truncated,
    })));
    Box::pin(futures::stream::iter(events))
}

/// A timed-out status with these truncation flags.
pub fn timed_out_status(stdout_truncated: bool, stderr_truncated: bool) -> ExitStatus {
    ExitStatus {
        exit_code: None,
        reason: ExitReason::TimedOut,
        stdout_truncated,
        stderr_truncated,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limiter_keeps_prefix_and_flags() {
        let mut l = OutputLimiter::new(5);
        assert_eq!(l.admit(Bytes::from_static(b"abc")).unwrap(), "abc");
        assert!(!l.truncated());
        assert_eq!(l.admit(Bytes::from_static(b"defg")).unwrap(), "de");
        assert!(l.truncated());
        assert!(l.admit(Bytes::from_static(b"h")).is_none());
        assert_eq!(l.kept_bytes(), 5);

        let mut exact = OutputLimiter::new(3);
        exact.admit(Bytes::from_static(b"abc"));
        assert!(!exact.truncated());
        assert!(exact.admit(Bytes::new()).is_none());
        assert!(!exact.truncated());

        let mut zero = OutputLimiter::new(0);
        assert!(zero.admit(Bytes::from_static(b"x")).is_none());
        assert!(zero.truncated());
    }

    #[tokio::test]
    async fn pump_drains_past_limit_and_collect_agrees() {
        let data = vec![b'x'; 1_000_000];
        let (tx, mut rx) = mpsc::channel(4);
        let pump = tokio::spawn(pump_reader(
            std::io::Cursor::new(data),
            OutputKind::Stderr,
            10,
            tx,
        ));
        let mut got = Vec::new();
        while let Some(ev) = rx.recv().await {
            match ev.unwrap() {
                Event::Stderr(b) => got.extend_from_slice(&b),
                other => panic!("{other:?}"),
            }
        }
        assert!(pump.await.unwrap().unwrap());
        assert_eq!(got, b"xxxxxxxxxx");

        let result = CommandResult {
            exit_code: Some(0),
            stdout: Bytes::from_static(b"hello"),
            stderr: Bytes::from_static(b"err"),
            stdout_truncated: false,
            stderr_truncated: true,
            reason: ExitReason::Exited,
        };
        let back = collect(result_stream(result.clone()), 100).await.unwrap();
        assert_eq!(back, result);
        let cut = collect(result_stream(result), 2).await.unwrap();
        assert_eq!(cut.stdout, "he");
        assert!(cut.stdout_truncated);
    }

    #[tokio::test]
    async fn collect_without_exit_is_an_error() {
        let stream: EventStream = Box::pin(futures::stream::iter(vec![Ok(Event::Stdout(
            Bytes::from_static(b"x"),
        ))]));
        assert!(matches!(
            collect(stream, 10).await,
            Err(Error::Backend { .. })
        ));
    }
}
