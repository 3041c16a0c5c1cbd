//! Runs one script on a fresh simulator machine (default options) and prints its stdout,
//! stderr, exit code and wall time: `cargo run -p shellbox-sim --example sim_run -- SCRIPT`.

use shellbox_core::{Command, MachineSpec};
use shellbox_sim::SimMachineFactory;

fn main() {
    let script = std::env::args().nth(1).unwrap_or_default();
    let m = SimMachineFactory::new()
        .create_sim(MachineSpec::sim())
        .unwrap();
    let t = std::time::Instant::now();
    let r = m.run_sync(Command::shell(script.as_str()));
    let took = t.elapsed();
    match r {
        Ok(r) => {
            print!("{}", String::from_utf8_lossy(&r.stdout));
            eprint!("{}", String::from_utf8_lossy(&r.stderr));
            eprintln!("[exit {:?} {:?} in {took:?}]", r.exit_code, r.reason);
        }
        Err(e) => eprintln!("[error {e} in {took:?}]"),
    }
}
