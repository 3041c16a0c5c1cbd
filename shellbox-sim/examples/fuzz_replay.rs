//! Replays one script as the fuzz target (`tests/fuzz.rs`) runs it: a fresh machine with a
//! 64 MiB memory budget and a 16 MiB output budget, a 200 ms timeout, and the process's CPU
//! time read by a watcher thread when the deadline passes.
//!
//! `cargo run --release -p shellbox-sim --example fuzz_replay -- FILE [RUNS]` prints, for
//! each run, the CPU time spent after the deadline, the wall time and how the run ended.
//! `SHELLBOX_REPLAY_TIMEOUT_MS` sets another timeout (a script that builds big inputs
//! before its loop needs longer than 200 ms to reach it).

use std::time::{Duration, Instant};

use shellbox_core::{Command, MachineSpec};
use shellbox_sim::{SimMachineFactory, SimOptions};

/// The fuzz target's timeout.
const TIMEOUT: Duration = Duration::from_millis(200);

/// This process's CPU time (user and system, every thread).
fn cpu_time() -> Duration {
    let u = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
        .expect("getrusage");
    let t = |tv: nix::sys::time::TimeVal| {
        Duration::from_secs(tv.tv_sec() as u64) + Duration::from_micros(tv.tv_usec() as u64)
    };
    t(u.user_time()) + t(u.system_time())
}

fn main() {
    let mut args = std::env::args().skip(1);
    let file = args.next().expect("usage: fuzz_replay FILE [RUNS]");
    let runs: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1);
    let script = std::fs::read_to_string(&file).expect("read the script");
    let timeout = std::env::var("SHELLBOX_REPLAY_TIMEOUT_MS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(TIMEOUT, Duration::from_millis);
    let f = SimMachineFactory::with_options(SimOptions {
        memory_bytes: Some(64 << 20),
        output_bytes: 16 << 20,
        ..SimOptions::default()
    });
    for _ in 0..runs {
        let m = f.create_sim(MachineSpec::sim()).unwrap();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let watcher = std::thread::spawn(move || match done_rx.recv_timeout(timeout) {
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Some(cpu_time()),
            _ => None,
        });
        let started = Instant::now();
        let r = m.run_sync(Command::shell(script.as_str()).timeout(timeout));
        let took = started.elapsed();
        let cpu_end = cpu_time();
        let _ = done_tx.send(());
        let after = watcher
            .join()
            .expect("the watcher thread")
            .map(|at| cpu_end.saturating_sub(at));
        let how = match &r {
            Ok(r) => format!("{:?} {:?}", r.exit_code, r.reason),
            Err(e) => format!("error {e}"),
        };
        println!("cpu after deadline {after:?}, wall {took:?}, {how}");
    }
}
