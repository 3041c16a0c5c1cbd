//! apt and dpkg in copy-on-write machines (issue 12's break-it pass): a machine sees the
//! host's package database and apt configuration through layers of its own, installs a
//! local `.deb` into them, and neither the host nor another machine sees the result; the
//! host's secrets stay out of the machine's `/etc`. No network: no `apt-get update`.

mod common;

use std::path::Path;
use std::time::Duration;

use shellbox_core::{Command, CommandResult, Machine, MachineFactory, MachineSpec};
use shellbox_local::{LocalOptions, SystemDirectories};

async fn run(m: &dyn Machine, script: &str) -> CommandResult {
    m.run(Command::shell(script).timeout(Duration::from_secs(120)))
        .await
        .unwrap_or_else(|e| panic!("{script}: {e}"))
}

/// A tiny `.deb` (package `NAME`, one file `/opt/NAME/hello`) built with `dpkg-deb`.
fn build_deb(dir: &Path, name: &str) -> std::path::PathBuf {
    let pkg = dir.join("pkg");
    std::fs::create_dir_all(pkg.join("DEBIAN")).unwrap();
    std::fs::create_dir_all(pkg.join(format!("opt/{name}"))).unwrap();
    std::fs::write(
        pkg.join("DEBIAN/control"),
        format!(
            "Package: {name}\nVersion: 1.0\nArchitecture: all\n\
             Maintainer: shellbox <test@example.invalid>\nDescription: test package\n"
        ),
    )
    .unwrap();
    std::fs::write(
        pkg.join(format!("opt/{name}/hello")),
        "hello from the deb\n",
    )
    .unwrap();
    let deb = dir.join(format!("{name}.deb"));
    let out = std::process::Command::new("dpkg-deb")
        .args(["--root-owner-group", "--build"])
        .arg(&pkg)
        .arg(&deb)
        .output()
        .unwrap();
    assert!(out.status.success(), "dpkg-deb: {out:?}");
    deb
}

fn hash_tree(dir: &Path) -> String {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "cd '{}' && find . -printf '%p %s %T@ %m\\n' | sort | sha256sum",
            dir.display()
        ))
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apt_and_dpkg_install_a_local_deb_in_one_machine_only() {
    let test = "apt_and_dpkg_install_a_local_deb_in_one_machine_only";
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIP {test}: copy-on-write machines need a root host process");
        return;
    }
    if !Path::new("/var/lib/dpkg/status").exists() || !Path::new("/usr/bin/apt-get").exists() {
        eprintln!("SKIP {test}: the host has no dpkg database or apt-get");
        return;
    }
    let Some(f) = common::factory_with(
        test,
        LocalOptions {
            system_directories: SystemDirectories::CopyOnWrite,
            ..LocalOptions::default()
        },
    ) else {
        return;
    };
    let name = format!("shellbox-cow-deb-{}", std::process::id());
    let dir = tempfile::tempdir().unwrap();
    let deb = build_deb(dir.path(), &name);
    let dpkg_before = hash_tree(Path::new("/var/lib/dpkg"));

    let a = f.create(MachineSpec::host()).await.unwrap();
    let b = f.create(MachineSpec::host()).await.unwrap();
    // apt's configuration and the host's package database are there; secrets are not.
    let r = run(
        &a,
        "test -d /etc/apt/apt.conf.d && test -f /etc/dpkg/dpkg.cfg && \
         dpkg -s coreutils | grep -qx 'Status: install ok installed' && \
         apt-cache policy coreutils | grep -q Installed: && echo seen; \
         ls /etc/shadow /etc/ssh /etc/apt/auth.conf 2>/dev/null; ls -A /etc/apt/auth.conf.d",
    )
    .await;
    assert_eq!(r.stdout_lossy(), "seen\n", "{r:?}");
    a.upload(&deb, "/tmp/x.deb").await.unwrap();
    let r = run(&a, "apt-get install -y /tmp/x.deb").await;
    assert_eq!(r.exit_code, Some(0), "{r:?}");
    let r = run(
        &a,
        &format!("dpkg -s {name} | grep Status; cat /opt/{name}/hello; dpkg -L {name} | tail -1"),
    )
    .await;
    assert_eq!(
        r.stdout_lossy(),
        format!("Status: install ok installed\nhello from the deb\n/opt/{name}/hello\n"),
        "{r:?}"
    );
    // dpkg -i (a reinstall) works too.
    let r = run(&a, "dpkg -i /tmp/x.deb >/dev/null && echo reinstalled").await;
    assert_eq!(r.stdout_lossy(), "reinstalled\n", "{r:?}");
    // Machine B and the host see nothing of it.
    let r = run(
        &b,
        &format!("dpkg -s {name} >/dev/null 2>&1; echo $?; test -e /opt/{name}; echo $?"),
    )
    .await;
    assert_eq!(r.stdout_lossy(), "1\n1\n", "{r:?}");
    assert!(!Path::new(&format!("/opt/{name}")).exists());
    assert_eq!(hash_tree(Path::new("/var/lib/dpkg")), dpkg_before);
    let host = std::process::Command::new("dpkg")
        .args(["-s", &name])
        .output()
        .unwrap();
    assert!(!host.status.success(), "{host:?}");
    a.close().await.unwrap();
    b.close().await.unwrap();
}
