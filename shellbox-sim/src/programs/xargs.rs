//! `xargs` (GNU findutils 4.9): builds command lines from standard input (blank- and
//! newline-separated words with `'`, `"` and `\` quoting; `-0`/`--null`, `-d DELIM`),
//! `-n MAX-ARGS`, `-L MAX-LINES`, `-I REPLACE` (one command per line, leading blanks
//! dropped), `-r`/`--no-run-if-empty`, `-t`/`--verbose`, `-a FILE`, `-E EOF`, `-s`/`-x`
//! accepted, `-P` run one at a time (the outputs are then in order). The command runs
//! through the machine's programs (default `echo`). Exit 123 when a command exits 1–125,
//! 124 when one exits 255, 126/127 when it cannot run or is not found, 1 on a usage error.

use super::opts::{Arg, Parser};
use super::Ctx;
use crate::mem::PacedVec;
use crate::shell::R;

/// xargs's usage status.
const USAGE: i32 = 1;

/// Input bytes (or words, or command lines) xargs handles between two looks at the clock:
/// its input can be tens of megabytes, and splitting it makes a string per word.
const UNITS_PER_CHECK: usize = 64 * 1024;

/// What one word costs in memory beyond its bytes, as xargs holds it: its `String`, the
/// `Vec` of its input line and the allocator's header. Charged to the memory budget as the
/// words are made (issue 16, the hour run's seed 20261206 case 62350: `head -c 3000000
/// /dev/zero | xargs -0` made three million empty words, 205 MiB of memory no budget saw).
const WORD_OVERHEAD_BYTES: usize =
    std::mem::size_of::<String>() + std::mem::size_of::<Vec<String>>() + 16;

const LONGS: &[&str] = &[
    "null",
    "delimiter",
    "max-args",
    "max-lines",
    "replace",
    "no-run-if-empty",
    "verbose",
    "arg-file",
    "eof",
    "max-chars",
    "exit",
    "max-procs",
    "interactive",
    "open-tty",
    "process-slot-var",
    "show-limits",
    "help",
    "version",
];

/// Splits `data` into xargs's words, grouped by input line; the inner `Err` is GNU's
/// message on an unmatched quote. `check` is called every [`UNITS_PER_CHECK`] bytes with
/// the memory the words made since the last call hold (the outer error: the command must
/// stop).
fn words(
    data: &[u8],
    eof: Option<&str>,
    mut check: impl FnMut(usize) -> R<()>,
) -> R<Result<Vec<Vec<String>>, String>> {
    let mut made = 0usize;
    // words grouped by input line (for -L); buried, not freed, should the deadline pass
    let mut lines: PacedVec<Vec<String>> = PacedVec::new(Vec::new());
    let mut cur_line: Vec<String> = Vec::new();
    let mut w = Vec::new();
    let mut in_word = false;
    let mut quote: Option<u8> = None;
    let mut i = 0;
    while i < data.len() {
        if i % UNITS_PER_CHECK == UNITS_PER_CHECK - 1 {
            check(std::mem::take(&mut made))?;
        }
        let b = data[i];
        i += 1;
        if let Some(q) = quote {
            if b == q {
                quote = None;
            } else if b == b'\n' {
                let kind = if q == b'\'' { "single" } else { "double" };
                return Ok(Err(format!("xargs: unmatched {kind} quote; by default quotes are special to xargs unless you use the -0 option")));
            } else {
                w.push(b);
            }
            continue;
        }
        match b {
            b'\'' | b'"' => {
                quote = Some(b);
                in_word = true;
            }
            b'\\' if i < data.len() => {
                w.push(data[i]);
                i += 1;
                in_word = true;
            }
            b' ' | b'\t' | b'\n' => {
                if in_word {
                    let s = String::from_utf8_lossy(&w).into_owned();
                    if eof.is_some_and(|e| e == s) {
                        if !cur_line.is_empty() {
                            lines.push(cur_line);
                        }
                        return Ok(Ok(std::mem::take(&mut *lines)));
                    }
                    made += WORD_OVERHEAD_BYTES + s.len();
                    cur_line.push(s);
                    w.clear();
                    in_word = false;
                }
                if b == b'\n' && !cur_line.is_empty() {
                    lines.push(std::mem::take(&mut cur_line));
                }
            }
            _ => {
                w.push(b);
                in_word = true;
            }
        }
    }
    if let Some(q) = quote {
        let kind = if q == b'\'' { "single" } else { "double" };
        return Ok(Err(format!("xargs: unmatched {kind} quote; by default quotes are special to xargs unless you use the -0 option")));
    }
    if in_word {
        let s = String::from_utf8_lossy(&w).into_owned();
        if eof.is_none_or(|e| e != s) {
            cur_line.push(s);
        }
    }
    if !cur_line.is_empty() {
        lines.push(cur_line);
    }
    Ok(Ok(std::mem::take(&mut *lines)))
}

fn parse_count(cx: &mut Ctx<'_, '_>, opt: char, v: &str) -> Option<usize> {
    match v.parse::<usize>() {
        Ok(n) if n >= 1 => Some(n),
        Ok(_) => {
            cx.err_line(&format!(
                "xargs: value {v} for -{opt} option should be >= 1"
            ));
            None
        }
        Err(_) => {
            cx.err_line(&format!("xargs: invalid number \"{v}\" for -{opt} option"));
            None
        }
    }
}

pub(super) fn main(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    // options end at the first operand: the command and its arguments follow raw
    let split = args
        .iter()
        .scan(false, |takes_value, a| {
            let was_value = *takes_value;
            *takes_value = matches!(
                a.as_str(),
                "-n" | "-L" | "-I" | "-d" | "-a" | "-E" | "-s" | "-P"
            );
            Some(was_value || a.starts_with('-') && a != "-")
        })
        .position(|is_opt| !is_opt)
        .unwrap_or(args.len());
    let (opt_args, cmd) = args.split_at(split);
    let mut p = Parser::new("xargs", opt_args, LONGS);
    let (mut null, mut delim, mut max_args, mut max_lines) = (false, None::<u8>, None, None);
    let (mut replace, mut no_empty, mut verbose) = (None::<String>, false, false);
    let (mut arg_file, mut eof) = (None::<String>, None::<String>);
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
        match arg {
            Arg::Short('0') | Arg::Long("null") => null = true,
            Arg::Short('d') | Arg::Long("delimiter") => {
                let v = value!();
                let d = match v.as_str() {
                    "\\n" => b'\n',
                    "\\t" => b'\t',
                    "\\0" => 0,
                    _ if v.len() == 1 => v.as_bytes()[0],
                    _ => {
                        cx.err_line(&format!("xargs: invalid input delimiter specification {v}: the delimiter must be either a single character or an escape sequence starting with \\."));
                        return Ok(USAGE);
                    }
                };
                delim = Some(d);
            }
            Arg::Short('n') | Arg::Long("max-args") => {
                let v = value!();
                match parse_count(cx, 'n', &v) {
                    Some(n) => max_args = Some(n),
                    None => return Ok(USAGE),
                }
            }
            Arg::Short('L') | Arg::Long("max-lines") => {
                let v = value!();
                match parse_count(cx, 'L', &v) {
                    Some(n) => max_lines = Some(n),
                    None => return Ok(USAGE),
                }
            }
            Arg::Short('I') | Arg::Long("replace") => replace = Some(value!()),
            Arg::Short('i') => replace = Some("{}".into()),
            Arg::Short('r') | Arg::Long("no-run-if-empty") => no_empty = true,
            Arg::Short('t') | Arg::Long("verbose") => verbose = true,
            Arg::Short('a') | Arg::Long("arg-file") => arg_file = Some(value!()),
            Arg::Short('E') | Arg::Long("eof") => eof = Some(value!()),
            Arg::Short('s') | Arg::Long("max-chars") | Arg::Short('P') | Arg::Long("max-procs") => {
                let _ = value!();
            }
            Arg::Short('x') | Arg::Long("exit") => {}
            Arg::Long(l) => return cx.unsupported_status(&format!("xargs option --{l}"), USAGE),
            Arg::Short(c @ ('p' | 'o')) => {
                return cx.unsupported_status(&format!("xargs option -{c}"), USAGE)
            }
            Arg::Short(c) => return super::usage(cx, p.invalid_short(c), USAGE),
            Arg::Operand(_) => {}
        }
    }
    let cmd: Vec<String> = if cmd.is_empty() {
        vec!["echo".into()]
    } else {
        cmd.to_vec()
    };
    let input = arg_file.unwrap_or_else(|| "-".into());
    let data = match cx.read_input(&input) {
        Ok(d) => d,
        Err(e) => {
            cx.err_line(&format!("xargs: {input}: {e}"));
            return Ok(USAGE);
        }
    };
    let sep = if null { Some(0) } else { delim };
    // each group is the arguments of one command; the input is split, and the groups
    // made, looking at the clock every UNITS_PER_CHECK bytes or groups
    let lines: Vec<Vec<String>> = if let Some(d) = sep {
        let body = data.strip_suffix(&[d]).unwrap_or(&data);
        let mut lines = Vec::new();
        if !data.is_empty() {
            let mut made = 0usize;
            for (k, w) in body.split(|b| *b == d).enumerate() {
                if k % UNITS_PER_CHECK == UNITS_PER_CHECK - 1 {
                    cx.hold(std::mem::take(&mut made))?;
                    cx.check_time()?;
                }
                made += WORD_OVERHEAD_BYTES + w.len();
                lines.push(vec![String::from_utf8_lossy(w).into_owned()]);
            }
            cx.hold(made)?;
        }
        lines
    } else if replace.is_some() {
        let mut lines = Vec::new();
        let mut made = 0usize;
        for (k, l) in data.split_inclusive(|b| *b == b'\n').enumerate() {
            if k % UNITS_PER_CHECK == UNITS_PER_CHECK - 1 {
                cx.hold(std::mem::take(&mut made))?;
                cx.check_time()?;
            }
            made += WORD_OVERHEAD_BYTES + l.len();
            // as str::lines: the line ends at "\n" or "\r\n"
            let l = match l.strip_suffix(b"\n") {
                Some(l) => l.strip_suffix(b"\r").unwrap_or(l),
                None => l,
            };
            let l = String::from_utf8_lossy(l);
            let l = l.trim_start_matches([' ', '\t']);
            if !l.is_empty() {
                lines.push(vec![l.to_string()]);
            }
        }
        lines
    } else {
        match words(&data, eof.as_deref(), |made| {
            cx.hold(made)?;
            cx.check_time()
        })? {
            Ok(w) => w,
            Err(m) => {
                cx.err_line(&m);
                return Ok(USAGE);
            }
        }
    };
    drop(data);
    // the words are moved into the groups, not copied; what is left when the deadline
    // passes is buried with them
    let mut lines = PacedVec::new(lines);
    // buried, not freed, should the deadline pass (a million words take tens of ms)
    let mut batches: PacedVec<Vec<String>> = PacedVec::new(Vec::new());
    if replace.is_some() {
        *batches = std::mem::take(&mut *lines);
    } else if let Some(l) = max_lines {
        let mut next = 0;
        while next < lines.len() {
            if batches.len() % UNITS_PER_CHECK == UNITS_PER_CHECK - 1 {
                cx.check_time()?;
            }
            let end = next.saturating_add(l).min(lines.len());
            let b: Vec<String> = lines[next..end]
                .iter_mut()
                .flat_map(std::mem::take)
                .collect();
            next = end;
            batches.push(b);
        }
    } else {
        let mut all = lines.iter_mut().flat_map(std::mem::take);
        match max_args {
            Some(n) => loop {
                if batches.len() % UNITS_PER_CHECK == UNITS_PER_CHECK - 1 {
                    cx.check_time()?;
                }
                let b: Vec<String> = all.by_ref().take(n).collect();
                if b.is_empty() {
                    break;
                }
                batches.push(b);
            },
            None => {
                drop(all);
                // one command line of every word, moved line by line
                let mut one = Vec::new();
                for k in 0..lines.len() {
                    if k % UNITS_PER_CHECK == UNITS_PER_CHECK - 1 {
                        cx.check_time()?;
                    }
                    one.append(&mut lines[k]);
                }
                if !one.is_empty() {
                    batches.push(one);
                }
            }
        }
    }
    if batches.is_empty() && !no_empty && replace.is_none() {
        batches.push(Vec::new());
    }
    let mut status = 0;
    for k in 0..batches.len() {
        cx.tick()?;
        let b = std::mem::take(&mut batches[k]);
        let argv: Vec<String> = match &replace {
            Some(r) => cmd.iter().map(|c| c.replace(r.as_str(), &b[0])).collect(),
            None => {
                // the words are moved in one copy of their handles
                let mut argv = Vec::with_capacity(cmd.len() + b.len());
                argv.extend(cmd.iter().cloned());
                argv.extend(b);
                argv
            }
        };
        if verbose {
            cx.err_line(&argv.join(" "));
        }
        let name = argv[0].clone();
        let st = cx.run(argv)?;
        match st {
            0 => {}
            127 => {
                return Ok(127);
            }
            126 => return Ok(126),
            255 => {
                cx.err_line(&format!("xargs: {name}: exited with status 255; aborting"));
                return Ok(124);
            }
            s if s > 128 => {
                cx.err_line(&format!("xargs: {name}: terminated by signal {}", s - 128));
                return Ok(125);
            }
            _ => status = 123,
        }
    }
    Ok(status)
}
