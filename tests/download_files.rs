//! `download_files` against a real machine (local bubblewrap), as REFERENCE.md 3.1 describes.
#![cfg(feature = "local")]

use std::time::Duration;

use shellbox::{download_files, Command, DownloadLimits, Error, Machine, MachineSpec};

async fn machine(test: &str) -> Option<Box<dyn Machine>> {
    match shellbox::factory(shellbox::Backend::Local).await {
        Ok(factory) => Some(factory.create(MachineSpec::host()).await.unwrap()),
        Err(e @ Error::SandboxUnavailable { .. }) => {
            eprintln!("SKIP {test}: {e}");
            None
        }
        Err(e) => panic!("local factory: {e}"),
    }
}

fn limits(max_files: usize, max_bytes: u64) -> DownloadLimits {
    DownloadLimits {
        max_files,
        max_bytes,
        max_file_bytes: 1 << 20,
        timeout: Duration::from_secs(30),
    }
}

const SETUP: &str = r#"mkdir -p /app/submission/sub && cd /app/submission &&
name=$(printf 'odd:name\nλ\\x') &&
printf 'answer\000' > "$name" && ln "$name" alias && ln -s /etc/passwd private &&
printf 'nested' > sub/n.txt"#;

#[tokio::test(flavor = "multi_thread")]
async fn reads_regular_files_and_hard_links_skips_missing() {
    let Some(m) = machine("reads_regular_files_and_hard_links_skips_missing").await else {
        return;
    };
    let r = m.run(Command::shell(SETUP)).await.unwrap();
    assert!(r.success(), "{r:?}");
    let odd = "/app/submission/odd:name\nλ\\x";
    let got = download_files(&m, &["/missing", "/app/submission", odd], limits(3, 1000))
        .await
        .unwrap();
    let keys: Vec<&str> = got.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        ["/app/submission/alias", odd, "/app/submission/sub/n.txt"],
        "the symlink is skipped, the hard link read, the file listed twice counted once"
    );
    assert_eq!(got[odd], b"answer\0");
    assert_eq!(got["/app/submission/alias"], b"answer\0");
    assert_eq!(got["/app/submission/sub/n.txt"], b"nested");
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn refuses_links_and_budgets() {
    let Some(m) = machine("refuses_links_and_budgets").await else {
        return;
    };
    let r = m
        .run(Command::shell(format!(
            "{SETUP} && ln -s /app/submission /app/linkdir"
        )))
        .await
        .unwrap();
    assert!(r.success(), "{r:?}");
    for linked in [
        "/app/submission/private",
        "/app/linkdir/sub/n.txt",
        "/app/linkdir",
    ] {
        let err = download_files(&*m, &[linked], limits(10, 1000))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::Transfer { reason, .. } if reason.contains("links are not allowed")),
            "{linked}: {err:?}"
        );
    }
    let err = download_files(&*m, &["/app/submission"], limits(2, 1000))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::DownloadLimitExceeded(_)), "{err:?}");
    let err = download_files(&*m, &["/app/submission"], limits(10, 10))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::DownloadLimitExceeded(_)), "{err:?}");
    let mut small = limits(10, 1000);
    small.max_file_bytes = 3;
    let err = download_files(&*m, &["/app/submission"], small)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Transfer { .. }), "{err:?}");
    let err = download_files(&*m, &["app/relative"], limits(10, 1000))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    // A FIFO is neither file nor directory: skipped like a missing path.
    m.run(Command::shell("mkfifo /tmp/fifo")).await.unwrap();
    let got = download_files(&*m, &["/tmp/fifo"], limits(10, 1000))
        .await
        .unwrap();
    assert!(got.is_empty());
    m.close().await.unwrap();
    assert!(matches!(
        download_files(&*m, &["/tmp"], limits(10, 1000)).await,
        Err(Error::Closed)
    ));
}

/// Found by the serve fuzzer (`download_files` with `"max_files": 18446744073709551615`):
/// the archive's output budget was `max_bytes + 1 MiB + 1024 * max_files`, unchecked, so
/// large limits overflowed (a panic in debug builds, a wrapped tiny budget in release).
#[cfg(feature = "sim")]
#[tokio::test(flavor = "multi_thread")]
async fn limits_near_u64_max_do_not_overflow() {
    let factory = shellbox::factory(shellbox::Backend::Sim).await.unwrap();
    let m = factory.create(MachineSpec::sim()).await.unwrap();
    let r = m
        .run(Command::shell("mkdir -p /d && printf x > /d/f"))
        .await
        .unwrap();
    assert!(r.success(), "{r:?}");
    for (max_files, max_bytes) in [
        (usize::MAX, u64::MAX),
        (usize::MAX, 1 << 20),
        (10, u64::MAX),
    ] {
        let limits = DownloadLimits {
            max_files,
            max_bytes,
            max_file_bytes: u64::MAX,
            timeout: Duration::from_secs(60),
        };
        let files = download_files(&*m, &["/d"], limits).await.unwrap();
        assert_eq!(
            files.get("/d/f").map(Vec::as_slice),
            Some(&b"x"[..]),
            "{max_files} files, {max_bytes} bytes: {files:?}"
        );
    }
}

/// Names in `dir` that start with the bounded download's staging prefix, and the bytes
/// staged in them so far.
fn staged(dir: &std::path::Path) -> (Vec<String>, u64) {
    let mut names = Vec::new();
    let mut bytes = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(shellbox::STAGING_PREFIX) {
            // The staging directory may go at any moment (the download ends): count what
            // can be read.
            for file in std::fs::read_dir(entry.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                bytes += file.metadata().map(|m| m.len()).unwrap_or(0);
            }
            names.push(name);
        }
    }
    (names, bytes)
}

/// Issue 12: dropping a `download_file` future part way (a 1 GiB sparse file on local, the
/// most a local command may write, dropped once bytes have reached the staging file) leaves
/// no staging directory, the old target as it was, and the machine usable (the guest `cat`
/// is killed with the stream).
#[tokio::test(flavor = "multi_thread")]
async fn dropping_download_file_mid_transfer_leaves_no_staging_and_the_old_target() {
    let test = "dropping_download_file_mid_transfer_leaves_no_staging_and_the_old_target";
    let Some(m) = machine(test).await else {
        return;
    };
    let r = m
        .run(Command::shell("truncate -s 1G /tmp/big && echo ok"))
        .await
        .unwrap();
    assert_eq!(r.stdout_lossy(), "ok\n", "{r:?}");
    let host = tempfile::tempdir().unwrap();
    let target = host.path().join("result.bin");
    std::fs::write(&target, b"old").unwrap();

    let mut download = Box::pin(m.download_file("/tmp/big", &target, u64::MAX));
    let mut seen = 0;
    while seen == 0 {
        tokio::select! {
            result = &mut download => panic!(
                "the 1 GiB download ended before it could be dropped: {result:?}"
            ),
            _ = tokio::time::sleep(Duration::from_millis(1)) => {
                seen = staged(host.path()).1;
            }
        }
    }
    drop(download);
    assert_eq!(
        staged(host.path()),
        (Vec::new(), 0),
        "the staging directory is removed when the future is dropped ({seen} bytes staged)"
    );
    assert_eq!(std::fs::read(&target).unwrap(), b"old");
    let names: Vec<String> = std::fs::read_dir(host.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["result.bin"]);
    let r = m.run(Command::shell("echo still")).await.unwrap();
    assert_eq!(r.stdout_lossy(), "still\n", "{r:?}");
    m.close().await.unwrap();
}
