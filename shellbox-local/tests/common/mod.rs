//! Shared set-up of the local backend's integration tests.
#![allow(dead_code)]

use shellbox_core::Error;
use shellbox_local::{LocalMachineFactory, LocalOptions};

/// A factory with default options, or `None` after printing `SKIP <test>: <reason>` when
/// bwrap is missing or cannot sandbox on this host.
pub fn factory(test: &str) -> Option<LocalMachineFactory> {
    factory_with(test, LocalOptions::default())
}

/// A factory with these options, or `None` (with the SKIP line) when no bwrap can sandbox.
pub fn factory_with(test: &str, options: LocalOptions) -> Option<LocalMachineFactory> {
    match LocalMachineFactory::new(options) {
        Ok(f) => Some(f),
        Err(e @ Error::SandboxUnavailable { .. }) => {
            eprintln!("SKIP {test}: {e}");
            None
        }
        Err(e) => panic!("{test}: factory failed: {e}"),
    }
}
