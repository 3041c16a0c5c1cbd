//! Pattern operations of parameter expansion (`${x#p}`, `${x%%p}`, `${x/p/r}`, `${x//p/r}`)
//! in near-linear time.
//!
//! A pattern is compiled once ([`glob::to_regex`]) into lazy DFAs (regex-automata's hybrid
//! engine, all-matches semantics) that are walked byte by byte: from a start position the
//! walk sees every match end, so the shortest and the longest match come from one pass
//! that stops at the automaton's dead state; a reversed DFA (built from the same expression) does the same for suffixes. The
//! leftmost match start of a replacement comes from the `regex` crate (linear time). Bash's
//! own matcher retries every split (quadratic and worse); the results are the same.
//!
//! Walks call a check every [`CHECK_EVERY`] bytes, so a long operation still sees the
//! command's deadline; results longer than the caller's bound are refused.
//! Patterns a regular expression cannot express (`!(...)`) use the backtracking matcher
//! of [`crate::glob`], with the same checks between attempts.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use regex_automata::hybrid::dfa::{Cache, DFA};
use regex_automata::nfa::thompson;
use regex_automata::{Anchored, Input, MatchKind};

use crate::glob;
use crate::shell::{Ctl, R};

/// Bytes walked (or positions tried) between two deadline checks.
pub const CHECK_EVERY: usize = 16 * 1024;

/// A pattern compiled for matching.
struct Compiled {
    fwd: DFA,
    rev: DFA,
    find: regex::Regex,
    caches: RefCell<(Cache, Cache)>,
}

/// A compiled pattern; literal patterns need no automaton.
enum Pat {
    Literal(String),
    Dfa(Box<Compiled>),
    /// Only the backtracking matcher can say it (`!(...)`).
    Backtrack(String, bool),
}

thread_local! {
    static CACHE: RefCell<HashMap<(String, bool), Rc<Pat>>> = RefCell::new(HashMap::new());
}

fn build(re: &str, reverse: bool) -> Option<DFA> {
    DFA::builder()
        .configure(DFA::config().match_kind(MatchKind::All))
        .thompson(thompson::Config::new().reverse(reverse))
        .build(re)
        .ok()
}

fn compile(pat: &str, ext: bool) -> Rc<Pat> {
    let key = (pat.to_string(), ext);
    if let Some(p) = CACHE.with(|c| c.borrow().get(&key).cloned()) {
        return p;
    }
    let compiled = if !glob::has_meta(pat, ext) {
        Pat::Literal(glob::unescape(pat))
    } else {
        glob::to_regex(pat, ext)
            .and_then(|f| {
                let fwd = build(&f, false)?;
                // the same expression, its automaton reversed (regex-automata reverses the NFA)
                let rev = build(&f, true)?;
                let find = regex::RegexBuilder::new(&f)
                    .size_limit(1 << 24)
                    .build()
                    .ok()?;
                let caches = RefCell::new((fwd.create_cache(), rev.create_cache()));
                Some(Pat::Dfa(Box::new(Compiled {
                    fwd,
                    rev,
                    find,
                    caches,
                })))
            })
            .unwrap_or_else(|| Pat::Backtrack(pat.to_string(), ext))
    };
    let p = Rc::new(compiled);
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if c.len() >= 256 {
            c.clear();
        }
        c.insert(key, p.clone());
    });
    p
}

impl Compiled {
    /// Ends of the shortest and the longest match of the pattern starting at `start`.
    fn ends_from(
        &self,
        s: &[u8],
        start: usize,
        check: &mut dyn FnMut() -> R<()>,
    ) -> R<Option<(usize, usize)>> {
        let mut caches = self.caches.borrow_mut();
        let cache = &mut caches.0;
        let input = Input::new(s).range(start..).anchored(Anchored::Yes);
        let Ok(mut sid) = self.fwd.start_state_forward(cache, &input) else {
            return Ok(None);
        };
        let mut found: Option<(usize, usize)> = None;
        let mut note = |at: usize| {
            found = Some(found.map_or((at, at), |(first, _)| (first, at)));
        };
        for (i, &b) in s.iter().enumerate().skip(start) {
            let Ok(next) = self.fwd.next_state(cache, sid, b) else {
                return Ok(None);
            };
            sid = next;
            // match states are delayed by one byte: a match ends at `i`
            if sid.is_match() {
                note(i);
            }
            if sid.is_dead() || sid.is_quit() {
                return Ok(found);
            }
            if (i - start) % CHECK_EVERY == CHECK_EVERY - 1 {
                check()?;
            }
        }
        if let Ok(eoi) = self.fwd.next_eoi_state(cache, sid) {
            if eoi.is_match() {
                note(s.len());
            }
        }
        Ok(found)
    }

    /// Starts of the shortest and the longest suffix of `s` the pattern matches.
    fn suffix_starts(
        &self,
        s: &[u8],
        check: &mut dyn FnMut() -> R<()>,
    ) -> R<Option<(usize, usize)>> {
        let mut caches = self.caches.borrow_mut();
        let cache = &mut caches.1;
        let input = Input::new(s).anchored(Anchored::Yes);
        let Ok(mut sid) = self.rev.start_state_reverse(cache, &input) else {
            return Ok(None);
        };
        let mut found: Option<(usize, usize)> = None;
        let mut note = |at: usize| {
            found = Some(found.map_or((at, at), |(first, _)| (first, at)));
        };
        for i in (0..s.len()).rev() {
            let Ok(next) = self.rev.next_state(cache, sid, s[i]) else {
                return Ok(None);
            };
            sid = next;
            // delayed by one byte: a match starts at `i + 1`
            if sid.is_match() {
                note(i + 1);
            }
            if sid.is_dead() || sid.is_quit() {
                return Ok(found);
            }
            if (s.len() - i).is_multiple_of(CHECK_EVERY) {
                check()?;
            }
        }
        if let Ok(eoi) = self.rev.next_eoi_state(cache, sid) {
            if eoi.is_match() {
                note(0);
            }
        }
        Ok(found)
    }
}

/// The char boundaries of `s`, and its end.
fn boundaries(s: &str) -> impl DoubleEndedIterator<Item = usize> + '_ {
    s.char_indices()
        .map(|(i, _)| i)
        .chain(std::iter::once(s.len()))
}

/// Whether `s` matches the whole pattern (`[[ s == pat ]]`, `case`): a literal compares,
/// a pattern a regular expression can say walks its DFA once (linear time, `check` every
/// [`CHECK_EVERY`] bytes), `!(...)` backtracks with `check` every
/// [`glob::CHECK_STEPS`] steps.
///
/// # Errors
/// The first error `check` returns (the command's deadline or budgets).
pub fn matches_whole(s: &str, pat: &str, ext: bool, check: &mut dyn FnMut() -> R<()>) -> R<bool> {
    match &*compile(pat, ext) {
        Pat::Literal(lit) => Ok(s == lit),
        Pat::Dfa(c) => Ok(c
            .ends_from(s.as_bytes(), 0, check)?
            .is_some_and(|(_, longest)| longest == s.len())),
        Pat::Backtrack(pat, ext) => glob::matches_checked(pat, s, *ext, check),
    }
}

/// `${s#pat}` (`largest`: `##`), `${s%pat}` (`suffix`), `${s%%pat}`.
pub fn remove(
    s: &str,
    pat: &str,
    suffix: bool,
    largest: bool,
    ext: bool,
    check: &mut dyn FnMut() -> R<()>,
) -> R<String> {
    match &*compile(pat, ext) {
        Pat::Literal(lit) => Ok(if suffix {
            s.strip_suffix(lit.as_str()).unwrap_or(s).to_string()
        } else {
            s.strip_prefix(lit.as_str()).unwrap_or(s).to_string()
        }),
        Pat::Dfa(c) => {
            if suffix {
                Ok(match c.suffix_starts(s.as_bytes(), check)? {
                    Some((shortest, longest)) => {
                        s[..if largest { longest } else { shortest }].to_string()
                    }
                    None => s.to_string(),
                })
            } else {
                Ok(match c.ends_from(s.as_bytes(), 0, check)? {
                    Some((shortest, longest)) => {
                        s[if largest { longest } else { shortest }..].to_string()
                    }
                    None => s.to_string(),
                })
            }
        }
        Pat::Backtrack(pat, ext) => {
            let idx: Vec<usize> = boundaries(s).collect();
            let order: Box<dyn Iterator<Item = &usize>> = match (suffix, largest) {
                (true, true) | (false, false) => Box::new(idx.iter()),
                _ => Box::new(idx.iter().rev()),
            };
            for &i in order {
                check()?;
                let part = if suffix { &s[i..] } else { &s[..i] };
                if glob::matches_checked(pat, part, *ext, check)? {
                    return Ok(if suffix { &s[..i] } else { &s[i..] }.to_string());
                }
            }
            Ok(s.to_string())
        }
    }
}

/// What a replacement anchors to.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Where {
    /// `${s/#pat/rep}`
    Prefix,
    /// `${s/%pat/rep}`
    Suffix,
    /// `${s/pat/rep}`
    First,
    /// `${s//pat/rep}`
    All,
}

/// `${s/pat/rep}` and its forms; a result over `max_len` bytes is a memory-budget error.
pub fn replace(
    s: &str,
    pat: &str,
    rep: &str,
    at: Where,
    ext: bool,
    max_len: usize,
    check: &mut dyn FnMut() -> R<()>,
) -> R<String> {
    let over = || Ctl::Budget("memory limit exceeded".into());
    let compiled = compile(pat, ext);
    match at {
        Where::Prefix | Where::Suffix => {
            let cut = match &*compiled {
                Pat::Literal(lit) => match at {
                    Where::Prefix => s.starts_with(lit.as_str()).then_some(lit.len()),
                    _ => s.ends_with(lit.as_str()).then(|| s.len() - lit.len()),
                },
                Pat::Dfa(c) => match at {
                    Where::Prefix => c.ends_from(s.as_bytes(), 0, check)?.map(|(_, l)| l),
                    _ => c.suffix_starts(s.as_bytes(), check)?.map(|(_, l)| l),
                },
                Pat::Backtrack(pat, ext) => {
                    let idx: Vec<usize> = boundaries(s).collect();
                    let mut hit = None;
                    let order: Box<dyn Iterator<Item = &usize>> = if at == Where::Prefix {
                        Box::new(idx.iter().rev())
                    } else {
                        Box::new(idx.iter())
                    };
                    for &i in order {
                        check()?;
                        let part = if at == Where::Prefix {
                            &s[..i]
                        } else {
                            &s[i..]
                        };
                        if glob::matches_checked(pat, part, *ext, check)? {
                            hit = Some(i);
                            break;
                        }
                    }
                    hit
                }
            };
            let Some(cut) = cut else {
                return Ok(s.to_string());
            };
            if s.len().saturating_add(rep.len()) > max_len {
                return Err(over());
            }
            Ok(if at == Where::Prefix {
                format!("{rep}{}", &s[cut..])
            } else {
                format!("{}{rep}", &s[..cut])
            })
        }
        Where::First | Where::All => {
            if pat.is_empty() {
                return Ok(s.to_string());
            }
            let all = at == Where::All;
            let mut out = String::new();
            let mut copied = 0usize;
            let mut pos = 0usize;
            let mut steps = 0usize;
            while pos <= s.len() {
                steps += 1;
                if steps.is_multiple_of(64) {
                    check()?;
                }
                // the leftmost start at or after `pos` where a non-empty match begins,
                // and that match's longest end
                let hit = match &*compiled {
                    Pat::Literal(lit) => s[pos..].find(lit.as_str()).map(|i| {
                        let i = pos + i;
                        (i, Some(i + lit.len()))
                    }),
                    Pat::Dfa(c) => match c.find.find_at(s, pos) {
                        Some(m) => {
                            let i = m.start();
                            let end = c
                                .ends_from(s.as_bytes(), i, check)?
                                .map(|(_, l)| l)
                                .filter(|&l| l > i);
                            Some((i, end))
                        }
                        None => None,
                    },
                    Pat::Backtrack(pat, ext) => {
                        let mut end = None;
                        if pos < s.len() {
                            let ends: Vec<usize> = boundaries(&s[pos..]).skip(1).collect();
                            for &j in ends.iter().rev() {
                                check()?;
                                if glob::matches_checked(pat, &s[pos..pos + j], *ext, check)? {
                                    end = Some(pos + j);
                                    break;
                                }
                            }
                        }
                        Some((pos, end))
                    }
                };
                let Some((i, end)) = hit else {
                    break;
                };
                match end {
                    Some(e) => {
                        if out.len() + (i - copied) + rep.len() > max_len {
                            return Err(over());
                        }
                        out.push_str(&s[copied..i]);
                        out.push_str(rep);
                        copied = e;
                        pos = e;
                        if !all {
                            break;
                        }
                    }
                    None => {
                        // no non-empty match starts at `i`: try the next character
                        match s[i..].chars().next() {
                            Some(ch) => pos = i + ch.len_utf8(),
                            None => break,
                        }
                    }
                }
            }
            if out.len() + (s.len() - copied) > max_len {
                return Err(over());
            }
            out.push_str(&s[copied..]);
            Ok(out)
        }
    }
}
