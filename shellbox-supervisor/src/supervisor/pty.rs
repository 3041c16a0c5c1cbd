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
//! - Input (stdin of this process) is frames ([`proto::pty_frame`]): `PTY_DATA` bytes for the
//!   terminal, `PTY_CREDIT` (u64: how many more terminal bytes the host will take),
//!   `PTY_INTERRUPT` (SIGINT to the terminal's foreground process group, pending input
//!   dropped, as the line discipline does for `^C`).
//! - Output (stdout) is the terminal's bytes, never more than the credit granted: without
//!   credit the terminal is not read, so a program writing more blocks on it, as on any
//!   terminal nobody reads.
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
}

use super::{
    close, dup2, errno, fcntl, fork, kill, open, pipe2, poll, prctl, raw_write_all, read, setsid,
    signal, waitpid, write, PollFd, _exit, EAGAIN, EINTR, F_GETFL, F_SETFL, O_CLOEXEC,
    O_NONBLOCK, O_RDWR, POLLIN, POLLOUT, PR_SET_CHILD_SUBREAPER, SIGKILL,
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
#[derive(Default)]
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
            // The program: a new session whose controlling terminal is the slave.
            signal(SIGCHLD, 0);
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
        close(slave);
        let fl = fcntl(master, F_GETFL);
        fcntl(master, F_SETFL, fl | O_NONBLOCK);
        relay(master, chld[0], pid)
    }
}

/// The relay loop (see the module docs); never returns.
fn relay(master: c_int, chld_r: c_int, main: c_int) -> ! {
    let mut credit: u64 = 0;
    let mut input: Vec<u8> = Vec::new();
    let mut frames: Vec<u8> = Vec::new();
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
                fd: if master_open { master } else { -1 },
                events: (if credit > 0 { POLLIN } else { 0 })
                    | (if input.is_empty() { 0 } else { POLLOUT }),
                revents: 0,
            },
            PollFd {
                fd: chld_r,
                events: POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: poll over a live array.
        let r = unsafe { poll(fds.as_mut_ptr(), fds.len() as u64, 1000) };
        if r < 0 && errno() != EINTR {
            break;
        }
        if fds[2].revents != 0 {
            let mut junk = [0u8; 64];
            // SAFETY: reading into a live buffer.
            unsafe { read(chld_r, junk.as_mut_ptr(), junk.len()) };
        }
        reap(main, &mut status);
        if fds[0].revents != 0 {
            // SAFETY: reading into a live buffer.
            let n = unsafe { read(0, buf.as_mut_ptr(), buf.len()) };
            if n > 0 {
                frames.extend_from_slice(&buf[..n as usize]);
                let mut at = 0;
                while let Some((kind, payload, used)) = proto::parse_pty_frame(&frames[at..]) {
                    match kind {
                        proto::PTY_DATA => input.extend_from_slice(payload),
                        proto::PTY_CREDIT => {
                            let mut a = [0u8; 8];
                            if payload.len() == 8 {
                                a.copy_from_slice(payload);
                                credit = credit.saturating_add(u64::from_le_bytes(a));
                            }
                        }
                        proto::PTY_INTERRUPT => {
                            input.clear();
                            let mut pgrp: c_int = 0;
                            // SAFETY: ioctl into a local; kill(2) of the terminal's
                            // foreground group (processes of this session).
                            unsafe {
                                if ioctl(master, TIOCGPGRP, &mut pgrp as *mut c_int) == 0 && pgrp > 0 {
                                    kill(-pgrp, SIGINT);
                                }
                            }
                        }
                        _ => {}
                    }
                    at += used;
                }
                frames.drain(..at);
            } else if n == 0 || (errno() != EINTR && errno() != EAGAIN) {
                // The host is gone: end the session.
                break;
            }
        }
        if master_open && fds[1].revents != 0 {
            if !input.is_empty() {
                match write_some(master, &input) {
                    Ok(n) => {
                        input.drain(..n);
                    }
                    Err(e) if e == EAGAIN || e == EINTR => {}
                    Err(_) => input.clear(),
                }
            }
            if credit > 0 {
                let want = (credit.min(buf.len() as u64)) as usize;
                // SAFETY: reading into a live buffer.
                let n = unsafe { read(master, buf.as_mut_ptr(), want) };
                if n > 0 {
                    credit -= n as u64;
                    raw_write_all(1, &buf[..n as usize]);
                } else if n == 0 || (errno() != EINTR && errno() != EAGAIN) {
                    // EIO: no process holds the terminal any more.
                    master_open = false;
                }
            } else if fds[1].revents & (POLLIN | POLLOUT) == 0 {
                // Hang-up with no credit to read: nothing holds the terminal.
                master_open = false;
            }
        }
    }
    // The program ended (or the host went away): what it wrote last is in the terminal.
    if master_open && status.is_some() {
        let mut budget = 1usize << 20;
        while credit > 0 && budget > 0 {
            let want = (credit.min(buf.len() as u64)) as usize;
            // SAFETY: reading into a live buffer.
            let n = unsafe { read(master, buf.as_mut_ptr(), want) };
            if n <= 0 {
                break;
            }
            credit -= n as u64;
            budget = budget.saturating_sub(n as usize);
            raw_write_all(1, &buf[..n as usize]);
        }
    }
    kill_all(main, &mut status);
    let code = status.map(exit_code).unwrap_or(1);
    // SAFETY: _exit ends the process.
    unsafe { _exit(code) }
}
