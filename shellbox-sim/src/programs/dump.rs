//! Byte dumps: `od` (GNU coreutils 9.1: `-A d|o|x|n`, `-t a c d u o x` with sizes 1 2 4
//! 8 and the `z` trailer, `-a -b -c -d -i -l -o -s -x`, `-j -N -v -w`, repeated blocks as
//! `*`), `xxd` (vim 9.0's: `-c -g -l -s -u -p -r`) and `hexdump -C` (util-linux 2.38:
//! with `-n -s -v`). Floating-point types, `xxd -i -b -e` and `hexdump`'s other formats
//! fail visibly with the tool's usage status. The dump is made a line at a time, looking
//! at the clock per line and charging the output every 4096 lines.

use super::opts::{Arg, Parser};
use super::Ctx;
use crate::shell::R;

/// Looks at the clock every line and charges the output every 4096.
struct Pace {
    lines: usize,
    charged: usize,
}

impl Pace {
    fn line(&mut self, cx: &mut Ctx<'_, '_>, out: &[u8]) -> R<()> {
        self.lines += 1;
        if crate::shell::stop_due() {
            return Err(cx.interrupted());
        }
        if self.lines.is_multiple_of(4096) {
            cx.hold(out.len().saturating_sub(self.charged))?;
            self.charged = out.len();
            cx.tick()?;
        }
        Ok(())
    }
}

/// The inputs' bytes in turn (standard input when none); the failing name's message.
fn read_all(cx: &mut Ctx<'_, '_>, prog: &str, files: &[String]) -> (Vec<u8>, bool) {
    let mut data = Vec::new();
    let mut ok = true;
    let names: Vec<String> = if files.is_empty() {
        vec!["-".into()]
    } else {
        files.to_vec()
    };
    for f in &names {
        match cx.read_input(f) {
            Ok(d) => data.extend_from_slice(&d),
            Err(e) => {
                cx.err_line(&format!("{prog}: {f}: {e}"));
                ok = false;
            }
        }
    }
    (data, ok)
}

fn number(cx: &mut Ctx<'_, '_>, prog: &str, what: &str, v: &str) -> Result<usize, i32> {
    let t = v.trim();
    let parsed = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        usize::from_str_radix(h, 16).ok()
    } else if t.len() > 1 && t.starts_with('0') {
        usize::from_str_radix(&t[1..], 8).ok()
    } else {
        t.parse().ok()
    };
    parsed.ok_or_else(|| {
        cx.err_line(&format!("{prog}: invalid {what} argument '{v}'"));
        1
    })
}

// ---------- od ----------

#[derive(Clone, Copy, PartialEq)]
enum Ty {
    Named,
    Char,
    Signed,
    Unsigned,
    Octal,
    Hex,
}

#[derive(Clone, Copy)]
struct Spec {
    ty: Ty,
    size: usize,
    z: bool,
}

impl Spec {
    /// The digits of one field (GNU's `field_width`).
    fn width(&self) -> usize {
        match (self.ty, self.size) {
            (Ty::Named | Ty::Char, _) => 3,
            (Ty::Signed, 1) => 4,
            (Ty::Signed, 2) => 6,
            (Ty::Signed, 4) => 11,
            (Ty::Signed, _) => 20,
            (Ty::Unsigned, 1) => 3,
            (Ty::Unsigned, 2) => 5,
            (Ty::Unsigned, 4) => 10,
            (Ty::Unsigned, _) => 20,
            (Ty::Octal, 1) => 3,
            (Ty::Octal, 2) => 6,
            (Ty::Octal, 4) => 11,
            (Ty::Octal, _) => 22,
            (Ty::Hex, n) => n * 2,
        }
    }

    /// One field's text (without its padding).
    fn field(&self, b: &[u8]) -> String {
        let mut v: u64 = 0;
        for (i, x) in b.iter().enumerate().take(self.size) {
            v |= u64::from(*x) << (8 * i);
        }
        let w = self.width();
        match self.ty {
            Ty::Hex => format!("{v:0w$x}"),
            Ty::Octal => format!("{v:0w$o}"),
            Ty::Unsigned => v.to_string(),
            Ty::Signed => {
                let bits = 8 * self.size as u32;
                let s = if bits == 64 {
                    v as i64
                } else {
                    ((v << (64 - bits)) as i64) >> (64 - bits)
                };
                s.to_string()
            }
            Ty::Char => match b[0] {
                0 => "\\0".into(),
                7 => "\\a".into(),
                8 => "\\b".into(),
                12 => "\\f".into(),
                10 => "\\n".into(),
                13 => "\\r".into(),
                9 => "\\t".into(),
                11 => "\\v".into(),
                c @ 0x20..=0x7e => (c as char).to_string(),
                c => format!("{c:03o}"),
            },
            Ty::Named => {
                const NAMES: [&str; 33] = [
                    "nul", "soh", "stx", "etx", "eot", "enq", "ack", "bel", "bs", "ht", "nl", "vt",
                    "ff", "cr", "so", "si", "dle", "dc1", "dc2", "dc3", "dc4", "nak", "syn", "etb",
                    "can", "em", "sub", "esc", "fs", "gs", "rs", "us", "sp",
                ];
                match b[0] & 0x7f {
                    c @ 0..=32 => NAMES[c as usize].into(),
                    0x7f => "del".into(),
                    c => (c as char).to_string(),
                }
            }
        }
    }
}

fn od_type(text: &str) -> Result<Vec<Spec>, String> {
    let mut out = Vec::new();
    let c: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < c.len() {
        let ty = match c[i] {
            'a' => Ty::Named,
            'c' => Ty::Char,
            'd' => Ty::Signed,
            'u' => Ty::Unsigned,
            'o' => Ty::Octal,
            'x' => Ty::Hex,
            _ => return Err(text.to_string()),
        };
        i += 1;
        let mut size = if matches!(ty, Ty::Named | Ty::Char) {
            1
        } else {
            4
        };
        if !matches!(ty, Ty::Named | Ty::Char) && i < c.len() {
            match c[i] {
                'C' => {
                    size = 1;
                    i += 1;
                }
                'S' => {
                    size = 2;
                    i += 1;
                }
                'I' => {
                    size = 4;
                    i += 1;
                }
                'L' => {
                    size = 8;
                    i += 1;
                }
                d if d.is_ascii_digit() => {
                    let start = i;
                    while i < c.len() && c[i].is_ascii_digit() {
                        i += 1;
                    }
                    let n: usize = c[start..i].iter().collect::<String>().parse().unwrap_or(0);
                    if !matches!(n, 1 | 2 | 4 | 8) {
                        return Err(text.to_string());
                    }
                    size = n;
                }
                _ => {}
            }
        }
        let z = c.get(i) == Some(&'z');
        if z {
            i += 1;
        }
        out.push(Spec { ty, size, z });
    }
    Ok(out)
}

pub(super) fn od(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new(
        "od",
        args,
        &[
            "address-radix",
            "skip-bytes",
            "read-bytes",
            "format",
            "output-duplicates",
            "width",
            "endian",
            "strings",
            "traditional",
            "help",
            "version",
        ],
    );
    let mut radix = 'o';
    let mut specs: Vec<Spec> = Vec::new();
    let mut skip = 0usize;
    let mut limit: Option<usize> = None;
    let mut verbose = false;
    let mut width = 16usize;
    let mut files = Vec::new();
    let short = |ty, size| Spec { ty, size, z: false };
    loop {
        match p.next_in(cx)? {
            Ok(Some(Arg::Short('A'))) | Ok(Some(Arg::Long("address-radix"))) => {
                let v = match p.value() {
                    Ok(v) => v,
                    Err(u) => return super::usage(cx, u, 1),
                };
                match v.as_str() {
                    "d" | "o" | "x" | "n" => radix = v.chars().next().unwrap_or('o'),
                    _ => {
                        cx.err_line(&format!(
                            "od: invalid output address radix '{v}'; it must be one character from [doxn]"
                        ));
                        return Ok(1);
                    }
                }
            }
            Ok(Some(Arg::Short('t'))) | Ok(Some(Arg::Long("format"))) => {
                let v = match p.value() {
                    Ok(v) => v,
                    Err(u) => return super::usage(cx, u, 1),
                };
                match od_type(&v) {
                    Ok(s) => specs.extend(s),
                    Err(_) if v.contains('f') => {
                        return cx.unsupported_status(&format!("od -t {v}"), 1)
                    }
                    Err(_) => {
                        cx.err_line(&format!("od: invalid type string '{v}'"));
                        return Ok(1);
                    }
                }
            }
            Ok(Some(Arg::Short('j'))) | Ok(Some(Arg::Long("skip-bytes"))) => {
                let v = match p.value() {
                    Ok(v) => v,
                    Err(u) => return super::usage(cx, u, 1),
                };
                skip = match number(cx, "od", "skip", &v) {
                    Ok(n) => n,
                    Err(c) => return Ok(c),
                };
            }
            Ok(Some(Arg::Short('N'))) | Ok(Some(Arg::Long("read-bytes"))) => {
                let v = match p.value() {
                    Ok(v) => v,
                    Err(u) => return super::usage(cx, u, 1),
                };
                limit = match number(cx, "od", "count", &v) {
                    Ok(n) => Some(n),
                    Err(c) => return Ok(c),
                };
            }
            Ok(Some(Arg::Short('v'))) | Ok(Some(Arg::Long("output-duplicates"))) => verbose = true,
            Ok(Some(Arg::Short('w'))) | Ok(Some(Arg::Long("width"))) => {
                width = match p.optional_value() {
                    None => 32,
                    Some(v) => match v.parse::<usize>() {
                        Ok(n) if n > 0 => n,
                        _ => {
                            cx.err_line(&format!("od: invalid -w argument '{v}'"));
                            return Ok(1);
                        }
                    },
                }
            }
            Ok(Some(Arg::Short('a'))) => specs.push(short(Ty::Named, 1)),
            Ok(Some(Arg::Short('b'))) => specs.push(short(Ty::Octal, 1)),
            Ok(Some(Arg::Short('c'))) => specs.push(short(Ty::Char, 1)),
            Ok(Some(Arg::Short('d'))) => specs.push(short(Ty::Unsigned, 2)),
            Ok(Some(Arg::Short('i'))) => specs.push(short(Ty::Signed, 4)),
            Ok(Some(Arg::Short('l'))) => specs.push(short(Ty::Signed, 8)),
            Ok(Some(Arg::Short('o'))) => specs.push(short(Ty::Octal, 2)),
            Ok(Some(Arg::Short('s'))) => specs.push(short(Ty::Signed, 2)),
            Ok(Some(Arg::Short('x'))) => specs.push(short(Ty::Hex, 2)),
            Ok(Some(Arg::Long(l))) => return cx.unsupported_status(&format!("od option --{l}"), 1),
            Ok(Some(Arg::Short(c @ ('e' | 'f' | 'F' | 'D' | 'O' | 'X' | 'I' | 'L' | 'S')))) => {
                return cx.unsupported_status(&format!("od option -{c}"), 1)
            }
            Ok(Some(Arg::Short(c))) => return super::usage(cx, p.invalid_short(c), 1),
            Ok(Some(Arg::Operand(o))) => files.push(o),
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, 1),
        }
    }
    if specs.is_empty() {
        specs.push(short(Ty::Octal, 2));
    }
    // the block is a multiple of every type's size
    let lcm = specs.iter().map(|s| s.size).max().unwrap_or(1);
    if !width.is_multiple_of(lcm) {
        cx.err_line(&format!(
            "od: warning: invalid width {width}; using {lcm} instead"
        ));
        width = lcm;
    }
    let (data, ok) = read_all(cx, "od", &files);
    if !ok && data.is_empty() {
        // nothing could be read: no dump, not even the end's offset
        return Ok(1);
    }
    let start = skip.min(data.len());
    if skip > data.len() {
        cx.err_line("od: cannot skip past end of combined input");
        return Ok(1);
    }
    let end = limit.map_or(data.len(), |n| start.saturating_add(n).min(data.len()));
    let bytes = &data[start..end];
    // GNU's alignment: every type's block as wide as the widest
    let width_per_block = specs
        .iter()
        .map(|s| (s.width() + 1) * (width / s.size))
        .max()
        .unwrap_or(0);
    let address = |off: usize| -> String {
        match radix {
            'd' => format!("{off:07}"),
            'x' => format!("{off:06x}"),
            'n' => String::new(),
            _ => format!("{off:07o}"),
        }
    };
    let addr_width = address(0).len();
    let mut out = Vec::new();
    let mut pace = Pace {
        lines: 0,
        charged: 0,
    };
    let mut prev: Option<&[u8]> = None;
    let mut starred = false;
    for (k, block) in bytes.chunks(width).enumerate() {
        pace.line(cx, &out)?;
        let off = skip + k * width;
        if !verbose && block.len() == width && prev == Some(block) {
            if !starred {
                out.extend_from_slice(b"*\n");
                starred = true;
            }
            continue;
        }
        starred = false;
        prev = Some(block);
        for (i, s) in specs.iter().enumerate() {
            if i == 0 {
                out.extend_from_slice(address(off).as_bytes());
            } else {
                out.extend(std::iter::repeat_n(b' ', addr_width));
            }
            let fields = width / s.size;
            let pad = width_per_block - s.width() * fields;
            let n_fields = block.len().div_ceil(s.size);
            let mut padded = block.to_vec();
            padded.resize(n_fields * s.size, 0);
            let mut pad_remaining = pad;
            for f in 0..n_fields {
                let left = fields - f;
                let next_pad = pad * (left - 1) / fields;
                let w = pad_remaining - next_pad + s.width();
                let text = s.field(&padded[f * s.size..]);
                out.extend_from_slice(format!("{text:>w$}").as_bytes());
                pad_remaining = next_pad;
            }
            if s.z {
                let blank = (width - block.len()) / s.size;
                out.extend(std::iter::repeat_n(b' ', blank * (s.width() + 1)));
                out.extend_from_slice(b"  >");
                out.extend(
                    block
                        .iter()
                        .map(|&b| if (0x20..0x7f).contains(&b) { b } else { b'.' }),
                );
                out.push(b'<');
            }
            out.push(b'\n');
        }
    }
    if radix != 'n' {
        out.extend_from_slice(address(skip + bytes.len()).as_bytes());
        out.push(b'\n');
    }
    cx.out(&out)?;
    Ok(if ok { 0 } else { 1 })
}

// ---------- xxd ----------

pub(super) fn xxd(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    // xxd's options are single words (`-c8`, `-c 8`, `-cols 8`); lexopt reads them as
    // bundles, so its long forms are refused
    let mut p = Parser::new("xxd", args, &[]);
    let (mut cols, mut group, mut len, mut seek) = (None, None, None, 0usize);
    let (mut upper, mut plain, mut reverse) = (false, false, false);
    let mut files = Vec::new();
    let usage = |cx: &mut Ctx<'_, '_>| {
        cx.err_line("Usage:\n       xxd [options] [infile [outfile]]\n    or\n       xxd -r [-s [-]offset] [-c cols] [-ps] [infile [outfile]]");
        Ok(1)
    };
    loop {
        let a = match p.next_in(cx)? {
            Ok(Some(a)) => a,
            Ok(None) => break,
            Err(_) => return usage(cx),
        };
        let num = |p: &mut Parser, cx: &mut Ctx<'_, '_>| -> Result<usize, i32> {
            let v = p.value().map_err(|_| 1)?;
            number(cx, "xxd", "number", &v).map_err(|_| 1)
        };
        match a {
            Arg::Short('c') => match num(&mut p, cx) {
                Ok(n) => cols = Some(n),
                Err(_) => return usage(cx),
            },
            Arg::Short('g') => match num(&mut p, cx) {
                Ok(n) => group = Some(n),
                Err(_) => return usage(cx),
            },
            Arg::Short('l') => match num(&mut p, cx) {
                Ok(n) => len = Some(n),
                Err(_) => return usage(cx),
            },
            Arg::Short('s') => match num(&mut p, cx) {
                Ok(n) => seek = n,
                Err(_) => return usage(cx),
            },
            Arg::Short('u') => upper = true,
            Arg::Short('p') => plain = true,
            Arg::Short('r') => reverse = true,
            Arg::Operand(o) => files.push(o),
            Arg::Short(c @ ('i' | 'b' | 'e' | 'a' | 'E' | 'o' | 'C' | 'n' | 'R' | 'd')) => {
                return cx.unsupported_status(&format!("xxd option -{c}"), 1)
            }
            _ => return usage(cx),
        }
    }
    if files.len() > 1 {
        return cx.unsupported_status("xxd output file operand", 1);
    }
    let (data, ok) = read_all(cx, "xxd", &files);
    if !ok {
        return Ok(2);
    }
    let mut out = Vec::new();
    let mut pace = Pace {
        lines: 0,
        charged: 0,
    };
    if reverse {
        let text = String::from_utf8_lossy(&data);
        for line in text.lines() {
            pace.line(cx, &out)?;
            let hex = if plain {
                line
            } else {
                // past the offset; the ascii column starts after two spaces
                let rest = line.split_once(':').map_or("", |(_, r)| r);
                let rest = rest.strip_prefix(' ').unwrap_or(rest);
                rest.split("  ").next().unwrap_or("")
            };
            let digits: Vec<u8> = hex
                .bytes()
                .filter(u8::is_ascii_hexdigit)
                .map(|d| (d as char).to_digit(16).unwrap_or(0) as u8)
                .collect();
            for pair in digits.chunks(2) {
                if pair.len() == 2 {
                    out.push(pair[0] << 4 | pair[1]);
                }
            }
        }
        cx.out(&out)?;
        return Ok(0);
    }
    let start = seek.min(data.len());
    let end = len.map_or(data.len(), |n| start.saturating_add(n).min(data.len()));
    let bytes = &data[start..end];
    let hex = |b: u8| {
        if upper {
            format!("{b:02X}")
        } else {
            format!("{b:02x}")
        }
    };
    if plain {
        let cols = cols.unwrap_or(30).max(1);
        for line in bytes.chunks(cols) {
            pace.line(cx, &out)?;
            for &b in line {
                out.extend_from_slice(hex(b).as_bytes());
            }
            out.push(b'\n');
        }
        cx.out(&out)?;
        return Ok(0);
    }
    let cols = cols.unwrap_or(16).clamp(1, 256);
    let group = match group.unwrap_or(2) {
        0 => cols,
        g => g,
    };
    let grplen = group * 2 + 1;
    let ascii_at = 12 + (grplen * cols - 1) / group;
    for (k, line) in bytes.chunks(cols).enumerate() {
        pace.line(cx, &out)?;
        let mut l = vec![b' '; ascii_at];
        let off = format!("{:08x}: ", start + k * cols);
        let off = if upper { off.to_uppercase() } else { off };
        l[..10].copy_from_slice(off.as_bytes());
        for (p, &b) in line.iter().enumerate() {
            let c = 10 + (grplen * p) / group;
            l[c..c + 2].copy_from_slice(hex(b).as_bytes());
        }
        l.extend(
            line.iter()
                .map(|&b| if (0x20..0x7f).contains(&b) { b } else { b'.' }),
        );
        out.extend_from_slice(&l);
        out.push(b'\n');
    }
    cx.out(&out)?;
    Ok(0)
}

// ---------- hexdump ----------

pub(super) fn hexdump(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new(
        "hexdump",
        args,
        &["canonical", "length", "skip", "no-squeezing"],
    );
    let (mut canonical, mut verbose) = (false, false);
    let (mut len, mut skip) = (None, 0usize);
    let mut files = Vec::new();
    loop {
        match p.next_in(cx)? {
            Ok(Some(Arg::Short('C'))) | Ok(Some(Arg::Long("canonical"))) => canonical = true,
            Ok(Some(Arg::Short('v'))) | Ok(Some(Arg::Long("no-squeezing"))) => verbose = true,
            Ok(Some(Arg::Short('n'))) | Ok(Some(Arg::Long("length"))) => {
                let v = match p.value() {
                    Ok(v) => v,
                    Err(u) => return super::usage(cx, u, 1),
                };
                len = match number(cx, "hexdump", "length", &v) {
                    Ok(n) => Some(n),
                    Err(c) => return Ok(c),
                };
            }
            Ok(Some(Arg::Short('s'))) | Ok(Some(Arg::Long("skip"))) => {
                let v = match p.value() {
                    Ok(v) => v,
                    Err(u) => return super::usage(cx, u, 1),
                };
                skip = match number(cx, "hexdump", "skip", &v) {
                    Ok(n) => n,
                    Err(c) => return Ok(c),
                };
            }
            Ok(Some(Arg::Short(c))) => {
                return cx.unsupported_status(&format!("hexdump option -{c}"), 1)
            }
            Ok(Some(Arg::Long(l))) => {
                return cx.unsupported_status(&format!("hexdump option --{l}"), 1)
            }
            Ok(Some(Arg::Operand(o))) => files.push(o),
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, 1),
        }
    }
    if !canonical {
        return cx.unsupported_status("hexdump without -C", 1);
    }
    let (data, ok) = read_all(cx, "hexdump", &files);
    let start = skip.min(data.len());
    let end = len.map_or(data.len(), |n| start.saturating_add(n).min(data.len()));
    let bytes = &data[start..end];
    let mut out = Vec::new();
    let mut pace = Pace {
        lines: 0,
        charged: 0,
    };
    let mut prev: Option<&[u8]> = None;
    let mut starred = false;
    for (k, line) in bytes.chunks(16).enumerate() {
        pace.line(cx, &out)?;
        if !verbose && line.len() == 16 && prev == Some(line) {
            if !starred {
                out.extend_from_slice(b"*\n");
                starred = true;
            }
            continue;
        }
        starred = false;
        prev = Some(line);
        let mut l = format!("{:08x}  ", start + k * 16).into_bytes();
        for (i, b) in line.iter().enumerate() {
            l.extend_from_slice(format!("{b:02x} ").as_bytes());
            if i == 7 {
                l.push(b' ');
            }
        }
        l.resize(10 + 49, b' ');
        l.push(b' ');
        l.push(b'|');
        l.extend(
            line.iter()
                .map(|&b| if (0x20..0x7f).contains(&b) { b } else { b'.' }),
        );
        l.extend_from_slice(b"|\n");
        out.extend_from_slice(&l);
    }
    if !bytes.is_empty() {
        out.extend_from_slice(format!("{:08x}\n", start + bytes.len()).as_bytes());
    }
    cx.out(&out)?;
    Ok(if ok { 0 } else { 1 })
}
