//! Owner markers on machine roots, and removing what a killed owner left (issue 8,
//! item 11): the local counterpart of the Docker backend's owner labels and `gc`.
//!
//! Every machine's private directory (`shellbox-local-XXXXXX`, mode 0700, in the host temp
//! dir) holds an [`OWNER_FILE`] written before anything else of the machine exists: one
//! JSON object `{"pid": P, "start_ticks": T, "host": "H"}` naming the process that made it
//! (its pid, its start time in clock ticks since boot from field 22 of `/proc/P/stat`, so a
//! reused pid is told apart, and this host's name). [`gc`] removes the directories whose
//! owner is gone, with their pids cgroup (every process in it killed) and their
//! size-limited root filesystem; it never touches a directory without a readable marker,
//! one of another host or user, or one whose owner is alive.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use shellbox_core::Error;

use crate::root::{ETC_PREFIX, ROOT_DIR_NAME, ROOT_PREFIX};

/// The owner marker's file name inside a machine's private directory.
pub const OWNER_FILE: &str = "owner.json";

/// Who made a machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// The owner's process id.
    pub pid: u32,
    /// When it started, in clock ticks after boot (`/proc/PID/stat` field 22); `None` when
    /// it could not be read.
    pub start_ticks: Option<u64>,
    /// The host's name (`/proc/sys/kernel/hostname`).
    pub host: String,
}

/// A process's start time in clock ticks after boot, field 22 of `/proc/PID/stat`.
pub fn process_start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}

impl Owner {
    /// This process (read once).
    pub fn current() -> &'static Owner {
        static CURRENT: OnceLock<Owner> = OnceLock::new();
        CURRENT.get_or_init(|| {
            let pid = std::process::id();
            Owner {
                pid,
                start_ticks: process_start_ticks(pid),
                host: host_name(),
            }
        })
    }

    /// The marker's text.
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "pid": self.pid,
            "start_ticks": self.start_ticks,
            "host": self.host,
        })
        .to_string()
    }

    /// Parses a marker; `None` for anything else.
    pub fn from_json(text: &str) -> Option<Owner> {
        let v: serde_json::Value = serde_json::from_str(text).ok()?;
        Some(Owner {
            pid: u32::try_from(v.get("pid")?.as_u64()?).ok()?,
            start_ticks: v.get("start_ticks").and_then(serde_json::Value::as_u64),
            host: v.get("host")?.as_str()?.to_string(),
        })
    }

    /// Whether the owner still runs: a process with its pid exists and (when both are
    /// known) started at its start time. Pid 0 and unreadable start times count as alive.
    pub fn is_alive(&self) -> bool {
        if self.pid == 0 {
            return true;
        }
        if !Path::new(&format!("/proc/{}", self.pid)).exists() {
            return false;
        }
        match (self.start_ticks, process_start_ticks(self.pid)) {
            (Some(want), Some(have)) => want == have,
            _ => true,
        }
    }
}

/// Writes this process's marker into a machine's private directory `private`.
///
/// # Errors
/// [`Error::Io`] when the file cannot be written.
pub(crate) fn write_marker(private: &Path) -> Result<(), Error> {
    let path = private.join(OWNER_FILE);
    std::fs::write(&path, Owner::current().to_json())
        .map_err(|e| Error::io(format!("write owner marker {}", path.display()), e))
}

/// What [`gc`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    /// The private directories removed (their owner is gone).
    pub removed: Vec<PathBuf>,
    /// Directories whose owner is alive (left alone).
    pub kept: usize,
    /// Directories marked by another host, without a readable marker, or owned by another
    /// user (left alone).
    pub skipped: usize,
    /// Directories that should have been removed but could not be, with the reason.
    pub failed: Vec<(PathBuf, String)>,
}

/// [`gc_in`] over the host temp dir (`std::env::temp_dir()`), where machines are made.
///
/// # Errors
/// As [`gc_in`].
pub fn gc() -> Result<GcReport, Error> {
    gc_in(&std::env::temp_dir())
}

/// Removes every `shellbox-local-*` machine directory (and every `shellbox-etc-*`
/// directory of a factory's shared `/etc`) directly in `dir` whose
/// [`OWNER_FILE`] names a process of this host that no longer exists and that is owned by
/// this process's effective uid (another user's directories are skipped, also when gc
/// runs as root, as the staging gc does): first its pids
/// cgroup (every process in it killed), then its size-limited root filesystem (unmounted),
/// then the directory. Blocks (file system work).
///
/// # Errors
/// [`Error::Io`] when `dir` cannot be listed. Failures to remove single machines are in
/// [`GcReport::failed`].
pub fn gc_in(dir: &Path) -> Result<GcReport, Error> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| Error::io(format!("list {}", dir.display()), e))?;
    let this_host = host_name();
    let mut report = GcReport::default();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let machine = name.starts_with(ROOT_PREFIX);
        if !machine
            && !name.starts_with(ETC_PREFIX)
            && !name.starts_with(crate::layer::LAYER_PREFIX)
        {
            continue;
        }
        let private = entry.path();
        let is_dir = entry
            .file_type()
            .is_ok_and(|t| t.is_dir() && !t.is_symlink());
        if !is_dir {
            continue;
        }
        // Only this user's own directories: root running gc must not remove another
        // user's machines (their marker names a pid of theirs this process cannot judge
        // the way they would, and the directory is not ours to delete).
        let ours = std::fs::symlink_metadata(&private).is_ok_and(|m| {
            std::os::unix::fs::MetadataExt::uid(&m) == nix::unistd::geteuid().as_raw()
        });
        if !ours {
            report.skipped += 1;
            continue;
        }
        let owner = std::fs::read_to_string(private.join(OWNER_FILE))
            .ok()
            .and_then(|t| Owner::from_json(&t));
        let Some(owner) = owner else {
            report.skipped += 1;
            continue;
        };
        if owner.host != this_host {
            report.skipped += 1;
            continue;
        }
        if owner.is_alive() {
            report.kept += 1;
            continue;
        }
        match remove_machine_dir(&private, name, machine) {
            Ok(()) => {
                tracing::info!(dir = %private.display(), owner_pid = owner.pid, "gc removed a leaked local machine");
                report.removed.push(private);
            }
            Err(e) => report.failed.push((private, e.to_string())),
        }
    }
    Ok(report)
}

/// Removes a dead owner's directory: a machine's (`machine`: its pids cgroup and its root
/// filesystem first) or a factory's shared `/etc` (plain files).
fn remove_machine_dir(private: &Path, name: &str, machine: bool) -> Result<(), Error> {
    if machine {
        crate::cgroup::remove_leaked(name, Duration::from_secs(5))
            .map_err(|e| Error::io(format!("remove the pids cgroup of {name}"), e))?;
    }
    let root = private.join(ROOT_DIR_NAME);
    crate::root::unmount_root_fs(&root)?;
    crate::root::remove_root(&root)?;
    // A directory without a root (a failed creation) still goes.
    match shellbox_core::remove_tree(private) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(format!("remove {}", private.display()), e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_round_trip_and_liveness() {
        let me = Owner::current();
        assert_eq!(me.pid, std::process::id());
        assert!(me.start_ticks.is_some());
        assert_eq!(Owner::from_json(&me.to_json()).as_ref(), Some(me));
        assert!(me.is_alive());
        let reused = Owner {
            start_ticks: me.start_ticks.map(|t| t + 1),
            ..me.clone()
        };
        assert!(!reused.is_alive());
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let gone = Owner {
            pid,
            start_ticks: Some(1),
            host: me.host.clone(),
        };
        assert!(!gone.is_alive());
        assert!(Owner {
            pid: 0,
            start_ticks: None,
            host: String::new()
        }
        .is_alive());
        assert_eq!(Owner::from_json("{\"pid\": -1, \"host\": \"h\"}"), None);
        assert_eq!(Owner::from_json("garbage"), None);
        let no_start = Owner::from_json("{\"pid\": 7, \"start_ticks\": null, \"host\": \"h\"}");
        assert_eq!(no_start.map(|o| o.start_ticks), Some(None));
    }
}
