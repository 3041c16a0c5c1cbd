//! Namespaces made once per machine and joined by each of its commands.
//!
//! Creating a network namespace per command (bwrap's `--unshare-net`) costs kernel work at
//! every start (device and sysctl registration) and more at every exit (the asynchronous,
//! serialised `cleanup_net`). A machine whose network is denied instead gets one network
//! namespace holding only loopback, made when the machine is created and held by an fd;
//! each command's launcher joins it with `setns(2)` before it execs bwrap. It is released
//! (the fd closed) when the machine is closed or dropped.
//!
//! Likewise every `--ro-bind` costs bwrap a bind mount, a remount and a full read of
//! `/proc/self/mountinfo`. A machine makes its own mount namespace once, private to it, in
//! which the read-only binds of its system directories (`plan::root_binds`) are mounted in
//! its root; commands join it, and bwrap binds the root with those submounts at `/` in one
//! step (its own new mount namespace per command, fresh `/dev`, `/dev/shm` and `/proc`, and
//! the spec's read-only mounts are unchanged). The binds are invisible in the host's mount
//! namespace: the host sees the root's plain directories.
//!
//! Both need `CAP_SYS_ADMIN` (a root host process); elsewhere bwrap does the work per
//! command, as before.

use std::ffi::{CStr, CString};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// Runs `f` on a short-lived thread of its own, so namespace changes made by `f` (which
/// apply to the calling thread only) never reach a thread of the caller's pool.
fn on_own_thread<T: Send + 'static>(
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    std::thread::Builder::new()
        .name("shellbox-ns".into())
        .spawn(f)?
        .join()
        .map_err(|_| std::io::Error::other("namespace thread panicked"))?
}

fn open_cloexec(path: &CStr) -> std::io::Result<OwnedFd> {
    // SAFETY: a plain open of a NUL-terminated path; the fd is owned by the result.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Brings the loopback interface of the calling thread's network namespace up; the kernel
/// then gives it `127.0.0.1/8` and `::1` (as bwrap's own loopback set-up does).
fn loopback_up() -> std::io::Result<()> {
    // SAFETY: socket/ioctl on a zeroed `ifreq` naming "lo"; the socket is closed by
    // `OwnedFd` on every path.
    unsafe {
        let sock = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if sock < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let sock = OwnedFd::from_raw_fd(sock);
        let raw = std::os::fd::AsRawFd::as_raw_fd(&sock);
        let mut req: libc::ifreq = std::mem::zeroed();
        for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
            *dst = *src as libc::c_char;
        }
        if libc::ioctl(raw, libc::SIOCGIFFLAGS, &mut req) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(raw, libc::SIOCSIFFLAGS, &req) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// A new network namespace with only loopback (up), held by the returned fd; it lives
/// until the fd (and every duplicate) is closed and no process is in it.
///
/// # Errors
/// The `unshare(2)` error (`EPERM` without `CAP_SYS_ADMIN`), or that of bringing `lo` up
/// or opening the namespace file.
pub(crate) fn loopback_netns() -> std::io::Result<OwnedFd> {
    on_own_thread(|| {
        // SAFETY: changes only this thread's network namespace; the thread ends next.
        unsafe { loopback_netns_here() }
    })
}

/// [`loopback_netns`] on the calling thread, which it moves into the new namespace.
///
/// # Safety
/// Only on a thread of our own that ends right after.
unsafe fn loopback_netns_here() -> std::io::Result<OwnedFd> {
    if libc::unshare(libc::CLONE_NEWNET) != 0 {
        return Err(std::io::Error::last_os_error());
    }
    loopback_up()?;
    open_cloexec(c"/proc/thread-self/ns/net")
}

fn cstring(path: &std::path::Path) -> std::io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::other(format!("{} holds a NUL byte", path.display())))
}

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;

/// Binds `src` at `dst` with every submount, then makes the whole tree read-only, nosuid
/// and nodev (bwrap's `--ro-bind`).
fn ro_bind(src: &std::path::Path, dst: &std::path::Path) -> std::io::Result<()> {
    let (csrc, cdst) = (cstring(src)?, cstring(dst)?);
    let fail = |op: &str| {
        let e = std::io::Error::last_os_error();
        std::io::Error::new(
            e.kind(),
            format!("{op} {} at {}: {e}", src.display(), dst.display()),
        )
    };
    // SAFETY: mount(2) and mount_setattr(2) on NUL-terminated paths and a live struct.
    unsafe {
        if libc::mount(
            csrc.as_ptr(),
            cdst.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND | libc::MS_REC,
            std::ptr::null(),
        ) != 0
        {
            return Err(fail("bind"));
        }
        let attr = MountAttr {
            attr_set: MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
            attr_clr: 0,
            propagation: 0,
            userns_fd: 0,
        };
        if libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            cdst.as_ptr(),
            (libc::AT_RECURSIVE | libc::AT_SYMLINK_NOFOLLOW) as libc::c_uint,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        ) != 0
        {
            return Err(fail("make read-only"));
        }
    }
    Ok(())
}

/// What a machine's own mount namespace holds besides the host's mounts: `mounts` (in
/// order: read-only binds and, for a copy-on-write machine, its overlays), then `mkdir`
/// (a workdir inside an overlay, made in its layer).
///
/// The host's other mounts are not detached from it: only the launcher of the machine's
/// one bwrap runs in it, and bwrap pivots into the root and detaches the old one (all of
/// them) in one step, while each detach here waited for an RCU grace period (four of
/// them took 2-6 ms each on a loaded host: most of a machine's creation time).
pub(crate) struct MountPlan {
    /// The machine root as an overlayfs (mounted first, on the root directory): its
    /// lower layers (top first), upper and work directories (see [`RootOverlay`]).
    pub root: Option<RootOverlay>,
    pub mounts: Vec<crate::plan::RootMount>,
    pub mkdir: Option<PathBuf>,
    /// A copy-on-write machine's layers: their directory, the options of the `tmpfs`
    /// mounted on it first (`None`: the machine's size-limited file system is mounted
    /// there already, see `root::mount_machine_fs`), and the layers made in it.
    pub layers: Option<(PathBuf, Option<String>, Vec<crate::root::LayerDir>)>,
}

/// A machine root that is an overlayfs (issue 15): `lowers` (top first; the frozen layers
/// of its snapshots, or the factory's empty directory), `upper` where its writes go and
/// overlayfs's `work` directory (same file system), mounted at `target` (the machine's
/// root directory) in the machine's mount namespace.
#[derive(Debug, Clone)]
pub(crate) struct RootOverlay {
    pub lowers: Vec<PathBuf>,
    pub upper: PathBuf,
    pub work: PathBuf,
    pub target: PathBuf,
}

/// A machine's mount namespace and, for each overlay in it, the guest directory it shows
/// and an fd of its top directory, and an fd of the root overlay's top when the root is
/// one. Through those fds the machine's transfers see (and write) the layers as its
/// commands do, though the overlays exist in no other namespace.
pub(crate) type MountNamespace = (OwnedFd, Vec<(String, OwnedFd)>, Option<OwnedFd>);

/// A machine's namespaces, made on one short-lived thread of their own: the loopback-only
/// network namespace when `net` is set ([`loopback_netns`]), then the mount namespace of
/// `mounts` ([`machine_mountns_here`]). The second value is the mount namespace or why it could
/// not be made (the caller falls back to binds per command, or fails a copy-on-write machine).
///
/// # Errors
/// The network namespace's error.
#[allow(clippy::type_complexity)]
pub(crate) fn machine_namespaces(
    net: bool,
    mounts: Option<MountPlan>,
) -> std::io::Result<(Option<OwnedFd>, std::io::Result<Option<MountNamespace>>)> {
    on_own_thread(move || {
        // SAFETY: both change only this thread's namespaces; the thread ends next.
        let net = if net {
            Some(unsafe { loopback_netns_here() }?)
        } else {
            None
        };
        let mnt = match &mounts {
            Some(plan) => unsafe { machine_mountns_here(plan) }.map(Some),
            None => Ok(None),
        };
        Ok((net, mnt))
    })
}

/// `fsconfig(2)` commands and flags of the new mount API (linux/mount.h).
const FSCONFIG_SET_FLAG: libc::c_uint = 0;
const FSCONFIG_SET_STRING: libc::c_uint = 1;
const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
const FSOPEN_CLOEXEC: libc::c_uint = 1;
const FSMOUNT_CLOEXEC: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 4;

/// Mounts an overlayfs of `lowers` (top first) and `upper` (work directory `work`; none:
/// a read-only overlay of two or more lowers) at `target`, `nosuid` and `nodev`, with the options of [`crate::plan::overlay_options`]
/// (`redirect_dir`, `metacopy`, `index`, `xino` and `uuid` off, `volatile`).
///
/// It is made with the new mount API (`fsopen`/`fsconfig`/`fsmount`/`move_mount`, Linux
/// 6.5 for `lowerdir+`), each layer given as `.` after an `fchdir(2)` into it, so the
/// options the kernel shows in `/proc/PID/mountinfo` (`lowerdir+=.,upperdir=.,workdir=.`)
/// name no host path of the machine's directories (issue 12's break-it pass: the machine
/// saw its layers' host paths there). Changes the calling thread's working directory
/// (only on a thread of our own with an unshared `fs`, as `unshare(CLONE_NEWNS)` leaves it).
fn overlay(
    lowers: &[&std::path::Path],
    upper: Option<(&std::path::Path, &std::path::Path)>,
    target: &std::path::Path,
) -> std::io::Result<()> {
    let fail = |op: &str| {
        let e = std::io::Error::last_os_error();
        std::io::Error::new(
            e.kind(),
            format!(
                "mount overlayfs at {} ({op}; lower {}, upper {}): {e}",
                target.display(),
                lowers
                    .iter()
                    .map(|l| l.display().to_string())
                    .collect::<Vec<_>>()
                    .join(":"),
                upper
                    .map(|(u, _)| u.display().to_string())
                    .unwrap_or_default()
            ),
        )
    };
    // SAFETY: new-mount-API syscalls on NUL-terminated strings that outlive each call;
    // every fd made is owned by an `OwnedFd`.
    unsafe {
        let fs = libc::syscall(libc::SYS_fsopen, c"overlay".as_ptr(), FSOPEN_CLOEXEC);
        if fs < 0 {
            return Err(fail("fsopen"));
        }
        let fs = OwnedFd::from_raw_fd(fs as libc::c_int);
        let raw = std::os::fd::AsRawFd::as_raw_fd(&fs);
        let set = |key: &CStr, value: Option<&CStr>| -> std::io::Result<()> {
            let (cmd, v) = match value {
                Some(v) => (FSCONFIG_SET_STRING, v.as_ptr()),
                None => (FSCONFIG_SET_FLAG, std::ptr::null()),
            };
            if libc::syscall(libc::SYS_fsconfig, raw, cmd, key.as_ptr(), v, 0) != 0 {
                return Err(fail(&format!("fsconfig {}", key.to_string_lossy())));
            }
            Ok(())
        };
        set(c"source", Some(c"shellbox-layer"))?;
        let enter = |dir: &std::path::Path| -> std::io::Result<()> {
            let d = open_dir(dir)?;
            if libc::fchdir(std::os::fd::AsRawFd::as_raw_fd(&d)) != 0 {
                return Err(fail(&format!("fchdir {}", dir.display())));
            }
            Ok(())
        };
        for lower in lowers {
            enter(lower)?;
            set(c"lowerdir+", Some(c"."))?;
        }
        if let Some((upper, work)) = upper {
            enter(upper)?;
            set(c"upperdir", Some(c"."))?;
            enter(work)?;
            set(c"workdir", Some(c"."))?;
        }
        if libc::chdir(c"/".as_ptr()) != 0 {
            return Err(fail("chdir /"));
        }
        for key in [c"redirect_dir", c"metacopy", c"index", c"xino", c"uuid"] {
            set(key, Some(c"off"))?;
        }
        if upper.is_some() {
            set(c"volatile", None)?;
        }
        if libc::syscall(
            libc::SYS_fsconfig,
            raw,
            FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_void>(),
            0,
        ) != 0
        {
            return Err(fail("create"));
        }
        let m = libc::syscall(
            libc::SYS_fsmount,
            raw,
            FSMOUNT_CLOEXEC,
            (MOUNT_ATTR_NOSUID
                | MOUNT_ATTR_NODEV
                | if upper.is_none() {
                    MOUNT_ATTR_RDONLY
                } else {
                    0
                }) as libc::c_uint,
        );
        if m < 0 {
            return Err(fail("fsmount"));
        }
        let m = OwnedFd::from_raw_fd(m as libc::c_int);
        let ctarget = cstring(target)?;
        if libc::syscall(
            libc::SYS_move_mount,
            std::os::fd::AsRawFd::as_raw_fd(&m),
            c"".as_ptr(),
            libc::AT_FDCWD,
            ctarget.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        ) != 0
        {
            return Err(fail("move_mount"));
        }
    }
    Ok(())
}

fn open_dir(path: &std::path::Path) -> std::io::Result<OwnedFd> {
    let c = cstring(path)?;
    // SAFETY: a plain open of a NUL-terminated path; the fd is owned by the result.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC | libc::O_NOFOLLOW,
        )
    };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return Err(std::io::Error::new(
            e.kind(),
            format!("open {}: {e}", path.display()),
        ));
    }
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Makes the calling thread's own mount namespace for a machine and returns an fd to it: a
/// slave of the host's (host mount events propagate in, none propagate out), in which each
/// of `plan.mounts` is mounted in order (see [`MountPlan`] for why the host's other mounts
/// stay), then `plan.mkdir` is made (with its parents, mode 0755). Returns too an fd of each
/// overlay's top directory ([`MountNamespace`]).
///
/// # Errors
/// The failing `unshare(2)`, `mount(2)` or `mount_setattr(2)` (kernels before 5.12 lack
/// it), `mkdir(2)`, or opening the namespace file.
///
/// # Safety
/// Only on a thread of our own that ends right after.
unsafe fn machine_mountns_here(plan: &MountPlan) -> std::io::Result<MountNamespace> {
    use crate::plan::RootMount;
    if libc::unshare(libc::CLONE_NEWNS) != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if libc::mount(
        std::ptr::null(),
        c"/".as_ptr(),
        std::ptr::null(),
        libc::MS_REC | libc::MS_SLAVE,
        std::ptr::null(),
    ) != 0
    {
        return Err(std::io::Error::last_os_error());
    }
    if let Some((dir, options, dirs)) = &plan.layers {
        if let Some(options) = options {
            let cdir = cstring(dir)?;
            let options =
                CString::new(options.as_str()).map_err(|_| std::io::Error::other("NUL"))?;
            if libc::mount(
                c"shellbox-layers".as_ptr(),
                cdir.as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                options.as_ptr().cast(),
            ) != 0
            {
                let e = std::io::Error::last_os_error();
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("mount the layers tmpfs at {}: {e}", dir.display()),
                ));
            }
        }
        crate::root::fill_layers(dir, dirs)?;
    }
    let root = match &plan.root {
        Some(r) => {
            let lowers: Vec<&std::path::Path> = r.lowers.iter().map(PathBuf::as_path).collect();
            overlay(&lowers, Some((&r.upper, &r.work)), &r.target)?;
            Some(open_dir(&r.target)?)
        }
        None => None,
    };
    let mut layers = Vec::new();
    for mount in &plan.mounts {
        match mount {
            RootMount::ReadOnly { source, target } => ro_bind(source, target)?,
            RootMount::ReadOnlyOverlay { lowers, target } => {
                let lowers: Vec<&std::path::Path> = lowers.iter().map(PathBuf::as_path).collect();
                overlay(&lowers, None, target)?;
            }
            RootMount::Overlay {
                guest,
                lower,
                upper,
                work,
                target,
            } => {
                overlay(&[lower.as_path()], Some((upper, work)), target)?;
                layers.push((guest.clone(), open_dir(target)?));
            }
        }
    }
    if let Some(dir) = &plan.mkdir {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .map_err(|e| std::io::Error::new(e.kind(), format!("mkdir {}: {e}", dir.display())))?;
    }
    Ok((open_cloexec(c"/proc/thread-self/ns/mnt")?, layers, root))
}

/// The namespaces a machine made once; each command's launcher joins them (`setns(2)`)
/// before it execs bwrap. Dropping the value closes the fds, which releases the
/// namespaces once no process is in them.
#[derive(Debug, Default)]
pub(crate) struct MachineNamespaces {
    /// The loopback-only network namespace of a machine whose network is denied.
    pub net: Option<OwnedFd>,
    /// The mount namespace with the root's read-only binds (and overlays) in place.
    pub mnt: Option<OwnedFd>,
    /// A copy-on-write machine's overlays: each guest directory and an fd of its top
    /// directory in the mount namespace (what transfers read and write there).
    pub layers: Vec<(String, std::sync::Arc<OwnedFd>)>,
    /// An fd of the root overlay's top directory in the mount namespace, when the machine
    /// root is one (what transfers read and write as `/`).
    pub root: Option<std::sync::Arc<OwnedFd>>,
}

impl MachineNamespaces {
    /// What bwrap no longer has to do per command.
    pub fn shared(&self) -> crate::plan::Shared {
        crate::plan::Shared {
            net: self.net.is_some(),
            system: self.mnt.is_some(),
        }
    }

    /// `(fd, nstype)` pairs to `setns(2)` in the launcher, in order.
    pub fn joins(&self) -> Vec<(std::os::fd::RawFd, libc::c_int)> {
        use std::os::fd::AsRawFd;
        let mnt = self
            .mnt
            .iter()
            .map(|fd| (fd.as_raw_fd(), libc::CLONE_NEWNS));
        let net = self
            .net
            .iter()
            .map(|fd| (fd.as_raw_fd(), libc::CLONE_NEWNET));
        mnt.chain(net).collect()
    }
}
