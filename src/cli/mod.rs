//! Command-line parsing and the `run` subcommand.

/// `println!` that ignores a closed stdout (`shellbox ... | head`) instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

mod args;
mod bench;
mod compare;
#[cfg(test)]
mod fuzz;
mod shell;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use clap::{Parser, Subcommand};
use futures::StreamExt;
use shellbox::{
    Backend, Command, Error, Event, ExitReason, Machine, MachineFactory, MachineSpec, NetworkPolicy,
};

use args::{
    parse_bytes, parse_env, parse_guest_host, parse_host_guest, parse_timeout, HostGuest, Timeout,
};

/// Exit status for shellbox's own failures, as `docker run` uses.
const EXIT_SHELLBOX_ERROR: u8 = 125;
/// Exit status of a timed-out command, as timeout(1) uses.
const EXIT_TIMED_OUT: u8 = 124;
/// How long a create interrupted by a signal may still take before shellbox exits anyway.
const CREATE_GRACE: Duration = Duration::from_secs(120);
/// Exit status when our stdout closes under a streaming command: 128 + SIGPIPE.
const EXIT_BROKEN_PIPE: u8 = 141;
/// Most bytes `run -i` reads from stdin.
const MAX_STDIN_BYTES: u64 = 256 << 20;

#[derive(Parser, Debug)]
#[command(
    name = "shellbox",
    about = "Fresh, isolated machines for agents, graders and RL rollouts",
    disable_version_flag = true
)]
struct Cli {
    /// Print the version and the backends this build has, then exit.
    #[arg(short = 'V', long, action = clap::ArgAction::Version)]
    version: Option<bool>,
    /// Log what shellbox does to stderr (-v: info, -vv: debug). Without it (and without
    /// RUST_LOG, which wins when set) shellbox prints no log lines.
    #[arg(short = 'v', long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Sub,
}

#[derive(Subcommand, Debug)]
enum Sub {
    /// Create a machine, upload, run one command, download, close; exit with its status.
    Run(RunArgs),
    /// Open an interactive shell session on a fresh machine (Ctrl-C interrupts the running
    /// command, Ctrl-D or `exit` closes and removes the machine); `--json` for scripts.
    Shell(shell::ShellArgs),
    /// Run a shell corpus (JSON Lines) and compare stdout and exit status with real Bash's.
    Compare(compare::CompareArgs),
    /// Measure a backend in-process (many runs per case) and print a table or JSON lines.
    Bench(bench::BenchArgs),
    /// Remove what processes that no longer exist left: machines (docker containers, local
    /// machine roots) and download staging directories.
    Gc(GcArgs),
    /// Re-run a transcript on a fresh machine of a backend and print where the outcomes
    /// diverge; exit 0 when none does, 1 when one does, 125 when shellbox failed.
    Replay(ReplayArgs),
    /// Serve the machine contract as JSON lines on stdin/stdout (PROTOCOL.md).
    Serve {
        /// Speak on stdin and stdout (the only transport).
        #[arg(long, required = true)]
        stdio: bool,
    },
    /// Python environments for local machines (cargo feature `pyenv`).
    #[cfg(feature = "pyenv")]
    Pyenv {
        #[command(subcommand)]
        command: PyenvCommand,
    },
    /// Python environments for local machines (not in this build: cargo feature `pyenv`).
    #[cfg(not(feature = "pyenv"))]
    Pyenv {
        /// Ignored: this build has no pyenv support.
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            hide = true,
            value_name = "ARGS"
        )]
        args: Vec<String>,
    },
}

/// `shellbox --version`: the version and what this build can do.
fn version_text() -> String {
    let backends: Vec<&str> = Backend::compiled().into_iter().map(Backend::name).collect();
    format!(
        "{} (backends: {}; pyenv: {})",
        env!("CARGO_PKG_VERSION"),
        if backends.is_empty() {
            "none".to_string()
        } else {
            backends.join(", ")
        },
        if cfg!(feature = "pyenv") { "yes" } else { "no" }
    )
}

/// Options that pick a backend and describe the machine.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct MachineArgs {
    /// Backend: sim, local or docker (cargo features of the same names; default: sim, else
    /// the first this build has).
    #[arg(long)]
    pub(crate) backend: Option<String>,
    /// docker: an image the engine already has (never pulled).
    #[arg(long, value_name = "IMAGE")]
    pub(crate) image: Option<String>,
    /// docker: an image reference to pull from its registry.
    #[arg(long, value_name = "REFERENCE", conflicts_with = "image")]
    pub(crate) registry_image: Option<String>,
    /// docker: a Dockerfile to build (context: --context, else the Dockerfile's directory).
    #[arg(long, value_name = "PATH", conflicts_with_all = ["image", "registry_image"])]
    pub(crate) dockerfile: Option<PathBuf>,
    /// docker: the build context of --dockerfile.
    #[arg(long, value_name = "DIR", requires = "dockerfile")]
    pub(crate) context: Option<PathBuf>,
    /// docker: an image tarball in `docker save` format to load.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["image", "registry_image", "dockerfile"])]
    pub(crate) image_archive: Option<PathBuf>,
    /// Working directory of the machine (default /workspace).
    #[arg(long)]
    pub(crate) workdir: Option<String>,
    /// Network policy: deny (default) or allow.
    #[arg(long, default_value = "deny", value_parser = ["allow", "deny"])]
    pub(crate) network: String,
    /// local: a host directory mounted read-only at its own path (repeatable).
    #[arg(long = "read-only", value_name = "DIR")]
    pub(crate) read_only: Vec<PathBuf>,
    /// local: a directory put first on PATH (repeatable).
    #[arg(long = "bin-dir", value_name = "DIR")]
    pub(crate) bin_dirs: Vec<PathBuf>,
    /// local: a host path shown read-only at a machine path, HOST:GUEST (repeatable).
    #[arg(long = "mount", value_name = "HOST:GUEST", value_parser = parse_host_guest)]
    pub(crate) mounts: Vec<HostGuest>,
    /// local: how the machine shows /usr, /bin, /lib*, /sbin and /etc: read-only (default),
    /// or copy-on-write (writes such as apt-get install land in a layer of the machine's
    /// own, removed with it; needs root and overlayfs).
    #[arg(long, value_name = "MODE", value_parser = ["read-only", "copy-on-write"])]
    pub(crate) system_directories: Option<String>,
    /// Memory limit in MiB (docker: the container's limit; sim: the machine's memory
    /// budget; local: not supported).
    #[arg(long, value_name = "MIB", allow_hyphen_values = true)]
    pub(crate) memory_mb: Option<u64>,
    /// CPU limit in whole CPUs (docker only).
    #[arg(long, allow_hyphen_values = true)]
    pub(crate) cpus: Option<u32>,
    /// Disk limit in MiB for what the machine writes (local, as root: a size-limited root
    /// that with --system-directories copy-on-write also holds the layers, one bound for
    /// both; docker: the engine's storage option; sim: the machine's disk budget).
    #[arg(long, value_name = "MIB", allow_hyphen_values = true)]
    pub(crate) storage_mb: Option<u64>,
    /// Most processes the machine may hold at once (default 1024; local: a pids cgroup, at least 16, its own tasks counted;
    /// docker: the container's pids limit; sim: not enforced).
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub(crate) pids_limit: Option<u32>,
    /// Software by name: a PyPI requirement such as six==1.17.0, locked with hashes and
    /// installed from wheels into a cached Python environment (local; repeatable).
    #[arg(long = "package", value_name = "REQUIREMENT")]
    pub(crate) packages: Vec<String>,
    /// Software by name: CPython without packages when no --package is given (local).
    #[arg(long)]
    pub(crate) python: bool,
    /// Software by name: a program that must be executable on the machine's PATH, else the
    /// machine is refused (local, sim; repeatable).
    #[arg(long = "tool", value_name = "NAME")]
    pub(crate) tools: Vec<String>,
    /// local: the CPython version (X.Y.Z) of --package environments (default: the
    /// --python-interpreter's, else 3.12.12).
    #[arg(long, value_name = "X.Y.Z")]
    pub(crate) python_version: Option<String>,
    /// local: a local CPython to build --package environments from, where uv cannot
    /// download one (e.g. /usr/bin/python3.11).
    #[arg(long, value_name = "PATH")]
    pub(crate) python_interpreter: Option<PathBuf>,
    /// local: where --package environments are locked and built (default
    /// $HOME/.cache/shellbox/python). Keyed by version and requirements only: runs whose uv
    /// uses other package indexes (UV_INDEX_URL, UV_FIND_LINKS) need caches of their own.
    #[arg(long, value_name = "DIR")]
    pub(crate) package_cache: Option<PathBuf>,
}

impl MachineArgs {
    /// Whether `--system-directories copy-on-write` was given (local only; [`Self::spec`]
    /// refuses it for another backend).
    #[cfg(feature = "local")]
    pub(crate) fn copy_on_write(&self) -> bool {
        self.system_directories.as_deref() == Some("copy-on-write")
    }

    /// A factory for `backend` with these options: the backend's defaults, but a local
    /// factory made from [`Self::local_options`] (system directories and the package
    /// settings).
    ///
    /// # Errors
    /// As [`shellbox::factory`]; a local factory's [`Error::SandboxUnavailable`] naming
    /// what copy-on-write needs when this host lacks it.
    pub(crate) async fn factory(&self, backend: Backend) -> Result<Arc<dyn MachineFactory>, Error> {
        #[cfg(feature = "local")]
        if backend == Backend::Local {
            let options = self.local_options();
            // Probing bwrap blocks for a moment: keep it off the runtime's workers.
            let factory = tokio::task::spawn_blocking(move || {
                shellbox::local::LocalMachineFactory::new(options)
            })
            .await
            .map_err(|e| Error::backend("start the local factory", e.to_string()))??;
            return Ok(Arc::new(factory));
        }
        shellbox::factory(backend).await
    }

    /// The backend `--backend` names, else sim, else the first this build has.
    pub(crate) fn backend(&self) -> Result<Backend, Error> {
        match &self.backend {
            Some(name) => name.parse(),
            None => Backend::compiled().into_iter().next().ok_or_else(|| {
                Error::unsupported(
                    "this build of shellbox has no backend; rebuild with the cargo feature sim, \
                     local or docker",
                )
            }),
        }
    }

    /// The machine spec these options describe.
    ///
    /// Options the chosen backend does not take are refused here, naming the option (the
    /// backends' own refusals name `MachineSpec` fields).
    /// Whether software by name was asked for (`--package`, `--python`, `--tool`).
    fn wants_packages(&self) -> bool {
        !self.packages.is_empty() || self.python || !self.tools.is_empty()
    }

    /// The options of the local factory these options describe.
    #[cfg(feature = "local")]
    pub(crate) fn local_options(&self) -> shellbox::local::LocalOptions {
        shellbox::local::LocalOptions {
            package_cache: self.package_cache.clone(),
            python_version: self.python_version.clone(),
            python_interpreter: self.python_interpreter.clone(),
            system_directories: if self.copy_on_write() {
                shellbox::local::SystemDirectories::CopyOnWrite
            } else {
                shellbox::local::SystemDirectories::ReadOnly
            },
            ..shellbox::local::LocalOptions::default()
        }
    }

    pub(crate) fn spec(&self) -> Result<MachineSpec, Error> {
        let backend = self.backend()?;
        let name = backend.name();
        if name != "local"
            && (self.python_version.is_some()
                || self.python_interpreter.is_some()
                || self.package_cache.is_some())
        {
            return Err(Error::unsupported(format!(
                "--python-version, --python-interpreter and --package-cache need --backend \
                 local, not {backend}"
            )));
        }
        if self.wants_packages()
            && (!(self.read_only.is_empty() && self.bin_dirs.is_empty() && self.mounts.is_empty())
                || self.image.is_some()
                || self.registry_image.is_some()
                || self.dockerfile.is_some()
                || self.image_archive.is_some())
        {
            return Err(Error::invalid(
                "--package, --python and --tool describe the machine's software by name; \
                 they cannot be combined with --read-only, --bin-dir, --mount or an image",
            ));
        }
        if name != "local"
            && !(self.read_only.is_empty() && self.bin_dirs.is_empty() && self.mounts.is_empty())
        {
            return Err(Error::unsupported(format!(
                "--read-only, --bin-dir and --mount need --backend local, not {backend}"
            )));
        }
        if name != "local" && self.system_directories.is_some() {
            return Err(Error::unsupported(format!(
                "--system-directories needs --backend local, not {backend}"
            )));
        }
        if name != "docker"
            && (self.image.is_some()
                || self.registry_image.is_some()
                || self.dockerfile.is_some()
                || self.image_archive.is_some())
        {
            return Err(Error::unsupported(format!(
                "--image, --registry-image, --dockerfile and --image-archive need --backend \
                 docker, not {backend}"
            )));
        }
        if name != "docker" && self.cpus.is_some() {
            return Err(Error::unsupported(format!(
                "--cpus needs --backend docker: the {backend} backend cannot limit CPUs"
            )));
        }
        if name == "local" && self.memory_mb.is_some() {
            return Err(Error::unsupported(
                "--memory-mb needs --backend docker or sim: the local backend cannot limit memory",
            ));
        }
        let mut spec: MachineSpec = match backend {
            _ if self.wants_packages() => {
                // Every backend gets the spec; those that cannot give it refuse it
                // (sim: Python, tools it lacks; docker: all, pointing at --dockerfile).
                let pypi_packages = if self.packages.is_empty() && !self.python {
                    None
                } else {
                    Some(self.packages.clone())
                };
                MachineSpec::packages(shellbox::PackageSpec {
                    pypi_packages,
                    tools: self.tools.clone(),
                })
            }
            #[cfg(feature = "docker")]
            Backend::Docker => {
                let source = if let Some(image) = &self.image {
                    shellbox::ImageSource::Docker(shellbox::DockerImage {
                        reference: image.clone(),
                    })
                } else if let Some(reference) = &self.registry_image {
                    shellbox::ImageSource::Registry(shellbox::RegistryImage {
                        reference: reference.clone(),
                        credentials: None,
                    })
                } else if let Some(dockerfile) = &self.dockerfile {
                    // Both relative to the current directory, as `docker build -f` reads them.
                    let absolute = |p: &std::path::Path| {
                        std::path::absolute(p)
                            .map_err(|e| Error::io(format!("resolve {}", p.display()), e))
                    };
                    let dockerfile = absolute(dockerfile)?;
                    let context = match &self.context {
                        Some(c) => absolute(c)?,
                        None => dockerfile
                            .parent()
                            .map(std::path::Path::to_path_buf)
                            .unwrap_or_else(|| PathBuf::from("/")),
                    };
                    shellbox::ImageSource::Dockerfile(shellbox::DockerfileSource {
                        context,
                        dockerfile,
                    })
                } else if let Some(path) = &self.image_archive {
                    shellbox::ImageSource::Archive(shellbox::ImageArchive { path: path.clone() })
                } else {
                    return Err(Error::invalid(
                        "the docker backend needs --image, --registry-image, --dockerfile or --image-archive",
                    ));
                };
                MachineSpec::new(source)
            }
            #[cfg(feature = "local")]
            Backend::Local => MachineSpec::new(shellbox::ImageSource::Host(shellbox::HostImage {
                read_only: self.read_only.clone(),
                bin_dirs: self.bin_dirs.clone(),
                mounts: self
                    .mounts
                    .iter()
                    .map(|m| shellbox::Mount {
                        host: m.host.clone(),
                        guest: m.guest.clone(),
                    })
                    .collect(),
            })),
            #[cfg(feature = "sim")]
            Backend::Sim => MachineSpec::sim(),
        };
        if let Some(workdir) = &self.workdir {
            spec.workdir = workdir.clone();
        }
        spec.network = if self.network == "allow" {
            NetworkPolicy::Allow
        } else {
            NetworkPolicy::Deny
        };
        spec.memory_mb = self.memory_mb;
        spec.cpus = self.cpus;
        spec.storage_mb = self.storage_mb;
        if let Some(pids) = self.pids_limit {
            spec.pids_limit = pids;
        }
        spec.validate()?;
        Ok(spec)
    }
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    #[command(flatten)]
    machine: MachineArgs,
    /// Environment variable for the machine, KEY=VALUE (repeatable).
    #[arg(long = "env", short = 'e', value_name = "KEY=VALUE", value_parser = parse_env)]
    env: Vec<(String, String)>,
    /// Working directory of the command (default: the machine's workdir).
    #[arg(long)]
    cwd: Option<String>,
    /// Deadline of the command; on expiry it is stopped and shellbox exits 124. Accepted
    /// forms: a number of seconds (`30`, `1.5`, `1e3`) or a number with a unit, `ms`, `s`,
    /// `m` or `h` (`250ms`, `1.5s`, `2m`, `1h`). `0` means no limit (as with timeout(1)),
    /// and so does anything longer than 100 years (up to about 5.8e11 years; more, or `inf`,
    /// is refused as too large); negative values and values below a nanosecond are refused.
    /// Default: no limit. It bounds the command only (timeout(1)'s meaning), not --upload or
    /// --download: those end with their own errors (exit 125), and the local backend gives each
    /// bounded download (--download-limit) at most 600 s.
    #[arg(long, value_parser = parse_timeout, allow_hyphen_values = true, value_name = "DURATION")]
    timeout: Option<Timeout>,
    /// Bytes kept per stream: bytes, or with KiB, MiB, GiB (default 1MiB).
    #[arg(long, value_parser = parse_bytes, default_value = "1MiB", allow_hyphen_values = true)]
    output_limit: u64,
    /// User name or UID to run as.
    #[arg(long)]
    user: Option<String>,
    /// Pass this process's stdin to the command.
    #[arg(short = 'i', long)]
    interactive: bool,
    /// Copy a host path into the machine before running, HOST_PATH:MACHINE_PATH (repeatable).
    #[arg(long, value_name = "HOST_PATH:MACHINE_PATH", value_parser = parse_host_guest)]
    upload: Vec<HostGuest>,
    /// Copy a machine path to the host after running, MACHINE_PATH:HOST_PATH (repeatable).
    #[arg(long, value_name = "MACHINE_PATH:HOST_PATH", value_parser = parse_guest_host)]
    download: Vec<HostGuest>,
    /// Bound every --download: each must then be one regular file of at most SIZE bytes
    /// (bytes, or with KiB, MiB, GiB), streamed to a staging file beside HOST_PATH and
    /// renamed over it, so a larger file, a directory or a fifo fails (exit 125) and leaves
    /// HOST_PATH as it was.
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes, requires = "download", allow_hyphen_values = true)]
    download_limit: Option<u64>,
    /// Print one JSON object with the result instead of streaming the output: exit_code,
    /// reason, stdout, stderr (also as base64), *_truncated, and unsupported: what the
    /// backend could not do as real Bash would (the simulator's refusals, syntax errors and
    /// missing programs); always present, always [] on local and docker, which run real
    /// programs.
    #[arg(long)]
    json: bool,
    /// Write a transcript of every operation (uploads, the command, downloads) and its
    /// outcome to FILE as JSON lines, for `shellbox replay` on another backend.
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "ARGV")]
    argv: Vec<String>,
}

#[derive(clap::Args, Debug)]
struct ReplayArgs {
    #[command(flatten)]
    machine: MachineArgs,
    /// The transcript (`shellbox run --record FILE`, or a `RecordingMachine`'s output).
    #[arg(value_name = "TRANSCRIPT")]
    transcript: PathBuf,
    /// Print the report as one JSON object instead of a line per divergence.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct GcArgs {
    /// Backend to clean: docker (containers), local (machine roots in the host temp dir,
    /// with their pids cgroups and mounts) or sim (nothing of its own). Every backend
    /// also removes the download staging directories (`.shellbox-download-*`, beside their
    /// targets) of processes killed mid-download, found in this host's staging registry.
    #[arg(long, default_value = "docker")]
    backend: String,
    /// Only containers that also carry this label, KEY or KEY=VALUE (repeatable; Docker's
    /// `label` filter). Without it, every dead owner's container on this engine is removed.
    #[arg(long = "label", value_name = "KEY[=VALUE]")]
    labels: Vec<String>,
}

#[cfg(feature = "pyenv")]
#[derive(Subcommand, Debug)]
enum PyenvCommand {
    /// Build (once) a Python environment at ROOT from a hash lock.
    Build {
        /// The environment's root directory.
        #[arg(long)]
        root: PathBuf,
        /// A requirements file with hashes (`uv pip compile --generate-hashes`).
        #[arg(long)]
        lock: PathBuf,
        /// A CPython version for uv to install (e.g. 3.12.12) or the path of an interpreter.
        #[arg(long)]
        python: String,
        /// Install wheels only (`uv pip sync --no-build`): a source distribution in the lock
        /// fails the build instead of running its build hooks on this host.
        #[arg(long)]
        only_binary: bool,
    },
}

pub(crate) fn main() -> ExitCode {
    let wants_json = std::env::args_os()
        .take_while(|a| a != "--")
        .any(|a| a == "--json");
    // Leaked once: clap keeps the version as a `&'static str`.
    let version: &'static str = Box::leak(version_text().into_boxed_str());
    let command = <Cli as clap::CommandFactory>::command().version(version);
    let parsed = command
        .try_get_matches()
        .and_then(|matches| <Cli as clap::FromArgMatches>::from_arg_matches(&matches));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            // clap's first paragraph names the problem (and, for missing arguments, lists
            // them on the following lines): fold it into one line.
            let message = e.to_string();
            let first = message
                .split("\n\n")
                .next()
                .unwrap_or("invalid arguments")
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .trim_start_matches("error: ")
                .to_string();
            let help = match message.lines().find_map(|l| l.strip_prefix("Usage: ")) {
                Some(usage) => {
                    // The program and its subcommands: the leading plain words, never an
                    // option (`--json`, `--`), whose `--help` would mean something else.
                    let words: Vec<&str> = usage
                        .split_whitespace()
                        .take_while(|w| {
                            !w.starts_with('-')
                                && w.chars().all(|c| c.is_ascii_lowercase() || c == '-')
                        })
                        .collect();
                    format!(" (see {} --help)", words.join(" "))
                }
                None => String::new(),
            };
            let failure = Failure {
                kind: "invalid_input",
                message: format!("{first}{help}"),
            };
            return fail(wants_json, &failure);
        }
    };
    init_tracing(cli.verbose);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return fail(
                wants_json,
                &Failure::from(Error::io("start the async runtime", e)),
            )
        }
    };
    let outcome = runtime.block_on(async move {
        match cli.command {
            Sub::Run(args) => {
                let json = args.json;
                run(args).await.map_err(|e| (json, e))
            }
            Sub::Shell(args) => {
                let json = args.json;
                shell::shell(args).await.map_err(|e| (json, e))
            }
            Sub::Compare(args) => {
                let json = args.json;
                compare::compare(args).await.map_err(|e| (json, e.into()))
            }
            Sub::Bench(args) => {
                let json = args.json;
                bench::bench(args).await.map_err(|e| (json, e.into()))
            }
            Sub::Gc(args) => gc(args).await.map_err(|e| (false, e.into())),
            Sub::Replay(args) => {
                let json = args.json;
                replay(args).await.map_err(|e| (json, e))
            }
            Sub::Serve { stdio: _ } => {
                // Every machine is closed and the output flushed: exit now, without waiting
                // for the runtime's blocking stdin reader (it never ends on a signal).
                std::process::exit(shellbox::serve::serve_stdio().await)
            }
            #[cfg(feature = "pyenv")]
            Sub::Pyenv { command } => pyenv(command).await.map_err(|e| (false, e.into())),
            #[cfg(not(feature = "pyenv"))]
            Sub::Pyenv { .. } => Err((
                false,
                Error::unsupported(
                    "this build of shellbox has no pyenv support; rebuild with the cargo feature \
                     `pyenv`, e.g. cargo install --path . --features pyenv",
                )
                .into(),
            )),
        }
    });
    // Leave background tasks (e.g. a docker cleanup on drop) a moment, not forever.
    runtime.shutdown_timeout(Duration::from_secs(10));
    match outcome {
        Ok(code) => code,
        Err((json, failure)) => fail(json, &failure),
    }
}

/// Log lines go to stderr only when asked for: `RUST_LOG` (a tracing filter) wins, else
/// `-v` (info) or `-vv` (debug); without either, nothing is logged.
fn init_tracing(verbose: u8) {
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => tracing_subscriber::EnvFilter::new(spec),
        _ => match verbose {
            0 => return,
            1 => tracing_subscriber::EnvFilter::new("info"),
            _ => tracing_subscriber::EnvFilter::new("debug"),
        },
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

/// A failure of shellbox itself as the CLI reports it: the error's kind (as
/// [`Error::kind`] names it) and a one-line message in the CLI's words.
#[derive(Debug)]
pub(crate) struct Failure {
    kind: &'static str,
    message: String,
}

impl Failure {
    /// `error`, its message prefixed with what the user asked for (e.g. `--upload ./in:/w`).
    fn context(what: &str, error: Error) -> Failure {
        let mut failure = Failure::from(error);
        failure.message = format!("{what}: {}", failure.message);
        failure
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Failure {
        Failure {
            kind: error.kind(),
            message: in_cli_words(&error.to_string()),
        }
    }
}

/// `MachineSpec` and `Command` field names in a backend's message, and the options that set
/// them, so messages name what the user typed.
const FIELD_OPTIONS: &[(&str, &str)] = &[
    ("memory_mb", "--memory-mb"),
    ("storage_mb", "--storage-mb"),
    ("pids_limit", "--pids-limit"),
    ("output_limit_bytes", "--output-limit"),
    ("registry_image", "--registry-image"),
    ("image_archive", "--image-archive"),
    ("bin_dirs", "--bin-dir"),
    ("read_only", "--read-only"),
    ("ImageSource::Sim", "--backend sim"),
    ("ImageSource::Host", "--backend local"),
];

/// A message on one line (the lines joined with "; "), with field names replaced by the
/// options that set them (whole words only).
fn in_cli_words(message: &str) -> String {
    let mut text = message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    for (field, option) in FIELD_OPTIONS {
        let mut out = String::with_capacity(text.len());
        let mut rest = text.as_str();
        while let Some(at) = rest.find(field) {
            let before = rest[..at].chars().next_back();
            let after = rest[at + field.len()..].chars().next();
            let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
            out.push_str(&rest[..at]);
            out.push_str(if word(before) || word(after) {
                field
            } else {
                option
            });
            rest = &rest[at + field.len()..];
        }
        out.push_str(rest);
        text = out;
    }
    text
}

/// Prints shellbox's own failure (one line, or the JSON error object) and returns 125.
fn fail(json: bool, failure: &Failure) -> ExitCode {
    if json {
        let value =
            serde_json::json!({"error": {"kind": failure.kind, "message": failure.message}});
        out!("{value}");
    } else {
        eprintln!("shellbox: {}", failure.message);
    }
    ExitCode::from(EXIT_SHELLBOX_ERROR)
}

/// The exit status `shellbox run` reports for a finished command.
fn status_code(exit_code: Option<i32>, reason: ExitReason) -> ExitCode {
    match (reason, exit_code) {
        (ExitReason::TimedOut, _) => ExitCode::from(EXIT_TIMED_OUT),
        (ExitReason::Exited, Some(code)) => ExitCode::from((code & 0xff) as u8),
        (ExitReason::Exited, None) => ExitCode::from(EXIT_SHELLBOX_ERROR),
    }
}

/// A created machine, and for the simulator the handle that reports what it did not support.
struct Created {
    machine: Box<dyn Machine>,
    #[cfg(feature = "sim")]
    sim: Option<Arc<shellbox::sim::SimMachine>>,
}

async fn create(
    backend: Backend,
    spec: MachineSpec,
    options: &MachineArgs,
) -> Result<Created, Error> {
    #[cfg(feature = "sim")]
    if backend == Backend::Sim {
        let machine = Arc::new(shellbox::sim::SimMachineFactory::default().create_sim(spec)?);
        return Ok(Created {
            machine: Box::new(machine.clone()),
            sim: Some(machine),
        });
    }
    let factory: Arc<dyn MachineFactory> = match options.factory(backend).await {
        Ok(factory) => factory,
        #[cfg(feature = "docker")]
        Err(e) if backend == Backend::Docker => return Err(docker_connect_error(e)),
        Err(e) => return Err(e),
    };
    Ok(Created {
        machine: factory.create(spec).await?,
        #[cfg(feature = "sim")]
        sim: None,
    })
}

/// The Docker Engine endpoint shellbox connects to: `DOCKER_HOST`, else the local socket.
#[cfg(feature = "docker")]
fn docker_host() -> String {
    std::env::var("DOCKER_HOST")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unix:///var/run/docker.sock".to_string())
}

/// Replaces a failed connection to the Docker Engine by its cause in the user's words, found
/// by connecting to the endpoint again: "permission denied on /var/run/docker.sock" (this
/// user may not use the engine), no socket there, or a TCP `DOCKER_HOST` that refused the
/// connection. Other failures are returned as they are.
#[cfg(feature = "docker")]
fn docker_connect_error(error: Error) -> Error {
    use std::io::ErrorKind;
    let host = docker_host();
    let cause = if let Some(path) = host.strip_prefix("unix://") {
        match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => None,
            Err(e) if e.kind() == ErrorKind::PermissionDenied => Some(format!(
                "permission denied on {path}: this user may not use the Docker Engine (run as \
                 root or as a member of the socket's group, usually `docker`)"
            )),
            Err(e) if e.kind() == ErrorKind::NotFound => Some(format!(
                "no Docker Engine socket at {path} (is the engine installed and running? \
                 DOCKER_HOST names another endpoint)"
            )),
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => Some(format!(
                "connection refused on {path}: the Docker Engine is not running"
            )),
            Err(e) => Some(format!("cannot connect to {path}: {e}")),
        }
    } else if let Some(address) = host.strip_prefix("tcp://") {
        let address = address.trim_end_matches('/');
        match std::net::ToSocketAddrs::to_socket_addrs(address)
            .ok()
            .and_then(|mut a| a.next())
        {
            None => Some(format!("cannot resolve DOCKER_HOST={host}")),
            Some(socket) => {
                match std::net::TcpStream::connect_timeout(&socket, Duration::from_secs(5)) {
                    Ok(_) => None,
                    Err(e) if e.kind() == ErrorKind::ConnectionRefused => Some(format!(
                        "connection refused by {address} (DOCKER_HOST={host}): no Docker \
                         Engine listens there"
                    )),
                    Err(e) => Some(format!(
                        "cannot connect to {address} (DOCKER_HOST={host}): {e}"
                    )),
                }
            }
        }
    } else {
        None
    };
    // The cause replaces bollard's words ("client error (Connect)"), which name none.
    match cause {
        Some(cause) => Error::backend("connect to the Docker Engine", cause),
        None => error,
    }
}

/// The largest `--output-limit` with `--json`: the object holds each stream as text and as
/// base64, so its memory is several times the limit (streaming output has no such bound).
const MAX_JSON_OUTPUT_LIMIT_BYTES: u64 = 256 << 20;

async fn run(args: RunArgs) -> Result<ExitCode, Failure> {
    let backend = args.machine.backend()?;
    let mut spec = args.machine.spec()?;
    for (k, v) in &args.env {
        spec.env.insert(k.clone(), v.clone());
    }
    spec.validate()?;
    let mut command = Command::from_argv(args.argv.clone()).output_limit_bytes(args.output_limit);
    command.cwd = args.cwd.clone();
    command.timeout = args.timeout.and_then(|t| t.0);
    command.user = args.user.clone();
    // Transfer sources on this host are checked before a machine is made for nothing.
    for up in &args.upload {
        if let Err(e) = std::fs::symlink_metadata(&up.host) {
            let what = format!("--upload {}:{}", up.host.display(), up.guest);
            return Err(if e.kind() == std::io::ErrorKind::NotFound {
                Failure {
                    kind: "not_found",
                    message: format!(
                        "{what}: the upload source {} does not exist",
                        up.host.display()
                    ),
                }
            } else {
                Failure::context(
                    &what,
                    Error::io(format!("read the upload source {}", up.host.display()), e),
                )
            });
        }
    }
    if args.interactive {
        // The contract hands a command its whole stdin at once, so it is read before the
        // machine starts, and bounded so an endless stdin fails instead of eating memory.
        let mut input = Vec::new();
        std::io::stdin()
            .take(MAX_STDIN_BYTES + 1)
            .read_to_end(&mut input)
            .map_err(|e| Error::io("read stdin", e))?;
        if input.len() as u64 > MAX_STDIN_BYTES {
            return Err(Error::invalid(format!(
                "stdin is larger than {} MiB; give large inputs with --upload",
                MAX_STDIN_BYTES >> 20
            ))
            .into());
        }
        command.stdin = input.into();
    }
    if args.json && args.output_limit > MAX_JSON_OUTPUT_LIMIT_BYTES {
        return Err(Error::invalid(format!(
            "--output-limit with --json is at most {} MiB (the JSON object holds the output \
             several times over); without --json the output streams and any limit works",
            MAX_JSON_OUTPUT_LIMIT_BYTES >> 20
        ))
        .into());
    }
    command.validate()?;
    for up in &args.upload {
        shellbox::validate::validate_guest_path(&up.guest)
            .map_err(|e| Failure::context(&format!("--upload {}", up.guest), e))?;
    }
    for down in &args.download {
        shellbox::validate::validate_guest_path(&down.guest)
            .map_err(|e| Failure::context(&format!("--download {}", down.guest), e))?;
    }

    // SIGINT, SIGTERM and SIGHUP stop the command and close the machine (nothing is left
    // behind), then exit 128 + N as a shell reports a signalled process.
    let signal = termination_signal();
    tokio::pin!(signal);
    let creating = create(backend, spec, &args.machine);
    tokio::pin!(creating);
    let created = tokio::select! {
        created = &mut creating => created?,
        signal = &mut signal => {
            // Let the create finish, so what it made is known and can be removed.
            if let Ok(Ok(created)) = tokio::time::timeout(CREATE_GRACE, creating).await {
                let _ = created.machine.close().await;
            }
            return Ok(ExitCode::from((128 + signal) as u8));
        }
    };
    let machine: Box<dyn Machine> = match &args.record {
        Some(path) => match std::fs::File::create(path) {
            Ok(file) => Box::new(shellbox::RecordingMachine::new(created.machine, file)),
            Err(e) => {
                let _ = created.machine.close().await;
                return Err(Failure::context(
                    &format!("--record {}", path.display()),
                    Error::io(format!("create {}", path.display()), e),
                ));
            }
        },
        None => created.machine,
    };
    let machine = &*machine;
    let outcome = tokio::select! {
        outcome = run_in(machine, &args, command) => outcome,
        signal = &mut signal => {
            let _ = machine.close().await;
            return Ok(ExitCode::from((128 + signal) as u8));
        }
    };
    let closed = machine.close().await;
    let (code, result_json) = outcome?;
    closed?;
    if let Some(mut value) = result_json {
        // One rule on every backend: what the machine could not do as real Bash would.
        // Only the simulator has such a boundary; local and docker run real programs.
        #[allow(unused_mut)]
        let mut unsupported: Vec<String> = Vec::new();
        #[cfg(feature = "sim")]
        if let Some(sim) = &created.sim {
            unsupported = sim.unsupported();
        }
        value["unsupported"] = serde_json::json!(unsupported);
        out!("{value}");
    }
    Ok(code)
}

/// `shellbox replay`: the transcript on a fresh machine, one line per divergence.
async fn replay(args: ReplayArgs) -> Result<ExitCode, Failure> {
    let transcript = std::fs::read_to_string(&args.transcript).map_err(|e| {
        Error::io(
            format!("read the transcript {}", args.transcript.display()),
            e,
        )
    })?;
    let backend = args.machine.backend()?;
    let spec = args.machine.spec()?;
    let created = create(backend, spec, &args.machine).await?;
    let report = shellbox::replay(&transcript, &*created.machine).await;
    let closed = created.machine.close().await;
    let report = report?;
    closed?;
    if args.json {
        out!(
            "{}",
            serde_json::to_string(&report).map_err(|e| Error::invalid(e.to_string()))?
        );
    } else {
        for d in &report.divergences {
            out!(
                "line {}: {}: recorded {}; replayed {}",
                d.line,
                d.op,
                describe_outcome(&d.recorded),
                describe_outcome(&d.replayed)
            );
        }
        out!(
            "{} operations replayed on {backend}, {} diverged",
            report.operations,
            report.divergences.len()
        );
    }
    Ok(if report.divergences.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// One outcome of a transcript in a few words: the status and the start of the output.
fn describe_outcome(outcome: &shellbox::record::Outcome) -> String {
    use shellbox::record::Outcome;
    let short = |s: &str| {
        let s: String = s.chars().take(60).collect();
        format!("{s:?}")
    };
    match outcome {
        Outcome::Run(r) => format!(
            "exit {} ({:?}), stdout {}{}, stderr {}{}",
            r.exit_code.map_or("none".to_string(), |c| c.to_string()),
            r.reason,
            short(&r.stdout),
            if r.stdout_truncated {
                " (truncated)"
            } else {
                ""
            },
            short(&r.stderr),
            if r.stderr_truncated {
                " (truncated)"
            } else {
                ""
            },
        ),
        Outcome::Ok { .. } => "ok".to_string(),
        Outcome::Failed { error } => format!("error {error}"),
    }
}

/// Where the last byte shellbox wrote to a stream was, so its own notes start on a line of
/// their own.
struct LineState {
    /// Whether stdout and stderr are the same file (e.g. both the terminal, or `2>&1`).
    same_file: bool,
    stdout_open_line: bool,
    stderr_open_line: bool,
    /// Whether the last byte written to either stream, in order, ended a line.
    last_open_line: bool,
}

impl LineState {
    fn new() -> Self {
        use std::os::fd::AsFd;
        use std::os::unix::fs::MetadataExt;
        let id = |fd: std::os::fd::BorrowedFd<'_>| {
            let file = std::fs::File::from(fd.try_clone_to_owned().ok()?);
            let meta = file.metadata().ok()?;
            Some((meta.dev(), meta.ino()))
        };
        let out = id(std::io::stdout().as_fd());
        let err = id(std::io::stderr().as_fd());
        LineState {
            same_file: out.is_some() && out == err,
            stdout_open_line: false,
            stderr_open_line: false,
            last_open_line: false,
        }
    }

    fn wrote(&mut self, stdout: bool, chunk: &[u8]) {
        if let Some(&last) = chunk.last() {
            let open = last != b'\n';
            if stdout {
                self.stdout_open_line = open;
            } else {
                self.stderr_open_line = open;
            }
            self.last_open_line = open;
        }
    }

    /// Writes a note of shellbox's to stderr on a line of its own.
    fn note(&mut self, text: &str) {
        let open = if self.same_file {
            self.last_open_line
        } else {
            self.stderr_open_line
        };
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{}shellbox: {text}", if open { "\n" } else { "" });
        let _ = err.flush();
        self.stderr_open_line = false;
        self.last_open_line = false;
    }
}

/// Uploads, runs (streaming, or collected for `--json`), downloads.
async fn run_in(
    machine: &dyn Machine,
    args: &RunArgs,
    command: Command,
) -> Result<(ExitCode, Option<serde_json::Value>), Failure> {
    for up in &args.upload {
        machine.upload(&up.host, &up.guest).await.map_err(|e| {
            Failure::context(&format!("--upload {}:{}", up.host.display(), up.guest), e)
        })?;
    }
    let (code, json) = if args.json {
        let result = machine.run(command).await?;
        let b64 = base64::engine::general_purpose::STANDARD;
        let value = serde_json::json!({
            "exit_code": result.exit_code,
            "reason": match result.reason { ExitReason::Exited => "exited", ExitReason::TimedOut => "timed_out" },
            "stdout": String::from_utf8_lossy(&result.stdout),
            "stderr": String::from_utf8_lossy(&result.stderr),
            "stdout_base64": b64.encode(&result.stdout),
            "stderr_base64": b64.encode(&result.stderr),
            "stdout_truncated": result.stdout_truncated,
            "stderr_truncated": result.stderr_truncated,
        });
        (status_code(result.exit_code, result.reason), Some(value))
    } else {
        let limit = command.output_limit_bytes;
        let mut stream = machine.run_stream(command).await?;
        let mut code = ExitCode::from(EXIT_SHELLBOX_ERROR);
        let stdout = std::io::stdout();
        let stderr = std::io::stderr();
        let mut lines = LineState::new();
        while let Some(event) = stream.next().await {
            match event? {
                Event::Stdout(chunk) => {
                    let mut out = stdout.lock();
                    if out.write_all(&chunk).and_then(|_| out.flush()).is_err() {
                        // Our reader is gone (e.g. `| head -1`): stop the command as a
                        // shell pipeline would (dropping the stream kills it), exit 141.
                        drop(stream);
                        return Ok((ExitCode::from(EXIT_BROKEN_PIPE), None));
                    }
                    lines.wrote(true, &chunk);
                }
                Event::Stderr(chunk) => {
                    let mut err = stderr.lock();
                    let _ = err.write_all(&chunk).and_then(|_| err.flush());
                    lines.wrote(false, &chunk);
                }
                Event::Exit(status) => {
                    if status.reason == ExitReason::TimedOut {
                        lines.note("command timed out (--timeout)");
                    }
                    for (truncated, name) in [
                        (status.stdout_truncated, "stdout"),
                        (status.stderr_truncated, "stderr"),
                    ] {
                        if truncated {
                            lines
                                .note(&format!("{name} was cut at {limit} bytes (--output-limit)"));
                        }
                    }
                    code = status_code(status.exit_code, status.reason);
                }
            }
        }
        (code, None)
    };
    for down in &args.download {
        let downloaded = match args.download_limit {
            Some(max_bytes) => {
                machine
                    .download_file(&down.guest, &down.host, max_bytes)
                    .await
            }
            None => machine.download(&down.guest, &down.host).await,
        };
        downloaded.map_err(|e| {
            let over = matches!(e, Error::DownloadLimitExceeded(_));
            let mut failure = Failure::context(
                &format!("--download {}:{}", down.guest, down.host.display()),
                e,
            );
            if over {
                failure.message.push_str(" (--download-limit)");
            }
            failure
        })?;
    }
    Ok((code, json))
}

pub(crate) use shellbox::serve::termination_signal;

/// Removes the download staging directories (`.shellbox-download-*`, beside their
/// targets) of processes that were killed mid-download, from this host's staging registry
/// (`shellbox::staging`); false when one could not be removed.
async fn gc_download_staging() -> Result<bool, Error> {
    let report = tokio::task::spawn_blocking(shellbox::staging::gc)
        .await
        .map_err(|e| Error::backend("gc download staging", e.to_string()))??;
    for dir in &report.removed {
        out!("removed {}", dir.display());
    }
    for (dir, why) in &report.failed {
        eprintln!("shellbox: could not remove {}: {why}", dir.display());
    }
    out!(
        "download staging: {} removed, {} kept (owner alive), {} failed",
        report.removed.len(),
        report.kept,
        report.failed.len()
    );
    Ok(report.failed.is_empty())
}

async fn gc(args: GcArgs) -> Result<ExitCode, Error> {
    let backend: Backend = args.backend.parse()?;
    if !args.labels.is_empty() && backend.name() != "docker" {
        return Err(Error::invalid(format!(
            "--label selects docker containers; {} machines carry no labels",
            backend.name()
        )));
    }
    // Every backend's downloads stage beside their targets.
    let staging_ok = gc_download_staging().await?;
    let backend_ok = match backend {
        #[cfg(feature = "docker")]
        Backend::Docker => {
            let factory = shellbox::docker::DockerMachineFactory::connect()
                .await
                .map_err(docker_connect_error)?;
            let labels: Vec<&str> = args.labels.iter().map(String::as_str).collect();
            let report = shellbox::docker::gc_with_labels(factory.docker(), &labels).await?;
            for name in &report.removed {
                out!("removed {name}");
            }
            for (name, why) in &report.failed {
                eprintln!("shellbox: could not remove {name}: {why}");
            }
            out!(
                "{} removed, {} kept (owner alive), {} of other hosts, {} failed",
                report.removed.len(),
                report.kept,
                report.other_hosts,
                report.failed.len()
            );
            report.failed.is_empty()
        }
        #[cfg(feature = "local")]
        Backend::Local => {
            let report = tokio::task::spawn_blocking(shellbox::local::gc)
                .await
                .map_err(|e| Error::backend("gc local machines", e.to_string()))??;
            for dir in &report.removed {
                out!("removed {}", dir.display());
            }
            for (dir, why) in &report.failed {
                eprintln!("shellbox: could not remove {}: {why}", dir.display());
            }
            out!(
                "{} removed, {} kept (owner alive), {} skipped (other host or no owner marker), {} failed",
                report.removed.len(),
                report.kept,
                report.skipped,
                report.failed.len()
            );
            report.failed.is_empty()
        }
        // Simulator machines leave nothing behind once their process ends.
        #[allow(unreachable_patterns)]
        _ => true,
    };
    Ok(if staging_ok && backend_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[cfg(feature = "pyenv")]
async fn pyenv(command: PyenvCommand) -> Result<ExitCode, Error> {
    match command {
        PyenvCommand::Build {
            root,
            lock,
            python,
            only_binary,
        } => {
            let env = tokio::task::spawn_blocking(move || {
                let options = shellbox::pyenv::BuildOptions::default().only_binary(only_binary);
                shellbox::pyenv::build_python_environment_with(&root, &lock, &python, &options)
            })
            .await
            .map_err(|e| Error::backend("build python environment", e.to_string()))?
            .map_err(|e| Error::backend("build python environment", e))?;
            out!("{}", env.python().display());
            Ok(ExitCode::SUCCESS)
        }
    }
}
