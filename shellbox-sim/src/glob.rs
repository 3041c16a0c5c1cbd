//! Shell pattern matching (bash's `fnmatch` with `extglob`): `*`, `?`, bracket
//! expressions with ranges and POSIX classes, backslash escapes, and the extended
//! `@( )`, `!( )`, `+( )`, `*( )`, `?( )` groups.

/// Whether `s` matches the whole pattern `p`. Gives up (no match) after [`MAX_STEPS`];
/// [`matches_checked`] also looks at the caller's clock.
pub fn matches(p: &str, s: &str, extglob: bool) -> bool {
    let mut never = || Ok::<(), std::convert::Infallible>(());
    matches_checked(p, s, extglob, &mut never).unwrap_or(false)
}

/// [`matches`], calling `check` every [`CHECK_STEPS`] matcher steps: an extended pattern
/// can backtrack for a long time on a long subject, and `check` (the command's deadline
/// and budgets) stops it with its error.
///
/// # Errors
/// The first error `check` returns.
pub fn matches_checked<E>(
    p: &str,
    s: &str,
    extglob: bool,
    check: &mut dyn FnMut() -> Result<(), E>,
) -> Result<bool, E> {
    let p: Vec<char> = p.chars().collect();
    let s: Vec<char> = s.chars().collect();
    let mut w = Walk {
        ext: extglob,
        steps: 0,
        check,
        stopped: None,
    };
    let hit = m(&p, &s, &mut w, 0);
    match w.stopped {
        Some(e) => Err(e),
        None => Ok(hit),
    }
}

/// Most matcher steps one match may take: extended patterns can backtrack exponentially,
/// and a runaway match counts as no match instead of hanging the machine.
const MAX_STEPS: u64 = 5_000_000;

/// Matcher steps between two calls of the caller's check.
pub const CHECK_STEPS: u64 = 4096;

/// One match's state: the step count, the caller's check and its error once it failed.
struct Walk<'a, E> {
    ext: bool,
    steps: u64,
    check: &'a mut dyn FnMut() -> Result<(), E>,
    stopped: Option<E>,
}

impl<E> Walk<'_, E> {
    /// Counts a step; false once the match must end (step cap, or the check failed).
    fn step(&mut self) -> bool {
        if self.stopped.is_some() {
            return false;
        }
        self.steps += 1;
        if self.steps > MAX_STEPS {
            return false;
        }
        if self.steps.is_multiple_of(CHECK_STEPS) {
            if let Err(e) = (self.check)() {
                self.stopped = Some(e);
                return false;
            }
        }
        true
    }
}

/// Whether a pattern has unescaped glob metacharacters.
pub fn has_meta(p: &str, extglob: bool) -> bool {
    let c: Vec<char> = p.chars().collect();
    // no `[` after the last `]` can open a bracket expression: without this each `[` of a
    // long text scanned to its end (quadratic)
    let last_close = c.iter().rposition(|&x| x == ']');
    let mut i = 0;
    while i < c.len() {
        match c[i] {
            '\\' => i += 1,
            '*' | '?' => return true,
            '[' if last_close.is_some_and(|e| e > i) && bracket_end(&c, i).is_some() => {
                return true
            }
            '@' | '!' | '+' if extglob && c.get(i + 1) == Some(&'(') => return true,
            _ => {}
        }
        i += 1;
    }
    false
}

/// Removes pattern backslash escapes; a trailing lone backslash stays (it matches
/// itself, as in bash and [`matches`]).
pub fn unescape(p: &str) -> String {
    let mut out = String::with_capacity(p.len());
    let mut it = p.chars();
    while let Some(c) = it.next() {
        if c == '\\' {
            out.push(it.next().unwrap_or('\\'));
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether a pattern escapes the byte `b` with a backslash to match it literally (a
/// pattern character, a backslash, or one of an extended pattern's).
pub fn is_special(b: u8) -> bool {
    matches!(
        b,
        b'*' | b'?' | b'[' | b']' | b'\\' | b'(' | b')' | b'|' | b'@' | b'!' | b'+'
    )
}

fn bracket_end(p: &[char], start: usize) -> Option<usize> {
    let mut i = start + 1;
    if i < p.len() && (p[i] == '!' || p[i] == '^') {
        i += 1;
    }
    if i < p.len() && p[i] == ']' {
        i += 1;
    }
    while i < p.len() {
        if p[i] == '[' && i + 1 < p.len() && p[i + 1] == ':' {
            if let Some(off) = p[i + 2..].windows(2).position(|w| w == [':', ']']) {
                i = i + 2 + off + 2;
                continue;
            }
        }
        if p[i] == '\\' {
            i += 2;
            continue;
        }
        if p[i] == ']' {
            return Some(i);
        }
        i += 1;
    }
    None
}

fn class_match(name: &str, c: char) -> bool {
    match name {
        "alpha" => c.is_alphabetic(),
        "digit" => c.is_ascii_digit(),
        "alnum" => c.is_alphanumeric(),
        "upper" => c.is_uppercase(),
        "lower" => c.is_lowercase(),
        "space" => c.is_whitespace(),
        "blank" => c == ' ' || c == '\t',
        "punct" => c.is_ascii_punctuation(),
        "xdigit" => c.is_ascii_hexdigit(),
        "cntrl" => c.is_control(),
        "print" => !c.is_control(),
        "graph" => !c.is_control() && c != ' ',
        "word" => c.is_alphanumeric() || c == '_',
        _ => false,
    }
}

fn bracket_match(p: &[char], c: char) -> bool {
    // p is the content between [ and ]
    let mut i = 0;
    let neg = !p.is_empty() && (p[0] == '!' || p[0] == '^');
    if neg {
        i = 1;
    }
    let mut ok = false;
    let mut first = true;
    while i < p.len() {
        let mut lo = p[i];
        if lo == '[' && i + 1 < p.len() && p[i + 1] == ':' {
            if let Some(off) = p[i + 2..].windows(2).position(|w| w == [':', ']']) {
                let name: String = p[i + 2..i + 2 + off].iter().collect();
                if class_match(&name, c) {
                    ok = true;
                }
                i = i + 2 + off + 2;
                first = false;
                continue;
            }
        }
        if lo == '\\' && i + 1 < p.len() {
            i += 1;
            lo = p[i];
        }
        let _ = first;
        first = false;
        if i + 2 < p.len() && p[i + 1] == '-' {
            let mut hi = p[i + 2];
            let mut adv = 3;
            if hi == '\\' && i + 3 < p.len() {
                hi = p[i + 3];
                adv = 4;
            }
            if lo <= c && c <= hi {
                ok = true;
            }
            i += adv;
            continue;
        }
        if lo == c {
            ok = true;
        }
        i += 1;
    }
    ok != neg
}

fn group_end(p: &[char], open: usize) -> Option<(usize, Vec<Vec<char>>)> {
    // p[open] == '('
    let mut depth = 0;
    let mut alts = Vec::new();
    let mut cur = Vec::new();
    let mut i = open;
    while i < p.len() {
        let c = p[i];
        if c == '\\' && i + 1 < p.len() {
            if depth > 0 {
                cur.push(c);
                cur.push(p[i + 1]);
            }
            i += 2;
            continue;
        }
        if c == '(' {
            depth += 1;
            if depth == 1 {
                i += 1;
                continue;
            }
        } else if c == ')' {
            depth -= 1;
            if depth == 0 {
                alts.push(cur);
                return Some((i, alts));
            }
        } else if c == '|' && depth == 1 {
            alts.push(std::mem::take(&mut cur));
            i += 1;
            continue;
        }
        cur.push(c);
        i += 1;
    }
    None
}

fn any_alt<E>(alts: &[Vec<char>], s: &[char], w: &mut Walk<'_, E>, d: u32) -> bool {
    alts.iter().any(|a| m(a, s, w, d + 1))
}

fn plus<E>(alts: &[Vec<char>], s: &[char], w: &mut Walk<'_, E>, d: u32) -> bool {
    if s.is_empty() {
        return false;
    }
    for j in 1..=s.len() {
        if !w.step() {
            return false;
        }
        if any_alt(alts, &s[..j], w, d) && (j == s.len() || plus(alts, &s[j..], w, d)) {
            return true;
        }
    }
    false
}

fn m<E>(p: &[char], s: &[char], w: &mut Walk<'_, E>, d: u32) -> bool {
    if d > 64 || !w.step() {
        return false;
    }
    let ext = w.ext;
    let (mut pi, mut si) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    loop {
        if pi < p.len() {
            let c = p[pi];
            if ext && matches!(c, '@' | '!' | '+' | '*' | '?') && p.get(pi + 1) == Some(&'(') {
                if let Some((end, alts)) = group_end(p, pi + 1) {
                    let rest = &p[end + 1..];
                    let tail = &s[si..];
                    for k in 0..=tail.len() {
                        if !w.step() {
                            return false;
                        }
                        let seg = &tail[..k];
                        let ok = match c {
                            '@' => any_alt(&alts, seg, w, d),
                            '?' => k == 0 || any_alt(&alts, seg, w, d),
                            '+' => plus(&alts, seg, w, d),
                            '*' => k == 0 || plus(&alts, seg, w, d),
                            _ => !any_alt(&alts, seg, w, d) && w.stopped.is_none(),
                        };
                        if ok && m(rest, &tail[k..], w, d + 1) {
                            return true;
                        }
                    }
                    // fall back to star backtracking
                    if let Some((sp, ss)) = star {
                        if ss < s.len() {
                            pi = sp + 1;
                            si = ss + 1;
                            star = Some((sp, ss + 1));
                            continue;
                        }
                    }
                    return false;
                }
            }
            match c {
                '*' => {
                    star = Some((pi, si));
                    pi += 1;
                    continue;
                }
                '?' if si < s.len() => {
                    pi += 1;
                    si += 1;
                    continue;
                }
                '[' if si < s.len() => {
                    if let Some(end) = bracket_end(p, pi) {
                        if bracket_match(&p[pi + 1..end], s[si]) {
                            pi = end + 1;
                            si += 1;
                            continue;
                        }
                    } else if s[si] == '[' {
                        pi += 1;
                        si += 1;
                        continue;
                    }
                }
                '\\' if pi + 1 < p.len() && si < s.len() && s[si] == p[pi + 1] => {
                    pi += 2;
                    si += 1;
                    continue;
                }
                _ if c != '?' && c != '[' && c != '\\' && si < s.len() && s[si] == c => {
                    pi += 1;
                    si += 1;
                    continue;
                }
                '\\' if pi + 1 == p.len() && si < s.len() && s[si] == '\\' => {
                    pi += 1;
                    si += 1;
                    continue;
                }
                _ => {}
            }
        } else if si == s.len() {
            return true;
        }
        match star {
            Some((sp, ss)) if ss < s.len() => {
                if !w.step() {
                    return false;
                }
                pi = sp + 1;
                si = ss + 1;
                star = Some((sp, ss + 1));
            }
            _ => return false,
        }
    }
}

/// One element of a pattern compiled for the regex engine.
enum Tok {
    Lit(char),
    Any,
    Star,
    /// A regex character class, rendered (`[...]`).
    Class(String),
    /// An extglob group: `@`, `?`, `+` or `*`, and its alternatives.
    Group(char, Vec<Vec<Tok>>),
}

/// The regex class text for the bracket expression content `p` (between `[` and `]`),
/// with [`bracket_match`]'s semantics.
fn bracket_regex(p: &[char]) -> String {
    let esc = |c: char| -> String {
        if c.is_alphanumeric() {
            c.to_string()
        } else {
            format!("\\x{{{:x}}}", c as u32)
        }
    };
    let mut i = 0;
    let neg = !p.is_empty() && (p[0] == '!' || p[0] == '^');
    if neg {
        i = 1;
    }
    let mut items = String::new();
    while i < p.len() {
        let mut lo = p[i];
        if lo == '[' && i + 1 < p.len() && p[i + 1] == ':' {
            if let Some(off) = p[i + 2..].windows(2).position(|w| w == [':', ']']) {
                let name: String = p[i + 2..i + 2 + off].iter().collect();
                items.push_str(match name.as_str() {
                    "alpha" => "\\p{Alphabetic}",
                    "digit" => "0-9",
                    "alnum" => "\\p{Alphabetic}\\p{N}",
                    "upper" => "\\p{Uppercase}",
                    "lower" => "\\p{Lowercase}",
                    "space" => "\\p{White_Space}",
                    "blank" => " \\t",
                    "punct" => "[:punct:]",
                    "xdigit" => "[:xdigit:]",
                    "cntrl" => "\\p{Cc}",
                    "print" => "[^\\p{Cc}]",
                    "graph" => "[^\\p{Cc} ]",
                    "word" => "\\p{Alphabetic}\\p{N}_",
                    _ => "",
                });
                i = i + 2 + off + 2;
                continue;
            }
        }
        if lo == '\\' && i + 1 < p.len() {
            i += 1;
            lo = p[i];
        }
        if i + 2 < p.len() && p[i + 1] == '-' {
            let mut hi = p[i + 2];
            let mut adv = 3;
            if hi == '\\' && i + 3 < p.len() {
                hi = p[i + 3];
                adv = 4;
            }
            if lo <= hi {
                items.push_str(&format!("{}-{}", esc(lo), esc(hi)));
            }
            i += adv;
            continue;
        }
        items.push_str(&esc(lo));
        i += 1;
    }
    match (items.is_empty(), neg) {
        (true, false) => "[a&&b]".into(),
        (true, true) => "(?s:.)".into(),
        (false, false) => format!("[{items}]"),
        (false, true) => format!("[^{items}]"),
    }
}

fn tokens(p: &[char], ext: bool, depth: u32) -> Option<Vec<Tok>> {
    if depth > 64 {
        return None;
    }
    let mut out = Vec::new();
    let mut i = 0;
    while i < p.len() {
        let c = p[i];
        if ext && matches!(c, '@' | '!' | '+' | '*' | '?') && p.get(i + 1) == Some(&'(') {
            if let Some((end, alts)) = group_end(p, i + 1) {
                if c == '!' {
                    // negation has no regular-expression form here
                    return None;
                }
                let alts = alts
                    .iter()
                    .map(|a| tokens(a, ext, depth + 1))
                    .collect::<Option<Vec<_>>>()?;
                out.push(Tok::Group(c, alts));
                i = end + 1;
                continue;
            }
        }
        match c {
            '*' => out.push(Tok::Star),
            '?' => out.push(Tok::Any),
            '[' => match bracket_end(p, i) {
                Some(end) => {
                    out.push(Tok::Class(bracket_regex(&p[i + 1..end])));
                    i = end + 1;
                    continue;
                }
                None => out.push(Tok::Lit('[')),
            },
            '\\' if i + 1 < p.len() => {
                out.push(Tok::Lit(p[i + 1]));
                i += 2;
                continue;
            }
            _ => out.push(Tok::Lit(c)),
        }
        i += 1;
    }
    Some(out)
}

fn render(toks: &[Tok], out: &mut String) {
    for t in toks {
        match t {
            Tok::Lit(c) => out.push_str(&regex::escape(c.encode_utf8(&mut [0; 4]))),
            Tok::Any => out.push_str("(?s:.)"),
            Tok::Star => out.push_str("(?s:.*)"),
            Tok::Class(c) => out.push_str(c),
            Tok::Group(kind, alts) => {
                out.push_str("(?:");
                for (k, a) in alts.iter().enumerate() {
                    if k > 0 {
                        out.push('|');
                    }
                    render(a, out);
                }
                out.push(')');
                match kind {
                    '?' => out.push('?'),
                    '+' => out.push('+'),
                    '*' => out.push('*'),
                    _ => {}
                }
            }
        }
    }
}

/// The pattern as a regular expression matching the same strings; `None` for what a
/// regular expression cannot say (`!(...)`).
pub fn to_regex(p: &str, ext: bool) -> Option<String> {
    let chars: Vec<char> = p.chars().collect();
    let toks = tokens(&chars, ext, 0)?;
    let mut re = String::new();
    render(&toks, &mut re);
    Some(re)
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn basics() {
        assert!(matches("*.txt", "a.txt", false));
        assert!(!matches("*.txt", "a.txd", false));
        assert!(matches("[0-9]", "5", false));
        assert!(matches("[!a]*", "bcd", false));
        assert!(matches("a\\*", "a*", false));
        assert!(!matches("a\\*", "ab", false));
        assert!(matches("!(*.py)", "b.js", true));
        assert!(!matches("!(*.py)", "a.py", true));
        assert!(matches("@(a|b).*", "b.js", true));
        assert!(matches("+([a-c]).py", "abc.py", true));
        assert!(matches("[[:digit:]]*", "1x", false));
    }

    #[test]
    fn regex_form_agrees_with_the_matcher() {
        let pats = [
            "*.txt",
            "[0-9]",
            "[!a]*",
            "a\\*",
            "@(a|b).*",
            "+([a-c]).py",
            "[[:digit:]]*",
            "?",
            "[",
            "[]a]",
            "[z-a]",
            "*(ab)c",
            "?(x)y",
            "[[:alpha:][:space:]]",
            "\\",
            "a[-]b",
            "[a-]",
            "[!]]",
        ];
        let texts = [
            "a.txt", "5", "bcd", "a*", "b.js", "abc.py", "1x", "x", "[", "]", "a", "ababc", "y",
            "xy", "é ", "\\", "a-b", "-", "", "ab",
        ];
        for p in pats {
            let f = super::to_regex(p, true).unwrap();
            let re = regex::Regex::new(&format!("^(?:{f})$")).unwrap();
            for t in texts {
                assert_eq!(re.is_match(t), matches(p, t, true), "{p:?} {t:?} ({f})");
            }
        }
    }
}
