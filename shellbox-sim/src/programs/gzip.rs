//! `gzip`, `gunzip` and `zcat` (GNU gzip 1.12) over `flate2`: compress or decompress
//! files in place (`f` to `f.gz` and back, the original removed unless `-k`, its mode
//! kept) or standard input to standard output; `-c` `-d` `-f` `-k` `-n` `-N` `-q` `-t`
//! `-1`…`-9` `--fast` `--best`; multi-member input. The compressed bytes are flate2's,
//! not GNU's (they decompress alike; sizes differ). Diagnostics and statuses as gzip's:
//! 1 for an error (a missing file, input not in gzip format, a usage error), 2 for a
//! warning (an existing output, an unknown suffix, a directory); an input already ending
//! in `.gz` is left with a notice. Unsupported options
//! (`-l`, `-r`, `-S`, `-v`, …) fail visibly with status 1.
//!
//! Work is done a piece at a time, looking at the clock between pieces, and the output is
//! charged to the memory budget as it grows (a small input can decompress to gigabytes).

use std::io::{Read, Write};

use super::opts::{Arg, Parser};
use super::Ctx;
use crate::shell::R;

/// gzip's status for an error (and a usage error).
const ERROR: i32 = 1;
/// gzip's status for a warning.
const WARNING: i32 = 2;
/// Bytes handled between two looks at the clock.
const PIECE: usize = 64 << 10;

/// What to do with each input.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Compress,
    Decompress,
    Test,
}

/// Why a piece of work stopped.
pub(super) enum Fail {
    /// The input is not gzip data (or is cut short).
    Format,
    /// The command must stop, or the budget is spent.
    Stop(crate::shell::Ctl),
}

pub(super) fn main(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let name = cx.argv_name();
    let args = cx.args();
    let mut p = Parser::new(
        "gzip",
        args,
        &[
            "stdout",
            "to-stdout",
            "decompress",
            "uncompress",
            "force",
            "keep",
            "no-name",
            "name",
            "quiet",
            "test",
            "fast",
            "best",
            "help",
            "version",
            "list",
            "recursive",
            "suffix",
            "verbose",
            "rsyncable",
            "synchronous",
            "license",
        ],
    );
    let mut mode = match name.as_str() {
        "gunzip" | "zcat" => Mode::Decompress,
        _ => Mode::Compress,
    };
    let mut to_stdout = name == "zcat";
    let (mut force, mut keep, mut quiet) = (false, false, false);
    let mut level = 6u32;
    let mut files = Vec::new();
    loop {
        match p.next_in(cx)? {
            Ok(Some(Arg::Short('c')))
            | Ok(Some(Arg::Long("stdout")))
            | Ok(Some(Arg::Long("to-stdout"))) => to_stdout = true,
            Ok(Some(Arg::Short('d')))
            | Ok(Some(Arg::Long("decompress")))
            | Ok(Some(Arg::Long("uncompress"))) => mode = Mode::Decompress,
            Ok(Some(Arg::Short('t'))) | Ok(Some(Arg::Long("test"))) => mode = Mode::Test,
            Ok(Some(Arg::Short('f'))) | Ok(Some(Arg::Long("force"))) => force = true,
            Ok(Some(Arg::Short('k'))) | Ok(Some(Arg::Long("keep"))) => keep = true,
            Ok(Some(Arg::Short('n' | 'N')))
            | Ok(Some(Arg::Long("no-name")))
            | Ok(Some(Arg::Long("name"))) => {}
            Ok(Some(Arg::Short('q'))) | Ok(Some(Arg::Long("quiet"))) => quiet = true,
            Ok(Some(Arg::Short(c @ '1'..='9'))) => level = c.to_digit(10).unwrap_or(6),
            Ok(Some(Arg::Long("fast"))) => level = 1,
            Ok(Some(Arg::Long("best"))) => level = 9,
            Ok(Some(Arg::Long(l))) => {
                return cx.unsupported_status(&format!("{name} option --{l}"), ERROR)
            }
            Ok(Some(Arg::Short(c @ ('l' | 'r' | 'S' | 'v' | 'L' | 'V' | 'h')))) => {
                return cx.unsupported_status(&format!("{name} option -{c}"), ERROR)
            }
            Ok(Some(Arg::Short(c))) => {
                cx.err_line(&format!(
                    "{name}: invalid option -- '{c}'\nTry `{name} --help' for more information."
                ));
                return Ok(ERROR);
            }
            Ok(Some(Arg::Operand(o))) => files.push(o),
            Ok(None) => break,
            Err(u) => {
                cx.err_line(&u.0.replace("Try 'gzip --help'", "Try `gzip --help'"));
                return Ok(ERROR);
            }
        }
    }
    if files.is_empty() {
        files.push("-".into());
    }
    let mut status = 0;
    let warn = |status: &mut i32, cx: &mut Ctx<'_, '_>, msg: String| {
        if !quiet {
            cx.err_line(&msg);
        }
        if *status == 0 {
            *status = WARNING;
        }
    };
    for f in &files {
        cx.check_time()?;
        let stdin = f == "-";
        // the input's path (decompressing `f` may read `f.gz`)
        let mut path = f.clone();
        if !stdin {
            let cwd = cx.cwd().to_string();
            let found = cx.vfs().resolve(&cwd, f, true);
            let found = match found {
                Err(crate::vfs::Errno::NoEnt) if mode != Mode::Compress && !f.ends_with(".gz") => {
                    path = format!("{f}.gz");
                    cx.vfs().resolve(&cwd, &path, true)
                }
                r => r,
            };
            match found {
                Ok(ino) if cx.vfs().get(ino).is_dir() => {
                    warn(
                        &mut status,
                        cx,
                        format!("gzip: {f} is a directory -- ignored"),
                    );
                    continue;
                }
                Ok(_) => {}
                Err(e) => {
                    cx.err_line(&format!("gzip: {f}: {}", e.msg()));
                    status = ERROR;
                    continue;
                }
            }
        }
        // where the result goes: standard output, or the file beside the input
        let target = if stdin || to_stdout || mode == Mode::Test {
            None
        } else if mode == Mode::Compress {
            if path.ends_with(".gz") && !force {
                // a notice: gzip's status stays
                if !quiet {
                    cx.err_line(&format!("gzip: {path} already has .gz suffix -- unchanged"));
                }
                continue;
            }
            Some(format!("{path}.gz"))
        } else if let Some(stem) = path.strip_suffix(".gz") {
            Some(stem.to_string())
        } else if let Some(stem) = path.strip_suffix(".tgz") {
            Some(format!("{stem}.tar"))
        } else {
            warn(
                &mut status,
                cx,
                format!("gzip: {path}: unknown suffix -- ignored"),
            );
            continue;
        };
        if let Some(t) = &target {
            let cwd = cx.cwd().to_string();
            if !force && cx.vfs().resolve(&cwd, t, false).is_ok() {
                warn(
                    &mut status,
                    cx,
                    format!("gzip: {t} already exists;\tnot overwritten"),
                );
                continue;
            }
        }
        let data = match cx.read_input(&path) {
            Ok(d) => d,
            Err(e) => {
                cx.err_line(&format!("gzip: {path}: {e}"));
                status = ERROR;
                continue;
            }
        };
        let out = match mode {
            Mode::Compress => compress(cx, &data, level),
            _ => decompress(cx, &data),
        };
        let out = match out {
            Ok(o) => o,
            Err(Fail::Stop(c)) => return Err(c),
            Err(Fail::Format) => {
                let shown = if stdin { "stdin" } else { path.as_str() };
                cx.err_line(&format!("gzip: {shown}: not in gzip format"));
                status = ERROR;
                continue;
            }
        };
        match (&target, mode) {
            (_, Mode::Test) => {}
            (None, _) => {
                cx.out(&out)?;
            }
            (Some(t), _) => {
                let cwd = cx.cwd().to_string();
                let mode_bits = cx
                    .vfs()
                    .resolve(&cwd, &path, true)
                    .map(|i| cx.vfs().get(i).mode)
                    .ok();
                if let Err(e) = cx.write_file(t, out) {
                    cx.err_line(&format!("gzip: {t}: {}", e.msg()));
                    status = ERROR;
                    continue;
                }
                if let (Some(bits), Ok(ino)) = (mode_bits, cx.vfs().resolve(&cwd, t, true)) {
                    if let Some(node) = cx.vfs().get_mut(ino) {
                        node.mode = bits;
                    }
                }
                if !keep {
                    let _ = cx.vfs().unlink(&cwd, &path);
                }
            }
        }
    }
    Ok(status)
}

/// Looks at the clock and charges `grown` more output bytes to the budget.
fn step(cx: &mut Ctx<'_, '_>, grown: usize) -> Result<(), Fail> {
    if crate::shell::stop_due() {
        return Err(Fail::Stop(cx.interrupted()));
    }
    cx.hold(grown).map_err(Fail::Stop)
}

/// `data` as one gzip member at `level`, a piece at a time.
pub(super) fn compress(cx: &mut Ctx<'_, '_>, data: &[u8], level: u32) -> Result<Vec<u8>, Fail> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(level));
    let mut charged = 0;
    for piece in data.chunks(PIECE) {
        // writing into a Vec cannot fail
        let _ = enc.write_all(piece);
        let len = enc.get_ref().len();
        step(cx, len - charged)?;
        charged = len;
    }
    Ok(enc.finish().unwrap_or_default())
}

/// Every gzip member of `data` decompressed, a piece at a time.
pub(super) fn decompress(cx: &mut Ctx<'_, '_>, data: &[u8]) -> Result<Vec<u8>, Fail> {
    if data.len() < 2 || data[0] != 0x1f || data[1] != 0x8b {
        return Err(Fail::Format);
    }
    let mut dec = flate2::read::MultiGzDecoder::new(data);
    let mut out = Vec::new();
    let mut buf = vec![0u8; PIECE];
    loop {
        match dec.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                out.extend_from_slice(&buf[..n]);
                step(cx, n)?;
            }
            Err(_) => return Err(Fail::Format),
        }
    }
    Ok(out)
}
