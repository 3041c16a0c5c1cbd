//! The simulator's persistent shell session (issue 11) beyond the shared conformance cases:
//! what persists (options, traps, open files, arrays), how the shell ends (`exit` with its
//! EXIT trap, `exec`, `set -e`), stdout and stderr merged in write order, interrupts that
//! unwind functions, a dropped `execute`, and the machine's budgets over the session.

use std::sync::Arc;

use shellbox_core::{Command, Error, Machine, MachineSpec, ShellSession, ShellStatus, ShellUpdate};
use shellbox_sim::{SimMachine, SimMachineFactory, SimOptions};

const LIMIT: u64 = 1 << 20;
const WAIT: std::time::Duration = std::time::Duration::from_secs(30);
const BUSY: &str = "while :; do :; done";

fn machine() -> SimMachine {
    SimMachineFactory::new()
        .create_sim(
            MachineSpec::sim()
                .workdir("/work")
                .env("SPEC_VAR", "from-spec"),
        )
        .unwrap()
}

async fn ex(s: &dyn ShellSession, command: &str) -> ShellUpdate {
    s.execute(command, WAIT, LIMIT)
        .await
        .unwrap_or_else(|e| panic!("{command:?}: {e}"))
}

/// Output and exit code of a command that completes.
async fn done(s: &dyn ShellSession, command: &str) -> (String, i32) {
    let u = ex(s, command).await;
    assert_eq!(u.status, ShellStatus::Completed, "{command:?}: {u:?}");
    (
        String::from_utf8_lossy(&u.output).into_owned(),
        u.exit_code.unwrap(),
    )
}

/// Interrupts `s`'s command once its `execute` is out (interrupt answers ShellState until
/// then), and returns what that `execute` returned.
async fn interrupt_running(
    s: &Arc<dyn ShellSession>,
    command: &'static str,
) -> Result<ShellUpdate, Error> {
    let running = {
        let s = s.clone();
        tokio::spawn(async move { s.execute(command, WAIT, LIMIT).await })
    };
    loop {
        match s.interrupt().await {
            Ok(()) => break,
            Err(Error::ShellState(_)) => tokio::task::yield_now().await,
            Err(e) => panic!("interrupt: {e}"),
        }
    }
    running.await.unwrap()
}

#[tokio::test]
async fn options_traps_files_and_arrays_persist_until_exit() {
    let m = machine();
    let s = m.open_shell().await.unwrap();
    assert!(!s.interactive());
    assert_eq!(
        done(&*s, "echo \"$SPEC_VAR $SHLVL $PWD\"; pwd").await,
        ("from-spec 1 /work\n/work\n".into(), 0)
    );
    assert_eq!(
        done(
            &*s,
            "set -o pipefail; shopt -s extglob; trap 'echo bye $?' EXIT; exec 3>log.txt; \
             declare -A m=([k]=v); a=(1 2 3); umask 027; alias_like() { echo \"f:$*\"; }"
        )
        .await,
        (String::new(), 0)
    );
    assert_eq!(
        done(
            &*s,
            "false | true; echo \"pipefail:$?\"; [[ abc == @(a|x)bc ]] && echo ext; \
             echo \"${m[k]} ${a[2]} $(umask)\"; echo to3 >&3; cat log.txt; alias_like x y"
        )
        .await,
        ("pipefail:1\next\nv 3 0027\nto3\nf:x y\n".into(), 0)
    );
    assert_eq!(done(&*s, "(exit 9)").await.1, 9);
    assert_eq!(done(&*s, "echo $?").await, ("9\n".into(), 0));
    let u = ex(&*s, "echo last; exit 4").await;
    assert_eq!(
        (u.status, u.exit_code, &u.output[..]),
        (ShellStatus::Reset, None, &b"last\nbye 4\n"[..]),
        "exit runs the EXIT trap: {u:?}"
    );
    assert_eq!(
        done(
            &*s,
            "echo \"${m[k]-unset} ${a[2]-unset} $(umask) $SPEC_VAR\"; cat log.txt; \
             shopt -q extglob || echo noext"
        )
        .await,
        ("unset unset 0022 from-spec\nto3\nnoext\n".into(), 0),
        "a fresh shell after the reset, files kept"
    );
    // other ways a shell ends: exec, set -e
    let u = ex(&*s, "exec echo replaced").await;
    assert_eq!(
        (u.status, &u.output[..]),
        (ShellStatus::Reset, &b"replaced\n"[..])
    );
    let u = ex(&*s, "set -e; X=1; false; echo not-reached").await;
    assert_eq!((u.status, &u.output[..]), (ShellStatus::Reset, &b""[..]));
    assert_eq!(
        done(&*s, "echo \"${X-unset}\"").await,
        ("unset\n".into(), 0)
    );
    m.close().await.unwrap();
}

#[tokio::test]
async fn stdout_and_stderr_merge_in_write_order() {
    let m = machine();
    let s = m.open_shell().await.unwrap();
    assert_eq!(
        done(
            &*s,
            "echo 1; echo 2 >&2; printf 3; printf 4 >&2; echo; ls /nonexistent; echo 5"
        )
        .await,
        (
            "1\n2\n34\nls: cannot access '/nonexistent': No such file or directory\n5\n".into(),
            0
        )
    );
    // the limit is on both together
    let u = s.execute("echo abc; echo def >&2", WAIT, 6).await.unwrap();
    assert_eq!((&u.output[..], u.truncated), (&b"abc\nde"[..], true));
    m.close().await.unwrap();
}

#[tokio::test]
async fn interrupt_unwinds_functions_and_keeps_the_shell() {
    let m = machine();
    let s = m.open_shell().await.unwrap();
    for e in [
        s.interrupt().await.unwrap_err(),
        s.read(WAIT, LIMIT).await.unwrap_err(),
        s.write(b"x").await.unwrap_err(),
    ] {
        assert!(
            matches!(e, Error::ShellState(_)) || e.is_unsupported(),
            "{e:?}"
        );
    }
    assert!(matches!(s.interrupt().await, Err(Error::ShellState(_))));
    done(
        &*s,
        "x=outer; f() { local x=inner; cd /; echo in-f; while :; do :; done; }",
    )
    .await;
    let u = interrupt_running(&s, "echo before; f").await.unwrap();
    assert_eq!((u.status, u.exit_code), (ShellStatus::Completed, Some(130)));
    assert!(
        u.output.is_empty() || u.output.starts_with(b"before\n"),
        "{u:?}"
    );
    assert_eq!(done(&*s, "echo \"$? $x\"").await, ("130 outer\n".into(), 0));
    // `break` at the top level after an interrupted loop does nothing, as in bash
    assert_eq!(
        done(&*s, "break; echo still-here").await,
        ("still-here\n".into(), 0)
    );
    // a `run` is never the session's to interrupt
    assert!(matches!(s.interrupt().await, Err(Error::ShellState(_))));
    let r = m.run(Command::shell("echo run")).await.unwrap();
    assert_eq!(r.stdout, "run\n");
    m.close().await.unwrap();
}

/// Long string operations (issue 11): an interrupt lands while one big word is built,
/// replaced, case-mapped, appended, sliced, joined or read, under the default memory
/// budget (2048 MiB); the command completes with 130 and the shell keeps its state.
#[tokio::test]
async fn interrupt_lands_inside_long_string_operations() {
    let m = machine();
    let s = m.open_shell().await.unwrap();
    done(
        &*s,
        "keep=kept; cd /tmp; x=$(head -c 50000000 /dev/zero | tr '\\0' ' '); echo ${#x}",
    )
    .await;
    for command in [
        "while :; do y=$x; y=$y$y; done",
        "while :; do y=${x// /ab}; done",
        "while :; do y=${x//?/ab}; done",
        "while :; do y=${x^^}; y=${x,,}; done",
        "while :; do y=$x; y+=$x; done",
        "while :; do y=\"$x$x$x$x\"; done",
        "a=(\"$x\" \"$x\"); while :; do y=\"${a[*]}\"; done",
        "while :; do y=${x:1:40000000}; done",
        "while :; do read -r y <<< \"$x$x\"; done",
        "while :; do set -- $x$x; done",
    ] {
        let running = {
            let s = s.clone();
            tokio::spawn(async move { s.execute(command, WAIT, LIMIT).await })
        };
        // the command is under way (its first long step started) before the interrupt
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        s.interrupt()
            .await
            .unwrap_or_else(|e| panic!("{command}: {e}"));
        let u = running.await.unwrap().unwrap();
        assert_eq!(
            (u.status, u.exit_code),
            (ShellStatus::Completed, Some(130)),
            "{command}: {u:?}"
        );
        assert_eq!(
            done(&*s, "echo \"$? $keep $PWD ${#x}\"").await,
            ("130 kept /tmp 50000000\n".into(), 0),
            "{command}: the shell keeps its state"
        );
    }
    m.close().await.unwrap();
}

#[tokio::test]
async fn a_dropped_execute_stops_its_command() {
    let m = machine();
    let s = m.open_shell().await.unwrap();
    let r = tokio::time::timeout(
        std::time::Duration::from_millis(50),
        s.execute(BUSY, WAIT, LIMIT),
    )
    .await;
    assert!(r.is_err(), "the loop never ends on its own: {r:?}");
    // the stopped command answers nobody; the session is free again once it stopped
    let u = loop {
        match s.execute("echo free", WAIT, LIMIT).await {
            Err(Error::ShellState(_)) => tokio::task::yield_now().await,
            other => break other.unwrap(),
        }
    };
    assert_eq!(&u.output[..], b"free\n");
    m.close().await.unwrap();
}

#[tokio::test]
async fn machine_budgets_apply_to_the_session() {
    // the session's variables count against the machine's memory while a run goes on
    let budget = 32u64 << 20;
    let f = SimMachineFactory::with_options(SimOptions {
        memory_bytes: Some(budget),
        ..SimOptions::default()
    });
    // about 20 MiB in 320 variables of 64 KiB
    let hold = |n: u32| {
        format!("x=$(printf '%65536s'); for i in $(seq {n}); do eval \"v$i=\\$x\"; done; echo held")
    };
    let alone = f.create_sim(MachineSpec::sim()).unwrap();
    assert_eq!(
        alone.run(Command::shell(hold(320))).await.unwrap().stdout,
        "held\n",
        "20 MiB fit in 32"
    );
    alone.close().await.unwrap();
    let m = f.create_sim(MachineSpec::sim()).unwrap();
    let s = m.open_shell().await.unwrap();
    assert_eq!(done(&*s, &hold(256)).await, ("held\n".into(), 0));
    let e = m.run(Command::shell(hold(320))).await.unwrap_err();
    assert!(
        matches!(&e, Error::Terminated(r) if r.contains("memory")),
        "16 MiB in the session and 20 in the run: {e:?}"
    );
    assert!(matches!(
        s.execute("echo x", WAIT, LIMIT).await,
        Err(Error::Closed)
    ));

    // the session's own flood ends the machine too
    let m = f.create_sim(MachineSpec::sim()).unwrap();
    let s = m.open_shell().await.unwrap();
    let e = s
        .execute("x=a; while :; do x=$x$x; done", WAIT, LIMIT)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Terminated(r) if r.contains("memory")),
        "{e:?}"
    );
    assert!(matches!(
        m.run(Command::shell("true")).await,
        Err(Error::Closed)
    ));
    assert!(matches!(m.open_shell().await, Err(Error::Closed)));

    // CPU fuel
    let f = SimMachineFactory::with_options(SimOptions {
        cpu_fuel: 100_000,
        ..SimOptions::default()
    });
    let m = f.create_sim(MachineSpec::sim()).unwrap();
    let s = m.open_shell().await.unwrap();
    let e = s.execute(BUSY, WAIT, LIMIT).await.unwrap_err();
    assert!(
        matches!(&e, Error::Terminated(r) if r.contains("fuel")),
        "{e:?}"
    );
}

#[test]
fn sessions_work_without_a_tokio_runtime() {
    let m = machine();
    let s = m.open_shell_sync().unwrap();
    let u = futures::executor::block_on(s.execute("cd /tmp 2>/dev/null || cd /; pwd", WAIT, LIMIT))
        .unwrap();
    assert_eq!(u.exit_code, Some(0));
    let u = futures::executor::block_on(s.execute("pwd", WAIT, LIMIT)).unwrap();
    assert_eq!(&u.output[..], b"/tmp\n");
    m.close_sync();
    assert!(matches!(
        futures::executor::block_on(s.execute("pwd", WAIT, LIMIT)),
        Err(Error::Closed)
    ));
}
