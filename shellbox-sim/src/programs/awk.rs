//! `awk` as Debian 12's default, mawk 1.3.4, runs it: the common POSIX language. Patterns,
//! `BEGIN`/`END`, ranges, `FS` (a single space, one character, or an ERE) / `OFS` / `ORS` /
//! `NR` / `NF` / `FNR` / `FILENAME` / `SUBSEP` / `RSTART` / `RLENGTH` / `CONVFMT` / `OFMT`,
//! `-F`, `-v`, `-f`, `print` and `printf` (to standard output), fields and `$n`
//! assignment, associative arrays with `in` and `delete`, user functions, `if`/`while`/
//! `do`/`for`/`for (k in a)`/`next`/`exit`/`break`/`continue`/`return`, and the built-ins
//! `length substr index split sub gsub match sprintf tolower toupper int sqrt exp log sin
//! cos atan2 rand srand`. Not done, failing visibly (status 2, recorded as unsupported):
//! `getline`, output redirection and pipes, `system`, `close`, `fflush`, `RS` other than
//! a newline.

use std::collections::HashMap;

use super::posix::{Dialect, Re};
use super::Ctx;
use crate::shell::R;

/// mawk's status for a bad program or usage.
const USAGE: i32 = 2;

/// How many fields a split or a join of a record (or a `split` into an array) makes
/// between two looks at the clock: a 7 MB record has a million.
const FIELDS_PER_CHECK: usize = 4096;

/// Statements run between two ticks.
const STEPS_PER_TICK: u64 = 1024;

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(f64),
    Str(String),
    Ere(String),
    Name(String),
    /// A name directly followed by `(`.
    Func(String),
    Kw(&'static str),
    Op(&'static str),
    Nl,
    Eof,
}

const KEYWORDS: &[&str] = &[
    "BEGIN", "END", "function", "func", "if", "else", "while", "for", "do", "break", "continue",
    "next", "nextfile", "exit", "return", "delete", "in", "getline", "print", "printf",
];

const OPS: &[&str] = &[
    "&&", "||", "==", "<=", ">=", "!=", "++", "--", "+=", "-=", "*=", "/=", "%=", "^=", ">>", "{",
    "}", "(", ")", "[", "]", ";", ",", "+", "-", "*", "/", "%", "^", "!", ">", "<", "|", "?", ":",
    "~", "$", "=",
];

/// What [`lex`] and the parser fail with when the command must stop
/// ([`crate::shell::stop_due`]): a program text of megabytes is read in one go.
const STOPPED: &str = "\u{0}stopped";

fn lex(src: &str) -> Result<Vec<Tok>, String> {
    let c: Vec<char> = src.chars().collect();
    let mut pace = crate::shell::Pacer::default();
    let mut i = 0;
    let mut out: Vec<Tok> = Vec::new();
    let operand_before = |out: &Vec<Tok>| {
        matches!(
            out.last(),
            Some(Tok::Num(_) | Tok::Str(_) | Tok::Name(_) | Tok::Ere(_))
                | Some(Tok::Op(")" | "]" | "$" | "++" | "--"))
        )
    };
    while i < c.len() {
        // a token or a blank: a few dozen nanoseconds each
        if pace.due(16) {
            return Err(STOPPED.into());
        }
        let ch = c[i];
        if ch == ' ' || ch == '\t' || ch == '\r' {
            i += 1;
        } else if ch == '\\' && c.get(i + 1) == Some(&'\n') {
            i += 2;
        } else if ch == '\n' {
            out.push(Tok::Nl);
            i += 1;
        } else if ch == '#' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch.is_ascii_digit()
            || (ch == '.' && c.get(i + 1).is_some_and(|d| d.is_ascii_digit()))
        {
            let st = i;
            while i < c.len() && (c[i].is_ascii_digit() || c[i] == '.') {
                i += 1;
            }
            if i < c.len() && (c[i] == 'e' || c[i] == 'E') {
                let save = i;
                i += 1;
                if i < c.len() && (c[i] == '+' || c[i] == '-') {
                    i += 1;
                }
                if i < c.len() && c[i].is_ascii_digit() {
                    while i < c.len() && c[i].is_ascii_digit() {
                        i += 1;
                    }
                } else {
                    i = save;
                }
            }
            let t: String = c[st..i].iter().collect();
            out.push(Tok::Num(t.parse().map_err(|_| format!("bad number {t}"))?));
        } else if ch.is_ascii_alphabetic() || ch == '_' {
            let st = i;
            while i < c.len() && (c[i].is_ascii_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let w: String = c[st..i].iter().collect();
            if let Some(k) = KEYWORDS.iter().find(|k| **k == w) {
                out.push(Tok::Kw(k));
            } else if c.get(i) == Some(&'(') {
                out.push(Tok::Func(w));
            } else {
                out.push(Tok::Name(w));
            }
        } else if ch == '"' {
            i += 1;
            let mut s = String::new();
            loop {
                let Some(&d) = c.get(i) else {
                    return Err("runaway string constant".into());
                };
                i += 1;
                match d {
                    '"' => break,
                    '\n' => return Err("runaway string constant".into()),
                    '\\' => {
                        let e = c.get(i).copied().unwrap_or('\\');
                        i += 1;
                        match e {
                            'n' => s.push('\n'),
                            't' => s.push('\t'),
                            'r' => s.push('\r'),
                            '\\' => s.push('\\'),
                            '"' => s.push('"'),
                            '/' => s.push('/'),
                            'a' => s.push('\x07'),
                            'b' => s.push('\x08'),
                            'f' => s.push('\x0c'),
                            'v' => s.push('\x0b'),
                            '\n' => {}
                            o => {
                                s.push('\\');
                                s.push(o);
                            }
                        }
                    }
                    d => s.push(d),
                }
            }
            out.push(Tok::Str(s));
        } else if ch == '/' && !operand_before(&out) {
            i += 1;
            let mut s = String::new();
            let mut in_bracket = false;
            loop {
                let Some(&d) = c.get(i) else {
                    return Err("runaway regular expression".into());
                };
                i += 1;
                match d {
                    '\n' => return Err("runaway regular expression".into()),
                    '\\' => {
                        let e = c.get(i).copied().unwrap_or('\\');
                        i += 1;
                        if e == '/' {
                            s.push('/');
                        } else {
                            s.push('\\');
                            s.push(e);
                        }
                    }
                    '[' => {
                        in_bracket = true;
                        s.push(d);
                    }
                    ']' => {
                        in_bracket = false;
                        s.push(d);
                    }
                    '/' if !in_bracket => break,
                    d => s.push(d),
                }
            }
            out.push(Tok::Ere(s));
        } else {
            let rest: String = c[i..c.len().min(i + 2)].iter().collect();
            let op = OPS
                .iter()
                .find(|o| rest.starts_with(**o))
                .ok_or_else(|| format!("syntax error at or near {ch}"))?;
            out.push(Tok::Op(op));
            i += op.chars().count();
        }
    }
    out.push(Tok::Eof);
    Ok(out)
}

#[derive(Debug, Clone)]
enum Ex {
    Num(f64),
    Str(String),
    Re(usize),
    Var(String),
    Field(Box<Ex>),
    Index(String, Vec<Ex>),
    Assign(&'static str, Box<Ex>, Box<Ex>),
    Cond(Box<Ex>, Box<Ex>, Box<Ex>),
    And(Box<Ex>, Box<Ex>),
    Or(Box<Ex>, Box<Ex>),
    In(Vec<Ex>, String),
    Match(bool, Box<Ex>, Box<Ex>),
    Bin(&'static str, Box<Ex>, Box<Ex>),
    Cmp(&'static str, Box<Ex>, Box<Ex>),
    Concat(Box<Ex>, Box<Ex>),
    Neg(Box<Ex>),
    Plus(Box<Ex>),
    Not(Box<Ex>),
    /// (increment, prefix, lvalue)
    Incr(f64, bool, Box<Ex>),
    Call(String, Vec<Ex>),
    User(String, Vec<Ex>),
}

#[derive(Debug, Clone)]
enum St {
    Print(Vec<Ex>),
    Printf(Vec<Ex>),
    Ex(Ex),
    If(Ex, Box<St>, Option<Box<St>>),
    While(Ex, Box<St>),
    Do(Box<St>, Ex),
    For(Option<Ex>, Option<Ex>, Option<Ex>, Box<St>),
    ForIn(String, String, Box<St>),
    Block(Vec<St>),
    Next,
    Exit(Option<Ex>),
    Return(Option<Ex>),
    Break,
    Continue,
    Delete(String, Option<Vec<Ex>>),
}

enum Item {
    Begin(Vec<St>),
    End(Vec<St>),
    Pat(Option<Ex>, Option<Vec<St>>),
    Range(Ex, Ex, Option<Vec<St>>),
}

struct Func {
    params: Vec<String>,
    body: Vec<St>,
}

struct Parser {
    t: Vec<Tok>,
    i: usize,
    /// Paces the parse (see [`STOPPED`]): counted per token, looked at per item and
    /// statement.
    pace: crate::shell::Pacer,
    stopped: bool,
    res: Vec<String>,
    /// Inside `print`'s arguments: `>` ends them (a redirection, refused).
    no_gt: bool,
    /// Inside a `for (...)` header's first part: `in` belongs to the loop.
    no_in: bool,
    /// Nesting of [`Parser::expr`] now, and the token the outermost one started at.
    nest: usize,
    expr_from: usize,
}

/// Most tokens one expression (with everything nested in it) may have: the parser, the
/// evaluator and the tree's drop recurse over it, so `1+1+…` or `!!!…` of any length
/// would overflow the stack; a longer one is a syntax error (mawk's parser stack refuses
/// 5,000 `!` too).
const MAX_EXPR_TOKENS: usize = 10_000;

/// The stack an awk run gets (mapped lazily): an expression of [`MAX_EXPR_TOKENS`] tokens
/// recurses that deep.
const AWK_STACK: usize = 256 << 20;

type PR<T> = Result<T, String>;

impl Parser {
    fn peek(&self) -> &Tok {
        &self.t[self.i]
    }
    fn next(&mut self) -> Tok {
        if self.pace.due(64) {
            self.stopped = true;
        }
        let t = self.t[self.i].clone();
        if self.i + 1 < self.t.len() {
            self.i += 1;
        }
        t
    }
    fn is_op(&self, o: &str) -> bool {
        matches!(self.peek(), Tok::Op(x) if *x == o)
    }
    fn is_kw(&self, k: &str) -> bool {
        matches!(self.peek(), Tok::Kw(x) if *x == k)
    }
    fn expect(&mut self, o: &str) -> PR<()> {
        if self.is_op(o) {
            self.next();
            Ok(())
        } else {
            Err(format!("syntax error at or near {}", show(self.peek())))
        }
    }
    fn nls(&mut self) {
        while matches!(self.peek(), Tok::Nl) {
            self.next();
        }
    }
    fn terms(&mut self) {
        while matches!(self.peek(), Tok::Nl) || self.is_op(";") {
            self.next();
        }
    }

    fn program(&mut self, funcs: &mut HashMap<String, Func>) -> PR<Vec<Item>> {
        let mut items = Vec::new();
        loop {
            if self.stopped {
                return Err(STOPPED.into());
            }
            self.terms();
            match self.peek().clone() {
                Tok::Eof => break,
                Tok::Kw("BEGIN") => {
                    self.next();
                    self.nls();
                    items.push(Item::Begin(self.block()?));
                }
                Tok::Kw("END") => {
                    self.next();
                    self.nls();
                    items.push(Item::End(self.block()?));
                }
                Tok::Kw("function" | "func") => {
                    self.next();
                    let name = match self.next() {
                        Tok::Func(n) | Tok::Name(n) => n,
                        t => return Err(format!("syntax error at or near {}", show(&t))),
                    };
                    self.expect("(")?;
                    let mut params = Vec::new();
                    while !self.is_op(")") {
                        match self.next() {
                            Tok::Name(n) => params.push(n),
                            t => return Err(format!("syntax error at or near {}", show(&t))),
                        }
                        if self.is_op(",") {
                            self.next();
                            self.nls();
                        }
                    }
                    self.next();
                    self.nls();
                    let body = self.block()?;
                    funcs.insert(name, Func { params, body });
                }
                _ => {
                    let pat = if self.is_op("{") {
                        None
                    } else {
                        Some(self.expr()?)
                    };
                    if self.is_op(",") {
                        self.next();
                        self.nls();
                        let b = self.expr()?;
                        let body = if self.is_op("{") {
                            Some(self.block()?)
                        } else {
                            None
                        };
                        items.push(Item::Range(pat.unwrap_or(Ex::Num(1.0)), b, body));
                        continue;
                    }
                    let body = if self.is_op("{") {
                        Some(self.block()?)
                    } else {
                        None
                    };
                    items.push(Item::Pat(pat, body));
                }
            }
        }
        Ok(items)
    }

    fn block(&mut self) -> PR<Vec<St>> {
        self.expect("{")?;
        let mut v = Vec::new();
        loop {
            if self.stopped {
                return Err(STOPPED.into());
            }
            self.terms();
            if self.is_op("}") {
                self.next();
                return Ok(v);
            }
            if matches!(self.peek(), Tok::Eof) {
                return Err("syntax error at end of program".into());
            }
            v.push(self.stmt()?);
        }
    }

    fn simple_end(&mut self) -> PR<()> {
        if self.is_op(";") || matches!(self.peek(), Tok::Nl) {
            self.next();
            Ok(())
        } else if self.is_op("}") || matches!(self.peek(), Tok::Eof) {
            Ok(())
        } else {
            Err(format!("syntax error at or near {}", show(self.peek())))
        }
    }

    fn body(&mut self) -> PR<St> {
        self.nls();
        if self.is_op(";") {
            self.next();
            return Ok(St::Block(Vec::new()));
        }
        self.stmt()
    }

    fn stmt(&mut self) -> PR<St> {
        if self.is_op("{") {
            return Ok(St::Block(self.block()?));
        }
        let t = self.peek().clone();
        let st = match t {
            Tok::Kw("if") => {
                self.next();
                self.expect("(")?;
                let c = self.expr()?;
                self.expect(")")?;
                let then = self.body()?;
                // `else` may follow newlines or a `;`
                let save = self.i;
                self.terms();
                if self.is_kw("else") {
                    self.next();
                    let e = self.body()?;
                    return Ok(St::If(c, Box::new(then), Some(Box::new(e))));
                }
                self.i = save;
                return Ok(St::If(c, Box::new(then), None));
            }
            Tok::Kw("while") => {
                self.next();
                self.expect("(")?;
                let c = self.expr()?;
                self.expect(")")?;
                if self.is_op(";") {
                    self.next();
                    return Ok(St::While(c, Box::new(St::Block(Vec::new()))));
                }
                return Ok(St::While(c, Box::new(self.body()?)));
            }
            Tok::Kw("do") => {
                self.next();
                let b = self.body()?;
                self.terms();
                if !self.is_kw("while") {
                    return Err(format!("syntax error at or near {}", show(self.peek())));
                }
                self.next();
                self.expect("(")?;
                let c = self.expr()?;
                self.expect(")")?;
                St::Do(Box::new(b), c)
            }
            Tok::Kw("for") => {
                self.next();
                self.expect("(")?;
                if let (Tok::Name(k), Tok::Kw("in"), Tok::Name(a), Tok::Op(")")) = (
                    self.t[self.i].clone(),
                    self.t.get(self.i + 1).cloned().unwrap_or(Tok::Eof),
                    self.t.get(self.i + 2).cloned().unwrap_or(Tok::Eof),
                    self.t.get(self.i + 3).cloned().unwrap_or(Tok::Eof),
                ) {
                    self.i += 4;
                    return Ok(St::ForIn(k, a, Box::new(self.body()?)));
                }
                let init = if self.is_op(";") {
                    None
                } else {
                    Some(self.simple_expr_stmt()?)
                };
                self.expect(";")?;
                self.nls();
                let cond = if self.is_op(";") {
                    None
                } else {
                    Some(self.expr()?)
                };
                self.expect(";")?;
                self.nls();
                let step = if self.is_op(")") {
                    None
                } else {
                    Some(self.simple_expr_stmt()?)
                };
                self.expect(")")?;
                if self.is_op(";") {
                    self.next();
                    return Ok(St::For(init, cond, step, Box::new(St::Block(Vec::new()))));
                }
                return Ok(St::For(init, cond, step, Box::new(self.body()?)));
            }
            Tok::Kw("next") => {
                self.next();
                St::Next
            }
            Tok::Kw("nextfile") => return Err("unsupported: nextfile".into()),
            Tok::Kw("break") => {
                self.next();
                St::Break
            }
            Tok::Kw("continue") => {
                self.next();
                St::Continue
            }
            Tok::Kw("exit") | Tok::Kw("return") => {
                self.next();
                let e = if self.is_op(";")
                    || self.is_op("}")
                    || matches!(self.peek(), Tok::Nl | Tok::Eof)
                {
                    None
                } else {
                    Some(self.expr()?)
                };
                if t == Tok::Kw("exit") {
                    St::Exit(e)
                } else {
                    St::Return(e)
                }
            }
            Tok::Kw("delete") => {
                self.next();
                let Tok::Name(n) = self.next() else {
                    return Err("syntax error after delete".into());
                };
                if self.is_op("[") {
                    self.next();
                    let idx = self.expr_list("]")?;
                    St::Delete(n, Some(idx))
                } else {
                    St::Delete(n, None)
                }
            }
            Tok::Kw("print") | Tok::Kw("printf") => {
                self.next();
                let mut args = Vec::new();
                self.no_gt = true;
                let paren = self.is_op("(");
                if !(self.is_op(";")
                    || self.is_op("}")
                    || matches!(self.peek(), Tok::Nl | Tok::Eof))
                {
                    let save = self.i;
                    let parsed = if paren {
                        self.next();
                        let l = self.expr_list(")");
                        // `print (a)(b)` or `print (a) x`: an expression after all
                        match l {
                            Ok(l)
                                if self.is_op(";")
                                    || self.is_op("}")
                                    || self.is_op(">")
                                    || self.is_op("|")
                                    || matches!(self.peek(), Tok::Nl | Tok::Eof) =>
                            {
                                Some(l)
                            }
                            _ => None,
                        }
                    } else {
                        None
                    };
                    args = match parsed {
                        Some(l) => l,
                        None => {
                            self.i = save;
                            let mut v = vec![self.expr()?];
                            while self.is_op(",") {
                                self.next();
                                self.nls();
                                v.push(self.expr()?);
                            }
                            v
                        }
                    };
                }
                self.no_gt = false;
                if self.is_op(">") || self.is_op(">>") || self.is_op("|") {
                    return Err("unsupported: output redirection".into());
                }
                if t == Tok::Kw("print") {
                    St::Print(args)
                } else {
                    if args.is_empty() {
                        return Err("syntax error at or near printf".into());
                    }
                    St::Printf(args)
                }
            }
            _ => St::Ex(self.expr()?),
        };
        self.simple_end()?;
        Ok(st)
    }

    fn simple_expr_stmt(&mut self) -> PR<Ex> {
        self.expr()
    }

    fn expr_list(&mut self, close: &str) -> PR<Vec<Ex>> {
        let mut v = Vec::new();
        self.nls();
        while !self.is_op(close) {
            let gt = self.no_gt;
            self.no_gt = false;
            v.push(self.expr()?);
            self.no_gt = gt;
            self.nls();
            if self.is_op(",") {
                self.next();
                self.nls();
            } else if !self.is_op(close) {
                return Err(format!("syntax error at or near {}", show(self.peek())));
            }
        }
        self.next();
        Ok(v)
    }

    fn expr(&mut self) -> PR<Ex> {
        if self.nest == 0 {
            self.expr_from = self.i;
        }
        self.nest += 1;
        let r = self.ternary();
        self.nest -= 1;
        r
    }

    /// Refuses an expression past [`MAX_EXPR_TOKENS`] (looked at by every operand).
    fn bound(&self) -> PR<()> {
        if self.nest > 0 && self.i - self.expr_from > MAX_EXPR_TOKENS {
            return Err(format!(
                "syntax error: an expression of more than {MAX_EXPR_TOKENS} tokens \
                 (shellbox-sim's bound)"
            ));
        }
        Ok(())
    }

    fn ternary(&mut self) -> PR<Ex> {
        let c = self.or()?;
        if self.is_op("?") {
            self.next();
            self.nls();
            let a = self.ternary()?;
            self.nls();
            self.expect(":")?;
            self.nls();
            let b = self.ternary()?;
            return Ok(Ex::Cond(Box::new(c), Box::new(a), Box::new(b)));
        }
        // assignment (right associative); the left side must be an lvalue
        for op in ["=", "+=", "-=", "*=", "/=", "%=", "^="] {
            if self.is_op(op) && matches!(c, Ex::Var(_) | Ex::Field(_) | Ex::Index(..)) {
                self.next();
                self.nls();
                let r = self.ternary()?;
                let op: &'static str = OPS.iter().find(|o| **o == op).copied().unwrap_or("=");
                return Ok(Ex::Assign(op, Box::new(c), Box::new(r)));
            }
        }
        Ok(c)
    }

    fn or(&mut self) -> PR<Ex> {
        let mut l = self.and()?;
        while self.is_op("||") {
            self.next();
            self.nls();
            let r = self.and()?;
            l = Ex::Or(Box::new(l), Box::new(r));
        }
        Ok(l)
    }
    fn and(&mut self) -> PR<Ex> {
        let mut l = self.in_()?;
        while self.is_op("&&") {
            self.next();
            self.nls();
            let r = self.in_()?;
            l = Ex::And(Box::new(l), Box::new(r));
        }
        Ok(l)
    }
    fn in_(&mut self) -> PR<Ex> {
        let mut l = self.matching()?;
        while self.is_kw("in") && !self.no_in {
            self.next();
            let Tok::Name(a) = self.next() else {
                return Err("syntax error after in".into());
            };
            l = Ex::In(vec![l], a);
        }
        Ok(l)
    }
    fn matching(&mut self) -> PR<Ex> {
        let mut l = self.comparison()?;
        loop {
            let neg = if self.is_op("~") {
                false
            } else if self.is_op("!") && matches!(self.t.get(self.i + 1), Some(Tok::Op("~"))) {
                self.next();
                true
            } else {
                break;
            };
            self.next();
            let r = self.comparison()?;
            l = Ex::Match(neg, Box::new(l), Box::new(r));
        }
        Ok(l)
    }
    fn comparison(&mut self) -> PR<Ex> {
        let l = self.concat()?;
        for op in ["<", "<=", "!=", "==", ">", ">="] {
            if self.is_op(op) && !(self.no_gt && op == ">") {
                self.next();
                let r = self.concat()?;
                let op: &'static str = OPS.iter().find(|o| **o == op).copied().unwrap_or("==");
                return Ok(Ex::Cmp(op, Box::new(l), Box::new(r)));
            }
        }
        Ok(l)
    }
    fn starts_operand(&self) -> bool {
        match self.peek() {
            Tok::Num(_) | Tok::Str(_) | Tok::Ere(_) | Tok::Name(_) | Tok::Func(_) => true,
            Tok::Op(o) => matches!(*o, "$" | "!" | "(" | "-" | "+" | "++" | "--"),
            Tok::Kw(k) => *k == "getline",
            _ => false,
        }
    }
    fn concat(&mut self) -> PR<Ex> {
        let mut l = self.additive()?;
        while self.starts_operand() && !self.is_kw("in") {
            // `a !~ b` is matching, not `a` then `!~b`
            if self.is_op("!") {
                break;
            }
            let r = self.additive()?;
            l = Ex::Concat(Box::new(l), Box::new(r));
        }
        Ok(l)
    }
    fn additive(&mut self) -> PR<Ex> {
        let mut l = self.mul()?;
        loop {
            let op = if self.is_op("+") {
                "+"
            } else if self.is_op("-") {
                "-"
            } else {
                break;
            };
            self.next();
            let r = self.mul()?;
            l = Ex::Bin(op, Box::new(l), Box::new(r));
        }
        Ok(l)
    }
    fn mul(&mut self) -> PR<Ex> {
        let mut l = self.unary()?;
        loop {
            let op = if self.is_op("*") {
                "*"
            } else if self.is_op("/") {
                "/"
            } else if self.is_op("%") {
                "%"
            } else {
                break;
            };
            self.next();
            let r = self.unary()?;
            l = Ex::Bin(op, Box::new(l), Box::new(r));
        }
        Ok(l)
    }
    fn unary(&mut self) -> PR<Ex> {
        self.bound()?;
        if self.is_op("!") {
            self.next();
            return Ok(Ex::Not(Box::new(self.unary()?)));
        }
        if self.is_op("-") {
            self.next();
            return Ok(Ex::Neg(Box::new(self.unary()?)));
        }
        if self.is_op("+") {
            self.next();
            return Ok(Ex::Plus(Box::new(self.unary()?)));
        }
        self.power()
    }
    fn power(&mut self) -> PR<Ex> {
        let base = self.postfix()?;
        if self.is_op("^") {
            self.next();
            // right associative, and binds tighter than unary minus on its left only
            let e = self.unary_pow()?;
            return Ok(Ex::Bin("^", Box::new(base), Box::new(e)));
        }
        Ok(base)
    }
    fn unary_pow(&mut self) -> PR<Ex> {
        if self.is_op("-") {
            self.next();
            return Ok(Ex::Neg(Box::new(self.unary_pow()?)));
        }
        if self.is_op("+") {
            self.next();
            return self.unary_pow();
        }
        self.power()
    }
    fn postfix(&mut self) -> PR<Ex> {
        if self.is_op("++") || self.is_op("--") {
            let d = if self.is_op("++") { 1.0 } else { -1.0 };
            self.next();
            let lv = self.postfix()?;
            return Ok(Ex::Incr(d, true, Box::new(lv)));
        }
        let e = self.primary()?;
        if matches!(e, Ex::Var(_) | Ex::Field(_) | Ex::Index(..))
            && (self.is_op("++") || self.is_op("--"))
        {
            let d = if self.is_op("++") { 1.0 } else { -1.0 };
            self.next();
            return Ok(Ex::Incr(d, false, Box::new(e)));
        }
        Ok(e)
    }
    fn primary(&mut self) -> PR<Ex> {
        match self.next() {
            Tok::Num(n) => Ok(Ex::Num(n)),
            Tok::Str(s) => Ok(Ex::Str(s)),
            Tok::Ere(r) => {
                self.res.push(r);
                Ok(Ex::Re(self.res.len() - 1))
            }
            Tok::Op("$") => {
                let e = if self.is_op("++") || self.is_op("--") {
                    self.postfix()?
                } else if self.is_op("-") {
                    self.next();
                    Ex::Neg(Box::new(self.primary()?))
                } else {
                    self.primary()?
                };
                Ok(Ex::Field(Box::new(e)))
            }
            Tok::Op("(") => {
                let gt = self.no_gt;
                let inn = self.no_in;
                self.no_gt = false;
                self.no_in = false;
                let e = self.expr()?;
                if self.is_op(",") {
                    // (a, b) in arr
                    let mut v = vec![e];
                    while self.is_op(",") {
                        self.next();
                        v.push(self.expr()?);
                    }
                    self.expect(")")?;
                    self.no_gt = gt;
                    self.no_in = inn;
                    if !self.is_kw("in") {
                        return Err("syntax error: a list outside (...) in".into());
                    }
                    self.next();
                    let Tok::Name(a) = self.next() else {
                        return Err("syntax error after in".into());
                    };
                    return Ok(Ex::In(v, a));
                }
                self.expect(")")?;
                self.no_gt = gt;
                self.no_in = inn;
                Ok(e)
            }
            Tok::Op("-") => {
                self.bound()?;
                Ok(Ex::Neg(Box::new(self.primary()?)))
            }
            Tok::Op("!") => {
                self.bound()?;
                Ok(Ex::Not(Box::new(self.primary()?)))
            }
            Tok::Name(n) => {
                if self.is_op("[") {
                    self.next();
                    let idx = self.expr_list("]")?;
                    return Ok(Ex::Index(n, idx));
                }
                if n == "length" {
                    return Ok(Ex::Call(n, Vec::new()));
                }
                Ok(Ex::Var(n))
            }
            Tok::Func(n) => {
                self.expect("(")?;
                let args = self.expr_list(")")?;
                const BUILTINS: &[&str] = &[
                    "length", "substr", "index", "split", "sub", "gsub", "match", "sprintf",
                    "tolower", "toupper", "int", "sqrt", "exp", "log", "sin", "cos", "atan2",
                    "rand", "srand",
                ];
                if BUILTINS.contains(&n.as_str()) {
                    Ok(Ex::Call(n, args))
                } else if ["system", "close", "fflush"].contains(&n.as_str()) {
                    Err(format!("unsupported: {n}()"))
                } else {
                    Ok(Ex::User(n, args))
                }
            }
            Tok::Kw("getline") => Err("unsupported: getline".into()),
            t => Err(format!("syntax error at or near {}", show(&t))),
        }
    }
}

fn show(t: &Tok) -> String {
    match t {
        Tok::Num(n) => n.to_string(),
        Tok::Str(s) => format!("\"{s}\""),
        Tok::Ere(s) => format!("/{s}/"),
        Tok::Name(n) | Tok::Func(n) => n.clone(),
        Tok::Kw(k) => (*k).to_string(),
        Tok::Op(o) => (*o).to_string(),
        Tok::Nl => "end of line".into(),
        Tok::Eof => "end of file".into(),
    }
}

// ---------- values ----------

#[derive(Debug, Clone)]
enum V {
    Num(f64),
    Str(String),
    /// Input text (fields, `-v`, `split` pieces): a number when it looks like one.
    StrNum(String),
}

fn looks_numeric(s: &str) -> Option<f64> {
    let t = s.trim_matches(|c| c == ' ' || c == '\t' || c == '\n');
    if t.is_empty() {
        return None;
    }
    let b = t.as_bytes();
    let mut i = 0;
    if b[0] == b'+' || b[0] == b'-' {
        i = 1;
    }
    let digits_start = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    let mut any = i > digits_start;
    if i < b.len() && b[i] == b'.' {
        i += 1;
        let f = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        any |= i > f;
    }
    if !any {
        return None;
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        let mut j = i + 1;
        if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
            j += 1;
        }
        let e = j;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        if j > e {
            i = j;
        }
    }
    if i != b.len() {
        return None;
    }
    t.parse().ok()
}

/// The leading number of `s`, as awk converts a string (`"3x"` is 3).
fn str_to_num(s: &str) -> f64 {
    let t = s.trim_start_matches([' ', '\t', '\n']);
    let b = t.as_bytes();
    let mut i = 0;
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        i += 1;
    }
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    if i < b.len() && b[i] == b'.' {
        i += 1;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        let mut j = i + 1;
        if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
            j += 1;
        }
        if j < b.len() && b[j].is_ascii_digit() {
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            i = j;
        }
    }
    t[..i].parse().unwrap_or(0.0)
}

/// A number as text: integers of C's `int` range as `%d` (mawk's rule), others through
/// `fmt` (`CONVFMT`/`OFMT`).
fn num_to_str(n: f64, fmt: &str) -> String {
    if n == n.trunc() && n > -2_147_483_648.0 && n < 2_147_483_648.0 {
        return format!("{}", n as i64);
    }
    if n.is_nan() {
        return if n.is_sign_negative() { "-nan" } else { "nan" }.into();
    }
    if n.is_infinite() {
        return if n < 0.0 { "-inf" } else { "inf" }.into();
    }
    let out = crate::utils::printf_format(
        &fmt.replace('\\', "\\\\"),
        &[format!("{n}")],
        &mut Vec::new(),
    );
    String::from_utf8_lossy(&out).into_owned()
}

// ---------- the interpreter ----------

enum Flow {
    Next,
    Exit(i32),
    Return(V),
    Break,
    Continue,
    /// A run-time error (mawk's words) or an unsupported feature.
    Fail(String),
    /// The budget or the deadline: passed up as it is.
    Ctl(crate::shell::Ctl),
}

impl From<crate::shell::Ctl> for Flow {
    fn from(c: crate::shell::Ctl) -> Self {
        Flow::Ctl(c)
    }
}

type FR<T> = Result<T, Flow>;

struct Awk<'p> {
    vars: HashMap<String, V>,
    arrays: HashMap<String, HashMap<String, V>>,
    funcs: &'p HashMap<String, Func>,
    res: Vec<Re>,
    /// The sources of `res`.
    res_text: Vec<String>,
    dyn_res: HashMap<String, Re>,
    record: String,
    /// The fields of `record`: a record of megabytes has a million, freed a piece at a
    /// time ([`crate::mem::PacedVec`]) when the next record replaces them.
    fields: crate::mem::PacedVec<String>,
    /// Whether `fields` are current (else split `record` on use).
    split: bool,
    /// Whether `record` must be rebuilt from `fields`.
    dirty: bool,
    out: Vec<u8>,
    /// How much of `out` has been charged to the memory budget.
    out_charged: usize,
    /// Local frames of user functions: (scalars, arrays by name → global name or local).
    frames: Vec<HashMap<String, Local>>,
    steps: u64,
    /// Paces long string copies (see [`Awk::copied`]).
    copies: crate::shell::Pacer,
    rand_seed: f64,
    rng: u64,
    depth: u32,
    /// Bytes the machine's memory budget had left when the program started.
    mem_left: u64,
}

#[derive(Clone)]
enum Local {
    Val(V),
    /// An array: a local one (named uniquely) or the caller's.
    Arr(String),
}

/// The deepest user-function recursion (so a runaway recursion cannot exhaust the stack).
const MAX_CALL_DEPTH: u32 = 1000;

impl<'p> Awk<'p> {
    fn var_str(&self, name: &str) -> String {
        match self.vars.get(name) {
            Some(v) => self.to_s(v),
            None => String::new(),
        }
    }
    fn to_s(&self, v: &V) -> String {
        match v {
            V::Num(n) => num_to_str(*n, &self.conv()),
            V::Str(s) | V::StrNum(s) => s.clone(),
        }
    }
    fn out_s(&self, v: &V) -> String {
        match v {
            V::Num(n) => {
                let f = self
                    .vars
                    .get("OFMT")
                    .map(|v| self.to_s(v))
                    .unwrap_or_else(|| "%.6g".into());
                num_to_str(*n, &f)
            }
            V::Str(s) | V::StrNum(s) => s.clone(),
        }
    }
    fn conv(&self) -> String {
        match self.vars.get("CONVFMT") {
            Some(V::Str(s) | V::StrNum(s)) => s.clone(),
            _ => "%.6g".into(),
        }
    }
    fn to_n(v: &V) -> f64 {
        match v {
            V::Num(n) => *n,
            V::Str(s) | V::StrNum(s) => str_to_num(s),
        }
    }
    fn truth(v: &V) -> bool {
        match v {
            V::Num(n) => *n != 0.0,
            V::Str(s) => !s.is_empty(),
            V::StrNum(s) => match looks_numeric(s) {
                Some(n) => n != 0.0,
                None => !s.is_empty(),
            },
        }
    }

    /// Splits `record` into `fields` unless they are current. `Err` (the deadline) when the
    /// command must stop part-way: a record of megabytes has a million fields.
    fn ensure_split(&mut self) -> FR<()> {
        if self.split {
            return Ok(());
        }
        let fs = self.var_str("FS");
        let record = std::mem::take(&mut self.record);
        let fields = self.split_with(&record, &fs);
        self.record = record;
        // a long split stops early at the deadline: its fields are not the record's
        if crate::shell::stop_due() {
            crate::mem::bury(fields);
            return Err(Flow::Fail("\u{0}deadline".into()));
        }
        self.fields = crate::mem::PacedVec::new(fields);
        self.split = true;
        Ok(())
    }
    /// The pieces of `s` split at `fs` (awk's field separator rules). A split of millions of
    /// pieces looks at the clock every [`FIELDS_PER_CHECK`] and stops early (a short
    /// answer) when the command must stop: its caller looks at [`crate::shell::stop_due`].
    fn split_with(&mut self, s: &str, fs: &str) -> Vec<String> {
        /// Collects `pieces`, stopping early when the command must stop.
        fn paced<'s>(pieces: impl Iterator<Item = &'s str>) -> Vec<String> {
            let mut out = Vec::new();
            for (n, f) in pieces.enumerate() {
                if n % FIELDS_PER_CHECK == FIELDS_PER_CHECK - 1 && crate::shell::stop_due() {
                    break;
                }
                out.push(f.to_string());
            }
            out
        }
        if fs == " " {
            return paced(s.split([' ', '\t', '\n']).filter(|f| !f.is_empty()));
        }
        if s.is_empty() {
            return Vec::new();
        }
        if fs.chars().count() == 1 && fs != "\\" && (fs == "\t" || !"^$.[]|()*+?{}".contains(fs)) {
            return paced(s.split(fs));
        }
        match self.regex(fs) {
            Ok(re) => {
                let b = s.as_bytes();
                let mut out = Vec::new();
                let mut pos = 0;
                let mut start = 0;
                let mut n = 0usize;
                while pos <= b.len() {
                    // a regex that matches empty everywhere (`split(s, p, "")`) steps one
                    // byte a time: on a record of megabytes that ran 220 ms past a deadline;
                    // its caller ends the program (`split` looks at the clock after it)
                    n += 1;
                    if n.is_multiple_of(4096) && crate::shell::stop_due() {
                        break;
                    }
                    match re.find_at(b, pos) {
                        Some((a, e)) if e > a => {
                            out.push(String::from_utf8_lossy(&b[start..a]).into_owned());
                            start = e;
                            pos = e;
                        }
                        Some((a, _)) => pos = a + 1,
                        None => break,
                    }
                }
                out.push(String::from_utf8_lossy(&b[start..]).into_owned());
                out
            }
            Err(_) => vec![s.to_string()],
        }
    }
    fn regex(&mut self, pat: &str) -> Result<Re, String> {
        if let Some(r) = self.dyn_res.get(pat) {
            return Ok(r.clone());
        }
        let r = Re::new(pat, Dialect::Extended, false).map_err(|e| match e {
            super::posix::Error::Syntax(m) | super::posix::Error::Unsupported(m) => {
                format!("regular expression compile failed ({m})\n{pat}")
            }
        })?;
        if self.dyn_res.len() > 256 {
            self.dyn_res.clear();
        }
        self.dyn_res.insert(pat.to_string(), r.clone());
        Ok(r)
    }
    /// Joins `fields` into `record` when a field was assigned. `Err` (the deadline) when
    /// the command must stop part-way: a million fields are joined
    /// [`FIELDS_PER_CHECK`] at a time, looking at the clock between.
    fn rebuild(&mut self) -> FR<()> {
        if self.dirty {
            let ofs = self.var_str("OFS");
            let mut record = String::new();
            for (n, f) in self.fields.iter().enumerate() {
                if n > 0 {
                    if n % FIELDS_PER_CHECK == 0 && crate::shell::stop_due() {
                        return Err(Flow::Fail("\u{0}deadline".into()));
                    }
                    record.push_str(&ofs);
                }
                record.push_str(f);
            }
            self.record = record;
            self.dirty = false;
        }
        Ok(())
    }
    fn get_field(&mut self, i: usize) -> FR<V> {
        if i == 0 {
            self.rebuild()?;
            self.copied(self.record.len())?;
            return Ok(V::StrNum(self.record.clone()));
        }
        self.ensure_split()?;
        Ok(V::StrNum(
            self.fields.get(i - 1).cloned().unwrap_or_default(),
        ))
    }
    fn set_field(&mut self, i: usize, s: String) -> FR<()> {
        if i == 0 {
            self.record = s;
            self.split = false;
            self.dirty = false;
            return Ok(());
        }
        if i > 100_000 {
            return Err(Flow::Fail(
                "program limit exceeded: maximum number of fields size=32767".to_string(),
            ));
        }
        self.ensure_split()?;
        if self.fields.len() < i {
            self.fields.resize(i, String::new());
        }
        self.fields[i - 1] = s;
        self.dirty = true;
        Ok(())
    }
    fn nf(&mut self) -> FR<usize> {
        self.ensure_split()?;
        Ok(self.fields.len())
    }

    fn local(&self, name: &str) -> Option<&Local> {
        self.frames.last().and_then(|f| f.get(name))
    }
    /// The global name of array `name` in this scope.
    fn array_name(&self, name: &str) -> String {
        match self.local(name) {
            Some(Local::Arr(g)) => g.clone(),
            _ => name.to_string(),
        }
    }
    fn get_var(&mut self, name: &str) -> FR<V> {
        if let Some(Local::Val(v)) = self.local(name) {
            return Ok(v.clone());
        }
        if name == "NF" {
            return Ok(V::Num(self.nf()? as f64));
        }
        let v = self
            .vars
            .get(name)
            .cloned()
            .unwrap_or(V::StrNum(String::new()));
        if let V::Str(s) | V::StrNum(s) = &v {
            self.copied(s.len())?;
        }
        Ok(v)
    }

    /// Counts `bytes` of string copied (a concatenation, a variable's value): the clock is
    /// looked at once per [`crate::shell::CHUNK_BYTES`] of them, so statements that each
    /// copy megabytes end at the deadline. `Err` (the deadline) when the command must stop.
    fn copied(&mut self, bytes: usize) -> FR<()> {
        if self.copies.due(bytes) {
            return Err(Flow::Fail("\u{0}deadline".into()));
        }
        Ok(())
    }
    fn set_var(&mut self, name: &str, v: V) -> FR<()> {
        if let Some(f) = self.frames.last_mut() {
            if let Some(Local::Val(slot)) = f.get_mut(name) {
                *slot = v;
                return Ok(());
            }
        }
        if name == "NF" {
            let n = Self::to_n(&v).max(0.0) as usize;
            self.ensure_split()?;
            self.fields.resize(n, String::new());
            self.dirty = true;
            return Ok(());
        }
        self.vars.insert(name.to_string(), v);
        Ok(())
    }
    fn subscript(&mut self, idx: &[Ex]) -> FR<String> {
        let mut parts = Vec::new();
        for e in idx {
            let v = self.eval(e)?;
            parts.push(match v {
                V::Num(n) => num_to_str(n, &self.conv()),
                V::Str(s) | V::StrNum(s) => s,
            });
        }
        let sep = self.var_str("SUBSEP");
        Ok(parts.join(&sep))
    }

    fn assign(&mut self, lv: &Ex, v: V) -> FR<V> {
        match lv {
            Ex::Var(n) => self.set_var(n, v.clone())?,
            Ex::Field(e) => {
                let i = Self::to_n(&self.eval(e)?);
                if i < 0.0 {
                    return Err(Flow::Fail(format!("negative field index ${}", i as i64)));
                }
                let s = self.to_s(&v);
                self.set_field(i as usize, s)?;
            }
            Ex::Index(n, idx) => {
                let k = self.subscript(idx)?;
                let a = self.array_name(n);
                self.arrays.entry(a).or_default().insert(k, v.clone());
            }
            _ => return Err(Flow::Fail("assignment to a non-variable".into())),
        }
        Ok(v)
    }

    fn compare(&self, op: &str, a: &V, b: &V) -> bool {
        let num = |v: &V| match v {
            V::Num(n) => Some(*n),
            V::StrNum(s) => looks_numeric(s),
            V::Str(_) => None,
        };
        let ord = match (num(a), num(b)) {
            (Some(x), Some(y)) => x.partial_cmp(&y).unwrap_or(std::cmp::Ordering::Equal),
            _ => self.to_s(a).cmp(&self.to_s(b)),
        };
        use std::cmp::Ordering::*;
        match op {
            "<" => ord == Less,
            "<=" => ord != Greater,
            "==" => ord == Equal,
            "!=" => ord != Equal,
            ">" => ord == Greater,
            _ => ord != Less,
        }
    }

    fn re_of(&mut self, e: &Ex) -> FR<Re> {
        match e {
            Ex::Re(i) => Ok(self.res[*i].clone()),
            other => {
                let v = self.eval(other)?;
                let s = self.to_s(&v);
                self.regex(&s).map_err(Flow::Fail)
            }
        }
    }

    fn eval(&mut self, e: &Ex) -> FR<V> {
        Ok(match e {
            Ex::Num(n) => V::Num(*n),
            Ex::Str(s) => V::Str(s.clone()),
            Ex::Re(i) => {
                self.rebuild()?;
                let r = self.res[*i].clone();
                V::Num(if r.is_match(self.record.as_bytes()) {
                    1.0
                } else {
                    0.0
                })
            }
            Ex::Var(n) => self.get_var(n)?,
            Ex::Field(i) => {
                let n = Self::to_n(&self.eval(i)?);
                if n < 0.0 {
                    return Err(Flow::Fail(format!("negative field index ${}", n as i64)));
                }
                self.get_field(n as usize)?
            }
            Ex::Index(n, idx) => {
                let k = self.subscript(idx)?;
                let a = self.array_name(n);
                self.arrays
                    .entry(a)
                    .or_default()
                    .entry(k)
                    .or_insert(V::StrNum(String::new()))
                    .clone()
            }
            Ex::Assign(op, lv, r) => {
                let rv = self.eval(r)?;
                let v = if *op == "=" {
                    rv
                } else {
                    let cur = Self::to_n(&self.eval(lv)?);
                    let x = Self::to_n(&rv);
                    V::Num(arith(&op[..1], cur, x)?)
                };
                self.assign(lv, v)?
            }
            Ex::Cond(c, a, b) => {
                let t = Self::truth(&self.eval(c)?);
                self.eval(if t { a } else { b })?
            }
            Ex::And(a, b) => {
                let t = Self::truth(&self.eval(a)?) && Self::truth(&self.eval(b)?);
                V::Num(f64::from(u8::from(t)))
            }
            Ex::Or(a, b) => {
                let t = Self::truth(&self.eval(a)?) || Self::truth(&self.eval(b)?);
                V::Num(f64::from(u8::from(t)))
            }
            Ex::In(idx, a) => {
                let k = self.subscript(idx)?;
                let a = self.array_name(a);
                let t = self.arrays.get(&a).is_some_and(|m| m.contains_key(&k));
                V::Num(f64::from(u8::from(t)))
            }
            Ex::Match(neg, s, r) => {
                let v = self.eval(s)?;
                let s = self.to_s(&v);
                let re = self.re_of(r)?;
                V::Num(f64::from(u8::from(re.is_match(s.as_bytes()) != *neg)))
            }
            Ex::Bin(op, a, b) => {
                let x = Self::to_n(&self.eval(a)?);
                let y = Self::to_n(&self.eval(b)?);
                V::Num(arith(op, x, y)?)
            }
            Ex::Cmp(op, a, b) => {
                let x = self.eval(a)?;
                let y = self.eval(b)?;
                V::Num(f64::from(u8::from(self.compare(op, &x, &y))))
            }
            Ex::Concat(a, b) => {
                let x = self.eval(a)?;
                let mut s = self.to_s(&x);
                let y = self.eval(b)?;
                let t = self.to_s(&y);
                // a doubling `s = s s` meets the memory budget, not the host's memory
                if (s.len() + t.len()) as u64 > self.mem_left / 4 {
                    return Err(Flow::Fail("\u{0}memory".into()));
                }
                // `x = x $0` over megabytes copies x a few times per record: the clock is
                // looked at per megabyte copied, not per statement
                self.copied(s.len() + t.len())?;
                s.push_str(&t);
                V::Str(s)
            }
            Ex::Neg(a) => V::Num(-Self::to_n(&self.eval(a)?)),
            Ex::Plus(a) => V::Num(Self::to_n(&self.eval(a)?)),
            Ex::Not(a) => V::Num(f64::from(u8::from(!Self::truth(&self.eval(a)?)))),
            Ex::Incr(d, pre, lv) => {
                let cur = Self::to_n(&self.eval(lv)?);
                self.assign(lv, V::Num(cur + d))?;
                V::Num(if *pre { cur + d } else { cur })
            }
            Ex::Call(n, args) => self.builtin(n, args)?,
            Ex::User(n, args) => self.call(n, args)?,
        })
    }

    fn builtin(&mut self, name: &str, args: &[Ex]) -> FR<V> {
        let arg_s = |me: &mut Self, i: usize| -> FR<String> {
            match args.get(i) {
                Some(e) => {
                    let v = me.eval(e)?;
                    Ok(me.to_s(&v))
                }
                None => Ok(String::new()),
            }
        };
        let arg_n = |me: &mut Self, i: usize| -> FR<f64> {
            match args.get(i) {
                Some(e) => Ok(Self::to_n(&me.eval(e)?)),
                None => Ok(0.0),
            }
        };
        Ok(match name {
            "length" => match args.first() {
                None => {
                    self.rebuild()?;
                    V::Num(self.record.chars().count() as f64)
                }
                Some(Ex::Var(a)) if self.arrays.contains_key(&self.array_name(a)) => {
                    V::Num(self.arrays[&self.array_name(a)].len() as f64)
                }
                Some(_) => V::Num(arg_s(self, 0)?.chars().count() as f64),
            },
            "substr" => {
                let s: Vec<char> = arg_s(self, 0)?.chars().collect();
                let len = s.len() as f64;
                // mawk 1.3.4 truncates the start; a start below 1 lengthens what is left
                // by its distance from 0 (`substr("hello", -1, 3)` is `hell`)
                let mut start = arg_n(self, 1)?.trunc();
                let mut n = if args.len() > 2 {
                    arg_n(self, 2)?.trunc()
                } else {
                    f64::INFINITY
                };
                if start < 1.0 {
                    n -= start;
                    start = 1.0;
                }
                let from = start;
                let to = (start + n).min(len + 1.0);
                if to <= from {
                    V::Str(String::new())
                } else {
                    V::Str(s[(from as usize - 1)..(to as usize - 1)].iter().collect())
                }
            }
            "index" => {
                let s = arg_s(self, 0)?;
                let t = arg_s(self, 1)?;
                V::Num(match s.find(&t) {
                    Some(b) => (s[..b].chars().count() + 1) as f64,
                    None => 0.0,
                })
            }
            "split" => {
                let s = arg_s(self, 0)?;
                let Some(Ex::Var(a)) = args.get(1) else {
                    return Err(Flow::Fail(
                        "split: the second argument is not an array".into(),
                    ));
                };
                let parts = match args.get(2) {
                    None => {
                        let fs = self.var_str("FS");
                        self.split_with(&s, &fs)
                    }
                    Some(Ex::Re(i)) => {
                        let p = self.res_src(*i);
                        self.split_with(&s, &p)
                    }
                    Some(e) => {
                        let v = self.eval(e)?;
                        let fs = self.to_s(&v);
                        self.split_with(&s, &fs)
                    }
                };
                // a long split stops early at the deadline: its parts are not the answer
                if crate::shell::stop_due() {
                    crate::mem::bury(parts);
                    return Err(Flow::Fail("\u{0}deadline".into()));
                }
                let an = self.array_name(a);
                let m = self.arrays.entry(an).or_default();
                // a million elements: the old ones freed and the new ones stored a piece
                // at a time, looking at the clock between pieces
                crate::mem::drop_paced(std::mem::take(m));
                let n = parts.len();
                let mut parts = parts.into_iter().enumerate();
                while let Some((i, p)) = parts.next() {
                    if i % FIELDS_PER_CHECK == FIELDS_PER_CHECK - 1 && crate::shell::stop_due() {
                        crate::mem::bury(parts);
                        return Err(Flow::Fail("\u{0}deadline".into()));
                    }
                    m.insert((i + 1).to_string(), V::StrNum(p));
                }
                V::Num(n as f64)
            }
            "sub" | "gsub" => {
                let re = match args.first() {
                    Some(e) => self.re_of(e)?,
                    None => return Err(Flow::Fail(format!("{name}: no pattern"))),
                };
                let repl = arg_s(self, 1)?;
                let target = args
                    .get(2)
                    .cloned()
                    .unwrap_or(Ex::Field(Box::new(Ex::Num(0.0))));
                let v = self.eval(&target)?;
                let s = self.to_s(&v);
                let Some((new, n)) = substitute(&re, &repl, &s, name == "gsub") else {
                    return Err(Flow::Fail("\u{0}deadline".into()));
                };
                if n > 0 {
                    self.assign(&target, V::Str(new))?;
                }
                V::Num(n as f64)
            }
            "match" => {
                let s = arg_s(self, 0)?;
                let re = match args.get(1) {
                    Some(e) => self.re_of(e)?,
                    None => return Err(Flow::Fail("match: no pattern".into())),
                };
                let (start, len) = match re.find_at(s.as_bytes(), 0) {
                    Some((a, e)) => (
                        (s[..a].chars().count() + 1) as f64,
                        s[a..e].chars().count() as f64,
                    ),
                    None => (0.0, -1.0),
                };
                self.vars.insert("RSTART".into(), V::Num(start));
                self.vars.insert("RLENGTH".into(), V::Num(len));
                V::Num(start)
            }
            "sprintf" => {
                let mut vals = Vec::new();
                for e in args {
                    vals.push(self.eval(e)?);
                }
                if vals.is_empty() {
                    return Err(Flow::Fail("sprintf: no format".into()));
                }
                let f = self.to_s(&vals[0]);
                V::Str(self.format(&f, &vals[1..])?)
            }
            // mawk changes ASCII letters only
            "tolower" => V::Str(arg_s(self, 0)?.to_ascii_lowercase()),
            "toupper" => V::Str(arg_s(self, 0)?.to_ascii_uppercase()),
            "int" => V::Num(arg_n(self, 0)?.trunc()),
            "sqrt" => V::Num(arg_n(self, 0)?.sqrt()),
            "exp" => V::Num(arg_n(self, 0)?.exp()),
            "log" => V::Num(arg_n(self, 0)?.ln()),
            "sin" => V::Num(arg_n(self, 0)?.sin()),
            "cos" => V::Num(arg_n(self, 0)?.cos()),
            "atan2" => {
                let y = arg_n(self, 0)?;
                let x = arg_n(self, 1)?;
                V::Num(y.atan2(x))
            }
            "rand" => {
                // deterministic, as the simulator is (not mawk's sequence)
                self.rng ^= self.rng << 13;
                self.rng ^= self.rng >> 7;
                self.rng ^= self.rng << 17;
                V::Num((self.rng >> 11) as f64 / (1u64 << 53) as f64)
            }
            "srand" => {
                let old = self.rand_seed;
                self.rand_seed = if args.is_empty() {
                    0.0
                } else {
                    arg_n(self, 0)?
                };
                self.rng = (self.rand_seed.to_bits() | 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                V::Num(old)
            }
            _ => return Err(Flow::Fail(format!("function {name} never defined"))),
        })
    }

    fn res_src(&self, i: usize) -> String {
        self.res_text.get(i).cloned().unwrap_or_default()
    }

    /// awk's printf over the shell's formatter: each argument converted as its directive
    /// asks (a number for `d i o x X u c e E f g G`, text for `s`).
    fn format(&mut self, f: &str, vals: &[V]) -> FR<String> {
        let b: Vec<char> = f.chars().collect();
        let mut i = 0;
        let mut out = String::new();
        let mut k = 0;
        while i < b.len() {
            if b[i] != '%' {
                out.push(b[i]);
                i += 1;
                continue;
            }
            if b.get(i + 1) == Some(&'%') {
                out.push('%');
                i += 2;
                continue;
            }
            let st = i;
            i += 1;
            let mut spec = String::from("%");
            while i < b.len() && "-+ #0".contains(b[i]) {
                spec.push(b[i]);
                i += 1;
            }
            for _ in 0..2 {
                if b.get(i) == Some(&'*') {
                    let n = vals.get(k).map(Self::to_n).unwrap_or(0.0) as i64;
                    k += 1;
                    spec.push_str(&n.to_string());
                    i += 1;
                } else {
                    while i < b.len() && b[i].is_ascii_digit() {
                        spec.push(b[i]);
                        i += 1;
                    }
                }
                if b.get(i) == Some(&'.') {
                    spec.push('.');
                    i += 1;
                } else {
                    break;
                }
            }
            while i < b.len() && "hlLqjzt".contains(b[i]) {
                i += 1;
            }
            let Some(&conv) = b.get(i) else {
                out.extend(&b[st..]);
                break;
            };
            i += 1;
            let v = vals.get(k).cloned().unwrap_or(V::Str(String::new()));
            k += 1;
            let arg = match conv {
                // mawk converts to C's int range (`2^40` prints 2147483647)
                'd' | 'i' | 'o' | 'x' | 'X' | 'u' => {
                    let n = Self::to_n(&v);
                    let n = if n.is_nan() { 0.0 } else { n.trunc() };
                    format!("{}", n.clamp(-2_147_483_647.0, 2_147_483_647.0) as i64)
                }
                'c' => match &v {
                    V::Num(n) => char::from_u32(*n as u32)
                        .map(String::from)
                        .unwrap_or_default(),
                    _ => self
                        .to_s(&v)
                        .chars()
                        .next()
                        .map(String::from)
                        .unwrap_or_default(),
                },
                'e' | 'E' | 'f' | 'F' | 'g' | 'G' | 'a' | 'A' => format!("{:?}", Self::to_n(&v)),
                's' => self.to_s(&v),
                _ => {
                    out.extend(&b[st..i]);
                    k -= 1;
                    continue;
                }
            };
            let c = if conv == 'i' {
                'd'
            } else if conv == 'c' {
                's'
            } else {
                conv
            };
            spec.push(c);
            let fmtd =
                crate::utils::printf_format(&spec.replace('\\', "\\\\"), &[arg], &mut Vec::new());
            out.push_str(&String::from_utf8_lossy(&fmtd));
        }
        Ok(out)
    }

    fn call(&mut self, name: &str, args: &[Ex]) -> FR<V> {
        let funcs = self.funcs;
        let Some(f) = funcs.get(name) else {
            return Err(Flow::Fail(format!("function {name} never defined")));
        };
        if args.len() > f.params.len() {
            return Err(Flow::Fail(format!("too many arguments in call to {name}")));
        }
        if self.depth >= MAX_CALL_DEPTH {
            return Err(Flow::Fail(format!(
                "function call nesting too deep ({MAX_CALL_DEPTH})"
            )));
        }
        let mut frame = HashMap::new();
        for (i, p) in f.params.iter().enumerate() {
            let slot = match args.get(i) {
                // an array passes by reference
                Some(Ex::Var(a)) if self.arrays.contains_key(&self.array_name(a)) => {
                    Local::Arr(self.array_name(a))
                }
                Some(Ex::Var(a))
                    if !self.vars.contains_key(a)
                        && !matches!(self.local(a), Some(Local::Val(_)))
                        && f.body_uses_as_array(p) =>
                {
                    let g = self.array_name(a);
                    self.arrays.entry(g.clone()).or_default();
                    Local::Arr(g)
                }
                Some(e) => Local::Val(self.eval(e)?),
                None => {
                    if f.body_uses_as_array(p) {
                        let g = format!("\u{0}{}:{p}", self.depth);
                        self.arrays.insert(g.clone(), HashMap::new());
                        Local::Arr(g)
                    } else {
                        Local::Val(V::StrNum(String::new()))
                    }
                }
            };
            frame.insert(p.clone(), slot);
        }
        self.frames.push(frame);
        self.depth += 1;
        // deep recursion grows the stack on the heap, not past the thread's stack
        let r = stacker::maybe_grow(256 * 1024, 2 * 1024 * 1024, || self.block(&f.body));
        self.depth -= 1;
        if let Some(fr) = self.frames.pop() {
            for (_, l) in fr {
                if let Local::Arr(g) = l {
                    if g.starts_with('\u{0}') {
                        self.arrays.remove(&g);
                    }
                }
            }
        }
        match r {
            Ok(()) => Ok(V::StrNum(String::new())),
            Err(Flow::Return(v)) => Ok(v),
            Err(e) => Err(e),
        }
    }

    fn block(&mut self, b: &[St]) -> FR<()> {
        for s in b {
            self.stmt(s)?;
        }
        Ok(())
    }

    fn stmt(&mut self, s: &St) -> FR<()> {
        self.check()?;
        match s {
            St::Print(args) => {
                let line = if args.is_empty() {
                    self.rebuild()?;
                    self.record.clone()
                } else {
                    let ofs = self.var_str("OFS");
                    let mut parts = Vec::new();
                    for a in args {
                        let v = self.eval(a)?;
                        parts.push(self.out_s(&v));
                    }
                    parts.join(&ofs)
                };
                self.out.extend_from_slice(line.as_bytes());
                let ors = self.var_str("ORS");
                self.out.extend_from_slice(ors.as_bytes());
            }
            St::Printf(args) => {
                let mut vals = Vec::new();
                for a in args {
                    vals.push(self.eval(a)?);
                }
                let f = self.to_s(&vals[0]);
                let s = self.format(&f, &vals[1..])?;
                self.out.extend_from_slice(s.as_bytes());
            }
            St::Ex(e) => {
                self.eval(e)?;
            }
            St::If(c, a, b) => {
                if Self::truth(&self.eval(c)?) {
                    self.stmt(a)?;
                } else if let Some(b) = b {
                    self.stmt(b)?;
                }
            }
            St::While(c, b) => {
                while Self::truth(&self.eval(c)?) {
                    match self.stmt(b) {
                        Err(Flow::Break) => break,
                        Err(Flow::Continue) | Ok(()) => {}
                        Err(e) => return Err(e),
                    }
                    self.check()?;
                }
            }
            St::Do(b, c) => loop {
                match self.stmt(b) {
                    Err(Flow::Break) => break,
                    Err(Flow::Continue) | Ok(()) => {}
                    Err(e) => return Err(e),
                }
                self.check()?;
                if !Self::truth(&self.eval(c)?) {
                    break;
                }
            },
            St::For(init, cond, step, b) => {
                if let Some(i) = init {
                    self.eval(i)?;
                }
                loop {
                    if let Some(c) = cond {
                        if !Self::truth(&self.eval(c)?) {
                            break;
                        }
                    }
                    match self.stmt(b) {
                        Err(Flow::Break) => break,
                        Err(Flow::Continue) | Ok(()) => {}
                        Err(e) => return Err(e),
                    }
                    self.check()?;
                    if let Some(s) = step {
                        self.eval(s)?;
                    }
                }
            }
            St::ForIn(k, a, b) => {
                let an = self.array_name(a);
                let keys: Vec<String> = self
                    .arrays
                    .get(&an)
                    .map(|m| {
                        let mut v: Vec<String> = m.keys().cloned().collect();
                        // mawk's order is its hash order; the simulator's is sorted
                        v.sort_by(|x, y| match (looks_numeric(x), looks_numeric(y)) {
                            (Some(p), Some(q)) => {
                                p.partial_cmp(&q).unwrap_or(std::cmp::Ordering::Equal)
                            }
                            _ => x.cmp(y),
                        });
                        v
                    })
                    .unwrap_or_default();
                for key in keys {
                    self.set_var(k, V::StrNum(key))?;
                    match self.stmt(b) {
                        Err(Flow::Break) => break,
                        Err(Flow::Continue) | Ok(()) => {}
                        Err(e) => return Err(e),
                    }
                    self.check()?;
                }
            }
            St::Block(b) => self.block(b)?,
            St::Next => return Err(Flow::Next),
            St::Exit(e) => {
                let code = match e {
                    Some(e) => Self::to_n(&self.eval(e)?) as i32,
                    None => 0,
                };
                return Err(Flow::Exit(code));
            }
            St::Return(e) => {
                let v = match e {
                    Some(e) => self.eval(e)?,
                    None => V::StrNum(String::new()),
                };
                return Err(Flow::Return(v));
            }
            St::Break => return Err(Flow::Break),
            St::Continue => return Err(Flow::Continue),
            St::Delete(a, idx) => {
                let an = self.array_name(a);
                match idx {
                    None => {
                        self.arrays.remove(&an);
                    }
                    Some(i) => {
                        let k = self.subscript(i)?;
                        if let Some(m) = self.arrays.get_mut(&an) {
                            m.remove(&k);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Between loop iterations: the clock, and the output and arrays against the budget.
    fn check(&mut self) -> FR<()> {
        self.steps += 1;
        if self.steps.is_multiple_of(STEPS_PER_TICK) {
            if crate::shell::stop_due() {
                return Err(Flow::Fail("\u{0}deadline".into()));
            }
            let elements: usize = self.arrays.values().map(HashMap::len).sum();
            let bytes = (self.out.len() as u64).saturating_add(elements as u64 * ELEMENT_BYTES);
            if self.out.len() > MAX_BUFFER || elements > MAX_ELEMENTS || bytes > self.mem_left {
                return Err(Flow::Fail("\u{0}memory".into()));
            }
        }
        Ok(())
    }
}

/// Most output one awk run buffers (the machine's budget bounds it first, normally).
const MAX_BUFFER: usize = 256 << 20;
/// Most array elements one awk run holds.
const MAX_ELEMENTS: usize = 4_000_000;
/// What one array element is counted as against the memory budget (key, value, table).
const ELEMENT_BYTES: u64 = 96;

impl Drop for Awk<'_> {
    /// Frees the arrays a piece at a time ([`crate::mem::drop_paced`]): `split` of a
    /// 7 MB record makes a million elements, tens of milliseconds to free in one step.
    fn drop(&mut self) {
        for (_, a) in self.arrays.drain() {
            crate::mem::drop_paced(a);
        }
    }
}

fn arith(op: &str, x: f64, y: f64) -> FR<f64> {
    Ok(match op {
        "+" => x + y,
        "-" => x - y,
        "*" => x * y,
        // mawk divides as IEEE 754 does: `1/0` is inf, `5%0` is -nan
        "/" => x / y,
        "%" => {
            if y == 0.0 {
                -f64::NAN
            } else {
                x % y
            }
        }
        _ => x.powf(y),
    })
}

/// `sub`/`gsub`: `&` is the match, `\&` a literal `&`.
/// `s` with the first (or every) match of `re` replaced; `None` when the command must stop
/// (a long string holds millions of matches: the clock is looked at every 4096).
fn substitute(re: &Re, repl: &str, s: &str, global: bool) -> Option<(String, usize)> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut pos = 0;
    let mut n = 0usize;
    let rb: Vec<char> = repl.chars().collect();
    while pos <= b.len() {
        let Some((a, e)) = re.find_at(b, pos) else {
            break;
        };
        out.extend_from_slice(&b[pos..a]);
        let mut i = 0;
        while i < rb.len() {
            match rb[i] {
                '\\' if rb.get(i + 1) == Some(&'&') => {
                    out.push(b'&');
                    i += 2;
                }
                '\\' if rb.get(i + 1) == Some(&'\\') => {
                    out.push(b'\\');
                    i += 2;
                }
                '&' => {
                    out.extend_from_slice(&b[a..e]);
                    i += 1;
                }
                c => {
                    out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                    i += 1;
                }
            }
        }
        n += 1;
        if n.is_multiple_of(4096) && crate::shell::stop_due() {
            return None;
        }
        if e == a {
            if a < b.len() {
                let w = match b[a] {
                    0xc0..=0xdf => 2,
                    0xe0..=0xef => 3,
                    0xf0..=0xf7 => 4,
                    _ => 1,
                }
                .min(b.len() - a);
                out.extend_from_slice(&b[a..a + w]);
                pos = a + w;
            } else {
                pos = a + 1;
            }
        } else {
            pos = e;
        }
        if !global {
            break;
        }
    }
    if pos < b.len() {
        out.extend_from_slice(&b[pos..]);
    }
    Some((String::from_utf8_lossy(&out).into_owned(), n))
}

impl Func {
    /// Whether the body uses `p` as an array (subscript, `in`, `for in`, `delete`, `split`).
    fn body_uses_as_array(&self, p: &str) -> bool {
        self.body.iter().any(|s| st_uses(s, p))
    }
}

fn st_uses(s: &St, p: &str) -> bool {
    let e = |x: &Ex| ex_uses(x, p);
    match s {
        St::Print(v) | St::Printf(v) => v.iter().any(e),
        St::Ex(x) => e(x),
        St::If(c, a, b) => e(c) || st_uses(a, p) || b.as_ref().is_some_and(|b| st_uses(b, p)),
        St::While(c, b) | St::Do(b, c) => e(c) || st_uses(b, p),
        St::For(a, b, c, d) => {
            a.as_ref().is_some_and(e)
                || b.as_ref().is_some_and(e)
                || c.as_ref().is_some_and(e)
                || st_uses(d, p)
        }
        St::ForIn(_, a, b) => a == p || st_uses(b, p),
        St::Block(b) => b.iter().any(|s| st_uses(s, p)),
        St::Exit(x) | St::Return(x) => x.as_ref().is_some_and(e),
        St::Delete(a, _) => a == p,
        St::Next | St::Break | St::Continue => false,
    }
}

fn ex_uses(x: &Ex, p: &str) -> bool {
    let e = |y: &Ex| ex_uses(y, p);
    match x {
        Ex::Index(a, idx) => a == p || idx.iter().any(e),
        Ex::In(idx, a) => a == p || idx.iter().any(e),
        Ex::Call(n, args) => {
            (n == "split" && matches!(args.get(1), Some(Ex::Var(a)) if a == p))
                || args.iter().any(e)
        }
        Ex::User(_, args) => args.iter().any(e),
        Ex::Field(a) | Ex::Neg(a) | Ex::Plus(a) | Ex::Not(a) | Ex::Incr(_, _, a) => e(a),
        Ex::Assign(_, a, b)
        | Ex::And(a, b)
        | Ex::Or(a, b)
        | Ex::Match(_, a, b)
        | Ex::Bin(_, a, b)
        | Ex::Cmp(_, a, b)
        | Ex::Concat(a, b) => e(a) || e(b),
        Ex::Cond(a, b, c) => e(a) || e(b) || e(c),
        Ex::Num(_) | Ex::Str(_) | Ex::Re(_) | Ex::Var(_) => false,
    }
}

/// Reads an escape-processed `-v`/operand assignment value as awk does.
fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('\\') => out.push('\\'),
            Some('"') => out.push('"'),
            Some('/') => out.push('/'),
            Some(o) => {
                out.push('\\');
                out.push(o);
            }
            None => out.push('\\'),
        }
    }
    out
}

fn is_assignment(s: &str) -> Option<(&str, &str)> {
    let (n, v) = s.split_once('=')?;
    let ok = n
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    ok.then_some((n, v))
}

pub(super) fn main(cx: &mut Ctx<'_, '_>) -> R<i32> {
    stacker::grow(AWK_STACK, || main_inner(cx))
}

fn main_inner(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut fs: Option<String> = None;
    let mut assigns: Vec<(String, String)> = Vec::new();
    let mut prog: Option<String> = None;
    let mut i = 0;
    let usage = "usage: mawk [-F value] [-v var=value] [--] 'program text' [file ...]\nusage: mawk [-F value] [-v var=value] [-f program-file] [--] [file ...]";
    while i < args.len() {
        let a = &args[i];
        if a == "--" {
            i += 1;
            break;
        }
        if !a.starts_with('-') || a == "-" {
            break;
        }
        let (opt, rest) = a.split_at(2.min(a.len()));
        let val = |i: &mut usize| -> Option<String> {
            if !rest.is_empty() {
                Some(rest.to_string())
            } else {
                *i += 1;
                args.get(*i).cloned()
            }
        };
        match opt {
            "-F" => match val(&mut i) {
                Some(v) => fs = Some(if v == "t" { "\t".into() } else { unescape(&v) }),
                None => {
                    cx.err_line("mawk: option requires an argument -- F");
                    cx.err_line(usage);
                    return Ok(USAGE);
                }
            },
            "-v" => match val(&mut i).as_deref().and_then(is_assignment) {
                Some((n, v)) => assigns.push((n.to_string(), unescape(v))),
                None => {
                    cx.err_line("mawk: improper assignment: -v");
                    return Ok(USAGE);
                }
            },
            "-f" => match val(&mut i) {
                Some(f) => match cx.read_input(&f) {
                    Ok(d) => {
                        let t = String::from_utf8_lossy(&d).into_owned();
                        prog = Some(match prog {
                            Some(p) => format!("{p}\n{t}"),
                            None => t,
                        });
                    }
                    Err(e) => {
                        cx.err_line(&format!("mawk: couldn't open file {f}: {e}"));
                        return Ok(USAGE);
                    }
                },
                None => {
                    cx.err_line("mawk: option requires an argument -- f");
                    return Ok(USAGE);
                }
            },
            "-W" => return cx.unsupported(&format!("awk option {a}")),
            _ => {
                cx.err_line(&format!("mawk: not an option: {a}"));
                return Ok(USAGE);
            }
        }
        i += 1;
    }
    let mut operands: Vec<String> = args[i.min(args.len())..].to_vec();
    let text = match prog {
        Some(p) => p,
        None => {
            if operands.is_empty() {
                // mawk prints its usage and succeeds
                cx.err_line(usage);
                return Ok(0);
            }
            operands.remove(0)
        }
    };
    if !crate::shell::nesting_ok(&text) {
        return cx.unsupported(&format!(
            "awk program nesting deeper than {} levels",
            crate::shell::MAX_NESTING
        ));
    }
    let mut funcs = HashMap::new();
    let parsed = lex(&text).and_then(|toks| {
        let mut p = Parser {
            t: toks,
            i: 0,
            pace: crate::shell::Pacer::default(),
            stopped: false,
            res: Vec::new(),
            no_gt: false,
            no_in: false,
            nest: 0,
            expr_from: 0,
        };
        let items = p.program(&mut funcs)?;
        Ok((items, p.res))
    });
    let (items, res_text) = match parsed {
        Ok(x) => x,
        Err(m) if m == STOPPED => return Err(cx.interrupted()),
        Err(m) if m.starts_with("unsupported: ") => {
            return cx.unsupported(&format!("awk {}", &m["unsupported: ".len()..]))
        }
        Err(m) => {
            cx.err_line(&format!("mawk: line 1: {m}"));
            return Ok(USAGE);
        }
    };
    let mut res = Vec::new();
    for r in &res_text {
        cx.check_time()?;
        match Re::new(r, Dialect::Extended, false) {
            Ok(re) => res.push(re),
            Err(super::posix::Error::Syntax(m) | super::posix::Error::Unsupported(m)) => {
                cx.err_line(&format!(
                    "mawk: line 1: regular expression compile failed ({m})\n{r}"
                ));
                return Ok(USAGE);
            }
        }
    }
    let mut awk = Awk {
        vars: HashMap::new(),
        arrays: HashMap::new(),
        funcs: &funcs,
        res,
        res_text,
        dyn_res: HashMap::new(),
        record: String::new(),
        fields: crate::mem::PacedVec::new(Vec::new()),
        split: true,
        dirty: false,
        out: Vec::new(),
        out_charged: 0,
        frames: Vec::new(),
        steps: 0,
        copies: crate::shell::Pacer::default(),
        rand_seed: 0.0,
        rng: 0x2545_f491_4f6c_dd1d,
        depth: 0,
        mem_left: cx.memory_left(),
    };
    for (k, v) in [
        ("FS", " "),
        ("OFS", " "),
        ("ORS", "\n"),
        ("RS", "\n"),
        ("SUBSEP", "\u{1c}"),
        ("CONVFMT", "%.6g"),
        ("OFMT", "%.6g"),
        ("FILENAME", ""),
    ] {
        awk.vars.insert(k.into(), V::Str(v.into()));
    }
    awk.vars.insert("NR".into(), V::Num(0.0));
    awk.vars.insert("FNR".into(), V::Num(0.0));
    awk.vars.insert("RSTART".into(), V::Num(0.0));
    awk.vars.insert("RLENGTH".into(), V::Num(-1.0));
    let env: HashMap<String, V> = cx
        .environ()
        .into_iter()
        .map(|(k, v)| (k, V::StrNum(v)))
        .collect();
    awk.arrays.insert("ENVIRON".into(), env);
    if let Some(f) = fs {
        awk.vars.insert("FS".into(), V::Str(f));
    }
    for (n, v) in assigns {
        awk.vars.insert(n, V::StrNum(v));
    }
    let r = run(cx, &mut awk, &items, &operands);
    let code = match r {
        Ok(c) => c,
        Err(Flow::Ctl(c)) => {
            cx.out(&awk.out)?;
            return Err(c);
        }
        Err(Flow::Fail(m)) if m == "\u{0}deadline" => {
            cx.out(&awk.out)?;
            cx.check_time()?;
            2
        }
        Err(Flow::Fail(m)) if m == "\u{0}memory" => {
            // over the budget: the machine's memory error, as for any program
            cx.hold(
                usize::try_from(awk.mem_left)
                    .unwrap_or(usize::MAX)
                    .saturating_add(1),
            )?;
            cx.err_line("mawk: out of memory");
            2
        }
        Err(Flow::Fail(m)) if m.starts_with("unsupported: ") => {
            cx.out(&awk.out)?;
            return cx.unsupported(&format!("awk {}", &m["unsupported: ".len()..]));
        }
        Err(Flow::Fail(m)) => {
            cx.out(&awk.out)?;
            cx.err_line(&format!("mawk: run time error: {m}"));
            return Ok(2);
        }
        Err(_) => 0,
    };
    cx.out(&awk.out)?;
    Ok(code)
}

/// BEGIN, every record of every input, END; the exit status.
fn run(cx: &mut Ctx<'_, '_>, awk: &mut Awk<'_>, items: &[Item], operands: &[String]) -> FR<i32> {
    let mut exit: Option<i32> = None;
    for it in items {
        if let Item::Begin(b) = it {
            match awk.block(b) {
                Ok(()) => {}
                Err(Flow::Exit(c)) => {
                    exit = Some(c);
                    break;
                }
                Err(Flow::Next) => return Err(Flow::Fail("improper use of next".into())),
                Err(e) => return Err(e),
            }
        }
    }
    let has_main = items
        .iter()
        .any(|i| matches!(i, Item::Pat(..) | Item::Range(..) | Item::End(_)));
    let mut in_range = vec![false; items.len()];
    if exit.is_none() && has_main {
        let mut inputs: Vec<String> = Vec::new();
        for o in operands {
            inputs.push(o.clone());
        }
        if !operands.iter().any(|o| is_assignment(o).is_none()) {
            inputs.push("-".into());
        }
        let mut nr = 0f64;
        'files: for f in inputs {
            if let Some((n, v)) = is_assignment(&f) {
                awk.vars.insert(n.to_string(), V::StrNum(unescape(v)));
                continue;
            }
            let data = match cx.read_input(&f) {
                Ok(d) => d,
                Err(e) => {
                    cx.err_line(&format!("mawk: cannot open {f} ({e})"));
                    awk.out.extend_from_slice(b"");
                    exit = Some(2);
                    break;
                }
            };
            if awk.var_str("RS") != "\n" {
                return Err(Flow::Fail("unsupported: RS other than a newline".into()));
            }
            awk.vars.insert(
                "FILENAME".into(),
                V::Str(if f == "-" { String::new() } else { f.clone() }),
            );
            let text = String::from_utf8_lossy(&data).into_owned();
            let mut fnr = 0f64;
            let mut lines: Vec<&str> = text.split('\n').collect();
            if text.ends_with('\n') || text.is_empty() {
                lines.pop();
            }
            for (k, line) in lines.into_iter().enumerate() {
                if k % 256 == 255 {
                    // the output's growth since the last charge (charging it whole
                    // each time "held" gigabytes for megabytes of output)
                    cx.hold(awk.out.len().saturating_sub(awk.out_charged))?;
                    awk.out_charged = awk.out.len();
                    cx.tick()?;
                }
                nr += 1.0;
                fnr += 1.0;
                awk.vars.insert("NR".into(), V::Num(nr));
                awk.vars.insert("FNR".into(), V::Num(fnr));
                awk.record = line.to_string();
                awk.split = false;
                awk.dirty = false;
                for (idx, it) in items.iter().enumerate() {
                    let r = match it {
                        Item::Pat(pat, body) => {
                            let hit = match pat {
                                None => true,
                                Some(p) => Awk::truth(&awk.eval(p)?),
                            };
                            if hit {
                                run_body(awk, body.as_deref())
                            } else {
                                Ok(())
                            }
                        }
                        Item::Range(a, b, body) => {
                            let hit = if in_range[idx] {
                                if Awk::truth(&awk.eval(b)?) {
                                    in_range[idx] = false;
                                }
                                true
                            } else if Awk::truth(&awk.eval(a)?) {
                                in_range[idx] = !Awk::truth(&awk.eval(b)?);
                                true
                            } else {
                                false
                            };
                            if hit {
                                run_body(awk, body.as_deref())
                            } else {
                                Ok(())
                            }
                        }
                        _ => Ok(()),
                    };
                    match r {
                        Ok(()) => {}
                        Err(Flow::Next) => break,
                        Err(Flow::Exit(c)) => {
                            exit = Some(c);
                            break 'files;
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
        }
    }
    for it in items {
        if let Item::End(b) = it {
            match awk.block(b) {
                Ok(()) => {}
                Err(Flow::Exit(c)) => return Ok(c),
                Err(Flow::Next) => return Err(Flow::Fail("improper use of next".into())),
                Err(e) => return Err(e),
            }
        }
    }
    Ok(exit.unwrap_or(0))
}

fn run_body(awk: &mut Awk<'_>, body: Option<&[St]>) -> FR<()> {
    match body {
        Some(b) => awk.block(b),
        None => {
            awk.rebuild()?;
            let ors = awk.var_str("ORS");
            awk.out.extend_from_slice(awk.record.as_bytes());
            awk.out.extend_from_slice(ors.as_bytes());
            Ok(())
        }
    }
}
