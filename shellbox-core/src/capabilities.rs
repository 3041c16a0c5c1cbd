//! What a backend can do, declared once as a value, and the pre-flight check built on it.
//!
//! Each backend returns one [`Capabilities`] from
//! [`MachineFactory::capabilities`](crate::MachineFactory::capabilities), in the manner of
//! Apache OpenDAL's `Capability`: a plain value that callers (and the conformance suite)
//! read instead of probing. [`MachineFactory::check_environment`](crate::MachineFactory::check_environment)
//! answers "can this backend run this task?" from it without acquiring anything, in the
//! order of the reference library's `check_environment` (REFERENCE.md 1.7).

use serde::{Deserialize, Serialize};

use crate::{Error, MachineSpec, NetworkPolicy};

/// How a backend runs commands (REFERENCE.md 1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandSemantics {
    /// Real Linux processes (local and docker).
    LinuxProcess,
    /// An in-process shell simulator (sim).
    ShellSimulator,
}

impl CommandSemantics {
    /// The snake_case name (`"linux_process"`, `"shell_simulator"`).
    pub fn as_str(self) -> &'static str {
        match self {
            CommandSemantics::LinuxProcess => "linux_process",
            CommandSemantics::ShellSimulator => "shell_simulator",
        }
    }
}

/// Which persistent shell sessions a backend offers
/// ([`Machine::open_shell`](crate::Machine::open_shell), REFERENCE.md section 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionKind {
    /// A real shell on a pseudo-terminal: `execute` may return
    /// [`ShellStatus::Running`](crate::ShellStatus::Running); `read`, `write` and
    /// `interrupt` follow the running command (local, docker).
    Interactive,
    /// Each `execute` runs to completion; `read` and `write` are
    /// [`Error::Unsupported`] (the simulator).
    NonInteractive,
}

/// What one backend offers. Every field is a plain fact; nothing here is probed per call.
///
/// The named task capabilities (`shell`, `filesystem`, `python`, `process`, `network`,
/// `git_repository`) are the reference library's strings; [`Capabilities::names`] lists
/// the ones this backend has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Capabilities {
    /// How commands run.
    pub command_semantics: CommandSemantics,
    /// A POSIX shell runs commands (`sh -c`).
    pub shell: bool,
    /// Files persist and move in and out.
    pub filesystem: bool,
    /// A Python interpreter can run in the machine.
    pub python: bool,
    /// Real processes: signals, background processes, `/proc`.
    pub process: bool,
    /// Network access is possible (under [`NetworkPolicy::Allow`]).
    pub network: bool,
    /// A git repository can be cloned and worked in.
    pub git_repository: bool,
    /// The [`ImageSource`](crate::ImageSource) kinds (`ImageSource::kind`) it accepts.
    pub sources: &'static [&'static str],
    /// It enforces `memory_mb`.
    pub memory_limit: bool,
    /// It enforces `cpus`.
    pub cpu_limit: bool,
    /// It enforces `storage_mb`.
    pub storage_limit: bool,
    /// It can give a machine GPUs (`gpus > 0`).
    pub gpus: bool,
    /// The persistent shell sessions `open_shell` gives; `None` when it returns
    /// [`Error::Unsupported`] (the default of both constructors).
    pub shell_sessions: Option<SessionKind>,
    /// It follows the process model of DESIGN.md ("The process model"): processes a
    /// command leaves in the background keep running after it exits, until the machine
    /// closes; a timeout or a cancellation kills everything that command started (its
    /// `setsid` and double-fork escapees included) and nothing else; `close` leaves no
    /// process of the machine on the host. The conformance suite's process-model cases
    /// run only where this is true (false in both constructors).
    pub process_model: bool,
    /// It takes snapshots and starts machines from them
    /// ([`Machine::snapshot`](crate::Machine::snapshot),
    /// [`MachineFactory::create_from`](crate::MachineFactory::create_from)); the
    /// conformance suite's snapshot cases run only where this is true (false in both
    /// constructors).
    pub snapshots: bool,
    /// Each machine's system directories (`/usr`, `/etc`, `/opt`, …) are writable by its
    /// root and private: what a machine writes there (`apt-get install`, a tool in
    /// `/usr/local/bin`) lands in the machine's own copy, which neither the host nor another
    /// machine sees and which goes with the machine (docker: the container's own layer;
    /// sim: its virtual filesystem; local: only with copy-on-write system directories,
    /// REFERENCE.md 4.5). The conformance case `system_directories_are_private` runs only
    /// where this is true (false in both constructors).
    pub private_system_directories: bool,
}

/// The task capability names of the reference library, in its order.
pub const CAPABILITY_NAMES: [&str; 6] = [
    "shell",
    "filesystem",
    "python",
    "process",
    "network",
    "git_repository",
];

impl Capabilities {
    /// A backend running real Linux processes with no resource limits and no sources: the
    /// base that local and docker start from (`shell`, `filesystem`, `python`, `process`,
    /// `network`, `git_repository`).
    pub const fn linux_process() -> Self {
        Capabilities {
            command_semantics: CommandSemantics::LinuxProcess,
            shell: true,
            filesystem: true,
            python: true,
            process: true,
            network: true,
            git_repository: true,
            sources: &[],
            memory_limit: false,
            cpu_limit: false,
            storage_limit: false,
            gpus: false,
            shell_sessions: None,
            process_model: false,
            snapshots: false,
            private_system_directories: false,
        }
    }

    /// A shell simulator: `shell` and `filesystem` only (this simulator runs no Python,
    /// unlike the reference's, so `python` is false).
    pub const fn shell_simulator() -> Self {
        Capabilities {
            command_semantics: CommandSemantics::ShellSimulator,
            shell: true,
            filesystem: true,
            python: false,
            process: false,
            network: false,
            git_repository: false,
            sources: &[],
            memory_limit: false,
            cpu_limit: false,
            storage_limit: false,
            gpus: false,
            shell_sessions: None,
            process_model: false,
            snapshots: false,
            private_system_directories: false,
        }
    }

    /// The same capabilities accepting these source kinds.
    pub const fn with_sources(mut self, sources: &'static [&'static str]) -> Self {
        self.sources = sources;
        self
    }

    /// The same capabilities with these resource limits enforced.
    pub const fn with_limits(mut self, memory: bool, cpu: bool, storage: bool, gpus: bool) -> Self {
        self.memory_limit = memory;
        self.cpu_limit = cpu;
        self.storage_limit = storage;
        self.gpus = gpus;
        self
    }

    /// The same capabilities offering these shell sessions.
    pub const fn with_shell_sessions(mut self, kind: SessionKind) -> Self {
        self.shell_sessions = Some(kind);
        self
    }

    /// The same capabilities, declaring the process model (see
    /// [`Capabilities::process_model`]).
    pub const fn with_process_model(mut self) -> Self {
        self.process_model = true;
        self
    }

    /// The same capabilities with snapshots declared (see [`Capabilities::snapshots`]).
    pub const fn with_snapshots(mut self) -> Self {
        self.snapshots = true;
        self
    }

    /// The same capabilities with private, writable system directories declared (see
    /// [`Capabilities::private_system_directories`]).
    pub const fn with_private_system_directories(mut self) -> Self {
        self.private_system_directories = true;
        self
    }

    /// Whether the named task capability (one of [`CAPABILITY_NAMES`]) is offered; an
    /// unknown name is not.
    pub fn has(&self, name: &str) -> bool {
        match name {
            "shell" => self.shell,
            "filesystem" => self.filesystem,
            "python" => self.python,
            "process" => self.process,
            "network" => self.network,
            "git_repository" => self.git_repository,
            _ => false,
        }
    }

    /// The task capabilities offered, in [`CAPABILITY_NAMES`] order.
    pub fn names(&self) -> Vec<&'static str> {
        CAPABILITY_NAMES
            .into_iter()
            .filter(|n| self.has(n))
            .collect()
    }

    /// The spec checks every backend shares, from the declared values: the spec's own
    /// validation, the source kind, and each resource field the backend cannot enforce.
    ///
    /// # Errors
    /// What [`MachineSpec::validate`] returns; [`Error::Unsupported`] naming the source
    /// kind (for a `packages` source on a backend that builds Dockerfiles, pointing at
    /// `ImageSource::Dockerfile`), `network allow` on a backend without network, or the field (`cpus`,
    /// `memory_mb`, `storage_mb`, `gpus`).
    pub fn check_spec(&self, backend: &str, spec: &MachineSpec) -> Result<(), Error> {
        spec.validate()?;
        let kind = spec.source.kind();
        if !self.sources.contains(&kind) {
            let hint = if kind == "packages" && self.sources.contains(&"dockerfile") {
                "; to get software by name, build an image that installs it \
                 (ImageSource::Dockerfile)"
            } else {
                ""
            };
            return Err(Error::unsupported(format!(
                "the {backend} backend does not run a {kind} image source (it runs: {}){hint}",
                self.sources.join(", ")
            )));
        }
        if spec.network == NetworkPolicy::Allow && !self.network {
            return Err(Error::unsupported(format!(
                "the {backend} backend has no network (network allow)"
            )));
        }
        for (field, set, offered) in [
            ("cpus", spec.cpus.is_some(), self.cpu_limit),
            ("memory_mb", spec.memory_mb.is_some(), self.memory_limit),
            ("storage_mb", spec.storage_mb.is_some(), self.storage_limit),
            ("gpus", spec.gpus != 0, self.gpus),
        ] {
            if set && !offered {
                return Err(Error::unsupported(format!(
                    "the {backend} backend cannot enforce {field}: leave {field} unset, or use \
                     a backend whose capabilities enforce it"
                )));
            }
        }
        Ok(())
    }
}

/// What a task needs from a backend (the reference's `ExecutionRequirements`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ExecutionRequirements {
    /// The command semantics the task was written for; `None` accepts any.
    pub command_semantics: Option<CommandSemantics>,
    /// Task capability names (see [`CAPABILITY_NAMES`]) the task uses.
    pub capabilities: Vec<String>,
    /// The image reference the task must run in; `None` accepts any.
    pub docker_image: Option<String>,
}

/// How many names [`list_names`] writes before it counts the rest.
pub const LISTED_NAMES_MAX: usize = 20;

/// `names` joined with `", "` for an error message, at most [`LISTED_NAMES_MAX`] of them
/// and then `" and N more"`, so a message about a list of 100,000 names stays one short
/// line.
pub fn list_names<S: AsRef<str>>(names: &[S]) -> String {
    let mut out = names
        .iter()
        .take(LISTED_NAMES_MAX)
        .map(AsRef::as_ref)
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > LISTED_NAMES_MAX {
        out.push_str(&format!(" and {} more", names.len() - LISTED_NAMES_MAX));
    }
    out
}

/// The reference's `check_execution_requirements` (REFERENCE.md 1.7, steps 1–4), after a
/// backend's own spec checks: the command semantics must match; every requested
/// capability must be offered (the missing ones are named, sorted and comma-separated);
/// `network` under [`NetworkPolicy::Deny`] is refused; a requested `docker_image` must be
/// the reference the backend would run (`image`, `None` when it runs no named image), the
/// two compared as Docker normalizes them (`busybox` is `docker.io/library/busybox:latest`;
/// the reference compares the strings).
///
/// # Errors
/// [`Error::InvalidInput`] for a `docker_image` that is empty or blank (no image has that
/// reference) or a capability name not in [`CAPABILITY_NAMES`] (named, sorted; judged
/// before the rules: no backend has such a capability); else [`Error::Unsupported`] saying
/// which rule failed.
pub fn check_execution_requirements(
    capabilities: &Capabilities,
    requirements: &ExecutionRequirements,
    spec: &MachineSpec,
    image: Option<&str>,
) -> Result<(), Error> {
    if requirements
        .docker_image
        .as_deref()
        .is_some_and(|i| i.trim().is_empty())
    {
        return Err(Error::invalid(
            "docker_image: an image reference must not be empty",
        ));
    }
    let mut unknown: Vec<&str> = requirements
        .capabilities
        .iter()
        .map(String::as_str)
        .filter(|c| !CAPABILITY_NAMES.contains(c))
        .collect();
    if !unknown.is_empty() {
        unknown.sort_unstable();
        unknown.dedup();
        return Err(Error::invalid(format!(
            "unknown capability names: {} (the names are {})",
            list_names(&unknown),
            CAPABILITY_NAMES.join(", ")
        )));
    }
    if let Some(wanted) = requirements.command_semantics {
        if wanted != capabilities.command_semantics {
            return Err(Error::unsupported(format!(
                "the task needs {} command semantics; this backend has {}",
                wanted.as_str(),
                capabilities.command_semantics.as_str()
            )));
        }
    }
    let mut missing: Vec<&str> = requirements
        .capabilities
        .iter()
        .map(String::as_str)
        .filter(|c| !capabilities.has(c))
        .collect();
    missing.sort_unstable();
    missing.dedup();
    if !missing.is_empty() {
        return Err(Error::unsupported(format!(
            "unsupported capabilities: {}",
            list_names(&missing)
        )));
    }
    if requirements.capabilities.iter().any(|c| c == "network")
        && spec.network == NetworkPolicy::Deny
    {
        return Err(Error::unsupported(
            "the task needs network but the spec's network policy is deny",
        ));
    }
    if let Some(wanted) = &requirements.docker_image {
        let same = image.is_some_and(|i| familiar_image(i) == familiar_image(wanted));
        if !same {
            return Err(Error::unsupported(format!(
                "the task needs docker image {wanted}; this backend would run {}",
                image.unwrap_or("no docker image")
            )));
        }
    }
    Ok(())
}

/// An image reference in Docker's fully qualified form, for comparing two references
/// that name one image (Docker's normalization, `ParseNormalizedNamed`): a first component
/// that is no host (no `.` or `:`, not `localhost`) gets `docker.io/` before it (and
/// `library/` when it is the only one), `index.docker.io` is `docker.io`, and a reference
/// with neither tag nor digest gets `:latest`. So `busybox`, `busybox:latest`,
/// `library/busybox` and `docker.io/library/busybox:latest` are one image (second break-it
/// pass of issue 12: `docker.io/shellbox-test/busybox:1` was refused against a spec of
/// `shellbox-test/busybox:1`). Nothing else is checked: a malformed reference compares as
/// written.
fn familiar_image(reference: &str) -> String {
    let reference = reference.trim();
    let (name_tag, digest) = match reference.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (reference, None),
    };
    let last_slash = name_tag.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match name_tag[last_slash..].rfind(':') {
        Some(i) => (
            &name_tag[..last_slash + i],
            Some(&name_tag[last_slash + i + 1..]),
        ),
        None => (name_tag, None),
    };
    let (domain, path) = match name.split_once('/') {
        Some((first, rest))
            if first.contains(['.', ':'])
                || first == "localhost"
                || first != first.to_lowercase() =>
        {
            (first, rest.to_string())
        }
        _ => ("docker.io", name.to_string()),
    };
    let domain = if domain == "index.docker.io" {
        "docker.io"
    } else {
        domain
    };
    let path = if domain == "docker.io" && !path.contains('/') {
        format!("library/{path}")
    } else {
        path
    };
    let mut out = format!("{domain}/{path}");
    match (tag, digest) {
        (Some(tag), _) => {
            out.push(':');
            out.push_str(tag);
        }
        (None, None) => out.push_str(":latest"),
        (None, Some(_)) => {}
    }
    if let Some(digest) = digest {
        out.push('@');
        out.push_str(digest);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn familiar_images_compare_as_docker_normalizes_them() {
        for same in [
            "busybox",
            "busybox:latest",
            "library/busybox",
            "docker.io/busybox",
            "docker.io/library/busybox:latest",
            "index.docker.io/library/busybox",
        ] {
            assert_eq!(
                familiar_image(same),
                "docker.io/library/busybox:latest",
                "{same}"
            );
        }
        assert_eq!(
            familiar_image("shellbox-test/busybox:1"),
            familiar_image("docker.io/shellbox-test/busybox:1")
        );
        for (a, b) in [
            ("busybox:1", "busybox:2"),
            ("busybox", "other/busybox"),
            ("127.0.0.1:5000/busybox", "busybox"),
            ("localhost/x", "x"),
            ("x@sha256:aa", "x:latest@sha256:aa"),
        ] {
            assert_ne!(familiar_image(a), familiar_image(b), "{a} {b}");
        }
        assert_eq!(
            familiar_image("127.0.0.1:5000/a/b"),
            "127.0.0.1:5000/a/b:latest"
        );
        assert_eq!(
            familiar_image("x@sha256:aa"),
            "docker.io/library/x@sha256:aa"
        );
    }

    fn req(caps: &[&str]) -> ExecutionRequirements {
        ExecutionRequirements {
            capabilities: caps.iter().map(|c| c.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn reference_order_and_messages() {
        let sim = Capabilities::shell_simulator().with_sources(&["sim"]);
        let spec = MachineSpec::sim();
        check_execution_requirements(&sim, &req(&["shell", "filesystem"]), &spec, None).unwrap();
        let e = check_execution_requirements(
            &sim,
            &req(&["python", "network", "shell", "git_repository", "python"]),
            &spec,
            None,
        )
        .unwrap_err();
        assert!(e.is_unsupported());
        assert!(
            e.to_string()
                .contains("unsupported capabilities: git_repository, network, python"),
            "{e}"
        );
        let semantics = ExecutionRequirements {
            command_semantics: Some(CommandSemantics::LinuxProcess),
            capabilities: vec!["python".into()],
            ..Default::default()
        };
        // Semantics are judged before capabilities.
        let e = check_execution_requirements(&sim, &semantics, &spec, None).unwrap_err();
        assert!(e.to_string().contains("linux_process"), "{e}");
        // An unknown name is malformed input, before any rule (issue 12's break-it pass:
        // it was Unsupported, as if another backend could have it).
        let unknown = ExecutionRequirements {
            capabilities: vec!["zeta".into(), "shell".into(), "bogus".into(), "zeta".into()],
            ..semantics
        };
        let e = check_execution_requirements(&sim, &unknown, &spec, None).unwrap_err();
        assert!(matches!(e, Error::InvalidInput(_)), "{e:?}");
        assert!(e.to_string().contains("names: bogus, zeta ("), "{e}");

        let linux = Capabilities::linux_process().with_sources(&["host"]);
        let host = MachineSpec::host();
        let e = check_execution_requirements(&linux, &req(&["network"]), &host, None).unwrap_err();
        assert!(e.to_string().contains("deny"), "{e}");
        check_execution_requirements(
            &linux,
            &req(&["network"]),
            &host.clone().network(NetworkPolicy::Allow),
            None,
        )
        .unwrap();
        let image = ExecutionRequirements {
            docker_image: Some("busybox:1".into()),
            ..Default::default()
        };
        assert!(check_execution_requirements(&linux, &image, &host, None).is_err());
        check_execution_requirements(&linux, &image, &host, Some("busybox:1")).unwrap();
        assert!(check_execution_requirements(&linux, &image, &host, Some("busybox:2")).is_err());
        // One image by Docker's normalization (second break-it pass of issue 12).
        check_execution_requirements(&linux, &image, &host, Some("docker.io/library/busybox:1"))
            .unwrap();
        for blank in ["", " "] {
            let blank = ExecutionRequirements {
                docker_image: Some(blank.into()),
                ..Default::default()
            };
            for running in [None, Some(""), Some("busybox:1")] {
                let e = check_execution_requirements(&linux, &blank, &host, running).unwrap_err();
                assert!(matches!(e, Error::InvalidInput(_)), "{e:?}");
            }
        }
    }

    #[test]
    fn long_name_lists_are_cut_and_counted() {
        assert_eq!(list_names::<&str>(&[]), "");
        assert_eq!(list_names(&["a", "b"]), "a, b");
        let many: Vec<String> = (0..100_000).map(|i| format!("tool{i}")).collect();
        let listed = list_names(&many);
        assert!(listed.ends_with("tool19 and 99980 more"), "{listed}");
        assert!(listed.len() < 300);
    }

    #[test]
    fn spec_checks_from_declared_values() {
        let sim = Capabilities::shell_simulator()
            .with_sources(&["sim"])
            .with_limits(true, false, true, false);
        sim.check_spec("sim", &MachineSpec::sim().memory_mb(64).storage_mb(8))
            .unwrap();
        let e = sim.check_spec("sim", &MachineSpec::host()).unwrap_err();
        assert!(e.is_unsupported() && e.to_string().contains("host"), "{e}");
        let e = sim
            .check_spec("sim", &MachineSpec::sim().cpus(2))
            .unwrap_err();
        assert!(e.to_string().contains("cpus"), "{e}");
        let e = sim
            .check_spec("sim", &MachineSpec::sim().gpus(1))
            .unwrap_err();
        assert!(e.to_string().contains("gpus"), "{e}");
        assert!(matches!(
            sim.check_spec("sim", &MachineSpec::sim().cpus(0)),
            Err(Error::InvalidInput(_))
        ));
        assert_eq!(
            Capabilities::linux_process().names(),
            CAPABILITY_NAMES.to_vec()
        );
        assert_eq!(sim.names(), ["shell", "filesystem"]);
    }
}
