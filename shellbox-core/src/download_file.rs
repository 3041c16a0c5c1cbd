//! The bounded single-file download, built only on [`Machine::run_stream`].
//!
//! The reference's side-branch `download(source, target, max_bytes)` (REFERENCE.md 3.2):
//! regular files only, memory bounded whatever the file's size, staged beside the target
//! and renamed over it, the old target untouched on any failure or cancellation.

use std::io::Write;
use std::path::Path;

use futures::StreamExt;

use crate::validate::validate_guest_path;
use crate::{Command, Error, Event, ExitReason, Machine};

/// Exit status of [`SCRIPT`] when the source does not exist.
const MISSING: i32 = 44;
/// Exit status of [`SCRIPT`] when the source exists but is not a regular file.
const NOT_REGULAR: i32 = 45;

/// `$1` is the guest path. A regular file (after links, as `test -f` judges it) is written
/// to stdout; anything else exits with [`MISSING`] or [`NOT_REGULAR`] before any byte.
const SCRIPT: &str = r#"if [ -f "$1" ]; then exec cat -- "$1"; elif [ -e "$1" ] || [ -L "$1" ]; then exit 45; else exit 44; fi"#;

/// Prefix of the staging directory made beside the target.
pub const STAGING_PREFIX: &str = ".shellbox-download-";

/// [`Error::Unsupported`] when something other than a regular file or a symlink stands at
/// `target` (a device such as `/dev/null`, a fifo, a socket, a directory): renaming over it
/// would replace a host node that is no file of the user's.
fn refuse_special_target(target: &Path) -> Result<(), Error> {
    match std::fs::symlink_metadata(target) {
        Ok(meta) if !meta.file_type().is_file() && !meta.file_type().is_symlink() => {
            Err(Error::unsupported(format!(
                "download target {} exists and is not a regular file (a directory, device, fifo \
                 or socket); only a regular file or a symlink there is replaced",
                target.display()
            )))
        }
        _ => Ok(()),
    }
}

/// Copies the regular file `source` out of `machine` to the host file `target`, refusing
/// files larger than `max_bytes`.
///
/// The bytes stream through [`Machine::run_stream`] (a guest `sh` runs `cat`) into a file in
/// a staging directory named `.shellbox-download-*` made beside `target`, which is then
/// renamed over `target` — so memory stays bounded by the backend's chunk size, a file of
/// exactly `max_bytes` succeeds, and on any failure, or when the returned future is
/// dropped, the old `target` is untouched and the staging directory is removed. A symlink
/// at `target` is replaced, never written through. Runs as the machine's default user.
///
/// # Errors
/// - [`Error::InvalidInput`]: `source` is not absolute and normalised, or `target` has no
///   file name;
/// - [`Error::NotFound`]: `source` does not exist;
/// - [`Error::Unsupported`]: `source` is not a regular file (a directory, a device, a fifo)
///   or lies in `/proc`, `/sys` or `/dev` — the message says "regular file"; or what stands
///   at `target` is neither a regular file nor a symlink (a device, a fifo, a socket, a
///   directory), which is never replaced;
/// - [`Error::DownloadLimitExceeded`]: `source` holds more than `max_bytes` bytes;
/// - [`Error::Transfer`]: the guest command failed or was killed part way, or `target`'s
///   parent path passes through a link
///   [`resolve_host_target`](crate::transfer::resolve_host_target) refuses;
/// - [`Error::Io`]: the staging file could not be written or renamed;
/// - whatever [`Machine::run_stream`] returns (e.g. [`Error::Closed`]).
pub async fn download_file(
    machine: &(impl Machine + ?Sized),
    source: &str,
    target: &Path,
    max_bytes: u64,
) -> Result<(), Error> {
    validate_guest_path(source)?;
    if crate::validate::is_kernel_path(source) {
        return Err(Error::unsupported(format!(
            "{source} is inside a kernel-provided directory (/proc, /sys, /dev); only a regular file can be downloaded with a byte limit"
        )));
    }
    let Some(name) = target.file_name() else {
        return Err(Error::invalid(format!(
            "download target {} has no file name",
            target.display()
        )));
    };
    // Its parent path judged as every download's is (crate::transfer).
    let resolved = crate::transfer::resolve_host_target(target)?;
    let target = resolved.as_path();
    refuse_special_target(target)?;
    let parent = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => std::env::current_dir().map_err(|e| Error::io("current directory", e))?,
    };
    let staging = tempfile::Builder::new()
        .prefix(STAGING_PREFIX)
        .tempdir_in(&parent)
        .map_err(|e| {
            Error::io(
                format!("create staging directory in {}", parent.display()),
                e,
            )
        })?;
    let staged = staging.path().join(name);
    let mut file = std::fs::File::create(&staged)
        .map_err(|e| Error::io(format!("create {}", staged.display()), e))?;

    let limit = max_bytes.saturating_add(1);
    let command = Command::new("sh")
        .arg("-c")
        .arg(SCRIPT)
        .arg("sh")
        .arg(source)
        .output_limit_bytes(limit);
    let mut stream = machine.run_stream(command).await?;
    let mut written: u64 = 0;
    let mut stderr = Vec::new();
    let mut status = None;
    while let Some(event) = stream.next().await {
        match event? {
            Event::Stdout(chunk) => {
                written += chunk.len() as u64;
                if written > max_bytes {
                    return Err(Error::DownloadLimitExceeded(format!(
                        "{source} holds more than {max_bytes} bytes"
                    )));
                }
                file.write_all(&chunk)
                    .map_err(|e| Error::io(format!("write {}", staged.display()), e))?;
            }
            Event::Stderr(chunk) => {
                let room = 4096usize.saturating_sub(stderr.len());
                stderr.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Event::Exit(exit) => status = Some(exit),
        }
    }
    drop(stream);
    let Some(status) = status else {
        return Err(Error::transfer(
            source,
            "the guest command ended without a status",
        ));
    };
    if status.stdout_truncated {
        return Err(Error::DownloadLimitExceeded(format!(
            "{source} holds more than {max_bytes} bytes"
        )));
    }
    match (status.reason, status.exit_code) {
        (ExitReason::Exited, Some(0)) => {}
        (ExitReason::Exited, Some(MISSING)) => return Err(Error::not_found(source)),
        (ExitReason::Exited, Some(NOT_REGULAR)) => {
            return Err(Error::unsupported(format!(
                "{source} is not a regular file; only a regular file can be downloaded with a byte limit"
            )))
        }
        (reason, code) => {
            return Err(Error::transfer(
                source,
                format!(
                    "reading it in the machine failed ({reason:?}, exit {code:?}): {}",
                    String::from_utf8_lossy(&stderr).trim()
                ),
            ))
        }
    }
    file.sync_all()
        .map_err(|e| Error::io(format!("write {}", staged.display()), e))?;
    drop(file);
    refuse_special_target(target)?;
    std::fs::rename(&staged, target).map_err(|e| {
        Error::io(
            format!("rename {} to {}", staged.display(), target.display()),
            e,
        )
    })?;
    Ok(())
}
