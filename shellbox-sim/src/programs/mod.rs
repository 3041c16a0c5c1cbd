//! The programs under `/bin` and `/usr/bin`, in one command table.
//!
//! The table is the one list of the machine's programs: a new machine's `/bin` and
//! `/usr/bin` (and so `command -v`, `type`, `hash`), [`crate::is_supported_utility`] and
//! the dispatch of a program call all come from it. A program in its own file here gets a
//! narrow [`Ctx`] (argv, stdio, filesystem, cwd, environment, budgets), never the
//! interpreter, and parses its options with [`opts`] (GNU style, over lexopt). Programs
//! not moved here yet (`main: None`) still run from `utils.rs`.

mod awk;
mod base64;
mod basename;
mod bc;
mod compare;
mod cut;
mod dirname;
mod disk;
mod dump;
mod expr;
mod find;
mod grep;
mod gzip;
mod hash;
mod install;
mod join;
mod jq;
mod layout;
mod mktemp;
mod nl;
mod numfmt;
pub(crate) mod opts;
mod paste;
pub(crate) mod posix;
mod printenv;
mod realpath;
mod rev;
mod sed;
mod shuf;
mod sort;
mod split;
mod sysinfo;
mod tac;
mod tar;
mod tr;
mod truncate;
mod uniq;
mod xargs;
mod yes;

use std::sync::OnceLock;

use crate::shell::{Ctl, Interp, Shell, R};

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
        name: "awk",
        main: Some(awk::main),
    },
    Program {
        name: "base64",
        main: Some(base64::main),
    },
    Program {
        name: "basename",
        main: Some(basename::main),
    },
    legacy("bash"),
    Program {
        name: "bc",
        main: Some(bc::main),
    },
    legacy("cat"),
    legacy("chmod"),
    Program {
        name: "cksum",
        main: Some(hash::cksum),
    },
    Program {
        name: "cmp",
        main: Some(compare::cmp),
    },
    Program {
        name: "column",
        main: Some(layout::column),
    },
    Program {
        name: "comm",
        main: Some(compare::comm),
    },
    legacy("cp"),
    Program {
        name: "cut",
        main: Some(cut::main),
    },
    legacy("date"),
    Program {
        name: "df",
        main: Some(disk::df),
    },
    Program {
        name: "diff",
        main: Some(compare::diff),
    },
    Program {
        name: "dirname",
        main: Some(dirname::main),
    },
    Program {
        name: "du",
        main: Some(disk::du),
    },
    legacy("echo"),
    Program {
        name: "egrep",
        main: Some(grep::main),
    },
    legacy("env"),
    Program {
        name: "expand",
        main: Some(layout::expand),
    },
    Program {
        name: "expr",
        main: Some(expr::main),
    },
    legacy("false"),
    Program {
        name: "find",
        main: Some(find::main),
    },
    Program {
        name: "fgrep",
        main: Some(grep::main),
    },
    Program {
        name: "fold",
        main: Some(layout::fold),
    },
    Program {
        name: "grep",
        main: Some(grep::main),
    },
    Program {
        name: "gunzip",
        main: Some(gzip::main),
    },
    Program {
        name: "gzip",
        main: Some(gzip::main),
    },
    legacy("head"),
    Program {
        name: "hexdump",
        main: Some(dump::hexdump),
    },
    Program {
        name: "hostname",
        main: Some(sysinfo::hostname),
    },
    Program {
        name: "id",
        main: Some(sysinfo::id),
    },
    Program {
        name: "install",
        main: Some(install::main),
    },
    Program {
        name: "join",
        main: Some(join::main),
    },
    Program {
        name: "jq",
        main: Some(jq::main),
    },
    legacy("kill"),
    legacy("ln"),
    legacy("ls"),
    legacy("mkdir"),
    Program {
        name: "mktemp",
        main: Some(mktemp::main),
    },
    legacy("mv"),
    Program {
        name: "md5sum",
        main: Some(hash::main),
    },
    Program {
        name: "nl",
        main: Some(nl::main),
    },
    Program {
        name: "nproc",
        main: Some(sysinfo::nproc),
    },
    Program {
        name: "numfmt",
        main: Some(numfmt::main),
    },
    Program {
        name: "od",
        main: Some(dump::od),
    },
    Program {
        name: "paste",
        main: Some(paste::main),
    },
    Program {
        name: "printenv",
        main: Some(printenv::main),
    },
    legacy("printf"),
    legacy("pwd"),
    Program {
        name: "rev",
        main: Some(rev::main),
    },
    Program {
        name: "readlink",
        main: Some(realpath::readlink),
    },
    Program {
        name: "realpath",
        main: Some(realpath::realpath),
    },
    legacy("rm"),
    legacy("rmdir"),
    Program {
        name: "sed",
        main: Some(sed::main),
    },
    legacy("seq"),
    legacy("sh"),
    Program {
        name: "sha1sum",
        main: Some(hash::main),
    },
    Program {
        name: "sha256sum",
        main: Some(hash::main),
    },
    Program {
        name: "sha512sum",
        main: Some(hash::main),
    },
    Program {
        name: "shuf",
        main: Some(shuf::main),
    },
    legacy("sleep"),
    Program {
        name: "sort",
        main: Some(sort::main),
    },
    Program {
        name: "split",
        main: Some(split::main),
    },
    legacy("stat"),
    Program {
        name: "tac",
        main: Some(tac::main),
    },
    legacy("tail"),
    Program {
        name: "tar",
        main: Some(tar::main),
    },
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
        name: "truncate",
        main: Some(truncate::main),
    },
    Program {
        name: "uname",
        main: Some(sysinfo::uname),
    },
    Program {
        name: "uniq",
        main: Some(uniq::main),
    },
    legacy("wc"),
    Program {
        name: "which",
        main: Some(sysinfo::which),
    },
    Program {
        name: "whoami",
        main: Some(sysinfo::whoami),
    },
    Program {
        name: "xargs",
        main: Some(xargs::main),
    },
    Program {
        name: "xxd",
        main: Some(dump::xxd),
    },
    Program {
        name: "yes",
        main: Some(yes::main),
    },
    Program {
        name: "zcat",
        main: Some(gzip::main),
    },
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

/// What a program may use: its arguments, its standard streams, the filesystem, the
/// working directory, the exported environment, the budgets (through [`Ctx::tick`] and
/// [`Ctx::hold`]) and one callback to run another command ([`Ctx::run`]). It cannot reach
/// the shell's variables, functions or control flow.
pub(crate) struct Ctx<'i, 'w> {
    it: &'i mut Interp<'w>,
    sh: &'i mut Shell,
    argv: &'i [String],
    held: crate::mem::Charge,
}

impl<'i, 'w> Ctx<'i, 'w> {
    /// A context for one run of a program with `argv` (`argv[0]` its name).
    pub(crate) fn new(it: &'i mut Interp<'w>, sh: &'i mut Shell, argv: &'i [String]) -> Self {
        Ctx {
            it,
            sh,
            argv,
            held: crate::mem::Charge::default(),
        }
    }

    /// The name the program was called by (`argv[0]`'s last component).
    pub(crate) fn argv_name(&self) -> String {
        let a = self.argv.first().map(String::as_str).unwrap_or("");
        a.rsplit('/').next().unwrap_or(a).to_string()
    }

    /// The arguments after the name (borrowed from the launch, not from the context, so a
    /// program keeps them while it uses the context: no copy of a million operands).
    pub(crate) fn args(&self) -> &'i [String] {
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
        self.unsupported_status(what, 2)
    }

    /// Fails visibly for what the simulator does not do, with the tool's usage `status`.
    pub(crate) fn unsupported_status(&mut self, what: &str, status: i32) -> R<i32> {
        let msg = format!("unsupported: {what}");
        self.it.record(&msg);
        self.it.err(self.sh, &format!("bash: {msg} (shellbox-sim)"));
        Ok(status)
    }

    /// The bytes of input operand `name` (`-` is standard input), or the error's words
    /// (`No such file or directory`). The copy is charged to the memory budget for the
    /// rest of the program's run.
    pub(crate) fn read_input(&mut self, name: &str) -> Result<Vec<u8>, &'static str> {
        let d = if name == "-" {
            Ok(self.it.take_all(self.sh, 0))
        } else {
            self.it.read_file(self.sh, name).map_err(|e| e.msg())
        };
        if let Ok(d) = &d {
            self.held.add_bytes(d.len());
        }
        d
    }

    /// Counts one unit of work against the budgets and the deadline.
    pub(crate) fn tick(&mut self) -> R<()> {
        self.it.tick()
    }

    /// Bytes the machine's memory budget has left now.
    pub(crate) fn memory_left(&self) -> u64 {
        self.it.w.memory_limit.saturating_sub(self.it.memory_used())
    }

    /// Ends the program when the command was cancelled or its wall-clock deadline passed
    /// (what a long single step calls between its pieces).
    pub(crate) fn check_time(&mut self) -> R<()> {
        self.it.check_time()
    }

    /// Why a program stops when [`crate::shell::stop_due`] said it must: the timeout or
    /// cancellation ([`Ctx::check_time`]'s error), else the memory budget.
    pub(crate) fn interrupted(&self) -> Ctl {
        self.it.interrupted()
    }

    /// Charges `bytes` the program holds (a buffer it built) to the memory budget until
    /// it ends, and checks the budget.
    pub(crate) fn hold(&mut self, bytes: usize) -> R<()> {
        self.held.add_bytes(bytes);
        self.it.check_memory()
    }

    /// The machine's clock in seconds since the Unix epoch (what `date +%s` prints, with
    /// its fraction).
    pub(crate) fn now_secs(&self) -> f64 {
        self.it.w.epoch as f64 + self.it.w.clock_ns as f64 / 1e9
    }

    /// The working directory (absolute).
    pub(crate) fn cwd(&self) -> &str {
        &self.sh.cwd
    }

    /// The filesystem.
    pub(crate) fn vfs(&mut self) -> &mut crate::vfs::Vfs {
        &mut self.it.w.vfs
    }

    /// The value of exported variable `name` (what the program's environment holds).
    pub(crate) fn env(&self, name: &str) -> Option<String> {
        self.sh
            .vars
            .get(name)
            .filter(|v| v.exported)
            .map(|v| v.as_str())
    }

    /// The program's whole environment, sorted by name.
    pub(crate) fn environ(&self) -> std::collections::BTreeMap<String, String> {
        self.sh.exported_env()
    }

    /// Replaces (or creates, mode 0666 less the umask) the regular file at `path` with
    /// `data`.
    pub(crate) fn write_file(
        &mut self,
        path: &str,
        data: Vec<u8>,
    ) -> Result<(), crate::vfs::Errno> {
        let mode = 0o666 & !self.sh.umask;
        let cwd = self.sh.cwd.clone();
        let ino = self.it.w.vfs.create(&cwd, path, mode, true)?;
        self.it.w.vfs.set_data(ino, data)
    }

    /// The shell's file-creation mask.
    pub(crate) fn umask(&self) -> u32 {
        self.sh.umask
    }

    /// Opens the regular file at `path` for writing, creating it empty (mode 0666 less
    /// the umask) when missing; its inode.
    pub(crate) fn create_file(&mut self, path: &str) -> Result<usize, crate::vfs::Errno> {
        let mode = 0o666 & !self.sh.umask;
        let cwd = self.sh.cwd.clone();
        self.it.w.vfs.create(&cwd, path, mode, false)
    }

    /// Runs another command (`argv[0]` looked up on PATH, as `env` and `xargs` do; never a
    /// shell function or builtin) with this program's streams; its exit status, 127 when
    /// it is not found.
    pub(crate) fn run(&mut self, argv: Vec<String>) -> R<i32> {
        self.run_in(argv, None)
    }

    /// [`Ctx::run`] in working directory `dir` (absolute) when given.
    pub(crate) fn run_in(&mut self, argv: Vec<String>, dir: Option<String>) -> R<i32> {
        let mut child = self.sh.clone();
        child.funcs.clear();
        if let Some(d) = dir {
            child.cwd = d;
        }
        match self.it.exec_external(&mut child, argv) {
            Err(Ctl::Exit(s)) => Ok(s),
            r => r,
        }
    }
}

/// Runs a table program's `main` with `argv`.
pub(crate) fn run(main: Main, it: &mut Interp<'_>, sh: &mut Shell, argv: &[String]) -> R<i32> {
    main(&mut Ctx::new(it, sh, argv))
}

/// A usage diagnostic and the tool's usage status: what a program returns on
/// [`opts::Usage`].
pub(crate) fn usage(cx: &mut Ctx<'_, '_>, u: opts::Usage, status: i32) -> R<i32> {
    cx.err_line(&u.0);
    Ok(status)
}
