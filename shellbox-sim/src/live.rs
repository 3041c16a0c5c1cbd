//! Live output for [`Machine::run_stream`](shellbox_core::Machine::run_stream): a command's
//! stdout and stderr leave as events while the interpreter runs, through a bounded pipe.
//!
//! The interpreter (on a blocking thread, holding the machine's lock) writes into a
//! [`LiveSink`]: the bytes within the command's output limit are queued in write order
//! (stdout and stderr interleaved as written) and handed to the [`Pipe`] once
//! [`LIVE_CHUNK`] bytes are queued or the oldest queued byte waited [`LIVE_DELAY`] (looked
//! at on every write and every few interpreter ticks), and when the command ends. The pipe
//! holds at most [`PIPE_ITEMS`] chunks: when the consumer lags, the interpreter waits for
//! room in slices of [`WAIT_SLICE`], looking at the command's deadline and cancellation
//! between them, so a timeout still ends it and the queued bytes stay bounded (a few hundred
//! KiB whatever the command writes). Chunks are byte ranges: a multibyte character may be
//! split between two chunks and arrives intact once they are joined. Dropping the stream
//! cancels the command.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::task::AtomicWaker;
use shellbox_core::capture::OutputKind;
use shellbox_core::{Error, Event};

use crate::lock;

/// Bytes queued before they are handed to the pipe as one chunk (the largest chunk).
pub const LIVE_CHUNK: usize = 16 * 1024;

/// How long a queued byte waits for more before it is handed to the pipe anyway.
pub const LIVE_DELAY: Duration = Duration::from_millis(2);

/// Chunks the pipe holds before the interpreter waits for the consumer.
pub const PIPE_ITEMS: usize = 16;

/// How long the interpreter waits for room at a time before it looks at its deadline.
pub const WAIT_SLICE: Duration = Duration::from_millis(10);

/// What a stream's items are.
type Item = Result<Event, Error>;

#[derive(Default)]
struct PipeState {
    items: VecDeque<Item>,
    /// The producer sent its terminal item.
    done: bool,
    /// The consumer dropped the stream.
    gone: bool,
}

/// The bounded pipe between the interpreter's thread and the stream's consumer.
#[derive(Default)]
pub struct Pipe {
    state: Mutex<PipeState>,
    /// Signalled when the consumer takes an item or goes away.
    room: Condvar,
    consumer: AtomicWaker,
}

/// The consumer dropped the stream.
#[derive(Debug)]
pub struct Gone;

impl Pipe {
    /// Hands `item` to the consumer, waiting while the pipe is full; `check` runs between
    /// waits and its error ends the wait.
    ///
    /// # Errors
    /// `Err(Ok(Gone))` when the consumer dropped the stream; `Err(Err(e))` when `check`
    /// failed (the item is dropped).
    pub fn push<E>(
        &self,
        item: Item,
        mut check: impl FnMut() -> Result<(), E>,
    ) -> Result<(), Result<Gone, E>> {
        let mut st = lock(&self.state);
        loop {
            if st.gone {
                return Err(Ok(Gone));
            }
            if st.items.len() < PIPE_ITEMS {
                st.items.push_back(item);
                drop(st);
                self.consumer.wake();
                return Ok(());
            }
            st = self
                .room
                .wait_timeout(st, WAIT_SLICE)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
            if st.items.len() >= PIPE_ITEMS && !st.gone {
                drop(st);
                check().map_err(Err)?;
                st = lock(&self.state);
            }
        }
    }

    /// Hands the terminal item to the consumer (waiting for room as long as it takes, unless
    /// the consumer goes away) and ends the stream.
    pub fn finish(&self, item: Item) {
        let _ = self.push(item, || Ok::<(), ()>(()));
        lock(&self.state).done = true;
        self.consumer.wake();
    }
}

/// The consumer's end: what `run_stream` returns. Dropping it sets the command's cancel
/// flag and releases a producer waiting for room.
pub struct LiveStream {
    pipe: Arc<Pipe>,
    cancel: Arc<AtomicBool>,
}

impl LiveStream {
    /// The stream of `pipe`; `cancel` is the command's cancel flag.
    pub fn new(pipe: Arc<Pipe>, cancel: Arc<AtomicBool>) -> Self {
        LiveStream { pipe, cancel }
    }
}

impl futures::Stream for LiveStream {
    type Item = Item;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Item>> {
        self.pipe.consumer.register(cx.waker());
        let mut st = lock(&self.pipe.state);
        if let Some(item) = st.items.pop_front() {
            drop(st);
            self.pipe.room.notify_one();
            return Poll::Ready(Some(item));
        }
        if st.done {
            return Poll::Ready(None);
        }
        Poll::Pending
    }
}

impl Drop for LiveStream {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        let mut st = lock(&self.pipe.state);
        st.gone = true;
        st.items.clear();
        drop(st);
        self.pipe.room.notify_all();
    }
}

/// The interpreter's side of a live command's stdout and stderr (shared by both streams).
pub struct LiveSink {
    pub pipe: Arc<Pipe>,
    /// Bytes not yet handed to the pipe, in write order, each chunk at most [`LIVE_CHUNK`].
    pub queue: VecDeque<(OutputKind, Vec<u8>)>,
    pub queued: usize,
    /// When the oldest queued byte was written.
    pub since: Option<Instant>,
    /// The command's output limit, per stream.
    pub limit: usize,
    /// Bytes kept and written, per stream (stdout, stderr).
    pub kept: [usize; 2],
    pub total: [u64; 2],
}

impl std::fmt::Debug for LiveSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveSink")
            .field("queued", &self.queued)
            .field("kept", &self.kept)
            .field("total", &self.total)
            .finish()
    }
}

impl LiveSink {
    /// A sink for a command with `limit` bytes per stream.
    pub fn new(pipe: Arc<Pipe>, limit: usize) -> Self {
        LiveSink {
            pipe,
            queue: VecDeque::new(),
            queued: 0,
            since: None,
            limit,
            kept: [0; 2],
            total: [0; 2],
        }
    }

    /// Queues `data` (already within the limit) of stream `kind`.
    pub fn enqueue(&mut self, kind: OutputKind, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        if self.since.is_none() {
            self.since = Some(Instant::now());
        }
        for piece in data.chunks(LIVE_CHUNK) {
            match self.queue.back_mut() {
                Some((k, v)) if *k == kind && v.len() + piece.len() <= LIVE_CHUNK => {
                    v.extend_from_slice(piece)
                }
                _ => self.queue.push_back((kind, piece.to_vec())),
            }
            self.queued += piece.len();
        }
    }

    /// Whether the queue should go to the pipe now.
    pub fn due(&self) -> bool {
        self.queued >= LIVE_CHUNK || self.since.is_some_and(|t| t.elapsed() >= LIVE_DELAY)
    }

    /// Takes the next queued chunk as an event.
    pub fn next_event(&mut self) -> Option<Event> {
        let (kind, data) = self.queue.pop_front()?;
        self.queued -= data.len();
        if self.queue.is_empty() {
            self.since = None;
        }
        Some(kind.event(Bytes::from(data)))
    }

    /// Index of `kind` in [`LiveSink::kept`] and [`LiveSink::total`].
    pub fn index(kind: OutputKind) -> usize {
        match kind {
            OutputKind::Stdout => 0,
            OutputKind::Stderr => 1,
        }
    }
}
