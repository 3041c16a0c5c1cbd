//! A guest's directory tree of any depth, on the local backend against a real bwrap: a
//! machine whose commands nested thousands of directories closes (its root removed), and a
//! download of that tree fails with a typed error, on tokio's default 2 MiB stacks. Before
//! `shellbox_core::remove_tree`, closing such a machine overflowed the stack of the thread
//! that removed its root and aborted the whole process (issue 12's break-it pass: 15,000
//! levels on a tokio worker's 2 MiB; here 20,000 levels, on the same 2 MiB).

mod common;

use shellbox_core::{Command, Error, Machine, MachineSpec};

const LEVELS: usize = 20_000;

#[test]
fn a_machine_with_a_very_deep_tree_closes_and_its_root_is_removed() {
    let test = "a_machine_with_a_very_deep_tree_closes_and_its_root_is_removed";
    let Some(factory) = common::factory(test) else {
        return;
    };
    // tokio's default stack, set on every thread of the runtime (blocking pool included): a
    // removal that recursed once per level would overflow it before 20,000 levels (std's
    // remove_dir_all did at ~15,000).
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_stack_size(2 * 1024 * 1024)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let m = factory.create_local(MachineSpec::host()).await.unwrap();
        let script = format!(
            "import os\nos.chdir('/workspace')\nfor i in range({LEVELS}):\n    os.mkdir('d')\n    os.chdir('d')\nopen('leaf', 'w').write('x')\nprint('nested')\n"
        );
        let r = m
            .run(Command::new("python3").arg("-c").arg(script))
            .await
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&r.stdout),
            "nested\n",
            "{:?}",
            String::from_utf8_lossy(&r.stderr)
        );
        let host = tempfile::tempdir().unwrap();
        match m.download("/workspace/d", &host.path().join("d")).await {
            Err(Error::Transfer { .. }) => {}
            other => panic!("a download of a {LEVELS}-level tree: {other:?}"),
        }
        let root = m.root().to_path_buf();
        assert!(root.exists());
        m.close().await.unwrap();
        assert!(!root.exists(), "{} left after close", root.display());
        assert!(
            !root.parent().unwrap().exists(),
            "the private directory around the root is left"
        );
    });
}
