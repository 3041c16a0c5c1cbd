//! `md5sum`, `sha1sum`, `sha256sum`, `sha512sum` (GNU coreutils 9.1) through the
//! RustCrypto crates: `HASH  NAME` per file (`-` is standard input), `-b`/`--binary`
//! (`HASH *NAME`), `-t`/`--text`, `-z`/`--zero`, `--tag`, `-c`/`--check` (with `--quiet`,
//! `--status`, `-w`/`--warn`, `--strict`, `--ignore-missing`); `cksum` (POSIX CRC, the
//! default algorithm of coreutils 9.1's `cksum`).

use sha2::Digest;

use super::opts::{Arg, Parser};
use super::Ctx;
use crate::shell::R;

/// GNU's usage status for these tools.
const USAGE: i32 = 1;

fn digest_hex(prog: &str, data: &[u8]) -> String {
    fn hex<D: Digest>(data: &[u8]) -> String {
        D::digest(data).iter().map(|b| format!("{b:02x}")).collect()
    }
    match prog {
        "md5sum" => hex::<md5::Md5>(data),
        "sha1sum" => hex::<sha1::Sha1>(data),
        "sha256sum" => hex::<sha2::Sha256>(data),
        _ => hex::<sha2::Sha512>(data),
    }
}

fn tag_name(prog: &str) -> &'static str {
    match prog {
        "md5sum" => "MD5",
        "sha1sum" => "SHA1",
        "sha256sum" => "SHA256",
        _ => "SHA512",
    }
}

pub(super) fn main(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let prog = cx.argv_name();
    let args = cx.args();
    let mut p = Parser::new(
        &prog,
        args,
        &[
            "binary",
            "check",
            "tag",
            "text",
            "zero",
            "ignore-missing",
            "quiet",
            "status",
            "strict",
            "warn",
            "help",
            "version",
        ],
    );
    let (mut binary, mut check, mut tag, mut zero) = (false, false, false, false);
    let (mut quiet, mut status_only, mut strict, mut warn, mut ignore_missing) =
        (false, false, false, false, false);
    let mut files = Vec::new();
    loop {
        match p.next_in(cx)? {
            Ok(Some(Arg::Short('b'))) | Ok(Some(Arg::Long("binary"))) => binary = true,
            Ok(Some(Arg::Short('t'))) | Ok(Some(Arg::Long("text"))) => binary = false,
            Ok(Some(Arg::Short('c'))) | Ok(Some(Arg::Long("check"))) => check = true,
            Ok(Some(Arg::Short('z'))) | Ok(Some(Arg::Long("zero"))) => zero = true,
            Ok(Some(Arg::Short('w'))) | Ok(Some(Arg::Long("warn"))) => warn = true,
            Ok(Some(Arg::Long("tag"))) => tag = true,
            Ok(Some(Arg::Long("quiet"))) => quiet = true,
            Ok(Some(Arg::Long("status"))) => status_only = true,
            Ok(Some(Arg::Long("strict"))) => strict = true,
            Ok(Some(Arg::Long("ignore-missing"))) => ignore_missing = true,
            Ok(Some(Arg::Long(l))) => return cx.unsupported(&format!("{prog} option --{l}")),
            Ok(Some(Arg::Short(c))) => return super::usage(cx, p.invalid_short(c), USAGE),
            Ok(Some(Arg::Operand(o))) => files.push(o),
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, USAGE),
        }
    }
    if files.is_empty() {
        files.push("-".into());
    }
    let mut status = 0;
    if !check {
        let end = if zero { '\0' } else { '\n' };
        for f in files {
            cx.check_time()?;
            cx.tick()?;
            let data = match cx.read_input(&f) {
                Ok(d) => d,
                Err(e) => {
                    cx.err_line(&format!("{prog}: {f}: {e}"));
                    status = 1;
                    continue;
                }
            };
            let h = digest_hex(&prog, &data);
            let line = if tag {
                format!("{} ({f}) = {h}{end}", tag_name(&prog))
            } else {
                format!("{h} {}{f}{end}", if binary { '*' } else { ' ' })
            };
            cx.out(line.as_bytes())?;
        }
        return Ok(status);
    }
    let len = digest_hex(&prog, b"").len();
    let (mut bad, mut missing, mut malformed) = (0, 0, 0);
    let mut any_ok = false;
    for list in files {
        cx.check_time()?;
        let text = match cx.read_input(&list) {
            Ok(d) => String::from_utf8_lossy(&d).into_owned(),
            Err(e) => {
                cx.err_line(&format!("{prog}: {list}: {e}"));
                status = 1;
                continue;
            }
        };
        let shown = if list == "-" {
            "standard input"
        } else {
            list.as_str()
        };
        for (n, line) in text.lines().enumerate() {
            cx.tick()?;
            let parsed = line
                .get(..len)
                .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
                .and_then(|h| {
                    let rest = &line[len..];
                    rest.strip_prefix("  ")
                        .or_else(|| rest.strip_prefix(" *"))
                        .map(|name| (h.to_ascii_lowercase(), name.to_string()))
                });
            let Some((want, name)) = parsed else {
                malformed += 1;
                if warn {
                    cx.err_line(&format!(
                        "{prog}: {shown}: {}: improperly formatted {} checksum line",
                        n + 1,
                        tag_name(&prog)
                    ));
                }
                continue;
            };
            let data = match cx.read_input(&name) {
                Ok(d) => d,
                Err(e) => {
                    if ignore_missing && e == "No such file or directory" {
                        continue;
                    }
                    missing += 1;
                    if !status_only {
                        cx.err_line(&format!("{prog}: {name}: {e}"));
                        cx.out(format!("{name}: FAILED open or read\n").as_bytes())?;
                    }
                    continue;
                }
            };
            if digest_hex(&prog, &data) == want {
                any_ok = true;
                if !quiet && !status_only {
                    cx.out(format!("{name}: OK\n").as_bytes())?;
                }
            } else {
                bad += 1;
                if !status_only {
                    cx.out(format!("{name}: FAILED\n").as_bytes())?;
                }
            }
        }
        if malformed > 0 && !any_ok && bad == 0 && missing == 0 {
            cx.err_line(&format!(
                "{prog}: {shown}: no properly formatted checksum lines found"
            ));
            status = 1;
        }
    }
    if !status_only {
        let s = |n: usize| if n == 1 { "" } else { "s" };
        if malformed > 0 && (any_ok || bad > 0 || missing > 0) {
            cx.err_line(&format!(
                "{prog}: WARNING: {malformed} line{} {} improperly formatted",
                s(malformed),
                if malformed == 1 { "is" } else { "are" }
            ));
        }
        if missing > 0 {
            cx.err_line(&format!(
                "{prog}: WARNING: {missing} listed file{} could not be read",
                s(missing)
            ));
        }
        if bad > 0 {
            cx.err_line(&format!(
                "{prog}: WARNING: {bad} computed checksum{} did NOT match",
                s(bad)
            ));
        }
    }
    if bad > 0 || missing > 0 || (strict && malformed > 0) {
        status = 1;
    }
    Ok(status)
}

/// The POSIX `cksum` CRC of `data` (polynomial 0x04C11DB7, the length appended).
fn posix_crc(data: &[u8]) -> u32 {
    let mut crc: u32 = 0;
    let mut step = |b: u8| {
        crc ^= u32::from(b) << 24;
        for _ in 0..8 {
            crc = if crc & 0x8000_0000 != 0 {
                (crc << 1) ^ 0x04C1_1DB7
            } else {
                crc << 1
            };
        }
    };
    for &b in data {
        step(b);
    }
    let mut n = data.len() as u64;
    while n > 0 {
        step((n & 0xff) as u8);
        n >>= 8;
    }
    !crc
}

pub(super) fn cksum(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new("cksum", args, &["algorithm", "help", "version"]);
    let mut files = Vec::new();
    loop {
        match p.next_in(cx)? {
            Ok(Some(Arg::Long(l))) => return cx.unsupported(&format!("cksum option --{l}")),
            Ok(Some(Arg::Short(c))) => {
                return cx.unsupported(&format!("cksum option -{c}"));
            }
            Ok(Some(Arg::Operand(o))) => files.push(o),
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, USAGE),
        }
    }
    let stdin_only = files.is_empty();
    if stdin_only {
        files.push("-".into());
    }
    let mut status = 0;
    for f in files {
        cx.check_time()?;
        cx.tick()?;
        let data = match cx.read_input(&f) {
            Ok(d) => d,
            Err(e) => {
                cx.err_line(&format!("cksum: {f}: {e}"));
                status = 1;
                continue;
            }
        };
        let line = if stdin_only {
            format!("{} {}\n", posix_crc(&data), data.len())
        } else {
            format!("{} {} {f}\n", posix_crc(&data), data.len())
        };
        cx.out(line.as_bytes())?;
    }
    Ok(status)
}
