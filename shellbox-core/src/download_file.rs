//! The bounded single-file download, built only on [`Machine::run_stream`].
//!
//! The reference's side-branch `download(source, target, max_bytes)` (REFERENCE.md 3.2):
//! regular files only, memory bounded whatever the file's size, staged beside the target
//! and renamed over it, the old target untouched on any failure or cancellation.

use std::io::Write;
use std::path::Path;

use futures::StreamExt;

use crate::staging::StagingDir;
use crate::validate::validate_guest_path;
use crate::{Command, Error, Event, ExitReason, Machine};

/// Exit status of [`SCRIPT`] when the source does not exist.
const MISSING: i32 = 44;
/// Exit status of [`SCRIPT`] when the source exists but is not a regular file.
const NOT_REGULAR: i32 = 45;
/// Exit status of [`SCRIPT`] when the source resolves into `/proc`, `/sys` or `/dev` (the
/// resolved path on stderr).
const KERNEL: i32 = 46;
/// Exit status of [`SCRIPT`] when the source could not be resolved in the machine.
const UNRESOLVED: i32 = 47;

/// `$1` is the guest path, judged by what it resolves to in the machine, before any byte
/// is written to stdout:
///
/// 1. missing → [`MISSING`]; a dangling link → [`NOT_REGULAR`];
/// 2. resolved with `readlink -f` (every link, absolute ones from the guest's `/`); a
///    result at or under `/proc`, `/sys` or `/dev` → [`KERNEL`]; not a regular file →
///    [`NOT_REGULAR`];
/// 3. the resolved path is opened once (fd 3) and, where the machine has
///    `/proc/self/fd`, what was opened is judged again by that link (a command swapping a
///    link between the check and the open cannot slip a kernel file in), then `cat`
///    copies fd 3.
///
/// Before the bytes, one line `mode NNN` on stderr: the file's permission bits in octal
/// (`stat -c %a`; where the machine has no `stat`, 755 or 644 by `test -x`), which the
/// staged copy takes.
///
/// `$(…; echo x)` then `${r%?x}` keeps a trailing newline of a file name.
const SCRIPT: &str = r#"if [ ! -e "$1" ]; then if [ -L "$1" ]; then exit 45; fi; exit 44; fi
r=$(readlink -f -- "$1" && echo x) || exit 47
r=${r%?x}
case $r in /proc|/proc/*|/sys|/sys/*|/dev|/dev/*) printf %s "$r" >&2; exit 46;; esac
[ -f "$r" ] || exit 45
{
if [ -L /proc/self/fd/3 ]; then
o=$(readlink /proc/self/fd/3 && echo x) || exit 47
o=${o%?x}
case $o in /proc|/proc/*|/sys|/sys/*|/dev|/dev/*) printf %s "$o" >&2; exit 46;; esac
[ -f /proc/self/fd/3 ] || exit 45
fi
m=$(stat -c %a "$r" 2>/dev/null) || m=
case $m in [0-7]|[0-7][0-7]|[0-7][0-7][0-7]|[0-7][0-7][0-7][0-7]) ;; *) if [ -x "$r" ]; then m=755; else m=644; fi;; esac
printf 'mode %s\n' "$m" >&2
exec cat <&3
} 3<"$r""#;

/// [`Error::Unsupported`] when something other than a regular file or a symlink stands at
/// `target` (a device such as `/dev/null`, a fifo, a socket, a directory): renaming over it
/// would replace a host node that is no file of the user's. Shared by every backend's
/// `download_file` (core's streamed one, local's host-side one).
///
/// # Errors
/// [`Error::Unsupported`] as above; a missing target or a failed `lstat` is `Ok` (the
/// rename that follows reports what is wrong).
pub fn refuse_special_download_target(target: &Path) -> Result<(), Error> {
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

/// Gives a staged download the source's permission bits (`mode`: only `rwx` for user, group
/// and others are kept; set-user-ID, set-group-ID and sticky are dropped), as the unbounded
/// [`Machine::download`] keeps a file's mode (second break-it pass of issue 12: a 0600
/// target became 0644). Shared by every backend's `download_file`.
///
/// # Errors
/// [`Error::Io`] when the mode cannot be set.
pub fn set_download_mode(file: &std::fs::File, staged: &Path, mode: u32) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt;
    file.set_permissions(std::fs::Permissions::from_mode(mode & 0o777))
        .map_err(|e| Error::io(format!("set the mode of {}", staged.display()), e))
}

/// Copies the regular file `source` out of `machine` to the host file `target`, refusing
/// files larger than `max_bytes`.
///
/// `source` is judged by what it resolves to in the machine, as the guest sees it
/// (REFERENCE.md 3.2 checks it with the guest's `test -f`, which follows links): a symlink,
/// or a chain of them, to a regular file is followed; a path that resolves into `/proc`,
/// `/sys` or `/dev`, through a link anywhere on the way, is refused even where it reaches
/// a regular file there (`/dev/shm/x`, `/proc/self/environ`).
///
/// The bytes stream through [`Machine::run_stream`] (a guest `sh` runs `cat`) into a file in
/// a staging directory named `.shellbox-download-*` made beside `target` (its name records
/// this process, see [`crate::staging`], so `shellbox gc` removes it should the process be
/// killed), which is then renamed over `target` — so memory stays bounded by the backend's
/// chunk size, a file of exactly `max_bytes` succeeds, and on any failure, or when the
/// returned future is dropped, the old `target` is untouched and the staging directory is
/// removed. A symlink at `target` is replaced, never written through. The new file takes the
/// source's permission bits ([`set_download_mode`]). Runs as the machine's default user.
///
/// # Errors
/// - [`Error::InvalidInput`]: `source` is not absolute and normalised, or `target` has no
///   file name;
/// - [`Error::NotFound`]: `source` does not exist;
/// - [`Error::Unsupported`]: `source` is not a regular file (a directory, a device, a fifo,
///   a dangling link) or lies in, or resolves into, `/proc`, `/sys` or `/dev` — the
///   message says "regular file"; or what stands
///   at `target` is neither a regular file nor a symlink (a device, a fifo, a socket, a
///   directory), which is never replaced;
/// - [`Error::DownloadLimitExceeded`]: `source` holds more than `max_bytes` bytes;
/// - [`Error::Transfer`]: the guest command failed or was killed part way, `source` could
///   not be resolved in the machine (no `readlink -f` there), or `target`'s
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
    if target.file_name().is_none() {
        return Err(Error::invalid(format!(
            "download target {} has no file name",
            target.display()
        )));
    }
    // Its parent path judged as every download's is (crate::transfer).
    let resolved = crate::transfer::resolve_host_target(target)?;
    let target = resolved.as_path();
    refuse_special_download_target(target)?;
    let parent = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => std::env::current_dir().map_err(|e| Error::io("current directory", e))?,
    };
    let staging = StagingDir::create_in(&parent).map_err(|e| {
        Error::io(
            format!("create staging directory in {}", parent.display()),
            e,
        )
    })?;
    let staged = staging.path().join("item");
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
        (ExitReason::Exited, Some(KERNEL)) => {
            return Err(Error::unsupported(format!(
                "{source} resolves to {} in the machine, inside a kernel-provided directory \
                 (/proc, /sys, /dev); only a regular file can be downloaded with a byte limit",
                String::from_utf8_lossy(&stderr).trim()
            )))
        }
        (ExitReason::Exited, Some(UNRESOLVED)) => {
            return Err(Error::transfer(
                source,
                format!(
                    "it could not be resolved in the machine (readlink -f): {}",
                    String::from_utf8_lossy(&stderr).trim()
                ),
            ))
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
    let mode = std::str::from_utf8(&stderr)
        .ok()
        .and_then(|text| text.lines().find_map(|l| l.strip_prefix("mode ")))
        .and_then(|m| u32::from_str_radix(m.trim(), 8).ok())
        .unwrap_or(0o644);
    set_download_mode(&file, &staged, mode)?;
    file.sync_all()
        .map_err(|e| Error::io(format!("write {}", staged.display()), e))?;
    drop(file);
    refuse_special_download_target(target)?;
    std::fs::rename(&staged, target).map_err(|e| {
        Error::io(
            format!("rename {} to {}", staged.display(), target.display()),
            e,
        )
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// Runs [`SCRIPT`] on `source` with this host's `sh`, `fake` (a directory of programs)
    /// first on `PATH`; returns (exit status, stdout, stderr).
    fn script(source: &Path, fake: &Path) -> (Option<i32>, String, String) {
        let path = format!(
            "{}:{}",
            fake.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(SCRIPT)
            .arg("sh")
            .arg(source)
            .env("PATH", path)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// A command that swaps a directory on the resolved path for a link into `/proc` right
    /// after the script resolved it (here a `readlink` that does so once it has answered
    /// `-f`) gets the kernel file opened, and the second check, on what fd 3 holds, refuses
    /// it before any byte is written. Without the swap the same file is copied.
    #[test]
    fn a_link_swapped_in_after_resolving_is_refused_by_what_was_opened() {
        if !Path::new("/proc/self/fd").is_dir() {
            eprintln!("SKIP: no /proc/self/fd here");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let race = tmp.path().join("race");
        std::fs::create_dir(&race).unwrap();
        std::fs::write(race.join("environ"), b"benign").unwrap();
        let fake = tmp.path().join("bin");
        std::fs::create_dir(&fake).unwrap();
        let real = std::process::Command::new("sh")
            .args(["-c", "command -v readlink"])
            .output()
            .unwrap();
        let real = String::from_utf8_lossy(&real.stdout).trim().to_string();
        assert!(real.starts_with('/'), "no readlink on this host");
        let readlink = fake.join("readlink");
        std::fs::write(
            &readlink,
            format!(
                "#!/bin/sh\n\"{real}\" \"$@\" || exit\nif [ \"$1\" = -f ] && [ -e \"{swap}\" ]; then rm -r \"{race}\" && ln -s /proc/self \"{race}\"; fi\n",
                swap = tmp.path().join("swap").display(),
                race = race.display(),
            ),
        )
        .unwrap();
        std::fs::set_permissions(&readlink, std::fs::Permissions::from_mode(0o755)).unwrap();

        let source = race.join("environ");
        let (code, out, err) = script(&source, &fake);
        assert_eq!((code, out.as_str()), (Some(0), "benign"), "{err}");

        std::fs::write(tmp.path().join("swap"), b"").unwrap();
        let (code, out, err) = script(&source, &fake);
        assert_eq!(code, Some(KERNEL), "stdout {out:?}, stderr {err:?}");
        assert_eq!(out, "", "no byte of the kernel file");
        assert!(err.starts_with("/proc/"), "{err}");
    }
}
