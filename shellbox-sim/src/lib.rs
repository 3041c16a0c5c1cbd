//! The shellbox simulator backend: an in-memory, deterministic, Bash-5.2-like shell over a
//! virtual filesystem.
//!
//! A [`SimMachine`] lives entirely in the process: no daemon, no fork, no host file. Scripts
//! are parsed with [`brush_parser`] and interpreted here (the semantics are ours, modelled on
//! GNU bash 5.2); files live in an arena of virtual inodes; `sleep` advances a virtual clock
//! that `date` reads; PIDs are virtual and stable. The same command on a fresh machine gives
//! the same bytes every time.
//!
//! ```
//! use shellbox_core::{Command, MachineSpec};
//! use shellbox_sim::SimMachineFactory;
//!
//! let machine = SimMachineFactory::new().create_sim(MachineSpec::sim()).unwrap();
//! let out = machine.run_sync(Command::shell("for i in 1 2 3; do echo $i; done")).unwrap();
//! assert_eq!(out.stdout, "1\n2\n3\n");
//! ```
//!
//! Limits (defaults from the reference library, section 6): CPU fuel (one unit per command,
//! loop iteration and arithmetic evaluation), memory (one budget per machine: variables,
//! arrays, pipes, captured and queued background output, and the bytes of its files all
//! count against it together; one expanded word holds at most a quarter of it; see the
//! `mem` module), disk (bytes held by virtual files) and cumulative kept output.
//! Exhausting one returns [`Error::Terminated`] naming the budget and closes the machine.
//! A command's timeout ends it within about 100 ms of its deadline whatever it is doing:
//! loops tick, and long single steps (building or splitting a big word, pattern matching,
//! copying a tree) look at the clock at least once per MiB.
//!
//! A machine's one persistent shell session ([`SimMachine::open_shell_sync`], the contract's
//! `Machine::open_shell`) is non-interactive (REFERENCE.md section 2): each `execute` runs
//! its command line to completion in a shell whose state persists across calls, its
//! stdout and stderr merged in write order; `interrupt` stops the running line (130).
//!
//! `Machine::run_stream` is live: a command's output leaves as it is written, in chunks
//! of at most 16 KiB through a bounded pipe (the interpreter waits while the consumer
//! lags, its deadline still counting); dropping the stream cancels the command.
//!
//! What the simulator cannot do fails visibly: an unsupported option or syntax exits 2 with
//! a diagnostic naming it, and is recorded in [`SimMachine::unsupported`] (so are syntax
//! errors and commands that were not found).
//!
//! # What is simulated
//!
//! The shell: simple commands, pipelines (stages run one after another over buffered pipes;
//! a producer piped into `head` gets SIGPIPE once the reader is satisfied and the 64 KiB
//! pipe is full), `&&`/`||`/`;`/`&`, subshells, `{ }`, `if`/`case` (with `;&` and `;;&`),
//! `for` (both forms), `while`/`until`, functions with `local`, redirections (`<`, `>`,
//! `>>`, `>|`, `<>`, `2>&1`, `&>`, `N>&M`, `N>&-`, here-documents, here-strings, process
//! substitution `<(...)`), every parameter expansion, command substitution, arithmetic,
//! globbing (with `extglob`, `globstar`, `nullglob`, `dotglob`), brace expansion, word
//! splitting, quoting including `$'...'`, indexed and associative arrays (associative ones
//! iterate in bash's hash order), namerefs, `set -e`/`-u`/`-x`/`-o pipefail`/`-C`/`-f`,
//! `$?`, `PIPESTATUS`, traps (`EXIT`, `ERR`, signals sent with `kill`), background jobs
//! (each runs to completion, or to the command's deadline, when started; their output is
//! merged by virtual time) with `wait`/`kill`/`jobs`, `read`, `mapfile`, `eval`, `source`,
//! `exec`, `shift`, `getopts`, `printf` (with `-v`, `%q`, `%b`, `%(fmt)T`), `command -v`,
//! `type`, `time`, `pushd`/`popd`, `umask`, `shopt`.
//!
//! The programs under `/bin` and `/usr/bin`: `[ basename bash cat chmod cp cut date dirname echo
//! env false head kill ln ls mkdir mv printf pwd rev rm rmdir seq sh sleep stat tac tail tar tee
//! test timeout touch tr true uniq wc` (`tar` creates, extracts and lists uncompressed archives, what
//! shellbox's transfer helpers need). `/dev/zero` and `/dev/urandom` (deterministic
//! pseudo-random bytes) are endless: `cat` streams them until its reader exits or a budget
//! runs out, `head -c N` reads N bytes; reading one whole any other way fails visibly
//! (`Invalid argument`, recorded as unsupported). Any other program is not found (exit 127), as on a
//! machine without it.
//!
//! # Fuzzing
//!
//! `tests/fuzz.rs` is a grammar-aware fuzzer (deterministic seed): generated scripts run on
//! fresh machines in a child process capped with `RLIMIT_AS`, checking that nothing panics,
//! that every timeout is honoured and that memory stays bounded. `cargo test -p
//! shellbox-sim --test fuzz` runs it for 3 s; `SHELLBOX_FUZZ_SECS=3600 cargo test --release
//! -p shellbox-sim --test fuzz -- --nocapture` for an hour (`SHELLBOX_FUZZ_SEED=n` for
//! another seed).
//!
//! # Not simulated
//!
//! `select`, `coproc`, output process substitution `>(...)`, job control (`fg`, `bg`),
//! aliases, `RETURN`/`DEBUG` traps, the `-l`/`-u` case attributes of `declare`, users other
//! than root, and real concurrency between pipeline stages.

#![warn(missing_docs)]

mod builtins;
mod expand;
mod glob;
mod live;
mod mem;
mod pattern;
mod programs;
mod session;
mod shell;
mod utils;
mod vfs;

/// What the simulator offers ([`MachineFactory::capabilities`]): shell-simulator semantics,
/// `shell` and `filesystem` (no Python, processes, network or git); the `sim` and
/// `packages` sources (no Python, tools from its command table: [`check_source`]); it
/// bounds `memory_mb` and `storage_mb` (its own budgets) but not `cpus` or `gpus`; snapshots;
/// non-interactive shell sessions ([`SimMachine::open_shell_sync`]); private system
/// directories (each machine's virtual filesystem is its own).
pub const SIM_CAPABILITIES: shellbox_core::Capabilities =
    shellbox_core::Capabilities::shell_simulator()
        .with_sources(&["sim", "packages"])
        .with_limits(true, false, true, false)
        .with_snapshots()
        .with_private_system_directories()
        .with_shell_sessions(shellbox_core::SessionKind::NonInteractive);

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use shellbox_core::archive::{TreeEntry, TreeWriter, SPECIAL_FILE_REFUSAL};
use shellbox_core::capture::{result_stream, EventStream};
use shellbox_core::transfer::{DownloadKind, StagedDownload};
use shellbox_core::validate::validate_guest_path;
use shellbox_core::{
    async_trait, Command, CommandResult, Error, ExitReason, ImageSource, Machine, MachineFactory,
    MachineSpec, NetworkPolicy, ShellSession, Snapshot, SnapshotHandle,
};

use crate::live::{LiveSink, LiveStream, Pipe};
use crate::shell::{Ctl, Interp, Shell, Stream, Var, World, CANCELLED};
use crate::vfs::{Errno, Kind, Vfs};
use shellbox_core::capture::OutputKind;
use shellbox_core::{Event, ExitStatus};
use std::cell::RefCell;
use std::rc::Rc;

/// The `PATH` of a fresh machine (Debian's root default).
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The virtual clock's start: 2024-01-01T00:00:00Z, in seconds since the Unix epoch.
pub const CLOCK_START_EPOCH_SECS: i64 = 1_704_067_200;

/// Budgets of a simulated machine (REFERENCE.md section 6 defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimOptions {
    /// CPU fuel in units (one per simple command, loop iteration, arithmetic evaluation);
    /// default 10,000,000,000. Counted over the machine's whole life.
    pub cpu_fuel: u64,
    /// Bytes virtual files may hold; default 512 MiB. `MachineSpec::storage_mb` overrides it.
    pub disk_bytes: u64,
    /// Cumulative stdout + stderr bytes kept over the machine's life; default 128 MiB.
    /// Bytes past a command's own `output_limit_bytes` are only counted as truncation
    /// (and cost one unit of CPU fuel per 64 KiB), so a flood under a small cap keeps its
    /// first bytes and its real status, as on the other backends.
    pub output_bytes: u64,
    /// The machine's one memory budget in bytes: what its variables, arrays, pipes, output
    /// buffers and files hold together; default from `MachineSpec::memory_mb`, else
    /// 2,048 MiB. `None` uses that default. Exceeding it ends the machine with
    /// [`Error::Terminated`] (`"memory limit exceeded: ..."`); the process holds at most
    /// about twice the budget at that moment (the growth slack of the buffer being built).
    pub memory_bytes: Option<u64>,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            cpu_fuel: 10_000_000_000,
            disk_bytes: 512 * 1024 * 1024,
            output_bytes: 128 * 1024 * 1024,
            memory_bytes: None,
        }
    }
}

/// Creates [`SimMachine`]s.
#[derive(Debug, Clone, Default)]
pub struct SimMachineFactory {
    options: SimOptions,
}

impl SimMachineFactory {
    /// A factory with the default budgets.
    pub fn new() -> Self {
        Self::default()
    }

    /// A factory with these budgets.
    pub fn with_options(options: SimOptions) -> Self {
        SimMachineFactory { options }
    }

    /// Creates a concrete machine (what the CLI uses to reach [`SimMachine::unsupported`]).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a spec that fails [`MachineSpec::validate`];
    /// [`Error::Unsupported`] when the source is neither [`ImageSource::Sim`] nor an
    /// [`ImageSource::Packages`] this simulator can give ([`check_source`]), `cpus` is set,
    /// `gpus > 0` or the network is [`NetworkPolicy::Allow`].
    pub fn create_sim(&self, spec: MachineSpec) -> Result<SimMachine, Error> {
        spec.validate()?;
        check_source(&spec)?;
        if spec.cpus.is_some() {
            return Err(Error::unsupported("the sim backend cannot limit cpus"));
        }
        if spec.gpus > 0 {
            return Err(Error::unsupported("the sim backend has no gpus"));
        }
        if spec.network == NetworkPolicy::Allow {
            return Err(Error::unsupported(
                "the sim backend has no network (network allow)",
            ));
        }
        let disk = spec
            .storage_mb
            .map(|m| m.saturating_mul(1024 * 1024))
            .unwrap_or(self.options.disk_bytes);
        let memory = self
            .options
            .memory_bytes
            .unwrap_or(spec.memory_mb.unwrap_or(2048).saturating_mul(1024 * 1024));
        let mut world = World {
            vfs: Vfs::new(disk, CLOCK_START_EPOCH_SECS, programs::names()),
            clock_ns: 0,
            epoch: CLOCK_START_EPOCH_SECS,
            next_pid: 1,
            fuel_left: self.options.cpu_fuel,
            output_left: self.options.output_bytes,
            memory_limit: memory,
            memory_base: 0,
            session_held: 0,
            unsupported: Vec::new(),
            rng: 42,
            closing: Arc::new(AtomicBool::new(false)),
            cancel: None,
        };
        let workdir = if spec.workdir.is_empty() {
            "/".to_string()
        } else {
            spec.workdir.clone()
        };
        world
            .vfs
            .mkdir_p(&workdir, 0o755)
            .map_err(|e| Error::invalid(format!("workdir {workdir}: {}", e.msg())))?;
        // REFERENCE.md section 6: the directories a harness writes its logs into
        for d in ["/logs/agent", "/logs/verifier", "/logs/artifacts"] {
            world
                .vfs
                .mkdir_p(d, 0o755)
                .map_err(|e| Error::invalid(format!("{d}: {}", e.msg())))?;
        }
        let closing = world.closing.clone();
        Ok(SimMachine {
            inner: Arc::new(Inner {
                closing,
                world: Mutex::new(Some(world)),
                workdir,
                env: spec.env,
                unsupported: Mutex::new(Vec::new()),
                session: Mutex::new(None),
            }),
        })
    }
}

/// Whether the simulator runs machines of `spec`'s source: [`ImageSource::Sim`], or an
/// [`ImageSource::Packages`] without Python (`pypi_packages: None`; this simulator runs no
/// Python) whose tools are all programs of its command table (what `/bin` and `/usr/bin`
/// list, e.g. `sh`, `cat`, `sed`, `awk`) found through the machine's `PATH`: the spec's
/// `PATH` when its env sets one (as a command's lookup will use it), else
/// [`DEFAULT_PATH`]; a fresh machine's programs are only in `/bin` and `/usr/bin`, so that
/// `PATH` must name one of them.
///
/// # Errors
/// [`Error::Unsupported`] for another source, for `pypi_packages: Some(_)`, naming
/// (comma-separated, in the spec's order) every tool the simulator does not have, or when
/// the spec's `PATH` reaches neither `/bin` nor `/usr/bin`.
pub fn check_source(spec: &MachineSpec) -> Result<(), Error> {
    match &spec.source {
        ImageSource::Sim(_) => Ok(()),
        ImageSource::Packages(packages) => {
            if packages.pypi_packages.is_some() {
                return Err(Error::unsupported(
                    "the sim backend runs no Python: ImageSource::Packages with pypi_packages \
                     (even an empty list, CPython only) needs the local backend",
                ));
            }
            let names = programs::names();
            let missing: Vec<&str> = packages
                .tools
                .iter()
                .map(String::as_str)
                .filter(|tool| !names.contains(tool))
                .collect();
            let path = spec
                .env
                .get("PATH")
                .map(String::as_str)
                .unwrap_or(DEFAULT_PATH);
            let reaches_programs = path
                .split(':')
                .any(|dir| matches!(dir.trim_end_matches('/'), "/bin" | "/usr/bin"));
            if missing.is_empty() && !packages.tools.is_empty() && !reaches_programs {
                Err(Error::unsupported(format!(
                    "the machine's PATH {path:?} reaches neither /bin nor /usr/bin, where the \
                     sim backend's programs are: tools {} would not be found",
                    shellbox_core::list_names(&packages.tools)
                )))
            } else if missing.is_empty() {
                Ok(())
            } else {
                Err(Error::unsupported(format!(
                    "the sim backend has no program {} (its programs: {})",
                    shellbox_core::list_names(&missing),
                    names.join(" ")
                )))
            }
        }
        other => Err(Error::unsupported(format!(
            "the sim backend runs only ImageSource::Sim and ImageSource::Packages, not {}",
            other.kind()
        ))),
    }
}

#[async_trait]
impl MachineFactory for SimMachineFactory {
    fn backend(&self) -> &'static str {
        "sim"
    }

    fn capabilities(&self) -> shellbox_core::Capabilities {
        SIM_CAPABILITIES
    }

    async fn create(&self, spec: MachineSpec) -> Result<Box<dyn Machine>, Error> {
        Ok(Box::new(self.create_sim(spec)?))
    }

    /// The default check (REFERENCE.md 1.7) after [`check_source`], so a
    /// [`PackageSpec`](shellbox_core::PackageSpec) the simulator cannot give is refused here
    /// as `create` refuses it.
    async fn check_environment(
        &self,
        requirements: &shellbox_core::ExecutionRequirements,
        spec: &MachineSpec,
    ) -> Result<(), Error> {
        SIM_CAPABILITIES.check_spec(self.backend(), spec)?;
        check_source(spec)?;
        shellbox_core::check_execution_requirements(&SIM_CAPABILITIES, requirements, spec, None)
    }

    /// Creates a machine whose filesystem is a copy of the snapshot's (see
    /// [`SimMachineFactory::create_from_sim`]).
    async fn create_from(
        &self,
        snapshot: &Snapshot,
        spec: MachineSpec,
    ) -> Result<Box<dyn Machine>, Error> {
        Ok(Box::new(self.create_from_sim(snapshot, spec)?))
    }
}

/// A simulator machine's filesystem frozen by [`Machine::snapshot`]: its own copy of the
/// tree, so neither the source machine nor the machines started from it can change it.
struct SimSnapshot {
    id: String,
    /// `None` once deleted.
    vfs: Mutex<Option<Arc<Vfs>>>,
}

#[async_trait]
impl SnapshotHandle for SimSnapshot {
    fn backend(&self) -> &'static str {
        "sim"
    }

    fn id(&self) -> &str {
        &self.id
    }

    async fn delete(&self) -> Result<(), Error> {
        lock(&self.vfs).take();
        Ok(())
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl SimMachineFactory {
    /// Creates a concrete machine from a snapshot (what [`MachineFactory::create_from`]
    /// does): the spec is checked as by [`SimMachineFactory::create_sim`] and gives the
    /// budgets, env and workdir (created when missing); the files are the snapshot's, each
    /// machine with its own copy. The virtual clock goes on from the snapshot's, so its
    /// files are never newer than the new machine's `now`.
    ///
    /// # Errors
    /// As [`SimMachineFactory::create_sim`]; [`Error::Unsupported`] for a snapshot another
    /// backend took; [`Error::Closed`] for a deleted one; [`Error::InvalidInput`] when the
    /// snapshot's files hold more bytes than the spec's `storage_mb` allows.
    pub fn create_from_sim(
        &self,
        snapshot: &Snapshot,
        spec: MachineSpec,
    ) -> Result<SimMachine, Error> {
        let frozen = snapshot.expect_backend::<SimSnapshot>("sim")?;
        let Some(vfs) = lock(&frozen.vfs).clone() else {
            return Err(Error::Closed);
        };
        let machine = self.create_sim(spec)?;
        machine.with_world(|w| {
            let mut files = (*vfs).clone();
            if files.used_bytes > w.vfs.disk_limit {
                return Err(Error::invalid(format!(
                    "the snapshot's files hold {} bytes, more than the machine's storage limit of {} bytes",
                    files.used_bytes, w.vfs.disk_limit
                )));
            }
            files.disk_limit = w.vfs.disk_limit;
            if files.now > w.epoch {
                w.epoch = files.now;
            }
            files.now = w.epoch;
            files
                .mkdir_p(&machine.inner.workdir, 0o755)
                .map_err(|e| Error::invalid(format!("workdir {}: {}", machine.inner.workdir, e.msg())))?;
            w.vfs = files;
            Ok(())
        })?;
        Ok(machine)
    }
}

struct Inner {
    /// Set once `close` began: the running command stops, queued ones get `Closed`.
    closing: Arc<AtomicBool>,
    world: Mutex<Option<World>>,
    workdir: String,
    env: BTreeMap<String, String>,
    unsupported: Mutex<Vec<String>>,
    /// The machine's shell session, once opened (a closed one is replaced by the next
    /// `open_shell`).
    session: Mutex<Option<Arc<session::SimSession>>>,
}

impl Inner {
    /// Closes the machine's session, if one was opened.
    fn close_session(&self) {
        if let Some(s) = lock(&self.session).take() {
            s.shutdown();
        }
    }

    /// Moves what the last command recorded as unsupported into the machine's list.
    fn take_unsupported(&self, world: &mut World) {
        let new_unsupported = std::mem::take(&mut world.unsupported);
        if !new_unsupported.is_empty() {
            let mut u = lock(&self.unsupported);
            for x in new_unsupported {
                if !u.contains(&x) {
                    u.push(x);
                }
            }
        }
    }
}

/// What a command reports when the interpreter panicked: one line naming the panic.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    let msg = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    format!("shellbox-sim: internal error (simulator panicked): {msg}\n")
}

impl Drop for Inner {
    /// Frees what a timed-out command left buried on this thread (see [`mem::bury`]).
    fn drop(&mut self) {
        self.close_session();
        mem::reap();
    }
}

/// One simulated machine. Cheap to clone (clones share the machine); commands on it are
/// serialized.
#[derive(Clone)]
pub struct SimMachine {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SimMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimMachine")
            .field("workdir", &self.inner.workdir)
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl SimMachine {
    /// What crossed the simulator's boundary so far, each once, in first-seen order:
    /// `"unsupported: <what>"` for an option, feature or syntax the simulator refused (the
    /// command exited 2), `"syntax: <parser message>"` for a script that did not parse, and
    /// `"command not found: <name>"` for a program the machine does not have (exit 127).
    /// Still readable after close; at most 1,000 entries.
    pub fn unsupported(&self) -> Vec<String> {
        lock(&self.inner.unsupported).clone()
    }

    /// Whether the machine was closed (by [`Machine::close`] or an exhausted budget).
    pub fn is_closed(&self) -> bool {
        self.inner.closing.load(Ordering::Relaxed) || lock(&self.inner.world).is_none()
    }

    /// Runs a command to completion synchronously (what [`Machine::run`] does).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a bad command, [`Error::Unsupported`] for a user other than
    /// root (`None`, `"0"`, `"root"`), [`Error::Closed`] after close, and
    /// [`Error::Terminated`] when a budget ran out (the machine is then closed).
    pub fn run_sync(&self, command: Command) -> Result<CommandResult, Error> {
        check_command(&command)?;
        let guard = lock(&self.inner.world);
        self.run_locked(guard, command, Duration::ZERO, None, None)
    }

    /// Waits for the machine on a blocking thread, then runs; `cancel` stops both. With
    /// `live`, the output goes there as it is written (the result's stdout and stderr are
    /// then empty but for a panic's message, and its truncation flags are the sink's).
    fn run_blocking(
        &self,
        command: Command,
        cancel: Arc<AtomicBool>,
        started: Instant,
        live: Option<&Rc<RefCell<LiveSink>>>,
    ) -> Result<CommandResult, Error> {
        let guard = loop {
            if let Some(g) = self.try_world() {
                break g;
            }
            if self.inner.closing.load(Ordering::Relaxed) || cancel.load(Ordering::Relaxed) {
                return Err(Error::Closed);
            }
            if command.timeout.is_some_and(|t| started.elapsed() >= t) {
                return Ok(timed_out_before_start());
            }
            std::thread::sleep(Duration::from_micros(200));
        };
        if cancel.load(Ordering::Relaxed) {
            return Err(Error::Closed);
        }
        self.run_locked(guard, command, started.elapsed(), Some(cancel), live)
    }

    /// Runs `command` for [`Machine::run_stream`] on a blocking thread: its output goes to
    /// `pipe` as it is written, then the rest once the machine's lock is released, then the
    /// terminal item.
    fn run_live(
        &self,
        command: Command,
        cancel: Arc<AtomicBool>,
        started: Instant,
        pipe: Arc<Pipe>,
    ) {
        let limit = usize::try_from(command.output_limit_bytes).unwrap_or(usize::MAX);
        let sink = Rc::new(RefCell::new(LiveSink::new(pipe.clone(), limit)));
        let r = self.run_blocking(command, cancel, started, Some(&sink));
        let mut rest: Vec<Event> = Vec::new();
        {
            let mut s = sink.borrow_mut();
            while let Some(ev) = s.next_event() {
                rest.push(ev);
            }
        }
        let terminal = r.map(|res| {
            // a panic's message is in the result, not the sink
            if !res.stdout.is_empty() {
                rest.push(Event::Stdout(res.stdout));
            }
            if !res.stderr.is_empty() {
                rest.push(Event::Stderr(res.stderr));
            }
            Event::Exit(ExitStatus {
                exit_code: res.exit_code,
                reason: res.reason,
                stdout_truncated: res.stdout_truncated,
                stderr_truncated: res.stderr_truncated,
            })
        });
        for ev in rest {
            if pipe.push(Ok(ev), || Ok::<(), ()>(())).is_err() {
                return;
            }
        }
        pipe.finish(terminal);
    }

    /// Runs `command` holding the machine's lock; `queued` is how long it waited for it
    /// (a command's timeout counts that time, as in the reference).
    fn run_locked(
        &self,
        mut guard: std::sync::MutexGuard<'_, Option<World>>,
        mut command: Command,
        queued: Duration,
        cancel: Option<Arc<AtomicBool>>,
        live: Option<&Rc<RefCell<LiveSink>>>,
    ) -> Result<CommandResult, Error> {
        if self.inner.closing.load(Ordering::Relaxed) {
            return Err(Error::Closed);
        }
        let Some(world) = guard.as_mut() else {
            return Err(Error::Closed);
        };
        world.cancel = cancel;
        if let Some(t) = command.timeout {
            match t.checked_sub(queued) {
                Some(left) if !left.is_zero() => command.timeout = Some(left),
                _ => return Ok(timed_out_before_start()),
            }
        }
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            execute(world, &self.inner.workdir, &self.inner.env, &command, live)
        }))
        .unwrap_or_else(|panic| {
            let mut stderr = panic_text(&*panic).into_bytes();
            let limit = usize::try_from(command.output_limit_bytes).unwrap_or(usize::MAX);
            let truncated = stderr.len() > limit;
            stderr.truncate(limit);
            Ok(CommandResult {
                exit_code: Some(1),
                stdout: Bytes::new(),
                stderr: Bytes::from(stderr),
                stdout_truncated: false,
                stderr_truncated: truncated,
                reason: ExitReason::Exited,
            })
        });
        world.cancel = None;
        self.inner.take_unsupported(world);
        match outcome {
            Ok(r) => Ok(r),
            Err(reason) => {
                *guard = None;
                Err(Error::Terminated(reason))
            }
        }
    }

    fn try_world(&self) -> Option<std::sync::MutexGuard<'_, Option<World>>> {
        match self.inner.world.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    fn with_world<T>(&self, f: impl FnOnce(&mut World) -> Result<T, Error>) -> Result<T, Error> {
        let mut guard = lock(&self.inner.world);
        if self.inner.closing.load(Ordering::Relaxed) {
            return Err(Error::Closed);
        }
        let Some(world) = guard.as_mut() else {
            return Err(Error::Closed);
        };
        let r = f(world);
        if world.vfs.used_bytes > world.vfs.disk_limit {
            *guard = None;
            return Err(Error::Terminated("disk limit exceeded".into()));
        }
        r
    }

    /// Freezes the machine's files (what [`Machine::snapshot`] does).
    ///
    /// # Errors
    /// [`Error::Closed`] after close.
    pub fn snapshot_sync(&self) -> Result<Snapshot, Error> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let vfs = self.with_world(|w| Ok(Arc::new(w.vfs.clone())))?;
        Ok(Snapshot::new(SimSnapshot {
            id: format!("sim-{}", NEXT.fetch_add(1, Ordering::Relaxed)),
            vfs: Mutex::new(Some(vfs)),
        }))
    }

    /// Copies a host file or directory into the machine (see [`Machine::upload`]).
    ///
    /// # Errors
    /// As [`Machine::upload`]; [`Error::Terminated`] when the disk budget runs out.
    pub fn upload_sync(&self, source: &Path, target: &str) -> Result<(), Error> {
        validate_guest_path(target)?;
        check_transfer_path(target)?;
        let meta = std::fs::symlink_metadata(source).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::not_found(source.display().to_string())
            } else {
                Error::io(format!("stat {}", source.display()), e)
            }
        })?;
        check_transferable(&meta, source)?;
        self.with_world(|w| {
            let (parent, name) = match target.rfind('/') {
                Some(0) => ("/".to_string(), target[1..].to_string()),
                Some(i) => (target[..i].to_string(), target[i + 1..].to_string()),
                None => ("/".to_string(), target.to_string()),
            };
            if name.is_empty() && !meta.is_dir() {
                // as local and docker: `/` stays a directory
                return Err(Error::transfer(
                    target,
                    "a file cannot replace the machine root",
                ));
            }
            let pdir = guest_mkdirs(&mut w.vfs, &parent, target)?;
            if meta.is_dir() {
                let dir = if name.is_empty() {
                    pdir
                } else {
                    guest_dir_in(&mut w.vfs, pdir, &name, target)?
                };
                upload_tree(&mut w.vfs, source, dir, target)?;
                if let Some(n) = w.vfs.get_mut(dir) {
                    n.mode = mode_of(&meta);
                }
                Ok(())
            } else {
                upload_one(&mut w.vfs, source, &meta, pdir, &name, target)
            }
        })
    }

    /// Copies a machine file or directory to the host (see [`Machine::download`]).
    ///
    /// # Errors
    /// As [`Machine::download`].
    pub fn download_sync(&self, source: &str, target: &Path) -> Result<(), Error> {
        validate_guest_path(source)?;
        check_transfer_path(source)?;
        if self.inner.closing.load(Ordering::Relaxed) {
            return Err(Error::Closed);
        }
        let mut guard = lock(&self.inner.world);
        let Some(w) = guard.as_mut() else {
            return Err(Error::Closed);
        };
        let ino = w.vfs.resolve("/", source, true).map_err(|e| match e {
            Errno::NoEnt | Errno::NotDir => Error::not_found(source),
            other => Error::transfer(source, other.msg()),
        })?;
        let vfs = &w.vfs;
        let staged = match &vfs.get(ino).kind {
            Kind::Dir(..) => StagedDownload::new(target, DownloadKind::Directory)?,
            _ => {
                let name = source
                    .rsplit('/')
                    .find(|c| !c.is_empty() && *c != "." && *c != "..")
                    .unwrap_or("download");
                StagedDownload::new(target, DownloadKind::File { name })?
            }
        };
        let mut writer = staged.writer();
        put_node(vfs, ino, source, &mut Vec::new(), &mut writer)?;
        writer.finish()?;
        staged.commit()
    }

    /// Copies the regular file `source` out of the machine to the host file `target`,
    /// refusing one larger than `max_bytes` (see [`Machine::download_file`]): read straight
    /// from the machine's filesystem, in chunks, into a staging file beside `target` that is
    /// renamed over it, so nothing is copied in memory and no command's output limit
    /// applies (second break-it pass of issue 12: through a command, a file of 128 MiB or
    /// more ended "output limit exceeded", and a 100 MB one doubled the peak memory).
    /// `source` is judged by what it resolves to (links followed): a path that resolves into
    /// `/proc`, `/sys` or `/dev` is refused, as is anything but a regular file.
    ///
    /// # Errors
    /// As [`shellbox_core::download_file`]: [`Error::InvalidInput`], [`Error::NotFound`],
    /// [`Error::Unsupported`] ("regular file"), [`Error::DownloadLimitExceeded`] (the old
    /// target untouched), [`Error::Transfer`], [`Error::Io`], [`Error::Closed`].
    pub fn download_file_sync(
        &self,
        source: &str,
        target: &Path,
        max_bytes: u64,
    ) -> Result<(), Error> {
        use std::io::Write;
        validate_guest_path(source)?;
        let not_regular = |why: &str| {
            Error::unsupported(format!(
                "{source} {why}; only a regular file can be downloaded with a byte limit"
            ))
        };
        if shellbox_core::validate::is_kernel_path(source) {
            return Err(not_regular(
                "is inside a kernel-provided directory (/proc, /sys, /dev)",
            ));
        }
        if target.file_name().is_none() {
            return Err(Error::invalid(format!(
                "download target {} has no file name",
                target.display()
            )));
        }
        let resolved = shellbox_core::transfer::resolve_host_target(target)?;
        let target = resolved.as_path();
        shellbox_core::refuse_special_download_target(target)?;
        if self.inner.closing.load(Ordering::Relaxed) {
            return Err(Error::Closed);
        }
        let mut guard = lock(&self.inner.world);
        let Some(w) = guard.as_mut() else {
            return Err(Error::Closed);
        };
        // Follow the links one at a time, to judge the path the file is really at.
        let mut path = source.to_string();
        let mut links = 0;
        let ino = loop {
            let (dir, name) = match w.vfs.resolve_parent("/", &path) {
                Ok(found) => found,
                Err(Errno::NoEnt | Errno::NotDir) => return Err(Error::not_found(source)),
                Err(e) => return Err(Error::transfer(source, e.msg())),
            };
            let dir_path = w.vfs.path_of(dir);
            let real = Vfs::absolute(&dir_path, &name);
            if shellbox_core::validate::is_kernel_path(&real) {
                return Err(not_regular(&format!(
                    "resolves to {real} in the machine, inside a kernel-provided directory \
                     (/proc, /sys, /dev)"
                )));
            }
            let Some(ino) = w.vfs.child(dir, &name) else {
                return if path == source {
                    Err(Error::not_found(source))
                } else {
                    Err(not_regular("is a dangling link"))
                };
            };
            match &w.vfs.get(ino).kind {
                Kind::Symlink(link) => {
                    links += 1;
                    if links > 40 {
                        return Err(Error::transfer(source, "too many levels of symbolic links"));
                    }
                    path = Vfs::absolute(&dir_path, link);
                }
                _ => break ino,
            }
        };
        let node = w.vfs.get(ino);
        let Kind::File(data) = &node.kind else {
            return Err(not_regular("is not a regular file"));
        };
        if data.len() as u64 > max_bytes {
            return Err(Error::DownloadLimitExceeded(format!(
                "{source} holds more than {max_bytes} bytes"
            )));
        }
        let parent = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => std::env::current_dir().map_err(|e| Error::io("current directory", e))?,
        };
        let staging = shellbox_core::staging::StagingDir::create_in(&parent).map_err(|e| {
            Error::io(
                format!("create staging directory in {}", parent.display()),
                e,
            )
        })?;
        let staged = staging.path().join("item");
        let mut file = std::fs::File::create(&staged)
            .map_err(|e| Error::io(format!("create {}", staged.display()), e))?;
        for chunk in data.chunks(1 << 20) {
            file.write_all(chunk)
                .map_err(|e| Error::io(format!("write {}", staged.display()), e))?;
        }
        shellbox_core::set_download_mode(&file, &staged, node.mode)?;
        file.sync_all()
            .map_err(|e| Error::io(format!("write {}", staged.display()), e))?;
        drop(file);
        drop(guard);
        shellbox_core::refuse_special_download_target(target)?;
        std::fs::rename(&staged, target).map_err(|e| {
            Error::io(
                format!("rename {} to {}", staged.display(), target.display()),
                e,
            )
        })
    }

    /// The machine's one persistent shell session (what [`Machine::open_shell`] returns):
    /// the first call starts it, later ones return the same session until it is closed
    /// (the next call then starts a new one). Non-interactive (REFERENCE.md section 2):
    /// `execute` runs each command line to completion in one shell whose cwd, variables,
    /// exports, functions, options and traps persist across calls; it starts in the
    /// workdir with the spec's env exported, and a `run` never sees its state (nor it a
    /// `run`'s). Its commands are serialized with the machine's others and under its
    /// budgets (CPU fuel, memory, disk, cumulative output); `read` and `write` are
    /// [`Error::Unsupported`]; `interrupt` stops its running command (130). The machine's
    /// close closes it.
    ///
    /// # Errors
    /// [`Error::Closed`] after close or an exhausted budget; [`Error::Io`] when the
    /// session's thread cannot be started.
    pub fn open_shell_sync(&self) -> Result<Arc<dyn ShellSession>, Error> {
        let mut slot = lock(&self.inner.session);
        // under the slot's lock: a close that set `closing` after this check waits for the
        // slot and closes what is put there
        if self.inner.closing.load(Ordering::Relaxed)
            || self.try_world().is_some_and(|w| w.is_none())
        {
            return Err(Error::Closed);
        }
        if let Some(s) = &*slot {
            if !s.is_closed() {
                return Ok(s.clone());
            }
        }
        let s = session::SimSession::start(Arc::downgrade(&self.inner))?;
        *slot = Some(s.clone());
        Ok(s)
    }

    /// Closes the machine; idempotent. A running command is cancelled (it stops at its
    /// next fuel check) and this waits for it.
    pub fn close_sync(&self) {
        self.inner.closing.store(true, Ordering::Relaxed);
        self.inner.close_session();
        *lock(&self.inner.world) = None;
    }
}

/// Checks what the simulator requires of a command before it queues.
fn check_command(command: &Command) -> Result<(), Error> {
    command.validate()?;
    if let Some(u) = &command.user {
        if u != "0" && u != "root" {
            // RULES-15 rule 2: the machine has one account, root (uid 0)
            return Err(Error::unsupported(format!(
                "no such user: {u} (the sim backend has only root)"
            )));
        }
    }
    Ok(())
}

/// RULES-15 rule 4: transfers of guest paths at or under `/proc`, `/sys` or `/dev` are
/// unsupported on every backend.
fn check_transfer_path(path: &str) -> Result<(), Error> {
    if shellbox_core::validate::is_kernel_path(path) {
        return Err(Error::unsupported(format!(
            "transfer of {path}: a kernel-provided path cannot be transferred"
        )));
    }
    Ok(())
}

/// A command whose deadline passed while it waited for the machine.
fn timed_out_before_start() -> CommandResult {
    CommandResult {
        exit_code: None,
        stdout: Bytes::new(),
        stderr: Bytes::new(),
        stdout_truncated: false,
        stderr_truncated: false,
        reason: ExitReason::TimedOut,
    }
}

/// Whether a command finishes in time bounded by its argv alone (a non-shell utility
/// that does not loop or read input), so it may run inline: handing it to a blocking
/// thread would cost ~60 µs against the ~7 µs it takes.
fn is_bounded_trivially(command: &Command) -> bool {
    const INLINE: &[&str] = &[
        "true", "false", "echo", "pwd", "basename", "dirname", "mkdir", "rmdir", "touch", "chmod",
        "stat", "test", "[", "ln", "kill",
    ];
    command.argv.len() <= 64
        && command.argv.iter().map(|a| a.len()).sum::<usize>() <= 64 * 1024
        && command.argv.first().is_some_and(|p| {
            INLINE.contains(&p.as_str())
                || INLINE.iter().any(|u| {
                    p.strip_suffix(u)
                        .is_some_and(|d| d == "/bin/" || d == "/usr/bin/")
                })
        })
}

/// What a cancelled command returns (nobody reads it: its future was dropped or the
/// machine is closing).
fn cancelled_result() -> CommandResult {
    CommandResult {
        exit_code: None,
        stdout: Bytes::new(),
        stderr: Bytes::new(),
        stdout_truncated: false,
        stderr_truncated: false,
        reason: ExitReason::TimedOut,
    }
}

/// Sets a run's cancel flag when its future is dropped before the run finished.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Gives the executor one turn (runtime-agnostic `yield_now`).
fn yield_once() -> impl std::future::Future<Output = ()> {
    let mut yielded = false;
    std::future::poll_fn(move |cx| {
        if yielded {
            std::task::Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
}

fn mode_of(meta: &std::fs::Metadata) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o7777
}

fn vfs_err(path: &str, e: Errno) -> Error {
    if e == Errno::NoSpc {
        Error::Terminated("disk limit exceeded".into())
    } else {
        Error::transfer(path, e.msg())
    }
}

/// Creates the directories of `abs`, refusing to pass through symlinks.
fn guest_mkdirs(vfs: &mut Vfs, abs: &str, target: &str) -> Result<usize, Error> {
    let mut cur = vfs::ROOT;
    for c in abs.split('/').filter(|c| !c.is_empty()) {
        cur = guest_dir_in(vfs, cur, c, target)?;
    }
    Ok(cur)
}

fn guest_dir_in(vfs: &mut Vfs, dir: usize, name: &str, target: &str) -> Result<usize, Error> {
    if let Some(i) = vfs.child(dir, name) {
        match vfs.get(i).kind {
            Kind::Symlink(_) => {
                return Err(Error::transfer(
                    target,
                    format!("{name} is a symlink; refusing to follow it"),
                ))
            }
            Kind::Dir(..) => return Ok(i),
            _ => {
                return Err(Error::transfer(
                    target,
                    format!("{name} is not a directory"),
                ))
            }
        }
    }
    vfs.ensure_dir_in(dir, name, 0o755)
        .map_err(|e| vfs_err(target, e))
}

fn upload_one(
    vfs: &mut Vfs,
    src: &Path,
    meta: &std::fs::Metadata,
    dir: usize,
    name: &str,
    target: &str,
) -> Result<(), Error> {
    if let Some(i) = vfs.child(dir, name) {
        match vfs.get(i).kind {
            Kind::Symlink(_) => {
                return Err(Error::transfer(
                    target,
                    "target is a symlink; refusing to follow it",
                ))
            }
            Kind::Dir(..) => return Err(Error::transfer(target, "target is a directory")),
            _ => {}
        }
    }
    if meta.file_type().is_symlink() {
        let t = std::fs::read_link(src)
            .map_err(|e| Error::io(format!("readlink {}", src.display()), e))?;
        vfs.put_symlink(dir, name, &t.to_string_lossy());
        return Ok(());
    }
    check_transferable(meta, src)?;
    let budget = vfs.disk_limit.saturating_sub(vfs.used_bytes);
    let data = read_bounded(src, budget)?.ok_or_else(|| vfs_err(target, Errno::NoSpc))?;
    vfs.put_file(dir, name, data, mode_of(meta))
        .map_err(|e| vfs_err(target, e))?;
    Ok(())
}

/// Refuses what is not a regular file, directory or symlink (FIFOs, sockets, devices):
/// opening one could block forever or never end (`/dev/zero`).
fn check_transferable(meta: &std::fs::Metadata, src: &Path) -> Result<(), Error> {
    let t = meta.file_type();
    if t.is_file() || t.is_dir() || t.is_symlink() {
        Ok(())
    } else {
        Err(Error::transfer(
            src.display().to_string(),
            "only regular files, directories and symlinks can be transferred",
        ))
    }
}

/// Reads a regular host file, at most `budget + 1` bytes; `None` when it holds more than
/// `budget` bytes. Opened with `O_NONBLOCK` so a file swapped for a FIFO after the stat
/// cannot block, and re-checked as a regular file once open.
fn read_bounded(src: &Path, budget: u64) -> Result<Option<Vec<u8>>, Error> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(src)
        .map_err(|e| Error::io(format!("open {}", src.display()), e))?;
    let meta = f
        .metadata()
        .map_err(|e| Error::io(format!("stat {}", src.display()), e))?;
    if !meta.is_file() {
        return Err(Error::transfer(
            src.display().to_string(),
            "only regular files, directories and symlinks can be transferred",
        ));
    }
    let mut data = Vec::with_capacity(usize::try_from(meta.len().min(budget)).unwrap_or(0));
    f.take(budget.saturating_add(1))
        .read_to_end(&mut data)
        .map_err(|e| Error::io(format!("read {}", src.display()), e))?;
    if data.len() as u64 > budget {
        return Ok(None);
    }
    Ok(Some(data))
}

fn upload_tree(vfs: &mut Vfs, src: &Path, dir: usize, target: &str) -> Result<(), Error> {
    let rd =
        std::fs::read_dir(src).map_err(|e| Error::io(format!("read dir {}", src.display()), e))?;
    let mut entries: Vec<_> = rd.filter_map(|e| e.ok()).collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        let meta = std::fs::symlink_metadata(&p)
            .map_err(|er| Error::io(format!("stat {}", p.display()), er))?;
        if meta.is_dir() {
            let d = guest_dir_in(vfs, dir, &name, target)?;
            upload_tree(vfs, &p, d, target)?;
            if let Some(n) = vfs.get_mut(d) {
                n.mode = mode_of(&meta);
            }
        } else {
            upload_one(vfs, &p, &meta, dir, &name, target)?;
        }
    }
    Ok(())
}

/// Writes machine node `ino` (guest path `guest`) at `rel` under the download's staging
/// tree through core's [`TreeWriter`], the one host-side writer every backend uses: it
/// refuses special files and writing through a link, and removes what it wrote on any
/// error, and [`StagedDownload`] lands the tree only once it is complete, so a failed
/// download leaves nothing on the host (as on local and docker). Links inside a directory
/// are copied as links, as stored (absolute ones too, as tar does); the top node was
/// resolved following links. set-uid and set-gid bits are dropped by the writer.
fn put_node(
    vfs: &Vfs,
    ino: usize,
    guest: &str,
    rel: &mut Vec<String>,
    writer: &mut TreeWriter,
) -> Result<(), Error> {
    let node = vfs.get(ino);
    let mtime = u64::try_from(node.mtime)
        .ok()
        .and_then(|s| std::time::UNIX_EPOCH.checked_add(Duration::from_secs(s)));
    match &node.kind {
        Kind::Dir(map, _) => {
            writer.put(
                guest,
                rel,
                TreeEntry::Directory {
                    mode: node.mode,
                    mtime,
                },
            )?;
            for (name, child) in map {
                let child_guest = format!("{}/{name}", guest.trim_end_matches('/'));
                rel.push(name.clone());
                put_node(vfs, *child, &child_guest, rel, writer)?;
                rel.pop();
            }
        }
        Kind::Symlink(t) if !rel.is_empty() => {
            writer.put(
                guest,
                rel,
                TreeEntry::Symlink {
                    target: t.as_bytes(),
                },
            )?;
        }
        Kind::File(d) => {
            writer.put(
                guest,
                rel,
                TreeEntry::File {
                    data: &mut &d[..],
                    mode: node.mode,
                    mtime,
                },
            )?;
        }
        Kind::Exe(n) => {
            let text = format!("#!/bin/sh\n# shellbox-sim built-in {n}\n");
            writer.put(
                guest,
                rel,
                TreeEntry::File {
                    data: &mut text.as_bytes(),
                    mode: node.mode,
                    mtime,
                },
            )?;
        }
        // RULES-15 rule 4: a device (reached through a link) is never read as a file
        _ => return Err(Error::transfer(guest, SPECIAL_FILE_REFUSAL)),
    }
    Ok(())
}

/// The machine's outermost shell process (what starts `sh -c` for a `run`, or the session's
/// shell): the login variables exported, `PWD` = `cwd`, then `env` exported in order.
pub(crate) fn base_shell<'e>(
    pid: u32,
    cwd: &str,
    env: impl Iterator<Item = (&'e String, &'e String)>,
) -> Shell {
    let mut sh = Shell::new(pid, cwd.to_string());
    let export = |sh: &mut Shell, k: &str, v: &str| {
        let mut var = Var::s(v);
        var.exported = true;
        sh.vars.insert(k.to_string(), var);
    };
    for (k, v) in [
        ("HOME", "/root"),
        ("USER", "root"),
        ("LOGNAME", "root"),
        ("LANG", "C.UTF-8"),
        ("SHELL", "/bin/bash"),
        ("HOSTNAME", "sandbox"),
        ("PATH", DEFAULT_PATH),
        ("SHLVL", "0"),
    ] {
        export(&mut sh, k, v);
    }
    export(&mut sh, "PWD", cwd);
    for (k, v) in env {
        export(&mut sh, k, v);
    }
    sh
}

/// Runs one command over the world; `Err(reason)` when a budget ran out.
fn execute(
    world: &mut World,
    workdir: &str,
    spec_env: &BTreeMap<String, String>,
    cmd: &Command,
    live: Option<&Rc<RefCell<LiveSink>>>,
) -> Result<CommandResult, String> {
    // what the last command on this thread left when its timeout fired is freed now,
    // before this command's clock starts and before the meter is read
    shell::set_ending(false);
    mem::reap();
    let limit = usize::try_from(cmd.output_limit_bytes).unwrap_or(usize::MAX);
    let pid = world.new_pid();
    let cwd = cmd.cwd.clone().unwrap_or_else(|| workdir.to_string());
    let mut sh = base_shell(pid, &cwd, spec_env.iter().chain(cmd.env.iter()));
    let stream = |kind: OutputKind| {
        Rc::new(RefCell::new(match live {
            Some(sink) => Stream::Live(sink.clone(), kind),
            None => Stream::Cap {
                data: mem::MBytes::default(),
                limit,
                total: 0,
            },
        }))
    };
    let stdout = stream(OutputKind::Stdout);
    let stderr = stream(OutputKind::Stderr);
    sh.set_fd(0, Some(shell::buf_fd(cmd.stdin.to_vec())));
    sh.set_fd(1, Some(stdout.clone()));
    sh.set_fd(2, Some(stderr.clone()));
    world.sync_time();
    world.memory_base = mem::held();
    let mut it = Interp::new(world);
    it.live = live.cloned();
    let mut top = None;
    if let Some(t) = cmd.timeout {
        let ns = u64::try_from(t.as_nanos()).unwrap_or(u64::MAX);
        let at = it.w.clock_ns.saturating_add(ns);
        let id = it.push_deadline(at);
        // a deadline past what `Instant` can hold is no deadline (`Duration::MAX`)
        it.wall = Instant::now()
            .checked_add(t.max(Duration::from_millis(1)))
            .map(|at| (at, id));
        top = Some(id);
    }
    let _wall = shell::set_wall(
        it.wall.map(|w| w.0),
        std::iter::once(it.w.closing.clone()).chain(it.w.cancel.clone()),
    );
    let cwd_ok =
        it.w.vfs
            .resolve("/", &cwd, true)
            .is_ok_and(|i| it.w.vfs.get(i).is_dir());
    let r = if cwd_ok {
        it.dispatch(&mut sh, cmd.argv.clone())
    } else {
        it.err(
            &sh,
            &format!("bash: line 1: cd: {cwd}: No such file or directory"),
        );
        Ok(1)
    };
    let (code, reason) = match r {
        Ok(s) | Err(Ctl::Exit(s)) | Err(Ctl::Return(s)) => (Some(s & 255), ExitReason::Exited),
        Err(Ctl::Break(_)) | Err(Ctl::Continue(_)) => (Some(0), ExitReason::Exited),
        Err(Ctl::Timeout(CANCELLED)) => return Ok(cancelled_result()),
        Err(Ctl::Timeout(id)) => {
            if Some(id) == top {
                (None, ExitReason::TimedOut)
            } else {
                (Some(124), ExitReason::Exited)
            }
        }
        Err(Ctl::Budget(reason)) => return Err(reason),
    };
    // what background jobs left is queued, not handed on: the caller delivers a live
    // command's rest once the machine's lock is released
    it.live = None;
    if let Err(Ctl::Budget(reason)) = it.flush_final() {
        return Err(reason);
    }
    drop(it);
    world.sync_time();
    let take = |s: &Rc<RefCell<Stream>>, kind: OutputKind| -> (Bytes, bool) {
        match &mut *s.borrow_mut() {
            Stream::Cap { data, total, .. } => {
                let truncated = *total > data.len() as u64;
                (Bytes::from(data.take()), truncated)
            }
            Stream::Live(sink, _) => {
                let s = sink.borrow();
                let i = LiveSink::index(kind);
                (Bytes::new(), s.total[i] > s.kept[i] as u64)
            }
            _ => (Bytes::new(), false),
        }
    };
    let (so, st) = take(&stdout, OutputKind::Stdout);
    let (se, et) = take(&stderr, OutputKind::Stderr);
    Ok(CommandResult {
        exit_code: code,
        stdout: so,
        stderr: se,
        stdout_truncated: st,
        stderr_truncated: et,
        reason,
    })
}

#[async_trait]
impl Machine for SimMachine {
    async fn run(&self, command: Command) -> Result<CommandResult, Error> {
        check_command(&command)?;
        let started = Instant::now();
        let handle = tokio::runtime::Handle::try_current();
        if handle.is_err() || is_bounded_trivially(&command) {
            // no tokio runtime: wait for the machine without blocking the executor, then
            // run inline (the wall-clock guard still bounds a command with a timeout)
            let guard = loop {
                if let Some(g) = self.try_world() {
                    break g;
                }
                if command.timeout.is_some_and(|t| started.elapsed() >= t) {
                    return Ok(timed_out_before_start());
                }
                yield_once().await;
            };
            return self.run_locked(guard, command, started.elapsed(), None, None);
        }
        let Ok(handle) = handle else {
            return Err(Error::Closed);
        };
        // the interpreter runs on a blocking thread so a busy script never blocks the
        // executor; dropping this future cancels it (it stops at its next fuel check)
        let cancel = Arc::new(AtomicBool::new(false));
        let _on_drop = CancelOnDrop(cancel.clone());
        let me = self.clone();
        match handle
            .spawn_blocking(move || me.run_blocking(command, cancel, started, None))
            .await
        {
            Ok(r) => r,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => Err(Error::Closed),
        }
    }

    /// Live: the command's output leaves as it writes it, through a bounded pipe (see
    /// the `live` module); dropping the stream cancels it. A command that finishes in
    /// time bounded by its argv (`echo`, `true`, ...), or any command outside a tokio
    /// runtime, runs to completion first and its result is streamed.
    async fn run_stream(&self, command: Command) -> Result<EventStream, Error> {
        check_command(&command)?;
        let handle = tokio::runtime::Handle::try_current();
        let Ok(handle) = handle.as_ref().map_err(|_| ()).and_then(|h| {
            if is_bounded_trivially(&command) {
                Err(())
            } else {
                Ok(h)
            }
        }) else {
            let r = self.run(command).await?;
            return Ok(result_stream(r));
        };
        if self.inner.closing.load(Ordering::Relaxed) {
            return Err(Error::Closed);
        }
        let started = Instant::now();
        let pipe = Arc::new(Pipe::default());
        let cancel = Arc::new(AtomicBool::new(false));
        let stream = LiveStream::new(pipe.clone(), cancel.clone());
        let me = self.clone();
        drop(handle.spawn_blocking(move || me.run_live(command, cancel, started, pipe)));
        Ok(Box::pin(stream))
    }

    async fn upload(&self, source: &Path, target: &str) -> Result<(), Error> {
        self.upload_sync(source, target)
    }

    /// The machine's one shell session (see [`SimMachine::open_shell_sync`]).
    async fn open_shell(&self) -> Result<Arc<dyn ShellSession>, Error> {
        Ok(self.open_shell_sync()?)
    }

    async fn download(&self, source: &str, target: &Path) -> Result<(), Error> {
        self.download_sync(source, target)
    }

    /// The bounded download, read from the machine's filesystem directly
    /// ([`SimMachine::download_file_sync`]).
    async fn download_file(
        &self,
        source: &str,
        target: &Path,
        max_bytes: u64,
    ) -> Result<(), Error> {
        self.download_file_sync(source, target, max_bytes)
    }

    /// Cancels the running command, waits up to 5 s for it to stop (REFERENCE.md section
    /// 6), then drops the machine's state.
    /// Copies the machine's files once the running command (if any) ended; commands on a
    /// simulator machine are serialized, so the copy is of a quiet filesystem.
    async fn snapshot(&self) -> Result<Snapshot, Error> {
        self.snapshot_sync()
    }

    async fn close(&self) -> Result<(), Error> {
        self.inner.closing.store(true, Ordering::Relaxed);
        self.inner.close_session();
        if tokio::runtime::Handle::try_current().is_err() {
            self.close_sync();
            return Ok(());
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(mut g) = self.try_world() {
                *g = None;
                return Ok(());
            }
            if Instant::now() >= deadline {
                // the command still runs; `closing` refuses everything from now on and it
                // stops at its next check
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// Whether a name is one of the simulator's virtual executables under `/bin` and `/usr/bin`.
pub fn is_supported_utility(name: &str) -> bool {
    programs::find(name).is_some()
}
