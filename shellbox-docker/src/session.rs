//! The persistent shell session of a container: one attached exec on a terminal.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::container::LogOutput;
use bollard::exec::{ResizeExecOptions, StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use shellbox_core::{async_trait, Error, OutputLimiter, ShellSession, ShellStatus, ShellUpdate};
use shellbox_supervisor::proto::{marker_ends_command, MarkerScanner, Scan};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use crate::machine::Inner;

/// How long the shell may take to start and print its first marker.
const START_BOUND: Duration = Duration::from_secs(30);
/// How long after `interrupt` the shell must be back at its prompt before it is replaced.
pub const INTERRUPT_BOUND: Duration = Duration::from_secs(5);
/// How often a call waiting for output asks the engine whether the shell's exec still runs.
const EXEC_POLL: Duration = Duration::from_millis(500);
/// How often a call waiting for a command that has run this long looks at the shell's
/// process ([`PROBE`]): a program that replaced the shell (`exec sh`) and waits for terminal
/// input will never print a marker.
const PROBE_EVERY: Duration = Duration::from_secs(1);
/// How long one look at the shell's process may take (a busy engine: the look is skipped).
const PROBE_BOUND: Duration = Duration::from_secs(5);
/// Run as the shell's account: `sh -c PROBE sh <pid>`: the shell process's `stat` after its
/// command name, then its `syscall` line.
const PROBE: &str = r#"read -r l < "/proc/$1/stat" || exit 1
echo "${l##*) }"
cat "/proc/$1/syscall" 2>/dev/null"#;
/// The system calls a program waits for terminal input in: `read` of fd 0, or a poll.
#[cfg(target_arch = "x86_64")]
const INPUT_WAITS: (i64, &[i64]) = (0, &[7, 23, 270, 271]);
#[cfg(target_arch = "aarch64")]
const INPUT_WAITS: (i64, &[i64]) = (63, &[72, 73]);
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const INPUT_WAITS: (i64, &[i64]) = (-1, &[]);
/// How long the kill of a session's processes may take.
const KILL_BOUND: Duration = Duration::from_secs(10);
/// The longest input line sent to the terminal.
const LINE_MAX: usize = 1000;

/// Started with `sh -c START sh`: set the terminal up, start an audit session of its own
/// where the kernel lets it (see [`DockerSession`]) and say its number, then become the
/// shell.
const START: &str = "stty -echo -opost -ixon || exit 97
if echo \"$(id -u 2>/dev/null || echo 0)\" > /proc/self/loginuid 2>/dev/null; then
  read -r s < /proc/self/sessionid; printf 'SBAUDIT:%s;\\n' \"$s\"; fi
if command -v bash >/dev/null 2>&1; then exec bash --noprofile --norc --noediting -i; fi
exec sh -i";

/// Run as root: `sh -c SESSION_KILL sh <session id> [<audit session>]`. Kills every process
/// carrying `SHELLBOX_SESSION_ID=<id>`, every process of a terminal session led by one of
/// them and every process of the audit session (`/proc/PID/sessionid`), then checks
/// `/proc` every 50 ms until none is left alive (exit 0) or 5 s pass (exit 1).
pub(crate) const SESSION_KILL: &str = r#"m=$1
a=${2-}
case "$m" in ''|*[!0-9a-f]*) exit 3;; esac
case "$a" in *[!0-9]*) exit 3;; esac
sids=' '
n=0
while :; do
  live=0
  for d in /proc/[0-9]*; do
    q=${d#/proc/}
    [ "$q" = 1 ] || [ "$q" = $$ ] && continue
    l=$(cat "$d/stat" 2>/dev/null) || continue
    [ -n "$l" ] || continue
    r=${l##*) }
    set -- $r
    [ $# -ge 4 ] || continue
    [ "$1" = Z ] || [ "$1" = X ] && continue
    hit=0
    if grep -zqsxF "SHELLBOX_SESSION_ID=$m" "$d/environ" 2>/dev/null; then
      hit=1
      [ "$4" = "$q" ] && sids="$sids$q "
    fi
    if [ -n "$a" ]; then
      as=
      read -r as < "$d/sessionid" 2>/dev/null
      [ "$as" = "$a" ] && hit=1
    fi
    case "$sids" in *" $4 "*) hit=1;; esac
    if [ "$hit" = 1 ]; then kill -KILL "$q" 2>/dev/null; live=1; fi
  done
  [ "$live" = 0 ] && exit 0
  n=$((n+1))
  [ "$n" -ge 100 ] && exit 1
  sleep 0.05
done"#;

type Output = Pin<Box<dyn Stream<Item = std::io::Result<Bytes>> + Send>>;
type Input = Pin<Box<dyn AsyncWrite + Send>>;

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

/// The reading side of the running shell.
struct ShellIo {
    exec_id: String,
    /// The shell's pid in the container and where its program was placed (`startcode` and
    /// `arg_start` of its `stat`), as its first prompt said; an `execve` changes them.
    image: Option<(String, String)>,
    /// When the shell's process is looked at next while a call waits, and how many looks
    /// found another program in its place with no output since.
    next_probe: Instant,
    replaced: u32,
    output: Output,
    scanner: MarkerScanner,
}

/// The persistent shell of a [`DockerMachine`](crate::DockerMachine)
/// ([`Machine::open_shell`](shellbox_core::Machine::open_shell)), interactive
/// (REFERENCE.md section 2), where the machine has no supervisor and the supervisor
/// program's terminal relay cannot run in the container either (its copy refused, as by a
/// read-only root, or the program not runnable there, as on another architecture):
/// elsewhere the session is a
/// [`PtySession`](shellbox_supervisor::session::PtySession), whose relay confirms a
/// command's end from outside the shell. This session takes the marker at its word, with
/// the limits said below.
///
/// # How it works
///
/// [`DockerSession`] runs one exec with a TTY (`Tty: true`, stdin attached, 24×80 through
/// `POST /exec/{id}/resize`) of
/// `stty -echo -opost -ixon; exec bash --noprofile --norc --noediting -i` (or `exec sh -i`
/// where the image has no bash, e.g. busybox's ash), in the machine's workdir, as the image's
/// user, with the container's environment plus `SHELLBOX_SESSION_ID=<random hex>`, which
/// every process of the session inherits.
///
/// - **Terminal**: echo off (what is written to the shell is never output); output
///   processing off (`-opost`: the command's bytes arrive unchanged, `\n` is not turned into
///   `\r\n`); flow control off (`-ixon`: a written `^S` cannot freeze the output). Input is
///   canonical, so the terminal's INTR character (`^C`) raises SIGINT in its foreground
///   process group, and a command reading its input gets whole lines. stdout and stderr are
///   one stream, as on any terminal. bash runs without readline (`--noediting`): readline
///   echoes input itself whatever the terminal says and brings bracketed paste; without it
///   bash reads plain lines, as ash does (busybox's line editing falls back to plain reads
///   when echo is off). No history (`set +o history`, `HISTFILE` unset) and no history
///   expansion (bash's `set +H`: `!!` stays literal), empty `PS2`.
/// - **Completion**: each command gets a sequence number `k`, held in a shell variable
///   named after the nonce (`__shellbox_seq_<8 hex digits>`, so no command changes it by
///   accident). The shell prints, whenever it is back at its prompt, `SB<nonce>:<k>:<$?>;`
///   to `/dev/tty` (so `exec >log 2>&1` does not silence it), where the nonce is 32 random
///   hex digits drawn per session: through a read-only `PROMPT_COMMAND` (a read-only
///   function) in bash (bash keeps a stale prompt after a syntax error in `eval`, its
///   `PROMPT_COMMAND` still runs), through a command substitution in a read-only `PS1` in
///   ash; a command's `PS1=` or `PROMPT_COMMAND=` fails instead. Before it prints, the prompt
///   sets the terminal up again (`stty -echo -opost -ixon icanon`: a command's `stty echo`
///   would show the next command line, and busybox ash edits, and echoes, its line itself
///   when it finds echo on). The host strips the first marker of the current `k` from the
///   output and reports `Completed` with its status (after an interrupt, `k-1` with 130 too:
///   the shell dropped the line it was parsing); markers of other numbers are passed on as
///   the text they are. A command cannot end itself early by printing marker-like text: the
///   nonce is in no output and no file; only a command that deliberately reads the shell's
///   own prompt settings and prints the current marker, or sets the number's variable, can,
///   which only confuses the session it runs in (its own).
/// - **A program in the shell's place**: `exec sh` (or any program the shell `exec`s) prints
///   no marker. While a call waits, once a second the shell's process is looked at (an exec
///   of a small `sh` script as the container's account); a process whose program changed
///   since the first prompt (`startcode`, `arg_start`, `arg_end`: another program, other
///   arguments or another random layout), in the terminal's foreground and waiting for
///   terminal input on two looks with no output between them, is taken for such a program:
///   the session is killed and the call reports `Reset`.
/// - **Sending a command**: one line, `__shellbox_seq_<hex>=k; eval '<command>'`, with `'` written
///   as `'\''`, so the whole command (heredocs, several lines) is one `eval` and a syntax
///   error in it is one failed command with status 2. A command with bytes outside printable
///   ASCII (other than tab and newline) or with a line longer than 1000 bytes (the terminal
///   holds at most 4095 bytes of one input line) is sent as
///   `eval "$(printf '<octal escapes>'\<newline>'...')"` in lines of at most 1000 bytes, so
///   no control character reaches the terminal's line discipline.
/// - **Interrupt**: writes `^C` to the terminal; the line discipline signals the foreground
///   process group (the running job under the shell's job control; the shell itself for a
///   built-in loop), and the shell reports 130. If the prompt has not come back within
///   [`INTERRUPT_BOUND`], the shell and everything of its session are killed and the next
///   `read` is `Reset`.
/// - **Reset**: when the shell exits (`exit`, killed), noticed by the end of the exec's
///   output or by the engine reporting the exec ended (background jobs may hold the terminal
///   open), every process of the session is killed — its terminal session, every process
///   carrying its `SHELLBOX_SESSION_ID`, and every process of its audit session: the shell's
///   start writes its own `/proc/self/loginuid`, which the kernel allows once to a process
///   whose login UID is unset (as under Docker's default), and so gets a session number
///   (`/proc/PID/sessionid`) every process it starts inherits and none can change without
///   `CAP_AUDIT_CONTROL`: `env -u SHELLBOX_SESSION_ID setsid ...` does not escape it. (Where
///   the login UID was already set, e.g. a rootless engine started from a login, only the
///   first two rules apply.) The next `execute` starts a fresh shell in the workdir. Files
///   are the container's and stay.
/// - **Bounds**: nothing is read from the terminal between calls, so a command writing more
///   than the terminal buffers blocks until the next `read`; within a call, bytes past the
///   call's `output_limit_bytes` are read and dropped (`truncated`).
/// - **Close**: the session's processes are killed; closing the machine removes the
///   container with everything in it.
///
/// Requirements on the image: `stty` (busybox and coreutils have it); bash is used when
/// `command -v bash` finds it.
pub struct DockerSession {
    inner: Arc<Inner>,
    /// `SB<nonce>:` — the start of every completion marker of this session.
    prefix: Vec<u8>,
    /// The value of `SHELLBOX_SESSION_ID` the shell's processes carry.
    session_id: String,
    /// The audit session (`/proc/PID/sessionid`) of the current shell, when it could start
    /// one of its own.
    audit_session: Mutex<Option<String>>,
    phase: Mutex<Phase>,
    seq: AtomicU64,
    /// Held by a call while it reads output.
    io: tokio::sync::Mutex<Option<ShellIo>>,
    /// The terminal's input, apart so `write` and `interrupt` do not wait for a `read`.
    input: tokio::sync::Mutex<Option<Input>>,
}

impl std::fmt::Debug for DockerSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerSession")
            .field("container", &self.inner.name)
            .field("phase", &self.phase())
            .finish()
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

impl DockerSession {
    pub(crate) fn new(inner: Arc<Inner>) -> Self {
        let nonce = crate::factory::unique_hex();
        DockerSession {
            inner,
            prefix: format!("SB{nonce}:").into_bytes(),
            session_id: crate::factory::unique_hex(),
            audit_session: Mutex::new(None),
            phase: Mutex::new(Phase::NoShell),
            seq: AtomicU64::new(0),
            io: tokio::sync::Mutex::new(None),
            input: tokio::sync::Mutex::new(None),
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

    pub(crate) fn is_closed(&self) -> bool {
        self.phase() == Phase::Closed
    }

    /// [`Error::Closed`] when its machine is closed; [`Error::ShellState`] saying so when
    /// only the session is (its own close: the machine's `open_shell` gives a new one).
    fn check_open(&self) -> Result<(), Error> {
        if self.inner.closed.load(Ordering::SeqCst) || self.is_closed() {
            Err(self.closed_error())
        } else {
            Ok(())
        }
    }

    /// The error of a call on the closed session (see [`DockerSession::check_open`]).
    fn closed_error(&self) -> Error {
        if self.inner.closed.load(Ordering::SeqCst) {
            Error::Closed
        } else {
            Error::ShellState(
                "this shell session was closed; the machine's open_shell gives a new one".into(),
            )
        }
    }

    fn nonce_text(&self) -> String {
        String::from_utf8_lossy(&self.prefix[2..self.prefix.len() - 1]).into_owned()
    }

    /// The shell variable that holds the running command's number: named after the nonce
    /// (`__shellbox_seq_<its first 8 hex digits>`), so no command sets it by accident.
    fn seq_variable(&self) -> String {
        format!("__shellbox_seq_{}", &self.nonce_text()[..8])
    }

    /// The first line written to a new shell: no history, empty PS2, the completion marker
    /// through a read-only `PROMPT_COMMAND` (bash, with history expansion off: `set +H`, so
    /// `!!` in a command is literal) or a command substitution in a read-only `PS1` (ash),
    /// written to `/dev/tty` after the terminal is set up again (`stty -echo -opost -ixon
    /// icanon`: a command's `stty echo` would show the next command line), sequence 0.
    fn init_line(&self) -> String {
        let nonce = self.nonce_text();
        let seq = self.seq_variable();
        let prompt = format!("__shellbox_prompt_{}", &nonce[..8]);
        let stty = "stty -echo -opost -ixon icanon </dev/tty 2>/dev/null";
        format!(
            "unset HISTFILE PROMPT_COMMAND; set +o history 2>/dev/null; PS2=''; {seq}=0; \
             if [ -n \"${{BASH_VERSION-}}\" ]; then set +H; PS1=''; \
             {prompt}() {{ local s=$?; {stty}; \
             printf \"SB{nonce}:%s:%s;\" \"${{{seq}}}\" \"$s\" >/dev/tty; }}; \
             readonly -f {prompt}; PROMPT_COMMAND={prompt}; \
             readonly PROMPT_COMMAND; \
             else PS1='$(s=$?; {stty}; printf \"SB{nonce}:%s:%s;\" \"${{{seq}}}\" \"$s\" >/dev/tty)'; \
             fi; readonly PS1 PS2; read -r l </proc/$$/stat && printf 'SBIMG:%s %s;' \"$$\" \"${{l##*) }}\"; \
             unset l\n"
        )
    }

    /// Starts a fresh shell and waits for its first marker.
    async fn start(&self, io: &mut Option<ShellIo>) -> Result<(), Error> {
        let inner = &self.inner;
        let workdir = if inner.spec.workdir.is_empty() {
            "/".to_string()
        } else {
            inner.spec.workdir.clone()
        };
        let config = ExecConfig {
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(true),
            env: Some(vec![format!("SHELLBOX_SESSION_ID={}", self.session_id)]),
            cmd: Some(vec![
                "/bin/sh".into(),
                "-c".into(),
                START.into(),
                "sh".into(),
            ]),
            working_dir: Some(workdir),
            ..Default::default()
        };
        let exec = match inner.docker.create_exec(&inner.id, config).await {
            Ok(exec) => exec,
            Err(e) => return Err(inner.start_failure("create session exec", e).await),
        };
        let (output, mut input) = self.attach(&exec.id).await?;
        let resize = ResizeExecOptions {
            height: 24,
            width: 80,
        };
        if let Err(e) = inner.docker.resize_exec(&exec.id, resize).await {
            tracing::debug!(target: "shellbox_docker", "resize of the session terminal failed: {e}");
        }
        input
            .write_all(self.init_line().as_bytes())
            .await
            .map_err(|e| Error::io("write to the session terminal", e))?;
        input
            .flush()
            .await
            .map_err(|e| Error::io("write to the session terminal", e))?;
        let mut shell = ShellIo {
            exec_id: exec.id,
            image: None,
            next_probe: Instant::now(),
            replaced: 0,
            output,
            scanner: MarkerScanner::new(self.prefix.clone()),
        };
        let deadline = Instant::now() + START_BOUND;
        let mut seen = BytesMut::new();
        loop {
            match shell.scanner.scan() {
                Scan::Marker(0, ..) => break,
                Scan::Marker(..) => continue,
                Scan::Output(b) => {
                    if seen.len() < 4096 {
                        seen.extend_from_slice(&b);
                    }
                    continue;
                }
                Scan::NeedMore => {}
            }
            let item = tokio::select! {
                item = shell.output.next() => item,
                _ = tokio::time::sleep_until(deadline) => {
                    self.kill_processes().await;
                    return Err(Error::TimedOut {
                        operation: format!("start a shell session in container {}", inner.name),
                        after: START_BOUND,
                    });
                }
            };
            match item {
                Some(Ok(chunk)) => shell.scanner.push(&chunk),
                Some(Err(e)) => {
                    self.check_open()?;
                    return Err(Error::io("read the session terminal", e));
                }
                None => {
                    self.check_open()?;
                    inner.ensure_running().await?;
                    return Err(Error::unsupported(format!(
                        "the image cannot run a shell session (it needs stty and sh): {}",
                        String::from_utf8_lossy(&seen).trim()
                    )));
                }
            }
        }
        *self.audit_session.lock().unwrap_or_else(|p| p.into_inner()) = audit_session(&seen);
        shell.image = shell_image(&seen);
        *io = Some(shell);
        *self.input.lock().await = Some(Box::pin(input));
        self.set_phase(Phase::Idle);
        Ok(())
    }

    /// Starts the exec attached: through a connection of its own to the engine's address
    /// (an HTTP/1.1 `POST /exec/{id}/start` upgraded to the raw terminal stream), so the
    /// terminal's bytes arrive exactly as written. bollard 0.21's attach decoder guesses the
    /// stream's framing per chunk and takes a chunk beginning with a byte 0, 1 or 2 for a
    /// multiplexing header, which binary output can hit; its stream is used only when the
    /// factory does not know the engine's address
    /// ([`with_client`](crate::DockerMachineFactory::with_client)).
    async fn attach(&self, exec_id: &str) -> Result<(Output, Input), Error> {
        let inner = &self.inner;
        if let Some(endpoint) = inner.endpoint.as_deref() {
            let version = inner.docker.client_version();
            let path = format!(
                "/v{}.{}/exec/{exec_id}/start",
                version.major_version, version.minor_version
            );
            if let Some(socket) = endpoint.strip_prefix("unix://") {
                let stream = tokio::net::UnixStream::connect(socket)
                    .await
                    .map_err(|e| Error::io(format!("connect to {endpoint}"), e))?;
                return raw_attach(stream, &path).await;
            }
            if let Some(address) = endpoint
                .strip_prefix("tcp://")
                .or_else(|| endpoint.strip_prefix("http://"))
            {
                let stream = tokio::net::TcpStream::connect(address.trim_end_matches('/'))
                    .await
                    .map_err(|e| Error::io(format!("connect to {endpoint}"), e))?;
                return raw_attach(stream, &path).await;
            }
        }
        let options = StartExecOptions {
            detach: false,
            tty: true,
            output_capacity: None,
        };
        let started = match inner.docker.start_exec(exec_id, Some(options)).await {
            Ok(started) => started,
            Err(e) => return Err(inner.start_failure("start session exec", e).await),
        };
        let StartExecResults::Attached { output, input } = started else {
            return Err(Error::backend(
                "start session exec",
                "the engine did not attach",
            ));
        };
        let output = output.map(|item| item.map(chunk_bytes).map_err(std::io::Error::other));
        Ok((Box::pin(output), input))
    }

    /// Kills every process of the session (as root, bounded); logs a failure.
    async fn kill_processes(&self) {
        if self.inner.closed.load(Ordering::SeqCst) {
            return;
        }
        let audit = self
            .audit_session
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_default();
        let attempt = tokio::time::timeout(
            KILL_BOUND,
            self.inner
                .root_exec(SESSION_KILL, &[&self.session_id, &audit]),
        )
        .await;
        match attempt {
            Ok(Ok((0, _, _))) => {}
            Ok(Ok((code, out, err))) => {
                tracing::warn!(target: "shellbox_docker", container = %self.inner.name, "killing a shell session's processes failed (exit {code}): {}{}", out.trim(), err.trim())
            }
            Ok(Err(e)) => {
                tracing::warn!(target: "shellbox_docker", container = %self.inner.name, "could not kill a shell session's processes: {e}")
            }
            Err(_) => {
                tracing::warn!(target: "shellbox_docker", container = %self.inner.name, "killing a shell session's processes took more than {KILL_BOUND:?}")
            }
        }
    }

    /// Ends the current shell (everything of its session killed) and reports Reset.
    async fn reset(
        &self,
        io: &mut Option<ShellIo>,
        output: BytesMut,
        limiter: &OutputLimiter,
    ) -> Result<ShellUpdate, Error> {
        *io = None;
        *self.input.lock().await = None;
        self.kill_processes().await;
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
    async fn pump(
        &self,
        io: &mut Option<ShellIo>,
        seq: u64,
        wait: Duration,
        limit: u64,
    ) -> Result<ShellUpdate, Error> {
        let deadline = Instant::now().checked_add(wait);
        let mut limiter = OutputLimiter::new(limit);
        let mut out = BytesMut::new();
        let mut poll = tokio::time::interval_at(Instant::now() + EXEC_POLL, EXEC_POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let Some(shell) = io.as_mut() else {
                return self.reset(io, out, &limiter).await;
            };
            match shell.scanner.scan() {
                Scan::Output(b) => {
                    if let Some(kept) = limiter.admit(b.into()) {
                        out.extend_from_slice(&kept);
                    }
                    continue;
                }
                Scan::Marker(n, status, _)
                    if marker_ends_command(
                        seq,
                        n,
                        status,
                        matches!(
                            self.phase(),
                            Phase::Running {
                                interrupted: Some(_),
                                ..
                            }
                        ),
                    ) =>
                {
                    self.set_phase(Phase::Idle);
                    return Ok(ShellUpdate {
                        output: out.freeze(),
                        status: ShellStatus::Completed,
                        exit_code: Some(status),
                        truncated: limiter.truncated(),
                    });
                }
                // Not this command's end: text (a command printed it), passed on as it came.
                Scan::Marker(_, _, raw) => {
                    if let Some(kept) = limiter.admit(raw.into()) {
                        out.extend_from_slice(&kept);
                    }
                    continue;
                }
                Scan::NeedMore => {}
            }
            let interrupt_deadline = match self.phase() {
                Phase::Running {
                    interrupted: Some(at),
                    ..
                } => Some(at + INTERRUPT_BOUND),
                Phase::Closed => return Err(self.closed_error()),
                _ => None,
            };
            tokio::select! {
                biased;
                item = shell.output.next() => match item {
                    Some(Ok(chunk)) => {
                        shell.replaced = 0;
                        shell.scanner.push(&chunk);
                    }
                    Some(Err(_)) | None => {
                        self.check_open()?;
                        return self.reset(io, out, &limiter).await;
                    }
                },
                _ = tokio::time::sleep_until(shell.next_probe), if shell.image.is_some() => {
                    self.check_open()?;
                    let Some((pid, placed)) = shell.image.clone() else {
                        continue;
                    };
                    let answer = tokio::time::timeout(
                        PROBE_BOUND,
                        crate::machine::exec_collect(
                            &self.inner.docker,
                            &self.inner.id,
                            probe_exec(&pid),
                        ),
                    )
                    .await
                    .ok();
                    // (A look that misses, the program busy for a moment, undoes nothing: the
                    // shell it replaced cannot come back; output since the last look does.)
                    shell.next_probe = Instant::now() + PROBE_EVERY;
                    if matches!(&answer, Some(Ok((0, out, _))) if replaced_and_waiting(&placed, out)) {
                        shell.replaced += 1;
                    }
                    if shell.replaced >= 2 {
                        tracing::debug!(target: "shellbox_docker", container = %self.inner.name, "another program replaced the session's shell and waits for input: replacing it");
                        return self.reset(io, out, &limiter).await;
                    }
                }
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
                    tracing::debug!(target: "shellbox_docker", container = %self.inner.name, "the shell did not come back within {INTERRUPT_BOUND:?} of an interrupt: replacing it");
                    return self.reset(io, out, &limiter).await;
                }
                _ = poll.tick() => {
                    self.check_open()?;
                    let ended = match self.inner.docker.inspect_exec(&shell.exec_id).await {
                        Ok(info) => info.running == Some(false),
                        Err(_) => false,
                    };
                    if ended {
                        // What the shell printed last is in flight: take it, then reset.
                        let until = Instant::now() + Duration::from_millis(200);
                        while let Ok(Some(Ok(chunk))) =
                            tokio::time::timeout_at(until, shell.output.next()).await
                        {
                            shell.scanner.push(&chunk);
                        }
                        loop {
                            match shell.scanner.scan_end() {
                                Scan::Output(b) => {
                                    if let Some(kept) = limiter.admit(b.into()) {
                                        out.extend_from_slice(&kept);
                                    }
                                }
                                Scan::Marker(..) => {}
                                Scan::NeedMore => break,
                            }
                        }
                        return self.reset(io, out, &limiter).await;
                    }
                }
            }
        }
    }

    async fn write_input(&self, data: &[u8]) -> Result<(), Error> {
        let mut input = self.input.lock().await;
        let Some(writer) = input.as_mut() else {
            return Err(idle_error("write to"));
        };
        let written = async {
            writer.write_all(data).await?;
            writer.flush().await
        }
        .await;
        written.map_err(|e| {
            if self.inner.closed.load(Ordering::SeqCst) {
                Error::Closed
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

/// The exec of [`PROBE`] for the shell `pid`, as the container's (and the shell's) account.
fn probe_exec(pid: &str) -> ExecConfig {
    ExecConfig {
        attach_stdin: Some(false),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(false),
        cmd: Some(vec![
            "/bin/sh".into(),
            "-c".into(),
            PROBE.into(),
            "sh".into(),
            pid.into(),
        ]),
        working_dir: Some("/".into()),
        ..Default::default()
    }
}

/// Sends `POST <path>` (start an exec attached, with a TTY) on `stream`, reads the
/// engine's `101 UPGRADED` (or `200 OK`) answer and returns the raw stream's halves.
async fn raw_attach<S>(mut stream: S, path: &str) -> Result<(Output, Input), Error>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let body = r#"{"Detach":false,"Tty":true}"#;
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: docker\r\nUser-Agent: shellbox-docker\r\n\
         Content-Type: application/json\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let failed = |e: std::io::Error| Error::io("start the session exec", e);
    stream.write_all(request.as_bytes()).await.map_err(failed)?;
    stream.flush().await.map_err(failed)?;
    let mut head = Vec::new();
    let end = loop {
        let mut chunk = [0u8; 1024];
        let n = stream.read(&mut chunk).await.map_err(failed)?;
        if n == 0 {
            return Err(Error::backend(
                "start session exec",
                format!(
                    "the engine closed the connection: {}",
                    String::from_utf8_lossy(&head)
                ),
            ));
        }
        head.extend_from_slice(&chunk[..n]);
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        if head.len() > 64 * 1024 {
            return Err(Error::backend(
                "start session exec",
                "the engine's answer has no end of headers",
            ));
        }
    };
    let status_line =
        String::from_utf8_lossy(&head[..head.iter().position(|&b| b == b'\r').unwrap_or(end)])
            .into_owned();
    let code = status_line.split_whitespace().nth(1).unwrap_or("");
    if code != "101" && code != "200" {
        return Err(Error::backend(
            "start session exec",
            format!(
                "the engine answered {status_line}: {}",
                String::from_utf8_lossy(&head[end + 4..])
            ),
        ));
    }
    let rest = Bytes::copy_from_slice(&head[end + 4..]);
    let (reader, writer) = tokio::io::split(stream);
    let output = futures::stream::unfold((reader, rest), |(mut reader, rest)| async move {
        if !rest.is_empty() {
            return Some((Ok(rest), (reader, Bytes::new())));
        }
        let mut buf = vec![0u8; 32 * 1024];
        match reader.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(Bytes::from(buf)), (reader, Bytes::new())))
            }
            Err(e) => Some((Err(e), (reader, Bytes::new()))),
        }
    });
    Ok((Box::pin(output), Box::pin(writer)))
}

/// The audit session number the shell's start reported (`SBAUDIT:<n>;` before its first
/// prompt), if any.
fn audit_session(seen: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(seen);
    let (_, rest) = text.rsplit_once("SBAUDIT:")?;
    let (n, _) = rest.split_once(';')?;
    (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then(|| n.to_string())
}

/// The shell's pid and program placement its first prompt reported (`SBIMG:<pid> <stat
/// after the command name>;`), if any.
fn shell_image(seen: &[u8]) -> Option<(String, String)> {
    let text = String::from_utf8_lossy(seen);
    // The last one: the terminal may have echoed the start line (with the format text)
    // before `stty -echo` took effect.
    let (_, rest) = text.rsplit_once("SBIMG:")?;
    let (line, _) = rest.split_once(';')?;
    let (pid, stat) = line.split_once(' ')?;
    Some((pid.to_string(), placement(stat)?))
}

/// `startcode`, `arg_start` and `arg_end` from `stat` fields after the command name:
/// another program, other arguments or another random layout change them.
fn placement(stat: &str) -> Option<String> {
    let f: Vec<&str> = stat.split_whitespace().collect();
    Some(format!("{} {} {}", f.get(23)?, f.get(45)?, f.get(46)?))
}

/// Whether [`PROBE`]'s answer shows another program in the shell's place, in the
/// terminal's foreground, waiting for terminal input.
fn replaced_and_waiting(placed: &str, answer: &str) -> bool {
    let mut lines = answer.lines();
    let Some(stat) = lines.next() else {
        return false;
    };
    let f: Vec<&str> = stat.split_whitespace().collect();
    let foreground = f.len() > 5 && f[2] == f[5];
    let Some(now) = placement(stat) else {
        return false;
    };
    let call: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
    let nr = call.first().and_then(|n| n.parse::<i64>().ok());
    let waits = match nr {
        Some(n) if n == INPUT_WAITS.0 => call.get(1) == Some(&"0x0"),
        Some(n) => INPUT_WAITS.1.contains(&n),
        None => false,
    };
    now != placed && foreground && waits
}

#[cfg(test)]
#[test]
fn start_reports_are_read_behind_an_echoed_start_line() {
    let seen = b"printf 'SBIMG:%s %s;' \"$$\" x\nSBAUDIT:12;\nSBIMG:7 S 0 7 7 0 7 0 0 0 0 0 0 0 0 0 20 0 1 0 9 9 9 1 4198400 5 6 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 1 2 3 100 106 106 200 0;";
    assert_eq!(audit_session(seen).as_deref(), Some("12"));
    assert_eq!(
        shell_image(seen),
        Some(("7".to_string(), "4198400 100 106".to_string()))
    );
}

fn chunk_bytes(item: LogOutput) -> Bytes {
    match item {
        LogOutput::StdOut { message }
        | LogOutput::StdErr { message }
        | LogOutput::Console { message }
        | LogOutput::StdIn { message } => message,
    }
}

/// The line that runs `command` as command number `seq`, held in the shell variable `var`
/// (see [`DockerSession`]).
pub(crate) fn command_line(command: &str, var: &str, seq: u64) -> String {
    let plain = command
        .bytes()
        .all(|b| (0x20..0x7f).contains(&b) || b == b'\t' || b == b'\n')
        && command.split('\n').all(|l| l.len() <= LINE_MAX - 64);
    if plain {
        return format!("{var}={seq}; eval '{}'\n", command.replace('\'', r"'\''"));
    }
    let mut line = format!("{var}={seq}; eval \"$(printf '");
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
    line
}

#[async_trait]
impl ShellSession for DockerSession {
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
        let mut io = self.io.lock().await;
        self.check_open()?;
        if matches!(self.phase(), Phase::Running { .. }) {
            return Err(running_error());
        }
        if io.is_none() || self.phase() == Phase::NoShell {
            *io = None;
            self.start(&mut io).await?;
        }
        let seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        self.set_phase(Phase::Running {
            seq,
            interrupted: None,
        });
        if let Some(shell) = io.as_mut() {
            shell.next_probe = Instant::now() + PROBE_EVERY;
            shell.replaced = 0;
        }
        if let Err(e) = self
            .write_input(command_line(command, &self.seq_variable(), seq).as_bytes())
            .await
        {
            self.check_open()?;
            // The shell is gone: the next execute starts a fresh one.
            tracing::debug!(target: "shellbox_docker", "writing a command to the session failed: {e}");
            return self
                .reset(&mut io, BytesMut::new(), &OutputLimiter::new(0))
                .await;
        }
        self.pump(&mut io, seq, wait, output_limit_bytes).await
    }

    async fn read(&self, wait: Duration, output_limit_bytes: u64) -> Result<ShellUpdate, Error> {
        self.check_open()?;
        let Phase::Running { seq, .. } = self.phase() else {
            return Err(idle_error("read from"));
        };
        let mut io = self.io.lock().await;
        self.check_open()?;
        let Phase::Running { seq: now, .. } = self.phase() else {
            return Err(idle_error("read from"));
        };
        debug_assert_eq!(seq, now);
        self.pump(&mut io, now, wait, output_limit_bytes).await
    }

    async fn write(&self, data: &[u8]) -> Result<(), Error> {
        self.check_open()?;
        if !matches!(self.phase(), Phase::Running { .. }) {
            return Err(idle_error("write to"));
        }
        self.write_input(data).await
    }

    async fn interrupt(&self) -> Result<(), Error> {
        self.check_open()?;
        {
            let mut phase = self.phase.lock().unwrap_or_else(|p| p.into_inner());
            match &mut *phase {
                Phase::Running { interrupted, .. } => {
                    interrupted.get_or_insert_with(Instant::now);
                }
                _ => return Err(idle_error("interrupt")),
            }
        }
        // The terminal's INTR character: the line discipline signals the foreground group.
        self.write_input(b"\x03").await
    }

    async fn close(&self) -> Result<(), Error> {
        let was = {
            let mut phase = self.phase.lock().unwrap_or_else(|p| p.into_inner());
            std::mem::replace(&mut *phase, Phase::Closed)
        };
        if was == Phase::Closed {
            return Ok(());
        }
        *self.input.lock().await = None;
        if was != Phase::NoShell {
            self.kill_processes().await;
        }
        *self.io.lock().await = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines() {
        assert_eq!(
            command_line("echo 'a'", "__shellbox_seq", 3),
            "__shellbox_seq=3; eval 'echo '\\''a'\\'''\n"
        );
        let l = command_line("printf '\x01%s\\n'", "__shellbox_seq", 4);
        assert_eq!(
            l,
            "__shellbox_seq=4; eval \"$(printf 'printf \\047\\001\\045s\\134n\\047')\"\n"
        );
        let long = "x".repeat(5000);
        let l = command_line(&long, "__shellbox_seq", 5);
        assert!(l.lines().all(|line| line.len() <= LINE_MAX), "{l}");
        assert!(l.lines().count() >= 5);
    }
}
