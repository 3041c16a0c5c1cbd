//! `find` (GNU findutils 4.9): starting points, then an expression of tests `-name
//! -iname -path -wholename -ipath -regex -iregex -type -maxdepth -mindepth -empty -size
//! -newer -perm -true -false -readable -writable -executable`, operators `! -not -a -and
//! -o -or ( ) ,`, and actions `-print -print0 -printf (%p %f %h %s %d %m %y %P %%, \n \t
//! \0) -prune -delete -quit -exec CMD {} ; -exec CMD {} + -execdir -ok`-less. Entries are
//! visited in name order (the virtual filesystem's order; GNU's is the directory's).
//! Options it does not know (`-mtime`, `-user`, `-ls`, `-samefile`, …) fail visibly with
//! status 1, as GNU's usage errors do.

use super::posix::{self, Dialect, Re};
use super::Ctx;
use crate::shell::R;
use crate::vfs::Kind;

/// GNU find's usage and error status.
const TROUBLE: i32 = 1;

#[derive(Debug, Clone)]
enum Expr {
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Comma(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    Name(String, bool),
    Path(String, bool),
    Regex(Box<Re>),
    Type(Vec<char>),
    Empty,
    Size(std::cmp::Ordering, u64, u64),
    Perm(u32, char),
    Const(bool),
    Print(bool),
    Printf(String),
    Prune,
    Delete,
    Quit,
    Exec(Vec<String>, bool, bool),
}

struct Parse<'a> {
    args: &'a [String],
    i: usize,
    has_action: bool,
    maxdepth: Option<usize>,
    mindepth: usize,
    delete: bool,
}

type PResult = Result<Expr, String>;

impl Parse<'_> {
    fn peek(&self) -> Option<&str> {
        self.args.get(self.i).map(String::as_str)
    }
    fn or(&mut self) -> PResult {
        let mut l = self.and()?;
        loop {
            match self.peek() {
                Some("-o" | "-or") => {
                    self.i += 1;
                    let r = self.and()?;
                    l = Expr::Or(Box::new(l), Box::new(r));
                }
                Some(",") => {
                    self.i += 1;
                    let r = self.and()?;
                    l = Expr::Comma(Box::new(l), Box::new(r));
                }
                _ => return Ok(l),
            }
        }
    }
    fn and(&mut self) -> PResult {
        let mut l = self.unary()?;
        loop {
            match self.peek() {
                None | Some("-o" | "-or" | ")" | ",") => return Ok(l),
                Some("-a" | "-and") => {
                    self.i += 1;
                }
                _ => {}
            }
            let r = self.unary()?;
            l = Expr::And(Box::new(l), Box::new(r));
        }
    }
    fn unary(&mut self) -> PResult {
        match self.peek() {
            Some("!" | "-not") => {
                self.i += 1;
                Ok(Expr::Not(Box::new(self.unary()?)))
            }
            Some("(") => {
                self.i += 1;
                let e = self.or()?;
                if self.peek() != Some(")") {
                    return Err("find: invalid expression; I was expecting to find a ')' somewhere but did not see one.".into());
                }
                self.i += 1;
                Ok(e)
            }
            Some(_) => self.primary(),
            None => Err(
                "find: invalid expression; you have used a binary operator with nothing before it."
                    .into(),
            ),
        }
    }
    fn value(&mut self, opt: &str) -> Result<String, String> {
        let v = self
            .args
            .get(self.i)
            .cloned()
            .ok_or_else(|| format!("find: missing argument to `{opt}'"))?;
        self.i += 1;
        Ok(v)
    }
    fn primary(&mut self) -> PResult {
        let opt = self.args[self.i].clone();
        self.i += 1;
        Ok(match opt.as_str() {
            "-name" | "-iname" => Expr::Name(self.value(&opt)?, opt == "-iname"),
            "-path" | "-wholename" | "-ipath" | "-iwholename" => {
                Expr::Path(self.value(&opt)?, opt.starts_with("-i"))
            }
            "-regex" | "-iregex" => {
                let v = self.value(&opt)?;
                // findutils' default regex type is emacs; its basics match POSIX ERE closely
                // enough for anchored `.*\.txt` style patterns
                let bad = |e: posix::Error| format!("find: invalid regex {v}: {e:?}");
                let (t, alt) =
                    posix::translate(&v.replace("\\|", "|"), Dialect::Extended).map_err(bad)?;
                let re = Re::build(&format!("^(?:{t})$"), alt, opt == "-iregex").map_err(bad)?;
                Expr::Regex(Box::new(re))
            }
            "-type" | "-xtype" => {
                let v = self.value(&opt)?;
                let kinds: Vec<char> = v.split(',').filter_map(|s| s.chars().next()).collect();
                if let Some(bad) = kinds.iter().find(|c| !"fdlbcps".contains(**c)) {
                    return Err(format!("find: Unknown argument to -type: {bad}"));
                }
                Expr::Type(kinds)
            }
            "-empty" => Expr::Empty,
            "-size" => {
                let v = self.value(&opt)?;
                let (ord, rest) = match v.strip_prefix('+') {
                    Some(r) => (std::cmp::Ordering::Greater, r),
                    None => match v.strip_prefix('-') {
                        Some(r) => (std::cmp::Ordering::Less, r),
                        None => (std::cmp::Ordering::Equal, v.as_str()),
                    },
                };
                let (num, unit) = match rest.chars().last() {
                    Some(c) if c.is_ascii_alphabetic() => (&rest[..rest.len() - 1], c),
                    _ => (rest, 'b'),
                };
                let unit = match unit {
                    'b' => 512,
                    'c' => 1,
                    'w' => 2,
                    'k' => 1024,
                    'M' => 1 << 20,
                    'G' => 1 << 30,
                    _ => return Err(format!("find: invalid -size type `{unit}'")),
                };
                let n: u64 = num
                    .parse()
                    .map_err(|_| format!("find: invalid argument `{v}' to `-size'"))?;
                Expr::Size(ord, n, unit)
            }
            // resolved against the filesystem when the walk starts
            "-newer" => Expr::Path(format!("\0newer\0{}", self.value(&opt)?), false),
            "-perm" => {
                let v = self.value(&opt)?;
                let (kind, m) = match v.chars().next() {
                    Some(c @ ('-' | '/')) => (c, &v[1..]),
                    _ => ('=', v.as_str()),
                };
                let mode =
                    u32::from_str_radix(m, 8).map_err(|_| format!("find: invalid mode `{v}'"))?;
                Expr::Perm(mode, kind)
            }
            "-true" => Expr::Const(true),
            "-false" => Expr::Const(false),
            "-readable" | "-writable" => Expr::Const(true),
            "-executable" => Expr::Perm(0o111, '/'),
            "-print" => {
                self.has_action = true;
                Expr::Print(false)
            }
            "-print0" => {
                self.has_action = true;
                Expr::Print(true)
            }
            "-printf" => {
                self.has_action = true;
                Expr::Printf(self.value(&opt)?)
            }
            "-prune" => Expr::Prune,
            "-quit" => {
                self.has_action = true;
                Expr::Quit
            }
            "-delete" => {
                self.has_action = true;
                self.delete = true;
                Expr::Delete
            }
            "-exec" | "-execdir" => {
                self.has_action = true;
                let mut cmd = Vec::new();
                loop {
                    let Some(a) = self.args.get(self.i).cloned() else {
                        return Err(format!("find: missing argument to `{opt}'"));
                    };
                    self.i += 1;
                    if a == ";" {
                        break Expr::Exec(cmd, false, opt == "-execdir");
                    }
                    if a == "+" && cmd.last().is_some_and(|l: &String| l == "{}") {
                        cmd.pop();
                        break Expr::Exec(cmd, true, opt == "-execdir");
                    }
                    cmd.push(a);
                }
            }
            "-maxdepth" | "-mindepth" => {
                let v = self.value(&opt)?;
                let n: usize = v.parse().map_err(|_| {
                    format!("find: Expected a positive decimal integer argument to {opt}, but got `{v}'")
                })?;
                if opt == "-maxdepth" {
                    self.maxdepth = Some(n);
                } else {
                    self.mindepth = n;
                }
                Expr::Const(true)
            }
            "-depth" | "-d" | "-noleaf" | "-mount" | "-xdev" | "-ignore_readdir_race" => {
                if opt == "-depth" || opt == "-d" {
                    self.delete = true;
                }
                Expr::Const(true)
            }
            o if o.starts_with('-') => return Err(format!("unsupported:{o}")),
            o => return Err(format!("find: paths must precede expression: `{o}'")),
        })
    }
}

struct Walk {
    expr: Expr,
    maxdepth: Option<usize>,
    mindepth: usize,
    depth_first: bool,
    out: Vec<u8>,
    status: i32,
    quit: bool,
    /// `-exec ... +` batches: (command, paths).
    batches: Vec<(Vec<String>, Vec<String>)>,
    newer: std::collections::HashMap<String, i64>,
}

struct Entry<'a> {
    path: &'a str,
    name: &'a str,
    start: &'a str,
    ino: usize,
    depth: usize,
}

impl Walk {
    fn flush(&mut self, cx: &mut Ctx<'_, '_>) -> R<()> {
        if !self.out.is_empty() {
            let o = std::mem::take(&mut self.out);
            cx.out(&o)?;
        }
        Ok(())
    }

    fn eval(
        &mut self,
        cx: &mut Ctx<'_, '_>,
        e: &Expr,
        en: &Entry<'_>,
        prune: &mut bool,
    ) -> R<bool> {
        let node = cx.vfs().get(en.ino).clone();
        Ok(match e {
            Expr::And(a, b) => self.eval(cx, a, en, prune)? && self.eval(cx, b, en, prune)?,
            Expr::Or(a, b) => self.eval(cx, a, en, prune)? || self.eval(cx, b, en, prune)?,
            Expr::Comma(a, b) => {
                self.eval(cx, a, en, prune)?;
                self.eval(cx, b, en, prune)?
            }
            Expr::Not(a) => !self.eval(cx, a, en, prune)?,
            Expr::Name(p, icase) => {
                if *icase {
                    crate::glob::matches(&p.to_lowercase(), &en.name.to_lowercase(), false)
                } else {
                    crate::glob::matches(p, en.name, false)
                }
            }
            Expr::Path(p, icase) => {
                if let Some(f) = p.strip_prefix("\0newer\0") {
                    let t = self.newer.get(f).copied().unwrap_or(i64::MAX);
                    node.mtime > t
                } else if *icase {
                    crate::glob::matches(&p.to_lowercase(), &en.path.to_lowercase(), false)
                } else {
                    crate::glob::matches(p, en.path, false)
                }
            }
            Expr::Regex(re) => re.is_match(en.path.as_bytes()),
            Expr::Type(kinds) => {
                let c = match node.kind {
                    Kind::Dir(..) => 'd',
                    Kind::Symlink(_) => 'l',
                    Kind::Dev(_) => 'c',
                    _ => 'f',
                };
                kinds.contains(&c)
            }
            Expr::Empty => match &node.kind {
                Kind::Dir(m, _) => m.is_empty(),
                Kind::File(d) => d.is_empty(),
                _ => false,
            },
            Expr::Size(ord, n, unit) => {
                let size = node.size();
                let units = size.div_ceil(*unit);
                units.cmp(n) == *ord
            }
            Expr::Perm(m, kind) => {
                let mode = node.mode & 0o7777;
                match kind {
                    '-' => mode & m == *m,
                    '/' => *m == 0 || mode & m != 0,
                    _ => mode == *m,
                }
            }
            Expr::Const(b) => *b,
            Expr::Print(zero) => {
                self.out.extend_from_slice(en.path.as_bytes());
                self.out.push(if *zero { 0 } else { b'\n' });
                true
            }
            Expr::Printf(f) => {
                let s = printf(f, en, &node);
                self.out.extend_from_slice(s.as_bytes());
                true
            }
            Expr::Prune => {
                *prune = true;
                true
            }
            Expr::Quit => {
                self.quit = true;
                true
            }
            Expr::Delete => {
                let cwd = cx.cwd().to_string();
                let r = if node.is_dir() {
                    cx.vfs().rmdir(&cwd, en.path)
                } else {
                    cx.vfs().unlink(&cwd, en.path)
                };
                match r {
                    Ok(()) => true,
                    Err(e) => {
                        self.flush(cx)?;
                        cx.err_line(&format!("find: cannot delete '{}': {}", en.path, e.msg()));
                        self.status = 1;
                        false
                    }
                }
            }
            Expr::Exec(cmd, batch, indir) => {
                if *indir {
                    let cwd = cx.cwd().to_string();
                    let dir = match cx.vfs().resolve_parent(&cwd, en.path) {
                        Ok((d, _)) => cx.vfs().path_of(d),
                        Err(_) => cwd,
                    };
                    let here = format!("./{}", en.name);
                    let mut argv: Vec<String> =
                        cmd.iter().map(|a| a.replace("{}", &here)).collect();
                    if *batch {
                        argv.push(here);
                    }
                    self.flush(cx)?;
                    return Ok(cx.run_in(argv, Some(dir))? == 0);
                }
                if *batch {
                    let path = en.path.to_string();
                    match self.batches.iter_mut().find(|(c, _)| c == cmd) {
                        Some((_, paths)) => paths.push(path),
                        None => self.batches.push((cmd.clone(), vec![path])),
                    }
                    true
                } else {
                    let argv: Vec<String> = cmd.iter().map(|a| a.replace("{}", en.path)).collect();
                    self.flush(cx)?;
                    cx.run(argv)? == 0
                }
            }
        })
    }

    /// Visits `en` before its children: evaluates the expression (unless `-depth`), and
    /// returns its frame (the children to visit, when it is a directory find descends).
    fn enter(&mut self, cx: &mut Ctx<'_, '_>, en: &Entry<'_>, parent_len: usize) -> R<Frame> {
        cx.tick()?;
        if crate::shell::stop_due() {
            return Err(cx.interrupted());
        }
        let mut frame = Frame {
            ino: en.ino,
            depth: en.depth,
            name: en.name.to_string(),
            parent_len,
            here: false,
            entries: Vec::new(),
            next: 0,
        };
        if self.quit {
            return Ok(frame);
        }
        let is_dir = cx.vfs().get(en.ino).is_dir();
        let mut prune = false;
        let expr = self.expr.clone();
        frame.here = en.depth >= self.mindepth;
        if frame.here && !self.depth_first {
            self.eval(cx, &expr, en, &mut prune)?;
        }
        let deeper = self.maxdepth.is_none_or(|m| en.depth < m);
        if is_dir && !prune && deeper && !self.quit {
            frame.entries = cx.vfs().list(en.ino).unwrap_or_default();
        }
        Ok(frame)
    }

    /// Walks the tree at `path` (the operand `start`, named `name`, inode `ino`): each
    /// entry before its children (after them with `-depth`/`-delete`), children in name
    /// order. The walk keeps its own stack and one path buffer, so a tree of any depth is
    /// walked, as GNU's fts walks it (a recursion stopped silently at 4,096 levels).
    fn walk(&mut self, cx: &mut Ctx<'_, '_>, start: &str, name: &str, ino: usize) -> R<()> {
        let mut path = start.to_string();
        let root = Entry {
            path: &path,
            name,
            start,
            ino,
            depth: 0,
        };
        let first = self.enter(cx, &root, 0)?;
        let mut stack = vec![first];
        while let Some(top) = stack.last_mut() {
            if top.next < top.entries.len() && !self.quit {
                let (name, child) = std::mem::take(&mut top.entries[top.next]);
                top.next += 1;
                let depth = top.depth + 1;
                let parent_len = path.len();
                if !path.ends_with('/') {
                    path.push('/');
                }
                path.push_str(&name);
                let en = Entry {
                    path: &path,
                    name: &name,
                    start,
                    ino: child,
                    depth,
                };
                let f = self.enter(cx, &en, parent_len)?;
                stack.push(f);
                if self.out.len() > 1 << 16 {
                    self.flush(cx)?;
                }
                continue;
            }
            let Some(f) = stack.pop() else { break };
            if f.here && self.depth_first && !self.quit {
                // each entry's action (a -delete resolves its whole path) looks at the
                // clock: the fuzzer's 9,000-deep `find x -depth -delete` ran 18 s past a
                // 200 ms deadline
                if crate::shell::stop_due() {
                    return Err(cx.interrupted());
                }
                let expr = self.expr.clone();
                let en = Entry {
                    path: &path,
                    name: &f.name,
                    start,
                    ino: f.ino,
                    depth: f.depth,
                };
                let mut prune = false;
                self.eval(cx, &expr, &en, &mut prune)?;
            }
            if !stack.is_empty() {
                path.truncate(f.parent_len);
            }
        }
        Ok(())
    }
}

/// One entry of [`Walk::walk`]'s stack: a visited entry whose children are being walked.
struct Frame {
    ino: usize,
    depth: usize,
    name: String,
    /// The path's length before this entry's name was added.
    parent_len: usize,
    /// At or below `-mindepth`: the expression is evaluated for it.
    here: bool,
    entries: Vec<(String, usize)>,
    next: usize,
}

fn printf(f: &str, en: &Entry<'_>, node: &crate::vfs::Inode) -> String {
    let mut out = String::new();
    let mut it = f.chars().peekable();
    while let Some(c) = it.next() {
        match c {
            '\\' => match it.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some('0') => out.push('\0'),
                Some('\\') => out.push('\\'),
                Some(o) => {
                    out.push('\\');
                    out.push(o);
                }
                None => out.push('\\'),
            },
            '%' => match it.next() {
                Some('p') => out.push_str(en.path),
                Some('f') => out.push_str(en.name),
                Some('h') => match en.path.rfind('/') {
                    Some(0) => out.push('/'),
                    Some(i) => out.push_str(&en.path[..i]),
                    None => out.push('.'),
                },
                Some('P') => {
                    let rest = en.path.strip_prefix(en.start).unwrap_or(en.path);
                    out.push_str(rest.trim_start_matches('/'));
                }
                Some('s') => out.push_str(&node.size().to_string()),
                Some('d') => out.push_str(&en.depth.to_string()),
                Some('m') => out.push_str(&format!("{:o}", node.mode & 0o7777)),
                Some('y') => out.push(match node.kind {
                    Kind::Dir(..) => 'd',
                    Kind::Symlink(_) => 'l',
                    Kind::Dev(_) => 'c',
                    _ => 'f',
                }),
                Some('%') => out.push('%'),
                Some(o) => {
                    out.push('%');
                    out.push(o);
                }
                None => out.push('%'),
            },
            c => out.push(c),
        }
    }
    out
}

pub(super) fn main(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut i = 0;
    // leading -H -L -P
    while i < args.len() && matches!(args[i].as_str(), "-H" | "-L" | "-P") {
        i += 1;
    }
    let mut starts = Vec::new();
    while i < args.len() {
        let a = &args[i];
        if a.starts_with('-') && a.len() > 1 || a == "!" || a == "(" {
            break;
        }
        starts.push(a.clone());
        i += 1;
    }
    if starts.is_empty() {
        starts.push(".".into());
    }
    let mut p = Parse {
        args: &args[i..],
        i: 0,
        has_action: false,
        maxdepth: None,
        mindepth: 0,
        delete: false,
    };
    let expr = if p.args.is_empty() {
        Expr::Const(true)
    } else {
        match p.or() {
            Ok(e) if p.i < p.args.len() => {
                let _ = e;
                cx.err_line(&format!(
                    "find: unexpected extra predicate '{}'",
                    p.args[p.i]
                ));
                return Ok(TROUBLE);
            }
            Ok(e) => e,
            Err(m) => {
                if let Some(o) = m.strip_prefix("unsupported:") {
                    return cx.unsupported_status(&format!("find {o}"), TROUBLE);
                }
                cx.err_line(&m);
                return Ok(TROUBLE);
            }
        }
    };
    let expr = if p.has_action {
        expr
    } else {
        Expr::And(Box::new(expr), Box::new(Expr::Print(false)))
    };
    let mut newer = std::collections::HashMap::new();
    collect_newer(&expr, &mut |f: &str| {
        newer.insert(f.to_string(), 0);
    });
    let cwd = cx.cwd().to_string();
    for (f, t) in newer.iter_mut() {
        match cx.vfs().resolve(&cwd, f, true) {
            Ok(ino) => *t = cx.vfs().get(ino).mtime,
            Err(e) => {
                cx.err_line(&format!("find: '{f}': {}", e.msg()));
                return Ok(TROUBLE);
            }
        }
    }
    let mut w = Walk {
        expr,
        maxdepth: p.maxdepth,
        mindepth: p.mindepth,
        depth_first: p.delete,
        out: Vec::new(),
        status: 0,
        quit: false,
        batches: Vec::new(),
        newer,
    };
    for s in &starts {
        let ino = match cx.vfs().resolve(&cwd, s, false) {
            Ok(i) => i,
            Err(e) => {
                w.flush(cx)?;
                cx.err_line(&format!("find: '{s}': {}", e.msg()));
                w.status = 1;
                continue;
            }
        };
        let name = s.trim_end_matches('/').rsplit('/').next().unwrap_or(s);
        let name = if name.is_empty() { "/" } else { name };
        w.walk(cx, s, name, ino)?;
        if w.quit {
            break;
        }
    }
    w.flush(cx)?;
    for (cmd, paths) in std::mem::take(&mut w.batches) {
        let argv: Vec<String> = cmd.into_iter().chain(paths).collect();
        if cx.run(argv)? != 0 {
            w.status = 1;
        }
    }
    Ok(w.status)
}

fn collect_newer(e: &Expr, f: &mut dyn FnMut(&str)) {
    match e {
        Expr::And(a, b) | Expr::Or(a, b) | Expr::Comma(a, b) => {
            collect_newer(a, f);
            collect_newer(b, f);
        }
        Expr::Not(a) => collect_newer(a, f),
        Expr::Path(p, _) => {
            if let Some(x) = p.strip_prefix("\0newer\0") {
                f(x)
            }
        }
        _ => {}
    }
}
