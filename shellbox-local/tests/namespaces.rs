//! A machine's namespaces are its own and released by close and drop. In a test binary of
//! its own: namespace inode numbers are recycled as soon as a namespace is freed, so a
//! machine another test of the same process creates meanwhile can get a closed machine's
//! number and look like a namespace this process still holds (seen twice in 15 full runs
//! of tests/local.rs with the check in there).

mod common;

use std::time::Duration;

use shellbox_core::{Command, CommandResult, Machine, MachineSpec};
use shellbox_local::LocalMachine;

async fn sh(m: &dyn Machine, script: &str) -> CommandResult {
    m.run(Command::shell(script).timeout(Duration::from_secs(60)))
        .await
        .unwrap_or_else(|e| panic!("{script}: {e}"))
}

fn out(r: &CommandResult) -> String {
    r.stdout_lossy()
}

fn interfaces(proc_net_dev: &str) -> Vec<String> {
    proc_net_dev
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(|s| s.trim().to_string())
        .collect()
}

/// Every fd of this process and namespace of its threads, as `readlink` shows them
/// (`net:[4026532...]`).
fn own_namespace_links() -> Vec<String> {
    let mut links = Vec::new();
    for dir in ["/proc/self/fd".to_string()].into_iter().chain(
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .flatten()
            .map(|t| format!("{}/ns", t.path().display())),
    ) {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if let Ok(target) = std::fs::read_link(entry.path()) {
                links.push(target.to_string_lossy().into_owned());
            }
        }
    }
    links
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machine_namespaces_are_its_own_and_released_on_close() {
    let test = "machine_namespaces_are_its_own_and_released_on_close";
    let Some(factory) = common::factory(test) else {
        return;
    };
    let a = factory.create_local(MachineSpec::host()).await.unwrap();
    let b = factory.create_local(MachineSpec::host()).await.unwrap();
    let host_netns = std::fs::read_link("/proc/self/ns/net").unwrap();
    async fn netns(m: &LocalMachine) -> String {
        out(&sh(m, "readlink /proc/self/ns/net").await)
            .trim()
            .to_string()
    }
    let a1 = netns(&a).await;
    let b1 = netns(&b).await;
    let (held_a, held_b) = (a.shared_namespace_links(), b.shared_namespace_links());
    if nix::unistd::geteuid().is_root() {
        // A root process makes them: the machine's mount namespace and the one its
        // commands' network is in.
        assert_eq!(held_a.len(), 2, "{held_a:?}");
        assert!(held_a[0].starts_with("mnt:["), "{held_a:?}");
        assert_eq!(held_a[1], a1);
        assert_eq!(held_b[1], b1);
        assert_ne!(held_a[0], held_b[0]);
    }
    assert!(a1.starts_with("net:["), "{a1}");
    assert_ne!(a1, host_netns.to_str().unwrap());
    assert_ne!(a1, b1, "two machines share a network namespace");
    // Loopback is up (127.0.0.1 is routed) and is the only interface.
    let r = sh(
        &a,
        "grep -c 127.0.0.1 /proc/net/fib_trie; cat /proc/net/dev",
    )
    .await;
    assert!(
        out(&r).lines().next().unwrap().parse::<u32>().unwrap() > 0,
        "{r:?}"
    );
    assert_eq!(
        interfaces(out(&r).split_once('\n').unwrap().1),
        ["lo"],
        "{r:?}"
    );
    // Every command of a machine sees the same namespace, also concurrently.
    let (a2, a3) = tokio::join!(netns(&a), netns(&a));
    assert_eq!((a2.as_str(), a3.as_str()), (a1.as_str(), a1.as_str()));
    // System directories are bound read-only, nosuid and nodev (as bwrap's --ro-bind does).
    let r = sh(
        &a,
        "awk '$5 == \"/usr\" || $5 == \"/etc\" || $5 == \"/sys\" {print $5, $6}' /proc/self/mountinfo",
    )
    .await;
    let lines: Vec<String> = out(&r).lines().map(str::to_string).collect();
    assert_eq!(lines.len(), 3, "{r:?}");
    for line in &lines {
        let opts: Vec<&str> = line.split(' ').nth(1).unwrap().split(',').collect();
        for want in ["ro", "nosuid", "nodev"] {
            assert!(opts.contains(&want), "{line}: {r:?}");
        }
    }
    // The host's mount namespace shows none of the machine's mounts.
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let root = a.root().to_str().unwrap().to_string();
    assert!(!mountinfo.contains(&root), "{mountinfo}");
    a.close().await.unwrap();
    assert!(a.shared_namespace_links().is_empty());
    // Closed: this process holds no fd to them and none of its threads is in them, as soon
    // as close returns (it waits for the sandbox's start and its bwrap's reaping).
    let links = own_namespace_links();
    assert!(!links.contains(&a1), "{a1} still held: {links:?}");
    for held in &held_a {
        assert!(!links.contains(held), "{held} still held: {links:?}");
    }
    if nix::unistd::geteuid().is_root() {
        // The open machine holds its namespace (so the check above can see one).
        assert!(links.contains(&b1), "{b1} not held while open: {links:?}");
    }
    drop(b);
    let links = own_namespace_links();
    assert!(
        !links.contains(&b1),
        "{b1} still held after drop: {links:?}"
    );
    for held in &held_b {
        assert!(
            !links.contains(held),
            "{held} still held after drop: {links:?}"
        );
    }
}
