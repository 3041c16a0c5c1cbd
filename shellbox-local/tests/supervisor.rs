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

/// Host pids of the processes whose argv is exactly `argv` (read from the host's /proc).
fn host_pids_with_argv(argv: &[&str]) -> Vec<i32> {
    let mut want: Vec<u8> = Vec::new();
    for a in argv {
        want.extend_from_slice(a.as_bytes());
        want.push(0);
    }
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .collect()
}

/// A field of /proc/PID/status (`PPid`, `NSpid`, `Threads`), or `None` once it is gone.
fn status_field(pid: i32, field: &str) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().to_string())
}

/// Waits (up to 60 s) for one process with exactly `argv` on the host; its pid.
async fn wait_for_process(argv: &[&str]) -> i32 {
    for _ in 0..600 {
        if let Some(&pid) = host_pids_with_argv(argv).first() {
            return pid;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no process {argv:?} appeared");
}

/// The host pids of the keeper above `pid` (its ancestor whose parent is the machine's
/// PID 1) and of the supervisor (that PID 1).
fn keeper_and_supervisor(pid: i32) -> (i32, i32) {
    let mut child = pid;
    loop {
        let parent: i32 = status_field(child, "PPid").unwrap().parse().unwrap();
        let nspid = status_field(parent, "NSpid").unwrap();
        if nspid.split_whitespace().last() == Some("1") {
            return (child, parent);
        }
        child = parent;
    }
}

/// Waits (up to 30 s) until no process with exactly `argv` is left on the host.
async fn gone(argv: &[&str]) -> bool {
    for _ in 0..300 {
        if host_pids_with_argv(argv).is_empty() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// A single argument or environment string `execve(2)` would refuse (over Linux's
/// MAX_ARG_STRLEN, 128 KiB with its NUL) is `InvalidInput` naming the limit, before anything
/// runs (it was exit 127 "not found": the supervisor took E2BIG for a missing program);
/// the longest string the kernel takes still reaches the command whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_string_over_max_arg_strlen_is_invalid_input() {
    let test = "a_string_over_max_arg_strlen_is_invalid_input";
    let Some(factory) = common::factory(test) else {
        return;
    };
    let m = factory.create_local(MachineSpec::host()).await.unwrap();
    let limit = shellbox_core::validate::EXEC_STRING_MAX_BYTES;
    let over = "x".repeat(limit);
    for command in [
        Command::new("true").arg(&over),
        Command::new("true").env("BIG", &over[4..]),
    ] {
        let err = m.run(command).await.unwrap_err();
        assert!(
            matches!(&err, Error::InvalidInput(m) if m.contains("MAX_ARG_STRLEN")),
            "{err:?}"
        );
    }
    // The spec's environment is every command's: refused at create.
    let err = factory
        .create_local(MachineSpec::host().env("BIG", &over[4..]))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidInput(m) if m.contains("MAX_ARG_STRLEN")),
        "{err:?}"
    );
    // At the limit (the NUL makes it 128 KiB): runs.
    let r = run(
        &m,
        Command::new("sh")
            .args(["-c", "echo ${#1} ${#BIG}", "sh", &over[1..]])
            .env("BIG", &over[5..]),
    )
    .await;
    assert_eq!(
        r.stdout_lossy(),
        format!("{} {}\n", limit - 1, limit - 5),
        "{r:?}"
    );
    m.close().await.unwrap();
}

/// A keeper killed from the host (SIGKILL to its pid) takes its command's processes with
/// it, its `setsid` escapee included, at once rather than when the machine closes: the
/// machine's supervisor (its PID 1, which every orphan reparents to) kills every child of
/// its own that is not a keeper. The run reports an error, never an exit status; the
/// machine goes on, and another command's background process lives on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keeper_killed_from_the_host_takes_its_processes_with_it() {
    let test = "a_keeper_killed_from_the_host_takes_its_processes_with_it";
    let Some(factory) = common::factory(test) else {
        return;
    };
    if !root(test) {
        return;
    }
    let m = std::sync::Arc::new(factory.create_local(MachineSpec::host()).await.unwrap());
    let other = ["sleep", "4141.41"];
    run(&m, Command::shell("sleep 4141.41 >/dev/null 2>&1 &")).await;
    let (main, escapee) = (["sleep", "4141.42"], ["sleep", "4141.43"]);
    let m2 = m.clone();
    let running = tokio::spawn(async move {
        m2.run(Command::shell(
            "setsid sleep 4141.43 & sleep 4141.42; echo ended",
        ))
        .await
    });
    let pid = wait_for_process(&main).await;
    wait_for_process(&escapee).await;
    let (keeper, _) = keeper_and_supervisor(pid);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(keeper),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let result = running.await.unwrap();
    assert!(result.is_err(), "{result:?}");
    assert!(gone(&main).await, "the killed keeper's command still runs");
    assert!(
        gone(&escapee).await,
        "the killed keeper's setsid escapee still runs"
    );
    assert_eq!(
        host_pids_with_argv(&other).len(),
        1,
        "another command's process was killed"
    );
    let r = run(&m, Command::shell("echo still here")).await;
    assert_eq!(r.stdout_lossy(), "still here\n");
    m.close().await.unwrap();
}

/// The supervisor's thread pool shrinks: after a burst of 2,000 commands (64 at a time)
/// its thread count (/proc/PID/status) falls back to the few it keeps idle, instead of
/// keeping one thread for each command that ran at once. Background processes holding
/// their finished commands' stdout and stderr cost one thread in all (not one per stream),
/// and one that keeps writing keeps running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_thread_pool_shrinks_after_a_burst() {
    use futures::StreamExt;
    let test = "the_thread_pool_shrinks_after_a_burst";
    let Some(factory) = common::factory(test) else {
        return;
    };
    if !root(test) {
        return;
    }
    let m = factory.create_local(MachineSpec::host()).await.unwrap();
    run(&m, Command::shell("sleep 5151.51 >/dev/null 2>&1 &")).await;
    let marker = wait_for_process(&["sleep", "5151.51"]).await;
    let (_, supervisor) = keeper_and_supervisor(marker);
    // Ten background holders of their command's stdout and stderr, and a writer.
    for _ in 0..10 {
        run(&m, Command::shell("sleep 5151.52 &")).await;
    }
    let ticker = run(
        &m,
        Command::shell("while echo tick; do sleep 0.1; done & echo $!"),
    )
    .await;
    // Its output may hold ticks beside the pid.
    let ticker = ticker
        .stdout_lossy()
        .lines()
        .find(|l| l.parse::<u32>().is_ok())
        .expect("the writer's pid")
        .to_string();
    let threads = || -> usize {
        status_field(supervisor, "Threads")
            .unwrap()
            .parse()
            .unwrap()
    };
    let before = threads();
    let mut peak = before;
    let mut runs = futures::stream::iter(0..2000)
        .map(|_| m.run(Command::new("true").timeout(Duration::from_secs(120))))
        .buffer_unordered(64);
    let mut done = 0;
    while let Some(r) = runs.next().await {
        assert_eq!(r.unwrap().exit_code, Some(0));
        done += 1;
        if done % 100 == 0 {
            peak = peak.max(threads());
        }
    }
    drop(runs);
    // The pool keeps 8 idle threads; the main, reaper and drain threads are the rest.
    let bound = 8 + 3;
    // Waited for 5 s at most: the threads over that bound end as they find no work, while
    // an idle thread's own timeout (10 s) is longer, so only the bound can get there.
    let waited = std::time::Instant::now();
    let mut after = threads();
    while after > bound && waited.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        after = threads();
    }
    eprintln!("{test}: threads before {before}, peak {peak}, after {after}");
    assert!(
        after <= bound,
        "{after} threads left after the burst (peak {peak})"
    );
    let r = run(
        &m,
        Command::shell(format!("kill -0 {ticker} && echo ticking")),
    )
    .await;
    assert_eq!(r.stdout_lossy(), "ticking\n", "{r:?}");
    m.close().await.unwrap();
}

/// A keeper's stack lies right above a PROT_NONE guard page (and so does its command
/// process's, right above the keeper's): an overflow faults instead of writing into the
/// supervisor's memory, which the keeper shares. Read from the keeper's stack pointer while
/// it waits (/proc/K/syscall) and its memory map (/proc/K/maps).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keeper_stacks_have_guard_pages() {
    let test = "keeper_stacks_have_guard_pages";
    let Some(factory) = common::factory(test) else {
        return;
    };
    if !root(test) {
        return;
    }
    let m = std::sync::Arc::new(factory.create_local(MachineSpec::host()).await.unwrap());
    let m2 = m.clone();
    let running = tokio::spawn(async move { m2.run(Command::new("sleep").arg("6161.61")).await });
    let pid = wait_for_process(&["sleep", "6161.61"]).await;
    let (keeper, _) = keeper_and_supervisor(pid);
    // `NR arg1 .. arg6 SP PC` while it is blocked in wait4.
    let mut sp = None;
    for _ in 0..100 {
        let text = std::fs::read_to_string(format!("/proc/{keeper}/syscall")).unwrap();
        let fields: Vec<&str> = text.split_whitespace().collect();
        if fields.len() == 9 && fields[0] == "61" {
            sp = Some(u64::from_str_radix(fields[7].trim_start_matches("0x"), 16).unwrap());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let sp = sp.expect("the keeper waits in wait4");
    let maps: Vec<(u64, u64, String)> = std::fs::read_to_string(format!("/proc/{keeper}/maps"))
        .unwrap()
        .lines()
        .map(|l| {
            let mut f = l.split_whitespace();
            let (start, end) = f.next().unwrap().split_once('-').unwrap();
            let perms = f.next().unwrap().to_string();
            (
                u64::from_str_radix(start, 16).unwrap(),
                u64::from_str_radix(end, 16).unwrap(),
                perms,
            )
        })
        .collect();
    let at = maps
        .iter()
        .position(|&(s, e, _)| s <= sp && sp < e)
        .expect("the stack pointer is mapped");
    let page = 4096;
    let below = maps.iter().find(|m| m.1 == maps[at].0);
    assert!(
        below.is_some_and(|b| b.2 == "---p" && b.1 - b.0 >= page),
        "no guard page below the keeper's stack {:?}: {below:?}",
        maps[at]
    );
    let above = maps.iter().find(|m| m.0 == maps[at].1);
    assert!(
        above.is_some_and(|a| a.2 == "---p" && a.1 - a.0 >= page),
        "no guard page below the command process's stack, above {:?}: {above:?}",
        maps[at]
    );
    m.close().await.unwrap();
    let _ = running.await;
}

/// Issue 14: a root command that writes `oom_score_adj` of every process it can see (its
/// keeper's and every other keeper's files are root's: non-dumpable processes) changes
/// nothing past its own command: the next command, its keeper and the supervisor have the
/// values they had before. Failed before: keepers share the supervisor's memory, so the
/// kernel gave the raise to the supervisor, and every later keeper and command inherited
/// 1000 from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oom_score_adj_raise_does_not_carry_over() {
    let test = "an_oom_score_adj_raise_does_not_carry_over";
    let Some(factory) = common::factory(test) else {
        return;
    };
    if !root(test) {
        return;
    }
    let m = factory.create_local(MachineSpec::host()).await.unwrap();
    const LOOK: &str =
        "read a < /proc/self/oom_score_adj; read b < /proc/$PPID/oom_score_adj; echo $a $b";
    let before = run(&m, Command::shell(LOOK)).await.stdout_lossy();
    assert_ne!(
        before.trim(),
        "1000 1000",
        "the values to compare with are already raised"
    );
    // A background sleeper keeps its keeper alive; the supervisor is seen from the host.
    run(&m, Command::shell("exec sleep 1017 >/dev/null 2>&1 &")).await;
    let sleeper = wait_for_process(&["sleep", "1017"]).await;
    let (_, supervisor) = keeper_and_supervisor(sleeper);
    let supervisor_before =
        std::fs::read_to_string(format!("/proc/{supervisor}/oom_score_adj")).unwrap();
    let r = run(
        &m,
        Command::shell(
            "n=0; for f in /proc/[0-9]*/oom_score_adj; do echo 1000 2>/dev/null > $f && n=$((n+1)); done; \
             read b < /proc/$PPID/oom_score_adj; echo $b",
        ),
    )
    .await;
    // The raise itself works (its own keeper shows it): what matters is that it ends there.
    assert_eq!(r.stdout_lossy(), "1000\n", "{r:?}");
    let after = run(&m, Command::shell(LOOK)).await.stdout_lossy();
    assert_eq!(
        after, before,
        "a later command or its keeper inherited the raise"
    );
    let supervisor_after =
        std::fs::read_to_string(format!("/proc/{supervisor}/oom_score_adj")).unwrap();
    assert_eq!(
        supervisor_after, supervisor_before,
        "the supervisor kept the raise"
    );
    m.close().await.unwrap();
}
