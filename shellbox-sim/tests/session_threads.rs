//! Nothing of a simulator session survives it: its thread ends when the session closes,
//! when its machine closes, and when its machine is dropped unclosed. Its own test binary
//! (one test), so the threads it counts are its own.

use std::time::{Duration, Instant};

use shellbox_core::{Machine, MachineSpec};
use shellbox_sim::SimMachineFactory;

/// The session threads of this process (`shellbox-sim-shell`, cut to 15 bytes by the kernel).
fn session_threads() -> Option<usize> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    Some(
        tasks
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .filter(|c| c.trim_end() == "shellbox-sim-sh")
            .count(),
    )
}

/// Waits (at most 10 s) until `want` session threads are left; returns how many are.
fn settle(want: usize) -> usize {
    let started = Instant::now();
    loop {
        let n = session_threads().unwrap_or(0);
        if n == want || started.elapsed() > Duration::from_secs(10) {
            return n;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[tokio::test]
async fn session_threads_end_with_their_session_or_machine() {
    if session_threads().is_none() {
        eprintln!("SKIP session_threads_end_with_their_session_or_machine: no /proc/self/task");
        return;
    }
    let f = SimMachineFactory::new();
    let machines: Vec<_> = (0..3)
        .map(|_| f.create_sim(MachineSpec::sim()).unwrap())
        .collect();
    let mut sessions = Vec::new();
    for m in &machines {
        let s = m.open_shell().await.unwrap();
        let u = s
            .execute("v=1; echo ok", Duration::from_secs(5), 1024)
            .await
            .unwrap();
        assert_eq!(&u.output[..], b"ok\n");
        sessions.push(s);
    }
    assert_eq!(settle(3), 3);
    let mut machines = machines.into_iter();
    // closed with its machine
    machines.next().unwrap().close().await.unwrap();
    assert_eq!(settle(2), 2);
    // closed alone (the machine goes on)
    sessions[1].close().await.unwrap();
    assert_eq!(settle(1), 1);
    // its machine dropped unclosed, the session handle still held
    drop(machines);
    assert_eq!(settle(0), 0);
    for s in &sessions {
        assert!(s
            .execute("true", Duration::from_secs(5), 1024)
            .await
            .is_err());
    }
}
