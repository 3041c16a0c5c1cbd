//! File transfers that never follow a symlink inside a machine root.
//!
//! Every guest path is opened by walking from the root directory's fd one component at a
//! time with `openat(O_NOFOLLOW)`: a symlink anywhere on the way (for example
//! `/workspace/escape -> /etc`, planted by a running command) is refused as the path is
//! opened, not checked beforehand, so a command cannot swap a directory for a link between
//! a check and the copy. Trees are copied fd to fd (`openat`, `mkdirat`, `symlinkat`), so
//! links inside a tree are copied as links and never followed, on either side.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{openat, readlinkat, OFlag, AT_FDCWD};
use nix::sys::stat::{fchmod, fstatat, futimens, mkdirat, FileStat, Mode, SFlag};
use nix::sys::time::TimeSpec;
use nix::unistd::{symlinkat, unlinkat, UnlinkatFlags};
use shellbox_core::Error;

/// Called with the guest path of every entry an upload is about to write; an error stops
/// the upload (read-only targets).
pub type GuestCheck<'a> = &'a dyn Fn(&str) -> Result<(), Error>;

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

/// Walks `components` from `root` (no symlinks followed) and returns the directory fd.
fn walk<'a>(
    root: &OwnedFd,
    components: impl Iterator<Item = &'a str>,
    create: bool,
) -> Result<OwnedFd, Error> {
    let mut cur = root.try_clone().map_err(|e| Error::io("dup root fd", e))?;
    let mut guest = String::new();
    for comp in components {
        guest.push('/');
        guest.push_str(comp);
        cur = step(&cur, OsStr::new(comp), create, &guest)?;
    }
    Ok(cur)
}

fn split_parent(guest: &str) -> (Vec<&str>, &str) {
    let mut comps: Vec<&str> = shellbox_core::validate::guest_components(guest).collect();
    let name = comps.pop().unwrap_or("");
    (comps, name)
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

/// Makes (or opens an existing) directory `name` in `dst_dir` without following links.
fn ensure_dir(dst_dir: &OwnedFd, name: &OsStr, path: &str) -> Result<OwnedFd, Error> {
    step(dst_dir, name, true, path)
}

/// Copies the contents of directory `src` into directory `dst`, entry by entry, with
/// `check(guest path)` called before each entry is written.
fn copy_tree(src: &OwnedFd, dst: &OwnedFd, path: &str, check: GuestCheck) -> Result<(), Error> {
    copy_tree_at(src, dst, path, check, 0)
}

fn copy_tree_at(
    src: &OwnedFd,
    dst: &OwnedFd,
    path: &str,
    check: GuestCheck,
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
        check(&child)?;
        let kind = file_type(&st);
        if kind == SFlag::S_IFDIR {
            let s = step(src, &name, false, &child)?;
            let d = ensure_dir(dst, &name, &child)?;
            copy_tree_at(&s, &d, &child, check, depth + 1)?;
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

fn no_check(_: &str) -> Result<(), Error> {
    Ok(())
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
        download_host(src, dst, &label)
    }
}

/// Uploads host `source` to guest `target` inside the machine root `root`.
///
/// A file becomes the file `target` (parents made); a directory is merged into `target`,
/// which takes the source directory's mode. A symlink as `source` itself is followed (it is
/// the caller's path); links inside a directory source are copied as links. `check` is
/// called with every guest path written.
///
/// # Errors
/// [`Error::NotFound`] for a missing source; [`Error::Transfer`] when the target passes
/// through a symlink, a directory is in the way of a file, or a source entry is neither a
/// file, a directory nor a symlink; the check's error; [`Error::Io`].
pub fn upload(root: &Path, source: &Path, target: &str, check: GuestCheck) -> Result<(), Error> {
    let meta =
        std::fs::metadata(source).map_err(|_| Error::not_found(source.display().to_string()))?;
    check(target)?;
    let root_fd = open_host_dir(root)?;
    let (parents, name) = split_parent(target);
    if meta.is_dir() {
        let src = open_host_dir(source)?;
        let dst = if target == "/" {
            root_fd
        } else {
            let parent = walk(&root_fd, parents.into_iter(), true)?;
            ensure_dir(&parent, OsStr::new(name), target)?
        };
        copy_tree(&src, &dst, target, check)?;
        let st = nix::sys::stat::fstat(&src)
            .map_err(|e| io_err("stat", &source.display().to_string(), e))?;
        fchmod(&dst, mode_of(&st)).map_err(|e| io_err("chmod", target, e))?;
        Ok(())
    } else if meta.is_file() {
        if target == "/" {
            return Err(Error::transfer(
                target,
                "a file cannot replace the machine root",
            ));
        }
        let parent = walk(&root_fd, parents.into_iter(), true)?;
        let src = openat(
            AT_FDCWD,
            source,
            OFlag::O_RDONLY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io_err("open", &source.display().to_string(), e))?;
        let st = nix::sys::stat::fstat(&src)
            .map_err(|e| io_err("stat", &source.display().to_string(), e))?;
        write_file(src, &st, &parent, OsStr::new(name), target)
    } else {
        Err(Error::transfer(
            source.display().to_string(),
            "only regular files and directories can be uploaded",
        ))
    }
}

/// Downloads guest `source` from the machine root `root` to host `target` without
/// following any symlink inside the root (a link as `source` itself is refused too).
///
/// # Errors
/// [`Error::NotFound`] for a missing source, [`Error::Transfer`] for a symlink on the way
/// or a special file, [`Error::Io`].
pub fn download_from_root(root: &Path, source: &str, target: &Path) -> Result<(), Error> {
    let root_fd = open_host_dir(root)?;
    if source == "/" {
        return dir_to_host(root_fd, source, target);
    }
    let (parents, name) = split_parent(source);
    let parent = walk(&root_fd, parents.into_iter(), false).map_err(|e| match e {
        Error::NotFound { .. } => Error::not_found(source),
        other => other,
    })?;
    let st = match fstatat(&parent, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::ENOENT) | Err(Errno::ENOTDIR) => return Err(Error::not_found(source)),
        Err(e) => return Err(io_err("stat", source, e)),
    };
    let kind = file_type(&st);
    if kind == SFlag::S_IFLNK {
        return Err(symlink_refusal(source));
    }
    if kind == SFlag::S_IFDIR {
        let fd = step(&parent, OsStr::new(name), false, source)?;
        dir_to_host(fd, source, target)
    } else if kind == SFlag::S_IFREG {
        let fd = openat(
            &parent,
            name,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            Errno::ELOOP => symlink_refusal(source),
            e => io_err("open", source, e),
        })?;
        file_to_host(fd, source, target)
    } else {
        Err(Error::transfer(
            source,
            "only regular files and directories can be downloaded",
        ))
    }
}

/// Downloads a host path (a read-only mount or system directory, which commands cannot
/// change) to `target`; `guest` names it in errors. `source` itself is followed if it is a
/// link; links inside a directory are copied as links.
///
/// # Errors
/// [`Error::NotFound`] when it does not exist, [`Error::Transfer`] for a special file,
/// [`Error::Io`].
pub fn download_host(source: &Path, target: &Path, guest: &str) -> Result<(), Error> {
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
    copy_tree(&src, &dst, guest, &no_check)?;
    let st = nix::sys::stat::fstat(&src).map_err(|e| io_err("stat", guest, e))?;
    fchmod(&dst, mode_of(&st)).map_err(|e| io_err("chmod", &target.display().to_string(), e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

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
        upload(&root, &src, "/d", &no_check).unwrap();
        // An existing file with another mode is replaced and gets the source's mode.
        std::fs::write(root.join("d/small"), b"older and longer content").unwrap();
        std::fs::set_permissions(root.join("d/small"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        upload(&root, &src.join("small"), "/d/small", &no_check).unwrap();
        let back = tmp.path().join("back");
        download_from_root(&root, "/d", &back).unwrap();
        download_from_root(&root, "/d/big", &tmp.path().join("big-file")).unwrap();
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

        upload(&root, &src, "/a/b", &no_check).unwrap();
        let meta = std::fs::metadata(root.join("a/b")).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o750);
        assert_eq!(
            std::fs::read_link(root.join("a/b/link")).unwrap(),
            Path::new("sub/run.sh")
        );
        let back = tmp.path().join("back");
        download_from_root(&root, "/a/b", &back).unwrap();
        let m = std::fs::metadata(back.join("sub/run.sh")).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o751);
        assert!(std::fs::symlink_metadata(back.join("link"))
            .unwrap()
            .file_type()
            .is_symlink());

        let e = upload(&root, &src.join("sub/run.sh"), "/escape/x", &no_check).unwrap_err();
        assert!(
            matches!(&e, Error::Transfer { reason, .. } if reason.contains("symlink")),
            "{e}"
        );
        assert!(!outside.join("x").exists());
        let e = download_from_root(&root, "/escape/secret", &tmp.path().join("s")).unwrap_err();
        assert!(
            matches!(&e, Error::Transfer { reason, .. } if reason.contains("symlink")),
            "{e}"
        );
        let e = download_from_root(&root, "/escape", &tmp.path().join("s")).unwrap_err();
        assert!(matches!(&e, Error::Transfer { .. }), "{e}");
        assert!(matches!(
            download_from_root(&root, "/missing/x", &tmp.path().join("m")),
            Err(Error::NotFound { path }) if path == "/missing/x"
        ));
        let refuse = |p: &str| {
            if p.ends_with("/sub") {
                Err(Error::unsupported("read-only host path"))
            } else {
                Ok(())
            }
        };
        assert!(upload(&root, &src, "/c", &refuse)
            .unwrap_err()
            .is_unsupported());
    }
}
