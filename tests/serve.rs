//! Protocol tests of `shellbox serve --stdio` (PROTOCOL.md), against the real binary:
//! pipelining, out-of-order answers, cancel, bad input of every kind, and cleanup at end of
//! input and on SIGTERM, on sim and local (and docker when an engine is reachable).

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const ANSWER_WITHIN: Duration = Duration::from_secs(30);

/// A running `shellbox serve --stdio` and the lines it wrote.
struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<Value>,
    /// Lines read but not yet asked for.
    pending: VecDeque<Value>,
}

impl Server {
    fn start(tmpdir: Option<&Path>) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_shellbox"));
        cmd.args(["serve", "--stdio"])
            .env("RUST_LOG", "error")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        if let Some(tmp) = tmpdir {
            cmd.env("TMPDIR", tmp);
        }
        let mut child = cmd.spawn().expect("spawn shellbox serve");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let value: Value = serde_json::from_str(&line).unwrap_or_else(|e| {
                    panic!("serve wrote a line that is not JSON ({e}): {line}")
                });
                if tx.send(value).is_err() {
                    return;
                }
            }
        });
        Server {
            stdin: child.stdin.take(),
            child,
            lines: rx,
            pending: VecDeque::new(),
        }
    }

    fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    fn send(&mut self, id: impl Into<Value>, method: &str, params: Value) {
        let line = json!({"id": id.into(), "method": method, "params": params}).to_string();
        self.send_raw(&line);
    }

    /// The next line, in the order the server wrote it.
    fn next_line(&mut self) -> Value {
        if let Some(v) = self.pending.pop_front() {
            return v;
        }
        self.lines
            .recv_timeout(ANSWER_WITHIN)
            .expect("the server answers within 30 s")
    }

    /// The answer (result or error) to `id`, keeping other lines for later.
    fn answer(&mut self, id: impl Into<Value>) -> Value {
        let id = id.into();
        if let Some(i) = self
            .pending
            .iter()
            .position(|v| v["id"] == id && v.get("event").is_none())
        {
            return self.pending.remove(i).unwrap();
        }
        let deadline = Instant::now() + ANSWER_WITHIN;
        loop {
            let v = self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|_| panic!("no answer to {id} within 30 s"));
            if v["id"] == id && v.get("event").is_none() {
                return v;
            }
            self.pending.push_back(v);
        }
    }

    fn call(&mut self, id: impl Into<Value> + Clone, method: &str, params: Value) -> Value {
        self.send(id.clone(), method, params);
        self.answer(id)
    }

    fn ok(&mut self, id: impl Into<Value> + Clone, method: &str, params: Value) -> Value {
        let answer = self.call(id, method, params);
        assert!(answer.get("error").is_none(), "{method} failed: {answer}");
        answer["result"].clone()
    }

    fn factory(&mut self, backend: &str) -> Value {
        self.ok("f", "factory", json!({"backend": backend}))["factory"].clone()
    }

    fn create(&mut self, factory: &Value, spec: Value) -> Value {
        self.ok("c", "create", json!({"factory": factory, "spec": spec}))["machine"].clone()
    }

    /// Closes stdin and waits (bounded) for the exit status.
    fn finish(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        wait_bounded(&mut self.child)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_bounded(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "the server did not exit within 60 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn unb64(v: &Value) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(v.as_str().expect("a base64 string"))
        .unwrap()
}

fn sim_spec() -> Value {
    json!({"source": {"kind": "sim"}})
}

fn host_spec() -> Value {
    json!({"source": {"kind": "host"}})
}

fn shell(script: &str) -> Value {
    json!({"argv": ["sh", "-c", script]})
}

fn error_kind(answer: &Value) -> (&str, &str) {
    let e = &answer["error"];
    assert!(e.is_object(), "expected an error, got {answer}");
    (
        e["kind"].as_str().unwrap(),
        e["details"]["protocol"].as_str().unwrap_or(""),
    )
}

/// Whether the local backend can sandbox here; prints the SKIP line when not.
fn local_available(test: &str) -> bool {
    let mut server = Server::start(None);
    let answer = server.call(1, "factory", json!({"backend": "local"}));
    if answer.get("error").is_none() {
        return true;
    }
    if answer["error"]["kind"] == "sandbox_unavailable" {
        eprintln!(
            "SKIP {test}: no bubblewrap sandbox here: {}",
            answer["error"]["message"]
        );
        return false;
    }
    panic!("factory local failed: {answer}");
}

/// `shellbox-local-*` directories left in `tmp`.
fn machine_roots(tmp: &Path) -> Vec<String> {
    std::fs::read_dir(tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("shellbox-local-"))
        .collect()
}

/// Everything of shellbox's left in `tmp` (machine roots and the local factories' shared
/// `/etc`, `shellbox-etc-*`).
fn leftovers(tmp: &Path) -> Vec<String> {
    std::fs::read_dir(tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("shellbox-"))
        .collect()
}

/// Host processes whose command line contains `needle`.
fn processes_with(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if text.contains(needle) {
            found.push(format!("{}: {text}", entry.file_name().to_string_lossy()));
        }
    }
    found
}

/// Waits (bounded) until a host process runs exactly `argv` (e.g. `sleep 731.25`), so the
/// shell that starts it has run what came before.
fn wait_for_process(argv: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let exact = format!("{argv} ");
    while !processes_with(argv)
        .iter()
        .any(|p| p.split_once(": ").is_some_and(|(_, c)| c == exact))
    {
        assert!(Instant::now() < deadline, "{argv} did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded) until no host process mentions `needle`.
fn assert_no_process(needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = processes_with(needle);
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "processes left behind: {left:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn schema_is_checked_in_and_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("PROTOCOL.schema.json");
    let generated = serde_json::to_string_pretty(&shellbox::serve::wire::schema()).unwrap() + "\n";
    if std::env::var_os("SHELLBOX_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "PROTOCOL.schema.json is out of date with the Rust types; regenerate it with \
         `SHELLBOX_BLESS=1 cargo test --test serve schema_is_checked_in_and_current`"
    );
}

/// The wire forms are the core types' serde forms, bytes aside (base64 on the wire).
#[test]
fn wire_forms_match_the_core_serde_forms() {
    use shellbox::serve::wire::{Limits, Spec, WireCommand};
    use shellbox::*;
    let sources = vec![
        ImageSource::Host(HostImage {
            read_only: vec!["/opt/x".into()],
            bin_dirs: vec!["/opt/x/bin".into()],
            mounts: vec![Mount {
                host: "/srv/data".into(),
                guest: "/data".into(),
            }],
        }),
        ImageSource::Docker(DockerImage {
            reference: "busybox:latest".into(),
        }),
        ImageSource::Registry(RegistryImage {
            reference: "127.0.0.1:5000/img".into(),
            credentials: Some(RegistryCredentials {
                username: "u".into(),
                password: "p".into(),
            }),
        }),
        ImageSource::Dockerfile(DockerfileSource {
            context: "/ctx".into(),
            dockerfile: "/ctx/Dockerfile".into(),
        }),
        ImageSource::Archive(ImageArchive {
            path: "/img.tar".into(),
        }),
        ImageSource::Sim(SimBuiltins::default()),
        ImageSource::Packages(PackageSpec::default()),
        ImageSource::Packages(PackageSpec::python(["six==1.17.0"]).tool("python3")),
    ];
    for source in sources {
        let mut spec = MachineSpec::new(source)
            .env("A", "1")
            .cpus(2)
            .memory_mb(64)
            .gpus(1)
            .network(NetworkPolicy::Allow)
            .pids_limit(77);
        spec.startup_timeout = Some(Duration::from_millis(1500));
        let core = serde_json::to_value(&spec).unwrap();
        let wire = serde_json::to_value(Spec::from_core(&spec).unwrap()).unwrap();
        assert_eq!(core, wire);
        let back: Spec = serde_json::from_value(core).unwrap();
        assert_eq!(back.into_core().unwrap(), spec);
    }
    let command = Command::shell("cat")
        .stdin(vec![0u8, 255, 10])
        .timeout(Duration::from_millis(250))
        .env("K", "V")
        .cwd("/tmp")
        .user("65534")
        .output_limit_bytes(7);
    let mut core = serde_json::to_value(&command).unwrap();
    let wire = serde_json::to_value(WireCommand::from_core(&command)).unwrap();
    assert_eq!(wire["stdin"], b64(&[0, 255, 10]));
    core["stdin"] = wire["stdin"].clone();
    assert_eq!(core, wire);
    let back: WireCommand = serde_json::from_value(wire).unwrap();
    assert_eq!(back.into_core().unwrap(), command);
    // Defaults are the core's.
    let minimal: WireCommand = serde_json::from_value(json!({"argv": ["true"]})).unwrap();
    assert_eq!(minimal.into_core().unwrap(), Command::new("true"));
    let minimal: Spec = serde_json::from_value(sim_spec()).unwrap();
    assert_eq!(minimal.into_core().unwrap(), MachineSpec::sim());
    let limits = DownloadLimits::default();
    assert_eq!(
        serde_json::to_value(limits).unwrap(),
        serde_json::to_value(Limits::from_core(&limits)).unwrap()
    );
    assert_eq!(Limits::default().into_core().unwrap(), limits);
    let requirements = ExecutionRequirements {
        command_semantics: Some(CommandSemantics::ShellSimulator),
        capabilities: vec!["shell".into(), "network".into()],
        docker_image: Some("busybox".into()),
    };
    let core = serde_json::to_value(&requirements).unwrap();
    let wire: shellbox::serve::wire::Requirements = serde_json::from_value(core.clone()).unwrap();
    assert_eq!(serde_json::to_value(&wire).unwrap(), core);
    assert_eq!(wire.into_core(), requirements);
}

#[test]
fn sim_run_stream_and_results() {
    let mut s = Server::start(None);
    let f = s.factory("sim");
    let m = s.create(&f, sim_spec());
    let r = s.ok(
        1,
        "run",
        json!({"machine": m, "command": {"argv": ["sh", "-c", "cat; echo err >&2; exit 3"], "stdin": b64(b"in\xff")}}),
    );
    assert_eq!(r["exit_code"], 3);
    assert_eq!(r["reason"], "exited");
    assert_eq!(unb64(&r["stdout"]), b"in\xff");
    assert_eq!(unb64(&r["stderr"]), b"err\n");
    let r = s.ok(
        2,
        "run",
        json!({"machine": m, "command": {"argv": ["sh", "-c", "printf 123456"], "output_limit_bytes": 4}}),
    );
    assert_eq!(
        (unb64(&r["stdout"]), &r["stdout_truncated"]),
        (b"1234".to_vec(), &json!(true))
    );
    let r = s.ok(
        3,
        "run",
        json!({"machine": m, "command": {"argv": ["no-such-program"]}}),
    );
    assert_eq!(r["exit_code"], 127);

    // run_stream: events in order, then the exit status as the result.
    s.send(
        4,
        "run_stream",
        json!({"machine": m, "command": shell("echo a; echo b >&2; echo c")}),
    );
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let result = loop {
        let line = s.next_line();
        assert_eq!(line["id"], 4, "{line}");
        if let Some(event) = line.get("event") {
            if let Some(b) = event.get("stdout") {
                stdout.extend(unb64(b));
            } else {
                stderr.extend(unb64(&event["stderr"]));
            }
        } else {
            break line["result"].clone();
        }
    };
    assert_eq!((stdout, stderr), (b"a\nc\n".to_vec(), b"b\n".to_vec()));
    assert_eq!(
        result,
        json!({"exit_code": 0, "reason": "exited", "stdout_truncated": false, "stderr_truncated": false})
    );

    // Transfers and download_files.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("in.txt"), b"payload").unwrap();
    s.ok(
        5,
        "upload",
        json!({"machine": m, "source": dir.path().join("in.txt"), "target": "/workspace/in.txt"}),
    );
    s.ok(
        6,
        "download",
        json!({"machine": m, "source": "/workspace/in.txt", "target": dir.path().join("out.txt")}),
    );
    assert_eq!(
        std::fs::read(dir.path().join("out.txt")).unwrap(),
        b"payload"
    );
    let r = s.ok(
        7,
        "download_files",
        json!({"machine": m, "paths": ["/workspace", "/missing"]}),
    );
    assert_eq!(unb64(&r["files"]["/workspace/in.txt"]), b"payload");
    let r = s.call(
        8,
        "download_files",
        json!({"machine": m, "paths": ["/workspace"], "limits": {"max_bytes": 3}}),
    );
    assert_eq!(error_kind(&r).0, "download_limit_exceeded", "{r}");
    let r = s.call(
        9,
        "download",
        json!({"machine": m, "source": "/nope", "target": dir.path().join("x")}),
    );
    assert_eq!(error_kind(&r).0, "not_found", "{r}");

    // check_environment answers from the backend's declared capabilities; gc is docker's.
    s.ok(
        10,
        "check_environment",
        json!({"factory": f, "spec": sim_spec()}),
    );
    s.ok(
        10,
        "check_environment",
        json!({"factory": f, "spec": sim_spec(), "requirements": {"command_semantics": "shell_simulator", "capabilities": ["shell", "filesystem"]}}),
    );
    let r = s.call(
        10,
        "check_environment",
        json!({"factory": f, "spec": sim_spec(), "requirements": {"capabilities": ["process", "git_repository", "shell"]}}),
    );
    assert_eq!(error_kind(&r).0, "unsupported", "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("git_repository, process"),
        "{r}"
    );
    let r = s.call(
        10,
        "check_environment",
        json!({"factory": f, "spec": host_spec()}),
    );
    assert_eq!(error_kind(&r).0, "unsupported", "{r}");
    let r = s.call(11, "gc", json!({"factory": f}));
    assert_eq!(error_kind(&r).0, "unsupported", "{r}");

    // close is idempotent; a closed machine answers `closed`.
    s.ok(12, "close", json!({"machine": m}));
    s.ok(13, "close", json!({"machine": m}));
    let r = s.call(14, "run", json!({"machine": m, "command": shell("true")}));
    assert_eq!(error_kind(&r), ("closed", ""), "{r}");
    assert!(s.finish().success());
}

#[test]
fn pipelined_requests_are_answered_out_of_order() {
    let mut s = Server::start(None);
    let f = s.factory("sim");
    let slow = s.create(&f, sim_spec());
    let fast = s.create(&f, sim_spec());
    // Sent together, before any answer: a busy loop that only its timeout ends, then a
    // quick command on another machine, whose answer comes first.
    s.send(
        "slow",
        "run",
        json!({"machine": slow, "command": {"argv": ["sh", "-c", "echo started; while :; do :; done"], "timeout": 2.0}}),
    );
    s.send(
        "fast",
        "run",
        json!({"machine": fast, "command": shell("echo fast")}),
    );
    let first = s.next_line();
    assert_eq!(first["id"], "fast", "{first}");
    assert_eq!(unb64(&first["result"]["stdout"]), b"fast\n");
    let slow_answer = s.answer("slow");
    assert_eq!(
        slow_answer["result"]["reason"], "timed_out",
        "{slow_answer}"
    );
    assert_eq!(slow_answer["result"]["exit_code"], Value::Null);
    // A timed-out command keeps the output it wrote.
    assert_eq!(unb64(&slow_answer["result"]["stdout"]), b"started\n");

    // Many requests pipelined on one machine: every one answered once, by its id.
    for i in 0..50 {
        s.send(
            i,
            "run",
            json!({"machine": fast, "command": shell(&format!("echo {i}"))}),
        );
    }
    for i in 0..50 {
        let a = s.answer(i);
        assert_eq!(unb64(&a["result"]["stdout"]), format!("{i}\n").as_bytes());
    }
    assert!(s.finish().success());
}

#[test]
fn cancel_stops_a_running_command_on_sim() {
    let mut s = Server::start(None);
    let f = s.factory("sim");
    let m = s.create(&f, sim_spec());
    s.send(
        "loop",
        "run",
        json!({"machine": m, "command": shell("while :; do :; done")}),
    );
    std::thread::sleep(Duration::from_millis(200));
    let r = s.ok("c1", "cancel", json!({"id": "loop"}));
    assert_eq!(r, json!({"cancelled": true}));
    let a = s.answer("loop");
    assert_eq!(error_kind(&a), ("cancelled", "cancelled"), "{a}");
    // Nothing to cancel any more; the machine still works.
    assert_eq!(
        s.ok("c2", "cancel", json!({"id": "loop"})),
        json!({"cancelled": false})
    );
    let r = s.ok(
        "after",
        "run",
        json!({"machine": m, "command": shell("echo ok")}),
    );
    assert_eq!(unb64(&r["stdout"]), b"ok\n");
    // run_stream is cancelled the same way.
    s.send(
        "stream",
        "run_stream",
        json!({"machine": m, "command": shell("while :; do :; done")}),
    );
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        s.ok("c3", "cancel", json!({"id": "stream"})),
        json!({"cancelled": true})
    );
    assert_eq!(error_kind(&s.answer("stream")).0, "cancelled");
    assert!(s.finish().success());
}

/// An id may be reused once its request was cancelled: the cancelled request's end never
/// unregisters the new one (which stays cancellable).
#[test]
fn a_reused_id_stays_cancellable() {
    let mut s = Server::start(None);
    let f = s.factory("sim");
    let one = s.create(&f, sim_spec());
    let two = s.create(&f, sim_spec());
    let busy = json!({"argv": ["sh", "-c", "while :; do :; done"]});
    s.send("r", "run", json!({"machine": one, "command": busy}));
    std::thread::sleep(Duration::from_millis(100));
    // Pipelined: the cancel, then a new request with the same id, before any answer.
    s.send("c1", "cancel", json!({"id": "r"}));
    s.send("r", "run", json!({"machine": two, "command": busy}));
    assert_eq!(s.answer("c1")["result"], json!({"cancelled": true}));
    assert_eq!(error_kind(&s.answer("r")).0, "cancelled");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        s.ok("c2", "cancel", json!({"id": "r"})),
        json!({"cancelled": true})
    );
    assert_eq!(error_kind(&s.answer("r")).0, "cancelled");
    assert!(s.finish().success());
}

#[test]
fn bad_input_of_every_kind_is_answered_and_the_server_goes_on() {
    let mut s = Server::start(None);
    let f = s.factory("sim");
    let m = s.create(&f, sim_spec());
    let lines: Vec<(&str, Value, &str, &str)> = vec![
        ("not json", Value::Null, "invalid_input", "bad_json"),
        (
            "{\"id\": 1, \"method\": ",
            Value::Null,
            "invalid_input",
            "bad_json",
        ),
        ("[1, 2]", Value::Null, "invalid_input", "bad_request"),
        (
            "{\"method\": \"run\"}",
            Value::Null,
            "invalid_input",
            "bad_request",
        ),
        (
            "{\"id\": null, \"method\": \"run\"}",
            Value::Null,
            "invalid_input",
            "bad_request",
        ),
        (
            "{\"id\": [1], \"method\": \"run\"}",
            Value::Null,
            "invalid_input",
            "bad_request",
        ),
        (
            "{\"id\": \"m\"}",
            json!("m"),
            "invalid_input",
            "bad_request",
        ),
        (
            "{\"id\": \"u\", \"method\": \"run\", \"params\": {}, \"extra\": 1}",
            json!("u"),
            "invalid_input",
            "bad_request",
        ),
        (
            "{\"id\": \"x\", \"method\": \"explode\"}",
            json!("x"),
            "invalid_input",
            "unknown_method",
        ),
    ];
    for (line, id, kind, protocol) in lines {
        s.send_raw(line);
        let a = s.next_line();
        assert_eq!(a["id"], id, "{line}: {a}");
        assert_eq!(error_kind(&a), (kind, protocol), "{line}: {a}");
    }
    // Blank lines are ignored.
    s.send_raw("   ");
    let bad_params: Vec<(&str, Value, &str, &str)> = vec![
        (
            "run",
            json!({"machine": m}),
            "invalid_input",
            "invalid_params",
        ),
        (
            "run",
            json!({"machine": m, "command": {"argv": ["true"], "bogus": 1}}),
            "invalid_input",
            "invalid_params",
        ),
        (
            "run",
            json!({"machine": m, "command": {"argv": "true"}}),
            "invalid_input",
            "invalid_params",
        ),
        (
            "run",
            json!({"machine": m, "command": {"argv": ["true"], "output_limit_bytes": -1}}),
            "invalid_input",
            "invalid_params",
        ),
        (
            "run",
            json!({"machine": m, "command": {"argv": ["cat"], "stdin": "%%%"}}),
            "invalid_input",
            "",
        ),
        (
            "run",
            json!({"machine": m, "command": {"argv": ["true"], "timeout": -1.0}}),
            "invalid_input",
            "",
        ),
        (
            "run",
            json!({"machine": m, "command": {"argv": []}}),
            "invalid_input",
            "",
        ),
        (
            "run",
            json!({"machine": m, "command": {"argv": ["true"], "cwd": "relative"}}),
            "invalid_input",
            "",
        ),
        (
            "run",
            json!({"machine": 999, "command": {"argv": ["true"]}}),
            "invalid_input",
            "unknown_machine",
        ),
        (
            "run",
            json!({"machine": m, "command": {"argv": ["true"]}, "extra": 0}),
            "invalid_input",
            "invalid_params",
        ),
        (
            "create",
            json!({"factory": 77, "spec": sim_spec()}),
            "invalid_input",
            "unknown_factory",
        ),
        (
            "create",
            json!({"factory": f, "spec": {"source": {"kind": "sim"}, "colour": "red"}}),
            "invalid_input",
            "invalid_params",
        ),
        (
            "create",
            json!({"factory": f, "spec": {"source": {"kind": "vm"}}}),
            "invalid_input",
            "invalid_params",
        ),
        (
            "create",
            json!({"factory": f, "spec": {"source": {"kind": "host", "read_only": [], "x": 1}}}),
            "invalid_input",
            "invalid_params",
        ),
        (
            "create",
            json!({"factory": f, "spec": {"source": {"kind": "sim"}, "workdir": "rel"}}),
            "invalid_input",
            "",
        ),
        (
            "create",
            json!({"factory": f, "spec": {"source": {"kind": "host"}}}),
            "unsupported",
            "",
        ),
        (
            "create",
            json!({"factory": f, "spec": {"source": {"kind": "sim"}, "cpus": 0}}),
            "invalid_input",
            "",
        ),
        (
            "factory",
            json!({"backend": "vm"}),
            "invalid_input",
            "invalid_params",
        ),
        (
            "factory",
            json!({"backend": "sim", "cpu_fuel": "lots"}),
            "invalid_input",
            "invalid_params",
        ),
        (
            "factory",
            json!({"backend": "sim", "speed": 1}),
            "invalid_input",
            "invalid_params",
        ),
        (
            "upload",
            json!({"machine": m, "source": "/definitely/not/here", "target": "/workspace/x"}),
            "not_found",
            "",
        ),
        (
            "upload",
            json!({"machine": m, "source": "/etc/hostname", "target": "relative"}),
            "invalid_input",
            "",
        ),
        (
            "download_files",
            json!({"machine": m, "paths": ["/a/../b"]}),
            "invalid_input",
            "",
        ),
        (
            "download_files",
            json!({"machine": m, "paths": ["/workspace"], "limits": {"max_files": -1}}),
            "invalid_input",
            "invalid_params",
        ),
        (
            "close",
            json!({"machine": 4242}),
            "invalid_input",
            "unknown_machine",
        ),
        ("cancel", json!({}), "invalid_input", "invalid_params"),
        (
            "gc",
            json!({"factory": "one"}),
            "invalid_input",
            "invalid_params",
        ),
        (
            "check_environment",
            json!({"factory": f, "spec": sim_spec(), "requirements": {"semantics": "x"}}),
            "invalid_input",
            "invalid_params",
        ),
    ];
    for (i, (method, params, kind, protocol)) in bad_params.into_iter().enumerate() {
        let a = s.call(i as u64 + 100, method, params.clone());
        assert_eq!(error_kind(&a), (kind, protocol), "{method} {params}: {a}");
        assert!(a["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    }
    // A duplicate id while the first is in flight.
    s.send(
        "dup",
        "run",
        json!({"machine": m, "command": shell("while :; do :; done")}),
    );
    let a = s.call(
        "dup",
        "run",
        json!({"machine": m, "command": shell("true")}),
    );
    assert_eq!(error_kind(&a), ("invalid_input", "duplicate_id"), "{a}");
    s.ok("c", "cancel", json!({"id": "dup"}));
    assert_eq!(error_kind(&s.answer("dup")).0, "cancelled");
    // The server still works.
    let r = s.ok(
        "last",
        "run",
        json!({"machine": m, "command": shell("echo alive")}),
    );
    assert_eq!(unb64(&r["stdout"]), b"alive\n");
    assert!(s.finish().success());
}

#[tokio::test]
async fn a_line_over_the_limit_is_refused_and_skipped() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let (mut client, server_side) = tokio::io::duplex(1 << 16);
    let (server_read, server_write) = tokio::io::split(server_side);
    let options = shellbox::serve::ServeOptions {
        max_line_bytes: 100,
        ..Default::default()
    };
    let server = tokio::spawn(shellbox::serve::serve_with(
        server_read,
        server_write,
        std::future::pending(),
        options,
    ));
    let long = format!("{{\"id\": 1, \"method\": \"factory\", \"params\": {{\"backend\": \"sim\", \"pad\": \"{}\"}}}}\n", "x".repeat(500));
    client.write_all(long.as_bytes()).await.unwrap();
    client
        .write_all(b"{\"id\": 2, \"method\": \"factory\", \"params\": {\"backend\": \"sim\"}}\n")
        .await
        .unwrap();
    let (read, mut write) = tokio::io::split(client);
    let mut lines = tokio::io::BufReader::new(read).lines();
    let first: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(first["id"], Value::Null);
    assert_eq!(
        error_kind(&first),
        ("invalid_input", "line_too_long"),
        "{first}"
    );
    let second: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(second["id"], 2);
    assert_eq!(second["result"]["backend"], "sim");
    write.shutdown().await.unwrap();
    assert_eq!(server.await.unwrap(), 0);
}

#[test]
fn end_of_input_cancels_requests_in_flight_on_sim() {
    let mut s = Server::start(None);
    let f = s.factory("sim");
    let m = s.create(&f, sim_spec());
    s.send(
        "busy",
        "run",
        json!({"machine": m, "command": shell("while :; do :; done")}),
    );
    std::thread::sleep(Duration::from_millis(100));
    drop(s.stdin.take());
    let a = s.answer("busy");
    assert_eq!(error_kind(&a).0, "cancelled", "{a}");
    assert!(wait_bounded(&mut s.child).success());
}

#[test]
fn local_cancel_kills_the_command() {
    if !local_available("local_cancel_kills_the_command") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut s = Server::start(Some(tmp.path()));
    let f = s.factory("local");
    let m = s.create(&f, host_spec());
    let needle = "sleep 731.25";
    s.send(
        "sleep",
        "run",
        json!({"machine": m, "command": shell(&format!("echo up >/tmp/up; {needle}"))}),
    );
    wait_for_process(needle);
    assert_eq!(
        s.ok("c", "cancel", json!({"id": "sleep"})),
        json!({"cancelled": true})
    );
    assert_eq!(error_kind(&s.answer("sleep")).0, "cancelled");
    assert_no_process(needle);
    // The machine goes on; the file written before the cancel is there.
    let r = s.ok(
        "after",
        "run",
        json!({"machine": m, "command": shell("cat /tmp/up")}),
    );
    assert_eq!(unb64(&r["stdout"]), b"up\n");
    assert!(s.finish().success());
    assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
}

#[test]
fn local_requests_on_one_machine_run_concurrently_and_answer_out_of_order() {
    if !local_available("local_requests_on_one_machine_run_concurrently_and_answer_out_of_order") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut s = Server::start(Some(tmp.path()));
    let f = s.factory("local");
    let m = s.create(&f, host_spec());
    // The slow command waits for a file that a third request, sent only after the fast
    // one (sent after the slow one) was answered, creates: so the answers' order is fixed.
    s.send(
        "slow",
        "run",
        json!({"machine": m, "command": {"argv": ["sh", "-c", "while [ ! -e /tmp/go ]; do sleep 0.05; done; echo slow"], "timeout": 20.0}}),
    );
    s.send(
        "fast",
        "run",
        json!({"machine": m, "command": shell("echo fast")}),
    );
    let first = s.next_line();
    assert_eq!(first["id"], "fast", "{first}");
    assert_eq!(unb64(&first["result"]["stdout"]), b"fast\n");
    let go = s.ok(
        "go",
        "run",
        json!({"machine": m, "command": shell("touch /tmp/go")}),
    );
    assert_eq!(go["exit_code"], 0, "{go}");
    let slow = s.answer("slow");
    assert_eq!(
        (
            unb64(&slow["result"]["stdout"]),
            slow["result"]["reason"].clone()
        ),
        (b"slow\n".to_vec(), json!("exited")),
        "{slow}"
    );
    assert!(s.finish().success());
    assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
}

#[test]
fn local_end_of_input_closes_every_machine() {
    if !local_available("local_end_of_input_closes_every_machine") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut s = Server::start(Some(tmp.path()));
    let f = s.factory("local");
    let machines: Vec<Value> = (0..3).map(|_| s.create(&f, host_spec())).collect();
    assert_eq!(machine_roots(tmp.path()).len(), 3);
    // One machine is closed by the client, one ran a command, one runs a command when the
    // input ends.
    s.ok("close", "close", json!({"machine": machines[0]}));
    s.ok(
        "done",
        "run",
        json!({"machine": machines[1], "command": shell("echo data >/tmp/file")}),
    );
    let needle = "sleep 734.5";
    s.send(
        "fg",
        "run",
        json!({"machine": machines[2], "command": shell(needle)}),
    );
    wait_for_process(needle);
    // gc keeps the directories of a live owner (this server): two machine roots, the
    // factory's shared /etc and its root skeleton layer.
    let report = s.ok("gc", "gc", json!({"factory": f}));
    assert_eq!(report["kept"], 4, "{report}");
    assert_eq!(report["removed"], json!([]), "{report}");
    let status = s.finish();
    assert!(status.success(), "{status:?}");
    assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
    assert_no_process(needle);
}

#[test]
fn local_sigterm_closes_every_machine() {
    if !local_available("local_sigterm_closes_every_machine") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut s = Server::start(Some(tmp.path()));
    let f = s.factory("local");
    let m = s.create(&f, host_spec());
    s.send(
        "fg",
        "run",
        json!({"machine": m, "command": shell("sleep 735.5")}),
    );
    wait_for_process("sleep 735.5");
    let pid = s.child.id() as i32;
    // SAFETY-free: plain kill(2) on our own child.
    let rc = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(rc.success());
    let status = wait_bounded(&mut s.child);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!((status.code(), status.signal()), (Some(128 + 15), None));
    assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
    assert_no_process("sleep 735.5");
}

/// The persistent shell methods on the simulator's session: state across calls, `write`
/// unsupported, malformed parameters refused (docker's session: `docker_shell_session`).
#[test]
fn shell_sessions() {
    let mut s = Server::start(None);
    let f = s.factory("sim");
    let m = s.create(&f, sim_spec());
    // The simulator's session is non-interactive (issue 11): execute runs to completion,
    // state persists across calls, write is unsupported.
    let r = s.ok(1, "open_shell", json!({"machine": m}));
    assert_eq!(r, json!({"interactive": false}));
    let r = s.ok(
        2,
        "execute",
        json!({"machine": m, "command": "cd /tmp; x=1", "wait": 10.0}),
    );
    assert_eq!(
        (&r["status"], &r["exit_code"]),
        (&json!("completed"), &json!(0)),
        "{r}"
    );
    let r = s.ok(
        3,
        "execute",
        json!({"machine": m, "command": "echo $x $PWD", "wait": 10.0}),
    );
    assert_eq!(unb64(&r["output"]), b"1 /tmp\n", "{r}");
    let r = s.call(4, "write", json!({"machine": m, "data": b64(b"typed\n")}));
    assert_eq!(error_kind(&r).0, "unsupported", "{r}");
    let r = s.call(9, "write", json!({"machine": m, "data": "%%"}));
    assert_eq!(error_kind(&r).0, "invalid_input", "{r}");
    let r = s.call(
        10,
        "execute",
        json!({"machine": m, "command": "true", "wait": -1.0}),
    );
    assert_eq!(error_kind(&r).0, "invalid_input", "{r}");
    assert!(s.finish().success());
}

/// `snapshot`, `create_from`, `fork` and `delete_snapshot` (issue 15) on sim: forks see the
/// files at snapshot time and not the source's later writes; a deleted snapshot answers
/// `closed` and its forks keep working; unknown handles are `invalid_input`; on local (no
/// snapshots) `snapshot` is `unsupported`.
#[test]
fn snapshots_and_forks() {
    let mut s = Server::start(None);
    let f = s.factory("sim");
    let m = s.create(&f, sim_spec());
    let r = s.ok(
        1,
        "run",
        json!({"machine": m, "command": shell("echo before > /tmp/f")}),
    );
    assert_eq!(r["exit_code"], json!(0), "{r}");
    let snap = s.ok(2, "snapshot", json!({"machine": m}))["snapshot"].clone();
    s.ok(
        3,
        "run",
        json!({"machine": m, "command": shell("echo after > /tmp/f")}),
    );
    let a = s.ok(
        4,
        "create_from",
        json!({"factory": f, "snapshot": snap, "spec": sim_spec()}),
    )["machine"]
        .clone();
    let r = s.ok(
        5,
        "run",
        json!({"machine": a, "command": shell("cat /tmp/f")}),
    );
    assert_eq!(unb64(&r["stdout"]), b"before\n", "{r}");
    let b = s.ok(
        6,
        "fork",
        json!({"factory": f, "machine": m, "spec": sim_spec()}),
    )["machine"]
        .clone();
    let r = s.ok(
        7,
        "run",
        json!({"machine": b, "command": shell("cat /tmp/f")}),
    );
    assert_eq!(unb64(&r["stdout"]), b"after\n", "{r}");
    s.ok(8, "delete_snapshot", json!({"snapshot": snap}));
    s.ok(9, "delete_snapshot", json!({"snapshot": snap}));
    let r = s.call(
        10,
        "create_from",
        json!({"factory": f, "snapshot": snap, "spec": sim_spec()}),
    );
    assert_eq!(error_kind(&r).0, "closed", "{r}");
    let r = s.ok(
        11,
        "run",
        json!({"machine": a, "command": shell("cat /tmp/f")}),
    );
    assert_eq!(unb64(&r["stdout"]), b"before\n", "{r}");
    let r = s.call(12, "delete_snapshot", json!({"snapshot": 999}));
    assert_eq!(error_kind(&r), ("invalid_input", "unknown_snapshot"), "{r}");
    let r = s.call(
        13,
        "create_from",
        json!({"factory": f, "snapshot": 999, "spec": sim_spec()}),
    );
    assert_eq!(error_kind(&r), ("invalid_input", "unknown_snapshot"), "{r}");
    let r = s.call(14, "snapshot", json!({"machine": 999}));
    assert_eq!(error_kind(&r), ("invalid_input", "unknown_machine"), "{r}");
    let r = s.call(15, "snapshot", json!({"machine": m, "extra": 1}));
    assert_eq!(error_kind(&r).0, "invalid_input", "{r}");
    if local_available("snapshots_and_forks") {
        let lf = s.factory("local");
        let lm = s.create(&lf, host_spec());
        let r = s.call(16, "snapshot", json!({"machine": lm}));
        // Local takes snapshots in a root host process (overlayfs layers), else refuses.
        let local_snap = if nix::unistd::geteuid().is_root() {
            Some(r["result"]["snapshot"].clone())
        } else {
            assert_eq!(error_kind(&r).0, "unsupported", "{r}");
            None
        };
        // A sim snapshot given to the local factory is another backend's, and the other way.
        let snap = s.ok(17, "snapshot", json!({"machine": m}))["snapshot"].clone();
        let r = s.call(
            18,
            "create_from",
            json!({"factory": lf, "snapshot": snap, "spec": host_spec()}),
        );
        assert_eq!(error_kind(&r).0, "unsupported", "{r}");
        if let Some(local_snap) = local_snap {
            let r = s.call(
                19,
                "create_from",
                json!({"factory": f, "snapshot": local_snap, "spec": sim_spec()}),
            );
            assert_eq!(error_kind(&r).0, "unsupported", "{r}");
            let fork = s.ok(
                20,
                "create_from",
                json!({"factory": lf, "snapshot": local_snap, "spec": host_spec()}),
            )["machine"]
                .clone();
            s.ok(21, "close", json!({"machine": fork}));
        }
    }
    assert!(s.finish().success());
}

#[cfg(feature = "docker")]
#[test]
fn docker_shell_session() {
    let test = "docker_shell_session";
    let Some(image) = docker_image(test) else {
        return;
    };
    let mut s = Server::start(None);
    let f = s.factory("docker");
    let m = s.create(
        &f,
        json!({"source": {"kind": "docker", "reference": image}}),
    );
    let r = s.ok(1, "open_shell", json!({"machine": m}));
    assert_eq!(r, json!({"interactive": true}));
    let r = s.ok(
        2,
        "execute",
        json!({"machine": m, "command": "cd /tmp; export A=kept", "wait": 10.0}),
    );
    assert_eq!(
        (r["status"].clone(), r["exit_code"].clone()),
        (json!("completed"), json!(0)),
        "{r}"
    );
    let r = s.ok(
        3,
        "execute",
        json!({"machine": m, "command": "pwd; echo $A", "wait": 10.0}),
    );
    let text = String::from_utf8_lossy(&unb64(&r["output"])).replace('\r', "");
    assert_eq!(text, "/tmp\nkept\n", "{r}");
    let r = s.ok(
        4,
        "execute",
        json!({"machine": m, "command": "read -r v; printf 'read=%s' \"$v\"", "wait": 0.3}),
    );
    assert_eq!(r["status"], "running", "{r}");
    s.ok(5, "write", json!({"machine": m, "data": b64(b"input\n")}));
    let r = s.ok(6, "read", json!({"machine": m, "wait": 10.0}));
    let text = String::from_utf8_lossy(&unb64(&r["output"])).into_owned();
    assert!(text.contains("read=input"), "{r}");
    assert_eq!(r["status"], "completed", "{r}");
    let r = s.ok(
        7,
        "execute",
        json!({"machine": m, "command": "sleep 30", "wait": 0.3}),
    );
    assert_eq!(r["status"], "running", "{r}");
    s.ok(8, "interrupt", json!({"machine": m}));
    let r = s.ok(9, "read", json!({"machine": m, "wait": 10.0}));
    assert_eq!(
        (r["status"].clone(), r["exit_code"].clone()),
        (json!("completed"), json!(130)),
        "{r}"
    );
    let r = s.call(10, "read", json!({"machine": m, "wait": 0.0}));
    assert_eq!(error_kind(&r).0, "shell_state", "{r}");
    s.ok(11, "close_shell", json!({"machine": m}));
    assert!(s.finish().success());
}

/// The busybox test image (imported if missing), or `None` after one SKIP line.
#[cfg(feature = "docker")]
fn docker_image(test: &str) -> Option<&'static str> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    if std::os::unix::net::UnixStream::connect("/var/run/docker.sock").is_err()
        && std::env::var("DOCKER_HOST").is_err()
    {
        eprintln!("SKIP {test}: /var/run/docker.sock is unreachable and DOCKER_HOST is unset");
        return None;
    }
    let factory = match rt.block_on(shellbox::docker::DockerMachineFactory::connect()) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("SKIP {test}: {e}");
            return None;
        }
    };
    let image = shellbox::docker::BUSYBOX_TEST_IMAGE;
    if let Err(e) = rt.block_on(shellbox::docker::ensure_busybox_image(
        factory.docker(),
        image,
    )) {
        if e.is_unsupported() {
            eprintln!("SKIP {test}: {e}");
            return None;
        }
        panic!("{test}: cannot import the busybox test image: {e}");
    }
    Some(image)
}

#[cfg(feature = "docker")]
#[test]
fn docker_end_of_input_removes_every_container() {
    let Some(image) = docker_image("docker_end_of_input_removes_every_container") else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let factory = rt
        .block_on(shellbox::docker::DockerMachineFactory::connect())
        .unwrap();
    let mut s = Server::start(None);
    let f = s.factory("docker");
    let spec = json!({"source": {"kind": "docker", "reference": image}});
    let m1 = s.create(&f, spec.clone());
    let _m2 = s.create(&f, spec);
    let r = s.ok(
        1,
        "run",
        json!({"machine": m1, "command": shell("echo hi; exit 3")}),
    );
    assert_eq!(
        (r["exit_code"].clone(), unb64(&r["stdout"])),
        (json!(3), b"hi\n".to_vec())
    );
    let label = shellbox::docker::labels::OWNER_PID;
    let pid = s.child.id().to_string();
    let count = |docker: &shellbox::docker::bollard::Docker| {
        let options = shellbox::docker::bollard::query_parameters::ListContainersOptions {
            all: true,
            filters: Some(std::collections::HashMap::from([(
                "label".to_string(),
                vec![format!("{label}={pid}")],
            )])),
            ..Default::default()
        };
        rt.block_on(docker.list_containers(Some(options)))
            .unwrap()
            .len()
    };
    let before = count(factory.docker());
    assert_eq!(before, 2);
    s.send(
        "fg",
        "run",
        json!({"machine": m1, "command": shell("sleep 600")}),
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(s.finish().success());
    assert_eq!(count(factory.docker()), 0);
}

/// Names in `dir` that start with the bounded download's staging prefix.
fn staging_left(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".shellbox-download-"))
        .collect()
}

/// `download_file` on machine `m`, whose `/tmp/bd/f` holds 100,000 bytes and whose
/// `not_regular` paths exist and are no regular files: exactly `max_bytes` arrives whole and
/// answers its size; one byte more is `download_limit_exceeded` with the old target intact;
/// each of `not_regular` is `unsupported` mentioning "regular file"; a missing source is
/// `not_found`; bad params are `invalid_params`; no staging directory is ever left.
fn check_download_file(s: &mut Server, m: &Value, not_regular: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("out.bin");
    let r = s.ok(
        "df1",
        "download_file",
        json!({"machine": m, "source": "/tmp/bd/f", "target": target, "max_bytes": 100_000}),
    );
    assert_eq!(r, json!({"bytes": 100_000}));
    assert_eq!(std::fs::read(&target).unwrap(), vec![b'x'; 100_000]);

    std::fs::write(&target, b"old").unwrap();
    let r = s.call(
        "df2",
        "download_file",
        json!({"machine": m, "source": "/tmp/bd/f", "target": target, "max_bytes": 99_999}),
    );
    assert_eq!(error_kind(&r), ("download_limit_exceeded", ""), "{r}");
    assert_eq!(std::fs::read(&target).unwrap(), b"old");
    assert_eq!(staging_left(dir.path()), Vec::<String>::new());

    for bad in not_regular {
        let r = s.call(
            "df3",
            "download_file",
            json!({"machine": m, "source": bad, "target": target, "max_bytes": 1 << 20}),
        );
        assert_eq!(error_kind(&r), ("unsupported", ""), "{bad}: {r}");
        let message = r["error"]["message"].as_str().unwrap();
        assert!(message.contains("regular file"), "{bad}: {r}");
        assert_eq!(std::fs::read(&target).unwrap(), b"old", "{bad}");
    }
    let r = s.call(
        "df4",
        "download_file",
        json!({"machine": m, "source": "/tmp/bd/missing", "target": target, "max_bytes": 10}),
    );
    assert_eq!(error_kind(&r).0, "not_found", "{r}");
    let r = s.call(
        "df5",
        "download_file",
        json!({"machine": m, "source": "/tmp/bd/f", "target": target}),
    );
    assert_eq!(error_kind(&r), ("invalid_input", "invalid_params"), "{r}");
    let r = s.call(
        "df6",
        "download_file",
        json!({"machine": m, "source": "tmp/bd/f", "target": target, "max_bytes": 10}),
    );
    assert_eq!(error_kind(&r), ("invalid_input", ""), "{r}");
    // A target directory that does not exist: an `io` error, nothing created.
    let r = s.call(
        "df7",
        "download_file",
        json!({"machine": m, "source": "/tmp/bd/f", "target": dir.path().join("no/such"), "max_bytes": 1 << 20}),
    );
    assert_eq!(error_kind(&r).0, "io", "{r}");
    assert_eq!(std::fs::read(&target).unwrap(), b"old");
    assert_eq!(staging_left(dir.path()), Vec::<String>::new());
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["out.bin"], "only the target is there");
}

const DOWNLOAD_SETUP: &str =
    "mkdir -p /tmp/bd/dir && head -c 100000 /dev/zero | tr '\\0' x > /tmp/bd/f && echo ok";

#[test]
fn sim_download_file_is_bounded_and_refuses_what_is_no_regular_file() {
    let mut s = Server::start(None);
    let f = s.factory("sim");
    let m = s.create(&f, sim_spec());
    let r = s.ok(
        1,
        "run",
        json!({"machine": m, "command": shell(DOWNLOAD_SETUP)}),
    );
    assert_eq!(unb64(&r["stdout"]), b"ok\n", "{r}");
    check_download_file(&mut s, &m, &["/tmp/bd/dir", "/dev/zero"]);
    s.ok(2, "close", json!({"machine": m}));
    let r = s.call(
        3,
        "download_file",
        json!({"machine": m, "source": "/tmp/bd/f", "target": "/tmp/never", "max_bytes": 1}),
    );
    assert_eq!(error_kind(&r), ("closed", ""), "{r}");
    assert!(s.finish().success());
}

#[test]
fn local_download_file_is_bounded_and_refuses_a_directory_and_a_fifo() {
    let test = "local_download_file_is_bounded_and_refuses_a_directory_and_a_fifo";
    if !local_available(test) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut s = Server::start(Some(tmp.path()));
    let f = s.factory("local");
    let m = s.create(&f, host_spec());
    let r = s.ok(
        1,
        "run",
        json!({"machine": m, "command": shell(&format!("{DOWNLOAD_SETUP} && mkfifo /tmp/bd/fifo"))}),
    );
    assert_eq!(unb64(&r["stdout"]), b"ok\n", "{r}");
    check_download_file(&mut s, &m, &["/tmp/bd/dir", "/tmp/bd/fifo", "/dev/zero"]);
    assert!(s.finish().success());
    assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
}

/// `packages` sources over serve: the backend judges the tools (create and
/// check_environment alike); the simulator has no Python.
#[test]
fn packages_sources_are_the_backends() {
    let mut backends = vec!["sim"];
    if local_available("packages_sources_are_the_backends") {
        backends.push("local");
    }
    for backend in backends {
        let mut s = Server::start(None);
        let f = s.factory(backend);
        let packages = |tools: &[&str], pypi: Value| json!({"source": {"kind": "packages", "pypi_packages": pypi, "tools": tools}});
        let present = packages(&["sh"], Value::Null);
        let check = |s: &mut Server, spec: &Value| {
            s.call(
                "e",
                "check_environment",
                json!({"factory": f, "spec": spec, "requirements": {}}),
            )
        };
        let a = check(&mut s, &present);
        assert!(a.get("error").is_none(), "{backend}: {a}");
        let m = s.create(&f, present);
        let r = s.ok(1, "run", json!({"machine": m, "command": shell("echo ok")}));
        assert_eq!(unb64(&r["stdout"]), b"ok\n", "{backend}: {r}");
        let missing = packages(&["sh", "shellbox-no-such-tool"], Value::Null);
        for answer in [
            check(&mut s, &missing),
            s.call("c", "create", json!({"factory": f, "spec": missing})),
        ] {
            assert_eq!(error_kind(&answer).0, "unsupported", "{backend}: {answer}");
            let message = answer["error"]["message"].as_str().unwrap();
            assert!(message.contains("shellbox-no-such-tool"), "{message}");
        }
        if backend == "sim" {
            let python = packages(&[], json!([]));
            let answer = s.call("c", "create", json!({"factory": f, "spec": python}));
            assert_eq!(error_kind(&answer).0, "unsupported", "{answer}");
        }
        assert!(s.finish().success());
    }
}

/// The local factory's options over serve are the CLI's: `system_directories`
/// (`read_only`, `copy_on_write`; anything else is invalid input), and the package settings
/// `package_cache`, `python_version`, `python_interpreter`, which a `pypi_packages` spec
/// meets before anything is resolved.
#[test]
fn local_factory_options_reach_the_factory() {
    let test = "local_factory_options_reach_the_factory";
    if !local_available(test) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut s = Server::start(Some(tmp.path()));
    let answer = s.call(
        1,
        "factory",
        json!({"backend": "local", "system_directories": "copy-on-write"}),
    );
    assert_eq!(error_kind(&answer).0, "invalid_input", "{answer}");
    let name = format!("shellbox-serve-cow-{}", std::process::id());
    let write = shell(&format!(
        "echo x > /usr/local/bin/{name} && echo x > /etc/{name} && cat /usr/local/bin/{name}"
    ));
    let f = s.ok(
        2,
        "factory",
        json!({"backend": "local", "system_directories": "read_only"}),
    )["factory"]
        .clone();
    let m = s.create(&f, host_spec());
    let r = s.ok(3, "run", json!({"machine": m, "command": write}));
    assert_ne!(r["exit_code"], 0, "a read-only machine wrote /usr: {r}");
    let answer = s.call(
        4,
        "factory",
        json!({"backend": "local", "system_directories": "copy_on_write"}),
    );
    if answer.get("error").is_some() {
        assert_eq!(error_kind(&answer).0, "sandbox_unavailable", "{answer}");
        let root =
            std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap()) == 0;
        assert!(!root, "{answer}");
        eprintln!(
            "SKIP {test} (copy-on-write part): {}",
            answer["error"]["message"]
        );
    } else {
        let f = answer["result"]["factory"].clone();
        let a = s.create(&f, host_spec());
        let b = s.create(&f, host_spec());
        let r = s.ok(5, "run", json!({"machine": a, "command": write}));
        assert_eq!(unb64(&r["stdout"]), b"x\n", "{r}");
        let r = s.ok(
            6,
            "run",
            json!({"machine": b, "command": shell(&format!("cat /usr/local/bin/{name}"))}),
        );
        assert_ne!(r["exit_code"], 0, "another machine saw the write: {r}");
        assert!(!Path::new("/usr/local/bin").join(&name).exists());
        assert!(!Path::new("/etc").join(&name).exists());
    }
    let cache = tmp.path().join("cache");
    let spec =
        json!({"source": {"kind": "packages", "pypi_packages": ["six==1.17.0"], "tools": []}});
    for (options, needle) in [
        (json!({"python_version": "3.12"}), "3.12"),
        (
            json!({"python_interpreter": "/shellbox-no-such-python"}),
            "/shellbox-no-such-python",
        ),
    ] {
        let mut params = options.clone();
        params["backend"] = json!("local");
        params["package_cache"] = json!(cache.to_str().unwrap());
        let f = s.ok(7, "factory", params)["factory"].clone();
        for answer in [
            s.call(
                8,
                "check_environment",
                json!({"factory": f, "spec": spec, "requirements": {}}),
            ),
            s.call(9, "create", json!({"factory": f, "spec": spec})),
        ] {
            assert_eq!(
                error_kind(&answer).0,
                "invalid_input",
                "{options}: {answer}"
            );
            let message = answer["error"]["message"].as_str().unwrap();
            assert!(message.contains(needle), "{message}");
        }
    }
    assert!(!cache.exists() || std::fs::read_dir(&cache).unwrap().count() == 0);
    assert!(s.finish().success());
    assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
}

/// A real `pypi_packages` environment over serve (uv, a local CPython and PyPI; SKIP lines
/// when missing): `six` is importable through the factory's `python_interpreter` and
/// `package_cache`, and the `python3` tool is found in it.
#[test]
fn local_pypi_packages_over_serve() {
    let test = "local_pypi_packages_over_serve";
    if !std::process::Command::new("uv")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        eprintln!("SKIP {test}: uv is not on PATH (scripts/setup-pyenv)");
        return;
    }
    let Some(python) = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    else {
        eprintln!("SKIP {test}: no python3 interpreter");
        return;
    };
    if !local_available(test) {
        return;
    }
    let cache = tempfile::tempdir().unwrap();
    let mut s = Server::start(None);
    let f = s.ok(
        1,
        "factory",
        json!({"backend": "local", "package_cache": cache.path().to_str().unwrap(),
               "python_interpreter": python}),
    )["factory"]
        .clone();
    let spec = json!({"source": {"kind": "packages", "pypi_packages": ["six==1.17.0"],
                                 "tools": ["python3"]}});
    let answer = s.call(2, "create", json!({"factory": f, "spec": spec}));
    if answer.get("error").is_some() {
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert_eq!(error_kind(&answer).0, "backend", "{answer}");
        eprintln!("SKIP {test}: the environment could not be built here: {message}");
        return;
    }
    let m = answer["result"]["machine"].clone();
    let r = s.ok(
        3,
        "run",
        json!({"machine": m, "command": {"argv": ["python3", "-c", "import six; print(six.__version__)"]}}),
    );
    assert_eq!(unb64(&r["stdout"]), b"1.17.0\n", "{r}");
    assert!(s.finish().success());
}
