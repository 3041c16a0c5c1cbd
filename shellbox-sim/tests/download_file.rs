//! The simulator's bounded download reads the machine's filesystem directly.

use shellbox_core::{Command, Error, Machine, MachineFactory, MachineSpec};
use shellbox_sim::SimMachineFactory;

/// A file past the 128 MiB a command may print arrives whole (second break-it pass of
/// issue 12: through a command, `download_file` of a 128 MiB file ended "machine terminated:
/// output limit exceeded"); a symlink loop is a Transfer error, not a hang; a link into
/// `/dev` is Unsupported ("regular file"); one byte past the limit is DownloadLimitExceeded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_files_links_and_loops() {
    let factory = SimMachineFactory::new();
    let m = factory.create(MachineSpec::sim()).await.unwrap();
    let size: u64 = 130 << 20;
    let r = m
        .run(Command::shell(format!(
            "head -c {size} /dev/zero > /tmp/big && ln -s /tmp/big /tmp/link && \
             ln -s /tmp/a /tmp/b && ln -s /tmp/b /tmp/a && ln -s /dev/null /tmp/null && echo ok"
        )))
        .await
        .unwrap();
    assert_eq!(r.stdout, "ok\n", "{:?}", r.stderr);
    let host = tempfile::tempdir().unwrap();
    let target = host.path().join("big");
    m.download_file("/tmp/link", &target, 1 << 30)
        .await
        .unwrap();
    assert_eq!(std::fs::metadata(&target).unwrap().len(), size);
    let e = m
        .download_file("/tmp/big", &target, size - 1)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::DownloadLimitExceeded(_)), "{e:?}");
    assert_eq!(std::fs::metadata(&target).unwrap().len(), size);
    let e = m.download_file("/tmp/a", &target, 10).await.unwrap_err();
    assert!(matches!(e, Error::Transfer { .. }), "{e:?}");
    let e = m.download_file("/tmp/null", &target, 10).await.unwrap_err();
    assert!(
        e.is_unsupported() && e.to_string().contains("regular file"),
        "{e:?}"
    );
    let left = std::fs::read_dir(host.path()).unwrap().count();
    assert_eq!(left, 1, "staging left behind");
    m.close().await.unwrap();
}
