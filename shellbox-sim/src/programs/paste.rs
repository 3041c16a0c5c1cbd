//! `paste` (GNU coreutils 9.1): joins corresponding lines of files (`-` is standard input,
//! read a line at a time when named more than once), `-d`/`--delimiters` LIST (cycled;
//! `\n`, `\t`, `\\`, `\0` for none), `-s`/`--serial`, `-z`/`--zero-terminated`.

use super::opts::{Arg, Parser};
use super::Ctx;
use crate::shell::R;

/// GNU's usage status for paste.
const USAGE: i32 = 1;

/// The delimiter list with its escapes read; an empty entry is `\0` (no delimiter).
fn delimiters(text: &str) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        let d = if c == '\\' {
            match chars.next() {
                Some('n') => b"\n".to_vec(),
                Some('t') => b"\t".to_vec(),
                Some('0') => Vec::new(),
                Some('\\') | None => b"\\".to_vec(),
                Some(o) => o.to_string().into_bytes(),
            }
        } else {
            c.to_string().into_bytes()
        };
        out.push(d);
    }
    out
}

pub(super) fn main(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new(
        "paste",
        args,
        &["delimiters", "serial", "zero-terminated", "help", "version"],
    );
    let mut delims = vec![b"\t".to_vec()];
    let mut serial = false;
    let mut term = b'\n';
    let mut files = Vec::new();
    loop {
        match p.next_in(cx)? {
            Ok(Some(Arg::Short('d'))) | Ok(Some(Arg::Long("delimiters"))) => match p.value() {
                Ok(v) => delims = delimiters(&v),
                Err(u) => return super::usage(cx, u, USAGE),
            },
            Ok(Some(Arg::Short('s'))) | Ok(Some(Arg::Long("serial"))) => serial = true,
            Ok(Some(Arg::Short('z'))) | Ok(Some(Arg::Long("zero-terminated"))) => term = b'\0',
            Ok(Some(Arg::Long(l))) => return cx.unsupported(&format!("paste option --{l}")),
            Ok(Some(Arg::Short(c))) => return super::usage(cx, p.invalid_short(c), USAGE),
            Ok(Some(Arg::Operand(o))) => files.push(o),
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, USAGE),
        }
    }
    if delims.is_empty() {
        // GNU: `-d ''` means no delimiter
        delims.push(Vec::new());
    }
    if files.is_empty() {
        files.push("-".into());
    }
    // every input's bytes, read a line at a time as the rows are made; standard input is
    // read once and shared: each `-` in turn takes its next line
    let mut stdin: Option<usize> = None;
    let mut inputs: Vec<Lines> = Vec::new();
    // which input each operand reads
    let mut which: Vec<usize> = Vec::new();
    for f in &files {
        cx.check_time()?;
        if f == "-" {
            match stdin {
                Some(k) if !serial => which.push(k),
                // serial: the first `-` has all of standard input, a later one none
                Some(_) => {
                    which.push(inputs.len());
                    inputs.push(Lines::new(Vec::new()));
                }
                None => {
                    stdin = Some(inputs.len());
                    which.push(inputs.len());
                    inputs.push(Lines::new(cx.read_input("-").unwrap_or_default()));
                }
            }
            continue;
        }
        match cx.read_input(f) {
            Ok(d) => {
                which.push(inputs.len());
                inputs.push(Lines::new(d));
            }
            Err(e) => {
                cx.err_line(&format!("paste: {f}: {e}"));
                return Ok(1);
            }
        }
    }
    // the clock is looked at per megabyte copied (a row counts a little more than its bytes)
    let mut pace = crate::shell::Pacer::default();
    let mut charged = 0usize;
    let mut out = Vec::new();
    let mut rows = 0usize;
    let mut step = |cx: &mut Ctx<'_, '_>, out: &Vec<u8>, bytes: usize| -> R<()> {
        rows += 1;
        if pace.due(bytes.saturating_add(16)) {
            return Err(cx.interrupted());
        }
        if rows.is_multiple_of(1024) {
            cx.hold(out.len().saturating_sub(charged))?;
            charged = out.len();
            cx.tick()?;
        }
        Ok(())
    };
    if serial {
        for &k in &which {
            let mut i = 0;
            while let Some(l) = inputs[k].next(term) {
                if i > 0 {
                    out.extend_from_slice(&delims[(i - 1) % delims.len()]);
                }
                out.extend_from_slice(l);
                i += 1;
                step(cx, &out, l.len())?;
            }
            out.push(term);
            step(cx, &out, 0)?;
        }
    } else {
        loop {
            let row_start = out.len();
            let mut any = false;
            for (i, &k) in which.iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(&delims[(i - 1) % delims.len()]);
                }
                if let Some(l) = inputs[k].next(term) {
                    out.extend_from_slice(l);
                    any = true;
                }
            }
            if !any {
                out.truncate(row_start);
                break;
            }
            out.push(term);
            step(cx, &out, out.len() - row_start)?;
        }
    }
    cx.out(&out)?;
    Ok(0)
}

/// One input's bytes and how far its lines have been read.
struct Lines {
    data: Vec<u8>,
    pos: usize,
}

impl Lines {
    fn new(data: Vec<u8>) -> Self {
        Lines { data, pos: 0 }
    }

    /// The next line without its terminator (a last unterminated line counts); `None` at
    /// the end.
    fn next(&mut self, term: u8) -> Option<&[u8]> {
        let rest = self.data.get(self.pos..).filter(|r| !r.is_empty())?;
        let (line, used) = match rest.iter().position(|b| *b == term) {
            Some(n) => (&rest[..n], n + 1),
            None => (rest, rest.len()),
        };
        self.pos += used;
        Some(line)
    }
}
