//! `dirname` (GNU coreutils 9.1): `-z`/`--zero`.

use super::opts::{Arg, Parser};
use super::Ctx;
use crate::shell::R;

/// GNU's usage status for dirname.
const USAGE: i32 = 1;

pub(super) fn main(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new("dirname", args, &["zero", "help", "version"]);
    let mut zero = false;
    let mut names = Vec::new();
    loop {
        let arg = match p.next_in(cx)? {
            Ok(Some(a)) => a,
            Ok(None) => break,
            Err(u) => {
                cx.err_line(&u.0);
                return Ok(USAGE);
            }
        };
        match arg {
            Arg::Short('z') | Arg::Long("zero") => zero = true,
            Arg::Long(l) => return cx.unsupported(&format!("dirname option --{l}")),
            Arg::Short(c) => {
                cx.err_line(&p.invalid_short(c).0);
                return Ok(USAGE);
            }
            Arg::Operand(o) => names.push(o),
        }
    }
    if names.is_empty() {
        cx.err_line("dirname: missing operand\nTry 'dirname --help' for more information.");
        return Ok(USAGE);
    }
    let mut out = Vec::new();
    for name in &names {
        cx.tick()?;
        out.extend_from_slice(dir(name).as_bytes());
        out.push(if zero { 0 } else { b'\n' });
    }
    cx.out(&out)?;
    Ok(0)
}

/// `name` without its last component (POSIX dirname).
fn dir(name: &str) -> String {
    let t = name.trim_end_matches('/');
    if t.is_empty() {
        return if name.starts_with('/') { "/" } else { "." }.to_string();
    }
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
}
