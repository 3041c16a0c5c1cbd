//! A machine's private root directory on the host (REFERENCE 4.2): creation and removal.

use std::fs;
use std::os::unix::fs::{symlink, DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use shellbox_core::Error;

use crate::fsops;
use crate::plan::{HostDir, HostFacts, ReadOnlyMount, HOME};

/// Host files and directories that make up the machine's private `/etc` when they exist
/// (REFERENCE 4.2). Files are copied; the directories among them
/// ([`ETC_BOUND_DIRS`]) are bound read-only instead of copied, which shows the same content
/// (the private `/etc` is read-only) without hundreds of symlink copies per machine.
pub const ETC_COPIES: [&str; 10] = [
    "/etc/alternatives",
    "/etc/group",
    "/etc/hosts",
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/passwd",
    "/etc/resolv.conf",
    "/etc/ssl/cert.pem",
    "/etc/ssl/certs",
];

/// The [`ETC_COPIES`] directories, bound read-only at their own path over the private `/etc`
/// when they are real directories on the host (each holds hundreds of symlinks: copying them
/// took most of a machine's creation time).
pub const ETC_BOUND_DIRS: [&str; 2] = ["/etc/alternatives", "/etc/ssl/certs"];

/// Prefix of every machine's private directory in the host temp dir (mode 0700); the machine
/// root is [`ROOT_DIR_NAME`] inside it.
pub const ROOT_PREFIX: &str = "shellbox-local-";

/// Prefix of a factory's private directory for its shared `/etc` (`SharedEtc`) in the
/// host temp dir (mode 0700, with an owner marker like a machine's). It differs from
/// [`ROOT_PREFIX`] so that `shellbox-local-*` names machines only (one per live machine).
pub const ETC_PREFIX: &str = "shellbox-etc-";

/// Name of the machine root inside its private `shellbox-local-*` directory.
pub const ROOT_DIR_NAME: &str = "root";

fn io(op: &str, path: &Path, e: std::io::Error) -> Error {
    Error::io(format!("{op} {}", path.display()), e)
}

/// Creates a private root `shellbox-local-*/root` in the host temp dir (the outer directory
/// mode 0700, the root itself 0755) with empty `etc` (the mount point of the factory's
/// [`SharedEtc`]), `sys` and `opt`, `tmp` and `home/shellbox` (mode 1777), the
/// merged-`/usr` symlinks of the host, mount points for the system directories, `/dev`,
/// `/proc` and every mount, and the workdir ([`fill_skeleton`]). Returns the root. On
/// error the partial root is removed.
///
/// With `overlay` (a root host process without `storage_mb`: the root will be an overlayfs
/// in the machine's mount namespace) the root is only an empty mount point beside an empty
/// upper and work directory; those files come from the lower layers the caller mounts
/// (the factory's skeleton layer at the bottom).
///
/// With `storage_mb`, the root is a file system of its own bounded to that many MiB (see
/// [`mount_root_fs`]) mounted on the empty root directory before anything is put in it,
/// so the machine's files (the private `/etc` copies included) never reach the host disk
/// and a write past the bound fails with `ENOSPC`. A copy-on-write machine (`layers` not
/// empty) has one such file system for its root and its layers together (see
/// [`mount_machine_fs`]), so `storage_mb` bounds everything it writes.
///
/// # Errors
/// [`Error::Io`] when the host refuses a step.
pub fn create_root(
    facts: &HostFacts,
    mounts: &[ReadOnlyMount],
    workdir: &str,
    storage_mb: Option<u64>,
    layers: &[LayerDir],
    overlay: bool,
) -> Result<PathBuf, Error> {
    // The root lives inside a 0700 directory of its own, so no other host user can reach
    // into a running machine (plant files in its /tmp, or run a setuid file a command made
    // there), while `/` inside the sandbox stays 0755 for any `user` a command runs as.
    let dir = tempfile::Builder::new()
        .prefix(ROOT_PREFIX)
        .permissions(fs::Permissions::from_mode(0o700))
        .tempdir()
        .map_err(|e| Error::io("create machine root in the host temp dir", e))?;
    let private = dir.keep();
    // The owner marker comes first, so `gc` can tell whose directory this is from the
    // moment it holds anything else.
    if let Err(e) = crate::gc::write_marker(&private) {
        let _ = shellbox_core::remove_tree(&private);
        return Err(e);
    }
    let root = private.join(ROOT_DIR_NAME);
    if let Err(e) = fs::create_dir(&root) {
        let _ = shellbox_core::remove_tree(&private);
        return Err(io("mkdir", &root, e));
    }
    if !layers.is_empty() {
        if let Err(e) = create_layers(&private.join(LAYERS_DIR_NAME)) {
            let _ = shellbox_core::remove_tree(&private);
            return Err(e);
        }
    }
    if let Some(mb) = storage_mb {
        let mounted = if layers.is_empty() {
            mount_root_fs(&root, mb)
        } else {
            mount_machine_fs(&root, mb)
        };
        if let Err(e) = mounted {
            if let Err(re) = remove_root(&root) {
                tracing::warn!("removing partial machine root {}: {re}", root.display());
            }
            return Err(e);
        }
    }
    let filled = if overlay {
        make_overlay_dirs(&root)
    } else {
        fill_skeleton(&root, facts, mounts, workdir, layers)
    };
    match filled {
        Ok(()) => Ok(root),
        Err(e) => {
            if let Err(re) = remove_root(&root) {
                tracing::warn!("removing partial machine root {}: {re}", root.display());
            }
            Err(e)
        }
    }
}

/// Name of the upper directory of a machine whose root is an overlayfs, beside
/// [`ROOT_DIR_NAME`] in its private directory (see the `layer` module).
pub const UPPER_DIR_NAME: &str = "upper";

/// Name of overlayfs's work directory of such a machine, beside [`UPPER_DIR_NAME`].
pub const WORK_DIR_NAME: &str = "work";

/// The upper and work directories of the overlayfs root mounted on `root`.
pub fn overlay_dirs(root: &Path) -> (PathBuf, PathBuf) {
    let private = root.parent().unwrap_or(root);
    (private.join(UPPER_DIR_NAME), private.join(WORK_DIR_NAME))
}

/// Makes a fresh, empty overlayfs work directory `work` (mode 0700), moving any old one
/// out of the way first (overlayfs refuses a work directory a `volatile` mount used).
///
/// # Errors
/// [`Error::Io`] when a step is refused.
pub fn fresh_work_dir(work: &Path) -> Result<(), Error> {
    if work.exists() {
        let old = work.with_extension("old");
        let _ = shellbox_core::remove_tree(&old);
        fs::rename(work, &old).map_err(|e| io("rename", work, e))?;
        shellbox_core::remove_tree(&old).map_err(|e| io("remove", &old, e))?;
    }
    fs::DirBuilder::new()
        .mode(0o700)
        .create(work)
        .map_err(|e| io("mkdir", work, e))
}

/// The directories of a machine whose root is an overlayfs: `root` (the empty mount
/// point, 0755), its empty upper directory (0755: the root's files are in its lower
/// layers, the factory's [`fill_skeleton`] layer at the bottom) and an empty work
/// directory (0700). Three directories on the host's disk, whatever the root holds.
fn make_overlay_dirs(root: &Path) -> Result<(), Error> {
    fs::set_permissions(root, fs::Permissions::from_mode(0o755))
        .map_err(|e| io("chmod", root, e))?;
    let (upper, work) = overlay_dirs(root);
    fs::create_dir(&upper).map_err(|e| io("mkdir", &upper, e))?;
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&work)
        .map_err(|e| io("mkdir", &work, e))?;
    fs::set_permissions(&upper, fs::Permissions::from_mode(0o755))
        .map_err(|e| io("chmod", &upper, e))
}

/// Writes a fresh machine root's files into the empty directory `root`: the top-level
/// directories and system-directory links or mount points, `/tmp` and the home (1777), the
/// mount points of `mounts`, `workdir`, and a copy-on-write machine's `/var` mount points
/// ([`fill_var`]). A machine whose root is a plain directory gets them in it; an overlayfs
/// root gets them from its factory's skeleton layer, made once per distinct `mounts` and
/// `workdir`.
///
/// # Errors
/// [`Error::Io`] naming the refused step.
pub(crate) fn fill_skeleton(
    root: &Path,
    facts: &HostFacts,
    mounts: &[ReadOnlyMount],
    workdir: &str,
    layers: &[LayerDir],
) -> Result<(), Error> {
    fill_root(root, facts, mounts, workdir).and_then(|()| fill_var(root, layers))
}

fn fill_root(
    root: &Path,
    facts: &HostFacts,
    mounts: &[ReadOnlyMount],
    workdir: &str,
) -> Result<(), Error> {
    fs::set_permissions(root, fs::Permissions::from_mode(0o755))
        .map_err(|e| io("chmod", root, e))?;
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true).mode(0o755);
    for d in ["etc", "sys", "opt", "dev", "proc", "home"] {
        let p = root.join(d);
        builder.create(&p).map_err(|e| io("mkdir", &p, e))?;
    }
    for d in ["tmp", &HOME[1..]] {
        let p = root.join(d);
        builder.create(&p).map_err(|e| io("mkdir", &p, e))?;
        fs::set_permissions(&p, fs::Permissions::from_mode(0o1777))
            .map_err(|e| io("chmod", &p, e))?;
    }
    for (dir, kind) in &facts.system_dirs {
        let p = root.join(&dir[1..]);
        match kind {
            HostDir::Symlink(target) => symlink(target, &p).map_err(|e| io("symlink", &p, e))?,
            HostDir::Dir => builder.create(&p).map_err(|e| io("mkdir", &p, e))?,
            HostDir::Missing => {}
        }
    }
    for m in mounts {
        let p = root.join(&m.guest[1..]);
        if m.host.is_dir() {
            builder.create(&p).map_err(|e| io("mkdir", &p, e))?;
        } else {
            if let Some(parent) = p.parent() {
                builder.create(parent).map_err(|e| io("mkdir", parent, e))?;
            }
            fs::File::create(&p).map_err(|e| io("create mount point", &p, e))?;
        }
    }
    if workdir != "/" {
        let p = root.join(&workdir[1..]);
        builder.create(&p).map_err(|e| io("mkdir", &p, e))?;
    }
    Ok(())
}

/// A copy-on-write machine's `/var`: the mount points of its overlaid
/// [`VAR_OVERLAID_DIRS`](crate::plan::VAR_OVERLAID_DIRS) and its own empty `/var/log`
/// (with `apt/`, where apt and dpkg write their logs) and `/var/tmp` (mode 1777). Nothing
/// for a read-only machine (`layers` empty).
fn fill_var(root: &Path, layers: &[LayerDir]) -> Result<(), Error> {
    if layers.is_empty() {
        return Ok(());
    }
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true).mode(0o755);
    let var = layers
        .iter()
        .map(|l| l.guest.as_str())
        .filter(|g| crate::plan::VAR_OVERLAID_DIRS.contains(g));
    for guest in var.chain(["/var/log/apt", "/var/tmp"]) {
        let p = root.join(&guest[1..]);
        builder.create(&p).map_err(|e| io("mkdir", &p, e))?;
    }
    let tmp = root.join("var/tmp");
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o1777)).map_err(|e| io("chmod", &tmp, e))
}

/// Name of a copy-on-write machine's layers directory inside its private
/// `shellbox-local-*` directory (beside [`ROOT_DIR_NAME`]; see `plan::Layers`).
pub const LAYERS_DIR_NAME: &str = "layers";

/// The layers directory of the machine whose root is `root`.
pub fn layers_dir(root: &Path) -> PathBuf {
    root.parent().unwrap_or(root).join(LAYERS_DIR_NAME)
}

/// One overlaid guest directory of a copy-on-write machine, with the owner and mode of
/// its lower directory: the top directory of an overlay shows its upper directory's, so
/// the upper directory gets them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerDir {
    /// The guest directory (`/usr`, `/etc`, ...).
    pub guest: String,
    /// The lower directory's permission bits.
    pub mode: u32,
    /// The lower directory's owner.
    pub uid: u32,
    /// The lower directory's group.
    pub gid: u32,
}

impl LayerDir {
    /// `guest` shown over the host directory `lower`, with its owner and mode.
    ///
    /// # Errors
    /// [`Error::Io`] when `lower` cannot be stat'ed.
    pub fn of(guest: &str, lower: &Path) -> Result<LayerDir, Error> {
        use std::os::unix::fs::MetadataExt;
        let meta = fs::metadata(lower).map_err(|e| io("stat", lower, e))?;
        Ok(LayerDir {
            guest: guest.to_string(),
            mode: meta.mode() & 0o7777,
            uid: meta.uid(),
            gid: meta.gid(),
        })
    }
}

/// Makes a copy-on-write machine's layers directory `dir` (mode 0700), the mount point of
/// its layers' `tmpfs`: the machine's size-limited file system with `storage_mb`
/// ([`mount_machine_fs`]), else one of the machine's mount namespace bounded to
/// [`DEFAULT_LAYERS_MB`] ([`fill_layers`]).
///
/// # Errors
/// [`Error::Io`] when the host refuses (the caller removes the private directory).
fn create_layers(dir: &Path) -> Result<(), Error> {
    fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .map_err(|e| io("mkdir", dir, e))
}

/// The bound of a copy-on-write machine's layers when its spec has no `storage_mb`: 1 GiB
/// (or [`largest_storage_mb`](crate::largest_storage_mb), half the host's memory, where
/// that is less). The layers are a `tmpfs`, held in memory or
/// swap, so they always get a bound; the kernel's own default, half the host's memory per
/// machine, bounded nothing in practice. The machine root of such a spec stays on the host
/// temp dir's file system, as it does for a read-only machine.
pub const DEFAULT_LAYERS_MB: u64 = 1024;

/// [`DEFAULT_LAYERS_MB`], or half the host's memory where that is less (at least 1 MiB).
pub fn default_layers_mb() -> u64 {
    DEFAULT_LAYERS_MB.min(crate::largest_storage_mb()).max(1)
}

/// The `tmpfs` options of a copy-on-write machine's layers of `mb` MiB: the size and
/// inodes of [`root_fs_options`], mode 0700.
pub fn layers_fs_options(mb: u64) -> String {
    root_fs_options(mb).replace("mode=0755", "mode=0700")
}

/// Name of a copy-on-write machine's root directory inside its size-limited file system
/// (with `storage_mb`), beside the layers' upper and work directories (which are named
/// after system directories, never with a leading dot).
pub const ROOT_IN_LAYERS: &str = ".root";

/// Fills the layers `tmpfs` at `dir` (already mounted: the machine's size-limited file
/// system, or a `tmpfs` of its mount namespace, seen from that namespace):
/// an upper directory (its lower's owner and mode) and an empty work directory (0700) per
/// layer.
///
/// # Errors
/// The failing `mkdir(2)`, `chmod(2)` or `chown(2)`.
pub(crate) fn fill_layers(dir: &Path, layers: &[LayerDir]) -> std::io::Result<()> {
    let with = |e: std::io::Error, op: &str, p: &Path| {
        std::io::Error::new(e.kind(), format!("{op} {}: {e}", p.display()))
    };
    for layer in layers {
        let (upper, work) = crate::plan::layer_dirs(dir, &layer.guest);
        // A nested guest directory (`/var/lib/dpkg`) has its upper inside plain
        // directories of the layers `tmpfs`.
        if let Some(parent) = upper.parent().filter(|p| *p != dir) {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(|e| with(e, "mkdir", parent))?;
        }
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&work)
            .map_err(|e| with(e, "mkdir", &work))?;
        fs::DirBuilder::new()
            .mode(layer.mode)
            .create(&upper)
            .map_err(|e| with(e, "mkdir", &upper))?;
        // The umask may have taken bits away.
        fs::set_permissions(&upper, fs::Permissions::from_mode(layer.mode))
            .map_err(|e| with(e, "chmod", &upper))?;
        let (uid, gid) = (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        );
        if (layer.uid, layer.gid) != (uid, gid) {
            std::os::unix::fs::chown(&upper, Some(layer.uid), Some(layer.gid))
                .map_err(|e| with(e, "chown", &upper))?;
        }
    }
    Ok(())
}

/// A factory's private `/etc`, made once and bound read-only at `/etc` in every machine
/// of the factory (it is read-only in every machine, so one copy serves them all): copies
/// of [`ETC_COPIES`] and empty mount points for the [`ETC_BOUND_DIRS`] that are
/// directories on the host. It lives in a `shellbox-etc-*` ([`ETC_PREFIX`]) private directory of its
/// own (mode 0700, with an owner marker, so `gc` removes it when its owner was killed),
/// as `root/etc`; dropping it removes the directory.
///
/// Copying these files per machine cost about ten file creations and removals per
/// machine (with `discard` on ext4, most of `create_close`).
#[derive(Debug)]
pub struct SharedEtc {
    /// `shellbox-etc-*/root`.
    root: PathBuf,
    /// `shellbox-etc-*/root/etc`.
    etc: PathBuf,
    /// The host directories bound read-only at their own path over it.
    binds: Vec<PathBuf>,
    /// `shellbox-etc-*/empty`: an empty directory (0755), the lower layer of an overlayfs
    /// machine root that starts from no snapshot.
    empty: PathBuf,
}

impl SharedEtc {
    /// Makes the copy in the host temp dir.
    ///
    /// # Errors
    /// [`Error::Io`] when the host refuses a step (the partial directory is removed).
    /// With `copy_dirs` (a copy-on-write factory, whose machines overlay a writable `/etc`
    /// on this copy), the [`ETC_BOUND_DIRS`] are copied too (their links as links, once per
    /// factory), so the one overlay shows their content and a machine may change them
    /// (`update-alternatives`, `update-ca-certificates`).
    pub fn create(copy_dirs: bool) -> Result<SharedEtc, Error> {
        let dir = tempfile::Builder::new()
            .prefix(ETC_PREFIX)
            .permissions(fs::Permissions::from_mode(0o700))
            .tempdir()
            .map_err(|e| Error::io("create the machines' /etc in the host temp dir", e))?;
        let private = dir.keep();
        if let Err(e) = crate::gc::write_marker(&private) {
            let _ = shellbox_core::remove_tree(&private);
            return Err(e);
        }
        let root = private.join(ROOT_DIR_NAME);
        let etc = root.join("etc");
        let empty = private.join("empty");
        let made = fill_etc(&root, &etc, copy_dirs).and_then(|binds| {
            fs::DirBuilder::new()
                .mode(0o755)
                .create(&empty)
                .map_err(|e| io("mkdir", &empty, e))?;
            Ok(binds)
        });
        match made {
            Ok(binds) => Ok(SharedEtc {
                root,
                etc,
                binds,
                empty,
            }),
            Err(e) => {
                let _ = shellbox_core::remove_tree(&private);
                Err(e)
            }
        }
    }

    /// The directory shown read-only at `/etc`.
    pub fn dir(&self) -> &Path {
        &self.etc
    }

    /// The host directories bound read-only at their own path over `/etc`.
    pub fn binds(&self) -> &[PathBuf] {
        &self.binds
    }

    /// An empty directory of the factory's: the lower layer of a fresh overlayfs root.
    pub fn empty(&self) -> &Path {
        &self.empty
    }
}

impl Drop for SharedEtc {
    fn drop(&mut self) {
        if let Err(e) = remove_root(&self.root) {
            tracing::warn!("removing the machines' shared /etc: {e}");
        }
    }
}

fn fill_etc(root: &Path, etc: &Path, copy_dirs: bool) -> Result<Vec<PathBuf>, Error> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true).mode(0o755);
    builder.create(etc).map_err(|e| io("mkdir", etc, e))?;
    fs::set_permissions(root, fs::Permissions::from_mode(0o755))
        .map_err(|e| io("chmod", root, e))?;
    let mut etc_binds = Vec::new();
    for src in ETC_COPIES {
        let src = Path::new(src);
        let Ok(meta) = fs::symlink_metadata(src) else {
            continue;
        };
        let dst = root.join(src.strip_prefix("/").unwrap_or(src));
        if !copy_dirs && meta.is_dir() && ETC_BOUND_DIRS.iter().any(|d| Path::new(d) == src) {
            builder.create(&dst).map_err(|e| io("mkdir", &dst, e))?;
            etc_binds.push(src.to_path_buf());
            continue;
        }
        if let Some(parent) = dst.parent() {
            builder.create(parent).map_err(|e| io("mkdir", parent, e))?;
        }
        fsops::copy_host_path(src, &dst)?;
    }
    if copy_dirs {
        copy_etc_for_packages(root)?;
    }
    Ok(etc_binds)
}

/// What a copy-on-write factory's `/etc` copy holds besides [`ETC_COPIES`], when the host
/// has them: what apt and dpkg read (their configuration, apt's sources and public
/// keyrings, `ldconfig`'s configuration that a package's trigger runs, the release files).
/// [`ETC_PACKAGE_SECRETS`] inside them are left out.
pub const ETC_PACKAGE_COPIES: [&str; 6] = [
    "/etc/apt",
    "/etc/debian_version",
    "/etc/dpkg",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/os-release",
];

/// Entries of [`ETC_PACKAGE_COPIES`] never copied: apt's repository credentials
/// (`apt_auth.conf(5)`); `auth.conf.d` is made empty instead.
pub const ETC_PACKAGE_SECRETS: [&str; 2] = ["/etc/apt/auth.conf", "/etc/apt/auth.conf.d"];

/// The file a copy-on-write factory adds to its `/etc/apt/apt.conf.d` copy, and its text:
/// apt downloads (a local `./x.deb` too) as root instead of switching to its `_apt` user,
/// which a command cannot do (it runs with no capabilities: `setgroups` fails with `EPERM`
/// and `apt-get install` stopped).
pub const APT_SANDBOX_CONF: (&str, &str) = (
    "00shellbox-sandbox",
    "// shellbox: commands have no capabilities, so apt cannot switch to _apt.\nAPT::Sandbox::User \"root\";\n",
);

/// Copies [`ETC_PACKAGE_COPIES`] into the `/etc` copy in `root`, each directory entry by
/// entry one level down so [`ETC_PACKAGE_SECRETS`] stay out.
fn copy_etc_for_packages(root: &Path) -> Result<(), Error> {
    let inside = |p: &Path| root.join(p.strip_prefix("/").unwrap_or(p));
    for src in ETC_PACKAGE_COPIES.map(Path::new) {
        let Ok(meta) = fs::symlink_metadata(src) else {
            continue;
        };
        if !meta.is_dir() {
            fsops::copy_host_path(src, &inside(src))?;
            continue;
        }
        let dst = inside(src);
        fs::DirBuilder::new()
            .mode(0o755)
            .create(&dst)
            .map_err(|e| io("mkdir", &dst, e))?;
        let entries = fs::read_dir(src).map_err(|e| io("read", src, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| io("read", src, e))?;
            let path = entry.path();
            if ETC_PACKAGE_SECRETS.iter().any(|s| Path::new(s) == path) {
                continue;
            }
            fsops::copy_host_path(&path, &inside(&path))?;
        }
        if src == Path::new("/etc/apt") {
            let auth = dst.join("auth.conf.d");
            fs::DirBuilder::new()
                .mode(0o755)
                .create(&auth)
                .map_err(|e| io("mkdir", &auth, e))?;
            let conf = dst.join("apt.conf.d");
            if conf.is_dir() {
                let file = conf.join(APT_SANDBOX_CONF.0);
                fs::write(&file, APT_SANDBOX_CONF.1).map_err(|e| io("write", &file, e))?;
            }
        }
    }
    Ok(())
}

/// Mount points of this process's mount namespace at or below `dir`, from field 5 of
/// `/proc/self/mountinfo` (octal escapes such as `\040` decoded).
pub fn mounts_below(dir: &Path) -> Vec<PathBuf> {
    let Ok(info) = fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    info.lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|field| PathBuf::from(decode_mountinfo(field)))
        .filter(|p| p.starts_with(dir))
        .collect()
}

/// Inodes per MiB of a size-limited root (one per 4 KiB, four times ext4's default
/// ratio): empty files cost kernel memory the byte bound does not count.
pub const ROOT_FS_INODES_PER_MB: u64 = 256;

/// The fewest inodes a size-limited root gets.
pub const ROOT_FS_MIN_INODES: u64 = 16_384;

/// The `tmpfs` options of a size-limited root of `storage_mb` MiB: `size`, `nr_inodes`
/// ([`ROOT_FS_INODES_PER_MB`] per MiB, at least [`ROOT_FS_MIN_INODES`]) and mode 0755.
pub fn root_fs_options(storage_mb: u64) -> String {
    let inodes = storage_mb
        .saturating_mul(ROOT_FS_INODES_PER_MB)
        .max(ROOT_FS_MIN_INODES);
    format!("size={storage_mb}m,nr_inodes={inodes},mode=0755")
}

/// Mounts a `tmpfs` bounded to `storage_mb` MiB ([`root_fs_options`]; `nosuid`, `nodev`)
/// on the empty directory `root`, in this process's mount namespace, so the host-side
/// transfer code and every command see the same bounded file system. A tmpfs costs
/// microseconds to make (a loop-backed ext4 image costs tens of milliseconds of `mkfs`
/// per machine) and holds its files in memory (and swap), counted against the bound.
///
/// # Errors
/// [`Error::Io`] when the mount is refused (`EPERM` without `CAP_SYS_ADMIN`).
pub fn mount_root_fs(root: &Path, storage_mb: u64) -> Result<(), Error> {
    mount_tmpfs(root, &root_fs_options(storage_mb), "the size-limited root")
}

/// The size-limited file system of a copy-on-write machine with `storage_mb`: one `tmpfs`
/// bounded to `storage_mb` MiB ([`layers_fs_options`]; `nosuid`, `nodev`, mode 0700)
/// mounted on the machine's layers directory (the sibling of `root`, [`layers_dir`]),
/// holding the machine root as [`ROOT_IN_LAYERS`] (mode 0755), which is bound on the
/// empty directory `root`. The root and the layers' upper directories then share one
/// bound: a machine that filled its root cannot write more into `/usr`, nor the other
/// way round (two `tmpfs` of `storage_mb` each let it write twice that). Both mounts are
/// in this process's mount namespace (the machine's namespace, made later, shows them
/// too); [`remove_root`] detaches both.
///
/// # Errors
/// [`Error::Io`] when a mount or the `mkdir` is refused; what was mounted stays mounted
/// (the caller's [`remove_root`] detaches it).
pub fn mount_machine_fs(root: &Path, storage_mb: u64) -> Result<(), Error> {
    let layers = layers_dir(root);
    mount_tmpfs(
        &layers,
        &layers_fs_options(storage_mb),
        "the size-limited layers",
    )?;
    let inner = layers.join(ROOT_IN_LAYERS);
    fs::DirBuilder::new()
        .mode(0o755)
        .create(&inner)
        .map_err(|e| io("mkdir", &inner, e))?;
    let (src, dst) = (cpath(&inner)?, cpath(root)?);
    // SAFETY: mount(2) with NUL-terminated strings that outlive the call.
    let r = unsafe {
        libc::mount(
            src.as_ptr(),
            dst.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    };
    if r != 0 {
        return Err(io(
            &format!("bind {} on", inner.display()),
            root,
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

fn cpath(path: &Path) -> Result<std::ffi::CString, Error> {
    std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()))
        .map_err(|_| Error::invalid(format!("{} holds a NUL byte", path.display())))
}

/// Mounts a `tmpfs` with these options (`nosuid`, `nodev`) on `dir`.
fn mount_tmpfs(dir: &Path, options: &str, what: &str) -> Result<(), Error> {
    let c = cpath(dir)?;
    let options = std::ffi::CString::new(options)
        .map_err(|_| Error::invalid("tmpfs options hold a NUL byte"))?;
    // SAFETY: mount(2) with NUL-terminated strings that outlive the call.
    let r = unsafe {
        libc::mount(
            c"shellbox-local".as_ptr(),
            c.as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            options.as_ptr().cast(),
        )
    };
    if r != 0 {
        return Err(io(
            &format!("mount {what} tmpfs at"),
            dir,
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Detaches the file system mounted at `root` itself in this mount namespace (a machine's
/// size-limited root), if any; nothing else.
///
/// # Errors
/// [`Error::Io`] when it is mounted and cannot be detached.
pub fn unmount_root_fs(root: &Path) -> Result<(), Error> {
    let c = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(root.as_os_str()))
        .map_err(|_| Error::invalid(format!("{} holds a NUL byte", root.display())))?;
    // A tmpfs may be stacked more than once only by someone else; unmount what is there.
    for _ in 0..8 {
        if !mounts_below(root).iter().any(|m| m == root) {
            return Ok(());
        }
        // SAFETY: umount2 on a NUL-terminated path.
        if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } != 0 {
            return Err(io("unmount", root, std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// Decodes the `\NNN` octal escapes of a mountinfo field.
pub fn decode_mountinfo(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let digits = &bytes[i + 1..i + 4];
            if digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
                let v = digits
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
                if let Ok(v) = u8::try_from(v) {
                    out.push(v);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Removes a machine root and the private directory around it, first detaching the root's
/// own size-limited file system ([`unmount_root_fs`]) and, for a copy-on-write machine's,
/// the one on its layers directory ([`mount_machine_fs`]). Refuses when anything else is
/// mounted below it in this process's
/// mount namespace (sandbox mounts live in their own namespaces, so this never happens
/// unless something else mounted there), so a removal can never reach host files through a
/// bind mount. Retries briefly while killed sandbox processes finish dying. A missing root
/// is not an error.
///
/// # Errors
/// [`Error::Io`] when the directory cannot be removed.
pub fn remove_root(root: &Path) -> Result<(), Error> {
    // The machine's own size-limited root file system goes first (its processes are dead),
    // then anything mounted on a copy-on-write machine's layers directory here: with
    // storage_mb, the size-limited file system holding its root and layers (the root above
    // is a bind of its `.root`); without, nothing (its layers tmpfs and overlays live only
    // in its own mount namespace, gone with its processes and fds).
    unmount_root_fs(root)?;
    if root.file_name() == Some(std::ffi::OsStr::new(ROOT_DIR_NAME)) {
        unmount_root_fs(&layers_dir(root))?;
    }
    let mounted = mounts_below(root);
    if !mounted.is_empty() {
        return Err(Error::io(
            format!("remove machine root {}", root.display()),
            std::io::Error::other(format!(
                "refusing: host mounts below it: {}",
                mounted
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        ));
    }
    // Remove the private 0700 directory around the root too (see `create_root`).
    let target = match root.parent() {
        Some(parent)
            if root.file_name() == Some(std::ffi::OsStr::new(ROOT_DIR_NAME))
                && parent.file_name().is_some_and(|n| {
                    let n = n.to_string_lossy();
                    n.starts_with(ROOT_PREFIX)
                        || n.starts_with(ETC_PREFIX)
                        || n.starts_with(crate::layer::LAYER_PREFIX)
                }) =>
        {
            parent
        }
        _ => root,
    };
    let mut last = None;
    for attempt in 0..20 {
        match shellbox_core::remove_tree(target) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(std::time::Duration::from_millis(10 * (attempt + 1)));
    }
    Err(io(
        "remove machine root",
        root,
        last.unwrap_or_else(|| std::io::Error::other("unknown error")),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(decode_mountinfo(r"/etc/host\040name"), "/etc/host name");
        assert_eq!(decode_mountinfo(r"/a\134b"), r"/a\b");
        assert_eq!(decode_mountinfo(r"/plain"), "/plain");
        assert_eq!(decode_mountinfo(r"/trail\04"), r"/trail\04");
    }
}
