//! `shellbox-supervisor --pty-relay ROWS COLS PROGRAM [ARG...]`: runs PROGRAM on a new
//! pseudo-terminal of the machine's own `devpts` and relays it over this process's stdio,
//! for persistent shell sessions (the local backend's `ShellSession`).
//!
//! Run as an ordinary command (by a keeper, as the command's account, without
//! capabilities), so the terminal and everything on it are confined as any command is.
//!
//! - The terminal: `ROWS`x`COLS`, echo off, output processing off (`-opost`: bytes pass
//!   unchanged), flow control off (`-ixon`); canonical input and signals (`ISIG`) on.
//!   PROGRAM runs in a new session with the terminal as its controlling terminal and as its
//!   stdin, stdout and stderr (one merged stream).
//! - Input (stdin of this process) is frames ([`proto::pty_frame`]): `PTY_LINE` (a numbered
//!   command line, sent at a confirmed prompt), `PTY_INPUT` (numbered input for the running
//!   command: dropped once its prompt is confirmed, held back while a marker waits to be
//!   confirmed, so it never reaches the shell's prompt read as a command line), `PTY_DATA`
//!   (the set-up line), `PTY_CREDIT` (u64: how many more terminal bytes the host will take),
//!   `PTY_INTERRUPT` (see [`proto::PTY_INTERRUPT`]), `PTY_MARKER` (the completion marker's
//!   prefix). `PTY_DONE` carries the number of the command line it follows.
//! - Output (stdout) is frames too: `PTY_DATA` with the terminal's bytes, never more than the
//!   credit granted apart from what a prompt's confirmation reads (at most 1 MiB, see
//!   below; without credit the terminal is not read, so a program writing more blocks on
//!   it, as on any terminal nobody reads), and `PTY_DONE` when the shell is back
//!   at its prompt. The shell prints a marker `<prefix><k>:<status>;` at each prompt; the
//!   relay takes it out of the output and holds it (and what follows it, up to 64 KiB)
//!   until it sees from outside the shell that the shell really waits at a prompt: the
//!   terminal's foreground process group is the shell's, no written input is unread (the
//!   shell's `rchar` in `/proc/PID/io` has grown by the whole command line), and
//!   `/proc/PID/syscall` shows the shell blocked reading fd 0 (where the kernel offers that
//!   file; without it the first two checks decide), and then reads what the terminal still
//!   holds (the shell wrote its prompt before it waited; a marker found there, behind a
//!   command's copy, replaces the pending one). Then it sends `PTY_DONE`
//!   (k, status) followed by what it held. A marker printed by a command that then goes on
//!   running is never confirmed, so it passes on as output (but not a prompt of the
//!   shell's own that a second one followed: busybox ash prompts again, writing
//!   `Use "exit" to leave shell.`, when a background job's SIGCHLD interrupts its prompt's
//!   read; nor one that came before the shell read the command line; and a command line
//!   that a child of the shell read instead of the shell, a second prompt's typeahead
//!   drain, is written again); the one way left to fake a
//!   prompt is a command that prints the marker and then itself blocks reading the
//!   terminal in the foreground (the shell's `read`), which only stalls its own session.
//!   Checks back off from 50 µs to 10 ms while a marker waits. A marker that comes while
//!   the shell sits at a confirmed prompt with no input since (a prompt for stray input, or
//!   a background job faking the next command's end) is dropped.
//! - An interrupt ([`proto::PTY_INTERRUPT`]) that leaves the shell itself [`deadlocked`]
//!   (busybox ash, signalled inside `malloc`) ends the shell after 50 ms: the session resets
//!   instead of waiting out the host's bound for a shell that can never run again.
//! - Before each command line (the first input after a confirmed prompt) the relay puts
//!   the terminal's settings back and discards the input waiting in it, a partial line
//!   too (typeahead without a newline, which the prompt's drain of whole lines leaves), so
//!   the line runs exactly as sent.
//! - The relay keeps a descriptor of the terminal (not as its controlling terminal) for
//!   those checks, and is not dumpable, so commands cannot read its memory.
//! - This process is a child subreaper: when PROGRAM exits (or stdin ends), every process
//!   left on the session (background jobs, `setsid` and double-fork escapees, which all
//!   reparent here) is SIGKILLed and reaped; then it exits with PROGRAM's status (128+N for
//!   a signal).

use super::proto;
use std::ffi::CString;

#[allow(non_camel_case_types)]
type c_int = i32;

extern "C" {
    fn ioctl(fd: c_int, req: u64, ...) -> c_int;
    fn execv(path: *const i8, argv: *const *const i8) -> c_int;
    fn getpid() -> c_int;
    fn ppoll(fds: *mut PollFd, n: u64, timeout: *const Timespec, sigmask: *const u64) -> c_int;
}

#[repr(C)]
struct Timespec {
    sec: i64,
    nsec: i64,
}

use super::{
    close, dup2, errno, fcntl, fork, kill, open, pipe2, prctl, raw_write_all, read, setsid,
    signal, waitpid, write, PollFd, _exit, EAGAIN, EINTR, F_GETFL, F_SETFL, O_CLOEXEC,
    O_NONBLOCK, O_RDWR, POLLIN, POLLOUT, PR_SET_CHILD_SUBREAPER, PR_SET_DUMPABLE, SIGKILL,
};

const O_NOCTTY: c_int = 0o400;
const TCGETS: u64 = 0x5401;
const TCSETS: u64 = 0x5402;
const TIOCSCTTY: u64 = 0x540E;
const TIOCGPGRP: u64 = 0x540F;
const TIOCSWINSZ: u64 = 0x5414;
const TIOCGPTN: u64 = 0x8004_5430;
const TIOCSPTLCK: u64 = 0x4004_5431;
const TIOCGPTPEER: u64 = 0x5441;
const TIOCINQ: u64 = 0x541B;
const TCFLSH: u64 = 0x540B;
const TCIFLUSH: u64 = 0;
const ECHO: u32 = 0o10;
const ECHOE: u32 = 0o20;
const ECHOK: u32 = 0o40;
const ECHONL: u32 = 0o100;
const OPOST: u32 = 0o1;
const IXON: u32 = 0o2000;
const SIGINT: c_int = 2;
const SIGCHLD: c_int = 17;
const WNOHANG: c_int = 1;

/// The kernel's `struct termios` (`TCGETS`/`TCSETS`).
#[repr(C)]
#[derive(Default, Clone)]
struct Termios {
    iflag: u32,
    oflag: u32,
    cflag: u32,
    lflag: u32,
    line: u8,
    cc: [u8; 19],
}

#[repr(C)]
struct WinSize {
    rows: u16,
    cols: u16,
    xpixel: u16,
    ypixel: u16,
}

/// The write end of the self-pipe SIGCHLD pokes.
static CHLD_W: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

extern "C" fn on_sigchld(_: c_int) {
    let fd = CHLD_W.load(std::sync::atomic::Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: write(2) is async-signal-safe; a full pipe already holds a wake-up.
        unsafe { write(fd, [0u8].as_ptr(), 1) };
    }
}

fn fail(what: &str) -> ! {
    let msg = format!(
        "shellbox-supervisor --pty-relay: {what}: {}\n",
        std::io::Error::last_os_error()
    );
    raw_write_all(2, msg.as_bytes());
    // SAFETY: _exit ends the process.
    unsafe { _exit(125) }
}

/// SIGKILLs this process's children until none is left, reaping them; the status of
/// `main` (when it is among them) is stored in `status`.
fn kill_all(main: c_int, status: &mut Option<c_int>) {
    let me = unsafe { getpid() };
    let path = format!("/proc/self/task/{me}/children");
    for _ in 0..100_000 {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let mut any = false;
        for pid in text.split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
            any = true;
            // SAFETY: kill(2) of our own unreaped child.
            unsafe { kill(pid, SIGKILL) };
        }
        reap(main, status);
        if !any {
            return;
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
}

/// Reaps every child that ended; records `main`'s status.
fn reap(main: c_int, status: &mut Option<c_int>) {
    loop {
        let mut st = 0;
        // SAFETY: waitpid(2) into a local.
        let pid = unsafe { waitpid(-1, &mut st, WNOHANG) };
        if pid <= 0 {
            return;
        }
        if pid == main && status.is_none() {
            *status = Some(st);
        }
    }
}

fn exit_code(st: c_int) -> c_int {
    if st & 0x7f == 0 {
        (st >> 8) & 0xff
    } else {
        128 + (st & 0x7f)
    }
}

/// Writes all of `b` to the terminal master (non-blocking): returns how much was taken.
fn write_some(fd: c_int, b: &[u8]) -> Result<usize, c_int> {
    // SAFETY: writing from a live slice.
    let n = unsafe { write(fd, b.as_ptr(), b.len()) };
    if n >= 0 {
        Ok(n as usize)
    } else {
        Err(errno())
    }
}

pub(crate) fn main() -> ! {
    let args: Vec<CString> = std::env::args_os()
        .skip(2)
        .map(|a| {
            use std::os::unix::ffi::OsStrExt;
            CString::new(a.as_bytes()).unwrap_or_default()
        })
        .collect();
    if args.len() < 3 {
        raw_write_all(2, b"usage: shellbox-supervisor --pty-relay ROWS COLS PROGRAM [ARG...]\n");
        // SAFETY: _exit ends the process.
        unsafe { _exit(2) }
    }
    let dim = |c: &CString| c.to_str().ok().and_then(|s| s.parse::<u16>().ok()).unwrap_or(0);
    let (rows, cols) = (dim(&args[0]), dim(&args[1]));
    let program = &args[2..];
    // SAFETY: plain system calls on fds this function owns, in a single-threaded process.
    unsafe {
        let master = open(c"/dev/ptmx".as_ptr(), O_RDWR | O_NOCTTY | O_CLOEXEC);
        if master < 0 {
            fail("open /dev/ptmx");
        }
        let zero: c_int = 0;
        if ioctl(master, TIOCSPTLCK, &zero as *const c_int) != 0 {
            fail("unlock the terminal");
        }
        let mut slave = ioctl(master, TIOCGPTPEER, (O_RDWR | O_NOCTTY | O_CLOEXEC) as u64);
        if slave < 0 {
            let mut n: u32 = 0;
            if ioctl(master, TIOCGPTN, &mut n as *mut u32) != 0 {
                fail("find the terminal");
            }
            let path = CString::new(format!("/dev/pts/{n}")).unwrap_or_default();
            slave = open(path.as_ptr(), O_RDWR | O_NOCTTY | O_CLOEXEC);
            if slave < 0 {
                fail("open the terminal");
            }
        }
        let mut t = Termios::default();
        if ioctl(slave, TCGETS, &mut t as *mut Termios) != 0 {
            fail("read the terminal's settings");
        }
        t.lflag &= !(ECHO | ECHOE | ECHOK | ECHONL);
        t.oflag &= !OPOST;
        t.iflag &= !IXON;
        if ioctl(slave, TCSETS, &t as *const Termios) != 0 {
            fail("set the terminal up");
        }
        let ws = WinSize {
            rows,
            cols,
            xpixel: 0,
            ypixel: 0,
        };
        ioctl(master, TIOCSWINSZ, &ws as *const WinSize);
        let mut chld = [0 as c_int; 2];
        if pipe2(chld.as_mut_ptr(), O_CLOEXEC | O_NONBLOCK) != 0 {
            fail("pipe");
        }
        CHLD_W.store(chld[1], std::sync::atomic::Ordering::Relaxed);
        signal(SIGCHLD, on_sigchld as extern "C" fn(c_int) as usize);
        prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        let mut argv: Vec<*const i8> = program.iter().map(|a| a.as_ptr()).collect();
        argv.push(std::ptr::null());
        let pid = fork();
        if pid < 0 {
            fail("fork");
        }
        if pid == 0 {
            // The program: a new session whose controlling terminal is the slave, with
            // the default disposition of every signal and none blocked, as a login
            // terminal's shell starts (the relay is a Rust program: std ignores SIGPIPE at
            // start, and an ignored signal survives exec, so the shell and every command it
            // ran ignored it and looped on EPIPE, e.g. `while :; do echo; done | head -1`).
            for sig in 1..=64 {
                super::sys::default_signal(sig);
            }
            super::sys::unblock_signals();
            setsid();
            if ioctl(slave, TIOCSCTTY, 0u64) != 0 {
                fail("make the terminal the controlling terminal");
            }
            for fd in 0..3 {
                dup2(slave, fd);
            }
            if slave > 2 {
                close(slave);
            }
            execv(argv[0], argv.as_ptr());
            fail("exec");
        }
        // The relay keeps its own descriptor of the terminal (not as its controlling
        // terminal) to see how much input waits unread and to flush it on an interrupt.
        let fl = fcntl(master, F_GETFL);
        fcntl(master, F_SETFL, fl | O_NONBLOCK);
        // Nothing of this process is for a command to read (its memory holds the marker).
        prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
        Relay::new(master, slave, pid, t).run(chld[0])
    }
}

/// The system calls a shell waits for its next input line in: `read` (then only from fd
/// 0), or one of the polling calls line editors use.
#[cfg(target_arch = "x86_64")]
const READ_NR: i64 = 0;
#[cfg(target_arch = "x86_64")]
const POLL_NRS: &[i64] = &[7, 23, 270, 271];
#[cfg(target_arch = "aarch64")]
const READ_NR: i64 = 63;
#[cfg(target_arch = "aarch64")]
const POLL_NRS: &[i64] = &[72, 73];
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const READ_NR: i64 = -1;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const POLL_NRS: &[i64] = &[];
/// `futex(2)`'s system call number (-1: no table here).
#[cfg(target_arch = "x86_64")]
const FUTEX_NR: i64 = 202;
#[cfg(target_arch = "aarch64")]
const FUTEX_NR: i64 = 98;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const FUTEX_NR: i64 = -1;
/// How long a shell stays [`deadlocked`] after an interrupt before the relay ends it.
const DEADLOCK_GRACE: std::time::Duration = std::time::Duration::from_millis(50);

/// Whether process `pid` can never run again: it has one thread and waits, with no
/// timeout, on a process-private futex (`FUTEX_WAIT_PRIVATE`), which only another thread
/// of its own could wake.
///
/// busybox ash's SIGINT handler leaves the interrupted code by `longjmp` when no critical
/// section is marked: an interrupt that lands inside `malloc` (which ash calls unmarked,
/// e.g. while it runs a built-in loop) leaves the allocator's lock taken, and the shell's
/// next allocation waits for it forever (seen here in about one interrupt in forty of
/// `while :; do :; done`, with the relay out of the loop: a plain `kill -INT`).
fn deadlocked(pid: c_int) -> bool {
    const FUTEX_WAIT_PRIVATE: &str = "0x80";
    if FUTEX_NR < 0 {
        return false;
    }
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/syscall")) else {
        return false;
    };
    let fields: Vec<&str> = text.split_whitespace().collect();
    let waits = fields.first().and_then(|f| f.parse::<i64>().ok()) == Some(FUTEX_NR)
        && fields.get(2) == Some(&FUTEX_WAIT_PRIVATE)
        && fields.get(4) == Some(&"0x0");
    waits
        && std::fs::read_to_string(format!("/proc/{pid}/status"))
            .is_ok_and(|s| s.lines().any(|l| l.split_whitespace().eq(["Threads:", "1"])))
}

/// What `/proc/PID/syscall` says of a process waiting for terminal input.
#[derive(Debug, PartialEq, Eq)]
enum Wait {
    /// Blocked in a `read` of fd 0 (or a poll); the signature of that call: the syscall
    /// number, its first three arguments and the program counter. The shell's own prompt
    /// always waits in one and the same call, into one buffer; a `read` built-in (or any
    /// other reader) differs in them.
    Input(String),
    /// Running, or blocked in anything else.
    Other,
    /// Cannot be told: an architecture without a table here, a kernel without the file or
    /// refusing it. The foreground and unread-input checks alone then decide.
    Unknown,
}

/// How process `pid` waits (see [`Wait`]).
fn wait_state(pid: c_int) -> Wait {
    if READ_NR < 0 {
        return Wait::Unknown;
    }
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/syscall")) else {
        return Wait::Unknown;
    };
    let fields: Vec<&str> = text.split_whitespace().collect();
    let Some(Ok(nr)) = fields.first().map(|f| f.parse::<i64>()) else {
        return Wait::Other;
    };
    let reading = if nr == READ_NR {
        fields.get(1) == Some(&"0x0")
    } else {
        POLL_NRS.contains(&nr)
    };
    if !reading || fields.len() < 6 {
        return Wait::Other;
    }
    // The stack pointer is left out: bash's `set +o emacs` (and `+o vi` in vi mode) inside
    // `eval` has bash read its next lines from a nested input stream, the same call one
    // level deeper; a reader other than the shell's line read differs in its buffer and
    // size already.
    let mut sig = fields[..4].join(" ");
    sig.push(' ');
    sig.push_str(fields[fields.len() - 1]);
    Wait::Input(sig)
}

/// The CPU time process `pid` has used, in nanoseconds: `/proc/PID/schedstat`'s first
/// field, else `utime + stime` of `/proc/PID/stat` (at the usual 100 ticks a second);
/// `None` when neither can be read.
fn cpu_ns(pid: c_int) -> Option<u64> {
    if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/schedstat")) {
        if let Some(Ok(ns)) = text.split_whitespace().next().map(str::parse::<u64>) {
            return Some(ns);
        }
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    // After the comm: state is field 3, utime 14, stime 15.
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) * 10_000_000)
}

/// How many bytes process `pid` has read with `read(2)` and its kind (`rchar` of
/// `/proc/PID/io`); `None` when the kernel does not tell.
fn bytes_read(pid: c_int) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("rchar:"))
        .and_then(|n| n.trim().parse().ok())
}

/// [`bytes_read`] of the shell's own thread: the reads of children it reaped (which
/// `/proc/PID/io` adds in) are left out (`/proc/PID/task/PID/io`).
fn own_bytes_read(pid: c_int) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/io")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("rchar:"))
        .and_then(|n| n.trim().parse().ok())
}

/// The command line the host sent last and what the shell had read before it came.
struct Line {
    /// The line, to be written again when a second prompt of the shell drops it.
    bytes: Vec<u8>,
    /// [`own_bytes_read`] and [`bytes_read`] of the shell before the line was written.
    own_base: Option<u64>,
    all_base: Option<u64>,
}

impl Line {
    fn new(main: c_int, bytes: &[u8]) -> Self {
        Line {
            bytes: bytes.to_vec(),
            own_base: own_bytes_read(main),
            all_base: bytes_read(main),
        }
    }

    /// Whether the shell itself has read the whole line (`None`: the kernel does not
    /// tell).
    fn read_by_shell(&self, main: c_int) -> Option<bool> {
        let now = own_bytes_read(main)?;
        Some(now >= self.own_base? + self.bytes.len() as u64)
    }

    /// Whether the shell or a child it reaped has read as much as the line.
    fn read_by_any(&self, main: c_int) -> Option<bool> {
        let now = bytes_read(main)?;
        Some(now >= self.all_base? + self.bytes.len() as u64)
    }
}

/// What [`Relay::at_prompt`] found.
#[derive(Debug, PartialEq, Eq)]
enum Prompt {
    /// The shell waits at its prompt, having read the command line.
    Yes,
    /// Not (yet).
    No,
    /// The shell waits at its prompt, but the command line was read by one of its
    /// children, not by the shell: a second prompt's typeahead drain took it (busybox ash
    /// prompts again when a SIGCHLD interrupts its prompt's read, and its `PS1` drains in a
    /// command substitution). The line must be written again.
    LineTaken,
}

/// What program process `pid` runs: its `/proc/PID/exe` and where its code and its
/// arguments were placed (`startcode`, `arg_start`, `arg_end` of `/proc/PID/stat`), which an
/// `execve` changes even for the same program (other arguments, or another random layout).
fn image(pid: c_int) -> Option<String> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the comm, field 3 (state) is index 0: startcode is field 26, arg_start 48,
    // arg_end 49.
    Some(format!(
        "{} {} {} {}",
        exe.display(),
        fields.get(23)?,
        fields.get(45).unwrap_or(&""),
        fields.get(46).unwrap_or(&"")
    ))
}

/// The processes of process group `group` (from `/proc`).
fn group_members(group: c_int) -> Vec<c_int> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut members = Vec::new();
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<c_int>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp ...: the comm may hold spaces and parentheses.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next();
        let pgrp = fields.nth(1).and_then(|p| p.parse::<c_int>().ok());
        if pgrp == Some(group) && state != Some("Z") && state != Some("X") {
            members.push(pid);
        }
    }
    members
}

/// The members of group `group` that run their own program (not a forked copy of the shell
/// `main`, whose `/proc/PID/exe` is the shell's). Unreadable members count as such.
fn execed_members(group: c_int, main: c_int) -> Vec<c_int> {
    let shell = std::fs::read_link(format!("/proc/{main}/exe")).ok();
    group_members(group)
        .into_iter()
        .filter(|&pid| {
            pid != main
                && (shell.is_none()
                    || std::fs::read_link(format!("/proc/{pid}/exe")).ok() != shell)
        })
        .collect()
}

/// Whether group `group` has members not in `done` that run their own program, and ones
/// that are still copies of the shell `main`.
fn unsignalled_members(group: c_int, main: c_int, done: &[c_int]) -> (bool, bool) {
    let execed = execed_members(group, main);
    let members = group_members(group);
    let new_execed = execed.iter().any(|p| !done.contains(p));
    let copies = members.iter().any(|p| *p != main && !execed.contains(p));
    (new_execed, copies)
}

/// A completion marker seen in the output, not yet confirmed by the shell's state.
struct Pending {
    status: i32,
    raw: Vec<u8>,
    /// It came after the host's command line was written and before the shell read it: a
    /// prompt of the shell's own (busybox ash prompts again when a SIGCHLD interrupts its
    /// prompt's read) or a background job's, never the command's end nor its text.
    early: bool,
    /// It came right after [`ASH_REPROMPT`]: a second prompt of busybox ash (which may be
    /// the one to confirm), not a command's text.
    reprompt: bool,
    /// Output that came after it, held until it is confirmed (then it follows
    /// [`proto::PTY_DONE`]) or found to be text (then it follows `raw` as output).
    held: Vec<u8>,
    /// The shell was seen waiting at its prompt behind it, its confirmation held back only
    /// because host input written around it was not yet read ([`Relay::typed_unsettled`]):
    /// a marker after it is the prompt after a line the shell read from that input, and
    /// ends the command with this marker's status, not the stray line's.
    prompt_seen: bool,
    /// A check found a job of the command in the foreground behind it, or the shell blocked
    /// reading the terminal in another call than its prompt's (a `read` built-in): it is a
    /// command's text (the shell prompts only once its job is done, and in its own call), so
    /// host input held back for the command may be written.
    command_seen: bool,
    /// When it was seen.
    seen: std::time::Instant,
    /// When the next check of the shell's state is due, and the wait after that one.
    next_check: std::time::Instant,
    backoff: std::time::Duration,
}

/// What busybox ash writes when its prompt's read fails (a SIGCHLD interrupting it) with
/// `ignoreeof` set, before it prompts again.
const ASH_REPROMPT: &[u8] = b"\nUse \"exit\" to leave shell.\n";
/// How much of the text since the last marker is kept to find [`ASH_REPROMPT`] in.
const RECENT_MAX: usize = 256;

/// Whether `hay` holds `needle`.
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Output held behind an unconfirmed marker before the relay stops reading the terminal
/// until the marker is confirmed or found to be text (a writer then blocks, as on any
/// terminal nobody reads).
const HELD_MAX: usize = 64 * 1024;
/// How many terminal bytes a marker's confirmation reads at most to pass everything the
/// shell wrote before it was seen at its prompt: more than the kernel queues for a terminal
/// writer before blocking it (640 KiB of flip buffers and the 4 KiB line discipline
/// buffer, Linux's `TTYB_DEFAULT_MEM_LIMIT` and `N_TTY_BUF_SIZE`).
const DRAIN_MAX: usize = 1 << 20;
/// How long the shell must stay in one polling wait at its first prompt before the relay
/// takes it for the prompt's wait (a `read` of fd 0 is taken at once): the prompt's
/// typeahead drain waits up to 50 ms in a `pselect6` first.
const LEARN_POLL_GRACE: std::time::Duration = std::time::Duration::from_millis(300);
/// How long an unconfirmed marker holds back an interrupt (the shell may be at its prompt).
const PENDING_GRACE: std::time::Duration = std::time::Duration::from_millis(20);
/// How long after writing input the relay takes a shell that waits for input with none
/// queued to have read it (the terminal hands written bytes on asynchronously).
const SETTLE: std::time::Duration = std::time::Duration::from_millis(5);
/// How much CPU the shell uses after its command line was written before the relay takes
/// it, still in the foreground, for a shell running a built-in: reading, parsing and
/// forking a job take far less.
const BUILT_IN_CPU_NS: u64 = 3_000_000;
/// How long the shell stays in the foreground, not reading the terminal, after its
/// command line was written, before the relay takes it for a shell running a built-in
/// that waits (`wait`) rather than computes.
const BUILT_IN_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// How long the shell may wait for input at its prompt, its command line read, with no
/// marker come (a command cleared or redirected the shell's prompt machinery), or how long
/// a program that replaced the shell (`exec sh`) may wait for terminal input, before the
/// relay ends it (the session resets rather than waiting for a marker that cannot come).
const LOST_GRACE: std::time::Duration = std::time::Duration::from_millis(100);
/// The longest pause between checks for a lost marker while a command runs.
const LOST_CHECK_MAX: std::time::Duration = std::time::Duration::from_millis(50);
/// The first pause before a check for a lost marker after a command line was written.
const LOST_CHECK_FIRST: std::time::Duration = std::time::Duration::from_millis(2);

/// An interrupt the host asked for, not yet resolved by the shell's prompt.
struct Interrupt {
    /// The process group signalled last (0: none yet) and when.
    signalled: c_int,
    sent_at: std::time::Instant,
    /// The members of that group that were signalled after their exec.
    done: Vec<c_int>,
    /// Since when the shell, signalled itself, has been seen [`deadlocked`].
    deadlocked_since: Option<std::time::Instant>,
}

/// The relay's state (see the module docs).
struct Relay {
    master: c_int,
    slave: c_int,
    main: c_int,
    credit: u64,
    input: Vec<u8>,
    frames: Vec<u8>,
    scanner: Option<proto::MarkerScanner>,
    pending: Option<Pending>,
    /// How many markers the output has held so far.
    markers: u64,
    /// The shell is at its prompt: a marker was confirmed and no input came since.
    idle: bool,
    last_write: std::time::Instant,
    /// The shell's CPU time ([`cpu_ns`]) when the last input was written.
    cpu_at_write: Option<u64>,
    /// The current command line: a prompt counts only once the shell has read it.
    line_read: Option<Line>,
    /// The number of the current command line ([`proto::PTY_LINE`]; 0: none yet, the
    /// session's set-up line).
    line_seq: u64,
    /// Host input for the running command ([`proto::PTY_INPUT`]) not yet written: written
    /// only after the command line (`input`) and never while a marker waits to be
    /// confirmed; dropped when the prompt is confirmed.
    typed: Vec<u8>,
    /// Host input bytes written to the terminal since the command line, and when the last
    /// were written.
    typed_written: u64,
    typed_at: Option<std::time::Instant>,
    /// The last text since the last marker (at most [`RECENT_MAX`] bytes), and whether
    /// [`ASH_REPROMPT`] was in it.
    recent: Vec<u8>,
    reprompted: bool,
    interrupt: Option<Interrupt>,
    /// Since when an interrupt has seen the shell reading the terminal, uninterrupted.
    reading_since: Option<std::time::Instant>,
    /// How the shell waits at its prompt, learned at the first one ([`Relay::at_prompt`]).
    prompt_signature: Option<String>,
    /// A polling wait seen at the first prompt, and since when (see [`LEARN_POLL_GRACE`]).
    learning: Option<(String, std::time::Instant)>,
    /// The shell's program ([`image`]), learned with the prompt's signature.
    shell_image: Option<String>,
    /// The terminal's settings as the relay made them, put back before each command line
    /// (a command's `stty echo` would show the next line; `stty opost` would turn its `\n`
    /// into `\r\n`).
    settings: Termios,
    /// Since when the shell has been seen waiting for input with no marker to come
    /// ([`Relay::check_lost`]), when the next check is due and the pause after it.
    lost_since: Option<std::time::Instant>,
    next_lost_check: std::time::Instant,
    lost_backoff: std::time::Duration,
    /// The debug log is on ([`proto::PTY_DEBUG`]), since when the relay runs, and the last
    /// prompt check logged (only changes are).
    debug: bool,
    started: std::time::Instant,
    last_check: String,
}

impl Relay {
    fn new(master: c_int, slave: c_int, main: c_int, settings: Termios) -> Self {
        Relay {
            master,
            slave,
            main,
            credit: 0,
            input: Vec::new(),
            frames: Vec::new(),
            scanner: None,
            pending: None,
            markers: 0,
            idle: false,
            last_write: std::time::Instant::now(),
            cpu_at_write: None,
            line_read: None,
            line_seq: 0,
            typed: Vec::new(),
            typed_written: 0,
            typed_at: None,
            recent: Vec::new(),
            reprompted: false,
            interrupt: None,
            reading_since: None,
            prompt_signature: None,
            learning: None,
            shell_image: None,
            settings,
            lost_since: None,
            next_lost_check: std::time::Instant::now(),
            lost_backoff: LOST_CHECK_FIRST,
            debug: false,
            started: std::time::Instant::now(),
            last_check: String::new(),
        }
    }

    /// One line of the debug log ([`proto::PTY_LOG`]), when it is on.
    fn log(&self, what: impl FnOnce() -> String) {
        if self.debug {
            let line = format!("{} {}", self.started.elapsed().as_micros(), what());
            raw_write_all(1, &proto::pty_frame(proto::PTY_LOG, line.as_bytes()));
        }
    }

    /// Logs the state a prompt check saw (`outcome`), when it differs from the last one.
    fn log_check(&mut self, outcome: &str) {
        if !self.debug {
            return;
        }
        let line = self.line_read.as_ref();
        let state = format!(
            "check {outcome}: fg={} main={} inq={} input={} typed={} line_seq={} \
             read_by_shell={:?} read_by_any={:?} wait={:?}",
            self.foreground(),
            self.main,
            self.unread_input(),
            self.input.len(),
            self.typed.len(),
            self.line_seq,
            line.and_then(|l| l.read_by_shell(self.main)),
            line.and_then(|l| l.read_by_any(self.main)),
            wait_state(self.main),
        );
        if state != self.last_check {
            self.log(|| state.clone());
            self.last_check = state;
        }
    }

    fn emit(kind: u8, payload: &[u8]) {
        if kind == proto::PTY_DATA && payload.is_empty() {
            return;
        }
        raw_write_all(1, &proto::pty_frame(kind, payload));
    }

    /// Output that is not a marker: behind a pending marker it is held.
    fn text(&mut self, b: Vec<u8>) {
        // The tail of the text since the last marker, to tell a marker that busybox ash's
        // second prompt printed ([`ASH_REPROMPT`] before it).
        self.recent.extend_from_slice(&b);
        if self.recent.len() > RECENT_MAX {
            let cut = self.recent.len() - RECENT_MAX;
            self.recent.drain(..cut);
        }
        if contains(&self.recent, ASH_REPROMPT) {
            self.reprompted = true;
        }
        match &mut self.pending {
            Some(p) => p.held.extend_from_slice(&b),
            None => Self::emit(proto::PTY_DATA, &b),
        }
    }

    /// Whether a pending marker holds [`HELD_MAX`] bytes behind it already.
    fn holding_full(&self) -> bool {
        self.pending.as_ref().is_some_and(|p| p.held.len() >= HELD_MAX)
    }

    /// A newer marker came: the pending one was the command's text (out it goes, with what
    /// followed it), unless it is known to be a prompt of the shell's own that a second
    /// prompt followed before it was confirmed: an [`Pending::early`] or
    /// [`Pending::reprompt`] one, or one followed by [`ASH_REPROMPT`] (busybox ash prompts
    /// again when a background job's SIGCHLD interrupts its prompt's read, taking it for
    /// end of input). Those are dropped, nonce and all; what followed them is output.
    ///
    /// Returns the status of a dropped marker the shell was seen waiting behind
    /// ([`Pending::prompt_seen`]): it was the command's prompt, and the newer marker is the
    /// prompt after a stray line the shell read there.
    fn drop_pending(&mut self) -> Option<i32> {
        let p = self.pending.take()?;
        if p.prompt_seen {
            Self::emit(proto::PTY_DATA, &p.held);
            return Some(p.status);
        }
        {
            if !p.early && !p.reprompt && !p.held.starts_with(ASH_REPROMPT) {
                // (A marker the command printed.)
                Self::emit(proto::PTY_DATA, &p.raw);
            }
            Self::emit(proto::PTY_DATA, &p.held);
        }
        None
    }

    /// Terminal bytes read from the master.
    fn output(&mut self, b: &[u8], end: bool) {
        let Some(mut scanner) = self.scanner.take() else {
            Self::emit(proto::PTY_DATA, b);
            return;
        };
        scanner.push(b);
        loop {
            let scan = if end {
                scanner.scan_end()
            } else {
                scanner.scan()
            };
            match scan {
                proto::Scan::Output(b) => self.text(b),
                proto::Scan::Marker(_, status, raw) => {
                    let carried = self.drop_pending();
                    let status = carried.unwrap_or(status);
                    self.markers += 1;
                    let early = !self.idle
                        && self
                            .line_read
                            .as_ref()
                            .is_some_and(|l| l.read_by_shell(self.main) == Some(false));
                    let reprompt = std::mem::take(&mut self.reprompted);
                    self.log(|| {
                        format!(
                            "marker status={status} early={early} reprompt={reprompt} \
                             idle={} carried={carried:?}",
                            self.idle
                        )
                    });
                    self.recent.clear();
                    self.pending = Some(Pending {
                        status,
                        raw,
                        early,
                        reprompt,
                        held: Vec::new(),
                        prompt_seen: false,
                        command_seen: false,
                        seen: std::time::Instant::now(),
                        next_check: std::time::Instant::now(),
                        backoff: std::time::Duration::from_micros(50),
                    });
                }
                proto::Scan::NeedMore => break,
            }
        }
        self.scanner = Some(scanner);
    }

    fn foreground(&self) -> c_int {
        let mut pgrp: c_int = 0;
        // SAFETY: ioctl into a local.
        if unsafe { ioctl(self.master, TIOCGPGRP, &mut pgrp as *mut c_int) } == 0 {
            pgrp
        } else {
            0
        }
    }

    fn unread_input(&self) -> c_int {
        let mut n: c_int = 0;
        // SAFETY: ioctl into a local.
        if unsafe { ioctl(self.slave, TIOCINQ, &mut n as *mut c_int) } == 0 {
            n
        } else {
            0
        }
    }

    /// The shell waits at a prompt: it is in the foreground, blocked reading the terminal,
    /// with nothing written to it unread.
    ///
    /// The first prompt (after the session's own set-up line, before any command) teaches
    /// the relay the signature of the shell's prompt read ([`Wait::Input`]); every later
    /// prompt must wait in that same call, so a command that prints the marker and then
    /// blocks in a `read` of the terminal is not taken for the prompt.
    ///
    /// The command line must have been read by the shell itself: when one of its children
    /// read as much instead ([`Prompt::LineTaken`]), a prompt of the shell's own took it.
    fn at_prompt(&mut self) -> Prompt {
        if !self.input.is_empty() || self.foreground() != self.main || self.unread_input() != 0
        {
            return Prompt::No;
        }
        let mut taken = false;
        if let Some(line) = &self.line_read {
            // The line may still be on its way through the terminal, the shell blocked in
            // the read of the prompt before it.
            match line.read_by_shell(self.main) {
                Some(true) => {}
                Some(false) if line.read_by_any(self.main) == Some(true) => taken = true,
                Some(false) => return Prompt::No,
                None if line.read_by_any(self.main) == Some(false) => return Prompt::No,
                None => {}
            }
        }
        match wait_state(self.main) {
            Wait::Other => Prompt::No,
            Wait::Unknown if taken => Prompt::No,
            Wait::Unknown => Prompt::Yes,
            Wait::Input(sig) => match &self.prompt_signature {
                Some(known) if *known == sig && taken => Prompt::LineTaken,
                Some(known) if *known == sig => Prompt::Yes,
                Some(_) => Prompt::No,
                None => {
                    // The first prompt teaches the signature. A wait in a polling call is
                    // taken only once it has stayed for [`LEARN_POLL_GRACE`]: the prompt's
                    // typeahead drain (`read -t 0.05`, a `pselect6` of fd 0) waits in one
                    // before the prompt's own `read`, and a signature learned there made
                    // every later prompt unconfirmable (the session hung at its first
                    // command: the Podman flake of `session_plumbing_changes`).
                    let polling = sig
                        .split(' ')
                        .next()
                        .and_then(|nr| nr.parse::<i64>().ok())
                        .is_some_and(|nr| POLL_NRS.contains(&nr));
                    if polling {
                        let now = std::time::Instant::now();
                        match &self.learning {
                            Some((seen, since)) if *seen == sig => {
                                if now.duration_since(*since) < LEARN_POLL_GRACE {
                                    return Prompt::No;
                                }
                            }
                            _ => {
                                self.learning = Some((sig, now));
                                return Prompt::No;
                            }
                        }
                    }
                    self.learning = None;
                    self.log(|| format!("learned the prompt's wait: {sig}"));
                    self.prompt_signature = Some(sig);
                    self.shell_image = image(self.main);
                    Prompt::Yes
                }
            },
        }
    }

    /// Whether [`Relay::check_lost`] has anything to watch: a command line was sent, no
    /// marker waits, and the shell's prompt is known.
    fn lost_checks_armed(&self) -> bool {
        !self.idle
            && self.pending.is_none()
            && self.input.is_empty()
            && self.prompt_signature.is_some()
    }

    /// Whether the shell waits for input with no marker to come: in the foreground, its
    /// command line read, nothing unread, blocked reading the terminal either in its own
    /// prompt's call ([`Wait::Input`] with the learned signature: it printed no marker, so
    /// a command cleared or redirected its prompt machinery) or as another program that
    /// replaced it (`exec sh`: [`image`] changed).
    fn waits_without_marker(&self) -> bool {
        if self.foreground() != self.main || self.unread_input() != 0 {
            return false;
        }
        if let Some(line) = &self.line_read {
            if line.read_by_any(self.main) != Some(true) {
                return false;
            }
        }
        let Wait::Input(sig) = wait_state(self.main) else {
            return false;
        };
        self.prompt_signature.as_ref() == Some(&sig) || image(self.main) != self.shell_image
    }

    /// Ends a shell that waits for input with no marker to come
    /// ([`Relay::waits_without_marker`], for [`LOST_GRACE`], the terminal read first: a
    /// marker found there is confirmed as usual): the session resets instead of hanging.
    fn check_lost(&mut self) {
        if !self.lost_checks_armed() {
            self.lost_since = None;
            return;
        }
        let now = std::time::Instant::now();
        if now < self.next_lost_check {
            return;
        }
        self.next_lost_check = now + self.lost_backoff;
        self.lost_backoff = (self.lost_backoff * 2).min(LOST_CHECK_MAX);
        if !self.waits_without_marker() {
            self.lost_since = None;
            return;
        }
        // What the shell wrote before it waited may still be in the terminal (no credit).
        self.drain_for_marker();
        if self.pending.is_some() {
            self.lost_since = None;
            return;
        }
        if self.at_prompt() == Prompt::LineTaken {
            // Its marker came while the shell sat at its confirmed prompt (and was dropped),
            // the line right after it.
            self.retake_line();
            self.lost_since = None;
            return;
        }
        let since = *self.lost_since.get_or_insert(now);
        if now.duration_since(since) >= LOST_GRACE {
            self.log(|| "lost: the shell waits with no marker: killed".into());
            // SAFETY: kill(2) of the shell, our own child.
            unsafe { kill(self.main, SIGKILL) };
        }
    }

    /// Reads what the terminal holds (up to [`DRAIN_MAX`], past the credit) until a marker
    /// comes or it is empty.
    fn drain_for_marker(&mut self) {
        let mut buf = vec![0u8; proto::CHUNK_BYTES];
        let mut total = 0usize;
        while total < DRAIN_MAX && self.pending.is_none() {
            // SAFETY: reading into a live buffer.
            let n = unsafe { read(self.master, buf.as_mut_ptr(), buf.len()) };
            if n < 0 && errno() == EINTR {
                continue;
            }
            if n <= 0 {
                return;
            }
            let n = n as usize;
            total += n;
            self.credit = self.credit.saturating_sub(n as u64);
            self.output(&buf[..n], false);
        }
    }

    /// A second prompt of the shell took the command line as typeahead
    /// ([`Prompt::LineTaken`]): its marker (if pending) is dropped and the line is written
    /// again.
    fn retake_line(&mut self) {
        self.log(|| "line taken by a child: written again".into());
        if let Some(p) = self.pending.take() {
            Self::emit(proto::PTY_DATA, &p.held);
        }
        if let Some(line) = self.line_read.take() {
            self.line_read = Some(Line::new(self.main, &line.bytes));
            self.input.extend_from_slice(&line.bytes);
        }
    }

    /// Confirms a pending marker when its check is due and the shell is at its prompt.
    fn check_pending(&mut self) {
        let now = std::time::Instant::now();
        if self.idle {
            // The shell's prompt was confirmed and no input came since: this marker belongs
            // to no command the host sent. Either the shell prompted again for stray input
            // (a line written to a command that ended without reading it) or a background
            // job printed it to fake the next command's end. It is dropped, as the host
            // drops a prompt for stray input; what followed it stays output.
            if let Some(p) = self.pending.take() {
                Self::emit(proto::PTY_DATA, &p.held);
            }
            return;
        }
        let Some(p) = &mut self.pending else {
            return;
        };
        if now < p.next_check {
            return;
        }
        p.next_check = now + p.backoff;
        p.backoff = (p.backoff * 2).min(std::time::Duration::from_millis(10));
        if p.early
            && self
                .line_read
                .as_ref()
                .is_some_and(|l| l.read_by_shell(self.main) == Some(true))
        {
            // The shell has read the line after this marker: it is not the line's prompt.
            self.drop_pending();
            return;
        }
        let prompt = self.at_prompt();
        self.log_check(&format!("{prompt:?}"));
        match prompt {
            Prompt::Yes => {}
            Prompt::No => {
                let reading = || match wait_state(self.main) {
                    Wait::Input(sig) => self.prompt_signature.as_ref() != Some(&sig),
                    _ => false,
                };
                if self.foreground() != self.main || (!self.typed.is_empty() && reading()) {
                    // A job of the command runs, or the shell reads the terminal for the
                    // command (a `read` built-in after a printed marker): the marker was
                    // the command's text, not the prompt; the input held back for the
                    // command may go to it.
                    if let Some(p) = &mut self.pending {
                        p.prompt_seen = false;
                        p.command_seen = true;
                    }
                }
                return;
            }
            Prompt::LineTaken => {
                self.retake_line();
                return;
            }
        }
        if self.typed_unsettled() {
            // The shell waits at its prompt, but host input written around its marker may
            // still be on its way to it: should the prompt's read take it as a line, the
            // shell runs it and prompts again, and that next prompt ends the command
            // (with this marker's status).
            if let Some(p) = &mut self.pending {
                p.prompt_seen = true;
            }
            return;
        }
        // The shell waits at a prompt now, so it has written that prompt's marker; but the
        // terminal may still hold it unread, behind the pending one (a command printed the
        // real marker, then ended, and the shell printed its own). Everything written before
        // now is read and scanned first: a marker in it replaces the pending one.
        if !self.drain_written() {
            return;
        }
        let Some(p) = self.pending.take() else {
            return;
        };
        // Numbered by the command line it follows (the marker's own number is the
        // shell's, which a command can change).
        let mut done = self.line_seq.to_le_bytes().to_vec();
        done.extend_from_slice(&p.status.to_le_bytes());
        self.log(|| format!("done seq={} status={}", self.line_seq, p.status));
        Self::emit(proto::PTY_DONE, &done);
        Self::emit(proto::PTY_DATA, &p.held);
        self.idle = true;
        self.line_read = None;
        self.interrupt = None;
        // Input for the command that ended is never fed to the shell at its prompt.
        self.typed.clear();
    }

    /// Whether the host input queued for the running command may be written now: after
    /// the command line, and not while a marker waits to be confirmed (unless a job was
    /// seen running behind it).
    fn typed_writable(&self) -> bool {
        !self.typed.is_empty()
            && !self.idle
            && self.input.is_empty()
            && self.pending.as_ref().is_none_or(|p| p.command_seen)
    }

    /// Whether host input written since the command line may still be on its way to the
    /// shell: written less than [`SETTLE`] ago, or not all read yet by the shell and the
    /// children it reaped (`rchar` of `/proc/PID/io` short of the line and the input),
    /// for at most [`LOST_GRACE`] after it was written (a partial line, with no newline,
    /// is never read at a canonical prompt; the next command line's flush discards it).
    fn typed_unsettled(&self) -> bool {
        let Some(at) = self.typed_at else {
            return false;
        };
        let since = at.elapsed();
        if since < SETTLE {
            return true;
        }
        if since >= LOST_GRACE {
            return false;
        }
        let Some(line) = &self.line_read else {
            return false;
        };
        match (bytes_read(self.main), line.all_base) {
            (Some(now), Some(base)) => now < base + line.bytes.len() as u64 + self.typed_written,
            _ => false,
        }
    }

    /// Reads the terminal until it has nothing more (a non-blocking read finds it empty,
    /// which the kernel answers only after handing on what its buffers hold) or until
    /// [`DRAIN_MAX`] bytes have come, more than the kernel holds for a writer; scans them
    /// (behind the pending marker). `true` when the pending marker is still the last one and
    /// everything written before the call has been scanned; `false` when a new marker came
    /// (it is pending now, to be checked in its turn) or the terminal was hung up.
    ///
    /// It reads past the host's credit: the bytes stay held here, bounded by `DRAIN_MAX`,
    /// and are sent once the marker is settled.
    fn drain_written(&mut self) -> bool {
        if self.pending.is_none() {
            return false;
        }
        let markers = self.markers;
        let mut buf = vec![0u8; proto::CHUNK_BYTES];
        let mut total = 0usize;
        while total < DRAIN_MAX {
            // SAFETY: reading into a live buffer.
            let n = unsafe { read(self.master, buf.as_mut_ptr(), buf.len()) };
            if n < 0 && errno() == EINTR {
                continue;
            }
            if n < 0 && errno() == EAGAIN {
                return true;
            }
            if n <= 0 {
                return false;
            }
            let n = n as usize;
            total += n;
            self.credit = self.credit.saturating_sub(n as u64);
            self.output(&buf[..n], false);
            if self.markers != markers {
                return false;
            }
        }
        true
    }

    /// Whether the shell, in the foreground and not reading the terminal, runs a built-in
    /// (rather than still reading, parsing or forking): it used [`BUILT_IN_CPU_NS`] of CPU
    /// since its line was written, or [`BUILT_IN_WAIT`] has passed.
    fn runs_built_in(&self, now: std::time::Instant) -> bool {
        if now.duration_since(self.last_write) >= BUILT_IN_WAIT {
            return true;
        }
        match (self.cpu_at_write, cpu_ns(self.main)) {
            (Some(then), Some(cpu)) => cpu.saturating_sub(then) >= BUILT_IN_CPU_NS,
            _ => now.duration_since(self.last_write) >= SETTLE,
        }
    }

    /// Carries out a requested interrupt (see [`proto::PTY_INTERRUPT`]).
    fn check_interrupt(&mut self) {
        if self.interrupt.is_none() {
            return;
        }
        if self.idle {
            self.interrupt = None;
            return;
        }
        if let Some(int) = &mut self.interrupt {
            // A shell that the signal left deadlocked never comes back: it is ended now (the
            // session resets) rather than at the host's interrupt bound.
            if int.signalled == self.main && deadlocked(self.main) {
                let since = *int.deadlocked_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() >= DEADLOCK_GRACE {
                    // SAFETY: kill(2) of the shell, our own child.
                    unsafe { kill(self.main, SIGKILL) };
                }
                return;
            }
            int.deadlocked_since = None;
        }
        let confirming = self
            .pending
            .as_ref()
            .is_some_and(|p| p.seen.elapsed() < PENDING_GRACE);
        if !self.input.is_empty() || confirming {
            // The command line is not in the terminal yet, or the shell may be back (a
            // marker that stays unconfirmed past the grace was printed by the command).
            return;
        }
        let now = std::time::Instant::now();
        let fg = self.foreground();
        let target = if fg > 0 && fg != self.main {
            Some(fg)
        } else if self.unread_input() > 0 || now.duration_since(self.last_write) < SETTLE {
            // The shell has not read all of its command line yet (it reads a byte at a
            // time; a signal now would cut the line).
            None
        } else {
            match wait_state(self.main) {
                // Back at its prompt (its marker still on its way): nothing to stop.
                Wait::Input(sig) if self.prompt_signature.as_ref() == Some(&sig) => None,
                // A built-in reading the terminal (`read`).
                Wait::Input(_) => Some(self.main),
                // Cannot be told: the shell reads the terminal with its line read, a
                // built-in reading input or its prompt; only the first stays so.
                Wait::Unknown => {
                    let since = *self.reading_since.get_or_insert(now);
                    (now.duration_since(since) >= SETTLE).then_some(self.main)
                }
                Wait::Other => {
                    self.reading_since = None;
                    // The shell took the terminal back from a signalled job and waits for
                    // it: what is left of the job (a member that swallowed the signal
                    // before its exec) gets it again; else the shell itself runs.
                    match self.interrupt.as_ref().map(|i| i.signalled) {
                        Some(job)
                            if job > 0 && job != self.main && !group_members(job).is_empty() =>
                        {
                            Some(job)
                        }
                        _ if self.runs_built_in(now) => Some(self.main),
                        // Still parsing its line or forking the job (a signal now would
                        // reach the shell itself, not the job: bash then prints an extra
                        // newline at its next prompt; ash drops the line).
                        _ => None,
                    }
                }
            }
        };
        let Some(group) = target else {
            return;
        };
        let Some(int) = &mut self.interrupt else {
            return;
        };
        let repeat = std::time::Duration::from_millis(proto::PTY_INTERRUPT_REPEAT_MS);
        let again = if int.signalled == 0 {
            true
        } else if group != self.main {
            let repeat = now >= int.sent_at + std::time::Duration::from_millis(100);
            if group != int.signalled {
                // A job the shell started after the last signal (it was still forking it).
                true
            } else {
                // A member signalled between its fork and its exec may have swallowed the
                // signal in the shell's handler, and a pipeline's later members join the
                // group after its first: again while a member has not had a signal since
                // its exec (at once when one has just exec'd; now and then for one that
                // stays a copy of the shell, a subshell). A member that had one gets no
                // second for its own sake.
                let (execed, copies) = unsignalled_members(group, self.main, &int.done);
                execed || (copies && repeat)
            }
        } else {
            // The shell itself runs a built-in: again, now and then; but not when it just
            // took the terminal back from a job that was signalled.
            int.signalled == self.main && now >= int.sent_at + repeat
        };
        if again {
            // Only members that ran their program before the signal surely got it there.
            let execed = if group != self.main {
                execed_members(group, self.main)
            } else {
                Vec::new()
            };
            if self.debug {
                // (Not `log`: `int` borrows the interrupt.)
                let line = format!("{} SIGINT to group {group}", self.started.elapsed().as_micros());
                raw_write_all(1, &proto::pty_frame(proto::PTY_LOG, line.as_bytes()));
            }
            // SAFETY: ioctl on our own descriptor; kill(2) of the terminal's foreground
            // group (processes of this session).
            unsafe {
                ioctl(self.slave, TCFLSH, TCIFLUSH);
                kill(-group, SIGINT);
            }
            // What was flushed is never read: the shell's next prompt may come without it.
            self.line_read = None;
            if group != int.signalled {
                int.done.clear();
            }
            int.done.extend(execed);
            int.signalled = group;
            int.sent_at = now;
        }
    }

    /// Handles the host's frames in `self.frames`; `false` when the host is gone.
    fn host_frames(&mut self) {
        let mut at = 0;
        while let Some((kind, payload, used)) = proto::parse_pty_frame(&self.frames[at..]) {
            match kind {
                proto::PTY_LINE => {
                    let Some((seq, line)) = proto::parse_pty_numbered(payload) else {
                        at += used;
                        continue;
                    };
                    self.log(|| format!("line seq={seq} len={} idle={}", line.len(), self.idle));
                    // A new command: whatever was asked for the last one is void.
                    self.line_seq = seq;
                    self.typed.clear();
                    self.typed_written = 0;
                    self.typed_at = None;
                    self.interrupt = None;
                    self.input.extend_from_slice(line);
                    if !line.is_empty() && self.idle {
                        // The command line: the shell must read all of it before a prompt
                        // counts as the one after it.
                        self.line_read = Some(Line::new(self.main, line));
                        // The terminal as the session set it up, whatever the last command
                        // left (before the line is written, so it is never echoed).
                        // Then whatever input waits in the terminal is discarded, a partial
                        // line too (typeahead without a newline a command or a background
                        // job pushed, or input a command was written and did not read): the
                        // shell waits at its prompt, and the line must run exactly as sent,
                        // not behind `# ` or `echo INJECTED; `.
                        // SAFETY: ioctls on our own descriptor from a live struct.
                        unsafe {
                            ioctl(self.slave, TCSETS, &self.settings as *const Termios);
                            ioctl(self.slave, TCFLSH, TCIFLUSH);
                        }
                        self.lost_since = None;
                        self.lost_backoff = LOST_CHECK_FIRST;
                        self.next_lost_check = std::time::Instant::now() + LOST_CHECK_FIRST;
                    }
                    if !line.is_empty() {
                        self.idle = false;
                    }
                }
                proto::PTY_INPUT => {
                    if let Some((seq, bytes)) = proto::parse_pty_numbered(payload) {
                        // Input for the running command: dropped at a confirmed prompt (the
                        // command ended), held back while a marker waits to be confirmed
                        // ([`Relay::typed_writable`]), else queued behind the command line.
                        self.log(|| {
                            format!(
                                "input seq={seq} len={} line_seq={} idle={} pending={}",
                                bytes.len(),
                                self.line_seq,
                                self.idle,
                                self.pending.is_some()
                            )
                        });
                        if seq == self.line_seq && !self.idle {
                            self.typed.extend_from_slice(bytes);
                        }
                    }
                }
                proto::PTY_DATA => {
                    // Unnumbered input: the session's set-up line, before any prompt; never
                    // fed to a confirmed prompt.
                    if !self.idle {
                        self.input.extend_from_slice(payload);
                    }
                }
                proto::PTY_CREDIT => {
                    let mut a = [0u8; 8];
                    if payload.len() == 8 {
                        a.copy_from_slice(payload);
                        self.credit = self.credit.saturating_add(u64::from_le_bytes(a));
                    }
                }
                proto::PTY_INTERRUPT => {
                    let stale = match proto::parse_pty_numbered(payload) {
                        Some((seq, _)) => seq != self.line_seq,
                        None => false,
                    };
                    // One for a command that already ended (its prompt confirmed, or a
                    // later line came first, in the same read) is dropped: it never reaches
                    // the next command.
                    self.log(|| format!("interrupt stale={stale} idle={}", self.idle));
                    if stale || self.idle {
                        at += used;
                        continue;
                    }
                    self.reading_since = None;
                    if self.interrupt.is_none() {
                        self.interrupt = Some(Interrupt {
                            signalled: 0,
                            sent_at: std::time::Instant::now(),
                            done: Vec::new(),
                            deadlocked_since: None,
                        });
                    }
                }
                proto::PTY_DEBUG => self.debug = true,
                proto::PTY_MARKER if !payload.is_empty() && self.scanner.is_none() => {
                    self.scanner = Some(proto::MarkerScanner::new(payload.to_vec()));
                }
                _ => {}
            }
            at += used;
        }
        self.frames.drain(..at);
    }

    /// How long the next poll may sleep.
    fn poll_wait(&self) -> Timespec {
        let mut wait = std::time::Duration::from_secs(1);
        if let Some(p) = &self.pending {
            wait = wait.min(p.next_check.saturating_duration_since(std::time::Instant::now()));
        }
        if self.interrupt.is_some() {
            wait = wait.min(std::time::Duration::from_millis(1));
        }
        if self.lost_checks_armed() {
            wait = wait.min(
                self.next_lost_check
                    .saturating_duration_since(std::time::Instant::now()),
            );
        }
        Timespec {
            sec: wait.as_secs() as i64,
            nsec: i64::from(wait.subsec_nanos()),
        }
    }

    /// The relay loop (see the module docs); never returns.
    fn run(mut self, chld_r: c_int) -> ! {
        let mut master_open = true;
        let mut status: Option<c_int> = None;
        let mut buf = vec![0u8; proto::CHUNK_BYTES];
        while status.is_none() {
            let mut fds = [
                PollFd {
                    fd: 0,
                    events: POLLIN,
                    revents: 0,
                },
                PollFd {
                    fd: if master_open { self.master } else { -1 },
                    events: (if self.credit > 0 && !self.holding_full() { POLLIN } else { 0 })
                        | (if self.input.is_empty() && !self.typed_writable() {
                            0
                        } else {
                            POLLOUT
                        }),
                    revents: 0,
                },
                PollFd {
                    fd: chld_r,
                    events: POLLIN,
                    revents: 0,
                },
            ];
            let wait = self.poll_wait();
            // SAFETY: ppoll over a live array with a live timeout, no mask change.
            let r = unsafe { ppoll(fds.as_mut_ptr(), fds.len() as u64, &wait, std::ptr::null()) };
            if r < 0 && errno() != EINTR {
                break;
            }
            if fds[2].revents != 0 {
                let mut junk = [0u8; 64];
                // SAFETY: reading into a live buffer.
                unsafe { read(chld_r, junk.as_mut_ptr(), junk.len()) };
            }
            reap(self.main, &mut status);
            if fds[0].revents != 0 {
                // SAFETY: reading into a live buffer.
                let n = unsafe { read(0, buf.as_mut_ptr(), buf.len()) };
                if n > 0 {
                    self.frames.extend_from_slice(&buf[..n as usize]);
                    self.host_frames();
                } else if n == 0 || (errno() != EINTR && errno() != EAGAIN) {
                    // The host is gone: end the session.
                    break;
                }
            }
            if master_open && fds[1].revents != 0 {
                // The terminal is read first: a marker the shell printed before the host's
                // input came is seen before that input is written (it is then held back).
                if self.credit > 0 && !self.holding_full() {
                    let want = (self.credit.min(buf.len() as u64)) as usize;
                    // SAFETY: reading into a live buffer.
                    let n = unsafe { read(self.master, buf.as_mut_ptr(), want) };
                    if n > 0 {
                        self.credit -= n as u64;
                        let chunk = buf[..n as usize].to_vec();
                        self.output(&chunk, false);
                    } else if n == 0 || (errno() != EINTR && errno() != EAGAIN) {
                        // EIO: the terminal was hung up.
                        master_open = false;
                    }
                } else if fds[1].revents & (POLLIN | POLLOUT) == 0 {
                    // Hang-up with no credit to read: nothing holds the terminal.
                    master_open = false;
                }
                if master_open && !self.input.is_empty() {
                    match write_some(self.master, &self.input) {
                        Ok(n) => {
                            self.input.drain(..n);
                            if n > 0 {
                                self.last_write = std::time::Instant::now();
                                self.cpu_at_write = cpu_ns(self.main);
                                self.log(|| format!("wrote line bytes={n}"));
                            }
                        }
                        Err(e) if e == EAGAIN || e == EINTR => {}
                        Err(_) => self.input.clear(),
                    }
                } else if master_open && self.typed_writable() {
                    match write_some(self.master, &self.typed) {
                        Ok(n) => {
                            self.typed.drain(..n);
                            if n > 0 {
                                self.log(|| format!("wrote input bytes={n}"));
                                self.typed_written += n as u64;
                                self.typed_at = Some(std::time::Instant::now());
                            }
                        }
                        Err(e) if e == EAGAIN || e == EINTR => {}
                        Err(_) => self.typed.clear(),
                    }
                }
            }
            self.check_pending();
            self.check_interrupt();
            self.check_lost();
        }
        // The program ended (or the host went away): what it wrote last is in the terminal.
        if master_open && status.is_some() {
            let mut budget = 1usize << 20;
            while self.credit > 0 && budget > 0 {
                let want = (self.credit.min(buf.len() as u64)) as usize;
                // SAFETY: reading into a live buffer.
                let n = unsafe { read(self.master, buf.as_mut_ptr(), want) };
                if n <= 0 {
                    break;
                }
                self.credit -= n as u64;
                budget = budget.saturating_sub(n as usize);
                let chunk = buf[..n as usize].to_vec();
                self.output(&chunk, false);
            }
        }
        self.output(&[], true);
        // The shell is gone: an unconfirmed marker is neither a prompt nor the command's
        // text worth keeping (it would only show the session's nonce); what followed it is.
        if let Some(p) = self.pending.take() {
            Self::emit(proto::PTY_DATA, &p.held);
        }
        kill_all(self.main, &mut status);
        let code = status.map(exit_code).unwrap_or(1);
        // SAFETY: _exit ends the process.
        unsafe { _exit(code) }
    }
}
