//! `shellbox run --package/--tool`: software by name from the command line, on local (real
//! bwrap, uv and PyPI; SKIP lines when missing) and sim.

use std::path::PathBuf;
use std::process::{Command, Output};

fn shellbox(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shellbox"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The real interpreter behind `python3` (or `$SHELLBOX_PYENV_TEST_PYTHON`).
fn interpreter() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SHELLBOX_PYENV_TEST_PYTHON") {
        return Some(p.into());
    }
    let o = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .ok()?;
    o.status
        .success()
        .then(|| PathBuf::from(text(&o.stdout).trim()))
}

/// `shellbox run ARGS -- true` is refused by shellbox itself: exit status 125 and `needle`
/// in its stderr.
fn refused(args: &[&str], needle: &str) {
    let mut argv = vec!["run"];
    argv.extend_from_slice(args);
    argv.extend(["--", "true"]);
    let out = shellbox(&argv, &[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{args:?}: {stderr}");
    assert!(
        stderr.contains(needle),
        "{args:?}: {needle:?} not in {stderr}"
    );
}

fn has_uv() -> bool {
    Command::new("uv")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn sim_takes_tools_it_has_and_refuses_python() {
    let out = shellbox(
        &[
            "run",
            "--backend",
            "sim",
            "--tool",
            "sed",
            "--",
            "sh",
            "-c",
            "echo ok",
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "ok\n");
    refused(
        &["--backend", "sim", "--tool", "sed", "--tool", "gcc"],
        "no program gcc",
    );
    refused(
        &["--backend", "sim", "--package", "six==1.17.0"],
        "no Python",
    );
    refused(
        &["--backend", "sim", "--python-version", "3.12.12"],
        "need --backend local",
    );
    refused(&["--backend", "sim", "--package=-e ."], "pypi_packages");
}

#[test]
fn local_package_and_tool() {
    let test = "local_package_and_tool";
    let Some(python) = interpreter() else {
        eprintln!("SKIP {test}: no python3");
        return;
    };
    if !has_uv() {
        eprintln!("SKIP {test}: uv is not on PATH (scripts/setup-pyenv)");
        return;
    }
    let probe = shellbox(&["run", "--backend", "local", "--", "true"], &[]);
    if !probe.status.success() {
        eprintln!(
            "SKIP {test}: the local backend cannot sandbox here: {}",
            text(&probe.stderr)
        );
        return;
    }
    let cache = tempfile::Builder::new()
        .prefix("cli-packages-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let cache_arg = cache.path().to_str().unwrap();
    let python_arg = python.to_str().unwrap();
    let args = [
        "run",
        "--backend",
        "local",
        "--package",
        "six==1.17.0",
        "--tool",
        "python3",
        "--python-interpreter",
        python_arg,
        "--package-cache",
        cache_arg,
        "--",
        "python3",
        "-c",
        "import six; print(six.__version__)",
    ];
    let out = shellbox(&args, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "1.17.0\n");
    // Again with no network for uv: the cache answers.
    let out = shellbox(&args, &[("UV_OFFLINE", "1")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "1.17.0\n");
    refused(
        &["--backend", "local", "--tool", "shellbox-absent-tool"],
        "Requested tools must be executable in the sandbox PATH",
    );
}
