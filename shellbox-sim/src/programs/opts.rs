//! GNU-style option parsing for the programs, written once over lexopt: bundled short
//! flags (`-az`), attached and separate values (`-s.txt`, `-s .txt`), `--name=value` and
//! `--name value`, `--` ending options, long options abbreviated to any unambiguous
//! prefix (`--suf` for `--suffix`), and GNU's diagnostics: `prog: invalid option -- 'x'`,
//! `prog: unrecognized option '--x'`, `prog: option '--s' is ambiguous`, `prog: option
//! requires an argument -- 's'`, each followed by `Try 'prog --help' for more
//! information.` and the program's usage exit status.

/// One parsed argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Arg {
    /// A short option.
    Short(char),
    /// A long option, by its full name.
    Long(&'static str),
    /// An operand.
    Operand(String),
}

/// A parser for one program's arguments.
pub(crate) struct Parser {
    inner: lexopt::Parser,
    prog: String,
    longs: &'static [&'static str],
    /// The option whose value [`Parser::value`] reads, for diagnostics.
    last: String,
    /// Arguments read by [`Parser::next_in`], which looks at the clock every
    /// [`ARGS_PER_CHECK`].
    read: u32,
}

/// How many arguments [`Parser::next_in`] reads between looks at the clock: a program given
/// a million operands (`basename $(seq 1000000)`) parses them in pieces (issue 16, the hour
/// run's seed 20261206 case 17517: 283 ms of CPU past a 200 ms deadline).
const ARGS_PER_CHECK: u32 = 1024;

/// A usage error: GNU's diagnostic lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Usage(pub(crate) String);

impl Parser {
    /// Parses `args` (after the program name) of `prog`, which has the long options
    /// `longs`.
    pub(crate) fn new(prog: &str, args: &[String], longs: &'static [&'static str]) -> Self {
        Parser {
            inner: lexopt::Parser::from_args(args.iter().cloned()),
            prog: prog.to_string(),
            longs,
            last: String::new(),
            read: 0,
        }
    }

    /// [`Parser::next`], looking at the program's clock (the deadline, a cancel) every
    /// [`ARGS_PER_CHECK`] arguments.
    ///
    /// # Errors
    /// The clock's error ([`Ctx::check_time`](super::Ctx::check_time)) as `Err`; a usage
    /// error as `Ok(Err(_))`.
    pub(crate) fn next_in(
        &mut self,
        cx: &mut super::Ctx<'_, '_>,
    ) -> crate::shell::R<Result<Option<Arg>, Usage>> {
        self.read = self.read.wrapping_add(1);
        if self.read.is_multiple_of(ARGS_PER_CHECK) {
            cx.check_time()?;
        }
        Ok(self.next())
    }

    fn usage(&self, first: String) -> Usage {
        Usage(format!(
            "{first}\nTry '{} --help' for more information.",
            self.prog
        ))
    }

    /// The next argument; `None` at the end.
    ///
    /// # Errors
    /// [`Usage`] for an unknown, ambiguous or malformed option.
    pub(crate) fn next(&mut self) -> Result<Option<Arg>, Usage> {
        use lexopt::Arg as L;
        match self.inner.next() {
            Ok(None) => Ok(None),
            Ok(Some(L::Short(c))) => {
                self.last = c.to_string();
                Ok(Some(Arg::Short(c)))
            }
            Ok(Some(L::Long(name))) => {
                let name = name.to_string();
                let exact = self.longs.iter().find(|l| **l == name);
                let found: Vec<&'static str> = match exact {
                    Some(l) => vec![*l],
                    None => self
                        .longs
                        .iter()
                        .filter(|l| l.starts_with(name.as_str()))
                        .copied()
                        .collect(),
                };
                match found.as_slice() {
                    [one] => {
                        self.last = format!("--{one}");
                        Ok(Some(Arg::Long(one)))
                    }
                    [] => Err(self.usage(format!("{}: unrecognized option '--{name}'", self.prog))),
                    many => {
                        let list: Vec<String> = many.iter().map(|l| format!("'--{l}'")).collect();
                        Err(self.usage(format!(
                            "{}: option '--{name}' is ambiguous; possibilities: {}",
                            self.prog,
                            list.join(" ")
                        )))
                    }
                }
            }
            Ok(Some(L::Value(v))) => Ok(Some(Arg::Operand(v.to_string_lossy().into_owned()))),
            Err(lexopt::Error::UnexpectedValue { option, .. }) => Err(self.usage(format!(
                "{}: option '{option}' doesn't allow an argument",
                self.prog
            ))),
            Err(e) => Err(self.usage(format!("{}: {e}", self.prog))),
        }
    }

    /// The value of the option just returned (attached or the next argument).
    ///
    /// # Errors
    /// [`Usage`] when it has none.
    pub(crate) fn value(&mut self) -> Result<String, Usage> {
        match self.inner.value() {
            Ok(v) => Ok(v.to_string_lossy().into_owned()),
            Err(_) if self.last.starts_with("--") => Err(self.usage(format!(
                "{}: option '{}' requires an argument",
                self.prog, self.last
            ))),
            Err(_) => Err(self.usage(format!(
                "{}: option requires an argument -- '{}'",
                self.prog, self.last
            ))),
        }
    }

    /// The value attached to the option just returned (`--color=never`), if any.
    pub(crate) fn optional_value(&mut self) -> Option<String> {
        self.inner
            .optional_value()
            .map(|v| v.to_string_lossy().into_owned())
    }

    /// GNU's diagnostic for a short option the program does not have.
    pub(crate) fn invalid_short(&self, c: char) -> Usage {
        self.usage(format!("{}: invalid option -- '{c}'", self.prog))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(args: &[&str], longs: &'static [&'static str]) -> Result<Vec<Arg>, Usage> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let mut p = Parser::new("prog", &args, longs);
        let mut out = Vec::new();
        while let Some(a) = p.next()? {
            let with_value = matches!(a, Arg::Short('s') | Arg::Long("suffix"));
            out.push(a);
            if with_value {
                out.push(Arg::Operand(format!("={}", p.value()?)));
            }
        }
        Ok(out)
    }

    #[test]
    fn gnu_forms() {
        use Arg::*;
        const L: &[&str] = &["suffix", "multiple", "zero"];
        assert_eq!(
            all(&["-az", "-s.txt", "x", "--suf=.c", "--mult", "--", "-a"], L).unwrap(),
            vec![
                Short('a'),
                Short('z'),
                Short('s'),
                Operand("=.txt".into()),
                Operand("x".into()),
                Long("suffix"),
                Operand("=.c".into()),
                Long("multiple"),
                Operand("-a".into()),
            ]
        );
        assert_eq!(
            all(&["--suffix", ".h"], L).unwrap(),
            vec![Long("suffix"), Operand("=.h".into())]
        );
        assert_eq!(
            all(&["--nope"], L).unwrap_err().0,
            "prog: unrecognized option '--nope'\nTry 'prog --help' for more information."
        );
        assert_eq!(
            all(&["-s"], L).unwrap_err().0,
            "prog: option requires an argument -- 's'\nTry 'prog --help' for more information."
        );
        assert!(all(&["--zero=1"], L)
            .unwrap_err()
            .0
            .contains("doesn't allow an argument"));
        const A: &[&str] = &["zebra", "zero"];
        assert!(all(&["--ze"], A).unwrap_err().0.contains("is ambiguous"));
    }
}
