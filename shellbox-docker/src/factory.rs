//! The factory: connect to the engine, create containers.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bollard::errors::Error as BollardError;
use bollard::query_parameters::CreateContainerOptions;
use bollard::Docker;
use sha2::{Digest, Sha256};
use shellbox_core::{async_trait, Error, Machine, MachineFactory, MachineSpec, Snapshot};

use crate::config::{container_config, refused_field, Owner, SETUP};
use crate::machine::{remove_on_drop, DockerMachine, Inner};
use crate::snapshot::{DockerSnapshot, Fork, VolumeCopies};
use crate::supervised::CommandPath;
use crate::CONTAINER_NAME_PREFIX;

mod check;

/// [`SETUP`] for the supervisor path: `setsid` is optional there (only a command too large
/// for the supervisor's request runs as an exec, which needs it). Prints its path or
/// nothing; exit 94: the workdir cannot be created.
const FAST_SETUP: &str = r#"s=
IFS=:
for d in $PATH; do
  if [ -f "$d/setsid" ] && [ -x "$d/setsid" ]; then s=$d/setsid; break; fi
done
unset IFS
if [ -z "$s" ] && command -v setsid >/dev/null 2>&1; then s=setsid; fi
if [ -n "$1" ]; then mkdir -p -- "$1" || exit 94; fi
echo "$s""#;

/// Where the engine is when `DOCKER_HOST` is not set.
const DEFAULT_HOST: &str = "unix:///var/run/docker.sock";

/// Creates [`DockerMachine`]s: one container per machine, through the Docker Engine API.
#[derive(Clone)]
pub struct DockerMachineFactory {
    docker: Docker,
    /// The address connected to (`connect`, `connect_to`); `None` for `with_client`.
    endpoint: Option<Arc<str>>,
    runtime: Option<String>,
    owner: Arc<Owner>,
    labels: BTreeMap<String, String>,
    /// Which engine answers (from `GET /version`), asked once, when first needed.
    engine: Arc<tokio::sync::OnceCell<Engine>>,
    /// How commands run (`SHELLBOX_DOCKER_COMMAND_PATH` or [`Self::command_path`]).
    path: CommandPath,
    /// A bad `SHELLBOX_DOCKER_COMMAND_PATH`, reported at create.
    path_error: Option<String>,
    /// Whether exec-path machines run their shell sessions over the supervisor program's
    /// terminal relay ([`Self::exec_session_relay`]).
    session_relay: bool,
}

/// The engine behind the API, as its `GET /version` names itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Engine {
    /// Docker Engine (or anything not naming itself Podman).
    Docker,
    /// Podman's Docker-compatible API (a component named `Podman Engine`).
    Podman,
}

/// Whether a `GET /version` answer is Podman's: a component named "Podman Engine" (Podman
/// 4 and 5), or a platform name containing "podman".
pub(crate) fn is_podman_version(version: &bollard::models::SystemVersion) -> bool {
    let component = version
        .components
        .iter()
        .flatten()
        .any(|c| c.name.to_ascii_lowercase().contains("podman"));
    let platform = version
        .platform
        .as_ref()
        .is_some_and(|p| p.name.to_ascii_lowercase().contains("podman"));
    component || platform
}

impl std::fmt::Debug for DockerMachineFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerMachineFactory")
            .field("endpoint", &self.endpoint)
            .field("runtime", &self.runtime)
            .field("owner", &self.owner)
            .field("labels", &self.labels)
            .finish()
    }
}

impl DockerMachineFactory {
    /// Connects with Docker's usual defaults: `DOCKER_HOST` when set (`unix://`, `tcp://`,
    /// `http://`), else the local socket `unix:///var/run/docker.sock`, then negotiates the
    /// API version with the engine (`GET /version`; the client steps down to the engine's
    /// version, e.g. 1.41 for Docker 20.10).
    ///
    /// # Errors
    /// [`Error::Backend`] naming the address tried (and whether it came from `DOCKER_HOST`)
    /// when the engine cannot be reached or answers with an unreadable version.
    pub async fn connect() -> Result<Self, Error> {
        match std::env::var("DOCKER_HOST") {
            Ok(host) if !host.is_empty() => Self::connect_to_described(&host, "DOCKER_HOST").await,
            _ => Self::connect_to_described(DEFAULT_HOST, "the default, DOCKER_HOST unset").await,
        }
    }

    /// Connects to the engine at `host` (`unix:///path`, `tcp://host:port` or
    /// `http://host:port`) and negotiates the API version.
    ///
    /// # Errors
    /// [`Error::Backend`] naming `host` when it is malformed or unreachable.
    pub async fn connect_to(host: &str) -> Result<Self, Error> {
        Self::connect_to_described(host, "given").await
    }

    async fn connect_to_described(host: &str, origin: &str) -> Result<Self, Error> {
        let operation = format!("connect to the Docker Engine at {host} ({origin})");
        let docker = Docker::connect_with_host(host).map_err(|e| Error::backend(&operation, e))?;
        let docker = match tokio::time::timeout(
            std::time::Duration::from_secs(30),
            docker.negotiate_version(),
        )
        .await
        {
            Ok(Ok(d)) => d,
            Ok(Err(e)) => return Err(Error::backend(operation, e)),
            Err(_) => return Err(Error::backend(operation, "no answer within 30 s")),
        };
        let mut factory = Self::with_client(docker);
        factory.endpoint = Some(Arc::from(host));
        // Which engine it is, now, so [`capabilities`](MachineFactory::capabilities) can tell
        // (an engine that cannot say is asked again when it matters).
        let _ = factory.engine().await;
        Ok(factory)
    }

    /// Uses an already configured client as it is (no version negotiation: call
    /// [`Docker::negotiate_version`] first if needed).
    ///
    /// The factory does not know the client's address, so a machine dropped unclosed is
    /// removed through a clone of this client rather than a connection of its own; when the
    /// client's runtime is blocked or gone that removal can fail (see [`DockerMachine`]).
    /// [`connect`](Self::connect) and [`connect_to`](Self::connect_to) have no such limit.
    pub fn with_client(docker: Docker) -> Self {
        let (path, path_error) = match CommandPath::from_env() {
            Ok(p) => (p.unwrap_or_default(), None),
            Err(e) => (CommandPath::Auto, Some(e.to_string())),
        };
        Self {
            docker,
            endpoint: None,
            runtime: None,
            owner: Arc::new(Owner::current()),
            labels: BTreeMap::new(),
            engine: Arc::new(tokio::sync::OnceCell::new()),
            path,
            path_error,
            session_relay: true,
        }
    }

    /// How this factory's machines run their commands: [`CommandPath::Auto`] (the default)
    /// starts the embedded supervisor in each container and falls back to one Engine exec
    /// per command where it cannot run (another architecture, no writable root, no exec);
    /// [`CommandPath::Supervisor`] refuses such a container at create
    /// ([`Error::Unsupported`] saying why); [`CommandPath::Exec`] always uses execs. The
    /// environment variable [`SHELLBOX_DOCKER_COMMAND_PATH`](crate::COMMAND_PATH_ENV)
    /// (`supervisor`, `exec`, `auto`) sets the same when the factory is made; this call wins.
    pub fn command_path(mut self, path: CommandPath) -> Self {
        self.path = path;
        self.path_error = None;
        self
    }

    /// Whether a machine on the exec path (no supervisor) runs its shell session over the
    /// supervisor program's terminal relay, copied into the container and run by one
    /// Engine exec (`true`, the default), or always as the older terminal exec
    /// ([`DockerSession`](crate::DockerSession), which takes the completion marker at its
    /// word; also what the relay falls back to where it cannot be copied or run). No
    /// effect on machines with a supervisor.
    pub fn exec_session_relay(mut self, relay: bool) -> Self {
        self.session_relay = relay;
        self
    }

    /// The [`CommandPath`] this factory's machines use.
    pub fn path(&self) -> CommandPath {
        self.path
    }

    /// Which engine this factory talks to, asked once (`GET /version`).
    async fn engine(&self) -> Result<Engine, Error> {
        self.engine
            .get_or_try_init(|| async {
                let version = self
                    .docker
                    .version()
                    .await
                    .map_err(|e| Error::backend("ask the engine its version", e))?;
                Ok(if is_podman_version(&version) {
                    Engine::Podman
                } else {
                    Engine::Docker
                })
            })
            .await
            .copied()
    }

    /// Whether this factory's engine is Podman (its Docker-compatible API), from the
    /// engine's `GET /version` (a component named "Podman Engine"), asked once.
    ///
    /// # Errors
    /// [`Error::Backend`] when the engine cannot be asked.
    pub async fn is_podman(&self) -> Result<bool, Error> {
        Ok(self.engine().await? == Engine::Podman)
    }

    /// What Podman's compatible API accepts and silently ignores: refused up front.
    async fn refuse_what_podman_ignores(&self, spec: &MachineSpec) -> Result<(), Error> {
        if spec.gpus == 0 && self.runtime.is_none() {
            return Ok(());
        }
        if self.engine().await? != Engine::Podman {
            return Ok(());
        }
        if let Some(runtime) = &self.runtime {
            return Err(Error::unsupported(format!(
                "the engine is Podman, whose Docker-compatible API ignores a requested OCI \
                 runtime (HostConfig.Runtime): runtime {runtime:?} cannot be honoured"
            )));
        }
        Err(Error::unsupported(format!(
            "the engine is Podman, whose Docker-compatible API ignores GPU requests \
             (HostConfig.DeviceRequests): gpus {} cannot be honoured",
            spec.gpus
        )))
    }

    /// Runs containers with this OCI runtime (the engine's `HostConfig.Runtime`, e.g.
    /// `runsc` for gVisor). An engine without it refuses at create:
    /// [`Error::Unsupported`] with the engine's reason. Podman's compatible API would ignore
    /// it, so on Podman every create with a runtime is [`Error::Unsupported`].
    pub fn runtime(mut self, runtime: impl Into<String>) -> Self {
        self.runtime = Some(runtime.into());
        self
    }

    /// Puts this label (Docker's `--label key=value`) on every container the factory
    /// creates, beside shellbox's own: for finding them later, e.g. with
    /// [`gc_with_labels`](crate::gc_with_labels), which then touches only those. Keys in
    /// shellbox's namespace (`dev.shellbox.`) are refused at create
    /// ([`Error::InvalidInput`]): they decide which process owns a container.
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// The Engine API client.
    pub fn docker(&self) -> &Docker {
        &self.docker
    }

    /// Like [`MachineFactory::create`], returning the concrete [`DockerMachine`] (for its
    /// container ID and client).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a spec failing validation, a `pids_limit` below
    /// [`MIN_PIDS_LIMIT`](crate::MIN_PIDS_LIMIT) or a `memory_mb` below
    /// [`MIN_MEMORY_MB`](crate::MIN_MEMORY_MB) (on every engine), a malformed registry
    /// reference, or a [`label`](Self::label) with an empty key, a NUL byte or a key in
    /// shellbox's `dev.shellbox.` namespace; [`Error::Unsupported`] for a source other than docker, registry,
    /// dockerfile or archive, an image without `setsid`, or a field the engine refuses
    /// (`storage_mb`, `gpus`, `cpus` — the Docker Engine refuses more than its CPUs,
    /// Podman takes them —, `memory_mb`, the runtime; the reason quotes the engine) or creates the container without (`memory_mb`, `cpus`, `pids_limit` reported
    /// discarded in the create response's `Warnings`), and on Podman for `gpus` or a runtime
    /// (which its compatible API ignores); [`Error::NotFound`] for a missing Dockerfile, context or archive;
    /// [`Error::Backend`] for other engine failures (a missing Docker image, a failed pull or
    /// build, a workdir that cannot be created); [`Error::TimedOut`] when the spec's
    /// `startup_timeout` (which bounds everything here, image preparation included) runs
    /// out. Whatever was created is removed first.
    pub async fn create_machine(&self, spec: MachineSpec) -> Result<DockerMachine, Error> {
        self.check_create(&spec)?;
        let limit = spec.startup_timeout;
        bounded(limit, self.create_unbounded(spec, None)).await
    }

    /// Like [`MachineFactory::create_from`], returning the concrete [`DockerMachine`]: a
    /// container from the snapshot's image, made as [`create_machine`](Self::create_machine)
    /// makes one from the spec's image — the spec's env, network, user (commands' default
    /// account is the image's configured user, the snapshotted machine's), limits, labels
    /// and workdir (created when missing), the same supervisor and confinement — with the
    /// snapshot's volume contents put back before anything runs. The spec's source is
    /// checked ([`Capabilities::check_spec`](shellbox_core::Capabilities::check_spec)) but
    /// not prepared (never pulled, built or loaded): the filesystem is the snapshot's. The
    /// container's environment is the spec's over that of the image the snapshotted chain
    /// started from; the snapshotted machine's own spec env is not carried over. Its labels
    /// include the snapshotted container's (an image's labels become its containers'; this
    /// factory's and the owner labels win). The new machine holds a share of the snapshot's
    /// image, so the image outlives [`Snapshot::delete`] until the machine closes.
    ///
    /// Any factory talking to the engine that holds the snapshot's image can use it.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for a snapshot another backend took, or one whose image this
    /// factory's engine does not have (taken on another engine, or removed outside
    /// shellbox); [`Error::Closed`] for a
    /// deleted one; otherwise those of [`create_machine`](Self::create_machine).
    pub async fn create_machine_from(
        &self,
        snapshot: &Snapshot,
        spec: MachineSpec,
    ) -> Result<DockerMachine, Error> {
        let taken = snapshot.expect_backend::<DockerSnapshot>("docker")?;
        if self.engine().await? == Engine::Podman {
            return Err(Error::unsupported(crate::snapshot::PODMAN_REFUSAL));
        }
        self.check_create(&spec)?;
        self.capabilities().check_spec(self.backend(), &spec)?;
        let fork = taken.fork(&spec.env)?;
        let limit = spec.startup_timeout;
        let made = bounded(limit, self.create_unbounded(spec, Some(&fork))).await;
        // The new machine holds its own share; this one is given up either way.
        if let Err(e) = crate::snapshot::release(fork.held.lease).await {
            tracing::warn!(target: "shellbox_docker", "could not remove a deleted snapshot's image: {e}");
        }
        made
    }

    /// What every create checks first: the command path setting, the spec, its limits
    /// against the least a machine runs with ([`crate::MIN_PIDS_LIMIT`],
    /// [`crate::MIN_MEMORY_MB`]), its env's size, the factory's labels.
    fn check_create(&self, spec: &MachineSpec) -> Result<(), Error> {
        if let Some(e) = &self.path_error {
            return Err(Error::invalid(e.clone()));
        }
        spec.validate()?;
        crate::config::validate_limits(spec)?;
        crate::config::validate_spec_env_size(spec)?;
        for (key, value) in &self.labels {
            validate_label(key, value)?;
        }
        Ok(())
    }

    /// Creates the machine from the spec's image, or from a snapshot's (`from`).
    async fn create_unbounded(
        &self,
        spec: MachineSpec,
        from: Option<&Fork>,
    ) -> Result<DockerMachine, Error> {
        self.refuse_what_podman_ignores(&spec).await?;
        let image = match from {
            Some(fork) => fork.image.clone(),
            None => crate::image::resolve(&self.docker, &spec.source).await?,
        };
        let name = container_name();
        let mut config = container_config(
            &spec,
            &image,
            self.runtime.as_deref(),
            &self.owner,
            &self.labels,
        );
        if let Some(fork) = from {
            config.env = Some(fork.env.clone());
        }
        let options = CreateContainerOptions {
            name: Some(name.clone()),
            ..Default::default()
        };
        // From here on a dropped (cancelled) future removes the container, by name since
        // the engine may finish creating it after the request was abandoned.
        let mut guard = RemoveOnDrop {
            docker: self.docker.clone(),
            endpoint: self.endpoint.clone(),
            id: name.clone(),
            armed: AtomicBool::new(true),
        };
        let created = match self.docker.create_container(Some(options), config).await {
            Ok(c) => c,
            Err(e) if from.is_some() && crate::image::is_not_found(&e) => {
                guard.disarm();
                return Err(Error::unsupported(format!(
                    "the engine has no image {image} for this snapshot (taken on another \
                     Docker Engine, or its image was removed outside shellbox): {e}"
                )));
            }
            Err(e) => {
                guard.disarm();
                return Err(self.refusal_or_backend(&spec, "create container", e));
            }
        };
        let volumes = from.map(|fork| &*fork.held.volumes);
        // An engine that dropped a limit the spec asked for says so only in the response's
        // warnings: such a machine would run unbounded, so it is refused (and removed below).
        let result = match crate::config::discarded_limit(&spec, &created.warnings) {
            Some(field) => Err(Error::unsupported(format!(
                "the Docker Engine cannot honour {field}: it created the container without it ({})",
                created.warnings.join("; ")
            ))),
            None => self.start(&spec, &name, &created.id, volumes).await,
        };
        match result {
            Ok((setsid, supervisor)) => {
                guard.disarm();
                Ok(DockerMachine {
                    inner: Arc::new(Inner {
                        docker: self.docker.clone(),
                        endpoint: self.endpoint.clone(),
                        id: created.id,
                        name,
                        spec,
                        setsid,
                        supervisor,
                        shutdown: tokio::sync::watch::channel(false).0,
                        closed: AtomicBool::new(false),
                        removed: AtomicBool::new(false),
                        close_lock: tokio::sync::Mutex::new(()),
                        relay_session: std::sync::Mutex::new(None),
                        session_relay: self.session_relay,
                        owner: self.owner.clone(),
                        base_env: from.map(|fork| fork.base_env.clone()),
                        image_lease: std::sync::Mutex::new(
                            from.map(|fork| fork.held.lease.clone()),
                        ),
                        snapshot_lock: tokio::sync::Mutex::new(()),
                    }),
                    session: std::sync::Mutex::new(None),
                })
            }
            Err(e) => {
                // The guard stays armed until the removal is done (a cancellation meanwhile
                // still removes the container).
                let removed = crate::machine::remove_container(&self.docker, &created.id).await;
                guard.disarm();
                if let Err(rm) = removed {
                    tracing::warn!(target: "shellbox_docker", container = %name, "could not remove after a failed create: {rm}");
                }
                Err(e)
            }
        }
    }

    /// Starts the container, puts a snapshot's volume contents back, starts its supervisor
    /// (per the [`CommandPath`]), creates the workdir; returns setsid's path (exec path) and
    /// the supervisor.
    async fn start(
        &self,
        spec: &MachineSpec,
        name: &str,
        id: &str,
        volumes: Option<&VolumeCopies>,
    ) -> Result<(String, Option<crate::supervised::Supervised>), Error> {
        self.docker
            .start_container(id, None::<bollard::query_parameters::StartContainerOptions>)
            .await
            .map_err(|e| self.refusal_or_backend(spec, "start container", e))?;
        if let Some(volumes) = volumes {
            crate::snapshot::restore_volumes(&self.docker, id, name, volumes).await?;
        }
        if self.path != CommandPath::Exec {
            let podman = self.engine().await? == Engine::Podman;
            match crate::supervised::start(&self.docker, id, podman).await {
                Ok(sup) => {
                    let (code, out) = sup
                        .collect_root(&["/bin/sh", "-c", FAST_SETUP, "sh", &spec.workdir])
                        .await
                        .map_err(|e| {
                            Error::backend(
                                format!("set up container {name}"),
                                std::io::Error::other(e),
                            )
                        })?;
                    if code != 0 {
                        return Err(Error::backend(
                            format!("create workdir {}", spec.workdir),
                            format!("exit {code}"),
                        ));
                    }
                    let setsid = String::from_utf8_lossy(&out).trim().to_string();
                    return Ok((setsid, Some(sup)));
                }
                Err(why) if self.path == CommandPath::Supervisor => {
                    return Err(Error::unsupported(format!(
                        "the command supervisor cannot run in this container ({why}); the \
                         factory's command path is `supervisor`"
                    )));
                }
                Err(why) => {
                    tracing::debug!(target: "shellbox_docker", container = %name, "commands fall back to Engine execs: {why}");
                }
            }
        }
        let config = crate::config::root_exec(SETUP, &[&spec.workdir]);
        let (code, out, err) = crate::machine::exec_collect(&self.docker, id, config)
            .await
            .map_err(|e| match e {
                crate::machine::ExecError::Engine(op, e) => {
                    Error::backend(format!("{op} in container {name}"), e)
                }
                crate::machine::ExecError::Other(e) => e,
            })?;
        match code {
            0 => Ok((out.trim().to_string(), None)),
            93 => Err(Error::unsupported(
                "the image has no `setsid` program on PATH (the docker backend requires setsid \
                 and /bin/sh to run and stop commands)",
            )),
            94 => Err(Error::backend(
                format!("create workdir {}", spec.workdir),
                err.trim().to_string(),
            )),
            _ => Err(Error::backend(
                format!("set up container {name}"),
                format!("exit {code}: {}{}", out.trim(), err.trim()),
            )),
        }
    }

    fn refusal_or_backend(&self, spec: &MachineSpec, operation: &str, e: BollardError) -> Error {
        if let BollardError::DockerResponseServerError {
            status_code,
            message,
        } = &e
        {
            if matches!(status_code, 400 | 500) {
                if let Some(field) = refused_field(spec, self.runtime.as_deref(), message) {
                    let what = match field {
                        "runtime" => {
                            format!("runtime {:?}", self.runtime.as_deref().unwrap_or_default())
                        }
                        f => f.to_string(),
                    };
                    return Error::unsupported(format!(
                        "the Docker Engine cannot honour {what}: {message}"
                    ));
                }
            }
        }
        Error::backend(operation, e)
    }
}

#[async_trait]
impl MachineFactory for DockerMachineFactory {
    fn backend(&self) -> &'static str {
        "docker"
    }

    /// [`DOCKER_CAPABILITIES`](crate::DOCKER_CAPABILITIES), with
    /// [`process_model`](shellbox_core::Capabilities::process_model) on every
    /// [`CommandPath`] (on `Exec`, a timeout finds what a command started by its audit
    /// session where the kernel gives it one; see the crate docs for the limit).
    ///
    /// Without [`snapshots`](shellbox_core::Capabilities::snapshots) on Podman (known once
    /// the engine was asked, which [`connect`](Self::connect) does).
    fn capabilities(&self) -> shellbox_core::Capabilities {
        let mut capabilities = crate::DOCKER_CAPABILITIES.with_process_model();
        if self.engine.get() == Some(&Engine::Podman) {
            capabilities.snapshots = false;
        }
        capabilities
    }

    /// What [`create_machine`](DockerMachineFactory::create_machine) refuses before it
    /// creates a container (see `check_docker_spec`: the spec, labels, the image present or
    /// its files, what the engine's `GET /info` says it cannot give), then REFERENCE.md
    /// 1.7's steps with the spec's image reference.
    async fn check_environment(
        &self,
        requirements: &shellbox_core::ExecutionRequirements,
        spec: &MachineSpec,
    ) -> Result<(), Error> {
        self.check_docker_spec(spec).await?;
        let image = match &spec.source {
            shellbox_core::ImageSource::Docker(d) => Some(d.reference.as_str()),
            shellbox_core::ImageSource::Registry(r) => Some(r.reference.as_str()),
            _ => None,
        };
        shellbox_core::check_execution_requirements(&self.capabilities(), requirements, spec, image)
    }

    async fn create(&self, spec: MachineSpec) -> Result<Box<dyn Machine>, Error> {
        Ok(Box::new(self.create_machine(spec).await?))
    }

    /// See [`DockerMachineFactory::create_machine_from`].
    async fn create_from(
        &self,
        snapshot: &Snapshot,
        spec: MachineSpec,
    ) -> Result<Box<dyn Machine>, Error> {
        Ok(Box::new(self.create_machine_from(snapshot, spec).await?))
    }
}

/// Bounds a create by the spec's `startup_timeout`.
async fn bounded(
    limit: Option<std::time::Duration>,
    create: impl std::future::Future<Output = Result<DockerMachine, Error>>,
) -> Result<DockerMachine, Error> {
    match limit {
        Some(limit) => tokio::time::timeout(limit, create)
            .await
            .map_err(|_| Error::TimedOut {
                operation: "create a docker machine (the spec's startup_timeout)".into(),
                after: limit,
            })?,
        None => create.await,
    }
}

/// Removes a half-made container if `create` is dropped (cancelled) before it finishes.
struct RemoveOnDrop {
    docker: Docker,
    endpoint: Option<Arc<str>>,
    id: String,
    armed: AtomicBool,
}

impl RemoveOnDrop {
    fn disarm(&mut self) {
        self.armed.store(false, Ordering::SeqCst);
    }
}

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if self.armed.load(Ordering::SeqCst) {
            remove_on_drop(
                &self.docker,
                self.endpoint.as_deref(),
                self.id.clone(),
                true,
                None,
            );
        }
    }
}

/// A factory label: a non-empty key outside `dev.shellbox.`, no NUL byte.
fn validate_label(key: &str, value: &str) -> Result<(), Error> {
    if key.is_empty() {
        return Err(Error::invalid("a container label key is empty"));
    }
    if key.contains('\0') || value.contains('\0') {
        return Err(Error::invalid(format!(
            "container label {key:?} contains a NUL byte"
        )));
    }
    if key.starts_with(crate::labels::NAMESPACE) {
        return Err(Error::invalid(format!(
            "container label {key:?} is in shellbox's own namespace {:?}",
            crate::labels::NAMESPACE
        )));
    }
    Ok(())
}

/// `shellbox-<32 hex>`, unique per call (pid, time, counter, hashed).
fn container_name() -> String {
    format!("{CONTAINER_NAME_PREFIX}{}", unique_hex())
}

/// 32 lowercase hex digits, unique per call (pid, time, counter, hashed).
pub(crate) fn unique_hex() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = Sha256::new();
    h.update(std::process::id().to_le_bytes());
    h.update(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos()
            .to_le_bytes(),
    );
    h.update(COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    let digest = h.finalize();
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `GET /version` as Podman 4.3.1 and Docker 20.10 answer it (trimmed).
    #[test]
    fn podman_is_recognised_from_its_version_answer() {
        let podman = r#"{"Platform":{"Name":"linux/amd64/debian-12"},"Components":[
            {"Name":"Podman Engine","Version":"4.3.1","Details":{"APIVersion":"4.3.1"}},
            {"Name":"Conmon","Version":"conmon version 2.1.6"}],
            "Version":"4.3.1","ApiVersion":"1.41","MinAPIVersion":"1.24","Os":"linux"}"#;
        let docker = r#"{"Platform":{"Name":"Docker Engine - Community"},"Components":[
            {"Name":"Engine","Version":"20.10.24","Details":{"ApiVersion":"1.41"}},
            {"Name":"containerd","Version":"1.6.20"},{"Name":"runc","Version":"1.1.5"}],
            "Version":"20.10.24","ApiVersion":"1.41","MinAPIVersion":"1.12","Os":"linux"}"#;
        let parse = |s: &str| serde_json::from_str::<bollard::models::SystemVersion>(s).unwrap();
        assert!(is_podman_version(&parse(podman)));
        assert!(!is_podman_version(&parse(docker)));
        assert!(!is_podman_version(&parse("{}")));
    }

    #[test]
    fn labels_outside_the_namespace() {
        validate_label("team", "grading").unwrap();
        validate_label("dev.shellboxer", "").unwrap();
        for (k, v) in [
            ("", "x"),
            ("a\0b", "x"),
            ("a", "x\0"),
            ("dev.shellbox.owner-pid", "1"),
        ] {
            assert!(
                matches!(validate_label(k, v), Err(Error::InvalidInput(_))),
                "{k:?}"
            );
        }
    }

    #[test]
    fn names_are_unique_and_shaped() {
        let a = container_name();
        let b = container_name();
        assert_ne!(a, b);
        assert!(a.starts_with("shellbox-"));
        assert_eq!(a.len(), "shellbox-".len() + 32);
        assert!(a["shellbox-".len()..]
            .chars()
            .all(|c| c.is_ascii_hexdigit()));
    }
}
