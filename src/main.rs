//! The `shellbox` command line: run a command in a fresh machine, measure the simulator
//! against a corpus, benchmark backends, clean up leaked containers, build Python
//! environments.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    cli::main()
}
