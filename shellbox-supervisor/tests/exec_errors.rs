//! How the supervisor program reports a program it could not run: the shell's exit codes
//! and messages (bash's `shell_execve`, dash's): 127 "not found", 126 with the reason
//! otherwise, `E2BIG` among them ("Argument list too long"). The real program, started on
//! the host as a child of the test (not as a machine's PID 1), over its real channel.

use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;

use shellbox_supervisor::{proto, Client, OutputStream, Reply};

/// The supervisor program started with a 1 MiB stack limit, so `execve(2)` takes at most
/// 256 KiB of argv and environment (`ARG_MAX` is a quarter of the stack limit), under the
/// supervisor's own 1 MiB bound. The child is killed when the returned handle drops.
async fn supervisor(dir: &std::path::Path) -> (Client, tokio::process::Child) {
    let program = dir.join("shellbox-supervisor");
    std::fs::write(&program, shellbox_supervisor::SUPERVISOR_PROGRAM).unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut child = tokio::process::Command::new("/bin/sh")
        .args(["-c", "ulimit -s 1024 && exec \"$0\""])
        .arg(&program)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let stdin = child.stdin.take().unwrap();
    (Client::connect(stdout, stdin).await.unwrap(), child)
}

/// Runs `argv` to its end: (exit code, stderr).
async fn run(client: &Client, argv: Vec<Vec<u8>>) -> (Option<i32>, String) {
    let start = proto::Start {
        argv,
        env: vec![b"PATH=/usr/bin:/bin".to_vec()],
        cwd: b"/".to_vec(),
        output_limit_bytes: 1 << 20,
        ..Default::default()
    };
    let mut running = client.start(&start, &[]).unwrap();
    let mut stderr = Vec::new();
    loop {
        match running.next().await.expect("a reply") {
            Reply::Output(OutputStream::Stderr, b) => stderr.extend_from_slice(&b),
            Reply::Output(OutputStream::Stdout, _) => {}
            Reply::Exit(exit) => return (exit.code, String::from_utf8_lossy(&stderr).into()),
            Reply::Fail(f) => panic!("failed: {f:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_failures_have_the_shells_codes_and_messages() {
    let dir = std::env::temp_dir().join(format!("shellbox-sup-exec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (client, _child) = supervisor(&dir).await;
    let args = |program: &str, n: usize, len: usize| {
        let mut argv = vec![program.as_bytes().to_vec()];
        argv.extend(std::iter::repeat_n(vec![b'x'; len], n));
        argv
    };
    // 3 arguments of 100 KB: within the supervisor's 1 MiB, over this ARG_MAX (E2BIG).
    // It used to be 127 "not found": the search took E2BIG for a missing candidate.
    for program in ["true", "/bin/true"] {
        let (code, stderr) = run(&client, args(program, 3, 100_000)).await;
        assert_eq!(code, Some(126), "{program}: {stderr}");
        assert_eq!(stderr, format!("sh: {program}: Argument list too long\n"));
    }
    // Within it: runs.
    let (code, stderr) = run(&client, args("true", 1, 100_000)).await;
    assert_eq!((code, stderr.as_str()), (Some(0), ""));
    // Not found: 127; not executable, or a directory: 126 "Permission denied".
    let (code, stderr) = run(&client, args("shellbox-no-such-program", 0, 0)).await;
    assert_eq!(code, Some(127), "{stderr}");
    assert_eq!(stderr, "sh: shellbox-no-such-program: not found\n");
    let plain = dir.join("plain");
    std::fs::write(&plain, "").unwrap();
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o600)).unwrap();
    for path in [plain.to_str().unwrap(), "/"] {
        let (code, stderr) = run(&client, args(path, 0, 0)).await;
        assert_eq!(code, Some(126), "{path}: {stderr}");
        assert_eq!(stderr, format!("sh: {path}: Permission denied\n"));
    }
    drop(client);
    std::fs::remove_dir_all(&dir).unwrap();
}
