//! `install` (GNU coreutils 9.1): copies files and sets their mode. `install [-m MODE]
//! SRC DST`, `install SRC... DIR`, `-t`/`--target-directory` DIR, `-T`/`--no-target-directory`,
//! `-d`/`--directory` (create directories), `-D` (create the destination's leading
//! directories), `-m`/`--mode` (octal or symbolic; default 0755), `-v`/`--verbose`,
//! `-C`/`--compare` and `-p`/`--preserve-timestamps` (accepted; the copy is the same).
//! `-o`, `-g` and `-s` are refused as unsupported.

use super::opts::{Arg, Parser};
use super::Ctx;
use crate::shell::R;
use crate::vfs::{Kind, Vfs};

/// GNU's usage status for install.
const USAGE: i32 = 1;

pub(super) fn main(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new(
        "install",
        args,
        &[
            "directory",
            "mode",
            "target-directory",
            "no-target-directory",
            "verbose",
            "compare",
            "preserve-timestamps",
            "owner",
            "group",
            "strip",
            "help",
            "version",
        ],
    );
    let mut dirs = false;
    let mut leading = false;
    let mut mode_text: Option<String> = None;
    let mut target: Option<String> = None;
    let mut no_target = false;
    let mut verbose = false;
    let mut ops = Vec::new();
    loop {
        match p.next_in(cx)? {
            Ok(Some(Arg::Short('d'))) | Ok(Some(Arg::Long("directory"))) => dirs = true,
            Ok(Some(Arg::Short('D'))) => leading = true,
            Ok(Some(Arg::Short('m'))) | Ok(Some(Arg::Long("mode"))) => match p.value() {
                Ok(v) => mode_text = Some(v),
                Err(u) => return super::usage(cx, u, USAGE),
            },
            Ok(Some(Arg::Short('t'))) | Ok(Some(Arg::Long("target-directory"))) => {
                match p.value() {
                    Ok(v) => target = Some(v),
                    Err(u) => return super::usage(cx, u, USAGE),
                }
            }
            Ok(Some(Arg::Short('T'))) | Ok(Some(Arg::Long("no-target-directory"))) => {
                no_target = true
            }
            Ok(Some(Arg::Short('v'))) | Ok(Some(Arg::Long("verbose"))) => verbose = true,
            Ok(Some(Arg::Short('C' | 'p')))
            | Ok(Some(Arg::Long("compare")))
            | Ok(Some(Arg::Long("preserve-timestamps"))) => {}
            Ok(Some(Arg::Short(c @ ('o' | 'g' | 's')))) => {
                return cx.unsupported(&format!("install option -{c}"))
            }
            Ok(Some(Arg::Long(l))) => return cx.unsupported(&format!("install option --{l}")),
            Ok(Some(Arg::Short(c))) => return super::usage(cx, p.invalid_short(c), USAGE),
            Ok(Some(Arg::Operand(o))) => ops.push(o),
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, USAGE),
        }
    }
    let umask = cx.umask();
    let mode = match &mode_text {
        None => 0o755,
        Some(m) if !m.is_empty() && m.chars().all(|c| c.is_digit(8)) => {
            match u32::from_str_radix(m, 8) {
                Ok(v) if v <= 0o7777 => v,
                _ => {
                    cx.err_line(&format!("install: invalid mode \u{2018}{m}\u{2019}"));
                    return Ok(USAGE);
                }
            }
        }
        Some(m) => match crate::utils::apply_symbolic(0o755, m, umask, dirs) {
            Some(v) => v & 0o7777,
            None => {
                cx.err_line(&format!("install: invalid mode \u{2018}{m}\u{2019}"));
                return Ok(USAGE);
            }
        },
    };
    if ops.is_empty() && target.is_none() {
        cx.err_line("install: missing file operand\nTry 'install --help' for more information.");
        return Ok(USAGE);
    }
    let cwd = cx.cwd().to_string();
    let mut status = 0;
    if dirs {
        for d in &ops {
            cx.check_time()?;
            cx.tick()?;
            let abs = Vfs::absolute(&cwd, d);
            match cx.vfs().mkdir_p(&abs, 0o755) {
                Ok(ino) => {
                    if let Some(n) = cx.vfs().get_mut(ino) {
                        n.mode = mode;
                    }
                    if verbose {
                        cx.out(format!("install: creating directory '{d}'\n").as_bytes())?;
                    }
                }
                Err(e) => {
                    cx.err_line(&format!(
                        "install: cannot create directory '{d}': {}",
                        e.msg()
                    ));
                    status = 1;
                }
            }
        }
        return Ok(status);
    }
    // (source, destination) pairs
    let pairs: Vec<(String, String)> = if let Some(t) = &target {
        if leading {
            let abs = Vfs::absolute(&cwd, t);
            let _ = cx.vfs().mkdir_p(&abs, 0o755);
        }
        if !is_dir(cx, &cwd, t) {
            cx.err_line(&format!("install: target '{t}': No such file or directory"));
            return Ok(1);
        }
        ops.iter().map(|s| (s.clone(), join(t, s))).collect()
    } else {
        if ops.len() < 2 {
            cx.err_line(&format!(
                "install: missing destination file operand after '{}'\nTry 'install --help' for more information.",
                ops[0]
            ));
            return Ok(USAGE);
        }
        let (last, srcs) = ops.split_last().expect("two operands");
        if srcs.len() == 1 && (no_target || !is_dir(cx, &cwd, last)) {
            vec![(srcs[0].clone(), last.clone())]
        } else if no_target {
            cx.err_line(&format!(
                "install: extra operand '{last}'\nTry 'install --help' for more information."
            ));
            return Ok(USAGE);
        } else if !is_dir(cx, &cwd, last) {
            cx.err_line(&format!(
                "install: target '{last}': No such file or directory"
            ));
            return Ok(1);
        } else {
            srcs.iter().map(|s| (s.clone(), join(last, s))).collect()
        }
    };
    for (src, dst) in pairs {
        cx.tick()?;
        let ino = match cx.vfs().resolve(&cwd, &src, true) {
            Ok(i) => i,
            Err(e) => {
                cx.err_line(&format!("install: cannot stat '{src}': {}", e.msg()));
                status = 1;
                continue;
            }
        };
        if !matches!(cx.vfs().get(ino).kind, Kind::File(_)) {
            cx.err_line(&format!("install: omitting directory '{src}'"));
            status = 1;
            continue;
        }
        let data = cx.vfs().data(ino).to_vec();
        cx.hold(data.len())?;
        if leading {
            let abs = Vfs::absolute(&cwd, &dst);
            if let Some((parent, _)) = abs.rsplit_once('/') {
                if !parent.is_empty() {
                    let _ = cx.vfs().mkdir_p(parent, 0o755);
                }
            }
        }
        // install removes the destination first, so its mode is exactly `mode`
        let _ = cx.vfs().unlink(&cwd, &dst);
        let r = cx
            .vfs()
            .create(&cwd, &dst, mode, true)
            .and_then(|d| cx.vfs().set_data(d, data).map(|()| d));
        match r {
            Ok(d) => {
                if let Some(n) = cx.vfs().get_mut(d) {
                    n.mode = mode;
                }
                if verbose {
                    cx.out(format!("'{src}' -> '{dst}'\n").as_bytes())?;
                }
            }
            Err(e) => {
                cx.err_line(&format!(
                    "install: cannot create regular file '{dst}': {}",
                    e.msg()
                ));
                status = 1;
            }
        }
    }
    Ok(status)
}

fn is_dir(cx: &mut Ctx<'_, '_>, cwd: &str, path: &str) -> bool {
    cx.vfs()
        .resolve(cwd, path, true)
        .is_ok_and(|i| cx.vfs().get(i).is_dir())
}

/// `dir/` followed by the last component of `src`.
fn join(dir: &str, src: &str) -> String {
    let base = src.trim_end_matches('/');
    let base = base.rsplit('/').next().unwrap_or(base);
    format!("{}/{base}", dir.trim_end_matches('/'))
}
