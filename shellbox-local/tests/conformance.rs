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

/// The cases that concern files and processes again with copy-on-write system directories
/// (`LocalOptions::system_directories`), where `system_directories_are_private` applies:
/// a root host process only (overlayfs in each machine's mount namespace).
mod copy_on_write {
    use super::*;
    use shellbox_local::{LocalOptions, SystemDirectories};

    async fn harness(test: &str) -> Option<Harness> {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("SKIP {test}: copy-on-write machines need a root host process");
            return None;
        }
        let factory = common::factory_with(
            test,
            LocalOptions {
                system_directories: SystemDirectories::CopyOnWrite,
                ..LocalOptions::default()
            },
        )?;
        Some(Harness {
            factory: Arc::new(factory),
            spec: MachineSpec::host(),
        })
    }

    shellbox_core::conformance_tests!(@cases harness;
        system_directories_are_private,
        check_environment_agrees_with_create,
        files_persist_between_commands,
        upload_download_round_trip,
        transfer_errors,
        bounded_file_download,
        bounded_file_download_resolves_in_the_machine,
        directory_download_keeps_links,
        machines_are_isolated,
        close_leaves_no_process_on_the_host,
        session_state_persists
    );
}
