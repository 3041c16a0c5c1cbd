//! The interpreter: shell state, control flow, redirections and process boundaries.

use shellbox_core::status::signal_exit_code;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use brush_parser::ast;

use crate::live::LiveSink;
use crate::mem::{MBytes, MStr};
use crate::vfs::{Dev, Errno, Kind, Vfs};
use shellbox_core::capture::OutputKind;

/// Non-local control flow and aborts.
#[derive(Debug, Clone)]
pub enum Ctl {
    Break(u32),
    Continue(u32),
    Return(i32),
    Exit(i32),
    /// A deadline (by id) passed.
    Timeout(u32),
    /// A budget ran out; the machine terminates.
    Budget(String),
}

pub type R<T> = Result<T, Ctl>;

/// An open file description.
#[derive(Debug)]
pub enum Stream {
    Buf {
        data: MBytes,
        pos: usize,
    },
    Cap {
        data: MBytes,
        limit: usize,
        total: u64,
    },
    File {
        ino: usize,
        pos: usize,
        append: bool,
    },
    Null,
    Zero,
    /// `/dev/urandom` opened for a redirection.
    Random,
    /// A background job's view of an inherited stream: writes are queued with their
    /// virtual time and reach the stream in time order with the foreground's.
    Timed(Fd),
    /// The write end of a pipe into `head`: once the reader has what it needs and the pipe
    /// buffer (64 KiB) is full, further writes get SIGPIPE (exit 141), as with a real pipe.
    Pipe {
        data: MBytes,
        lines: usize,
        need: HeadNeed,
    },
    /// A `run_stream`'s stdout or stderr: writes leave as events (see [`crate::live`]).
    Live(Rc<RefCell<LiveSink>>, OutputKind),
}

/// What a `head` reading a pipe consumes before it exits.
#[derive(Debug, Clone, Copy)]
pub enum HeadNeed {
    Lines(usize),
    Bytes(usize),
}

/// The capacity of a Linux pipe.
const PIPE_CAPACITY: usize = 64 * 1024;

/// Whether a pipeline is one compound command other than a subshell (`{ }`, `if`,
/// loops, `case`): its status is not checked for `set -e` and the ERR trap, as its inner
/// commands were (`set -e; { false && true; }; echo reached` goes on, as in bash).
fn is_compound_group(p: &ast::Pipeline) -> bool {
    use ast::CompoundCommand as C;
    match p.seq.as_slice() {
        [ast::Command::Compound(c, _)] => !matches!(c, C::Subshell(_) | C::Arithmetic(_)),
        _ => false,
    }
}

/// What `cmd` consumes from stdin when it is a plain `head` reading only stdin.
fn head_need(cmd: &ast::Command) -> Option<HeadNeed> {
    let ast::Command::Simple(s) = cmd else {
        return None;
    };
    if s.prefix.is_some() || s.word_or_name.as_ref()?.value != "head" {
        return None;
    }
    let mut words = Vec::new();
    if let Some(suf) = &s.suffix {
        for it in &suf.0 {
            match it {
                ast::CommandPrefixOrSuffixItem::Word(w) => words.push(w.value.as_str()),
                _ => return None,
            }
        }
    }
    let plain = |w: &str| w.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    let mut need = HeadNeed::Lines(10);
    let mut i = 0;
    while i < words.len() {
        let w = words[i];
        if !plain(w) {
            return None;
        }
        let num = |v: &str| v.parse::<usize>().ok();
        match w {
            "-q" | "-v" => {}
            "-n" => {
                i += 1;
                need = HeadNeed::Lines(num(words.get(i)?)?);
            }
            "-c" => {
                i += 1;
                need = HeadNeed::Bytes(num(words.get(i)?)?);
            }
            _ if w.starts_with("-n") => need = HeadNeed::Lines(num(&w[2..])?),
            _ if w.starts_with("-c") => need = HeadNeed::Bytes(num(&w[2..])?),
            _ if w.len() > 1 && w.starts_with('-') => need = HeadNeed::Lines(num(&w[1..])?),
            _ => return None,
        }
        i += 1;
    }
    Some(need)
}

pub type Fd = Rc<RefCell<Stream>>;

pub fn buf_fd(data: Vec<u8>) -> Fd {
    Rc::new(RefCell::new(Stream::Buf {
        data: MBytes::new(data),
        pos: 0,
    }))
}

/// An indexed array: a persistent ordered map from index to element (see [`Shell::vars`]).
pub type ArrMap = imbl::OrdMap<i64, MStr>;

/// The shell's variables by name.
pub type VarMap = imbl::HashMap<String, Var>;

#[derive(Debug, Clone)]
pub enum Value {
    Str(MStr),
    Arr(ArrMap),
    Assoc(AssocMap),
}

/// An associative array that iterates in bash's order: bash keeps the keys in a hash table
/// of 1,024 buckets (FNV-1 hash of the key), and lists them bucket by bucket, the most
/// recently added first within a bucket.
#[derive(Debug, Clone, Default)]
pub struct AssocMap {
    map: imbl::HashMap<MStr, (MStr, u64)>,
    seq: u64,
}

fn bash_bucket(key: &str) -> u32 {
    let mut h: u32 = 2_166_136_261;
    for b in key.bytes() {
        h = h.wrapping_mul(16_777_619);
        // C's `char` is signed: bytes over 127 are sign-extended before the xor
        h ^= b as i8 as i32 as u32;
    }
    h & 1023
}

impl AssocMap {
    pub fn new() -> Self {
        Self::default()
    }
    fn ordered(&self) -> Vec<(&str, &str)> {
        let mut v: Vec<(&str, &str, u64, u32)> = self
            .map
            .iter()
            .map(|(k, (val, seq))| (&**k, &**val, *seq, bash_bucket(k)))
            .collect();
        v.sort_by_key(|e| (e.3, std::cmp::Reverse(e.2)));
        v.into_iter().map(|(k, val, _, _)| (k, val)).collect()
    }
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.ordered().into_iter()
    }
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.ordered().into_iter().map(|(k, _)| k)
    }
    pub fn values(&self) -> impl Iterator<Item = &str> {
        self.ordered().into_iter().map(|(_, v)| v)
    }
    pub fn get(&self, k: &str) -> Option<&str> {
        self.map.get(k).map(|e| &*e.0)
    }
    pub fn insert(&mut self, k: String, v: String) {
        if let Some(e) = self.map.get_mut(k.as_str()) {
            e.0 = v.into();
        } else {
            self.seq += 1;
            self.map.insert(k.into(), (v.into(), self.seq));
        }
    }
    pub fn remove(&mut self, k: &str) -> Option<String> {
        self.map.remove(k).map(|e| e.0.into())
    }
    pub fn contains_key(&self, k: &str) -> bool {
        self.map.contains_key(k)
    }
}

#[derive(Debug, Clone)]
pub struct Var {
    pub value: Value,
    pub exported: bool,
    pub readonly: bool,
    pub integer: bool,
    /// `declare -n`: the value names the variable this one stands for.
    pub nameref: bool,
}

impl Var {
    pub fn s(v: impl Into<MStr>) -> Self {
        Var {
            value: Value::Str(v.into()),
            exported: false,
            readonly: false,
            integer: false,
            nameref: false,
        }
    }
    pub fn as_str(&self) -> String {
        self.str_ref().to_string()
    }

    /// The value as [`Var::as_str`] gives it, borrowed: no copy of a big value.
    pub fn str_ref(&self) -> &str {
        match &self.value {
            Value::Str(s) => s.as_str(),
            Value::Arr(m) => m.get(&0).map_or("", |s| s.as_str()),
            Value::Assoc(m) => m.get("0").unwrap_or(""),
        }
    }
}

/// The characters of `$IFS` as a set. Word splitting and `read` ask about every character
/// of their text; a long IFS (it is an ordinary variable, and can be grown to megabytes)
/// holds few distinct characters, so each question is answered in O(1) instead of a scan
/// of the whole value.
pub struct IfsChars {
    ascii: [bool; 128],
    other: std::collections::HashSet<char>,
    empty: bool,
}

impl IfsChars {
    /// The set of `ifs`'s characters; `None` when the command must stop ([`stop_due`],
    /// looked at once per [`CHUNK_BYTES`] characters).
    pub fn new(ifs: &str) -> Option<IfsChars> {
        let mut set = IfsChars {
            ascii: [false; 128],
            other: std::collections::HashSet::new(),
            empty: ifs.is_empty(),
        };
        let mut pace = Pacer::default();
        for c in ifs.chars() {
            if pace.due(1) {
                return None;
            }
            match usize::try_from(u32::from(c)) {
                Ok(i) if i < 128 => set.ascii[i] = true,
                _ => {
                    set.other.insert(c);
                }
            }
        }
        Some(set)
    }

    /// Whether `c` is one of IFS's characters.
    pub fn contains(&self, c: char) -> bool {
        match usize::try_from(u32::from(c)) {
            Ok(i) if i < 128 => self.ascii[i],
            _ => self.other.contains(&c),
        }
    }

    /// Whether IFS is empty (no splitting at all).
    pub fn is_empty(&self) -> bool {
        self.empty
    }
}

#[derive(Debug, Clone, Default)]
pub struct Opts {
    pub errexit: bool,
    pub nounset: bool,
    pub pipefail: bool,
    pub noclobber: bool,
    pub noglob: bool,
    pub xtrace: bool,
    pub allexport: bool,
    pub nullglob: bool,
    pub failglob: bool,
    pub extglob: bool,
    pub globstar: bool,
    pub dotglob: bool,
    pub nocasematch: bool,
    pub lastpipe: bool,
    pub errtrace: bool,
    /// `set -n`: commands are read, not run.
    pub noexec: bool,
}

#[derive(Debug, Clone)]
pub struct Job {
    pub pid: u32,
    pub status: Option<i32>,
    pub finish: u64,
    pub text: String,
    pub reported: bool,
}

#[derive(Clone)]
pub struct Shell {
    /// The variables: a persistent map, so a subshell's copy shares it (O(1) to make) and
    /// only what the subshell changes is copied.
    pub vars: VarMap,
    pub funcs: imbl::HashMap<String, Rc<ast::FunctionBody>>,
    /// The positional parameters (`$1`...), metered as variables are (see [`crate::mem`]);
    /// shared with subshells and function frames until one changes them.
    pub pos: Rc<Vec<MStr>>,
    pub arg0: String,
    pub opts: Opts,
    pub cwd: String,
    pub dirstack: Vec<String>,
    /// The traps by signal name: a persistent map of shared texts, so a subshell's copy (and
    /// a program's) is O(1) however long a trap's text is.
    pub traps: imbl::HashMap<String, Rc<str>>,
    pub fds: Vec<Option<Fd>>,
    pub locals: Vec<Vec<(String, Option<Var>)>>,
    pub status: i32,
    pub subst_status: Option<i32>,
    pub pipestatus: Vec<i32>,
    pub jobs: Vec<Job>,
    pub last_bg: Option<u32>,
    pub pid: u32,
    pub bashpid: u32,
    pub umask: u32,
    pub cond: u32,
    pub loops: u32,
    pub funcdepth: u32,
    pub in_trap: bool,
    pub getopts_sub: usize,
    /// Names of the functions being run, innermost last.
    pub funcnames: Vec<String>,
}

impl Drop for Shell {
    /// After the command's own timeout fired, the shell's variables, functions, arrays
    /// and open streams are buried (freed at the machine's next command or when it is
    /// dropped), so a big state does not delay the `TimedOut` result.
    fn drop(&mut self) {
        if ending() {
            crate::mem::bury((
                std::mem::take(&mut self.vars),
                std::mem::take(&mut self.funcs),
                std::mem::take(&mut self.pos),
                std::mem::take(&mut self.locals),
                std::mem::take(&mut self.fds),
                std::mem::take(&mut self.jobs),
            ));
        }
    }
}

impl Shell {
    /// Ends the innermost function's `local` frame: each variable it shadowed gets its
    /// old value back (or goes, if it had none). False when no frame was open.
    pub(crate) fn pop_local_frame(&mut self) -> bool {
        let Some(frame) = self.locals.pop() else {
            return false;
        };
        for (n, old) in frame.into_iter().rev() {
            match old {
                Some(v) => {
                    self.vars.insert(n, v);
                }
                None => {
                    self.vars.remove(&n);
                }
            }
        }
        true
    }

    pub fn new(pid: u32, cwd: String) -> Self {
        Shell {
            vars: VarMap::new(),
            funcs: imbl::HashMap::new(),
            pos: Rc::default(),
            arg0: "bash".into(),
            opts: Opts::default(),
            cwd,
            dirstack: Vec::new(),
            traps: imbl::HashMap::new(),
            fds: Vec::new(),
            locals: Vec::new(),
            status: 0,
            subst_status: None,
            pipestatus: vec![0],
            jobs: Vec::new(),
            last_bg: None,
            pid,
            bashpid: pid,
            umask: 0o022,
            cond: 0,
            loops: 0,
            funcdepth: 0,
            in_trap: false,
            getopts_sub: 0,
            funcnames: Vec::new(),
        }
    }

    pub fn get_fd(&self, n: i32) -> Option<Fd> {
        if n < 0 {
            return None;
        }
        self.fds.get(n as usize).cloned().flatten()
    }

    /// Sets (or with `None` closes) descriptor `n`. Redirections refuse descriptors from
    /// [`FD_LIMIT`] on before they get here ([`Interp::apply_redirs`]); closing one that
    /// is not open (any number) changes nothing.
    pub fn set_fd(&mut self, n: i32, fd: Option<Fd>) {
        let Ok(n) = usize::try_from(n) else {
            return;
        };
        if fd.is_none() && n >= self.fds.len() {
            return;
        }
        if self.fds.len() <= n {
            self.fds.resize(n + 1, None);
        }
        self.fds[n] = fd;
    }

    /// The variable `name` stands for, following namerefs (`None` when it is no nameref).
    pub fn resolve(&self, name: &str) -> Option<String> {
        let mut cur = match self.vars.get(name) {
            Some(v) if v.nameref => v.as_str(),
            _ => return None,
        };
        for _ in 0..8 {
            match self.vars.get(&cur) {
                Some(v) if v.nameref => cur = v.as_str(),
                _ => break,
            }
        }
        Some(cur)
    }

    pub fn get(&self, name: &str) -> Option<String> {
        self.get_str(name).map(String::from)
    }

    /// [`Shell::get`] borrowed: no copy of a big value (PATH or IFS grown to megabytes).
    pub fn get_str(&self, name: &str) -> Option<&str> {
        if let Some(t) = self.resolve(name) {
            return self.vars.get(&t).map(|v| v.str_ref());
        }
        self.vars.get(name).map(|v| v.str_ref())
    }

    pub fn getv(&self, name: &str) -> String {
        self.get(name).unwrap_or_default()
    }

    pub fn set(&mut self, name: &str, value: String) -> Result<(), String> {
        if let Some(t) = self.resolve(name) {
            if t != name && !t.is_empty() {
                return self.set(&t, value);
            }
        }
        if let Some(v) = self.vars.get_mut(name) {
            if v.readonly {
                return Err(format!("{name}: readonly variable"));
            }
            match &mut v.value {
                Value::Arr(m) => {
                    m.insert(0, value.into());
                }
                Value::Assoc(m) => {
                    m.insert("0".into(), value);
                }
                Value::Str(s) => *s = value.into(),
            }
            if self.opts.allexport {
                v.exported = true;
            }
        } else {
            let mut v = Var::s(value);
            v.exported = self.opts.allexport;
            self.vars.insert(name.to_string(), v);
        }
        Ok(())
    }

    pub fn unset(&mut self, name: &str) -> Result<(), String> {
        if let Some(t) = self.resolve(name) {
            if t != name {
                return self.unset(&t);
            }
        }
        if let Some(v) = self.vars.get(name) {
            if v.readonly {
                return Err(format!("{name}: cannot unset: readonly variable"));
            }
        }
        self.vars.remove(name);
        Ok(())
    }

    /// Saves `name` in the innermost local frame (once).
    pub fn make_local(&mut self, name: &str) {
        let old = self.vars.get(name).cloned();
        if let Some(frame) = self.locals.last_mut() {
            if frame.iter().any(|(n, _)| n == name) {
                return;
            }
            frame.push((name.to_string(), old));
        }
    }

    pub fn exported_env(&self) -> BTreeMap<String, String> {
        self.vars
            .iter()
            .filter(|(_, v)| v.exported && matches!(v.value, Value::Str(_)))
            .map(|(k, v)| (k.clone(), v.as_str()))
            .collect()
    }

    /// `$IFS` (space, tab and newline when unset), borrowed.
    pub fn ifs(&self) -> &str {
        self.get_str("IFS").unwrap_or(" \t\n")
    }

    /// The set of `$IFS`'s characters ([`IfsChars::new`]); `None` when the command must
    /// stop.
    pub fn ifs_chars(&self) -> Option<IfsChars> {
        IfsChars::new(self.ifs())
    }

    /// A subshell copy: same everything, traps reset.
    pub fn subshell(&self, bashpid: u32) -> Shell {
        let mut s = self.clone();
        s.traps.retain(|_, v| v.is_empty());
        s.bashpid = bashpid;
        s
    }
}

/// Everything one machine keeps between commands.
pub struct World {
    pub vfs: Vfs,
    pub clock_ns: u64,
    pub epoch: i64,
    pub next_pid: u32,
    pub fuel_left: u64,
    pub output_left: u64,
    /// The machine's one memory budget in bytes (see [`crate::mem`]).
    pub memory_limit: u64,
    /// What this thread's meter held when the running command started.
    pub memory_base: u64,
    /// What the machine's shell session holds between its commands (metered on the
    /// session's own thread, so a `run` on another thread adds it here); zero while the
    /// session's own command runs, whose thread's meter counts it.
    pub session_held: u64,
    pub unsupported: Vec<String>,
    pub rng: u32,
    /// Set by `close`: the running command stops at its next check.
    pub closing: Arc<std::sync::atomic::AtomicBool>,
    /// The running command's cancel flag (set when its `run` future is dropped).
    pub cancel: Option<Arc<std::sync::atomic::AtomicBool>>,
}

/// Most background jobs live at once under one background job (the process limit a fork
/// bomb runs into).
pub const MAX_NESTED_JOBS: u32 = 4096;

/// The deadline id a cancelled command unwinds with (no real deadline has it).
pub const CANCELLED: u32 = u32::MAX;

/// What a long step with no [`Interp`] at hand (building a big word, splitting it,
/// padding a printf field) looks at to know the running command must stop: its
/// wall-clock deadline, and the flags that cancel it (the machine's `closing`, the
/// command's own cancel flag, which a session's `interrupt` sets).
#[derive(Default)]
struct StopWhen {
    wall: Option<Instant>,
    flags: Vec<Arc<std::sync::atomic::AtomicBool>>,
}

thread_local! {
    /// The running command's [`StopWhen`]: loops that have no [`Interp`] at hand stop
    /// when [`stop_due`] says so, and their caller turns that into the timeout or the
    /// cancellation ([`Interp::interrupted`]).
    static STOP_WHEN: std::cell::RefCell<StopWhen> = std::cell::RefCell::new(StopWhen::default());
}

thread_local! {
    /// Set once the running command's own timeout (or a cancel) fired: what is dropped
    /// from then on is buried instead (see [`crate::mem::bury`]).
    static ENDING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the running command's own timeout (or a cancel) fired on this thread: from
/// then on only unwinding is left, and what a [`Shell`] holds is buried, not dropped.
pub fn ending() -> bool {
    ENDING.with(|e| e.get())
}

/// Marks (or, at a command's start, clears) [`ending`].
pub fn set_ending(v: bool) {
    ENDING.with(|e| e.set(v));
}

/// Clears this thread's [`StopWhen`] when dropped.
pub struct WallGuard(());

/// Sets this thread's wall-clock deadline and the flags that cancel the running command
/// (see [`stop_due`]) until the guard drops.
pub fn set_wall(
    at: Option<Instant>,
    flags: impl IntoIterator<Item = Arc<std::sync::atomic::AtomicBool>>,
) -> WallGuard {
    STOP_WHEN.with(|w| {
        *w.borrow_mut() = StopWhen {
            wall: at,
            flags: flags.into_iter().collect(),
        }
    });
    WallGuard(())
}

impl Drop for WallGuard {
    fn drop(&mut self) {
        let _ = STOP_WHEN.try_with(|w| *w.borrow_mut() = StopWhen::default());
    }
}

/// Whether the running command must stop: it was cancelled (interrupted, its machine is
/// closing) or its wall-clock deadline passed. Reads a few atomics and the clock: callers
/// look once per [`CHUNK_BYTES`] (or a similar piece) of work.
pub fn stop_due() -> bool {
    use std::sync::atomic::Ordering::Relaxed;
    STOP_WHEN.with(|w| {
        let w = w.borrow();
        w.flags.iter().any(|f| f.load(Relaxed)) || w.wall.is_some_and(|at| Instant::now() >= at)
    })
}

/// Paces a long loop that has no [`Interp`] at hand: [`Pacer::due`] counts its work and
/// looks at [`stop_due`] once per [`CHUNK_BYTES`] units of it.
#[derive(Default)]
pub struct Pacer(usize);

impl Pacer {
    /// Counts `n` units (bytes, characters) of work; true when the command must stop.
    pub fn due(&mut self, n: usize) -> bool {
        self.0 = self.0.saturating_add(n);
        if self.0 >= CHUNK_BYTES {
            self.0 = 0;
            return stop_due();
        }
        false
    }
}

/// `a` followed by `b` (a `+=` assignment), copied one [`CHUNK_BYTES`] piece at a time;
/// `None` when the command must stop ([`stop_due`], looked at between pieces).
pub fn concat_paced(a: &str, b: &str) -> Option<String> {
    let mut out = String::with_capacity(a.len().saturating_add(b.len()));
    for part in [a, b] {
        let mut rest = part;
        while !rest.is_empty() {
            let mut end = rest.len().min(CHUNK_BYTES);
            while !rest.is_char_boundary(end) {
                end += 1;
            }
            let (piece, tail) = rest.split_at(end);
            out.push_str(piece);
            rest = tail;
            if !rest.is_empty() && stop_due() {
                return None;
            }
        }
    }
    Some(out)
}

/// `data` decoded as [`String::from_utf8_lossy`] decodes it (each invalid sequence one
/// U+FFFD), one [`CHUNK_BYTES`] piece of `data` at a time; `None` when the command must stop
/// ([`stop_due`], looked at between pieces) or the text would hold more than `max_bytes`
/// bytes (a replacement character is 3 bytes, so random bytes decode to about twice their
/// size). Pieces end before a byte that cannot continue a UTF-8 sequence, so no sequence
/// is cut and the text is the same as one `from_utf8_lossy` of the whole.
pub fn lossy_paced(data: &[u8], max_bytes: usize) -> Option<String> {
    if data.len() < CHUNK_BYTES {
        let s = String::from_utf8_lossy(data);
        return (s.len() <= max_bytes).then(|| s.into_owned());
    }
    let is_cont = |b: u8| b & 0xC0 == 0x80;
    let mut out = String::with_capacity(data.len().min(max_bytes));
    let mut rest = data;
    while !rest.is_empty() {
        let mut end = rest.len().min(CHUNK_BYTES);
        if end < rest.len() {
            // back up to a byte that starts a sequence (or ASCII); four continuation
            // bytes in a row cannot all belong to one sequence, so cut there if so
            let start = (0..4)
                .map(|k| end - k)
                .find(|&e| !is_cont(rest[e]))
                .unwrap_or(end);
            end = start;
        }
        let (piece, tail) = rest.split_at(end);
        for chunk in piece.utf8_chunks() {
            out.push_str(chunk.valid());
            if !chunk.invalid().is_empty() {
                out.push(char::REPLACEMENT_CHARACTER);
            }
        }
        if out.len() > max_bytes {
            return None;
        }
        rest = tail;
        if !rest.is_empty() && stop_due() {
            return None;
        }
    }
    Some(out)
}

/// The first file descriptor a redirection may not open: bash's limit under the usual soft
/// limit of open files (`ulimit -n` is 1024 on Debian and most distributions). Each shell
/// and subshell holds a table of its descriptors, so a bound keeps that table small.
pub const FD_LIMIT: i32 = 1024;

/// Bytes a long copy or scan handles between two looks at the clock.
pub const CHUNK_BYTES: usize = 1 << 20;

/// How many elements an array assignment stores between two looks at the clock.
pub const ITEMS_PER_CHECK: usize = 4096;

/// Drops `v`, a variable's replaced value: a big array a piece at a time
/// ([`crate::mem::drop_paced`]), so replacing a million-element array (`a=("${a[@]}")`,
/// `a=($(cat f))`) does not free it all in one step past the deadline.
pub fn drop_value(v: Value) {
    match v {
        Value::Arr(m) if m.len() > crate::mem::FREE_PER_CHECK => crate::mem::drop_paced(m),
        Value::Assoc(m) if m.map.len() > crate::mem::FREE_PER_CHECK => {
            crate::mem::drop_paced(m.map)
        }
        _ => {}
    }
}

/// Drops a replaced list of positional parameters: a big one held only here a piece at a
/// time ([`crate::mem::drop_paced`]); a shared one is only released.
pub fn drop_pos(pos: Rc<Vec<MStr>>) {
    if pos.len() > crate::mem::FREE_PER_CHECK {
        if let Ok(v) = Rc::try_unwrap(pos) {
            crate::mem::drop_paced(v);
        }
    }
}

/// How many PATH directories [`Interp::find_program`] tries between two looks at the clock
/// (each is a path resolution in the virtual filesystem, well under a microsecond).
pub const PATH_DIRS_PER_CHECK: usize = 64;

impl World {
    pub fn sync_time(&mut self) {
        self.vfs.now = self.epoch + (self.clock_ns / 1_000_000_000) as i64;
    }
    pub fn new_pid(&mut self) -> u32 {
        self.next_pid += 1;
        self.next_pid
    }
}

/// One running command's interpreter over the world.
pub struct Interp<'a> {
    pub w: &'a mut World,
    pub deadlines: Vec<(u32, u64)>,
    pub next_deadline: u32,
    pub wall: Option<(Instant, u32)>,
    /// Whether the wall-clock deadline was seen to pass.
    pub wall_passed: std::cell::Cell<bool>,
    pub ticks: u64,
    pub bg_depth: u32,
    /// Background jobs started inside the outermost running background job (all still
    /// live, as their ancestor runs); bounded by [`MAX_NESTED_JOBS`].
    pub bg_nested: u32,
    /// Background writes not yet delivered: (virtual time, sequence, stream, bytes).
    pub pending: Vec<(u64, u64, Fd, MBytes)>,
    pub seq: u64,
    /// How deeply command executions nest right now (eval, source, functions, subshells).
    pub depth: u32,
    /// Expanding an assignment value: `~` after `:` expands too.
    pub tilde_after_colon: bool,
    /// Bytes written since the clock was last looked at for writing.
    pub written: u64,
    /// A `run_stream`'s output, handed on as the command writes (see [`crate::live`]).
    pub live: Option<Rc<RefCell<LiveSink>>>,
}

/// Ticks between two looks at the wall clock in [`Interp::tick`] (a look costs tens of
/// nanoseconds; a tick that does much work, such as a 64 KiB chunk, is also bounded by
/// [`WRITE_BYTES_PER_CHECK`]).
pub const TICKS_PER_CHECK: u64 = 64;

/// Bytes [`Interp::write`] passes on between two looks at the wall clock.
pub const WRITE_BYTES_PER_CHECK: u64 = 256 * 1024;

const KEYWORDS: &[&str] = &[
    "if", "then", "else", "elif", "fi", "case", "esac", "for", "select", "while", "until", "do",
    "done", "in", "function", "time", "{", "}", "!", "[[", "]]", "coproc",
];

pub fn is_keyword(s: &str) -> bool {
    KEYWORDS.contains(&s)
}

thread_local! {
    static PARSE_CACHE: RefCell<HashMap<String, Result<Arc<ast::Program>, ParseFail>>> = RefCell::new(HashMap::new());
}

/// The deepest bracket nesting the simulator parses; brush-parser recurses once per level,
/// so deeper input is refused instead of risking the host's stack.
pub const MAX_NESTING: usize = 200;

/// The deepest command nesting (eval in eval, functions, sources, subshells) the simulator
/// runs before failing the command, so runaway recursion cannot exhaust host memory.
pub const MAX_EXEC_DEPTH: u32 = 10_000;

/// Whether `text` nests `(`, `{`, `[` (quoted or not) at most [`MAX_NESTING`] deep.
pub fn nesting_ok(text: &str) -> bool {
    let mut depth = 0usize;
    let mut kw_depth = 0usize;
    for b in text.bytes() {
        match b {
            b'(' | b'{' | b'[' => {
                depth += 1;
                if depth > MAX_NESTING {
                    return false;
                }
            }
            b')' | b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    // brush-parser recurses once per operator of a `[[ ]]` expression too: 5,000 `&& a`
    // or `!` overflowed the parser's stack and aborted the process
    if !test_operators_ok(text) {
        return false;
    }
    // compound commands nest by keywords too
    for w in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        match w {
            "if" | "case" | "do" => {
                kw_depth += 1;
                if kw_depth > MAX_NESTING {
                    return false;
                }
            }
            "fi" | "esac" | "done" => kw_depth = kw_depth.saturating_sub(1),
            _ => {}
        }
    }
    true
}

/// Whether every `[[ … ]]` in `text` holds at most [`MAX_NESTING`] of the operators
/// `&&`, `||` and `!` (counted up to the next `]]`, quoted or not: a conservative count).
fn test_operators_ok(text: &str) -> bool {
    let mut rest = text;
    while let Some(at) = rest.find("[[") {
        let body = &rest[at + 2..];
        let end = body.find("]]").unwrap_or(body.len());
        let body = &body[..end];
        let bytes = body.as_bytes();
        let mut ops = body.matches("&&").count() + body.matches("||").count();
        for (i, &b) in bytes.iter().enumerate() {
            if b == b'!' && (i == 0 || matches!(bytes[i - 1], b' ' | b'\t' | b'\n' | b'(' | b'!')) {
                ops += 1;
            }
        }
        if ops > MAX_NESTING {
            return false;
        }
        rest = &body[end.min(body.len())..];
        if rest.is_empty() {
            break;
        }
    }
    true
}

/// Runs a parser on a stack big enough for [`MAX_NESTING`] levels, whatever thread calls.
/// A panic inside the parser (brush-parser 0.4.0 panics on some input, e.g. an fd number
/// over `i32` or a here-document inside `${...}`) comes back as an error, which callers
/// report as bash reports a syntax error.
pub fn with_parser_stack<T, E: std::fmt::Display>(
    f: impl FnOnce() -> Result<T, E>,
) -> Result<T, String> {
    stacker::maybe_grow(
        4 * 1024 * 1024,
        32 * 1024 * 1024,
        || match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => Err("the parser cannot read this input".to_string()),
        },
    )
}

/// Writes `; ;` for `;;` inside `for (( ... ))` headers.
fn space_arith_for_semicolons(script: &str) -> String {
    let mut out = String::with_capacity(script.len() + 8);
    let mut rest = script;
    while let Some(i) = rest.find("((") {
        let before = rest[..i].trim_end();
        out.push_str(&rest[..i + 2]);
        rest = &rest[i + 2..];
        if !before.ends_with("for") {
            continue;
        }
        let end = rest.find("))").unwrap_or(rest.len());
        out.push_str(&rest[..end].replace(";;", "; ;"));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// Why a script text did not parse.
#[derive(Debug, Clone)]
pub enum ParseFail {
    /// The text ends inside a command (an open quote, here-document, substitution or
    /// compound command): more text could complete it. The message is bash's syntax error
    /// should no more text come.
    Incomplete(String),
    /// A syntax error: bash's message, and the (1-based) line of the text it is on when
    /// the parser tells.
    Syntax(String, Option<usize>),
    /// The command must stop ([`stop_due`], looked at while the text was read).
    Stopped,
}

impl ParseFail {
    /// The syntax error to print; `None` for [`ParseFail::Stopped`].
    pub fn message(&self) -> Option<&str> {
        match self {
            ParseFail::Incomplete(m) | ParseFail::Syntax(m, _) => Some(m),
            ParseFail::Stopped => None,
        }
    }
}

/// How many bytes of a script text brush-parser's tokenizer reads between two looks at
/// [`stop_due`] (it reads at a few hundred nanoseconds a byte).
pub const PARSE_BYTES_PER_CHECK: usize = 16 * 1024;

/// A script text as the parser reads it, looking at [`stop_due`] every
/// [`PARSE_BYTES_PER_CHECK`] bytes: brush-parser tokenizes its whole input before it parses,
/// and this is what lets a deadline end the reading of a big text. Once the command must
/// stop it fails the read (the parse then fails) and records why.
struct StopReader<'a> {
    rest: &'a [u8],
    since_check: usize,
    stopped: bool,
}

impl std::io::Read for StopReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let avail = std::io::BufRead::fill_buf(self)?;
        let n = avail.len().min(buf.len());
        buf[..n].copy_from_slice(&avail[..n]);
        std::io::BufRead::consume(self, n);
        Ok(n)
    }
}

impl std::io::BufRead for StopReader<'_> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        if self.since_check >= PARSE_BYTES_PER_CHECK {
            self.since_check = 0;
            if stop_due() {
                self.stopped = true;
            }
        }
        if self.stopped {
            return Err(std::io::Error::other("the command must stop"));
        }
        // never more than up to the next look at the clock
        let n = self
            .rest
            .len()
            .min(PARSE_BYTES_PER_CHECK - self.since_check);
        Ok(&self.rest[..n])
    }

    fn consume(&mut self, n: usize) {
        let n = n.min(self.rest.len());
        self.rest = &self.rest[n..];
        self.since_check += n;
    }
}

/// Whether brush-parser's error says the text ended inside a command (see
/// [`ParseFail::Incomplete`]).
fn ends_inside_a_command(e: &brush_parser::ParseError) -> bool {
    use brush_parser::{ParseError as P, TokenizerError as T};
    match e {
        P::ParsingAtEndOfInput => true,
        P::Tokenizing { inner, .. } => matches!(
            inner,
            T::UnterminatedEscapeSequence
                | T::UnterminatedSingleQuote(_)
                | T::UnterminatedAnsiCQuote(_)
                | T::UnterminatedDoubleQuote(_)
                | T::UnterminatedBackquote(_)
                | T::UnterminatedExtendedGlob(_)
                | T::UnterminatedVariable
                | T::UnterminatedCommandSubstitution
                | T::UnterminatedExpansion
                | T::UnterminatedHereDocuments(..)
        ),
        P::ParsingNear(_) => false,
    }
}

/// Parses `script` (not cached), its reading paced by [`StopReader`].
fn parse_uncached(script: &str) -> Result<Arc<ast::Program>, ParseFail> {
    if !nesting_ok(script) {
        return Err(ParseFail::Syntax(
            format!("syntax error: nesting deeper than {MAX_NESTING} levels is not supported"),
            None,
        ));
    }
    let opts = brush_parser::ParserOptions::default();
    let parse = |text: &str| {
        let mut reader = StopReader {
            rest: text.as_bytes(),
            since_check: 0,
            stopped: false,
        };
        let mut incomplete = false;
        let mut line = None;
        let r = with_parser_stack(|| {
            let mut p = brush_parser::Parser::new(&mut reader, &opts);
            p.parse_program().map(Arc::new).inspect_err(|e| {
                incomplete = ends_inside_a_command(e);
                line = match e {
                    brush_parser::ParseError::ParsingNear(at) => Some(at.line),
                    brush_parser::ParseError::Tokenizing { position, .. } => {
                        position.as_ref().map(|at| at.line)
                    }
                    brush_parser::ParseError::ParsingAtEndOfInput => None,
                };
            })
        });
        match r {
            Ok(p) => Ok(p),
            Err(_) if reader.stopped => Err(ParseFail::Stopped),
            Err(e) if incomplete => Err(ParseFail::Incomplete(format!("syntax error: {e}"))),
            Err(e) => Err(ParseFail::Syntax(format!("syntax error: {e}"), line)),
        }
    };
    let mut r = parse(script);
    if matches!(r, Err(ParseFail::Incomplete(_) | ParseFail::Syntax(..))) && script.contains("((") {
        // brush-parser reads the `;;` of `for ((;;))` as a case terminator
        let fixed = space_arith_for_semicolons(script);
        if fixed != script {
            match parse(&fixed) {
                Ok(p) => r = Ok(p),
                Err(ParseFail::Stopped) => r = Err(ParseFail::Stopped),
                Err(_) => {}
            }
        }
    }
    r
}

/// Parses `script`; a text of at most 64 KiB is parsed once per thread and remembered.
pub fn parse_program(script: &str) -> Result<Arc<ast::Program>, ParseFail> {
    let small = script.len() <= 64 * 1024;
    if small {
        if let Some(hit) = PARSE_CACHE.with(|c| c.borrow().get(script).cloned()) {
            return hit;
        }
    }
    let r = parse_uncached(script);
    // cache small scripts only, so the cache stays small (at most ~512 x 64 KiB of text);
    // a parse cut short by the deadline is no answer
    if small && !matches!(r, Err(ParseFail::Stopped)) {
        PARSE_CACHE.with(|c| {
            let mut c = c.borrow_mut();
            if c.len() > 512 {
                c.clear();
            }
            c.insert(script.to_string(), r.clone());
        });
    }
    r
}

/// Scripts longer than this are parsed and run a piece of about this size at a time (see
/// [`Interp::run_script`]).
pub const SCRIPT_PIECE_BYTES: usize = 16 * 1024;

/// Where a piece of `script` that starts at `start` and holds at least `want` bytes ends:
/// after the first newline from there that does not continue its line (a newline after an
/// odd number of backslashes does), or at the end of the script.
pub fn piece_end(script: &str, start: usize, want: usize) -> usize {
    let bytes = script.as_bytes();
    let mut from = start.saturating_add(want.max(1)) - 1;
    while from < bytes.len() {
        let Some(i) = bytes[from..]
            .iter()
            .position(|&b| b == b'\n')
            .map(|i| from + i)
        else {
            break;
        };
        let backslashes = bytes[start..i]
            .iter()
            .rev()
            .take_while(|&&b| b == b'\\')
            .count();
        if backslashes % 2 == 0 {
            return i + 1;
        }
        from = i + 1;
    }
    bytes.len()
}

impl<'a> Interp<'a> {
    pub fn new(w: &'a mut World) -> Self {
        Interp {
            w,
            deadlines: Vec::new(),
            next_deadline: 1,
            wall: None,
            wall_passed: std::cell::Cell::new(false),
            ticks: 0,
            bg_depth: 0,
            bg_nested: 0,
            pending: Vec::new(),
            seq: 0,
            depth: 0,
            tilde_after_colon: false,
            written: 0,
            live: None,
        }
    }

    // ---------- budgets and time ----------

    pub fn tick(&mut self) -> R<()> {
        self.ticks += 1;
        if self.w.fuel_left == 0 {
            return Err(Ctl::Budget("cpu fuel exhausted".into()));
        }
        self.w.fuel_left -= 1;
        if self.ticks.is_multiple_of(TICKS_PER_CHECK) || self.wall_passed.get() || self.cancelled()
        {
            self.check_time()?;
            if self.live.as_ref().is_some_and(|l| l.borrow().due()) {
                self.live_flush()?;
            }
        }
        self.check_memory()?;
        self.check_deadline()
    }

    /// Bytes the machine holds now: metered values and buffers, and its files.
    pub fn memory_used(&self) -> u64 {
        crate::mem::held()
            .saturating_sub(self.w.memory_base)
            .saturating_add(self.w.session_held)
            .saturating_add(self.w.vfs.used_bytes)
    }

    /// Ends the machine when it holds more than its memory budget.
    pub fn check_memory(&self) -> R<()> {
        let used = self.memory_used();
        if used > self.w.memory_limit {
            return Err(Ctl::Budget(format!(
                "memory limit exceeded: the machine holds {used} bytes, more than its budget \
                 of {} bytes (variables, arrays, pipes, output and files together)",
                self.w.memory_limit
            )));
        }
        Ok(())
    }

    /// Why a step that stopped early (a word over its budget or past the deadline) ended:
    /// the timeout or cancellation when one is due, else the memory budget.
    pub fn interrupted(&self) -> Ctl {
        match self.check_time() {
            Err(c) => c,
            Ok(()) => Ctl::Budget("memory limit exceeded".into()),
        }
    }

    /// Whether the command was cancelled (a session's `interrupt`, a dropped future) or its
    /// machine is closing: two atomic loads, looked at on every tick.
    fn cancelled(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        self.w.closing.load(Relaxed) || self.w.cancel.as_ref().is_some_and(|c| c.load(Relaxed))
    }

    /// Checks now (not every 256th time, as [`Interp::tick`] does) whether the command was
    /// cancelled or its wall-clock deadline passed: what long single steps (a pattern
    /// match, a big copy) call between their pieces.
    pub fn check_time(&self) -> R<()> {
        if self.cancelled() {
            set_ending(true);
            return Err(Ctl::Timeout(CANCELLED));
        }
        if let Some((at, id)) = self.wall {
            // once passed, every later tick looks again: a step that swallowed the
            // timeout (a failed test operand, a subscript) cannot outlive it
            if self.wall_passed.get() || Instant::now() >= at {
                self.wall_passed.set(true);
                set_ending(true);
                return Err(Ctl::Timeout(id));
            }
        }
        Ok(())
    }

    /// Metered copies of `args` as positional parameters, made [`ITEMS_PER_CHECK`] at a
    /// time with a look at the clock and the memory budget between: a million words
    /// (`set -- $(cat f)`, `f $(cat f)`) copied in one step ran tens of milliseconds past
    /// the deadline. `Err` when the command must stop (what was made is buried).
    pub fn positional(&self, args: &[String]) -> R<Rc<Vec<MStr>>> {
        let mut v = Vec::with_capacity(args.len());
        for (i, a) in args.iter().enumerate() {
            if i % ITEMS_PER_CHECK == ITEMS_PER_CHECK - 1 {
                if let Err(e) = self.check_time().and_then(|()| self.check_memory()) {
                    crate::mem::bury(v);
                    return Err(e);
                }
            }
            v.push(MStr::from(a.as_str()));
        }
        Ok(Rc::new(v))
    }

    pub fn check_deadline(&self) -> R<()> {
        let mut best: Option<(u32, u64)> = None;
        for &(id, at) in &self.deadlines {
            if best.is_none_or(|(_, b)| at <= b) {
                best = Some((id, at));
            }
        }
        if let Some((id, at)) = best {
            if self.w.clock_ns >= at {
                if self.wall.is_some_and(|w| w.1 == id) {
                    set_ending(true);
                }
                return Err(Ctl::Timeout(id));
            }
        }
        Ok(())
    }

    pub fn push_deadline(&mut self, at: u64) -> u32 {
        let id = self.next_deadline;
        self.next_deadline += 1;
        self.deadlines.push((id, at));
        id
    }

    pub fn pop_deadline(&mut self, id: u32) {
        self.deadlines.retain(|(i, _)| *i != id);
    }

    pub fn sleep_ns(&mut self, ns: u64) -> R<()> {
        let target = self.w.clock_ns.saturating_add(ns);
        let min = self.deadlines.iter().map(|d| d.1).min();
        if let Some(m) = min {
            if m <= target {
                self.w.clock_ns = self.w.clock_ns.max(m);
                self.w.sync_time();
                return self.check_deadline();
            }
        }
        self.w.clock_ns = target;
        self.w.sync_time();
        if self.bg_depth == 0 && !self.pending.is_empty() {
            self.flush_pending(|t| t <= target)?;
        }
        self.tick()
    }

    pub fn unsupported(&mut self, sh: &mut Shell, what: &str) -> R<i32> {
        let msg = format!("unsupported: {what}");
        self.record(&msg);
        self.err(sh, &format!("bash: {msg} (shellbox-sim)"));
        Ok(2)
    }

    /// Notes something that crossed the simulator's boundary (see `SimMachine::unsupported`).
    pub fn record(&mut self, msg: &str) {
        if !self.w.unsupported.iter().any(|m| m == msg) && self.w.unsupported.len() < 1000 {
            self.w.unsupported.push(msg.to_string());
        }
    }

    // ---------- I/O ----------

    pub fn write(&mut self, sh: &Shell, fd: i32, data: &[u8]) -> R<bool> {
        if data.is_empty() {
            return Ok(true);
        }
        // a program that writes much per tick (seq, yes, cat of a device) looks at the
        // clock once per WRITE_BYTES_PER_CHECK bytes, not only every TICKS_PER_CHECK ticks
        self.written = self.written.saturating_add(data.len() as u64);
        if self.written >= WRITE_BYTES_PER_CHECK {
            self.written = 0;
            self.check_time()?;
        }
        let Some(f) = sh.get_fd(fd) else {
            return Ok(false);
        };
        if self.bg_depth == 0 && !self.pending.is_empty() {
            let now = self.w.clock_ns;
            self.flush_pending(|t| t < now)?;
        }
        self.write_fd(&f, data)
    }

    /// Delivers queued background writes whose time passes `due`, in time order.
    pub fn flush_pending(&mut self, due: impl Fn(u64) -> bool) -> R<()> {
        // called on every write of the foreground: when nothing is due (the usual case), a
        // scan, not a partition that moves and reallocates every queued write (which made
        // each of 50,000 error lines cost microseconds)
        if !self.pending.iter().any(|p| due(p.0)) {
            return Ok(());
        }
        let all = std::mem::take(&mut self.pending);
        let (mut now, later): (Vec<_>, Vec<_>) = all.into_iter().partition(|p| due(p.0));
        self.pending = later;
        now.sort_by_key(|p| (p.0, p.1));
        let mut bytes = 0u64;
        for (_, _, f, data) in now {
            // many queued writes (a background `cat /dev/zero`) look at the clock as one
            // program's writes do
            bytes = bytes.saturating_add(data.len() as u64);
            if bytes >= WRITE_BYTES_PER_CHECK {
                bytes = 0;
                self.check_time()?;
            }
            self.write_fd(&f, &data)?;
        }
        Ok(())
    }

    /// Delivers every queued background write when the command has ended (also by its
    /// timeout): only those a caller can still see, into the captured stdout and stderr
    /// (each bounded by its limit) and into files. A pipe's or here-string's buffer has no
    /// reader left, so writes into it are dropped unread rather than copied; what is
    /// dropped goes to [`crate::mem::bury`], off the path that returns the result.
    pub fn flush_final(&mut self) -> R<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let mut all = std::mem::take(&mut self.pending);
        all.sort_by_key(|p| (p.0, p.1));
        let mut r = Ok(());
        for (_, _, f, data) in &all {
            let seen = matches!(
                *f.borrow(),
                Stream::Cap { .. }
                    | Stream::File { .. }
                    | Stream::Null
                    | Stream::Timed(_)
                    | Stream::Live(..)
            );
            if seen {
                if let Err(e) = self.write_fd(f, data) {
                    r = Err(e);
                    break;
                }
            }
        }
        crate::mem::bury(all);
        r
    }

    fn write_fd(&mut self, f: &Fd, data: &[u8]) -> R<bool> {
        let mut st = f.borrow_mut();
        match &mut *st {
            Stream::Pipe {
                data: d,
                lines,
                need,
            } => {
                let satisfied = match *need {
                    HeadNeed::Lines(n) => *lines >= n,
                    HeadNeed::Bytes(n) => d.len() >= n,
                };
                if satisfied && d.len() >= PIPE_CAPACITY {
                    // the reader has exited: SIGPIPE
                    return Err(Ctl::Exit(signal_exit_code(13)));
                }
                if matches!(need, HeadNeed::Lines(_)) {
                    *lines += data.iter().filter(|b| **b == b'\n').count();
                }
                d.extend_from_slice(data);
                let satisfied = match *need {
                    HeadNeed::Lines(n) => *lines >= n,
                    HeadNeed::Bytes(n) => d.len() >= n,
                };
                if satisfied && d.len() > PIPE_CAPACITY {
                    // the write filled the pipe; the reader took its part and exited
                    return Err(Ctl::Exit(signal_exit_code(13)));
                }
            }
            Stream::Timed(inner) => {
                self.seq += 1;
                self.pending.push((
                    self.w.clock_ns,
                    self.seq,
                    inner.clone(),
                    MBytes::new(data.to_vec()),
                ));
                drop(st);
                self.check_memory()?;
                return Ok(true);
            }
            Stream::Buf { data: d, .. } => {
                if self.memory_used().saturating_add(data.len() as u64) > self.w.memory_limit {
                    drop(st);
                    return Err(self.check_memory().err().unwrap_or_else(|| {
                        Ctl::Budget(
                            "memory limit exceeded: a buffer outgrew the machine's budget".into(),
                        )
                    }));
                }
                d.extend_from_slice(data);
            }
            Stream::Cap {
                data: d,
                limit,
                total,
            } => {
                // kept bytes count against the machine's cumulative output budget;
                // bytes past the command's own limit are only counted (truncation) and
                // cost CPU fuel per pipe-buffer's worth, so a flood under a small cap
                // keeps its first bytes and real status, as on local and docker
                let n = data.len() as u64;
                let room = limit.saturating_sub(d.len());
                let kept = room.min(data.len());
                if self.w.output_left < kept as u64 {
                    return Err(Ctl::Budget("output limit exceeded".into()));
                }
                self.w.output_left -= kept as u64;
                *total += n;
                d.extend_from_slice(&data[..kept]);
                let dropped = data.len() - kept;
                if dropped > 0 {
                    drop(st);
                    for _ in 0..dropped.div_ceil(PIPE_CAPACITY) {
                        self.tick()?;
                    }
                    return Ok(true);
                }
            }
            Stream::File { ino, pos, append } => {
                match self.w.vfs.write_at(*ino, *pos, data, *append) {
                    Ok(p) => *pos = p,
                    Err(Errno::NoSpc) => return Err(Ctl::Budget("disk limit exceeded".into())),
                    Err(_) => return Ok(false),
                }
            }
            Stream::Live(sink, kind) => {
                let (sink, kind) = (sink.clone(), *kind);
                drop(st);
                return self.live_write(&sink, kind, data);
            }
            Stream::Null => {}
            Stream::Zero | Stream::Random => return Ok(false),
        }
        drop(st);
        self.check_memory()?;
        Ok(true)
    }

    /// A write to a live stream: the part within the command's limit is queued (and
    /// charged to the machine's output budget), the rest counted as truncation and paid
    /// for in CPU fuel, as a captured stream's; the queue goes to the consumer when due.
    fn live_write(
        &mut self,
        sink: &Rc<RefCell<LiveSink>>,
        kind: OutputKind,
        data: &[u8],
    ) -> R<bool> {
        let i = LiveSink::index(kind);
        let kept = {
            let s = sink.borrow();
            s.limit.saturating_sub(s.kept[i]).min(data.len())
        };
        if self.w.output_left < kept as u64 {
            return Err(Ctl::Budget("output limit exceeded".into()));
        }
        self.w.output_left -= kept as u64;
        {
            let mut s = sink.borrow_mut();
            s.kept[i] += kept;
            s.total[i] = s.total[i].saturating_add(data.len() as u64);
        }
        for piece in data[..kept].chunks(crate::live::LIVE_CHUNK) {
            sink.borrow_mut().enqueue(kind, piece);
            if sink.borrow().due() {
                self.live_flush()?;
            }
        }
        let dropped = data.len() - kept;
        for _ in 0..dropped.div_ceil(PIPE_CAPACITY) {
            self.tick()?;
        }
        Ok(true)
    }

    /// Hands every queued live chunk to the consumer, waiting while it lags (looking at
    /// the deadline and cancellation between waits); a consumer that dropped the stream
    /// cancels the command.
    pub fn live_flush(&mut self) -> R<()> {
        let Some(sink) = self.live.clone() else {
            return Ok(());
        };
        let pipe = sink.borrow().pipe.clone();
        loop {
            let Some(event) = sink.borrow_mut().next_event() else {
                return Ok(());
            };
            match pipe.push(Ok(event), || self.check_time()) {
                Ok(()) => {}
                Err(Ok(crate::live::Gone)) => {
                    set_ending(true);
                    return Err(Ctl::Timeout(CANCELLED));
                }
                Err(Err(ctl)) => return Err(ctl),
            }
        }
    }

    pub fn out(&mut self, sh: &Shell, s: &str) -> R<bool> {
        self.write(sh, 1, s.as_bytes())
    }

    pub fn err(&mut self, sh: &Shell, s: &str) {
        let mut line = s.to_string();
        line.push('\n');
        let _ = self.write(sh, 2, line.as_bytes());
    }

    /// Reads everything left on fd `n`.
    pub fn read_all(&mut self, sh: &Shell, n: i32) -> Vec<u8> {
        let Some(f) = sh.get_fd(n) else {
            return Vec::new();
        };
        let mut st = f.borrow_mut();
        match &mut *st {
            Stream::Buf { data, pos } => {
                let out = data[*pos..].to_vec();
                *pos = data.len();
                out
            }
            Stream::File { ino, pos, .. } => {
                let d = self.w.vfs.data(*ino);
                let out = d.get(*pos..).unwrap_or(&[]).to_vec();
                *pos = d.len().max(*pos);
                out
            }
            Stream::Zero => {
                drop(st);
                self.endless_read().unwrap_or_default()
            }
            Stream::Random => {
                drop(st);
                self.endless_read().unwrap_or_default()
            }
            _ => Vec::new(),
        }
    }

    /// [`Interp::read_all`] without a copy when nothing of the buffer was read yet (a
    /// pipe's whole output, what `seq | grep` hands on): the bytes are moved out of the
    /// stream, which is left empty, and released from the memory budget, so the caller
    /// must charge them while it holds them (as [`crate::programs`]' `read_input` does).
    pub fn take_all(&mut self, sh: &Shell, n: i32) -> Vec<u8> {
        if let Some(f) = sh.get_fd(n) {
            if let Stream::Buf { data, pos: 0 } = &mut *f.borrow_mut() {
                return data.take();
            }
        }
        self.read_all(sh, n)
    }

    /// Reads up to and including `delim` (None at EOF with nothing read).
    pub fn read_until(
        &mut self,
        sh: &Shell,
        n: i32,
        delim: u8,
        max: Option<usize>,
    ) -> Option<(Vec<u8>, bool)> {
        let f = sh.get_fd(n)?;
        let mut st = f.borrow_mut();
        let (data, pos): (&[u8], &mut usize) = match &mut *st {
            Stream::Buf { data, pos } => (&data[..], pos),
            Stream::File { ino, pos, .. } => (self.w.vfs.data(*ino), pos),
            _ => return None,
        };
        if *pos >= data.len() {
            return None;
        }
        let rest = &data[*pos..];
        let limit = max.unwrap_or(usize::MAX).min(rest.len());
        match rest[..limit].iter().position(|b| *b == delim) {
            Some(i) => {
                let out = rest[..i].to_vec();
                *pos += i + 1;
                Some((out, true))
            }
            None => {
                let out = rest[..limit].to_vec();
                *pos += limit;
                Some((out, max.is_some() && limit == max.unwrap_or(0)))
            }
        }
    }

    // ---------- files ----------

    /// `n` bytes of `/dev/zero` (or `/dev/urandom`: a deterministic xorshift stream).
    pub fn endless_bytes(&mut self, random: bool, n: usize) -> Vec<u8> {
        if !random {
            return vec![0; n];
        }
        let mut x = self.w.rng.max(1);
        let v = (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x >> 24) as u8
            })
            .collect();
        self.w.rng = x;
        v
    }

    /// Reads an endless device whole: refused visibly (`EINVAL`, recorded as unsupported)
    /// instead of returning a wrong, finite stream. Readers that stop early stream it
    /// instead (`cat`, `head`).
    fn endless_read(&mut self) -> Result<Vec<u8>, Errno> {
        self.record("unsupported: reading an endless device (/dev/zero, /dev/urandom) to its end");
        Err(Errno::Inval)
    }

    /// Reads a file the way a utility opening it would (devices included).
    pub fn read_file(&mut self, sh: &Shell, path: &str) -> Result<Vec<u8>, Errno> {
        let ino = self.w.vfs.resolve(&sh.cwd, path, true)?;
        match &self.w.vfs.get(ino).kind {
            Kind::File(d) => Ok(d.clone()),
            Kind::Dir(..) => Err(Errno::IsDir),
            Kind::Exe(n) => Ok(format!("#!/bin/sh\n# shellbox-sim built-in {n}\n").into_bytes()),
            Kind::Dev(Dev::Null) => Ok(Vec::new()),
            Kind::Dev(Dev::Zero) => self.endless_read(),
            Kind::Dev(Dev::Urandom) => self.endless_read(),
            Kind::Dev(Dev::Fd(n)) => {
                let n = *n;
                Ok(self.read_all(sh, n))
            }
            Kind::Symlink(_) => Err(Errno::Loop),
        }
    }

    /// Opens a path for a redirection.
    pub fn open(
        &mut self,
        sh: &Shell,
        path: &str,
        write: bool,
        append: bool,
        truncate: bool,
        noclobber: bool,
    ) -> Result<Fd, Errno> {
        match self.w.vfs.resolve(&sh.cwd, path, true) {
            Ok(ino) => {
                let node = self.w.vfs.get(ino);
                match &node.kind {
                    Kind::Dev(Dev::Null) => return Ok(Rc::new(RefCell::new(Stream::Null))),
                    Kind::Dev(Dev::Zero) => return Ok(Rc::new(RefCell::new(Stream::Zero))),
                    Kind::Dev(Dev::Urandom) => return Ok(Rc::new(RefCell::new(Stream::Random))),
                    Kind::Dev(Dev::Fd(n)) => return sh.get_fd(*n).ok_or(Errno::NoEnt),
                    Kind::Dir(..) => return Err(Errno::IsDir),
                    _ => {}
                }
                if write && noclobber && matches!(node.kind, Kind::File(_)) {
                    return Err(Errno::Exist);
                }
                if write && node.mode & 0o222 == 0 {
                    // root may write anyway
                }
                if write && truncate {
                    self.w.vfs.truncate(ino);
                }
                Ok(Rc::new(RefCell::new(Stream::File {
                    ino,
                    pos: 0,
                    append,
                })))
            }
            Err(Errno::NoEnt) if write => {
                let mode = 0o666 & !sh.umask;
                let ino = self.w.vfs.create(&sh.cwd, path, mode, truncate)?;
                Ok(Rc::new(RefCell::new(Stream::File {
                    ino,
                    pos: 0,
                    append,
                })))
            }
            Err(e) => Err(e),
        }
    }

    // ---------- execution ----------

    pub fn run_program(&mut self, sh: &mut Shell, prog: &ast::Program) -> R<i32> {
        let mut st = 0;
        for cc in &prog.complete_commands {
            st = self.exec_list(sh, cc)?;
        }
        Ok(st)
    }

    /// Runs a script text in `sh` (eval, source, -c, a script file). A script longer than
    /// [`SCRIPT_PIECE_BYTES`] is parsed and run a piece of complete commands at a time, as
    /// bash reads and runs one command at a time, looking at the clock between pieces: a
    /// piece ends at a newline ([`piece_end`]), and one that ends inside a command grows to
    /// twice its size until it parses (parsing a megabyte of script takes brush-parser the
    /// better part of a second, so a whole big script is never one step).
    pub fn run_script(&mut self, sh: &mut Shell, script: &str) -> R<i32> {
        if script.len() <= SCRIPT_PIECE_BYTES {
            return match parse_program(script) {
                Ok(p) => self.run_program(sh, &p),
                Err(e) => self.syntax_error(sh, script, e, 0),
            };
        }
        let mut st = 0;
        let mut start = 0;
        // lines before the piece: a syntax error's line counts from the script's start
        let mut lines_before = 0;
        while start < script.len() {
            self.check_time()?;
            let mut want = SCRIPT_PIECE_BYTES;
            let (end, prog) = loop {
                let end = piece_end(script, start, want);
                match parse_program(&script[start..end]) {
                    Ok(p) => break (end, p),
                    Err(ParseFail::Incomplete(_)) if end < script.len() => {
                        want = want.saturating_mul(2);
                        self.check_time()?;
                    }
                    Err(e) => return self.syntax_error(sh, &script[start..end], e, lines_before),
                }
            };
            lines_before += script.as_bytes()[start..end]
                .iter()
                .filter(|b| **b == b'\n')
                .count();
            // a piece of comments and blank lines leaves the status as it is
            if !prog.complete_commands.is_empty() {
                st = self.run_program(sh, &prog)?;
            }
            start = end;
        }
        Ok(st)
    }

    /// A script (or the piece of one) that does not parse: bash reads and runs complete
    /// commands one at a time, so the longest run of whole lines before the bad one that
    /// parses still runs, then the syntax error is printed; status 2. The run is looked
    /// for among all runs in a script of at most 400 lines, else among the 400 longest
    /// that end before the error's line (none when the parser does not tell the line).
    /// `script` is a piece of a longer one after `lines_before` lines: the message's line
    /// counts from the whole script's start, as bash's does.
    /// Errors: the timeout, also when `e` is [`ParseFail::Stopped`].
    fn syntax_error(
        &mut self,
        sh: &mut Shell,
        script: &str,
        e: ParseFail,
        lines_before: usize,
    ) -> R<i32> {
        let at = match &e {
            ParseFail::Syntax(_, line) => *line,
            _ => None,
        };
        let Some(e) = e.message() else {
            return Err(self.interrupted());
        };
        let e = match at {
            Some(l) if lines_before > 0 => {
                // brush-parser writes "line L col C" (the last such in its message)
                let piece_at = format!("line {l} col");
                match e.rfind(&piece_at) {
                    Some(i) => format!(
                        "{}line {} col{}",
                        &e[..i],
                        l.saturating_add(lines_before),
                        &e[i + piece_at.len()..]
                    ),
                    None => e.to_string(),
                }
            }
            _ => e.to_string(),
        };
        let lines: Vec<&str> = script.split_inclusive('\n').collect();
        // the runs to try: lines[..k] for k in `longest` down to `shortest`
        let (longest, shortest) = match at {
            _ if lines.len() <= 400 => (lines.len().saturating_sub(1), 1),
            Some(l) => {
                let longest = l.saturating_sub(1).min(lines.len().saturating_sub(1));
                (longest, longest.saturating_sub(399).max(1))
            }
            None => (0, 1),
        };
        if longest >= shortest {
            for k in (shortest..=longest).rev() {
                self.check_time()?;
                let prefix: String = lines[..k].concat();
                match parse_program(&prefix) {
                    Ok(p) => {
                        self.run_program(sh, &p)?;
                        break;
                    }
                    Err(ParseFail::Stopped) => return Err(self.interrupted()),
                    Err(_) => {}
                }
            }
        }
        self.record(&format!("syntax: {e}"));
        self.err(sh, &format!("bash: {e}"));
        sh.status = 2;
        Ok(2)
    }

    pub fn exec_list(&mut self, sh: &mut Shell, list: &ast::CompoundList) -> R<i32> {
        let mut st = sh.status;
        for item in &list.0 {
            match item.1 {
                ast::SeparatorOperator::Async => {
                    self.run_background(sh, &item.0)?;
                    st = 0;
                }
                ast::SeparatorOperator::Sequence => {
                    st = self.exec_andor(sh, &item.0)?;
                }
            }
        }
        Ok(st)
    }

    fn run_background(&mut self, sh: &mut Shell, andor: &ast::AndOrList) -> R<()> {
        if self.bg_depth == 0 {
            self.bg_nested = 0;
        } else {
            self.bg_nested += 1;
            if self.bg_nested > MAX_NESTED_JOBS {
                // a fork bomb: bash's fork fails with EAGAIN once the process limit is hit
                self.err(sh, "bash: fork: retry: Resource temporarily unavailable");
                self.err(sh, "bash: fork: Resource temporarily unavailable");
                return Err(Ctl::Exit(254));
            }
        }
        let pid = self.w.new_pid();
        let mut sub = sh.subshell(pid);
        sub.set_fd(0, Some(Rc::new(RefCell::new(Stream::Null))));
        for n in [1, 2] {
            if let Some(f) = sub.get_fd(n) {
                let timed = matches!(&*f.borrow(), Stream::Timed(_));
                if !timed {
                    sub.set_fd(n, Some(Rc::new(RefCell::new(Stream::Timed(f)))));
                }
            }
        }
        let start = self.w.clock_ns;
        let cap = self.deadlines.iter().map(|d| d.1).min();
        let cap_id = cap.map(|at| self.push_deadline(at));
        self.bg_depth += 1;
        let r = self.exec_andor(&mut sub, andor);
        self.bg_depth -= 1;
        let r = match r {
            Ok(s) => Ok(Some(s)),
            Err(Ctl::Exit(s)) => Ok(Some(s)),
            Err(Ctl::Return(s)) => Ok(Some(s)),
            Err(Ctl::Break(_)) | Err(Ctl::Continue(_)) => Ok(Some(0)),
            Err(Ctl::Timeout(id)) if Some(id) == cap_id => Ok(None),
            Err(e) => Err(e),
        };
        if let Some(id) = cap_id {
            self.pop_deadline(id);
        }
        let status = match r {
            Ok(s) => s,
            Err(e) => {
                self.w.clock_ns = start;
                return Err(e);
            }
        };
        let status = match status {
            Some(s) => Some(self.run_exit_trap(&mut sub, s)?),
            None => None,
        };
        let finish = if status.is_none() {
            u64::MAX
        } else {
            self.w.clock_ns
        };
        self.w.clock_ns = start;
        self.w.sync_time();
        sh.jobs.push(Job {
            pid,
            status,
            finish,
            text: andor.to_string(),
            reported: false,
        });
        sh.last_bg = Some(pid);
        Ok(())
    }

    /// Waits for a job: advances the clock to its end.
    pub fn wait_job(&mut self, sh: &mut Shell, idx: usize) -> R<i32> {
        let job = sh.jobs[idx].clone();
        if job.finish > self.w.clock_ns {
            let ns = job.finish - self.w.clock_ns;
            self.sleep_ns(ns)?;
        }
        sh.jobs[idx].reported = true;
        if self.bg_depth == 0 {
            let until = job.finish.min(self.w.clock_ns);
            self.flush_pending(|t| t <= until)?;
        }
        Ok(job.status.unwrap_or(143))
    }

    pub fn exec_andor(&mut self, sh: &mut Shell, list: &ast::AndOrList) -> R<i32> {
        let n = list.additional.len();
        let mut last_idx = 0;
        let mut last_bang = list.first.bang;
        if n > 0 {
            sh.cond += 1;
        }
        let r = self.exec_pipeline(sh, &list.first);
        if n > 0 {
            sh.cond -= 1;
        }
        let mut st = r?;
        for (i, ao) in list.additional.iter().enumerate() {
            let (run, p) = match ao {
                ast::AndOr::And(p) => (st == 0, p),
                ast::AndOr::Or(p) => (st != 0, p),
            };
            if run {
                let final_one = i + 1 == n;
                if !final_one {
                    sh.cond += 1;
                }
                let r = self.exec_pipeline(sh, p);
                if !final_one {
                    sh.cond -= 1;
                }
                st = r?;
                last_idx = i + 1;
                last_bang = p.bang;
            }
        }
        let last = match last_idx {
            0 => &list.first,
            i => match &list.additional[i - 1] {
                ast::AndOr::And(p) | ast::AndOr::Or(p) => p,
            },
        };
        if st != 0 && last_idx == n && !last_bang && sh.cond == 0 && !is_compound_group(last) {
            self.on_failure(sh, st)?;
        }
        Ok(st)
    }

    fn on_failure(&mut self, sh: &mut Shell, st: i32) -> R<()> {
        let trap_applies = sh.funcdepth == 0 || sh.opts.errtrace;
        if let Some(t) = sh.traps.get("ERR").cloned().filter(|_| trap_applies) {
            if !t.is_empty() && !sh.in_trap {
                sh.in_trap = true;
                let r = self.run_script(sh, &t);
                sh.in_trap = false;
                r?;
                sh.status = st;
            }
        }
        if sh.opts.errexit {
            return Err(Ctl::Exit(st));
        }
        Ok(())
    }

    pub fn exec_pipeline(&mut self, sh: &mut Shell, p: &ast::Pipeline) -> R<i32> {
        if p.bang {
            sh.cond += 1;
        }
        let started = self.w.clock_ns;
        let r = self.exec_pipeline_inner(sh, p);
        if p.bang {
            sh.cond -= 1;
        }
        let mut st = r?;
        if let Some(t) = &p.timed {
            // `time`: elapsed virtual time; the simulator spends no user or system time
            let ns = self.w.clock_ns.saturating_sub(started);
            let secs = ns as f64 / 1e9;
            let text = if t.is_posix_output() {
                format!("real {secs:.2}\nuser 0.00\nsys 0.00\n")
            } else {
                let m = (secs / 60.0).floor();
                let s = secs - m * 60.0;
                format!("\nreal\t{m}m{s:.3}s\nuser\t0m0.000s\nsys\t0m0.000s\n")
            };
            let _ = self.write(sh, 2, text.as_bytes())?;
        }
        if p.bang {
            st = if st == 0 { 1 } else { 0 };
        }
        sh.status = st;
        Ok(st)
    }

    fn exec_pipeline_inner(&mut self, sh: &mut Shell, p: &ast::Pipeline) -> R<i32> {
        if p.seq.len() == 1 {
            let st = self.exec_command(sh, &p.seq[0])?;
            sh.pipestatus = vec![st];
            return Ok(st);
        }
        let mut input: Option<Fd> = None;
        let mut statuses = Vec::with_capacity(p.seq.len());
        let n = p.seq.len();
        for (i, cmd) in p.seq.iter().enumerate() {
            let last = i + 1 == n;
            let pid = self.w.new_pid();
            let out = if last {
                None
            } else {
                Some(match head_need(&p.seq[i + 1]) {
                    Some(need) => Rc::new(RefCell::new(Stream::Pipe {
                        data: MBytes::default(),
                        lines: 0,
                        need,
                    })),
                    None => buf_fd(Vec::new()),
                })
            };
            let lastpipe = last && sh.opts.lastpipe;
            let mut sub_owned;
            let target: &mut Shell = if lastpipe {
                sh
            } else {
                sub_owned = sh.subshell(pid);
                &mut sub_owned
            };
            let saved0 = target.get_fd(0);
            let saved1 = target.get_fd(1);
            if let Some(inp) = input.take() {
                target.set_fd(0, Some(inp));
            }
            if let Some(o) = &out {
                target.set_fd(1, Some(o.clone()));
            }
            let r = self.exec_command(target, cmd);
            let st = match r {
                Ok(s) => s,
                Err(Ctl::Exit(s)) if !lastpipe => s,
                Err(Ctl::Return(s)) if !lastpipe => s,
                Err(Ctl::Break(_)) | Err(Ctl::Continue(_)) if !lastpipe => 0,
                Err(e) => return Err(e),
            };
            if lastpipe {
                target.set_fd(0, saved0);
                target.set_fd(1, saved1);
            } else {
                let _ = self.run_exit_trap(target, st)?;
            }
            statuses.push(st);
            if let Some(o) = &out {
                let mut s = o.borrow_mut();
                if let Stream::Pipe { data, .. } = &mut *s {
                    let data = std::mem::take(data);
                    *s = Stream::Buf { data, pos: 0 };
                }
            }
            input = out;
        }
        let st = if sh.opts.pipefail {
            statuses
                .iter()
                .rev()
                .find(|s| **s != 0)
                .copied()
                .unwrap_or(0)
        } else {
            *statuses.last().unwrap_or(&0)
        };
        sh.pipestatus = statuses;
        Ok(st)
    }

    pub fn run_exit_trap(&mut self, sh: &mut Shell, st: i32) -> R<i32> {
        if let Some(t) = sh.traps.remove("EXIT") {
            if !t.is_empty() {
                sh.status = st;
                match self.run_script(sh, &t) {
                    Ok(_) => {}
                    Err(Ctl::Exit(s)) => return Ok(s),
                    Err(Ctl::Return(_)) | Err(Ctl::Break(_)) | Err(Ctl::Continue(_)) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(st)
    }

    pub fn exec_command(&mut self, sh: &mut Shell, cmd: &ast::Command) -> R<i32> {
        if sh.opts.noexec {
            // `set -n`: read, never run
            return Ok(0);
        }
        if self.depth >= MAX_EXEC_DEPTH {
            self.err(
                sh,
                &format!("bash: maximum nesting level exceeded ({MAX_EXEC_DEPTH})"),
            );
            return Err(Ctl::Exit(2));
        }
        self.depth += 1;
        let r = stacker::maybe_grow(256 * 1024, 4 * 1024 * 1024, || {
            self.exec_command_inner(sh, cmd)
        });
        self.depth -= 1;
        r
    }

    fn exec_command_inner(&mut self, sh: &mut Shell, cmd: &ast::Command) -> R<i32> {
        match cmd {
            ast::Command::Simple(s) => self.exec_simple(sh, s),
            ast::Command::Compound(c, redirs) => {
                let saved = sh.fds.clone();
                if let Some(r) = redirs {
                    if let Err(st) = self.apply_redirs(sh, &r.0)? {
                        sh.fds = saved;
                        sh.status = st;
                        return Ok(st);
                    }
                }
                let r = self.exec_compound(sh, c);
                sh.fds = saved;
                r
            }
            ast::Command::Function(f) => {
                let name = f.fname.value.clone();
                sh.funcs.insert(name, Rc::new(f.body.clone()));
                Ok(0)
            }
            ast::Command::ExtendedTest(e, redirs) => {
                let saved = sh.fds.clone();
                if let Some(r) = redirs {
                    if let Err(st) = self.apply_redirs(sh, &r.0)? {
                        sh.fds = saved;
                        return Ok(st);
                    }
                }
                self.tick()?;
                let r = self.eval_ext_test(sh, &e.expr);
                sh.fds = saved;
                let st = match r? {
                    Ok(true) => 0,
                    Ok(false) => 1,
                    Err(msg) => {
                        self.err(sh, &format!("bash: {msg}"));
                        2
                    }
                };
                sh.status = st;
                Ok(st)
            }
        }
    }

    pub fn exec_compound(&mut self, sh: &mut Shell, c: &ast::CompoundCommand) -> R<i32> {
        use ast::CompoundCommand as C;
        match c {
            C::BraceGroup(b) => self.exec_list(sh, &b.list),
            C::Subshell(s) => {
                let pid = self.w.new_pid();
                let mut sub = sh.subshell(pid);
                // a `( )` subshell runs no loop of its parent: `break` and `continue`
                // in it are no-ops, as in bash
                sub.loops = 0;
                let r = self.exec_list(&mut sub, &s.list);
                let st = match r {
                    Ok(s) => s,
                    Err(Ctl::Exit(s)) => s,
                    Err(Ctl::Return(s)) => s,
                    Err(Ctl::Break(_)) | Err(Ctl::Continue(_)) => sub.status,
                    Err(e) => return Err(e),
                };
                let st = self.run_exit_trap(&mut sub, st)?;
                sh.status = st;
                Ok(st)
            }
            C::Arithmetic(a) => {
                self.tick()?;
                let st = match self.arith_text(sh, &a.expr.value)? {
                    Ok(v) => i32::from(v == 0),
                    Err(msg) => {
                        self.err(sh, &format!("bash: {msg}"));
                        1
                    }
                };
                sh.status = st;
                Ok(st)
            }
            C::ForClause(f) => {
                // the word list counts against the memory budget while the loop runs
                let mut held = crate::mem::Charge::default();
                let items = match &f.values {
                    Some(ws) => {
                        let mut v = Vec::new();
                        for w in ws {
                            match self.expand_word(sh, &w.value)? {
                                Ok(mut x) => {
                                    self.hold_fields(&mut held, &x)?;
                                    v.append(&mut x)
                                }
                                Err(st) => return Ok(st),
                            }
                        }
                        v
                    }
                    None => {
                        let v: Vec<String> = sh.pos.iter().map(|p| p.to_string()).collect();
                        self.hold_fields(&mut held, &v)?;
                        v
                    }
                };
                let mut st = 0;
                sh.loops += 1;
                let mut res = Ok(());
                for it in items {
                    self.tick()?;
                    if let Err(m) = sh.set(&f.variable_name, it) {
                        self.err(sh, &format!("bash: {m}"));
                        st = 1;
                        break;
                    }
                    match self.exec_list(sh, &f.body.list) {
                        Ok(s) => st = s,
                        Err(Ctl::Break(n)) => {
                            if n > 1 {
                                res = Err(Ctl::Break(n - 1));
                            }
                            st = 0;
                            break;
                        }
                        Err(Ctl::Continue(n)) => {
                            if n > 1 {
                                res = Err(Ctl::Continue(n - 1));
                                break;
                            }
                            st = 0;
                        }
                        Err(e) => {
                            res = Err(e);
                            break;
                        }
                    }
                }
                sh.loops -= 1;
                res?;
                sh.status = st;
                Ok(st)
            }
            C::ArithmeticForClause(f) => {
                let mut st = 0;
                if let Some(init) = &f.initializer {
                    if let Err(m) = self.arith_text(sh, &init.value)? {
                        self.err(sh, &format!("bash: {m}"));
                        return Ok(1);
                    }
                }
                sh.loops += 1;
                let mut res = Ok(());
                loop {
                    self.tick()?;
                    if let Some(c) = f.condition.as_ref().filter(|c| !c.value.trim().is_empty()) {
                        match self.arith_text(sh, &c.value)? {
                            Ok(0) => break,
                            Ok(_) => {}
                            Err(m) => {
                                self.err(sh, &format!("bash: {m}"));
                                st = 1;
                                break;
                            }
                        }
                    }
                    match self.exec_list(sh, &f.body.list) {
                        Ok(s) => st = s,
                        Err(Ctl::Break(n)) => {
                            if n > 1 {
                                res = Err(Ctl::Break(n - 1));
                            }
                            break;
                        }
                        Err(Ctl::Continue(n)) => {
                            if n > 1 {
                                res = Err(Ctl::Continue(n - 1));
                                break;
                            }
                        }
                        Err(e) => {
                            res = Err(e);
                            break;
                        }
                    }
                    if let Some(u) = &f.updater {
                        if let Err(m) = self.arith_text(sh, &u.value)? {
                            self.err(sh, &format!("bash: {m}"));
                            st = 1;
                            break;
                        }
                    }
                }
                sh.loops -= 1;
                res?;
                sh.status = st;
                Ok(st)
            }
            C::WhileClause(w) | C::UntilClause(w) => {
                let until = matches!(c, C::UntilClause(_));
                let mut st = 0;
                sh.loops += 1;
                let mut res = Ok(());
                loop {
                    self.tick()?;
                    sh.cond += 1;
                    let r = self.exec_list(sh, &w.0);
                    sh.cond -= 1;
                    let cs = match r {
                        Ok(s) => s,
                        Err(Ctl::Break(n)) => {
                            if n > 1 {
                                res = Err(Ctl::Break(n - 1));
                            }
                            break;
                        }
                        Err(Ctl::Continue(n)) => {
                            if n > 1 {
                                res = Err(Ctl::Continue(n - 1));
                                break;
                            }
                            continue;
                        }
                        Err(e) => {
                            res = Err(e);
                            break;
                        }
                    };
                    if (cs == 0) == until {
                        break;
                    }
                    match self.exec_list(sh, &w.1.list) {
                        Ok(s) => st = s,
                        Err(Ctl::Break(n)) => {
                            if n > 1 {
                                res = Err(Ctl::Break(n - 1));
                            }
                            break;
                        }
                        Err(Ctl::Continue(n)) => {
                            if n > 1 {
                                res = Err(Ctl::Continue(n - 1));
                                break;
                            }
                        }
                        Err(e) => {
                            res = Err(e);
                            break;
                        }
                    }
                }
                sh.loops -= 1;
                res?;
                sh.status = st;
                Ok(st)
            }
            C::IfClause(i) => {
                sh.cond += 1;
                let r = self.exec_list(sh, &i.condition);
                sh.cond -= 1;
                if r? == 0 {
                    return self.exec_list(sh, &i.then);
                }
                if let Some(elses) = &i.elses {
                    for e in elses {
                        match &e.condition {
                            Some(c) => {
                                sh.cond += 1;
                                let r = self.exec_list(sh, c);
                                sh.cond -= 1;
                                if r? == 0 {
                                    return self.exec_list(sh, &e.body);
                                }
                            }
                            None => return self.exec_list(sh, &e.body),
                        }
                    }
                }
                sh.status = 0;
                Ok(0)
            }
            C::CaseClause(cc) => {
                let word = match self.expand_nosplit(sh, &cc.value.value)? {
                    Ok(w) => w,
                    Err(st) => return Ok(st),
                };
                let mut st = 0;
                let mut i = 0;
                let mut fall = false;
                let mut tried = 0usize;
                while i < cc.cases.len() {
                    let item = &cc.cases[i];
                    let mut hit = fall;
                    if !hit {
                        for p in &item.patterns {
                            // a `case` of 200,000 patterns ran 3 s past its deadline
                            tried += 1;
                            if tried.is_multiple_of(256) {
                                self.check_time()?;
                            }
                            let pat = match self.expand_pattern(sh, &p.value)? {
                                Ok(p) => p,
                                Err(st) => return Ok(st),
                            };
                            if crate::pattern::matches_whole(
                                &word,
                                &pat,
                                sh.opts.extglob,
                                &mut || self.check_time(),
                            )? {
                                hit = true;
                                break;
                            }
                        }
                    }
                    if hit {
                        if let Some(cmd) = &item.cmd {
                            st = self.exec_list(sh, cmd)?;
                        } else {
                            st = 0;
                        }
                        match item.post_action {
                            ast::CaseItemPostAction::ExitCase => break,
                            ast::CaseItemPostAction::UnconditionallyExecuteNextCaseItem => {
                                fall = true;
                            }
                            ast::CaseItemPostAction::ContinueEvaluatingCases => {
                                fall = false;
                            }
                        }
                    }
                    i += 1;
                }
                sh.status = st;
                Ok(st)
            }
            C::Coprocess(_) => self.unsupported(sh, "coproc"),
        }
    }

    // ---------- redirections ----------

    /// Whether a redirection may open descriptor `fd`: one from [`FD_LIMIT`] on is
    /// refused as bash refuses one at or past `ulimit -n` ("bash: N: Bad file
    /// descriptor", status 1), where the simulator once grew the descriptor table to it
    /// (`1000000000>f` asked for 8 GB and aborted the process). `false` after the message.
    fn fd_in_limit(&mut self, sh: &Shell, fd: i32) -> bool {
        if (0..FD_LIMIT).contains(&fd) {
            return true;
        }
        self.err(sh, &format!("bash: {fd}: Bad file descriptor"));
        false
    }

    /// Applies redirections; `Ok(Err(status))` when one fails (message printed).
    pub fn apply_redirs(
        &mut self,
        sh: &mut Shell,
        redirs: &[ast::IoRedirect],
    ) -> R<Result<(), i32>> {
        use ast::IoFileRedirectKind as K;
        use ast::IoRedirect as IR;
        for r in redirs {
            match r {
                IR::File(fd, kind, target) => {
                    let default_fd = match kind {
                        K::Read | K::DuplicateInput | K::ReadAndWrite => 0,
                        _ => 1,
                    };
                    let fdn = fd.unwrap_or(default_fd);
                    // closing (`N>&-`) a descriptor past the limit is no error, as in bash
                    let closes = matches!(target,
                        ast::IoFileRedirectTarget::Duplicate(w) if w.value == "-");
                    if !closes && !self.fd_in_limit(sh, fdn) {
                        return Ok(Err(1));
                    }
                    match target {
                        ast::IoFileRedirectTarget::Fd(n) => {
                            match sh.get_fd(*n) {
                                Some(f) => sh.set_fd(fdn, Some(f)),
                                None => {
                                    self.err(sh, &format!("bash: {n}: Bad file descriptor"));
                                    return Ok(Err(1));
                                }
                            }
                            continue;
                        }
                        ast::IoFileRedirectTarget::Duplicate(w) => {
                            let t = match self.expand_nosplit(sh, &w.value)? {
                                Ok(t) => t,
                                Err(st) => return Ok(Err(st)),
                            };
                            let t2 = t.trim_end_matches('-');
                            if t == "-" {
                                sh.set_fd(fdn, None);
                            } else if let Ok(n) = t2.parse::<i32>() {
                                match sh.get_fd(n) {
                                    Some(f) => sh.set_fd(fdn, Some(f)),
                                    None => {
                                        self.err(sh, &format!("bash: {n}: Bad file descriptor"));
                                        return Ok(Err(1));
                                    }
                                }
                                if t.ends_with('-') {
                                    sh.set_fd(n, None);
                                }
                            } else if matches!(kind, K::DuplicateOutput) && fd.is_none() {
                                match self.open(sh, &t, true, false, true, false) {
                                    Ok(f) => {
                                        sh.set_fd(1, Some(f.clone()));
                                        sh.set_fd(2, Some(f));
                                    }
                                    Err(e) => {
                                        self.err(sh, &format!("bash: {t}: {}", e.msg()));
                                        return Ok(Err(1));
                                    }
                                }
                            } else {
                                self.err(sh, &format!("bash: {t}: ambiguous redirect"));
                                return Ok(Err(1));
                            }
                            continue;
                        }
                        ast::IoFileRedirectTarget::ProcessSubstitution(kind, sub) => {
                            if matches!(kind, ast::ProcessSubstitutionKind::Write) {
                                let st =
                                    self.unsupported(sh, "output process substitution >(...)")?;
                                return Ok(Err(st));
                            }
                            let data = self.capture_subshell(sh, &sub.list)?;
                            sh.set_fd(fdn, Some(buf_fd(data)));
                            continue;
                        }
                        ast::IoFileRedirectTarget::Filename(w) => {
                            let words = match self.expand_word(sh, &w.value)? {
                                Ok(v) => v,
                                Err(st) => return Ok(Err(st)),
                            };
                            if words.len() != 1 {
                                self.err(sh, &format!("bash: {}: ambiguous redirect", w.value));
                                return Ok(Err(1));
                            }
                            let path = &words[0];
                            let res = match kind {
                                K::Read => self.open(sh, path, false, false, false, false),
                                K::ReadAndWrite => self.open(sh, path, true, false, false, false),
                                K::Write => {
                                    let nc = sh.opts.noclobber;
                                    self.open(sh, path, true, false, true, nc)
                                }
                                K::Clobber => self.open(sh, path, true, false, true, false),
                                K::Append => self.open(sh, path, true, true, false, false),
                                K::DuplicateInput | K::DuplicateOutput => {
                                    if let Ok(n) = path.parse::<i32>() {
                                        sh.get_fd(n).ok_or(Errno::Inval)
                                    } else if path == "-" {
                                        sh.set_fd(fdn, None);
                                        continue;
                                    } else {
                                        match self.open(sh, path, true, false, true, false) {
                                            Ok(f) => {
                                                sh.set_fd(1, Some(f.clone()));
                                                sh.set_fd(2, Some(f));
                                                continue;
                                            }
                                            Err(e) => Err(e),
                                        }
                                    }
                                }
                            };
                            match res {
                                Ok(f) => sh.set_fd(fdn, Some(f)),
                                Err(e) => {
                                    let msg = if e == Errno::Exist {
                                        "cannot overwrite existing file"
                                    } else if e == Errno::Inval {
                                        "Bad file descriptor"
                                    } else {
                                        e.msg()
                                    };
                                    self.err(sh, &format!("bash: {path}: {msg}"));
                                    return Ok(Err(1));
                                }
                            }
                        }
                    }
                }
                IR::HereDocument(fd, doc) => {
                    if !self.fd_in_limit(sh, fd.unwrap_or(0)) {
                        return Ok(Err(1));
                    }
                    let data = if doc.requires_expansion {
                        match self.expand_heredoc(sh, &doc.doc.value)? {
                            Ok(s) => s,
                            Err(st) => return Ok(Err(st)),
                        }
                    } else {
                        doc.doc.value.clone()
                    };
                    sh.set_fd(fd.unwrap_or(0), Some(buf_fd(data.into_bytes())));
                }
                IR::HereString(fd, w) => {
                    if !self.fd_in_limit(sh, fd.unwrap_or(0)) {
                        return Ok(Err(1));
                    }
                    let mut s = match self.expand_nosplit(sh, &w.value)? {
                        Ok(s) => s,
                        Err(st) => return Ok(Err(st)),
                    };
                    s.push('\n');
                    sh.set_fd(fd.unwrap_or(0), Some(buf_fd(s.into_bytes())));
                }
                IR::OutputAndError(w, append) => {
                    let path = match self.expand_nosplit(sh, &w.value)? {
                        Ok(s) => s,
                        Err(st) => return Ok(Err(st)),
                    };
                    let nc = sh.opts.noclobber && !append;
                    match self.open(sh, &path, true, *append, !append, nc) {
                        Ok(f) => {
                            sh.set_fd(1, Some(f.clone()));
                            sh.set_fd(2, Some(f));
                        }
                        Err(e) => {
                            self.err(sh, &format!("bash: {path}: {}", e.msg()));
                            return Ok(Err(1));
                        }
                    }
                }
            }
        }
        Ok(Ok(()))
    }

    /// Runs a list in a subshell and returns its stdout (command/process substitution).
    pub fn capture_subshell(&mut self, sh: &mut Shell, list: &ast::CompoundList) -> R<Vec<u8>> {
        let pid = self.w.new_pid();
        let mut sub = sh.subshell(pid);
        let out = buf_fd(Vec::new());
        sub.set_fd(1, Some(out.clone()));
        let r = self.exec_list(&mut sub, list);
        let st = match r {
            Ok(s) => s,
            Err(Ctl::Exit(s)) | Err(Ctl::Return(s)) => s,
            Err(Ctl::Break(_)) | Err(Ctl::Continue(_)) => 0,
            Err(e) => return Err(e),
        };
        let st = self.run_exit_trap(&mut sub, st)?;
        sh.subst_status = Some(st);
        let data = match &mut *out.borrow_mut() {
            Stream::Buf { data, .. } => data.take(),
            _ => Vec::new(),
        };
        Ok(data)
    }

    /// Command substitution of a script text.
    pub fn command_subst(&mut self, sh: &mut Shell, script: &str) -> R<String> {
        let saved = std::mem::replace(&mut self.tilde_after_colon, false);
        let r = self.command_subst_inner(sh, script);
        self.tilde_after_colon = saved;
        r
    }

    fn command_subst_inner(&mut self, sh: &mut Shell, script: &str) -> R<String> {
        let prog = match parse_program(script) {
            Ok(p) => p,
            Err(ParseFail::Stopped) => return Err(self.interrupted()),
            Err(ParseFail::Incomplete(e) | ParseFail::Syntax(e, _)) => {
                self.record(&format!("syntax: {e}"));
                self.err(sh, &format!("bash: {e}"));
                sh.subst_status = Some(2);
                return Ok(String::new());
            }
        };
        // $(< file)
        if let Some(path) = redirect_only_read(&prog) {
            let p = match self.expand_nosplit(sh, &path)? {
                Ok(p) => p,
                Err(_) => return Ok(String::new()),
            };
            let data = match self.read_file(sh, &p) {
                Ok(d) => d,
                Err(e) => {
                    self.err(sh, &format!("bash: {p}: {}", e.msg()));
                    sh.subst_status = Some(1);
                    Vec::new()
                }
            };
            let mut s = self.decode_output(&data)?;
            while s.ends_with('\n') {
                s.pop();
            }
            return Ok(s);
        }
        let mut all = Vec::new();
        let pid = self.w.new_pid();
        let mut sub = sh.subshell(pid);
        let out = buf_fd(Vec::new());
        sub.set_fd(1, Some(out.clone()));
        let mut st = 0;
        let mut res = Ok(());
        for cc in &prog.complete_commands {
            match self.exec_list(&mut sub, cc) {
                Ok(s) => st = s,
                Err(Ctl::Exit(s)) | Err(Ctl::Return(s)) => {
                    st = s;
                    break;
                }
                Err(Ctl::Break(_)) | Err(Ctl::Continue(_)) => break,
                Err(e) => {
                    res = Err(e);
                    break;
                }
            }
        }
        res?;
        let st = self.run_exit_trap(&mut sub, st)?;
        sh.subst_status = Some(st);
        sh.status = st;
        if let Stream::Buf { data, .. } = &mut *out.borrow_mut() {
            all = data.take();
        }
        while all.last() == Some(&b'\n') {
            all.pop();
        }
        self.decode_output(&all)
    }

    /// A command substitution's output as text ([`lossy_paced`]): at most what the memory
    /// budget has left beside `data` itself, decoded in pieces that look at the clock, so
    /// tens of megabytes of binary output (which decode to about twice their size) end at
    /// the deadline or the budget instead of in one uncheckable step. Errors: the timeout
    /// or cancellation when one is due, else the memory budget ([`Interp::interrupted`]).
    pub fn decode_output(&self, data: &[u8]) -> R<String> {
        let left = self
            .w
            .memory_limit
            .saturating_sub(self.memory_used())
            .saturating_sub(data.len() as u64);
        let max = usize::try_from(left).unwrap_or(usize::MAX);
        lossy_paced(data, max).ok_or_else(|| self.interrupted())
    }

    // ---------- simple commands ----------

    fn exec_simple(&mut self, sh: &mut Shell, cmd: &ast::SimpleCommand) -> R<i32> {
        use ast::CommandPrefixOrSuffixItem as I;
        self.tick()?;
        sh.subst_status = None;
        let mut assigns: Vec<&ast::Assignment> = Vec::new();
        let mut redirs: Vec<ast::IoRedirect> = Vec::new();
        // a million words: left by an interrupted expansion, freed a piece at a time
        let mut argv: crate::mem::PacedVec<String> = crate::mem::PacedVec::new(Vec::new());
        let mut decl: Vec<DeclArg> = Vec::new();
        let mut procsubst_files: Vec<String> = Vec::new();
        // the argument vector counts against the memory budget while it is built and run
        let mut held = crate::mem::Charge::default();
        if let Some(pre) = &cmd.prefix {
            for it in &pre.0 {
                match it {
                    I::AssignmentWord(a, _) => assigns.push(a),
                    I::IoRedirect(r) => redirs.push(r.clone()),
                    I::Word(w) => match self.expand_word(sh, &w.value)? {
                        Ok(mut v) => {
                            self.hold_fields(&mut held, &v)?;
                            argv.append(&mut v)
                        }
                        Err(st) => return Ok(st),
                    },
                    I::ProcessSubstitution(k, s) => {
                        let p = self.procsubst_file(sh, k, s, &mut procsubst_files)?;
                        argv.push(p);
                    }
                }
            }
        }
        if let Some(w) = &cmd.word_or_name {
            match self.expand_word(sh, &w.value)? {
                Ok(mut v) => {
                    self.hold_fields(&mut held, &v)?;
                    argv.append(&mut v)
                }
                Err(st) => return Ok(st),
            }
        }
        let is_decl = matches!(
            argv.first().map(String::as_str),
            Some("local" | "declare" | "typeset" | "export" | "readonly")
        );
        if let Some(suf) = &cmd.suffix {
            for it in &suf.0 {
                match it {
                    I::IoRedirect(r) => redirs.push(r.clone()),
                    I::Word(w) => match self.expand_word(sh, &w.value)? {
                        Ok(v) => {
                            self.hold_fields(&mut held, &v)?;
                            if is_decl {
                                self.hold_fields(&mut held, &v)?;
                                decl.extend(v.iter().cloned().map(DeclArg::Word));
                            }
                            argv.extend(v);
                        }
                        Err(st) => return Ok(st),
                    },
                    I::AssignmentWord(a, w) => {
                        if is_decl {
                            let val = match self.assignment_value(sh, a)? {
                                Ok(v) => v,
                                Err(st) => return Ok(st),
                            };
                            decl.push(DeclArg::Assign(a.clone(), val));
                            argv.push(w.value.clone());
                        } else {
                            match self.expand_word(sh, &w.value)? {
                                Ok(mut v) => {
                                    self.hold_fields(&mut held, &v)?;
                                    argv.append(&mut v)
                                }
                                Err(st) => return Ok(st),
                            }
                        }
                    }
                    I::ProcessSubstitution(k, s) => {
                        let p = self.procsubst_file(sh, k, s, &mut procsubst_files)?;
                        argv.push(p);
                    }
                }
            }
        }
        let argv = std::mem::take(&mut *argv);
        let r = self.exec_simple_expanded(sh, assigns, redirs, argv, decl, is_decl);
        for f in procsubst_files {
            let _ = self.w.vfs.unlink("/", &f);
        }
        drop(held);
        let st = r?;
        sh.status = st;
        Ok(st)
    }

    /// Charges `fields` (joining a list that lives for this step) to `held` and ends the
    /// machine when it now holds more than its memory budget.
    pub fn hold_fields(&mut self, held: &mut crate::mem::Charge, fields: &[String]) -> R<()> {
        held.add_fields(fields);
        self.check_memory()
    }

    fn procsubst_file(
        &mut self,
        sh: &mut Shell,
        k: &ast::ProcessSubstitutionKind,
        s: &ast::SubshellCommand,
        files: &mut Vec<String>,
    ) -> R<String> {
        if matches!(k, ast::ProcessSubstitutionKind::Write) {
            let _ = self.unsupported(sh, "output process substitution >(...)")?;
            return Ok("/dev/null".into());
        }
        let data = self.capture_subshell(sh, &s.list)?;
        let n = 63 - files.len();
        let path = format!("/dev/fd/{n}");
        let _ = self.w.vfs.mkdir_p("/dev/fd", 0o755);
        if let Ok(d) = self.w.vfs.resolve("/", "/dev/fd", true) {
            let _ = self.w.vfs.put_file(d, &n.to_string(), data, 0o600);
        }
        files.push(path.clone());
        Ok(path)
    }

    fn exec_simple_expanded(
        &mut self,
        sh: &mut Shell,
        assigns: Vec<&ast::Assignment>,
        redirs: Vec<ast::IoRedirect>,
        argv: Vec<String>,
        decl: Vec<DeclArg>,
        is_decl: bool,
    ) -> R<i32> {
        if argv.is_empty() {
            for a in &assigns {
                let val = match self.assignment_value(sh, a)? {
                    Ok(v) => v,
                    Err(st) => return Ok(st),
                };
                if let Err(m) = self.assign(sh, a, val, false) {
                    self.err(sh, &format!("bash: {m}"));
                    return Err(Ctl::Exit(1));
                }
                self.check_memory()?;
            }
            let st = sh.subst_status.unwrap_or(0);
            if !redirs.is_empty() {
                let saved = sh.fds.clone();
                let r = self.apply_redirs(sh, &redirs)?;
                sh.fds = saved;
                if let Err(st) = r {
                    return Ok(st);
                }
            }
            return Ok(st);
        }
        // temporary assignments
        let mut saved_vars: Vec<(String, Option<Var>)> = Vec::new();
        for a in &assigns {
            let val = match self.assignment_value(sh, a)? {
                Ok(v) => v,
                Err(st) => return Ok(st),
            };
            let name = assign_name(a).to_string();
            if !saved_vars.iter().any(|(n, _)| *n == name) {
                saved_vars.push((name.clone(), sh.vars.get(&name).cloned()));
            }
            if let Err(m) = self.assign(sh, a, val, false) {
                self.err(sh, &format!("bash: {m}"));
                return Ok(1);
            }
            self.check_memory()?;
            if let Some(v) = sh.vars.get_mut(&name) {
                v.exported = true;
            }
        }
        let saved_fds = sh.fds.clone();
        let is_exec = argv[0] == "exec";
        let last_arg = argv.last().cloned();
        if sh.opts.xtrace {
            let line: Vec<String> = argv.iter().map(|a| xtrace_quote(a)).collect();
            let _ = self.write(sh, 2, format!("+ {}\n", line.join(" ")).as_bytes())?;
        }
        let r = match self.apply_redirs(sh, &redirs)? {
            Err(st) => Ok(st),
            Ok(()) => {
                if is_decl {
                    crate::builtins::declare(self, sh, &argv[0], decl)
                } else {
                    self.dispatch(sh, argv)
                }
            }
        };
        let keep_fds = is_exec && r.is_ok();
        if let Some(last) = last_arg {
            match sh.vars.get_mut("_") {
                Some(v) => v.value = Value::Str(last.into()),
                None => {
                    sh.vars.insert("_".into(), Var::s(last));
                }
            }
        }
        if !keep_fds {
            sh.fds = saved_fds;
        }
        for (n, old) in saved_vars.into_iter().rev() {
            match old {
                Some(v) => {
                    sh.vars.insert(n, v);
                }
                None => {
                    sh.vars.remove(&n);
                }
            }
        }
        r
    }

    pub fn assignment_value(
        &mut self,
        sh: &mut Shell,
        a: &ast::Assignment,
    ) -> R<Result<AssignVal, i32>> {
        match &a.value {
            ast::AssignmentValue::Scalar(w) => {
                self.tilde_after_colon = true;
                let r = self.expand_nosplit(sh, &w.value);
                self.tilde_after_colon = false;
                Ok(r?.map(AssignVal::Scalar))
            }
            ast::AssignmentValue::Array(items) => {
                let mut out: Vec<(Option<String>, String)> = Vec::new();
                let mut out_bytes = 0u64;
                for (k, v) in items {
                    // the items made so far count with what the machine holds
                    if self.memory_used().saturating_add(out_bytes) > self.w.memory_limit {
                        return Err(self.interrupted());
                    }
                    let before = out.len();
                    let key = match k {
                        Some(k) => match self.expand_nosplit(sh, &k.value)? {
                            Ok(k) => Some(k),
                            Err(st) => return Ok(Err(st)),
                        },
                        None => None,
                    };
                    if key.is_some() {
                        match self.expand_nosplit(sh, &v.value)? {
                            Ok(s) => out.push((key, s)),
                            Err(st) => return Ok(Err(st)),
                        }
                    } else {
                        match self.expand_word(sh, &v.value)? {
                            Ok(vs) => out.extend(vs.into_iter().map(|s| (None, s))),
                            Err(st) => return Ok(Err(st)),
                        }
                    }
                    out_bytes += out[before..]
                        .iter()
                        .map(|(k, v)| (k.as_ref().map_or(0, |k| k.len()) + v.len()) as u64)
                        .sum::<u64>();
                }
                Ok(Ok(AssignVal::Array(out)))
            }
        }
    }

    /// Performs an assignment (`local_scope`: declare in the current function frame).
    pub fn assign(
        &mut self,
        sh: &mut Shell,
        a: &ast::Assignment,
        val: AssignVal,
        _local: bool,
    ) -> Result<(), String> {
        if let Some(t) = sh.resolve(assign_name(a)) {
            if !t.is_empty() && t != assign_name(a) {
                let mut a2 = a.clone();
                a2.name = match &a.name {
                    ast::AssignmentName::VariableName(_) => ast::AssignmentName::VariableName(t),
                    ast::AssignmentName::ArrayElementName(_, i) => {
                        ast::AssignmentName::ArrayElementName(t, i.clone())
                    }
                };
                return self.assign(sh, &a2, val, _local);
            }
        }
        match (&a.name, val) {
            (ast::AssignmentName::VariableName(n), AssignVal::Scalar(s)) => {
                let is_int = sh.vars.get(n).is_some_and(|v| v.integer);
                let s = if is_int {
                    let expr = if a.append {
                        format!("{}+({})", sh.getv(n), s)
                    } else {
                        s
                    };
                    match self.eval_arith_str(sh, &expr) {
                        Ok(Ok(v)) => v.to_string(),
                        _ => "0".into(),
                    }
                } else if a.append {
                    match concat_paced(&sh.getv(n), &s) {
                        Some(s) => s,
                        // the command is stopping (its next tick ends it): the variable
                        // keeps its value
                        None => return Ok(()),
                    }
                } else {
                    s
                };
                if let Some(Var {
                    value: Value::Arr(_) | Value::Assoc(_),
                    ..
                }) = sh.vars.get(n)
                {
                    return set_elem(sh, n, "0", s);
                }
                sh.set(n, s)
            }
            (ast::AssignmentName::VariableName(n), AssignVal::Array(items)) => {
                let assoc = matches!(
                    sh.vars.get(n),
                    Some(Var {
                        value: Value::Assoc(_),
                        ..
                    })
                );
                if let Some(v) = sh.vars.get(n) {
                    if v.readonly {
                        return Err(format!("{n}: readonly variable"));
                    }
                }
                if assoc {
                    let mut m = if a.append {
                        match sh.vars.get_mut(n).map(|v| &mut v.value) {
                            Some(Value::Assoc(m)) => std::mem::take(m),
                            _ => AssocMap::new(),
                        }
                    } else {
                        AssocMap::new()
                    };
                    let mut rest = items.into_iter().enumerate();
                    while let Some((j, (k, v))) = rest.next() {
                        // a million elements: past the deadline the array is left short
                        // (the rest buried, not freed), and the next tick ends the command
                        if j % ITEMS_PER_CHECK == ITEMS_PER_CHECK - 1 && self.check_time().is_err()
                        {
                            crate::mem::bury((k, v, rest));
                            break;
                        }
                        m.insert(k.unwrap_or_default(), v);
                    }
                    let v = sh.vars.get_mut(n).unwrap();
                    drop_value(std::mem::replace(&mut v.value, Value::Assoc(m)));
                } else {
                    // `a+=(x)` moves the array out and back (amortized O(1) per element);
                    // keyed items may read the array while their index is evaluated, so
                    // those work on a copy
                    let keyed = items.iter().any(|(k, _)| k.is_some());
                    let mut m = if a.append {
                        match sh.vars.get_mut(n).map(|v| &mut v.value) {
                            Some(Value::Arr(m)) if !keyed => std::mem::take(m),
                            Some(Value::Arr(m)) => m.clone(),
                            Some(Value::Str(s)) => ArrMap::unit(0, s.clone()),
                            _ => ArrMap::new(),
                        }
                    } else {
                        ArrMap::new()
                    };
                    let mut next = m
                        .keys()
                        .next_back()
                        .map(|k| k.saturating_add(1))
                        .unwrap_or(0);
                    let mut rest = items.into_iter().enumerate();
                    while let Some((j, (k, v))) = rest.next() {
                        // a million elements: past the deadline the array is left short
                        // (the rest buried, not freed), and the next tick ends the command
                        if j % ITEMS_PER_CHECK == ITEMS_PER_CHECK - 1 && self.check_time().is_err()
                        {
                            crate::mem::bury((k, v, rest));
                            break;
                        }
                        let idx = match k {
                            Some(k) => match self.eval_arith_str(sh, &k) {
                                Ok(Ok(i)) => i,
                                _ => 0,
                            },
                            None => next,
                        };
                        m.insert(idx, v.into());
                        next = idx.saturating_add(1);
                    }
                    match sh.vars.get_mut(n) {
                        Some(v) => drop_value(std::mem::replace(&mut v.value, Value::Arr(m))),
                        None => {
                            sh.vars.insert(
                                n.clone(),
                                Var {
                                    value: Value::Arr(m),
                                    exported: false,
                                    readonly: false,
                                    integer: false,
                                    nameref: false,
                                },
                            );
                        }
                    }
                }
                Ok(())
            }
            (ast::AssignmentName::ArrayElementName(n, idx), AssignVal::Scalar(s)) => {
                let key = match self.expand_nosplit_str(sh, idx) {
                    Ok(k) => k,
                    Err(_) => idx.clone(),
                };
                let s = if a.append {
                    let cur = get_elem(self, sh, n, &key);
                    match concat_paced(&cur, &s) {
                        Some(s) => s,
                        // the command is stopping: the element keeps its value
                        None => return Ok(()),
                    }
                } else {
                    s
                };
                let is_assoc = matches!(
                    sh.vars.get(n),
                    Some(Var {
                        value: Value::Assoc(_),
                        ..
                    })
                );
                if is_assoc {
                    set_elem(sh, n, &key, s)
                } else {
                    let i = match self.eval_arith_str(sh, &key) {
                        Ok(Ok(i)) => i,
                        _ => 0,
                    };
                    let i = if i < 0 {
                        let len = match sh.vars.get(n).map(|v| &v.value) {
                            Some(Value::Arr(m)) => m
                                .keys()
                                .next_back()
                                .map(|k| k.saturating_add(1))
                                .unwrap_or(0),
                            _ => 1,
                        };
                        len.saturating_add(i)
                    } else {
                        i
                    };
                    set_elem(sh, n, &i.to_string(), s)
                }
            }
            (ast::AssignmentName::ArrayElementName(n, _), AssignVal::Array(_)) => {
                Err(format!("{n}: cannot assign list to array member"))
            }
        }
    }

    /// Runs an expanded command line: function, builtin or program.
    pub fn dispatch(&mut self, sh: &mut Shell, argv: Vec<String>) -> R<i32> {
        let name = argv[0].clone();
        if let Some(body) = sh.funcs.get(&name).cloned() {
            return self.call_function(sh, &body, argv);
        }
        if crate::builtins::is_builtin(&name) {
            return crate::builtins::run(self, sh, argv);
        }
        self.exec_external(sh, argv)
    }

    pub fn call_function(
        &mut self,
        sh: &mut Shell,
        body: &ast::FunctionBody,
        argv: Vec<String>,
    ) -> R<i32> {
        if sh.funcdepth > 1000 {
            self.err(sh, "bash: maximum function nesting level exceeded (1000)");
            return Ok(1);
        }
        // a million arguments are freed a piece at a time
        let argv = crate::mem::PacedVec::new(argv);
        let pos = self.positional(&argv[1..])?;
        let saved_pos = std::mem::replace(&mut sh.pos, pos);
        sh.locals.push(Vec::new());
        sh.funcdepth += 1;
        sh.funcnames.push(argv[0].clone());
        let saved_fds = sh.fds.clone();
        let r = match &body.1 {
            Some(redirs) => match self.apply_redirs(sh, &redirs.0) {
                Ok(Err(st)) => Ok(st),
                Ok(Ok(())) => self.exec_compound(sh, &body.0),
                Err(e) => Err(e),
            },
            None => self.exec_compound(sh, &body.0),
        };
        sh.fds = saved_fds;
        sh.funcdepth -= 1;
        sh.funcnames.pop();
        sh.pop_local_frame();
        drop_pos(std::mem::replace(&mut sh.pos, saved_pos));
        match r {
            Ok(s) => Ok(s),
            Err(Ctl::Return(s)) => Ok(s),
            Err(e) => Err(e),
        }
    }

    /// Finds a program on PATH (or by path); returns the path. PATH is read in place and
    /// walked one directory at a time, looking at the clock every
    /// [`PATH_DIRS_PER_CHECK`] directories: a PATH grown to millions of entries is as
    /// slow to search as bash's (a lookup per entry) but ends at the deadline.
    pub fn find_program(&mut self, sh: &Shell, name: &str) -> R<Option<String>> {
        if name.contains('/') {
            return Ok(Some(name.to_string()));
        }
        let path = sh.get_str("PATH").unwrap_or(crate::DEFAULT_PATH);
        let mut p = String::new();
        for (k, dir) in path.split(':').enumerate() {
            if k % PATH_DIRS_PER_CHECK == PATH_DIRS_PER_CHECK - 1 {
                self.check_time()?;
            }
            let dir = if dir.is_empty() { "." } else { dir };
            p.clear();
            p.push_str(dir.trim_end_matches('/'));
            p.push('/');
            p.push_str(name);
            if let Ok(ino) = self.w.vfs.resolve(&sh.cwd, &p, true) {
                let n = self.w.vfs.get(ino);
                if !n.is_dir() && n.mode & 0o111 != 0 {
                    return Ok(Some(p));
                }
            }
        }
        Ok(None)
    }

    pub fn exec_external(&mut self, sh: &mut Shell, argv: Vec<String>) -> R<i32> {
        let name = argv[0].clone();
        let Some(path) = self.find_program(sh, &name)? else {
            self.record(&format!("command not found: {name}"));
            self.err(sh, &format!("bash: line 1: {name}: command not found"));
            return Ok(127);
        };
        let ino = match self.w.vfs.resolve(&sh.cwd, &path, true) {
            Ok(i) => i,
            Err(e) => {
                self.err(sh, &format!("bash: line 1: {name}: {}", e.msg()));
                return Ok(127);
            }
        };
        // the node is looked at in place: a clone would copy a script's text or a
        // directory's entries on every launch
        let node = self.w.vfs.get(ino);
        let executable = node.mode & 0o111 != 0;
        match &node.kind {
            Kind::Exe(u) => {
                let u = *u;
                crate::utils::run(self, sh, u, argv)
            }
            Kind::Dir(..) => {
                self.err(sh, &format!("bash: line 1: {name}: Is a directory"));
                Ok(126)
            }
            Kind::File(_) if !executable => {
                self.err(sh, &format!("bash: line 1: {name}: Permission denied"));
                Ok(126)
            }
            Kind::File(data) => {
                // decoded in pieces within the budget, looking at the clock
                let text = self.decode_output(data)?;
                let mut opts = Opts::default();
                if let Some(first) = text.lines().next() {
                    if let Some(interp) = first.strip_prefix("#!") {
                        let mut parts = interp.split_whitespace();
                        let prog = parts.next().unwrap_or("");
                        let base = prog.rsplit('/').next().unwrap_or("");
                        let base = if base == "env" {
                            parts.next().unwrap_or("")
                        } else {
                            base
                        };
                        if !matches!(base, "sh" | "bash" | "dash") {
                            self.err(sh, &format!("bash: line 1: {name}: {prog}: bad interpreter: No such file or directory"));
                            return Ok(126);
                        }
                        // `#!/bin/bash -eu`: the interpreter's flags
                        for flag in parts.filter(|p| p.starts_with('-')) {
                            for c in flag[1..].chars() {
                                match c {
                                    'e' => opts.errexit = true,
                                    'u' => opts.nounset = true,
                                    'x' => opts.xtrace = true,
                                    _ => {}
                                }
                            }
                        }
                    }
                }
                self.run_child_script(sh, &text, path.clone(), argv[1..].to_vec(), &opts)
            }
            _ => {
                self.err(sh, &format!("bash: line 1: {name}: Permission denied"));
                Ok(126)
            }
        }
    }

    /// A new shell process running `script` with exported variables inherited.
    pub fn run_child_script(
        &mut self,
        sh: &mut Shell,
        script: &str,
        arg0: String,
        args: Vec<String>,
        opts: &Opts,
    ) -> R<i32> {
        let pid = self.w.new_pid();
        let mut child = self.child_shell(sh, pid)?;
        child.arg0 = arg0;
        child.pos = self.positional(&args)?;
        drop(crate::mem::PacedVec::new(args));
        child.opts.errexit = opts.errexit;
        child.opts.nounset = opts.nounset;
        child.opts.pipefail = opts.pipefail;
        child.opts.xtrace = opts.xtrace;
        let r = self.run_script(&mut child, script);
        let st = match r {
            Ok(s) => s,
            Err(Ctl::Exit(s)) => s,
            Err(Ctl::Return(s)) => s,
            Err(Ctl::Break(_)) | Err(Ctl::Continue(_)) => child.status,
            Err(e) => return Err(e),
        };
        self.run_exit_trap(&mut child, st)
    }

    /// A new shell process started by `sh` ([`child_shell_with`]), looking at the clock
    /// every [`VARS_PER_CHECK`] variables.
    pub fn child_shell(&self, sh: &Shell, pid: u32) -> R<Shell> {
        child_shell_with(sh, pid, || self.check_time())
    }
}

/// How many variables [`child_shell_with`] looks at between two calls of its check.
pub const VARS_PER_CHECK: usize = 1024;

/// A new shell process started by `sh` with process id `pid`: `sh`'s exported variables
/// (and its cwd, streams and umask), `PPID`, `SHLVL` one more, `PWD`. A shell can hold tens
/// of thousands of variables: the child starts from a shared copy of `sh`'s map less the
/// unexported ones, or from an empty map plus the exported ones, whichever changes fewer
/// entries, and `check` is called every [`VARS_PER_CHECK`] variables (its error ends the
/// copy).
pub fn child_shell_with<E>(
    sh: &Shell,
    pid: u32,
    mut check: impl FnMut() -> Result<(), E>,
) -> Result<Shell, E> {
    let mut child = Shell::new(pid, sh.cwd.clone());
    let mut unexported: Vec<&String> = Vec::new();
    let mut exported = 0usize;
    for (k, (name, v)) in sh.vars.iter().enumerate() {
        if k % VARS_PER_CHECK == VARS_PER_CHECK - 1 {
            check()?;
        }
        if v.exported {
            exported += 1;
        } else {
            unexported.push(name);
        }
    }
    if unexported.len() < exported {
        let mut vars = sh.vars.clone();
        for (k, name) in unexported.into_iter().enumerate() {
            if k % VARS_PER_CHECK == VARS_PER_CHECK - 1 {
                check()?;
            }
            vars.remove(name);
        }
        child.vars = vars;
    } else {
        drop(unexported);
        let exported = sh.vars.iter().filter(|(_, v)| v.exported);
        for (k, (name, v)) in exported.enumerate() {
            if k % VARS_PER_CHECK == VARS_PER_CHECK - 1 {
                check()?;
            }
            child.vars.insert(name.clone(), v.clone());
        }
    }
    child.fds = sh.fds.clone();
    child.umask = sh.umask;
    let ppid = sh.pid.to_string();
    child.vars.insert("PPID".into(), Var::s(ppid));
    let sh_lvl = sh
        .get_str("SHLVL")
        .and_then(|s| s.parse::<i64>().ok())
        .unwrap_or(0)
        + 1;
    let mut v = Var::s(sh_lvl.to_string());
    v.exported = true;
    child.vars.insert("SHLVL".into(), v);
    child.set("PWD", sh.cwd.clone()).ok();
    if let Some(v) = child.vars.get_mut("PWD") {
        v.exported = true;
    }
    Ok(child)
}

/// A declaration builtin's argument.
#[derive(Debug, Clone)]
pub enum DeclArg {
    Word(String),
    Assign(ast::Assignment, AssignVal),
}

#[derive(Debug, Clone)]
pub enum AssignVal {
    Scalar(String),
    Array(Vec<(Option<String>, String)>),
}

/// How bash shows one word in `set -x` traces and `set` listings: as is when plain, else in
/// single quotes.
pub(crate) fn xtrace_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+%@".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

pub fn assign_name(a: &ast::Assignment) -> &str {
    match &a.name {
        ast::AssignmentName::VariableName(n) => n,
        ast::AssignmentName::ArrayElementName(n, _) => n,
    }
}

pub fn set_elem(sh: &mut Shell, name: &str, key: &str, val: String) -> Result<(), String> {
    match sh.vars.get_mut(name) {
        Some(v) => {
            if v.readonly {
                return Err(format!("{name}: readonly variable"));
            }
            match &mut v.value {
                Value::Arr(m) => {
                    let mut i: i64 = key.parse().unwrap_or(0);
                    if i < 0 {
                        // a negative subscript counts from the end, as in bash (one
                        // before the start keeps the old key: bash's "bad array
                        // subscript" would end the whole script here, see
                        // tests/engine_faults.rs)
                        let end = m.get_max().map(|(k, _)| k.saturating_add(1)).unwrap_or(0);
                        if end.saturating_add(i) >= 0 {
                            i = end.saturating_add(i);
                        }
                    }
                    m.insert(i, val.into());
                }
                Value::Assoc(m) => {
                    m.insert(key.to_string(), val);
                }
                Value::Str(s) => {
                    let mut m = ArrMap::new();
                    m.insert(0, std::mem::take(s));
                    m.insert(key.parse().unwrap_or(0), val.into());
                    v.value = Value::Arr(m);
                }
            }
        }
        None => {
            let mut m = ArrMap::new();
            m.insert(key.parse().unwrap_or(0), val.into());
            sh.vars.insert(
                name.to_string(),
                Var {
                    value: Value::Arr(m),
                    exported: false,
                    readonly: false,
                    integer: false,
                    nameref: false,
                },
            );
        }
    }
    Ok(())
}

pub fn get_elem(it: &mut Interp<'_>, sh: &mut Shell, name: &str, key: &str) -> String {
    match sh.vars.get(name).map(|v| v.value.clone()) {
        Some(Value::Assoc(m)) => m.get(key).map(String::from).unwrap_or_default(),
        Some(Value::Arr(m)) => {
            let i = match it.eval_arith_str(sh, key) {
                Ok(Ok(i)) => i,
                _ => 0,
            };
            let i = if i < 0 {
                m.keys()
                    .next_back()
                    .map(|k| k.saturating_add(1))
                    .unwrap_or(0)
                    .saturating_add(i)
            } else {
                i
            };
            m.get(&i).map(|s| s.to_string()).unwrap_or_default()
        }
        Some(Value::Str(s)) => {
            if key == "0" {
                s.to_string()
            } else {
                String::new()
            }
        }
        None => String::new(),
    }
}

fn redirect_only_read(prog: &ast::Program) -> Option<String> {
    if prog.complete_commands.len() != 1 {
        return None;
    }
    let list = &prog.complete_commands[0];
    if list.0.len() != 1 {
        return None;
    }
    let ao = &list.0[0].0;
    if !ao.additional.is_empty() || ao.first.seq.len() != 1 {
        return None;
    }
    if let ast::Command::Simple(s) = &ao.first.seq[0] {
        if s.word_or_name.is_some() || s.suffix.is_some() {
            return None;
        }
        let pre = s.prefix.as_ref()?;
        if pre.0.len() != 1 {
            return None;
        }
        if let ast::CommandPrefixOrSuffixItem::IoRedirect(ast::IoRedirect::File(
            None | Some(0),
            ast::IoFileRedirectKind::Read,
            ast::IoFileRedirectTarget::Filename(w),
        )) = &pre.0[0]
        {
            return Some(w.value.clone());
        }
    }
    None
}

#[cfg(test)]
#[path = "fork_cost_tests.rs"]
mod fork_cost_tests;

#[cfg(test)]
mod lossy_tests {
    use super::{lossy_paced, CHUNK_BYTES};

    /// Bytes whose UTF-8 sequences (valid, truncated and stray continuations) straddle
    /// every piece boundary [`lossy_paced`] cuts at.
    fn awkward(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        let atoms: [&[u8]; 8] = [
            b"a",
            "é".as_bytes(),
            "€".as_bytes(),
            "𝄞".as_bytes(),
            b"\xE2\x82",
            b"\x80\x80\x80\x80\x80",
            b"\xF0\x9D",
            b"\xFF",
        ];
        let mut v = Vec::with_capacity(len + 8);
        while v.len() < len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            v.extend_from_slice(atoms[(x % 8) as usize]);
        }
        v
    }

    #[test]
    fn decodes_as_from_utf8_lossy_across_pieces() {
        for seed in 1..6 {
            let data = awkward(3 * CHUNK_BYTES + 17, seed);
            let want = String::from_utf8_lossy(&data).into_owned();
            assert_eq!(
                lossy_paced(&data, usize::MAX).as_deref(),
                Some(want.as_str())
            );
        }
        // a cut that would land inside a run of continuation bytes
        let mut data = vec![b'a'; CHUNK_BYTES - 2];
        data.extend_from_slice(&[0x80; 9]);
        data.extend_from_slice("€".as_bytes());
        let want = String::from_utf8_lossy(&data).into_owned();
        assert_eq!(
            lossy_paced(&data, usize::MAX).as_deref(),
            Some(want.as_str())
        );
    }

    #[test]
    fn stops_past_its_size_bound() {
        let data = vec![0xFF; 2 * CHUNK_BYTES];
        assert_eq!(lossy_paced(&data, 3 * CHUNK_BYTES), None);
        assert_eq!(
            lossy_paced(&data, 6 * CHUNK_BYTES).map(|s| s.len()),
            Some(6 * CHUNK_BYTES)
        );
        assert_eq!(lossy_paced(b"\xFFab", 4), None);
        assert_eq!(lossy_paced(b"\xFFab", 5).as_deref(), Some("\u{FFFD}ab"));
    }
}
