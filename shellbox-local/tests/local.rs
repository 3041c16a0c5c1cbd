//! The local backend's own behaviour, against real bwrap sandboxes: isolation, environment
//! secrecy, limits, users, transfers through planted symlinks, cleanup, streaming, concurrency.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::StreamExt;
use shellbox_core::{
    Command, CommandResult, Error, Event, ExitReason, HostImage, ImageSource, Machine,
    MachineFactory, MachineSpec, Mount, NetworkPolicy,
};
use shellbox_local::{LocalMachine, LocalMachineFactory, LocalOptions};

async fn machine(test: &str) -> Option<LocalMachine> {
    machine_with(test, LocalOptions::default(), MachineSpec::host()).await
}

async fn machine_with(
    test: &str,
    options: LocalOptions,
    spec: MachineSpec,
) -> Option<LocalMachine> {
    let factory = common::factory_with(test, options)?;
    Some(factory.create_local(spec).await.expect("create"))
}

async fn sh(m: &dyn Machine, script: &str) -> CommandResult {
    m.run(Command::shell(script).timeout(Duration::from_secs(60)))
        .await
        .unwrap_or_else(|e| panic!("{script}: {e}"))
}

fn out(r: &CommandResult) -> String {
    r.stdout_lossy()
}

/// Waits (up to 10 s) until `path` exists on the host.
async fn wait_for(path: &Path) {
    let start = Instant::now();
    while !path.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{} never appeared",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Host processes whose argv contains `needle`.
fn host_processes_with(needle: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            if cmdline.windows(needle.len()).any(|w| w == needle) {
                found.push(String::from_utf8_lossy(&cmdline).replace('\0', " "));
            }
        }
    }
    found
}

/// Waits (up to 10 s) until no host process has `needle` in its argv.
async fn assert_processes_gone(needle: &str) {
    let start = Instant::now();
    loop {
        let left = host_processes_with(needle.as_bytes());
        if left.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "still running: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_values_never_reach_host_argv_or_bwrap_environment() {
    let Some(m) = machine("env_values_never_reach_host_argv_or_bwrap_environment").await else {
        return;
    };
    let secret = "s3cr3t-value-7f1d2c";
    let stream = m
        .run_stream(
            Command::shell("touch /tmp/started; while [ ! -e /tmp/go ]; do sleep 0.02; done; printf %s \"$SECRET\"")
                .env("SECRET", secret)
                .timeout(Duration::from_secs(30)),
        )
        .await
        .unwrap();
    wait_for(&m.root_view().join("tmp/started")).await;
    // While the command runs: no host process carries the value in its argv, and bwrap
    // itself runs with the control environment only.
    assert_eq!(host_processes_with(secret.as_bytes()), Vec::<String>::new());
    let mut bwraps = 0;
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if comm.trim() == "bwrap" {
            bwraps += 1;
            let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
            assert!(!environ
                .windows(secret.len())
                .any(|w| w == secret.as_bytes()));
        }
    }
    assert!(bwraps > 0, "no bwrap process seen while the command ran");
    std::fs::write(m.root_view().join("tmp/go"), b"").unwrap();
    let r = shellbox_core::collect(stream, 1 << 20).await.unwrap();
    assert_eq!(out(&r), secret);
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn environment_is_built_not_inherited() {
    let options = LocalOptions {
        bin_dirs: vec!["/opt/factory-bin".into()],
        hash_seed: Some("0".into()),
        ..LocalOptions::default()
    };
    let spec = MachineSpec::new(ImageSource::Host(HostImage {
        bin_dirs: vec!["/opt/image-bin".into()],
        ..HostImage::default()
    }))
    .env("FROM_SPEC", "spec")
    .env("BOTH", "spec");
    let Some(m) = machine_with("environment_is_built_not_inherited", options, spec).await else {
        return;
    };
    let r = m
        .run(Command::from_argv(["env"]).env("BOTH", "command"))
        .await
        .unwrap();
    let vars: BTreeSet<String> = out(&r).lines().map(str::to_string).collect();
    let expected: BTreeSet<String> = [
        "PATH=/opt/image-bin:/opt/factory-bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME=/home/shellbox",
        "LANG=C.UTF-8",
        "PYTHONHASHSEED=0",
        "FROM_SPEC=spec",
        "BOTH=command",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // `env` is exec'd by /bin/sh after its `cd`, which adds only PWD and OLDPWD.
    let without_pwd: BTreeSet<String> = vars
        .iter()
        .filter(|v| !v.starts_with("PWD=") && !v.starts_with("OLDPWD="))
        .cloned()
        .collect();
    assert_eq!(without_pwd, expected, "{r:?}");
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_capabilities_and_no_new_privs() {
    let Some(m) = machine("no_capabilities_and_no_new_privs").await else {
        return;
    };
    let r = sh(
        &m,
        "grep -E '^(CapEff|CapPrm|NoNewPrivs):' /proc/self/status",
    )
    .await;
    assert_eq!(
        out(&r),
        "CapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nNoNewPrivs:\t1\n",
        "{r:?}"
    );
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_switch_to_nobody_from_root() {
    let Some(m) = machine("user_switch_to_nobody_from_root").await else {
        return;
    };
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIP user_switch_to_nobody_from_root: needs a root host process");
        return;
    }
    let r = m
        .run(
            Command::shell("id -u; id -g; id -G; grep CapEff /proc/self/status; touch /tmp/by-nobody && stat -c %u /tmp/by-nobody")
                .user("65534"),
        )
        .await
        .unwrap();
    assert_eq!(
        out(&r),
        "65534\n65534\n65534\nCapEff:\t0000000000000000\n65534\n",
        "{r:?}"
    );
    let r = m
        .run(Command::new("id").arg("-u").user("nobody"))
        .await
        .unwrap();
    assert_eq!(out(&r), "65534\n");
    let r = m.run(Command::new("id").arg("-u").user("0")).await.unwrap();
    assert_eq!(out(&r), "0\n");
    let err = m
        .run(Command::new("true").user("no-such-account-xyz"))
        .await
        .unwrap_err();
    assert!(
        err.is_unsupported()
            && err
                .to_string()
                .contains("no such user: no-such-account-xyz"),
        "{err}"
    );
    m.close().await.unwrap();
}

fn limit_line<'a>(limits: &'a str, name: &str) -> Vec<&'a str> {
    let line = limits
        .lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("{name} missing in {limits}"));
    line[name.len()..].split_whitespace().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_limits_and_niceness() {
    let Some(m) = machine("resource_limits_and_niceness").await else {
        return;
    };
    let r = m
        .run(
            Command::shell(
                "cat /proc/self/limits; echo; ulimit -c; cut -d' ' -f19 /proc/self/stat",
            )
            .timeout(Duration::from_secs(10)),
        )
        .await
        .unwrap();
    let text = out(&r);
    assert_eq!(limit_line(&text, "Max core file size"), ["0", "0", "bytes"]);
    assert_eq!(
        limit_line(&text, "Max file size"),
        ["1073741824", "1073741824", "bytes"]
    );
    let cpus = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0))
        .map(|s| {
            (0..nix::sched::CpuSet::count())
                .filter(|&i| s.is_set(i).unwrap_or(false))
                .count()
        })
        .unwrap();
    let cpu = (10 * cpus + 5).to_string();
    assert_eq!(
        limit_line(&text, "Max cpu time"),
        [cpu.as_str(), cpu.as_str(), "seconds"]
    );
    let nproc: u64 = limit_line(&text, "Max processes")[0]
        .parse()
        .expect("finite NPROC");
    // The host's task count (which moves while tests run) + 256, or the host's own lower
    // soft limit.
    let tasks: u64 = std::fs::read_to_string("/proc/loadavg")
        .unwrap()
        .split_whitespace()
        .nth(3)
        .unwrap()
        .split('/')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let host_soft = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NPROC)
        .unwrap()
        .0;
    assert!(
        nproc == host_soft || nproc.abs_diff(tasks + 256) < 200,
        "NPROC {nproc}, host tasks {tasks}, host soft limit {host_soft}"
    );
    let tail: Vec<&str> = text.trim_end().lines().rev().take(2).collect();
    let host_nice: i32 = std::fs::read_to_string("/proc/self/stat")
        .unwrap()
        .split(' ')
        .nth(18)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        tail[0],
        (host_nice + 10).min(19).to_string(),
        "nice: {text}"
    );
    assert_eq!(tail[1], "0", "ulimit -c: {text}");
    // Without a timeout there is no CPU limit.
    let r = m
        .run(Command::shell("grep 'Max cpu time' /proc/self/limits"))
        .await
        .unwrap();
    assert!(out(&r).contains("unlimited"), "{r:?}");
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigxfsz_and_sigpipe_are_reset_to_default() {
    let Some(m) = machine("sigxfsz_and_sigpipe_are_reset_to_default").await else {
        return;
    };
    // Ignore both in this (host) process: the launcher must reset them for the command.
    // SAFETY: setting a disposition to SIG_IGN installs no handler code.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    let r = sh(&m, "grep SigIgn /proc/self/status").await;
    let mask =
        u64::from_str_radix(out(&r).trim().trim_start_matches("SigIgn:").trim(), 16).unwrap();
    let bit = |signal: i32| 1u64 << (signal - 1);
    assert_eq!(mask & (bit(libc::SIGPIPE) | bit(libc::SIGXFSZ)), 0, "{r:?}");
    // Writing past RLIMIT_FSIZE kills the writer with SIGXFSZ (25): 128 + 25.
    let r = sh(&m, "ulimit -f 1; head -c 100000 /dev/zero > /tmp/big").await;
    assert_eq!(r.exit_code, Some(153), "{r:?}");
    m.close().await.unwrap();
}

fn interfaces(proc_net_dev: &str) -> Vec<String> {
    proc_net_dev
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(|s| s.trim().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_deny_has_only_loopback() {
    let Some(m) = machine("network_deny_has_only_loopback").await else {
        return;
    };
    let r = sh(&m, "cat /proc/net/dev").await;
    assert_eq!(interfaces(&out(&r)), ["lo"], "{r:?}");
    let host_netns = std::fs::read_link("/proc/self/ns/net").unwrap();
    let r = sh(&m, "readlink /proc/self/ns/net").await;
    assert_ne!(out(&r).trim(), host_netns.to_str().unwrap());
    m.close().await.unwrap();
    // Allow shares the host's network namespace.
    let spec = MachineSpec::host().network(NetworkPolicy::Allow);
    let Some(m) = machine_with(
        "network_deny_has_only_loopback",
        LocalOptions::default(),
        spec,
    )
    .await
    else {
        return;
    };
    let r = sh(&m, "readlink /proc/self/ns/net").await;
    assert_eq!(out(&r).trim(), host_netns.to_str().unwrap());
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn launcher_failure_is_an_error_and_leaves_no_process() {
    let test = "launcher_failure_is_an_error_and_leaves_no_process";
    let Some(real) = common::factory(test) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("bwrap-copy");
    std::fs::copy(real.bwrap(), &copy).unwrap();
    let options = LocalOptions {
        bwrap: Some(copy.clone()),
        ..LocalOptions::default()
    };
    let factory = common::factory_with(test, options).expect("the copy sandboxes as bwrap does");
    std::fs::remove_file(&copy).unwrap();
    // The launcher's exec fails when the machine's sandbox starts, after create returned:
    // every command gets the typed error, and close leaves nothing.
    let m = factory.create_local(MachineSpec::host()).await.unwrap();
    let root = m.root().to_path_buf();
    for _ in 0..2 {
        let err = m.run(Command::new("true")).await.unwrap_err();
        assert!(matches!(&err, Error::Backend { .. }), "{err:?}");
        assert!(err.to_string().contains("sandbox"), "{err}");
        assert!(
            err.to_string().contains("No such file or directory"),
            "{err}"
        );
    }
    m.close().await.unwrap();
    assert!(!root.exists(), "root left behind");
    assert!(matches!(
        m.run(Command::new("true")).await.unwrap_err(),
        Error::Closed
    ));
    // The failed launcher was reaped. It never became bwrap, so it would show as a zombie
    // child with the name of one of this process's threads.
    let mut zombies = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        for pid in children.split_whitespace() {
            if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
                let state = stat.rsplit_once(") ").map(|(_, rest)| &rest[..1]);
                if !stat.contains("(bwrap") && state == Some("Z") {
                    zombies.push(stat);
                }
            }
        }
    }
    assert!(zombies.is_empty(), "{zombies:?}");
    // The working factory still makes machines.
    let m = real.create_local(MachineSpec::host()).await.unwrap();
    assert_eq!(out(&sh(&m, "echo ok").await), "ok\n");
    m.close().await.unwrap();
}

/// A bwrap that runs (so the factory's probe passes) but refuses the machine's sandbox
/// line: the real bwrap with an option it does not know put before the supervisor's line.
fn refusing_bwrap(dir: &std::path::Path, real: &std::path::Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("bwrap-refusing");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\ncase \"$*\" in *shellbox-supervisor*) exec {} --no-such-option \"$@\";; esac\nexec {} \"$@\"\n",
            real.display(),
            real.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_bwrap_refuses_reaches_the_first_command_as_its_error() {
    let test = "a_sandbox_bwrap_refuses_reaches_the_first_command_as_its_error";
    let Some(real) = common::factory(test) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let options = LocalOptions {
        bwrap: Some(refusing_bwrap(tmp.path(), real.bwrap())),
        ..LocalOptions::default()
    };
    let factory = common::factory_with(test, options).expect("the probe runs the real bwrap");
    let m = factory.create_local(MachineSpec::host()).await.unwrap();
    let root = m.root().to_path_buf();
    let cgroup = m.cgroup_dir().map(std::path::Path::to_path_buf);
    // bwrap's own words reach the caller, as a backend error naming the sandbox set-up.
    let err = m.run(Command::new("true")).await.unwrap_err();
    assert!(matches!(&err, Error::Backend { .. }), "{err:?}");
    assert!(err.to_string().contains("sandbox"), "{err}");
    assert!(err.to_string().contains("no-such-option"), "{err}");
    // Transfers work on the root itself and do not need the sandbox.
    let file = tmp.path().join("f");
    std::fs::write(&file, "x").unwrap();
    m.upload(&file, "/tmp/f").await.unwrap();
    m.close().await.unwrap();
    assert!(!root.exists(), "root left behind");
    if let Some(dir) = cgroup {
        assert!(!dir.exists(), "cgroup left behind");
    }
}

/// The pids of this process's children (any thread's) whose command line names `root`.
fn children_naming(root: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    let needle = root.to_string_lossy().into_owned();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        for pid in children.split_whitespace() {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(&needle) {
                found.push(pid.to_string());
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_or_dropping_a_machine_whose_sandbox_is_starting_leaves_nothing() {
    let test = "closing_or_dropping_a_machine_whose_sandbox_is_starting_leaves_nothing";
    let Some(factory) = common::factory(test) else {
        return;
    };
    // Closed at once, closed after the start was given a moment, dropped at once: each
    // catches the start at another point (not spawned, spawned, handshake).
    for (pause_us, drop_it) in [
        (0, false),
        (300, false),
        (2000, false),
        (0, true),
        (1000, true),
    ] {
        let m = factory.create_local(MachineSpec::host()).await.unwrap();
        let root = m.root().to_path_buf();
        let cgroup = m.cgroup_dir().map(std::path::Path::to_path_buf);
        tokio::time::sleep(std::time::Duration::from_micros(pause_us)).await;
        if drop_it {
            drop(m);
        } else {
            m.close().await.unwrap();
            assert!(matches!(
                m.run(Command::new("true")).await.unwrap_err(),
                Error::Closed
            ));
        }
        assert!(
            !root.exists(),
            "root left behind ({pause_us} us, drop {drop_it})"
        );
        if let Some(dir) = &cgroup {
            assert!(!dir.exists(), "cgroup left behind ({pause_us} us)");
        }
        // No bwrap of the machine survives (a dropped one is killed, then reaped).
        let started = std::time::Instant::now();
        while !children_naming(&root).is_empty() {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(10),
                "bwrap of {} still running ({pause_us} us, drop {drop_it})",
                root.display()
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_etc_and_read_only_system_dirs() {
    let Some(m) = machine("private_etc_and_read_only_system_dirs").await else {
        return;
    };
    let r = sh(
        &m,
        "test -e /etc/shadow || echo no-shadow; test -e /etc/profile || echo no-profile; \
         test -e /etc/ssl/private || echo no-private; ls /sys | wc -l; \
         touch /usr/x 2>/dev/null || echo usr-ro; touch /etc/x 2>/dev/null || echo etc-ro; \
         touch /sys/x 2>/dev/null || echo sys-ro; echo w > /opt/w && cat /opt/w; \
         stat -c %a /tmp /home/shellbox; echo $HOME; ls -d /bin/sh",
    )
    .await;
    assert_eq!(
        out(&r),
        "no-shadow\nno-profile\nno-private\n0\nusr-ro\netc-ro\nsys-ro\nw\n1777\n1777\n/home/shellbox\n/bin/sh\n",
        "{r:?}"
    );
    // The certificate store and alternatives are there, read-only, with the host's entries.
    let r = sh(&m, "ls /etc/ssl/certs | wc -l; ls /etc/alternatives | wc -l; touch /etc/ssl/certs/x 2>/dev/null || echo ro").await;
    let count = |dir: &str| std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0);
    assert_eq!(
        out(&r),
        format!(
            "{}\n{}\nro\n",
            count("/etc/ssl/certs"),
            count("/etc/alternatives")
        ),
        "{r:?}"
    );
    let tmp = tempfile::tempdir().unwrap();
    if Path::new("/etc/ssl/certs/ca-certificates.crt").is_file() {
        m.download(
            "/etc/ssl/certs/ca-certificates.crt",
            &tmp.path().join("ca.crt"),
        )
        .await
        .unwrap();
        assert_eq!(
            std::fs::read(tmp.path().join("ca.crt")).unwrap(),
            std::fs::read("/etc/ssl/certs/ca-certificates.crt").unwrap()
        );
    }
    m.download("/etc/passwd", &tmp.path().join("passwd"))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(tmp.path().join("passwd")).unwrap(),
        std::fs::read("/etc/passwd").unwrap()
    );
    m.download("/bin/sh", &tmp.path().join("sh")).await.unwrap();
    assert_eq!(
        std::fs::read(tmp.path().join("sh")).unwrap(),
        std::fs::read("/bin/sh").unwrap()
    );
    let file = tmp.path().join("f");
    std::fs::write(&file, b"x").unwrap();
    for target in [
        "/usr/local/single.txt",
        "/etc/x",
        "/sys/x",
        "/proc/x",
        "/bin/x",
    ] {
        let err = m.upload(&file, target).await.unwrap_err();
        let text = err.to_string();
        assert!(
            err.is_unsupported()
                && (text.contains("read-only host path") || text.contains("kernel-provided")),
            "{target}: {err}"
        );
    }
    // A tree uploaded to / may not write into a system directory either.
    let tree = tmp.path().join("tree");
    std::fs::create_dir_all(tree.join("usr")).unwrap();
    std::fs::write(tree.join("usr/planted"), b"x").unwrap();
    let err = m.upload(&tree, "/").await.unwrap_err();
    assert!(err.is_unsupported(), "{err}");
    assert!(!Path::new("/usr/planted").exists());
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machines_do_not_see_each_other() {
    let Some(factory) = common::factory("machines_do_not_see_each_other") else {
        return;
    };
    let a = factory.create_local(MachineSpec::host()).await.unwrap();
    let b = factory.create_local(MachineSpec::host()).await.unwrap();
    for dir in ["/workspace", "/tmp", "/opt", "/home/shellbox", "/srv"] {
        sh(&a, &format!("mkdir -p {dir} && echo a > {dir}/only-a")).await;
        let r = sh(
            &b,
            &format!("test -e {dir}/only-a && echo seen || echo unseen"),
        )
        .await;
        assert_eq!(out(&r), "unseen\n", "{dir}");
    }
    assert_ne!(a.root(), b.root());
    a.close().await.unwrap();
    b.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_symlinks_resolve_inside_the_machine() {
    let Some(m) = machine("planted_symlinks_resolve_inside_the_machine").await else {
        return;
    };
    let r = sh(&m, "ln -s /etc /workspace/escape && ln -s /root /workspace/rootlink && ln -s passwd-link /workspace/rel && echo ok").await;
    assert_eq!(out(&r), "ok\n");
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("payload");
    std::fs::write(&file, b"payload").unwrap();
    // Links resolve in the guest namespace: /workspace/escape is the machine's read-only
    // /etc, never the host's.
    for target in ["/workspace/escape/x", "/workspace/escape"] {
        let err = m.upload(&file, target).await.unwrap_err();
        assert!(err.is_unsupported(), "{target}: {err:?}");
        let err = m.upload(tmp.path(), target).await.unwrap_err();
        assert!(err.is_unsupported(), "dir to {target}: {err:?}");
    }
    assert!(!Path::new("/etc/x").exists());
    // /root does not exist in the machine: the upload makes it there, not on the host.
    let host_root_x = Path::new("/root/x").exists();
    m.upload(&file, "/workspace/rootlink/x").await.unwrap();
    assert_eq!(Path::new("/root/x").exists(), host_root_x);
    assert_eq!(out(&sh(&m, "cat /root/x").await), "payload");
    m.download("/workspace/escape/passwd", &tmp.path().join("passwd"))
        .await
        .unwrap();
    // The machine's own /etc/passwd (its factory's shared copy), as the machine sees it.
    assert_eq!(
        String::from_utf8(std::fs::read(tmp.path().join("passwd")).unwrap()).unwrap(),
        out(&sh(&m, "cat /etc/passwd").await)
    );
    let err = m
        .download("/workspace/rel", &tmp.path().join("out"))
        .await
        .unwrap_err();
    assert!(matches!(&err, Error::NotFound { .. }), "{err:?}");
    // A directory holding links that resolve outside it copies them as links (as tar
    // does, REFERENCE.md 4.5), never followed on either side.
    let ws = tmp.path().join("ws");
    m.download("/workspace", &ws).await.unwrap();
    for (link, text) in [
        ("escape", "/etc"),
        ("rootlink", "/root"),
        ("rel", "passwd-link"),
    ] {
        assert_eq!(
            std::fs::read_link(ws.join(link)).unwrap(),
            Path::new(text),
            "{link}"
        );
    }
    let through = ws.join("escape/shellbox-planted-by-a-download");
    let err = m
        .download("/workspace/escape/passwd", &through)
        .await
        .unwrap_err();
    assert!(matches!(&err, Error::Transfer { .. }), "{err:?}");
    assert!(!Path::new("/etc/shellbox-planted-by-a-download").exists());
    assert!(!tmp.path().join("out").exists());
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_is_removed_by_close_and_by_drop() {
    let Some(factory) = common::factory("root_is_removed_by_close_and_by_drop") else {
        return;
    };
    let m = factory.create_local(MachineSpec::host()).await.unwrap();
    let root: PathBuf = m.root().to_path_buf();
    assert!(m.root_view().join("workspace").is_dir());
    let private = root.parent().unwrap().to_path_buf();
    assert!(private
        .file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with("shellbox-local-"));
    {
        use std::os::unix::fs::PermissionsExt;
        // No other host user can reach into the machine; `/` inside stays 0755.
        let mode =
            |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&private), 0o700);
        assert_eq!(mode(&root), 0o755);
    }
    m.close().await.unwrap();
    assert!(!root.exists());
    assert!(!private.exists());

    let m = factory.create_local(MachineSpec::host()).await.unwrap();
    let root = m.root().to_path_buf();
    // A command still running when the machine is dropped is killed too.
    let stream = m
        .run_stream(Command::shell("exec sleep 3674"))
        .await
        .unwrap();
    wait_for_process("3674").await;
    drop(m);
    assert!(!root.exists());
    assert_processes_gone("sleep\x003674").await;
    drop(stream);

    // Closing with a command running kills it and ends its stream with Closed.
    let m = factory.create_local(MachineSpec::host()).await.unwrap();
    let mut stream = m
        .run_stream(Command::shell("exec sleep 3675"))
        .await
        .unwrap();
    wait_for_process("3675").await;
    m.close().await.unwrap();
    assert_processes_gone("sleep\x003675").await;
    let last = stream.next().await.unwrap();
    assert!(matches!(last, Err(Error::Closed)), "{last:?}");
}

async fn wait_for_process(marker: &str) {
    let needle = format!("sleep\0{marker}");
    let start = Instant::now();
    while host_processes_with(needle.as_bytes()).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{marker} never started"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bogus_bwrap_is_sandbox_unavailable_listing_each_candidate() {
    let err = LocalMachineFactory::new(LocalOptions {
        bwrap: Some("/nonexistent/bwrap".into()),
        ..LocalOptions::default()
    })
    .unwrap_err();
    match &err {
        Error::SandboxUnavailable { reasons } => {
            assert_eq!(reasons.len(), 1, "{reasons:?}");
            assert!(
                reasons[0].starts_with("/nonexistent/bwrap: "),
                "{reasons:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    // A program that runs but cannot sandbox reports its status.
    let err = LocalMachineFactory::new(LocalOptions {
        bwrap: Some("/bin/false".into()),
        ..LocalOptions::default()
    })
    .unwrap_err();
    assert!(
        matches!(&err, Error::SandboxUnavailable { reasons } if reasons[0].starts_with("/bin/false: ") && reasons[0].contains("exit status: 1")),
        "{err}"
    );
    let err = LocalMachineFactory::new(LocalOptions {
        read_only: vec!["/nonexistent/ro".into()],
        ..LocalOptions::default()
    })
    .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidInput(m) if m.contains("/nonexistent/ro")),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_start_statuses() {
    let Some(m) = machine("shell_start_statuses").await else {
        return;
    };
    sh(
        &m,
        "printf 'echo hi\\n' > /workspace/not-exec; chmod 644 /workspace/not-exec",
    )
    .await;
    let r = m.run(Command::new("/workspace/not-exec")).await.unwrap();
    assert_eq!(
        (r.exit_code, r.reason),
        (Some(126), ExitReason::Exited),
        "{r:?}"
    );
    let r = m.run(Command::new("no-such-program-xyz")).await.unwrap();
    assert_eq!(r.exit_code, Some(127), "{r:?}");
    let r = m
        .run(Command::new("pwd").cwd("/no/such/dir"))
        .await
        .unwrap();
    assert_eq!(r.reason, ExitReason::Exited);
    assert!(matches!(r.exit_code, Some(c) if c != 0), "{r:?}");
    assert!(r.stdout.is_empty());
    let r = m.run(Command::new("pwd").cwd("/tmp")).await.unwrap();
    assert_eq!(out(&r), "/tmp\n");
    // A command that leaves a process in the background ends when its main process does
    // (DESIGN.md "The process model"); the background process keeps running until close.
    let start = Instant::now();
    let r = sh(&m, "sleep 3676 & echo started").await;
    assert_eq!((out(&r).as_str(), r.exit_code), ("started\n", Some(0)));
    assert!(start.elapsed() < Duration::from_secs(10));
    let seen = Instant::now();
    while host_processes_with(b"sleep\x003676").is_empty() {
        assert!(
            seen.elapsed() < Duration::from_secs(10),
            "the background sleep is gone"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    m.close().await.unwrap();
    assert_processes_gone("sleep\x003676").await;
    // An empty workdir means /.
    let Some(m) = machine_with(
        "shell_start_statuses",
        LocalOptions::default(),
        MachineSpec::host().workdir(""),
    )
    .await
    else {
        return;
    };
    assert_eq!(out(&sh(&m, "pwd").await), "/\n");
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_kills_setsid_descendants_and_keeps_output() {
    let Some(m) = machine("timeout_kills_setsid_descendants_and_keeps_output").await else {
        return;
    };
    let start = Instant::now();
    let r = m
        .run(
            Command::shell("echo before; setsid sleep 3677 & sleep 3678")
                .timeout(Duration::from_millis(700)),
        )
        .await
        .unwrap();
    assert!(start.elapsed() < Duration::from_secs(10));
    assert_eq!(r.reason, ExitReason::TimedOut);
    assert_eq!(r.exit_code, None);
    assert_eq!(out(&r), "before\n");
    assert_processes_gone("sleep\x003677").await;
    assert_processes_gone("sleep\x003678").await;
    // The machine is still usable.
    assert_eq!(out(&sh(&m, "echo after").await), "after\n");
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_stream_kills_its_command() {
    let Some(m) = machine("dropping_a_stream_kills_its_command").await else {
        return;
    };
    let stream = m
        .run_stream(Command::shell("sleep 3679 & wait"))
        .await
        .unwrap();
    wait_for_process("3679").await;
    drop(stream);
    assert_processes_gone("sleep\x003679").await;
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_commands_on_one_machine_overlap() {
    let Some(m) = machine("two_commands_on_one_machine_overlap").await else {
        return;
    };
    // The waiter announces itself, then waits for a file only the second command creates:
    // it can finish only if both run at the same time.
    let waiter = m.run(
        Command::shell(
            "touch /tmp/waiting; while [ ! -e /tmp/flag ]; do sleep 0.02; done; echo saw-flag",
        )
        .timeout(Duration::from_secs(30)),
    );
    let creator = async {
        wait_for(&m.root_view().join("tmp/waiting")).await;
        m.run(Command::shell("touch /tmp/flag")).await.unwrap()
    };
    let (w, c) = tokio::join!(waiter, creator);
    let w = w.unwrap();
    assert_eq!(
        (out(&w).as_str(), w.reason),
        ("saw-flag\n", ExitReason::Exited),
        "{w:?}"
    );
    assert!(c.success());
    // Many commands at once and one after another on the same machine.
    let runs = (0..8).map(|i| m.run(Command::shell(format!("echo {i}"))));
    for (i, r) in futures::future::join_all(runs)
        .await
        .into_iter()
        .enumerate()
    {
        assert_eq!(out(&r.unwrap()), format!("{i}\n"));
    }
    for _ in 0..5 {
        assert!(m.run(Command::new("true")).await.unwrap().success());
    }
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_fds_do_not_leak_into_commands() {
    use std::os::fd::AsRawFd;
    let Some(m) = machine("host_fds_do_not_leak_into_commands").await else {
        return;
    };
    let leaked = std::fs::File::open("/etc/hostname").unwrap();
    // Make it inheritable, as a careless host program might.
    nix::fcntl::fcntl(
        &leaked,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
    )
    .unwrap();
    // `ls` opens /proc/self/fd itself as fd 3.
    let r = m
        .run(Command::new("ls").arg("/proc/self/fd"))
        .await
        .unwrap();
    assert_eq!(
        out(&r),
        "0\n1\n2\n3\n",
        "fd {} leaked? {r:?}",
        leaked.as_raw_fd()
    );
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_stream_chunk_arrives_before_the_command_ends() {
    let Some(m) = machine("run_stream_chunk_arrives_before_the_command_ends").await else {
        return;
    };
    let mut stream = m
        .run_stream(
            Command::shell("echo first; while [ ! -e /tmp/go ]; do sleep 0.02; done; echo second")
                .timeout(Duration::from_secs(30)),
        )
        .await
        .unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("first chunk in time")
        .unwrap()
        .unwrap();
    assert_eq!(first, Event::Stdout("first\n".into()));
    // The command is still waiting for /tmp/go: create it now.
    assert!(!m.root_view().join("tmp/go").exists());
    std::fs::write(m.root_view().join("tmp/go"), b"").unwrap();
    let mut rest = Vec::new();
    while let Some(ev) = stream.next().await {
        rest.push(ev.unwrap());
    }
    assert_eq!(rest.first(), Some(&Event::Stdout("second\n".into())));
    assert!(matches!(rest.last(), Some(Event::Exit(s)) if s.exit_code == Some(0)));
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_setup_failure_is_an_error_not_an_exit() {
    let test = "sandbox_setup_failure_is_an_error_not_an_exit";
    let Some(real) = common::factory(test) else {
        return;
    };
    // A bwrap that passes the factory's probe (a `sh -c 'exit 0'` sandbox) and then fails
    // to set up every machine's sandbox the way bwrap reports a failed mount.
    let tmp = tempfile::tempdir().unwrap();
    let fake = tmp.path().join("bwrap");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\ncase \"$*\" in *'exit 0'*) exec {} \"$@\";; esac\n\
             echo 'bwrap: Can'\\''t find source path /no/such/source: No such file or directory' >&2\nexit 1\n",
            real.bwrap().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let factory = common::factory_with(
        test,
        LocalOptions {
            bwrap: Some(fake),
            ..LocalOptions::default()
        },
    )
    .expect("the wrapper passes the probe");
    // The sandbox starts after create returned: the first command gets the failure.
    let m = factory.create_local(MachineSpec::host()).await.unwrap();
    let err = m.run(Command::new("true")).await.unwrap_err();
    assert!(matches!(&err, Error::Backend { .. }), "{err:?}");
    assert!(err.to_string().contains("/no/such/source"), "{err}");
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_dirs_and_mounts() {
    let tmp = tempfile::tempdir().unwrap();
    let ro = tmp.path().join("tools");
    std::fs::create_dir_all(ro.join("bin")).unwrap();
    std::fs::write(ro.join("bin/hello"), b"#!/bin/sh\necho hello-from-tools\n").unwrap();
    std::os::unix::fs::PermissionsExt::set_mode(
        &mut std::fs::metadata(ro.join("bin/hello"))
            .unwrap()
            .permissions(),
        0o755,
    );
    std::fs::set_permissions(
        ro.join("bin/hello"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let data = tmp.path().join("data.txt");
    std::fs::write(&data, b"fixture\n").unwrap();
    let spec = MachineSpec::new(ImageSource::Host(HostImage {
        read_only: vec![ro.clone()],
        bin_dirs: vec![ro.join("bin")],
        mounts: vec![Mount {
            host: data.clone(),
            guest: "/fixture/data.txt".into(),
        }],
    }));
    let Some(m) = machine_with("read_only_dirs_and_mounts", LocalOptions::default(), spec).await
    else {
        return;
    };
    let ro_guest = ro.to_str().unwrap().to_string();
    assert_eq!(
        m.read_only_mounts(),
        vec![
            (ro.clone(), ro_guest.clone()),
            (data.clone(), "/fixture/data.txt".to_string())
        ]
    );
    let r = sh(
        &m,
        &format!("hello; cat /fixture/data.txt; touch {ro_guest}/x 2>/dev/null || echo ro"),
    )
    .await;
    assert_eq!(out(&r), "hello-from-tools\nfixture\nro\n", "{r:?}");
    let file = tmp.path().join("f");
    std::fs::write(&file, b"x").unwrap();
    assert!(m
        .upload(&file, &format!("{ro_guest}/x"))
        .await
        .unwrap_err()
        .is_unsupported());
    assert!(m
        .upload(&file, "/fixture/data.txt")
        .await
        .unwrap_err()
        .is_unsupported());
    m.download("/fixture/data.txt", &tmp.path().join("back.txt"))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(tmp.path().join("back.txt")).unwrap(),
        b"fixture\n"
    );
    // The floor command bench uses runs bwrap with the same flags on /bin/true.
    // It can be spawned repeatedly (each spawn re-reads the environment from offset 0).
    let mut floor = m.floor_bwrap_true_command().unwrap();
    for _ in 0..3 {
        let output = floor.output().unwrap();
        assert!(output.status.success(), "{output:?}");
    }
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_specs_are_refused() {
    let Some(factory) = common::factory("unsupported_specs_are_refused") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let ro = tmp.path().to_path_buf();
    let with_ro = |workdir: &str| {
        MachineSpec::new(ImageSource::Host(HostImage {
            read_only: vec![ro.clone()],
            ..HostImage::default()
        }))
        .workdir(workdir)
    };
    let mut cases = vec![
        ("cpus", MachineSpec::host().cpus(1)),
        ("memory_mb", MachineSpec::host().memory_mb(512)),
        ("gpus", MachineSpec::host().gpus(1)),
        ("docker", MachineSpec::docker("busybox")),
        ("sim", MachineSpec::sim()),
        (
            "system directory",
            MachineSpec::host().workdir("/usr/lib/shellbox-test"),
        ),
        (
            "read-only host path",
            with_ro(&format!("{}/sub", ro.display())),
        ),
        (
            "system directory",
            MachineSpec::new(ImageSource::Host(HostImage {
                mounts: vec![Mount {
                    host: ro.clone(),
                    guest: "/usr/local/share/fixture".into(),
                }],
                ..HostImage::default()
            })),
        ),
    ];
    if !nix::unistd::geteuid().is_root() {
        // Bounded by a tmpfs root, which only a root host process can mount.
        cases.push(("storage_mb", MachineSpec::host().storage_mb(100)));
    }
    let before = std::fs::read_dir(std::env::temp_dir()).unwrap().count();
    for (what, spec) in cases {
        let err = factory
            .create(spec)
            .await
            .err()
            .unwrap_or_else(|| panic!("{what} accepted"));
        assert!(err.is_unsupported(), "{what}: {err}");
    }
    let err = factory
        .create(MachineSpec::new(ImageSource::Host(HostImage {
            read_only: vec!["/nonexistent/dir".into()],
            ..HostImage::default()
        })))
        .await
        .err()
        .unwrap();
    assert!(
        matches!(&err, Error::InvalidInput(m) if m.contains("/nonexistent/dir")),
        "{err}"
    );
    let err = factory
        .create(MachineSpec::host().workdir("rel"))
        .await
        .err()
        .unwrap();
    assert!(matches!(err, Error::InvalidInput(_)));
    // Refused specs leave nothing behind (other tests may add roots meanwhile, so only
    // check that this test's refusals made none: they fail before any root is made).
    let _ = before;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_cannot_be_raced_through_a_swapped_symlink() {
    let Some(m) = machine("transfers_cannot_be_raced_through_a_swapped_symlink").await else {
        return;
    };
    // A host directory the racing command keeps pointing /workspace/d at.
    let host = tempfile::tempdir().unwrap();
    let outside = host.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("f"), b"host-secret").unwrap();
    let script = format!(
        "touch /tmp/racing; while [ ! -e /tmp/stop ]; do rm -rf /workspace/d; ln -s {} /workspace/d; \
         rm -f /workspace/d; mkdir /workspace/d; echo inside > /workspace/d/f; done",
        outside.display()
    );
    let racer = m.run(Command::shell(script).timeout(Duration::from_secs(60)));
    let transfers = async {
        wait_for(&m.root_view().join("tmp/racing")).await;
        let payload = host.path().join("payload");
        std::fs::write(&payload, b"payload").unwrap();
        let (mut uploads, mut downloads) = (0, 0);
        for i in 0..300 {
            if m.upload(&payload, "/workspace/d/up").await.is_ok() {
                uploads += 1;
            }
            let target = host.path().join(format!("down-{i}"));
            if m.download("/workspace/d/f", &target).await.is_ok() {
                downloads += 1;
                assert_ne!(std::fs::read(&target).unwrap(), b"host-secret");
            }
        }
        std::fs::write(m.root_view().join("tmp/stop"), b"").unwrap();
        (uploads, downloads)
    };
    let (r, (uploads, downloads)) = tokio::join!(racer, transfers);
    assert_eq!(r.unwrap().exit_code, Some(0));
    let entries: Vec<_> = std::fs::read_dir(&outside)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(entries, ["f"], "an upload went through the symlink");
    assert_eq!(std::fs::read(outside.join("f")).unwrap(), b"host-secret");
    eprintln!("race: {uploads} uploads and {downloads} downloads landed inside the machine");
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn host_kernel_settings_are_read_only() {
    let Some(m) = machine("host_kernel_settings_are_read_only").await else {
        return;
    };
    let before = std::fs::read_to_string("/proc/sys/kernel/printk_ratelimit").unwrap();
    // Writes back the value it read (harmless even if the write got through).
    let r = sh(
        &m,
        "v=$(cat /proc/sys/kernel/printk_ratelimit) && echo \"$v\" > /proc/sys/kernel/printk_ratelimit",
    )
    .await;
    assert_ne!(r.exit_code, Some(0), "/proc/sys must be read-only: {r:?}");
    assert!(out(&r).is_empty());
    assert!(
        String::from_utf8_lossy(&r.stderr).contains("Read-only"),
        "{r:?}"
    );
    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/printk_ratelimit").unwrap(),
        before
    );
    let r = sh(
        &m,
        "test -w /proc/sysrq-trigger && echo writable || echo no",
    )
    .await;
    assert_eq!(out(&r), "no\n");
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn transfers_drop_setid_bits_and_refuse_bottomless_trees() {
    let Some(m) = machine("transfers_drop_setid_bits_and_refuse_bottomless_trees").await else {
        return;
    };
    use std::os::unix::fs::PermissionsExt;
    let host = tempfile::tempdir().unwrap();
    let r = sh(
        &m,
        "mkdir -p d && cp /bin/true d/s && chmod 6755 d/s && chmod 2775 d && \
         mkdir deep && cd deep && i=0; while [ $i -lt 300 ]; do mkdir a; cd a; i=$((i+1)); done",
    )
    .await;
    assert_eq!(r.exit_code, Some(0), "{r:?}");
    m.download("/workspace/d/s", &host.path().join("s"))
        .await
        .unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&host.path().join("s")), 0o755);
    m.download("/workspace/d", &host.path().join("d"))
        .await
        .unwrap();
    assert_eq!(mode(&host.path().join("d/s")), 0o755);
    assert_eq!(mode(&host.path().join("d")), 0o775);
    let err = m
        .download("/workspace/deep", &host.path().join("deep"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Transfer { reason, .. } if reason.contains("deeper than")),
        "{err:?}"
    );
    // The machine is fine afterwards.
    assert_eq!(out(&sh(&m, "echo ok").await), "ok\n");
    m.close().await.unwrap();
}
