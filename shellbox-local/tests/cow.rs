//! Copy-on-write system directories (issue 12) against real bwrap sandboxes: each machine
//! writes `/usr`, `/etc` and `/opt` in layers of its own, the host and other machines never
//! see it, transfers go through the layers, and nothing is left on the host after close,
//! drop or (through `gc`) a killed owner.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use shellbox_core::{Command, CommandResult, Machine, MachineSpec};
use shellbox_local::{LocalMachine, LocalMachineFactory, LocalOptions, SystemDirectories};

fn cow_options() -> LocalOptions {
    LocalOptions {
        system_directories: SystemDirectories::CopyOnWrite,
        ..LocalOptions::default()
    }
}

/// A copy-on-write factory, or `None` (with the SKIP line) where this host cannot give one:
/// not root (overlayfs in each machine's mount namespace needs `CAP_SYS_ADMIN`), or no
/// sandbox at all.
fn cow_factory(test: &str) -> Option<LocalMachineFactory> {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIP {test}: copy-on-write machines need a root host process");
        return None;
    }
    common::factory_with(test, cow_options())
}

async fn run(m: &dyn Machine, script: &str) -> CommandResult {
    m.run(Command::shell(script).timeout(Duration::from_secs(60)))
        .await
        .unwrap_or_else(|e| panic!("{script}: {e}"))
}

async fn sh(m: &dyn Machine, script: &str) -> String {
    let r = run(m, script).await;
    assert_eq!(r.exit_code, Some(0), "{script}: {r:?}");
    String::from_utf8_lossy(&r.stdout).into_owned()
}

/// A name no other test run uses, for files written in system directories.
fn unique(tag: &str) -> String {
    format!("shellbox-cow-{tag}-{}", std::process::id())
}

/// Mount points of this process's mount namespace whose path or source mentions `needle`.
fn host_mounts_mentioning(needle: &Path) -> Vec<String> {
    let needle = needle.to_string_lossy().into_owned();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.contains(&needle))
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_machines_write_the_same_paths_and_see_only_their_own() {
    let Some(factory) = cow_factory("two_machines_write_the_same_paths_and_see_only_their_own")
    else {
        return;
    };
    let name = unique("same");
    let a = factory.create_local(MachineSpec::host()).await.unwrap();
    let b = factory.create_local(MachineSpec::host()).await.unwrap();
    for (m, who) in [(&a, "a"), (&b, "b")] {
        sh(
            m,
            &format!(
                "printf '#!/bin/sh\\necho tool {who}\\n' > /usr/local/bin/{name} && \
                 chmod 755 /usr/local/bin/{name} && echo {who} > /etc/{name} && \
                 echo {who} > /opt/{name}"
            ),
        )
        .await;
    }
    for (m, who) in [(&a, "a"), (&b, "b")] {
        let out = sh(m, &format!("{name}; cat /etc/{name} /opt/{name}")).await;
        assert_eq!(out, format!("tool {who}\n{who}\n{who}\n"));
    }
    // The host never saw any of it.
    for dir in ["/usr/local/bin", "/etc", "/opt"] {
        assert!(
            !Path::new(dir).join(&name).exists(),
            "{dir}/{name} on the host"
        );
    }
    // A third machine starts from the host's directories again.
    let c = factory.create_local(MachineSpec::host()).await.unwrap();
    let r = run(&c, &format!("ls /usr/local/bin/{name} /etc/{name}")).await;
    assert_ne!(r.exit_code, Some(0), "{r:?}");
    for m in [a, b, c] {
        m.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn package_manager_like_writes_stay_in_the_machine() {
    let Some(factory) = cow_factory("package_manager_like_writes_stay_in_the_machine") else {
        return;
    };
    let name = unique("pkg");
    let m = factory.create_local(MachineSpec::host()).await.unwrap();
    // The layers show the host's directories with their owners and modes.
    let host_mode = |p: &str| {
        use std::os::unix::fs::MetadataExt;
        format!("{:o}", std::fs::metadata(p).unwrap().mode() & 0o7777)
    };
    let modes = sh(&m, "stat -c %a /usr /etc").await;
    assert_eq!(modes, format!("{}\n755\n", host_mode("/usr")));
    // What dpkg does: new files under /usr/lib, a changed file, a removed file, a
    // renamed directory, alternatives and a changed /etc file.
    let script = format!(
        "set -e; mkdir -p /usr/lib/{name}/sub && echo lib > /usr/lib/{name}/sub/f.so && \
         mv /usr/lib/{name}/sub /usr/lib/{name}/moved && cat /usr/lib/{name}/moved/f.so && \
         cp /usr/bin/env /usr/bin/{name} && /usr/bin/{name} true && \
         rm /usr/bin/{name} && echo 'x:x:4242:4242::/:/bin/sh' >> /etc/passwd && \
         grep -c ^x: /etc/passwd && ln -sf /usr/bin/true /etc/alternatives/{name} && \
         /etc/alternatives/{name} && echo ok"
    );
    assert_eq!(sh(&m, &script).await, "lib\n1\nok\n");
    // /etc/ssl/certs and /etc/alternatives show the host's entries.
    for dir in ["/etc/ssl/certs", "/etc/alternatives"] {
        if Path::new(dir).is_dir() {
            let host = std::fs::read_dir(dir).unwrap().count();
            let inside = sh(&m, &format!("ls -A {dir} | grep -v {name} | wc -l")).await;
            assert_eq!(inside.trim(), host.to_string(), "{dir}");
        }
    }
    // Nothing of it on the host.
    assert!(!Path::new(&format!("/usr/lib/{name}")).exists());
    assert!(!Path::new(&format!("/etc/alternatives/{name}")).exists());
    assert!(!std::fs::read_to_string("/etc/passwd")
        .unwrap()
        .contains("x:x:4242"));
    // A command cannot write the host's files through the layer's lower directory.
    let r = run(&m, "mount -t tmpfs x /mnt 2>&1; echo $?").await;
    assert_ne!(String::from_utf8_lossy(&r.stdout).trim(), "0");
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_go_through_the_layers() {
    let Some(factory) = cow_factory("transfers_go_through_the_layers") else {
        return;
    };
    let name = unique("xfer");
    let m = factory.create_local(MachineSpec::host()).await.unwrap();
    let host = tempfile::tempdir().unwrap();
    let tool = host.path().join("tool");
    std::fs::write(&tool, "#!/bin/sh\necho uploaded tool\n").unwrap();
    std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    // Upload before any command ran, into a directory of the lower layer.
    m.upload(&tool, &format!("/usr/local/bin/{name}"))
        .await
        .unwrap();
    m.upload(&tool, &format!("/etc/{name}/deep/tool"))
        .await
        .unwrap();
    assert_eq!(sh(&m, &name).await, "uploaded tool\n");
    assert!(!Path::new(&format!("/usr/local/bin/{name}")).exists());
    assert!(!Path::new(&format!("/etc/{name}")).exists());
    // Download what a command wrote in the layers, and host files as the machine shows
    // them.
    sh(
        &m,
        &format!("echo from the machine > /etc/{name}.conf && echo changed > /usr/share/{name}"),
    )
    .await;
    let got = host.path().join("got");
    m.download(&format!("/etc/{name}.conf"), &got)
        .await
        .unwrap();
    assert_eq!(std::fs::read_to_string(&got).unwrap(), "from the machine\n");
    m.download("/etc/passwd", &host.path().join("passwd"))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(host.path().join("passwd")).unwrap(),
        std::fs::read("/etc/passwd").unwrap()
    );
    let dir = host.path().join("dir");
    m.download(&format!("/etc/{name}"), &dir).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.join("deep/tool")).unwrap(),
        "#!/bin/sh\necho uploaded tool\n"
    );
    let changed = host.path().join("changed");
    m.download(&format!("/usr/share/{name}"), &changed)
        .await
        .unwrap();
    assert_eq!(std::fs::read_to_string(&changed).unwrap(), "changed\n");
    // A whole directory upload that reaches layers' tops (usr/ and etc/ in an upload to /)
    // lands in the layers, beside what goes to the private root (opt/); the host is
    // untouched.
    let tree = host.path().join("tree");
    for dir in ["usr/local/bin", "etc", "opt"] {
        std::fs::create_dir_all(tree.join(dir)).unwrap();
    }
    std::fs::write(tree.join("usr/local/bin").join(&name), "u").unwrap();
    std::fs::write(tree.join("etc").join(format!("{name}.up")), "e").unwrap();
    std::fs::write(tree.join("opt").join(&name), "o").unwrap();
    m.upload(&tree, "/").await.unwrap();
    assert_eq!(
        sh(
            &m,
            &format!("cat /usr/local/bin/{name} /etc/{name}.up /opt/{name}; ls /usr/bin/env")
        )
        .await,
        "ueo/usr/bin/env\n",
        "the upload merged into the layers and kept what was there"
    );
    assert!(!Path::new("/usr/local/bin").join(&name).exists());
    assert!(!Path::new("/etc").join(format!("{name}.up")).exists());
    // All or nothing across the parts: a conflict in one layer writes none of them.
    let bad = host.path().join("bad");
    std::fs::create_dir_all(bad.join("opt")).unwrap();
    std::fs::create_dir_all(bad.join("usr/local/bin").join(&name)).unwrap();
    std::fs::write(bad.join("opt").join(format!("{name}-2")), "o").unwrap();
    let e = m.upload(&bad, "/").await.unwrap_err();
    assert!(
        matches!(e, shellbox_core::Error::Transfer { .. }),
        "a directory in the way of a file: {e}"
    );
    assert!(
        run(&m, &format!("test -e /opt/{name}-2")).await.exit_code != Some(0),
        "partial upload"
    );
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_left_on_the_host_after_close_or_drop() {
    let Some(factory) = cow_factory("nothing_is_left_on_the_host_after_close_or_drop") else {
        return;
    };
    for close in [true, false] {
        for storage in [None, Some(32)] {
            let spec = match storage {
                Some(mb) => MachineSpec::host().storage_mb(mb),
                None => MachineSpec::host(),
            };
            let m = factory.create_local(spec).await.unwrap();
            let private: PathBuf = m.root().parent().unwrap().to_path_buf();
            sh(&m, "echo x > /usr/local/bin/left && echo y > /etc/left").await;
            assert!(private.join("layers").is_dir());
            if close {
                m.close().await.unwrap();
            } else {
                drop(m);
            }
            assert!(!private.exists(), "{} left", private.display());
            let mounts = host_mounts_mentioning(&private);
            assert!(mounts.is_empty(), "mounts left: {mounts:?}");
        }
    }
}

/// `stat -f` of each path: total and free blocks and the block size.
async fn fs_blocks(m: &dyn Machine, paths: &str) -> Vec<(u64, u64, u64)> {
    sh(m, &format!("stat -f -c '%b %f %S' {paths}"))
        .await
        .lines()
        .map(|l| {
            let v: Vec<u64> = l.split(' ').map(|n| n.parse().unwrap()).collect();
            (v[0], v[1], v[2])
        })
        .collect()
}

/// `storage_mb` is one bound over everything a copy-on-write machine writes (issue 12's
/// break-it pass: a 16 MiB machine took 16 MiB in its root and 16 MiB more in `/usr`, each
/// in a `tmpfs` of its own): its root and its layers are one file system, so what fills one
/// leaves no room in the other, either way round, and freeing one makes room again; an
/// upload into a layer counts too. Without `storage_mb` the layers are bounded to
/// `DEFAULT_LAYERS_MB` (the kernel's default was half the host's memory).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_mb_bounds_the_root_and_the_layers_together() {
    let Some(factory) = cow_factory("storage_mb_bounds_the_root_and_the_layers_together") else {
        return;
    };
    const MIB10: &str = "head -c 10485760 /dev/zero";
    for (first, second) in [
        ("/tmp/a", "/usr/local/bin/b"),
        ("/usr/lib/a", "/home/shellbox/b"),
        ("/etc/a", "/usr/b"),
    ] {
        let m = factory
            .create_local(MachineSpec::host().storage_mb(16))
            .await
            .unwrap();
        // The root (bound from the machine's file system on the layers directory) keeps
        // its nosuid and nodev on the host.
        let root = m.root().to_string_lossy().into_owned();
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let options = info
            .lines()
            .map(|l| l.split(' ').collect::<Vec<_>>())
            .find(|f| f.get(4) == Some(&root.as_str()))
            .map(|f| f[5].to_string())
            .expect("the root is mounted");
        assert!(
            options.contains("nosuid") && options.contains("nodev"),
            "{options}"
        );
        // The root and every layer show the same file system of 16 MiB.
        let stats = fs_blocks(&m, "/ /tmp /usr /usr/local/bin /etc").await;
        assert!(
            stats.iter().all(|s| s.0 * s.2 == 16 << 20),
            "sizes: {stats:?}"
        );
        sh(&m, &format!("{MIB10} > {first}")).await;
        let stats = fs_blocks(&m, "/ /usr /etc").await;
        assert!(stats.windows(2).all(|w| w[0] == w[1]), "{stats:?}");
        let r = run(&m, &format!("{MIB10} > {second}")).await;
        assert_ne!(r.exit_code, Some(0), "{first} then {second}: {r:?}");
        assert!(
            String::from_utf8_lossy(&r.stderr).contains("No space left on device"),
            "{r:?}"
        );
        // Freeing the first makes room for the second.
        sh(&m, &format!("rm -f {first} {second} && {MIB10} > {second}")).await;
        m.close().await.unwrap();
    }
    // An upload into a layer is bounded by the same file system.
    let m = factory
        .create_local(MachineSpec::host().storage_mb(16))
        .await
        .unwrap();
    sh(&m, &format!("{MIB10} > /tmp/a")).await;
    let host = tempfile::tempdir().unwrap();
    let big = host.path().join("big");
    std::fs::write(&big, vec![0u8; 10 << 20]).unwrap();
    assert!(
        m.upload(&big, "/usr/local/bin/big").await.is_err(),
        "a 10 MiB upload into /usr fit beside 10 MiB in /tmp of a 16 MiB machine"
    );
    sh(&m, "rm /tmp/a").await;
    m.upload(&big, "/usr/local/bin/big").await.unwrap();
    m.close().await.unwrap();
    // Without storage_mb the layers have a bound of their own; the root is on the temp dir.
    let m = factory.create_local(MachineSpec::host()).await.unwrap();
    let default_mb = shellbox_local::DEFAULT_LAYERS_MB.min(shellbox_local::largest_storage_mb());
    let stats = fs_blocks(&m, "/usr /usr/local/bin /etc").await;
    assert!(
        stats.iter().all(|s| s.0 * s.2 == default_mb << 20),
        "layers of {default_mb} MiB expected: {stats:?}"
    );
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workdir_inside_a_layer_is_made_there() {
    let Some(factory) = cow_factory("a_workdir_inside_a_layer_is_made_there") else {
        return;
    };
    let dir = format!("/usr/local/src/{}", unique("wd"));
    let m = factory
        .create_local(MachineSpec::host().workdir(&dir))
        .await
        .unwrap();
    assert_eq!(
        sh(&m, "pwd && echo f > f && cat f").await,
        format!("{dir}\nf\n")
    );
    assert!(!Path::new(&dir).exists());
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_machine_still_refuses_writes() {
    let Some(factory) = common::factory("a_read_only_machine_still_refuses_writes") else {
        return;
    };
    let name = unique("ro");
    let m: LocalMachine = factory.create_local(MachineSpec::host()).await.unwrap();
    for path in ["/usr/local/bin", "/etc", "/usr/lib"] {
        let r = run(&m, &format!("echo x > {path}/{name}")).await;
        assert_ne!(r.exit_code, Some(0), "{path}: {r:?}");
    }
    let host = tempfile::tempdir().unwrap();
    let f = host.path().join("f");
    std::fs::write(&f, "x").unwrap();
    for target in ["/usr/local/bin/x", "/etc/x"] {
        let e = m.upload(&f, target).await.unwrap_err();
        assert!(e.is_unsupported(), "{target}: {e}");
    }
    m.close().await.unwrap();
}

/// Not a test of its own: the owner process of `gc_removes_a_killed_owners_layers`, which
/// runs this test binary again with `SHELLBOX_LOCAL_COW_GC_CHILD=1` (and `TMPDIR` set to a
/// private directory): it makes two copy-on-write machines (one with `storage_mb`, whose
/// root is a tmpfs mounted on the host), writes into their layers, prints
/// `ROOTS <root> <root>` and waits to be killed. Without the variable it returns at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cow_gc_owner_child() {
    if std::env::var_os("SHELLBOX_LOCAL_COW_GC_CHILD").is_none() {
        return;
    }
    let factory = LocalMachineFactory::new(cow_options()).unwrap();
    let mut roots = Vec::new();
    let mut machines = Vec::new();
    for spec in [MachineSpec::host(), MachineSpec::host().storage_mb(16)] {
        let m = factory.create_local(spec).await.unwrap();
        sh(
            &m,
            "echo kept > /usr/local/bin/kept && echo kept > /etc/kept",
        )
        .await;
        roots.push(m.root().display().to_string());
        machines.push(m);
    }
    println!("ROOTS {}", roots.join(" "));
    tokio::time::sleep(Duration::from_secs(600)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_removes_a_killed_owners_layers() {
    use std::io::BufRead;
    if cow_factory("gc_removes_a_killed_owners_layers").is_none() {
        return;
    }
    let base = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "cow_gc_owner_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("SHELLBOX_LOCAL_COW_GC_CHILD", "1")
        .env("TMPDIR", base.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut roots: Vec<PathBuf> = Vec::new();
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if let Some((_, rest)) = line.split_once("ROOTS ") {
            roots = rest.split(' ').map(PathBuf::from).collect();
            break;
        }
    }
    assert_eq!(roots.len(), 2, "the owner printed no ROOTS line");
    // SIGKILL: the owner gets no chance to clean up.
    child.kill().unwrap();
    child.wait().unwrap();
    let privates: Vec<PathBuf> = roots
        .iter()
        .map(|r| r.parent().unwrap().to_path_buf())
        .collect();
    // Without storage_mb the layers were a tmpfs in the machine's own mount namespace,
    // gone with the owner: the host never had a mount of them, only the directory is left.
    // With storage_mb they share the machine's size-limited file system, mounted on the
    // host like any such machine's root, until gc unmounts it.
    for p in &privates {
        assert!(p.join("layers").is_dir(), "{}", p.display());
    }
    let layers = host_mounts_mentioning(&privates[0].join("layers"));
    assert!(layers.is_empty(), "layers mounted on the host: {layers:?}");
    assert!(!host_mounts_mentioning(&privates[1].join("layers")).is_empty());
    assert!(!host_mounts_mentioning(&privates[1].join("root")).is_empty());
    let report = tokio::task::spawn_blocking({
        let dir = base.path().to_path_buf();
        move || shellbox_local::gc_in(&dir)
    })
    .await
    .unwrap()
    .unwrap();
    assert!(report.failed.is_empty(), "{report:?}");
    for p in &privates {
        assert!(report.removed.contains(p), "{report:?}");
        assert!(!p.exists(), "{} left", p.display());
    }
    let mounts = host_mounts_mentioning(base.path());
    assert!(mounts.is_empty(), "mounts left: {mounts:?}");
    assert_eq!(std::fs::read_dir(base.path()).unwrap().count(), 0);
}

/// The directory under `/usr` that [`cow_nested_child`] mounts a tmpfs on, in a mount
/// namespace of its own.
const NESTED_CANDIDATES: [&str; 3] = ["/usr/local/games", "/usr/local/include", "/usr/local/src"];

/// Not a test of its own: run by `host_mounts_nested_in_layers_stay_read_only` inside
/// `unshare -m --propagation private` with `SHELLBOX_LOCAL_COW_NESTED_CHILD=1`. It mounts a
/// tmpfs (holding `marker`) on a directory under `/usr` in that private mount namespace (the
/// host's never changes), makes a copy-on-write machine and prints `NESTED <line>` for each
/// finding.
#[test]
fn cow_nested_child() {
    if std::env::var_os("SHELLBOX_LOCAL_COW_NESTED_CHILD").is_none() {
        return;
    }
    let dir = NESTED_CANDIDATES
        .iter()
        .find(|d| Path::new(d).is_dir())
        .expect("a directory to mount on");
    let c = std::ffi::CString::new(*dir).unwrap();
    // SAFETY: mount(2) with NUL-terminated strings that outlive the call.
    let r = unsafe {
        libc::mount(
            c"shellbox-nested".as_ptr(),
            c.as_ptr(),
            c"tmpfs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    assert_eq!(r, 0, "mount: {}", std::io::Error::last_os_error());
    std::fs::write(Path::new(dir).join("marker"), "nested\n").unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let factory = LocalMachineFactory::new(cow_options()).unwrap();
        let m = factory.create_local(MachineSpec::host()).await.unwrap();
        let out = run(
            &m,
            &format!(
                "cat {dir}/marker; (echo x > {dir}/new) 2>/dev/null && echo wrote || echo refused; \
                 echo y > /usr/local/ok && cat /usr/local/ok"
            ),
        )
        .await;
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            println!("NESTED {line}");
        }
        let host = tempfile::tempdir().unwrap();
        let got = host.path().join("marker");
        m.download(&format!("{dir}/marker"), &got).await.unwrap();
        println!(
            "NESTED download {}",
            std::fs::read_to_string(&got).unwrap().trim()
        );
        let e = m.upload(&got, &format!("{dir}/up")).await.unwrap_err();
        println!("NESTED upload unsupported={}", e.is_unsupported());
        m.close().await.unwrap();
    });
}

#[test]
fn host_mounts_nested_in_layers_stay_read_only() {
    if cow_factory("host_mounts_nested_in_layers_stay_read_only").is_none() {
        return;
    }
    if !NESTED_CANDIDATES.iter().any(|d| Path::new(d).is_dir()) {
        eprintln!(
            "SKIP host_mounts_nested_in_layers_stay_read_only: none of {NESTED_CANDIDATES:?} exists"
        );
        return;
    }
    let output = match std::process::Command::new("unshare")
        .args(["-m", "--propagation", "private"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "cow_nested_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("SHELLBOX_LOCAL_COW_NESTED_CHILD", "1")
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            eprintln!("SKIP host_mounts_nested_in_layers_stay_read_only: unshare(1): {e}");
            return;
        }
    };
    let text = String::from_utf8_lossy(&output.stdout);
    let found: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_once("NESTED ").map(|(_, r)| r))
        .collect();
    assert_eq!(
        found,
        [
            "nested",
            "refused",
            "y",
            "download nested",
            "upload unsupported=true"
        ],
        "{text}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A copy-on-write guest that replaces the programs first on `PATH` (`cat`, `readlink`,
/// `sh` in `/usr/local/bin`, and `/usr/bin/cat` itself in its layer) with ones that sleep
/// cannot stall `download_file`: the local backend reads the file on the host from a
/// descriptor and runs no program of the machine (defect 2a of issue 12's review: the
/// download ran the guest's `cat` and hung).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn download_file_runs_no_guest_program() {
    let test = "download_file_runs_no_guest_program";
    let Some(factory) = cow_factory(test) else {
        return;
    };
    let m = factory.create_local(MachineSpec::host()).await.unwrap();
    sh(
        &m,
        "set -e; printf 'payload' > /tmp/f; \
         for p in cat readlink sh; do printf '#!/bin/sh\\nexec sleep 1000\\n' > /usr/local/bin/$p; \
         chmod +x /usr/local/bin/$p; done; \
         printf '#!/bin/sh\\nexec sleep 1000\\n' > /usr/bin/cat.new; chmod +x /usr/bin/cat.new; \
         /bin/mv /usr/bin/cat.new /usr/bin/cat",
    )
    .await;
    let host = tempfile::tempdir().unwrap();
    let target = host.path().join("out");
    // A guard against the hang, not a timing assertion: the download either finishes or
    // waits on the guest's sleep forever.
    tokio::time::timeout(
        Duration::from_secs(120),
        m.download_file("/tmp/f", &target, 1 << 20),
    )
    .await
    .expect("download_file hung on the guest's replaced programs")
    .expect("download_file");
    assert_eq!(std::fs::read(&target).unwrap(), b"payload");
    // The layer's replaced /usr/bin/cat downloads as the file it is.
    tokio::time::timeout(
        Duration::from_secs(120),
        m.download_file("/usr/bin/cat", &target, 1 << 20),
    )
    .await
    .expect("download_file hung")
    .expect("download_file of a layer file");
    assert_eq!(
        std::fs::read(&target).unwrap(),
        b"#!/bin/sh\nexec sleep 1000\n"
    );
    m.close().await.unwrap();
}

/// A copy-on-write workdir whose path passes through, or ends at, an existing
/// non-directory (`/usr/bin/awk`, `/usr/bin/sh/x`, `/etc/passwd/x`) is `InvalidInput` for
/// both `check_environment` and `create` (defect 5 of issue 12's review: check said ok,
/// create failed with kind io blaming overlayfs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workdir_through_a_file_is_invalid_in_check_and_create() {
    use shellbox_core::{Error, ExecutionRequirements, MachineFactory};
    let test = "workdir_through_a_file_is_invalid_in_check_and_create";
    let Some(factory) = cow_factory(test) else {
        return;
    };
    let none = ExecutionRequirements::default();
    for workdir in ["/usr/bin/awk", "/usr/bin/sh/x", "/etc/passwd/x"] {
        let spec = MachineSpec::host().workdir(workdir);
        let checked = factory.check_environment(&none, &spec).await;
        let created = factory.create(spec).await.map(drop);
        for (what, r) in [("check", &checked), ("create", &created)] {
            match r {
                Err(Error::InvalidInput(m)) => {
                    assert!(m.contains("not a directory"), "{what} {workdir}: {m}")
                }
                other => panic!("{what} {workdir}: {other:?}"),
            }
        }
    }
    // A new directory below an existing one is still made in the layer.
    let m = factory
        .create_local(MachineSpec::host().workdir("/usr/local/shellbox-new/wd"))
        .await
        .unwrap();
    assert_eq!(sh(&m, "pwd").await, "/usr/local/shellbox-new/wd\n");
    m.close().await.unwrap();
}
