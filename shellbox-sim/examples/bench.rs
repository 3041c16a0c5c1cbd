//! Rough timings of the simulator's bench targets; run with
//! `cargo run --release -p shellbox-sim --example bench`.

use std::time::Instant;

use shellbox_core::{Command, MachineSpec};
use shellbox_sim::SimMachineFactory;

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|n| n.parse().ok()))
        })
        .unwrap_or(0)
}

fn main() {
    let f = SimMachineFactory::new();
    let n = 10_000;
    let t = Instant::now();
    for _ in 0..n {
        let m = f.create_sim(MachineSpec::sim()).unwrap();
        m.close_sync();
    }
    println!(
        "create+close: {:.2} us",
        t.elapsed().as_secs_f64() * 1e6 / n as f64
    );

    let m = f.create_sim(MachineSpec::sim()).unwrap();
    let t = Instant::now();
    for _ in 0..n {
        m.run_sync(Command::new("true")).unwrap();
    }
    println!(
        "run true: {:.2} us",
        t.elapsed().as_secs_f64() * 1e6 / n as f64
    );

    for (name, rt) in [
        (
            "current-thread",
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
        ),
        (
            "multi-thread",
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .unwrap(),
        ),
    ] {
        let t = Instant::now();
        rt.block_on(async {
            for _ in 0..n {
                shellbox_core::Machine::run(&m, Command::new("true"))
                    .await
                    .unwrap();
            }
        });
        println!(
            "async run true ({name} runtime): {:.2} us",
            t.elapsed().as_secs_f64() * 1e6 / n as f64
        );
        let t = Instant::now();
        rt.block_on(async {
            for _ in 0..n {
                let m = f.create_sim(MachineSpec::sim()).unwrap();
                shellbox_core::Machine::close(&m).await.unwrap();
            }
        });
        println!(
            "async create+close ({name} runtime): {:.2} us",
            t.elapsed().as_secs_f64() * 1e6 / n as f64
        );
    }

    let script = "i=0; total=0; while [ $i -lt 1000 ]; do if [ $((i % 3)) -eq 0 ]; then total=$((total + i)); fi; i=$((i + 1)); done; echo $total";
    let t = Instant::now();
    let reps = 20;
    for _ in 0..reps {
        let r = m.run_sync(Command::shell(script)).unwrap();
        assert_eq!(r.stdout, "166833\n");
    }
    println!(
        "1000-iteration loop (sim): {:.2} ms",
        t.elapsed().as_secs_f64() * 1e3 / reps as f64
    );
    let t = Instant::now();
    for _ in 0..reps {
        std::process::Command::new("bash")
            .arg("-c")
            .arg(script)
            .output()
            .unwrap();
    }
    println!(
        "1000-iteration loop (real bash): {:.2} ms",
        t.elapsed().as_secs_f64() * 1e3 / reps as f64
    );

    for script in [
        "i=0; while [ $i -lt 1000 ]; do i=$((i+1)); done; echo $i",
        "for ((i=0; i<1000; i++)); do x=$((x+i)); done; echo $x",
        "i=0; while (( i < 1000 )); do (( i++ )); done; echo $i",
    ] {
        let t = Instant::now();
        for _ in 0..reps {
            m.run_sync(Command::shell(script)).unwrap();
        }
        let sim = t.elapsed().as_secs_f64() * 1e3 / reps as f64;
        let t = Instant::now();
        for _ in 0..reps {
            std::process::Command::new("bash")
                .arg("-c")
                .arg(script)
                .output()
                .unwrap();
        }
        let real = t.elapsed().as_secs_f64() * 1e3 / reps as f64;
        println!("{script:?}: sim {sim:.2} ms, real bash {real:.2} ms");
    }

    let before = rss_kib();
    let machines: Vec<_> = (0..10_000)
        .map(|_| f.create_sim(MachineSpec::sim()).unwrap())
        .collect();
    let after = rss_kib();
    println!(
        "10,000 idle machines: {:.1} MiB ({} bytes each)",
        (after - before) as f64 / 1024.0,
        (after - before) * 1024 / machines.len() as u64
    );
}
