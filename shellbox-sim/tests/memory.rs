//! Issue 8 item 5: one memory budget per machine. Variables, arrays, pipes, background
//! output and files all count against it; exhausting it ends the machine with
//! `Error::Terminated` naming the budget, and the process's memory stays bounded.
//! Its own test binary (one test), so the peak RSS it reads is its own.

use std::time::Duration;

use shellbox_core::{Command, Error, MachineSpec};
use shellbox_sim::{SimMachineFactory, SimOptions};

/// The budget of these machines: small, so the tests stay fast and safe.
const BUDGET: u64 = 32 << 20;

fn status_kib(field: &str) -> Option<u64> {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|n| n.parse().ok()))
        })
}

#[test]
fn one_budget_bounds_everything_a_machine_holds() {
    let Some(before) = status_kib("VmHWM:") else {
        eprintln!("SKIP one_budget_bounds_everything_a_machine_holds: no /proc/self/status");
        return;
    };
    let f = SimMachineFactory::with_options(SimOptions {
        memory_bytes: Some(BUDGET),
        ..SimOptions::default()
    });
    // 4 MiB of text, made by doubling
    let four_mib = "x=$(printf '%1048576s'); x=$x$x; x=$x$x";
    let cases = [
        // background output nobody reads (grew to 24 GB)
        "cat /dev/zero & wait".to_string(),
        // one string in many array slots (reached 7.7 GB)
        format!("{four_mib}; a=({})", "\"$x\" ".repeat(40)),
        format!("{four_mib}; a=(); for i in $(seq 40); do a+=(\"$x\"); done"),
        format!("{four_mib}; declare -A m; for i in $(seq 40); do m[$i]=$x; done"),
        // copies in variables
        format!("{four_mib}; for i in $(seq 40); do eval \"v$i=\\$x\"; done"),
        // files and variables together
        format!("{four_mib}; for i in $(seq 5); do echo \"$x\" > f$i; done; a=$x$x; b=$a$a"),
        // a pipe nobody drains
        format!("{four_mib}; for i in $(seq 40); do echo \"$x\"; done | {{ read -r l; sleep 1; }}"),
        // captured output of a command substitution
        "y=$(cat /dev/zero)".to_string(),
        // a subshell's copy of big variables
        format!("{four_mib}; a=$x$x$x$x$x$x; ( b=$a; c=$a )"),
        // positional parameters and argument vectors (security review: 1.6 GB under a
        // 64 MiB budget, 976 MB, 1.14 GB under 256 MiB)
        format!("{four_mib}; eval \"set -- $(printf '\"$x\" %.0s' $(seq 40))\"; echo $#"),
        format!("{four_mib}; echo {} > /dev/null", "\"$x\" ".repeat(40)),
        format!("{four_mib}; set -- \"$x\" \"$x\" \"$x\"; set -- \"$@\" \"$@\" \"$@\""),
        format!("{four_mib}; for i in $(seq 40); do set -- \"$@\" \"$x\"; done"),
        format!("{four_mib}; f() {{ f \"$@\" \"$@\"; }}; f \"$x\""),
        format!("{four_mib}; for i in {}; do :; done", "\"$x\" ".repeat(40)),
        // one printf's output, a format reused for every argument
        "printf '%1000000s' $(seq 200) > /dev/null".to_string(),
        format!("{four_mib}; printf \"$x%s\" $(seq 40) | wc -c"),
        // a brace expansion of a million long words (the hour fuzz run, issue 16: 430 MB
        // and 1.2 s of CPU under a 64 MiB budget and a 200 ms timeout)
        format!(": {{1..1000}}{{1..1000}}{}", "x".repeat(400)),
        // awk's arrays and strings count too
        "awk 'BEGIN { for (;;) a[i++] = i }'".to_string(),
        "awk 'BEGIN { s = \"x\"; for (;;) s = s s }'".to_string(),
        // xargs's words, each a string of its own (the hour fuzz run, issue 16, seed
        // 20261206 case 62350: three million empty words, 205 MiB under a 64 MiB budget);
        // last, as the heap they leave behind weighs on the peaks of later cases
        "head -c 3000000 /dev/zero | xargs -0 echo > /dev/null".to_string(),
        "head -c 6000000 /dev/zero | tr '\\0' '\\n' | xargs -I{} echo {} > /dev/null".to_string(),
    ];
    for script in &cases {
        let m = f.create_sim(MachineSpec::sim()).unwrap();
        let r = m.run_sync(Command::shell(script.as_str()).timeout(Duration::from_secs(60)));
        match r {
            Err(Error::Terminated(why)) => {
                assert!(why.contains("memory limit exceeded"), "{script}: {why}");
            }
            other => panic!("{script}: {other:?}"),
        }
        assert!(m.is_closed(), "{script}");
        let peak = status_kib("VmHWM:").unwrap();
        let grown_mib = peak.saturating_sub(before) / 1024;
        eprintln!("{script:.60}: peak RSS grew {grown_mib} MiB");
        // the budget, plus the one word or chunk being built when it ran out
        assert!(
            grown_mib < (BUDGET >> 20) * 2 + 16,
            "{script}: peak RSS grew {grown_mib} MiB over a {} MiB budget",
            BUDGET >> 20
        );
    }
    // within the budget, the same work runs
    let m = f.create_sim(MachineSpec::sim()).unwrap();
    let r = m
        .run_sync(Command::shell(format!(
            "{four_mib}; a=(\"$x\" \"$x\"); echo \"$x\" > f; echo ${{#a[@]}} $(wc -c < f)"
        )))
        .unwrap();
    assert_eq!(r.stdout, "2 4194305\n");
    // positional parameters within the budget
    let m = f.create_sim(MachineSpec::sim()).unwrap();
    let r = m
        .run_sync(Command::shell(
            "x=$(printf '%1048576s'); set -- \"$x\" \"$x\" \"$x\"; f() { echo $# ${#1}; }; \
             f \"$@\"; echo $# ${#3}",
        ))
        .unwrap();
    assert_eq!(r.stdout, "3 1048576\n3 1048576\n");
}
