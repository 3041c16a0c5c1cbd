//! Snapshots: a machine's filesystem frozen at one moment, to start new machines from
//! (issue 15, "Snapshots and forks").
//!
//! [`Machine::snapshot`](crate::Machine::snapshot) freezes a machine's files;
//! [`MachineFactory::create_from`](crate::MachineFactory::create_from) starts a machine whose
//! filesystem begins as the snapshot's; [`MachineFactory::fork`](crate::MachineFactory::fork)
//! does both. Only files are part of a snapshot — contents, modes, owners, symlinks and
//! mtimes — never processes, open shell sessions or a simulator's shell state.
//!
//! A [`Snapshot`] is a cheap, clonable handle. It outlives the machine it was taken from and
//! is released when its last handle is dropped, or earlier by [`Snapshot::delete`]; machines
//! already created from it keep working either way. What a backend keeps for a snapshot (a
//! layer directory, a committed image) carries its owner's label, so `shellbox gc` finds it
//! when the owning process died.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::Error;

/// What a backend keeps for one snapshot. Backends implement it; callers hold a
/// [`Snapshot`].
///
/// The backend's value is released when the last [`Snapshot`] handle drops (its `Drop`,
/// best effort) or by [`SnapshotHandle::delete`].
#[async_trait]
pub trait SnapshotHandle: Send + Sync + 'static {
    /// The backend that took it (`"sim"`, `"local"`, `"docker"`), as
    /// [`MachineFactory::backend`](crate::MachineFactory::backend) names it.
    fn backend(&self) -> &'static str;

    /// A stable identifier, unique among this process's snapshots of this backend (a layer
    /// name, an image id): for logs and transcripts, never parsed.
    fn id(&self) -> &str;

    /// Releases what the snapshot holds now; machines created from it are unaffected, and
    /// a later [`create_from`](crate::MachineFactory::create_from) with it fails with
    /// [`Error::Closed`]. Deleting twice is not an error.
    ///
    /// # Errors
    /// The backend's failure to release something (the snapshot is still marked deleted).
    async fn delete(&self) -> Result<(), Error>;

    /// The value as [`Any`], so the backend that made it can get its own type back
    /// ([`Snapshot::downcast_ref`]).
    fn as_any(&self) -> &dyn Any;
}

/// A handle to a machine's filesystem frozen at one moment (issue 15).
///
/// [`Machine::snapshot`](crate::Machine::snapshot) takes one;
/// [`MachineFactory::create_from`](crate::MachineFactory::create_from) starts a machine whose
/// filesystem begins as the snapshot's; [`MachineFactory::fork`](crate::MachineFactory::fork)
/// does both. Only files are part of a snapshot (contents, modes, owners, symlinks, mtimes),
/// never processes, shell sessions or a simulator's shell state.
///
/// Clone it freely: every clone names the same snapshot. It outlives the machine it was
/// taken from and is released when the last clone drops, or earlier by
/// [`Snapshot::delete`]; machines already started from it keep working either way. What a
/// backend keeps for a snapshot (a layer directory, a committed image) carries its owner's
/// label, so `shellbox gc` finds it when the owning process died.
#[derive(Clone)]
pub struct Snapshot {
    handle: Arc<dyn SnapshotHandle>,
}

impl Snapshot {
    /// Wraps a backend's value (backends call this from
    /// [`Machine::snapshot`](crate::Machine::snapshot)).
    pub fn new(handle: impl SnapshotHandle) -> Self {
        Snapshot {
            handle: Arc::new(handle),
        }
    }

    /// The backend that took it.
    pub fn backend(&self) -> &'static str {
        self.handle.backend()
    }

    /// The backend's identifier for it (see [`SnapshotHandle::id`]).
    pub fn id(&self) -> &str {
        self.handle.id()
    }

    /// Releases the snapshot now, for every clone of this handle; machines created from it
    /// keep working.
    ///
    /// # Errors
    /// The backend's failure to release what it held.
    pub async fn delete(&self) -> Result<(), Error> {
        self.handle.delete().await
    }

    /// The backend's own value, when it is a `T`; backends use it in
    /// [`create_from`](crate::MachineFactory::create_from). See also
    /// [`Snapshot::expect_backend`].
    pub fn downcast_ref<T: SnapshotHandle>(&self) -> Option<&T> {
        self.handle.as_any().downcast_ref::<T>()
    }

    /// The backend's own value, or the [`Error::Unsupported`] every backend gives for a
    /// snapshot taken by another backend (or of another kind of factory of the same
    /// backend).
    ///
    /// # Errors
    /// [`Error::Unsupported`] naming both backends when the snapshot is not a `T`.
    pub fn expect_backend<T: SnapshotHandle>(&self, backend: &str) -> Result<&T, Error> {
        self.downcast_ref::<T>().ok_or_else(|| {
            Error::unsupported(format!(
                "a snapshot taken on the {} backend cannot start a machine on the {backend} backend",
                self.backend()
            ))
        })
    }
}

impl fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Snapshot")
            .field("backend", &self.backend())
            .field("id", &self.id())
            .finish()
    }
}
