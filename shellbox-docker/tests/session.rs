//! What only the docker backend's shell session does (the shared cases are in
//! tests/conformance.rs): nothing of a session outlives its close, its reset or its machine,
//! and a shell that does not come back from an interrupt is replaced.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use shellbox_core::{Command, Machine, ShellSession, ShellStatus, ShellUpdate};
use shellbox_docker::{CommandPath, DockerMachine, DockerMachineFactory};

/// The command lines of every process in the container.
async fn processes(m: &dyn Machine) -> String {
    let r = m
        .run(Command::shell(
            "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < \"$f\" 2>/dev/null; echo; done",
        ))
        .await
        .unwrap();
    String::from_utf8_lossy(&r.stdout).into_owned()
}

/// Reads until the command leaves Running (at most 30 s).
async fn finish(s: &dyn ShellSession, mut u: ShellUpdate) -> ShellUpdate {
    let started = Instant::now();
    while u.status == ShellStatus::Running {
        assert!(started.elapsed() < Duration::from_secs(30), "still running");
        u = s.read(Duration::from_secs(1), 1 << 20).await.unwrap();
    }
    u
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_close_kills_its_processes_and_machine_close_removes_the_container() {
    let Some(f) = common::setup("session_close_kills_its_processes").await else {
        return;
    };
    let m = f.create_machine(common::spec()).await.unwrap();
    let s = m.open_shell().await.unwrap();
    let u = s
        .execute(
            "sleep 1001 & setsid sleep 1002 & sleep 1003",
            Duration::from_millis(500),
            1 << 20,
        )
        .await
        .unwrap();
    assert_eq!(u.status, ShellStatus::Running, "{u:?}");
    assert!(processes(&m).await.contains("sleep 1003"));
    s.close().await.unwrap();
    let left = processes(&m).await;
    assert!(
        !left.contains("sleep 100") && !left.contains("sh -i"),
        "the session's processes must be gone after close: {left}"
    );
    let s = m.open_shell().await.unwrap();
    let u = s
        .execute("sleep 1004", Duration::from_millis(300), 1 << 20)
        .await
        .unwrap();
    assert_eq!(u.status, ShellStatus::Running);
    let id = m.container_id().to_string();
    m.close().await.unwrap();
    assert!(!common::container_exists(f.docker(), &id).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_reset_kills_background_jobs_holding_the_terminal() {
    let Some(f) = common::setup("session_reset_kills_background_jobs").await else {
        return;
    };
    let m = f.create_machine(common::spec()).await.unwrap();
    let s = m.open_shell().await.unwrap();
    let u = s
        .execute("sleep 1005 & exit 4", Duration::from_secs(20), 1 << 20)
        .await
        .unwrap();
    let u = finish(&*s, u).await;
    assert_eq!((u.status, u.exit_code), (ShellStatus::Reset, None), "{u:?}");
    let left = processes(&m).await;
    assert!(!left.contains("sleep 1005"), "{left}");
    let u = s
        .execute("echo fresh", Duration::from_secs(20), 1 << 20)
        .await
        .unwrap();
    assert_eq!(
        (u.status, &u.output[..]),
        (ShellStatus::Completed, &b"fresh\n"[..])
    );
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_interrupt_bound_replaces_a_shell_that_does_not_come_back() {
    let Some(f) = common::setup("session_interrupt_bound").await else {
        return;
    };
    let m = f.create_machine(common::spec()).await.unwrap();
    let s = m.open_shell().await.unwrap();
    let u = s
        .execute(
            "echo data > kept; sh -c 'trap \"\" INT; sleep 1006'",
            Duration::from_millis(500),
            1 << 20,
        )
        .await
        .unwrap();
    assert_eq!(u.status, ShellStatus::Running, "{u:?}");
    let started = Instant::now();
    s.interrupt().await.unwrap();
    let u = finish(&*s, u).await;
    assert_eq!((u.status, u.exit_code), (ShellStatus::Reset, None), "{u:?}");
    let took = started.elapsed();
    assert!(
        took >= shellbox_docker::INTERRUPT_BOUND && took < Duration::from_secs(20),
        "{took:?}"
    );
    assert!(!processes(&m).await.contains("sleep 1006"));
    let u = s
        .execute("pwd; cat kept", Duration::from_secs(20), 1 << 20)
        .await
        .unwrap();
    assert_eq!(
        (u.status, String::from_utf8_lossy(&u.output).into_owned()),
        (
            ShellStatus::Completed,
            format!("{}\ndata\n", common::spec().workdir)
        )
    );
    m.close().await.unwrap();
}

/// A Reset leaves no process of the session behind, on both command paths (the exec path's
/// relay and its older terminal session), even one that
/// dropped the session's environment marker and left its terminal session (`env -u
/// SHELLBOX_SESSION_ID setsid ...`), with or without the terminal as its stdio.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_reset_kills_escapees_that_dropped_the_session_marker() {
    for (path, relay) in [
        (shellbox_docker::CommandPath::Supervisor, true),
        (shellbox_docker::CommandPath::Exec, true),
        (shellbox_docker::CommandPath::Exec, false),
    ] {
        let Some(f) = common::setup("session_reset_kills_escapees").await else {
            return;
        };
        let f = f.command_path(path).exec_session_relay(relay);
        let m = f.create_machine(common::spec()).await.unwrap();
        let s = m.open_shell().await.unwrap();
        let u = s
            .execute(
                "(env -u SHELLBOX_SESSION_ID setsid sleep 5001 &); \
                 (env -u SHELLBOX_SESSION_ID setsid sleep 5002 </dev/null >/dev/null 2>&1 &); \
                 (env -i setsid sleep 5003 </dev/null >/dev/null 2>&1 &); sleep 0.2; echo started",
                Duration::from_secs(20),
                1 << 20,
            )
            .await
            .unwrap();
        let u = finish(&*s, u).await;
        assert_eq!(
            (u.status, &u.output[..]),
            (ShellStatus::Completed, &b"started\n"[..]),
            "{path:?}"
        );
        let before = processes(&m).await;
        assert!(
            before.contains("sleep 5001") && before.contains("sleep 5003"),
            "{path:?}: {before}"
        );
        let u = s
            .execute("exit 3", Duration::from_secs(20), 1 << 20)
            .await
            .unwrap();
        let u = finish(&*s, u).await;
        assert_eq!(u.status, ShellStatus::Reset, "{path:?}: {u:?}");
        let left = processes(&m).await;
        assert!(
            !left.contains("sleep 500"),
            "{path:?}: a Reset left the session's processes behind: {left}"
        );
        let u = s
            .execute("echo fresh", Duration::from_secs(20), 1 << 20)
            .await
            .unwrap();
        assert_eq!(
            (u.status, &u.output[..]),
            (ShellStatus::Completed, &b"fresh\n"[..]),
            "{path:?}"
        );
        m.close().await.unwrap();
    }
}

/// Whether `out` holds a session marker (`SB` and 32 hex digits and `:`).
fn holds_marker(out: &[u8]) -> bool {
    out.windows(35).any(|w| {
        w[0] == b'S'
            && w[1] == b'B'
            && w[2..34].iter().all(|b| b.is_ascii_hexdigit())
            && w[34] == b':'
    })
}

/// The images the session tests run on: the busybox test image and, where the host has
/// bash, the bash image.
async fn session_images(test: &str, f: &DockerMachineFactory) -> Vec<String> {
    let mut images = vec![shellbox_docker::BUSYBOX_TEST_IMAGE.to_string()];
    if let Some(bash) = common::bash_image(test, f.docker()).await {
        images.push(bash);
    }
    images
}

/// A machine of `image` made by `f` with commands on `path`, and its session.
async fn session_on(
    f: &DockerMachineFactory,
    path: CommandPath,
    image: &str,
) -> (DockerMachine, Arc<dyn ShellSession>) {
    let m = f
        .clone()
        .command_path(path)
        .create_machine(shellbox_core::MachineSpec::docker(image))
        .await
        .unwrap();
    let s = m.open_shell().await.unwrap();
    (m, s)
}

/// The exec path's sessions on the busybox image and (where the host has bash) the bash
/// image: machines of a factory that runs every command as an Engine exec.
async fn exec_path_machines(test: &str) -> Vec<(String, Box<dyn Machine>)> {
    let Some(f) = common::setup(test).await else {
        return Vec::new();
    };
    let f = f.command_path(shellbox_docker::CommandPath::Exec);
    let images = session_images(test, &f).await;
    let mut machines: Vec<(String, Box<dyn Machine>)> = Vec::new();
    for image in images {
        let m = f
            .create_machine(shellbox_core::MachineSpec::docker(image.clone()))
            .await
            .unwrap();
        machines.push((image, Box::new(m)));
    }
    machines
}

async fn run_to_end(s: &dyn ShellSession, command: &str) -> ShellUpdate {
    let u = s
        .execute(command, Duration::from_secs(20), 1 << 20)
        .await
        .unwrap();
    finish(s, u).await
}

/// Exec path: a command that runs the shell's own prompt command (printing the real
/// marker) and goes on running does not end its call: the call ends at the shell's
/// prompt, confirmed from outside the shell, and the next calls stay in step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_path_a_command_printing_the_real_marker_does_not_end_its_call() {
    for (image, m) in exec_path_machines("exec_path_real_marker").await {
        let s = m.open_shell().await.unwrap();
        let fake = if image.contains("bash") {
            "(exit 7); eval \"$PROMPT_COMMAND\"; sleep 2; echo late"
        } else {
            "(exit 7); eval \"x=$PS1\"; sleep 2; echo late"
        };
        let u = run_to_end(&*s, fake).await;
        assert_eq!(
            (u.status, u.exit_code),
            (ShellStatus::Completed, Some(0)),
            "{image}: {u:?}"
        );
        assert!(u.output.ends_with(b"late\n"), "{image}: {u:?}");
        for i in 0..3 {
            let u = run_to_end(&*s, &format!("echo next{i}")).await;
            assert_eq!(
                (
                    u.status,
                    u.exit_code,
                    String::from_utf8_lossy(&u.output).into_owned()
                ),
                (ShellStatus::Completed, Some(0), format!("next{i}\n")),
                "{image}"
            );
        }
        m.close().await.unwrap();
    }
}

/// Exec path: `$?` carries over from one call to the next, as in an interactive shell.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_path_status_carries_over_between_calls() {
    for (image, m) in exec_path_machines("exec_path_status_carries_over").await {
        let s = m.open_shell().await.unwrap();
        let u = run_to_end(&*s, "false").await;
        assert_eq!(u.exit_code, Some(1), "{image}: {u:?}");
        let u = run_to_end(&*s, "echo $?").await;
        assert_eq!(
            (u.exit_code, &u.output[..]),
            (Some(0), &b"1\n"[..]),
            "{image}: {u:?}"
        );
        m.close().await.unwrap();
    }
}

/// Exec path: executes raced by interrupts never show the session's marker in output and
/// leave the session in step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_path_interrupt_races_never_leak_the_marker() {
    for (image, m) in exec_path_machines("exec_path_interrupt_races").await {
        let s = m.open_shell().await.unwrap();
        for round in 0..30u64 {
            let u = s
                .execute(
                    &format!("echo r{round}; sleep 5"),
                    Duration::from_millis(round % 7),
                    1 << 20,
                )
                .await
                .unwrap();
            let mut out = u.output.to_vec();
            if u.status == ShellStatus::Running {
                s.interrupt().await.unwrap();
                let u = finish(&*s, u).await;
                assert_eq!(
                    u.status,
                    ShellStatus::Completed,
                    "{image} round {round}: {u:?}"
                );
                out.extend_from_slice(&u.output);
            }
            assert!(
                !holds_marker(&out),
                "{image} round {round}: {}",
                String::from_utf8_lossy(&out)
            );
            let u = run_to_end(&*s, &format!("echo check{round}")).await;
            assert_eq!(
                (u.status, String::from_utf8_lossy(&u.output).into_owned()),
                (ShellStatus::Completed, format!("check{round}\n")),
                "{image} round {round}"
            );
        }
        m.close().await.unwrap();
    }
}

/// Exec path: an interrupt reaches a command that turned the terminal's signal keys off
/// (`stty -isig`): 130, not a reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_path_interrupt_reaches_a_command_without_terminal_signals() {
    for (image, m) in exec_path_machines("exec_path_interrupt_without_isig").await {
        let s = m.open_shell().await.unwrap();
        let u = s
            .execute("stty -isig; sleep 30", Duration::from_millis(500), 1 << 20)
            .await
            .unwrap();
        assert_eq!(u.status, ShellStatus::Running, "{image}: {u:?}");
        s.interrupt().await.unwrap();
        let u = finish(&*s, u).await;
        assert_eq!(
            (u.status, u.exit_code),
            (ShellStatus::Completed, Some(130)),
            "{image}: {u:?}"
        );
        let u = run_to_end(&*s, "echo alive").await;
        assert_eq!(&u.output[..], b"alive\n", "{image}: {u:?}");
        m.close().await.unwrap();
    }
}

/// Exec path: a shell that closes its own input (`exec 0<&-`) ends with that call
/// (`Reset`), and the next command runs in a fresh shell.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_path_a_shell_closing_its_input_resets_at_once() {
    for (image, m) in exec_path_machines("exec_path_closed_input").await {
        let s = m.open_shell().await.unwrap();
        let u = run_to_end(&*s, "exec 0<&-").await;
        assert_eq!(
            (u.status, u.exit_code),
            (ShellStatus::Reset, None),
            "{image}: {u:?}"
        );
        let u = run_to_end(&*s, "echo fresh").await;
        assert_eq!(
            (u.status, &u.output[..]),
            (ShellStatus::Completed, &b"fresh\n"[..]),
            "{image}: {u:?}"
        );
        m.close().await.unwrap();
    }
}

/// Input a command was written and did not read is dropped at the next prompt, never run
/// as a command line the host did not send (whose own prompt would leave the real one's
/// marker in the output), on both command paths, on ash and bash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_input_left_unread_by_a_command_is_not_run() {
    let test = "session_input_left_unread";
    let Some(f) = common::setup(test).await else {
        return;
    };
    let images = session_images(test, &f).await;
    for path in [CommandPath::Supervisor, CommandPath::Exec] {
        for image in &images {
            let (m, s) = session_on(&f, path, image).await;
            let u = s
                .execute(
                    "read -r a; echo got $a",
                    Duration::from_millis(300),
                    1 << 20,
                )
                .await
                .unwrap();
            assert_eq!(u.status, ShellStatus::Running, "{path:?} {image}: {u:?}");
            s.write(b"one\necho STRAY\n").await.unwrap();
            let u = finish(&*s, u).await;
            assert_eq!(
                (
                    u.status,
                    u.exit_code,
                    String::from_utf8_lossy(&u.output).into_owned()
                ),
                (ShellStatus::Completed, Some(0), "got one\n".to_string()),
                "{path:?} {image}"
            );
            let u = run_to_end(&*s, "echo next").await;
            assert_eq!(
                (u.status, &u.output[..]),
                (ShellStatus::Completed, &b"next\n"[..]),
                "{path:?} {image}: {u:?}"
            );
            m.close().await.unwrap();
        }
    }
}

/// A background job that ends just as the next command line is written (its SIGCHLD
/// interrupts busybox ash's prompt read, which ash takes for end of input: it prints
/// `Use "exit" to leave shell.` and prompts again) never loses that line: the command runs
/// and its call ends with its own output, on both command paths, on ash and bash (issue 11:
/// ash's second prompt used to drop the line as typeahead, and the call completed with
/// nothing run, one run in three on Podman).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_job_ending_as_a_command_is_written_does_not_lose_it() {
    let test = "session_job_ending_as_a_command_is_written";
    let Some(f) = common::setup(test).await else {
        return;
    };
    let images = session_images(test, &f).await;
    for path in [CommandPath::Exec, CommandPath::Supervisor] {
        for image in &images {
            let (m, s) = session_on(&f, path, image).await;
            // The job's end sweeps across the moment the next line is written.
            for round in 0..40u64 {
                let u = run_to_end(&*s, "sleep 0.2 &").await;
                assert_eq!(
                    u.exit_code,
                    Some(0),
                    "{path:?} {image} round {round}: {u:?}"
                );
                tokio::time::sleep(Duration::from_millis(170 + round * 3 % 60)).await;
                let u = run_to_end(&*s, &format!("echo ran{round}")).await;
                let out = String::from_utf8_lossy(&u.output).into_owned();
                assert!(
                    u.status == ShellStatus::Completed
                        && u.exit_code == Some(0)
                        && out.contains(&format!("ran{round}\n"))
                        && !holds_marker(&u.output),
                    "{path:?} {image} round {round}: the line was lost: {u:?}"
                );
                let u = run_to_end(&*s, "wait").await;
                assert_eq!(
                    u.exit_code,
                    Some(0),
                    "{path:?} {image} round {round}: {u:?}"
                );
            }
            m.close().await.unwrap();
        }
    }
}

/// A root command that replaces the relay program the container holds
/// (`/.shellbox/supervisor`: root passes its modes) changes nothing for the next session,
/// on both command paths: the shell after a reset starts and runs as before (issue 11,
/// break-it: the replaced program made every later session's start time out after 30 s,
/// and could have forged a relay).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_relay_program_cannot_be_replaced_by_a_command() {
    let Some(f) = common::setup("session_relay_program_cannot_be_replaced").await else {
        return;
    };
    for path in [
        shellbox_docker::CommandPath::Supervisor,
        shellbox_docker::CommandPath::Exec,
    ] {
        let f = f.clone().command_path(path);
        let m = f.create_machine(common::spec()).await.unwrap();
        let s = m.open_shell().await.unwrap();
        let u = run_to_end(&*s, "echo one").await;
        assert_eq!(&u.output[..], b"one\n", "{path:?}: {u:?}");
        let r = m
            .run(Command::shell(
                "rm -f /.shellbox/supervisor && printf '#!/bin/sh\\nsleep 60\\n' > /.shellbox/supervisor \
                 && chmod 755 /.shellbox/supervisor && echo replaced",
            ))
            .await
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&r.stdout),
            "replaced\n",
            "{path:?}: a root command could not replace the file: {r:?}"
        );
        let u = run_to_end(&*s, "exit").await;
        assert_eq!(u.status, ShellStatus::Reset, "{path:?}: {u:?}");
        for round in 0..2 {
            let u = run_to_end(&*s, "echo two").await;
            assert_eq!(
                (u.status, u.exit_code, &u.output[..]),
                (ShellStatus::Completed, Some(0), &b"two\n"[..]),
                "{path:?} round {round}"
            );
            let u = run_to_end(&*s, "exit").await;
            assert_eq!(u.status, ShellStatus::Reset, "{path:?}: {u:?}");
        }
        m.close().await.unwrap();
    }
}

/// A call waiting on a session that the session's own `close` ends is told the session was
/// closed (`ShellState`), not that the machine is (`Closed`), on the relay session and the
/// exec path's fallback terminal session alike (issue 11, break-it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_a_session_tells_a_waiting_call_the_session_was_closed() {
    let Some(f) = common::setup("closing_a_session_tells_a_waiting_call").await else {
        return;
    };
    for (name, f) in [
        (
            "supervisor",
            f.clone()
                .command_path(shellbox_docker::CommandPath::Supervisor),
        ),
        (
            "exec fallback",
            f.clone()
                .command_path(shellbox_docker::CommandPath::Exec)
                .exec_session_relay(false),
        ),
    ] {
        let m = f.create_machine(common::spec()).await.unwrap();
        let s = m.open_shell().await.unwrap();
        let waiting = {
            let s = s.clone();
            tokio::spawn(async move {
                s.execute("sleep 1000", Duration::from_secs(20), 1 << 20)
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(800)).await;
        s.close().await.unwrap();
        let r = waiting.await.unwrap();
        assert!(
            matches!(&r, Err(shellbox_core::Error::ShellState(m)) if m.contains("session was closed")),
            "{name}: {r:?}"
        );
        let out = m.run(Command::shell("echo alive")).await.unwrap();
        assert_eq!(&out.stdout[..], b"alive\n", "{name}");
        m.close().await.unwrap();
    }
}
