//! The supervisor's wire protocol (std only; compiled into both the supervisor program and
//! the host-side client).
//!
//! One byte stream each way. Every message is a frame: a 9-byte header — payload length
//! (`u32`, little-endian), kind (`u8`), command id (`u32`, little-endian, chosen by the host,
//! 0 for the machine itself) — then the payload. Payloads are length-prefixed fields, so any
//! byte (NUL, newline, invalid UTF-8) passes unchanged, and frames of different commands
//! interleave freely.
//!
//! Host to supervisor: [`START`] (a [`Start`] request), [`STDIN`] (bytes for the command's
//! standard input), [`STDIN_END`] (close it), [`KILL`] (kill everything the command started),
//! [`CREDIT`] (take more of its output).
//! Supervisor to host: [`READY`] once (id 0) when it is up, [`OUTPUT`] (stream byte 1 =
//! stdout, 2 = stderr, then bytes within the command's output limit), then exactly one of
//! [`EXIT`] (an [`Exit`]) or [`FAIL`] (a [`Fail`]) per command.
//!
//! Output is flow-controlled per command: the supervisor sends a command's [`OUTPUT`] bytes
//! only within a window of credit, [`OUTPUT_WINDOW_BYTES`] at its start plus every
//! [`CREDIT`] the host sent for it since (the host grants as its consumer takes chunks).
//! Without credit the supervisor stops reading that command's stdout and stderr pipes, so
//! the command blocks in its own write (pipe backpressure) and no other command waits.
//! Bytes past the output limit are read and dropped without credit; once the host sent a
//! [`KILL`] for a command, the rest of its output (what its killed processes left in the
//! pipes) is sent without credit too, so a host that stopped reading (a dropped command)
//! never holds the supervisor's thread.

/// Bytes of a frame header.
pub const HEADER_BYTES: usize = 9;
/// The largest payload either side sends or accepts: 4 MiB plus room for the fixed fields.
/// A larger frame from the host is read, discarded and refused with [`FAIL`].
pub const MAX_PAYLOAD_BYTES: usize = (4 << 20) + 4096;
/// The most bytes of argv plus environment a [`Start`] may carry (each string counted with
/// a terminating NUL): 1 MiB, half of Linux's usual `execve` limit. More is refused with a
/// [`FAIL_INVALID_INPUT`] for that command only.
pub const MAX_ARGV_ENV_BYTES: usize = 1 << 20;
/// The most supplementary groups a [`Start`] may carry (Linux's `NGROUPS_MAX`).
pub const MAX_GROUPS: usize = 65536;
/// The largest chunk of one [`OUTPUT`] or [`STDIN`] frame.
pub const CHUNK_BYTES: usize = 64 * 1024;

/// Host: start a command (payload: [`Start::encode`]).
pub const START: u8 = 1;
/// Host: bytes for the command's stdin.
pub const STDIN: u8 = 2;
/// Host: no more stdin; the supervisor closes the pipe once the bytes are written.
pub const STDIN_END: u8 = 3;
/// Host: kill every process the command started (its keeper's whole subtree).
pub const KILL: u8 = 4;
/// Host: the command may send this many more output bytes (payload: a little-endian `u64`;
/// see [`OUTPUT_WINDOW_BYTES`]). A malformed payload is ignored.
pub const CREDIT: u8 = 5;
/// The output credit each command starts with, bytes: the most output of one command that
/// is on its way to, or waiting in, the host before the host's consumer took any (2 MiB).
pub const OUTPUT_WINDOW_BYTES: u64 = 2 << 20;
/// Supervisor: it is running (id 0, empty payload).
pub const READY: u8 = 16;
/// Supervisor: output of a command (stream byte, then the bytes).
pub const OUTPUT: u8 = 17;
/// Supervisor: the command's main process ended (payload: [`Exit::encode`]).
pub const EXIT: u8 = 18;
/// Supervisor: the command could not be run or lost its keeper (payload: [`Fail::encode`]).
pub const FAIL: u8 = 19;

/// [`OUTPUT`] stream byte of standard output.
pub const STDOUT: u8 = 1;
/// [`OUTPUT`] stream byte of standard error.
pub const STDERR: u8 = 2;

/// [`Fail`] kind: the request itself is bad (too large, malformed, duplicate id).
pub const FAIL_INVALID_INPUT: u8 = 1;
/// [`Fail`] kind: the supervisor could not start or follow the command (fork, pipe, a
/// killed keeper).
pub const FAIL_SYSTEM: u8 = 2;
/// [`Fail`] kind: the machine's process limit (its pids cgroup, or `RLIMIT_NPROC`) refused
/// the fork of the command's keeper or of its process (`EAGAIN`): nothing of the command
/// ran, and there is room again once some of the machine's processes end.
pub const FAIL_PIDS_LIMIT: u8 = 3;

/// `--pty-relay` frame, both ways: terminal bytes (what the terminal printed, on stdout; on
/// stdin, unnumbered input for the terminal: the session's set-up line before the first
/// prompt; dropped once a prompt was confirmed: commands go as [`PTY_LINE`], input for them
/// as [`PTY_INPUT`]).
pub const PTY_DATA: u8 = 1;
/// `--pty-relay` input frame: a little-endian `u64`, how many more terminal bytes the host
/// takes; the relay reads the terminal only within the credit granted.
pub const PTY_CREDIT: u8 = 2;
/// `--pty-relay` input frame: interrupt command number `seq` (payload a little-endian `u64`,
/// the number its [`PTY_LINE`] carried; empty: whatever command runs). The relay sends
/// SIGINT to the terminal's foreground process group once the command has started (its
/// line written and read), again to each new foreground group (a job the shell forked after
/// the first signal), and every [`PTY_INTERRUPT_REPEAT_MS`] to the shell itself while it
/// runs a built-in; input the shell has not read is flushed as the line discipline does
/// for `^C`. An interrupt that arrives when the shell is back at its prompt (the command
/// ended first), or that names another command than the current line's (a stale one that
/// raced its command's end and arrived with the next command's line), is dropped: nothing
/// is signalled. A shell the signal leaves deadlocked (busybox ash's handler can leave
/// `malloc`'s lock taken) is killed, so the session resets.
pub const PTY_INTERRUPT: u8 = 3;
/// `--pty-relay` input frame: the completion marker's prefix (see [`MarkerScanner`]). Sent
/// once, first; without it the relay passes the terminal's bytes through and reports no
/// completions.
pub const PTY_MARKER: u8 = 4;
/// `--pty-relay` output frame: the shell is back at its prompt; payload a little-endian
/// `u64` command number (that of the last [`PTY_LINE`]; 0 before any) and `i32` status from
/// the marker it printed there. Sent only when the relay has seen, after the marker, that
/// the shell waits for terminal input with no job in the foreground and no unread input (so
/// a command that prints a marker, even the real one, and goes on running does not end its
/// call).
pub const PTY_DONE: u8 = 5;
/// `--pty-relay` input frame: a command line for the shell, payload a little-endian `u64`
/// command number (counting from 1 in a session) then the line's bytes. Sent only while
/// the shell waits at a confirmed prompt ([`PTY_DONE`] came); the relay puts the
/// terminal's settings back, discards the input waiting in it and writes the line. Terminal
/// input for a running command travels as [`PTY_INPUT`] instead, so the relay never takes
/// it for a command line.
pub const PTY_LINE: u8 = 6;
/// `--pty-relay` input frame: terminal input for command number `seq` (a little-endian
/// `u64`, then the bytes): what the host's `write` sends. Dropped when the shell is back at
/// its prompt (the command ended: input written for it never runs as a command line) or
/// when it names another command than the current line's; held back, unwritten, while a
/// completion marker waits to be confirmed (the shell may be on its way to its prompt,
/// whose read would take it as a command line), and dropped if that marker is confirmed.
pub const PTY_INPUT: u8 = 7;

/// `--pty-relay` input frame (empty): turn the relay's debug log on; from then on it
/// reports what it decides (frames taken, held or dropped, markers seen, prompt checks when
/// their outcome changes, completions, kills) in [`PTY_LOG`] frames. The host sends it when
/// `SHELLBOX_RELAY_DEBUG` names a file, and appends the lines there.
pub const PTY_DEBUG: u8 = 8;
/// `--pty-relay` output frame: one line of the relay's debug log (see [`PTY_DEBUG`]):
/// microseconds since the relay started, then what happened.
pub const PTY_LOG: u8 = 9;

/// A [`PTY_LINE`] or [`PTY_INPUT`] payload: `seq` then `bytes`.
pub fn pty_numbered(seq: u64, bytes: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + bytes.len());
    v.extend_from_slice(&seq.to_le_bytes());
    v.extend_from_slice(bytes);
    v
}

/// The command number and bytes of a [`pty_numbered`] payload (`None`: shorter than 8
/// bytes).
pub fn parse_pty_numbered(payload: &[u8]) -> Option<(u64, &[u8])> {
    let (n, rest) = payload.split_at_checked(8)?;
    Some((u64::from_le_bytes(n.try_into().ok()?), rest))
}

/// Whether a completion marker numbered `n` with `status` ends command `seq`: its own
/// number; or, once the command was `interrupted`, the previous number with 130 (128 +
/// SIGINT): the signal reached the shell while it still parsed the command's line, and the
/// shell dropped the whole line, its `__shellbox_seq=<seq>` with it, and prompted again.
/// Any other marker is a prompt for stray input (a line written to a command that ended
/// without reading it), to be dropped.
pub fn marker_ends_command(seq: u64, n: u64, status: i32, interrupted: bool) -> bool {
    n == seq || (interrupted && status == 130 && n.checked_add(1) == Some(seq))
}

/// How often the relay repeats an interrupt to a shell running a built-in, milliseconds.
pub const PTY_INTERRUPT_REPEAT_MS: u64 = 500;

/// One frame of a `--pty-relay` process's stdin (carried in [`STDIN`] frames) or stdout:
/// kind, `u32` little-endian length, payload.
pub fn pty_frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(5 + payload.len());
    v.push(kind);
    v.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    v.extend_from_slice(payload);
    v
}

/// The first whole [`pty_frame`] in `buf`: (kind, payload, bytes used), or `None` while it
/// is incomplete.
pub fn parse_pty_frame(buf: &[u8]) -> Option<(u8, &[u8], usize)> {
    if buf.len() < 5 {
        return None;
    }
    let len = u32::from_le_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
    let end = 5usize.checked_add(len)?;
    if buf.len() < end {
        return None;
    }
    Some((buf[0], &buf[5..end], end))
}

/// A frame header: payload length, kind, command id.
pub fn header(len: usize, kind: u8, id: u32) -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    h[..4].copy_from_slice(&(len as u32).to_le_bytes());
    h[4] = kind;
    h[5..].copy_from_slice(&id.to_le_bytes());
    h
}

/// Splits a header into (payload length, kind, id).
pub fn parse_header(h: &[u8; HEADER_BYTES]) -> (usize, u8, u32) {
    let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
    let id = u32::from_le_bytes([h[5], h[6], h[7], h[8]]);
    (len, h[4], id)
}

/// A whole frame: header and payload.
pub fn frame(kind: u8, id: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER_BYTES + payload.len());
    v.extend_from_slice(&header(payload.len(), kind, id));
    v.extend_from_slice(payload);
    v
}

/// One command to start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Start {
    /// Program and arguments; the program is looked up in the environment's `PATH` when it
    /// holds no `/` (as `execvp` does): 127 when not found, 126 when not executable or when
    /// `execve(2)` fails otherwise (`E2BIG`: "Argument list too long"), as a shell reports it.
    pub argv: Vec<Vec<u8>>,
    /// The whole environment, `KEY=VALUE` each.
    pub env: Vec<Vec<u8>>,
    /// Working directory (a failed change is reported on stderr with exit 2, as `sh` does).
    pub cwd: Vec<u8>,
    /// `(uid, gid)` to switch to, or `None` to keep the supervisor's.
    pub user: Option<(u32, u32)>,
    /// The supplementary groups set with [`user`](Start::user) (empty: none; at most
    /// [`MAX_GROUPS`]); ignored without a user.
    pub groups: Vec<u32>,
    /// Resource limits as `(RLIMIT_* number, soft = hard value)`.
    pub rlimits: Vec<(u32, u64)>,
    /// Bytes kept per output stream; the rest is read and dropped, and the stream is marked
    /// truncated in [`Exit`].
    pub output_limit_bytes: u64,
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

/// Reads the fields of a payload in order; every read fails cleanly on short input.
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader over `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.buf.len() < n {
            return None;
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Some(a)
    }
    /// One byte.
    pub fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    /// A little-endian `u32`.
    pub fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    /// A little-endian `u64`.
    pub fn u64(&mut self) -> Option<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Some(u64::from_le_bytes(a))
    }
    /// A `u32`-length-prefixed byte string.
    pub fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    /// The bytes not read yet.
    pub fn rest(self) -> &'a [u8] {
        self.buf
    }
}

impl Start {
    /// Bytes of argv plus environment as `execve` counts them (each string with its NUL).
    pub fn argv_env_bytes(&self) -> usize {
        self.argv.iter().chain(&self.env).map(|s| s.len() + 1).sum()
    }

    /// The [`START`] payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.argv_env_bytes() + 8 * self.argv.len());
        out.extend_from_slice(&self.output_limit_bytes.to_le_bytes());
        match self.user {
            Some((uid, gid)) => {
                out.push(1);
                out.extend_from_slice(&uid.to_le_bytes());
                out.extend_from_slice(&gid.to_le_bytes());
            }
            None => {
                out.push(0);
                out.extend_from_slice(&[0u8; 8]);
            }
        }
        out.extend_from_slice(&(self.rlimits.len() as u32).to_le_bytes());
        for (resource, value) in &self.rlimits {
            out.extend_from_slice(&resource.to_le_bytes());
            out.extend_from_slice(&value.to_le_bytes());
        }
        put_bytes(&mut out, &self.cwd);
        for list in [&self.argv, &self.env] {
            out.extend_from_slice(&(list.len() as u32).to_le_bytes());
            for s in list {
                put_bytes(&mut out, s);
            }
        }
        out.extend_from_slice(&(self.groups.len() as u32).to_le_bytes());
        for g in &self.groups {
            out.extend_from_slice(&g.to_le_bytes());
        }
        out
    }

    /// Parses a [`START`] payload; `None` when it is malformed.
    pub fn decode(payload: &[u8]) -> Option<Start> {
        let mut r = Reader::new(payload);
        let output_limit_bytes = r.u64()?;
        let has_user = r.u8()?;
        let (uid, gid) = (r.u32()?, r.u32()?);
        let n = r.u32()? as usize;
        let mut rlimits = Vec::with_capacity(n.min(64));
        for _ in 0..n {
            rlimits.push((r.u32()?, r.u64()?));
        }
        let cwd = r.bytes()?.to_vec();
        let mut lists = [Vec::new(), Vec::new()];
        for list in &mut lists {
            let n = r.u32()? as usize;
            for _ in 0..n {
                list.push(r.bytes()?.to_vec());
            }
        }
        let n = r.u32()? as usize;
        if n > MAX_GROUPS {
            return None;
        }
        let mut groups = Vec::with_capacity(n.min(64));
        for _ in 0..n {
            groups.push(r.u32()?);
        }
        if !r.rest().is_empty() {
            return None;
        }
        let [argv, env] = lists;
        Some(Start {
            argv,
            env,
            cwd,
            user: (has_user == 1).then_some((uid, gid)),
            groups,
            rlimits,
            output_limit_bytes,
        })
    }
}

/// How a command's main process ended, and whether its output was cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    /// Its exit code, or `None` when a signal ended it.
    pub code: Option<i32>,
    /// The signal that ended it.
    pub signal: Option<i32>,
    /// Stdout went past the output limit.
    pub stdout_truncated: bool,
    /// Stderr went past the output limit.
    pub stderr_truncated: bool,
}

impl Exit {
    /// The exit code a shell reports: the code, or 128 + the signal.
    pub fn shell_code(&self) -> i32 {
        match (self.code, self.signal) {
            (Some(c), _) => c,
            (None, Some(s)) => 128 + s,
            (None, None) => 255,
        }
    }

    /// The [`EXIT`] payload.
    pub fn encode(&self) -> Vec<u8> {
        let (how, value) = match (self.code, self.signal) {
            (Some(c), _) => (0u8, c),
            (None, Some(s)) => (1u8, s),
            (None, None) => (0u8, 255),
        };
        let mut out = vec![how];
        out.extend_from_slice(&value.to_le_bytes());
        out.push(u8::from(self.stdout_truncated));
        out.push(u8::from(self.stderr_truncated));
        out
    }

    /// Parses an [`EXIT`] payload.
    pub fn decode(payload: &[u8]) -> Option<Exit> {
        let mut r = Reader::new(payload);
        let how = r.u8()?;
        let value = r.u32()? as i32;
        let (o, e) = (r.u8()?, r.u8()?);
        let (code, signal) = match how {
            0 => (Some(value), None),
            1 => (None, Some(value)),
            _ => return None,
        };
        Some(Exit {
            code,
            signal,
            stdout_truncated: o != 0,
            stderr_truncated: e != 0,
        })
    }
}

/// Why a command could not be run or followed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fail {
    /// [`FAIL_INVALID_INPUT`], [`FAIL_SYSTEM`] or [`FAIL_PIDS_LIMIT`].
    pub kind: u8,
    /// What went wrong, in words.
    pub message: String,
}

impl Fail {
    /// The [`FAIL`] payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![self.kind];
        out.extend_from_slice(self.message.as_bytes());
        out
    }

    /// Parses a [`FAIL`] payload.
    pub fn decode(payload: &[u8]) -> Option<Fail> {
        let (&kind, message) = payload.split_first()?;
        Some(Fail {
            kind,
            message: String::from_utf8_lossy(message).into_owned(),
        })
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_marker_ends_its_command_or_after_an_interrupt_the_dropped_line() {
        assert_eq!(
            super::parse_pty_numbered(&super::pty_numbered(7, b"ls\n")),
            Some((7, &b"ls\n"[..]))
        );
        assert_eq!(super::parse_pty_numbered(&[1, 2, 3]), None);
        assert!(super::marker_ends_command(5, 5, 0, false));
        assert!(!super::marker_ends_command(5, 4, 130, false));
        assert!(super::marker_ends_command(5, 4, 130, true));
        assert!(!super::marker_ends_command(5, 4, 0, true));
        assert!(!super::marker_ends_command(5, 3, 130, true));
        assert!(!super::marker_ends_command(0, u64::MAX, 130, true));
    }

    use super::*;

    #[test]
    fn start_round_trips_any_bytes_and_refuses_malformed_payloads() {
        let start = Start {
            argv: vec![b"sh".to_vec(), vec![0xff, b'\n', 0x11], Vec::new()],
            env: vec![b"PATH=/bin".to_vec(), b"X=\xc3(".to_vec()],
            cwd: b"/workspace".to_vec(),
            user: Some((65534, 65534)),
            groups: vec![65534, 50, 0],
            rlimits: vec![(4, 0), (1, 1 << 30)],
            output_limit_bytes: u64::MAX,
        };
        let payload = start.encode();
        assert_eq!(Start::decode(&payload), Some(start.clone()));
        assert_eq!(start.argv_env_bytes(), 3 + 4 + 1 + 10 + 5);
        // Every truncation and any trailing byte is refused, never misread.
        for n in 0..payload.len() {
            assert_eq!(Start::decode(&payload[..n]), None, "{n} bytes");
        }
        let mut longer = payload.clone();
        longer.push(0);
        assert_eq!(Start::decode(&longer), None);
        let none = Start {
            user: None,
            ..start
        };
        assert_eq!(Start::decode(&none.encode()), Some(none));
    }

    #[test]
    fn frames_and_exits() {
        let f = frame(OUTPUT, 0xdead_beef, b"\x01abc");
        let mut h = [0u8; HEADER_BYTES];
        h.copy_from_slice(&f[..HEADER_BYTES]);
        assert_eq!(parse_header(&h), (4, OUTPUT, 0xdead_beef));
        let exit = Exit {
            code: None,
            signal: Some(9),
            stdout_truncated: true,
            stderr_truncated: false,
        };
        assert_eq!(Exit::decode(&exit.encode()), Some(exit));
        assert_eq!(exit.shell_code(), 137);
        let exit = Exit {
            code: Some(3),
            signal: None,
            stdout_truncated: false,
            stderr_truncated: true,
        };
        assert_eq!(Exit::decode(&exit.encode()), Some(exit));
        assert_eq!(exit.shell_code(), 3);
        assert_eq!(Exit::decode(&[7, 0, 0, 0, 0, 0, 0]), None);
        let fail = Fail {
            kind: FAIL_INVALID_INPUT,
            message: "too big".into(),
        };
        assert_eq!(Fail::decode(&fail.encode()), Some(fail));
        assert_eq!(Fail::decode(&[]), None);
    }
}

/// What [`MarkerScanner::scan`] found next in the terminal's output.
#[derive(Debug, PartialEq, Eq)]
pub enum Scan {
    /// Bytes that are not a marker.
    Output(Vec<u8>),
    /// A marker `<prefix><seq>:<status>;`: the command number, the status and the marker's
    /// own bytes.
    Marker(u64, i32, Vec<u8>),
    /// Nothing more until more bytes are pushed.
    NeedMore,
}

/// Finds completion markers `<prefix><digits>:<digits>;` in a terminal's byte stream,
/// holding back only what may be the start of one. The shell of a session prints one at
/// every prompt (its command number and `$?`).
#[derive(Debug)]
pub struct MarkerScanner {
    prefix: Vec<u8>,
    buf: Vec<u8>,
}

/// The longest marker body after the prefix (`<u64>:<i32>;`).
const MARKER_BODY_MAX: usize = 20 + 1 + 11 + 1;

enum Body {
    Complete(u64, i32, usize),
    Incomplete,
    Invalid,
}

impl MarkerScanner {
    /// A scanner for markers starting with `prefix` (not empty).
    pub fn new(prefix: Vec<u8>) -> Self {
        MarkerScanner {
            prefix,
            buf: Vec::new(),
        }
    }

    /// Adds terminal bytes.
    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// As [`MarkerScanner::scan`], at the end of the stream: whatever is held is output.
    pub fn scan_end(&mut self) -> Scan {
        match self.scan() {
            Scan::NeedMore if !self.buf.is_empty() => Scan::Output(std::mem::take(&mut self.buf)),
            other => other,
        }
    }

    /// The next piece of the stream.
    pub fn scan(&mut self) -> Scan {
        if self.buf.is_empty() || self.prefix.is_empty() {
            return if self.buf.is_empty() {
                Scan::NeedMore
            } else {
                Scan::Output(std::mem::take(&mut self.buf))
            };
        }
        let plen = self.prefix.len();
        match find(&self.buf, &self.prefix) {
            Some(0) => match parse_body(&self.buf[plen..]) {
                Body::Complete(seq, status, used) => {
                    let rest = self.buf.split_off(plen + used);
                    let raw = std::mem::replace(&mut self.buf, rest);
                    Scan::Marker(seq, status, raw)
                }
                Body::Incomplete => Scan::NeedMore,
                Body::Invalid => Scan::Output(self.take(plen)),
            },
            Some(i) => Scan::Output(self.take(i)),
            None => {
                let keep = (1..plen.min(self.buf.len() + 1))
                    .rev()
                    .find(|&k| self.buf.ends_with(&self.prefix[..k]))
                    .unwrap_or(0);
                let emit = self.buf.len() - keep;
                if emit == 0 {
                    Scan::NeedMore
                } else {
                    Scan::Output(self.take(emit))
                }
            }
        }
    }

    fn take(&mut self, n: usize) -> Vec<u8> {
        let rest = self.buf.split_off(n);
        std::mem::replace(&mut self.buf, rest)
    }
}

fn parse_body(body: &[u8]) -> Body {
    let mut fields = [0u64; 2];
    let mut field = 0;
    let mut digits = 0;
    for (i, &b) in body.iter().enumerate() {
        if i > MARKER_BODY_MAX {
            return Body::Invalid;
        }
        match b {
            b'0'..=b'9' => {
                digits += 1;
                fields[field] = match fields[field]
                    .checked_mul(10)
                    .and_then(|v| v.checked_add(u64::from(b - b'0')))
                {
                    Some(v) => v,
                    None => return Body::Invalid,
                };
            }
            b':' if field == 0 && digits > 0 => {
                field = 1;
                digits = 0;
            }
            b';' if field == 1 && digits > 0 => {
                let Ok(status) = i32::try_from(fields[1]) else {
                    return Body::Invalid;
                };
                return Body::Complete(fields[0], status, i + 1);
            }
            _ => return Body::Invalid,
        }
    }
    Body::Incomplete
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod scanner_tests {
    use super::*;

    #[test]
    fn scanner_finds_markers_split_anywhere() {
        let stream = b"out SBab:1:0 SBabc:x SBabc:7:13;rest SBab".to_vec();
        for split in 0..stream.len() {
            let mut s = MarkerScanner::new(b"SBabc:".to_vec());
            let mut found = Vec::new();
            let mut text = Vec::new();
            for part in [&stream[..split], &stream[split..]] {
                s.push(part);
                loop {
                    match s.scan() {
                        Scan::Output(b) => text.extend_from_slice(&b),
                        Scan::Marker(n, st, raw) => {
                            assert_eq!(raw, b"SBabc:7:13;");
                            found.push((n, st, text.len()))
                        }
                        Scan::NeedMore => break,
                    }
                }
            }
            assert_eq!(found, [(7, 13, 21)], "split at {split}");
            assert_eq!(text, b"out SBab:1:0 SBabc:x rest ".to_vec());
            assert_eq!(s.scan_end(), Scan::Output(b"SBab".to_vec()));
        }
    }

    #[test]
    fn scanner_refuses_overlong_and_overflowing_bodies() {
        let mut s = MarkerScanner::new(b"SB:".to_vec());
        s.push(b"SB:99999999999999999999999:0;SB:1:99999999999;SB:1:2;");
        let mut markers = Vec::new();
        let mut text = Vec::new();
        loop {
            match s.scan_end() {
                Scan::Output(b) => text.extend_from_slice(&b),
                Scan::Marker(n, st, _) => markers.push((n, st)),
                Scan::NeedMore => break,
            }
        }
        assert_eq!(markers, [(1, 2)]);
        assert_eq!(
            text,
            b"SB:99999999999999999999999:0;SB:1:99999999999;".to_vec()
        );
    }
}
