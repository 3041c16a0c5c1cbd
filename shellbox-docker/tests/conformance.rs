//! The shared contract suite (`shellbox_core::conformance`) against real Docker containers
//! of the busybox test image.

mod common;

use std::sync::Arc;

use shellbox_core::conformance::Harness;

async fn harness(test: &str) -> Option<Harness> {
    let factory = common::setup(test).await?;
    Some(Harness {
        factory: Arc::new(factory),
        spec: common::spec(),
    })
}

shellbox_core::conformance_tests!(harness);
