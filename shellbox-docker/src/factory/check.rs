//! `check_environment` on the docker backend: what [`DockerMachineFactory::create_machine`]
//! refuses before it creates a container, judged without acquiring anything (no container,
//! pull, build or load; only `GET` requests to the engine).

use shellbox_core::{Error, MachineFactory, MachineSpec};

use super::DockerMachineFactory;

/// Storage drivers whose containers take `--storage-opt size` (`HostConfig.StorageOpt`)
/// wherever they run.
const SIZED_DRIVERS: [&str; 4] = ["btrfs", "zfs", "devicemapper", "windowsfilter"];

/// Storage drivers that take it only on an xfs backing file system mounted with `pquota`
/// (Docker's overlay2 and vfs, Podman's overlay).
const XFS_QUOTA_DRIVERS: [&str; 3] = ["overlay2", "overlay", "vfs"];

/// Whether an engine whose storage driver is `driver` (with `DriverStatus` pairs `status`)
/// refuses `storage_mb`, and why: a driver that never bounds a container's size
/// (`fuse-overlayfs`, `aufs`, ...), or overlay2/overlay/vfs on a backing file system other
/// than xfs. `None` when it may take it (an xfs backing file system without `pquota` is
/// still refused by the engine at create: the mount option is not in `GET /info`).
pub(crate) fn storage_refusal(driver: &str, status: &[Vec<String>]) -> Option<String> {
    if SIZED_DRIVERS.contains(&driver) {
        return None;
    }
    if XFS_QUOTA_DRIVERS.contains(&driver) {
        let backing = status
            .iter()
            .find(|pair| pair.first().is_some_and(|k| k == "Backing Filesystem"))
            .and_then(|pair| pair.get(1));
        return match backing {
            Some(fs) if fs != "xfs" => Some(format!(
                "its storage driver {driver} bounds a container's size only on xfs with the \
                 pquota mount option, and its backing file system is {fs}"
            )),
            _ => None,
        };
    }
    Some(format!(
        "its storage driver {driver} cannot bound a container's size (--storage-opt size \
         needs btrfs, zfs, devicemapper, or overlay2 on xfs with pquota)"
    ))
}

impl DockerMachineFactory {
    /// The checks of [`create_machine`](Self::create_machine), in its order and with its
    /// error kinds, up to (not including) creating the container: the command path setting,
    /// the spec's validation and env size, the factory's labels, the shared
    /// [`Capabilities::check_spec`](shellbox_core::Capabilities::check_spec), what Podman
    /// would ignore, the image source ([`crate::image::check`]: a Docker image must be
    /// present, a registry reference well formed, a Dockerfile and archive must exist), and
    /// what the engine reports it cannot give (`GET /info`): a runtime it does not have,
    /// `storage_mb` on a storage driver that cannot bound a container ([`storage_refusal`]),
    /// on the Docker Engine `cpus` past its `NCPU` (which it refuses at create; Podman
    /// takes them),
    /// `gpus` with no `nvidia` runtime (the NVIDIA Container Toolkit's; an engine with only
    /// its hook on the daemon's `PATH` can still give GPUs, which this cannot see).
    pub(crate) async fn check_docker_spec(&self, spec: &MachineSpec) -> Result<(), Error> {
        self.check_create(spec)?;
        self.capabilities().check_spec(self.backend(), spec)?;
        self.refuse_what_podman_ignores(spec).await?;
        crate::image::check(&self.docker, &spec.source).await?;
        if self.runtime.is_none()
            && spec.storage_mb.is_none()
            && spec.gpus == 0
            && spec.cpus.is_none()
        {
            return Ok(());
        }
        let info = self
            .docker
            .info()
            .await
            .map_err(|e| Error::backend("ask the engine what it can give (GET /info)", e))?;
        let runtimes: Vec<String> = info
            .runtimes
            .as_ref()
            .map(|r| {
                let mut names: Vec<String> = r.keys().cloned().collect();
                names.sort();
                names
            })
            .unwrap_or_default();
        if let Some(runtime) = &self.runtime {
            if info.runtimes.is_some() && !runtimes.contains(runtime) {
                return Err(Error::unsupported(format!(
                    "the Docker Engine cannot honour runtime {runtime:?}: it has no such runtime \
                     (its runtimes: {})",
                    runtimes.join(", ")
                )));
            }
        }
        if spec.storage_mb.is_some() {
            let driver = info.driver.as_deref().unwrap_or_default();
            let status = info.driver_status.as_deref().unwrap_or_default();
            if let Some(why) = storage_refusal(driver, status) {
                return Err(Error::unsupported(format!(
                    "the Docker Engine cannot honour storage_mb: {why}"
                )));
            }
        }
        if let (Some(cpus), Some(ncpu)) = (spec.cpus, info.ncpu) {
            // Podman takes a CPU limit past the host's CPUs (the quota is only a bound).
            if i64::from(cpus) > ncpu && self.engine().await? == super::Engine::Docker {
                return Err(Error::unsupported(format!(
                    "the Docker Engine cannot honour cpus: {cpus} is more than the {ncpu} CPUs \
                     it has (GET /info NCPU; it refuses NanoCPUs past them at create)"
                )));
            }
        }
        if spec.gpus > 0 && info.runtimes.is_some() && !runtimes.iter().any(|r| r == "nvidia") {
            return Err(Error::unsupported(format!(
                "the Docker Engine cannot honour gpus: it has no nvidia runtime (its runtimes: \
                 {}); GPUs need the NVIDIA Container Toolkit (nvidia-ctk runtime configure)",
                runtimes.join(", ")
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::storage_refusal;

    fn status(fs: &str) -> Vec<Vec<String>> {
        vec![
            vec!["Backing Filesystem".into(), fs.into()],
            vec!["Supports d_type".into(), "true".into()],
        ]
    }

    #[test]
    fn storage_drivers() {
        assert!(storage_refusal("overlay2", &status("xfs")).is_none());
        let why = storage_refusal("overlay2", &status("extfs")).unwrap();
        assert!(why.contains("extfs") && why.contains("pquota"), "{why}");
        assert!(storage_refusal("overlay2", &[]).is_none());
        assert!(storage_refusal("btrfs", &[]).is_none());
        assert!(storage_refusal("zfs", &status("zfs")).is_none());
        let why = storage_refusal("fuse-overlayfs", &[]).unwrap();
        assert!(why.contains("fuse-overlayfs"), "{why}");
        assert!(storage_refusal("aufs", &status("extfs")).is_some());
    }
}
