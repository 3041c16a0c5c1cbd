//! A machine's `/dev`, `/dev/shm` and `/dev/pts` are bounded (issue 12's break-it pass):
//! a write of data into `/dev` fails with `ENOSPC` instead of filling host memory,
//! `/dev/shm` is no larger than `storage_mb`, and one machine cannot take the host's ptys
//! from another. Real bwrap sandboxes; the bounds are set by a root host process.

mod common;

use std::time::Duration;

use shellbox_core::{Command, CommandResult, Machine, MachineFactory, MachineSpec, ShellStatus};
use shellbox_local::{LocalOptions, SystemDirectories};

async fn run(m: &dyn Machine, script: &str) -> CommandResult {
    m.run(Command::shell(script).timeout(Duration::from_secs(120)))
        .await
        .unwrap_or_else(|e| panic!("{script}: {e}"))
}

fn root_only(test: &str) -> bool {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIP {test}: the bounds of /dev are set by a root host process");
        return false;
    }
    true
}

/// 200 MiB into `/dev/x` fails with ENOSPC (bwrap's `/dev` was a `tmpfs` of half the
/// host's memory), with and without `storage_mb`, read-only and copy-on-write machines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writing_data_into_dev_fails_with_enospc() {
    let test = "writing_data_into_dev_fails_with_enospc";
    if !root_only(test) {
        return;
    }
    for dirs in [SystemDirectories::ReadOnly, SystemDirectories::CopyOnWrite] {
        let Some(f) = common::factory_with(
            test,
            LocalOptions {
                system_directories: dirs,
                ..LocalOptions::default()
            },
        ) else {
            return;
        };
        for spec in [MachineSpec::host(), MachineSpec::host().storage_mb(20)] {
            let m = f.create(spec.clone()).await.unwrap();
            let r = run(
                &m,
                "head -c 200M /dev/zero > /dev/x; echo $?; \
                 df -k --output=size /dev | tail -1; ls -s /dev/x",
            )
            .await;
            let out = r.stdout_lossy();
            let lines: Vec<&str> = out.lines().collect();
            assert_eq!(lines.first(), Some(&"1"), "{dirs:?} {spec:?}: {r:?}");
            assert!(
                r.stderr_lossy().contains("No space left on device"),
                "{dirs:?} {spec:?}: {r:?}"
            );
            let size_kib: u64 = lines[1].trim().parse().unwrap();
            assert!(size_kib <= 64, "{dirs:?} {spec:?}: /dev is {size_kib} KiB");
            // The device nodes still work.
            let r = run(&m, "echo ok > /dev/null && head -c 4 /dev/zero | wc -c").await;
            assert_eq!(r.stdout_lossy(), "4\n", "{r:?}");
            m.close().await.unwrap();
        }
    }
}

/// `/dev/shm` is 64 MiB, or `storage_mb` where that is less (it was 64 MiB on top of a
/// 20 MiB `storage_mb`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_shm_is_no_larger_than_storage_mb() {
    let test = "dev_shm_is_no_larger_than_storage_mb";
    if !root_only(test) {
        return;
    }
    let Some(f) = common::factory(test) else {
        return;
    };
    let m = f.create(MachineSpec::host().storage_mb(20)).await.unwrap();
    let r = run(
        &m,
        "df -k --output=size /dev/shm | tail -1 | tr -d ' '; head -c 30M /dev/zero > /dev/shm/x; echo $?",
    )
    .await;
    assert_eq!(r.stdout_lossy(), "20480\n1\n", "{r:?}");
    m.close().await.unwrap();
    let m = f.create(MachineSpec::host()).await.unwrap();
    let r = run(&m, "df -k --output=size /dev/shm | tail -1 | tr -d ' '").await;
    assert_eq!(r.stdout_lossy(), "65536\n", "{r:?}");
    m.close().await.unwrap();
}

/// `/dev/shm` holds at most one file per 4 KiB page of its size (16,384 for 64 MiB): empty
/// files took no page of the size bound, and a guest made 300,000 of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_shm_files_are_bounded() {
    let test = "dev_shm_files_are_bounded";
    if !root_only(test) {
        return;
    }
    let Some(f) = common::factory(test) else {
        return;
    };
    let m = f.create(MachineSpec::host()).await.unwrap();
    let r = run(
        &m,
        "df --output=itotal /dev/shm | tail -1 | tr -d ' '; \
         i=0; while [ $i -lt 20000 ] && true > /dev/shm/f$i 2>/dev/null; do i=$((i+1)); done; \
         echo $i; true > /dev/shm/more",
    )
    .await;
    let out = r.stdout_lossy();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "16384", "{r:?}");
    let made: u64 = lines[1].parse().unwrap();
    assert!((16000..=16384).contains(&made), "{made} files: {r:?}");
    assert!(
        r.stderr_lossy().contains("No space left on device"),
        "{r:?}"
    );
    m.close().await.unwrap();
}

/// Machine A opens ptys until the kernel refuses: it gets exactly 256 (its own `devpts`
/// instance's `max`; it got the host's whole pool, about 3000, before), and while A holds
/// them machine B's shell session and pty commands still work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_machine_cannot_take_the_hosts_ptys() {
    let test = "one_machine_cannot_take_the_hosts_ptys";
    if !root_only(test) {
        return;
    }
    let Some(f) = common::factory(test) else {
        return;
    };
    let a = f.create(MachineSpec::host()).await.unwrap();
    let b = f.create(MachineSpec::host()).await.unwrap();
    // A background holder: opens ptys until ENOSPC, writes the count, keeps them open.
    let holder = r#"
import errno, os, time
fds = []
try:
    while True:
        fds.append(os.openpty())
except OSError as e:
    code = errno.errorcode.get(e.errno, str(e.errno))
with open("/tmp/ptys.tmp", "w") as f:
    f.write("%d %s\n" % (len(fds), code))
os.rename("/tmp/ptys.tmp", "/tmp/ptys")
time.sleep(3600)
"#;
    let r = run(
        &a,
        &format!(
            "python3 -c '{holder}' </dev/null >/dev/null 2>&1 & \
             while [ ! -s /tmp/ptys ]; do sleep 0.1; done; cat /tmp/ptys"
        ),
    )
    .await;
    assert_eq!(r.stdout_lossy(), "256 ENOSPC\n", "{r:?}");
    let s = b
        .open_shell()
        .await
        .unwrap_or_else(|e| panic!("B's shell: {e}"));
    let u = s
        .execute(
            "tty >/dev/null && echo b-has-a-tty",
            Duration::from_secs(30),
            1 << 20,
        )
        .await
        .unwrap();
    assert_eq!(u.status, ShellStatus::Completed, "{u:?}");
    assert!(
        String::from_utf8_lossy(&u.output).contains("b-has-a-tty"),
        "{u:?}"
    );
    s.close().await.unwrap();
    a.close().await.unwrap();
    b.close().await.unwrap();
}
