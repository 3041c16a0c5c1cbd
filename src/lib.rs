//! shellbox: fresh, isolated, writable machines for agent harnesses, graders and RL
//! rollouts, behind one async trait.
//!
//! ```no_run
//! use shellbox::{Command, MachineFactory, MachineSpec};
//! # async fn demo() -> Result<(), shellbox::Error> {
//! let factory = shellbox::factory(shellbox::Backend::Sim).await?;
//! let machine = factory.create(MachineSpec::sim()).await?;
//! let result = machine.run(Command::shell("echo hi; exit 3")).await?;
//! assert_eq!((result.exit_code, &result.stdout[..]), (Some(3), &b"hi\n"[..]));
//! machine.close().await?;
//! # Ok(()) }
//! ```
//!
//! Backends are cargo features: `sim` (default, [`sim`]), `local` (default, [`local`]),
//! `docker` ([`docker`]) and `pyenv` ([`pyenv`]); `full` enables all. The contract itself is
//! [`shellbox_core`], re-exported here.

#![warn(missing_docs)]

pub use shellbox_core::*;

#[cfg(feature = "docker")]
pub use shellbox_docker as docker;
#[cfg(feature = "local")]
pub use shellbox_local as local;
#[cfg(feature = "pyenv")]
pub use shellbox_pyenv as pyenv;
#[cfg(feature = "sim")]
pub use shellbox_sim as sim;

#[cfg(feature = "serve")]
pub mod serve;

use std::sync::Arc;

/// A backend chosen at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// The in-memory shell simulator (`shellbox-sim`).
    Sim,
    /// bubblewrap sandboxes on this host (`shellbox-local`).
    Local,
    /// One container per machine through the Docker Engine API (`shellbox-docker`).
    Docker,
}

impl Backend {
    /// The backend's name as the CLI spells it: `sim`, `local`, `docker`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Sim => "sim",
            Backend::Local => "local",
            Backend::Docker => "docker",
        }
    }

    /// Whether this build has the backend's cargo feature.
    pub fn is_compiled(self) -> bool {
        match self {
            Backend::Sim => cfg!(feature = "sim"),
            Backend::Local => cfg!(feature = "local"),
            Backend::Docker => cfg!(feature = "docker"),
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Backend {
    type Err = Error;

    /// Parses `sim`, `local` or `docker`.
    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "sim" => Ok(Backend::Sim),
            "local" => Ok(Backend::Local),
            "docker" => Ok(Backend::Docker),
            other => Err(Error::invalid(format!(
                "unknown backend {other:?} (expected sim, local or docker)"
            ))),
        }
    }
}

/// A factory for `backend` with its default options: the simulator's default budgets, the
/// first bubblewrap that can sandbox here, the Docker Engine at `DOCKER_HOST` or the local
/// socket.
///
/// # Errors
/// [`Error::Unsupported`] when this build lacks the backend's feature, and the backend's
/// own start-up failure: [`Error::SandboxUnavailable`] (local), [`Error::Backend`]
/// naming where it looked (docker).
pub async fn factory(backend: Backend) -> Result<Arc<dyn MachineFactory>, Error> {
    match backend {
        #[cfg(feature = "sim")]
        Backend::Sim => Ok(Arc::new(sim::SimMachineFactory::default())),
        #[cfg(feature = "local")]
        Backend::Local => Ok(Arc::new(local::LocalMachineFactory::new(
            local::LocalOptions::default(),
        )?)),
        #[cfg(feature = "docker")]
        Backend::Docker => Ok(Arc::new(docker::DockerMachineFactory::connect().await?)),
        #[allow(unreachable_patterns)]
        other => Err(Error::unsupported(format!(
            "this build of shellbox has no {other} backend (enable the cargo feature `{other}`)"
        ))),
    }
}

/// The spec `backend` uses by default: the simulator's builtins, the host's programs, or
/// (docker) the given image reference.
///
/// # Errors
/// [`Error::InvalidInput`] for docker without an image.
pub fn default_spec(backend: Backend, image: Option<&str>) -> Result<MachineSpec, Error> {
    match (backend, image) {
        (Backend::Sim, _) => Ok(MachineSpec::sim()),
        (Backend::Local, _) => Ok(MachineSpec::host()),
        (Backend::Docker, Some(image)) => Ok(MachineSpec::docker(image)),
        (Backend::Docker, None) => Err(Error::invalid("the docker backend needs an image")),
    }
}
