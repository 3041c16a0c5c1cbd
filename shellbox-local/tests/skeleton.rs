//! A fresh machine whose root is an overlayfs (a root host process, no `storage_mb`)
//! starts over its factory's skeleton layer: the host writes only the machine's empty
//! upper, machines of one layout share one skeleton, another layout gets its own, and the
//! skeletons go with the factory. Alone in its test binary: it counts the
//! `shellbox-layer-*` directories of a temp dir of its own (`TMPDIR`, set before any
//! factory exists).

mod common;

use std::path::Path;

use shellbox_core::{Command, Machine, MachineSpec};

fn layers_in(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with(shellbox_local::LAYER_PREFIX)
        })
        .count()
}

async fn sh(m: &dyn Machine, script: &str) -> String {
    let r = m.run(Command::shell(script)).await.unwrap();
    assert_eq!(r.exit_code, Some(0), "{script}: {r:?}");
    r.stdout_lossy()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_machines_start_over_one_skeleton_per_layout() {
    let test = "fresh_machines_start_over_one_skeleton_per_layout";
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIP {test}: overlay roots need a root host process");
        return;
    }
    let tmp = tempfile::Builder::new()
        .prefix("skeleton-test-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    // SAFETY: the only test of this binary, before any thread of its own reads the
    // environment.
    unsafe { std::env::set_var("TMPDIR", tmp.path()) };
    let Some(factory) = common::factory(test) else {
        return;
    };
    let a = factory.create_local(MachineSpec::host()).await.unwrap();
    let b = factory.create_local(MachineSpec::host()).await.unwrap();
    assert_eq!(layers_in(tmp.path()), 1, "one skeleton for one layout");
    for m in [&a, &b] {
        // The host wrote no file of the machine's root: its upper is empty.
        let upper = m
            .root()
            .parent()
            .unwrap()
            .join(shellbox_local::UPPER_DIR_NAME);
        assert_eq!(std::fs::read_dir(&upper).unwrap().count(), 0, "{upper:?}");
        assert_eq!(
            sh(
                m,
                "stat -c '%a %n' /tmp /home/shellbox / && pwd && test -d /proc/self"
            )
            .await,
            "1777 /tmp\n1777 /home/shellbox\n755 /\n/workspace\n"
        );
    }
    // One machine's writes stay its own: the skeleton is a shared, read-only lower layer.
    sh(
        &a,
        "echo mine > /tmp/f && rmdir /opt && mkdir /workspace/sub",
    )
    .await;
    assert_eq!(
        sh(&b, "ls -A /tmp; test -d /opt && echo opt; ls -A /workspace").await,
        "opt\n"
    );
    // Another workdir is another layout: a skeleton of its own, which makes that workdir.
    let c = factory
        .create_local(MachineSpec::host().workdir("/srv/job"))
        .await
        .unwrap();
    assert_eq!(sh(&c, "pwd").await, "/srv/job\n");
    assert_eq!(layers_in(tmp.path()), 2);
    for m in [a, b, c] {
        m.close().await.unwrap();
    }
    // The factory keeps its skeletons for the next machines, and removes them when dropped.
    assert_eq!(layers_in(tmp.path()), 2);
    let d = factory.create_local(MachineSpec::host()).await.unwrap();
    assert_eq!(layers_in(tmp.path()), 2, "the kept skeleton serves again");
    d.close().await.unwrap();
    drop(d);
    drop(factory);
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");
}
