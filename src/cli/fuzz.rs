//! A structured fuzzer for the CLI's value options, parsed the way `shellbox` parses them
//! (clap, the value parsers in [`super::args`], then [`MachineArgs::spec`] and, for sizes
//! of the simulator, a machine made from that spec).
//!
//! Properties, each against an exact oracle:
//! - `--timeout` (and `compare --timeout`): a generated duration (whole nanoseconds, up to
//!   past `Duration::MAX`) formatted in one of the accepted forms (`90`, `1.5s`, `250ms`,
//!   `2m`, `1h`, `1e3`, leading zeros, `+`, spaces) parses back to exactly that duration
//!   (within the float's precision above 2^50 ns, about 13 days); `0` and anything longer
//!   than 100 years is no limit, anything past `Duration::MAX` is refused "too large";
//!   a generated negative value is refused "negative";
//! - `--output-limit`: a generated count with a unit (`B`, `K`, `KiB`, … `GiB`) parses back
//!   to count × unit, or is refused "too large" exactly when that overflows `u64`;
//! - `--memory-mb`, `--storage-mb`, `--pids-limit`, `--cpus`: a value that does not fit its
//!   type is refused by clap; `0` is refused naming the option (never a silent "no limit");
//!   any other value makes a simulator machine whose command runs (a size that overflowed
//!   into a zero budget would fail it);
//! - arbitrary strings (pieces of numbers, units, signs, `inf`, `NaN`, non-ASCII digits)
//!   never panic; a refusal is clap's error naming the option; an accepted value agrees with
//!   an independent reading of the documented grammar, and a timeout of "no limit" comes
//!   only from `0` or more than 100 years.
//!
//! The committed seed corpus `tests/fuzz-corpus/cli-values.txt` (`OPTION VALUE` lines) is
//! checked first, then mutated and extended. `cargo test -p shellbox --bin shellbox
//! cli::fuzz` runs it for 3 s (seed 1); for an hour: `SHELLBOX_FUZZ_SECS=3600
//! SHELLBOX_FUZZ_SEED=n cargo test --release -p shellbox --bin shellbox cli::fuzz --
//! --nocapture`. A failure prints the seed, the case number and the arguments.

use std::time::{Duration, Instant};

use clap::{CommandFactory, FromArgMatches};

use super::args::{Timeout, TIMEOUT_SATURATION};
use super::{Cli, Sub};

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len() as u64) as usize]
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    /// A u64 spread over magnitudes, with the edges: 0, 1, powers of two and their
    /// neighbours, `u64::MAX`.
    fn magnitude(&mut self) -> u64 {
        match self.below(6) {
            0 => self.below(1000),
            1 => [0, 1, u64::MAX, u64::MAX - 1, 1 << 63, (1 << 63) - 1][self.below(6) as usize],
            2 => {
                let p = 1u64 << self.below(64);
                match self.below(3) {
                    0 => p - 1,
                    1 => p,
                    _ => p.saturating_add(1),
                }
            }
            _ => self.next() >> self.below(64),
        }
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

const NS_PER_SEC: u128 = 1_000_000_000;
/// `Duration::MAX` in nanoseconds.
const MAX_NS: u128 = u64::MAX as u128 * NS_PER_SEC + 999_999_999;

/// What parsing one duration should give, from the oracle.
#[derive(Debug, Clone, Copy)]
enum Want {
    /// Exactly (or, above 2^50 ns, within the float's precision) this many nanoseconds.
    Nanos(u128),
    /// Refused with a message holding this.
    Refused(&'static str),
}

/// A generated duration as text and what it must parse to.
fn gen_duration(rng: &mut Rng) -> (String, Want) {
    // (unit suffix, nanoseconds per unit)
    const UNITS: &[(&str, u128)] = &[
        ("", NS_PER_SEC),
        ("s", NS_PER_SEC),
        ("ms", 1_000_000),
        ("m", 60 * NS_PER_SEC),
        ("h", 3600 * NS_PER_SEC),
    ];
    let (unit, per) = UNITS[rng.below(UNITS.len() as u64) as usize];
    let space = if rng.chance(10) { " " } else { "" };
    let pad = |rng: &mut Rng, s: String| -> String {
        let s = if rng.chance(10) { format!("00{s}") } else { s };
        let s = if rng.chance(5) { format!("+{s}") } else { s };
        if rng.chance(5) {
            format!(" {s} ")
        } else {
            s
        }
    };
    let negative = rng.chance(5);
    let (text, ns) = match rng.below(4) {
        // A whole number of units, sometimes written with `.0` or an exponent.
        0 | 1 => {
            let k = u128::from(rng.magnitude() >> rng.below(40));
            let digits = match rng.below(4) {
                0 => format!("{k}.0"),
                1 if k % 1000 == 0 && k > 0 => format!("{}e3", k / 1000),
                _ => k.to_string(),
            };
            (pad(rng, digits), k * per)
        }
        // Seconds (or milliseconds) with a fraction: every nanosecond digit.
        _ => {
            let ns = u128::from(rng.magnitude() >> rng.below(30));
            let (unit_ns, places) = if per == 1_000_000 {
                (1_000_000u128, 6usize)
            } else if per == NS_PER_SEC {
                (NS_PER_SEC, 9usize)
            } else {
                // Minutes and hours take whole units here.
                let k = ns / per;
                return finish(pad(rng, k.to_string()), unit, space, negative, k * per);
            };
            let whole = ns / unit_ns;
            let frac = ns % unit_ns;
            let mut f = format!("{frac:0places$}");
            while f.ends_with('0') && rng.chance(70) {
                f.pop();
            }
            let text = if f.is_empty() {
                format!("{whole}")
            } else {
                format!("{whole}.{f}")
            };
            (pad(rng, text), ns)
        }
    };
    finish(text, unit, space, negative, ns)
}

fn finish(number: String, unit: &str, space: &str, negative: bool, ns: u128) -> (String, Want) {
    if negative && ns > 0 {
        let number = number.trim().trim_start_matches('+');
        return (format!("-{number}{space}{unit}"), Want::Refused("negative"));
    }
    let want = if ns > MAX_NS {
        Want::Refused("too large")
    } else {
        Want::Nanos(ns)
    };
    (format!("{number}{space}{unit}"), want)
}

/// Whether `got` is the oracle's `want` nanoseconds: exact up to 2^50 ns, else within a
/// relative 2^-48 (the number is read as an `f64` and scaled once).
fn close(got: Duration, want: u128) -> bool {
    let got = got.as_nanos();
    if want <= 1 << 50 {
        return got == want;
    }
    got.abs_diff(want) <= want >> 48
}

/// Near a boundary the float may round either way.
fn near(a: u128, b: u128) -> bool {
    a.abs_diff(b) <= a.max(b) >> 48
}

/// Parses a command line as `shellbox` does (its command, with a version).
fn parse_cli(argv: &[&str]) -> Result<Cli, clap::Error> {
    Cli::command()
        .version("fuzz")
        .try_get_matches_from(argv)
        .and_then(|m| Cli::from_arg_matches(&m))
}

/// Parses a `run` command line with these options; `Err` is clap's message.
fn parse_run(options: &[&str]) -> Result<super::RunArgs, String> {
    let mut argv = vec!["shellbox", "run"];
    argv.extend_from_slice(options);
    argv.extend_from_slice(&["--", "true"]);
    match parse_cli(&argv) {
        Ok(Cli {
            command: Sub::Run(args),
            ..
        }) => Ok(args),
        Ok(other) => Err(format!("parsed as another command: {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

/// `compare --timeout`, which takes the same durations (0 is not "no limit" there).
fn parse_compare_timeout(value: &str) -> Result<Duration, String> {
    let argv = [
        "shellbox",
        "compare",
        "--corpus",
        "c.jsonl",
        "--timeout",
        value,
    ];
    match parse_cli(&argv) {
        Ok(Cli {
            command: Sub::Compare(args),
            ..
        }) => Ok(args.timeout),
        Ok(other) => Err(format!("parsed as another command: {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

/// Checks a generated `--timeout` value against the oracle.
fn check_timeout(text: &str, want: Want) -> Result<(), String> {
    let option = format!("--timeout={text}");
    let got = parse_run(&[&option]);
    let compare = parse_compare_timeout(text);
    match want {
        Want::Refused(why) => {
            for (what, err) in [
                ("run", got.err()),
                ("compare", compare.err().map(|e| e.to_string())),
            ] {
                match err {
                    Some(e) if e.contains("--timeout") && e.contains(why) => {}
                    Some(e) => return Err(format!("{what}: refused without {why:?}: {e}")),
                    None => return Err(format!("{what}: accepted, want refused ({why})")),
                }
            }
            Ok(())
        }
        Want::Nanos(ns) => {
            let saturated = ns > TIMEOUT_SATURATION.as_nanos();
            let args = match got {
                Ok(a) => a,
                Err(e) if near(ns, MAX_NS) && e.contains("too large") => return Ok(()),
                Err(e) => return Err(format!("run: refused {ns} ns: {e}")),
            };
            match args.timeout {
                Some(Timeout(None)) if ns == 0 || saturated => {}
                Some(Timeout(None)) if near(ns, TIMEOUT_SATURATION.as_nanos()) => {}
                Some(Timeout(Some(d))) if !saturated && close(d, ns) => {}
                Some(Timeout(Some(d))) if near(ns, TIMEOUT_SATURATION.as_nanos()) => {
                    let _ = d;
                }
                other => return Err(format!("run: {ns} ns parsed as {other:?}")),
            }
            match compare {
                Ok(d) if close(d, ns) => Ok(()),
                Err(e) if near(ns, MAX_NS) && e.contains("too large") => Ok(()),
                other => Err(format!("compare: {ns} ns parsed as {other:?}")),
            }
        }
    }
}

const SIZE_UNITS: &[(&str, u64)] = &[
    ("", 1),
    ("B", 1),
    ("K", 1 << 10),
    ("KiB", 1 << 10),
    ("M", 1 << 20),
    ("MiB", 1 << 20),
    ("G", 1 << 30),
    ("GiB", 1 << 30),
];

fn check_output_limit(rng: &mut Rng) -> Result<(), String> {
    let (unit, scale) = SIZE_UNITS[rng.below(SIZE_UNITS.len() as u64) as usize];
    let n = rng.magnitude() >> rng.below(34);
    let mut number = n.to_string();
    if rng.chance(10) {
        number.insert_str(0, "000");
    }
    if rng.chance(5) {
        number.insert(0, '+');
    }
    let space = if rng.chance(10) { " " } else { "" };
    let text = format!("{number}{space}{unit}");
    let option = format!("--output-limit={text}");
    match (parse_run(&[&option]), n.checked_mul(scale)) {
        (Ok(a), Some(want)) if a.output_limit == want => Ok(()),
        (Err(e), None) if e.contains("--output-limit") && e.contains("too large") => Ok(()),
        (got, want) => Err(format!(
            "{option}: got {:?}, want {want:?}",
            got.map(|a| a.output_limit)
        )),
    }
}

/// `--memory-mb`, `--storage-mb`, `--pids-limit`, `--cpus` with a generated number.
fn check_machine_number(rng: &mut Rng) -> Result<(), String> {
    let (option, bits) = [
        ("--memory-mb", 64),
        ("--storage-mb", 64),
        ("--pids-limit", 32),
        ("--cpus", 32),
    ][rng.below(4) as usize];
    let n = u128::from(rng.magnitude()) << rng.below(2);
    let text = if rng.chance(3) && n > 0 {
        format!("-{n}")
    } else {
        n.to_string()
    };
    let fits = !text.starts_with('-') && n < 1u128 << bits;
    let parsed = parse_run(&["--backend", "sim", option, &text]);
    let args = match (parsed, fits) {
        (Ok(args), true) => args,
        (Err(e), false) if e.contains(option) => return Ok(()),
        (got, _) => {
            return Err(format!(
                "{option} {text}: fits {fits}, got {:?}",
                got.map(|_| ())
            ))
        }
    };
    let spec = args.machine.spec().map_err(super::Failure::from);
    match (spec, option, n) {
        // The simulator cannot limit CPUs: refused naming the option.
        (Err(f), "--cpus", _) if f.message.contains("--cpus") => Ok(()),
        (Err(f), _, 0) if f.message.contains(option) && f.kind == "invalid_input" => Ok(()),
        // Past Linux's PID_MAX_LIMIT: refused naming the option (check and create agree).
        (Err(f), "--pids-limit", n)
            if n > u128::from(shellbox::MAX_PIDS_LIMIT)
                && f.message.contains(option)
                && f.kind == "invalid_input" =>
        {
            Ok(())
        }
        (Ok(spec), _, n) if n > 0 && option != "--cpus" => check_sim_machine(spec, option, &text),
        (spec, _, _) => Err(format!(
            "{option} {text}: the spec is {:?}",
            spec.map(|s| (s.memory_mb, s.storage_mb, s.pids_limit))
                .map_err(|f| f.message)
        )),
    }
}

/// A simulator machine made from `spec` runs a command: a size that overflowed into a
/// small budget would refuse it. Not compiled without the simulator.
#[cfg(feature = "sim")]
fn check_sim_machine(spec: shellbox::MachineSpec, option: &str, text: &str) -> Result<(), String> {
    // A budget below what a shell needs is the user's choice, not a finding.
    let small = |v: Option<u64>| v.is_some_and(|mb| mb < 8);
    if small(spec.memory_mb) || small(spec.storage_mb) {
        return Ok(());
    }
    let factory = shellbox::sim::SimMachineFactory::new();
    let machine = std::panic::catch_unwind(|| factory.create_sim(spec))
        .map_err(|_| format!("{option} {text}: creating the machine panicked"))?
        .map_err(|e| format!("{option} {text}: create failed: {e}"))?;
    let command = shellbox::Command::shell("x=$(seq 1000); echo ${#x} > /tmp/f; cat /tmp/f")
        .timeout(Duration::from_secs(60));
    match machine.run_sync(command) {
        Ok(r) if r.exit_code == Some(0) && r.stdout[..] == b"3892\n"[..] => Ok(()),
        other => Err(format!("{option} {text}: the command gave {other:?}")),
    }
}

#[cfg(not(feature = "sim"))]
fn check_sim_machine(_: shellbox::MachineSpec, _: &str, _: &str) -> Result<(), String> {
    Ok(())
}

/// Pieces of arbitrary option values.
const PIECES: &[&str] = &[
    "0",
    "1",
    "7",
    "9",
    "12",
    ".",
    ".5",
    "e",
    "E",
    "e-",
    "-",
    "+",
    "ms",
    "s",
    "m",
    "h",
    "B",
    "K",
    "KiB",
    "MiB",
    "GiB",
    "G",
    "M",
    "k",
    "kib",
    "ns",
    "us",
    "µs",
    "d",
    " ",
    "\t",
    "inf",
    "infinity",
    "NaN",
    "nan",
    "x",
    "_",
    "0x10",
    "1e400",
    "1e-400",
    "١",
    "٣",
    "𝟙",
    "é",
    "\u{a0}",
    "18446744073709551615",
    "18446744073709551616",
    "9223372036854775807",
    "3153600000",
    "3153600001",
    "5.8e11",
    "1e19",
    "1e20",
    "1.8446744073709552e19",
    "\u{0}",
];

/// An independent reading of the documented duration grammar: seconds (a float), or a float
/// with `ms`, `s`, `m` or `h`; the value in seconds as an `f64`, or `None` if malformed.
fn documented_seconds(text: &str) -> Option<f64> {
    let t = text.trim();
    let split = t
        .char_indices()
        .rev()
        .take_while(|(_, c)| matches!(c, 'm' | 's' | 'h'))
        .last()
        .map_or(t.len(), |(i, _)| i);
    let (number, unit) = t.split_at(split);
    let scale = match unit {
        "" | "s" => 1.0,
        "ms" => 0.001,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return None,
    };
    let v: f64 = number.trim().parse().ok()?;
    (!v.is_nan()).then_some(v * scale)
}

/// An independent reading of the documented size grammar.
fn documented_bytes(text: &str) -> Option<Option<u64>> {
    let t = text.trim();
    let split = t
        .char_indices()
        .rev()
        .take_while(|(_, c)| c.is_ascii_alphabetic())
        .last()
        .map_or(t.len(), |(i, _)| i);
    let (number, unit) = t.split_at(split);
    let scale = SIZE_UNITS.iter().find(|(u, _)| *u == unit)?.1;
    let n: u64 = number.trim().parse().ok()?;
    Some(n.checked_mul(scale))
}

fn gen_arbitrary(rng: &mut Rng) -> String {
    let mut s = String::new();
    for _ in 0..1 + rng.below(5) {
        s.push_str(rng.pick(PIECES));
    }
    s
}

fn check_arbitrary(text: &str) -> Result<(), String> {
    // --timeout
    let option = format!("--timeout={text}");
    let want = documented_seconds(text);
    match (parse_run(&[&option]), want) {
        (Err(e), _) if !e.contains("--timeout") => {
            return Err(format!("{option}: refused without naming it: {e}"))
        }
        (Err(_), None) => {}
        (Err(e), Some(v)) => {
            let ok = (v < 0.0 && e.contains("negative"))
                || (v > 0.0 && v < 1e-9 && e.contains("nanosecond"))
                || (v >= Duration::MAX.as_secs_f64() * (1.0 - 1e-15) && e.contains("too large"));
            if !ok {
                return Err(format!("{option}: refused ({e}), documented value {v}"));
            }
        }
        (Ok(a), Some(v)) => match a.timeout {
            Some(Timeout(None)) if v == 0.0 || v >= TIMEOUT_SATURATION.as_secs_f64() => {}
            Some(Timeout(Some(d)))
                if (d.as_secs_f64() - v).abs() <= v * 1e-15 + 1e-9 && d <= TIMEOUT_SATURATION =>
            {
                let _ = d;
            }
            other => return Err(format!("{option}: got {other:?}, documented value {v}")),
        },
        (Ok(a), None) => {
            return Err(format!(
                "{option}: accepted as {:?}, but not in the documented grammar",
                a.timeout
            ))
        }
    }
    // --output-limit
    let option = format!("--output-limit={text}");
    match (parse_run(&[&option]), documented_bytes(text)) {
        (Ok(a), Some(Some(n))) if a.output_limit == n => {}
        (Err(e), Some(None)) if e.contains("--output-limit") && e.contains("too large") => {}
        (Err(e), None) if e.contains("--output-limit") => {}
        (got, want) => {
            return Err(format!(
                "{option}: got {:?}, documented {want:?}",
                got.map(|a| a.output_limit)
            ))
        }
    }
    Ok(())
}

/// Mutates a corpus value: a piece inserted, a character removed or doubled.
fn mutate(rng: &mut Rng, text: &str) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for _ in 0..1 + rng.below(3) {
        let at = rng.below(chars.len() as u64 + 1) as usize;
        match rng.below(3) {
            0 => {
                let piece: Vec<char> = rng.pick(PIECES).chars().collect();
                chars.splice(at..at, piece);
            }
            1 if at < chars.len() => {
                chars.remove(at);
            }
            _ if at < chars.len() => {
                let c = chars[at];
                chars.insert(at, c);
            }
            _ => {}
        }
    }
    chars.into_iter().collect()
}

fn corpus() -> Vec<(String, String)> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fuzz-corpus/cli-values.txt"
    );
    let text = std::fs::read_to_string(path).expect("the seed corpus is committed");
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (option, value) = l.split_once(' ').unwrap_or((l, ""));
            (option.to_string(), value.to_string())
        })
        .collect()
}

/// Checks one corpus line: an arbitrary value of its option.
fn check_corpus_line(option: &str, value: &str) -> Result<(), String> {
    match option {
        "--timeout" | "--output-limit" => check_arbitrary(value),
        _ => {
            // A machine number: a refusal names the option, zero is refused.
            match parse_run(&["--backend", "sim", option, value]) {
                Err(e) if e.contains(option) => Ok(()),
                Err(e) => Err(format!("{option} {value:?}: {e}")),
                Ok(args) => match args.machine.spec().map_err(super::Failure::from) {
                    Err(f) if f.message.contains(option) => Ok(()),
                    Err(f) => Err(format!("{option} {value:?}: {}", f.message)),
                    Ok(spec) => check_sim_machine(spec, option, value),
                },
            }
        }
    }
}

#[test]
fn fuzz_cli_values() {
    let seed = env_u64("SHELLBOX_FUZZ_SEED", 1).max(1);
    let secs = env_u64("SHELLBOX_FUZZ_SECS", 3);
    let seeds = corpus();
    assert!(!seeds.is_empty());
    for (option, value) in &seeds {
        if let Err(why) = check_corpus_line(option, value) {
            panic!("seed corpus line {option} {value:?}: {why}");
        }
    }
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let end = Instant::now() + Duration::from_secs(secs);
    let (mut durations, mut sizes, mut numbers, mut arbitrary) = (0u64, 0u64, 0u64, 0u64);
    let mut case = 0u64;
    while Instant::now() < end {
        case += 1;
        let (what, result) = match rng.below(10) {
            0..=2 => {
                durations += 1;
                let (text, want) = gen_duration(&mut rng);
                (text.clone(), check_timeout(&text, want))
            }
            3 | 4 => {
                sizes += 1;
                (String::new(), check_output_limit(&mut rng))
            }
            5 => {
                numbers += 1;
                (String::new(), check_machine_number(&mut rng))
            }
            6 => {
                arbitrary += 1;
                let (_, value) = &seeds[rng.below(seeds.len() as u64) as usize];
                let text = mutate(&mut rng, value);
                (text.clone(), check_arbitrary(&text))
            }
            _ => {
                arbitrary += 1;
                let text = gen_arbitrary(&mut rng);
                (text.clone(), check_arbitrary(&text))
            }
        };
        if let Err(why) = result {
            panic!("fuzz failure (seed {seed}, case {case}, value {what:?}): {why}");
        }
    }
    eprintln!(
        "fuzz_cli: seed {seed}: {case} cases in {secs} s ({durations} durations, {sizes} \
         sizes, {numbers} machine numbers, {arbitrary} arbitrary values)"
    );
}
