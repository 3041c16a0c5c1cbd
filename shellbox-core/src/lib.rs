//! The shellbox machine contract.
//!
//! A [`MachineFactory`] creates [`Machine`]s from a [`MachineSpec`]; a machine runs
//! [`Command`]s (to a [`CommandResult`], or as a stream of [`Event`]s), moves files in and
//! out, and is closed. Backends (`shellbox-local`, `shellbox-docker`, `shellbox-sim`)
//! implement the traits; what they share — bounded output capture, input validation,
//! exit-status mapping, bounded downloads, tar transfer safety — lives here once.
//!
//! The shapes follow the Python reference library (`marin-shellbox`); where this crate
//! differs (partial output kept on timeout, streaming), the item's docs say so.

#![warn(missing_docs)]

pub mod archive;
mod capabilities;
pub mod capture;
mod command;
#[cfg(feature = "conformance")]
pub mod conformance;
mod download;
mod download_file;
mod error;
mod limit;
mod machine;
mod pool;
pub mod record;
mod remove;
pub mod serde_secs;
mod session;
mod snapshot;
mod spec;
pub mod staging;
pub mod status;
pub mod transfer;
pub mod validate;

pub use capabilities::{
    check_execution_requirements, list_names, Capabilities, CommandSemantics,
    ExecutionRequirements, SessionKind, CAPABILITY_NAMES, LISTED_NAMES_MAX,
};
pub use capture::{collect, EventStream, OutputLimiter};
pub use command::{
    Command, CommandResult, Event, ExitReason, ExitStatus, DEFAULT_OUTPUT_LIMIT_BYTES,
};
pub use download::{download_files, DownloadLimits};
pub use download_file::{download_file, refuse_special_download_target, set_download_mode};
pub use error::{Error, UnsupportedMachineSpec};
pub use limit::LimitFactory;
pub use machine::{Machine, MachineFactory};
pub use pool::PoolFactory;
pub use record::{replay, RecordingMachine, ReplayReport};
pub use remove::{remove_tree, MAX_OPEN_LEVELS};
pub use session::{check_command, ShellSession, ShellStatus, ShellUpdate, DEFAULT_EXECUTE_WAIT};
pub use snapshot::{Snapshot, SnapshotHandle};
pub use spec::{
    DockerImage, DockerfileSource, HostImage, ImageArchive, ImageSource, MachineSpec, Mount,
    NetworkPolicy, PackageSpec, RegistryCredentials, RegistryImage, SimBuiltins,
    DEFAULT_PIDS_LIMIT, DEFAULT_WORKDIR, MAX_PIDS_LIMIT,
};
pub use staging::STAGING_PREFIX;

/// Re-exported so backends and users name the same `async_trait`.
pub use async_trait::async_trait;
