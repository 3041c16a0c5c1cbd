//! Compiles the supervisor program (`src/supervisor/main.rs`, std only) with `$RUSTC` into
//! `OUT_DIR/shellbox-supervisor`, statically linked (`+crt-static`), so the library can
//! embed it with `include_bytes!` and a user needs no install step.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let target = std::env::var("TARGET").expect("cargo sets TARGET");
    let src = PathBuf::from("src/supervisor/main.rs");
    for f in [
        "src/supervisor/main.rs",
        "src/supervisor/pty.rs",
        "src/proto.rs",
    ] {
        println!("cargo:rerun-if-changed={f}");
    }
    let exe = out.join("shellbox-supervisor");
    let status = Command::new(&rustc)
        .args([
            "--edition",
            "2021",
            "--crate-type",
            "bin",
            "--crate-name",
            "shellbox_supervisor",
        ])
        .args(["--target", &target])
        .args([
            "-C",
            "opt-level=2",
            "-C",
            "panic=abort",
            "-C",
            "strip=symbols",
            "-C",
            "debuginfo=0",
        ])
        .args(["-C", "target-feature=+crt-static"])
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        // The workspace's RUSTFLAGS-like wrappers (clippy-driver) must not lint this build.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .status()
        .unwrap_or_else(|e| panic!("run {rustc:?} to build the supervisor: {e}"));
    assert!(
        status.success(),
        "building the supervisor with {rustc:?} failed: {status}"
    );
}
