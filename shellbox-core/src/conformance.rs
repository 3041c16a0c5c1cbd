//! The contract tests every backend runs (feature `conformance`).
//!
//! Each case is a plain async function taking a [`Harness`] and panicking on a contract
//! violation, in the style of `object_store`'s integration tests. A backend wires all of
//! them with [`conformance_tests!`](crate::conformance_tests):
//!
//! ```ignore
//! async fn harness(test: &str) -> Option<shellbox_core::conformance::Harness> {
//!     // build the factory; when a prerequisite is missing:
//!     // eprintln!("SKIP {test}: <reason>"); return None;
//! #   None
//! }
//! shellbox_core::conformance_tests!(harness);
//! ```
//!
//! The commands use only POSIX `sh` and the basic utilities every backend offers (`echo`,
//! `printf`, `cat`, `sleep`, `kill`, `test`, `mkdir`, `ls`, `wc`, `head`, `stat`, `chmod`,
//! `pwd`, `env`).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;

use crate::{
    Command, CommandResult, Error, Event, ExitReason, Machine, MachineFactory, MachineSpec,
};

/// What a conformance case needs: a factory and the spec of the machines it creates.
#[derive(Clone)]
pub struct Harness {
    /// The backend under test.
    pub factory: Arc<dyn MachineFactory>,
    /// The spec every machine is created from (its workdir is the commands' default cwd).
    pub spec: MachineSpec,
}

impl Harness {
    /// Creates a machine from the harness's spec, panicking on failure.
    pub async fn machine(&self) -> Box<dyn Machine> {
        self.factory
            .create(self.spec.clone())
            .await
            .unwrap_or_else(|e| panic!("create failed on {}: {e}", self.factory.backend()))
    }

    fn workdir(&self) -> &str {
        if self.spec.workdir.is_empty() {
            "/"
        } else {
            &self.spec.workdir
        }
    }
}

async fn sh(machine: &dyn Machine, script: &str) -> CommandResult {
    machine
        .run(Command::shell(script).timeout(Duration::from_secs(60)))
        .await
        .unwrap_or_else(|e| panic!("run {script:?} failed: {e}"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Exit statuses pass through: 0, 1, 3, 255, and `exit` from a nested shell.
pub async fn exit_codes(h: &Harness) {
    let m = h.machine().await;
    for code in [0, 1, 3, 255] {
        let r = sh(&*m, &format!("exit {code}")).await;
        assert_eq!(r.exit_code, Some(code), "{r:?}");
        assert_eq!(r.reason, ExitReason::Exited);
    }
    let r = m.run(Command::new("true")).await.unwrap();
    assert!(r.success(), "{r:?}");
    let r = m.run(Command::new("false")).await.unwrap();
    assert_eq!(r.exit_code, Some(1));
    let r = sh(&*m, "echo out; echo err >&2; exit 7").await;
    assert_eq!(
        (r.exit_code, text(&r.stdout), text(&r.stderr)),
        (Some(7), "out\n".into(), "err\n".into())
    );
    m.close().await.unwrap();
}

/// A program that cannot be found exits 127, as from a POSIX shell.
pub async fn missing_program_is_127(h: &Harness) {
    let m = h.machine().await;
    let r = m
        .run(Command::new("shellbox-no-such-program-xyz"))
        .await
        .unwrap();
    assert_eq!(r.exit_code, Some(127), "{r:?}");
    assert_eq!(r.reason, ExitReason::Exited);
    let r = sh(&*m, "shellbox-no-such-program-xyz").await;
    assert_eq!(r.exit_code, Some(127), "{r:?}");
    m.close().await.unwrap();
}

/// A command killed by signal N reports 128 + N.
pub async fn signal_is_128_plus_n(h: &Harness) {
    let m = h.machine().await;
    let r = sh(&*m, "kill -9 $$").await;
    assert_eq!(r.exit_code, Some(137), "{r:?}");
    let r = sh(&*m, "kill -TERM $$").await;
    assert_eq!(r.exit_code, Some(143), "{r:?}");
    m.close().await.unwrap();
}

/// stdin is delivered whole (binary included) and closed; unread stdin is no error.
pub async fn stdin_is_delivered(h: &Harness) {
    let m = h.machine().await;
    let data: Vec<u8> = (0..=255u8).cycle().take(200_000).collect();
    let r = m
        .run(Command::new("cat").stdin(data.clone()))
        .await
        .unwrap();
    assert_eq!(r.exit_code, Some(0));
    assert_eq!(r.stdout.len(), data.len());
    assert!(r.stdout[..] == data[..], "stdin bytes differ");
    let r = m
        .run(Command::shell("read -r line; echo \"got:$line\"").stdin("hello\nrest\n"))
        .await
        .unwrap();
    assert_eq!(text(&r.stdout), "got:hello\n");
    let r = m
        .run(Command::new("true").stdin(vec![b'x'; 1_000_000]))
        .await
        .unwrap();
    assert_eq!(r.exit_code, Some(0), "unread stdin must not fail: {r:?}");
    let r = m.run(Command::new("cat")).await.unwrap();
    assert_eq!((r.exit_code, r.stdout.len()), (Some(0), 0));
    m.close().await.unwrap();
}

/// cwd defaults to the workdir; `cwd` overrides it; a command's env wins over the spec's.
pub async fn cwd_and_env_precedence(h: &Harness) {
    let spec = h
        .spec
        .clone()
        .env("SHELLBOX_A", "spec")
        .env("SHELLBOX_B", "spec");
    let m = h.factory.create(spec).await.unwrap();
    let r = sh(&*m, "pwd").await;
    assert_eq!(text(&r.stdout), format!("{}\n", h.workdir()));
    let r = m
        .run(
            Command::shell("printf '%s %s %s\\n' \"$SHELLBOX_A\" \"$SHELLBOX_B\" \"$SHELLBOX_C\"")
                .env("SHELLBOX_B", "command")
                .env("SHELLBOX_C", "c v"),
        )
        .await
        .unwrap();
    assert_eq!(text(&r.stdout), "spec command c v\n", "{r:?}");
    let r = m.run(Command::new("pwd").cwd("/tmp")).await.unwrap();
    assert_eq!(text(&r.stdout), "/tmp\n");
    let r = m
        .run(Command::new("pwd").cwd("/shellbox-no-such-dir"))
        .await
        .unwrap();
    assert_eq!(r.reason, ExitReason::Exited);
    assert_ne!(r.exit_code, Some(0), "a missing cwd must fail: {r:?}");
    // State never leaks between runs.
    sh(&*m, "cd /tmp; export SHELLBOX_LEAK=1").await;
    let r = sh(&*m, "pwd; echo \"[${SHELLBOX_LEAK:-}]\"").await;
    assert_eq!(text(&r.stdout), format!("{}\n[]\n", h.workdir()));
    // Bad input is a typed error, before anything runs.
    assert!(matches!(
        m.run(Command::from_argv(Vec::<String>::new())).await,
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        m.run(Command::new("true").env("BAD-NAME", "x")).await,
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        m.run(Command::new("true").cwd("relative")).await,
        Err(Error::InvalidInput(_))
    ));
    m.close().await.unwrap();
}

/// Each stream keeps its first N bytes; the flag says more came; a flood never blocks.
pub async fn output_limits_drain(h: &Harness) {
    let m = h.machine().await;
    let r = m
        .run(Command::shell("printf 0123456789; printf abcdefghij >&2").output_limit_bytes(4))
        .await
        .unwrap();
    assert_eq!(text(&r.stdout), "0123");
    assert_eq!(text(&r.stderr), "abcd");
    assert!(r.stdout_truncated && r.stderr_truncated);
    assert_eq!(r.exit_code, Some(0));
    let r = m
        .run(Command::shell("printf 0123").output_limit_bytes(4))
        .await
        .unwrap();
    assert!(!r.stdout_truncated && !r.stderr_truncated);
    let r = m
        .run(Command::shell("printf x").output_limit_bytes(0))
        .await
        .unwrap();
    assert!(r.stdout.is_empty() && r.stdout_truncated && !r.stderr_truncated);
    // A 4 MiB flood on stderr with a 1 KiB limit finishes and stdout stays intact.
    let r = m
        .run(
            Command::shell(
                "s=x; for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do s=$s$s; done; \
                 i=0; while [ $i -lt 64 ]; do printf %s \"$s\" >&2; i=$((i+1)); done; echo done",
            )
            .output_limit_bytes(1024)
            .timeout(Duration::from_secs(120)),
        )
        .await
        .unwrap();
    assert_eq!(r.exit_code, Some(0), "{:?}", r.reason);
    assert_eq!(text(&r.stdout), "done\n");
    assert_eq!(r.stderr.len(), 1024);
    assert!(r.stderr_truncated && !r.stdout_truncated);
    m.close().await.unwrap();
}

/// A timeout kills the command and every descendant, returns promptly, and the machine
/// stays usable.
pub async fn timeout_kills_descendants(h: &Harness) {
    let m = h.machine().await;
    let started = Instant::now();
    let r = m
        .run(Command::shell("sleep 3600 & sleep 3600 & wait").timeout(Duration::from_millis(500)))
        .await
        .unwrap();
    assert_eq!(r.reason, ExitReason::TimedOut, "{r:?}");
    assert_eq!(r.exit_code, None);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "timeout took {:?}",
        started.elapsed()
    );
    // Background children of a command that exits normally end with it too.
    let started = Instant::now();
    let r = m
        .run(Command::shell("sleep 3600 & echo started").timeout(Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(
        (r.exit_code, text(&r.stdout)),
        (Some(0), "started\n".to_string())
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    let r = sh(&*m, "echo still usable").await;
    assert_eq!(text(&r.stdout), "still usable\n");
    m.close().await.unwrap();
}

/// A timed-out command keeps the output it wrote before the kill (shellbox's contract;
/// the reference discards it).
pub async fn timeout_keeps_partial_output(h: &Harness) {
    let m = h.machine().await;
    let r = m
        .run(
            Command::shell("echo before; echo warn >&2; sleep 3600; echo after")
                .timeout(Duration::from_secs(2)),
        )
        .await
        .unwrap();
    assert_eq!(r.reason, ExitReason::TimedOut);
    assert_eq!(r.exit_code, None);
    assert_eq!(text(&r.stdout), "before\n");
    assert_eq!(text(&r.stderr), "warn\n");
    m.close().await.unwrap();
}

/// Files written by one command are there for the next, until close.
pub async fn files_persist_between_commands(h: &Harness) {
    let m = h.machine().await;
    sh(
        &*m,
        "mkdir -p /tmp/persist/sub && echo data > /tmp/persist/sub/f && echo w > w.txt",
    )
    .await;
    let r = sh(&*m, "cat /tmp/persist/sub/f w.txt").await;
    assert_eq!(text(&r.stdout), "data\nw\n");
    m.close().await.unwrap();
}

/// Upload and download of single files and of trees, with modes, merge semantics and
/// parents created on both sides.
pub async fn upload_download_round_trip(h: &Harness) {
    let m = h.machine().await;
    let host = tempfile::tempdir().unwrap();
    let src = host.path().join("src");
    std::fs::create_dir_all(src.join("nested/deeper")).unwrap();
    std::fs::write(src.join("top.txt"), b"top\n").unwrap();
    std::fs::write(src.join("nested/n.bin"), [0u8, 1, 2, 255]).unwrap();
    std::fs::write(src.join("nested/deeper/run.sh"), b"#!/bin/sh\necho ran\n").unwrap();
    set_mode(&src.join("nested/deeper/run.sh"), 0o755);
    set_mode(&src.join("nested"), 0o710);
    set_mode(&src, 0o700);
    let file = host.path().join("single.txt");
    std::fs::write(&file, b"single\n").unwrap();

    m.upload(&file, "/tmp/a/b/single.txt").await.unwrap();
    m.upload(&src, "/tmp/tree").await.unwrap();
    let r = sh(
        &*m,
        "cat /tmp/a/b/single.txt /tmp/tree/top.txt; wc -c < /tmp/tree/nested/n.bin; \
         stat -c %a /tmp/tree /tmp/tree/nested /tmp/tree/nested/deeper/run.sh; \
         /tmp/tree/nested/deeper/run.sh; test -e /tmp/tree/src || echo no-extra-level",
    )
    .await;
    let out = text(&r.stdout).replace(' ', "");
    assert_eq!(
        out, "single\ntop\n4\n700\n710\n755\nran\nno-extra-level\n",
        "{r:?}"
    );

    // Merge into an existing directory keeps what was there.
    sh(&*m, "mkdir -p /tmp/merge && echo keep > /tmp/merge/old").await;
    m.upload(&src, "/tmp/merge").await.unwrap();
    let r = sh(&*m, "cat /tmp/merge/old /tmp/merge/top.txt").await;
    assert_eq!(text(&r.stdout), "keep\ntop\n");

    // Download: a file, then a tree into a new host directory (no extra level).
    let out_file = host.path().join("out/deep/single.txt");
    m.download("/tmp/a/b/single.txt", &out_file).await.unwrap();
    assert_eq!(std::fs::read(&out_file).unwrap(), b"single\n");
    let out_tree = host.path().join("out-tree");
    m.download("/tmp/tree", &out_tree).await.unwrap();
    assert_eq!(std::fs::read(out_tree.join("top.txt")).unwrap(), b"top\n");
    assert_eq!(
        std::fs::read(out_tree.join("nested/n.bin")).unwrap(),
        [0u8, 1, 2, 255]
    );
    assert_eq!(mode(&out_tree.join("nested/deeper/run.sh")), 0o755);
    assert_eq!(mode(&out_tree.join("nested")), 0o710);
    assert!(!out_tree.join("tree").exists());

    // Files written by commands download byte-exact.
    sh(&*m, "printf 'made\\000inside' > made.bin").await;
    let made = host.path().join("made.bin");
    m.download(
        &format!("{}/made.bin", h.workdir().trim_end_matches('/')),
        &made,
    )
    .await
    .unwrap();
    assert_eq!(std::fs::read(&made).unwrap(), b"made\0inside");
    m.close().await.unwrap();
}

/// Missing transfer sources and bad guest paths are typed errors that change nothing.
pub async fn transfer_errors(h: &Harness) {
    let m = h.machine().await;
    let host = tempfile::tempdir().unwrap();
    let err = m
        .download("/shellbox/no/such/file", &host.path().join("x"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "No such file or directory: /shellbox/no/such/file"
    );
    assert!(!host.path().join("x").exists());
    let err = m
        .upload(&host.path().join("missing"), "/tmp/x")
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
    let file = host.path().join("f");
    std::fs::write(&file, b"x").unwrap();
    for bad in ["relative/path", "/a/../b", "/a//b"] {
        let err = m.upload(&file, bad).await.unwrap_err();
        assert!(matches!(err, Error::InvalidInput(_)), "{bad}: {err:?}");
        let err = m.download(bad, &host.path().join("y")).await.unwrap_err();
        assert!(matches!(err, Error::InvalidInput(_)), "{bad}: {err:?}");
    }
    m.close().await.unwrap();
}

/// One rule on every backend (issue 8, item 15): an empty program name is `InvalidInput`;
/// a working directory inside `/proc`, `/sys` or `/dev` is `Unsupported`, both as the
/// command's cwd and as the machine's workdir. The machine stays usable.
pub async fn bad_program_and_kernel_dirs_refused(h: &Harness) {
    let m = h.machine().await;
    let err = m.run(Command::new("")).await.unwrap_err();
    assert!(
        matches!(err, Error::InvalidInput(_)),
        "empty argv[0]: {err:?}"
    );
    for dir in ["/proc", "/sys/kernel", "/dev"] {
        let err = m.run(Command::new("true").cwd(dir)).await.unwrap_err();
        assert!(err.is_unsupported(), "cwd {dir}: {err:?}");
    }
    let err = match h.factory.create(h.spec.clone().workdir("/proc")).await {
        Ok(other) => {
            other.close().await.unwrap();
            panic!("workdir /proc was accepted")
        }
        Err(e) => e,
    };
    assert!(err.is_unsupported(), "workdir /proc: {err:?}");
    let r = sh(&*m, "echo ok").await;
    assert_eq!(text(&r.stdout), "ok\n");
    m.close().await.unwrap();
}

/// `check_environment` follows the declared [`Capabilities`](crate::Capabilities): the
/// harness spec with every declared capability passes; an undeclared one, other command
/// semantics and `network` under deny are refused; and whatever it refuses for a spec,
/// `create` refuses too (it is never stricter than `create`).
pub async fn check_environment_follows_capabilities(h: &Harness) {
    use crate::{CommandSemantics, ExecutionRequirements, NetworkPolicy, CAPABILITY_NAMES};
    let caps = h.factory.capabilities();
    let declared = ExecutionRequirements {
        command_semantics: Some(caps.command_semantics),
        capabilities: caps
            .names()
            .into_iter()
            .filter(|c| *c != "network")
            .map(String::from)
            .collect(),
        docker_image: None,
    };
    h.factory
        .check_environment(&declared, &h.spec)
        .await
        .unwrap_or_else(|e| panic!("declared capabilities refused: {e}"));
    let mut undeclared: Vec<String> = CAPABILITY_NAMES
        .into_iter()
        .filter(|c| !caps.has(c))
        .map(String::from)
        .collect();
    undeclared.sort();
    if !undeclared.is_empty() {
        let req = ExecutionRequirements {
            capabilities: undeclared.clone(),
            ..Default::default()
        };
        let e = h
            .factory
            .check_environment(&req, &h.spec)
            .await
            .unwrap_err();
        assert!(
            e.is_unsupported() && e.to_string().contains(&undeclared.join(", ")),
            "{e}"
        );
    }
    let other = match caps.command_semantics {
        CommandSemantics::LinuxProcess => CommandSemantics::ShellSimulator,
        CommandSemantics::ShellSimulator => CommandSemantics::LinuxProcess,
    };
    let req = ExecutionRequirements {
        command_semantics: Some(other),
        ..Default::default()
    };
    assert!(h
        .factory
        .check_environment(&req, &h.spec)
        .await
        .unwrap_err()
        .is_unsupported());
    if caps.network {
        let req = ExecutionRequirements {
            capabilities: vec!["network".into()],
            ..Default::default()
        };
        let deny = h.spec.clone().network(NetworkPolicy::Deny);
        assert!(h
            .factory
            .check_environment(&req, &deny)
            .await
            .unwrap_err()
            .is_unsupported());
    }
    let variants = [
        h.spec.clone().cpus(1),
        h.spec.clone().memory_mb(256),
        h.spec.clone().storage_mb(64),
        h.spec.clone().gpus(1),
        h.spec.clone().network(NetworkPolicy::Allow),
        MachineSpec::sim(),
        MachineSpec::host(),
        MachineSpec::docker("shellbox-conformance/none:0"),
    ];
    for spec in variants {
        let Err(refusal) = h
            .factory
            .check_environment(&ExecutionRequirements::default(), &spec)
            .await
        else {
            continue;
        };
        assert!(refusal.is_unsupported(), "{refusal:?}");
        match h.factory.create(spec.clone()).await {
            Ok(m) => {
                m.close().await.unwrap();
                panic!("check_environment refused {spec:?} ({refusal}) but create accepted it");
            }
            Err(e) => assert!(e.is_unsupported(), "create of {spec:?}: {e:?}"),
        }
    }
}

/// `download_file` (REFERENCE.md 3.2): a file of exactly `max_bytes` arrives whole; one byte
/// more is `DownloadLimitExceeded` with the old target intact; a directory or `/dev/zero` is
/// `Unsupported` ("regular file"); a missing source is `NotFound`; a symlink at the target
/// is replaced, not written through; no staging directory is ever left.
pub async fn bounded_file_download(h: &Harness) {
    let m = h.machine().await;
    let r = sh(
        &*m,
        "mkdir -p /tmp/bd/dir && head -c 100000 /dev/zero > /tmp/bd/f && echo done",
    )
    .await;
    assert_eq!(text(&r.stdout), "done\n", "{}", text(&r.stderr));
    let host = tempfile::tempdir().unwrap();
    let target = host.path().join("out");
    m.download_file("/tmp/bd/f", &target, 100_000)
        .await
        .unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), vec![0u8; 100_000]);

    std::fs::write(&target, b"old").unwrap();
    let err = m
        .download_file("/tmp/bd/f", &target, 99_999)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::DownloadLimitExceeded(_)), "{err:?}");
    assert_eq!(std::fs::read(&target).unwrap(), b"old");
    for bad in ["/tmp/bd/dir", "/dev/zero"] {
        let err = m.download_file(bad, &target, 10).await.unwrap_err();
        assert!(
            err.is_unsupported() && err.to_string().contains("regular file"),
            "{bad}: {err:?}"
        );
    }
    let err = m
        .download_file("/tmp/bd/missing", &target, 10)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
    assert_eq!(std::fs::read(&target).unwrap(), b"old");

    let victim = host.path().join("victim");
    std::fs::write(&victim, b"keep").unwrap();
    let link = host.path().join("link");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    m.download_file("/tmp/bd/f", &link, 1 << 20).await.unwrap();
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    assert!(!std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());

    let left: Vec<_> = std::fs::read_dir(host.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(crate::STAGING_PREFIX))
        .collect();
    assert!(left.is_empty(), "staging left behind: {left:?}");
    m.close().await.unwrap();
}

/// After close every operation fails with `Closed`; close is idempotent.
pub async fn closed_machine_errors(h: &Harness) {
    let m = h.machine().await;
    m.close().await.unwrap();
    m.close().await.unwrap();
    assert!(matches!(
        m.run(Command::new("true")).await,
        Err(Error::Closed)
    ));
    assert!(matches!(
        m.run_stream(Command::new("true")).await.err(),
        Some(Error::Closed)
    ));
    let host = tempfile::tempdir().unwrap();
    let file = host.path().join("f");
    std::fs::write(&file, b"x").unwrap();
    assert!(matches!(
        m.upload(&file, "/tmp/f").await,
        Err(Error::Closed)
    ));
    assert!(matches!(
        m.download("/tmp/f", &host.path().join("g")).await,
        Err(Error::Closed)
    ));
}

/// Two commands on one machine at once both complete correctly.
pub async fn concurrent_commands(h: &Harness) {
    let m = h.machine().await;
    let scripts: Vec<String> = (0..4)
        .map(|i| format!("i=0; while [ $i -lt 50 ]; do echo {i}-$i; i=$((i+1)); done"))
        .collect();
    let results = futures::future::join_all(scripts.iter().map(|s| sh(&*m, s))).await;
    for (i, r) in results.iter().enumerate() {
        let expected: String = (0..50).map(|j| format!("{i}-{j}\n")).collect();
        assert_eq!(text(&r.stdout), expected);
        assert_eq!(r.exit_code, Some(0));
    }
    m.close().await.unwrap();
}

/// Machines side by side never see each other's files.
pub async fn machines_are_isolated(h: &Harness) {
    let (a, b) = futures::join!(h.machine(), h.machine());
    sh(&*a, "echo a > /tmp/owner; echo a > mine").await;
    sh(&*b, "echo b > /tmp/owner").await;
    let (ra, rb) = futures::join!(
        sh(&*a, "cat /tmp/owner"),
        sh(&*b, "cat /tmp/owner; test -e mine; echo $?")
    );
    assert_eq!(text(&ra.stdout), "a\n");
    assert_eq!(text(&rb.stdout), "b\n1\n");
    a.close().await.unwrap();
    let r = sh(&*b, "cat /tmp/owner").await;
    assert_eq!(
        text(&r.stdout),
        "b\n",
        "closing one machine must not touch another"
    );
    b.close().await.unwrap();
}

/// `run_stream` yields the same bytes and status as `run`, ending with one `Exit`.
pub async fn run_stream_matches_run(h: &Harness) {
    let m = h.machine().await;
    let script = "echo one; echo two >&2; printf 'x%.0s' 1 2 3 4 5 6 7 8 9 10; exit 5";
    for limit in [1024u64, 3] {
        let cmd = Command::shell(script).output_limit_bytes(limit);
        let expected = m.run(cmd.clone()).await.unwrap();
        let mut stream = m.run_stream(cmd).await.unwrap();
        let (mut out, mut err, mut exits) = (Vec::new(), Vec::new(), Vec::new());
        while let Some(item) = stream.next().await {
            match item.unwrap() {
                Event::Stdout(b) => {
                    assert!(exits.is_empty(), "output after Exit");
                    out.extend_from_slice(&b)
                }
                Event::Stderr(b) => {
                    assert!(exits.is_empty(), "output after Exit");
                    err.extend_from_slice(&b)
                }
                Event::Exit(status) => exits.push(status),
            }
        }
        assert_eq!(exits.len(), 1, "exactly one Exit");
        let status = exits[0];
        assert_eq!(out, expected.stdout.to_vec());
        assert_eq!(err, expected.stderr.to_vec());
        assert_eq!(status.exit_code, expected.exit_code);
        assert_eq!(status.exit_code, Some(5));
        assert_eq!(status.stdout_truncated, expected.stdout_truncated);
        assert_eq!(status.stderr_truncated, expected.stderr_truncated);
        assert_eq!(status.reason, expected.reason);
    }
    m.close().await.unwrap();
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// Expands to one `#[tokio::test]` per conformance case, each calling
/// `$harness("<case>").await` (an `async fn(&str) -> Option<Harness>`; `None` means the
/// harness printed its `SKIP` line) and then the case.
#[macro_export]
macro_rules! conformance_tests {
    ($harness:path) => {
        $crate::conformance_tests!(@cases $harness;
            exit_codes,
            missing_program_is_127,
            signal_is_128_plus_n,
            stdin_is_delivered,
            cwd_and_env_precedence,
            output_limits_drain,
            timeout_kills_descendants,
            timeout_keeps_partial_output,
            files_persist_between_commands,
            upload_download_round_trip,
            transfer_errors,
            bad_program_and_kernel_dirs_refused,
            check_environment_follows_capabilities,
            bounded_file_download,
            closed_machine_errors,
            concurrent_commands,
            machines_are_isolated,
            run_stream_matches_run
        );
    };
    (@cases $harness:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                if let Some(h) = $harness(stringify!($case)).await {
                    $crate::conformance::$case(&h).await;
                }
            }
        )*
    };
}
