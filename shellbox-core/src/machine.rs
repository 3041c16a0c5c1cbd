//! The async traits every backend implements.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;

use crate::capabilities::{check_execution_requirements, Capabilities, ExecutionRequirements};
use crate::capture::{collect, EventStream};
use crate::session::ShellSession;
use crate::{Command, CommandResult, Error, ImageSource, MachineSpec, Snapshot};

/// Creates machines of one backend.
///
/// Object-safe: hold any backend as `Box<dyn MachineFactory>` or `Arc<dyn MachineFactory>`.
#[async_trait]
pub trait MachineFactory: Send + Sync {
    /// The backend's name: `"local"`, `"docker"`, `"sim"`.
    fn backend(&self) -> &'static str;

    /// Creates a fresh machine with an empty private writable filesystem and its workdir.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a spec that fails [`MachineSpec::validate`],
    /// [`Error::Unsupported`] for what this backend cannot provide (it names the field),
    /// and the backend's own failures ([`Error::Backend`], [`Error::Io`],
    /// [`Error::SandboxUnavailable`]). A failed create leaves nothing behind.
    async fn create(&self, spec: MachineSpec) -> Result<Box<dyn Machine>, Error>;

    /// What this backend can do, declared once (see [`Capabilities`]).
    fn capabilities(&self) -> Capabilities;

    /// Answers "can this backend run a task with these requirements on this spec?" without
    /// acquiring anything (no machine, container, image pull or directory), in the order of
    /// the reference library's `check_environment` (REFERENCE.md 1.7): the backend's spec
    /// checks ([`Capabilities::check_spec`]), then
    /// [`check_execution_requirements`](crate::check_execution_requirements) with the image
    /// reference the spec names (a [`DockerImage`](crate::DockerImage) or
    /// [`RegistryImage`](crate::RegistryImage) source; none otherwise).
    ///
    /// A backend overrides it so that its verdict is `create`'s: whatever `create` would
    /// refuse before it acquires anything (a workdir or mount the backend cannot place, a
    /// limit it cannot give on this host, a missing image or file, a tool it does not
    /// have) is refused here with the same [`Error`] kind, and what this accepts `create`
    /// accepts, as far as it can be judged without acquiring anything (the conformance case
    /// `check_environment_agrees_with_create`). What only acquiring can tell (a registry
    /// pull, a build, PyPI packages, capacity) is not promised.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a spec failing [`MachineSpec::validate`];
    /// [`Error::Unsupported`] saying which rule failed; and the other kinds `create` would
    /// give for the same spec (e.g. [`Error::NotFound`] for a missing Dockerfile).
    async fn check_environment(
        &self,
        requirements: &ExecutionRequirements,
        spec: &MachineSpec,
    ) -> Result<(), Error> {
        let capabilities = self.capabilities();
        capabilities.check_spec(self.backend(), spec)?;
        let image = match &spec.source {
            ImageSource::Docker(d) => Some(d.reference.as_str()),
            ImageSource::Registry(r) => Some(r.reference.as_str()),
            _ => None,
        };
        check_execution_requirements(&capabilities, requirements, spec, image)
    }

    /// Creates a machine whose filesystem starts as `snapshot`'s (files, modes, owners,
    /// symlinks, mtimes); the spec's env, workdir, network, user and limits apply as in
    /// [`MachineFactory::create`]. The spec's image source is checked as for `create`;
    /// where the snapshot holds the whole filesystem (a committed image, a simulator's
    /// tree) it replaces what the source would give, and where it holds only the machine's
    /// writable files (local) the source still gives the read-only system directories.
    /// Writes of the new machine never show in the snapshot, its source machine or its
    /// siblings.
    ///
    /// The default returns [`Error::Unsupported`]; backends with
    /// [`Capabilities::snapshots`] override it.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when this backend takes no snapshots or `snapshot` was taken
    /// by another backend ([`Snapshot::expect_backend`]); [`Error::InvalidInput`] for a spec
    /// failing [`MachineSpec::validate`]; [`Error::Closed`] when
    /// the snapshot was deleted; and the failures of [`MachineFactory::create`].
    async fn create_from(
        &self,
        snapshot: &Snapshot,
        spec: MachineSpec,
    ) -> Result<Box<dyn Machine>, Error> {
        let _ = spec;
        Err(Error::unsupported(format!(
            "the {} backend cannot start a machine from a snapshot (taken on {})",
            self.backend(),
            snapshot.backend()
        )))
    }

    /// Forks `machine`: [`Machine::snapshot`] then [`MachineFactory::create_from`] with
    /// `spec`. The snapshot is released when the fork no longer needs it.
    ///
    /// # Errors
    /// Those of [`Machine::snapshot`] and [`MachineFactory::create_from`].
    async fn fork(
        &self,
        machine: &dyn Machine,
        spec: MachineSpec,
    ) -> Result<Box<dyn Machine>, Error> {
        let snapshot = machine.snapshot().await?;
        self.create_from(&snapshot, spec).await
    }
}

/// One machine: a place to run commands and move files in and out.
///
/// Every method takes `&self`, so one machine can run several commands at once. Files
/// persist between commands until [`Machine::close`]; shell state (cwd, exported
/// variables) never leaks from one `run` to the next. Dropping an unclosed machine still
/// releases what it holds (best effort, logged).
#[async_trait]
pub trait Machine: Send + Sync {
    /// Runs a command to completion and returns its bounded output and status.
    ///
    /// The default collects [`Machine::run_stream`] under the command's output limit, so the
    /// two give the same bytes and status.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] (see [`Command::validate`]), [`Error::Closed`],
    /// [`Error::Unsupported`] (e.g. a user the backend cannot switch to), and the backend's
    /// own failures. A command that fails, is killed or times out is a `CommandResult`,
    /// never an error.
    async fn run(&self, command: Command) -> Result<CommandResult, Error> {
        let limit = command.output_limit_bytes;
        let stream = self.run_stream(command).await?;
        collect(stream, limit).await
    }

    /// Starts a command and returns its output as it is written: stdout and stderr chunks
    /// (each stream within the output limit) in arrival order, then exactly one terminal
    /// item, [`Event::Exit`](crate::Event::Exit) or an error. Dropping the stream kills the
    /// command and every process it started.
    ///
    /// # Errors
    /// As [`Machine::run`], for problems found before the command starts.
    async fn run_stream(&self, command: Command) -> Result<EventStream, Error>;

    /// Copies a host file or directory into the machine at `target` (absolute, normalised).
    ///
    /// A file becomes the file `target` (parents created). A directory is merged into
    /// `target`: its contents land inside it (no extra level named after the source),
    /// parents are created, `target` takes the source directory's permission bits, and
    /// nested modes are kept. Symlinks inside the source are copied as symlinks.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a bad `target`, [`Error::NotFound`] when `source` does not
    /// exist, [`Error::Closed`], [`Error::Unsupported`] for a read-only target,
    /// [`Error::Transfer`] when the target leads out of the machine through a symlink or
    /// the copy fails.
    async fn upload(&self, source: &Path, target: &str) -> Result<(), Error>;

    /// Copies a machine file or directory at `source` (absolute, normalised) to the host.
    ///
    /// A file is written to `target` (host parents created). A directory's contents are
    /// copied into `target` (no extra level), modes kept; symlinks inside it are copied as
    /// symlinks, never followed.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a bad `source`, [`Error::NotFound`] when it does not exist,
    /// [`Error::Closed`], [`Error::Transfer`] when `source` leads out of the machine through
    /// a symlink or the copy fails.
    async fn download(&self, source: &str, target: &Path) -> Result<(), Error>;

    /// Copies the regular file `source` to the host file `target` under a byte limit, with
    /// memory bounded whatever the file's size, staged beside `target` and renamed over it
    /// (REFERENCE.md 3.2). The default streams it through [`Machine::run_stream`]; see
    /// [`download_file`](crate::download_file) for the rules.
    ///
    /// # Errors
    /// [`Error::NotFound`], [`Error::Unsupported`] (not a regular file),
    /// [`Error::DownloadLimitExceeded`] (more than `max_bytes`), and the others of
    /// [`download_file`](crate::download_file); on every error `target` is as it was.
    async fn download_file(
        &self,
        source: &str,
        target: &Path,
        max_bytes: u64,
    ) -> Result<(), Error> {
        crate::download_file::download_file(self, source, target, max_bytes).await
    }

    /// The machine's one persistent shell (REFERENCE.md 2): the first call starts it, later
    /// calls return the same session. Closing the machine closes it.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the backend offers no sessions (the default);
    /// [`Error::Closed`]; the backend's failure to start the shell.
    async fn open_shell(&self) -> Result<Arc<dyn ShellSession>, Error> {
        Err(Error::unsupported(
            "this backend offers no persistent shell sessions",
        ))
    }

    /// Releases everything the machine holds (root directory, container, processes).
    /// Idempotent: a second call does nothing. Afterwards every other method returns
    /// [`Error::Closed`].
    ///
    /// # Errors
    /// The backend's failure to release something; the machine is still marked closed.
    async fn close(&self) -> Result<(), Error>;

    /// Freezes the machine's files (contents, modes, owners, symlinks, mtimes) as they are
    /// now, pausing its writers no longer than the backend's copy-on-write step needs;
    /// processes, shell sessions and shell state are not part of it. Later writes of this
    /// machine never show in the snapshot. Start machines from it with
    /// [`MachineFactory::create_from`].
    ///
    /// The default returns [`Error::Unsupported`]; backends with
    /// [`Capabilities::snapshots`] override it.
    ///
    /// # Errors
    /// [`Error::Closed`] after [`Machine::close`]; [`Error::Unsupported`] when the backend
    /// takes no snapshots; the backend's own failures.
    async fn snapshot(&self) -> Result<Snapshot, Error> {
        Err(Error::unsupported("this backend takes no snapshots"))
    }
}

/// Implements [`Machine`] for a smart pointer by forwarding every method to the machine
/// inside. `clippy::missing_trait_methods` is denied on the impl, so a method added to the
/// trait later cannot be left to its default here (which would silently skip the inner
/// backend's own implementation).
macro_rules! forward_machine {
    ($($wrapper:ident),*) => {$(
        /// Forwards to the machine inside, so a `Box<dyn Machine>` (what
        /// [`MachineFactory::create`] returns) or an `Arc` of one can be passed wherever a
        /// `&dyn Machine` or `impl Machine` is taken.
        #[deny(clippy::missing_trait_methods)]
        #[async_trait]
        impl<M: Machine + ?Sized> Machine for $wrapper<M> {
            async fn run(&self, command: Command) -> Result<CommandResult, Error> {
                (**self).run(command).await
            }
            async fn run_stream(&self, command: Command) -> Result<EventStream, Error> {
                (**self).run_stream(command).await
            }
            async fn upload(&self, source: &Path, target: &str) -> Result<(), Error> {
                (**self).upload(source, target).await
            }
            async fn download(&self, source: &str, target: &Path) -> Result<(), Error> {
                (**self).download(source, target).await
            }
            async fn download_file(
                &self,
                source: &str,
                target: &Path,
                max_bytes: u64,
            ) -> Result<(), Error> {
                (**self).download_file(source, target, max_bytes).await
            }
            async fn open_shell(&self) -> Result<Arc<dyn ShellSession>, Error> {
                (**self).open_shell().await
            }
            async fn close(&self) -> Result<(), Error> {
                (**self).close().await
            }
            async fn snapshot(&self) -> Result<Snapshot, Error> {
                (**self).snapshot().await
            }
        }
    )*};
}

/// Implements [`MachineFactory`] for a smart pointer by forwarding every method, with
/// `clippy::missing_trait_methods` denied for the same reason as [`forward_machine`].
macro_rules! forward_factory {
    ($($wrapper:ident),*) => {$(
        /// Forwards to the factory inside, so a `Box<dyn MachineFactory>` or an
        /// `Arc<dyn MachineFactory>` (what `shellbox::factory` returns) is a factory too,
        /// e.g. inside [`LimitFactory`](crate::LimitFactory).
        #[deny(clippy::missing_trait_methods)]
        #[async_trait]
        impl<F: MachineFactory + ?Sized> MachineFactory for $wrapper<F> {
            fn backend(&self) -> &'static str {
                (**self).backend()
            }
            async fn create(&self, spec: MachineSpec) -> Result<Box<dyn Machine>, Error> {
                (**self).create(spec).await
            }
            fn capabilities(&self) -> Capabilities {
                (**self).capabilities()
            }
            async fn check_environment(
                &self,
                requirements: &ExecutionRequirements,
                spec: &MachineSpec,
            ) -> Result<(), Error> {
                (**self).check_environment(requirements, spec).await
            }
            async fn create_from(
                &self,
                snapshot: &Snapshot,
                spec: MachineSpec,
            ) -> Result<Box<dyn Machine>, Error> {
                (**self).create_from(snapshot, spec).await
            }
            async fn fork(
                &self,
                machine: &dyn Machine,
                spec: MachineSpec,
            ) -> Result<Box<dyn Machine>, Error> {
                (**self).fork(machine, spec).await
            }
        }
    )*};
}

forward_machine!(Box, Arc);
forward_factory!(Box, Arc);
