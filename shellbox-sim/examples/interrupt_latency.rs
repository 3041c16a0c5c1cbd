//! Measures how long a simulator shell session's `interrupt` (and a `run`'s timeout) takes
//! to land during long string operations under the default memory budget.
//!
//! `cargo run --release -p shellbox-sim --example interrupt_latency [SCRIPT...]`: for each
//! script, starts it in a session, interrupts it after `AFTER_MS` (default 2000) ms and prints the wall and CPU
//! time from the interrupt to the answer; then runs it with that timeout and prints the
//! wall and CPU time spent past the deadline (0 when it ended before).

use std::time::{Duration, Instant};

use shellbox_core::{Command, Machine, MachineSpec};
use shellbox_sim::SimMachineFactory;

const SCRIPTS: &[&str] = &[
    "x=$(head -c 100000000 /dev/zero | tr '\\0' ' '); y=${x// /ab}",
    "x=a; while :; do x=$x$x; done",
    "printf '%*s' 400000000 '' >/dev/null",
    "x=$(head -c 100000000 /dev/zero | tr '\\0' ' '); y=${x^^}",
    "x=$(head -c 100000000 /dev/zero | tr '\\0' ' '); y=${x//?/ab}",
    "x=$(head -c 100000000 /dev/zero | tr '\\0' ' '); y=\"$x$x$x\"",
    "x=$(head -c 100000000 /dev/zero | tr '\\0' ' '); read -r y <<< \"$x$x\"",
    "x=$(head -c 100000000 /dev/zero | tr '\\0' ' '); y=${x@Q}",
    "x=$(head -c 100000000 /dev/zero | tr '\\0' ' '); y=${#x}; z=${x:5:90000000}",
    "x=$(head -c 100000000 /dev/zero | tr '\\0' ' '); set -- $x$x",
    "x=$(head -c 100000000 /dev/zero | tr '\\0' ' '); y=${x%% *}; y=${x##* }",
    "x=$(head -c 100000000 /dev/zero | tr '\\0' ' '); y=${x/#/a}",
    "x=$(head -c 100000000 /dev/zero | tr '\\0' ' '); cat <<< \"$x\" >/dev/null",
    "x=$(head -c 100000000 /dev/zero | tr '\\0' ' '); y=$(echo \"$x\")",
    "x=$(head -c 100000000 /dev/zero | tr '\\0' ' '); x+=$x; x+=$x",
    "x=$(head -c 100000000 /dev/zero | tr '\\0' ' '); a=(\"$x\" \"$x\"); y=\"${a[*]}\"",
    "x=$(head -c 100000000 /dev/zero | tr '\\0' ' '); y=\"${x,,}\"",
    "head -c 300000000 /dev/zero | tr '\\0' ' ' | { read -r y; }",
];

/// This process's CPU time (user and system, every thread).
fn cpu() -> Duration {
    let u = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
        .expect("getrusage");
    let t = |tv: nix::sys::time::TimeVal| {
        Duration::from_secs(tv.tv_sec() as u64) + Duration::from_micros(tv.tv_usec() as u64)
    };
    t(u.user_time()) + t(u.system_time())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let scripts: Vec<String> = if args.is_empty() {
        SCRIPTS.iter().map(|s| s.to_string()).collect()
    } else {
        args
    };
    let after: u64 = std::env::var("AFTER_MS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let after = Duration::from_millis(after);
    let f = SimMachineFactory::new();
    for script in &scripts {
        let m = f.create_sim(MachineSpec::sim()).unwrap();
        let s = m.open_shell().await.unwrap();
        let running = {
            let s = s.clone();
            let c = script.clone();
            tokio::spawn(async move { s.execute(&c, Duration::from_secs(60), 1 << 20).await })
        };
        tokio::time::sleep(after).await;
        let (t0, c0) = (Instant::now(), cpu());
        let i = s.interrupt().await;
        let r = running.await.unwrap();
        let (wall, cpu_after) = (t0.elapsed(), cpu().saturating_sub(c0));
        let code = r.as_ref().map(|u| u.exit_code).map_err(|e| e.to_string());
        let again = s.execute("echo ok", Duration::from_secs(5), 1 << 20).await;
        let ok = again.map(|u| u.output == "ok\n").unwrap_or(false);
        drop(s);
        m.close().await.unwrap();
        let m = f.create_sim(MachineSpec::sim()).unwrap();
        let t1 = Instant::now();
        let watcher = std::thread::spawn(move || {
            std::thread::sleep(after);
            cpu()
        });
        let r2 = m.run(Command::shell(script.as_str()).timeout(after)).await;
        let t_wall = t1.elapsed().saturating_sub(after);
        let end = cpu();
        let t_cpu = end.saturating_sub(watcher.join().unwrap());
        let reason = r2
            .map(|r| format!("{:?}/{:?}", r.reason, r.exit_code))
            .unwrap_or_else(|e| e.to_string());
        m.close().await.unwrap();
        println!(
            "interrupt {:>7.1?} wall {:>7.1?} cpu ({:?} -> {code:?}, after ok={ok}) | timeout {after:?}: after it wall {:>7.1?} cpu {:>7.1?} ({reason})  {script}",
            wall, cpu_after, i.is_ok(), t_wall, t_cpu
        );
    }
}
