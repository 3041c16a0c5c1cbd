//! Local snapshots (issue 15) beyond the shared conformance cases, and what a machine's
//! `/proc/self/mountinfo` shows of the host (issue 12's break-it pass): real bwrap, a root
//! host process (the machine root is an overlayfs in the machine's mount namespace).

mod common;

use std::path::PathBuf;

use shellbox_core::{Command, Machine, MachineFactory, MachineSpec};
use shellbox_local::{LocalMachine, LocalOptions, SystemDirectories};

fn root_or_skip(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    eprintln!("SKIP {test}: local snapshots and overlay roots need a root host process");
    false
}

async fn sh(m: &dyn Machine, script: &str) -> String {
    let r = m.run(Command::shell(script)).await.unwrap();
    assert_eq!(r.exit_code, Some(0), "{script}: {r:?}");
    r.stdout_lossy()
}

/// The private directory of a machine (`shellbox-local-*`), around its root.
fn private_of(m: &LocalMachine) -> PathBuf {
    m.root().parent().unwrap().to_path_buf()
}

/// The host paths of a machine's directories must not appear in its mountinfo: not its
/// private directory (root, upper, work, copy-on-write layers), not any snapshot layer,
/// not the factory's shared `/etc` copy.
fn assert_no_host_paths(info: &str, m: &LocalMachine, what: &str) {
    let private = private_of(m).display().to_string();
    assert!(
        !info.contains(&private),
        "{what}: mountinfo names {private}:\n{info}"
    );
    for needle in [
        shellbox_local::ROOT_PREFIX,
        shellbox_local::LAYER_PREFIX,
        shellbox_local::ETC_PREFIX,
    ] {
        assert!(
            !info.contains(needle),
            "{what}: mountinfo names a {needle}* directory:\n{info}"
        );
    }
}

/// Inside a machine, `/proc/self/mountinfo` names no host path of the machine's root or
/// layers: the root is an overlayfs (its root field `/`) whose layers were given to the
/// kernel as `.` after an `fchdir` (so its options read `lowerdir+=.,upperdir=.`), and so
/// are a copy-on-write machine's system-directory overlays; also after a snapshot and in a
/// fork (whose lower layers are snapshot layers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mountinfo_names_no_host_path_of_the_machine() {
    if !root_or_skip("mountinfo_names_no_host_path_of_the_machine") {
        return;
    }
    for system_directories in [SystemDirectories::ReadOnly, SystemDirectories::CopyOnWrite] {
        let Some(factory) = common::factory_with(
            "mountinfo_names_no_host_path_of_the_machine",
            LocalOptions {
                system_directories,
                ..LocalOptions::default()
            },
        ) else {
            return;
        };
        let what = format!("{system_directories:?}");
        let m = factory.create_local(MachineSpec::host()).await.unwrap();
        let info = sh(&m, "cat /proc/self/mountinfo").await;
        assert_no_host_paths(&info, &m, &what);
        let root_line = info
            .lines()
            .find(|l| l.split(' ').nth(4) == Some("/"))
            .unwrap_or_else(|| panic!("{what}: no mount at /:\n{info}"));
        assert_eq!(
            root_line.split(' ').nth(3),
            Some("/"),
            "{what}: {root_line}"
        );
        assert!(root_line.contains(" - overlay "), "{what}: {root_line}");
        if system_directories == SystemDirectories::ReadOnly {
            let snapshot = m.snapshot().await.unwrap();
            let info = sh(&m, "cat /proc/self/mountinfo").await;
            assert_no_host_paths(&info, &m, "after a snapshot");
            let fork = factory
                .create_from_local(&snapshot, MachineSpec::host())
                .await
                .unwrap();
            let info = sh(&fork, "cat /proc/self/mountinfo").await;
            assert_no_host_paths(&info, &fork, "a fork");
            fork.close().await.unwrap();
        }
        m.close().await.unwrap();
    }
}

/// The layer directories a snapshot made (its id names the top one) in the host temp dir.
fn layer_dir(id: &str) -> PathBuf {
    std::env::temp_dir().join(id)
}

/// A snapshot's layers live in `shellbox-layer-*` directories of the host temp dir with an
/// owner marker; they stay while a snapshot handle or a machine started from it holds
/// them, and are gone once the last closes (machines first, then the snapshot, or the
/// other way round).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layers_go_with_their_last_user() {
    if !root_or_skip("layers_go_with_their_last_user") {
        return;
    }
    let Some(factory) = common::factory("layers_go_with_their_last_user") else {
        return;
    };
    for delete_first in [true, false] {
        let m = factory.create_local(MachineSpec::host()).await.unwrap();
        sh(&m, "echo one > f").await;
        let first = m.snapshot().await.unwrap();
        assert_eq!(first.backend(), "local");
        let dir = layer_dir(first.id());
        assert!(dir.join(shellbox_local::OWNER_FILE).is_file(), "{dir:?}");
        assert!(first.id().starts_with(shellbox_local::LAYER_PREFIX));
        sh(&m, "echo two > g").await;
        let second = m.snapshot().await.unwrap();
        let dir2 = layer_dir(second.id());
        let fork = factory.fork(&m, MachineSpec::host()).await.unwrap();
        assert_eq!(sh(&*fork, "cat f g").await, "one\ntwo\n");
        if delete_first {
            first.delete().await.unwrap();
            second.delete().await.unwrap();
            // The parent and the fork still mount both layers.
            assert!(dir.is_dir() && dir2.is_dir());
            m.close().await.unwrap();
            assert_eq!(sh(&*fork, "cat f g").await, "one\ntwo\n");
            fork.close().await.unwrap();
        } else {
            m.close().await.unwrap();
            fork.close().await.unwrap();
            // The handles still hold them.
            assert!(dir.is_dir() && dir2.is_dir());
            drop(first);
            second.delete().await.unwrap();
        }
        // The fork's own snapshot layer (taken by fork) went with its handle too.
        assert!(!dir.exists(), "{dir:?} left");
        assert!(!dir2.exists(), "{dir2:?} left");
        assert!(!private_of(&m).exists());
    }
}

/// A snapshot ends the machine's processes (a background process, the open shell
/// session) and keeps its files; the machine goes on with a new sandbox, a new session
/// opens, and a process started after the snapshot writes only the machine's new layer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_ends_processes_and_keeps_files() {
    if !root_or_skip("snapshot_ends_processes_and_keeps_files") {
        return;
    }
    let Some(factory) = common::factory("snapshot_ends_processes_and_keeps_files") else {
        return;
    };
    let m = factory.create_local(MachineSpec::host()).await.unwrap();
    sh(
        &m,
        "echo kept > kept; (while :; do date +%s%N >> ticks; sleep 0.01; done) >/dev/null 2>&1 & \
         while [ ! -s ticks ]; do sleep 0.01; done",
    )
    .await;
    let session = m.open_shell().await.unwrap();
    let snapshot = m.snapshot().await.unwrap();
    let e = session
        .execute("echo hi", std::time::Duration::from_secs(5), 1024)
        .await
        .unwrap_err();
    assert!(
        matches!(e, shellbox_core::Error::Closed),
        "the session outlived the snapshot: {e:?}"
    );
    // No process of the machine writes any more: the ticks file stays as it is.
    let a = sh(
        &m,
        "wc -l < ticks; ps -e -o comm= | grep -c '^sleep$' || true",
    )
    .await;
    std::thread::sleep(std::time::Duration::from_millis(100));
    let b = sh(
        &m,
        "wc -l < ticks; ps -e -o comm= | grep -c '^sleep$' || true",
    )
    .await;
    assert_eq!(a, b, "a background process survived the snapshot");
    assert!(a.ends_with("\n0\n"), "{a}");
    let s2 = m.open_shell().await.unwrap();
    let u = s2
        .execute("echo hi", std::time::Duration::from_secs(10), 1024)
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&u.output).contains("hi"), "{u:?}");
    // The machine writes on; the snapshot keeps what it had.
    sh(&m, "echo later > kept").await;
    let fork = factory
        .create_from_local(&snapshot, MachineSpec::host())
        .await
        .unwrap();
    assert_eq!(sh(&fork, "cat kept").await, "kept\n");
    assert_eq!(sh(&m, "cat kept").await, "later\n");
    // Transfers see the machine's current layer, and the fork its own.
    let tmp = tempfile::tempdir().unwrap();
    m.download("/workspace/kept", &tmp.path().join("m"))
        .await
        .unwrap();
    fork.download("/workspace/kept", &tmp.path().join("f"))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("m")).unwrap(),
        "later\n"
    );
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("f")).unwrap(),
        "kept\n"
    );
    fork.close().await.unwrap();
    m.close().await.unwrap();
}

/// A chain that grows deep is squashed: after many snapshots the machine's root stacks at
/// most [`shellbox_local::MAX_LAYER_DEPTH`] lower layers, and every snapshot still starts
/// machines with its own files (contents, a removed file staying removed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_chains_are_squashed() {
    if !root_or_skip("deep_chains_are_squashed") {
        return;
    }
    let Some(factory) = common::factory("deep_chains_are_squashed") else {
        return;
    };
    let m = factory.create_local(MachineSpec::host()).await.unwrap();
    sh(&m, "echo gone > gone && ln -s n link").await;
    let mut snapshots = Vec::new();
    let rounds = shellbox_local::MAX_LAYER_DEPTH + 4;
    for i in 0..rounds {
        sh(&m, &format!("echo {i} > n; rm -f gone")).await;
        snapshots.push(m.snapshot().await.unwrap());
    }
    let lowers = |info: &str| {
        info.lines()
            .find(|l| l.split(' ').nth(4) == Some("/"))
            .map(|l| l.matches("lowerdir+=").count())
            .unwrap()
    };
    let info = sh(&m, "cat /proc/self/mountinfo").await;
    assert!(
        lowers(&info) <= shellbox_local::MAX_LAYER_DEPTH,
        "{} lower layers:\n{info}",
        lowers(&info)
    );
    for (i, snapshot) in snapshots.iter().enumerate() {
        let fork = factory
            .create_from_local(snapshot, MachineSpec::host())
            .await
            .unwrap();
        assert_eq!(
            sh(
                &fork,
                "cat link; ls gone 2>/dev/null; stat -c %a /workspace"
            )
            .await,
            format!("{i}\n755\n"),
            "snapshot {i}"
        );
        fork.close().await.unwrap();
    }
    m.close().await.unwrap();
    drop(snapshots);
}

/// `gc` removes the snapshot layers of an owner that died, and keeps a live owner's.
#[test]
fn gc_removes_a_dead_owners_layers() {
    let base = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    let me = shellbox_local::Owner::current();
    let dead = shellbox_local::Owner {
        pid,
        start_ticks: Some(1),
        host: me.host.clone(),
    };
    let make = |name: &str, owner: &shellbox_local::Owner| -> PathBuf {
        let dir = base.path().join(name);
        std::fs::create_dir_all(dir.join("root/workspace")).unwrap();
        std::fs::write(dir.join("root/workspace/f"), "x").unwrap();
        std::fs::write(dir.join(shellbox_local::OWNER_FILE), owner.to_json()).unwrap();
        dir
    };
    let gone = make(&format!("{}dead", shellbox_local::LAYER_PREFIX), &dead);
    let kept = make(&format!("{}live", shellbox_local::LAYER_PREFIX), me);
    let report = shellbox_local::gc_in(base.path()).unwrap();
    assert_eq!(report.removed, vec![gone.clone()], "{report:?}");
    assert!(!gone.exists());
    assert!(kept.join("root/workspace/f").is_file());
    assert_eq!(report.kept, 1);
}

/// Commands that start while a snapshot is taken wait for it and run in the machine's new
/// sandbox: none fails with `Closed` (the machine is open) and none hangs. A command
/// already running when the snapshot ends the machine's processes is ended with them (its
/// error says the sandbox ended or its keeper was killed): at most one per runner and
/// snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn commands_during_a_snapshot_wait_for_it() {
    if !root_or_skip("commands_during_a_snapshot_wait_for_it") {
        return;
    }
    let Some(factory) = common::factory("commands_during_a_snapshot_wait_for_it") else {
        return;
    };
    let m = std::sync::Arc::new(factory.create_local(MachineSpec::host()).await.unwrap());
    sh(&*m, "true").await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (runners_n, snapshots_n) = (6, 5);
    let runners: Vec<_> = (0..runners_n)
        .map(|i| {
            let (m, stop) = (m.clone(), stop.clone());
            tokio::spawn(async move {
                let (mut ok, mut ended) = (0u32, 0u32);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let r = tokio::time::timeout(
                        std::time::Duration::from_secs(60),
                        m.run(Command::shell(format!("echo {i} >> log{i}"))),
                    )
                    .await
                    .unwrap_or_else(|_| panic!("runner {i}: a command hung"));
                    match r {
                        Ok(r) if r.exit_code == Some(0) => ok += 1,
                        // Running when the snapshot ended the machine's processes.
                        Err(shellbox_core::Error::Backend { source, .. })
                            if source.to_string().contains("sandbox ended")
                                || source.to_string().contains("keeper was killed") =>
                        {
                            ended += 1
                        }
                        Err(e) => panic!("runner {i}, after {ok} runs: {e:?}"),
                        Ok(r) => panic!("runner {i}, after {ok} runs: {r:?}"),
                    }
                }
                (ok, ended)
            })
        })
        .collect();
    let mut snapshots = Vec::new();
    for _ in 0..snapshots_n {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        snapshots.push(m.snapshot().await.unwrap());
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut total, mut ended) = (0, 0);
    for r in runners {
        let (o, e) = r.await.unwrap();
        total += o;
        ended += e;
    }
    assert!(total > 0);
    assert!(ended <= runners_n * snapshots_n, "{ended} commands ended");
    drop(snapshots);
    std::sync::Arc::try_unwrap(m)
        .unwrap()
        .close()
        .await
        .unwrap();
}
