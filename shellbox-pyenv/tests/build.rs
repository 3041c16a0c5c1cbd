//! The builder against real uv, a real interpreter and real PyPI.

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};

use common::*;
use shellbox_pyenv::{
    build_python_environment, build_python_environment_with, in_system_directories, BuildOptions,
    DifferingInput, PyenvError, PythonEnvironment, LOCK_COPY_NAME, MARKER_NAME,
};

/// Runs the environment's interpreter on the host and returns its stdout.
fn run_python(env: &PythonEnvironment, code: &str) -> String {
    let output = std::process::Command::new(env.python())
        .args(["-c", code])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn interpreter_build_is_complete_and_reused() {
    let test = "interpreter_build_is_complete_and_reused";
    let (Some(uv), Some(python)) = (real_uv(test), test_python(test)) else {
        return;
    };
    let dir = scratch();
    let lock = write_lock(dir.path(), "six.lock", SIX_LOCK);
    let log = dir.path().join("uv.log");
    let options = BuildOptions::default().uv(counting_uv(dir.path(), &uv, &log));
    let root = dir.path().join("envs/one");
    let python_arg = python.to_str().unwrap();

    let env = build_python_environment_with(&root, &lock, python_arg, &options).unwrap();
    let root = dir.path().canonicalize().unwrap().join("envs/one");
    assert_eq!(env.root(), root);
    assert_eq!(env.bin_dir(), root.join("venv/bin"));
    assert_eq!(env.python(), root.join("venv/bin/python3"));

    // The venv has the locked package and its own prefix; its base is the interpreter's.
    let prefix = base_prefix(&python);
    let out = run_python(
        &env,
        "import six, sys; print(six.__version__); print(sys.prefix); print(sys.base_prefix)",
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "1.17.0");
    assert_eq!(Path::new(lines[1]), root.join("venv"));
    assert_eq!(Path::new(lines[2]).canonicalize().unwrap(), prefix);

    // Exactly the root and (outside the system directories) the interpreter's prefix.
    assert_eq!(env.interpreter_prefix(), Some(prefix.as_path()));
    let mut expected = vec![root.clone()];
    if !in_system_directories(&prefix) {
        expected.push(prefix.clone());
    }
    assert_eq!(env.read_only_dirs(), expected);

    // Marker and lock copy.
    let marker = std::fs::read_to_string(root.join(MARKER_NAME)).unwrap();
    assert!(
        marker.starts_with(&format!("python {python_arg}\nlock sha256 ")),
        "{marker}"
    );
    assert!(
        marker.ends_with(&format!("base_prefix {}\n", prefix.display())),
        "{marker}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join(LOCK_COPY_NAME)).unwrap(),
        SIX_LOCK
    );
    assert!(dir.path().join("envs/one.lock").is_file());
    assert_eq!(count_calls(&log, "venv"), 1);
    assert_eq!(count_calls(&log, "pip sync"), 1);

    // A second build with the same inputs runs no uv at all; open() agrees.
    let again = build_python_environment_with(&root, &lock, python_arg, &options).unwrap();
    assert_eq!(again, env);
    assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 2);
    assert_eq!(PythonEnvironment::open(&root).unwrap(), env);
    assert_eq!(
        PythonEnvironment::open(dir.path().join("envs/./one")).unwrap(),
        env
    );
}

#[test]
fn concurrent_threads_build_once() {
    let test = "concurrent_threads_build_once";
    let (Some(uv), Some(python)) = (real_uv(test), test_python(test)) else {
        return;
    };
    let dir = scratch();
    let lock = write_lock(dir.path(), "six.lock", SIX_LOCK);
    let log = dir.path().join("uv.log");
    let options = BuildOptions::default().uv(counting_uv(dir.path(), &uv, &log));
    let root = dir.path().join("shared");
    let barrier = Arc::new(Barrier::new(4));
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let (barrier, options, root, lock, python) = (
                barrier.clone(),
                options.clone(),
                root.clone(),
                lock.clone(),
                python.clone(),
            );
            std::thread::spawn(move || {
                barrier.wait();
                build_python_environment_with(&root, &lock, python.to_str().unwrap(), &options)
            })
        })
        .collect();
    let envs: Vec<PythonEnvironment> = handles
        .into_iter()
        .map(|h| h.join().unwrap().unwrap())
        .collect();
    assert!(envs.windows(2).all(|w| w[0] == w[1]));
    assert_eq!(
        count_calls(&log, "venv"),
        1,
        "{}",
        std::fs::read_to_string(&log).unwrap()
    );
    assert_eq!(count_calls(&log, "pip sync"), 1);
    assert_eq!(
        run_python(&envs[0], "import six; print(six.__version__)"),
        "1.17.0\n"
    );
}

/// Run only as a child process of `concurrent_processes_build_once`.
#[test]
#[ignore = "a child process of concurrent_processes_build_once"]
fn child_builder() {
    let var = |name: &str| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                panic!("{name} is not set: run concurrent_processes_build_once instead")
            })
    };
    let options = BuildOptions::default().uv(var("PYENV_CHILD_UV"));
    let env = build_python_environment_with(
        var("PYENV_CHILD_ROOT"),
        var("PYENV_CHILD_LOCK"),
        var("PYENV_CHILD_PYTHON").to_str().unwrap(),
        &options,
    )
    .unwrap();
    println!("CHILD-ENV {}", env.python().display());
}

#[test]
fn concurrent_processes_build_once() {
    let test = "concurrent_processes_build_once";
    let (Some(uv), Some(python)) = (real_uv(test), test_python(test)) else {
        return;
    };
    let dir = scratch();
    let lock = write_lock(dir.path(), "six.lock", SIX_LOCK);
    let log = dir.path().join("uv.log");
    let wrapper = counting_uv(dir.path(), &uv, &log);
    let root = dir.path().join("shared");
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..3)
        .map(|_| {
            std::process::Command::new(&exe)
                .args([
                    "--ignored",
                    "--exact",
                    "child_builder",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("PYENV_CHILD_UV", &wrapper)
                .env("PYENV_CHILD_ROOT", &root)
                .env("PYENV_CHILD_LOCK", &lock)
                .env("PYENV_CHILD_PYTHON", &python)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let expected = format!(
        "CHILD-ENV {}",
        dir.path()
            .canonicalize()
            .unwrap()
            .join("shared/venv/bin/python3")
            .display()
    );
    for child in children {
        let output = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(stdout.contains(&expected), "{stdout}");
        assert!(stdout.contains("1 passed"), "{stdout}");
    }
    assert_eq!(
        count_calls(&log, "venv"),
        1,
        "{}",
        std::fs::read_to_string(&log).unwrap()
    );
    assert_eq!(count_calls(&log, "pip sync"), 1);
}

#[test]
fn interrupted_build_is_rebuilt() {
    let test = "interrupted_build_is_rebuilt";
    let (Some(_uv), Some(python)) = (real_uv(test), test_python(test)) else {
        return;
    };
    let dir = scratch();
    let lock = write_lock(dir.path(), "six.lock", SIX_LOCK);
    // What a killed build leaves: a venv half made, no marker.
    let root = dir.path().join("env");
    std::fs::create_dir_all(root.join("venv/bin")).unwrap();
    std::fs::write(root.join("venv/bin/python3"), "not an interpreter").unwrap();
    std::fs::write(root.join("leftover"), "from the killed build").unwrap();
    assert!(matches!(
        PythonEnvironment::open(&root),
        Err(PyenvError::NotBuilt { .. })
    ));

    let env = build_python_environment(&root, &lock, python.to_str().unwrap()).unwrap();
    assert!(!root.join("leftover").exists());
    assert!(root.join(MARKER_NAME).is_file());
    assert_eq!(
        run_python(&env, "import six; print(six.__version__)"),
        "1.17.0\n"
    );
}

#[test]
fn different_inputs_are_refused() {
    let test = "different_inputs_are_refused";
    let (Some(_uv), Some(python)) = (real_uv(test), test_python(test)) else {
        return;
    };
    let dir = scratch();
    let lock = write_lock(dir.path(), "six.lock", SIX_LOCK);
    let other_lock = write_lock(
        dir.path(),
        "other.lock",
        &format!("# another lock\n{SIX_LOCK}"),
    );
    let root = dir.path().join("env");
    let python_arg = python.to_str().unwrap();
    let env = build_python_environment(&root, &lock, python_arg).unwrap();

    let err = build_python_environment(&root, &other_lock, python_arg).unwrap_err();
    match &err {
        PyenvError::InputsDiffer {
            input,
            existing,
            requested,
            ..
        } => {
            assert_eq!(*input, DifferingInput::Lock);
            assert!(existing.starts_with("a lock with sha256 "), "{existing}");
            assert!(requested.contains("other.lock"), "{requested}");
        }
        other => panic!("expected InputsDiffer, got {other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains("different lock file"), "{text}");
    assert!(text.contains(&env.root().display().to_string()), "{text}");
    // The error quotes the existing marker as it stands (REFERENCE 7).
    let marker_text = std::fs::read_to_string(env.root().join(MARKER_NAME)).unwrap();
    assert!(
        text.contains(marker_text.trim_end()),
        "{text}\n---\n{marker_text}"
    );
    match &err {
        PyenvError::InputsDiffer { marker, .. } => assert_eq!(marker, &marker_text),
        other => panic!("expected InputsDiffer, got {other:?}"),
    }

    let err = build_python_environment(&root, &lock, "/opt/elsewhere/bin/python3").unwrap_err();
    match &err {
        PyenvError::InputsDiffer {
            input,
            existing,
            requested,
            ..
        } => {
            assert_eq!(*input, DifferingInput::Python);
            assert_eq!(existing, &format!("python {python_arg}"));
            assert_eq!(requested, "python /opt/elsewhere/bin/python3");
        }
        other => panic!("expected InputsDiffer, got {other:?}"),
    }
    assert!(err.to_string().contains("different python"), "{err}");
    assert!(err.to_string().contains(marker_text.trim_end()), "{err}");
    let err = build_python_environment(&root, &lock, "3.12.12").unwrap_err();
    assert!(matches!(
        err,
        PyenvError::InputsDiffer {
            input: DifferingInput::Python,
            ..
        }
    ));

    // The finished environment is untouched by the refusals.
    assert_eq!(PythonEnvironment::open(&root).unwrap(), env);
    assert_eq!(
        run_python(&env, "import six; print(six.__version__)"),
        "1.17.0\n"
    );
}

#[test]
fn uv_missing_is_typed() {
    let test = "uv_missing_is_typed";
    let Some(python) = test_python(test) else {
        return;
    };
    let dir = scratch();
    let lock = write_lock(dir.path(), "six.lock", SIX_LOCK);
    let root = dir.path().join("env");
    let python_arg = python.to_str().unwrap();

    let no_path = BuildOptions::default().search_path("/nonexistent/bin:/proc");
    let err = build_python_environment_with(&root, &lock, python_arg, &no_path).unwrap_err();
    assert!(matches!(err, PyenvError::UvMissing { .. }), "{err:?}");
    assert!(err.to_string().contains("pip install uv"), "{err}");
    assert!(!root.exists());

    let explicit = BuildOptions::default().uv("/nonexistent/uv");
    let err = build_python_environment_with(&root, &lock, python_arg, &explicit).unwrap_err();
    assert!(matches!(err, PyenvError::UvMissing { .. }), "{err:?}");
    assert!(err.to_string().contains("/nonexistent/uv"), "{err}");
    assert!(!root.exists());
}

#[test]
fn uv_failures_are_typed_and_leave_nothing() {
    let test = "uv_failures_are_typed_and_leave_nothing";
    let (Some(_uv), Some(python)) = (real_uv(test), test_python(test)) else {
        return;
    };
    let dir = scratch();
    let root = dir.path().join("env");
    let python_arg = python.to_str().unwrap();

    let bad_hash = write_lock(dir.path(), "bad-hash.lock", BAD_HASH_LOCK);
    let err = build_python_environment(&root, &bad_hash, python_arg).unwrap_err();
    match &err {
        PyenvError::UvFailed {
            command,
            env,
            exit_code,
            stderr,
        } => {
            assert_eq!(env, "", "pip sync sets no variable");
            assert!(err.to_string().starts_with(command.as_str()), "{err}");
            assert!(
                command.contains(" pip sync --no-config --python "),
                "{command}"
            );
            let copy = dir
                .path()
                .canonicalize()
                .unwrap()
                .join("env")
                .join(LOCK_COPY_NAME);
            assert!(
                command.ends_with(&format!(
                    "--require-hashes --link-mode copy {}",
                    copy.display()
                )),
                "{command}"
            );
            assert_ne!(*exit_code, Some(0));
            assert!(stderr.to_lowercase().contains("hash"), "{stderr}");
        }
        other => panic!("expected UvFailed, got {other:?}"),
    }
    assert!(err.to_string().contains("exited with status"), "{err}");
    assert!(!root.exists(), "a failed build leaves its root behind");

    let garbage = write_lock(dir.path(), "garbage.lock", "this is ((not a requirement\n");
    let err = build_python_environment(&root, &garbage, python_arg).unwrap_err();
    assert!(matches!(err, PyenvError::UvFailed { .. }), "{err:?}");
    assert!(!root.exists());

    // The same root then builds fine from a good lock.
    let good = write_lock(dir.path(), "six.lock", SIX_LOCK);
    build_python_environment(&root, &good, python_arg).unwrap();
}

#[test]
fn bad_inputs_are_typed() {
    let dir = scratch();
    let root = dir.path().join("env");
    let lock = write_lock(dir.path(), "six.lock", SIX_LOCK);

    let err =
        build_python_environment(&root, dir.path().join("missing.lock"), "3.12.12").unwrap_err();
    match &err {
        PyenvError::LockUnreadable { path, .. } => assert!(path.ends_with("missing.lock")),
        other => panic!("expected LockUnreadable, got {other:?}"),
    }
    let err = build_python_environment(&root, dir.path(), "3.12.12").unwrap_err();
    assert!(matches!(err, PyenvError::LockUnreadable { .. }), "{err:?}");

    let err = build_python_environment(&root, &lock, "python3").unwrap_err();
    assert!(matches!(err, PyenvError::InvalidPython { .. }), "{err:?}");
    let err = build_python_environment(&root, &lock, "3.12").unwrap_err();
    assert!(matches!(err, PyenvError::InvalidPython { .. }), "{err:?}");

    let err = build_python_environment(&root, &lock, "/nonexistent/bin/python3").unwrap_err();
    assert!(
        matches!(err, PyenvError::InterpreterUnusable { .. }),
        "{err:?}"
    );
    assert!(!root.exists());

    let err = build_python_environment("/", &lock, "3.12.12").unwrap_err();
    assert!(matches!(err, PyenvError::InvalidRoot { .. }), "{err:?}");
    let file_root = write_lock(dir.path(), "a-file", "x");
    let err = build_python_environment(&file_root, &lock, "3.12.12").unwrap_err();
    assert!(matches!(err, PyenvError::InvalidRoot { .. }), "{err:?}");
    assert!(file_root.is_file(), "a non-directory root is never removed");

    // An unparseable marker is reported, not deleted.
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join(MARKER_NAME), "garbage\n").unwrap();
    let err = build_python_environment(&root, &lock, "3.12.12").unwrap_err();
    assert!(matches!(err, PyenvError::Marker { .. }), "{err:?}");
    assert!(matches!(
        PythonEnvironment::open(&root),
        Err(PyenvError::Marker { .. })
    ));
    assert!(root.join(MARKER_NAME).is_file());
}

#[test]
fn unreachable_interpreter_mirror_is_download_unavailable() {
    let test = "unreachable_interpreter_mirror_is_download_unavailable";
    let Some(uv) = real_uv(test) else {
        return;
    };
    let dir = scratch();
    let lock = write_lock(dir.path(), "six.lock", SIX_LOCK);
    let root = dir.path().join("env");
    let options = BuildOptions::default()
        .uv(&uv)
        .python_install_mirror("file:///nonexistent/shellbox-mirror");
    let err = build_python_environment_with(&root, &lock, "3.12.12", &options).unwrap_err();
    match &err {
        PyenvError::DownloadUnavailable {
            version,
            command,
            env,
            stderr,
            ..
        } => {
            assert_eq!(version, "3.12.12");
            assert!(
                env.contains("UV_PYTHON_INSTALL_MIRROR=file:///nonexistent/shellbox-mirror"),
                "{env}"
            );
            assert_eq!(
                command,
                &format!(
                    "{} python install --no-config --no-bin 3.12.12",
                    uv.display()
                )
            );
            // The mirror setting reached uv.
            assert!(stderr.contains("/nonexistent/shellbox-mirror"), "{stderr}");
        }
        other => panic!("expected DownloadUnavailable, got {other:?}"),
    }
    assert!(err.is_download_unavailable());
    assert!(
        err.to_string()
            .starts_with("interpreter downloads are unavailable here"),
        "{err}"
    );
    assert!(!root.exists());

    // A version uv has no download for is an ordinary uv failure, not a download problem.
    let err = build_python_environment_with(&root, &lock, "3.12.99", &options).unwrap_err();
    assert!(matches!(err, PyenvError::UvFailed { .. }), "{err:?}");
    // Its message begins with the shell-quoted uv command (REFERENCE 7); the variables the
    // builder set for it are named after uv's stderr, not in front of the command.
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "{} python install --no-config --no-bin 3.12.99 exited with status ",
            uv.display()
        )),
        "{text}"
    );
    assert!(
        text.contains("UV_PYTHON_INSTALL_MIRROR=file:///nonexistent/shellbox-mirror"),
        "{text}"
    );
}

#[test]
fn managed_download_builds_self_contained_env() {
    let test = "managed_download_builds_self_contained_env";
    let Some(_uv) = real_uv(test) else {
        return;
    };
    let dir = scratch();
    let lock = write_lock(dir.path(), "six.lock", SIX_LOCK);
    let root = dir.path().join("env");
    let env = match build_python_environment(&root, &lock, "3.12.12") {
        Ok(env) => env,
        Err(e) if e.is_download_unavailable() => {
            eprintln!("SKIP {test}: interpreter downloads are unavailable here");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let root = env.root().to_path_buf();
    assert_eq!(env.read_only_dirs(), vec![root.clone()]);
    assert_eq!(env.interpreter_prefix(), None);
    assert!(root.join("python").is_dir());
    let out = run_python(
        &env,
        "import six, sys; print(sys.version.split()[0]); print(sys.prefix); print(sys.base_prefix)",
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "3.12.12");
    assert_eq!(Path::new(lines[1]), root.join("venv"));
    assert!(
        Path::new(lines[2])
            .canonicalize()
            .unwrap()
            .starts_with(&root),
        "{out}"
    );
    // Every symlink resolves inside the root.
    let mut pending = vec![root.clone()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                pending.push(path);
            } else if meta.file_type().is_symlink() {
                let resolved = path.canonicalize().unwrap();
                assert!(
                    resolved.starts_with(&root),
                    "{} -> {}",
                    path.display(),
                    resolved.display()
                );
            }
        }
    }
    let marker = std::fs::read_to_string(root.join(MARKER_NAME)).unwrap();
    assert!(
        marker.starts_with("python 3.12.12\nlock sha256 "),
        "{marker}"
    );
}

#[test]
fn killed_build_is_rebuilt() {
    let test = "killed_build_is_rebuilt";
    let (Some(uv), Some(python)) = (real_uv(test), test_python(test)) else {
        return;
    };
    let dir = scratch();
    let lock = write_lock(dir.path(), "six.lock", SIX_LOCK);
    let root = dir.path().join("env");
    // A uv that creates the venv for real, then hangs in `pip sync` until killed.
    let started = dir.path().join("sync-started");
    let hanging = dir.path().join("hanging-uv");
    std::fs::write(
        &hanging,
        format!(
            "#!/bin/sh\nif [ \"$1\" = pip ]; then touch '{}'; exec sleep 120; fi\nexec '{}' \"$@\"\n",
            started.display(),
            uv.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &hanging,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    use std::os::unix::process::CommandExt;
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "child_builder",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("PYENV_CHILD_UV", &hanging)
        .env("PYENV_CHILD_ROOT", &root)
        .env("PYENV_CHILD_LOCK", &lock)
        .env("PYENV_CHILD_PYTHON", &python)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !started.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the child build never reached pip sync"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(root.join("venv").is_dir());
    assert!(!root.join(MARKER_NAME).exists());
    // Kill the builder and its hanging uv (the whole process group), as a crash would.
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    child.wait().unwrap();

    // The lock died with the process; the next build removes the unfinished root and builds.
    let env = build_python_environment(&root, &lock, python.to_str().unwrap()).unwrap();
    assert_eq!(
        run_python(&env, "import six; print(six.__version__)"),
        "1.17.0\n"
    );
    assert!(root.join(MARKER_NAME).is_file());
}

/// Run only as a child process of `inherited_mirror_variable_reaches_uv`.
#[test]
#[ignore = "a child process of inherited_mirror_variable_reaches_uv"]
fn child_version_build() {
    let root = std::env::var_os("PYENV_CHILD_ROOT")
        .expect("run inherited_mirror_variable_reaches_uv instead");
    let lock = std::env::var_os("PYENV_CHILD_LOCK")
        .expect("run inherited_mirror_variable_reaches_uv instead");
    match build_python_environment(root, lock, "3.12.12") {
        Ok(env) => println!("CHILD-BUILT {}", env.root().display()),
        Err(e) => println!(
            "CHILD-ERROR download_unavailable={} {e}",
            e.is_download_unavailable()
        ),
    }
}

#[test]
fn inherited_mirror_variable_reaches_uv() {
    let test = "inherited_mirror_variable_reaches_uv";
    let Some(_uv) = real_uv(test) else {
        return;
    };
    let dir = scratch();
    let lock = write_lock(dir.path(), "six.lock", SIX_LOCK);
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "child_version_build",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("PYENV_CHILD_ROOT", dir.path().join("env"))
        .env("PYENV_CHILD_LOCK", &lock)
        .env(
            "UV_PYTHON_INSTALL_MIRROR",
            "file:///nonexistent/inherited-mirror",
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(
        stdout.contains("CHILD-ERROR download_unavailable=true"),
        "{stdout}"
    );
    assert!(stdout.contains("/nonexistent/inherited-mirror"), "{stdout}");
}

#[test]
fn lock_timeout_gives_up_on_a_held_lock() {
    let test = "lock_timeout_gives_up_on_a_held_lock";
    let (Some(_uv), Some(python)) = (real_uv(test), test_python(test)) else {
        return;
    };
    let dir = scratch();
    let lock = write_lock(dir.path(), "six.lock", SIX_LOCK);
    let root = dir.path().join("env");
    // Another builder (here: this test) holds the lock beside the root.
    let held = nix::fcntl::Flock::lock(
        std::fs::File::create(dir.path().join("env.lock")).unwrap(),
        nix::fcntl::FlockArg::LockExclusive,
    )
    .unwrap();
    let options = BuildOptions::default().lock_timeout(std::time::Duration::from_millis(300));
    let python_arg = python.to_str().unwrap();
    let err = build_python_environment_with(&root, &lock, python_arg, &options).unwrap_err();
    match &err {
        PyenvError::LockTimeout { lock, waited } => {
            assert!(lock.ends_with("env.lock"), "{}", lock.display());
            assert!(*waited >= std::time::Duration::from_millis(300));
        }
        other => panic!("expected LockTimeout, got {other:?}"),
    }
    assert!(!root.exists());
    drop(held);
    let env = build_python_environment_with(&root, &lock, python_arg, &options).unwrap();
    assert_eq!(
        run_python(&env, "import six; print(six.__version__)"),
        "1.17.0\n"
    );
}

/// The pids of uv processes whose command line mentions `needle`.
fn uv_processes_mentioning(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let is_uv = args
            .first()
            .is_some_and(|a| Path::new(a).file_name().is_some_and(|n| n == "uv"));
        if is_uv && args.iter().any(|a| a.contains(needle)) {
            out.push(pid);
        }
    }
    out
}

/// Killing a build's owner (`kill -9` of the process) while `uv pip sync` runs leaves no
/// uv behind (uv gets `PR_SET_PDEATHSIG` `SIGKILL`), and the next build of the same root
/// recovers the half-written directory: it takes the lock, finds no marker and rebuilds
/// (defect 6 of issue 12's review: uv ran on as an orphan writing into the cache).
///
/// The owner is this test binary run again as a child (the environment variable below
/// makes it the child); its `uv pip sync` downloads the locked wheel from a local server
/// that accepts the connection and never answers, so the sync is in progress when the
/// child is killed.
#[test]
fn uv_dies_with_a_killed_owner_and_the_next_build_recovers() {
    const CHILD: &str = "SHELLBOX_PYENV_TEST_OWNER_ROOT";
    let test = "uv_dies_with_a_killed_owner_and_the_next_build_recovers";
    if let Some(root) = std::env::var_os(CHILD) {
        // The child: build until killed.
        let lock = std::env::var_os("SHELLBOX_PYENV_TEST_OWNER_LOCK").unwrap();
        let uv = std::env::var_os("SHELLBOX_PYENV_TEST_OWNER_UV").unwrap();
        let python = std::env::var("SHELLBOX_PYENV_TEST_OWNER_PYTHON").unwrap();
        let options = BuildOptions::default().uv(PathBuf::from(uv));
        let _ = build_python_environment_with(root, Path::new(&lock), &python, &options);
        return;
    }
    let (Some(uv), Some(python)) = (real_uv(test), test_python(test)) else {
        return;
    };
    let dir = scratch();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (connected_tx, connected_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
            let _ = connected_tx.send(());
        }
    });
    let lock = write_lock(
        dir.path(),
        "stalled.lock",
        &format!(
            "six @ http://127.0.0.1:{port}/six-1.17.0-py2.py3-none-any.whl \\\n    \
             --hash=sha256:4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274\n"
        ),
    );
    let root = dir.path().join("envs/killed");
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, &root)
        .env("SHELLBOX_PYENV_TEST_OWNER_LOCK", &lock)
        .env("SHELLBOX_PYENV_TEST_OWNER_UV", &uv)
        .env("SHELLBOX_PYENV_TEST_OWNER_PYTHON", &python)
        // uv would otherwise give up on the silent server after 30 s.
        .env("UV_HTTP_TIMEOUT", "3600")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // A guard against a hang, not a timing assertion: uv connects once the venv exists.
    connected_rx
        .recv_timeout(std::time::Duration::from_secs(300))
        .expect("uv pip sync never asked the local server for the wheel");
    let needle = root.display().to_string();
    let before = uv_processes_mentioning(&needle);
    assert!(!before.is_empty(), "no uv of the build runs");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    child.wait().unwrap();
    // The kernel delivers the death signal as the owner exits; give the kill a moment to
    // land (uv would otherwise wait on the silent server for an hour).
    let mut left = uv_processes_mentioning(&needle);
    for _ in 0..100 {
        if left.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        left = uv_processes_mentioning(&needle);
    }
    assert!(left.is_empty(), "uv outlived its killed owner: {left:?}");
    assert!(!root.join(MARKER_NAME).exists());

    // The next build takes the lock and rebuilds the half-written root.
    let good = write_lock(dir.path(), "six.lock", SIX_LOCK);
    let env = build_python_environment_with(
        &root,
        &good,
        python.to_str().unwrap(),
        &BuildOptions::default().uv(uv.clone()),
    )
    .unwrap();
    assert_eq!(
        run_python(&env, "import six; print(six.__version__)"),
        "1.17.0\n"
    );
    assert!(root.join(MARKER_NAME).is_file());
}
