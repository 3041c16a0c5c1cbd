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

/// `shellbox pyenv build --only-binary` refuses a lock holding an sdist (uv `--no-build`)
/// and never runs the sdist's build hook on the host; the environment is not made.
#[cfg(feature = "pyenv")]
#[test]
fn pyenv_build_only_binary_refuses_an_sdist() {
    let test = "pyenv_build_only_binary_refuses_an_sdist";
    let Some(python) = interpreter() else {
        eprintln!("SKIP {test}: no python3");
        return;
    };
    if !has_uv() {
        eprintln!("SKIP {test}: uv is not on PATH (scripts/setup-pyenv)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // An sdist whose setup.py, if anything ran it, would write a host file.
    let hook_ran = dir.path().join("HOOK_RAN");
    let src = dir.path().join("src/shellbox_sdist_probe-1.0");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        src.join("setup.py"),
        format!(
            "open({:?}, 'w').write('ran')\nfrom setuptools import setup\nsetup(name='shellbox-sdist-probe', version='1.0')\n",
            hook_ran.to_str().unwrap()
        ),
    )
    .unwrap();
    std::fs::write(
        src.join("PKG-INFO"),
        "Metadata-Version: 2.1\nName: shellbox-sdist-probe\nVersion: 1.0\n",
    )
    .unwrap();
    let links = dir.path().join("links");
    std::fs::create_dir(&links).unwrap();
    let archive = links.join("shellbox_sdist_probe-1.0.tar.gz");
    let status = Command::new("tar")
        .arg("czf")
        .arg(&archive)
        .arg("-C")
        .arg(dir.path().join("src"))
        .arg("shellbox_sdist_probe-1.0")
        .status()
        .unwrap();
    assert!(status.success());
    let sum = Command::new("sha256sum").arg(&archive).output().unwrap();
    let sum = text(&sum.stdout);
    let sum = sum.split_whitespace().next().unwrap();
    let lock = dir.path().join("requirements.lock");
    std::fs::write(
        &lock,
        format!("shellbox-sdist-probe==1.0 \\\n    --hash=sha256:{sum}\n"),
    )
    .unwrap();
    let root = dir.path().join("env");
    let out = shellbox(
        &[
            "pyenv",
            "build",
            "--root",
            root.to_str().unwrap(),
            "--lock",
            lock.to_str().unwrap(),
            "--python",
            python.to_str().unwrap(),
            "--only-binary",
        ],
        &[
            ("UV_FIND_LINKS", links.to_str().unwrap()),
            ("UV_NO_INDEX", "1"),
            (
                "UV_CACHE_DIR",
                dir.path().join("uv-cache").to_str().unwrap(),
            ),
        ],
    );
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "an sdist built: {stderr}");
    assert!(
        stderr.contains("--no-build") || stderr.contains("no usable wheels"),
        "{stderr}"
    );
    assert!(!hook_ran.exists(), "the sdist's build hook ran on the host");
    assert!(
        !root.join("bin/python").exists(),
        "a failed build left an environment"
    );
}
