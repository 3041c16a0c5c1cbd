//! Transfers of the docker backend against a real Docker Engine: special files (RULES 4),
//! uploads that fail before anything lands (issue 8 item 14), the archive rules of core's
//! shared download writer.

mod common;

use std::time::Duration;

use shellbox_core::{Command, Error, Machine, MachineFactory};

async fn sh(m: &dyn Machine, script: &str) -> String {
    let r = m.run(Command::shell(script)).await.unwrap();
    assert_eq!(r.exit_code, Some(0), "{script}: {r:?}");
    r.stdout_lossy()
}

fn mkfifo(path: &std::path::Path) {
    // mkfifo(1): the workspace forbids unsafe code outside shellbox-local.
    let made = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(made.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn special_files_fail_transfers_before_anything_lands() {
    let Some(f) = common::setup("special_files_fail_transfers_before_anything_lands").await else {
        return;
    };
    let m = f.create(common::spec()).await.unwrap();
    let host = tempfile::tempdir().unwrap();
    let src = host.path().join("src");
    for i in 0..20 {
        std::fs::create_dir_all(src.join(format!("d{i}"))).unwrap();
        std::fs::write(src.join(format!("a{i}.txt")), b"new").unwrap();
    }
    std::fs::create_dir_all(src.join("d19/deep")).unwrap();
    mkfifo(&src.join("d19/deep/zz-fifo"));
    sh(&*m, "mkdir -p /w/t && echo old > /w/t/keep").await;
    for target in ["/w/t", "/w/new"] {
        let err = tokio::time::timeout(Duration::from_secs(30), m.upload(&src, target))
            .await
            .expect("returns")
            .unwrap_err();
        assert!(
            matches!(&err, Error::Transfer { reason, .. }
                if reason.contains("only regular files, directories and symlinks")),
            "{target}: {err:?}"
        );
    }
    assert_eq!(sh(&*m, "ls -A /w; ls -A /w/t").await, "t\nkeep\n");
    // A conflict deep in the merge (a file where the upload has a directory) is found
    // before the first entry is sent.
    std::fs::remove_file(src.join("d19/deep/zz-fifo")).unwrap();
    std::fs::create_dir_all(src.join("t2/sub")).unwrap();
    std::fs::write(src.join("t2/sub/x"), b"x").unwrap();
    sh(&*m, "mkdir -p /w/t/t2 && echo file > /w/t/t2/sub").await;
    let err = m.upload(&src, "/w/t").await.unwrap_err();
    assert!(
        matches!(&err, Error::Transfer { path, .. } if path == "/w/t/t2/sub"),
        "{err:?}"
    );
    assert_eq!(
        sh(&*m, "ls -A /w/t; cat /w/t/t2/sub").await,
        "keep\nt2\nfile\n"
    );
    // Without it the upload merges.
    sh(&*m, "rm /w/t/t2/sub").await;
    m.upload(&src, "/w/t").await.unwrap();
    assert_eq!(
        sh(&*m, "cat /w/t/keep /w/t/a0.txt /w/t/t2/sub/x").await,
        "old\nnewx"
    );
    // Guest special files are refused by the shared download writer, at once.
    sh(
        &*m,
        "mkfifo /w/p && mkdir -p /w/d && echo x > /w/d/f && mkfifo /w/d/p",
    )
    .await;
    for source in ["/w/p", "/w/d"] {
        let out = host.path().join("out");
        let err = tokio::time::timeout(Duration::from_secs(30), m.download(source, &out))
            .await
            .expect("returns")
            .unwrap_err();
        assert!(
            matches!(&err, Error::Transfer { reason, .. }
                if reason.contains("only regular files, directories and symlinks")),
            "{source}: {err:?}"
        );
        assert!(!out.exists(), "{source}");
    }
    m.close().await.unwrap();
}
