//! `ImageSource::Packages` with PyPI packages on the local backend, against real uv, a real
//! interpreter and real PyPI (scripts/setup-pyenv installs uv; the interpreter is
//! `$SHELLBOX_PYENV_TEST_PYTHON`, else the one behind `python3` on `PATH`).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use shellbox_core::{Command, Error, Machine, MachineFactory, MachineSpec, PackageSpec};
use shellbox_local::{LocalMachineFactory, LocalOptions};

fn uv(test: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join("uv");
        let runs = std::process::Command::new(&candidate)
            .arg("--version")
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if runs {
            return Some(candidate);
        }
    }
    eprintln!("SKIP {test}: uv is not installed (scripts/setup-pyenv installs it)");
    None
}

fn interpreter(test: &str) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("SHELLBOX_PYENV_TEST_PYTHON") {
        return Some(PathBuf::from(path));
    }
    match std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
    {
        Ok(o) if o.status.success() => {
            Some(PathBuf::from(String::from_utf8(o.stdout).unwrap().trim()))
        }
        _ => {
            eprintln!("SKIP {test}: no python3 on PATH");
            None
        }
    }
}

/// A uv wrapper logging each call to `log` with these variables set.
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

fn calls(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

struct Setup {
    dir: tempfile::TempDir,
    uv: PathBuf,
    python: PathBuf,
}

fn setup(test: &str) -> Option<Setup> {
    let (Some(uv), Some(python)) = (uv(test), interpreter(test)) else {
        return None;
    };
    let dir = tempfile::Builder::new()
        .prefix("packages-test-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    Some(Setup { dir, uv, python })
}

impl Setup {
    fn options(&self, uv: PathBuf) -> LocalOptions {
        LocalOptions {
            package_cache: Some(self.dir.path().join("cache")),
            python_interpreter: Some(self.python.clone()),
            uv: Some(uv),
            ..LocalOptions::default()
        }
    }

    /// A factory whose uv logs each call to `uv.log` in the test's directory, and that
    /// log's path; `None` (with the SKIP line) when no bwrap can sandbox.
    fn logged_factory(&self, test: &str) -> Option<(LocalMachineFactory, PathBuf)> {
        let log = self.dir.path().join("uv.log");
        let uv = wrapped_uv(self.dir.path(), "uv", &self.uv, &log, &[]);
        Some((common::factory_with(test, self.options(uv))?, log))
    }
}

async fn sh(m: &dyn Machine, script: &str) -> (Option<i32>, String, String) {
    let r = m.run(Command::shell(script)).await.unwrap();
    (
        r.exit_code,
        String::from_utf8_lossy(&r.stdout).into_owned(),
        String::from_utf8_lossy(&r.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locked_package_is_importable_and_the_cache_is_reused_offline() {
    let test = "locked_package_is_importable_and_the_cache_is_reused_offline";
    let Some(s) = setup(test) else { return };
    let Some((factory, log)) = s.logged_factory(test) else {
        return;
    };
    let spec = MachineSpec::packages(
        PackageSpec::python(["six==1.17.0"])
            .tool("python3")
            .tool("python"),
    );
    let m = factory.create_local(spec.clone()).await.unwrap();
    let (code, out, err) = sh(&m, "python3 -c 'import six, sys; print(six.__version__); print(sys.prefix)'; command -v python3").await;
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "1.17.0");
    let cache = s.dir.path().join("cache").canonicalize().unwrap();
    let venv = Path::new(lines[1]);
    assert!(venv.starts_with(&cache) && venv.ends_with("venv"), "{out}");
    assert_eq!(
        Path::new(lines[2]),
        venv.join("bin/python3"),
        "venv/bin first on PATH"
    );
    // Mounted like a HostImage: the environment root read-only (and nothing is writable).
    let root = venv.parent().unwrap();
    assert!(
        m.read_only_mounts()
            .iter()
            .any(|(host, guest)| host == root && guest == root.to_str().unwrap()),
        "{:?}",
        m.read_only_mounts()
    );
    let (code, _, _) = sh(&m, &format!("touch {}/x", root.display())).await;
    assert_ne!(
        code,
        Some(0),
        "the environment must be read-only in the machine"
    );
    m.close().await.unwrap();
    let first = calls(&log);
    assert_eq!(
        first
            .iter()
            .filter(|l| l.starts_with("pip compile"))
            .count(),
        1,
        "{first:?}"
    );
    assert!(
        first
            .iter()
            .any(|l| l.starts_with("pip sync") && l.contains("--no-build")),
        "{first:?}"
    );

    // A second factory whose uv has no network reuses the cache: uv is not even run.
    let offline_log = s.dir.path().join("offline.log");
    let offline = common::factory_with(
        test,
        s.options(wrapped_uv(
            s.dir.path(),
            "uv-offline",
            &s.uv,
            &offline_log,
            &[("UV_OFFLINE", "1")],
        )),
    )
    .unwrap();
    let m = offline.create_local(spec.clone()).await.unwrap();
    let (code, out, err) = sh(&m, "python3 -c 'import six; print(six.__version__)'").await;
    assert_eq!((code, out.as_str()), (Some(0), "1.17.0\n"), "{err}");
    m.close().await.unwrap();
    assert_eq!(calls(&offline_log), Vec::<String>::new());

    // With no uv at all the warm cache still serves: check_environment accepts what create
    // then makes (it looks at the cache before it asks for uv).
    let no_uv = common::factory_with(test, s.options(s.dir.path().join("no-such-uv"))).unwrap();
    let none = shellbox_core::ExecutionRequirements::default();
    no_uv.check_environment(&none, &spec).await.unwrap();
    let m = no_uv.create_local(spec.clone()).await.unwrap();
    let (code, out, err) = sh(&m, "python3 -c 'import six; print(six.__version__)'").await;
    assert_eq!((code, out.as_str()), (Some(0), "1.17.0\n"), "{err}");
    m.close().await.unwrap();
    // Another requirement set is a cold key: that one needs uv, and both say so.
    let cold = MachineSpec::packages(PackageSpec::python(["six==1.16.0"]));
    let checked = no_uv.check_environment(&none, &cold).await;
    assert!(matches!(checked, Err(Error::Backend { .. })), "{checked:?}");
    let created = no_uv.create(cold).await.map(drop);
    assert!(matches!(created, Err(Error::Backend { .. })), "{created:?}");
}

/// A first resolve that uv refuses (no such package on PyPI) leaves nothing in the cache:
/// no key directory, `requirements.in` or lock file; a second try runs uv again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_resolve_leaves_nothing_in_the_cache() {
    let test = "a_failed_resolve_leaves_nothing_in_the_cache";
    let Some(s) = setup(test) else { return };
    let Some((factory, log)) = s.logged_factory(test) else {
        return;
    };
    let spec = MachineSpec::packages(PackageSpec::python([
        "shellbox-no-such-package-on-pypi-7f3a==1.0",
    ]));
    for attempt in 1..=2 {
        let created = factory.create(spec.clone()).await.map(drop);
        assert!(matches!(created, Err(Error::Backend { .. })), "{created:?}");
        let cache = s.dir.path().join("cache");
        let left: Vec<_> = std::fs::read_dir(&cache)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(
            left.is_empty(),
            "attempt {attempt}: the cache holds {left:?}"
        );
        let compiles = calls(&log)
            .iter()
            .filter(|l| l.starts_with("pip compile"))
            .count();
        assert_eq!(compiles, attempt, "{:?}", calls(&log));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpython_only_and_missing_tools() {
    let test = "cpython_only_and_missing_tools";
    let Some(s) = setup(test) else { return };
    let Some(factory) = common::factory_with(test, s.options(s.uv.clone())) else {
        return;
    };
    let m = factory
        .create_local(MachineSpec::packages(
            PackageSpec::python(Vec::<String>::new()).tool("python3"),
        ))
        .await
        .unwrap();
    let (code, out, err) = sh(&m, "python3 -c 'import sys; print(sys.version_info[0])'; python3 -c 'import six' 2>/dev/null || echo no-six").await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "3\nno-six\n");
    m.close().await.unwrap();
    let e = factory
        .create_local(MachineSpec::packages(
            PackageSpec::python(Vec::<String>::new())
                .tool("python3")
                .tool("shellbox-absent"),
        ))
        .await
        .err()
        .unwrap();
    assert!(
        e.is_unsupported() && e.to_string().contains("shellbox-absent not found"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdist_is_refused_with_no_host_side_effect() {
    let test = "sdist_is_refused_with_no_host_side_effect";
    let Some(s) = setup(test) else { return };
    let hook_ran = s.dir.path().join("HOOK_RAN");
    let src = s.dir.path().join("src/shellbox_sdist_probe-1.0");
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
    let links = s.dir.path().join("links");
    std::fs::create_dir(&links).unwrap();
    assert!(std::process::Command::new("tar")
        .arg("czf")
        .arg(links.join("shellbox_sdist_probe-1.0.tar.gz"))
        .arg("-C")
        .arg(s.dir.path().join("src"))
        .arg("shellbox_sdist_probe-1.0")
        .status()
        .unwrap()
        .success());
    let log = s.dir.path().join("uv.log");
    let uv = wrapped_uv(
        s.dir.path(),
        "uv-links",
        &s.uv,
        &log,
        &[("UV_FIND_LINKS", links.to_str().unwrap())],
    );
    let Some(factory) = common::factory_with(test, s.options(uv)) else {
        return;
    };
    let e = factory
        .create_local(MachineSpec::packages(PackageSpec::python([
            "shellbox-sdist-probe==1.0",
        ])))
        .await
        .err()
        .unwrap();
    assert!(matches!(e, Error::Backend { .. }), "{e:?}");
    assert!(e.to_string().contains("--no-build"), "{e}");
    assert!(!hook_ran.exists(), "the sdist's build hook ran on the host");
    assert!(
        calls(&log).iter().all(|l| !l.starts_with("pip sync")),
        "{:?}",
        calls(&log)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_interpreter_and_no_download_says_what_to_set() {
    let test = "no_interpreter_and_no_download_says_what_to_set";
    let Some(s) = setup(test) else { return };
    let log = s.dir.path().join("uv.log");
    let uv = wrapped_uv(
        s.dir.path(),
        "uv-nomirror",
        &s.uv,
        &log,
        &[(
            "UV_PYTHON_INSTALL_MIRROR",
            "file:///nonexistent/shellbox-mirror",
        )],
    );
    let options = LocalOptions {
        python_interpreter: None,
        python_version: Some("3.12.12".into()),
        ..s.options(uv)
    };
    let Some(factory) = LocalMachineFactory::new(options).ok() else {
        eprintln!("SKIP {test}: no sandbox");
        return;
    };
    let e = factory
        .create_local(MachineSpec::packages(PackageSpec::python(
            Vec::<String>::new(),
        )))
        .await
        .err()
        .unwrap();
    let text = e.to_string();
    assert!(
        text.contains("python_interpreter") && text.contains("3.12.12"),
        "{text}"
    );
    // A wrong interpreter is an input error, before anything is built.
    let options = LocalOptions {
        python_interpreter: Some("/nonexistent/python3".into()),
        python_version: Some("3.12.12".into()),
        ..s.options(s.uv.clone())
    };
    let factory = LocalMachineFactory::new(options).unwrap();
    let e = factory
        .create_local(MachineSpec::packages(PackageSpec::python(["six==1.17.0"])))
        .await
        .err()
        .unwrap();
    assert!(matches!(e, Error::InvalidInput(_)), "{e:?}");
}
