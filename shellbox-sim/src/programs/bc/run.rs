//! Running bc's items: variables with bc's dynamic scoping (a function's parameters and
//! `auto`s are pushed on each name's stack, so a called function sees its caller's), arrays,
//! functions, `scale`/`ibase`/`obase`/`last`, printing with GNU's line wrapping, and the
//! `-l` math library (`s c a l e j`, computed as GNU's `libmath.b` computes them: the same
//! series at the same scales, so the same digits).

use std::collections::HashMap;
use std::rc::Rc;

use num_bigint::BigInt;

use super::num::{Halt, Num, Res};
use super::parse::{Arg, Expr, Func, Lv, Stmt};

/// Largest array index (GNU's `BC_DIM_MAX`).
const DIM_MAX: i64 = 16_777_215;
/// Largest `scale` and `obase` (GNU's `BC_SCALE_MAX`, `BC_BASE_MAX`).
const INT_MAX: i64 = 2_147_483_647;
/// Deepest function-call nesting (GNU's is bounded by memory only).
const MAX_CALLS: usize = 10_000;

type Array = HashMap<u32, Num>;

/// What a statement did.
enum Flow {
    Next,
    Break,
    Continue,
    Return(Num),
}

/// The machine of one bc run.
pub(super) struct Bc {
    vars: HashMap<String, Vec<Num>>,
    arrays: HashMap<String, Vec<Array>>,
    pub(super) funcs: HashMap<String, Rc<Func>>,
    scale: usize,
    ibase: u32,
    obase: u64,
    last: Num,
    /// `-l`: the math library's functions are defined.
    pub(super) mathlib: bool,
    /// Output not yet written, and the column GNU's `out_char` counts.
    pub(super) out: Vec<u8>,
    col: usize,
    /// `BC_LINE_LENGTH` (0: never wrap).
    pub(super) line_len: usize,
    /// Diagnostics not yet written, each with the length of [`Bc::out`] when it came (bc
    /// flushes its output before each diagnostic, so the two streams interleave in order).
    pub(super) errs: Vec<(usize, String)>,
    /// Names of the functions being run (innermost last).
    calls: Vec<String>,
    ops: u32,
    /// Bytes one number may take.
    pub(super) mem_limit: u64,
}

impl Bc {
    pub(super) fn new() -> Bc {
        Bc {
            vars: HashMap::new(),
            arrays: HashMap::new(),
            funcs: HashMap::new(),
            scale: 0,
            ibase: 10,
            obase: 10,
            last: Num::default(),
            mathlib: false,
            out: Vec::new(),
            col: 0,
            line_len: 70,
            errs: Vec::new(),
            calls: Vec::new(),
            ops: 0,
            mem_limit: u64::MAX,
        }
    }

    /// `-l`: the library's `scale=20`.
    pub(super) fn set_mathlib(&mut self) {
        self.mathlib = true;
        self.scale = 20;
    }

    fn func_name(&self) -> String {
        self.calls
            .last()
            .cloned()
            .unwrap_or_else(|| "(main)".into())
    }

    /// A runtime error's line, GNU's words (the bytecode address is not modelled: 0).
    pub(super) fn runtime_error(&mut self, msg: &str) {
        let f = self.func_name();
        let at = self.out.len();
        self.errs
            .push((at, format!("Runtime error (func={f}, adr=0): {msg}")));
    }

    /// A diagnostic line of the reader (`(standard_in) 2: syntax error`).
    pub(super) fn note(&mut self, line: String) {
        let at = self.out.len();
        self.errs.push((at, line));
    }

    fn warn(&mut self, msg: &str) {
        let f = self.func_name();
        let at = self.out.len();
        self.errs
            .push((at, format!("Runtime warning (func={f}, adr=0): {msg}")));
    }

    /// One character through GNU's `out_char`: a `\` and newline before the
    /// `line_len - 1`th column.
    fn out_char(&mut self, c: u8) {
        if c == b'\n' {
            self.col = 0;
            self.out.push(b'\n');
            return;
        }
        self.col += 1;
        if self.line_len != 0 && self.col == self.line_len - 1 {
            self.out.extend_from_slice(b"\\\n");
            self.col = 1;
        }
        self.out.push(c);
    }

    fn out_str(&mut self, s: &str) {
        for &c in s.as_bytes() {
            self.out_char(c);
        }
    }

    fn print_num(&mut self, n: &Num) -> Res<()> {
        let s = n.render(self.obase)?;
        self.out_str(&s);
        Ok(())
    }

    fn pace(&mut self) -> Res<()> {
        self.ops = self.ops.wrapping_add(1);
        if self.ops.is_multiple_of(512) && crate::shell::stop_due() {
            return Err(Halt::Stop);
        }
        Ok(())
    }

    fn check(&self, n: Num) -> Res<Num> {
        let b = n.bytes();
        if b > self.mem_limit {
            return Err(Halt::Memory(b));
        }
        Ok(n)
    }

    /// Runs one item's statements (top level: each expression's value is printed).
    pub(super) fn run_item(&mut self, stmts: &[Stmt]) -> Res<()> {
        for s in stmts {
            match self.stmt(s)? {
                Flow::Next => {}
                // break/continue/return outside their place are refused by the parser
                _ => break,
            }
        }
        Ok(())
    }

    fn stmts(&mut self, v: &[Stmt]) -> Res<Flow> {
        for s in v {
            match self.stmt(s)? {
                Flow::Next => {}
                f => return Ok(f),
            }
        }
        Ok(Flow::Next)
    }

    fn stmt(&mut self, s: &Stmt) -> Res<Flow> {
        self.pace()?;
        match s {
            Stmt::Expr(e) => {
                if let Expr::Assign(..) = e {
                    self.eval(e)?;
                } else if let Expr::Call(name, _) = e {
                    let void = self.funcs.get(name).is_some_and(|f| f.void);
                    let v = self.eval(e)?;
                    if !void {
                        self.print_num(&v)?;
                        self.out_char(b'\n');
                        self.last = v;
                    }
                } else {
                    let v = self.eval(e)?;
                    self.print_num(&v)?;
                    self.out_char(b'\n');
                    self.last = v;
                }
            }
            Stmt::Str(s) => self.out_str(s),
            Stmt::Print(items) => {
                for it in items {
                    match it {
                        Ok(e) => {
                            let v = self.eval(e)?;
                            self.print_num(&v)?;
                            self.last = v;
                        }
                        Err(s) => {
                            let t = escapes(s);
                            self.out_str(&t);
                        }
                    }
                }
            }
            Stmt::Block(v) => return self.stmts(v),
            Stmt::If(c, t, e) => {
                if !self.eval(c)?.is_zero() {
                    return self.stmt(t);
                } else if let Some(e) = e {
                    return self.stmt(e);
                }
            }
            Stmt::While(c, body) => {
                while !self.eval(c)?.is_zero() {
                    self.pace()?;
                    match self.stmt(body)? {
                        Flow::Break => break,
                        Flow::Return(v) => return Ok(Flow::Return(v)),
                        _ => {}
                    }
                }
            }
            Stmt::For(a, c, step, body) => {
                if let Some(a) = a {
                    self.eval(a)?;
                }
                loop {
                    self.pace()?;
                    if let Some(c) = c {
                        if self.eval(c)?.is_zero() {
                            break;
                        }
                    }
                    match self.stmt(body)? {
                        Flow::Break => break,
                        Flow::Return(v) => return Ok(Flow::Return(v)),
                        _ => {}
                    }
                    if let Some(s) = step {
                        self.eval(s)?;
                    }
                }
            }
            Stmt::Break => return Ok(Flow::Break),
            Stmt::Continue => return Ok(Flow::Continue),
            Stmt::Return(e) => {
                let v = match e {
                    Some(e) => self.eval(e)?,
                    None => Num::int(0),
                };
                return Ok(Flow::Return(v));
            }
            Stmt::Halt => return Err(Halt::Exit),
            Stmt::Empty => {}
        }
        Ok(Flow::Next)
    }

    fn index(&mut self, name: &str, e: &Expr) -> Res<u32> {
        let v = self.eval(e)?;
        match v.to_i64() {
            Some(i) if (0..=DIM_MAX).contains(&i) => Ok(i as u32),
            _ => Err(Halt::Error(format!(
                "Array {name} subscript out of bounds."
            ))),
        }
    }

    fn get(&mut self, lv: &Lv) -> Res<Num> {
        Ok(match lv {
            Lv::Var(n) => self
                .vars
                .get(n)
                .and_then(|s| s.last())
                .cloned()
                .unwrap_or_default(),
            Lv::Elem(n, i) => {
                let i = self.index(n, i)?;
                self.arrays
                    .get(n)
                    .and_then(|s| s.last())
                    .and_then(|a| a.get(&i))
                    .cloned()
                    .unwrap_or_default()
            }
            Lv::Scale => Num::int(self.scale as i64),
            Lv::Ibase => Num::int(self.ibase as i64),
            Lv::Obase => Num::int(self.obase as i64),
            Lv::Last => self.last.clone(),
        })
    }

    fn set(&mut self, lv: &Lv, v: Num, index: Option<u32>) -> Res<()> {
        match lv {
            Lv::Var(n) => {
                let s = self.vars.entry(n.clone()).or_default();
                match s.last_mut() {
                    Some(top) => *top = v,
                    None => s.push(v),
                }
            }
            Lv::Elem(n, _) => {
                let i = index.unwrap_or(0);
                let s = self.arrays.entry(n.clone()).or_default();
                if s.is_empty() {
                    s.push(Array::new());
                }
                if let Some(a) = s.last_mut() {
                    a.insert(i, v);
                }
            }
            Lv::Scale => {
                let n = v.to_i64().unwrap_or(INT_MAX);
                self.scale = if n < 0 {
                    self.warn("negative scale, set to 0");
                    0
                } else if n > INT_MAX {
                    self.warn("scale too large, set to 2147483647");
                    INT_MAX as usize
                } else {
                    n as usize
                };
            }
            Lv::Ibase => {
                let n = v.to_i64().unwrap_or(i64::MAX);
                self.ibase = if n < 2 {
                    self.warn("ibase too small, set to 2");
                    2
                } else if n > 16 {
                    self.warn("ibase too large, set to 16");
                    16
                } else {
                    n as u32
                };
            }
            Lv::Obase => {
                let n = v.to_i64().unwrap_or(i64::MAX);
                self.obase = if n < 2 {
                    self.warn("obase too small, set to 2");
                    2
                } else if n > INT_MAX {
                    self.warn("obase too large, set to 2147483647");
                    INT_MAX as u64
                } else {
                    n as u64
                };
            }
            Lv::Last => self.last = v,
        }
        Ok(())
    }

    /// A literal read in the current `ibase` as GNU reads one: a single digit is its own
    /// value; in longer numbers a digit past the base counts as `ibase - 1`.
    fn literal(&self, s: &str) -> Res<Num> {
        let base = self.ibase;
        let (ip, fp) = match s.split_once('.') {
            Some((a, b)) => (a, b),
            None => (s, ""),
        };
        let val = |c: u8| -> u32 {
            if c.is_ascii_digit() {
                (c - b'0') as u32
            } else {
                (c - b'A') as u32 + 10
            }
        };
        if base == 10 && s.bytes().all(|c| c.is_ascii_digit() || c == b'.') {
            let digits: String = format!("{ip}{fp}");
            let m = if digits.is_empty() {
                BigInt::default()
            } else {
                digits.parse::<BigInt>().unwrap_or_default()
            };
            return Ok(Num { m, s: fp.len() });
        }
        if ip.len() == 1 && fp.is_empty() {
            return Ok(Num::int(val(ip.as_bytes()[0]) as i64));
        }
        let clamp = |c: u8| val(c).min(base - 1);
        let mut m = BigInt::default();
        for c in ip.bytes() {
            m = m * base + clamp(c);
        }
        let int = Num { m, s: 0 };
        if fp.is_empty() {
            return Ok(int);
        }
        let mut f = BigInt::default();
        let mut mult = BigInt::from(1);
        for c in fp.bytes() {
            f = f * base + clamp(c);
            mult *= base;
        }
        let frac = Num { m: f, s: 0 }.div(&Num { m: mult, s: 0 }, fp.len())?;
        int.add(&frac)
    }

    fn binop(&mut self, op: &str, a: &Num, b: &Num) -> Res<Num> {
        let sc = self.scale;
        let r = match op {
            "+" => a.add(b)?,
            "-" => a.sub(b)?,
            "*" => a.mul(b, sc)?,
            "/" => a.div(b, sc)?,
            "%" => a.rem(b, sc)?,
            "^" => {
                if b.s > 0 {
                    self.warn("non-zero scale in exponent");
                }
                let e = b
                    .to_i64()
                    .ok_or_else(|| Halt::Error("exponent too large in raise".into()))?;
                a.pow(e, sc, self.mem_limit)?
            }
            _ => {
                let o = a.cmp(b)?;
                use std::cmp::Ordering::*;
                let t = match op {
                    "<" => o == Less,
                    "<=" => o != Greater,
                    ">" => o == Greater,
                    ">=" => o != Less,
                    "==" => o == Equal,
                    _ => o != Equal,
                };
                Num::int(t as i64)
            }
        };
        self.check(r)
    }

    fn eval(&mut self, e: &Expr) -> Res<Num> {
        stacker::maybe_grow(64 * 1024, 1024 * 1024, || self.eval_inner(e))
    }

    fn eval_inner(&mut self, e: &Expr) -> Res<Num> {
        self.pace()?;
        match e {
            Expr::Num(s) => self.literal(s),
            Expr::Get(lv) => self.get(lv),
            Expr::Paren(e) => self.eval(e),
            Expr::Assign(lv, op, r) => {
                let idx = match lv {
                    Lv::Elem(n, i) => Some(self.index(n, i)?),
                    _ => None,
                };
                let rv = self.eval(r)?;
                let v = if op.is_empty() {
                    rv
                } else {
                    let cur = self.get_at(lv, idx)?;
                    self.binop(op, &cur, &rv)?
                };
                self.set(lv, v.clone(), idx)?;
                Ok(v)
            }
            Expr::Step(lv, pre, d) => {
                let idx = match lv {
                    Lv::Elem(n, i) => Some(self.index(n, i)?),
                    _ => None,
                };
                let cur = self.get_at(lv, idx)?;
                let new = cur.add(&Num::int(*d))?;
                self.set(lv, new.clone(), idx)?;
                Ok(if *pre { new } else { cur })
            }
            Expr::Neg(e) => Ok(self.eval(e)?.neg()),
            Expr::Not(e) => Ok(Num::int(self.eval(e)?.is_zero() as i64)),
            Expr::Bin(op, a, b) => {
                let a = self.eval(a)?;
                let b = self.eval(b)?;
                self.binop(op, &a, &b)
            }
            Expr::Chain(first, rest) => {
                let mut acc = self.eval(first)?;
                for (op, e) in rest {
                    self.pace()?;
                    acc = match *op {
                        "&&" => {
                            if acc.is_zero() {
                                Num::int(0)
                            } else {
                                Num::int(!self.eval(e)?.is_zero() as i64)
                            }
                        }
                        "||" => {
                            if !acc.is_zero() {
                                Num::int(1)
                            } else {
                                Num::int(!self.eval(e)?.is_zero() as i64)
                            }
                        }
                        _ => {
                            let b = self.eval(e)?;
                            self.binop(op, &acc, &b)?
                        }
                    };
                }
                if matches!(rest.first(), Some(("&&" | "||", _))) {
                    acc = Num::int(!acc.is_zero() as i64);
                }
                Ok(acc)
            }
            Expr::Length(e) => Ok(Num::int(self.eval(e)?.length()? as i64)),
            Expr::ScaleOf(e) => Ok(Num::int(self.eval(e)?.s as i64)),
            Expr::Sqrt(e) => {
                let v = self.eval(e)?;
                let r = v.sqrt(self.scale)?;
                self.check(r)
            }
            Expr::Call(name, args) => self.call(name, args),
        }
    }

    fn get_at(&mut self, lv: &Lv, idx: Option<u32>) -> Res<Num> {
        match (lv, idx) {
            (Lv::Elem(n, _), Some(i)) => Ok(self
                .arrays
                .get(n)
                .and_then(|s| s.last())
                .and_then(|a| a.get(&i))
                .cloned()
                .unwrap_or_default()),
            _ => self.get(lv),
        }
    }

    fn call(&mut self, name: &str, args: &[Arg]) -> Res<Num> {
        let Some(f) = self.funcs.get(name).cloned() else {
            if self.mathlib {
                if let Some(v) = self.library(name, args)? {
                    return Ok(v);
                }
            }
            return Err(Halt::Error(format!("Function {name} not defined.")));
        };
        if args.len() != f.params.len() {
            return Err(Halt::Error("Parameter number mismatch".into()));
        }
        if self.calls.len() >= MAX_CALLS {
            return Err(Halt::Error(format!(
                "function calls nested deeper than {MAX_CALLS} (shellbox-sim)"
            )));
        }
        // the arguments are evaluated in the caller's scope, then bound
        let mut vals = Vec::with_capacity(args.len());
        for (a, (_, is_arr)) in args.iter().zip(&f.params) {
            match (a, is_arr) {
                (Arg::Val(e), false) => vals.push(Ok(self.eval(e)?)),
                (Arg::Array(n), true) => vals.push(Err(self
                    .arrays
                    .get(n)
                    .and_then(|s| s.last())
                    .cloned()
                    .unwrap_or_default())),
                (Arg::Val(Expr::Get(Lv::Var(n))), true) => vals.push(Err(self
                    .arrays
                    .get(n)
                    .and_then(|s| s.last())
                    .cloned()
                    .unwrap_or_default())),
                _ => return Err(Halt::Error("Parameter type mismatch".into())),
            }
        }
        for ((p, _), v) in f.params.iter().zip(vals) {
            match v {
                Ok(n) => self.vars.entry(p.clone()).or_default().push(n),
                Err(a) => self.arrays.entry(p.clone()).or_default().push(a),
            }
        }
        for (p, arr) in &f.autos {
            if *arr {
                self.arrays.entry(p.clone()).or_default().push(Array::new());
            } else {
                self.vars.entry(p.clone()).or_default().push(Num::default());
            }
        }
        self.calls.push(name.to_string());
        let r = stacker::maybe_grow(64 * 1024, 1024 * 1024, || self.stmts(&f.body));
        self.calls.pop();
        for (p, arr) in f.params.iter().chain(&f.autos) {
            if *arr {
                if let Some(s) = self.arrays.get_mut(p) {
                    s.pop();
                }
            } else if let Some(s) = self.vars.get_mut(p) {
                s.pop();
            }
        }
        match r? {
            Flow::Return(v) => Ok(v),
            _ => Ok(Num::int(0)),
        }
    }

    /// The `-l` functions, when `name` is one.
    fn library(&mut self, name: &str, args: &[Arg]) -> Res<Option<Num>> {
        let want = if name == "j" { 2 } else { 1 };
        if !matches!(name, "s" | "c" | "a" | "l" | "e" | "j") {
            return Ok(None);
        }
        if args.len() != want {
            return Err(Halt::Error("Parameter number mismatch".into()));
        }
        let mut vals = Vec::new();
        for a in args {
            match a {
                Arg::Val(e) => vals.push(self.eval(e)?),
                Arg::Array(_) => return Err(Halt::Error("Parameter type mismatch".into())),
            }
        }
        self.calls.push(name.to_string());
        let r = match name {
            "e" => self.lib_e(vals[0].clone()),
            "l" => self.lib_l(vals[0].clone()),
            "s" => self.lib_s(vals[0].clone()),
            "c" => self.lib_c(vals[0].clone()),
            "a" => self.lib_a(vals[0].clone()),
            _ => self.lib_j(vals[0].clone(), vals[1].clone()),
        };
        self.calls.pop();
        r.map(Some)
    }

    /// `scale = v` as bc assigns it (the integer part).
    fn set_scale(&mut self, v: &Num) {
        self.scale = v.to_i64().unwrap_or(0).clamp(0, INT_MAX) as usize;
    }

    fn lit(s: &str) -> Num {
        let (ip, fp) = s.split_once('.').unwrap_or((s, ""));
        Num {
            m: format!("{ip}{fp}").parse().unwrap_or_default(),
            s: fp.len(),
        }
    }

    /// `e(x)`: halve until below 1, the Taylor series, square back.
    fn lib_e(&mut self, mut x: Num) -> Res<Num> {
        let m = x.is_neg();
        if m {
            x = x.neg();
        }
        let z = self.scale;
        let n = Num::int(6 + z as i64).add(&Self::lit(".44").mul(&x, z)?)?;
        self.scale = x.s + 1;
        let one = Num::int(1);
        let two = Num::int(2);
        let mut f = 0u64;
        while x.cmp(&one)?.is_gt() {
            self.pace()?;
            f += 1;
            x = x.div(&two, self.scale)?;
            self.scale += 1;
        }
        self.set_scale(&n);
        let mut v = one.add(&x)?;
        let mut a = x.clone();
        let mut d = Num::int(1);
        let mut i = 2i64;
        loop {
            self.pace()?;
            let sc = self.scale;
            a = self.check(a.mul(&x, sc)?)?;
            d = self.check(d.mul(&Num::int(i), sc)?)?;
            let e = a.div(&d, sc)?;
            if e.is_zero() {
                while f > 0 {
                    self.pace()?;
                    v = self.check(v.mul(&v, sc)?)?;
                    f -= 1;
                }
                self.scale = z;
                return if m { one.div(&v, z) } else { v.div(&one, z) };
            }
            v = v.add(&e)?;
            i += 1;
        }
    }

    /// `l(x)`: square roots until near 1, then the series of atanh.
    fn lib_l(&mut self, mut x: Num) -> Res<Num> {
        let one = Num::int(1);
        if !x.cmp(&Num::int(0))?.is_gt() {
            let p = Num::int(10).pow(self.scale as i64, 0, self.mem_limit)?;
            return one.sub(&p)?.div(&one, self.scale);
        }
        let z = self.scale;
        self.scale = 6 + z;
        let mut f = Num::int(2);
        let two = Num::int(2);
        let half = Self::lit(".5");
        while !x.cmp(&two)?.is_lt() {
            self.pace()?;
            f = f.mul(&two, self.scale)?;
            x = x.sqrt(self.scale)?;
        }
        while !x.cmp(&half)?.is_gt() {
            self.pace()?;
            f = f.mul(&two, self.scale)?;
            x = x.sqrt(self.scale)?;
        }
        let sc = self.scale;
        let mut n = x.sub(&one)?.div(&x.add(&one)?, sc)?;
        let mut v = n.clone();
        let m = n.mul(&n, sc)?;
        let mut i = 3i64;
        loop {
            self.pace()?;
            n = n.mul(&m, sc)?;
            let e = n.div(&Num::int(i), sc)?;
            if e.is_zero() {
                v = f.mul(&v, sc)?;
                self.scale = z;
                return v.div(&one, z);
            }
            v = v.add(&e)?;
            i += 2;
        }
    }

    /// `s(x)`: reduce by multiples of 2π, then the series.
    fn lib_s(&mut self, mut x: Num) -> Res<Num> {
        let z = self.scale;
        let t = Self::lit("1.1")
            .mul(&Num::int(z as i64), z)?
            .add(&Num::int(2))?;
        self.set_scale(&t);
        let v = self.lib_a(Num::int(1))?;
        let m = x.is_neg();
        if m {
            x = x.neg();
        }
        self.scale = 0;
        let n = x.div(&v, 0)?.add(&Num::int(2))?.div(&Num::int(4), 0)?;
        x = x.sub(&Num::int(4).mul(&n, 0)?.mul(&v, 0)?)?;
        if !n.rem(&Num::int(2), 0)?.is_zero() {
            x = x.neg();
        }
        self.scale = z + 2;
        let sc = self.scale;
        let mut v = x.clone();
        let mut e = x.clone();
        let s = x.neg().mul(&x, sc)?;
        let mut i = 3i64;
        loop {
            self.pace()?;
            let d = Num::int(i).mul(&Num::int(i - 1), sc)?;
            e = e.mul(&s.div(&d, sc)?, sc)?;
            if e.is_zero() {
                self.scale = z;
                let one = Num::int(1);
                return if m {
                    v.neg().div(&one, z)
                } else {
                    v.div(&one, z)
                };
            }
            v = v.add(&e)?;
            i += 2;
        }
    }

    /// `c(x) = s(x + π/2)`.
    fn lib_c(&mut self, x: Num) -> Res<Num> {
        let z = self.scale;
        let t = Num::int(z as i64).mul(&Self::lit("1.2"), z)?;
        self.set_scale(&t);
        let sc = self.scale;
        let h = self.lib_a(Num::int(1))?.mul(&Num::int(2), sc)?;
        let v = self.lib_s(x.add(&h)?)?;
        self.scale = z;
        v.div(&Num::int(1), z)
    }

    /// `a(x)`: known values for 1 and .2, else reduce by atan(.2) steps, then the series.
    fn lib_a(&mut self, mut x: Num) -> Res<Num> {
        const PI4: [&str; 3] = [
            ".7853981633974483096156608",
            ".7853981633974483096156608458198757210492",
            ".785398163397448309615660845819875721049292349843776455243736",
        ];
        const A2: [&str; 3] = [
            ".1973955598498807583700497",
            ".1973955598498807583700497651947902934475",
            ".197395559849880758370049765194790293447585103787852101517688",
        ];
        let mut m = Num::int(1);
        if x.is_neg() {
            m = Num::int(-1);
            x = x.neg();
        }
        let fifth = Self::lit(".2");
        for (k, table) in [(Num::int(1), PI4), (fifth.clone(), A2)] {
            if x.cmp(&k)?.is_eq() {
                let s = self.scale;
                let pick = if s <= 25 {
                    Some(0)
                } else if s <= 40 {
                    Some(1)
                } else if s <= 60 {
                    Some(2)
                } else {
                    None
                };
                if let Some(p) = pick {
                    return Self::lit(table[p]).div(&m, s);
                }
            }
        }
        let z = self.scale;
        let mut a = Num::int(0);
        if x.cmp(&fifth)?.is_gt() {
            self.scale = z + 5;
            a = self.lib_a(fifth.clone())?;
        }
        self.scale = z + 3;
        let sc = self.scale;
        let one = Num::int(1);
        let mut f = 0i64;
        while x.cmp(&fifth)?.is_gt() {
            self.pace()?;
            f += 1;
            x = x.sub(&fifth)?.div(&one.add(&x.mul(&fifth, sc)?)?, sc)?;
        }
        let mut v = x.clone();
        let mut n = x.clone();
        let s = x.neg().mul(&x, sc)?;
        let mut i = 3i64;
        loop {
            self.pace()?;
            n = n.mul(&s, sc)?;
            let e = n.div(&Num::int(i), sc)?;
            if e.is_zero() {
                self.scale = z;
                return Num::int(f).mul(&a, z)?.add(&v)?.div(&m, z);
            }
            v = v.add(&e)?;
            i += 2;
        }
    }

    /// `j(n, x)`: Bessel function of integer order `n`, by its series.
    fn lib_j(&mut self, n: Num, x: Num) -> Res<Num> {
        let z = self.scale;
        self.scale = 0;
        let mut n = n.div(&Num::int(1), 0)?;
        let mut m = false;
        if n.is_neg() {
            n = n.neg();
            if n.rem(&Num::int(2), 0)?.cmp(&Num::int(1))?.is_eq() {
                m = true;
            }
        }
        let nn = n
            .to_i64()
            .ok_or_else(|| Halt::Error("exponent too large in raise".into()))?;
        let mut f = Num::int(1);
        let mut i = 2i64;
        while i <= nn {
            self.pace()?;
            f = self.check(f.mul(&Num::int(i), 0)?)?;
            i += 1;
        }
        let t = Self::lit("1.5").mul(&Num::int(z as i64), 0)?;
        self.set_scale(&t);
        let sc = self.scale;
        let xn = x.pow(nn, sc, self.mem_limit)?;
        let tn = Num::int(2).pow(nn, sc, self.mem_limit)?;
        f = xn.div(&tn, sc)?.div(&f, sc)?;
        let mut v = Num::int(1);
        let mut e = Num::int(1);
        let s = x.neg().mul(&x, sc)?.div(&Num::int(4), sc)?;
        let t = Self::lit("1.5")
            .mul(&Num::int(z as i64), sc)?
            .add(&Num::int(f.length()? as i64))?
            .sub(&Num::int(f.s as i64))?;
        self.set_scale(&t);
        let sc = self.scale;
        let mut i = 1i64;
        loop {
            self.pace()?;
            e = e
                .mul(&s, sc)?
                .div(&Num::int(i), sc)?
                .div(&n.add(&Num::int(i))?, sc)?;
            if e.is_zero() {
                self.scale = z;
                let one = Num::int(1);
                return if m {
                    f.neg().mul(&v, z)?.div(&one, z)
                } else {
                    f.mul(&v, z)?.div(&one, z)
                };
            }
            v = v.add(&e)?;
            i += 1;
        }
    }
}

/// A `print` string's escapes (GNU: `\a \b \f \n \q \r \t \\`; any other pair prints
/// nothing).
fn escapes(s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('a') => out.push('\x07'),
            Some('b') => out.push('\x08'),
            Some('f') => out.push('\x0c'),
            Some('n') => out.push('\n'),
            Some('q') => out.push('"'),
            Some('r') => out.push('\r'),
            Some('t') => out.push('\t'),
            Some('\\') => out.push('\\'),
            // GNU drops a backslash and the character after it that it does not know
            Some(_) => {}
            None => out.push('\\'),
        }
    }
    out
}
