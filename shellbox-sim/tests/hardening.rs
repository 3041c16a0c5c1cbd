//! Issue 8 (hardening) on the simulator: deadlines that saturate, floods under a small
//! output cap, uploads onto `/`, and the cross-backend rules of item 15 (RULES-15).

use std::time::{Duration, Instant};

use shellbox_core::{Command, Error, ExitReason, Machine, MachineSpec};
use shellbox_sim::{SimMachine, SimMachineFactory};

fn machine() -> SimMachine {
    SimMachineFactory::new()
        .create_sim(MachineSpec::sim())
        .unwrap()
}

/// Item 8: `Duration::MAX` is no deadline, not a panic (it made `true` exit 1).
#[test]
fn a_huge_timeout_is_no_deadline() {
    let m = machine();
    for cmd in [
        Command::new("true"),
        Command::shell("for i in 1 2 3; do :; done; echo ok"),
    ] {
        let r = m.run_sync(cmd.clone().timeout(Duration::MAX)).unwrap();
        assert_eq!(r.exit_code, Some(0), "{r:?}");
        assert_eq!(r.reason, ExitReason::Exited);
        let r = m
            .run_sync(cmd.timeout(Duration::from_secs(u64::MAX / 2)))
            .unwrap();
        assert_eq!(r.exit_code, Some(0), "{r:?}");
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let r = rt
        .block_on(m.run(Command::shell("echo hi").timeout(Duration::MAX)))
        .unwrap();
    assert_eq!(r.stdout, "hi\n");
    assert_eq!(r.exit_code, Some(0));
}

/// Item 9: a flood over a small output cap keeps the first N bytes, flags truncation and
/// reports the command's real status, as local and docker do.
#[test]
fn a_flood_under_a_small_cap_keeps_the_first_bytes() {
    let m = machine();
    let started = Instant::now();
    let r = m
        .run_sync(
            Command::shell("head -c 200000000 /dev/zero; echo done >&2")
                .output_limit_bytes(64 << 10)
                .timeout(Duration::from_secs(60)),
        )
        .unwrap();
    assert_eq!(r.exit_code, Some(0), "{r:?}");
    assert_eq!(r.stdout.len(), 64 << 10);
    assert!(r.stdout.iter().all(|b| *b == 0));
    assert!(r.stdout_truncated);
    assert_eq!(r.stderr, "done\n");
    assert!(!r.stderr_truncated);
    assert!(started.elapsed() < Duration::from_secs(30));
    // the machine lives on
    let r = m.run_sync(Command::shell("echo ok")).unwrap();
    assert_eq!(r.stdout, "ok\n");
}

/// Item 10: uploading a file onto `/` is refused as on local and docker.
#[test]
fn a_file_cannot_replace_the_root() {
    let m = machine();
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("f");
    std::fs::write(&f, "x").unwrap();
    let e = m.upload_sync(&f, "/").unwrap_err();
    assert!(matches!(e, Error::Transfer { .. }), "{e:?}");
    assert!(
        e.to_string()
            .contains("a file cannot replace the machine root"),
        "{e}"
    );
    let r = m.run_sync(Command::shell("ls -a /")).unwrap();
    assert!(!r.stdout.starts_with(b"\n"), "{r:?}");
    assert!(
        !String::from_utf8_lossy(&r.stdout).contains("\n\n"),
        "{r:?}"
    );
    // a directory still merges into the root
    std::fs::create_dir(dir.path().join("d")).unwrap();
    std::fs::write(dir.path().join("d/inside"), "y").unwrap();
    m.upload_sync(&dir.path().join("d"), "/").unwrap();
    let r = m.run_sync(Command::shell("cat /inside")).unwrap();
    assert_eq!(r.stdout, "y");
}

/// RULES-15 rule 2: an unknown user is Unsupported and named.
#[test]
fn an_unknown_user_is_unsupported_and_named() {
    let m = machine();
    let e = m.run_sync(Command::new("true").user("nobody")).unwrap_err();
    assert!(e.is_unsupported(), "{e:?}");
    assert!(e.to_string().contains("no such user: nobody"), "{e}");
    for ok in ["root", "0"] {
        let r = m.run_sync(Command::new("true").user(ok)).unwrap();
        assert_eq!(r.exit_code, Some(0));
    }
}

/// RULES-15 rule 3: a working directory under /proc, /sys or /dev is Unsupported.
#[test]
fn kernel_provided_workdirs_are_unsupported() {
    let f = SimMachineFactory::new();
    for dir in ["/proc", "/sys/kernel", "/dev", "/dev/shm"] {
        let e = f.create_sim(MachineSpec::sim().workdir(dir)).unwrap_err();
        assert!(e.is_unsupported(), "{dir}: {e:?}");
        let m = machine();
        let e = m.run_sync(Command::new("pwd").cwd(dir)).unwrap_err();
        assert!(e.is_unsupported(), "{dir}: {e:?}");
        assert!(e.to_string().contains("kernel-provided"), "{e}");
    }
    // a look-alike is an ordinary directory
    let m = f
        .create_sim(MachineSpec::sim().workdir("/devices"))
        .unwrap();
    let r = m.run_sync(Command::new("pwd")).unwrap();
    assert_eq!(r.stdout, "/devices\n");
}

/// RULES-15 rules 4 and 5: kernel-provided paths are never transferred, a device reached
/// through a link is a Transfer error (never an endless read), a missing source NotFound.
#[test]
fn transfers_follow_the_shared_rules() {
    let m = machine();
    let dir = tempfile::tempdir().unwrap();
    for src in [
        "/dev/zero",
        "/dev/null",
        "/dev",
        "/proc/self/status",
        "/sys",
    ] {
        let e = m.download_sync(src, &dir.path().join("out")).unwrap_err();
        assert!(e.is_unsupported(), "{src}: {e:?}");
    }
    let f = dir.path().join("f");
    std::fs::write(&f, "x").unwrap();
    for target in ["/dev/x", "/proc/x", "/sys/x"] {
        let e = m.upload_sync(&f, target).unwrap_err();
        assert!(e.is_unsupported(), "{target}: {e:?}");
    }
    m.run_sync(Command::shell("ln -s /dev/zero /tmp/z"))
        .unwrap();
    let e = m
        .download_sync("/tmp/z", &dir.path().join("z"))
        .unwrap_err();
    assert!(matches!(e, Error::Transfer { .. }), "{e:?}");
    assert!(
        e.to_string()
            .contains("only regular files, directories and symlinks can be transferred"),
        "{e}"
    );
    assert!(!dir.path().join("z").exists());
    let e = m
        .download_sync("/no/such", &dir.path().join("n"))
        .unwrap_err();
    assert!(matches!(e, Error::NotFound { .. }), "{e:?}");
    assert_eq!(e.to_string(), "No such file or directory: /no/such");
    let e = m
        .upload_sync(&dir.path().join("missing"), "/tmp/m")
        .unwrap_err();
    assert!(matches!(e, Error::NotFound { .. }), "{e:?}");
}
