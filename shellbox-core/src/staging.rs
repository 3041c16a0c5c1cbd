//! Download staging directories that say who made them, and removing those a killed
//! process left behind.
//!
//! Every download (the tree downloads of [`StagedDownload`](crate::transfer::StagedDownload)
//! and the bounded [`download_file`](crate::download_file)) writes into a staging directory
//! beside its target and removes it when it ends, whether it landed, failed or was
//! cancelled. A process killed part way (`SIGKILL`, a crash) cannot, so:
//!
//! - the directory's name records its owner:
//!   `.shellbox-download-<pid>-<start ticks>-<unique>`, where the start ticks are field 22
//!   of `/proc/<pid>/stat` (when the process started, in clock ticks after boot), so a
//!   reused pid is told apart from the owner;
//! - before the directory is made, an entry of the same name is written to this host's
//!   staging registry ([`registry_dir`]) holding the directory's path, and it is removed
//!   after the directory is; the registry is a private directory (0700, owned by this
//!   user) in the user's state directory, so it survives a reboot as the staging
//!   directories beside the targets do;
//! - [`gc`] (what `shellbox gc` runs) reads the registry and removes the directories of
//!   owners that no longer run, never one whose owner is alive, one that is not a real
//!   directory owned by this user, or one whose name is not the entry's.
//!
//! When the registry cannot be used (no writable state directory), a download still runs;
//! only its leftovers, should it be killed, are not found by [`gc`] (a warning is logged).

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::archive::make_tree_writable;
use crate::Error;

/// The name prefix of every download staging directory (REFERENCE.md 3.2).
pub const STAGING_PREFIX: &str = ".shellbox-download-";

/// The process that made a staging directory, as its name records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StagingOwner {
    /// Its process id.
    pub pid: u32,
    /// When it started, in clock ticks after boot (`/proc/<pid>/stat` field 22); 0 when it
    /// could not be read (then only the pid is compared).
    pub start_ticks: u64,
}

/// A process's start time in clock ticks after boot, field 22 of `/proc/<pid>/stat`.
pub fn process_start_ticks(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

impl StagingOwner {
    /// This process (its start time read once per pid, so a forked child is itself).
    pub fn current() -> StagingOwner {
        static CACHE: Mutex<Option<StagingOwner>> = Mutex::new(None);
        let pid = std::process::id();
        let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
        match *cache {
            Some(owner) if owner.pid == pid => owner,
            _ => {
                let owner = StagingOwner {
                    pid,
                    start_ticks: process_start_ticks(pid).unwrap_or(0),
                };
                *cache = Some(owner);
                owner
            }
        }
    }

    /// The owner a staging directory's file name records, `None` for a name that is not
    /// one.
    pub fn from_name(name: &str) -> Option<StagingOwner> {
        let mut parts = name.strip_prefix(STAGING_PREFIX)?.split('-');
        let pid = parts.next()?.parse().ok()?;
        let start_ticks = parts.next()?.parse().ok()?;
        parts.next().filter(|unique| !unique.is_empty())?;
        Some(StagingOwner { pid, start_ticks })
    }

    /// Whether the owner still runs on this host: a process with its pid exists and (when
    /// both are known) started at its start time. Pid 0 counts as alive.
    pub fn is_alive(&self) -> bool {
        if self.pid == 0 {
            return true;
        }
        if fs::symlink_metadata(format!("/proc/{}", self.pid)).is_err() {
            return false;
        }
        match (self.start_ticks, process_start_ticks(self.pid)) {
            (0, _) | (_, None) => true,
            (want, Some(have)) => want == have,
        }
    }
}

/// A fresh staging directory name owned by this process.
fn fresh_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let owner = StagingOwner::current();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!(
        "{STAGING_PREFIX}{}-{}-{:x}{:x}",
        owner.pid,
        owner.start_ticks,
        nanos,
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

fn host_name() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty() && !s.contains('/') && s != "." && s != "..")
        .unwrap_or_else(|| "unknown".to_string())
}

/// This process's effective uid (`/proc/self/status`).
fn effective_uid() -> Option<u32> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// This host's staging registry: `$XDG_STATE_HOME/shellbox/download-staging/<host name>`,
/// or `$HOME/.local/state/shellbox/download-staging/<host name>` when `XDG_STATE_HOME` is
/// not an absolute path, or `<temp dir>/shellbox-download-staging-<uid>/<host name>`
/// without a home. One registry per host name, so a home shared between hosts never
/// judges another host's processes.
pub fn registry_dir() -> PathBuf {
    let absolute = |var: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    let base = absolute("XDG_STATE_HOME")
        .map(|s| s.join("shellbox"))
        .or_else(|| absolute("HOME").map(|h| h.join(".local/state/shellbox")))
        .unwrap_or_else(|| {
            let uid = effective_uid().map_or_else(|| "unknown".to_string(), |u| u.to_string());
            std::env::temp_dir().join(format!("shellbox-download-staging-{uid}"))
        });
    base.join("download-staging").join(host_name())
}

/// Whether `dir` is a real directory (not a link) owned by this user and reachable by no
/// one else (no group or other permission bits).
fn is_private_dir(dir: &Path) -> bool {
    let Ok(meta) = fs::symlink_metadata(dir) else {
        return false;
    };
    meta.is_dir() && Some(meta.uid()) == effective_uid() && meta.mode() & 0o077 == 0
}

/// The registry, created (0700) when missing; `None` (with a warning) when it cannot be
/// made or is not a private directory of this user.
fn open_registry(dir: &Path) -> Option<PathBuf> {
    if !is_private_dir(dir) {
        if let Some(parent) = dir.parent() {
            let _ = fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent);
        }
        match fs::DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                tracing::warn!(registry = %dir.display(), "cannot make the download staging registry ({e}); `shellbox gc` will not find this download's leftovers if it is killed");
                return None;
            }
        }
        if !is_private_dir(dir) {
            tracing::warn!(registry = %dir.display(), "the download staging registry is not a private directory of this user; `shellbox gc` will not find this download's leftovers if it is killed");
            return None;
        }
    }
    Some(dir.to_path_buf())
}

/// A download's staging directory, registered for [`gc`]; dropping it removes the
/// directory (and whatever is in it, read-only parts included), then its registry entry.
#[derive(Debug)]
pub struct StagingDir {
    path: PathBuf,
    entry: Option<PathBuf>,
}

impl StagingDir {
    /// Makes a staging directory (mode 0700) in `parent`, registered in [`registry_dir`].
    ///
    /// # Errors
    /// The [`io::Error`] of `mkdir` (after a few retries when the name is taken).
    pub fn create_in(parent: &Path) -> io::Result<StagingDir> {
        Self::create_in_registry(parent, open_registry(&registry_dir()).as_deref())
    }

    /// [`create_in`](Self::create_in) with the registry `registry` (`None`: unregistered).
    ///
    /// # Errors
    /// As [`create_in`](Self::create_in).
    pub fn create_in_registry(parent: &Path, registry: Option<&Path>) -> io::Result<StagingDir> {
        let mut last = None;
        for _ in 0..16 {
            let name = fresh_name();
            let path = parent.join(&name);
            let entry = registry.and_then(|r| write_entry(r, &name, &path));
            match fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(StagingDir { path, entry }),
                Err(e) => {
                    if let Some(entry) = entry {
                        let _ = fs::remove_file(entry);
                    }
                    if e.kind() != io::ErrorKind::AlreadyExists {
                        return Err(e);
                    }
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("no free staging name")))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Writes the registry entry `registry/name` naming `path`; `None` (with a warning) when
/// it cannot be written.
fn write_entry(registry: &Path, name: &str, path: &Path) -> Option<PathBuf> {
    let entry = registry.join(name);
    let Some(text) = path.to_str() else {
        tracing::warn!(path = %path.display(), "a staging path that is not UTF-8 is not registered for `shellbox gc`");
        return None;
    };
    let written = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&entry)
        .and_then(|mut f| f.write_all(text.as_bytes()));
    match written {
        Ok(()) => Some(entry),
        Err(e) => {
            let _ = fs::remove_file(&entry);
            tracing::warn!(entry = %entry.display(), "cannot register a download's staging directory ({e}); `shellbox gc` will not find it if this process is killed");
            None
        }
    }
}

impl Drop for StagingDir {
    fn drop(&mut self) {
        make_tree_writable(&self.path);
        match crate::remove_tree(&self.path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                // The entry stays, so `shellbox gc` removes it once this process is gone.
                tracing::warn!(dir = %self.path.display(), "could not remove a download's staging directory: {e}");
                return;
            }
        }
        if let Some(entry) = &self.entry {
            let _ = fs::remove_file(entry);
        }
    }
}

/// What [`gc`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StagingGcReport {
    /// The staging directories removed (their owner is gone).
    pub removed: Vec<PathBuf>,
    /// Registered directories whose owner is alive (left alone).
    pub kept: usize,
    /// Entries dropped without removing anything: the directory was already gone, or what
    /// stands there is not a directory of this user with the entry's name (left alone).
    pub dropped: usize,
    /// Directories that should have been removed but could not be, with the reason (their
    /// entries stay for the next run).
    pub failed: Vec<(PathBuf, String)>,
}

/// [`gc_in`] over this host's registry ([`registry_dir`]); nothing to do when it does not
/// exist.
///
/// # Errors
/// As [`gc_in`].
pub fn gc() -> Result<StagingGcReport, Error> {
    let dir = registry_dir();
    if fs::symlink_metadata(&dir).is_err() {
        return Ok(StagingGcReport::default());
    }
    gc_in(&dir)
}

/// Removes the download staging directories registered in `registry` whose owner (as the
/// entry's name records it) no longer runs, then their entries. A directory is removed
/// only when it is a real directory (not a link) owned by this user whose file name is the
/// entry's own. Blocks (file system work).
///
/// # Errors
/// [`Error::Transfer`] when `registry` is not a private directory of this user (it is not
/// read: anyone who could write it could name any directory), [`Error::Io`] when it cannot
/// be listed. Failures to remove single directories are in [`StagingGcReport::failed`].
pub fn gc_in(registry: &Path) -> Result<StagingGcReport, Error> {
    if !is_private_dir(registry) {
        return Err(Error::transfer(
            registry.display().to_string(),
            "the download staging registry is not a private directory (mode 0700) of this user; not read",
        ));
    }
    let entries =
        fs::read_dir(registry).map_err(|e| Error::io(format!("list {}", registry.display()), e))?;
    let uid = effective_uid();
    let mut report = StagingGcReport::default();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(owner) = StagingOwner::from_name(name) else {
            continue;
        };
        if owner.is_alive() {
            report.kept += 1;
            continue;
        }
        let entry_path = entry.path();
        let dir = fs::read_to_string(&entry_path).ok().map(PathBuf::from);
        let dir = dir.filter(|d| d.is_absolute() && d.file_name().is_some_and(|n| n == name));
        let Some(dir) = dir else {
            // Killed before the directory was made (or a bad entry): nothing to remove.
            let _ = fs::remove_file(&entry_path);
            report.dropped += 1;
            continue;
        };
        match fs::symlink_metadata(&dir) {
            Ok(meta) if meta.is_dir() && Some(meta.uid()) == uid => {
                make_tree_writable(&dir);
                match crate::remove_tree(&dir) {
                    Ok(()) => {
                        tracing::info!(dir = %dir.display(), owner_pid = owner.pid, "gc removed a killed download's staging directory");
                        let _ = fs::remove_file(&entry_path);
                        report.removed.push(dir);
                    }
                    Err(e) => report.failed.push((dir, e.to_string())),
                }
            }
            Ok(_) => {
                let _ = fs::remove_file(&entry_path);
                report.dropped += 1;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let _ = fs::remove_file(&entry_path);
                report.dropped += 1;
            }
            Err(e) => report.failed.push((dir, e.to_string())),
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn private_registry(tmp: &Path) -> PathBuf {
        let registry = tmp.join("registry");
        fs::DirBuilder::new().mode(0o700).create(&registry).unwrap();
        registry
    }

    /// A pid that ran and ended (no process has it right after).
    fn dead_owner() -> StagingOwner {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        StagingOwner {
            pid,
            start_ticks: 1,
        }
    }

    #[test]
    fn names_record_the_owner() {
        let me = StagingOwner::current();
        assert_eq!(me.pid, std::process::id());
        assert!(me.start_ticks > 0);
        assert!(me.is_alive());
        let name = fresh_name();
        assert_eq!(StagingOwner::from_name(&name), Some(me));
        let reused = StagingOwner {
            start_ticks: me.start_ticks + 1,
            ..me
        };
        assert!(!reused.is_alive());
        assert!(!dead_owner().is_alive());
        for bad in [
            ".shellbox-download-",
            ".shellbox-download-12",
            ".shellbox-download-12-34",
            ".shellbox-download-x-34-ab",
            ".shellbox-upload-12-34-ab",
        ] {
            assert_eq!(StagingOwner::from_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_dropped_staging_directory_leaves_no_entry() {
        let tmp = tempfile::tempdir().unwrap();
        let registry = private_registry(tmp.path());
        let stage = StagingDir::create_in_registry(tmp.path(), Some(&registry)).unwrap();
        let name = stage.path().file_name().unwrap().to_owned();
        assert_eq!(
            fs::read_to_string(registry.join(&name)).unwrap(),
            stage.path().to_str().unwrap()
        );
        fs::create_dir(stage.path().join("ro")).unwrap();
        fs::set_permissions(
            stage.path().join("ro"),
            std::os::unix::fs::PermissionsExt::from_mode(0o500),
        )
        .unwrap();
        drop(stage);
        assert_eq!(fs::read_dir(&registry).unwrap().count(), 0);
        assert!(!tmp.path().join(&name).exists());
    }

    /// A live owner's directory stays; a dead owner's goes with its entry; an entry whose
    /// directory is gone, one without a path and one naming a directory of another name are
    /// dropped without touching anything.
    #[test]
    fn gc_removes_only_dead_owners_directories() {
        let tmp = tempfile::tempdir().unwrap();
        let registry = private_registry(tmp.path());
        let live = StagingDir::create_in_registry(tmp.path(), Some(&registry)).unwrap();
        fs::write(live.path().join("item"), b"live").unwrap();

        let dead = dead_owner();
        let stale_name = format!("{STAGING_PREFIX}{}-{}-abc", dead.pid, dead.start_ticks);
        let stale = tmp.path().join(&stale_name);
        fs::create_dir_all(stale.join("item/ro")).unwrap();
        fs::set_permissions(
            stale.join("item/ro"),
            std::os::unix::fs::PermissionsExt::from_mode(0o500),
        )
        .unwrap();
        fs::write(registry.join(&stale_name), stale.to_str().unwrap()).unwrap();

        let gone = format!("{STAGING_PREFIX}{}-{}-def", dead.pid, dead.start_ticks);
        fs::write(
            registry.join(&gone),
            tmp.path().join(&gone).to_str().unwrap(),
        )
        .unwrap();
        let empty = format!("{STAGING_PREFIX}{}-{}-123", dead.pid, dead.start_ticks);
        fs::write(registry.join(&empty), b"").unwrap();
        let keep = tmp.path().join("keep");
        fs::create_dir(&keep).unwrap();
        let renamed = format!("{STAGING_PREFIX}{}-{}-456", dead.pid, dead.start_ticks);
        fs::write(registry.join(&renamed), keep.to_str().unwrap()).unwrap();

        let report = gc_in(&registry).unwrap();
        assert_eq!(report.removed, vec![stale.clone()]);
        assert_eq!((report.kept, report.dropped), (1, 3), "{report:?}");
        assert!(report.failed.is_empty(), "{report:?}");
        assert!(!stale.exists());
        assert!(
            keep.exists(),
            "a directory of another name is never removed"
        );
        assert_eq!(fs::read(live.path().join("item")).unwrap(), b"live");
        let left: Vec<_> = fs::read_dir(&registry)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, [live.path().file_name().unwrap().to_owned()]);
        drop(live);
        assert_eq!(fs::read_dir(&registry).unwrap().count(), 0);
    }

    #[test]
    fn a_registry_others_can_write_is_not_read() {
        let tmp = tempfile::tempdir().unwrap();
        let registry = tmp.path().join("open");
        fs::DirBuilder::new().mode(0o777).create(&registry).unwrap();
        fs::set_permissions(
            &registry,
            std::os::unix::fs::PermissionsExt::from_mode(0o777),
        )
        .unwrap();
        let err = gc_in(&registry).unwrap_err();
        assert!(matches!(err, Error::Transfer { .. }), "{err}");
        // Nor is it written: a staging directory made with it is unregistered.
        let stage = StagingDir::create_in_registry(tmp.path(), open_registry(&registry).as_deref())
            .unwrap();
        assert!(stage.entry.is_none());
        assert_eq!(fs::read_dir(&registry).unwrap().count(), 0);
    }
}
