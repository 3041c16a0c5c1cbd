//! End-to-end tests of the `shellbox` command line, run as a user would run it.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn shellbox() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shellbox"));
    cmd.env("RUST_LOG", "error");
    cmd
}

fn run(args: &[&str]) -> Output {
    shellbox().args(args).output().expect("spawn shellbox")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Whether the local backend can sandbox here; prints the SKIP line when not.
fn local_available(test: &str) -> bool {
    let out = run(&["run", "--json", "--backend", "local", "--", "true"]);
    if out.status.code() == Some(0) {
        return true;
    }
    let stdout = text(&out.stdout);
    if stdout.contains("sandbox_unavailable") {
        eprintln!("SKIP {test}: no bubblewrap sandbox here: {}", stdout.trim());
        return false;
    }
    panic!(
        "shellbox run --backend local -- true failed: {stdout} {}",
        text(&out.stderr)
    );
}

/// Starts `shellbox run --backend local -- sh -c SCRIPT` with its own `TMPDIR` (so the test
/// can see machine roots left behind) and returns it once its first stdout line, checked to
/// be `first_line`, has arrived.
fn spawn_local(script: &str, tmp: &Path, first_line: &str) -> (Child, BufReader<ChildStdout>) {
    let mut child = shellbox()
        .env("TMPDIR", tmp)
        .args(["run", "--backend", "local", "--", "sh", "-c", script])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert_eq!(line, first_line);
    (child, reader)
}

#[test]
fn sim_is_the_default_backend() {
    let out = run(&["run", "--", "sh", "-c", "for i in 1 2 3; do echo $i; done"]);
    assert_eq!(text(&out.stdout), "1\n2\n3\n", "{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(0));
    let out = run(&["run", "--", "sh", "-c", "echo hi; exit 3"]);
    assert_eq!(
        (text(&out.stdout), out.status.code()),
        ("hi\n".into(), Some(3))
    );
}

#[test]
fn sim_json_reports_unsupported() {
    let out = run(&["run", "--json", "--", "sh", "-c", "echo ok"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["stdout"], "ok\n");
    assert!(v["unsupported"].is_array(), "{v}");
}

#[test]
fn local_exit_status_and_output() {
    if !local_available("local_exit_status_and_output") {
        return;
    }
    let out = run(&[
        "run",
        "--backend",
        "local",
        "--",
        "sh",
        "-c",
        "echo hi; exit 3",
    ]);
    assert_eq!(text(&out.stdout), "hi\n");
    assert_eq!(out.status.code(), Some(3));
    let out = run(&[
        "run",
        "--backend",
        "local",
        "--",
        "sh",
        "-c",
        "echo err >&2; kill -9 $$",
    ]);
    assert_eq!(text(&out.stderr), "err\n");
    assert_eq!(out.status.code(), Some(137));
}

#[test]
fn local_timeout_exits_124_and_keeps_output() {
    if !local_available("local_timeout_exits_124_and_keeps_output") {
        return;
    }
    let start = Instant::now();
    let out = run(&[
        "run",
        "--backend",
        "local",
        "--timeout",
        "1.5s",
        "--",
        "sh",
        "-c",
        "echo before; sleep 3600 & wait",
    ]);
    assert_eq!(out.status.code(), Some(124));
    assert_eq!(text(&out.stdout), "before\n");
    assert!(start.elapsed() < Duration::from_secs(30));
    let out = run(&[
        "run",
        "--backend",
        "local",
        "--json",
        "--timeout",
        "500ms",
        "--",
        "sleep",
        "10",
    ]);
    assert_eq!(out.status.code(), Some(124));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["reason"], "timed_out");
    assert!(v["exit_code"].is_null());
}

#[test]
fn local_json_has_exact_bytes() {
    if !local_available("local_json_has_exact_bytes") {
        return;
    }
    let out = run(&[
        "run",
        "--backend",
        "local",
        "--json",
        "--output-limit",
        "3",
        "--",
        "sh",
        "-c",
        "printf 'a\\377bcdef'; printf 'E' >&2; exit 4",
    ]);
    assert_eq!(out.status.code(), Some(4));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["exit_code"], 4);
    assert_eq!(v["reason"], "exited");
    assert_eq!(v["stdout"], "a\u{FFFD}b");
    assert_eq!(v["stdout_base64"], "Yf9i");
    assert_eq!(v["stdout_truncated"], true);
    assert_eq!(v["stderr"], "E");
    assert_eq!(v["stderr_base64"], "RQ==");
    assert_eq!(v["stderr_truncated"], false);
}

#[test]
fn local_upload_run_download_and_stdin() {
    if !local_available("local_upload_run_download_and_stdin") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    std::fs::create_dir(&input).unwrap();
    std::fs::write(input.join("a.txt"), "alpha\n").unwrap();
    let result = dir.path().join("result/out.txt");
    let mut child = shellbox()
        .args([
            "run",
            "--backend",
            "local",
            "-i",
            "--env",
            "GREETING=hello there",
            "--upload",
            &format!("{}:/workspace/in", input.display()),
            "--download",
            &format!("/workspace/out.txt:{}", result.display()),
            "--",
            "sh",
            "-c",
            "{ cat in/a.txt; cat; echo \"$GREETING\"; } > out.txt; echo done",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"from stdin\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout), "done\n");
    assert_eq!(
        std::fs::read_to_string(&result).unwrap(),
        "alpha\nfrom stdin\nhello there\n"
    );
    // A failed transfer is shellbox's failure: 125 and one line.
    let out = run(&[
        "run",
        "--backend",
        "local",
        "--download",
        &format!("/workspace/missing:{}", dir.path().join("m").display()),
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("missing"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn local_output_streams_before_the_command_ends() {
    if !local_available("local_output_streams_before_the_command_ends") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (mut child, mut reader) =
        spawn_local("echo first; sleep 5; echo second", tmp.path(), "first\n");
    // The command sleeps 5 s after its first line: it must still be running now.
    assert!(
        child.try_wait().unwrap().is_none(),
        "the first line arrived only after the command ended"
    );
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut reader, &mut rest).unwrap();
    assert_eq!(rest, "second\n");
    assert!(child.wait().unwrap().success());
}

#[test]
fn shellbox_failures_exit_125_with_one_line() {
    // Bad option.
    let out = run(&["run", "--no-such-option", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    let err = text(&out.stderr);
    assert!(err.starts_with("shellbox: "), "{err}");
    assert!(err.contains("--no-such-option"), "{err}");
    // Bad option values.
    for args in [
        &["run", "--timeout", "soon", "--", "true"][..],
        &["run", "--output-limit", "-1", "--", "true"][..],
        &["run", "--network", "maybe", "--", "true"][..],
        &["run", "--backend", "vm", "--", "true"][..],
        &["run", "--upload", "nocolon", "--", "true"][..],
        &["run", "--env", "1BAD=x", "--", "true"][..],
        &["run", "--workdir", "relative", "--", "true"][..],
    ] {
        let out = run(args);
        assert_eq!(
            out.status.code(),
            Some(125),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(text(&out.stderr).starts_with("shellbox: "), "{args:?}");
    }
    // An unsupported spec, with --json.
    let out = run(&["run", "--json", "--cpus", "2", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["kind"], "unsupported", "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("cpus"),
        "{v}"
    );
    // Missing argv.
    let out = run(&["run", "--json"]);
    assert_eq!(out.status.code(), Some(125));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["kind"], "invalid_input");
}

#[test]
fn compare_counts_corpus_cases() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("c.jsonl");
    std::fs::write(
        &corpus,
        concat!(
            r#"{"id": "ok", "script": "echo hi\n", "stdout": "hi\n", "exit_code": 0}"#,
            "\n",
            r#"{"id": "wrong", "script": "echo hi; exit 2\n", "stdout": "hi\n", "exit_code": 0}"#,
            "\n",
            r#"{"id": "pwd", "script": "pwd\n", "stdout": "/work\n", "exit_code": 0}"#,
            "\n"
        ),
    )
    .unwrap();
    let out = run(&["compare", "--corpus", corpus.to_str().unwrap()]);
    assert_eq!(text(&out.stdout), "FAIL wrong\n2 passed, 1 failed\n");
    assert_eq!(out.status.code(), Some(1));
    let ids = dir.path().join("ids.txt");
    std::fs::write(&ids, "ok\npwd\n").unwrap();
    let out = run(&[
        "compare",
        "--corpus",
        corpus.to_str().unwrap(),
        "--ids",
        ids.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["passed"].as_u64(), v["failed"].as_u64()),
        (Some(2), Some(0))
    );
    assert_eq!(v["cases"].as_array().unwrap().len(), 2);
    std::fs::write(&ids, "nope\n").unwrap();
    let out = run(&[
        "compare",
        "--corpus",
        corpus.to_str().unwrap(),
        "--ids",
        ids.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(125));
}

#[test]
fn local_closed_stdout_stops_the_command() {
    if !local_available("local_closed_stdout_stops_the_command") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (mut child, reader) = spawn_local("yes", tmp.path(), "y\n");
    drop(reader);
    let start = Instant::now();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(141));
    assert!(start.elapsed() < Duration::from_secs(30));
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        0,
        "machine root left behind"
    );
}

#[test]
fn local_sigterm_closes_the_machine() {
    if !local_available("local_sigterm_closes_the_machine") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (mut child, _stdout) = spawn_local("echo up; sleep 3600", tmp.path(), "up\n");
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);
    let status = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(child.wait().unwrap().code(), Some(143));
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        0,
        "machine root left behind"
    );
}

#[test]
fn run_details() {
    // --timeout 0 disables the timeout, as in timeout(1).
    let out = run(&[
        "run",
        "--timeout",
        "0",
        "--",
        "sh",
        "-c",
        "sleep 1; echo ok",
    ]);
    assert_eq!(
        (out.status.code(), text(&out.stdout)),
        (Some(0), "ok\n".into())
    );
    // Streaming mode says when output was cut.
    let out = run(&["run", "--output-limit", "2", "--", "echo", "hello"]);
    assert_eq!(text(&out.stdout), "he");
    assert!(
        text(&out.stderr).contains("stdout was cut at 2 bytes"),
        "{}",
        text(&out.stderr)
    );
    // Arguments that are not UTF-8 are a clean error, not a panic.
    use std::os::unix::ffi::OsStrExt;
    let out = shellbox()
        .args(["run", "--", "echo"])
        .arg(std::ffi::OsStr::from_bytes(b"\xfe"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(text(&out.stderr).starts_with("shellbox: "));
}
