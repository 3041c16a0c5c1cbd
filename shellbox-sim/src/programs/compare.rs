//! Comparing files: `comm` (GNU coreutils 9.1: `-1 -2 -3`; its input is taken as sorted,
//! unsorted input is not diagnosed), `cmp` (diffutils 3.8: `-s`/`--quiet`/`--silent`) and
//! `diff` (diffutils 3.8: the normal format and `-q`/`--brief`; other formats are
//! refused as unsupported). Exit statuses: 0 same, 1 different, 2 trouble.

use super::opts::{Arg, Parser};
use super::Ctx;
use crate::shell::R;

/// diffutils' status for trouble (and for usage).
const TROUBLE: i32 = 2;

/// Most cells of the line-matching table `diff` builds (lines of one file times lines of
/// the other); past it the comparison is refused as unsupported.
const MAX_DIFF_CELLS: usize = 16 << 20;

fn lines(d: &[u8]) -> Vec<&[u8]> {
    let mut v: Vec<&[u8]> = d.split_inclusive(|b| *b == b'\n').collect();
    if v.last().is_some_and(|l| l.is_empty()) {
        v.pop();
    }
    v
}

fn body(l: &[u8]) -> &[u8] {
    l.strip_suffix(b"\n").unwrap_or(l)
}

pub(super) fn comm(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new(
        "comm",
        args,
        &[
            "check-order",
            "nocheck-order",
            "output-delimiter",
            "total",
            "zero-terminated",
            "help",
            "version",
        ],
    );
    let mut hide = [false; 3];
    let mut files = Vec::new();
    loop {
        match p.next_in(cx)? {
            Ok(Some(Arg::Short(c @ ('1' | '2' | '3')))) => hide[c as usize - '1' as usize] = true,
            Ok(Some(Arg::Long("nocheck-order"))) => {}
            Ok(Some(Arg::Long(l))) => return cx.unsupported(&format!("comm option --{l}")),
            Ok(Some(Arg::Short(c))) => return super::usage(cx, p.invalid_short(c), 1),
            Ok(Some(Arg::Operand(o))) => files.push(o),
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, 1),
        }
    }
    if files.len() != 2 {
        let msg = match files.len() {
            0 => "comm: missing operand".to_string(),
            1 => format!("comm: missing operand after \u{2018}{}\u{2019}", files[0]),
            _ => format!("comm: extra operand \u{2018}{}\u{2019}", files[2]),
        };
        cx.err_line(&format!("{msg}\nTry 'comm --help' for more information."));
        return Ok(1);
    }
    let mut data = Vec::new();
    for f in &files {
        cx.check_time()?;
        match cx.read_input(f) {
            Ok(d) => data.push(d),
            Err(e) => {
                cx.err_line(&format!("comm: {f}: {e}"));
                return Ok(1);
            }
        }
    }
    let (a, b) = (lines(&data[0]), lines(&data[1]));
    let mut out = Vec::new();
    let col = |out: &mut Vec<u8>, k: usize, l: &[u8]| {
        if hide[k] {
            return;
        }
        let tabs = (0..k).filter(|i| !hide[*i]).count();
        out.extend(std::iter::repeat_n(b'\t', tabs));
        out.extend_from_slice(body(l));
        out.push(b'\n');
    };
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if (i + j) % 4096 == 4095 {
            cx.tick()?;
        }
        match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) => match body(x).cmp(body(y)) {
                std::cmp::Ordering::Less => {
                    col(&mut out, 0, x);
                    i += 1;
                }
                std::cmp::Ordering::Greater => {
                    col(&mut out, 1, y);
                    j += 1;
                }
                std::cmp::Ordering::Equal => {
                    col(&mut out, 2, x);
                    i += 1;
                    j += 1;
                }
            },
            (Some(x), None) => {
                col(&mut out, 0, x);
                i += 1;
            }
            (None, Some(y)) => {
                col(&mut out, 1, y);
                j += 1;
            }
            (None, None) => break,
        }
    }
    cx.out(&out)?;
    Ok(0)
}

pub(super) fn cmp(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new(
        "cmp",
        args,
        &[
            "quiet",
            "silent",
            "print-bytes",
            "verbose",
            "bytes",
            "ignore-initial",
            "help",
            "version",
        ],
    );
    let mut silent = false;
    let mut files = Vec::new();
    loop {
        match p.next_in(cx)? {
            Ok(Some(Arg::Short('s'))) | Ok(Some(Arg::Long("quiet" | "silent"))) => silent = true,
            Ok(Some(Arg::Long(l))) => return cx.unsupported(&format!("cmp option --{l}")),
            Ok(Some(Arg::Short(c @ ('l' | 'b' | 'i' | 'n')))) => {
                return cx.unsupported(&format!("cmp option -{c}"))
            }
            Ok(Some(Arg::Short(c))) => return super::usage(cx, p.invalid_short(c), TROUBLE),
            Ok(Some(Arg::Operand(o))) => files.push(o),
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, TROUBLE),
        }
    }
    if files.is_empty() || files.len() > 2 {
        let msg = if files.is_empty() {
            "cmp: missing operand".to_string()
        } else {
            format!("cmp: extra operand '{}'", files[2])
        };
        cx.err_line(&format!("{msg}\nTry 'cmp --help' for more information."));
        return Ok(TROUBLE);
    }
    if files.len() == 1 {
        files.push("-".into());
    }
    let mut data = Vec::new();
    for f in &files {
        cx.check_time()?;
        match cx.read_input(f) {
            Ok(d) => data.push(d),
            Err(e) => {
                if !silent {
                    cx.err_line(&format!("cmp: {f}: {e}"));
                }
                return Ok(TROUBLE);
            }
        }
    }
    let (a, b) = (&data[0], &data[1]);
    let common = a.iter().zip(b.iter()).take_while(|(x, y)| x == y).count();
    if common == a.len() && common == b.len() {
        return Ok(0);
    }
    if silent {
        return Ok(1);
    }
    let newlines = a[..common].iter().filter(|c| **c == b'\n').count();
    if common == a.len() || common == b.len() {
        let (short, name) = if common == a.len() {
            (a, &files[0])
        } else {
            (b, &files[1])
        };
        if short.is_empty() {
            cx.err_line(&format!("cmp: EOF on {name} which is empty"));
        } else {
            let line = newlines + usize::from(short.last() != Some(&b'\n'));
            cx.err_line(&format!(
                "cmp: EOF on {name} after byte {common}, line {line}"
            ));
        }
        return Ok(1);
    }
    cx.out(
        format!(
            "{} {} differ: byte {}, line {}\n",
            files[0],
            files[1],
            common + 1,
            newlines + 1
        )
        .as_bytes(),
    )?;
    Ok(1)
}

/// `n` or `n,m` (1-based, inclusive).
fn range(from: usize, to: usize) -> String {
    if from == to {
        from.to_string()
    } else {
        format!("{from},{to}")
    }
}

pub(super) fn diff(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new(
        "diff",
        args,
        &[
            "brief",
            "normal",
            "unified",
            "context",
            "recursive",
            "new-file",
            "text",
            "help",
            "version",
        ],
    );
    let mut brief = false;
    let mut files = Vec::new();
    loop {
        match p.next_in(cx)? {
            Ok(Some(Arg::Short('q'))) | Ok(Some(Arg::Long("brief"))) => brief = true,
            Ok(Some(Arg::Long("normal"))) => {}
            Ok(Some(Arg::Short('a'))) | Ok(Some(Arg::Long("text"))) => {}
            Ok(Some(Arg::Long(l))) => return cx.unsupported(&format!("diff option --{l}")),
            Ok(Some(Arg::Short(c))) if c.is_ascii_alphanumeric() => {
                return cx.unsupported(&format!("diff option -{c}"))
            }
            Ok(Some(Arg::Short(c))) => return super::usage(cx, p.invalid_short(c), TROUBLE),
            Ok(Some(Arg::Operand(o))) => files.push(o),
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, TROUBLE),
        }
    }
    if files.len() != 2 {
        let msg = match files.len() {
            0 => "diff: missing operand".to_string(),
            1 => format!("diff: missing operand after '{}'", files[0]),
            _ => format!("diff: extra operand '{}'", files[2]),
        };
        cx.err_line(&format!(
            "{msg}\ndiff: Try 'diff --help' for more information."
        ));
        return Ok(TROUBLE);
    }
    let mut data = Vec::new();
    for f in &files {
        cx.check_time()?;
        let cwd = cx.cwd().to_string();
        if f != "-"
            && cx
                .vfs()
                .resolve(&cwd, f, true)
                .is_ok_and(|i| cx.vfs().get(i).is_dir())
        {
            return cx.unsupported("diff of directories");
        }
        match cx.read_input(f) {
            Ok(d) => data.push(d),
            Err(e) => {
                cx.err_line(&format!("diff: {f}: {e}"));
                return Ok(TROUBLE);
            }
        }
    }
    if data[0] == data[1] {
        return Ok(0);
    }
    if brief {
        cx.out(format!("Files {} and {} differ\n", files[0], files[1]).as_bytes())?;
        return Ok(1);
    }
    let (a, b) = (lines(&data[0]), lines(&data[1]));
    // the common head and tail need no table
    let head = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let tail = a[head..]
        .iter()
        .rev()
        .zip(b[head..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (ma, mb) = (&a[head..a.len() - tail], &b[head..b.len() - tail]);
    let (n, m) = (ma.len(), mb.len());
    if (n + 1).saturating_mul(m + 1) > MAX_DIFF_CELLS {
        return cx.unsupported(&format!("diff of {n} by {m} differing lines"));
    }
    cx.hold((n + 1) * (m + 1) * 4)?;
    // lcs[i][j]: the longest common subsequence of ma[i..] and mb[j..]
    let w = m + 1;
    let mut lcs = vec![0u32; (n + 1) * w];
    for i in (0..n).rev() {
        if i % 256 == 255 {
            cx.tick()?;
        }
        for j in (0..m).rev() {
            lcs[i * w + j] = if ma[i] == mb[j] {
                lcs[(i + 1) * w + j + 1] + 1
            } else {
                lcs[(i + 1) * w + j].max(lcs[i * w + j + 1])
            };
        }
    }
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && ma[i] == mb[j] {
            i += 1;
            j += 1;
            continue;
        }
        let (i0, j0) = (i, j);
        while i < n || j < m {
            if i < n && j < m && ma[i] == mb[j] {
                break;
            }
            if j >= m || (i < n && lcs[(i + 1) * w + j] >= lcs[i * w + j + 1]) {
                i += 1;
            } else {
                j += 1;
            }
        }
        let (a1, a2, b1, b2) = (head + i0 + 1, head + i, head + j0 + 1, head + j);
        let hunk = match (i > i0, j > j0) {
            (true, false) => format!("{}d{}\n", range(a1, a2), b1 - 1),
            (false, true) => format!("{}a{}\n", a1 - 1, range(b1, b2)),
            _ => format!("{}c{}\n", range(a1, a2), range(b1, b2)),
        };
        out.extend_from_slice(hunk.as_bytes());
        let show = |out: &mut Vec<u8>, mark: &[u8], l: &[u8]| {
            out.extend_from_slice(mark);
            out.extend_from_slice(l);
            if !l.ends_with(b"\n") {
                out.extend_from_slice(b"\n\\ No newline at end of file\n");
            }
        };
        for l in &ma[i0..i] {
            show(&mut out, b"< ", l);
        }
        if i > i0 && j > j0 {
            out.extend_from_slice(b"---\n");
        }
        for l in &mb[j0..j] {
            show(&mut out, b"> ", l);
        }
    }
    cx.out(&out)?;
    Ok(1)
}
