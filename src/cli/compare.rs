//! `shellbox compare`: run a shell corpus and compare with what real Bash printed.
//!
//! The corpus format and environment are `testdata/sim-corpus/README.md`'s: each case runs as
//! `bash -c SCRIPT` in an empty `/work` as cwd, stdin empty, with a fixed environment; a
//! case passes when its stdout bytes and exit status equal the recorded ones (stderr is not
//! compared).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use serde::Deserialize;
use shellbox::{Command, Error};

use super::{create, MachineArgs};

#[derive(clap::Args, Debug)]
pub(crate) struct CompareArgs {
    /// The corpus: JSON Lines with `id`, `script`, `stdout`, `exit_code`.
    #[arg(long)]
    corpus: PathBuf,
    /// Only the case ids listed in this file (one per line; `#` comments allowed).
    #[arg(long)]
    ids: Option<PathBuf>,
    /// Per-case deadline.
    #[arg(long, value_parser = super::args::parse_duration, default_value = "20s", allow_hyphen_values = true, value_name = "DURATION")]
    pub(crate) timeout: Duration,
    /// Print one JSON object with per-case detail instead of the failing ids.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    machine: MachineArgs,
}

#[derive(Deserialize)]
struct Case {
    id: String,
    script: String,
    stdout: String,
    exit_code: i32,
}

/// The environment the corpus was recorded with.
const CORPUS_ENV: &[(&str, &str)] = &[
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
];

pub(crate) async fn compare(args: CompareArgs) -> Result<ExitCode, Error> {
    let text = std::fs::read_to_string(&args.corpus)
        .map_err(|e| Error::io(format!("read {}", args.corpus.display()), e))?;
    let wanted: Option<BTreeSet<String>> = match &args.ids {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| Error::io(format!("read {}", path.display()), e))?
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(String::from)
                .collect(),
        ),
        None => None,
    };
    let mut cases = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let case: Case = serde_json::from_str(line).map_err(|e| {
            Error::invalid(format!("{} line {}: {e}", args.corpus.display(), n + 1))
        })?;
        if wanted.as_ref().is_none_or(|w| w.contains(&case.id)) {
            cases.push(case);
        }
    }
    if let Some(wanted) = &wanted {
        let found: BTreeSet<&str> = cases.iter().map(|c| c.id.as_str()).collect();
        let missing: Vec<&str> = wanted
            .iter()
            .map(String::as_str)
            .filter(|id| !found.contains(id))
            .collect();
        if !missing.is_empty() {
            return Err(Error::invalid(format!(
                "ids not in the corpus: {}",
                missing.join(", ")
            )));
        }
    }

    let backend = args.machine.backend()?;
    let mut spec = args.machine.spec()?;
    spec.workdir = "/work".to_string();
    let mut details = Vec::new();
    let (mut passed, mut failed) = (0usize, 0usize);
    for case in &cases {
        let created = create(backend, spec.clone(), &args.machine).await?;
        let command = Command::from_argv(["bash", "-c", case.script.as_str()])
            .cwd("/work")
            .envs(CORPUS_ENV.iter().copied())
            .timeout(args.timeout)
            .output_limit_bytes(16 << 20);
        let outcome = created.machine.run(command).await;
        let _ = created.machine.close().await;
        let (ok, got_stdout, got_exit, error) = match outcome {
            Ok(r) => (
                r.stdout[..] == *case.stdout.as_bytes() && r.exit_code == Some(case.exit_code),
                String::from_utf8_lossy(&r.stdout).into_owned(),
                r.exit_code,
                None,
            ),
            Err(e) => (false, String::new(), None, Some(e.to_string())),
        };
        if ok {
            passed += 1;
        } else {
            failed += 1;
            if !args.json {
                out!("FAIL {}", case.id);
            }
        }
        if args.json {
            details.push(serde_json::json!({
                "id": case.id,
                "passed": ok,
                "expected_exit_code": case.exit_code,
                "exit_code": got_exit,
                "expected_stdout": case.stdout,
                "stdout": got_stdout,
                "error": error,
            }));
        }
    }
    if args.json {
        out!(
            "{}",
            serde_json::json!({"backend": backend.name(), "passed": passed, "failed": failed, "cases": details})
        );
    } else {
        out!("{passed} passed, {failed} failed");
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
