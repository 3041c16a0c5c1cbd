//! Snapshots on the docker backend (issue 15), beyond the conformance cases: what a commit
//! keeps (owners, modes, mtimes, links) and labels, that a machine started from a snapshot
//! is made as `create` makes one (the source machine's spec env and network do not leak),
//! volumes, when the image goes, and gc of snapshot images.
//!
//! Images these tests leave: none besides the cached test image (every snapshot image and
//! `shellbox-build:*` tag they make is removed, and checked gone, before they return).

mod common;

use std::collections::HashMap;

use shellbox_core::{
    Command, DockerfileSource, Error, ImageSource, Machine, MachineFactory, MachineSpec,
    NetworkPolicy, Snapshot,
};
use shellbox_docker::bollard::models::{ContainerConfig, ContainerCreateBody};
use shellbox_docker::bollard::query_parameters::{
    CommitContainerOptions, CreateContainerOptions, RemoveContainerOptions, RemoveImageOptions,
};
use shellbox_docker::bollard::Docker;
use shellbox_docker::{
    dockerfile_image_tag, gc_with_labels, labels, CommandPath, DockerMachineFactory,
    BUSYBOX_TEST_IMAGE, SNAPSHOT_REPOSITORY,
};

async fn sh(m: &dyn Machine, script: &str) -> shellbox_core::CommandResult {
    m.run(Command::shell(script)).await.unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs `script`, which must succeed, and returns its stdout.
async fn ok(m: &dyn Machine, script: &str) -> String {
    let r = sh(m, script).await;
    assert_eq!(r.exit_code, Some(0), "{script}: {r:?}");
    text(&r.stdout)
}

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

/// On Podman the backend declares no snapshots and refuses them (its commit keeps the
/// source's environment and drops labels): true after checking that refusal.
async fn refused_on_podman(f: &shellbox_docker::DockerMachineFactory) -> bool {
    if !f.is_podman().await.expect("ask the engine") {
        return false;
    }
    assert!(!f.capabilities().snapshots);
    let m = f.create(common::spec()).await.expect("create");
    let e = m.snapshot().await.unwrap_err();
    assert!(e.is_unsupported(), "{e:?}");
    m.close().await.unwrap();
    true
}

async fn image_exists(docker: &Docker, id: &str) -> bool {
    docker.inspect_image(id).await.is_ok()
}

/// Files of every kind with owners, modes (set-id bits, sticky), mtimes and links, under
/// `dir`; [`LISTING`] prints them.
const TREE: &str = r#"set -e
d=$1
mkdir -p "$d/sub/deep" "$d/empty" "$d/sticky"
printf 'one\n' > "$d/a"
printf 'with space\n' > "$d/sub/with space"
head -c 70000 /dev/urandom > "$d/sub/deep/blob"
chmod 4755 "$d/a"
chmod 1777 "$d/sticky"
chmod 700 "$d/sub/deep"
chown 65534:65534 "$d/sub/with space"
chown 0:65534 "$d/sub"
ln -s sub/deep/blob "$d/link"
ln -s /nowhere "$d/dangling"
ln "$d/a" "$d/hard"
touch -d '2001-02-03 04:05:06' "$d/a" "$d/sub/with space"
touch -h -d '2002-03-04 05:06:07' "$d/link"
touch -d '2003-04-05 06:07:08' "$d/sub/deep" "$d/empty"
"#;

/// One line per node under `$1`: path, type, owner, mode, mtime, a symlink's target, a
/// file's hard link count and content checksum.
const LISTING: &str = r#"cd "$1" && find . | sort | while IFS= read -r p; do
  t=$(stat -c %F "$p")
  case "$t" in
    directory) printf '%s %s %s %s %s\n' "$p" "$t" "$(stat -c %u:%g "$p")" "$(stat -c %a "$p")" "$(stat -c %Y "$p")";;
    'symbolic link') printf '%s link %s %s %s\n' "$p" "$(stat -c %u:%g "$p")" "$(readlink "$p")" "$(stat -c %Y "$p")";;
    *) printf '%s %s %s %s %s links=%s %s\n' "$p" "$t" "$(stat -c %u:%g "$p")" "$(stat -c %a "$p")" "$(stat -c %Y "$p")" "$(stat -c %h "$p")" "$(md5sum < "$p")";;
  esac
done"#;

async fn listing(m: &dyn Machine, dir: &str) -> String {
    let r = m
        .run(Command::from_argv(["/bin/sh", "-c", LISTING, "sh", dir]))
        .await
        .unwrap();
    assert_eq!(r.exit_code, Some(0), "{r:?}");
    text(&r.stdout)
}

async fn make_tree(m: &dyn Machine, dir: &str) {
    let r = m
        .run(Command::from_argv(["/bin/sh", "-c", TREE, "sh", dir]))
        .await
        .unwrap();
    assert_eq!(r.exit_code, Some(0), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_keeps_owners_modes_mtimes_and_links_and_is_labelled() {
    let test = "a_snapshot_keeps_owners_modes_mtimes_and_links_and_is_labelled";
    let Some(f) = common::setup(test).await else {
        return;
    };
    if refused_on_podman(&f).await {
        return;
    }
    let docker = f.docker().clone();
    let m = f.create_machine(common::spec()).await.unwrap();
    make_tree(&m, "/tree").await;
    let before = listing(&m, "/tree").await;
    assert!(
        before.contains("./a regular file 0:0 4755 981173106 links=2"),
        "{before}"
    );
    let snapshot = m.snapshot().await.unwrap();
    assert_eq!(snapshot.backend(), "docker");

    // The image: its ID is the snapshot's, tagged and labelled for gc.
    let image = docker.inspect_image(snapshot.id()).await.unwrap();
    assert_eq!(image.id.as_deref(), Some(snapshot.id()));
    let tags = image.repo_tags.clone().unwrap_or_default();
    assert_eq!(tags.len(), 1, "{tags:?}");
    let tag = tags[0]
        .strip_prefix(&format!("{SNAPSHOT_REPOSITORY}:"))
        .unwrap_or_else(|| panic!("{tags:?}"));
    assert_eq!(tag.len(), 32);
    let image_labels = image.config.and_then(|c| c.labels).unwrap_or_default();
    assert_eq!(
        image_labels.get(labels::SNAPSHOT).map(String::as_str),
        Some(tag)
    );
    assert_eq!(
        image_labels.get(labels::OWNER_PID),
        Some(&std::process::id().to_string())
    );
    assert!(image_labels.contains_key(labels::OWNER_HOST));
    assert!(image_labels.contains_key(labels::OWNER_START));

    ok(&m, "rm -r /tree/sub && echo later > /tree/a").await;
    let fork = f
        .create_machine_from(&snapshot, common::spec())
        .await
        .unwrap();
    assert_eq!(listing(&fork, "/tree").await, before);
    // The fork runs as a machine does: its own supervisor, a fresh workdir.
    assert_eq!(fork.uses_supervisor(), m.uses_supervisor());
    assert_eq!(
        ok(&fork, "pwd").await,
        format!("{}\n", common::spec().workdir)
    );

    snapshot.delete().await.unwrap();
    // The fork still uses the image: it stays until the fork goes.
    assert!(image_exists(&docker, snapshot.id()).await);
    fork.close().await.unwrap();
    assert!(!image_exists(&docker, snapshot.id()).await);
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_is_made_as_create_makes_a_machine() {
    let Some(f) = common::setup("a_fork_is_made_as_create_makes_a_machine").await else {
        return;
    };
    if refused_on_podman(&f).await {
        return;
    }
    let docker = f.docker().clone();
    let source_spec = common::spec()
        .env("FROM_SOURCE", "leaked")
        .env("HOME", "/source-home")
        .env("PATH", "/bin:/usr/bin")
        .network(NetworkPolicy::Allow)
        .pids_limit(333)
        .workdir("/source-work");
    let m = f.create_machine(source_spec).await.unwrap();
    ok(&m, "echo kept > /kept; (sleep 600 &) ; true").await;
    let session = m.open_shell().await.unwrap();
    session
        .execute(
            "cd /tmp && export IN_SESSION=1",
            std::time::Duration::from_secs(30),
            1 << 20,
        )
        .await
        .unwrap();
    let snapshot = m.snapshot().await.unwrap();

    let spec = common::spec()
        .env("FORK", "2")
        .memory_mb(256)
        .workdir("/fork-work");
    let fork = f
        .create_machine_from(&snapshot, spec.clone())
        .await
        .unwrap();
    let plain = f.create_machine(spec.clone()).await.unwrap();
    // The same environment as a machine made by create from the spec (but the host name).
    let env = "env | grep -v '^HOSTNAME=' | sort";
    assert_eq!(ok(&fork, env).await, ok(&plain, env).await);
    let fork_env = ok(&fork, env).await;
    assert!(fork_env.contains("FORK=2\n"), "{fork_env}");
    assert!(!fork_env.contains("FROM_SOURCE"), "{fork_env}");
    assert!(!fork_env.contains("source-home"), "{fork_env}");
    assert_eq!(
        ok(&fork, "cat /kept; pwd; id -u").await,
        "kept\n/fork-work\n0\n"
    );
    // Processes and the shell session's state are not part of a snapshot.
    assert_eq!(ok(&fork, "ps | grep -c '[s]leep 600' || true").await, "0\n");
    let s = fork.open_shell().await.unwrap();
    let u = s
        .execute(
            "pwd; echo \"${IN_SESSION:-unset}\"",
            std::time::Duration::from_secs(30),
            1 << 20,
        )
        .await
        .unwrap();
    assert_eq!(text(&u.output), "/fork-work\nunset\n");

    // The container: the fork's own network, limits and keep-alive, as create sets them.
    let info = docker
        .inspect_container(fork.container_id(), None)
        .await
        .unwrap();
    let plain_info = docker
        .inspect_container(plain.container_id(), None)
        .await
        .unwrap();
    let host = info.host_config.clone().unwrap();
    assert_eq!(host.network_mode.as_deref(), Some("none"));
    assert_eq!(
        host.pids_limit,
        Some(i64::from(shellbox_core::DEFAULT_PIDS_LIMIT))
    );
    assert_eq!(host.memory, Some(256 * 1024 * 1024));
    let config = info.config.clone().unwrap();
    let plain_config = plain_info.config.clone().unwrap();
    assert_eq!(config.entrypoint, plain_config.entrypoint);
    assert_eq!(config.cmd, plain_config.cmd);
    assert_eq!(config.user, plain_config.user);
    assert_eq!(config.working_dir, plain_config.working_dir);
    assert_eq!(info.image.as_deref(), Some(snapshot.id()));
    let fork_labels = config.labels.unwrap_or_default();
    assert_eq!(
        fork_labels.get(labels::OWNER_PID),
        Some(&std::process::id().to_string())
    );
    assert_eq!(
        fork_labels.get(labels::MACHINE).map(String::as_str),
        Some("1")
    );
    assert_eq!(ok(&fork, "ls /sys/class/net").await, "lo\n");

    // A fork of the fork: still only its own spec's env, and the files.
    let again = f
        .fork(
            &fork,
            common::spec()
                .env("THIRD", "3")
                .memory_mb(256)
                .workdir("/fork-work"),
        )
        .await
        .unwrap();
    let third = ok(&*again, env).await;
    assert!(third.contains("THIRD=3\n"), "{third}");
    assert!(
        !third.contains("FORK=") && !third.contains("FROM_SOURCE"),
        "{third}"
    );
    assert_eq!(ok(&*again, "cat /kept").await, "kept\n");
    let without = |listing: &str, line: &str| {
        listing
            .lines()
            .filter(|l| *l != line)
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        without(&third, "THIRD=3"),
        without(&ok(&plain, env).await, "FORK=2"),
    );

    again.close().await.unwrap();
    fork.close().await.unwrap();
    plain.close().await.unwrap();
    m.close().await.unwrap();
    // The first snapshot's handle still holds its image; dropping it removes it.
    let id = snapshot.id().to_string();
    assert!(image_exists(&docker, &id).await);
    drop(snapshot);
    assert!(!image_exists(&docker, &id).await);
}

/// A Dockerfile image whose `/data` is a `VOLUME` holding a file of its own, as a test
/// image with a volume workdir (`shellbox-build:<fingerprint>`, removed by the caller).
fn volume_image(dir: &std::path::Path) -> (MachineSpec, String) {
    std::fs::write(
        dir.join("Dockerfile"),
        format!(
            "FROM {BUSYBOX_TEST_IMAGE}\nRUN mkdir -p /data && echo image > /data/from-image\n\
             VOLUME /data\n"
        ),
    )
    .unwrap();
    let source = DockerfileSource {
        context: dir.to_path_buf(),
        dockerfile: dir.join("Dockerfile"),
    };
    let tag = dockerfile_image_tag(&source).unwrap();
    let spec = MachineSpec::new(ImageSource::Dockerfile(source)).workdir("/data/work");
    (spec, tag)
}

/// This process's directories of snapshot volume copies (staging directories holding
/// `0.tar`) in the host's temporary directory.
fn volume_copies() -> usize {
    let prefix = format!("{}{}-", shellbox_core::STAGING_PREFIX, std::process::id());
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .filter(|e| e.path().join("0.tar").exists())
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volume_contents_are_part_of_the_snapshot() {
    let Some(f) = common::setup("volume_contents_are_part_of_the_snapshot").await else {
        return;
    };
    if refused_on_podman(&f).await {
        return;
    }
    let docker = f.docker().clone();
    let ctx = tempfile::tempdir().unwrap();
    let (spec, tag) = volume_image(ctx.path());
    for path in [CommandPath::Auto, CommandPath::Exec] {
        let f = f.clone().command_path(path);
        let m = f.create_machine(spec.clone()).await.unwrap();
        let info = docker
            .inspect_container(m.container_id(), None)
            .await
            .unwrap();
        let mounts: Vec<_> = info
            .mounts
            .unwrap_or_default()
            .into_iter()
            .filter_map(|m| m.destination)
            .collect();
        assert_eq!(mounts, ["/data"], "the image's volume");
        ok(&m, "rm /data/from-image && echo in-work > in-work").await;
        make_tree(&m, "/data/tree").await;
        let before = listing(&m, "/data").await;
        // Two at once (one pause and commit at a time) are both whole.
        let (snapshot, twin) = futures::join!(m.snapshot(), m.snapshot());
        let (snapshot, twin) = (snapshot.unwrap(), twin.unwrap());
        assert_ne!(snapshot.id(), twin.id());
        // Each holds its copy of the volume, in a staging directory `shellbox gc` knows.
        assert_eq!(volume_copies(), 2);
        let info = docker
            .inspect_container(m.container_id(), None)
            .await
            .unwrap();
        assert_eq!(
            info.state.and_then(|s| s.paused),
            Some(false),
            "left paused"
        );
        let t = f.create_machine_from(&twin, spec.clone()).await.unwrap();
        assert_eq!(listing(&t, "/data").await, before, "{path:?}");
        t.close().await.unwrap();
        twin.delete().await.unwrap();
        assert_eq!(volume_copies(), 1);
        // Later writes of the source, in the volume and outside it, are not the fork's.
        ok(
            &m,
            "rm -r /data/tree/sub && echo later > /data/later && echo x > /outside",
        )
        .await;

        let fork = f
            .create_machine_from(&snapshot, spec.clone())
            .await
            .unwrap();
        assert_eq!(listing(&fork, "/data").await, before, "{path:?}");
        assert!(!before.contains("from-image"), "{before}");
        assert_eq!(
            ok(
                &fork,
                "pwd; cat in-work; test -e /outside || echo no-outside"
            )
            .await,
            "/data/work\nin-work\nno-outside\n"
        );
        // The fork's volume is its own: writes stay in it.
        ok(&fork, "echo fork > /data/fork-only").await;
        assert_eq!(
            ok(&m, "ls /data").await,
            "later\ntree\nwork\n",
            "{path:?}: the source"
        );
        // A fork of the fork keeps the volume's files, its writes included.
        let again = f.fork(&fork, spec.clone()).await.unwrap();
        assert_eq!(
            ok(&*again, "cat /data/fork-only; ls /data").await,
            "fork\nfork-only\ntree\nwork\n"
        );
        again.close().await.unwrap();
        drop(snapshot);
        assert_eq!(volume_copies(), 0, "the copies go with the snapshot");
        fork.close().await.unwrap();
        m.close().await.unwrap();
    }
    let _ = docker
        .remove_image(&tag, None::<RemoveImageOptions>, None)
        .await;
    assert!(!image_exists(&docker, &tag).await);
}

/// The snapshot images this test's factory made that still exist.
async fn images_of(docker: &Docker, run: &str) -> Vec<String> {
    let filters = HashMap::from([(
        "label".to_string(),
        vec![labels::SNAPSHOT.to_string(), format!("{RUN_LABEL}={run}")],
    )]);
    docker
        .list_images(Some(
            shellbox_docker::bollard::query_parameters::ListImagesOptions {
                filters: Some(filters),
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.id)
        .collect()
}

const RUN_LABEL: &str = "shellbox-test.snapshot-run";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_goes_with_its_last_holder() {
    let Some(f) = common::setup("the_image_goes_with_its_last_holder").await else {
        return;
    };
    if refused_on_podman(&f).await {
        return;
    }
    let run = marker();
    let f = f.label(RUN_LABEL, &run);
    let docker = f.docker().clone();
    let m = f.create_machine(common::spec()).await.unwrap();
    ok(&m, "echo base > /base").await;

    // Dropped with no machine started from it: removed at once.
    let s = m.snapshot().await.unwrap();
    assert_eq!(images_of(&docker, &run).await, [s.id().to_string()]);
    drop(s);
    assert!(images_of(&docker, &run).await.is_empty());

    // fork(): the snapshot is dropped inside, the fork holds the image until it closes.
    let fork = f.fork(&m, common::spec()).await.unwrap();
    assert_eq!(images_of(&docker, &run).await.len(), 1);
    assert_eq!(ok(&*fork, "cat /base").await, "base\n");
    fork.close().await.unwrap();
    assert!(images_of(&docker, &run).await.is_empty());

    // Deleted, then its forks dropped unclosed: their containers and the image go.
    let s = m.snapshot().await.unwrap();
    let a = f.create_machine_from(&s, common::spec()).await.unwrap();
    let b = f.create_machine_from(&s, common::spec()).await.unwrap();
    s.delete().await.unwrap();
    assert!(matches!(
        f.create_machine_from(&s, common::spec()).await,
        Err(Error::Closed)
    ));
    let (a_id, b_id) = (a.container_id().to_string(), b.container_id().to_string());
    drop(a);
    assert!(!common::container_exists(&docker, &a_id).await);
    assert_eq!(
        images_of(&docker, &run).await,
        [s.id().to_string()],
        "b still uses it"
    );
    assert_eq!(ok(&b, "cat /base").await, "base\n");
    drop(b);
    assert!(!common::container_exists(&docker, &b_id).await);
    assert!(images_of(&docker, &run).await.is_empty());

    // A factory connected to another engine address refuses it.
    let s = m.snapshot().await.unwrap();
    // Any factory of the same engine can use it, under another address too.
    let other = match std::env::var("DOCKER_HOST") {
        Ok(host) if !host.is_empty() => DockerMachineFactory::connect_to(&host).await,
        _ => DockerMachineFactory::connect_to("unix:///var/run/../run/docker.sock").await,
    }
    .unwrap()
    .label(RUN_LABEL, &run);
    let there = other.create_from(&s, common::spec()).await.unwrap();
    assert_eq!(ok(&*there, "cat /base").await, "base\n");
    there.close().await.unwrap();
    // The snapshot outlives its machine.
    m.close().await.unwrap();
    let after = f.create_machine_from(&s, common::spec()).await.unwrap();
    assert_eq!(ok(&after, "cat /base").await, "base\n");
    after.close().await.unwrap();
    assert_eq!(images_of(&docker, &run).await.len(), 1);
    // An image removed behind the snapshot's back (as on another engine): unsupported.
    remove_image_now(&docker, s.id()).await;
    match f.create_machine_from(&s, common::spec()).await {
        Err(e) => assert!(e.is_unsupported(), "{e:?}"),
        Ok(machine) => {
            machine.close().await.unwrap();
            panic!("a machine started from a snapshot without its image");
        }
    }
    s.delete().await.unwrap();
    assert!(images_of(&docker, &run).await.is_empty());
    // Closed machines take no snapshots.
    assert!(matches!(m.snapshot().await, Err(Error::Closed)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_removes_snapshot_images_of_dead_owners_only() {
    let Some(f) = common::setup("gc_removes_snapshot_images_of_dead_owners_only").await else {
        return;
    };
    if refused_on_podman(&f).await {
        return;
    }
    let run = marker();
    let filter = format!("{RUN_LABEL}={run}");
    let f = f.label(RUN_LABEL, &run);
    let docker = f.docker().clone();
    let m = f.create_machine(common::spec()).await.unwrap();
    let live: Snapshot = m.snapshot().await.unwrap();

    // A snapshot image whose owner (a finished child of this test) is gone, as a killed
    // process leaves one: committed from a plain container with that owner's labels.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = child.id();
    child.wait().unwrap();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string();
    let name = format!("shellbox-snapshot-gc-test-{}", std::process::id());
    docker
        .create_container(
            Some(CreateContainerOptions {
                name: Some(name.clone()),
                ..Default::default()
            }),
            ContainerCreateBody {
                image: Some(BUSYBOX_TEST_IMAGE.to_string()),
                cmd: Some(vec!["true".to_string()]),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let commit = |owner_host: String, tag: &'static str| {
        let docker = docker.clone();
        let name = name.clone();
        let run = run.clone();
        let dead_pid = dead_pid.to_string();
        async move {
            let image_labels = HashMap::from([
                (labels::SNAPSHOT.to_string(), tag.to_string()),
                (labels::OWNER_PID.to_string(), dead_pid),
                (labels::OWNER_HOST.to_string(), owner_host),
                (RUN_LABEL.to_string(), run),
            ]);
            docker
                .commit_container(
                    CommitContainerOptions {
                        container: Some(name),
                        repo: Some(SNAPSHOT_REPOSITORY.to_string()),
                        tag: Some(format!("gc-test-{tag}-{}", std::process::id())),
                        ..Default::default()
                    },
                    ContainerConfig {
                        labels: Some(image_labels),
                        ..Default::default()
                    },
                )
                .await
                .unwrap()
                .id
        }
    };
    let dead = commit(host.clone(), "dead").await;
    let elsewhere = commit(format!("{host}-elsewhere"), "elsewhere").await;
    docker
        .remove_container(&name, None::<RemoveContainerOptions>)
        .await
        .unwrap();

    let report = gc_with_labels(&docker, &[&filter]).await.unwrap();
    assert_eq!(
        report.removed,
        [format!(
            "{SNAPSHOT_REPOSITORY}:gc-test-dead-{}",
            std::process::id()
        )],
        "{report:?}"
    );
    // The live machine and its snapshot are kept; the other host's image is not touched.
    assert_eq!((report.kept, report.other_hosts), (2, 1), "{report:?}");
    assert!(report.failed.is_empty(), "{report:?}");
    assert!(!image_exists(&docker, &dead).await);
    assert!(image_exists(&docker, &elsewhere).await);
    assert!(image_exists(&docker, live.id()).await);

    remove_image_now(&docker, &elsewhere).await;
    live.delete().await.unwrap();
    m.close().await.unwrap();
    assert!(images_of(&docker, &run).await.is_empty());
}

async fn remove_image_now(docker: &Docker, id: &str) {
    docker
        .remove_image(id, None::<RemoveImageOptions>, None)
        .await
        .unwrap();
}
