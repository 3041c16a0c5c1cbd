//! `basename` (GNU coreutils 9.1): `-a`/`--multiple`, `-s`/`--suffix=SUFFIX` (implies
//! `-a`), `-z`/`--zero`.

use super::opts::{Arg, Parser};
use super::Ctx;
use crate::shell::R;

/// GNU's usage status for basename.
const USAGE: i32 = 1;

pub(super) fn main(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new(
        "basename",
        args,
        &["multiple", "suffix", "zero", "help", "version"],
    );
    let mut multiple = false;
    let mut suffix: Option<String> = None;
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
            Arg::Short('a') | Arg::Long("multiple") => multiple = true,
            Arg::Short('s') | Arg::Long("suffix") => match p.value() {
                Ok(v) => {
                    suffix = Some(v);
                    multiple = true;
                }
                Err(u) => {
                    cx.err_line(&u.0);
                    return Ok(USAGE);
                }
            },
            Arg::Short('z') | Arg::Long("zero") => zero = true,
            Arg::Long(l) => return cx.unsupported(&format!("basename option --{l}")),
            Arg::Short(c) => {
                cx.err_line(&p.invalid_short(c).0);
                return Ok(USAGE);
            }
            Arg::Operand(o) => names.push(o),
        }
    }
    if names.is_empty() {
        cx.err_line("basename: missing operand\nTry 'basename --help' for more information.");
        return Ok(USAGE);
    }
    if !multiple {
        if names.len() > 2 {
            cx.err_line(&format!(
                "basename: extra operand \u{2018}{}\u{2019}\nTry 'basename --help' for more information.",
                names[2]
            ));
            return Ok(USAGE);
        }
        if names.len() == 2 {
            suffix = names.pop();
        }
    }
    let mut out = Vec::new();
    for name in &names {
        cx.tick()?;
        out.extend_from_slice(base(name, suffix.as_deref()).as_bytes());
        out.push(if zero { 0 } else { b'\n' });
    }
    cx.out(&out)?;
    Ok(0)
}

/// The last component of `name` without trailing slashes, and without `suffix` unless
/// that is all of it (POSIX basename).
fn base(name: &str, suffix: Option<&str>) -> String {
    let t = name.trim_end_matches('/');
    if t.is_empty() {
        return if name.starts_with('/') { "/" } else { "" }.to_string();
    }
    let mut b = t.rsplit('/').next().unwrap_or("").to_string();
    if let Some(s) = suffix {
        if !s.is_empty() && b.len() > s.len() && b.ends_with(s) {
            b.truncate(b.len() - s.len());
        }
    }
    b
}
