//! `rev` (util-linux 2.38.1, as Debian 12 ships it): reverses the characters of each line.

use super::opts::{Arg, Parser};
use super::Ctx;
use crate::shell::R;

/// util-linux's usage status for rev.
const USAGE: i32 = 1;

pub(super) fn main(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new("rev", args, &["help", "version"]);
    let term = b'\n';
    let mut files = Vec::new();
    loop {
        match p.next_in(cx)? {
            Ok(Some(Arg::Long(l))) => return cx.unsupported(&format!("rev option --{l}")),
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
                cx.err_line(&format!("rev: cannot open {f}: {e}"));
                status = 1;
                continue;
            }
        };
        let mut out = Vec::with_capacity(data.len());
        for (k, line) in data.split_inclusive(|b| *b == term).enumerate() {
            if k % 1024 == 1023 {
                cx.tick()?;
            }
            let (body, end) = match line.split_last() {
                Some((&t, body)) if t == term => (body, true),
                _ => (line, false),
            };
            match std::str::from_utf8(body) {
                Ok(s) => {
                    for c in s.chars().rev() {
                        out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                    }
                }
                Err(_) => out.extend(body.iter().rev()),
            }
            if end {
                out.push(term);
            }
        }
        cx.out(&out)?;
    }
    Ok(status)
}
