//! Upload and download through the container archive endpoints, streamed.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use bollard::body_try_stream;
use bollard::errors::Error as BollardError;
use bollard::query_parameters::{
    ContainerArchiveInfoOptions, DownloadFromContainerOptions, UploadToContainerOptions,
};
use futures::StreamExt;
use shellbox_core::archive::{check_symlink_inside, pack_path, unpack_safe, UnpackLayout};
use shellbox_core::validate::validate_guest_path;
use shellbox_core::Error;
use tokio::sync::mpsc;

use crate::bridge::{receiver_stream, ChannelReader, ChannelWriter};
use crate::image::is_not_found;
use crate::machine::Inner;

/// Go's `os.ModeDir` and `os.ModeSymlink` bits in the engine's path stat.
const GO_MODE_DIR: u32 = 1 << 31;
const GO_MODE_SYMLINK: u32 = 1 << 27;

fn engine_message(e: &BollardError) -> String {
    match e {
        BollardError::DockerResponseServerError { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

/// The packer's error when the engine stopped reading the archive (its own error says why).
fn is_broken_pipe(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::BrokenPipe)
}

/// Refuses guest paths under `/proc`, `/sys` and `/dev`: the kernel provides those inside
/// the container (procfs, sysfs, a tmpfs for `/dev` and `/dev/shm`), while the engine's
/// archive endpoints read and write the container's own filesystem below them, so a
/// transfer there would silently miss what the container sees.
fn refuse_kernel_path(path: &str) -> Result<(), Error> {
    let first = path.split('/').find(|c| !c.is_empty() && *c != ".");
    match first {
        Some(top @ ("proc" | "sys" | "dev")) => Err(Error::unsupported(format!(
            "{path} is a kernel-provided path (under /{top}), which the Docker Engine's \
             archive endpoints cannot read or write"
        ))),
        _ => Ok(()),
    }
}

/// Host `source` → guest `target`: one tar stream `PUT` at `/` whose entries are named by
/// the target path, so missing parents are created by the engine and a directory's entry
/// gives `target` the source directory's mode.
pub(crate) async fn upload(inner: &Inner, source: &Path, target: &str) -> Result<(), Error> {
    validate_guest_path(target)?;
    refuse_kernel_path(target)?;
    let meta = match tokio::fs::metadata(source).await {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::not_found(source.display().to_string()))
        }
        Err(e) => return Err(Error::io(format!("stat {}", source.display()), e)),
    };
    // A symlink given as the source itself is followed; symlinks inside are kept.
    let source: PathBuf = tokio::fs::canonicalize(source)
        .await
        .map_err(|e| Error::io(format!("resolve {}", source.display()), e))?;
    let root_name: Option<String> = if target == "/" {
        if !meta.is_dir() {
            return Err(Error::invalid(format!(
                "cannot upload the file {} over the guest root /",
                source.display()
            )));
        }
        None
    } else {
        Some(target.trim_start_matches('/').to_string())
    };

    let (tx, rx) = mpsc::channel(4);
    let src = source.clone();
    let packer = tokio::task::spawn_blocking(move || {
        let mut writer = ChannelWriter::new(tx);
        let result = (|| {
            // Write into the channel through a forwarding reference so a failure can be
            // reported on the stream itself.
            let w = pack_path(&src, root_name.as_deref(), &mut writer)?;
            std::io::Write::flush(w).map_err(|e| Error::io("send archive", e))?;
            Ok::<(), Error>(())
        })();
        if let Err(e) = &result {
            writer.fail(std::io::Error::other(e.to_string()));
        }
        result
    });
    let options = UploadToContainerOptions {
        path: "/".to_string(),
        // Refuse to replace a directory with a file or a file with a directory (the engine
        // would otherwise delete what is there).
        no_overwrite_dir_non_dir: Some("true".to_string()),
        ..Default::default()
    };
    let put = inner
        .docker
        .upload_to_container(
            &inner.id,
            Some(options),
            body_try_stream(receiver_stream(rx)),
        )
        .await;
    let packed = packer.await.map_err(|e| Error::backend("pack upload", e))?;
    match (packed, put) {
        // The host side failed (unreadable file, ...): that is the cause.
        (Err(e), _) if !is_broken_pipe(&e) => Err(e),
        (_, Err(_)) if inner.closed.load(std::sync::atomic::Ordering::SeqCst) => Err(Error::Closed),
        (_, Err(e)) => Err(Error::transfer(target, engine_message(&e))),
        (Err(e), Ok(())) => Err(e),
        (Ok(()), Ok(())) => Ok(()),
    }
}

/// Guest `source` → host `target`. A directory's contents go into `target`; a file goes to
/// `target`, or into it when `target` is an existing directory. The archive is unpacked
/// with [`unpack_safe`], which refuses entries escaping the target, into a staging
/// directory (`.shellbox-download-<hex>`) beside the target; only a complete, accepted tree
/// is then renamed into place (or merged into an existing directory target), so a failed
/// download leaves the host target as it was. (One exception: merged into an existing
/// directory, a link that would climb out through a link already there is removed after
/// the move and the download is an [`Error::Transfer`].)
pub(crate) async fn download(inner: &Inner, source: &str, target: &Path) -> Result<(), Error> {
    validate_guest_path(source)?;
    refuse_kernel_path(source)?;
    let mut guest = source.to_string();
    let mut stat = None;
    // Follow a symlink given as the source itself (the engine reports where it resolves,
    // always inside the container).
    for _ in 0..8 {
        let options = ContainerArchiveInfoOptions {
            path: guest.clone(),
        };
        match inner
            .docker
            .get_container_archive_info(&inner.id, Some(options))
            .await
        {
            Ok(s) => {
                if s.file_mode & GO_MODE_SYMLINK != 0
                    && !s.link_target.is_empty()
                    && s.link_target != guest
                {
                    guest = s.link_target.clone();
                    continue;
                }
                stat = Some(s);
                break;
            }
            Err(e) if is_not_found(&e) => return Err(Error::not_found(source)),
            Err(e) => return Err(inner.engine_error("stat archive path", e)),
        }
    }
    let Some(stat) = stat else {
        return Err(Error::transfer(source, "too many levels of symbolic links"));
    };
    // Where a symlink led counts too.
    refuse_kernel_path(&guest)?;
    let is_dir = stat.file_mode & GO_MODE_DIR != 0;
    let dest = if !is_dir && target.is_dir() {
        let base = Path::new(&guest)
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_else(|| "download".into());
        target.join(base)
    } else {
        target.to_path_buf()
    };
    let staging_dest = dest.clone();
    let staging = tokio::task::spawn_blocking(move || Staging::new(&staging_dest))
        .await
        .map_err(|e| Error::backend("prepare download", e))??;
    let options = DownloadFromContainerOptions {
        path: guest.clone(),
    };
    let mut body = inner
        .docker
        .download_from_container(&inner.id, Some(options));
    let (tx, rx) = mpsc::channel::<Result<bytes::Bytes, std::io::Error>>(4);
    let unpacker = tokio::task::spawn_blocking(move || {
        let reader = ChannelReader::new(rx);
        let result = unpack_safe(reader, &staging.item, UnpackLayout::StripRoot);
        (staging, result)
    });
    let mut engine_error: Option<BollardError> = None;
    while let Some(item) = body.next().await {
        match item {
            Ok(chunk) => {
                if tx.send(Ok(chunk)).await.is_err() {
                    break; // The unpacker stopped (refusal or error); its result says why.
                }
            }
            Err(e) => {
                let _ = tx
                    .send(Err(std::io::Error::other(engine_message(&e))))
                    .await;
                engine_error = Some(e);
                break;
            }
        }
    }
    drop(tx);
    let (staging, unpacked) = unpacker
        .await
        .map_err(|e| Error::backend("unpack download", e))?;
    let outcome = match engine_error {
        Some(e) if is_not_found(&e) => Err(Error::not_found(source)),
        Some(e) if unpacked.is_err() => Err(inner.engine_error("download archive", e)),
        // A refusal names the caller's target, not the staging directory.
        _ => unpacked.map(|_| ()).map_err(|e| match e {
            Error::Transfer { reason, .. } => Error::transfer(target.display().to_string(), reason),
            other => other,
        }),
    };
    // All or nothing: only a complete, accepted tree is moved into place.
    tokio::task::spawn_blocking(move || match outcome {
        Ok(()) => staging.commit(),
        Err(e) => {
            drop(staging);
            Err(e)
        }
    })
    .await
    .map_err(|e| Error::backend("finish download", e))?
}

/// A download's staging directory (`.shellbox-download-<hex>`), made beside where the
/// download lands so moving it into place is a rename on one filesystem. The archive is
/// unpacked into `item` inside it.
struct Staging {
    /// The staging directory itself.
    dir: PathBuf,
    /// Where the archive is unpacked (`dir/item`).
    item: PathBuf,
    /// The final place (an existing directory target resolved through symlinks).
    dest: PathBuf,
}

impl Staging {
    fn new(dest: &Path) -> Result<Self, Error> {
        // An existing directory (or a symlink to one) is merged into: stage beside where it
        // really is.
        let dest = if dest.is_dir() {
            std::fs::canonicalize(dest)
                .map_err(|e| Error::io(format!("resolve {}", dest.display()), e))?
        } else {
            dest.to_path_buf()
        };
        let parent = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&parent)
            .map_err(|e| Error::io(format!("create {}", parent.display()), e))?;
        let name = format!(".shellbox-download-{}", crate::factory::unique_hex());
        let mut dir = parent.join(&name);
        if let Err(e) = std::fs::create_dir(&dir) {
            // A parent that cannot be written: stage inside the directory being merged into.
            if e.kind() == std::io::ErrorKind::PermissionDenied && dest.is_dir() {
                dir = dest.join(&name);
                std::fs::create_dir(&dir)
                    .map_err(|e| Error::io(format!("create {}", dir.display()), e))?;
            } else {
                return Err(Error::io(format!("create {}", dir.display()), e));
            }
        }
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
        Ok(Self {
            item: dir.join("item"),
            dir,
            dest,
        })
    }

    /// Moves the unpacked tree into place, then removes the staging directory.
    fn commit(self) -> Result<(), Error> {
        self.place()
    }

    fn place(&self) -> Result<(), Error> {
        let io = |what: &str, p: &Path| {
            let operation = format!("{what} {}", p.display());
            move |e| Error::io(operation, e)
        };
        let staged = std::fs::symlink_metadata(&self.item).map_err(io("stat", &self.item))?;
        match std::fs::symlink_metadata(&self.dest) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::rename(&self.item, &self.dest).map_err(io("move into", &self.dest))
            }
            Err(e) => Err(io("stat", &self.dest)(e)),
            Ok(existing) if existing.is_dir() && staged.is_dir() => {
                // The links were judged inside the staged tree alone; next to the links
                // already in the target, one could climb out (`a -> .` there, `m -> a/..`
                // here): judge them again where they land, and remove any that escape.
                let mut links = Vec::new();
                list_symlinks(&self.item, Path::new(""), &mut links);
                merge_move(&self.item, &self.dest)?;
                let mut refused = None;
                for link in links {
                    if let Err(e) = check_symlink_inside(&self.dest, &link) {
                        let _ = std::fs::remove_file(self.dest.join(&link));
                        refused.get_or_insert(e);
                    }
                }
                refused.map_or(Ok(()), Err)
            }
            Ok(existing) if existing.is_dir() => Err(Error::transfer(
                self.dest.display().to_string(),
                "would replace the target directory with a file",
            )),
            Ok(_) => {
                // A file or symlink is replaced, never written through.
                if staged.is_dir() {
                    std::fs::remove_file(&self.dest).map_err(io("replace", &self.dest))?;
                }
                std::fs::rename(&self.item, &self.dest).map_err(io("move into", &self.dest))
            }
        }
    }
}

impl Drop for Staging {
    /// Removes the staging directory and whatever is in it (read-only parts included), also
    /// when a download is cancelled midway.
    fn drop(&mut self) {
        make_writable(&self.dir);
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(target: "shellbox_docker", dir = %self.dir.display(), "could not remove a download's staging directory: {e}");
            }
        }
    }
}

/// Appends the paths (relative to the walk's start) of the symlinks under `dir`.
fn list_symlinks(dir: &Path, rel: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(ft) = entry.file_type() else { continue };
        let rel = rel.join(entry.file_name());
        if ft.is_symlink() {
            out.push(rel);
        } else if ft.is_dir() {
            list_symlinks(&entry.path(), &rel, out);
        }
    }
}

/// Gives every directory under `dir` (not following symlinks) owner rwx, so it can be
/// emptied.
fn make_writable(dir: &Path) {
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return;
    };
    if !meta.is_dir() {
        return;
    }
    let _ = std::fs::set_permissions(
        dir,
        std::fs::Permissions::from_mode(meta.permissions().mode() | 0o700),
    );
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            make_writable(&entry.path());
        }
    }
}

/// Moves the children of the staged directory `src` into the existing directory `dst`:
/// directories meeting directories are merged, anything else replaces what is there (a
/// symlink is replaced, never followed). `dst` ends with `src`'s mode.
fn merge_move(src: &Path, dst: &Path) -> Result<(), Error> {
    let io = |what: &str, p: &Path| {
        let operation = format!("{what} {}", p.display());
        move |e| Error::io(operation, e)
    };
    let mode = std::fs::symlink_metadata(src)
        .map_err(io("stat", src))?
        .permissions()
        .mode();
    for p in [src, dst] {
        if let Ok(m) = std::fs::metadata(p) {
            let cur = m.permissions().mode();
            if cur & 0o700 != 0o700 {
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(cur | 0o700))
                    .map_err(io("chmod", p))?;
            }
        }
    }
    let entries = std::fs::read_dir(src).map_err(io("read directory", src))?;
    for entry in entries {
        let entry = entry.map_err(io("read directory", src))?;
        let from = entry.path();
        let to = dst.join(entry.file_name());
        let from_meta = std::fs::symlink_metadata(&from).map_err(io("stat", &from))?;
        match std::fs::symlink_metadata(&to) {
            Ok(m) if m.is_dir() && from_meta.is_dir() => merge_move(&from, &to)?,
            Ok(m) => {
                if m.is_dir() {
                    make_writable(&to);
                    std::fs::remove_dir_all(&to).map_err(io("replace", &to))?;
                } else if from_meta.is_dir() {
                    std::fs::remove_file(&to).map_err(io("replace", &to))?;
                }
                std::fs::rename(&from, &to).map_err(io("move into", &to))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::rename(&from, &to).map_err(io("move into", &to))?
            }
            Err(e) => return Err(io("stat", &to)(e)),
        }
    }
    std::fs::set_permissions(dst, std::fs::Permissions::from_mode(mode & 0o7777))
        .map_err(io("chmod", dst))
}
