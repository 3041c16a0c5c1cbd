//! A persistent, interactive shell session over a machine's supervisor: one shell on a
//! pseudo-terminal of the machine, run by the supervisor's `--pty-relay` mode as an ordinary
//! command (the local and docker backends' [`ShellSession`]). Built with the `session`
//! feature.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::proto::{
    self, pty_frame, pty_numbered, PTY_CREDIT, PTY_DATA, PTY_DEBUG, PTY_DONE, PTY_INPUT,
    PTY_INTERRUPT, PTY_LINE, PTY_LOG, PTY_MARKER,
};
use crate::{Client, Input, Reply, Running};
use bytes::{Bytes, BytesMut};
use shellbox_core::{async_trait, Error, OutputLimiter, ShellSession, ShellStatus, ShellUpdate};
use tokio::sync::Notify;
use tokio::time::Instant;

/// How long a new shell may take to print its first marker.
const START_BOUND: Duration = Duration::from_secs(30);
/// How long after `interrupt` the shell must be back at its prompt before it is replaced.
pub const INTERRUPT_BOUND: Duration = Duration::from_secs(5);
/// How long closing a session waits for the supervisor to confirm its processes are gone.
const KILL_BOUND: Duration = Duration::from_secs(10);
/// The terminal bytes the host holds or has asked for at most (the relay's credit): output
/// past it waits in the terminal, blocking the writer, until a call takes what is held.
pub const SESSION_BUFFER_BYTES: u64 = 1 << 20;
/// The longest input line sent to the terminal (its canonical line holds 4095 bytes).
const LINE_MAX: usize = 1000;
/// The terminal's size, rows by columns.
pub const TERMINAL_SIZE: (u16, u16) = (24, 80);

/// Run by `sh -c` on the terminal: bash where there is one, else `sh -i`.
const START: &str = "if command -v bash >/dev/null 2>&1; then \
exec bash --noprofile --norc --noediting -i; fi\nexec sh -i";

/// Runs the relay program somewhere other than a machine's supervisor (the docker
/// backend's exec path: one Engine exec per session), for [`PtySession::with_launcher`].
///
/// The launched relay must be the supervisor program in `--pty-relay` mode, run with
/// whatever account, environment, working directory and confinement the machine gives its
/// commands; the session then holds the same rules as over a supervisor (completion
/// confirmed from outside the shell, interrupts signalled by the relay, every process of
/// the session killed when the relay ends).
#[async_trait]
pub trait RelayLauncher: Send + Sync + 'static {
    /// Starts `argv` (the relay's: program, `--pty-relay`, rows, columns, the shell's
    /// argv) and writes `first` to its stdin before anything else.
    ///
    /// # Errors
    /// The launcher's own (the relay could not be started).
    async fn launch(&self, argv: Vec<Vec<u8>>, first: Vec<u8>) -> std::io::Result<RelayChannel>;
}

/// What the relay wrote, for a [`RelayLauncher`]'s channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayOutput {
    /// Bytes of the relay's stdout (its frames).
    Stdout(Bytes),
    /// Bytes of the relay's stderr (its own complaints), shown as session output.
    Stderr(Bytes),
}

/// The input side of a launched relay (see [`RelayLauncher`]).
pub trait RelayInput: Send + Sync + 'static {
    /// Writes `data` to the relay's stdin, in order.
    ///
    /// # Errors
    /// `BrokenPipe` (or another) when the relay is gone.
    fn send(&self, data: &[u8]) -> std::io::Result<()>;
    /// Ends the relay and every process of its session; the channel's output then ends
    /// once they are gone.
    fn kill(&self);
}

/// A launched relay: its output (ends when the relay and its processes are gone) and its
/// input.
pub struct RelayChannel {
    /// The relay's output, in order; closed at its end.
    pub output: tokio::sync::mpsc::UnboundedReceiver<RelayOutput>,
    /// Its stdin and kill.
    pub input: Arc<dyn RelayInput>,
}

impl std::fmt::Debug for RelayChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayChannel").finish_non_exhaustive()
    }
}

/// Where the session's relays are started.
#[derive(Clone)]
enum Source {
    Supervisor(Client),
    Launcher(Arc<dyn RelayLauncher>),
}

/// The input side of one running relay.
#[derive(Clone)]
enum RelayIn {
    Supervisor(Input),
    Launched(Arc<dyn RelayInput>),
}

impl RelayIn {
    fn send(&self, data: &[u8]) -> std::io::Result<()> {
        match self {
            RelayIn::Supervisor(i) => i.send(data),
            RelayIn::Launched(i) => i.send(data),
        }
    }

    fn kill(&self) {
        match self {
            RelayIn::Supervisor(i) => i.kill(),
            RelayIn::Launched(i) => i.kill(),
        }
    }
}

/// The output side of one running relay.
enum RelayOut {
    Supervisor(Running),
    Launched(tokio::sync::mpsc::UnboundedReceiver<RelayOutput>),
}

impl RelayOut {
    /// The next piece of output; `None` at the relay's end (the supervisor's EXIT or FAIL,
    /// or the launcher's channel closed).
    async fn next(&mut self) -> Option<RelayOutput> {
        match self {
            RelayOut::Supervisor(r) => match r.next().await {
                Some(Reply::Output(crate::OutputStream::Stdout, b)) => Some(RelayOutput::Stdout(b)),
                Some(Reply::Output(_, b)) => Some(RelayOutput::Stderr(b)),
                _ => None,
            },
            RelayOut::Launched(rx) => rx.recv().await,
        }
    }
}

/// Run at each prompt, after the marker: reads and drops the input waiting in the terminal
/// (typeahead a command left: input written for it that it did not read, or bytes it
/// pushed with `TIOCSTI`), so the shell never runs it as a command line the host did not
/// send (which would also hide the real prompt behind the stray line's). The host sends a
/// command line only after the prompt is confirmed, so nothing of it is dropped.
///
/// One `read` of everything (`-d ""`: no delimiter stops it) until the terminal has been
/// quiet for 50 ms, and only when input waits (`read -t 0`): a leftover without a newline
/// (`yes` written to `read -n 1`, whose end put the terminal back in canonical mode with
/// it pending) is taken too, where a `read -r` would wait for its newline for ever. No
/// loop: a command that makes the shell skip commands (bash's `extdebug` with a failing
/// `DEBUG` trap) cannot make it spin here. `{R}` is the shell's unshadowable way to call
/// its built-in (a function or alias named `read` is not run).
const DRAIN: &str = "{ {R} -t 0 && {R} -r -d \"\" -t 0.05 _; } </dev/tty 2>/dev/null";

/// How bash calls a built-in whatever functions and aliases a command defined.
const BASH_BUILTIN: &str = "\\builtin";
/// How sh calls a built-in or utility, not a function or alias of that name.
const SH_COMMAND: &str = "\\command";

/// What a shell's terminal said, in order.
enum Item {
    Output(Bytes),
    Marker(u64, i32),
}

/// What the pump task has read from one shell and not yet handed to a call.
#[derive(Default)]
struct QueueState {
    items: VecDeque<Item>,
    /// Output bytes in `items`.
    bytes: u64,
    /// Terminal bytes the relay was allowed to send, and how many arrived.
    granted: u64,
    received: u64,
    /// The shell's process ended (or the channel did): nothing more will arrive.
    ended: bool,
}

impl QueueState {
    /// Credit to grant now so that held plus asked-for bytes stay near
    /// [`SESSION_BUFFER_BYTES`] (granted in halves, not per chunk).
    fn grant(&mut self) -> u64 {
        let in_flight = self.granted.saturating_sub(self.received);
        let held = self.bytes + in_flight;
        if self.ended || held >= SESSION_BUFFER_BYTES / 2 {
            return 0;
        }
        let more = SESSION_BUFFER_BYTES - held;
        self.granted += more;
        more
    }
}

struct Queue {
    state: Mutex<QueueState>,
    notify: Notify,
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One running shell: its queue, its input and the task reading it.
#[derive(Clone)]
struct ShellHandle {
    queue: Arc<Queue>,
    input: RelayIn,
    task: Arc<tokio::task::JoinHandle<()>>,
}

impl ShellHandle {
    fn send_credit(&self, amount: u64) {
        if amount > 0 {
            let _ = self
                .input
                .send(&pty_frame(PTY_CREDIT, &amount.to_le_bytes()));
        }
    }

    /// Grants what the queue has room for.
    fn refill(&self) {
        let more = self.queue.lock().grant();
        self.send_credit(more);
    }

    /// Kills everything the shell started and stops reading it.
    fn kill(&self) {
        self.input.kill();
        let mut st = self.queue.lock();
        st.ended = true;
        drop(st);
        self.queue.notify.notify_one();
    }
}

/// Where the session stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No shell runs (never started, or after a reset): the next `execute` starts one.
    NoShell,
    /// The shell waits at its prompt.
    Idle,
    /// Command `seq` runs; `interrupted` is when `interrupt` was first called for it.
    Running {
        seq: u64,
        interrupted: Option<Instant>,
    },
    /// Closed for good.
    Closed,
}

/// A persistent interactive shell of a machine whose commands run over a supervisor
/// ([`Machine::open_shell`](shellbox_core::Machine::open_shell) of the local and docker
/// backends; REFERENCE.md section 2), or whose relay a [`RelayLauncher`] starts
/// ([`PtySession::with_launcher`]: the docker backend's exec path, one Engine exec).
///
/// # How it works
///
/// The machine's supervisor (or the launcher) starts, as an ordinary command of the machine (the `start`
/// request the backend gives: its account, environment, working directory and whatever
/// confinement its commands get), its own program in `--pty-relay` mode: it opens a
/// pseudo-terminal of the machine's `devpts` (24×80, echo off, output processing off so
/// `\n` stays `\n`, flow control off; canonical input, signals on) and runs
/// `bash --noprofile --norc --noediting -i` (or `sh -i` where there is no bash) on it as a
/// new session with the terminal as its controlling terminal and its stdin, stdout and
/// stderr (merged, as on any terminal). The relay's stdin and stdout carry frames
/// ([`proto::PTY_DATA`] and the others): terminal bytes, read credit, interrupt, the
/// marker prefix; terminal bytes and completions.
///
/// - **Completion**: the shell prints `SB<nonce>:0:<$?>;` to `/dev/tty` whenever it is
///   back at its prompt (`PROMPT_COMMAND` in bash, a command substitution in `PS1` in sh,
///   both read-only), the nonce 32 random hex digits per session. The relay takes the
///   marker out of the output and reports it ([`proto::PTY_DONE`]) only once it has seen
///   from outside the shell that the shell waits at its prompt (foreground, blocked reading
///   the terminal in its prompt's call, the command line read, no unread input). Printed
///   look-alikes cannot end a command, nor can a command that prints the real marker (read
///   from `$PROMPT_COMMAND`) and goes on running: a later marker drops it (the nonce never
///   shows in output). The command line counts as read only when the shell itself read it:
///   when a prompt of the shell took it as typeahead instead (busybox ash prompts a second
///   time when a background job's SIGCHLD interrupts its prompt's read, and drains in a
///   child), the relay writes the line again. A
///   confirmed prompt after the call's line ends the call `Completed` with its status
///   (after an interrupt that made the shell drop the line, 130); a prompt for stray input
///   the relay drops.
/// - **Typeahead**: after the marker, each prompt reads and drops the whole lines left in the
///   terminal (input written for a command that it did not read, or pushed by it with
///   `TIOCSTI`), so no line the host did not send runs as a command; and before writing
///   each command line the relay discards what input still waits in the terminal (a
///   partial line, with no newline, pushed by a command or later by a background job), so
///   the line runs exactly as sent. Input that `write` sends is numbered by its command
///   ([`proto::PTY_INPUT`], the line itself goes as [`proto::PTY_LINE`]): the relay drops
///   it once that command's prompt is confirmed and holds it back while a marker waits to
///   be confirmed, so input written as a command ends never runs as a command line nor
///   shifts the answers; completions are numbered by the line they follow.
/// - **Plumbing a command changes**: the marker goes to `/dev/tty`, so `exec >log 2>&1`
///   keeps the session working; the terminal's settings are put back before each command
///   line (a command's `stty echo` never shows the next line). A shell that waits at its
///   prompt with no marker come, or a program that replaced the shell (`exec sh`) waiting
///   for terminal input, is ended by the relay after 100 ms: the call reports `Reset`
///   rather than `Running` for ever (bash's `set -o vi` and `set -o emacs` turn readline
///   on, which makes bash leave or wait elsewhere: `Reset`).
/// - **Sending a command**: one line `eval '<command>'` (heredocs and several lines are
///   one `eval`; a syntax error is one failed command with 2), as octal escapes through
///   `printf` when it holds control bytes or lines over 1000 bytes.
/// - **Interrupt**: the relay sends SIGINT to the terminal's foreground process group once
///   the command line was read, to each new foreground group after that (a job the shell
///   was still forking), and repeatedly to the shell itself while it runs a built-in,
///   flushing unread input as `^C` does; an interrupt that meets the shell already back at
///   its prompt signals nothing (the call then completes with the command's own status);
///   interrupts are numbered by their command ([`proto::PTY_INTERRUPT`]), so one that
///   raced its command's end and reaches the relay with the next command's line is
///   dropped there, never signalling that command.
///   A shell the signal leaves deadlocked (busybox ash) is killed at once, and the call
///   reports `Reset`. A shell not back at its prompt within [`INTERRUPT_BOUND`] is killed with everything it
///   started, and the call reports `Reset`.
/// - **Reset**: when the shell exits (`exit`, killed), the relay kills every process left
///   on the session (it is their child subreaper, so `setsid` and double-fork escapees
///   are found too); the call reports `Reset` and the next `execute` starts a fresh shell
///   in the workdir. Files are the machine's and stay.
/// - **Bounds**: at most [`SESSION_BUFFER_BYTES`] of terminal output are asked for by the
///   host (and 1 MiB more that a prompt's confirmation reads to find the real marker
///   behind a command's copy); past that the terminal is not read, so a command writing more
///   between calls blocks until the next call; within a call, bytes past its
///   `output_limit_bytes` are read and dropped (`truncated`).
/// - **Close**: the session's processes are killed (the supervisor kills the relay's
///   whole subtree). A call waiting on the session, and any later call, then fails with
///   [`Error::ShellState`] saying the session was closed (its machine stays open; its
///   `open_shell` gives a new session), or [`Error::Closed`] when the machine's close
///   closed it.
pub struct PtySession {
    /// The machine's supervisor (or the launcher); `None` once closed.
    client: Mutex<Option<Source>>,
    start: proto::Start,
    /// `SB<nonce>:` — the start of every completion marker of this session.
    prefix: Vec<u8>,
    phase: Mutex<Phase>,
    seq: AtomicU64,
    /// The running shell, if any.
    shell: Mutex<Option<ShellHandle>>,
    /// Held by `execute` and `read` while they gather output: one call at a time.
    calls: tokio::sync::Mutex<()>,
    /// The session's own `close` closed it (not its machine's): see
    /// [`PtySession::closed_error`].
    closed_by_session: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for PtySession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PtySession")
            .field("phase", &self.phase())
            .finish_non_exhaustive()
    }
}

fn running_error() -> Error {
    Error::ShellState(
        "a command is still running in this session: read, write or interrupt it first".into(),
    )
}

fn idle_error(what: &str) -> Error {
    Error::ShellState(format!("no command is running in this session to {what}"))
}

/// 32 random hex digits from the kernel.
fn nonce() -> String {
    let mut b = [0u8; 16];
    let filled = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .is_ok();
    if !filled {
        // Never expected; still unpredictable enough to a command: time and address.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let a = &b as *const _ as usize as u128;
        b.copy_from_slice(&(t ^ (a << 64) ^ u128::from(std::process::id())).to_le_bytes());
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The argv that starts a session's shell: the relay program at `relay_path` in the
/// machine, on a terminal of [`TERMINAL_SIZE`], running `/bin/sh -c` [`START`].
fn relay_argv(relay_path: &str) -> Vec<Vec<u8>> {
    let (rows, cols) = TERMINAL_SIZE;
    [
        relay_path,
        "--pty-relay",
        &rows.to_string(),
        &cols.to_string(),
        "/bin/sh",
        "-c",
        START,
        "sh",
    ]
    .iter()
    .map(|a| a.as_bytes().to_vec())
    .collect()
}
impl PtySession {
    /// A session whose shells the machine's supervisor `client` starts with `start`
    /// (argv replaced by the relay's, its output limit by the session's per-call ones),
    /// `relay_path` being where the supervisor program is inside the machine (executable
    /// by `start`'s account). Nothing starts until the first `execute`.
    pub fn new(client: Client, mut start: proto::Start, relay_path: &str) -> Self {
        start.argv = relay_argv(relay_path);
        // The session's limit is per call, applied here.
        start.output_limit_bytes = u64::MAX;
        PtySession {
            client: Mutex::new(Some(Source::Supervisor(client))),
            start,
            prefix: format!("SB{}:", nonce()).into_bytes(),
            phase: Mutex::new(Phase::NoShell),
            seq: AtomicU64::new(0),
            shell: Mutex::new(None),
            calls: tokio::sync::Mutex::new(()),
            closed_by_session: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// A session whose shells `launcher` starts (the relay program at `relay_path` inside
    /// the machine, run by the launcher with the machine's account and environment), with
    /// the same rules as [`PtySession::new`]'s. Nothing starts until the first `execute`.
    pub fn with_launcher(launcher: Arc<dyn RelayLauncher>, relay_path: &str) -> Self {
        let argv = relay_argv(relay_path);
        PtySession {
            client: Mutex::new(Some(Source::Launcher(launcher))),
            start: proto::Start {
                argv,
                ..proto::Start::default()
            },
            prefix: format!("SB{}:", nonce()).into_bytes(),
            phase: Mutex::new(Phase::NoShell),
            seq: AtomicU64::new(0),
            shell: Mutex::new(None),
            calls: tokio::sync::Mutex::new(()),
            closed_by_session: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn phase(&self) -> Phase {
        *self.phase.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set_phase(&self, phase: Phase) {
        let mut p = self.phase.lock().unwrap_or_else(|p| p.into_inner());
        if *p != Phase::Closed {
            *p = phase;
        }
    }

    /// Whether the session was closed (by its own close or its machine's).
    pub fn is_closed(&self) -> bool {
        self.phase() == Phase::Closed
    }

    fn check_open(&self) -> Result<(), Error> {
        if self.is_closed() {
            Err(self.closed_error())
        } else {
            Ok(())
        }
    }

    /// What a call on the closed session fails with: [`Error::ShellState`] saying so when
    /// the session's own `close` closed it (its machine may well be open: its `open_shell`
    /// gives a new session), else [`Error::Closed`] (the machine closed).
    fn closed_error(&self) -> Error {
        if self.closed_by_session.load(Ordering::SeqCst) {
            Error::ShellState(
                "this shell session was closed; the machine's open_shell gives a new one".into(),
            )
        } else {
            Error::Closed
        }
    }

    fn current(&self) -> Option<ShellHandle> {
        self.shell.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Marks the session closed and kills its shell; returns the shell's reading task to
    /// wait for (it ends when the supervisor confirms the shell's processes are gone).
    /// For the machine's own close.
    pub fn shut(&self) -> Option<Arc<tokio::task::JoinHandle<()>>> {
        *self.phase.lock().unwrap_or_else(|p| p.into_inner()) = Phase::Closed;
        self.client.lock().unwrap_or_else(|e| e.into_inner()).take();
        let shell = self
            .shell
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()?;
        shell.kill();
        Some(shell.task)
    }

    /// The first line written to a new shell: no history, empty `PS2`, the completion
    /// marker `SB<nonce>:0:<$?>;` through `PROMPT_COMMAND` (bash, history expansion off) or
    /// `PS1` (sh, a command substitution), written to `/dev/tty` (the shell's controlling
    /// terminal, whatever a command did to its stdout and stderr: `exec >log 2>&1`). The
    /// prompt variables are read-only: a command's `PS1=` or `PROMPT_COMMAND=` fails (status
    /// 1 or 2) instead of silencing the marker. In sh, each prompt first turns the terminal's
    /// echo off again (`stty -echo icanon`): busybox ash edits its line itself, echoing what
    /// it reads, when it finds echo on at its prompt (after a command's `stty echo`); and
    /// `ignoreeof`: ash takes a SIGCHLD that interrupts its prompt's read (a background job
    /// ending between calls) for end of input and would exit (it prints
    /// `Use "exit" to leave shell.` instead).
    fn init_line(&self) -> String {
        let nonce = String::from_utf8_lossy(&self.prefix[2..self.prefix.len() - 1]).into_owned();
        let (b, c) = (BASH_BUILTIN, SH_COMMAND);
        let bash_drain = DRAIN.replace("{R}", &format!("{b} read"));
        let sh_drain = DRAIN.replace("{R}", &format!("{c} read"));
        format!(
            "unset HISTFILE PROMPT_COMMAND; set +o history 2>/dev/null; PS2=''; \
             if [ -n \"${{BASH_VERSION-}}\" ]; then set +H; PS1=''; \
             PROMPT_COMMAND='{b} printf \"SB{nonce}:0:%s;\" \"$?\" >/dev/tty; {bash_drain}'; \
             readonly PROMPT_COMMAND; \
             else PS1='$({c} printf \"SB{nonce}:0:%s;\" \"$?\" >/dev/tty; {sh_drain}; \
             exec stty -echo icanon </dev/tty 2>/dev/null)'; \
             set -o ignoreeof 2>/dev/null; fi; readonly PS1 PS2\n"
        )
    }

    /// Starts a fresh shell and waits for its first marker.
    async fn start_shell(&self) -> Result<ShellHandle, Error> {
        let client = self
            .client
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| self.closed_error())?;
        let mut first = pty_frame(PTY_CREDIT, &SESSION_BUFFER_BYTES.to_le_bytes());
        let debug_log = relay_debug_log();
        if debug_log.is_some() {
            first.extend_from_slice(&pty_frame(PTY_DEBUG, &[]));
        }
        first.extend_from_slice(&pty_frame(PTY_MARKER, &self.prefix));
        first.extend_from_slice(&pty_frame(PTY_DATA, self.init_line().as_bytes()));
        let (output, input) = match client {
            Source::Supervisor(client) => {
                let running = client.start_open(&self.start, &first).map_err(|e| {
                    if self.is_closed() {
                        self.closed_error()
                    } else {
                        Error::backend("start a shell session on the machine's supervisor", e)
                    }
                })?;
                let input = RelayIn::Supervisor(running.input());
                (RelayOut::Supervisor(running), input)
            }
            Source::Launcher(launcher) => {
                let channel = launcher
                    .launch(self.start.argv.clone(), first)
                    .await
                    .map_err(|e| {
                        if self.is_closed() {
                            self.closed_error()
                        } else {
                            Error::backend("start a shell session's terminal relay", e)
                        }
                    })?;
                (
                    RelayOut::Launched(channel.output),
                    RelayIn::Launched(channel.input),
                )
            }
        };
        let queue = Arc::new(Queue {
            state: Mutex::new(QueueState {
                granted: SESSION_BUFFER_BYTES,
                ..QueueState::default()
            }),
            notify: Notify::new(),
        });
        let tag = String::from_utf8_lossy(&self.prefix[2..10]).into_owned();
        let log = debug_log.map(|file| (file, tag));
        let task = tokio::spawn(pump(output, queue.clone(), input.clone(), log));
        let shell = ShellHandle {
            queue,
            input,
            task: Arc::new(task),
        };
        {
            let mut slot = self.shell.lock().unwrap_or_else(|e| e.into_inner());
            if self.is_closed() {
                shell.kill();
                return Err(self.closed_error());
            }
            *slot = Some(shell.clone());
        }
        let deadline = Instant::now() + START_BOUND;
        let mut seen = BytesMut::new();
        loop {
            let (ready, ended) = {
                let mut st = shell.queue.lock();
                let mut ready = false;
                while let Some(item) = st.items.pop_front() {
                    match item {
                        Item::Output(b) => {
                            st.bytes -= b.len() as u64;
                            if seen.len() < 4096 {
                                seen.extend_from_slice(&b);
                            }
                        }
                        Item::Marker(0, _) => {
                            ready = true;
                            break;
                        }
                        Item::Marker(..) => {}
                    }
                }
                (ready, st.ended && st.items.is_empty())
            };
            shell.refill();
            if ready {
                self.set_phase(Phase::Idle);
                return Ok(shell);
            }
            if ended {
                self.drop_shell();
                self.check_open()?;
                return Err(Error::backend(
                    "start a shell session",
                    std::io::Error::other(format!(
                        "the shell ended before its first prompt: {}",
                        String::from_utf8_lossy(&seen).trim()
                    )),
                ));
            }
            tokio::select! {
                _ = shell.queue.notify.notified() => {}
                _ = tokio::time::sleep_until(deadline) => {
                    self.drop_shell();
                    self.check_open()?;
                    return Err(Error::TimedOut {
                        operation: "start a shell session".into(),
                        after: START_BOUND,
                    });
                }
            }
        }
    }

    /// Kills the current shell (everything it started) and forgets it.
    fn drop_shell(&self) {
        if let Some(shell) = self.shell.lock().unwrap_or_else(|e| e.into_inner()).take() {
            shell.kill();
        }
    }

    /// Ends the current shell and reports Reset.
    fn reset(&self, output: BytesMut, limiter: &OutputLimiter) -> Result<ShellUpdate, Error> {
        self.drop_shell();
        self.check_open()?;
        self.set_phase(Phase::NoShell);
        Ok(ShellUpdate {
            output: output.freeze(),
            status: ShellStatus::Reset,
            exit_code: None,
            truncated: limiter.truncated(),
        })
    }

    /// Gathers output of command `seq` until its marker, the shell's end, the interrupt
    /// bound or `wait`.
    async fn gather(&self, wait: Duration, limit: u64) -> Result<ShellUpdate, Error> {
        let deadline = Instant::now().checked_add(wait);
        let mut limiter = OutputLimiter::new(limit);
        let mut out = BytesMut::new();
        let running_seq = match self.phase() {
            Phase::Running { seq, .. } => Some(seq),
            _ => None,
        };
        loop {
            self.check_open()?;
            let Some(shell) = self.current() else {
                return self.reset(out, &limiter);
            };
            let (status, ended) = {
                let mut st = shell.queue.lock();
                let mut status = None;
                while let Some(item) = st.items.pop_front() {
                    match item {
                        Item::Output(b) => {
                            st.bytes -= b.len() as u64;
                            if let Some(kept) = limiter.admit(b) {
                                out.extend_from_slice(&kept);
                            }
                        }
                        // The relay confirmed the shell back at its prompt after the line
                        // this call's command sent (it numbers completions by the command
                        // line they follow; a prompt for stray input, while the shell sat
                        // at a confirmed one, it drops): that is the command's end. One
                        // numbered otherwise belongs to no command this call runs.
                        Item::Marker(n, code) if Some(n) == running_seq => {
                            status = Some(code);
                            break;
                        }
                        Item::Marker(..) => {}
                    }
                }
                (status, st.ended && st.items.is_empty())
            };
            shell.refill();
            if let Some(code) = status {
                self.set_phase(Phase::Idle);
                return Ok(ShellUpdate {
                    output: out.freeze(),
                    status: ShellStatus::Completed,
                    exit_code: Some(code),
                    truncated: limiter.truncated(),
                });
            }
            if ended {
                return self.reset(out, &limiter);
            }
            let interrupt_deadline = match self.phase() {
                Phase::Running {
                    interrupted: Some(at),
                    ..
                } => Some(at + INTERRUPT_BOUND),
                _ => None,
            };
            tokio::select! {
                biased;
                _ = shell.queue.notify.notified() => {}
                _ = sleep_until_opt(deadline) => {
                    self.check_open()?;
                    return Ok(ShellUpdate {
                        output: out.freeze(),
                        status: ShellStatus::Running,
                        exit_code: None,
                        truncated: limiter.truncated(),
                    });
                }
                _ = sleep_until_opt(interrupt_deadline) => {
                    tracing::debug!(target: "shellbox_supervisor", "the shell did not come back within {INTERRUPT_BOUND:?} of an interrupt: replacing it");
                    return self.reset(out, &limiter);
                }
            }
        }
    }

    fn send(&self, frame: &[u8]) -> Result<(), Error> {
        let Some(shell) = self.current() else {
            return Err(idle_error("write to"));
        };
        shell.input.send(frame).map_err(|e| {
            if self.is_closed() {
                self.closed_error()
            } else {
                Error::io("write to the session terminal", e)
            }
        })
    }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Reads one shell's relay frames into its queue until the shell's process ends or the
/// session drops it.
///
/// `log`: where the relay's debug lines go ([`proto::PTY_LOG`]), each behind the session's
/// tag.
async fn pump(
    mut running: RelayOut,
    queue: Arc<Queue>,
    input: RelayIn,
    mut log: Option<(std::fs::File, String)>,
) {
    let mut frames = BytesMut::new();
    loop {
        let reply = running.next().await;
        let (more, last) = {
            let mut st = queue.lock();
            if st.ended {
                // Killed by the session; the kill is confirmed by the command's end.
                if reply.is_none() {
                    break;
                }
                continue;
            }
            let last = match reply {
                Some(RelayOutput::Stdout(b)) => {
                    frames.extend_from_slice(&b);
                    false
                }
                // The relay's own complaints (it could not set the terminal up).
                Some(RelayOutput::Stderr(b)) => {
                    st.bytes += b.len() as u64;
                    st.items.push_back(Item::Output(b));
                    false
                }
                None => true,
            };
            let mut at = 0;
            while let Some((kind, payload, used)) = proto::parse_pty_frame(&frames[at..]) {
                match kind {
                    PTY_DATA => {
                        st.received += payload.len() as u64;
                        st.bytes += payload.len() as u64;
                        st.items
                            .push_back(Item::Output(Bytes::copy_from_slice(payload)));
                    }
                    PTY_LOG => {
                        if let Some((file, tag)) = &mut log {
                            use std::io::Write;
                            let _ = writeln!(file, "{tag} {}", String::from_utf8_lossy(payload));
                        }
                    }
                    PTY_DONE if payload.len() == 12 => {
                        let seq = u64::from_le_bytes(payload[..8].try_into().unwrap_or([0; 8]));
                        let code = i32::from_le_bytes(payload[8..].try_into().unwrap_or([0; 4]));
                        st.items.push_back(Item::Marker(seq, code));
                    }
                    _ => {}
                }
                at += used;
            }
            let _ = frames.split_to(at);
            if last {
                st.ended = true;
            }
            (st.grant(), last)
        };
        if more > 0 {
            let _ = input.send(&pty_frame(PTY_CREDIT, &more.to_le_bytes()));
        }
        queue.notify.notify_one();
        if last {
            break;
        }
    }
}

/// The file named by `SHELLBOX_RELAY_DEBUG` (opened to append), where a session's relays
/// log what they decide ([`proto::PTY_DEBUG`]); `None` when unset, empty or not openable.
fn relay_debug_log() -> Option<std::fs::File> {
    let path = std::env::var_os("SHELLBOX_RELAY_DEBUG").filter(|p| !p.is_empty())?;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .ok()
}

/// The line that runs `command` (see [`PtySession`]).
fn command_line(command: &str) -> Vec<u8> {
    let plain = command
        .bytes()
        .all(|b| (0x20..0x7f).contains(&b) || b == b'\t' || b == b'\n')
        && command.split('\n').all(|l| l.len() <= LINE_MAX - 64);
    if plain {
        return format!("eval '{}'\n", command.replace('\'', r"'\''")).into_bytes();
    }
    let mut line = String::from("eval \"$(printf '");
    let mut width = line.len();
    for b in command.bytes() {
        if width >= LINE_MAX - 8 {
            line.push_str("'\\\n'");
            width = 1;
        }
        if (0x20..0x7f).contains(&b) && !matches!(b, b'\'' | b'\\' | b'%') {
            line.push(b as char);
            width += 1;
        } else {
            line.push_str(&format!("\\{b:03o}"));
            width += 4;
        }
    }
    line.push_str("')\"\n");
    line.into_bytes()
}

#[async_trait]
impl ShellSession for PtySession {
    fn interactive(&self) -> bool {
        true
    }

    async fn execute(
        &self,
        command: &str,
        wait: Duration,
        output_limit_bytes: u64,
    ) -> Result<ShellUpdate, Error> {
        shellbox_core::check_command(command)?;
        self.check_open()?;
        if matches!(self.phase(), Phase::Running { .. }) {
            return Err(running_error());
        }
        let _call = self.calls.lock().await;
        self.check_open()?;
        if matches!(self.phase(), Phase::Running { .. }) {
            return Err(running_error());
        }
        if self.phase() == Phase::NoShell || self.current().is_none() {
            self.drop_shell();
            self.start_shell().await?;
        }
        let seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        self.set_phase(Phase::Running {
            seq,
            interrupted: None,
        });
        let line = pty_frame(PTY_LINE, &pty_numbered(seq, &command_line(command)));
        if let Err(e) = self.send(&line) {
            self.check_open()?;
            tracing::debug!(target: "shellbox_supervisor", "writing a command to the session failed: {e}");
            return self.reset(BytesMut::new(), &OutputLimiter::new(0));
        }
        self.gather(wait, output_limit_bytes).await
    }

    async fn read(&self, wait: Duration, output_limit_bytes: u64) -> Result<ShellUpdate, Error> {
        self.check_open()?;
        if !matches!(self.phase(), Phase::Running { .. }) {
            return Err(idle_error("read from"));
        }
        let _call = self.calls.lock().await;
        self.check_open()?;
        if !matches!(self.phase(), Phase::Running { .. }) {
            return Err(idle_error("read from"));
        }
        self.gather(wait, output_limit_bytes).await
    }

    async fn write(&self, data: &[u8]) -> Result<(), Error> {
        self.check_open()?;
        let Phase::Running { seq, .. } = self.phase() else {
            return Err(idle_error("write to"));
        };
        // Numbered: the relay drops input for a command that has ended (its prompt
        // confirmed) rather than feed it to the shell as a command line.
        self.send(&pty_frame(PTY_INPUT, &pty_numbered(seq, data)))
    }

    async fn interrupt(&self) -> Result<(), Error> {
        self.check_open()?;
        let seq = {
            let mut phase = self.phase.lock().unwrap_or_else(|p| p.into_inner());
            match &mut *phase {
                Phase::Running { interrupted, seq } => {
                    interrupted.get_or_insert_with(Instant::now);
                    *seq
                }
                _ => return Err(idle_error("interrupt")),
            }
        };
        // Numbered: an interrupt that races its command's end and reaches the relay with the
        // next command's line is dropped there, never signalling that command.
        self.send(&pty_frame(PTY_INTERRUPT, &seq.to_le_bytes()))
    }

    async fn close(&self) -> Result<(), Error> {
        if self.is_closed() {
            return Ok(());
        }
        self.closed_by_session.store(true, Ordering::SeqCst);
        if let Some(task) = self.shut() {
            // The supervisor confirms the kill with the relay's end (its keeper's children
            // are all gone by then).
            let wait = async {
                while !task.is_finished() {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            };
            if tokio::time::timeout(KILL_BOUND, wait).await.is_err() {
                task.abort();
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_stay_printable_and_short() {
        assert_eq!(
            command_line("echo 'a'"),
            b"eval 'echo '\\''a'\\'''\n".to_vec()
        );
        assert_eq!(
            command_line("printf '\x01%s\\n'"),
            b"eval \"$(printf 'printf \\047\\001\\045s\\134n\\047')\"\n".to_vec()
        );
        let l = String::from_utf8(command_line(&"x".repeat(5000))).unwrap();
        assert!(l.lines().all(|line| line.len() <= LINE_MAX), "{l}");
        assert!(l.lines().count() >= 5);
    }

    #[test]
    fn credit_keeps_the_held_bytes_bounded() {
        let mut st = QueueState {
            granted: SESSION_BUFFER_BYTES,
            ..QueueState::default()
        };
        assert_eq!(st.grant(), 0, "the first window is granted at start");
        st.received = SESSION_BUFFER_BYTES;
        st.bytes = SESSION_BUFFER_BYTES;
        assert_eq!(st.grant(), 0, "nothing while the window is held");
        st.bytes = SESSION_BUFFER_BYTES / 4;
        assert_eq!(st.grant(), SESSION_BUFFER_BYTES * 3 / 4);
        assert_eq!(st.granted - st.received + st.bytes, SESSION_BUFFER_BYTES);
    }
}
