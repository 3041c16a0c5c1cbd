//! `shuf` (GNU coreutils 9.1 options): a permutation of the input lines, of `-e ARG...`
//! or of `-i LO-HI`; `-n COUNT`, `-r` (with replacement; needs `-n` to end), `-z`,
//! `-o FILE`. The order is deterministic: drawn from the machine's clock and a counter
//! (never the host's randomness), so GNU's own order is not reproduced. `--random-source`
//! fails visibly with status 1. One look at the clock per 4096 lines.

use super::opts::{Arg, Parser};
use super::Ctx;
use crate::shell::R;

thread_local! {
    static DRAWS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// A xorshift64* generator seeded from `now` and a per-thread counter.
struct Rng(u64);

impl Rng {
    fn new(now: f64) -> Self {
        let k = DRAWS.with(|d| {
            let k = d.get().wrapping_add(1);
            d.set(k);
            k
        });
        Rng((now.to_bits() ^ k.wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1)
    }
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as usize % n.max(1)
    }
}

pub(super) fn main(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new(
        "shuf",
        args,
        &[
            "echo",
            "input-range",
            "head-count",
            "repeat",
            "zero-terminated",
            "output",
            "random-source",
        ],
    );
    let (mut echo, mut repeat) = (false, false);
    let mut range: Option<(u64, u64)> = None;
    let mut count: Option<usize> = None;
    let mut term = b'\n';
    let mut output: Option<String> = None;
    let mut operands = Vec::new();
    let bad = |cx: &mut Ctx<'_, '_>, msg: String| -> R<i32> {
        cx.err_line(&format!("shuf: {msg}"));
        Ok(1)
    };
    loop {
        match p.next_in(cx)? {
            Ok(Some(Arg::Short('e'))) | Ok(Some(Arg::Long("echo"))) => echo = true,
            Ok(Some(Arg::Short('r'))) | Ok(Some(Arg::Long("repeat"))) => repeat = true,
            Ok(Some(Arg::Short('z'))) | Ok(Some(Arg::Long("zero-terminated"))) => term = 0,
            Ok(Some(Arg::Short('i'))) | Ok(Some(Arg::Long("input-range"))) => {
                let v = match p.value() {
                    Ok(v) => v,
                    Err(u) => return super::usage(cx, u, 1),
                };
                let parsed = v
                    .split_once('-')
                    .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?)))
                    .filter(|(a, b)| b.checked_add(1).is_some_and(|b1| b1 >= *a));
                match parsed {
                    Some(r) => range = Some(r),
                    None => return bad(cx, format!("invalid input range: '{v}'")),
                }
            }
            Ok(Some(Arg::Short('n'))) | Ok(Some(Arg::Long("head-count"))) => {
                let v = match p.value() {
                    Ok(v) => v,
                    Err(u) => return super::usage(cx, u, 1),
                };
                match v.parse::<usize>() {
                    Ok(n) => count = Some(count.map_or(n, |c: usize| c.min(n))),
                    Err(_) => return bad(cx, format!("invalid line count: '{v}'")),
                }
            }
            Ok(Some(Arg::Short('o'))) | Ok(Some(Arg::Long("output"))) => match p.value() {
                Ok(v) => output = Some(v),
                Err(u) => return super::usage(cx, u, 1),
            },
            Ok(Some(Arg::Long(l))) => return cx.unsupported_status(&format!("shuf --{l}"), 1),
            Ok(Some(Arg::Short(c))) => return super::usage(cx, p.invalid_short(c), 1),
            Ok(Some(Arg::Operand(o))) => operands.push(o),
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, 1),
        }
    }
    if echo && range.is_some() {
        return bad(cx, "cannot combine -e and -i options".into());
    }
    // the items: lines of the input, the operands, or the numbers of the range
    let items: Vec<Vec<u8>> = if echo {
        operands.iter().map(|o| o.clone().into_bytes()).collect()
    } else if let Some((a, b)) = range {
        if !operands.is_empty() {
            return bad(cx, format!("extra operand '{}'", operands[0]));
        }
        let n = (b + 1 - a) as usize;
        if n > 10_000_000 {
            return cx.unsupported_status("shuf -i over 10 million numbers", 1);
        }
        let mut v = Vec::with_capacity(n);
        for (k, x) in (a..=b).enumerate() {
            if k % 4096 == 4095 && crate::shell::stop_due() {
                return Err(cx.interrupted());
            }
            v.push(x.to_string().into_bytes());
        }
        v
    } else {
        if operands.len() > 1 {
            return bad(cx, format!("extra operand '{}'", operands[1]));
        }
        let f = operands.first().cloned().unwrap_or_else(|| "-".into());
        let data = match cx.read_input(&f) {
            Ok(d) => d,
            Err(e) => return bad(cx, format!("{f}: {e}")),
        };
        let mut v: Vec<Vec<u8>> = data.split(|b| *b == term).map(<[u8]>::to_vec).collect();
        if data.is_empty() || data.last() == Some(&term) {
            v.pop();
        }
        v
    };
    cx.hold(items.iter().map(|i| i.len() + 24).sum())?;
    let mut rng = Rng::new(cx.now_secs());
    let mut out = Vec::new();
    let mut emitted = 0usize;
    let mut charged = 0usize;
    let mut step = |cx: &mut Ctx<'_, '_>, out: &Vec<u8>| -> R<()> {
        emitted += 1;
        if emitted.is_multiple_of(4096) {
            if crate::shell::stop_due() {
                return Err(cx.interrupted());
            }
            // the output's growth since the last charge, not all of it again
            cx.hold(out.len().saturating_sub(charged))?;
            charged = out.len();
            cx.tick()?;
        }
        Ok(())
    };
    if repeat {
        let Some(n) = count else {
            return cx.unsupported_status("shuf -r without -n (endless output)", 1);
        };
        if !items.is_empty() {
            for _ in 0..n {
                out.extend_from_slice(&items[rng.below(items.len())]);
                out.push(term);
                step(cx, &out)?;
            }
        } else if n > 0 {
            return bad(cx, "no lines to repeat".into());
        }
    } else {
        let mut order: Vec<usize> = (0..items.len()).collect();
        let n = count.unwrap_or(items.len()).min(items.len());
        // a partial Fisher-Yates: the first n places
        for i in 0..n {
            let j = i + rng.below(order.len() - i);
            order.swap(i, j);
            out.extend_from_slice(&items[order[i]]);
            out.push(term);
            step(cx, &out)?;
        }
    }
    match output {
        Some(f) => {
            if let Err(e) = cx.write_file(&f, out) {
                return bad(cx, format!("{f}: {}", e.msg()));
            }
        }
        None => {
            cx.out(&out)?;
        }
    }
    Ok(0)
}
