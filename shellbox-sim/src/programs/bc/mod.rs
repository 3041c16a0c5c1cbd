//! `bc` (GNU bc 1.07.1): arbitrary-precision decimal arithmetic. Options `-l`/`--mathlib`
//! (the math library `s c a l e j` and `scale=20`), `-q`/`--quiet`, `-i`/`--interactive`
//! (accepted; nothing changes without a terminal); file operands run first, then standard
//! input. The language: numbers of any size, `scale`, `ibase` (2–16), `obase` (2 up),
//! `last`/`.`, variables and arrays (dynamic scoping of parameters and `auto`s as GNU's),
//! `define` (also `define void`), `if`/`else`, `while`, `for`, `break`, `continue`,
//! `return`, `print`, strings, `halt`, `quit` (which ends bc as soon as it is read, as
//! GNU's does), `limits`, `length`, `scale`, `sqrt`, comments. Output lines are wrapped
//! with `\` at `BC_LINE_LENGTH` (default 70; 0 never wraps) as GNU wraps them. Errors print
//! as GNU prints them (`(standard_in) 2: syntax error`, `Runtime error (func=(main),
//! adr=N): Divide by zero`) — except that the bytecode address `adr` is always 0 here — and
//! bc goes on with the next line; the status is 0 unless a file operand cannot be read
//! (1). Not supported (refused visibly): `-s`/`-w` (POSIX checks), `read()`, `warranty`.
//!
//! A huge computation (`2^10000000` and the like) is done in pieces that look at the
//! deadline, so it ends at the machine's timeout; a number larger than the memory the
//! machine has left ends it with the memory budget's error.

mod num;
mod parse;
mod run;

use super::opts::{Arg, Parser};
use super::Ctx;
use crate::shell::{Ctl, R};
use num::Halt;
use parse::Item;

/// The stack a bc run gets (mapped lazily): the parser recurses about ten frames per
/// level of nesting, up to its bound of 10,000 levels.
const BC_STACK: usize = 256 << 20;

pub(super) fn main(cx: &mut Ctx<'_, '_>) -> R<i32> {
    stacker::grow(BC_STACK, || main_inner(cx))
}

fn main_inner(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new(
        "bc",
        args,
        &[
            "mathlib",
            "quiet",
            "interactive",
            "standard",
            "warn",
            "help",
            "version",
        ],
    );
    let mut bc = run::Bc::new();
    let mut files = Vec::new();
    loop {
        match p.next_in(cx)? {
            Ok(Some(Arg::Short('l'))) => bc.set_mathlib(),
            Ok(Some(Arg::Long("mathlib"))) => bc.set_mathlib(),
            Ok(Some(Arg::Short('q' | 'i'))) => {}
            Ok(Some(Arg::Long("quiet" | "interactive"))) => {}
            Ok(Some(Arg::Short(c))) if "swhv".contains(c) => {
                return cx.unsupported_status(&format!("bc option -{c}"), 1)
            }
            Ok(Some(Arg::Long(l))) => return cx.unsupported_status(&format!("bc option --{l}"), 1),
            Ok(Some(Arg::Short(c))) => {
                cx.err_line(&format!("bc: invalid option -- '{c}'"));
                cx.err_line("usage: bc [options] [file ...]");
                return Ok(1);
            }
            Ok(Some(Arg::Operand(o))) => files.push(o),
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, 1),
        }
    }
    if let Some(l) = cx.env("BC_LINE_LENGTH") {
        let n = atoi(&l);
        bc.line_len = if n != 0 && n < 3 { 70 } else { n as usize };
    }
    bc.mem_limit = cx.memory_left() / 2;
    let mut inputs: Vec<(String, String)> = Vec::new();
    for f in &files {
        inputs.push((f.clone(), f.clone()));
    }
    inputs.push(("-".into(), "(standard_in)".into()));
    for (path, label) in inputs {
        cx.check_time()?;
        let data = match cx.read_input(&path) {
            Ok(d) => d,
            Err(_) => {
                flush(cx, &mut bc)?;
                cx.err_line(&format!("File {path} is unavailable."));
                return Ok(1);
            }
        };
        let text = String::from_utf8_lossy(&data).into_owned();
        let mut parser = parse::Parser::new(&text);
        loop {
            let item = parser.item();
            for (msg, line) in std::mem::take(&mut parser.notes) {
                bc.note(format!("{label} {line}: {msg}"));
            }
            let r = match item {
                Item::Eof => break,
                Item::Quit => {
                    flush(cx, &mut bc)?;
                    return Ok(0);
                }
                Item::Limits => {
                    limits(&mut bc);
                    Ok(())
                }
                Item::Error(msg, line) => {
                    bc.note(format!("{label} {line}: {msg}"));
                    Ok(())
                }
                Item::Define(name, f) => {
                    bc.funcs.insert(name, f);
                    Ok(())
                }
                Item::Stmts(s) => bc.run_item(&s),
            };
            match r {
                Ok(()) => {}
                Err(Halt::Error(m)) => bc.runtime_error(&m),
                Err(Halt::Exit) => {
                    flush(cx, &mut bc)?;
                    return Ok(0);
                }
                Err(Halt::Stop) => {
                    flush(cx, &mut bc)?;
                    return Err(cx.interrupted());
                }
                Err(Halt::Memory(n)) => {
                    flush(cx, &mut bc)?;
                    cx.hold(n as usize)?;
                    return Err(Ctl::Budget(format!(
                        "memory limit exceeded: bc needs a number of {n} bytes, more than \
                         the machine's memory budget has left"
                    )));
                }
            }
            if !flush(cx, &mut bc)? {
                return Ok(1);
            }
        }
    }
    Ok(0)
}

/// Writes what bc printed and its diagnostics; `Ok(false)` when standard output is closed.
fn flush(cx: &mut Ctx<'_, '_>, bc: &mut run::Bc) -> R<bool> {
    let out = std::mem::take(&mut bc.out);
    let mut from = 0;
    let mut open = true;
    for (at, e) in std::mem::take(&mut bc.errs) {
        if at > from && open {
            open = cx.out(&out[from..at])?;
        }
        from = from.max(at);
        cx.err_line(&e);
    }
    if from < out.len() && open {
        open = cx.out(&out[from..])?;
    }
    Ok(open)
}

/// C's `atoi`: optional blanks and sign, then digits; 0 for anything else.
fn atoi(s: &str) -> i64 {
    let t = s.trim_start();
    let (neg, t) = match t.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let d: String = t
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .take(18)
        .collect();
    let n = d.parse::<i64>().unwrap_or(0);
    if neg {
        -n
    } else {
        n
    }
}

/// What `limits` prints (GNU bc 1.07.1 on a 64-bit host).
fn limits(bc: &mut run::Bc) {
    bc.out.extend_from_slice(
        b"BC_BASE_MAX     = 2147483647\n\
BC_DIM_MAX      = 16777215\n\
BC_SCALE_MAX    = 2147483647\n\
BC_STRING_MAX   = 2147483647\n\
MAX Exponent    = 9223372036854775807\n\
Number of vars  = 32767\n",
    );
}
