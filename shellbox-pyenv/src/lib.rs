//! Self-contained Python environments, built once per host with [uv](https://docs.astral.sh/uv/)
//! and mounted read-only into local machines, so graders run a pinned Python with pinned
//! packages.
//!
//! ```no_run
//! use shellbox_core::{ImageSource, MachineSpec};
//! use shellbox_pyenv::build_python_environment;
//!
//! # fn main() -> Result<(), shellbox_pyenv::PyenvError> {
//! // A CPython version uv downloads under the root, or an installed interpreter's path.
//! let env = build_python_environment("/var/cache/graders/py", "requirements.lock", "3.12.12")?;
//! let spec = MachineSpec::new(ImageSource::Host(env.host_image()));
//! // In a local machine made from `spec`, `python3` is env.python().
//! # let _ = spec; Ok(()) }
//! ```
//!
//! [`resolve_python_environment`] starts from requirement names instead of a lock: it locks
//! them once per host cache (`uv pip compile --generate-hashes --no-build`, one directory per
//! SHA-256 of the version and the sorted requirements) and builds from that lock with binary
//! wheels only, so no package's build hook runs on the host; the local backend uses it for
//! `ImageSource::Packages`.
//!
//! Layout of a root (after REFERENCE.md section 7, the reference library's builder):
//!
//! ```text
//! <parent>/<name>.lock          flock taken by every builder of this root
//! <parent>/<name>/
//!     .complete                 completion marker: python + lock SHA-256 (+ base_prefix)
//!     requirements.lock         the lock that was hashed and installed
//!     python/                   uv-managed CPython (version builds only)
//!     venv/                     the virtual environment; venv/bin goes on PATH
//! ```
//!
//! For an interpreter path, `venv/bin/python` is a symlink to that interpreter, so a sandbox
//! also mounts its installation prefix: [`PythonEnvironment::read_only_dirs`] says exactly
//! what to mount, [`PythonEnvironment::host_image`] and [`PythonEnvironment::add_to`] put it
//! into a [`shellbox_core::HostImage`].

#![warn(missing_docs)]

mod build;
mod environment;
mod error;
mod marker;
mod resolve;
mod source;
mod uv;

pub use build::{
    build_python_environment, build_python_environment_with, BuildOptions, LOCK_COPY_NAME,
};
pub use environment::{in_system_directories, PythonEnvironment};
pub use error::{DifferingInput, PyenvError};
pub use resolve::{
    cache_key, check_interpreter, check_resolve, lock_path, normalize_requirements,
    requirement_problem, resolve_python_environment, resolve_python_environment_with,
    ResolveOptions, ENVIRONMENT_NAME, MAX_REQUIREMENT_NESTING, REQUIREMENTS_IN_NAME,
    REQUIREMENTS_LOCK_NAME, REQUIREMENTS_PENDING_NAME, RESOLVE_LOCK_NAME,
};
pub use source::PythonSource;
pub use uv::{is_download_failure, uv_steps, StepKind, UvStep};

/// The completion marker's file name inside a root.
pub const MARKER_NAME: &str = ".complete";
