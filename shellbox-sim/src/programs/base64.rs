//! `base64` (GNU coreutils 9.1) through the `base64` crate: encodes with lines of 76
//! characters (`-w`/`--wrap` COLS; 0 for one line and no final newline), decodes with `-d`/`--decode` (`-i`/
//! `--ignore-garbage` drops characters outside the alphabet).

use base64::Engine;

use super::opts::{Arg, Parser};
use super::Ctx;
use crate::shell::R;

/// GNU's usage status for base64.
const USAGE: i32 = 1;

pub(super) fn main(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new(
        "base64",
        args,
        &["decode", "ignore-garbage", "wrap", "help", "version"],
    );
    let mut decode = false;
    let mut garbage = false;
    let mut wrap = 76usize;
    let mut files = Vec::new();
    loop {
        match p.next_in(cx)? {
            Ok(Some(Arg::Short('d'))) | Ok(Some(Arg::Long("decode"))) => decode = true,
            Ok(Some(Arg::Short('i'))) | Ok(Some(Arg::Long("ignore-garbage"))) => garbage = true,
            Ok(Some(Arg::Short('w'))) | Ok(Some(Arg::Long("wrap"))) => match p.value() {
                Ok(v) => match v.parse::<usize>() {
                    Ok(n) => wrap = n,
                    Err(_) => {
                        cx.err_line(&format!("base64: invalid wrap size: \u{2018}{v}\u{2019}"));
                        return Ok(USAGE);
                    }
                },
                Err(u) => return super::usage(cx, u, USAGE),
            },
            Ok(Some(Arg::Long(l))) => return cx.unsupported(&format!("base64 option --{l}")),
            Ok(Some(Arg::Short(c))) => return super::usage(cx, p.invalid_short(c), USAGE),
            Ok(Some(Arg::Operand(o))) => files.push(o),
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, USAGE),
        }
    }
    if files.len() > 1 {
        cx.err_line(&format!(
            "base64: extra operand \u{2018}{}\u{2019}\nTry 'base64 --help' for more information.",
            files[1]
        ));
        return Ok(USAGE);
    }
    let f = files.pop().unwrap_or_else(|| "-".into());
    let data = match cx.read_input(&f) {
        Ok(d) => d,
        Err(e) => {
            cx.err_line(&format!("base64: {f}: {e}"));
            return Ok(1);
        }
    };
    let engine = base64::engine::general_purpose::STANDARD;
    if decode {
        let alphabet = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=');
        let clean: Vec<u8> = if garbage {
            data.iter().copied().filter(alphabet).collect()
        } else {
            data.iter().copied().filter(|b| *b != b'\n').collect()
        };
        // decode what decodes, as GNU writes the good prefix before the error
        let good = clean.len() / 4 * 4;
        let (head, tail) = clean.split_at(good);
        match engine.decode(head) {
            Ok(out) => {
                cx.hold(out.len())?;
                cx.out(&out)?;
            }
            Err(_) => {
                cx.err_line("base64: invalid input");
                return Ok(1);
            }
        }
        if !tail.is_empty() {
            let mut padded = tail.to_vec();
            while padded.len() % 4 != 0 {
                padded.push(b'=');
            }
            if let Ok(out) = engine.decode(&padded) {
                cx.out(&out)?;
            }
            cx.err_line("base64: invalid input");
            return Ok(1);
        }
        return Ok(0);
    }
    let enc = engine.encode(&data);
    cx.hold(enc.len() * 2)?;
    let mut out = Vec::with_capacity(enc.len() + enc.len() / 76 + 1);
    if wrap == 0 {
        // GNU ends an unwrapped encoding without a newline
        out.extend_from_slice(enc.as_bytes());
    } else {
        for chunk in enc.as_bytes().chunks(wrap) {
            out.extend_from_slice(chunk);
            out.push(b'\n');
        }
    }
    cx.out(&out)?;
    Ok(0)
}
