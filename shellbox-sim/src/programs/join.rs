//! `join` (GNU coreutils 9.1): joins the lines of two sorted files on a field: `-1 F`,
//! `-2 F`, `-j F`, `-t CHAR`, `-a 1|2`, `-v 1|2`, `-e STRING`, `-o FORMAT` (`0`, `F.N`,
//! `auto`), `-i`, `--header`, `-z`, `--check-order`, `--nocheck-order`. Fields are
//! separated by runs of blanks (leading blanks ignored) unless `-t`; keys compare
//! bytewise (the C.UTF-8 order). Input out of order is reported once per file and ends
//! with status 1, as GNU does. One look at the clock per line.

use super::opts::{Arg, Parser};
use super::Ctx;
use crate::shell::R;

/// One output field of `-o`: the join field, or field `n` (0-based) of file `f`.
#[derive(Clone, Copy)]
enum Out {
    Key,
    Field(usize, usize),
}

/// One input: its bytes and where each line is (one allocation for a million lines, so
/// it is made and freed in one cheap step).
struct Input {
    name: String,
    data: Vec<u8>,
    lines: Vec<(usize, usize)>,
}

impl Input {
    fn line(&self, i: usize) -> &[u8] {
        let (a, b) = self.lines[i];
        &self.data[a..b]
    }
}

pub(super) fn main(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new(
        "join",
        args,
        &[
            "ignore-case",
            "check-order",
            "nocheck-order",
            "header",
            "zero-terminated",
        ],
    );
    let (mut f1, mut f2) = (0usize, 0usize);
    let mut sep: Option<u8> = None;
    let mut unpaired = [false, false];
    let mut only_unpaired = false;
    let mut empty: Option<Vec<u8>> = None;
    let mut format: Option<String> = None;
    let (mut ignore_case, mut header, mut check) = (false, false, None::<bool>);
    let mut term = b'\n';
    let mut files = Vec::new();
    let usage = |cx: &mut Ctx<'_, '_>, msg: String| -> R<i32> {
        cx.err_line(&format!(
            "join: {msg}\nTry 'join --help' for more information."
        ));
        Ok(1)
    };
    loop {
        let a = match p.next_in(cx)? {
            Ok(Some(a)) => a,
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, 1),
        };
        let field = |p: &mut Parser| -> Result<usize, String> {
            let v = p.value().map_err(|u| u.0)?;
            match v.parse::<usize>() {
                Ok(n) if n > 0 => Ok(n - 1),
                _ => Err(format!("invalid field number: '{v}'")),
            }
        };
        match a {
            Arg::Short('1') => match field(&mut p) {
                Ok(n) => f1 = n,
                Err(m) => return usage(cx, m),
            },
            Arg::Short('2') => match field(&mut p) {
                Ok(n) => f2 = n,
                Err(m) => return usage(cx, m),
            },
            Arg::Short('j') => match field(&mut p) {
                Ok(n) => {
                    f1 = n;
                    f2 = n;
                }
                Err(m) => return usage(cx, m),
            },
            Arg::Short('t') => match p.value() {
                Ok(v) if v.len() == 1 => sep = Some(v.as_bytes()[0]),
                Ok(v) if v.is_empty() => sep = Some(b'\n'),
                Ok(v) => return usage(cx, format!("multi-character tab '{v}'")),
                Err(u) => return super::usage(cx, u, 1),
            },
            Arg::Short(c @ ('a' | 'v')) => match p.value() {
                Ok(v) if v == "1" || v == "2" => {
                    unpaired[usize::from(v == "2")] = true;
                    if c == 'v' {
                        only_unpaired = true;
                    }
                }
                Ok(v) => return usage(cx, format!("invalid file number: '{v}'")),
                Err(u) => return super::usage(cx, u, 1),
            },
            Arg::Short('e') => match p.value() {
                Ok(v) => empty = Some(v.into_bytes()),
                Err(u) => return super::usage(cx, u, 1),
            },
            Arg::Short('o') => match p.value() {
                Ok(v) => {
                    format = Some(match format {
                        Some(f) => format!("{f},{v}"),
                        None => v,
                    })
                }
                Err(u) => return super::usage(cx, u, 1),
            },
            Arg::Short('i') | Arg::Long("ignore-case") => ignore_case = true,
            Arg::Short('z') | Arg::Long("zero-terminated") => term = b'\0',
            Arg::Long("header") => header = true,
            Arg::Long("check-order") => check = Some(true),
            Arg::Long("nocheck-order") => check = Some(false),
            Arg::Short(c) => return super::usage(cx, p.invalid_short(c), 1),
            Arg::Long(l) => return cx.unsupported_status(&format!("join --{l}"), 1),
            Arg::Operand(o) => files.push(o),
        }
    }
    if files.len() < 2 {
        let msg = match files.first() {
            None => "missing operand".to_string(),
            Some(f) => format!("missing operand after '{f}'"),
        };
        return usage(cx, msg);
    }
    if files.len() > 2 {
        return usage(cx, format!("extra operand '{}'", files[2]));
    }
    let mut inputs = Vec::new();
    for f in &files {
        let data = match cx.read_input(f) {
            Ok(d) => d,
            Err(e) => {
                cx.err_line(&format!("join: {f}: {e}"));
                return Ok(1);
            }
        };
        let mut lines = Vec::new();
        let mut start = 0;
        for (k, piece) in data.split(|b| *b == term).enumerate() {
            if k % 1024 == 1023 && crate::shell::stop_due() {
                return Err(cx.interrupted());
            }
            lines.push((start, start + piece.len()));
            start += piece.len() + 1;
        }
        if data.is_empty() || data.last() == Some(&term) {
            lines.pop();
        }
        cx.hold(lines.len() * 16)?;
        inputs.push(Input {
            name: f.clone(),
            data,
            lines,
        });
    }
    let keyf = [f1, f2];
    let key = |inputs: &[Input], w: usize, i: usize| -> Vec<u8> {
        let k = split_fields(inputs[w].line(i), sep)
            .get(keyf[w])
            .map(|k| k.to_vec())
            .unwrap_or_default();
        if ignore_case {
            k.to_ascii_lowercase()
        } else {
            k
        }
    };
    let osep = [sep.filter(|s| *s != b'\n').unwrap_or(b' ')];
    // -o auto: the first lines' field counts
    let spec: Option<Vec<Out>> = match format.as_deref() {
        None => None,
        Some("auto") => {
            let mut v = vec![Out::Key];
            for w in 0..2 {
                let n = if inputs[w].lines.is_empty() {
                    0
                } else {
                    split_fields(inputs[w].line(0), sep).len()
                };
                v.extend((0..n).filter(|&i| i != keyf[w]).map(|i| Out::Field(w, i)));
            }
            Some(v)
        }
        Some(f) => {
            let mut v = Vec::new();
            for item in f.split([',', ' ']).filter(|s| !s.is_empty()) {
                match item {
                    "0" => v.push(Out::Key),
                    _ => match item.split_once('.') {
                        Some((a @ ("1" | "2"), n)) => match n.parse::<usize>() {
                            Ok(n) if n > 0 => v.push(Out::Field(usize::from(a == "2"), n - 1)),
                            _ => return usage(cx, format!("invalid field number: '{n}'")),
                        },
                        _ => return usage(cx, format!("invalid field specifier: '{item}'")),
                    },
                }
            }
            Some(v)
        }
    };
    let empty = empty.unwrap_or_default();
    let mut out = Vec::new();
    // one output line: `a` from file 1 and/or `b` from file 2
    let emit = |out: &mut Vec<u8>, inputs: &[Input], a: Option<usize>, b: Option<usize>| {
        let mut parts: Vec<&[u8]> = Vec::new();
        let fields = |w: usize, i: Option<usize>| i.map(|i| split_fields(inputs[w].line(i), sep));
        let (fa, fb) = (fields(0, a), fields(1, b));
        let keyval: &[u8] = fa
            .as_ref()
            .and_then(|f| f.get(f1))
            .or_else(|| fb.as_ref().and_then(|f| f.get(f2)))
            .map_or(&empty[..], |k| k);
        match &spec {
            Some(spec) => {
                for o in spec {
                    parts.push(match o {
                        Out::Key => keyval,
                        Out::Field(w, n) => {
                            let f = if *w == 0 { &fa } else { &fb };
                            f.as_ref().and_then(|f| f.get(*n)).map_or(&empty[..], |x| x)
                        }
                    });
                }
            }
            None => {
                parts.push(keyval);
                for (w, f) in [(0, &fa), (1, &fb)] {
                    if let Some(f) = f {
                        for (i, x) in f.iter().enumerate() {
                            if i != keyf[w] {
                                parts.push(x);
                            }
                        }
                    }
                }
            }
        }
        out.extend_from_slice(&parts.join(&osep[..]));
        out.push(term);
    };
    let (n1, n2) = (inputs[0].lines.len(), inputs[1].lines.len());
    let (mut i, mut j) = (0usize, 0usize);
    if header && n1 > 0 && n2 > 0 {
        emit(&mut out, &inputs, Some(0), Some(0));
        i = 1;
        j = 1;
    } else if header {
        if n1 > 0 && unpaired[0] {
            emit(&mut out, &inputs, Some(0), None);
        }
        if n2 > 0 && unpaired[1] {
            emit(&mut out, &inputs, None, Some(0));
        }
        i = n1.min(1);
        j = n2.min(1);
    }
    let check_order = check != Some(false);
    let mut disorder = [false, false];
    let mut status = 0;
    let mut lines_seen = 0usize;
    let mut out_charged = 0usize;
    // checks that line `k` of file `w` does not sort before the line above it
    let mut ordered = |cx: &mut Ctx<'_, '_>, inputs: &[Input], w: usize, k: usize| -> bool {
        let first = if header { 1 } else { 0 };
        if !check_order || disorder[w] || k <= first || k >= inputs[w].lines.len() {
            return true;
        }
        if key(inputs, w, k) < key(inputs, w, k - 1) {
            disorder[w] = true;
            cx.err_line(&format!(
                "join: {}:{}: is not sorted: {}",
                inputs[w].name,
                k + 1,
                String::from_utf8_lossy(inputs[w].line(k))
            ));
            return check != Some(true);
        }
        true
    };
    while i < n1 && j < n2 {
        lines_seen += 1;
        if crate::shell::stop_due() {
            return Err(cx.interrupted());
        }
        if lines_seen.is_multiple_of(4096) {
            // the output's growth since the last charge, not all of it again
            cx.hold(out.len().saturating_sub(out_charged))?;
            out_charged = out.len();
            cx.tick()?;
        }
        let (ka, kb) = (key(&inputs, 0, i), key(&inputs, 1, j));
        match ka.cmp(&kb) {
            std::cmp::Ordering::Less => {
                if unpaired[0] {
                    emit(&mut out, &inputs, Some(i), None);
                }
                i += 1;
                if !ordered(cx, &inputs, 0, i) {
                    status = 1;
                    break;
                }
            }
            std::cmp::Ordering::Greater => {
                if unpaired[1] {
                    emit(&mut out, &inputs, None, Some(j));
                }
                j += 1;
                if !ordered(cx, &inputs, 1, j) {
                    status = 1;
                    break;
                }
            }
            std::cmp::Ordering::Equal => {
                let mut i2 = i + 1;
                while i2 < n1 && key(&inputs, 0, i2) == ka {
                    i2 += 1;
                }
                let mut j2 = j + 1;
                while j2 < n2 && key(&inputs, 1, j2) == kb {
                    j2 += 1;
                }
                // the lines read ahead to end the groups are checked before the
                // groups are joined, as GNU reads them
                let ok1 = ordered(cx, &inputs, 0, i2);
                let ok2 = ordered(cx, &inputs, 1, j2);
                if !ok1 || !ok2 {
                    status = 1;
                    break;
                }
                if !only_unpaired {
                    for a in i..i2 {
                        for b in j..j2 {
                            emit(&mut out, &inputs, Some(a), Some(b));
                        }
                        if crate::shell::stop_due() {
                            return Err(cx.interrupted());
                        }
                    }
                }
                i = i2;
                j = j2;
            }
        }
    }
    if status == 0 {
        while i < n1 {
            if unpaired[0] {
                emit(&mut out, &inputs, Some(i), None);
            }
            i += 1;
            if !ordered(cx, &inputs, 0, i) {
                status = 1;
                break;
            }
        }
        while j < n2 && status == 0 {
            if unpaired[1] {
                emit(&mut out, &inputs, None, Some(j));
            }
            j += 1;
            if !ordered(cx, &inputs, 1, j) {
                status = 1;
                break;
            }
        }
    }
    cx.out(&out)?;
    if disorder.iter().any(|d| *d) {
        if status == 0 {
            cx.err_line("join: input is not in sorted order");
        }
        status = 1;
    }
    Ok(status)
}

/// The fields of `line`: split at `sep`, or at runs of blanks with leading blanks skipped.
fn split_fields(line: &[u8], sep: Option<u8>) -> Vec<&[u8]> {
    match sep {
        Some(b'\n') => vec![line],
        Some(s) => line.split(|b| *b == s).collect(),
        None => line
            .split(|b| *b == b' ' || *b == b'\t')
            .filter(|f| !f.is_empty())
            .collect(),
    }
}
