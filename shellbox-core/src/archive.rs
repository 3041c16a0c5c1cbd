//! Tar packing and safe unpacking for file transfers.
//!
//! Backends that move files as tar archives (Docker's archive endpoints, a `tar` run inside
//! a guest) share these two halves:
//!
//! - [`pack_path`] writes a host file or directory into a tar stream: modes kept, owners set
//!   to root (uid/gid 0), symlinks stored as symlinks (never followed), contents streamed
//!   (a large file never sits in memory).
//! - [`unpack_safe`] extracts an untrusted tar stream into a host directory and refuses any
//!   entry that would land outside it: absolute names, `..` components, symlinks whose
//!   target leaves it, hard links to outside paths, and writes through a symlink already on
//!   disk. Refusals are [`Error::Transfer`].
//!
//! Both are blocking (`std::io`); async callers run them on a blocking thread.

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::Error;

/// Mode bits kept when packing and unpacking: permissions and the sticky bit (set-uid and
/// set-gid bits are dropped on unpack).
const PACK_MODE_MASK: u32 = 0o7777;
const UNPACK_MODE_MASK: u32 = 0o1777;

/// Writes `source` (a host file, directory or symlink; not followed) into a tar stream on
/// `writer` and returns the writer after the archive's end marker.
///
/// `root_name` is the entry name of `source` itself, e.g. `"data"` gives `data` for a file
/// or `data/`, `data/a.txt`, ... for a directory. `None` writes a directory's *contents* at
/// the top level with no entry for the directory itself (a file then is an error).
/// Entries are sorted by name, owned by uid/gid 0, keep their mode bits (`0o7777`) and
/// modification time. A socket, FIFO or device file anywhere in the tree is an error
/// ([`SPECIAL_FILE_REFUSAL`], RULES 4): it is never opened, so it cannot block the packer.
///
/// # Errors
/// [`Error::NotFound`] when `source` does not exist, [`Error::InvalidInput`] for a bad
/// `root_name` (empty, absolute, `.`/`..` components) or `None` with a non-directory,
/// [`Error::Transfer`] for a special file, [`Error::Io`] for read and write failures.
pub fn pack_path<W: Write>(source: &Path, root_name: Option<&str>, writer: W) -> Result<W, Error> {
    let mut builder = tar::Builder::new(writer);
    builder.follow_symlinks(false);
    append_path_with(&mut builder, source, root_name, true)?;
    builder
        .into_inner()
        .map_err(|e| Error::io("finish tar archive", e))
}

/// Appends `source` to an open tar `builder` as [`pack_path`] does, without writing the
/// end-of-archive marker, so a caller can add more entries (e.g. a Dockerfile kept outside a
/// build context). Unlike [`pack_path`], sockets, FIFOs and device files *inside* a
/// directory are skipped (as `docker build` skips them in a context).
///
/// # Errors
/// As [`pack_path`].
pub fn append_path<W: Write>(
    builder: &mut tar::Builder<W>,
    source: &Path,
    root_name: Option<&str>,
) -> Result<(), Error> {
    append_path_with(builder, source, root_name, false)
}

fn append_path_with<W: Write>(
    builder: &mut tar::Builder<W>,
    source: &Path,
    root_name: Option<&str>,
    strict: bool,
) -> Result<(), Error> {
    let meta = match fs::symlink_metadata(source) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(Error::not_found(source.display().to_string()))
        }
        Err(e) => return Err(Error::io(format!("stat {}", source.display()), e)),
    };
    if let Some(name) = root_name {
        let ok = !name.is_empty()
            && !name.starts_with('/')
            && !name.contains('\0')
            && name
                .split('/')
                .filter(|c| !c.is_empty())
                .all(|c| c != "." && c != "..");
        if !ok {
            return Err(Error::invalid(format!("bad archive entry name {name:?}")));
        }
    }
    match root_name {
        Some(name) => append_tree(
            builder,
            source,
            &meta,
            name.trim_end_matches('/'),
            true,
            strict,
        )?,
        None => {
            if !meta.is_dir() {
                return Err(Error::invalid(format!(
                    "{} is not a directory, so it needs an entry name",
                    source.display()
                )));
            }
            append_children(builder, source, "", strict)?;
        }
    }
    Ok(())
}

fn io_at(path: &Path, what: &str) -> impl FnOnce(io::Error) -> Error {
    let operation = format!("{what} {}", path.display());
    move |e| Error::io(operation, e)
}

fn base_header(meta: &fs::Metadata, kind: tar::EntryType) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(meta.mode() & PACK_MODE_MASK);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(meta.mtime().max(0) as u64);
    header.set_size(0);
    header
}

fn append_tree<W: Write>(
    builder: &mut tar::Builder<W>,
    path: &Path,
    meta: &fs::Metadata,
    name: &str,
    is_root: bool,
    strict: bool,
) -> Result<(), Error> {
    let ft = meta.file_type();
    if ft.is_symlink() {
        let link = fs::read_link(path).map_err(io_at(path, "read link"))?;
        let mut header = base_header(meta, tar::EntryType::Symlink);
        builder
            .append_link(&mut header, name, &link)
            .map_err(io_at(path, "pack symlink"))?;
    } else if ft.is_dir() {
        let mut header = base_header(meta, tar::EntryType::Directory);
        builder
            .append_data(&mut header, format!("{name}/"), io::empty())
            .map_err(io_at(path, "pack directory"))?;
        append_children(builder, path, name, strict)?;
    } else if ft.is_file() {
        let mut header = base_header(meta, tar::EntryType::Regular);
        header.set_size(meta.len());
        let file = open_regular(path)?;
        // Guard against the file changing size while it is read: exactly `len` bytes go in.
        let reader = ExactLen {
            inner: file,
            remaining: meta.len(),
        };
        builder
            .append_data(&mut header, name, reader)
            .map_err(io_at(path, "pack file"))?;
    } else if is_root || strict {
        return Err(Error::transfer(
            path.display().to_string(),
            SPECIAL_FILE_REFUSAL,
        ));
    } else {
        tracing::debug!(path = %path.display(), "skipping special file while packing");
    }
    Ok(())
}

fn append_children<W: Write>(
    builder: &mut tar::Builder<W>,
    dir: &Path,
    prefix: &str,
    strict: bool,
) -> Result<(), Error> {
    let mut names: Vec<_> = fs::read_dir(dir)
        .map_err(io_at(dir, "read directory"))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<_, _>>()
        .map_err(io_at(dir, "read directory"))?;
    names.sort();
    for file_name in names {
        let child = dir.join(&file_name);
        let Some(file_name) = file_name.to_str() else {
            return Err(Error::transfer(
                child.display().to_string(),
                "file name is not UTF-8",
            ));
        };
        let name = if prefix.is_empty() {
            file_name.to_string()
        } else {
            format!("{prefix}/{file_name}")
        };
        let meta = fs::symlink_metadata(&child).map_err(io_at(&child, "stat"))?;
        append_tree(builder, &child, &meta, &name, false, strict)?;
    }
    Ok(())
}

/// Opens a file that was a regular file when it was listed, without blocking if it has been
/// swapped for a FIFO since (`O_NONBLOCK`), and checks it is still a regular file.
fn open_regular(path: &Path) -> Result<fs::File, Error> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)
        .map_err(io_at(path, "open"))?;
    let meta = file.metadata().map_err(io_at(path, "stat"))?;
    if !meta.is_file() {
        return Err(Error::transfer(
            path.display().to_string(),
            SPECIAL_FILE_REFUSAL,
        ));
    }
    Ok(file)
}

/// Checks, before anything is sent, that [`pack_path`] can pack `source` whole: every entry
/// is a regular file, directory or symlink and every regular file can be opened for
/// reading. A backend that cannot stage an upload on the guest side (Docker's archive
/// endpoint extracts entry by entry) calls it first, so a special or unreadable file deep
/// in the tree fails the upload before the first entry lands.
///
/// # Errors
/// [`Error::NotFound`] when `source` does not exist, [`Error::Transfer`] for a special file
/// ([`SPECIAL_FILE_REFUSAL`]) or a tree deeper than 4096 levels, [`Error::Io`] for a
/// directory or file that cannot be read.
pub fn check_packable(source: &Path) -> Result<(), Error> {
    fn walk(path: &Path, depth: usize) -> Result<(), Error> {
        if depth > 4096 {
            return Err(Error::transfer(
                path.display().to_string(),
                "directories nest too deep",
            ));
        }
        let meta = fs::symlink_metadata(path).map_err(io_at(path, "stat"))?;
        let ft = meta.file_type();
        if ft.is_symlink() {
            Ok(())
        } else if ft.is_file() {
            open_regular(path).map(drop)
        } else if ft.is_dir() {
            for entry in fs::read_dir(path).map_err(io_at(path, "read directory"))? {
                let entry = entry.map_err(io_at(path, "read directory"))?;
                walk(&entry.path(), depth + 1)?;
            }
            Ok(())
        } else {
            Err(Error::transfer(
                path.display().to_string(),
                SPECIAL_FILE_REFUSAL,
            ))
        }
    }
    match fs::metadata(source) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            Err(Error::not_found(source.display().to_string()))
        }
        Err(e) => Err(Error::io(format!("stat {}", source.display()), e)),
        // A symlink given as the source itself is followed.
        Ok(m) if m.is_dir() || m.is_file() => walk(
            &fs::canonicalize(source).map_err(io_at(source, "resolve"))?,
            0,
        ),
        Ok(_) => Err(Error::transfer(
            source.display().to_string(),
            SPECIAL_FILE_REFUSAL,
        )),
    }
}

/// Reads exactly `remaining` bytes: pads with zeros if the file shrank, stops if it grew.
struct ExactLen<R> {
    inner: R,
    remaining: u64,
}

impl<R: Read> Read for ExactLen<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.remaining == 0 {
            return Ok(0);
        }
        let max = buf.len().min(self.remaining as usize);
        let mut n = self.inner.read(&mut buf[..max])?;
        if n == 0 {
            buf[..max].fill(0);
            n = max;
        }
        self.remaining -= n as u64;
        Ok(n)
    }
}

/// How [`unpack_safe`] maps entry names to places under the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnpackLayout {
    /// Entries land under the target as named (`a/b` → `<target>/a/b`).
    AsIs,
    /// Every entry shares one top-level name, which stands for the target itself
    /// (`root` → `<target>`, `root/a` → `<target>/a`): the layout of Docker's
    /// `GET /containers/{id}/archive`. An entry under another top-level name is refused.
    /// The stream's first member must be that root, a directory or a regular file
    /// (REFERENCE 4.5), and an empty stream is refused.
    StripRoot,
}

/// What [`unpack_safe`] wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnpackSummary {
    /// Regular files written (hard links included).
    pub files: u64,
    /// Directories created or updated.
    pub directories: u64,
    /// Symlinks created.
    pub symlinks: u64,
    /// Bytes of file content written.
    pub bytes: u64,
    /// Entries skipped (always 0: special entries are refused, not skipped; kept so
    /// callers that read it still compile).
    pub skipped: u64,
}

/// The refusal of a special file (FIFO, socket, device) as a transfer source or inside a
/// transferred tree (RULES 4): reading one could block forever or never end.
pub const SPECIAL_FILE_REFUSAL: &str =
    "only regular files, directories and symlinks can be transferred";

/// How a [`TreeWriter`] judges the symlinks it writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SymlinkRule {
    /// A link must resolve inside the writer's target as the kernel would resolve it
    /// (absolute targets refused outright), judged as it lands and again at the end
    /// ([`unpack_safe`]'s rule).
    #[default]
    ResolveInside,
    /// A link is written as stored, whatever it points at (an absolute target, one that
    /// climbs out, a dangling one), as `tar` does: what downloads do (REFERENCE.md 4.5,
    /// "inner symlinks written as links even to absolute host paths"). Only an empty target
    /// and a link standing for the target itself are refused. The writer still never
    /// writes an entry through a link.
    AsStored,
}

/// One entry of a tree written by a [`TreeWriter`]; its place is given separately as
/// normal components relative to the writer's target (empty for the target itself).
pub enum TreeEntry<'a> {
    /// A directory with these mode bits (`0o1777` kept).
    Directory {
        /// Mode bits.
        mode: u32,
        /// Modification time, when known.
        mtime: Option<SystemTime>,
    },
    /// A regular file whose content is read from `data` to its end.
    File {
        /// The content.
        data: &'a mut dyn Read,
        /// Mode bits (`0o1777` kept: set-uid and set-gid dropped).
        mode: u32,
        /// Modification time, when known.
        mtime: Option<SystemTime>,
    },
    /// A symlink with this target text (judged by the writer's [`SymlinkRule`]).
    Symlink {
        /// The link's target, as stored.
        target: &'a [u8],
    },
    /// A hard link to a regular file written earlier, named by its components relative to
    /// the writer's target.
    HardLink {
        /// The earlier file.
        source: &'a [String],
    },
}

/// Writes an untrusted tree into a host directory entry by entry, refusing every entry that
/// would land outside it: the one implementation behind [`unpack_safe`] (tar streams) and
/// the local backend's downloads (trees walked through file descriptors).
///
/// Rules (each refusal is an [`Error::Transfer`] naming the entry):
/// - places are normal components (the caller refuses `..` and absolute names); no entry
///   may pass through a symlink on disk (one written before or one already there); an
///   existing symlink at an entry's own place is replaced, never written through;
/// - with [`SymlinkRule::ResolveInside`] (the default) a symlink's target must resolve
///   inside the target as the kernel would resolve it (absolute targets are refused
///   outright); each link is judged as it lands and again by [`finish`](Self::finish),
///   since a later link can change where an earlier one's `..` leads. With
///   [`SymlinkRule::AsStored`] links are written as stored (see
///   [`with_symlinks`](Self::with_symlinks));
/// - a hard link must name a regular file already under the target;
/// - with `rooted`, the first entry must be the target itself, a directory or a regular
///   file, and a tree without entries is refused (REFERENCE 4.5);
/// - modes are applied (`0o1777`; set-uid/set-gid dropped), directories' last so read-only
///   directories can still be filled; modification times are kept (a time the host cannot
///   represent is left at the time of writing); owners are not changed.
///
/// On any error, and when the writer is dropped before [`finish`](Self::finish) returned
/// `Ok` (a cancelled transfer), everything it created is removed again, so no entry — above
/// all no escaping symlink — is left behind. What it replaced in an existing directory stays
/// replaced: for all-or-nothing transfers write into a fresh staging directory
/// ([`crate::transfer::StagedDownload`]).
pub struct TreeWriter {
    target: PathBuf,
    /// Shown in errors (the caller's target, not a staging directory).
    label: String,
    rooted: bool,
    symlinks: SymlinkRule,
    entries: u64,
    summary: UnpackSummary,
    dir_modes: Vec<(PathBuf, u32, Option<SystemTime>)>,
    links: Vec<(String, Vec<String>)>,
    /// Everything created, in order, for the rollback.
    created: Created,
    done: bool,
    /// The parent (components under the target) last checked to be real directories all
    /// the way down: entries arrive grouped by directory, so most skip the walk. Forgotten
    /// whenever the writer removes anything.
    ready_parent: Option<Vec<String>>,
}

impl std::fmt::Debug for TreeWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TreeWriter")
            .field("target", &self.target)
            .field("entries", &self.entries)
            .finish_non_exhaustive()
    }
}

impl TreeWriter {
    /// A writer into `target` (created with its parents when the first entry needs it).
    /// `rooted`: the first entry must be `target` itself, a directory or a regular file.
    pub fn new(target: &Path, rooted: bool) -> Self {
        Self {
            target: target.to_path_buf(),
            label: target.display().to_string(),
            rooted,
            symlinks: SymlinkRule::default(),
            entries: 0,
            summary: UnpackSummary::default(),
            dir_modes: Vec::new(),
            links: Vec::new(),
            created: Created::default(),
            done: false,
            ready_parent: None,
        }
    }

    /// Names `label` instead of the target path in refusals (e.g. the caller's download
    /// target while the writer fills a staging directory).
    pub fn with_label(mut self, label: impl Into<String>) -> Self {
        self.label = label.into();
        self
    }

    /// Judges the symlinks it writes by `rule` (default [`SymlinkRule::ResolveInside`]).
    pub fn with_symlinks(mut self, rule: SymlinkRule) -> Self {
        self.symlinks = rule;
        self
    }

    /// An [`Error::Transfer`] about entry `entry` of this tree.
    pub fn refusal(&self, entry: &str, why: &str) -> Error {
        Error::transfer(
            self.label.clone(),
            format!("archive entry {entry:?}: {why}"),
        )
    }

    /// Writes one entry at `rel` (normal components under the target; empty for the target
    /// itself). `name` names the entry in errors.
    ///
    /// # Errors
    /// [`Error::Transfer`] for a refused entry, [`Error::Io`] when the host refuses a write;
    /// after an error the writer has removed what it created and refuses further entries.
    pub fn put(&mut self, name: &str, rel: &[String], entry: TreeEntry<'_>) -> Result<(), Error> {
        if self.done {
            return Err(self.refusal(name, "the tree was already finished or refused"));
        }
        let result = self.put_inner(name, rel, entry);
        if result.is_err() {
            self.rollback();
        }
        result
    }

    fn put_inner(&mut self, name: &str, rel: &[String], entry: TreeEntry<'_>) -> Result<(), Error> {
        let first = self.entries == 0;
        self.entries += 1;
        if let Some(bad) = rel.iter().find(|c| {
            c.is_empty() || *c == "." || *c == ".." || c.contains('/') || c.contains('\0')
        }) {
            return Err(self.refusal(name, &format!("bad path component {bad:?}")));
        }
        if self.rooted && first {
            let root_kind = matches!(entry, TreeEntry::Directory { .. } | TreeEntry::File { .. });
            if !rel.is_empty() || !root_kind {
                return Err(self.refusal(
                    name,
                    "the first member must be the transferred directory itself or a regular file",
                ));
            }
        }
        let dest = join_rel(&self.target, rel);
        self.prepare_parents(rel).map_err(|e| match e {
            PrepError::Symlink(p) => self.refusal(
                name,
                &format!("its path passes through the symlink {}", p.display()),
            ),
            PrepError::Io(p, e) => Error::io(format!("create directory {}", p.display()), e),
        })?;
        // A new file is created with `O_EXCL` first (which never follows a link) and only
        // looks at what is there when that fails: one lookup less per file.
        let existing = if matches!(entry, TreeEntry::File { .. }) {
            None
        } else {
            fs::symlink_metadata(&dest).ok()
        };
        match entry {
            TreeEntry::Directory { mode, mtime } => {
                match &existing {
                    Some(m) if m.is_dir() => {}
                    Some(m) if m.file_type().is_symlink() && rel.is_empty() => {
                        // The target itself may be a symlink the caller chose.
                        if !dest.is_dir() {
                            return Err(self.refusal(name, "target is not a directory"));
                        }
                    }
                    Some(_) => {
                        self.replace(&dest)?;
                        self.create_dir(&dest)?;
                    }
                    None => self.create_dir(&dest)?,
                }
                // Owner-writable while filling; the real mode is applied at the end.
                if let Ok(m) = fs::metadata(&dest) {
                    let cur = m.permissions().mode();
                    if cur & 0o700 != 0o700 {
                        let _ = fs::set_permissions(&dest, fs::Permissions::from_mode(cur | 0o700));
                    }
                }
                self.dir_modes.push((dest, mode & UNPACK_MODE_MASK, mtime));
                self.summary.directories += 1;
            }
            TreeEntry::Symlink { target: link } => {
                let judged = self.symlinks == SymlinkRule::ResolveInside;
                if judged {
                    check_symlink_target(rel, link).map_err(|why| self.refusal(name, why))?;
                } else if link.is_empty() || link.contains(&0) {
                    return Err(self.refusal(name, "empty symlink target"));
                }
                if rel.is_empty() {
                    return Err(self.refusal(
                        name,
                        "the archive root is a symlink, which would replace the target",
                    ));
                }
                if existing.is_some() {
                    self.replace(&dest)?;
                }
                let link_path = std::ffi::OsStr::from_bytes(link);
                std::os::unix::fs::symlink(link_path, &dest)
                    .map_err(io_at(&dest, "create symlink"))?;
                self.created.add(dest.clone(), false);
                if judged {
                    // Judged where it landed (through the links already there), and again
                    // once every entry is in.
                    if let Err(why) = resolves_inside(&self.target, rel) {
                        return Err(self.refusal(name, why));
                    }
                    self.links.push((name.to_string(), rel.to_vec()));
                }
                self.summary.symlinks += 1;
            }
            TreeEntry::HardLink { source } => {
                if source.iter().any(|c| c.is_empty() || c == "." || c == "..") {
                    return Err(self.refusal(name, "hard link source leaves the target"));
                }
                let src = join_rel(&self.target, source);
                if !parents_are_real_dirs(&self.target, source) {
                    return Err(self.refusal(name, "hard link source passes through a symlink"));
                }
                let src_meta = fs::symlink_metadata(&src)
                    .map_err(|_| self.refusal(name, "hard link source does not exist"))?;
                if !src_meta.is_file() || source.is_empty() {
                    return Err(self.refusal(name, "hard link source is not a regular file"));
                }
                if existing.is_some() {
                    self.replace(&dest)?;
                }
                fs::hard_link(&src, &dest).map_err(io_at(&dest, "create hard link"))?;
                self.created.add(dest, false);
                self.summary.files += 1;
            }
            TreeEntry::File { data, mode, mtime } => {
                let create = || {
                    fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(&dest)
                };
                let mut file = match create() {
                    Ok(f) => f,
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                        let is_dir = fs::symlink_metadata(&dest).is_ok_and(|m| m.is_dir());
                        if rel.is_empty() && is_dir {
                            return Err(self
                                .refusal(name, "would replace the target directory with a file"));
                        }
                        self.replace(&dest)?;
                        create().map_err(io_at(&dest, "create"))?
                    }
                    Err(e) => return Err(io_at(&dest, "create")(e)),
                };
                self.created.add(dest.clone(), false);
                let n =
                    io::copy(data, &mut file).map_err(|e| self.refusal(name, &e.to_string()))?;
                self.summary.bytes += n;
                file.set_permissions(fs::Permissions::from_mode(mode & UNPACK_MODE_MASK))
                    .map_err(io_at(&dest, "chmod"))?;
                if let Some(t) = mtime {
                    let _ = file.set_modified(t);
                }
                self.summary.files += 1;
            }
        }
        Ok(())
    }

    /// Judges every link again now that the whole tree is there, then applies the
    /// directories' modes (deepest first) and times.
    ///
    /// # Errors
    /// [`Error::Transfer`] for a link that resolves outside the target, or (rooted) for a
    /// tree without entries; [`Error::Io`] when a mode cannot be set. Everything created is
    /// removed again on error.
    pub fn finish(mut self) -> Result<UnpackSummary, Error> {
        if self.done {
            return Err(self.refusal("", "the tree was already refused"));
        }
        let result = self.finish_inner();
        match result {
            Ok(()) => {
                self.done = true;
                Ok(std::mem::take(&mut self.summary))
            }
            Err(e) => {
                self.rollback();
                Err(e)
            }
        }
    }

    fn finish_inner(&mut self) -> Result<(), Error> {
        if self.rooted && self.entries == 0 {
            return Err(Error::transfer(
                self.label.clone(),
                "the archive is empty (no directory or file to transfer)",
            ));
        }
        // `..` after a component that is itself a link climbs from where that link leads
        // (`a -> .`, `m -> a/..` leaves the target), which a textual check cannot see.
        for (name, rel) in &self.links {
            if let Err(why) = resolves_inside(&self.target, rel) {
                return Err(self.refusal(name, why));
            }
        }
        // Deepest first, so a read-only parent is locked only after its children are in.
        let mut dirs = std::mem::take(&mut self.dir_modes);
        dirs.sort_by_key(|(p, _, _)| std::cmp::Reverse(p.components().count()));
        for (dir, mode, mtime) in dirs {
            fs::set_permissions(&dir, fs::Permissions::from_mode(mode))
                .map_err(io_at(&dir, "chmod"))?;
            if let Some(t) = mtime {
                if let Ok(f) = fs::File::open(&dir) {
                    let _ = f.set_modified(t);
                }
            }
        }
        Ok(())
    }

    /// Removes what this writer created, newest first (symlinks, files, then the
    /// directories that held them), and refuses further entries.
    fn rollback(&mut self) {
        self.done = true;
        while let Some(p) = self.created.order.pop() {
            match fs::symlink_metadata(&p) {
                Ok(m) if m.is_dir() => {
                    make_tree_writable(&p);
                    let _ = crate::remove_tree(&p);
                }
                Ok(_) => {
                    let _ = fs::remove_file(&p);
                }
                Err(_) => {}
            }
        }
    }

    fn create_dir(&mut self, dir: &Path) -> Result<(), Error> {
        fs::create_dir(dir).map_err(io_at(dir, "create directory"))?;
        self.created.add(dir.to_path_buf(), true);
        Ok(())
    }

    /// Makes sure every parent of `target/rel` below `target` is a real directory
    /// (creating missing ones), never a symlink; creates `target` (or, for the target
    /// itself, its parent) with missing parents.
    fn prepare_parents(&mut self, rel: &[String]) -> Result<(), PrepError> {
        if rel.is_empty() {
            // The entry is the target itself (a file or a directory): only its parent must exist.
            if let Some(parent) = self.target.parent().filter(|p| !p.as_os_str().is_empty()) {
                let parent = parent.to_path_buf();
                create_dir_all_tracked(&parent, &mut self.created)?;
            }
            return Ok(());
        }
        let parent_rel = &rel[..rel.len() - 1];
        if self.ready_parent.as_deref() == Some(parent_rel) {
            return Ok(());
        }
        if fs::symlink_metadata(&self.target).is_err() {
            let target = self.target.clone();
            create_dir_all_tracked(&target, &mut self.created)?;
        }
        let mut p = self.target.clone();
        for c in parent_rel {
            p.push(c);
            match fs::symlink_metadata(&p) {
                Ok(m) if m.file_type().is_symlink() => return Err(PrepError::Symlink(p)),
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    return Err(PrepError::Io(
                        p.clone(),
                        io::Error::new(io::ErrorKind::AlreadyExists, "not a directory"),
                    ))
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    fs::create_dir(&p).map_err(|e| PrepError::Io(p.clone(), e))?;
                    self.created.add(p.clone(), true);
                }
                Err(e) => return Err(PrepError::Io(p, e)),
            }
        }
        self.ready_parent = Some(parent_rel.to_vec());
        Ok(())
    }

    /// Removes what stands at `dest` so an entry can replace it (never following a link).
    fn replace(&mut self, dest: &Path) -> Result<(), Error> {
        self.ready_parent = None;
        remove_path(dest).map_err(io_at(dest, "replace"))
    }
}

impl Drop for TreeWriter {
    /// A writer dropped before it finished (a cancelled or failed transfer) removes what it
    /// created.
    fn drop(&mut self) {
        if !self.done {
            self.rollback();
        }
    }
}

/// What a [`TreeWriter`] created, for its rollback: only the outermost places (everything
/// under a directory it created is its own and goes with that directory), so the record
/// stays small however many entries a tree has.
#[derive(Debug, Default)]
struct Created {
    /// In creation order.
    order: Vec<PathBuf>,
    dirs: std::collections::HashSet<PathBuf>,
}

impl Created {
    fn add(&mut self, path: PathBuf, is_dir: bool) {
        if path.ancestors().skip(1).any(|a| self.dirs.contains(a)) {
            return;
        }
        if is_dir {
            self.dirs.insert(path.clone());
        }
        self.order.push(path);
    }
}

/// Creates `dir` and its missing parents, recording each one made (outermost first).
fn create_dir_all_tracked(dir: &Path, created: &mut Created) -> Result<(), PrepError> {
    let mut missing = Vec::new();
    let mut cur = Some(dir);
    while let Some(p) = cur.filter(|p| !p.as_os_str().is_empty()) {
        if fs::symlink_metadata(p).is_ok() {
            break;
        }
        missing.push(p.to_path_buf());
        cur = p.parent();
    }
    for p in missing.into_iter().rev() {
        match fs::create_dir(&p) {
            Ok(()) => created.add(p, true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && p.is_dir() => {}
            Err(e) => return Err(PrepError::Io(p, e)),
        }
    }
    Ok(())
}

/// Gives every directory under `dir` (not following symlinks) owner rwx, so it can be
/// emptied.
pub(crate) fn make_tree_writable(dir: &Path) {
    let Ok(meta) = fs::symlink_metadata(dir) else {
        return;
    };
    if !meta.is_dir() {
        return;
    }
    let mode = meta.permissions().mode();
    if mode & 0o700 != 0o700 {
        let _ = fs::set_permissions(dir, fs::Permissions::from_mode(mode | 0o700));
    }
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                make_tree_writable(&entry.path());
            }
        }
    }
}

/// A tar header's modification time as a host time, `None` when the host cannot represent
/// it (a GNU base-256 value of 2⁶³ seconds or more overflows `SystemTime`).
fn header_mtime(header: &tar::Header) -> Option<SystemTime> {
    let secs = header.mtime().ok()?;
    UNIX_EPOCH.checked_add(std::time::Duration::from_secs(secs))
}

/// Extracts an untrusted tar stream into `target` (created with its parents if missing),
/// refusing every entry that would land outside it, with the rules of [`TreeWriter`].
///
/// Also refused: absolute entry names and `..` components, hard links with an absolute or
/// climbing name, device files, FIFOs and other special members
/// ([`SPECIAL_FILE_REFUSAL`]), and with [`UnpackLayout::StripRoot`] a stream whose first
/// member is not the root (a directory or a regular file) or that is empty. On any error
/// everything the unpack created is removed again (what it replaced in an existing
/// directory stays replaced).
///
/// # Errors
/// [`Error::Transfer`] for refused entries or a malformed archive, [`Error::Io`] when the
/// host refuses a write.
pub fn unpack_safe<R: Read>(
    reader: R,
    target: &Path,
    layout: UnpackLayout,
) -> Result<UnpackSummary, Error> {
    unpack_into(
        reader,
        TreeWriter::new(target, layout == UnpackLayout::StripRoot),
        layout,
    )
}

/// [`unpack_safe`] into a writer the caller made (e.g. one with a label).
pub(crate) fn unpack_into<R: Read>(
    reader: R,
    mut writer: TreeWriter,
    layout: UnpackLayout,
) -> Result<UnpackSummary, Error> {
    let mut archive = tar::Archive::new(reader);
    let mut root: Option<String> = None;
    let bad_archive = |w: &TreeWriter, e: io::Error| {
        Error::transfer(w.label.clone(), format!("bad archive: {e}"))
    };
    let entries = archive.entries().map_err(|e| bad_archive(&writer, e))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| bad_archive(&writer, e))?;
        let raw_name = entry.path_bytes().into_owned();
        let name = String::from_utf8_lossy(&raw_name).into_owned();
        let kind = entry.header().entry_type();
        if matches!(
            kind,
            tar::EntryType::XGlobalHeader | tar::EntryType::XHeader
        ) {
            continue;
        }
        let rel = relative_components(&raw_name).map_err(|why| writer.refusal(&name, why))?;
        let rel = match layout {
            UnpackLayout::AsIs => rel,
            UnpackLayout::StripRoot => {
                let Some((first, rest)) = rel.split_first() else {
                    return Err(writer.refusal(&name, "empty name"));
                };
                match &root {
                    None => root = Some(first.clone()),
                    Some(r) if r == first => {}
                    Some(r) => {
                        return Err(
                            writer.refusal(&name, &format!("not under the archive's root {r:?}"))
                        )
                    }
                }
                rest.to_vec()
            }
        };
        let mode = entry.header().mode().unwrap_or(0o644);
        let mtime = header_mtime(entry.header());
        match kind {
            tar::EntryType::Directory => {
                writer.put(&name, &rel, TreeEntry::Directory { mode, mtime })?
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => writer.put(
                &name,
                &rel,
                TreeEntry::File {
                    data: &mut entry,
                    mode,
                    mtime,
                },
            )?,
            tar::EntryType::Symlink => {
                let link = entry
                    .link_name_bytes()
                    .ok_or_else(|| writer.refusal(&name, "symlink without a target"))?
                    .into_owned();
                writer.put(&name, &rel, TreeEntry::Symlink { target: &link })?
            }
            tar::EntryType::Link => {
                let link = entry
                    .link_name_bytes()
                    .ok_or_else(|| writer.refusal(&name, "hard link without a source"))?
                    .into_owned();
                let mut link_rel = relative_components(&link)
                    .map_err(|why| writer.refusal(&name, &format!("hard link source: {why}")))?;
                if layout == UnpackLayout::StripRoot {
                    match (link_rel.split_first(), &root) {
                        (Some((first, _)), Some(r)) if first == r => {
                            link_rel.remove(0);
                        }
                        _ => {
                            return Err(writer
                                .refusal(&name, "hard link source is outside the archive root"))
                        }
                    }
                }
                writer.put(&name, &rel, TreeEntry::HardLink { source: &link_rel })?
            }
            _ => return Err(writer.refusal(&name, SPECIAL_FILE_REFUSAL)),
        }
    }
    writer.finish()
}

/// Splits a tar entry name into normal components, refusing absolute names and `..`.
fn relative_components(raw: &[u8]) -> Result<Vec<String>, &'static str> {
    if raw.contains(&0) {
        return Err("name contains a NUL byte");
    }
    let text = std::str::from_utf8(raw).map_err(|_| "name is not UTF-8")?;
    if text.starts_with('/') {
        return Err("absolute name");
    }
    let mut out = Vec::new();
    for c in Path::new(text).components() {
        match c {
            Component::Normal(s) => out.push(s.to_string_lossy().into_owned()),
            Component::CurDir => {}
            Component::ParentDir => return Err("name contains '..'"),
            Component::RootDir | Component::Prefix(_) => return Err("absolute name"),
        }
    }
    Ok(out)
}

fn join_rel(target: &Path, rel: &[String]) -> PathBuf {
    let mut p = target.to_path_buf();
    for c in rel {
        p.push(c);
    }
    p
}

/// A symlink at `rel` pointing at `link` must stay inside the root, judged lexically.
fn check_symlink_target(rel: &[String], link: &[u8]) -> Result<(), &'static str> {
    let text = std::str::from_utf8(link).map_err(|_| "symlink target is not UTF-8")?;
    if text.is_empty() {
        return Err("empty symlink target");
    }
    if text.starts_with('/') {
        return Err("symlink target is absolute");
    }
    // Depth of the directory holding the link, relative to the root.
    let mut depth: i64 = rel.len() as i64 - 1;
    if depth < 0 {
        return Err("symlink at the archive root");
    }
    for c in text.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return Err("symlink target leaves the target directory");
                }
            }
            _ => depth += 1,
        }
    }
    Ok(())
}

/// Checks that the symlink at `root/link` (`link` relative, e.g. `a/b/l`) resolves inside
/// `root` as the kernel would resolve it, through the other symlinks below `root`: for a
/// caller that moved an unpacked tree into a directory that already held links (a merge).
///
/// # Errors
/// [`Error::InvalidInput`] when `link` has no normal component or a `..`;
/// [`Error::Transfer`] naming the link when it cannot be read, leaves `root`, is absolute
/// (or leads through an absolute link), or follows more than 40 links.
pub fn check_symlink_inside(root: &Path, link: &Path) -> Result<(), Error> {
    let mut rel = Vec::new();
    for c in link.components() {
        match c {
            Component::Normal(s) => rel.push(s.to_string_lossy().into_owned()),
            Component::CurDir => {}
            _ => return Err(Error::invalid(format!("bad relative link path {link:?}"))),
        }
    }
    if rel.is_empty() {
        return Err(Error::invalid(format!("bad relative link path {link:?}")));
    }
    resolves_inside(root, &rel)
        .map_err(|why| Error::transfer(root.join(link).display().to_string(), why))
}

/// The most symlinks [`resolves_inside`] follows for one link (Linux's own limit).
const MAX_LINK_HOPS: u32 = 40;

/// Resolves the symlink at `target/rel` the way the kernel would, following every symlink
/// on disk below `target` that its target passes through, and fails if the walk leaves
/// `target`, meets an absolute link, or follows more than [`MAX_LINK_HOPS`] links.
fn resolves_inside(target: &Path, rel: &[String]) -> Result<(), &'static str> {
    let mut hops = 0;
    let link = fs::read_link(join_rel(target, rel)).map_err(|_| "symlink cannot be read back")?;
    let start = rel[..rel.len().saturating_sub(1)].to_vec();
    walk_link(target, start, &link, &mut hops).map(|_| ())
}

fn walk_link(
    target: &Path,
    mut stack: Vec<String>,
    link: &Path,
    hops: &mut u32,
) -> Result<Vec<String>, &'static str> {
    *hops += 1;
    if *hops > MAX_LINK_HOPS {
        return Err("too many levels of symbolic links");
    }
    let text = link.to_str().ok_or("symlink target is not UTF-8")?;
    if text.starts_with('/') {
        return Err("symlink target resolves to an absolute path");
    }
    for c in text.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                if stack.pop().is_none() {
                    return Err(
                        "symlink target leaves the target directory through another symlink",
                    );
                }
            }
            name => {
                stack.push(name.to_string());
                let here = join_rel(target, &stack);
                if let Ok(m) = fs::symlink_metadata(&here) {
                    if m.file_type().is_symlink() {
                        let next = fs::read_link(&here).map_err(|_| "symlink cannot be read")?;
                        stack.pop();
                        stack = walk_link(target, stack, &next, hops)?;
                    }
                }
            }
        }
    }
    Ok(stack)
}

enum PrepError {
    Symlink(PathBuf),
    Io(PathBuf, io::Error),
}

/// True when every parent of `target/rel` below `target` is a real directory (no symlink).
fn parents_are_real_dirs(target: &Path, rel: &[String]) -> bool {
    let mut p = target.to_path_buf();
    for c in &rel[..rel.len().saturating_sub(1)] {
        p.push(c);
        match fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() => {}
            _ => return false,
        }
    }
    true
}

fn remove_path(path: &Path) -> io::Result<()> {
    let m = fs::symlink_metadata(path)?;
    if m.is_dir() {
        crate::remove_tree(path)
    } else {
        fs::remove_file(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_with(entries: &[(&str, tar::EntryType, &[u8], Option<&str>)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, kind, data, link) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_mode(0o644);
            h.set_size(data.len() as u64);
            // Write names raw so unsafe ones are not rejected by the builder.
            {
                let gnu = h.as_gnu_mut().unwrap();
                gnu.name[..name.len()].copy_from_slice(name.as_bytes());
                if let Some(l) = link {
                    gnu.linkname[..l.len()].copy_from_slice(l.as_bytes());
                }
            }
            h.set_cksum();
            b.append(&h, *data).unwrap();
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn pack_then_unpack_keeps_tree_and_modes() {
        let src = tempfile::tempdir().unwrap();
        let d = src.path().join("top");
        fs::create_dir_all(d.join("sub")).unwrap();
        fs::write(d.join("a.txt"), b"hello").unwrap();
        fs::write(d.join("sub/run.sh"), b"#!/bin/sh\n").unwrap();
        fs::set_permissions(d.join("sub/run.sh"), fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(d.join("sub"), fs::Permissions::from_mode(0o710)).unwrap();
        fs::set_permissions(&d, fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink("a.txt", d.join("link")).unwrap();

        let data = pack_path(&d, Some("top"), Vec::new()).unwrap();
        let out = tempfile::tempdir().unwrap();
        let target = out.path().join("x/y");
        let s = unpack_safe(&data[..], &target, UnpackLayout::StripRoot).unwrap();
        assert_eq!(s.files, 2);
        assert_eq!(s.symlinks, 1);
        assert_eq!(fs::read(target.join("a.txt")).unwrap(), b"hello");
        let mode = |p: &Path| fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&target), 0o700);
        assert_eq!(mode(&target.join("sub")), 0o710);
        assert_eq!(mode(&target.join("sub/run.sh")), 0o755);
        assert_eq!(
            fs::read_link(target.join("link")).unwrap(),
            Path::new("a.txt")
        );

        // Contents only, into an existing directory.
        let flat = pack_path(&d, None, Vec::new()).unwrap();
        let out2 = tempfile::tempdir().unwrap();
        unpack_safe(&flat[..], out2.path(), UnpackLayout::AsIs).unwrap();
        assert_eq!(fs::read(out2.path().join("a.txt")).unwrap(), b"hello");

        // A single file as the archive root becomes the target file (parents created).
        let one = pack_path(&d.join("a.txt"), Some("a.txt"), Vec::new()).unwrap();
        let file_target = out.path().join("new/dir/copy.txt");
        unpack_safe(&one[..], &file_target, UnpackLayout::StripRoot).unwrap();
        assert_eq!(fs::read(&file_target).unwrap(), b"hello");

        assert!(matches!(
            pack_path(&src.path().join("missing"), Some("m"), Vec::new()),
            Err(Error::NotFound { .. })
        ));
        assert!(pack_path(&d, Some("../x"), Vec::new()).is_err());
    }

    #[test]
    fn refuses_escapes() {
        use tar::EntryType::*;
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("dotdot", tar_with(&[("../evil", Regular, b"x", None)])),
            ("absolute", tar_with(&[("/tmp/evil", Regular, b"x", None)])),
            ("abs link", tar_with(&[("l", Symlink, b"", Some("/etc"))])),
            (
                "climbing link",
                tar_with(&[("d/l", Symlink, b"", Some("../../x"))]),
            ),
            (
                "through link",
                tar_with(&[("l", Symlink, b"", Some(".")), ("l/f", Regular, b"x", None)]),
            ),
            (
                "hard link out",
                tar_with(&[("h", Link, b"", Some("../../etc/passwd"))]),
            ),
        ];
        for (what, data) in cases {
            let out = tempfile::tempdir().unwrap();
            let target = out.path().join("t");
            let err = unpack_safe(&data[..], &target, UnpackLayout::AsIs).unwrap_err();
            assert!(matches!(err, Error::Transfer { .. }), "{what}: {err}");
            assert!(!out.path().join("evil").exists(), "{what}");
        }
        // A link that stays inside is fine.
        let ok = tar_with(&[
            ("d/l", Symlink, b"", Some("../f")),
            ("f", Regular, b"x", None),
        ]);
        let out = tempfile::tempdir().unwrap();
        unpack_safe(&ok[..], out.path(), UnpackLayout::AsIs).unwrap();
        // StripRoot refuses a second top-level name.
        let two = tar_with(&[("a/f", Regular, b"x", None), ("b/f", Regular, b"x", None)]);
        let out = tempfile::tempdir().unwrap();
        assert!(unpack_safe(&two[..], out.path(), UnpackLayout::StripRoot).is_err());
    }

    /// Every symlink under `root` resolves (realpath) inside it.
    fn links_stay_inside(root: &Path) -> bool {
        let Ok(root) = fs::canonicalize(root) else {
            return true; // removed with everything in it
        };
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            for e in fs::read_dir(&dir).unwrap() {
                let p = e.unwrap().path();
                let m = fs::symlink_metadata(&p).unwrap();
                if m.file_type().is_symlink() {
                    if let Ok(real) = fs::canonicalize(&p) {
                        if !real.starts_with(&root) {
                            return false;
                        }
                    }
                } else if m.is_dir() {
                    stack.push(p);
                }
            }
        }
        true
    }

    #[test]
    fn refuses_chained_symlinks_that_climb_out() {
        use tar::EntryType::*;
        type Case = (
            &'static str,
            Vec<(&'static str, tar::EntryType, Option<&'static str>)>,
        );
        let cases: Vec<Case> = vec![
            (
                "a -> ., m -> a/..",
                vec![
                    ("d/", Directory, None),
                    ("d/a", Symlink, Some(".")),
                    ("d/m", Symlink, Some("a/..")),
                ],
            ),
            (
                "link made before the link it climbs through",
                vec![
                    ("d/", Directory, None),
                    ("d/m", Symlink, Some("a/..")),
                    ("d/a", Symlink, Some(".")),
                ],
            ),
            (
                "x/x/x/p -> ../../.., root -> x/x/x/p/../../..",
                vec![
                    ("d/", Directory, None),
                    ("d/x/x/x/", Directory, None),
                    ("d/x/x/x/p", Symlink, Some("../../..")),
                    ("d/root", Symlink, Some("x/x/x/p/../../..")),
                ],
            ),
            (
                "loop",
                vec![
                    ("d/", Directory, None),
                    ("d/a", Symlink, Some("b")),
                    ("d/b", Symlink, Some("a")),
                ],
            ),
        ];
        for (what, entries) in cases {
            for layout in [UnpackLayout::AsIs, UnpackLayout::StripRoot] {
                // As-is, the tree's top directory is the target itself.
                let entries: Vec<(&str, tar::EntryType, &[u8], Option<&str>)> = entries
                    .iter()
                    .filter_map(|(n, k, l)| {
                        let n = match layout {
                            UnpackLayout::AsIs => n.strip_prefix("d/").filter(|n| !n.is_empty())?,
                            UnpackLayout::StripRoot => n,
                        };
                        Some((n, *k, &b""[..], *l))
                    })
                    .collect();
                let data = tar_with(&entries);
                let out = tempfile::tempdir().unwrap();
                let target = out.path().join("a/b/c/t");
                let err = unpack_safe(&data[..], &target, layout)
                    .expect_err(&format!("{what} {layout:?}"));
                assert!(matches!(err, Error::Transfer { .. }), "{what}: {err}");
                assert!(links_stay_inside(&target), "{what} {layout:?}");
            }
        }
        // Chains that stay inside are kept.
        let ok = tar_with(&[
            ("d/x/x/x/", Directory, b"", None),
            ("d/x/x/x/p", Symlink, b"", Some("../..")),
            ("d/up", Symlink, b"", Some("x/x/x/p/..")),
            ("d/a", Symlink, b"", Some(".")),
            ("d/m", Symlink, b"", Some("a/x/../a")),
        ]);
        let out = tempfile::tempdir().unwrap();
        unpack_safe(&ok[..], out.path(), UnpackLayout::AsIs).unwrap();
        assert!(links_stay_inside(out.path()));
        assert!(fs::read_link(out.path().join("d/up")).is_ok());
        // Checked on its own, as after a merge into a directory holding other links.
        check_symlink_inside(out.path(), Path::new("d/m")).unwrap();
        std::os::unix::fs::symlink("a/..", out.path().join("d/esc")).unwrap();
        std::os::unix::fs::symlink(".", out.path().join("a")).unwrap();
        std::os::unix::fs::symlink("../a/..", out.path().join("d/esc2")).unwrap();
        check_symlink_inside(out.path(), Path::new("d/esc")).unwrap();
        assert!(matches!(
            check_symlink_inside(out.path(), Path::new("d/esc2")),
            Err(Error::Transfer { .. })
        ));
        assert!(check_symlink_inside(out.path(), Path::new("../x")).is_err());
    }

    #[test]
    fn never_writes_through_existing_symlink() {
        let out = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let target = out.path().join("t");
        fs::create_dir(&target).unwrap();
        std::os::unix::fs::symlink(outside.path(), target.join("d")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("f"), target.join("f")).unwrap();
        let data = tar_with(&[("d/x", tar::EntryType::Regular, b"x", None)]);
        assert!(unpack_safe(&data[..], &target, UnpackLayout::AsIs).is_err());
        let data = tar_with(&[("f", tar::EntryType::Regular, b"y", None)]);
        unpack_safe(&data[..], &target, UnpackLayout::AsIs).unwrap();
        assert!(!outside.path().join("f").exists());
        assert_eq!(fs::read(target.join("f")).unwrap(), b"y");
        assert!(fs::read_dir(outside.path()).unwrap().next().is_none());
    }
}

#[cfg(test)]
mod hardening_tests {
    use super::*;

    fn header(name: &str, kind: tar::EntryType, size: u64, link: Option<&str>) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(0o644);
        h.set_size(size);
        let gnu = h.as_gnu_mut().unwrap();
        gnu.name[..name.len()].copy_from_slice(name.as_bytes());
        if let Some(l) = link {
            gnu.linkname[..l.len()].copy_from_slice(l.as_bytes());
        }
        h.set_cksum();
        h
    }

    fn stream(entries: &[tar::Header]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for h in entries {
            let data = vec![b'x'; h.size().unwrap() as usize];
            b.append(h, &data[..]).unwrap();
        }
        b.into_inner().unwrap()
    }

    /// Issue 16 finding 8: `m -> a/..`, `a -> .`, then `../x` left `m` behind, resolving
    /// to the target's parent.
    #[test]
    fn an_error_part_way_leaves_no_escaping_symlink() {
        use tar::EntryType::*;
        let data = stream(&[
            header("m", Symlink, 0, Some("a/..")),
            header("a", Symlink, 0, Some(".")),
            header("../x", Regular, 1, None),
        ]);
        let out = tempfile::tempdir().unwrap();
        let target = out.path().join("t");
        let err = unpack_safe(&data[..], &target, UnpackLayout::AsIs).unwrap_err();
        assert!(matches!(err, Error::Transfer { .. }), "{err}");
        assert!(
            fs::symlink_metadata(target.join("m")).is_err(),
            "the escaping link m was left behind"
        );
        assert!(!target.exists(), "what the unpack created is removed");
        // Into an existing directory: its own entries stay, the unpack's go.
        fs::create_dir(&target).unwrap();
        fs::write(target.join("keep"), b"k").unwrap();
        assert!(unpack_safe(&data[..], &target, UnpackLayout::AsIs).is_err());
        let names: Vec<_> = fs::read_dir(&target)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["keep"]);
    }

    /// Issue 16 finding 7: an mtime of 2⁶³ s or more (GNU base-256) panicked with
    /// "overflow when adding duration to instant" after the file was created.
    /// RULES 4: a special file inside an uploaded tree is an error, found before anything is
    /// sent by `check_packable`; a build context (`append_path`) still skips it.
    #[test]
    fn special_files_are_refused_when_packing() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("d");
        fs::create_dir_all(d.join("a/b")).unwrap();
        fs::write(d.join("a/f"), b"x").unwrap();
        let fifo = d.join("a/b/fifo");
        // mkfifo(1), not libc::mkfifo: the workspace forbids unsafe code outside shellbox-local.
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        for err in [
            pack_path(&d, Some("d"), Vec::new()).unwrap_err(),
            check_packable(&d).unwrap_err(),
            check_packable(&fifo).unwrap_err(),
        ] {
            assert!(err.to_string().contains(SPECIAL_FILE_REFUSAL), "{err}");
        }
        let mut b = tar::Builder::new(Vec::new());
        append_path(&mut b, &d, None).unwrap();
        assert!(matches!(
            check_packable(&tmp.path().join("missing")),
            Err(Error::NotFound { .. })
        ));
        fs::remove_file(&fifo).unwrap();
        check_packable(&d).unwrap();
    }

    #[test]
    fn a_huge_mtime_does_not_panic() {
        for mtime in [1u64 << 63, u64::MAX, (1 << 63) - 1] {
            let mut h = header("f", tar::EntryType::Regular, 1, None);
            h.set_mtime(mtime);
            h.set_cksum();
            assert_eq!(h.mtime().unwrap(), mtime);
            let data = stream(&[h]);
            let out = tempfile::tempdir().unwrap();
            unpack_safe(&data[..], out.path(), UnpackLayout::AsIs).unwrap();
            assert_eq!(fs::read(out.path().join("f")).unwrap(), b"x");
        }
    }

    /// REFERENCE 4.5: the first member must be the root (`.` or a regular file); an empty
    /// stream, an absolute hard link and a device member are errors that leave nothing.
    #[test]
    fn archive_rules_of_the_reference() {
        use tar::EntryType::*;
        let cases: Vec<(&str, Vec<u8>, UnpackLayout)> = vec![
            ("empty stream", stream(&[]), UnpackLayout::StripRoot),
            (
                "first member not the root",
                stream(&[
                    header("r/f", Regular, 1, None),
                    header("r/", Directory, 0, None),
                ]),
                UnpackLayout::StripRoot,
            ),
            (
                "first member a symlink",
                stream(&[header("r", Symlink, 0, Some("x"))]),
                UnpackLayout::StripRoot,
            ),
            (
                "absolute hard link",
                stream(&[
                    header("r/", Directory, 0, None),
                    header("r/h", Link, 0, Some("/etc/passwd")),
                ]),
                UnpackLayout::StripRoot,
            ),
            (
                "device member",
                stream(&[
                    header("r/", Directory, 0, None),
                    header("r/f", Regular, 1, None),
                    header("r/dev", Char, 0, None),
                ]),
                UnpackLayout::StripRoot,
            ),
            (
                "fifo member",
                stream(&[header("f", Regular, 1, None), header("p", Fifo, 0, None)]),
                UnpackLayout::AsIs,
            ),
        ];
        for (what, data, layout) in cases {
            let out = tempfile::tempdir().unwrap();
            let target = out.path().join("new/t");
            let err = unpack_safe(&data[..], &target, layout).unwrap_err();
            assert!(matches!(err, Error::Transfer { .. }), "{what}: {err}");
            assert!(
                !out.path().join("new").exists(),
                "{what}: something was left"
            );
        }
        let err = unpack_safe(
            &stream(&[header("p", Fifo, 0, None)])[..],
            tempfile::tempdir().unwrap().path(),
            UnpackLayout::AsIs,
        )
        .unwrap_err();
        assert!(err.to_string().contains(SPECIAL_FILE_REFUSAL), "{err}");
        // A rooted stream whose first member is the directory or a file is fine.
        for data in [
            stream(&[
                header("r/", Directory, 0, None),
                header("r/f", Regular, 1, None),
            ]),
            stream(&[header("r", Regular, 1, None)]),
        ] {
            let out = tempfile::tempdir().unwrap();
            unpack_safe(&data[..], &out.path().join("t"), UnpackLayout::StripRoot).unwrap();
        }
    }
}
