//! Typeahead a command pushes into the session's terminal (`ioctl(TIOCSTI)`, which Linux
//! allows a process on its own controlling terminal while `dev.tty.legacy_tiocsti` is 1)
//! is never run as a command line: the call ends at the shell's real prompt with the
//! command's own output, and the session's marker never shows (issue 11, break-it).

mod common;

use std::time::{Duration, Instant};

use shellbox_core::{Machine, MachineFactory, MachineSpec, ShellStatus};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typeahead_pushed_by_a_command_is_not_run() {
    let test = "typeahead_pushed_by_a_command_is_not_run";
    match std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti") {
        Ok(v) if v.trim() == "0" => {
            eprintln!("SKIP {test}: dev.tty.legacy_tiocsti is 0 (TIOCSTI is refused)");
            return;
        }
        _ => {}
    }
    if !std::path::Path::new("/usr/bin/perl").exists() {
        eprintln!("SKIP {test}: no /usr/bin/perl to call ioctl(TIOCSTI)");
        return;
    }
    let Some(f) = common::factory(test) else {
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
