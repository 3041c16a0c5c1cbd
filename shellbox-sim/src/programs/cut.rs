//! `cut` (GNU coreutils 9.1, as Debian 12 ships it: `-c` counts bytes, like `-b`):
//! `-b`/`--bytes`, `-c`/`--characters`, `-f`/`--fields`, `-d`/`--delimiter`,
//! `-s`/`--only-delimited`, `--complement`, `--output-delimiter`, `-z`/`--zero-terminated`,
//! `-n` (ignored, as GNU does).

use super::opts::{Arg, Parser};
use super::Ctx;
use crate::shell::R;

/// GNU's usage status for cut.
const USAGE: i32 = 1;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Bytes,
    Fields,
}

/// Selected 1-based positions as sorted, merged inclusive ranges (`usize::MAX` is open).
type List = Vec<(usize, usize)>;

fn parse_list(text: &str, mode: Mode) -> Result<List, String> {
    let (what, value, range) = match mode {
        Mode::Bytes => (
            "byte/character positions",
            "byte/character position",
            "byte or character range",
        ),
        Mode::Fields => ("fields", "field value", "field range"),
    };
    let mut out: List = Vec::new();
    for item in text.split([',', ' ', '\t']) {
        let num = |s: &str| -> Result<usize, String> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("invalid {value} \u{2018}{s}\u{2019}"));
            }
            match s.parse::<usize>() {
                Ok(0) => Err(format!("{what} are numbered from 1")),
                Ok(n) => Ok(n),
                Err(_) => Err(match mode {
                    Mode::Bytes => {
                        format!("byte/character offset \u{2018}{s}\u{2019} is too large")
                    }
                    Mode::Fields => format!("field number \u{2018}{s}\u{2019} is too large"),
                }),
            }
        };
        if item.is_empty() {
            return Err(format!("{what} are numbered from 1"));
        }
        let dashes = item.matches('-').count();
        let (lo, hi) = match dashes {
            0 => {
                let n = num(item)?;
                (n, n)
            }
            1 => {
                let (a, b) = item.split_once('-').unwrap_or((item, ""));
                match (a.is_empty(), b.is_empty()) {
                    (true, true) => return Err("invalid range with no endpoint: -".into()),
                    (true, false) => (1, num(b)?),
                    (false, true) => (num(a)?, usize::MAX),
                    (false, false) => {
                        let (a, b) = (num(a)?, num(b)?);
                        if a > b {
                            return Err("invalid decreasing range".into());
                        }
                        (a, b)
                    }
                }
            }
            _ => return Err(format!("invalid {range}")),
        };
        out.push((lo, hi));
    }
    out.sort_unstable();
    let mut merged: List = Vec::new();
    for (lo, hi) in out {
        match merged.last_mut() {
            Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
            _ => merged.push((lo, hi)),
        }
    }
    Ok(merged)
}

fn selected(list: &List, n: usize, complement: bool) -> bool {
    list.iter().any(|&(lo, hi)| lo <= n && n <= hi) != complement
}

pub(super) fn main(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new(
        "cut",
        args,
        &[
            "bytes",
            "characters",
            "fields",
            "delimiter",
            "only-delimited",
            "complement",
            "output-delimiter",
            "zero-terminated",
            "help",
            "version",
        ],
    );
    let usage = |cx: &mut Ctx<'_, '_>, msg: &str| {
        cx.err_line(&format!(
            "cut: {msg}\nTry 'cut --help' for more information."
        ));
        Ok(USAGE)
    };
    let mut list: Option<(Mode, String)> = None;
    let mut delim: Option<String> = None;
    let mut only_delimited = false;
    let mut complement = false;
    let mut out_delim: Option<String> = None;
    let mut zero = false;
    let mut files = Vec::new();
    loop {
        let arg = match p.next_in(cx)? {
            Ok(Some(a)) => a,
            Ok(None) => break,
            Err(u) => {
                cx.err_line(&u.0);
                return Ok(USAGE);
            }
        };
        let value = |p: &mut Parser| p.value();
        match arg {
            Arg::Short('b' | 'c' | 'f') | Arg::Long("bytes" | "characters" | "fields") => {
                let v = match value(&mut p) {
                    Ok(v) => v,
                    Err(u) => {
                        cx.err_line(&u.0);
                        return Ok(USAGE);
                    }
                };
                let mode = match arg {
                    Arg::Short('f') | Arg::Long("fields") => Mode::Fields,
                    _ => Mode::Bytes,
                };
                if list.is_some() {
                    return usage(cx, "only one list may be specified");
                }
                list = Some((mode, v));
            }
            Arg::Short('d') | Arg::Long("delimiter") => match value(&mut p) {
                Ok(v) => delim = Some(v),
                Err(u) => {
                    cx.err_line(&u.0);
                    return Ok(USAGE);
                }
            },
            Arg::Long("output-delimiter") => match value(&mut p) {
                Ok(v) => out_delim = Some(v),
                Err(u) => {
                    cx.err_line(&u.0);
                    return Ok(USAGE);
                }
            },
            Arg::Short('s') | Arg::Long("only-delimited") => only_delimited = true,
            Arg::Long("complement") => complement = true,
            Arg::Short('z') | Arg::Long("zero-terminated") => zero = true,
            Arg::Short('n') => {}
            Arg::Long(l) => return cx.unsupported(&format!("cut option --{l}")),
            Arg::Short(c) => {
                cx.err_line(&p.invalid_short(c).0);
                return Ok(USAGE);
            }
            Arg::Operand(o) => files.push(o),
        }
    }
    let Some((mode, text)) = list else {
        return usage(
            cx,
            "you must specify a list of bytes, characters, or fields",
        );
    };
    let list = match parse_list(&text, mode) {
        Ok(l) => l,
        Err(m) => return usage(cx, &m),
    };
    if mode == Mode::Bytes && delim.is_some() {
        return usage(
            cx,
            "an input delimiter may be specified only when operating on fields",
        );
    }
    if mode == Mode::Bytes && only_delimited {
        return usage(
            cx,
            "suppressing non-delimited lines makes sense\n\tonly when operating on fields",
        );
    }
    let delim = match delim.as_deref() {
        None => b'\t',
        Some(d) if d.len() == 1 => d.as_bytes()[0],
        Some("") => 0,
        Some(_) => return usage(cx, "the delimiter must be a single character"),
    };
    let out_delim: Vec<u8> = match &out_delim {
        Some(d) => d.as_bytes().to_vec(),
        None if mode == Mode::Fields => vec![delim],
        None => Vec::new(),
    };
    let term = if zero { 0 } else { b'\n' };
    if files.is_empty() {
        files.push("-".into());
    }
    let mut status = 0;
    for f in files {
        cx.check_time()?;
        let data = match cx.read_input(&f) {
            Ok(d) => d,
            Err(e) => {
                cx.err_line(&format!("cut: {f}: {e}"));
                status = 1;
                continue;
            }
        };
        if data.is_empty() {
            continue;
        }
        // the last line may lack its terminator; the output always has it
        let body = data.strip_suffix(&[term]).unwrap_or(&data);
        let mut out = Vec::new();
        for (k, line) in body.split(|b| *b == term).enumerate() {
            if k % 1024 == 1023 {
                cx.tick()?;
            }
            match mode {
                Mode::Bytes => {
                    let mut prev: Option<usize> = None;
                    for (i, b) in line.iter().enumerate() {
                        let n = i + 1;
                        if selected(&list, n, complement) {
                            if prev.is_some_and(|p| p + 1 != n) {
                                out.extend_from_slice(&out_delim);
                            }
                            out.push(*b);
                            prev = Some(n);
                        }
                    }
                }
                Mode::Fields => {
                    if !line.contains(&delim) {
                        if !only_delimited {
                            out.extend_from_slice(line);
                            out.push(term);
                        }
                        continue;
                    }
                    let mut first = true;
                    for (i, field) in line.split(|b| *b == delim).enumerate() {
                        if selected(&list, i + 1, complement) {
                            if !first {
                                out.extend_from_slice(&out_delim);
                            }
                            out.extend_from_slice(field);
                            first = false;
                        }
                    }
                }
            }
            out.push(term);
        }
        cx.out(&out)?;
    }
    Ok(status)
}
