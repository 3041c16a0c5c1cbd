//! The shared contract suite (`shellbox_core::conformance`) on the simulator.

use std::sync::Arc;

use shellbox_core::conformance::Harness;
use shellbox_core::MachineSpec;
use shellbox_sim::SimMachineFactory;

async fn harness(_test: &str) -> Option<Harness> {
    Some(Harness {
        factory: Arc::new(SimMachineFactory::new()),
        spec: MachineSpec::sim(),
    })
}

shellbox_core::conformance_tests!(harness);
