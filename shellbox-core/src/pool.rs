//! [`PoolFactory`]: machines created ahead of demand, handed over at once.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::{
    Capabilities, Error, ExecutionRequirements, Machine, MachineFactory, MachineSpec, Snapshot,
};

/// A factory that keeps `size` machines of one spec created ahead of demand, or forked ahead
/// of demand from one snapshot ([`PoolFactory::from_snapshot`]).
///
/// `create` with exactly the pooled spec hands over an idle machine at once (when one is
/// ready) and refills the pool in the background on the current tokio runtime; every other
/// spec passes straight through to the inner factory. [`PoolFactory::fill`] warms the
/// pool and waits. [`PoolFactory::close`] (or dropping the pool) closes the idle machines;
/// machines already handed over are the caller's. A refill that fails is logged and retried
/// on the next pooled `create`, which then creates directly — a pool never hides an error
/// from a caller that would have seen it without the pool.
///
/// A pool [from a snapshot](PoolFactory::from_snapshot) makes its machines with
/// [`create_from`](MachineFactory::create_from) of that snapshot (issue 15: "on local and
/// sim, a pool from a snapshot forks instead of creating"), and hands one over both for
/// `create` with the pooled spec and for `create_from` of the same snapshot (same
/// [`Snapshot::id`] and backend) with the pooled spec.
pub struct PoolFactory {
    shared: Arc<Shared>,
}

struct Shared {
    inner: Arc<dyn MachineFactory>,
    spec: MachineSpec,
    /// Pooled machines start from this snapshot (`create_from`) rather than `create`.
    from: Option<Snapshot>,
    size: usize,
    idle: Mutex<Vec<Box<dyn Machine>>>,
    in_flight: AtomicUsize,
    closed: AtomicBool,
}

impl Shared {
    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Box<dyn Machine>>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reserves how many creates would bring the pool to `size`.
    fn reserve(&self) -> usize {
        let idle = self.idle().len();
        let mut reserved = 0;
        loop {
            let in_flight = self.in_flight.load(Ordering::SeqCst);
            let want = self.size.saturating_sub(idle + in_flight);
            if want == 0 {
                return reserved;
            }
            if self
                .in_flight
                .compare_exchange(
                    in_flight,
                    in_flight + want,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                )
                .is_ok()
            {
                reserved += want;
                return reserved;
            }
        }
    }

    /// Creates one reserved machine and puts it in the pool (or closes it when the pool
    /// closed meanwhile).
    async fn create_one(self: &Arc<Self>) -> Result<(), Error> {
        let result = self.make().await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        let machine = result?;
        if self.closed.load(Ordering::SeqCst) {
            return machine.close().await;
        }
        self.idle().push(machine);
        Ok(())
    }

    /// Makes one machine the way this pool's machines are made.
    async fn make(&self) -> Result<Box<dyn Machine>, Error> {
        match &self.from {
            Some(snapshot) => self.inner.create_from(snapshot, self.spec.clone()).await,
            None => self.inner.create(self.spec.clone()).await,
        }
    }

    /// Hands over an idle machine and refills in the background, or makes one directly when
    /// none is ready.
    async fn hand_over(self: &Arc<Self>) -> Result<Box<dyn Machine>, Error> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed);
        }
        let ready = self.idle().pop();
        self.refill_in_background();
        match ready {
            Some(machine) => Ok(machine),
            None => self.make().await,
        }
    }

    fn refill_in_background(self: &Arc<Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        for _ in 0..self.reserve() {
            let shared = self.clone();
            runtime.spawn(async move {
                if let Err(e) = shared.create_one().await {
                    tracing::warn!(error = %e, "pool refill failed");
                }
            });
        }
    }
}

impl PoolFactory {
    /// Pools `size` machines of `spec` from `inner`. Nothing is created until
    /// [`PoolFactory::fill`] or the first pooled `create`.
    pub fn new(inner: Arc<dyn MachineFactory>, spec: MachineSpec, size: usize) -> Self {
        PoolFactory::with_source(inner, spec, None, size)
    }

    /// Pools `size` machines made from `snapshot` with `spec`
    /// ([`MachineFactory::create_from`] of `inner`: forks of the snapshotted machine, each
    /// with its own copy-on-write view where the backend has one). The pool holds a clone of
    /// the snapshot until it is dropped, so the snapshot stays usable for refills even when
    /// the caller drops its handle; [`Snapshot::delete`] by the caller makes later refills
    /// fail (the pool then reports the inner factory's error on a pooled `create` with no
    /// idle machine). Nothing is created until [`PoolFactory::fill`] or the first pooled
    /// `create`.
    pub fn from_snapshot(
        inner: Arc<dyn MachineFactory>,
        snapshot: Snapshot,
        spec: MachineSpec,
        size: usize,
    ) -> Self {
        PoolFactory::with_source(inner, spec, Some(snapshot), size)
    }

    fn with_source(
        inner: Arc<dyn MachineFactory>,
        spec: MachineSpec,
        from: Option<Snapshot>,
        size: usize,
    ) -> Self {
        PoolFactory {
            shared: Arc::new(Shared {
                inner,
                spec,
                from,
                size,
                idle: Mutex::new(Vec::new()),
                in_flight: AtomicUsize::new(0),
                closed: AtomicBool::new(false),
            }),
        }
    }

    /// Whether `snapshot` is the one this pool forks from (same backend and id).
    fn pools_snapshot(&self, snapshot: &Snapshot) -> bool {
        self.shared
            .from
            .as_ref()
            .is_some_and(|s| s.backend() == snapshot.backend() && s.id() == snapshot.id())
    }

    /// Creates machines until `size` are idle, and waits for them.
    ///
    /// # Errors
    /// [`Error::Closed`] after [`PoolFactory::close`]; the first error of the inner factory
    /// (the machines that were created stay in the pool).
    pub async fn fill(&self) -> Result<(), Error> {
        if self.shared.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed);
        }
        let creates = (0..self.shared.reserve()).map(|_| self.shared.create_one());
        let results = futures::future::join_all(creates).await;
        results.into_iter().collect()
    }

    /// How many machines are ready to be handed over now.
    pub fn idle_machines(&self) -> usize {
        self.shared.idle().len()
    }

    /// Closes every idle machine; later pooled creates fail with [`Error::Closed`] (other
    /// specs still pass through). Idempotent.
    ///
    /// # Errors
    /// The first error of closing an idle machine (every one is closed anyway).
    pub async fn close(&self) -> Result<(), Error> {
        self.shared.closed.store(true, Ordering::SeqCst);
        let idle: Vec<_> = std::mem::take(&mut *self.shared.idle());
        let results = futures::future::join_all(idle.iter().map(|m| m.close())).await;
        results.into_iter().collect()
    }
}

impl Drop for PoolFactory {
    /// Marks the pool closed and drops the idle machines (each backend's drop releases what
    /// it holds); refills still running close what they create.
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::SeqCst);
        self.shared.idle().clear();
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl MachineFactory for PoolFactory {
    fn backend(&self) -> &'static str {
        self.shared.inner.backend()
    }

    /// Hands over an idle machine for the pooled spec (then refills in the background), or
    /// makes one directly when none is ready; another spec is created by the inner factory.
    /// A pool [from a snapshot](PoolFactory::from_snapshot) hands over (or makes) a machine
    /// started from its snapshot.
    ///
    /// # Errors
    /// [`Error::Closed`] for the pooled spec after [`PoolFactory::close`]; whatever the inner
    /// factory returns.
    async fn create(&self, spec: MachineSpec) -> Result<Box<dyn Machine>, Error> {
        if spec != self.shared.spec {
            return self.shared.inner.create(spec).await;
        }
        self.shared.hand_over().await
    }

    fn capabilities(&self) -> Capabilities {
        self.shared.inner.capabilities()
    }

    async fn check_environment(
        &self,
        requirements: &ExecutionRequirements,
        spec: &MachineSpec,
    ) -> Result<(), Error> {
        self.shared
            .inner
            .check_environment(requirements, spec)
            .await
    }

    /// Hands over a pooled machine when this pool forks from `snapshot` and `spec` is the
    /// pooled spec (as [`create`](MachineFactory::create) does); otherwise passes through
    /// to the inner factory.
    ///
    /// # Errors
    /// As [`create`](MachineFactory::create) for a pooled request; whatever the inner
    /// factory returns otherwise.
    async fn create_from(
        &self,
        snapshot: &Snapshot,
        spec: MachineSpec,
    ) -> Result<Box<dyn Machine>, Error> {
        if self.pools_snapshot(snapshot) && spec == self.shared.spec {
            return self.shared.hand_over().await;
        }
        self.shared.inner.create_from(snapshot, spec).await
    }

    /// Not pooled: passes through to the inner factory.
    async fn fork(
        &self,
        machine: &dyn Machine,
        spec: MachineSpec,
    ) -> Result<Box<dyn Machine>, Error> {
        self.shared.inner.fork(machine, spec).await
    }
}
