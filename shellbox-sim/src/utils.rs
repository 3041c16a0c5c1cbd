//! The virtual executables under `/bin`: GNU-coreutils-like utilities run in-process.

use crate::builtins::normalize;
use crate::shell::{Ctl, Interp, Opts, Shell, R};
use crate::vfs::{Errno, Kind, Vfs};
use shellbox_core::status::signal_exit_code;

/// Runs utility `name` as a program (its own process: it changes no shell state).
pub fn run(it: &mut Interp<'_>, sh: &mut Shell, name: &str, argv: Vec<String>) -> R<i32> {
    // a million arguments take tens of milliseconds to free: not past the deadline
    let argv = crate::mem::PacedVec::new(argv);
    if let Some(p) = crate::programs::find(name) {
        if let Some(main) = p.main {
            let status = crate::programs::run(main, it, sh, &argv)?;
            // a program that ran past the deadline without noticing (one record of
            // megabytes) ends the command now, not after the shell's next few dozen ticks
            it.check_time()?;
            return Ok(status);
        }
    }
    let args = &argv[1..];
    match name {
        "true" => Ok(0),
        "false" => Ok(1),
        "echo" => echo(it, sh, args),
        "printf" => printf_cmd(it, sh, args),
        "pwd" => {
            let c = sh.cwd.clone();
            it.out(sh, &format!("{c}\n"))?;
            Ok(0)
        }
        "test" | "[" => {
            let mut v = vec![name.to_string()];
            v.extend(args.iter().cloned());
            crate::builtins::run(it, sh, v)
        }
        "kill" => kill(it, sh, args),
        "sh" | "bash" => shell_prog(it, sh, name, args),
        "cat" => cat(it, sh, args),
        "ls" => ls(it, sh, args),
        "mkdir" => mkdir(it, sh, args),
        "rmdir" => rmdir(it, sh, args),
        "rm" => rm(it, sh, args),
        "cp" => cp(it, sh, args),
        "mv" => mv(it, sh, args),
        "touch" => touch(it, sh, args),
        "ln" => ln(it, sh, args),
        "chmod" => chmod(it, sh, args),
        "stat" => stat(it, sh, args),
        "env" => env(it, sh, args),
        "sleep" => sleep(it, sh, args),
        "date" => date(it, sh, args),
        "basename" => basename(it, sh, args),
        "dirname" => dirname(it, sh, args),
        "seq" => seq(it, sh, args),
        "head" => head_tail(it, sh, args, true),
        "tail" => head_tail(it, sh, args, false),
        "wc" => wc(it, sh, args),
        "tee" => tee(it, sh, args),
        "timeout" => timeout(it, sh, args),
        _ => {
            it.err(sh, &format!("bash: line 1: {name}: command not found"));
            Ok(127)
        }
    }
}

fn fail(it: &mut Interp<'_>, sh: &Shell, msg: String) {
    it.err(sh, &msg);
}

fn unsupported_opt(it: &mut Interp<'_>, sh: &mut Shell, prog: &str, opt: &str) -> R<i32> {
    it.unsupported(sh, &format!("{prog} option {opt}"))
}

/// Splits `-abc` style flags from operands (stops at `--` or the first operand).
fn flags(args: &[String]) -> (Vec<char>, Vec<String>) {
    let mut f = Vec::new();
    let mut ops = Vec::new();
    let mut done = false;
    for a in args {
        if !done && a == "--" {
            done = true;
            continue;
        }
        if !done && a.starts_with('-') && a.len() > 1 && !a.starts_with("--") {
            f.extend(a[1..].chars());
        } else if !done && a.starts_with("--") {
            // long options are accepted and ignored (callers look for the ones they honour)
        } else {
            ops.push(a.clone());
        }
    }
    (f, ops)
}

pub fn echo(it: &mut Interp<'_>, sh: &mut Shell, args: &[String]) -> R<i32> {
    let mut newline = true;
    let mut escapes = false;
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a.len() > 1 && a.starts_with('-') && a[1..].chars().all(|c| matches!(c, 'n' | 'e' | 'E'))
        {
            for c in a[1..].chars() {
                match c {
                    'n' => newline = false,
                    'e' => escapes = true,
                    _ => escapes = false,
                }
            }
            i += 1;
        } else {
            break;
        }
    }
    let mut out = Vec::new();
    for (k, a) in args[i..].iter().enumerate() {
        it.check_time()?;
        if k > 0 {
            out.push(b' ');
        }
        if escapes {
            let (bytes, stop) = backslash_b(a);
            out.extend(bytes);
            if stop {
                newline = false;
                break;
            }
        } else {
            out.extend_from_slice(a.as_bytes());
        }
    }
    if newline {
        out.push(b'\n');
    }
    if !it.write(sh, 1, &out)? {
        it.err(sh, "bash: echo: write error: Bad file descriptor");
        return Ok(1);
    }
    Ok(0)
}

/// `echo -e` / `%b` escapes; the bool is true at `\c`.
fn backslash_b(s: &str) -> (Vec<u8>, bool) {
    backslash_escapes(s, false)
}

/// Backslash escapes of `echo -e` and `%b` (`octal_any`: also `\NNN` without a leading 0,
/// as in a printf format).
fn backslash_escapes(s: &str, octal_any: bool) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' || i + 1 >= b.len() {
            out.push(b[i]);
            i += 1;
            continue;
        }
        i += 1;
        let c = b[i];
        i += 1;
        match c {
            b'n' => out.push(b'\n'),
            b't' => out.push(b'\t'),
            b'r' => out.push(b'\r'),
            b'a' => out.push(7),
            b'b' => out.push(8),
            b'e' | b'E' => out.push(27),
            b'f' => out.push(12),
            b'v' => out.push(11),
            b'\\' => out.push(b'\\'),
            b'c' => return (out, true),
            b'0' => {
                let mut v = 0u32;
                let mut n = 0;
                while n < 3 && i < b.len() && (b'0'..=b'7').contains(&b[i]) {
                    v = v * 8 + (b[i] - b'0') as u32;
                    i += 1;
                    n += 1;
                }
                out.push(v as u8);
            }
            b'1'..=b'7' if octal_any => {
                let mut v = (c - b'0') as u32;
                let mut n = 1;
                while n < 3 && i < b.len() && (b'0'..=b'7').contains(&b[i]) {
                    v = v * 8 + (b[i] - b'0') as u32;
                    i += 1;
                    n += 1;
                }
                out.push(v as u8);
            }
            b'x' => {
                let mut v = 0u32;
                let mut n = 0;
                while n < 2 && i < b.len() && b[i].is_ascii_hexdigit() {
                    v = v * 16 + (b[i] as char).to_digit(16).unwrap_or(0);
                    i += 1;
                    n += 1;
                }
                if n == 0 {
                    out.extend_from_slice(b"\\x");
                } else {
                    out.push(v as u8);
                }
            }
            b'u' | b'U' => {
                let max = if c == b'u' { 4 } else { 8 };
                let mut v = 0u32;
                let mut n = 0;
                while n < max && i < b.len() && b[i].is_ascii_hexdigit() {
                    v = v * 16 + (b[i] as char).to_digit(16).unwrap_or(0);
                    i += 1;
                    n += 1;
                }
                if let Some(ch) = char::from_u32(v) {
                    let mut tmp = [0u8; 4];
                    out.extend_from_slice(ch.encode_utf8(&mut tmp).as_bytes());
                }
            }
            other => {
                out.push(b'\\');
                out.push(other);
            }
        }
    }
    (out, false)
}

/// `%q` quoting as bash prints it.
pub fn shell_quote(s: &str) -> String {
    if s.is_empty() {
        return "''".into();
    }
    if s.chars().any(|c| c.is_control()) {
        let mut out = String::from("$'");
        ansi_quote_into(&mut out, s);
        out.push('\'');
        return out;
    }
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if c.is_ascii_alphanumeric() || "_-./:,+@%=".contains(c) || !c.is_ascii() {
            if c == '=' && i == 0 {
                out.push('\\');
            }
            out.push(c);
        } else if c == '~' && i != 0 {
            out.push(c);
        } else {
            out.push('\\');
            out.push(c);
        }
    }
    out
}

/// Appends `s` as the inside of a `$'...'` word as bash's `ansic_quote` writes it (`%q`,
/// `${v@Q}`, `declare -p`): `\a \b \E \f \n \r \t \v`, quote and backslash escaped, each
/// byte of another control character in three octal digits (`\001`, `\302\205`).
pub fn ansi_quote_into(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\x1b' => out.push_str("\\E"),
            '\x0c' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\x0b' => out.push_str("\\v"),
            '\'' => out.push_str("\\'"),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {
                let mut b = [0u8; 4];
                for byte in c.encode_utf8(&mut b).bytes() {
                    out.push_str(&format!("\\{byte:03o}"));
                }
            }
            c => out.push(c),
        }
    }
}

fn printf_num(s: &str) -> Result<i64, String> {
    let t = s.trim();
    if t.is_empty() {
        return Ok(0);
    }
    if let Some(c) = t.strip_prefix('\'').or_else(|| t.strip_prefix('"')) {
        return Ok(c.chars().next().map(|c| c as i64).unwrap_or(0));
    }
    crate::expand::parse_int(t).ok_or_else(|| format!("{s}: invalid number"))
}

/// The widest printf field the simulator pads (bigger widths are an error).
const MAX_FIELD_WIDTH: usize = 1 << 20;

/// Decimals a float conversion formats exactly; more are zeros (an f64 has at most 1,074
/// fraction digits, and Rust's formatter refuses precisions over 65,535).
const FLOAT_DIGITS: usize = 1100;

/// Formats `fmt` with `args` as printf(1) does (the format reused until args run out).
pub fn printf_format(fmt: &str, args: &[String], errs: &mut Vec<String>) -> Vec<u8> {
    printf_format_at(fmt, args, errs, crate::CLOCK_START_EPOCH_SECS)
}

/// [`printf_format`] with `now` (seconds since the epoch) for `%(fmt)T`.
pub fn printf_format_at(fmt: &str, args: &[String], errs: &mut Vec<String>, now: i64) -> Vec<u8> {
    printf_format_limited(fmt, args, errs, now, usize::MAX).unwrap_or_default()
}

/// [`printf_format_at`] that stops with `None` once the output holds more than `max_len`
/// bytes: the formatted text is one buffer (a format reused for every argument, each field
/// up to [`MAX_FIELD_WIDTH`] wide, can ask for far more than the memory budget).
pub fn printf_format_limited(
    fmt: &str,
    args: &[String],
    errs: &mut Vec<String>,
    now: i64,
    max_len: usize,
) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let f: Vec<char> = fmt.chars().collect();
    let mut ai = 0;
    loop {
        let start_ai = ai;
        let mut i = 0;
        let mut stop = false;
        while i < f.len() {
            if out.len() > max_len {
                return None;
            }
            let c = f[i];
            if c == '\\' {
                // escape
                let mut j = i + 1;
                let mut s = String::from("\\");
                if j < f.len() {
                    s.push(f[j]);
                    j += 1;
                    if matches!(f[j - 1], '0'..='7' | 'x' | 'u' | 'U') {
                        let maxn = match f[j - 1] {
                            'u' => 4,
                            'U' => 8,
                            _ => 2,
                        };
                        let mut n = 0;
                        while n < maxn && j < f.len() && f[j].is_ascii_hexdigit() {
                            s.push(f[j]);
                            j += 1;
                            n += 1;
                        }
                    }
                }
                let (b, st) = backslash_escapes(&s, true);
                out.extend(b);
                if st {
                    return Some(out);
                }
                i = j;
                continue;
            }
            if c != '%' {
                let mut tmp = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut tmp).as_bytes());
                i += 1;
                continue;
            }
            if i + 1 < f.len() && f[i + 1] == '%' {
                out.push(b'%');
                i += 2;
                continue;
            }
            let mut j = i + 1;
            let mut flags = String::new();
            while j < f.len() && "-+ #0'".contains(f[j]) {
                flags.push(f[j]);
                j += 1;
            }
            let mut width = String::new();
            if j < f.len() && f[j] == '*' {
                let w = args.get(ai).cloned().unwrap_or_default();
                ai += 1;
                width = printf_num(&w).unwrap_or(0).to_string();
                if width.starts_with('-') {
                    flags.push('-');
                    width.remove(0);
                }
                j += 1;
            } else {
                while j < f.len() && f[j].is_ascii_digit() {
                    width.push(f[j]);
                    j += 1;
                }
            }
            let mut prec: Option<usize> = None;
            if j < f.len() && f[j] == '.' {
                j += 1;
                let mut p = String::new();
                if j < f.len() && f[j] == '*' {
                    let w = args.get(ai).cloned().unwrap_or_default();
                    ai += 1;
                    p = printf_num(&w).unwrap_or(0).to_string();
                    j += 1;
                } else {
                    while j < f.len() && f[j].is_ascii_digit() {
                        p.push(f[j]);
                        j += 1;
                    }
                }
                prec = Some(p.parse().unwrap_or(0));
            }
            let before_len = j;
            while j < f.len() && "hlLjzt".contains(f[j]) {
                j += 1;
            }
            if j >= f.len() && j > before_len {
                // a length modifier with no conversion after it
                errs.push(format!("%{}: invalid format character", f[j - 1]));
                return Some(out);
            }
            if j >= f.len() {
                out.extend(f[i..].iter().collect::<String>().bytes());
                break;
            }
            if f[j] == '(' {
                if let Some(close) = f[j..].iter().position(|c| *c == ')').map(|p| p + j) {
                    if f.get(close + 1) == Some(&'T') {
                        let tf: String = f[j + 1..close].iter().collect();
                        let arg = args.get(ai).cloned().unwrap_or_default();
                        ai += 1;
                        let t = match arg.trim() {
                            "" | "-1" | "-2" => now,
                            a => a.parse().unwrap_or(now),
                        };
                        let s = strftime(if tf.is_empty() { "%X" } else { &tf }, t, 0);
                        let w: usize = width.parse().unwrap_or(0).min(MAX_FIELD_WIDTH);
                        let s = if flags.contains('-') {
                            format!("{s:<w$}")
                        } else {
                            format!("{s:>w$}")
                        };
                        out.extend(s.bytes());
                        i = close + 2;
                        continue;
                    }
                }
            }
            let conv = f[j];
            i = j + 1;
            let arg = args.get(ai).cloned();
            if !matches!(conv, '%') {
                ai += 1;
            }
            let mut w: usize = width.parse().unwrap_or(0);
            if w > MAX_FIELD_WIDTH || prec.is_some_and(|p| p > MAX_FIELD_WIDTH) {
                errs.push(format!(
                    "field width or precision over {MAX_FIELD_WIDTH} is not supported"
                ));
                w = 0;
                prec = prec.map(|p| p.min(MAX_FIELD_WIDTH));
            }
            let left = flags.contains('-');
            let zero = flags.contains('0') && !left;
            let pad = |s: String, numeric: bool| -> String {
                // bash pads by bytes, not characters
                let len = s.len();
                if len >= w {
                    return s;
                }
                let fill = w - len;
                if left {
                    format!("{s}{}", " ".repeat(fill))
                } else if zero && numeric {
                    let (sign, digits) = if s.starts_with('-') || s.starts_with('+') {
                        (s[..1].to_string(), s[1..].to_string())
                    } else {
                        (String::new(), s.clone())
                    };
                    format!("{sign}{}{digits}", "0".repeat(fill))
                } else {
                    format!("{}{s}", " ".repeat(fill))
                }
            };
            let piece: String = match conv {
                's' => {
                    let mut s = arg.unwrap_or_default();
                    if let Some(p) = prec {
                        s = s.chars().take(p).collect();
                    }
                    pad(s, false)
                }
                'q' => pad(shell_quote(&arg.unwrap_or_default()), false),
                'b' => {
                    let (b, st) = backslash_b(&arg.unwrap_or_default());
                    let s = String::from_utf8_lossy(&b).into_owned();
                    let s = pad(s, false);
                    if st {
                        out.extend(s.bytes());
                        return Some(out);
                    }
                    s
                }
                'c' => pad(
                    arg.unwrap_or_default()
                        .chars()
                        .next()
                        .map(String::from)
                        .unwrap_or_else(|| "\0".to_string()),
                    false,
                ),
                'd' | 'i' | 'u' | 'x' | 'X' | 'o' => {
                    let a = arg.unwrap_or_default();
                    let v = match printf_num(&a) {
                        Ok(v) => v,
                        Err(e) => {
                            errs.push(e);
                            // GNU: leading digits are used
                            let d: String = a
                                .trim()
                                .chars()
                                .take_while(|c| c.is_ascii_digit() || *c == '-')
                                .collect();
                            d.parse().unwrap_or(0)
                        }
                    };
                    let mut s = match conv {
                        'x' => format!("{:x}", v),
                        'X' => format!("{:X}", v),
                        'o' => format!("{:o}", v),
                        'u' => format!("{}", v as u64),
                        _ => v.to_string(),
                    };
                    if flags.contains('#') && v != 0 {
                        s = match conv {
                            'x' => format!("0x{s}"),
                            'X' => format!("0X{s}"),
                            'o' => format!("0{s}"),
                            _ => s,
                        };
                    }
                    if let Some(p) = prec {
                        let neg = s.starts_with('-');
                        let digits = s.trim_start_matches('-');
                        if digits.len() < p {
                            s = format!(
                                "{}{}{}",
                                if neg { "-" } else { "" },
                                "0".repeat(p - digits.len()),
                                digits
                            );
                        }
                    }
                    if flags.contains('+') && v >= 0 && matches!(conv, 'd' | 'i') {
                        s = format!("+{s}");
                    } else if flags.contains(' ') && v >= 0 && matches!(conv, 'd' | 'i') {
                        s = format!(" {s}");
                    }
                    pad(s, prec.is_none())
                }
                'f' | 'F' | 'e' | 'E' | 'g' | 'G' => {
                    let a = arg.unwrap_or_default();
                    let v: f64 = a.trim().parse().unwrap_or_else(|_| {
                        if !a.trim().is_empty() {
                            errs.push(format!("{a}: invalid number"));
                        }
                        0.0
                    });
                    // Rust's formatter takes precisions up to 65,535; an f64 has at most
                    // 1,074 exact decimals, so digits past FLOAT_DIGITS are all zeros
                    let want = prec.unwrap_or(6);
                    let p = want.min(FLOAT_DIGITS);
                    let zeros = "0".repeat(want - p);
                    let mut s = match conv {
                        'f' | 'F' if v.is_finite() => format!("{v:.p$}{zeros}"),
                        'f' | 'F' => format!("{v:.p$}"),
                        'e' | 'E' => {
                            let s = format!("{v:.p$e}");
                            let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
                            let m = if v.is_finite() {
                                format!("{m}{zeros}")
                            } else {
                                m.to_string()
                            };
                            let e: i32 = e.parse().unwrap_or(0);
                            let s = format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
                            if conv == 'E' {
                                s.to_uppercase()
                            } else {
                                s
                            }
                        }
                        _ => {
                            let p = if p == 0 { 1 } else { p };
                            let exp = if v == 0.0 {
                                0
                            } else {
                                v.abs().log10().floor() as i32
                            };
                            if exp < -4 || exp >= p as i32 {
                                let s = format!("{:.*e}", p - 1, v);
                                let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
                                let m = if m.contains('.') && !flags.contains('#') {
                                    m.trim_end_matches('0').trim_end_matches('.')
                                } else {
                                    m
                                };
                                let e: i32 = e.parse().unwrap_or(0);
                                let s =
                                    format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
                                if conv == 'G' {
                                    s.to_uppercase()
                                } else {
                                    s
                                }
                            } else {
                                let dec = (p as i32 - 1 - exp).max(0) as usize;
                                let s = format!("{v:.dec$}");
                                if flags.contains('#') {
                                    // `#`: trailing zeros stay, and so does the point
                                    if s.contains('.') {
                                        s
                                    } else {
                                        format!("{s}.")
                                    }
                                } else if s.contains('.') {
                                    s.trim_end_matches('0').trim_end_matches('.').to_string()
                                } else {
                                    s
                                }
                            }
                        }
                    };
                    if flags.contains('+') && v >= 0.0 {
                        s = format!("+{s}");
                    }
                    pad(s, true)
                }
                other => {
                    errs.push(format!("%{other}: invalid format character"));
                    stop = true;
                    String::new()
                }
            };
            out.extend(piece.bytes());
            if stop {
                return Some(out);
            }
        }
        if ai >= args.len() || ai == start_ai {
            break;
        }
    }
    (out.len() <= max_len).then_some(out)
}

pub fn printf_cmd(it: &mut Interp<'_>, sh: &mut Shell, args: &[String]) -> R<i32> {
    let mut args = args;
    let mut var = None;
    if args.first().map(String::as_str) == Some("-v") {
        var = args.get(1).cloned();
        args = &args[args.len().min(2)..];
    }
    if args.first().map(String::as_str) == Some("--") {
        args = &args[1..];
    }
    let Some(fmt) = args.first() else {
        it.err(
            sh,
            "bash: printf: usage: printf [-v var] format [arguments]",
        );
        return Ok(2);
    };
    let mut errs = Vec::new();
    let now = it.w.vfs.now;
    // the format is held as chars (4 bytes each) and the output is one buffer: both count
    // against the memory budget, and the output may not outgrow what is left of it (nor a
    // quarter of it, the bound of one word)
    let mut held = crate::mem::Charge::default();
    held.add_bytes(fmt.len().saturating_mul(std::mem::size_of::<char>()));
    it.check_memory()?;
    let room =
        it.w.memory_limit
            .saturating_sub(it.memory_used())
            .min(it.w.memory_limit / 4);
    let max_len = usize::try_from(room).unwrap_or(usize::MAX);
    let Some(out) = printf_format_limited(fmt, &args[1..], &mut errs, now, max_len) else {
        return Err(it.interrupted());
    };
    drop(held);
    for e in &errs {
        it.err(sh, &format!("bash: printf: {e}"));
    }
    match var {
        Some(v) => {
            let s = String::from_utf8_lossy(&out).into_owned();
            if let Some((n, idx)) = v.strip_suffix(']').and_then(|x| x.split_once('[')) {
                let _ = crate::shell::set_elem(sh, n, idx, s);
            } else if let Err(m) = sh.set(&v, s) {
                it.err(sh, &format!("bash: printf: {m}"));
                return Ok(1);
            }
        }
        None => {
            it.write(sh, 1, &out)?;
        }
    }
    Ok(i32::from(!errs.is_empty()))
}

/// Normalises a signal spec to its trap name (`EXIT`, `ERR`, `INT`, ...).
pub fn signal_name(s: &str) -> Option<String> {
    let u = s.to_uppercase();
    let u = u.strip_prefix("SIG").unwrap_or(&u).to_string();
    let by_num = |n: u32| -> Option<&'static str> {
        Some(match n {
            0 => "EXIT",
            1 => "HUP",
            2 => "INT",
            3 => "QUIT",
            6 => "ABRT",
            9 => "KILL",
            10 => "USR1",
            12 => "USR2",
            13 => "PIPE",
            14 => "ALRM",
            15 => "TERM",
            17 => "CHLD",
            18 => "CONT",
            19 => "STOP",
            20 => "TSTP",
            _ => return None,
        })
    };
    if let Ok(n) = u.parse::<u32>() {
        return by_num(n).map(String::from);
    }
    match u.as_str() {
        "EXIT" | "ERR" | "DEBUG" | "RETURN" | "HUP" | "INT" | "QUIT" | "ABRT" | "KILL" | "USR1"
        | "USR2" | "PIPE" | "ALRM" | "TERM" | "CHLD" | "CONT" | "STOP" | "TSTP" => Some(u),
        _ => None,
    }
}

fn signal_number(name: &str) -> Option<i32> {
    Some(match name {
        "HUP" => 1,
        "INT" => 2,
        "QUIT" => 3,
        "ABRT" => 6,
        "KILL" => 9,
        "USR1" => 10,
        "USR2" => 12,
        "PIPE" => 13,
        "ALRM" => 14,
        "TERM" => 15,
        "CHLD" => 17,
        "CONT" => 18,
        "STOP" => 19,
        "TSTP" => 20,
        "EXIT" => 0,
        _ => return None,
    })
}

pub fn kill(it: &mut Interp<'_>, sh: &mut Shell, args: &[String]) -> R<i32> {
    let mut sig = 15;
    let mut i = 0;
    if let Some(a) = args.first() {
        if a == "-l" || a == "-L" {
            it.out(
                sh,
                "HUP INT QUIT ILL TRAP ABRT BUS FPE KILL USR1 SEGV USR2 PIPE ALRM TERM\n",
            )?;
            return Ok(0);
        }
        if a == "-s" || a == "-n" {
            let n = args
                .get(1)
                .and_then(|s| signal_name(s))
                .and_then(|n| signal_number(&n));
            match n {
                Some(n) => sig = n,
                None => {
                    it.err(sh, "bash: kill: invalid signal specification");
                    return Ok(1);
                }
            }
            i = 2;
        } else if let Some(s) = a.strip_prefix('-') {
            match signal_name(s).and_then(|n| signal_number(&n)) {
                Some(n) => sig = n,
                None => {
                    it.err(
                        sh,
                        &format!("bash: kill: {s}: invalid signal specification"),
                    );
                    return Ok(1);
                }
            }
            i = 1;
        }
    }
    if i >= args.len() {
        it.err(sh, "bash: kill: usage: kill [-s sigspec | -n signum | -sigspec] pid | jobspec ... or kill -l [sigspec]");
        return Ok(2);
    }
    let mut st = 0;
    for a in args.get(i..).unwrap_or(&[]) {
        it.check_time()?;
        let idx = if let Some(j) = a.strip_prefix('%') {
            j.parse::<usize>()
                .ok()
                .and_then(|n| n.checked_sub(1))
                .filter(|&n| n < sh.jobs.len())
        } else {
            a.parse::<u32>()
                .ok()
                .and_then(|p| sh.jobs.iter().position(|j| j.pid == p))
        };
        if let Some(idx) = idx {
            let now = it.w.clock_ns;
            let job = &mut sh.jobs[idx];
            if job.finish > now {
                if sig != 0 {
                    job.finish = now;
                    job.status = Some(signal_exit_code(sig));
                }
                continue;
            }
            if !job.reported && sig != 0 {
                // finished but not yet waited for: a zombie takes the signal silently
                continue;
            }
            fail(it, sh, format!("bash: kill: ({a}) - No such process"));
            st = 1;
            continue;
        }
        if let Ok(p) = a.parse::<u32>() {
            if p == sh.pid || p == sh.bashpid {
                if sig == 0 {
                    continue;
                }
                let name = [
                    "", "HUP", "INT", "QUIT", "", "", "ABRT", "", "", "KILL", "USR1", "", "USR2",
                    "PIPE", "ALRM", "TERM",
                ]
                .get(sig as usize)
                .copied()
                .unwrap_or("");
                if let Some(t) = sh.traps.get(name).cloned() {
                    if !t.is_empty() {
                        it.run_script(sh, &t)?;
                    }
                    continue;
                }
                if sh.traps.contains_key(name) {
                    continue;
                }
                return Err(Ctl::Exit(signal_exit_code(sig)));
            }
        }
        it.err(sh, &format!("bash: kill: ({a}) - No such process"));
        st = 1;
    }
    Ok(st)
}

fn shell_prog(it: &mut Interp<'_>, sh: &mut Shell, name: &str, args: &[String]) -> R<i32> {
    let mut opts = Opts::default();
    let mut i = 0;
    let mut script: Option<String> = None;
    let mut from_c = false;
    while i < args.len() {
        let a = &args[i];
        if a == "-c" {
            from_c = true;
            i += 1;
            continue;
        }
        if a == "-o" || a == "+o" {
            if let Some(o) = args.get(i + 1) {
                match o.as_str() {
                    "errexit" => opts.errexit = true,
                    "nounset" => opts.nounset = true,
                    "pipefail" => opts.pipefail = true,
                    _ => {}
                }
            }
            i += 2;
            continue;
        }
        if a == "--norc"
            || a == "--noprofile"
            || a == "--posix"
            || a == "-l"
            || a == "--login"
            || a == "-i"
            || a == "-s"
        {
            i += 1;
            continue;
        }
        if a == "--" {
            i += 1;
            break;
        }
        if a.starts_with('-') && a.len() > 1 && !a.starts_with("--") {
            let mut consumed = 0;
            for c in a[1..].chars() {
                match c {
                    'c' => from_c = true,
                    'e' => opts.errexit = true,
                    'u' => opts.nounset = true,
                    'x' => opts.xtrace = true,
                    'o' => {
                        // `-o NAME` inside a flag group takes the next word
                        consumed += 1;
                        match args.get(i + consumed).map(String::as_str) {
                            Some("errexit") => opts.errexit = true,
                            Some("nounset") => opts.nounset = true,
                            Some("pipefail") => opts.pipefail = true,
                            Some("xtrace") => opts.xtrace = true,
                            _ => {}
                        }
                    }
                    _ => {}
                }
            }
            i += 1 + consumed;
            continue;
        }
        break;
    }
    let rest = args.get(i..).unwrap_or(&[]);
    let (text, arg0, params) = if from_c {
        let Some(s) = rest.first() else {
            it.err(sh, &format!("{name}: -c: option requires an argument"));
            return Ok(2);
        };
        script = Some(s.clone());
        let arg0 = rest.get(1).cloned().unwrap_or_else(|| name.to_string());
        let params = if rest.len() > 2 {
            rest[2..].to_vec()
        } else {
            Vec::new()
        };
        (script.clone().unwrap_or_default(), arg0, params)
    } else if let Some(f) = rest.first() {
        match it.read_file(sh, f) {
            Ok(d) => (it.decode_output(&d)?, f.clone(), rest[1..].to_vec()),
            Err(e) => {
                it.err(sh, &format!("{name}: {f}: {}", e.msg()));
                return Ok(127);
            }
        }
    } else {
        let d = it.read_all(sh, 0);
        (it.decode_output(&d)?, name.to_string(), Vec::new())
    };
    let _ = script;
    it.run_child_script(sh, &text, arg0, params, &opts)
}

/// `Some(random)` when `f` names `/dev/zero` (false) or `/dev/urandom` (true), or is `-`
/// with stdin redirected from one.
fn endless_device(it: &mut Interp<'_>, sh: &Shell, f: &str) -> Option<bool> {
    use crate::vfs::{Dev, Kind};
    if f == "-" {
        let fd = sh.get_fd(0)?;
        let b = fd.borrow();
        return match &*b {
            crate::shell::Stream::Zero => Some(false),
            crate::shell::Stream::Random => Some(true),
            _ => None,
        };
    }
    let ino = it.w.vfs.resolve(&sh.cwd, f, true).ok()?;
    match it.w.vfs.get(ino).kind {
        Kind::Dev(Dev::Zero) => Some(false),
        Kind::Dev(Dev::Urandom) => Some(true),
        _ => None,
    }
}

fn read_input(it: &mut Interp<'_>, sh: &Shell, f: &str) -> Result<Vec<u8>, Errno> {
    if f == "-" {
        Ok(it.read_all(sh, 0))
    } else {
        it.read_file(sh, f)
    }
}

fn cat(it: &mut Interp<'_>, sh: &mut Shell, args: &[String]) -> R<i32> {
    let (fl, mut files) = flags(args);
    let number = fl.contains(&'n');
    let nonblank = fl.contains(&'b');
    let squeeze = fl.contains(&'s');
    let show_ends = fl.contains(&'E') || fl.contains(&'A') || fl.contains(&'e');
    let show_tabs = fl.contains(&'T') || fl.contains(&'A') || fl.contains(&'t');
    for c in &fl {
        if !"nbsEAetTuv".contains(*c) {
            return unsupported_opt(it, sh, "cat", &format!("-{c}"));
        }
    }
    if files.is_empty() {
        files.push("-".into());
    }
    let mut st = 0;
    let mut lineno = 0;
    for f in files {
        it.check_time()?;
        if let Some(random) = endless_device(it, sh, &f) {
            // stream it until the reader goes away (SIGPIPE) or a budget runs out
            loop {
                it.tick()?;
                let chunk = it.endless_bytes(random, 64 * 1024);
                it.write(sh, 1, &chunk)?;
            }
        }
        let data = match read_input(it, sh, &f) {
            Ok(d) => d,
            Err(e) => {
                fail(it, sh, format!("cat: {f}: {}", e.msg()));
                st = 1;
                continue;
            }
        };
        if !(number || nonblank || squeeze || show_ends || show_tabs) {
            it.write(sh, 1, &data)?;
            continue;
        }
        let mut out = Vec::new();
        let mut prev_blank = false;
        for line in data.split_inclusive(|b| *b == b'\n') {
            let has_nl = line.last() == Some(&b'\n');
            let body = if has_nl {
                &line[..line.len() - 1]
            } else {
                line
            };
            let blank = body.is_empty();
            if squeeze && blank && prev_blank {
                continue;
            }
            prev_blank = blank;
            if (number && !nonblank) || (nonblank && !blank) {
                lineno += 1;
                out.extend(format!("{lineno:>6}\t").bytes());
            }
            for &b in body {
                if show_tabs && b == b'\t' {
                    out.extend_from_slice(b"^I");
                } else {
                    out.push(b);
                }
            }
            if show_ends && has_nl {
                out.push(b'$');
            }
            if has_nl {
                out.push(b'\n');
            }
        }
        it.write(sh, 1, &out)?;
    }
    Ok(st)
}

fn mode_string(n: &crate::vfs::Inode) -> String {
    let mut s = String::new();
    s.push(n.type_char());
    let m = n.mode;
    for (i, c) in ['r', 'w', 'x', 'r', 'w', 'x', 'r', 'w', 'x']
        .iter()
        .enumerate()
    {
        let bit = 1 << (8 - i);
        let mut ch = if m & bit != 0 { *c } else { '-' };
        if i == 2 && m & 0o4000 != 0 {
            ch = if ch == 'x' { 's' } else { 'S' };
        }
        if i == 5 && m & 0o2000 != 0 {
            ch = if ch == 'x' { 's' } else { 'S' };
        }
        if i == 8 && m & 0o1000 != 0 {
            ch = if ch == 'x' { 't' } else { 'T' };
        }
        s.push(ch);
    }
    s
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];
const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
const LONG_MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const LONG_DAYS: [&str; 7] = [
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
];

/// (year, month 1-12, day, hour, min, sec, weekday index from Thursday, yday 0-based)
fn civil(t: i64) -> (i64, u32, u32, u32, u32, u32, usize, u32) {
    let days = t.div_euclid(86400);
    let secs = t.rem_euclid(86400);
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = if m <= 2 { y + 1 } else { y };
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let cum = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = cum[(m - 1) as usize] + d - 1 + if leap && m > 2 { 1 } else { 0 };
    (
        y,
        m,
        d,
        (secs / 3600) as u32,
        ((secs % 3600) / 60) as u32,
        (secs % 60) as u32,
        days.rem_euclid(7) as usize,
        yday,
    )
}

pub(crate) fn strftime(fmt: &str, t: i64, ns: u64) -> String {
    let (y, mo, d, h, mi, s, wd, yd) = civil(t);
    let mut out = String::new();
    let mut it = fmt.chars().peekable();
    while let Some(c) = it.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let Some(f) = it.next() else {
            out.push('%');
            break;
        };
        let f = if f == '-' || f == '_' || f == '0' {
            it.next().unwrap_or('%')
        } else {
            f
        };
        match f {
            'Y' => out.push_str(&y.to_string()),
            'C' => out.push_str(&format!("{:02}", y / 100)),
            'y' => out.push_str(&format!("{:02}", y % 100)),
            'm' => out.push_str(&format!("{mo:02}")),
            'd' => out.push_str(&format!("{d:02}")),
            'e' => out.push_str(&format!("{d:>2}")),
            'H' => out.push_str(&format!("{h:02}")),
            'k' => out.push_str(&format!("{h:>2}")),
            'I' => out.push_str(&format!("{:02}", if h % 12 == 0 { 12 } else { h % 12 })),
            'l' => out.push_str(&format!("{:>2}", if h % 12 == 0 { 12 } else { h % 12 })),
            'M' => out.push_str(&format!("{mi:02}")),
            'S' => out.push_str(&format!("{s:02}")),
            'N' => out.push_str(&format!("{:09}", ns % 1_000_000_000)),
            's' => out.push_str(&t.to_string()),
            'p' => out.push_str(if h < 12 { "AM" } else { "PM" }),
            'P' => out.push_str(if h < 12 { "am" } else { "pm" }),
            'a' => out.push_str(DAYS[wd]),
            'A' => out.push_str(LONG_DAYS[wd]),
            'b' | 'h' => out.push_str(MONTHS[(mo - 1) as usize]),
            'B' => out.push_str(LONG_MONTHS[(mo - 1) as usize]),
            'j' => out.push_str(&format!("{:03}", yd + 1)),
            'u' => out.push_str(&(((wd + 3) % 7) + 1).to_string()),
            'w' => out.push_str(&((wd + 4) % 7).to_string()),
            'F' => out.push_str(&format!("{y}-{mo:02}-{d:02}")),
            'T' => out.push_str(&format!("{h:02}:{mi:02}:{s:02}")),
            'R' => out.push_str(&format!("{h:02}:{mi:02}")),
            'D' => out.push_str(&format!("{mo:02}/{d:02}/{:02}", y % 100)),
            'Z' => out.push_str("UTC"),
            'z' => out.push_str("+0000"),
            'n' => out.push('\n'),
            't' => out.push('\t'),
            '%' => out.push('%'),
            'c' => out.push_str(&strftime("%a %b %e %H:%M:%S %Y", t, ns)),
            'x' => out.push_str(&strftime("%m/%d/%y", t, ns)),
            'X' => out.push_str(&strftime("%H:%M:%S", t, ns)),
            other => {
                out.push('%');
                out.push(other);
            }
        }
    }
    out
}

fn date(it: &mut Interp<'_>, sh: &mut Shell, args: &[String]) -> R<i32> {
    let mut t = it.w.vfs.now;
    let ns = it.w.clock_ns;
    let mut fmt = "%a %b %e %H:%M:%S %Z %Y".to_string();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if let Some(f) = a.strip_prefix('+') {
            fmt = f.to_string();
        } else if a == "-u" || a == "--utc" || a == "-R" {
            if a == "-R" {
                fmt = "%a, %d %b %Y %H:%M:%S %z".into();
            }
        } else if a == "-I" || a.starts_with("--iso-8601") || a.starts_with("-I") {
            let kind = a
                .split('=')
                .nth(1)
                .unwrap_or(if a.len() > 2 && a.starts_with("-I") {
                    &a[2..]
                } else {
                    "date"
                });
            fmt = match kind {
                "seconds" => "%Y-%m-%dT%H:%M:%S+00:00".into(),
                "minutes" => "%Y-%m-%dT%H:%M+00:00".into(),
                "hours" => "%Y-%m-%dT%H+00:00".into(),
                _ => "%Y-%m-%d".into(),
            };
        } else if a == "-d" || a.starts_with("--date=") || a.starts_with("-d") {
            let v = if a == "-d" {
                i += 1;
                args.get(i).cloned().unwrap_or_default()
            } else if let Some(v) = a.strip_prefix("--date=") {
                v.to_string()
            } else {
                a[2..].to_string()
            };
            if let Some(n) = v.strip_prefix('@').and_then(|n| n.parse::<i64>().ok()) {
                t = n;
            } else if v == "now" || v.is_empty() {
            } else {
                return it.unsupported(sh, &format!("date -d {v:?}"));
            }
        } else {
            return unsupported_opt(it, sh, "date", a);
        }
        i += 1;
    }
    let s = strftime(&fmt, t, ns);
    it.out(sh, &format!("{s}\n"))?;
    Ok(0)
}

struct LsOpts {
    long: bool,
    all: bool,
    almost: bool,
    recursive: bool,
    dir: bool,
    classify: bool,
    one: bool,
    reverse: bool,
    time: bool,
    size: bool,
    human: bool,
    inode: bool,
    blocks: bool,
}

fn ls(it: &mut Interp<'_>, sh: &mut Shell, args: &[String]) -> R<i32> {
    let (fl, mut ops) = flags(args);
    let mut o = LsOpts {
        long: false,
        all: false,
        almost: false,
        recursive: false,
        dir: false,
        classify: false,
        one: false,
        reverse: false,
        time: false,
        size: false,
        human: false,
        inode: false,
        blocks: false,
    };
    for c in fl {
        match c {
            'l' => o.long = true,
            'a' => o.all = true,
            'A' => o.almost = true,
            'R' => o.recursive = true,
            'd' => o.dir = true,
            'F' | 'p' => o.classify = true,
            '1' => o.one = true,
            'r' => o.reverse = true,
            't' => o.time = true,
            'S' => o.size = true,
            'h' => o.human = true,
            'i' => o.inode = true,
            's' => o.blocks = true,
            'n' | 'o' | 'g' | 'G' => o.long = true,
            'C' | 'x' | 'U' | 'f' | 'L' | 'H' => {}
            '\u{0}' => {
                ops.retain(|a| !a.starts_with("--"));
            }
            other => return unsupported_opt(it, sh, "ls", &format!("-{other}")),
        }
    }
    let _ = o.one;
    if ops.is_empty() {
        ops.push(".".into());
    }
    let mut st = 0;
    let mut files = Vec::new();
    let mut dirs = Vec::new();
    for p in &ops {
        it.check_time()?;
        match it.w.vfs.resolve(&sh.cwd, p, !o.long || p.ends_with('/')) {
            Ok(ino) => {
                let ino = if matches!(it.w.vfs.get(ino).kind, Kind::Symlink(_)) && !o.dir {
                    match it.w.vfs.resolve(&sh.cwd, p, true) {
                        Ok(t) if it.w.vfs.get(t).is_dir() => t,
                        _ => ino,
                    }
                } else {
                    ino
                };
                if it.w.vfs.get(ino).is_dir() && !o.dir {
                    dirs.push((p.clone(), ino));
                } else {
                    files.push((p.clone(), ino));
                }
            }
            Err(e) => {
                fail(it, sh, format!("ls: cannot access '{p}': {}", e.msg()));
                st = 2;
            }
        }
    }
    let mut out = String::new();
    sort_entries(it, &mut files, &o);
    if !files.is_empty() {
        out.push_str(&format_entries(it, sh, &files, &o, false));
    }
    dirs.sort_by(|a, b| a.0.cmp(&b.0));
    if o.reverse {
        dirs.reverse();
    }
    let show_header = ops.len() > 1 || o.recursive;
    let mut first = files.is_empty();
    // directories still to list, the next one last: a listed directory's path is dropped,
    // so a deep tree holds one path per pending directory (a queue that kept every path
    // held gigabytes for a 30,000-deep tree), and the output is written as it grows
    let mut pending: Vec<(String, usize)> = dirs;
    pending.reverse();
    while let Some((p, ino)) = pending.pop() {
        it.tick()?;
        if out.len() > 1 << 16 {
            if !it.out(sh, &out)? {
                return Ok(st);
            }
            out.clear();
        }
        if !first {
            out.push('\n');
        }
        first = false;
        if show_header {
            out.push_str(&format!("{p}:\n"));
        }
        let mut entries: Vec<(String, usize)> = Vec::new();
        let list = it.w.vfs.list(ino).unwrap_or_default();
        if o.all {
            entries.push((".".into(), ino));
            let parent = match &it.w.vfs.get(ino).kind {
                Kind::Dir(_, p) => *p,
                _ => ino,
            };
            entries.push(("..".into(), parent));
        }
        for (n, i) in list {
            if n.starts_with('.') && !o.all && !o.almost {
                continue;
            }
            entries.push((n, i));
        }
        sort_entries(it, &mut entries, &o);
        if o.long || o.blocks {
            let blocks: u64 = entries
                .iter()
                .map(|(_, i)| blocks_of(it.w.vfs.get(*i)))
                .sum();
            out.push_str(&format!("total {blocks}\n"));
        }
        out.push_str(&format_entries(it, sh, &entries, &o, true));
        if o.recursive {
            let subs: Vec<(String, usize)> = entries
                .iter()
                .filter(|(n, i)| n != "." && n != ".." && it.w.vfs.get(*i).is_dir())
                .map(|(n, i)| (format!("{}/{}", p.trim_end_matches('/'), n), *i))
                .collect();
            // depth-first: the subdirectories next, in order
            pending.extend(subs.into_iter().rev());
        }
    }
    it.out(sh, &out)?;
    Ok(st)
}

fn blocks_of(n: &crate::vfs::Inode) -> u64 {
    match &n.kind {
        Kind::Dir(..) => 4,
        Kind::File(d) => (d.len() as u64).div_ceil(4096) * 4,
        _ => 0,
    }
}

fn sort_entries(it: &mut Interp<'_>, e: &mut [(String, usize)], o: &LsOpts) {
    if o.time {
        e.sort_by(|a, b| {
            it.w.vfs
                .get(b.1)
                .mtime
                .cmp(&it.w.vfs.get(a.1).mtime)
                .then(a.0.cmp(&b.0))
        });
    } else if o.size {
        e.sort_by(|a, b| {
            it.w.vfs
                .get(b.1)
                .size()
                .cmp(&it.w.vfs.get(a.1).size())
                .then(a.0.cmp(&b.0))
        });
    } else {
        e.sort_by_key(|a| ls_key(&a.0));
    }
    if o.reverse {
        e.reverse();
    }
}

fn ls_key(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

fn human(n: u64) -> String {
    if n < 1024 {
        return n.to_string();
    }
    let units = ["K", "M", "G", "T"];
    let mut v = n as f64;
    let mut u = 0;
    v /= 1024.0;
    while v >= 1024.0 && u < 3 {
        v /= 1024.0;
        u += 1;
    }
    if v < 10.0 {
        format!("{:.1}{}", (v * 10.0).ceil() / 10.0, units[u])
    } else {
        format!("{}{}", v.ceil() as u64, units[u])
    }
}

fn format_entries(
    it: &mut Interp<'_>,
    _sh: &Shell,
    e: &[(String, usize)],
    o: &LsOpts,
    _in_dir: bool,
) -> String {
    let mut out = String::new();
    if o.long {
        let rows: Vec<(String, String, String, String, String)> = e
            .iter()
            .map(|(n, i)| {
                let node = it.w.vfs.get(*i).clone();
                let size = if o.human {
                    human(node.size())
                } else {
                    node.size().to_string()
                };
                let (_, mo, d, h, mi, _, _, _) = civil(node.mtime);
                let date = format!("{} {:>2} {:02}:{:02}", MONTHS[(mo - 1) as usize], d, h, mi);
                let mut name = n.clone();
                if let Kind::Symlink(t) = &node.kind {
                    name = format!("{n} -> {t}");
                } else if o.classify {
                    name.push_str(classify(&node));
                }
                (
                    mode_string(&node),
                    links(&it.w.vfs, *i).to_string(),
                    size,
                    date,
                    name,
                )
            })
            .collect();
        let wl = rows.iter().map(|r| r.1.len()).max().unwrap_or(1);
        let ws = rows.iter().map(|r| r.2.len()).max().unwrap_or(1);
        for r in rows {
            out.push_str(&format!(
                "{} {:>wl$} root root {:>ws$} {} {}\n",
                r.0, r.1, r.2, r.3, r.4
            ));
        }
    } else {
        for (n, i) in e {
            if o.inode {
                out.push_str(&format!("{} ", i + 1000));
            }
            if o.blocks {
                out.push_str(&format!("{} ", blocks_of(it.w.vfs.get(*i))));
            }
            out.push_str(n);
            if o.classify {
                let node = it.w.vfs.get(*i).clone();
                out.push_str(classify(&node));
            }
            out.push('\n');
        }
    }
    out
}

fn classify(n: &crate::vfs::Inode) -> &'static str {
    match n.kind {
        Kind::Dir(..) => "/",
        Kind::Symlink(_) => "@",
        _ if n.mode & 0o111 != 0 => "*",
        _ => "",
    }
}

fn mkdir(it: &mut Interp<'_>, sh: &mut Shell, args: &[String]) -> R<i32> {
    let mut parents = false;
    let mut verbose = false;
    let mut mode: Option<u32> = None;
    let mut ops = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a == "-m" {
            i += 1;
            mode = args.get(i).and_then(|m| u32::from_str_radix(m, 8).ok());
        } else if a == "--parents" {
            parents = true;
        } else if a.starts_with('-') && a.len() > 1 {
            for c in a[1..].chars() {
                match c {
                    'p' => parents = true,
                    'v' => verbose = true,
                    _ => return unsupported_opt(it, sh, "mkdir", &format!("-{c}")),
                }
            }
        } else {
            ops.push(a.clone());
        }
        i += 1;
    }
    let m = mode.unwrap_or(0o777 & !sh.umask);
    let mut st = 0;
    for p in ops {
        it.check_time()?;
        let r = if parents {
            let abs = normalize(&Vfs::absolute(&sh.cwd, &p));
            it.w.vfs.mkdir_p(&abs, 0o777 & !sh.umask).map(|ino| {
                if let Some(n) = it.w.vfs.get_mut(ino) {
                    if mode.is_some() {
                        n.mode = m;
                    }
                }
            })
        } else {
            it.w.vfs.mkdir(&sh.cwd, &p, m).map(|_| ())
        };
        match r {
            Ok(()) => {
                if verbose {
                    it.out(sh, &format!("mkdir: created directory '{p}'\n"))?;
                }
            }
            Err(e) => {
                fail(
                    it,
                    sh,
                    format!("mkdir: cannot create directory '{p}': {}", e.msg()),
                );
                st = 1;
            }
        }
    }
    Ok(st)
}

fn rmdir(it: &mut Interp<'_>, sh: &mut Shell, args: &[String]) -> R<i32> {
    let (fl, ops) = flags(args);
    let parents = fl.contains(&'p');
    let mut st = 0;
    for p in ops {
        it.check_time()?;
        let mut cur = p.trim_end_matches('/').to_string();
        loop {
            if let Err(e) = it.w.vfs.rmdir(&sh.cwd, &cur) {
                fail(
                    it,
                    sh,
                    format!("rmdir: failed to remove '{cur}': {}", e.msg()),
                );
                st = 1;
                break;
            }
            if !parents {
                break;
            }
            match cur.rfind('/') {
                Some(i) if i > 0 => cur.truncate(i),
                _ => break,
            }
        }
    }
    Ok(st)
}

fn rm(it: &mut Interp<'_>, sh: &mut Shell, args: &[String]) -> R<i32> {
    let (fl, ops) = flags(args);
    let force = fl.contains(&'f');
    let rec = fl.contains(&'r') || fl.contains(&'R');
    let dirs = fl.contains(&'d');
    let verbose = fl.contains(&'v');
    let interactive = fl.contains(&'i') && !force;
    let mut st = 0;
    if ops.is_empty() && !force {
        fail(it, sh, "rm: missing operand".into());
        return Ok(1);
    }
    let preserve_root = !args.iter().any(|a| a == "--no-preserve-root");
    for p in ops {
        it.check_time()?;
        let p = p.as_str();
        if rec && preserve_root && normalize(&Vfs::absolute(&sh.cwd, p)) == "/" {
            fail(it, sh, "rm: it is dangerous to operate recursively on '/'\nrm: use --no-preserve-root to override this failsafe".into());
            st = 1;
            continue;
        }
        let base = p.trim_end_matches('/').rsplit('/').next().unwrap_or("");
        if base == "." || base == ".." {
            fail(
                it,
                sh,
                format!("rm: refusing to remove '.' or '..' directory: skipping '{p}'"),
            );
            st = 1;
            continue;
        }
        match it.w.vfs.resolve(&sh.cwd, p, false) {
            Ok(ino) => {
                if interactive {
                    let node = it.w.vfs.get(ino);
                    let kind = match &node.kind {
                        Kind::Dir(..) => "directory",
                        Kind::Symlink(_) => "symbolic link",
                        _ if node.size() == 0 => "regular empty file",
                        _ => "regular file",
                    };
                    let _ = it.write(sh, 2, format!("rm: remove {kind} '{p}'? ").as_bytes())?;
                    let answer = it
                        .read_until(sh, 0, b'\n', None)
                        .map(|(l, _)| l)
                        .unwrap_or_default();
                    if !matches!(answer.first(), Some(b'y' | b'Y')) {
                        continue;
                    }
                }
                if it.w.vfs.get(ino).is_dir() {
                    if rec {
                        if let Ok((d, name)) = it.w.vfs.resolve_parent(&sh.cwd, p) {
                            it.w.vfs.remove_tree(d, &name);
                        }
                    } else if dirs {
                        if let Err(e) = it.w.vfs.rmdir(&sh.cwd, p) {
                            fail(it, sh, format!("rm: cannot remove '{p}': {}", e.msg()));
                            st = 1;
                        }
                    } else {
                        fail(it, sh, format!("rm: cannot remove '{p}': Is a directory"));
                        st = 1;
                        continue;
                    }
                } else if let Err(e) = it.w.vfs.unlink(&sh.cwd, p) {
                    fail(it, sh, format!("rm: cannot remove '{p}': {}", e.msg()));
                    st = 1;
                    continue;
                }
                if verbose {
                    it.out(sh, &format!("removed '{p}'\n"))?;
                }
            }
            Err(e) => {
                if !force {
                    fail(it, sh, format!("rm: cannot remove '{p}': {}", e.msg()));
                    st = 1;
                }
            }
        }
    }
    Ok(st)
}

/// The deepest directory tree `cp -r` copies (its paths would be far past `PATH_MAX`).
const MAX_COPY_DEPTH: usize = 2048;

/// Copies `src` to `dst_path`; `Ok(Err(message))` when the copy failed. Ticks once per
/// node, so a big tree runs out of fuel or time like any loop.
fn copy_node(
    it: &mut Interp<'_>,
    sh: &Shell,
    src: usize,
    dst_path: &str,
    rec: bool,
    preserve: bool,
    depth: usize,
) -> R<Result<(), String>> {
    it.tick()?;
    if depth > MAX_COPY_DEPTH {
        return Ok(Err("File name too long".into()));
    }
    stacker::maybe_grow(64 * 1024, 1024 * 1024, || {
        copy_node_at(it, sh, src, dst_path, rec, preserve, depth)
    })
}

fn copy_node_at(
    it: &mut Interp<'_>,
    sh: &Shell,
    src: usize,
    dst_path: &str,
    rec: bool,
    preserve: bool,
    depth: usize,
) -> R<Result<(), String>> {
    let node = it.w.vfs.get(src).clone();
    Ok(match &node.kind {
        Kind::Dir(map, _) => {
            if !rec {
                return Ok(Err("-r not specified; omitting directory".into()));
            }
            let d = match it.w.vfs.resolve(&sh.cwd, dst_path, true) {
                Ok(d) if it.w.vfs.get(d).is_dir() => d,
                Ok(_) => return Ok(Err("Not a directory".into())),
                Err(_) => match it.w.vfs.mkdir(&sh.cwd, dst_path, node.mode) {
                    Ok(d) => d,
                    Err(e) => return Ok(Err(e.msg().to_string())),
                },
            };
            let _ = d;
            let entries: Vec<(String, usize)> = map.iter().map(|(k, v)| (k.clone(), *v)).collect();
            for (n, i) in entries {
                let r = copy_node(
                    it,
                    sh,
                    i,
                    &format!("{}/{}", dst_path.trim_end_matches('/'), n),
                    rec,
                    preserve,
                    depth + 1,
                )?;
                if r.is_err() {
                    return Ok(r);
                }
            }
            Ok(())
        }
        Kind::Symlink(t) if rec => {
            let t = t.clone();
            it.w.vfs
                .symlink(&sh.cwd, &t, dst_path)
                .map_err(|e| e.msg().to_string())
        }
        _ => {
            let data = match &node.kind {
                Kind::File(d) => d.clone(),
                Kind::Exe(n) => format!("#!/bin/sh\n# shellbox-sim built-in {n}\n").into_bytes(),
                _ => Vec::new(),
            };
            let mode = node.mode & !sh.umask;
            let ino = match it.w.vfs.create(&sh.cwd, dst_path, mode, true) {
                Ok(i) => i,
                Err(e) => return Ok(Err(e.msg().to_string())),
            };
            if let Err(e) = it.w.vfs.set_data(ino, data) {
                return Ok(Err(e.msg().to_string()));
            }
            if preserve {
                let now = node.mtime;
                if let Some(n) = it.w.vfs.get_mut(ino) {
                    n.mode = node.mode;
                    n.mtime = now;
                }
            }
            Ok(())
        }
    })
}

/// Whether directory `dir` is `ancestor` or lies below it.
fn is_within(vfs: &crate::vfs::Vfs, mut dir: usize, ancestor: usize) -> bool {
    for _ in 0..=MAX_COPY_DEPTH * 4 {
        if dir == ancestor {
            return true;
        }
        match &vfs.get(dir).kind {
            Kind::Dir(_, parent) if *parent != dir => dir = *parent,
            _ => return false,
        }
    }
    true
}

fn cp(it: &mut Interp<'_>, sh: &mut Shell, args: &[String]) -> R<i32> {
    let (fl, ops) = flags(args);
    let rec = fl.iter().any(|c| matches!(c, 'r' | 'R' | 'a'));
    let preserve = fl.iter().any(|c| matches!(c, 'p' | 'a'));
    let no_clobber = fl.contains(&'n');
    if ops.len() < 2 {
        fail(it, sh, "cp: missing file operand".into());
        return Ok(1);
    }
    let (srcs, dst) = ops.split_at(ops.len() - 1);
    let dst = &dst[0];
    let dst_is_dir =
        it.w.vfs
            .resolve(&sh.cwd, dst, true)
            .is_ok_and(|i| it.w.vfs.get(i).is_dir());
    if srcs.len() > 1 && !dst_is_dir {
        fail(it, sh, format!("cp: target '{dst}' is not a directory"));
        return Ok(1);
    }
    let mut st = 0;
    for s in srcs {
        it.check_time()?;
        let src = match it.w.vfs.resolve(&sh.cwd, s, true) {
            Ok(i) => i,
            Err(e) => {
                fail(it, sh, format!("cp: cannot stat '{s}': {}", e.msg()));
                st = 1;
                continue;
            }
        };
        let target = if dst_is_dir {
            let base = s.trim_end_matches('/').rsplit('/').next().unwrap_or(s);
            format!("{}/{}", dst.trim_end_matches('/'), base)
        } else {
            dst.clone()
        };
        if no_clobber && it.w.vfs.resolve(&sh.cwd, &target, true).is_ok() {
            continue;
        }
        if let Ok(t) = it.w.vfs.resolve(&sh.cwd, &target, true) {
            if t == src {
                fail(
                    it,
                    sh,
                    format!("cp: '{s}' and '{target}' are the same file"),
                );
                st = 1;
                continue;
            }
        }
        if rec && it.w.vfs.get(src).is_dir() {
            // GNU cp refuses a directory into itself (it would never end)
            let into_itself =
                it.w.vfs
                    .resolve_parent(&sh.cwd, &target)
                    .is_ok_and(|(parent, _)| is_within(&it.w.vfs, parent, src));
            if into_itself {
                fail(
                    it,
                    sh,
                    format!("cp: cannot copy a directory, '{s}', into itself, '{target}'"),
                );
                st = 1;
                continue;
            }
        }
        if let Err(m) = copy_node(it, sh, src, &target, rec, preserve, 0)? {
            if m.starts_with("-r") {
                fail(it, sh, format!("cp: {m} '{s}'"));
            } else {
                fail(it, sh, format!("cp: cannot create '{target}': {m}"));
            }
            st = 1;
        }
    }
    Ok(st)
}

fn mv(it: &mut Interp<'_>, sh: &mut Shell, args: &[String]) -> R<i32> {
    let (fl, ops) = flags(args);
    let no_clobber = fl.contains(&'n');
    if ops.len() < 2 {
        fail(it, sh, "mv: missing file operand".into());
        return Ok(1);
    }
    let (srcs, dst) = ops.split_at(ops.len() - 1);
    let dst = &dst[0];
    let dst_is_dir =
        it.w.vfs
            .resolve(&sh.cwd, dst, true)
            .is_ok_and(|i| it.w.vfs.get(i).is_dir());
    if srcs.len() > 1 && !dst_is_dir {
        fail(it, sh, format!("mv: target '{dst}' is not a directory"));
        return Ok(1);
    }
    let mut st = 0;
    for s in srcs {
        it.check_time()?;
        if it.w.vfs.resolve(&sh.cwd, s, false).is_err() {
            fail(
                it,
                sh,
                format!("mv: cannot stat '{s}': No such file or directory"),
            );
            st = 1;
            continue;
        }
        if no_clobber {
            let target = if dst_is_dir {
                format!("{}/{}", dst, s.rsplit('/').next().unwrap_or(s))
            } else {
                dst.clone()
            };
            if it.w.vfs.resolve(&sh.cwd, &target, false).is_ok() {
                continue;
            }
        }
        let from = match s.trim_end_matches('/') {
            "" => "/",
            t => t,
        };
        let target = if dst_is_dir {
            format!(
                "{}/{}",
                dst.trim_end_matches('/'),
                from.rsplit('/').next().unwrap_or(from)
            )
        } else {
            dst.clone()
        };
        let same = match (
            it.w.vfs.resolve(&sh.cwd, from, false),
            it.w.vfs.resolve(&sh.cwd, &target, false),
        ) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        };
        if same {
            fail(
                it,
                sh,
                format!("mv: '{s}' and '{target}' are the same file"),
            );
            st = 1;
            continue;
        }
        if let Err(e) = it.w.vfs.rename(&sh.cwd, from, dst) {
            let msg = match e {
                Errno::Inval => {
                    format!("mv: cannot move '{s}' to a subdirectory of itself, '{dst}'")
                }
                _ => format!("mv: cannot move '{s}' to '{dst}': {}", e.msg()),
            };
            fail(it, sh, msg);
            st = 1;
        }
    }
    Ok(st)
}

fn touch(it: &mut Interp<'_>, sh: &mut Shell, args: &[String]) -> R<i32> {
    let mut no_create = false;
    let mut ops = Vec::new();
    let mut when: Option<i64> = None;
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a == "-c" || a == "--no-create" {
            no_create = true;
        } else if a == "-d" || a == "-t" || a == "-r" {
            i += 1;
            let v = args.get(i).cloned().unwrap_or_default();
            if a == "-r" {
                when =
                    it.w.vfs
                        .resolve(&sh.cwd, &v, true)
                        .ok()
                        .map(|x| it.w.vfs.get(x).mtime);
            } else if let Some(n) = v.strip_prefix('@').and_then(|n| n.parse().ok()) {
                when = Some(n);
            } else {
                return it.unsupported(sh, &format!("touch {a} {v:?}"));
            }
        } else if a == "-a" || a == "-m" || a == "-h" {
        } else if a.starts_with('-') && a.len() > 1 {
            return unsupported_opt(it, sh, "touch", a);
        } else {
            ops.push(a.clone());
        }
        i += 1;
    }
    let mut st = 0;
    let now = when.unwrap_or(it.w.vfs.now);
    for p in ops {
        it.check_time()?;
        match it.w.vfs.resolve(&sh.cwd, &p, true) {
            Ok(ino) => {
                if let Some(n) = it.w.vfs.get_mut(ino) {
                    n.mtime = now;
                }
            }
            Err(Errno::NoEnt) if no_create => {}
            Err(Errno::NoEnt) => match it.w.vfs.create(&sh.cwd, &p, 0o666 & !sh.umask, false) {
                Ok(ino) => {
                    if let Some(n) = it.w.vfs.get_mut(ino) {
                        n.mtime = now;
                    }
                }
                Err(e) => {
                    fail(it, sh, format!("touch: cannot touch '{p}': {}", e.msg()));
                    st = 1;
                }
            },
            Err(e) => {
                fail(it, sh, format!("touch: cannot touch '{p}': {}", e.msg()));
                st = 1;
            }
        }
    }
    Ok(st)
}

fn ln(it: &mut Interp<'_>, sh: &mut Shell, args: &[String]) -> R<i32> {
    let (fl, ops) = flags(args);
    let sym = fl.contains(&'s');
    let force = fl.contains(&'f');
    let no_deref = fl.contains(&'n') || fl.contains(&'T');
    if ops.is_empty() {
        fail(it, sh, "ln: missing file operand".into());
        return Ok(1);
    }
    let (target, link) = if ops.len() == 1 {
        let base = ops[0]
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or(&ops[0])
            .to_string();
        (ops[0].clone(), base)
    } else {
        (ops[0].clone(), ops[1].clone())
    };
    let link = if no_deref {
        link
    } else {
        match it.w.vfs.resolve(&sh.cwd, &link, true) {
            Ok(i) if it.w.vfs.get(i).is_dir() => format!(
                "{}/{}",
                link.trim_end_matches('/'),
                target
                    .trim_end_matches('/')
                    .rsplit('/')
                    .next()
                    .unwrap_or(&target)
            ),
            _ => link,
        }
    };
    if force {
        if let Ok(i) = it.w.vfs.resolve(&sh.cwd, &link, false) {
            if !it.w.vfs.get(i).is_dir() || no_deref {
                let _ = it.w.vfs.unlink(&sh.cwd, &link);
            }
        }
    }
    let r = if sym {
        it.w.vfs.symlink(&sh.cwd, &target, &link)
    } else {
        it.w.vfs.hard_link(&sh.cwd, &target, &link)
    };
    match r {
        Ok(()) => Ok(0),
        Err(Errno::Exist) => {
            fail(
                it,
                sh,
                format!(
                    "ln: failed to create {}link '{link}': File exists",
                    if sym { "symbolic " } else { "hard " }
                ),
            );
            Ok(1)
        }
        Err(e) => {
            fail(
                it,
                sh,
                format!("ln: failed to access '{target}': {}", e.msg()),
            );
            Ok(1)
        }
    }
}

pub(crate) fn apply_symbolic(mode: u32, spec: &str, umask: u32, is_dir: bool) -> Option<u32> {
    let mut m = mode;
    for clause in spec.split(',') {
        let cs: Vec<char> = clause.chars().collect();
        let mut i = 0;
        let mut who = 0u32;
        while i < cs.len() && "ugoa".contains(cs[i]) {
            who |= match cs[i] {
                'u' => 0o4700,
                'g' => 0o2070,
                'o' => 0o1007,
                _ => 0o7777,
            };
            i += 1;
        }
        let explicit = who != 0;
        if !explicit {
            who = 0o7777;
        }
        if i >= cs.len() {
            return None;
        }
        while i < cs.len() {
            let op = cs[i];
            if !"+-=".contains(op) {
                return None;
            }
            i += 1;
            let mut bits = 0u32;
            while i < cs.len() && "rwxXst".contains(cs[i]) {
                bits |= match cs[i] {
                    'r' => 0o444,
                    'w' => 0o222,
                    'x' => 0o111,
                    'X' => {
                        if is_dir || m & 0o111 != 0 {
                            0o111
                        } else {
                            0
                        }
                    }
                    's' => 0o6000,
                    _ => 0o1000,
                };
                i += 1;
            }
            let mut eff = bits & who;
            if !explicit {
                eff &= !umask;
            }
            match op {
                '+' => m |= eff,
                '-' => m &= !eff,
                _ => {
                    m &= !(who & 0o7777);
                    m |= eff;
                }
            }
        }
    }
    Some(m)
}

fn chmod(it: &mut Interp<'_>, sh: &mut Shell, args: &[String]) -> R<i32> {
    let mut rec = false;
    let mut ops = Vec::new();
    for a in args {
        if a == "-R" {
            rec = true;
        } else if a == "-v" || a == "-f" || a == "-c" {
        } else {
            ops.push(a.clone());
        }
    }
    if ops.len() < 2 {
        fail(it, sh, "chmod: missing operand".into());
        return Ok(1);
    }
    let spec = ops[0].clone();
    let mut st = 0;
    for p in &ops[1..] {
        it.check_time()?;
        let ino = match it.w.vfs.resolve(&sh.cwd, p, true) {
            Ok(i) => i,
            Err(e) => {
                fail(it, sh, format!("chmod: cannot access '{p}': {}", e.msg()));
                st = 1;
                continue;
            }
        };
        let mut targets = vec![ino];
        if rec {
            let mut k = 0;
            while k < targets.len() {
                if let Kind::Dir(m, _) = &it.w.vfs.get(targets[k]).kind {
                    let kids: Vec<usize> = m.values().copied().collect();
                    targets.extend(kids);
                }
                k += 1;
            }
        }
        for t in targets {
            let node = it.w.vfs.get(t).clone();
            if matches!(node.kind, Kind::Symlink(_)) {
                continue;
            }
            let new = if spec.chars().all(|c| c.is_digit(8)) {
                u32::from_str_radix(&spec, 8).ok()
            } else {
                apply_symbolic(node.mode, &spec, sh.umask, node.is_dir())
            };
            match new {
                Some(m) => {
                    if let Some(n) = it.w.vfs.get_mut(t) {
                        n.mode = m & 0o7777;
                    }
                }
                None => {
                    fail(it, sh, format!("chmod: invalid mode: '{spec}'"));
                    return Ok(1);
                }
            }
        }
    }
    Ok(st)
}

fn stat(it: &mut Interp<'_>, sh: &mut Shell, args: &[String]) -> R<i32> {
    let mut fmt: Option<String> = None;
    let mut printf = false;
    let mut follow = false;
    let mut ops = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a == "-c" || a == "--format" {
            i += 1;
            fmt = args.get(i).cloned();
        } else if let Some(f) = a.strip_prefix("--format=") {
            fmt = Some(f.to_string());
        } else if let Some(f) = a.strip_prefix("--printf=") {
            fmt = Some(f.to_string());
            printf = true;
        } else if a == "--printf" {
            i += 1;
            fmt = args.get(i).cloned();
            printf = true;
        } else if a == "-L" || a == "--dereference" {
            follow = true;
        } else if a.starts_with('-') && a.len() > 1 {
            return unsupported_opt(it, sh, "stat", a);
        } else {
            ops.push(a.clone());
        }
        i += 1;
    }
    let mut st = 0;
    let mut out = String::new();
    for p in ops {
        it.check_time()?;
        let ino = match it.w.vfs.resolve(&sh.cwd, &p, follow) {
            Ok(i) => i,
            Err(e) => {
                fail(it, sh, format!("stat: cannot statx '{p}': {}", e.msg()));
                st = 1;
                continue;
            }
        };
        let n = it.w.vfs.get(ino).clone();
        let ftype = match n.kind {
            Kind::Dir(..) => "directory",
            Kind::Symlink(_) => "symbolic link",
            Kind::Dev(_) => "character special file",
            Kind::File(ref d) if d.is_empty() => "regular empty file",
            _ => "regular file",
        };
        let (y, mo, d, h, mi, s, _, _) = civil(n.mtime);
        let ts = format!("{y}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}.000000000 +0000");
        match &fmt {
            Some(f) => {
                let mut line = String::new();
                let cs: Vec<char> = f.chars().collect();
                let mut k = 0;
                while k < cs.len() {
                    let c = cs[k];
                    if c == '\\' && printf && k + 1 < cs.len() {
                        match cs[k + 1] {
                            'n' => line.push('\n'),
                            't' => line.push('\t'),
                            '\\' => line.push('\\'),
                            o => {
                                line.push('\\');
                                line.push(o);
                            }
                        }
                        k += 2;
                        continue;
                    }
                    if c != '%' || k + 1 >= cs.len() {
                        line.push(c);
                        k += 1;
                        continue;
                    }
                    k += 1;
                    match cs[k] {
                        'a' => line.push_str(&format!("{:o}", n.mode & 0o7777)),
                        'A' => line.push_str(&mode_string(&n)),
                        's' => line.push_str(&n.size().to_string()),
                        'n' => line.push_str(&p),
                        'N' => {
                            if let Kind::Symlink(t) = &n.kind {
                                line.push_str(&format!("'{p}' -> '{t}'"));
                            } else {
                                line.push_str(&format!("'{p}'"));
                            }
                        }
                        'F' => line.push_str(ftype),
                        'U' | 'G' => line.push_str("root"),
                        'u' | 'g' => line.push('0'),
                        'h' => line.push_str(&links(&it.w.vfs, ino).to_string()),
                        'i' => line.push_str(&(ino + 1000).to_string()),
                        'Y' | 'X' | 'Z' | 'W' => line.push_str(&n.mtime.to_string()),
                        'y' | 'x' | 'z' | 'w' => line.push_str(&ts),
                        'b' => line.push_str(&blocks_of(&n).saturating_mul(2).to_string()),
                        'B' => line.push_str("512"),
                        'o' => line.push_str("4096"),
                        'd' | 'D' => line.push_str("2049"),
                        't' | 'T' => line.push('0'),
                        '%' => line.push('%'),
                        o => {
                            line.push('?');
                            let _ = o;
                        }
                    }
                    k += 1;
                }
                out.push_str(&line);
                if !printf {
                    out.push('\n');
                }
            }
            None => {
                out.push_str(&format!(
                    "  File: {p}\n  Size: {:<15} Blocks: {:<10} IO Block: 4096   {ftype}\nDevice: 801h/2049d\tInode: {:<11} Links: {}\nAccess: ({:04o}/{})  Uid: (    0/    root)   Gid: (    0/    root)\nAccess: {ts}\nModify: {ts}\nChange: {ts}\n Birth: -\n",
                    n.size(),
                    blocks_of(&n) * 2,
                    ino + 1000,
                    links(&it.w.vfs, ino),
                    n.mode & 0o7777,
                    mode_string(&n)
                ));
            }
        }
    }
    it.out(sh, &out)?;
    Ok(st)
}

fn env(it: &mut Interp<'_>, sh: &mut Shell, args: &[String]) -> R<i32> {
    let mut i = 0;
    let mut clear = false;
    let mut unset = Vec::new();
    while i < args.len() {
        let a = &args[i];
        if a == "-i" || a == "-" || a == "--ignore-environment" {
            clear = true;
        } else if a == "-u" {
            i += 1;
            if let Some(n) = args.get(i) {
                unset.push(n.clone());
            }
        } else if a == "--" {
            i += 1;
            break;
        } else if a.starts_with('-') && a.len() > 1 {
            return unsupported_opt(it, sh, "env", a);
        } else {
            break;
        }
        i += 1;
    }
    let mut child = sh.clone();
    if clear {
        child.vars.retain(|_, v| !v.exported);
    }
    for n in unset {
        child.vars.remove(&n);
    }
    while i < args.len() {
        if let Some((k, v)) = args[i].split_once('=') {
            let mut var = crate::shell::Var::s(v.to_string());
            var.exported = true;
            child.vars.insert(k.to_string(), var);
            i += 1;
        } else {
            break;
        }
    }
    if i >= args.len() {
        let mut out = String::new();
        let mut vars: Vec<(String, String)> = child.exported_env().into_iter().collect();
        vars.sort();
        for (k, v) in vars {
            out.push_str(&format!("{k}={v}\n"));
        }
        it.out(sh, &out)?;
        return Ok(0);
    }
    child.funcs.clear();
    let st = it.exec_external(&mut child, args[i..].to_vec())?;
    Ok(st)
}

/// Parses a sleep/timeout duration ("1.5", "2m", "infinity") into nanoseconds.
pub fn parse_duration(s: &str) -> Option<u64> {
    if s == "infinity" {
        return Some(u64::MAX / 4);
    }
    let (num, mult) = match s.chars().last()? {
        's' => (&s[..s.len() - 1], 1.0),
        'm' => (&s[..s.len() - 1], 60.0),
        'h' => (&s[..s.len() - 1], 3600.0),
        'd' => (&s[..s.len() - 1], 86400.0),
        _ => (s, 1.0),
    };
    let v: f64 = num.parse().ok()?;
    if v < 0.0 || !v.is_finite() {
        return None;
    }
    Some((v * mult * 1e9) as u64)
}

fn sleep(it: &mut Interp<'_>, sh: &mut Shell, args: &[String]) -> R<i32> {
    if args.is_empty() {
        fail(it, sh, "sleep: missing operand".into());
        return Ok(1);
    }
    let mut total: u64 = 0;
    for a in args {
        match parse_duration(a) {
            Some(n) => total = total.saturating_add(n),
            None => {
                fail(it, sh, format!("sleep: invalid time interval '{a}'"));
                return Ok(1);
            }
        }
    }
    it.sleep_ns(total)?;
    Ok(0)
}

fn timeout(it: &mut Interp<'_>, sh: &mut Shell, args: &[String]) -> R<i32> {
    let mut i = 0;
    let mut sig = 15;
    while i < args.len() && args[i].starts_with('-') {
        let a = &args[i];
        if a == "-s" || a == "-k" {
            if a == "-s" {
                sig = args
                    .get(i + 1)
                    .and_then(|s| signal_name(s))
                    .and_then(|n| signal_number(&n))
                    .unwrap_or(15);
            }
            i += 2;
            continue;
        }
        if a == "--preserve-status" || a == "--foreground" || a == "-v" {
            i += 1;
            continue;
        }
        if let Some(s) = a.strip_prefix("--signal=") {
            sig = signal_name(s).and_then(|n| signal_number(&n)).unwrap_or(15);
            i += 1;
            continue;
        }
        break;
    }
    let Some(d) = args.get(i).and_then(|d| parse_duration(d)) else {
        fail(it, sh, "timeout: invalid time interval".into());
        return Ok(125);
    };
    if i + 1 >= args.len() {
        fail(it, sh, "timeout: missing operand".into());
        return Ok(125);
    }
    let at = it.w.clock_ns.saturating_add(d);
    let id = if d == 0 {
        None
    } else {
        Some(it.push_deadline(at))
    };
    let mut child = sh.clone();
    child.funcs.clear();
    let r = it.exec_external(&mut child, args[i + 1..].to_vec());
    if let Some(id) = id {
        it.pop_deadline(id);
    }
    match r {
        Ok(s) => Ok(s),
        Err(Ctl::Exit(s)) => Ok(s),
        Err(Ctl::Timeout(t)) if Some(t) == id => Ok(if sig == 9 { 137 } else { 124 }),
        Err(e) => Err(e),
    }
}

fn basename(it: &mut Interp<'_>, sh: &mut Shell, args: &[String]) -> R<i32> {
    let mut multi = false;
    let mut suffix: Option<String> = None;
    let mut ops = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a == "-a" {
            multi = true;
        } else if a == "-s" {
            i += 1;
            suffix = args.get(i).cloned();
            multi = true;
        } else if a == "-z" {
        } else {
            ops.push(a.clone());
        }
        i += 1;
    }
    if ops.is_empty() {
        fail(it, sh, "basename: missing operand".into());
        return Ok(1);
    }
    if !multi && ops.len() == 2 {
        suffix = Some(ops.pop().unwrap_or_default());
    }
    let mut out = String::new();
    for p in ops {
        let t = p.trim_end_matches('/');
        let mut b = if t.is_empty() && p.starts_with('/') {
            "/".to_string()
        } else {
            t.rsplit('/').next().unwrap_or("").to_string()
        };
        if let Some(s) = &suffix {
            if b.len() > s.len() && b.ends_with(s.as_str()) {
                b.truncate(b.len() - s.len());
            }
        }
        out.push_str(&b);
        out.push('\n');
    }
    it.out(sh, &out)?;
    Ok(0)
}

fn dirname(it: &mut Interp<'_>, sh: &mut Shell, args: &[String]) -> R<i32> {
    if args.is_empty() {
        fail(it, sh, "dirname: missing operand".into());
        return Ok(1);
    }
    let mut out = String::new();
    for p in args {
        it.check_time()?;
        let t = p.trim_end_matches('/');
        let d = if t.is_empty() {
            if p.starts_with('/') {
                "/".to_string()
            } else {
                ".".to_string()
            }
        } else {
            match t.rfind('/') {
                None => ".".into(),
                Some(i) => {
                    let d = t[..i].trim_end_matches('/');
                    if d.is_empty() {
                        "/".into()
                    } else {
                        d.to_string()
                    }
                }
            }
        };
        out.push_str(&d);
        out.push('\n');
    }
    it.out(sh, &out)?;
    Ok(0)
}

fn seq(it: &mut Interp<'_>, sh: &mut Shell, args: &[String]) -> R<i32> {
    let mut sep = "\n".to_string();
    let mut width = false;
    let mut fmt: Option<String> = None;
    let mut nums = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a == "-s" {
            i += 1;
            sep = args.get(i).cloned().unwrap_or_default();
        } else if let Some(s) = a.strip_prefix("-s") {
            sep = s.to_string();
        } else if a == "-w" {
            width = true;
        } else if a == "-f" {
            i += 1;
            fmt = args.get(i).cloned();
        } else {
            nums.push(a.clone());
        }
        i += 1;
    }
    let parse = |s: &str| s.parse::<f64>().ok();
    let vals: Option<Vec<f64>> = nums.iter().map(|s| parse(s)).collect();
    let Some(vals) = vals.filter(|v| !v.is_empty() && v.len() <= 3) else {
        fail(it, sh, "seq: invalid argument".into());
        return Ok(1);
    };
    let (first, inc, last) = match vals.len() {
        1 => (1.0, 1.0, vals[0]),
        2 => (vals[0], 1.0, vals[1]),
        _ => (vals[0], vals[1], vals[2]),
    };
    if inc == 0.0 {
        fail(it, sh, "seq: invalid Zero increment value: '0'".into());
        return Ok(1);
    }
    let prec = nums
        .iter()
        .map(|s| s.split_once('.').map(|(_, f)| f.len()).unwrap_or(0))
        .max()
        .unwrap_or(0);
    let render = |v: f64| -> String {
        match &fmt {
            Some(f) => {
                String::from_utf8_lossy(&printf_format(f, &[format!("{v}")], &mut Vec::new()))
                    .into_owned()
            }
            None => format!("{v:.prec$}"),
        }
    };
    // -w pads to the widest of the first and last values
    let count = ((last - first) / inc + 1e-9).floor();
    let w = if count >= 0.0 {
        render(first).len().max(render(first + inc * count).len())
    } else {
        0
    };
    // whole numbers print as integers (what `{v:.0}` prints for them, without the float
    // formatter's exact-digits path, which was most of `seq 1 100000`'s time); `-0` keeps
    // its sign through the float path
    let whole = |v: f64| v.fract() == 0.0 && v.abs() < 1e15;
    let ints = fmt.is_none()
        && prec == 0
        && whole(first)
        && whole(inc)
        && whole(last)
        && !(first == 0.0 && first.is_sign_negative());
    let (first_i, inc_i) = (first as i64, inc as i64);
    if ints && !width && count >= 0.0 {
        return seq_ints(it, sh, first_i, inc_i, count as u64, sep.as_bytes());
    }
    // written in chunks, so a reader like `head` can stop an endless sequence (SIGPIPE)
    let mut out = String::new();
    let mut k = 0u64;
    let mut s = String::new();
    loop {
        let v = first + inc * k as f64;
        if (inc > 0.0 && v > last + 1e-9) || (inc < 0.0 && v < last - 1e-9) {
            break;
        }
        s.clear();
        if ints {
            push_int(&mut s, first_i + inc_i * k as i64);
        } else {
            s.push_str(&render(v));
        }
        if width {
            let neg = s.starts_with('-');
            let digits = s.trim_start_matches('-').to_string();
            let _ = std::mem::take(&mut s);
            s = format!(
                "{}{:0>w$}",
                if neg { "-" } else { "" },
                digits,
                w = if neg { w.saturating_sub(1) } else { w }
            );
        }
        if k > 0 {
            out.push_str(&sep);
        }
        out.push_str(&s);
        k += 1;
        if out.len() >= 64 * 1024 {
            it.out(sh, &out)?;
            out.clear();
            it.tick()?;
        }
    }
    if k > 0 {
        out.push('\n');
    }
    it.out(sh, &out)?;
    Ok(0)
}

/// `seq` of whole numbers without `-w` or `-f`: `count + 1` values from `first` by `inc`,
/// each written in decimal straight into the output bytes (no string per value), in
/// chunks of 64 KiB with a tick between, so a reader like `head` can stop an endless
/// sequence (SIGPIPE) and the deadline is seen.
fn seq_ints(
    it: &mut Interp<'_>,
    sh: &mut Shell,
    first: i64,
    inc: i64,
    count: u64,
    sep: &[u8],
) -> R<i32> {
    const CHUNK: usize = 64 * 1024;
    // a chunk is filled by index (plain stores: a copy call per value of five bytes was
    // most of `seq 100000`'s time), with room for one more value and separator
    let mut out = vec![0u8; CHUNK + 21 + sep.len()];
    let mut n = 0usize;
    let mut v = first;
    for k in 0..=count {
        if k > 0 {
            for &b in sep {
                out[n] = b;
                n += 1;
            }
            v = v.wrapping_add(inc);
        }
        if v < 0 {
            out[n] = b'-';
            n += 1;
        }
        let mut m = v.unsigned_abs();
        let mut digits = 1;
        let mut p = m;
        while p >= 10 {
            p /= 10;
            digits += 1;
        }
        for d in (n..n + digits).rev() {
            out[d] = b'0' + (m % 10) as u8;
            m /= 10;
        }
        n += digits;
        if n >= CHUNK {
            it.write(sh, 1, &out[..n])?;
            n = 0;
            it.tick()?;
        }
    }
    out[n] = b'\n';
    it.write(sh, 1, &out[..n + 1])?;
    Ok(0)
}

/// Appends `n` in decimal.
fn push_int(out: &mut String, n: i64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    let mut m = n.unsigned_abs();
    loop {
        i -= 1;
        buf[i] = b'0' + (m % 10) as u8;
        m /= 10;
        if m == 0 {
            break;
        }
    }
    if n < 0 {
        out.push('-');
    }
    out.extend(buf[i..].iter().map(|&b| b as char));
}

fn head_tail(it: &mut Interp<'_>, sh: &mut Shell, args: &[String], head: bool) -> R<i32> {
    let prog = if head { "head" } else { "tail" };
    let mut lines: i64 = 10;
    let mut bytes: Option<i64> = None;
    let mut from_start = false;
    let mut quiet = false;
    let mut verbose = false;
    let mut files = Vec::new();
    let mut i = 0;
    let parse_n = |s: &str, from_start: &mut bool| -> Option<i64> {
        if let Some(r) = s.strip_prefix('+') {
            *from_start = true;
            r.parse().ok()
        } else {
            s.parse().ok()
        }
    };
    while i < args.len() {
        let a = &args[i];
        if a == "-n" || a == "--lines" {
            i += 1;
            lines = match args.get(i).and_then(|s| parse_n(s, &mut from_start)) {
                Some(n) => n,
                None => {
                    fail(it, sh, format!("{prog}: invalid number of lines"));
                    return Ok(1);
                }
            };
        } else if a == "-c" || a == "--bytes" {
            i += 1;
            bytes = args.get(i).and_then(|s| parse_n(s, &mut from_start));
        } else if let Some(n) = a.strip_prefix("-n") {
            lines = parse_n(n, &mut from_start).unwrap_or(10);
        } else if let Some(n) = a.strip_prefix("-c") {
            bytes = parse_n(n, &mut from_start);
        } else if let Some(n) = a.strip_prefix("--lines=") {
            lines = parse_n(n, &mut from_start).unwrap_or(10);
        } else if a == "-q" || a == "--quiet" || a == "--silent" {
            quiet = true;
        } else if a == "-v" || a == "--verbose" {
            verbose = true;
        } else if a.len() > 1 && a.starts_with('-') && a[1..].chars().all(|c| c.is_ascii_digit()) {
            lines = a[1..].parse().unwrap_or(10);
        } else if a == "-f" || a == "-F" {
            return unsupported_opt(it, sh, prog, a);
        } else if a == "-" || !a.starts_with('-') {
            files.push(a.clone());
        } else {
            return unsupported_opt(it, sh, prog, a);
        }
        i += 1;
    }
    if files.is_empty() {
        files.push("-".into());
    }
    let multi = (files.len() > 1 && !quiet) || verbose;
    let mut st = 0;
    let mut first = true;
    for f in &files {
        it.check_time()?;
        // an endless device is streamed, as GNU head reads it: up to the count asked for,
        // or until the reader goes away or a budget runs out (the output limit, the time)
        let endless_count = match bytes {
            Some(b) if head && !from_start => u64::try_from(b).ok().map(|b| (b, false)),
            None if head && !from_start => u64::try_from(lines).ok().map(|n| (n, true)),
            _ => None,
        };
        if let Some((mut left, by_lines)) = endless_count {
            if let Some(random) = endless_device(it, sh, f) {
                if multi {
                    let name = if f == "-" { "standard input" } else { f };
                    let h = format!("{}==> {name} <==\n", if first { "" } else { "\n" });
                    it.write(sh, 1, h.as_bytes())?;
                }
                first = false;
                while left > 0 {
                    it.tick()?;
                    let want = if by_lines {
                        64 << 10
                    } else {
                        left.min(64 << 10) as usize
                    };
                    let chunk = it.endless_bytes(random, want);
                    let mut end = chunk.len();
                    if by_lines {
                        for (i, _) in chunk.iter().enumerate().filter(|(_, c)| **c == b'\n') {
                            left -= 1;
                            if left == 0 {
                                end = i + 1;
                                break;
                            }
                        }
                    } else {
                        left -= end as u64;
                    }
                    if !it.write(sh, 1, &chunk[..end])? {
                        return Ok(1);
                    }
                }
                continue;
            }
        }
        // standard input is moved out of its pipe, not copied, and charged while held; the
        // result is written from it in pieces (no copy of it in between): a pipeline of
        // 2 GB through head held three uncharged copies (5.9 GB for `yes | head -c 2e9`)
        let mut held = crate::mem::Charge::default();
        let input = if f == "-" {
            let d = it.take_all(sh, 0);
            held.add_bytes(d.len());
            it.check_memory()?;
            Ok(d)
        } else {
            read_input(it, sh, f)
        };
        let data = match input {
            Ok(d) => d,
            Err(e) => {
                fail(
                    it,
                    sh,
                    format!("{prog}: cannot open '{f}' for reading: {}", e.msg()),
                );
                st = 1;
                continue;
            }
        };
        if multi {
            let name = if f == "-" { "standard input" } else { f };
            let header = format!("{}==> {name} <==\n", if first { "" } else { "\n" });
            it.write(sh, 1, header.as_bytes())?;
        }
        first = false;
        let slice: &[u8] = if let Some(b) = bytes {
            let n = data.len() as i64;
            if head {
                if b >= 0 {
                    &data[..b.min(n) as usize]
                } else {
                    &data[..(n + b).max(0) as usize]
                }
            } else if from_start {
                &data[((b - 1).max(0)).min(n) as usize..]
            } else {
                &data[(n - b.abs()).max(0) as usize..]
            }
        } else if head && lines >= 0 {
            // the first `lines` lines: found by scanning, not by listing every line's end
            let cut = match usize::try_from(lines).ok().and_then(|l| l.checked_sub(1)) {
                None => 0,
                Some(k) => memchr::memchr_iter(b'\n', &data)
                    .nth(k)
                    .map_or(data.len(), |i| i + 1),
            };
            &data[..cut]
        } else {
            let mut ends: Vec<usize> = data
                .iter()
                .enumerate()
                .filter(|(_, c)| **c == b'\n')
                .map(|(i, _)| i + 1)
                .collect();
            if data.last().is_some_and(|c| *c != b'\n') {
                ends.push(data.len());
            }
            let total = ends.len() as i64;
            let start_of = |k: i64| -> usize {
                if k <= 0 {
                    0
                } else {
                    ends[(k - 1).min(total - 1) as usize]
                }
            };
            if head {
                if lines >= 0 {
                    &data[..start_of(lines.min(total))]
                } else {
                    &data[..start_of((total + lines).max(0))]
                }
            } else if from_start {
                &data[start_of((lines - 1).max(0).min(total))..]
            } else {
                &data[start_of((total - lines.abs()).max(0))..]
            }
        };
        for piece in slice.chunks(1 << 20) {
            if !it.write(sh, 1, piece)? {
                break;
            }
        }
    }
    Ok(st)
}

/// `wc`'s counts of `data`: newlines, words, characters, bytes and the longest line in
/// characters (the last three as `String::from_utf8_lossy` decodes it: an invalid sequence
/// is one character). Without `text` only the newlines and bytes are counted (the rest are
/// 0). Goes through the input in pieces of about 1 MiB, looking at the clock between them,
/// so a count over hundreds of megabytes still ends at the command's deadline; a piece ends
/// before an ASCII byte, where no UTF-8 sequence can be cut.
fn wc_counts(it: &mut Interp<'_>, data: &[u8], text: bool) -> R<[u64; 5]> {
    const PIECE: usize = 1 << 20;
    let (mut lines, mut words, mut chars, mut longest) = (0u64, 0u64, 0u64, 0u64);
    let (mut in_word, mut line_chars, mut after_cr) = (false, 0u64, false);
    let mut start = 0;
    while start < data.len() {
        it.check_time()?;
        let mut end = (start + PIECE).min(data.len());
        while end < data.len() && data[end] >= 0x80 {
            end += 1;
        }
        let piece = &data[start..end];
        lines += piece.iter().filter(|b| **b == b'\n').count() as u64;
        if text {
            for ch in String::from_utf8_lossy(piece).chars() {
                chars += 1;
                if ch == '\n' {
                    // a line ends at "\n" or "\r\n", as `str::lines` splits
                    longest = longest.max(line_chars - u64::from(after_cr));
                    line_chars = 0;
                } else {
                    line_chars += 1;
                }
                after_cr = ch == '\r';
                if ch.is_whitespace() {
                    in_word = false;
                } else if !in_word {
                    in_word = true;
                    words += 1;
                }
            }
        }
        start = end;
    }
    longest = longest.max(line_chars);
    Ok([lines, words, chars, data.len() as u64, longest])
}

fn wc(it: &mut Interp<'_>, sh: &mut Shell, args: &[String]) -> R<i32> {
    let (mut fl, mut files) = flags(args);
    for a in args.iter().take_while(|a| *a != "--") {
        match a.as_str() {
            "--lines" => fl.push('l'),
            "--words" => fl.push('w'),
            "--bytes" => fl.push('c'),
            "--chars" => fl.push('m'),
            "--max-line-length" => fl.push('L'),
            _ if a.starts_with("--") => {
                return unsupported_opt(it, sh, "wc", a);
            }
            _ => {}
        }
    }
    let mut l = fl.contains(&'l');
    let mut w = fl.contains(&'w');
    let mut c = fl.contains(&'c');
    let m = fl.contains(&'m');
    let big_l = fl.contains(&'L');
    for f in &fl {
        if !"lwcmL".contains(*f) {
            return unsupported_opt(it, sh, "wc", &format!("-{f}"));
        }
    }
    if !l && !w && !c && !m && !big_l {
        l = true;
        w = true;
        c = true;
    }
    let stdin = files.is_empty();
    if stdin {
        files.push("-".into());
    }
    let mut rows: Vec<(Vec<u64>, String)> = Vec::new();
    let mut total = [0u64; 5];
    let mut st = 0;
    let mut nonregular = false;
    for f in &files {
        it.check_time()?;
        // GNU wc pads to 7 columns for input it cannot size up front (pipes, devices)
        let regular = if f == "-" {
            sh.get_fd(0)
                .is_some_and(|fd| matches!(&*fd.borrow(), crate::shell::Stream::File { .. }))
        } else {
            it.w.vfs
                .resolve(&sh.cwd, f, true)
                .map_or(true, |i| matches!(it.w.vfs.get(i).kind, Kind::File(_)))
        };
        if !regular {
            nonregular = true;
        }
        // standard input unread so far (a pipe) is moved out, not copied, and charged
        // to the memory budget while it is counted
        let mut held = crate::mem::Charge::default();
        let read = if f == "-" {
            let d = it.take_all(sh, 0);
            held.add_bytes(d.len());
            Ok(d)
        } else {
            read_input(it, sh, f)
        };
        let data = match read {
            Ok(d) => d,
            Err(e) => {
                fail(it, sh, format!("wc: {f}: {}", e.msg()));
                st = 1;
                continue;
            }
        };
        let counts = wc_counts(it, &data, w || m || big_l)?;
        drop(data);
        drop(held);
        let mut row = Vec::new();
        for (k, on) in [l, w, m, c, big_l].iter().enumerate() {
            total[k] = if k == 4 {
                total[k].max(counts[k])
            } else {
                total[k] + counts[k]
            };
            if *on {
                row.push(counts[k]);
            }
        }
        rows.push((
            row,
            if f == "-" && stdin {
                String::new()
            } else {
                f.clone()
            },
        ));
    }
    if files.len() > 1 {
        let row: Vec<u64> = [l, w, m, c, big_l]
            .iter()
            .enumerate()
            .filter(|(_, on)| **on)
            .map(|(k, _)| total[k])
            .collect();
        rows.push((row, "total".into()));
    }
    let ncols = rows.first().map(|r| r.0.len()).unwrap_or(0);
    let width = if ncols == 1 && rows.len() == 1 {
        1
    } else {
        let maxv = total[3].max(total.iter().copied().max().unwrap_or(0));
        let w = maxv.to_string().len();
        if nonregular {
            w.max(7)
        } else {
            w
        }
    };
    let mut out = String::new();
    for (row, name) in rows {
        let cols: Vec<String> = row.iter().map(|v| format!("{v:>width$}")).collect();
        out.push_str(&cols.join(" "));
        if !name.is_empty() {
            out.push(' ');
            out.push_str(&name);
        }
        out.push('\n');
    }
    it.out(sh, &out)?;
    Ok(st)
}

fn tee(it: &mut Interp<'_>, sh: &mut Shell, args: &[String]) -> R<i32> {
    let (fl, files) = flags(args);
    let append = fl.contains(&'a');
    let data = it.read_all(sh, 0);
    let mut st = 0;
    for f in &files {
        it.check_time()?;
        match it.open(sh, f, true, append, !append, false) {
            Ok(fd) => {
                // write through fd 1 set to the file for this one write (a copy of the
                // whole shell per file was O(state) per operand)
                let saved = sh.get_fd(1);
                sh.set_fd(1, Some(fd));
                let r = it.write(sh, 1, &data);
                sh.set_fd(1, saved);
                r?;
            }
            Err(e) => {
                fail(it, sh, format!("tee: {f}: {}", e.msg()));
                st = 1;
            }
        }
    }
    it.write(sh, 1, &data)?;
    Ok(st)
}

/// The link count `ls -l` and `stat` show: a directory has one per subdirectory, plus its
/// own entry and `.`.
fn links(vfs: &Vfs, ino: usize) -> u32 {
    let node = vfs.get(ino);
    match &node.kind {
        Kind::Dir(map, _) => 2 + map.values().filter(|c| vfs.get(**c).is_dir()).count() as u32,
        _ => node.nlink,
    }
}
