//! Shell builtins (those that change or read the shell's own state) and `test`.

use brush_parser::ast;

use crate::shell::{AssignVal, Ctl, DeclArg, Interp, Shell, Value, Var, R};
use crate::vfs::Kind;

const BUILTINS: &[&str] = &[
    ".",
    ":",
    "[",
    "alias",
    "bg",
    "break",
    "builtin",
    "cd",
    "command",
    "continue",
    "declare",
    "dirs",
    "disown",
    "echo",
    "eval",
    "exec",
    "exit",
    "export",
    "false",
    "fg",
    "getopts",
    "hash",
    "jobs",
    "kill",
    "let",
    "local",
    "mapfile",
    "popd",
    "printf",
    "pushd",
    "pwd",
    "read",
    "readarray",
    "readonly",
    "return",
    "set",
    "shift",
    "shopt",
    "source",
    "test",
    "times",
    "trap",
    "true",
    "type",
    "typeset",
    "ulimit",
    "umask",
    "unalias",
    "unset",
    "wait",
];

pub fn is_builtin(name: &str) -> bool {
    BUILTINS.binary_search(&name).is_ok()
}

fn num_arg(s: Option<&String>, default: i64) -> Option<i64> {
    match s {
        None => Some(default),
        Some(s) => s.trim().parse().ok(),
    }
}

pub fn run(it: &mut Interp<'_>, sh: &mut Shell, argv: Vec<String>) -> R<i32> {
    // a million arguments (`set -- $(cat f)`) are freed a piece at a time
    let argv = crate::mem::PacedVec::new(argv);
    let name = argv[0].as_str();
    let args = &argv[1..];
    match name {
        ":" | "true" => Ok(0),
        "false" => Ok(1),
        "echo" => crate::utils::echo(it, sh, args),
        "printf" => crate::utils::printf_cmd(it, sh, args),
        "pwd" => {
            let mut c = sh.cwd.clone();
            if args.iter().any(|a| a == "-P") {
                if let Ok(ino) = it.w.vfs.resolve("/", &c, true) {
                    c = it.w.vfs.path_of(ino);
                }
            }
            it.out(sh, &format!("{c}\n"))?;
            Ok(0)
        }
        "test" | "[" => Ok(test_cmd(it, sh, name, args)),
        "exit" => {
            let n = match num_arg(args.first(), sh.status as i64) {
                Some(n) => n,
                None => {
                    it.err(
                        sh,
                        &format!("bash: exit: {}: numeric argument required", args[0]),
                    );
                    2
                }
            };
            Err(Ctl::Exit((n & 255) as i32))
        }
        "return" => {
            let n = match num_arg(args.first(), sh.status as i64) {
                Some(n) => n,
                None => {
                    it.err(
                        sh,
                        &format!("bash: return: {}: numeric argument required", args[0]),
                    );
                    2
                }
            };
            if sh.funcdepth == 0 && !sh.in_trap {
                it.err(
                    sh,
                    "bash: return: can only `return' from a function or sourced script",
                );
                return Ok(1);
            }
            Err(Ctl::Return((n & 255) as i32))
        }
        "break" | "continue" => {
            let n = num_arg(args.first(), 1).unwrap_or(1).max(1) as u32;
            if sh.loops == 0 {
                return Ok(0);
            }
            let n = n.min(sh.loops);
            Err(if name == "break" {
                Ctl::Break(n)
            } else {
                Ctl::Continue(n)
            })
        }
        "cd" => cd(it, sh, args),
        "pushd" => {
            let old = sh.cwd.clone();
            let Some(dir) = args.first() else {
                it.err(sh, "bash: pushd: no other directory");
                return Ok(1);
            };
            let st = cd(it, sh, std::slice::from_ref(dir))?;
            if st == 0 {
                sh.dirstack.push(old);
                print_dirs(it, sh)?;
            }
            Ok(st)
        }
        "popd" => {
            let Some(d) = sh.dirstack.pop() else {
                it.err(sh, "bash: popd: directory stack empty");
                return Ok(1);
            };
            let st = cd(it, sh, &[d])?;
            if st == 0 {
                print_dirs(it, sh)?;
            }
            Ok(st)
        }
        "dirs" => {
            print_dirs(it, sh)?;
            Ok(0)
        }
        "shift" => {
            let n = num_arg(args.first(), 1).unwrap_or(1);
            if n < 0 || n as usize > sh.pos.len() {
                return Ok(1);
            }
            shift_pos(it, sh, n as usize)?;
            Ok(0)
        }
        "set" => set_cmd(it, sh, args),
        "shopt" => shopt(it, sh, args),
        "unset" => {
            let mut funcs = false;
            let mut st = 0;
            for a in args {
                match a.as_str() {
                    "-f" => funcs = true,
                    "-v" => funcs = false,
                    _ => {
                        if funcs {
                            sh.funcs.remove(a);
                        } else if let Some((n, idx)) =
                            a.strip_suffix(']').and_then(|x| x.split_once('['))
                        {
                            let idx = idx.to_string();
                            let key = match sh.vars.get(n).map(|v| &v.value) {
                                Some(Value::Assoc(_)) => Some(it.expand_nosplit_str(sh, &idx)?),
                                Some(Value::Arr(m)) => {
                                    let len = m
                                        .keys()
                                        .next_back()
                                        .map(|k| k.saturating_add(1))
                                        .unwrap_or(0);
                                    let i = it.arith_text(sh, &idx)?.unwrap_or(0);
                                    Some(
                                        (if i < 0 { len.saturating_add(i) } else { i }).to_string(),
                                    )
                                }
                                _ => None,
                            };
                            if let (Some(k), Some(v)) = (key, sh.vars.get_mut(n)) {
                                match &mut v.value {
                                    Value::Assoc(m) => {
                                        m.remove(&k);
                                    }
                                    Value::Arr(m) => {
                                        m.remove(&k.parse::<i64>().unwrap_or(0));
                                    }
                                    _ => {}
                                }
                            }
                        } else if sh.vars.contains_key(a) {
                            if let Err(m) = sh.unset(a) {
                                it.err(sh, &format!("bash: unset: {m}"));
                                st = 1;
                            }
                        } else {
                            sh.funcs.remove(a);
                        }
                    }
                }
            }
            Ok(st)
        }
        "eval" => {
            let script = args.join(" ");
            it.run_script(sh, &script)
        }
        "source" | "." => {
            let Some(f) = args.first() else {
                it.err(sh, "bash: source: filename argument required");
                return Ok(2);
            };
            let path = if f.contains('/') {
                Some(f.clone())
            } else {
                it.find_program(sh, f)?.or_else(|| Some(f.clone()))
            };
            let data = match it.read_file(sh, path.as_deref().unwrap_or(f)) {
                Ok(d) => d,
                Err(_) => match it.read_file(sh, f) {
                    Ok(d) => d,
                    Err(e) => {
                        it.err(sh, &format!("bash: {f}: {}", e.msg()));
                        return Ok(1);
                    }
                },
            };
            // decoded in pieces within the budget, looking at the clock
            let text = it.decode_output(&data)?;
            drop(data);
            let saved = if args.len() > 1 {
                let pos = it.positional(&args[1..])?;
                Some(std::mem::replace(&mut sh.pos, pos))
            } else {
                None
            };
            sh.funcdepth += 1;
            let r = it.run_script(sh, &text);
            sh.funcdepth -= 1;
            if let Some(p) = saved {
                crate::shell::drop_pos(std::mem::replace(&mut sh.pos, p));
            }
            match r {
                Err(Ctl::Return(s)) => Ok(s),
                other => other,
            }
        }
        "exec" => {
            if args.is_empty() {
                return Ok(0);
            }
            let st = it.dispatch(sh, args.to_vec())?;
            // the shell process is replaced: its EXIT trap never runs
            sh.traps.remove("EXIT");
            Err(Ctl::Exit(st))
        }
        "command" => {
            let mut i = 0;
            let mut v = false;
            let mut vv = false;
            while i < args.len() && args[i].starts_with('-') && args[i].len() > 1 {
                match args[i].as_str() {
                    "-v" => v = true,
                    "-V" => vv = true,
                    "-p" => {}
                    "--" => {
                        i += 1;
                        break;
                    }
                    _ => {}
                }
                i += 1;
            }
            let rest = args.get(i..).unwrap_or(&[]);
            if v || vv {
                let mut st = 0;
                for n in rest {
                    match describe(it, sh, n)? {
                        Some((kind, text)) => {
                            let line = if vv {
                                describe_long(n, &kind, &text)
                            } else if kind == "file" {
                                text
                            } else {
                                n.clone()
                            };
                            it.out(sh, &format!("{line}\n"))?;
                        }
                        None => {
                            if vv {
                                it.err(sh, &format!("bash: command: {n}: not found"));
                            }
                            st = 1;
                        }
                    }
                }
                return Ok(st);
            }
            if rest.is_empty() {
                return Ok(0);
            }
            if is_builtin(&rest[0]) {
                return run(it, sh, rest.to_vec());
            }
            it.exec_external(sh, rest.to_vec())
        }
        "builtin" => {
            if args.is_empty() {
                return Ok(0);
            }
            if !is_builtin(&args[0]) {
                it.err(
                    sh,
                    &format!("bash: builtin: {}: not a shell builtin", args[0]),
                );
                return Ok(1);
            }
            run(it, sh, args.to_vec())
        }
        "type" => {
            let mut t = false;
            let mut p = false;
            let mut a = false;
            let mut names = Vec::new();
            for x in args {
                match x.as_str() {
                    "-t" => t = true,
                    "-p" | "-P" => p = true,
                    "-a" => a = true,
                    _ => names.push(x.clone()),
                }
            }
            let _ = a;
            let mut st = 0;
            for n in names {
                // one PATH walk per name: `type {1..65536}` must still end at its deadline
                it.tick()?;
                match describe(it, sh, &n)? {
                    Some((kind, text)) => {
                        let line = if t {
                            kind.clone()
                        } else if p {
                            if kind == "file" {
                                text.clone()
                            } else {
                                continue;
                            }
                        } else {
                            describe_long(&n, &kind, &text)
                        };
                        it.out(sh, &format!("{line}\n"))?;
                    }
                    None => {
                        if !t && !p {
                            it.err(sh, &format!("bash: type: {n}: not found"));
                        }
                        st = 1;
                    }
                }
            }
            Ok(st)
        }
        "hash" => {
            if args.is_empty() {
                it.out(sh, "hash: hash table empty\n")?;
            }
            // each name is looked up on PATH: one that is not there fails, as in bash
            let mut st = 0;
            for a in args.iter().filter(|a| !a.starts_with('-')) {
                it.tick()?;
                if !a.contains('/') && it.find_program(sh, a)?.is_none() {
                    it.err(sh, &format!("bash: line 1: hash: {a}: not found"));
                    st = 1;
                }
            }
            Ok(st)
        }
        "alias" | "unalias" | "ulimit" | "times" => Ok(0),
        "umask" => {
            match args.first() {
                None => {
                    let m = sh.umask;
                    it.out(sh, &format!("{m:04o}\n"))?;
                }
                Some(a) if a == "-S" => {
                    let m = !sh.umask & 0o777;
                    let f = |b: u32| {
                        let mut s = String::new();
                        if b & 4 != 0 {
                            s.push('r');
                        }
                        if b & 2 != 0 {
                            s.push('w');
                        }
                        if b & 1 != 0 {
                            s.push('x');
                        }
                        s
                    };
                    let line = format!("u={},g={},o={}\n", f(m >> 6), f((m >> 3) & 7), f(m & 7));
                    it.out(sh, &line)?;
                }
                Some(a) => match u32::from_str_radix(a, 8) {
                    Ok(m) => sh.umask = m & 0o777,
                    Err(_) => return it.unsupported(sh, "umask symbolic mode"),
                },
            }
            Ok(0)
        }
        "export" | "readonly" | "declare" | "typeset" | "local" => {
            let decl = args.iter().cloned().map(DeclArg::Word).collect();
            declare(it, sh, name, decl)
        }
        "let" => {
            let mut v = 0;
            if args.is_empty() {
                it.err(sh, "bash: let: expression expected");
                return Ok(1);
            }
            for a in args {
                match it.eval_arith_str(sh, a)? {
                    Ok(x) => v = x,
                    Err(m) => {
                        it.err(sh, &format!("bash: let: {m}"));
                        return Ok(1);
                    }
                }
            }
            Ok(i32::from(v == 0))
        }
        "read" => read_cmd(it, sh, args),
        "mapfile" | "readarray" => mapfile(it, sh, args),
        "trap" => trap(it, sh, args),
        "wait" => {
            let mut st = 0;
            if args.is_empty() {
                for i in 0..sh.jobs.len() {
                    it.wait_job(sh, i)?;
                }
                sh.jobs.clear();
                return Ok(0);
            }
            for a in args {
                if a == "-n" {
                    if !sh.jobs.is_empty() {
                        let i = (0..sh.jobs.len())
                            .min_by_key(|&i| sh.jobs[i].finish)
                            .unwrap_or(0);
                        st = it.wait_job(sh, i)?;
                        sh.jobs.remove(i);
                    } else {
                        st = 127;
                    }
                    continue;
                }
                let pid = a.trim_start_matches('%');
                let idx = if a.starts_with('%') {
                    pid.parse::<usize>()
                        .ok()
                        .and_then(|n| n.checked_sub(1))
                        .filter(|&n| n < sh.jobs.len())
                } else {
                    pid.parse::<u32>()
                        .ok()
                        .and_then(|p| sh.jobs.iter().position(|j| j.pid == p))
                };
                match idx {
                    Some(i) => st = it.wait_job(sh, i)?,
                    None => {
                        it.err(
                            sh,
                            &format!("bash: wait: pid {a} is not a child of this shell"),
                        );
                        st = 127;
                    }
                }
            }
            Ok(st)
        }
        "jobs" => {
            let mut lines = String::new();
            let now = it.w.clock_ns;
            let n = sh.jobs.len();
            for (i, j) in sh.jobs.iter().enumerate() {
                let mark = if i + 1 == n {
                    '+'
                } else if i + 2 == n {
                    '-'
                } else {
                    ' '
                };
                let state = if j.finish > now {
                    "Running".to_string()
                } else {
                    match j.status {
                        Some(0) => "Done".to_string(),
                        Some(s) => format!("Exit {s}"),
                        None => "Running".to_string(),
                    }
                };
                if args.iter().any(|a| a == "-p") {
                    lines.push_str(&format!("{}\n", j.pid));
                } else {
                    lines.push_str(&format!("[{}]{}  {:<24}{} &\n", i + 1, mark, state, j.text));
                }
            }
            it.out(sh, &lines)?;
            Ok(0)
        }
        "kill" => crate::utils::kill(it, sh, args),
        "disown" => {
            if args.is_empty() || args.iter().any(|a| a == "-a") {
                sh.jobs.clear();
            } else {
                for a in args {
                    let pid = a.trim_start_matches('%');
                    if a.starts_with('%') {
                        if let Some(i) = pid.parse::<usize>().ok().and_then(|n| n.checked_sub(1)) {
                            if i < sh.jobs.len() {
                                sh.jobs.remove(i);
                            }
                        }
                    } else if let Ok(p) = pid.parse::<u32>() {
                        sh.jobs.retain(|j| j.pid != p);
                    }
                }
            }
            Ok(0)
        }
        "getopts" => getopts(it, sh, args),
        "bg" | "fg" => it.unsupported(sh, &format!("{name} (job control)")),
        _ => it.unsupported(sh, name),
    }
}

fn print_dirs(it: &mut Interp<'_>, sh: &mut Shell) -> R<()> {
    let home = sh.getv("HOME");
    let tilde = |p: &str| {
        if !home.is_empty() && (p == home || p.starts_with(&format!("{home}/"))) {
            format!("~{}", &p[home.len()..])
        } else {
            p.to_string()
        }
    };
    let mut parts = vec![tilde(&sh.cwd)];
    for d in sh.dirstack.iter().rev() {
        parts.push(tilde(d));
    }
    let line = format!("{}\n", parts.join(" "));
    it.out(sh, &line)?;
    Ok(())
}

/// Normalises `..` and `.` in an absolute path lexically.
pub fn normalize(p: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for c in p.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    format!("/{}", out.join("/"))
}

fn cd(it: &mut Interp<'_>, sh: &mut Shell, args: &[String]) -> R<i32> {
    let mut physical = false;
    let mut i = 0;
    while let Some(a) = args.get(i) {
        match a.as_str() {
            "-P" => physical = true,
            "-L" => physical = false,
            "--" => {
                i += 1;
                break;
            }
            _ => break,
        }
        i += 1;
    }
    let args: Vec<&String> = args[i..].iter().collect();
    let target = match args.first() {
        None => match sh.get("HOME") {
            Some(h) => h,
            None => {
                it.err(sh, "bash: cd: HOME not set");
                return Ok(1);
            }
        },
        Some(a) if a.as_str() == "-" => {
            let o = sh.getv("OLDPWD");
            it.out(sh, &format!("{o}\n"))?;
            o
        }
        Some(a) => (*a).clone(),
    };
    let mut abs = normalize(&crate::vfs::Vfs::absolute(&sh.cwd, &target));
    // the path as written must lead somewhere too: `cd missing/..` fails as in bash
    if let Err(e) = it.w.vfs.resolve(&sh.cwd, &target, true) {
        it.err(sh, &format!("bash: line 1: cd: {target}: {}", e.msg()));
        return Ok(1);
    }
    match it.w.vfs.resolve("/", &abs, true) {
        Ok(ino) if it.w.vfs.get(ino).is_dir() => {
            if physical {
                abs = it.w.vfs.path_of(ino);
            }
            let old = std::mem::replace(&mut sh.cwd, abs.clone());
            let _ = sh.set("OLDPWD", old);
            let _ = sh.set("PWD", abs);
            Ok(0)
        }
        Ok(_) => {
            it.err(sh, &format!("bash: line 1: cd: {target}: Not a directory"));
            Ok(1)
        }
        Err(e) => {
            it.err(sh, &format!("bash: line 1: cd: {target}: {}", e.msg()));
            Ok(1)
        }
    }
}

/// What a name is: (`type -t` kind, detail).
/// Errors: the timeout or cancellation, looked at while PATH is searched.
pub fn describe(it: &mut Interp<'_>, sh: &Shell, n: &str) -> R<Option<(String, String)>> {
    if crate::shell::is_keyword(n) {
        return Ok(Some(("keyword".into(), String::new())));
    }
    if let Some(f) = sh.funcs.get(n) {
        return Ok(Some(("function".into(), format!("{n} () \n{}", f.0))));
    }
    if is_builtin(n) {
        return Ok(Some(("builtin".into(), String::new())));
    }
    Ok(it
        .find_program(sh, n)?
        .filter(|p| it.w.vfs.resolve(&sh.cwd, p, true).is_ok())
        .map(|p| ("file".into(), p)))
}

fn describe_long(n: &str, kind: &str, text: &str) -> String {
    match kind {
        "keyword" => format!("{n} is a shell keyword"),
        "function" => format!("{n} is a function\n{text}"),
        "builtin" => format!("{n} is a shell builtin"),
        _ => format!("{n} is {text}"),
    }
}

fn set_opt(sh: &mut Shell, name: &str, on: bool) -> bool {
    let o = &mut sh.opts;
    match name {
        "errexit" | "e" => o.errexit = on,
        "nounset" | "u" => o.nounset = on,
        "pipefail" => o.pipefail = on,
        "noclobber" | "C" => o.noclobber = on,
        "noglob" | "f" => o.noglob = on,
        "xtrace" | "x" => o.xtrace = on,
        "allexport" | "a" => o.allexport = on,
        "errtrace" | "E" => o.errtrace = on,
        "noexec" | "n" => o.noexec = on,
        "verbose"
        | "v"
        | "monitor"
        | "m"
        | "hashall"
        | "h"
        | "braceexpand"
        | "B"
        | "posix"
        | "notify"
        | "b"
        | "interactive-comments"
        | "emacs"
        | "vi"
        | "ignoreeof"
        | "histexpand"
        | "H"
        | "history"
        | "functrace"
        | "T"
        | "physical"
        | "P"
        | "nolog"
        | "onecmd"
        | "t"
        | "keyword"
        | "k"
        | "privileged"
        | "p" => {}
        _ => return false,
    }
    true
}

/// The value of a `set -o` option by its long name (`None` for a name bash does not have).
fn set_o_value(sh: &Shell, name: &str) -> Option<bool> {
    let o = &sh.opts;
    Some(match name {
        "errexit" => o.errexit,
        "nounset" => o.nounset,
        "pipefail" => o.pipefail,
        "noclobber" => o.noclobber,
        "noglob" => o.noglob,
        "xtrace" => o.xtrace,
        "allexport" => o.allexport,
        "errtrace" => o.errtrace,
        "noexec" => o.noexec,
        "hashall" | "braceexpand" | "interactive-comments" => true,
        "verbose" | "monitor" | "posix" | "notify" | "emacs" | "vi" | "ignoreeof"
        | "histexpand" | "history" | "functrace" | "physical" | "nolog" | "onecmd" | "keyword"
        | "privileged" => false,
        _ => return None,
    })
}

/// `shift n`. Shifting a long list moves (or, shared with a subshell or a caller, copies)
/// all of it: a long one looks at the clock first, copies [`crate::shell::ITEMS_PER_CHECK`]
/// at a time and frees what it drops a piece at a time, so a loop of `shift`s over a
/// million parameters ends at its deadline (each used to be a step of milliseconds with a
/// look at the clock only every 256 commands).
fn shift_pos(it: &mut Interp<'_>, sh: &mut Shell, n: usize) -> R<()> {
    let per = crate::shell::ITEMS_PER_CHECK;
    if sh.pos.len() <= per {
        std::rc::Rc::make_mut(&mut sh.pos).drain(..n);
        return Ok(());
    }
    it.check_time()?;
    match std::rc::Rc::get_mut(&mut sh.pos) {
        Some(v) => {
            if n > per {
                crate::mem::drop_paced(v.drain(..n).collect::<Vec<_>>());
            } else {
                v.drain(..n);
            }
        }
        None => {
            let mut kept = Vec::with_capacity(sh.pos.len() - n);
            for (i, p) in sh.pos[n..].iter().enumerate() {
                if i % per == per - 1 && it.check_time().is_err() {
                    crate::mem::bury(kept);
                    return Err(it.interrupted());
                }
                kept.push(p.clone());
            }
            sh.pos = std::rc::Rc::new(kept);
        }
    }
    Ok(())
}

fn set_cmd(it: &mut Interp<'_>, sh: &mut Shell, args: &[String]) -> R<i32> {
    if args.is_empty() {
        let names = sorted_names(it, sh.vars.keys().map(String::as_str))?;
        let mut l = Listing::new();
        for n in names {
            if let Some(v) = sh.vars.get(n) {
                l.set_line(it, sh, n, v)?;
            }
        }
        l.flush(it, sh)?;
        return Ok(0);
    }
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a == "--" {
            let pos = it.positional(&args[i + 1..])?;
            crate::shell::drop_pos(std::mem::replace(&mut sh.pos, pos));
            return Ok(0);
        }
        if a == "-o" || a == "+o" {
            let on = a == "-o";
            match args.get(i + 1) {
                Some(name) => {
                    if !set_opt(sh, name, on) {
                        it.err(sh, &format!("bash: set: {name}: invalid option name"));
                        return Ok(2);
                    }
                    i += 2;
                    continue;
                }
                None => {
                    let o = sh.opts.clone();
                    let mut out = String::new();
                    for (n, v) in [
                        ("errexit", o.errexit),
                        ("noclobber", o.noclobber),
                        ("noglob", o.noglob),
                        ("nounset", o.nounset),
                        ("pipefail", o.pipefail),
                        ("xtrace", o.xtrace),
                    ] {
                        if on {
                            out.push_str(&format!("{n:<15}\t{}\n", if v { "on" } else { "off" }));
                        } else {
                            out.push_str(&format!("set {}o {n}\n", if v { "-" } else { "+" }));
                        }
                    }
                    it.out(sh, &out)?;
                    return Ok(0);
                }
            }
        }
        if (a.starts_with('-') || a.starts_with('+')) && a.len() > 1 {
            let on = a.starts_with('-');
            let mut consumed = 0;
            for c in a[1..].chars() {
                if c == 'o' {
                    consumed += 1;
                    let Some(name) = args.get(i + consumed) else {
                        it.err(sh, "bash: set: -o: option requires an argument");
                        return Ok(2);
                    };
                    if !set_opt(sh, name, on) {
                        it.err(sh, &format!("bash: set: {name}: invalid option name"));
                        return Ok(2);
                    }
                    continue;
                }
                if !set_opt(sh, &c.to_string(), on) {
                    it.err(sh, &format!("bash: set: -{c}: invalid option"));
                    return Ok(2);
                }
            }
            i += 1 + consumed;
            continue;
        }
        if a == "-" {
            let pos = it.positional(&args[i + 1..])?;
            crate::shell::drop_pos(std::mem::replace(&mut sh.pos, pos));
            return Ok(0);
        }
        let pos = it.positional(&args[i..])?;
        crate::shell::drop_pos(std::mem::replace(&mut sh.pos, pos));
        return Ok(0);
    }
    Ok(0)
}

fn shopt(it: &mut Interp<'_>, sh: &mut Shell, args: &[String]) -> R<i32> {
    let mut mode = None;
    let mut quiet = false;
    let mut print = false;
    let mut set_o = false;
    let mut names = Vec::new();
    for a in args {
        match a.as_str() {
            _ if a.len() > 1 && a.starts_with('-') && names.is_empty() => {
                for c in a[1..].chars() {
                    match c {
                        's' => mode = Some(true),
                        'u' => mode = Some(false),
                        'q' => quiet = true,
                        'p' => print = true,
                        'o' => set_o = true,
                        _ => {
                            it.err(sh, &format!("bash: shopt: -{c}: invalid option"));
                            it.err(sh, "shopt: usage: shopt [-pqsu] [-o] [optname ...]");
                            return Ok(2);
                        }
                    }
                }
            }
            _ => names.push(a.clone()),
        }
    }
    let mut st = 0;
    if set_o {
        // `shopt -o` works on the `set -o` options
        for n in names {
            let Some(on) = set_o_value(sh, &n) else {
                it.err(sh, &format!("bash: shopt: {n}: invalid option name"));
                st = 1;
                continue;
            };
            match mode {
                Some(v) => {
                    set_opt(sh, &n, v);
                }
                None => {
                    if !on {
                        st = 1;
                    }
                    if print {
                        it.out(sh, &format!("set {}o {n}\n", if on { "-" } else { "+" }))?;
                    } else if !quiet {
                        it.out(sh, &format!("{n:<15}\t{}\n", if on { "on" } else { "off" }))?;
                    }
                }
            }
        }
        return Ok(st);
    }
    for n in names {
        let o = &mut sh.opts;
        let slot: Option<&mut bool> = match n.as_str() {
            "nullglob" => Some(&mut o.nullglob),
            "failglob" => Some(&mut o.failglob),
            "extglob" => Some(&mut o.extglob),
            "globstar" => Some(&mut o.globstar),
            "dotglob" => Some(&mut o.dotglob),
            "nocasematch" => Some(&mut o.nocasematch),
            "lastpipe" => Some(&mut o.lastpipe),
            "expand_aliases"
            | "inherit_errexit"
            | "nocaseglob"
            | "checkwinsize"
            | "sourcepath"
            | "globasciiranges"
            | "xpg_echo"
            | "huponexit"
            | "progcomp"
            | "promptvars"
            | "interactive_comments"
            | "extquote"
            | "cmdhist"
            | "histappend"
            | "direxpand"
            | "dirspell"
            | "cdspell" => None,
            _ => {
                it.err(sh, &format!("bash: shopt: {n}: invalid shell option name"));
                st = 1;
                continue;
            }
        };
        match (mode, slot) {
            (Some(v), Some(s)) => *s = v,
            (Some(_), None) => {}
            (None, s) => {
                let on = s.map(|b| *b).unwrap_or(false);
                if !on {
                    st = 1;
                }
                if print {
                    it.out(sh, &format!("shopt {} {n}\n", if on { "-s" } else { "-u" }))?;
                } else if !quiet {
                    it.out(sh, &format!("{n:<15}\t{}\n", if on { "on" } else { "off" }))?;
                }
            }
        }
    }
    Ok(st)
}

/// Bytes a [`Listing`] builds before it writes them out.
const LISTING_FLUSH_BYTES: usize = 64 << 10;

/// How a [`Listing`] quotes a value or a key.
#[derive(Clone, Copy, PartialEq)]
enum Quote {
    /// As it is.
    Plain,
    /// `'...'`, a quote written `'\''` (bash's `sh_single_quote`).
    Single,
    /// `"..."` with `\ " $` and `` ` `` escaped (bash's `sh_double_quote`).
    Double,
    /// `$'...'` (bash's `ansic_quote`, [`crate::utils::ansi_quote_into`]).
    Ansic,
}

/// The text of a listing (`declare -p`, `export -p`, `readonly -p`, `local`, `set`,
/// `declare -f`), written to stdout as it is built, [`LISTING_FLUSH_BYTES`] at a time, so
/// it is held to the output and memory budgets as any write is. It looks at the clock
/// every [`crate::shell::ITEMS_PER_CHECK`] items (variables, elements) and every
/// [`crate::shell::CHUNK_BYTES`] of a value: built in one step, the listing of a huge
/// environment ran far past the deadline (issue 16, the 10-minute fuzz run with seed 1,
/// case 15705: `REPLY+=$(local)`).
struct Listing {
    out: String,
    items: usize,
}

/// `s` in pieces of about [`crate::shell::CHUNK_BYTES`], cut at character boundaries.
fn pieces(s: &str) -> impl Iterator<Item = &str> {
    let mut rest = s;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut end = rest.len().min(crate::shell::CHUNK_BYTES);
        while !rest.is_char_boundary(end) {
            end += 1;
        }
        let (piece, tail) = rest.split_at(end);
        rest = tail;
        Some(piece)
    })
}

/// Whether bash writes `s` as `$'...'` (its `ansic_shouldquote`: a character that is not
/// printable); `Err` when the command must stop part-way through a long value.
fn should_ansic(it: &Interp<'_>, s: &str) -> R<bool> {
    for piece in pieces(s) {
        if piece.chars().any(|c| c.is_control()) {
            return Ok(true);
        }
        if s.len() > crate::shell::CHUNK_BYTES {
            it.check_time()?;
        }
    }
    Ok(false)
}

/// Whether `s` holds a character the shell would interpret (bash's
/// `sh_contains_shell_metas`): then `set` single-quotes a value and `declare -p`
/// double-quotes an associative array's key.
fn has_shell_metas(s: &str) -> bool {
    let b = s.as_bytes();
    b.iter().enumerate().any(|(i, c)| match c {
        b' ' | b'\t' | b'\n' | b'\'' | b'"' | b'\\' | b'|' | b'&' | b';' | b'(' | b')' | b'<'
        | b'>' | b'!' | b'{' | b'}' | b'*' | b'[' | b'?' | b']' | b'^' | b'$' | b'`' => true,
        b'~' => i == 0 || b[i - 1] == b'=' || b[i - 1] == b':',
        b'#' => i == 0,
        _ => false,
    })
}

impl Listing {
    fn new() -> Self {
        Listing {
            out: String::new(),
            items: 0,
        }
    }

    /// Counts one item; every [`crate::shell::ITEMS_PER_CHECK`]th looks at the clock and
    /// the memory budget.
    fn item(&mut self, it: &Interp<'_>) -> R<()> {
        self.items += 1;
        if self.items.is_multiple_of(crate::shell::ITEMS_PER_CHECK) {
            it.check_time()?;
            it.check_memory()?;
        }
        Ok(())
    }

    fn push(&mut self, it: &mut Interp<'_>, sh: &Shell, s: &str) -> R<()> {
        self.out.push_str(s);
        if self.out.len() >= LISTING_FLUSH_BYTES {
            self.flush(it, sh)?;
        }
        Ok(())
    }

    /// Writes out what is built.
    fn flush(&mut self, it: &mut Interp<'_>, sh: &Shell) -> R<()> {
        if !self.out.is_empty() {
            it.out(sh, &self.out)?;
            self.out.clear();
        }
        Ok(())
    }

    /// `s` quoted as `how`, a piece at a time.
    fn quoted(&mut self, it: &mut Interp<'_>, sh: &Shell, s: &str, how: Quote) -> R<()> {
        self.push(
            it,
            sh,
            match how {
                Quote::Plain => "",
                Quote::Single => "'",
                Quote::Double => "\"",
                Quote::Ansic => "$'",
            },
        )?;
        let big = s.len() > crate::shell::CHUNK_BYTES;
        for piece in pieces(s) {
            match how {
                Quote::Plain => self.out.push_str(piece),
                Quote::Single => {
                    for (i, part) in piece.split('\'').enumerate() {
                        if i > 0 {
                            self.out.push_str("'\\''");
                        }
                        self.out.push_str(part);
                    }
                }
                Quote::Double => {
                    for c in piece.chars() {
                        if matches!(c, '\\' | '"' | '$' | '`') {
                            self.out.push('\\');
                        }
                        self.out.push(c);
                    }
                }
                Quote::Ansic => crate::utils::ansi_quote_into(&mut self.out, piece),
            }
            self.push(it, sh, "")?;
            if big {
                it.check_time()?;
            }
        }
        self.push(
            it,
            sh,
            match how {
                Quote::Plain => "",
                Quote::Single => "'",
                Quote::Double => "\"",
                Quote::Ansic => "'",
            },
        )
    }

    /// A value as `declare -p` writes it: `$'...'` when it holds a control character,
    /// else double-quoted.
    fn value(&mut self, it: &mut Interp<'_>, sh: &Shell, s: &str) -> R<()> {
        let how = if should_ansic(it, s)? {
            Quote::Ansic
        } else {
            Quote::Double
        };
        self.quoted(it, sh, s, how)
    }

    /// An array's elements as bash writes them after `name=`: `([0]="x" [1]=$'a\nb')`, an
    /// associative array's `([k]="v" ["x y"]="w" )` (each pair followed by a space, keys
    /// quoted when they hold shell characters).
    fn elements(&mut self, it: &mut Interp<'_>, sh: &Shell, v: &Value) -> R<()> {
        match v {
            Value::Str(s) => self.value(it, sh, s),
            Value::Arr(m) => {
                self.push(it, sh, "(")?;
                for (i, (k, e)) in m.iter().enumerate() {
                    self.item(it)?;
                    self.push(it, sh, &format!("{}[{k}]=", if i > 0 { " " } else { "" }))?;
                    self.value(it, sh, e)?;
                }
                self.push(it, sh, ")")
            }
            Value::Assoc(m) => {
                self.push(it, sh, "(")?;
                for (k, e) in m.iter() {
                    self.item(it)?;
                    self.push(it, sh, "[")?;
                    let how = if should_ansic(it, k)? {
                        Quote::Ansic
                    } else if has_shell_metas(k) || k == "@" || k == "*" {
                        Quote::Double
                    } else {
                        Quote::Plain
                    };
                    self.quoted(it, sh, k, how)?;
                    self.push(it, sh, "]=")?;
                    self.value(it, sh, e)?;
                    self.push(it, sh, " ")?;
                }
                self.push(it, sh, ")")
            }
        }
    }

    /// One `declare -FLAGS name=VALUE` line, as `declare -p` and `export -p` print a
    /// variable (bash's `print_assignment` after its attributes, in bash's order).
    fn declare_line(&mut self, it: &mut Interp<'_>, sh: &Shell, n: &str, v: &Var) -> R<()> {
        self.item(it)?;
        let mut flags = String::new();
        match v.value {
            Value::Arr(_) => flags.push('a'),
            Value::Assoc(_) => flags.push('A'),
            Value::Str(_) => {}
        }
        for (on, c) in [
            (v.integer, 'i'),
            (v.nameref, 'n'),
            (v.readonly, 'r'),
            (v.exported, 'x'),
        ] {
            if on {
                flags.push(c);
            }
        }
        if flags.is_empty() {
            flags.push('-');
        }
        self.push(it, sh, &format!("declare -{flags} {n}="))?;
        self.elements(it, sh, &v.value)?;
        self.push(it, sh, "\n")
    }

    /// One `name=VALUE` line as `set` prints a variable: a scalar as it is, single-quoted
    /// when it holds shell characters, `$'...'` when it holds control characters (bash's
    /// `print_var_value`); an array as `declare -p` writes its elements.
    fn set_line(&mut self, it: &mut Interp<'_>, sh: &Shell, n: &str, v: &Var) -> R<()> {
        self.item(it)?;
        self.push(it, sh, &format!("{n}="))?;
        match &v.value {
            Value::Str(s) => {
                let how = if should_ansic(it, s)? {
                    Quote::Ansic
                } else if has_shell_metas(s) {
                    Quote::Single
                } else {
                    Quote::Plain
                };
                self.quoted(it, sh, s, how)?;
            }
            other => self.elements(it, sh, other)?,
        }
        self.push(it, sh, "\n")
    }
}

/// The names of `names` in byte order (bash sorts a listing with `strcmp`), sorted a
/// piece at a time: each [`crate::shell::ITEMS_PER_CHECK`] insertions look at the clock.
fn sorted_names<'a>(
    it: &Interp<'_>,
    names: impl Iterator<Item = &'a str>,
) -> R<std::collections::BTreeSet<&'a str>> {
    let mut set = std::collections::BTreeSet::new();
    for (i, n) in names.enumerate() {
        if i % crate::shell::ITEMS_PER_CHECK == crate::shell::ITEMS_PER_CHECK - 1 {
            it.check_time()?;
        }
        set.insert(n);
    }
    Ok(set)
}

/// `declare`/`typeset`/`local`/`export`/`readonly`.
pub fn declare(it: &mut Interp<'_>, sh: &mut Shell, cmd: &str, args: Vec<DeclArg>) -> R<i32> {
    let mut flags_on = String::new();
    let mut flags_off = String::new();
    let mut items = Vec::new();
    let mut opts_done = false;
    for a in args {
        match a {
            DeclArg::Word(w)
                if !opts_done && (w.starts_with('-') || w.starts_with('+')) && w.len() > 1 =>
            {
                if w == "--" {
                    opts_done = true;
                } else if let Some(f) = w.strip_prefix('-') {
                    flags_on.push_str(f);
                } else {
                    flags_off.push_str(&w[1..]);
                }
            }
            other => {
                opts_done = true;
                items.push(other);
            }
        }
    }
    if cmd != "export" {
        for f in ['l', 'u', 'c'] {
            if flags_on.contains(f) || flags_off.contains(f) {
                return it.unsupported(sh, &format!("{cmd} -{f} (case attributes)"));
            }
        }
    }
    if cmd == "local" && sh.funcdepth == 0 {
        it.err(sh, "bash: local: can only be used in a function");
        return Ok(1);
    }
    let export = cmd == "export" || flags_on.contains('x');
    let readonly = cmd == "readonly" || flags_on.contains('r');
    let assoc = flags_on.contains('A');
    let array = flags_on.contains('a');
    let integer = flags_on.contains('i');
    let func = flags_on.contains('f') || flags_on.contains('F');
    let print = flags_on.contains('p');
    let unexport = cmd == "export" && flags_on.contains('n');
    if unexport {
        flags_off.push('x');
        flags_on = flags_on.replace('n', "");
    }
    let export = export && !unexport;
    let local = cmd == "local"
        || ((cmd == "declare" || cmd == "typeset") && sh.funcdepth > 0 && !flags_on.contains('g'));
    if flags_on.contains('n') {
        // namerefs: the variable's value names the variable it stands for
        let mut st = 0;
        for item in items {
            let (name, target) = match &item {
                DeclArg::Word(w) => match w.split_once('=') {
                    Some((n, v)) => (n.to_string(), v.to_string()),
                    None => (w.clone(), String::new()),
                },
                DeclArg::Assign(a, AssignVal::Scalar(v)) => {
                    (crate::shell::assign_name(a).to_string(), v.clone())
                }
                DeclArg::Assign(a, _) => {
                    it.err(
                        sh,
                        &format!(
                            "bash: {cmd}: {}: reference variable cannot be an array",
                            crate::shell::assign_name(a)
                        ),
                    );
                    st = 1;
                    continue;
                }
            };
            if !valid_name(&name)
                || (!target.is_empty() && !valid_name(target.split('[').next().unwrap_or("")))
            {
                it.err(
                    sh,
                    &format!("bash: {cmd}: `{target}': invalid variable name for name reference"),
                );
                st = 1;
                continue;
            }
            if local {
                sh.make_local(&name);
            }
            sh.vars.insert(
                name,
                Var {
                    value: Value::Str(target.into()),
                    exported: false,
                    readonly,
                    integer: false,
                    nameref: true,
                },
            );
        }
        return Ok(st);
    }
    if items.is_empty() {
        // listing, paced and written in pieces (see `Listing`)
        let mut l = Listing::new();
        if func {
            let names = sorted_names(it, sh.funcs.keys().map(String::as_str))?;
            for n in names {
                l.item(it)?;
                if flags_on.contains('F') {
                    l.push(it, sh, &format!("declare -f {n}\n"))?;
                } else if let Some(f) = sh.funcs.get(n) {
                    l.push(it, sh, &format!("{n} () \n"))?;
                    l.push(it, sh, &f.0.to_string())?;
                    l.push(it, sh, "\n")?;
                }
            }
        } else if cmd == "local" {
            // bash lists the function's own variables; one declared and not set yet
            // as `declare -- name`
            let frame = sh.locals.last().map(Vec::as_slice).unwrap_or_default();
            let names = sorted_names(it, frame.iter().map(|(n, _)| n.as_str()))?;
            for n in names {
                match sh.vars.get(n) {
                    Some(v) => l.declare_line(it, sh, n, v)?,
                    None => l.push(it, sh, &format!("declare -- {n}\n"))?,
                }
            }
        } else {
            let names = sorted_names(it, sh.vars.keys().map(String::as_str))?;
            for n in names {
                let v = &sh.vars[n];
                if (export && !v.exported) || (readonly && !v.readonly) {
                    l.item(it)?;
                    continue;
                }
                l.declare_line(it, sh, n, v)?;
            }
        }
        l.flush(it, sh)?;
        return Ok(0);
    }
    let mut st = 0;
    for item in items {
        let (name, val, append, elem) = match &item {
            DeclArg::Word(w) => match w.split_once('=') {
                Some((n, v)) => {
                    let (n, app) = match n.strip_suffix('+') {
                        Some(x) => (x, true),
                        None => (n, false),
                    };
                    (
                        n.to_string(),
                        Some(AssignVal::Scalar(v.to_string())),
                        app,
                        None,
                    )
                }
                None => (w.clone(), None, false, None),
            },
            DeclArg::Assign(a, v) => {
                let elem = match &a.name {
                    ast::AssignmentName::ArrayElementName(_, i) => Some(i.clone()),
                    _ => None,
                };
                (
                    crate::shell::assign_name(a).to_string(),
                    Some(v.clone()),
                    a.append,
                    elem,
                )
            }
        };
        if print {
            match sh.vars.get(&name) {
                Some(v) => {
                    let mut l = Listing::new();
                    l.declare_line(it, sh, &name, v)?;
                    l.flush(it, sh)?;
                }
                None => {
                    it.err(sh, &format!("bash: declare: {name}: not found"));
                    st = 1;
                }
            }
            continue;
        }
        if func {
            if !sh.funcs.contains_key(&name) {
                st = 1;
            } else if flags_on.contains('F') {
                it.out(sh, &format!("{name}\n"))?;
            } else if let Some(f) = sh.funcs.get(&name).cloned() {
                it.out(sh, &format!("{name} () \n{}\n", f.0))?;
            }
            continue;
        }
        if !valid_name(&name) {
            it.err(
                sh,
                &format!("bash: {cmd}: `{name}': not a valid identifier"),
            );
            st = 1;
            continue;
        }
        if local && sh.vars.get(&name).is_some_and(|v| v.readonly) {
            it.err(sh, &format!("bash: {cmd}: {name}: readonly variable"));
            st = 1;
            continue;
        }
        if local {
            sh.make_local(&name);
            if cmd == "local" || !sh.vars.contains_key(&name) || val.is_some() {
                // a fresh local starts unset (or empty array)
                if val.is_none() {
                    let keep = sh.vars.get(&name).cloned();
                    sh.vars.remove(&name);
                    if assoc || array {
                        sh.vars.insert(
                            name.clone(),
                            Var {
                                value: if assoc {
                                    Value::Assoc(crate::shell::AssocMap::new())
                                } else {
                                    Value::Arr(crate::shell::ArrMap::new())
                                },
                                exported: false,
                                readonly: false,
                                integer,
                                nameref: false,
                            },
                        );
                    } else if cmd != "local" {
                        let _ = keep;
                    } else if let Some(k) = keep {
                        // `local x` keeps nothing of the outer value, but remains declared
                        let _ = k;
                        // bash: declared but unset
                        sh.vars.remove(&name);
                    }
                } else {
                    sh.vars.remove(&name);
                }
            }
        }
        if assoc && !matches!(sh.vars.get(&name).map(|v| &v.value), Some(Value::Assoc(_))) {
            sh.vars.insert(
                name.clone(),
                Var {
                    value: Value::Assoc(crate::shell::AssocMap::new()),
                    exported: false,
                    readonly: false,
                    integer: false,
                    nameref: false,
                },
            );
        } else if array && !sh.vars.contains_key(&name) {
            sh.vars.insert(
                name.clone(),
                Var {
                    value: Value::Arr(crate::shell::ArrMap::new()),
                    exported: false,
                    readonly: false,
                    integer: false,
                    nameref: false,
                },
            );
        }
        if integer {
            if let Some(v) = sh.vars.get_mut(&name) {
                v.integer = true;
            } else {
                let mut v = Var::s(String::new());
                v.integer = true;
                sh.vars.insert(name.clone(), v);
            }
        }
        if flags_off.contains('i') {
            if let Some(v) = sh.vars.get_mut(&name) {
                v.integer = false;
            }
        }
        if let Some(val) = val {
            let a = ast::Assignment {
                name: match elem {
                    Some(i) => ast::AssignmentName::ArrayElementName(name.clone(), i),
                    None => ast::AssignmentName::VariableName(name.clone()),
                },
                value: ast::AssignmentValue::Scalar(ast::Word::new("")),
                append,
                loc: Default::default(),
            };
            if let Err(m) = it.assign(sh, &a, val, local) {
                it.err(sh, &format!("bash: {m}"));
                st = 1;
                continue;
            }
        }
        if export || readonly || flags_off.contains('x') {
            let exists = sh.vars.contains_key(&name);
            if !exists && (export || readonly) {
                if export {
                    // export of an unset name marks it for later; approximate by creating nothing
                    it_mark_export(sh, &name);
                    continue;
                }
                sh.vars.insert(name.clone(), Var::s(String::new()));
            }
            if let Some(v) = sh.vars.get_mut(&name) {
                if export {
                    v.exported = true;
                }
                if flags_off.contains('x') {
                    v.exported = false;
                }
                if readonly {
                    v.readonly = true;
                }
            }
        }
    }
    Ok(st)
}

fn it_mark_export(_sh: &mut Shell, _name: &str) {}

pub fn valid_name(n: &str) -> bool {
    let mut c = n.chars();
    matches!(c.next(), Some(f) if f.is_ascii_alphabetic() || f == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
}

fn read_cmd(it: &mut Interp<'_>, sh: &mut Shell, args: &[String]) -> R<i32> {
    let mut raw = false;
    let mut arr: Option<String> = None;
    let mut delim = b'\n';
    let mut nchars: Option<usize> = None;
    let mut exact = false;
    let mut fd = 0;
    let mut names = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a.starts_with('-') && a.len() > 1 && names.is_empty() {
            let mut chars = a[1..].chars().peekable();
            while let Some(c) = chars.next() {
                let rest: String = chars.clone().collect();
                let mut take = || -> Option<String> {
                    if !rest.is_empty() {
                        Some(rest.clone())
                    } else {
                        i += 1;
                        args.get(i).cloned()
                    }
                };
                match c {
                    'r' => raw = true,
                    's' | 'e' => {}
                    'a' => {
                        arr = take();
                        break;
                    }
                    'd' => {
                        delim = take().and_then(|d| d.bytes().next()).unwrap_or(0);
                        break;
                    }
                    'n' => {
                        nchars = take().and_then(|d| d.parse().ok());
                        break;
                    }
                    'N' => {
                        nchars = take().and_then(|d| d.parse().ok());
                        exact = true;
                        break;
                    }
                    'p' => {
                        if let Some(p) = take() {
                            let _ = it.write(sh, 2, p.as_bytes());
                        }
                        break;
                    }
                    't' => {
                        let _ = take();
                        break;
                    }
                    'u' => {
                        fd = take().and_then(|d| d.parse().ok()).unwrap_or(0);
                        break;
                    }
                    _ => {
                        it.err(sh, &format!("bash: read: -{c}: invalid option"));
                        return Ok(2);
                    }
                }
            }
            i += 1;
            continue;
        }
        names.push(a.clone());
        i += 1;
    }
    if sh.get_fd(fd).is_none() {
        it.err(
            sh,
            &format!("bash: read: {fd}: invalid file descriptor: Bad file descriptor"),
        );
        return Ok(1);
    }
    // read a logical line
    let mut line: Vec<u8> = Vec::new();
    // a long line (a here-string of a big value) is split one piece at a time, looking
    // between pieces whether the command must stop
    let mut pace = crate::shell::Pacer::default();
    let mut got_delim;
    let mut any = false;
    loop {
        let max = nchars.map(|n| n.saturating_sub(line.len()));
        let d = if exact { 0xFFu8 } else { delim };
        match it.read_until(sh, fd, d, max) {
            None => {
                got_delim = false;
                break;
            }
            Some((chunk, found)) => {
                if pace.due(chunk.len()) {
                    return Err(it.interrupted());
                }
                any = true;
                got_delim = found;
                line.extend_from_slice(&chunk);
                if !raw && got_delim && !exact && line.last() == Some(&b'\\') && delim == b'\n' {
                    line.pop();
                    continue;
                }
                if nchars.is_some() {
                    got_delim = true;
                }
                break;
            }
        }
    }
    let text = it.decode_output(&line)?;
    drop(line);
    // backslash processing
    let (text, escaped): (String, Vec<bool>) = if raw {
        let n = text.chars().count();
        (text, vec![false; n])
    } else {
        let mut out = String::new();
        let mut esc = Vec::new();
        let mut it2 = text.chars();
        while let Some(c) = it2.next() {
            if pace.due(1) {
                return Err(it.interrupted());
            }
            if c == '\\' {
                if let Some(n) = it2.next() {
                    out.push(n);
                    esc.push(true);
                }
            } else {
                out.push(c);
                esc.push(false);
            }
        }
        (out, esc)
    };
    let Some(ifs) = sh.ifs_chars() else {
        return Err(it.interrupted());
    };
    let mut chars: Vec<char> = Vec::with_capacity(text.len());
    for c in text.chars() {
        if pace.due(1) {
            return Err(it.interrupted());
        }
        chars.push(c);
    }
    let is_ifs = |i: usize| !escaped[i] && ifs.contains(chars[i]);
    let is_ws = |i: usize| is_ifs(i) && matches!(chars[i], ' ' | '\t' | '\n');
    if exact || nchars.is_some() && names.is_empty() && arr.is_none() {
        let n = names.first().cloned().unwrap_or_else(|| "REPLY".into());
        let _ = sh.set(&n, text.clone());
        return Ok(if any && (got_delim || exact) { 0 } else { 1 });
    }
    if let Some(a) = arr {
        let mut fields = Vec::new();
        let mut i = 0;
        let n = chars.len();
        while i < n {
            while i < n && is_ws(i) {
                i += 1;
            }
            if i >= n {
                break;
            }
            let mut f = String::new();
            while i < n && !is_ifs(i) {
                if pace.due(1) {
                    return Err(it.interrupted());
                }
                f.push(chars[i]);
                i += 1;
            }
            fields.push(f);
            if i < n && is_ifs(i) && !is_ws(i) {
                i += 1;
            }
            while i < n && is_ws(i) {
                i += 1;
            }
        }
        let m: crate::shell::ArrMap = fields
            .into_iter()
            .enumerate()
            .map(|(i, f)| (i as i64, crate::mem::MStr::from(f)))
            .collect();
        sh.vars.insert(
            a,
            Var {
                value: Value::Arr(m),
                exported: false,
                readonly: false,
                integer: false,
                nameref: false,
            },
        );
        return Ok(if got_delim { 0 } else { 1 });
    }
    let names = if names.is_empty() {
        vec!["REPLY".to_string()]
    } else {
        names
    };
    if names.len() == 1 && names[0] == "REPLY" && args.iter().all(|a| a.starts_with('-')) {
        let _ = sh.set("REPLY", text.clone());
        return Ok(if got_delim { 0 } else { 1 });
    }
    let n = chars.len();
    let mut i = 0;
    while i < n && is_ws(i) {
        i += 1;
    }
    for (k, name) in names.iter().enumerate() {
        let last = k + 1 == names.len();
        let mut f = String::new();
        if last {
            // rest of line minus trailing IFS whitespace
            let mut end = n;
            while end > i && is_ws(end - 1) {
                if pace.due(1) {
                    return Err(it.interrupted());
                }
                end -= 1;
            }
            for &c in &chars[i.min(end)..end] {
                if pace.due(1) {
                    return Err(it.interrupted());
                }
                f.push(c);
            }
            // a single trailing non-whitespace delimiter is stripped
            if end > i && is_ifs(end - 1) && !is_ws(end - 1) {
                let inner: Vec<usize> = (i..end - 1).filter(|&j| is_ifs(j) && !is_ws(j)).collect();
                if inner.is_empty() {
                    f.pop();
                }
            }
            i = n;
        } else {
            while i < n && !is_ifs(i) {
                if pace.due(1) {
                    return Err(it.interrupted());
                }
                f.push(chars[i]);
                i += 1;
            }
            while i < n && is_ws(i) {
                if pace.due(1) {
                    return Err(it.interrupted());
                }
                i += 1;
            }
            if i < n && is_ifs(i) && !is_ws(i) {
                i += 1;
                while i < n && is_ws(i) {
                    i += 1;
                }
            }
        }
        if let Err(m) = sh.set(name, f) {
            it.err(sh, &format!("bash: read: {m}"));
            return Ok(1);
        }
    }
    Ok(if got_delim { 0 } else { 1 })
}

fn mapfile(it: &mut Interp<'_>, sh: &mut Shell, args: &[String]) -> R<i32> {
    let mut strip = false;
    let mut delim = b'\n';
    let mut fd = 0;
    let mut count: Option<usize> = None;
    let mut skip = 0usize;
    let mut name = "MAPFILE".to_string();
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "-t" => strip = true,
            "-d" => {
                i += 1;
                delim = args.get(i).and_then(|d| d.bytes().next()).unwrap_or(0);
            }
            "-u" => {
                i += 1;
                fd = args.get(i).and_then(|d| d.parse().ok()).unwrap_or(0);
            }
            "-n" => {
                i += 1;
                count = args
                    .get(i)
                    .and_then(|d| d.parse().ok())
                    .filter(|&n: &usize| n > 0);
            }
            "-s" => {
                i += 1;
                skip = args.get(i).and_then(|d| d.parse().ok()).unwrap_or(0);
            }
            a => name = a.to_string(),
        }
        i += 1;
    }
    let mut m = crate::shell::ArrMap::new();
    let mut k = 0i64;
    let mut seen = 0usize;
    while count.is_none_or(|c| (k as usize) < c) {
        let Some((mut chunk, found)) = it.read_until(sh, fd, delim, None) else {
            break;
        };
        seen += 1;
        // a file of millions of lines: look at the clock
        if seen.is_multiple_of(1024) {
            it.check_time()?;
        }
        if seen <= skip {
            continue;
        }
        if found && !strip {
            chunk.push(delim);
        }
        m.insert(k, String::from_utf8_lossy(&chunk).into_owned().into());
        k += 1;
    }
    sh.vars.insert(
        name,
        Var {
            value: Value::Arr(m),
            exported: false,
            readonly: false,
            integer: false,
            nameref: false,
        },
    );
    Ok(0)
}

fn trap(it: &mut Interp<'_>, sh: &mut Shell, args: &[String]) -> R<i32> {
    if args.is_empty() || args[0] == "-p" {
        let wanted: Vec<String> = args
            .iter()
            .skip(1)
            .filter_map(|a| crate::utils::signal_name(a))
            .collect();
        let mut keys: Vec<&String> = sh
            .traps
            .keys()
            .filter(|k| wanted.is_empty() || wanted.contains(k))
            .collect();
        keys.sort();
        let mut out = String::new();
        for k in keys {
            let shown = if matches!(k.as_str(), "EXIT" | "ERR" | "DEBUG" | "RETURN") {
                k.to_string()
            } else {
                format!("SIG{k}")
            };
            out.push_str(&format!(
                "trap -- '{}' {shown}\n",
                sh.traps[k].replace('\'', "'\\''")
            ));
        }
        it.out(sh, &out)?;
        return Ok(0);
    }
    if args[0] == "-l" {
        it.out(
            sh,
            " 1) SIGHUP\t 2) SIGINT\t 3) SIGQUIT\t 9) SIGKILL\t15) SIGTERM\n",
        )?;
        return Ok(0);
    }
    let (action, sigs) =
        if args.len() == 1 || args[0] == "-" || args[0].parse::<u32>().is_ok() && args.len() == 1 {
            (None, args)
        } else {
            let a = if args[0] == "-" {
                None
            } else {
                Some(args[0].clone())
            };
            (a, &args[1..])
        };
    let action = if args[0] == "-" { None } else { action };
    let sigs = if args[0] == "-" { &args[1..] } else { sigs };
    for s in sigs {
        let name = match crate::utils::signal_name(s) {
            Some(n) => n,
            None => {
                it.err(
                    sh,
                    &format!("bash: trap: {s}: invalid signal specification"),
                );
                return Ok(1);
            }
        };
        match &action {
            Some(a) => {
                sh.traps.insert(name, a.as_str().into());
            }
            None => {
                sh.traps.remove(&name);
            }
        }
    }
    Ok(0)
}

fn getopts(it: &mut Interp<'_>, sh: &mut Shell, args: &[String]) -> R<i32> {
    if args.len() < 2 {
        it.err(sh, "bash: getopts: usage: getopts optstring name [arg ...]");
        return Ok(2);
    }
    let spec = args[0].clone();
    let var = args[1].clone();
    let params: Vec<String> = if args.len() > 2 {
        args[2..].to_vec()
    } else {
        sh.pos.iter().map(|p| p.to_string()).collect()
    };
    let silent = spec.starts_with(':');
    let mut optind: usize = sh
        .get("OPTIND")
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
        .max(1);
    if optind == 1 && sh.getopts_sub > 0 && sh.get("OPTIND").as_deref() == Some("1") {
        // reset
    }
    let arg = match params.get(optind - 1) {
        Some(a) if a.starts_with('-') && a.len() > 1 && a != "--" => a.clone(),
        Some(a) if a == "--" => {
            let _ = sh.set("OPTIND", (optind + 1).to_string());
            let _ = sh.set(&var, "?".into());
            sh.getopts_sub = 0;
            return Ok(1);
        }
        _ => {
            let _ = sh.set(&var, "?".into());
            sh.getopts_sub = 0;
            return Ok(1);
        }
    };
    let chars: Vec<char> = arg.chars().collect();
    let mut sub = if sh.getopts_sub == 0 {
        1
    } else {
        sh.getopts_sub
    };
    if sub >= chars.len() {
        sub = 1;
    }
    let c = chars[sub];
    let pos = spec.find(c).filter(|_| c != ':');
    let nchars = chars.len();
    let advance = |sh: &mut Shell, sub_next: usize, optind: &mut usize| {
        if sub_next >= nchars {
            *optind += 1;
            sh.getopts_sub = 0;
        } else {
            sh.getopts_sub = sub_next;
        }
        let _ = sh.set("OPTIND", optind.to_string());
    };
    match pos {
        None => {
            if silent {
                let _ = sh.set("OPTARG", c.to_string());
            } else {
                it.err(sh, &format!("bash: illegal option -- {c}"));
                sh.vars.remove("OPTARG");
            }
            let _ = sh.set(&var, "?".into());
            advance(sh, sub + 1, &mut optind);
        }
        Some(p) => {
            let needs = spec[p + c.len_utf8()..].starts_with(':');
            if needs {
                if sub + 1 < chars.len() {
                    let val: String = chars[sub + 1..].iter().collect();
                    let _ = sh.set("OPTARG", val);
                    optind += 1;
                    sh.getopts_sub = 0;
                    let _ = sh.set("OPTIND", optind.to_string());
                } else if let Some(v) = params.get(optind) {
                    let _ = sh.set("OPTARG", v.clone());
                    optind += 2;
                    sh.getopts_sub = 0;
                    let _ = sh.set("OPTIND", optind.to_string());
                } else {
                    if silent {
                        let _ = sh.set(&var, ":".into());
                        let _ = sh.set("OPTARG", c.to_string());
                    } else {
                        it.err(sh, &format!("bash: option requires an argument -- {c}"));
                        let _ = sh.set(&var, "?".into());
                    }
                    advance(sh, sub + 1, &mut optind);
                    return Ok(0);
                }
            } else {
                sh.vars.remove("OPTARG");
                advance(sh, sub + 1, &mut optind);
            }
            let _ = sh.set(&var, c.to_string());
        }
    }
    Ok(0)
}

// ---------- test ----------

fn test_cmd(it: &mut Interp<'_>, sh: &mut Shell, name: &str, args: &[String]) -> i32 {
    let mut args = args.to_vec();
    if name == "[" {
        if args.last().map(String::as_str) != Some("]") {
            it.err(sh, "bash: [: missing `]'");
            return 2;
        }
        args.pop();
    }
    // POSIX rules by argument count, then brush's parser
    let r = match args.len() {
        0 => Ok(false),
        1 => Ok(!args[0].is_empty()),
        2 if args[0] == "!" => Ok(args[1].is_empty()),
        2 if unary_op(&args[0]).is_some() => {
            let op = unary_op(&args[0]).unwrap_or(ast::UnaryPredicate::StringHasNonZeroLength);
            unary_test(it, sh, &op, &args[1])
        }
        3 if binary_op(&args[1]).is_some() => {
            let op =
                binary_op(&args[1]).unwrap_or(ast::BinaryPredicate::StringExactlyMatchesString);
            match binary_test_mode(it, sh, &op, &args[0], &args[2], true) {
                Ok(r) => r,
                Err(_) => Err("error".into()),
            }
        }
        _ if args.len() > 2 * crate::shell::MAX_NESTING => Err("too many arguments".into()),
        _ => match crate::shell::with_parser_stack(|| brush_parser::test_command::parse(&args)) {
            Ok(e) => eval_test(it, sh, &e),
            Err(_) => Err(format!("{}: syntax error", args.join(" "))),
        },
    };
    match r {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(m) => {
            it.err(sh, &format!("bash: {name}: {m}"));
            2
        }
    }
}

fn unary_op(s: &str) -> Option<ast::UnaryPredicate> {
    use ast::UnaryPredicate as U;
    Some(match s {
        "-z" => U::StringHasZeroLength,
        "-n" => U::StringHasNonZeroLength,
        "-e" | "-a" => U::FileExists,
        "-f" => U::FileExistsAndIsRegularFile,
        "-d" => U::FileExistsAndIsDir,
        "-L" | "-h" => U::FileExistsAndIsSymlink,
        "-s" => U::FileExistsAndIsNotZeroLength,
        "-r" => U::FileExistsAndIsReadable,
        "-w" => U::FileExistsAndIsWritable,
        "-x" => U::FileExistsAndIsExecutable,
        "-c" => U::FileExistsAndIsCharSpecialFile,
        "-b" => U::FileExistsAndIsBlockSpecialFile,
        "-p" => U::FileExistsAndIsFifo,
        "-S" => U::FileExistsAndIsSocket,
        "-t" => U::FdIsOpenTerminal,
        "-v" => U::ShellVariableIsSetAndAssigned,
        _ => return None,
    })
}

fn binary_op(s: &str) -> Option<ast::BinaryPredicate> {
    use ast::BinaryPredicate as P;
    Some(match s {
        "=" | "==" => P::StringExactlyMatchesString,
        "!=" => P::StringDoesNotExactlyMatchString,
        "<" => P::LeftSortsBeforeRight,
        ">" => P::LeftSortsAfterRight,
        "-eq" => P::ArithmeticEqualTo,
        "-ne" => P::ArithmeticNotEqualTo,
        "-lt" => P::ArithmeticLessThan,
        "-le" => P::ArithmeticLessThanOrEqualTo,
        "-gt" => P::ArithmeticGreaterThan,
        "-ge" => P::ArithmeticGreaterThanOrEqualTo,
        "-nt" => P::LeftFileIsNewerOrExistsWhenRightDoesNot,
        "-ot" => P::LeftFileIsOlderOrDoesNotExistWhenRightDoes,
        "-ef" => P::FilesReferToSameDeviceAndInodeNumbers,
        _ => return None,
    })
}

fn eval_test(it: &mut Interp<'_>, sh: &mut Shell, e: &ast::TestExpr) -> Result<bool, String> {
    use ast::TestExpr as T;
    match e {
        T::False => Ok(false),
        T::Literal(s) => Ok(!s.is_empty()),
        T::And(a, b) => Ok(eval_test(it, sh, a)? && eval_test(it, sh, b)?),
        T::Or(a, b) => Ok(eval_test(it, sh, a)? || eval_test(it, sh, b)?),
        T::Not(a) => Ok(!eval_test(it, sh, a)?),
        T::Parenthesized(a) => eval_test(it, sh, a),
        T::UnaryTest(p, s) => unary_test(it, sh, p, s),
        T::BinaryTest(p, a, b) => match binary_test_mode(it, sh, p, a, b, true) {
            Ok(r) => r,
            Err(_) => Err("error".into()),
        },
    }
}

pub fn unary_test(
    it: &mut Interp<'_>,
    sh: &mut Shell,
    p: &ast::UnaryPredicate,
    s: &str,
) -> Result<bool, String> {
    use ast::UnaryPredicate as U;
    let stat = |it: &mut Interp<'_>, follow: bool| -> Option<crate::vfs::Inode> {
        if s.is_empty() {
            return None;
        }
        it.w.vfs
            .resolve(&sh.cwd, s, follow)
            .ok()
            .map(|i| it.w.vfs.get(i).clone())
    };
    Ok(match p {
        U::StringHasZeroLength => s.is_empty(),
        U::StringHasNonZeroLength => !s.is_empty(),
        U::FileExists => stat(it, true).is_some(),
        U::FileExistsAndIsDir => stat(it, true).is_some_and(|n| n.is_dir()),
        U::FileExistsAndIsRegularFile => {
            stat(it, true).is_some_and(|n| matches!(n.kind, Kind::File(_) | Kind::Exe(_)))
        }
        U::FileExistsAndIsSymlink => {
            stat(it, false).is_some_and(|n| matches!(n.kind, Kind::Symlink(_)))
        }
        U::FileExistsAndIsNotZeroLength => stat(it, true).is_some_and(|n| n.size() > 0),
        U::FileExistsAndIsReadable | U::FileExistsAndIsWritable => stat(it, true).is_some(),
        U::FileExistsAndIsExecutable => {
            stat(it, true).is_some_and(|n| n.is_dir() || n.mode & 0o111 != 0)
        }
        U::FileExistsAndIsCharSpecialFile => {
            stat(it, true).is_some_and(|n| matches!(n.kind, Kind::Dev(_)))
        }
        U::FileExistsAndOwnedByEffectiveUserId | U::FileExistsAndOwnedByEffectiveGroupId => {
            stat(it, true).is_some()
        }
        U::FileExistsAndIsSetuid => stat(it, true).is_some_and(|n| n.mode & 0o4000 != 0),
        U::FileExistsAndIsSetgid => stat(it, true).is_some_and(|n| n.mode & 0o2000 != 0),
        U::FileExistsAndHasStickyBit => stat(it, true).is_some_and(|n| n.mode & 0o1000 != 0),
        U::FileExistsAndIsBlockSpecialFile | U::FileExistsAndIsFifo | U::FileExistsAndIsSocket => {
            false
        }
        U::FileExistsAndModifiedSinceLastRead => false,
        U::FdIsOpenTerminal => false,
        U::ShellOptionEnabled => {
            let o = &sh.opts;
            match s {
                "errexit" => o.errexit,
                "nounset" => o.nounset,
                "pipefail" => o.pipefail,
                "noclobber" => o.noclobber,
                _ => false,
            }
        }
        U::ShellVariableIsSetAndAssigned => {
            if let Some((n, idx)) = s.strip_suffix(']').and_then(|x| x.split_once('[')) {
                match sh.vars.get(n).map(|v| &v.value) {
                    Some(Value::Assoc(m)) => m.contains_key(idx),
                    Some(Value::Arr(m)) => {
                        idx.parse::<i64>().is_ok_and(|i| m.contains_key(&i))
                            || idx == "@" && !m.is_empty()
                    }
                    Some(Value::Str(_)) => idx == "0",
                    None => false,
                }
            } else {
                sh.vars.contains_key(s)
            }
        }
        U::ShellVariableIsSetAndNameRef => false,
    })
}

fn test_int(s: &str) -> Result<i64, String> {
    let t = s.trim();
    t.parse::<i64>()
        .map_err(|_| format!("{s}: integer expression expected"))
}

pub fn binary_test(
    it: &mut Interp<'_>,
    sh: &mut Shell,
    p: &ast::BinaryPredicate,
    a: &str,
    b: &str,
) -> R<Result<bool, String>> {
    binary_test_mode(it, sh, p, a, b, false)
}

/// `strict`: `test`/`[` (operands of -eq etc. must be integers); else `[[ ]]` (arithmetic).
pub fn binary_test_mode(
    it: &mut Interp<'_>,
    sh: &mut Shell,
    p: &ast::BinaryPredicate,
    a: &str,
    b: &str,
    strict: bool,
) -> R<Result<bool, String>> {
    use ast::BinaryPredicate as P;
    let mtime = |it: &mut Interp<'_>, s: &str| {
        it.w.vfs
            .resolve(&sh.cwd, s, true)
            .ok()
            .map(|i| it.w.vfs.get(i).mtime)
    };
    let arith = |it: &mut Interp<'_>, sh: &mut Shell, s: &str| -> R<Result<i64, String>> {
        // [[ ]] evaluates operands arithmetically; test/[ requires integers
        match test_int(s) {
            Ok(v) => Ok(Ok(v)),
            Err(e) if strict => Ok(Err(e)),
            Err(e) => match it.eval_arith_str(sh, s)? {
                Ok(v) => Ok(Ok(v)),
                Err(_) => Ok(Err(e)),
            },
        }
    };
    macro_rules! ints {
        ($f:expr) => {{
            let x = match arith(it, sh, a)? {
                Ok(v) => v,
                Err(e) => return Ok(Err(e)),
            };
            let y = match arith(it, sh, b)? {
                Ok(v) => v,
                Err(e) => return Ok(Err(e)),
            };
            $f(x, y)
        }};
    }
    Ok(Ok(match p {
        P::StringExactlyMatchesString | P::StringExactlyMatchesPattern => a == b,
        P::StringDoesNotExactlyMatchString | P::StringDoesNotExactlyMatchPattern => a != b,
        P::StringContainsSubstring => a.contains(b),
        P::LeftSortsBeforeRight => a < b,
        P::LeftSortsAfterRight => a > b,
        P::ArithmeticEqualTo => ints!(|x, y| x == y),
        P::ArithmeticNotEqualTo => ints!(|x, y| x != y),
        P::ArithmeticLessThan => ints!(|x, y| x < y),
        P::ArithmeticLessThanOrEqualTo => ints!(|x, y| x <= y),
        P::ArithmeticGreaterThan => ints!(|x, y| x > y),
        P::ArithmeticGreaterThanOrEqualTo => ints!(|x, y| x >= y),
        P::FilesReferToSameDeviceAndInodeNumbers => {
            let x = it.w.vfs.resolve(&sh.cwd, a, true).ok();
            x.is_some() && x == it.w.vfs.resolve(&sh.cwd, b, true).ok()
        }
        P::LeftFileIsNewerOrExistsWhenRightDoesNot => match (mtime(it, a), mtime(it, b)) {
            (Some(x), Some(y)) => x > y,
            (Some(_), None) => true,
            _ => false,
        },
        P::LeftFileIsOlderOrDoesNotExistWhenRightDoes => match (mtime(it, a), mtime(it, b)) {
            (Some(x), Some(y)) => x < y,
            (None, Some(_)) => true,
            _ => false,
        },
        P::StringMatchesRegex => regex::Regex::new(b).map(|r| r.is_match(a)).unwrap_or(false),
    }))
}

#[cfg(test)]
mod tests {
    #[test]
    fn builtin_table_is_sorted_for_binary_search() {
        let mut sorted = super::BUILTINS.to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, super::BUILTINS);
        assert!(
            super::is_builtin("disown") && super::is_builtin("wait") && !super::is_builtin("ls")
        );
    }
}
