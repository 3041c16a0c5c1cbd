//! What to create: [`MachineSpec`] and its [`ImageSource`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::validate::{validate_env, validate_guest_path};
use crate::Error;

/// The default working directory of a machine, as in the reference library.
pub const DEFAULT_WORKDIR: &str = "/workspace";

/// The largest [`MachineSpec::pids_limit`]: Linux's `PID_MAX_LIMIT` on 64-bit systems
/// (2²²), the most a pids cgroup's `pids.max` or a container's `PidsLimit` takes (the
/// kernel refuses a larger value with `EINVAL`).
pub const MAX_PIDS_LIMIT: u32 = 4_194_304;

/// The default [`MachineSpec::pids_limit`]: at most this many processes (and threads) at
/// once in one machine. Docker's own default is unlimited (`pids.max = max`), which lets a
/// fork bomb reach the host's `pid_max`; 1024 leaves room for parallel builds and test
/// runners.
pub const DEFAULT_PIDS_LIMIT: u32 = 1024;

/// Whether commands may reach the network.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkPolicy {
    /// Loopback only (a fresh network namespace on local, network mode `none` on Docker).
    #[default]
    Deny,
    /// The host's network (local) or the default bridge (Docker).
    Allow,
}

/// A read-only host path shown at another path inside the machine.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Mount {
    /// The host file or directory.
    pub host: PathBuf,
    /// The absolute, normalised guest path where it appears.
    pub guest: String,
}

/// Host programs for the local backend: directories mounted read-only at their own paths,
/// directories put first on `PATH`, and mounts at other paths.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HostImage {
    /// Host directories mounted read-only at their own path.
    pub read_only: Vec<PathBuf>,
    /// Directories prepended to `PATH`, in order (not mounted by themselves).
    pub bin_dirs: Vec<PathBuf>,
    /// Host paths mounted read-only at other guest paths.
    pub mounts: Vec<Mount>,
}

/// An image the Docker Engine already has; it is never pulled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DockerImage {
    /// An image reference or ID, e.g. `busybox:latest`.
    pub reference: String,
}

/// Credentials for a registry, sent to the engine with a pull (Docker's `X-Registry-Auth`).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistryCredentials {
    /// Account name.
    pub username: String,
    /// Password or token.
    pub password: String,
}

impl std::fmt::Debug for RegistryCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryCredentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// An image pulled from a registry by the engine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistryImage {
    /// A reference such as `ghcr.io/org/img:tag` or `host:5000/img@sha256:<hex>` (no scheme).
    pub reference: String,
    /// Optional credentials for the registry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<RegistryCredentials>,
}

/// An image built by the engine from a Dockerfile and its context directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DockerfileSource {
    /// The build context directory.
    pub context: PathBuf,
    /// The Dockerfile (inside or outside the context).
    pub dockerfile: PathBuf,
}

/// An image tarball in `docker save` format, loaded by the engine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageArchive {
    /// The tarball on the host.
    pub path: PathBuf,
}

/// The simulator's own commands and virtual filesystem (no host or image content).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimBuiltins {}

/// Software by name (REFERENCE.md 1.2): what a machine needs, not where it lives. The
/// backend finds or builds it.
///
/// - `pypi_packages`: `None` gives a shell only (the host's or the simulator's programs);
///   `Some(vec![])` gives CPython only; `Some(requirements)` gives CPython with these PyPI
///   requirements (e.g. `six==1.17.0`), locked with hashes and installed from binary wheels
///   only (the local backend, through `shellbox-pyenv`'s `resolve_python_environment`).
/// - `tools`: program names (no `/`) that must be found executable on the machine's
///   `PATH` (REFERENCE 4.6: "each tool is found on PATH and executable"), judged with the
///   spec's own `PATH` when its env sets one; a backend that cannot provide one refuses the
///   spec with [`Error::Unsupported`] naming it. A path (`/usr/bin/env`, `../bin/sh`) is
///   [`Error::InvalidInput`] on every backend: what a path names depends on links and
///   mounts that only the running machine resolves, so a check before create could not
///   give create's verdict.
///
/// Local accepts it (Python through uv), sim accepts it with `pypi_packages: None` and
/// tools from its command table, docker refuses it (build an image with
/// [`ImageSource::Dockerfile`] instead).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PackageSpec {
    /// PyPI requirements; `None` = no Python, `Some(vec![])` = CPython only.
    pub pypi_packages: Option<Vec<String>>,
    /// Programs that must be executable on the machine's `PATH`.
    pub tools: Vec<String>,
}

impl PackageSpec {
    /// A shell only (`pypi_packages: None`), no required tools.
    pub fn shell() -> Self {
        Self::default()
    }

    /// CPython with these PyPI requirements (none: CPython only).
    pub fn python<I, S>(requirements: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            pypi_packages: Some(requirements.into_iter().map(Into::into).collect()),
            tools: Vec::new(),
        }
    }

    /// Adds one required tool.
    pub fn tool(mut self, tool: impl Into<String>) -> Self {
        self.tools.push(tool.into());
        self
    }

    /// Why `requirement` is not an acceptable PyPI requirement line, or `None` when it is:
    /// it must be non-empty (after trimming), must not start with `-` (no option such as
    /// `--index-url` or `-e` can be smuggled into the requirements file) and must hold no
    /// CR, LF or NUL (one requirement per line). The rule of the reference library's
    /// `resolve_python_environment`.
    pub fn requirement_problem(requirement: &str) -> Option<&'static str> {
        let trimmed = requirement.trim();
        if trimmed.is_empty() {
            Some("a requirement must not be empty")
        } else if trimmed.starts_with('-') {
            Some("a requirement must not start with '-' (options are not accepted)")
        } else if requirement.contains(['\r', '\n', '\0']) {
            Some("a requirement must not contain CR, LF or NUL")
        } else {
            None
        }
    }

    /// Checks every requirement ([`PackageSpec::requirement_problem`]) and tool (non-empty,
    /// no CR, LF or NUL, no leading `-`).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the first bad requirement or tool.
    pub fn validate(&self) -> Result<(), Error> {
        for requirement in self.pypi_packages.iter().flatten() {
            if let Some(problem) = Self::requirement_problem(requirement) {
                return Err(Error::invalid(format!(
                    "pypi_packages: {problem}: {requirement:?}"
                )));
            }
        }
        for tool in &self.tools {
            if tool.is_empty() || tool.starts_with('-') || tool.contains(['/', '\r', '\n', '\0']) {
                return Err(Error::invalid(format!(
                    "tools: a tool must be a program name found on PATH (non-empty, no '/', \
                     no leading '-', no CR, LF or NUL): {tool:?}"
                )));
            }
        }
        Ok(())
    }
}

/// Where a machine's programs come from. Each backend accepts the variants it can run and
/// answers the rest with [`Error::Unsupported`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ImageSource {
    /// Host programs (local backend).
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
    /// Software by name: Python packages and tools the backend provides (local, sim).
    Packages(PackageSpec),
}

impl ImageSource {
    /// The variant's snake_case name (`"host"`, `"docker"`, ...), for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            ImageSource::Host(_) => "host",
            ImageSource::Docker(_) => "docker",
            ImageSource::Registry(_) => "registry",
            ImageSource::Dockerfile(_) => "dockerfile",
            ImageSource::Archive(_) => "archive",
            ImageSource::Sim(_) => "sim",
            ImageSource::Packages(_) => "packages",
        }
    }
}

/// What machine to create.
///
/// Build one with [`MachineSpec::new`] and the builder methods, or fill the public fields
/// and call [`MachineSpec::validate`]. Backends validate again before acquiring anything.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MachineSpec {
    /// Where programs come from.
    pub source: ImageSource,
    /// Working directory of commands without their own `cwd`; created at start. Default
    /// `/workspace`. Empty keeps the backend's default (the image's on Docker, `/` on local).
    #[serde(default = "default_workdir")]
    pub workdir: String,
    /// Environment applied to every command (a command's own `env` wins).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Network access; default [`NetworkPolicy::Deny`].
    #[serde(default)]
    pub network: NetworkPolicy,
    /// Memory limit in MiB.
    #[serde(default)]
    pub memory_mb: Option<u64>,
    /// CPU limit in whole CPUs; must be > 0 when set.
    #[serde(default)]
    pub cpus: Option<u32>,
    /// Writable storage limit in MiB; must be > 0 when set.
    #[serde(default)]
    pub storage_mb: Option<u64>,
    /// GPUs to attach; 0 means none.
    #[serde(default)]
    pub gpus: u32,
    /// How long a backend may take to start the machine (honoured where a backend has a
    /// slow start; ignored by the others, as in the reference).
    #[serde(default, with = "crate::serde_secs::option")]
    pub startup_timeout: Option<Duration>,
    /// The most processes (threads included) the machine may hold at once; a `fork` or
    /// `clone` beyond it fails with `EAGAIN` inside the machine. Must be > 0; default
    /// [`DEFAULT_PIDS_LIMIT`]. Docker: the container's `HostConfig.PidsLimit` (the pids
    /// cgroup's `pids.max`). Local: the machine's pids cgroup, which also holds its own
    /// tasks (bwrap, the supervisor, a keeper per command), so at least 16
    /// (`shellbox_local::MIN_PIDS_LIMIT`).
    #[serde(default = "default_pids_limit")]
    pub pids_limit: u32,
}

fn default_pids_limit() -> u32 {
    DEFAULT_PIDS_LIMIT
}

fn default_workdir() -> String {
    DEFAULT_WORKDIR.to_string()
}

impl MachineSpec {
    /// A spec with this source and every other field at its default.
    pub fn new(source: ImageSource) -> Self {
        Self {
            source,
            workdir: default_workdir(),
            env: BTreeMap::new(),
            network: NetworkPolicy::Deny,
            memory_mb: None,
            cpus: None,
            storage_mb: None,
            gpus: 0,
            startup_timeout: None,
            pids_limit: DEFAULT_PIDS_LIMIT,
        }
    }

    /// A spec for the simulator ([`ImageSource::Sim`]).
    pub fn sim() -> Self {
        Self::new(ImageSource::Sim(SimBuiltins::default()))
    }

    /// A spec for the local backend with the host's system programs only.
    pub fn host() -> Self {
        Self::new(ImageSource::Host(HostImage::default()))
    }

    /// A spec for an image the Docker Engine already has.
    pub fn docker(reference: impl Into<String>) -> Self {
        Self::new(ImageSource::Docker(DockerImage {
            reference: reference.into(),
        }))
    }

    /// A spec for software by name ([`ImageSource::Packages`]), e.g.
    /// `MachineSpec::packages(PackageSpec::python(["six==1.17.0"]).tool("python3"))`.
    pub fn packages(packages: PackageSpec) -> Self {
        Self::new(ImageSource::Packages(packages))
    }

    /// Sets the working directory (absolute and normalised, or empty).
    pub fn workdir(mut self, workdir: impl Into<String>) -> Self {
        self.workdir = workdir.into();
        self
    }

    /// Adds one environment variable for every command.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// Sets the network policy.
    pub fn network(mut self, network: NetworkPolicy) -> Self {
        self.network = network;
        self
    }

    /// Sets the memory limit in MiB.
    pub fn memory_mb(mut self, memory_mb: u64) -> Self {
        self.memory_mb = Some(memory_mb);
        self
    }

    /// Sets the CPU limit in whole CPUs.
    pub fn cpus(mut self, cpus: u32) -> Self {
        self.cpus = Some(cpus);
        self
    }

    /// Sets the storage limit in MiB.
    pub fn storage_mb(mut self, storage_mb: u64) -> Self {
        self.storage_mb = Some(storage_mb);
        self
    }

    /// Sets the number of GPUs.
    pub fn gpus(mut self, gpus: u32) -> Self {
        self.gpus = gpus;
        self
    }

    /// Sets how long the backend may take to start the machine.
    pub fn startup_timeout(mut self, timeout: Duration) -> Self {
        self.startup_timeout = Some(timeout);
        self
    }

    /// Sets the most processes (threads included) the machine may hold at once (> 0).
    pub fn pids_limit(mut self, pids_limit: u32) -> Self {
        self.pids_limit = pids_limit;
        self
    }

    /// Checks the values every backend relies on.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when `workdir` is neither empty nor an absolute normalised
    /// path, an env name is not `[A-Za-z_][A-Za-z0-9_]*` or a key or value holds NUL, a
    /// `NAME=value` is longer than one `execve(2)` string may be (Linux's `MAX_ARG_STRLEN`:
    /// [`validate_exec_strings`](crate::validate::validate_exec_strings); every command
    /// gets the spec's env),
    /// `cpus`, `memory_mb`, `storage_mb` or `pids_limit` is 0, `pids_limit` is above
    /// [`MAX_PIDS_LIMIT`], or a mount's guest path is
    /// not absolute and normalised, or a [`PackageSpec`] has a bad requirement or tool
    /// ([`PackageSpec::validate`]). [`Error::Unsupported`] when `workdir` is inside `/proc`,
    /// `/sys` or `/dev` ([`validate_not_kernel_dir`](crate::validate::validate_not_kernel_dir)).
    pub fn validate(&self) -> Result<(), Error> {
        if !self.workdir.is_empty() {
            validate_guest_path(&self.workdir).map_err(|e| match e {
                Error::InvalidInput(m) => Error::InvalidInput(format!("workdir: {m}")),
                other => other,
            })?;
            crate::validate::validate_not_kernel_dir("workdir", &self.workdir)?;
        }
        validate_env(&self.env)?;
        crate::validate::validate_exec_strings(
            std::iter::empty(),
            self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        )
        .map_err(|e| match e {
            Error::InvalidInput(m) => Error::InvalidInput(format!("spec env: {m}")),
            other => other,
        })?;
        if self.cpus == Some(0) {
            return Err(Error::invalid("cpus must be > 0 when set"));
        }
        if self.storage_mb == Some(0) {
            return Err(Error::invalid("storage_mb must be > 0 when set"));
        }
        if self.memory_mb == Some(0) {
            return Err(Error::invalid("memory_mb must be > 0 when set"));
        }
        if self.pids_limit == 0 {
            return Err(Error::invalid("pids_limit must be > 0"));
        }
        if self.pids_limit > MAX_PIDS_LIMIT {
            return Err(Error::invalid(format!(
                "pids_limit {} is above {MAX_PIDS_LIMIT}, the most processes Linux allows \
                 (PID_MAX_LIMIT)",
                self.pids_limit
            )));
        }
        match &self.source {
            ImageSource::Host(image) => {
                for mount in &image.mounts {
                    validate_guest_path(&mount.guest)?;
                }
            }
            ImageSource::Packages(packages) => packages.validate()?,
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_validation() {
        let spec = MachineSpec::sim();
        assert_eq!(spec.workdir, "/workspace");
        assert_eq!(spec.network, NetworkPolicy::Deny);
        spec.validate().unwrap();
        assert!(MachineSpec::sim().cpus(0).validate().is_err());
        assert!(MachineSpec::sim().storage_mb(0).validate().is_err());
        assert_eq!(spec.pids_limit, DEFAULT_PIDS_LIMIT);
        assert!(MachineSpec::sim().pids_limit(0).validate().is_err());
        MachineSpec::sim().pids_limit(1).validate().unwrap();
        MachineSpec::sim()
            .pids_limit(MAX_PIDS_LIMIT)
            .validate()
            .unwrap();
        assert!(MachineSpec::sim()
            .pids_limit(MAX_PIDS_LIMIT + 1)
            .validate()
            .is_err());
        assert!(MachineSpec::sim().workdir("rel").validate().is_err());
        assert!(MachineSpec::sim().workdir("/a/../b").validate().is_err());
        MachineSpec::sim().workdir("").validate().unwrap();
        MachineSpec::sim().workdir("/").validate().unwrap();
        assert!(MachineSpec::sim()
            .workdir("/proc")
            .validate()
            .unwrap_err()
            .is_unsupported());
        assert!(MachineSpec::sim().env("1X", "v").validate().is_err());
        assert!(MachineSpec::sim().env("X", "a\0b").validate().is_err());
        let max = crate::validate::EXEC_STRING_MAX_BYTES;
        MachineSpec::sim()
            .env("X", "a".repeat(max - 3))
            .validate()
            .unwrap();
        let e = MachineSpec::sim()
            .env("X", "a".repeat(max - 2))
            .validate()
            .unwrap_err();
        assert!(
            matches!(&e, Error::InvalidInput(m) if m.contains("MAX_ARG_STRLEN")),
            "{e:?}"
        );
    }

    #[test]
    fn json_round_trip_every_source() {
        let sources = vec![
            ImageSource::Host(HostImage {
                read_only: vec!["/opt/x".into()],
                bin_dirs: vec!["/opt/x/bin".into()],
                mounts: vec![Mount {
                    host: "/srv/data".into(),
                    guest: "/data".into(),
                }],
            }),
            ImageSource::Docker(DockerImage {
                reference: "busybox:latest".into(),
            }),
            ImageSource::Registry(RegistryImage {
                reference: "127.0.0.1:5000/img@sha256:00".into(),
                credentials: Some(RegistryCredentials {
                    username: "u".into(),
                    password: "p".into(),
                }),
            }),
            ImageSource::Dockerfile(DockerfileSource {
                context: "/ctx".into(),
                dockerfile: "/ctx/Dockerfile".into(),
            }),
            ImageSource::Archive(ImageArchive {
                path: "/img.tar".into(),
            }),
            ImageSource::Sim(SimBuiltins::default()),
            ImageSource::Packages(PackageSpec::default()),
            ImageSource::Packages(PackageSpec::python(Vec::<String>::new())),
            ImageSource::Packages(PackageSpec::python(["six==1.17.0"]).tool("python3")),
        ];
        for source in sources {
            let mut spec = MachineSpec::new(source)
                .env("A", "1")
                .cpus(2)
                .gpus(1)
                .pids_limit(64);
            spec.startup_timeout = Some(Duration::from_millis(1500));
            let json = serde_json::to_string(&spec).unwrap();
            let back: MachineSpec = serde_json::from_str(&json).unwrap();
            assert_eq!(back, spec, "{json}");
        }
        let minimal: MachineSpec = serde_json::from_str(r#"{"source":{"kind":"sim"}}"#).unwrap();
        assert_eq!(minimal, MachineSpec::sim());
        let json = serde_json::to_string(&MachineSpec::sim()).unwrap();
        assert!(json.contains(r#""network":"deny""#), "{json}");
    }

    #[test]
    fn package_specs() {
        let json =
            r#"{"source":{"kind":"packages","pypi_packages":["six==1.17.0"],"tools":["python3"]}}"#;
        let spec: MachineSpec = serde_json::from_str(json).unwrap();
        assert_eq!(
            spec,
            MachineSpec::packages(PackageSpec::python(["six==1.17.0"]).tool("python3"))
        );
        assert_eq!(spec.source.kind(), "packages");
        let shell: MachineSpec = serde_json::from_str(r#"{"source":{"kind":"packages"}}"#).unwrap();
        assert_eq!(shell, MachineSpec::packages(PackageSpec::shell()));
        let cpython: MachineSpec =
            serde_json::from_str(r#"{"source":{"kind":"packages","pypi_packages":[]}}"#).unwrap();
        assert_eq!(
            cpython.source,
            ImageSource::Packages(PackageSpec::python(Vec::<String>::new()))
        );
        spec.validate().unwrap();
        for bad in [
            "",
            "  ",
            "-e .",
            "--index-url=http://x",
            "six\nfoo",
            "six\r",
            "a\0b",
        ] {
            let e = MachineSpec::packages(PackageSpec::python([bad]))
                .validate()
                .unwrap_err();
            assert!(matches!(e, Error::InvalidInput(_)), "{bad:?}: {e:?}");
            assert!(e.to_string().contains("pypi_packages"), "{e}");
        }
        for bad in ["", "-x", "a\nb", "a\0", "/usr/bin/env", "../bin/sh", "bin/"] {
            let e = MachineSpec::packages(PackageSpec::shell().tool(bad))
                .validate()
                .unwrap_err();
            assert!(e.to_string().contains("tools"), "{bad:?}: {e}");
        }
        MachineSpec::packages(PackageSpec::shell().tool("env"))
            .validate()
            .unwrap();
    }

    #[test]
    fn credentials_are_not_debug_printed() {
        let c = RegistryCredentials {
            username: "u".into(),
            password: "hunter2".into(),
        };
        assert!(!format!("{c:?}").contains("hunter2"));
    }
}
