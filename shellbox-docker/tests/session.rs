//! What only the docker backend's shell session does (the shared cases are in
//! tests/conformance.rs): nothing of a session outlives its close, its reset or its machine,
//! and a shell that does not come back from an interrupt is replaced.

mod common;

use std::time::{Duration, Instant};

use shellbox_core::{Command, Machine, ShellSession, ShellStatus, ShellUpdate};

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

/// A Reset leaves no process of the session behind, on both command paths, even one that
/// dropped the session's environment marker and left its terminal session (`env -u
/// SHELLBOX_SESSION_ID setsid ...`), with or without the terminal as its stdio.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_reset_kills_escapees_that_dropped_the_session_marker() {
    for path in [
        shellbox_docker::CommandPath::Supervisor,
        shellbox_docker::CommandPath::Exec,
    ] {
        let Some(f) = common::setup("session_reset_kills_escapees").await else {
            return;
        };
        let f = f.command_path(path);
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
