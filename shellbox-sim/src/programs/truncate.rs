//! `truncate` (GNU coreutils 9.1): `-s`/`--size` SIZE (`N`, `+N`, `-N`, `<N`, `>N`, `/N`,
//! `%N`, with the suffixes `K M G T` (powers of 1024) and `KB MB GB TB` (of 1000)),
//! `-c`/`--no-create`. A size past the machine's disk budget fails as a full disk does.

use super::opts::{Arg, Parser};
use super::Ctx;
use crate::shell::R;
use crate::vfs::{Errno, Kind};

/// GNU's usage status for truncate.
const USAGE: i32 = 1;

#[derive(Clone, Copy)]
enum Op {
    Set,
    Grow,
    Shrink,
    AtMost,
    AtLeast,
    RoundDown,
    RoundUp,
}

/// `SIZE` as GNU reads it; `None` when it is not one.
fn parse_size(text: &str) -> Option<(Op, u64)> {
    let (op, rest) = match text.chars().next()? {
        '+' => (Op::Grow, &text[1..]),
        '-' => (Op::Shrink, &text[1..]),
        '<' => (Op::AtMost, &text[1..]),
        '>' => (Op::AtLeast, &text[1..]),
        '/' => (Op::RoundDown, &text[1..]),
        '%' => (Op::RoundUp, &text[1..]),
        _ => (Op::Set, text),
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let n: u64 = rest[..digits].parse().ok()?;
    let unit: u64 = match &rest[digits..] {
        "" => 1,
        "K" | "KiB" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        "T" | "TiB" => 1 << 40,
        "KB" => 1000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        _ => return None,
    };
    Some((op, n.checked_mul(unit)?))
}

pub(super) fn main(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new("truncate", args, &["no-create", "size", "help", "version"]);
    let mut size: Option<String> = None;
    let mut no_create = false;
    let mut files = Vec::new();
    loop {
        match p.next_in(cx)? {
            Ok(Some(Arg::Short('c'))) | Ok(Some(Arg::Long("no-create"))) => no_create = true,
            Ok(Some(Arg::Short('s'))) | Ok(Some(Arg::Long("size"))) => match p.value() {
                Ok(v) => size = Some(v),
                Err(u) => return super::usage(cx, u, USAGE),
            },
            Ok(Some(Arg::Long(l))) => return cx.unsupported(&format!("truncate option --{l}")),
            Ok(Some(Arg::Short(c))) if c == 'o' || c == 'r' => {
                return cx.unsupported(&format!("truncate option -{c}"))
            }
            Ok(Some(Arg::Short(c))) => return super::usage(cx, p.invalid_short(c), USAGE),
            Ok(Some(Arg::Operand(o))) => files.push(o),
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, USAGE),
        }
    }
    let Some(size) = size else {
        cx.err_line(
            "truncate: you must specify either \u{2018}--size\u{2019} or \u{2018}--reference\u{2019}\nTry 'truncate --help' for more information.",
        );
        return Ok(USAGE);
    };
    let Some((op, n)) = parse_size(&size) else {
        cx.err_line(&format!("truncate: Invalid number: \u{2018}{size}\u{2019}"));
        return Ok(USAGE);
    };
    if matches!(op, Op::RoundDown | Op::RoundUp) && n == 0 {
        cx.err_line("truncate: division by zero");
        return Ok(USAGE);
    }
    if files.is_empty() {
        cx.err_line("truncate: missing file operand\nTry 'truncate --help' for more information.");
        return Ok(USAGE);
    }
    let mut status = 0;
    for f in files {
        cx.check_time()?;
        cx.tick()?;
        let cwd = cx.cwd().to_string();
        let ino = match cx.vfs().resolve(&cwd, &f, true) {
            Ok(i) => Ok(i),
            Err(Errno::NoEnt) if no_create => continue,
            Err(Errno::NoEnt) => cx.create_file(&f),
            Err(e) => Err(e),
        };
        let ino = match ino {
            Ok(i) => i,
            Err(e) => {
                cx.err_line(&format!(
                    "truncate: cannot open '{f}' for writing: {}",
                    e.msg()
                ));
                status = 1;
                continue;
            }
        };
        if !matches!(cx.vfs().get(ino).kind, Kind::File(_)) {
            cx.err_line(&format!(
                "truncate: cannot open '{f}' for writing: Is a directory"
            ));
            status = 1;
            continue;
        }
        let old = cx.vfs().data(ino).len() as u64;
        let new = match op {
            Op::Set => n,
            Op::Grow => old.saturating_add(n),
            Op::Shrink => old.saturating_sub(n),
            Op::AtMost => old.min(n),
            Op::AtLeast => old.max(n),
            Op::RoundDown => old / n * n,
            Op::RoundUp => old.div_ceil(n).saturating_mul(n),
        };
        // past the disk budget before a byte is allocated: a full disk
        let used = cx.vfs().used_bytes;
        let limit = cx.vfs().disk_limit;
        let fits = used.saturating_sub(old).saturating_add(new) <= limit;
        let Some(len) = usize::try_from(new).ok().filter(|_| fits) else {
            cx.err_line(&format!(
                "truncate: failed to truncate '{f}' at {new} bytes: No space left on device"
            ));
            status = 1;
            continue;
        };
        let mut data = cx.vfs().data(ino).to_vec();
        data.resize(len, 0);
        if cx.vfs().set_data(ino, data).is_err() {
            cx.err_line(&format!(
                "truncate: failed to truncate '{f}' at {new} bytes: No space left on device"
            ));
            status = 1;
            continue;
        }
        cx.hold(0)?;
    }
    Ok(status)
}
