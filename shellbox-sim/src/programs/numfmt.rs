//! `numfmt` (GNU coreutils 9.1): numbers from and to human units: `--from=none|si|iec|
//! auto|iec-i`, `--to=none|si|iec|iec-i`, `--round=up|down|from-zero|towards-zero|
//! nearest`, `--suffix`, `--padding`, `--field=N`, `-d CHAR`, `--header[=N]`, operands or
//! the lines of standard input. Scaled output keeps one decimal under 10 (`1.5K`) and
//! none above (`118M`). `--format`, `--invalid`, field ranges and the rest fail visibly
//! with status 1; a number it cannot read fails with status 2.

use super::opts::{Arg, Parser};
use super::Ctx;
use crate::shell::R;

const UNITS: [char; 8] = ['K', 'M', 'G', 'T', 'P', 'E', 'Z', 'Y'];

#[derive(Clone, Copy, PartialEq)]
enum Scale {
    None,
    Si,
    Iec,
    IecI,
    Auto,
}

#[derive(Clone, Copy)]
enum Round {
    Up,
    Down,
    FromZero,
    TowardsZero,
    Nearest,
}

impl Round {
    fn apply(self, v: f64) -> f64 {
        match self {
            Round::Up => v.ceil(),
            Round::Down => v.floor(),
            Round::FromZero => {
                if v < 0.0 {
                    v.floor()
                } else {
                    v.ceil()
                }
            }
            Round::TowardsZero => v.trunc(),
            Round::Nearest => v.round(),
        }
    }
}

struct Opts {
    from: Scale,
    to: Scale,
    round: Round,
    suffix: String,
    padding: i64,
}

/// `text` read as a number with `from`'s units; the error's words.
fn parse(text: &str, from: Scale) -> Result<(f64, usize), String> {
    let t = text.trim();
    let num_end = t
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || (i == 0 && (c == '-' || c == '+'))))
        .map_or(t.len(), |(i, _)| i);
    let (num, rest) = t.split_at(num_end);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("invalid number: '{text}'"))?;
    let decimals = num.split_once('.').map_or(0, |(_, d)| d.len());
    if rest.is_empty() {
        return Ok((v, decimals));
    }
    let mut chars = rest.chars();
    let unit = chars.next().unwrap_or(' ');
    let tail: String = chars.collect();
    let power = UNITS
        .iter()
        .position(|u| *u == unit.to_ascii_uppercase())
        .filter(|_| unit != 'k' || from != Scale::Iec)
        .map(|p| p as i32 + 1);
    let (Some(power), true) = (power, from != Scale::None) else {
        return Err(format!("invalid suffix in input: '{text}'"));
    };
    let base = match (from, tail.as_str()) {
        (Scale::Si, "") => 1000f64,
        (Scale::Iec, "") => 1024f64,
        (Scale::IecI, "i") => 1024f64,
        (Scale::Auto, "i") => 1024f64,
        (Scale::Auto, "") => 1000f64,
        _ => return Err(format!("invalid suffix in input: '{text}'")),
    };
    Ok((v * base.powi(power), 0))
}

/// `v` in `o.to`'s units, rounded, with the suffix and padding.
fn show(v: f64, decimals: usize, o: &Opts) -> Result<String, String> {
    let text = if o.to == Scale::None {
        if decimals > 0 {
            format!("{v:.decimals$}")
        } else {
            let r = o.round.apply(v);
            if r.abs() >= 1e18 {
                return Err(format!(
                    "value too large to be printed: '{v:e}' (consider using --to)"
                ));
            }
            format!("{}", r as i64)
        }
    } else {
        let base = if o.to == Scale::Si { 1000.0 } else { 1024.0 };
        let mut x = v;
        let mut power = 0usize;
        while x.abs() >= base && power < UNITS.len() {
            x /= base;
            power += 1;
        }
        if power == 0 {
            format!("{}", o.round.apply(x) as i64)
        } else {
            let mut r = if x.abs() < 10.0 {
                o.round.apply(x * 10.0) / 10.0
            } else {
                o.round.apply(x)
            };
            if r.abs() >= base && power < UNITS.len() {
                r /= base;
                power += 1;
            }
            let num = if r.abs() < 10.0 {
                format!("{r:.1}")
            } else {
                format!("{r:.0}")
            };
            let i = if o.to == Scale::IecI { "i" } else { "" };
            format!("{num}{}{i}", UNITS[power - 1])
        }
    };
    let text = format!("{text}{}", o.suffix);
    let w = o.padding.unsigned_abs() as usize;
    Ok(if o.padding > 0 {
        format!("{text:>w$}")
    } else if o.padding < 0 {
        format!("{text:<w$}")
    } else {
        text
    })
}

pub(super) fn main(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new(
        "numfmt",
        args,
        &[
            "from",
            "to",
            "round",
            "suffix",
            "padding",
            "field",
            "delimiter",
            "header",
            "format",
            "invalid",
            "from-unit",
            "to-unit",
            "grouping",
            "zero-terminated",
            "debug",
        ],
    );
    let mut o = Opts {
        from: Scale::None,
        to: Scale::None,
        round: Round::FromZero,
        suffix: String::new(),
        padding: 0,
    };
    let mut field = 1usize;
    let mut delim: Option<char> = None;
    let mut header = 0usize;
    let mut numbers = Vec::new();
    let fail = |cx: &mut Ctx<'_, '_>, msg: String| -> R<i32> {
        cx.err_line(&format!("numfmt: {msg}"));
        Ok(1)
    };
    loop {
        let a = match p.next_in(cx)? {
            Ok(Some(a)) => a,
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, 1),
        };
        let scale = |v: &str, to: bool| match v {
            "none" => Some(Scale::None),
            "si" => Some(Scale::Si),
            "iec" => Some(Scale::Iec),
            "iec-i" => Some(Scale::IecI),
            "auto" if !to => Some(Scale::Auto),
            _ => None,
        };
        match a {
            Arg::Long(l @ ("from" | "to")) => {
                let v = match p.value() {
                    Ok(v) => v,
                    Err(u) => return super::usage(cx, u, 1),
                };
                match scale(&v, l == "to") {
                    Some(s) if l == "to" => o.to = s,
                    Some(s) => o.from = s,
                    None => return fail(cx, format!("invalid argument '{v}' for '--{l}'")),
                }
            }
            Arg::Long("round") => {
                let v = match p.value() {
                    Ok(v) => v,
                    Err(u) => return super::usage(cx, u, 1),
                };
                o.round = match v.as_str() {
                    "up" => Round::Up,
                    "down" => Round::Down,
                    "from-zero" => Round::FromZero,
                    "towards-zero" => Round::TowardsZero,
                    "nearest" => Round::Nearest,
                    _ => return fail(cx, format!("invalid argument '{v}' for '--round'")),
                };
            }
            Arg::Long("suffix") => match p.value() {
                Ok(v) => o.suffix = v,
                Err(u) => return super::usage(cx, u, 1),
            },
            Arg::Long("padding") => {
                let v = match p.value() {
                    Ok(v) => v,
                    Err(u) => return super::usage(cx, u, 1),
                };
                match v.parse::<i64>() {
                    Ok(n) if n != 0 => o.padding = n,
                    _ => return fail(cx, format!("invalid padding value '{v}'")),
                }
            }
            Arg::Long("field") => {
                let v = match p.value() {
                    Ok(v) => v,
                    Err(u) => return super::usage(cx, u, 1),
                };
                match v.parse::<usize>() {
                    Ok(n) if n > 0 => field = n,
                    _ => return cx.unsupported_status(&format!("numfmt --field={v}"), 1),
                }
            }
            Arg::Short('d') | Arg::Long("delimiter") => match p.value() {
                Ok(v) if v.chars().count() == 1 => delim = v.chars().next(),
                Ok(v) => {
                    return fail(
                        cx,
                        format!("the delimiter must be a single character: '{v}'"),
                    )
                }
                Err(u) => return super::usage(cx, u, 1),
            },
            Arg::Long("header") => {
                header = match p.optional_value() {
                    None => 1,
                    Some(v) => match v.parse() {
                        Ok(n) if n > 0 => n,
                        _ => return fail(cx, format!("invalid header value '{v}'")),
                    },
                }
            }
            Arg::Long(l) => return cx.unsupported_status(&format!("numfmt --{l}"), 1),
            Arg::Short(c) => return super::usage(cx, p.invalid_short(c), 1),
            Arg::Operand(n) => numbers.push(n),
        }
    }
    let mut out = String::new();
    let convert = |text: &str, o: &Opts| -> Result<String, String> {
        let (v, d) = parse(text, o.from)?;
        show(v, d, o)
    };
    if !numbers.is_empty() {
        for n in &numbers {
            match convert(n, &o) {
                Ok(s) => {
                    out.push_str(&s);
                    out.push('\n');
                }
                Err(m) => {
                    cx.out(out.as_bytes())?;
                    cx.err_line(&format!("numfmt: {m}"));
                    return Ok(2);
                }
            }
        }
        cx.out(out.as_bytes())?;
        return Ok(0);
    }
    let data = cx.read_input("-").unwrap_or_default();
    let text = String::from_utf8_lossy(&data);
    for (k, line) in text.lines().enumerate() {
        if k % 1024 == 1023 && crate::shell::stop_due() {
            return Err(cx.interrupted());
        }
        if k < header {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        // the field's place in the line (the rest kept as it is)
        let spans: Vec<(usize, usize)> = match delim {
            Some(d) => {
                let mut v = Vec::new();
                let mut start = 0;
                for (i, c) in line.char_indices() {
                    if c == d {
                        v.push((start, i));
                        start = i + c.len_utf8();
                    }
                }
                v.push((start, line.len()));
                v
            }
            None => {
                let mut v = Vec::new();
                let mut start = None;
                for (i, c) in line.char_indices() {
                    match (c.is_whitespace(), start) {
                        (false, None) => start = Some(i),
                        (true, Some(s)) => {
                            v.push((s, i));
                            start = None;
                        }
                        _ => {}
                    }
                }
                if let Some(s) = start {
                    v.push((s, line.len()));
                }
                v
            }
        };
        match spans.get(field - 1) {
            Some(&(a, b)) => match convert(&line[a..b], &o) {
                Ok(s) => {
                    out.push_str(&line[..a]);
                    out.push_str(&s);
                    out.push_str(&line[b..]);
                }
                Err(m) => {
                    cx.out(out.as_bytes())?;
                    cx.err_line(&format!("numfmt: {m}"));
                    return Ok(2);
                }
            },
            None => out.push_str(line),
        }
        out.push('\n');
    }
    cx.out(out.as_bytes())?;
    Ok(0)
}
