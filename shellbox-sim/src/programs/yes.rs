//! `yes` (GNU coreutils 9.1): prints its operands (or `y`) as a line until the reader
//! stops (SIGPIPE, status 141) or the deadline or fuel ends the command.

use super::opts::{Arg, Parser};
use super::Ctx;
use crate::shell::R;

pub(super) fn main(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new("yes", args, &["help", "version"]);
    let mut words = Vec::new();
    loop {
        match p.next_in(cx)? {
            Ok(Some(Arg::Operand(o))) => words.push(o),
            Ok(Some(Arg::Long(l))) => {
                return cx.unsupported_status(&format!("yes option --{l}"), 1)
            }
            Ok(Some(Arg::Short(c))) => return super::usage(cx, p.invalid_short(c), 1),
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, 1),
        }
    }
    let line = if words.is_empty() {
        "y\n".to_string()
    } else {
        format!("{}\n", words.join(" "))
    };
    // 8 KiB chunks, as GNU yes writes its buffer
    let mut chunk = Vec::with_capacity(8192 + line.len());
    while chunk.len() < 8192 {
        chunk.extend_from_slice(line.as_bytes());
    }
    loop {
        cx.tick()?;
        if !cx.out(&chunk)? {
            return Ok(1);
        }
    }
}
