//! Word expansion: braces, tilde, parameters, command substitution, arithmetic, word
//! splitting, pathname expansion and quote removal; `[[ ]]` evaluation.

use brush_parser::ast;
use brush_parser::word::{
    self, Parameter, ParameterExpr, ParameterTestType, SpecialParameter, WordPiece,
    WordPieceWithSource,
};

use crate::shell::{get_elem, Ctl, IfsChars, Interp, Pacer, Shell, Value, CHUNK_BYTES, R};

thread_local! {
    static WORD_CACHE: std::cell::RefCell<std::collections::HashMap<String, std::rc::Rc<Vec<WordPieceWithSource>>>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
    static ARITH_CACHE: std::cell::RefCell<std::collections::HashMap<String, Option<std::rc::Rc<ast::ArithmeticExpr>>>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// The most operator characters an arithmetic expression may hold. brush-parser parses an
/// operator chain recursively, a few stack frames per operator: `$((!!!…1))` with 50,000
/// `!` or `1+1+…` with 70,000 terms overflowed the parser's 32 MiB stack in a release
/// build and aborted the whole process (a debug build's frames are larger: 2,450 `!`).
/// Bash has no such bound; no hand-written expression comes near it.
pub(crate) const MAX_ARITH_OPERATORS: usize = 1024;

/// How deep array subscripts may nest inside one arithmetic expression (`a[a[a[a[0]]]]` is
/// 4). brush-parser's arithmetic grammar backtracks over a subscript, about ten times the
/// work per level: 5 levels took 0.24 s in a release build, 6 took 4 s and 7 more than 35 s,
/// inside the parser, where no deadline or signal is looked at (break-it of issue 16: a 1 s
/// timeout and SIGTERM went unheeded). Bash has no such bound; scripts nest two or three.
pub(crate) const MAX_ARITH_SUBSCRIPT_NESTING: usize = 4;

/// The deepest `[` nesting of `t`.
fn subscript_nesting(t: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    for b in t.bytes() {
        match b {
            b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Parses an arithmetic expression once per text (per thread); `None` for a syntax error,
/// nesting past [`crate::shell::MAX_NESTING`], more than [`MAX_ARITH_OPERATORS`]
/// operators or subscripts nested past [`MAX_ARITH_SUBSCRIPT_NESTING`].
fn parse_arith(t: &str) -> Option<std::rc::Rc<ast::ArithmeticExpr>> {
    if let Some(hit) = ARITH_CACHE.with(|c| c.borrow().get(t).cloned()) {
        return hit;
    }
    if !crate::shell::nesting_ok(t)
        || arith_operators(t) > MAX_ARITH_OPERATORS
        || subscript_nesting(t) > MAX_ARITH_SUBSCRIPT_NESTING
    {
        return None;
    }
    let parsed = crate::shell::with_parser_stack(|| brush_parser::arithmetic::parse(t))
        .ok()
        .map(std::rc::Rc::new);
    ARITH_CACHE.with(|c| {
        if t.len() > 4096 {
            return;
        }
        let mut c = c.borrow_mut();
        if c.len() > 4096 {
            c.clear();
        }
        c.insert(t.to_string(), parsed.clone());
    });
    parsed
}

/// How many operator characters `t` holds (each of `+-*/%!~<>=&|^?:,`).
fn arith_operators(t: &str) -> usize {
    t.bytes()
        .filter(|b| b"+-*/%!~<>=&|^?:,".contains(b))
        .count()
}

const LIT: u8 = 0;
const QUO: u8 = 1;
const EXP: u8 = 2;

#[derive(Debug, Clone, Default)]
struct Field {
    s: String,
    f: Vec<u8>,
    q: bool,
}

#[derive(Default)]
struct Fb {
    done: Vec<Field>,
    cur: Field,
    /// Bytes of text pushed so far, over all fields.
    bytes: usize,
    /// Most text bytes this word may build; past it `over` is set and nothing more is kept.
    budget: usize,
    over: bool,
}

impl Fb {
    /// A builder holding at most `memory_limit / 4` bytes of text: each byte also costs a
    /// flag byte, and the value it replaces (a variable built the same way) is live too, so
    /// a doubling `x=$x$x` loop stays within the machine's memory budget.
    fn new(memory_limit: u64) -> Self {
        Fb {
            budget: usize::try_from(memory_limit / 4).unwrap_or(usize::MAX),
            ..Fb::default()
        }
    }

    /// A builder for `it`'s machine: at most a quarter of the memory budget, and no more
    /// than what the machine has left (each text byte also costs a flag byte).
    fn for_machine(it: &Interp<'_>) -> Self {
        let left = it.w.memory_limit.saturating_sub(it.memory_used()) / 2;
        Fb::new(it.w.memory_limit.min(left.saturating_mul(4)))
    }
    /// Appends `s` with its flag; sets `over` when the word outgrows its budget or (for
    /// big text, checked once per [`CHUNK_BYTES`]) the command's deadline passed.
    fn push(&mut self, s: &str, flag: u8) {
        if self.over {
            return;
        }
        self.bytes = self.bytes.saturating_add(s.len());
        if self.bytes > self.budget {
            self.over = true;
            return;
        }
        if s.len() < CHUNK_BYTES {
            self.cur.s.push_str(s);
            push_flags(&mut self.cur.f, flag, s.len());
            return;
        }
        // big text is copied one piece at a time, looking between pieces whether the
        // command must stop (a timeout or an interrupt lands within one piece's copy)
        self.cur.s.reserve(s.len());
        self.cur.f.reserve(s.len());
        let mut rest = s;
        while !rest.is_empty() {
            if crate::shell::stop_due() {
                self.over = true;
                // what was built can be hundreds of megabytes, whose freeing alone takes
                // tens of milliseconds: the command is ending, so it is buried (freed at
                // the machine's next command or drop), not freed past the deadline
                crate::mem::bury(std::mem::take(&mut self.cur));
                crate::mem::bury(std::mem::take(&mut self.done));
                return;
            }
            let mut end = rest.len().min(CHUNK_BYTES);
            while !rest.is_char_boundary(end) {
                end += 1;
            }
            let (piece, tail) = rest.split_at(end);
            self.cur.s.push_str(piece);
            push_flags(&mut self.cur.f, flag, piece.len());
            rest = tail;
        }
    }
    fn brk(&mut self) {
        let f = std::mem::take(&mut self.cur);
        self.done.push(f);
    }
    fn finish(mut self) -> Vec<Field> {
        let f = std::mem::take(&mut self.cur);
        self.done.push(f);
        self.done
    }
}

enum PV {
    Unset,
    S(String),
    L(Vec<String>, bool),
}

fn opts() -> brush_parser::ParserOptions {
    brush_parser::ParserOptions::default()
}

/// Processes `$'...'` escapes.
pub fn ansi_c(s: &str) -> String {
    let mut out = Vec::<u8>::new();
    let b: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c != '\\' || i + 1 >= b.len() {
            let mut tmp = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut tmp).as_bytes());
            i += 1;
            continue;
        }
        i += 1;
        let e = b[i];
        i += 1;
        match e {
            'n' => out.push(b'\n'),
            't' => out.push(b'\t'),
            'r' => out.push(b'\r'),
            'a' => out.push(7),
            'b' => out.push(8),
            'e' | 'E' => out.push(27),
            'f' => out.push(12),
            'v' => out.push(11),
            '\\' => out.push(b'\\'),
            '\'' => out.push(b'\''),
            '"' => out.push(b'"'),
            '?' => out.push(b'?'),
            'x' => {
                let mut v = 0u32;
                let mut n = 0;
                while n < 2 && i < b.len() && b[i].is_ascii_hexdigit() {
                    v = v * 16 + b[i].to_digit(16).unwrap_or(0);
                    i += 1;
                    n += 1;
                }
                if n == 0 {
                    out.extend_from_slice(b"\\x");
                } else {
                    out.push(v as u8);
                }
            }
            'u' | 'U' => {
                let max = if e == 'u' { 4 } else { 8 };
                let mut v = 0u32;
                let mut n = 0;
                while n < max && i < b.len() && b[i].is_ascii_hexdigit() {
                    v = v * 16 + b[i].to_digit(16).unwrap_or(0);
                    i += 1;
                    n += 1;
                }
                if let Some(ch) = char::from_u32(v) {
                    let mut tmp = [0u8; 4];
                    out.extend_from_slice(ch.encode_utf8(&mut tmp).as_bytes());
                }
            }
            '0'..='7' => {
                let mut v = e.to_digit(8).unwrap_or(0);
                let mut n = 1;
                while n < 3 && i < b.len() && b[i].is_digit(8) {
                    v = v * 8 + b[i].to_digit(8).unwrap_or(0);
                    i += 1;
                    n += 1;
                }
                out.push(v as u8);
            }
            'c' => {
                if i < b.len() {
                    out.push((b[i] as u8) & 0x1f);
                    i += 1;
                }
            }
            other => {
                out.push(b'\\');
                let mut tmp = [0u8; 4];
                out.extend_from_slice(other.encode_utf8(&mut tmp).as_bytes());
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Most words one brace expansion yields (bash has no limit; the simulator refuses more,
/// visibly: exit 2 and an `unsupported` record).
pub const MAX_BRACE_WORDS: usize = 1_000_000;

/// Most brace groups one word expands, one inside or after another (each costs a level of
/// recursion; past about 20 groups of two or more words the word cap is reached anyway).
pub const MAX_BRACE_GROUPS: usize = 256;

/// Words a brace expansion makes between two looks at the wall clock.
const BRACE_WORDS_PER_CHECK: u64 = 1024;

/// Why a brace expansion stopped before its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BraceCut {
    /// It would yield more than [`MAX_BRACE_WORDS`] words, or nest more than
    /// [`MAX_BRACE_GROUPS`] groups (the simulator's limits, not bash's).
    Words,
    /// Its words (with their intermediate lists) would hold more bytes than it was given.
    Bytes,
    /// The running command's wall-clock deadline passed ([`crate::shell::stop_due`]).
    Deadline,
}

/// What one brace expansion may still make.
struct BraceBudget {
    /// Bytes left for the words it makes (each word costs its text and a `String` header).
    bytes_left: u64,
    /// Words made so far, intermediate ones included.
    made: u64,
    /// Groups expanded on the current recursion path.
    depth: usize,
    cut: Option<BraceCut>,
}

impl BraceBudget {
    /// Charges one word of `len` bytes about to be made: `false` (and `cut` set) when it
    /// must not be, because the bytes ran out or (looked at every
    /// [`BRACE_WORDS_PER_CHECK`] words) the deadline passed.
    fn take(&mut self, len: usize) -> bool {
        if self.cut.is_some() {
            return false;
        }
        let cost = (len as u64).saturating_add(std::mem::size_of::<String>() as u64);
        if cost > self.bytes_left {
            self.cut = Some(BraceCut::Bytes);
            return false;
        }
        self.bytes_left -= cost;
        self.made += 1;
        if self.made.is_multiple_of(BRACE_WORDS_PER_CHECK) && crate::shell::stop_due() {
            self.cut = Some(BraceCut::Deadline);
            return false;
        }
        true
    }
}

/// Brace expansion of a raw word, making words of at most `max_bytes` bytes in all (the
/// caller passes what the machine's memory budget has left).
///
/// # Errors
/// [`BraceCut`] says why it stopped: over [`MAX_BRACE_WORDS`] words or
/// [`MAX_BRACE_GROUPS`] groups, over `max_bytes`, or past the running command's wall-clock
/// deadline (looked at every [`BRACE_WORDS_PER_CHECK`] words).
pub fn brace_expand_checked(s: &str, max_bytes: u64) -> Result<Vec<String>, BraceCut> {
    let mut b = BraceBudget {
        bytes_left: max_bytes,
        made: 0,
        depth: 0,
        cut: None,
    };
    let v = brace_expand(s, &mut b);
    match b.cut {
        Some(c) => Err(c),
        None => Ok(v),
    }
}

/// Brace expansion of a raw word, within `bud` (on a cut the list is incomplete).
fn brace_expand(s: &str, bud: &mut BraceBudget) -> Vec<String> {
    let b: Vec<char> = s.chars().collect();
    let mut i = 0;
    let mut sq = false;
    let mut dq = false;
    while i < b.len() {
        let c = b[i];
        if c == '\\' && !sq {
            i += 2;
            continue;
        }
        if c == '\'' && !dq {
            sq = !sq;
        } else if c == '"' && !sq {
            dq = !dq;
        } else if c == '$' && !sq && i + 1 < b.len() && (b[i + 1] == '{' || b[i + 1] == '(') {
            // skip ${...} / $(...)
            let (open, close) = if b[i + 1] == '{' {
                ('{', '}')
            } else {
                ('(', ')')
            };
            let mut depth = 0;
            let mut j = i + 1;
            while j < b.len() {
                if b[j] == '\\' {
                    j += 2;
                    continue;
                }
                if b[j] == open {
                    depth += 1;
                } else if b[j] == close {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                j += 1;
            }
            i = j + 1;
            continue;
        } else if c == '{' && !sq && !dq {
            // find matching close
            let mut depth = 0;
            let mut j = i;
            let mut commas = Vec::new();
            let mut jsq = false;
            let mut jdq = false;
            let mut close = None;
            while j < b.len() {
                let cj = b[j];
                if cj == '\\' && !jsq {
                    j += 2;
                    continue;
                }
                if cj == '\'' && !jdq {
                    jsq = !jsq;
                } else if cj == '"' && !jsq {
                    jdq = !jdq;
                } else if !jsq && !jdq {
                    if cj == '$' && j + 1 < b.len() && b[j + 1] == '{' {
                        // skip parameter expansion
                        let mut d = 0;
                        let mut k = j + 1;
                        while k < b.len() {
                            if b[k] == '{' {
                                d += 1;
                            } else if b[k] == '}' {
                                d -= 1;
                                if d == 0 {
                                    break;
                                }
                            }
                            k += 1;
                        }
                        j = k + 1;
                        continue;
                    }
                    if cj == '{' {
                        depth += 1;
                    } else if cj == '}' {
                        depth -= 1;
                        if depth == 0 {
                            close = Some(j);
                            break;
                        }
                    } else if cj == ',' && depth == 1 {
                        commas.push(j);
                    }
                }
                j += 1;
            }
            if let Some(end) = close {
                let prefix: String = b[..i].iter().collect();
                let suffix: String = b[end + 1..].iter().collect();
                let inner: String = b[i + 1..end].iter().collect();
                let alts: Option<Vec<String>> = if !commas.is_empty() {
                    let mut v = Vec::new();
                    let mut start = i + 1;
                    for &c in &commas {
                        v.push(b[start..c].iter().collect());
                        start = c + 1;
                    }
                    v.push(b[start..end].iter().collect());
                    Some(v)
                } else {
                    seq_expand(&inner, bud)
                };
                if let Some(alts) = alts {
                    if bud.cut.is_some() {
                        return Vec::new();
                    }
                    if bud.depth >= MAX_BRACE_GROUPS {
                        bud.cut = Some(BraceCut::Words);
                        return Vec::new();
                    }
                    bud.depth += 1;
                    let mut out = Vec::new();
                    let suffixes = brace_expand(&suffix, bud);
                    'outer: for a in alts {
                        for ae in brace_expand(&a, bud) {
                            for s in &suffixes {
                                // a cap keeps `{a,b}{a,b}...` from exhausting host memory
                                if out.len() >= MAX_BRACE_WORDS {
                                    bud.cut = Some(BraceCut::Words);
                                }
                                if !bud.take(prefix.len() + ae.len() + s.len()) {
                                    break 'outer;
                                }
                                out.push(format!("{prefix}{ae}{s}"));
                            }
                        }
                        if bud.cut.is_some() {
                            break;
                        }
                    }
                    bud.depth -= 1;
                    return out;
                }
            }
        }
        i += 1;
    }
    if !bud.take(s.len()) {
        return Vec::new();
    }
    vec![s.to_string()]
}

/// The words of a sequence expression (`1..9`, `01..10..3`, `a..z`), within `bud`; `None`
/// when `inner` is not one.
fn seq_expand(inner: &str, bud: &mut BraceBudget) -> Option<Vec<String>> {
    let parts: Vec<&str> = inner.split("..").collect();
    if parts.len() != 2 && parts.len() != 3 {
        return None;
    }
    let step: i64 = if parts.len() == 3 {
        parts[2].parse().ok()?
    } else {
        1
    };
    // bash leaves `{1..2..-9223372036854775808}` as it is: the step's size overflows
    let step = if step == 0 { 1 } else { step.checked_abs()? };
    if let (Ok(a), Ok(z)) = (parts[0].parse::<i64>(), parts[1].parse::<i64>()) {
        let pad = |s: &str| {
            let t = s.trim_start_matches('-');
            if t.len() > 1 && t.starts_with('0') {
                s.len()
            } else {
                0
            }
        };
        let width = pad(parts[0]).max(pad(parts[1]));
        let count = (i128::from(z) - i128::from(a)).unsigned_abs()
            / u128::from(step.unsigned_abs().max(1))
            + 1;
        if count > MAX_BRACE_WORDS as u128 {
            bud.cut = Some(BraceCut::Words);
            return Some(Vec::new());
        }
        let mut v = Vec::new();
        let mut x = a;
        loop {
            if (a <= z && x > z) || (a > z && x < z) {
                break;
            }
            if v.len() >= MAX_BRACE_WORDS {
                bud.cut = Some(BraceCut::Words);
                break;
            }
            // a number has at most 20 characters (and the padding)
            if !bud.take(width.max(20)) {
                break;
            }
            if width > 0 {
                if x < 0 {
                    v.push(format!("-{:0w$}", -x, w = width - 1));
                } else {
                    v.push(format!("{:0w$}", x, w = width));
                }
            } else {
                v.push(x.to_string());
            }
            let next = if a <= z {
                x.checked_add(step)
            } else {
                x.checked_sub(step)
            };
            match next {
                Some(n) => x = n,
                None => break,
            }
        }
        return Some(v);
    }
    let ca: Vec<char> = parts[0].chars().collect();
    let cz: Vec<char> = parts[1].chars().collect();
    if ca.len() == 1 && cz.len() == 1 && ca[0].is_ascii_alphabetic() && cz[0].is_ascii_alphabetic()
    {
        let (a, z) = (ca[0] as i64, cz[0] as i64);
        let mut v = Vec::new();
        let mut x = a;
        while (a <= z && x <= z) || (a > z && x >= z) {
            if !bud.take(1) {
                break;
            }
            v.push(((x as u8) as char).to_string());
            let next = if a <= z {
                x.checked_add(step)
            } else {
                x.checked_sub(step)
            };
            match next {
                Some(n) => x = n,
                None => break,
            }
        }
        return Some(v);
    }
    None
}

/// Appends `n` copies of `flag` a block at a time (fast in unoptimised builds too).
fn push_flags(f: &mut Vec<u8>, flag: u8, n: usize) {
    const BLOCK: usize = 4096;
    let block = [flag; BLOCK];
    f.reserve(n);
    let mut left = n;
    while left > 0 {
        let k = left.min(BLOCK);
        f.extend_from_slice(&block[..k]);
        left -= k;
    }
}

/// Splits fields on IFS where they came from unquoted expansions; `None` when the
/// command's deadline passed while splitting (checked once per [`CHUNK_BYTES`]).
fn split_fields(fields: Vec<Field>, ifs: &IfsChars) -> Option<Vec<Field>> {
    let mut out = Vec::new();
    let mut scanned = 0usize;
    for f in fields {
        if !f.f.contains(&EXP) || ifs.is_empty() {
            if !f.s.is_empty() || f.q {
                out.push(f);
            }
            continue;
        }
        let mut cur: Option<Field> = if f.q {
            Some(Field {
                q: true,
                ..Default::default()
            })
        } else {
            None
        };
        let mut pending_ws = false;
        let bytes = f.s.as_bytes();
        let mut i = 0;
        // the run of kept characters not yet copied into `cur` starts here
        let mut run: Option<usize> = None;
        let flush = |cur: &mut Option<Field>, run: &mut Option<usize>, end: usize| {
            if let Some(start) = run.take() {
                let x = cur.get_or_insert_with(Field::default);
                x.s.push_str(&f.s[start..end]);
                x.f.extend_from_slice(&f.f[start..end]);
            }
        };
        while i < bytes.len() {
            scanned += 1;
            if scanned.is_multiple_of(CHUNK_BYTES) && crate::shell::stop_due() {
                // a million fields made so far: buried, not freed
                crate::mem::bury(out);
                return None;
            }
            let ch_len = utf8_len(bytes[i]);
            let flag = f.f[i];
            let c = &f.s[i..i + ch_len];
            if flag == EXP && c.chars().next().is_some_and(|c| ifs.contains(c)) {
                flush(&mut cur, &mut run, i);
                let ws = c == " " || c == "\t" || c == "\n";
                if ws {
                    if let Some(x) = cur.take() {
                        out.push(x);
                        pending_ws = true;
                    }
                } else {
                    if let Some(x) = cur.take() {
                        out.push(x);
                    } else if !pending_ws {
                        out.push(Field::default());
                    }
                    pending_ws = false;
                }
            } else {
                if run.is_none() {
                    run = Some(i);
                    cur.get_or_insert_with(Field::default);
                }
                pending_ws = false;
            }
            i += ch_len;
        }
        flush(&mut cur, &mut run, bytes.len());
        if let Some(x) = cur {
            out.push(x);
        }
    }
    Some(out)
}

fn utf8_len(b: u8) -> usize {
    if b < 0x80 {
        1
    } else if b >= 0xf0 {
        4
    } else if b >= 0xe0 {
        3
    } else if b >= 0xc0 {
        2
    } else {
        1
    }
}

/// The field as a glob pattern: quoted characters escaped.
fn field_pattern(f: &Field) -> String {
    let mut out = String::with_capacity(f.s.len());
    let mut i = 0;
    let b = f.s.as_bytes();
    while i < b.len() {
        let l = utf8_len(b[i]);
        let c = &f.s[i..i + l];
        if f.f[i] == QUO && l == 1 && crate::glob::is_special(b[i]) {
            out.push('\\');
        }
        out.push_str(c);
        i += l;
    }
    out
}

fn field_regex(f: &Field) -> String {
    let mut out = String::with_capacity(f.s.len());
    let mut i = 0;
    let b = f.s.as_bytes();
    while i < b.len() {
        let l = utf8_len(b[i]);
        let c = &f.s[i..i + l];
        if f.f[i] == QUO {
            out.push_str(&regex::escape(c));
        } else {
            out.push_str(c);
        }
        i += l;
    }
    out
}

impl Interp<'_> {
    /// `set -u`: an unset parameter is an error in every expansion form but the ones
    /// that test for it (`${v-x}`, `${v+x}`, `${v?x}`, `${v=x}`).
    fn unbound_check(&mut self, sh: &mut Shell, parameter: &Parameter, v: &PV) -> R<()> {
        if matches!(v, PV::Unset) && sh.opts.nounset && !matches!(parameter, Parameter::Special(_))
        {
            self.err(
                sh,
                &format!("bash: {}: unbound variable", param_name(parameter)),
            );
            return Err(Ctl::Exit(expansion_error_status(sh)));
        }
        Ok(())
    }

    fn parse_word(
        &mut self,
        sh: &mut Shell,
        raw: &str,
    ) -> R<std::rc::Rc<Vec<WordPieceWithSource>>> {
        // assignment values also expand `~` after `:` (PATH=$PATH:~/bin); they are cached
        // under a marked key
        let after_colon = self.tilde_after_colon;
        let key: std::borrow::Cow<'_, str> = if after_colon {
            format!("\u{1}{raw}").into()
        } else {
            raw.into()
        };
        if let Some(hit) = WORD_CACHE.with(|c| c.borrow().get(key.as_ref()).cloned()) {
            return Ok(hit);
        }
        if !crate::shell::nesting_ok(raw) {
            self.err(sh, "bash: expansion nested too deeply (unsupported)");
            return Err(Ctl::Exit(1));
        }
        let mut options = opts();
        options.tilde_expansion_after_colon = after_colon;
        match crate::shell::with_parser_stack(|| word::parse(raw, &options)) {
            Ok(p) => {
                let p = std::rc::Rc::new(p);
                WORD_CACHE.with(|c| {
                    if raw.len() > 4096 {
                        return;
                    }
                    let mut c = c.borrow_mut();
                    if c.len() > 4096 {
                        c.clear();
                    }
                    c.insert(key.into_owned(), p.clone());
                });
                Ok(p)
            }
            Err(e) => {
                self.err(sh, &format!("bash: {raw}: bad substitution ({e})"));
                Err(Ctl::Exit(1))
            }
        }
    }

    fn expand_fields(&mut self, sh: &mut Shell, raw: &str, in_dq: bool) -> R<Vec<Field>> {
        stacker::maybe_grow(256 * 1024, 4 * 1024 * 1024, || {
            self.expand_fields_inner(sh, raw, in_dq)
        })
    }

    fn expand_fields_inner(&mut self, sh: &mut Shell, raw: &str, in_dq: bool) -> R<Vec<Field>> {
        let pieces = self.parse_word(sh, raw)?;
        let mut fb = Fb::for_machine(self);
        self.expand_pieces(sh, &pieces, in_dq, &mut fb)?;
        if fb.over {
            return Err(self.interrupted());
        }
        let fields = fb.finish();
        let bytes: usize = fields.iter().map(|f| f.s.len()).sum();
        if bytes as u64 > self.w.memory_limit {
            return Err(Ctl::Budget("memory limit exceeded".into()));
        }
        Ok(fields)
    }

    /// Full expansion of one raw word into fields.
    pub fn expand_word(&mut self, sh: &mut Shell, raw: &str) -> R<Result<Vec<String>, i32>> {
        let plain = |w: &str| {
            !w.is_empty()
                && w.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+%@".contains(&b))
        };
        // fast path: plain literal
        if plain(raw) {
            return Ok(Ok(vec![raw.to_string()]));
        }
        // fast path: an unquoted `$name` whose value needs no splitting or globbing
        if let Some(name) = raw.strip_prefix('$') {
            if crate::builtins::valid_name(name) {
                if let PV::S(v) = self.named_value(sh, name) {
                    let Some(ifs) = sh.ifs_chars() else {
                        return Err(self.interrupted());
                    };
                    // scanned in pieces, looking at the clock: the value may be megabytes
                    let mut pace = Pacer::default();
                    let mut lone = !v.is_empty();
                    for c in v.chars() {
                        if pace.due(1) {
                            return Err(self.interrupted());
                        }
                        if ifs.contains(c)
                            || matches!(c, '*' | '?' | '[')
                            || (c == '(' && sh.opts.extglob)
                        {
                            lone = false;
                            break;
                        }
                    }
                    if lone {
                        return Ok(Ok(vec![v]));
                    }
                }
            }
        }
        let words = if raw.contains('{') {
            let left = self.w.memory_limit.saturating_sub(self.memory_used());
            match brace_expand_checked(raw, left) {
                Ok(w) => w,
                Err(BraceCut::Words) => {
                    self.unsupported(
                        sh,
                        &format!(
                            "brace expansion of more than {MAX_BRACE_WORDS} words \
                             (or {MAX_BRACE_GROUPS} groups)"
                        ),
                    )?;
                    // the script cannot go on with a wrong word list: end it
                    return Err(Ctl::Exit(2));
                }
                // over the memory budget, or past the deadline
                Err(BraceCut::Bytes | BraceCut::Deadline) => return Err(self.interrupted()),
            }
        } else {
            vec![raw.to_string()]
        };
        // a million words made so far are freed a piece at a time (or buried) when the
        // expansion of a later word ends the command
        let mut out = crate::mem::PacedVec::new(Vec::new());
        // the words made so far count against the machine's memory with what it holds
        let mut out_bytes = 0u64;
        for (k, w) in words.into_iter().enumerate() {
            // a brace expansion makes up to a million words: look at the clock
            if k % 1024 == 1023 {
                self.check_time()?;
            }
            if plain(&w) {
                out.push(w);
                continue;
            }
            if self.memory_used().saturating_add(out_bytes) > self.w.memory_limit {
                return Err(self.interrupted());
            }
            let fields = self.expand_fields(sh, &w, false)?;
            out_bytes += fields.iter().map(|f| f.s.len() as u64).sum::<u64>();
            let Some(ifs) = sh.ifs_chars() else {
                return Err(self.interrupted());
            };
            let Some(fields) = split_fields(fields, &ifs) else {
                return Err(self.interrupted());
            };
            // a command substitution splits into a million fields: look at the clock, and
            // bury (not free) what is left when the command must stop
            let mut fields = fields.into_iter().enumerate();
            while let Some((n, f)) = fields.next() {
                if n % 4096 == 4095 && crate::shell::stop_due() {
                    crate::mem::bury((f, fields, std::mem::take(&mut *out)));
                    return Err(self.interrupted());
                }
                // most fields hold no unquoted pattern character: skip building the
                // pattern (a quoted one matches itself; building the pattern of a quoted
                // binary capture of megabytes ran 50-250 ms past a deadline, the 5-minute
                // run with seed 1, case 1552)
                let maybe_glob = f.s.bytes().zip(&f.f).any(|(c, flag)| {
                    *flag != QUO
                        && (matches!(c, b'*' | b'?' | b'[') || (sh.opts.extglob && c == b'('))
                });
                // a field of megabytes (an unquoted binary capture with IFS empty) is a
                // long pattern: look at the clock between the steps that read it
                let big = f.s.len() > CHUNK_BYTES;
                if big && maybe_glob {
                    self.check_time()?;
                }
                let pat = (maybe_glob && !sh.opts.noglob)
                    .then(|| field_pattern(&f))
                    .filter(|pat| crate::glob::has_meta(pat, sh.opts.extglob));
                if let Some(pat) = pat {
                    if big {
                        self.check_time()?;
                    }
                    let matches = self.glob_paths(sh, &pat);
                    if big {
                        self.check_time()?;
                    }
                    if matches.is_empty() {
                        if sh.opts.failglob {
                            self.err(sh, &format!("bash: no match: {}", f.s));
                            return Ok(Err(1));
                        }
                        if !sh.opts.nullglob {
                            out.push(f.s);
                        }
                    } else {
                        out.extend(matches);
                    }
                } else {
                    out.push(f.s);
                }
            }
        }
        Ok(Ok(std::mem::take(&mut *out)))
    }

    /// Expansion without splitting or globbing (assignments, case words, here-strings).
    pub fn expand_nosplit(&mut self, sh: &mut Shell, raw: &str) -> R<Result<String, i32>> {
        if raw
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+%@ ".contains(&b))
        {
            return Ok(Ok(raw.to_string()));
        }
        let mut fields = self.expand_fields(sh, raw, false)?;
        // one field (an assignment's value, nearly always) is moved, not copied: a word of
        // hundreds of megabytes costs no copy that could outlive the deadline
        if fields.len() == 1 {
            return Ok(Ok(fields.pop().map(|f| f.s).unwrap_or_default()));
        }
        let total = fields
            .iter()
            .map(|f| f.s.len().saturating_add(1))
            .fold(0usize, usize::saturating_add);
        let mut s = String::with_capacity(total);
        let mut pace = crate::shell::Pacer::default();
        for (i, f) in fields.iter().enumerate() {
            if i > 0 {
                s.push(' ');
            }
            let mut rest = f.s.as_str();
            while !rest.is_empty() {
                let mut end = rest.len().min(CHUNK_BYTES);
                while !rest.is_char_boundary(end) {
                    end += 1;
                }
                let (piece, tail) = rest.split_at(end);
                s.push_str(piece);
                rest = tail;
                if pace.due(piece.len()) {
                    crate::mem::bury(s);
                    crate::mem::bury(fields);
                    return Err(self.interrupted());
                }
            }
        }
        Ok(Ok(s))
    }

    pub fn expand_nosplit_str(&mut self, sh: &mut Shell, raw: &str) -> R<String> {
        Ok(self.expand_nosplit(sh, raw)?.unwrap_or_default())
    }

    /// Expansion to a pattern: quoted parts are matched literally.
    pub fn expand_pattern(&mut self, sh: &mut Shell, raw: &str) -> R<Result<String, i32>> {
        let fields = self.expand_fields(sh, raw, false)?;
        let mut s = String::new();
        for (i, f) in fields.iter().enumerate() {
            if i > 0 {
                s.push(' ');
            }
            s.push_str(&field_pattern(f));
        }
        Ok(Ok(s))
    }

    pub fn expand_heredoc(&mut self, sh: &mut Shell, raw: &str) -> R<Result<String, i32>> {
        let pieces = match crate::shell::with_parser_stack(|| word::parse_heredoc(raw, &opts())) {
            Ok(p) => p,
            Err(e) => {
                self.err(sh, &format!("bash: bad here-document: {e}"));
                return Ok(Err(1));
            }
        };
        let mut fb = Fb::for_machine(self);
        self.expand_pieces(sh, &pieces, true, &mut fb)?;
        if fb.over {
            return Err(self.interrupted());
        }
        let fields = fb.finish();
        Ok(Ok(fields
            .into_iter()
            .map(|f| f.s)
            .collect::<Vec<_>>()
            .join(" ")))
    }

    fn expand_pieces(
        &mut self,
        sh: &mut Shell,
        pieces: &[WordPieceWithSource],
        in_dq: bool,
        fb: &mut Fb,
    ) -> R<()> {
        for p in pieces {
            match &p.piece {
                WordPiece::Text(t) => fb.push(t, if in_dq { QUO } else { LIT }),
                WordPiece::SingleQuotedText(t) => {
                    fb.cur.q = true;
                    fb.push(t, QUO);
                }
                WordPiece::AnsiCQuotedText(t) => {
                    fb.cur.q = true;
                    fb.push(&ansi_c(t), QUO);
                }
                WordPiece::DoubleQuotedSequence(inner)
                | WordPiece::GettextDoubleQuotedSequence(inner) => {
                    let q_before = fb.cur.q;
                    fb.cur.q = true;
                    let empty_at = self.expand_pieces_dq(sh, inner, fb)?;
                    if empty_at && inner.len() == 1 {
                        fb.cur.q = q_before;
                    }
                }
                WordPiece::EscapeSequence(e) => {
                    let c = &e[1..];
                    if in_dq {
                        if c.len() == 1 && "$`\"\\".contains(c) {
                            fb.push(c, QUO);
                        } else if c == "\n" {
                        } else {
                            fb.push(e, QUO);
                        }
                    } else if c != "\n" {
                        fb.cur.q = true;
                        fb.push(c, QUO);
                    }
                }
                WordPiece::TildeExpansion(t) => {
                    let v = match t {
                        word::TildeExpr::Home => sh.get("HOME").unwrap_or_else(|| "/root".into()),
                        word::TildeExpr::UserHome(u) => {
                            if u == "root" {
                                "/root".into()
                            } else {
                                format!("~{u}")
                            }
                        }
                        word::TildeExpr::WorkingDir => sh.cwd.clone(),
                        word::TildeExpr::OldWorkingDir => sh.getv("OLDPWD"),
                        _ => "~".into(),
                    };
                    fb.push(&v, QUO);
                }
                WordPiece::ParameterExpansion(pe) => {
                    self.expand_param(sh, pe, in_dq, fb)?;
                }
                WordPiece::CommandSubstitution(s) => {
                    let out = self.command_subst(sh, s)?;
                    fb.push(&out, if in_dq { QUO } else { EXP });
                }
                WordPiece::BackquotedCommandSubstitution(s) => {
                    let s = unbackslash_backquote(s);
                    let out = self.command_subst(sh, &s)?;
                    fb.push(&out, if in_dq { QUO } else { EXP });
                }
                WordPiece::ArithmeticExpression(e) => {
                    let v = match self.arith_text(sh, &e.value)? {
                        Ok(v) => v,
                        Err(m) => {
                            self.err(sh, &format!("bash: {m}"));
                            return Err(Ctl::Exit(1));
                        }
                    };
                    fb.push(&v.to_string(), if in_dq { QUO } else { EXP });
                }
            }
        }
        Ok(())
    }

    /// Double-quoted sequence; returns whether it was a lone `"$@"` with no elements.
    fn expand_pieces_dq(
        &mut self,
        sh: &mut Shell,
        inner: &[WordPieceWithSource],
        fb: &mut Fb,
    ) -> R<bool> {
        if inner.len() == 1 {
            if let WordPiece::ParameterExpansion(pe) = &inner[0].piece {
                return self.expand_param(sh, pe, true, fb);
            }
        }
        self.expand_pieces(sh, inner, true, fb)?;
        Ok(false)
    }

    fn param_value(&mut self, sh: &mut Shell, p: &Parameter, indirect: bool) -> R<PV> {
        if indirect {
            let v = self.param_value(sh, p, false)?;
            let name = match v {
                PV::S(s) => s,
                PV::L(l, _) => l.join(" "),
                PV::Unset => return Ok(PV::Unset),
            };
            let param =
                match crate::shell::with_parser_stack(|| word::parse_parameter(&name, &opts())) {
                    Ok(p) => p,
                    Err(_) => {
                        self.err(sh, &format!("bash: {name}: invalid indirect expansion"));
                        return Err(Ctl::Exit(1));
                    }
                };
            return self.param_value(sh, &param, false);
        }
        Ok(match p {
            Parameter::Positional(n) => {
                if *n == 0 {
                    PV::S(sh.arg0.clone())
                } else {
                    match sh.pos.get(*n as usize - 1) {
                        Some(v) => PV::S(v.to_string()),
                        None => PV::Unset,
                    }
                }
            }
            Parameter::Special(sp) => match sp {
                SpecialParameter::AllPositionalParameters { concatenate } => {
                    PV::L(sh.pos.iter().map(|p| p.to_string()).collect(), *concatenate)
                }
                SpecialParameter::PositionalParameterCount => PV::S(sh.pos.len().to_string()),
                SpecialParameter::LastExitStatus => PV::S(sh.status.to_string()),
                SpecialParameter::CurrentOptionFlags => {
                    // bash's order (flags.c): a b e f h ... n ... u v x B C E, then c
                    let o = &sh.opts;
                    let mut f = String::new();
                    for (on, c) in [
                        (o.allexport, 'a'),
                        (o.errexit, 'e'),
                        (o.noglob, 'f'),
                        (true, 'h'),
                        (o.noexec, 'n'),
                        (o.nounset, 'u'),
                        (o.xtrace, 'x'),
                        (true, 'B'),
                        (o.noclobber, 'C'),
                        (o.errtrace, 'E'),
                        (true, 'c'),
                    ] {
                        if on {
                            f.push(c);
                        }
                    }
                    PV::S(f)
                }
                SpecialParameter::ProcessId => PV::S(sh.pid.to_string()),
                SpecialParameter::LastBackgroundProcessId => match sh.last_bg {
                    Some(p) => PV::S(p.to_string()),
                    None => PV::Unset,
                },
                SpecialParameter::ShellName => PV::S(sh.arg0.clone()),
            },
            Parameter::Named(n) => self.named_value(sh, n),
            Parameter::NamedWithIndex { name, index } => {
                let resolved = sh.resolve(name);
                let name = resolved.as_ref().unwrap_or(name);
                let is_assoc = matches!(sh.vars.get(name).map(|v| &v.value), Some(Value::Assoc(_)));
                let key = if is_assoc {
                    self.expand_nosplit_str(sh, index)?
                } else if index.contains('$') || index.contains('`') {
                    // an indexed subscript is arithmetic over the expanded text
                    match self.arith_text(sh, index)? {
                        Ok(i) => i.to_string(),
                        Err(m) => {
                            self.err(sh, &format!("bash: {m}"));
                            return Err(Ctl::Exit(1));
                        }
                    }
                } else {
                    index.clone()
                };
                if name == "BASH_VERSINFO" && !sh.vars.contains_key(name) {
                    let i = self.eval_arith_str(sh, &key)?.unwrap_or_default();
                    let v = ["5", "2", "15", "1", "release", "x86_64-pc-linux-gnu"];
                    return Ok(match v.get(i as usize) {
                        Some(s) => PV::S(s.to_string()),
                        None => PV::Unset,
                    });
                }
                if name == "FUNCNAME" && !sh.vars.contains_key("FUNCNAME") {
                    let i = self.eval_arith_str(sh, &key)?.unwrap_or_default();
                    let mut v: Vec<String> = sh.funcnames.iter().rev().cloned().collect();
                    if !v.is_empty() {
                        v.push("main".into());
                    }
                    return Ok(match v.get(i as usize) {
                        Some(s) => PV::S(s.clone()),
                        None => PV::Unset,
                    });
                }
                if name == "PIPESTATUS" {
                    let i = self.eval_arith_str(sh, &key)?.unwrap_or_default();
                    return Ok(match sh.pipestatus.get(i as usize) {
                        Some(s) => PV::S(s.to_string()),
                        None => PV::Unset,
                    });
                }
                match sh.vars.get(name) {
                    None => PV::Unset,
                    Some(v) => {
                        let exists = match &v.value {
                            Value::Assoc(m) => m.contains_key(&key),
                            _ => true,
                        };
                        if !exists {
                            PV::Unset
                        } else {
                            let val = get_elem(self, sh, name, &key);
                            let cur = sh.vars.get(name).map(|v| v.value.clone());
                            let present = match cur {
                                Some(Value::Arr(m)) => {
                                    let i = self.eval_arith_str(sh, &key)?.unwrap_or_default();
                                    let i = if i < 0 {
                                        m.keys()
                                            .next_back()
                                            .map(|k| k.saturating_add(1))
                                            .unwrap_or(0)
                                            .saturating_add(i)
                                    } else {
                                        i
                                    };
                                    m.contains_key(&i)
                                }
                                Some(Value::Str(_)) => key == "0",
                                _ => true,
                            };
                            if present {
                                PV::S(val)
                            } else {
                                PV::Unset
                            }
                        }
                    }
                }
            }
            Parameter::NamedWithAllIndices { name, concatenate } => {
                let resolved = sh.resolve(name);
                let name = resolved.as_ref().unwrap_or(name);
                if name == "BASH_VERSINFO" && !sh.vars.contains_key(name) {
                    let v = ["5", "2", "15", "1", "release", "x86_64-pc-linux-gnu"];
                    return Ok(PV::L(
                        v.iter().map(|s| s.to_string()).collect(),
                        *concatenate,
                    ));
                }
                if name == "FUNCNAME" && !sh.vars.contains_key("FUNCNAME") {
                    let mut v: Vec<String> = sh.funcnames.iter().rev().cloned().collect();
                    if !v.is_empty() {
                        v.push("main".into());
                    }
                    return Ok(PV::L(v, *concatenate));
                }
                if name == "PIPESTATUS" {
                    return Ok(PV::L(
                        sh.pipestatus.iter().map(|s| s.to_string()).collect(),
                        *concatenate,
                    ));
                }
                match sh.vars.get(name).map(|v| &v.value) {
                    None => PV::L(vec![], *concatenate),
                    Some(Value::Str(s)) => PV::L(vec![s.to_string()], *concatenate),
                    Some(Value::Arr(m)) => {
                        PV::L(m.values().map(|s| s.to_string()).collect(), *concatenate)
                    }
                    Some(Value::Assoc(m)) => {
                        PV::L(m.values().map(String::from).collect(), *concatenate)
                    }
                }
            }
        })
    }

    fn named_value(&mut self, sh: &mut Shell, n: &str) -> PV {
        if let Some(t) = sh.resolve(n) {
            return match sh.vars.get(&t) {
                Some(v) => PV::S(v.as_str()),
                None => PV::Unset,
            };
        }
        if let Some(v) = sh.vars.get(n) {
            return PV::S(v.as_str());
        }
        match n {
            "RANDOM" => {
                self.w.rng = self.w.rng.wrapping_mul(1103515245).wrapping_add(12345);
                PV::S(((self.w.rng >> 16) & 0x7fff).to_string())
            }
            "SECONDS" => PV::S((self.w.clock_ns / 1_000_000_000).to_string()),
            "EPOCHSECONDS" => PV::S(self.w.vfs.now.to_string()),
            "BASHPID" => PV::S(sh.bashpid.to_string()),
            "LINENO" => PV::S("1".into()),
            "FUNCNAME" => match sh.funcnames.last() {
                Some(f) => PV::S(f.clone()),
                None => PV::Unset,
            },
            "PIPESTATUS" => PV::S(sh.pipestatus.first().copied().unwrap_or(0).to_string()),
            "BASH_VERSION" => PV::S("5.2.15(1)-release".into()),
            "OSTYPE" => PV::S("linux-gnu".into()),
            "HOSTTYPE" => PV::S("x86_64".into()),
            "MACHTYPE" => PV::S("x86_64-pc-linux-gnu".into()),
            "BASH_VERSINFO" => PV::S("5".into()),
            "UID" | "EUID" => PV::S("0".into()),
            "PWD" => PV::S(sh.cwd.clone()),
            _ => PV::Unset,
        }
    }

    fn pattern_of(&mut self, sh: &mut Shell, raw: &Option<String>) -> R<String> {
        match raw {
            None => Ok(String::new()),
            Some(r) => Ok(self.expand_pattern(sh, r)?.unwrap_or_default()),
        }
    }

    /// Expands one parameter expression into `fb`; returns whether it was a list with no
    /// elements (for `"$@"`).
    fn expand_param(
        &mut self,
        sh: &mut Shell,
        pe: &ParameterExpr,
        in_dq: bool,
        fb: &mut Fb,
    ) -> R<bool> {
        let flag = if in_dq { QUO } else { EXP };
        let is_null = |v: &PV, tt: &ParameterTestType| match v {
            PV::Unset => true,
            PV::S(s) => matches!(tt, ParameterTestType::UnsetOrNull) && s.is_empty(),
            PV::L(l, _) => {
                l.is_empty()
                    || (matches!(tt, ParameterTestType::UnsetOrNull)
                        && l.iter().all(|s| s.is_empty())
                        && l.len() == 1)
            }
        };
        let v = match pe {
            ParameterExpr::Parameter {
                parameter,
                indirect,
            } => {
                let v = self.param_value(sh, parameter, *indirect)?;
                if matches!(v, PV::Unset)
                    && sh.opts.nounset
                    && !matches!(parameter, Parameter::Special(_))
                {
                    self.err(
                        sh,
                        &format!("bash: {}: unbound variable", param_name(parameter)),
                    );
                    return Err(Ctl::Exit(expansion_error_status(sh)));
                }
                v
            }
            ParameterExpr::UseDefaultValues {
                parameter,
                indirect,
                test_type,
                default_value,
            } => {
                let v = self.param_value(sh, parameter, *indirect)?;
                if is_null(&v, test_type) {
                    if let Some(d) = default_value {
                        let pieces = self.parse_word(sh, d)?;
                        self.expand_pieces(sh, &pieces, in_dq, fb)?;
                    }
                    return Ok(false);
                }
                v
            }
            ParameterExpr::AssignDefaultValues {
                parameter,
                indirect,
                test_type,
                default_value,
            } => {
                let v = self.param_value(sh, parameter, *indirect)?;
                if is_null(&v, test_type) {
                    let d = match default_value {
                        Some(d) => self.expand_nosplit_str(sh, d)?,
                        None => String::new(),
                    };
                    match parameter {
                        Parameter::Named(n) => {
                            let _ = sh.set(n, d.clone());
                        }
                        Parameter::NamedWithIndex { name, index } => {
                            // `${a[i]=x}` assigns the element
                            let resolved = sh.resolve(name);
                            let name = resolved.as_ref().unwrap_or(name).clone();
                            let is_assoc = matches!(
                                sh.vars.get(&name).map(|v| &v.value),
                                Some(Value::Assoc(_))
                            );
                            let key = if is_assoc {
                                self.expand_nosplit_str(sh, index)?
                            } else {
                                let text = self.expand_nosplit_str(sh, index)?;
                                self.eval_arith_str(sh, &text)?
                                    .unwrap_or_default()
                                    .to_string()
                            };
                            if let Err(m) = crate::shell::set_elem(sh, &name, &key, d.clone()) {
                                self.err(sh, &format!("bash: {m}"));
                                return Err(Ctl::Exit(1));
                            }
                        }
                        _ => {}
                    }
                    PV::S(d)
                } else {
                    v
                }
            }
            ParameterExpr::IndicateErrorIfNullOrUnset {
                parameter,
                indirect,
                test_type,
                error_message,
            } => {
                let v = self.param_value(sh, parameter, *indirect)?;
                if is_null(&v, test_type) {
                    let msg = match error_message {
                        Some(m) => self.expand_nosplit_str(sh, m)?,
                        None => "parameter null or not set".into(),
                    };
                    self.err(sh, &format!("bash: {}: {msg}", param_name(parameter)));
                    return Err(Ctl::Exit(expansion_error_status(sh)));
                }
                v
            }
            ParameterExpr::UseAlternativeValue {
                parameter,
                indirect,
                test_type,
                alternative_value,
            } => {
                let v = self.param_value(sh, parameter, *indirect)?;
                if !is_null(&v, test_type) {
                    if let Some(d) = alternative_value {
                        let pieces = self.parse_word(sh, d)?;
                        self.expand_pieces(sh, &pieces, in_dq, fb)?;
                    }
                }
                return Ok(false);
            }
            ParameterExpr::ParameterLength {
                parameter,
                indirect,
            } => {
                let v = self.param_value(sh, parameter, *indirect)?;
                let n = match v {
                    PV::Unset => {
                        if sh.opts.nounset {
                            self.err(
                                sh,
                                &format!("bash: {}: unbound variable", param_name(parameter)),
                            );
                            return Err(Ctl::Exit(expansion_error_status(sh)));
                        }
                        0
                    }
                    PV::S(s) => s.chars().count(),
                    PV::L(l, _) => l.len(),
                };
                PV::S(n.to_string())
            }
            ParameterExpr::RemoveSmallestSuffixPattern {
                parameter,
                indirect,
                pattern,
            }
            | ParameterExpr::RemoveLargestSuffixPattern {
                parameter,
                indirect,
                pattern,
            }
            | ParameterExpr::RemoveSmallestPrefixPattern {
                parameter,
                indirect,
                pattern,
            }
            | ParameterExpr::RemoveLargestPrefixPattern {
                parameter,
                indirect,
                pattern,
            } => {
                let v = self.param_value(sh, parameter, *indirect)?;
                self.unbound_check(sh, parameter, &v)?;
                let pat = self.pattern_of(sh, pattern)?;
                let ext = sh.opts.extglob;
                let (suffix, largest) = match pe {
                    ParameterExpr::RemoveSmallestSuffixPattern { .. } => (true, false),
                    ParameterExpr::RemoveLargestSuffixPattern { .. } => (true, true),
                    ParameterExpr::RemoveSmallestPrefixPattern { .. } => (false, false),
                    _ => (false, true),
                };
                self.try_map_pv(v, |it, s| {
                    crate::pattern::remove(&s, &pat, suffix, largest, ext, &mut || it.check_time())
                })?
            }
            ParameterExpr::Substring {
                parameter,
                indirect,
                offset,
                length,
            } => {
                let v = self.param_value(sh, parameter, *indirect)?;
                self.unbound_check(sh, parameter, &v)?;
                let off = match self.arith_text(sh, &offset.value)? {
                    Ok(o) => o,
                    Err(m) => {
                        self.err(sh, &format!("bash: {m}"));
                        return Err(Ctl::Exit(1));
                    }
                };
                let len = match length {
                    Some(l) => match self.arith_text(sh, &l.value)? {
                        Ok(o) => Some(o),
                        Err(m) => {
                            self.err(sh, &format!("bash: {m}"));
                            return Err(Ctl::Exit(1));
                        }
                    },
                    None => None,
                };
                let is_pos = matches!(
                    parameter,
                    Parameter::Special(SpecialParameter::AllPositionalParameters { .. })
                );
                match v {
                    PV::Unset => PV::Unset,
                    PV::S(s) => {
                        // offsets count characters; an ASCII value slices by bytes
                        let ascii = s.is_ascii();
                        let n = if ascii { s.len() } else { s.chars().count() };
                        match slice_range(n, off, len) {
                            Some((a, b)) => {
                                let (a, b) = if ascii {
                                    (a, b)
                                } else {
                                    let mut at = s.char_indices().map(|(i, _)| i).skip(a);
                                    let start = at.next().unwrap_or(s.len());
                                    let end = if b > a {
                                        at.nth(b - a - 1).unwrap_or(s.len())
                                    } else {
                                        start
                                    };
                                    (start, end)
                                };
                                PV::S(s[a..b].to_string())
                            }
                            None => {
                                if len.is_some_and(|l| l < 0) && slice_neg_err(n, off, len) {
                                    self.err(sh, "bash: substring expression < 0");
                                    return Err(Ctl::Exit(1));
                                }
                                PV::S(String::new())
                            }
                        }
                    }
                    PV::L(l, c) => {
                        let mut items = l;
                        let mut off = off;
                        if is_pos {
                            if off == 0 {
                                items.insert(0, sh.arg0.clone());
                            } else if off > 0 {
                                off -= 1;
                            }
                        }
                        match slice_range(items.len(), off, len) {
                            Some((a, b)) => PV::L(items[a..b].to_vec(), c),
                            None => PV::L(vec![], c),
                        }
                    }
                }
            }
            ParameterExpr::Transform {
                parameter,
                indirect,
                op,
            } => {
                let v = self.param_value(sh, parameter, *indirect)?;
                self.unbound_check(sh, parameter, &v)?;
                use word::ParameterTransformOp as T;
                match op {
                    T::ToUpperCase | T::ToLowerCase => {
                        let upper = matches!(op, T::ToUpperCase);
                        match map_pv_chunked(v, |s, out| case_map_into(s, upper, out)) {
                            Some(v) => v,
                            None => return Err(self.interrupted()),
                        }
                    }
                    T::CapitalizeInitial => map_pv(v, |s| cap_first(&s, true)),
                    T::Quoted => {
                        // bounded as the word being built is, and by the clock: quoting
                        // can make a value four times longer
                        let mut room = fb.budget.saturating_sub(fb.bytes);
                        let mut quote = |s: &str| quote_value_bounded(s, &mut room);
                        let quoted = match v {
                            PV::Unset => Some(PV::Unset),
                            PV::S(s) => quote(&s).map(PV::S),
                            PV::L(l, c) => l
                                .iter()
                                .map(|s| quote(s))
                                .collect::<Option<Vec<_>>>()
                                .map(|l| PV::L(l, c)),
                        };
                        match quoted {
                            Some(v) => v,
                            None => return Err(self.interrupted()),
                        }
                    }
                    T::ExpandEscapeSequences => map_pv(v, |s| ansi_c(&s)),
                    T::ToAssignmentLogic if matches!(parameter, Parameter::Named(_)) => {
                        // `declare -FLAGS name=VALUE` as bash's `${v@A}` prints a scalar
                        let n = param_name(parameter);
                        let flags = attr_flags(sh, &n);
                        let decl = if flags.is_empty() {
                            String::new()
                        } else {
                            format!("declare -{flags} ")
                        };
                        map_pv(v, |s| format!("{decl}{n}={}", quote_value(&s)))
                    }
                    T::ToAttributeFlags => {
                        let n = param_name(parameter);
                        let n = n.split('[').next().unwrap_or_default().to_string();
                        let flags = attr_flags(sh, &n);
                        match v {
                            PV::Unset if !sh.vars.contains_key(&n) => PV::Unset,
                            PV::L(l, c) => PV::L(l.iter().map(|_| flags.clone()).collect(), c),
                            _ => PV::S(flags),
                        }
                    }
                    T::PromptExpand => {
                        let host = sh.get("HOSTNAME").unwrap_or_else(|| "sandbox".into());
                        let user = sh.get("USER").unwrap_or_else(|| "root".into());
                        let cwd = sh.cwd.clone();
                        map_pv(v, |s| prompt_expand(&s, &user, &host, &cwd))
                    }
                    _ => {
                        self.unsupported(sh, "parameter transformation operator")?;
                        return Err(Ctl::Exit(1));
                    }
                }
            }
            ParameterExpr::UppercaseFirstChar {
                parameter,
                indirect,
                ..
            } => {
                let v = self.param_value(sh, parameter, *indirect)?;
                self.unbound_check(sh, parameter, &v)?;
                map_pv(v, |s| cap_first(&s, true))
            }
            ParameterExpr::LowercaseFirstChar {
                parameter,
                indirect,
                ..
            } => {
                let v = self.param_value(sh, parameter, *indirect)?;
                self.unbound_check(sh, parameter, &v)?;
                map_pv(v, |s| cap_first(&s, false))
            }
            ParameterExpr::UppercasePattern {
                parameter,
                indirect,
                pattern,
            }
            | ParameterExpr::LowercasePattern {
                parameter,
                indirect,
                pattern,
            } => {
                let upper = matches!(pe, ParameterExpr::UppercasePattern { .. });
                let v = self.param_value(sh, parameter, *indirect)?;
                self.unbound_check(sh, parameter, &v)?;
                let pat = match pattern {
                    Some(p) if !p.is_empty() => {
                        Some(self.expand_pattern(sh, p)?.unwrap_or_default())
                    }
                    _ => None,
                };
                let mapped = map_pv_chunked(v, |s, out| match &pat {
                    None => case_map_into(s, upper, out),
                    Some(p) => {
                        let mut one = String::new();
                        for c in s.chars() {
                            one.clear();
                            one.push(c);
                            if !crate::glob::matches(p, &one, true) {
                                out.push(c);
                            } else if upper {
                                out.extend(c.to_uppercase());
                            } else {
                                out.extend(c.to_lowercase());
                            }
                        }
                    }
                });
                match mapped {
                    Some(v) => v,
                    None => return Err(self.interrupted()),
                }
            }
            ParameterExpr::ReplaceSubstring {
                parameter,
                indirect,
                pattern,
                replacement,
                match_kind,
            } => {
                let v = self.param_value(sh, parameter, *indirect)?;
                self.unbound_check(sh, parameter, &v)?;
                let pat = self.expand_pattern(sh, pattern)?.unwrap_or_default();
                let rep = match replacement {
                    Some(r) => self.expand_nosplit_str(sh, r)?,
                    None => String::new(),
                };
                let ext = sh.opts.extglob;
                use word::SubstringMatchKind as K;
                let at = match match_kind {
                    K::Prefix => crate::pattern::Where::Prefix,
                    K::Suffix => crate::pattern::Where::Suffix,
                    K::FirstOccurrence => crate::pattern::Where::First,
                    K::Anywhere => crate::pattern::Where::All,
                };
                let max = usize::try_from(self.w.memory_limit / 4).unwrap_or(usize::MAX);
                self.try_map_pv(v, |it, s| {
                    crate::pattern::replace(&s, &pat, &rep, at, ext, max, &mut || it.check_time())
                })?
            }
            ParameterExpr::VariableNames {
                prefix,
                concatenate,
            } => {
                let mut names: Vec<String> = sh
                    .vars
                    .keys()
                    .filter(|k| k.starts_with(prefix.as_str()))
                    .cloned()
                    .collect();
                names.sort();
                PV::L(names, *concatenate)
            }
            ParameterExpr::MemberKeys {
                variable_name,
                concatenate,
            } => match sh
                .vars
                .get(
                    &sh.resolve(variable_name)
                        .unwrap_or_else(|| variable_name.clone()),
                )
                .map(|v| &v.value)
            {
                None => PV::L(vec![], *concatenate),
                Some(Value::Str(_)) => PV::L(vec!["0".into()], *concatenate),
                Some(Value::Arr(m)) => {
                    PV::L(m.keys().map(|k| k.to_string()).collect(), *concatenate)
                }
                Some(Value::Assoc(m)) => PV::L(m.keys().map(String::from).collect(), *concatenate),
            },
        };
        match v {
            PV::Unset => Ok(false),
            PV::S(s) => {
                fb.push(&s, flag);
                Ok(false)
            }
            PV::L(items, concat) => {
                if items.is_empty() && !(in_dq && concat) {
                    // "$@" of nothing is no field; "$*" of nothing is one empty one
                    return Ok(true);
                }
                if in_dq && concat {
                    let sep = sh
                        .ifs()
                        .chars()
                        .next()
                        .map(String::from)
                        .unwrap_or_default();
                    // pushed item by item: the word's builder copies big text in
                    // pieces, looking between them whether the command must stop
                    for (i, item) in items.iter().enumerate() {
                        if i > 0 {
                            fb.push(&sep, QUO);
                        }
                        fb.push(item, QUO);
                    }
                } else {
                    for (i, it) in items.iter().enumerate() {
                        // "$@" of a million parameters: look at the clock, and bury (not
                        // free) the items when the command must stop
                        if i % 4096 == 4095 && crate::shell::stop_due() {
                            crate::mem::bury(items);
                            return Err(self.interrupted());
                        }
                        if i > 0 {
                            fb.brk();
                            if in_dq {
                                fb.cur.q = true;
                            }
                        }
                        fb.push(it, flag);
                    }
                }
                Ok(false)
            }
        }
    }

    // ---------- pathname expansion ----------

    /// Maps every value of `v` with `f`, which may fail (a deadline, a budget).
    fn try_map_pv(&mut self, v: PV, mut f: impl FnMut(&mut Self, String) -> R<String>) -> R<PV> {
        Ok(match v {
            PV::Unset => PV::Unset,
            PV::S(s) => PV::S(f(self, s)?),
            PV::L(l, c) => {
                let mut out = Vec::with_capacity(l.len());
                for s in l {
                    out.push(f(self, s)?);
                }
                PV::L(out, c)
            }
        })
    }

    pub fn glob_paths(&mut self, sh: &Shell, pat: &str) -> Vec<String> {
        let abs = pat.starts_with('/');
        let comps: Vec<&str> = pat.split('/').filter(|c| !c.is_empty()).collect();
        let trailing = pat.ends_with('/');
        let mut results: Vec<String> = vec![if abs { "/".into() } else { String::new() }];
        for (ci, comp) in comps.iter().enumerate() {
            let last = ci + 1 == comps.len();
            let mut next = Vec::new();
            let is_meta = crate::glob::has_meta(comp, sh.opts.extglob);
            for base in &results {
                let dir_path = if base.is_empty() {
                    ".".to_string()
                } else {
                    base.clone()
                };
                if !is_meta {
                    let lit = crate::glob::unescape(comp);
                    let p = format!("{base}{lit}");
                    if self.w.vfs.resolve(&sh.cwd, &p, false).is_ok() {
                        next.push(if last { p } else { format!("{p}/") });
                    }
                    continue;
                }
                if *comp == "**" && sh.opts.globstar {
                    // zero or more directories
                    if last && !base.is_empty() {
                        next.push(base.clone());
                    }
                    let mut stack = vec![base.clone()];
                    while let Some(b) = stack.pop() {
                        if !last {
                            next.push(b.clone());
                        }
                        let dp = if b.is_empty() {
                            ".".to_string()
                        } else {
                            b.clone()
                        };
                        let Ok(d) = self.w.vfs.resolve(&sh.cwd, &dp, true) else {
                            continue;
                        };
                        let Ok(entries) = self.w.vfs.list(d) else {
                            continue;
                        };
                        let mut subs = Vec::new();
                        for (n, ino) in entries {
                            if n.starts_with('.') && !sh.opts.dotglob {
                                continue;
                            }
                            let is_dir = self.w.vfs.get(ino).is_dir();
                            if last {
                                next.push(format!("{b}{n}"));
                            }
                            if is_dir {
                                subs.push(format!("{b}{n}/"));
                            }
                        }
                        subs.reverse();
                        stack.extend(subs);
                    }
                    continue;
                }
                let Ok(d) = self.w.vfs.resolve(&sh.cwd, &dir_path, true) else {
                    continue;
                };
                let Ok(entries) = self.w.vfs.list(d) else {
                    continue;
                };
                for (n, ino) in entries {
                    if n.starts_with('.')
                        && !comp.starts_with('.')
                        && !comp.starts_with("\\.")
                        && !sh.opts.dotglob
                    {
                        continue;
                    }
                    if crate::glob::matches(comp, &n, sh.opts.extglob) {
                        let is_dir = {
                            let node = self.w.vfs.get(ino);
                            node.is_dir()
                                || (matches!(node.kind, crate::vfs::Kind::Symlink(_))
                                    && self
                                        .w
                                        .vfs
                                        .resolve(&sh.cwd, &format!("{base}{n}"), true)
                                        .is_ok_and(|i| self.w.vfs.get(i).is_dir()))
                        };
                        if last {
                            if trailing && !is_dir {
                                continue;
                            }
                            next.push(format!("{base}{n}"));
                        } else if is_dir {
                            next.push(format!("{base}{n}/"));
                        }
                    }
                }
            }
            results = next;
            if results.is_empty() {
                break;
            }
        }
        if comps.is_empty() {
            return Vec::new();
        }
        let mut r: Vec<String> = results
            .into_iter()
            .map(|mut p| {
                if trailing && !p.ends_with('/') {
                    p.push('/');
                }
                p
            })
            .collect();
        r.sort_by(|a, b| collate(a).cmp(collate(b)));
        r.dedup();
        r
    }

    // ---------- arithmetic ----------

    /// Expands `$...` inside an arithmetic text and evaluates it.
    pub fn arith_text(&mut self, sh: &mut Shell, text: &str) -> R<Result<i64, String>> {
        let expanded = if text.contains('$') || text.contains('`') || text.contains('"') {
            let fields = self.expand_fields(sh, text, true)?;
            fields
                .into_iter()
                .map(|f| f.s)
                .collect::<Vec<_>>()
                .join(" ")
        } else {
            text.to_string()
        };
        self.eval_arith_str(sh, &expanded)
    }

    pub fn eval_arith_str(&mut self, sh: &mut Shell, s: &str) -> R<Result<i64, String>> {
        let t = s.trim();
        if let Some(v) = parse_int(t) {
            return Ok(Ok(v));
        }
        if let Some(tok) = bad_octal_token(t) {
            return Ok(Err(format!(
                "{t}: value too great for base (error token is \"{tok}\")"
            )));
        }
        let expr = match parse_arith(t).or_else(|| {
            // the arithmetic grammar is ASCII-only: carry other characters (in associative
            // array subscripts) through as tokens that `arith_expr_text` turns back
            (!t.is_ascii())
                .then(|| parse_arith(&encode_non_ascii(t)))
                .flatten()
        }) {
            Some(e) => e,
            None => return Ok(Err(format!("{t}: syntax error in expression"))),
        };
        self.eval_arith(sh, &expr, 0)
            .map(|r| r.map_err(|m| format!("{t}: {m}")))
    }

    fn arith_var(&mut self, sh: &mut Shell, name: &str, depth: u32) -> R<Result<i64, String>> {
        let resolved = sh.resolve(name);
        let name = resolved.as_deref().unwrap_or(name);
        let v = match sh.vars.get(name) {
            Some(v) => v.as_str(),
            None => match self.named_value(sh, name) {
                PV::S(s) => s,
                _ => {
                    if sh.opts.nounset {
                        self.err(sh, &format!("bash: {name}: unbound variable"));
                        return Err(Ctl::Exit(expansion_error_status(sh)));
                    }
                    String::new()
                }
            },
        };
        self.arith_value_str(sh, &v, depth)
    }

    fn arith_value_str(&mut self, sh: &mut Shell, v: &str, depth: u32) -> R<Result<i64, String>> {
        let t = v.trim();
        if t.is_empty() {
            return Ok(Ok(0));
        }
        if let Some(n) = parse_int(t) {
            return Ok(Ok(n));
        }
        if depth > 64 {
            return Ok(Err("expression recursion level exceeded".into()));
        }
        match parse_arith(t) {
            Some(e) => self.eval_arith(sh, &e, depth + 1),
            None => Ok(Err(format!(
                "syntax error: operand expected (error token is \"{t}\")"
            ))),
        }
    }

    fn arith_get(
        &mut self,
        sh: &mut Shell,
        t: &ast::ArithmeticTarget,
        depth: u32,
    ) -> R<Result<i64, String>> {
        match t {
            ast::ArithmeticTarget::Variable(n) => self.arith_var(sh, n, depth),
            ast::ArithmeticTarget::ArrayElement(n, idx) => {
                let resolved = sh.resolve(n);
                let n = resolved.as_ref().unwrap_or(n);
                let is_assoc = matches!(sh.vars.get(n).map(|v| &v.value), Some(Value::Assoc(_)));
                let key = if is_assoc {
                    arith_expr_text(idx)
                } else {
                    match self.eval_arith(sh, idx, depth)? {
                        Ok(i) => i.to_string(),
                        Err(e) => return Ok(Err(e)),
                    }
                };
                let v = get_elem(self, sh, n, &key);
                self.arith_value_str(sh, &v, depth)
            }
        }
    }

    fn arith_set(
        &mut self,
        sh: &mut Shell,
        t: &ast::ArithmeticTarget,
        v: i64,
        depth: u32,
    ) -> R<Result<(), String>> {
        match t {
            ast::ArithmeticTarget::Variable(n) => {
                let resolved = sh.resolve(n);
                let n = resolved.as_ref().unwrap_or(n);
                if let Some(Var2 { arr: true }) = sh.vars.get(n).map(|x| Var2 {
                    arr: !matches!(x.value, Value::Str(_)),
                }) {
                    crate::shell::set_elem(sh, n, "0", v.to_string()).ok();
                    return Ok(Ok(()));
                }
                Ok(sh.set(n, v.to_string()))
            }
            ast::ArithmeticTarget::ArrayElement(n, idx) => {
                let resolved = sh.resolve(n);
                let n = resolved.as_ref().unwrap_or(n);
                let is_assoc = matches!(sh.vars.get(n).map(|v| &v.value), Some(Value::Assoc(_)));
                let key = if is_assoc {
                    arith_expr_text(idx)
                } else {
                    match self.eval_arith(sh, idx, depth)? {
                        Ok(i) => i.to_string(),
                        Err(e) => return Ok(Err(e)),
                    }
                };
                Ok(crate::shell::set_elem(sh, n, &key, v.to_string()))
            }
        }
    }

    fn eval_arith(
        &mut self,
        sh: &mut Shell,
        e: &ast::ArithmeticExpr,
        depth: u32,
    ) -> R<Result<i64, String>> {
        stacker::maybe_grow(128 * 1024, 2 * 1024 * 1024, || {
            self.eval_arith_inner(sh, e, depth)
        })
    }

    fn eval_arith_inner(
        &mut self,
        sh: &mut Shell,
        e: &ast::ArithmeticExpr,
        depth: u32,
    ) -> R<Result<i64, String>> {
        use ast::ArithmeticExpr as A;
        use ast::BinaryOperator as B;
        macro_rules! tryv {
            ($e:expr) => {
                match $e? {
                    Ok(v) => v,
                    Err(m) => return Ok(Err(m)),
                }
            };
        }
        Ok(Ok(match e {
            A::Literal(v) => *v,
            A::Reference(t) => tryv!(self.arith_get(sh, t, depth)),
            A::UnaryOp(op, x) => {
                let v = tryv!(self.eval_arith(sh, x, depth));
                match op {
                    ast::UnaryOperator::UnaryPlus => v,
                    ast::UnaryOperator::UnaryMinus => v.wrapping_neg(),
                    ast::UnaryOperator::BitwiseNot => !v,
                    ast::UnaryOperator::LogicalNot => i64::from(v == 0),
                }
            }
            A::BinaryOp(op, a, b) => {
                match op {
                    B::LogicalAnd => {
                        let x = tryv!(self.eval_arith(sh, a, depth));
                        if x == 0 {
                            return Ok(Ok(0));
                        }
                        let y = tryv!(self.eval_arith(sh, b, depth));
                        return Ok(Ok(i64::from(y != 0)));
                    }
                    B::LogicalOr => {
                        let x = tryv!(self.eval_arith(sh, a, depth));
                        if x != 0 {
                            return Ok(Ok(1));
                        }
                        let y = tryv!(self.eval_arith(sh, b, depth));
                        return Ok(Ok(i64::from(y != 0)));
                    }
                    _ => {}
                }
                let x = tryv!(self.eval_arith(sh, a, depth));
                let y = tryv!(self.eval_arith(sh, b, depth));
                tryv!(Ok::<_, Ctl>(binop(op, x, y)))
            }
            A::Conditional(c, a, b) => {
                let cv = tryv!(self.eval_arith(sh, c, depth));
                if cv != 0 {
                    tryv!(self.eval_arith(sh, a, depth))
                } else {
                    tryv!(self.eval_arith(sh, b, depth))
                }
            }
            A::Assignment(t, x) => {
                let v = tryv!(self.eval_arith(sh, x, depth));
                tryv!(self.arith_set(sh, t, v, depth));
                v
            }
            A::BinaryAssignment(op, t, x) => {
                let cur = tryv!(self.arith_get(sh, t, depth));
                let y = tryv!(self.eval_arith(sh, x, depth));
                let v = tryv!(Ok::<_, Ctl>(binop(op, cur, y)));
                tryv!(self.arith_set(sh, t, v, depth));
                v
            }
            A::UnaryAssignment(op, t) => {
                let cur = tryv!(self.arith_get(sh, t, depth));
                use ast::UnaryAssignmentOperator as U;
                let (newv, ret) = match op {
                    U::PrefixIncrement => (cur + 1, cur + 1),
                    U::PrefixDecrement => (cur - 1, cur - 1),
                    U::PostfixIncrement => (cur + 1, cur),
                    U::PostfixDecrement => (cur - 1, cur),
                };
                tryv!(self.arith_set(sh, t, newv, depth));
                ret
            }
        }))
    }

    // ---------- [[ ]] ----------

    pub fn eval_ext_test(
        &mut self,
        sh: &mut Shell,
        e: &ast::ExtendedTestExpr,
    ) -> R<Result<bool, String>> {
        use ast::ExtendedTestExpr as E;
        Ok(Ok(match e {
            E::And(a, b) => {
                match self.eval_ext_test(sh, a)? {
                    Ok(true) => {}
                    other => return Ok(other),
                }
                return self.eval_ext_test(sh, b);
            }
            E::Or(a, b) => {
                match self.eval_ext_test(sh, a)? {
                    Ok(false) => {}
                    other => return Ok(other),
                }
                return self.eval_ext_test(sh, b);
            }
            E::Not(a) => match self.eval_ext_test(sh, a)? {
                Ok(v) => !v,
                Err(m) => return Ok(Err(m)),
            },
            E::Parenthesized(a) => return self.eval_ext_test(sh, a),
            E::UnaryTest(p, w) => {
                let s = self.expand_nosplit_str(sh, &w.value)?;
                return Ok(crate::builtins::unary_test(self, sh, p, &s));
            }
            E::BinaryTest(p, l, r) => {
                use ast::BinaryPredicate as P;
                let ls = self.expand_nosplit_str(sh, &l.value)?;
                match p {
                    P::StringExactlyMatchesPattern | P::StringDoesNotExactlyMatchPattern => {
                        let pat = self.expand_pattern(sh, &r.value)?.unwrap_or_default();
                        let m = crate::pattern::matches_whole(&ls, &pat, true, &mut || {
                            self.check_time()
                        })?;
                        m == matches!(p, P::StringExactlyMatchesPattern)
                    }
                    P::StringMatchesRegex => {
                        let fields = self.expand_fields(sh, &r.value, false)?;
                        let re: String =
                            fields.iter().map(field_regex).collect::<Vec<_>>().join(" ");
                        match regex::Regex::new(&re) {
                            Ok(rx) => match rx.captures(&ls) {
                                Some(c) => {
                                    let mut m = crate::shell::ArrMap::new();
                                    for (i, g) in c.iter().enumerate() {
                                        m.insert(
                                            i as i64,
                                            g.map(|g| g.as_str().to_string())
                                                .unwrap_or_default()
                                                .into(),
                                        );
                                    }
                                    sh.vars.insert(
                                        "BASH_REMATCH".into(),
                                        crate::shell::Var {
                                            value: Value::Arr(m),
                                            exported: false,
                                            readonly: false,
                                            integer: false,
                                            nameref: false,
                                        },
                                    );
                                    true
                                }
                                None => {
                                    sh.vars.insert(
                                        "BASH_REMATCH".into(),
                                        crate::shell::Var {
                                            value: Value::Arr(Default::default()),
                                            exported: false,
                                            readonly: false,
                                            integer: false,
                                            nameref: false,
                                        },
                                    );
                                    false
                                }
                            },
                            Err(_) => return Ok(Err(format!("invalid regex: {re}"))),
                        }
                    }
                    _ => {
                        let rs = self.expand_nosplit_str(sh, &r.value)?;
                        return crate::builtins::binary_test(self, sh, p, &ls, &rs);
                    }
                }
            }
        }))
    }
}

struct Var2 {
    arr: bool,
}

fn arith_expr_text(e: &ast::ArithmeticExpr) -> String {
    let s = match e {
        ast::ArithmeticExpr::Reference(ast::ArithmeticTarget::Variable(n)) => n.clone(),
        ast::ArithmeticExpr::Literal(v) => v.to_string(),
        other => format!("{other}"),
    };
    if s.contains("__U") {
        decode_non_ascii(&s)
    } else {
        s
    }
}

fn encode_non_ascii(t: &str) -> String {
    let mut out = String::with_capacity(t.len() * 2);
    for c in t.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            out.push_str(&format!("__U{:x}__", c as u32));
        }
    }
    out
}

fn decode_non_ascii(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find("__U") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 3..];
        let hex_len = after.bytes().take_while(|b| b.is_ascii_hexdigit()).count();
        match (
            after[hex_len..].starts_with("__"),
            u32::from_str_radix(&after[..hex_len], 16)
                .ok()
                .and_then(char::from_u32),
        ) {
            (true, Some(c)) if hex_len > 0 => {
                out.push(c);
                rest = &after[hex_len + 2..];
            }
            _ => {
                out.push_str("__U");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The first octal-looking number (`08`, `0129`) holding a digit 8 or 9, as bash rejects.
fn bad_octal_token(t: &str) -> Option<&str> {
    let b = t.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'#' || c == b'$';
    let mut i = 0;
    while i < b.len() {
        if word(b[i]) {
            let start = i;
            while i < b.len() && word(b[i]) {
                i += 1;
            }
            let tok = &t[start..i];
            if tok.len() > 1
                && tok.starts_with('0')
                && tok.bytes().all(|c| c.is_ascii_digit())
                && tok.bytes().any(|c| c == b'8' || c == b'9')
            {
                return Some(tok);
            }
        } else {
            i += 1;
        }
    }
    None
}

pub fn parse_int(t: &str) -> Option<i64> {
    let (neg, t) = match t.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    if t.is_empty() {
        return None;
    }
    let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        i64::from_str_radix(h, 16).ok()?
    } else if let Some((b, n)) = t.split_once('#') {
        let base: u32 = b.parse().ok()?;
        if !(2..=64).contains(&base) {
            return None;
        }
        let mut v: i64 = 0;
        for c in n.chars() {
            let d = match c {
                '0'..='9' => c as u32 - '0' as u32,
                'a'..='z' => c as u32 - 'a' as u32 + 10,
                'A'..='Z' => {
                    if base <= 36 {
                        c as u32 - 'A' as u32 + 10
                    } else {
                        c as u32 - 'A' as u32 + 36
                    }
                }
                '@' => 62,
                '_' => 63,
                _ => return None,
            };
            if d >= base {
                return None;
            }
            v = v.wrapping_mul(base as i64).wrapping_add(d as i64);
        }
        v
    } else if t.len() > 1 && t.starts_with('0') {
        i64::from_str_radix(&t[1..], 8).ok()?
    } else if t.bytes().all(|b| b.is_ascii_digit()) {
        t.parse().ok()?
    } else {
        return None;
    };
    Some(if neg { v.wrapping_neg() } else { v })
}

fn binop(op: &ast::BinaryOperator, x: i64, y: i64) -> Result<i64, String> {
    use ast::BinaryOperator as B;
    Ok(match op {
        B::Power => {
            if y < 0 {
                return Err("exponent less than 0".into());
            }
            x.wrapping_pow(y as u32)
        }
        B::Multiply => x.wrapping_mul(y),
        B::Divide => {
            if y == 0 {
                return Err("division by 0 (error token is \"0\")".into());
            }
            x.wrapping_div(y)
        }
        B::Modulo => {
            if y == 0 {
                return Err("division by 0 (error token is \"0\")".into());
            }
            x.wrapping_rem(y)
        }
        B::Comma => y,
        B::Add => x.wrapping_add(y),
        B::Subtract => x.wrapping_sub(y),
        B::ShiftLeft => x.wrapping_shl(y as u32),
        B::ShiftRight => x.wrapping_shr(y as u32),
        B::LessThan => i64::from(x < y),
        B::LessThanOrEqualTo => i64::from(x <= y),
        B::GreaterThan => i64::from(x > y),
        B::GreaterThanOrEqualTo => i64::from(x >= y),
        B::Equals => i64::from(x == y),
        B::NotEquals => i64::from(x != y),
        B::BitwiseAnd => x & y,
        B::BitwiseXor => x ^ y,
        B::BitwiseOr => x | y,
        B::LogicalAnd => i64::from(x != 0 && y != 0),
        B::LogicalOr => i64::from(x != 0 || y != 0),
    })
}

fn param_name(p: &Parameter) -> String {
    match p {
        Parameter::Positional(n) => n.to_string(),
        Parameter::Special(s) => s.to_string(),
        Parameter::Named(n) => n.clone(),
        Parameter::NamedWithIndex { name, index } => format!("{name}[{index}]"),
        Parameter::NamedWithAllIndices { name, .. } => name.clone(),
    }
}

fn map_pv(v: PV, f: impl Fn(String) -> String) -> PV {
    match v {
        PV::Unset => PV::Unset,
        PV::S(s) => PV::S(f(s)),
        PV::L(l, c) => PV::L(l.into_iter().map(f).collect(), c),
    }
}

/// `f` applied to each value of `v` one [`CHUNK_BYTES`] piece at a time (pieces cut at
/// character boundaries, so `f` must map characters one by one); `None` when the command
/// must stop ([`crate::shell::stop_due`], looked at between pieces).
fn map_pv_chunked(v: PV, f: impl Fn(&str, &mut String)) -> Option<PV> {
    let map = |s: String| -> Option<String> {
        if s.len() < CHUNK_BYTES {
            let mut out = String::with_capacity(s.len());
            f(&s, &mut out);
            return Some(out);
        }
        let mut out = String::with_capacity(s.len());
        let mut rest = s.as_str();
        while !rest.is_empty() {
            if crate::shell::stop_due() {
                return None;
            }
            let mut end = rest.len().min(CHUNK_BYTES);
            while !rest.is_char_boundary(end) {
                end += 1;
            }
            let (piece, tail) = rest.split_at(end);
            f(piece, &mut out);
            rest = tail;
        }
        Some(out)
    };
    Some(match v {
        PV::Unset => PV::Unset,
        PV::S(s) => PV::S(map(s)?),
        PV::L(l, c) => PV::L(l.into_iter().map(map).collect::<Option<Vec<_>>>()?, c),
    })
}

/// Appends `s` upper- (or lower-) cased character by character, as bash's `${v^^}` and
/// `${v,,}` map each character on its own (no context rules such as a final sigma).
fn case_map_into(s: &str, upper: bool, out: &mut String) {
    if s.is_ascii() {
        out.push_str(s);
        let start = out.len() - s.len();
        let tail = &mut out[start..];
        if upper {
            tail.make_ascii_uppercase();
        } else {
            tail.make_ascii_lowercase();
        }
        return;
    }
    for c in s.chars() {
        if upper {
            out.extend(c.to_uppercase());
        } else {
            out.extend(c.to_lowercase());
        }
    }
}

fn cap_first(s: &str, upper: bool) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => {
            let first: String = if upper {
                f.to_uppercase().collect()
            } else {
                f.to_lowercase().collect()
            };
            first + c.as_str()
        }
        None => String::new(),
    }
}

fn slice_range(n: usize, off: i64, len: Option<i64>) -> Option<(usize, usize)> {
    let n = n as i64;
    let start = if off < 0 { n + off } else { off };
    if start < 0 || start > n {
        return None;
    }
    let end = match len {
        None => n,
        Some(l) if l < 0 => n + l,
        Some(l) => (start + l).min(n),
    };
    if end < start {
        return None;
    }
    Some((start as usize, end as usize))
}

fn slice_neg_err(n: usize, off: i64, len: Option<i64>) -> bool {
    let n = n as i64;
    let start = if off < 0 { n + off } else { off };
    match len {
        Some(l) if l < 0 => n + l < start && start <= n && start >= 0,
        _ => false,
    }
}

/// The sort key bash's C.UTF-8 collation gives (byte order).
pub fn collate(s: &str) -> &[u8] {
    s.as_bytes()
}

fn unbackslash_backquote(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\\' {
            if let Some(&n) = it.peek() {
                if n == '$' || n == '`' || n == '\\' {
                    out.push(n);
                    it.next();
                    continue;
                }
            }
        }
        out.push(c);
    }
    out
}

/// The status a fatal expansion error (`${x:?}`, an unbound variable under `set -u`) exits
/// with: bash's main shell exits 127, a subshell 1.
fn expansion_error_status(sh: &Shell) -> i32 {
    if sh.bashpid == sh.pid {
        127
    } else {
        1
    }
}

/// A variable's attributes as `${v@a}` lists them (bash's order: a A i n r x).
fn attr_flags(sh: &Shell, name: &str) -> String {
    let Some(v) = sh.vars.get(name) else {
        return String::new();
    };
    let mut f = String::new();
    match v.value {
        Value::Arr(_) => f.push('a'),
        Value::Assoc(_) => f.push('A'),
        Value::Str(_) => {}
    }
    for (on, c) in [
        (v.integer, 'i'),
        (v.nameref, 'n'),
        (v.readonly, 'r'),
        (v.exported, 'x'),
    ] {
        if on {
            f.push(c);
        }
    }
    f
}

/// A value quoted as `${v@Q}` and `${v@A}` print it.
fn quote_value(s: &str) -> String {
    let mut unbounded = usize::MAX;
    quote_value_bounded(s, &mut unbounded).unwrap_or_default()
}

/// [`quote_value`] built one [`CHUNK_BYTES`] piece at a time: `None` when the quoted text
/// would hold more than `room` bytes (which it then reduces by what it used) or the
/// command's deadline passed (the fuzz hour run, seed 20261201, case 16556: `n+="${n@Q}"`
/// in a loop quoted a 12 MiB value into 48 MiB in one step, 200 ms of CPU past a 200 ms
/// deadline).
fn quote_value_bounded(s: &str, room: &mut usize) -> Option<String> {
    let pieces = || {
        let mut rest = s;
        std::iter::from_fn(move || {
            if rest.is_empty() {
                return None;
            }
            let mut end = rest.len().min(CHUNK_BYTES);
            while !rest.is_char_boundary(end) {
                end += 1;
            }
            let (piece, tail) = rest.split_at(end);
            rest = tail;
            Some(piece)
        })
    };
    let big = s.len() >= CHUNK_BYTES;
    let mut control = false;
    for piece in pieces() {
        if piece.chars().any(|c| c.is_control()) {
            control = true;
            break;
        }
        if big && crate::shell::stop_due() {
            return None;
        }
    }
    let mut out = String::from(if control { "$'" } else { "'" });
    for piece in pieces() {
        if control {
            crate::utils::ansi_quote_into(&mut out, piece);
        } else {
            for (i, part) in piece.split('\'').enumerate() {
                if i > 0 {
                    out.push_str("'\\''");
                }
                out.push_str(part);
            }
        }
        if out.len() > *room || (big && crate::shell::stop_due()) {
            return None;
        }
    }
    out.push('\'');
    *room = room.checked_sub(out.len())?;
    Some(out)
}

/// `${v@P}`: the prompt escapes that do not depend on a terminal or history.
fn prompt_expand(s: &str, user: &str, host: &str, cwd: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('$') => out.push(if user == "root" { '#' } else { '$' }),
            Some('u') => out.push_str(user),
            Some('h') => out.push_str(host.split('.').next().unwrap_or(host)),
            Some('H') => out.push_str(host),
            Some('w') => out.push_str(cwd),
            Some('W') => out.push_str(
                cwd.rsplit('/')
                    .next()
                    .filter(|b| !b.is_empty())
                    .unwrap_or("/"),
            ),
            Some('s') => out.push_str("bash"),
            Some('n') => out.push('\n'),
            Some('\\') => out.push('\\'),
            Some('[') | Some(']') => {}
            Some(o) => {
                out.push('\\');
                out.push(o);
            }
            None => out.push('\\'),
        }
    }
    out
}
