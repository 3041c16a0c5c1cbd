//! `memory_mb` and `storage_mb` past what fits in bytes: found by the CLI's fuzzer
//! (`shellbox run --memory-mb 17592186044416`, 2^44 MiB = 2^64 bytes). MiB were multiplied
//! into bytes unchecked: an overflow panic in debug builds, and in release a budget wrapped
//! to 0 bytes, so every command failed. Now the product saturates (a budget that large is
//! no practical limit, as on docker, which saturates its memory limit the same way).

use shellbox_core::{Command, MachineSpec};
use shellbox_sim::SimMachineFactory;

#[test]
fn sizes_past_u64_bytes_saturate() {
    let f = SimMachineFactory::new();
    for mb in [1u64 << 44, (1 << 44) + 1, u64::MAX] {
        for spec in [
            MachineSpec::sim().memory_mb(mb),
            MachineSpec::sim().storage_mb(mb),
        ] {
            let m = f.create_sim(spec.clone()).unwrap();
            let r = m
                .run_sync(Command::shell(
                    "x=$(seq 1000); echo ${#x} > /tmp/f; cat /tmp/f",
                ))
                .unwrap();
            assert_eq!(
                (r.exit_code, &r.stdout[..]),
                (Some(0), &b"3892\n"[..]),
                "{spec:?}: {r:?}"
            );
        }
    }
}
