//! `split` (GNU coreutils 9.1): `-l N` (default 1000 lines), `-b SIZE` (`K` `M` `G` as
//! powers of 1024, `KB` `MB` `GB` of 1000), `-n N` (N pieces by bytes, the last holding the
//! rest), `-d` / `--numeric-suffixes[=FROM]`, `-x` / `--hex-suffixes`, `-a N`, `--additional-suffix`, `FILE` (`-`)
//! and `PREFIX` (default `x`). Without `-a`, suffixes widen as GNU's do (`yz`, `zaaa`, …);
//! with it, running out fails with status 1. Other options (`-C`, `-n l/N`, `--filter`)
//! fail visibly with status 1. One look at the clock per piece and per 1024 lines.

use super::opts::{Arg, Parser};
use super::Ctx;
use crate::shell::R;

/// How the input is cut.
enum By {
    Lines(usize),
    Bytes(usize),
    Pieces(usize),
}

fn size(v: &str) -> Option<usize> {
    let t = v.trim();
    let digits = t.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &t[digits.len()..];
    let n: usize = digits.parse().ok()?;
    let m: usize = match unit {
        "" => 1,
        "b" => 512,
        "K" | "KiB" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        "KB" => 1000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return None,
    };
    n.checked_mul(m).filter(|n| *n > 0)
}

/// The `k`-th suffix: `len` characters in `base` (26 letters, 10 or 16 digits); with `auto`,
/// widened as GNU widens them when the first character would reach the last letter.
fn suffix(k: usize, len: usize, auto: bool, base: usize) -> Option<String> {
    const HEX: &[u8] = b"0123456789abcdef";
    let digit = |d: usize| if base == 26 { b'a' + d as u8 } else { HEX[d] };
    let mut k = k;
    let mut w = len;
    let mut zs = 0;
    if auto {
        loop {
            let cap = (base - 1).checked_mul(base.checked_pow(w as u32 - 1)?)?;
            if k < cap {
                break;
            }
            k -= cap;
            zs += 1;
            w += 1;
        }
    } else if k >= base.checked_pow(w as u32)? {
        return None;
    }
    let mut s = vec![digit(base - 1); zs];
    let mut digits = vec![digit(0); w];
    for d in digits.iter_mut().rev() {
        *d = digit(k % base);
        k /= base;
    }
    s.extend(digits);
    String::from_utf8(s).ok()
}

pub(super) fn main(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new(
        "split",
        args,
        &[
            "lines",
            "bytes",
            "number",
            "numeric-suffixes",
            "hex-suffixes",
            "suffix-length",
            "additional-suffix",
            "line-bytes",
            "filter",
            "elide-empty-files",
            "verbose",
        ],
    );
    let mut by = By::Lines(1000);
    let (mut base, mut start) = (26usize, 0usize);
    let mut len: Option<usize> = None;
    let mut extra = String::new();
    let mut operands = Vec::new();
    let bad = |cx: &mut Ctx<'_, '_>, what: &str, v: &str| -> R<i32> {
        cx.err_line(&format!("split: invalid {what}: '{v}'"));
        Ok(1)
    };
    loop {
        match p.next_in(cx)? {
            Ok(Some(Arg::Short('l'))) | Ok(Some(Arg::Long("lines"))) => match p.value() {
                Ok(v) => match v.parse::<usize>() {
                    Ok(n) if n > 0 => by = By::Lines(n),
                    _ => return bad(cx, "number of lines", &v),
                },
                Err(u) => return super::usage(cx, u, 1),
            },
            Ok(Some(Arg::Short('b'))) | Ok(Some(Arg::Long("bytes"))) => match p.value() {
                Ok(v) => match size(&v) {
                    Some(n) => by = By::Bytes(n),
                    None => return bad(cx, "number of bytes", &v),
                },
                Err(u) => return super::usage(cx, u, 1),
            },
            Ok(Some(Arg::Short('n'))) | Ok(Some(Arg::Long("number"))) => match p.value() {
                Ok(v) if v.contains('/') => {
                    return cx.unsupported_status(&format!("split -n {v}"), 1)
                }
                Ok(v) => match v.parse::<usize>() {
                    Ok(n) if n > 0 => by = By::Pieces(n),
                    _ => return bad(cx, "number of chunks", &v),
                },
                Err(u) => return super::usage(cx, u, 1),
            },
            Ok(Some(Arg::Short('d'))) => base = 10,
            Ok(Some(Arg::Short('x'))) | Ok(Some(Arg::Long("hex-suffixes"))) => base = 16,
            Ok(Some(Arg::Long("numeric-suffixes"))) => {
                base = 10;
                if let Some(v) = p.optional_value() {
                    match v.parse() {
                        Ok(n) => start = n,
                        Err(_) => return bad(cx, "start value for numerical suffix", &v),
                    }
                }
            }
            Ok(Some(Arg::Short('a'))) | Ok(Some(Arg::Long("suffix-length"))) => match p.value() {
                Ok(v) => match v.parse::<usize>() {
                    Ok(n) if n > 0 => len = Some(n),
                    _ => return bad(cx, "suffix length", &v),
                },
                Err(u) => return super::usage(cx, u, 1),
            },
            Ok(Some(Arg::Long("additional-suffix"))) => match p.value() {
                Ok(v) => extra = v,
                Err(u) => return super::usage(cx, u, 1),
            },
            Ok(Some(Arg::Short(c @ ('C' | 'e' | 'u' | 't')))) => {
                return cx.unsupported_status(&format!("split -{c}"), 1)
            }
            Ok(Some(Arg::Short(c))) => return super::usage(cx, p.invalid_short(c), 1),
            Ok(Some(Arg::Long(l))) => return cx.unsupported_status(&format!("split --{l}"), 1),
            Ok(Some(Arg::Operand(o))) => operands.push(o),
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, 1),
        }
    }
    if operands.len() > 2 {
        cx.err_line(&format!(
            "split: extra operand '{}'\nTry 'split --help' for more information.",
            operands[2]
        ));
        return Ok(1);
    }
    let file = operands.first().cloned().unwrap_or_else(|| "-".into());
    let prefix = operands.get(1).cloned().unwrap_or_else(|| "x".into());
    let data = match cx.read_input(&file) {
        Ok(d) => d,
        Err(e) => {
            cx.err_line(&format!("split: cannot open '{file}' for reading: {e}"));
            return Ok(1);
        }
    };
    // the pieces, as ranges of `data`
    let mut pieces: Vec<(usize, usize)> = Vec::new();
    match by {
        By::Bytes(n) => {
            let mut a = 0;
            while a < data.len() {
                pieces.push((a, (a + n).min(data.len())));
                a += n;
            }
        }
        By::Pieces(n) => {
            let each = data.len() / n;
            for k in 0..n {
                let end = if k + 1 == n {
                    data.len()
                } else {
                    (k + 1) * each
                };
                pieces.push((k * each, end));
            }
        }
        By::Lines(n) => {
            let (mut a, mut count) = (0usize, 0usize);
            for (i, b) in data.iter().enumerate() {
                if *b == b'\n' {
                    count += 1;
                    if count.is_multiple_of(1024) && crate::shell::stop_due() {
                        return Err(cx.interrupted());
                    }
                    if count.is_multiple_of(n) {
                        pieces.push((a, i + 1));
                        a = i + 1;
                    }
                }
            }
            if a < data.len() {
                pieces.push((a, data.len()));
            }
        }
    }
    let auto = len.is_none() && !matches!(by, By::Pieces(_));
    let len = match (len, &by) {
        (Some(l), _) => l,
        // -n N: wide enough for N names
        (None, By::Pieces(n)) => {
            let mut l = 2;
            while base_pow(base, l) < *n + start {
                l += 1;
            }
            l
        }
        (None, _) => 2,
    };
    for (k, (a, b)) in pieces.into_iter().enumerate() {
        if crate::shell::stop_due() {
            return Err(cx.interrupted());
        }
        let Some(sfx) = suffix(k + start, len, auto, base) else {
            cx.err_line("split: output file suffixes exhausted");
            return Ok(1);
        };
        let name = format!("{prefix}{sfx}{extra}");
        if let Err(e) = cx.write_file(&name, data[a..b].to_vec()) {
            cx.err_line(&format!("split: {name}: {}", e.msg()));
            return Ok(1);
        }
    }
    Ok(0)
}

fn base_pow(base: usize, n: usize) -> usize {
    base.saturating_pow(n as u32)
}
