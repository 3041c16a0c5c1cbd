//! `grep`, `egrep`, `fgrep` (GNU grep 3.8): `-E -F -G -P` (`-P` as the `regex` crate's
//! syntax, close to PCRE's basics), `-e -f -i -y -v -w -x -c -l -L -o -q -s -n -h -H -m
//! -A -B -C -NUM -r -R -z -a -U --include --exclude --exclude-dir --color[=never]
//! --label --line-buffered --null/-Z`. Exit status 0 when a line is selected, 1 when
//! none is, 2 on an error (a usage error, a bad pattern, an unreadable file; with `-q` a
//! selected line wins over a file error). `-b`, `--byte-offset`, `-T` and colours fail
//! visibly (status 2).

use super::opts::{Arg, Parser};
use super::posix::{self, Dialect, Re};
use super::Ctx;
use std::collections::VecDeque;

use crate::mem::PacedVec;
use crate::shell::R;
use crate::vfs::Kind;

/// GNU grep's usage and error status.
const TROUBLE: i32 = 2;

/// Most bytes of translated pattern text compiled into one regex. Compiling takes the
/// regex crates about 2 µs per pattern byte (three automata), in one step: a pattern list
/// of megabytes (`grep -f` of a big file) is compiled this much at a time, looking at the
/// clock between, and matched as the union of the pieces.
const PATTERN_BYTES_PER_REGEX: usize = 4 * 1024;

/// Bytes of lines (times the regexes they are matched against) and matches `grep` handles
/// between two looks at the clock.
const WORK_PER_CHECK: usize = 256 * 1024;

const LONGS: &[&str] = &[
    "extended-regexp",
    "fixed-strings",
    "basic-regexp",
    "perl-regexp",
    "regexp",
    "file",
    "ignore-case",
    "no-ignore-case",
    "invert-match",
    "word-regexp",
    "line-regexp",
    "count",
    "files-with-matches",
    "files-without-match",
    "only-matching",
    "quiet",
    "silent",
    "no-messages",
    "line-number",
    "no-filename",
    "with-filename",
    "max-count",
    "after-context",
    "before-context",
    "context",
    "recursive",
    "dereference-recursive",
    "null-data",
    "null",
    "text",
    "binary",
    "include",
    "exclude",
    "exclude-dir",
    "color",
    "colour",
    "label",
    "line-buffered",
    "byte-offset",
    "initial-tab",
    "help",
    "version",
];

#[derive(Default)]
struct Opts {
    invert: bool,
    word: bool,
    line: bool,
    count: bool,
    list: Option<bool>,
    only: bool,
    quiet: bool,
    silent: bool,
    number: bool,
    names: Option<bool>,
    max: Option<u64>,
    after: usize,
    before: usize,
    recursive: bool,
    zero: bool,
    null_after_name: bool,
    text: bool,
    include: Vec<String>,
    exclude: Vec<String>,
    exclude_dir: Vec<String>,
    label: String,
}

/// The patterns as one regex, or as the union of several (see [`PATTERN_BYTES_PER_REGEX`]).
/// Held so that, dropped after the timeout fired, the regexes are buried, not freed.
struct Union(PacedVec<Re>, Option<String>);

impl Union {
    /// The leftmost-longest match of any of the regexes at or after `start`.
    fn find_at(&self, hay: &[u8], start: usize) -> Option<(usize, usize)> {
        let mut best: Option<(usize, usize)> = None;
        for re in self.0.iter() {
            if let Some((s, e)) = re.find_at(hay, start) {
                best = match best {
                    Some((bs, be)) if bs < s || (bs == s && be >= e) => Some((bs, be)),
                    _ => Some((s, e)),
                };
            }
        }
        best
    }
    fn is_match(&self, hay: &[u8]) -> bool {
        self.0.iter().any(|re| re.is_match(hay))
    }
}

struct Matcher {
    re: Union,
    word: bool,
    empty_ok: bool,
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80
}

impl Matcher {
    /// The next match at or after `from` that passes `-w`.
    fn find(&self, line: &[u8], mut from: usize) -> Option<(usize, usize)> {
        loop {
            let (s, e) = self.re.find_at(line, from)?;
            if !self.word {
                return Some((s, e));
            }
            let before = s == 0 || !is_word(line[s - 1]);
            let after = e >= line.len() || !is_word(line[e]);
            if before && after && (e > s || self.empty_ok) {
                return Some((s, e));
            }
            // a shorter match from the same start may fit
            if before {
                let mut end = e;
                while end > s {
                    end -= 1;
                    if (end >= line.len() || !is_word(line[end]))
                        && self.re.find_at(&line[..end], s) == Some((s, end))
                    {
                        return Some((s, end));
                    }
                }
            }
            if s >= line.len() {
                return None;
            }
            from = s + 1;
        }
    }
    fn matches(&self, line: &[u8]) -> bool {
        if self.word {
            self.find(line, 0).is_some()
        } else {
            self.re.is_match(line)
        }
    }
}

pub(super) fn main(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let prog = cx.argv_name();
    let mut dialect = match prog.as_str() {
        "egrep" => 'E',
        "fgrep" => 'F',
        _ => 'G',
    };
    let mut p = Parser::new("grep", args, LONGS);
    let mut o = Opts::default();
    let mut icase = false;
    let mut patterns: Option<Vec<String>> = None;
    let mut ops = Vec::new();
    let mut num_context: Option<usize> = None;
    macro_rules! value {
        () => {
            match p.value() {
                Ok(v) => v,
                Err(u) => return super::usage(cx, u, TROUBLE),
            }
        };
    }
    macro_rules! context {
        ($v:expr) => {{
            let v = $v;
            match v.parse::<usize>() {
                Ok(n) => n,
                Err(_) => {
                    cx.err_line(&format!("grep: {v}: invalid context length argument"));
                    return Ok(TROUBLE);
                }
            }
        }};
    }
    loop {
        let arg = match p.next_in(cx)? {
            Ok(Some(a)) => a,
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, TROUBLE),
        };
        match arg {
            Arg::Short('E') | Arg::Long("extended-regexp") => dialect = 'E',
            Arg::Short('F') | Arg::Long("fixed-strings") => dialect = 'F',
            Arg::Short('G') | Arg::Long("basic-regexp") => dialect = 'G',
            Arg::Short('P') | Arg::Long("perl-regexp") => dialect = 'P',
            Arg::Short('e') | Arg::Long("regexp") => {
                let v = value!();
                patterns
                    .get_or_insert_with(Vec::new)
                    .extend(v.split('\n').map(str::to_string));
            }
            Arg::Short('f') | Arg::Long("file") => {
                let f = value!();
                let data = match cx.read_input(&f) {
                    Ok(d) => d,
                    Err(e) => {
                        cx.err_line(&format!("grep: {f}: {e}"));
                        return Ok(TROUBLE);
                    }
                };
                let text = String::from_utf8_lossy(&data).into_owned();
                let list = patterns.get_or_insert_with(Vec::new);
                let body = text.strip_suffix('\n').unwrap_or(&text);
                if !text.is_empty() {
                    list.extend(body.split('\n').map(str::to_string));
                }
            }
            Arg::Short('i') | Arg::Short('y') | Arg::Long("ignore-case") => icase = true,
            Arg::Long("no-ignore-case") => icase = false,
            Arg::Short('v') | Arg::Long("invert-match") => o.invert = true,
            Arg::Short('w') | Arg::Long("word-regexp") => o.word = true,
            Arg::Short('x') | Arg::Long("line-regexp") => o.line = true,
            Arg::Short('c') | Arg::Long("count") => o.count = true,
            Arg::Short('l') | Arg::Long("files-with-matches") => o.list = Some(true),
            Arg::Short('L') | Arg::Long("files-without-match") => o.list = Some(false),
            Arg::Short('o') | Arg::Long("only-matching") => o.only = true,
            Arg::Short('q') | Arg::Long("quiet") | Arg::Long("silent") => o.quiet = true,
            Arg::Short('s') | Arg::Long("no-messages") => o.silent = true,
            Arg::Short('n') | Arg::Long("line-number") => o.number = true,
            Arg::Short('h') | Arg::Long("no-filename") => o.names = Some(false),
            Arg::Short('H') | Arg::Long("with-filename") => o.names = Some(true),
            Arg::Short('m') | Arg::Long("max-count") => {
                let v = value!();
                match v.parse::<i64>() {
                    Ok(n) if n < 0 => o.max = None,
                    Ok(n) => o.max = Some(n as u64),
                    Err(_) => {
                        cx.err_line("grep: invalid max count");
                        return Ok(TROUBLE);
                    }
                }
            }
            Arg::Short('A') | Arg::Long("after-context") => o.after = context!(value!()),
            Arg::Short('B') | Arg::Long("before-context") => o.before = context!(value!()),
            Arg::Short('C') | Arg::Long("context") => {
                let n = context!(value!());
                o.after = n;
                o.before = n;
            }
            Arg::Short(c) if c.is_ascii_digit() => {
                let d = c as usize - '0' as usize;
                num_context = Some(num_context.unwrap_or(0).saturating_mul(10) + d);
                o.after = num_context.unwrap_or(0);
                o.before = o.after;
            }
            Arg::Short('r') | Arg::Long("recursive") => o.recursive = true,
            Arg::Short('R') | Arg::Long("dereference-recursive") => o.recursive = true,
            Arg::Short('z') | Arg::Long("null-data") => o.zero = true,
            Arg::Short('Z') | Arg::Long("null") => o.null_after_name = true,
            Arg::Short('a') | Arg::Long("text") => o.text = true,
            Arg::Short('U') | Arg::Long("binary") | Arg::Long("line-buffered") => {}
            Arg::Long("include") => o.include.push(value!()),
            Arg::Long("exclude") => o.exclude.push(value!()),
            Arg::Long("exclude-dir") => o.exclude_dir.push(value!()),
            Arg::Long("label") => o.label = value!(),
            Arg::Long("color") | Arg::Long("colour") => {
                if let Some(v) = p.optional_value() {
                    if v != "never" && v != "auto" {
                        return cx.unsupported_status(&format!("grep --color={v}"), TROUBLE);
                    }
                }
            }
            Arg::Long(l) => return cx.unsupported_status(&format!("grep option --{l}"), TROUBLE),
            Arg::Short(c @ ('b' | 'T' | 'D' | 'd' | 'u')) => {
                return cx.unsupported_status(&format!("grep option -{c}"), TROUBLE)
            }
            Arg::Short(c) => return super::usage(cx, p.invalid_short(c), TROUBLE),
            Arg::Operand(v) => ops.push(v),
        }
    }
    // a list of a million patterns is buried, not freed, should the deadline pass
    let patterns = PacedVec::new(match patterns {
        Some(p) => p,
        None => {
            if ops.is_empty() {
                cx.err_line("Usage: grep [OPTION]... PATTERNS [FILE]...\nTry 'grep --help' for more information.");
                return Ok(TROUBLE);
            }
            let first = ops.remove(0);
            first.split('\n').map(str::to_string).collect()
        }
    });
    let re = match build(cx, &patterns, dialect, icase, o.line)? {
        Ok(r) => r,
        Err(posix::Error::Syntax(m)) => {
            cx.err_line(&format!("grep: {m}"));
            return Ok(TROUBLE);
        }
        Err(posix::Error::Unsupported(m)) => {
            return cx.unsupported_status(&format!("grep: {m}"), TROUBLE)
        }
    };
    let m = Matcher {
        re,
        word: o.word,
        empty_ok: patterns.iter().any(|p| p.is_empty()),
    };
    let no_ops = ops.is_empty();
    if no_ops {
        ops.push(if o.recursive { ".".into() } else { "-".into() });
    }
    let show_names = o.names.unwrap_or(ops.len() > 1 || o.recursive);
    let mut g = Grep {
        o,
        m,
        show_names,
        whole: None,
        out: Vec::new(),
        any: false,
        trouble: false,
        done: false,
    };
    for op in ops {
        if g.done {
            break;
        }
        let strip = no_ops && g.o.recursive;
        g.operand(cx, &op, strip)?;
    }
    g.flush(cx)?;
    if g.o.quiet && g.any {
        return Ok(0);
    }
    Ok(if g.trouble {
        TROUBLE
    } else if g.any {
        0
    } else {
        1
    })
}

/// The patterns compiled: one regex, or for a long list one per
/// [`PATTERN_BYTES_PER_REGEX`] of them, looking at the clock between (the outer error).
fn build(
    cx: &mut Ctx<'_, '_>,
    patterns: &[String],
    dialect: char,
    icase: bool,
    line: bool,
) -> R<Result<Union, posix::Error>> {
    let mut parts = PacedVec::new(Vec::new());
    let mut alt = patterns.len() > 1;
    let mut bytes = 0usize;
    // whether every pattern is a plain string (what the whole-input search is for)
    let mut literal = !line;
    for (k, p) in patterns.iter().enumerate() {
        if k % 1024 == 1023 {
            cx.check_time()?;
        }
        let t = match dialect {
            'F' => regex::escape(p),
            'P' => p.clone(),
            'E' => match posix::translate(p, Dialect::Extended) {
                Ok((t, a)) => {
                    alt |= a;
                    t
                }
                Err(e) => return Ok(Err(e)),
            },
            _ => match posix::translate(p, Dialect::Basic) {
                Ok((t, a)) => {
                    alt |= a;
                    t
                }
                Err(e) => return Ok(Err(e)),
            },
        };
        literal &= is_literal(&t);
        let part = if line {
            format!("^(?:{t})$")
        } else {
            format!("(?:{t})")
        };
        bytes += part.len();
        parts.push(part);
    }
    if bytes <= PATTERN_BYTES_PER_REGEX {
        let joined = parts.join("|");
        // the whole-input search (see [`Scan`]) is for plain strings: some regexes
        // (`^1.*9$`) made the regex crate search the rest of the input for each line
        let whole = literal.then(|| format!("(?m){}(?:{joined})", if icase { "(?i)" } else { "" }));
        return Ok(Re::build(&joined, alt, icase).map(|re| Union(PacedVec::new(vec![re]), whole)));
    }
    // a long list: its pieces are alternations (leftmost-longest within each), and the
    // union takes the leftmost, then longest, of their matches
    let mut res = Union(PacedVec::new(Vec::new()), None);
    let mut piece: Vec<&str> = Vec::new();
    let mut piece_bytes = 0;
    for (k, part) in parts.iter().enumerate() {
        piece_bytes += part.len();
        piece.push(part);
        if piece_bytes >= PATTERN_BYTES_PER_REGEX || k + 1 == patterns.len() {
            cx.check_time()?;
            let alternatives = piece.len() > 1 || alt;
            match Re::build(&piece.join("|"), alternatives, icase) {
                Ok(re) => res.0.push(re),
                Err(e) => return Ok(Err(e)),
            }
            piece.clear();
            piece_bytes = 0;
        }
    }
    Ok(Ok(res))
}

/// Inputs smaller than this are matched line by line only: compiling the whole-input
/// regex of [`Scan`] costs more than it saves there.
const SCAN_MIN_BYTES: usize = 16 * 1024;

/// Bytes of input one whole-input search of [`Scan`] covers (it looks at no clock).
const SCAN_WINDOW: usize = 256 * 1024;

/// Which lines hold a match of plain strings, found by searching the whole input at once
/// rather than each line: `^` and `$` match at line ends (multi-line mode), so every match within a
/// line is a match of the whole input, and the leftmost match from a line's start tells
/// that no line before the one holding it matches. A match that runs over a newline (a
/// `[^x]` or `\s` can) decides nothing: that line is matched on its own.
struct Scan {
    re: regex::bytes::Regex,
    state: ScanState,
}

#[derive(Clone, Copy)]
enum ScanState {
    /// Nothing searched yet.
    Unknown,
    /// The leftmost match from where the last search began.
    Next(usize, usize),
    /// No match starts before this offset (where the last search's window ended).
    NoneUntil(usize),
}

impl Scan {
    /// A scan with `re` (a clone of a compiled regex shares it).
    fn new(re: regex::bytes::Regex) -> Self {
        Scan {
            re,
            state: ScanState::Unknown,
        }
    }

    /// Whether the line `body[ls..le]` holds a match; `None` when the search cannot
    /// tell (the caller matches the line itself).
    fn hit(&mut self, body: &[u8], ls: usize, le: usize) -> Option<bool> {
        loop {
            match self.state {
                ScanState::NoneUntil(w) if ls < w => return Some(false),
                ScanState::Next(s, _) if s > le => return Some(false),
                ScanState::Next(s, e) if s >= ls => return Some(e <= le).filter(|h| *h),
                _ => {}
            }
            // a window ends at a newline, where `$` matches anyway
            let wend = if body.len() - ls <= SCAN_WINDOW {
                body.len()
            } else {
                memchr::memchr(b'\n', &body[ls + SCAN_WINDOW..])
                    .map_or(body.len(), |p| ls + SCAN_WINDOW + p)
            };
            self.state = match self.re.find(&body[ls..wend]) {
                Some(m) => ScanState::Next(ls + m.start(), ls + m.end()),
                None => ScanState::NoneUntil(wend),
            };
        }
    }
}

/// Whether `t` (in the `regex` crate's syntax) matches only itself: letters, digits,
/// spaces and escaped ASCII punctuation.
fn is_literal(t: &str) -> bool {
    let mut chars = t.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if !chars.next().is_some_and(|e| e.is_ascii_punctuation()) {
                return false;
            }
        } else if !(c.is_alphanumeric() || c == ' ' || c == '_' || c == '-' || c == '/') {
            return false;
        }
    }
    true
}

struct Grep {
    o: Opts,
    m: Matcher,
    /// The whole-input regex of [`Scan`]: not compiled yet, or compiled (`None` when the
    /// patterns have none).
    whole: Option<Option<regex::bytes::Regex>>,
    show_names: bool,
    out: Vec<u8>,
    any: bool,
    trouble: bool,
    /// `-q` saw a match: nothing more to read.
    done: bool,
}

impl Grep {
    /// The whole-input regex, compiled the first time an input is big enough.
    fn whole(&mut self) -> Option<&regex::bytes::Regex> {
        if self.whole.is_none() {
            let re = self.m.re.1.as_deref().and_then(|src| {
                regex::bytes::RegexBuilder::new(src)
                    .size_limit(8 << 20)
                    .build()
                    .ok()
            });
            self.whole = Some(re);
        }
        self.whole.as_ref().and_then(Option::as_ref)
    }

    fn flush(&mut self, cx: &mut Ctx<'_, '_>) -> R<()> {
        if !self.out.is_empty() {
            let out = std::mem::take(&mut self.out);
            cx.out(&out)?;
        }
        Ok(())
    }

    fn warn(&mut self, cx: &mut Ctx<'_, '_>, msg: String) {
        self.trouble = true;
        if !self.o.silent {
            cx.err_line(&msg);
        }
    }

    fn operand(&mut self, cx: &mut Ctx<'_, '_>, op: &str, strip: bool) -> R<()> {
        if op == "-" {
            let data = cx.read_input("-").unwrap_or_default();
            let name = if self.o.label.is_empty() {
                "(standard input)".to_string()
            } else {
                self.o.label.clone()
            };
            return self.file(cx, &name, &data);
        }
        let cwd = cx.cwd().to_string();
        let ino = match cx.vfs().resolve(&cwd, op, true) {
            Ok(i) => i,
            Err(e) => {
                self.warn(cx, format!("grep: {op}: {}", e.msg()));
                return Ok(());
            }
        };
        if cx.vfs().get(ino).is_dir() {
            if !self.o.recursive {
                self.warn(cx, format!("grep: {op}: Is a directory"));
                return Ok(());
            }
            return self.walk(cx, op, ino, strip, 0);
        }
        if self.o.recursive && !self.included(op) {
            return Ok(());
        }
        match cx.read_input(op) {
            Ok(d) => self.file(cx, op, &d),
            Err(e) => {
                self.warn(cx, format!("grep: {op}: {e}"));
                Ok(())
            }
        }
    }

    fn included(&self, path: &str) -> bool {
        let base = path.rsplit('/').next().unwrap_or(path);
        if self
            .o
            .exclude
            .iter()
            .any(|g| crate::glob::matches(g, base, false))
        {
            return false;
        }
        self.o.include.is_empty()
            || self
                .o
                .include
                .iter()
                .any(|g| crate::glob::matches(g, base, false))
    }

    fn walk(
        &mut self,
        cx: &mut Ctx<'_, '_>,
        path: &str,
        dir: usize,
        strip: bool,
        depth: usize,
    ) -> R<()> {
        if depth > 256 {
            return Ok(());
        }
        let entries = match cx.vfs().list(dir) {
            Ok(e) => e,
            Err(e) => {
                self.warn(cx, format!("grep: {path}: {}", e.msg()));
                return Ok(());
            }
        };
        for (name, ino) in entries {
            cx.tick()?;
            if self.done {
                return Ok(());
            }
            let child = if strip && path == "." {
                name.clone()
            } else if path.ends_with('/') {
                format!("{path}{name}")
            } else {
                format!("{path}/{name}")
            };
            let node = cx.vfs().get(ino);
            match &node.kind {
                Kind::Dir(..) => {
                    if self
                        .o
                        .exclude_dir
                        .iter()
                        .any(|g| crate::glob::matches(g, &name, false))
                    {
                        continue;
                    }
                    self.walk(cx, &child, ino, strip, depth + 1)?;
                }
                Kind::File(_) => {
                    if !self.included(&child) {
                        continue;
                    }
                    let data = cx.vfs().data(ino).to_vec();
                    cx.hold(data.len())?;
                    self.file(cx, &child, &data)?;
                }
                // symlinks are not followed under -r; devices are skipped
                _ => {}
            }
        }
        Ok(())
    }

    fn prefix(&mut self, name: &str, n: usize, sep: u8) {
        if self.show_names {
            self.out.extend_from_slice(name.as_bytes());
            self.out.push(if self.o.null_after_name { 0 } else { sep });
        }
        if self.o.number {
            self.out.extend_from_slice(n.to_string().as_bytes());
            self.out.push(sep);
        }
    }

    fn file(&mut self, cx: &mut Ctx<'_, '_>, name: &str, data: &[u8]) -> R<()> {
        let term = if self.o.zero { 0 } else { b'\n' };
        let binary = !self.o.text && !self.o.zero && data.contains(&0);
        let body = data.strip_suffix(&[term]).unwrap_or(data);
        let mut count: u64 = 0;
        let context = self.o.after > 0 || self.o.before > 0;
        let plain = self.o.list.is_none() && !self.o.count && !self.o.quiet && !binary;
        // the last line printed (for context and group separators)
        let mut last_printed: Option<usize> = None;
        let mut after_left = 0usize;
        let mut printed_any = false;
        // the work since the clock was looked at: each line is matched against each regex
        let mut work = 0usize;
        // the lines before this one that `-B` may print, with their numbers
        let mut recent: VecDeque<(usize, &[u8])> = VecDeque::new();
        let mut scan = if term == b'\n' && !self.m.word && data.len() >= SCAN_MIN_BYTES {
            self.whole().cloned().map(Scan::new)
        } else {
            None
        };
        let mut next_start = 0usize;
        let mut next_index = 0usize;
        // the line before this one, kept for `-B` at the top of the next round
        let mut previous: Option<(usize, &[u8])> = None;
        while !data.is_empty() && next_start <= body.len() {
            if let Some(p) = previous.take() {
                if self.o.before > 0 {
                    recent.push_back(p);
                    if recent.len() > self.o.before {
                        recent.pop_front();
                    }
                }
            }
            let (i, ls) = (next_index, next_start);
            let end = memchr::memchr(term, &body[ls..]).map_or(body.len(), |p| ls + p);
            let line = &body[ls..end];
            next_start = end + 1;
            next_index += 1;
            previous = Some((i, line));
            if i % 256 == 255 {
                cx.tick()?;
                if self.out.len() > 1 << 16 {
                    self.flush(cx)?;
                }
            }
            work += (line.len() + 16) * self.m.re.0.len();
            if work >= WORK_PER_CHECK {
                work = 0;
                cx.check_time()?;
            }
            let matched = match scan.as_mut().and_then(|sc| sc.hit(body, ls, end)) {
                Some(h) => h,
                None => self.m.matches(line),
            };
            let hit = matched != self.o.invert;
            if self.o.max.is_some_and(|m| count >= m) {
                // after -m NUM, trailing context still prints
                if plain && after_left > 0 && !hit {
                    self.prefix(name, i + 1, b'-');
                    self.out.extend_from_slice(line);
                    self.out.push(term);
                    last_printed = Some(i);
                    after_left -= 1;
                    continue;
                }
                break;
            }
            if !hit {
                if plain && after_left > 0 {
                    self.prefix(name, i + 1, b'-');
                    self.out.extend_from_slice(line);
                    self.out.push(term);
                    last_printed = Some(i);
                    after_left -= 1;
                }
                continue;
            }
            count += 1;
            self.any = true;
            if self.o.quiet {
                self.done = true;
                return Ok(());
            }
            if !plain {
                if self.o.list.is_some() {
                    break;
                }
                if binary && !self.o.count {
                    break;
                }
                continue;
            }
            if context {
                let from = i.saturating_sub(self.o.before);
                let from = match last_printed {
                    Some(l) if l + 1 > from => l + 1,
                    _ => from,
                };
                if printed_any && last_printed.is_none_or(|l| from > l + 1) {
                    self.out.extend_from_slice(b"--\n");
                }
                for &(j, l) in recent.iter().filter(|(j, _)| *j >= from) {
                    self.prefix(name, j + 1, b'-');
                    self.out.extend_from_slice(l);
                    self.out.push(term);
                }
            }
            if self.o.only {
                if !self.o.invert {
                    let mut at = 0;
                    let mut found = 0usize;
                    while at <= line.len() {
                        // a long line holds millions of matches
                        found += 1;
                        if found.is_multiple_of(4096) {
                            cx.check_time()?;
                        }
                        let Some((s, e)) = self.m.find(line, at) else {
                            break;
                        };
                        if e > s {
                            self.prefix(name, i + 1, b':');
                            self.out.extend_from_slice(&line[s..e]);
                            self.out.push(term);
                            at = e;
                        } else {
                            at = s + 1;
                        }
                    }
                }
            } else {
                self.prefix(name, i + 1, b':');
                self.out.extend_from_slice(line);
                self.out.push(term);
            }
            printed_any = true;
            last_printed = Some(i);
            after_left = self.o.after;
        }
        if self.o.count {
            if self.show_names {
                self.out.extend_from_slice(name.as_bytes());
                self.out.push(if self.o.null_after_name { 0 } else { b':' });
            }
            self.out.extend_from_slice(format!("{count}\n").as_bytes());
        }
        match self.o.list {
            Some(true) if count > 0 => {
                self.out.extend_from_slice(name.as_bytes());
                self.out
                    .push(if self.o.null_after_name { 0 } else { b'\n' });
            }
            Some(false) if count == 0 => {
                self.out.extend_from_slice(name.as_bytes());
                self.out
                    .push(if self.o.null_after_name { 0 } else { b'\n' });
            }
            _ => {}
        }
        if binary && count > 0 && self.o.list.is_none() && !self.o.count && !self.o.quiet {
            self.flush(cx)?;
            cx.err_line(&format!("grep: {name}: binary file matches"));
        }
        Ok(())
    }
}
