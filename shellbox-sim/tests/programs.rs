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
