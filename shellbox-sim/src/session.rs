//! The simulator's persistent shell session ([`Machine::open_shell`](shellbox_core::Machine::open_shell)):
//! REFERENCE.md section 2's non-interactive semantics, with section 6's machine rules.
//!
//! One session per machine, its shell state (cwd, variables, exports, functions, options,
//! traps, arrays, jobs) kept between calls in one interpreter [`Shell`]. The interpreter's
//! values are single-threaded and metered on the thread that made them (see [`crate::mem`]),
//! so the shell lives on a thread of its own for the session's life: `execute` hands the
//! command line to that thread, which takes the machine's lock (commands on one machine are
//! serialized, a session's with its `run`s), runs the line to completion in the shell and
//! hands back a [`ShellUpdate`]. The thread ends, dropping the shell, when the session or its
//! machine closes.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use shellbox_core::{async_trait, Error, ShellSession, ShellStatus, ShellUpdate};

use crate::mem::{self, MBytes};
use crate::shell::{self, Ctl, Fd, Interp, Shell, Stream, World, CANCELLED};
use crate::{base_shell, lock, panic_text, Inner};

/// How long the session's thread keeps looking for the next command after one finished
/// before it sleeps: an agent's next call usually comes within microseconds of the last
/// answer, and waking a sleeping thread costs more than the command (`execute("true")`
/// takes a few microseconds).
const SPIN_FOR: Duration = Duration::from_micros(200);

/// The exit status of an interrupted command (128 + SIGINT).
const INTERRUPTED: i32 = 130;

/// One command line for the session's thread.
struct Job {
    command: String,
    limit: u64,
    reply: tokio::sync::oneshot::Sender<Result<ShellUpdate, Error>>,
}

#[derive(Default)]
struct State {
    /// The sequence number of the command given to the thread and not yet answered.
    running: Option<u64>,
    /// Commands submitted so far.
    seq: u64,
    /// Set by [`SimSession::shutdown`].
    closed: bool,
}

/// The machine's one shell session (see the module docs). Held by the machine (which closes
/// it when it closes) and by every handle `open_shell` gave out.
pub(crate) struct SimSession {
    machine: Weak<Inner>,
    state: Mutex<State>,
    /// Set by `interrupt` and `close`: the session's command stops at its next check (the
    /// interpreter's cancel flag while it runs).
    stop: Arc<AtomicBool>,
    /// To the session's thread; `None` once closed (the thread then ends).
    tx: Mutex<Option<mpsc::Sender<Job>>>,
}

impl SimSession {
    /// Starts the session's thread for the machine `machine`.
    ///
    /// # Errors
    /// [`Error::Io`] when the thread cannot be started.
    pub(crate) fn start(machine: Weak<Inner>) -> Result<Arc<SimSession>, Error> {
        let (tx, rx) = mpsc::channel::<Job>();
        let session = Arc::new(SimSession {
            machine,
            state: Mutex::new(State::default()),
            stop: Arc::new(AtomicBool::new(false)),
            tx: Mutex::new(Some(tx)),
        });
        let worker = session.clone();
        std::thread::Builder::new()
            .name("shellbox-sim-shell".into())
            .stack_size(8 << 20)
            .spawn(move || worker.serve(rx))
            .map_err(|e| Error::io("start the simulator's shell session thread", e))?;
        Ok(session)
    }

    /// Whether the session (or its machine) was closed.
    pub(crate) fn is_closed(&self) -> bool {
        lock(&self.state).closed
    }

    /// Closes the session: the running command stops at its next check (its `execute` then
    /// returns [`Error::Closed`]), later calls return [`Error::Closed`], and the session's
    /// thread ends once the command stopped, dropping the shell.
    pub(crate) fn shutdown(&self) {
        lock(&self.state).closed = true;
        self.stop.store(true, Ordering::Relaxed);
        lock(&self.tx).take();
    }

    /// Hands `job` to the thread; returns its sequence number.
    fn submit(&self, job: Job) -> Result<u64, Error> {
        if self
            .machine
            .upgrade()
            .is_none_or(|m| m.closing.load(Ordering::Relaxed))
        {
            return Err(Error::Closed);
        }
        let mut st = lock(&self.state);
        if st.closed {
            return Err(Error::Closed);
        }
        if st.running.is_some() {
            return Err(Error::ShellState(
                "a command is still running in this session: interrupt it or wait for its execute to return".into(),
            ));
        }
        st.seq += 1;
        let seq = st.seq;
        self.stop.store(false, Ordering::Relaxed);
        let sent = lock(&self.tx)
            .as_ref()
            .is_some_and(|tx| tx.send(job).is_ok());
        if !sent {
            return Err(Error::Closed);
        }
        st.running = Some(seq);
        Ok(seq)
    }

    /// The session's thread: runs each job in the one shell until the session closes.
    fn serve(self: Arc<Self>, rx: mpsc::Receiver<Job>) {
        let mut shell: Option<SessionShell> = None;
        while let Some(job) = next_job(&rx) {
            let r = self.run_job(&mut shell, &job.command, job.limit);
            lock(&self.state).running = None;
            let _ = job.reply.send(r);
        }
        // the shell's values were metered on this thread: they are freed here
        shell::set_ending(false);
        drop(shell);
        mem::reap();
        if let Some(inner) = self.machine.upgrade() {
            if let Some(w) = lock(&inner.world).as_mut() {
                w.session_held = 0;
            }
        }
    }

    /// Runs one command line holding the machine's lock.
    fn run_job(
        &self,
        shell: &mut Option<SessionShell>,
        command: &str,
        limit: u64,
    ) -> Result<ShellUpdate, Error> {
        let Some(inner) = self.machine.upgrade() else {
            return Err(Error::Closed);
        };
        let mut guard = loop {
            if self.is_closed() || inner.closing.load(Ordering::Relaxed) {
                return Err(Error::Closed);
            }
            if self.stop.load(Ordering::Relaxed) {
                // interrupted before it started: `$?` is 130 as if it had run
                if let Some(s) = shell.as_mut() {
                    s.sh.status = INTERRUPTED;
                }
                return Ok(completed(Bytes::new(), INTERRUPTED, false));
            }
            match inner.world.try_lock() {
                Ok(g) => break g,
                Err(std::sync::TryLockError::Poisoned(p)) => break p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        };
        if inner.closing.load(Ordering::Relaxed) {
            return Err(Error::Closed);
        }
        let Some(world) = guard.as_mut() else {
            return Err(Error::Closed);
        };
        world.cancel = Some(self.stop.clone());
        // the shell's values are on this thread's meter while it runs
        world.session_held = 0;
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_line(world, &inner.workdir, &inner.env, shell, command, limit)
        }))
        .unwrap_or_else(|panic| {
            // REFERENCE.md 6: an engine panic completes with 1 and the panic's text; the
            // shell is kept, put back at its top level
            if let Some(s) = shell.as_mut() {
                s.sanitize();
            }
            let mut text = panic_text(&*panic).into_bytes();
            let limit = usize::try_from(limit).unwrap_or(usize::MAX);
            let truncated = text.len() > limit;
            text.truncate(limit);
            Ok(completed(Bytes::from(text), 1, truncated))
        });
        world.cancel = None;
        inner.take_unsupported(world);
        match outcome {
            Ok(update) => {
                world.session_held = mem::held();
                if self.is_closed() {
                    return Err(Error::Closed);
                }
                Ok(update)
            }
            Err(reason) => {
                *guard = None;
                drop(guard);
                shell::set_ending(false);
                *shell = None;
                Err(Error::Terminated(reason))
            }
        }
    }
}

/// The next job, looking for one for [`SPIN_FOR`] before sleeping; `None` once closed.
fn next_job(rx: &mpsc::Receiver<Job>) -> Option<Job> {
    let until = std::time::Instant::now() + SPIN_FOR;
    loop {
        match rx.try_recv() {
            Ok(job) => return Some(job),
            Err(mpsc::TryRecvError::Disconnected) => return None,
            Err(mpsc::TryRecvError::Empty) if std::time::Instant::now() < until => {
                std::thread::yield_now();
            }
            Err(mpsc::TryRecvError::Empty) => return rx.recv().ok(),
        }
    }
}

fn completed(output: Bytes, code: i32, truncated: bool) -> ShellUpdate {
    ShellUpdate {
        output,
        status: ShellStatus::Completed,
        exit_code: Some(code),
        truncated,
    }
}

/// The session's shell and the terminal its stdout and stderr start on.
struct SessionShell {
    sh: Shell,
    /// Where fds 1 and 2 of a fresh shell point: one capture, so stdout and stderr are
    /// merged in write order; emptied and given the call's limit at each `execute`.
    term: Fd,
}

impl SessionShell {
    /// A fresh shell in `workdir` (in `/` with a diagnostic when it is gone), as a `bash`
    /// process the machine started: the login variables and the spec's env exported,
    /// `SHLVL=1`, stdin empty. Returns the diagnostic to print, if any.
    fn fresh(
        it: &mut Interp<'_>,
        workdir: &str,
        env: &BTreeMap<String, String>,
    ) -> (SessionShell, Option<String>) {
        let ok =
            it.w.vfs
                .resolve("/", workdir, true)
                .is_ok_and(|i| it.w.vfs.get(i).is_dir());
        let (cwd, note) = if ok {
            (workdir, None)
        } else {
            (
                "/",
                Some(format!("bash: cd: {workdir}: No such file or directory")),
            )
        };
        let pid = it.w.new_pid();
        let base = base_shell(pid, cwd, env.iter());
        let pid = it.w.new_pid();
        let Ok(mut sh) = shell::child_shell_with(&base, pid, || Ok::<(), Infallible>(()));
        drop(base);
        let term: Fd = Rc::new(RefCell::new(Stream::Cap {
            data: MBytes::default(),
            limit: 0,
            total: 0,
        }));
        sh.set_fd(0, Some(shell::buf_fd(Vec::new())));
        sh.set_fd(1, Some(term.clone()));
        sh.set_fd(2, Some(term.clone()));
        (SessionShell { sh, term }, note)
    }

    /// Puts the shell back at its top level after a command was cut short (interrupted, or
    /// the interpreter panicked): function frames unwound, loop and trap nesting cleared.
    fn sanitize(&mut self) {
        let sh = &mut self.sh;
        while sh.pop_local_frame() {}
        sh.funcdepth = 0;
        sh.funcnames.clear();
        sh.loops = 0;
        sh.cond = 0;
        sh.in_trap = false;
    }
}

/// Runs `command` in the session's shell (a fresh one when there is none); `Err(reason)`
/// when a budget ran out.
fn run_line(
    world: &mut World,
    workdir: &str,
    env: &BTreeMap<String, String>,
    shell: &mut Option<SessionShell>,
    command: &str,
    limit: u64,
) -> Result<ShellUpdate, String> {
    shell::set_ending(false);
    mem::reap();
    world.sync_time();
    world.memory_base = 0;
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let wall = shell::set_wall(
        None,
        std::iter::once(world.closing.clone()).chain(world.cancel.clone()),
    );
    let mut it = Interp::new(world);
    let mut note = None;
    let ss = shell.get_or_insert_with(|| {
        let (s, n) = SessionShell::fresh(&mut it, workdir, env);
        note = n;
        s
    });
    *ss.term.borrow_mut() = Stream::Cap {
        data: MBytes::default(),
        limit,
        total: 0,
    };
    if let Some(n) = note {
        it.err(&ss.sh, &n);
    }
    let fds = ss.sh.fds.clone();
    let mut reset = false;
    let code = match it.run_script(&mut ss.sh, command) {
        Ok(s) | Err(Ctl::Return(s)) => s,
        Err(Ctl::Break(_)) | Err(Ctl::Continue(_)) => 0,
        Err(Ctl::Exit(s)) => {
            // the shell exits: its EXIT trap runs, and the next execute starts a fresh one
            reset = true;
            match it.run_exit_trap(&mut ss.sh, s) {
                Err(Ctl::Budget(reason)) => return Err(reason),
                Ok(s) => s,
                Err(_) => s,
            }
        }
        Err(Ctl::Timeout(id)) => {
            if id == CANCELLED {
                // interrupted (or the session is closing: the caller answers Closed)
                it.w.cancel = None;
                drop(wall);
                shell::set_ending(false);
                ss.sh.fds = fds;
                ss.sanitize();
                INTERRUPTED
            } else {
                // no deadline of the session's own: one of an inner `timeout`
                124
            }
        }
        Err(Ctl::Budget(reason)) => return Err(reason),
    };
    let code = code & 255;
    ss.sh.status = code;
    if let Err(Ctl::Budget(reason)) = it.flush_final() {
        return Err(reason);
    }
    drop(it);
    world.sync_time();
    let (output, truncated) = match &mut *ss.term.borrow_mut() {
        Stream::Cap { data, total, .. } => {
            let truncated = *total > data.len() as u64;
            (Bytes::from(data.take()), truncated)
        }
        _ => (Bytes::new(), false),
    };
    if reset {
        *shell = None;
        return Ok(ShellUpdate {
            output,
            status: ShellStatus::Reset,
            exit_code: None,
            truncated,
        });
    }
    Ok(completed(output, code, truncated))
}

/// Interrupts the handle's command when its `execute` future is dropped before it answered.
struct StopOnDrop<'a> {
    session: &'a SimSession,
    seq: u64,
    armed: bool,
}

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed && lock(&self.session.state).running == Some(self.seq) {
            self.session.stop.store(true, Ordering::Relaxed);
        }
    }
}

fn not_interactive(what: &str) -> Error {
    Error::unsupported(format!(
        "{what} on the sim backend's shell session: it is not interactive (every execute \
         runs its command to completion; REFERENCE.md section 2)"
    ))
}

#[async_trait]
impl ShellSession for SimSession {
    /// Always false: each `execute` runs its command to completion.
    fn interactive(&self) -> bool {
        false
    }

    /// Runs `command` to completion in the session's shell, whatever `wait` is, and returns
    /// [`ShellStatus::Completed`] with its exit status and its stdout and stderr merged in
    /// write order, at most `output_limit_bytes` of it (`truncated` when more came);
    /// [`ShellStatus::Reset`] when the shell exited (`exit`, `exec`, `set -e`), after its
    /// EXIT trap ran: the next call starts a fresh shell in the workdir, files kept. An
    /// interrupted command completes with 130; an interpreter panic with 1 and the panic's
    /// text. Dropping the future interrupts the command.
    ///
    /// # Errors
    /// [`Error::ShellState`] while another `execute` of this session is out;
    /// [`Error::Closed`] once the session or its machine closed (also for the command the
    /// close stopped); [`Error::Terminated`] when a machine budget ran out (the machine is
    /// then closed).
    async fn execute(
        &self,
        command: &str,
        wait: Duration,
        output_limit_bytes: u64,
    ) -> Result<ShellUpdate, Error> {
        shellbox_core::check_command(command)?;
        let _ = wait;
        let (reply, answer) = tokio::sync::oneshot::channel();
        let seq = self.submit(Job {
            command: command.to_string(),
            limit: output_limit_bytes,
            reply,
        })?;
        let mut guard = StopOnDrop {
            session: self,
            seq,
            armed: true,
        };
        let r = answer.await.unwrap_or(Err(Error::Closed));
        guard.armed = false;
        r
    }

    /// # Errors
    /// [`Error::Closed`] after close; otherwise [`Error::Unsupported`].
    async fn read(&self, wait: Duration, output_limit_bytes: u64) -> Result<ShellUpdate, Error> {
        let _ = (wait, output_limit_bytes);
        if self.is_closed() {
            return Err(Error::Closed);
        }
        Err(not_interactive("read"))
    }

    /// # Errors
    /// [`Error::Closed`] after close; otherwise [`Error::Unsupported`].
    async fn write(&self, data: &[u8]) -> Result<(), Error> {
        let _ = data;
        if self.is_closed() {
            return Err(Error::Closed);
        }
        Err(not_interactive("write"))
    }

    /// Stops the session's command at its next check (within microseconds in a loop; a
    /// command still waiting for the machine does not start): its `execute` returns
    /// Completed with 130 and the output so far. Returns at once. A `run` on the machine is
    /// never touched.
    ///
    /// # Errors
    /// [`Error::ShellState`] when no `execute` of this session is out; [`Error::Closed`].
    async fn interrupt(&self) -> Result<(), Error> {
        let st = lock(&self.state);
        if st.closed {
            return Err(Error::Closed);
        }
        if st.running.is_none() {
            return Err(Error::ShellState(
                "no command is running in this session to interrupt".into(),
            ));
        }
        self.stop.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Closes the session (see [`SimSession::shutdown`]); the machine goes on, and its next
    /// `open_shell` starts a new session. Idempotent; never fails.
    async fn close(&self) -> Result<(), Error> {
        self.shutdown();
        Ok(())
    }
}
