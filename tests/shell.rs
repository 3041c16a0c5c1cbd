//! `shellbox shell` as a person and a script use it: typed at through a real
//! pseudo-terminal (expectrl), and driven with `--json` through a pipe.

// Each backend's cases use the helpers they need; a build without a backend has fewer.
#![cfg_attr(
    not(all(feature = "sim", feature = "local", feature = "docker")),
    allow(dead_code, unused_imports)
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use expectrl::session::OsSession;
use expectrl::{Eof, Expect, Session};

fn shellbox() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shellbox"));
    cmd.env("RUST_LOG", "error");
    cmd
}

#[cfg(feature = "local")]
/// Whether `shellbox run` works on `backend` here; prints the SKIP line when its
/// prerequisite (a bubblewrap sandbox, a Docker Engine) is missing.
fn available(test: &str, backend_args: &[&str]) -> bool {
    let out = shellbox()
        .args(["run", "--json"])
        .args(backend_args)
        .args(["--", "true"])
        .output()
        .unwrap();
    if out.status.code() == Some(0) {
        return true;
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    for (kind, what) in [
        ("sandbox_unavailable", "no bubblewrap sandbox here"),
        ("connect to the Docker Engine", "no Docker Engine here"),
    ] {
        if stdout.contains(kind) {
            eprintln!("SKIP {test}: {what}: {}", stdout.trim());
            return false;
        }
    }
    panic!(
        "shellbox run {backend_args:?} -- true failed: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The docker backend's arguments, with the test image imported (`None` after a SKIP line
/// when there is no engine).
#[cfg(feature = "docker")]
fn docker_args(test: &str) -> Option<Vec<&'static str>> {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let ready = runtime.block_on(async {
        let factory = shellbox::docker::DockerMachineFactory::connect()
            .await
            .ok()?;
        factory.docker().ping().await.ok()?;
        Some(
            shellbox::docker::ensure_busybox_image(
                factory.docker(),
                shellbox::docker::BUSYBOX_TEST_IMAGE,
            )
            .await,
        )
    });
    match ready {
        None => {
            eprintln!("SKIP {test}: no Docker Engine here");
            None
        }
        Some(Err(e)) => panic!("{test}: cannot import the busybox test image: {e}"),
        Some(Ok(_)) => Some(vec![
            "--backend",
            "docker",
            "--image",
            shellbox::docker::BUSYBOX_TEST_IMAGE,
        ]),
    }
}

/// Waits until the terminal is back in cooked mode (ISIG on): the line editor has handed
/// the line over, so a Ctrl-C now is a signal to shellbox, not a key for the editor.
fn wait_for_cooked_mode(p: &OsSession) {
    use nix::sys::termios::{tcgetattr, LocalFlags};
    let terminal = p.get_process().get_raw_handle().unwrap();
    let started = Instant::now();
    while !tcgetattr(&terminal)
        .unwrap()
        .local_flags
        .contains(LocalFlags::ISIG)
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the line editor never left raw mode"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Types at `shellbox shell` through a pseudo-terminal: a command and its output, Ctrl-C
/// of `long` (which prints `st0arted` first where output streams: the line editor's echo of
/// the typed line, `st$((0))arted`, cannot match it) and a command after it,
/// then Ctrl-D, which must exit 0. `tmp` is the child's TMPDIR.
fn drive_pty(backend_args: &[&str], tmp: &Path, long: &str, prompt: &str) {
    let mut cmd = shellbox();
    cmd.arg("shell")
        .args(backend_args)
        .env("TMPDIR", tmp)
        .env("TERM", "xterm");
    let mut p = Session::spawn(cmd).unwrap();
    p.set_expect_timeout(Some(Duration::from_secs(60)));
    p.expect(prompt).unwrap();
    p.send_line("echo hi-$((6*7))").unwrap();
    p.expect("hi-42").unwrap();
    p.expect(prompt).unwrap();
    p.send_line(long).unwrap();
    wait_for_cooked_mode(&p);
    if !long.starts_with("while") {
        // Output streams on this backend: the command is running once it printed.
        p.expect("st0arted").unwrap();
    }
    p.send([3u8]).unwrap();
    let interrupted = format!("{} [130]$ ", prompt.trim_end_matches("$ "));
    p.expect(interrupted.as_str()).unwrap();
    p.send_line("echo af''ter").unwrap();
    p.expect("after").unwrap();
    p.expect(prompt).unwrap();
    p.send([4u8]).unwrap();
    p.expect(Eof).unwrap();
    // nix's WaitStatus, in the version expectrl uses: `Exited(Pid(N), 0)`.
    let status = format!("{:?}", p.get_process().wait().unwrap());
    assert!(
        status.starts_with("Exited(") && status.ends_with(", 0)"),
        "Ctrl-D must exit 0, not {status}"
    );
}

/// Typed ahead in one burst, every byte counts: two lines written at once both run, in
/// order; a command line and a Ctrl-C right behind its Enter (one write) interrupts the
/// command; then a command after it, and Ctrl-D exits 0. The line editor reads the
/// terminal raw and takes what is there at once: it must not keep only the first line.
fn drive_typeahead(backend_args: &[&str], tmp: &Path, long: &str, prompt: &str) {
    let mut cmd = shellbox();
    cmd.arg("shell")
        .args(backend_args)
        .env("TMPDIR", tmp)
        .env("TERM", "xterm");
    let mut p = Session::spawn(cmd).unwrap();
    p.set_expect_timeout(Some(Duration::from_secs(60)));
    p.expect(prompt).unwrap();
    // (The editor's echo of the typed lines, `a-$((6*7))`, cannot match their output.)
    p.send("echo a-$((6*7))\recho b-$((6*8))\r").unwrap();
    p.expect("a-42").unwrap();
    p.expect("b-48").unwrap();
    p.expect(prompt).unwrap();
    p.send(format!("{long}\r\x03")).unwrap();
    let interrupted = format!("{} [130]$ ", prompt.trim_end_matches("$ "));
    p.expect(interrupted.as_str()).unwrap();
    p.send_line("echo af''ter").unwrap();
    p.expect("after").unwrap();
    p.expect(prompt).unwrap();
    p.send([4u8]).unwrap();
    p.expect(Eof).unwrap();
    let status = format!("{:?}", p.get_process().wait().unwrap());
    assert!(
        status.starts_with("Exited(") && status.ends_with(", 0)"),
        "Ctrl-D must exit 0, not {status}"
    );
}

#[cfg(feature = "sim")]
#[test]
fn sim_shell_keeps_typeahead() {
    let tmp = tempfile::tempdir().unwrap();
    drive_typeahead(
        &["--backend", "sim"],
        tmp.path(),
        "while :; do :; done",
        "sim$ ",
    );
}

#[cfg(feature = "local")]
#[test]
fn local_shell_keeps_typeahead() {
    if !available("local_shell_keeps_typeahead", &["--backend", "local"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    drive_typeahead(&["--backend", "local"], tmp.path(), "sleep 100", "local$ ");
}

#[cfg(feature = "docker")]
#[test]
fn docker_shell_through_a_terminal() {
    let Some(args) = docker_args("docker_shell_through_a_terminal") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    drive_pty(
        &args,
        tmp.path(),
        "echo st$((0))arted; sleep 30",
        "docker$ ",
    );
}

/// `shellbox shell --json` on a pipe, talked to a line at a time.
struct JsonShell {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    stdout: BufReader<std::process::ChildStdout>,
}

impl JsonShell {
    fn start(backend_args: &[&str]) -> JsonShell {
        let tmp = std::env::temp_dir();
        JsonShell::start_in(backend_args, &tmp)
    }

    /// Started with `tmp` as its TMPDIR (where the local backend makes machine roots).
    fn start_in(backend_args: &[&str], tmp: &Path) -> JsonShell {
        let mut child = shellbox()
            .args(["shell", "--json"])
            .args(backend_args)
            .env("TMPDIR", tmp)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        JsonShell {
            stdin: child.stdin.take(),
            stdout: BufReader::new(child.stdout.take().unwrap()),
            child,
        }
    }

    fn send(&mut self, request: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{request}").unwrap();
        stdin.flush().unwrap();
    }

    fn answer(&mut self) -> serde_json::Value {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("answer {line:?}: {e}"))
    }

    /// One request and its answer.
    fn ask(&mut self, request: &str) -> serde_json::Value {
        self.send(request);
        self.answer()
    }

    /// The exit status, waiting at most `bound` (then the process is killed and the test
    /// fails: it would otherwise hang).
    fn exit_within(&mut self, bound: Duration) -> i32 {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code().unwrap_or_else(|| panic!("{status:?}"));
            }
            if started.elapsed() > bound {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("shellbox shell --json still ran after {bound:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends SIGTERM; the exit status (within `bound`), and what it printed after.
    fn terminate(mut self, bound: Duration) -> (i32, String) {
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -TERM: {sent}");
        let code = self.exit_within(bound);
        let mut rest = String::new();
        self.stdout.read_to_string(&mut rest).unwrap();
        (code, rest)
    }

    /// Closes stdin; the exit status, waited for at most `bound`, and the answers left
    /// (`count` of them: they wait in the pipe).
    fn end_input(mut self, count: usize, bound: Duration) -> (Vec<serde_json::Value>, i32) {
        drop(self.stdin.take());
        let code = self.exit_within(bound);
        let answers = (0..count).map(|_| self.answer()).collect();
        let mut rest = String::new();
        self.stdout.read_to_string(&mut rest).unwrap();
        assert_eq!(rest, "", "answers nobody asked for");
        (answers, code)
    }

    /// Closes stdin; no answer is left, and the exit status.
    fn finish(mut self) -> i32 {
        drop(self.stdin.take());
        let mut rest = String::new();
        self.stdout.read_to_string(&mut rest).unwrap();
        assert_eq!(rest, "", "answers nobody asked for");
        let status = self.child.wait().unwrap();
        status.code().unwrap_or_else(|| panic!("{status:?}"))
    }
}

fn completed(answer: &serde_json::Value, code: i32) {
    assert_eq!(
        (&answer["status"], &answer["exit_code"]),
        (&"completed".into(), &code.into()),
        "{answer}"
    );
}

/// An interactive session's answers to execute, write, read, interrupt and a malformed
/// line.
fn check_interactive_json(backend_args: &[&str]) {
    let mut sh = JsonShell::start(backend_args);
    let a = sh.ask(r#"{"execute": "cd /tmp && x=5; printf 'a\\377b'", "wait": 30}"#);
    completed(&a, 0);
    assert_eq!(a["output_base64"], "Yf9i", "bytes exactly: {a}");
    let a = sh.ask(r#"{"execute": "echo $x $PWD", "wait": 30}"#);
    assert_eq!(a["output"], "5 /tmp\n", "{a}");
    let a = sh.ask(r#"{"execute": "read -r line; echo got:$line", "wait": 0.2}"#);
    assert_eq!(a["status"], "running", "{a}");
    assert_eq!(sh.ask(r#"{"write": "typed\n"}"#), serde_json::json!({}));
    let b = sh.ask(r#"{"read": true, "wait": 30}"#);
    completed(&b, 0);
    assert_eq!(
        format!(
            "{}{}",
            a["output"].as_str().unwrap(),
            b["output"].as_str().unwrap()
        ),
        "got:typed\n"
    );
    let a = sh.ask(r#"{"execute": "echo st-arted; sleep 30", "wait": 1}"#);
    assert_eq!(a["status"], "running", "{a}");
    let bad = sh.ask("{\"execute\": oops");
    assert_eq!(bad["error"]["kind"], "invalid_input", "{bad}");
    for empty in ["", "   "] {
        let bad = sh.ask(empty);
        assert_eq!(bad["error"]["kind"], "invalid_input", "{empty:?}: {bad}");
        assert!(
            bad["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("empty line")),
            "{empty:?}: {bad}"
        );
    }
    assert_eq!(sh.ask(r#"{"interrupt": true}"#), serde_json::json!({}));
    let b = sh.ask(r#"{"read": true, "wait": 30}"#);
    completed(&b, 130);
    // An interactive shell ends the interrupted line with a newline of its own.
    assert_eq!(
        format!(
            "{}{}",
            a["output"].as_str().unwrap(),
            b["output"].as_str().unwrap()
        )
        .trim_end(),
        "st-arted"
    );
    let a = sh.ask(r#"{"read": true}"#);
    assert_eq!(a["error"]["kind"], "shell_state", "nothing runs: {a}");
    let a = sh.ask(r#"{"execute": "echo still here", "wait": 30}"#);
    assert_eq!(a["output"], "still here\n", "{a}");
    // All at once, as a script pipes them: each interrupt stops the execute before it,
    // not an earlier one still running.
    for _ in 0..2 {
        sh.send(r#"{"execute": "sleep 30", "wait": 0.3}"#);
        sh.send(r#"{"interrupt": true}"#);
        sh.send(r#"{"read": true, "wait": 20}"#);
    }
    for round in 0..2 {
        let a = sh.answer();
        assert_eq!(sh.answer(), serde_json::json!({}), "round {round}");
        let b = sh.answer();
        let code = if a["status"] == "completed" { &a } else { &b };
        assert_eq!(code["exit_code"], 130, "round {round}: {a} then {b}");
    }
    assert_eq!(sh.finish(), 0);
}

#[cfg(feature = "docker")]
#[test]
fn docker_shell_json_lines() {
    let Some(args) = docker_args("docker_shell_json_lines") else {
        return;
    };
    check_interactive_json(&args);
}

#[cfg(feature = "local")]
#[test]
fn local_shell_through_a_terminal_leaves_no_root() {
    if !available("local_shell_through_a_terminal", &["--backend", "local"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    drive_pty(
        &["--backend", "local"],
        tmp.path(),
        "echo st$((0))arted; sleep 30",
        "local$ ",
    );
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        0,
        "the machine root is left on the host"
    );
}

/// Ctrl-\\ while a command runs is the terminal's quit for that command (issue 11, break-it
/// F8: SIGQUIT killed shellbox and left the machine behind): `sleep` ends with 131 and the
/// session goes on; a SIGQUIT from outside at the prompt ends shellbox like SIGTERM does,
/// machine removed, exit 131.
#[cfg(feature = "local")]
#[test]
fn local_shell_quit_key_quits_the_command() {
    if !available(
        "local_shell_quit_key_quits_the_command",
        &["--backend", "local"],
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let spawn = || {
        let mut cmd = shellbox();
        cmd.args(["shell", "--backend", "local"])
            .env("TMPDIR", tmp.path())
            .env("TERM", "xterm");
        let mut p = Session::spawn(cmd).unwrap();
        p.set_expect_timeout(Some(Duration::from_secs(60)));
        p.expect("local$ ").unwrap();
        p
    };
    let mut p = spawn();
    p.send_line("echo st$((0))arted; sleep 30").unwrap();
    wait_for_cooked_mode(&p);
    p.expect("st0arted").unwrap();
    p.send([0x1cu8]).unwrap();
    p.expect("local [131]$ ").unwrap();
    p.send_line("echo af''ter").unwrap();
    p.expect("after").unwrap();
    p.expect("local$ ").unwrap();
    p.send([4u8]).unwrap();
    p.expect(Eof).unwrap();
    let status = format!("{:?}", p.get_process().wait().unwrap());
    assert!(
        status.starts_with("Exited(") && status.ends_with(", 0)"),
        "Ctrl-D must exit 0, not {status}"
    );
    let mut p = spawn();
    let pid = p.get_process().pid();
    let killed = Command::new("kill")
        .args(["-QUIT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    p.expect(Eof).unwrap();
    let status = format!("{:?}", p.get_process().wait().unwrap());
    assert!(
        status.starts_with("Exited(") && status.ends_with(", 131)"),
        "SIGQUIT at the prompt must exit 131, not {status}"
    );
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        0,
        "the machine root is left on the host"
    );
}

#[cfg(feature = "local")]
#[test]
fn local_shell_json_lines() {
    if !available("local_shell_json_lines", &["--backend", "local"]) {
        return;
    }
    check_interactive_json(&["--backend", "local"]);
}

#[cfg(feature = "sim")]
#[test]
fn sim_shell_through_a_terminal() {
    let tmp = tempfile::tempdir().unwrap();
    // The simulator's `sleep` is virtual (it returns at once): what Ctrl-C stops while its
    // execute is out is a loop that runs until interrupted.
    drive_pty(
        &["--backend", "sim"],
        tmp.path(),
        "while :; do :; done",
        "sim$ ",
    );
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        0,
        "the simulator leaves nothing on the host"
    );
}

#[cfg(feature = "sim")]
#[test]
fn sim_shell_json_lines() {
    let mut sh = JsonShell::start(&["--backend", "sim"]);
    let a = sh.ask(r#"{"execute": "cd /tmp && x=5; printf 'a\\377b'", "wait": 30}"#);
    completed(&a, 0);
    assert_eq!(a["output_base64"], "Yf9i", "bytes exactly: {a}");
    let a = sh.ask(r#"{"execute": "echo $x $PWD; echo err >&2", "wait": 30}"#);
    assert_eq!(
        a["output"], "5 /tmp\nerr\n",
        "stdout and stderr merged: {a}"
    );
    // Non-interactive: execute runs to completion whatever its wait (sleep is virtual).
    let a = sh.ask(r#"{"execute": "sleep 30; echo slept", "wait": 0}"#);
    completed(&a, 0);
    assert_eq!(a["output"], "slept\n", "{a}");
    for request in [r#"{"read": true}"#, r#"{"write": "x\n"}"#] {
        let a = sh.ask(request);
        assert_eq!(a["error"]["kind"], "unsupported", "{request}: {a}");
    }
    let a = sh.ask(r#"{"interrupt": true}"#);
    assert_eq!(a["error"]["kind"], "shell_state", "nothing runs: {a}");
    // An interrupt stops the execute before it, whose answer comes first.
    sh.send(r#"{"execute": "while :; do :; done", "wait": 30}"#);
    sh.send(r#"{"interrupt": true}"#);
    completed(&sh.answer(), 130);
    assert_eq!(sh.answer(), serde_json::json!({}));
    let a = sh.ask(r#"{"execute": "echo $? $x", "wait": 30}"#);
    assert_eq!(a["output"], "130 5\n", "the shell goes on: {a}");
    let bad = sh.ask("{\"execute\": oops");
    assert_eq!(bad["error"]["kind"], "invalid_input", "{bad}");
    for empty in ["", "   "] {
        let bad = sh.ask(empty);
        assert_eq!(bad["error"]["kind"], "invalid_input", "{empty:?}: {bad}");
        assert!(
            bad["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("empty line")),
            "{empty:?}: {bad}"
        );
    }
    let a = sh.ask(r#"{"execute": "echo bye; exit 3", "wait": 30}"#);
    assert_eq!(
        (&a["status"], &a["exit_code"], &a["output"]),
        (&"reset".into(), &serde_json::Value::Null, &"bye\n".into()),
        "{a}"
    );
    let a = sh.ask(r#"{"execute": "echo ${x-unset}; ls -d /tmp", "wait": 30}"#);
    assert_eq!(a["output"], "unset\n/tmp\n", "a fresh shell: {a}");
    assert_eq!(sh.finish(), 0);
}

/// How long a `shell --json` whose input ended or that got SIGTERM may take to exit before
/// the test calls it hung (a bound against hanging, not a measurement).
const EXIT_BOUND: Duration = Duration::from_secs(60);

/// Whether `tmp` holds no machine root of the local backend (`shellbox-local-*`).
fn no_local_root(tmp: &Path) -> bool {
    !std::fs::read_dir(tmp).unwrap().any(|e| {
        e.unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with("shellbox-local-")
    })
}

#[cfg(feature = "sim")]
#[test]
fn sim_shell_json_busy_loop_at_end_of_input() {
    // The simulator's execute runs to completion; once stdin has ended no interrupt can
    // come, so its wait (1 s) bounds it: it completes interrupted, and shellbox exits 0.
    let mut sh = JsonShell::start(&["--backend", "sim"]);
    completed(&sh.ask(r#"{"execute": "x=1", "wait": 30}"#), 0);
    sh.send(r#"{"execute": "while :; do :; done", "wait": 1}"#);
    sh.send(r#"{"execute": "echo after $x", "wait": 30}"#);
    let (answers, code) = sh.end_input(2, EXIT_BOUND);
    completed(&answers[0], 130);
    completed(&answers[1], 0);
    assert_eq!(
        answers[1]["output"], "after 1\n",
        "the requests read are answered"
    );
    assert_eq!(code, 0);
}

#[cfg(feature = "sim")]
#[test]
fn sim_shell_json_takes_a_wait_past_the_clock() {
    // A wait no clock can add to now (1.8e19 s, past u64 nanoseconds' reach) is accepted as
    // "for ever": the command completes, and stdin's end does not make it a bound (it once
    // panicked adding it to an Instant and answered nothing).
    let mut sh = JsonShell::start(&["--backend", "sim"]);
    let a = sh.ask(r#"{"execute": "echo far", "wait": 1.8e19}"#);
    completed(&a, 0);
    assert_eq!(a["output"], "far\n");
    sh.send(r#"{"execute": "echo last", "wait": 1.8e19}"#);
    let (answers, code) = sh.end_input(1, EXIT_BOUND);
    completed(&answers[0], 0);
    assert_eq!(answers[0]["output"], "last\n");
    assert_eq!(code, 0);
}

#[cfg(feature = "sim")]
#[test]
fn sim_shell_json_sigterm_stops_a_busy_loop() {
    let tmp = tempfile::tempdir().unwrap();
    // Stdin still open, and after its end (the loop's wait still far off).
    for end_input in [false, true] {
        let mut sh = JsonShell::start_in(&["--backend", "sim"], tmp.path());
        completed(&sh.ask(r#"{"execute": "true", "wait": 30}"#), 0);
        sh.send(r#"{"execute": "while :; do :; done", "wait": 3600}"#);
        if end_input {
            drop(sh.stdin.take());
        }
        let (code, rest) = sh.terminate(EXIT_BOUND);
        assert_eq!(code, 128 + 15, "end_input {end_input}");
        assert_eq!(rest, "", "nothing is printed after the signal");
    }
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}

#[cfg(feature = "local")]
#[test]
fn local_shell_json_ends_with_a_command_running() {
    if !available(
        "local_shell_json_ends_with_a_command_running",
        &["--backend", "local"],
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // End of input: the execute answers "running" after its wait, the command is stopped
    // and the machine removed.
    let mut sh = JsonShell::start_in(&["--backend", "local"], tmp.path());
    completed(&sh.ask(r#"{"execute": "true", "wait": 30}"#), 0);
    sh.send(r#"{"execute": "sleep 1000", "wait": 1}"#);
    let (answers, code) = sh.end_input(1, EXIT_BOUND);
    assert_eq!(answers[0]["status"], "running", "{}", answers[0]);
    assert_eq!(code, 0);
    assert!(no_local_root(tmp.path()), "a machine root is left");
    // SIGTERM while the command runs, stdin open: 143, and the machine removed.
    let mut sh = JsonShell::start_in(&["--backend", "local"], tmp.path());
    let a = sh.ask(r#"{"execute": "sleep 1000", "wait": 1}"#);
    assert_eq!(a["status"], "running", "{a}");
    sh.send(r#"{"read": true, "wait": 3600}"#);
    let (code, rest) = sh.terminate(EXIT_BOUND);
    assert_eq!((code, rest.as_str()), (128 + 15, ""));
    assert!(no_local_root(tmp.path()), "a machine root is left");
}
