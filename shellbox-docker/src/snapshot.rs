//! Snapshots (issue 15): a machine's container committed into a labelled image, machines
//! started from it, the image removed with the last of its users.
//!
//! [`Machine::snapshot`](shellbox_core::Machine::snapshot) commits the container
//! (`POST /commit`, paused by the engine while it commits) into an image tagged
//! `shellbox-snapshot:<32 hex>` and labelled [`labels::SNAPSHOT`](crate::labels::SNAPSHOT)
//! `=<32 hex>` with the owner labels of the containers (so [`gc`](crate::gc) finds it when its
//! process died). What the commit leaves out, the contents of the container's volumes
//! (an image's `VOLUME`s: the only mounts a docker machine has), is copied out while the
//! container stays paused, into a private directory of the host ([`VolumeCopies`]), and
//! copied back into each machine started from the snapshot.
//!
//! The committed image also holds the container's configuration, which the engine merges
//! into it: its environment (the snapshotted machine's spec env) and its labels. A machine
//! started from it gets the environment `create` would give it: the spec's, over the env
//! of the image the first machine of the chain was made from; every other variable of the
//! committed image is unset (an `Env` entry without `=`). Labels cannot be unset: a
//! container started from a snapshot also carries the labels of the machine it was taken
//! from (its own owner and factory labels override the same keys).
//!
//! The image is shared by the snapshot's handles and by every machine started from it
//! ([`ImageLease`]); Docker refuses to remove an image a container uses, so the image is
//! removed (`DELETE /images/{id}`, not forced, parents pruned) when the last of them lets
//! go: the last handle dropped or [`delete`](shellbox_core::Snapshot::delete)d, or the last
//! such machine closed.

use std::any::Any;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bollard::models::ContainerConfig;
use bollard::query_parameters::{
    CommitContainerOptions, DownloadFromContainerOptions, RemoveImageOptions,
    UploadToContainerOptions,
};
use bollard::Docker;
use bytes::Bytes;
use futures::StreamExt;
use shellbox_core::staging::StagingDir;
use shellbox_core::{async_trait, Error, Snapshot, SnapshotHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::image::is_not_found;
use crate::labels;
use crate::machine::{block_on_own_thread, Inner};

/// The repository of snapshot images: `shellbox-snapshot:<32 hex>`.
pub const SNAPSHOT_REPOSITORY: &str = "shellbox-snapshot";

/// A snapshot image, shared by the snapshot's handles and by the machines started from it.
/// The last holder removes it: [`release`] in async code, else its `Drop` (on a thread of
/// its own, as a dropped machine's container is removed).
pub(crate) struct ImageLease {
    docker: Docker,
    endpoint: Option<Arc<str>>,
    /// The image's ID (`sha256:…`).
    id: String,
    /// Set once its removal was tried (so the `Drop` does not try again).
    removed: AtomicBool,
}

impl ImageLease {
    async fn remove_with(&self, docker: &Docker) -> Result<(), Error> {
        if self.removed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        remove_image(docker, &self.id).await
    }
}

impl Drop for ImageLease {
    fn drop(&mut self) {
        if self.removed.swap(true, Ordering::SeqCst) {
            return;
        }
        let id = self.id.clone();
        block_on_own_thread(
            &self.docker,
            self.endpoint.as_deref(),
            format!("the snapshot image {id}"),
            move |client| async move { remove_image(&client, &id).await },
        );
    }
}

/// Gives up one share of a snapshot image; the last share removes it.
///
/// # Errors
/// [`Error::Backend`] when the engine refuses to remove it (e.g. a container someone else
/// started from it still exists); `gc` removes it once its owner is gone.
pub(crate) async fn release(lease: Arc<ImageLease>) -> Result<(), Error> {
    let docker = lease.docker.clone();
    release_with(lease, &docker).await
}

/// [`release`] through this client (a drop's own connection).
pub(crate) async fn release_with(lease: Arc<ImageLease>, docker: &Docker) -> Result<(), Error> {
    match Arc::into_inner(lease) {
        Some(last) => last.remove_with(docker).await,
        None => Ok(()),
    }
}

/// `DELETE /images/{id}` (not forced, untagged parents pruned); an image already gone is
/// no error.
///
/// # Errors
/// [`Error::Backend`] with the engine's refusal (an image a container uses: 409).
pub(crate) async fn remove_image(docker: &Docker, id: &str) -> Result<(), Error> {
    let options = RemoveImageOptions {
        force: false,
        noprune: false,
        platforms: None,
    };
    match docker.remove_image(id, Some(options), None).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(Error::backend(format!("remove snapshot image {id}"), e)),
    }
}

/// The contents of a machine's volumes at snapshot time: one tar per mount (the engine's
/// archive of its destination) in a private host directory, removed with the last user.
/// The directory is made and registered as a download's staging directory is
/// ([`StagingDir`]: `.shellbox-download-<pid>-…` in the host's temporary directory, mode
/// `0700`), so `shellbox gc` removes it when this process was killed.
pub(crate) struct VolumeCopies {
    /// The directory holding the tars; `None` when there were no volumes.
    dir: Option<StagingDir>,
    /// (mount destination, its tar), parents before children.
    mounts: Vec<(String, PathBuf)>,
}

impl VolumeCopies {
    fn none() -> Self {
        VolumeCopies {
            dir: None,
            mounts: Vec::new(),
        }
    }
}

/// What a live snapshot holds; taken away by `delete`.
#[derive(Clone)]
pub(crate) struct Held {
    pub lease: Arc<ImageLease>,
    pub volumes: Arc<VolumeCopies>,
}

/// A docker snapshot: a committed image (see the module docs).
pub(crate) struct DockerSnapshot {
    /// The image ID (`sha256:…`): the handle's [`id`](SnapshotHandle::id).
    id: String,
    /// The environment of the image the chain's first machine was made from.
    base_env: Arc<[String]>,
    /// The committed image's environment (`Config.Env`).
    image_env: Vec<String>,
    /// `None` once deleted.
    held: Mutex<Option<Held>>,
}

#[async_trait]
impl SnapshotHandle for DockerSnapshot {
    fn backend(&self) -> &'static str {
        "docker"
    }

    fn id(&self) -> &str {
        &self.id
    }

    /// Gives up the snapshot's share of its image (removed now unless a machine started
    /// from it still runs: then with the last such machine) and removes the copies of its
    /// volumes.
    async fn delete(&self) -> Result<(), Error> {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner()).take();
        match held {
            Some(held) => {
                drop(held.volumes);
                release(held.lease).await
            }
            None => Ok(()),
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// What `create_from` takes from a snapshot: the image, the container env, the volume
/// copies, and a share of the image for the new machine.
pub(crate) struct Fork {
    /// The image ID.
    pub image: String,
    /// The container's `Env` (see [`fork_env`]).
    pub env: Vec<String>,
    /// For the new machine's own snapshots.
    pub base_env: Arc<[String]>,
    pub held: Held,
}

impl DockerSnapshot {
    /// What a machine of `spec_env` started from this snapshot needs.
    ///
    /// # Errors
    /// [`Error::Closed`] when the snapshot was deleted.
    pub(crate) fn fork(&self, spec_env: &BTreeMap<String, String>) -> Result<Fork, Error> {
        let held = self
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or(Error::Closed)?;
        Ok(Fork {
            image: self.id.clone(),
            env: fork_env(spec_env, &self.base_env, &self.image_env),
            base_env: self.base_env.clone(),
            held,
        })
    }
}

/// The name of an `Env` entry (`KEY=value`, or a bare `KEY`).
fn env_key(entry: &str) -> &str {
    entry.split_once('=').map_or(entry, |(k, _)| k)
}

/// The `Env` of a container started from a snapshot whose image has `image_env`, so its
/// processes get what `create` would give them: the spec's variables, over `base_env` (the
/// env of the image the first machine of the chain was made from), and every other
/// variable of the committed image unset (a bare `KEY`, which the engine leaves out of the
/// container's processes' environment).
pub(crate) fn fork_env(
    spec_env: &BTreeMap<String, String>,
    base_env: &[String],
    image_env: &[String],
) -> Vec<String> {
    let mut seen: HashSet<&str> = HashSet::new();
    let mut env = Vec::new();
    for entry in base_env {
        let key = env_key(entry);
        if !entry.contains('=') || !seen.insert(key) {
            continue;
        }
        match spec_env.get(key) {
            Some(value) => env.push(format!("{key}={value}")),
            None => env.push(entry.clone()),
        }
    }
    for (key, value) in spec_env {
        if seen.insert(key) {
            env.push(format!("{key}={value}"));
        }
    }
    for entry in image_env {
        let key = env_key(entry);
        if seen.insert(key) {
            env.push(key.to_string());
        }
    }
    env
}

/// Unpauses a container paused for a snapshot if the snapshot is dropped (cancelled)
/// before it did.
struct UnpauseOnDrop<'a> {
    inner: &'a Inner,
    armed: bool,
}

impl Drop for UnpauseOnDrop<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let id = self.inner.id.clone();
        block_on_own_thread(
            &self.inner.docker,
            self.inner.endpoint.as_deref(),
            format!("the pause of container {id} (a cancelled snapshot)"),
            move |client| async move {
                client
                    .unpause_container(&id)
                    .await
                    .map_err(|e| Error::backend(format!("unpause container {id}"), e))
            },
        );
    }
}

/// Why snapshots are refused on Podman's Docker-compatible API: its commit keeps the
/// source container's environment where Docker's lets a fork unset it, and its committed
/// images do not carry the labels `shellbox gc` and the image's lease rely on (seen with
/// Podman 4.3).
pub(crate) const PODMAN_REFUSAL: &str = "the engine is Podman, whose Docker-compatible commit \
     keeps the source machine's environment and drops shellbox's labels: snapshots and forks \
     need the Docker Engine";

/// Takes a snapshot of the machine (see the module docs).
pub(crate) async fn take(inner: &Inner) -> Result<Snapshot, Error> {
    let _one_at_a_time = inner.snapshot_lock.lock().await;
    inner.ensure_running().await?;
    let version = inner
        .docker
        .version()
        .await
        .map_err(|e| inner.engine_error("ask the engine its version", e))?;
    if crate::factory::is_podman_version(&version) {
        return Err(Error::unsupported(PODMAN_REFUSAL));
    }
    let info = inner
        .docker
        .inspect_container(&inner.id, None)
        .await
        .map_err(|e| inner.engine_error("inspect container", e))?;
    let base_env: Arc<[String]> = match &inner.base_env {
        Some(env) => env.clone(),
        None => {
            let image = info.image.clone().unwrap_or_default();
            let config = inner
                .docker
                .inspect_image(&image)
                .await
                .map_err(|e| inner.engine_error("inspect the machine's image", e))?
                .config
                .unwrap_or_default();
            config.env.unwrap_or_default().into()
        }
    };
    let mut mounts: Vec<String> = info
        .mounts
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.destination)
        .filter(|d| d.starts_with('/') && d != "/")
        .collect();
    mounts.sort();
    mounts.dedup();

    let tag = crate::factory::unique_hex();
    let mut image_labels: HashMap<String, String> = inner.owner.labels();
    image_labels.insert(labels::SNAPSHOT.to_string(), tag.clone());
    let options = CommitContainerOptions {
        container: Some(inner.id.clone()),
        repo: Some(SNAPSHOT_REPOSITORY.to_string()),
        tag: Some(tag),
        comment: Some(format!("shellbox snapshot of {}", inner.name)),
        // The engine pauses the container while it commits; with volumes, the pause is
        // ours and lasts while their contents are copied out too.
        pause: mounts.is_empty(),
        ..Default::default()
    };
    let config = ContainerConfig {
        labels: Some(image_labels),
        ..Default::default()
    };

    // The image is removed if anything fails from its commit on (or the future is dropped).
    let lease_of = |id: String| {
        Arc::new(ImageLease {
            docker: inner.docker.clone(),
            endpoint: inner.endpoint.clone(),
            id,
            removed: AtomicBool::new(false),
        })
    };
    let mut volumes = VolumeCopies::none();
    let (lease, unpaused) = if mounts.is_empty() {
        let committed = inner
            .docker
            .commit_container(options, config)
            .await
            .map_err(|e| inner.engine_error("commit container", e))?;
        (lease_of(committed.id), Ok(()))
    } else {
        let temp = std::env::temp_dir();
        let staging = StagingDir::create_in(&temp).map_err(|e| {
            Error::io(
                format!("create a directory for volume copies in {}", temp.display()),
                e,
            )
        })?;
        let dir = staging.path().to_path_buf();
        volumes.dir = Some(staging);
        inner
            .docker
            .pause_container(&inner.id)
            .await
            .map_err(|e| inner.engine_error("pause container", e))?;
        let mut guard = UnpauseOnDrop { inner, armed: true };
        let mut copied = Ok(());
        for (i, mount) in mounts.iter().enumerate() {
            let file = dir.join(format!("{i}.tar"));
            copied = copy_out(inner, mount, &file).await;
            if copied.is_err() {
                break;
            }
            volumes.mounts.push((mount.clone(), file));
        }
        let committed = match copied {
            Ok(()) => inner
                .docker
                .commit_container(options, config)
                .await
                .map(|c| lease_of(c.id))
                .map_err(|e| inner.engine_error("commit container", e)),
            Err(e) => Err(e),
        };
        let unpaused = inner
            .docker
            .unpause_container(&inner.id)
            .await
            .map_err(|e| inner.engine_error("unpause container", e));
        guard.armed = false;
        (committed?, unpaused)
    };
    if let Err(e) = unpaused {
        let _ = release(lease).await;
        return Err(e);
    }
    let id = lease.id.clone();
    let image_env = match inner.docker.inspect_image(&id).await {
        Ok(image) => image.config.and_then(|c| c.env).unwrap_or_default(),
        Err(e) => {
            let error = inner.engine_error("inspect the snapshot image", e);
            let _ = release(lease).await;
            return Err(error);
        }
    };
    Ok(Snapshot::new(DockerSnapshot {
        id,
        base_env,
        image_env,
        held: Mutex::new(Some(Held {
            lease,
            volumes: Arc::new(volumes),
        })),
    }))
}

/// Copies the contents of the mount at `mount` (the engine's archive of it) into `file`.
async fn copy_out(inner: &Inner, mount: &str, file: &Path) -> Result<(), Error> {
    let what = || format!("copy the volume {mount} of container {}", inner.name);
    let mut out = tokio::fs::File::create(file)
        .await
        .map_err(|e| Error::io(format!("create {}", file.display()), e))?;
    let options = DownloadFromContainerOptions {
        path: mount.to_string(),
    };
    let mut body = inner
        .docker
        .download_from_container(&inner.id, Some(options));
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| inner.engine_error("download a volume's archive", e))?;
        out.write_all(&chunk)
            .await
            .map_err(|e| Error::io(what(), e))?;
    }
    out.flush().await.map_err(|e| Error::io(what(), e))?;
    Ok(())
}

/// Run as root in a new container before its volumes are restored: `sh -c CLEAR sh
/// MOUNT...` empties each mount (what the image put there), so it holds exactly the
/// snapshot's files.
const CLEAR: &str = r#"for d in "$@"; do
  [ -d "$d" ] || continue
  rm -rf -- "$d"/* "$d"/.[!.]* "$d"/..?* || exit 1
done"#;

/// Puts the snapshot's volume contents into a new container (started, before anything
/// else runs in it): each mount emptied, then its archive extracted over it.
pub(crate) async fn restore_volumes(
    docker: &Docker,
    container: &str,
    name: &str,
    volumes: &VolumeCopies,
) -> Result<(), Error> {
    if volumes.mounts.is_empty() {
        return Ok(());
    }
    let mut args: Vec<&str> = Vec::new();
    for (mount, _) in &volumes.mounts {
        args.push(mount);
    }
    let config = crate::config::root_exec(CLEAR, &args);
    match crate::machine::exec_collect(docker, container, config).await {
        Ok((0, _, _)) => {}
        Ok((code, out, err)) => {
            return Err(Error::backend(
                format!("empty the volumes of container {name}"),
                format!("exit {code}: {}{}", out.trim(), err.trim()),
            ))
        }
        Err(crate::machine::ExecError::Engine(op, e)) => {
            return Err(Error::backend(format!("{op} in container {name}"), e))
        }
        Err(crate::machine::ExecError::Other(e)) => return Err(e),
    }
    for (mount, file) in &volumes.mounts {
        let parent = Path::new(mount)
            .parent()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|| "/".to_string());
        let reader = tokio::fs::File::open(file)
            .await
            .map_err(|e| Error::io(format!("open {}", file.display()), e))?;
        let stream = futures::stream::unfold(Some(reader), |reader| async move {
            let mut reader = reader?;
            let mut buf = vec![0u8; 64 * 1024];
            match reader.read(&mut buf).await {
                Ok(0) => None,
                Ok(n) => {
                    buf.truncate(n);
                    Some((Ok(Bytes::from(buf)), Some(reader)))
                }
                Err(e) => Some((Err(e), None)),
            }
        });
        let options = UploadToContainerOptions {
            path: parent,
            ..Default::default()
        };
        docker
            .upload_to_container(container, Some(options), bollard::body_try_stream(stream))
            .await
            .map_err(|e| {
                Error::backend(format!("restore the volume {mount} in container {name}"), e)
            })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn fork_env_is_the_specs_over_the_first_image() {
        let base = strings(&["PATH=/usr/bin:/bin", "LANG=C"]);
        // The committed image: the source machine's spec set A and changed PATH and LANG.
        let image = strings(&["PATH=/custom", "LANG=en", "A=1", "GONE"]);
        let spec = BTreeMap::from([
            ("B".to_string(), "2".to_string()),
            ("LANG".to_string(), "fr".to_string()),
        ]);
        assert_eq!(
            fork_env(&spec, &base, &image),
            strings(&["PATH=/usr/bin:/bin", "LANG=fr", "B=2", "A", "GONE"])
        );
        // Nothing leaked: the base env as it is, the spec's over it.
        assert_eq!(
            fork_env(&BTreeMap::new(), &base, &base),
            strings(&["PATH=/usr/bin:/bin", "LANG=C"])
        );
        let spec = BTreeMap::from([("A".to_string(), "again".to_string())]);
        assert_eq!(
            fork_env(&spec, &[], &image),
            strings(&["A=again", "PATH", "LANG", "GONE"])
        );
    }
}
