//! `paste` (GNU coreutils 9.1): joins corresponding lines of files (`-` is standard input,
//! read a line at a time when named more than once), `-d`/`--delimiters` LIST (cycled;
//! `\n`, `\t`, `\\`, `\0` for none), `-s`/`--serial`, `-z`/`--zero-terminated`.

use super::opts::{Arg, Parser};
use super::Ctx;
use crate::shell::R;

/// GNU's usage status for paste.
const USAGE: i32 = 1;

/// The delimiter list with its escapes read; an empty entry is `\0` (no delimiter).
fn delimiters(text: &str) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        let d = if c == '\\' {
            match chars.next() {
                Some('n') => b"\n".to_vec(),
                Some('t') => b"\t".to_vec(),
                Some('0') => Vec::new(),
                Some('\\') | None => b"\\".to_vec(),
                Some(o) => o.to_string().into_bytes(),
            }
        } else {
            c.to_string().into_bytes()
        };
        out.push(d);
    }
    out
}

pub(super) fn main(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args().to_vec();
    let mut p = Parser::new(
        "paste",
        &args,
        &["delimiters", "serial", "zero-terminated", "help", "version"],
    );
    let mut delims = vec![b"\t".to_vec()];
    let mut serial = false;
    let mut term = b'\n';
    let mut files = Vec::new();
    loop {
        match p.next() {
            Ok(Some(Arg::Short('d'))) | Ok(Some(Arg::Long("delimiters"))) => match p.value() {
                Ok(v) => delims = delimiters(&v),
                Err(u) => return super::usage(cx, u, USAGE),
            },
            Ok(Some(Arg::Short('s'))) | Ok(Some(Arg::Long("serial"))) => serial = true,
            Ok(Some(Arg::Short('z'))) | Ok(Some(Arg::Long("zero-terminated"))) => term = b'\0',
            Ok(Some(Arg::Long(l))) => return cx.unsupported(&format!("paste option --{l}")),
            Ok(Some(Arg::Short(c))) => return super::usage(cx, p.invalid_short(c), USAGE),
            Ok(Some(Arg::Operand(o))) => files.push(o),
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, USAGE),
        }
    }
    if delims.is_empty() {
        // GNU: `-d ''` means no delimiter
        delims.push(Vec::new());
    }
    if files.is_empty() {
        files.push("-".into());
    }
    // every input's lines; standard input is read once and dealt out in turn
    let mut stdin: Option<Vec<Vec<u8>>> = None;
    let stdin_uses = files.iter().filter(|f| *f == "-").count();
    let mut inputs: Vec<Vec<Vec<u8>>> = Vec::new();
    for (k, f) in files.iter().enumerate() {
        cx.check_time()?;
        if f == "-" {
            if stdin.is_none() {
                let d = cx.read_input("-").unwrap_or_default();
                stdin = Some(split(&d, term));
            }
            if serial {
                inputs.push(if k == files.iter().position(|f| f == "-").unwrap_or(k) {
                    stdin.clone().unwrap_or_default()
                } else {
                    Vec::new()
                });
            } else {
                // the n-th `-` takes lines n, n + uses, n + 2 * uses, ...
                let nth = files[..k].iter().filter(|f| *f == "-").count();
                let all = stdin.as_deref().unwrap_or(&[]);
                inputs.push(all.iter().skip(nth).step_by(stdin_uses).cloned().collect());
            }
            continue;
        }
        match cx.read_input(f) {
            Ok(d) => inputs.push(split(&d, term)),
            Err(e) => {
                cx.err_line(&format!("paste: {f}: {e}"));
                return Ok(1);
            }
        }
    }
    let held: usize = inputs.iter().flatten().map(|l| l.len() + 24).sum();
    cx.hold(held)?;
    let mut out = Vec::new();
    if serial {
        for lines in &inputs {
            cx.tick()?;
            for (i, l) in lines.iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(&delims[(i - 1) % delims.len()]);
                }
                out.extend_from_slice(l);
            }
            out.push(term);
        }
    } else {
        let rows = inputs.iter().map(Vec::len).max().unwrap_or(0);
        for r in 0..rows {
            if r % 1024 == 1023 {
                cx.hold(out.len())?;
                cx.tick()?;
            }
            for (i, lines) in inputs.iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(&delims[(i - 1) % delims.len()]);
                }
                if let Some(l) = lines.get(r) {
                    out.extend_from_slice(l);
                }
            }
            out.push(term);
        }
    }
    cx.out(&out)?;
    Ok(0)
}

/// Lines of `d` without their terminators (a last unterminated line counts).
fn split(d: &[u8], term: u8) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = d.split(|b| *b == term).map(<[u8]>::to_vec).collect();
    if d.is_empty() || d.last() == Some(&term) {
        v.pop();
    }
    v
}
