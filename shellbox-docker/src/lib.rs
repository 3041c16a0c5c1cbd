//! shellbox machines as Docker containers, driven through the Docker Engine API.
//!
//! One container per machine, created by [`DockerMachineFactory`] and talked to with
//! [`bollard`] only (no `docker` command line). Commands are execs; files move through the
//! container archive endpoints; closing removes the container.
//!
//! ```no_run
//! # async fn demo() -> Result<(), shellbox_core::Error> {
//! use shellbox_core::{Command, MachineFactory, MachineSpec};
//! use shellbox_docker::DockerMachineFactory;
//!
//! let factory = DockerMachineFactory::connect().await?;
//! let machine = factory.create(MachineSpec::docker("debian:bookworm-slim")).await?;
//! let result = machine.run(Command::shell("echo hi")).await?;
//! assert_eq!(result.stdout, "hi\n");
//! machine.close().await?;
//! # Ok(()) }
//! ```
//!
//! # What the backend does
//!
//! - **Images** ([`shellbox_core::ImageSource`]): `Docker` (must exist locally, never
//!   pulled), `Registry` (pulled through the engine when missing, with the spec's
//!   credentials or else those `docker login` stored in the client config; digests honoured), `Dockerfile` (built through the engine from a tar of the context,
//!   tagged `shellbox-build:<fingerprint>` so an unchanged context is built once), `Archive`
//!   (a `docker save` tarball loaded through the engine). Others are
//!   [`Error::Unsupported`](shellbox_core::Error::Unsupported).
//! - **Container**: named `shellbox-<32 hex>`, labelled with the owner process (pid, its
//!   start time, host) so [`gc`] can find leaked ones; a shell keep-alive as PID 1 (no Docker init: PID 1
//!   ignores every signal from inside the container, so no command can stop it, and it
//!   reaps orphans); at most [`MachineSpec::pids_limit`](shellbox_core::MachineSpec::pids_limit)
//!   processes (`HostConfig.PidsLimit`, default 1024, where Docker's own default is none);
//!   network `none`
//!   under `Deny`, the default bridge under `Allow`; `memory_mb`, `cpus`, `storage_mb`, `gpus`
//!   and an optional OCI runtime mapped to the engine's fields (a refusal by the engine is
//!   [`Error::Unsupported`](shellbox_core::Error::Unsupported) carrying its reason, and so
//!   is a limit the engine accepted but reported discarded in the create response's
//!   `Warnings`, as Docker does for `memory_mb`, `cpus` or `pids_limit` when the host's
//!   cgroups cannot enforce it); the spec's env as container env; the workdir created at
//!   start.
//! - **Commands** (the fast path, [`CommandPath::Auto`]): the embedded
//!   `shellbox-supervisor` is copied into the container at create (`/.shellbox/`, root,
//!   `0511`, the program `0555`, over the archive endpoint) and started once with one attached exec; every
//!   command is a fork and exec inside the container under its own keeper (a subreaper:
//!   its kill scope), with its user (resolved in the image's `/etc/passwd` and
//!   `/etc/group`), cwd, env, stdin, timeout and output limit (applied inside the
//!   container). The process model of `shellbox_core`: what a command leaves in the
//!   background keeps running until the machine closes; a timeout or a dropped run kills
//!   everything the command started (`setsid` and double-fork escapees included) and
//!   nothing else. A command has what a `docker exec` of it has: root keeps the
//!   container's capabilities, every account its supplementary groups. A root command
//!   may signal the supervisor or a keeper (`CAP_KILL`) but never trace or read them;
//!   a killed keeper fails its command with an error and the supervisor kills every
//!   process it kept, and a killed supervisor ends the machine
//!   ([`Error::Terminated`](shellbox_core::Error::Terminated)): never a wrong result.
//! - **Commands on the fallback path** (where the supervisor cannot run — another
//!   architecture, a root the archive endpoint cannot write, no exec — or with
//!   [`CommandPath::Exec`] / `SHELLBOX_DOCKER_COMMAND_PATH=exec`): an exec per command
//!   (argv, cwd, env and user in the request body). The
//!   program runs in its own session and process group (`setsid`); the group's id comes
//!   back as a first stdout line the host strips (the reference's `SHELLBOX_PGID` header).
//!   Every process of a command carries `SHELLBOX_COMMAND_ID=<random hex>` in its
//!   environment (inherited even by what leaves the group with `setsid`), and, where the
//!   kernel allows it (the engine's processes have no login uid, the usual case), the
//!   command takes an audit session of its own (`/proc/self/loginuid`), which every process
//!   it starts inherits and none can leave without `CAP_AUDIT_CONTROL` (not in Docker's
//!   default capabilities). The process model is the fast path's: what a command leaves in
//!   the background keeps running until the machine closes; the command ends when its main
//!   process does (the wrapper writes an end marker behind its output on stdout and stderr,
//!   so a background process holding the output open does not hold the result back). On
//!   timeout or cancellation the group and the audit session (without one, the
//!   marked processes) are killed inside the container and the partial output kept. Limits: where the audit
//!   session cannot be taken (a login uid already set, as under a rootless engine started
//!   from a login; a kernel without audit; a container given `CAP_AUDIT_CONTROL`), an
//!   escapee that both left the session and dropped the marker (`env -u
//!   SHELLBOX_COMMAND_ID setsid ...`) survives a timeout; and a background process that
//!   writes to the stdout or stderr it inherited after its command ended gets `EPIPE`
//!   (`SIGPIPE`) once the engine closes the exec's streams (Podman at once, Docker 2 s
//!   later), as under `docker exec`.
//!   Results are otherwise the same as on the fast path.
//! - **A stopped container** (a command killed its keep-alive, e.g. `kill -9 -1`): the next
//!   run, upload or download is
//!   [`Error::Terminated`](shellbox_core::Error::Terminated) and the machine is closed.
//! - **Start**: `startup_timeout` in the spec bounds the whole create (image preparation
//!   included) and gives [`Error::TimedOut`](shellbox_core::Error::TimedOut); a failed or
//!   cancelled create removes its container.
//! - **Transfers**: tar streams through `PUT`/`GET /containers/{id}/archive`, never whole
//!   in memory; downloads are unpacked with [`shellbox_core::archive::unpack_safe`] into a
//!   staging directory beside the target and moved into place only when complete (all or
//!   nothing). Guest
//!   paths under `/proc`, `/sys` and `/dev` (kernel-provided inside the container, out of
//!   the endpoints' reach) are [`Error::Unsupported`](shellbox_core::Error::Unsupported).
//!
//! - **Shell sessions** ([`Machine::open_shell`](shellbox_core::Machine::open_shell),
//!   interactive): on the fast path, the supervisor's terminal relay
//!   ([`PtySession`](shellbox_supervisor::session::PtySession), the same session as the
//!   local backend's) runs `bash --noprofile --norc --noediting -i`, or `sh -i` where the
//!   image has no bash, on a pseudo-terminal of the container as the image's user; a
//!   completion is confirmed by the relay from the shell's state, so a command cannot fake
//!   one, and `interrupt` signals the command once it runs. On the exec path the same relay
//!   and session, the supervisor program copied in at the first `open_shell` and its relay
//!   run by one attached Engine exec. Only where it cannot be copied (a read-only root) or
//!   run (another architecture), one Engine exec on a terminal ([`DockerSession`]):
//!   completion is a per-session nonce and per-command number printed by `PROMPT_COMMAND`
//!   (bash) or `PS1` (ash), which a command that reads those variables can print itself;
//!   `interrupt` writes the terminal's `^C`.
//!
//! - **Snapshots** ([`Machine::snapshot`](shellbox_core::Machine::snapshot),
//!   [`MachineFactory::create_from`](shellbox_core::MachineFactory::create_from)): the
//!   container committed (`POST /commit`, paused while the engine commits) into an image
//!   `shellbox-snapshot:<32 hex>` labelled [`labels::SNAPSHOT`] and with the owner labels;
//!   the contents of the container's volumes (an image's `VOLUME`s, which a commit leaves
//!   out) copied out to the host while it stays paused and back into each machine started
//!   from it. Such a machine is made as `create` makes one (the spec's env, network,
//!   user, limits; the same supervisor and confinement), only its filesystem comes from the
//!   snapshot. The image is removed when the snapshot's last handle goes and no machine
//!   started from it is left (Docker refuses to remove an image a container uses), and by
//!   [`gc`] once its owner process is gone. See
//!   [`DockerMachineFactory::create_machine_from`].
//!
//! Requirements on the image: `/bin/sh` (and `cat` for the fast path's environment; without
//! it the container's configured one is used); a `setsid` program on `PATH` for the exec
//! path (busybox has all); `stty` for shell sessions on the exec path where the relay cannot run.
//!
//! # Podman
//!
//! Podman's Docker-compatible API works too (`DOCKER_HOST=unix:///run/podman/podman.sock`
//! or [`DockerMachineFactory::connect_to`]; Podman 4.3.1 is tested with the whole suite). The
//! factory recognises Podman from `GET /version` ([`DockerMachineFactory::is_podman`]) and
//! refuses what Podman would silently ignore: `gpus` and an OCI
//! [`runtime`](DockerMachineFactory::runtime) are [`Error::Unsupported`](shellbox_core::Error::Unsupported)
//! there. Rootful Podman gives containers 1048576 open files unless its `containers.conf`
//! sets `default_ulimits`; where root lacks `CAP_SYS_RESOURCE` every container start then
//! fails in runc ("error setting rlimit type 7"), which `scripts/setup-podman` avoids.

#![warn(missing_docs)]

mod bridge;
mod config;
mod factory;
mod gc;
mod image;
mod machine;
mod relay;
mod session;
mod snapshot;
mod supervised;
mod transfer;

/// What the docker backend offers ([`shellbox_core::MachineFactory::capabilities`]): Linux
/// processes with every task capability of the reference; the `docker`, `registry`,
/// `dockerfile` and `archive` sources; `memory_mb`, `cpus`, `storage_mb` and `gpus` are
/// passed to the engine (which may still refuse one: the error quotes it); private system
/// directories (each container writes its own layer); snapshots (a container committed into
/// an image, see [`DockerMachineFactory::create_machine_from`]).
pub const DOCKER_CAPABILITIES: shellbox_core::Capabilities =
    shellbox_core::Capabilities::linux_process()
        .with_sources(&["docker", "registry", "dockerfile", "archive"])
        .with_limits(true, true, true, true)
        .with_private_system_directories()
        .with_snapshots()
        .with_shell_sessions(shellbox_core::SessionKind::Interactive);

/// The smallest [`MachineSpec::pids_limit`](shellbox_core::MachineSpec::pids_limit) a
/// docker machine takes: the container's pids cgroup also holds the keep-alive shell, the
/// supervisor with its threads and a keeper per running command. Measured on Docker 20.10
/// and Podman 4.3.1 (cgroup v1, runc) with the supervisor's command path: below 8 the create
/// fails (the engine's 409 or 500 for an exec in a container whose keep-alive could not
/// start, a `can't fork`, a thread the supervisor cannot start), 8 runs no command that
/// forks, 9 no session command that forks, 10 runs a pipeline with a background job and a
/// session command most of the time; 12 always (20 of 20 runs, where 10 failed 3 of 15
/// with a session's `can't fork` once the exec path's wrapper took an audit session). Below it `check_environment` and `create` give
/// [`Error::InvalidInput`](shellbox_core::Error::InvalidInput), as the local backend does
/// below its own least (`shellbox_local::MIN_PIDS_LIMIT`, 16).
pub const MIN_PIDS_LIMIT: u32 = 12;

/// The smallest [`MachineSpec::memory_mb`](shellbox_core::MachineSpec::memory_mb) a docker
/// machine takes: the Docker Engine's own least (`Minimum memory limit allowed is 6MB`, 6
/// MiB), which it refuses below at create. Podman sets no such floor, but its runtime
/// refuses a limit below what the container already uses as it starts (1 MiB: "unable to
/// set memory limit to 1048576 (current usage: 2359296 ...)"), which varies; the backend
/// takes Docker's floor on both engines, so a spec gets one verdict wherever it runs. Below
/// it `check_environment` and `create` give
/// [`Error::InvalidInput`](shellbox_core::Error::InvalidInput).
pub const MIN_MEMORY_MB: u64 = 6;

pub use bollard;
pub use factory::DockerMachineFactory;
#[doc(hidden)]
pub use gc::list_containers;
pub use gc::{gc, gc_with_labels, GcReport};
pub use image::{dockerfile_image_tag, ensure_busybox_image, image_source_key, BUSYBOX_TEST_IMAGE};
pub use machine::DockerMachine;
pub use session::{DockerSession, INTERRUPT_BOUND};
pub use snapshot::SNAPSHOT_REPOSITORY;
pub use supervised::{CommandPath, COMMAND_PATH_ENV};

#[doc(hidden)]
pub use machine::floor_exec_true;

/// Label keys this crate puts on its containers and snapshot images.
pub mod labels {
    /// The prefix of every key below; a factory's own labels may not use it.
    pub const NAMESPACE: &str = "dev.shellbox.";
    /// Present (value `"1"`) on every container this crate creates.
    pub const MACHINE: &str = "dev.shellbox.machine";
    /// The creating process's pid.
    pub const OWNER_PID: &str = "dev.shellbox.owner-pid";
    /// The creating process's start time (clock ticks since boot, `/proc/<pid>/stat` field
    /// 22), so a reused pid is not mistaken for the owner.
    pub const OWNER_START: &str = "dev.shellbox.owner-start";
    /// The host name of the machine the creating process runs on.
    pub const OWNER_HOST: &str = "dev.shellbox.owner-host";
    /// On every snapshot image (beside the owner labels): the 32 hex digits of its tag,
    /// `shellbox-snapshot:<32 hex>`. Containers started from a snapshot carry it too (an
    /// image's labels become its containers').
    pub const SNAPSHOT: &str = "dev.shellbox.snapshot";
}

/// Prefix of the names of the containers this crate creates (`shellbox-<32 hex>`).
pub const CONTAINER_NAME_PREFIX: &str = "shellbox-";
