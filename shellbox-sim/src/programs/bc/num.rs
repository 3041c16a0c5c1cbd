//! bc's numbers: a signed integer mantissa and a decimal scale (value = `m / 10^s`), with
//! GNU bc 1.07's rules for the scale of each result (`number.c`: sums keep the larger
//! scale, products `min(sa+sb, max(scale, sa, sb))`, quotients the global `scale`, all
//! truncated toward zero). Large multiplications, divisions and conversions are done in
//! pieces that look at the command's deadline between them ([`crate::shell::stop_due`]),
//! so a huge computation ends at the machine's timeout instead of running on.

use num_bigint::{BigInt, BigUint, Sign};
use num_integer::Integer;
use num_traits::{One, Signed, ToPrimitive, Zero};

/// Why an arithmetic step did not finish.
#[derive(Debug)]
pub(super) enum Halt {
    /// GNU's runtime error words (`Divide by zero`).
    Error(String),
    /// The deadline passed or the command was cancelled.
    Stop,
    /// A number would be larger than the memory the machine has left (bytes it needs).
    Memory(u64),
    /// `halt` ran: bc ends.
    Exit,
}

/// A result of an arithmetic step.
pub(super) type Res<T> = Result<T, Halt>;

/// Bits past which a multiplication or division is cut into deadline-checked pieces.
const PIECE_BITS: u64 = 1 << 15;

/// One bc number.
#[derive(Clone, Debug, Default)]
pub(super) struct Num {
    /// The digits, scaled: the value is `m / 10^s`.
    pub(super) m: BigInt,
    /// Digits after the point.
    pub(super) s: usize,
}

fn stop() -> Res<()> {
    if crate::shell::stop_due() {
        Err(Halt::Stop)
    } else {
        Ok(())
    }
}

/// `10^n`, by squaring with a look at the deadline between the steps (a single
/// `BigInt::pow` of a large exponent would not look).
pub(super) fn pow10(n: usize) -> Res<BigInt> {
    if n <= 64 {
        return Ok(BigInt::from(10u32).pow(n as u32));
    }
    // 3.33 bits a digit: past about 400 MB of digits no machine holds it
    if n > 1_000_000_000 {
        return Err(Halt::Memory(n as u64 / 2));
    }
    let mut acc = BigInt::one();
    let mut base = BigInt::from(10u32);
    let mut k = n;
    while k > 0 {
        stop()?;
        if k & 1 == 1 {
            acc = mul_int(&acc, &base)?;
        }
        k >>= 1;
        if k > 0 {
            base = mul_int(&base, &base)?;
        }
    }
    Ok(acc)
}

/// A product, in pieces of the longer factor when the work is large (each piece about
/// 2^36 bit-products, so the deadline is looked at every few milliseconds).
fn mul_int(a: &BigInt, b: &BigInt) -> Res<BigInt> {
    let (big, small) = if a.bits() >= b.bits() { (a, b) } else { (b, a) };
    if (big.bits() as u128) * (small.bits() as u128) < 1u128 << 36 {
        return Ok(a * b);
    }
    let sign = if a.sign() == b.sign() {
        Sign::Plus
    } else {
        Sign::Minus
    };
    let (bu, su) = (big.magnitude(), small.magnitude());
    let digits = bu.to_u32_digits();
    let per = ((1u64 << 36) / small.bits().max(1) / 32).clamp(64, PIECE_BITS / 32) as usize;
    let mut acc = BigUint::zero();
    for (k, piece) in digits.chunks(per).enumerate() {
        stop()?;
        let p = BigUint::from_slice(piece) * su;
        acc += p << (k * per * 32);
    }
    Ok(BigInt::from_biguint(sign, acc))
}

/// The quotient truncated toward zero, in pieces of the dividend when the work is large.
fn div_int(a: &BigInt, b: &BigInt) -> Res<BigInt> {
    let ab = a.bits();
    let bb = b.bits();
    if ab <= bb || (ab - bb).saturating_mul(bb.max(64)) < (1u64 << 34) {
        return Ok(a / b);
    }
    let sign = if a.sign() == b.sign() {
        Sign::Plus
    } else {
        Sign::Minus
    };
    let d = b.magnitude();
    let digits = a.magnitude().to_u32_digits();
    // each step divides `per` digits more: about 2^34 bit-products
    let per = ((1u64 << 34) / bb.max(1) / 32).clamp(1, PIECE_BITS / 32) as usize;
    let pieces = digits.len().div_ceil(per);
    let mut r = BigUint::zero();
    let mut q: Vec<u32> = vec![0; pieces * per];
    for k in (0..pieces).rev() {
        stop()?;
        let lo = k * per;
        let hi = (lo + per).min(digits.len());
        r = (r << (per * 32)) + BigUint::from_slice(&digits[lo..hi]);
        let (qk, rk) = r.div_rem(d);
        r = rk;
        for (i, v) in qk.to_u32_digits().into_iter().enumerate() {
            q[lo + i] = v;
        }
    }
    Ok(BigInt::from_biguint(sign, BigUint::new(q)))
}

impl Num {
    /// The integer `n`.
    pub(super) fn int(n: i64) -> Num {
        Num {
            m: BigInt::from(n),
            s: 0,
        }
    }

    /// Whether it is zero.
    pub(super) fn is_zero(&self) -> bool {
        self.m.is_zero()
    }

    /// Whether it is below zero.
    pub(super) fn is_neg(&self) -> bool {
        self.m.is_negative()
    }

    /// Bytes its digits take (what the memory check counts).
    pub(super) fn bytes(&self) -> u64 {
        self.m.bits() / 8 + 16
    }

    /// The mantissa at scale `s` (truncated when `s` is smaller).
    fn at(&self, s: usize) -> Res<BigInt> {
        Ok(match s.cmp(&self.s) {
            std::cmp::Ordering::Equal => self.m.clone(),
            std::cmp::Ordering::Greater => mul_int(&self.m, &pow10(s - self.s)?)?,
            std::cmp::Ordering::Less => div_int(&self.m, &pow10(self.s - s)?)?,
        })
    }

    /// The number truncated to `s` digits after the point (never more than it has).
    pub(super) fn trunc(&self, s: usize) -> Res<Num> {
        if s >= self.s {
            return Ok(self.clone());
        }
        Ok(Num { m: self.at(s)?, s })
    }

    /// Its integer part.
    pub(super) fn int_part(&self) -> Res<BigInt> {
        self.at(0)
    }

    /// The value as an `i64` (integer part), `None` past its range.
    pub(super) fn to_i64(&self) -> Option<i64> {
        if self.s > 0 && self.m.bits() > 400 {
            return None;
        }
        self.int_part().ok()?.to_i64()
    }

    /// `a + b`, scale `max(sa, sb)`.
    pub(super) fn add(&self, b: &Num) -> Res<Num> {
        let s = self.s.max(b.s);
        Ok(Num {
            m: self.at(s)? + b.at(s)?,
            s,
        })
    }

    /// `a - b`, scale `max(sa, sb)`.
    pub(super) fn sub(&self, b: &Num) -> Res<Num> {
        let s = self.s.max(b.s);
        Ok(Num {
            m: self.at(s)? - b.at(s)?,
            s,
        })
    }

    /// `-a`.
    pub(super) fn neg(&self) -> Num {
        Num {
            m: -self.m.clone(),
            s: self.s,
        }
    }

    /// `a * b` at `scale`: `min(sa + sb, max(scale, sa, sb))` digits, truncated.
    pub(super) fn mul(&self, b: &Num, scale: usize) -> Res<Num> {
        let full = self.s + b.s;
        let want = full.min(scale.max(self.s).max(b.s));
        let p = Num {
            m: mul_int(&self.m, &b.m)?,
            s: full,
        };
        p.trunc(want)
    }

    /// `a / b` at `scale` digits, truncated; `Divide by zero` for a zero divisor.
    pub(super) fn div(&self, b: &Num, scale: usize) -> Res<Num> {
        if b.is_zero() {
            return Err(Halt::Error("Divide by zero".into()));
        }
        // a/b * 10^scale = ma * 10^(sb + scale) / (mb * 10^sa)
        let up = b.s + scale;
        let (n, d) = if up >= self.s {
            (mul_int(&self.m, &pow10(up - self.s)?)?, b.m.clone())
        } else {
            (self.m.clone(), mul_int(&b.m, &pow10(self.s - up)?)?)
        };
        Ok(Num {
            m: div_int(&n, &d)?,
            s: scale,
        })
    }

    /// `a % b` at `scale`: `a - (a / b) * b`, the quotient at `scale` digits; scale
    /// `max(scale + sb, sa)`.
    pub(super) fn rem(&self, b: &Num, scale: usize) -> Res<Num> {
        if b.is_zero() {
            return Err(Halt::Error("Modulo by zero".into()));
        }
        let q = self.div(b, scale)?;
        let rs = (scale + b.s).max(self.s);
        let p = q.mul(b, rs)?;
        self.sub(&p)
    }

    /// `a ^ e` at `scale` (`e` an integer: the caller warns and truncates first).
    /// `limit` is the bytes the result may take.
    pub(super) fn pow(&self, e: i64, scale: usize, limit: u64) -> Res<Num> {
        if e == 0 {
            return Ok(Num::int(1));
        }
        let neg = e < 0;
        let n = e.unsigned_abs();
        let rscale = if neg {
            scale
        } else {
            (self.s as u64)
                .saturating_mul(n)
                .min(scale.max(self.s) as u64) as usize
        };
        let need = self.m.bits().saturating_mul(n) / 8;
        if need > limit {
            return Err(Halt::Memory(need));
        }
        // exact power by squaring, looking at the deadline between the steps
        let mut base = self.m.clone();
        let mut acc = BigInt::one();
        let mut k = n;
        while k > 0 {
            stop()?;
            if k & 1 == 1 {
                acc = mul_int(&acc, &base)?;
            }
            k >>= 1;
            if k > 0 {
                base = mul_int(&base, &base)?;
            }
        }
        let exact = Num {
            m: acc,
            s: self
                .s
                .checked_mul(n as usize)
                .ok_or(Halt::Memory(u64::MAX))?,
        };
        if neg {
            Num::int(1).div(&exact, rscale)
        } else {
            exact.trunc(rscale)
        }
    }

    /// The square root at `max(scale, sa)` digits, truncated.
    pub(super) fn sqrt(&self, scale: usize) -> Res<Num> {
        if self.is_neg() {
            return Err(Halt::Error("Square root of a negative number".into()));
        }
        let rs = scale.max(self.s);
        // sqrt(m / 10^s) * 10^rs = sqrt(m * 10^(2 rs - s))
        let v = mul_int(&self.m, &pow10(2 * rs - self.s)?)?;
        stop()?;
        Ok(Num { m: v.sqrt(), s: rs })
    }

    /// bc's `length`: significant digits (the scale when the integer part is zero).
    pub(super) fn length(&self) -> Res<usize> {
        let ip = self.int_part()?;
        if ip.is_zero() {
            return Ok(self.s.max(1));
        }
        Ok(decimal(ip.magnitude())?.len() + self.s)
    }

    /// Compares two numbers.
    pub(super) fn cmp(&self, b: &Num) -> Res<std::cmp::Ordering> {
        let s = self.s.max(b.s);
        Ok(self.at(s)?.cmp(&b.at(s)?))
    }

    /// Digits of the number in base `base` as bc prints them (no line wrapping): `-`,
    /// the integer part (nothing when it is zero and there is a fraction), `.` and the
    /// fraction. Bases above 16 print each digit as a space and a zero-padded decimal.
    pub(super) fn render(&self, base: u64) -> Res<String> {
        if self.is_zero() {
            return Ok("0".into());
        }
        let mut out = String::new();
        if self.is_neg() {
            out.push('-');
        }
        let a = Num {
            m: self.m.abs(),
            s: self.s,
        };
        let ip = a.int_part()?;
        if base == 10 {
            let digits = decimal(a.m.magnitude())?;
            let (i, f) = if digits.len() > a.s {
                digits.split_at(digits.len() - a.s)
            } else {
                ("", digits.as_str())
            };
            if !i.is_empty() && i != "0" {
                out.push_str(i);
            }
            if a.s > 0 {
                out.push('.');
                for _ in f.len()..a.s {
                    out.push('0');
                }
                out.push_str(f);
            }
            return Ok(out);
        }
        let width = (base - 1).to_string().len();
        let digit = |out: &mut String, d: u64, space: bool| {
            if base <= 16 {
                out.push(b"0123456789ABCDEF"[d as usize] as char);
            } else {
                if space {
                    out.push(' ');
                }
                out.push_str(&format!("{d:0width$}"));
            }
        };
        let big_base = BigUint::from(base);
        let mut stack = Vec::new();
        let mut n = ip.magnitude().clone();
        while !n.is_zero() {
            if stack.len() % 256 == 255 {
                stop()?;
            }
            let (q, r) = n.div_rem(&big_base);
            stack.push(r.to_u64().unwrap_or(0));
            n = q;
        }
        if stack.is_empty() && a.s == 0 {
            stack.push(0);
        }
        for d in stack.iter().rev() {
            digit(&mut out, *d, true);
        }
        if a.s > 0 {
            out.push('.');
            let mut frac = a.sub(&Num {
                m: ip.clone(),
                s: 0,
            })?;
            let nb = Num {
                m: BigInt::from(base),
                s: 0,
            };
            let mut t = BigInt::one();
            let limit = pow10(a.s)?;
            let mut space = false;
            while t < limit {
                stop()?;
                frac = frac.mul(&nb, a.s)?;
                let d = frac.int_part()?;
                frac = frac.sub(&Num { m: d.clone(), s: 0 })?;
                digit(&mut out, d.to_u64().unwrap_or(0), space);
                space = true;
                t *= base;
            }
        }
        Ok(out)
    }
}

/// The decimal digits of `n`, converted in deadline-checked pieces when it is large.
pub(super) fn decimal(n: &BigUint) -> Res<String> {
    if n.bits() < 1 << 16 {
        return Ok(n.to_str_radix(10));
    }
    // peel 1,216 digits (64 × 19) at a time from the bottom
    const CHUNK: usize = 1216;
    let d = BigUint::from(10u32).pow(CHUNK as u32);
    let mut parts = Vec::new();
    let mut x = n.clone();
    while x.bits() >= 1 << 14 {
        stop()?;
        let (q, r) = x.div_rem(&d);
        parts.push(r.to_str_radix(10));
        x = q;
    }
    let mut out = if x.is_zero() {
        String::new()
    } else {
        x.to_str_radix(10)
    };
    for p in parts.iter().rev() {
        for _ in p.len()..CHUNK {
            out.push('0');
        }
        out.push_str(p);
    }
    Ok(out)
}
