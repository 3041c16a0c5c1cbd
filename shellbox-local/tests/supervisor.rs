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

/// The most output of one command the host may hold that its reader did not take: the
/// supervisor's flow-control window (it never sends past its credit).
const HOST_BOUND: u64 = shellbox_supervisor::proto::OUTPUT_WINDOW_BYTES;

/// 256 MiB, more than any window, pipe or channel here holds.
const FLOOD: u64 = 256 << 20;

/// A command writing 256 MiB to a reader that takes its chunks slowly (and for a while not
/// at all) is held by its pipe: the host never buffers more than one flow-control window of
/// it, and every byte still arrives, in order, with the command's own exit status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_keeps_the_host_buffer_bounded() {
    use futures::StreamExt;
    use shellbox_core::Event;
    let test = "a_slow_reader_keeps_the_host_buffer_bounded";
    let Some(factory) = common::factory(test) else {
        return;
    };
    let m = factory.create_local(MachineSpec::host()).await.unwrap();
    let mut stream = m
        .run_stream(
            Command::from_argv(["head", "-c", &FLOOD.to_string(), "/dev/zero"])
                .output_limit_bytes(FLOOD)
                .timeout(Duration::from_secs(600)),
        )
        .await
        .unwrap();
    let (mut received, mut chunks, mut peak, mut status) = (0u64, 0u64, 0u64, None);
    while let Some(event) = stream.next().await {
        match event.unwrap() {
            Event::Stdout(b) => {
                assert!(b.iter().all(|&x| x == 0));
                received += b.len() as u64;
                chunks += 1;
                // Slow: a pause every chunk, and a long one now and then, so an unbounded
                // host buffer would fill with what `head` writes meanwhile.
                let pause = if chunks % 1024 == 1 { 500 } else { 1 };
                tokio::time::sleep(Duration::from_millis(pause)).await;
                peak = peak.max(m.supervisor_buffered_output_bytes());
            }
            Event::Stderr(b) => panic!("stderr: {}", String::from_utf8_lossy(&b)),
            Event::Exit(exit) => status = Some(exit),
        }
    }
    let status = status.expect("an exit status");
    assert_eq!(
        (status.reason, status.exit_code),
        (ExitReason::Exited, Some(0))
    );
    assert!(!status.stdout_truncated);
    assert_eq!(received, FLOOD);
    assert!(
        peak <= HOST_BOUND,
        "the host held {peak} bytes of unread output, over {HOST_BOUND}"
    );
    eprintln!("{test}: peak host buffer {peak} bytes over {chunks} chunks");
    assert_eq!(m.supervisor_buffered_output_bytes(), 0);
    m.close().await.unwrap();
}

/// While one command's reader takes nothing, that command blocks in its writes (the host
/// holds at most a window of it) and the machine's other commands run and finish; its
/// timeout still kills it, and the output before the kill and a timed-out status are
/// delivered once the reader reads. A dropped stream kills its blocked command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unread_command_stalls_no_other_command() {
    use futures::StreamExt;
    use shellbox_core::Event;
    let test = "an_unread_command_stalls_no_other_command";
    let Some(factory) = common::factory(test) else {
        return;
    };
    let m = factory.create_local(MachineSpec::host()).await.unwrap();
    let flood = |seconds| {
        Command::shell(format!("exec head -c {FLOOD} /dev/zero"))
            .output_limit_bytes(FLOOD)
            .timeout(Duration::from_secs(seconds))
    };
    let unread = m.run_stream(flood(600)).await.unwrap();
    // The unread command has filled its window (the host's share of it) ...
    let mut filled = false;
    for _ in 0..200 {
        if m.supervisor_buffered_output_bytes()
            >= shellbox_supervisor::proto::OUTPUT_WINDOW_BYTES / 2
        {
            filled = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(filled, "the unread command sent nothing");
    // ... and others still run, one after another and side by side.
    for i in 0..3 {
        let r = run(
            &m,
            Command::shell(format!(
                "echo second {i}; head -c 3000000 /dev/zero | wc -c"
            )),
        )
        .await;
        assert_eq!(r.stdout_lossy(), format!("second {i}\n3000000\n"), "{r:?}");
    }
    let r = run(&m, Command::shell("pgrep -xc head")).await;
    assert_eq!(
        r.stdout_lossy(),
        "1\n",
        "the unread command is still there, blocked: {r:?}"
    );
    let buffered = m.supervisor_buffered_output_bytes();
    assert!(
        buffered <= HOST_BOUND,
        "{buffered} bytes buffered, over {HOST_BOUND}"
    );

    // A blocked command's timeout still kills it; what it wrote before comes first. `cat`
    // never ends by itself: its stream ends only through the timeout.
    let mut timed = m
        .run_stream(
            Command::shell("exec cat /dev/zero")
                .output_limit_bytes(u64::MAX)
                .timeout(Duration::from_secs(2)),
        )
        .await
        .unwrap();
    let window = shellbox_supervisor::proto::OUTPUT_WINDOW_BYTES;
    let mut started = false;
    for _ in 0..200 {
        if m.supervisor_buffered_output_bytes() >= buffered + window / 2 {
            started = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(started, "the second unread command sent nothing");
    let mut gone = false;
    for _ in 0..200 {
        let r = run(&m, Command::shell("pgrep -xc cat")).await;
        if r.stdout_lossy() == "0\n" {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        gone,
        "the timed-out command was not killed while its reader read nothing"
    );
    let (mut received, mut status) = (0u64, None);
    while let Some(event) = timed.next().await {
        match event.unwrap() {
            Event::Stdout(b) => received += b.len() as u64,
            Event::Stderr(b) => panic!("stderr: {}", String::from_utf8_lossy(&b)),
            Event::Exit(exit) => status = Some(exit),
        }
    }
    let status = status.expect("an exit status");
    assert_eq!(status.reason, ExitReason::TimedOut, "{status:?}");
    assert!(received >= window / 2, "{received} bytes before the kill");

    // The first one, never read, is killed when its stream is dropped.
    drop(unread);
    let mut killed = false;
    for _ in 0..200 {
        let r = run(&m, Command::shell("pgrep -xc head")).await;
        if r.stdout_lossy() == "0\n" {
            killed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(killed, "the dropped command still runs");
    for _ in 0..200 {
        if m.supervisor_buffered_output_bytes() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(m.supervisor_buffered_output_bytes(), 0);
    m.close().await.unwrap();
}
