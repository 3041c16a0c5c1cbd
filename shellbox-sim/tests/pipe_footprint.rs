//! A pipeline's bytes are not copied on their way through `head`: `yes | head -c N | wc -c`
//! holds the N bytes about twice (head's input, moved out of its pipe, and the pipe to
//! wc), not four times (issue 16's break-it: head copied its input and its output once
//! more, uncharged, so `yes | head -c 2000000000 | wc -c` reached 5.9 GB). Its own test
//! binary, so no other test shares the process while its peak RSS is measured.

use shellbox_core::{Command, MachineSpec};
use shellbox_sim::SimMachineFactory;

/// The process's peak resident set (VmHWM) in KiB.
fn peak_kib() -> Option<u64> {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|n| n.parse().ok()))
        })
}

#[test]
fn a_pipeline_through_head_holds_its_bytes_about_twice() {
    let Some(before) = peak_kib() else {
        eprintln!("SKIP a_pipeline_through_head_holds_its_bytes_about_twice: no /proc/self/status");
        return;
    };
    let m = SimMachineFactory::new()
        .create_sim(MachineSpec::sim())
        .unwrap();
    let r = m
        .run_sync(Command::shell("yes | head -c 100000000 | wc -c"))
        .unwrap();
    assert_eq!(r.stdout, "100000000\n", "{r:?}");
    let grown_mib = peak_kib().unwrap().saturating_sub(before) / 1024;
    eprintln!("yes | head -c 100000000 | wc -c: peak grew {grown_mib} MiB");
    // 95 MiB of data: two copies and the growth slack of the pipe being written; four
    // copies (before) grew the peak by about 390 MiB
    assert!(grown_mib < 300, "the pipeline's peak grew {grown_mib} MiB");
}
