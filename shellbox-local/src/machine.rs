//! [`LocalMachineFactory`] and [`LocalMachine`].

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shellbox_core::validate::validate_guest_path;
use shellbox_core::{
    async_trait, Command, Error, EventStream, ImageSource, Machine, MachineFactory, MachineSpec,
    ShellSession,
};
use tokio::sync::{watch, RwLock};

use crate::launch::{self, DriveParams, Drivers};
use crate::plan::{self, HostFacts, Launch, Layout, ReadOnlyMount, SystemDirectories};
use crate::root;
use crate::seccomp::SeccompSetup;

/// How long the factory's probe of one bwrap candidate may take.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// What bwrap needs to sandbox here, added to the reason of a candidate that ran and failed.
pub const SANDBOX_REQUIREMENTS: &str = "bwrap needs, when run as root, CAP_SYS_ADMIN and CAP_NET_ADMIN, no AppArmor confinement and a seccomp policy allowing pivot_root; when run as another user, unprivileged user namespaces";

/// Options of a [`LocalMachineFactory`] (REFERENCE 4.1).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalOptions {
    /// Host directories mounted read-only at their own path in every machine. Made
    /// absolute against the current directory; each must be an existing directory.
    pub read_only: Vec<PathBuf>,
    /// Directories put on every command's `PATH` after the image's own bin dirs and
    /// before the system ones (made absolute; not mounted by themselves).
    pub bin_dirs: Vec<PathBuf>,
    /// The bwrap program to use; `None` tries each `bwrap` on `PATH`, then `/usr/bin/bwrap`.
    pub bwrap: Option<PathBuf>,
    /// `PYTHONHASHSEED` given to every command when set.
    pub hash_seed: Option<String>,
    /// How machines show the host's system directories and their private `/etc`:
    /// read-only (the default) or through a copy-on-write layer of each machine's own
    /// ([`SystemDirectories::CopyOnWrite`], which needs a root host process and overlayfs;
    /// [`LocalMachineFactory::new`] checks both).
    pub system_directories: SystemDirectories,
    /// Where `ImageSource::Packages` Python environments are locked and built (one
    /// directory per version and requirement set, shared by every factory of the host);
    /// `None` is `$HOME/.cache/shellbox/python`. A directory's name is the reference
    /// library's key (the version and the requirements, nothing else), so the first lock
    /// made for a requirement set serves every later factory using this cache: factories
    /// whose uv sees other package indexes (`UV_INDEX_URL`, `UV_FIND_LINKS`, a `uv.toml`)
    /// should each use a cache of their own.
    pub package_cache: Option<PathBuf>,
    /// The CPython version (`X.Y.Z`) of those environments; `None` is the
    /// `python_interpreter`'s own version when one is set, else
    /// [`DEFAULT_PYTHON_VERSION`](crate::DEFAULT_PYTHON_VERSION).
    pub python_version: Option<String>,
    /// A local CPython (of `python_version`) to build those environments from, for hosts
    /// where `uv python install` cannot download one; `None` lets uv download it.
    pub python_interpreter: Option<PathBuf>,
    /// The uv program for those environments; `None` is `uv` on `PATH`.
    pub uv: Option<PathBuf>,
}

struct FactoryInner {
    bwrap: PathBuf,
    read_only: Vec<PathBuf>,
    bin_dirs: Vec<String>,
    hash_seed: Option<String>,
    facts: HostFacts,
    /// Machines make their namespaces once and commands join them (see the `ns` module);
    /// false when this process may not (not root), so bwrap makes them per command.
    share_ns: bool,
    /// The seccomp filters every command gets (see the `seccomp` module), built once.
    seccomp: Arc<SeccompSetup>,
    /// Where machines' pids cgroups are made; `None` where none can be (see `cgroup`).
    cgroups: Option<crate::cgroup::CgroupBase>,
    /// The supervisor program ([`shellbox_supervisor::SUPERVISOR_PROGRAM`]) in a sealed
    /// memfd, which each machine's launcher re-opens for bwrap's `--ro-bind-data`.
    program: Arc<std::os::fd::OwnedFd>,
    /// The private `/etc` every machine of the factory shows read-only (made once), or
    /// the lower layer of its writable `/etc` (copy-on-write).
    etc: Arc<root::SharedEtc>,
    /// Copy-on-write only: the overlaid directories with their lower's owner and mode, in
    /// mount order; empty for a read-only factory.
    layers: Vec<root::LayerDir>,
    /// Copy-on-write only: host mount points nested in the overlaid directories, bound
    /// read-only over the overlays (read when the factory was made).
    nested: Vec<PathBuf>,
    /// How `ImageSource::Packages` environments are resolved (see `packages`).
    packages: crate::packages::PackageSettings,
    /// The root skeletons of fresh overlay-root machines, one frozen layer per distinct
    /// mounts and workdir (see [`FactoryInner::skeleton`]), kept while the factory lives.
    skeletons: std::sync::Mutex<std::collections::HashMap<String, Arc<crate::layer::Layer>>>,
}

/// The most skeleton layers a factory keeps; a machine with yet another layout of mount
/// points gets a skeleton of its own, removed with it.
const MAX_SKELETONS: usize = 64;

/// What a machine root that is an overlayfs needs of this host, in the error when its
/// mount fails.
pub const ROOT_OVERLAY_REQUIREMENTS: &str = "a local machine's root is an overlayfs in its own mount namespace when this process is root: it needs overlayfs in the kernel (/proc/filesystems; modprobe overlay), the new mount API with lowerdir+ (Linux 6.5) and a host temp dir (TMPDIR) that is not itself on overlayfs";

/// Why a local machine takes no snapshot when its factory cannot (see the `layer` module).
pub const SNAPSHOT_REQUIREMENTS: &str = "snapshots of local machines need a root host process (CAP_SYS_ADMIN: the machine root is an overlayfs in the machine's own mount namespace) and read-only system directories (SystemDirectories::ReadOnly: copy-on-write layers live in memory of the machine's namespace and are not snapshotted yet)";

impl FactoryInner {
    /// The overlaid guest directories (empty for a read-only factory).
    fn overlaid(&self) -> Vec<String> {
        self.layers.iter().map(|l| l.guest.clone()).collect()
    }

    /// Whether this factory's machines take snapshots (see the `layer` module): their root
    /// is an overlayfs (a root host process) and their system directories are read-only.
    fn snapshots(&self) -> bool {
        self.share_ns && self.layers.is_empty()
    }

    /// The bottom layer of a fresh overlay-root machine with these mount points and this
    /// root workdir: the files [`root::fill_skeleton`] writes, made once per factory and
    /// layout and shared read-only by every machine (and snapshot) over it, so a create
    /// writes three directories to the host's disk instead of the whole skeleton.
    /// Blocking.
    ///
    /// # Errors
    /// [`Error::Io`] when the layer cannot be made.
    fn skeleton(
        &self,
        mounts: &[ReadOnlyMount],
        workdir: &str,
    ) -> Result<Arc<crate::layer::Layer>, Error> {
        let key = format!(
            "{workdir:?} {:?}",
            mounts
                .iter()
                .map(|m| (m.guest.as_str(), m.host.is_dir()))
                .collect::<Vec<_>>()
        );
        let mut skeletons = self.skeletons.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(layer) = skeletons.get(&key) {
            return Ok(layer.clone());
        }
        let layer = crate::layer::Layer::filled(|dir| {
            root::fill_skeleton(dir, &self.facts, mounts, workdir, &self.layers)
        })?;
        if skeletons.len() < MAX_SKELETONS {
            skeletons.insert(key, layer.clone());
        }
        Ok(layer)
    }

    /// The root overlay of a machine whose root is `root`, over `chain` (top first) or,
    /// with none, the factory's empty directory.
    fn root_overlay(
        &self,
        root: &Path,
        chain: &[Arc<crate::layer::Layer>],
    ) -> crate::ns::RootOverlay {
        let (upper, work) = root::overlay_dirs(root);
        let lowers = if chain.is_empty() {
            vec![self.etc.empty().to_path_buf()]
        } else {
            chain.iter().map(|l| l.files()).collect()
        };
        crate::ns::RootOverlay {
            lowers,
            upper,
            work,
            target: root.to_path_buf(),
        }
    }

    /// The [`plan::Layers`] of a machine whose root is `root` (`None`: read-only).
    fn machine_layers(&self, root: &Path) -> Option<plan::Layers> {
        (!self.layers.is_empty()).then(|| plan::Layers {
            dir: root::layers_dir(root),
            nested: self.nested.clone(),
            var: self
                .layers
                .iter()
                .filter(|l| plan::VAR_OVERLAID_DIRS.contains(&l.guest.as_str()))
                .map(|l| l.guest.clone())
                .collect(),
        })
    }
}

/// What [`LocalMachineFactory::plan`] makes of a host-image spec: its read-only mounts, its
/// workdir and the bin dirs that go first on its `PATH`.
pub(crate) struct Planned {
    pub(crate) mounts: Vec<ReadOnlyMount>,
    pub(crate) workdir: String,
    pub(crate) bin_dirs: Vec<String>,
}

/// What copy-on-write machines need of this host, in the factory's error when it lacks it.
pub const COPY_ON_WRITE_REQUIREMENTS: &str = "copy-on-write system directories need a root host process (CAP_SYS_ADMIN, to mount overlayfs in each machine's mount namespace), overlayfs in the kernel (/proc/filesystems; modprobe overlay) and a host temp dir (TMPDIR) that is not itself on overlayfs";

/// Checks what copy-on-write machines need before any is made: a root host process that
/// can make mount namespaces (`share_ns`), overlayfs in `/proc/filesystems`, and a temp
/// dir not on overlayfs (an upper layer cannot live there).
///
/// # Errors
/// [`Error::SandboxUnavailable`] naming what is missing and [`COPY_ON_WRITE_REQUIREMENTS`].
fn check_copy_on_write(share_ns: bool) -> Result<(), Error> {
    let mut missing = Vec::new();
    if !share_ns {
        missing.push(format!(
            "this process (UID {}) cannot make mount namespaces",
            nix::unistd::geteuid()
        ));
    }
    let filesystems = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    if !filesystems
        .lines()
        .any(|l| l.split_whitespace().last() == Some("overlay"))
    {
        missing.push("overlayfs is not in /proc/filesystems".to_string());
    }
    let tmp = std::env::temp_dir();
    if let Ok(st) = nix::sys::statfs::statfs(&tmp) {
        if st.filesystem_type() == nix::sys::statfs::OVERLAYFS_SUPER_MAGIC {
            missing.push(format!("the temp dir {} is on overlayfs", tmp.display()));
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::SandboxUnavailable {
        reasons: vec![format!(
            "copy-on-write: {} ({COPY_ON_WRITE_REQUIREMENTS})",
            missing.join("; ")
        )],
    })
}

/// Creates [`LocalMachine`]s: commands on this host in bubblewrap sandboxes, each machine
/// with its own private root directory (REFERENCE section 4). Trusted commands only: this
/// isolates machines from each other and from host files, it is not a security boundary
/// against hostile code.
#[derive(Clone)]
pub struct LocalMachineFactory {
    inner: Arc<FactoryInner>,
}

impl std::fmt::Debug for LocalMachineFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalMachineFactory")
            .field("bwrap", &self.inner.bwrap)
            .field("read_only", &self.inner.read_only)
            .field("bin_dirs", &self.inner.bin_dirs)
            .finish_non_exhaustive()
    }
}

fn absolute(path: &Path) -> Result<PathBuf, Error> {
    std::path::absolute(path).map_err(|e| Error::io(format!("make {} absolute", path.display()), e))
}

fn path_string(path: &Path, what: &str) -> Result<String, Error> {
    path.to_str()
        .map(str::to_string)
        .ok_or_else(|| Error::invalid(format!("{what} {} is not valid UTF-8", path.display())))
}

fn bwrap_candidates(given: Option<&Path>) -> Vec<PathBuf> {
    if let Some(p) = given {
        return vec![p.to_path_buf()];
    }
    let mut found: Vec<PathBuf> = Vec::new();
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path).chain([PathBuf::from("/usr/bin")]) {
        let candidate = dir.join("bwrap");
        if !candidate.is_file() {
            continue;
        }
        let canonical = candidate.canonicalize().unwrap_or(candidate.clone());
        if !found
            .iter()
            .any(|f| f.canonicalize().unwrap_or(f.clone()) == canonical)
        {
            found.push(candidate);
        }
    }
    found
}

/// The largest `storage_mb` one local machine may have: half the host's memory in MiB
/// (`sysinfo(2)`'s total RAM), because a bounded root is a `tmpfs`, held in RAM (issue 8's
/// break-it pass: `storage_mb` 10,000,000 gave a 9.6 TiB tmpfs a guest could fill until the
/// host ran out of memory). All live machines of a process together hold at most this
/// much (and one `/dev/shm`) in their memory-backed file systems: see
/// `MemoryReservation` in this module; a create past it fails with [`Error::Backend`].
pub fn largest_storage_mb() -> u64 {
    let total_bytes = nix::sys::sysinfo::sysinfo()
        .map(|info| info.ram_total())
        .unwrap_or(0);
    total_bytes / 2 / (1024 * 1024)
}

/// The smallest [`MachineSpec::pids_limit`] a local machine takes: its pids cgroup also
/// holds bwrap, the supervisor and its threads and a keeper per running command (about
/// five tasks for one command), so a smaller limit could not start a command or a
/// pipeline (issue 12's break-it pass: 1 to 5 failed at create or at the first command
/// with bwrap's, a panic's or a killed keeper's words, after `check_environment` said yes).
pub const MIN_PIDS_LIMIT: u32 = 16;

/// Bytes of `tmpfs` (host memory) the live local machines of this process may fill
/// together, reserved at create and given back at close: see [`MemoryReservation`].
static TMPFS_RESERVED_BYTES: AtomicU64 = AtomicU64::new(0);

/// A live machine's share of this process's `tmpfs` budget ([`largest_storage_mb`], half
/// the host's RAM, plus one `/dev/shm`): the most its memory-backed file systems can hold — `/dev/shm`
/// ([`crate::devfs::shm_bytes`]), a bounded root (`storage_mb`, which also holds a
/// copy-on-write machine's layers) or else a copy-on-write machine's layers `tmpfs`
/// ([`default_layers_mb`](crate::default_layers_mb)). Every machine's file systems are
/// bounded on their own; this bounds them together (issue 12's break-it pass: twelve
/// copy-on-write machines held 1.2 GB of host memory and could hold 12 GiB), so guests can
/// never make the host's OOM killer end a host process. Machines of other processes are not
/// counted. Given back when dropped (at close).
#[derive(Debug)]
pub(crate) struct MemoryReservation(u64);

impl MemoryReservation {
    /// Reserves `bytes` of the budget.
    ///
    /// # Errors
    /// [`Error::LimitReached`] (retryable: a machine's close gives room) when the live
    /// machines of this process already reserved so much that `bytes` more would pass the
    /// budget (the message gives the numbers).
    pub(crate) fn take(bytes: u64) -> Result<MemoryReservation, Error> {
        // Room for one machine of the largest storage_mb with its /dev/shm.
        let budget = largest_storage_mb()
            .saturating_mul(1 << 20)
            .saturating_add(crate::plan::SHM_SIZE_BYTES);
        TMPFS_RESERVED_BYTES
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |reserved| {
                reserved.checked_add(bytes).filter(|total| *total <= budget)
            })
            .map(|_| MemoryReservation(bytes))
            .map_err(|reserved| {
                Error::LimitReached(format!(
                    "reserve host memory for the machine's tmpfs file systems: the machine's \
                     /dev/shm, bounded root and copy-on-write layers can hold {} MiB of host \
                     memory, and the live local machines of this process already reserved {} \
                     MiB of the {} MiB all of them may hold together (half the host's RAM and \
                     one /dev/shm): close a machine, or give machines a smaller storage_mb",
                    bytes >> 20,
                    reserved >> 20,
                    budget >> 20
                ))
            })
    }

    /// What a machine with this `storage_mb` reserves; `copy_on_write` when its system
    /// directories are copy-on-write layers.
    pub(crate) fn bytes_for(storage_mb: Option<u64>, copy_on_write: bool) -> u64 {
        let shm = crate::devfs::shm_bytes(storage_mb);
        let files = match storage_mb {
            Some(mb) => mb.saturating_mul(1 << 20),
            None if copy_on_write => root::default_layers_mb().saturating_mul(1 << 20),
            None => 0,
        };
        shm.saturating_add(files)
    }
}

impl Drop for MemoryReservation {
    fn drop(&mut self) {
        TMPFS_RESERVED_BYTES.fetch_sub(self.0, Ordering::SeqCst);
    }
}

impl LocalMachineFactory {
    /// Checks the options and probes bwrap: each candidate in turn runs the full sandbox
    /// line of a throwaway machine (network denied) on `/bin/sh -c 'exit 0'` within
    /// [`PROBE_TIMEOUT`]; the first that succeeds is used. Blocks while probing (about
    /// ten milliseconds when bwrap works).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] listing `read_only` entries that are not existing
    /// directories, or a non-UTF-8 `bin_dirs` entry; [`Error::SandboxUnavailable`] with
    /// `"<candidate>: <bwrap's stderr | exit status | spawn error>"` for every candidate
    /// when none can sandbox (or `"bwrap: not found ..."` when there is none).
    ///
    /// With [`SystemDirectories::CopyOnWrite`], [`Error::SandboxUnavailable`] naming what
    /// is missing ([`COPY_ON_WRITE_REQUIREMENTS`]: a root host process, overlayfs in
    /// `/proc/filesystems`, a temp dir not on overlayfs) before any probe; and the probe
    /// machine is built with its layers, so a kernel refusing the overlay mount fails the
    /// candidate with the mount's error.
    pub fn new(options: LocalOptions) -> Result<Self, Error> {
        let read_only = options
            .read_only
            .iter()
            .map(|p| absolute(p))
            .collect::<Result<Vec<_>, _>>()?;
        let missing: Vec<String> = read_only
            .iter()
            .filter(|p| !p.is_dir())
            .map(|p| p.display().to_string())
            .collect();
        if !missing.is_empty() {
            return Err(Error::invalid(format!(
                "read-only dirs do not exist or are not directories: {}",
                missing.join(", ")
            )));
        }
        let bin_dirs = options
            .bin_dirs
            .iter()
            .map(|p| absolute(p).and_then(|p| path_string(&p, "bin dir")))
            .collect::<Result<Vec<_>, _>>()?;
        let facts = HostFacts::probe();
        let share_ns = match crate::ns::loopback_netns() {
            Ok(_) => true,
            Err(e) => {
                tracing::debug!(
                    "per-machine network namespaces unavailable ({e}); bwrap makes one per command"
                );
                false
            }
        };
        let seccomp = SeccompSetup::new(nix::unistd::geteuid().is_root()).map_err(|e| {
            Error::SandboxUnavailable {
                reasons: vec![format!("seccomp filter: {e}")],
            }
        })?;
        let seccomp = Arc::new(seccomp);
        let program = Arc::new(program_memfd().map_err(|e| Error::SandboxUnavailable {
            reasons: vec![format!("supervisor program memfd: {e}")],
        })?);
        let cgroups = if nix::unistd::geteuid().is_root() {
            match crate::cgroup::CgroupBase::setup() {
                Ok(base) => Some(base),
                Err(e) => {
                    tracing::debug!("no pids cgroup for machines ({e}); RLIMIT_NPROC only");
                    None
                }
            }
        } else {
            None
        };
        let cow = options.system_directories == SystemDirectories::CopyOnWrite;
        if cow {
            check_copy_on_write(share_ns)?;
        }
        let etc = Arc::new(root::SharedEtc::create(cow)?);
        let (layers, nested) = if cow {
            let overlaid = plan::overlaid_dirs(&facts);
            let layers = overlaid
                .iter()
                .map(|guest| {
                    let lower = if guest == "/etc" {
                        etc.dir().to_path_buf()
                    } else {
                        PathBuf::from(guest)
                    };
                    root::LayerDir::of(guest, &lower)
                })
                .collect::<Result<Vec<_>, _>>()?;
            let points: Vec<String> = root::mounts_below(Path::new("/"))
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            let host_dirs: Vec<String> = overlaid.into_iter().filter(|d| d != "/etc").collect();
            let nested = plan::nested_mounts(&points, &host_dirs)
                .into_iter()
                .map(PathBuf::from)
                .collect();
            // apt's and dpkg's state, overlaid after the system directories (see
            // `plan::VAR_OVERLAID_DIRS`).
            let mut layers = layers;
            for dir in plan::VAR_OVERLAID_DIRS {
                if Path::new(dir).is_dir() {
                    layers.push(root::LayerDir::of(dir, Path::new(dir))?);
                }
            }
            (layers, nested)
        } else {
            (Vec::new(), Vec::new())
        };
        let candidates = bwrap_candidates(options.bwrap.as_deref());
        if candidates.is_empty() {
            return Err(Error::SandboxUnavailable {
                reasons: vec![
                    "bwrap: not found on PATH or at /usr/bin/bwrap (install bubblewrap)".into(),
                ],
            });
        }
        let mut reasons = Vec::new();
        for candidate in candidates {
            let inner = FactoryInner {
                bwrap: candidate.clone(),
                read_only: read_only.clone(),
                bin_dirs: bin_dirs.clone(),
                hash_seed: options.hash_seed.clone(),
                facts: facts.clone(),
                share_ns,
                seccomp: seccomp.clone(),
                cgroups: cgroups.clone(),
                program: program.clone(),
                etc: etc.clone(),
                layers: layers.clone(),
                nested: nested.clone(),
                packages: crate::packages::PackageSettings {
                    cache: options.package_cache.clone(),
                    python_version: options.python_version.clone(),
                    python_interpreter: options.python_interpreter.clone(),
                    uv: options.uv.clone(),
                },
                skeletons: Default::default(),
            };
            match probe(&inner) {
                Ok(()) => {
                    return Ok(Self {
                        inner: Arc::new(inner),
                    })
                }
                Err(reason) => reasons.push(format!("{}: {reason}", candidate.display())),
            }
        }
        Err(Error::SandboxUnavailable { reasons })
    }

    /// The bwrap program this factory uses.
    pub fn bwrap(&self) -> &Path {
        &self.inner.bwrap
    }

    /// [`MachineFactory::create`] with the concrete type, for callers that want the
    /// local-only methods of [`LocalMachine`].
    ///
    /// An [`ImageSource::Packages`] source is resolved first (the `packages` module: its
    /// Python environment through `shellbox-pyenv`, mounted like a `HostImage`), and its
    /// tools are checked in the new machine: [`Error::Unsupported`] beginning with
    /// [`TOOLS_REFUSAL`](crate::TOOLS_REFUSAL), the machine closed, when one is not
    /// executable on the `PATH`; [`Error::Backend`] when the environment cannot be built.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a spec failing [`MachineSpec::validate`] or a missing
    /// read-only host path; [`Error::Unsupported`] for a source other than
    /// [`ImageSource::Host`] and [`ImageSource::Packages`], any of `cpus`, `memory_mb`,
    /// non-zero `gpus`
    /// (bwrap enforces none of them), `storage_mb` when this process is not root (the
    /// bound is a `tmpfs` mounted on the machine root; `storage_mb` over 2^44 - 1 MiB is
    /// [`Error::InvalidInput`]) or above [`largest_storage_mb`] (half the host's memory:
    /// the tmpfs is held in RAM; for a copy-on-write machine it holds the layers too), a
    /// mount inside a system directory or another mount,
    /// a workdir inside a system directory (outside the layers of a copy-on-write machine,
    /// where it is made) or mount; [`Error::Io`] when the root, its
    /// file system, its copy-on-write layers or its pids cgroup cannot be made. Nothing is
    /// left behind on error.
    ///
    /// [`MachineFactory::check_environment`] makes the same checks up to the root's
    /// creation (and looks up a shell-only package spec's tools on the host directories the
    /// machine would show), acquiring nothing.
    ///
    /// Returns before the machine's sandbox runs: bwrap and the supervisor start on a
    /// task of their own begun by the first command, which waits for them (DESIGN.md
    /// "The supervisor"); a failed start is that command's (and every later one's)
    /// [`Error::Backend`].
    /// Must be called within a tokio runtime.
    pub async fn create_local(&self, spec: MachineSpec) -> Result<LocalMachine, Error> {
        self.create_machine(spec, None).await
    }

    /// Like [`MachineFactory::create_from`], returning the concrete [`LocalMachine`]: a
    /// machine made as [`create_local`](Self::create_local) makes one (the spec's env,
    /// network, user, mounts and limits apply), whose root is its own empty upper layer
    /// over the snapshot's frozen layers (nothing is copied; the spec's workdir is made
    /// when the snapshot lacks it). The machine holds a share of the layers, so they
    /// outlive [`Snapshot::delete`](shellbox_core::Snapshot::delete) until it closes.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for a snapshot another backend took, on a factory that takes
    /// no snapshots ([`SNAPSHOT_REQUIREMENTS`]) or with `storage_mb` (a bounded root is a
    /// `tmpfs` of its own, not layers); [`Error::Closed`] for a deleted snapshot; those
    /// of [`create_local`](Self::create_local).
    pub async fn create_from_local(
        &self,
        snapshot: &shellbox_core::Snapshot,
        spec: MachineSpec,
    ) -> Result<LocalMachine, Error> {
        let taken = snapshot.expect_backend::<crate::layer::LocalSnapshot>("local")?;
        if !self.inner.snapshots() {
            return Err(Error::unsupported(SNAPSHOT_REQUIREMENTS));
        }
        if spec.storage_mb.is_some() {
            return Err(Error::unsupported(
                "a local machine with storage_mb cannot start from a snapshot: its bounded root is a tmpfs of its own, not layers",
            ));
        }
        let chain = taken.chain()?;
        self.create_machine(spec, Some(chain)).await
    }

    /// [`create_local`](Self::create_local), over a snapshot's layers when `from` is set.
    async fn create_machine(
        &self,
        spec: MachineSpec,
        from: Option<crate::layer::Chain>,
    ) -> Result<LocalMachine, Error> {
        let (spec, tools) =
            crate::packages::host_spec(&self.inner.packages, self.capabilities(), spec).await?;
        let Planned {
            mounts,
            workdir,
            bin_dirs,
        } = self.plan(&spec)?;
        let inner = self.inner.clone();
        let (w, network, pids_limit, storage_mb) = (
            workdir.clone(),
            spec.network,
            spec.pids_limit,
            spec.storage_mb,
        );
        let memory = MemoryReservation::take(MemoryReservation::bytes_for(
            storage_mb,
            !self.inner.layers.is_empty(),
        ))?;
        let overlay_root = self.inner.share_ns && storage_mb.is_none();
        let chain = from.unwrap_or_default();
        let forked = !chain.is_empty();
        let (layout, namespaces, cgroup, chain) = tokio::task::spawn_blocking(move || {
            let in_layer = inner.overlaid().iter().any(|d| plan::is_within(&w, d));
            let root_workdir = if in_layer { "/" } else { w.as_str() };
            // A fresh overlay root starts over the factory's skeleton of this layout.
            let made_chain = if overlay_root && !forked {
                vec![inner.skeleton(&mounts, root_workdir)?]
            } else {
                chain
            };
            let root = root::create_root(
                &inner.facts,
                &mounts,
                root_workdir,
                storage_mb,
                &inner.layers,
                overlay_root,
            )?;
            let mut layout = Layout {
                layers: inner.machine_layers(&root),
                root,
                network,
                mounts,
                etc: inner.etc.dir().to_path_buf(),
                etc_binds: inner.etc.binds().to_vec(),
                shared: plan::Shared::default(),
            };
            let mkdir = (in_layer || (forked && w != "/"))
                .then(|| layout.root.join(w.trim_start_matches('/')));
            let overlay = overlay_root.then(|| inner.root_overlay(&layout.root, &made_chain));
            let made = make_namespaces(&inner, &layout, mkdir, storage_mb, overlay, None).and_then(
                |namespaces| {
                    let cgroup = match &inner.cgroups {
                        Some(base) => Some(machine_cgroup(base, &layout.root, pids_limit)?),
                        None => None,
                    };
                    Ok((namespaces, cgroup))
                },
            );
            match made {
                Ok((namespaces, cgroup)) => {
                    layout.shared = namespaces.shared();
                    Ok((layout, namespaces, cgroup, made_chain))
                }
                Err(e) => {
                    if let Err(re) = root::remove_root(&layout.root) {
                        tracing::warn!("removing machine root {}: {re}", layout.root.display());
                    }
                    Err(e)
                }
            }
        })
        .await
        .map_err(|e| Error::backend("create machine root", e))??;
        let (shutdown, _) = watch::channel(false);
        let view = match &namespaces.root {
            Some(fd) => Some(
                fd.try_clone()
                    .map_err(|e| Error::io("duplicate the machine root's fd", e))?,
            ),
            None => None,
        };
        let machine = LocalMachine {
            factory: self.inner.clone(),
            layout,
            chain: std::sync::Mutex::new(chain),
            view: std::sync::Mutex::new(view),
            pids_limit,
            storage_mb,
            namespaces: std::sync::Mutex::new(Some(Arc::new(namespaces))),
            workdir,
            spec_env: spec.env.clone(),
            bin_dirs,
            gate: RwLock::new(()),
            closed: AtomicBool::new(false),
            drivers: Arc::new(Drivers::default()),
            shutdown,
            cgroup: cgroup.map(Arc::new),
            slot: Arc::new(SandboxSlot::default()),
            session: std::sync::Mutex::new(None),
            shm_bytes: crate::devfs::shm_bytes(spec.storage_mb),
            memory: std::sync::Mutex::new(Some(memory)),
        };
        crate::packages::check_tools(machine, &tools).await
    }

    /// Everything [`create_local`](Self::create_local) checks of a host-image spec before it
    /// makes anything (the spec's validation, the source, the limits, the read-only paths,
    /// mounts and workdir): the checks [`MachineFactory::check_environment`] shares, so the
    /// two never disagree on them. Reads host metadata only.
    fn plan(&self, spec: &MachineSpec) -> Result<Planned, Error> {
        spec.validate()?;
        let ImageSource::Host(image) = &spec.source else {
            return Err(Error::unsupported(format!(
                "the local backend runs host programs (ImageSource::Host) and software by name \
                 (ImageSource::Packages), not a {} source",
                spec.source.kind()
            )));
        };
        for (field, set) in [
            ("cpus", spec.cpus.is_some()),
            ("memory_mb", spec.memory_mb.is_some()),
            ("gpus", spec.gpus != 0),
        ] {
            if set {
                return Err(Error::unsupported(format!(
                    "the local backend cannot enforce {field} (bwrap sets no such limit): leave \
                     {field} unset, or use the docker backend, which enforces it"
                )));
            }
        }
        if spec.pids_limit < MIN_PIDS_LIMIT {
            return Err(Error::invalid(format!(
                "pids_limit {} is below {MIN_PIDS_LIMIT}, the least a local machine runs with: \
                 the limit counts the machine's own tasks too (bwrap, its supervisor's threads, \
                 a keeper per running command), about five of them",
                spec.pids_limit
            )));
        }
        if spec.storage_mb.is_some_and(|mb| mb > u64::MAX >> 20) {
            return Err(Error::invalid(format!(
                "storage_mb {} is over the largest byte count",
                spec.storage_mb.unwrap_or_default()
            )));
        }
        if spec.storage_mb.is_some() && !nix::unistd::geteuid().is_root() {
            return Err(Error::unsupported(
                "the local backend bounds storage_mb with a tmpfs root, which needs a root host process",
            ));
        }
        if let Some(mb) = spec.storage_mb {
            let most = largest_storage_mb();
            if mb > most {
                return Err(Error::unsupported(format!(
                    "storage_mb {mb} is more than the local backend gives one machine on this host \
                     ({most} MiB, half its memory): a bounded root is a tmpfs, held in RAM"
                )));
            }
        }
        let image_read_only = image
            .read_only
            .iter()
            .map(|p| absolute(p))
            .collect::<Result<Vec<_>, _>>()?;
        let image_mounts: Vec<(PathBuf, String)> = image
            .mounts
            .iter()
            .map(|m| absolute(&m.host).map(|h| (h, m.guest.clone())))
            .collect::<Result<_, _>>()?;
        let mounts = plan::plan_mounts(
            &self.inner.read_only,
            &image_read_only,
            &image_mounts,
            &|p| p.exists(),
            &|p| p.is_dir(),
        )?;
        let workdir = plan::plan_workdir_in(&spec.workdir, &mounts, &self.inner.overlaid())?;
        self.check_layer_workdir(&workdir)?;
        let mut bin_dirs = image
            .bin_dirs
            .iter()
            .map(|p| absolute(p).and_then(|p| path_string(&p, "bin dir")))
            .collect::<Result<Vec<_>, _>>()?;
        bin_dirs.extend(self.inner.bin_dirs.iter().cloned());
        Ok(Planned {
            mounts,
            workdir,
            bin_dirs,
        })
    }

    /// A workdir in a copy-on-write layer is made there by `mkdir -p` once the machine
    /// runs; a component of it that already exists as something other than a directory in
    /// the layer's lower directory (`/usr/bin/awk`, `/usr/bin/sh/x`, `/etc/passwd/x`) would
    /// fail that, so it is refused here, for `create` and `check_environment` alike. Links
    /// are followed as the host resolves them (the machine shows the same lower files).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the workdir and the component in its way.
    fn check_layer_workdir(&self, workdir: &str) -> Result<(), Error> {
        let Some(layer) = self
            .inner
            .overlaid()
            .into_iter()
            .filter(|d| plan::is_within(workdir, d))
            .max_by_key(String::len)
        else {
            return Ok(());
        };
        let lower = if layer == "/etc" {
            self.inner.etc.dir().to_path_buf()
        } else {
            PathBuf::from(&layer)
        };
        let mut host = lower;
        let mut guest = layer.clone();
        for component in workdir[layer.len()..].split('/').filter(|c| !c.is_empty()) {
            host.push(component);
            guest = format!("{}/{component}", guest.trim_end_matches('/'));
            match std::fs::metadata(&host) {
                Ok(meta) if meta.is_dir() => {}
                Ok(_) => {
                    return Err(Error::invalid(format!(
                        "workdir {workdir}: {guest} exists in the machine and is not a directory, \
                         so the workdir cannot be made there; choose a directory path"
                    )))
                }
                // Missing (made by mkdir -p) or unreadable: left to the machine.
                Err(_) => return Ok(()),
            }
        }
        Ok(())
    }

    /// [`MachineFactory::check_environment`]'s spec checks on this backend, in `create`'s
    /// order and with its error kinds, acquiring nothing: the shared
    /// [`Capabilities::check_spec`](shellbox_core::Capabilities::check_spec), then for an
    /// [`ImageSource::Packages`] source the factory's package settings (a package cache, the
    /// Python version) and, for a shell-only one (`pypi_packages: None`), every tool on the
    /// machine's `PATH` as the machine will show it (the host's system directories and the
    /// factory's read-only directories), then what [`create_local`](Self::create_local)
    /// checks of every spec (limits, `storage_mb` against this host, read-only paths,
    /// mounts, workdir). For PyPI packages, uv and a cache directory that can be made are
    /// checked unless the cache already holds the environment; whether the packages resolve
    /// and build is not (that needs uv and the network), nor tools the environment would
    /// bring.
    async fn check_local_spec(&self, spec: &MachineSpec) -> Result<(), Error> {
        self.capabilities().check_spec("local", spec)?;
        let ImageSource::Packages(packages) = &spec.source else {
            return self.plan(spec).map(drop);
        };
        let tools = crate::packages::check_tool_list(&packages.tools, &spec.env)?;
        if let Some(requirements) = &packages.pypi_packages {
            crate::packages::check_requirements(requirements)?;
            let settings = self.inner.packages.clone();
            let requirements = requirements.clone();
            tokio::task::spawn_blocking(move || {
                crate::packages::check_settings(&settings, &requirements)
            })
            .await
            .map_err(|e| Error::backend("check the package settings", e.to_string()))??;
        }
        let host = MachineSpec {
            source: ImageSource::Host(shellbox_core::HostImage::default()),
            ..spec.clone()
        };
        let planned = self.plan(&host)?;
        if packages.pypi_packages.is_none() {
            let spec_path = spec.env.get("PATH").map(String::as_str);
            crate::packages::check_tools_on_host(&tools, &planned, spec_path)?;
        }
        Ok(())
    }
}

/// The machine's pids cgroup, named after the private directory around its `root`.
///
/// # Errors
/// [`Error::Io`] when the cgroup cannot be made although the factory's base could.
fn machine_cgroup(
    base: &crate::cgroup::CgroupBase,
    root: &Path,
    pids_limit: u32,
) -> Result<crate::cgroup::MachineCgroup, Error> {
    let name = root
        .parent()
        .and_then(Path::file_name)
        .and_then(|n| n.to_str())
        .ok_or_else(|| Error::invalid(format!("machine root {} has no name", root.display())))?;
    crate::cgroup::MachineCgroup::create(base, name, pids_limit)
        .map_err(|e| Error::io("create the machine's pids cgroup", e))
}

/// The namespaces a machine with this layout makes once: none when the factory cannot
/// share namespaces; otherwise its mount namespace with the root's read-only binds (when
/// that fails, e.g. on a kernel without `mount_setattr`, bwrap binds per command) and,
/// when its network is denied, its loopback-only network namespace. Blocks briefly.
///
/// # Errors
/// [`Error::Io`] when the network namespace cannot be made although the factory could
/// make one at its start.
fn make_namespaces(
    inner: &FactoryInner,
    layout: &Layout,
    mkdir: Option<PathBuf>,
    storage_mb: Option<u64>,
    root_overlay: Option<crate::ns::RootOverlay>,
    net: Option<std::os::fd::OwnedFd>,
) -> Result<crate::ns::MachineNamespaces, Error> {
    let mut namespaces = crate::ns::MachineNamespaces::default();
    if !inner.share_ns {
        return Ok(namespaces);
    }
    let has_root_overlay = root_overlay.is_some();
    let mut root_mounts = plan::root_mounts(layout, &inner.facts);
    if has_root_overlay {
        // The read-only /etc as an overlay too, so no mount shows the copy's host path.
        for m in &mut root_mounts {
            if let plan::RootMount::ReadOnly { source, target } = m {
                if *source == layout.etc {
                    *m = plan::RootMount::ReadOnlyOverlay {
                        lowers: vec![source.clone(), inner.etc.empty().to_path_buf()],
                        target: target.clone(),
                    };
                }
            }
        }
    }
    let mounts = crate::ns::MountPlan {
        root: root_overlay,
        mounts: root_mounts,
        mkdir,
        layers: layout.layers.as_ref().map(|l| {
            (
                l.dir.clone(),
                // With storage_mb the machine's one size-limited file system is mounted
                // there already (`root::mount_machine_fs`): root and layers share its bound.
                storage_mb
                    .is_none()
                    .then(|| root::layers_fs_options(root::default_layers_mb())),
                inner.layers.clone(),
            )
        }),
    };
    let keep = net.is_some();
    let (made_net, mnt) = crate::ns::machine_namespaces(
        layout.network == shellbox_core::NetworkPolicy::Deny && !keep,
        Some(mounts),
    )
    .map_err(|e| Error::io("create the machine's network namespace", e))?;
    namespaces.net = if keep { net } else { made_net };
    match mnt {
        Ok(Some((fd, layers, root))) => {
            namespaces.mnt = Some(fd);
            namespaces.root = root.map(Arc::new);
            namespaces.layers = layers
                .into_iter()
                .map(|(guest, fd)| (guest, Arc::new(fd)))
                .collect();
        }
        Ok(None) => {}
        Err(e) if has_root_overlay => {
            return Err(Error::io(
                "mount the machine's root overlay",
                std::io::Error::new(e.kind(), format!("{e} ({ROOT_OVERLAY_REQUIREMENTS})")),
            ))
        }
        // A copy-on-write machine's layers exist only in its mount namespace.
        Err(e) if layout.layers.is_some() => {
            return Err(Error::io(
                "set up the machine's copy-on-write layers",
                std::io::Error::new(e.kind(), format!("{e} ({COPY_ON_WRITE_REQUIREMENTS})")),
            ))
        }
        Err(e) => tracing::debug!(
            "machine mount namespace for {}: {e}; bwrap binds per command",
            layout.root.display()
        ),
    }
    Ok(namespaces)
}

/// The blocking part of a snapshot: freezes the machine's upper layer (its root overlay
/// is unmounted: the caller released the namespace and `view` is replaced here first),
/// makes a new upper (with the frozen one's owner and mode: the root directory shows the
/// upper's) and work directory, squashes a chain deeper than
/// [`MAX_LAYER_DEPTH`](crate::layer::MAX_LAYER_DEPTH), and mounts the root again in a new
/// mount namespace (the network one is kept), whose root fd replaces fd number `view`.
/// Returns the namespaces, the machine's new chain and the snapshot's chain.
#[allow(clippy::type_complexity)]
fn rotate_root(
    inner: &FactoryInner,
    layout: &Layout,
    chain: crate::layer::Chain,
    net: Option<std::os::fd::OwnedFd>,
    view: std::os::fd::RawFd,
) -> Result<
    (
        crate::ns::MachineNamespaces,
        crate::layer::Chain,
        crate::layer::Chain,
    ),
    Error,
> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    // Park the view's fd number on the private directory, which lets the old overlay go.
    let private = layout.root.parent().unwrap_or(&layout.root).to_path_buf();
    let parked = std::fs::File::open(&private)
        .map_err(|e| Error::io(format!("open {}", private.display()), e))?;
    // SAFETY: dup3 onto an fd number this machine owns (its view), replacing it atomically.
    if unsafe { libc::dup3(parked.as_raw_fd(), view, libc::O_CLOEXEC) } < 0 {
        return Err(Error::io(
            "replace the machine root's fd",
            std::io::Error::last_os_error(),
        ));
    }
    drop(parked);
    let (upper, work) = root::overlay_dirs(&layout.root);
    let meta = std::fs::symlink_metadata(&upper)
        .map_err(|e| Error::io(format!("stat {}", upper.display()), e))?;
    let frozen = crate::layer::Layer::freeze(&upper)?;
    let remake = || -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir(&upper)?;
        std::fs::set_permissions(
            &upper,
            std::fs::Permissions::from_mode(meta.mode() & 0o7777),
        )?;
        std::os::unix::fs::chown(&upper, Some(meta.uid()), Some(meta.gid()))?;
        Ok(())
    };
    remake().map_err(|e| Error::io(format!("make a new upper layer {}", upper.display()), e))?;
    root::fresh_work_dir(&work)?;
    let mut snapshot_chain = Vec::with_capacity(chain.len() + 1);
    snapshot_chain.push(frozen);
    snapshot_chain.extend(chain);
    let mut namespaces = make_namespaces(
        inner,
        layout,
        None,
        None,
        Some(inner.root_overlay(&layout.root, &snapshot_chain)),
        net,
    )?;
    if snapshot_chain.len() > crate::layer::MAX_LAYER_DEPTH {
        // Squash: one new layer with the merged files, the machine and the snapshot over it.
        let fd = namespaces
            .root
            .as_ref()
            .map(|fd| fd.as_raw_fd())
            .ok_or_else(|| Error::io("squash", std::io::Error::other("no root overlay")))?;
        // `cp` is a child: it reaches this process's fd through /proc/PID, not /proc/self.
        let view = format!("/proc/{}/fd/{fd}", std::process::id());
        let squashed = crate::layer::Layer::squash(Path::new(&view))?;
        let net = namespaces
            .net
            .as_ref()
            .map(|fd| fd.try_clone())
            .transpose()
            .map_err(|e| Error::io("keep the machine's network namespace", e))?;
        drop(namespaces);
        // overlayfs refuses a work directory a `volatile` mount used.
        root::fresh_work_dir(&work)?;
        snapshot_chain = vec![squashed];
        namespaces = make_namespaces(
            inner,
            layout,
            None,
            None,
            Some(inner.root_overlay(&layout.root, &snapshot_chain)),
            net,
        )?;
    }
    let root_fd = namespaces
        .root
        .as_ref()
        .ok_or_else(|| Error::io("mount the root", std::io::Error::other("no root overlay")))?;
    // SAFETY: as above.
    if unsafe { libc::dup3(root_fd.as_raw_fd(), view, libc::O_CLOEXEC) } < 0 {
        return Err(Error::io(
            "replace the machine root's fd",
            std::io::Error::last_os_error(),
        ));
    }
    Ok((namespaces, snapshot_chain.clone(), snapshot_chain))
}

/// Runs the full sandbox line of a throwaway machine on `/bin/sh -c 'exit 0'`.
fn probe(inner: &FactoryInner) -> Result<(), String> {
    let mounts: Vec<ReadOnlyMount> = inner
        .read_only
        .iter()
        .map(|p| ReadOnlyMount {
            host: p.clone(),
            guest: p.to_string_lossy().into_owned(),
        })
        .collect();
    let root = root::create_root(&inner.facts, &mounts, "/", None, &inner.layers, false)
        .map_err(|e| e.to_string())?;
    let mut layout = Layout {
        layers: inner.machine_layers(&root),
        root: root.clone(),
        network: shellbox_core::NetworkPolicy::Deny,
        mounts,
        etc: inner.etc.dir().to_path_buf(),
        etc_binds: inner.etc.binds().to_vec(),
        shared: plan::Shared::default(),
    };
    let namespaces = match make_namespaces(inner, &layout, None, None, None, None) {
        Ok(n) => n,
        Err(e) => {
            let _ = root::remove_root(&root);
            return Err(e.to_string());
        }
    };
    layout.shared = namespaces.shared();
    let result = probe_in(inner, &layout, Arc::new(namespaces));
    if let Err(e) = root::remove_root(&root) {
        tracing::warn!("removing probe root: {e}");
    }
    result
}

fn probe_in(
    inner: &FactoryInner,
    layout: &Layout,
    namespaces: Arc<crate::ns::MachineNamespaces>,
) -> Result<(), String> {
    let env = plan::command_env(&[], None, &BTreeMap::new(), &BTreeMap::new());
    let env_options = plan::env_args(&env).map_err(|e| e.to_string())?;
    let prepared = launch::prepare(
        &inner.bwrap,
        &env_options,
        Vec::new(),
        false,
        launch::Confinement {
            namespaces: Some(namespaces),
            seccomp: Some(inner.seccomp.clone()),
            cgroup: None,
            program: None,
        },
        |env_fd, _, seccomp_fd| {
            plan::bwrap_args(
                layout,
                &inner.facts,
                &Launch {
                    argv: vec!["/bin/sh".into(), "-c".into(), "exit 0".into()],
                    cwd: "/".into(),
                    user: None,
                    env_fd,
                    status_fd: None,
                    seccomp_fd,
                },
            )
        },
    )
    .map_err(|e| e.to_string())?;
    let (mut command, _) = prepared.into_command();
    command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = command.spawn().map_err(|e| format!("cannot run it: {e}"))?;
    drop(command);
    let mut stderr = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(s) = stderr.as_mut() {
            let _ = s.take(64 * 1024).read_to_string(&mut text);
        }
        text
    });
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if started.elapsed() < PROBE_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(2))
            }
            _ => {
                if let Ok(pid) = i32::try_from(child.id()) {
                    let _ = nix::sys::signal::killpg(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                let _ = child.wait();
                break None;
            }
        }
    };
    let text = reader.join().unwrap_or_default();
    match status {
        Some(s) if s.success() => Ok(()),
        Some(s) => {
            let text = text.trim();
            let why = if text.is_empty() {
                format!("{s}")
            } else {
                text.to_string()
            };
            Err(format!("{why} ({SANDBOX_REQUIREMENTS})"))
        }
        None => Err(format!("the probe did not finish within {PROBE_TIMEOUT:?}")),
    }
}

#[async_trait]
impl MachineFactory for LocalMachineFactory {
    fn backend(&self) -> &'static str {
        "local"
    }

    /// [`LOCAL_ROOT_CAPABILITIES`](crate::LOCAL_ROOT_CAPABILITIES) in a root host process,
    /// else [`LOCAL_CAPABILITIES`](crate::LOCAL_CAPABILITIES); with copy-on-write system
    /// directories ([`LocalOptions::system_directories`]) they are declared private
    /// ([`Capabilities::private_system_directories`](shellbox_core::Capabilities)); with
    /// read-only ones in a root host process, snapshots are declared
    /// ([`Capabilities::snapshots`](shellbox_core::Capabilities); see
    /// [`LocalMachine::snapshot_local`]).
    fn capabilities(&self) -> shellbox_core::Capabilities {
        let base = if nix::unistd::geteuid().is_root() {
            crate::LOCAL_ROOT_CAPABILITIES
        } else {
            crate::LOCAL_CAPABILITIES
        };
        if self.inner.snapshots() {
            base.with_snapshots()
        } else if self.inner.layers.is_empty() {
            base
        } else {
            base.with_private_system_directories()
        }
    }

    async fn create(&self, spec: MachineSpec) -> Result<Box<dyn Machine>, Error> {
        Ok(Box::new(self.create_local(spec).await?))
    }

    /// See [`LocalMachineFactory::create_from_local`].
    async fn create_from(
        &self,
        snapshot: &shellbox_core::Snapshot,
        spec: MachineSpec,
    ) -> Result<Box<dyn Machine>, Error> {
        Ok(Box::new(self.create_from_local(snapshot, spec).await?))
    }

    /// The spec checks `create` makes before it makes anything (see
    /// [`LocalMachineFactory::create_local`]; tools of a shell-only package spec are looked
    /// up on the host directories the machine would show), then REFERENCE.md 1.7's steps.
    async fn check_environment(
        &self,
        requirements: &shellbox_core::ExecutionRequirements,
        spec: &MachineSpec,
    ) -> Result<(), Error> {
        self.check_local_spec(spec).await?;
        shellbox_core::check_execution_requirements(&self.capabilities(), requirements, spec, None)
    }
}

/// One local machine: a private root directory on the host and one bubblewrap sandbox on
/// it, started by the first command with the supervisor as its PID 1, which runs
/// every command
/// (REFERENCE 4.2-4.7).
///
/// The sandbox has new PID, IPC, UTS, mount (and, where possible, cgroup) namespaces, the
/// machine's network namespace with only loopback under
/// [`NetworkPolicy::Deny`](shellbox_core::NetworkPolicy) (made once per machine when this
/// process is root, otherwise by bwrap), `no_new_privs`, the host's system directories
/// and the machine's read-only mounts read-only, and its own `/dev`, `/dev/shm` and
/// `/proc`; commands run without capabilities. Files written anywhere else persist in the
/// root until [`Machine::close`] (or drop) removes it; processes left in the background
/// run until then too.
pub struct LocalMachine {
    factory: Arc<FactoryInner>,
    layout: Layout,
    /// The frozen layers under the root overlay, top first (empty for a root with none
    /// yet, or one that is no overlay); released by close.
    chain: std::sync::Mutex<crate::layer::Chain>,
    /// An fd of the root overlay's top directory (its number stays the same across
    /// snapshots: [`LocalMachine::root_view`] names it); `None` when the root is no overlay.
    view: std::sync::Mutex<Option<std::os::fd::OwnedFd>>,
    /// The spec's `pids_limit`, restored on the cgroup after a snapshot stopped it.
    pids_limit: u32,
    /// The spec's `storage_mb` (a machine with it takes no snapshot).
    storage_mb: Option<u64>,
    /// The namespaces commands join; taken (and so released) by close and drop.
    namespaces: std::sync::Mutex<Option<Arc<crate::ns::MachineNamespaces>>>,
    workdir: String,
    spec_env: BTreeMap<String, String>,
    bin_dirs: Vec<String>,
    /// Transfers hold it shared; `close` takes it exclusively.
    gate: RwLock<()>,
    closed: AtomicBool,
    drivers: Arc<Drivers>,
    shutdown: watch::Sender<bool>,
    /// The machine's pids cgroup (see the `cgroup` module); `None` where none can be made.
    cgroup: Option<Arc<crate::cgroup::MachineCgroup>>,
    /// The machine's sandbox as it starts (begun by the first command), then runs.
    slot: Arc<SandboxSlot>,
    /// The machine's persistent shell session, once opened.
    session: std::sync::Mutex<Option<Arc<crate::LocalSession>>>,
    /// The size of the sandbox's `/dev/shm` ([`crate::devfs::shm_bytes`]).
    shm_bytes: u64,
    /// The machine's share of the process's `tmpfs` budget, given back at close.
    memory: std::sync::Mutex<Option<MemoryReservation>>,
}

/// A machine's running sandbox: the supervisor's client.
struct Sandbox {
    client: shellbox_supervisor::Client,
}

/// How a machine's background sandbox start ended.
#[derive(Clone)]
enum Started {
    /// The supervisor reported READY.
    Running(Arc<Sandbox>),
    /// The start failed: the operation and the reason (bwrap's stderr when it said why),
    /// turned into an [`Error::Backend`] for every command.
    Failed(String, String),
    /// The machine was closed (or dropped) first.
    Closed,
    /// A snapshot ended the sandbox (see [`LocalMachine::stop_sandbox`]): the machine is
    /// open, and a command that meets this waits for the snapshot and starts a new one.
    Stopped,
}

/// Where the background start of a machine's sandbox and the machine meet.
#[derive(Default)]
struct SandboxSlot {
    /// Under this lock the start spawns bwrap only while the machine is open, and close
    /// marks it closed: once close took it, no bwrap of this machine can start.
    process: std::sync::Mutex<SlotProcess>,
    /// `None` while the start runs, then how it ended.
    ready: watch::Sender<Option<Started>>,
}

#[derive(Default)]
struct SlotProcess {
    closed: bool,
    /// A snapshot is ending the sandbox (`closed` is set meanwhile): a start it cuts short
    /// reports [`Started::Stopped`], not [`Started::Closed`].
    stopping: bool,
    /// The task starting the sandbox, once the first command asked for it; close awaits
    /// it, so nothing it holds (the namespaces among it) outlives close.
    task: Option<tokio::task::JoinHandle<()>>,
    /// bwrap's pid (its process group too) and its reaped flag, once spawned.
    spawned: Option<(i32, watch::Receiver<bool>)>,
}

impl SandboxSlot {
    fn lock(&self) -> std::sync::MutexGuard<'_, SlotProcess> {
        self.process.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Marks the machine closed (no start begins and no bwrap is spawned after this) and
    /// returns bwrap's pid and reaped flag if it was spawned, and the start task if one
    /// began.
    fn close(&self) -> (Spawned, Option<tokio::task::JoinHandle<()>>) {
        let mut p = self.lock();
        p.closed = true;
        (p.spawned.clone(), p.task.take())
    }
}

/// bwrap's pid and its reaped flag, once the start spawned it.
type Spawned = Option<(i32, watch::Receiver<bool>)>;

/// What the background start needs of its machine.
struct StartInputs {
    factory: Arc<FactoryInner>,
    layout: Layout,
    confinement: launch::Confinement,
    /// The size of the sandbox's `/dev/shm` ([`crate::devfs::shm_bytes`]).
    shm_bytes: u64,
}

/// Starts the machine's sandbox ([`start_sandbox`]) and publishes how that ended.
async fn start_task(
    inputs: StartInputs,
    slot: Arc<SandboxSlot>,
    mut shutdown: watch::Receiver<bool>,
) {
    let result = start_sandbox(inputs, &slot, &mut shutdown).await;
    let p = slot.lock();
    let started = match result {
        _ if p.closed && p.stopping => Started::Stopped,
        _ if p.closed => Started::Closed,
        Ok(sandbox) => Started::Running(Arc::new(sandbox)),
        Err(Error::Closed) => Started::Closed,
        Err(Error::Backend { operation, source }) => Started::Failed(operation, source.to_string()),
        Err(other) => Started::Failed("start the machine's sandbox".into(), other.to_string()),
    };
    slot.ready.send_replace(Some(started));
    drop(p);
}

/// SIGKILLs a spawned bwrap's process group unless bwrap was already reaped; its
/// `--die-with-parent` and the PID namespace take every process of the sandbox along.
fn kill_spawned(spawned: &Spawned) {
    if let Some((pid, exited)) = spawned {
        if !*exited.borrow() {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(*pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// Starts a machine's sandbox once: bwrap with the supervisor as its PID 1, in the
/// machine's namespaces and cgroup, and waits for the supervisor's READY.
///
/// # Errors
/// [`Error::Closed`] when the machine closed first; [`Error::Backend`] with bwrap's stderr
/// when the sandbox cannot be set up (or the launcher's errno when bwrap cannot be run);
/// nothing started is left running.
async fn start_sandbox(
    inputs: StartInputs,
    slot: &SandboxSlot,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<Sandbox, Error> {
    use std::os::fd::AsRawFd;
    let StartInputs {
        factory,
        layout,
        mut confinement,
        shm_bytes,
    } = inputs;
    let env = plan::command_env(&[], None, &BTreeMap::new(), &BTreeMap::new());
    let env_options = plan::env_args(&env)?;
    // Per-command limits (RLIMIT_NPROC from the host's task count then, RLIMIT_CPU
    // from the timeout) are set by the supervisor for each command.
    let limits: Vec<plan::Limit> = plan::limits(host_tasks(), None, 1, &current_soft)
        .into_iter()
        .filter(|l| l.resource != nix::sys::resource::Resource::RLIMIT_NPROC)
        .collect();
    confinement.program = Some(factory.program.clone());
    let program_fd = factory.program.as_raw_fd();
    let prepared = launch::prepare(
        &factory.bwrap,
        &env_options,
        limits,
        false,
        confinement,
        |env_fd, _, seccomp_fd| {
            plan::supervisor_args(&layout, &factory.facts, env_fd, seccomp_fd, program_fd)
        },
    )?;
    let process = {
        let mut p = slot.lock();
        if p.closed {
            return Err(Error::Closed);
        }
        let process = launch::start_machine(prepared, "the machine's sandbox")?;
        p.spawned = Some((process.pid, process.exited.clone()));
        process
    };
    let mut exited = process.exited.clone();
    let spawned = Some((process.pid, process.exited.clone()));
    let pipe_err = |e| Error::backend("set up the pipes of the machine's sandbox", e);
    let made = (|| {
        Ok::<_, Error>((
            tokio::net::unix::pipe::Sender::from_owned_fd(process.stdin).map_err(pipe_err)?,
            tokio::net::unix::pipe::Receiver::from_owned_fd(process.stdout).map_err(pipe_err)?,
            tokio::net::unix::pipe::Receiver::from_owned_fd(process.stderr).map_err(pipe_err)?,
        ))
    })();
    let (stdin, stdout, mut stderr) = match made {
        Ok(pipes) => pipes,
        Err(e) => {
            kill_spawned(&spawned);
            return Err(e);
        }
    };
    // bwrap's stderr: the first bytes explain a failed set-up; the rest is drained.
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    {
        let seen = seen.clone();
        tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            let mut buf = vec![0u8; 4096];
            while let Ok(n) = stderr.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
                let room = 4096usize.saturating_sub(seen.len());
                seen.extend_from_slice(&buf[..n.min(room)]);
            }
        });
    }
    let connected = tokio::select! {
        biased;
        _ = shutdown.wait_for(|closed| *closed) => None,
        r = tokio::time::timeout(
            SANDBOX_START_TIMEOUT,
            shellbox_supervisor::Client::connect(stdout, stdin),
        ) => Some(r),
    };
    let why = match connected {
        None => {
            kill_spawned(&spawned);
            return Err(Error::Closed);
        }
        Some(Ok(Ok(client))) => {
            // Before any command runs: bound /dev and /dev/pts (see the devfs module).
            if !nix::unistd::geteuid().is_root() {
                return Ok(Sandbox { client });
            }
            match crate::devfs::bound_dev(process.pid, shm_bytes) {
                Ok(()) => return Ok(Sandbox { client }),
                Err(e) => format!("bound the sandbox's /dev and /dev/pts: {e}"),
            }
        }
        Some(Ok(Err(e))) => e.to_string(),
        Some(Err(_)) => format!("the supervisor did not start within {SANDBOX_START_TIMEOUT:?}"),
    };
    kill_spawned(&spawned);
    let _ = tokio::time::timeout(Duration::from_secs(10), exited.wait_for(|e| *e)).await;
    // The stderr task reads to EOF once bwrap is gone.
    tokio::time::sleep(Duration::from_millis(1)).await;
    let text = String::from_utf8_lossy(&seen.lock().unwrap_or_else(|e| e.into_inner()))
        .trim()
        .to_string();
    let why = if text.is_empty() { why } else { text };
    Err(Error::backend(
        "set up the machine's bwrap sandbox",
        std::io::Error::other(why),
    ))
}

/// The supervisor program in a sealed memfd (close-on-exec in this process).
fn program_memfd() -> std::io::Result<std::os::fd::OwnedFd> {
    use nix::sys::memfd::{memfd_create, MFdFlags};
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let fd = memfd_create(
        "shellbox-supervisor",
        MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
    )?;
    let mut file = std::fs::File::from(fd);
    // In pieces, each dropped from this process's memory once written: the program's
    // pages of this binary would otherwise stay resident (1.4 MiB of peak RSS).
    let program = shellbox_supervisor::SUPERVISOR_PROGRAM;
    let page = 4096usize;
    for chunk in program.chunks(256 * 1024) {
        file.write_all(chunk)?;
        let start = chunk.as_ptr() as usize;
        let first = start.div_ceil(page) * page;
        let end = (start + chunk.len()) / page * page;
        if end > first {
            // SAFETY: whole pages inside the program's bytes, a read-only private mapping
            // of this binary: dropping them only makes a later read fault them in again.
            unsafe {
                libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_DONTNEED);
            }
        }
    }
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: fcntl on an fd we own.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(file.into())
}

/// How long a machine's supervisor may take to report that it runs.
const SANDBOX_START_TIMEOUT: Duration = Duration::from_secs(60);

impl std::fmt::Debug for LocalMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalMachine")
            .field("root", &self.layout.root)
            .field("workdir", &self.workdir)
            .field("closed", &self.closed.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

/// A user switch and the `setpriv` program performing it.
type UserAndSetpriv = (plan::UserSwitch, PathBuf);

fn lookup_user(user: &str) -> Option<(u32, u32)> {
    use nix::unistd::{Uid, User};
    let found = User::from_name(user).ok().flatten().or_else(|| {
        user.parse::<u32>()
            .ok()
            .and_then(|uid| User::from_uid(Uid::from_raw(uid)).ok().flatten())
    })?;
    Some((found.uid.as_raw(), found.gid.as_raw()))
}

/// The host's task count now ([`plan::parse_loadavg_tasks`]; 1024 when /proc says
/// nothing). `/proc/loadavg` is opened once per process and read with `pread` at offset 0,
/// which makes the kernel write it anew: one system call per command instead of five.
fn host_tasks() -> u64 {
    use std::os::unix::fs::FileExt;
    static LOADAVG: std::sync::OnceLock<Option<std::fs::File>> = std::sync::OnceLock::new();
    let mut buf = [0u8; 128];
    LOADAVG
        .get_or_init(|| std::fs::File::open("/proc/loadavg").ok())
        .as_ref()
        .and_then(|f| f.read_at(&mut buf, 0).ok())
        .and_then(|n| std::str::from_utf8(&buf[..n]).ok())
        .and_then(plan::parse_loadavg_tasks)
        .unwrap_or(1024)
}

fn affinity_cpus() -> usize {
    nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0))
        .map(|set| {
            (0..nix::sched::CpuSet::count())
                .filter(|&i| set.is_set(i).unwrap_or(false))
                .count()
        })
        .unwrap_or(1)
        .max(1)
}

fn current_soft(resource: nix::sys::resource::Resource) -> Option<u64> {
    match nix::sys::resource::getrlimit(resource) {
        Ok((soft, _)) if soft != libc::RLIM_INFINITY => Some(soft),
        _ => None,
    }
}

impl LocalMachine {
    /// The machine's root directory on the host (`root` in a `shellbox-local-*` directory of
    /// the host temp dir); gone after close or drop. Where the root is an overlayfs (a root
    /// host process without `storage_mb`), this is only its mount point, empty on the host:
    /// the files are in the machine's mount namespace, reached through
    /// [`root_view`](Self::root_view).
    pub fn root(&self) -> &Path {
        &self.layout.root
    }

    /// A host path showing the machine's root as its commands see it: for a root that is
    /// an overlayfs (in the machine's own mount namespace only, see the `layer` module),
    /// `/proc/self/fd/N` of an fd of its top directory held by this machine (valid in this
    /// process, across snapshots, until close); otherwise [`root`](Self::root). For tests
    /// and diagnostics.
    pub fn root_view(&self) -> PathBuf {
        use std::os::fd::AsRawFd;
        match &*self.view.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(fd) => PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd())),
            None => self.layout.root.clone(),
        }
    }

    /// Ends every process of the machine (its sandbox, background processes and open
    /// session among them) and waits for them, leaving the machine open: the next command
    /// starts a new sandbox. Commands waiting for the sandbox meanwhile see
    /// [`Started::Stopped`] and wait for the snapshot (which holds the gate) to start a new
    /// one.
    async fn stop_sandbox(&self) {
        if let Some(session) = self.take_session() {
            session.shut();
        }
        let (spawned, task) = {
            let mut p = self.slot.lock();
            p.closed = true;
            p.stopping = true;
            self.drivers.stopping.store(true, Ordering::SeqCst);
            (p.spawned.take(), p.task.take())
        };
        if let Some(c) = &self.cgroup {
            c.kill();
        }
        kill_spawned(&spawned);
        if let Some((_, mut exited)) = spawned {
            let _ = tokio::time::timeout(Duration::from_secs(10), exited.wait_for(|e| *e)).await;
        }
        if let Some(task) = task {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
        self.drivers.wait_idle(Duration::from_secs(10)).await;
        if let Some(c) = &self.cgroup {
            c.wait_empty(Duration::from_secs(5));
            if let Err(e) = c.set_pids_max(self.pids_limit) {
                tracing::warn!("restoring the machine's pids.max: {e}");
            }
        }
        let mut p = self.slot.lock();
        self.slot.ready.send_replace(Some(Started::Stopped));
        p.closed = false;
        p.stopping = false;
        self.drivers.stopping.store(false, Ordering::SeqCst);
    }

    /// What [`Machine::snapshot`] does (see the `layer` module): ends the machine's
    /// processes (its sandbox, background processes and open shell session), freezes its
    /// upper layer, and mounts its root again over the frozen chain with a new, empty
    /// upper layer.
    ///
    /// # Errors
    /// [`Error::Closed`]; [`Error::Unsupported`] where the factory takes no snapshots
    /// ([`SNAPSHOT_REQUIREMENTS`]) or the machine has `storage_mb`; [`Error::Io`] when a
    /// layer cannot be made or the root mounted again (the machine is then closed:
    /// its root cannot be shown any more).
    pub async fn snapshot_local(&self) -> Result<shellbox_core::Snapshot, Error> {
        self.check_open()?;
        if !self.factory.snapshots() {
            return Err(Error::unsupported(SNAPSHOT_REQUIREMENTS));
        }
        if self.storage_mb.is_some()
            || self
                .view
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_none()
        {
            return Err(Error::unsupported(
                "a local machine with storage_mb takes no snapshot: its bounded root is a tmpfs of its own, not layers",
            ));
        }
        let _gate = self.gate.write().await;
        self.check_open()?;
        self.stop_sandbox().await;
        // The old mount namespace (and with it the root overlay whose upper is frozen
        // next) goes before the upper moves: no mount ever has a changing lower layer.
        let old = self
            .namespaces
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let net = match old.as_ref().and_then(|n| n.net.as_ref()) {
            Some(fd) => Some(
                fd.try_clone()
                    .map_err(|e| Error::io("keep the machine's network namespace", e))?,
            ),
            None => None,
        };
        drop(old);
        let inner = self.factory.clone();
        let layout = self.layout.clone();
        let chain = self.chain.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let view = {
            let guard = self.view.lock().unwrap_or_else(|e| e.into_inner());
            guard
                .as_ref()
                .map(std::os::fd::AsRawFd::as_raw_fd)
                .unwrap_or(-1)
        };
        let made =
            tokio::task::spawn_blocking(move || rotate_root(&inner, &layout, chain, net, view))
                .await
                .map_err(|e| Error::backend("snapshot the machine", e))?;
        match made {
            Ok((namespaces, chain, snapshot_chain)) => {
                *self.namespaces.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(Arc::new(namespaces));
                *self.chain.lock().unwrap_or_else(|e| e.into_inner()) = chain;
                let id = snapshot_chain.first().map(|l| l.name()).unwrap_or_default();
                Ok(shellbox_core::Snapshot::new(crate::layer::LocalSnapshot {
                    id,
                    chain: std::sync::Mutex::new(Some(snapshot_chain)),
                }))
            }
            Err(e) => {
                drop(_gate);
                let _ = self.close().await;
                Err(e)
            }
        }
    }

    /// The read-only mounts every command gets, as `(host path, guest path)` in mount
    /// order: the factory's read-only dirs, the image's, then the image's mounts.
    pub fn read_only_mounts(&self) -> Vec<(PathBuf, String)> {
        self.layout
            .mounts
            .iter()
            .map(|m| (m.host.clone(), m.guest.clone()))
            .collect()
    }

    /// The working directory commands start in when they set none (`/` for an empty spec
    /// workdir).
    pub fn workdir(&self) -> &str {
        &self.workdir
    }

    /// The namespaces this machine made once and its commands join, as `readlink` shows
    /// their fds (`mnt:[4026532...]`, `net:[...]`); empty once closed, or when this process
    /// may not make them (not root). For tests and diagnostics.
    #[doc(hidden)]
    pub fn shared_namespace_links(&self) -> Vec<String> {
        use std::os::fd::AsRawFd;
        let Ok(namespaces) = self.namespaces() else {
            return Vec::new();
        };
        [&namespaces.mnt, &namespaces.net]
            .into_iter()
            .flatten()
            .filter_map(|fd| std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok())
            .map(|p| p.to_string_lossy().into_owned())
            .collect()
    }

    /// Bytes of command output the machine's supervisor sent that no command's event
    /// stream took yet ([`shellbox_supervisor::Client::buffered_output_bytes`]; 0 before
    /// the first command started the sandbox, or when its start failed). Per-command flow
    /// control bounds it by about [`shellbox_supervisor::proto::OUTPUT_WINDOW_BYTES`] per
    /// running command, however slowly a stream is read. For tests and diagnostics.
    pub fn supervisor_buffered_output_bytes(&self) -> u64 {
        match &*self.slot.ready.borrow() {
            Some(Started::Running(sandbox)) => sandbox.client.buffered_output_bytes(),
            _ => 0,
        }
    }

    /// The directory of the machine's pids cgroup (`<cgroup mount>/shellbox-local/<name>`),
    /// or `None` when this host gives machines none (then only `RLIMIT_NPROC` bounds
    /// processes; see [`MachineSpec::pids_limit`]). Gone after close.
    pub fn cgroup_dir(&self) -> Option<&Path> {
        self.cgroup.as_deref().map(|c| c.dir())
    }

    /// What confines each command: the shared namespaces, the seccomp filters, the cgroup.
    ///
    /// # Errors
    /// [`Error::Closed`] once the namespaces were released.
    fn confinement(&self) -> Result<launch::Confinement, Error> {
        Ok(launch::Confinement {
            namespaces: Some(self.namespaces()?),
            seccomp: Some(self.factory.seccomp.clone()),
            cgroup: self.cgroup.clone(),
            program: None,
        })
    }

    /// Kills every process of the machine's cgroup and removes it, waiting up to `wait`.
    fn remove_cgroup(cgroup: Option<&crate::cgroup::MachineCgroup>, wait: Duration) {
        if let Some(c) = cgroup {
            if let Err(e) = c.kill_and_remove(wait) {
                tracing::warn!("local machine cgroup: {e}");
            }
        }
    }

    /// The machine's shared namespaces, or [`Error::Closed`] once they were released.
    fn namespaces(&self) -> Result<Arc<crate::ns::MachineNamespaces>, Error> {
        self.namespaces
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or(Error::Closed)
    }

    /// The machine as a transfer sees it ([`GuestView`](crate::guest::GuestView)): its
    /// mounts and layers, resolved from its namespaces' root directory.
    ///
    /// # Errors
    /// As [`namespaces`](Self::namespaces).
    fn guest_view(&self) -> Result<crate::guest::GuestView, Error> {
        let namespaces = self.namespaces()?;
        Ok(
            crate::guest::GuestView::new(&self.layout, &self.factory.facts, &namespaces.layers)
                .with_root_fd(namespaces.root.clone()),
        )
    }

    /// Releases the shared namespaces (commands already started keep theirs).
    fn release_namespaces(&self) {
        self.namespaces
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
    }

    /// The open session, if one is.
    fn open_session(&self) -> Option<Arc<dyn ShellSession>> {
        let slot = self.session.lock().unwrap_or_else(|e| e.into_inner());
        let s = slot.as_ref().filter(|s| !s.is_closed())?.clone();
        Some(s)
    }

    fn take_session(&self) -> Option<Arc<crate::LocalSession>> {
        self.session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    fn check_open(&self) -> Result<(), Error> {
        if self.closed.load(Ordering::SeqCst) {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    fn plan_launch(&self, command: &Command) -> Result<(Vec<u8>, Option<UserAndSetpriv>), Error> {
        let user = plan::plan_user(
            command.user.as_deref(),
            nix::unistd::geteuid().as_raw(),
            &lookup_user,
        )?;
        let user = match user {
            None => None,
            Some(switch) => match &self.factory.facts.setpriv {
                Some(setpriv) => Some((switch, setpriv.clone())),
                None => {
                    return Err(Error::unsupported(
                        "switching users needs setpriv (util-linux), which this host lacks",
                    ))
                }
            },
        };
        let env = plan::command_env(
            &self.bin_dirs,
            self.factory.hash_seed.as_deref(),
            &self.spec_env,
            &command.env,
        );
        Ok((plan::env_args(&env)?, user))
    }

    /// A `std::process::Command` running bwrap with exactly the flags a command of this
    /// machine gets (same namespaces, mounts, environment fd, limits without a CPU limit,
    /// process group), on `/bin/true` in the workdir, without the JSON status fd: the
    /// floor `shellbox bench` compares machine runs against. Stdio is left to the caller.
    ///
    /// # Errors
    /// [`Error::Closed`], or [`Error::Io`] when the environment memfd cannot be made.
    #[doc(hidden)]
    pub fn floor_bwrap_true_command(&self) -> Result<std::process::Command, Error> {
        self.check_open()?;
        let command = Command::new("/bin/true");
        let (env_options, user) = self.plan_launch(&command)?;
        let limits = plan::limits(host_tasks(), None, affinity_cpus(), &current_soft);
        let prepared = launch::prepare(
            &self.factory.bwrap,
            &env_options,
            limits,
            false,
            self.confinement()?,
            |env_fd, status_fd, seccomp_fd| {
                plan::bwrap_args(
                    &self.layout,
                    &self.factory.facts,
                    &Launch {
                        argv: command.argv.clone(),
                        cwd: self.workdir.clone(),
                        user,
                        env_fd,
                        status_fd,
                        seccomp_fd,
                    },
                )
            },
        )?;
        Ok(prepared.into_command().0)
    }

    /// Begins the machine's sandbox start ([`start_task`]) unless it began or the machine
    /// is closed: the first command's, so a machine that never runs a command never starts
    /// bwrap (and its close has no sandbox to tear down).
    fn start_once(&self) {
        let mut p = self.slot.lock();
        if p.closed || p.task.is_some() {
            return;
        }
        let confinement = match self.confinement() {
            Ok(c) => c,
            Err(_) => return,
        };
        let inputs = StartInputs {
            factory: self.factory.clone(),
            layout: self.layout.clone(),
            confinement,
            shm_bytes: self.shm_bytes,
        };
        // A stopped sandbox's mark goes: waiters now wait for this start.
        self.slot.ready.send_if_modified(|started| {
            matches!(started, Some(Started::Stopped)) && started.take().is_some()
        });
        p.task = Some(tokio::spawn(start_task(
            inputs,
            self.slot.clone(),
            self.shutdown.subscribe(),
        )));
    }

    /// The machine's sandbox, once its start (begun by the first command) ended.
    ///
    /// # Errors
    /// [`Error::Closed`] when the machine closed first; [`Error::Backend`] with the start's
    /// failure (bwrap's stderr when it said why), on every command.
    async fn sandbox(&self) -> Result<Arc<Sandbox>, Error> {
        loop {
            self.start_once();
            let mut ready = self.slot.ready.subscribe();
            let started = ready
                .wait_for(Option::is_some)
                .await
                .map_err(|_| Error::Closed)?
                .clone();
            match started {
                Some(Started::Running(sandbox)) => return Ok(sandbox),
                Some(Started::Failed(operation, why)) => {
                    return Err(Error::backend(operation, std::io::Error::other(why)))
                }
                Some(Started::Closed) | None => return Err(Error::Closed),
                // A snapshot ended the sandbox: it holds the gate until the machine's root
                // is mounted again; then start a new one.
                Some(Started::Stopped) => {
                    drop(self.gate.read().await);
                    self.check_open()?;
                }
            }
        }
    }

    /// The machine's sandbox with the gate held shared, so no snapshot ends it before the
    /// caller has started its command there: a sandbox a snapshot replaced while this waited
    /// for the gate is given up for the new one.
    ///
    /// # Errors
    /// As [`sandbox`](Self::sandbox); [`Error::Closed`] once the machine closed.
    async fn current_sandbox(
        &self,
    ) -> Result<(Arc<Sandbox>, tokio::sync::RwLockReadGuard<'_, ()>), Error> {
        loop {
            // Waited for outside the gate, so a close never waits for a start.
            let sandbox = self.sandbox().await?;
            let gate = self.gate.read().await;
            self.check_open()?;
            let current = matches!(
                &*self.slot.ready.borrow(),
                Some(Started::Running(s)) if Arc::ptr_eq(s, &sandbox)
            );
            if current {
                return Ok((sandbox, gate));
            }
        }
    }
}

#[async_trait]
impl Machine for LocalMachine {
    async fn run_stream(&self, command: Command) -> Result<EventStream, Error> {
        command.validate()?;
        self.check_open()?;
        let label = command.argv.first().cloned().unwrap_or_default();
        let user = plan::plan_user(
            command.user.as_deref(),
            nix::unistd::geteuid().as_raw(),
            &lookup_user,
        )?;
        let env = plan::command_env(
            &self.bin_dirs,
            self.factory.hash_seed.as_deref(),
            &self.spec_env,
            &command.env,
        );
        if let Some((key, _)) = env
            .iter()
            .find(|(k, v)| k.contains('\0') || v.contains('\0'))
        {
            return Err(Error::invalid(format!(
                "environment variable {key:?} contains a NUL byte"
            )));
        }
        // The CPU count matters only for a timeout's CPU limit.
        let cpus = if command.timeout.is_some() {
            affinity_cpus()
        } else {
            1
        };
        let limits = plan::limits(host_tasks(), command.timeout, cpus, &current_soft);
        let start = shellbox_supervisor::proto::Start {
            argv: command.argv.iter().map(|a| a.as_bytes().to_vec()).collect(),
            env: env
                .iter()
                .map(|(k, v)| format!("{k}={v}").into_bytes())
                .collect(),
            cwd: command
                .cwd
                .clone()
                .unwrap_or_else(|| self.workdir.clone())
                .into_bytes(),
            user: user.map(|u| (u.uid, u.gid)),
            groups: Vec::new(),
            rlimits: limits
                .iter()
                .map(|l| (l.resource as u32, l.value))
                .collect(),
            output_limit_bytes: command.output_limit_bytes,
        };
        let (sandbox, _gate) = self.current_sandbox().await?;
        let running = sandbox
            .client
            .start(&start, &command.stdin)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::InvalidInput => Error::invalid(format!("{label}: {e}")),
                _ if self.closed.load(Ordering::SeqCst) => Error::Closed,
                _ => Error::backend(format!("start {label} on the machine's supervisor"), e),
            })?;
        Ok(launch::drive(
            running,
            DriveParams {
                timeout: command.timeout,
                shutdown: self.shutdown.subscribe(),
                drivers: self.drivers.clone(),
                label,
            },
        ))
    }

    /// The machine's one persistent shell ([`LocalSession`](crate::LocalSession)); a
    /// second call returns the same session (a new one once that was closed). Starts the
    /// machine's sandbox when no command did yet; the shell itself starts with the first
    /// `execute`.
    ///
    /// # Errors
    /// [`Error::Closed`]; the sandbox's start failure ([`Error::Backend`]).
    async fn open_shell(&self) -> Result<Arc<dyn ShellSession>, Error> {
        self.check_open()?;
        if let Some(s) = self.open_session() {
            return Ok(s);
        }
        let sandbox = self.sandbox().await?;
        let env = plan::command_env(
            &self.bin_dirs,
            self.factory.hash_seed.as_deref(),
            &self.spec_env,
            &BTreeMap::new(),
        );
        let mut env: Vec<Vec<u8>> = env
            .iter()
            .map(|(k, v)| format!("{k}={v}").into_bytes())
            .collect();
        if !self.spec_env.contains_key("TERM") {
            env.push(b"TERM=xterm".to_vec());
        }
        let limits = plan::limits(host_tasks(), None, affinity_cpus(), &current_soft);
        let start = shellbox_supervisor::proto::Start {
            argv: Vec::new(),
            env,
            cwd: self.workdir.clone().into_bytes(),
            user: None,
            groups: Vec::new(),
            rlimits: limits
                .iter()
                .map(|l| (l.resource as u32, l.value))
                .collect(),
            output_limit_bytes: u64::MAX,
        };
        let mut slot = self.session.lock().unwrap_or_else(|e| e.into_inner());
        self.check_open()?;
        if let Some(s) = slot.as_ref().filter(|s| !s.is_closed()) {
            return Ok(s.clone());
        }
        let s = Arc::new(crate::LocalSession::new(
            sandbox.client.clone(),
            start,
            plan::SUPERVISOR_PATH,
        ));
        *slot = Some(s.clone());
        Ok(s)
    }

    async fn upload(&self, source: &Path, target: &str) -> Result<(), Error> {
        validate_guest_path(target)?;
        let _gate = self.gate.read().await;
        self.check_open()?;
        let view = self.guest_view()?;
        let source = source.to_path_buf();
        let target = target.to_string();
        tokio::task::spawn_blocking(move || crate::fsops::upload(&view, &source, &target))
            .await
            .map_err(|e| Error::backend("upload", e))?
    }

    async fn download(&self, source: &str, target: &Path) -> Result<(), Error> {
        validate_guest_path(source)?;
        let _gate = self.gate.read().await;
        self.check_open()?;
        let view = self.guest_view()?;
        let source = source.to_string();
        let target = target.to_path_buf();
        tokio::task::spawn_blocking(move || crate::fsops::download(&view, &source, &target))
            .await
            .map_err(|e| Error::backend("download", e))?
    }

    /// Done on the host from file descriptors (the machine seen as in
    /// [`Machine::download`]): no program of the machine runs, the source is opened without
    /// blocking and checked to be a regular file, and the whole download is bounded by a
    /// 600 s deadline ([`Error::TimedOut`]).
    async fn download_file(
        &self,
        source: &str,
        target: &Path,
        max_bytes: u64,
    ) -> Result<(), Error> {
        validate_guest_path(source)?;
        let _gate = self.gate.read().await;
        self.check_open()?;
        let view = self.guest_view()?;
        let source = source.to_string();
        let target = target.to_path_buf();
        // A dropped future stops the copy and removes its staging directory at once.
        struct CancelOnDrop(Arc<crate::fsops::DownloadCancel>, bool);
        impl Drop for CancelOnDrop {
            fn drop(&mut self) {
                if !self.1 {
                    self.0.cancel();
                }
            }
        }
        let cancel = Arc::new(crate::fsops::DownloadCancel::default());
        let mut guard = CancelOnDrop(cancel.clone(), false);
        let result = tokio::task::spawn_blocking(move || {
            crate::fsops::download_file_by(
                &view,
                &source,
                &target,
                max_bytes,
                crate::fsops::DOWNLOAD_FILE_DEADLINE,
                &cancel,
            )
        })
        .await
        .map_err(|e| Error::backend("download_file", e))?;
        guard.1 = true;
        result
    }

    /// See [`LocalMachine::snapshot_local`]: processes do not survive a snapshot (it ends
    /// them, and the open shell session, as a restart would); files do.
    async fn snapshot(&self) -> Result<shellbox_core::Snapshot, Error> {
        self.snapshot_local().await
    }

    async fn close(&self) -> Result<(), Error> {
        let _gate = self.gate.write().await;
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        if let Some(session) = self.take_session() {
            session.shut();
        }
        // No sandbox starts after this; a start under way is stopped.
        let (spawned, task) = self.slot.close();
        self.shutdown.send_replace(true);
        // Every process of the machine dies, background ones and escapees included: the
        // cgroup stops forks and kills what is in it, bwrap's group is killed too.
        if let Some(c) = &self.cgroup {
            c.kill();
        }
        kill_spawned(&spawned);
        // Returns only once bwrap was reaped and the start task ended: nothing of the
        // machine (its namespaces among it) is held after close.
        if let Some((_, mut exited)) = spawned.clone() {
            let _ = tokio::time::timeout(Duration::from_secs(10), exited.wait_for(|e| *e)).await;
        }
        if let Some(task) = task {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
        self.slot.ready.send_replace(Some(Started::Closed));
        self.drivers.wait_idle(Duration::from_secs(10)).await;
        self.release_namespaces();
        let view = self.view.lock().unwrap_or_else(|e| e.into_inner()).take();
        let chain = std::mem::take(&mut *self.chain.lock().unwrap_or_else(|e| e.into_inner()));
        let root = self.layout.root.clone();
        let cgroup = self.cgroup.clone();
        let memory = self.memory.lock().unwrap_or_else(|e| e.into_inner()).take();
        tokio::task::spawn_blocking(move || {
            drop(view);
            Self::remove_cgroup(cgroup.as_deref(), Duration::from_secs(5));
            let removed = root::remove_root(&root);
            // Layers no snapshot or other machine holds go with the machine.
            drop(chain);
            // Its tmpfs file systems are gone with its mount namespace and root.
            drop(memory);
            removed
        })
        .await
        .map_err(|e| Error::backend("remove machine root", e))?
    }
}

impl Drop for LocalMachine {
    fn drop(&mut self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Some(session) = self.take_session() {
            session.shut();
        }
        // The start task (if any) sees the shutdown and ends on its own.
        let (spawned, _task) = self.slot.close();
        self.shutdown.send_replace(true);
        Self::remove_cgroup(self.cgroup.as_deref(), Duration::from_secs(1));
        kill_spawned(&spawned);
        self.slot.ready.send_replace(Some(Started::Closed));
        self.release_namespaces();
        self.view.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Err(e) = root::remove_root(&self.layout.root) {
            tracing::warn!("dropping an unclosed local machine: {e}");
        }
    }
}

/// The bwrap argv (without the program) a command would get on this machine with the
/// given fd numbers; exposed for tests and tools that check the sandbox line.
#[doc(hidden)]
pub fn machine_bwrap_args(
    machine: &LocalMachine,
    command: &Command,
    env_fd: i32,
    status_fd: Option<i32>,
) -> Result<Vec<OsString>, Error> {
    command.validate()?;
    let (_, user) = machine.plan_launch(command)?;
    Ok(plan::bwrap_args(
        &machine.layout,
        &machine.factory.facts,
        &Launch {
            argv: command.argv.clone(),
            cwd: command
                .cwd
                .clone()
                .unwrap_or_else(|| machine.workdir.clone()),
            user,
            env_fd,
            status_fd,
            seccomp_fd: Some(machine.factory.seccomp.command_fd()),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_on_write_check_says_what_is_missing() {
        let Err(Error::SandboxUnavailable { reasons }) = check_copy_on_write(false) else {
            panic!("a process that cannot make mount namespaces passed");
        };
        let text = reasons.join("\n");
        assert!(text.contains("cannot make mount namespaces"), "{text}");
        assert!(text.contains(COPY_ON_WRITE_REQUIREMENTS), "{text}");
        if std::fs::read_to_string("/proc/filesystems")
            .unwrap_or_default()
            .contains("overlay")
        {
            assert!(!text.contains("not in /proc/filesystems"), "{text}");
        }
    }
}
