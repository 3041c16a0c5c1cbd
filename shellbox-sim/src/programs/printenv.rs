//! `printenv` (GNU coreutils 9.1): the whole environment, or the values of the named
//! variables (status 1 when one is not set); `-0`/`--null`.

use super::opts::{Arg, Parser};
use super::Ctx;
use crate::shell::R;

/// GNU's usage status for printenv.
const USAGE: i32 = 2;

pub(super) fn main(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new("printenv", args, &["null", "help", "version"]);
    let mut term = b'\n';
    let mut names = Vec::new();
    loop {
        match p.next_in(cx)? {
            Ok(Some(Arg::Operand(o))) => names.push(o),
            Ok(Some(Arg::Short('0') | Arg::Long("null"))) => term = 0,
            Ok(Some(Arg::Long(l))) => {
                return cx.unsupported_status(&format!("printenv option --{l}"), USAGE)
            }
            Ok(Some(Arg::Short(c))) => return super::usage(cx, p.invalid_short(c), USAGE),
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, USAGE),
        }
    }
    let mut out = Vec::new();
    let mut status = 0;
    if names.is_empty() {
        for (k, v) in cx.environ() {
            out.extend_from_slice(format!("{k}={v}").as_bytes());
            out.push(term);
        }
    } else {
        for n in &names {
            match cx.env(n).filter(|_| !n.contains('=')) {
                Some(v) => {
                    out.extend_from_slice(v.as_bytes());
                    out.push(term);
                }
                None => status = 1,
            }
        }
    }
    cx.out(&out)?;
    Ok(status)
}
