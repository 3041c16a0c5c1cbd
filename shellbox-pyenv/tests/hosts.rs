//! A direct reference whose host *name* resolves to a private address is refused
//! (`requirement_problem`), judged against an `/etc/hosts` of the test's own: the test runs
//! itself again in a mount namespace of its own (`unshare --mount`) with a hosts file bound
//! over `/etc/hosts`, so the rule is exercised whatever names this host's file holds (the
//! same check over the host's own file, in resolve.rs's unit tests, has nothing to check on
//! a host whose file names only `localhost`).

use std::process::Command;

use shellbox_pyenv::{requirement_problem, MAX_REQUIREMENT_NESTING};

/// The variable that tells the inner run it is inside the namespace.
const INNER: &str = "SHELLBOX_TEST_HOSTS_INNER";

#[test]
fn names_resolving_to_private_addresses_are_refused() {
    let test = "names_resolving_to_private_addresses_are_refused";
    if std::env::var_os(INNER).is_some() {
        for private in [
            "shellbox-private-a",
            "shellbox-private-b.example",
            "shellbox-loop",
        ] {
            for reference in [
                format!("six @ http://{private}:8765/six-1.17.0-py2.py3-none-any.whl"),
                format!("six @ https://user@{private}./six.whl"),
                format!("https://{private}/six-1.17.0-py2.py3-none-any.whl"),
                format!("pkg @ git+https://{private}/org/pkg.git"),
            ] {
                assert!(
                    requirement_problem(&reference).is_some(),
                    "{reference:?} was accepted"
                );
            }
        }
        // A name of a public address, in the same file, is accepted.
        let public = "six @ https://shellbox-public-host/six-1.17.0-py2.py3-none-any.whl";
        assert_eq!(requirement_problem(public), None, "{public:?}");
        return;
    }
    if !nix_is_root() {
        eprintln!("SKIP {test}: needs root for unshare --mount");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let hosts = dir.path().join("hosts");
    std::fs::write(
        &hosts,
        "127.0.0.1 localhost\n\
         10.9.8.7 shellbox-private-a\n\
         fd00::7 shellbox-private-b.example\n\
         127.0.1.5 shellbox-loop\n\
         93.184.215.14 shellbox-public-host\n",
    )
    .unwrap();
    let me = std::env::current_exe().unwrap();
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(r#"mount --bind "$1" /etc/hosts && exec "$2" --exact "$3" --nocapture --test-threads 1"#)
        .args(["sh".as_ref(), hosts.as_os_str(), me.as_os_str(), test.as_ref()])
        .env(INNER, "1")
        .output();
    let out = match out {
        Ok(out) => out,
        Err(e) => {
            eprintln!("SKIP {test}: cannot run unshare: {e}");
            return;
        }
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "inner run failed: {text}");
    assert!(
        text.contains("1 passed"),
        "the inner run ran no test: {text}"
    );
}

fn nix_is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A requirement whose markers nest deeper than [`MAX_REQUIREMENT_NESTING`] is refused
/// before the PEP 508 parser sees it: the parser recurses per parenthesis, and 1,000 levels
/// overflowed the stack and aborted the process (second break-it pass of issue 12, through
/// the CLI and `serve`). Run on a thread of 256 KiB, well below the 2 MiB a spawned thread
/// gets, so that a recursion the depth check lets through would fail here first.
#[test]
fn deeply_nested_markers_are_refused_without_recursing() {
    let child = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(|| {
            for n in [MAX_REQUIREMENT_NESTING + 1, 1_000, 100_000] {
                let deep = format!(
                    "six; {}python_version > \"2\"{}",
                    "(".repeat(n),
                    ")".repeat(n)
                );
                let problem = requirement_problem(&deep).expect("accepted");
                assert!(problem.contains("nested"), "{problem}");
                let extras = format!("six{}", "[".repeat(n));
                assert!(requirement_problem(&extras).is_some());
            }
            // At the bound itself, a real marker still parses.
            let n = MAX_REQUIREMENT_NESTING - 1;
            let ok = format!(
                "six; {}python_version > \"2\"{}",
                "(".repeat(n),
                ")".repeat(n)
            );
            assert_eq!(requirement_problem(&ok), None, "{ok}");
        })
        .unwrap();
    child.join().unwrap();
}
