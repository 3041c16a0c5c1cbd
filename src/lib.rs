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

/// A backend chosen at run time. Only the backends this build has exist as variants: a
/// build without the `docker` feature has no `Backend::Docker`, so code that names it fails
/// to compile instead of failing at run time, and parsing `"docker"` is refused with
/// [`Error::Unsupported`] naming the feature to enable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// The in-memory shell simulator (`shellbox-sim`; cargo feature `sim`).
    #[cfg(feature = "sim")]
    Sim,
    /// bubblewrap sandboxes on this host (`shellbox-local`; cargo feature `local`).
    #[cfg(feature = "local")]
    Local,
    /// One container per machine through the Docker Engine API (`shellbox-docker`; cargo
    /// feature `docker`).
    #[cfg(feature = "docker")]
    Docker,
}

/// Every backend shellbox has, as the CLI spells it, whether or not this build has it; each
/// is also the name of its cargo feature.
pub const BACKEND_NAMES: [&str; 3] = ["sim", "local", "docker"];

impl Backend {
    /// The backend's name as the CLI spells it (`sim`, `local`, `docker`), which is also
    /// the name of its cargo feature.
    pub fn name(self) -> &'static str {
        match self {
            #[cfg(feature = "sim")]
            Backend::Sim => "sim",
            #[cfg(feature = "local")]
            Backend::Local => "local",
            #[cfg(feature = "docker")]
            Backend::Docker => "docker",
        }
    }

    /// The backends this build has, in the order sim, local, docker.
    pub const COMPILED: &'static [Backend] = &[
        #[cfg(feature = "sim")]
        Backend::Sim,
        #[cfg(feature = "local")]
        Backend::Local,
        #[cfg(feature = "docker")]
        Backend::Docker,
    ];

    /// The backends this build has, in the order sim, local, docker ([`Backend::COMPILED`]).
    pub fn compiled() -> Vec<Backend> {
        Backend::COMPILED.to_vec()
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
    ///
    /// # Errors
    /// [`Error::Unsupported`] for a backend this build lacks (the message names the cargo
    /// feature to enable); [`Error::InvalidInput`] for any other name.
    fn from_str(s: &str) -> Result<Self, Error> {
        if let Some(backend) = Backend::compiled().into_iter().find(|b| b.name() == s) {
            return Ok(backend);
        }
        let compiled: Vec<&str> = Backend::compiled().into_iter().map(Backend::name).collect();
        let has = if compiled.is_empty() {
            "none".to_string()
        } else {
            compiled.join(", ")
        };
        if BACKEND_NAMES.contains(&s) {
            Err(Error::unsupported(format!(
                "this build of shellbox has no {s} backend (it has: {has}); rebuild with the cargo \
                 feature `{s}`, e.g. cargo install --path . --features {s}"
            )))
        } else {
            Err(Error::invalid(format!(
                "unknown backend {s:?} (expected sim, local or docker; this build has: {has})"
            )))
        }
    }
}

/// A factory for `backend` with its default options: the simulator's default budgets, the
/// first bubblewrap that can sandbox here, the Docker Engine at `DOCKER_HOST` or the local
/// socket.
///
/// # Errors
/// The backend's own start-up failure: [`Error::SandboxUnavailable`] (local),
/// [`Error::Backend`] naming where it looked (docker).
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
    }
}

/// The spec `backend` uses by default, so that switching backends needs no other change: the
/// simulator's builtins ([`MachineSpec::sim`]), the host's programs ([`MachineSpec::host`]),
/// or (docker) the image `image` the engine already has ([`MachineSpec::docker`]). `image`
/// is ignored by sim and local.
///
/// # Errors
/// [`Error::InvalidInput`] for docker without an image.
pub fn default_spec(backend: Backend, image: Option<&str>) -> Result<MachineSpec, Error> {
    let _ = image;
    match backend {
        #[cfg(feature = "sim")]
        Backend::Sim => Ok(MachineSpec::sim()),
        #[cfg(feature = "local")]
        Backend::Local => Ok(MachineSpec::host()),
        #[cfg(feature = "docker")]
        Backend::Docker => match image {
            Some(image) => Ok(MachineSpec::docker(image)),
            None => Err(Error::invalid(
                "the docker backend needs an image (the reference of one the engine has)",
            )),
        },
    }
}

/// README.md, whose Rust program is compiled and run as a doc test (`cargo test --doc`), so
/// the README cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
