//! Pure decisions: which mounts a machine gets, its environment, the resource limits and
//! the exact bwrap argument vector. Nothing here touches the host; the host facts come in
//! as values ([`HostFacts`]) so every decision is tested against exact expected vectors.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use shellbox_core::{Error, NetworkPolicy};

/// The host's system directories as the sandbox sees them, in mount order (REFERENCE 4.3).
/// `/etc` and `/sys` are the machine's private copies; the others come from the host.
pub const SYSTEM_DIRS: [&str; 9] = [
    "/bin", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/sbin", "/sys", "/usr",
];

/// Guest directories the sandbox mounts afresh for every command (`/dev`, `/proc`); nothing
/// can be uploaded or mounted there.
pub const SPECIAL_DIRS: [&str; 2] = ["/dev", "/proc"];

/// `PATH` entries after the bin dirs (REFERENCE 4.4).
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// `HOME` of every command; the directory exists in every machine with mode 1777.
pub const HOME: &str = "/home/shellbox";

/// The script `/bin/sh` runs inside the sandbox: change to the working directory (`$1`), then
/// exec the argv. A failed `cd` ends with the shell's failure status, a missing program with
/// 127, a non-executable one with 126 (POSIX `sh` command search and execution).
pub const LAUNCH_SCRIPT: &str = r#"cd -- "$1" && shift && exec "$@""#;

/// The one-gibibyte file size limit every command gets (`RLIMIT_FSIZE`).
pub const FSIZE_LIMIT_BYTES: u64 = 1 << 30;

/// Extra tasks allowed above the host's current task count (`RLIMIT_NPROC`).
pub const NPROC_HEADROOM: u64 = 256;

/// Seconds of CPU time allowed above `timeout x CPUs` (`RLIMIT_CPU`).
pub const CPU_HEADROOM_SECS: u64 = 5;

/// The size bound of every command's `/dev/shm` (a fresh `tmpfs`): 64 MiB, Docker's default
/// `HostConfig.ShmSize`. Without it the `tmpfs` takes the kernel's default of half the
/// host's memory. Writing past it fails with `ENOSPC`. A machine with a smaller
/// `storage_mb` gets a `/dev/shm` of `storage_mb` MiB instead, set when its sandbox starts
/// (see `devfs::shm_bytes`).
pub const SHM_SIZE_BYTES: u64 = 64 << 20;

/// Docker's default masked paths under `/proc` (moby `oci/defaults.go`, `MaskedPaths`):
/// host-wide kernel state a container has no business reading (`/proc/keys` lists the
/// names and sizes of every key of the host's root user, `/proc/kcore` is the kernel's
/// memory, `/proc/timer_list` and `/proc/sched_debug` show host tasks). Those the host's
/// kernel has are masked as Docker masks them: a file by `/dev/null` bound over it (reads
/// find nothing, writes are discarded), a directory by an empty read-only `tmpfs`.
/// Docker's `/sys/firmware` needs nothing: a machine's `/sys` is an empty directory of its
/// own.
pub const MASKED_PROC_PATHS: [&str; 9] = [
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
];

/// The sandbox's PID 1 directory under `/proc`, hidden under an empty read-only `tmpfs` in
/// every command (see [`bwrap_args`]).
pub const PID_1_PROC_DIR: &str = "/proc/1";

/// How a path of [`MASKED_PROC_PATHS`] that the host has is masked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mask {
    /// A file: `/dev/null` is bound over it.
    File,
    /// A directory: an empty read-only `tmpfs` is mounted over it.
    Dir,
}

/// What a host system directory is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostDir {
    /// It does not exist on the host; the sandbox has none either.
    Missing,
    /// A real directory, bound read-only at the same path.
    Dir,
    /// A symlink (merged `/usr`, e.g. `/bin -> usr/bin`), recreated with the same target in
    /// the machine root when the machine is created.
    Symlink(PathBuf),
}

/// Facts about the host the argv depends on, gathered once by [`HostFacts::probe`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFacts {
    /// Each of [`SYSTEM_DIRS`] except `/etc` and `/sys`, with what it is on the host.
    pub system_dirs: Vec<(String, HostDir)>,
    /// The `setpriv` program used to switch users (`None` when the host has none).
    pub setpriv: Option<PathBuf>,
    /// Each of [`MASKED_PROC_PATHS`] the host's `/proc` has, in that order, with how it is
    /// masked (the sandbox's `/proc` is a new mount of the same kernel's `procfs`, so it
    /// has the same ones; bwrap cannot mount over a path that does not exist).
    pub masked_proc: Vec<(String, Mask)>,
}

impl HostFacts {
    /// Reads the host: the type of each system directory and where `setpriv` is.
    pub fn probe() -> Self {
        let system_dirs = SYSTEM_DIRS
            .iter()
            .filter(|d| !is_private_system_dir(d))
            .map(|d| {
                let kind = match std::fs::symlink_metadata(d) {
                    Ok(m) if m.file_type().is_symlink() => match std::fs::read_link(d) {
                        Ok(target) => HostDir::Symlink(target),
                        Err(_) => HostDir::Missing,
                    },
                    Ok(m) if m.is_dir() => HostDir::Dir,
                    _ => HostDir::Missing,
                };
                (d.to_string(), kind)
            })
            .collect();
        let setpriv = ["/usr/bin/setpriv", "/bin/setpriv", "/usr/sbin/setpriv"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_file());
        let masked_proc = MASKED_PROC_PATHS
            .iter()
            .filter_map(|p| {
                let meta = std::fs::symlink_metadata(p).ok()?;
                let mask = if meta.is_dir() { Mask::Dir } else { Mask::File };
                Some((p.to_string(), mask))
            })
            .collect();
        Self {
            system_dirs,
            setpriv,
            masked_proc,
        }
    }
}

/// `/etc` and `/sys` are the machine's own (a private copy and an empty directory).
pub fn is_private_system_dir(dir: &str) -> bool {
    dir == "/etc" || dir == "/sys"
}

/// How a machine shows the host's system directories (`/bin /lib /lib32 /lib64 /libx32
/// /sbin /usr`) and its private `/etc` (REFERENCE 4.1-4.3; `LocalOptions::system_directories`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum SystemDirectories {
    /// Bound read-only: a write to `/usr/...` or `/etc/...` fails inside the machine and an
    /// upload there is [`Error::Unsupported`]. The default.
    #[default]
    ReadOnly,
    /// Each real host directory among them (not the merged-`/usr` symlinks, which stay
    /// symlinks) and the private `/etc` is shown through an overlayfs of the machine's own:
    /// the host directory (or the factory's `/etc` copy) is the read-only lower layer, the
    /// upper layer is in a `tmpfs` mounted on `layers/` of the machine's private directory
    /// on the host (so what a machine writes there is held in memory or swap; on disk, the
    /// layer directories' creation and removal cost each machine about 35 ms on this loaded
    /// ext4-with-`discard` host, the `tmpfs` under 1 ms). With `storage_mb` that `tmpfs` is
    /// the machine's one size-limited file system, holding its root as well, so the bound
    /// covers the root and the layers together; without it, a `tmpfs` of the machine's own
    /// mount namespace bounded to [`DEFAULT_LAYERS_MB`](crate::DEFAULT_LAYERS_MB). Writes
    /// (`apt-get install`, `pip install --system`, `echo x > /usr/local/bin/tool`) land in
    /// the machine only, persist across its commands, and vanish when it closes; the host's
    /// files and other machines never change. Host mounts nested inside those directories
    /// are bound read-only on top. Needs a root host process and overlayfs (the factory's
    /// probe checks both).
    CopyOnWrite,
}

/// The guest directories a copy-on-write machine overlays, in mount order: `/etc` (over
/// the factory's private copy), then each of the host's [`SYSTEM_DIRS`] that is a real
/// directory (`/usr`, `/lib64`, ... — a merged-`/usr` symlink stays a symlink).
pub fn overlaid_dirs(facts: &HostFacts) -> Vec<String> {
    let mut dirs = vec!["/etc".to_string()];
    for dir in SYSTEM_DIRS {
        if facts
            .system_dirs
            .iter()
            .any(|(d, k)| d == dir && *k == HostDir::Dir)
        {
            dirs.push(dir.to_string());
        }
    }
    dirs
}

/// Host mount points strictly inside the directories `dirs` (from `mount_points`, field 5
/// of `/proc/self/mountinfo`, already decoded), deduplicated and sorted by depth then path
/// (REFERENCE 4.2): what a copy-on-write machine binds read-only over its overlays, since an
/// overlay shows its lower directory without the mounts below it.
pub fn nested_mounts(mount_points: &[String], dirs: &[String]) -> Vec<String> {
    let mut found: Vec<String> = mount_points
        .iter()
        .filter(|m| {
            dirs.iter()
                .any(|d| m.as_str() != d && is_within(m, d) && d != "/")
        })
        .cloned()
        .collect();
    found.sort_by(|a, b| {
        let depth = |p: &str| p.matches('/').count();
        depth(a).cmp(&depth(b)).then_with(|| a.cmp(b))
    });
    found.dedup();
    found
}

/// The overlayfs mount options of one layer: `lowerdir`, `upperdir`, `workdir`, and the
/// features that would make the kernel trust metadata in the layers turned off —
/// `redirect_dir=off` (a renamed directory is never looked up elsewhere in the lower
/// layer), `metacopy=off` (every copy-up copies the data; no upper file points at a lower
/// one), `index=off`, `xino=off`, `uuid=off`. Writes only ever reach the upper directory;
/// overlayfs never writes a lower layer. And `volatile`: the layer is thrown away with the
/// machine, so no `sync`/`fsync` inside it, and not its unmount either, reaches the upper
/// file system (without it every machine's close ran a `syncfs` of the host's temp-dir
/// file system).
///
/// # Errors
/// [`Error::InvalidInput`] when a path holds a character overlayfs's option syntax gives a
/// meaning (`,`, `:`, `\`) or is not UTF-8 (set `TMPDIR` to a plain path).
pub fn overlay_options(lower: &Path, upper: &Path, work: &Path) -> Result<String, Error> {
    let text = |p: &Path| -> Result<String, Error> {
        match p.to_str() {
            Some(s) if !s.contains([',', ':', '\\']) => Ok(s.to_string()),
            _ => Err(Error::invalid(format!(
                "overlayfs cannot take the path {} (a comma, colon or backslash, or not UTF-8); \
                 set TMPDIR to a plain path",
                p.display()
            ))),
        }
    };
    Ok(format!(
        "lowerdir={},upperdir={},workdir={},redirect_dir=off,metacopy=off,index=off,xino=off,uuid=off,volatile",
        text(lower)?,
        text(upper)?,
        text(work)?
    ))
}

/// True when the guest path `path` is `dir` or lies inside it (both absolute, normalised).
pub fn is_within(path: &str, dir: &str) -> bool {
    dir == "/"
        || path == dir
        || (path.len() > dir.len() && path.starts_with(dir) && path.as_bytes()[dir.len()] == b'/')
}

/// The system or special directory `path` lies in, if any.
pub fn system_dir_of(path: &str) -> Option<&'static str> {
    SYSTEM_DIRS
        .iter()
        .chain(SPECIAL_DIRS.iter())
        .copied()
        .find(|d| is_within(path, d))
}

/// A host path shown read-only at a guest path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOnlyMount {
    /// The host file or directory.
    pub host: PathBuf,
    /// Where it appears in the machine.
    pub guest: String,
}

/// Builds a machine's mounts (REFERENCE 4.6): the factory's read-only dirs, then the image's
/// (each at its own path, duplicates dropped), then the image's mounts.
///
/// # Errors
/// [`Error::InvalidInput`] listing every host path that does not exist or, for read-only
/// dirs, is not a directory, and for a guest path that is not absolute and normalised;
/// [`Error::Unsupported`] for a guest path inside a system directory
/// ([`SYSTEM_DIRS`], [`SPECIAL_DIRS`]), at `/`, or inside another mount.
pub fn plan_mounts(
    factory_read_only: &[PathBuf],
    image_read_only: &[PathBuf],
    image_mounts: &[(PathBuf, String)],
    exists: &dyn Fn(&Path) -> bool,
    is_dir: &dyn Fn(&Path) -> bool,
) -> Result<Vec<ReadOnlyMount>, Error> {
    let mut mounts: Vec<ReadOnlyMount> = Vec::new();
    let mut missing = Vec::new();
    for dir in factory_read_only.iter().chain(image_read_only) {
        let Some(guest) = dir.to_str() else {
            return Err(Error::invalid(format!(
                "read-only dir {} is not valid UTF-8",
                dir.display()
            )));
        };
        if !dir.is_absolute() {
            return Err(Error::invalid(format!(
                "read-only dir {} is not absolute",
                dir.display()
            )));
        }
        if !is_dir(dir) {
            missing.push(dir.display().to_string());
            continue;
        }
        let guest = guest.trim_end_matches('/');
        let guest = if guest.is_empty() { "/" } else { guest };
        if !mounts.iter().any(|m| m.guest == guest) {
            mounts.push(ReadOnlyMount {
                host: dir.clone(),
                guest: guest.to_string(),
            });
        }
    }
    for (host, guest) in image_mounts {
        if !exists(host) {
            missing.push(host.display().to_string());
            continue;
        }
        mounts.push(ReadOnlyMount {
            host: host.clone(),
            guest: guest.clone(),
        });
    }
    if !missing.is_empty() {
        return Err(Error::invalid(format!(
            "read-only host paths do not exist or are not directories: {}",
            missing.join(", ")
        )));
    }
    for (i, mount) in mounts.iter().enumerate() {
        shellbox_core::validate::validate_guest_path(&mount.guest)?;
        if mount.guest == "/" {
            return Err(Error::unsupported(format!(
                "mount of {} at / would hide the machine root",
                mount.host.display()
            )));
        }
        if let Some(dir) = system_dir_of(&mount.guest) {
            return Err(Error::unsupported(format!(
                "mount guest path {} lies inside the system directory {dir}",
                mount.guest
            )));
        }
        if let Some(other) = mounts
            .iter()
            .enumerate()
            .find(|(j, o)| *j != i && is_within(&mount.guest, &o.guest))
        {
            return Err(Error::unsupported(format!(
                "mount guest path {} lies inside another mount at {}",
                mount.guest, other.1.guest
            )));
        }
    }
    Ok(mounts)
}

/// Checks a machine's workdir (empty means `/`) against its mounts and returns it.
///
/// # Errors
/// [`Error::Unsupported`] when it lies inside a system directory or a read-only mount.
pub fn plan_workdir(workdir: &str, mounts: &[ReadOnlyMount]) -> Result<String, Error> {
    plan_workdir_in(workdir, mounts, &[])
}

/// [`plan_workdir`] for a machine whose `overlaid` directories ([`overlaid_dirs`]) are
/// copy-on-write: a workdir inside one of them is allowed (it is made in the layer).
///
/// # Errors
/// As [`plan_workdir`].
pub fn plan_workdir_in(
    workdir: &str,
    mounts: &[ReadOnlyMount],
    overlaid: &[String],
) -> Result<String, Error> {
    let workdir = if workdir.is_empty() { "/" } else { workdir };
    let in_layer = overlaid.iter().any(|d| is_within(workdir, d));
    if let Some(dir) = system_dir_of(workdir).filter(|_| !in_layer) {
        // A read-only factory could overlay it; a copy-on-write one overlays what it can.
        let hint = if overlaid.is_empty() && !matches!(dir, "/sys" | "/dev" | "/proc") {
            "; choose a workdir outside the system directories (e.g. /workspace), or a factory \
             with copy-on-write system directories (LocalOptions::system_directories, CLI \
             --system-directories copy-on-write), in which it is made in the machine's layer"
        } else {
            "; choose a workdir outside the system directories (e.g. /workspace)"
        };
        return Err(Error::unsupported(format!(
            "workdir {workdir} lies inside the read-only system directory {dir}{hint}"
        )));
    }
    if let Some(m) = mounts.iter().find(|m| is_within(workdir, &m.guest)) {
        return Err(Error::unsupported(format!(
            "workdir {workdir} lies inside the read-only host path mounted at {}",
            m.guest
        )));
    }
    Ok(workdir.to_string())
}

/// The environment of a command (REFERENCE 4.4): `PATH` (image bin dirs, factory bin dirs,
/// [`DEFAULT_PATH`]), `HOME`, `LANG=C.UTF-8`, `PYTHONHASHSEED` when a seed is given, then
/// the spec's env, then the command's (later wins). Nothing comes from the host.
pub fn command_env(
    bin_dirs: &[String],
    hash_seed: Option<&str>,
    spec_env: &BTreeMap<String, String>,
    command_env: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut path: Vec<&str> = bin_dirs.iter().map(String::as_str).collect();
    path.push(DEFAULT_PATH);
    let mut env = BTreeMap::new();
    env.insert("PATH".to_string(), path.join(":"));
    env.insert("HOME".to_string(), HOME.to_string());
    env.insert("LANG".to_string(), "C.UTF-8".to_string());
    if let Some(seed) = hash_seed {
        env.insert("PYTHONHASHSEED".to_string(), seed.to_string());
    }
    env.extend(spec_env.iter().map(|(k, v)| (k.clone(), v.clone())));
    env.extend(command_env.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}

/// The NUL-separated options bwrap reads through `--args FD`: `--clearenv`, then
/// `--setenv KEY VALUE` per variable. Values never appear in any process's argv.
///
/// # Errors
/// [`Error::InvalidInput`] when a key or value holds a NUL byte.
pub fn env_args(env: &BTreeMap<String, String>) -> Result<Vec<u8>, Error> {
    let mut out = b"--clearenv\0".to_vec();
    for (key, value) in env {
        if key.contains('\0') || value.contains('\0') {
            return Err(Error::invalid(format!(
                "environment variable {key:?} contains a NUL byte"
            )));
        }
        out.extend_from_slice(b"--setenv\0");
        out.extend_from_slice(key.as_bytes());
        out.push(0);
        out.extend_from_slice(value.as_bytes());
        out.push(0);
    }
    Ok(out)
}

/// The account a command switches to (from a root host process only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserSwitch {
    /// Real and effective UID.
    pub uid: u32,
    /// Real and effective GID (the account's primary group).
    pub gid: u32,
}

/// One command's launch: what runs, where, as whom, and the fds bwrap reads and writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Working directory inside the sandbox.
    pub cwd: String,
    /// The user switch, if any, and the `setpriv` program that performs it.
    pub user: Option<(UserSwitch, PathBuf)>,
    /// The fd bwrap reads its environment options from (`--args`).
    pub env_fd: i32,
    /// The fd bwrap writes its JSON status to (`--json-status-fd`), if any.
    pub status_fd: Option<i32>,
    /// The fd bwrap reads the command's seccomp program from (`--seccomp`), if any
    /// (see the `seccomp` module).
    pub seccomp_fd: Option<i32>,
}

/// The machine side of the sandbox line: its root, network and mounts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The machine's private root directory on the host.
    pub root: PathBuf,
    /// Network policy.
    pub network: NetworkPolicy,
    /// Read-only mounts, in order.
    pub mounts: Vec<ReadOnlyMount>,
    /// The host directory shown read-only at `/etc` (the factory's shared copy,
    /// `root::SharedEtc`).
    pub etc: PathBuf,
    /// Host directories bound read-only at their own path over the private `/etc`
    /// (see `ETC_BOUND_DIRS`).
    pub etc_binds: Vec<PathBuf>,
    /// What the machine prepared once and every command joins instead.
    pub shared: Shared,
    /// The machine's copy-on-write layers (`None`: [`SystemDirectories::ReadOnly`]).
    pub layers: Option<Layers>,
}

/// The host directories of apt's and dpkg's state that a copy-on-write machine overlays
/// too (when the host has them), so `dpkg -i`, `dpkg -s` and `apt-get install ./x.deb` see
/// the host's package database and write only the machine's layer: dpkg's database, apt's
/// state and its archive cache. The rest of the host's `/var` (other services' data, logs)
/// is never shown; the machine's own `/var/log` and `/var/tmp` are plain directories of
/// its root.
pub const VAR_OVERLAID_DIRS: [&str; 3] = ["/var/lib/dpkg", "/var/lib/apt", "/var/cache/apt"];

/// Where a copy-on-write machine's layers live and what is bound over them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layers {
    /// The machine's `layers` directory on the host (mode 0700, inside its 0700 private
    /// directory): for each overlaid guest directory `/NAME` ([`overlaid_dirs`]) the upper
    /// layer `NAME` and overlayfs's work directory `NAME.work` ([`layer_dirs`]).
    pub dir: PathBuf,
    /// Host mount points nested in the overlaid directories ([`nested_mounts`]), bound
    /// read-only at their own path over the overlays, in order.
    pub nested: Vec<PathBuf>,
    /// The [`VAR_OVERLAID_DIRS`] the host has, overlaid after the system directories.
    pub var: Vec<String>,
}

/// The upper and work directories of the overlaid guest directory `guest` in `layers`.
pub fn layer_dirs(layers: &Path, guest: &str) -> (PathBuf, PathBuf) {
    let name = guest.trim_start_matches('/');
    (layers.join(name), layers.join(format!("{name}.work")))
}

/// One mount a machine's own mount namespace holds in its root (see [`root_mounts`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootMount {
    /// `source` bound read-only (recursively, `nosuid`, `nodev`) at `target`.
    ReadOnly {
        /// The host path.
        source: PathBuf,
        /// Where inside the root on the host.
        target: PathBuf,
    },
    /// A read-only overlayfs of `lowers` (top first, at least two) at `target` (`nosuid`,
    /// `nodev`, read-only): what a machine whose root is an overlayfs shows at `/etc`
    /// instead of a bind of the factory's copy, so its mountinfo names no host path of
    /// the copy (a bind's root field is the source's path).
    ReadOnlyOverlay {
        /// The host directories shown, top first.
        lowers: Vec<PathBuf>,
        /// Where inside the root on the host.
        target: PathBuf,
    },
    /// A copy-on-write layer: overlayfs of `lower` (read-only) and `upper` at `target`
    /// (`nosuid`, `nodev`, [`overlay_options`]).
    Overlay {
        /// The guest directory it shows.
        guest: String,
        /// The host directory shown read-only under the layer.
        lower: PathBuf,
        /// Where the machine's writes go.
        upper: PathBuf,
        /// overlayfs's work directory (same file system as `upper`).
        work: PathBuf,
        /// Where inside the root on the host.
        target: PathBuf,
    },
}

/// The mounts of a machine's own mount namespace, in order: [`root_binds`] for a read-only
/// machine; for a copy-on-write one the same with each overlaid directory's bind replaced
/// by its overlay ([`RootMount::Overlay`]; `/etc` over [`Layout::etc`]), then the
/// [`Layers::nested`] host mounts bound read-only on top.
pub fn root_mounts(layout: &Layout, facts: &HostFacts) -> Vec<RootMount> {
    let inside = |guest: &str| layout.root.join(guest.trim_start_matches('/'));
    let Some(layers) = &layout.layers else {
        return root_binds(layout, facts)
            .into_iter()
            .map(|(source, target)| RootMount::ReadOnly { source, target })
            .collect();
    };
    let overlaid = overlaid_dirs(facts);
    let mut mounts = Vec::new();
    for (source, target) in root_binds(layout, facts) {
        match overlaid.iter().find(|g| inside(g) == target) {
            Some(guest) => {
                let (upper, work) = layer_dirs(&layers.dir, guest);
                mounts.push(RootMount::Overlay {
                    guest: guest.clone(),
                    lower: source,
                    upper,
                    work,
                    target,
                });
            }
            None => mounts.push(RootMount::ReadOnly { source, target }),
        }
    }
    for guest in &layers.var {
        let (upper, work) = layer_dirs(&layers.dir, guest);
        mounts.push(RootMount::Overlay {
            guest: guest.clone(),
            lower: PathBuf::from(guest),
            upper,
            work,
            target: inside(guest),
        });
    }
    for nested in &layers.nested {
        mounts.push(RootMount::ReadOnly {
            source: nested.clone(),
            target: inside(&nested.to_string_lossy()),
        });
    }
    mounts
}

/// Namespaces a machine prepared once (when it was created) that every command's launcher
/// joins before it execs bwrap, so bwrap does not make them per command.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shared {
    /// The machine's own loopback-only network namespace (under
    /// [`NetworkPolicy::Deny`]) is joined: no `--unshare-net`.
    pub net: bool,
    /// The machine's own mount namespace, in which [`root_binds`] (the system directories
    /// and the private `/etc` and `/sys`) are already mounted read-only in the root, is
    /// joined: bwrap binds the root with those submounts at `/` in one step. The read-only
    /// mounts of the spec are still bound per command, so each command sees the host path
    /// as it is then (a host directory replaced or removed since is not shown stale).
    pub system: bool,
}

/// The read-only binds of a machine's system directories, in bwrap's mount order
/// (REFERENCE 4.3), as `(host source, path inside the root on the host)`: the factory's
/// shared `/etc` copy ([`Layout::etc`]) on the root's `etc`, the `etc_binds` over it, each host system directory and the private `/sys`.
pub fn root_binds(layout: &Layout, facts: &HostFacts) -> Vec<(PathBuf, PathBuf)> {
    let mut binds = Vec::new();
    let inside = |guest: &str| layout.root.join(guest.trim_start_matches('/'));
    for dir in SYSTEM_DIRS {
        if is_private_system_dir(dir) {
            let source = if dir == "/etc" {
                layout.etc.clone()
            } else {
                inside(dir)
            };
            binds.push((source, inside(dir)));
            if dir == "/etc" {
                for bind in &layout.etc_binds {
                    binds.push((bind.clone(), inside(&bind.to_string_lossy())));
                }
            }
            continue;
        }
        let kind = facts
            .system_dirs
            .iter()
            .find(|(d, _)| d == dir)
            .map(|(_, k)| k);
        if kind == Some(&HostDir::Dir) {
            binds.push((PathBuf::from(dir), inside(dir)));
        }
    }
    binds
}

/// The bwrap argument vector (without the program name) for one command (REFERENCE 4.3, in
/// that order): namespaces and process options, the root bound at `/`, the system
/// directories (with the `etc_binds` right after `/etc`), fresh `/dev`, `/dev/shm` (bounded
/// to [`SHM_SIZE_BYTES`]) and `/proc` with its masks, the read-only mounts, then
/// `[setpriv ...] /bin/sh -c LAUNCH_SCRIPT sh CWD ARGV...`.
///
/// # PID 1 is out of the command's reach
/// The only process of a command's PID namespace that the command did not start is PID 1,
/// bwrap's init: it reaps the command and tells the bwrap outside its exit status. It runs
/// with the command's UID (0 for a root host process) and, like the command, with no
/// capabilities and dumpable, so the kernel's ptrace access check (same UIDs, the target's
/// capabilities a subset of the caller's) lets the command at it: by writing
/// `/proc/1/mem` a command could make PID 1 spin and never report the exit (the run ended
/// as a timeout), or take it over. bwrap 0.8 offers no way to make its init non-dumpable or
/// to give it other credentials, so both ways in are closed from outside it:
///
/// - `/proc/1` (every file that exposes or changes a process: `mem`, `syscall`, `environ`,
///   `maps`, `fd/`, `task/*/mem`, ..., and `cmdline`, which names the machine root's host
///   path) is hidden under an empty read-only `tmpfs`, the way Docker masks `/proc` paths.
///   PID 1 is the setting-up bwrap itself when the mask is mounted and stays the same
///   process, so the mask covers it for the command's whole life; the command's own
///   processes keep their `/proc` entries.
/// - the system calls that reach another process's memory or files without `/proc`
///   (`ptrace`, `process_vm_readv`/`writev`, `kcmp`, `pidfd_getfd`, `process_madvise`) are
///   refused by the seccomp filter (see the `seccomp` module), which also binds PID 1.
///
/// Signals cannot hold PID 1 either: the kernel drops signals sent from inside the namespace
/// to its init unless it handles them.
///
/// Merged-`/usr` symlinks are not passed as `--symlink`: they were created in the root when
/// the machine was, because Debian's bwrap 0.8 refuses to create a symlink that exists, so
/// the second command on a machine would fail.
pub fn bwrap_args(layout: &Layout, facts: &HostFacts, launch: &Launch) -> Vec<OsString> {
    let user_caps: &[&str] = if launch.user.is_some() {
        &["CAP_SETUID", "CAP_SETGID"]
    } else {
        &[]
    };
    let mut a = sandbox_options(
        layout,
        facts,
        launch.env_fd,
        launch.status_fd,
        launch.seccomp_fd,
        user_caps,
        None,
    );
    a.push("--".into());
    if let Some((user, setpriv)) = &launch.user {
        a.push(setpriv.clone().into());
        a.push(format!("--reuid={}", user.uid).into());
        a.push(format!("--regid={}", user.gid).into());
        a.push("--clear-groups".into());
        a.push("--".into());
    }
    a.extend(
        ["/bin/sh", "-c", LAUNCH_SCRIPT, "sh", &launch.cwd]
            .iter()
            .map(OsString::from),
    );
    a.extend(launch.argv.iter().map(OsString::from));
    a
}

/// Where the supervisor program is inside a machine's sandbox: in the empty read-only
/// `tmpfs` over [`PID_1_PROC_DIR`] (the supervisor is the sandbox's PID 1), bound read-only
/// from the bytes bwrap copies out of an inherited fd (`--ro-bind-data`).
pub const SUPERVISOR_PATH: &str = "/proc/1/shellbox-supervisor";

/// The capabilities the supervisor keeps (bwrap's `--cap-add`): `CAP_SETUID` and
/// `CAP_SETGID` to run a command (and its keeper) as another account, `CAP_KILL` to kill a
/// command's processes whatever their account, `CAP_SETPCAP` to empty each command's
/// bounding set. Every command drops all of them before it execs (and `no_new_privs` keeps
/// exec from granting any back).
pub const SUPERVISOR_CAPS: [&str; 4] = ["CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_SETPCAP"];

/// The bwrap argument vector (without the program name) that starts a machine's sandbox
/// once, with the supervisor as its PID 1 (`--as-pid-1`): the same namespaces, mounts,
/// masks, seccomp program (`seccomp_fd`) and environment options (`env_fd`) as
/// [`bwrap_args`] gives one command, the supervisor program copied from `program_fd` to
/// [`SUPERVISOR_PATH`], and the [`SUPERVISOR_CAPS`]. The supervisor's control channel is
/// its stdin and stdout.
pub fn supervisor_args(
    layout: &Layout,
    facts: &HostFacts,
    env_fd: i32,
    seccomp_fd: Option<i32>,
    program_fd: i32,
) -> Vec<OsString> {
    let mut a = sandbox_options(
        layout,
        facts,
        env_fd,
        None,
        seccomp_fd,
        &SUPERVISOR_CAPS,
        Some(program_fd),
    );
    a.extend(["--".into(), SUPERVISOR_PATH.into()]);
    a
}

/// Everything of a sandbox line before `--`; with `program_fd`, the supervisor's start
/// (`--as-pid-1` and its program bound at [`SUPERVISOR_PATH`]).
fn sandbox_options(
    layout: &Layout,
    facts: &HostFacts,
    env_fd: i32,
    status_fd: Option<i32>,
    seccomp_fd: Option<i32>,
    caps: &[&str],
    program_fd: Option<i32>,
) -> Vec<OsString> {
    let mut a: Vec<OsString> = Vec::new();
    let mut push = |items: &[&str]| a.extend(items.iter().map(OsString::from));
    push(&["--args", &env_fd.to_string()]);
    push(&[
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ]);
    if program_fd.is_some() {
        push(&["--as-pid-1"]);
    }
    if layout.network == NetworkPolicy::Deny && !layout.shared.net {
        push(&["--unshare-net"]);
    }
    push(&["--new-session", "--die-with-parent", "--cap-drop", "ALL"]);
    for cap in caps {
        push(&["--cap-add", cap]);
    }
    if let Some(fd) = seccomp_fd {
        push(&["--seccomp", &fd.to_string()]);
    }
    if let Some(fd) = status_fd {
        push(&["--json-status-fd", &fd.to_string()]);
    }
    a.push("--bind".into());
    a.push(layout.root.clone().into());
    a.push("/".into());
    for dir in SYSTEM_DIRS.into_iter().filter(|_| !layout.shared.system) {
        if is_private_system_dir(dir) {
            a.push("--ro-bind".into());
            if dir == "/etc" {
                a.push(layout.etc.clone().into());
            } else {
                a.push(layout.root.join(&dir[1..]).into());
            }
            a.push(dir.into());
            if dir == "/etc" {
                for bind in &layout.etc_binds {
                    a.extend([OsString::from("--ro-bind"), bind.into(), bind.into()]);
                }
            }
            continue;
        }
        let kind = facts
            .system_dirs
            .iter()
            .find(|(d, _)| d == dir)
            .map(|(_, k)| k);
        if kind == Some(&HostDir::Dir) {
            a.extend([OsString::from("--ro-bind"), dir.into(), dir.into()]);
        }
    }
    // bwrap covers /proc/irq and /proc/bus read-only but leaves /proc/sys and
    // /proc/sysrq-trigger writable for a uid-0 command (no user namespace): a command could
    // change host kernel settings (e.g. kernel.core_pattern). Bind both read-only over the
    // fresh /proc (the sources resolve inside it, so net.* shows the sandbox's namespace).
    let shm_size = SHM_SIZE_BYTES.to_string();
    let strs = |items: &[&str]| items.iter().map(OsString::from).collect::<Vec<_>>();
    a.extend(strs(&[
        "--dev",
        "/dev",
        "--size",
        &shm_size,
        "--tmpfs",
        "/dev/shm",
        "--proc",
        "/proc",
        "--ro-bind",
        "/proc/sys",
        "/proc/sys",
        "--ro-bind-try",
        "/proc/sysrq-trigger",
        "/proc/sysrq-trigger",
        "--tmpfs",
        PID_1_PROC_DIR,
    ]));
    if let Some(fd) = program_fd {
        a.extend(strs(&[
            "--perms",
            "0555",
            "--ro-bind-data",
            &fd.to_string(),
            SUPERVISOR_PATH,
        ]));
    }
    a.extend(strs(&["--remount-ro", PID_1_PROC_DIR]));
    for (path, mask) in &facts.masked_proc {
        a.extend(match mask {
            Mask::File => strs(&["--dev-bind", "/dev/null", path]),
            Mask::Dir => strs(&["--tmpfs", path, "--remount-ro", path]),
        });
    }
    for m in &layout.mounts {
        a.push("--ro-bind".into());
        a.push(m.host.clone().into());
        a.push(m.guest.clone().into());
    }
    a
}

/// A resource limit set on the launcher before it execs bwrap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// Which resource.
    pub resource: nix::sys::resource::Resource,
    /// Soft and hard value.
    pub value: u64,
}

/// The resource limits of a command (REFERENCE 4.4): `RLIMIT_CORE` 0, `RLIMIT_FSIZE`
/// 1 GiB, `RLIMIT_NPROC` host tasks + 256 and, with a timeout, `RLIMIT_CPU`
/// ceil(timeout x CPUs) + 5 s. Each is lowered to `current_soft(resource)` when that is
/// finite (`None` = unlimited).
pub fn limits(
    host_tasks: u64,
    timeout: Option<Duration>,
    cpus: usize,
    current_soft: &dyn Fn(nix::sys::resource::Resource) -> Option<u64>,
) -> Vec<Limit> {
    use nix::sys::resource::Resource;
    let mut wanted = vec![
        (Resource::RLIMIT_CORE, 0),
        (Resource::RLIMIT_FSIZE, FSIZE_LIMIT_BYTES),
        (
            Resource::RLIMIT_NPROC,
            host_tasks.saturating_add(NPROC_HEADROOM),
        ),
    ];
    if let Some(timeout) = timeout {
        let cpu_secs = (timeout.as_secs_f64() * cpus.max(1) as f64).ceil() as u64;
        wanted.push((
            Resource::RLIMIT_CPU,
            cpu_secs.saturating_add(CPU_HEADROOM_SECS),
        ));
    }
    wanted
        .into_iter()
        .map(|(resource, value)| Limit {
            resource,
            value: current_soft(resource).map_or(value, |soft| soft.min(value)),
        })
        .collect()
}

/// The host task count: the number after `/` in the 4th field of `/proc/loadavg`.
pub fn parse_loadavg_tasks(loadavg: &str) -> Option<u64> {
    loadavg
        .split_whitespace()
        .nth(3)?
        .split('/')
        .nth(1)?
        .parse()
        .ok()
}

/// Decides the user switch of a command (REFERENCE 4.4): `None` or the host process's own
/// UID (as a name or number) runs without a switch; another account needs a root host
/// process. `lookup` maps a name or numeric string to `(uid, gid)` of a host account.
///
/// # Errors
/// [`Error::Unsupported`] "no such user: NAME" for an account the host does not have (the
/// rule every backend follows), or another account when the host process is not root.
pub fn plan_user(
    user: Option<&str>,
    my_uid: u32,
    lookup: &dyn Fn(&str) -> Option<(u32, u32)>,
) -> Result<Option<UserSwitch>, Error> {
    let Some(user) = user else { return Ok(None) };
    if user == my_uid.to_string() {
        return Ok(None);
    }
    let Some((uid, gid)) = lookup(user) else {
        return Err(Error::unsupported(format!(
            "no such user: {user} (no host account has this name or UID)"
        )));
    };
    if uid == my_uid {
        return Ok(None);
    }
    if my_uid != 0 {
        return Err(Error::unsupported(format!(
            "user {user:?}: switching to another account needs a root host process (running as UID {my_uid})"
        )));
    }
    Ok(Some(UserSwitch { uid, gid }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::resource::Resource;

    fn facts() -> HostFacts {
        HostFacts {
            system_dirs: vec![
                ("/bin".into(), HostDir::Symlink("usr/bin".into())),
                ("/lib".into(), HostDir::Symlink("usr/lib".into())),
                ("/lib32".into(), HostDir::Missing),
                ("/lib64".into(), HostDir::Dir),
                ("/libx32".into(), HostDir::Missing),
                ("/sbin".into(), HostDir::Symlink("usr/sbin".into())),
                ("/usr".into(), HostDir::Dir),
            ],
            setpriv: Some("/usr/bin/setpriv".into()),
            masked_proc: vec![
                ("/proc/acpi".into(), Mask::Dir),
                ("/proc/keys".into(), Mask::File),
            ],
        }
    }

    fn strs(v: &[OsString]) -> Vec<&str> {
        v.iter().map(|s| s.to_str().unwrap()).collect()
    }

    #[test]
    fn argv_deny_network_no_user() {
        let layout = Layout {
            root: "/tmp/shellbox-local-x".into(),
            network: NetworkPolicy::Deny,
            mounts: vec![ReadOnlyMount {
                host: "/opt/tools".into(),
                guest: "/opt/tools".into(),
            }],
            etc: "/tmp/shellbox-local-e/root/etc".into(),
            etc_binds: vec!["/etc/ssl/certs".into()],
            shared: Shared::default(),
            layers: None,
        };
        let launch = Launch {
            argv: vec!["echo".into(), "hi there".into()],
            cwd: "/workspace".into(),
            user: None,
            env_fd: 7,
            status_fd: Some(9),
            seccomp_fd: Some(8),
        };
        let expected = [
            "--args",
            "7",
            "--unshare-ipc",
            "--unshare-pid",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--unshare-net",
            "--new-session",
            "--die-with-parent",
            "--cap-drop",
            "ALL",
            "--seccomp",
            "8",
            "--json-status-fd",
            "9",
            "--bind",
            "/tmp/shellbox-local-x",
            "/",
            "--ro-bind",
            "/tmp/shellbox-local-e/root/etc",
            "/etc",
            "--ro-bind",
            "/etc/ssl/certs",
            "/etc/ssl/certs",
            "--ro-bind",
            "/lib64",
            "/lib64",
            "--ro-bind",
            "/tmp/shellbox-local-x/sys",
            "/sys",
            "--ro-bind",
            "/usr",
            "/usr",
            "--dev",
            "/dev",
            "--size",
            "67108864",
            "--tmpfs",
            "/dev/shm",
            "--proc",
            "/proc",
            "--ro-bind",
            "/proc/sys",
            "/proc/sys",
            "--ro-bind-try",
            "/proc/sysrq-trigger",
            "/proc/sysrq-trigger",
            "--tmpfs",
            "/proc/1",
            "--remount-ro",
            "/proc/1",
            "--tmpfs",
            "/proc/acpi",
            "--remount-ro",
            "/proc/acpi",
            "--dev-bind",
            "/dev/null",
            "/proc/keys",
            "--ro-bind",
            "/opt/tools",
            "/opt/tools",
            "--",
            "/bin/sh",
            "-c",
            LAUNCH_SCRIPT,
            "sh",
            "/workspace",
            "echo",
            "hi there",
        ];
        assert_eq!(strs(&bwrap_args(&layout, &facts(), &launch)), expected);
    }

    #[test]
    fn argv_allow_network_with_user_switch() {
        let layout = Layout {
            root: "/r".into(),
            network: NetworkPolicy::Allow,
            mounts: vec![],
            etc: "/r/etc".into(),
            etc_binds: vec![],
            shared: Shared::default(),
            layers: None,
        };
        let launch = Launch {
            argv: vec!["id".into()],
            cwd: "/".into(),
            user: Some((
                UserSwitch {
                    uid: 65534,
                    gid: 65534,
                },
                "/usr/bin/setpriv".into(),
            )),
            env_fd: 3,
            status_fd: None,
            seccomp_fd: None,
        };
        let expected = [
            "--args",
            "3",
            "--unshare-ipc",
            "--unshare-pid",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--new-session",
            "--die-with-parent",
            "--cap-drop",
            "ALL",
            "--cap-add",
            "CAP_SETUID",
            "--cap-add",
            "CAP_SETGID",
            "--bind",
            "/r",
            "/",
            "--ro-bind",
            "/r/etc",
            "/etc",
            "--ro-bind",
            "/lib64",
            "/lib64",
            "--ro-bind",
            "/r/sys",
            "/sys",
            "--ro-bind",
            "/usr",
            "/usr",
            "--dev",
            "/dev",
            "--size",
            "67108864",
            "--tmpfs",
            "/dev/shm",
            "--proc",
            "/proc",
            "--ro-bind",
            "/proc/sys",
            "/proc/sys",
            "--ro-bind-try",
            "/proc/sysrq-trigger",
            "/proc/sysrq-trigger",
            "--tmpfs",
            "/proc/1",
            "--remount-ro",
            "/proc/1",
            "--tmpfs",
            "/proc/acpi",
            "--remount-ro",
            "/proc/acpi",
            "--dev-bind",
            "/dev/null",
            "/proc/keys",
            "--",
            "/usr/bin/setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            "/bin/sh",
            "-c",
            LAUNCH_SCRIPT,
            "sh",
            "/",
            "id",
        ];
        assert_eq!(strs(&bwrap_args(&layout, &facts(), &launch)), expected);
    }

    #[test]
    fn joined_network_namespace_drops_unshare_net() {
        let mut layout = Layout {
            root: "/r".into(),
            network: NetworkPolicy::Deny,
            mounts: vec![],
            etc: "/r/etc".into(),
            etc_binds: vec![],
            shared: Shared {
                net: true,
                system: false,
            },
            layers: None,
        };
        let launch = Launch {
            argv: vec!["true".into()],
            cwd: "/".into(),
            user: None,
            env_fd: 3,
            status_fd: None,
            seccomp_fd: None,
        };
        let has_net = |layout: &Layout| {
            strs(&bwrap_args(layout, &facts(), &launch)).contains(&"--unshare-net")
        };
        assert!(!has_net(&layout));
        layout.shared.net = false;
        assert!(has_net(&layout));
        layout.network = NetworkPolicy::Allow;
        assert!(!has_net(&layout));
    }

    #[test]
    fn joined_mount_namespace_binds_only_the_root() {
        let mut layout = Layout {
            root: "/r".into(),
            network: NetworkPolicy::Deny,
            mounts: vec![ReadOnlyMount {
                host: "/opt/tools".into(),
                guest: "/tools".into(),
            }],
            etc: "/r/etc".into(),
            etc_binds: vec!["/etc/ssl/certs".into()],
            shared: Shared {
                net: true,
                system: true,
            },
            layers: None,
        };
        let launch = Launch {
            argv: vec!["true".into()],
            cwd: "/".into(),
            user: None,
            env_fd: 3,
            status_fd: None,
            seccomp_fd: None,
        };
        let args = bwrap_args(&layout, &facts(), &launch);
        let expected = [
            "--args",
            "3",
            "--unshare-ipc",
            "--unshare-pid",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--new-session",
            "--die-with-parent",
            "--cap-drop",
            "ALL",
            "--bind",
            "/r",
            "/",
            "--dev",
            "/dev",
            "--size",
            "67108864",
            "--tmpfs",
            "/dev/shm",
            "--proc",
            "/proc",
            "--ro-bind",
            "/proc/sys",
            "/proc/sys",
            "--ro-bind-try",
            "/proc/sysrq-trigger",
            "/proc/sysrq-trigger",
            "--tmpfs",
            "/proc/1",
            "--remount-ro",
            "/proc/1",
            "--tmpfs",
            "/proc/acpi",
            "--remount-ro",
            "/proc/acpi",
            "--dev-bind",
            "/dev/null",
            "/proc/keys",
            "--ro-bind",
            "/opt/tools",
            "/tools",
            "--",
            "/bin/sh",
            "-c",
            LAUNCH_SCRIPT,
            "sh",
            "/",
            "true",
        ];
        assert_eq!(strs(&args), expected);
        let binds: Vec<(String, String)> = root_binds(&layout, &facts())
            .into_iter()
            .map(|(h, g)| (h.display().to_string(), g.display().to_string()))
            .collect();
        let pairs = [
            ("/r/etc", "/r/etc"),
            ("/etc/ssl/certs", "/r/etc/ssl/certs"),
            ("/lib64", "/r/lib64"),
            ("/r/sys", "/r/sys"),
            ("/usr", "/r/usr"),
        ];
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        assert_eq!(binds, pairs);
        // The same binds, in the same order, as the per-command line makes.
        layout.shared.system = false;
        let full = bwrap_args(&layout, &facts(), &launch);
        let per_command: Vec<(String, String)> = strs(&full)
            .windows(3)
            .filter(|w| w[0] == "--ro-bind" && !w[1].starts_with("/proc/") && w[1] != "/opt/tools")
            .map(|w| (w[1].to_string(), format!("/r{}", w[2])))
            .collect();
        assert_eq!(per_command, pairs);
    }

    #[test]
    fn env_order_and_encoding() {
        let spec: BTreeMap<_, _> = [("A".to_string(), "spec".to_string())].into();
        let cmd: BTreeMap<_, _> = [
            ("A".to_string(), "cmd".to_string()),
            ("HOME".to_string(), "/root".to_string()),
        ]
        .into();
        let env = command_env(
            &["/img/bin".into(), "/fac/bin".into()],
            Some("0"),
            &spec,
            &cmd,
        );
        assert_eq!(
            env.get("PATH").unwrap(),
            &format!("/img/bin:/fac/bin:{DEFAULT_PATH}")
        );
        assert_eq!(env["A"], "cmd");
        assert_eq!(env["HOME"], "/root");
        assert_eq!(env["LANG"], "C.UTF-8");
        assert_eq!(env["PYTHONHASHSEED"], "0");
        let plain = command_env(&[], None, &BTreeMap::new(), &BTreeMap::new());
        assert_eq!(plain.len(), 3);
        assert_eq!(plain["PATH"], DEFAULT_PATH);
        assert_eq!(plain["HOME"], HOME);

        let small: BTreeMap<_, _> = [("K".to_string(), "v w".to_string())].into();
        assert_eq!(env_args(&small).unwrap(), b"--clearenv\0--setenv\0K\0v w\0");
        let bad: BTreeMap<_, _> = [("K".to_string(), "a\0b".to_string())].into();
        assert!(matches!(env_args(&bad), Err(Error::InvalidInput(m)) if m.contains("NUL")));
    }

    #[test]
    fn limits_follow_reference() {
        let unlimited = |_| None;
        let l = limits(104, None, 2, &unlimited);
        assert_eq!(
            l,
            vec![
                Limit {
                    resource: Resource::RLIMIT_CORE,
                    value: 0
                },
                Limit {
                    resource: Resource::RLIMIT_FSIZE,
                    value: 1 << 30
                },
                Limit {
                    resource: Resource::RLIMIT_NPROC,
                    value: 360
                },
            ]
        );
        let l = limits(1, Some(Duration::from_millis(1500)), 3, &unlimited);
        assert_eq!(
            l[3],
            Limit {
                resource: Resource::RLIMIT_CPU,
                value: 5 + 5
            }
        );
        let huge = limits(1, Some(Duration::MAX), 64, &unlimited);
        assert_eq!(huge[3].value, u64::MAX);
        let low = |r| (r == Resource::RLIMIT_FSIZE).then_some(4096);
        assert_eq!(limits(1, None, 1, &low)[1].value, 4096);
        assert_eq!(
            parse_loadavg_tasks("0.40 0.35 0.15 1/104 6386\n"),
            Some(104)
        );
        assert_eq!(parse_loadavg_tasks("garbage"), None);
    }

    #[test]
    fn mounts_and_workdir_rules() {
        let yes = |_: &Path| true;
        let no = |_: &Path| false;
        let m = plan_mounts(
            &["/opt/a".into()],
            &["/opt/a".into(), "/srv/b/".into()],
            &[("/data/x".into(), "/fixture".into())],
            &yes,
            &yes,
        )
        .unwrap();
        let guests: Vec<_> = m.iter().map(|m| m.guest.as_str()).collect();
        assert_eq!(guests, ["/opt/a", "/srv/b", "/fixture"]);

        let missing = plan_mounts(&["/nope".into()], &[], &[], &yes, &no).unwrap_err();
        assert!(matches!(&missing, Error::InvalidInput(m) if m.contains("/nope")));
        let sys = plan_mounts(
            &[],
            &[],
            &[("/x".into(), "/usr/local/share/fixture".into())],
            &yes,
            &yes,
        )
        .unwrap_err();
        assert!(sys.is_unsupported() && sys.to_string().contains("system directory"));
        let nested = plan_mounts(
            &["/opt/a".into()],
            &[],
            &[("/x".into(), "/opt/a/b".into())],
            &yes,
            &yes,
        )
        .unwrap_err();
        assert!(nested.is_unsupported());
        let rel = plan_mounts(&["rel".into()], &[], &[], &yes, &yes).unwrap_err();
        assert!(matches!(rel, Error::InvalidInput(_)));

        assert_eq!(plan_workdir("", &m).unwrap(), "/");
        assert_eq!(plan_workdir("/workspace", &m).unwrap(), "/workspace");
        assert!(plan_workdir("/usr/lib/shellbox-test", &m)
            .unwrap_err()
            .is_unsupported());
        assert!(plan_workdir("/opt/a/sub", &m).unwrap_err().is_unsupported());
        assert!(plan_workdir("/proc/1", &m).unwrap_err().is_unsupported());
        assert_eq!(plan_workdir("/opt/ab", &m).unwrap(), "/opt/ab");
    }

    #[test]
    fn user_rules() {
        let lookup = |u: &str| match u {
            "nobody" | "65534" => Some((65534, 65534)),
            "root" | "0" => Some((0, 0)),
            _ => None,
        };
        assert_eq!(plan_user(None, 0, &lookup).unwrap(), None);
        assert_eq!(plan_user(Some("0"), 0, &lookup).unwrap(), None);
        assert_eq!(plan_user(Some("root"), 0, &lookup).unwrap(), None);
        assert_eq!(plan_user(Some("1000"), 1000, &lookup).unwrap(), None);
        assert_eq!(
            plan_user(Some("nobody"), 0, &lookup).unwrap(),
            Some(UserSwitch {
                uid: 65534,
                gid: 65534
            })
        );
        let ghost = plan_user(Some("ghost"), 0, &lookup).unwrap_err();
        assert!(ghost.is_unsupported());
        assert!(ghost.to_string().contains("no such user: ghost"), "{ghost}");
        assert!(plan_user(Some("65534"), 1000, &lookup)
            .unwrap_err()
            .is_unsupported());
        assert!(is_within("/a/b", "/a") && !is_within("/ab", "/a") && is_within("/a", "/a"));
        assert!(is_within("/x", "/"));
    }

    #[test]
    fn copy_on_write_plan() {
        // REFERENCE 4.2's example: strictly inside, decoded, deduplicated, by depth then path.
        let points: Vec<String> = [
            "/etc/resolv.conf",
            "/etc/host name",
            "/usr/lib/modules",
            "/usr",
            "/usrlocal/data",
            "/app",
            "/etc/resolv.conf",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let dirs = vec!["/etc".to_string(), "/usr".to_string()];
        assert_eq!(
            nested_mounts(&points, &dirs),
            ["/etc/host name", "/etc/resolv.conf", "/usr/lib/modules"]
        );
        assert_eq!(overlaid_dirs(&facts()), ["/etc", "/lib64", "/usr"]);

        let options = overlay_options(
            "/usr".as_ref(),
            "/t/l/usr".as_ref(),
            "/t/l/usr.work".as_ref(),
        )
        .unwrap();
        assert_eq!(
            options,
            "lowerdir=/usr,upperdir=/t/l/usr,workdir=/t/l/usr.work,redirect_dir=off,\
             metacopy=off,index=off,xino=off,uuid=off,volatile"
        );
        for bad in ["/t,x", "/t:x", "/t\\x"] {
            let e = overlay_options("/usr".as_ref(), bad.as_ref(), "/w".as_ref()).unwrap_err();
            assert!(matches!(e, Error::InvalidInput(_)), "{bad}");
        }

        let layout = Layout {
            root: "/p/root".into(),
            network: NetworkPolicy::Deny,
            mounts: vec![],
            etc: "/e/root/etc".into(),
            etc_binds: vec![],
            shared: Shared {
                net: true,
                system: true,
            },
            layers: Some(Layers {
                dir: "/p/layers".into(),
                nested: vec!["/usr/lib/modules".into()],
                var: vec![],
            }),
        };
        let overlay = |guest: &str, lower: &str| RootMount::Overlay {
            guest: guest.into(),
            lower: lower.into(),
            upper: format!("/p/layers{guest}").into(),
            work: format!("/p/layers{guest}.work").into(),
            target: format!("/p/root{guest}").into(),
        };
        let ro = |source: &str, target: &str| RootMount::ReadOnly {
            source: source.into(),
            target: target.into(),
        };
        assert_eq!(
            root_mounts(&layout, &facts()),
            [
                overlay("/etc", "/e/root/etc"),
                overlay("/lib64", "/lib64"),
                ro("/p/root/sys", "/p/root/sys"),
                overlay("/usr", "/usr"),
                ro("/usr/lib/modules", "/p/root/usr/lib/modules"),
            ]
        );
        let read_only = Layout {
            layers: None,
            ..layout
        };
        assert!(root_mounts(&read_only, &facts())
            .iter()
            .all(|m| matches!(m, RootMount::ReadOnly { .. })));

        let layered = overlaid_dirs(&facts());
        assert_eq!(
            plan_workdir_in("/usr/local/src", &[], &layered).unwrap(),
            "/usr/local/src"
        );
        assert!(plan_workdir_in("/sys/x", &[], &layered)
            .unwrap_err()
            .is_unsupported());
        assert!(plan_workdir_in("/sbin/x", &[], &layered)
            .unwrap_err()
            .is_unsupported());
        // The refusal says what to do: a read-only factory could make it copy-on-write.
        let e = plan_workdir_in("/usr/lib/x", &[], &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/workspace") && e.contains("copy-on-write"),
            "{e}"
        );
        let e = plan_workdir_in("/sys/x", &[], &layered)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/workspace") && !e.contains("copy-on-write"),
            "{e}"
        );
    }
}
