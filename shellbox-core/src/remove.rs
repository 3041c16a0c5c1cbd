//! Removing a directory tree of any depth, with a bounded stack and a bounded number of open
//! descriptors.
//!
//! `std::fs::remove_dir_all` recurses once per level and keeps a descriptor open per level:
//! a guest that nests 15,000 directories (`mkdir d; cd d` in a loop) overflows the stack of
//! the thread that removes its machine, which aborts the whole process (a server with every
//! other machine in it), and `shellbox gc` then aborts on the same tree. [`remove_tree`] walks
//! with an explicit stack of at most [`MAX_OPEN_LEVELS`] open directories; a directory found
//! deeper than that is first renamed to the top of the tree (a rename within one filesystem
//! is O(1)), so the walk never goes deeper, whatever the tree's depth.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{renameat2, OFlag, RenameFlags};
use nix::sys::stat::Mode;
use nix::unistd::UnlinkatFlags;

/// How many directories [`remove_tree`] holds open at once (and so how deep its walk goes
/// before it moves a deeper directory up to the top of the tree).
pub const MAX_OPEN_LEVELS: usize = 64;

/// The names a moved directory gets at the top of the tree being removed.
const MOVED_PREFIX: &str = ".shellbox-remove-";

/// One open directory of the walk: its stream, the names still to remove, and its name in
/// its parent (`None` for the top).
struct Level {
    dir: Dir,
    pending: Vec<OsString>,
    name: Option<OsString>,
}

impl Level {
    fn open(dir: Dir, name: Option<OsString>) -> io::Result<Level> {
        let mut dir = dir;
        let mut pending = Vec::new();
        for entry in dir.iter() {
            let entry = entry.map_err(io::Error::from)?;
            let bytes = entry.file_name().to_bytes();
            if bytes != b"." && bytes != b".." {
                pending.push(OsStr::from_bytes(bytes).to_os_string());
            }
        }
        Ok(Level { dir, pending, name })
    }
}

fn open_dir_at(parent: &Dir, name: &OsStr) -> nix::Result<Dir> {
    Dir::openat(
        parent.as_fd(),
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// Removes `path` and, when it is a directory, everything below it, without following
/// symlinks (a symlink is removed, not its target) — what `std::fs::remove_dir_all` does,
/// for a tree of any depth: the walk holds at most [`MAX_OPEN_LEVELS`] directories open and
/// moves a deeper directory to the top of the tree (renamed `.shellbox-remove-N`) before it
/// goes on, so neither its stack nor its descriptors grow with the depth. A directory that
/// cannot be moved (a mount point, another filesystem) is walked in place.
///
/// Meant for trees nobody changes meanwhile (a closed machine's root, a dead owner's
/// directory); a concurrent writer can make it fail with `ENOTEMPTY`, as with std.
///
/// # Errors
/// The first I/O error, as `std::fs::remove_dir_all` gives them: `NotFound` when `path`
/// does not exist; `PermissionDenied` for an entry it may not remove; `DirectoryNotEmpty`
/// when something was added while it ran. Entries that vanish meanwhile are not errors.
pub fn remove_tree<P: AsRef<Path>>(path: P) -> io::Result<()> {
    let path = path.as_ref();
    let meta = std::fs::symlink_metadata(path)?;
    if !meta.is_dir() {
        return std::fs::remove_file(path);
    }
    let top = Dir::open(
        path,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let mut stack = vec![Level::open(top, None)?];
    let mut moved: u64 = 0;
    while let Some(depth) = stack.len().checked_sub(1) {
        let Some(name) = stack[depth].pending.pop() else {
            // Everything below this level is gone: remove it from its parent.
            let level = stack.pop().expect("a level is on the stack");
            drop(level.dir);
            if let (Some(name), Some(parent)) = (level.name, stack.last()) {
                match nix::unistd::unlinkat(
                    parent.dir.as_fd(),
                    name.as_os_str(),
                    UnlinkatFlags::RemoveDir,
                ) {
                    Ok(()) | Err(Errno::ENOENT) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            continue;
        };
        let here = &stack[depth].dir;
        // Anything but a directory goes with one unlink (EISDIR tells a directory).
        match nix::unistd::unlinkat(here.as_fd(), name.as_os_str(), UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => continue,
            Err(Errno::EISDIR) => {}
            Err(e) => return Err(e.into()),
        }
        if stack.len() >= MAX_OPEN_LEVELS && move_to_top(&mut stack, depth, &name, &mut moved)? {
            continue;
        }
        match open_dir_at(&stack[depth].dir, &name) {
            Ok(dir) => stack.push(Level::open(dir, Some(name))?),
            Err(Errno::ENOENT) => {}
            // Replaced by a file since the unlink: try that again.
            Err(Errno::ENOTDIR) | Err(Errno::ELOOP) => stack[depth].pending.push(name),
            Err(e) => return Err(e.into()),
        }
    }
    std::fs::remove_dir(path)
}

/// Renames directory `name` of level `depth` to a fresh name in the top level and queues it
/// there. `Ok(false)` when it cannot be moved (another filesystem, a mount point).
fn move_to_top(
    stack: &mut [Level],
    depth: usize,
    name: &OsStr,
    moved: &mut u64,
) -> io::Result<bool> {
    // Moves happen from below the top only (MAX_OPEN_LEVELS > 1).
    let (upper, lower) = stack.split_at_mut(depth);
    let (top, from) = (&mut upper[0], &lower[0]);
    loop {
        let fresh = OsString::from(format!("{MOVED_PREFIX}{moved}"));
        *moved += 1;
        match renameat2(
            from.dir.as_fd(),
            name,
            top.dir.as_fd(),
            fresh.as_os_str(),
            RenameFlags::RENAME_NOREPLACE,
        ) {
            Ok(()) => {
                top.pending.push(fresh);
                return Ok(true);
            }
            Err(Errno::EEXIST) => continue,
            // Gone meanwhile: nothing left to remove.
            Err(Errno::ENOENT) => return Ok(true),
            Err(Errno::EXDEV) | Err(Errno::EBUSY) | Err(Errno::EINVAL) => return Ok(false),
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A scratch directory on tmpfs where the host has one (directory creation on this
    /// disk costs ~1 ms), else the temp dir.
    fn scratch() -> tempfile::TempDir {
        let shm = Path::new("/dev/shm");
        if shm.is_dir() {
            if let Ok(dir) = tempfile::tempdir_in(shm) {
                return dir;
            }
        }
        tempfile::tempdir().unwrap()
    }

    fn nest(top: &Path, levels: usize) {
        // Relative creation from an fd of the deepest level, as a guest's `mkdir d; cd d`.
        let mut dir = Dir::open(top, OFlag::O_RDONLY | OFlag::O_DIRECTORY, Mode::empty()).unwrap();
        for i in 0..levels {
            nix::sys::stat::mkdirat(dir.as_fd(), "d", Mode::from_bits_truncate(0o755)).unwrap();
            if i % 100 == 0 {
                nix::fcntl::openat(
                    dir.as_fd(),
                    "f",
                    OFlag::O_CREAT | OFlag::O_WRONLY,
                    Mode::from_bits_truncate(0o644),
                )
                .unwrap();
            }
            dir = open_dir_at(&dir, OsStr::new("d")).unwrap();
        }
    }

    #[test]
    fn removes_a_tree_far_deeper_than_its_stack_would_recurse() {
        let tmp = scratch();
        let top = tmp.path().join("t");
        fs::create_dir(&top).unwrap();
        nest(&top, 20_000);
        // 128 KiB of stack: std's remove_dir_all overflows it within about a thousand levels.
        let path = top.clone();
        std::thread::Builder::new()
            .stack_size(128 * 1024)
            .spawn(move || remove_tree(&path))
            .unwrap()
            .join()
            .unwrap()
            .unwrap();
        assert!(!top.exists());
        assert_eq!(fs::read_dir(tmp.path()).unwrap().count(), 0);
    }

    #[test]
    fn removes_files_links_and_wide_directories_but_never_follows_a_link() {
        let tmp = scratch();
        let outside = tmp.path().join("outside");
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("keep"), "x").unwrap();
        let top = tmp.path().join("t");
        fs::create_dir_all(top.join("a/b/c")).unwrap();
        for i in 0..500 {
            fs::write(top.join(format!("a/f{i}")), "y").unwrap();
        }
        std::os::unix::fs::symlink(&outside, top.join("a/b/to-outside")).unwrap();
        std::os::unix::fs::symlink("../../..", top.join("a/b/c/up")).unwrap();
        nix::unistd::mkfifo(&top.join("a/fifo"), Mode::from_bits_truncate(0o600)).unwrap();
        // A directory its owner cannot write or read (root removes it anyway; others get
        // PermissionDenied as with std).
        fs::create_dir(top.join("a/locked")).unwrap();
        remove_tree(&top).unwrap();
        assert!(!top.exists());
        assert_eq!(fs::read_to_string(outside.join("keep")).unwrap(), "x");
    }

    #[test]
    fn a_file_or_a_symlink_given_is_removed_itself_and_a_missing_path_is_not_found() {
        let tmp = scratch();
        let target = tmp.path().join("target");
        fs::create_dir(&target).unwrap();
        fs::write(target.join("keep"), "x").unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        remove_tree(&link).unwrap();
        assert!(target.join("keep").exists());
        let file = tmp.path().join("file");
        fs::write(&file, "z").unwrap();
        remove_tree(&file).unwrap();
        assert!(!file.exists());
        let err = remove_tree(tmp.path().join("missing")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn the_moved_names_do_not_clash_with_the_trees_own() {
        let tmp = scratch();
        let top = tmp.path().join("t");
        fs::create_dir(&top).unwrap();
        // Names a move would pick, already present at the top.
        for i in 0..3 {
            fs::create_dir(top.join(format!("{MOVED_PREFIX}{i}"))).unwrap();
            fs::write(top.join(format!("{MOVED_PREFIX}{i}/x")), "1").unwrap();
        }
        nest(&top, MAX_OPEN_LEVELS * 3 + 5);
        remove_tree(&top).unwrap();
        assert!(!top.exists());
    }
}
