//! One container: commands as execs, the PGID protocol, timeouts, close.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bollard::container::LogOutput;
use bollard::errors::Error as BollardError;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use bollard::query_parameters::RemoveContainerOptions;
use bollard::Docker;
use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use shellbox_core::capture::{timed_out_status, EventStream};
use shellbox_core::{
    async_trait, Command, Error, Event, ExitReason, ExitStatus, Machine, MachineSpec, OutputLimiter,
};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::config::{
    end_marker, exec_config, exec_setup_failure, parse_header, root_exec, validate_exec_size,
    EndScanner, Header, KILL_GROUP,
};
use crate::image::is_not_found;

/// How long a timed-out command's group may take to be killed and confirmed gone.
const KILL_BOUND: Duration = Duration::from_secs(10);
/// How long to wait for the PGID header after a deadline when it has not come yet.
const HEADER_GRACE: Duration = Duration::from_secs(2);
/// How often a running command's exec is inspected, to notice that it ended while
/// something else still holds its output open.
const EXEC_POLL: Duration = Duration::from_secs(1);
/// How long to keep reading after the exec ended without its output closing.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(300);
/// How long to keep reading output after a successful kill (in-flight partial output).
const DRAIN_AFTER_KILL: Duration = Duration::from_secs(2);

/// A machine backed by one Docker container. Made by
/// [`DockerMachineFactory`](crate::DockerMachineFactory); implements
/// [`Machine`](shellbox_core::Machine).
///
/// Dropping it without [`Machine::close`] still removes the container (a failure is
/// logged): the drop blocks its thread (up to 30 s) while a thread of its own, with its own
/// runtime and connection to the engine, removes the container — so it works on any
/// runtime flavor, outside any runtime, and while the caller's runtime shuts down (a task
/// holding the machine dropped with its runtime, a test panicking). Prefer `close` in async
/// code: it does not block.
///
/// Commands: see the crate docs for both paths ([`DockerMachine::uses_supervisor`] says
/// which this machine takes). What cannot be set up is an error, never a result: an argv or
/// environment larger than `execve(2)` takes is [`Error::InvalidInput`] before anything runs
/// ([`shellbox_core::validate::validate_exec_size`], with 64 KiB left for the exec wrapper and
/// the image's environment; the kernel's `E2BIG` past that is the same error), and a user
/// (or group) the image does not have is [`Error::Unsupported`] "no such user: NAME" — a
/// numeric UID too, as on local and sim. A missing cwd is an ordinary failed result (the
/// fast path: exit 2 and `sh`'s message; the exec path: 126 and the engine's). A timed-out
/// command is killed, everything it started, and confirmed gone (within 10 s); if that
/// cannot be done the machine is closed (its container removed) and the run returns
/// [`Error::Terminated`].
pub struct DockerMachine {
    pub(crate) inner: Arc<Inner>,
    /// The machine's one shell session, made by the first `open_shell`.
    pub(crate) session: std::sync::Mutex<Option<Session>>,
}

/// A machine's shell session: over its supervisor's terminal relay, or (without a
/// supervisor) one Engine exec on a terminal.
#[derive(Clone)]
pub(crate) enum Session {
    Relay(Arc<shellbox_supervisor::session::PtySession>),
    Exec(Arc<crate::session::DockerSession>),
}

impl Session {
    fn is_closed(&self) -> bool {
        match self {
            Session::Relay(s) => s.is_closed(),
            Session::Exec(s) => s.is_closed(),
        }
    }

    fn shared(&self) -> Arc<dyn shellbox_core::ShellSession> {
        match self {
            Session::Relay(s) => s.clone(),
            Session::Exec(s) => s.clone(),
        }
    }
}

impl std::fmt::Debug for DockerMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerMachine")
            .field("container", &self.inner.name)
            .field("closed", &self.inner.closed.load(Ordering::SeqCst))
            .finish()
    }
}

pub(crate) struct Inner {
    pub docker: Docker,
    /// The engine address the factory connected to, for [`remove_on_drop`].
    pub endpoint: Option<Arc<str>>,
    pub id: String,
    pub name: String,
    pub spec: MachineSpec,
    pub setsid: String,
    /// The machine's supervisor, when its commands take the fast path.
    pub supervisor: Option<crate::supervised::Supervised>,
    /// Becomes true when the machine closes (before its container is removed), so a
    /// supervised command killed by the removal ends as [`Error::Closed`].
    pub shutdown: tokio::sync::watch::Sender<bool>,
    pub closed: AtomicBool,
    pub removed: AtomicBool,
    pub close_lock: tokio::sync::Mutex<()>,
    /// The session over the supervisor, if one was opened: closed with the machine.
    pub relay_session: std::sync::Mutex<Option<Arc<shellbox_supervisor::session::PtySession>>>,
    /// Whether a session without the supervisor tries the relay first
    /// ([`DockerMachineFactory::exec_session_relay`](crate::DockerMachineFactory::exec_session_relay)).
    pub session_relay: bool,
    /// Who owns the machine (its container's owner labels), for the labels of its
    /// snapshots.
    pub owner: Arc<crate::config::Owner>,
    /// The environment of the image the machine's filesystem first came from, when it was
    /// started from a snapshot (whose image's environment also holds what the snapshotted
    /// machine's spec set); `None`: the container's own image's.
    pub base_env: Option<Arc<[String]>>,
    /// The machine's share of the snapshot image it was started from, given up when its
    /// container is removed (the last share removes the image).
    pub image_lease: std::sync::Mutex<Option<Arc<crate::snapshot::ImageLease>>>,
    /// Held while a snapshot is taken: one commit (and pause) of the container at a time.
    pub snapshot_lock: tokio::sync::Mutex<()>,
}

impl DockerMachine {
    /// Keeps `pty` as the machine's relay session (what close and the session's reset
    /// reach) and returns it as the session.
    fn relay_session_is(&self, pty: Arc<shellbox_supervisor::session::PtySession>) -> Session {
        *self
            .inner
            .relay_session
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(pty.clone());
        Session::Relay(pty)
    }

    /// The relay for an exec-path session, unless the factory turned it off or it cannot
    /// run here (`Err` says why).
    async fn relay_for_session(&self) -> Result<crate::relay::DockerRelay, String> {
        if !self.inner.session_relay {
            return Err("the factory's exec_session_relay is off".into());
        }
        crate::relay::DockerRelay::install(&self.inner).await
    }

    /// The container's ID.
    pub fn container_id(&self) -> &str {
        &self.inner.id
    }

    /// The container's name (`shellbox-<32 hex>`).
    pub fn container_name(&self) -> &str {
        &self.inner.name
    }

    /// The Engine API client this machine uses.
    pub fn docker(&self) -> &Docker {
        &self.inner.docker
    }

    /// The spec the machine was created from.
    pub fn spec(&self) -> &MachineSpec {
        &self.inner.spec
    }

    /// Whether the machine's commands run through its supervisor (the fast path) rather
    /// than as one Engine exec each (see [`CommandPath`](crate::CommandPath)).
    pub fn uses_supervisor(&self) -> bool {
        self.inner.supervisor.is_some()
    }

    /// A command as one Engine exec (the fallback path; see the crate docs).
    async fn run_exec(&self, command: Command) -> Result<EventStream, Error> {
        if let Some(user) = command.user.as_deref() {
            self.inner.refuse_unknown_numeric_user(user).await?;
        }
        // A timeout too far away for a clock instant (e.g. `Duration::MAX`) is no deadline.
        let deadline = command.timeout.and_then(|t| Instant::now().checked_add(t));
        let inner = &self.inner;
        inner.check_open()?;
        let command_id = crate::factory::unique_hex();
        let config = exec_config(&inner.spec, &command, &inner.setsid, &command_id);
        let exec = inner.docker.create_exec(&inner.id, config).await;
        let exec = match exec {
            Ok(exec) => exec,
            Err(e) => return Err(inner.start_failure("create exec", e).await),
        };
        let started = match inner
            .docker
            .start_exec(&exec.id, None::<StartExecOptions>)
            .await
        {
            Ok(started) => started,
            // Podman refuses an unknown user at start (Docker reports it in the output).
            Err(BollardError::DockerResponseServerError { message, .. })
                if exec_setup_failure(&message, command.user.as_deref()).is_some() =>
            {
                return Err(exec_setup_failure(&message, command.user.as_deref())
                    .unwrap_or_else(|| Error::backend("start exec", message)));
            }
            Err(e) => return Err(inner.start_failure("start exec", e).await),
        };
        let StartExecResults::Attached { output, mut input } = started else {
            return Err(Error::backend("start exec", "the engine did not attach"));
        };
        if command.stdin.is_empty() {
            drop(input);
        } else {
            let stdin = command.stdin.clone();
            tokio::spawn(async move {
                // A command that exits without reading its stdin is not an error.
                let _ = input.write_all(&stdin).await;
                let _ = input.shutdown().await;
            });
        }
        let (tx, rx) = mpsc::channel(16);
        let driver = Driver {
            inner: self.inner.clone(),
            exec_id: exec.id,
            stdout_end: EndScanner::new(end_marker(&command_id)),
            stderr_end: EndScanner::new(end_marker(&command_id)),
            command_id,
            stdout: OutputLimiter::new(command.output_limit_bytes),
            stderr: OutputLimiter::new(command.output_limit_bytes),
            header: Some(BytesMut::new()),
            pgid: None,
            audit: None,
            pending: VecDeque::new(),
            held: Vec::new(),
            user: command.user.clone(),
            tx,
        };
        tokio::spawn(driver.run(output, deadline));
        Ok(Box::pin(futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        })))
    }

    /// Commands through the supervisor: the account resolved in the image, the request,
    /// the driver. A command whose argv and environment are over the supervisor's 1 MiB
    /// ([`shellbox_supervisor::proto::MAX_ARGV_ENV_BYTES`]) but within what `execve(2)`
    /// takes runs as an Engine exec instead (where the image has `setsid`).
    async fn run_supervised(
        &self,
        sup: &crate::supervised::Supervised,
        command: Command,
    ) -> Result<EventStream, Error> {
        let label = command.argv.first().cloned().unwrap_or_default();
        let account = match command.user.as_deref() {
            Some(user) => Some(sup.lookup(user).await?),
            None if sup.default_user.is_empty() => sup.default_account.clone(),
            None => Some(sup.lookup(&sup.default_user).await?),
        };
        let start =
            crate::supervised::start_request(sup, &self.inner.spec, &command, account.as_ref());
        if start.argv_env_bytes() > shellbox_supervisor::proto::MAX_ARGV_ENV_BYTES
            && !self.inner.setsid.is_empty()
        {
            return self.run_exec(command).await;
        }
        self.inner.check_open()?;
        let running = match sup.client.start(&start, &command.stdin) {
            Ok(running) => running,
            Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {
                return Err(Error::invalid(format!("{label}: {e}")))
            }
            Err(_) => return Err(self.inner.supervisor_gone().await),
        };
        let inner = self.inner.clone();
        Ok(crate::supervised::drive(
            running,
            command.timeout,
            label,
            self.inner.shutdown.subscribe(),
            move |gone| async move {
                match gone {
                    crate::supervised::Gone::Closed => Error::Closed,
                    crate::supervised::Gone::Supervisor => inner.supervisor_gone().await,
                    crate::supervised::Gone::Unkillable => {
                        if inner.closed.load(Ordering::SeqCst) {
                            return Error::Closed;
                        }
                        let why = format!(
                            "its kill was not confirmed within {:?}",
                            crate::supervised::KILL_BOUND
                        );
                        inner.dispose(&why).await;
                        Error::Terminated(format!(
                            "the command timed out and could not be stopped ({why}); the \
                             container {} was removed",
                            inner.name
                        ))
                    }
                }
            },
        ))
    }
}

impl Drop for DockerMachine {
    fn drop(&mut self) {
        if self.inner.removed.load(Ordering::SeqCst) {
            return;
        }
        self.inner.closed.store(true, Ordering::SeqCst);
        let lease = self
            .inner
            .image_lease
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        remove_on_drop(
            &self.inner.docker,
            self.inner.endpoint.as_deref(),
            self.inner.id.clone(),
            false,
            lease,
        );
    }
}

/// How long a drop waits for its container's removal before leaving it to its thread.
const DROP_REMOVAL_WAIT: Duration = Duration::from_secs(30);

/// A client for the same engine that depends on no existing runtime: a new connection to
/// `endpoint` (the address the factory connected to) at the API version `docker`
/// negotiated. Without an endpoint (a factory made [`with_client`]), a clone of `docker`,
/// whose pooled connections may belong to another runtime.
///
/// [`with_client`]: crate::DockerMachineFactory::with_client
fn independent_client(docker: &Docker, endpoint: Option<&str>) -> Docker {
    let version = docker.client_version();
    let fresh = match endpoint {
        Some(host) if host.starts_with("unix://") => {
            Docker::connect_with_unix(host, DROP_REMOVAL_WAIT.as_secs(), &version).ok()
        }
        Some(host) if host.starts_with("tcp://") || host.starts_with("http://") => {
            Docker::connect_with_http(host, DROP_REMOVAL_WAIT.as_secs(), &version).ok()
        }
        _ => None,
    };
    fresh.unwrap_or_else(|| docker.clone())
}

/// Removes a container when a machine (or a half-made one) is dropped unclosed, and waits
/// for it (up to 30 s; a failure is logged); then gives up `lease`, the machine's share of
/// the snapshot image it was started from, which removes that image when it was the last
/// ([`crate::snapshot::release`]).
///
/// The removal never depends on the caller's runtime, which may be shutting down (a
/// machine held by a task of a runtime being dropped, a test panicking inside `block_on`)
/// or be a current-thread runtime blocked right here: it runs on its own thread, with its
/// own current-thread Tokio runtime and its own connection to the engine
/// ([`block_on_own_thread`]). The dropping thread blocks until the engine confirms the
/// removal, so the process cannot end first.
///
/// With `linger`, the removal is repeated twice more 250 ms apart: for a create cancelled
/// while its request was in flight, whose container the engine may still be making.
pub(crate) fn remove_on_drop(
    docker: &Docker,
    endpoint: Option<&str>,
    id: String,
    linger: bool,
    lease: Option<Arc<crate::snapshot::ImageLease>>,
) {
    let what = format!("a dropped machine's container {id}");
    block_on_own_thread(docker, endpoint, what, move |client| async move {
        let mut result = remove_container(&client, &id).await;
        if linger {
            for _ in 0..2 {
                tokio::time::sleep(Duration::from_millis(250)).await;
                result = result.and(remove_container(&client, &id).await);
            }
        }
        if let Some(lease) = lease {
            if let Err(e) = crate::snapshot::release_with(lease, &client).await {
                tracing::warn!(target: "shellbox_docker", container = %id, "could not remove the snapshot image of a dropped machine: {e}");
            }
        }
        result
    });
}

/// Runs `work` (a removal, from a `Drop`) on a thread of its own, with its own
/// current-thread Tokio runtime and its own connection to the engine
/// ([`independent_client`]), and blocks the calling thread until it is done (up to 30 s).
/// `what` names what is removed, in the log lines saying how it went.
pub(crate) fn block_on_own_thread<F, Fut>(
    docker: &Docker,
    endpoint: Option<&str>,
    what: String,
    work: F,
) where
    F: FnOnce(Docker) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<(), Error>>,
{
    let client = independent_client(docker, endpoint);
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let thread_what = what.clone();
    let spawned = std::thread::Builder::new()
        .name("shellbox-docker-drop".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            let result = match runtime {
                Ok(rt) => rt.block_on(work(client)),
                Err(e) => Err(Error::io("start a runtime to remove what was dropped", e)),
            };
            match result {
                Ok(()) => {
                    tracing::debug!(target: "shellbox_docker", "removed {thread_what}")
                }
                Err(e) => {
                    tracing::warn!(target: "shellbox_docker", "could not remove {thread_what}: {e}")
                }
            }
            let _ = done_tx.send(());
        });
    match spawned {
        Ok(_) => {
            if done_rx.recv_timeout(DROP_REMOVAL_WAIT).is_err() {
                tracing::warn!(target: "shellbox_docker", "{what} is still being removed after {DROP_REMOVAL_WAIT:?}; not waiting longer");
            }
        }
        Err(e) => {
            tracing::warn!(target: "shellbox_docker", "could not start a thread to remove {what}: {e}")
        }
    }
}

/// Force-removes a container (with its anonymous volumes), retrying transient failures,
/// and returns only once the engine says it is gone.
///
/// # Errors
/// [`Error::Backend`] when it still exists after the retries (about 20 s).
pub(crate) async fn remove_container(docker: &Docker, id: &str) -> Result<(), Error> {
    let mut last: Option<String> = None;
    let mut delay = Duration::from_millis(50);
    for _ in 0..10 {
        let options = RemoveContainerOptions {
            force: true,
            v: true,
            link: false,
        };
        match docker.remove_container(id, Some(options)).await {
            Ok(()) => {}
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) => last = Some(e.to_string()),
        }
        match docker.inspect_container(id, None).await {
            Err(e) if is_not_found(&e) => return Ok(()),
            Ok(_) => {
                last.get_or_insert_with(|| "the container still exists".to_string());
            }
            Err(e) => last = Some(e.to_string()),
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(4));
    }
    Err(Error::backend(
        format!("remove container {id}"),
        last.unwrap_or_else(|| "the container still exists".to_string()),
    ))
}

impl Inner {
    pub(crate) fn check_open(&self) -> Result<(), Error> {
        if self.closed.load(Ordering::SeqCst) {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    /// An engine error during an operation: [`Error::Closed`] when the machine was closed
    /// meanwhile (its container is gone), else [`Error::Backend`].
    pub(crate) fn engine_error(&self, operation: &str, e: BollardError) -> Error {
        if self.closed.load(Ordering::SeqCst) {
            Error::Closed
        } else {
            Error::backend(format!("{operation} in container {}", self.name), e)
        }
    }

    pub(crate) async fn close(&self) -> Result<(), Error> {
        self.closed.store(true, Ordering::SeqCst);
        self.shutdown.send_replace(true);
        let session = self
            .relay_session
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(session) = session {
            session.shut();
        }
        let _guard = self.close_lock.lock().await;
        if self.removed.load(Ordering::SeqCst) {
            return Ok(());
        }
        remove_container(&self.docker, &self.id).await?;
        self.removed.store(true, Ordering::SeqCst);
        let lease = self
            .image_lease
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(lease) = lease {
            // The machine is gone either way; a snapshot image left behind is gc's.
            if let Err(e) = crate::snapshot::release(lease).await {
                tracing::warn!(target: "shellbox_docker", container = %self.name, "could not remove the snapshot image the machine was started from: {e}");
            }
        }
        Ok(())
    }

    /// An engine error at the start of an operation: [`Error::Closed`] when the machine was
    /// closed meanwhile; [`Error::Terminated`] (after closing the machine) when the
    /// container is no longer running; else [`Error::Backend`].
    pub(crate) async fn start_failure(&self, operation: &str, e: BollardError) -> Error {
        if self.closed.load(Ordering::SeqCst) {
            return Error::Closed;
        }
        match self.ensure_running().await {
            Err(stopped) => stopped,
            Ok(()) => self.engine_error(operation, e),
        }
    }

    /// Checks with the engine (`GET /containers/{id}/json`, `State.Running`) that the
    /// container still runs. A container that stopped (a command killed its keep-alive,
    /// e.g. `kill -9 -1`) or vanished cannot run anything again: the machine is closed (the
    /// container removed) and this is [`Error::Terminated`] saying why.
    ///
    /// # Errors
    /// [`Error::Closed`] when the machine was closed, [`Error::Terminated`] as above,
    /// [`Error::Backend`] when the engine cannot be asked.
    pub(crate) async fn ensure_running(&self) -> Result<(), Error> {
        self.check_open()?;
        let why = match self.docker.inspect_container(&self.id, None).await {
            Ok(info) => {
                let state = info.state.unwrap_or_default();
                if state.running == Some(true) {
                    return Ok(());
                }
                format!(
                    "its main process ended (exit code {}{}), e.g. because a command killed                      every process",
                    state.exit_code.unwrap_or(-1),
                    if state.oom_killed == Some(true) {
                        ", out of memory"
                    } else {
                        ""
                    }
                )
            }
            Err(e) if is_not_found(&e) => "the container no longer exists".to_string(),
            Err(e) => return Err(self.engine_error("inspect container", e)),
        };
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed);
        }
        self.dispose(&format!("the container stopped: {why}")).await;
        Err(Error::Terminated(format!(
            "the container stopped: {why}; the machine ({}) is closed",
            self.name
        )))
    }

    /// The machine's supervisor ended (killed from outside, or the container stopped): the
    /// machine is closed and this is [`Error::Terminated`] saying why, or
    /// [`Error::Closed`] when it was closed meanwhile.
    pub(crate) async fn supervisor_gone(&self) -> Error {
        if self.closed.load(Ordering::SeqCst) {
            return Error::Closed;
        }
        if let Err(e) = self.ensure_running().await {
            return e;
        }
        if self.closed.load(Ordering::SeqCst) {
            return Error::Closed;
        }
        self.dispose("the machine's supervisor ended").await;
        Error::Terminated(format!(
            "the machine's command supervisor ended (killed, by a root command or from outside); the \
             machine ({}) is closed",
            self.name
        ))
    }

    /// Closes after a failure it cannot recover from; logs a failed removal.
    async fn dispose(&self, why: &str) {
        tracing::warn!(target: "shellbox_docker", container = %self.name, "disposing of the machine: {why}");
        if let Err(e) = self.close().await {
            tracing::warn!(target: "shellbox_docker", container = %self.name, "removal failed: {e}");
        }
    }

    /// A numeric user (`uid` or `uid:gid`) the image has no account for is refused, as on
    /// every backend (the engine would run it with no account). Names need no check here:
    /// the engine refuses unknown ones.
    async fn refuse_unknown_numeric_user(&self, user: &str) -> Result<(), Error> {
        let name = user.split(':').next().unwrap_or(user);
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_digit()) {
            return Ok(());
        }
        let (code, out, _) = self.root_exec(crate::supervised::LOOKUP, &[user]).await?;
        let code = i32::try_from(code).unwrap_or(255);
        crate::supervised::parse_lookup(user, code, out.as_bytes()).map(|_| ())
    }

    /// Runs a small root exec (`sh -c script sh args...`) and returns (exit code, stdout,
    /// stderr).
    pub(crate) async fn root_exec(
        &self,
        script: &str,
        args: &[&str],
    ) -> Result<(i64, String, String), Error> {
        exec_collect(&self.docker, &self.id, root_exec(script, args))
            .await
            .map_err(|e| match e {
                ExecError::Engine(op, e) => self.engine_error(op, e),
                ExecError::Other(e) => e,
            })
    }
}

pub(crate) enum ExecError {
    Engine(&'static str, BollardError),
    Other(Error),
}

/// Creates, starts and drains an exec, then returns its exit code and (lossy) output.
pub(crate) async fn exec_collect(
    docker: &Docker,
    container: &str,
    config: ExecConfig,
) -> Result<(i64, String, String), ExecError> {
    let exec = docker
        .create_exec(container, config)
        .await
        .map_err(|e| ExecError::Engine("create exec", e))?;
    let started = docker
        .start_exec(&exec.id, None::<StartExecOptions>)
        .await
        .map_err(|e| ExecError::Engine("start exec", e))?;
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    if let StartExecResults::Attached { mut output, input } = started {
        drop(input);
        while let Some(item) = output.next().await {
            match item.map_err(|e| ExecError::Engine("read exec output", e))? {
                LogOutput::StdErr { message } => stderr.extend_from_slice(&message),
                LogOutput::StdOut { message } | LogOutput::Console { message } => {
                    stdout.extend_from_slice(&message)
                }
                LogOutput::StdIn { .. } => {}
            }
        }
    }
    let code = wait_exec_exit(docker, &exec.id).await?;
    Ok((
        code,
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    ))
}

/// The exit code of a finished exec, polling its inspect while the engine still marks it
/// running (briefly, after the output ended).
async fn wait_exec_exit(docker: &Docker, exec_id: &str) -> Result<i64, ExecError> {
    let started = Instant::now();
    let mut delay = Duration::from_millis(2);
    loop {
        let info = docker
            .inspect_exec(exec_id)
            .await
            .map_err(|e| ExecError::Engine("inspect exec", e))?;
        if info.running != Some(true) {
            if let Some(code) = info.exit_code {
                return Ok(code);
            }
        }
        if started.elapsed() > Duration::from_secs(10) {
            return Err(ExecError::Other(Error::TimedOut {
                operation: format!("wait for exec {exec_id} to report its exit code"),
                after: Duration::from_secs(10),
            }));
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(50));
    }
}

#[async_trait]
impl Machine for DockerMachine {
    async fn run_stream(&self, command: Command) -> Result<EventStream, Error> {
        command.validate()?;
        validate_exec_size(&self.inner.spec, &command)?;
        if let Some(sup) = &self.inner.supervisor {
            self.inner.check_open()?;
            return self.run_supervised(sup, command).await;
        }
        self.run_exec(command).await
    }

    async fn upload(&self, source: &Path, target: &str) -> Result<(), Error> {
        // The archive endpoints work on a stopped container too: ask first.
        self.inner.ensure_running().await?;
        crate::transfer::upload(&self.inner, source, target).await
    }

    async fn download(&self, source: &str, target: &Path) -> Result<(), Error> {
        self.inner.ensure_running().await?;
        crate::transfer::download(&self.inner, source, target).await
    }

    /// The machine's persistent shell. With the machine's supervisor (the fast path), a
    /// [`PtySession`](shellbox_supervisor::session::PtySession): the supervisor's terminal
    /// relay runs the shell as an ordinary command of the image's user, in the spec's
    /// workdir (else the image's), with the container's environment plus `TERM=xterm`
    /// unless one is set. Without it (the exec path), the same session with the relay run
    /// by one attached Engine exec as the image's user, in the workdir, with the
    /// container's environment plus `TERM=xterm` unless the spec sets one: the supervisor
    /// program is copied into the container (`/.shellbox`, as on the fast path; again before
    /// each shell starts, so a root command that replaced it changes nothing) and tried
    /// first. (The supervisor starts the relay from its own program, `/proc/self/exe`,
    /// which no command can replace.) Where that copy or that program fails, a
    /// [`DockerSession`](crate::DockerSession): one Engine exec on a terminal, the marker
    /// taken at its word. Either starts with the first `execute`. A second call returns
    /// the same session; after the session was closed, a new one.
    ///
    /// # Errors
    /// [`Error::Closed`] after the machine closed; [`Error::Unsupported`] when the image's
    /// configured user has no account.
    async fn open_shell(&self) -> Result<Arc<dyn shellbox_core::ShellSession>, Error> {
        self.inner.check_open()?;
        if let Some(session) = self
            .session
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .filter(|s| !s.is_closed())
        {
            return Ok(session.shared());
        }
        let session = match &self.inner.supervisor {
            Some(sup) => {
                let account = if sup.default_user.is_empty() {
                    sup.default_account.clone()
                } else {
                    Some(sup.lookup(&sup.default_user).await?)
                };
                let mut command = Command::from_argv(Vec::<String>::new());
                let term_set = self.inner.spec.env.contains_key("TERM")
                    || sup.env.iter().any(|(k, _)| k == "TERM");
                if !term_set {
                    command.env.insert("TERM".into(), "xterm".into());
                }
                let start = crate::supervised::start_request(
                    sup,
                    &self.inner.spec,
                    &command,
                    account.as_ref(),
                );
                let pty = Arc::new(shellbox_supervisor::session::PtySession::new(
                    sup.client.clone(),
                    start,
                    crate::supervised::RELAY_PATH,
                ));
                self.relay_session_is(pty)
            }
            None => match self.relay_for_session().await {
                Ok(relay) => {
                    let pty = Arc::new(shellbox_supervisor::session::PtySession::with_launcher(
                        Arc::new(relay),
                        crate::supervised::SUPERVISOR_PATH,
                    ));
                    self.relay_session_is(pty)
                }
                Err(why) => {
                    self.inner.check_open()?;
                    tracing::debug!(target: "shellbox_docker", container = %self.inner.name, "the shell session falls back to a terminal exec: {why}");
                    Session::Exec(Arc::new(crate::session::DockerSession::new(
                        self.inner.clone(),
                    )))
                }
            },
        };
        let mut slot = self.session.lock().unwrap_or_else(|p| p.into_inner());
        self.inner.check_open()?;
        if let Some(existing) = slot.as_ref().filter(|s| !s.is_closed()) {
            if let Session::Relay(pty) = &session {
                pty.shut();
            }
            return Ok(existing.shared());
        }
        *slot = Some(session.clone());
        Ok(session.shared())
    }

    async fn close(&self) -> Result<(), Error> {
        self.inner.close().await
    }

    /// Commits the container (`POST /commit`) into a snapshot image tagged
    /// `shellbox-snapshot:<32 hex>`, labelled [`labels::SNAPSHOT`](crate::labels::SNAPSHOT)
    /// and with the owner labels (so [`gc`](crate::gc) removes it once this process is
    /// gone). The container is paused while the engine commits it; when it has volumes (an
    /// image's `VOLUME`s, which a commit leaves out), also while their contents are copied
    /// out, to a private directory under the host's temporary directory (named and
    /// registered as a download's staging directory, so `shellbox gc` removes it if this
    /// process is killed), from where each machine started from the snapshot gets them
    /// back. The snapshot's
    /// [`id`](shellbox_core::Snapshot::id) is the image's ID. Start machines from it with
    /// [`DockerMachineFactory::create_machine_from`](crate::DockerMachineFactory::create_machine_from),
    /// whose docs say what such a machine keeps and what it does not; the image is removed
    /// when the snapshot's last handle goes and the last machine started from it closes
    /// (Docker refuses to remove an image a container uses). A dropped last handle removes
    /// it the way a dropped machine removes its container (blocking, on a thread of its
    /// own): prefer [`Snapshot::delete`](shellbox_core::Snapshot::delete) in async code.
    ///
    /// # Errors
    /// [`Error::Closed`]; [`Error::Terminated`] when the container stopped;
    /// [`Error::Backend`] when the engine fails to commit; [`Error::Io`] for the host copy
    /// of a volume's contents.
    async fn snapshot(&self) -> Result<shellbox_core::Snapshot, Error> {
        crate::snapshot::take(&self.inner).await
    }
}

type Output = std::pin::Pin<Box<dyn Stream<Item = Result<LogOutput, BollardError>> + Send>>;

enum End {
    Eof,
    /// The wrapper's end markers came on both streams: the command's main process ended
    /// (what it left in the background may still hold the output open).
    Marked,
    /// The exec ended but something it left (outside its group, without its marker) still
    /// holds the output open.
    ExecEnded,
    Timeout,
    Cancelled,
    Transport(BollardError),
}

/// Reads one exec's output into the event channel and ends it with its status.
struct Driver {
    inner: Arc<Inner>,
    exec_id: String,
    /// The value of `SHELLBOX_COMMAND_ID` its processes carry.
    command_id: String,
    /// Find the wrapper's end marker in stdout and stderr ([`end_marker`]).
    stdout_end: EndScanner,
    stderr_end: EndScanner,
    stdout: OutputLimiter,
    stderr: OutputLimiter,
    /// Some while the PGID header is still being read.
    header: Option<BytesMut>,
    pgid: Option<u32>,
    /// The command's audit session, when the wrapper could take one (see
    /// [`WRAPPER`](crate::config::WRAPPER)).
    audit: Option<u32>,
    pending: VecDeque<Event>,
    /// Events read before the PGID header: sent once it comes (the wrapper prints it before
    /// the command can write anything), or, when the exec ends without one, the engine's
    /// own message about an exec it could not set up (see [`exec_setup_failure`]).
    held: Vec<Event>,
    /// The command's `user`, to name it in an unknown-user error.
    user: Option<String>,
    tx: mpsc::Sender<Result<Event, Error>>,
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

impl Driver {
    fn take(&mut self, item: LogOutput) {
        match item {
            // Unframed bytes come only from the engine itself when the exec cannot start
            // (unknown user, missing cwd): its message belongs on stderr.
            LogOutput::StdErr { message } => {
                let Some(message) = self.stderr_end.feed(message) else {
                    return;
                };
                if let Some(kept) = self.stderr.admit(message) {
                    self.emit(Event::Stderr(kept));
                }
            }
            LogOutput::Console { message } => {
                if let Some(kept) = self.stderr.admit(message) {
                    self.emit(Event::Stderr(kept));
                }
            }
            LogOutput::StdOut { message } => {
                let Some(buf) = self.header.as_mut() else {
                    self.out(message);
                    return;
                };
                buf.extend_from_slice(&message);
                match parse_header(buf) {
                    Header::Incomplete => {}
                    Header::Pgid(pgid, audit, used) => {
                        self.pgid = Some(pgid);
                        self.audit = audit;
                        self.pending.extend(self.held.drain(..));
                        let mut buf = self.header.take().unwrap_or_default();
                        let rest = buf.split_off(used).freeze();
                        self.out(rest);
                    }
                    Header::Absent => {
                        // The wrapper prints the header before anything else reaches
                        // stdout, so these bytes are the engine's own message about an exec
                        // that could not start (unknown user, missing cwd): stderr.
                        let buf = self.header.take().unwrap_or_default().freeze();
                        if let Some(kept) = self.stderr.admit(buf) {
                            self.emit(Event::Stderr(kept));
                        }
                    }
                }
            }
            LogOutput::StdIn { .. } => {}
        }
    }

    fn out(&mut self, chunk: Bytes) {
        let Some(chunk) = self.stdout_end.feed(chunk) else {
            return;
        };
        if let Some(kept) = self.stdout.admit(chunk) {
            self.emit(Event::Stdout(kept));
        }
    }

    /// Queues an event for sending, or holds it while the PGID header has not come.
    fn emit(&mut self, event: Event) {
        if self.pgid.is_some() {
            self.pending.push_back(event);
        } else {
            self.held.push(event);
        }
    }

    /// At the end: bytes still held as a possible header were not one (see `take`), bytes
    /// held as a possible end marker were output, and held events are released.
    fn flush_header(&mut self) {
        if let Some(buf) = self.header.take() {
            if let Some(kept) = self.stderr.admit(buf.freeze()) {
                self.held.push(Event::Stderr(kept));
            }
        }
        if let Some(kept) = self.stdout_end.finish().and_then(|b| self.stdout.admit(b)) {
            self.held.push(Event::Stdout(kept));
        }
        if let Some(kept) = self.stderr_end.finish().and_then(|b| self.stderr.admit(b)) {
            self.held.push(Event::Stderr(kept));
        }
        self.pending.extend(self.held.drain(..));
    }

    /// At the end of an exec that never printed the PGID header (its wrapper did not run):
    /// the engine's refusal to set it up, as a typed error, when it is one.
    fn setup_failure(&mut self) -> Option<Error> {
        if self.pgid.is_some() {
            return None;
        }
        let mut message = Vec::new();
        if let Some(buf) = &self.header {
            message.extend_from_slice(buf);
        }
        for event in &self.held {
            if let Event::Stdout(b) | Event::Stderr(b) = event {
                message.extend_from_slice(b);
            }
        }
        exec_setup_failure(&String::from_utf8_lossy(&message), self.user.as_deref())
    }

    /// Reads until EOF, a deadline, cancellation or a transport error, sending events as the
    /// receiver takes them.
    async fn pump(&mut self, output: &mut Output, deadline: Option<Instant>) -> End {
        let tx = self.tx.clone();
        let mut poll = tokio::time::interval_at(Instant::now() + EXEC_POLL, EXEC_POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = tx.closed() => return End::Cancelled,
                _ = sleep_until_opt(deadline) => return End::Timeout,
                _ = poll.tick() => {
                    if let Ok(info) = self.inner.docker.inspect_exec(&self.exec_id).await {
                        if info.running == Some(false) && info.exit_code.is_some() {
                            return End::ExecEnded;
                        }
                    }
                }
                permit = tx.reserve(), if !self.pending.is_empty() => match permit {
                    Ok(permit) => {
                        if let Some(ev) = self.pending.pop_front() {
                            permit.send(Ok(ev));
                        }
                    }
                    Err(_) => return End::Cancelled,
                },
                item = output.next(), if self.pending.is_empty() => match item {
                    None => return End::Eof,
                    Some(Err(e)) => return End::Transport(e),
                    Some(Ok(item)) => {
                        self.take(item);
                        if self.stdout_end.found() && self.stderr_end.found() {
                            return End::Marked;
                        }
                    }
                },
            }
        }
    }

    /// Reads (without sending) until EOF or `until`, keeping output within the limits.
    /// Returns true at EOF.
    async fn read_quietly(
        &mut self,
        output: &mut Output,
        until: Instant,
        stop_at_pgid: bool,
    ) -> bool {
        loop {
            if stop_at_pgid && self.pgid.is_some() {
                return false;
            }
            tokio::select! {
                _ = tokio::time::sleep_until(until) => return false,
                item = output.next() => match item {
                    None | Some(Err(_)) => return true,
                    Some(Ok(item)) => self.take(item),
                },
            }
        }
    }

    async fn send_pending(&mut self) -> bool {
        while let Some(ev) = self.pending.pop_front() {
            if self.tx.send(Ok(ev)).await.is_err() {
                return false;
            }
        }
        true
    }

    async fn finish_exited(&mut self) {
        if let Some(error) = self.setup_failure() {
            let _ = self.tx.send(Err(error)).await;
            return;
        }
        self.flush_header();
        let status = match wait_exec_exit(&self.inner.docker, &self.exec_id).await {
            // Closing the machine killed it: not the command's own end.
            _ if self.inner.closed.load(Ordering::SeqCst) => Err(Error::Closed),
            Ok(code) => Ok(Event::Exit(ExitStatus {
                exit_code: Some(i32::try_from(code).unwrap_or(255)),
                reason: ExitReason::Exited,
                stdout_truncated: self.stdout.truncated(),
                stderr_truncated: self.stderr.truncated(),
            })),
            Err(ExecError::Engine(op, e)) => Err(self.inner.engine_error(op, e)),
            Err(ExecError::Other(e)) => Err(e),
        };
        if self.send_pending().await {
            let _ = self.tx.send(status).await;
        }
    }

    /// Whether the engine reports this command's exec as ended with an exit code (within
    /// a few seconds: the engine may lag behind its connection).
    async fn exec_has_ended(&self) -> bool {
        if self.inner.closed.load(Ordering::SeqCst) {
            return false;
        }
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            match self.inner.docker.inspect_exec(&self.exec_id).await {
                Ok(info) if info.running == Some(false) && info.exit_code.is_some() => return true,
                Ok(_) if Instant::now() < until => {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                _ => return false,
            }
        }
    }

    /// Kills the command's process group inside the container and confirms it is gone.
    async fn kill_group(&self) -> Result<(), String> {
        let Some(pgid) = self.pgid else {
            return Err("the command never reported its process group".into());
        };
        let pgid = pgid.to_string();
        let audit = self.audit.map(|a| a.to_string()).unwrap_or_default();
        let attempt = tokio::time::timeout(
            KILL_BOUND,
            self.inner
                .root_exec(KILL_GROUP, &[&pgid, &self.command_id, &audit]),
        )
        .await;
        match attempt {
            Ok(Ok((0, _, _))) => Ok(()),
            Ok(Ok((1, _, _))) => Err(format!(
                "process group {pgid} still had live members after the kill"
            )),
            Ok(Ok((code, out, err))) => Err(format!(
                "the kill probe for process group {pgid} failed (exit {code}): {}{}",
                out.trim(),
                err.trim()
            )),
            Ok(Err(e)) => Err(format!(
                "could not run the kill for process group {pgid}: {e}"
            )),
            Err(_) => Err(format!(
                "killing process group {pgid} took more than {KILL_BOUND:?}"
            )),
        }
    }

    async fn run(mut self, mut output: Output, deadline: Option<Instant>) {
        let end = self.pump(&mut output, deadline).await;
        match end {
            End::Eof => self.finish_exited().await,
            End::Marked => {
                self.finish_exited().await;
                // What the command left running may still write to the exec's output:
                // read and drop it while the engine keeps the stream, so a writer never
                // blocks on a full pipe.
                while let Some(Ok(_)) = output.next().await {}
            }
            End::ExecEnded => {
                // What is still in flight comes in now; the rest is not the command's.
                self.read_quietly(&mut output, Instant::now() + DRAIN_AFTER_EXIT, false)
                    .await;
                self.finish_exited().await
            }
            // Podman resets the connection when the command exits with stdin it did not
            // read; the exec's own end, when the engine reports one, is the command's.
            End::Transport(_) if self.exec_has_ended().await => self.finish_exited().await,
            End::Transport(e) => {
                let closed = self.inner.closed.load(Ordering::SeqCst);
                if closed {
                    let _ = self.tx.send(Err(Error::Closed)).await;
                } else {
                    self.inner
                        .dispose(&format!("exec output failed: {e}"))
                        .await;
                    let _ = self
                        .tx
                        .send(Err(Error::backend(
                            format!("read exec output in container {}", self.inner.name),
                            e,
                        )))
                        .await;
                }
            }
            End::Timeout | End::Cancelled => {
                let cancelled = matches!(end, End::Cancelled);
                if self.pgid.is_none() {
                    let eof = self
                        .read_quietly(&mut output, Instant::now() + HEADER_GRACE, true)
                        .await;
                    if eof && !cancelled {
                        // It ended by itself while we waited for its header.
                        self.finish_exited().await;
                        return;
                    }
                    if eof {
                        return;
                    }
                }
                if self.inner.closed.load(Ordering::SeqCst) {
                    let _ = self.tx.send(Err(Error::Closed)).await;
                    return;
                }
                match self.kill_group().await {
                    Ok(()) => {
                        if cancelled {
                            return;
                        }
                        self.read_quietly(&mut output, Instant::now() + DRAIN_AFTER_KILL, false)
                            .await;
                        self.flush_header();
                        let status =
                            timed_out_status(self.stdout.truncated(), self.stderr.truncated());
                        if self.send_pending().await {
                            let _ = self.tx.send(Ok(Event::Exit(status))).await;
                        }
                    }
                    Err(why) => {
                        self.inner.dispose(&why).await;
                        if !cancelled {
                            let _ = self
                                .tx
                                .send(Err(Error::Terminated(format!(
                                    "the command timed out and could not be stopped ({why}); \
                                     the container {} was removed",
                                    self.inner.name
                                ))))
                                .await;
                        }
                    }
                }
            }
        }
    }
}

/// A bare Engine API exec of `true` (no wrapper, no PGID protocol, no limits) in
/// `container`: the floor a machine's `run(true)` is compared against in benchmarks.
///
/// # Errors
/// [`Error::Backend`] when the engine fails or `true` does not exit 0.
#[doc(hidden)]
pub async fn floor_exec_true(docker: &Docker, container: &str) -> Result<(), Error> {
    let config = ExecConfig {
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        cmd: Some(vec!["true".to_string()]),
        ..Default::default()
    };
    match exec_collect(docker, container, config).await {
        Ok((0, _, _)) => Ok(()),
        Ok((code, _, err)) => Err(Error::backend(
            "exec true",
            format!("exit code {code}: {err}"),
        )),
        Err(ExecError::Engine(op, e)) => Err(Error::backend(op, e)),
        Err(ExecError::Other(e)) => Err(e),
    }
}
