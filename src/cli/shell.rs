//! `shellbox shell`: the machine's persistent shell session (`Machine::open_shell`) on a
//! fresh machine, typed at by hand (line editing by rustyline) or, with `--json`, driven by a
//! script through one JSON request per line.

use std::io::{IsTerminal, Read, Write};
use std::os::fd::AsFd;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use shellbox::{Error, ShellSession, ShellStatus, ShellUpdate, DEFAULT_EXECUTE_WAIT};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::{mpsc, oneshot, watch};

use super::args::{parse_bytes, parse_env};
use super::{create, termination_signal, Failure, MachineArgs, CREATE_GRACE};

/// How long one `read` of a running command gathers output before shellbox prints it: the
/// output of an interactive command appears at most this late.
const POLL_WAIT: Duration = Duration::from_millis(50);
/// How soon an interrupt the session could not take yet (no command running) is retried.
const INTERRUPT_RETRY: Duration = Duration::from_millis(20);
/// Most bytes of one `--json` request line.
const MAX_REQUEST_LINE_BYTES: usize = 16 << 20;
/// How many `--json` requests may wait for their turn before shellbox stops reading stdin.
const MAX_QUEUED_REQUESTS: usize = 64;

/// Options of `shellbox shell`.
#[derive(clap::Args, Debug)]
pub(crate) struct ShellArgs {
    #[command(flatten)]
    machine: MachineArgs,
    /// Environment variable for the machine, KEY=VALUE (repeatable).
    #[arg(long = "env", short = 'e', value_name = "KEY=VALUE", value_parser = parse_env)]
    env: Vec<(String, String)>,
    /// Bytes of output kept from one read of the session: bytes, or with KiB, MiB, GiB
    /// (default 1MiB); more arriving within one read is dropped and noted. With `--json`,
    /// the default `output_limit_bytes` of a request.
    #[arg(long, value_parser = parse_bytes, default_value = "1MiB", allow_hyphen_values = true)]
    output_limit: u64,
    /// Read one JSON request per line from stdin and answer each with one JSON line on
    /// stdout, in order: {"execute": "<command line>", "wait": SECONDS,
    /// "output_limit_bytes": N}, {"read": true, "wait": SECONDS}, {"write": "<text>"} or
    /// {"write_base64": "<base64>"}, {"interrupt": true}. Each request waits for the answer
    /// of the one before, except interrupt, which stops the command an earlier execute or
    /// read is still waiting for. execute and read answer a shell
    /// update {"output", "output_base64", "status": running|completed|reset, "exit_code",
    /// "truncated"}; write and interrupt answer {}; a failed, malformed or empty request line
    /// answers {"error": {"kind", "message"}} and the session goes on. End of input closes the
    /// machine (exit 0).
    #[arg(long)]
    pub(crate) json: bool,
}

/// `shellbox shell`: a fresh machine and its session until Ctrl-D, `exit` or end of input;
/// the machine is closed (removed) on every way out.
pub(crate) async fn shell(args: ShellArgs) -> Result<ExitCode, Failure> {
    let backend = args.machine.backend()?;
    let mut spec = args.machine.spec()?;
    for (k, v) in &args.env {
        spec.env.insert(k.clone(), v.clone());
    }
    spec.validate()?;
    // SIGINT, SIGTERM and SIGHUP while the machine is being made: stop, remove what was made.
    let creating = create(backend, spec, &args.machine);
    tokio::pin!(creating);
    let created = tokio::select! {
        created = &mut creating => created?,
        signal = termination_signal() => {
            if let Ok(Ok(created)) = tokio::time::timeout(CREATE_GRACE, creating).await {
                let _ = created.machine.close().await;
            }
            return Ok(ExitCode::from((128 + signal) as u8));
        }
    };
    let machine = created.machine;
    let session = match machine.open_shell().await {
        Ok(session) => session,
        Err(e) => {
            let _ = machine.close().await;
            return Err(match e {
                Error::Unsupported(_) => Failure {
                    kind: e.kind(),
                    message: format!(
                        "the {backend} backend offers no shell sessions; `shellbox run` runs \
                         one command there"
                    ),
                },
                e => Failure::context("open the machine's shell", e),
            });
        }
    };
    let outcome = if args.json {
        json_lines(session, args.output_limit).await
    } else {
        interactive(session, backend, args.output_limit).await
    };
    let closed = machine.close().await;
    let code = outcome?;
    closed?;
    Ok(code)
}

/// SIGTERM, SIGHUP and SIGQUIT, which end the session (SIGINT interrupts the running command
/// instead; so does SIGQUIT, Ctrl-\\, while a command of an interactive session runs: see
/// [`run_line`]).
struct Endings {
    terminate: Option<Signal>,
    hangup: Option<Signal>,
    quit: Option<Signal>,
}

impl Endings {
    fn new() -> Self {
        Endings {
            terminate: signal(SignalKind::terminate()).ok(),
            hangup: signal(SignalKind::hangup()).ok(),
            quit: signal(SignalKind::quit()).ok(),
        }
    }

    /// The number of the next SIGTERM, SIGHUP or SIGQUIT (never, if the handlers are
    /// missing).
    async fn next(&mut self) -> i32 {
        async fn one(signal: &mut Option<Signal>) {
            match signal {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            _ = one(&mut self.terminate) => 15,
            _ = one(&mut self.hangup) => 1,
            _ = one(&mut self.quit) => SIGQUIT,
        }
    }
}

/// SIGQUIT's number.
const SIGQUIT: i32 = 3;
/// The terminal's quit character (Ctrl-\\, `VQUIT`), written to an interactive session's
/// terminal when shellbox gets SIGQUIT while a command runs.
const QUIT_CHARACTER: u8 = 0x1c;

/// What the line-editor thread tells the session loop.
enum FromEditor {
    /// A line typed at the prompt (without its newline).
    Line(String),
    /// Ctrl-D at the prompt, or the end of a non-terminal stdin.
    End,
    /// Bytes typed while a command runs, for its terminal input.
    Input(Vec<u8>),
    /// Ctrl-D while a command runs: end of input for it (the terminal's EOF character).
    InputEnd,
    /// Ctrl-C typed right behind a line's Enter, before the terminal left the editor's raw
    /// mode: an interrupt of the command that line starts.
    Interrupt,
    /// The editor failed (the message says how).
    Failed(String),
}

/// The terminal settings of stdin when shellbox started, put back however it leaves (the
/// editor thread may be inside a raw-mode read when a signal ends the session), on that
/// terminal (a duplicate of the original stdin: fd 0 may be [`Keyboard`]'s by then).
struct TerminalGuard(Option<(std::os::fd::OwnedFd, nix::sys::termios::Termios)>);

impl TerminalGuard {
    fn save() -> Self {
        let stdin = std::io::stdin();
        let saved = nix::sys::termios::tcgetattr(stdin.as_fd())
            .ok()
            .and_then(|t| Some((stdin.as_fd().try_clone_to_owned().ok()?, t)));
        TerminalGuard(saved)
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        if let Some((terminal, termios)) = &self.0 {
            let _ =
                nix::sys::termios::tcsetattr(terminal, nix::sys::termios::SetArg::TCSANOW, termios);
        }
    }
}

/// The line-editor thread: one `readline` per prompt the session loop sends; while the
/// command runs (`forward`), what the user types goes to the loop as [`FromEditor::Input`].
fn editor(
    prompts: std::sync::mpsc::Receiver<String>,
    to_loop: mpsc::UnboundedSender<FromEditor>,
    forward: bool,
    keyboard: Option<Arc<Keyboard>>,
) {
    use rustyline::error::ReadlineError;
    let mut editor = match rustyline::DefaultEditor::new() {
        Ok(editor) => editor,
        Err(e) => {
            let _ = to_loop.send(FromEditor::Failed(format!("start the line editor: {e}")));
            return;
        }
    };
    let mut next = prompts.recv();
    while let Ok(prompt) = next {
        let line = loop {
            if let Some(k) = &keyboard {
                k.begin_line();
            }
            let read = editor.readline(prompt.as_str());
            if let Some(k) = &keyboard {
                k.end_line();
            }
            match read {
                Ok(line) => break line,
                // Ctrl-C at the prompt drops the line, as a shell does.
                Err(ReadlineError::Interrupted) => continue,
                Err(ReadlineError::Eof) => {
                    let _ = to_loop.send(FromEditor::End);
                    return;
                }
                Err(e) => {
                    let _ = to_loop.send(FromEditor::Failed(format!("read a line: {e}")));
                    return;
                }
            }
        };
        if !line.trim().is_empty() {
            let _ = editor.add_history_entry(line.as_str());
        }
        // (A Ctrl-C typed behind the line's Enter is sent after the line, which it stops.)
        if to_loop.send(FromEditor::Line(line)).is_err() {
            return;
        }
        if let Some(k) = &keyboard {
            k.flush_interrupt(&to_loop);
        }
        next = if forward && keyboard.is_none() {
            forward_input(&prompts, &to_loop)
        } else {
            prompts.recv()
        };
    }
}

/// The terminal shellbox was started on, put between the user and the line editor.
///
/// rustyline reads the terminal raw and takes all that is there at once, keeping only the
/// first line: lines typed ahead in one burst, and a Ctrl-C typed right behind an Enter,
/// would be lost with its reader. So the editor reads a pseudo-terminal of shellbox's own
/// (its stdin, fd 0, is that terminal's slave), and a thread ([`Keyboard::pump`]) reads the
/// real terminal and decides where each byte goes:
/// - while the editor reads a line (the real terminal raw, as the editor wants it), bytes
///   pass to the editor up to the end of one line (Enter, Ctrl-J, or Ctrl-C, which makes
///   the editor drop the line; a bracketed paste passes whole); the rest is held for the
///   next prompts, so lines typed ahead run one after another, in order;
/// - a Ctrl-C among the held bytes when the line is handed over interrupts the command the
///   line starts, and, as the terminal's own Ctrl-C does, drops what was typed ahead before
///   it;
/// - while a command runs (the real terminal in its cooked mode, so Ctrl-C is SIGINT and
///   typed lines are echoed and edited by the terminal), the lines it delivers go to the
///   command's input ([`FromEditor::Input`]) on an interactive session, and stay in the
///   terminal for the next prompt otherwise.
struct Keyboard {
    /// The real terminal (a duplicate of the original stdin).
    real: std::os::fd::OwnedFd,
    /// shellbox's own terminal: the editor reads its slave.
    master: std::os::fd::OwnedFd,
    /// Whether a running command takes typed input (an interactive session).
    forward: bool,
    state: std::sync::Mutex<Keys>,
}

/// What [`Keyboard`] holds.
#[derive(Default)]
struct Keys {
    /// The editor reads a line.
    editing: bool,
    /// A typed line's command runs.
    running: bool,
    /// Bytes pass to the editor until the end of a line has passed.
    feeding: bool,
    /// Inside a bracketed paste (`ESC [ 200 ~` to `ESC [ 201 ~`).
    pasting: bool,
    /// Typed ahead, for later prompts.
    held: std::collections::VecDeque<u8>,
    /// A Ctrl-C was typed behind the line just read: the command it starts is interrupted.
    interrupt: bool,
    /// The real terminal's settings at start (cooked), and raw ones for the editor.
    modes: Option<(nix::sys::termios::Termios, nix::sys::termios::Termios)>,
}

const PASTE_START: &[u8] = b"\x1b[200~";
const PASTE_END: &[u8] = b"\x1b[201~";

impl Keyboard {
    /// Puts shellbox's own terminal between the real one (stdin) and the line editor:
    /// `None` (nothing changed) when stdin or stdout is not a terminal or a step fails.
    fn interpose(forward: bool) -> Option<Arc<Keyboard>> {
        use nix::sys::termios::{
            tcgetattr, ControlFlags, InputFlags, LocalFlags, SpecialCharacterIndices,
        };
        let stdin = std::io::stdin();
        // (With stdout elsewhere the editor reads plain lines, as on a pipe.)
        if !stdin.is_terminal() || !std::io::stdout().is_terminal() {
            return None;
        }
        let cooked = tcgetattr(stdin.as_fd()).ok()?;
        let mut raw = cooked.clone();
        raw.local_flags &=
            !(LocalFlags::ECHO | LocalFlags::ICANON | LocalFlags::IEXTEN | LocalFlags::ISIG);
        raw.input_flags &= !(InputFlags::BRKINT
            | InputFlags::ICRNL
            | InputFlags::INPCK
            | InputFlags::ISTRIP
            | InputFlags::IXON);
        raw.control_flags |= ControlFlags::CS8;
        raw.control_chars[SpecialCharacterIndices::VMIN as usize] = 1;
        raw.control_chars[SpecialCharacterIndices::VTIME as usize] = 0;
        let pty = nix::pty::openpty(None, None).ok()?;
        let real = stdin.as_fd().try_clone_to_owned().ok()?;
        // fd 0 becomes the slave (the editor's stdin); `pty.slave`'s own fd closes on drop.
        nix::unistd::dup2_stdin(&pty.slave).ok()?;
        Some(Arc::new(Keyboard {
            real,
            master: pty.master,
            forward,
            state: std::sync::Mutex::new(Keys {
                modes: Some((cooked, raw)),
                ..Keys::default()
            }),
        }))
    }

    fn keys(&self) -> std::sync::MutexGuard<'_, Keys> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Before the editor reads a line: the real terminal raw, held bytes up to a line's end
    /// passed to the editor, and bytes typed from now on too until a line's end passed.
    fn begin_line(&self) {
        use nix::sys::termios::{tcsetattr, SetArg};
        let mut keys = self.keys();
        if let Some((_, raw)) = &keys.modes {
            let _ = tcsetattr(&self.real, SetArg::TCSANOW, raw);
        }
        keys.editing = true;
        keys.feeding = true;
        self.feed(&mut keys);
    }

    /// The editor has its line: the real terminal cooked again; a Ctrl-C held behind the
    /// line is an interrupt for its command (and drops what was typed before it).
    fn end_line(&self) {
        use nix::sys::termios::{tcsetattr, SetArg};
        let mut keys = self.keys();
        keys.editing = false;
        keys.feeding = false;
        if let Some((cooked, _)) = &keys.modes {
            let _ = tcsetattr(&self.real, SetArg::TCSANOW, cooked);
        }
        if let Some(at) = keys.held.iter().rposition(|&b| b == 3) {
            keys.held.drain(..=at);
            keys.interrupt = true;
        }
    }

    /// A typed line's command starts (`true`) or has ended.
    fn set_running(&self, running: bool) {
        self.keys().running = running;
    }

    /// Sends the interrupt [`Keyboard::end_line`] found, if any.
    fn flush_interrupt(&self, to_loop: &mpsc::UnboundedSender<FromEditor>) {
        if std::mem::take(&mut self.keys().interrupt) {
            let _ = to_loop.send(FromEditor::Interrupt);
        }
    }

    /// Passes held bytes to the editor until the end of a line has passed (outside a
    /// bracketed paste: Enter, Ctrl-J, Ctrl-C).
    fn feed(&self, keys: &mut Keys) {
        if !keys.feeding {
            return;
        }
        let mut out = Vec::new();
        while let Some(b) = keys.held.pop_front() {
            out.push(b);
            if out.ends_with(PASTE_START) {
                keys.pasting = true;
            } else if out.ends_with(PASTE_END) {
                keys.pasting = false;
            }
            if !keys.pasting && matches!(b, b'\r' | b'\n' | 3) {
                keys.feeding = false;
                break;
            }
        }
        let mut rest = &out[..];
        while !rest.is_empty() {
            match nix::unistd::write(&self.master, rest) {
                Ok(n) => rest = &rest[n..],
                Err(nix::errno::Errno::EINTR) => {}
                Err(_) => break,
            }
        }
    }

    /// Reads the real terminal until it hangs up or `to_loop` closes (see [`Keyboard`]).
    fn pump(&self, to_loop: mpsc::UnboundedSender<FromEditor>) {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let mut buf = [0u8; 4096];
        while !to_loop.is_closed() {
            let mut fds = [PollFd::new(self.real.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, PollTimeout::from(50u16)) {
                Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
                Ok(_) => {}
                Err(_) => break,
            }
            let mut keys = self.keys();
            // Under the lock the terminal's mode cannot change: a poll that finds it
            // readable now means a read that does not block.
            let mut fds = [PollFd::new(self.real.as_fd(), PollFlags::POLLIN)];
            let readable = match poll(&mut fds, PollTimeout::ZERO) {
                Ok(n) if n > 0 => fds[0].revents().unwrap_or(PollFlags::empty()),
                _ => continue,
            };
            if !readable.contains(PollFlags::POLLIN) {
                // Hung up: nothing more will come.
                break;
            }
            let n = match nix::unistd::read(&self.real, &mut buf) {
                Ok(n) => n,
                Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => continue,
                Err(_) => break,
            };
            if keys.editing || !keys.running || !self.forward {
                // For the editor, or typed ahead for the next prompt (a cooked line, or the
                // terminal's end-of-file as Ctrl-D).
                if n == 0 && !keys.editing {
                    keys.held.push_back(4);
                }
                keys.held.extend(&buf[..n]);
                self.feed(&mut keys);
            } else if n == 0 {
                let _ = to_loop.send(FromEditor::InputEnd);
            } else {
                let _ = to_loop.send(FromEditor::Input(buf[..n].to_vec()));
            }
        }
        // The terminal is gone: the editor's line is dropped (Ctrl-C) and its next read
        // ends (Ctrl-D on an empty line).
        let mut keys = self.keys();
        keys.held.clear();
        keys.held.extend([3, 4]);
        keys.feeding = keys.editing;
        self.feed(&mut keys);
    }
}

/// While a command runs: passes what the terminal delivers (a line at a time, cooked mode,
/// echoed by the terminal) to the loop until the next prompt arrives, which it returns.
fn forward_input(
    prompts: &std::sync::mpsc::Receiver<String>,
    to_loop: &mpsc::UnboundedSender<FromEditor>,
) -> Result<String, std::sync::mpsc::RecvError> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::sync::mpsc::TryRecvError;
    let stdin = std::io::stdin();
    // An unbuffered handle: a buffered read could keep bytes meant for the next prompt.
    let Ok(mut input) = stdin.as_fd().try_clone_to_owned().map(std::fs::File::from) else {
        return prompts.recv();
    };
    let mut buf = [0u8; 4096];
    loop {
        match prompts.try_recv() {
            Ok(prompt) => return Ok(prompt),
            Err(TryRecvError::Disconnected) => return Err(std::sync::mpsc::RecvError),
            Err(TryRecvError::Empty) => {}
        }
        let mut fds = [PollFd::new(stdin.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(50u16)) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => {}
            Err(_) => return prompts.recv(),
        }
        let readable = fds[0]
            .revents()
            .is_some_and(|r| r.contains(PollFlags::POLLIN));
        if !readable {
            // The terminal hung up: nothing more will come.
            return prompts.recv();
        }
        match input.read(&mut buf) {
            Ok(0) => {
                let _ = to_loop.send(FromEditor::InputEnd);
            }
            Ok(n) => {
                let _ = to_loop.send(FromEditor::Input(buf[..n].to_vec()));
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return prompts.recv(),
        }
    }
}

/// `exit` or `exit N` typed at the prompt: leave with status N (default 0).
fn exit_request(line: &str) -> Option<u8> {
    let mut words = line.split_whitespace();
    if words.next() != Some("exit") {
        return None;
    }
    let code = match words.next() {
        None => 0,
        Some(n) => (n.parse::<i64>().ok()? & 0xff) as u8,
    };
    words.next().is_none().then_some(code)
}

/// Writes session output to stdout as it came, byte for byte.
struct Screen {
    /// stdout is a terminal: a partial last line is ended before the next prompt.
    terminal: bool,
    open_line: bool,
}

impl Screen {
    fn write(&mut self, bytes: &[u8]) {
        if let Some(&last) = bytes.last() {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(bytes).and_then(|_| out.flush());
            self.open_line = last != b'\n';
        }
    }

    /// Before a prompt or a note: on a terminal, a partial line is ended (display only).
    fn end_line(&mut self) {
        if self.open_line && self.terminal {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(b"\n").and_then(|_| out.flush());
        }
        self.open_line = false;
    }

    fn note(&mut self, text: &str) {
        self.end_line();
        eprintln!("shellbox: {text}");
    }
}

/// How a typed command ended.
enum Ran {
    /// Completed with this status, or `None` (the shell was reset, or a call failed).
    Status(Option<i32>),
    /// SIGTERM or SIGHUP (the number) arrived: the session ends.
    Signalled(i32),
}

/// The interactive loop: prompt, run the line, show its output as it comes; Ctrl-C
/// interrupts the running command, Ctrl-D or `exit` leaves.
async fn interactive(
    session: Arc<dyn ShellSession>,
    backend: shellbox::Backend,
    output_limit_bytes: u64,
) -> Result<ExitCode, Failure> {
    let _terminal = TerminalGuard::save();
    let tty = std::io::stdin().is_terminal();
    // Typed input goes to a running command only on a terminal (a piped stdin holds the
    // next commands) and only where the session can take it.
    let forward = tty && session.interactive();
    let (prompts, prompt_rx) = std::sync::mpsc::channel::<String>();
    let (to_loop, mut events) = mpsc::unbounded_channel();
    let keyboard = Keyboard::interpose(forward);
    if let Some(k) = &keyboard {
        let (k, to_loop) = (k.clone(), to_loop.clone());
        std::thread::Builder::new()
            .name("shellbox-keyboard".into())
            .spawn(move || k.pump(to_loop))
            .map_err(|e| Error::io("start the keyboard reader", e))?;
    }
    let editor_keyboard = keyboard.clone();
    std::thread::Builder::new()
        .name("shellbox-editor".into())
        .spawn(move || editor(prompt_rx, to_loop, forward, editor_keyboard))
        .map_err(|e| Error::io("start the line editor", e))?;
    // Installed before the first command: from now on SIGINT (Ctrl-C while a command runs;
    // at the prompt the editor reads Ctrl-C as a key) interrupts instead of ending shellbox.
    let mut sigint =
        signal(SignalKind::interrupt()).map_err(|e| Error::io("install the SIGINT handler", e))?;
    let mut endings = Endings::new();
    let mut screen = Screen {
        terminal: std::io::stdout().is_terminal(),
        open_line: false,
    };
    if tty {
        eprintln!(
            "shellbox: a fresh {backend} machine{}. Ctrl-C interrupts a command; Ctrl-D or \
             `exit` removes the machine.",
            if session.interactive() {
                ""
            } else {
                " (each command runs to completion)"
            }
        );
    }
    let mut last: Option<i32> = Some(0);
    loop {
        screen.end_line();
        let prompt = match last {
            Some(0) => format!("{backend}$ "),
            Some(code) => format!("{backend} [{code}]$ "),
            None => format!("{backend} [-]$ "),
        };
        if prompts.send(prompt).is_err() {
            return Ok(ExitCode::SUCCESS);
        }
        let line = loop {
            tokio::select! {
                event = events.recv() => match event {
                    Some(FromEditor::Line(line)) => break line,
                    Some(FromEditor::End) | None => return Ok(ExitCode::SUCCESS),
                    Some(FromEditor::Failed(message)) => {
                        return Err(Failure { kind: "io", message })
                    }
                    Some(FromEditor::Input(_) | FromEditor::InputEnd | FromEditor::Interrupt) => {}
                },
                // A SIGINT at the prompt comes from outside (kill -INT): nothing to stop.
                _ = sigint.recv() => {}
                signal = endings.next() => return Ok(ExitCode::from((128 + signal) as u8)),
            }
        };
        if let Some(code) = exit_request(&line) {
            return Ok(ExitCode::from(code));
        }
        if line.trim().is_empty() {
            continue;
        }
        if let Some(k) = &keyboard {
            k.set_running(true);
        }
        let ran = run_line(
            &session,
            &line,
            output_limit_bytes,
            &mut events,
            &mut sigint,
            &mut endings,
            &mut screen,
        )
        .await;
        if let Some(k) = &keyboard {
            k.set_running(false);
        }
        match ran {
            Ran::Status(status) => last = status,
            Ran::Signalled(signal) => return Ok(ExitCode::from((128 + signal) as u8)),
        }
    }
}

/// Asks the session to interrupt its command. A session that has no command running yet
/// (Ctrl-C right after Enter, before the `execute` task reached the backend) is asked
/// again [`INTERRUPT_RETRY`] later, as long as the line's call is still out.
async fn try_interrupt(session: &dyn ShellSession, wanted: &mut bool, screen: &mut Screen) {
    match session.interrupt().await {
        Ok(()) => *wanted = false,
        Err(Error::ShellState(_)) => {}
        Err(e) => {
            *wanted = false;
            screen.note(&format!("interrupt: {}", Failure::from(e).message));
        }
    }
}

/// Runs one typed line in the session: `execute`, then `read` while it is running, printing
/// each update's output; SIGINT calls `interrupt`, typed input is `write`n to the command.
async fn run_line(
    session: &Arc<dyn ShellSession>,
    line: &str,
    output_limit_bytes: u64,
    events: &mut mpsc::UnboundedReceiver<FromEditor>,
    sigint: &mut Signal,
    endings: &mut Endings,
    screen: &mut Screen,
) -> Ran {
    let s = session.clone();
    let command = line.to_string();
    // The calls run as tasks of their own, so `interrupt` and `write` are made while a
    // `read` (or the simulator's whole `execute`) is still gathering output.
    let mut call =
        tokio::spawn(async move { s.execute(&command, POLL_WAIT, output_limit_bytes).await });
    let mut truncated = false;
    // Ctrl-C was pressed and the session has not taken the interrupt yet.
    let mut interrupt_wanted = false;
    loop {
        let joined = loop {
            tokio::select! {
                joined = &mut call => break joined,
                _ = sigint.recv() => {
                    interrupt_wanted = true;
                    try_interrupt(&**session, &mut interrupt_wanted, screen).await;
                }
                _ = tokio::time::sleep(INTERRUPT_RETRY), if interrupt_wanted => {
                    try_interrupt(&**session, &mut interrupt_wanted, screen).await;
                }
                event = events.recv() => {
                    let data = match event {
                        Some(FromEditor::Interrupt) => {
                            interrupt_wanted = true;
                            try_interrupt(&**session, &mut interrupt_wanted, screen).await;
                            continue;
                        }
                        Some(FromEditor::Input(data)) => data,
                        // The terminal's EOF character (^D) for the command's terminal.
                        Some(FromEditor::InputEnd) => vec![4],
                        _ => continue,
                    };
                    match session.write(&data).await {
                        Ok(()) | Err(Error::ShellState(_)) => {}
                        Err(e) => screen.note(&format!("write: {}", Failure::from(e).message)),
                    }
                }
                signal = endings.next() => {
                    if signal == SIGQUIT && session.interactive() {
                        // Ctrl-\ while the command runs (the real terminal is cooked then):
                        // what the terminal does, for the command's terminal. The session's
                        // line discipline turns its quit character into SIGQUIT for the
                        // command's foreground group (an interactive shell ignores it), so
                        // `sleep` ends with 131 and the session goes on.
                        match session.write(&[QUIT_CHARACTER]).await {
                            Ok(()) | Err(Error::ShellState(_)) => {}
                            Err(e) => screen.note(&format!("quit: {}", Failure::from(e).message)),
                        }
                        continue;
                    }
                    call.abort();
                    return Ran::Signalled(signal);
                }
            }
        };
        let update: ShellUpdate = match joined {
            Ok(Ok(update)) => update,
            Ok(Err(e)) => {
                screen.note(&Failure::from(e).message);
                return Ran::Status(None);
            }
            Err(e) => {
                screen.note(&format!("the session call failed: {e}"));
                return Ran::Status(None);
            }
        };
        screen.write(&update.output);
        if update.truncated && !truncated {
            truncated = true;
            screen.note(&format!(
                "output was dropped: more than {output_limit_bytes} bytes arrived within one \
                 read (--output-limit)"
            ));
        }
        match update.status {
            ShellStatus::Running => {
                let s = session.clone();
                call = tokio::spawn(async move { s.read(POLL_WAIT, output_limit_bytes).await });
            }
            ShellStatus::Completed => return Ran::Status(update.exit_code),
            ShellStatus::Reset => {
                screen.note(
                    "the shell exited; the next command starts a fresh one in the workdir \
                     (files kept)",
                );
                return Ran::Status(None);
            }
        }
    }
}

/// One request of the `--json` line protocol, as it is written.
#[derive(serde::Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct Request {
    execute: Option<String>,
    read: Option<bool>,
    write: Option<String>,
    write_base64: Option<String>,
    interrupt: Option<bool>,
    wait: Option<f64>,
    output_limit_bytes: Option<u64>,
}

/// A checked `--json` request.
#[derive(Debug, PartialEq)]
enum Op {
    Execute {
        command: String,
        wait: Duration,
        output_limit_bytes: u64,
    },
    Read {
        wait: Duration,
        output_limit_bytes: u64,
    },
    Write(Vec<u8>),
    Interrupt,
}

/// Parses one request line: exactly one of `execute`, `read`, `write`, `write_base64`,
/// `interrupt`; `wait` (seconds; execute's default 120, read's 0) and `output_limit_bytes`
/// only with execute and read.
///
/// # Errors
/// [`Error::InvalidInput`] for an empty (or blank) line, a line that is not such an
/// object, or one whose fields do not fit together.
fn parse_request(line: &str, default_limit: u64) -> Result<Op, Error> {
    if line.trim().is_empty() {
        // Answered like any other bad line: a client that sends one still gets one answer
        // per line, and its answers stay in step with its requests.
        return Err(Error::invalid(
            "an empty line is not a request: a request is one JSON object per line, e.g. \
             {\"execute\": \"ls\"}",
        ));
    }
    let request: Request = serde_json::from_str(line)
        .map_err(|e| Error::invalid(format!("malformed request line: {e}")))?;
    let given = [
        request.execute.is_some(),
        request.read.is_some(),
        request.write.is_some(),
        request.write_base64.is_some(),
        request.interrupt.is_some(),
    ];
    if given.iter().filter(|g| **g).count() != 1 {
        return Err(Error::invalid(
            "a request names exactly one of execute, read, write, write_base64 and interrupt",
        ));
    }
    let wait = |default: Duration| match request.wait {
        Some(seconds) => shellbox::serve::wire::wait_seconds(seconds),
        None => Ok(default),
    };
    let output_limit_bytes = request.output_limit_bytes.unwrap_or(default_limit);
    let only_execute_read = || {
        if request.wait.is_some() || request.output_limit_bytes.is_some() {
            Err(Error::invalid(
                "wait and output_limit_bytes go with execute and read only",
            ))
        } else {
            Ok(())
        }
    };
    let flag = |name: &str, value: Option<bool>| {
        if value == Some(true) {
            Ok(())
        } else {
            Err(Error::invalid(format!("{name} takes true")))
        }
    };
    if let Some(command) = request.execute.clone() {
        return Ok(Op::Execute {
            command,
            wait: wait(DEFAULT_EXECUTE_WAIT)?,
            output_limit_bytes,
        });
    }
    if request.read.is_some() {
        flag("read", request.read)?;
        return Ok(Op::Read {
            wait: wait(Duration::ZERO)?,
            output_limit_bytes,
        });
    }
    only_execute_read()?;
    if let Some(text) = &request.write {
        return Ok(Op::Write(text.clone().into_bytes()));
    }
    if let Some(data) = &request.write_base64 {
        return Ok(Op::Write(
            base64::engine::general_purpose::STANDARD
                .decode(data)
                .map_err(|e| Error::invalid(format!("write_base64 is not base64: {e}")))?,
        ));
    }
    flag("interrupt", request.interrupt)?;
    Ok(Op::Interrupt)
}

/// The answer line of a shell update: the output as text (lossy) and exactly (base64).
fn update_json(update: &ShellUpdate) -> serde_json::Value {
    serde_json::json!({
        "output": String::from_utf8_lossy(&update.output),
        "output_base64": base64::engine::general_purpose::STANDARD.encode(&update.output),
        "status": match update.status {
            ShellStatus::Running => "running",
            ShellStatus::Completed => "completed",
            ShellStatus::Reset => "reset",
        },
        "exit_code": update.exit_code,
        "truncated": update.truncated,
    })
}

/// The answer line of a failed request, shaped as the CLI's other `--json` errors. The
/// message is the error's own, on one line: unlike the CLI's other messages, it keeps field
/// names as they are (`output_limit_bytes` is what a request line spells, not
/// `--output-limit`).
fn error_json(error: Error) -> serde_json::Value {
    let message = error
        .to_string()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    serde_json::json!({"error": {"kind": error.kind(), "message": message}})
}

/// Runs `command` in a session that runs each command to completion (the simulator's),
/// interrupting it once stdin has ended (`input_ended` is true) and `wait` has passed since it
/// started: no `interrupt` request can come any more, so the request's `wait` bounds it.
async fn execute_to_completion(
    session: &dyn ShellSession,
    command: &str,
    wait: Duration,
    output_limit_bytes: u64,
    input_ended: &mut watch::Receiver<bool>,
) -> Result<ShellUpdate, Error> {
    // A wait too long for the clock to represent (`"wait": 1.8e19`) never ends the command.
    let deadline = tokio::time::Instant::now().checked_add(wait);
    let execute = session.execute(command, wait, output_limit_bytes);
    tokio::pin!(execute);
    let bound = async {
        let _ = input_ended.wait_for(|ended| *ended).await;
        match deadline {
            Some(deadline) => tokio::time::sleep_until(deadline).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        // First, so that the command has reached the session before it can be interrupted.
        biased;
        done = &mut execute => done,
        () = bound => {
            // `ShellState` here: the command has just finished; its answer is on its way.
            let _ = session.interrupt().await;
            execute.await
        }
    }
}

/// Carries out one request (`input_ended`: see [`execute_to_completion`]).
async fn perform(
    session: &dyn ShellSession,
    op: Op,
    input_ended: &mut watch::Receiver<bool>,
) -> serde_json::Value {
    let answer = match op {
        Op::Execute {
            command,
            wait,
            output_limit_bytes,
        } if !session.interactive() => {
            execute_to_completion(session, &command, wait, output_limit_bytes, input_ended)
                .await
                .map(|u| update_json(&u))
        }
        Op::Execute {
            command,
            wait,
            output_limit_bytes,
        } => session
            .execute(&command, wait, output_limit_bytes)
            .await
            .map(|u| update_json(&u)),
        Op::Read {
            wait,
            output_limit_bytes,
        } => session
            .read(wait, output_limit_bytes)
            .await
            .map(|u| update_json(&u)),
        Op::Write(data) => session.write(&data).await.map(|()| serde_json::json!({})),
        Op::Interrupt => session.interrupt().await.map(|()| serde_json::json!({})),
    };
    answer.unwrap_or_else(error_json)
}

/// Reads stdin's request lines on a thread of its own (stdin blocks), each bounded by
/// [`MAX_REQUEST_LINE_BYTES`]: `Err` answers an overlong or non-UTF-8 line, and ends the
/// stream after a read failure.
fn read_requests(lines: mpsc::Sender<Result<String, Error>>) {
    use std::io::BufRead;
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    loop {
        let mut line = Vec::new();
        let read = (&mut input)
            .take(MAX_REQUEST_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line);
        let item = match read {
            Ok(0) => return,
            Ok(_) if line.len() > MAX_REQUEST_LINE_BYTES => {
                // Skip the rest of the overlong line.
                loop {
                    let mut rest = Vec::new();
                    match (&mut input)
                        .take(MAX_REQUEST_LINE_BYTES as u64)
                        .read_until(b'\n', &mut rest)
                    {
                        Ok(0) => break,
                        Ok(_) if rest.ends_with(b"\n") => break,
                        Ok(_) => {}
                        Err(_) => break,
                    }
                }
                Err(Error::invalid(format!(
                    "a request line holds at most {} MiB",
                    MAX_REQUEST_LINE_BYTES >> 20
                )))
            }
            Ok(_) => String::from_utf8(line)
                .map_err(|_| Error::invalid("malformed request line: not UTF-8")),
            Err(e) => {
                let _ = lines.blocking_send(Err(Error::io("read stdin", e)));
                return;
            }
        };
        if lines.blocking_send(item).is_err() {
            return;
        }
    }
}

/// The `--json` loop: requests in the order given, one answer line each in the same order.
/// Every request waits for the one before to be answered, except `interrupt`, which acts as
/// soon as the requests before it have started: it stops an `execute` or `read` still
/// gathering output (whose answer still comes first), and the simulator's `execute`, which
/// runs to completion.
async fn json_lines(
    session: Arc<dyn ShellSession>,
    output_limit_bytes: u64,
) -> Result<ExitCode, Failure> {
    let (line_tx, mut lines) = mpsc::channel(MAX_QUEUED_REQUESTS);
    std::thread::Builder::new()
        .name("shellbox-stdin".into())
        .spawn(move || read_requests(line_tx))
        .map_err(|e| Error::io("start the stdin reader", e))?;
    // Requests that wait for their turn, with where their answer goes.
    let (serial_tx, mut serial) =
        mpsc::channel::<(Op, oneshot::Sender<serde_json::Value>)>(MAX_QUEUED_REQUESTS);
    let worker_session = session.clone();
    // How many of the waiting requests were started and carried out, and how many were
    // handed over.
    let done = Arc::new(AtomicU64::new(0));
    let started = Arc::new(AtomicU64::new(0));
    let worker_done = done.clone();
    let worker_started = started.clone();
    let mut dispatched: u64 = 0;
    // True once stdin has ended (or failed).
    let (ended_tx, mut input_ended) = watch::channel(false);
    let worker = tokio::spawn(async move {
        while let Some((op, answer)) = serial.recv().await {
            worker_started.fetch_add(1, Ordering::SeqCst);
            let value = perform(&*worker_session, op, &mut input_ended).await;
            worker_done.fetch_add(1, Ordering::SeqCst);
            let _ = answer.send(value);
        }
    });
    // Answers, printed in request order.
    let (answer_tx, mut answers) =
        mpsc::unbounded_channel::<oneshot::Receiver<serde_json::Value>>();
    let printer = tokio::spawn(async move {
        while let Some(answer) = answers.recv().await {
            if let Ok(value) = answer.await {
                out!("{value}");
            }
        }
    });
    let dispatch = async {
        let mut failed: Option<Error> = None;
        while let Some(line) = lines.recv().await {
            let (tx, rx) = oneshot::channel();
            let _ = answer_tx.send(rx);
            let line = match line {
                Ok(line) => line,
                Err(e @ Error::Io { .. }) => {
                    failed = Some(e);
                    break;
                }
                Err(e) => {
                    let _ = tx.send(error_json(e));
                    continue;
                }
            };
            match parse_request(&line, output_limit_bytes) {
                Err(e) => {
                    let _ = tx.send(error_json(e));
                }
                Ok(Op::Interrupt) => {
                    let session = session.clone();
                    let done = done.clone();
                    let started = started.clone();
                    let before = dispatched;
                    tokio::spawn(async move {
                        // It is for the command of the requests before it: it waits until
                        // the last of them has started (else it would stop an earlier
                        // command still running, and the later one would run on).
                        while started.load(Ordering::SeqCst) < before {
                            tokio::time::sleep(INTERRUPT_RETRY).await;
                        }
                        // While a request before this one is still out, "nothing running"
                        // means its command has not reached the shell yet: ask again.
                        let answer = loop {
                            match session.interrupt().await {
                                Err(Error::ShellState(_))
                                    if done.load(Ordering::SeqCst) < before =>
                                {
                                    tokio::time::sleep(INTERRUPT_RETRY).await
                                }
                                answer => break answer,
                            }
                        };
                        let _ = tx.send(match answer {
                            Ok(()) => serde_json::json!({}),
                            Err(e) => error_json(e),
                        });
                    });
                }
                Ok(op) => {
                    dispatched += 1;
                    if serial_tx.send((op, tx)).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = ended_tx.send(true);
        drop(serial_tx);
        drop(answer_tx);
        failed
    };
    // End of input: the requests already read are answered, each within its wait (the
    // simulator's execute is interrupted when its wait has passed); a command still running
    // after the last answer is interrupted, and the caller closes the machine.
    let (worker_abort, printer_abort) = (worker.abort_handle(), printer.abort_handle());
    let finish = async {
        let failed = dispatch.await;
        let _ = worker.await;
        let _ = printer.await;
        let _ = session.interrupt().await;
        failed
    };
    let mut endings = Endings::new();
    let mut sigint = signal(SignalKind::interrupt()).ok();
    let interrupted = async {
        match &mut sigint {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending().await,
        }
    };
    // Watched until the end, answers still out after end of input included: SIGINT, SIGTERM
    // and SIGHUP stop the running command and end at once (nothing more is printed:
    // unanswered requests stay unanswered); the caller closes the machine and shellbox exits
    // 128 + N, as `shellbox run` does.
    let signal = tokio::select! {
        failed = finish => {
            return match failed {
                Some(e) => Err(e.into()),
                None => Ok(ExitCode::SUCCESS),
            };
        }
        signal = endings.next() => signal,
        _ = interrupted => 2,
    };
    printer_abort.abort();
    worker_abort.abort();
    let _ = session.interrupt().await;
    Ok(ExitCode::from((128 + signal) as u8))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests() {
        assert_eq!(
            parse_request(r#"{"execute": "ls", "wait": 1.5}"#, 7).unwrap(),
            Op::Execute {
                command: "ls".into(),
                wait: Duration::from_millis(1500),
                output_limit_bytes: 7
            }
        );
        assert_eq!(
            parse_request(r#"{"execute": "ls"}"#, 7).unwrap(),
            Op::Execute {
                command: "ls".into(),
                wait: DEFAULT_EXECUTE_WAIT,
                output_limit_bytes: 7
            }
        );
        assert_eq!(
            parse_request(r#"{"read": true, "output_limit_bytes": 3}"#, 7).unwrap(),
            Op::Read {
                wait: Duration::ZERO,
                output_limit_bytes: 3
            }
        );
        assert_eq!(
            parse_request(r#"{"write": "a\u0003"}"#, 7).unwrap(),
            Op::Write(b"a\x03".to_vec())
        );
        assert_eq!(
            parse_request(r#"{"write_base64": "/wA="}"#, 7).unwrap(),
            Op::Write(vec![0xff, 0])
        );
        assert_eq!(
            parse_request(r#"{"interrupt": true}"#, 7).unwrap(),
            Op::Interrupt
        );
        for (bad, says) in [
            ("{", "malformed"),
            ("[1]", "malformed"),
            (r#"{"execute": "ls", "bogus": 1}"#, "unknown field"),
            (r#"{"execute": 3}"#, "malformed"),
            (r#"{}"#, "exactly one"),
            (r#"{"execute": "ls", "read": true}"#, "exactly one"),
            (r#"{"read": false}"#, "takes true"),
            (
                r#"{"interrupt": true, "wait": 1}"#,
                "go with execute and read",
            ),
            (r#"{"execute": "ls", "wait": -1}"#, "wait"),
            (r#"{"write_base64": "!"}"#, "not base64"),
            ("", "empty line"),
            (" \t ", "empty line"),
        ] {
            let err = parse_request(bad, 7).unwrap_err();
            assert!(
                matches!(err, Error::InvalidInput(_)) && err.to_string().contains(says),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn errors_name_the_request_fields() {
        for (line, says) in [
            (
                r#"{"foo": 1}"#,
                "expected one of `execute`, `read`, `write`, `write_base64`, `interrupt`, \
                 `wait`, `output_limit_bytes`",
            ),
            (
                r#"{"execute": "ls", "--output-limit": 2}"#,
                "unknown field `--output-limit`",
            ),
            (
                r#"{"interrupt": true, "output_limit_bytes": 2}"#,
                "wait and output_limit_bytes go with execute and read only",
            ),
        ] {
            let answer = error_json(parse_request(line, 7).unwrap_err());
            let message = answer["error"]["message"].as_str().unwrap();
            assert_eq!(answer["error"]["kind"], "invalid_input", "{line}: {answer}");
            assert!(message.contains(says), "{line}: {message}");
            assert_eq!(
                message.matches("--output-limit").count(),
                usize::from(line.contains("--output-limit")),
                "{line}: {message}"
            );
        }
    }

    #[test]
    fn exit_lines() {
        assert_eq!(exit_request("exit"), Some(0));
        assert_eq!(exit_request("  exit 3 "), Some(3));
        assert_eq!(exit_request("exit 256"), Some(0));
        assert_eq!(exit_request("exit; ls"), None);
        assert_eq!(exit_request("exit x"), None);
        assert_eq!(exit_request("exit 1 2"), None);
        assert_eq!(exit_request("exitcode"), None);
    }
}
