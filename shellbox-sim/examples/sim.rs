//! Runs `bash -c SCRIPT` on a fresh simulated machine (workdir `/work`) and prints what
//! came out: `cargo run -p shellbox-sim --example sim -- 'echo hi'`.

use shellbox_core::{Command, MachineSpec};
use shellbox_sim::SimMachineFactory;

fn main() {
    let script = std::env::args().nth(1).unwrap_or_default();
    let m = SimMachineFactory::new()
        .create_sim(MachineSpec::sim().workdir("/work"))
        .expect("create");
    match m.run_sync(
        Command::from_argv(["bash", "-c", script.as_str()])
            .timeout(std::time::Duration::from_secs(10)),
    ) {
        Ok(r) => {
            print!("{}", String::from_utf8_lossy(&r.stdout));
            eprint!("{}", String::from_utf8_lossy(&r.stderr));
            eprintln!(
                "[exit {:?} {:?}] unsupported: {:?}",
                r.exit_code,
                r.reason,
                m.unsupported()
            );
        }
        Err(e) => eprintln!("[error {e}]"),
    }
}
