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

/// The tag of the bash test image [`bash_image`] builds.
pub const BASH_TEST_IMAGE: &str = "shellbox-test/bash:1";

/// A test image with this host's `/bin/bash` (and the shared libraries `ldd` lists for it)
/// on top of the busybox test image, so the shell session's bash path is tested too: built
/// once through the engine (`POST /build`) as `shellbox-test/bash:1` and kept, like the
/// busybox image. `None` after one SKIP line when the host has no `/bin/bash` or `ldd`.
pub async fn bash_image(test: &str, docker: &shellbox_docker::bollard::Docker) -> Option<String> {
    use futures::StreamExt;
    use shellbox_docker::bollard::query_parameters::BuildImageOptions;
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _guard = LOCK.lock().await;
    if docker.inspect_image(BASH_TEST_IMAGE).await.is_ok() {
        return Some(BASH_TEST_IMAGE.to_string());
    }
    let ldd = match std::process::Command::new("ldd").arg("/bin/bash").output() {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).into_owned(),
        _ => {
            eprintln!("SKIP {test}: cannot run ldd /bin/bash to make the bash test image");
            return None;
        }
    };
    let mut files = vec!["/bin/bash".to_string()];
    files.extend(
        ldd.split_whitespace()
            .filter(|w| w.starts_with('/'))
            .map(str::to_string),
    );
    let mut b = tar::Builder::new(Vec::new());
    let mut add = |name: &str, mode: u32, data: &[u8]| {
        let mut h = tar::Header::new_gnu();
        h.set_mode(mode);
        h.set_size(data.len() as u64);
        b.append_data(&mut h, name, data).unwrap();
    };
    add(
        "Dockerfile",
        0o644,
        format!(
            "FROM {}\nCOPY root/ /\n",
            shellbox_docker::BUSYBOX_TEST_IMAGE
        )
        .as_bytes(),
    );
    for f in &files {
        let data = std::fs::read(f).unwrap_or_else(|e| panic!("{test}: read {f}: {e}"));
        add(&format!("root{f}"), 0o755, &data);
    }
    let context = b.into_inner().unwrap();
    let options = BuildImageOptions {
        t: Some(BASH_TEST_IMAGE.to_string()),
        rm: true,
        forcerm: true,
        ..Default::default()
    };
    let mut stream = docker.build_image(
        options,
        None,
        Some(shellbox_docker::bollard::body_full(context.into())),
    );
    while let Some(item) = stream.next().await {
        let info = item.unwrap_or_else(|e| panic!("{test}: build the bash test image: {e}"));
        if let Some(e) = info.error_detail.and_then(|d| d.message) {
            panic!("{test}: build the bash test image: {e}");
        }
    }
    Some(BASH_TEST_IMAGE.to_string())
}
