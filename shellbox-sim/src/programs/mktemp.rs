//! `mktemp` (GNU coreutils 9.1): creates a file (mode 0600) or with `-d` a directory
//! (0700) from a template whose trailing `X`s (at least 3) are replaced, and prints its
//! name. Default template `tmp.XXXXXXXXXX` in `$TMPDIR` or `/tmp`; a template operand is
//! relative to the working directory unless `-t` or `-p DIR` / `--tmpdir[=DIR]` puts it
//! in a directory; `-u` (dry run), `-q`, `--suffix`. The replacement characters come
//! from the machine's clock and a counter (distinct names, no host randomness).

use super::opts::{Arg, Parser};
use super::Ctx;
use crate::shell::R;

/// The characters GNU draws from.
const CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

thread_local! {
    static DRAWS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

pub(super) fn main(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new(
        "mktemp",
        args,
        &[
            "directory",
            "dry-run",
            "quiet",
            "suffix",
            "tmpdir",
            "help",
            "version",
        ],
    );
    let (mut dir, mut dry, mut quiet, mut t) = (false, false, false, false);
    let mut suffix: Option<String> = None;
    let mut tmpdir: Option<Option<String>> = None;
    let mut templates = Vec::new();
    loop {
        match p.next_in(cx)? {
            Ok(Some(Arg::Short('d'))) | Ok(Some(Arg::Long("directory"))) => dir = true,
            Ok(Some(Arg::Short('u'))) | Ok(Some(Arg::Long("dry-run"))) => dry = true,
            Ok(Some(Arg::Short('q'))) | Ok(Some(Arg::Long("quiet"))) => quiet = true,
            Ok(Some(Arg::Short('t'))) => t = true,
            Ok(Some(Arg::Short('p'))) => match p.value() {
                Ok(v) => tmpdir = Some(Some(v)),
                Err(u) => return super::usage(cx, u, 1),
            },
            Ok(Some(Arg::Long("tmpdir"))) => tmpdir = Some(p.optional_value()),
            Ok(Some(Arg::Long("suffix"))) => match p.value() {
                Ok(v) => suffix = Some(v),
                Err(u) => return super::usage(cx, u, 1),
            },
            Ok(Some(Arg::Long(l))) => return cx.unsupported_status(&format!("mktemp --{l}"), 1),
            Ok(Some(Arg::Short(c))) => return super::usage(cx, p.invalid_short(c), 1),
            Ok(Some(Arg::Operand(o))) => templates.push(o),
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, 1),
        }
    }
    if templates.len() > 1 {
        cx.err_line("mktemp: too many templates\nTry 'mktemp --help' for more information.");
        return Ok(1);
    }
    let given = templates.pop();
    let env_tmp = cx.env("TMPDIR").filter(|d| !d.is_empty());
    let (template, base) = match &given {
        None => (
            "tmp.XXXXXXXXXX".to_string(),
            Some(match &tmpdir {
                Some(Some(d)) if !d.is_empty() => d.clone(),
                _ => env_tmp.clone().unwrap_or_else(|| "/tmp".into()),
            }),
        ),
        Some(tpl) => {
            let base = match (&tmpdir, t) {
                (Some(Some(d)), _) if !d.is_empty() => Some(d.clone()),
                (Some(_), _) | (None, true) => {
                    Some(env_tmp.clone().unwrap_or_else(|| "/tmp".into()))
                }
                (None, false) => None,
            };
            if base.is_some() && tpl.contains('/') {
                cx.err_line(&format!(
                    "mktemp: invalid template, '{tpl}', contains directory separator"
                ));
                return Ok(1);
            }
            (tpl.clone(), base)
        }
    };
    // the X's to replace: the template's last run of them, before the suffix
    let (stem, suffix) = match &suffix {
        Some(s) => (template.clone(), s.clone()),
        None => {
            let last_x = template.rfind('X').map_or(0, |i| i + 1);
            (
                template[..last_x].to_string(),
                template[last_x..].to_string(),
            )
        }
    };
    if suffix.contains('/') {
        cx.err_line(&format!(
            "mktemp: invalid suffix '{suffix}', contains directory separator"
        ));
        return Ok(1);
    }
    let xs = stem.len() - stem.trim_end_matches('X').len();
    if xs < 3 {
        cx.err_line(&format!("mktemp: too few X's in template '{template}'"));
        return Ok(1);
    }
    let prefix = &stem[..stem.len() - xs];
    let full_prefix = match &base {
        Some(b) => format!("{}/{prefix}", b.trim_end_matches('/')),
        None => prefix.to_string(),
    };
    let cwd = cx.cwd().to_string();
    for _ in 0..100 {
        cx.check_time()?;
        let name = format!("{full_prefix}{}{suffix}", draw(cx.now_secs(), xs));
        if cx.vfs().resolve(&cwd, &name, false).is_ok() {
            continue;
        }
        if !dry {
            let made = if dir {
                cx.vfs().mkdir(&cwd, &name, 0o700).map(|_| ())
            } else {
                cx.create_file(&name).map(|ino| {
                    if let Some(n) = cx.vfs().get_mut(ino) {
                        n.mode = 0o600;
                    }
                })
            };
            if let Err(e) = made {
                if !quiet {
                    let what = if dir { "directory" } else { "file" };
                    let shown = format!("{full_prefix}{}{suffix}", "X".repeat(xs));
                    cx.err_line(&format!(
                        "mktemp: failed to create {what} via template '{shown}': {}",
                        e.msg()
                    ));
                }
                return Ok(1);
            }
        }
        cx.out(format!("{name}\n").as_bytes())?;
        return Ok(0);
    }
    if !quiet {
        cx.err_line(&format!(
            "mktemp: failed to create file via template '{template}'"
        ));
    }
    Ok(1)
}

/// `n` characters from [`CHARS`], drawn from the clock and a per-thread counter.
fn draw(now: f64, n: usize) -> String {
    let k = DRAWS.with(|d| {
        let k = d.get().wrapping_add(1);
        d.set(k);
        k
    });
    let mut x = now.to_bits() ^ k.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (0..n)
        .map(|_| {
            // xorshift64*
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
            CHARS[(r >> 33) as usize % CHARS.len()] as char
        })
        .collect()
}
