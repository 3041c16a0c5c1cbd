//! [`LimitFactory`]: at most N live machines, and optionally at most M concurrent commands
//! per machine — a wrapper around any factory, in the manner of `object_store`'s
//! `LimitStore`.

use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::StreamExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::{
    Capabilities, Command, CommandResult, Error, EventStream, ExecutionRequirements, Machine,
    MachineFactory, MachineSpec, ShellSession, Snapshot,
};

/// A factory that lets at most `max_machines` machines live at once.
///
/// A machine counts from a successful `create` until it is closed or dropped. When the
/// limit is reached, `create` waits for a machine to go (the default) or, with
/// [`LimitFactory::fail_fast`], returns [`Error::LimitReached`] at once. With
/// [`LimitFactory::max_commands_per_machine`], each machine also runs at most that many
/// commands at once (`run`/`run_stream` wait for a slot; a stream holds its slot until it is
/// dropped or ends).
pub struct LimitFactory<F> {
    inner: F,
    max_machines: usize,
    machines: Arc<Semaphore>,
    fail_fast: bool,
    max_commands: Option<usize>,
}

impl<F: MachineFactory> LimitFactory<F> {
    /// Wraps `inner`, allowing `max_machines` live machines (0 refuses every create with
    /// [`Error::InvalidInput`]).
    pub fn new(inner: F, max_machines: usize) -> Self {
        LimitFactory {
            inner,
            max_machines,
            machines: Arc::new(Semaphore::new(max_machines.min(Semaphore::MAX_PERMITS))),
            fail_fast: false,
            max_commands: None,
        }
    }

    /// `create` returns [`Error::LimitReached`] instead of waiting when the limit is reached.
    pub fn fail_fast(mut self) -> Self {
        self.fail_fast = true;
        self
    }

    /// Each machine runs at most `n` commands at once (0 refuses every command with
    /// [`Error::InvalidInput`]).
    pub fn max_commands_per_machine(mut self, n: usize) -> Self {
        self.max_commands = Some(n);
        self
    }

    /// How many machines are live now.
    pub fn live_machines(&self) -> usize {
        self.max_machines
            .min(Semaphore::MAX_PERMITS)
            .saturating_sub(self.machines.available_permits())
    }

    /// The factory inside.
    pub fn inner(&self) -> &F {
        &self.inner
    }

    /// Takes a machine slot: at once, after waiting for one, or (fail fast) not at all.
    async fn acquire_machine_slot(&self) -> Result<OwnedSemaphorePermit, Error> {
        if self.max_machines == 0 {
            return Err(Error::invalid(
                "LimitFactory with max_machines 0 creates nothing",
            ));
        }
        if self.fail_fast {
            self.machines.clone().try_acquire_owned().map_err(|_| {
                Error::LimitReached(format!(
                    "{} machines are live (LimitFactory max_machines)",
                    self.max_machines
                ))
            })
        } else {
            self.machines
                .clone()
                .acquire_owned()
                .await
                .map_err(|_| Error::Closed)
        }
    }

    /// Wraps a machine the inner factory made so it holds `slot` until it goes.
    fn limited(&self, machine: Box<dyn Machine>, slot: OwnedSemaphorePermit) -> Box<dyn Machine> {
        Box::new(LimitedMachine {
            inner: machine,
            slot: Mutex::new(Some(slot)),
            commands: self.max_commands.map(|n| (n, Arc::new(Semaphore::new(n)))),
        })
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl<F: MachineFactory> MachineFactory for LimitFactory<F> {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    /// Creates a machine through the inner factory once a slot is free.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when the limit is 0; [`Error::LimitReached`] with
    /// [`LimitFactory::fail_fast`] when `max_machines` machines are live; whatever the
    /// inner factory returns (the slot is given back).
    async fn create(&self, spec: MachineSpec) -> Result<Box<dyn Machine>, Error> {
        let slot = self.acquire_machine_slot().await?;
        let machine = self.inner.create(spec).await?;
        Ok(self.limited(machine, slot))
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn check_environment(
        &self,
        requirements: &ExecutionRequirements,
        spec: &MachineSpec,
    ) -> Result<(), Error> {
        self.inner.check_environment(requirements, spec).await
    }

    /// Starts a machine from `snapshot` through the inner factory once a slot is free; it
    /// counts against the limit as a created one does.
    ///
    /// # Errors
    /// As [`LimitFactory::create`], and whatever the inner factory's `create_from` returns.
    async fn create_from(
        &self,
        snapshot: &Snapshot,
        spec: MachineSpec,
    ) -> Result<Box<dyn Machine>, Error> {
        let slot = self.acquire_machine_slot().await?;
        let machine = self.inner.create_from(snapshot, spec).await?;
        Ok(self.limited(machine, slot))
    }

    /// Forks `machine` through the inner factory once a slot is free.
    ///
    /// # Errors
    /// As [`LimitFactory::create_from`].
    async fn fork(
        &self,
        machine: &dyn Machine,
        spec: MachineSpec,
    ) -> Result<Box<dyn Machine>, Error> {
        let slot = self.acquire_machine_slot().await?;
        let forked = self.inner.fork(machine, spec).await?;
        Ok(self.limited(forked, slot))
    }
}

/// A machine of a [`LimitFactory`]: its slot is given back when it is closed or dropped.
struct LimitedMachine {
    inner: Box<dyn Machine>,
    slot: Mutex<Option<OwnedSemaphorePermit>>,
    commands: Option<(usize, Arc<Semaphore>)>,
}

impl LimitedMachine {
    async fn command_slot(&self) -> Result<Option<OwnedSemaphorePermit>, Error> {
        match &self.commands {
            None => Ok(None),
            Some((0, _)) => Err(Error::invalid(
                "LimitFactory with max_commands_per_machine 0 runs nothing",
            )),
            Some((_, sem)) => Ok(Some(
                sem.clone()
                    .acquire_owned()
                    .await
                    .map_err(|_| Error::Closed)?,
            )),
        }
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl Machine for LimitedMachine {
    async fn run(&self, command: Command) -> Result<CommandResult, Error> {
        let _slot = self.command_slot().await?;
        self.inner.run(command).await
    }

    async fn run_stream(&self, command: Command) -> Result<EventStream, Error> {
        let slot = self.command_slot().await?;
        let stream = self.inner.run_stream(command).await?;
        Ok(Box::pin(stream.map(move |event| {
            let _held = &slot;
            event
        })))
    }

    async fn upload(&self, source: &Path, target: &str) -> Result<(), Error> {
        self.inner.upload(source, target).await
    }

    async fn download(&self, source: &str, target: &Path) -> Result<(), Error> {
        self.inner.download(source, target).await
    }

    async fn download_file(
        &self,
        source: &str,
        target: &Path,
        max_bytes: u64,
    ) -> Result<(), Error> {
        self.inner.download_file(source, target, max_bytes).await
    }

    async fn open_shell(&self) -> Result<Arc<dyn ShellSession>, Error> {
        self.inner.open_shell().await
    }

    async fn snapshot(&self) -> Result<Snapshot, Error> {
        self.inner.snapshot().await
    }

    async fn close(&self) -> Result<(), Error> {
        let result = self.inner.close().await;
        self.slot.lock().unwrap_or_else(|p| p.into_inner()).take();
        result
    }
}
