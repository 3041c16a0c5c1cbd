//! A structured fuzzer for the serve protocol's request parsing and dispatch
//! (`shellbox::serve::serve_with`, what `shellbox serve --stdio` runs; PROTOCOL.md), on the
//! simulator backend, in process.
//!
//! Each case is one server session: a `factory` and a `create` first, then a batch of
//! generated lines written at once (requests of every method with generated params, valid
//! and not: ids of every JSON type, wrong types, unknown fields, huge and negative numbers,
//! cancels of earlier requests, closes, transfers confined to a temporary directory),
//! byte-level mutations of them, raw garbage (invalid UTF-8, deep nesting, blank and
//! over-long lines), then end of input. Properties:
//! - no panic, and the session ends (end of input cancels what is in flight, closes every
//!   machine, and `serve_with` returns 0) within [`SESSION_LIMIT`]: no hang;
//! - every output line is a JSON object: `id` and exactly one of `result`, `error` or
//!   `event`; an error is `{"kind", "message", "details"}` with a kind PROTOCOL.md lists (and
//!   a listed `details.protocol`), never the `internal error` the server answers when a
//!   request's work panicked; an event belongs to a `run_stream` still in flight;
//! - every non-blank input line gets exactly one answer (result or error), under the id the
//!   protocol says (the request's when it is a string or number, else `null`), and nothing
//!   else is answered;
//! - an unmutated generated request's result has its method's exact wire shape (the `wire`
//!   types, which deny unknown fields), and a `run` of a command whose output is known
//!   (echo, printf, exit) has exactly that output, cut at its `output_limit_bytes` with the
//!   truncation flag set exactly when it was cut.
//!
//! The committed seed corpus `tests/fuzz-corpus/serve/*.jsonl` (one session per file; past
//! edge cases) runs first. `cargo test -p shellbox --test fuzz_serve` runs it for 3 s (seed
//! 1); for an hour: `SHELLBOX_FUZZ_SECS=3600 SHELLBOX_FUZZ_SEED=n cargo test --release -p
//! shellbox --test fuzz_serve -- --nocapture`. A failure prints the seed, the case and
//! writes the session's input to `$TMPDIR/shellbox-fuzz-serve-failure.jsonl`.

#![cfg(all(feature = "serve", feature = "sim"))]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};
use shellbox::serve::{serve_with, wire, ServeOptions};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

/// `run`s whose output the oracle knew and compared (printed at the end).
static KNOWN_OUTPUT_CHECKED: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// The longest a session may take from its first line to the server's return.
const SESSION_LIMIT: Duration = Duration::from_secs(120);
/// How long the batch may take to be answered before end of input cancels the rest.
const ANSWER_WAIT: Duration = Duration::from_secs(10);
/// The server's line limit in these sessions (small, so over-long lines are cheap).
const MAX_LINE_BYTES: usize = 16 << 10;

const KINDS: &[&str] = &[
    "unsupported",
    "invalid_input",
    "closed",
    "not_found",
    "shell_state",
    "limit_reached",
    "transfer",
    "download_limit_exceeded",
    "terminated",
    "sandbox_unavailable",
    "timed_out",
    "backend",
    "io",
    "cancelled",
];
const PROTOCOL_DETAILS: &[&str] = &[
    "bad_json",
    "line_too_long",
    "bad_request",
    "unknown_method",
    "invalid_params",
    "unknown_factory",
    "unknown_machine",
    "duplicate_id",
    "cancelled",
    "encode",
];

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

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// A JSON number or other value where the protocol wants a count, handle or duration.
fn odd_number(rng: &mut Rng) -> Value {
    match rng.below(14) {
        0 => json!(0),
        1 => json!(1),
        2 => json!(2),
        3 => json!(-1),
        4 => json!(u64::MAX),
        5 => json!(i64::MIN),
        6 => json!(0.5),
        7 => json!(1e308),
        8 => json!(-0.0),
        9 => json!(1u64 << 44),
        10 => json!("1"),
        11 => Value::Null,
        12 => json!(1e-12),
        _ => json!(rng.next() >> rng.below(64)),
    }
}

/// A small count of seconds: waits stay short, so the batch is answered.
fn seconds(rng: &mut Rng) -> Value {
    match rng.below(8) {
        0 => Value::Null,
        1 => json!(0),
        2 => json!(-1.0),
        3 => json!(1e-9),
        4 => json!(f64::MAX),
        5 => json!("1"),
        _ => json!(rng.below(500) as f64 / 1000.0),
    }
}

/// A request id: usually a fresh unique one, sometimes any JSON value.
fn gen_id(rng: &mut Rng, n: usize) -> Value {
    match rng.below(20) {
        0 => Value::Null,
        1 => json!(true),
        2 => json!({"a": 1}),
        3 => json!([n]),
        4 => json!(-(n as i64) - 1),
        5 => json!(n as f64 + 0.5),
        6 => json!(format!("é{n}\u{0}")),
        7..=11 => json!(1_000_000 + n as u64),
        _ => json!(format!("q{n:06}")),
    }
}

/// What a generated request's answer must be, beyond the general rules.
#[derive(Debug, Clone)]
enum Expect {
    /// Only the general rules (mutated, odd or unpredictable).
    Any,
    /// A result of this method's shape, or any error.
    Shape(&'static str),
    /// A `run` of a command with known output: this whole stdout (before the limit) and
    /// exit code, when it is a result of an exited command.
    Output {
        stdout: Vec<u8>,
        exit_code: i32,
        limit: u64,
    },
}

struct Session {
    /// The request lines after the prologue.
    lines: Vec<Vec<u8>>,
    /// What each unmutated generated request expects, by its id's JSON text.
    expect: HashMap<String, Expect>,
}

fn gen_spec(rng: &mut Rng) -> Value {
    let mut spec = serde_json::Map::new();
    spec.insert(
        "source".into(),
        match rng.below(10) {
            0 => json!({"kind": "host"}),
            1 => json!({"kind": "docker", "reference": "none:latest"}),
            2 => json!({"kind": "nope"}),
            3 => json!("sim"),
            _ => json!({"kind": "sim"}),
        },
    );
    for (field, chance) in [
        ("memory_mb", 20),
        ("storage_mb", 20),
        ("pids_limit", 10),
        ("cpus", 5),
        ("gpus", 5),
        ("startup_timeout", 10),
    ] {
        if rng.chance(chance) {
            spec.insert(field.into(), odd_number(rng));
        }
    }
    if rng.chance(15) {
        spec.insert(
            "workdir".into(),
            json!(rng.pick(&["/w", "rel", "/a/../b", "", "/proc", "/tmp/é", "/x\u{0}"])),
        );
    }
    if rng.chance(10) {
        spec.insert(
            "env".into(),
            json!({rng.pick(&["A", "1X", "", "A=B", "PATH"]): rng.pick(&["v", "a\u{0}b", ""])}),
        );
    }
    if rng.chance(5) {
        spec.insert("network".into(), json!(rng.pick(&["allow", "deny", "x"])));
    }
    if rng.chance(3) {
        spec.insert("extra".into(), json!(1));
    }
    Value::Object(spec)
}

/// A command, and for a known-output one its whole stdout, exit code and output limit.
fn gen_command(rng: &mut Rng) -> (Value, Option<(Vec<u8>, i32, u64)>) {
    let word = rng
        .pick(&["a", "hello world", "é€", "", "-n", "%s", "x\ty"])
        .to_string();
    let (argv, known): (Vec<String>, Option<(Vec<u8>, i32)>) = match rng.below(8) {
        0 => (
            vec!["echo".into(), word.clone()],
            (!word.starts_with('-')).then(|| (format!("{word}\n").into_bytes(), 0)),
        ),
        1 => (
            vec!["printf".into(), "%s".into(), word.clone()],
            Some((word.clone().into_bytes(), 0)),
        ),
        2 => {
            let k = rng.below(256) as i32;
            (
                vec!["sh".into(), "-c".into(), format!("exit {k}")],
                Some((Vec::new(), k)),
            )
        }
        3 => {
            let n = rng.below(3000);
            (
                vec!["sh".into(), "-c".into(), format!("head -c {n} /dev/zero")],
                Some((vec![0; n], 0)),
            )
        }
        4 => (
            vec![
                "sh".into(),
                "-c".into(),
                rng.pick(&[
                    "while :; do :; done",
                    "cat",
                    "sleep 0.2",
                    "cat /dev/zero",
                    "echo x >&2; exit 3",
                    "seq 100000",
                    "ls -R /",
                    "kill -9 $$",
                ])
                .into(),
            ],
            None,
        ),
        5 => (vec![], None),
        6 => (vec!["nope-program".into()], None),
        _ => (vec!["cat".into()], None),
    };
    let mut c = serde_json::Map::new();
    c.insert("argv".into(), json!(argv));
    let mut known = known;
    if rng.chance(30) || known.is_none() {
        // Always bounded: the loops above stop at their timeout.
        c.insert(
            "timeout".into(),
            json!(0.05 + rng.below(300) as f64 / 1000.0),
        );
    }
    let limit = if rng.chance(30) {
        let l = [0u64, 1, 5, 100, 1 << 20][rng.below(5)];
        c.insert("output_limit_bytes".into(), json!(l));
        l
    } else {
        1 << 20
    };
    if rng.chance(15) {
        let stdin = rng.pick(&["aGVsbG8=", "", "!!", "aGVsbG8"]);
        c.insert("stdin".into(), json!(stdin));
        if argv.first().is_some_and(|a| a == "cat") && stdin == "aGVsbG8=" {
            known = Some((b"hello".to_vec(), 0));
        }
    }
    if rng.chance(10) {
        c.insert(
            "cwd".into(),
            json!(rng.pick(&["/", "rel", "/nope", "/tmp"])),
        );
        known = None;
    }
    if rng.chance(10) {
        c.insert("env".into(), json!({"A": "b"}));
    }
    if rng.chance(5) {
        c.insert(
            "user".into(),
            json!(rng.pick(&["root", "0", "nobody", "x"])),
        );
        known = None;
    }
    if rng.chance(3) {
        c.insert("bogus".into(), json!(1));
        known = None;
    }
    (
        Value::Object(c),
        known.map(|(out, code)| (out, code, limit)),
    )
}

/// One generated request: (method, params, what its answer must be).
fn gen_request(rng: &mut Rng, host_dir: &str, earlier: &[Value]) -> (String, Value, Expect) {
    let machine = |rng: &mut Rng| -> Value {
        if rng.chance(85) {
            json!(1 + rng.below(3))
        } else {
            odd_number(rng)
        }
    };
    let shape = |m: &'static str| Expect::Shape(m);
    let r = rng.below(100);
    let (method, params, expect) = match r {
        0..=34 => {
            let (command, known) = gen_command(rng);
            let stream = r >= 30;
            let params = json!({"machine": machine(rng), "command": command});
            let expect = match known {
                Some((stdout, exit_code, limit)) if !stream => Expect::Output {
                    stdout,
                    exit_code,
                    limit,
                },
                _ if stream => shape("run_stream"),
                _ => shape("run"),
            };
            (if stream { "run_stream" } else { "run" }, params, expect)
        }
        35..=39 => {
            let id = if earlier.is_empty() || rng.chance(20) {
                odd_number(rng)
            } else {
                earlier[rng.below(earlier.len())].clone()
            };
            ("cancel", json!({"id": id}), shape("cancel"))
        }
        40..=46 => (
            "create",
            json!({"factory": if rng.chance(90) { json!(1) } else { odd_number(rng) },
                   "spec": gen_spec(rng)}),
            shape("create"),
        ),
        47..=49 => ("close", json!({"machine": machine(rng)}), shape("close")),
        50..=55 => {
            let mut limits = serde_json::Map::new();
            for f in ["max_files", "max_bytes", "max_file_bytes"] {
                if rng.chance(30) {
                    limits.insert(f.into(), odd_number(rng));
                }
            }
            if rng.chance(30) {
                limits.insert("timeout".into(), seconds(rng));
            }
            let paths: Vec<&str> = (0..rng.below(4))
                .map(|_| rng.pick(&["/", "/tmp", "/workspace", "rel", "/nope", "/dev/zero"]))
                .collect();
            (
                "download_files",
                json!({"machine": machine(rng), "paths": paths, "limits": limits}),
                shape("download_files"),
            )
        }
        56..=59 => {
            // Host paths only inside this session's directory.
            let host = format!("{host_dir}/{}", rng.pick(&["in", "in/f", "out", "nope"]));
            let guest = rng.pick(&["/workspace/x", "/tmp", "rel", "/", "/a/../b"]);
            if rng.chance(25) {
                (
                    "download_file",
                    json!({"machine": machine(rng), "source": guest, "target": host, "max_bytes": odd_number(rng)}),
                    shape("download_file"),
                )
            } else if rng.chance(50) {
                (
                    "upload",
                    json!({"machine": machine(rng), "source": host, "target": guest}),
                    shape("upload"),
                )
            } else {
                (
                    "download",
                    json!({"machine": machine(rng), "source": guest, "target": host}),
                    shape("download"),
                )
            }
        }
        60..=69 => {
            let m = machine(rng);
            match rng.below(6) {
                0 => ("open_shell", json!({"machine": m}), shape("open_shell")),
                1 => (
                    "execute",
                    json!({"machine": m, "command": "echo hi", "wait": seconds(rng)}),
                    shape("execute"),
                ),
                2 => (
                    "read",
                    json!({"machine": m, "wait": seconds(rng)}),
                    shape("read"),
                ),
                3 => (
                    "write",
                    json!({"machine": m, "data": rng.pick(&["aGk=", "!"])}),
                    shape("write"),
                ),
                4 => ("interrupt", json!({"machine": m}), shape("interrupt")),
                _ => ("close_shell", json!({"machine": m}), shape("close_shell")),
            }
        }
        70..=74 => {
            let mut o = serde_json::Map::new();
            o.insert(
                "backend".into(),
                json!(rng.pick(&["sim", "sim", "sim", "docker", "nope"])),
            );
            for f in ["cpu_fuel", "disk_bytes", "output_bytes", "memory_bytes"] {
                if rng.chance(30) {
                    o.insert(f.into(), odd_number(rng));
                }
            }
            ("factory", Value::Object(o), shape("factory"))
        }
        75..=77 => (
            "check_environment",
            json!({"factory": 1, "spec": gen_spec(rng),
                   "requirements": {"command_semantics": rng.pick(&["linux_process", "shell_simulator"])}}),
            shape("check_environment"),
        ),
        78..=79 => ("gc", json!({"factory": 1}), shape("gc")),
        80..=84 => {
            // Params of the wrong shape for a real method.
            let method = rng.pick(&["run", "create", "close", "cancel", "read", "factory"]);
            let params = match rng.below(5) {
                0 => json!([1, 2]),
                1 => json!("x"),
                2 => json!({"machine": "1"}),
                3 => json!({"extra": true}),
                _ => Value::Null,
            };
            (method, params, Expect::Any)
        }
        _ => (
            rng.pick(&["", "Run", "nope", "run ", "__proto__", "é"]),
            json!({}),
            Expect::Any,
        ),
    };
    (method.to_string(), params, expect)
}

/// A garbage line: not a request.
fn gen_garbage(rng: &mut Rng) -> Vec<u8> {
    match rng.below(9) {
        0 => (0..rng.below(64)).map(|_| rng.next() as u8).filter(|&b| b != b'\n').collect(),
        1 => {
            let depth = [10, 127, 128, 129, 5000][rng.below(5)];
            let mut s = "[".repeat(depth);
            s.push_str(&"]".repeat(if rng.chance(50) { depth } else { 0 }));
            s.into_bytes()
        }
        2 => {
            let depth = [100, 200, 3000][rng.below(3)];
            format!("{{\"id\": 5, \"method\": \"run\", \"params\": {}1{}}}", "[".repeat(depth), "]".repeat(depth)).into_bytes()
        }
        3 => rng.pick(&["", " ", "\t", "\r", "\u{c}", "  \r\t"]).as_bytes().to_vec(),
        4 => vec![b'x'; MAX_LINE_BYTES + rng.below(3)],
        5 => {
            // Exactly at the limit: still read as a line (bad JSON).
            vec![b'y'; MAX_LINE_BYTES - rng.below(2)]
        }
        6 => rng
            .pick(&[
                "null",
                "1",
                "\"run\"",
                "{}",
                "{\"id\": 1}",
                "{\"method\": \"run\"}",
                "{\"id\": 1e400, \"method\": \"run\"}",
                "{\"id\": 7, \"id\": 8, \"method\": \"gc\"}",
                "{\"id\": 9, \"method\": \"gc\", \"params\": {\"factory\": 1}, \"x\": 1}",
                "{\"id\": \"\\ud800\", \"method\": \"gc\"}",
                "{\"id\": 10, \"method\": \"gc\", \"params\": {\"factory\": 1}} trailing",
                "\u{feff}{\"id\": 11, \"method\": \"gc\"}",
                "{\"id\": 12, \"method\": \"gc\", \"params\": {\"factory\": 1}}\r",
            ])
            .as_bytes()
            .to_vec(),
        7 => b"{\"id\": 13, \"method\": \"run\", \"params\": {\"machine\": 1, \"command\": {\"argv\": [\"\xff\xfe\"]}}}".to_vec(),
        _ => {
            let mut v = b"{\"id\": \"".to_vec();
            v.extend((0..rng.below(8)).map(|_| 0x80 + rng.below(64) as u8));
            v.extend_from_slice(b"\", \"method\": \"gc\"}");
            v
        }
    }
}

fn mutate(rng: &mut Rng, line: &mut Vec<u8>) {
    for _ in 0..1 + rng.below(4) {
        if line.is_empty() {
            return;
        }
        let i = rng.below(line.len());
        match rng.below(4) {
            0 => {
                line.remove(i);
            }
            1 => line.insert(
                i,
                *b"{}[]\",:0-9e.\\ntu\xff"
                    .get(rng.below(18))
                    .unwrap_or(&b'x'),
            ),
            2 => line[i] = rng.next() as u8,
            _ => {
                let j = rng.below(line.len());
                line.swap(i, j);
            }
        }
    }
}

fn gen_session(rng: &mut Rng, case: usize, host_dir: &str) -> Session {
    let mut lines = Vec::new();
    let mut expect = HashMap::new();
    let mut ids: Vec<Value> = Vec::new();
    // A machine created with its own `PATH` may not find `sh`: known output is then unknown.
    // Requests run concurrently, so any such create makes every run of the session unknown.
    let mut path_set = false;
    for k in 0..1 + rng.below(24) {
        let n = case * 100 + k;
        if rng.chance(12) {
            lines.push(gen_garbage(rng));
            continue;
        }
        let (method, params, e) = gen_request(rng, host_dir, &ids);
        path_set |= method == "create" && params["spec"]["env"].get("PATH").is_some();
        let id = gen_id(rng, n);
        let mut envelope = serde_json::Map::new();
        if rng.chance(97) {
            envelope.insert("id".into(), id.clone());
        }
        envelope.insert("method".into(), json!(method));
        if !(params.as_object().is_some_and(|m| m.is_empty()) && rng.chance(50)) {
            envelope.insert("params".into(), params);
        }
        let mut line = Value::Object(envelope).to_string().into_bytes();
        // Transfers name host paths: never mutated, so they stay in this session's directory.
        let transfer = method == "upload" || method == "download";
        if !transfer && rng.chance(15) {
            mutate(rng, &mut line);
        } else if matches!(id, Value::String(_) | Value::Number(_)) {
            expect.insert(id.to_string(), e);
        }
        ids.push(id);
        lines.push(line);
    }
    if path_set {
        for e in expect.values_mut() {
            if matches!(e, Expect::Output { .. }) {
                *e = Expect::Shape("run");
            }
        }
    }
    Session { lines, expect }
}

/// The id the protocol answers a line under, or `None` for a line with no answer.
fn answer_id(line: &[u8]) -> Option<Value> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    if line.len() > MAX_LINE_BYTES {
        return Some(Value::Null);
    }
    let Ok(value) = serde_json::from_slice::<Value>(line) else {
        return Some(Value::Null);
    };
    Some(match value.get("id") {
        Some(id @ (Value::String(_) | Value::Number(_))) => id.clone(),
        _ => Value::Null,
    })
}

fn check_shape(method: &str, result: &Value) -> Result<(), String> {
    fn is<T: serde::de::DeserializeOwned>(v: &Value) -> Result<(), String> {
        serde_json::from_value::<T>(v.clone())
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
    match method {
        "factory" => is::<wire::FactoryResult>(result),
        "create" => is::<wire::CreateResult>(result),
        "run" => is::<wire::WireResult>(result),
        "run_stream" => is::<wire::WireExitStatus>(result),
        "cancel" => is::<wire::CancelResult>(result),
        "download_files" => is::<wire::DownloadFilesResult>(result),
        "download_file" => is::<wire::DownloadFileResult>(result),
        "open_shell" => is::<wire::OpenShellResult>(result),
        "execute" | "read" => is::<wire::WireShellUpdate>(result),
        "gc" => is::<wire::GcResult>(result),
        _ => is::<wire::Empty>(result),
    }
    .map_err(|e| format!("{method} result {result}: {e}"))
}

fn b64(v: &Value) -> Result<Vec<u8>, String> {
    let s = v.as_str().ok_or_else(|| format!("not base64 text: {v}"))?;
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| format!("bad base64 {s:?}: {e}"))
}

/// Checks every output line and the one-answer-per-line rule.
fn check_answers(
    input: &[Vec<u8>],
    output: &[Value],
    expect: &HashMap<String, Expect>,
) -> Result<(), String> {
    let mut want: BTreeMap<String, usize> = BTreeMap::new();
    for line in input {
        for part in line.split(|&b| b == b'\n') {
            if let Some(id) = answer_id(part) {
                *want.entry(id.to_string()).or_default() += 1;
            }
        }
    }
    // An id several lines carry (a mutation made it) has no expectation beyond the count.
    let expect: HashMap<&String, &Expect> = expect
        .iter()
        .filter(|(id, _)| want.get(*id).copied().unwrap_or(0) == 1)
        .collect();
    let mut got: BTreeMap<String, usize> = BTreeMap::new();
    let mut answered: HashSet<String> = HashSet::new();
    for line in output {
        let obj = line
            .as_object()
            .ok_or_else(|| format!("not an object: {line}"))?;
        let id = obj
            .get("id")
            .ok_or_else(|| format!("no id: {line}"))?
            .to_string();
        let bodies: Vec<&str> = ["result", "error", "event"]
            .into_iter()
            .filter(|k| obj.contains_key(*k))
            .collect();
        if bodies.len() != 1 || obj.len() != 2 {
            return Err(format!("not id + one of result/error/event: {line}"));
        }
        match bodies[0] {
            "event" => {
                if answered.contains(&id) {
                    return Err(format!("an event after the answer: {line}"));
                }
                let ev = obj["event"]
                    .as_object()
                    .ok_or_else(|| format!("event not an object: {line}"))?;
                if ev.len() != 1 {
                    return Err(format!("event of {} fields: {line}", ev.len()));
                }
                let (k, v) = ev.iter().next().unwrap();
                if k != "stdout" && k != "stderr" {
                    return Err(format!("event {k}: {line}"));
                }
                b64(v)?;
                match expect.get(&id).copied() {
                    None | Some(Expect::Shape("run_stream")) | Some(Expect::Any) => {}
                    Some(e) => return Err(format!("an event for a {e:?} request: {line}")),
                }
            }
            "error" => {
                let e = obj["error"]
                    .as_object()
                    .ok_or_else(|| format!("error not an object: {line}"))?;
                let kind = e.get("kind").and_then(Value::as_str).unwrap_or("");
                let message = e.get("message").and_then(Value::as_str).unwrap_or("");
                let details = e.get("details").and_then(Value::as_object);
                if !KINDS.contains(&kind) || message.is_empty() || details.is_none() || e.len() != 3
                {
                    return Err(format!("malformed error: {line}"));
                }
                if message.contains("internal error") {
                    return Err(format!("a request panicked: {line}"));
                }
                if let Some(p) = details.unwrap().get("protocol") {
                    if !p.as_str().is_some_and(|p| PROTOCOL_DETAILS.contains(&p)) {
                        return Err(format!("unlisted details.protocol: {line}"));
                    }
                }
                *got.entry(id.clone()).or_default() += 1;
                answered.insert(id);
            }
            _ => {
                let result = &obj["result"];
                match expect.get(&id).copied() {
                    Some(Expect::Shape(method)) => check_shape(method, result)?,
                    Some(Expect::Output {
                        stdout,
                        exit_code,
                        limit,
                    }) => {
                        check_shape("run", result)?;
                        let out = b64(&result["stdout"])?;
                        let keep = usize::try_from(*limit)
                            .unwrap_or(usize::MAX)
                            .min(stdout.len());
                        let want_truncated = keep < stdout.len();
                        if result["reason"] == json!("exited") {
                            KNOWN_OUTPUT_CHECKED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        if result["reason"] == json!("exited")
                            && (out != stdout[..keep]
                                || result["exit_code"] != json!(exit_code)
                                || result["stdout_truncated"] != json!(want_truncated))
                        {
                            return Err(format!(
                                "run of known output: want {:?} (exit {exit_code}, limit {limit}), got {result}",
                                String::from_utf8_lossy(stdout)
                            ));
                        }
                    }
                    _ => {}
                }
                *got.entry(id.clone()).or_default() += 1;
                answered.insert(id);
            }
        }
    }
    if want != got {
        let diff: Vec<String> = want
            .keys()
            .chain(got.keys())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .filter(|k| want.get(*k) != got.get(*k))
            .map(|k| format!("{k}: want {:?}, got {:?}", want.get(k), got.get(k)))
            .collect();
        return Err(format!("answers per id differ: {}", diff.join("; ")));
    }
    Ok(())
}

/// Runs one session: prologue, the batch, end of input; returns every output line.
async fn run_session(lines: &[Vec<u8>]) -> Result<(Vec<Value>, usize), String> {
    let (client, server) = tokio::io::duplex(64 << 10);
    let (server_read, server_write) = tokio::io::split(server);
    let options = ServeOptions {
        max_line_bytes: MAX_LINE_BYTES,
        ..ServeOptions::default()
    };
    let server = tokio::spawn(serve_with(
        server_read,
        server_write,
        std::future::pending::<i32>(),
        options,
    ));
    let (client_read, mut client_write) = tokio::io::split(client);
    let mut reader = tokio::io::BufReader::new(client_read).lines();
    let mut output = Vec::new();
    // The prologue: a factory with small budgets and one machine.
    let prologue = [
        json!({"id": "p1", "method": "factory", "params": {"backend": "sim", "cpu_fuel": 20_000_000u64, "memory_bytes": 64u64 << 20, "output_bytes": 8u64 << 20}}),
        json!({"id": "p2", "method": "create", "params": {"factory": 1, "spec": {"source": {"kind": "sim"}}}}),
    ];
    for p in &prologue {
        client_write
            .write_all(format!("{p}\n").as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let line = reader
            .next_line()
            .await
            .map_err(|e| e.to_string())?
            .ok_or("the server ended in the prologue")?;
        let v: Value = serde_json::from_str(&line).map_err(|e| format!("{e}: {line}"))?;
        if v.get("result").is_none() {
            return Err(format!("the prologue failed: {v}"));
        }
    }
    let finals_wanted = lines
        .iter()
        .flat_map(|l| l.split(|&b| b == b'\n'))
        .filter(|p| answer_id(p).is_some())
        .count();
    let batch: Vec<u8> = lines
        .iter()
        .flat_map(|l| l.iter().chain(b"\n"))
        .copied()
        .collect();
    let (answered_tx, answered_rx) = tokio::sync::oneshot::channel::<()>();
    let writer = tokio::spawn(async move {
        client_write.write_all(&batch).await?;
        client_write.flush().await?;
        // End of input once every line is answered, or after ANSWER_WAIT.
        let waited = tokio::time::timeout(ANSWER_WAIT, answered_rx)
            .await
            .is_err();
        client_write.shutdown().await.map(|()| waited)
    });
    let mut answered_tx = Some(answered_tx);
    let mut finals = 0usize;
    while let Some(line) = reader.next_line().await.map_err(|e| e.to_string())? {
        let v: Value =
            serde_json::from_str(&line).map_err(|e| format!("not JSON ({e}): {line}"))?;
        if v.get("event").is_none() {
            finals += 1;
        }
        output.push(v);
        if finals >= finals_wanted {
            if let Some(tx) = answered_tx.take() {
                let _ = tx.send(());
            }
        }
    }
    let waited = writer
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("writing the batch: {e}"))?;
    let slow = usize::from(waited);
    let status = server
        .await
        .map_err(|e| format!("the server panicked: {e}"))?;
    if status != 0 {
        return Err(format!("serve_with returned {status} after end of input"));
    }
    Ok((output, slow))
}

fn corpus() -> Vec<(String, Vec<Vec<u8>>)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fuzz-corpus/serve");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("the seed corpus is committed")
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read(&p).unwrap();
            let lines = text
                .split(|&b| b == b'\n')
                .map(<[u8]>::to_vec)
                .filter(|l| !l.is_empty())
                .collect();
            (p.display().to_string(), lines)
        })
        .collect()
}

fn check_session(
    rt: &tokio::runtime::Runtime,
    lines: &[Vec<u8>],
    expect: &HashMap<String, Expect>,
) -> Result<usize, String> {
    let result = rt.block_on(async {
        tokio::time::timeout(SESSION_LIMIT, run_session(lines))
            .await
            .map_err(|_| format!("the session did not end within {SESSION_LIMIT:?}: a hang"))?
    });
    let (output, slow) = result?;
    check_answers(lines, &output, expect)?;
    Ok(slow)
}

fn fail(seed: u64, case: usize, lines: &[Vec<u8>], why: &str) -> ! {
    let path = std::env::temp_dir().join("shellbox-fuzz-serve-failure.jsonl");
    let text: Vec<u8> = lines
        .iter()
        .flat_map(|l| l.iter().chain(b"\n"))
        .copied()
        .collect();
    let _ = std::fs::write(&path, text);
    panic!(
        "fuzz failure (seed {seed}, case {case}): {why}\n(the session's lines are in {})",
        path.display()
    );
}

#[test]
fn fuzz_serve_requests() {
    let seed = env_u64("SHELLBOX_FUZZ_SEED", 1).max(1);
    let secs = env_u64("SHELLBOX_FUZZ_SECS", 3);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let host = tempfile::tempdir().unwrap();
    std::fs::create_dir(host.path().join("in")).unwrap();
    std::fs::write(host.path().join("in/f"), b"data").unwrap();
    let host_dir = host.path().to_str().unwrap().to_string();
    let seeds = corpus();
    assert!(!seeds.is_empty());
    for (name, lines) in &seeds {
        if let Err(why) = check_session(&rt, lines, &HashMap::new()) {
            panic!("seed session {name}: {why}");
        }
    }
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let end = Instant::now() + Duration::from_secs(secs);
    let (mut cases, mut lines_sent, mut slow) = (0usize, 0usize, 0usize);
    while Instant::now() < end {
        cases += 1;
        let mut session = gen_session(&mut rng, cases, &host_dir);
        if rng.chance(10) {
            // A corpus session, mutated.
            let (_, lines) = &seeds[rng.below(seeds.len())];
            session = Session {
                lines: lines.clone(),
                expect: HashMap::new(),
            };
            let i = rng.below(session.lines.len());
            mutate(&mut rng, &mut session.lines[i]);
        }
        lines_sent += session.lines.len();
        match check_session(&rt, &session.lines, &session.expect) {
            Ok(s) => slow += s,
            Err(why) => fail(seed, cases, &session.lines, &why),
        }
    }
    // Nothing written outside the session directory's own names.
    let mut names: Vec<_> = std::fs::read_dir(host.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(
        names
            .iter()
            .all(|n| ["in", "out", "nope"].contains(&n.as_str())),
        "transfers wrote {names:?}"
    );
    eprintln!(
        "fuzz_serve: seed {seed}: {cases} sessions, {lines_sent} lines in {secs} s \
         ({slow} sessions answered only at end of input, {} runs of known output compared)",
        KNOWN_OUTPUT_CHECKED.load(std::sync::atomic::Ordering::Relaxed)
    );
}
