//! Text layout by columns: `fold` (coreutils 9.1: `-w N`, `-s`, `-b`; columns counted
//! per byte, tabs to the next multiple of 8, backspace and carriage return as GNU counts
//! them), `expand` (`-t N` or a list, `-i`) and `column -t` (util-linux 2.38: `-s SEPS`,
//! `-o SEP`; every row padded to the widest row's cells, the last cell unpadded, empty
//! lines dropped). Other options (and `column` without `-t`) fail visibly with the
//! tool's usage status. Each looks at the clock per line and charges its output every
//! 4096 lines.

use super::opts::{Arg, Parser};
use super::Ctx;
use crate::shell::R;

/// Per line: the clock; every 4096 lines the output against the budget.
fn pace(cx: &mut Ctx<'_, '_>, lines: &mut usize, charged: &mut usize, out: &[u8]) -> R<()> {
    *lines += 1;
    if crate::shell::stop_due() {
        return Err(cx.interrupted());
    }
    if lines.is_multiple_of(4096) {
        cx.hold(out.len().saturating_sub(*charged))?;
        *charged = out.len();
        cx.tick()?;
    }
    Ok(())
}

/// Every operand's bytes in turn (standard input when none); false when one failed.
fn inputs(cx: &mut Ctx<'_, '_>, prog: &str, files: &[String]) -> (Vec<Vec<u8>>, bool) {
    let names: Vec<String> = if files.is_empty() {
        vec!["-".into()]
    } else {
        files.to_vec()
    };
    let mut all = Vec::new();
    let mut ok = true;
    for f in &names {
        match cx.read_input(f) {
            Ok(d) => all.push(d),
            Err(e) => {
                cx.err_line(&format!("{prog}: {f}: {e}"));
                ok = false;
            }
        }
    }
    (all, ok)
}

/// The lines of `d` with their newlines (a last unterminated line as it is).
fn lines(d: &[u8]) -> impl Iterator<Item = &[u8]> {
    d.split_inclusive(|b| *b == b'\n')
}

pub(super) fn fold(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new("fold", args, &["bytes", "spaces", "width"]);
    let (mut width, mut spaces, mut bytes) = (80usize, false, false);
    let mut files = Vec::new();
    loop {
        match p.next_in(cx)? {
            Ok(Some(Arg::Short('b'))) | Ok(Some(Arg::Long("bytes"))) => bytes = true,
            Ok(Some(Arg::Short('s'))) | Ok(Some(Arg::Long("spaces"))) => spaces = true,
            Ok(Some(Arg::Short('w'))) | Ok(Some(Arg::Long("width"))) => {
                let v = match p.value() {
                    Ok(v) => v,
                    Err(u) => return super::usage(cx, u, 1),
                };
                match v.parse::<usize>() {
                    Ok(n) if n > 0 => width = n,
                    _ => {
                        cx.err_line(&format!("fold: invalid number of columns: '{v}'"));
                        return Ok(1);
                    }
                }
            }
            Ok(Some(Arg::Short(c))) if c.is_ascii_digit() => {
                // `-5` is `-w 5` (obsolete form): its digits come one at a time
                width = if width == 80 { 0 } else { width } * 10 + c as usize - '0' as usize;
            }
            Ok(Some(Arg::Short(c))) => return super::usage(cx, p.invalid_short(c), 1),
            Ok(Some(Arg::Long(l))) => return cx.unsupported_status(&format!("fold --{l}"), 1),
            Ok(Some(Arg::Operand(o))) => files.push(o),
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, 1),
        }
    }
    let width = width.max(1);
    let (data, ok) = inputs(cx, "fold", &files);
    let adjust = |col: usize, c: u8| -> usize {
        if bytes {
            return col + 1;
        }
        match c {
            b'\x08' => col.saturating_sub(1),
            b'\r' => 0,
            b'\t' => col + 8 - col % 8,
            _ => col + 1,
        }
    };
    let mut out = Vec::new();
    let (mut n, mut charged) = (0usize, 0usize);
    for d in &data {
        let mut line: Vec<u8> = Vec::new();
        let mut col = 0usize;
        for &c in d {
            if c == b'\n' {
                line.push(c);
                out.extend_from_slice(&line);
                line.clear();
                col = 0;
                pace(cx, &mut n, &mut charged, &out)?;
                continue;
            }
            loop {
                col = adjust(col, c);
                if col <= width {
                    line.push(c);
                    break;
                }
                if spaces {
                    if let Some(last) = line.iter().rposition(|b| *b == b' ' || *b == b'\t') {
                        let end = last + 1;
                        out.extend_from_slice(&line[..end]);
                        out.push(b'\n');
                        line.drain(..end);
                        col = line.iter().fold(0, |k, &b| adjust(k, b));
                        pace(cx, &mut n, &mut charged, &out)?;
                        continue;
                    }
                }
                if line.is_empty() {
                    line.push(c);
                    break;
                }
                out.extend_from_slice(&line);
                out.push(b'\n');
                line.clear();
                col = 0;
                pace(cx, &mut n, &mut charged, &out)?;
            }
        }
        out.extend_from_slice(&line);
    }
    cx.out(&out)?;
    Ok(if ok { 0 } else { 1 })
}

/// Tab stops: one width (every N columns) or a list of columns.
enum Stops {
    Every(usize),
    List(Vec<usize>),
}

impl Stops {
    /// The column a tab at `col` moves to.
    fn next(&self, col: usize) -> usize {
        match self {
            Stops::Every(n) => col + n - col % n,
            Stops::List(l) => l.iter().copied().find(|s| *s > col).unwrap_or(col + 1),
        }
    }
}

fn parse_stops(v: &str) -> Option<Stops> {
    let list: Vec<usize> = v
        .split([',', ' '])
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().ok())
        .collect::<Option<_>>()?;
    match list.as_slice() {
        [] => None,
        [0] => None,
        [n] => Some(Stops::Every(*n)),
        l if l.windows(2).all(|w| w[0] < w[1]) => Some(Stops::List(l.to_vec())),
        _ => None,
    }
}

pub(super) fn expand(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new("expand", args, &["initial", "tabs"]);
    let mut stops = Stops::Every(8);
    let mut initial = false;
    let mut files = Vec::new();
    loop {
        match p.next_in(cx)? {
            Ok(Some(Arg::Short('i'))) | Ok(Some(Arg::Long("initial"))) => initial = true,
            Ok(Some(Arg::Short('t'))) | Ok(Some(Arg::Long("tabs"))) => {
                let v = match p.value() {
                    Ok(v) => v,
                    Err(u) => return super::usage(cx, u, 1),
                };
                match parse_stops(&v) {
                    Some(s) => stops = s,
                    None => {
                        cx.err_line(&format!(
                            "expand: tab size contains invalid character(s): '{v}'"
                        ));
                        return Ok(1);
                    }
                }
            }
            Ok(Some(Arg::Short(c))) => return super::usage(cx, p.invalid_short(c), 1),
            Ok(Some(Arg::Long(l))) => return cx.unsupported_status(&format!("expand --{l}"), 1),
            Ok(Some(Arg::Operand(o))) => files.push(o),
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, 1),
        }
    }
    let (data, ok) = inputs(cx, "expand", &files);
    let mut out = Vec::new();
    let (mut n, mut charged) = (0usize, 0usize);
    for d in &data {
        for line in lines(d) {
            pace(cx, &mut n, &mut charged, &out)?;
            let mut col = 0usize;
            let mut leading = true;
            for &c in line {
                match c {
                    b'\t' if leading || !initial => {
                        let to = stops.next(col);
                        out.extend(std::iter::repeat_n(b' ', to - col));
                        col = to;
                    }
                    b'\x08' => {
                        out.push(c);
                        col = col.saturating_sub(1);
                        leading = false;
                    }
                    b'\n' => out.push(c),
                    _ => {
                        if c != b' ' {
                            leading = false;
                        }
                        out.push(c);
                        col += 1;
                    }
                }
            }
        }
    }
    cx.out(&out)?;
    Ok(if ok { 0 } else { 1 })
}

pub(super) fn column(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new(
        "column",
        args,
        &[
            "table",
            "separator",
            "output-separator",
            "fillrows",
            "json",
            "table-columns",
        ],
    );
    let mut table = false;
    let mut seps: Option<Vec<char>> = None;
    let mut osep = "  ".to_string();
    let mut files = Vec::new();
    loop {
        match p.next_in(cx)? {
            Ok(Some(Arg::Short('t'))) | Ok(Some(Arg::Long("table"))) => table = true,
            Ok(Some(Arg::Short('s'))) | Ok(Some(Arg::Long("separator"))) => match p.value() {
                // lexopt reads `-s=` as an empty value (getopt: `=`)
                Ok(v) if v.is_empty() => seps = Some(vec!['=']),
                Ok(v) => seps = Some(v.chars().collect()),
                Err(u) => return super::usage(cx, u, 1),
            },
            Ok(Some(Arg::Short('o'))) | Ok(Some(Arg::Long("output-separator"))) => {
                match p.value() {
                    Ok(v) => osep = v,
                    Err(u) => return super::usage(cx, u, 1),
                }
            }
            Ok(Some(Arg::Short(c))) => {
                return cx.unsupported_status(&format!("column option -{c}"), 1)
            }
            Ok(Some(Arg::Long(l))) => {
                return cx.unsupported_status(&format!("column option --{l}"), 1)
            }
            Ok(Some(Arg::Operand(o))) => files.push(o),
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, 1),
        }
    }
    if !table {
        return cx.unsupported_status("column without -t", 1);
    }
    let (data, ok) = inputs(cx, "column", &files);
    let mut rows: Vec<Vec<String>> = Vec::new();
    let (mut n, mut charged) = (0usize, 0usize);
    for d in &data {
        let text = String::from_utf8_lossy(d);
        for line in text.lines() {
            pace(cx, &mut n, &mut charged, &[])?;
            let cells: Vec<String> = match &seps {
                None => line.split_whitespace().map(str::to_string).collect(),
                Some(s) => {
                    if line.is_empty() {
                        Vec::new()
                    } else {
                        line.split(|c| s.contains(&c)).map(str::to_string).collect()
                    }
                }
            };
            if !cells.is_empty() {
                rows.push(cells);
            }
        }
    }
    let ncols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0usize; ncols];
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let mut out = Vec::new();
    for r in &rows {
        pace(cx, &mut n, &mut charged, &out)?;
        let mut line = String::new();
        for (i, w) in widths.iter().enumerate() {
            let cell = r.get(i).map_or("", String::as_str);
            line.push_str(cell);
            if i + 1 < ncols {
                line.extend(std::iter::repeat_n(' ', w - cell.chars().count()));
                line.push_str(&osep);
            }
        }
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
    }
    cx.out(&out)?;
    Ok(if ok { 0 } else { 1 })
}
