//! A grammar-aware fuzzer for the simulator: generated shell scripts (commands, pipelines,
//! compound commands, expansions, patterns, redirections, odd numbers, and byte-level
//! mutations of those) run on fresh machines under a timeout and a small memory budget.
//!
//! Properties checked for every script:
//! - no panic (the simulator reports an internal panic as "internal error" on stderr);
//! - a timeout is honoured: the CPU time the run spends after its deadline (measured from
//!   the deadline: a watcher thread reads the process's CPU time when the deadline passes)
//!   is at most [`CPU_AFTER_DEADLINE`] (100 ms in a release build; CPU time, so other
//!   processes on the same cores do not count), and its wall time at most the timeout
//!   plus [`SLACK`] (a hang);
//! - the only error is `Terminated` naming a budget (memory, fuel, output, disk);
//! - memory stays within the budget: the process's peak RSS during the case (the
//!   high-water mark is reset before each case through `/proc/self/clear_refs`) exceeds
//!   its RSS before the case by at most [`PEAK_OVER_BUDGET`] times the machine's budget
//!   (the budget counts logical bytes; allocators and growth strategies keep more), and
//!   the fuzz loop runs in a child process under `RLIMIT_AS`, so a runaway case cannot
//!   disturb the machine.
//!
//! `cargo test -p shellbox-sim --test fuzz` runs it for 3 s (deterministic seed 1).
//! For an hour: `SHELLBOX_FUZZ_SECS=3600 cargo test --release -p shellbox-sim --test fuzz
//! -- --nocapture`; `SHELLBOX_FUZZ_SEED=n` picks another seed. A failure prints the seed,
//! the case number and the script; `SHELLBOX_FUZZ_PRINT=CASE` (or `FROM..TO`) prints the
//! scripts of those cases as JSON lines without running them (`cargo test -p shellbox-sim
//! --test fuzz fuzz_print_cases -- --nocapture`), and `examples/fuzz_replay.rs` replays
//! one as the target runs it.

use std::time::{Duration, Instant};

use shellbox_core::{Command, Error, ExitReason, MachineSpec};
use shellbox_sim::{SimMachineFactory, SimOptions};

/// The timeout of each generated script.
const TIMEOUT: Duration = Duration::from_millis(200);
/// How long past its timeout a script may run in wall time: only a bound against hangs.
/// Wall time depends on what else the machine runs (a load of 17 on 2 cores made 1.9 s
/// of a debug build's 200 ms case); the 100 ms property is [`CPU_AFTER_DEADLINE`].
const SLACK: Duration = Duration::from_secs(10);
/// Most CPU time a run may spend after its deadline: the issue's 100 ms in a release build
/// (the hour run). Unoptimised builds (the normal test run) are an order of magnitude
/// slower per check (450 ms seen) and are allowed 2 s.
const CPU_AFTER_DEADLINE: Duration =
    Duration::from_millis(if cfg!(debug_assertions) { 2000 } else { 100 });
/// How much more than the budget the process's RSS may grow during one case.
const PEAK_OVER_BUDGET: u64 = 3;
/// Each machine's memory budget.
const BUDGET: u64 = 64 << 20;
/// The child's address-space cap.
const ADDRESS_SPACE_BYTES: u64 = 4 << 30;
/// Most peak RSS the fuzzing child may reach.
const PEAK_LIMIT_MIB: u64 = 1024;

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

const NAMES: &[&str] = &[
    "x", "y", "a", "s", "i", "IFS", "PATH", "m", "n", "REPLY", "_",
];
const NUMBERS: &[&str] = &[
    "0",
    "1",
    "-1",
    "2",
    "3",
    "7",
    "10",
    "255",
    "256",
    "1000",
    "65536",
    "99999999999",
    "9223372036854775807",
    "-9223372036854775808",
    "4294967296",
    "010",
    "0x1F",
    "2#101",
];
const LITERALS: &[&str] = &[
    "a",
    "b",
    "abc",
    "hello world",
    "é€𝄞",
    "*",
    "?",
    "[a-c]",
    "a*b",
    "-n",
    "--",
    "/",
    "/tmp",
    "f",
    "d/e",
    "x y",
    "",
    "'",
    "\\",
    "$",
    "!",
    "{}",
    "{a,b}",
    "~",
    "%",
    "#",
    ":",
    ".",
];
const PATTERNS: &[&str] = &[
    "*",
    "?",
    "a",
    "*a",
    "a*",
    "[a-z]",
    "[!a]",
    "?(a)",
    "*(ab)",
    "+(a|b)",
    "@(x|y)*",
    "!(a)",
    "[[:digit:]]",
    "\\*",
    "",
    "*/",
    "?*?",
    "[]",
    "[",
];
const UTILS: &[&str] = &[
    "echo", "printf", "cat", "head", "tail", "wc", "seq", "cp", "mv", "rm", "mkdir", "ls", "touch",
    "test", "[", "true", "false", "basename", "dirname", "stat", "chmod", "ln", "sleep", "date",
    "tee", "tar", "timeout", "env", "kill", "pwd", "read", "mapfile", "declare", "local", "export",
    "unset", "shift", "set", "shopt", "eval", "trap", "wait", "getopts", "cd", "pushd", "type",
    "command", "exit", "return", "break", "continue",
];
const SOURCES: &[&str] = &[
    "/dev/zero",
    "/dev/urandom",
    "/dev/null",
    "f",
    "/",
    "/tmp",
    "/nope",
];

/// Big inputs for the text programs.
const INPUTS: &[&str] = &[
    "seq 100000",
    "seq 1000000",
    "seq -w 1 300000",
    "printf '%s\\n' {1..20000}",
    "printf 'a b\\tc:d,e\\n%.0s' {1..50000}",
    "yes 'abc def' | head -n 200000",
    "printf '%200000s\\n' x",
    "head -c 1000000 /dev/urandom",
    "head -c 3000000 /dev/zero",
    "cat f",
    "echo 'b a c'",
    "seq 1000000 | tr '\\n' ' '",
];
const GREP: &[&str] = &[
    "1",
    "-v 5",
    "-c 7",
    "-n '^9'",
    "-o '[0-9]'",
    "-i A",
    "-E '(1|2)+$'",
    "-F -e 1 -e 2",
    "-w 10",
    "-x 99",
    "-E 'a.*b'",
    "'\\(1\\)\\1'",
    "-c ''",
    "-E '(a|b)*c'",
    "-q 12345",
    "-m 3 1",
    "-oE '.{1,3}'",
    "-l x",
];
const SED: &[&str] = &[
    "'s/1/x/g'",
    "-n '/5$/p'",
    "'y/123/abc/'",
    "'$!N;P;D'",
    "'1~3d'",
    "-E 's/([0-9])+/<\\1>/g'",
    "'/1/,/2/d'",
    "=",
    "-n '$p'",
    "'s/./&&/g'",
    "'G'",
    "':a;N;$!ba;s/\\n/ /g'",
    "-n 'h;x;p'",
    "'s/x*/-/g'",
    "10q",
];
const AWK: &[&str] = &[
    "'{ s += $1 } END { print s }'",
    "-F: '{ print $2 }'",
    "'NR % 2'",
    "'{ a[$1]++ } END { for (k in a) n++; print n }'",
    "'{ gsub(/1/, \"x\"); print }'",
    "'length > 3'",
    "'{ printf \"%s-%d\\n\", $0, NR }'",
    "'BEGIN { while (i++ < 1e6) s = s \"x\" }'",
    "'{ $2 = $1; print }'",
    "'{ n = split($0, p, \"\"); t += n } END { print t }'",
    "'END { print NR }'",
    "'{ x = x $0 } END { print length(x) }'",
    "-v OFS=, '{ $1 = $1 } 1'",
    "'{ print toupper($0) }'",
];
const XARGS: &[&str] = &[
    "-n 1 echo",
    "-n 1000 echo",
    "echo",
    "-I{} echo {}",
    "-0 echo",
    "-n 100 printf '%s\\n'",
    "-d , echo",
    "-L 2 echo",
    "-s 100 echo",
    "wc -l",
];
const SORT: &[&str] = &[
    "",
    "-n",
    "-r",
    "-u",
    "-k2",
    "-t: -k1,1n",
    "-nr",
    "-s -k1,1",
    "-V",
    "-h",
    "-f",
    "-b",
    "-c",
    "-nu",
    "-k1.2,1.3",
];
const CUT: &[&str] = &[
    "-c1-3",
    "-d' ' -f2",
    "-b 2-",
    "-f1 -d:",
    "-c 5",
    "--complement -c1",
    "-d, -f2-",
    "-s -f2",
    "-c 1-1000000",
];
const TR: &[&str] = &[
    "a-z A-Z",
    "-d 0-9",
    "-s ' '",
    "-c '[:alnum:]' x",
    "-cd '[:digit:]\\n'",
    "'\\n' ' '",
    "-s '\\n'",
    "'\\0' x",
    "0-9 a-j",
    "-d '\\n'",
];
const HEAD_TAIL: &[&str] = &[
    "-n 5",
    "-c 1000",
    "-n -3",
    "-c -100",
    "-n 100000",
    "-c 2000000",
    "-n +5",
    "-1",
    "",
];
const WC: &[&str] = &["-l", "-w", "-c", "-m", "-L", "", "-lwc"];

struct Gen {
    rng: Rng,
    depth: usize,
}

impl Gen {
    fn word(&mut self) -> String {
        let r = self.rng.below(100);
        let w = if r < 25 {
            self.rng.pick(LITERALS).to_string()
        } else if r < 40 {
            self.rng.pick(NUMBERS).to_string()
        } else if r < 70 {
            self.param()
        } else if r < 78 && self.depth < 4 {
            self.depth += 1;
            let c = self.pipeline();
            self.depth -= 1;
            format!("$({c})")
        } else if r < 86 {
            format!("$(({}))", self.arith())
        } else if r < 93 {
            let (a, b) = (self.rng.pick(NUMBERS), self.rng.pick(NUMBERS));
            if self.rng.chance(50) {
                format!("{{{a}..{b}}}")
            } else {
                format!("{{{a}..{b}..{}}}", self.rng.pick(NUMBERS))
            }
        } else {
            format!(
                "{{{},{}}}",
                self.rng.pick(LITERALS),
                self.rng.pick(LITERALS)
            )
        };
        match self.rng.below(4) {
            0 => format!("\"{w}\""),
            1 if !w.contains('\'') => format!("'{w}'"),
            _ => w,
        }
    }

    fn param(&mut self) -> String {
        let n = self.rng.pick(NAMES);
        let p = self.rng.pick(PATTERNS);
        let w = self.rng.pick(LITERALS);
        let k = self.rng.pick(NUMBERS);
        match self.rng.below(18) {
            0 => format!("${n}"),
            1 => format!("${{{n}#{p}}}"),
            2 => format!("${{{n}##{p}}}"),
            3 => format!("${{{n}%{p}}}"),
            4 => format!("${{{n}%%{p}}}"),
            5 => format!("${{{n}/{p}/{w}}}"),
            6 => format!("${{{n}//{p}/{w}}}"),
            7 => format!("${{{n}:-{w}}}"),
            8 => format!("${{{n}:={w}}}"),
            9 => format!("${{#{n}}}"),
            10 => format!("${{{n}:{k}:{k}}}"),
            11 => format!("${{{n}[@]}}"),
            12 => format!("${{{n}[{k}]}}"),
            13 => format!("${{!{n}}}"),
            14 => format!("${{{n}^^}}"),
            15 => format!("${{{n}@Q}}"),
            16 => format!("\"${{{n}[@]:{k}}}\""),
            _ => format!("${{{n}/#{p}/{w}}}"),
        }
    }

    fn arith(&mut self) -> String {
        let a = self.rng.pick(NUMBERS);
        let b = self.rng.pick(NUMBERS);
        let n = self.rng.pick(NAMES);
        let op = self.rng.pick(&[
            "+", "-", "*", "/", "%", "**", "<<", ">>", "&", "|", "^", "<", "==", "&&", "||", ",",
            "=",
        ]);
        match self.rng.below(5) {
            0 => format!("{a} {op} {b}"),
            1 => format!("{n} {op} {a}"),
            2 => format!("{n}++"),
            3 => format!("({a} {op} {b}) ? {n} : -{a}"),
            _ => format!("{n}[{a}] {op}= {b}"),
        }
    }

    fn simple(&mut self) -> String {
        let r = self.rng.below(100);
        if r < 20 {
            let n = self.rng.pick(NAMES);
            return match self.rng.below(5) {
                0 => format!("{n}=({} {} {})", self.word(), self.word(), self.word()),
                1 => format!("{n}+=({})", self.word()),
                2 => format!("{n}+={}", self.word()),
                3 => format!("{n}[{}]={}", self.rng.pick(NUMBERS), self.word()),
                _ => format!("{n}={}", self.word()),
            };
        }
        if r < 30 && self.rng.chance(60) {
            return self.text_pipeline();
        }
        if r < 30 {
            let (u, s) = (
                self.rng
                    .pick(&["cat", "head -c 100", "head -n 3", "wc -c", "tail -c 5"]),
                self.rng.pick(SOURCES),
            );
            return format!("{u} {s}");
        }
        let mut c = self.rng.pick(UTILS).to_string();
        for _ in 0..self.rng.below(4) {
            c.push(' ');
            if self.rng.chance(20) {
                c.push_str(self.rng.pick(&[
                    "-r", "-n", "-c", "-e", "-p", "-a", "-f", "-d", "-s", "-v", "-x", "-z",
                ]));
            } else {
                c.push_str(&self.word());
            }
        }
        if self.rng.chance(15) {
            let redir = self.rng.pick(&[
                ">",
                ">>",
                "<",
                "2>&1",
                ">&2",
                "2>/dev/null",
                "<<<",
                "<>",
                "3>&-",
                "99999999999>",
            ]);
            c.push_str(&format!(
                " {redir} {}",
                self.rng.pick(&["f", "/dev/null", "/tmp/g", "x", "/"])
            ));
        }
        c
    }

    /// A text program (grep, sed, awk, xargs, sort, cut, tr, head, tail, wc) with
    /// plausible options, reading a big input (seq, printf, yes, a device, a file the
    /// script made) from a pipe, a redirection or an operand, sometimes feeding another.
    fn text_pipeline(&mut self) -> String {
        let input = self.rng.pick(INPUTS).to_string();
        let mut p = match self.rng.below(4) {
            0 => format!("{} < f", self.text_program()),
            1 => format!("{} f", self.text_program()),
            _ => format!("{input} | {}", self.text_program()),
        };
        for _ in 0..self.rng.below(3) {
            p.push_str(" | ");
            p.push_str(&self.text_program());
        }
        if self.rng.chance(20) {
            p.push_str(
                self.rng
                    .pick(&[" > f", " > /dev/null", " >> f", " | tee f | wc -l"]),
            );
        }
        p
    }

    fn text_program(&mut self) -> String {
        let (prog, choices): (&str, &[&str]) = match self.rng.below(10) {
            0 => ("grep", GREP),
            1 => ("sed", SED),
            2 => ("awk", AWK),
            3 => ("xargs", XARGS),
            4 => ("sort", SORT),
            5 => ("cut", CUT),
            6 => ("tr", TR),
            7 => ("head", HEAD_TAIL),
            8 => ("tail", HEAD_TAIL),
            _ => ("wc", WC),
        };
        let mut c = format!("{prog} {}", self.rng.pick(choices));
        if self.rng.chance(10) {
            // an odd number or word in an option's place
            c.push(' ');
            c.push_str(self.rng.pick(NUMBERS));
        }
        c
    }

    fn pipeline(&mut self) -> String {
        let mut p = self.command();
        for _ in 0..self.rng.below(3) {
            p.push_str(self.rng.pick(&[" | ", " && ", " || ", "; ", " & "]));
            p.push_str(&self.command());
        }
        p
    }

    fn command(&mut self) -> String {
        if self.depth >= 4 {
            return self.simple();
        }
        self.depth += 1;
        let body = |g: &mut Gen| g.pipeline();
        let c = match self.rng.below(100) {
            0..=54 => self.simple(),
            55..=61 => format!(
                "if {}; then {}; else {}; fi",
                body(self),
                body(self),
                body(self)
            ),
            62..=69 => format!(
                "for {} in {} {}; do {}; done",
                self.rng.pick(NAMES),
                self.word(),
                self.word(),
                body(self)
            ),
            70..=74 => format!(
                "i=0; while (( i++ < {} )); do {}; done",
                self.rng.below(50),
                body(self)
            ),
            75..=78 => format!(
                "case {} in {}) {};; *) {};; esac",
                self.word(),
                self.rng.pick(PATTERNS),
                body(self),
                body(self)
            ),
            79..=82 => format!("f() {{ {}; }}; f {}", body(self), self.word()),
            83..=86 => format!("( {} )", body(self)),
            87..=89 => format!("{{ {}; }}", body(self)),
            90..=92 => format!("[[ {} == {} ]]", self.word(), self.rng.pick(PATTERNS)),
            93..=94 => format!("(( {} ))", self.arith()),
            95..=96 => format!("cat <<EOF\n{} {}\nEOF\n", self.word(), self.param()),
            _ => format!("while :; do {}; done", body(self)),
        };
        self.depth -= 1;
        c
    }

    /// A case past the usual sizes (issue 16's break-it of stop 27 found each kind
    /// aborting or outrunning the process): a deep directory tree walked by a program, a
    /// long operator chain or deep nesting in a program's language, or a huge input
    /// through a pipeline. Sizes go from small to far past any bound, so the deadline,
    /// the memory budget or a program's refusal ends the big ones.
    fn stress(&mut self) -> String {
        let n = [3usize, 300, 3000, 9000, 40000][self.rng.below(5)];
        let big = [1000usize, 100_000, 10_000_000, 2_000_000_000][self.rng.below(4)];
        match self.rng.below(3) {
            0 => {
                let walk = self.rng.pick(&[
                    "du -s x",
                    "du -a x | tail -1",
                    "rm -rf x; ls",
                    "find x | wc -l",
                    "find x -depth -delete",
                    "ls -R x | wc -c",
                    "ls -lR x | tail -1",
                    "realpath x/$p | wc -c",
                    "cd x/$p && realpath $(printf '../%.0s' {1..50}) | wc -c",
                    "tar cf - x | wc -c",
                    "grep -r q x",
                    "chmod -R 700 x",
                    "cp -r x y",
                ]);
                format!("p=$(printf 'd/%.0s' {{1..{n}}}); mkdir -p x/$p; {walk}")
            }
            1 => {
                let r = |c: &str| format!("$(printf '{c}%.0s' {{1..{n}}})");
                match self.rng.below(9) {
                    0 => format!("expr {} 1 {}", r("( "), r(") ")),
                    1 => format!("awk \"BEGIN {{ print {}1 }}\"", r("!")),
                    2 => format!("awk \"BEGIN {{ print 1{} }}\"", r("+1")),
                    3 => format!("jq -n \"1{}\"", r("+1")),
                    4 => format!("jq -c . <<< \"{}1{}\"", r("["), r("]")),
                    5 => format!("echo \"{}1{}\" | bc", r("("), r(")")),
                    6 => format!("echo \"1{}\" | bc", r("+1")),
                    7 => format!("echo $(( 1{} ))", r("+1")),
                    _ => format!("[[ a{} ]]; echo $?", r(" && a")),
                }
            }
            _ => match self.rng.below(7) {
                0 => format!("yes | head -c {big} | wc -c"),
                1 => format!("head -c {big} /dev/zero | tr '\\0' x | wc -c"),
                2 => format!("seq {big} | sort -n | tail -1"),
                3 => format!("echo '2^{big}' | bc | wc -c"),
                4 => format!("jq -n '\"x\" * {big}' | wc -c"),
                5 => format!("yes | head -n {big} | awk '{{ n++ }} END {{ print n }}'"),
                _ => format!("head -c {big} /dev/zero | gzip | wc -c"),
            },
        }
    }

    fn script(&mut self) -> String {
        let mut s = String::new();
        if self.rng.chance(8) {
            s.push_str(&self.stress());
            s.push('\n');
        }
        if self.rng.chance(30) {
            s.push_str("shopt -s extglob; ");
        }
        if self.rng.chance(20) {
            s.push_str("x=$(printf '%1000s'); x=$x$x$x$x; ");
        }
        if self.rng.chance(15) {
            s.push_str(self.rng.pick(&[
                "seq 300000 > f; ",
                "seq 1000000 > f; ",
                "printf '%s:%s\\n' {1..30000} > f; ",
                "head -c 2000000 /dev/urandom > f; ",
            ]));
        }
        for _ in 0..1 + self.rng.below(4) {
            s.push_str(&self.pipeline());
            s.push('\n');
        }
        // byte-level mutations reach the parser's corners
        if self.rng.chance(15) && !s.is_empty() {
            let mut b = s.into_bytes();
            for _ in 0..1 + self.rng.below(3) {
                let i = self.rng.below(b.len());
                match self.rng.below(3) {
                    0 => {
                        b.remove(i);
                    }
                    1 => b.insert(
                        i,
                        *b"(){}[]$\"'`<>|&;\\#\n"
                            .get(self.rng.below(18))
                            .unwrap_or(&b'x'),
                    ),
                    _ => {
                        let j = self.rng.below(b.len());
                        b.swap(i, j);
                    }
                }
                if b.is_empty() {
                    break;
                }
            }
            s = String::from_utf8_lossy(&b).into_owned();
        }
        s
    }
}

/// Scripts that once broke the simulator (issue 16), run first on every fuzz run.
const CORPUS: &[&str] = &[
    // found by the deep-tree / long-chain generator (seed 1): `find -depth -delete` did
    // not look at the clock between deletions (18 s of CPU past a 200 ms deadline); bc's
    // parser overflowed the stack on 3,000 nested parentheses in an unoptimised build
    "p=$(printf 'd/%.0s' {1..9000}); mkdir -p x/$p; find x -depth -delete",
    "echo \"$(printf '(%.0s' {1..3000})1$(printf ')%.0s' {1..3000})\" | bc",
    "printf '%.65536f' 1",
    "echo 99999999999>/dev/null",
    "${\"\"<<EOF\n}\nEOF\n",
    "$[))<< ($[$]\n",
    "echo {1..2..-9223372036854775808}",
    "mkdir -p /a/b; cp -r /a /a/b",
    "cp -r / /tmp/x",
    "x=$(printf \"%4000s\"); y=${x//a/b}",
    "x=$(seq 5000); y=${x//?/ab}",
    "s=x; while :; do s=$s$s; done",
    "cat /dev/zero & wait",
    "for b in `cat /dev/zero | head -c 100000000`; do :; done",
    // seed 424242 case 884, minimised: 16 MiB written between two looks at the clock
    "seq -f %g 9223372036854775807 > /dev/null",
    // the hour run, seed 20261201, case 335, minimised: tee opened 65,534 files without
    // looking at the clock (and copied the whole shell for each), 700 ms under 200 ms
    "tee {3..65536} </dev/null",
    // the hour run, seed 20261201, case 16556, minimised: `${n@Q}` quoted a 12 MiB value
    // into 48 MiB in one step without looking at the clock (200 ms of CPU after a 200 ms
    // deadline)
    "n=\"'\"; while :; do n+=\"${n@Q}\"; done",
    "while :; do { kill x; } & n+=\"${n@Q}\"; _[65536]=\"f\"; done",
    // the hour run, seed 20261201, case 26544, minimised and made heavier: `type` and
    // `hash` walked PATH once per name without looking at the clock (157 ms of CPU after
    // a 200 ms deadline for 65,536 names)
    "type {1..300000}",
    "hash {1..300000}",
    // the hour run, seed 20261201, case 9358, minimised and made heavier: `[[ x == pat ]]`
    // and `case` ran the backtracking matcher (up to 5 million steps, ~0.3 s) without
    // looking at the clock: 101 ms of CPU after a 200 ms deadline, 326-421 ms for 8,000
    // spaces against +(a|b); they now walk the pattern's DFA, `!(...)` checks the clock
    "x=$(printf '%8000s'); [[ \"$x\" == +(a|b) ]]; case $x in *(a|b)) ;; esac",
    "x=$(printf '%3000s'); while :; do [[ \"$x\" == !(a)!(b)x ]]; done",
    // the hour run, seed 20261201, case 26860, minimised: a million 400-byte words
    // (brace expansion counted neither bytes nor the clock)
    ": {1..1000}{1..1000}xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    // issue 11: long string operations (case mapping, `+=`, slicing, joining `${a[*]}`,
    // `read` of a here-string) looked at the clock only between commands; they now copy
    // and scan in pieces and look between them
    "x=$(head -c 8000000 /dev/zero | tr '\\0' ' '); while :; do y=${x^^}; y=${x,,}; y=$x; \
     y+=$x; y=${x:1:7000000}; read -r z <<< \"$x\"; a=(\"$x\" \"$x\"); y=\"${a[*]}\"; done",
    "x=$(head -c 8000000 /dev/zero | tr '\\0' ' '); while :; do read -a z <<< \"$x\"; \
     y=${x//?/ab}; y=${x,,[a-z]}; done",
    // the hour run, seed 20261201, case 12953, minimised: a command substitution's tens of
    // megabytes of binary output were decoded (to about twice their size) in one
    // `from_utf8_lossy`: 115 ms of CPU after a 200 ms deadline in the run, 310 ms for 40 MB
    // of /dev/urandom; it now decodes in pieces within the budget and looks at the clock
    "x=\"$(head -c 40000000 /dev/urandom)\"",
    // the hour run, seed 20261201, case 57334: PATH grown to ~60 MB by doubling, then a
    // loop of programs; each launch copied PATH, and `eval -c` (a name not on PATH) walked
    // its million directories without looking at the clock (116 ms of CPU after a 200 ms
    // deadline). Then the same made heavier: 2 million directories (4.5 s), `hash`, `type`,
    // `command -v` and xargs's commands (1.3 s), a 100,000-character IFS against as long a
    // word (14 s), 50,000 exported variables copied into each child shell, a 4 MB script
    // parsed in one step (2-3 s)
    "n+='${n#?(a)}' & i=0; while (( i++ < 29 )); do eval -c '$((1 << 255))' -x || local & \
     PATH+=\"${PATH##?}\"; done || i[-9223372036854775808]='65536'\n\
     REPLY=(${IFS[@]} '${IFS%%+(a|b)}' hello world)\n\
     (( y[255] &&= 1000 )) || rm {~,%} $s \"{b,abc}\" <> /dev/null\n\
     i=0; while (( i++ < 48 )); do wc -c f && echo \"${y%?*?}\"; done; \
     shopt \"${n/@(x|y)*/~}\" $((m && 3)) \"${REPLY[@]}\"\n",
    "PATH=/bin; for i in {1..21}; do PATH+=\":$PATH\"; done; while :; do nope; done",
    "PATH=/bin; for i in {1..21}; do PATH+=\":$PATH\"; done; while :; do hash nope; type nope; \
     command -v nope; done",
    "PATH=/bin; for i in {1..21}; do PATH+=\":$PATH\"; done; seq 1000000 | /bin/xargs -n1 nope",
    "IFS=$(printf '%100000s' | tr ' ' x); x=$(printf '%100000s' | tr ' ' y); while :; do : $x; done",
    "for i in {1..50000}; do export v$i=x; done; while :; do bash -c :; done",
    "x=$(yes 'echo a' | head -c 4000000); eval \"$x\"",
    // tr ticked once per MiB, and a tick looks at the clock every 64th time
    "head -c 30000000 /dev/zero | tr '\\0' '\\n' > f; . ./f",
    // the same pattern in the programs: a program text or pattern list of megabytes read in
    // one step (sed -f 0.26-0.34 s, awk -f 1.8-2 s, grep -f 150-214 ms of CPU past the
    // deadline), and xargs's million words freed in one step (47-165 ms)
    "seq 300000 > f; while :; do sed -f f < /dev/null; done",
    "seq 300000 > f; while :; do awk -f f < /dev/null; done",
    "seq 30000 > g; seq 10 > f; grep -f g f",
    "seq 300000 > f; while :; do xargs echo < f > /dev/null; done",
    // the 10-minute run, seed 1, case 15705, minimised: `REPLY+=$(local)` in a loop (the
    // listing holds REPLY, so REPLY doubles); listings were built whole, never looking at
    // the clock, and they quote their values now as bash does
    "f() { local REPLY=x; while :; do REPLY+=$(local); done; }; f",
    "while :; do REPLY+=$(declare -p); done",
    "while :; do REPLY+=$(set); done",
    "export REPLY=x; while :; do REPLY+=$(export -p); done",
    "readonly r=x; while :; do REPLY+=$(readonly -p)$(typeset -p); done",
    "a=({1..200000}); while :; do declare -p a; done > /dev/null",
    "eval \"$(printf 'f%s() { :; }\\n' {1..20000})\"; while :; do declare -f; declare -F; done > /dev/null",
    // the 5-minute run, seed 1, case 1552, minimised: a quoted capture of megabytes of
    // binary (holding `*`, `?`, `[`) was made into a pattern, a String per character, and
    // scanned for pattern characters in one step (50-250 ms of CPU past the deadline); a
    // quoted field is no pattern, and a big unquoted one looks at the clock between steps
    "head -c 2000000 /dev/urandom > f; : \"$(cat f & cat f)\" | while :; do :; done",
    "head -c 2000000 /dev/urandom > f; IFS=; while :; do : $(cat f); done",
    // the 5-minute run, seed 2, case 1792, minimised and made heavier: `tar c` looked at
    // the clock only for names that resolve, and each error line's write partitioned the
    // background job's queued writes (170 ms of CPU past a 200 ms deadline for 50,000
    // names; 216-305 ms for 400,000, which ran to the end and exited 2)
    "i=0; while (( i++ < 47 )); do ( tail 4294967290 -z <> /tmp/g ); done & tar c {1..400000}",
    // the 5-minute run, seed 2, case 1989, minimised: awk's `split(s, p, "")` (a regex that
    // matches empty everywhere) stepped through a 7 MB record a byte at a time without
    // looking at the clock (186-309 ms of CPU past a 200 ms deadline)
    "seq 1000000 | tr '\\n' ' ' | awk '{ n = split($0, p, \"\"); t += n } END { print t }'",
    // the 5-minute run, seed 2: awk split a 7 MB record into its million fields (and
    // joined and freed them) in one step: 110-178 ms of CPU past a 200 ms deadline
    "seq 1000000 | tr '\\n' ' ' > f; while :; do awk '{ $2 = $1; print NF }' f; done",
    "seq 1000000 | tr '\\n' ' ' | awk '{ n = split($0, p); t += n } END { print t }'",
    // the 5-minute run, seed 2, case 3728: `sort -t: -k1,1n` of 200,000 lines merged its
    // runs looking at the clock only through ticks: 145 ms of CPU past the deadline
    "seq 300000 | grep -oE '.{1,3}' | sort -t: -k1,1n",
    // the 5-minute run, seed 4: a huge descriptor number grew the descriptor table to it
    // (8 GB: the allocation failed under the address-space cap and aborted the process)
    "echo hi 1000000000>f; cat 2000000000<<<x; exec 1500000000>&-",
    // the 5-minute run, seed 4, case 2231: sed copied and freed its million input lines
    // in one step each (115 ms past the deadline), and charged its output again and again
    "seq 1000000 > f; while :; do sed = f | tr -cd '[:digit:]\\n'; done > /dev/null",
    // the hour run, seed 20261203, case 37057, minimised: awk's `x = x $0` over 1 MB of
    // /dev/urandom copied x (megabytes) a few times per record and looked at the clock
    // only every 256 records (315 ms of CPU past a 200 ms deadline)
    "head -c 1000000 /dev/urandom | awk '{ x = x $0 } END { print length(x) }'",
    // the hour run, seed 20261206, case 17517, minimised: basename parsed a million
    // operands without looking at the clock (283 ms of CPU past a 200 ms deadline)
    "true | basename $(seq 1000000 | tr '\\n' ' ') -e f",
    // the hour run, seed 20261206, case 62350: xargs made three million empty words and
    // charged none of them (205 MiB of RSS under a 64 MiB budget)
    "seq 1000000 > f; head -c 3000000 /dev/zero | xargs -0 echo > f && tail -c 5 /dev/urandom || local ${#x}",
];

/// The CPU clock of the calling thread (the one a `run_sync` runs its script on), for
/// [`cpu_time`] from another thread. A thread's own clock, not the process's: the tests of
/// this binary run side by side, and the process's CPU time counted theirs too (a dump
/// case once showed 112 ms "past its deadline" while fuzz_scripts ran beside it).
fn this_thread_clock() -> libc::clockid_t {
    let mut clock: libc::clockid_t = 0;
    // SAFETY: pthread_self() is the calling thread, alive; `clock` is a valid out pointer.
    let rc = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut clock) };
    assert_eq!(rc, 0, "pthread_getcpuclockid");
    clock
}

/// CPU time (user and system) of the thread whose clock is `clock`.
fn cpu_time(clock: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out pointer; the clock's thread outlives every call here.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// `VmRSS` or `VmHWM` of this process, in bytes.
fn status_bytes(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib << 10)
}

/// The most seen over a run: CPU after a deadline, RSS growth during a case.
#[derive(Default)]
struct Worst {
    cpu_after_deadline: Duration,
    rss_growth_bytes: u64,
}

fn check_one(f: &SimMachineFactory, seed: u64, case: usize, script: &str, worst: &mut Worst) {
    let m = f.create_sim(MachineSpec::sim()).unwrap();
    // Reset the high-water mark to the current RSS ("5": Linux 4.0+).
    let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let rss_before = status_bytes("VmRSS:");
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let clock = this_thread_clock();
    let watcher = std::thread::spawn(move || match done_rx.recv_timeout(TIMEOUT) {
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Some(cpu_time(clock)),
        _ => None,
    });
    let started = Instant::now();
    let r = m.run_sync(Command::shell(script).timeout(TIMEOUT));
    let took = started.elapsed();
    let cpu_end = cpu_time(clock);
    let _ = done_tx.send(());
    let cpu_at_deadline = watcher.join().expect("the watcher thread");
    let fail = |what: String| -> ! {
        panic!("fuzz failure (seed {seed}, case {case}): {what}\nscript:\n{script}")
    };
    if let Some(at) = cpu_at_deadline {
        let after = cpu_end.saturating_sub(at);
        worst.cpu_after_deadline = worst.cpu_after_deadline.max(after);
        if after > CPU_AFTER_DEADLINE {
            fail(format!(
                "spent {after:?} of CPU after its deadline (at most {CPU_AFTER_DEADLINE:?}; \
                 wall time {took:?} under a {TIMEOUT:?} timeout)"
            ));
        }
    }
    if took > TIMEOUT + SLACK {
        fail(format!(
            "ran {took:?} under a {TIMEOUT:?} timeout (CPU after the deadline: {:?})",
            cpu_at_deadline.map(|at| cpu_end.saturating_sub(at))
        ));
    }
    if reset {
        let growth = status_bytes("VmHWM:").saturating_sub(rss_before);
        worst.rss_growth_bytes = worst.rss_growth_bytes.max(growth);
        if growth > PEAK_OVER_BUDGET * BUDGET {
            fail(format!(
                "RSS grew by {} MiB during the case, over {PEAK_OVER_BUDGET} x the {} MiB budget",
                growth >> 20,
                BUDGET >> 20
            ));
        }
    }
    drop(m);
    match r {
        Ok(r) => {
            let err = String::from_utf8_lossy(&r.stderr);
            if err.contains("internal error") {
                fail(format!("panicked: {err}"));
            }
            if r.reason == ExitReason::TimedOut && r.exit_code.is_some() {
                fail(format!("timed out with a status: {r:?}"));
            }
        }
        Err(Error::Terminated(why)) => {
            let named = ["memory limit", "cpu fuel", "output limit", "disk limit"];
            if !named.iter().any(|n| why.contains(n)) {
                fail(format!("terminated without naming a budget: {why}"));
            }
        }
        Err(e) => fail(format!("unexpected error: {e}")),
    }
}

/// CPU time `script` spends after its deadline (`timeout`) on a machine where `setup` ran
/// first without one (so the script reaches its costly step however slow the build is);
/// `None` when it ended before its deadline. Measured as [`check_one`] does: a watcher
/// thread reads this process's CPU time when the deadline passes.
fn cpu_past_deadline(setup: &str, script: &str, timeout: Duration) -> Option<Duration> {
    let f = SimMachineFactory::with_options(SimOptions {
        memory_bytes: Some(2 << 30),
        ..SimOptions::default()
    });
    let m = f.create_sim(MachineSpec::sim()).unwrap();
    let r = m
        .run_sync(Command::shell(setup))
        .unwrap_or_else(|e| panic!("{setup:?}: {e}"));
    assert_eq!(r.exit_code, Some(0), "{setup:?}: {r:?}");
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let clock = this_thread_clock();
    let watcher = std::thread::spawn(move || match done_rx.recv_timeout(timeout) {
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Some(cpu_time(clock)),
        _ => None,
    });
    let r = m.run_sync(Command::shell(script).timeout(timeout));
    let cpu_end = cpu_time(clock);
    let _ = done_tx.send(());
    let at = watcher.join().expect("the watcher thread");
    match r {
        Ok(r) => {
            assert!(
                !String::from_utf8_lossy(&r.stderr).contains("internal error"),
                "{script:?}: {r:?}"
            );
            assert_eq!(r.reason, ExitReason::TimedOut, "{script:?}: {r:?}");
        }
        Err(Error::Terminated(why)) => panic!("{script:?}: terminated: {why}"),
        Err(e) => panic!("{script:?}: {e}"),
    }
    drop(m);
    at.map(|at| cpu_end.saturating_sub(at))
}

/// Issue 16, million-item lists and listings: each step below copied, moved or freed a
/// million strings (or built a whole listing) without looking at the clock, 40-120 ms of
/// CPU past a deadline in release (`shift` of a long list: hundreds). Each now looks at
/// the clock every 4096 items and frees big lists a piece at a time; each runs a few
/// times, so the deadline falls in different steps. The bound is [`CPU_AFTER_DEADLINE`].
#[test]
fn million_item_steps_end_at_their_deadline() {
    let setup = "seq 1000000 > f";
    let scripts = [
        "while :; do set -- $(cat f); done",
        "set -- $(cat f); while shift; do :; done",
        "set -- $(cat f); while :; do (shift); done",
        "f() { shift; }; while :; do f $(cat f); done",
        "a=($(cat f)); while :; do a=(\"${a[@]}\"); done",
        "while :; do a=($(cat f)); done",
        "a=($(cat f)); while :; do declare -p a; done > /dev/null",
        "a=($(cat f)); while :; do set > /dev/null; done",
        "while :; do REPLY+=$(declare -p); done",
    ];
    assert_scripts_end_at_their_deadline(setup, &scripts);
    // `case` tried its patterns without looking at the clock: 5,000 per loop step and a
    // look every 256 steps (break-it of issue 16: one `case` of 200,000 patterns ran 3 s
    // past a 1 s timeout)
    let patterns: Vec<String> = (0..5000).map(|i| format!("p{i}")).collect();
    let case = format!(
        "while :; do case z in {}) ;; esac; done",
        patterns.join("|")
    );
    assert_scripts_end_at_their_deadline("true", &[case.as_str()]);
}

/// Runs each of `scripts` after `setup` under a 1.5 s timeout (three times in release, so
/// the deadline falls in different steps; once in debug) and asserts none used more than
/// [`CPU_AFTER_DEADLINE`] of CPU past its deadline.
fn assert_scripts_end_at_their_deadline(setup: &str, scripts: &[&str]) {
    let runs = if cfg!(debug_assertions) { 1 } else { 3 };
    let mut worst = Vec::new();
    for &script in scripts {
        let most = (0..runs)
            .filter_map(|_| cpu_past_deadline(setup, script, Duration::from_millis(1500)))
            .max()
            .unwrap_or_default();
        eprintln!("{script}: {most:?} of CPU past the deadline");
        worst.push((script, most));
    }
    let over: Vec<_> = worst
        .iter()
        .filter(|(_, d)| *d > CPU_AFTER_DEADLINE)
        .collect();
    assert!(
        over.is_empty(),
        "over {CPU_AFTER_DEADLINE:?} of CPU past the deadline: {over:?}"
    );
}

/// Issue 16, awk on one 7 MB record of a million fields (`seq 1000000 | tr '\n' ' '`, the
/// fuzzer's input): splitting the record into its fields, joining them back (`$1 = $1`),
/// and freeing them made a million strings in one step without looking at the clock
/// (110-178 ms of CPU past a 200 ms deadline in the 5-minute runs). Each runs a few times,
/// so the deadline falls in different steps. The bound is [`CPU_AFTER_DEADLINE`].
#[test]
fn awk_on_a_million_field_record_ends_at_its_deadline() {
    let setup = "seq 1000000 | tr '\\n' ' ' > f";
    let scripts = [
        "while :; do awk '{ s += $1 } END { print s }' f; done",
        "while :; do awk '{ $2 = $1; print }' f; done > /dev/null",
        "while :; do awk -v OFS=, '{ $1 = $1 } 1' f; done > /dev/null",
        "while :; do awk '{ a[$1]++ } END { for (k in a) n++; print n }' f; done",
        "while :; do awk '{ n = split($0, p); t += n } END { print t }' f; done",
        "while :; do awk '{ print NF, $NF }' f; done",
        "while :; do awk '{ $0 = $0 \" x\"; print NF }' f; done",
    ];
    assert_scripts_end_at_their_deadline(setup, &scripts);
}

/// Issue 16, the 5-minute run, seed 4, case 2231 (`seq 1000000 > f; … sed = f | tr -cd
/// '[:digit:]\n'`, 115 ms past its deadline): sed copied its million input lines into a
/// million strings in one step and freed them in one step, without looking at the clock;
/// and it charged its whole output to the memory budget again every 1024 lines. It now
/// reads its lines one at a time out of the file's bytes. Each runs a few times, so the
/// deadline falls in different steps. The bound is [`CPU_AFTER_DEADLINE`].
#[test]
fn sed_of_a_million_lines_ends_at_its_deadline() {
    let setup = "seq 1000000 > f";
    let scripts = [
        "while :; do sed = f | tr -cd '[:digit:]\\n'; done > /dev/null",
        "while :; do sed -n '$p' f; done > /dev/null",
        "while :; do sed 's/1/x/g' f f; done > /dev/null",
        "while :; do sed -s 'N;N;s/\\n/,/g' f f; done > /dev/null",
    ];
    assert_scripts_end_at_their_deadline(setup, &scripts);
}

/// Issue 16, the 5-minute run, seed 2, case 3728, minimised and made heavier: `sort
/// -t: -k1,1n` of 200,000 lines (`grep -oE '.{1,3}'` of `seq 100000`) sorted and merged its
/// runs looking at the clock only through ticks (every 64th of which looks): 145 ms of CPU
/// past a 200 ms deadline; here 700,000 and a million lines. Each runs a few times, so the
/// deadline falls in different steps. The bound is [`CPU_AFTER_DEADLINE`].
#[test]
fn sort_of_a_million_lines_ends_at_its_deadline() {
    let setup = "seq 300000 | grep -oE '.{1,3}' > g; seq 1000000 > f";
    let scripts = [
        "while :; do sort -t: -k1,1n g; done > /dev/null",
        "while :; do sort -V g; done > /dev/null",
        "while :; do sort -nu f; done > /dev/null",
        "while :; do sort -k1.2,1.3 f; done > /dev/null",
    ];
    assert_scripts_end_at_their_deadline(setup, &scripts);
}

/// Issue 16, the hour run, seed 20261203, case 37057, minimised (`head -c 1000000
/// /dev/urandom | awk '{ x = x $0 } END { print length(x) }'`: 315 ms of CPU past a 200 ms
/// deadline): each statement copied a string of megabytes a few times, and awk looked at
/// the clock only every 256 records and every 1024 statements. It now looks per megabyte
/// copied. Each runs a few times, so the deadline falls in different steps. The bound is
/// [`CPU_AFTER_DEADLINE`].
#[test]
fn awk_copying_megabytes_per_statement_ends_at_its_deadline() {
    let setup = "head -c 3000000 /dev/urandom > r; seq 1000000 | tr '\\n' ' ' > f";
    let scripts = [
        "while :; do awk '{ x = x $0 } END { print length(x) }' r; done",
        "awk 'BEGIN { while (1) s = s \"x\" }'",
        "awk '{ while (1) { y = $0; z = y } }' f",
    ];
    assert_scripts_end_at_their_deadline(setup, &scripts);
}

/// Issue 16: paste copied every line of its inputs into a string of its own in one step
/// (a million for `seq 1000000`), without looking at the clock, and freed them in one step.
/// It now reads its lines out of the inputs' bytes as it makes each row, looking at the
/// clock per megabyte. Each runs a few times, so the deadline falls in different steps. The
/// bound is [`CPU_AFTER_DEADLINE`].
#[test]
fn paste_of_a_million_lines_ends_at_its_deadline() {
    let setup = "seq 1000000 > f";
    let scripts = [
        "while :; do paste f f f; done > /dev/null",
        "while :; do paste -s -d, f f; done > /dev/null",
        "while :; do paste - - f < f; done > /dev/null",
    ];
    assert_scripts_end_at_their_deadline(setup, &scripts);
}

/// Issue 10/16: jq (over jaq, which has no hook inside an evaluation) looks at the clock
/// between output values and in every value its generators make, so these end at their
/// deadline; and a filter whose function calls itself (jaq recurses on the host's stack
/// without a bound) is refused. Each runs a few times, so the deadline falls in different
/// steps. The bound is [`CPU_AFTER_DEADLINE`].
#[test]
fn jq_generators_end_at_their_deadline() {
    let scripts = [
        "jq -n 'range(1e12)' > /dev/null",
        "jq -n '[range(1e12)] | length'",
        "jq -n 'reduce range(1e12) as $i (0; . + $i)'",
        "jq -n '[limit(1e12; repeat(1))] | length'",
        "jq -n 'last(0 | while(true; . + 1))'",
        "jq -n '0 | until(false; . + 1)'",
        "jq -n '[0 | recurse(. + 1)] | length'",
        "jq -n 'reduce range(1e12) as $i ([]; . + [$i]) | length'",
    ];
    assert_scripts_end_at_their_deadline("true", &scripts);
    let f = SimMachineFactory::new();
    let m = f.create_sim(MachineSpec::sim()).unwrap();
    for filter in [
        "def f: f; f",
        "def f: 1 + f; f",
        "def g(x): def h: h; x; g(1)",
    ] {
        let r = m
            .run_sync(Command::from_argv(["jq", "-n", filter]))
            .unwrap();
        assert_eq!(r.exit_code, Some(2), "{filter}: {r:?}");
        assert!(
            String::from_utf8_lossy(&r.stderr).contains("unsupported: jq recursive"),
            "{filter}: {r:?}"
        );
    }
    let r = m
        .run_sync(Command::from_argv([
            "jq",
            "-nc",
            "def f: .f; {f: 1} | f, [range(3)]",
        ]))
        .unwrap();
    assert_eq!(&r.stdout[..], b"1\n[0,1,2]\n", "{r:?}");
}

/// Issue 10/16: gzip works a piece of 64 KiB at a time, looking at the clock between
/// pieces and charging its output as it grows (100 MB of zeros is a 100 KB file). Each runs
/// a few times, so the deadline falls in different steps. The bound is
/// [`CPU_AFTER_DEADLINE`].
#[test]
fn gzip_ends_at_its_deadline() {
    let setup = "head -c 100000000 /dev/zero | gzip > z.gz; head -c 20000000 /dev/urandom > r";
    let scripts = [
        "while :; do zcat z.gz; done > /dev/null",
        "while :; do gzip -9 -c r; done > /dev/null",
        "while :; do gzip -t z.gz; done",
    ];
    assert_scripts_end_at_their_deadline(setup, &scripts);
}

/// Issue 10/16: od, xxd and hexdump look at the clock per line of dump (a megabyte of
/// input is 65,536 lines). Each runs a few times, so the deadline falls in different
/// steps. The bound is [`CPU_AFTER_DEADLINE`].
#[test]
fn dumps_end_at_their_deadline() {
    let setup = "head -c 3000000 /dev/urandom > r";
    let scripts = [
        "while :; do od -A x -t x1z -t d2 r; done > /dev/null",
        "while :; do xxd r; done > /dev/null",
        "while :; do xxd -p r | xxd -r -p; done > /dev/null",
        "while :; do hexdump -C r; done > /dev/null",
    ];
    assert_scripts_end_at_their_deadline(setup, &scripts);
}

/// Issue 10/16: fold, expand, column -t and join look at the clock per line. Each runs a few
/// times, so the deadline falls in different steps. The bound is [`CPU_AFTER_DEADLINE`].
#[test]
fn layout_ends_at_their_deadline() {
    let setup = "seq 1000000 | paste - - - > f; head -c 2000000 /dev/zero | tr '\\0' x > x; \
                 seq 1000000 | sort > s";
    let scripts = [
        "while :; do fold -w 3 f; done > /dev/null",
        "while :; do fold -s -w 7 x; done > /dev/null",
        "while :; do expand -t 3 f; done > /dev/null",
        "while :; do column -t f; done > /dev/null",
        "while :; do join s s; done > /dev/null",
    ];
    assert_scripts_end_at_their_deadline(setup, &scripts);
}

/// Issue 10/16: split, shuf, numfmt and du look at the clock per piece, line or entry.
/// Each runs a few times, so the deadline falls in different steps. The bound is
/// [`CPU_AFTER_DEADLINE`].
#[test]
fn split_shuf_numfmt_du_end_at_their_deadline() {
    let setup = "seq 1000000 > f; mkdir d; cd d; seq 3000 | xargs touch; cd ..";
    let scripts = [
        "while :; do split -l 1 -a 7 f p; rm -f p*; done",
        "while :; do shuf f; done > /dev/null",
        "while :; do shuf -i 1-3000000 -n 10; done > /dev/null",
        "while :; do numfmt --to=iec < f; done > /dev/null",
        "while :; do du -a d; done > /dev/null",
    ];
    assert_scripts_end_at_their_deadline(setup, &scripts);
}

/// Issue 16, the hour run (seed 20261206, case 17517): a table program given a million
/// operands (`basename $(seq 1000000 | tr '\n' ' ') -e f`) copied them twice and parsed
/// them all before it looked at the clock (283 ms of CPU past a 200 ms deadline). The
/// option parser now looks at the clock every 1024 arguments and programs borrow their
/// arguments instead of copying them. Each runs a few times, so the deadline falls in
/// different steps. The bound is [`CPU_AFTER_DEADLINE`].
#[test]
fn programs_given_a_million_operands_end_at_their_deadline() {
    let setup = "seq 1000000 > f";
    let scripts = [
        "set -- $(cat f); while :; do basename \"$@\" -e f; done",
        "set -- $(cat f); while :; do dirname \"$@\" -e; done",
        "set -- $(cat f); while :; do printenv \"$@\" -0; done",
        "set -- $(cat f); while :; do tr \"$@\"; done",
        "set -- $(cat f); while :; do cut -c1 \"$@\" -Q; done",
    ];
    assert_scripts_end_at_their_deadline(setup, &scripts);
}

/// Issue 10/16: tar (on the command table, with -z) looks at the clock per name and entry,
/// compresses a piece at a time, and parses a million operands in pieces. Each runs a few
/// times, so the deadline falls in different steps. The bound is [`CPU_AFTER_DEADLINE`].
#[test]
fn tar_ends_at_its_deadline() {
    let setup = "mkdir d; cd d; seq 3000 | xargs touch; cd ..; head -c 20000000 /dev/urandom > r; \
                 tar czf r.tgz r; seq 1000000 > f";
    let scripts = [
        "while :; do tar czf x.tgz d r; done",
        "while :; do tar xzf r.tgz -O; done > /dev/null",
        "while :; do tar tvf r.tgz; tar cf - d | tar xf - -C /tmp --strip-components=1; done > /dev/null",
        "set -- $(cat f); while :; do tar cf - \"$@\" 2>/dev/null; done",
    ];
    assert_scripts_end_at_their_deadline(setup, &scripts);
}

fn peak_rss_mib() -> Option<u64> {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .map(|kib| kib / 1024)
        })
}

/// The fuzz loop itself; runs only in the child the test below starts.
#[test]
fn fuzz_child() {
    if std::env::var_os("SHELLBOX_FUZZ_CHILD").is_none() {
        return;
    }
    // affects only this (child) process
    nix::sys::resource::setrlimit(
        nix::sys::resource::Resource::RLIMIT_AS,
        ADDRESS_SPACE_BYTES,
        ADDRESS_SPACE_BYTES,
    )
    .expect("setrlimit(RLIMIT_AS)");
    let secs: u64 = std::env::var("SHELLBOX_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let seed: u64 = std::env::var("SHELLBOX_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let f = SimMachineFactory::with_options(SimOptions {
        memory_bytes: Some(BUDGET),
        output_bytes: 16 << 20,
        ..SimOptions::default()
    });
    let mut worst = Worst::default();
    for (i, script) in CORPUS.iter().enumerate() {
        check_one(&f, seed, i, script, &mut worst);
    }
    let mut g = Gen {
        rng: Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1),
        depth: 0,
    };
    let end = Instant::now() + Duration::from_secs(secs);
    let mut cases = 0usize;
    while Instant::now() < end {
        let script = g.script();
        check_one(&f, seed, CORPUS.len() + cases, &script, &mut worst);
        cases += 1;
    }
    let peak = peak_rss_mib().unwrap_or(0);
    eprintln!(
        "fuzz: seed {seed}, {cases} generated scripts in {secs} s, peak RSS {peak} MiB, \
         most CPU after a deadline {:?}, most RSS growth in a case {} MiB",
        worst.cpu_after_deadline,
        worst.rss_growth_bytes >> 20
    );
    assert!(peak < PEAK_LIMIT_MIB, "peak RSS {peak} MiB");
}

/// The scripts of cases `cases` (numbered as a failure reports them: the corpus first, then
/// the generator's output, which depends only on the seed), without running anything.
fn scripts_of_cases(seed: u64, cases: std::ops::Range<usize>) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = CORPUS
        .iter()
        .enumerate()
        .filter(|(i, _)| cases.contains(i))
        .map(|(i, s)| (i, (*s).to_string()))
        .collect();
    let mut g = Gen {
        rng: Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1),
        depth: 0,
    };
    for case in CORPUS.len()..cases.end {
        let script = g.script();
        if cases.contains(&case) {
            out.push((case, script));
        }
    }
    out
}

/// `SHELLBOX_FUZZ_PRINT=CASE` (or `FROM..TO`, end excluded; with `SHELLBOX_FUZZ_SEED`)
/// prints those cases' scripts to stdout without running them, one JSON line each
/// (`{"case":n,"script":"..."}`), to replay one (`examples/fuzz_replay.rs`) or minimise it.
/// A case number counts the corpus first, as a failure reports it: a failure from a run
/// with a different `CORPUS` length is case `n - old_len + CORPUS.len()` now.
#[test]
fn fuzz_print_cases() {
    let Some(spec) = std::env::var("SHELLBOX_FUZZ_PRINT").ok() else {
        return;
    };
    let range = match spec.split_once("..") {
        Some((a, b)) => a.parse().ok().zip(b.parse().ok()).map(|(a, b)| a..b),
        None => spec.parse::<usize>().ok().map(|a| a..a + 1),
    };
    let Some(range) = range else {
        panic!("SHELLBOX_FUZZ_PRINT={spec}: want CASE or FROM..TO");
    };
    let seed: u64 = std::env::var("SHELLBOX_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    for (case, script) in scripts_of_cases(seed, range) {
        println!("{}", serde_json::json!({ "case": case, "script": script }));
    }
}

/// Runs [`fuzz_child`] in a child process (this test binary again) under `RLIMIT_AS`.
#[test]
fn fuzz_scripts() {
    if std::env::var_os("SHELLBOX_FUZZ_CHILD").is_some() {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args([
            "--exact",
            "fuzz_child",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("SHELLBOX_FUZZ_CHILD", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!(
        "{}",
        err.lines()
            .filter(|l| l.starts_with("fuzz:"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        out.status.success(),
        "the fuzzing child failed ({:?}):\n{stdout}\n{err}",
        out.status
    );
    assert!(
        err.contains("fuzz: seed"),
        "the child ran no fuzz loop:\n{stdout}\n{err}"
    );
}
