//! The live local machines of one process hold together at most half the host's RAM (and
//! one `/dev/shm`) in their memory-backed file systems (issue 12's break-it pass: each
//! machine's `tmpfs` was bounded, all of them together were not). Alone in its test
//! binary: it fills the process's budget, which would refuse other tests' machines.

mod common;

use shellbox_core::{Error, Machine, MachineFactory, MachineSpec};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machines_share_one_host_memory_budget() {
    let test = "machines_share_one_host_memory_budget";
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIP {test}: a bounded root (storage_mb) needs a root host process");
        return;
    }
    let Some(f) = common::factory(test) else {
        return;
    };
    let largest = shellbox_local::largest_storage_mb();
    assert!(largest > 0, "sysinfo gave no memory");
    // One machine's bounded root is at most half the host's memory (issue 8's break-it
    // pass: storage_mb 10,000,000 gave a 9.6 TiB tmpfs).
    for mb in [largest + 1, 10_000_000] {
        let e = f
            .create(MachineSpec::host().storage_mb(mb))
            .await
            .map(drop)
            .unwrap_err();
        assert!(e.is_unsupported(), "{e:?}");
        assert!(e.to_string().contains("held in RAM"), "{e}");
    }
    // A tmpfs bound takes no memory until written: the largest root fits alone...
    let big = f
        .create(MachineSpec::host().storage_mb(largest))
        .await
        .unwrap();
    let r = big
        .run(shellbox_core::Command::shell("df -m / | tail -n 1"))
        .await
        .unwrap();
    assert_eq!(r.exit_code, Some(0), "{r:?}");
    // ...and leaves no room for another machine's /dev/shm.
    let refused = f.create(MachineSpec::host()).await.map(drop);
    match &refused {
        // LimitReached, the retryable kind (`limit_reached` on the wire): a harness waits
        // for a machine to close (break-it of issue 12: it was `backend`)
        Err(Error::LimitReached(message)) => {
            assert!(message.contains("reserve host memory"), "{refused:?}");
            assert!(message.contains("already reserved"), "{refused:?}");
        }
        other => panic!("{other:?}"),
    }
    // Closing the big machine gives its share back.
    big.close().await.unwrap();
    let machines = futures::future::join_all((0..4).map(|_| f.create(MachineSpec::host()))).await;
    for m in machines {
        m.unwrap().close().await.unwrap();
    }
    let again = f
        .create(MachineSpec::host().storage_mb(largest))
        .await
        .unwrap();
    again.close().await.unwrap();
}
