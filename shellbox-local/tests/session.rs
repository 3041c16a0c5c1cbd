//! The local backend's persistent shell session against real bwrap sandboxes: background
//! jobs, what close leaves on the host (read through the host's /proc), exact bytes, and
//! the machine's confinement applied to the session's processes.

mod common;

use std::time::{Duration, Instant};

use shellbox_core::{Command, Machine, MachineFactory, MachineSpec, ShellSession, ShellStatus};

const WAIT: Duration = Duration::from_secs(30);
const LIMIT: u64 = 1 << 20;

/// Runs `command` in the session to completion: (output, exit code).
async fn complete(s: &dyn ShellSession, command: &str) -> (Vec<u8>, i32) {
    let started = Instant::now();
    let mut u = s.execute(command, WAIT, LIMIT).await.unwrap();
    let mut out = u.output.to_vec();
    while u.status == ShellStatus::Running {
        assert!(started.elapsed() < WAIT, "{command:?} did not complete");
        u = s.read(Duration::from_secs(1), LIMIT).await.unwrap();
        out.extend_from_slice(&u.output);
    }
    assert_eq!(u.status, ShellStatus::Completed, "{command:?}: {u:?}");
    (out, u.exit_code.unwrap())
}

async fn text(s: &dyn ShellSession, command: &str) -> String {
    let (out, code) = complete(s, command).await;
    assert_eq!(code, 0, "{command:?}: {}", String::from_utf8_lossy(&out));
    String::from_utf8(out).unwrap()
}

/// A number no other test's processes carry in their argv.
fn unique_secs() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    3_000_000 + (u64::from(std::process::id()) * 7919 + u64::from(nanos)) % 1_000_000
}

/// Host processes (this host's whole /proc) whose argv holds `needle`.
fn host_processes_with(needle: &str) -> Vec<String> {
    let needle = needle.as_bytes();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
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

async fn wait_for_host_processes(needle: &str, n: usize) {
    let started = Instant::now();
    while host_processes_with(needle).len() < n {
        assert!(
            started.elapsed() < WAIT,
            "the session's processes never showed in the host's /proc: {:?}",
            host_processes_with(needle)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn wait_for_no_host_processes(needle: &str, what: &str) {
    let started = Instant::now();
    loop {
        let left = host_processes_with(needle);
        if left.is_empty() {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{what} left processes on the host: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_jobs_live_across_calls() {
    let Some(f) = common::factory("background_jobs_live_across_calls") else {
        return;
    };
    let secs = unique_secs();
    let needle = format!("sleep\0{secs}\0");
    let m = f.create(MachineSpec::host()).await.unwrap();
    let s = m.open_shell().await.unwrap();
    let started = text(&*s, &format!("sleep {secs} &")).await;
    assert!(started.starts_with("[1] "), "{started:?}");
    // Separate calls, each a full round trip: the job is still the shell's.
    for _ in 0..3 {
        let jobs = text(&*s, "jobs").await;
        assert!(
            jobs.contains("Running") && jobs.contains(&format!("sleep {secs}")),
            "{jobs:?}"
        );
    }
    wait_for_host_processes(&needle, 1).await;
    // A plain run of the same machine sees the job's process too (one machine), but not
    // the shell's job table.
    let r = m
        .run(Command::shell(format!(
            "pgrep -f 'sleep {secs}' >/dev/null && echo seen; jobs | wc -l"
        )))
        .await
        .unwrap();
    assert_eq!(r.stdout_lossy(), "seen\n0\n", "{r:?}");
    // The job is killed with `kill %1` as in any interactive shell.
    let killed = text(&*s, "kill %1; wait %1; echo $?").await;
    let expected = format!("Terminated              sleep {secs}\n143\n");
    assert!(killed.ends_with(&expected), "{killed:?}");
    wait_for_no_host_processes(&needle, "kill %1").await;
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_mid_command_leaves_no_process_on_the_host() {
    let Some(f) = common::factory("close_mid_command_leaves_no_process_on_the_host") else {
        return;
    };
    let secs = unique_secs();
    let needle = format!("sleep\0{secs}\0");
    let escapees = format!(
        "sleep {secs} >/dev/null 2>&1 & setsid sleep {secs} >/dev/null 2>&1 & \
         (sh -c 'sleep {secs} >/dev/null 2>&1 &' &) ; true"
    );
    // The session's own close, mid-command: the machine goes on, the session's processes
    // (jobs, setsid and double-fork escapees, the running command) do not.
    let m = f.create(MachineSpec::host()).await.unwrap();
    let s = m.open_shell().await.unwrap();
    complete(&*s, &escapees).await;
    let u = s
        .execute(&format!("sleep {secs}"), Duration::from_millis(200), LIMIT)
        .await
        .unwrap();
    assert_eq!(u.status, ShellStatus::Running);
    wait_for_host_processes(&needle, 4).await;
    let relays = host_processes_with("--pty-relay");
    assert!(!relays.is_empty(), "no relay on the host's /proc");
    s.close().await.unwrap();
    wait_for_no_host_processes(&needle, "closing the session").await;
    assert_eq!(
        m.run(Command::shell("echo alive"))
            .await
            .unwrap()
            .stdout_lossy(),
        "alive\n"
    );
    // The machine's close, mid-command, with a fresh session.
    let s = m.open_shell().await.unwrap();
    complete(&*s, &escapees).await;
    let u = s
        .execute(&format!("sleep {secs}"), Duration::from_millis(200), LIMIT)
        .await
        .unwrap();
    assert_eq!(u.status, ShellStatus::Running);
    wait_for_host_processes(&needle, 4).await;
    m.close().await.unwrap();
    // Close returned: nothing is left, not even briefly.
    let left = host_processes_with(&needle);
    assert!(left.is_empty(), "closing the machine left {left:?}");
    assert!(s
        .execute("true", WAIT, LIMIT)
        .await
        .unwrap_err()
        .to_string()
        .contains("closed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn marker_look_alikes_and_binary_output_are_exact() {
    let Some(f) = common::factory("marker_look_alikes_and_binary_output_are_exact") else {
        return;
    };
    let m = f.create(MachineSpec::host()).await.unwrap();
    let s = m.open_shell().await.unwrap();
    // Every byte value, through the terminal unchanged (no \r added, no ^C or ^D acted on).
    let all: Vec<u8> = (0..=255u8).collect();
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("all.bin");
    std::fs::write(&bin, [all.clone(), all.clone()].concat()).unwrap();
    m.upload(&bin, "/tmp/all.bin").await.unwrap();
    let (out, code) = complete(&*s, "cat /tmp/all.bin").await;
    assert_eq!(code, 0);
    assert_eq!(out, [all.clone(), all].concat());
    // 1 MiB of random bytes in one call, exactly, however the marker scan splits it.
    let (out, code) = complete(&*s, "head -c 1048000 /dev/urandom > /tmp/r; cat /tmp/r").await;
    assert_eq!(code, 0);
    let r = m.run(Command::shell("cat /tmp/r")).await.unwrap();
    assert_eq!(out.len(), 1_048_000);
    assert!(
        out == r.stdout.to_vec(),
        "random bytes changed on the terminal"
    );
    // Marker look-alikes: the marker's shape with other nonces and numbers, a marker split
    // over two writes, and the shell's own PROMPT_COMMAND printed (its text, unexpanded).
    for lookalike in [
        "printf 'SB0123456789abcdef0123456789abcdef:1:0;'",
        "printf 'SB%s:%s:%s;' ffffffffffffffffffffffffffffffff 999 0",
        "printf 'SB'; sleep 0.1; printf '00000000000000000000000000000000:2:0;'",
        "printf '%s' \"$PROMPT_COMMAND\"",
        "printf '\\n'; echo SB:1:0\\;",
    ] {
        let (out, code) = complete(&*s, &format!("{lookalike}; echo; echo tail")).await;
        assert_eq!(code, 0, "{lookalike}");
        assert!(
            out.ends_with(b"\ntail\n"),
            "{lookalike}: {:?}",
            String::from_utf8_lossy(&out)
        );
    }
    // The session still counts its commands right.
    assert_eq!(text(&*s, "echo done").await, "done\n");
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_processes_keep_the_machines_confinement() {
    let Some(f) = common::factory("session_processes_keep_the_machines_confinement") else {
        return;
    };
    let m = f
        .create_local(MachineSpec::host().pids_limit(48))
        .await
        .unwrap();
    // What a command gets, compared with what the session's shell and its children get.
    let probe = "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status; \
                 cat /proc/self/cgroup; id -u; readlink /proc/self/ns/pid /proc/self/ns/mnt /proc/self/ns/net";
    let from_run = m.run(Command::shell(probe)).await.unwrap().stdout_lossy();
    assert!(from_run.contains("NoNewPrivs:\t1"), "{from_run}");
    let s = m.open_shell().await.unwrap();
    let from_session = text(&*s, probe).await;
    assert_eq!(
        from_session, from_run,
        "a session process is confined as a command is"
    );
    // The shell itself (the session leader), not only what it starts.
    let shell = text(
        &*s,
        "grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/$$/status",
    )
    .await;
    assert_eq!(
        shell,
        "CapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\n"
    );
    // The machine's process bound holds in the session: jobs past it fail to fork (dash
    // gives up at the first failed fork, where bash would retry for seconds).
    let secs = unique_secs();
    let needle = format!("sleep\0{secs}\0");
    let out = text(
        &*s,
        &format!(
            "sh -c 'i=0; while [ $i -lt 100 ]; do sleep {secs} & i=$((i+1)); done' \
             >/dev/null 2>&1; echo started"
        ),
    )
    .await;
    assert_eq!(out, "started\n");
    let sleeps = host_processes_with(&needle).len();
    assert!(
        (10..=48).contains(&sleeps),
        "{sleeps} sleeps of the session in a machine bounded to 48 processes"
    );
    // Seen from the host: each of them is in the machine's pids cgroup.
    if let Some(dir) = m.cgroup_dir() {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap();
        let procs: Vec<&str> = procs.lines().collect();
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Ok(c) = std::fs::read(e.path().join("cmdline")) else {
                continue;
            };
            if name.bytes().all(|b| b.is_ascii_digit())
                && c.windows(needle.len()).any(|w| w == needle.as_bytes())
            {
                assert!(
                    procs.contains(&name.as_str()),
                    "host pid {name} outside {dir:?}"
                );
            }
        }
    }
    // Let the shell fork again.
    text(&*s, "kill $(jobs -p) 2>/dev/null; pkill -f 'sleep '; true").await;
    // Privilege: no way back to capabilities, and the seccomp table applies (unshare is
    // refused as for a command).
    let (out, code) = complete(&*s, "unshare -U true 2>&1; echo status $?").await;
    assert_eq!(code, 0);
    let out = String::from_utf8_lossy(&out);
    assert!(!out.ends_with("status 0\n"), "unshare in a session: {out}");
    m.close().await.unwrap();
}

/// A call waiting on a session that the session's own `close` ends is told the session was
/// closed (`ShellState`), not that the machine is (`Closed`): the machine is open and runs
/// commands, and its `open_shell` gives a new session. Calls on the closed session say the
/// same; once the machine closes, its new session's calls say `Closed` (issue 11, break-it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_a_session_tells_a_waiting_call_the_session_was_closed() {
    let Some(f) = common::factory("closing_a_session_tells_a_waiting_call") else {
        return;
    };
    let m = f.create(MachineSpec::host()).await.unwrap();
    let s = m.open_shell().await.unwrap();
    let waiting = {
        let s = s.clone();
        tokio::spawn(async move { s.execute("sleep 1000", WAIT, LIMIT).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    s.close().await.unwrap();
    let said = |r: &Result<shellbox_core::ShellUpdate, shellbox_core::Error>| match r {
        Err(shellbox_core::Error::ShellState(m)) => m.contains("session was closed"),
        _ => false,
    };
    let r = waiting.await.unwrap();
    assert!(said(&r), "the waiting call: {r:?}");
    let r = s.execute("echo x", WAIT, LIMIT).await;
    assert!(said(&r), "a later call: {r:?}");
    let out = m.run(Command::shell("echo alive")).await.unwrap();
    assert_eq!(&out.stdout[..], b"alive\n");
    let s = m.open_shell().await.unwrap();
    assert_eq!(text(&*s, "echo new").await, "new\n");
    m.close().await.unwrap();
    let r = s.execute("echo x", WAIT, LIMIT).await;
    assert!(
        matches!(r, Err(shellbox_core::Error::Closed)),
        "after the machine closed: {r:?}"
    );
}
