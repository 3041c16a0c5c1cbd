//! Disk usage: `du` (coreutils 9.1: `-s -h -a -c -b -k -m -d N`/`--max-depth`,
//! `--apparent-size`) with usage counted as on ext4 with 4 KiB blocks (a directory 4 KiB,
//! a file its size rounded up to blocks, a symlink nothing), an inode counted once across
//! operands, entries in name order; and `df` (`-h`, `-k`, `-T`, operands) over one fixed
//! virtual disk, `shellbox` mounted on `/`, as big as the machine's disk budget. Other
//! options fail visibly with status 1. `du` looks at the clock per entry.

use std::collections::HashSet;

use super::opts::{Arg, Parser};
use super::Ctx;
use crate::shell::R;
use crate::vfs::Kind;

/// The block size usage is counted in.
const BLOCK: u64 = 4096;

/// `n` bytes as `-h` prints them: powers of 1024, rounded up, one decimal under 10.
fn human(n: u64) -> String {
    if n < 1024 {
        return n.to_string();
    }
    let units = ['K', 'M', 'G', 'T', 'P', 'E'];
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if v < 10.0 {
        let r = (v * 10.0).ceil() / 10.0;
        if r >= 10.0 {
            return format!("{}{}", r.ceil() as u64, units[u]);
        }
        format!("{r:.1}{}", units[u])
    } else {
        let r = v.ceil();
        if r >= 1024.0 && u + 1 < units.len() {
            return format!("1.0{}", units[u + 1]);
        }
        format!("{}{}", r as u64, units[u])
    }
}

struct Du {
    all: bool,
    apparent: bool,
    max_depth: Option<usize>,
    seen: HashSet<usize>,
    lines: Vec<(u64, String)>,
    steps: usize,
}

/// One directory being walked: what [`Du::walk`] keeps per level instead of recursing.
struct Frame {
    depth: usize,
    is_dir: bool,
    total: u64,
    entries: Vec<(String, usize)>,
    next: usize,
    /// The path's length before this entry's name was added.
    parent_len: usize,
}

impl Du {
    /// The frame for `ino` at `depth` (its own usage counted), or `None` when the inode
    /// was counted already.
    fn enter(
        &mut self,
        cx: &mut Ctx<'_, '_>,
        ino: usize,
        depth: usize,
        parent_len: usize,
    ) -> R<Option<Frame>> {
        self.steps += 1;
        if crate::shell::stop_due() {
            return Err(cx.interrupted());
        }
        if self.steps.is_multiple_of(4096) {
            cx.tick()?;
        }
        if !self.seen.insert(ino) {
            return Ok(None);
        }
        let node = cx.vfs().get(ino);
        let own = if self.apparent {
            node.size()
        } else {
            match &node.kind {
                Kind::Dir(..) => BLOCK,
                Kind::File(d) => (d.len() as u64).div_ceil(BLOCK) * BLOCK,
                _ => 0,
            }
        };
        let is_dir = node.is_dir();
        let entries = if is_dir {
            cx.vfs().list(ino).unwrap_or_default()
        } else {
            Vec::new()
        };
        Ok(Some(Frame {
            depth,
            is_dir,
            total: own,
            entries,
            next: 0,
            parent_len,
        }))
    }

    /// The usage of `ino` at `path` (depth `depth`), its lines recorded. The walk keeps
    /// its own stack (and one path buffer), so a tree of any depth is walked (GNU's fts
    /// walks any depth too); a recursion overflowed the host's stack at ~6,000 levels.
    fn walk(&mut self, cx: &mut Ctx<'_, '_>, ino: usize, path: &str, depth: usize) -> R<u64> {
        let mut path = path.to_string();
        let mut stack = match self.enter(cx, ino, depth, path.len())? {
            Some(f) => vec![f],
            None => return Ok(0),
        };
        loop {
            let Some(top) = stack.last_mut() else {
                return Ok(0);
            };
            if top.next < top.entries.len() {
                let (name, child) = std::mem::take(&mut top.entries[top.next]);
                top.next += 1;
                if name == "." || name == ".." {
                    continue;
                }
                let d = top.depth + 1;
                let parent_len = path.len();
                if !path.ends_with('/') {
                    path.push('/');
                }
                path.push_str(&name);
                match self.enter(cx, child, d, parent_len)? {
                    Some(f) => stack.push(f),
                    None => path.truncate(parent_len),
                }
                continue;
            }
            let Some(f) = stack.pop() else {
                return Ok(0);
            };
            let shown = self.max_depth.is_none_or(|m| f.depth <= m);
            if shown && (f.is_dir || self.all || f.depth == depth) {
                self.lines.push((f.total, path.clone()));
            }
            path.truncate(f.parent_len);
            match stack.last_mut() {
                Some(parent) => parent.total += f.total,
                None => return Ok(f.total),
            }
        }
    }
}

pub(super) fn du(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new(
        "du",
        args,
        &[
            "summarize",
            "human-readable",
            "all",
            "total",
            "bytes",
            "apparent-size",
            "max-depth",
        ],
    );
    let (mut summarize, mut human_readable, mut all, mut total) = (false, false, false, false);
    let (mut apparent, mut unit) = (false, 1024u64);
    let mut max_depth = None;
    let mut files = Vec::new();
    loop {
        match p.next_in(cx)? {
            Ok(Some(Arg::Short('s'))) | Ok(Some(Arg::Long("summarize"))) => summarize = true,
            Ok(Some(Arg::Short('h'))) | Ok(Some(Arg::Long("human-readable"))) => {
                human_readable = true
            }
            Ok(Some(Arg::Short('a'))) | Ok(Some(Arg::Long("all"))) => all = true,
            Ok(Some(Arg::Short('c'))) | Ok(Some(Arg::Long("total"))) => total = true,
            Ok(Some(Arg::Short('b'))) | Ok(Some(Arg::Long("bytes"))) => {
                apparent = true;
                unit = 1;
            }
            Ok(Some(Arg::Long("apparent-size"))) => apparent = true,
            Ok(Some(Arg::Short('k'))) => unit = 1024,
            Ok(Some(Arg::Short('m'))) => unit = 1 << 20,
            Ok(Some(Arg::Short('d'))) | Ok(Some(Arg::Long("max-depth"))) => {
                let v = match p.value() {
                    Ok(v) => v,
                    Err(u) => return super::usage(cx, u, 1),
                };
                match v.parse::<usize>() {
                    Ok(n) => max_depth = Some(n),
                    Err(_) => {
                        cx.err_line(&format!("du: invalid maximum depth '{v}'"));
                        return Ok(1);
                    }
                }
            }
            Ok(Some(Arg::Short(
                c @ ('x' | 'L' | 'P' | 'H' | 'l' | 'S' | 'B' | 't' | 'X' | '0'),
            ))) => return cx.unsupported_status(&format!("du option -{c}"), 1),
            Ok(Some(Arg::Short(c))) => return super::usage(cx, p.invalid_short(c), 1),
            Ok(Some(Arg::Long(l))) => return cx.unsupported_status(&format!("du --{l}"), 1),
            Ok(Some(Arg::Operand(o))) => files.push(o),
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, 1),
        }
    }
    if summarize && all {
        cx.err_line(
            "du: cannot both summarize and show all entries\nTry 'du --help' for more information.",
        );
        return Ok(1);
    }
    if summarize {
        max_depth = Some(0);
    }
    if files.is_empty() {
        files.push(".".into());
    }
    let mut d = Du {
        all,
        apparent,
        max_depth,
        seen: HashSet::new(),
        lines: Vec::new(),
        steps: 0,
    };
    let cwd = cx.cwd().to_string();
    let mut status = 0;
    let mut grand = 0u64;
    let mut out = String::new();
    let show = |n: u64| -> String {
        if human_readable {
            human(n)
        } else {
            n.div_ceil(unit).to_string()
        }
    };
    for f in &files {
        match cx.vfs().resolve(&cwd, f, false) {
            Ok(ino) => {
                // an operand that is a link counts as the link (GNU: without -L)
                d.lines.clear();
                grand += d.walk(cx, ino, f, 0)?;
                for (n, path) in &d.lines {
                    out.push_str(&format!("{}\t{path}\n", show(*n)));
                }
            }
            Err(e) => {
                cx.err_line(&format!("du: cannot access '{f}': {}", e.msg()));
                status = 1;
            }
        }
    }
    if total {
        out.push_str(&format!("{}\ttotal\n", show(grand)));
    }
    cx.out(out.as_bytes())?;
    Ok(status)
}

pub(super) fn df(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new("df", args, &["human-readable", "print-type", "portability"]);
    let (mut human_readable, mut typed) = (false, false);
    let mut files = Vec::new();
    loop {
        match p.next_in(cx)? {
            Ok(Some(Arg::Short('h'))) | Ok(Some(Arg::Long("human-readable"))) => {
                human_readable = true
            }
            Ok(Some(Arg::Short('T'))) | Ok(Some(Arg::Long("print-type"))) => typed = true,
            Ok(Some(Arg::Short('k' | 'P'))) | Ok(Some(Arg::Long("portability"))) => {}
            Ok(Some(Arg::Short(c @ ('a' | 'i' | 'l' | 't' | 'x' | 'B' | 'H')))) => {
                return cx.unsupported_status(&format!("df option -{c}"), 1)
            }
            Ok(Some(Arg::Short(c))) => return super::usage(cx, p.invalid_short(c), 1),
            Ok(Some(Arg::Long(l))) => return cx.unsupported_status(&format!("df --{l}"), 1),
            Ok(Some(Arg::Operand(o))) => files.push(o),
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, 1),
        }
    }
    let cwd = cx.cwd().to_string();
    let mut status = 0;
    let mut rows = 1;
    if !files.is_empty() {
        rows = 0;
        for f in &files {
            match cx.vfs().resolve(&cwd, f, true) {
                Ok(_) => rows += 1,
                Err(e) => {
                    cx.err_line(&format!("df: {f}: {}", e.msg()));
                    status = 1;
                }
            }
        }
    }
    let size = cx.vfs().disk_limit;
    let used = cx.vfs().used_bytes.min(size);
    let avail = size - used;
    let pct = if size == 0 {
        0
    } else {
        (used * 100).div_ceil(size)
    };
    let (s, u, a) = if human_readable {
        (human(size), human(used), human(avail))
    } else {
        (
            size.div_ceil(1024).to_string(),
            used.div_ceil(1024).to_string(),
            avail.div_ceil(1024).to_string(),
        )
    };
    if rows == 0 {
        return Ok(status);
    }
    // GNU's table: every column as wide as its widest cell (header included), names and
    // types left-aligned, numbers right-aligned, one space between
    let mut table: Vec<Vec<String>> = vec![vec!["Filesystem".into()]];
    let mut row = vec!["shellbox".to_string()];
    if typed {
        table[0].push("Type".into());
        row.push("shellbox".into());
    }
    if human_readable {
        table[0].extend(["Size", "Used", "Avail", "Use%", "Mounted on"].map(String::from));
    } else {
        table[0].extend(["1K-blocks", "Used", "Available", "Use%", "Mounted on"].map(String::from));
    }
    row.extend([s, u, a, format!("{pct}%"), "/".into()]);
    for _ in 0..rows {
        table.push(row.clone());
    }
    let ncols = table[0].len();
    let widths: Vec<usize> = (0..ncols)
        .map(|c| {
            table
                .iter()
                .map(|r| r[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let left = |c: usize| c == 0 || (typed && c == 1) || c == ncols - 1;
    let mut out = String::new();
    for r in &table {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            if c > 0 {
                line.push(' ');
            }
            let w = widths[c];
            if c == ncols - 1 {
                line.push_str(cell);
            } else if left(c) {
                line.push_str(&format!("{cell:<w$}"));
            } else {
                line.push_str(&format!("{cell:>w$}"));
            }
        }
        out.push_str(&line);
        out.push('\n');
    }
    cx.out(out.as_bytes())?;
    Ok(status)
}
