//! `expr` (GNU coreutils 9.1): evaluates an expression given as separate arguments: `|`,
//! `&`, `< <= = == != >= >`, `+ -`, `* / %`, `:` (an anchored BRE match), `match`,
//! `substr`, `index`, `length`, `+ TOKEN`, parentheses. Exit status 0 when the result is
//! neither empty nor zero, 1 when it is, 2 for an invalid expression or pattern. Integers are 128-bit here (GNU's are unbounded): a result past that range is
//! refused as unsupported.

use super::posix::{self, Dialect, Re};
use super::Ctx;
use crate::shell::R;

/// Status for an invalid expression (syntax, non-integer argument, division by zero, a
/// bad pattern).
const INVALID: i32 = 2;

/// Why evaluation stopped.
enum Stop {
    /// An invalid expression: GNU's words after `expr: `.
    Invalid(String),
    /// An invalid pattern.
    Pattern(String),
    /// Past what this simulator computes.
    Unsupported(String),
}

#[derive(Clone, Debug)]
enum Val {
    Int(i128),
    Str(String),
}

impl Val {
    fn text(&self) -> String {
        match self {
            Val::Int(n) => n.to_string(),
            Val::Str(s) => s.clone(),
        }
    }
    /// GNU's `null`: an empty string, or zero (`0`, `-0`, `00`...).
    fn null(&self) -> bool {
        match self {
            Val::Int(n) => *n == 0,
            Val::Str(s) => {
                let t = s.strip_prefix('-').unwrap_or(s);
                s.is_empty() || (!t.is_empty() && t.bytes().all(|b| b == b'0'))
            }
        }
    }
    fn int(&self) -> Option<i128> {
        match self {
            Val::Int(n) => Some(*n),
            Val::Str(s) => looks_int(s),
        }
    }
}

/// An integer as GNU reads one: an optional `-` and digits.
fn looks_int(s: &str) -> Option<i128> {
    let t = s.strip_prefix('-').unwrap_or(s);
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let digits = t.trim_start_matches('0');
    if digits.len() > 38 {
        return None;
    }
    let n: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().ok()?
    };
    Some(if s.starts_with('-') { -n } else { n })
}

struct Ev<'a> {
    args: &'a [String],
    pos: usize,
    /// Nesting of parentheses and prefix operators now.
    depth: usize,
}

/// Deepest nesting of parentheses and prefix operators (`length`, `match`, `substr`,
/// `index`) evaluated; deeper is refused as unsupported (GNU's recursion overflows its
/// 8 MiB stack and crashes near 20,000). The run gets a stack of [`EXPR_STACK`] bytes.
const MAX_DEPTH: usize = 10_000;

/// The stack an `expr` run gets (mapped lazily).
const EXPR_STACK: usize = 256 << 20;

impl Ev<'_> {
    fn peek(&self) -> Option<&str> {
        self.args.get(self.pos).map(String::as_str)
    }
    fn is(&self, s: &str) -> bool {
        self.peek() == Some(s)
    }
    fn missing_after(&self) -> Stop {
        match self.pos.checked_sub(1).and_then(|p| self.args.get(p)) {
            Some(a) => Stop::Invalid(format!(
                "syntax error: missing argument after \u{2018}{a}\u{2019}"
            )),
            None => Stop::Invalid("syntax error".into()),
        }
    }

    fn or(&mut self) -> Result<Val, Stop> {
        let mut l = self.and()?;
        while self.is("|") {
            self.pos += 1;
            let r = self.and()?;
            if l.null() {
                l = if r.null() { Val::Int(0) } else { r };
            }
        }
        Ok(l)
    }
    fn and(&mut self) -> Result<Val, Stop> {
        let mut l = self.cmp()?;
        while self.is("&") {
            self.pos += 1;
            let r = self.cmp()?;
            if l.null() || r.null() {
                l = Val::Int(0);
            }
        }
        Ok(l)
    }
    fn cmp(&mut self) -> Result<Val, Stop> {
        let mut l = self.add()?;
        while let Some(op) = self
            .peek()
            .filter(|o| ["<", "<=", "=", "==", "!=", ">=", ">"].contains(o))
        {
            let op = op.to_string();
            self.pos += 1;
            let r = self.add()?;
            let ord = match (looks_int(&l.text()), looks_int(&r.text())) {
                (Some(a), Some(b)) => a.cmp(&b),
                _ => l.text().cmp(&r.text()),
            };
            use std::cmp::Ordering::*;
            let t = match op.as_str() {
                "<" => ord == Less,
                "<=" => ord != Greater,
                "=" | "==" => ord == Equal,
                "!=" => ord != Equal,
                ">=" => ord != Less,
                _ => ord == Greater,
            };
            l = Val::Int(i128::from(t));
        }
        Ok(l)
    }
    fn arith(l: &Val, r: &Val, op: &str) -> Result<Val, Stop> {
        let (Some(a), Some(b)) = (l.int(), r.int()) else {
            return Err(Stop::Invalid("non-integer argument".into()));
        };
        if (op == "/" || op == "%") && b == 0 {
            return Err(Stop::Invalid("division by zero".into()));
        }
        let v = match op {
            "+" => a.checked_add(b),
            "-" => a.checked_sub(b),
            "*" => a.checked_mul(b),
            "/" => a.checked_div(b),
            _ => a.checked_rem(b),
        };
        v.map(Val::Int)
            .ok_or_else(|| Stop::Unsupported("expr arithmetic past 128-bit integers".into()))
    }
    fn add(&mut self) -> Result<Val, Stop> {
        let mut l = self.mul()?;
        while let Some(op) = self.peek().filter(|o| *o == "+" || *o == "-") {
            let op = op.to_string();
            self.pos += 1;
            let r = self.mul()?;
            l = Self::arith(&l, &r, &op)?;
        }
        Ok(l)
    }
    fn mul(&mut self) -> Result<Val, Stop> {
        let mut l = self.colon()?;
        while let Some(op) = self.peek().filter(|o| ["*", "/", "%"].contains(o)) {
            let op = op.to_string();
            self.pos += 1;
            let r = self.colon()?;
            l = Self::arith(&l, &r, &op)?;
        }
        Ok(l)
    }
    fn colon(&mut self) -> Result<Val, Stop> {
        let mut l = self.unary()?;
        while self.is(":") {
            self.pos += 1;
            let r = self.unary()?;
            l = matches(&l.text(), &r.text())?;
        }
        Ok(l)
    }
    fn unary(&mut self) -> Result<Val, Stop> {
        if self.depth >= MAX_DEPTH {
            return Err(Stop::Unsupported(format!(
                "expr nesting deeper than {MAX_DEPTH} levels"
            )));
        }
        self.depth += 1;
        let r = self.unary_inner();
        self.depth -= 1;
        r
    }

    fn unary_inner(&mut self) -> Result<Val, Stop> {
        match self.peek() {
            None => Err(self.missing_after()),
            Some("+") => {
                self.pos += 1;
                match self.peek() {
                    Some(t) => {
                        let v = Val::Str(t.to_string());
                        self.pos += 1;
                        Ok(v)
                    }
                    None => Err(self.missing_after()),
                }
            }
            Some("length") => {
                self.pos += 1;
                let v = self.unary()?;
                Ok(Val::Int(v.text().chars().count() as i128))
            }
            Some("match") => {
                self.pos += 1;
                let s = self.unary()?;
                let p = self.unary()?;
                matches(&s.text(), &p.text())
            }
            Some("substr") => {
                self.pos += 1;
                let s = self.unary()?.text();
                let p = self.unary()?;
                let n = self.unary()?;
                let chars: Vec<char> = s.chars().collect();
                let (p, n) = (p.int().unwrap_or(0), n.int().unwrap_or(0));
                if p < 1 || n < 1 || p as usize > chars.len() {
                    return Ok(Val::Str(String::new()));
                }
                let start = p as usize - 1;
                let end = start
                    .saturating_add(usize::try_from(n).unwrap_or(usize::MAX))
                    .min(chars.len());
                Ok(Val::Str(chars[start..end].iter().collect()))
            }
            Some("index") => {
                self.pos += 1;
                let s = self.unary()?.text();
                let set = self.unary()?.text();
                let at = s.chars().position(|c| set.contains(c)).map_or(0, |i| i + 1);
                Ok(Val::Int(at as i128))
            }
            Some("(") => {
                self.pos += 1;
                let v = self.or()?;
                if !self.is(")") {
                    return Err(match self.peek() {
                        Some(a) => Stop::Invalid(format!(
                            "syntax error: expecting \u{2018})\u{2019} instead of \u{2018}{a}\u{2019}"
                        )),
                        None => Stop::Invalid(format!(
                            "syntax error: expecting \u{2018})\u{2019} after \u{2018}{}\u{2019}",
                            self.args[self.pos - 1]
                        )),
                    });
                }
                self.pos += 1;
                Ok(v)
            }
            Some(")") => Err(Stop::Invalid(
                "syntax error: unexpected \u{2018})\u{2019}".into(),
            )),
            Some(t) => {
                let v = Val::Str(t.to_string());
                self.pos += 1;
                Ok(v)
            }
        }
    }
}

/// `s : pattern`: the first group's text when the pattern has one, else the number of
/// characters matched at the start of `s`.
fn matches(s: &str, pat: &str) -> Result<Val, Stop> {
    let (t, alt) = posix::translate(pat, Dialect::Basic).map_err(|e| match e {
        posix::Error::Syntax(m) => Stop::Pattern(m),
        posix::Error::Unsupported(m) => Stop::Unsupported(format!("expr pattern: {m}")),
    })?;
    let re = Re::build(&format!("\\A(?:{t})"), alt, false).map_err(|e| match e {
        posix::Error::Syntax(m) | posix::Error::Unsupported(m) => Stop::Pattern(m),
    })?;
    let groups = regex::Regex::new(&format!("(?:{t})"))
        .map(|r| r.captures_len() - 1)
        .unwrap_or(0);
    let caps = re.captures_at(s.as_bytes(), 0);
    if groups > 0 {
        let text = caps
            .and_then(|c| c.get(1).copied().flatten())
            .map(|(a, b)| String::from_utf8_lossy(&s.as_bytes()[a..b]).into_owned())
            .unwrap_or_default();
        return Ok(Val::Str(text));
    }
    let n = caps
        .and_then(|c| c.first().copied().flatten())
        .map_or(0, |(a, b)| {
            String::from_utf8_lossy(&s.as_bytes()[a..b]).chars().count()
        });
    Ok(Val::Int(n as i128))
}

pub(super) fn main(cx: &mut Ctx<'_, '_>) -> R<i32> {
    stacker::grow(EXPR_STACK, || main_inner(cx))
}

fn main_inner(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let mut args = cx.args().to_vec();
    if args.first().is_some_and(|a| a == "--") {
        args.remove(0);
    }
    if args.is_empty() {
        cx.err_line("expr: missing operand\nTry 'expr --help' for more information.");
        return Ok(INVALID);
    }
    cx.tick()?;
    let mut ev = Ev {
        args: &args,
        pos: 0,
        depth: 0,
    };
    let r = ev.or().and_then(|v| match ev.peek() {
        None => Ok(v),
        Some(a) => Err(Stop::Invalid(format!(
            "syntax error: unexpected argument \u{2018}{a}\u{2019}"
        ))),
    });
    match r {
        Ok(v) => {
            let mut t = v.text();
            t.push('\n');
            cx.out(t.as_bytes())?;
            Ok(i32::from(v.null()))
        }
        Err(Stop::Invalid(m)) => {
            cx.err_line(&format!("expr: {m}"));
            Ok(INVALID)
        }
        Err(Stop::Pattern(m)) => {
            cx.err_line(&format!("expr: {m}"));
            Ok(INVALID)
        }
        Err(Stop::Unsupported(m)) => cx.unsupported_status(&m, INVALID),
    }
}
