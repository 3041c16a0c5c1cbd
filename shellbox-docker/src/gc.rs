//! Removing containers and snapshot images whose owner process is gone.

use std::collections::HashMap;

use bollard::query_parameters::{ListContainersOptions, ListImagesOptions};
use bollard::Docker;
use shellbox_core::Error;

use crate::config::{host_name, process_start_ticks};
use crate::labels;
use crate::machine::remove_container;

/// What [`gc`] did, counting containers and snapshot images alike.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Names (or IDs) of the containers, then the references
    /// (`shellbox-snapshot:<32 hex>`, else IDs) of the snapshot images, removed: their owner
    /// process no longer exists.
    pub removed: Vec<String>,
    /// Containers and snapshot images of this host whose owner process is alive (left
    /// alone).
    pub kept: usize,
    /// Containers and snapshot images labelled by another host (left alone: their owners
    /// cannot be checked here).
    pub other_hosts: usize,
    /// Containers and snapshot images that should have been removed but could not be, with
    /// the reason (an image a container of a live owner still uses is one).
    pub failed: Vec<(String, String)>,
}

/// What the owner labels of a container or image say about it.
enum Ownership {
    OtherHost,
    /// Alive, or not known to be dead.
    Kept,
    /// Its owner on this host is gone: its pid.
    Dead(u32),
}

fn ownership(labels: &HashMap<String, String>, this_host: &str) -> Ownership {
    if labels.get(labels::OWNER_HOST).map(String::as_str) != Some(this_host) {
        return Ownership::OtherHost;
    }
    let Some(pid) = labels
        .get(labels::OWNER_PID)
        .and_then(|p| p.parse::<u32>().ok())
    else {
        return Ownership::Kept;
    };
    let start = labels
        .get(labels::OWNER_START)
        .and_then(|s| s.parse::<u64>().ok());
    if owner_alive(pid, start) {
        Ownership::Kept
    } else {
        Ownership::Dead(pid)
    }
}

/// Removes the shellbox containers (label [`labels::MACHINE`]), then the snapshot images
/// (label [`labels::SNAPSHOT`]), whose labels name an owner process on this host
/// ([`labels::OWNER_HOST`] equal to this host's name) that no longer exists: no
/// `/proc/<pid>`, or a process there that started at another time than
/// [`labels::OWNER_START`] says (a reused pid). One whose owner is alive, that belongs to
/// another host, or whose labels cannot be read is never touched. An image is removed as
/// a snapshot's last holder removes it (not forced: one that a container still uses stays,
/// reported in [`GcReport::failed`]).
///
/// # Errors
/// [`Error::Backend`] when the engine cannot list containers or images. Failures to remove
/// single containers or images are reported in [`GcReport::failed`].
pub async fn gc(docker: &Docker) -> Result<GcReport, Error> {
    gc_with_labels(docker, &[]).await
}

/// [`gc`] restricted to the containers and snapshot images that also carry every label in
/// `label_filters`, each in Docker's `label` filter form: `key` (present) or `key=value`.
/// With the labels a factory puts on its machines ([`DockerMachineFactory::label`]), which
/// their snapshot images carry too, a program (or a test) collects only what it created,
/// never another user's on the same engine. The counts in the report cover only what
/// matched.
///
/// [`DockerMachineFactory::label`]: crate::DockerMachineFactory::label
///
/// # Errors
/// [`Error::InvalidInput`] for an empty filter, one with an empty key, or one holding a NUL
/// byte; [`Error::Backend`] when the engine cannot list containers or images. Failures to
/// remove single containers or images are reported in [`GcReport::failed`].
pub async fn gc_with_labels(docker: &Docker, label_filters: &[&str]) -> Result<GcReport, Error> {
    for filter in label_filters {
        if filter.is_empty() || filter.starts_with('=') || filter.contains('\0') {
            return Err(Error::invalid(format!(
                "label filter {filter:?} is not `key` or `key=value`"
            )));
        }
    }
    let this_host = host_name();
    let options = ListContainersOptions {
        all: true,
        filters: Some(label_filter(
            format!("{}=1", labels::MACHINE),
            label_filters,
        )),
        ..Default::default()
    };
    let containers = list_containers(docker, options)
        .await
        .map_err(|e| Error::backend("list shellbox containers", e))?;
    let mut report = GcReport::default();
    for c in containers {
        let Some(id) = c.id.clone() else { continue };
        let name = c
            .names
            .as_ref()
            .and_then(|n| n.first())
            .map(|n| n.trim_start_matches('/').to_string())
            .unwrap_or_else(|| id.clone());
        let Some(pid) = report.count(ownership(&c.labels.unwrap_or_default(), &this_host)) else {
            continue;
        };
        let removed = remove_container(docker, &id).await;
        report.record("container", name, pid, removed);
    }

    let options = ListImagesOptions {
        all: false,
        filters: Some(label_filter(labels::SNAPSHOT.to_string(), label_filters)),
        ..Default::default()
    };
    let images = docker
        .list_images(Some(options))
        .await
        .map_err(|e| Error::backend("list shellbox snapshot images", e))?;
    for image in images {
        let name = image
            .repo_tags
            .iter()
            .find(|t| t.starts_with(crate::SNAPSHOT_REPOSITORY))
            .cloned()
            .unwrap_or_else(|| image.id.clone());
        let Some(pid) = report.count(ownership(&image.labels, &this_host)) else {
            continue;
        };
        let removed = crate::snapshot::remove_image(docker, &image.id).await;
        report.record("snapshot image", name, pid, removed);
    }
    Ok(report)
}

impl GcReport {
    /// Counts a container or image its owner labels leave alone ([`GcReport::other_hosts`],
    /// [`GcReport::kept`]); `Some(pid)` of its dead owner when it is to be removed.
    fn count(&mut self, ownership: Ownership) -> Option<u32> {
        match ownership {
            Ownership::OtherHost => self.other_hosts += 1,
            Ownership::Kept => self.kept += 1,
            Ownership::Dead(pid) => return Some(pid),
        }
        None
    }

    /// Records the removal of `name` (a `what`: container or snapshot image) whose owner
    /// `pid` is gone, or why it failed.
    fn record(&mut self, what: &str, name: String, pid: u32, removed: Result<(), Error>) {
        match removed {
            Ok(()) => {
                tracing::info!(target: "shellbox_docker", name = %name, owner_pid = pid, "gc removed a leaked {what}");
                self.removed.push(name);
            }
            Err(e) => self.failed.push((name, e.to_string())),
        }
    }
}

/// A `label` list filter: `first` and each of the caller's `extra` filters.
fn label_filter(first: String, extra: &[&str]) -> HashMap<String, Vec<String>> {
    let mut wanted = vec![first];
    wanted.extend(extra.iter().map(|f| f.to_string()));
    HashMap::from([("label".to_string(), wanted)])
}

/// Whether process `pid` exists on this host and (when known) started at `start`.
fn owner_alive(pid: u32, start: Option<u64>) -> bool {
    if pid == 0 {
        return true; // Never guess about pid 0.
    }
    if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
        return false;
    }
    match (start, process_start_ticks(pid)) {
        (Some(want), Some(have)) => want == have,
        // Cannot compare: treat as alive (never remove a live one).
        _ => true,
    }
}

/// `GET /containers/json`, retried while the answer cannot be read because a container is
/// in a state outside the Docker API's list: Podman 4 reports a container that has stopped
/// but whose clean-up (by conmon, a moment later) has not run as `"stopped"`, which the
/// client's typed answer refuses. That state lasts a moment, so the list is asked again
/// (every 100 ms, for up to about 10 s) before the error is returned.
///
/// # Errors
/// The engine's error, or the unreadable answer's after the retries.
#[doc(hidden)]
pub async fn list_containers(
    docker: &Docker,
    options: ListContainersOptions,
) -> Result<Vec<bollard::models::ContainerSummary>, bollard::errors::Error> {
    let mut attempts = 0;
    loop {
        match docker.list_containers(Some(options.clone())).await {
            Err(bollard::errors::Error::JsonDataError { message, .. })
                if attempts < 100 && message.contains("unknown variant") =>
            {
                attempts += 1;
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn liveness() {
        let me = std::process::id();
        assert!(owner_alive(me, process_start_ticks(me)));
        assert!(owner_alive(me, None));
        assert!(!owner_alive(me, Some(process_start_ticks(me).unwrap() + 1)));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!owner_alive(pid, Some(1)));
    }
}
