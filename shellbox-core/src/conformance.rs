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
//! `pwd`, `env`, `readlink`).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;

use crate::{
    Command, CommandResult, Error, Event, ExitReason, Machine, MachineFactory, MachineSpec,
    SessionKind, ShellSession, ShellStatus, ShellUpdate,
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

async fn run_root(machine: &dyn Machine, script: &str) -> CommandResult {
    machine
        .run(
            Command::shell(script)
                .user("root")
                .timeout(Duration::from_secs(60)),
        )
        .await
        .unwrap_or_else(|e| panic!("run {script:?} as root failed: {e}"))
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
/// semantics and `network` under deny are refused; an unknown capability name is
/// [`Error::InvalidInput`]; and whatever it refuses for a spec,
/// `create` refuses too, with the same [`Error::kind`] (it is never stricter than `create`).
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
    // A name no backend knows is the caller's mistake, whatever the backend offers.
    let unknown = ExecutionRequirements {
        capabilities: vec!["shell".into(), "shellbox-no-such-capability".into()],
        ..Default::default()
    };
    let e = h
        .factory
        .check_environment(&unknown, &h.spec)
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::InvalidInput(_))
            && e.to_string().contains("shellbox-no-such-capability"),
        "{e:?}"
    );
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
        MachineSpec::packages(crate::PackageSpec::shell()),
    ];
    for spec in variants {
        let Err(refusal) = h
            .factory
            .check_environment(&ExecutionRequirements::default(), &spec)
            .await
        else {
            continue;
        };
        match h.factory.create(spec.clone()).await {
            Ok(m) => {
                m.close().await.unwrap();
                panic!("check_environment refused {spec:?} ({refusal}) but create accepted it");
            }
            Err(e) => assert_eq!(
                e.kind(),
                refusal.kind(),
                "create of {spec:?}: {e:?}; check_environment: {refusal:?}"
            ),
        }
    }
}

/// `check_environment` gives `create`'s verdict without acquiring anything: for each spec
/// of a list that tries every spec field (bad and kernel workdirs, a workdir in a system
/// directory, each resource limit, oversized `storage_mb`, a `pids_limit` or `memory_mb` too
/// small to run anything and more `cpus` than any host has, network, env names, every image
/// source kind with a missing image, file or bad reference, read-only paths and mounts that
/// do not exist or lie in a system directory, package specs with present and missing
/// tools, and `pypi_packages` where the backend has no `python`), either both accept it or
/// both refuse it with the same [`Error::kind`]. What needs the network or a build to judge
/// (a registry pull, a Dockerfile build, PyPI packages where Python runs) is not in the
/// list: the check promises nothing about those.
pub async fn check_environment_agrees_with_create(h: &Harness) {
    use crate::{
        DockerImage, DockerfileSource, ExecutionRequirements, HostImage, ImageArchive, ImageSource,
        Mount, NetworkPolicy, PackageSpec, RegistryImage,
    };
    let caps = h.factory.capabilities();
    let base = h.spec.clone();
    let with = |source: ImageSource| MachineSpec {
        source,
        ..h.spec.clone()
    };
    let host_image = |image: HostImage| match &h.spec.source {
        // A local harness may name its own host image: keep its entries.
        ImageSource::Host(own) => {
            let mut own = own.clone();
            own.read_only.extend(image.read_only);
            own.bin_dirs.extend(image.bin_dirs);
            own.mounts.extend(image.mounts);
            with(ImageSource::Host(own))
        }
        _ => with(ImageSource::Host(image)),
    };
    let missing = "/shellbox-conformance-missing";
    let host_dir = std::env::temp_dir();
    let mut specs: Vec<(&str, MachineSpec)> = vec![
        ("the harness spec", base.clone()),
        ("workdir /", base.clone().workdir("/")),
        ("workdir /proc/x", base.clone().workdir("/proc/x")),
        ("workdir /sys", base.clone().workdir("/sys")),
        ("relative workdir", base.clone().workdir("relative")),
        (
            "unnormalised workdir",
            base.clone().workdir("/workspace/../etc"),
        ),
        (
            "workdir in /usr",
            base.clone()
                .workdir("/usr/lib/shellbox-conformance-workdir"),
        ),
        (
            "workdir in /etc",
            base.clone().workdir("/etc/shellbox-conformance-workdir"),
        ),
        ("cpus", base.clone().cpus(1)),
        ("memory_mb", base.clone().memory_mb(256)),
        ("storage_mb", base.clone().storage_mb(64)),
        ("storage_mb of a TiB", base.clone().storage_mb(1 << 20)),
        (
            "storage_mb past u64 bytes",
            base.clone().storage_mb(u64::MAX),
        ),
        ("gpus", base.clone().gpus(1)),
        ("network allow", base.clone().network(NetworkPolicy::Allow)),
        ("pids_limit 0", base.clone().pids_limit(0)),
        ("pids_limit 1", base.clone().pids_limit(1)),
        (
            "pids_limit past Linux's PID_MAX_LIMIT",
            base.clone().pids_limit(4_194_305),
        ),
        ("pids_limit u32::MAX", base.clone().pids_limit(u32::MAX)),
        ("memory_mb 1", base.clone().memory_mb(1)),
        ("cpus past any host's", base.clone().cpus(1 << 20)),
        ("an env name with =", base.clone().env("A=B", "x")),
        ("an empty env name", base.clone().env("", "x")),
        ("sim source", with(ImageSource::Sim(Default::default()))),
        ("host source", with(ImageSource::Host(HostImage::default()))),
        (
            "a missing read-only dir",
            host_image(HostImage {
                read_only: vec![missing.into()],
                ..Default::default()
            }),
        ),
        (
            "a mount in a system directory",
            host_image(HostImage {
                mounts: vec![Mount {
                    host: host_dir.clone(),
                    guest: "/usr/local/shellbox-conformance".into(),
                }],
                ..Default::default()
            }),
        ),
        (
            "a mount of a missing host path",
            host_image(HostImage {
                mounts: vec![Mount {
                    host: missing.into(),
                    guest: "/opt/shellbox-conformance".into(),
                }],
                ..Default::default()
            }),
        ),
        (
            "a relative mount guest",
            host_image(HostImage {
                mounts: vec![Mount {
                    host: host_dir.clone(),
                    guest: "opt/x".into(),
                }],
                ..Default::default()
            }),
        ),
        (
            "an absent docker image",
            with(ImageSource::Docker(DockerImage {
                reference: "shellbox-conformance/none:0".into(),
            })),
        ),
        (
            "an empty docker reference",
            with(ImageSource::Docker(DockerImage {
                reference: " ".into(),
            })),
        ),
        (
            "a bad registry reference",
            with(ImageSource::Registry(RegistryImage {
                reference: "https://example.com/x y".into(),
                credentials: None,
            })),
        ),
        (
            "a missing Dockerfile context",
            with(ImageSource::Dockerfile(DockerfileSource {
                context: missing.into(),
                dockerfile: "Dockerfile".into(),
            })),
        ),
        (
            "a missing image archive",
            with(ImageSource::Archive(ImageArchive {
                path: format!("{missing}.tar").into(),
            })),
        ),
        (
            "packages: shell only",
            with(ImageSource::Packages(PackageSpec::shell())),
        ),
        (
            "packages: a present tool",
            with(ImageSource::Packages(PackageSpec::shell().tool("sh"))),
        ),
        (
            "packages: a tool by path (invalid everywhere)",
            with(ImageSource::Packages(PackageSpec::shell().tool("/bin/sh"))),
        ),
        (
            "packages: a missing tool",
            with(ImageSource::Packages(
                PackageSpec::shell()
                    .tool("sh")
                    .tool("shellbox-conformance-absent"),
            )),
        ),
        (
            "packages: a bad tool",
            with(ImageSource::Packages(PackageSpec::shell().tool("-x"))),
        ),
        (
            "packages: a bad requirement",
            with(ImageSource::Packages(PackageSpec {
                pypi_packages: Some(vec!["--index-url=x".into()]),
                tools: vec![],
            })),
        ),
        (
            "packages with a workdir in /usr",
            with(ImageSource::Packages(PackageSpec::shell()))
                .workdir("/usr/lib/shellbox-conformance-workdir"),
        ),
        (
            "packages with memory_mb",
            with(ImageSource::Packages(PackageSpec::shell())).memory_mb(64),
        ),
    ];
    if !caps.python {
        specs.push((
            "packages: CPython where there is none",
            with(ImageSource::Packages(PackageSpec {
                pypi_packages: Some(vec![]),
                tools: vec![],
            })),
        ));
    }
    let verdict = |r: &Result<(), Error>| match r {
        Ok(()) => "accepted".to_string(),
        Err(e) => format!("refused ({})", e.kind()),
    };
    let none = ExecutionRequirements::default();
    let mut disagreements = Vec::new();
    for (what, spec) in specs {
        let checked = h.factory.check_environment(&none, &spec).await;
        let created = match h.factory.create(spec.clone()).await {
            Ok(m) => {
                m.close().await.unwrap();
                Ok(())
            }
            Err(e) => Err(e),
        };
        if verdict(&checked) != verdict(&created) {
            disagreements.push(format!(
                "{what}: check_environment {} ({}), create {} ({})",
                verdict(&checked),
                checked.err().map(|e| e.to_string()).unwrap_or_default(),
                verdict(&created),
                created.err().map(|e| e.to_string()).unwrap_or_default(),
            ));
        }
    }
    assert!(
        disagreements.is_empty(),
        "check_environment disagrees with create on {}:\n{}",
        h.factory.backend(),
        disagreements.join("\n")
    );
}

/// [`ImageSource::Packages`](crate::ImageSource::Packages) (REFERENCE.md 1.2), where the
/// declared sources include `packages`: a shell-only spec whose tool (`sh`) is present is
/// accepted and runs commands; one with a missing tool is refused with
/// [`Error::Unsupported`] naming it (by `create`, and, where `check_environment` refuses
/// it too, consistently); without the `python` capability, `pypi_packages: Some(_)` is
/// refused by both `check_environment` and `create`. Where `packages` is not declared,
/// both refuse every package spec. Python packages themselves need uv and PyPI, so they
/// are tested by the backends that resolve them (local's `packages_python` tests).
pub async fn packages_source(h: &Harness) {
    use crate::{ExecutionRequirements, ImageSource, PackageSpec};
    let caps = h.factory.capabilities();
    let with = |packages: PackageSpec| MachineSpec {
        source: ImageSource::Packages(packages),
        ..h.spec.clone()
    };
    let none = ExecutionRequirements::default();
    if !caps.sources.contains(&"packages") {
        let spec = with(PackageSpec::shell());
        let e = h.factory.check_environment(&none, &spec).await.unwrap_err();
        assert!(e.is_unsupported(), "{e:?}");
        let e = h
            .factory
            .create(spec)
            .await
            .err()
            .expect("packages refused");
        assert!(e.is_unsupported(), "{e:?}");
        return;
    }
    let present = with(PackageSpec::shell().tool("sh"));
    h.factory
        .check_environment(&none, &present)
        .await
        .unwrap_or_else(|e| panic!("a present tool refused: {e}"));
    let m = h.factory.create(present).await.unwrap();
    let r = sh(&*m, "echo ok").await;
    assert_eq!(text(&r.stdout), "ok\n");
    m.close().await.unwrap();

    let missing = with(
        PackageSpec::shell()
            .tool("sh")
            .tool("shellbox-conformance-absent"),
    );
    let e = h
        .factory
        .create(missing.clone())
        .await
        .err()
        .expect("a missing tool must be refused");
    assert!(e.is_unsupported(), "{e:?}");
    assert!(e.to_string().contains("shellbox-conformance-absent"), "{e}");
    if let Err(e) = h.factory.check_environment(&none, &missing).await {
        assert!(e.is_unsupported(), "{e:?}");
    }
    if !caps.python {
        for pypi in [vec![], vec!["six==1.17.0".to_string()]] {
            let spec = with(PackageSpec {
                pypi_packages: Some(pypi),
                tools: vec![],
            });
            let e = h.factory.check_environment(&none, &spec).await.unwrap_err();
            assert!(e.is_unsupported(), "{e:?}");
            let e = h.factory.create(spec).await.err().expect("python refused");
            assert!(e.is_unsupported(), "{e:?}");
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
        "mkdir -p /tmp/bd/dir && head -c 100000 /dev/zero > /tmp/bd/f && chmod 600 /tmp/bd/f \
         && echo '#!/bin/sh' > /tmp/bd/x && chmod 751 /tmp/bd/x && echo done",
    )
    .await;
    assert_eq!(text(&r.stdout), "done\n", "{}", text(&r.stderr));
    let host = tempfile::tempdir().unwrap();
    let target = host.path().join("out");
    m.download_file("/tmp/bd/f", &target, 100_000)
        .await
        .unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), vec![0u8; 100_000]);
    // The copy takes the source's permission bits, as `download` keeps them (second
    // break-it pass of issue 12: a 0600 file arrived 0644, a 0751 one 0644).
    let mode = |p: &Path| {
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(p).unwrap().permissions())
            & 0o7777
    };
    assert_eq!(mode(&target), 0o600, "{}", target.display());
    let exec = host.path().join("x");
    m.download_file("/tmp/bd/x", &exec, 100).await.unwrap();
    assert_eq!(mode(&exec), 0o751);

    // A host node that is no regular file (here a socket) is never replaced.
    let socket = host.path().join("socket");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let err = m
        .download_file("/tmp/bd/f", &socket, 100_000)
        .await
        .unwrap_err();
    assert!(err.is_unsupported(), "{err}");
    assert!(std::os::unix::fs::FileTypeExt::is_socket(
        &std::fs::symlink_metadata(&socket).unwrap().file_type()
    ));
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

/// `download_file` judges the source by what it resolves to *inside the machine*
/// (REFERENCE.md 3.2 checks it with the guest's `test -f`, which follows links): a symlink
/// to a regular file — absolute, relative or a chain of them — is followed and the file's
/// bytes arrive; a path that lands in `/proc`, `/sys` or `/dev` through a link (a linked
/// directory on the way, or the last component) is `Unsupported` ("regular file") even when
/// what it reaches is a regular file there (`/dev/shm/x`, `/proc/self/environ`), and so are
/// a dangling link and a link to a directory; the old target stays as it was.
pub async fn bounded_file_download_resolves_in_the_machine(h: &Harness) {
    let m = h.machine().await;
    let r = sh(
        &*m,
        "set -e; mkdir -p /tmp/bl/dir /dev/shm; printf abc > /tmp/bl/f; \
         ln -s /tmp/bl/f /tmp/bl/abs; ln -s f /tmp/bl/rel; ln -s rel /tmp/bl/chain; \
         ln -s ../../bl/./dir/../f /tmp/bl/dir/up; \
         printf shm > /dev/shm/bl-x; ln -s /dev/shm /tmp/bl/shm; \
         ln -s /dev/shm/bl-x /tmp/bl/shmfile; ln -s /dev /tmp/bl/devdir; \
         ln -s /proc /tmp/bl/p; ln -s /proc/self/environ /tmp/bl/environ; \
         ln -s missing /tmp/bl/dangling; ln -s dir /tmp/bl/dirlink; \
         if [ -f /proc/self/environ ]; then echo proc; else echo noproc; fi",
    )
    .await;
    assert_eq!(r.exit_code, Some(0), "{}", text(&r.stderr));
    let has_proc = text(&r.stdout) == "proc\n";
    let host = tempfile::tempdir().unwrap();
    let target = host.path().join("out");
    for link in [
        "/tmp/bl/abs",
        "/tmp/bl/rel",
        "/tmp/bl/chain",
        "/tmp/bl/dir/up",
        "/tmp/bl/dirlink/up",
    ] {
        std::fs::remove_file(&target).ok();
        m.download_file(link, &target, 3)
            .await
            .unwrap_or_else(|e| panic!("{link}: {e:?}"));
        assert_eq!(std::fs::read(&target).unwrap(), b"abc", "{link}");
        // Over the limit through a link too.
        let err = m.download_file(link, &target, 2).await.unwrap_err();
        assert!(
            matches!(err, Error::DownloadLimitExceeded(_)),
            "{link}: {err:?}"
        );
    }
    std::fs::write(&target, b"old").unwrap();
    let mut refused = vec![
        "/tmp/bl/shm/bl-x",
        "/tmp/bl/shmfile",
        "/tmp/bl/devdir/shm/bl-x",
        "/tmp/bl/dangling",
        "/tmp/bl/dirlink",
    ];
    if has_proc {
        refused.extend([
            "/tmp/bl/p/self/environ",
            "/tmp/bl/environ",
            "/tmp/bl/p/self/status",
        ]);
    }
    for bad in refused {
        let err = m.download_file(bad, &target, 1 << 20).await.unwrap_err();
        assert!(
            err.is_unsupported() && err.to_string().contains("regular file"),
            "{bad}: {err:?}"
        );
        assert_eq!(std::fs::read(&target).unwrap(), b"old", "{bad}");
    }
    let left: Vec<_> = std::fs::read_dir(host.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "out")
        .collect();
    assert!(left.is_empty(), "staging left behind: {left:?}");
    m.close().await.unwrap();
}

/// A directory download copies the symlinks inside it as symlinks, as `tar` does
/// (REFERENCE.md 4.5: "inner symlinks written as links even to absolute host paths"),
/// whatever they point at: an absolute target, one that climbs out of the directory, one
/// inside it, a dangling one — also when merged into the directory a first download made.
/// Such a link is never written through: a later download whose target passes through a
/// link that leads out of the directory holding it is refused (`Transfer`) and writes
/// nothing where the link points.
pub async fn directory_download_keeps_links(h: &Harness) {
    let m = h.machine().await;
    let outside = tempfile::tempdir().unwrap();
    let escape = outside.path().display().to_string();
    let r = sh(
        &*m,
        &format!(
            "set -e; mkdir -p /tmp/dk/t/sub; printf x > /tmp/dk/t/f; \
             ln -s /etc/passwd /tmp/dk/t/abs; ln -s ../../../../../etc /tmp/dk/t/sub/up; \
             ln -s ../f /tmp/dk/t/sub/rel; ln -s nowhere /tmp/dk/t/dangling; \
             ln -s '{escape}' /tmp/dk/t/esc; echo ok"
        ),
    )
    .await;
    assert_eq!(text(&r.stdout), "ok\n", "{}", text(&r.stderr));
    let host = tempfile::tempdir().unwrap();
    let out = host.path().join("t");
    let expect = [
        ("abs", "/etc/passwd".to_string()),
        ("sub/up", "../../../../../etc".to_string()),
        ("sub/rel", "../f".to_string()),
        ("dangling", "nowhere".to_string()),
        ("esc", escape.clone()),
    ];
    for round in ["fresh", "merged"] {
        m.download("/tmp/dk/t", &out)
            .await
            .unwrap_or_else(|e| panic!("{round}: {e:?}"));
        assert_eq!(std::fs::read(out.join("f")).unwrap(), b"x", "{round}");
        for (name, link) in &expect {
            let got = std::fs::read_link(out.join(name))
                .unwrap_or_else(|e| panic!("{round}: {name}: {e}"));
            assert_eq!(got.display().to_string(), *link, "{round}: {name}");
        }
    }
    // Never written through, by either download.
    let err = m
        .download("/tmp/dk/t/f", &out.join("esc/written"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Transfer { .. }), "{err:?}");
    let err = m
        .download_file("/tmp/dk/t/f", &out.join("esc/written"), 10)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Transfer { .. }), "{err:?}");
    assert_eq!(
        std::fs::read_dir(outside.path()).unwrap().count(),
        0,
        "a download wrote through a downloaded link"
    );
    let left: Vec<_> = std::fs::read_dir(host.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "t")
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

// ---------------------------------------------------------------------------------------
// Persistent shell sessions (REFERENCE.md section 2). Each case returns at once on a backend
// whose capabilities declare no sessions; the interactive-only parts (Running, read, write,
// interrupt of a running command, background jobs) are skipped on a non-interactive one.
//
// Output is compared byte for byte: an interactive backend must deliver the command's bytes
// unchanged (its terminal's output processing off, so `\n` stays `\n`, no `\r` added), as a
// non-interactive one does.
// ---------------------------------------------------------------------------------------

/// The per-call bound every session case waits at most (commands here finish in well under
/// a second; a hang fails the case instead of stalling the suite).
const SESSION_WAIT: Duration = Duration::from_secs(30);
const SESSION_LIMIT: u64 = 1 << 20;

/// What a non-interactive session's interrupt and close cases stop: a loop that runs until
/// stopped in real time (its `sleep` may be virtual).
const BUSY_LOOP: &str = "while :; do :; done";

/// A machine and its session when the backend declares sessions.
async fn open_session(
    h: &Harness,
) -> Option<(Box<dyn Machine>, Arc<dyn ShellSession>, SessionKind)> {
    let kind = h.factory.capabilities().shell_sessions?;
    let m = h.machine().await;
    let s = m
        .open_shell()
        .await
        .unwrap_or_else(|e| panic!("open_shell failed on {}: {e}", h.factory.backend()));
    assert_eq!(
        s.interactive(),
        kind == SessionKind::Interactive,
        "interactive() must match the declared SessionKind"
    );
    Some((m, s, kind))
}

/// Runs `command` to completion: `execute`, then `read` while it reports Running (output
/// gathered across calls), panicking unless it ends Completed within [`SESSION_WAIT`].
async fn complete(s: &dyn ShellSession, command: &str) -> (String, i32) {
    let (out, code) = complete_bytes(s, command).await;
    (text(&out), code)
}

async fn complete_bytes(s: &dyn ShellSession, command: &str) -> (Vec<u8>, i32) {
    let started = Instant::now();
    let mut u = s
        .execute(command, SESSION_WAIT, SESSION_LIMIT)
        .await
        .unwrap_or_else(|e| panic!("execute {command:?} failed: {e}"));
    let mut out = u.output.to_vec();
    while u.status == ShellStatus::Running {
        assert!(
            started.elapsed() < SESSION_WAIT,
            "{command:?} did not complete within {SESSION_WAIT:?}; so far {:?}",
            text(&out)
        );
        u = s.read(Duration::from_secs(1), SESSION_LIMIT).await.unwrap();
        out.extend_from_slice(&u.output);
    }
    assert_eq!(
        u.status,
        ShellStatus::Completed,
        "{command:?}: {u:?}, output {:?}",
        text(&out)
    );
    assert!(!u.truncated, "{command:?} truncated under 1 MiB");
    (out, u.exit_code.expect("Completed carries an exit code"))
}

/// Follows a Running command with `read` until it leaves Running (within [`SESSION_WAIT`]),
/// returning the last update with all output gathered.
async fn read_until_done(s: &dyn ShellSession, first: ShellUpdate) -> ShellUpdate {
    let started = Instant::now();
    let mut out = first.output.to_vec();
    let mut u = first;
    while u.status == ShellStatus::Running {
        assert!(
            started.elapsed() < SESSION_WAIT,
            "still running after {SESSION_WAIT:?}; so far {:?}",
            text(&out)
        );
        u = s.read(Duration::from_secs(1), SESSION_LIMIT).await.unwrap();
        out.extend_from_slice(&u.output);
    }
    u.output = out.into();
    u
}

/// cwd, exported and plain variables, functions and exit statuses persist across calls; a
/// `run` on the same machine never sees the session's state; (interactive) a background
/// job started in one call is still Running in a later one.
pub async fn session_state_persists(h: &Harness) {
    let Some((m, s, kind)) = open_session(h).await else {
        return;
    };
    let wd = h.workdir().trim_end_matches('/').to_string();
    assert_eq!(
        complete(&*s, "pwd").await,
        (format!("{}\n", h.workdir()), 0)
    );
    assert_eq!(complete(&*s, "echo hi").await, ("hi\n".into(), 0));
    assert_eq!(complete(&*s, "false").await, (String::new(), 1));
    assert_eq!(complete(&*s, "(exit 7)").await, (String::new(), 7));
    assert_eq!(
        complete(
            &*s,
            "mkdir -p sbdir && cd sbdir && export SB_EXPORTED=e1 && SB_PLAIN=p1; \
             sb_fn() { echo \"fn:$1:$SB_PLAIN\"; }"
        )
        .await,
        (String::new(), 0)
    );
    assert_eq!(
        complete(
            &*s,
            "pwd; echo \"$SB_EXPORTED\"; sb_fn a; sh -c 'echo \"child:$SB_EXPORTED\"'"
        )
        .await,
        (format!("{wd}/sbdir\ne1\nfn:a:p1\nchild:e1\n"), 0)
    );
    let r = sh(
        &*m,
        "pwd; echo \"${SB_EXPORTED-unset}\"; command -v sb_fn || echo nofn",
    )
    .await;
    assert_eq!(
        text(&r.stdout),
        format!("{}\nunset\nnofn\n", h.workdir()),
        "run must not see the session's state"
    );
    sh(&*m, "export SB_FROM_RUN=r; cd /").await;
    assert_eq!(
        complete(&*s, "echo \"${SB_FROM_RUN-unset}\"; pwd").await,
        (format!("unset\n{wd}/sbdir\n"), 0),
        "the session must not see run's state"
    );
    if kind == SessionKind::Interactive {
        assert_eq!(complete(&*s, "sleep 20 &").await.1, 0);
        let (out, code) = complete(&*s, "jobs").await;
        assert_eq!(code, 0);
        assert!(
            out.contains("Running") && out.contains("sleep 20"),
            "a background job lives on between calls: {out:?}"
        );
    }
    s.close().await.unwrap();
    m.close().await.unwrap();
}

/// A long command returns Running and completes through `read`; `execute` while it runs,
/// and `read`/`write`/`interrupt` with nothing running are [`Error::ShellState`] (on a
/// non-interactive session `execute` completes whatever `wait` is and `read`/`write` are
/// [`Error::Unsupported`]); a second `open_shell` returns the same session.
pub async fn session_running_then_read(h: &Harness) {
    let Some((m, s, kind)) = open_session(h).await else {
        return;
    };
    let again = m.open_shell().await.unwrap();
    complete(&*s, "SB_SAME=1").await;
    assert_eq!(
        complete(&*again, "echo \"${SB_SAME-unset}\"").await.0,
        "1\n",
        "a second open_shell must return the same session"
    );
    if kind == SessionKind::NonInteractive {
        let u = s
            .execute("sleep 0.2; echo late", Duration::ZERO, SESSION_LIMIT)
            .await
            .unwrap();
        assert_eq!(
            (u.status, text(&u.output), u.exit_code),
            (ShellStatus::Completed, "late\n".into(), Some(0))
        );
        assert!(s
            .read(Duration::ZERO, SESSION_LIMIT)
            .await
            .unwrap_err()
            .is_unsupported());
        assert!(s.write(b"x\n").await.unwrap_err().is_unsupported());
        m.close().await.unwrap();
        return;
    }
    for e in [
        s.read(Duration::ZERO, SESSION_LIMIT).await.unwrap_err(),
        s.write(b"x\n").await.unwrap_err(),
        s.interrupt().await.unwrap_err(),
    ] {
        assert!(matches!(e, Error::ShellState(_)), "nothing runs: {e:?}");
    }
    let u = s
        .execute(
            "echo start; sleep 1; echo end",
            Duration::from_millis(300),
            SESSION_LIMIT,
        )
        .await
        .unwrap();
    assert_eq!(u.status, ShellStatus::Running, "{u:?}");
    assert_eq!(u.exit_code, None);
    let e = s
        .execute("echo no", Duration::ZERO, SESSION_LIMIT)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::ShellState(_)), "{e:?}");
    let done = read_until_done(&*s, u).await;
    assert_eq!(
        (done.status, text(&done.output), done.exit_code),
        (ShellStatus::Completed, "start\nend\n".into(), Some(0))
    );
    let e = s.read(Duration::ZERO, SESSION_LIMIT).await.unwrap_err();
    assert!(matches!(e, Error::ShellState(_)), "{e:?}");
    assert_eq!(complete(&*s, "echo after").await, ("after\n".into(), 0));
    m.close().await.unwrap();
}

/// `write` feeds the running command's terminal input: a `read -r` loop gets each line
/// (interactive only).
pub async fn session_write_feeds_read(h: &Harness) {
    let Some((m, s, kind)) = open_session(h).await else {
        return;
    };
    if kind != SessionKind::Interactive {
        m.close().await.unwrap();
        return;
    }
    // The reference's example.
    let u = s
        .execute(
            "read -r value; printf 'read=%s' \"$value\"",
            Duration::from_millis(200),
            SESSION_LIMIT,
        )
        .await
        .unwrap();
    assert_eq!(u.status, ShellStatus::Running, "{u:?}");
    s.write(b"input\n").await.unwrap();
    let done = read_until_done(
        &*s,
        s.read(Duration::from_secs(5), SESSION_LIMIT).await.unwrap(),
    )
    .await;
    assert_eq!(
        (done.status, text(&done.output), done.exit_code),
        (ShellStatus::Completed, "read=input".into(), Some(0))
    );
    let u = s
        .execute(
            "while read -r line; do echo \"got:$line\"; [ \"$line\" = end ] && break; done; echo out",
            Duration::from_millis(200),
            SESSION_LIMIT,
        )
        .await
        .unwrap();
    assert_eq!(u.status, ShellStatus::Running, "{u:?}");
    s.write(b"a b\n").await.unwrap();
    s.write(b"'quoted' $HOME\nend\n").await.unwrap();
    let done = read_until_done(&*s, u).await;
    assert_eq!(
        (done.status, text(&done.output), done.exit_code),
        (
            ShellStatus::Completed,
            "got:a b\ngot:'quoted' $HOME\ngot:end\nout\n".into(),
            Some(0)
        )
    );
    m.close().await.unwrap();
}

/// (Interactive) Input written beyond what the command reads (`read -n 1` given `yes`) is
/// discarded when the command ends, as typeahead at a prompt is: the call completes with
/// the command's own output (never the session's marker), whether or not the leftover ends
/// in a newline, and the next command runs exactly as given (issue 11, break-it).
pub async fn session_unread_input_is_discarded(h: &Harness) {
    let Some((m, s, kind)) = open_session(h).await else {
        return;
    };
    if kind != SessionKind::Interactive {
        m.close().await.unwrap();
        return;
    }
    for leftover in [&b"yes"[..], b"yes\n", b"yes\nno"] {
        let u = s
            .execute(
                "read -n 1 x; echo got$x",
                Duration::from_millis(200),
                SESSION_LIMIT,
            )
            .await
            .unwrap();
        assert_eq!(u.status, ShellStatus::Running, "{u:?}");
        s.write(leftover).await.unwrap();
        let done = read_until_done(&*s, u).await;
        assert_eq!(
            (done.status, text(&done.output), done.exit_code),
            (ShellStatus::Completed, "goty\n".into(), Some(0)),
            "leftover {:?} (no marker either)",
            text(leftover)
        );
        assert_eq!(
            complete(&*s, "echo next").await,
            ("next\n".into(), 0),
            "leftover {:?}",
            text(leftover)
        );
    }
    m.close().await.unwrap();
}

/// Whether `out` shows something shaped like an interactive session's completion marker
/// (`SB`, 32 hex digits, `:`), which output never should.
fn shows_marker(out: &[u8]) -> bool {
    out.windows(35).any(|w| {
        w.starts_with(b"SB") && w[2..34].iter().all(u8::is_ascii_hexdigit) && w[34] == b':'
    })
}

/// Runs `command` until it leaves Running (at most [`SESSION_WAIT`]).
async fn run_until_done(s: &dyn ShellSession, command: &str) -> ShellUpdate {
    let u = s
        .execute(command, SESSION_WAIT, SESSION_LIMIT)
        .await
        .unwrap_or_else(|e| panic!("execute {command:?} failed: {e}"));
    read_until_done(s, u).await
}

/// (Interactive) A command that shadows what a shell's prompt machinery might call
/// (functions or aliases named `read` or `printf`), or that makes bash skip every command
/// (`extdebug` with a failing `DEBUG` trap), never hangs the session nor shows its marker:
/// each call ends (`Completed`, or `Reset` where the shell can no longer prompt), and the
/// next command runs (issue 11, break-it).
pub async fn session_prompt_survives_shadowed_commands(h: &Harness) {
    let Some((m, s, kind)) = open_session(h).await else {
        return;
    };
    if kind != SessionKind::Interactive {
        m.close().await.unwrap();
        return;
    }
    for (shadow, undo) in [
        ("read() { :; }", "unset -f read"),
        ("alias read=:", "unalias read"),
        ("printf() { :; }", "unset -f printf"),
        ("alias printf=true", "unalias printf"),
    ] {
        let u = run_until_done(&*s, shadow).await;
        assert_eq!(
            (u.status, u.exit_code, text(&u.output)),
            (ShellStatus::Completed, Some(0), String::new()),
            "{shadow:?}"
        );
        // The prompt still drains typeahead: a leftover line is not run.
        let u = s
            .execute("sleep 0.3", Duration::from_millis(50), SESSION_LIMIT)
            .await
            .unwrap();
        s.write(b"echo STRAY\n").await.unwrap();
        let u = read_until_done(&*s, u).await;
        assert_eq!(
            (u.status, u.exit_code, text(&u.output)),
            (ShellStatus::Completed, Some(0), String::new()),
            "after {shadow:?}"
        );
        let u = run_until_done(&*s, "echo next").await;
        assert_eq!(
            (u.status, u.exit_code, text(&u.output)),
            (ShellStatus::Completed, Some(0), "next\n".into()),
            "after {shadow:?}"
        );
        assert_eq!(run_until_done(&*s, undo).await.exit_code, Some(0), "{undo}");
    }
    // (bash only; sh fails both commands.)
    let u = run_until_done(&*s, "shopt -s extdebug; trap false DEBUG").await;
    assert!(
        matches!(u.status, ShellStatus::Completed | ShellStatus::Reset) && !shows_marker(&u.output),
        "{u:?}"
    );
    let u = run_until_done(&*s, "echo next").await;
    assert_eq!(
        (u.status, u.exit_code, text(&u.output)),
        (ShellStatus::Completed, Some(0), "next\n".into()),
        "after extdebug"
    );
    m.close().await.unwrap();
}

/// `interrupt` of `sleep 1000` (non-interactive: of `BUSY_LOOP`, a busy loop) ends it promptly with 130
/// and the session keeps working, its state intact.
pub async fn session_interrupt(h: &Harness) {
    let Some((m, s, kind)) = open_session(h).await else {
        return;
    };
    complete(&*s, "SB_KEEP=kept").await;
    let started = Instant::now();
    let done = if kind == SessionKind::Interactive {
        let u = s
            .execute("sleep 1000", Duration::from_millis(300), SESSION_LIMIT)
            .await
            .unwrap();
        assert_eq!(u.status, ShellStatus::Running, "{u:?}");
        s.interrupt().await.unwrap();
        read_until_done(&*s, u).await
    } else {
        // A non-interactive backend may run `sleep` on a virtual clock (the simulator's
        // `sleep 1000` returns at once): what it interrupts is a loop only an interrupt
        // ends.
        let running = {
            let s = s.clone();
            tokio::spawn(async move { s.execute(BUSY_LOOP, SESSION_WAIT, SESSION_LIMIT).await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        s.interrupt().await.unwrap();
        running.await.unwrap().unwrap()
    };
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "interrupt took {:?}",
        started.elapsed()
    );
    assert_eq!(
        (done.status, done.exit_code),
        (ShellStatus::Completed, Some(130)),
        "{done:?}"
    );
    assert_eq!(
        complete(&*s, "echo \"$SB_KEEP\"").await,
        ("kept\n".into(), 0)
    );
    m.close().await.unwrap();
}

/// (Interactive) A command cannot end its own call early by replaying the shell's prompt
/// machinery: `eval "$PROMPT_COMMAND"` and `PS1` expanded print the session's real
/// completion marker, yet the call goes on until the command really ends, with its own
/// status and all its output, and the next call sees none of it.
pub async fn session_prompt_cannot_be_faked(h: &Harness) {
    let Some((m, s, kind)) = open_session(h).await else {
        return;
    };
    if kind != SessionKind::Interactive {
        m.close().await.unwrap();
        return;
    }
    let replay = r#"eval "${PROMPT_COMMAND-}"; eval "printf '%s' \"$PS1\"""#;
    for pause in ["sleep 1; ", ""] {
        let command = format!("{replay}; {pause}echo LEAKED; (exit 7)");
        let (out, code) = complete(&*s, &command).await;
        assert_eq!(code, 7, "{command:?} ended early: {out:?}");
        assert!(out.ends_with("LEAKED\n"), "{command:?}: {out:?}");
        assert_eq!(complete(&*s, "echo next").await, ("next\n".into(), 0));
    }
    // Nor can it by faking the prompt and then waiting in a `read` of the terminal, as the
    // shell's prompt does: the call stays Running and the written line goes to the read.
    let u = s
        .execute(
            &format!("{replay}; read -r x; echo got:$x"),
            Duration::from_millis(1500),
            SESSION_LIMIT,
        )
        .await
        .unwrap();
    assert_eq!(
        u.status,
        ShellStatus::Running,
        "a faked prompt and a read: {u:?}"
    );
    s.write(b"hello\n").await.unwrap();
    let done = read_until_done(&*s, u).await;
    assert_eq!(done.exit_code, Some(0), "{done:?}");
    assert!(text(&done.output).ends_with("got:hello\n"), "{done:?}");
    assert_eq!(complete(&*s, "echo next").await, ("next\n".into(), 0));
    // A faked prompt does not make an interrupt think the command is over.
    let u = s
        .execute(
            &format!("{replay}; sleep 1000"),
            Duration::ZERO,
            SESSION_LIMIT,
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    s.interrupt().await.unwrap();
    let done = read_until_done(&*s, u).await;
    assert_eq!(
        (done.status, done.exit_code),
        (ShellStatus::Completed, Some(130)),
        "{done:?}"
    );
    // Nor can a background job, printing the marker of a later command while the shell
    // waits at its prompt between calls, or while that command runs.
    let forge = r#"N=$(set | grep -o 'SB[0-9a-f]\{32\}:' | head -n 1); F="${N}7:7;"; (sleep 1; printf '%s' "$F"; sleep 2; printf '%s' "$F"; printf '%s' "$F") >/dev/tty 2>&1 &"#;
    assert_eq!(complete(&*s, forge).await.1, 0);
    assert_eq!(complete(&*s, "true").await.1, 0);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (out, code) = complete(&*s, "echo real; sleep 2; echo done").await;
    assert_eq!(code, 0, "a background job's marker ended the call: {out:?}");
    // (The marker the job printed meanwhile is the command's text, and stays in.)
    let (real, done) = (out.find("real\n"), out.find("done\n"));
    assert!(real.is_some() && done > real, "{out:?}");
    let (out, code) = complete(&*s, "wait; echo four").await;
    assert_eq!(code, 0, "{out:?}");
    assert!(out.ends_with("four\n") && !out.contains("real"), "{out:?}");
    // The real prompt is found inside a background job's flood: every byte arrives, in
    // this call or the next, and both calls complete.
    let (first, code) = complete_bytes(&*s, "head -c 1000000 /dev/zero & :").await;
    assert_eq!(code, 0);
    let (second, code) = complete_bytes(&*s, "wait; echo done").await;
    assert_eq!(code, 0);
    let all = [first, second].concat();
    // (Around them, an interactive shell's job notices: `[1] PID`, `[1]+ Done ...`.)
    assert_eq!(
        all.iter().filter(|&&b| b == 0).count(),
        1_000_000,
        "every byte of the flood arrives"
    );
    let tail = text(&all[all.len().saturating_sub(200)..]);
    assert!(tail.contains("done\n"), "{tail:?}");
    m.close().await.unwrap();
}

/// (Interactive) An interrupt sent right after `execute` returns (the command line may not
/// even be read yet, or the shell may be forking the job, or a pipeline's later members)
/// still ends the command with 130, every time, and the shell's state survives; so does one
/// for a built-in loop and for a `read`.
///
/// One exception, a defect of busybox ash and not of the session: ash's SIGINT handler
/// `longjmp`s out of whatever it interrupts, and now and then (about one interrupt in
/// forty of a built-in loop, with a plain `kill -INT`) that is `malloc`, whose lock then
/// stays taken and deadlocks the shell. Where the shell is not bash, the built-in rounds
/// may therefore end in `Reset` (the shell replaced, as for any shell that does not come
/// back); the next call must then run in a fresh shell.
pub async fn session_interrupt_races_the_command(h: &Harness) {
    let Some((m, s, kind)) = open_session(h).await else {
        return;
    };
    if kind != SessionKind::Interactive {
        m.close().await.unwrap();
        return;
    }
    let bash = complete(&*s, "echo \"${BASH_VERSION:+bash}\"").await.0 == "bash\n";
    complete(&*s, "SB_KEEP=kept").await;
    for (i, command) in std::iter::repeat_n("sleep 1000", 8)
        .chain(std::iter::repeat_n(
            "sleep 1000 | sleep 1000 | sleep 1000",
            6,
        ))
        .chain(std::iter::repeat_n("yes | cat | sleep 1000", 3))
        .chain(["while :; do :; done", "read -r line"])
        .enumerate()
    {
        let started = Instant::now();
        let u = s
            .execute(command, Duration::ZERO, SESSION_LIMIT)
            .await
            .unwrap();
        assert_eq!(u.status, ShellStatus::Running, "{command:?}: {u:?}");
        s.interrupt().await.unwrap();
        let done = read_until_done(&*s, u).await;
        let built_in = command.starts_with("while") || command.starts_with("read");
        if !bash && built_in && done.status == ShellStatus::Reset {
            assert_eq!(
                complete(&*s, "echo \"${SB_KEEP-}\"").await,
                ("\n".into(), 0)
            );
            complete(&*s, "SB_KEEP=kept").await;
            continue;
        }
        assert_eq!(
            (done.status, done.exit_code),
            (ShellStatus::Completed, Some(130)),
            "round {i}, {command:?}, after {:?}: {done:?}",
            started.elapsed()
        );
        let next = complete(&*s, "echo \"$SB_KEEP\"").await;
        assert_eq!(
            next,
            ("kept\n".into(), 0),
            "round {i}, after {command:?} gave {:?}",
            text(&done.output)
        );
    }
    m.close().await.unwrap();
}

/// A session's commands start with the default signal dispositions and no signal blocked,
/// as a shell on a terminal starts them: `while :; do echo y; done | head -n 1` ends when
/// `head` exits (the loop is killed by SIGPIPE), and (interactive) a command's
/// `/proc/self/status` shows nothing ignored or blocked. (The relay is a Rust program, and
/// Rust ignores SIGPIPE at start: a shell that inherited that ignored it, and so did every
/// command it ran, which then looped on EPIPE for ever.)
pub async fn session_commands_get_default_signals(h: &Harness) {
    let Some((m, s, kind)) = open_session(h).await else {
        return;
    };
    assert_eq!(
        complete(&*s, "while :; do echo y; done | head -n 1").await,
        ("y\n".into(), 0)
    );
    if kind == SessionKind::Interactive {
        let (out, code) = complete(&*s, "grep -E '^Sig(Ign|Blk):' /proc/self/status").await;
        assert_eq!(code, 0, "{out:?}");
        assert_eq!(
            out, "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n",
            "a session command's blocked and ignored signals"
        );
    }
    m.close().await.unwrap();
}

/// A background job that ends between two calls leaves the shell as it was: the next call
/// completes with the shell's state (busybox ash took the SIGCHLD at its prompt for end of
/// input and exited).
pub async fn session_background_job_ending_between_calls(h: &Harness) {
    let Some((m, s, _)) = open_session(h).await else {
        return;
    };
    complete(&*s, "SB_Y=kept; sleep 0.2 &").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (out, code) = complete(&*s, "echo \"$SB_Y\"").await;
    assert_eq!(code, 0, "{out:?}");
    assert!(out.ends_with("kept\n"), "{out:?}");
    m.close().await.unwrap();
}

/// (Interactive) An interrupt that arrives after the command already ended changes
/// nothing: the call completes with the command's own status and the next command's
/// output is exactly its own (no stray newline or prompt).
pub async fn session_late_interrupt_is_harmless(h: &Harness) {
    let Some((m, s, kind)) = open_session(h).await else {
        return;
    };
    if kind != SessionKind::Interactive {
        m.close().await.unwrap();
        return;
    }
    for i in 0..6 {
        let u = s
            .execute("(exit 3)", Duration::ZERO, SESSION_LIMIT)
            .await
            .unwrap();
        if u.status == ShellStatus::Running {
            tokio::time::sleep(Duration::from_millis(100)).await;
            s.interrupt().await.unwrap();
        }
        let done = read_until_done(&*s, u).await;
        assert_eq!(
            (done.status, done.exit_code, text(&done.output)),
            (ShellStatus::Completed, Some(3), String::new()),
            "round {i}"
        );
        assert_eq!(
            complete(&*s, "echo x").await,
            ("x\n".into(), 0),
            "round {i}"
        );
    }
    m.close().await.unwrap();
}

/// (Interactive) Input written just as a command ends never runs as a command of its own
/// and never shifts the answers: over many rounds, a short command (one that reads the
/// terminal, or not) gets a `write` racing its end, its call completes with its own
/// status, and the next `execute` of `echo N` answers exactly `N` (issue 11, break-it F2:
/// the written line ran as a command line and the next `execute` answered its status
/// without running, or the answers shifted by one).
pub async fn session_write_racing_the_end_keeps_answers_in_step(h: &Harness) {
    let Some((m, s, kind)) = open_session(h).await else {
        return;
    };
    if kind != SessionKind::Interactive {
        m.close().await.unwrap();
        return;
    }
    for i in 0..40u32 {
        let pause = u64::from(i % 8) * 2;
        let command = if i % 2 == 0 {
            format!("read -r -t 0.0{} x; (exit 3)", 1 + i % 4)
        } else {
            format!("sleep 0.0{}; (exit 3)", 1 + i % 4)
        };
        let u = s
            .execute(&command, Duration::ZERO, SESSION_LIMIT)
            .await
            .unwrap();
        if u.status == ShellStatus::Running {
            tokio::time::sleep(Duration::from_millis(pause)).await;
            // The host still takes the command for running: the write is accepted, whatever
            // the shell did meanwhile.
            s.write(b"(exit 7)\n").await.unwrap();
        }
        let done = read_until_done(&*s, u).await;
        assert_eq!(
            (done.status, done.exit_code),
            (ShellStatus::Completed, Some(3)),
            "round {i}, {command:?}: {done:?}"
        );
        assert!(
            !shows_marker(&done.output),
            "round {i}: the marker leaked: {:?}",
            text(&done.output)
        );
        let (out, code) = complete(&*s, &format!("echo {i}")).await;
        assert_eq!(
            (out.as_str(), code),
            (format!("{i}\n").as_str(), 0),
            "round {i}, after {command:?}"
        );
    }
    m.close().await.unwrap();
}

/// (Interactive) An interrupt that races a command's end reaches no later command: over many
/// rounds, a short command gets an `interrupt` right at its end, its call completes (with
/// its own status, or 130 when the signal came first), and the next command, which runs
/// long enough to be hit by a stale signal, completes with its own status (issue 11,
/// break-it F3: busybox ash on docker's exec path, the interrupt hit the next command).
pub async fn session_interrupt_racing_the_end_hits_nothing(h: &Harness) {
    let Some((m, s, kind)) = open_session(h).await else {
        return;
    };
    if kind != SessionKind::Interactive {
        m.close().await.unwrap();
        return;
    }
    for i in 0..40u32 {
        let command = format!("sleep 0.0{}; (exit 3)", 1 + i % 4);
        let u = s
            .execute(&command, Duration::ZERO, SESSION_LIMIT)
            .await
            .unwrap();
        if u.status == ShellStatus::Running {
            tokio::time::sleep(Duration::from_millis(u64::from(i % 8) * 2 + 5)).await;
            s.interrupt().await.unwrap();
        }
        let done = read_until_done(&*s, u).await;
        assert_eq!(done.status, ShellStatus::Completed, "round {i}: {done:?}");
        assert!(
            matches!(done.exit_code, Some(3) | Some(130)),
            "round {i}: {done:?}"
        );
        let (out, code) = complete(&*s, &format!("sleep 0.2; echo {i}")).await;
        assert_eq!(
            (out.as_str(), code),
            (format!("{i}\n").as_str(), 0),
            "round {i}: the next command"
        );
    }
    m.close().await.unwrap();
}

/// A shell that exits gives Reset (no exit code); the next `execute` runs in a fresh shell
/// started in the workdir, files kept, variables gone. (Interactive: a shell killed by a
/// signal is a Reset too.)
pub async fn session_reset_after_exit(h: &Harness) {
    let Some((m, s, kind)) = open_session(h).await else {
        return;
    };
    complete(
        &*s,
        "echo data > sb_keep.txt; mkdir -p sbsub; cd sbsub; SB_GONE=1",
    )
    .await;
    let u = s
        .execute("exit 3", SESSION_WAIT, SESSION_LIMIT)
        .await
        .unwrap();
    let u = read_until_done(&*s, u).await;
    assert_eq!((u.status, u.exit_code), (ShellStatus::Reset, None), "{u:?}");
    assert_eq!(
        complete(&*s, "pwd; cat sb_keep.txt; echo \"${SB_GONE-unset}\"").await,
        (format!("{}\ndata\nunset\n", h.workdir()), 0)
    );
    if kind == SessionKind::Interactive {
        let u = s
            .execute("kill -9 $$", SESSION_WAIT, SESSION_LIMIT)
            .await
            .unwrap();
        let u = read_until_done(&*s, u).await;
        assert_eq!((u.status, u.exit_code), (ShellStatus::Reset, None), "{u:?}");
        assert_eq!(complete(&*s, "echo again").await, ("again\n".into(), 0));
    }
    m.close().await.unwrap();
}

/// Heredocs, quotes, long lines, control characters, binary output and text that looks
/// like any completion marker all complete with the exact bytes.
pub async fn session_output_is_exact(h: &Harness) {
    let Some((m, s, kind)) = open_session(h).await else {
        return;
    };
    assert_eq!(
        complete(
            &*s,
            "cat <<'EOF'\nline one\n$not_expanded 'q' \"d\"\nEOF\necho after"
        )
        .await,
        ("line one\n$not_expanded 'q' \"d\"\nafter\n".into(), 0)
    );
    assert_eq!(
        complete(&*s, "x=5; cat <<EOF\nx=$x\nEOF").await,
        ("x=5\n".into(), 0)
    );
    let long = "y".repeat(10_000);
    assert_eq!(
        complete(&*s, &format!("echo {long}")).await,
        (format!("{long}\n"), 0)
    );
    assert_eq!(
        complete(&*s, "printf 'a\tb\\n'; echo 'it'\\''s'").await,
        ("a\tb\nit's\n".into(), 0)
    );
    assert_eq!(
        complete(&*s, "echo a!!b \"c!\" !$").await,
        ("a!!b c! !$\n".into(), 0),
        "no history expansion"
    );
    // Look-alikes of the markers backends use: prompts, OSC 133/633 sequences, nonce-like
    // text, the shell's own prompt settings, with and without a newline.
    for lookalike in [
        "printf 'SB00000000000000000000000000000000:1:0;'",
        "printf '\\036\\037__SHELLBOX_DONE__ 0\\n'",
        "printf '\\033]633;D;0\\007\\033]133;D;0\\007'",
        "printf '$ \\n# \\n> '",
        "echo \"$PS1\"; echo \"${PROMPT_COMMAND-}\"",
    ] {
        let (out, code) = complete_bytes(&*s, &format!("{lookalike}; echo; echo tail")).await;
        assert_eq!(code, 0, "{lookalike}");
        assert!(out.ends_with(b"\ntail\n"), "{lookalike}: {:?}", text(&out));
    }
    // The session's own marker prefix (read from the shell's prompt settings) with numbers
    // that are not the running command's: text like any other, passed on byte for byte.
    if kind == SessionKind::Interactive {
        let (out, code) = complete(
            &*s,
            "N=$(set | grep -o 'SB[0-9a-f]\\{32\\}:' | head -n 1); \
             echo \"$N\"; for j in 0 1 2 99 1000000; do printf '%s%s:0;' \"$N\" \"$j\"; done; echo; echo tail",
        )
        .await;
        assert_eq!(code, 0, "{out:?}");
        let (prefix, _) = out.split_once('\n').unwrap_or_default();
        assert!(prefix.len() > 10, "the session's marker prefix: {out:?}");
        let markers: String = [0, 1, 2, 99, 1000000]
            .iter()
            .map(|j| format!("{prefix}{j}:0;"))
            .collect();
        assert_eq!(out, format!("{prefix}\n{markers}\ntail\n"));
    }
    let (out, code) = complete_bytes(
        &*s,
        "set > /dev/null; set | wc -l > /dev/null; printf '\\000\\001\\377\\376\\r\\n\\033[0mend'",
    )
    .await;
    assert_eq!(code, 0);
    assert_eq!(out, b"\x00\x01\xff\xfe\r\n\x1b[0mend".to_vec());
    assert_eq!(
        complete(&*s, "if then").await.1,
        2,
        "a syntax error completes with 2"
    );
    assert_eq!(complete(&*s, "echo 'unterminated").await.1, 2);
    // A NUL byte no shell can take: refused before anything runs, on every backend.
    let e = s
        .execute("echo a\0b; touch sb_nul_ran", SESSION_WAIT, SESSION_LIMIT)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::InvalidInput(_)), "{e:?}");
    assert_eq!(
        complete(&*s, "test -e sb_nul_ran || echo absent").await,
        ("absent\n".into(), 0)
    );
    m.close().await.unwrap();
}

/// Runs `command` without an interrupt: it must leave Running within [`SESSION_WAIT`],
/// either Completed or Reset (the shell replaced); the last update, all output gathered.
async fn settle(s: &dyn ShellSession, command: &str) -> ShellUpdate {
    let started = Instant::now();
    let mut u = s
        .execute(command, SESSION_WAIT, SESSION_LIMIT)
        .await
        .unwrap_or_else(|e| panic!("execute {command:?} failed: {e}"));
    let mut out = u.output.to_vec();
    while u.status == ShellStatus::Running {
        assert!(
            started.elapsed() < SESSION_WAIT,
            "{command:?} left the call Running for {SESSION_WAIT:?}; so far {:?}",
            text(&out)
        );
        u = s.read(Duration::from_secs(1), SESSION_LIMIT).await.unwrap();
        out.extend_from_slice(&u.output);
    }
    u.output = out.into();
    u
}

/// What a command may do to the shell's own plumbing — send the shell's output elsewhere
/// (`exec >file 2>&1`), clear or change the session's variables (`PROMPT_COMMAND`, `PS1`,
/// `__shellbox_seq`), switch line editing (`set -o vi`, `set -o emacs`, `set +o emacs`),
/// turn the terminal's echo back on (`stty echo`) or replace the shell (`exec sh`,
/// `exec bash --norc`) — never leaves a call hanging: it completes (and later commands
/// complete with their own status and exactly their own output) or it ends promptly in
/// `Reset`, after which the next command runs in a fresh shell.
pub async fn session_plumbing_changes(h: &Harness) {
    let Some((m, s, kind)) = open_session(h).await else {
        return;
    };
    let bash = complete(&*s, "echo \"${BASH_VERSION:+bash}\"").await.0 == "bash\n";
    let has_bash = text(
        &sh(&*m, "command -v bash >/dev/null && echo yes")
            .await
            .stdout,
    ) == "yes\n";
    s.close().await.unwrap();
    let mut cases = vec![
        "exec >/tmp/sb_plumb.log 2>&1",
        "exec 2>/tmp/sb_plumb.log",
        "PS1=",
        "PS1='$ '",
        "__shellbox_seq=0",
        "unset __shellbox_seq",
        "__shellbox_seq=x",
        "set -o vi",
        "set -o emacs",
        "set +o emacs",
        "set +o vi",
    ];
    if bash {
        cases.extend([
            "PROMPT_COMMAND=",
            "unset PROMPT_COMMAND",
            "PROMPT_COMMAND='echo hi'",
        ]);
    }
    if kind == SessionKind::Interactive {
        cases.extend(["stty echo", "stty echo icanon opost", "exec sh"]);
        if has_bash {
            cases.push("exec bash --norc");
        }
    }
    for case in cases {
        let s = m.open_shell().await.unwrap();
        complete(&*s, "SB_PLUMB=kept").await;
        let u = settle(&*s, case).await;
        eprintln!("{case:?}: {:?} {:?}", u.status, u.exit_code);
        let next = settle(&*s, "echo next").await;
        match u.status {
            ShellStatus::Reset => {
                // A fresh shell runs the next command: exactly its output.
                assert_eq!(
                    (next.status, text(&next.output), next.exit_code),
                    (ShellStatus::Completed, "next\n".into(), Some(0)),
                    "after {case:?} reset the session"
                );
            }
            _ => {
                assert_eq!(
                    next.status,
                    ShellStatus::Completed,
                    "after {case:?}: {next:?}"
                );
                assert_eq!(next.exit_code, Some(0), "after {case:?}: {next:?}");
                let redirected = case.starts_with("exec >");
                let want = if redirected { "" } else { "next\n" };
                assert_eq!(text(&next.output), want, "after {case:?}");
                let (out, code) = complete(&*s, "(exit 4)").await;
                assert_eq!((out.as_str(), code), ("", 4), "after {case:?}");
                if !redirected && !case.starts_with("exec ") {
                    assert_eq!(
                        complete(&*s, "echo \"$SB_PLUMB\"").await,
                        ("kept\n".into(), 0),
                        "after {case:?} the shell's state stays"
                    );
                }
            }
        }
        s.close().await.unwrap();
    }
    m.close().await.unwrap();
}

/// 10 MiB of output under a 64 KiB limit: the first 64 KiB with `truncated`, the command
/// completes, and the session keeps working untruncated.
pub async fn session_output_limit(h: &Harness) {
    let Some((m, s, _)) = open_session(h).await else {
        return;
    };
    let script = "s=0123456789abcdef; for i in 1 2 3 4 5 6 7 8 9 10 11 12; do s=$s$s; done; \
                  i=0; while [ $i -lt 160 ]; do printf %s \"$s\"; i=$((i+1)); done";
    let u = s
        .execute(script, Duration::from_secs(120), 64 * 1024)
        .await
        .unwrap();
    let mut out = u.output.to_vec();
    let mut truncated = u.truncated;
    let mut u = u;
    let started = Instant::now();
    while u.status == ShellStatus::Running {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "10 MiB did not drain"
        );
        u = s.read(Duration::from_secs(5), 64 * 1024).await.unwrap();
        out.extend_from_slice(&u.output);
        truncated |= u.truncated;
    }
    assert_eq!((u.status, u.exit_code), (ShellStatus::Completed, Some(0)));
    assert!(truncated);
    let pattern: Vec<u8> = b"0123456789abcdef"
        .iter()
        .copied()
        .cycle()
        .take(64 * 1024)
        .collect();
    assert!(out.len() >= 64 * 1024, "got {} bytes", out.len());
    assert!(out[..64 * 1024] == pattern[..], "the first 64 KiB are kept");
    let u = s.execute("echo ok", SESSION_WAIT, 64 * 1024).await.unwrap();
    assert_eq!(
        (u.status, text(&u.output), u.exit_code, u.truncated),
        (ShellStatus::Completed, "ok\n".into(), Some(0), false)
    );
    m.close().await.unwrap();
}

/// Closing the machine mid-command ends the session: it returns promptly and every later
/// session call is [`Error::Closed`]. (Backends check in their own tests that no process
/// or container is left.) Closing the session alone is idempotent and leaves the machine
/// working.
pub async fn session_close(h: &Harness) {
    let Some((m, s, kind)) = open_session(h).await else {
        return;
    };
    complete(&*s, "echo x").await;
    s.close().await.unwrap();
    s.close().await.unwrap();
    assert_eq!(text(&sh(&*m, "echo alive").await.stdout), "alive\n");
    let s = m.open_shell().await.unwrap();
    let running = if kind == SessionKind::Interactive {
        let u = s
            .execute("sleep 1000", Duration::from_millis(300), SESSION_LIMIT)
            .await
            .unwrap();
        assert_eq!(u.status, ShellStatus::Running);
        None
    } else {
        let s = s.clone();
        Some(tokio::spawn(async move {
            s.execute(BUSY_LOOP, SESSION_WAIT, SESSION_LIMIT).await
        }))
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    m.close().await.unwrap();
    if let Some(running) = running {
        let _ = tokio::time::timeout(Duration::from_secs(10), running)
            .await
            .expect("a session command must end when its machine closes");
    }
    assert!(started.elapsed() < Duration::from_secs(20));
    let e = s
        .execute("echo no", SESSION_WAIT, SESSION_LIMIT)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Closed), "{e:?}");
    assert!(matches!(m.open_shell().await, Err(Error::Closed)));
}

/// Whether the harness's backend declares the process model. A backend that does not is
/// not tested against it (as the session cases treat `shell_sessions`): no SKIP line.
fn has_process_model(h: &Harness, _case: &str) -> bool {
    h.factory.capabilities().process_model
}

/// Runs `script` until its stdout is `want` (up to 20 s: a killed process may take a moment
/// to be reaped on some backends), and asserts it got there.
async fn eventually(machine: &dyn Machine, script: &str, want: &str) {
    let started = Instant::now();
    loop {
        let r = sh(machine, script).await;
        if text(&r.stdout) == want {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{script:?}: stdout {:?}, want {want:?} ({r:?})",
            text(&r.stdout)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Prints `alive NAME` or `gone NAME` for each pid file `/tmp/pm.NAME`.
const PID_STATES: &str = "for f in keep setsid double; do \
     if kill -0 \"$(cat /tmp/pm.$f)\" 2>/dev/null; then echo \"alive $f\"; else echo \"gone $f\"; fi; \
   done";

/// Starts, in the background of a command that then ends, a sleeper whose pid is in
/// `/tmp/pm.keep`.
async fn start_kept_sleeper(m: &dyn Machine) {
    let r = sh(
        m,
        "sleep 1000 >/dev/null 2>&1 & echo $! > /tmp/pm.keep; echo started",
    )
    .await;
    assert_eq!(text(&r.stdout), "started\n", "{r:?}");
}

/// A script that starts a `setsid` escapee and a double-forked child (pids in
/// `/tmp/pm.setsid` and `/tmp/pm.double`), says `ready` and then sleeps.
const ESCAPEES: &str = "setsid sleep 1001 >/dev/null 2>&1 & echo $! > /tmp/pm.setsid; \
   (sleep 1002 >/dev/null 2>&1 & echo $! > /tmp/pm.double); \
   echo ready; sleep 1003";

/// Process model: a process a command leaves in the background keeps running after the
/// command ended (which it does at once, though the process holds its stdout), and serves
/// the next command: a responder on a FIFO started by one command answers the next.
pub async fn background_process_outlives_its_command(h: &Harness) {
    if !has_process_model(h, "background_process_outlives_its_command") {
        return;
    }
    let m = h.machine().await;
    // The sleeper inherits the command's stdout: the command still ends when its shell does.
    let started = Instant::now();
    let r = sh(&*m, "sleep 1000 & echo $! > /tmp/pm.bg; echo started").await;
    assert_eq!(
        (text(&r.stdout), r.exit_code),
        ("started\n".into(), Some(0)),
        "{r:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    let r = sh(&*m, "kill -0 \"$(cat /tmp/pm.bg)\" && echo alive").await;
    assert_eq!(text(&r.stdout), "alive\n", "{r:?}");
    let r = sh(
        &*m,
        // mkfifo in the foreground: as part of the background list it raced the next
        // command, whose `echo > /tmp/pm.q` then made a plain file and the responder never ran.
        "mkfifo /tmp/pm.q || exit 1; \
         (read line < /tmp/pm.q; echo \"got $line\" > /tmp/pm.a.tmp; mv /tmp/pm.a.tmp /tmp/pm.a) \
           >/dev/null 2>&1 & echo served",
    )
    .await;
    assert_eq!(text(&r.stdout), "served\n", "{r:?}");
    let r = sh(
        &*m,
        "echo hello > /tmp/pm.q; i=0; while [ ! -f /tmp/pm.a ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; cat /tmp/pm.a",
    )
    .await;
    assert_eq!(text(&r.stdout), "got hello\n", "{r:?}");
    m.close().await.unwrap();
}

/// Process model: a timeout kills everything its command started — the main process, a
/// `setsid` escapee and a double-forked child — and nothing else: an earlier command's
/// background process keeps running. The run reports the timeout.
pub async fn timeout_kills_only_its_command(h: &Harness) {
    if !has_process_model(h, "timeout_kills_only_its_command") {
        return;
    }
    let m = h.machine().await;
    start_kept_sleeper(&*m).await;
    let r = m
        .run(Command::shell(ESCAPEES).timeout(Duration::from_secs(3)))
        .await
        .unwrap();
    assert_eq!(r.reason, ExitReason::TimedOut, "{r:?}");
    assert_eq!(text(&r.stdout), "ready\n", "{r:?}");
    eventually(&*m, PID_STATES, "alive keep\ngone setsid\ngone double\n").await;
    m.close().await.unwrap();
}

/// Process model: a timeout that expires before the command has even started (microseconds)
/// still ends it: the run reports the timeout and the command never runs to its end. Each
/// round's command would print `ran` after a second; before the fix a kill that found the
/// keeper with no child yet was dropped, and about one round in 80 ran to the end.
pub async fn timeout_before_the_command_starts_still_kills(h: &Harness) {
    if !has_process_model(h, "timeout_before_the_command_starts_still_kills") {
        return;
    }
    let m = h.machine().await;
    for round in 0..150u64 {
        let timeout = Duration::from_micros(1 + (round % 5) * 50);
        let r = m
            .run(Command::shell("sleep 1; echo ran").timeout(timeout))
            .await
            .unwrap();
        assert_eq!(r.reason, ExitReason::TimedOut, "round {round}: {r:?}");
        assert_eq!(
            text(&r.stdout),
            "",
            "round {round}: the command ran to its end: {r:?}"
        );
    }
    // The machine still works, and nothing of those rounds is left running.
    eventually(
        &*m,
        "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^sleep 1 $'",
        "0\n",
    )
    .await;
    m.close().await.unwrap();
}

/// Process model: dropping a running command's stream kills everything it started (the
/// `setsid` and double-fork escapees included) and nothing else.
pub async fn cancel_kills_only_its_command(h: &Harness) {
    if !has_process_model(h, "cancel_kills_only_its_command") {
        return;
    }
    let m = h.machine().await;
    start_kept_sleeper(&*m).await;
    let mut stream = m
        .run_stream(Command::shell(ESCAPEES).timeout(Duration::from_secs(300)))
        .await
        .unwrap();
    let mut seen = Vec::new();
    while !seen.ends_with(b"ready\n") {
        match tokio::time::timeout(Duration::from_secs(60), stream.next()).await {
            Ok(Some(Ok(Event::Stdout(b)))) => seen.extend_from_slice(&b),
            Ok(Some(Ok(_))) => {}
            other => panic!("before ready: {other:?} (stdout {:?})", text(&seen)),
        }
    }
    drop(stream);
    eventually(&*m, PID_STATES, "alive keep\ngone setsid\ngone double\n").await;
    m.close().await.unwrap();
}

/// Host processes (all of this host's `/proc`) whose argv holds `needle`.
fn host_processes_with(needle: &[u8]) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .filter(|c| c.windows(needle.len()).any(|w| w == needle))
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .collect()
}

/// Process model: after `close` no process of the machine is left on the host — not a
/// background one, not a `setsid` escapee, not a running command — checked through the
/// host's `/proc`, not through the backend.
pub async fn close_leaves_no_process_on_the_host(h: &Harness) {
    if !has_process_model(h, "close_leaves_no_process_on_the_host") {
        return;
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    // A sleep length no other test uses, so its argv marks this machine's processes.
    let secs = 2_000_000 + (u64::from(std::process::id()) * 7919 + u64::from(nanos)) % 1_000_000;
    let needle = format!("sleep\0{secs}\0");
    let m = h.machine().await;
    sh(
        &*m,
        &format!("sleep {secs} >/dev/null 2>&1 & setsid sleep {secs} >/dev/null 2>&1 & echo ok"),
    )
    .await;
    let running = m
        .run_stream(Command::shell(format!("sleep {secs}; true")).timeout(Duration::from_secs(600)))
        .await
        .unwrap();
    let started = Instant::now();
    while host_processes_with(needle.as_bytes()).len() < 3 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the machine's sleeps never showed in the host's /proc: {:?}",
            host_processes_with(needle.as_bytes())
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    m.close().await.unwrap();
    drop(running);
    let closed = Instant::now();
    loop {
        let left = host_processes_with(needle.as_bytes());
        if left.is_empty() {
            break;
        }
        assert!(
            closed.elapsed() < Duration::from_secs(10),
            "processes of a closed machine still run on the host: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// A snapshot handle of a backend no factory has: every factory must refuse it.
struct ForeignSnapshot;

#[async_trait::async_trait]
impl crate::SnapshotHandle for ForeignSnapshot {
    fn backend(&self) -> &'static str {
        "conformance-foreign"
    }
    fn id(&self) -> &str {
        "foreign-1"
    }
    async fn delete(&self) -> Result<(), Error> {
        Ok(())
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// The error `create_from` must give for `snapshot` (a machine instead is a failure).
async fn create_from_error(h: &Harness, snapshot: &crate::Snapshot) -> Error {
    match h.factory.create_from(snapshot, h.spec.clone()).await {
        Ok(m) => {
            let _ = m.close().await;
            panic!(
                "create_from({snapshot:?}) made a machine on {}",
                h.factory.backend()
            )
        }
        Err(e) => e,
    }
}

/// Whether the harness's backend declares snapshots (no SKIP line when it does not, as for
/// the process model).
fn has_snapshots(h: &Harness) -> bool {
    h.factory.capabilities().snapshots
}

/// A backend that does not declare [`Capabilities::snapshots`](crate::Capabilities::snapshots)
/// refuses `snapshot`, `create_from` and `fork` with [`Error::Unsupported`], and the
/// machine keeps working.
pub async fn snapshot_refused_unless_declared(h: &Harness) {
    if has_snapshots(h) {
        return;
    }
    let m = h.machine().await;
    let e = m.snapshot().await.unwrap_err();
    assert!(e.is_unsupported(), "snapshot: {e:?}");
    let foreign = crate::Snapshot::new(ForeignSnapshot);
    let e = create_from_error(h, &foreign).await;
    assert!(e.is_unsupported(), "create_from: {e:?}");
    let e = h
        .factory
        .fork(&*m, h.spec.clone())
        .await
        .map(|_| ())
        .unwrap_err();
    assert!(e.is_unsupported(), "fork: {e:?}");
    assert_eq!(text(&sh(&*m, "echo ok").await.stdout), "ok\n");
    m.close().await.unwrap();
}

/// The files of a machine at snapshot time: contents, a mode, a symlink's target and a
/// directory listing, one per line.
const SNAPSHOT_STATE: &str =
    "cat snap/a; cat snap/sub/b; stat -c %a snap/x; readlink snap/link; ls snap";

/// A machine started from a snapshot sees the files as they were when it was taken —
/// contents, modes, symlinks, directories — and none of the source's later writes; the
/// source machine keeps its own later state, and `fork` sees the source as it is now.
pub async fn fork_sees_files_at_snapshot_time(h: &Harness) {
    if !has_snapshots(h) {
        return;
    }
    let m = h.machine().await;
    let r = sh(
        &*m,
        "mkdir -p snap/sub && echo one > snap/a && echo two > snap/sub/b && \
         echo x > snap/x && chmod 750 snap/x && ln -s sub/b snap/link",
    )
    .await;
    assert_eq!(r.exit_code, Some(0), "{r:?}");
    let snapshot = m.snapshot().await.expect("snapshot");
    assert_eq!(snapshot.backend(), h.factory.backend());
    let r = sh(
        &*m,
        "echo changed > snap/a && rm -r snap/sub && chmod 600 snap/x && rm snap/link && \
         echo later > snap/later",
    )
    .await;
    assert_eq!(r.exit_code, Some(0), "{r:?}");
    let fork = h
        .factory
        .create_from(&snapshot, h.spec.clone())
        .await
        .expect("create_from");
    let r = sh(&*fork, SNAPSHOT_STATE).await;
    assert_eq!(
        text(&r.stdout),
        "one\ntwo\n750\nsub/b\na\nlink\nsub\nx\n",
        "fork: {r:?}"
    );
    let r = sh(&*m, "cat snap/a; stat -c %a snap/x; ls snap").await;
    assert_eq!(
        text(&r.stdout),
        "changed\n600\na\nlater\nx\n",
        "source: {r:?}"
    );
    let now = h.factory.fork(&*m, h.spec.clone()).await.expect("fork");
    let r = sh(&*now, "cat snap/a; ls snap").await;
    assert_eq!(
        text(&r.stdout),
        "changed\na\nlater\nx\n",
        "second fork: {r:?}"
    );
    now.close().await.unwrap();
    fork.close().await.unwrap();
    m.close().await.unwrap();
    let e = m.snapshot().await.unwrap_err();
    assert!(matches!(e, Error::Closed), "snapshot after close: {e:?}");
}

/// Two machines started from one snapshot, and the machine it was taken from, never see
/// each other's writes, to files that existed at snapshot time or to new ones.
pub async fn forks_are_private(h: &Harness) {
    if !has_snapshots(h) {
        return;
    }
    let m = h.machine().await;
    let r = sh(
        &*m,
        "mkdir -p shared && echo base > shared/f && echo x > shared/gone",
    )
    .await;
    assert_eq!(r.exit_code, Some(0), "{r:?}");
    let snapshot = m.snapshot().await.expect("snapshot");
    let first = h
        .factory
        .create_from(&snapshot, h.spec.clone())
        .await
        .expect("first create_from");
    let second = h
        .factory
        .create_from(&snapshot, h.spec.clone())
        .await
        .expect("second create_from");
    let machines: [(&dyn Machine, &str); 3] =
        [(&*m, "parent"), (&*first, "first"), (&*second, "second")];
    for (machine, name) in machines {
        let r = sh(
            machine,
            &format!("echo {name} >> shared/f && echo {name} > shared/{name} && rm shared/gone"),
        )
        .await;
        assert_eq!(r.exit_code, Some(0), "{name}: {r:?}");
    }
    for (machine, name) in machines {
        let r = sh(machine, "cat shared/f; ls shared").await;
        assert_eq!(
            text(&r.stdout),
            format!("base\n{name}\nf\n{name}\n"),
            "{name} sees only its own writes: {r:?}"
        );
    }
    for (machine, _) in machines {
        machine.close().await.unwrap();
    }
}

/// Deleting a snapshot, or dropping every handle of it, leaves the machines started from it
/// working with their files; `create_from` after `delete` fails with [`Error::Closed`], and
/// a second `delete` is not an error.
pub async fn deleted_snapshot_keeps_its_forks(h: &Harness) {
    if !has_snapshots(h) {
        return;
    }
    let m = h.machine().await;
    sh(&*m, "echo kept > kept").await;
    let snapshot = m.snapshot().await.expect("snapshot");
    let fork = h
        .factory
        .create_from(&snapshot, h.spec.clone())
        .await
        .expect("create_from");
    let clone = snapshot.clone();
    snapshot.delete().await.expect("delete");
    clone.delete().await.expect("a second delete");
    let e = create_from_error(h, &clone).await;
    assert!(
        matches!(e, Error::Closed),
        "create_from a deleted snapshot: {e:?}"
    );
    drop(clone);
    let r = sh(&*fork, "cat kept && echo new > new && cat new").await;
    assert_eq!(text(&r.stdout), "kept\nnew\n", "{r:?}");
    let dropped = m.snapshot().await.expect("second snapshot");
    let orphan = h
        .factory
        .create_from(&dropped, h.spec.clone())
        .await
        .expect("create_from the second snapshot");
    drop(dropped);
    m.close().await.unwrap();
    let r = sh(&*orphan, "cat kept").await;
    assert_eq!(text(&r.stdout), "kept\n", "{r:?}");
    orphan.close().await.unwrap();
    fork.close().await.unwrap();
}

/// A snapshot another backend took is refused with [`Error::Unsupported`] naming it.
pub async fn foreign_snapshot_refused(h: &Harness) {
    if !has_snapshots(h) {
        return;
    }
    let foreign = crate::Snapshot::new(ForeignSnapshot);
    let e = create_from_error(h, &foreign).await;
    assert!(e.is_unsupported(), "{e:?}");
    assert!(e.to_string().contains("conformance-foreign"), "{e}");
}

/// (Where declared, [`Capabilities::private_system_directories`](crate::Capabilities))
/// Two machines write the same new files under `/usr/local/bin`, `/etc` and `/opt` as root;
/// each reads back only its own, and neither file appears on the host, during or after.
pub async fn system_directories_are_private(h: &Harness) {
    if !h.factory.capabilities().private_system_directories {
        return;
    }
    let name = format!(
        "sb-private-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default()
    );
    let paths = ["/usr/local/bin", "/etc", "/opt"].map(|d| format!("{d}/{name}"));
    let a = h.machine().await;
    let b = h.machine().await;
    for (m, tag) in [(&a, "a"), (&b, "b")] {
        let script = format!(
            "mkdir -p /usr/local/bin /opt && for p in {}; do printf {tag} > \"$p\" || exit 1; done",
            paths.join(" ")
        );
        let r = run_root(&**m, &script).await;
        assert_eq!(r.exit_code, Some(0), "{script}: {r:?}");
    }
    for (m, tag) in [(&a, "a"), (&b, "b")] {
        let r = run_root(&**m, &format!("cat {}", paths.join(" "))).await;
        assert_eq!(
            (r.exit_code, text(&r.stdout)),
            (Some(0), tag.repeat(3)),
            "each machine sees only its own files: {r:?}"
        );
    }
    let on_host = || {
        paths
            .iter()
            .filter(|p| std::path::Path::new(p.as_str()).exists())
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        on_host(),
        Vec::<String>::new(),
        "a machine's write reached the host"
    );
    a.close().await.unwrap();
    b.close().await.unwrap();
    assert_eq!(
        on_host(),
        Vec::<String>::new(),
        "a machine's write reached the host"
    );
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
            check_environment_agrees_with_create,
            packages_source,
            bounded_file_download,
            bounded_file_download_resolves_in_the_machine,
            directory_download_keeps_links,
            closed_machine_errors,
            concurrent_commands,
            machines_are_isolated,
            run_stream_matches_run,
            session_state_persists,
            session_running_then_read,
            session_write_feeds_read,
            session_unread_input_is_discarded,
            session_prompt_survives_shadowed_commands,
            session_interrupt,
            session_prompt_cannot_be_faked,
            session_interrupt_races_the_command,
            session_late_interrupt_is_harmless,
            session_write_racing_the_end_keeps_answers_in_step,
            session_interrupt_racing_the_end_hits_nothing,
            session_commands_get_default_signals,
            session_background_job_ending_between_calls,
            session_reset_after_exit,
            session_output_is_exact,
            session_plumbing_changes,
            session_output_limit,
            session_close,
            background_process_outlives_its_command,
            timeout_kills_only_its_command,
            timeout_before_the_command_starts_still_kills,
            cancel_kills_only_its_command,
            close_leaves_no_process_on_the_host,
            snapshot_refused_unless_declared,
            fork_sees_files_at_snapshot_time,
            forks_are_private,
            deleted_snapshot_keeps_its_forks,
            foreign_snapshot_refused,
            system_directories_are_private
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
