//! The host side of downloads, shared by every backend that writes a guest tree to the host.
//!
//! A download writes data a command in the machine chose to a host path the caller chose.
//! [`StagedDownload`] is the one place that does it, so every backend follows the same
//! rules:
//!
//! - **Staged, all or nothing.** The tree is written into a fresh staging directory
//!   `.shellbox-download-<owner>-<unique>` (mode 0700, see [`crate::staging`]: its name
//!   records the process, so `shellbox gc` removes it should that process be killed)
//!   beside where it lands, through a [`TreeWriter`] (or
//!   [`unpack_safe`](crate::archive::unpack_safe)'s tar adapter of it), which refuses
//!   absolute and climbing names, special files, hard links out of the tree and every
//!   entry written through a link. Only a complete, accepted tree is moved into place; on
//!   any error, and when the value is dropped (a cancelled download), the staging
//!   directory is removed and the host target is as it was.
//! - **Links inside are copied as links**, as `tar` does (REFERENCE.md 4.5: "inner
//!   symlinks written as links even to absolute host paths"), whatever they point at
//!   ([`SymlinkRule::AsStored`]): an absolute target, one that climbs out of the tree, a
//!   dangling one. On the host such a link may name a host file; no download ever writes
//!   through one (next rule), and a caller reading the tree reads links as links
//!   (`symlink_metadata`, `O_NOFOLLOW`) where it matters.
//! - **The target's last component is never followed.** A symlink at the target (for
//!   example one an earlier download left there) is replaced by the download (`rename(2)`),
//!   never written through; a file download into an existing *directory* (a real one, not
//!   a symlink to one) lands inside it under the source's name.
//! - **Links in the target's parent path are followed only downwards.**
//!   [`resolve_host_target`] follows a link on the way (absolute or relative) only when
//!   its resolution stays below the directory holding it; one that leads out of it — a
//!   downloaded `l -> /home/u/.ssh`, or `l -> ../y/..` once a later download made
//!   `y -> .` — is refused, and the download works on the resolved, link-free path. So a
//!   link a download wrote can never steer a later download out of the tree holding it.
//! - **Merges never follow a link.** A directory downloaded onto an existing directory is
//!   merged (directories into directories; anything else replaces what is there, a
//!   symlink replaced, never followed).
//! - **Devices, fifos and sockets are never replaced**, at the target
//!   ([`Error::Unsupported`] before anything is staged: `--download f:/dev/null` leaves
//!   the host's `/dev/null` alone) or inside a directory merged into (the merge is refused
//!   before anything moves).
//!
//! Everything here blocks (`std::fs`); async callers use a blocking thread.

use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::archive::{
    make_tree_writable, unpack_into, SymlinkRule, TreeWriter, UnpackLayout, UnpackSummary,
};
use crate::staging::StagingDir;
use crate::Error;

/// The name prefix of a download's staging directory (REFERENCE 3.2); see
/// [`crate::staging`] for the rest of the name (its owner).
pub const DOWNLOAD_STAGING_PREFIX: &str = crate::staging::STAGING_PREFIX;

/// What a download brings to the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DownloadKind<'a> {
    /// A directory: its contents become the target directory (merged into an existing one).
    Directory,
    /// A regular file whose base name is `name`: it becomes the target, or `target/name`
    /// when the target is an existing directory.
    File {
        /// The source's base name.
        name: &'a str,
    },
}

/// A download being written to the host: a staging directory beside the final place, the
/// tree written into it, then [`commit`](Self::commit)ted into place. See the module docs
/// for the rules. Dropping it without a commit removes the staging directory.
#[derive(Debug)]
pub struct StagedDownload {
    /// The staging directory itself (`None` only while being made and once dropped).
    stage: Option<StagingDir>,
    /// Where the tree is written (`dir/item`).
    item: PathBuf,
    /// The final place.
    dest: PathBuf,
    /// The caller's target, for errors.
    target: PathBuf,
    /// Parent directories of `dest` this download created, outermost first (removed again
    /// when it fails).
    made_parents: Vec<PathBuf>,
    committed: bool,
}

fn io_at(what: &str, p: &Path) -> impl FnOnce(io::Error) -> Error {
    let operation = format!("{what} {}", p.display());
    move |e| Error::io(operation, e)
}

/// The most symlinks [`resolve_host_target`] follows (Linux's own limit).
const MAX_TARGET_LINKS: u32 = 40;

/// The symlink-free host path `target` stands for: its parent directories resolved the
/// way the kernel would (relative to the current directory when `target` is relative),
/// its last component kept as given (never followed; see the module docs). The part that
/// does not exist yet is appended as written.
///
/// A link on the way is followed only when its resolution stays at or below the directory
/// holding it: a relative one that never climbs above that directory (`a -> b/c`,
/// `a -> ./b`), an absolute one that leads below it (`/home -> /data/home`,
/// `/w/l -> /w/sub`). Downloads copy links as stored (an absolute `l -> /home/u/.ssh`, a
/// climbing `l -> ../..`), and a later download can bend a link that was inside
/// (`l -> ../y/..` once `y` became `y -> .`), so a link leading out of its directory may
/// lead anywhere and is refused. Such a link of the caller's own (`/var/run -> ../run`,
/// `~/work -> /data/work`) is refused too: give the path without it.
///
/// # Errors
/// [`Error::Transfer`] naming `target` for a link that leads out of the directory holding
/// it (or an absolute one reached from a relative one) or more than 40 links;
/// [`Error::Io`] when the current directory or a link cannot be read.
pub fn resolve_host_target(target: &Path) -> Result<PathBuf, Error> {
    let (parent, last) = match target.file_name() {
        Some(name) => (target.parent().unwrap_or(Path::new("")), Some(name)),
        None => (target, None),
    };
    let mut resolved = if target.is_absolute() {
        PathBuf::from("/")
    } else {
        std::env::current_dir().map_err(|e| Error::io("read the current directory", e))?
    };
    let mut walk = TargetWalk {
        target,
        hops: 0,
        missing: false,
    };
    walk.walk(&mut resolved, parent, None)?;
    if let Some(name) = last {
        resolved.push(name);
    }
    Ok(resolved)
}

struct TargetWalk<'a> {
    target: &'a Path,
    hops: u32,
    /// A component did not exist: the rest is appended as written.
    missing: bool,
}

impl TargetWalk<'_> {
    fn refuse(&self, link: &Path, why: &str) -> Error {
        Error::transfer(
            self.target.display().to_string(),
            format!(
                "the target path passes through the symlink {}, which {why}; give the target path without it",
                link.display()
            ),
        )
    }

    /// Walks `path` from `resolved` (symlink-free), following links as
    /// [`resolve_host_target`] says; with `floor`, `..` may not go above that many
    /// components (the directory of the relative link being resolved).
    fn walk(
        &mut self,
        resolved: &mut PathBuf,
        path: &Path,
        floor: Option<(usize, &Path)>,
    ) -> Result<(), Error> {
        use std::path::Component;
        for c in path.components() {
            match c {
                Component::RootDir | Component::Prefix(_) => *resolved = PathBuf::from("/"),
                Component::CurDir => {}
                Component::ParentDir => {
                    if let Some((depth, link)) = floor {
                        if resolved.components().count() <= depth {
                            return Err(self.refuse(link, "climbs out of its own directory"));
                        }
                    }
                    resolved.pop();
                }
                Component::Normal(name) => {
                    let here = resolved.join(name);
                    let meta = if self.missing {
                        None
                    } else {
                        fs::symlink_metadata(&here).ok()
                    };
                    match meta {
                        Some(m) if m.file_type().is_symlink() => {
                            self.hops += 1;
                            if self.hops > MAX_TARGET_LINKS {
                                return Err(self.refuse(&here, "starts too many levels of links"));
                            }
                            let text = fs::read_link(&here).map_err(io_at("read link", &here))?;
                            if text.is_absolute() {
                                if let Some((_, link)) = floor {
                                    return Err(self.refuse(link, "leads through an absolute link"));
                                }
                                let holder = resolved.clone();
                                *resolved = PathBuf::from("/");
                                self.walk(resolved, &text, None)?;
                                if !resolved.starts_with(&holder) {
                                    return Err(
                                        self.refuse(&here, "leads out of the directory holding it")
                                    );
                                }
                            } else {
                                let depth = resolved.components().count();
                                self.walk(resolved, &text, Some((depth, &here)))?;
                            }
                        }
                        Some(_) => resolved.push(name),
                        None => {
                            self.missing = true;
                            resolved.push(name);
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

impl StagedDownload {
    /// Prepares a download of `kind` to the host path `target`: decides the final place
    /// (see [`DownloadKind`]), creates its missing parent directories and the staging
    /// directory beside it (inside the final directory when a merge target's parent cannot
    /// be written).
    ///
    /// # Errors
    /// [`Error::Io`] when a directory cannot be made; [`Error::InvalidInput`] for a file
    /// name that is empty, `.`/`..` or holds a `/`; [`Error::Transfer`] when the target's
    /// parent path passes through a link [`resolve_host_target`] refuses.
    pub fn new(target: &Path, kind: DownloadKind<'_>) -> Result<Self, Error> {
        let caller_target = target;
        let resolved = resolve_host_target(target)?;
        let target = resolved.as_path();
        let existing = fs::symlink_metadata(target).ok();
        let dest = match kind {
            DownloadKind::File { name } => {
                if name.is_empty() || name == "." || name == ".." || name.contains('/') {
                    return Err(Error::invalid(format!("bad download file name {name:?}")));
                }
                if existing.as_ref().is_some_and(|m| m.is_dir()) {
                    target.join(name)
                } else {
                    target.to_path_buf()
                }
            }
            DownloadKind::Directory => target.to_path_buf(),
        };
        let parent = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let mut made_parents = Vec::new();
        let mut cur = Some(parent.as_path());
        while let Some(p) = cur.filter(|p| !p.as_os_str().is_empty()) {
            if fs::symlink_metadata(p).is_ok() {
                break;
            }
            made_parents.push(p.to_path_buf());
            cur = p.parent();
        }
        made_parents.reverse();
        // A device, fifo or socket at the target is no file of the user's to replace.
        if fs::symlink_metadata(&dest).is_ok_and(|m| is_special(&m)) {
            return Err(special_target(&dest));
        }
        let mut staged = Self {
            stage: None,
            item: PathBuf::new(),
            dest,
            target: caller_target.to_path_buf(),
            made_parents: Vec::new(),
            committed: false,
        };
        for p in made_parents {
            match fs::create_dir(&p) {
                Ok(()) => staged.made_parents.push(p),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && p.is_dir() => {}
                Err(e) => return Err(io_at("create", &p)(e)),
            }
        }
        let dest_is_dir = fs::symlink_metadata(&staged.dest).is_ok_and(|m| m.is_dir());
        let stage = match StagingDir::create_in(&parent) {
            // A parent that cannot be written: stage inside the directory merged into.
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied && dest_is_dir => {
                StagingDir::create_in(&staged.dest)
                    .map_err(io_at("create a staging directory in", &staged.dest))
            }
            other => other.map_err(io_at("create a staging directory in", &parent)),
        }?;
        staged.item = stage.path().join("item");
        staged.stage = Some(stage);
        Ok(staged)
    }

    /// Where the tree is written: a path that does not exist yet, inside the staging
    /// directory.
    pub fn staging_path(&self) -> &Path {
        &self.item
    }

    /// Where the download lands once committed.
    pub fn destination(&self) -> &Path {
        &self.dest
    }

    /// A [`TreeWriter`] into the staging path whose first entry must be the root (the
    /// directory or the file itself) and whose refusals name the caller's target.
    /// Its links are written as stored ([`SymlinkRule::AsStored`]).
    pub fn writer(&self) -> TreeWriter {
        TreeWriter::new(&self.item, true)
            .with_label(self.target.display().to_string())
            .with_symlinks(SymlinkRule::AsStored)
    }

    /// Unpacks a tar stream in Docker's archive layout ([`UnpackLayout::StripRoot`]: one
    /// top-level name standing for the download itself) into the staging path, with
    /// [`unpack_safe`](crate::archive::unpack_safe)'s rules, links written as stored.
    ///
    /// # Errors
    /// As [`unpack_safe`](crate::archive::unpack_safe), naming the caller's target.
    pub fn unpack<R: Read>(&self, reader: R) -> Result<UnpackSummary, Error> {
        unpack_into(reader, self.writer(), UnpackLayout::StripRoot)
    }

    /// Moves the written tree into place (rename, or a merge into an existing directory),
    /// then removes the staging directory.
    ///
    /// # Errors
    /// [`Error::Transfer`] when a file would replace an existing directory or when nothing
    /// was written; [`Error::Io`] when a move fails.
    pub fn commit(mut self) -> Result<(), Error> {
        let result = self.place();
        if result.is_ok() {
            self.committed = true;
        }
        result
    }

    fn place(&self) -> Result<(), Error> {
        let staged = fs::symlink_metadata(&self.item).map_err(|_| {
            Error::transfer(
                self.target.display().to_string(),
                "the download wrote nothing",
            )
        })?;
        match fs::symlink_metadata(&self.dest) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::rename(&self.item, &self.dest).map_err(io_at("move into", &self.dest))
            }
            Err(e) => Err(io_at("stat", &self.dest)(e)),
            Ok(existing) if existing.is_dir() && staged.is_dir() => {
                // Every node the merge would replace is checked first, so a refused merge
                // leaves the target as it was.
                check_merge(&self.item, &self.dest, &self.target)?;
                merge_move(&self.item, &self.dest)
            }
            Ok(existing) if existing.is_dir() => Err(Error::transfer(
                self.target.display().to_string(),
                "would replace the target directory with a file",
            )),
            Ok(existing) if is_special(&existing) => Err(special_target(&self.dest)),
            Ok(_) => {
                // A file or symlink is replaced, never written through.
                if staged.is_dir() {
                    fs::remove_file(&self.dest).map_err(io_at("replace", &self.dest))?;
                }
                fs::rename(&self.item, &self.dest).map_err(io_at("move into", &self.dest))
            }
        }
    }
}

impl Drop for StagedDownload {
    /// Removes the staging directory and whatever is in it (read-only parts included), also
    /// when a download is cancelled midway, and the parent directories it made when the
    /// download did not land.
    fn drop(&mut self) {
        // First: it lies in the parents below.
        drop(self.stage.take());
        if !self.committed {
            for p in self.made_parents.iter().rev() {
                // Only while empty: never anything someone else put there meanwhile.
                let _ = fs::remove_dir(p);
            }
        }
    }
}

/// Whether a node is a device, fifo or socket (neither a directory, a regular file nor a
/// symlink): a download never replaces one.
fn is_special(meta: &fs::Metadata) -> bool {
    let kind = meta.file_type();
    !kind.is_dir() && !kind.is_file() && !kind.is_symlink()
}

/// [`Error::Unsupported`] for a download onto a device, fifo or socket.
fn special_target(dest: &Path) -> Error {
    Error::unsupported(format!(
        "download target {} exists and is a device, fifo or socket, not a regular file, \
         directory or symlink: a download never replaces one",
        dest.display()
    ))
}

/// Refuses a merge of the staged directory `src` into `dst` that would replace a device,
/// fifo or socket of `dst` (say a download onto `/dev` holding `null`); reads only.
///
/// # Errors
/// [`Error::Transfer`] naming the node; [`Error::Io`] when a directory cannot be read.
fn check_merge(src: &Path, dst: &Path, target: &Path) -> Result<(), Error> {
    let entries = fs::read_dir(src).map_err(io_at("read directory", src))?;
    for entry in entries {
        let entry = entry.map_err(io_at("read directory", src))?;
        let to = dst.join(entry.file_name());
        match fs::symlink_metadata(&to) {
            Ok(m) if is_special(&m) => {
                return Err(Error::transfer(
                    target.display().to_string(),
                    format!(
                        "would replace {}, which is not a regular file, directory or symlink (a device, fifo or socket)",
                        to.display()
                    ),
                ))
            }
            Ok(m) if m.is_dir() && entry.file_type().is_ok_and(|t| t.is_dir()) => {
                check_merge(&entry.path(), &to, target)?
            }
            _ => {}
        }
    }
    Ok(())
}

/// Moves the children of the staged directory `src` into the existing directory `dst`:
/// directories meeting directories are merged, anything else replaces what is there (a
/// symlink is replaced, never followed). `dst` ends with `src`'s mode.
fn merge_move(src: &Path, dst: &Path) -> Result<(), Error> {
    let mode = fs::symlink_metadata(src)
        .map_err(io_at("stat", src))?
        .permissions()
        .mode();
    for p in [src, dst] {
        if let Ok(m) = fs::symlink_metadata(p) {
            let cur = m.permissions().mode();
            if m.is_dir() && cur & 0o700 != 0o700 {
                fs::set_permissions(p, fs::Permissions::from_mode(cur | 0o700))
                    .map_err(io_at("chmod", p))?;
            }
        }
    }
    let entries = fs::read_dir(src).map_err(io_at("read directory", src))?;
    for entry in entries {
        let entry = entry.map_err(io_at("read directory", src))?;
        let from = entry.path();
        let to = dst.join(entry.file_name());
        let from_meta = fs::symlink_metadata(&from).map_err(io_at("stat", &from))?;
        match fs::symlink_metadata(&to) {
            Ok(m) if m.is_dir() && from_meta.is_dir() => merge_move(&from, &to)?,
            Ok(m) => {
                if m.is_dir() {
                    make_tree_writable(&to);
                    crate::remove_tree(&to).map_err(io_at("replace", &to))?;
                } else if from_meta.is_dir() {
                    fs::remove_file(&to).map_err(io_at("replace", &to))?;
                }
                fs::rename(&from, &to).map_err(io_at("move into", &to))?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::rename(&from, &to).map_err(io_at("move into", &to))?
            }
            Err(e) => return Err(io_at("stat", &to)(e)),
        }
    }
    fs::set_permissions(dst, fs::Permissions::from_mode(mode & 0o7777)).map_err(io_at("chmod", dst))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::TreeEntry;
    use std::os::unix::fs::FileTypeExt;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|c| c.to_string()).collect()
    }

    /// Puts a directory at `rel` (components below the target; empty for the target).
    fn put_dir(w: &mut TreeWriter, rel: &[&str], mode: u32) {
        let entry = TreeEntry::Directory { mode, mtime: None };
        w.put(&rel.join("/"), &s(rel), entry).unwrap();
    }

    /// Puts a 0644 file holding `data` at `rel`.
    fn put_file(w: &mut TreeWriter, rel: &[&str], mut data: &[u8]) -> Result<(), Error> {
        let entry = TreeEntry::File {
            data: &mut data,
            mode: 0o644,
            mtime: None,
        };
        w.put(&rel.join("/"), &s(rel), entry)
    }

    #[test]
    fn a_refused_download_leaves_nothing_and_a_good_one_lands() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("new/parents/res");
        let staged = StagedDownload::new(&target, DownloadKind::Directory).unwrap();
        let mut w = staged.writer();
        put_dir(&mut w, &[], 0o755);
        put_file(&mut w, &["f"], b"x").unwrap();
        // Links are copied as stored, but no entry is written through one.
        w.put("l", &s(&["l"]), TreeEntry::Symlink { target: b"../../x" })
            .unwrap();
        let err = w
            .put(
                "l/g",
                &s(&["l", "g"]),
                TreeEntry::File {
                    data: &mut &b"x"[..],
                    mode: 0o644,
                    mtime: None,
                },
            )
            .unwrap_err();
        assert!(
            matches!(&err, Error::Transfer { path, .. } if path == &target.display().to_string()),
            "{err}"
        );
        drop(w);
        drop(staged);
        assert_eq!(
            fs::read_dir(tmp.path()).unwrap().count(),
            0,
            "parents and staging removed"
        );

        let staged = StagedDownload::new(&target, DownloadKind::Directory).unwrap();
        let mut w = staged.writer();
        put_dir(&mut w, &[], 0o750);
        put_file(&mut w, &["f"], b"x").unwrap();
        w.put("l", &s(&["l"]), TreeEntry::Symlink { target: b"f" })
            .unwrap();
        w.finish().unwrap();
        staged.commit().unwrap();
        assert_eq!(fs::read(target.join("l")).unwrap(), b"x");
        let parent: Vec<_> = fs::read_dir(target.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(parent, ["res"], "no staging directory left");
    }

    /// A device, fifo or socket is never replaced by a download (issue 12 break-it:
    /// `--download /workspace/f:/dev/null` made the host's /dev/null a regular file): not
    /// at the target (refused before anything is staged), nor inside a directory the
    /// download merges into (refused before anything moves: the target is as it was).
    #[test]
    fn special_files_at_or_below_the_target_are_never_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let fifo = tmp.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        for kind in [DownloadKind::File { name: "fifo" }, DownloadKind::Directory] {
            let err = StagedDownload::new(&fifo, kind).map(drop).unwrap_err();
            assert!(matches!(err, Error::Unsupported(_)), "{err}");
        }
        let dir = tmp.path().join("dir");
        fs::create_dir(&dir).unwrap();
        nix::unistd::mkfifo(
            &dir.join("p"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let staged = StagedDownload::new(&dir, DownloadKind::Directory).unwrap();
        let mut w = staged.writer();
        put_dir(&mut w, &[], 0o755);
        for name in ["a", "p"] {
            put_file(&mut w, &[name], b"x").unwrap();
        }
        w.finish().unwrap();
        let err = staged.commit().unwrap_err();
        assert!(matches!(err, Error::Transfer { .. }), "{err}");
        assert!(fs::symlink_metadata(dir.join("p"))
            .unwrap()
            .file_type()
            .is_fifo());
        let left: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["p"], "nothing moved, no staging left");
        let top: Vec<_> = fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        assert_eq!(top, ["dir", "fifo"]);
    }

    #[test]
    fn the_target_link_is_replaced_not_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let elsewhere = tmp.path().join("elsewhere");
        fs::create_dir(&elsewhere).unwrap();
        let target = tmp.path().join("t");
        std::os::unix::fs::symlink(&elsewhere, &target).unwrap();
        for kind in [DownloadKind::File { name: "f" }, DownloadKind::Directory] {
            let staged = StagedDownload::new(&target, kind).unwrap();
            let mut w = staged.writer();
            match kind {
                DownloadKind::Directory => {
                    put_dir(&mut w, &[], 0o755);
                    put_file(&mut w, &["g"], b"d").unwrap();
                }
                DownloadKind::File { .. } => {
                    put_file(&mut w, &[], b"f").unwrap();
                }
            }
            w.finish().unwrap();
            staged.commit().unwrap();
            assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 0, "{kind:?}");
        }
        assert_eq!(fs::read(target.join("g")).unwrap(), b"d");
        // A file into an existing real directory lands inside it.
        let staged = StagedDownload::new(&target, DownloadKind::File { name: "f" }).unwrap();
        let mut w = staged.writer();
        put_file(&mut w, &[], b"f").unwrap();
        w.finish().unwrap();
        staged.commit().unwrap();
        assert_eq!(fs::read(target.join("f")).unwrap(), b"f");
    }

    /// Three downloads into nested targets: the first leaves `d/l -> ../y/..` beside a real
    /// directory `y` (inside its tree), the second merges `y -> .` over that directory
    /// (inside too, so `l` now leads one level above the first tree), the third's target
    /// passes through `l`.
    #[test]
    fn a_chain_of_downloads_cannot_write_through_a_link_an_earlier_one_bent() {
        let tmp = tempfile::tempdir().unwrap();
        let t1 = tmp.path().join("d1/t1");
        let staged = StagedDownload::new(&t1, DownloadKind::Directory).unwrap();
        let mut w = staged.writer();
        put_dir(&mut w, &[], 0o755);
        put_dir(&mut w, &["y"], 0o755);
        put_dir(&mut w, &["d"], 0o755);
        w.put(
            "d/l",
            &s(&["d", "l"]),
            TreeEntry::Symlink { target: b"../y/.." },
        )
        .unwrap();
        w.finish().unwrap();
        staged.commit().unwrap();

        let staged = StagedDownload::new(&t1, DownloadKind::Directory).unwrap();
        let mut w = staged.writer();
        put_dir(&mut w, &[], 0o755);
        w.put("y", &s(&["y"]), TreeEntry::Symlink { target: b"." })
            .unwrap();
        w.finish().unwrap();
        staged.commit().unwrap();
        assert!(fs::symlink_metadata(t1.join("y"))
            .unwrap()
            .file_type()
            .is_symlink());

        let target = t1.join("d/l/escaped");
        let result = StagedDownload::new(&target, DownloadKind::File { name: "escaped" }).and_then(
            |staged| {
                let mut w = staged.writer();
                put_file(&mut w, &[], b"x")?;
                w.finish()?;
                staged.commit()
            },
        );
        let err = result.unwrap_err();
        assert!(matches!(&err, Error::Transfer { .. }), "{err}");
        assert!(err.to_string().contains("climbs"), "{err}");
        assert!(!tmp.path().join("d1/escaped").exists(), "written outside");
        let left: Vec<_> = fs::read_dir(tmp.path().join("d1"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["t1"], "nothing staged outside either");
    }

    /// The caller's own links are followed: an absolute one, and a relative one that stays
    /// below its directory.
    #[test]
    fn targets_through_links_that_stay_below_their_directory_are_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real/inner");
        fs::create_dir_all(&real).unwrap();
        std::os::unix::fs::symlink(&real, tmp.path().join("abs")).unwrap();
        std::os::unix::fs::symlink("real/./inner", tmp.path().join("rel")).unwrap();
        for via in ["abs", "rel"] {
            let target = tmp.path().join(via).join(format!("f-{via}"));
            let staged = StagedDownload::new(&target, DownloadKind::File { name: "f" }).unwrap();
            let mut w = staged.writer();
            put_file(&mut w, &[], b"x").unwrap();
            w.finish().unwrap();
            staged.commit().unwrap();
            assert_eq!(fs::read(real.join(format!("f-{via}"))).unwrap(), b"x");
        }
        // A relative link that climbs out of its own directory is refused, wherever it is.
        std::os::unix::fs::symlink("../real", real.join("up")).unwrap();
        let err = StagedDownload::new(&real.join("up/g"), DownloadKind::Directory).unwrap_err();
        assert!(matches!(&err, Error::Transfer { .. }), "{err}");
    }

    /// A merge keeps links as stored, also one that climbs out through a link already in
    /// the target (`a -> .` there, `d/m -> ../a/..` here); no later download is steered
    /// through either.
    #[test]
    fn a_merged_link_is_kept_and_never_written_through() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("t");
        fs::create_dir(&target).unwrap();
        std::os::unix::fs::symlink(".", target.join("a")).unwrap();
        let staged = StagedDownload::new(&target, DownloadKind::Directory).unwrap();
        let mut w = staged.writer();
        put_dir(&mut w, &[], 0o755);
        put_dir(&mut w, &["d"], 0o755);
        w.put(
            "d/m",
            &s(&["d", "m"]),
            TreeEntry::Symlink { target: b"../a/.." },
        )
        .unwrap();
        w.put(
            "abs",
            &s(&["abs"]),
            TreeEntry::Symlink {
                target: tmp.path().as_os_str().as_encoded_bytes(),
            },
        )
        .unwrap();
        w.finish().unwrap();
        staged.commit().unwrap();
        assert_eq!(
            fs::read_link(target.join("d/m")).unwrap(),
            Path::new("../a/..")
        );
        assert_eq!(fs::read_link(target.join("abs")).unwrap(), tmp.path());
        for through in ["d/m/escaped", "abs/escaped"] {
            let err = StagedDownload::new(&target.join(through), DownloadKind::File { name: "f" })
                .unwrap_err();
            assert!(matches!(&err, Error::Transfer { .. }), "{through}: {err}");
        }
        assert!(!tmp.path().join("escaped").exists());
    }

    /// An absolute link on the target's way is followed only while it leads below the
    /// directory holding it.
    #[test]
    fn an_absolute_link_leading_out_of_its_directory_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        let tree = tmp.path().join("tree");
        fs::create_dir_all(&outside).unwrap();
        fs::create_dir_all(tree.join("sub/deep")).unwrap();
        std::os::unix::fs::symlink(&outside, tree.join("out")).unwrap();
        std::os::unix::fs::symlink(tree.join("sub/deep"), tree.join("down")).unwrap();
        // Through a link below that leads out again: judged at each hop.
        std::os::unix::fs::symlink(&outside, tree.join("sub/deep/back")).unwrap();
        std::os::unix::fs::symlink(tree.join("sub/deep/back"), tree.join("sub/hop")).unwrap();
        assert_eq!(
            resolve_host_target(&tree.join("down/f")).unwrap(),
            tree.join("sub/deep/f")
        );
        for bad in ["out/f", "sub/hop/f", "down/back/f"] {
            let err = resolve_host_target(&tree.join(bad)).unwrap_err();
            assert!(
                matches!(&err, Error::Transfer { reason, .. } if reason.contains("leads out")),
                "{bad}: {err}"
            );
        }
        // The last component is never followed, so a link there is no way out.
        assert_eq!(
            resolve_host_target(&tree.join("out")).unwrap(),
            tree.join("out")
        );
    }
}
