//! The `shellbox` command line: run a command in a fresh machine, measure the simulator
//! against a corpus, benchmark backends, clean up leaked containers, build Python
//! environments.

// A build with the CLI but no backend (`--no-default-features --features cli`) compiles, and
// refuses every command naming the features to enable; its match arms are all gone.
#![cfg_attr(
    not(any(feature = "sim", feature = "local", feature = "docker")),
    allow(
        unreachable_code,
        unused_variables,
        unused_imports,
        unused_mut,
        dead_code
    )
)]

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    cli::main()
}
