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
    // One machine root (`shellbox-local-*`) beside the factory's shared /etc.
    let roots = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("shellbox-local-")
        })
        .count();
    assert_eq!(roots, 1);
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

/// `shellbox` without `RUST_LOG` in its environment (the helper above sets it).
fn shellbox_plain() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shellbox"));
    cmd.env_remove("RUST_LOG");
    cmd
}

/// The one line shellbox printed on stderr for its own failure (asserting it is one line).
fn one_line(out: &Output) -> String {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert_eq!(err.lines().count(), 1, "one line per failure: {err:?}");
    assert!(err.starts_with("shellbox: "), "{err}");
    err
}

#[test]
fn version_names_the_compiled_backends() {
    let out = run(&["--version"]);
    assert_eq!(out.status.code(), Some(0));
    let version = text(&out.stdout);
    assert!(
        version.starts_with(&format!("shellbox {} ", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
    // This test binary is built with --all-features.
    assert!(
        version.contains("backends: sim, local, docker; pyenv: yes"),
        "{version}"
    );
}

#[test]
fn messages_name_options_not_fields() {
    let err = one_line(&run(&["run", "--cpus", "2", "--", "true"]));
    assert!(err.contains("--cpus"), "{err}");
    let err = one_line(&run(&[
        "run",
        "--backend",
        "local",
        "--memory-mb",
        "64",
        "--",
        "true",
    ]));
    assert!(
        err.contains("--memory-mb") && !err.contains("memory_mb"),
        "{err}"
    );
    let err = one_line(&run(&[
        "run",
        "--registry-image",
        "busybox:1",
        "--",
        "true",
    ]));
    assert!(
        err.contains("--registry-image") && !err.contains("registry_image"),
        "{err}"
    );
    // clap's own errors are folded to one line too, pointing at --help.
    let err = one_line(&run(&["run", "--no-such-option", "--", "true"]));
    assert!(err.contains("shellbox run --help"), "{err}");
}

#[test]
fn timeout_forms_and_limits() {
    let help = text(&run(&["run", "--help"]).stdout);
    for words in ["`0` means no limit", "250ms", "1.5s", "2m", "1h", "1e3"] {
        assert!(help.contains(words), "--help lacks {words:?}: {help}");
    }
    let err = one_line(&run(&["run", "--timeout", "-1", "--", "true"]));
    assert!(err.contains("negative"), "{err}");
    let err = one_line(&run(&["run", "--timeout", "-2s", "--", "true"]));
    assert!(err.contains("negative"), "{err}");
    let err = one_line(&run(&["run", "--timeout", "1e20", "--", "true"]));
    assert!(
        err.contains("too large") && !err.contains("negative"),
        "{err}"
    );
    let err = one_line(&run(&["run", "--timeout", "soon", "--", "true"]));
    assert!(
        err.contains("250ms"),
        "the accepted forms are listed: {err}"
    );
    // Representable but absurd: no limit (saturated), never a panic.
    let out = run(&["run", "--timeout", "1e19", "--", "echo", "ok"]);
    assert_eq!(
        (out.status.code(), text(&out.stdout)),
        (Some(0), "ok\n".into()),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn local_huge_timeout_does_not_panic() {
    if !local_available("local_huge_timeout_does_not_panic") {
        return;
    }
    for timeout in ["1e19", "5e9", "1e9"] {
        let out = run(&[
            "run",
            "--backend",
            "local",
            "--timeout",
            timeout,
            "--",
            "echo",
            "ok",
        ]);
        assert_eq!(
            (out.status.code(), text(&out.stdout)),
            (Some(0), "ok\n".into()),
            "--timeout {timeout}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn truncation_note_is_on_its_own_line() {
    // stdout and stderr into one file, as on a terminal.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("both");
    let file = std::fs::File::create(&path).unwrap();
    let status = shellbox()
        .args(["run", "--output-limit", "2", "--", "echo", "hello"])
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "he\nshellbox: stdout was cut at 2 bytes (--output-limit)\n"
    );
    // Separate files: stderr's own last line is ended first.
    let out = run(&[
        "run",
        "--output-limit",
        "3",
        "--",
        "sh",
        "-c",
        "printf abcdef >&2",
    ]);
    assert_eq!(
        text(&out.stderr),
        "abc\nshellbox: stderr was cut at 3 bytes (--output-limit)\n"
    );
}

#[test]
fn missing_upload_source_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let arg = format!("{}:/workspace/in", missing.display());
    let out = shellbox_plain()
        .args(["run", "--upload", &arg, "--", "true"])
        .output()
        .unwrap();
    let err = one_line(&out);
    assert!(
        err.contains(&format!("--upload {arg}")) && err.contains("upload source"),
        "{err}"
    );
    let out = shellbox_plain()
        .args(["run", "--json", "--upload", &arg, "--", "true"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["kind"], "not_found", "{v}");
}

#[test]
fn no_log_lines_without_verbose() {
    // A failure is exactly one line, a success prints nothing of shellbox's own.
    let out = shellbox_plain()
        .args(["run", "--", "sh", "-c", "echo out; echo err >&2"])
        .output()
        .unwrap();
    assert_eq!(
        (text(&out.stdout), text(&out.stderr)),
        ("out\n".into(), "err\n".into())
    );
    let out = shellbox_plain()
        .args(["run", "--workdir", "relative", "--", "true"])
        .output()
        .unwrap();
    one_line(&out);
    if local_available("no_log_lines_without_verbose") {
        let out = shellbox_plain()
            .args(["run", "--backend", "local", "--", "true"])
            .output()
            .unwrap();
        assert_eq!(text(&out.stderr), "");
    }
}

#[test]
fn json_unsupported_is_always_an_array() {
    let out = run(&["run", "--json", "--", "sh", "-c", "nosuchprogram"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["unsupported"],
        serde_json::json!(["command not found: nosuchprogram"])
    );
    let out = run(&["run", "--json", "--", "true"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["unsupported"], serde_json::json!([]));
    if local_available("json_unsupported_is_always_an_array") {
        let out = run(&[
            "run",
            "--json",
            "--backend",
            "local",
            "--",
            "sh",
            "-c",
            "nosuchprogram",
        ]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["exit_code"], 127);
        assert_eq!(v["unsupported"], serde_json::json!([]), "{v}");
    }
}

#[test]
fn docker_connection_failures_name_the_cause() {
    // A TCP DOCKER_HOST where nothing listens (a port just released).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = shellbox_plain()
        .env("DOCKER_HOST", format!("tcp://127.0.0.1:{port}"))
        .args(["run", "--backend", "docker", "--image", "x", "--", "true"])
        .output()
        .unwrap();
    let err = one_line(&out);
    assert!(err.contains("connection refused"), "{err}");
    assert!(!err.contains("client error (Connect)"), "{err}");
    // A socket this user may not open: run as nobody (needs root to switch).
    let socket = Path::new("/var/run/docker.sock");
    if !socket.exists() {
        eprintln!("SKIP docker_connection_failures_name_the_cause: no /var/run/docker.sock");
        return;
    }
    let root = text(&Command::new("id").arg("-u").output().unwrap().stdout);
    if root.trim() != "0" {
        eprintln!("SKIP docker_connection_failures_name_the_cause: not root, cannot become nobody");
        return;
    }
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_shellbox"))
        .args(["run", "--backend", "docker", "--image", "x", "--", "true"])
        .env_remove("DOCKER_HOST")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let err = one_line(&out);
    assert!(
        err.contains("permission denied on /var/run/docker.sock"),
        "{err}"
    );
    assert!(!err.contains("client error (Connect)"), "{err}");
}

/// A `shellbox` built with `--no-default-features --features cli,sim` (scripts/test builds
/// one and names it in `SHELLBOX_TEST_SIM_ONLY_BIN`).
fn sim_only_build(test: &str) -> Option<std::path::PathBuf> {
    match std::env::var_os("SHELLBOX_TEST_SIM_ONLY_BIN") {
        Some(path) => Some(path.into()),
        None => {
            eprintln!(
                "SKIP {test}: SHELLBOX_TEST_SIM_ONLY_BIN is unset (scripts/test builds \
                 `cargo build --no-default-features --features cli,sim` and sets it)"
            );
            None
        }
    }
}

#[test]
fn a_build_without_a_feature_names_it() {
    let Some(bin) = sim_only_build("a_build_without_a_feature_names_it") else {
        return;
    };
    let plain = |args: &[&str]| {
        Command::new(&bin)
            .env_remove("RUST_LOG")
            .args(args)
            .output()
            .unwrap()
    };
    let version = text(&plain(&["--version"]).stdout);
    assert!(version.contains("backends: sim; pyenv: no"), "{version}");
    for backend in ["docker", "local"] {
        let err = one_line(&plain(&["run", "--backend", backend, "--", "true"]));
        assert!(
            err.contains(&format!("cargo feature `{backend}`")),
            "{backend}: {err}"
        );
    }
    let err = one_line(&plain(&["pyenv", "build", "--root", "/x"]));
    assert!(err.contains("cargo feature `pyenv`"), "{err}");
    let err = one_line(&plain(&["gc"]));
    assert!(err.contains("cargo feature `docker`"), "{err}");
    let out = plain(&["run", "--", "echo", "still works"]);
    assert_eq!(text(&out.stdout), "still works\n");
}

/// `run --record FILE` writes a transcript; `replay FILE --backend B` re-runs it on another
/// backend: 0 when nothing diverges, 1 and the diverging line when something does.
#[test]
fn record_on_sim_and_replay_on_local() {
    if !local_available("record_on_sim_and_replay_on_local") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let transcript = tmp.path().join("t.jsonl");
    let input = tmp.path().join("in.txt");
    std::fs::write(&input, "c\nb\na\n").unwrap();
    let upload = format!("{}:/workspace/in.txt", input.display());
    let out = run(&[
        "run",
        "--record",
        transcript.to_str().unwrap(),
        "--upload",
        &upload,
        "--",
        "sh",
        "-c",
        "cat in.txt; head -n 1 in.txt >&2; exit 4",
    ]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    let recorded = std::fs::read_to_string(&transcript).unwrap();
    assert_eq!(
        recorded.lines().count(),
        3,
        "upload, run, close: {recorded}"
    );

    let out = run(&["replay", "--backend", "local", transcript.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_eq!(
        text(&out.stdout),
        "2 operations replayed on local, 0 diverged\n"
    );

    std::fs::write(&input, "changed\n").unwrap();
    let out = run(&["replay", "--backend", "local", transcript.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let report = text(&out.stdout);
    assert!(
        report.starts_with("line 2: run: recorded exit 4"),
        "{report}"
    );
    assert!(
        report.ends_with("2 operations replayed on local, 1 diverged\n"),
        "{report}"
    );

    let err = one_line(&run(&["replay", tmp.path().join("none").to_str().unwrap()]));
    assert!(err.contains("read the transcript"), "{err}");
}

/// Limits from the break-it pass: `--json` bounds its output limit (the object holds the
/// output several times); a timeout below a nanosecond is refused, not "no limit";
/// `--storage-mb` reaches the machine (the simulator's disk budget here).
#[test]
fn json_output_limit_tiny_timeouts_and_storage() {
    let out = run(&["run", "--json", "--output-limit", "64GiB", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    let err = text(&out.stdout);
    assert!(
        err.contains("invalid_input") && err.contains("--output-limit with --json"),
        "{err}"
    );
    let out = run(&["run", "--json", "--output-limit", "256MiB", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for tiny in ["1e-10", "0.0000001ms"] {
        let err = one_line(&run(&["run", "--timeout", tiny, "--", "true"]));
        assert!(err.contains("shorter than a nanosecond"), "{tiny}: {err}");
    }
    let out = run(&[
        "run",
        "--storage-mb",
        "1",
        "--",
        "sh",
        "-c",
        "head -c 3000000 /dev/zero > big; echo $?",
    ]);
    let stdout = text(&out.stdout);
    assert_ne!(
        stdout,
        "0\n",
        "a 3 MB file fit in a 1 MiB disk: {}",
        text(&out.stderr)
    );
    let err = one_line(&run(&["run", "--pids-limit", "0", "--", "true"]));
    assert!(err.contains("pids"), "{err}");
}

/// A usage error points at the subcommand's help, never at an option (`run -- --help` would
/// run `--help` as the command).
#[test]
fn usage_errors_point_at_the_subcommand_help() {
    for args in [
        &["run"][..],
        &["run", "--json"][..],
        &["run", "--backend", "local", "--gpus", "1", "--", "true"][..],
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(125), "{args:?}");
        let err = text(&out.stderr) + &text(&out.stdout);
        assert!(err.contains("(see shellbox run --help)"), "{args:?}: {err}");
    }
    let err = one_line(&run(&["serve"]));
    assert!(err.contains("(see shellbox serve --help)"), "{err}");
}

/// `run --download GUEST:HOST --download-limit SIZE` on `backend`: a file of exactly SIZE
/// arrives; one byte over, a directory, or (with `fifo`) a fifo exit 125 naming the cause,
/// with HOST as it was and no staging directory beside it; a bad SIZE is refused by the
/// size parser before any machine is made.
fn check_download_limit(backend: &str, fifo: bool) {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("got.bin");
    let spec = |guest: &str| format!("{guest}:{}", target.display());
    let setup = "mkdir -p /tmp/d/dir && head -c 2048 /dev/zero | tr '\\0' y > /tmp/d/f";
    let setup = if fifo {
        format!("{setup} && mkfifo /tmp/d/fifo")
    } else {
        setup.to_string()
    };
    let run_with = |guest: &str, limit: &str| {
        run(&[
            "run",
            "--backend",
            backend,
            "--download",
            &spec(guest),
            "--download-limit",
            limit,
            "--",
            "sh",
            "-c",
            &setup,
        ])
    };
    let out = run_with("/tmp/d/f", "2KiB");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(std::fs::read(&target).unwrap(), vec![b'y'; 2048]);

    std::fs::write(&target, b"old").unwrap();
    let out = run_with("/tmp/d/f", "2047");
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("more than 2047 bytes") && stderr.contains("--download-limit"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&target).unwrap(), b"old");
    let mut refused = vec!["/tmp/d/dir"];
    if fifo {
        refused.push("/tmp/d/fifo");
    }
    for guest in refused {
        let out = run_with(guest, "1MiB");
        assert_eq!(
            out.status.code(),
            Some(125),
            "{guest}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains("regular file"),
            "{guest}: {}",
            text(&out.stderr)
        );
        assert_eq!(std::fs::read(&target).unwrap(), b"old", "{guest}");
    }
    let out = run_with("/tmp/d/f", "lots");
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--download-limit"),
        "{}",
        text(&out.stderr)
    );
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["got.bin"], "no staging directory is left");
    // The limit bounds downloads: alone it is a usage error.
    let out = run(&["run", "--download-limit", "1", "--", "true"]);
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--download"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn sim_download_limit_bounds_each_download() {
    check_download_limit("sim", false);
}

#[test]
fn local_download_limit_bounds_each_download() {
    if !local_available("local_download_limit_bounds_each_download") {
        return;
    }
    check_download_limit("local", true);
}

/// A CLI killed (`SIGKILL`) in the middle of a bounded download leaves its
/// `.shellbox-download-*` staging directory beside the target; `shellbox gc` keeps it
/// while its owner runs, and removes it (and the killed run's machine) once it is gone.
#[test]
fn local_gc_removes_the_staging_of_a_killed_download() {
    if !local_available("local_gc_removes_the_staging_of_a_killed_download") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (state, machines, out) = (
        tmp.path().join("state"),
        tmp.path().join("machines"),
        tmp.path().join("out"),
    );
    for d in [&machines, &out] {
        std::fs::create_dir(d).unwrap();
    }
    let with_env = |mut cmd: Command| {
        cmd.env("XDG_STATE_HOME", &state).env("TMPDIR", &machines);
        cmd
    };
    let gc = || {
        let out = with_env(shellbox())
            .args(["gc", "--backend", "local"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    // 1 GiB (sparse in the machine; each command's file size limit) takes seconds to
    // stream: the staging file is caught while it grows.
    let download = format!("/tmp/big:{}", out.join("big").display());
    let mut child = with_env(shellbox())
        .args([
            "run",
            "--backend",
            "local",
            "--download",
            &download,
            "--download-limit",
            "2GiB",
            "--",
            "sh",
            "-c",
            "truncate -s 1G /tmp/big",
        ])
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    let staging = loop {
        let growing = std::fs::read_dir(&out).unwrap().flatten().find(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(".shellbox-download-")
                && std::fs::metadata(e.path().join("item")).is_ok_and(|m| m.len() > 0)
        });
        if let Some(e) = growing {
            break e.path();
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the download ended before it was seen: {status}");
        }
        assert!(Instant::now() < deadline, "no staging file grew");
        std::thread::sleep(Duration::from_millis(5));
    };
    let report = gc();
    assert!(
        report.contains("download staging: 0 removed, 1 kept (owner alive)"),
        "{report}"
    );
    assert!(staging.exists(), "a live download's staging was removed");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(staging.exists(), "nothing left to collect");
    let report = gc();
    assert!(
        report.contains(&format!("removed {}", staging.display()))
            && report.contains("download staging: 1 removed, 0 kept"),
        "{report}"
    );
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 0, "staging left");
    let registry: Vec<_> = std::fs::read_dir(state.join("shellbox/download-staging"))
        .unwrap()
        .flatten()
        .flat_map(|host| std::fs::read_dir(host.path()).unwrap().flatten())
        .map(|e| e.file_name())
        .collect();
    assert!(registry.is_empty(), "registry entries left: {registry:?}");
    let leftover: Vec<_> = std::fs::read_dir(&machines)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(leftover.is_empty(), "machine left: {leftover:?}");
}
