//! The simulator's own behaviour: spec checks, budgets, virtual time, the virtual
//! filesystem, the unsupported-feature record.

use std::time::{Duration, Instant};

use shellbox_core::{Command, Error, ExitReason, MachineFactory, MachineSpec, NetworkPolicy};
use shellbox_sim::{SimMachine, SimMachineFactory, SimOptions};

fn machine() -> SimMachine {
    SimMachineFactory::new()
        .create_sim(MachineSpec::sim())
        .unwrap()
}

fn sh(m: &SimMachine, script: &str) -> shellbox_core::CommandResult {
    m.run_sync(Command::shell(script)).unwrap()
}

fn out(m: &SimMachine, script: &str) -> String {
    String::from_utf8_lossy(&sh(m, script).stdout).into_owned()
}

#[test]
fn issue_example_prints_1_2_3() {
    let m = machine();
    let r = m
        .run_sync(Command::from_argv([
            "sh",
            "-c",
            "for i in 1 2 3; do echo $i; done",
        ]))
        .unwrap();
    assert_eq!(r.stdout, "1\n2\n3\n");
    assert_eq!(r.exit_code, Some(0));
}

#[test]
fn spec_rejections_are_unsupported() {
    let f = SimMachineFactory::new();
    for spec in [
        MachineSpec::sim().cpus(1),
        MachineSpec::sim().gpus(1),
        MachineSpec::sim().network(NetworkPolicy::Allow),
        MachineSpec::host(),
        MachineSpec::docker("busybox"),
    ] {
        let e = f.create_sim(spec.clone()).unwrap_err();
        assert!(e.is_unsupported(), "{spec:?}: {e:?}");
    }
    assert!(matches!(
        f.create_sim(MachineSpec::sim().workdir("rel")),
        Err(Error::InvalidInput(_))
    ));
    // workdir is created at create
    let m = f
        .create_sim(MachineSpec::sim().workdir("/work/deep"))
        .unwrap();
    assert_eq!(out(&m, "pwd"), "/work/deep\n");
}

#[test]
fn only_root_user() {
    let m = machine();
    for u in ["0", "root"] {
        assert!(m.run_sync(Command::new("true").user(u)).unwrap().success());
    }
    let e = m.run_sync(Command::new("true").user("nobody")).unwrap_err();
    assert!(e.is_unsupported(), "{e:?}");
}

#[test]
fn default_environment_is_a_root_container() {
    let m = machine();
    let env = out(&m, "env");
    for line in [
        "HOME=/root",
        "USER=root",
        "LANG=C.UTF-8",
        "SHELL=/bin/bash",
        "HOSTNAME=sandbox",
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    ] {
        assert!(env.lines().any(|l| l == line), "{line} missing from {env}");
    }
    let m = SimMachineFactory::new()
        .create_sim(MachineSpec::sim().env("HOME", "/spec").env("X", "spec"))
        .unwrap();
    let r = m
        .run_sync(Command::shell("echo $HOME $X").env("X", "cmd"))
        .unwrap();
    assert_eq!(r.stdout, "/spec cmd\n");
}

#[test]
fn virtual_filesystem_has_bin_and_nothing_of_the_host() {
    let m = machine();
    let ls = out(&m, "ls /bin");
    for u in ["bash", "cat", "ls", "sh", "sleep", "wc"] {
        assert!(ls.lines().any(|l| l == u), "{u} missing from /bin: {ls}");
    }
    assert_eq!(
        out(&m, "command -v ls; command -v cd; type -t echo"),
        "/usr/bin/ls\ncd\nbuiltin\n"
    );
    assert_eq!(sh(&m, "test -e /etc/passwd || echo none").stdout, "none\n");
    assert_eq!(sh(&m, "perl -e 1").exit_code, Some(127));
    // scripts with the usual shebangs run
    let r = sh(
        &m,
        "printf '#!/usr/bin/env bash\\necho env-bash $1\\n' > /tmp/a; chmod +x /tmp/a; /tmp/a x; \
         printf '#!/bin/sh\\necho sh\\n' > /tmp/b; chmod 700 /tmp/b; /tmp/b",
    );
    assert_eq!(r.stdout, "env-bash x\nsh\n");
    // symlinks, hard links, modes
    let r = sh(
        &m,
        "cd /tmp && echo hi > f && ln -s f l && ln f h && cat l && stat -c '%h %a' f && \
         test -L l && echo link; chmod 600 f; stat -c %A f",
    );
    assert_eq!(r.stdout, "hi\n2 644\nlink\n-rw-------\n");
}

#[test]
fn unknown_command_is_127_with_bash_message() {
    let m = machine();
    let r = sh(&m, "foo");
    assert_eq!(r.exit_code, Some(127));
    assert_eq!(r.stderr, "bash: line 1: foo: command not found\n");
}

#[test]
fn unsupported_features_fail_visibly_and_are_recorded() {
    let m = machine();
    let r = sh(&m, "ls --color=never -Z /");
    assert_eq!(r.exit_code, Some(2));
    assert!(
        String::from_utf8_lossy(&r.stderr).contains("unsupported"),
        "{r:?}"
    );
    let r = sh(&m, "coproc cat");
    assert_eq!(r.exit_code, Some(2));
    sh(&m, "perl -e 1");
    sh(&m, "if then");
    let u = m.unsupported();
    assert!(u.iter().any(|x| x.contains("ls option -Z")), "{u:?}");
    assert!(u.iter().any(|x| x.contains("coproc")), "{u:?}");
    assert!(u.iter().any(|x| x == "command not found: perl"), "{u:?}");
    assert!(u.iter().any(|x| x.starts_with("syntax: ")), "{u:?}");
}

#[test]
fn sleep_uses_virtual_time() {
    let m = machine();
    let started = Instant::now();
    let r = m
        .run_sync(Command::shell("echo a; sleep 3600; echo b").timeout(Duration::from_secs(1)))
        .unwrap();
    assert_eq!(r.reason, ExitReason::TimedOut);
    assert_eq!(r.stdout, "a\n");
    assert!(started.elapsed() < Duration::from_secs(5));
    // date reads the virtual clock: 2024-01-01 plus the 1 s the timed-out sleep took
    let r = sh(&m, "date -u +%Y-%m-%dT%H:%M; sleep 90; date +%s");
    assert_eq!(r.stdout, "2024-01-01T00:00\n1704067291\n");
    // timeout(1) counts virtual time too
    assert_eq!(out(&m, "timeout 1 sleep 5; echo $?"), "124\n");
}

#[test]
fn wall_clock_guard_stops_a_busy_loop() {
    let m = machine();
    let started = Instant::now();
    let r = m
        .run_sync(
            Command::shell("echo start; while :; do :; done").timeout(Duration::from_millis(300)),
        )
        .unwrap();
    assert_eq!(r.reason, ExitReason::TimedOut);
    assert_eq!(r.stdout, "start\n");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(out(&m, "echo usable"), "usable\n");
}

#[test]
fn fuel_exhaustion_terminates_and_closes() {
    let f = SimMachineFactory::with_options(SimOptions {
        cpu_fuel: 10_000,
        ..SimOptions::default()
    });
    let m = f.create_sim(MachineSpec::sim()).unwrap();
    let e = m
        .run_sync(Command::shell("while :; do :; done"))
        .unwrap_err();
    match &e {
        Error::Terminated(reason) => assert!(reason.contains("fuel"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert!(m.is_closed());
    assert!(matches!(
        m.run_sync(Command::new("true")),
        Err(Error::Closed)
    ));
}

#[test]
fn disk_output_and_memory_budgets() {
    let m = SimMachineFactory::new()
        .create_sim(MachineSpec::sim().storage_mb(1))
        .unwrap();
    let e = m
        .run_sync(Command::shell(
            "s=xxxxxxxxxxxxxxxx; while :; do echo $s$s$s$s >> /tmp/big; done",
        ))
        .unwrap_err();
    assert!(
        matches!(&e, Error::Terminated(r) if r.contains("disk")),
        "{e:?}"
    );
    assert!(m.is_closed());

    let f = SimMachineFactory::with_options(SimOptions {
        output_bytes: 1000,
        ..SimOptions::default()
    });
    let m = f.create_sim(MachineSpec::sim()).unwrap();
    assert!(m.run_sync(Command::shell("echo small")).is_ok());
    let e = m
        .run_sync(Command::shell("while :; do echo flood; done"))
        .unwrap_err();
    assert!(
        matches!(&e, Error::Terminated(r) if r.contains("output")),
        "{e:?}"
    );

    let m = SimMachineFactory::new()
        .create_sim(MachineSpec::sim().memory_mb(1))
        .unwrap();
    let e = m
        .run_sync(Command::shell(
            "x=$(while :; do echo 0123456789abcdef; done)",
        ))
        .unwrap_err();
    assert!(
        matches!(&e, Error::Terminated(r) if r.contains("memory")),
        "{e:?}"
    );
    let m = SimMachineFactory::new()
        .create_sim(MachineSpec::sim().memory_mb(1))
        .unwrap();
    let e = m
        .run_sync(Command::shell("s=x; while :; do s=$s$s; done"))
        .unwrap_err();
    assert!(
        matches!(&e, Error::Terminated(r) if r.contains("memory")),
        "{e:?}"
    );
}

#[test]
fn deterministic_across_machines() {
    let script = "echo $$ $RANDOM; sleep 1 & echo $!; wait; date +%s; (echo $BASHPID)";
    let a = out(&machine(), script);
    let b = out(&machine(), script);
    assert_eq!(a, b);
}

#[tokio::test]
async fn machine_trait_and_factory_trait() {
    let f: Box<dyn MachineFactory> = Box::new(SimMachineFactory::new());
    assert_eq!(f.backend(), "sim");
    let m = f.create(MachineSpec::sim()).await.unwrap();
    let r = m.run(Command::shell("echo hi")).await.unwrap();
    assert_eq!(r.stdout, "hi\n");
    m.close().await.unwrap();
    assert!(matches!(
        m.run(Command::new("true")).await,
        Err(Error::Closed)
    ));
}

#[test]
fn upload_refuses_to_follow_guest_symlinks() {
    let m = machine();
    sh(&m, "mkdir -p /tmp/real && ln -s /tmp/real /tmp/link");
    let host = tempfile::tempdir().unwrap();
    let file = host.path().join("f");
    std::fs::write(&file, b"x").unwrap();
    let e = m.upload_sync(&file, "/tmp/link/f").unwrap_err();
    assert!(matches!(e, Error::Transfer { .. }), "{e:?}");
    let e = m.upload_sync(&file, "/tmp/link").unwrap_err();
    assert!(matches!(e, Error::Transfer { .. }), "{e:?}");
    assert_eq!(out(&m, "ls /tmp/real | wc -l"), "0\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_command_times_out_while_waiting() {
    use shellbox_core::Machine;
    let m = std::sync::Arc::new(machine());
    let busy = {
        let m = m.clone();
        tokio::spawn(async move {
            m.run(Command::shell("while :; do :; done").timeout(Duration::from_millis(800)))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let r = m
        .run(Command::shell("echo late").timeout(Duration::from_millis(200)))
        .await
        .unwrap();
    assert_eq!(r.reason, ExitReason::TimedOut, "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    let busy = busy.await.unwrap().unwrap();
    assert_eq!(busy.reason, ExitReason::TimedOut);
    let r = m.run(Command::shell("echo free")).await.unwrap();
    assert_eq!(r.stdout, "free\n");
}

#[test]
fn tar_round_trip_over_the_virtual_filesystem() {
    let m = machine();
    let r = sh(
        &m,
        "mkdir -p /src/p/q && echo hi > /src/p/a && echo b > /src/p/q/b && chmod 751 /src/p/q \
         && ln /src/p/a /src/p/hard && ln -s a /src/p/sym \
         && tar -cf - -C /src -- p > /tmp/x.tar && tar -tf /tmp/x.tar \
         && mkdir /out && tar -xf /tmp/x.tar -C /out && cat /out/p/a /out/p/q/b \
         && stat -c '%a %h' /out/p/q /out/p/a && test -L /out/p/sym && echo link",
    );
    assert_eq!(
        r.stdout, "p/\np/a\np/hard\np/q/\np/q/b\np/sym\nhi\nb\n751 2\n644 2\nlink\n",
        "{r:?}"
    );
    // the archive is a real tar: the host's tar crate reads it
    let host = tempfile::tempdir().unwrap();
    m.download_sync("/tmp/x.tar", &host.path().join("x.tar"))
        .unwrap();
    let bytes = std::fs::read(host.path().join("x.tar")).unwrap();
    let mut ar = tar::Archive::new(&bytes[..]);
    let names: Vec<String> = ar
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["p/", "p/a", "p/hard", "p/q/", "p/q/b", "p/sym"]);
    // compression is not simulated (yet)
    assert_eq!(sh(&m, "tar -czf /tmp/z.tgz /src").exit_code, Some(2));
}

#[test]
fn upload_refuses_special_files_without_opening_them() {
    let m = machine();
    // an endless device: refused at once, nothing read
    let e = m
        .upload_sync(std::path::Path::new("/dev/zero"), "/workspace/z")
        .unwrap_err();
    assert!(matches!(e, Error::Transfer { .. }), "{e:?}");
    assert!(e.to_string().contains("only regular files"), "{e}");
    // a FIFO (opening it would block forever), alone and inside a directory
    let host = tempfile::tempdir().unwrap();
    let fifo = host.path().join("f");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    let e = m.upload_sync(&fifo, "/workspace/z").unwrap_err();
    assert!(matches!(e, Error::Transfer { .. }), "{e:?}");
    let e = m.upload_sync(host.path(), "/workspace/d").unwrap_err();
    assert!(matches!(e, Error::Transfer { .. }), "{e:?}");
    assert!(!m.is_closed());
}

#[test]
fn upload_reads_no_more_than_the_disk_budget() {
    let m = SimMachineFactory::new()
        .create_sim(MachineSpec::sim().storage_mb(1))
        .unwrap();
    let host = tempfile::tempdir().unwrap();
    let big = host.path().join("big");
    std::fs::write(&big, vec![b'x'; 2 * 1024 * 1024]).unwrap();
    let e = m.upload_sync(&big, "/workspace/big").unwrap_err();
    assert!(matches!(e, Error::Terminated(_)), "{e:?}");
    let small = host.path().join("small");
    std::fs::write(&small, b"hello").unwrap();
    let m = machine();
    m.upload_sync(&small, "/workspace/s").unwrap();
    assert_eq!(out(&m, "cat /workspace/s"), "hello");
}

#[test]
fn download_strips_setuid_and_keeps_symlinks_as_links() {
    use std::os::unix::fs::PermissionsExt;
    let m = machine();
    sh(
        &m,
        "mkdir -p /d/sub && echo x > /d/f && chmod 4755 /d/f && chmod 2755 /d/sub \
         && ln -s ../f /d/sub/ok && ln -s f /d/ok2",
    );
    let host = tempfile::tempdir().unwrap();
    let t = host.path().join("out");
    m.download_sync("/d", &t).unwrap();
    let mode = std::fs::metadata(t.join("f")).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o755);
    let mode = std::fs::metadata(t.join("sub"))
        .unwrap()
        .permissions()
        .mode()
        & 0o7777;
    assert_eq!(mode, 0o755);
    assert_eq!(
        std::fs::read_link(t.join("sub/ok")).unwrap(),
        std::path::Path::new("../f")
    );
    assert_eq!(std::fs::read(t.join("ok2")).unwrap(), b"x\n");
    // links that lead out of the tree are copied as links too (as tar does, REFERENCE.md
    // 4.5), never followed
    for (i, link) in ["/etc/passwd", "../../x", "d/../../../x"]
        .iter()
        .enumerate()
    {
        sh(
            &m,
            &format!("rm -rf /e{i}; mkdir -p /e{i}/s && ln -s {link} /e{i}/s/l"),
        );
        let t = host.path().join(format!("e{i}"));
        m.download_sync(&format!("/e{i}"), &t).unwrap();
        assert_eq!(
            std::fs::read_link(t.join("s/l")).unwrap(),
            std::path::Path::new(link)
        );
    }
    // a chain: each link alone stays inside, together they climb out
    sh(
        &m,
        "mkdir -p /c/d && ln -s .. /c/d/up && ln -s up/../.. /c/d/x",
    );
    let c = host.path().join("c");
    m.download_sync("/c", &c).unwrap();
    assert_eq!(
        std::fs::read_link(c.join("d/x")).unwrap(),
        std::path::Path::new("up/../..")
    );
}

/// Security review: a refused download left a partial tree on the host, with a link that
/// escaped it (`m -> a/..` beside `a -> .`). Downloads are all or nothing, as on local and
/// docker: a device (a hard link to `/dev/null`) after links and files refuses the whole
/// tree, links written before it included.
#[test]
fn a_failed_download_leaves_nothing_on_the_host() {
    let m = machine();
    let host = tempfile::tempdir().unwrap();
    let cases = [
        "mkdir -p out; ln -s . out/a; ln -s a/.. out/m; ln /dev/null out/z",
        "mkdir -p out/a; echo 1 > out/a/1; ln -s /etc out/y; ln /dev/null out/z",
        "mkdir -p out/a; echo 1 > out/a/1; ln -s ../.. out/a/u; ln /dev/zero out/a/z",
    ];
    for (i, script) in cases.iter().enumerate() {
        sh(&m, &format!("rm -rf out; {script}"));
        let t = host.path().join(format!("x{i}/res"));
        let e = m.download_sync("/workspace/out", &t).unwrap_err();
        assert!(matches!(e, Error::Transfer { .. }), "{script}: {e:?}");
        assert!(
            std::fs::symlink_metadata(&t).is_err(),
            "{script}: {t:?} was left behind"
        );
        let left: Vec<_> = std::fs::read_dir(host.path()).unwrap().flatten().collect();
        assert!(
            left.iter()
                .all(|e| !e.file_name().to_string_lossy().starts_with("x")),
            "{script}: {left:?}"
        );
    }
    // a good download still lands whole, and a file lands in an existing directory
    sh(
        &m,
        "rm -rf out; mkdir -p out/a; echo 1 > out/a/1; ln -s a/1 out/l",
    );
    let t = host.path().join("ok");
    m.download_sync("/workspace/out", &t).unwrap();
    assert_eq!(std::fs::read(t.join("l")).unwrap(), b"1\n");
    m.download_sync("/workspace/out/a/1", &t).unwrap();
    assert_eq!(std::fs::read(t.join("1")).unwrap(), b"1\n");
}

#[tokio::test(flavor = "current_thread")]
async fn a_busy_run_does_not_block_the_executor_and_is_cancelled_on_drop() {
    let m = machine();
    let t = Instant::now();
    let r = tokio::time::timeout(
        Duration::from_millis(300),
        shellbox_core::Machine::run(&m, Command::shell("while :; do :; done")),
    )
    .await;
    assert!(r.is_err(), "the busy loop should still run");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    // the dropped run was cancelled: the machine is free again soon
    let t = Instant::now();
    let r = shellbox_core::Machine::run(&m, Command::shell("echo ok"))
        .await
        .unwrap();
    assert_eq!(r.stdout, "ok\n");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}

#[tokio::test(flavor = "current_thread")]
async fn close_cancels_a_busy_run() {
    let m = machine();
    let m2 = m.clone();
    let run = tokio::spawn(async move {
        shellbox_core::Machine::run(&m2, Command::shell("while :; do :; done")).await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t = Instant::now();
    shellbox_core::Machine::close(&m).await.unwrap();
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    let r = tokio::time::timeout(Duration::from_secs(5), run).await;
    assert!(r.is_ok(), "the run did not stop");
    assert!(m.is_closed());
    assert!(matches!(
        shellbox_core::Machine::run(&m, Command::new("true")).await,
        Err(Error::Closed)
    ));
}

#[test]
fn large_brace_expansions_never_give_a_wrong_answer() {
    let m = machine();
    assert_eq!(
        out(&m, "a=({1..100001}); echo ${#a[@]} ${a[100000]}"),
        "100001 100001\n"
    );
    let r = sh(&m, "for i in {1..2000000}; do :; done; echo $i");
    assert_eq!(r.exit_code, Some(2));
    assert_eq!(r.stdout, "");
    assert!(String::from_utf8_lossy(&r.stderr).contains("brace expansion"));
    assert!(m
        .unsupported()
        .iter()
        .any(|u| u.contains("brace expansion")));
}

#[test]
fn declare_case_attributes_fail_visibly() {
    let m = machine();
    let r = sh(&m, "declare -l x=ABC; echo $x");
    assert_eq!(r.exit_code, Some(0)); // the echo ran after the failed declare
    assert!(String::from_utf8_lossy(&r.stderr).contains("unsupported"));
    assert!(m.unsupported().iter().any(|u| u.contains("declare -l")));
    let r = sh(&m, "declare -u y=abc");
    assert_eq!(r.exit_code, Some(2));
}

#[test]
fn cd_and_octal_diagnostics_match_bash() {
    let m = machine();
    let r = sh(&m, "cd /nonexistent");
    assert_eq!(
        String::from_utf8_lossy(&r.stderr),
        "bash: line 1: cd: /nonexistent: No such file or directory\n"
    );
    let r = sh(&m, "echo $(( 08 ))");
    assert!(
        String::from_utf8_lossy(&r.stderr)
            .contains("08: value too great for base (error token is \"08\")"),
        "{:?}",
        r.stderr
    );
}

#[test]
fn a_fork_bomb_ends_quickly() {
    let m = machine();
    let t = Instant::now();
    let r = m.run_sync(Command::shell(":(){ :|:& };:")).unwrap();
    assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
    assert!(
        String::from_utf8_lossy(&r.stderr)
            .contains("fork: retry: Resource temporarily unavailable"),
        "{r:?}"
    );
    // the machine still works, and many sequential jobs are fine
    assert_eq!(
        out(&m, "for i in $(seq 5000); do true & done; wait; echo done"),
        "done\n"
    );
}

#[test]
fn a_doubling_variable_stays_within_the_memory_budget() {
    let m = SimMachineFactory::with_options(SimOptions {
        memory_bytes: Some(64 * 1024 * 1024),
        ..SimOptions::default()
    })
    .create_sim(MachineSpec::sim())
    .unwrap();
    // 2^25 bytes = 32 MiB: with the old value and the builder's flags that is > 64 MiB live
    let r = m.run_sync(Command::shell(
        "x=a; i=0; while [ $i -lt 25 ]; do x=$x$x; i=$((i+1)); done; echo ${#x}",
    ));
    assert!(
        matches!(r, Err(Error::Terminated(ref why)) if why.contains("memory")),
        "{r:?}"
    );
    // an endless doubling loop ends the same way
    let m = SimMachineFactory::with_options(SimOptions {
        memory_bytes: Some(64 * 1024 * 1024),
        ..SimOptions::default()
    })
    .create_sim(MachineSpec::sim())
    .unwrap();
    let r = m.run_sync(Command::shell("x=a; while :; do x=$x$x; done"));
    assert!(matches!(r, Err(Error::Terminated(_))), "{r:?}");
    // small values are untouched
    assert_eq!(
        out(
            &machine(),
            "x=a; for i in 1 2 3 4; do x=$x$x; done; echo ${#x}"
        ),
        "16\n"
    );
}

#[test]
fn dev_zero_and_urandom_are_endless() {
    let m = machine();
    assert_eq!(out(&m, "head -c 200000 /dev/zero | wc -c"), "200000\n");
    assert_eq!(
        out(&m, "cat /dev/zero | head -c 300000 | wc -c"),
        "300000\n"
    );
    assert_eq!(out(&m, "head -c 150000 < /dev/zero | wc -c"), "150000\n");
    assert_eq!(out(&m, "head -c 1000 /dev/urandom | wc -c"), "1000\n");
    // deterministic across machines, and not all zeros
    let a = sh(&machine(), "head -c 64 /dev/urandom").stdout;
    let b = sh(&machine(), "head -c 64 /dev/urandom").stdout;
    assert_eq!(a, b);
    assert!(a.iter().any(|&x| x != 0));
    // reading one whole is never a wrong finite answer
    let r = sh(&m, "wc -c /dev/zero");
    assert_ne!(String::from_utf8_lossy(&r.stdout), "131072 /dev/zero\n");
    assert_ne!(r.exit_code, Some(0));
    // security review: a count over the memory budget streams, bounded by the output limit
    let r = m
        .run_sync(
            Command::shell("head -c 3000000000 /dev/zero; echo $? >&2")
                .output_limit_bytes(1 << 20)
                .timeout(Duration::from_secs(120)),
        )
        .unwrap();
    assert_eq!(r.stderr, "0\n", "{r:?}");
    assert_eq!(r.stdout.len(), 1 << 20);
    assert!(r.stdout_truncated);
    assert_eq!(out(&m, "head -n 3 /dev/urandom | wc -l"), "3\n");
    assert_eq!(
        out(&m, "head -c 5000000000 /dev/zero | head -c 70000 | wc -c"),
        "70000\n"
    );
}

/// A machine started from a snapshot gets the spec's budgets, workdir and env, and a clock
/// that goes on from the snapshot's, so none of its files is newer than its `now`; a spec
/// whose storage limit is below what the snapshot holds is refused.
#[test]
fn create_from_applies_the_spec() {
    let factory = SimMachineFactory::new();
    let m = machine();
    sh(
        &m,
        "head -c 3000000 /dev/zero > /big; sleep 100; touch /late",
    );
    let snapshot = m.snapshot_sync().unwrap();
    assert_eq!(snapshot.backend(), "sim");
    let spec = MachineSpec::sim()
        .workdir("/work/here")
        .env("ORIGIN", "fork");
    let fork = factory.create_from_sim(&snapshot, spec).unwrap();
    let r = sh(
        &fork,
        "pwd; echo $ORIGIN; wc -c < /big; touch /now; \
         if [ /late -nt /now ]; then echo clock-behind; else echo clock-ok; fi",
    );
    assert_eq!(
        String::from_utf8_lossy(&r.stdout),
        "/work/here\nfork\n3000000\nclock-ok\n",
        "{r:?}"
    );
    let small = MachineSpec::sim().storage_mb(1);
    let e = factory.create_from_sim(&snapshot, small).unwrap_err();
    assert!(matches!(e, Error::InvalidInput(_)), "{e:?}");
    assert!(e.to_string().contains("storage limit"), "{e}");
    m.close_sync();
    let e = m.snapshot_sync().unwrap_err();
    assert!(matches!(e, Error::Closed), "{e:?}");
}
