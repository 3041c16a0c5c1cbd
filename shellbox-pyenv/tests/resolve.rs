//! `resolve_python_environment` against real uv, a real interpreter and real PyPI.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A requirement no package index or cache holds.
const MISSING: &str = "shellbox-test-no-such-project==1.0";

use common::*;
use shellbox_pyenv::{
    cache_key, check_resolve, resolve_python_environment, resolve_python_environment_with,
    BuildOptions, PyenvError, ResolveOptions, ENVIRONMENT_NAME, REQUIREMENTS_IN_NAME,
    REQUIREMENTS_LOCK_NAME, REQUIREMENTS_PENDING_NAME,
};

/// A uv wrapper that logs each call's arguments to `log`, sets `vars`, then runs real uv.
fn wrapped_uv(dir: &Path, name: &str, real: &Path, log: &Path, vars: &[(&str, &str)]) -> PathBuf {
    let wrapper = dir.join(name);
    let exports: String = vars
        .iter()
        .map(|(k, v)| format!("export {k}='{v}'\n"))
        .collect();
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\n{exports}exec '{}' \"$@\"\n",
            log.display(),
            real.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    wrapper
}

/// A new, empty cache under `dir` (canonical), the interpreter's version, and resolve
/// options whose uv (real, behind a wrapper logging each call to the returned log) runs with
/// `UV_OFFLINE=1`.
fn offline_cache(
    dir: &Path,
    uv: &Path,
    python: &Path,
) -> (PathBuf, String, PathBuf, ResolveOptions) {
    let cache = dir.join("cache");
    std::fs::create_dir(&cache).unwrap();
    let cache = cache.canonicalize().unwrap();
    let log = dir.join("uv.log");
    let options =
        ResolveOptions::default()
            .python_interpreter(python)
            .build(BuildOptions::default().uv(wrapped_uv(
                dir,
                "uv-offline",
                uv,
                &log,
                &[("UV_OFFLINE", "1")],
            )));
    (cache, version_of(python), log, options)
}

fn run(python: &Path, code: &str) -> (bool, String) {
    let out = std::process::Command::new(python)
        .args(["-c", code])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(if out.status.success() {
            &out.stdout
        } else {
            &out.stderr
        })
        .into_owned(),
    )
}

#[test]
fn locked_once_then_reused_offline() {
    let test = "locked_once_then_reused_offline";
    let (Some(uv), Some(python)) = (real_uv(test), test_python(test)) else {
        return;
    };
    let dir = scratch();
    let cache = dir.path().join("cache");
    let version = version_of(&python);
    let log = dir.path().join("uv.log");
    let options = ResolveOptions::default()
        .python_interpreter(&python)
        .build(BuildOptions::default().uv(wrapped_uv(dir.path(), "uv-online", &uv, &log, &[])));

    // Unsorted, duplicated input: one cache directory for the sorted, deduplicated set.
    let env = resolve_python_environment_with(
        &cache,
        &["six==1.17.0", "six==1.17.0"],
        &version,
        &options,
    )
    .unwrap();
    let key = cache_key(&version, &["six==1.17.0".to_string()]);
    let directory = cache.canonicalize().unwrap().join(&key);
    assert!(
        env.root().starts_with(&directory),
        "{}",
        env.root().display()
    );
    assert_eq!(
        std::fs::read_to_string(directory.join(REQUIREMENTS_IN_NAME)).unwrap(),
        "six==1.17.0\n"
    );
    let lock = std::fs::read_to_string(directory.join(REQUIREMENTS_LOCK_NAME)).unwrap();
    assert!(lock.contains("six==1.17.0"), "{lock}");
    assert!(
        lock.contains(
            "--hash=sha256:4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274"
        ),
        "{lock}"
    );
    assert!(!directory.join(REQUIREMENTS_PENDING_NAME).exists());
    assert!(!lock.contains(directory.to_str().unwrap()), "{lock}");
    let (ok, out) = run(&env.python(), "import six; print(six.__version__)");
    assert!(ok, "{out}");
    assert_eq!(out, "1.17.0\n");
    assert_eq!(count_calls(&log, "pip compile"), 1);
    assert_eq!(count_calls(&log, "pip sync"), 1);
    let sync = std::fs::read_to_string(&log).unwrap();
    assert!(
        sync.lines()
            .any(|l| l.starts_with("pip sync") && l.contains("--no-build")),
        "{sync}"
    );

    // A second resolver with no network: the finished environment is reused, uv never runs.
    let offline_log = dir.path().join("offline.log");
    let offline =
        ResolveOptions::default()
            .python_interpreter(&python)
            .build(BuildOptions::default().uv(wrapped_uv(
                dir.path(),
                "uv-offline",
                &uv,
                &offline_log,
                &[("UV_OFFLINE", "1")],
            )));
    let again =
        resolve_python_environment_with(&cache, &["six==1.17.0"], &version, &offline).unwrap();
    assert_eq!(again, env);
    assert_eq!(count_calls(&offline_log, ""), 0);

    // With the environment gone, offline rebuilds it from the kept lock (uv's wheel cache),
    // without compiling again.
    std::fs::remove_dir_all(env.root()).unwrap();
    let rebuilt =
        resolve_python_environment_with(&cache, &["six==1.17.0"], &version, &offline).unwrap();
    assert_eq!(rebuilt, env);
    assert_eq!(count_calls(&offline_log, "pip compile"), 0);
    assert_eq!(count_calls(&offline_log, "pip sync"), 1);
    let (ok, out) = run(&rebuilt.python(), "import six; print(six.__version__)");
    assert!(ok && out == "1.17.0\n", "{out}");

    // Offline and no lock yet for another set: uv pip compile fails, nothing is kept. (A
    // project no index has: six==1.16.0 was found offline once another run left it in
    // uv's shared cache.)
    let e = resolve_python_environment_with(&cache, &[MISSING], &version, &offline).unwrap_err();
    assert!(matches!(e, PyenvError::UvFailed { .. }), "{e}");
    assert!(
        e.to_string().contains("uv pip compile") || e.to_string().contains("pip compile"),
        "{e}"
    );
    let other = cache
        .canonicalize()
        .unwrap()
        .join(cache_key(&version, &[MISSING.to_string()]));
    assert!(!other.join(REQUIREMENTS_LOCK_NAME).exists());
    assert!(!other.join(REQUIREMENTS_PENDING_NAME).exists());
}

#[test]
fn cpython_only_has_no_packages() {
    let test = "cpython_only_has_no_packages";
    let (Some(_uv), Some(python)) = (real_uv(test), test_python(test)) else {
        return;
    };
    let dir = scratch();
    let version = version_of(&python);
    let options = ResolveOptions::default().python_interpreter(&python);
    let env =
        resolve_python_environment_with(dir.path(), &Vec::<String>::new(), &version, &options)
            .unwrap();
    let (ok, out) = run(&env.python(), "import sys; print(sys.prefix)");
    assert!(ok, "{out}");
    assert_eq!(Path::new(out.trim()), env.root().join("venv"));
    let (ok, _) = run(&env.python(), "import six");
    assert!(
        !ok,
        "six must not be installed in a CPython-only environment"
    );
}

#[test]
fn sdist_is_refused_without_running_its_build_hook() {
    let test = "sdist_is_refused_without_running_its_build_hook";
    let (Some(uv), Some(python)) = (real_uv(test), test_python(test)) else {
        return;
    };
    let dir = scratch();
    // An sdist-only package whose setup.py, if anything ran it, would write a host file.
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
    let status = std::process::Command::new("tar")
        .arg("czf")
        .arg(links.join("shellbox_sdist_probe-1.0.tar.gz"))
        .arg("-C")
        .arg(dir.path().join("src"))
        .arg("shellbox_sdist_probe-1.0")
        .status()
        .unwrap();
    assert!(status.success());
    let log = dir.path().join("uv.log");
    let uv = wrapped_uv(
        dir.path(),
        "uv-links",
        &uv,
        &log,
        &[("UV_FIND_LINKS", links.to_str().unwrap())],
    );
    let options = ResolveOptions::default()
        .python_interpreter(&python)
        .build(BuildOptions::default().uv(uv));
    let cache = dir.path().join("cache");
    let version = version_of(&python);
    let e =
        resolve_python_environment_with(&cache, &["shellbox-sdist-probe==1.0"], &version, &options)
            .unwrap_err();
    let PyenvError::UvFailed {
        command, stderr, ..
    } = &e
    else {
        panic!("expected UvFailed, got {e:?}");
    };
    assert!(
        command.contains("pip compile") && command.contains("--no-build"),
        "{command}"
    );
    assert!(
        stderr.contains("no usable wheels") || stderr.contains("--no-build"),
        "{stderr}"
    );
    assert!(!hook_ran.exists(), "the sdist's build hook ran on the host");
    let directory = cache.canonicalize().unwrap().join(cache_key(
        &version,
        &["shellbox-sdist-probe==1.0".to_string()],
    ));
    assert!(!directory.join(REQUIREMENTS_LOCK_NAME).exists());
    assert!(!directory.join(REQUIREMENTS_PENDING_NAME).exists());
    assert!(!directory.join(ENVIRONMENT_NAME).exists());
    assert_eq!(count_calls(&log, "pip sync"), 0);
}

#[test]
fn validation_and_interpreter_errors() {
    let dir = scratch();
    for bad in [
        "",
        "  ",
        "-e .",
        "--index-url=https://example.invalid",
        "six\n-r x",
        "six\r",
    ] {
        let e = resolve_python_environment(dir.path(), &[bad], "3.12.12").unwrap_err();
        assert!(
            matches!(e, PyenvError::InvalidRequirement { .. }),
            "{bad:?}: {e}"
        );
    }
    for bad in ["3.12", "python3", "/usr/bin/python3", ""] {
        let e = resolve_python_environment(dir.path(), &["six"], bad).unwrap_err();
        assert!(
            matches!(e, PyenvError::InvalidPython { .. }),
            "{bad:?}: {e}"
        );
    }
    // Nothing was created for refused input.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

    let test = "validation_and_interpreter_errors";
    let (Some(uv), Some(python)) = (real_uv(test), test_python(test)) else {
        return;
    };
    let version = version_of(&python);
    // An interpreter of another version is refused before anything is built.
    let e = resolve_python_environment_with(
        dir.path(),
        &Vec::<String>::new(),
        "3.1.0",
        &ResolveOptions::default().python_interpreter(&python),
    )
    .unwrap_err();
    assert!(matches!(e, PyenvError::InterpreterUnusable { .. }), "{e}");
    assert!(e.to_string().contains(&format!("CPython {version}")), "{e}");
    let e = resolve_python_environment_with(
        dir.path(),
        &Vec::<String>::new(),
        &version,
        &ResolveOptions::default().python_interpreter(dir.path().join("no-python")),
    )
    .unwrap_err();
    assert!(matches!(e, PyenvError::InterpreterUnusable { .. }), "{e}");
    // No interpreter and no download (an unreachable mirror): the error says to name one.
    let options = ResolveOptions::default().build(
        BuildOptions::default()
            .uv(uv)
            .python_install_mirror("file:///nonexistent/shellbox-mirror"),
    );
    let e = resolve_python_environment_with(dir.path(), &Vec::<String>::new(), &version, &options)
        .unwrap_err();
    assert!(
        matches!(e, PyenvError::InterpreterUnavailable { .. }),
        "{e}"
    );
    assert!(e.is_download_unavailable());
    let text = e.to_string();
    assert!(text.contains("python_interpreter"), "{text}");
    assert!(text.contains(&format!("CPython {version}")), "{text}");
}

/// `check_resolve` judges the interpreter as the resolve gets it: with no
/// `python_interpreter`, uv must be able to download CPython `V` (issue 12's break-it pass:
/// on this host, which cannot download, it said yes to `pypi_packages: []` and the resolve
/// then failed "no CPython 3.12.12"). An unreachable mirror is refused by both with
/// [`PyenvError::InterpreterUnavailable`]; with uv's own download source, whatever this host
/// can reach, both give one verdict; a given interpreter needs no download.
#[test]
fn check_resolve_finds_the_interpreter_as_the_resolve_does() {
    let test = "check_resolve_finds_the_interpreter_as_the_resolve_does";
    let (Some(uv), Some(python)) = (real_uv(test), test_python(test)) else {
        return;
    };
    let dir = scratch();
    let cache = dir.path().join("cache");
    let none = Vec::<String>::new();
    let version = "3.12.12";
    let unreachable = ResolveOptions::default().build(
        BuildOptions::default()
            .uv(&uv)
            .python_install_mirror("file:///nonexistent/shellbox-mirror"),
    );
    let checked = check_resolve(&cache, &none, version, &unreachable).unwrap_err();
    assert!(
        matches!(checked, PyenvError::InterpreterUnavailable { .. }),
        "{checked}"
    );
    assert!(checked.is_download_unavailable());
    assert!(
        checked.to_string().contains("python_interpreter"),
        "{checked}"
    );
    // Nothing was made by the check.
    assert!(!cache.exists());
    let resolved =
        resolve_python_environment_with(&cache, &none, version, &unreachable).unwrap_err();
    assert!(
        matches!(resolved, PyenvError::InterpreterUnavailable { .. }),
        "{resolved}"
    );
    let default = ResolveOptions::default().build(BuildOptions::default().uv(&uv));
    let checked = check_resolve(&cache, &none, version, &default);
    let resolved = resolve_python_environment_with(&cache, &none, version, &default);
    assert_eq!(
        checked
            .as_ref()
            .err()
            .map(PyenvError::is_download_unavailable),
        resolved
            .as_ref()
            .err()
            .map(PyenvError::is_download_unavailable),
        "check_resolve {checked:?}, resolve {:?}",
        resolved.as_ref().err()
    );

    let own = version_of(&python);
    let given = ResolveOptions::default()
        .python_interpreter(&python)
        .build(BuildOptions::default().python_install_mirror("file:///nonexistent/m"));
    check_resolve(&cache, &none, &own, &given).unwrap();
    // A relative cache none of whose directories exist yet is made below the working
    // directory by the resolve, so the check says yes too (break-it of issue 12: it
    // refused, "create directory rel/x/y/...: No such file or directory"), making nothing.
    let relative = PathBuf::from(format!("no-such-cache-{}/x/y", std::process::id()));
    check_resolve(&relative, &none, &own, &given).unwrap();
    assert!(!relative.parent().unwrap().parent().unwrap().exists());
}

/// Four resolves at once of a requirement PyPI does not have: each fails with uv's own
/// refusal (not with an I/O error on a directory another one removed while it waited for the
/// lock), and nothing is left in the cache.
#[test]
fn concurrent_failed_resolves_fail_alike_and_leave_nothing() {
    let test = "concurrent_failed_resolves_fail_alike_and_leave_nothing";
    let (Some(uv), Some(python)) = (real_uv(test), test_python(test)) else {
        return;
    };
    let dir = scratch();
    let cache = dir.path().join("cache");
    let version = version_of(&python);
    let options = ResolveOptions::default()
        .python_interpreter(&python)
        .build(BuildOptions::default().uv(&uv));
    let errors: Vec<PyenvError> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| {
                    resolve_python_environment_with(
                        &cache,
                        &["shellbox-no-such-package-on-pypi-7f3a==1.0"],
                        &version,
                        &options,
                    )
                    .unwrap_err()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for e in &errors {
        assert!(matches!(e, PyenvError::UvFailed { .. }), "{e}");
    }
    let left: Vec<_> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "the cache holds {left:?}");
}

/// Entries of the package cache linked elsewhere (by whoever else can write the cache) are
/// refused, never followed (break-it of issue 12): a key directory linked to another
/// directory gets no file there, a `requirements.lock` linked to a host file is neither read
/// nor quoted, and a `requirements.in` link is refused, not written through. Before the
/// fix the lock link reached uv (`pip sync` of the host file) and the key link got the
/// resolve's lock file.
#[test]
fn cache_entries_linked_elsewhere_are_refused() {
    let test = "cache_entries_linked_elsewhere_are_refused";
    let (Some(uv), Some(python)) = (real_uv(test), test_python(test)) else {
        return;
    };
    let dir = scratch();
    let (cache, version, log, options) = offline_cache(dir.path(), &uv, &python);
    let refused = |e: &PyenvError| {
        matches!(e, PyenvError::Io { .. }) && e.to_string().contains("symbolic link")
    };

    // The key directory is a link to a directory outside the cache.
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let key = cache.join(cache_key(&version, &[MISSING.to_string()]));
    std::os::unix::fs::symlink(&outside, &key).unwrap();
    let e = resolve_python_environment_with(&cache, &[MISSING], &version, &options).unwrap_err();
    assert!(refused(&e), "{e}");
    let e = check_resolve(&cache, &[MISSING], &version, &options).unwrap_err();
    assert!(refused(&e), "{e}");
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    std::fs::remove_file(&key).unwrap();

    // The lock is a link to a host file.
    let secret = dir.path().join("secret.txt");
    std::fs::write(&secret, "shellbox-secret-line==1.0\n").unwrap();
    std::fs::create_dir(&key).unwrap();
    std::os::unix::fs::symlink(&secret, key.join(REQUIREMENTS_LOCK_NAME)).unwrap();
    let e = resolve_python_environment_with(&cache, &[MISSING], &version, &options).unwrap_err();
    assert!(refused(&e), "{e}");
    assert!(!e.to_string().contains("shellbox-secret-line"), "{e}");
    let e = check_resolve(&cache, &[MISSING], &version, &options).unwrap_err();
    assert!(refused(&e), "{e}");
    std::fs::remove_file(key.join(REQUIREMENTS_LOCK_NAME)).unwrap();

    // requirements.in is a link to a host file: refused too, the host file unchanged.
    std::os::unix::fs::symlink(&secret, key.join(REQUIREMENTS_IN_NAME)).unwrap();
    let e = resolve_python_environment_with(&cache, &[MISSING], &version, &options).unwrap_err();
    assert!(refused(&e), "{e}");
    assert_eq!(
        std::fs::read_to_string(&secret).unwrap(),
        "shellbox-secret-line==1.0\n"
    );
    assert_eq!(count_calls(&log, "pip sync"), 0);
}

/// A cache entry another user could have changed is refused, not mounted as found (second
/// break-it pass of issue 12: a copied entry made `chown -R nobody` and `chmod -R a+rwX`,
/// with a poisoned module, was imported): a key directory writable by group or others, or
/// one owned by another user, or a cache root others may rename entries in, is
/// `PermissionDenied`, and a key directory whose requirements.in names other requirements
/// (moved from another key) is `InvalidData`, for the
/// resolve and check_resolve alike, before uv runs.
#[test]
fn cache_entries_others_could_change_are_refused() {
    let test = "cache_entries_others_could_change_are_refused";
    let (Some(uv), Some(python)) = (real_uv(test), test_python(test)) else {
        return;
    };
    let dir = scratch();
    let (cache, version, log, options) = offline_cache(dir.path(), &uv, &python);
    let refused = |e: &PyenvError| matches!(e, PyenvError::Io { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied);
    let key = cache.join(cache_key(&version, &[MISSING.to_string()]));
    std::fs::create_dir(&key).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = resolve_python_environment_with(&cache, &[MISSING], &version, &options).unwrap_err();
    assert!(refused(&e), "{e}");
    let e = check_resolve(&cache, &[MISSING], &version, &options).unwrap_err();
    assert!(refused(&e), "{e}");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o755)).unwrap();
    // A key directory moved from another key (its requirements.in names others).
    std::fs::write(key.join(REQUIREMENTS_IN_NAME), "six==1.16.0\n").unwrap();
    for e in [
        resolve_python_environment_with(&cache, &[MISSING], &version, &options).unwrap_err(),
        check_resolve(&cache, &[MISSING], &version, &options).unwrap_err(),
    ] {
        assert!(
            matches!(&e, PyenvError::Io { source, .. } if source.kind() == std::io::ErrorKind::InvalidData),
            "{e}"
        );
    }
    std::fs::remove_file(key.join(REQUIREMENTS_IN_NAME)).unwrap();
    // A cache root others may rename entries in (0777 without the sticky bit); 1777 is fine.
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = resolve_python_environment_with(&cache, &[MISSING], &version, &options).unwrap_err();
    assert!(refused(&e), "{e}");
    let e = check_resolve(&cache, &[MISSING], &version, &options).unwrap_err();
    assert!(refused(&e), "{e}");
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o1777)).unwrap();
    check_resolve(&cache, &[MISSING], &version, &options).unwrap();
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o755)).unwrap();
    if nix::unistd::geteuid().is_root() {
        std::os::unix::fs::chown(&key, Some(65534), Some(65534)).unwrap();
        let e =
            resolve_python_environment_with(&cache, &[MISSING], &version, &options).unwrap_err();
        assert!(refused(&e), "{e}");
        let e = check_resolve(&cache, &[MISSING], &version, &options).unwrap_err();
        assert!(refused(&e), "{e}");
    }
    assert_eq!(count_calls(&log, ""), 0);
}
