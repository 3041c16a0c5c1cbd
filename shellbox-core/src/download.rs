//! Bounded downloads built on `Machine::run` (filled in next).
use std::collections::BTreeMap;
use std::time::Duration;

use crate::{Error, Machine};

/// Budgets of [`download_files`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DownloadLimits {
    /// Most entries in the result.
    pub max_files: usize,
    /// Most bytes in the result, all files together.
    pub max_bytes: u64,
    /// Most bytes of one file.
    pub max_file_bytes: u64,
    /// Deadline of each guest command.
    pub timeout: Duration,
}

/// Reads files out of a machine under budgets.
pub async fn download_files(
    _machine: &dyn Machine,
    _paths: &[&str],
    _limits: DownloadLimits,
) -> Result<BTreeMap<String, Vec<u8>>, Error> {
    Err(Error::unsupported("not yet"))
}
