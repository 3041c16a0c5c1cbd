//! Compares `run(true)` on a docker machine with a bare Engine API exec of `true` (the
//! floor): `cargo run --release -p shellbox-docker --example bench_true`. Needs the engine;
//! imports the busybox test image if missing.

use shellbox_core::{Command, Machine};
use shellbox_docker::{ensure_busybox_image, DockerMachineFactory, BUSYBOX_TEST_IMAGE};
use std::time::Instant;

#[tokio::main]
async fn main() {
    let f = DockerMachineFactory::connect().await.unwrap();
    ensure_busybox_image(f.docker(), BUSYBOX_TEST_IMAGE)
        .await
        .unwrap();
    let m = f
        .create_machine(shellbox_core::MachineSpec::docker(BUSYBOX_TEST_IMAGE))
        .await
        .unwrap();
    let n = 30;
    for round in 0..2 {
        let t = Instant::now();
        for _ in 0..n {
            shellbox_docker::floor_exec_true(m.docker(), m.container_id())
                .await
                .unwrap();
        }
        let floor = t.elapsed() / n;
        let t = Instant::now();
        for _ in 0..n {
            m.run(Command::new("true")).await.unwrap();
        }
        let run = t.elapsed() / n;
        println!(
            "round {round}: floor {floor:?} run_true {run:?} ratio {:.2}",
            run.as_secs_f64() / floor.as_secs_f64()
        );
    }
    m.close().await.unwrap();
}
