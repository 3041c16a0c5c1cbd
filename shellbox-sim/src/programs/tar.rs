//! `tar` (GNU tar 1.34) over the virtual filesystem: `-c` (create), `-x` (extract) and
//! `-t` (list) of ustar/GNU archives with directories, regular files, symlinks and hard
//! links (modes and mtimes kept), with `-f FILE` (`-` or none: standard input or output),
//! `-C DIR`, `-v` (names; `-tv` and `-vv` the long listing), `-z` (gzip, over flate2;
//! a compressed archive *file* is recognised without it, as GNU tar does, while
//! compressed standard input without `-z` is refused), `-O`/`--to-stdout` (extract file
//! contents to standard output), `--strip-components=N` (on extraction) and
//! `--exclude=PATTERN` (a glob matched against each name and each of its trailing parts,
//! as GNU's default unanchored matching does), and member operands on `-x`/`-t` (a name
//! selects that member and everything under it; one never found is an error). The first
//! word may omit its dash (`tar czf a.tgz d`); its letters take their values from the
//! words after it, in order. Exit status 2 on an error, as GNU tar's. Other modes (`-r`,
//! `-u`, `-A`, `-d`) and compressors (`-j`, `-J`, `-Z`, `-a`) fail visibly (status 2).
//!
//! Names are listed in sorted order (GNU tar takes the directory's own order).

use std::collections::HashMap;
use std::io::Read;

use super::opts::{Arg, Parser};
use super::Ctx;
use crate::shell::{Ctl, R};
use crate::vfs::{Errno, Kind, Vfs};

/// GNU tar's status for an error.
const TROUBLE: i32 = 2;

/// GNU tar's status for an option it does not know (argp's usage status).
const USAGE: i32 = 64;

const LONGS: &[&str] = &[
    "create",
    "extract",
    "get",
    "list",
    "verbose",
    "file",
    "directory",
    "gzip",
    "gunzip",
    "ungzip",
    "to-stdout",
    "strip-components",
    "exclude",
    "no-same-owner",
    "same-owner",
    "numeric-owner",
    "no-same-permissions",
    "same-permissions",
    "preserve-permissions",
    "append",
    "update",
    "catenate",
    "concatenate",
    "diff",
    "compare",
    "delete",
    "bzip2",
    "xz",
    "compress",
    "auto-compress",
    "zstd",
    "help",
    "version",
];

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Create,
    Extract,
    List,
}

/// What the options asked for.
#[derive(Default)]
struct Opts {
    file: Option<String>,
    dir: Option<String>,
    verbose: u32,
    gzip: bool,
    to_stdout: bool,
    strip: usize,
    exclude: Vec<String>,
}

/// The old-style first word (`czf a.tgz d`) as dashed options: each letter that takes a
/// value (`f`, `C`) takes the next word after the first, in order.
fn old_style(args: &[String]) -> Vec<String> {
    let Some(first) = args.first() else {
        return Vec::new();
    };
    if first.starts_with('-') || first.is_empty() {
        return args.to_vec();
    }
    let mut out = Vec::with_capacity(args.len() + 4);
    let mut rest = args[1..].iter();
    for c in first.chars() {
        out.push(format!("-{c}"));
        if matches!(c, 'f' | 'C') {
            if let Some(v) = rest.next() {
                out.push(v.clone());
            }
        }
    }
    out.extend(rest.cloned());
    out
}

pub(super) fn main(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = old_style(cx.args());
    let mut p = Parser::new("tar", &args, LONGS);
    let mut mode: Option<Mode> = None;
    let mut o = Opts::default();
    let mut names: Vec<String> = Vec::new();
    macro_rules! value {
        () => {
            match p.value() {
                Ok(v) => v,
                Err(u) => return super::usage(cx, u, USAGE),
            }
        };
    }
    loop {
        let arg = match p.next_in(cx)? {
            Ok(Some(a)) => a,
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, USAGE),
        };
        let wanted = match arg {
            Arg::Short('c') | Arg::Long("create") => Some(Mode::Create),
            Arg::Short('x') | Arg::Long("extract") | Arg::Long("get") => Some(Mode::Extract),
            Arg::Short('t') | Arg::Long("list") => Some(Mode::List),
            Arg::Short('v') | Arg::Long("verbose") => {
                o.verbose += 1;
                None
            }
            Arg::Short('f') | Arg::Long("file") => {
                o.file = Some(value!());
                None
            }
            Arg::Short('C') | Arg::Long("directory") => {
                o.dir = Some(value!());
                None
            }
            Arg::Short('z') | Arg::Long("gzip" | "gunzip" | "ungzip") => {
                o.gzip = true;
                None
            }
            Arg::Short('O') | Arg::Long("to-stdout") => {
                o.to_stdout = true;
                None
            }
            Arg::Long("strip-components") => {
                let v = value!();
                match v.parse::<usize>() {
                    Ok(n) => o.strip = n,
                    Err(_) => {
                        cx.err_line(&format!(
                            "tar: {v}: Invalid number of elements\n\
                             Try 'tar --help' or 'tar --usage' for more information."
                        ));
                        return Ok(TROUBLE);
                    }
                }
                None
            }
            Arg::Long("exclude") => {
                o.exclude.push(value!());
                None
            }
            Arg::Short('p' | 'o')
            | Arg::Long(
                "no-same-owner"
                | "same-owner"
                | "numeric-owner"
                | "no-same-permissions"
                | "same-permissions"
                | "preserve-permissions",
            ) => None,
            Arg::Long(l) => return cx.unsupported_status(&format!("tar option --{l}"), TROUBLE),
            Arg::Short(
                c @ ('r' | 'u' | 'A' | 'd' | 'j' | 'J' | 'Z' | 'a' | 'k' | 'h' | 'T' | 'X' | 'P'
                | 'W' | 'S' | 'M' | 'G' | 'g' | 'b' | 'B' | 'N' | 'K' | 'V' | 'l' | 'm' | 'U'
                | 'w' | 'R' | 's' | 'i' | 'I' | 'F' | 'L' | 'H' | 'n' | 'q' | 'y'),
            ) => return cx.unsupported_status(&format!("tar option -{c}"), TROUBLE),
            Arg::Short(c) => return super::usage(cx, p.invalid_short(c), USAGE),
            Arg::Operand(v) => {
                names.push(v);
                None
            }
        };
        if let Some(m) = wanted {
            if mode.is_some_and(|old| old != m) {
                cx.err_line(
                    "tar: You may not specify more than one '-Acdtrux', '--delete' or  '--test-label' option\n\
                     Try 'tar --help' or 'tar --usage' for more information.",
                );
                return Ok(TROUBLE);
            }
            mode = Some(m);
        }
    }
    let cwd = cx.cwd().to_string();
    let base = o.dir.clone().unwrap_or_else(|| cwd.clone());
    let base = crate::builtins::normalize(&Vfs::absolute(&cwd, &base));
    let base_ok = cx
        .vfs()
        .resolve("/", &base, true)
        .map(|i| cx.vfs().get(i).is_dir());
    if base_ok != Ok(true) {
        cx.err_line(&format!(
            "tar: {base}: Cannot open: No such file or directory\n\
             tar: Error is not recoverable: exiting now"
        ));
        return Ok(TROUBLE);
    }
    match mode {
        Some(Mode::Create) => create(cx, &base, &o, &names),
        Some(m) => extract(cx, &base, &o, &names, m == Mode::List),
        None => {
            cx.err_line(
                "tar: You must specify one of the '-Acdtrux', '--delete' or '--test-label' options\n\
                 Try 'tar --help' or 'tar --usage' for more information.",
            );
            Ok(TROUBLE)
        }
    }
}

/// Whether `name` (a member or file name, trailing `/` ignored) matches an `--exclude`
/// pattern: the whole name or any part of it after a `/`.
fn excluded(o: &Opts, name: &str) -> bool {
    let name = name.trim_end_matches('/');
    o.exclude.iter().any(|pat| {
        let pat = pat.trim_end_matches('/');
        crate::glob::matches(pat, name, false)
            || name
                .match_indices('/')
                .any(|(i, _)| crate::glob::matches(pat, &name[i + 1..], false))
    })
}

fn header(mode: u32, mtime: i64, kind: tar::EntryType, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_mode(mode);
    h.set_mtime(mtime.max(0) as u64);
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_uid(0);
    h.set_gid(0);
    let _ = h.set_username("root");
    let _ = h.set_groupname("root");
    h
}

/// One line of the long listing (`tar -tv`): mode, owner, size, date, name, link.
struct Long {
    /// GNU's `ugswidth`: the owner and size columns only grow.
    width: usize,
}

impl Long {
    fn line(&mut self, h: &tar::Header, name: &str, link: Option<&str>) -> String {
        let kind = h.entry_type();
        let mode = h.mode().unwrap_or(0);
        let mut m = String::with_capacity(10);
        m.push(match kind {
            tar::EntryType::Directory => 'd',
            tar::EntryType::Symlink => 'l',
            tar::EntryType::Link => 'h',
            tar::EntryType::Char => 'c',
            tar::EntryType::Block => 'b',
            tar::EntryType::Fifo => 'p',
            _ => '-',
        });
        for (i, c) in "rwxrwxrwx".chars().enumerate() {
            let bit = 1 << (8 - i);
            let mut ch = if mode & bit != 0 { c } else { '-' };
            let special = match i {
                2 => mode & 0o4000 != 0,
                5 => mode & 0o2000 != 0,
                8 => mode & 0o1000 != 0,
                _ => false,
            };
            if special {
                ch = match (i, ch) {
                    (8, 'x') => 't',
                    (8, _) => 'T',
                    (_, 'x') => 's',
                    _ => 'S',
                };
            }
            m.push(ch);
        }
        let user = h
            .username()
            .ok()
            .flatten()
            .map(str::to_string)
            .unwrap_or_else(|| h.uid().unwrap_or(0).to_string());
        let group = h
            .groupname()
            .ok()
            .flatten()
            .map(str::to_string)
            .unwrap_or_else(|| h.gid().unwrap_or(0).to_string());
        let size = h.size().unwrap_or(0).to_string();
        let pad = user.len() + 1 + group.len() + size.len();
        self.width = self.width.max(pad);
        let w = self.width - pad + size.len();
        let date = crate::utils::strftime("%Y-%m-%d %H:%M", h.mtime().unwrap_or(0) as i64, 0);
        let mut line = format!("{m} {user}/{group} {size:>w$} {date} {name}");
        match (kind, link) {
            (tar::EntryType::Symlink, Some(l)) => {
                line.push_str(" -> ");
                line.push_str(l);
            }
            (tar::EntryType::Link, Some(l)) => {
                line.push_str(" link to ");
                line.push_str(l);
            }
            _ => {}
        }
        line.push('\n');
        line
    }
}

fn create(cx: &mut Ctx<'_, '_>, base: &str, o: &Opts, names: &[String]) -> R<i32> {
    if names.is_empty() {
        cx.err_line(
            "tar: Cowardly refusing to create an empty archive\n\
             Try 'tar --help' or 'tar --usage' for more information.",
        );
        return Ok(TROUBLE);
    }
    let to_stdout = o.file.as_deref().is_none_or(|f| f == "-");
    let mut builder = tar::Builder::new(Vec::new());
    let mut seen: HashMap<usize, String> = HashMap::new();
    let mut st = 0;
    let mut listed = String::new();
    let mut long = Long { width: 18 };
    for name in names {
        // a name that does not resolve costs an error line: 50,000 of them ran 170 ms past
        // a deadline when the clock was looked at only for names that resolve
        cx.tick()?;
        let Ok(ino) = cx.vfs().resolve(base, name, false) else {
            cx.err_line(&format!(
                "tar: {name}: Cannot stat: No such file or directory"
            ));
            st = TROUBLE;
            continue;
        };
        let mut stack = vec![(name.trim_end_matches('/').to_string(), ino)];
        while let Some((path, ino)) = stack.pop() {
            cx.tick()?;
            if excluded(o, &path) {
                continue;
            }
            let node = cx.vfs().get(ino).clone();
            let (h, shown, link, r) = match &node.kind {
                Kind::Dir(map, _) => {
                    let mut h = header(node.mode, node.mtime, tar::EntryType::Directory, 0);
                    let shown = format!("{path}/");
                    let r = builder.append_data(&mut h, &shown, std::io::empty());
                    let mut kids: Vec<(String, usize)> =
                        map.iter().map(|(k, v)| (k.clone(), *v)).collect();
                    kids.sort();
                    for (k, v) in kids.into_iter().rev() {
                        stack.push((format!("{path}/{k}"), v));
                    }
                    (h, shown, None, r)
                }
                Kind::Symlink(t) => {
                    let mut h = header(0o777, node.mtime, tar::EntryType::Symlink, 0);
                    let r = builder.append_link(&mut h, &path, t);
                    (h, path.clone(), Some(t.clone()), r)
                }
                _ => {
                    let first = if node.nlink > 1 {
                        let f = seen.get(&ino).cloned();
                        if f.is_none() {
                            seen.insert(ino, path.clone());
                        }
                        f
                    } else {
                        None
                    };
                    if let Some(first) = first {
                        let mut h = header(node.mode, node.mtime, tar::EntryType::Link, 0);
                        let r = builder.append_link(&mut h, &path, &first);
                        (h, path.clone(), Some(first), r)
                    } else {
                        let data: Vec<u8> = match &node.kind {
                            Kind::File(d) => d.clone(),
                            Kind::Exe(n) => {
                                format!("#!/bin/sh\n# shellbox-sim built-in {n}\n").into_bytes()
                            }
                            _ => Vec::new(),
                        };
                        cx.hold(data.len())?;
                        let mut h = header(
                            node.mode,
                            node.mtime,
                            tar::EntryType::Regular,
                            data.len() as u64,
                        );
                        let r = builder.append_data(&mut h, &path, &data[..]);
                        (h, path.clone(), None, r)
                    }
                }
            };
            match o.verbose {
                0 => {}
                1 => {
                    listed.push_str(&shown);
                    listed.push('\n');
                }
                _ => listed.push_str(&long.line(&h, &shown, link.as_deref())),
            }
            if let Err(e) = r {
                cx.err_line(&format!("tar: {path}: {e}"));
                st = TROUBLE;
            }
        }
    }
    let data = match builder.into_inner() {
        Ok(d) => d,
        Err(e) => {
            cx.err_line(&format!("tar: {e}"));
            return Ok(TROUBLE);
        }
    };
    cx.hold(data.len())?;
    let data = if o.gzip {
        match super::gzip::compress(cx, &data, 6) {
            Ok(d) => d,
            Err(super::gzip::Fail::Stop(c)) => return Err(c),
            Err(super::gzip::Fail::Format) => return Ok(TROUBLE),
        }
    } else {
        data
    };
    if !listed.is_empty() {
        if to_stdout {
            cx.err_line(listed.trim_end_matches('\n'));
        } else {
            cx.out(listed.as_bytes())?;
        }
    }
    match o.file.as_deref() {
        None | Some("-") => {
            cx.out(&data)?;
        }
        Some(f) => match cx.write_file(f, data) {
            Ok(()) => {}
            Err(Errno::NoSpc) => return Err(Ctl::Budget("disk limit exceeded".into())),
            Err(e) => {
                cx.err_line(&format!(
                    "tar: {f}: Cannot open: {}\ntar: Error is not recoverable: exiting now",
                    e.msg()
                ));
                return Ok(TROUBLE);
            }
        },
    }
    Ok(st)
}

/// `name` less its first `n` components (`None` when nothing is left).
fn strip(name: &str, n: usize) -> Option<String> {
    if n == 0 {
        return Some(name.to_string());
    }
    let mut rest = name.trim_start_matches('/');
    for _ in 0..n {
        let (_, r) = rest.split_once('/')?;
        rest = r.trim_start_matches('/');
    }
    if rest.is_empty() {
        None
    } else {
        Some(rest.to_string())
    }
}

fn extract(cx: &mut Ctx<'_, '_>, base: &str, o: &Opts, names: &[String], list: bool) -> R<i32> {
    let from_stdin = o.file.as_deref().is_none_or(|f| f == "-");
    let name = o.file.clone().unwrap_or_else(|| "-".into());
    let data = match cx.read_input(&name) {
        Ok(d) => d,
        Err(e) => {
            cx.err_line(&format!(
                "tar: {name}: Cannot open: {e}\ntar: Error is not recoverable: exiting now"
            ));
            return Ok(TROUBLE);
        }
    };
    let compressed = data.len() >= 2 && data[0] == 0x1f && data[1] == 0x8b;
    let data = if o.gzip || (compressed && !from_stdin) {
        match super::gzip::decompress(cx, &data) {
            Ok(d) => d,
            Err(super::gzip::Fail::Stop(c)) => return Err(c),
            Err(super::gzip::Fail::Format) => {
                let which = if from_stdin { "stdin" } else { name.as_str() };
                cx.err_line(&format!(
                    "\ngzip: {which}: not in gzip format\ntar: Child returned status 1\n\
                     tar: Error is not recoverable: exiting now"
                ));
                return Ok(TROUBLE);
            }
        }
    } else if compressed {
        cx.err_line(
            "tar: Archive is compressed. Use -z option\ntar: Error is not recoverable: exiting now",
        );
        return Ok(TROUBLE);
    } else {
        data
    };
    let mut archive = tar::Archive::new(&data[..]);
    let entries = match archive.entries() {
        Ok(e) => e,
        Err(e) => {
            cx.err_line(&format!("tar: {e}"));
            return Ok(TROUBLE);
        }
    };
    let mut st = 0;
    let mut out = Vec::new();
    let mut listed = String::new();
    let mut long = Long { width: 18 };
    let mut found = vec![false; names.len()];
    for entry in entries {
        cx.tick()?;
        let mut entry = match entry {
            Ok(e) => e,
            Err(e) => {
                cx.err_line(&format!(
                    "tar: This does not look like a tar archive ({e})\n\
                     tar: Exiting with failure status due to previous errors"
                ));
                return Ok(TROUBLE);
            }
        };
        let path = match entry.path() {
            Ok(p) => p.to_string_lossy().into_owned(),
            Err(_) => continue,
        };
        if excluded(o, &path) {
            continue;
        }
        if !names.is_empty() {
            let bare = path.trim_end_matches('/');
            let mut any = false;
            for (k, n) in names.iter().enumerate() {
                let n = n.trim_end_matches('/');
                if bare == n || bare.strip_prefix(n).is_some_and(|r| r.starts_with('/')) {
                    found[k] = true;
                    any = true;
                }
            }
            if !any {
                continue;
            }
        }
        let link = entry
            .link_name()
            .ok()
            .flatten()
            .map(|l| l.to_string_lossy().into_owned());
        if list {
            if o.verbose > 0 {
                listed.push_str(&long.line(entry.header(), &path, link.as_deref()));
            } else {
                listed.push_str(&path);
                listed.push('\n');
            }
            continue;
        }
        let Some(stripped) = strip(&path, o.strip) else {
            continue;
        };
        match o.verbose {
            0 => {}
            1 => {
                listed.push_str(&path);
                listed.push('\n');
            }
            _ => listed.push_str(&long.line(entry.header(), &path, link.as_deref())),
        }
        let kind = entry.header().entry_type();
        if o.to_stdout {
            if kind.is_file() || kind == tar::EntryType::Continuous {
                let mut bytes = Vec::new();
                if entry.read_to_end(&mut bytes).is_err() {
                    cx.err_line(&format!("tar: {path}: Unexpected EOF in archive"));
                    return Ok(TROUBLE);
                }
                cx.hold(bytes.len())?;
                out.extend_from_slice(&bytes);
                if out.len() >= 64 << 10 {
                    cx.out(&std::mem::take(&mut out))?;
                }
            }
            continue;
        }
        let rel = stripped.trim_start_matches("./").trim_end_matches('/');
        if rel.is_empty() {
            continue;
        }
        if rel.starts_with('/') || rel.split('/').any(|c| c == "..") {
            cx.err_line(&format!(
                "tar: {path}: Member name contains '..' or is absolute; skipped"
            ));
            st = TROUBLE;
            continue;
        }
        let target = format!("{}/{}", base.trim_end_matches('/'), rel);
        let mode = entry.header().mode().unwrap_or(0o644) & 0o7777;
        let mtime = entry.header().mtime().unwrap_or(0) as i64;
        let parent = match target.rfind('/') {
            Some(0) | None => "/".to_string(),
            Some(i) => target[..i].to_string(),
        };
        if cx.vfs().mkdir_p(&parent, 0o755).is_err() {
            cx.err_line(&format!("tar: {path}: Cannot mkdir"));
            st = TROUBLE;
            continue;
        }
        let r: Result<(), Errno> = match kind {
            tar::EntryType::Directory => cx.vfs().mkdir_p(&target, mode).map(|ino| {
                if let Some(n) = cx.vfs().get_mut(ino) {
                    n.mode = mode;
                }
            }),
            tar::EntryType::Symlink => {
                let link = link.unwrap_or_default();
                let _ = cx.vfs().unlink("/", &target);
                cx.vfs().symlink("/", &link, &target)
            }
            tar::EntryType::Link => {
                let link = link.unwrap_or_default();
                let link = strip(&link, o.strip).unwrap_or(link);
                let from = format!(
                    "{}/{}",
                    base.trim_end_matches('/'),
                    link.trim_start_matches("./")
                );
                let _ = cx.vfs().unlink("/", &target);
                cx.vfs().hard_link("/", &from, &target)
            }
            tar::EntryType::Regular | tar::EntryType::Continuous | tar::EntryType::GNUSparse => {
                let mut bytes = Vec::new();
                if entry.read_to_end(&mut bytes).is_err() {
                    cx.err_line(&format!("tar: {path}: Unexpected EOF in archive"));
                    return Ok(TROUBLE);
                }
                match cx.vfs().resolve_parent("/", &target) {
                    Ok((d, name)) => cx.vfs().put_file(d, &name, bytes, mode).map(|ino| {
                        if let Some(n) = cx.vfs().get_mut(ino) {
                            n.mtime = mtime;
                        }
                    }),
                    Err(e) => Err(e),
                }
            }
            _ => Ok(()),
        };
        match r {
            Ok(()) => {}
            Err(Errno::NoSpc) => return Err(Ctl::Budget("disk limit exceeded".into())),
            Err(e) => {
                cx.err_line(&format!("tar: {path}: Cannot create: {}", e.msg()));
                st = TROUBLE;
            }
        }
    }
    if !out.is_empty() {
        cx.out(&out)?;
    }
    if !listed.is_empty() {
        // with the contents on standard output, the names go to standard error
        if o.to_stdout {
            cx.err_line(listed.trim_end_matches('\n'));
        } else {
            cx.out(listed.as_bytes())?;
        }
    }
    let mut missing = false;
    for (k, n) in names.iter().enumerate() {
        if !found[k] {
            cx.err_line(&format!("tar: {n}: Not found in archive"));
            missing = true;
        }
    }
    if missing {
        cx.err_line("tar: Exiting with failure status due to previous errors");
        st = TROUBLE;
    }
    Ok(st)
}
