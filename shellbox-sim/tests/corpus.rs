//! The shell differential corpus (the repository's copy in `testdata/sim-corpus`, refreshed
//! from the project's shared corpus by `scripts/refresh-shared`): every case in `engine-cases.txt`
//! must pass; the whole-corpus pass count must not regress.

use std::path::PathBuf;

use shellbox_core::{Command, MachineSpec};
use shellbox_sim::SimMachineFactory;

/// Cases of the whole corpus that pass today (the floor the count may not drop below).
const WHOLE_CORPUS_FLOOR: usize = 146;

fn corpus_dir() -> PathBuf {
    // Inside the repository, so a clone with nothing beside it runs these tests. The package
    // directory is read at run time (cargo sets it for tests), so a test binary built in
    // another checkout sharing the target dir still reads this checkout's copy.
    let package = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    package.join("../testdata/sim-corpus")
}

struct Case {
    id: String,
    script: String,
    stdout: String,
    exit_code: i32,
}

fn load() -> Option<Vec<Case>> {
    let text = std::fs::read_to_string(corpus_dir().join("corpus.jsonl")).ok()?;
    Some(
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).expect("corpus line is JSON");
                Case {
                    id: v["id"].as_str().unwrap().to_string(),
                    script: v["script"].as_str().unwrap().to_string(),
                    stdout: v["stdout"].as_str().unwrap().to_string(),
                    exit_code: v["exit_code"].as_i64().unwrap() as i32,
                }
            })
            .collect(),
    )
}

/// Runs one case as the corpus README says; returns a failure description.
fn run_case(case: &Case) -> Result<(), String> {
    let machine = SimMachineFactory::new()
        .create_sim(MachineSpec::sim().workdir("/work"))
        .map_err(|e| e.to_string())?;
    let cmd = Command::from_argv(["bash", "-c", case.script.as_str()])
        .cwd("/work")
        .envs([
            ("HOME", "/root"),
            ("HOSTNAME", "sandbox"),
            ("LANG", "C.UTF-8"),
            (
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            ),
            ("SHELL", "/bin/bash"),
            ("TERM", "xterm-256color"),
            ("USER", "root"),
        ])
        .timeout(std::time::Duration::from_secs(20));
    let r = machine.run_sync(cmd).map_err(|e| format!("error: {e}"))?;
    let out = String::from_utf8_lossy(&r.stdout);
    if out == case.stdout && r.exit_code == Some(case.exit_code) {
        Ok(())
    } else {
        Err(format!(
            "exit {:?} (want {})\n--- got stdout\n{}--- want stdout\n{}--- stderr\n{}",
            r.exit_code,
            case.exit_code,
            out,
            case.stdout,
            String::from_utf8_lossy(&r.stderr)
        ))
    }
}

/// (passed, run, failures as (id, why)).
type Outcome = (usize, usize, Vec<(String, String)>);

fn run_all(filter: impl Fn(&Case) -> bool) -> Option<Outcome> {
    let cases = load()?;
    let only = std::env::var("SIM_CASE").ok();
    let mut pass = 0;
    let mut total = 0;
    let mut fails = Vec::new();
    for c in cases.iter().filter(|c| filter(c)) {
        if only.as_deref().is_some_and(|o| o != c.id) {
            continue;
        }
        total += 1;
        match run_case(c) {
            Ok(()) => pass += 1,
            Err(e) => fails.push((c.id.clone(), e)),
        }
    }
    Some((pass, total, fails))
}

#[test]
fn engine_cases_all_pass() {
    let Ok(ids) = std::fs::read_to_string(corpus_dir().join("engine-cases.txt")) else {
        eprintln!("SKIP engine_cases_all_pass: no testdata/sim-corpus in the repository");
        return;
    };
    let ids: Vec<&str> = ids.split_whitespace().collect();
    let (pass, total, fails) = run_all(|c| ids.contains(&c.id.as_str())).expect("corpus.jsonl");
    for (id, why) in &fails {
        eprintln!("FAIL {id}: {why}");
    }
    eprintln!("engine cases: {pass}/{total} passed");
    let failing: Vec<&str> = fails.iter().map(|f| f.0.as_str()).collect();
    assert!(fails.is_empty(), "failing engine cases: {failing:?}");
}

#[test]
fn whole_corpus_does_not_regress() {
    let Some((pass, total, fails)) = run_all(|_| true) else {
        eprintln!("SKIP whole_corpus_does_not_regress: no testdata/sim-corpus in the repository");
        return;
    };
    if std::env::var("SIM_VERBOSE").is_ok() {
        for (id, why) in &fails {
            eprintln!("FAIL {id}: {why}");
        }
    }
    let failing: Vec<&str> = fails.iter().map(|f| f.0.as_str()).collect();
    eprintln!("whole corpus: {pass}/{total} passed; failing: {failing:?}");
    println!("whole corpus: {pass}/{total} passed");
    assert!(
        pass >= WHOLE_CORPUS_FLOOR,
        "whole-corpus pass count regressed: {pass} < {WHOLE_CORPUS_FLOOR}"
    );
}
