//! What only the docker backend does: engine connection, image sources, container fields,
//! resource refusals, network, users, workdir, archive safety, cleanup, gc.
//!
//! Images these tests leave: only `shellbox-test/busybox:1` (the cached test image). Every
//! other tag they make (registry copies, `shellbox-build:*`, `shellbox-test/archive:*`) is
//! removed before the test returns.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use futures::StreamExt;
use shellbox_core::{
    Command, DockerfileSource, Error, ImageArchive, ImageSource, Machine, MachineFactory,
    MachineSpec, NetworkPolicy, RegistryCredentials, RegistryImage, SimBuiltins,
};
use shellbox_docker::bollard::auth::DockerCredentials;
use shellbox_docker::bollard::models::ContainerCreateBody;
use shellbox_docker::bollard::query_parameters::{
    CreateContainerOptions, ListContainersOptions, PushImageOptions, RemoveImageOptions,
    TagImageOptions,
};
use shellbox_docker::bollard::Docker;
use shellbox_docker::{
    dockerfile_image_tag, gc_with_labels, labels, CommandPath, DockerMachineFactory,
    BUSYBOX_TEST_IMAGE,
};

async fn sh(m: &dyn Machine, script: &str) -> shellbox_core::CommandResult {
    m.run(Command::shell(script)).await.unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A unique marker put into a spec's env, to find containers made from it.
fn marker() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

/// Whether any container (running or not) carries `SHELLBOX_TEST_MARK=<mark>` in its env.
async fn containers_with_marker(docker: &Docker, mark: &str) -> usize {
    let list = shellbox_docker::list_containers(
        docker,
        ListContainersOptions {
            all: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let want = format!("SHELLBOX_TEST_MARK={mark}");
    let mut n = 0;
    for c in list {
        let Some(id) = c.id else { continue };
        if let Ok(info) = docker.inspect_container(&id, None).await {
            let env = info.config.and_then(|c| c.env).unwrap_or_default();
            if env.contains(&want) {
                n += 1;
            }
        }
    }
    n
}

async fn remove_image(docker: &Docker, reference: &str) {
    let _ = docker
        .remove_image(reference, None::<RemoveImageOptions>, None)
        .await;
}

async fn tag(docker: &Docker, source: &str, repo: &str, tag: &str) {
    docker
        .tag_image(
            source,
            Some(TagImageOptions {
                repo: Some(repo.to_string()),
                tag: Some(tag.to_string()),
            }),
        )
        .await
        .unwrap();
}

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn unreachable_engine_names_where_it_looked() {
    let err = DockerMachineFactory::connect_to("unix:///nonexistent/shellbox/docker.sock")
        .await
        .expect_err("expected an error");
    assert!(matches!(err, Error::Backend { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("/nonexistent/shellbox/docker.sock"),
        "{err}"
    );
    let err = DockerMachineFactory::connect_to("tcp://127.0.0.1:1")
        .await
        .expect_err("expected an error");
    assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
    let err = DockerMachineFactory::connect_to("ftp://nowhere")
        .await
        .expect_err("expected an error");
    assert!(err.to_string().contains("ftp://nowhere"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn other_sources_are_unsupported_and_bad_specs_invalid() {
    // No engine needed: the spec is refused before any request.
    let docker = Docker::connect_with_host("tcp://127.0.0.1:1").unwrap();
    let f = DockerMachineFactory::with_client(docker);
    for spec in [
        MachineSpec::host(),
        MachineSpec::new(ImageSource::Sim(SimBuiltins {})),
    ] {
        let err = f.create(spec).await.err().expect("expected an error");
        assert!(err.is_unsupported(), "{err:?}");
    }
    let err = f
        .create(MachineSpec::docker("x").workdir("relative"))
        .await
        .err()
        .expect("expected an error");
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    for bad in ["", "https://host/img:1", "a b"] {
        let err = f
            .create(MachineSpec::new(ImageSource::Registry(RegistryImage {
                reference: bad.into(),
                credentials: None,
            })))
            .await
            .err()
            .expect("expected an error");
        assert!(matches!(err, Error::InvalidInput(_)), "{bad:?}: {err:?}");
    }
    // References outside the Engine's grammar are the caller's mistake, judged before any
    // request (break-it of issue 12: they reached the engine and came back as Backend).
    let none = shellbox_core::ExecutionRequirements::default();
    for bad in ["UPPER", "x@sha256:zz", "x::1", "a//b", "x:-tag", "x\u{0}"] {
        for spec in [
            MachineSpec::docker(bad),
            MachineSpec::new(ImageSource::Registry(RegistryImage {
                reference: bad.into(),
                credentials: None,
            })),
        ] {
            let checked = f.check_environment(&none, &spec).await;
            assert!(
                matches!(checked, Err(Error::InvalidInput(_))),
                "check {bad:?}: {checked:?}"
            );
            let err = f.create(spec).await.err().expect("expected an error");
            assert!(matches!(err, Error::InvalidInput(_)), "{bad:?}: {err:?}");
        }
    }
    assert_eq!(f.backend(), "docker");
}

#[tokio::test(flavor = "multi_thread")]
async fn docker_source_is_never_pulled() {
    let Some(f) = common::setup("docker_source_is_never_pulled").await else {
        return;
    };
    let err = f
        .create(MachineSpec::docker("shellbox-test/absent:never"))
        .await
        .err()
        .expect("expected an error");
    assert!(matches!(err, Error::Backend { .. }), "{err:?}");
    assert!(err.to_string().contains("never pulled"), "{err}");
    assert!(f
        .docker()
        .inspect_image("shellbox-test/absent:never")
        .await
        .is_err());
}

/// The image the registry test pushes: a busybox image of its own, not the shared test
/// image, since removing `repo@digest` on Podman removes the image with every tag it has.
const REGISTRY_SOURCE_IMAGE: &str = "shellbox-test/registry-source:1";

/// Tags a busybox image into `registry`, pushes it through the Engine API, drops the local
/// tag, and returns (tag reference, digest reference).
async fn push_test_image(
    docker: &Docker,
    registry: &str,
    repo_name: &str,
    credentials: Option<DockerCredentials>,
) -> (String, String) {
    let repo = format!("{registry}/{repo_name}");
    shellbox_docker::ensure_busybox_image(docker, REGISTRY_SOURCE_IMAGE)
        .await
        .unwrap();
    tag(docker, REGISTRY_SOURCE_IMAGE, &repo, "pushed").await;
    let mut push = docker.push_image(
        &repo,
        Some(PushImageOptions {
            tag: Some("pushed".into()),
            ..Default::default()
        }),
        credentials,
    );
    let mut digest = None;
    while let Some(item) = push.next().await {
        let info = item.unwrap_or_else(|e| panic!("push {repo}: {e}"));
        if let Some(status) = info.status {
            if let Some(rest) = status.split("digest: ").nth(1) {
                digest = rest.split_whitespace().next().map(str::to_string);
            }
        }
    }
    let digest = digest.expect("push reported no digest");
    let by_tag = format!("{repo}:pushed");
    let by_digest = format!("{repo}@{digest}");
    remove_image(docker, &by_tag).await;
    assert!(docker.inspect_image(&by_tag).await.is_err());
    (by_tag, by_digest)
}

async fn run_from_registry(
    f: &DockerMachineFactory,
    reference: &str,
    credentials: Option<RegistryCredentials>,
) -> Result<String, Error> {
    let spec = MachineSpec::new(ImageSource::Registry(RegistryImage {
        reference: reference.to_string(),
        credentials,
    }));
    let m = f.create(spec).await?;
    let r = sh(&*m, "echo pulled").await;
    m.close().await.unwrap();
    Ok(text(&r.stdout))
}

#[tokio::test(flavor = "multi_thread")]
async fn registry_pull_by_tag_and_digest_plain_and_with_auth() {
    let test = "registry_pull_by_tag_and_digest_plain_and_with_auth";
    let Some(f) = common::setup(test).await else {
        return;
    };
    let Some((plain, auth, user, password)) = common::registries() else {
        eprintln!("SKIP {test}: no local registries (run scripts/setup-docker)");
        return;
    };
    let docker = f.docker().clone();

    // Plain registry.
    let (by_tag, by_digest) = push_test_image(&docker, &plain, "shellbox-test/plain", None).await;
    assert_eq!(
        run_from_registry(&f, &by_tag, None).await.unwrap(),
        "pulled\n"
    );
    assert!(
        docker.inspect_image(&by_tag).await.is_ok(),
        "the pull left no image"
    );
    remove_image(&docker, &by_tag).await;
    assert_eq!(
        run_from_registry(&f, &by_digest, None).await.unwrap(),
        "pulled\n"
    );
    remove_image(&docker, &by_digest).await;

    // Registry with basic auth.
    let engine_creds = DockerCredentials {
        username: Some(user.clone()),
        password: Some(password.clone()),
        serveraddress: Some(auth.clone()),
        ..Default::default()
    };
    let (by_tag, by_digest) =
        push_test_image(&docker, &auth, "shellbox-test/auth", Some(engine_creds)).await;
    let creds = RegistryCredentials {
        username: user.clone(),
        password: password.clone(),
    };
    let mark = marker();
    let mut anonymous = MachineSpec::new(ImageSource::Registry(RegistryImage {
        reference: by_tag.clone(),
        credentials: None,
    }));
    anonymous
        .env
        .insert("SHELLBOX_TEST_MARK".into(), mark.clone());
    let err = f.create(anonymous).await.err().expect("expected an error");
    assert!(matches!(err, Error::Backend { .. }), "{err:?}");
    assert_eq!(containers_with_marker(&docker, &mark).await, 0);
    let wrong = RegistryCredentials {
        username: user.clone(),
        password: "wrong".into(),
    };
    assert!(run_from_registry(&f, &by_tag, Some(wrong)).await.is_err());
    assert_eq!(
        run_from_registry(&f, &by_tag, Some(creds.clone()))
            .await
            .unwrap(),
        "pulled\n"
    );
    remove_image(&docker, &by_tag).await;
    assert_eq!(
        run_from_registry(&f, &by_digest, Some(creds))
            .await
            .unwrap(),
        "pulled\n"
    );
    remove_image(&docker, &by_digest).await;
    // A digest that the registry does not have is not silently replaced by a tag.
    let missing = format!("{plain}/shellbox-test/plain@sha256:{}", "0".repeat(64));
    assert!(run_from_registry(&f, &missing, None).await.is_err());
}

fn write_context(dir: &Path, message: &str) {
    std::fs::write(
        dir.join("Dockerfile"),
        format!("FROM {BUSYBOX_TEST_IMAGE}\nCOPY msg /msg\nRUN echo built >> /msg\n"),
    )
    .unwrap();
    std::fs::write(dir.join("msg"), message).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn dockerfile_is_built_once_per_context() {
    let Some(f) = common::setup("dockerfile_is_built_once_per_context").await else {
        return;
    };
    let docker = f.docker().clone();
    let ctx = tempfile::tempdir().unwrap();
    write_context(ctx.path(), &format!("one {}\n", marker()));
    let source = DockerfileSource {
        context: ctx.path().to_path_buf(),
        dockerfile: ctx.path().join("Dockerfile"),
    };
    let tag1 = dockerfile_image_tag(&source).unwrap();
    let spec = MachineSpec::new(ImageSource::Dockerfile(source.clone()));
    let m = f.create(spec.clone()).await.unwrap();
    let r = sh(&*m, "cat /msg").await;
    assert!(text(&r.stdout).starts_with("one ") && text(&r.stdout).ends_with("built\n"));
    m.close().await.unwrap();
    let id1 = docker.inspect_image(&tag1).await.unwrap().id.unwrap();

    // Unchanged context, a new factory (as another process would have): no rebuild.
    let f2 = DockerMachineFactory::connect().await.unwrap();
    let m = f2.create(spec.clone()).await.unwrap();
    m.close().await.unwrap();
    assert_eq!(docker.inspect_image(&tag1).await.unwrap().id.unwrap(), id1);

    // Changed content: another tag, built again.
    std::fs::write(ctx.path().join("msg"), "two\n").unwrap();
    let tag2 = dockerfile_image_tag(&source).unwrap();
    assert_ne!(tag1, tag2);
    let m = f.create(spec.clone()).await.unwrap();
    assert_eq!(text(&sh(&*m, "cat /msg").await.stdout), "two\nbuilt\n");
    m.close().await.unwrap();

    // A Dockerfile outside the context is sent along.
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(
        outside.path().join("Dockerfile.ext"),
        format!("FROM {BUSYBOX_TEST_IMAGE}\nCOPY msg /from-ext\n"),
    )
    .unwrap();
    let ext = DockerfileSource {
        context: ctx.path().to_path_buf(),
        dockerfile: outside.path().join("Dockerfile.ext"),
    };
    let tag3 = dockerfile_image_tag(&ext).unwrap();
    let m = f
        .create(MachineSpec::new(ImageSource::Dockerfile(ext)))
        .await
        .unwrap();
    assert_eq!(text(&sh(&*m, "cat /from-ext").await.stdout), "two\n");
    m.close().await.unwrap();

    // A failing build is a backend error with the build's message.
    let bad = tempfile::tempdir().unwrap();
    std::fs::write(
        bad.path().join("Dockerfile"),
        format!("FROM {BUSYBOX_TEST_IMAGE}\nRUN echo shellbox-build-fails && exit 7\n"),
    )
    .unwrap();
    let err = f
        .create(MachineSpec::new(ImageSource::Dockerfile(
            DockerfileSource {
                context: bad.path().to_path_buf(),
                dockerfile: "Dockerfile".into(),
            },
        )))
        .await
        .err()
        .expect("expected an error");
    assert!(matches!(err, Error::Backend { .. }), "{err:?}");
    let msg = format!("{err:?}");
    assert!(
        msg.contains("shellbox-build-fails") || msg.contains("7"),
        "{msg}"
    );

    for t in [tag1, tag2, tag3] {
        remove_image(&docker, &t).await;
        assert!(docker.inspect_image(&t).await.is_err(), "{t} left behind");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn archive_source_loads_a_docker_save_tarball() {
    let Some(f) = common::setup("archive_source_loads_a_docker_save_tarball").await else {
        return;
    };
    let docker = f.docker().clone();
    let name = "shellbox-test/archive";
    let reference = format!("{name}:1");
    tag(&docker, BUSYBOX_TEST_IMAGE, name, "1").await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("image.tar");
    {
        let mut out = tokio::fs::File::create(&path).await.unwrap();
        let mut export = docker.export_image(&reference);
        while let Some(chunk) = export.next().await {
            tokio::io::AsyncWriteExt::write_all(&mut out, &chunk.unwrap())
                .await
                .unwrap();
        }
    }
    remove_image(&docker, &reference).await;
    assert!(docker.inspect_image(&reference).await.is_err());

    let m = f
        .create(MachineSpec::new(ImageSource::Archive(ImageArchive {
            path: path.clone(),
        })))
        .await
        .unwrap();
    assert_eq!(text(&sh(&*m, "echo loaded").await.stdout), "loaded\n");
    m.close().await.unwrap();
    assert!(docker.inspect_image(&reference).await.is_ok());
    remove_image(&docker, &reference).await;

    let err = f
        .create(MachineSpec::new(ImageSource::Archive(ImageArchive {
            path: dir.path().join("missing.tar"),
        })))
        .await
        .err()
        .expect("expected an error");
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
    std::fs::write(dir.path().join("junk.tar"), b"not a tarball").unwrap();
    let err = f
        .create(MachineSpec::new(ImageSource::Archive(ImageArchive {
            path: dir.path().join("junk.tar"),
        })))
        .await
        .err()
        .expect("expected an error");
    assert!(matches!(err, Error::Backend { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn container_fields_name_labels_init_resources() {
    let Some(f) = common::setup("container_fields_name_labels_init_resources").await else {
        return;
    };
    let spec = common::spec()
        .memory_mb(64)
        .cpus(1)
        .env("SPEC_VAR", "from-spec");
    let m = f.create_machine(spec).await.unwrap();
    let info = f
        .docker()
        .inspect_container(m.container_id(), None)
        .await
        .unwrap();
    let name = info.name.clone().unwrap();
    assert!(name.starts_with("/shellbox-"), "{name}");
    let config = info.config.unwrap();
    let labels = config.labels.unwrap();
    assert_eq!(labels[labels::OWNER_PID], std::process::id().to_string());
    assert!(!labels[labels::OWNER_HOST].is_empty());
    assert!(config
        .env
        .unwrap()
        .contains(&"SPEC_VAR=from-spec".to_string()));
    let host = info.host_config.unwrap();
    // Docker reports `Init: false`; Podman leaves it out. Either way no init runs: PID 1
    // is the keep-alive shell (checked below).
    assert_ne!(host.init, Some(true));
    assert_eq!(host.memory, Some(64 * 1024 * 1024));
    assert_eq!(host.nano_cpus, Some(1_000_000_000));
    // The engine enforces them: cgroup v1 files inside the container.
    let r = sh(
        &m,
        "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max; \
         echo $SPEC_VAR; cat /proc/1/comm",
    )
    .await;
    let out = text(&r.stdout);
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("67108864"), "{out}");
    assert_eq!(lines.next(), Some("from-spec"));
    // The keep-alive shell is PID 1.
    assert_eq!(lines.next(), Some("sh"), "{out}");
    m.close().await.unwrap();
    assert!(!common::container_exists(f.docker(), m.container_id()).await);
}

/// Creates `spec` (marked) and expects either an engine refusal naming `field`, or, on an
/// engine that can honour it, a container whose config carries it; `check_environment`
/// gives the same verdict first, without creating anything.
async fn refusal(f: &DockerMachineFactory, spec: MachineSpec, field: &str) -> Option<String> {
    let mark = marker();
    let spec = spec.env("SHELLBOX_TEST_MARK", &mark);
    let checked = f
        .check_environment(&shellbox_core::ExecutionRequirements::default(), &spec)
        .await;
    assert_eq!(
        containers_with_marker(f.docker(), &mark).await,
        0,
        "check_environment made a container"
    );
    let result = f.create_machine(spec).await;
    assert_eq!(
        checked.as_ref().err().map(|e| e.kind()),
        result.as_ref().err().map(|e| e.kind()),
        "{field}: check_environment {checked:?}, create {:?}",
        result.as_ref().err()
    );
    if let Err(e) = &checked {
        assert!(e.to_string().contains(field), "{e}");
    }
    if result.is_err() {
        assert_eq!(
            containers_with_marker(f.docker(), &mark).await,
            0,
            "a refused create left its container"
        );
    }
    match result {
        Err(Error::Unsupported(u)) => {
            assert!(u.reason.contains(field), "{u:?}");
            Some(u.reason)
        }
        Err(other) => panic!("{field}: expected Unsupported, got {other:?}"),
        Ok(m) => {
            m.close().await.unwrap();
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn engine_refusals_are_unsupported_with_the_engines_reason() {
    let Some(f) = common::setup("engine_refusals_are_unsupported_with_the_engines_reason").await
    else {
        return;
    };
    let info = f.docker().info().await.unwrap();
    let driver = info.driver.unwrap_or_default();
    // Storage quotas need overlay2 on xfs with pquota (or btrfs/zfs/devicemapper).
    let reason = refusal(&f, common::spec().storage_mb(100), "storage_mb").await;
    if driver != "btrfs" && driver != "zfs" && driver != "devicemapper" {
        let reason = reason.expect("this storage driver should refuse a size");
        assert!(
            reason.to_lowercase().contains("storage") || reason.contains("size"),
            "{reason}"
        );
    }
    // GPUs: only with a GPU device driver (nvidia) installed.
    let runtimes = info.runtimes.unwrap_or_default();
    let reason = refusal(&f, common::spec().gpus(1), "gpus").await;
    if !runtimes.contains_key("nvidia") {
        assert!(reason.is_some(), "an engine without nvidia accepted gpus");
    }
    // Podman's compatible API accepts GPUs and a runtime and ignores them: refused first,
    // saying why.
    let podman = f.is_podman().await.unwrap();
    if podman {
        assert!(reason.unwrap().contains("Podman"));
    }
    // An unknown OCI runtime.
    let with_runtime = f.clone().runtime("shellbox-no-such-runtime");
    let reason = refusal(&with_runtime, common::spec(), "shellbox-no-such-runtime")
        .await
        .expect("an unknown runtime was accepted");
    assert!(reason.contains("runtime"), "{reason}");
    assert_eq!(reason.contains("Podman"), podman, "{reason}");
}

/// The least `pids_limit` (12) and `memory_mb` (6) a docker machine runs with, on Docker and
/// Podman: below them `check_environment` and `create` both refuse with
/// [`Error::InvalidInput`] naming the field (issue 12's break-it pass: `pids_limit` 1 was
/// the engine's 409 at create and `memory_mb` 1 its "Minimum memory limit allowed is 6MB",
/// after `check_environment` said yes); at them, the machine runs a pipeline with a
/// background job and its session runs a command.
#[tokio::test(flavor = "multi_thread")]
async fn limits_below_the_least_a_machine_runs_with_are_invalid_input() {
    let Some(f) =
        common::setup("limits_below_the_least_a_machine_runs_with_are_invalid_input").await
    else {
        return;
    };
    let none = shellbox_core::ExecutionRequirements::default();
    for (field, spec) in [
        ("pids_limit", common::spec().pids_limit(1)),
        ("pids_limit", common::spec().pids_limit(11)),
        ("memory_mb", common::spec().memory_mb(1)),
        ("memory_mb", common::spec().memory_mb(5)),
    ] {
        let mark = marker();
        let spec = spec.env("SHELLBOX_TEST_MARK", &mark);
        let checked = f.check_environment(&none, &spec).await;
        let created = f.create_machine(spec.clone()).await;
        let created = match created {
            Ok(m) => {
                m.close().await.unwrap();
                Ok(())
            }
            Err(e) => Err(e),
        };
        for (what, result) in [("check_environment", checked), ("create", created)] {
            match result {
                Err(Error::InvalidInput(reason)) => assert!(reason.contains(field), "{reason}"),
                other => panic!("{what} of {field} {spec:?}: {other:?}"),
            }
        }
        assert_eq!(containers_with_marker(f.docker(), &mark).await, 0);
    }
    let least = common::spec()
        .pids_limit(shellbox_docker::MIN_PIDS_LIMIT)
        .memory_mb(shellbox_docker::MIN_MEMORY_MB);
    assert_eq!(
        (
            shellbox_docker::MIN_PIDS_LIMIT,
            shellbox_docker::MIN_MEMORY_MB
        ),
        (12, 6)
    );
    f.check_environment(&none, &least).await.unwrap();
    let m = f.create_machine(least).await.unwrap();
    let r = sh(&m, "echo a | cat; sleep 0.1 & wait").await;
    assert_eq!(
        (text(&r.stdout), r.exit_code),
        ("a\n".into(), Some(0)),
        "{r:?}"
    );
    let s = m.open_shell().await.unwrap();
    let u = s
        .execute("echo sess | cat", Duration::from_secs(30), 1 << 20)
        .await
        .unwrap();
    assert_eq!(text(&u.output), "sess\n", "{u:?}");
    assert_eq!(u.exit_code, Some(0), "{u:?}");
    m.close().await.unwrap();
}

/// `cpus` past the CPUs the engine has (`GET /info`'s `NCPU`): the Docker Engine refuses
/// the create ("Range of CPUs is from 0.01 to N"), so `check_environment` refuses it too,
/// with the same [`Error::Unsupported`] (issue 12's break-it pass: it said yes); Podman
/// takes such a limit and runs the machine, so both accept it there.
#[tokio::test(flavor = "multi_thread")]
async fn cpus_past_the_engines_cpus() {
    let Some(f) = common::setup("cpus_past_the_engines_cpus").await else {
        return;
    };
    let ncpu = f.docker().info().await.unwrap().ncpu.unwrap_or(1);
    let cpus = u32::try_from(ncpu).unwrap() + 1;
    let reason = refusal(&f, common::spec().cpus(cpus), "cpus").await;
    if f.is_podman().await.unwrap() {
        assert_eq!(reason, None);
    } else {
        let reason = reason.expect("the Docker Engine took more cpus than it has");
        assert!(reason.contains(&format!("{ncpu}")), "{reason}");
    }
    // As many as it has: accepted by both.
    let cpus = u32::try_from(ncpu).unwrap();
    assert_eq!(refusal(&f, common::spec().cpus(cpus), "cpus").await, None);
}

#[tokio::test(flavor = "multi_thread")]
async fn network_deny_and_allow() {
    let Some(f) = common::setup("network_deny_and_allow").await else {
        return;
    };
    let deny = f.create(common::spec()).await.unwrap();
    let allow = f
        .create(common::spec().network(NetworkPolicy::Allow))
        .await
        .unwrap();
    let r = sh(&*deny, "ls /sys/class/net").await;
    assert_eq!(text(&r.stdout), "lo\n");
    let r = sh(&*deny, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '").await;
    assert_eq!(text(&r.stdout), "lo\n");
    let r = sh(&*allow, "ls /sys/class/net").await;
    let nets = text(&r.stdout);
    assert!(
        nets.lines().any(|l| l == "lo") && nets.lines().any(|l| l != "lo"),
        "{nets}"
    );
    deny.close().await.unwrap();
    allow.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn users_workdir_and_exec_failures() {
    let Some(f) = common::setup("users_workdir_and_exec_failures").await else {
        return;
    };
    let m = f
        .create(common::spec().workdir("/srv/deep/work"))
        .await
        .unwrap();
    let r = m.run(Command::new("pwd")).await.unwrap();
    assert_eq!(text(&r.stdout), "/srv/deep/work\n");
    for user in ["65534", "nobody"] {
        let r = m
            .run(Command::shell("id -u; touch /root/x 2>/dev/null || echo denied").user(user))
            .await
            .unwrap();
        assert_eq!(text(&r.stdout), "65534\ndenied\n", "{user}: {r:?}");
    }
    let r = m.run(Command::shell("id -u")).await.unwrap();
    assert_eq!(text(&r.stdout), "0\n");
    // A timed-out command of another user is killed, group and all.
    let r = m
        .run(
            Command::shell("sleep 3600 & echo started; wait")
                .user("65534")
                .timeout(Duration::from_millis(500)),
        )
        .await
        .unwrap();
    assert_eq!(r.reason, shellbox_core::ExitReason::TimedOut);
    assert_eq!(text(&r.stdout), "started\n");
    let r = sh(&*m, "ps -o user,comm | grep -c '^65534 *sleep' || true").await;
    assert_eq!(text(&r.stdout).trim(), "0", "{r:?}");
    // A missing cwd is an ordinary failed result with the engine's message (unknown users
    // are errors: see set_up_failures_are_typed_errors); the machine stays usable.
    let r = m
        .run(Command::new("pwd").cwd("/no/such/dir"))
        .await
        .unwrap();
    assert_ne!(r.exit_code, Some(0), "{r:?}");
    assert_eq!(r.reason, shellbox_core::ExitReason::Exited);
    // Not executable: 126.
    let r = sh(&*m, "printf 'x' > /tmp/noexec; /tmp/noexec").await;
    assert_eq!(r.exit_code, Some(126), "{r:?}");
    m.close().await.unwrap();

    // An empty workdir keeps the image's (here /).
    let m = f.create(common::spec().workdir("")).await.unwrap();
    assert_eq!(
        text(&m.run(Command::new("pwd")).await.unwrap().stdout),
        "/\n"
    );
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn failed_create_removes_its_container() {
    let Some(f) = common::setup("failed_create_removes_its_container").await else {
        return;
    };
    // The workdir cannot be created (a file is in the way): error, nothing left.
    let mark = marker();
    let err = f
        .create(
            common::spec()
                .workdir("/etc/passwd/sub")
                .env("SHELLBOX_TEST_MARK", &mark),
        )
        .await
        .err()
        .expect("expected an error");
    assert!(matches!(err, Error::Backend { .. }), "{err:?}");
    assert!(err.to_string().contains("/etc/passwd/sub"), "{err}");
    assert_eq!(containers_with_marker(f.docker(), &mark).await, 0);

    // A startup_timeout that runs out is a timeout error, and leaves nothing.
    let mark = marker();
    let mut spec = common::spec().env("SHELLBOX_TEST_MARK", &mark);
    spec.startup_timeout = Some(Duration::from_millis(1));
    let err = f.create(spec).await.err().expect("expected an error");
    assert!(err.is_timeout(), "{err:?}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(containers_with_marker(f.docker(), &mark).await, 0);

    // A create cancelled midway leaves nothing either.
    let mark = marker();
    let spec = common::spec().env("SHELLBOX_TEST_MARK", &mark);
    for delay_ms in [5u64, 30, 80, 150] {
        let _ = tokio::time::timeout(Duration::from_millis(delay_ms), f.create(spec.clone())).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(containers_with_marker(f.docker(), &mark).await, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn drop_and_close_remove_the_container() {
    let Some(f) = common::setup("drop_and_close_remove_the_container").await else {
        return;
    };
    let m = f.create_machine(common::spec()).await.unwrap();
    let id = m.container_id().to_string();
    assert!(common::container_exists(f.docker(), &id).await);
    drop(m);
    assert!(!common::container_exists(f.docker(), &id).await);

    let m = f.create_machine(common::spec()).await.unwrap();
    let id = m.container_id().to_string();
    let (a, b) = futures::join!(m.close(), m.close());
    a.unwrap();
    b.unwrap();
    assert!(!common::container_exists(f.docker(), &id).await);
    assert!(matches!(
        m.run(Command::new("true")).await,
        Err(Error::Closed)
    ));
    let host = tempfile::tempdir().unwrap();
    assert!(matches!(
        m.download("/etc/passwd", &host.path().join("p")).await,
        Err(Error::Closed)
    ));
}

/// What a command leaves in the background keeps running (the process model) on both
/// paths. Dropping a stream kills its command on both.
#[tokio::test(flavor = "multi_thread")]
async fn background_processes_per_command_path() {
    let Some(f) = common::setup("background_processes_per_command_path").await else {
        return;
    };
    for path in [CommandPath::Auto, CommandPath::Exec] {
        let m = f
            .clone()
            .command_path(path)
            .create_machine(common::spec())
            .await
            .unwrap();
        assert_eq!(m.uses_supervisor(), path == CommandPath::Auto);
        let started = Instant::now();
        let r = sh(&m, "sleep 300 & echo bg").await;
        assert_eq!(text(&r.stdout), "bg\n");
        assert_eq!(r.exit_code, Some(0));
        assert!(started.elapsed() < Duration::from_secs(10));
        let r = sh(&m, "ps -o comm | grep -c '^sleep' || true").await;
        // The container's keep-alive sleep, and the background one.
        assert_eq!(text(&r.stdout).trim(), "2", "{path:?}: {r:?}");
        // Dropping a stream kills its command.
        let stream = m
            .run_stream(Command::shell("echo go; exec sleep 200"))
            .await
            .unwrap();
        let mut stream = stream;
        let first = stream.next().await.unwrap().unwrap();
        assert_eq!(first, shellbox_core::Event::Stdout("go\n".into()));
        drop(stream);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let r = sh(
                &m,
                "ps -o comm,args | grep '^sleep' | grep -c 'sleep 200' || true",
            )
            .await;
            if text(&r.stdout).trim() == "0" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the dropped command lives on: {r:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        m.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn output_flood_and_large_transfers_stay_bounded_in_memory() {
    let Some(f) = common::setup("output_flood_and_large_transfers_stay_bounded_in_memory").await
    else {
        return;
    };
    let m = f.create(common::spec()).await.unwrap();
    let before = peak_rss_kib();
    let r = m
        .run(Command::shell(
            "yes 0123456789abcdef | head -c 300000000; echo done >&2",
        ))
        .await
        .unwrap();
    assert_eq!(r.stdout.len(), 1024 * 1024);
    assert!(r.stdout_truncated);
    assert_eq!(text(&r.stderr), "done\n");

    // 1 GiB each way (a sparse host file; the guest copy is real).
    let host = tempfile::tempdir().unwrap();
    let big = host.path().join("big.bin");
    let file = std::fs::File::create(&big).unwrap();
    file.set_len(1 << 30).unwrap();
    drop(file);
    m.upload(&big, "/tmp/big.bin").await.unwrap();
    let r = sh(&*m, "wc -c < /tmp/big.bin").await;
    assert_eq!(text(&r.stdout).trim(), (1u64 << 30).to_string());
    let back = host.path().join("back.bin");
    m.download("/tmp/big.bin", &back).await.unwrap();
    assert_eq!(std::fs::metadata(&back).unwrap().len(), 1 << 30);
    let grown_mib = (peak_rss_kib().saturating_sub(before)) / 1024;
    assert!(grown_mib < 200, "peak memory grew by {grown_mib} MiB");
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn downloads_keep_links_and_never_write_through_them() {
    let Some(f) = common::setup("downloads_keep_links_and_never_write_through_them").await else {
        return;
    };
    let m = f.create(common::spec()).await.unwrap();
    let host = tempfile::tempdir().unwrap();
    sh(
        &*m,
        "mkdir -p /tmp/abs /tmp/up/d /tmp/ok/d; echo x > /tmp/ok/f; \
         ln -s /etc/passwd /tmp/abs/link; ln -s ../../../../outside /tmp/up/d/link; \
         ln -s ../f /tmp/ok/d/link",
    )
    .await;
    // Links that lead out are copied as links (as tar does, REFERENCE.md 4.5), and no
    // later download writes through them.
    for (source, name, link, text) in [
        ("/tmp/abs", "abs", "link", "/etc/passwd"),
        ("/tmp/up", "up", "d/link", "../../../../outside"),
    ] {
        let target = host.path().join(name);
        m.download(source, &target).await.unwrap();
        assert_eq!(
            std::fs::read_link(target.join(link)).unwrap(),
            Path::new(text)
        );
        let through = target.join(link).join("x");
        let err = m
            .download("/tmp/ok/f", &through)
            .await
            .expect_err("expected an error");
        assert!(matches!(err, Error::Transfer { .. }), "{source}: {err:?}");
        assert!(!host.path().join("outside").exists());
    }
    // Links that stay inside are kept as links.
    let ok = host.path().join("ok");
    m.download("/tmp/ok", &ok).await.unwrap();
    assert_eq!(
        std::fs::read_link(ok.join("d/link")).unwrap(),
        Path::new("../f")
    );
    assert_eq!(std::fs::read(ok.join("d/link")).unwrap(), b"x\n");
    // A file into an existing host directory lands inside it.
    let dir = host.path().join("into");
    std::fs::create_dir(&dir).unwrap();
    m.download("/tmp/ok/f", &dir).await.unwrap();
    assert_eq!(std::fs::read(dir.join("f")).unwrap(), b"x\n");
    // A symlink given as the source is followed inside the container.
    sh(&*m, "ln -s /tmp/ok /tmp/ok-link").await;
    let via = host.path().join("via");
    m.download("/tmp/ok-link", &via).await.unwrap();
    assert_eq!(std::fs::read(via.join("f")).unwrap(), b"x\n");
    // Uploads never replace a directory with a file, or a file with a directory.
    let file = host.path().join("plain.txt");
    std::fs::write(&file, b"p").unwrap();
    sh(
        &*m,
        "mkdir -p /tmp/keepdir && echo kept > /tmp/keepdir/inside",
    )
    .await;
    let err = m
        .upload(&file, "/tmp/keepdir")
        .await
        .expect_err("expected an error");
    assert!(matches!(err, Error::Transfer { .. }), "{err:?}");
    let dir_src = host.path().join("ok");
    let err = m
        .upload(&dir_src, "/tmp/ok/f")
        .await
        .expect_err("expected an error");
    assert!(matches!(err, Error::Transfer { .. }), "{err:?}");
    let r = sh(&*m, "cat /tmp/keepdir/inside /tmp/ok/f").await;
    assert_eq!(text(&r.stdout), "kept\nx\n");
    let err = m
        .download("/tmp/missing", &host.path().join("m"))
        .await
        .expect_err("expected an error");
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
    m.close().await.unwrap();
}

/// gc removes containers of dead owners only; with a label filter (the test's own run
/// label) it touches nothing else on the engine, not even other dead owners' containers.
#[tokio::test(flavor = "multi_thread")]
async fn gc_removes_containers_of_dead_owners_only() {
    let Some(f) = common::setup("gc_removes_containers_of_dead_owners_only").await else {
        return;
    };
    const RUN_LABEL: &str = "shellbox-test.gc-run";
    let run = marker();
    let filter = format!("{RUN_LABEL}={run}");
    let docker = f.docker().clone();
    let live = f
        .clone()
        .label(RUN_LABEL, &run)
        .create_machine(common::spec())
        .await
        .unwrap();
    let info = docker
        .inspect_container(live.container_id(), None)
        .await
        .unwrap();
    assert_eq!(
        info.config.unwrap().labels.unwrap().get(RUN_LABEL),
        Some(&run)
    );

    // Containers whose owner (a finished child of this test) is gone.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = child.id();
    child.wait().unwrap();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string();
    let make = |pid: String, owner_host: String, run: Option<String>, suffix: &'static str| {
        let docker = docker.clone();
        async move {
            let mut labels = HashMap::from([
                (labels::MACHINE.to_string(), "1".to_string()),
                (labels::OWNER_PID.to_string(), pid),
                (labels::OWNER_HOST.to_string(), owner_host),
            ]);
            if let Some(run) = run {
                labels.insert(RUN_LABEL.to_string(), run);
            }
            let name = format!("shellbox-gc-test-{}-{suffix}", std::process::id());
            docker
                .create_container(
                    Some(CreateContainerOptions {
                        name: Some(name.clone()),
                        ..Default::default()
                    }),
                    ContainerCreateBody {
                        image: Some(BUSYBOX_TEST_IMAGE.to_string()),
                        cmd: Some(vec!["true".to_string()]),
                        labels: Some(labels),
                        ..Default::default()
                    },
                )
                .await
                .unwrap();
            name
        }
    };
    let dead = make(
        dead_pid.to_string(),
        host.clone(),
        Some(run.clone()),
        "dead",
    )
    .await;
    let elsewhere = make(
        dead_pid.to_string(),
        format!("{host}-elsewhere"),
        Some(run.clone()),
        "other",
    )
    .await;
    // Someone else's leaked container on this engine: not this test's to remove.
    let foreign = make(dead_pid.to_string(), host.clone(), None, "foreign").await;

    assert!(matches!(
        gc_with_labels(&docker, &[""]).await,
        Err(Error::InvalidInput(_))
    ));
    let report = gc_with_labels(&docker, &[&filter]).await.unwrap();
    assert_eq!(report.removed, vec![dead.clone()], "{report:?}");
    assert_eq!((report.kept, report.other_hosts), (1, 1), "{report:?}");
    assert!(report.failed.is_empty(), "{report:?}");
    assert!(!common::container_exists(&docker, &dead).await);
    assert!(common::container_exists(&docker, live.container_id()).await);
    assert!(common::container_exists(&docker, &elsewhere).await);
    assert!(common::container_exists(&docker, &foreign).await);

    for name in [&elsewhere, &foreign] {
        let _ = docker
            .remove_container(
                name,
                Some(
                    shellbox_docker::bollard::query_parameters::RemoveContainerOptions {
                        force: true,
                        ..Default::default()
                    },
                ),
            )
            .await;
    }
    live.close().await.unwrap();
    // A label in shellbox's own namespace is refused (it decides ownership).
    let err = f
        .clone()
        .label(labels::OWNER_PID, "1")
        .create_machine(common::spec())
        .await
        .expect_err("a forged owner label was accepted");
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn floor_exec_and_busybox_image_helpers() {
    let Some(f) = common::setup("floor_exec_and_busybox_image_helpers").await else {
        return;
    };
    let id = shellbox_docker::ensure_busybox_image(f.docker(), BUSYBOX_TEST_IMAGE)
        .await
        .unwrap();
    assert!(id.starts_with("sha256:"), "{id}");
    let m = f.create_machine(common::spec()).await.unwrap();
    shellbox_docker::floor_exec_true(m.docker(), m.container_id())
        .await
        .unwrap();
    m.close().await.unwrap();
    assert!(
        shellbox_docker::floor_exec_true(f.docker(), m.container_id())
            .await
            .is_err()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timeout_that_cannot_kill_disposes_of_the_machine() {
    let Some(f) = common::setup("a_timeout_that_cannot_kill_disposes_of_the_machine").await else {
        return;
    };
    let m = f.create_machine(common::spec()).await.unwrap();
    let docker = f.docker().clone();
    let id = m.container_id().to_string();
    // A paused container accepts no exec, so the kill after the deadline cannot be done.
    let pauser = {
        let docker = docker.clone();
        let id = id.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            docker.pause_container(&id).await.unwrap();
        })
    };
    let started = Instant::now();
    let err = m
        .run(Command::shell("echo started; sleep 100").timeout(Duration::from_millis(1500)))
        .await
        .expect_err("expected an error");
    pauser.await.unwrap();
    assert!(matches!(err, Error::Terminated(_)), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(
        !common::container_exists(&docker, &id).await,
        "the machine was not disposed of"
    );
    assert!(matches!(
        m.run(Command::new("true")).await,
        Err(Error::Closed)
    ));
    m.close().await.unwrap();
}

/// Waits (up to 10 s) until the engine no longer reports the container running.
async fn wait_stopped(docker: &Docker, id: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        match docker.inspect_container(id, None).await {
            Ok(info) if info.state.as_ref().and_then(|s| s.running) == Some(true) => {}
            _ => return true,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_container_terminates_the_machine() {
    let Some(f) = common::setup("a_stopped_container_terminates_the_machine").await else {
        return;
    };
    let host = tempfile::tempdir().unwrap();
    let file = host.path().join("f");
    std::fs::write(&file, b"f").unwrap();
    // Commands that kill every process they can: the machine survives them (its keep-alive
    // is PID 1, which ignores signals from inside), and orphans are still reaped. A root
    // command's `kill -9 -1` also reaches the supervisor (root has CAP_KILL, as under
    // `docker exec`): the machine is then Terminated, never a result.
    for (killer, user) in [
        ("kill -9 -1", Some("65534")),
        ("killall sh", None),
        ("kill -9 1; kill -TERM 1", None),
        ("kill -9 -1", None),
    ] {
        let m = f.create_machine(common::spec()).await.unwrap();
        let id = m.container_id().to_string();
        let mut c = Command::shell(killer).timeout(Duration::from_secs(20));
        if let Some(u) = user {
            c = c.user(u);
        }
        let r = m.run(c).await;
        if user.is_none() && killer == "kill -9 -1" && m.uses_supervisor() {
            assert!(matches!(r, Err(Error::Terminated(_))), "{killer}: {r:?}");
            assert!(!common::container_exists(f.docker(), &id).await);
            assert!(matches!(
                m.run(Command::new("true")).await,
                Err(Error::Closed)
            ));
            m.close().await.unwrap();
            continue;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let r = m.run(Command::shell("echo ok")).await.unwrap();
        assert_eq!(text(&r.stdout), "ok\n", "{killer} {user:?}: {r:?}");
        m.upload(&file, "/tmp/f").await.unwrap();
        let r = sh(&m, "cat /tmp/f").await;
        assert_eq!(text(&r.stdout), "f", "{killer}");
        assert!(common::container_exists(f.docker(), &id).await);
        // An orphan that exits is reaped by PID 1 (no zombie left).
        sh(&m, "(sleep 0.2 &) ; true").await;
        tokio::time::sleep(Duration::from_millis(800)).await;
        let r = sh(&m, "ps -o stat | grep -c '^Z' || true").await;
        assert_eq!(text(&r.stdout).trim(), "0", "{killer}");
        m.close().await.unwrap();
    }
    // The container stopped from outside: every kind of call says so.
    for call in ["run", "run_stream", "upload", "download"] {
        let m = f.create_machine(common::spec()).await.unwrap();
        let id = m.container_id().to_string();
        f.docker()
            .kill_container(
                &id,
                None::<shellbox_docker::bollard::query_parameters::KillContainerOptions>,
            )
            .await
            .unwrap();
        assert!(wait_stopped(f.docker(), &id).await);
        let err = match call {
            "run" => m.run(Command::new("true")).await.map(|_| ()),
            "run_stream" => m.run_stream(Command::new("true")).await.map(|_| ()),
            "upload" => m.upload(&file, "/tmp/f").await,
            _ => m.download("/etc/passwd", &host.path().join("p")).await,
        }
        .expect_err(call);
        assert!(matches!(err, Error::Terminated(_)), "{call}: {err:?}");
        assert!(!common::container_exists(f.docker(), &id).await, "{call}");
        assert!(matches!(
            m.upload(&file, "/tmp/f").await,
            Err(Error::Closed)
        ));
        m.close().await.unwrap();
    }
}

/// Whether a command on the exec path gets an audit session of its own: the kernel lets a
/// process whose login uid is unset take one (the engine's usual case), not one started
/// from a login (a rootless engine), nor a kernel without audit. Prints a SKIP line when not.
async fn exec_path_has_audit_sessions(m: &dyn Machine) -> bool {
    let r = sh(m, "cat /proc/self/sessionid 2>/dev/null || echo none").await;
    let id = text(&r.stdout);
    let has = !matches!(id.trim(), "" | "none" | "4294967295");
    if !has {
        eprintln!(
            "SKIP the exec path's audit-session kill: commands have no audit session of \
             their own here (sessionid {:?})",
            id.trim()
        );
    }
    has
}

/// Issue 14 on the exec path (one Engine exec per command): the process model of the
/// supervisor's path and of local. A background process outlives its command (the command
/// still ends at once, though the process holds its output open, and writes it makes later
/// are dropped without blocking it), and a timeout kills what the command started even when
/// it dropped `SHELLBOX_COMMAND_ID` and left the session (`env -u SHELLBOX_COMMAND_ID setsid`,
/// a double fork), while an earlier command's background process lives on. Failed before:
/// the exec path killed `sleep 1000 &` when its command ended, and the marker-less escapee
/// survived the timeout.
#[tokio::test(flavor = "multi_thread")]
async fn exec_path_process_model() {
    let Some(f) = common::setup("exec_path_process_model").await else {
        return;
    };
    let m = f
        .command_path(CommandPath::Exec)
        .create_machine(common::spec())
        .await
        .unwrap();
    assert!(!m.uses_supervisor());
    let started = Instant::now();
    let r = sh(&m, "sleep 1000 & echo $! > /tmp/bg; echo started").await;
    assert_eq!(
        (text(&r.stdout), r.exit_code),
        ("started\n".into(), Some(0)),
        "{r:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let r = sh(&m, "kill -0 \"$(cat /tmp/bg)\" && echo alive").await;
    assert_eq!(text(&r.stdout), "alive\n", "{r:?}");
    // A background writer on the command's stdout and stderr: its writes after the command
    // ended are not the command's output, and never block it (they succeed while the
    // engine keeps the exec's streams, then fail with EPIPE: the writer ignores SIGPIPE).
    let r = sh(
        &m,
        "(trap '' PIPE; sleep 1; i=0; while [ $i -lt 300 ]; do printf '%1000s\\n' x || break; \
           echo e >&2 || break; i=$((i+1)); done; echo done > /tmp/wrote) & echo out; echo err >&2",
    )
    .await;
    assert_eq!(
        (text(&r.stdout), text(&r.stderr)),
        ("out\n".into(), "err\n".into()),
        "{r:?}"
    );
    let r = sh(
        &m,
        "i=0; while [ ! -f /tmp/wrote ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; cat /tmp/wrote",
    )
    .await;
    assert_eq!(
        text(&r.stdout),
        "done\n",
        "the background writer was blocked: {r:?}"
    );

    if exec_path_has_audit_sessions(&m).await {
        let r = m
            .run(
                Command::shell(
                    "env -u SHELLBOX_COMMAND_ID setsid sh -c 'sleep 1004' >/dev/null 2>&1 & \
                     (env -i setsid sleep 1005 >/dev/null 2>&1 &); echo ready; sleep 100",
                )
                .timeout(Duration::from_secs(2)),
            )
            .await
            .unwrap();
        assert_eq!(r.reason, shellbox_core::ExitReason::TimedOut, "{r:?}");
        assert_eq!(text(&r.stdout), "ready\n", "{r:?}");
        assert_eq!(
            count_procs(&m, "sleep 1004").await,
            0,
            "the escapee survived"
        );
        assert_eq!(
            count_procs(&m, "sleep 1005").await,
            0,
            "the escapee survived"
        );
    }
    let r = sh(&m, "kill -0 \"$(cat /tmp/bg)\" && echo alive").await;
    assert_eq!(
        text(&r.stdout),
        "alive\n",
        "an earlier command's process was killed: {r:?}"
    );
    m.close().await.unwrap();
}

/// How many processes in the machine have `pattern` in their `ps` args.
async fn count_procs(m: &dyn Machine, pattern: &str) -> usize {
    let r = sh(m, &format!("ps -o args | grep -c '^{pattern}' || true")).await;
    text(&r.stdout).trim().parse().unwrap()
}

/// Processes that leave their command's group (`setsid`, `env -i setsid`): on both paths
/// they outlive a command that exits and die with one that times out, found by the
/// command's keeper (a subreaper) on the supervisor path and by the command's audit session
/// on the exec path, not by a marker. Another command's processes are never touched.
#[tokio::test(flavor = "multi_thread")]
async fn setsid_escapees_per_command_path() {
    let Some(f) = common::setup("setsid_escapees_per_command_path").await else {
        return;
    };
    for path in [CommandPath::Auto, CommandPath::Exec] {
        let m = f
            .clone()
            .command_path(path)
            .create_machine(common::spec())
            .await
            .unwrap();
        let sup = m.uses_supervisor();
        let survivors = 1;
        let mut other = m
            .run_stream(Command::shell("setsid sleep 1009 & echo go; wait"))
            .await
            .unwrap();
        assert_eq!(
            other.next().await.unwrap().unwrap(),
            shellbox_core::Event::Stdout("go\n".into())
        );

        let r = sh(&m, "setsid sleep 1000 >/dev/null 2>&1 & sleep 0.5; echo ok").await;
        assert_eq!(text(&r.stdout), "ok\n");
        assert_eq!(count_procs(&m, "sleep 1000").await, survivors, "{path:?}");

        // An escaped child holding the output open does not keep the command running.
        let started = Instant::now();
        let r = m
            .run(
                Command::shell("setsid sleep 3601 & sleep 1; echo exit; exit 3")
                    .timeout(Duration::from_secs(6)),
            )
            .await
            .unwrap();
        assert_eq!(text(&r.stdout), "exit\n");
        assert_eq!(r.exit_code, Some(3), "{r:?}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(count_procs(&m, "sleep 3601").await, survivors, "{path:?}");

        // On timeout, escaped processes are killed.
        let r = m
            .run(
                Command::shell("setsid sleep 1001 >/dev/null 2>&1 & sleep 100")
                    .timeout(Duration::from_secs(1)),
            )
            .await
            .unwrap();
        assert_eq!(r.reason, shellbox_core::ExitReason::TimedOut, "{r:?}");
        assert_eq!(count_procs(&m, "sleep 1001").await, 0, "{path:?}");

        if sup || exec_path_has_audit_sessions(&m).await {
            // One that also cleared its environment is found by its keeper (or its audit
            // session) all the same.
            let r = m
                .run(
                    Command::shell("env -i setsid sleep 1002 >/dev/null 2>&1 & sleep 100")
                        .timeout(Duration::from_secs(1)),
                )
                .await
                .unwrap();
            assert_eq!(r.reason, shellbox_core::ExitReason::TimedOut, "{r:?}");
            assert_eq!(
                count_procs(&m, "sleep 1002").await,
                0,
                "the escapee survived"
            );
        }
        // A command whose escapee cleared its environment still ends with its own status
        // once its main process has.
        let started = Instant::now();
        let r = m
            .run(
                Command::shell("env -i setsid sleep 1003 & sleep 0.2; echo done; exit 4")
                    .timeout(Duration::from_secs(8)),
            )
            .await
            .unwrap();
        assert_eq!((text(&r.stdout).as_str(), r.exit_code), ("done\n", Some(4)));
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );

        assert_eq!(count_procs(&m, "sleep 1009").await, 1, "{path:?}");
        drop(other.next());
        drop(other);
        m.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn close_during_a_command_makes_it_closed() {
    let Some(f) = common::setup("close_during_a_command_makes_it_closed").await else {
        return;
    };
    let m = std::sync::Arc::new(f.create_machine(common::spec()).await.unwrap());
    let runner = {
        let m = m.clone();
        tokio::spawn(async move { m.run(Command::shell("echo started; sleep 100")).await })
    };
    tokio::time::sleep(Duration::from_millis(800)).await;
    m.close().await.unwrap();
    let result = tokio::time::timeout(Duration::from_secs(10), runner)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(result, Err(Error::Closed)), "{result:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn transfers_refuse_kernel_provided_paths() {
    let Some(f) = common::setup("transfers_refuse_kernel_provided_paths").await else {
        return;
    };
    let m = f.create_machine(common::spec()).await.unwrap();
    let host = tempfile::tempdir().unwrap();
    let file = host.path().join("f");
    std::fs::write(&file, b"f").unwrap();
    for target in ["/proc/x", "/dev/shm/x", "/sys/x", "/dev"] {
        let err = m.upload(&file, target).await.expect_err(target);
        assert!(matches!(err, Error::Unsupported(_)), "{target}: {err:?}");
        assert!(err.to_string().contains("kernel-provided path"), "{err}");
    }
    sh(&m, "echo shm > /dev/shm/x; ln -s /dev/shm /tmp/shm").await;
    for source in ["/dev/shm", "/proc/self/environ", "/sys", "/tmp/shm"] {
        let target = host.path().join("out");
        let err = m.download(source, &target).await.expect_err(source);
        assert!(matches!(err, Error::Unsupported(_)), "{source}: {err:?}");
        assert!(!target.exists(), "{source}");
    }
    // Names that only start like them are ordinary.
    m.upload(&file, "/devices/f").await.unwrap();
    let r = sh(&m, "cat /devices/f /dev/shm/x").await;
    assert_eq!(text(&r.stdout), "fshm\n");
    m.close().await.unwrap();
}

/// The names in `dir`, sorted.
fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread")]
async fn downloads_are_all_or_nothing_and_keep_chained_links() {
    let Some(f) = common::setup("downloads_are_all_or_nothing_and_keep_chained_links").await else {
        return;
    };
    let m = f.create_machine(common::spec()).await.unwrap();
    sh(
        &m,
        "mkdir -p /w/chain/x/x/x /w/dot /w/part/sub /w/good/sub; \
         ln -s ../../.. /w/chain/x/x/x/p; ln -s x/x/x/p/../../.. /w/chain/root; \
         ln -s . /w/dot/a; ln -s a/.. /w/dot/m; \
         echo a > /w/part/a.txt; echo s > /w/part/sub/s; ln -s /etc/passwd /w/part/z; \
         echo g > /w/good/g; echo s > /w/good/sub/s; chmod 750 /w/good; \
         mkfifo /w/chain/x/fifo /w/dot/fifo /w/part/sub/fifo",
    )
    .await;
    // Each tree holds links and a fifo, which refuses it whole.
    let host = tempfile::tempdir().unwrap();
    let work = host.path().join("work");
    std::fs::create_dir(&work).unwrap();
    for source in ["/w/chain", "/w/dot", "/w/part"] {
        // A new target: nothing is left behind.
        let target = work.join("new");
        let err = m.download(source, &target).await.expect_err(source);
        assert!(matches!(err, Error::Transfer { .. }), "{source}: {err:?}");
        assert!(!err.to_string().contains(".shellbox-download"), "{err}");
        assert!(
            err.to_string().contains(&*target.to_string_lossy()),
            "{err}"
        );
        assert!(!target.exists(), "{source}");
        assert!(
            names_in(&work).is_empty(),
            "{source}: {:?}",
            names_in(&work)
        );
        // An existing directory target: left as it was.
        let existing = work.join("existing");
        std::fs::create_dir(&existing).unwrap();
        std::fs::write(existing.join("keep"), b"k").unwrap();
        let err = m.download(source, &existing).await.expect_err(source);
        assert!(matches!(err, Error::Transfer { .. }), "{source}: {err:?}");
        assert_eq!(names_in(&existing), ["keep"], "{source}");
        assert_eq!(names_in(&work), ["existing"], "{source}");
        std::fs::remove_dir_all(&existing).unwrap();
    }
    // A good tree merges into an existing directory, replacing what it names.
    let existing = work.join("merged");
    std::fs::create_dir_all(existing.join("sub")).unwrap();
    std::fs::write(existing.join("keep"), b"k").unwrap();
    std::fs::write(existing.join("g"), b"old").unwrap();
    std::fs::write(existing.join("sub/other"), b"o").unwrap();
    m.download("/w/good", &existing).await.unwrap();
    assert_eq!(names_in(&existing), ["g", "keep", "sub"]);
    assert_eq!(names_in(&existing.join("sub")), ["other", "s"]);
    assert_eq!(std::fs::read(existing.join("g")).unwrap(), b"g\n");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&existing).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o750);
    // Chained links are copied as stored, also one that climbs out next to a link
    // already in the target; no download writes through it.
    sh(
        &m,
        "rm /w/chain/x/fifo && mkdir -p /w/climb && ln -s a/.. /w/climb/m && echo c > /w/climb/c",
    )
    .await;
    let chain = work.join("chain");
    m.download("/w/chain", &chain).await.unwrap();
    assert_eq!(
        std::fs::read_link(chain.join("root")).unwrap(),
        Path::new("x/x/x/p/../../..")
    );
    let prepared = work.join("prepared");
    std::fs::create_dir(&prepared).unwrap();
    std::os::unix::fs::symlink(".", prepared.join("a")).unwrap();
    m.download("/w/climb", &prepared).await.unwrap();
    assert_eq!(
        std::fs::read_link(prepared.join("m")).unwrap(),
        Path::new("a/..")
    );
    for through in [chain.join("root/x"), prepared.join("m/x")] {
        let err = m
            .download("/w/good/g", &through)
            .await
            .expect_err("through a link");
        assert!(matches!(err, Error::Transfer { .. }), "{err:?}");
    }
    assert!(!host.path().join("x").exists() && !work.join("x").exists());
    std::fs::remove_dir_all(&prepared).unwrap();
    std::fs::remove_dir_all(&chain).unwrap();
    // A new target is made whole, a file too.
    m.download("/w/good", &work.join("fresh")).await.unwrap();
    assert_eq!(names_in(&work.join("fresh")), ["g", "sub"]);
    m.download("/w/good/g", &work.join("file")).await.unwrap();
    assert_eq!(std::fs::read(work.join("file")).unwrap(), b"g\n");
    assert_eq!(names_in(&work), ["file", "fresh", "merged"]);
    m.close().await.unwrap();
}

/// Issue 8.6: a container's process count is bounded (`HostConfig.PidsLimit`), by default
/// and per spec; a fork bomb stops at the bound and the machine stays usable.
#[tokio::test(flavor = "multi_thread")]
async fn a_fork_bomb_stops_at_the_pids_limit() {
    let Some(f) = common::setup("a_fork_bomb_stops_at_the_pids_limit").await else {
        return;
    };
    let m = f.create_machine(common::spec()).await.unwrap();
    let info = f
        .docker()
        .inspect_container(m.container_id(), None)
        .await
        .unwrap();
    assert_eq!(
        info.host_config.unwrap().pids_limit,
        Some(i64::from(shellbox_core::DEFAULT_PIDS_LIMIT))
    );
    m.close().await.unwrap();

    const LIMIT: u32 = 48;
    let m = f
        .create_machine(common::spec().pids_limit(LIMIT))
        .await
        .unwrap();
    // The bomb (an inner shell starting 300 sleeps; it exits at the first failed fork)
    // runs in the command's group; then only builtins read the counts, since no fork can
    // succeed while the sleeps hold every slot.
    let script = "sh -c 'i=0; while [ $i -lt 300 ]; do sleep 60 & i=$((i+1)); done' 2>/dev/null; \
        f=/sys/fs/cgroup/pids; [ -e $f/pids.max ] || f=/sys/fs/cgroup; \
        read max < $f/pids.max; read cur < $f/pids.current; \
        n=0; for d in /proc/[0-9]*; do n=$((n+1)); done; \
        echo $max $cur $n; exec sleep 600";
    // Its sleeps outlive the inner shell (the process model): the command's timeout kills
    // them all, its whole subtree, and keeps the output. `exec` needs no fork.
    let r = m
        .run(Command::shell(script).timeout(Duration::from_secs(8)))
        .await
        .unwrap();
    assert_eq!(r.reason, shellbox_core::ExitReason::TimedOut, "{r:?}");
    let out = text(&r.stdout);
    let fields: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(fields.len(), 3, "{r:?}");
    assert_eq!(fields[0], LIMIT.to_string(), "{r:?}");
    let current: u32 = fields[1].parse().unwrap();
    let processes: u32 = fields[2].parse().unwrap();
    assert!(current <= LIMIT, "pids.current {current} over {LIMIT}");
    assert!(processes <= LIMIT, "{processes} processes over {LIMIT}");
    // The bomb did reach the bound (so the bound, not the loop, stopped it).
    assert!(current >= LIMIT - 4, "the bomb stopped early: {current}");
    // The command's sleeps were killed with it: the next command works, and the slots are free.
    let r = sh(&m, "echo ok; ps -o comm | grep -c '^sleep' || true").await;
    assert_eq!(text(&r.stdout), "ok\n1\n", "{r:?}");
    m.close().await.unwrap();
}

/// Issue 8.8: a timeout too far away to be a deadline (`Duration::MAX`) is no deadline, not
/// a panic.
#[tokio::test(flavor = "multi_thread")]
async fn a_huge_timeout_saturates() {
    let Some(f) = common::setup("a_huge_timeout_saturates").await else {
        return;
    };
    let m = f.create_machine(common::spec()).await.unwrap();
    for timeout in [Duration::MAX, Duration::from_secs_f64(1e19)] {
        let r = m
            .run(Command::shell("echo hi").timeout(timeout))
            .await
            .unwrap();
        assert_eq!((r.exit_code, text(&r.stdout)), (Some(0), "hi\n".into()));
        let mut s = m
            .run_stream(Command::shell("echo hi").timeout(timeout))
            .await
            .unwrap();
        let mut n = 0;
        while let Some(ev) = s.next().await {
            ev.unwrap();
            n += 1;
        }
        assert!(n >= 2);
    }
    m.close().await.unwrap();
}

/// Issue 8.12: a machine dropped unclosed while its runtime shuts down (a task holding it
/// dropped with the runtime, or a test panicking inside `block_on`) still has its container
/// removed, on both runtime flavors.
#[test]
fn a_machine_dropped_while_its_runtime_shuts_down_is_removed() {
    let checker = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let Some(f) = checker.block_on(common::setup(
        "a_machine_dropped_while_its_runtime_shuts_down_is_removed",
    )) else {
        return;
    };
    let runtime = |multi: bool| {
        if multi {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap()
        } else {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
        }
    };
    for multi in [false, true] {
        // A task holds the machine; the runtime is dropped (its tasks with it).
        let rt = runtime(multi);
        let f2 = f.clone();
        let id = rt.block_on(async move {
            let m = f2.create_machine(common::spec()).await.unwrap();
            let id = m.container_id().to_string();
            tokio::spawn(async move {
                let _held = m;
                std::future::pending::<()>().await;
            });
            tokio::task::yield_now().await;
            id
        });
        assert!(checker.block_on(common::container_exists(f.docker(), &id)));
        drop(rt);
        assert!(
            !checker.block_on(common::container_exists(f.docker(), &id)),
            "multi_thread={multi}: a machine held by a task of a dropped runtime leaked"
        );

        // A test body panics inside block_on: the machine is dropped while unwinding, then
        // the runtime goes.
        let rt = runtime(multi);
        let f2 = f.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rt.block_on(async move {
                let m = f2.create_machine(common::spec()).await.unwrap();
                tx.send(m.container_id().to_string()).unwrap();
                panic!("a test failing with an open machine (expected)");
            })
        }));
        assert!(caught.is_err());
        drop(rt);
        let id = rx.recv().unwrap();
        assert!(
            !checker.block_on(common::container_exists(f.docker(), &id)),
            "multi_thread={multi}: a machine dropped by a panicking test leaked"
        );
    }
}

/// Issues 8.13 and 8.15 (rule 2): what the engine cannot set up is a typed error, never a
/// command result. An argv or environment execve would refuse is `InvalidInput` before any
/// exec; an unknown user is `Unsupported` naming it. A missing cwd stays a failed result
/// (REFERENCE 5.2), and the machine stays usable throughout.
#[tokio::test(flavor = "multi_thread")]
async fn set_up_failures_are_typed_errors() {
    let Some(f) = common::setup("set_up_failures_are_typed_errors").await else {
        return;
    };
    let m = f.create_machine(common::spec()).await.unwrap();
    let big = "x".repeat(200_000);
    let cases = [
        (
            "one argument over MAX_ARG_STRLEN",
            Command::new("true").arg(&big),
        ),
        (
            "one variable over MAX_ARG_STRLEN",
            Command::new("true").env("BIG", &big),
        ),
        (
            "arguments over ARG_MAX",
            Command::new("true").args(std::iter::repeat_n("y".repeat(100_000), 30)),
        ),
        (
            "variables over ARG_MAX",
            Command::new("true").envs((0..30).map(|i| (format!("V{i}"), "z".repeat(100_000)))),
        ),
    ];
    for (what, command) in cases {
        let err = m.run(command).await.expect_err(what);
        assert!(matches!(err, Error::InvalidInput(_)), "{what}: {err:?}");
    }
    // Just under the bounds: runs.
    let r = m
        .run(
            Command::new("sh")
                .arg("-c")
                .arg("echo ${#1} ${#V0}")
                .arg("sh")
                .arg("a".repeat(131_000))
                .env("V0", "b".repeat(131_000 - 3)),
        )
        .await
        .unwrap();
    assert_eq!(text(&r.stdout), "131000 130997\n", "{r:?}");
    let r = m
        .run(
            Command::new("sh")
                .args(["-c", "echo $#", "sh"])
                .args(std::iter::repeat_n("y".repeat(100_000), 15)),
        )
        .await
        .unwrap();
    assert_eq!(text(&r.stdout), "15\n", "{r:?}");

    // Unknown users, as a name and as user:group.
    for user in ["shellbox-no-such-user", "shellbox-no-such-user:root"] {
        let err = m.run(Command::new("id").user(user)).await.expect_err(user);
        assert!(err.is_unsupported(), "{user}: {err:?}");
        assert!(
            err.to_string()
                .contains("no such user: shellbox-no-such-user"),
            "{user}: {err}"
        );
        let err = match m.run_stream(Command::new("id").user(user)).await {
            Err(e) => e,
            Ok(mut s) => loop {
                match s.next().await {
                    Some(Err(e)) => break e,
                    Some(Ok(_)) => {}
                    None => panic!("{user}: the stream ended without an error"),
                }
            },
        };
        assert!(err.is_unsupported(), "{user} (stream): {err:?}");
    }
    let err = m
        .run(Command::new("id").user("root:shellbox-no-such-group"))
        .await
        .expect_err("unknown group");
    assert!(err.is_unsupported(), "{err:?}");
    assert!(err.to_string().contains("shellbox-no-such-group"), "{err}");
    // Issue 8: a numeric uid the image has no account for is refused as on local and sim
    // (the engine alone would run it), on both command paths; one with an account runs.
    for path in [CommandPath::Auto, CommandPath::Exec] {
        let f = f.clone().command_path(path);
        let m = f.create_machine(common::spec()).await.unwrap();
        for user in ["4242", "4242:0"] {
            let err = m
                .run(Command::new("id").arg("-u").user(user))
                .await
                .expect_err(user);
            assert!(err.is_unsupported(), "{path:?} {user}: {err:?}");
            assert!(err.to_string().contains("no such user: 4242"), "{err}");
        }
        let r = m
            .run(Command::new("id").arg("-u").user("65534"))
            .await
            .unwrap();
        assert_eq!(text(&r.stdout), "65534\n", "{path:?}");
        m.close().await.unwrap();
    }
    // A cwd that does not exist is the command's failure, as on the other backends.
    let r = m
        .run(Command::new("pwd").cwd("/no/such/dir"))
        .await
        .unwrap();
    assert_ne!(r.exit_code, Some(0), "{r:?}");
    let r = sh(&m, "echo ok").await;
    assert_eq!(text(&r.stdout), "ok\n");
    m.close().await.unwrap();

    // A spec environment too large for any exec is refused at create, leaving nothing.
    let mark = marker();
    let err = f
        .create_machine(
            common::spec()
                .env("SHELLBOX_TEST_MARK", &mark)
                .env("BIG", &big),
        )
        .await
        .expect_err("an oversized spec env was accepted");
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    assert_eq!(containers_with_marker(f.docker(), &mark).await, 0);
}

/// Runs `script` as root in the container through the Engine (not through the machine):
/// its stdout.
async fn engine_root_sh(docker: &Docker, id: &str, script: &str) -> String {
    engine_sh_as(docker, id, "0", script).await
}

/// Runs `script` as `user` in the container through the Engine (`docker exec -u USER`, not
/// through the machine): its stdout.
async fn engine_sh_as(docker: &Docker, id: &str, user: &str, script: &str) -> String {
    use shellbox_docker::bollard::exec::{StartExecOptions, StartExecResults};
    let exec = docker
        .create_exec(
            id,
            shellbox_docker::bollard::models::ExecConfig {
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                user: (!user.is_empty()).then(|| user.into()),
                cmd: Some(vec!["/bin/sh".into(), "-c".into(), script.into()]),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let mut out = Vec::new();
    if let StartExecResults::Attached { mut output, .. } = docker
        .start_exec(&exec.id, None::<StartExecOptions>)
        .await
        .unwrap()
    {
        while let Some(Ok(item)) = output.next().await {
            if let shellbox_docker::bollard::container::LogOutput::StdOut { message } = item {
                out.extend_from_slice(&message);
            }
        }
    }
    text(&out)
}

/// Prints the pid of the machine's supervisor (found by its program path).
const FIND_SUPERVISOR: &str =
    "for d in /proc/[0-9]*; do grep -qs '^Uid:.*2147483645' $d/status && echo ${d#/proc/}; done";

/// Issue 14: a supervisor killed from outside the machine ends its running command and the
/// machine with `Terminated`; the container is removed.
#[tokio::test(flavor = "multi_thread")]
async fn a_dead_supervisor_terminates_the_machine() {
    let Some(f) = common::setup("a_dead_supervisor_terminates_the_machine").await else {
        return;
    };
    let m = f
        .clone()
        .command_path(CommandPath::Supervisor)
        .create_machine(common::spec())
        .await
        .unwrap();
    assert!(m.uses_supervisor());
    let mut stream = m
        .run_stream(Command::shell("echo up; sleep 100"))
        .await
        .unwrap();
    assert_eq!(
        stream.next().await.unwrap().unwrap(),
        shellbox_core::Event::Stdout("up\n".into())
    );
    let pid = engine_root_sh(f.docker(), m.container_id(), FIND_SUPERVISOR).await;
    let pid = pid.trim();
    assert!(
        !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()),
        "{pid:?}"
    );
    engine_root_sh(f.docker(), m.container_id(), &format!("kill -9 {pid}")).await;
    let end = tokio::time::timeout(Duration::from_secs(30), stream.next())
        .await
        .expect("the command's stream did not end");
    assert!(matches!(end, Some(Err(Error::Terminated(_)))), "{end:?}");
    assert!(!common::container_exists(f.docker(), m.container_id()).await);
    assert!(matches!(
        m.run(Command::new("true")).await,
        Err(Error::Closed)
    ));
    m.close().await.unwrap();
}

/// Issue 14: a command cannot reach the supervisor or any keeper's insides: no look into
/// its files, memory or descriptors, no write to its control channel; a non-root command
/// cannot even signal one. A root command has the capabilities a root `docker exec` has
/// (the container's set, here Docker's default with CAP_KILL, CAP_SETUID and CAP_SETGID).
#[tokio::test(flavor = "multi_thread")]
async fn commands_cannot_reach_the_supervisor_or_keepers() {
    let Some(f) = common::setup("commands_cannot_reach_the_supervisor_or_keepers").await else {
        return;
    };
    let m = f
        .clone()
        .command_path(CommandPath::Supervisor)
        .create_machine(common::spec())
        .await
        .unwrap();
    // Another command, whose keeper is its main process's parent.
    let mut other = m
        .run_stream(Command::shell("echo $PPID; sleep 5; echo finished"))
        .await
        .unwrap();
    let other_keeper = match other.next().await.unwrap().unwrap() {
        shellbox_core::Event::Stdout(b) => text(&b).trim().to_string(),
        e => panic!("{e:?}"),
    };
    let probe = |signals: bool| {
        let signal = if signals {
            "kill -9 $t 2>/dev/null && echo kill-$t; kill -STOP $t 2>/dev/null && echo stop-$t; \
             kill -0 $t 2>/dev/null && echo signal-$t;"
        } else {
            ""
        };
        format!(
            "s=$({FIND_SUPERVISOR}); [ -n \"$s\" ] || {{ echo nosup; exit 9; }}; \
             for t in $s $PPID {other_keeper}; do {signal} \
               cat /proc/$t/environ >/dev/null 2>&1 && echo environ-$t; \
               head -c1 /proc/$t/mem >/dev/null 2>&1 && echo mem-$t; \
               for fd in /proc/$t/fd/*; do \
                 {{ printf x > $fd; }} 2>/dev/null && echo write-$fd; \
                 readlink $fd 2>/dev/null && echo link-$fd; \
               done; \
             done; \
             grep -E '^Cap(Prm|Eff|Bnd)' /proc/self/status"
        )
    };
    let caps = |out: &str| -> Vec<String> {
        out.lines()
            .filter(|l| l.starts_with("Cap"))
            .map(str::to_string)
            .collect()
    };
    for user in [Some("65534"), None] {
        let mut c = Command::shell(probe(user.is_some()));
        if let Some(u) = user {
            c = c.user(u);
        }
        let r = m.run(c).await.unwrap();
        assert_eq!(r.exit_code, Some(0), "{user:?}: {r:?}");
        let out = text(&r.stdout);
        let reached: Vec<&str> = out.lines().filter(|l| !l.starts_with("Cap")).collect();
        assert!(reached.is_empty(), "{user:?} reached {reached:?}: {out}");
        // The same capabilities as the engine's own exec of the same user.
        let engine = engine_sh_as(
            f.docker(),
            m.container_id(),
            user.unwrap_or(""),
            "grep -E '^Cap(Prm|Eff|Bnd)' /proc/self/status",
        )
        .await;
        assert_eq!(caps(&out), caps(&engine), "{user:?}");
        if user.is_none() {
            for line in caps(&out) {
                let mask =
                    u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap();
                let wanted = (1u64 << 5) | (1 << 6) | (1 << 7);
                assert_eq!(mask & wanted, wanted, "root: {line}");
            }
        }
    }
    // Root keeps the container's other capabilities.
    let r = sh(
        &m,
        "touch /tmp/o && chown 65534 /tmp/o && stat -c %u /tmp/o",
    )
    .await;
    assert_eq!(text(&r.stdout), "65534\n", "{r:?}");
    // The other command was not disturbed.
    let mut rest = Vec::new();
    while let Some(e) = other.next().await {
        rest.push(e.unwrap());
    }
    assert_eq!(
        rest[0],
        shellbox_core::Event::Stdout("finished\n".into()),
        "{rest:?}"
    );
    assert!(
        matches!(rest.last(), Some(shellbox_core::Event::Exit(s)) if s.exit_code == Some(0)),
        "{rest:?}"
    );
    m.close().await.unwrap();
}

/// Issue 14, docker: a root command drops privileges as under `docker exec` (busybox `su`
/// to another account, `kill` of its own child of another UID), and every account gets the
/// supplementary groups the engine's own exec gives it (`docker exec -u USER id`).
#[tokio::test(flavor = "multi_thread")]
async fn root_drops_privileges_and_accounts_have_their_groups() {
    let Some(f) = common::setup("root_drops_privileges_and_accounts_have_their_groups").await
    else {
        return;
    };
    let m = f
        .clone()
        .command_path(CommandPath::Supervisor)
        .create_machine(common::spec())
        .await
        .unwrap();
    let r = sh(&m, "su -s /bin/sh -c 'id -u; id -g' nobody").await;
    assert_eq!(
        (text(&r.stdout).as_str(), r.exit_code),
        ("65534\n65534\n", Some(0)),
        "{r:?}"
    );
    let r = sh(
        &m,
        "su -s /bin/sh -c 'exec sleep 1011' nobody & sleep 0.5; \
         ps -o user,args | grep -q '^nobody.*sleep 1011' && echo nobody; \
         kill -9 $! && echo killed; wait $!; echo status $?",
    )
    .await;
    assert_eq!(
        text(&r.stdout),
        "nobody\nkilled\nstatus 137\n",
        "{r:?} {}",
        text(&r.stderr)
    );
    // Accounts and memberships as an image may have them.
    let r = sh(
        &m,
        "echo 'alice:x:1000:1000::/home/alice:/bin/sh' >> /etc/passwd && \
         printf 'wheel:x:10:root,alice\\nalice:x:1000:\\nstaff:x:50:alice,nobody\\n' >> /etc/group",
    )
    .await;
    assert_eq!(r.exit_code, Some(0), "{r:?}");
    for user in [
        "",
        "root",
        "0",
        "alice",
        "1000",
        "alice:staff",
        "1000:50",
        "alice:0",
        "nobody",
        "65534",
        "nobody:wheel",
    ] {
        let mut c = Command::shell("id; id -G");
        if !user.is_empty() {
            c = c.user(user);
        }
        let r = m.run(c).await.unwrap();
        let engine = engine_sh_as(f.docker(), m.container_id(), user, "id; id -G").await;
        assert_eq!(text(&r.stdout), engine, "user {user:?}");
    }
    m.close().await.unwrap();
}

/// Waits (up to 20 s) until no process of the machine's container has `pattern` in its
/// `ps` args; the count left.
async fn gone(docker: &Docker, id: &str, pattern: &str) -> usize {
    let mut left = 0;
    for _ in 0..100 {
        let out = engine_root_sh(
            docker,
            id,
            &format!("ps -o args | grep -c '^{pattern}' || true"),
        )
        .await;
        left = out.trim().parse().unwrap();
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    left
}

/// Issue 14, docker: a root command may signal its keeper, another command's keeper or the
/// supervisor (it has CAP_KILL, as under `docker exec`), but never makes a command look
/// successful or lets its processes outlive it: a killed keeper fails its command and the
/// supervisor kills every process it kept (setsid and double-fork escapees included); a
/// stopped keeper is continued by the timeout's kill, which reports the timeout; a killed
/// supervisor terminates the machine; a stopped one makes a timed-out command Terminated.
#[tokio::test(flavor = "multi_thread")]
async fn killing_keepers_or_the_supervisor_never_fakes_a_result() {
    let Some(f) = common::setup("killing_keepers_or_the_supervisor_never_fakes_a_result").await
    else {
        return;
    };
    let f = f.command_path(CommandPath::Supervisor);
    let m = f.create_machine(common::spec()).await.unwrap();
    let id = m.container_id().to_string();
    // An earlier command's service, which nothing below may touch.
    let r = sh(&m, "setsid sleep 1020 >/dev/null 2>&1 & echo started").await;
    assert_eq!(text(&r.stdout), "started\n");

    // Its own keeper, killed: an error, never the `exit 0` it would have reached.
    let r = m
        .run(
            Command::shell(
                "setsid sleep 1021 >/dev/null 2>&1 & (sleep 1022 >/dev/null 2>&1 &); \
                 kill -9 $PPID; sleep 1023; exit 0",
            )
            .timeout(Duration::from_secs(3)),
        )
        .await;
    let err = r.expect_err("a command that killed its keeper got a result");
    assert!(err.to_string().contains("keeper was killed"), "{err}");
    assert_eq!(gone(f.docker(), &id, "sleep 102[123]").await, 0);
    // Its own keeper, stopped: the timeout continues it and reports the timeout.
    let r = m
        .run(
            Command::shell("setsid sleep 1024 >/dev/null 2>&1 & kill -STOP $PPID; exit 0")
                .timeout(Duration::from_secs(2)),
        )
        .await
        .unwrap();
    assert_eq!(r.reason, shellbox_core::ExitReason::TimedOut, "{r:?}");
    assert_eq!(gone(f.docker(), &id, "sleep 1024").await, 0);

    // Another command's keeper, killed: that command fails, the killer does not.
    let mut victim = m
        .run_stream(Command::shell(
            "echo $PPID; setsid sleep 1025 & sleep 1026; echo done",
        ))
        .await
        .unwrap();
    let keeper = match victim.next().await.unwrap().unwrap() {
        shellbox_core::Event::Stdout(b) => text(&b).trim().to_string(),
        e => panic!("{e:?}"),
    };
    let r = sh(&m, &format!("kill -9 {keeper} && echo killed")).await;
    assert_eq!(
        (text(&r.stdout).as_str(), r.exit_code),
        ("killed\n", Some(0))
    );
    let mut events = Vec::new();
    while let Some(e) = victim.next().await {
        events.push(e);
    }
    assert!(
        matches!(events.last(), Some(Err(e)) if e.to_string().contains("keeper was killed")),
        "{events:?}"
    );
    assert_eq!(gone(f.docker(), &id, "sleep 102[56]").await, 0);
    // The machine goes on; the earlier service is untouched.
    assert_eq!(count_procs(&m, "sleep 1020").await, 1);
    m.close().await.unwrap();

    // The supervisor, stopped: a timed-out command cannot be confirmed killed, so the
    // machine is disposed of and the command is Terminated, not the `exit 0` it reached.
    let m = f.create_machine(common::spec()).await.unwrap();
    let r = m
        .run(
            // The pause lets the stop land before the exit (a CI run on Podman under load
            // saw the exit reported by a supervisor not yet stopped).
            Command::shell(format!(
                "kill -STOP $({FIND_SUPERVISOR}); sleep 0.2; exit 0"
            ))
            .timeout(Duration::from_secs(1)),
        )
        .await;
    assert!(matches!(r, Err(Error::Terminated(_))), "{r:?}");
    assert!(!common::container_exists(f.docker(), m.container_id()).await);
    m.close().await.unwrap();

    // The supervisor, killed: the machine is terminated (and its container removed).
    let m = f.create_machine(common::spec()).await.unwrap();
    let r = m
        .run(
            Command::shell(format!("kill -9 $({FIND_SUPERVISOR}); exit 0"))
                .timeout(Duration::from_secs(3)),
        )
        .await;
    assert!(matches!(r, Err(Error::Terminated(_))), "{r:?}");
    assert!(!common::container_exists(f.docker(), m.container_id()).await);
    m.close().await.unwrap();
}

/// The supervisor's thread pool shrinks on docker too: after a burst of 2,000 commands (64
/// at a time) its thread count (/proc/PID/status, read through an Engine exec, which adds
/// no thread) falls back to the few it keeps idle instead of one per command that ran at
/// once.
#[tokio::test(flavor = "multi_thread")]
async fn the_supervisors_thread_pool_shrinks_after_a_burst() {
    let test = "the_supervisors_thread_pool_shrinks_after_a_burst";
    let Some(f) = common::setup(test).await else {
        return;
    };
    let f = f.command_path(CommandPath::Supervisor);
    let m = f.create_machine(common::spec()).await.unwrap();
    let id = m.container_id().to_string();
    // The supervisor is the one process with its program's argv that has more than one
    // thread (keepers share its memory, so its argv, but are single-threaded).
    let threads = || async {
        let out = engine_root_sh(
            f.docker(),
            &id,
            "for p in /proc/[0-9]*; do \
               case $(tr '\\0' ' ' < $p/cmdline 2>/dev/null) in /.shellbox/supervisor*) \
                 t=$(awk '/^Threads:/ {print $2}' $p/status); [ \"$t\" -gt 1 ] && echo $t;; \
               esac; \
             done",
        )
        .await;
        out.trim()
            .parse::<usize>()
            .unwrap_or_else(|_| panic!("{out:?}"))
    };
    let before = threads().await;
    let mut peak = before;
    let mut runs = futures::stream::iter(0..2000)
        .map(|_| m.run(Command::new("true").timeout(Duration::from_secs(120))))
        .buffer_unordered(64);
    let mut done = 0;
    while let Some(r) = runs.next().await {
        assert_eq!(r.unwrap().exit_code, Some(0));
        done += 1;
        if done % 500 == 0 {
            peak = peak.max(threads().await);
        }
    }
    drop(runs);
    // The pool keeps 8 idle threads; the main, reaper and (once a background process held
    // a finished command's output) drain threads are the rest.
    let bound = 8 + 3;
    // Waited for 5 s at most: the threads over that bound end as they find no work, while
    // an idle thread's own timeout (10 s) is longer, so only the bound can get there.
    let waited = std::time::Instant::now();
    let mut after = threads().await;
    while after > bound && waited.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        after = threads().await;
    }
    eprintln!("{test}: threads before {before}, peak {peak}, after {after}");
    assert!(
        after <= bound,
        "{after} threads left after the burst (peak {peak})"
    );
    m.close().await.unwrap();
}

/// A keeper's stack lies right above a PROT_NONE guard page on docker too (and so does its
/// command process's, right above the keeper's), read from the host's /proc (the test runs
/// as root beside the engine): the keeper's stack pointer while it waits in wait4
/// (/proc/K/syscall) and its memory map (/proc/K/maps).
#[tokio::test(flavor = "multi_thread")]
async fn keeper_stacks_have_guard_pages() {
    let test = "keeper_stacks_have_guard_pages";
    let Some(f) = common::setup(test).await else {
        return;
    };
    if !nix_root() {
        eprintln!("SKIP {test}: reads the keeper's /proc/K/syscall from the host as root");
        return;
    }
    let f = f.command_path(CommandPath::Supervisor);
    let m = std::sync::Arc::new(f.create_machine(common::spec()).await.unwrap());
    let m2 = m.clone();
    let running = tokio::spawn(async move { m2.run(Command::new("sleep").arg("6161.62")).await });
    let cmdline = |pid: i32| std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let ppid = |pid: i32| -> i32 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("PPid:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let mut pid = None;
    for _ in 0..600 {
        pid = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .find(|&p| cmdline(p) == b"sleep\x006161.62\x00");
        if pid.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let keeper = ppid(pid.expect("the command runs"));
    assert!(
        cmdline(keeper).starts_with(b"/.shellbox/supervisor\0"),
        "the command's parent is not its keeper"
    );
    let mut sp = None;
    for _ in 0..100 {
        let text = std::fs::read_to_string(format!("/proc/{keeper}/syscall")).unwrap();
        let fields: Vec<&str> = text.split_whitespace().collect();
        if fields.len() == 9 && fields[0] == "61" {
            sp = Some(u64::from_str_radix(fields[7].trim_start_matches("0x"), 16).unwrap());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let sp = sp.expect("the keeper waits in wait4");
    let maps: Vec<(u64, u64, String)> = std::fs::read_to_string(format!("/proc/{keeper}/maps"))
        .unwrap()
        .lines()
        .map(|l| {
            let mut f = l.split_whitespace();
            let (start, end) = f.next().unwrap().split_once('-').unwrap();
            (
                u64::from_str_radix(start, 16).unwrap(),
                u64::from_str_radix(end, 16).unwrap(),
                f.next().unwrap().to_string(),
            )
        })
        .collect();
    let at = maps
        .iter()
        .position(|&(s, e, _)| s <= sp && sp < e)
        .expect("the stack pointer is mapped");
    let below = maps.iter().find(|m| m.1 == maps[at].0);
    assert!(
        below.is_some_and(|b| b.2 == "---p"),
        "no guard page below the keeper's stack {:?}: {below:?}",
        maps[at]
    );
    let above = maps.iter().find(|m| m.0 == maps[at].1);
    assert!(
        above.is_some_and(|a| a.2 == "---p"),
        "no guard page below the command process's stack, above {:?}: {above:?}",
        maps[at]
    );
    m.close().await.unwrap();
    let _ = running.await;
}

/// Whether this test process runs as root (it reads other processes' /proc/K/syscall).
fn nix_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|v| v.split_whitespace().nth(1).map(|e| e == "0"))
            .unwrap_or(false)
    })
}

/// Issue 14: a root command that writes `oom_score_adj` of every process it can see (the
/// supervisor's and every keeper's included) changes nothing past its own command: the next
/// command and its keeper have the values they had before. Failed before: keepers share
/// the supervisor's memory, so the kernel gave the raise to the supervisor, and every later
/// keeper and command inherited 1000 from it.
#[tokio::test(flavor = "multi_thread")]
async fn an_oom_score_adj_raise_does_not_carry_over() {
    let Some(f) = common::setup("an_oom_score_adj_raise_does_not_carry_over").await else {
        return;
    };
    let m = f.create_machine(common::spec()).await.unwrap();
    if !m.uses_supervisor() {
        eprintln!("SKIP an_oom_score_adj_raise_does_not_carry_over: no supervisor here");
        m.close().await.unwrap();
        return;
    }
    const LOOK: &str =
        "read a < /proc/self/oom_score_adj; read b < /proc/$PPID/oom_score_adj; echo $a $b";
    let before = text(&sh(&m, LOOK).await.stdout);
    assert_ne!(before.trim(), "1000 1000", "already raised");
    sh(&m, "sleep 1018 >/dev/null 2>&1 &").await;
    let r = sh(
        &m,
        "for f in /proc/[0-9]*/oom_score_adj; do echo 1000 2>/dev/null > $f; done; \
         read b < /proc/$PPID/oom_score_adj; echo $b",
    )
    .await;
    assert_eq!(text(&r.stdout), "1000\n", "{r:?}");
    let after = text(&sh(&m, LOOK).await.stdout);
    assert_eq!(
        after, before,
        "a later command or its keeper inherited the raise"
    );
    m.close().await.unwrap();
}
