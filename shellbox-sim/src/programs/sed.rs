//! `sed` (GNU sed 4.9), the common part: addresses (`N`, `$`, `/RE/`, `\cREc`, `first~step`,
//! `0,/RE/`, ranges `A,B` and `A,+N`, `!`), the commands `s` (flags `g`, `p`, `N`, `i`/`I`),
//! `d`, `p`, `P`, `n`, `N`, `D`, `q`, `Q` (with exit codes), `=`, `y`, `a`, `i`, `c` (one-line
//! and `a\` forms), `h`, `H`, `g`, `G`, `x`; options `-n`, `-e`, `-f`, `-E`/`-r`,
//! `-i[SUFFIX]`, `-s`, `-z`, `-u`. Not done, and failing visibly (status 1, recorded as
//! unsupported): `{ }` blocks, labels and branches (`b`, `t`, `T`, `:`), `l`, `r`, `R`, `w`,
//! `W`, `e`, `F`, `z`, `v`, the `w`/`e`/`m` flags of `s`, the `M` address flag and the empty
//! regex (the last one used).

use super::opts::{Arg, Parser};
use super::posix::{Dialect, Re};
use super::Ctx;
use crate::shell::R;

/// GNU's usage status for sed (also its status for a bad script).
const USAGE: i32 = 1;

#[derive(Clone)]
enum Addr {
    Line(u64),
    Last,
    Re(Re),
    Step(u64, u64),
    /// `0` of `0,/RE/`.
    Zero,
}

#[derive(Clone)]
enum End {
    Addr(Addr),
    /// `+N`: N more lines.
    Plus(u64),
}

#[derive(Clone)]
enum Piece {
    Lit(Vec<u8>),
    Whole,
    Group(usize),
}

#[derive(Clone)]
enum Op {
    S {
        re: Re,
        repl: Vec<Piece>,
        global: bool,
        nth: usize,
        print: bool,
    },
    D,
    BigD,
    P,
    BigP,
    N,
    BigN,
    Q(i32),
    BigQ(i32),
    Eq,
    Y(Vec<char>, Vec<char>),
    A(String),
    I(String),
    C(String),
    H,
    BigH,
    G,
    BigG,
    X,
}

#[derive(Clone)]
struct Cmd {
    a1: Option<Addr>,
    a2: Option<End>,
    neg: bool,
    op: Op,
    /// In a range now; for `+N`, the line it ends at.
    active: bool,
    until: u64,
}

/// A script error: GNU's words after `sed: -e expression #1, char N: `.
struct Bad(String);

struct P<'a> {
    s: &'a [char],
    i: usize,
    ere: bool,
}

impl P<'_> {
    fn peek(&self) -> Option<char> {
        self.s.get(self.i).copied()
    }
    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.i += 1;
        Some(c)
    }
    fn skip_ws(&mut self) {
        while self.peek().is_some_and(|c| c == ' ' || c == '\t') {
            self.i += 1;
        }
    }
    fn num(&mut self) -> Option<u64> {
        let st = self.i;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
        if st == self.i {
            return None;
        }
        self.s[st..self.i].iter().collect::<String>().parse().ok()
    }
    /// Text up to an unescaped `delim` (consumed); `\delim` becomes `delim`.
    fn delimited(&mut self, delim: char) -> Result<String, Bad> {
        let mut out = String::new();
        loop {
            match self.bump() {
                None => return Err(Bad("unterminated address regex".into())),
                Some('\\') => match self.bump() {
                    Some(c) if c == delim => out.push(c),
                    Some('n') => out.push('\n'),
                    Some(c) => {
                        out.push('\\');
                        out.push(c);
                    }
                    None => return Err(Bad("unterminated address regex".into())),
                },
                Some(c) if c == delim => return Ok(out),
                Some(c) => out.push(c),
            }
        }
    }
    fn regex(&self, pat: &str, icase: bool) -> Result<Re, Bad> {
        if pat.is_empty() {
            return Err(Bad("no previous regular expression".into()));
        }
        let d = if self.ere {
            Dialect::Extended
        } else {
            Dialect::Basic
        };
        Re::new(pat, d, icase).map_err(|e| match e {
            super::posix::Error::Syntax(m) | super::posix::Error::Unsupported(m) => Bad(m),
        })
    }
    fn addr(&mut self) -> Result<Option<Addr>, Bad> {
        match self.peek() {
            Some(c) if c.is_ascii_digit() => {
                let n = self.num().unwrap_or(0);
                if self.peek() == Some('~') {
                    self.i += 1;
                    let step = self.num().unwrap_or(0);
                    return Ok(Some(Addr::Step(n, step)));
                }
                Ok(Some(if n == 0 { Addr::Zero } else { Addr::Line(n) }))
            }
            Some('$') => {
                self.i += 1;
                Ok(Some(Addr::Last))
            }
            Some('/') | Some('\\') => {
                let delim = if self.bump() == Some('\\') {
                    self.bump().ok_or_else(|| Bad("unexpected `,'".into()))?
                } else {
                    '/'
                };
                let pat = self.delimited(delim)?;
                let mut icase = false;
                while matches!(self.peek(), Some('I')) {
                    self.i += 1;
                    icase = true;
                }
                if self.peek() == Some('M') {
                    return Err(Bad("unsupported: the M address flag".into()));
                }
                Ok(Some(Addr::Re(self.regex(&pat, icase)?)))
            }
            _ => Ok(None),
        }
    }
    /// The text of `a`, `i`, `c`: `a\` then the next line(s), or `a text`.
    fn text(&mut self) -> String {
        self.skip_ws();
        if self.peek() == Some('\\') {
            self.i += 1;
            if self.peek() == Some('\n') {
                self.i += 1;
            }
        }
        let mut out = String::new();
        while let Some(c) = self.bump() {
            match c {
                '\\' => match self.bump() {
                    Some(n) => out.push(n),
                    None => break,
                },
                '\n' => break,
                c => out.push(c),
            }
        }
        out
    }
}

fn parse_repl(text: &str) -> Vec<Piece> {
    let mut out = Vec::new();
    let mut lit = Vec::new();
    let mut chars = text.chars();
    let flush = |lit: &mut Vec<u8>, out: &mut Vec<Piece>| {
        if !lit.is_empty() {
            out.push(Piece::Lit(std::mem::take(lit)));
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '&' => {
                flush(&mut lit, &mut out);
                out.push(Piece::Whole);
            }
            '\\' => match chars.next() {
                Some(d @ '0'..='9') => {
                    flush(&mut lit, &mut out);
                    let g = d as usize - '0' as usize;
                    out.push(if g == 0 {
                        Piece::Whole
                    } else {
                        Piece::Group(g)
                    });
                }
                Some('n') => lit.push(b'\n'),
                Some('t') => lit.push(b'\t'),
                Some(o) => lit.extend_from_slice(o.encode_utf8(&mut [0; 4]).as_bytes()),
                None => lit.push(b'\\'),
            },
            c => lit.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    flush(&mut lit, &mut out);
    out
}

/// What [`parse`] fails with when the command must stop ([`crate::shell::stop_due`], looked
/// at every 64 commands: each may compile a regex, and `sed -f` reads scripts of megabytes).
const STOPPED: &str = "\u{0}stopped";

fn parse(script: &str, ere: bool) -> Result<Vec<Cmd>, Bad> {
    let mut chars: Vec<char> = Vec::with_capacity(script.len());
    let mut pace = crate::shell::Pacer::default();
    for c in script.chars() {
        if pace.due(4) {
            return Err(Bad(STOPPED.into()));
        }
        chars.push(c);
    }
    let mut p = P {
        s: &chars,
        i: 0,
        ere,
    };
    let mut cmds: Vec<Cmd> = Vec::new();
    loop {
        if cmds.len() % 64 == 63 && crate::shell::stop_due() {
            return Err(Bad(STOPPED.into()));
        }
        while p.peek().is_some_and(|c| c.is_whitespace() || c == ';') {
            p.i += 1;
        }
        if p.peek().is_none() {
            break;
        }
        if p.peek() == Some('#') {
            while p.bump().is_some_and(|c| c != '\n') {}
            continue;
        }
        let a1 = p.addr()?;
        let mut a2 = None;
        if a1.is_some() && p.peek() == Some(',') {
            p.i += 1;
            p.skip_ws();
            if p.peek() == Some('+') {
                p.i += 1;
                a2 =
                    Some(End::Plus(p.num().ok_or_else(|| {
                        Bad("expected newer version of sed".into())
                    })?));
            } else {
                match p.addr()? {
                    Some(Addr::Zero) => return Err(Bad("invalid usage of line address 0".into())),
                    Some(a) => a2 = Some(End::Addr(a)),
                    None => return Err(Bad("unexpected `,'".into())),
                }
            }
        }
        if matches!(a1, Some(Addr::Zero)) && !matches!(a2, Some(End::Addr(Addr::Re(_)))) {
            return Err(Bad("invalid usage of line address 0".into()));
        }
        p.skip_ws();
        let mut neg = false;
        while p.peek() == Some('!') {
            neg = true;
            p.i += 1;
            p.skip_ws();
        }
        let Some(c) = p.bump() else {
            return Err(Bad("missing command".into()));
        };
        let exit_code = |p: &mut P<'_>| {
            p.skip_ws();
            p.num().map_or(0, |n| n.min(255) as i32)
        };
        let op = match c {
            's' => {
                let delim = p
                    .bump()
                    .ok_or_else(|| Bad("unterminated `s' command".into()))?;
                if delim == '\n' || delim == '\\' {
                    return Err(Bad("unterminated `s' command".into()));
                }
                let pat = p
                    .delimited(delim)
                    .map_err(|_| Bad("unterminated `s' command".into()))?;
                let mut repl = String::new();
                loop {
                    match p.bump() {
                        None => return Err(Bad("unterminated `s' command".into())),
                        Some('\\') => match p.bump() {
                            Some(c) if c == delim => repl.push(c),
                            Some('\n') => repl.push('\n'),
                            Some(c) => {
                                repl.push('\\');
                                repl.push(c);
                            }
                            None => return Err(Bad("unterminated `s' command".into())),
                        },
                        Some(c) if c == delim => break,
                        Some(c) => repl.push(c),
                    }
                }
                let (mut global, mut nth, mut print, mut icase) = (false, 1usize, false, false);
                loop {
                    match p.peek() {
                        Some('g') => global = true,
                        Some('p') => print = true,
                        Some('i' | 'I') => icase = true,
                        Some(d) if d.is_ascii_digit() => {
                            nth = p.num().unwrap_or(1).max(1) as usize;
                            continue;
                        }
                        Some('w' | 'e' | 'm' | 'M') => {
                            return Err(Bad(format!(
                                "unsupported: the s///{} flag",
                                p.peek().unwrap_or(' ')
                            )))
                        }
                        _ => break,
                    }
                    p.i += 1;
                }
                if pat.is_empty() {
                    return Err(Bad("unsupported: an empty regex (the last one used)".into()));
                }
                Op::S {
                    re: p.regex(&pat, icase)?,
                    repl: parse_repl(&repl),
                    global,
                    nth,
                    print,
                }
            }
            'd' => Op::D,
            'D' => Op::BigD,
            'p' => Op::P,
            'P' => Op::BigP,
            'n' => Op::N,
            'N' => Op::BigN,
            'q' => Op::Q(exit_code(&mut p)),
            'Q' => Op::BigQ(exit_code(&mut p)),
            '=' => Op::Eq,
            'h' => Op::H,
            'H' => Op::BigH,
            'g' => Op::G,
            'G' => Op::BigG,
            'x' => Op::X,
            'a' => Op::A(p.text()),
            'i' => Op::I(p.text()),
            'c' => Op::C(p.text()),
            'y' => {
                let delim = p
                    .bump()
                    .ok_or_else(|| Bad("unterminated `y' command".into()))?;
                let from: Vec<char> = p
                    .delimited(delim)
                    .map_err(|_| Bad("unterminated `y' command".into()))?
                    .chars()
                    .collect();
                let to: Vec<char> = p
                    .delimited(delim)
                    .map_err(|_| Bad("unterminated `y' command".into()))?
                    .chars()
                    .collect();
                if from.len() != to.len() {
                    return Err(Bad("strings for `y' command are different lengths".into()));
                }
                Op::Y(from, to)
            }
            '{' | '}' | 'b' | 't' | 'T' | ':' | 'l' | 'r' | 'R' | 'w' | 'W' | 'e' | 'F' | 'z'
            | 'v' => return Err(Bad(format!("unsupported: the {c} command"))),
            other => return Err(Bad(format!("unknown command: `{other}'"))),
        };
        // after a command: spaces, then `;`, a newline, `}` or `#`
        p.skip_ws();
        match p.peek() {
            None | Some(';') | Some('\n') | Some('#') => {}
            Some('}') => return Err(Bad("unsupported: the } command".into())),
            Some(_) if matches!(op, Op::A(_) | Op::I(_) | Op::C(_)) => {}
            Some(_) => return Err(Bad("extra characters after command".into())),
        }
        cmds.push(Cmd {
            a1,
            a2,
            neg,
            op,
            active: false,
            until: 0,
        });
    }
    Ok(cmds)
}

fn addr_matches(a: &Addr, line: &[u8], n: u64, last: bool) -> bool {
    match a {
        Addr::Line(k) => n == *k,
        Addr::Last => last,
        Addr::Re(re) => re.is_match(line),
        Addr::Step(f, s) => {
            if *s == 0 {
                n == *f
            } else {
                n >= *f && (n - f).is_multiple_of(*s)
            }
        }
        Addr::Zero => false,
    }
}

/// Whether `c` applies to this line (and its range state after it).
fn selects(c: &mut Cmd, line: &[u8], n: u64, last: bool) -> bool {
    let hit = match (&c.a1, &c.a2) {
        (None, _) => true,
        (Some(a), None) => addr_matches(a, line, n, last),
        (Some(a1), Some(end)) => {
            if c.active {
                let done = match end {
                    End::Plus(_) => n >= c.until,
                    End::Addr(Addr::Line(k)) => n >= *k,
                    End::Addr(e) => addr_matches(e, line, n, last),
                };
                if done {
                    c.active = false;
                }
                true
            } else if matches!(a1, Addr::Zero) || addr_matches(a1, line, n, last) {
                // `0,/re/` may end on line 1 itself
                let ends_here = match end {
                    End::Plus(k) => {
                        c.until = n + k;
                        *k == 0
                    }
                    End::Addr(Addr::Line(k)) => *k <= n,
                    End::Addr(e) if matches!(a1, Addr::Zero) => addr_matches(e, line, n, last),
                    End::Addr(_) => false,
                };
                c.active = !ends_here;
                if matches!(a1, Addr::Zero) && n > 1 {
                    // `0,/re/` starts before line 1 only
                    c.active = false;
                    false
                } else {
                    true
                }
            } else {
                false
            }
        }
    };
    hit != c.neg
}

/// Matches between two looks at the wall clock in [`substitute`].
const MATCHES_PER_CHECK: usize = 1024;

/// `s///` on `ps`: the new text, `Ok(None)` when nothing matched, `Err(())` when the
/// running command's deadline passed part-way (looked at every [`MATCHES_PER_CHECK`]
/// matches).
fn substitute(
    re: &Re,
    repl: &[Piece],
    global: bool,
    nth: usize,
    ps: &[u8],
) -> Result<Option<Vec<u8>>, ()> {
    let mut out = Vec::with_capacity(ps.len());
    let mut pos = 0;
    let mut count = 0;
    let mut done = false;
    let mut changed = false;
    while pos <= ps.len() && !done {
        let Some(caps) = re.captures_at(ps, pos) else {
            break;
        };
        let Some((s, e)) = caps[0] else { break };
        count += 1;
        if count % MATCHES_PER_CHECK == 0 && crate::shell::stop_due() {
            return Err(());
        }
        if count >= nth {
            out.extend_from_slice(&ps[pos..s]);
            for p in repl {
                match p {
                    Piece::Lit(l) => out.extend_from_slice(l),
                    Piece::Whole => out.extend_from_slice(&ps[s..e]),
                    Piece::Group(g) => {
                        if let Some(Some((a, b))) = caps.get(*g) {
                            out.extend_from_slice(&ps[*a..*b]);
                        }
                    }
                }
            }
            changed = true;
            if !global {
                done = true;
            }
        } else {
            out.extend_from_slice(&ps[pos..e]);
        }
        if e == s {
            // an empty match: keep one character and go on after it
            if s < ps.len() {
                let w = utf8_len(ps[s]).min(ps.len() - s);
                out.extend_from_slice(&ps[s..s + w]);
                pos = s + w;
            } else {
                pos = s + 1;
            }
        } else {
            pos = e;
        }
    }
    if !changed {
        return Ok(None);
    }
    if pos < ps.len() {
        out.extend_from_slice(&ps[pos..]);
    }
    Ok(Some(out))
}

fn utf8_len(b: u8) -> usize {
    match b {
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf7 => 4,
        _ => 1,
    }
}

/// One input unit: `-s`/`-i` run each file alone, else all files make one stream.
///
/// The unit keeps each file's bytes as read (already charged to the memory budget by
/// [`Ctx::read_input`]) and hands out its lines one at a time ([`Unit::next_into`]): a
/// file of a million lines is never copied into a million strings (a step that, with
/// their freeing, ran over 100 ms past a deadline without looking at the clock).
struct Unit {
    name: Option<String>,
    /// Each non-empty file's bytes and the length of its body (its bytes less a final
    /// terminator): its lines are the body split at the terminator.
    files: Vec<(Vec<u8>, usize)>,
    /// The file the next line comes from (`files.len()` at the end).
    file: usize,
    /// Where the next line starts in that file's bytes.
    pos: usize,
    /// Whether the last line had its terminator.
    ends: bool,
}

impl Unit {
    fn new(name: Option<String>) -> Self {
        Unit {
            name,
            files: Vec::new(),
            file: 0,
            pos: 0,
            ends: true,
        }
    }

    /// Adds a file's bytes `d` (lines ended by `term`) to the end of the unit.
    fn push(&mut self, d: Vec<u8>, term: u8) {
        if d.is_empty() {
            // no lines: the previous file's last line stays the last
            return;
        }
        self.ends = d.last() == Some(&term);
        let body = d.len() - usize::from(self.ends);
        self.files.push((d, body));
    }

    /// Whether a line is left.
    fn more(&self) -> bool {
        self.file < self.files.len()
    }

    /// Appends the next line (without its terminator) to `buf`; `false` at the end.
    fn next_into(&mut self, buf: &mut Vec<u8>, term: u8) -> bool {
        let Some((d, body)) = self.files.get(self.file) else {
            return false;
        };
        let rest = &d[self.pos..*body];
        match rest.iter().position(|b| *b == term) {
            Some(i) => {
                buf.extend_from_slice(&rest[..i]);
                self.pos += i + 1;
            }
            None => {
                buf.extend_from_slice(rest);
                // this file is done: free its bytes now
                self.files[self.file] = (Vec::new(), 0);
                self.file += 1;
                self.pos = 0;
            }
        }
        true
    }
}

/// What a run of the script over a unit asked for.
enum Exit {
    Go,
    Quit(i32),
}

/// What lasts from one unit to the next: the line number and the hold space.
struct State {
    n: u64,
    hold: Vec<u8>,
}

fn run_unit(
    cx: &mut Ctx<'_, '_>,
    cmds: &mut [Cmd],
    unit: &mut Unit,
    (quiet, term): (bool, u8),
    st: &mut State,
    out: &mut Vec<u8>,
) -> R<Exit> {
    let State { n: n0, hold } = st;
    let mut lines = 0usize;
    // what of `out` is charged to the memory budget
    let mut charged = 0usize;
    let mut steps = 0usize;
    let emit = |out: &mut Vec<u8>, s: &[u8], nl: bool| {
        out.extend_from_slice(s);
        if nl {
            out.push(term);
        }
    };
    while unit.more() {
        lines += 1;
        if lines.is_multiple_of(1024) {
            // only the growth since the last charge
            cx.hold(out.len().saturating_sub(charged))?;
            charged = charged.max(out.len());
            cx.tick()?;
        }
        let mut ps = Vec::new();
        unit.next_into(&mut ps, term);
        *n0 += 1;
        let mut appends: Vec<Vec<u8>> = Vec::new();
        let mut deleted = false;
        let mut quit: Option<(i32, bool)> = None;
        let mut k = 0;
        'cycle: while k < cmds.len() {
            // a script of many commands runs them all on every line
            steps += 1;
            if steps.is_multiple_of(4096) {
                cx.check_time()?;
            }
            let last = !unit.more();
            let n = *n0;
            let c = &mut cmds[k];
            k += 1;
            if !selects(c, &ps, n, last) {
                continue;
            }
            let in_range = c.active;
            match c.op.clone() {
                Op::S {
                    re,
                    repl,
                    global,
                    nth,
                    print,
                } => {
                    let new = match substitute(&re, &repl, global, nth, &ps) {
                        Ok(n) => n,
                        Err(()) => {
                            cx.check_time()?;
                            None
                        }
                    };
                    if let Some(new) = new {
                        ps = new;
                        if print {
                            emit(out, &ps, true);
                        }
                    }
                }
                Op::D => {
                    deleted = true;
                    break 'cycle;
                }
                Op::BigD => {
                    match ps.iter().position(|b| *b == b'\n') {
                        None => {
                            deleted = true;
                            break 'cycle;
                        }
                        Some(i) => {
                            ps.drain(..=i);
                            // restart the script without reading a new line
                            k = 0;
                            continue;
                        }
                    }
                }
                Op::P => emit(out, &ps, true),
                Op::BigP => {
                    let end = ps.iter().position(|b| *b == b'\n').unwrap_or(ps.len());
                    emit(out, &ps[..end], true);
                }
                Op::N => {
                    if !unit.more() {
                        // GNU: at the end, n quits (printing unless -n)
                        break 'cycle;
                    }
                    if !quiet {
                        emit(out, &ps, true);
                    }
                    for a in appends.drain(..) {
                        emit(out, &a, true);
                    }
                    ps.clear();
                    unit.next_into(&mut ps, term);
                    *n0 += 1;
                }
                Op::BigN => {
                    if !unit.more() {
                        break 'cycle;
                    }
                    ps.push(b'\n');
                    unit.next_into(&mut ps, term);
                    *n0 += 1;
                }
                Op::Q(code) => {
                    quit = Some((code, true));
                    break 'cycle;
                }
                Op::BigQ(code) => {
                    quit = Some((code, false));
                    break 'cycle;
                }
                Op::Eq => emit(out, n.to_string().as_bytes(), true),
                Op::Y(from, to) => {
                    let s = String::from_utf8_lossy(&ps).into_owned();
                    ps = s
                        .chars()
                        .map(|c| from.iter().position(|f| *f == c).map_or(c, |i| to[i]))
                        .collect::<String>()
                        .into_bytes();
                }
                Op::A(t) => appends.push(t.into_bytes()),
                Op::I(t) => emit(out, t.as_bytes(), true),
                Op::C(t) => {
                    // in a range, the text once, at its end
                    if !in_range || c_is_negated_or_single(&cmds[k - 1]) {
                        emit(out, t.as_bytes(), true);
                    }
                    deleted = true;
                    break 'cycle;
                }
                Op::H => *hold = ps.clone(),
                Op::BigH => {
                    hold.push(b'\n');
                    hold.extend_from_slice(&ps);
                }
                Op::G => ps = hold.clone(),
                Op::BigG => {
                    ps.push(b'\n');
                    ps.extend_from_slice(hold);
                }
                Op::X => std::mem::swap(&mut ps, hold),
            }
        }
        let last_line = !unit.more();
        if !deleted && !(matches!(quit, Some((_, false)))) && !quiet {
            emit(out, &ps, !last_line || unit.ends);
        }
        for a in appends {
            emit(out, &a, true);
        }
        if let Some((code, _)) = quit {
            return Ok(Exit::Quit(code));
        }
    }
    Ok(Exit::Go)
}

fn c_is_negated_or_single(c: &Cmd) -> bool {
    c.neg || c.a2.is_none()
}

pub(super) fn main(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new(
        "sed",
        args,
        &[
            "quiet",
            "silent",
            "expression",
            "file",
            "regexp-extended",
            "in-place",
            "separate",
            "null-data",
            "zero-terminated",
            "posix",
            "debug",
            "sandbox",
            "unbuffered",
            "line-length",
            "follow-symlinks",
            "help",
            "version",
        ],
    );
    let mut quiet = false;
    let mut scripts: Vec<String> = Vec::new();
    let mut ere = false;
    let mut in_place: Option<String> = None;
    let mut separate = false;
    let mut term = b'\n';
    let mut ops = Vec::new();
    loop {
        match p.next_in(cx)? {
            Ok(Some(Arg::Short('n')))
            | Ok(Some(Arg::Long("quiet")))
            | Ok(Some(Arg::Long("silent"))) => quiet = true,
            Ok(Some(Arg::Short('e'))) | Ok(Some(Arg::Long("expression"))) => match p.value() {
                Ok(v) => scripts.push(v),
                Err(u) => return super::usage(cx, u, USAGE),
            },
            Ok(Some(Arg::Short('f'))) | Ok(Some(Arg::Long("file"))) => match p.value() {
                Ok(f) => match cx.read_input(&f) {
                    Ok(d) => {
                        // a script file of megabytes: decoded in pieces
                        let Some(mut t) = crate::shell::lossy_paced(&d, usize::MAX) else {
                            return Err(cx.interrupted());
                        };
                        if t.ends_with('\n') {
                            t.pop();
                        }
                        scripts.push(t)
                    }
                    Err(e) => {
                        cx.err_line(&format!("sed: couldn't open file {f}: {e}"));
                        return Ok(USAGE);
                    }
                },
                Err(u) => return super::usage(cx, u, USAGE),
            },
            Ok(Some(Arg::Short('E' | 'r'))) | Ok(Some(Arg::Long("regexp-extended"))) => ere = true,
            Ok(Some(Arg::Short('i'))) | Ok(Some(Arg::Long("in-place"))) => {
                in_place = Some(p.optional_value().unwrap_or_default());
                separate = true;
            }
            Ok(Some(Arg::Short('s'))) | Ok(Some(Arg::Long("separate"))) => separate = true,
            Ok(Some(Arg::Short('z')))
            | Ok(Some(Arg::Long("null-data")))
            | Ok(Some(Arg::Long("zero-terminated"))) => term = b'\0',
            Ok(Some(Arg::Short('u'))) | Ok(Some(Arg::Long("unbuffered"))) => {}
            Ok(Some(Arg::Long(l))) => {
                return cx.unsupported_status(&format!("sed option --{l}"), USAGE)
            }
            Ok(Some(Arg::Short('l'))) => return cx.unsupported_status("sed option -l", USAGE),
            Ok(Some(Arg::Short(c))) => return super::usage(cx, p.invalid_short(c), USAGE),
            Ok(Some(Arg::Operand(o))) => ops.push(o),
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, USAGE),
        }
    }
    if scripts.is_empty() {
        if ops.is_empty() {
            cx.err_line("Usage: sed [OPTION]... {script-only-if-no-other-script} [input-file]...");
            return Ok(USAGE);
        }
        scripts.push(ops.remove(0));
    }
    cx.check_time()?;
    let script = scripts.join("\n");
    drop(scripts);
    cx.check_time()?;
    let mut cmds = match parse(&script, ere) {
        Ok(c) => c,
        Err(Bad(m)) if m == STOPPED => return Err(cx.interrupted()),
        Err(Bad(m)) if m.starts_with("unsupported: ") => {
            return cx.unsupported_status(&format!("sed {}", &m["unsupported: ".len()..]), USAGE)
        }
        Err(Bad(m)) => {
            cx.err_line(&format!(
                "sed: -e expression #1, char {}: {m}",
                script.chars().count()
            ));
            return Ok(USAGE);
        }
    };
    if in_place.is_some() && ops.is_empty() {
        cx.err_line("sed: no input files");
        // GNU's status for a failed input/output
        return Ok(4);
    }
    if ops.is_empty() {
        ops.push("-".into());
    }
    let mut status = 0;
    let mut units: Vec<Unit> = Vec::new();
    let mut joined = Unit::new(None);
    for f in &ops {
        cx.check_time()?;
        let d = match cx.read_input(f) {
            Ok(d) => d,
            Err(e) => {
                cx.err_line(&format!("sed: can't read {f}: {e}"));
                status = 2;
                continue;
            }
        };
        if separate {
            let mut u = Unit::new(Some(f.clone()));
            u.push(d, term);
            units.push(u);
        } else {
            joined.push(d, term);
        }
    }
    if !separate {
        units.push(joined);
    }
    let mut st = State {
        n: 0,
        hold: Vec::new(),
    };
    let mut stdout = Vec::new();
    for u in &mut units {
        let mut out = Vec::new();
        let r = run_unit(cx, &mut cmds, u, (quiet, term), &mut st, &mut out)?;
        if separate {
            // each file counts its own lines, and ranges start afresh
            st.n = 0;
            for c in cmds.iter_mut() {
                c.active = false;
            }
        }
        match (&in_place, &u.name) {
            (Some(suffix), Some(name)) if name != "-" => {
                if !suffix.is_empty() {
                    let base = name.rsplit('/').next().unwrap_or(name);
                    let backup = if suffix.contains('*') {
                        let b = suffix.replace('*', base);
                        match name.rsplit_once('/') {
                            Some((dir, _)) if !b.contains('/') => format!("{dir}/{b}"),
                            _ => b,
                        }
                    } else {
                        format!("{name}{suffix}")
                    };
                    let old = cx.read_input(name).unwrap_or_default();
                    if let Err(e) = cx.write_file(&backup, old) {
                        cx.err_line(&format!("sed: cannot rename {name}: {}", e.msg()));
                        return Ok(4);
                    }
                }
                if let Err(e) = cx.write_file(name, out) {
                    cx.err_line(&format!(
                        "sed: couldn't open temporary file {name}: {}",
                        e.msg()
                    ));
                    return Ok(4);
                }
            }
            // the first unit's output moves (a copy of megabytes is one step)
            _ if stdout.is_empty() => stdout = out,
            _ => stdout.extend_from_slice(&out),
        }
        if let Exit::Quit(code) = r {
            cx.out(&stdout)?;
            return Ok(code);
        }
    }
    cx.out(&stdout)?;
    Ok(status)
}
