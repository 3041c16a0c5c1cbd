//! `uniq` (GNU coreutils 9.1): `-c`/`--count`, `-d`/`--repeated`, `-D` (all repeated,
//! no method), `-u`/`--unique`, `-i`/`--ignore-case`, `-f`/`--skip-fields`,
//! `-s`/`--skip-chars`, `-w`/`--check-chars`, `-z`/`--zero-terminated`. An OUTPUT
//! operand, `--group` and `--all-repeated=METHOD` fail visibly (unsupported).

use super::opts::{Arg, Parser};
use super::Ctx;
use crate::shell::R;

/// GNU's usage status for uniq.
const USAGE: i32 = 1;

/// The part of `line` uniq compares.
fn key(line: &[u8], fields: usize, chars: usize, check: Option<usize>) -> &[u8] {
    let blank = |b: &u8| *b == b' ' || *b == b'\t';
    let mut i = 0;
    for _ in 0..fields {
        while i < line.len() && blank(&line[i]) {
            i += 1;
        }
        while i < line.len() && !blank(&line[i]) {
            i += 1;
        }
    }
    let rest = &line[i..];
    let rest = &rest[chars.min(rest.len())..];
    match check {
        Some(n) => &rest[..n.min(rest.len())],
        None => rest,
    }
}

pub(super) fn main(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new(
        "uniq",
        args,
        &[
            "count",
            "repeated",
            "all-repeated",
            "unique",
            "ignore-case",
            "skip-fields",
            "skip-chars",
            "check-chars",
            "zero-terminated",
            "group",
            "help",
            "version",
        ],
    );
    let (mut count, mut repeated, mut all_repeated, mut unique, mut icase, mut zero) =
        (false, false, false, false, false, false);
    let (mut fields, mut chars, mut check) = (0usize, 0usize, None::<usize>);
    let mut ops = Vec::new();
    loop {
        let arg = match p.next_in(cx)? {
            Ok(Some(a)) => a,
            Ok(None) => break,
            Err(u) => {
                cx.err_line(&u.0);
                return Ok(USAGE);
            }
        };
        let what = match arg {
            Arg::Short('f') | Arg::Long("skip-fields") => Some("invalid number of fields to skip"),
            Arg::Short('s') | Arg::Long("skip-chars") => Some("invalid number of bytes to skip"),
            Arg::Short('w') | Arg::Long("check-chars") => {
                Some("invalid number of bytes to compare")
            }
            _ => None,
        };
        if let Some(what) = what {
            let v = match p.value() {
                Ok(v) => v,
                Err(u) => {
                    cx.err_line(&u.0);
                    return Ok(USAGE);
                }
            };
            let Ok(n) = v.parse::<usize>() else {
                cx.err_line(&format!("uniq: {v}: {what}"));
                return Ok(USAGE);
            };
            match arg {
                Arg::Short('f') | Arg::Long("skip-fields") => fields = n,
                Arg::Short('s') | Arg::Long("skip-chars") => chars = n,
                _ => check = Some(n),
            }
            continue;
        }
        match arg {
            Arg::Short('c') | Arg::Long("count") => count = true,
            Arg::Short('d') | Arg::Long("repeated") => repeated = true,
            Arg::Short('D') => all_repeated = true,
            Arg::Short('u') | Arg::Long("unique") => unique = true,
            Arg::Short('i') | Arg::Long("ignore-case") => icase = true,
            Arg::Short('z') | Arg::Long("zero-terminated") => zero = true,
            Arg::Long(l) => return cx.unsupported(&format!("uniq option --{l}")),
            Arg::Short(c) if c.is_ascii_digit() => {
                return cx.unsupported("uniq obsolete option -N (use -f N)")
            }
            Arg::Short(c) => {
                cx.err_line(&p.invalid_short(c).0);
                return Ok(USAGE);
            }
            Arg::Operand(o) => ops.push(o),
        }
    }
    if count && all_repeated {
        cx.err_line(
            "uniq: printing all duplicated lines and repeat counts is meaningless\nTry 'uniq --help' for more information.",
        );
        return Ok(USAGE);
    }
    if ops.len() > 2 {
        cx.err_line(&format!(
            "uniq: extra operand \u{2018}{}\u{2019}\nTry 'uniq --help' for more information.",
            ops[2]
        ));
        return Ok(USAGE);
    }
    if ops.len() == 2 {
        return cx.unsupported("uniq OUTPUT operand");
    }
    let input = ops.first().cloned().unwrap_or_else(|| "-".into());
    let data = match cx.read_input(&input) {
        Ok(d) => d,
        Err(e) => {
            cx.err_line(&format!("uniq: {input}: {e}"));
            return Ok(1);
        }
    };
    let term = if zero { 0 } else { b'\n' };
    let body = data.strip_suffix(&[term]).unwrap_or(&data);
    let lines: Vec<&[u8]> = if data.is_empty() {
        Vec::new()
    } else {
        body.split(|b| *b == term).collect()
    };
    let same = |a: &[u8], b: &[u8]| {
        let (ka, kb) = (key(a, fields, chars, check), key(b, fields, chars, check));
        if icase {
            ka.eq_ignore_ascii_case(kb)
        } else {
            ka == kb
        }
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if i % 1024 == 1023 {
            cx.tick()?;
        }
        let mut j = i + 1;
        while j < lines.len() && same(lines[i], lines[j]) {
            j += 1;
        }
        let n = j - i;
        let dups = repeated || all_repeated;
        let show = match (dups, unique) {
            (false, false) => true,
            (true, false) => n > 1,
            (false, true) => n == 1,
            (true, true) => false,
        };
        if show {
            let group: &[&[u8]] = if all_repeated {
                &lines[i..j]
            } else {
                &lines[i..=i]
            };
            for line in group {
                if count {
                    out.extend_from_slice(format!("{n:>7} ").as_bytes());
                }
                out.extend_from_slice(line);
                out.push(term);
            }
        }
        i = j;
    }
    cx.out(&out)?;
    Ok(0)
}
