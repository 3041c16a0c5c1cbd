//! Typeahead a command pushes into the session's terminal (`ioctl(TIOCSTI)`, which Linux
//! allows a process on its own controlling terminal while `dev.tty.legacy_tiocsti` is 1)
//! is never run as a command line: the call ends at the shell's real prompt with the
//! command's own output, and the session's marker never shows (issue 11, break-it).

mod common;

use std::time::{Duration, Instant};

use shellbox_core::{Machine, MachineFactory, MachineSpec, ShellStatus};

/// A factory for a test that pushes typeahead with perl's `ioctl(TIOCSTI)`, or `None`
/// (with the SKIP line) when the kernel refuses TIOCSTI, there is no `/usr/bin/perl`, or no
/// bwrap can sandbox.
fn typeahead_factory(test: &str) -> Option<shellbox_local::LocalMachineFactory> {
    match std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti") {
        Ok(v) if v.trim() == "0" => {
            eprintln!("SKIP {test}: dev.tty.legacy_tiocsti is 0 (TIOCSTI is refused)");
            return None;
        }
        _ => {}
    }
    if !std::path::Path::new("/usr/bin/perl").exists() {
        eprintln!("SKIP {test}: no /usr/bin/perl to call ioctl(TIOCSTI)");
        return None;
    }
    common::factory(test)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typeahead_pushed_by_a_command_is_not_run() {
    let test = "typeahead_pushed_by_a_command_is_not_run";
    let Some(f) = typeahead_factory(test) else {
        return;
    };
    let m = f.create(MachineSpec::host()).await.unwrap();
    let s = m.open_shell().await.unwrap();
    let push = r#"echo done; /usr/bin/perl -e 'ioctl(STDIN, 0x5412, $_) or die "ioctl: $!\n" for split //, "echo INJ 42\n"'"#;
    for round in 0..5 {
        let started = Instant::now();
        let mut u = s
            .execute(push, Duration::from_secs(20), 1 << 20)
            .await
            .unwrap();
        let mut out = u.output.to_vec();
        while u.status == ShellStatus::Running {
            assert!(started.elapsed() < Duration::from_secs(30), "round {round}");
            u = s.read(Duration::from_secs(1), 1 << 20).await.unwrap();
            out.extend_from_slice(&u.output);
        }
        assert_eq!(
            (
                u.status,
                u.exit_code,
                String::from_utf8_lossy(&out).into_owned()
            ),
            (ShellStatus::Completed, Some(0), "done\n".to_string()),
            "round {round}"
        );
        let u = s
            .execute("echo next", Duration::from_secs(20), 1 << 20)
            .await
            .unwrap();
        assert_eq!(
            (u.status, &u.output[..]),
            (ShellStatus::Completed, &b"next\n"[..]),
            "round {round}"
        );
    }
    m.close().await.unwrap();
}

/// Runs `command` to its end (at most 30 s): status, exit code, output.
async fn run_to_end(
    s: &dyn shellbox_core::ShellSession,
    command: &str,
) -> (ShellStatus, Option<i32>, String) {
    let started = Instant::now();
    let mut u = s
        .execute(command, Duration::from_secs(20), 1 << 20)
        .await
        .unwrap();
    let mut out = u.output.to_vec();
    while u.status == ShellStatus::Running {
        assert!(started.elapsed() < Duration::from_secs(30), "{command:?}");
        u = s.read(Duration::from_secs(1), 1 << 20).await.unwrap();
        out.extend_from_slice(&u.output);
    }
    (
        u.status,
        u.exit_code,
        String::from_utf8_lossy(&out).into_owned(),
    )
}

/// Typeahead without a newline (a partial line a command or, later, a background job
/// pushes with `TIOCSTI`) never joins the next command line: `# ` would turn it into a
/// comment (reported `Completed` 0 with nothing run), `echo INJECTED; cd /tmp; ` would run
/// ahead of it. The next command runs exactly as given (issue 11, break-it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_typeahead_never_joins_the_next_command() {
    let test = "partial_typeahead_never_joins_the_next_command";
    let Some(f) = typeahead_factory(test) else {
        return;
    };
    let m = f.create(MachineSpec::host()).await.unwrap();
    let s = m.open_shell().await.unwrap();
    let (_, code, wd) = run_to_end(&*s, "pwd").await;
    assert_eq!(code, Some(0));
    let push = |text: &str| {
        format!(
            r#"/usr/bin/perl -e 'ioctl(STDIN, 0x5412, $_) or die "ioctl: $!\n" for split //, "{text}"' </dev/tty"#
        )
    };
    for text in ["# ", "echo INJECTED; cd /tmp; "] {
        // By the command itself, before it ends.
        let r = run_to_end(&*s, &push(text)).await;
        assert_eq!(
            r,
            (ShellStatus::Completed, Some(0), String::new()),
            "{text:?}"
        );
        let r = run_to_end(&*s, "echo next; pwd").await;
        assert_eq!(
            r,
            (ShellStatus::Completed, Some(0), format!("next\n{wd}")),
            "after a command pushed {text:?}"
        );
        // By a background job, while the shell waits at its prompt between calls.
        let r = run_to_end(&*s, &format!("(sleep 0.3; {}) &", push(text))).await;
        assert_eq!((r.0, r.1), (ShellStatus::Completed, Some(0)), "{r:?}");
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let r = run_to_end(&*s, "echo next; pwd").await;
        assert_eq!(
            (r.0, r.1),
            (ShellStatus::Completed, Some(0)),
            "after a job pushed {text:?}: {r:?}"
        );
        assert!(
            r.2.contains(&format!("next\n{wd}")) && !r.2.contains("INJECTED"),
            "after a job pushed {text:?}: {r:?}"
        );
        assert_eq!(run_to_end(&*s, "wait").await.1, Some(0));
    }
    m.close().await.unwrap();
}
