//! Idle machines are small: 10,000 of them fit well under 200 MiB (the target).
//! Its own test binary, so no other test shares the process while RSS is measured.

use shellbox_core::MachineSpec;
use shellbox_sim::SimMachineFactory;

fn rss_kib() -> Option<u64> {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|n| n.parse().ok()))
        })
}

#[test]
fn ten_thousand_idle_machines_fit_in_200_mib() {
    let Some(before) = rss_kib() else {
        eprintln!("SKIP ten_thousand_idle_machines_fit_in_200_mib: no /proc/self/status");
        return;
    };
    let f = SimMachineFactory::new();
    let machines: Vec<_> = (0..10_000)
        .map(|_| f.create_sim(MachineSpec::sim()).unwrap())
        .collect();
    let after = rss_kib().unwrap();
    let grown_mib = after.saturating_sub(before) / 1024;
    eprintln!("10,000 idle machines: {grown_mib} MiB");
    assert!(grown_mib < 200, "10,000 idle machines took {grown_mib} MiB");
    for m in &machines {
        m.close_sync();
    }
    assert!(machines.iter().all(|m| m.is_closed()));
}
