//! shellbox's local backend: commands on this host in bubblewrap (`bwrap`) sandboxes.
//!
//! A [`LocalMachineFactory`] probes bwrap once and creates [`LocalMachine`]s. Each machine
//! is a private root directory in the host temp dir (`/tmp`, `/home/shellbox`, the
//! workdir, and a read-only private `/etc` with only `passwd`, `group`, `hosts`, resolver
//! and certificate files, copied once per factory and shared by its machines), into which the host's system directories (`/usr`, `/lib64`, ... and the
//! merged-`/usr` symlinks) and the spec's read-only host paths are mounted read-only. The
//! machine's sandbox is built once, started by its first command (on a task of its own,
//! which that command waits for): bwrap starts the
//! [`shellbox_supervisor`] program as the sandbox's PID 1, and every command is a fork and
//! an exec of that supervisor (under a per-command keeper that is its kill scope; see
//! DESIGN.md "The supervisor"). The sandbox:
//!
//! - new PID, IPC, UTS (and cgroup, where possible) and mount namespaces; under
//!   [`NetworkPolicy::Deny`](shellbox_core::NetworkPolicy) the machine's own network
//!   namespace with only loopback (one per machine, made when it is created, shared by its
//!   commands and released by close; bwrap makes one per command when this process is not
//!   root);
//! - no inherited host environment: `PATH` (bin dirs first), `HOME=/home/shellbox`,
//!   `LANG=C.UTF-8`, optional `PYTHONHASHSEED`, the spec's env, the command's env — passed
//!   to bwrap through an inherited memfd (`--args FD`), never in any argv;
//! - a seccomp filter refusing what Docker's default profile refuses to a container (the
//!   keyring, `ptrace`, `bpf`, `perf_event_open`, mounts, new namespaces, modules, clocks
//!   and the rest of [`seccomp::refused`]; `EPERM`, `clone3` `ENOSYS`), built once per
//!   factory, handed to bwrap with `--seccomp FD`; as root the launcher also loads the part
//!   bwrap's set-up does not need, so the sandbox's PID 1 is bound too (see [`seccomp`]);
//! - a bounded process count: the machine's own pids cgroup (v2, or the v1 `pids`
//!   hierarchy) with `pids.max` = [`MachineSpec::pids_limit`](shellbox_core::MachineSpec),
//!   entered by the launcher before it execs bwrap and emptied (every process killed) and
//!   removed by close; where none can be made (a non-root host process, no pids
//!   controller) only `RLIMIT_NPROC` below applies, which does nothing for UID 0 (see
//!   the `cgroup` module);
//! - with `storage_mb` (a root host process only), a machine root that is a `tmpfs` of that
//!   size mounted on the root directory at create and detached at close (for a
//!   copy-on-write machine, the same `tmpfs` holds its layers, below): a write past it
//!   fails with `ENOSPC` and never reaches the host disk;
//! - a `/dev` bounded to 64 KiB and 128 inodes (it holds only device nodes, symlinks,
//!   `pts` and `shm`: a write of data there fails with `ENOSPC`), a `/dev/shm` of 64 MiB
//!   or `storage_mb` where that is less, and a `devpts` instance of the machine's own
//!   with at most 256 ptys, so one machine cannot take the host's pty pool from another
//!   (a root host process sets them when the sandbox starts: bwrap's `--dev` has no size
//!   options; see the `devfs` module);
//! - `no_new_privs`, niceness +10, `RLIMIT_CORE` 0 and `RLIMIT_FSIZE` 1 GiB set in the
//!   launcher (a `clone(CLONE_VM | CLONE_VFORK)` child, as `posix_spawn` makes) before it
//!   execs bwrap; per command, set by the supervisor: no capabilities in any set,
//!   `RLIMIT_CORE` 0, `RLIMIT_FSIZE` 1 GiB, `RLIMIT_NPROC` host tasks + 256, `RLIMIT_CPU`
//!   from the timeout, default signal dispositions, the command's account, its working
//!   directory and an `execvp`-like `PATH` search (127 for a missing program, 126 for a
//!   non-executable one);
//! - with [`SystemDirectories::CopyOnWrite`] (a root host process, overlayfs), each real
//!   system directory and the private `/etc` is an overlayfs of the machine's own, made in
//!   its mount namespace (the host never sees it): the host directory (or the factory's
//!   `/etc` copy) below, the machine's upper layer in a `tmpfs` mounted on `layers/` of
//!   its private directory (held in memory), host mounts nested there bound read-only on
//!   top. With `storage_mb` that `tmpfs` is the machine's one size-limited file system,
//!   which holds its root too (bound on the root directory), so `storage_mb` bounds
//!   everything the machine writes, root and layers together; without it the layers get a
//!   `tmpfs` of the machine's mount namespace bounded to [`DEFAULT_LAYERS_MB`] (1 GiB, or
//!   half the host's memory where that is less) and the root stays on the temp dir; writes
//!   stay in the machine and go with it; transfers read and write the layers through fds
//!   of the overlays; apt's and dpkg's state (`/var/lib/dpkg`, `/var/lib/apt`,
//!   `/var/cache/apt`) is overlaid the same way and the `/etc` copy holds their
//!   configuration (no credentials), so `apt-get install ./x.deb` and `dpkg -i` work in
//!   the machine only;
//! - in a root host process, without `storage_mb`, a machine root that is an overlayfs of
//!   the machine's mount namespace (the host sees only its empty mount point): its writes
//!   go to `upper/` of its private directory, over the frozen layers of its snapshots and
//!   the factory's skeleton layer (the root's directories and mount points, written once
//!   per factory and layout, so a create writes three directories to the host's disk).
//!   Every overlay of a machine (root, copy-on-write
//!   layers, the read-only `/etc`) is mounted with its layers given as `.` after an
//!   `fchdir`, so `/proc/self/mountinfo` in the machine names no host path of its
//!   directories;
//! - snapshots ([`Machine::snapshot`](shellbox_core::Machine::snapshot), on a factory
//!   with read-only system directories in a root host process): a snapshot **ends every
//!   process of the machine** (background processes and its open shell session, as a
//!   restart would; the next command starts a new sandbox), moves its upper layer into a
//!   frozen `shellbox-layer-*` directory ([`LAYER_PREFIX`]: one rename, no copy) and
//!   mounts the root again over it with a new empty upper; machines made by
//!   [`create_from`](shellbox_core::MachineFactory::create_from) mount an empty upper of
//!   their own over the same frozen layers. Processes are ended because overlayfs cannot
//!   swap a mounted overlay's upper: one that survived could go on writing the frozen
//!   layer through its working directory or open files. Layers are shared by the
//!   snapshot handles and machines that use them and removed with the last; `gc` removes
//!   a dead owner's; a chain deeper than [`MAX_LAYER_DEPTH`] is squashed into one layer
//!   (a copy) by the snapshot that would exceed it;
//! - processes a command leaves in the background keep running until the machine closes
//!   (or a snapshot ends them, above);
//!   a timeout or a dropped stream SIGKILLs everything the command started (`setsid` and
//!   double-fork escapees included) and nothing else; output written before the kill is
//!   kept; close kills every process of the machine.
//!
//! Each machine's private directory holds an owner marker ([`OWNER_FILE`]: the owner's
//! pid, its start time from `/proc/PID/stat` and the host name, like the Docker backend's
//! labels); [`gc`] removes the directories (with their cgroups and mounts) whose owner is
//! gone, as `shellbox gc --backend local` does.
//!
//! The sandbox line is built by the pure [`plan::bwrap_args`]; the behaviour follows the
//! reference library's local backend (REFERENCE.md section 4).
//! It isolates trusted commands; it is not a security boundary against hostile code.
//!
//! Where this backend differs from the reference:
//!
//! - the sandbox is built once per machine, not per command (the supervisor above), with
//!   the loopback-only network namespace and (as root) a mount namespace of the machine's
//!   own in which the system directories and the private `/etc` and `/sys` are already
//!   bound read-only in the root (bwrap binds the root with them in one step); the spec's
//!   read-only mounts are bound when the machine starts, so a host directory replaced
//!   later is seen as it was then;
//! - processes a command leaves in the background keep running after it (the reference
//!   kills them when the command ends; DESIGN.md "The process model");
//! - a command that timed out keeps the output it wrote before the kill (DESIGN.md);
//! - `/etc/alternatives` and `/etc/ssl/certs` (hundreds of symlinks each) are bound
//!   read-only over the private `/etc` instead of copied into it: same content, and
//!   creating a machine takes milliseconds instead of seconds; the rest of the private
//!   `/etc` is copied once per factory (made by
//!   [`LocalMachineFactory::new`]) and bound read-only in every machine, not copied per
//!   machine (about ten file creations and removals less per machine);
//! - the merged-`/usr` symlinks (`/bin -> usr/bin`, ...) are made once in the root when the
//!   machine is created, not with `--symlink` per command (Debian's bwrap 0.8 refuses to
//!   create one that exists, so the reference's second command on a machine fails there);
//! - transfers resolve every guest path as the machine sees it, component by component from
//!   file descriptors with symlinks resolved in the guest namespace and through the
//!   machine's mounts (the reference resolves host real paths first, then copies, and reads
//!   host files the machine cannot see); downloads are written by core's shared staged
//!   writer and uploads are staged inside the machine, both all or nothing;
//! - copy-on-write layers live in the machine's own mount namespace and its private
//!   directory (`layers/`), not in a `shellbox-layers-*` directory of the host's mount
//!   table, so a killed owner leaves no mount (only the directory, which `gc` removes);
//!   transfers into and out of them go through fds of the overlays (the machine's view)
//!   rather than a `tar` inside the sandbox; a directory upload that reaches a layer's top
//!   (`usr/` in an upload to `/`) stages that part in the layer and moves every part into
//!   place only once all are staged and checked; a
//!   copy-on-write factory copies `/etc/alternatives` and `/etc/ssl/certs` into its shared
//!   `/etc` once, so one overlay shows (and lets a machine change) them;
//! - host fds left inheritable by the calling program are not passed into sandboxes;
//! - a mount at `/`, or in `/dev` or `/proc`, is refused like one in a system directory,
//!   and uploads into `/dev` and `/proc` are refused like uploads into `/usr`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), shellbox_core::Error> {
//! use shellbox_core::{Command, Machine, MachineFactory, MachineSpec};
//! use shellbox_local::{LocalMachineFactory, LocalOptions};
//! let factory = LocalMachineFactory::new(LocalOptions::default())?;
//! let machine = factory.create(MachineSpec::host()).await?;
//! let result = machine.run(Command::shell("echo hi > f && cat f")).await?;
//! assert_eq!(result.stdout, "hi\n");
//! machine.close().await?;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

mod cgroup;
mod devfs;
mod fsops;
mod gc;
mod guest;
mod launch;
mod layer;
mod machine;
mod ns;
mod packages;
pub mod plan;
mod root;
pub mod seccomp;

/// What the local backend offers ([`shellbox_core::MachineFactory::capabilities`]): Linux
/// processes with every task capability of the reference (`shell`, `filesystem`, `python`,
/// `process`, `network`, `git_repository`); the `host` and `packages` sources; no memory, CPU or GPU
/// limit. A factory in a root host process also enforces `storage_mb`
/// ([`LOCAL_ROOT_CAPABILITIES`]).
pub const LOCAL_CAPABILITIES: shellbox_core::Capabilities =
    shellbox_core::Capabilities::linux_process()
        .with_sources(&["host", "packages"])
        .with_process_model()
        .with_shell_sessions(shellbox_core::SessionKind::Interactive);

/// [`LOCAL_CAPABILITIES`] of a factory in a root host process: `storage_mb` is enforced
/// with a size-limited `tmpfs` root.
pub const LOCAL_ROOT_CAPABILITIES: shellbox_core::Capabilities =
    LOCAL_CAPABILITIES.with_limits(false, false, true, false);

pub use cgroup::CGROUP_BASE_NAME;
pub use gc::{gc, gc_in, GcReport, Owner, OWNER_FILE};
pub use launch::{parse_exit_code, CONTROL_ENV};
pub use layer::{LAYER_PREFIX, MAX_LAYER_DEPTH};
pub use machine::{
    largest_storage_mb, machine_bwrap_args, LocalMachine, LocalMachineFactory, LocalOptions,
    COPY_ON_WRITE_REQUIREMENTS, MIN_PIDS_LIMIT, PROBE_TIMEOUT, ROOT_OVERLAY_REQUIREMENTS,
    SANDBOX_REQUIREMENTS, SNAPSHOT_REQUIREMENTS,
};
pub use packages::{DEFAULT_PYTHON_VERSION, TOOLS_REFUSAL};
pub use plan::SystemDirectories;
pub use root::{
    DEFAULT_LAYERS_MB, ETC_BOUND_DIRS, ETC_COPIES, ETC_PREFIX, LAYERS_DIR_NAME, ROOT_DIR_NAME,
    ROOT_IN_LAYERS, ROOT_PREFIX, UPPER_DIR_NAME, WORK_DIR_NAME,
};
/// The local machine's persistent shell session: the supervisor's
/// [`PtySession`](shellbox_supervisor::session::PtySession) (see there for how it works).
pub use shellbox_supervisor::session::PtySession as LocalSession;
pub use shellbox_supervisor::session::{INTERRUPT_BOUND, SESSION_BUFFER_BYTES, TERMINAL_SIZE};
