//! Upload and download through the container archive endpoints, streamed.

use std::path::{Path, PathBuf};

use bollard::body_try_stream;
use bollard::errors::Error as BollardError;
use bollard::query_parameters::{
    ContainerArchiveInfoOptions, DownloadFromContainerOptions, UploadToContainerOptions,
};
use futures::StreamExt;
use shellbox_core::archive::{check_packable, pack_path};
use shellbox_core::transfer::{DownloadKind, StagedDownload};
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
///
/// The engine extracts entry by entry and keeps what it extracted when it stops, and the
/// archive endpoint has no staging (renaming a staged tree would need a program in the
/// image), so what could stop it part way is checked before anything is sent: the whole
/// source ([`check_packable`]: a special file (RULES 4) or an unreadable file anywhere), and
/// every place where the upload meets what the container already holds ([`find_conflict`]:
/// a directory where the upload has a file or the reverse, which `noOverwriteDirNonDir`
/// refuses). Only a command changing the target during the upload can still make it stop
/// part way.
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
    // The engine extracts the stream entry by entry and keeps what it extracted when the
    // stream breaks, so a special or unreadable file deep in the tree must be found before
    // the first entry is sent.
    let check = source.to_path_buf();
    tokio::task::spawn_blocking(move || check_packable(&check))
        .await
        .map_err(|e| Error::backend("check upload", e))??;
    // A symlink given as the source itself is followed; symlinks inside are kept.
    let source: PathBuf = tokio::fs::canonicalize(source)
        .await
        .map_err(|e| Error::io(format!("resolve {}", source.display()), e))?;
    find_conflict(inner, &source, target).await?;
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

/// What the container holds at `path`: `None` when nothing, `Some(true)` for a directory,
/// `Some(false)` for anything else (a symlink included: the engine does not merge into one).
async fn guest_kind(inner: &Inner, path: &str) -> Result<Option<bool>, Error> {
    let options = ContainerArchiveInfoOptions {
        path: path.to_string(),
    };
    match inner
        .docker
        .get_container_archive_info(&inner.id, Some(options))
        .await
    {
        Ok(s) => Ok(Some(
            s.file_mode & GO_MODE_DIR != 0 && s.file_mode & GO_MODE_SYMLINK == 0,
        )),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(inner.engine_error("stat archive path", e)),
    }
}

/// Finds, before anything is sent, an entry of uploading `source` (a resolved host path) to
/// `target` that meets a directory where it is a file or a non-directory where it is a
/// directory: the engine (`noOverwriteDirNonDir`) would refuse it after extracting the
/// entries before it. Walks only where both trees have directories (one engine stat per
/// entry there; a new target costs one stat).
///
/// # Errors
/// [`Error::Transfer`] naming the guest path of the first conflict; the engine's errors.
async fn find_conflict(inner: &Inner, source: &Path, target: &str) -> Result<(), Error> {
    let conflict = |guest: &str, src_dir: bool| {
        Error::transfer(
            guest,
            if src_dir {
                "a file (or symlink) is in the way of a directory"
            } else {
                "a directory is in the way of a file"
            },
        )
    };
    let src_dir = source.is_dir();
    match guest_kind(inner, target).await? {
        None => return Ok(()),
        // The engine refuses this at the first entry, before anything lands.
        Some(dst_dir) if dst_dir != src_dir => return Err(conflict(target, src_dir)),
        Some(_) if !src_dir => return Ok(()),
        Some(_) => {}
    }
    let mut queue = vec![(source.to_path_buf(), target.to_string())];
    while let Some((host_dir, guest_dir)) = queue.pop() {
        let mut entries = tokio::fs::read_dir(&host_dir)
            .await
            .map_err(|e| Error::io(format!("read directory {}", host_dir.display()), e))?;
        while let Some(entry) = entries
            .next_entry()
            .await
            .map_err(|e| Error::io(format!("read directory {}", host_dir.display()), e))?
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            let guest = if guest_dir == "/" {
                format!("/{name}")
            } else {
                format!("{guest_dir}/{name}")
            };
            let is_dir = entry
                .file_type()
                .await
                .map_err(|e| Error::io(format!("stat {}", entry.path().display()), e))?
                .is_dir();
            match guest_kind(inner, &guest).await? {
                None => {}
                Some(true) if is_dir => queue.push((entry.path(), guest)),
                Some(dst_dir) if dst_dir == is_dir => {}
                Some(_) => return Err(conflict(&guest, is_dir)),
            }
        }
    }
    Ok(())
}

/// Guest `source` → host `target`. A directory's contents go into `target`; a file goes to
/// `target`, or into it when `target` is an existing directory. The archive is written to
/// the host by core's [`StagedDownload`] (the rules every backend shares: staged beside the
/// target, entries judged by `unpack_safe`'s rules, links inside copied as stored and
/// never written through, the target's last component replaced and never followed, all or
/// nothing).
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
    let base = Path::new(&guest)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "download".into());
    let staging_target = target.to_path_buf();
    let staging = tokio::task::spawn_blocking(move || {
        let kind = if is_dir {
            DownloadKind::Directory
        } else {
            DownloadKind::File { name: &base }
        };
        StagedDownload::new(&staging_target, kind)
    })
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
        let result = staging.unpack(reader);
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
        // A refusal names the caller's target (the staged writer's label).
        _ => unpacked.map(|_| ()),
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
