//! The JSON forms of the protocol (PROTOCOL.md): each method's params and result.
//!
//! Specs, commands and results have the field names, tags, defaults and units of the core
//! types' serde forms ([`MachineSpec`], [`Command`], [`CommandResult`], [`ExitStatus`],
//! [`DownloadLimits`]): durations are fractional seconds, enums snake_case, an image source
//! is tagged by `kind`. Two differences make them a wire format: bytes are base64 strings
//! (standard alphabet, padded), and every object refuses fields it does not know, so a typo
//! is an error rather than a silently ignored option. The conversions below destructure the
//! core structs without `..`, so a field added to the core fails to compile here until the
//! protocol carries it; `tests/serve.rs` checks the JSON shapes against the core's serde.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    Command, CommandResult, DownloadLimits, Error, ExitReason, ExitStatus, ImageSource,
    MachineSpec, NetworkPolicy, DEFAULT_OUTPUT_LIMIT_BYTES, DEFAULT_WORKDIR,
};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// Bytes as a base64 string.
pub fn encode_bytes(bytes: &[u8]) -> String {
    B64.encode(bytes)
}

fn decode_bytes(field: &str, text: &str) -> Result<Vec<u8>, Error> {
    B64.decode(text)
        .map_err(|e| Error::invalid(format!("{field} is not valid base64: {e}")))
}

fn seconds(field: &str, value: Option<f64>) -> Result<Option<Duration>, Error> {
    value
        .map(|s| {
            Duration::try_from_secs_f64(s).map_err(|_| {
                Error::invalid(format!(
                    "{field} must be a finite, non-negative number of seconds below 2^64, not {s:?}"
                ))
            })
        })
        .transpose()
}

/// [`NetworkPolicy`]: `"deny"` (default) or `"allow"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// Loopback only.
    #[default]
    Deny,
    /// The host's network (local) or the default bridge (docker).
    Allow,
}

/// [`crate::Mount`]: a read-only host path shown at another guest path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Mount {
    /// The host file or directory.
    pub host: String,
    /// The absolute, normalised guest path where it appears.
    pub guest: String,
}

/// [`crate::HostImage`]: host programs for the local backend.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct HostImage {
    /// Host directories mounted read-only at their own path.
    pub read_only: Vec<String>,
    /// Directories put first on `PATH`, in order (not mounted by themselves).
    pub bin_dirs: Vec<String>,
    /// Host paths mounted read-only at other guest paths.
    pub mounts: Vec<Mount>,
}

/// [`crate::DockerImage`]: an image the engine already has (never pulled).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DockerImage {
    /// An image reference or ID.
    pub reference: String,
}

/// [`crate::RegistryCredentials`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RegistryCredentials {
    /// Account name.
    pub username: String,
    /// Password or token.
    pub password: String,
}

/// [`crate::RegistryImage`]: an image the engine pulls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RegistryImage {
    /// A reference such as `ghcr.io/org/img:tag` (no scheme).
    pub reference: String,
    /// Optional credentials for the registry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<RegistryCredentials>,
}

/// [`crate::DockerfileSource`]: an image the engine builds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DockerfileSource {
    /// The build context directory on the host.
    pub context: String,
    /// The Dockerfile on the host.
    pub dockerfile: String,
}

/// [`crate::ImageArchive`]: a `docker save` tarball the engine loads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImageArchive {
    /// The tarball on the host.
    pub path: String,
}

/// [`crate::SimBuiltins`]: the simulator's own commands (no fields).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SimBuiltins {}

/// [`crate::PackageSpec`]: software by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct PackageSpec {
    /// PyPI requirements (e.g. `six==1.17.0`); `null` = no Python, `[]` = CPython only.
    pub pypi_packages: Option<Vec<String>>,
    /// Programs that must be executable on the machine's `PATH`.
    pub tools: Vec<String>,
}

/// [`ImageSource`], tagged by `kind`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Source {
    /// Host programs (local).
    Host(HostImage),
    /// An image the Docker Engine already has.
    Docker(DockerImage),
    /// An image pulled from a registry.
    Registry(RegistryImage),
    /// An image built from a Dockerfile.
    Dockerfile(DockerfileSource),
    /// An image loaded from a `docker save` archive.
    Archive(ImageArchive),
    /// The simulator's built-in commands.
    Sim(SimBuiltins),
    /// Software by name (local; sim without Python).
    Packages(PackageSpec),
}

fn default_workdir() -> String {
    DEFAULT_WORKDIR.to_string()
}

/// [`MachineSpec`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// Where programs come from.
    pub source: Source,
    /// Working directory of commands without their own `cwd`; default `/workspace`.
    #[serde(default = "default_workdir")]
    pub workdir: String,
    /// Environment of every command.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Network access; default `deny`.
    #[serde(default)]
    pub network: Network,
    /// Memory limit in MiB.
    #[serde(default)]
    pub memory_mb: Option<u64>,
    /// CPU limit in whole CPUs.
    #[serde(default)]
    pub cpus: Option<u32>,
    /// Writable storage limit in MiB.
    #[serde(default)]
    pub storage_mb: Option<u64>,
    /// GPUs to attach; 0 means none.
    #[serde(default)]
    pub gpus: u32,
    /// Seconds the backend may take to start the machine.
    #[serde(default)]
    pub startup_timeout: Option<f64>,
    /// The most processes (threads included) the machine may hold at once; default 1024.
    #[serde(default = "default_pids_limit")]
    pub pids_limit: u32,
}

fn default_pids_limit() -> u32 {
    crate::DEFAULT_PIDS_LIMIT
}

impl Spec {
    /// The core spec.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a negative or non-finite `startup_timeout`.
    pub fn into_core(self) -> Result<MachineSpec, Error> {
        let Spec {
            source,
            workdir,
            env,
            network,
            memory_mb,
            cpus,
            storage_mb,
            gpus,
            startup_timeout,
            pids_limit,
        } = self;
        let source = match source {
            Source::Host(HostImage {
                read_only,
                bin_dirs,
                mounts,
            }) => ImageSource::Host(crate::HostImage {
                read_only: read_only.into_iter().map(PathBuf::from).collect(),
                bin_dirs: bin_dirs.into_iter().map(PathBuf::from).collect(),
                mounts: mounts
                    .into_iter()
                    .map(|Mount { host, guest }| crate::Mount {
                        host: host.into(),
                        guest,
                    })
                    .collect(),
            }),
            Source::Docker(DockerImage { reference }) => {
                ImageSource::Docker(crate::DockerImage { reference })
            }
            Source::Registry(RegistryImage {
                reference,
                credentials,
            }) => ImageSource::Registry(crate::RegistryImage {
                reference,
                credentials: credentials.map(|RegistryCredentials { username, password }| {
                    crate::RegistryCredentials { username, password }
                }),
            }),
            Source::Dockerfile(DockerfileSource {
                context,
                dockerfile,
            }) => ImageSource::Dockerfile(crate::DockerfileSource {
                context: context.into(),
                dockerfile: dockerfile.into(),
            }),
            Source::Archive(ImageArchive { path }) => {
                ImageSource::Archive(crate::ImageArchive { path: path.into() })
            }
            Source::Sim(SimBuiltins {}) => ImageSource::Sim(crate::SimBuiltins {}),
            Source::Packages(PackageSpec {
                pypi_packages,
                tools,
            }) => ImageSource::Packages(crate::PackageSpec {
                pypi_packages,
                tools,
            }),
        };
        let network = match network {
            Network::Deny => NetworkPolicy::Deny,
            Network::Allow => NetworkPolicy::Allow,
        };
        // Exhaustive: a new core field fails to compile here.
        let spec = MachineSpec {
            source,
            workdir,
            env,
            network,
            memory_mb,
            cpus,
            storage_mb,
            gpus,
            startup_timeout: seconds("startup_timeout", startup_timeout)?,
            pids_limit,
        };
        Ok(spec)
    }

    /// The wire form of a core spec (a source this protocol does not know yet is an error).
    ///
    /// # Errors
    /// [`Error::Unsupported`] for an image source this protocol version cannot carry.
    pub fn from_core(spec: &MachineSpec) -> Result<Spec, Error> {
        let MachineSpec {
            source,
            workdir,
            env,
            network,
            memory_mb,
            cpus,
            storage_mb,
            gpus,
            startup_timeout,
            pids_limit,
        } = spec.clone();
        let path = |p: PathBuf| p.to_string_lossy().into_owned();
        let source = match source {
            ImageSource::Host(crate::HostImage {
                read_only,
                bin_dirs,
                mounts,
            }) => Source::Host(HostImage {
                read_only: read_only.into_iter().map(path).collect(),
                bin_dirs: bin_dirs.into_iter().map(path).collect(),
                mounts: mounts
                    .into_iter()
                    .map(|crate::Mount { host, guest }| Mount {
                        host: path(host),
                        guest,
                    })
                    .collect(),
            }),
            ImageSource::Docker(crate::DockerImage { reference }) => {
                Source::Docker(DockerImage { reference })
            }
            ImageSource::Registry(crate::RegistryImage {
                reference,
                credentials,
            }) => Source::Registry(RegistryImage {
                reference,
                credentials: credentials.map(
                    |crate::RegistryCredentials { username, password }| RegistryCredentials {
                        username,
                        password,
                    },
                ),
            }),
            ImageSource::Dockerfile(crate::DockerfileSource {
                context,
                dockerfile,
            }) => Source::Dockerfile(DockerfileSource {
                context: path(context),
                dockerfile: path(dockerfile),
            }),
            ImageSource::Archive(crate::ImageArchive { path: p }) => {
                Source::Archive(ImageArchive { path: path(p) })
            }
            ImageSource::Sim(crate::SimBuiltins {}) => Source::Sim(SimBuiltins {}),
            ImageSource::Packages(crate::PackageSpec {
                pypi_packages,
                tools,
            }) => Source::Packages(PackageSpec {
                pypi_packages,
                tools,
            }),
            #[allow(unreachable_patterns)]
            other => {
                return Err(Error::unsupported(format!(
                    "the serve protocol cannot carry image source {:?} yet",
                    other.kind()
                )))
            }
        };
        Ok(Spec {
            source,
            workdir,
            env,
            network: match network {
                NetworkPolicy::Deny => Network::Deny,
                NetworkPolicy::Allow => Network::Allow,
            },
            memory_mb,
            cpus,
            storage_mb,
            gpus,
            startup_timeout: startup_timeout.map(|d| d.as_secs_f64()),
            pids_limit,
        })
    }
}

fn default_limit() -> u64 {
    DEFAULT_OUTPUT_LIMIT_BYTES
}

/// [`Command`], with `stdin` in base64.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WireCommand {
    /// Program and arguments; must not be empty.
    pub argv: Vec<String>,
    /// Working directory; `null` uses the spec's workdir.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Variables for this command, over the spec's.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Bytes written to stdin (base64), which is then closed.
    #[serde(default)]
    pub stdin: String,
    /// Deadline in seconds; `null` waits forever.
    #[serde(default)]
    pub timeout: Option<f64>,
    /// Bytes kept per stream; default 1,048,576.
    #[serde(default = "default_limit")]
    pub output_limit_bytes: u64,
    /// User name or numeric UID; `null` keeps the backend's default user.
    #[serde(default)]
    pub user: Option<String>,
}

impl WireCommand {
    /// The core command.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for bad base64 in `stdin` or a bad `timeout`.
    pub fn into_core(self) -> Result<Command, Error> {
        let WireCommand {
            argv,
            cwd,
            env,
            stdin,
            timeout,
            output_limit_bytes,
            user,
        } = self;
        Ok(Command {
            argv,
            cwd,
            env,
            stdin: decode_bytes("stdin", &stdin)?.into(),
            timeout: seconds("timeout", timeout)?,
            output_limit_bytes,
            user,
        })
    }

    /// The wire form of a core command.
    pub fn from_core(command: &Command) -> WireCommand {
        let Command {
            argv,
            cwd,
            env,
            stdin,
            timeout,
            output_limit_bytes,
            user,
        } = command.clone();
        WireCommand {
            argv,
            cwd,
            env,
            stdin: encode_bytes(&stdin),
            timeout: timeout.map(|d| d.as_secs_f64()),
            output_limit_bytes,
            user,
        }
    }
}

/// [`ExitReason`]: `"exited"` or `"timed_out"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// It finished by itself.
    Exited,
    /// It hit its own timeout and was killed.
    TimedOut,
}

impl From<ExitReason> for Reason {
    fn from(reason: ExitReason) -> Self {
        match reason {
            ExitReason::Exited => Reason::Exited,
            ExitReason::TimedOut => Reason::TimedOut,
        }
    }
}

/// The result of `run`: [`CommandResult`] with stdout and stderr in base64.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WireResult {
    /// The shell-style exit code (128 + N for signal N); `null` when timed out.
    pub exit_code: Option<i32>,
    /// Captured stdout (base64), at most the command's limit.
    pub stdout: String,
    /// Captured stderr (base64), at most the command's limit.
    pub stderr: String,
    /// More stdout was written than kept.
    pub stdout_truncated: bool,
    /// More stderr was written than kept.
    pub stderr_truncated: bool,
    /// Why the command ended.
    pub reason: Reason,
}

impl From<&CommandResult> for WireResult {
    fn from(result: &CommandResult) -> Self {
        let CommandResult {
            exit_code,
            stdout,
            stderr,
            stdout_truncated,
            stderr_truncated,
            reason,
        } = result;
        WireResult {
            exit_code: *exit_code,
            stdout: encode_bytes(stdout),
            stderr: encode_bytes(stderr),
            stdout_truncated: *stdout_truncated,
            stderr_truncated: *stderr_truncated,
            reason: (*reason).into(),
        }
    }
}

/// The result of `run_stream`: [`ExitStatus`], after the output events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WireExitStatus {
    /// The shell-style exit code; `null` when timed out.
    pub exit_code: Option<i32>,
    /// Why the command ended.
    pub reason: Reason,
    /// More stdout was written than the limit.
    pub stdout_truncated: bool,
    /// More stderr was written than the limit.
    pub stderr_truncated: bool,
}

impl From<&ExitStatus> for WireExitStatus {
    fn from(status: &ExitStatus) -> Self {
        let ExitStatus {
            exit_code,
            reason,
            stdout_truncated,
            stderr_truncated,
        } = status;
        WireExitStatus {
            exit_code: *exit_code,
            reason: (*reason).into(),
            stdout_truncated: *stdout_truncated,
            stderr_truncated: *stderr_truncated,
        }
    }
}

/// One output notification of `run_stream`: `{"stdout": "<base64>"}` or `{"stderr": ...}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WireEvent {
    /// Bytes written to stdout (within the limit), base64.
    Stdout(String),
    /// Bytes written to stderr (within the limit), base64.
    Stderr(String),
}

/// [`DownloadLimits`]; every field defaults to the core's default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Most entries in the result; default 1,000.
    #[serde(default = "limits_default::max_files")]
    pub max_files: usize,
    /// Most bytes in the result; default 64 MiB.
    #[serde(default = "limits_default::max_bytes")]
    pub max_bytes: u64,
    /// Most bytes of any one file; default 16 MiB.
    #[serde(default = "limits_default::max_file_bytes")]
    pub max_file_bytes: u64,
    /// Seconds each guest command may take; default 60.
    #[serde(default = "limits_default::timeout")]
    pub timeout: f64,
}

mod limits_default {
    use crate::DownloadLimits;
    pub(super) fn max_files() -> usize {
        DownloadLimits::default().max_files
    }
    pub(super) fn max_bytes() -> u64 {
        DownloadLimits::default().max_bytes
    }
    pub(super) fn max_file_bytes() -> u64 {
        DownloadLimits::default().max_file_bytes
    }
    pub(super) fn timeout() -> f64 {
        DownloadLimits::default().timeout.as_secs_f64()
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::from_core(&DownloadLimits::default())
    }
}

impl Limits {
    /// The core limits.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a bad `timeout`.
    pub fn into_core(self) -> Result<DownloadLimits, Error> {
        let Limits {
            max_files,
            max_bytes,
            max_file_bytes,
            timeout,
        } = self;
        Ok(DownloadLimits {
            max_files,
            max_bytes,
            max_file_bytes,
            timeout: seconds("timeout", Some(timeout))?.unwrap_or_default(),
        })
    }

    /// The wire form of core limits.
    pub fn from_core(limits: &DownloadLimits) -> Limits {
        let DownloadLimits {
            max_files,
            max_bytes,
            max_file_bytes,
            timeout,
        } = *limits;
        Limits {
            max_files,
            max_bytes,
            max_file_bytes,
            timeout: timeout.as_secs_f64(),
        }
    }
}

// ---- method params and results ----

/// Params of `factory`: the backend and its options, tagged by `backend`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "backend", rename_all = "snake_case")]
pub enum FactoryParams {
    /// The simulator; budgets default to the simulator's own.
    Sim(SimFactoryOptions),
    /// bubblewrap sandboxes on this host.
    Local(LocalFactoryOptions),
    /// One container per machine through the Docker Engine API.
    Docker(DockerFactoryOptions),
}

/// Options of a `sim` factory (`shellbox_sim::SimOptions`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SimFactoryOptions {
    /// CPU fuel units over a machine's life; default 10,000,000,000.
    #[serde(default)]
    pub cpu_fuel: Option<u64>,
    /// Bytes virtual files may hold; default 512 MiB.
    #[serde(default)]
    pub disk_bytes: Option<u64>,
    /// Cumulative output bytes over a machine's life; default 128 MiB.
    #[serde(default)]
    pub output_bytes: Option<u64>,
    /// The machine's one memory budget (variables, buffers, output and files together);
    /// default from the spec's `memory_mb`, else 2,048 MiB.
    #[serde(default)]
    pub memory_bytes: Option<u64>,
}

/// Options of a `local` factory (`shellbox_local::LocalOptions`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LocalFactoryOptions {
    /// Host directories mounted read-only at their own path in every machine.
    #[serde(default)]
    pub read_only: Vec<String>,
    /// Directories put on every command's `PATH`.
    #[serde(default)]
    pub bin_dirs: Vec<String>,
    /// The bwrap program; `null` tries each `bwrap` on `PATH`.
    #[serde(default)]
    pub bwrap: Option<String>,
    /// `PYTHONHASHSEED` of every command when set.
    #[serde(default)]
    pub hash_seed: Option<String>,
    /// Where `packages` sources' Python environments are built; `null` is
    /// `$HOME/.cache/shellbox/python`.
    #[serde(default)]
    pub package_cache: Option<String>,
    /// Their CPython version (`X.Y.Z`); `null` is the interpreter's, else `3.12.12`.
    #[serde(default)]
    pub python_version: Option<String>,
    /// A local CPython to build them from; `null` lets uv download one.
    #[serde(default)]
    pub python_interpreter: Option<String>,
    /// How machines show the host's system directories (`/usr`, `/bin`, `/lib*`, `/sbin`)
    /// and their private `/etc`; `null` is `read_only`.
    #[serde(default)]
    pub system_directories: Option<SystemDirectories>,
}

/// `shellbox_local::SystemDirectories`: how a local machine shows the host's system
/// directories and its private `/etc`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SystemDirectories {
    /// Bound read-only (the default): writes there fail in the machine.
    #[default]
    ReadOnly,
    /// Through a copy-on-write layer of each machine's own (an `apt-get install` or a tool
    /// in `/usr/local/bin` lands in the machine only and goes with it); needs a root host
    /// process and overlayfs (`sandbox_unavailable` naming what is missing otherwise).
    CopyOnWrite,
}

/// Options of a `docker` factory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DockerFactoryOptions {
    /// The engine's address (`unix:///path`, `tcp://host:port`); `null` uses `DOCKER_HOST`,
    /// else `unix:///var/run/docker.sock`.
    #[serde(default)]
    pub host: Option<String>,
    /// An OCI runtime for the containers (e.g. `runsc`).
    #[serde(default)]
    pub runtime: Option<String>,
}

/// Result of `factory`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FactoryResult {
    /// The factory's handle for `create` and `gc`.
    pub factory: u64,
    /// The backend's name.
    pub backend: String,
}

/// [`crate::CommandSemantics`]: `"linux_process"` or `"shell_simulator"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Semantics {
    /// Real Linux processes (local and docker).
    LinuxProcess,
    /// The shell simulator (sim).
    ShellSimulator,
}

/// [`crate::ExecutionRequirements`]: what a task needs from a backend.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Requirements {
    /// The command semantics the task was written for; `null` accepts any.
    pub command_semantics: Option<Semantics>,
    /// Capability names: `shell`, `filesystem`, `python`, `process`, `network`,
    /// `git_repository`.
    pub capabilities: Vec<String>,
    /// The image reference the task must run in; `null` accepts any.
    pub docker_image: Option<String>,
}

impl Requirements {
    /// The core requirements.
    pub fn into_core(self) -> crate::ExecutionRequirements {
        let Requirements {
            command_semantics,
            capabilities,
            docker_image,
        } = self;
        crate::ExecutionRequirements {
            command_semantics: command_semantics.map(|s| match s {
                Semantics::LinuxProcess => crate::CommandSemantics::LinuxProcess,
                Semantics::ShellSimulator => crate::CommandSemantics::ShellSimulator,
            }),
            capabilities,
            docker_image,
        }
    }
}

/// Params of `check_environment`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckEnvironmentParams {
    /// A factory handle.
    pub factory: u64,
    /// What the task needs; default: nothing beyond the spec.
    #[serde(default)]
    pub requirements: Requirements,
    /// The spec to check.
    pub spec: Spec,
}

/// Params of `create`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateParams {
    /// A factory handle.
    pub factory: u64,
    /// What to create.
    pub spec: Spec,
}

/// Result of `create`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateResult {
    /// The machine's handle.
    pub machine: u64,
}

/// Result of `snapshot`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SnapshotResult {
    /// The snapshot's handle.
    pub snapshot: u64,
}

/// Params of `create_from`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateFromParams {
    /// A factory handle.
    pub factory: u64,
    /// A snapshot handle (from `snapshot`).
    pub snapshot: u64,
    /// The new machine's spec (its env, network, user and limits apply as for `create`).
    pub spec: Spec,
}

/// Params of `fork`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkParams {
    /// A factory handle.
    pub factory: u64,
    /// The machine to fork.
    pub machine: u64,
    /// The fork's spec.
    pub spec: Spec,
}

/// Params of `delete_snapshot`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SnapshotParams {
    /// A snapshot handle.
    pub snapshot: u64,
}

/// Params of `run` and `run_stream`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunParams {
    /// A machine handle.
    pub machine: u64,
    /// What to run.
    pub command: WireCommand,
}

/// Params of `cancel`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelParams {
    /// The `id` of the request to cancel.
    pub id: serde_json::Value,
}

/// Result of `cancel`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelResult {
    /// Whether the request was still in flight (it then answers with kind `cancelled`).
    pub cancelled: bool,
}

/// Params of `upload`: a host path into the machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UploadParams {
    /// A machine handle.
    pub machine: u64,
    /// The host file or directory.
    pub source: String,
    /// The absolute guest path.
    pub target: String,
}

/// Params of `download`: a guest path to the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DownloadParams {
    /// A machine handle.
    pub machine: u64,
    /// The absolute guest path.
    pub source: String,
    /// The host path.
    pub target: String,
}

/// Params of `download_file`: one regular guest file to a host file, at most `max_bytes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DownloadFileParams {
    /// A machine handle.
    pub machine: u64,
    /// The absolute guest path of a regular file.
    pub source: String,
    /// The host file to write (replaced whole, or left as it was on any error).
    pub target: String,
    /// The most bytes the file may hold; one more is `download_limit_exceeded`.
    pub max_bytes: u64,
}

/// Result of `download_file`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DownloadFileResult {
    /// The size in bytes of the file written at `target`.
    pub bytes: u64,
}

/// Params of `download_files`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DownloadFilesParams {
    /// A machine handle.
    pub machine: u64,
    /// Absolute guest paths (files or directories).
    pub paths: Vec<String>,
    /// Budgets; each field defaults to the core's default.
    #[serde(default)]
    pub limits: Limits,
}

/// Result of `download_files`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DownloadFilesResult {
    /// Absolute guest path to the file's bytes (base64).
    pub files: BTreeMap<String, String>,
}

/// Params of `close`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MachineParams {
    /// A machine handle.
    pub machine: u64,
}

/// Params of `open_shell`, `interrupt` and `close_shell`: the machine whose persistent shell
/// (one per machine) is meant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShellParams {
    /// A machine handle.
    pub machine: u64,
}

/// Result of `open_shell`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenShellResult {
    /// True for a shell on a pseudo-terminal (local, docker); false for the simulator's.
    pub interactive: bool,
}

fn default_execute_wait() -> f64 {
    crate::DEFAULT_EXECUTE_WAIT.as_secs_f64()
}

/// Params of `execute`: a command line for the machine's persistent shell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecuteParams {
    /// A machine handle.
    pub machine: u64,
    /// The shell command line.
    pub command: String,
    /// Seconds to gather output before answering `running`; default 120.
    #[serde(default = "default_execute_wait")]
    pub wait: f64,
    /// Bytes of output kept from this call; default 1,048,576.
    #[serde(default = "default_limit")]
    pub output_limit_bytes: u64,
}

/// Params of `read`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadParams {
    /// A machine handle.
    pub machine: u64,
    /// Seconds to gather output; default 0.
    #[serde(default)]
    pub wait: f64,
    /// Bytes of output kept from this call; default 1,048,576.
    #[serde(default = "default_limit")]
    pub output_limit_bytes: u64,
}

/// Params of `write`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteParams {
    /// A machine handle.
    pub machine: u64,
    /// Bytes for the running command's terminal input (base64).
    pub data: String,
}

/// [`crate::ShellStatus`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WireShellStatus {
    /// The command is still running.
    Running,
    /// The command finished.
    Completed,
    /// The shell itself exited.
    Reset,
}

/// [`crate::ShellUpdate`], with `output` in base64.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WireShellUpdate {
    /// Output received during the call (base64).
    pub output: String,
    /// Where the command stands.
    pub status: WireShellStatus,
    /// The exit status when `completed`.
    pub exit_code: Option<i32>,
    /// More output arrived than the call's limit.
    pub truncated: bool,
}

impl From<&crate::ShellUpdate> for WireShellUpdate {
    fn from(update: &crate::ShellUpdate) -> Self {
        let crate::ShellUpdate {
            output,
            status,
            exit_code,
            truncated,
        } = update;
        WireShellUpdate {
            output: encode_bytes(output),
            status: match status {
                crate::ShellStatus::Running => WireShellStatus::Running,
                crate::ShellStatus::Completed => WireShellStatus::Completed,
                crate::ShellStatus::Reset => WireShellStatus::Reset,
            },
            exit_code: *exit_code,
            truncated: *truncated,
        }
    }
}

/// Decodes `write`'s data.
///
/// # Errors
/// [`Error::InvalidInput`] for bad base64.
pub fn decode_data(text: &str) -> Result<Vec<u8>, Error> {
    decode_bytes("data", text)
}

/// Seconds as a [`Duration`].
///
/// # Errors
/// [`Error::InvalidInput`] for a negative or non-finite number.
pub fn wait_seconds(value: f64) -> Result<Duration, Error> {
    Ok(seconds("wait", Some(value))?.unwrap_or_default())
}

/// Params of `gc`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GcParams {
    /// A factory handle (a docker one: the others leave nothing behind once their process ends).
    pub factory: u64,
}

/// Result of `gc` (`shellbox_docker::GcReport`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GcResult {
    /// Containers (docker) or machine directories (local) removed: their owner process no
    /// longer exists.
    pub removed: Vec<String>,
    /// Those of this host whose owner is alive.
    pub kept: usize,
    /// Those of other hosts, or (local) without a readable owner marker: left alone.
    pub other_hosts: usize,
    /// Those that could not be removed, with the reason.
    pub failed: Vec<(String, String)>,
}

/// An empty result (`{}`) of `upload`, `download`, `close` and the shell calls.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Empty {}

/// An error answer: `kind` is the core [`Error::kind`] (or a protocol kind, see PROTOCOL.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WireError {
    /// snake_case kind: `unsupported`, `invalid_input`, `closed`, `not_found`, `transfer`,
    /// `download_limit_exceeded`, `terminated`, `sandbox_unavailable`, `timed_out`,
    /// `backend`, `io`, or `cancelled`.
    pub kind: String,
    /// What went wrong, for people.
    pub message: String,
    /// Structured fields of the error (e.g. `path`, `reasons`, `protocol`).
    pub details: serde_json::Map<String, serde_json::Value>,
}

/// The JSON Schema (draft 2020-12) of every method's params and result, the request and
/// response envelopes, and the error; checked in as `PROTOCOL.schema.json`.
pub fn schema() -> serde_json::Value {
    use serde_json::json;
    let mut generator = schemars::generate::SchemaSettings::draft2020_12().into_generator();
    let method = |params: schemars::Schema, result: schemars::Schema, events: bool| {
        let mut m = json!({"params": params, "result": result});
        if events {
            m["event"] = json!({"$ref": "#/$defs/WireEvent"});
        }
        m
    };
    let methods = json!({
        "factory": method(generator.subschema_for::<FactoryParams>(), generator.subschema_for::<FactoryResult>(), false),
        "check_environment": method(generator.subschema_for::<CheckEnvironmentParams>(), generator.subschema_for::<Empty>(), false),
        "create": method(generator.subschema_for::<CreateParams>(), generator.subschema_for::<CreateResult>(), false),
        "run": method(generator.subschema_for::<RunParams>(), generator.subschema_for::<WireResult>(), false),
        "run_stream": method(generator.subschema_for::<RunParams>(), generator.subschema_for::<WireExitStatus>(), true),
        "cancel": method(generator.subschema_for::<CancelParams>(), generator.subschema_for::<CancelResult>(), false),
        "upload": method(generator.subschema_for::<UploadParams>(), generator.subschema_for::<Empty>(), false),
        "download": method(generator.subschema_for::<DownloadParams>(), generator.subschema_for::<Empty>(), false),
        "download_file": method(generator.subschema_for::<DownloadFileParams>(), generator.subschema_for::<DownloadFileResult>(), false),
        "download_files": method(generator.subschema_for::<DownloadFilesParams>(), generator.subschema_for::<DownloadFilesResult>(), false),
        "close": method(generator.subschema_for::<MachineParams>(), generator.subschema_for::<Empty>(), false),
        "snapshot": method(generator.subschema_for::<MachineParams>(), generator.subschema_for::<SnapshotResult>(), false),
        "create_from": method(generator.subschema_for::<CreateFromParams>(), generator.subschema_for::<CreateResult>(), false),
        "fork": method(generator.subschema_for::<ForkParams>(), generator.subschema_for::<CreateResult>(), false),
        "delete_snapshot": method(generator.subschema_for::<SnapshotParams>(), generator.subschema_for::<Empty>(), false),
        "gc": method(generator.subschema_for::<GcParams>(), generator.subschema_for::<GcResult>(), false),
        "open_shell": method(generator.subschema_for::<ShellParams>(), generator.subschema_for::<OpenShellResult>(), false),
        "execute": method(generator.subschema_for::<ExecuteParams>(), generator.subschema_for::<WireShellUpdate>(), false),
        "read": method(generator.subschema_for::<ReadParams>(), generator.subschema_for::<WireShellUpdate>(), false),
        "write": method(generator.subschema_for::<WriteParams>(), generator.subschema_for::<Empty>(), false),
        "interrupt": method(generator.subschema_for::<ShellParams>(), generator.subschema_for::<Empty>(), false),
        "close_shell": method(generator.subschema_for::<ShellParams>(), generator.subschema_for::<Empty>(), false),
    });
    let _ = generator.subschema_for::<WireEvent>();
    let _ = generator.subschema_for::<WireError>();
    let defs = generator.take_definitions(true);
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "shellbox serve protocol",
        "description": "JSON lines over stdio (PROTOCOL.md). A request is {\"id\", \"method\", \"params\"}; an answer is {\"id\", \"result\"} or {\"id\", \"error\"}; run_stream also sends {\"id\", \"event\"} before its result. `methods` maps each method to the schema of its params and result.",
        "methods": methods,
        "$defs": defs,
    })
}
