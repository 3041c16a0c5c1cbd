//! End to end: an environment built with real uv runs in a real local (bwrap) machine.

mod common;

use std::path::PathBuf;

use common::*;
use shellbox_core::{Command, HostImage, ImageSource, Machine, MachineSpec};
use shellbox_local::{LocalMachineFactory, LocalOptions};
use shellbox_pyenv::{build_python_environment, in_system_directories, PythonEnvironment};

fn factory(test: &str) -> Option<LocalMachineFactory> {
    match LocalMachineFactory::new(LocalOptions::default()) {
        Ok(factory) => Some(factory),
        Err(e) => {
            eprintln!("SKIP {test}: the local backend cannot sandbox here: {e}");
            None
        }
    }
}

fn build(test: &str, dir: &std::path::Path) -> Option<PythonEnvironment> {
    let (Some(_uv), Some(python)) = (real_uv(test), test_python(test)) else {
        return None;
    };
    let lock = write_lock(dir, "six.lock", SIX_LOCK);
    Some(build_python_environment(dir.join("env"), &lock, python.to_str().unwrap()).unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn local_machine_runs_environment_python() {
    let test = "local_machine_runs_environment_python";
    let Some(factory) = factory(test) else {
        return;
    };
    let dir = scratch();
    let Some(env) = tokio::task::block_in_place(|| build(test, dir.path())) else {
        return;
    };
    let image = env.host_image();
    let machine = factory
        .create_local(MachineSpec::new(ImageSource::Host(image)))
        .await
        .unwrap();

    // The machine mounts exactly the environment's read-only dirs, each at its own path:
    // the root and, for an interpreter outside the system directories, its prefix.
    let expected: Vec<(PathBuf, String)> = env
        .read_only_dirs()
        .into_iter()
        .map(|d| {
            let guest = d.to_str().unwrap().to_string();
            (d, guest)
        })
        .collect();
    assert_eq!(machine.read_only_mounts(), expected);
    let prefix = env.interpreter_prefix().unwrap().to_path_buf();
    assert_eq!(expected[0].0, env.root());
    if !in_system_directories(&prefix) {
        assert_eq!(expected.len(), 2);
        assert_eq!(expected[1].0, prefix);
    }

    let result = machine
        .run(Command::shell(
            "python3 -c 'import six, sys; print(sys.prefix)' && command -v python3",
        ))
        .await
        .unwrap();
    assert_eq!(
        result.exit_code,
        Some(0),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&result.stdout),
        format!(
            "{}\n{}\n",
            env.root().join("venv").display(),
            env.python().display()
        )
    );

    // Read-only inside the machine: the environment cannot be changed by a command.
    let result = machine
        .run(Command::shell(format!(
            "touch {}/venv/x",
            env.root().display()
        )))
        .await
        .unwrap();
    assert_ne!(result.exit_code, Some(0));
    assert!(!env.root().join("venv/x").exists());
    machine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn interpreter_prefix_mount_is_needed() {
    let test = "interpreter_prefix_mount_is_needed";
    let Some(factory) = factory(test) else {
        return;
    };
    let dir = scratch();
    let Some(env) = tokio::task::block_in_place(|| build(test, dir.path())) else {
        return;
    };
    let prefix = env.interpreter_prefix().unwrap().to_path_buf();
    if in_system_directories(&prefix) {
        // Every machine shows the system directories; the root alone must then suffice.
        assert_eq!(env.read_only_dirs(), vec![env.root().to_path_buf()]);
        return;
    }
    // Without the interpreter's prefix the venv's python3 is a dangling symlink inside
    // (a missing program: 127), whatever other python3 the system directories hold.
    let without_prefix = HostImage {
        read_only: vec![env.root().to_path_buf()],
        bin_dirs: vec![env.bin_dir()],
        mounts: vec![],
    };
    let machine = factory
        .create_local(MachineSpec::new(ImageSource::Host(without_prefix)))
        .await
        .unwrap();
    let result = machine
        .run(Command::from_argv([
            env.python().to_str().unwrap(),
            "-c",
            "import sys; print(sys.prefix)",
        ]))
        .await
        .unwrap();
    assert_eq!(result.exit_code, Some(127), "{result:?}");
    machine.close().await.unwrap();

    // add_to puts the whole environment into an image that already has content.
    let mut image = HostImage {
        read_only: vec![dir.path().join("extra")],
        bin_dirs: vec![],
        mounts: vec![],
    };
    std::fs::create_dir(dir.path().join("extra")).unwrap();
    env.add_to(&mut image);
    let machine = factory
        .create_local(MachineSpec::new(ImageSource::Host(image)))
        .await
        .unwrap();
    let result = machine
        .run(Command::shell(
            "python3 -c 'import six; print(six.__version__)'",
        ))
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&result.stdout),
        "1.17.0\n",
        "{result:?}"
    );
    machine.close().await.unwrap();
}
