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
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

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
/// modification time. Sockets, FIFOs and device files inside a directory are skipped.
///
/// # Errors
/// [`Error::NotFound`] when `source` does not exist, [`Error::InvalidInput`] for a bad
/// `root_name` (empty, absolute, `.`/`..` components) or `None` with a non-directory,
/// [`Error::Transfer`] when `source` itself is a special file, [`Error::Io`] for read and
/// write failures.
pub fn pack_path<W: Write>(source: &Path, root_name: Option<&str>, writer: W) -> Result<W, Error> {
    let mut builder = tar::Builder::new(writer);
    builder.follow_symlinks(false);
    append_path(&mut builder, source, root_name)?;
    builder
        .into_inner()
        .map_err(|e| Error::io("finish tar archive", e))
}

/// Appends `source` to an open tar `builder` exactly as [`pack_path`] does, without writing
/// the end-of-archive marker, so a caller can add more entries (e.g. a Dockerfile kept
/// outside a build context).
///
/// # Errors
/// As [`pack_path`].
pub fn append_path<W: Write>(
    builder: &mut tar::Builder<W>,
    source: &Path,
    root_name: Option<&str>,
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
        Some(name) => append_tree(builder, source, &meta, name.trim_end_matches('/'), true)?,
        None => {
            if !meta.is_dir() {
                return Err(Error::invalid(format!(
                    "{} is not a directory, so it needs an entry name",
                    source.display()
                )));
            }
            append_children(builder, source, "")?;
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
        append_children(builder, path, name)?;
    } else if ft.is_file() {
        let mut header = base_header(meta, tar::EntryType::Regular);
        header.set_size(meta.len());
        let file = fs::File::open(path).map_err(io_at(path, "open"))?;
        // Guard against the file changing size while it is read: exactly `len` bytes go in.
        let reader = ExactLen {
            inner: file,
            remaining: meta.len(),
        };
        builder
            .append_data(&mut header, name, reader)
            .map_err(io_at(path, "pack file"))?;
    } else if is_root {
        return Err(Error::transfer(
            path.display().to_string(),
            "not a regular file, directory or symlink",
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
        append_tree(builder, &child, &meta, &name, false)?;
    }
    Ok(())
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
    /// Entries skipped: device files, FIFOs and other special types.
    pub skipped: u64,
}

/// Extracts an untrusted tar stream into `target` (created with its parents if missing),
/// refusing every entry that would land outside it.
///
/// Refused (an [`Error::Transfer`] naming the entry; what was written before stays):
/// absolute entry names, `..` components, symlinks with an absolute target or a relative
/// one that climbs out of `target` (judged by resolving it as the kernel would, through the
/// other symlinks below `target`, once all entries are in; a refused link is removed),
/// hard links naming a path outside `target` or a
/// non-regular file, and any entry whose path passes through a symlink on disk (one
/// from the archive or one already there). An existing symlink at an entry's own path is
/// replaced, never written through. Modes are applied (`0o1777`; set-uid/set-gid dropped),
/// directories' last (so read-only directories can still be filled); regular files keep
/// their modification time; owners are not changed. Device files and FIFOs are skipped.
///
/// # Errors
/// [`Error::Transfer`] for refused entries or a malformed archive, [`Error::Io`] when the
/// host refuses a write.
pub fn unpack_safe<R: Read>(
    reader: R,
    target: &Path,
    layout: UnpackLayout,
) -> Result<UnpackSummary, Error> {
    let mut archive = tar::Archive::new(reader);
    let mut summary = UnpackSummary::default();
    let mut root: Option<String> = None;
    let mut dir_modes: Vec<(PathBuf, u32)> = Vec::new();
    let mut links: Vec<(String, Vec<String>)> = Vec::new();
    let target_str = target.display().to_string();
    let bad = |entry: &str, why: &str| {
        Error::transfer(
            target_str.clone(),
            format!("archive entry {entry:?}: {why}"),
        )
    };

    let entries = archive
        .entries()
        .map_err(|e| Error::transfer(target_str.clone(), format!("bad archive: {e}")))?;
    for entry in entries {
        let mut entry =
            entry.map_err(|e| Error::transfer(target_str.clone(), format!("bad archive: {e}")))?;
        let raw_name = entry.path_bytes().into_owned();
        let name = String::from_utf8_lossy(&raw_name).into_owned();
        let rel = relative_components(&raw_name).map_err(|why| bad(&name, why))?;
        let rel = match layout {
            UnpackLayout::AsIs => rel,
            UnpackLayout::StripRoot => {
                let Some((first, rest)) = rel.split_first() else {
                    return Err(bad(&name, "empty name"));
                };
                match &root {
                    None => root = Some(first.clone()),
                    Some(r) if r == first => {}
                    Some(r) => {
                        return Err(bad(&name, &format!("not under the archive's root {r:?}")))
                    }
                }
                rest.to_vec()
            }
        };
        let dest = join_rel(target, &rel);
        let kind = entry.header().entry_type();
        // Skip metadata-only and special entries before touching the filesystem.
        match kind {
            tar::EntryType::Regular
            | tar::EntryType::Continuous
            | tar::EntryType::Directory
            | tar::EntryType::Symlink
            | tar::EntryType::Link => {}
            tar::EntryType::XGlobalHeader | tar::EntryType::XHeader => continue,
            _ => {
                tracing::debug!(entry = %name, "skipping special archive entry");
                summary.skipped += 1;
                continue;
            }
        }
        prepare_parents(target, &rel).map_err(|e| match e {
            PrepError::Symlink(p) => bad(
                &name,
                &format!("its path passes through the symlink {}", p.display()),
            ),
            PrepError::Io(p, e) => Error::io(format!("create directory {}", p.display()), e),
        })?;
        let mode = entry.header().mode().unwrap_or(0o644) & UNPACK_MODE_MASK;
        let existing = fs::symlink_metadata(&dest).ok();
        match kind {
            tar::EntryType::Directory => {
                match &existing {
                    Some(m) if m.is_dir() => {}
                    Some(m) if m.file_type().is_symlink() && rel.is_empty() => {
                        // The target itself may be a symlink the caller chose.
                        if !dest.is_dir() {
                            return Err(bad(&name, "target is not a directory"));
                        }
                    }
                    Some(_) => {
                        remove_path(&dest).map_err(io_at(&dest, "replace"))?;
                        fs::create_dir(&dest).map_err(io_at(&dest, "create directory"))?;
                    }
                    None => fs::create_dir(&dest).map_err(io_at(&dest, "create directory"))?,
                }
                // Owner-writable while filling; the real mode is applied at the end.
                if let Ok(m) = fs::metadata(&dest) {
                    let cur = m.permissions().mode();
                    if cur & 0o700 != 0o700 {
                        let _ = fs::set_permissions(&dest, fs::Permissions::from_mode(cur | 0o700));
                    }
                }
                dir_modes.push((dest, mode));
                summary.directories += 1;
            }
            tar::EntryType::Symlink => {
                let link = entry
                    .link_name_bytes()
                    .ok_or_else(|| bad(&name, "symlink without a target"))?
                    .into_owned();
                check_symlink_target(&rel, &link).map_err(|why| bad(&name, why))?;
                if rel.is_empty() {
                    return Err(bad(
                        &name,
                        "the archive root is a symlink, which would replace the target",
                    ));
                }
                if existing.is_some() {
                    remove_path(&dest).map_err(io_at(&dest, "replace"))?;
                }
                let link_path = PathBuf::from(String::from_utf8_lossy(&link).into_owned());
                std::os::unix::fs::symlink(&link_path, &dest)
                    .map_err(io_at(&dest, "create symlink"))?;
                // Judged again once every entry is in: a later link can change where an
                // earlier one's `..` leads.
                if let Err(why) = resolves_inside(target, &rel) {
                    let _ = fs::remove_file(&dest);
                    return Err(bad(&name, why));
                }
                links.push((name.clone(), rel.clone()));
                summary.symlinks += 1;
            }
            tar::EntryType::Link => {
                let link = entry
                    .link_name_bytes()
                    .ok_or_else(|| bad(&name, "hard link without a source"))?
                    .into_owned();
                let mut link_rel = relative_components(&link)
                    .map_err(|why| bad(&name, &format!("hard link source: {why}")))?;
                if layout == UnpackLayout::StripRoot {
                    match (link_rel.split_first(), &root) {
                        (Some((first, _)), Some(r)) if first == r => {
                            link_rel.remove(0);
                        }
                        _ => {
                            return Err(bad(&name, "hard link source is outside the archive root"))
                        }
                    }
                }
                let src = join_rel(target, &link_rel);
                prepare_parents(target, &link_rel)
                    .map_err(|_| bad(&name, "hard link source passes through a symlink"))?;
                let src_meta = fs::symlink_metadata(&src)
                    .map_err(|_| bad(&name, "hard link source does not exist"))?;
                if !src_meta.is_file() {
                    return Err(bad(&name, "hard link source is not a regular file"));
                }
                if existing.is_some() {
                    remove_path(&dest).map_err(io_at(&dest, "replace"))?;
                }
                fs::hard_link(&src, &dest).map_err(io_at(&dest, "create hard link"))?;
                summary.files += 1;
            }
            _ => {
                // Regular file.
                if rel.is_empty() && existing.as_ref().is_some_and(|m| m.is_dir()) {
                    return Err(bad(&name, "would replace the target directory with a file"));
                }
                if existing.is_some() {
                    remove_path(&dest).map_err(io_at(&dest, "replace"))?;
                }
                let mut file = fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&dest)
                    .map_err(io_at(&dest, "create"))?;
                let n = io::copy(&mut entry, &mut file).map_err(|e| {
                    Error::transfer(target_str.clone(), format!("archive entry {name:?}: {e}"))
                })?;
                summary.bytes += n;
                file.set_permissions(fs::Permissions::from_mode(mode))
                    .map_err(io_at(&dest, "chmod"))?;
                if let Ok(mtime) = entry.header().mtime() {
                    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(mtime);
                    let _ = file.set_modified(t);
                }
                summary.files += 1;
            }
        }
    }
    // Every link made here must still resolve inside the target now that the whole tree
    // is there: `..` after a component that is itself a link climbs from where that link
    // leads (`a -> .`, `m -> a/..` leaves the target), which a textual check cannot see.
    // Refused links are removed, so none pointing outside is left behind.
    let mut refused = None;
    for (name, rel) in &links {
        if let Err(why) = resolves_inside(target, rel) {
            refused.get_or_insert_with(|| bad(name, why));
            let _ = fs::remove_file(join_rel(target, rel));
        }
    }
    if let Some(e) = refused {
        return Err(e);
    }
    // Deepest first, so a read-only parent is locked only after its children are in.
    dir_modes.sort_by_key(|(p, _)| std::cmp::Reverse(p.components().count()));
    for (dir, mode) in dir_modes {
        fs::set_permissions(&dir, fs::Permissions::from_mode(mode))
            .map_err(io_at(&dir, "chmod"))?;
    }
    Ok(summary)
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

/// Makes sure every parent of `target/rel` below `target` is a real directory (creating
/// missing ones), never a symlink.
fn prepare_parents(target: &Path, rel: &[String]) -> Result<(), PrepError> {
    if rel.is_empty() {
        // The entry is the target itself (a file or a directory): only its parent must exist.
        if let Some(parent) = target.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs::create_dir_all(parent).map_err(|e| PrepError::Io(parent.to_path_buf(), e))?;
        }
        return Ok(());
    }
    if !target.exists() {
        fs::create_dir_all(target).map_err(|e| PrepError::Io(target.to_path_buf(), e))?;
    }
    let mut p = target.to_path_buf();
    if rel.len() <= 1 {
        return Ok(());
    }
    for c in &rel[..rel.len() - 1] {
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
                fs::create_dir(&p).map_err(|e| PrepError::Io(p.clone(), e))?
            }
            Err(e) => return Err(PrepError::Io(p, e)),
        }
    }
    Ok(())
}

fn remove_path(path: &Path) -> io::Result<()> {
    let m = fs::symlink_metadata(path)?;
    if m.is_dir() {
        fs::remove_dir_all(path)
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
        let root = fs::canonicalize(root).unwrap();
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
