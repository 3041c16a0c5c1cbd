//! `tr` (GNU coreutils 9.1; bytes, as Debian's tr works): translate, `-d`/`--delete`,
//! `-s`/`--squeeze-repeats`, `-c`/`-C`/`--complement`, `-t`/`--truncate-set1`; sets with
//! ranges, backslash escapes (`\n`, `\NNN`, ...) and the `[:class:]` classes. The `[c*n]`
//! repeat and `[=c=]` equivalence constructs fail visibly (unsupported).

use super::opts::{Arg, Parser};
use super::Ctx;
use crate::shell::R;

/// GNU's usage status for tr.
const USAGE: i32 = 1;

/// A parsed set: its bytes in order, and where an `upper`/`lower` class starts.
struct Set {
    bytes: Vec<u8>,
    cases: Vec<(usize, &'static str)>,
}

enum SetError {
    /// A diagnostic (status 1, no usage hint).
    Msg(String),
    /// What the simulator does not do.
    Unsupported(&'static str),
}

fn class(name: &str) -> Option<(&'static str, Vec<u8>)> {
    let all = 0u8..=255;
    let pick = |f: fn(&u8) -> bool| all.clone().filter(f).collect::<Vec<u8>>();
    Some(match name {
        "alpha" => ("alpha", pick(u8::is_ascii_alphabetic)),
        "digit" => ("digit", pick(u8::is_ascii_digit)),
        "alnum" => ("alnum", pick(u8::is_ascii_alphanumeric)),
        "upper" => ("upper", pick(u8::is_ascii_uppercase)),
        "lower" => ("lower", pick(u8::is_ascii_lowercase)),
        "space" => ("space", vec![b'\t', b'\n', 11, 12, b'\r', b' ']),
        "blank" => ("blank", vec![b'\t', b' ']),
        "punct" => ("punct", pick(u8::is_ascii_punctuation)),
        "xdigit" => ("xdigit", pick(u8::is_ascii_hexdigit)),
        "cntrl" => ("cntrl", pick(u8::is_ascii_control)),
        "print" => ("print", (32u8..=126).collect()),
        "graph" => ("graph", pick(u8::is_ascii_graphic)),
        _ => return None,
    })
}

/// The bytes of `s` with backslash escapes decoded; each flagged when it came from one.
fn unescape(s: &str) -> Vec<(u8, bool)> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' || i + 1 == b.len() {
            out.push((b[i], false));
            i += 1;
            continue;
        }
        i += 1;
        let c = b[i];
        let v = match c {
            b'a' => 7,
            b'b' => 8,
            b'f' => 12,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'v' => 11,
            b'0'..=b'7' => {
                let mut v: u32 = 0;
                let mut n = 0;
                while n < 3 && i < b.len() && (b'0'..=b'7').contains(&b[i]) {
                    let next = v * 8 + u32::from(b[i] - b'0');
                    if next > 255 {
                        break;
                    }
                    v = next;
                    i += 1;
                    n += 1;
                }
                out.push((v as u8, true));
                continue;
            }
            other => other,
        };
        out.push((v, true));
        i += 1;
    }
    out
}

fn parse_set(text: &str, first: bool) -> Result<Set, SetError> {
    let b = unescape(text);
    let mut set = Set {
        bytes: Vec::new(),
        cases: Vec::new(),
    };
    let mut i = 0;
    while i < b.len() {
        let (c, escaped) = b[i];
        if c == b'[' && !escaped && i + 1 < b.len() {
            let rest: Vec<u8> = b[i + 1..].iter().map(|x| x.0).collect();
            let close = |open: u8| {
                rest.windows(2)
                    .position(|w| w == [open, b']'])
                    .filter(|_| rest.first() == Some(&open))
            };
            if let Some(end) = close(b':') {
                let name = String::from_utf8_lossy(&rest[1..end]).into_owned();
                let Some((name, bytes)) = class(&name) else {
                    return Err(SetError::Msg(format!(
                        "invalid character class \u{2018}{name}\u{2019}"
                    )));
                };
                if matches!(name, "upper" | "lower") {
                    set.cases.push((set.bytes.len(), name));
                } else if !first {
                    return Err(SetError::Msg(
                        "when translating, the only character classes that may appear in\nstring2 are 'upper' and 'lower'"
                            .into(),
                    ));
                }
                set.bytes.extend(bytes);
                i += end + 3;
                continue;
            }
            if close(b'=').is_some() {
                return Err(SetError::Unsupported("tr equivalence class [=c=]"));
            }
            if rest.len() >= 3 && rest[1] == b'*' && rest.contains(&b']') {
                if first {
                    return Err(SetError::Msg(
                        "the [c*] repeat construct may not appear in string1".into(),
                    ));
                }
                return Err(SetError::Unsupported("tr repeat construct [c*n]"));
            }
        }
        if i + 2 < b.len() && b[i + 1] == (b'-', false) {
            let hi = b[i + 2].0;
            if hi < c {
                return Err(SetError::Msg(format!(
                    "range-endpoints of '{}-{}' are in reverse collating sequence order",
                    c as char, hi as char
                )));
            }
            set.bytes.extend(c..=hi);
            i += 3;
            continue;
        }
        set.bytes.push(c);
        i += 1;
    }
    Ok(set)
}

pub(super) fn main(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new(
        "tr",
        args,
        &[
            "complement",
            "delete",
            "squeeze-repeats",
            "truncate-set1",
            "help",
            "version",
        ],
    );
    let (mut complement, mut delete, mut squeeze, mut truncate) = (false, false, false, false);
    let mut ops = Vec::new();
    loop {
        match p.next_in(cx)? {
            Ok(Some(Arg::Short('c' | 'C') | Arg::Long("complement"))) => complement = true,
            Ok(Some(Arg::Short('d') | Arg::Long("delete"))) => delete = true,
            Ok(Some(Arg::Short('s') | Arg::Long("squeeze-repeats"))) => squeeze = true,
            Ok(Some(Arg::Short('t') | Arg::Long("truncate-set1"))) => truncate = true,
            Ok(Some(Arg::Long(l))) => return cx.unsupported(&format!("tr option --{l}")),
            Ok(Some(Arg::Short(c))) => {
                cx.err_line(&p.invalid_short(c).0);
                return Ok(USAGE);
            }
            Ok(Some(Arg::Operand(o))) => ops.push(o),
            Ok(None) => break,
            Err(u) => {
                cx.err_line(&u.0);
                return Ok(USAGE);
            }
        }
    }
    let hint = "Try 'tr --help' for more information.";
    let translating = !delete && ops.len() >= 2;
    let needs_two = (delete && squeeze) || (!delete && !squeeze);
    if ops.is_empty() {
        cx.err_line(&format!("tr: missing operand\n{hint}"));
        return Ok(USAGE);
    }
    if ops.len() == 1 && needs_two {
        let why = if delete {
            "Two strings must be given when both deleting and squeezing repeats."
        } else {
            "Two strings must be given when translating."
        };
        cx.err_line(&format!(
            "tr: missing operand after \u{2018}{}\u{2019}\n{why}\n{hint}",
            ops[0]
        ));
        return Ok(USAGE);
    }
    let max = if delete && !squeeze { 1 } else { 2 };
    if ops.len() > max {
        let why = if max == 1 {
            "\nOnly one string may be given when deleting without squeezing repeats."
        } else {
            ""
        };
        cx.err_line(&format!(
            "tr: extra operand \u{2018}{}\u{2019}{why}\n{hint}",
            ops[max]
        ));
        return Ok(USAGE);
    }
    let parsed = parse_set(&ops[0], true).and_then(|s1| {
        let s2 = match ops.get(1) {
            Some(t) => Some(parse_set(t, !translating)?),
            None => None,
        };
        Ok((s1, s2))
    });
    let (set1, set2) = match parsed {
        Ok(s) => s,
        Err(SetError::Msg(m)) => {
            cx.err_line(&format!("tr: {m}"));
            return Ok(USAGE);
        }
        Err(SetError::Unsupported(what)) => return cx.unsupported(what),
    };
    let mut in1 = [false; 256];
    for &b in &set1.bytes {
        in1[b as usize] = true;
    }
    let mut list1: Vec<u8> = if complement {
        (0u8..=255).filter(|b| !in1[*b as usize]).collect()
    } else {
        set1.bytes.clone()
    };
    let mut map: [u8; 256] = std::array::from_fn(|i| i as u8);
    if translating {
        if let Some(Err(m)) = set2_cases(&set1, ops.get(1), translating) {
            cx.err_line(&format!("tr: {m}"));
            return Ok(USAGE);
        }
        let set2: &[u8] = set2.as_ref().map_or(&[][..], |s| &s.bytes[..]);
        if set2.is_empty() && !truncate {
            cx.err_line("tr: when not truncating set1, string2 must be non-empty");
            return Ok(USAGE);
        }
        if truncate {
            list1.truncate(set2.len());
        }
        for (i, &b) in list1.iter().enumerate() {
            map[b as usize] = *set2.get(i).or(set2.last()).unwrap_or(&b);
        }
    }
    let mut del = [false; 256];
    if delete {
        for &b in &list1 {
            del[b as usize] = true;
        }
    }
    let mut sq = [false; 256];
    if squeeze {
        let squeeze_set: &[u8] = match (&set2, delete || translating) {
            (Some(s2), true) => &s2.bytes,
            _ => &list1,
        };
        for &b in squeeze_set {
            sq[b as usize] = true;
        }
    }
    let input = cx.read_input("-").unwrap_or_default();
    let mut out = Vec::with_capacity(input.len());
    let mut last: Option<u8> = None;
    for (k, &b) in input.iter().enumerate() {
        // a tick looks at the clock only every so many ticks: a MiB is a few ms of work
        if k % (1 << 20) == (1 << 20) - 1 {
            cx.tick()?;
            cx.check_time()?;
        }
        if del[b as usize] {
            continue;
        }
        let c = map[b as usize];
        if sq[c as usize] && last == Some(c) {
            continue;
        }
        out.push(c);
        last = Some(c);
    }
    cx.out(&out)?;
    Ok(0)
}

/// GNU's alignment rule for `[:upper:]`/`[:lower:]` in string2: each must stand where
/// string1 has the other case class.
fn set2_cases(set1: &Set, text2: Option<&String>, translating: bool) -> Option<Result<(), String>> {
    let text2 = text2?;
    if !translating {
        return None;
    }
    let set2 = match parse_set(text2, false) {
        Ok(s) => s,
        Err(_) => return None,
    };
    for (at, name) in &set2.cases {
        let aligned = set1.cases.iter().any(|(a1, n1)| a1 == at && n1 != name);
        let same_class = set1.cases.iter().any(|(a1, n1)| a1 == at && n1 == name);
        if !aligned && !same_class {
            return Some(Err("misaligned [:upper:] and/or [:lower:] construct".into()));
        }
    }
    Some(Ok(()))
}
