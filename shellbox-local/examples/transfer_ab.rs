//! Interleaved upload / download timing of 1000 small files on one machine, so both
//! directions see the same host conditions: `cargo run --release -p shellbox-local
//! --example transfer_ab [ITERATIONS] [HOST_DIR]`. Prints the median of each direction.

use std::time::{Duration, Instant};

use shellbox_core::{Machine, MachineSpec};
use shellbox_local::{LocalMachineFactory, LocalOptions};

#[tokio::main]
async fn main() -> Result<(), shellbox_core::Error> {
    let mut args = std::env::args().skip(1);
    let iterations: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10);
    let base = args.next().map(std::path::PathBuf::from);
    let host = match &base {
        Some(dir) => tempfile::tempdir_in(dir),
        None => tempfile::tempdir(),
    }
    .map_err(|e| shellbox_core::Error::io("temp dir", e))?;
    let src = host.path().join("src");
    std::fs::create_dir_all(&src).map_err(|e| shellbox_core::Error::io("mkdir", e))?;
    for i in 0..1000 {
        std::fs::write(src.join(format!("f{i:04}.txt")), format!("file {i}\n"))
            .map_err(|e| shellbox_core::Error::io("write", e))?;
    }
    let factory = LocalMachineFactory::new(LocalOptions::default())?;
    let m = factory.create_local(MachineSpec::host()).await?;
    m.upload(&src, "/tmp/bench-src").await?;
    let (mut up, mut down) = (Vec::new(), Vec::new());
    // Alternate which direction goes first, so neither always follows the other's writes.
    for n in 0..iterations {
        for step in 0..2 {
            let t = Instant::now();
            if (n + step) % 2 == 0 {
                m.upload(&src, &format!("/tmp/up-{n}")).await?;
                up.push(t.elapsed());
            } else {
                m.download("/tmp/bench-src", &host.path().join(format!("out-{n}")))
                    .await?;
                down.push(t.elapsed());
            }
        }
    }
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    println!(
        "upload median {:?}  download median {:?}",
        median(up),
        median(down)
    );
    m.close().await
}
