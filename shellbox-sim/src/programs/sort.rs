//! `sort` (GNU coreutils 9.1, in the C.UTF-8 locale: bytes compare as code points):
//! `-b -d -f -g -h -i -M -n -r -V` (globally and per key), `-k POS1[,POS2]` with
//! `F[.C][OPTS]`, `-t SEP`, `-s`, `-u`, `-c`/`-C`, `-o FILE`, `-z`, `-m` (sorted anyway,
//! which gives the same output), and `-S`/`-T`/`--parallel` accepted and ignored (they
//! change no output). `-R` and `--random-source` fail visibly (status 2). Usage errors,
//! unreadable files and a bad key exit 2, as GNU's do.

use std::cmp::Ordering;

use super::opts::{Arg, Parser};
use super::Ctx;
use crate::shell::R;

/// GNU sort's usage and error status.
const TROUBLE: i32 = 2;

#[derive(Clone, Copy, Default, PartialEq, Eq)]
enum Kind {
    #[default]
    Text,
    Numeric,
    General,
    Human,
    Month,
    Version,
}

#[derive(Clone, Copy, Default)]
struct Order {
    kind: Kind,
    reverse: bool,
    blanks: bool,
    dictionary: bool,
    fold: bool,
    nonprinting: bool,
}

impl Order {
    fn any(&self) -> bool {
        self.kind != Kind::Text
            || self.reverse
            || self.blanks
            || self.dictionary
            || self.fold
            || self.nonprinting
    }
    /// Applies one ordering letter; false when it is not one.
    fn letter(&mut self, c: char) -> bool {
        match c {
            'b' => self.blanks = true,
            'd' => self.dictionary = true,
            'f' => self.fold = true,
            'g' => self.kind = Kind::General,
            'h' => self.kind = Kind::Human,
            'i' => self.nonprinting = true,
            'M' => self.kind = Kind::Month,
            'n' => self.kind = Kind::Numeric,
            'r' => self.reverse = true,
            'V' => self.kind = Kind::Version,
            _ => return false,
        }
        true
    }
}

#[derive(Clone, Copy)]
struct Key {
    start_field: usize,
    start_char: usize,
    end_field: Option<usize>,
    end_char: usize,
    order: Order,
    /// `b` given on the start (or on the key without a position of its own).
    start_blanks: bool,
    end_blanks: bool,
}

const LONGS: &[&str] = &[
    "ignore-leading-blanks",
    "dictionary-order",
    "ignore-case",
    "general-numeric-sort",
    "human-numeric-sort",
    "ignore-nonprinting",
    "month-sort",
    "numeric-sort",
    "random-sort",
    "random-source",
    "reverse",
    "sort",
    "version-sort",
    "check",
    "key",
    "merge",
    "output",
    "stable",
    "buffer-size",
    "field-separator",
    "temporary-directory",
    "unique",
    "zero-terminated",
    "parallel",
    "debug",
    "files0-from",
    "compress-program",
    "batch-size",
    "help",
    "version",
];

fn parse_key(spec: &str, global: Order) -> Result<Key, String> {
    let bad = |why: &str| format!("sort: {why}: invalid field specification '{spec}'");
    let (a, b) = match spec.split_once(',') {
        Some((a, b)) => (a, Some(b)),
        None => (spec, None),
    };
    fn pos(s: &str) -> (String, Option<String>, String) {
        let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let f = s[..digits_end].to_string();
        let rest = &s[digits_end..];
        if let Some(r) = rest.strip_prefix('.') {
            let e = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
            (f, Some(r[..e].to_string()), r[e..].to_string())
        } else {
            (f, None, rest.to_string())
        }
    }
    let mut order = Order::default();
    let (f1, c1, o1) = pos(a);
    let start_field: usize = f1
        .parse()
        .map_err(|_| bad("invalid number at field start"))?;
    if start_field == 0 {
        return Err(format!(
            "sort: field number is zero: invalid field specification '{spec}'"
        ));
    }
    let start_char = match c1 {
        Some(c) => {
            let n: usize = c.parse().map_err(|_| bad("invalid number after '.'"))?;
            if n == 0 {
                return Err(format!(
                    "sort: character offset is zero: invalid field specification '{spec}'"
                ));
            }
            n
        }
        None => 1,
    };
    let mut start_blanks = false;
    for c in o1.chars() {
        if c == 'b' {
            start_blanks = true;
        }
        if !order.letter(c) {
            return Err(format!(
                "sort: stray character in field spec: invalid field specification '{spec}'"
            ));
        }
    }
    let (mut end_field, mut end_char, mut end_blanks) = (None, 0, false);
    if let Some(b) = b {
        let (f2, c2, o2) = pos(b);
        let f: usize = f2.parse().map_err(|_| bad("invalid number after ','"))?;
        if f == 0 {
            return Err(format!(
                "sort: field number is zero: invalid field specification '{spec}'"
            ));
        }
        end_field = Some(f);
        end_char = match c2 {
            Some(c) => c.parse().map_err(|_| bad("invalid number after '.'"))?,
            None => 0,
        };
        for c in o2.chars() {
            if c == 'b' {
                end_blanks = true;
            }
            if !order.letter(c) {
                return Err(format!(
                    "sort: stray character in field spec: invalid field specification '{spec}'"
                ));
            }
        }
    }
    if !order.any() {
        order = global;
        start_blanks = global.blanks;
        end_blanks = global.blanks;
    }
    Ok(Key {
        start_field,
        start_char,
        end_field,
        end_char,
        order,
        start_blanks,
        end_blanks,
    })
}

fn blank(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// The byte offsets where each field starts and ends.
fn fields(line: &[u8], sep: Option<u8>) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    match sep {
        Some(t) => {
            let mut s = 0;
            for (i, b) in line.iter().enumerate() {
                if *b == t {
                    out.push((s, i));
                    s = i + 1;
                }
            }
            out.push((s, line.len()));
        }
        None => {
            let mut i = 0;
            while i < line.len() {
                let s = i;
                while i < line.len() && blank(line[i]) {
                    i += 1;
                }
                while i < line.len() && !blank(line[i]) {
                    i += 1;
                }
                out.push((s, i));
            }
        }
    }
    out
}

fn key_slice<'a>(line: &'a [u8], k: &Key, sep: Option<u8>) -> &'a [u8] {
    let f = fields(line, sep);
    let start = match f.get(k.start_field - 1) {
        Some(&(s, e)) => {
            let mut s = s;
            if k.start_blanks {
                while s < e && blank(line[s]) {
                    s += 1;
                }
            }
            (s + k.start_char - 1).min(e)
        }
        None => line.len(),
    };
    let end = match k.end_field {
        None => line.len(),
        Some(ef) => match f.get(ef - 1) {
            Some(&(s, e)) => {
                if k.end_char == 0 {
                    e
                } else {
                    let mut s = s;
                    if k.end_blanks {
                        while s < e && blank(line[s]) {
                            s += 1;
                        }
                    }
                    (s + k.end_char).min(e)
                }
            }
            None => line.len(),
        },
    };
    if end <= start {
        &[]
    } else {
        &line[start..end]
    }
}

fn skip_blanks(s: &[u8]) -> &[u8] {
    let i = s
        .iter()
        .position(|b| !(blank(*b) || *b == b'\n'))
        .unwrap_or(s.len());
    &s[i..]
}

/// GNU's -n: leading blanks, an optional '-', digits, an optional '.' and digits.
fn numeric_parts(s: &[u8]) -> (bool, &[u8], &[u8]) {
    let s = skip_blanks(s);
    let (neg, s) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        _ => (false, s),
    };
    let int_end = s
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(s.len());
    let int = &s[..int_end];
    let frac = if s.get(int_end) == Some(&b'.') {
        let r = &s[int_end + 1..];
        let e = r
            .iter()
            .position(|b| !b.is_ascii_digit())
            .unwrap_or(r.len());
        &r[..e]
    } else {
        &[][..]
    };
    let int_start = int.iter().position(|b| *b != b'0').unwrap_or(int.len());
    let frac_end = frac.iter().rposition(|b| *b != b'0').map_or(0, |p| p + 1);
    (neg, &int[int_start..], &frac[..frac_end])
}

fn cmp_magnitude(a: (&[u8], &[u8]), b: (&[u8], &[u8])) -> Ordering {
    a.0.len()
        .cmp(&b.0.len())
        .then_with(|| a.0.cmp(b.0))
        .then_with(|| a.1.cmp(b.1))
}

fn numeric(a: &[u8], b: &[u8]) -> Ordering {
    let (na, ia, fa) = numeric_parts(a);
    let (nb, ib, fb) = numeric_parts(b);
    let za = ia.is_empty() && fa.is_empty();
    let zb = ib.is_empty() && fb.is_empty();
    let na = na && !za;
    let nb = nb && !zb;
    match (na, nb) {
        (false, true) => Ordering::Greater,
        (true, false) => Ordering::Less,
        (false, false) => cmp_magnitude((ia, fa), (ib, fb)),
        (true, true) => cmp_magnitude((ib, fb), (ia, fa)),
    }
}

fn human(a: &[u8], b: &[u8]) -> Ordering {
    fn suffix(s: &[u8]) -> (bool, usize) {
        let s = skip_blanks(s);
        let neg = s.first() == Some(&b'-');
        let s = if neg { &s[1..] } else { s };
        let e = s
            .iter()
            .position(|b| !(b.is_ascii_digit() || *b == b'.'))
            .unwrap_or(s.len());
        let power = match s.get(e) {
            Some(b'k' | b'K') => 1,
            Some(b'M') => 2,
            Some(b'G') => 3,
            Some(b'T') => 4,
            Some(b'P') => 5,
            Some(b'E') => 6,
            Some(b'Z') => 7,
            Some(b'Y') => 8,
            _ => 0,
        };
        (neg, power)
    }
    let (na, pa) = suffix(a);
    let (nb, pb) = suffix(b);
    if na == nb && pa != pb {
        let o = pa.cmp(&pb);
        return if na { o.reverse() } else { o };
    }
    numeric(a, b)
}

fn general(a: &[u8], b: &[u8]) -> Ordering {
    fn val(s: &[u8]) -> Option<f64> {
        let s = String::from_utf8_lossy(skip_blanks(s)).into_owned();
        // the longest prefix strtod accepts
        let mut best = None;
        for end in (1..=s.len()).rev() {
            if !s.is_char_boundary(end) {
                continue;
            }
            let p = &s[..end];
            if p.ends_with(|c: char| c.is_ascii_alphabetic())
                && !p.to_ascii_lowercase().ends_with("inf")
                && !p.to_ascii_lowercase().ends_with("infinity")
                && !p.to_ascii_lowercase().ends_with("nan")
            {
                continue;
            }
            if let Ok(v) = p.parse::<f64>() {
                best = Some(v);
                break;
            }
        }
        best
    }
    match (val(a), val(b)) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(x), Some(y)) => match (x.is_nan(), y.is_nan()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Less,
            (false, true) => Ordering::Greater,
            _ => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
        },
    }
}

fn month(s: &[u8]) -> usize {
    const M: [&[u8]; 12] = [
        b"JAN", b"FEB", b"MAR", b"APR", b"MAY", b"JUN", b"JUL", b"AUG", b"SEP", b"OCT", b"NOV",
        b"DEC",
    ];
    let s = skip_blanks(s);
    if s.len() < 3 {
        return 0;
    }
    let up = s[..3].to_ascii_uppercase();
    M.iter()
        .position(|m| *m == up.as_slice())
        .map_or(0, |p| p + 1)
}

/// coreutils' filevercmp.
fn version(a: &[u8], b: &[u8]) -> Ordering {
    fn suffix_start(s: &[u8]) -> usize {
        // a file suffix: (\.[A-Za-z~][A-Za-z0-9~]*)*$
        let mut i = s.len();
        let mut start = s.len();
        while i > 0 {
            let mut j = i;
            while j > 0 && (s[j - 1].is_ascii_alphanumeric() || s[j - 1] == b'~') {
                j -= 1;
            }
            if j > 0 && s[j - 1] == b'.' && j < i && (s[j].is_ascii_alphabetic() || s[j] == b'~') {
                start = j - 1;
                i = j - 1;
            } else {
                break;
            }
        }
        start
    }
    fn order(c: Option<u8>) -> i32 {
        match c {
            None => 0,
            Some(c) if c.is_ascii_digit() => 0,
            Some(c) if c.is_ascii_alphabetic() => c as i32,
            Some(b'~') => -1,
            Some(c) => c as i32 + 256,
        }
    }
    fn verrevcmp(a: &[u8], b: &[u8]) -> Ordering {
        let (mut i, mut j) = (0, 0);
        while i < a.len() || j < b.len() {
            let mut first_diff = 0;
            while (i < a.len() && !a[i].is_ascii_digit()) || (j < b.len() && !b[j].is_ascii_digit())
            {
                let ac = order(a.get(i).copied());
                let bc = order(b.get(j).copied());
                if ac != bc {
                    return ac.cmp(&bc);
                }
                i += 1;
                j += 1;
            }
            while a.get(i) == Some(&b'0') {
                i += 1;
            }
            while b.get(j) == Some(&b'0') {
                j += 1;
            }
            while a.get(i).is_some_and(u8::is_ascii_digit)
                && b.get(j).is_some_and(u8::is_ascii_digit)
            {
                if first_diff == 0 {
                    first_diff = a[i] as i32 - b[j] as i32;
                }
                i += 1;
                j += 1;
            }
            if a.get(i).is_some_and(u8::is_ascii_digit) {
                return Ordering::Greater;
            }
            if b.get(j).is_some_and(u8::is_ascii_digit) {
                return Ordering::Less;
            }
            if first_diff != 0 {
                return first_diff.cmp(&0);
            }
        }
        Ordering::Equal
    }
    if a == b {
        return Ordering::Equal;
    }
    match (a.is_empty(), b.is_empty()) {
        (true, _) => return Ordering::Less,
        (_, true) => return Ordering::Greater,
        _ => {}
    }
    for special in [&b"."[..], &b".."[..]] {
        if a == special {
            return Ordering::Less;
        }
        if b == special {
            return Ordering::Greater;
        }
    }
    match (a[0] == b'.', b[0] == b'.') {
        (true, false) => return Ordering::Less,
        (false, true) => return Ordering::Greater,
        (true, true) => return version(&a[1..], &b[1..]),
        _ => {}
    }
    let (sa, sb) = (suffix_start(a), suffix_start(b));
    let r = if sa == sb && a[..sa] == b[..sb] {
        Ordering::Equal
    } else {
        verrevcmp(&a[..sa], &b[..sb])
    };
    if r == Ordering::Equal {
        verrevcmp(a, b)
    } else {
        r
    }
}

fn compare_with(a: &[u8], b: &[u8], o: &Order) -> Ordering {
    let (a, b) = if o.blanks && o.kind == Kind::Text {
        (skip_blanks(a), skip_blanks(b))
    } else {
        (a, b)
    };
    let r = match o.kind {
        Kind::Numeric => numeric(a, b),
        Kind::General => general(a, b),
        Kind::Human => human(a, b),
        Kind::Month => month(a).cmp(&month(b)),
        Kind::Version => version(a, b),
        Kind::Text if o.dictionary || o.fold || o.nonprinting => {
            let keep = |c: &&u8| {
                (!o.dictionary || c.is_ascii_alphanumeric() || blank(**c) || **c >= 0x80)
                    && (!o.nonprinting || (0x20..0x7f).contains(*c) || **c >= 0x80)
            };
            let map = |c: &u8| if o.fold { c.to_ascii_uppercase() } else { *c };
            a.iter()
                .filter(keep)
                .map(map)
                .cmp(b.iter().filter(keep).map(map))
        }
        Kind::Text => a.cmp(b),
    };
    if o.reverse {
        r.reverse()
    } else {
        r
    }
}

struct Spec {
    keys: Vec<Key>,
    global: Order,
    sep: Option<u8>,
    stable: bool,
    unique: bool,
}

impl Spec {
    fn keys_cmp(&self, a: &[u8], b: &[u8]) -> Ordering {
        if self.keys.is_empty() {
            return compare_with(a, b, &self.global);
        }
        for k in &self.keys {
            let r = compare_with(
                key_slice(a, k, self.sep),
                key_slice(b, k, self.sep),
                &k.order,
            );
            if r != Ordering::Equal {
                return r;
            }
        }
        Ordering::Equal
    }
    fn cmp(&self, a: &[u8], b: &[u8]) -> Ordering {
        let r = self.keys_cmp(a, b);
        if r != Ordering::Equal || self.stable || self.unique {
            return r;
        }
        // the last resort: the whole lines, bytewise (reversed under a global -r)
        let r = a.cmp(b);
        if self.global.reverse {
            r.reverse()
        } else {
            r
        }
    }
}

pub(super) fn main(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new("sort", args, LONGS);
    let mut global = Order::default();
    let mut key_specs = Vec::new();
    let mut sep = None;
    let (mut stable, mut unique, mut zero) = (false, false, false);
    let mut check: Option<bool> = None;
    let mut output: Option<String> = None;
    let mut files = Vec::new();
    macro_rules! value {
        () => {
            match p.value() {
                Ok(v) => v,
                Err(u) => return super::usage(cx, u, TROUBLE),
            }
        };
    }
    loop {
        let arg = match p.next_in(cx)? {
            Ok(Some(a)) => a,
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, TROUBLE),
        };
        match arg {
            Arg::Short(c @ ('b' | 'd' | 'f' | 'g' | 'h' | 'i' | 'M' | 'n' | 'r' | 'V')) => {
                global.letter(c);
            }
            Arg::Long(
                l @ ("ignore-leading-blanks"
                | "dictionary-order"
                | "ignore-case"
                | "general-numeric-sort"
                | "human-numeric-sort"
                | "ignore-nonprinting"
                | "month-sort"
                | "numeric-sort"
                | "reverse"
                | "version-sort"),
            ) => {
                let c = match l {
                    "ignore-leading-blanks" => 'b',
                    "dictionary-order" => 'd',
                    "ignore-case" => 'f',
                    "general-numeric-sort" => 'g',
                    "human-numeric-sort" => 'h',
                    "ignore-nonprinting" => 'i',
                    "month-sort" => 'M',
                    "numeric-sort" => 'n',
                    "reverse" => 'r',
                    _ => 'V',
                };
                global.letter(c);
            }
            Arg::Long("sort") => {
                let v = value!();
                let c = match v.as_str() {
                    "general-numeric" => 'g',
                    "human-numeric" => 'h',
                    "month" => 'M',
                    "numeric" => 'n',
                    "version" => 'V',
                    _ => return cx.unsupported_status(&format!("sort --sort={v}"), TROUBLE),
                };
                global.letter(c);
            }
            Arg::Short('k') | Arg::Long("key") => key_specs.push(value!()),
            Arg::Short('t') | Arg::Long("field-separator") => {
                let v = value!();
                let b = v.as_bytes();
                if b.len() != 1 {
                    if v == "\\0" {
                        sep = Some(0);
                        continue;
                    }
                    let msg = if b.is_empty() {
                        "sort: empty tab".to_string()
                    } else {
                        format!("sort: multi-character tab '{v}'")
                    };
                    cx.err_line(&msg);
                    return Ok(TROUBLE);
                }
                sep = Some(b[0]);
            }
            Arg::Short('s') | Arg::Long("stable") => stable = true,
            Arg::Short('u') | Arg::Long("unique") => unique = true,
            Arg::Short('z') | Arg::Long("zero-terminated") => zero = true,
            Arg::Short('c') => check = Some(true),
            Arg::Short('C') => check = Some(false),
            Arg::Long("check") => {
                check = Some(!matches!(
                    p.optional_value().as_deref(),
                    Some("quiet" | "silent")
                ))
            }
            Arg::Short('o') | Arg::Long("output") => output = Some(value!()),
            Arg::Short('m') | Arg::Long("merge") => {}
            Arg::Short('S')
            | Arg::Long("buffer-size")
            | Arg::Short('T')
            | Arg::Long("temporary-directory")
            | Arg::Long("parallel")
            | Arg::Long("batch-size") => {
                let _ = value!();
            }
            Arg::Short('R') | Arg::Long("random-sort") | Arg::Long("random-source") => {
                return cx.unsupported_status("sort random order (-R)", TROUBLE)
            }
            Arg::Long(l) => return cx.unsupported_status(&format!("sort option --{l}"), TROUBLE),
            Arg::Short(c) => return super::usage(cx, p.invalid_short(c), TROUBLE),
            Arg::Operand(o) => files.push(o),
        }
    }
    let mut keys = Vec::new();
    for k in &key_specs {
        match parse_key(k, global) {
            Ok(k) => keys.push(k),
            Err(m) => {
                cx.err_line(&m);
                return Ok(TROUBLE);
            }
        }
    }
    let spec = Spec {
        keys,
        global,
        sep,
        stable,
        unique,
    };
    if files.is_empty() {
        files.push("-".into());
    }
    if check.is_some() && files.len() > 1 {
        cx.err_line(&format!(
            "sort: extra operand '{}' not allowed with -c\nTry 'sort --help' for more information.",
            files[1]
        ));
        return Ok(TROUBLE);
    }
    let term = if zero { 0 } else { b'\n' };
    let mut data = Vec::new();
    for f in &files {
        cx.check_time()?;
        match cx.read_input(f) {
            Ok(d) => {
                data.extend_from_slice(&d);
                if !d.is_empty() && !d.ends_with(&[term]) {
                    data.push(term);
                }
            }
            Err(e) => {
                cx.err_line(&format!("sort: cannot read: {f}: {e}"));
                return Ok(TROUBLE);
            }
        }
    }
    cx.hold(data.len())?;
    let body = data.strip_suffix(&[term]).unwrap_or(&data);
    let mut lines: Vec<&[u8]> = if data.is_empty() {
        Vec::new()
    } else {
        body.split(|b| *b == term).collect()
    };
    cx.hold(lines.len() * std::mem::size_of::<&[u8]>())?;
    if let Some(loud) = check {
        for i in 1..lines.len() {
            if i % 1024 == 0 {
                cx.tick()?;
            }
            let o = spec.cmp(lines[i - 1], lines[i]);
            if o == Ordering::Greater || (unique && o == Ordering::Equal) {
                if loud {
                    cx.err_line(&format!(
                        "sort: {}:{}: disorder: {}",
                        files[0],
                        i + 1,
                        String::from_utf8_lossy(lines[i])
                    ));
                }
                return Ok(1);
            }
        }
        return Ok(0);
    }
    // a merge sort in chunks, so the deadline is checked while it sorts
    sort_ticked(cx, &mut lines, &|a, b| spec.cmp(a, b))?;
    if unique {
        lines.dedup_by(|b, a| spec.keys_cmp(a, b) == Ordering::Equal);
    }
    let mut out = Vec::with_capacity(data.len());
    for l in &lines {
        out.extend_from_slice(l);
        out.push(term);
    }
    cx.hold(out.len())?;
    match output {
        Some(path) if path != "-" => {
            if let Err(e) = cx.write_file(&path, out) {
                cx.err_line(&format!("sort: open failed: {path}: {}", e.msg()));
                return Ok(TROUBLE);
            }
        }
        _ => {
            cx.out(&out)?;
        }
    }
    Ok(0)
}

/// Lines [`sort_ticked`] sorts, or merges, between two looks at the clock.
const RUN: usize = 4096;

/// A stable sort that ticks the budgets and looks at the clock: runs of [`RUN`] sorted
/// with the standard library, then merged pairwise, a look at the clock per run sorted and
/// per [`RUN`] lines merged. A tick alone looks at the clock only every 64th time, and
/// one merge of two 100,000-line halves with a key comparison (`-t: -k1,1n`) takes tens
/// of milliseconds: the 5-minute fuzz run (seed 2) saw 145 ms of CPU past a deadline.
fn sort_ticked<'a>(
    cx: &mut Ctx<'_, '_>,
    v: &mut Vec<&'a [u8]>,
    cmp: &dyn Fn(&[u8], &[u8]) -> Ordering,
) -> R<()> {
    for chunk in v.chunks_mut(RUN) {
        cx.tick()?;
        cx.check_time()?;
        chunk.sort_by(|a, b| cmp(a, b));
    }
    let mut width = RUN;
    while width < v.len() {
        let mut merged: Vec<&'a [u8]> = Vec::with_capacity(v.len());
        for pair in v.chunks(width * 2) {
            cx.tick()?;
            let (l, r) = pair.split_at(width.min(pair.len()));
            let (mut i, mut j) = (0, 0);
            while i < l.len() && j < r.len() {
                if (i + j) % RUN == RUN - 1 {
                    cx.check_time()?;
                }
                if cmp(r[j], l[i]) == Ordering::Less {
                    merged.push(r[j]);
                    j += 1;
                } else {
                    merged.push(l[i]);
                    i += 1;
                }
            }
            merged.extend_from_slice(&l[i..]);
            merged.extend_from_slice(&r[j..]);
        }
        *v = merged;
        width *= 2;
    }
    Ok(())
}
