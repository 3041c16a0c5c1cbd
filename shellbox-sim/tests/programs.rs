//! The programs of the command table against the real GNU tools, run in the test itself:
//! the same argv through the host's coreutils and the simulator, compared byte for byte
//! (stdout, stderr, exit status).

use shellbox_core::{Command, MachineSpec};
use shellbox_sim::SimMachineFactory;

const CASES: &[&[&str]] = &[
    &["basename", "/a/b/c.txt"],
    &["basename", "/a/b/c.txt", ".txt"],
    &["basename", "c.txt", "c.txt"],
    &["basename", "/"],
    &["basename", "//"],
    &["basename", ""],
    &["basename", "a/b/"],
    &["basename", "-a", "a/b", "c/d/", "e"],
    &["basename", "-s", ".c", "x.c", "y.c", "z.h"],
    &["basename", "-s.c", "x.c"],
    &["basename", "--suffix=.c", "x.c", "d/y.c"],
    &["basename", "--suf", ".c", "x.c"],
    &["basename", "--multiple", "a/b", "c"],
    &["basename", "-az", "a/b", "c"],
    &["basename", "--zero", "a/b"],
    &["basename", "--", "-a"],
    &["basename", "-a", "--", "-x/y"],
    &["basename"],
    &["basename", "a", "b", "c"],
    &["basename", "-x", "a"],
    &["basename", "-s"],
    &["basename", "--nope", "a"],
    &["basename", "--zero=1", "a"],
    &["dirname", "/a/b/c.txt"],
    &["dirname", "a"],
    &["dirname", "/"],
    &["dirname", "//a//b//"],
    &["dirname", "a/b", "/c", "d/"],
    &["dirname", ""],
    &["dirname", "-z", "a/b", "c"],
    &["dirname", "--zero", "a/b"],
    &["dirname", "--ze", "a/b"],
    &["dirname", "--", "-z/q"],
    &["dirname"],
    &["dirname", "-q", "a"],
    &["dirname", "--nope"],
];

/// (argv, stdin) cases.
const WITH_INPUT: &[(&[&str], &str)] = &[
    (&["cut", "-c1"], "\u{e9}:b\n"),
    (&["cut", "-d:", "-f1,3", "--output-delimiter=XY"], "a:b:c\n"),
    (&["cut", "-b1-2,4-", "--output-delimiter=_"], "abcdef\n"),
    (&["cut", "-f1", "-d:"], "abc\n"),
    (&["cut", "-s", "-f1", "-d:"], "abc\nx:y\n"),
    (&["cut", "-f0"], ""),
    (&["cut", "-f3-1"], ""),
    (&["cut"], ""),
    (&["cut", "-c1", "-d:"], ""),
    (&["cut", "-d::", "-f1"], ""),
    (&["cut", "-f2"], "a\tb\nc\n"),
    (&["cut", "-c2-"], "abcdef"),
    (&["cut", "-f1", "nofile"], ""),
    (&["cut", "-d:", "--complement", "-f2"], "a:b:c\n"),
    (&["cut", "-f1,x"], "x\n"),
    (&["cut", "-c-2,2-"], "abc\n"),
    (&["cut", "-c1", "-f1"], ""),
    (&["cut", "-b0"], ""),
    (&["cut", "-bx"], ""),
    (&["cut", "-b-"], ""),
    (&["cut", "-b1-2-3"], ""),
    (&["cut", "-b,1"], ""),
    (&["cut", "-b2-1"], ""),
    (&["cut", "-b99999999999999999999"], ""),
    (&["cut", "-f1-2-3"], ""),
    (&["cut", "-b", "2,1"], "abc\n"),
    (&["cut", "-d", " ", "-f", "2"], "a b\n"),
    (&["cut", "-d:", "-f3"], "a:b\n"),
    (&["cut", "-d:", "-f2-", "-s"], "a:b\nnone\n"),
    (&["cut", "-d:", "-f2"], "nodelim\n"),
    (&["cut", "-z", "-d:", "-f2"], "a:b\0c:d"),
    (&["cut", "--fie=2", "--delim=,"], "1,2,3\n4,5\n"),
    (&["cut", "-c", "3,1", "-"], "xyz\n\n"),
    (&["cut", "-s", "-c1"], "a\n"),
    (&["cut", "-f1", "-d"], ""),
    (&["cut", "--bogus"], ""),
    (&["cut", "-n", "-b1"], "ab\n"),
    (&["tr", "a-z", "A-Z"], "hello\n"),
    (&["tr", "-d", "l"], "hello\n"),
    (&["tr", "-s", "a-c"], "aabbcc\n"),
    (&["tr", "-c", "a-z\\n", "X"], "hello, world\n"),
    (&["tr", "-cd", "a-z"], "hello, world\n"),
    (&["tr", "el", "x"], "hello\n"),
    (&["tr", "-t", "elo", "xy"], "hello\n"),
    (&["tr"], ""),
    (&["tr", "a"], ""),
    (&["tr", "a", "b", "c"], ""),
    (&["tr", "z-a", "b"], "x\n"),
    (&["tr", "a", ""], "x\n"),
    (&["tr", "[:space:]", "\\n"], "a b\tc\n"),
    (&["tr", "[:lower:]", "[:upper:]"], "abc\n"),
    (&["tr", "[:upper:]", "[:lower:]"], "ABC def\n"),
    (&["tr", "a-c", "[:upper:]"], "abc\n"),
    (&["tr", "a", "[:digit:]"], "ab\n"),
    (&["tr", "\\\\", "/"], "a\\b\n"),
    (&["tr", "\\t", " "], "a\tb"),
    (&["tr", "-d", "[:alpha:]"], "abc1\n"),
    (&["tr", "-s", "a-z", "x"], "abc\n"),
    (&["tr", "-ds", "a", "b"], "aaabbbc\n"),
    (&["tr", "-d", "a", "b"], "abc\n"),
    (&["tr", "\\101", "x"], "ABC\n"),
    (&["tr", "[a*]", "x"], "abc\n"),
    (&["tr", "-s", " "], "a   b    c\n"),
    (&["tr", "-s", "[:space:]"], "a \n\n b\n"),
    (&["tr", "0-9", "a"], "2024-01-01\n"),
    (&["tr", "-c", "[:alnum:]", "_"], "a-b c\n"),
    (&["tr", "--delete", "--squeeze-repeats", "x", "y"], "xyyz\n"),
    (&["tr", "-x", "a"], ""),
    (&["tr", "[:nope:]", "a"], ""),
    (&["tr", "abc", "\\n"], "cab\n"),
    (&["tr", "a-f", "0-2"], "abcdef\n"),
    (&["uniq"], "a\na\nb\nc\nc\nc\n"),
    (&["uniq", "-c"], "a\na\nb\nc\nc\nc\n"),
    (&["uniq", "-d"], "a\na\nb\n"),
    (&["uniq", "-u"], "a\na\nb\n"),
    (&["uniq", "-i"], "a\nA\nb\n"),
    (&["uniq", "-f1", "-c"], "x a\ny a\nz b\n"),
    (&["uniq", "-s1"], "xa\nya\n"),
    (&["uniq", "-w1"], "ab\nac\n"),
    (&["uniq", "-D"], "a\na\nb\nc\nc\n"),
    (&["uniq", "-c", "-D"], ""),
    (&["uniq", "-f", "x"], ""),
    (&["uniq", "-s", "-1"], ""),
    (&["uniq", "-w", "x"], ""),
    (&["uniq", "a", "b", "c"], ""),
    (&["uniq", "nofile"], ""),
    (&["uniq"], "a\na"),
    (&["uniq", "-z"], "a\0a\0b"),
    (&["uniq", "-f1"], "a  b\nc b\n"),
    (&["uniq", "-d", "-u"], "a\na\n"),
    (&["uniq", "-u", "-c"], "a\nb\nb\nc\n"),
    (
        &["uniq", "--count", "--ignore-case", "--check-chars=2"],
        "abX\nABy\nac\n",
    ),
    (&["uniq", "-"], "q\nq\n"),
    (&["uniq", "-x"], ""),
    (&["uniq"], ""),
    (&["uniq"], "\n\n\nx\n"),
    (&["tac"], "a\nb\nc\n"),
    (&["tac"], "a\nb"),
    (&["tac", "-s,"], "a,b,c,"),
    (&["tac", "-s", ",", "-b"], "a,b,c"),
    (&["tac", "--separator=::"], "x::y::z"),
    (&["tac", "-b"], "a\nb\n"),
    (&["tac", "nofile"], ""),
    (&["tac", "-"], "1\n2\n"),
    (&["tac", "-x"], ""),
    (&["tac"], ""),
    (&["rev"], "abc\nd\u{e9}\n"),
    (&["rev"], "ab"),
    (&["rev", "nofile"], ""),
    (&["rev", "-x"], ""),
    (&["rev", "-0"], "ab\0cd"),
    (&["rev"], "\n\nxy\n"),
];

#[test]
fn programs_with_input_match_gnu() {
    let gnu = std::process::Command::new("tr")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("GNU coreutils"))
        .unwrap_or(false);
    if !gnu {
        eprintln!("SKIP programs_with_input_match_gnu: no GNU coreutils on this host");
        return;
    }
    let f = SimMachineFactory::new();
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for (argv, input) in WITH_INPUT {
        use std::io::Write;
        let mut child = std::process::Command::new(argv[0])
            .args(&argv[1..])
            .current_dir(dir.path())
            .env_clear()
            .env("LANG", "C.UTF-8")
            .env("PATH", "/usr/bin:/bin")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // a tool that refuses its options exits without reading: a broken pipe is fine
        let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
        let real = child.wait_with_output().unwrap();
        let m = f.create_sim(MachineSpec::sim()).unwrap();
        let sim = m
            .run_sync(Command::from_argv(argv.iter().copied()).stdin(input.as_bytes().to_vec()))
            .unwrap();
        if real.stdout != sim.stdout
            || real.stderr != sim.stderr
            || real.status.code() != sim.exit_code
        {
            failures.push(format!(
                "{argv:?} <<< {input:?}\n  gnu: {:?} {:?} {:?}\n  sim: {:?} {:?} {:?}",
                real.status.code(),
                String::from_utf8_lossy(&real.stdout),
                String::from_utf8_lossy(&real.stderr),
                sim.exit_code,
                String::from_utf8_lossy(&sim.stdout),
                String::from_utf8_lossy(&sim.stderr),
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn programs_match_gnu() {
    let gnu = std::process::Command::new("basename")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("GNU coreutils"))
        .unwrap_or(false);
    if !gnu {
        eprintln!("SKIP programs_match_gnu: no GNU coreutils on this host");
        return;
    }
    let f = SimMachineFactory::new();
    let mut failures = Vec::new();
    for argv in CASES {
        let real = std::process::Command::new(argv[0])
            .args(&argv[1..])
            .env_clear()
            .env("LANG", "C.UTF-8")
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap();
        let m = f.create_sim(MachineSpec::sim()).unwrap();
        let sim = m
            .run_sync(Command::from_argv(argv.iter().copied()))
            .unwrap();
        if real.stdout != sim.stdout
            || real.stderr != sim.stderr
            || real.status.code() != sim.exit_code
        {
            failures.push(format!(
                "{argv:?}\n  gnu: {:?} {:?} {:?}\n  sim: {:?} {:?} {:?}",
                real.status.code(),
                String::from_utf8_lossy(&real.stdout),
                String::from_utf8_lossy(&real.stderr),
                sim.exit_code,
                String::from_utf8_lossy(&sim.stdout),
                String::from_utf8_lossy(&sim.stderr),
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A program's output is charged to the memory budget once, not again at every pace
/// point: awk, nl, shuf and join charged their whole output so far every few hundred or
/// thousand lines, so `seq 300000 | awk '{print}'` (2 MB of output) "held" gigabytes and
/// ended a 64 MiB machine (break-it of issue 16; `seq 1000000 | awk '{print}'` ended even a
/// 2 GiB one).
#[test]
fn program_output_is_charged_once() {
    let f = SimMachineFactory::with_options(shellbox_sim::SimOptions {
        memory_bytes: Some(64 << 20),
        ..shellbox_sim::SimOptions::default()
    });
    let m = f.create_sim(MachineSpec::sim()).unwrap();
    m.run_sync(Command::shell("seq 300000 > a")).unwrap();
    for script in [
        "awk '{print}' a | wc -l",
        "nl a | wc -l",
        "shuf a | wc -l",
        "join a a | wc -l",
    ] {
        let r = m
            .run_sync(Command::shell(script))
            .unwrap_or_else(|e| panic!("{script}: {e}"));
        assert_eq!(
            (r.exit_code, &r.stdout[..]),
            (Some(0), &b"300000\n"[..]),
            "{script}: {r:?}"
        );
    }
}
