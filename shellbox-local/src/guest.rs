//! Guest paths resolved as the guest sees them, for transfers.
//!
//! A local machine's files live in several host places: its private root, the host's system
//! directories bound read-only over it (`/usr`, `/lib`, ...), the private `/etc` with the
//! host's `/etc/alternatives` and `/etc/ssl/certs` bound over it, the spec's read-only
//! mounts, and the kernel's `/dev`, `/proc` and `/sys`. A transfer must see exactly what a
//! command in the machine sees, never what the host sees at the same path: Debian's
//! `/usr/lib/ssl/private` is a link to `/etc/ssl/private`, which on the host holds private
//! keys and in the machine (its private `/etc`) does not exist.
//!
//! So a guest path is resolved here the way the kernel resolves it inside the machine, one
//! component at a time from file descriptors:
//!
//! - each component is looked up with `fstatat`/`openat(O_NOFOLLOW)` in the directory fd
//!   reached so far; nothing is ever resolved by the host kernel across components;
//! - a symlink (in the root, in a mount or in a system directory alike) is read with
//!   `readlinkat` and its text is resolved in the *guest* namespace: an absolute target
//!   starts again at the guest `/` (the machine root's fd), `..` climbs the guest path
//!   (never above the guest `/`); at most 40 links per path (Linux's limit);
//! - when the canonical guest path reached is a mount point of the machine ([`GuestView`]:
//!   system directories, the private `/etc` and its binds, the spec's mounts, in bwrap's
//!   mount order), the walk continues in the host directory mounted there, opened by its
//!   host path exactly as bwrap binds it; `/dev`, `/proc` and `/sys` are kernel-provided
//!   and any transfer reaching them is [`Error::Unsupported`] (RULES 4);
//! - a command racing the walk (swapping a directory for a link) only changes which guest
//!   path is reached: the link is read and resolved in the guest namespace like any other,
//!   so the walk can never leave the machine's view.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::errno::Errno;
use nix::fcntl::{openat, readlinkat, AtFlags, OFlag, AT_FDCWD};
use nix::sys::stat::{fstat, fstatat, FileStat, Mode, SFlag};
use shellbox_core::Error;

use crate::plan::{self, HostDir, HostFacts, Layout};

/// The most symlinks one guest path resolution follows (Linux's `MAXSYMLINKS`).
pub const MAX_LINK_HOPS: u32 = 40;

/// How often a component is looked up again when a racing command swaps it between the
/// lookup and the open, before the transfer gives up.
const MAX_RACE_RETRIES: u32 = 64;

const DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

/// What backs a place in the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backing {
    /// The machine's private root: uploads may write here.
    Root,
    /// A read-only host path (a system directory, the private `/etc`, a mount); the text
    /// says which, for the upload refusal.
    ReadOnly(String),
    /// A copy-on-write layer (an overlaid system directory or `/etc`): uploads may write
    /// here, and what they write lands in the machine's upper layer.
    Layer,
}

/// What is mounted at a guest mount point.
#[derive(Debug, Clone)]
enum Source {
    /// A host path, opened by its path as bwrap binds it.
    Host(PathBuf),
    /// A copy-on-write layer's top directory, open in the machine's mount namespace (the
    /// overlay exists nowhere else).
    Layer(Arc<OwnedFd>),
    /// A kernel-provided directory.
    Kernel,
}

/// One mount point of the machine's guest namespace.
#[derive(Debug, Clone)]
struct GuestMount {
    guest: String,
    source: Source,
    backing: Backing,
}

/// The machine's mount table as transfers see it (see the module docs).
#[derive(Debug, Clone)]
pub struct GuestView {
    root: PathBuf,
    /// The root overlay's top directory in the machine's mount namespace, when the root
    /// is one (the host path `root` is then only its empty mount point).
    root_fd: Option<Arc<OwnedFd>>,
    /// Later entries are mounted over earlier ones (bwrap's order).
    mounts: Vec<GuestMount>,
}

use shellbox_core::validate::KERNEL_DIRS;

/// [`Error::Unsupported`] when `guest` is at or under `/dev`, `/proc` or `/sys` (core's
/// [`KERNEL_DIRS`]).
pub fn refuse_kernel_path(guest: &str) -> Result<(), Error> {
    match KERNEL_DIRS.iter().find(|d| plan::is_within(guest, d)) {
        Some(dir) => Err(Error::unsupported(format!(
            "{guest} is in the kernel-provided directory {dir}, which transfers cannot read or \
             write"
        ))),
        None => Ok(()),
    }
}

impl GuestView {
    /// The view of a machine with this layout on a host with these facts: the private
    /// root, then (bwrap's order) the system directories with the private `/etc` and its
    /// binds, the kernel directories, and the spec's mounts. A copy-on-write machine's
    /// overlaid directories are its `layers` (guest directory, fd of the overlay's top
    /// directory in the machine's mount namespace), with the host mounts nested in them
    /// read-only on top.
    pub fn new(layout: &Layout, facts: &HostFacts, layers: &[(String, Arc<OwnedFd>)]) -> Self {
        let mut mounts = Vec::new();
        let layer = |dir: &str| {
            layers
                .iter()
                .find(|(g, _)| g == dir)
                .map(|(g, fd)| GuestMount {
                    guest: g.clone(),
                    source: Source::Layer(fd.clone()),
                    backing: Backing::Layer,
                })
        };
        for dir in plan::SYSTEM_DIRS {
            let read_only = Backing::ReadOnly(format!("system directory {dir}"));
            if let Some(m) = layer(dir) {
                mounts.push(m);
                continue;
            }
            if dir == "/etc" {
                mounts.push(GuestMount {
                    guest: dir.to_string(),
                    source: Source::Host(layout.etc.clone()),
                    backing: read_only.clone(),
                });
                for bind in &layout.etc_binds {
                    mounts.push(GuestMount {
                        guest: bind.to_string_lossy().into_owned(),
                        source: Source::Host(bind.clone()),
                        backing: read_only.clone(),
                    });
                }
                continue;
            }
            if dir == "/sys" {
                continue;
            }
            let kind = facts.system_dirs.iter().find(|(d, _)| d == dir);
            if let Some((_, HostDir::Dir)) = kind {
                mounts.push(GuestMount {
                    guest: dir.to_string(),
                    source: Source::Host(PathBuf::from(dir)),
                    backing: read_only,
                });
            }
        }
        for nested in layout.layers.iter().flat_map(|l| &l.nested) {
            mounts.push(GuestMount {
                guest: nested.to_string_lossy().into_owned(),
                source: Source::Host(nested.clone()),
                backing: Backing::ReadOnly(format!("host mount {}", nested.display())),
            });
        }
        for dir in KERNEL_DIRS {
            mounts.push(GuestMount {
                guest: dir.to_string(),
                source: Source::Kernel,
                backing: Backing::ReadOnly(format!("kernel-provided directory {dir}")),
            });
        }
        for m in &layout.mounts {
            mounts.push(GuestMount {
                guest: m.guest.clone(),
                source: Source::Host(m.host.clone()),
                backing: Backing::ReadOnly(format!("mounted from {}", m.host.display())),
            });
        }
        Self {
            root: layout.root.clone(),
            root_fd: None,
            mounts,
        }
    }

    /// The same view with the root read and written through `fd` (the root overlay's top
    /// directory, see [`MachineNamespaces::root`](crate::ns::MachineNamespaces)).
    pub(crate) fn with_root_fd(mut self, fd: Option<Arc<OwnedFd>>) -> Self {
        self.root_fd = fd;
        self
    }

    fn mount_at(&self, guest: &str) -> Option<&GuestMount> {
        self.mounts.iter().rev().find(|m| m.guest == guest)
    }

    /// When the canonical guest path `guest` is a mount point, what is mounted there, open
    /// (a kernel-provided directory is [`Error::Unsupported`]).
    pub fn mount_object(&self, guest: &str) -> Option<Result<Object, Error>> {
        let m = self.mount_at(guest)?;
        Some(match &m.source {
            Source::Host(host) => open_host(host, guest),
            Source::Layer(fd) => openat(fd, ".", DIR_FLAGS, Mode::empty())
                .map(Object::Dir)
                .map_err(|e| io_err("open", guest, e)),
            Source::Kernel => refuse_kernel_path(guest).map(|()| Object::Other),
        })
    }

    /// What backs the canonical guest path `guest` (no symlinks in it): the innermost
    /// mount it lies in, else the root.
    pub fn backing_of(&self, guest: &str) -> Backing {
        self.mounts
            .iter()
            .rev()
            .filter(|m| plan::is_within(guest, &m.guest))
            .max_by_key(|m| m.guest.len())
            .map_or(Backing::Root, |m| m.backing.clone())
    }

    /// [`Error::Unsupported`] when an upload may not write the canonical guest path
    /// `guest`: it lies in a system directory, a mount or a kernel-provided directory.
    pub fn check_writable(&self, guest: &str) -> Result<(), Error> {
        refuse_kernel_path(guest)?;
        match self.backing_of(guest) {
            Backing::Root | Backing::Layer => Ok(()),
            Backing::ReadOnly(why) => Err(Error::unsupported(format!(
                "cannot upload to {guest}: read-only host path ({why})"
            ))),
        }
    }

    /// [`check_writable`](Self::check_writable) for an entry of a directory upload, which
    /// is written through its parent, and how: [`Entry::LayerTop`] when a copy-on-write
    /// layer's top is mounted there (say `/usr` in an upload to `/`: its contents go into
    /// the layer, since writing them through the parent would land under the mount);
    /// [`Error::Unsupported`] for any other mount point.
    pub(crate) fn check_entry(&self, guest: &str) -> Result<crate::fsops::Entry, Error> {
        self.check_writable(guest)?;
        match self.mount_at(guest) {
            None => Ok(crate::fsops::Entry::Plain),
            Some(GuestMount {
                source: Source::Layer(_),
                ..
            }) => Ok(crate::fsops::Entry::LayerTop),
            Some(_) => Err(Error::unsupported(format!(
                "cannot upload {guest} as part of a directory upload to its parent: it is a \
                 mount point of the machine; upload to {guest} itself"
            ))),
        }
    }

    /// Opens the machine root.
    ///
    /// # Errors
    /// [`Error::Io`] when it cannot be opened (a closed machine's root is gone).
    pub fn open_root(&self) -> Result<OwnedFd, Error> {
        if let Some(fd) = &self.root_fd {
            return openat(fd, ".", DIR_FLAGS, Mode::empty())
                .map_err(|e| io_err("open machine root", "/", e));
        }
        openat(
            AT_FDCWD,
            &self.root,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io_err("open machine root", &self.root.display().to_string(), e))
    }
}

fn io_err(op: &str, path: &str, e: Errno) -> Error {
    Error::io(format!("{op} {path}"), std::io::Error::from(e))
}

/// The file type bits of a stat.
pub fn file_type(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits())
}

/// A directory reached by a walk.
#[derive(Debug)]
pub struct Level {
    /// The open directory.
    pub fd: OwnedFd,
    /// Its canonical guest path.
    pub guest: String,
}

/// What a guest path names.
#[derive(Debug)]
pub enum Object {
    /// A directory, open.
    Dir(OwnedFd),
    /// A regular file, open for reading (`O_NONBLOCK`, checked regular after the open).
    File(OwnedFd, FileStat),
    /// Anything else there (FIFO, socket, device; a symlink only when not followed).
    Other,
}

/// The outcome of [`resolve`].
#[derive(Debug)]
pub enum Resolved {
    /// The path exists.
    Found {
        /// The directory holding it (`None` for `/` and mount points, which have no
        /// parent a transfer may write in).
        parent: Option<Level>,
        /// Its name in `parent`.
        name: OsString,
        /// Its canonical guest path.
        guest: String,
        /// What it is.
        object: Object,
    },
    /// It does not exist: `rest` (the first missing component, then what followed it) is
    /// missing below the directory `parent`.
    Missing {
        /// The deepest existing directory on the way.
        parent: Level,
        /// The missing components, in order (no `.` or `..`).
        rest: Vec<String>,
    },
}

/// Joins a canonical guest path and one component.
pub fn guest_join(parent: &str, name: &str) -> String {
    if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

fn open_host(host: &Path, guest: &str) -> Result<Object, Error> {
    let fd = openat(
        AT_FDCWD,
        host,
        OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        Errno::ENOENT => Error::not_found(guest),
        e => io_err("open", guest, e),
    })?;
    let st = fstat(&fd).map_err(|e| io_err("stat", guest, e))?;
    Ok(match file_type(&st) {
        SFlag::S_IFDIR => Object::Dir(fd),
        SFlag::S_IFREG => Object::File(fd, st),
        _ => Object::Other,
    })
}

/// Opens `name` in `dir` without following a symlink there: a directory, a regular file
/// (non-blocking, checked after the open) or what else it is; `Ok(None)` when it changed
/// into a symlink or vanished since it was looked up (the caller looks again).
pub fn open_child(
    dir: &OwnedFd,
    name: &OsStr,
    st: &FileStat,
    guest: &str,
) -> Result<Option<Object>, Error> {
    match file_type(st) {
        SFlag::S_IFDIR => match openat(dir, name, DIR_FLAGS, Mode::empty()) {
            Ok(fd) => Ok(Some(Object::Dir(fd))),
            Err(Errno::ELOOP | Errno::ENOTDIR | Errno::ENOENT) => Ok(None),
            Err(e) => Err(io_err("open directory", guest, e)),
        },
        SFlag::S_IFREG => {
            let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
            match openat(dir, name, flags, Mode::empty()) {
                Ok(fd) => {
                    let st = fstat(&fd).map_err(|e| io_err("stat", guest, e))?;
                    Ok(Some(match file_type(&st) {
                        SFlag::S_IFREG => Object::File(fd, st),
                        _ => Object::Other,
                    }))
                }
                Err(Errno::ELOOP | Errno::ENOENT) => Ok(None),
                Err(e) => Err(io_err("open", guest, e)),
            }
        }
        _ => Ok(Some(Object::Other)),
    }
}

/// Resolves the validated guest path `path` in the machine's view (see the module docs).
/// A symlink as the last component is followed when `follow_last`.
///
/// # Errors
/// [`Error::Unsupported`] when the walk reaches `/dev`, `/proc` or `/sys`;
/// [`Error::Transfer`] for more than [`MAX_LINK_HOPS`] links, a component that is not a
/// directory, or a component a command keeps swapping; [`Error::NotFound`] (naming `path`)
/// when a link leads through a missing directory and `..`; [`Error::Io`].
pub fn resolve(view: &GuestView, path: &str, follow_last: bool) -> Result<Resolved, Error> {
    let mut queue: VecDeque<String> = shellbox_core::validate::guest_components(path)
        .map(str::to_string)
        .collect();
    let mut levels = vec![Level {
        fd: view.open_root()?,
        guest: "/".to_string(),
    }];
    let mut hops = 0u32;
    let mut retries = 0u32;
    while let Some(comp) = queue.pop_front() {
        let is_last = queue.is_empty();
        if comp == "." || comp.is_empty() {
            continue;
        }
        if comp == ".." {
            if levels.len() > 1 {
                levels.pop();
            }
            continue;
        }
        let parent = levels.last().expect("the root level stays");
        let guest = guest_join(&parent.guest, &comp);
        if let Some(object) = view.mount_object(&guest) {
            match object? {
                Object::Dir(fd) if !is_last => levels.push(Level { fd, guest }),
                object if is_last => {
                    return Ok(Resolved::Found {
                        parent: None,
                        name: OsString::from(&comp),
                        guest,
                        object,
                    })
                }
                _ => return Err(Error::transfer(guest, "Not a directory")),
            }
            continue;
        }
        let name = OsStr::new(&comp);
        let st = match fstatat(&parent.fd, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::ENOENT) => {
                let mut rest = vec![comp];
                rest.extend(queue);
                if rest.iter().any(|c| c == "..") {
                    return Err(Error::not_found(path));
                }
                rest.retain(|c| c != "." && !c.is_empty());
                let parent = levels.pop().expect("the root level stays");
                return Ok(Resolved::Missing { parent, rest });
            }
            Err(e) => return Err(io_err("stat", &guest, e)),
        };
        if file_type(&st) == SFlag::S_IFLNK && (follow_last || !is_last) {
            hops += 1;
            if hops > MAX_LINK_HOPS {
                return Err(Error::transfer(path, "too many levels of symbolic links"));
            }
            let text = readlinkat(&parent.fd, name).map_err(|e| io_err("readlink", &guest, e))?;
            let text = text.as_bytes();
            if text.first() == Some(&b'/') {
                levels.truncate(1);
            }
            for c in text.split(|b| *b == b'/').rev() {
                queue.push_front(String::from_utf8_lossy(c).into_owned());
            }
            continue;
        }
        if is_last {
            let object = if file_type(&st) == SFlag::S_IFLNK {
                Some(Object::Other)
            } else {
                open_child(&parent.fd, name, &st, &guest)?
            };
            let Some(object) = object else {
                retries += 1;
                if retries > MAX_RACE_RETRIES {
                    return Err(Error::transfer(
                        guest,
                        "it keeps changing while it is opened",
                    ));
                }
                queue.push_front(comp);
                continue;
            };
            let parent = levels.pop().expect("the root level stays");
            return Ok(Resolved::Found {
                parent: Some(parent),
                name: OsString::from(comp),
                guest,
                object,
            });
        }
        if file_type(&st) != SFlag::S_IFDIR {
            return Err(Error::transfer(guest, "Not a directory"));
        }
        match open_child(&parent.fd, name, &st, &guest)? {
            Some(Object::Dir(fd)) => levels.push(Level { fd, guest }),
            _ => {
                retries += 1;
                if retries > MAX_RACE_RETRIES {
                    return Err(Error::transfer(
                        guest,
                        "it keeps changing while it is opened",
                    ));
                }
                queue.push_front(comp);
            }
        }
    }
    // The path ended on a directory already open (`/`, or a link text ending in `.`/`..`).
    let level = levels.pop().expect("the root level stays");
    let name = Path::new(&level.guest)
        .file_name()
        .map(OsStr::to_os_string)
        .unwrap_or_default();
    Ok(Resolved::Found {
        parent: None,
        name,
        guest: level.guest,
        object: Object::Dir(level.fd),
    })
}
