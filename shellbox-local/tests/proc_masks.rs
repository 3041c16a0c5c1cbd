//! A security review of the local backend, against real bwrap sandboxes: the sandbox's
//! PID 1 (bwrap's init) cannot be read or written by the command, Docker's masked `/proc`
//! paths are masked, and `/dev/shm` is bounded.

mod common;

use std::path::Path;
use std::time::Duration;

use shellbox_core::{Command, CommandResult, Machine, MachineSpec};

/// The host's `python3` as the sandbox sees it (the system directories are the host's).
const PYTHON: &str = "/usr/bin/python3";

async fn run(m: &dyn Machine, command: Command) -> CommandResult {
    let label = format!("{:?}", command.argv);
    m.run(command.timeout(Duration::from_secs(60)))
        .await
        .unwrap_or_else(|e| panic!("{label}: {e}"))
}

fn have_python(test: &str) -> bool {
    if Path::new(PYTHON).is_file() {
        return true;
    }
    eprintln!("SKIP {test}: no {PYTHON} on the host");
    false
}

/// Writes a `jmp .` over the instruction PID 1 returns to from its current system call
/// (bwrap's init waits in `wait(2)`), through `/proc/1/mem`.
const HANG_PID_1: &str = r#"
import os
rip = int(open('/proc/1/syscall').read().split()[-1], 16)
fd = os.open('/proc/1/mem', os.O_RDWR)
os.lseek(fd, rip, 0)
os.write(fd, b'\xeb\xfe')
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pid_1_memory_is_out_of_reach() {
    let test = "pid_1_memory_is_out_of_reach";
    let Some(factory) = common::factory(test) else {
        return;
    };
    if !have_python(test) {
        return;
    }
    let m = factory.create_local(MachineSpec::host()).await.unwrap();
    // The tester's repro: before the fix PID 1 spun, never reaped the command, and the run
    // ended with a timeout (exit 124) instead of the command's 3.
    let r = m
        .run(
            Command::shell(format!("{PYTHON} -c \"$0\" 2>/dev/null; exit 3"))
                .arg(HANG_PID_1)
                .timeout(Duration::from_secs(10)),
        )
        .await
        .unwrap();
    assert_eq!(r.exit_code, Some(3), "{r:?}");
    // No file of PID 1 can be opened: not its memory (read or write), its current system
    // call, its environment or its command line (which names the machine root's host path).
    let r = run(
        &m,
        Command::shell(
            "for f in mem syscall environ cmdline maps status task/1/mem; do \
               if (exec 3<>/proc/1/$f) 2>/dev/null || (exec 3</proc/1/$f) 2>/dev/null; \
               then echo \"open $f\"; fi; \
             done; echo done",
        ),
    )
    .await;
    assert_eq!(r.stdout_lossy(), "done\n", "{r:?}");
    // The command's own processes stay visible and readable.
    let r = run(
        &m,
        // The child may not have exec'd sleep yet when first read: retry briefly.
        Command::shell(
            "sleep 30 & p=$!; for i in 1 2 3 4 5 6 7 8 9 10; do \
               c=$(tr '\\0' ' ' < /proc/$p/cmdline); case $c in sleep*) break;; esac; \
               sleep 0.1; done; printf %s \"$c\"; kill $p",
        ),
    )
    .await;
    assert_eq!(r.stdout_lossy(), "sleep 30 ", "{r:?}");
    m.close().await.unwrap();
}

/// `pidfd_getfd(2)` would copy PID 1's file descriptors (its end of the status channel to
/// the monitor) into the command; `process_madvise(2)` acts on another process's memory.
const PIDFD_CALLS: &str = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
pidfd = os.pidfd_open(1)
for name, nr, args in [("pidfd_getfd", int(sys.argv[1]), (pidfd, 0, 0)),
                       ("process_madvise", int(sys.argv[2]), (pidfd, 0, 0, 20, 0))]:
    r = libc.syscall(nr, *[ctypes.c_long(a) for a in args])
    print(name, ctypes.get_errno() if r < 0 else 0)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pidfd_calls_on_pid_1_are_refused() {
    let test = "pidfd_calls_on_pid_1_are_refused";
    let Some(factory) = common::factory(test) else {
        return;
    };
    if !have_python(test) {
        return;
    }
    let m = factory.create_local(MachineSpec::host()).await.unwrap();
    let r = run(
        &m,
        Command::new(PYTHON)
            .arg("-c")
            .arg(PIDFD_CALLS)
            .arg(libc::SYS_pidfd_getfd.to_string())
            .arg(libc::SYS_process_madvise.to_string()),
    )
    .await;
    assert_eq!(
        r.stdout_lossy(),
        format!(
            "pidfd_getfd {}\nprocess_madvise {}\n",
            libc::EPERM,
            libc::EPERM
        ),
        "{r:?}"
    );
    m.close().await.unwrap();
}

/// Docker's default masked paths (moby `oci/defaults.go`, `MaskedPaths`) under `/proc`.
const DOCKER_MASKED_PROC: [&str; 9] = [
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_masked_proc_paths_show_nothing() {
    let Some(factory) = common::factory("docker_masked_proc_paths_show_nothing") else {
        return;
    };
    let m = factory.create_local(MachineSpec::host()).await.unwrap();
    let mut checked = 0;
    for path in DOCKER_MASKED_PROC {
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            continue;
        };
        checked += 1;
        // A file reads empty (writes are discarded, as into Docker's masks), a directory lists
        // nothing and cannot be written.
        let script = if meta.is_dir() {
            format!("ls -A {path}; touch {path}/x 2>/dev/null && echo wrote; echo done")
        } else {
            format!("cat {path}; echo x 2>/dev/null > {path}; cat {path}; echo done")
        };
        let r = run(&m, Command::shell(script)).await;
        assert_eq!(r.stdout_lossy(), "done\n", "{path}: {r:?}");
    }
    eprintln!("checked {checked} masked paths");
    // The machine's /sys is an empty directory of its own: no /sys/firmware to mask.
    let r = run(&m, Command::shell("ls -A /sys; echo done")).await;
    assert_eq!(r.stdout_lossy(), "done\n", "{r:?}");
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_shm_is_bounded() {
    let Some(factory) = common::factory("dev_shm_is_bounded") else {
        return;
    };
    let m = factory.create_local(MachineSpec::host()).await.unwrap();
    // 64 MiB fit (Docker's default `ShmSize`), one more MiB does not: ENOSPC.
    let r = run(
        &m,
        Command::shell(
            "head -c 64M /dev/zero > /dev/shm/a && echo fits; \
             head -c 1M /dev/zero >> /dev/shm/a; echo $?; rm /dev/shm/a",
        ),
    )
    .await;
    assert_eq!(r.stdout_lossy(), "fits\n1\n", "{r:?}");
    assert!(
        r.stderr_lossy().contains("No space left on device"),
        "{r:?}"
    );
    m.close().await.unwrap();
}
