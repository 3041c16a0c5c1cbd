//! `realpath` and `readlink` (GNU coreutils 9.1). `realpath` prints each name's canonical
//! absolute path (`-e`/`--canonicalize-existing`, `-m`/`--canonicalize-missing`,
//! `-s`/`--strip`/`--no-symlinks`, `-q`/`--quiet`, `-z`/`--zero`); `readlink` prints a
//! symlink's target, or with `-f`/`-e`/`-m` the canonical path (`-n`, `-q`, `-s`, `-v`,
//! `-z`).

use super::opts::{Arg, Parser};
use super::Ctx;
use crate::shell::R;
use crate::vfs::{Errno, Kind, Vfs};

/// GNU's usage status for both.
const USAGE: i32 = 1;

/// Most symlinks one name may pass through (Linux's limit).
const MAX_LINKS: u32 = 40;

/// How much of a name must exist.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Need {
    /// Every component but the last (GNU's default for `realpath`, `readlink -f`).
    AllButLast,
    /// Every component (`-e`).
    All,
    /// None (`-m`).
    Nothing,
}

/// The canonical absolute path of `path` (relative to `cwd`): no `.`, `..` or symlink
/// left (symlinks kept when `!follow`).
fn canonicalize(
    vfs: &mut Vfs,
    cwd: &str,
    path: &str,
    need: Need,
    follow: bool,
) -> Result<String, Errno> {
    let abs = Vfs::absolute(cwd, path);
    let mut todo: Vec<String> = abs
        .split('/')
        .filter(|c| !c.is_empty())
        .rev()
        .map(String::from)
        .collect();
    let mut out: Vec<String> = Vec::new();
    // the inode of each prefix of `out` (while it exists): each component is looked up in
    // its parent, not the whole path again from `/` (quadratic: 90 s for 10,000 levels)
    let mut inos: Vec<usize> = Vec::new();
    let mut links = 0;
    // whether the path so far exists (and is a directory, to go on)
    let mut missing = false;
    while let Some(c) = todo.pop() {
        if c == "." {
            continue;
        }
        if c == ".." {
            out.pop();
            inos.pop();
            continue;
        }
        if missing {
            if need != Need::Nothing {
                return Err(Errno::NoEnt);
            }
            out.push(c);
            continue;
        }
        let parent = inos.last().copied().unwrap_or(crate::vfs::ROOT);
        let found = if vfs.get(parent).is_dir() {
            vfs.lookup_in(parent, &c).ok_or(Errno::NoEnt)
        } else {
            Err(Errno::NotDir)
        };
        match found {
            Ok(ino) => {
                if let (true, Kind::Symlink(t)) = (follow, &vfs.get(ino).kind) {
                    links += 1;
                    if links > MAX_LINKS {
                        return Err(Errno::Loop);
                    }
                    let t = t.clone();
                    if t.starts_with('/') {
                        out.clear();
                        inos.clear();
                    }
                    todo.extend(
                        t.split('/')
                            .filter(|c| !c.is_empty())
                            .rev()
                            .map(String::from),
                    );
                    continue;
                }
                if !vfs.get(ino).is_dir()
                    && todo.iter().any(|c| !c.is_empty())
                    && need != Need::Nothing
                {
                    return Err(Errno::NotDir);
                }
                out.push(c);
                inos.push(ino);
            }
            Err(Errno::NoEnt) => {
                let last = todo.is_empty();
                match need {
                    Need::All => return Err(Errno::NoEnt),
                    Need::AllButLast if !last => return Err(Errno::NoEnt),
                    _ => {}
                }
                missing = true;
                out.push(c);
            }
            Err(e) if need == Need::Nothing => {
                let _ = e;
                missing = true;
                out.push(c);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(format!("/{}", out.join("/")))
}

pub(super) fn realpath(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new(
        "realpath",
        args,
        &[
            "canonicalize-existing",
            "canonicalize-missing",
            "strip",
            "no-symlinks",
            "quiet",
            "zero",
            "logical",
            "physical",
            "relative-to",
            "relative-base",
            "help",
            "version",
        ],
    );
    let mut need = Need::AllButLast;
    let mut follow = true;
    let mut quiet = false;
    let mut end = b'\n';
    let mut names = Vec::new();
    loop {
        match p.next_in(cx)? {
            Ok(Some(Arg::Short('e'))) | Ok(Some(Arg::Long("canonicalize-existing"))) => {
                need = Need::All
            }
            Ok(Some(Arg::Short('m'))) | Ok(Some(Arg::Long("canonicalize-missing"))) => {
                need = Need::Nothing
            }
            Ok(Some(Arg::Short('s')))
            | Ok(Some(Arg::Long("strip")))
            | Ok(Some(Arg::Long("no-symlinks"))) => follow = false,
            Ok(Some(Arg::Short('q'))) | Ok(Some(Arg::Long("quiet"))) => quiet = true,
            Ok(Some(Arg::Short('z'))) | Ok(Some(Arg::Long("zero"))) => end = b'\0',
            Ok(Some(Arg::Short('P'))) | Ok(Some(Arg::Long("physical"))) => follow = true,
            Ok(Some(Arg::Long(l))) => return cx.unsupported(&format!("realpath option --{l}")),
            Ok(Some(Arg::Short('L'))) => return cx.unsupported("realpath option -L"),
            Ok(Some(Arg::Short(c))) => return super::usage(cx, p.invalid_short(c), USAGE),
            Ok(Some(Arg::Operand(o))) => names.push(o),
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, USAGE),
        }
    }
    if names.is_empty() {
        cx.err_line("realpath: missing operand\nTry 'realpath --help' for more information.");
        return Ok(USAGE);
    }
    let mut status = 0;
    for n in names {
        cx.tick()?;
        let cwd = cx.cwd().to_string();
        match canonicalize(cx.vfs(), &cwd, &n, need, follow) {
            Ok(mut s) => {
                s.push(end as char);
                cx.out(s.as_bytes())?;
            }
            Err(e) => {
                if !quiet {
                    cx.err_line(&format!("realpath: {n}: {}", e.msg()));
                }
                status = 1;
            }
        }
    }
    Ok(status)
}

pub(super) fn readlink(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new(
        "readlink",
        args,
        &[
            "canonicalize",
            "canonicalize-existing",
            "canonicalize-missing",
            "no-newline",
            "quiet",
            "silent",
            "verbose",
            "zero",
            "help",
            "version",
        ],
    );
    let mut need: Option<Need> = None;
    let mut no_newline = false;
    let mut quiet = true;
    let mut end = b'\n';
    let mut names = Vec::new();
    loop {
        match p.next_in(cx)? {
            Ok(Some(Arg::Short('f'))) | Ok(Some(Arg::Long("canonicalize"))) => {
                need = Some(Need::AllButLast)
            }
            Ok(Some(Arg::Short('e'))) | Ok(Some(Arg::Long("canonicalize-existing"))) => {
                need = Some(Need::All)
            }
            Ok(Some(Arg::Short('m'))) | Ok(Some(Arg::Long("canonicalize-missing"))) => {
                need = Some(Need::Nothing)
            }
            Ok(Some(Arg::Short('n'))) | Ok(Some(Arg::Long("no-newline"))) => no_newline = true,
            Ok(Some(Arg::Short('q' | 's')))
            | Ok(Some(Arg::Long("quiet")))
            | Ok(Some(Arg::Long("silent"))) => quiet = true,
            Ok(Some(Arg::Short('v'))) | Ok(Some(Arg::Long("verbose"))) => quiet = false,
            Ok(Some(Arg::Short('z'))) | Ok(Some(Arg::Long("zero"))) => end = b'\0',
            Ok(Some(Arg::Long(l))) => return cx.unsupported(&format!("readlink option --{l}")),
            Ok(Some(Arg::Short(c))) => return super::usage(cx, p.invalid_short(c), USAGE),
            Ok(Some(Arg::Operand(o))) => names.push(o),
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, USAGE),
        }
    }
    if names.is_empty() {
        cx.err_line("readlink: missing operand\nTry 'readlink --help' for more information.");
        return Ok(USAGE);
    }
    // GNU ignores -n with more than one name (and says so)
    if no_newline && names.len() > 1 {
        cx.err_line("readlink: ignoring --no-newline with multiple arguments");
        no_newline = false;
    }
    let mut status = 0;
    for n in names {
        cx.tick()?;
        let cwd = cx.cwd().to_string();
        let r = match need {
            Some(need) => canonicalize(cx.vfs(), &cwd, &n, need, true),
            None => match cx.vfs().resolve(&cwd, &n, false) {
                Ok(ino) => match &cx.vfs().get(ino).kind {
                    Kind::Symlink(t) => Ok(t.clone()),
                    _ => Err(Errno::Inval),
                },
                Err(e) => Err(e),
            },
        };
        match r {
            Ok(mut s) => {
                if !no_newline {
                    s.push(end as char);
                }
                cx.out(s.as_bytes())?;
            }
            Err(e) => {
                if !quiet {
                    cx.err_line(&format!("readlink: {n}: {}", e.msg()));
                }
                status = 1;
            }
        }
    }
    Ok(status)
}
