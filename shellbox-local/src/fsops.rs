//! File transfers between the host and a machine, fd to fd.
//!
//! Guest paths are resolved as the machine sees them by [`crate::guest`] (symlinks followed
//! in the guest namespace, through the machine's mounts; never by the host kernel across
//! components), so neither a planted link (`/workspace/escape -> /etc`) nor a racing command
//! can make a transfer touch a host file the machine cannot see. Trees are walked fd to fd
//! (`openat(O_NOFOLLOW)`, `mkdirat`, `symlinkat`): links inside a tree are copied as links.
//! Downloads are written to the host by core's shared
//! [`StagedDownload`](shellbox_core::transfer::StagedDownload); uploads are staged inside
//! the machine and moved into place, all or nothing.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{openat, readlinkat, renameat, renameat2, OFlag, RenameFlags, AT_FDCWD};
use nix::sys::stat::{fchmod, fstatat, futimens, mkdirat, FileStat, Mode, SFlag};
use nix::sys::time::TimeSpec;
use nix::unistd::{symlinkat, unlinkat, UnlinkatFlags};
use shellbox_core::archive::{TreeEntry, TreeWriter, SPECIAL_FILE_REFUSAL};
use shellbox_core::transfer::{DownloadKind, StagedDownload};
use shellbox_core::Error;

use crate::guest::{guest_join, open_child, resolve, GuestView, Object, Resolved};

/// Called with the guest path of every entry an upload is about to write; an error stops
/// the upload (read-only targets).
pub(crate) type GuestCheck<'a> = &'a dyn Fn(&str) -> Result<Entry, Error>;

/// What a directory upload does with one entry (see [`GuestView::check_entry`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry {
    /// Written through its parent.
    Plain,
    /// A copy-on-write layer's top mounted there: its contents are merged into the layer
    /// on their own (written through the parent, they would land under the mount).
    LayerTop,
}

/// A directory upload's entry that lands in a layer's top: its guest path and its source
/// directory, open.
struct Deferred {
    guest: String,
    src: OwnedFd,
}

const DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

fn io_err(op: &str, path: &str, e: Errno) -> Error {
    Error::io(format!("{op} {path}"), std::io::Error::from(e))
}

fn symlink_refusal(path: &str) -> Error {
    Error::transfer(
        path,
        "it is or passes through a symlink; transfers never follow symlinks inside a machine",
    )
}

fn file_type(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits())
}

/// The permission bits a copy gets: the source's, without setuid and setgid, so neither a
/// command (through a download) nor an upload can hand anyone a set-id file.
fn mode_of(st: &FileStat) -> Mode {
    Mode::from_bits_truncate(st.st_mode & 0o1777)
}

/// Deepest directory nesting a transfer copies; deeper trees are refused with an error
/// rather than exhausting the thread's stack or the process's descriptors (a command can
/// nest directories without bound).
pub const MAX_TREE_DEPTH: usize = 256;

fn child_guest(parent: &str, name: &OsStr) -> String {
    let name = name.to_string_lossy();
    if parent.ends_with('/') {
        format!("{parent}{name}")
    } else {
        format!("{parent}/{name}")
    }
}

fn set_times(fd: impl AsFd, st: &FileStat, path: &str) -> Result<(), Error> {
    let atime = TimeSpec::new(st.st_atime, st.st_atime_nsec);
    let mtime = TimeSpec::new(st.st_mtime, st.st_mtime_nsec);
    futimens(fd, &atime, &mtime).map_err(|e| io_err("set times of", path, e))
}

/// Opens a host directory (following a symlink at `path` itself, as a caller's own path).
fn open_host_dir(path: &Path) -> Result<OwnedFd, Error> {
    openat(
        AT_FDCWD,
        path,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io_err("open directory", &path.display().to_string(), e))
}

/// Opens (and with `create`, makes, mode 0755) the directory `name` in `dir` without
/// following a symlink. `guest` is the resulting path, for errors.
fn step(dir: &OwnedFd, name: &OsStr, create: bool, guest: &str) -> Result<OwnedFd, Error> {
    let mut made = false;
    loop {
        match openat(dir, name, DIR_FLAGS, Mode::empty()) {
            Ok(fd) => return Ok(fd),
            Err(Errno::ENOENT) if create && !made => {
                match mkdirat(dir, name, Mode::from_bits_truncate(0o755)) {
                    Ok(()) | Err(Errno::EEXIST) => made = true,
                    Err(e) => return Err(io_err("create directory", guest, e)),
                }
            }
            Err(Errno::ENOENT) => return Err(Error::not_found(guest)),
            Err(Errno::ELOOP) | Err(Errno::ENOTDIR) => {
                return Err(
                    match fstatat(dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
                        Ok(st) if file_type(&st) == SFlag::S_IFLNK => symlink_refusal(guest),
                        _ => Error::transfer(guest, "a path component is not a directory"),
                    },
                )
            }
            Err(e) => return Err(io_err("open directory", guest, e)),
        }
    }
}

fn read_names(dir: &OwnedFd, path: &str) -> Result<Vec<OsString>, Error> {
    let mut d = nix::dir::Dir::openat(dir, ".", DIR_FLAGS, Mode::empty())
        .map_err(|e| io_err("read directory", path, e))?;
    let mut names = Vec::new();
    for entry in d.iter() {
        let entry = entry.map_err(|e| io_err("read directory", path, e))?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            names.push(OsStr::from_bytes(name).to_os_string());
        }
    }
    Ok(names)
}

/// Writes the regular file `src` (already open) as `name` in `dst_dir`, replacing a file
/// there; a symlink there is refused (never written through), as is a directory. The
/// source's mode and times are kept.
fn write_file(
    src: OwnedFd,
    st: &FileStat,
    dst_dir: &OwnedFd,
    name: &OsStr,
    path: &str,
) -> Result<(), Error> {
    let flags =
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_TRUNC | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let dst = match openat(dst_dir, name, flags, create_mode(st)) {
        Ok(fd) => fd,
        Err(Errno::ELOOP) => return Err(symlink_refusal(path)),
        Err(Errno::EISDIR) => {
            return Err(Error::transfer(path, "a directory is in the way of a file"))
        }
        Err(e) => return Err(io_err("create file", path, e)),
    };
    let mut src = File::from(src);
    let mut out = File::from(dst);
    copy_data(&mut src, &mut out, st).map_err(|e| Error::io(format!("copy file to {path}"), e))?;
    finish_file(&out, st, path)
}

/// The mode a copy is created with: the final permission bits without the special ones
/// (the umask may take some away; [`finish_file`] puts them back).
fn create_mode(st: &FileStat) -> Mode {
    Mode::from_bits_truncate(mode_of(st).bits() & 0o777)
}

/// Gives a copied file its source's mode (only when creation, the umask or an existing
/// file left it different: one inode update less per file) and times.
fn finish_file(out: &File, st: &FileStat, path: &str) -> Result<(), Error> {
    let want = mode_of(st);
    let have = nix::sys::stat::fstat(out).map_err(|e| io_err("stat", path, e))?;
    if have.st_mode & 0o7777 != want.bits() {
        fchmod(out, want).map_err(|e| io_err("chmod", path, e))?;
    }
    set_times(out, st, path)
}

/// Files up to this size are copied with one read and one write.
const SMALL_FILE_BYTES: i64 = 64 * 1024;

/// Copies the data of `src` (of size `st.st_size` when it was stat'ed) to `out`: a small
/// file in one read and one write (its size is known, so the usual size probes and the
/// extra call that finds the end are skipped), a larger one, or one that grew since, with
/// `std::io::copy` (`copy_file_range(2)` where possible).
fn copy_data(src: &mut File, out: &mut File, st: &FileStat) -> std::io::Result<()> {
    use std::io::{Read, Write};
    if !(0..=SMALL_FILE_BYTES).contains(&st.st_size) {
        return std::io::copy(src, out).map(|_| ());
    }
    let size = st.st_size as usize;
    let mut buf = vec![0u8; size + 1];
    let mut n = 0;
    loop {
        match src.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(r) => n += r,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        if n == buf.len() {
            // It grew since it was stat'ed: copy the rest too.
            out.write_all(&buf[..n])?;
            return std::io::copy(src, out).map(|_| ());
        }
        if n == size {
            break;
        }
    }
    out.write_all(&buf[..n])
}

/// Reads a file of at most [`SMALL_FILE_BYTES`] by its stat `st` into `buf` with one
/// read (its size is known, so no call is spent finding its end) and returns whether all
/// of it is there: false for a larger file (nothing read) or one that grew since it was
/// stat'ed (`buf` then holds its first bytes, the rest is still to be read from `file`).
fn read_small(file: &mut File, st: &FileStat, buf: &mut Vec<u8>) -> std::io::Result<bool> {
    use std::io::Read;
    if !(0..=SMALL_FILE_BYTES).contains(&st.st_size) {
        return Ok(false);
    }
    let size = st.st_size as usize;
    buf.resize(size + 1, 0);
    let mut n = 0;
    while n < size {
        match file.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(r) => n += r,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    buf.truncate(n);
    Ok(n <= size)
}

/// Makes (or opens an existing) directory `name` in `dst_dir` without following links.
fn ensure_dir(dst_dir: &OwnedFd, name: &OsStr, path: &str) -> Result<OwnedFd, Error> {
    step(dst_dir, name, true, path)
}

/// Copies the contents of directory `src` into directory `dst`, entry by entry, with
/// `check(guest path)` called before each entry is written.
fn copy_tree(
    src: &OwnedFd,
    dst: &OwnedFd,
    path: &str,
    check: GuestCheck,
    deferred: &mut Vec<Deferred>,
) -> Result<(), Error> {
    copy_tree_at(src, dst, path, check, deferred, 0)
}

fn copy_tree_at(
    src: &OwnedFd,
    dst: &OwnedFd,
    path: &str,
    check: GuestCheck,
    deferred: &mut Vec<Deferred>,
    depth: usize,
) -> Result<(), Error> {
    if depth >= MAX_TREE_DEPTH {
        return Err(Error::transfer(
            path,
            format!("directories nest deeper than {MAX_TREE_DEPTH} levels"),
        ));
    }
    for name in read_names(src, path)? {
        let child = child_guest(path, &name);
        let st = match fstatat(
            src,
            name.as_os_str(),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        ) {
            Ok(st) => st,
            Err(Errno::ENOENT) => continue, // removed while copying
            Err(e) => return Err(io_err("stat", &child, e)),
        };
        let entry = check(&child)?;
        let kind = file_type(&st);
        if entry == Entry::LayerTop {
            if kind != SFlag::S_IFDIR {
                return Err(Error::transfer(
                    &child,
                    "a directory is in the way of a file",
                ));
            }
            deferred.push(Deferred {
                guest: child.clone(),
                src: step(src, &name, false, &child)?,
            });
            continue;
        }
        if kind == SFlag::S_IFDIR {
            let s = step(src, &name, false, &child)?;
            let d = ensure_dir(dst, &name, &child)?;
            copy_tree_at(&s, &d, &child, check, deferred, depth + 1)?;
            fchmod(&d, mode_of(&st)).map_err(|e| io_err("chmod", &child, e))?;
            set_times(&d, &st, &child)?;
        } else if kind == SFlag::S_IFREG {
            let s = openat(
                src,
                name.as_os_str(),
                OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| io_err("open", &child, e))?;
            write_file(s, &st, dst, &name, &child)?;
        } else if kind == SFlag::S_IFLNK {
            let target =
                readlinkat(src, name.as_os_str()).map_err(|e| io_err("readlink", &child, e))?;
            match unlinkat(dst, name.as_os_str(), UnlinkatFlags::NoRemoveDir) {
                Ok(()) | Err(Errno::ENOENT) => {}
                Err(Errno::EISDIR) => {
                    return Err(Error::transfer(
                        &child,
                        "a directory is in the way of a symlink",
                    ))
                }
                Err(e) => return Err(io_err("replace", &child, e)),
            }
            symlinkat(target.as_os_str(), dst, name.as_os_str())
                .map_err(|e| io_err("symlink", &child, e))?;
        } else {
            return Err(Error::transfer(
                &child,
                "only regular files, directories and symlinks can be transferred",
            ));
        }
    }
    Ok(())
}

fn no_check(_: &str) -> Result<Entry, Error> {
    Ok(Entry::Plain)
}

/// Copies a host path for the machine root's `/etc`: a symlink as the same symlink, a file
/// with its mode and times, a directory recursively (inner links kept as links).
///
/// # Errors
/// [`Error::Io`] or [`Error::Transfer`] when a step fails.
pub fn copy_host_path(src: &Path, dst: &Path) -> Result<(), Error> {
    let label = src.display().to_string();
    let meta = std::fs::symlink_metadata(src).map_err(|e| Error::io(format!("stat {label}"), e))?;
    if meta.file_type().is_symlink() {
        let target =
            std::fs::read_link(src).map_err(|e| Error::io(format!("readlink {label}"), e))?;
        std::os::unix::fs::symlink(target, dst)
            .map_err(|e| Error::io(format!("symlink {}", dst.display()), e))
    } else {
        copy_host_tree(src, dst, &label)
    }
}

/// The name prefix of an upload's staging directory inside the machine.
pub const UPLOAD_STAGING_PREFIX: &str = ".shellbox-upload-";

/// An upload's staging directory, made in a directory of the machine (mode 0700) and
/// removed with everything in it when dropped, so a failed or cancelled upload leaves the
/// machine as it was.
struct Stage {
    parent: OwnedFd,
    name: OsString,
    fd: OwnedFd,
}

impl Stage {
    fn new(parent: &OwnedFd, guest: &str) -> Result<Self, Error> {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let parent = parent
            .try_clone()
            .map_err(|e| Error::io("dup directory fd", e))?;
        for _ in 0..16 {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default();
            let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let name = OsString::from(format!(
                "{UPLOAD_STAGING_PREFIX}{:x}-{nanos:x}-{n:x}",
                std::process::id()
            ));
            match mkdirat(&parent, name.as_os_str(), Mode::from_bits_truncate(0o700)) {
                Ok(()) => {
                    let fd = step(&parent, &name, false, guest)?;
                    return Ok(Self { parent, name, fd });
                }
                Err(Errno::EEXIST) => continue,
                Err(e) => return Err(io_err("create a staging directory in", guest, e)),
            }
        }
        Err(Error::transfer(guest, "no free staging directory name"))
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        if let Err(e) = remove_tree_at(&self.parent, &self.name, 0) {
            tracing::warn!(name = ?self.name, "could not remove an upload's staging directory: {e}");
        }
    }
}

/// Removes `name` in `dir` and, for a directory, everything in it, never following a
/// symlink.
fn remove_tree_at(dir: &OwnedFd, name: &OsStr, depth: usize) -> Result<(), Errno> {
    match unlinkat(dir, name, UnlinkatFlags::NoRemoveDir) {
        Ok(()) | Err(Errno::ENOENT) => return Ok(()),
        Err(Errno::EISDIR) | Err(Errno::EPERM) => {}
        Err(e) => return Err(e),
    }
    if depth > MAX_TREE_DEPTH + 8 {
        return Err(Errno::ELOOP);
    }
    let sub = openat(dir, name, DIR_FLAGS, Mode::empty())?;
    let _ = fchmod(&sub, Mode::from_bits_truncate(0o700));
    let names = read_names(&sub, "").map_err(|_| Errno::EIO)?;
    for n in names {
        remove_tree_at(&sub, &n, depth + 1)?;
    }
    match unlinkat(dir, name, UnlinkatFlags::RemoveDir) {
        Ok(()) | Err(Errno::ENOENT) => Ok(()),
        Err(e) => Err(e),
    }
}

fn kind_name(kind: SFlag) -> &'static str {
    match kind {
        SFlag::S_IFDIR => "a directory",
        SFlag::S_IFLNK => "a symlink",
        SFlag::S_IFREG => "a file",
        _ => "a special file",
    }
}

/// Moves the entries of the staged directory `src` into the machine directory `dst`
/// (directories into directories; anything else replaces a non-directory there with
/// `renameat`, a symlink replaced, never followed). With `dry_run`, only checks that no
/// entry meets a conflict: a directory where a non-directory (or a symlink) stands, or a
/// non-directory where a directory stands.
fn merge_staged(
    src: &OwnedFd,
    dst: &OwnedFd,
    guest: &str,
    dry_run: bool,
    depth: usize,
) -> Result<(), Error> {
    if depth >= MAX_TREE_DEPTH + 8 {
        return Err(Error::transfer(guest, "directories nest too deep"));
    }
    for name in read_names(src, guest)? {
        let child = child_guest(guest, &name);
        let s = fstatat(
            src,
            name.as_os_str(),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(|e| io_err("stat", &child, e))?;
        let d = match fstatat(
            dst,
            name.as_os_str(),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        ) {
            Ok(st) => Some(file_type(&st)),
            Err(Errno::ENOENT) => None,
            Err(e) => return Err(io_err("stat", &child, e)),
        };
        let s_kind = file_type(&s);
        match (s_kind == SFlag::S_IFDIR, d) {
            (true, Some(SFlag::S_IFDIR)) => {
                let from = step(src, &name, false, &child)?;
                let to = step(dst, &name, false, &child)?;
                merge_staged(&from, &to, &child, dry_run, depth + 1)?;
                if !dry_run {
                    fchmod(&to, mode_of(&s)).map_err(|e| io_err("chmod", &child, e))?;
                    set_times(&to, &s, &child)?;
                }
            }
            (true, Some(other)) | (false, Some(other @ SFlag::S_IFDIR)) => {
                return Err(Error::transfer(
                    &child,
                    format!(
                        "{} is in the way of {}",
                        kind_name(other),
                        kind_name(s_kind)
                    ),
                ))
            }
            _ if dry_run => {}
            _ => renameat(src, name.as_os_str(), dst, name.as_os_str())
                .map_err(|e| io_err("move into place", &child, e))?,
        }
    }
    Ok(())
}

/// Uploads host `source` to guest `target`, resolved as the machine sees it (see
/// [`crate::guest`]): symlinks on the way are followed in the guest namespace, so they can
/// never lead out of the machine.
///
/// A file becomes the file `target` (missing parents made, mode 0755); a directory is merged
/// into `target`, which takes the source directory's mode. A symlink as `source` itself is
/// followed (it is the caller's path: the upload contributes its target); links inside a
/// directory source are copied as links.
///
/// All or nothing: the upload is copied into a staging directory `.shellbox-upload-*`
/// inside the machine (in the target's parent, or in the target directory for a merge),
/// checked against what is there, then moved into place with `rename(2)` (a new target, or
/// its first missing parent, in one step; a merge entry by entry, after checking that no
/// entry meets a conflict). On any error the staging directory is removed and the machine
/// is as it was (a command racing the final moves can still see part of a merge).
///
/// # Errors
/// [`Error::NotFound`] for a missing source; [`Error::Unsupported`] when any written path
/// lies in a system directory (unless it is a copy-on-write layer, written through the
/// overlay: an entry of a directory upload that is a layer's top, say `usr/` in an upload
/// to `/`, is staged and merged into that layer, with the rest), a mount or `/dev`,
/// `/proc`, `/sys`; [`Error::Transfer`] when
/// a directory is in the way of a file or the reverse, or a source entry is a special file
/// (FIFO, socket, device); [`Error::Io`].
pub fn upload(view: &GuestView, source: &Path, target: &str) -> Result<(), Error> {
    crate::guest::refuse_kernel_path(target)?;
    let meta = match std::fs::metadata(source) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::not_found(source.display().to_string()))
        }
        Err(e) => return Err(Error::io(format!("stat {}", source.display()), e)),
    };
    let label = source.display().to_string();
    let is_dir = meta.is_dir();
    if !is_dir && !meta.is_file() {
        return Err(Error::transfer(label, SPECIAL_FILE_REFUSAL));
    }
    let src = if is_dir {
        open_host_dir(source)?
    } else {
        openat(
            AT_FDCWD,
            source,
            OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io_err("open", &label, e))?
    };
    let src_st = nix::sys::stat::fstat(&src).map_err(|e| io_err("stat", &label, e))?;
    if file_type(&src_st)
        != if is_dir {
            SFlag::S_IFDIR
        } else {
            SFlag::S_IFREG
        }
    {
        return Err(Error::transfer(label, SPECIAL_FILE_REFUSAL));
    }
    let check = |p: &str| view.check_entry(p);
    match resolve(view, target, true)? {
        Resolved::Missing { parent, rest } => {
            let mut guest = parent.guest.clone();
            for c in &rest {
                guest = guest_join(&guest, c);
                view.check_writable(&guest)?;
            }
            let stage = Stage::new(&parent.fd, &parent.guest)?;
            let mut cur = stage.fd.try_clone().map_err(|e| Error::io("dup fd", e))?;
            let (last, chain) = rest.split_last().expect("a missing path has a component");
            for c in chain {
                cur = step(&cur, OsStr::new(c), true, &guest)?;
            }
            if is_dir {
                let d = step(&cur, OsStr::new(last), true, &guest)?;
                // A missing directory holds no mount point: nothing is deferred.
                copy_tree(&src, &d, &guest, &check, &mut Vec::new())?;
                fchmod(&d, mode_of(&src_st)).map_err(|e| io_err("chmod", &guest, e))?;
                set_times(&d, &src_st, &guest)?;
            } else {
                write_file(src, &src_st, &cur, OsStr::new(last), &guest)?;
            }
            renameat2(
                &stage.fd,
                rest[0].as_str(),
                &parent.fd,
                rest[0].as_str(),
                RenameFlags::RENAME_NOREPLACE,
            )
            .map_err(|e| io_err("move into place", &guest, e))
        }
        Resolved::Found {
            parent,
            name,
            guest,
            object,
        } => {
            view.check_writable(&guest)?;
            match object {
                Object::Dir(dir) => {
                    if !is_dir {
                        return Err(Error::transfer(
                            guest,
                            "a directory is in the way of a file",
                        ));
                    }
                    // Everything is staged first (the target and each copy-on-write
                    // layer top the upload reaches, say /usr in an upload to /), every
                    // stage checked for conflicts, and only then moved into place.
                    let mut deferred = Vec::new();
                    let stage = Stage::new(&dir, &guest)?;
                    copy_tree(&src, &stage.fd, &guest, &check, &mut deferred)?;
                    let mut stages = vec![(stage, dir, guest.clone(), src_st)];
                    while let Some(d) = deferred.pop() {
                        let top = match view.mount_object(&d.guest) {
                            Some(Ok(Object::Dir(top))) => top,
                            Some(Err(e)) => return Err(e),
                            _ => {
                                return Err(Error::transfer(
                                    &d.guest,
                                    "the mount point is not a directory",
                                ))
                            }
                        };
                        let st = nix::sys::stat::fstat(&d.src)
                            .map_err(|e| io_err("stat", &d.guest, e))?;
                        let stage = Stage::new(&top, &d.guest)?;
                        copy_tree(&d.src, &stage.fd, &d.guest, &check, &mut deferred)?;
                        stages.push((stage, top, d.guest, st));
                    }
                    for (stage, dir, guest, _) in &stages {
                        merge_staged(&stage.fd, dir, guest, true, 0)?;
                    }
                    for (stage, dir, guest, st) in &stages {
                        merge_staged(&stage.fd, dir, guest, false, 0)?;
                        fchmod(dir, mode_of(st)).map_err(|e| io_err("chmod", guest, e))?;
                    }
                    Ok(())
                }
                Object::File(..) | Object::Other => {
                    if is_dir {
                        return Err(Error::transfer(
                            guest,
                            "a file is in the way of a directory",
                        ));
                    }
                    let Some(parent) = parent else {
                        return Err(Error::transfer(guest, "cannot replace this path"));
                    };
                    let stage = Stage::new(&parent.fd, &parent.guest)?;
                    let item = OsStr::new("item");
                    write_file(src, &src_st, &stage.fd, item, &guest)?;
                    renameat(&stage.fd, item, &parent.fd, name.as_os_str())
                        .map_err(|e| io_err("move into place", &guest, e))
                }
            }
        }
    }
}

/// Downloads guest `source`, resolved as the machine sees it (see [`crate::guest`]), to the
/// host path `target` through core's [`StagedDownload`]: the one host-side writer every
/// backend uses (staged beside the target, every entry judged — no entry written through
/// a link, no special file — the target's last component replaced and never followed,
/// all or nothing). A symlink as `source` (or on its way) is followed in the guest
/// namespace; links inside a directory are copied as links, as stored (absolute ones too,
/// as tar does); mounts inside a downloaded directory are read as the machine shows them.
///
/// # Errors
/// [`Error::NotFound`] (naming `source`) when it does not exist in the machine;
/// [`Error::Unsupported`] for `/` (it holds the system directories) and paths at or under
/// `/dev`, `/proc`, `/sys`; [`Error::Transfer`] for a special file, a link on the target's
/// way that leads out of its directory or a tree nested deeper than [`MAX_TREE_DEPTH`];
/// [`Error::Io`].
pub fn download(view: &GuestView, source: &str, target: &Path) -> Result<(), Error> {
    crate::guest::refuse_kernel_path(source)?;
    let refuse_root = || {
        Error::unsupported(
            "downloading / would copy the machine's system directories; download a directory \
             inside it",
        )
    };
    if source == "/" {
        return Err(refuse_root());
    }
    let (guest, object) = match resolve(view, source, true)? {
        Resolved::Missing { .. } => return Err(Error::not_found(source)),
        Resolved::Found { guest, object, .. } => (guest, object),
    };
    if guest == "/" {
        return Err(refuse_root());
    }
    match object {
        Object::Dir(fd) => {
            let staged = StagedDownload::new(target, DownloadKind::Directory)?;
            let mut writer = staged.writer();
            let st = nix::sys::stat::fstat(&fd).map_err(|e| io_err("stat", &guest, e))?;
            writer.put(
                &guest,
                &[],
                TreeEntry::Directory {
                    mode: st.st_mode,
                    mtime: system_time(&st),
                },
            )?;
            let mut rel = Vec::new();
            pack_dir(view, &fd, &guest, &mut rel, &mut writer, 0)?;
            writer.finish()?;
            staged.commit()
        }
        Object::File(fd, st) => {
            let name = Path::new(&guest)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "download".into());
            let staged = StagedDownload::new(target, DownloadKind::File { name: &name })?;
            let mut writer = staged.writer();
            let mut file = File::from(fd);
            writer.put(
                &guest,
                &[],
                TreeEntry::File {
                    data: &mut file,
                    mode: st.st_mode,
                    mtime: system_time(&st),
                },
            )?;
            writer.finish()?;
            staged.commit()
        }
        Object::Other => Err(Error::transfer(source, SPECIAL_FILE_REFUSAL)),
    }
}

/// How long one [`download_file_by`] may take, from the source's resolution to the rename
/// into place: a read that stalls (a hung network mount bound into the machine) ends the
/// download with [`Error::TimedOut`] instead of holding it forever.
pub const DOWNLOAD_FILE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(600);

/// The chunk [`download_file_by`] reads and writes at a time (REFERENCE.md 3.2's 64 KiB).
const DOWNLOAD_FILE_CHUNK: usize = 64 * 1024;

/// How the caller of [`download_file_by`] stops it: `cancelled` is looked at between
/// chunks, and `staging` names the staging directory once it exists, so a caller that
/// gives up (a dropped future) removes it at once, while the copying thread is still
/// inside a chunk (its rename then fails).
#[derive(Default)]
pub(crate) struct DownloadCancel {
    pub(crate) cancelled: std::sync::atomic::AtomicBool,
    pub(crate) staging: std::sync::Mutex<Option<std::path::PathBuf>>,
}

impl DownloadCancel {
    /// Stops the download: no rename after this, and the staging directory is removed.
    pub(crate) fn cancel(&self) {
        self.cancelled
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let staging = self
            .staging
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(dir) = staging {
            let _ = shellbox_core::remove_tree(dir);
        }
    }

    fn is_cancelled(&self) -> bool {
        self.cancelled.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// The local backend's bounded single-file download (REFERENCE.md 3.2; the rules of core's
/// [`shellbox_core::download_file`]), done on the host from file descriptors: `source` is
/// resolved as the machine sees it ([`crate::guest`], links followed in the guest
/// namespace, copy-on-write layers through their fds in the machine's mount namespace) and
/// opened `O_NONBLOCK`, and what was opened is checked to be a regular file (`fstat`) before
/// a byte is read. No program of the machine runs, so a guest that replaced `cat`,
/// `readlink` or `sh` (in a copy-on-write layer, or first on `PATH`) cannot stall or feed
/// the download, and a guest swapping the path for a FIFO gets it refused, never opened
/// for a blocking read. The bytes go in [`DOWNLOAD_FILE_CHUNK`]s into `item` in a staging
/// directory beside `target` that is renamed over it; memory stays at one chunk.
/// Bounded by [`DOWNLOAD_FILE_DEADLINE`] (checked between chunks and before the rename).
///
/// # Errors
/// [`Error::NotFound`] when `source` does not exist in the machine; [`Error::Unsupported`]
/// (the message says "regular file") when it is not a regular file (a directory, a FIFO, a
/// device, a dangling link) or lies in or resolves into `/dev`, `/proc` or `/sys`, or when
/// what stands at `target` is neither a regular file nor a symlink;
/// [`Error::DownloadLimitExceeded`] when it holds more than `max_bytes` bytes (the old
/// target intact); [`Error::TimedOut`] past [`DOWNLOAD_FILE_DEADLINE`]; [`Error::Transfer`]
/// for a link on `target`'s way that core's `resolve_host_target` refuses, or a guest path
/// a command keeps swapping; [`Error::Io`] for the staging file. On every error the staging
/// directory is removed and `target` is as it was.
///
/// `deadline` is [`DOWNLOAD_FILE_DEADLINE`] for the machine's calls; `cancel` stops it.
pub(crate) fn download_file_by(
    view: &GuestView,
    source: &str,
    target: &Path,
    max_bytes: u64,
    deadline: std::time::Duration,
    cancel: &DownloadCancel,
) -> Result<(), Error> {
    use std::io::{Read, Write};
    let started = std::time::Instant::now();
    let not_regular = |what: &str| {
        Error::unsupported(format!(
            "{source} {what}; only a regular file can be downloaded with a byte limit"
        ))
    };
    if crate::guest::refuse_kernel_path(source).is_err() {
        return Err(not_regular(
            "is inside a kernel-provided directory (/proc, /sys, /dev)",
        ));
    }
    if target.file_name().is_none() {
        return Err(Error::invalid(format!(
            "download target {} has no file name",
            target.display()
        )));
    }
    let resolved = shellbox_core::transfer::resolve_host_target(target)?;
    let target = resolved.as_path();
    shellbox_core::refuse_special_download_target(target)?;
    let found = match resolve(view, source, true) {
        Ok(found) => found,
        Err(Error::Unsupported(_)) => {
            return Err(not_regular(
                "resolves into a kernel-provided directory (/proc, /sys, /dev) in the machine",
            ))
        }
        Err(e) => return Err(e),
    };
    let (fd, st) = match found {
        Resolved::Missing { .. } => {
            // A dangling link is there, but is no regular file.
            return match resolve(view, source, false) {
                Ok(Resolved::Found { .. }) => Err(not_regular("is a dangling link")),
                _ => Err(Error::not_found(source)),
            };
        }
        Resolved::Found { object, .. } => match object {
            Object::File(fd, st) => (fd, st),
            Object::Dir(_) => return Err(not_regular("is a directory")),
            Object::Other => return Err(not_regular("is not a regular file")),
        },
    };
    // `resolve` opened it O_NONBLOCK and checked the open fd is a regular file; once more,
    // on the fd this function reads.
    if file_type(&st) != SFlag::S_IFREG
        || nix::sys::stat::fstat(&fd)
            .map(|s| file_type(&s) != SFlag::S_IFREG)
            .unwrap_or(true)
    {
        return Err(not_regular("is not a regular file"));
    }
    let parent = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => std::env::current_dir().map_err(|e| Error::io("current directory", e))?,
    };
    let staging = shellbox_core::staging::StagingDir::create_in(&parent).map_err(|e| {
        Error::io(
            format!("create staging directory in {}", parent.display()),
            e,
        )
    })?;
    *cancel.staging.lock().unwrap_or_else(|e| e.into_inner()) = Some(staging.path().to_path_buf());
    let cancelled = || Error::backend("download_file", "cancelled");
    if cancel.is_cancelled() {
        return Err(cancelled());
    }
    let staged = staging.path().join("item");
    let mut out =
        File::create(&staged).map_err(|e| Error::io(format!("create {}", staged.display()), e))?;
    let mut src = File::from(fd);
    let mut buf = vec![0u8; DOWNLOAD_FILE_CHUNK];
    let mut written: u64 = 0;
    let timed_out = || Error::TimedOut {
        operation: format!("download_file {source}"),
        after: deadline,
    };
    loop {
        if started.elapsed() > deadline {
            return Err(timed_out());
        }
        if cancel.is_cancelled() {
            return Err(cancelled());
        }
        let n = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io(format!("read {source} in the machine"), e)),
        };
        written += n as u64;
        if written > max_bytes {
            return Err(Error::DownloadLimitExceeded(format!(
                "{source} holds more than {max_bytes} bytes"
            )));
        }
        out.write_all(&buf[..n])
            .map_err(|e| Error::io(format!("write {}", staged.display()), e))?;
    }
    shellbox_core::set_download_mode(&out, &staged, st.st_mode)?;
    out.sync_all()
        .map_err(|e| Error::io(format!("write {}", staged.display()), e))?;
    drop(out);
    if started.elapsed() > deadline {
        return Err(timed_out());
    }
    shellbox_core::refuse_special_download_target(target)?;
    // Holding the slot, so a cancel either comes before (and the staged file is gone) or
    // after the rename.
    let slot = cancel.staging.lock().unwrap_or_else(|e| e.into_inner());
    if cancel.is_cancelled() || slot.is_none() {
        return Err(cancelled());
    }
    std::fs::rename(&staged, target).map_err(|e| {
        Error::io(
            format!("rename {} to {}", staged.display(), target.display()),
            e,
        )
    })
}

fn system_time(st: &FileStat) -> Option<std::time::SystemTime> {
    let nanos = u32::try_from(st.st_mtime_nsec).ok()?;
    if st.st_mtime >= 0 {
        std::time::UNIX_EPOCH.checked_add(std::time::Duration::new(st.st_mtime as u64, nanos))
    } else {
        std::time::UNIX_EPOCH
            .checked_sub(std::time::Duration::from_secs(st.st_mtime.unsigned_abs()))?
            .checked_add(std::time::Duration::new(0, nanos))
    }
}

/// Writes the entries of the machine directory `dir` (canonical guest path `guest`) into
/// `writer` below `rel`; a mount point inside is read as the machine shows it.
fn pack_dir(
    view: &GuestView,
    dir: &OwnedFd,
    guest: &str,
    rel: &mut Vec<String>,
    writer: &mut TreeWriter,
    depth: usize,
) -> Result<(), Error> {
    if depth >= MAX_TREE_DEPTH {
        return Err(Error::transfer(
            guest,
            format!("directories nest deeper than {MAX_TREE_DEPTH} levels"),
        ));
    }
    let mut names = read_names(dir, guest)?;
    names.sort();
    for name in names {
        let child = child_guest(guest, &name);
        let Some(text) = name.to_str() else {
            return Err(Error::transfer(child, "file name is not UTF-8"));
        };
        rel.push(text.to_string());
        let object = match view.mount_object(&child) {
            Some(object) => Some(object?),
            None => match fstatat(
                dir,
                name.as_os_str(),
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            ) {
                Err(Errno::ENOENT) => None, // removed while downloading
                Err(e) => return Err(io_err("stat", &child, e)),
                Ok(st) if file_type(&st) == SFlag::S_IFLNK => {
                    let link = readlinkat(dir, name.as_os_str())
                        .map_err(|e| io_err("readlink", &child, e))?;
                    writer.put(
                        &child,
                        rel,
                        TreeEntry::Symlink {
                            target: link.as_bytes(),
                        },
                    )?;
                    None
                }
                Ok(st) => open_child(dir, &name, &st, &child)?,
            },
        };
        match object {
            None => {}
            Some(Object::Dir(fd)) => {
                let st = nix::sys::stat::fstat(&fd).map_err(|e| io_err("stat", &child, e))?;
                writer.put(
                    &child,
                    rel,
                    TreeEntry::Directory {
                        mode: st.st_mode,
                        mtime: system_time(&st),
                    },
                )?;
                pack_dir(view, &fd, &child, rel, writer, depth + 1)?;
            }
            Some(Object::File(fd, st)) => {
                let mut file = File::from(fd);
                // A small file is read here in one call (its size is known), so the
                // writer's copy does not need a second read to find its end.
                let mut small = Vec::new();
                let whole = read_small(&mut file, &st, &mut small)
                    .map_err(|e| Error::io(format!("read {child}"), e))?;
                let mut rest = std::io::Read::chain(small.as_slice(), &mut file);
                let mut head = small.as_slice();
                let data: &mut dyn std::io::Read = if whole { &mut head } else { &mut rest };
                writer.put(
                    &child,
                    rel,
                    TreeEntry::File {
                        data,
                        mode: st.st_mode,
                        mtime: system_time(&st),
                    },
                )?;
            }
            Some(Object::Other) => return Err(Error::transfer(child, SPECIAL_FILE_REFUSAL)),
        }
        rel.pop();
    }
    Ok(())
}

/// Copies a host path (a file or directory, followed if it is a link) to the host path
/// `target`, links inside a directory copied as links: the machine root's `/etc` copies.
fn copy_host_tree(source: &Path, target: &Path, guest: &str) -> Result<(), Error> {
    let meta = std::fs::metadata(source).map_err(|_| Error::not_found(guest))?;
    if meta.is_dir() {
        dir_to_host(open_host_dir(source)?, guest, target)
    } else if meta.is_file() {
        let fd = openat(
            AT_FDCWD,
            source,
            OFlag::O_RDONLY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io_err("open", guest, e))?;
        file_to_host(fd, guest, target)
    } else {
        Err(Error::transfer(
            guest,
            "only regular files and directories can be downloaded",
        ))
    }
}

fn host_parent(target: &Path) -> Result<(), Error> {
    if let Some(parent) = target.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| Error::io(format!("create directory {}", parent.display()), e))?;
    }
    Ok(())
}

fn file_to_host(src: OwnedFd, guest: &str, target: &Path) -> Result<(), Error> {
    host_parent(target)?;
    let st = nix::sys::stat::fstat(&src).map_err(|e| io_err("stat", guest, e))?;
    let out = openat(
        AT_FDCWD,
        target,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_TRUNC | OFlag::O_CLOEXEC,
        create_mode(&st),
    )
    .map_err(|e| io_err("create", &target.display().to_string(), e))?;
    let (mut src, mut out) = (File::from(src), File::from(out));
    copy_data(&mut src, &mut out, &st)
        .map_err(|e| Error::io(format!("copy {guest} to {}", target.display()), e))?;
    finish_file(&out, &st, &target.display().to_string())
}

fn dir_to_host(src: OwnedFd, guest: &str, target: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(target)
        .map_err(|e| Error::io(format!("create directory {}", target.display()), e))?;
    let dst = open_host_dir(target)?;
    copy_tree(&src, &dst, guest, &no_check, &mut Vec::new())?;
    let st = nix::sys::stat::fstat(&src).map_err(|e| io_err("stat", guest, e))?;
    fchmod(&dst, mode_of(&st)).map_err(|e| io_err("chmod", &target.display().to_string(), e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{HostFacts, Layout, ReadOnlyMount, Shared};
    use std::os::unix::fs::{symlink, PermissionsExt};

    /// A machine view of `root` alone, with `mounts` (`(host, guest)`).
    fn view_with(root: &Path, mounts: &[(&Path, &str)]) -> GuestView {
        let layout = Layout {
            root: root.to_path_buf(),
            network: shellbox_core::NetworkPolicy::Deny,
            mounts: mounts
                .iter()
                .map(|(h, g)| ReadOnlyMount {
                    host: h.to_path_buf(),
                    guest: g.to_string(),
                })
                .collect(),
            etc: root.join("etc"),
            etc_binds: Vec::new(),
            shared: Shared::default(),
            layers: None,
        };
        let facts = HostFacts {
            system_dirs: Vec::new(),
            masked_proc: Vec::new(),
            setpriv: None,
        };
        GuestView::new(&layout, &facts, &[])
    }

    fn view(root: &Path) -> GuestView {
        view_with(root, &[])
    }

    #[test]
    fn copies_keep_content_mode_and_times_for_every_size() {
        let tmp = tempfile::tempdir().unwrap();
        let (src, root) = (tmp.path().join("src"), tmp.path().join("root"));
        std::fs::create_dir_all(&src).unwrap();
        std::fs::create_dir_all(&root).unwrap();
        let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let cases: [(&str, &[u8], u32); 4] = [
            ("empty", b"", 0o640),
            ("small", b"hello\n", 0o666),
            ("exact", &big[..SMALL_FILE_BYTES as usize], 0o1755),
            ("big", &big, 0o400),
        ];
        for (name, data, mode) in cases {
            let p = src.join(name);
            std::fs::write(&p, data).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        upload(&view(&root), &src, "/d").unwrap();
        // An existing file with another mode is replaced and gets the source's mode.
        std::fs::write(root.join("d/small"), b"older and longer content").unwrap();
        std::fs::set_permissions(root.join("d/small"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        upload(&view(&root), &src.join("small"), "/d/small").unwrap();
        let back = tmp.path().join("back");
        download(&view(&root), "/d", &back).unwrap();
        download(&view(&root), "/d/big", &tmp.path().join("big-file")).unwrap();
        for (name, data, mode) in cases {
            for copy in [root.join("d").join(name), back.join(name)] {
                assert_eq!(std::fs::read(&copy).unwrap(), data, "{}", copy.display());
                let meta = std::fs::metadata(&copy).unwrap();
                assert_eq!(
                    meta.permissions().mode() & 0o7777,
                    mode,
                    "{}",
                    copy.display()
                );
                let orig = std::fs::metadata(src.join(name)).unwrap();
                assert_eq!(meta.modified().unwrap(), orig.modified().unwrap());
            }
        }
        assert_eq!(std::fs::read(tmp.path().join("big-file")).unwrap(), big);
    }

    #[test]
    fn round_trip_and_symlink_refusal() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("secret"), "s").unwrap();
        symlink(&outside, root.join("escape")).unwrap();

        let src = tmp.path().join("src");
        std::fs::create_dir_all(src.join("sub")).unwrap();
        std::fs::write(src.join("sub/run.sh"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(
            src.join("sub/run.sh"),
            std::fs::Permissions::from_mode(0o751),
        )
        .unwrap();
        symlink("sub/run.sh", src.join("link")).unwrap();
        std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o750)).unwrap();

        upload(&view(&root), &src, "/a/b").unwrap();
        let meta = std::fs::metadata(root.join("a/b")).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o750);
        assert_eq!(
            std::fs::read_link(root.join("a/b/link")).unwrap(),
            Path::new("sub/run.sh")
        );
        let back = tmp.path().join("back");
        download(&view(&root), "/a/b", &back).unwrap();
        let m = std::fs::metadata(back.join("sub/run.sh")).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o751);
        assert!(std::fs::symlink_metadata(back.join("link"))
            .unwrap()
            .file_type()
            .is_symlink());

        // A link to a host path resolves in the guest namespace: inside the machine root.
        upload(&view(&root), &src.join("sub/run.sh"), "/escape/x").unwrap();
        assert!(!outside.join("x").exists());
        let inside = root.join(outside.strip_prefix("/").unwrap());
        assert_eq!(std::fs::read(inside.join("x")).unwrap(), b"#!/bin/sh\n");
        std::fs::remove_dir_all(root.join("tmp")).unwrap();
        for source in ["/escape/secret", "/escape"] {
            let e = download(&view(&root), source, &tmp.path().join("s")).unwrap_err();
            assert!(matches!(&e, Error::NotFound { .. }), "{source}: {e}");
        }
        assert!(!tmp.path().join("s").exists());
        assert!(matches!(
            download(&view(&root), "/missing/x", &tmp.path().join("m")),
            Err(Error::NotFound { path }) if path == "/missing/x"
        ));
        // A tree that would write into a mount is refused before anything lands.
        let mounted = tmp.path().join("mounted");
        std::fs::create_dir_all(root.join("c/sub")).unwrap();
        std::fs::create_dir(&mounted).unwrap();
        let before = std::fs::read_dir(root.join("c")).unwrap().count();
        assert!(
            upload(&view_with(&root, &[(&mounted, "/c/sub")]), &src, "/c")
                .unwrap_err()
                .is_unsupported()
        );
        assert_eq!(std::fs::read_dir(root.join("c")).unwrap().count(), before);
        assert!(std::fs::read_dir(&mounted).unwrap().next().is_none());
    }
}
