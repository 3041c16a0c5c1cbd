//! `jq` as Debian 12's jq 1.6 runs it, over the jaq interpreter (`jaq-core`, `jaq-std`,
//! `jaq-json`): the filter language is jaq's, the printing is jq 1.6's (numbers as
//! doubles, shortest round trip, `1e+17` past 17 digits; strings with jq's escapes;
//! objects in insertion order; two-space indent). Options: `-r` `-j` `-c` `-n` `-e` `-s`
//! `-S` `-R` `-a` `-M` `--tab` `--indent N` `--arg NAME VALUE` `--argjson NAME JSON`
//! `--slurpfile NAME FILE` `--rawfile NAME FILE`; `$ENV`, `env` and `$ARGS` are the
//! machine's; `now` is the machine's clock; `input` and `inputs` read the same inputs.
//! Exit statuses as jq 1.6: 2 for usage or a missing file, 4 for input that is not JSON, 3 for a
//! filter that does not compile, 5 for a run-time error, and with `-e` 1 when the last
//! output is `false` or `null` and 4 when there was none. Anything else (`-C`, `--seq`,
//! `--stream`, `--args`, `-f`, modules) fails visibly with status 2.
//!
//! The clock and the budgets are looked at between output values and in every value the
//! generators (`range`, `repeat`, `while`, `until`, `recurse`) make, each counted against
//! the memory budget; a filter that defines a function calling itself is refused (jaq
//! recurses on the host's stack without a bound). Not looked at: one built-in step on a
//! big value (`"x" * 1e8`, `tostring` of a huge array).
//!
//! Known differences from jq 1.6 (jaq's semantics): updating inside `null` fails (`{} |
//! .a.b = 1` is an error, jq makes `{"a":{"b":1}}`); indexing an object with a number
//! gives `null` (jq: an error); `-0` is `0`; string interpolation prints a float with an
//! integer value as `1.0`; `input_filename`, `$__loc__`, `getpath` on a mismatched type,
//! `builtins` and `modulemeta` are missing or differ.

use jaq_core::load::{Arena, File, Loader};
use jaq_core::{data, Compiler, DataT, Vars};
use jaq_json::Val;
use jaq_std::input::{HasInputs, Inputs, RcIter};

use super::opts::{Arg, Parser};
use super::Ctx;
use crate::shell::R;

/// jq's status for a usage error (and a missing file, bad input).
const USAGE: i32 = 2;
/// jq 1.6's status after input that is not JSON.
const BAD_INPUT: i32 = 4;
/// jq's status for a filter that does not compile.
const COMPILE: i32 = 3;
/// jq's status after a run-time error.
const RUNTIME: i32 = 5;

/// The data jaq's native filters see: the filter's table and the inputs.
struct Kind;

impl DataT for Kind {
    type V<'a> = Val;
    type Data<'a> = &'a Data<'a>;
}

struct Data<'a> {
    lut: &'a jaq_core::Lut<Kind>,
    inputs: Inputs<'a, Val>,
}

impl<'a> data::HasLut<'a, Kind> for &'a Data<'a> {
    fn lut(&self) -> &'a jaq_core::Lut<Kind> {
        self.lut
    }
}

impl<'a> HasInputs<'a, Val> for &'a Data<'a> {
    fn inputs(&self) -> Inputs<'a, Val> {
        self.inputs
    }
}

/// How values are printed.
#[derive(Clone, Copy)]
struct Style {
    /// Spaces per level (`None`: compact); `tab` uses one tab per level.
    indent: Option<usize>,
    tab: bool,
    sort_keys: bool,
    ascii: bool,
}

/// Definitions that replace jaq's host-reading ones (the machine's environment and
/// clock), give jq 1.6's printing of numbers to `tostring`, `@text` and `join`, delete
/// keys keeping the others' order, and add what jq 1.6 has and jaq lacks.
const PRELUDE: &str = r#"
def env: $ENV; def now: $__shellbox_now;
def __sb_range($a; $b; $c): range($a; $b; $c);
def range($a; $b; $c): __sb_range($a; $b; $c) | __sb_tick;
def range($a; $b): range($a; $b; 1); def range($n): range(0; $n);
def __sb_repeat(f): repeat(f); def repeat(f): __sb_repeat(__sb_tick | f);
def __sb_while(c; u): while(c; u); def while(c; u): __sb_while(c; __sb_tick | u);
def __sb_until(c; u): until(c; u); def until(c; u): __sb_until(c; __sb_tick | u);
def __sb_recurse(f): recurse(f); def recurse(f): __sb_recurse(__sb_tick | f);
def recurse(f; cond): recurse(f | select(cond));
def tostring: if type == "string" then . else tojson end; def @text: tostring;
def join($x): reduce .[] as $i (null; (if . == null then "" else . + $x end)
  + ($i | if . == null then "" elif type == "string" then . else tojson end)) // "";
def __sb_delpath($p):
  if ($p | length) == 0 then null
  else $p[0] as $k
  | if ($p | length) == 1 then
      if type == "object" then with_entries(select(.key != $k))
      elif type == "array" then
        if ($k | type) == "number" then
          (if $k < 0 then length + $k else $k end) as $i
          | if $i < 0 or $i >= length then . else .[:$i] + .[$i + 1:] end
        elif ($k | type) == "object" then .[:($k.start // 0)] + .[($k.end // length):]
        else error("Cannot delete field at index of array") end
      elif . == null then null
      else error("Cannot delete field at object index of \(type)") end
    elif (type == "object" and has($k))
      or (type == "array" and ($k | type) == "number" and $k < length and $k >= -length)
    then .[$k] |= __sb_delpath($p[1:])
    else . end
  end;
def delpaths($ps): reduce ($ps | unique | reverse)[] as $p (.; __sb_delpath($p));
def del(f): delpaths([path(f)]);
def @csv: if type != "array" then error("\(type) (\(tojson)) cannot be csv-formatted, only an array can be")
  else map(if type == "string" then "\"" + (split("\"") | join("\"\"")) + "\""
    elif type == "number" or type == "boolean" then tojson elif type == "null" then ""
    else error("\(type) (\(tojson)) is not valid in a csv row") end) | join(",") end;
def @tsv: if type != "array" then error("\(type) (\(tojson)) cannot be tsv-formatted, only an array can be")
  else map(if type == "string" then split("\\") | join("\\\\") | split("\t") | join("\\t")
      | split("\n") | join("\\n") | split("\r") | join("\\r")
    elif type == "number" or type == "boolean" then tojson elif type == "null" then ""
    else error("\(type) (\(tojson)) is not valid in a tsv row") end) | join("\t") end;
def leaf_paths: paths(scalars);
def IN(s): any(s == .; .); def IN(src; s): any(src == s; .);
def INDEX(stream; idx_expr): reduce stream as $row ({}; .[$row | idx_expr | tostring] |= $row);
def INDEX(idx_expr): INDEX(.[]; idx_expr);
def ascii: [.] | implode;
def todate: strftime("%Y-%m-%dT%H:%M:%SZ");
def input_line_number: 0;
def format($f): if $f == "csv" then @csv elif $f == "tsv" then @tsv elif $f == "json" then @json
  elif $f == "text" then @text elif $f == "sh" then @sh elif $f == "base64" then @base64
  elif $f == "base64d" then @base64d elif $f == "uri" then @uri elif $f == "html" then @html
  else error("\($f) is not a valid format") end;
def fromstream(f): { x: null, e: false } as $init
  | foreach f as $i ($init;
      if .e then $init else . end
      | if $i | length == 2
        then setpath(["e"]; $i[0] | length == 0) | setpath(["x"] + $i[0]; $i[1])
        else setpath(["e"]; $i[0] | length == 1) end;
      if .e then .x else empty end);
def JOIN($idx; idx_expr): [.[] | [., $idx[idx_expr]]];
def JOIN($idx; stream; idx_expr): stream | [., $idx[idx_expr]];
def JOIN($idx; stream; idx_expr; join_expr): stream | [., $idx[idx_expr]] | join_expr;
def get_search_list: [];
"#;

/// The stack a jq run gets: jaq parses, compiles and runs a filter recursively (a
/// filter of 50,000 terms needs tens of MiB in an unoptimised build), so the run gets a
/// stack of its own, mapped lazily (what it does not use costs nothing).
const JQ_STACK: usize = 256 << 20;

/// Most operators and brackets a filter may have: jaq recurses over the filter's tree
/// (about 9 KiB of stack per term in an unoptimised build), so a longer one is refused as
/// unsupported rather than overflowing [`JQ_STACK`].
const MAX_FILTER_OPERATORS: usize = 10_000;

/// The operators and brackets of a filter's text, outside its string literals.
fn operators(text: &str) -> usize {
    let mut n = 0;
    let mut in_str = false;
    let mut esc = false;
    for c in text.bytes() {
        if in_str {
            if esc {
                esc = false;
            } else if c == b'\\' {
                esc = true;
            } else if c == b'"' {
                in_str = false;
            }
            continue;
        }
        match c {
            b'"' => in_str = true,
            b'+' | b'-' | b'*' | b'/' | b'%' | b'|' | b',' | b'(' | b'[' | b'{' | b'<' | b'>'
            | b'=' | b'!' | b'?' | b':' | b';' | b'.' => n += 1,
            _ => {}
        }
    }
    n
}

/// Deepest nesting of input JSON: jq 1.6's `MAX_PARSING_DEPTH` (an object's pending key
/// counts as one more level, as in jq's parser stack).
const MAX_PARSING_DEPTH: usize = 256;

pub(super) fn main(cx: &mut Ctx<'_, '_>) -> R<i32> {
    stacker::grow(JQ_STACK, || main_inner(cx))
}

/// Where `bytes` first nests deeper than jq 1.6 parses: the offset where the top-level
/// value holding it starts, and jq's words for it (`Exceeds depth limit for parsing at
/// line 1, column 257`: the offending bracket's line and 1-based column).
fn too_deep(bytes: &[u8]) -> Option<(usize, String)> {
    let mut stack: Vec<u8> = Vec::new();
    let (mut line, mut col) = (1usize, 0usize);
    let mut top_start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'\n' {
            line += 1;
            col = 0;
        } else {
            col += 1;
        }
        match c {
            b'"' => {
                // a string: skip to its closing quote (columns count its bytes)
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    if bytes[i] == b'\\' {
                        i += 1;
                        col += 1;
                    }
                    if bytes.get(i) == Some(&b'\n') {
                        line += 1;
                        col = 0;
                    } else {
                        col += 1;
                    }
                    i += 1;
                }
                col += 1;
            }
            b'[' | b'{' => {
                if stack.is_empty() {
                    top_start = i;
                }
                if stack.len() >= MAX_PARSING_DEPTH {
                    return Some((
                        top_start,
                        format!("Exceeds depth limit for parsing at line {line}, column {col}"),
                    ));
                }
                stack.push(c);
            }
            b':' if stack.last() == Some(&b'{') => stack.push(b'k'),
            b',' if stack.last() == Some(&b'k') => {
                stack.pop();
            }
            b']' | b'}' => {
                if stack.last() == Some(&b'k') {
                    stack.pop();
                }
                stack.pop();
            }
            _ => {}
        }
        i += 1;
    }
    None
}

fn main_inner(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new(
        "jq",
        args,
        &[
            "raw-output",
            "join-output",
            "compact-output",
            "null-input",
            "exit-status",
            "slurp",
            "sort-keys",
            "raw-input",
            "ascii-output",
            "monochrome-output",
            "tab",
            "indent",
            "arg",
            "argjson",
            "slurpfile",
            "rawfile",
        ],
    );
    let mut style = Style {
        indent: Some(2),
        tab: false,
        sort_keys: false,
        ascii: false,
    };
    let (mut raw, mut join, mut null_input, mut exit_status, mut slurp, mut raw_input) =
        (false, false, false, false, false, false);
    // named arguments in order: ($name, value)
    let mut named: Vec<(String, Val)> = Vec::new();
    let mut operands: Vec<String> = Vec::new();
    loop {
        let a = match p.next_in(cx)? {
            Ok(Some(a)) => a,
            Ok(None) => break,
            Err(u) => return usage(cx, &u.0),
        };
        match a {
            Arg::Short('r') | Arg::Long("raw-output") => raw = true,
            Arg::Short('j') | Arg::Long("join-output") => {
                raw = true;
                join = true;
            }
            Arg::Short('c') | Arg::Long("compact-output") => style.indent = None,
            Arg::Short('n') | Arg::Long("null-input") => null_input = true,
            Arg::Short('e') | Arg::Long("exit-status") => exit_status = true,
            Arg::Short('s') | Arg::Long("slurp") => slurp = true,
            Arg::Short('S') | Arg::Long("sort-keys") => style.sort_keys = true,
            Arg::Short('R') | Arg::Long("raw-input") => raw_input = true,
            Arg::Short('a') | Arg::Long("ascii-output") => style.ascii = true,
            Arg::Short('M') | Arg::Long("monochrome-output") => {}
            Arg::Long("tab") => {
                style.tab = true;
                style.indent = Some(1);
            }
            Arg::Long("indent") => {
                let v = match p.value() {
                    Ok(v) => v,
                    Err(_) => return usage(cx, "jq: --indent takes one parameter"),
                };
                match v.parse::<i64>() {
                    Ok(n) if n > 7 => return usage(cx, "jq: Cannot indent more than 7 characters"),
                    Ok(n) if n < 0 => {
                        return usage(cx, "jq: Cannot indent less than -1 characters")
                    }
                    Ok(n) => {
                        style.tab = false;
                        style.indent = if n == 0 { None } else { Some(n as usize) };
                    }
                    Err(_) => return usage(cx, "jq: --indent takes a number"),
                }
            }
            Arg::Long(l @ ("arg" | "argjson" | "slurpfile" | "rawfile")) => {
                let (Ok(name), Ok(text)) = (p.value(), p.value()) else {
                    return usage(
                        cx,
                        &format!("jq: --{l} takes two parameters (e.g. --{l} varname value)"),
                    );
                };
                let v = match l {
                    "arg" => Val::from(text),
                    "argjson" => match jaq_json::read::parse_single(text.as_bytes()) {
                        Ok(v) => v,
                        Err(_) => return usage(cx, "jq: Invalid JSON text passed to --argjson"),
                    },
                    _ => {
                        let data = match cx.read_input(&text) {
                            Ok(d) => d,
                            Err(e) => {
                                cx.err_line(&format!("jq: error: Could not open {text}: {e}"));
                                return Ok(USAGE);
                            }
                        };
                        if l == "rawfile" {
                            Val::from(String::from_utf8_lossy(&data).into_owned())
                        } else {
                            let mut all = Vec::new();
                            for v in jaq_json::read::parse_many(&data) {
                                match v {
                                    Ok(v) => all.push(v),
                                    Err(e) => {
                                        cx.err_line(&format!(
                                            "jq: Bad JSON in --slurpfile {name} {text}: {e}"
                                        ));
                                        return Ok(USAGE);
                                    }
                                }
                            }
                            Val::from_iter(all)
                        }
                    }
                };
                named.push((name, v));
            }
            Arg::Operand(o) => operands.push(o),
            Arg::Short(c) => return usage(cx, &format!("jq: Unknown option: -{c}")),
            Arg::Long(l) => return cx.unsupported(&format!("jq option --{l}")),
        }
    }
    if operands.is_empty() {
        // jq 1.6 without a filter, its streams not terminals: `.`
        operands.push(".".into());
    }
    let filter_text = operands.remove(0);
    if !crate::shell::nesting_ok(&filter_text) {
        return cx.unsupported(&format!(
            "jq filter nesting deeper than {} levels",
            crate::shell::MAX_NESTING
        ));
    }
    if has_recursive_def(&filter_text) {
        return cx.unsupported("jq recursive function definitions");
    }
    if filter_text.contains("import ") || filter_text.contains("include ") {
        return cx.unsupported("jq modules (import, include)");
    }

    // the inputs: every file's bytes in turn (standard input when none)
    let mut bytes = Vec::new();
    let mut status = 0;
    if operands.is_empty() {
        operands.push("-".into());
    }
    for f in &operands {
        cx.check_time()?;
        match cx.read_input(f) {
            Ok(d) => bytes.extend_from_slice(&d),
            Err(e) => {
                cx.err_line(&format!("jq: error: Could not open {f}: {e}"));
                status = USAGE;
            }
        }
    }

    // the globals: $ENV, the clock, $ARGS, then each named argument
    let env = Val::obj(
        cx.environ()
            .into_iter()
            .map(|(k, v)| (Val::from(k), Val::from(v)))
            .collect(),
    );
    let now = Val::from(cx.now_secs());
    let args_val = Val::obj(
        [
            (
                Val::from("positional".to_string()),
                Val::from_iter(Vec::new()),
            ),
            (
                Val::from("named".to_string()),
                Val::obj(
                    named
                        .iter()
                        .map(|(n, v)| (Val::from(n.clone()), v.clone()))
                        .collect(),
                ),
            ),
        ]
        .into_iter()
        .collect(),
    );
    let mut names: Vec<String> = vec!["$ENV".into(), "$__shellbox_now".into(), "$ARGS".into()];
    let mut values = vec![env, now, args_val];
    for (n, v) in &named {
        names.push(format!("${n}"));
        values.push(v.clone());
    }

    let ops = operators(&filter_text);
    if ops > MAX_FILTER_OPERATORS {
        cx.unsupported_status(
            &format!(
                "jq filter of {ops} operators (shellbox-sim parses at most {MAX_FILTER_OPERATORS})"
            ),
            COMPILE,
        )?;
        return Ok(COMPILE);
    }
    let code = format!("{PRELUDE}{filter_text}");
    let arena = Arena::default();
    let loader = Loader::new(
        jaq_core::defs()
            .chain(jaq_std::defs())
            .chain(jaq_json::defs()),
    );
    let modules = match loader.load(
        &arena,
        File {
            code: &code,
            path: (),
        },
    ) {
        Ok(m) => m,
        Err(errs) => {
            for (_, e) in &errs {
                cx.err_line(&format!("jq: error: syntax error: {}", load_error(e)));
            }
            cx.err_line(&format!(
                "jq: {} compile error{}",
                errs.len(),
                plural(errs.len())
            ));
            return Ok(COMPILE);
        }
    };
    let funs = jaq_core::funs::<Kind>()
        .chain(jaq_std::funs::<Kind>())
        .chain(jaq_json::funs::<Kind>())
        .chain(
            jaq_std::input::funs::<Kind>()
                .into_vec()
                .into_iter()
                .map(jaq_core::native::run::<Kind>),
        )
        .filter(|(name, _, _)| !matches!(*name, "env" | "now" | "tojson" | "input"))
        .chain(std::iter::once(jaq_core::native::run::<Kind>((
            "tojson",
            jaq_core::native::v(0),
            |cv| {
                let mut out = Vec::new();
                print_value(&mut out, &cv.1, compact(), 0);
                jaq_core::native::bome(Ok(Val::utf8_str(out)))
            },
        ))))
        .chain(std::iter::once(jaq_core::native::run::<Kind>((
            "__sb_tick",
            jaq_core::native::v(0),
            |cv| jaq_core::box_iter::box_once(tick().map(|()| cv.1).map_err(jaq_core::Exn::from)),
        ))))
        .chain(std::iter::once(jaq_core::native::run::<Kind>((
            "input",
            jaq_core::native::v(0),
            |cv| {
                let mut inputs = cv.0.data().inputs();
                jaq_core::box_iter::box_once(match inputs.next() {
                    Some(Ok(v)) => Ok(v),
                    Some(Err(e)) => Err(jaq_core::Exn::from(jaq_core::Error::str(e))),
                    None => Err(jaq_core::Exn::from(jaq_core::Error::str("No more inputs"))),
                })
            },
        ))));
    let filter = match Compiler::default()
        .with_funs(funs)
        .with_global_vars(names.iter().map(String::as_str))
        .compile(modules)
    {
        Ok(f) => f,
        Err(errs) => {
            let mut n = 0;
            for (_, es) in &errs {
                for (name, _) in es {
                    cx.err_line(&format!("jq: error: {name}/0 is not defined"));
                    n += 1;
                }
            }
            cx.err_line(&format!("jq: {n} compile error{}", plural(n)));
            return Ok(COMPILE);
        }
    };

    // the input values, read as they are asked for
    let text_lossy;
    let items: Box<dyn Iterator<Item = Result<Val, String>> + '_> = if raw_input {
        text_lossy = String::from_utf8_lossy(&bytes).into_owned();
        if slurp {
            Box::new(std::iter::once(Ok(Val::from(text_lossy.clone()))))
        } else {
            let mut lines: Vec<&str> = text_lossy.split('\n').collect();
            if text_lossy.ends_with('\n') || text_lossy.is_empty() {
                lines.pop();
            }
            Box::new(lines.into_iter().map(|l| Ok(Val::from(l.to_string()))))
        }
    } else {
        // values nested deeper than jq 1.6 reads end the input with its error (jaq would
        // recurse into them as deep as they go)
        let (upto, deep) = match too_deep(&bytes) {
            Some((at, why)) => (at, Some(why)),
            None => (bytes.len(), None),
        };
        let many = jaq_json::read::parse_many(&bytes[..upto])
            .map(|r| r.map_err(|e| e.to_string()))
            .chain(deep.map(Err));
        if slurp {
            let mut all = Vec::new();
            let mut bad = None;
            for v in many {
                match v {
                    Ok(v) => all.push(v),
                    Err(e) => {
                        bad = Some(e);
                        break;
                    }
                }
            }
            match bad {
                Some(e) => Box::new(std::iter::once(Err(e))),
                None => Box::new(std::iter::once(Ok(Val::from_iter(all)))),
            }
        } else {
            Box::new(many)
        }
    };
    let inputs = RcIter::new(items);
    let inputs_ref: Inputs<'_, Val> = &inputs;
    let data = Data {
        lut: &filter.lut,
        inputs: inputs_ref,
    };

    VALUES_LEFT.with(|l| l.set(cx.memory_left() / VALUE_BYTES));
    let mut out: Vec<u8> = Vec::new();
    let mut charged = 0usize;
    let mut last: Option<bool> = None;
    let mut count = 0usize;
    let mut run_one = |cx: &mut Ctx<'_, '_>, out: &mut Vec<u8>, input: Val| -> R<Option<i32>> {
        let ctx = jaq_core::Ctx::<Kind>::new(&data, Vars::new(values.iter().cloned()));
        for r in filter.id.run((ctx, input)) {
            count += 1;
            if crate::shell::stop_due() {
                return Err(cx.interrupted());
            }
            if count.is_multiple_of(256) {
                cx.hold(out.len().saturating_sub(charged))?;
                charged = out.len();
                cx.tick()?;
            }
            match r {
                Ok(v) => {
                    last = Some(!matches!(v, Val::Null | Val::Bool(false)));
                    // a string result is charged before it is printed: `"x" * 1000000000`
                    // under a 64 MiB budget printed (escaping each of its characters, 250 s
                    // in an unoptimised build) into a buffer that only then met the budget
                    if let Val::TStr(t) | Val::BStr(t) = &v {
                        if t.len() as u64 > cx.memory_left() {
                            cx.hold(t.len())?;
                        }
                    }
                    match (&v, raw) {
                        (Val::TStr(s) | Val::BStr(s), true) => out.extend_from_slice(s),
                        _ => print_value(out, &v, style, 0),
                    }
                    if !join {
                        out.push(b'\n');
                    }
                }
                Err(e) => match e.get_halt() {
                    Ok(code) => return Ok(Some(code)),
                    Err(e) => {
                        let msg = match e.get_err() {
                            Ok(err) => error_text(&err),
                            Err(_) => "error".to_string(),
                        };
                        if msg == STOP {
                            return Err(cx.interrupted());
                        }
                        if msg == OVER {
                            // past the budget: the machine's memory error, as for any program
                            let over = usize::try_from(cx.memory_left())
                                .unwrap_or(usize::MAX)
                                .saturating_add(1);
                            cx.hold(over)?;
                            return Err(cx.interrupted());
                        }
                        cx.out(out)?;
                        out.clear();
                        charged = 0;
                        cx.err_line(&format!("jq: error (at <stdin>:0): {msg}"));
                        return Ok(Some(-RUNTIME));
                    }
                },
            }
        }
        Ok(None)
    };
    let mut failed = false;
    if null_input {
        match run_one(cx, &mut out, Val::Null)? {
            Some(c) if c < 0 => failed = true,
            Some(c) => {
                cx.out(&out)?;
                return Ok(c);
            }
            None => {}
        }
    } else {
        loop {
            let next = (&inputs).next();
            let Some(item) = next else { break };
            match item {
                Ok(v) => match run_one(cx, &mut out, v)? {
                    Some(c) if c < 0 => failed = true,
                    Some(c) => {
                        cx.out(&out)?;
                        return Ok(c);
                    }
                    None => {}
                },
                Err(e) => {
                    cx.out(&out)?;
                    out.clear();
                    cx.err_line(&format!("parse error: {e}"));
                    return Ok(BAD_INPUT);
                }
            }
        }
    }
    cx.out(&out)?;
    if status != 0 {
        return Ok(status);
    }
    if failed {
        return Ok(RUNTIME);
    }
    Ok(if exit_status {
        match last {
            None => 4,
            Some(true) => 0,
            Some(false) => 1,
        }
    } else {
        0
    })
}

thread_local! {
    /// Values the generators (`range`, `repeat`, `while`, `until`, `recurse`) may still
    /// make in this run: each counts [`VALUE_BYTES`] against the memory budget.
    static VALUES_LEFT: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// What one generated value is counted as against the memory budget.
const VALUE_BYTES: u64 = 64;
/// The error a generator fails with when the command must stop.
const STOP: &str = "\u{0}deadline";
/// The error a generator fails with past the memory budget.
const OVER: &str = "\u{0}memory";

/// Called by the generators per value: an error when the command must stop
/// ([`crate::shell::stop_due`]) or when they made more values than the budget holds.
fn tick() -> Result<(), jaq_core::Error<Val>> {
    if crate::shell::stop_due() {
        return Err(jaq_core::Error::str(STOP));
    }
    let left = VALUES_LEFT.with(|l| {
        let n = l.get().saturating_sub(1);
        l.set(n);
        n
    });
    if left == 0 {
        return Err(jaq_core::Error::str(OVER));
    }
    Ok(())
}

/// Whether the filter defines a function that calls itself (jaq recurses on the host's
/// stack, with no bound: such a filter could overflow it, so it is refused).
fn has_recursive_def(text: &str) -> bool {
    let toks = tokens(text);
    for (i, t) in toks.iter().enumerate() {
        if t != "def" {
            continue;
        }
        let Some(name) = toks.get(i + 1) else {
            continue;
        };
        // past the parameters to the `:`
        let mut j = i + 2;
        if toks.get(j).map(String::as_str) == Some("(") {
            let mut depth = 0;
            while j < toks.len() {
                match toks[j].as_str() {
                    "(" => depth += 1,
                    ")" => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            j += 1;
        }
        if toks.get(j).map(String::as_str) != Some(":") {
            continue;
        }
        let end = body_end(&toks, j + 1);
        for k in j + 1..end {
            let calls = toks[k] == *name
                && toks.get(k - 1).map(String::as_str) != Some(".")
                && toks.get(k + 1).map(String::as_str) != Some(":");
            if calls {
                return true;
            }
        }
    }
    false
}

/// Where the definition body starting at `from` ends: its `;` (nested definitions
/// skipped) or the bracket that closes around it.
fn body_end(toks: &[String], from: usize) -> usize {
    let mut depth = 0i32;
    let mut nested = 0usize;
    let mut i = from;
    while i < toks.len() {
        match toks[i].as_str() {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" => {
                depth -= 1;
                if depth < 0 {
                    return i;
                }
            }
            "def" if depth == 0 => nested += 1,
            ";" if depth == 0 => {
                if nested == 0 {
                    return i;
                }
                nested -= 1;
            }
            _ => {}
        }
        i += 1;
    }
    i
}

/// The filter's tokens, roughly: names, `$`-variables, brackets and punctuation; the
/// text of string literals dropped (their interpolations kept).
fn tokens(text: &str) -> Vec<String> {
    let c: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    // the parenthesis depths at which an interpolation resumes its string
    let mut resume: Vec<i32> = Vec::new();
    let mut depth = 0i32;
    let mut in_string = false;
    while i < c.len() {
        let ch = c[i];
        if in_string {
            match ch {
                '\\' if c.get(i + 1) == Some(&'(') => {
                    in_string = false;
                    depth += 1;
                    resume.push(depth);
                    out.push("(".to_string());
                    i += 2;
                    continue;
                }
                '\\' => i += 1,
                '"' => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        if ch == '#' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if ch == '"' {
            in_string = true;
            i += 1;
            continue;
        }
        if ch.is_alphanumeric() || ch == '_' || ch == '$' || ch == '@' {
            let start = i;
            i += 1;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push(c[start..i].iter().collect());
            continue;
        }
        if !ch.is_whitespace() {
            if ch == '(' {
                depth += 1;
            }
            if ch == ')' {
                if resume.last() == Some(&depth) {
                    resume.pop();
                    in_string = true;
                }
                depth -= 1;
            }
            out.push(ch.to_string());
        }
        i += 1;
    }
    out
}

/// The compact style (`tojson`).
fn compact() -> Style {
    Style {
        indent: None,
        tab: false,
        sort_keys: false,
        ascii: false,
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// jq 1.6's usage failure: the diagnostic, then status 2.
fn usage(cx: &mut Ctx<'_, '_>, first: &str) -> R<i32> {
    cx.err_line(first);
    cx.err_line("Use jq --help for help with command-line options,\nor see the jq manpage, or online docs  at https://stedolan.github.io/jq");
    Ok(USAGE)
}

fn load_error(e: &jaq_core::load::Error<&str>) -> String {
    match e {
        jaq_core::load::Error::Io(errs) => errs
            .iter()
            .map(|(_, m)| m.clone())
            .collect::<Vec<_>>()
            .join("; "),
        jaq_core::load::Error::Lex(errs) => errs
            .iter()
            .map(|(exp, at)| format!("expected {} at {:?}", exp.as_str(), snippet(at)))
            .collect::<Vec<_>>()
            .join("; "),
        jaq_core::load::Error::Parse(errs) => errs
            .iter()
            .map(|(exp, at)| format!("expected {} at {:?}", exp.as_str(), snippet(at)))
            .collect::<Vec<_>>()
            .join("; "),
    }
}

fn snippet(s: &str) -> String {
    s.chars().take(20).collect()
}

/// A run-time error as jq 1.6 words it: a string error as it is, any other value as
/// `<json> (not a string)`.
fn error_text(e: &jaq_core::Error<Val>) -> String {
    let v = e.clone().into_val();
    match &v {
        Val::TStr(s) | Val::BStr(s) => String::from_utf8_lossy(s).into_owned(),
        other => {
            let mut out = Vec::new();
            print_value(&mut out, other, compact(), 0);
            format!("{} (not a string)", String::from_utf8_lossy(&out))
        }
    }
}

/// A number as jq 1.6 prints it: as a double (NaN as `null`, infinities as the largest
/// finite doubles), in the shortest digits that read back, exponential (`1e+17`,
/// `1e-05`) when the decimal point is more than 15 places past the digits or 4 or more
/// before them.
pub(crate) fn number_text(n: f64) -> String {
    if n.is_nan() {
        return "null".into();
    }
    let n = n.clamp(-f64::MAX, f64::MAX);
    // shortest round-trip digits: "d.ddde-x"
    let e = format!("{n:e}");
    let (mant, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (neg, mant) = match mant.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mant),
    };
    let digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
    let nd = digits.len() as i32;
    // the decimal point's place after the first `decpt` digits
    let decpt = exp + 1;
    let mut s = String::new();
    if neg {
        s.push('-');
    }
    if decpt <= -4 || decpt > nd + 15 {
        s.push_str(&digits[..1]);
        if nd > 1 {
            s.push('.');
            s.push_str(&digits[1..]);
        }
        let x = decpt - 1;
        s.push('e');
        s.push(if x < 0 { '-' } else { '+' });
        s.push_str(&format!("{:02}", x.unsigned_abs()));
    } else if decpt <= 0 {
        s.push_str("0.");
        for _ in 0..(-decpt) {
            s.push('0');
        }
        s.push_str(&digits);
    } else if decpt >= nd {
        s.push_str(&digits);
        for _ in 0..(decpt - nd) {
            s.push('0');
        }
    } else {
        s.push_str(&digits[..decpt as usize]);
        s.push('.');
        s.push_str(&digits[decpt as usize..]);
    }
    s
}

fn num_f64(n: &jaq_json::Num) -> f64 {
    match n {
        jaq_json::Num::Int(i) => *i as f64,
        jaq_json::Num::Float(f) => *f,
        other => other.to_string().parse().unwrap_or(f64::NAN),
    }
}

/// A string with jq's escapes: `\"`, `\\`, `\b \f \n \r \t`, other control characters
/// and DEL as `\u00XX`; with `ascii`, every non-ASCII character as `\uXXXX` (surrogate
/// pairs past the basic plane).
fn print_string(out: &mut Vec<u8>, s: &str, ascii: bool) {
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\t' => out.extend_from_slice(b"\\t"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\u{8}' => out.extend_from_slice(b"\\b"),
            '\u{c}' => out.extend_from_slice(b"\\f"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes())
            }
            c if ascii && !c.is_ascii() => {
                let mut buf = [0u16; 2];
                for u in c.encode_utf16(&mut buf) {
                    out.extend_from_slice(format!("\\u{u:04x}").as_bytes());
                }
            }
            c => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out.push(b'"');
}

fn newline(out: &mut Vec<u8>, style: Style, level: usize) {
    if let Some(n) = style.indent {
        out.push(b'\n');
        if style.tab {
            out.extend(std::iter::repeat_n(b'\t', level));
        } else {
            out.extend(std::iter::repeat_n(b' ', level * n));
        }
    }
}

/// `v` as jq 1.6 prints it in `style`, at nesting `level`.
fn print_value(out: &mut Vec<u8>, v: &Val, style: Style, level: usize) {
    match v {
        Val::Null => out.extend_from_slice(b"null"),
        Val::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Val::Num(n) => out.extend_from_slice(number_text(num_f64(n)).as_bytes()),
        Val::TStr(s) | Val::BStr(s) => print_string(out, &String::from_utf8_lossy(s), style.ascii),
        Val::Arr(a) => {
            if a.is_empty() {
                out.extend_from_slice(b"[]");
                return;
            }
            out.push(b'[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                newline(out, style, level + 1);
                print_value(out, x, style, level + 1);
            }
            newline(out, style, level);
            out.push(b']');
        }
        Val::Obj(o) => {
            if o.is_empty() {
                out.extend_from_slice(b"{}");
                return;
            }
            let key_text = |k: &Val| -> String {
                match k {
                    Val::TStr(s) | Val::BStr(s) => String::from_utf8_lossy(s).into_owned(),
                    other => {
                        let mut b = Vec::new();
                        print_value(&mut b, other, compact(), 0);
                        String::from_utf8_lossy(&b).into_owned()
                    }
                }
            };
            let mut entries: Vec<(String, &Val)> =
                o.iter().map(|(k, v)| (key_text(k), v)).collect();
            if style.sort_keys {
                entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            }
            out.push(b'{');
            for (i, (k, x)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                newline(out, style, level + 1);
                print_string(out, k, style.ascii);
                out.push(b':');
                if style.indent.is_some() {
                    out.push(b' ');
                }
                print_value(out, x, style, level + 1);
            }
            newline(out, style, level);
            out.push(b'}');
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn numbers_print_as_jq_1_6() {
        let cases = [
            (1e17, "1e+17"),
            (1e16, "1e+16"),
            (1.2e16, "12000000000000000"),
            (123456789012345678.0, "123456789012345680"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (0.00001234, "1.234e-05"),
            (3.25, "3.25"),
            (1.0, "1"),
            (100.0, "100"),
            (-0.0, "-0"),
            (f64::INFINITY, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
            (1.5e300, "1.5e+300"),
            (12345678901234567890123.0, "12345678901234568000000"),
            (-1.5, "-1.5"),
            (f64::NAN, "null"),
        ];
        for (n, want) in cases {
            assert_eq!(super::number_text(n), want, "{n}");
        }
    }
}
