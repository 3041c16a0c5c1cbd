//! `check_environment` gives `create`'s verdict on the local backend where it depends on
//! this factory's options and the host's files: tools of a shell-only package spec found
//! (or not) on the factory's read-only directories and bin dirs, through links, by path
//! and on a spec's own `PATH` (the shared conformance case covers the backend-neutral
//! specs).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use shellbox_core::{Error, ExecutionRequirements, MachineFactory, MachineSpec, PackageSpec};
use shellbox_local::LocalOptions;

fn verdict(r: &Result<(), Error>) -> String {
    match r {
        Ok(()) => "accepted".into(),
        Err(e) => format!("refused ({})", e.kind()),
    }
}

fn write_program(path: &Path, mode: u32) {
    std::fs::write(path, "#!/bin/sh\necho tool\n").unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_are_judged_as_the_machine_would_see_them() {
    let test = "tools_are_judged_as_the_machine_would_see_them";
    let shown = tempfile::tempdir().unwrap();
    let hidden = tempfile::tempdir().unwrap();
    let bin = shown.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    write_program(&bin.join("shellbox-tool"), 0o755);
    write_program(&bin.join("shellbox-noexec"), 0o644);
    write_program(&hidden.path().join("real"), 0o755);
    std::os::unix::fs::symlink(hidden.path().join("real"), bin.join("shellbox-out")).unwrap();
    std::os::unix::fs::symlink(bin.join("shellbox-tool"), bin.join("shellbox-in")).unwrap();
    let Some(factory) = common::factory_with(
        test,
        LocalOptions {
            read_only: vec![shown.path().to_path_buf()],
            bin_dirs: vec![bin.clone()],
            ..LocalOptions::default()
        },
    ) else {
        return;
    };
    let tool_path = bin.join("shellbox-tool").display().to_string();
    let only_bin = bin.display().to_string();
    let tools = |names: &[&str]| {
        let mut p = PackageSpec::shell();
        for n in names {
            p = p.tool(*n);
        }
        MachineSpec::packages(p)
    };
    let many_sh = MachineSpec::packages(PackageSpec {
        pypi_packages: None,
        tools: vec!["sh".to_string(); 400_000],
    });
    let too_many = MachineSpec::packages(PackageSpec {
        pypi_packages: None,
        tools: (0..60_000)
            .map(|i| format!("shellbox-absent-tool-{i:06}"))
            .collect(),
    });
    // "accepted", or the kind both refuse with.
    let cases: Vec<(&str, MachineSpec, &str)> = vec![
        (
            "a tool in a bin dir",
            tools(&["shellbox-tool", "sh"]),
            "accepted",
        ),
        (
            "a link within the mount",
            tools(&["shellbox-in"]),
            "accepted",
        ),
        ("not executable", tools(&["shellbox-noexec"]), "unsupported"),
        (
            "a link out of what the machine sees",
            tools(&["shellbox-out"]),
            "unsupported",
        ),
        (
            "the spec's PATH",
            tools(&["shellbox-tool"]).env("PATH", &only_bin),
            "accepted",
        ),
        (
            "sh off the spec's PATH",
            tools(&["sh"]).env("PATH", &only_bin),
            "unsupported",
        ),
        // A tool is a program name found on PATH: one holding '/' is refused by both.
        ("a tool by its path", tools(&[&tool_path]), "invalid_input"),
        (
            "a relative path from /",
            tools(&["usr/bin/env"]).workdir("/"),
            "invalid_input",
        ),
        (
            "a host file the machine hides",
            tools(&[&hidden.path().join("real").display().to_string()]),
            "invalid_input",
        ),
        ("a tool in /etc", tools(&["/etc/passwd"]), "invalid_input"),
        (
            "a link in /etc/alternatives",
            tools(&["/etc/alternatives/awk"]),
            "invalid_input",
        ),
        (
            "a path climbing from the workdir",
            tools(&["../usr/bin/env"]).workdir("/tmp"),
            "invalid_input",
        ),
        (
            "an unnormalised path",
            tools(&["/tmp/../usr/bin/env"]),
            "invalid_input",
        ),
        ("a kernel path", tools(&["/proc/self/exe"]), "invalid_input"),
        // PATH entries count only when absolute and normalised, outside /etc and the
        // kernel's directories; never as globs.
        (
            "a glob in the spec's PATH",
            tools(&["sh"]).env("PATH", "/usr/*"),
            "unsupported",
        ),
        (
            "a relative spec PATH from /",
            tools(&["sh"]).env("PATH", "usr/bin").workdir("/"),
            "unsupported",
        ),
        (
            "an unnormalised spec PATH",
            tools(&["sh"]).env("PATH", "/tmp/../usr/bin"),
            "unsupported",
        ),
        (
            "a spec PATH in /etc",
            tools(&["awk"]).env("PATH", "/etc/alternatives"),
            "unsupported",
        ),
        ("one tool 400000 times", many_sh, "accepted"),
        ("tools past the command size", too_many, "invalid_input"),
    ];
    let none = ExecutionRequirements::default();
    for (what, spec, expected) in cases {
        let checked = factory.check_environment(&none, &spec).await;
        let created = match factory.create(spec).await {
            Ok(m) => {
                m.close().await.unwrap();
                Ok(())
            }
            Err(e) => Err(e),
        };
        assert_eq!(
            verdict(&checked),
            verdict(&created),
            "{what}: check {checked:?}, create {created:?}"
        );
        let got = match &created {
            Ok(()) => "accepted".to_string(),
            Err(e) => e.kind().to_string(),
        };
        assert_eq!(got, expected, "{what}: {created:?}");
        if let Err(e) = checked {
            if e.is_unsupported() {
                assert!(e.to_string().contains(shellbox_local::TOOLS_REFUSAL), "{e}");
            }
        }
    }
}

/// A `pypi_packages` spec needs the factory's package settings, which `check_environment`
/// judges as `create` does before it resolves anything: a partial Python version and an
/// interpreter that cannot run, an empty package cache are refused by both (`InvalidInput`); whether the packages
/// resolve is not checked (that needs uv and the network).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn package_settings_are_judged_as_create_judges_them() {
    let test = "package_settings_are_judged_as_create_judges_them";
    let cache = tempfile::tempdir().unwrap();
    let none = ExecutionRequirements::default();
    let spec = MachineSpec::packages(PackageSpec::python(["six==1.17.0"]));
    let mut cases = vec![
        LocalOptions {
            package_cache: Some(cache.path().to_path_buf()),
            python_version: Some("3.12".into()),
            ..LocalOptions::default()
        },
        LocalOptions {
            package_cache: Some(cache.path().to_path_buf()),
            python_interpreter: Some("/shellbox-no-such-python".into()),
            ..LocalOptions::default()
        },
        // An empty package cache (issue 12 break-it: accepted, and the resolve wrote its
        // lock below the working directory).
        LocalOptions {
            package_cache: Some(PathBuf::new()),
            ..LocalOptions::default()
        },
    ];
    // A real interpreter of another version than the one asked for (the factory's
    // python_version one patch level above the interpreter's own).
    let python = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("python3"))
            .find(|p| p.is_file())
    });
    match &python {
        Some(python) => {
            let out = std::process::Command::new(python)
                .args([
                    "-I",
                    "-c",
                    "import sys; print('%d.%d.%d' % sys.version_info[:3])",
                ])
                .output()
                .unwrap();
            let own = String::from_utf8_lossy(&out.stdout).trim().to_string();
            let (minor, patch) = own.rsplit_once('.').unwrap();
            let other = format!("{minor}.{}", patch.parse::<u32>().unwrap() + 1);
            cases.push(LocalOptions {
                package_cache: Some(cache.path().to_path_buf()),
                python_version: Some(other),
                python_interpreter: Some(python.clone()),
                ..LocalOptions::default()
            });
        }
        None => eprintln!("SKIP {test} (wrong interpreter version case): no python3 on PATH"),
    }
    for (options, spec) in cases.into_iter().flat_map(|o| {
        [
            (o.clone(), spec.clone()),
            (
                o,
                MachineSpec::packages(PackageSpec::python(Vec::<String>::new())),
            ),
        ]
    }) {
        let Some(factory) = common::factory_with(test, options.clone()) else {
            return;
        };
        let checked = factory.check_environment(&none, &spec).await;
        let created = factory.create(spec.clone()).await.map(drop);
        assert!(
            matches!(checked, Err(Error::InvalidInput(_))),
            "{options:?}: {checked:?}"
        );
        assert_eq!(
            verdict(&checked),
            verdict(&created),
            "{options:?}: {created:?}"
        );
    }
    // Nothing was resolved into the cache.
    assert_eq!(std::fs::read_dir(cache.path()).unwrap().count(), 0);
}

/// A requirement naming an environment variable (`${HOME}`, `$HOME`: uv expands them from
/// the host's environment, so a URL could carry a host secret out) or ending in a backslash
/// (uv joins it to the next requirement) is refused by `check_environment` and `create`
/// alike with `InvalidInput`, before uv runs, as is one that is not PEP 508 (`six===`): the factory's uv here is the real one behind
/// a wrapper that records each call, and it records none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requirements_with_env_references_or_host_files_never_reach_uv() {
    let test = "requirements_with_env_references_or_host_files_never_reach_uv";
    let Some(uv) = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("uv"))
            .find(|p| p.is_file())
    }) else {
        eprintln!("SKIP {test}: no uv on PATH");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("uv-calls");
    let wrapper = dir.path().join("uv");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho \"$@\" >> '{}'\nexec '{}' \"$@\"\n",
            log.display(),
            uv.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cache = dir.path().join("cache");
    let Some(factory) = common::factory_with(
        test,
        LocalOptions {
            package_cache: Some(cache.clone()),
            uv: Some(wrapper.clone()),
            ..LocalOptions::default()
        },
    ) else {
        return;
    };
    let none = ExecutionRequirements::default();
    let home = std::env::var("HOME").unwrap_or_default();
    for requirements in [
        vec!["six @ http://127.0.0.1:9/${HOME}/six-1.17.0-py2.py3-none-any.whl"],
        vec!["six==${HOME}"],
        vec!["six==$HOME"],
        vec!["si\\", "x==1.17.0"],
        // Host files uv would read on the host (issue 12 break-it: a wheel in /root
        // installed into a machine that cannot see /root).
        vec!["hello-pkg @ file:///srv/private/hello_pkg-1.0-py3-none-any.whl"],
        vec!["/srv/private/hello_pkg-1.0-py3-none-any.whl"],
        vec!["pkg @ git+file:///srv/repo"],
        // Not PEP 508 (issue 12 break-it: check accepted them, create failed in uv's parse).
        vec!["six==="],
        vec!["six[[["],
    ] {
        let spec = MachineSpec::packages(PackageSpec::python(requirements.clone()));
        let checked = factory.check_environment(&none, &spec).await;
        let created = factory.create(spec).await.map(drop);
        for (what, r) in [("check", &checked), ("create", &created)] {
            match r {
                Err(Error::InvalidInput(m)) => assert!(
                    home.len() < 4 || !m.contains(&home),
                    "{what} {requirements:?}: the message shows HOME's value: {m}"
                ),
                other => panic!("{what} {requirements:?}: {other:?}"),
            }
        }
    }
    assert!(
        !log.exists(),
        "uv ran: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}

/// On a cold package cache the resolve needs uv and a cache directory it can make:
/// `check_environment` refuses what `create` would fail on (`Backend` both), and the failed
/// `create` leaves nothing in the cache (no key directory, lock file or `requirements.in`).
/// A uv that is not there, a cache below a regular file (a directory that cannot be made).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_cache_needs_uv_and_a_cache_that_can_be_made() {
    let test = "a_cold_cache_needs_uv_and_a_cache_that_can_be_made";
    let dir = tempfile::tempdir().unwrap();
    let none = ExecutionRequirements::default();
    let spec = MachineSpec::packages(PackageSpec::python(["six==1.17.0"]));
    let file = dir.path().join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    let real_uv = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("uv"))
            .find(|p| p.is_file())
    });
    let mut cases = vec![(
        "no uv",
        LocalOptions {
            package_cache: Some(dir.path().join("cache")),
            uv: Some(dir.path().join("no-such-uv")),
            ..LocalOptions::default()
        },
    )];
    match real_uv {
        Some(uv) => cases.push((
            "cache below a file",
            LocalOptions {
                package_cache: Some(file.join("cache")),
                uv: Some(uv),
                ..LocalOptions::default()
            },
        )),
        None => eprintln!("SKIP {test} (cache below a file): no uv on PATH"),
    }
    for (what, options) in cases {
        let Some(factory) = common::factory_with(test, options) else {
            return;
        };
        let checked = factory.check_environment(&none, &spec).await;
        let created = factory.create(spec.clone()).await.map(drop);
        assert!(
            matches!(checked, Err(Error::Backend { .. })),
            "{what}: {checked:?}"
        );
        assert_eq!(verdict(&checked), verdict(&created), "{what}: {created:?}");
    }
    let left: Vec<_> = walk(&dir.path().join("cache"));
    assert_eq!(left, Vec::<String>::new(), "a failed resolve left files");
}

/// Every path below `root` (relative), sorted; none when `root` does not exist.
fn walk(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            out.push(path.strip_prefix(root).unwrap().display().to_string());
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path);
            }
        }
    }
    out.sort();
    out
}

/// A `pids_limit` below what the machine's own tasks take (bwrap, the supervisor, a keeper)
/// is refused alike by `check_environment` and `create` (`InvalidInput`); they agreed on
/// nothing before (the check said yes, then create or the first command failed with
/// bwrap's "Creating new namespace failed", a supervisor panic or a killed keeper). At
/// the smallest limit taken a pipeline runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pids_limit_too_small_for_the_machine_is_refused_alike() {
    let test = "a_pids_limit_too_small_for_the_machine_is_refused_alike";
    let Some(factory) = common::factory(test) else {
        return;
    };
    let none = ExecutionRequirements::default();
    for limit in [1, 2, 5, shellbox_local::MIN_PIDS_LIMIT - 1] {
        let spec = MachineSpec::host().pids_limit(limit);
        let checked = factory.check_environment(&none, &spec).await;
        let created = factory.create(spec).await.map(drop);
        assert!(
            matches!(&checked, Err(Error::InvalidInput(m)) if m.contains("pids_limit")),
            "{limit}: {checked:?}"
        );
        assert_eq!(verdict(&checked), verdict(&created), "{limit}: {created:?}");
    }
    let spec = MachineSpec::host().pids_limit(shellbox_local::MIN_PIDS_LIMIT);
    factory.check_environment(&none, &spec).await.unwrap();
    let m = factory.create(spec).await.unwrap();
    let r = m
        .run(shellbox_core::Command::shell("echo a | cat | cat | wc -l"))
        .await
        .unwrap();
    assert_eq!(
        (r.exit_code, r.stdout_lossy().as_str()),
        (Some(0), "1\n"),
        "{r:?}"
    );
    m.close().await.unwrap();
}
