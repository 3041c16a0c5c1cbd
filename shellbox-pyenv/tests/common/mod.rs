//! Helpers shared by the integration tests: real uv, a real interpreter, a real hash lock.
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// `six==1.17.0` locked with its two real PyPI hashes (wheel and sdist), as
/// `uv pip compile --generate-hashes` writes them.
pub(crate) const SIX_LOCK: &str = "six==1.17.0 \\\n    --hash=sha256:4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274 \\\n    --hash=sha256:ff70335d468e7eb6ec65b95b99d3a2836546063f63acc5171de367e834932a81\n";

/// The same requirement with a hash that matches no file: uv must refuse it.
pub(crate) const BAD_HASH_LOCK: &str = "six==1.17.0 \\\n    --hash=sha256:0000000000000000000000000000000000000000000000000000000000000000\n";

/// A scratch directory under the target dir (not /tmp, which local machines replace).
pub(crate) fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("pyenv-test-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap()
}

/// Writes a lock file into `dir` and returns its path.
pub(crate) fn write_lock(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// The absolute path of `uv` on PATH, or prints the SKIP line and returns None.
pub(crate) fn real_uv(test: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join("uv");
        if candidate.is_file() {
            let ok = std::process::Command::new(&candidate)
                .arg("--version")
                .output()
                .map(|o| o.status.success())
                .unwrap_or(false);
            if ok {
                return Some(candidate);
            }
        }
    }
    eprintln!("SKIP {test}: uv is not installed (scripts/setup-pyenv installs it)");
    None
}

/// The interpreter the tests build from: `$SHELLBOX_PYENV_TEST_PYTHON`, else the real
/// executable behind `python3` on PATH (`sys.executable`, so pyenv shims are seen through).
pub(crate) fn test_python(test: &str) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("SHELLBOX_PYENV_TEST_PYTHON") {
        return Some(PathBuf::from(path));
    }
    let output = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output();
    match output {
        Ok(o) if o.status.success() => {
            let text = String::from_utf8(o.stdout).unwrap();
            Some(PathBuf::from(text.trim()))
        }
        _ => {
            eprintln!("SKIP {test}: no python3 on PATH");
            None
        }
    }
}

/// `python -I -c 'import sys; print(sys.base_prefix)'`, resolved.
pub(crate) fn base_prefix(python: &Path) -> PathBuf {
    let output = std::process::Command::new(python)
        .args(["-I", "-c", "import sys; print(sys.base_prefix)"])
        .output()
        .unwrap();
    assert!(output.status.success());
    PathBuf::from(String::from_utf8(output.stdout).unwrap().trim())
        .canonicalize()
        .unwrap()
}

/// A uv wrapper that appends each invocation's arguments to `log`, then runs the real uv:
/// counts how often a build really ran uv.
pub(crate) fn counting_uv(dir: &Path, real: &Path, log: &Path) -> PathBuf {
    let wrapper = dir.join("counting-uv");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\nexec '{}' \"$@\"\n",
            log.display(),
            real.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    wrapper
}

/// How many logged uv invocations start with `prefix` (e.g. `venv`, `pip sync`).
pub(crate) fn count_calls(log: &Path, prefix: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with(prefix))
        .count()
}

/// `X.Y.Z` of an interpreter.
pub(crate) fn version_of(python: &Path) -> String {
    let out = std::process::Command::new(python)
        .args([
            "-I",
            "-c",
            "import sys; print('%d.%d.%d' % sys.version_info[:3])",
        ])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}
