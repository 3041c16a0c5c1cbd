//! POSIX regular expressions (BRE and ERE, with GNU's extensions) translated to the
//! `regex` crate's syntax, and matched leftmost-longest where the two semantics differ.
//!
//! Translation: BRE `\( \) \{ \} \| \+ \?` are the group, interval, alternation and
//! repetition operators and their plain forms literal; `*` first in an expression (or
//! after `\(`, `\|` or `^`) is literal; `^` anchors only first and `$` only last (in a BRE);
//! bracket expressions (`[]a]`, `[^]a]`, `[[:alpha:]]`, `[a-z]`, a backslash being
//! literal inside) are rewritten with every member escaped; `.` matches a newline (as in
//! POSIX, where only the line splitting keeps newlines out); GNU's `\w \W \s \S \b \B`
//! pass through, `\<` and `\>` become `\b`, `` \` `` and `\'` the text's ends.
//! Back-references (`\1` in a pattern) have no counterpart in the `regex` crate: they
//! are refused with [`Error::Unsupported`].
//!
//! Matching: the `regex` crate is leftmost-first; POSIX is leftmost-longest. Both find the
//! same start; when the expression has an alternation (the only place a leftmost-first
//! match can end short of the longest, as POSIX has no lazy operators), the end is
//! extended to the longest match from that start with a second, anchored
//! [`regex_automata::meta::Regex`] in `MatchKind::All` mode.

use regex::bytes::Regex;
use regex_automata::meta;
use regex_automata::{Anchored, Input, MatchKind};

/// Why a pattern does not compile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Error {
    /// Invalid syntax, with GNU's words (`Unmatched [, [^, [:, [., or [=`).
    Syntax(String),
    /// Valid POSIX the simulator does not do (back-references).
    Unsupported(String),
}

/// Which dialect a pattern is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// Basic (grep, sed).
    Basic,
    /// Extended (grep -E, sed -E, awk).
    Extended,
}

/// A compiled pattern.
#[derive(Debug, Clone)]
pub(crate) struct Re {
    first: Regex,
    longest: Option<(meta::Regex, Regex)>,
}

fn class(name: &str) -> Option<&'static str> {
    Some(match name {
        "alpha" => "a-zA-Z",
        "digit" => "0-9",
        "alnum" => "a-zA-Z0-9",
        "upper" => "A-Z",
        "lower" => "a-z",
        "space" => " \\t\\n\\r\\x0B\\x0C",
        "blank" => " \\t",
        "punct" => "!-/:-@\\[-`{-~",
        "print" => " -~",
        "graph" => "!-~",
        "cntrl" => "\\x00-\\x1F\\x7F",
        "xdigit" => "0-9A-Fa-f",
        _ => return None,
    })
}

fn push_lit(out: &mut String, c: char) {
    if c.is_ascii_alphanumeric() || !c.is_ascii() {
        out.push(c);
    } else {
        out.push('\\');
        out.push(c);
    }
}

/// Translates the bracket expression starting after `[` at `chars[i]`; returns the
/// index after its `]`.
fn bracket(chars: &[char], mut i: usize, out: &mut String) -> Result<usize, Error> {
    let unmatched = || Error::Syntax("Unmatched [, [^, [:, [., or [=".into());
    out.push('[');
    if chars.get(i) == Some(&'^') {
        out.push('^');
        i += 1;
    }
    let mut first = true;
    loop {
        let Some(&c) = chars.get(i) else {
            return Err(unmatched());
        };
        if c == ']' && !first {
            out.push(']');
            return Ok(i + 1);
        }
        first = false;
        if c == '[' && matches!(chars.get(i + 1), Some(':' | '=' | '.')) {
            let kind = chars[i + 1];
            let start = i + 2;
            let mut j = start;
            while j + 1 < chars.len() && !(chars[j] == kind && chars[j + 1] == ']') {
                j += 1;
            }
            if j + 1 >= chars.len() {
                return Err(unmatched());
            }
            let name: String = chars[start..j].iter().collect();
            i = j + 2;
            match kind {
                ':' => match class(&name) {
                    Some(c) => out.push_str(c),
                    None => return Err(Error::Syntax("Invalid character class name".into())),
                },
                _ => {
                    let mut it = name.chars();
                    match (it.next(), it.next()) {
                        (Some(c), None) => push_lit(out, c),
                        _ => return Err(Error::Syntax("Invalid collation character".into())),
                    }
                }
            }
            continue;
        }
        // a range a-z (a `-` first or last is literal)
        if chars.get(i + 1) == Some(&'-') && chars.get(i + 2).is_some_and(|n| *n != ']') {
            let hi = chars[i + 2];
            if hi < c {
                return Err(Error::Syntax("Invalid range end".into()));
            }
            push_lit(out, c);
            out.push('-');
            push_lit(out, hi);
            i += 3;
            continue;
        }
        push_lit(out, c);
        i += 1;
    }
}

/// Translates `pat` into the `regex` crate's syntax; also says whether it has an
/// alternation.
pub(crate) fn translate(pat: &str, dialect: Dialect) -> Result<(String, bool), Error> {
    let ere = dialect == Dialect::Extended;
    let chars: Vec<char> = pat.chars().collect();
    let mut out = String::with_capacity(pat.len() + 8);
    let mut alt = false;
    let mut depth = 0usize;
    // whether the next token starts an expression (where `*` is literal and `^` anchors)
    let mut at_start = true;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let starting = at_start;
        at_start = false;
        match c {
            '\\' => {
                let Some(&n) = chars.get(i + 1) else {
                    return Err(Error::Syntax("Trailing backslash".into()));
                };
                i += 2;
                match n {
                    '(' if !ere => {
                        out.push('(');
                        depth += 1;
                        at_start = true;
                    }
                    ')' if !ere => {
                        if depth == 0 {
                            return Err(Error::Syntax("Unmatched ) or \\)".into()));
                        }
                        depth -= 1;
                        out.push(')');
                    }
                    '|' if !ere => {
                        out.push('|');
                        alt = true;
                        at_start = true;
                    }
                    '{' if !ere => {
                        let mut j = i;
                        while j < chars.len() && chars[j] != '\\' {
                            j += 1;
                        }
                        if chars.get(j + 1) != Some(&'}') {
                            return Err(Error::Syntax("Unmatched \\{".into()));
                        }
                        let body: String = chars[i..j].iter().collect();
                        if starting {
                            return Err(Error::Syntax(
                                "Invalid preceding regular expression".into(),
                            ));
                        }
                        interval(&body, &mut out)?;
                        i = j + 2;
                    }
                    '+' | '?' if !ere => {
                        if starting {
                            push_lit(&mut out, n);
                        } else {
                            out.push(n);
                        }
                    }
                    '1'..='9' => {
                        return Err(Error::Unsupported(
                            "back-references in regular expressions".into(),
                        ))
                    }
                    'w' | 'W' | 's' | 'S' | 'b' | 'B' => {
                        out.push('\\');
                        out.push(n);
                    }
                    '<' | '>' => out.push_str("\\b"),
                    '`' => out.push_str("\\A"),
                    '\'' => out.push_str("\\z"),
                    'n' => out.push_str("\\n"),
                    _ => push_lit(&mut out, n),
                }
            }
            '[' => {
                i = bracket(&chars, i + 1, &mut out)?;
            }
            '.' => {
                out.push_str("(?s:.)");
                i += 1;
            }
            '*' => {
                if starting {
                    if !ere {
                        out.push_str("\\*");
                    }
                } else {
                    out.push('*');
                }
                i += 1;
            }
            '^' => {
                if ere || starting {
                    out.push('^');
                    at_start = true;
                } else {
                    out.push_str("\\^");
                }
                i += 1;
            }
            '$' => {
                let last = i + 1 == chars.len()
                    || (!ere
                        && chars.get(i + 1) == Some(&'\\')
                        && matches!(chars.get(i + 2), Some(')' | '|')));
                if ere || last {
                    out.push('$');
                } else {
                    out.push_str("\\$");
                }
                i += 1;
            }
            '(' if ere => {
                out.push('(');
                depth += 1;
                at_start = true;
                i += 1;
            }
            ')' if ere => {
                if depth == 0 {
                    out.push_str("\\)");
                } else {
                    depth -= 1;
                    out.push(')');
                }
                i += 1;
            }
            '|' if ere => {
                out.push('|');
                alt = true;
                at_start = true;
                i += 1;
            }
            '+' | '?' if ere => {
                if starting {
                    push_lit(&mut out, c);
                } else {
                    out.push(c);
                }
                i += 1;
            }
            '{' if ere => {
                let close = chars[i..].iter().position(|c| *c == '}').map(|p| p + i);
                let body: Option<String> = close.map(|j| chars[i + 1..j].iter().collect());
                match body {
                    Some(b)
                        if !starting
                            && !b.is_empty()
                            && b.chars().all(|c| c.is_ascii_digit() || c == ',') =>
                    {
                        interval(&b, &mut out)?;
                        i = close.unwrap_or(i) + 1;
                    }
                    _ => {
                        out.push_str("\\{");
                        i += 1;
                    }
                }
            }
            _ => {
                push_lit(&mut out, c);
                i += 1;
            }
        }
    }
    if depth > 0 {
        return Err(Error::Syntax("Unmatched ( or \\(".into()));
    }
    Ok((out, alt))
}

fn interval(body: &str, out: &mut String) -> Result<(), Error> {
    let bad = || Error::Syntax("Invalid content of \\{\\}".into());
    let (lo, hi) = match body.split_once(',') {
        Some((a, b)) => (a, Some(b)),
        None => (body, None),
    };
    let lo: u32 = if lo.is_empty() {
        0
    } else {
        lo.parse().map_err(|_| bad())?
    };
    let hi: Option<u32> = match hi {
        None => Some(lo),
        Some("") => None,
        Some(h) => Some(h.parse().map_err(|_| bad())?),
    };
    if hi.is_some_and(|h| h < lo) {
        return Err(bad());
    }
    if lo > 255 || hi.is_some_and(|h| h > 255) {
        return Err(Error::Syntax("Regular expression too big".into()));
    }
    match (body.contains(','), hi) {
        (false, _) => out.push_str(&format!("{{{lo}}}")),
        (true, None) => out.push_str(&format!("{{{lo},}}")),
        (true, Some(h)) => out.push_str(&format!("{{{lo},{h}}}")),
    }
    Ok(())
}

impl Re {
    /// Compiles `pat` in `dialect`, ignoring case when `icase`.
    ///
    /// # Errors
    /// [`Error`] for invalid syntax and for back-references.
    #[cfg_attr(not(test), allow(dead_code))] // sed and awk use it next
    pub(crate) fn new(pat: &str, dialect: Dialect, icase: bool) -> Result<Re, Error> {
        let (t, alt) = translate(pat, dialect)?;
        Re::build(&t, alt, icase)
    }

    /// Compiles `t`, already in the `regex` crate's syntax; `alt` when it has an alternation.
    ///
    /// # Errors
    /// [`Error::Syntax`] when it does not compile.
    pub(crate) fn build(t: &str, alt: bool, icase: bool) -> Result<Re, Error> {
        let flags = if icase { "(?i)" } else { "" };
        let too_big = |e: regex::Error| Error::Syntax(format!("{e}"));
        let first = regex::bytes::RegexBuilder::new(&format!("{flags}(?:{t})"))
            .size_limit(8 << 20)
            .build()
            .map_err(too_big)?;
        let longest = if alt {
            let m = meta::Regex::builder()
                .configure(meta::Config::new().match_kind(MatchKind::All))
                .syntax(regex_automata::util::syntax::Config::new().case_insensitive(icase))
                .build(&format!("(?:{t})"))
                .map_err(|e| Error::Syntax(e.to_string()))?;
            let whole =
                regex::bytes::Regex::new(&format!("{flags}\\A(?:{t})\\z")).map_err(too_big)?;
            Some((m, whole))
        } else {
            None
        };
        Ok(Re { first, longest })
    }

    /// Whether `hay` has a match.
    pub(crate) fn is_match(&self, hay: &[u8]) -> bool {
        self.first.is_match(hay)
    }

    /// The leftmost-longest match at or after `start`, as a byte range.
    pub(crate) fn find_at(&self, hay: &[u8], start: usize) -> Option<(usize, usize)> {
        let m = self.first.find_at(hay, start)?;
        let (s, mut e) = (m.start(), m.end());
        if let Some((long, _)) = &self.longest {
            let input = Input::new(hay).range(s..).anchored(Anchored::Yes);
            if let Some(l) = long.search(&input) {
                e = e.max(l.end());
            }
        }
        Some((s, e))
    }

    /// The groups of the leftmost-longest match at or after `start`: entry 0 the whole
    /// match, `None` for a group that did not take part.
    #[cfg_attr(not(test), allow(dead_code))] // sed and awk use it next
    pub(crate) fn captures_at(
        &self,
        hay: &[u8],
        start: usize,
    ) -> Option<Vec<Option<(usize, usize)>>> {
        let (s, e) = self.find_at(hay, start)?;
        let caps = match &self.longest {
            Some((_, whole)) => whole.captures(&hay[s..e]).map(|c| (c, s)),
            None => None,
        };
        let (c, base) = match caps {
            Some(c) => c,
            None => (self.first.captures_at(hay, start)?, 0),
        };
        Some(
            c.iter()
                .map(|g| g.map(|g| (g.start() + base, g.end() + base)))
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(p: &str, d: Dialect) -> String {
        translate(p, d).unwrap().0
    }

    #[test]
    fn basic_and_extended() {
        use Dialect::*;
        assert_eq!(t("a\\(b\\)*c", Basic), "a(b)*c");
        assert_eq!(t("a+b?", Basic), "a\\+b\\?");
        assert_eq!(t("*a", Basic), "\\*a");
        assert_eq!(t("a^b$", Basic), "a\\^b$");
        assert_eq!(t("x\\{3\\}", Basic), "x{3}");
        assert_eq!(t("[]a]", Basic), "[\\]a]");
        assert_eq!(t("[[:digit:]x-z]", Extended), "[0-9x-z]");
        assert_eq!(t("a{2,}|b", Extended), "a{2,}|b");
        assert_eq!(t("a{x", Extended), "a\\{x");
        assert!(matches!(
            translate("\\(a\\)\\1", Basic),
            Err(Error::Unsupported(_))
        ));
        assert!(matches!(translate("[a", Basic), Err(Error::Syntax(_))));
    }

    #[test]
    fn leftmost_longest() {
        let re = Re::new("a|ab", Dialect::Extended, false).unwrap();
        assert_eq!(re.find_at(b"xabc", 0), Some((1, 3)));
        let re = Re::new("\\(a\\|ab\\)\\(c\\|bcd\\)", Dialect::Basic, false).unwrap();
        assert_eq!(re.find_at(b"abcd", 0), Some((0, 4)));
        let c = re.captures_at(b"abcd", 0).unwrap();
        assert_eq!(c[0], Some((0, 4)));
    }
}
