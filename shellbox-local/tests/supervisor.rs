//! The machine's supervisor (its PID 1, which starts every command under a keeper) against
//! attacks from the commands it runs, on real bwrap sandboxes.

mod common;

use std::time::Duration;

use shellbox_core::{Command, CommandResult, Error, ExitReason, Machine, MachineSpec};

async fn run(m: &dyn Machine, command: Command) -> CommandResult {
    let label = format!("{:?}", command.argv);
    m.run(command.timeout(Duration::from_secs(60)))
        .await
        .unwrap_or_else(|e| panic!("{label}: {e}"))
}

fn root(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    eprintln!("SKIP {test}: keepers run as their own account only from a root host process");
    false
}

/// A command can neither signal its keeper (so it cannot kill it or stop it from reporting),
/// nor its supervisor, nor open either's files; the exit status it reports is its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_cannot_reach_their_keeper_or_the_supervisor() {
    let test = "commands_cannot_reach_their_keeper_or_the_supervisor";
    let Some(factory) = common::factory(test) else {
        return;
    };
    if !root(test) {
        return;
    }
    let m = factory.create_local(MachineSpec::host()).await.unwrap();
    // Whatever the supervisor and keepers keep, a command has no capability at all, in any
    // set, as root or as another account.
    for user in [None, Some("nobody")] {
        let mut command = Command::shell("grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status");
        if let Some(user) = user {
            command = command.user(user);
        }
        let r = run(&m, command).await;
        let zero = "0000000000000000";
        assert_eq!(
            r.stdout_lossy(),
            format!("CapInh:\t{zero}\nCapPrm:\t{zero}\nCapEff:\t{zero}\nCapBnd:\t{zero}\nCapAmb:\t{zero}\n"),
            "{user:?}: {r:?}"
        );
    }
    // The keeper is the command's parent: killing or stopping it is refused (EPERM), and
    // the run reports the command's own status.
    let r = run(
        &m,
        Command::shell(
            "kill -9 $PPID 2>/dev/null; echo kill $?; kill -STOP $PPID 2>/dev/null; echo stop $?; \
             for f in /proc/$PPID/fd/*; do (exec 3>\"$f\") 2>/dev/null && echo \"opened $f\"; done; \
             (exec 3</proc/$PPID/mem) 2>/dev/null && echo mem; echo fd; exit 3",
        ),
    )
    .await;
    assert_eq!(r.stdout_lossy(), "kill 1\nstop 1\nfd\n", "{r:?}");
    assert_eq!((r.exit_code, r.reason), (Some(3), ExitReason::Exited));
    // The same as another account.
    let r = run(
        &m,
        Command::shell("kill -9 $PPID 2>/dev/null; echo kill $?").user("nobody"),
    )
    .await;
    assert_eq!(r.stdout_lossy(), "kill 1\n", "{r:?}");
    // Every keeper of the machine (one per command still running or holding background
    // processes) is out of reach too: no signal, no fd, no memory.
    let r = run(
        &m,
        Command::shell(
            "sleep 1000 >/dev/null 2>&1 & \
             for p in /proc/[0-9]*; do \
               case $(tr '\\0' ' ' < $p/cmdline 2>/dev/null) in /proc/1/shellbox-supervisor*) ;; *) continue;; esac; \
               k=${p#/proc/}; echo keeper; \
               kill -9 $k 2>/dev/null && echo \"killed $k\"; \
               for f in $p/fd/*; do (exec 3>\"$f\") 2>/dev/null && echo \"opened $f\"; done; \
               (exec 3<$p/mem) 2>/dev/null && echo \"mem $k\"; \
             done; echo done",
        ),
    )
    .await;
    let text = r.stdout_lossy();
    assert!(text.starts_with("keeper\n"), "{r:?}");
    assert!(text.lines().all(|l| l == "keeper" || l == "done"), "{r:?}");
    // PID 1 (the supervisor) ignores every signal from inside and shows nothing in /proc.
    let r = run(
        &m,
        Command::shell(
            "kill -9 1; kill -STOP 1; kill -TERM 1; ls -A /proc/1; \
             (exec 3</proc/1/fd/0) 2>/dev/null && echo opened; echo done",
        ),
    )
    .await;
    assert_eq!(r.stdout_lossy(), "shellbox-supervisor\ndone\n", "{r:?}");
    // The machine still runs commands, and the background sleeper still lives.
    let r = run(
        &m,
        Command::shell("pgrep -x sleep >/dev/null && echo alive"),
    )
    .await;
    assert_eq!(r.stdout_lossy(), "alive\n", "{r:?}");
    m.close().await.unwrap();
}

/// More than 1 MiB of argv plus environment is `InvalidInput` for that command only: the
/// machine keeps running commands, and a large request within the bound runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_requests_are_refused_without_harming_the_machine() {
    let test = "oversized_requests_are_refused_without_harming_the_machine";
    let Some(factory) = common::factory(test) else {
        return;
    };
    let m = factory.create_local(MachineSpec::host()).await.unwrap();
    let big = "x".repeat(128 * 1024 - 1);
    // 12 arguments of 128 KiB: 1.5 MiB.
    let err = m
        .run(Command::new("true").args(std::iter::repeat_n(big.clone(), 12)))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    // The same in the environment, and a request past the 4 MiB frame.
    let mut command = Command::new("true");
    for i in 0..12 {
        command = command.env(format!("V{i}"), big.clone());
    }
    let err = m.run(command).await.unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    let err = m
        .run(Command::new("true").args(std::iter::repeat_n(big.clone(), 40)))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    // Within the bound: 6 arguments of 128 KiB reach the command whole.
    let r = run(
        &m,
        Command::new("sh")
            .arg("-c")
            .arg("echo $# ${#1}")
            .arg("sh")
            .args(std::iter::repeat_n(big, 6)),
    )
    .await;
    assert_eq!(r.stdout_lossy(), format!("6 {}\n", 128 * 1024 - 1), "{r:?}");
    let r = run(&m, Command::shell("echo still here")).await;
    assert_eq!(r.stdout_lossy(), "still here\n");
    m.close().await.unwrap();
}

/// Output is framed: arbitrary bytes (NUL, invalid UTF-8, a byte sequence that looks like a
/// frame header) of interleaved concurrent commands arrive exact and apart, and a flood
/// past the limit crosses only up to the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn framing_keeps_concurrent_binary_outputs_apart() {
    let test = "framing_keeps_concurrent_binary_outputs_apart";
    let Some(factory) = common::factory(test) else {
        return;
    };
    let m = factory.create_local(MachineSpec::host()).await.unwrap();
    let script = |n: u8| {
        format!(
            "i=0; while [ $i -lt 200 ]; do printf '\\000\\377\\021\\000\\000\\000\\001{n}'; \
             printf 'e{n}' >&2; i=$((i+1)); done"
        )
    };
    let runs: Vec<_> = (0..4u8)
        .map(|n| m.run(Command::shell(script(n)).timeout(Duration::from_secs(60))))
        .collect();
    let results = futures::future::join_all(runs).await;
    for (n, r) in results.into_iter().enumerate() {
        let r = r.unwrap();
        let mut want = Vec::new();
        for _ in 0..200 {
            want.extend_from_slice(b"\0\xff\x11\0\0\0\x01");
            want.extend_from_slice(n.to_string().as_bytes());
        }
        assert_eq!(r.stdout.as_ref(), want.as_slice(), "command {n}");
        assert_eq!(r.stderr_lossy(), format!("e{n}").repeat(200));
    }
    let r = run(
        &m,
        Command::shell("head -c 50000000 /dev/zero; echo done >&2").output_limit_bytes(1000),
    )
    .await;
    assert_eq!(r.stdout.len(), 1000);
    assert!(r.stdout_truncated && !r.stderr_truncated, "{r:?}");
    assert_eq!(r.stderr_lossy(), "done\n");
    m.close().await.unwrap();
}
