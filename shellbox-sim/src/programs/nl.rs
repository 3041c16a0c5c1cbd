//! `nl` (GNU coreutils 9.1): numbers lines. `-b`/`--body-numbering` STYLE (`a`, `t`, `n`;
//! `pREGEX` is refused as unsupported), `-w`/`--number-width`, `-s`/`--number-separator`,
//! `-n`/`--number-format` (`ln`, `rn`, `rz`), `-v`/`--starting-line-number`,
//! `-i`/`--line-increment`. Section delimiters (`\:`) are not read: every line is body.

use super::opts::{Arg, Parser};
use super::Ctx;
use crate::shell::R;

/// GNU's usage status for nl.
const USAGE: i32 = 1;

/// The widest number field nl is given here (GNU allows up to `i32::MAX`; a wider field
/// than this is refused, so a line cannot cost unbounded memory).
const MAX_WIDTH: usize = 4096;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Style {
    All,
    NonEmpty,
    None,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    Left,
    Right,
    Zeros,
}

pub(super) fn main(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new(
        "nl",
        args,
        &[
            "body-numbering",
            "number-width",
            "number-separator",
            "number-format",
            "starting-line-number",
            "line-increment",
            "header-numbering",
            "footer-numbering",
            "section-delimiter",
            "join-blank-lines",
            "no-renumber",
            "help",
            "version",
        ],
    );
    let mut style = Style::NonEmpty;
    let mut width = 6usize;
    let mut sep = "\t".to_string();
    let mut format = Format::Right;
    let mut start: i64 = 1;
    let mut incr: i64 = 1;
    let mut files = Vec::new();
    loop {
        let arg = match p.next_in(cx)? {
            Ok(Some(a)) => a,
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, USAGE),
        };
        let key = match &arg {
            Arg::Short(c) => Some(*c),
            Arg::Long("body-numbering") => Some('b'),
            Arg::Long("number-width") => Some('w'),
            Arg::Long("number-separator") => Some('s'),
            Arg::Long("number-format") => Some('n'),
            Arg::Long("starting-line-number") => Some('v'),
            Arg::Long("line-increment") => Some('i'),
            Arg::Long(l) => return cx.unsupported(&format!("nl option --{l}")),
            Arg::Operand(o) => {
                files.push(o.clone());
                None
            }
        };
        let Some(key) = key else { continue };
        if !"bwsnvi".contains(key) {
            if "hfdlpj".contains(key) {
                return cx.unsupported(&format!("nl option -{key}"));
            }
            return super::usage(cx, p.invalid_short(key), USAGE);
        }
        let v = match p.value() {
            Ok(v) => v,
            Err(u) => return super::usage(cx, u, USAGE),
        };
        match key {
            'b' => {
                style = match v.as_str() {
                    "a" => Style::All,
                    "t" => Style::NonEmpty,
                    "n" => Style::None,
                    s if s.starts_with('p') => return cx.unsupported("nl -b pREGEX"),
                    _ => {
                        cx.err_line(&format!(
                            "nl: invalid body numbering style: \u{2018}{v}\u{2019}"
                        ));
                        return Ok(USAGE);
                    }
                }
            }
            'w' => match v.parse::<usize>() {
                Ok(w) if (1..=MAX_WIDTH).contains(&w) => width = w,
                Ok(w) if w > MAX_WIDTH => {
                    return cx.unsupported(&format!("nl -w over {MAX_WIDTH}"))
                }
                _ => {
                    cx.err_line(&format!("nl: invalid line number field width: \u{2018}{v}\u{2019}: Numerical result out of range"));
                    return Ok(USAGE);
                }
            },
            's' => sep = v,
            'n' => {
                format = match v.as_str() {
                    "ln" => Format::Left,
                    "rn" => Format::Right,
                    "rz" => Format::Zeros,
                    _ => {
                        cx.err_line(&format!(
                            "nl: invalid line numbering format: \u{2018}{v}\u{2019}"
                        ));
                        return Ok(USAGE);
                    }
                }
            }
            'v' | 'i' => match v.parse::<i64>() {
                Ok(n) if key == 'v' => start = n,
                Ok(n) => incr = n,
                Err(_) => {
                    let what = if key == 'v' {
                        "starting line number"
                    } else {
                        "line number increment"
                    };
                    cx.err_line(&format!("nl: invalid {what}: \u{2018}{v}\u{2019}"));
                    return Ok(USAGE);
                }
            },
            _ => {}
        }
    }
    if files.is_empty() {
        files.push("-".into());
    }
    let mut n = start;
    let mut status = 0;
    for f in files {
        cx.check_time()?;
        let data = match cx.read_input(&f) {
            Ok(d) => d,
            Err(e) => {
                cx.err_line(&format!("nl: {f}: {e}"));
                status = 1;
                continue;
            }
        };
        let mut out = Vec::with_capacity(data.len() + data.len() / 4);
        let mut charged = 0;
        for (k, line) in data.split_inclusive(|b| *b == b'\n').enumerate() {
            if k % 1024 == 1023 {
                // the output's growth since the last charge, not all of it again
                cx.hold(out.len().saturating_sub(charged))?;
                charged = out.len();
                cx.tick()?;
            }
            let body = line.strip_suffix(b"\n").unwrap_or(line);
            let number = match style {
                Style::All => true,
                Style::NonEmpty => !body.is_empty(),
                Style::None => false,
            };
            if number {
                let field = match format {
                    Format::Left => format!("{n:<width$}"),
                    Format::Right => format!("{n:>width$}"),
                    Format::Zeros if n < 0 => {
                        format!("-{:0>w$}", n.unsigned_abs(), w = width.saturating_sub(1))
                    }
                    Format::Zeros => format!("{n:0>width$}"),
                };
                out.extend_from_slice(field.as_bytes());
                out.extend_from_slice(sep.as_bytes());
                n = n.wrapping_add(incr);
            } else {
                out.resize(out.len() + width + sep.len(), b' ');
            }
            out.extend_from_slice(body);
            out.push(b'\n');
        }
        cx.out(&out)?;
    }
    Ok(status)
}
