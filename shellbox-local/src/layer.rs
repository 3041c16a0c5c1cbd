//! Frozen root layers of local machines: what a snapshot keeps (issue 15).
//!
//! A local machine whose root is an overlayfs (a root host process that gives machines
//! mount namespaces of their own, no `storage_mb`, read-only system directories) writes
//! into the upper directory in its private directory (`shellbox-local-*/upper`). A
//! snapshot ends the machine's processes, unmounts the root, *moves* that upper directory
//! (one `rename(2)`, same file system) into a layer directory of its own
//! (`shellbox-layer-*/root`, [`LAYER_PREFIX`]), and mounts the root again over the frozen
//! layer with a new, empty upper: no file is copied, and no mounted overlay ever has a
//! lower layer that changes (overlayfs forbids it), since the frozen layer is never the
//! upper of any mount again. Machines started from the snapshot mount their own empty
//! upper over the same frozen layers.
//!
//! A [`Layer`] is shared (`Arc`) by the snapshot handles that name it and the machines that
//! mount it; the directory is removed when the last of them lets it go. Each layer
//! directory holds an owner marker ([`OWNER_FILE`](crate::OWNER_FILE)), so
//! [`gc`](crate::gc) removes the layers of an owner that died.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use shellbox_core::Error;

/// Prefix of a frozen layer's directory in the host temp dir (mode 0700, with an owner
/// marker); the layer's files are [`ROOT_DIR_NAME`](crate::ROOT_DIR_NAME) inside it.
pub const LAYER_PREFIX: &str = "shellbox-layer-";

/// The most frozen layers a machine's root stacks: a snapshot that would make the chain
/// deeper first squashes it (copies the machine's whole root into one new layer; see
/// `LocalMachine::snapshot`). overlayfs allows 500 lower layers; every layer costs each
/// lookup of a name that is not in the upper ones.
pub const MAX_LAYER_DEPTH: usize = 16;

/// One frozen layer (see the module docs): removed with its last user.
#[derive(Debug)]
pub(crate) struct Layer {
    /// `shellbox-layer-*`.
    dir: PathBuf,
}

impl Layer {
    /// The layer's files (an overlayfs lower directory).
    pub(crate) fn files(&self) -> PathBuf {
        self.dir.join(crate::ROOT_DIR_NAME)
    }

    /// The layer's directory name (the snapshot's id).
    pub(crate) fn name(&self) -> String {
        self.dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// Makes an empty layer directory in the host temp dir, with its owner marker and an
    /// empty [`files`](Self::files) directory only when `with_files`.
    ///
    /// # Errors
    /// [`Error::Io`] when the host refuses (nothing is left).
    fn create(with_files: bool) -> Result<Layer, Error> {
        let dir = tempfile::Builder::new()
            .prefix(LAYER_PREFIX)
            .permissions(fs::Permissions::from_mode(0o700))
            .tempdir()
            .map_err(|e| Error::io("create a snapshot layer in the host temp dir", e))?
            .keep();
        let layer = Layer { dir };
        crate::gc::write_marker(&layer.dir)?;
        if with_files {
            fs::create_dir(layer.files())
                .map_err(|e| Error::io(format!("mkdir {}", layer.files().display()), e))?;
        }
        Ok(layer)
    }

    /// Freezes `upper` (a machine's upper directory, no longer mounted anywhere) as a new
    /// layer: it is renamed into the layer's directory, so the caller must make a new
    /// upper directory before it mounts the root again.
    ///
    /// # Errors
    /// [`Error::Io`] when the layer cannot be made or the rename fails (then `upper` is
    /// where it was and the half-made layer is removed).
    pub(crate) fn freeze(upper: &Path) -> Result<Arc<Layer>, Error> {
        let layer = Layer::create(false)?;
        fs::rename(upper, layer.files()).map_err(|e| {
            Error::io(
                format!("move {} to {}", upper.display(), layer.files().display()),
                e,
            )
        })?;
        Ok(Arc::new(layer))
    }

    /// A new layer whose files `fill` writes into the empty directory it is given: a
    /// factory's root skeleton (the directories and mount points every fresh machine's root
    /// starts with, made once and shared read-only as the bottom of their chains).
    ///
    /// # Errors
    /// [`Error::Io`] when the layer cannot be made, or `fill`'s error (the half-made layer
    /// is removed).
    pub(crate) fn filled(
        fill: impl FnOnce(&Path) -> Result<(), Error>,
    ) -> Result<Arc<Layer>, Error> {
        let layer = Layer::create(true)?;
        fill(&layer.files())?;
        Ok(Arc::new(layer))
    }

    /// A new layer holding a copy of `view` (a directory fd path showing a machine's merged
    /// root) without what is mounted below it: the squash of a deep chain. Copies with
    /// `cp -a --one-file-system` (contents, modes, owners, links, mtimes; the mount points
    /// as empty directories).
    ///
    /// # Errors
    /// [`Error::Io`] / [`Error::Backend`] when the copy fails (the half-made layer is
    /// removed).
    pub(crate) fn squash(view: &Path) -> Result<Arc<Layer>, Error> {
        let layer = Layer::create(true)?;
        let out = std::process::Command::new("cp")
            .arg("-a")
            .arg("--one-file-system")
            .arg(view.join("."))
            .arg(layer.files())
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| Error::io("run cp to squash snapshot layers", e))?;
        if !out.status.success() {
            return Err(Error::backend(
                "squash snapshot layers",
                std::io::Error::other(String::from_utf8_lossy(&out.stderr).trim().to_string()),
            ));
        }
        Ok(Arc::new(layer))
    }
}

impl Drop for Layer {
    fn drop(&mut self) {
        if let Err(e) = crate::root::remove_root(&self.files()) {
            tracing::warn!("removing snapshot layer {}: {e}", self.dir.display());
        }
        // A layer whose files were never moved in has no `root` to remove it with.
        let _ = shellbox_core::remove_tree(&self.dir);
    }
}

/// A chain of frozen layers, top first.
pub(crate) type Chain = Vec<Arc<Layer>>;

/// What the local backend keeps for one snapshot: the chain of layers the machine's root
/// was made of when it was taken (top first), until [`delete`](shellbox_core::Snapshot::delete)
/// or the last handle's drop lets them go (machines started from it hold their own share).
#[derive(Debug)]
pub(crate) struct LocalSnapshot {
    pub(crate) id: String,
    pub(crate) chain: std::sync::Mutex<Option<Chain>>,
}

impl LocalSnapshot {
    /// The chain, or [`Error::Closed`] once deleted.
    pub(crate) fn chain(&self) -> Result<Chain, Error> {
        self.chain
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or(Error::Closed)
    }
}

#[shellbox_core::async_trait]
impl shellbox_core::SnapshotHandle for LocalSnapshot {
    fn backend(&self) -> &'static str {
        "local"
    }

    fn id(&self) -> &str {
        &self.id
    }

    /// Lets the snapshot's layers go; a layer no machine mounts is removed before this
    /// returns (on a blocking thread).
    async fn delete(&self) -> Result<(), Error> {
        let chain = self.chain.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(chain) = chain {
            tokio::task::spawn_blocking(move || drop(chain))
                .await
                .map_err(|e| Error::backend("delete a local snapshot", e))?;
        }
        Ok(())
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
