//! The programs under `/bin` and `/usr/bin`, in one command table.
//!
//! The table is the one list of the machine's programs: a new machine's `/bin` and
//! `/usr/bin` (and so `command -v`, `type`, `hash`), [`crate::is_supported_utility`] and
//! the dispatch of a program call all come from it. A program in its own file here gets a
//! narrow [`Ctx`] (argv, stdio, filesystem, cwd, environment, budgets), never the
//! interpreter, and parses its options with [`opts`] (GNU style, over lexopt). Programs
//! not moved here yet (`main: None`) still run from `utils.rs`.

mod basename;
mod cut;
mod dirname;
pub(crate) mod opts;
mod rev;
mod tac;
mod tr;
mod uniq;

use std::sync::OnceLock;

use crate::shell::{Interp, Shell, R};

/// What a program's entry point is.
pub(crate) type Main = fn(&mut Ctx<'_, '_>) -> R<i32>;

/// One program of the table.
pub(crate) struct Program {
    /// The name under `/bin` and `/usr/bin`.
    pub(crate) name: &'static str,
    /// Its entry point; `None` while it still lives in `utils.rs`.
    pub(crate) main: Option<Main>,
}

const fn legacy(name: &'static str) -> Program {
    Program { name, main: None }
}

/// Every program a machine has.
pub(crate) const TABLE: &[Program] = &[
    legacy("["),
    Program {
        name: "basename",
        main: Some(basename::main),
    },
    legacy("bash"),
    legacy("cat"),
    legacy("chmod"),
    legacy("cp"),
    Program {
        name: "cut",
        main: Some(cut::main),
    },
    legacy("date"),
    Program {
        name: "dirname",
        main: Some(dirname::main),
    },
    legacy("echo"),
    legacy("env"),
    legacy("false"),
    legacy("head"),
    legacy("kill"),
    legacy("ln"),
    legacy("ls"),
    legacy("mkdir"),
    legacy("mv"),
    legacy("printf"),
    legacy("pwd"),
    Program {
        name: "rev",
        main: Some(rev::main),
    },
    legacy("rm"),
    legacy("rmdir"),
    legacy("seq"),
    legacy("sh"),
    legacy("sleep"),
    legacy("stat"),
    Program {
        name: "tac",
        main: Some(tac::main),
    },
    legacy("tail"),
    legacy("tar"),
    legacy("tee"),
    legacy("test"),
    legacy("timeout"),
    legacy("touch"),
    Program {
        name: "tr",
        main: Some(tr::main),
    },
    legacy("true"),
    Program {
        name: "uniq",
        main: Some(uniq::main),
    },
    legacy("wc"),
];

/// The program called `name`.
pub(crate) fn find(name: &str) -> Option<&'static Program> {
    TABLE.iter().find(|p| p.name == name)
}

/// The names of [`TABLE`], in its order (what `/bin` lists).
pub(crate) fn names() -> &'static [&'static str] {
    static NAMES: OnceLock<Vec<&'static str>> = OnceLock::new();
    NAMES.get_or_init(|| TABLE.iter().map(|p| p.name).collect())
}

/// What a program may use: its arguments, its standard streams and the budgets (through
/// [`Ctx::tick`]); the filesystem, working directory, environment, clock and a callback
/// to run other commands join as the programs that need them move here. It cannot reach
/// the shell's variables, functions or control flow.
pub(crate) struct Ctx<'i, 'w> {
    it: &'i mut Interp<'w>,
    sh: &'i Shell,
    argv: &'i [String],
}

impl<'i, 'w> Ctx<'i, 'w> {
    /// A context for one run of a program with `argv` (`argv[0]` its name).
    pub(crate) fn new(it: &'i mut Interp<'w>, sh: &'i Shell, argv: &'i [String]) -> Self {
        Ctx { it, sh, argv }
    }

    /// The arguments after the name.
    pub(crate) fn args(&self) -> &[String] {
        self.argv.get(1..).unwrap_or(&[])
    }

    /// Writes to standard output; `Ok(false)` when it is closed or refuses bytes.
    pub(crate) fn out(&mut self, data: &[u8]) -> R<bool> {
        self.it.write(self.sh, 1, data)
    }

    /// Writes one diagnostic line to standard error.
    pub(crate) fn err_line(&mut self, line: &str) {
        self.it.err(self.sh, line);
    }

    /// Fails visibly for what the simulator does not do (exit 2, recorded).
    pub(crate) fn unsupported(&mut self, what: &str) -> R<i32> {
        let msg = format!("unsupported: {what}");
        self.it.record(&msg);
        self.it.err(self.sh, &format!("bash: {msg} (shellbox-sim)"));
        Ok(2)
    }

    /// The bytes of input operand `name` (`-` is standard input), or the error's words
    /// (`No such file or directory`).
    pub(crate) fn read_input(&mut self, name: &str) -> Result<Vec<u8>, &'static str> {
        if name == "-" {
            Ok(self.it.read_all(self.sh, 0))
        } else {
            self.it.read_file(self.sh, name).map_err(|e| e.msg())
        }
    }

    /// Counts one unit of work against the budgets and the deadline.
    pub(crate) fn tick(&mut self) -> R<()> {
        self.it.tick()
    }
}

/// Runs a table program's `main` with `argv`.
pub(crate) fn run(main: Main, it: &mut Interp<'_>, sh: &mut Shell, argv: &[String]) -> R<i32> {
    main(&mut Ctx::new(it, sh, argv))
}
