//! Shared set-up of the docker tests: the engine, the busybox test image, the registries.
#![allow(dead_code)]

use shellbox_core::MachineSpec;
use shellbox_docker::{ensure_busybox_image, DockerMachineFactory, BUSYBOX_TEST_IMAGE};

/// The factory and the busybox test image, or `None` after printing one SKIP line.
pub async fn setup(test: &str) -> Option<DockerMachineFactory> {
    if std::os::unix::net::UnixStream::connect("/var/run/docker.sock").is_err()
        && std::env::var("DOCKER_HOST").is_err()
    {
        eprintln!("SKIP {test}: /var/run/docker.sock is unreachable and DOCKER_HOST is unset");
        return None;
    }
    let factory = match DockerMachineFactory::connect().await {
        Ok(f) => f,
        Err(e) => {
            eprintln!("SKIP {test}: {e}");
            return None;
        }
    };
    if let Err(e) = ensure_busybox_image(factory.docker(), BUSYBOX_TEST_IMAGE).await {
        if e.is_unsupported() {
            eprintln!("SKIP {test}: {e}");
            return None;
        }
        panic!("{test}: cannot import the busybox test image: {e}");
    }
    Some(factory)
}

/// A spec for the busybox test image.
pub fn spec() -> MachineSpec {
    MachineSpec::docker(BUSYBOX_TEST_IMAGE)
}

/// The registries `scripts/setup-docker` started, from /tmp/shellbox-registry-env:
/// (plain, auth, user, password).
/// Variables set in the environment win over the file.
pub fn registries() -> Option<(String, String, String, String)> {
    let text = std::fs::read_to_string("/tmp/shellbox-registry-env").unwrap_or_default();
    let get = |k: &str| {
        std::env::var(k).ok().filter(|v| !v.is_empty()).or_else(|| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{k}=")))
                .map(str::to_string)
        })
    };
    Some((
        get("SHELLBOX_TEST_REGISTRY")?,
        get("SHELLBOX_TEST_REGISTRY_AUTH")?,
        get("SHELLBOX_TEST_REGISTRY_USER")?,
        get("SHELLBOX_TEST_REGISTRY_PASSWORD")?,
    ))
}

/// Whether a container with this ID or name still exists.
pub async fn container_exists(docker: &shellbox_docker::bollard::Docker, id: &str) -> bool {
    docker.inspect_container(id, None).await.is_ok()
}
