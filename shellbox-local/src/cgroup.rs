//! A pids cgroup per machine: a bounded process count (issue 8, item 6).
//!
//! `RLIMIT_NPROC` does nothing for UID 0, so a root host process bounds each machine with
//! the pids controller instead, on whichever hierarchy the host has it:
//!
//! - **cgroup v2** (most hosts): a cgroup2 mount whose `cgroup.controllers` lists `pids`;
//!   the factory enables `+pids` in the mount root's and in `<mount>/shellbox-local`'s
//!   `cgroup.subtree_control`;
//! - **cgroup v1**: the mount of the `pids` hierarchy (e.g. `/sys/fs/cgroup/pids`).
//!
//! v2 is preferred when both exist. Each machine gets `<mount>/shellbox-local/<name>` (its
//! name is that of its private root directory, `shellbox-local-XXXXXX`, so `gc` finds the
//! cgroup of a leaked root), made when the machine is created with `pids.max` set to the
//! spec's `pids_limit`. Every command's launcher writes itself into the cgroup's
//! `cgroup.procs` before it execs bwrap, so bwrap and everything the command starts are
//! counted and nothing escapes; the command's cgroup namespace (bwrap's
//! `--unshare-cgroup-try`) is rooted there. A `fork` or `clone` beyond the limit fails
//! with `EAGAIN`. Closing the machine stops new tasks (`pids.max` 0), kills every process
//! listed in `cgroup.procs` (v2: `cgroup.kill`) and removes the cgroup.
//!
//! Where no cgroup can be made (a non-root host process, no pids controller, a cgroup2
//! root that may not delegate controllers), machines run without one and only the
//! per-command `RLIMIT_NPROC` (host tasks + 256, per UID) applies, as before.

use std::fs;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The directory below a pids hierarchy's mount point holding every machine's cgroup.
pub const CGROUP_BASE_NAME: &str = "shellbox-local";

/// Which cgroup version the pids controller is used through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    /// The unified hierarchy (cgroup2).
    V2,
    /// The legacy `pids` hierarchy.
    V1,
}

/// The mount points of a cgroup2 hierarchy and of a cgroup v1 hierarchy carrying `pids`,
/// from the text of `/proc/self/mountinfo` (field 5 is the mount point; after the `-`
/// separator come the filesystem type, the source and the super options).
pub fn pids_mounts(mountinfo: &str) -> (Option<PathBuf>, Option<PathBuf>) {
    let (mut v2, mut v1) = (None, None);
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        let (Some(point), Some(fstype)) = (fields.get(4), fields.get(sep + 1)) else {
            continue;
        };
        let point = PathBuf::from(crate::root::decode_mountinfo(point));
        match *fstype {
            "cgroup2" if v2.is_none() => v2 = Some(point),
            "cgroup"
                if v1.is_none()
                    && fields
                        .get(sep + 3)
                        .is_some_and(|o| o.split(',').any(|o| o == "pids")) =>
            {
                v1 = Some(point)
            }
            _ => {}
        }
    }
    (v2, v1)
}

/// Where machine cgroups are made: `<mount>/shellbox-local` of the chosen hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupBase {
    /// The cgroup version.
    pub version: CgroupVersion,
    /// `<mount>/shellbox-local`.
    pub dir: PathBuf,
}

fn write_file(path: &Path, value: &str) -> std::io::Result<()> {
    fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|mut f| f.write_all(value.as_bytes()))
        .map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("write {value:?} to {}: {e}", path.display()),
            )
        })
}

impl CgroupBase {
    /// Finds the host's pids controller (v2 first) and prepares `<mount>/shellbox-local`.
    ///
    /// # Errors
    /// Why no machine cgroup can be made here (no pids controller, not permitted).
    pub fn setup() -> std::io::Result<Self> {
        let info = fs::read_to_string("/proc/self/mountinfo")?;
        let (v2, v1) = pids_mounts(&info);
        let mut why = Vec::new();
        if let Some(mount) = v2 {
            match Self::setup_v2(&mount) {
                Ok(base) => return Ok(base),
                Err(e) => why.push(format!("cgroup2 at {}: {e}", mount.display())),
            }
        }
        if let Some(mount) = v1 {
            let dir = mount.join(CGROUP_BASE_NAME);
            match fs::create_dir(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    return Err(std::io::Error::new(
                        e.kind(),
                        format!("mkdir {}: {e}", dir.display()),
                    ))
                }
            }
            return Ok(Self {
                version: CgroupVersion::V1,
                dir,
            });
        }
        why.push("no cgroup v1 pids hierarchy".into());
        Err(std::io::Error::other(why.join("; ")))
    }

    fn setup_v2(mount: &Path) -> std::io::Result<Self> {
        let controllers = fs::read_to_string(mount.join("cgroup.controllers"))?;
        if !controllers.split_whitespace().any(|c| c == "pids") {
            return Err(std::io::Error::other(
                "the pids controller is not available",
            ));
        }
        let dir = mount.join(CGROUP_BASE_NAME);
        let enabled = |d: &Path| {
            fs::read_to_string(d.join("cgroup.subtree_control"))
                .is_ok_and(|s| s.split_whitespace().any(|c| c == "pids"))
        };
        if !enabled(mount) {
            write_file(&mount.join("cgroup.subtree_control"), "+pids")?;
        }
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        if !enabled(&dir) {
            write_file(&dir.join("cgroup.subtree_control"), "+pids")?;
        }
        Ok(Self {
            version: CgroupVersion::V2,
            dir,
        })
    }
}

/// One machine's pids cgroup, with `cgroup.procs` open for its launchers.
#[derive(Debug)]
pub struct MachineCgroup {
    version: CgroupVersion,
    dir: PathBuf,
    procs: OwnedFd,
}

impl MachineCgroup {
    /// Makes `<base>/<name>` with `pids.max` = `pids_limit`.
    ///
    /// # Errors
    /// The failing `mkdir` or write; the half-made cgroup is removed.
    pub fn create(base: &CgroupBase, name: &str, pids_limit: u32) -> std::io::Result<Self> {
        let dir = base.dir.join(name);
        fs::create_dir(&dir)
            .map_err(|e| std::io::Error::new(e.kind(), format!("mkdir {}: {e}", dir.display())))?;
        let made = (|| {
            write_file(&dir.join("pids.max"), &pids_limit.to_string())?;
            let procs = fs::OpenOptions::new()
                .write(true)
                .open(dir.join("cgroup.procs"))?;
            Ok(OwnedFd::from(procs))
        })();
        match made {
            Ok(procs) => Ok(Self {
                version: base.version,
                dir,
                procs,
            }),
            Err(e) => {
                let _ = fs::remove_dir(&dir);
                Err(e)
            }
        }
    }

    /// The cgroup's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The open `cgroup.procs` a launcher writes `0` (itself) to.
    pub fn procs_fd(&self) -> RawFd {
        self.procs.as_raw_fd()
    }

    /// Stops new tasks in the cgroup (`pids.max` 0) and SIGKILLs every process in it
    /// (v2: `cgroup.kill` where the kernel has it), without waiting; errors are ignored
    /// ([`kill_and_remove`](Self::kill_and_remove) kills again while it waits).
    pub fn kill(&self) {
        let _ = write_file(&self.dir.join("pids.max"), "0");
        kill_once(self.version, &self.dir);
    }

    /// Sets `pids.max` (after [`kill`](Self::kill) set it to 0, when the machine goes on).
    ///
    /// # Errors
    /// The failing write.
    pub fn set_pids_max(&self, pids_limit: u32) -> std::io::Result<()> {
        write_file(&self.dir.join("pids.max"), &pids_limit.to_string())
    }

    /// Waits up to `wait` until the cgroup holds no process (killing again meanwhile).
    pub fn wait_empty(&self, wait: Duration) {
        let started = Instant::now();
        loop {
            let empty = fs::read_to_string(self.dir.join("cgroup.procs"))
                .map(|t| t.trim().is_empty())
                .unwrap_or(true);
            if empty || started.elapsed() >= wait {
                return;
            }
            kill_once(self.version, &self.dir);
            std::thread::sleep(Duration::from_micros(250));
        }
    }

    /// Kills every process of the cgroup and removes it, waiting up to `wait` for the
    /// killed processes to be reaped.
    ///
    /// # Errors
    /// The cgroup is still busy after `wait`, or cannot be removed.
    pub fn kill_and_remove(&self, wait: Duration) -> std::io::Result<()> {
        kill_and_remove(self.version, &self.dir, wait)
    }
}

/// Stops new tasks in the cgroup at `dir` (`pids.max` 0), SIGKILLs every process in it
/// (v2: `cgroup.kill` where the kernel has it) and removes it, retrying for up to `wait`
/// while killed processes are reaped. A missing cgroup is not an error.
///
/// # Errors
/// The cgroup is still busy after `wait`, or cannot be removed.
pub fn kill_and_remove(version: CgroupVersion, dir: &Path, wait: Duration) -> std::io::Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    let _ = write_file(&dir.join("pids.max"), "0");
    let started = Instant::now();
    let mut pause = Duration::from_micros(250);
    loop {
        match fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if started.elapsed() >= wait => {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("remove cgroup {}: {e}", dir.display()),
                ))
            }
            Err(_) => {
                kill_once(version, dir);
                // Killed processes are usually reaped within a millisecond.
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(5));
            }
        }
    }
}

/// SIGKILLs every process of the cgroup at `dir`: v2's `cgroup.kill` where the kernel has
/// it, else each pid of `cgroup.procs`.
fn kill_once(version: CgroupVersion, dir: &Path) {
    let killed_by_kernel =
        version == CgroupVersion::V2 && write_file(&dir.join("cgroup.kill"), "1").is_ok();
    if !killed_by_kernel {
        let procs = fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            // SAFETY: kill(2) with a pid read from the cgroup; no memory is touched.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// Kills and removes the cgroup named `name` (a machine's private directory name) in
/// either hierarchy, if it exists: for `gc`, which knows the name of a leaked machine but
/// not which hierarchy its factory used. Makes nothing.
///
/// # Errors
/// `name` is not a plain `shellbox-local-*` name, or the cgroup stays busy after `wait`.
pub fn remove_leaked(name: &str, wait: Duration) -> std::io::Result<()> {
    if !name.starts_with(crate::root::ROOT_PREFIX) || name.contains('/') || name.contains("..") {
        return Err(std::io::Error::other(format!(
            "not a machine name: {name:?}"
        )));
    }
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let (v2, v1) = pids_mounts(&info);
    for (version, mount) in [(CgroupVersion::V2, v2), (CgroupVersion::V1, v1)] {
        if let Some(mount) = mount {
            kill_and_remove(version, &mount.join(CGROUP_BASE_NAME).join(name), wait)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_v1_pids_and_v2_mounts() {
        let hybrid = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
        assert_eq!(
            pids_mounts(hybrid),
            (
                Some("/sys/fs/cgroup/unified".into()),
                Some("/sys/fs/cgroup/pids".into())
            )
        );
        let unified = "\
25 1 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";
        assert_eq!(pids_mounts(unified), (Some("/sys/fs/cgroup".into()), None));
        // A v1 hierarchy without pids, and a path with an escaped space.
        let other = "\
33 31 0:30 / /sys/fs/cgroup/cpu\\040acct rw - cgroup cgroup rw,cpuacct
34 31 0:31 / /mnt/my\\040pids rw shared:3 - cgroup none rw,pids,cpuset
";
        assert_eq!(pids_mounts(other), (None, Some("/mnt/my pids".into())));
        assert_eq!(pids_mounts(""), (None, None));
    }
}
