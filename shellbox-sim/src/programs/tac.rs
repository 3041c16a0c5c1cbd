//! `tac` (GNU coreutils 9.1): `-s`/`--separator=STRING`, `-b`/`--before`; `-r`/`--regex`
//! fails visibly (unsupported).

use super::opts::{Arg, Parser};
use super::Ctx;
use crate::shell::R;

/// GNU's usage status for tac.
const USAGE: i32 = 1;

pub(super) fn main(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new(
        "tac",
        args,
        &["before", "regex", "separator", "help", "version"],
    );
    let mut sep = b"\n".to_vec();
    let mut before = false;
    let mut files = Vec::new();
    loop {
        match p.next_in(cx)? {
            Ok(Some(Arg::Short('b') | Arg::Long("before"))) => before = true,
            Ok(Some(Arg::Short('s') | Arg::Long("separator"))) => match p.value() {
                Ok(v) if v.is_empty() => {
                    cx.err_line("tac: separator cannot be empty");
                    return Ok(USAGE);
                }
                Ok(v) => sep = v.into_bytes(),
                Err(u) => {
                    cx.err_line(&u.0);
                    return Ok(USAGE);
                }
            },
            Ok(Some(Arg::Short('r') | Arg::Long("regex"))) => {
                return cx.unsupported("tac option --regex")
            }
            Ok(Some(Arg::Long(l))) => return cx.unsupported(&format!("tac option --{l}")),
            Ok(Some(Arg::Short(c))) => {
                cx.err_line(&p.invalid_short(c).0);
                return Ok(USAGE);
            }
            Ok(Some(Arg::Operand(o))) => files.push(o),
            Ok(None) => break,
            Err(u) => {
                cx.err_line(&u.0);
                return Ok(USAGE);
            }
        }
    }
    if files.is_empty() {
        files.push("-".into());
    }
    let mut status = 0;
    for f in files {
        cx.check_time()?;
        let data = match cx.read_input(&f) {
            Ok(d) => d,
            Err(e) => {
                cx.err_line(&format!("tac: failed to open '{f}' for reading: {e}"));
                status = 1;
                continue;
            }
        };
        cx.tick()?;
        // records with their separator attached (after it, or before it with -b)
        let mut records: Vec<&[u8]> = Vec::new();
        let mut start = 0;
        let mut i = 0;
        while i + sep.len() <= data.len() {
            if data[i..].starts_with(&sep) {
                if before {
                    if i > start {
                        records.push(&data[start..i]);
                    }
                    start = i;
                } else {
                    records.push(&data[start..i + sep.len()]);
                    start = i + sep.len();
                }
                i += sep.len();
            } else {
                i += 1;
            }
        }
        if start < data.len() {
            records.push(&data[start..]);
        }
        let mut out = Vec::with_capacity(data.len());
        for r in records.iter().rev() {
            out.extend_from_slice(r);
        }
        cx.out(&out)?;
    }
    Ok(status)
}
