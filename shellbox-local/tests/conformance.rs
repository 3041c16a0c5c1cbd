//! The shared contract suite (`shellbox_core::conformance`) against real bwrap sandboxes.

mod common;

use std::sync::Arc;

use shellbox_core::conformance::Harness;
use shellbox_core::MachineSpec;

async fn harness(test: &str) -> Option<Harness> {
    let factory = common::factory(test)?;
    Some(Harness {
        factory: Arc::new(factory),
        spec: MachineSpec::host(),
    })
}

shellbox_core::conformance_tests!(harness);
