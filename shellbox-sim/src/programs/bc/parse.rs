//! bc's language read as GNU bc 1.07's grammar (`bc.y`) reads it: tokens, then one input
//! item (a line of `;`-separated statements, or a `define`) at a time, so the caller runs
//! each item as soon as it is complete, the way bc does.

use std::rc::Rc;

/// One token, with the line it ends on.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Tok {
    Num(String),
    Name(String),
    Str(String),
    Op(&'static str),
    Newline,
    Eof,
}

const OPS: &[&str] = &[
    "++", "--", "+=", "-=", "*=", "/=", "%=", "^=", "==", "<=", ">=", "!=", "&&", "||", "+", "-",
    "*", "/", "%", "^", "=", "<", ">", "!", "(", ")", "[", "]", "{", "}", ",", ";",
];

/// A character bc does not know: the index of the token after it, the character, its line.
pub(super) type BadChar = (usize, char, usize);

/// The tokens of `src` with their line numbers (1-based; a newline's line is the one after
/// it, where GNU's lexer stands once it has read it), and the characters bc does not know
/// (each with the index of the token after it and its line: GNU's lexer reports and drops
/// them). An unterminated comment or string ends the text.
pub(super) fn lex(src: &str) -> (Vec<(Tok, usize)>, Vec<BadChar>) {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut bad = Vec::new();
    let mut i = 0;
    let mut line = 1;
    while i < b.len() {
        let c = b[i];
        match c {
            b' ' | b'\t' | b'\r' | 0x0b | 0x0c => i += 1,
            b'\\' if b.get(i + 1) == Some(&b'\n') => {
                i += 2;
                line += 1;
            }
            b'\n' => {
                line += 1;
                out.push((Tok::Newline, line));
                i += 1;
            }
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                    if b[i] == b'\n' {
                        line += 1;
                    }
                    i += 1;
                }
                i += 2;
            }
            b'"' => {
                let start = i + 1;
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\n' {
                        line += 1;
                    }
                    i += 1;
                }
                let s = String::from_utf8_lossy(&b[start..i.min(b.len())]).into_owned();
                i += 1;
                out.push((Tok::Str(s), line));
            }
            b'0'..=b'9' | b'A'..=b'F' | b'.' => {
                if c == b'.'
                    && !b
                        .get(i + 1)
                        .is_some_and(|d| d.is_ascii_digit() || (b'A'..=b'F').contains(d))
                {
                    out.push((Tok::Name("last".into()), line));
                    i += 1;
                    continue;
                }
                let mut s = String::new();
                let mut dot = false;
                while i < b.len() {
                    let d = b[i];
                    if d.is_ascii_digit() || (b'A'..=b'F').contains(&d) {
                        s.push(d as char);
                    } else if d == b'.' && !dot {
                        dot = true;
                        s.push('.');
                    } else if d == b'\\' && b.get(i + 1) == Some(&b'\n') {
                        line += 1;
                        i += 1;
                    } else {
                        break;
                    }
                    i += 1;
                }
                out.push((Tok::Num(s), line));
            }
            b'a'..=b'z' => {
                let start = i;
                while i < b.len()
                    && (b[i].is_ascii_lowercase() || b[i].is_ascii_digit() || b[i] == b'_')
                {
                    i += 1;
                }
                out.push((Tok::Name(src[start..i].to_string()), line));
            }
            _ => {
                if let Some(op) = OPS.iter().find(|o| b[i..].starts_with(o.as_bytes())) {
                    out.push((Tok::Op(op), line));
                    i += op.len();
                } else {
                    let ch = src[i..].chars().next().unwrap_or('?');
                    bad.push((out.len(), ch, line));
                    i += ch.len_utf8();
                }
            }
        }
    }
    out.push((Tok::Eof, line));
    (out, bad)
}

/// Something that can be assigned.
#[derive(Clone, Debug)]
pub(super) enum Lv {
    Var(String),
    Elem(String, Box<Expr>),
    Scale,
    Ibase,
    Obase,
    Last,
}

/// An argument of a call: a value or a whole array (`a[]`).
#[derive(Clone, Debug)]
pub(super) enum Arg {
    Val(Expr),
    Array(String),
}

/// An expression.
#[derive(Clone, Debug)]
pub(super) enum Expr {
    Num(Rc<str>),
    Get(Lv),
    /// `lv op= e` (`op` empty for `=`).
    Assign(Lv, &'static str, Box<Expr>),
    /// `++lv`/`--lv` (`pre`) or `lv++`/`lv--`, with +1 or -1.
    Step(Lv, bool, i64),
    Neg(Box<Expr>),
    Not(Box<Expr>),
    Bin(&'static str, Box<Expr>, Box<Expr>),
    /// A left-associative chain `a op b op c ...` of one precedence level (kept flat so
    /// `1+1+...` of any length needs no deep tree).
    Chain(Box<Expr>, Vec<(&'static str, Expr)>),
    Call(String, Vec<Arg>),
    Length(Box<Expr>),
    Sqrt(Box<Expr>),
    ScaleOf(Box<Expr>),
    Paren(Box<Expr>),
}

/// A statement.
#[derive(Clone, Debug)]
pub(super) enum Stmt {
    Expr(Expr),
    Str(String),
    Print(Vec<Result<Expr, String>>),
    Block(Vec<Stmt>),
    If(Expr, Box<Stmt>, Option<Box<Stmt>>),
    While(Expr, Box<Stmt>),
    For(Option<Expr>, Option<Expr>, Option<Expr>, Box<Stmt>),
    Break,
    Continue,
    Return(Option<Expr>),
    Halt,
    Empty,
}

/// A user function.
#[derive(Debug)]
pub(super) struct Func {
    /// Parameters: name and whether it is an array.
    pub(super) params: Vec<(String, bool)>,
    /// `auto` names: name and whether it is an array.
    pub(super) autos: Vec<(String, bool)>,
    pub(super) body: Vec<Stmt>,
    /// `define void`.
    pub(super) void: bool,
}

/// One input item.
#[derive(Debug)]
pub(super) enum Item {
    Stmts(Vec<Stmt>),
    Define(String, Rc<Func>),
    /// `limits` was read (bc prints them while reading).
    Limits,
    /// `quit` was read: bc ends here.
    Quit,
    /// A syntax error: GNU's message after `(file) LINE: `, and the line.
    Error(String, usize),
    Eof,
}

/// A parse failure: the message and the line.
type PErr = (String, usize);

/// The parser over one file's tokens.
pub(super) struct Parser {
    toks: Vec<(Tok, usize)>,
    /// Unknown characters not yet reported: index of the token after, character, line.
    bad: std::collections::VecDeque<BadChar>,
    /// GNU's `illegal character` lines for what the last [`Parser::item`] read.
    pub(super) notes: Vec<(String, usize)>,
    pos: usize,
    /// `quit` or `limits` seen inside the current item.
    quit: bool,
    limits: bool,
    /// Loop nesting (break/continue are refused outside loops).
    loops: usize,
    in_func: bool,
    /// Recursion depth of the descent now.
    depth: usize,
    /// Tokens before this one were read once already (their `limits` printed).
    printed_upto: usize,
}

fn syntax(line: usize) -> PErr {
    ("syntax error".into(), line)
}

impl Parser {
    pub(super) fn new(src: &str) -> Parser {
        let (toks, bad) = lex(src);
        Parser {
            toks,
            bad: bad.into(),
            notes: Vec::new(),
            pos: 0,
            quit: false,
            limits: false,
            loops: 0,
            in_func: false,
            depth: 0,
            printed_upto: 0,
        }
    }

    fn peek(&self) -> &Tok {
        &self.toks[self.pos.min(self.toks.len() - 1)].0
    }

    fn line(&self) -> usize {
        self.toks[self.pos.min(self.toks.len() - 1)].1
    }

    fn next(&mut self) -> Tok {
        let t = self.peek().clone();
        if self.pos < self.toks.len() - 1 {
            self.pos += 1;
        }
        t
    }

    fn is_op(&self, op: &str) -> bool {
        matches!(self.peek(), Tok::Op(o) if *o == op)
    }

    fn eat(&mut self, op: &str) -> bool {
        if self.is_op(op) {
            self.next();
            true
        } else {
            false
        }
    }

    fn want(&mut self, op: &str) -> Result<(), PErr> {
        if self.eat(op) {
            Ok(())
        } else {
            Err(self.err_here())
        }
    }

    fn err_here(&self) -> PErr {
        syntax(self.line())
    }

    fn newlines(&mut self) {
        while *self.peek() == Tok::Newline {
            self.next();
        }
    }

    /// The next input item.
    pub(super) fn item(&mut self) -> Item {
        self.quit = false;
        self.limits = false;
        self.depth = 0;
        self.loops = 0;
        self.in_func = false;
        let start = self.pos;
        let r = self.item_inner();
        let r = match r {
            Err(e) => {
                loop {
                    match self.next() {
                        Tok::Newline | Tok::Eof => break,
                        _ => {}
                    }
                }
                Err(e)
            }
            ok => ok,
        };
        let end = if *self.peek() == Tok::Eof {
            usize::MAX
        } else {
            self.pos
        };
        while self.bad.front().is_some_and(|b| b.0 < end) {
            if let Some((_, c, line)) = self.bad.pop_front() {
                self.notes.push((format!("illegal character: {c}"), line));
            }
        }
        if self.quit {
            return Item::Quit;
        }
        match r {
            Ok(it) => {
                if self.limits {
                    // bc prints the limits as it reads them, then runs the rest
                    self.limits = false;
                    self.printed_upto = self.pos;
                    self.pos = start;
                    return Item::Limits;
                }
                it
            }
            // the rest of the line was skipped, as GNU's `error '\n'` rule does
            Err((msg, line)) => Item::Error(msg, line),
        }
    }

    fn item_inner(&mut self) -> Result<Item, PErr> {
        if *self.peek() == Tok::Eof {
            return Ok(Item::Eof);
        }
        if matches!(self.peek(), Tok::Name(n) if n == "define") {
            self.next();
            return self.define();
        }
        let mut stmts = Vec::new();
        loop {
            match self.peek() {
                Tok::Newline => {
                    self.next();
                    return Ok(Item::Stmts(stmts));
                }
                Tok::Eof => return Err(syntax(self.line())),
                Tok::Op(";") => {
                    self.next();
                }
                _ => {
                    stmts.push(self.stmt()?);
                    if self.quit {
                        return Ok(Item::Quit);
                    }
                    match self.peek() {
                        Tok::Newline | Tok::Op(";") => {}
                        _ => return Err(self.err_here()),
                    }
                }
            }
        }
    }

    fn define(&mut self) -> Result<Item, PErr> {
        let mut void = false;
        let mut name = match self.next() {
            Tok::Name(n) => n,
            _ => return Err(syntax(self.line())),
        };
        if name == "void" {
            if let Tok::Name(n) = self.peek().clone() {
                self.next();
                void = true;
                name = n;
            }
        }
        self.want("(")?;
        let mut params = Vec::new();
        if !self.is_op(")") {
            loop {
                self.eat("*");
                let p = match self.next() {
                    Tok::Name(n) => n,
                    _ => return Err(syntax(self.line())),
                };
                let arr = if self.eat("[") {
                    self.want("]")?;
                    true
                } else {
                    false
                };
                params.push((p, arr));
                if !self.eat(",") {
                    break;
                }
            }
        }
        self.want(")")?;
        self.newlines();
        self.want("{")?;
        self.newlines();
        let mut autos = Vec::new();
        self.in_func = true;
        if matches!(self.peek(), Tok::Name(n) if n == "auto") {
            self.next();
            loop {
                let p = match self.next() {
                    Tok::Name(n) => n,
                    _ => return Err(syntax(self.line())),
                };
                let arr = if self.eat("[") {
                    self.want("]")?;
                    true
                } else {
                    false
                };
                autos.push((p, arr));
                if !self.eat(",") {
                    break;
                }
            }
            if !self.eat(";") && *self.peek() != Tok::Newline {
                return Err(self.err_here());
            }
        }
        let body = self.stmt_list();
        self.in_func = false;
        let body = body?;
        self.want("}")?;
        Ok(Item::Define(
            name,
            Rc::new(Func {
                params,
                autos,
                body,
                void,
            }),
        ))
    }

    /// Statements up to a `}` (not consumed), separated by `;` and newlines.
    fn stmt_list(&mut self) -> Result<Vec<Stmt>, PErr> {
        let mut v = Vec::new();
        loop {
            match self.peek() {
                Tok::Op("}") => return Ok(v),
                Tok::Newline | Tok::Op(";") => {
                    self.next();
                }
                Tok::Eof => return Err(syntax(self.line())),
                _ => {
                    v.push(self.stmt()?);
                    if self.quit {
                        return Ok(v);
                    }
                    match self.peek() {
                        Tok::Newline | Tok::Op(";") | Tok::Op("}") => {}
                        _ => return Err(self.err_here()),
                    }
                }
            }
        }
    }

    fn keyword(&self) -> Option<&str> {
        match self.peek() {
            Tok::Name(n) => Some(n.as_str()),
            _ => None,
        }
    }

    fn stmt(&mut self) -> Result<Stmt, PErr> {
        self.enter()?;
        let r = self.stmt_inner();
        self.depth -= 1;
        r
    }

    fn stmt_inner(&mut self) -> Result<Stmt, PErr> {
        if let Tok::Str(s) = self.peek().clone() {
            self.next();
            return Ok(Stmt::Str(s));
        }
        if self.eat("{") {
            let v = self.stmt_list()?;
            self.want("}")?;
            return Ok(Stmt::Block(v));
        }
        match self.keyword() {
            Some("quit") => {
                self.next();
                self.quit = true;
                return Ok(Stmt::Empty);
            }
            Some("limits") => {
                self.next();
                if self.pos > self.printed_upto {
                    self.limits = true;
                }
                return Ok(Stmt::Empty);
            }
            Some("halt") => {
                self.next();
                return Ok(Stmt::Halt);
            }
            Some("break") => {
                let line = self.line();
                self.next();
                if self.loops == 0 {
                    return Err(("Break outside a for/while".into(), line));
                }
                return Ok(Stmt::Break);
            }
            Some("continue") => {
                let line = self.line();
                self.next();
                if self.loops == 0 {
                    return Err(("Continue outside a for".into(), line));
                }
                return Ok(Stmt::Continue);
            }
            Some("return") => {
                self.next();
                let e = if self.starts_expr() {
                    Some(self.expr()?)
                } else {
                    None
                };
                if !self.in_func {
                    return Err(("Return outside of a function.".into(), self.line()));
                }
                return Ok(Stmt::Return(e));
            }
            Some("print") => {
                self.next();
                let mut v = Vec::new();
                loop {
                    if let Tok::Str(s) = self.peek().clone() {
                        self.next();
                        v.push(Err(s));
                    } else {
                        v.push(Ok(self.expr()?));
                    }
                    if !self.eat(",") {
                        break;
                    }
                }
                return Ok(Stmt::Print(v));
            }
            Some("if") => {
                self.next();
                self.want("(")?;
                let c = self.expr()?;
                self.want(")")?;
                self.newlines();
                let t = self.stmt()?;
                let e = if matches!(self.keyword(), Some("else")) {
                    self.next();
                    self.newlines();
                    Some(Box::new(self.stmt()?))
                } else {
                    None
                };
                return Ok(Stmt::If(c, Box::new(t), e));
            }
            Some("while") => {
                self.next();
                self.want("(")?;
                let c = self.expr()?;
                self.want(")")?;
                self.newlines();
                self.loops += 1;
                let body = self.stmt();
                self.loops -= 1;
                return Ok(Stmt::While(c, Box::new(body?)));
            }
            Some("for") => {
                self.next();
                self.want("(")?;
                let a = self.opt_expr(";")?;
                self.want(";")?;
                let b = self.opt_expr(";")?;
                self.want(";")?;
                let c = self.opt_expr(")")?;
                self.want(")")?;
                self.newlines();
                self.loops += 1;
                let body = self.stmt();
                self.loops -= 1;
                return Ok(Stmt::For(a, b, c, Box::new(body?)));
            }
            _ => {}
        }
        if matches!(self.peek(), Tok::Newline | Tok::Op(";") | Tok::Op("}")) {
            return Ok(Stmt::Empty);
        }
        Ok(Stmt::Expr(self.expr()?))
    }

    fn opt_expr(&mut self, end: &str) -> Result<Option<Expr>, PErr> {
        if self.is_op(end) {
            Ok(None)
        } else {
            Ok(Some(self.expr()?))
        }
    }

    fn starts_expr(&self) -> bool {
        match self.peek() {
            Tok::Num(_) => true,
            Tok::Name(n) => !matches!(
                n.as_str(),
                "else" | "define" | "auto" | "quit" | "halt" | "break" | "continue" | "return"
            ),
            Tok::Op(o) => matches!(*o, "(" | "-" | "!" | "++" | "--"),
            _ => false,
        }
    }

    /// An expression (the lowest level: `||`).
    pub(super) fn expr(&mut self) -> Result<Expr, PErr> {
        self.enter()?;
        let l = self.and()?;
        let mut rest = Vec::new();
        while self.eat("||") {
            rest.push(("||", self.and()?));
        }
        self.depth -= 1;
        Ok(chain(l, rest))
    }

    /// One level deeper in the recursive descent. Nesting deeper than [`MAX_DEPTH`] is
    /// refused as GNU's parser refuses it (its stack is 10,000 entries: `memory
    /// exhausted`), so no input overflows the simulator's stack.
    fn enter(&mut self) -> Result<(), PErr> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(("memory exhausted".into(), self.line()));
        }
        Ok(())
    }

    fn and(&mut self) -> Result<Expr, PErr> {
        let l = self.not()?;
        let mut rest = Vec::new();
        while self.eat("&&") {
            rest.push(("&&", self.not()?));
        }
        Ok(chain(l, rest))
    }

    fn not(&mut self) -> Result<Expr, PErr> {
        if self.eat("!") {
            self.enter()?;
            let e = self.not()?;
            self.depth -= 1;
            return Ok(Expr::Not(Box::new(e)));
        }
        self.rel()
    }

    fn rel(&mut self) -> Result<Expr, PErr> {
        let l = self.add()?;
        let mut rest = Vec::new();
        while let Tok::Op(o @ ("<" | "<=" | ">" | ">=" | "==" | "!=")) = self.peek() {
            let op = *o;
            self.next();
            rest.push((op, self.add()?));
        }
        Ok(chain(l, rest))
    }

    fn add(&mut self) -> Result<Expr, PErr> {
        let l = self.mul()?;
        let mut rest = Vec::new();
        while let Tok::Op(o @ ("+" | "-")) = self.peek() {
            let op = *o;
            self.next();
            rest.push((op, self.mul()?));
        }
        Ok(chain(l, rest))
    }

    fn mul(&mut self) -> Result<Expr, PErr> {
        let l = self.pow()?;
        let mut rest = Vec::new();
        while let Tok::Op(o @ ("*" | "/" | "%")) = self.peek() {
            let op = *o;
            self.next();
            rest.push((op, self.pow()?));
        }
        Ok(chain(l, rest))
    }

    fn pow(&mut self) -> Result<Expr, PErr> {
        let l = self.unary()?;
        if self.eat("^") {
            // right associative
            self.enter()?;
            let r = self.pow()?;
            self.depth -= 1;
            return Ok(Expr::Bin("^", Box::new(l), Box::new(r)));
        }
        Ok(l)
    }

    fn unary(&mut self) -> Result<Expr, PErr> {
        if self.eat("-") {
            self.enter()?;
            let e = self.unary()?;
            self.depth -= 1;
            return Ok(Expr::Neg(Box::new(e)));
        }
        if self.is_op("++") || self.is_op("--") {
            let d = if self.eat("++") {
                1
            } else {
                self.next();
                -1
            };
            let lv = self.lvalue()?;
            return Ok(Expr::Step(lv, true, d));
        }
        self.primary()
    }

    fn lvalue(&mut self) -> Result<Lv, PErr> {
        match self.next() {
            Tok::Name(n) => self.lv_named(n),
            _ => Err(syntax(self.line())),
        }
    }

    fn lv_named(&mut self, n: String) -> Result<Lv, PErr> {
        Ok(match n.as_str() {
            "scale" => Lv::Scale,
            "ibase" => Lv::Ibase,
            "obase" => Lv::Obase,
            "last" => Lv::Last,
            _ if is_keyword(&n) => return Err(syntax(self.line())),
            _ => {
                if self.eat("[") {
                    let i = self.expr()?;
                    self.want("]")?;
                    Lv::Elem(n, Box::new(i))
                } else {
                    Lv::Var(n)
                }
            }
        })
    }

    fn primary(&mut self) -> Result<Expr, PErr> {
        match self.next() {
            Tok::Num(s) => Ok(Expr::Num(s.into())),
            Tok::Op("(") => {
                let e = self.expr()?;
                self.want(")")?;
                Ok(Expr::Paren(Box::new(e)))
            }
            Tok::Name(n) => {
                match n.as_str() {
                    "length" | "sqrt" | "scale" if self.is_op("(") => {
                        self.next();
                        let e = self.expr()?;
                        self.want(")")?;
                        let e = Box::new(e);
                        return Ok(match n.as_str() {
                            "length" => Expr::Length(e),
                            "sqrt" => Expr::Sqrt(e),
                            _ => Expr::ScaleOf(e),
                        });
                    }
                    "read" => {
                        return Err((
                            "read() is not supported by shellbox-sim".into(),
                            self.line(),
                        ))
                    }
                    _ => {}
                }
                if !is_keyword(&n) && self.is_op("(") {
                    self.next();
                    let mut args = Vec::new();
                    if !self.is_op(")") {
                        loop {
                            if let (Tok::Name(a), Tok::Op("["), Tok::Op("]")) = (
                                self.peek().clone(),
                                self.toks
                                    .get(self.pos + 1)
                                    .map(|t| t.0.clone())
                                    .unwrap_or(Tok::Eof),
                                self.toks
                                    .get(self.pos + 2)
                                    .map(|t| t.0.clone())
                                    .unwrap_or(Tok::Eof),
                            ) {
                                self.pos += 3;
                                args.push(Arg::Array(a));
                            } else {
                                args.push(Arg::Val(self.expr()?));
                            }
                            if !self.eat(",") {
                                break;
                            }
                        }
                    }
                    self.want(")")?;
                    return Ok(Expr::Call(n, args));
                }
                let lv = self.lv_named(n)?;
                self.post(lv)
            }
            _ => {
                self.pos -= 1;
                Err(self.err_here())
            }
        }
    }

    /// After an lvalue: an assignment, `++`/`--`, or its value.
    fn post(&mut self, lv: Lv) -> Result<Expr, PErr> {
        if let Tok::Op(o @ ("=" | "+=" | "-=" | "*=" | "/=" | "%=" | "^=")) = self.peek().clone() {
            self.next();
            // right associative, binding tighter than the relations (GNU's %right ASSIGN_OP)
            let r = self.add()?;
            let op = match o {
                "=" => "",
                "+=" => "+",
                "-=" => "-",
                "*=" => "*",
                "/=" => "/",
                "%=" => "%",
                _ => "^",
            };
            return Ok(Expr::Assign(lv, op, Box::new(r)));
        }
        if self.eat("++") {
            return Ok(Expr::Step(lv, false, 1));
        }
        if self.eat("--") {
            return Ok(Expr::Step(lv, false, -1));
        }
        Ok(Expr::Get(lv))
    }
}

/// Deepest nesting of parentheses, unary operators, `^` chains and statements.
const MAX_DEPTH: usize = 10_000;

fn chain(l: Expr, rest: Vec<(&'static str, Expr)>) -> Expr {
    if rest.is_empty() {
        l
    } else {
        Expr::Chain(Box::new(l), rest)
    }
}

fn is_keyword(n: &str) -> bool {
    matches!(
        n,
        "auto"
            | "break"
            | "continue"
            | "define"
            | "else"
            | "for"
            | "halt"
            | "if"
            | "length"
            | "limits"
            | "print"
            | "quit"
            | "read"
            | "return"
            | "sqrt"
            | "while"
            | "warranty"
    )
}
