//! shellbox's command supervisor: a small static program that runs inside a machine and
//! starts its commands, and the async client a backend uses to talk to it.
//!
//! The program ([`SUPERVISOR_PROGRAM`]) is std-only Rust, compiled by this crate's build
//! script with `$RUSTC -C target-feature=+crt-static` (so it runs in any Linux root of the
//! same architecture, with no library of its own) and embedded here with `include_bytes!`:
//! a library user needs no install step. A backend puts the bytes into the machine (the
//! local backend: bwrap's `--ro-bind-data`) and runs it with a control channel on its
//! stdin/stdout; [`Client::connect`] talks to it over any [`AsyncRead`]/[`AsyncWrite`] pair.
//!
//! The protocol is framed binary ([`proto`]): lengths, kinds and command ids, so arbitrary
//! bytes, huge outputs and interleaved concurrent commands never confuse it. Each command
//! runs under its own *keeper* process (a `PR_SET_CHILD_SUBREAPER`), which is its kill scope:
//! [`Running::kill`] (and dropping an unfinished [`Running`]) kills the command's whole
//! subtree — `setsid` and double-fork escapees included — and nothing else. Processes a
//! command leaves in the background keep running after it exits. Output limits are applied
//! inside the supervisor: only the first `output_limit_bytes` per stream cross the channel.
//!
//! Output is flow-controlled per command (see [`proto`]): the supervisor sends a command's
//! output only within a window of credit ([`proto::OUTPUT_WINDOW_BYTES`]), which
//! [`Running::next`] replenishes as it hands chunks out. So the host holds at most about one
//! window per command however slow its consumer ([`Client::buffered_output_bytes`]); a
//! command whose consumer does not read blocks in its own writes, and every other command
//! of the machine goes on.

#![warn(missing_docs)]

pub mod proto;
#[cfg(feature = "session")]
pub mod session;

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::sync::mpsc;

/// The supervisor program: a statically linked executable for the target this crate was
/// built for (`x86_64-unknown-linux-gnu` here), std only.
pub const SUPERVISOR_PROGRAM: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/shellbox-supervisor"));

/// Which output stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputStream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// What the supervisor reports about one command, in order: output chunks, then exactly one
/// [`Reply::Exit`] or [`Reply::Fail`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Bytes within the command's output limit.
    Output(OutputStream, Bytes),
    /// The command's main process ended.
    Exit(proto::Exit),
    /// The command could not be started or followed.
    Fail(proto::Fail),
}

type Routes = Arc<Mutex<HashMap<u32, mpsc::UnboundedSender<Reply>>>>;

/// How many consumed output bytes [`Running::next`] gathers before it grants them back as
/// one [`proto::CREDIT`]: a quarter of the window, so the supervisor rarely runs dry while
/// the consumer keeps up.
const GRANT_BYTES: u64 = proto::OUTPUT_WINDOW_BYTES / 4;

/// The host→supervisor half of the channel, shared by every sender and the writer task.
///
/// A frame is written at once by whoever sends it when nothing is queued before it and
/// the channel takes it without waiting (the common case: a command's request is one
/// pipe write from the caller's own thread, with no wake-up of another task on the way);
/// otherwise it is queued, in order, for the writer task, which writes the queue out as
/// the channel accepts it and shuts the writer down once the last [`Client`] and
/// [`Running`] are gone.
struct Outbox {
    writer: std::pin::Pin<Box<dyn AsyncWrite + Send>>,
    /// Frames not written yet, in order; the first may be partly written.
    queue: std::collections::VecDeque<Vec<u8>>,
    /// Bytes of `queue[0]` already written.
    front_written: usize,
    /// The writer task, while it waits for frames.
    waker: Option<std::task::Waker>,
    /// No frame comes any more: shut the writer down once the queue is written.
    closed: bool,
    /// A write failed: the channel is gone.
    failed: bool,
}

type SharedOutbox = Arc<Mutex<Outbox>>;

fn lock_outbox(outbox: &SharedOutbox) -> std::sync::MutexGuard<'_, Outbox> {
    outbox.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sends one frame (see [`Outbox`]).
///
/// # Errors
/// `BrokenPipe` when the channel is gone (a write failed before or now).
fn send_frame(outbox: &SharedOutbox, gone: &AtomicBool, frame: Vec<u8>) -> io::Result<()> {
    let broken = || io::Error::new(io::ErrorKind::BrokenPipe, "the supervisor is gone");
    let mut st = lock_outbox(outbox);
    if st.failed || st.closed {
        return Err(broken());
    }
    if st.queue.is_empty() {
        // A waker that does nothing: were the write to wait, the writer task takes over
        // (woken below) and polls with its own.
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let mut written = 0;
        while written < frame.len() {
            match st.writer.as_mut().poll_write(&mut cx, &frame[written..]) {
                std::task::Poll::Ready(Ok(n)) if n > 0 => written += n,
                std::task::Poll::Ready(_) => {
                    st.failed = true;
                    gone.store(true, Ordering::SeqCst);
                    if let Some(w) = st.waker.take() {
                        w.wake();
                    }
                    return Err(broken());
                }
                std::task::Poll::Pending => break,
            }
        }
        if written == frame.len() {
            return Ok(());
        }
        st.front_written = written;
    }
    st.queue.push_back(frame);
    if let Some(w) = st.waker.take() {
        w.wake();
    }
    Ok(())
}

/// The writer task's work: writes queued frames as the channel takes them, until the
/// outbox is closed and empty (then shuts the writer down) or a write fails.
async fn write_loop(outbox: SharedOutbox, gone: Arc<AtomicBool>) {
    use std::task::Poll;
    let ok = std::future::poll_fn(|cx| {
        let mut guard = lock_outbox(&outbox);
        let st = &mut *guard;
        loop {
            if st.failed {
                return Poll::Ready(false);
            }
            let Some(front) = st.queue.front() else {
                if st.closed {
                    return Poll::Ready(true);
                }
                st.waker = Some(cx.waker().clone());
                return Poll::Pending;
            };
            match st
                .writer
                .as_mut()
                .poll_write(cx, &front[st.front_written..])
            {
                Poll::Ready(Ok(n)) if n > 0 => {
                    st.front_written += n;
                    if st.front_written == front.len() {
                        st.queue.pop_front();
                        st.front_written = 0;
                    }
                }
                Poll::Ready(_) => {
                    st.failed = true;
                    return Poll::Ready(false);
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    })
    .await;
    if !ok {
        gone.store(true, Ordering::SeqCst);
        return;
    }
    let _ = std::future::poll_fn(|cx| lock_outbox(&outbox).writer.as_mut().poll_shutdown(cx)).await;
}

struct Shared {
    outbox: SharedOutbox,
    routes: Routes,
    next: AtomicU32,
    gone: Arc<AtomicBool>,
    /// Output bytes received and not yet taken from a [`Running`].
    buffered: Arc<AtomicU64>,
}

impl Shared {
    /// Sends one frame ([`send_frame`]).
    fn send(&self, frame: Vec<u8>) -> io::Result<()> {
        send_frame(&self.outbox, &self.gone, frame)
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The last client and command are gone: the writer task writes what is queued,
        // then closes the channel (the supervisor exits).
        let mut st = lock_outbox(&self.outbox);
        st.closed = true;
        if let Some(w) = st.waker.take() {
            w.wake();
        }
    }
}

/// The host side of one supervisor's control channel. Cheap to clone; the channel closes
/// (and the supervisor exits, ending every process of its machine) when the last clone and
/// every [`Running`] are dropped.
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("gone", &self.is_gone())
            .finish_non_exhaustive()
    }
}

fn lock(routes: &Routes) -> std::sync::MutexGuard<'_, HashMap<u32, mpsc::UnboundedSender<Reply>>> {
    routes.lock().unwrap_or_else(|e| e.into_inner())
}

impl Client {
    /// Waits for the supervisor's [`proto::READY`] frame on `reader`, then starts a reader
    /// and a writer task on the current tokio runtime.
    ///
    /// # Errors
    /// `UnexpectedEof` when the channel closes first (the supervisor did not start: the
    /// backend's stderr says why); `InvalidData` when the first frame is not READY; any read
    /// error.
    pub async fn connect<R, W>(reader: R, writer: W) -> io::Result<Client>
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        // Frames are read header first, then payload: buffered, most replies (an EXIT and
        // the output before it) are one read.
        let mut reader = tokio::io::BufReader::with_capacity(64 * 1024, reader);
        let mut header = [0u8; proto::HEADER_BYTES];
        reader.read_exact(&mut header).await?;
        let (len, kind, _) = proto::parse_header(&header);
        if kind != proto::READY || len != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the supervisor's first frame is kind {kind} of {len} bytes, not READY"),
            ));
        }
        let routes: Routes = Arc::default();
        let gone = Arc::new(AtomicBool::new(false));
        let buffered = Arc::new(AtomicU64::new(0));
        let outbox: SharedOutbox = Arc::new(Mutex::new(Outbox {
            writer: Box::pin(writer),
            queue: std::collections::VecDeque::new(),
            front_written: 0,
            waker: None,
            closed: false,
            failed: false,
        }));
        tokio::spawn(write_loop(outbox.clone(), gone.clone()));
        {
            let (routes, gone, buffered) = (routes.clone(), gone.clone(), buffered.clone());
            tokio::spawn(async move {
                let _ = read_loop(&mut reader, &routes, &buffered).await;
                gone.store(true, Ordering::SeqCst);
                // Every command still waiting sees its channel end.
                lock(&routes).clear();
            });
        }
        Ok(Client {
            shared: Arc::new(Shared {
                outbox,
                routes,
                next: AtomicU32::new(1),
                gone,
                buffered,
            }),
        })
    }

    /// Whether the channel is known to be closed (the supervisor exited or was killed).
    pub fn is_gone(&self) -> bool {
        self.shared.gone.load(Ordering::SeqCst)
    }

    /// Bytes of command output this client received from the supervisor that no
    /// [`Running`] handed out yet (with [`Running::next`]), over all its commands. Flow
    /// control bounds it: at most [`proto::OUTPUT_WINDOW_BYTES`] per command, whatever its
    /// consumer's pace, plus, for a command that was killed, what its processes had left in
    /// their pipes (about a pipe's capacity). Chunks of a dropped [`Running`] are freed
    /// with it.
    pub fn buffered_output_bytes(&self) -> u64 {
        self.shared.buffered.load(Ordering::SeqCst)
    }

    /// Starts a command with these bytes on its stdin (sent in [`proto::CHUNK_BYTES`]
    /// pieces, then closed).
    ///
    /// # Errors
    /// `InvalidInput` when argv plus environment hold more than
    /// [`proto::MAX_ARGV_ENV_BYTES`] or the request is over [`proto::MAX_PAYLOAD_BYTES`]
    /// (nothing is sent: the machine is untouched); `BrokenPipe` when the channel is closed.
    pub fn start(&self, start: &proto::Start, stdin: &[u8]) -> io::Result<Running> {
        self.start_with(start, stdin, true)
    }

    /// Starts a command with these bytes on its stdin and leaves its stdin open: more is
    /// sent with [`Running::input`]'s [`Input::send`] (a session's terminal relay).
    ///
    /// # Errors
    /// As [`Client::start`].
    pub fn start_open(&self, start: &proto::Start, stdin: &[u8]) -> io::Result<Running> {
        self.start_with(start, stdin, false)
    }

    fn start_with(&self, start: &proto::Start, stdin: &[u8], end: bool) -> io::Result<Running> {
        let bytes = start.argv_env_bytes();
        if bytes > proto::MAX_ARGV_ENV_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "argv and environment hold {bytes} bytes, over the {} byte limit",
                    proto::MAX_ARGV_ENV_BYTES
                ),
            ));
        }
        let payload = start.encode();
        if payload.len() > proto::MAX_PAYLOAD_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "the request holds {} bytes, over the {} byte limit",
                    payload.len(),
                    proto::MAX_PAYLOAD_BYTES
                ),
            ));
        }
        let gone = || io::Error::new(io::ErrorKind::BrokenPipe, "the supervisor is gone");
        if self.is_gone() {
            return Err(gone());
        }
        let id = self.shared.next.fetch_add(1, Ordering::Relaxed).max(1);
        let (tx, rx) = mpsc::unbounded_channel();
        lock(&self.shared.routes).insert(id, tx);
        let send = |frame| self.shared.send(frame);
        let sent = (|| {
            // The request, the first stdin chunk and the end go out in one write when
            // they fit one chunk (the common case: one pipe write per command).
            let mut first = proto::frame(proto::START, id, &payload);
            let mut chunks = stdin.chunks(proto::CHUNK_BYTES);
            if stdin.len() <= proto::CHUNK_BYTES {
                if let Some(chunk) = chunks.next() {
                    first.extend_from_slice(&proto::frame(proto::STDIN, id, chunk));
                }
                if end {
                    first.extend_from_slice(&proto::frame(proto::STDIN_END, id, &[]));
                }
                return send(first);
            }
            send(first)?;
            for chunk in chunks {
                send(proto::frame(proto::STDIN, id, chunk))?;
            }
            if end {
                send(proto::frame(proto::STDIN_END, id, &[]))?;
            }
            Ok(())
        })();
        if let Err(e) = sent {
            lock(&self.shared.routes).remove(&id);
            return Err(e);
        }
        Ok(Running {
            id,
            rx,
            shared: self.shared.clone(),
            done: false,
            consumed: 0,
        })
    }
}

async fn read_loop<R: AsyncRead + Unpin>(
    reader: &mut R,
    routes: &Routes,
    buffered: &AtomicU64,
) -> io::Result<()> {
    let mut header = [0u8; proto::HEADER_BYTES];
    loop {
        reader.read_exact(&mut header).await?;
        let (len, kind, id) = proto::parse_header(&header);
        if len > proto::MAX_PAYLOAD_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "oversized frame",
            ));
        }
        let mut payload = vec![0u8; len];
        reader.read_exact(&mut payload).await?;
        let reply = match kind {
            proto::OUTPUT => match payload.first() {
                Some(&proto::STDOUT) => {
                    Reply::Output(OutputStream::Stdout, Bytes::from(payload).slice(1..))
                }
                Some(&proto::STDERR) => {
                    Reply::Output(OutputStream::Stderr, Bytes::from(payload).slice(1..))
                }
                _ => continue,
            },
            proto::EXIT => match proto::Exit::decode(&payload) {
                Some(exit) => Reply::Exit(exit),
                None => continue,
            },
            proto::FAIL => match proto::Fail::decode(&payload) {
                Some(fail) => Reply::Fail(fail),
                None => continue,
            },
            _ => continue,
        };
        let last = !matches!(reply, Reply::Output(..));
        let bytes = output_len(&reply);
        let mut routes = lock(routes);
        if let Some(tx) = routes.get(&id) {
            // Counted before the send, so a consumer taking it at once never goes below 0.
            buffered.fetch_add(bytes, Ordering::SeqCst);
            if tx.send(reply).is_err() {
                buffered.fetch_sub(bytes, Ordering::SeqCst);
            }
        }
        if last {
            routes.remove(&id);
        }
    }
}

/// Output bytes of a reply (0 for an EXIT or FAIL).
fn output_len(reply: &Reply) -> u64 {
    match reply {
        Reply::Output(_, b) => b.len() as u64,
        _ => 0,
    }
}

/// One started command: its replies in order. Dropping it before its [`Reply::Exit`] or
/// [`Reply::Fail`] arrived kills the command's whole subtree (as [`Running::kill`]).
///
/// The supervisor sends the command's output only as fast as this handle's
/// [`Running::next`] takes it (a window of [`proto::OUTPUT_WINDOW_BYTES`] ahead): a command
/// whose `Running` is not read blocks in its writes once the window is full.
pub struct Running {
    id: u32,
    rx: mpsc::UnboundedReceiver<Reply>,
    shared: Arc<Shared>,
    done: bool,
    /// Output bytes handed out and not yet granted back as credit.
    consumed: u64,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field("id", &self.id)
            .field("done", &self.done)
            .finish()
    }
}

impl Running {
    /// The command's id on the channel.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The next reply; `None` once the final one was returned or the channel closed
    /// before it came (the supervisor is gone). Each output chunk taken is credit for the
    /// supervisor to send as much more (granted in [`proto::CREDIT`] frames of a quarter
    /// window). Cancel-safe: a reply is taken only when it is returned.
    pub async fn next(&mut self) -> Option<Reply> {
        if self.done {
            return None;
        }
        let reply = self.rx.recv().await;
        match &reply {
            Some(r @ Reply::Output(..)) => {
                let n = output_len(r);
                self.shared.buffered.fetch_sub(n, Ordering::SeqCst);
                self.consumed += n;
                if self.consumed >= GRANT_BYTES {
                    let grant = std::mem::take(&mut self.consumed);
                    let _ = self.shared.send(proto::frame(
                        proto::CREDIT,
                        self.id,
                        &grant.to_le_bytes(),
                    ));
                }
            }
            _ => self.done = true,
        }
        reply
    }

    /// A handle that sends stdin to this command and kills it, usable while another task
    /// awaits [`Running::next`].
    pub fn input(&self) -> Input {
        Input {
            id: self.id,
            shared: self.shared.clone(),
        }
    }

    /// Asks the supervisor to SIGKILL every process the command started (its main process,
    /// its background ones and escapees); replies keep coming until its EXIT.
    pub fn kill(&self) {
        let _ = self.shared.send(proto::frame(proto::KILL, self.id, &[]));
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.done {
            self.kill();
            lock(&self.shared.routes).remove(&self.id);
        }
        // No sender is left (the route is gone), so what is queued is all there is.
        self.rx.close();
        while let Ok(reply) = self.rx.try_recv() {
            self.shared
                .buffered
                .fetch_sub(output_len(&reply), Ordering::SeqCst);
        }
    }
}

/// Sends stdin to one started command, or kills it ([`Running::input`]). Cheap to clone.
/// Frames for a command that already ended are ignored by the supervisor.
#[derive(Clone)]
pub struct Input {
    id: u32,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Input").field("id", &self.id).finish()
    }
}

impl Input {
    /// Queues `data` for the command's stdin (in [`proto::CHUNK_BYTES`] frames).
    ///
    /// # Errors
    /// `BrokenPipe` when the channel is closed (the supervisor is gone).
    pub fn send(&self, data: &[u8]) -> io::Result<()> {
        let gone = || io::Error::new(io::ErrorKind::BrokenPipe, "the supervisor is gone");
        if self.shared.gone.load(Ordering::SeqCst) {
            return Err(gone());
        }
        for chunk in data.chunks(proto::CHUNK_BYTES) {
            self.shared
                .send(proto::frame(proto::STDIN, self.id, chunk))?;
        }
        Ok(())
    }

    /// Closes the command's stdin once what was sent is written.
    pub fn close(&self) {
        let _ = self
            .shared
            .send(proto::frame(proto::STDIN_END, self.id, &[]));
    }

    /// As [`Running::kill`].
    pub fn kill(&self) {
        let _ = self.shared.send(proto::frame(proto::KILL, self.id, &[]));
    }
}
