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

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use clap::{Parser, Subcommand};
use futures::StreamExt;
use shellbox::{
    Backend, Command, Error, Event, ExitReason, HostImage, ImageSource, Machine, MachineFactory,
    MachineSpec, Mount, NetworkPolicy,
};

use args::{parse_bytes, parse_duration, parse_env, parse_guest_host, parse_host_guest, HostGuest};

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
    version,
    about = "Fresh, isolated machines for agents, graders and RL rollouts"
)]
struct Cli {
    #[command(subcommand)]
    command: Sub,
}

#[derive(Subcommand, Debug)]
enum Sub {
    /// Create a machine, upload, run one command, download, close; exit with its status.
    Run(RunArgs),
    /// Run a shell corpus (JSON Lines) and compare stdout and exit status with real Bash's.
    Compare(compare::CompareArgs),
    /// Measure a backend in-process (many runs per case) and print a table or JSON lines.
    Bench(bench::BenchArgs),
    /// Remove machines leaked by processes that no longer exist (docker containers).
    Gc(GcArgs),
    /// Serve the machine contract as JSON lines on stdin/stdout (PROTOCOL.md).
    Serve {
        /// Speak on stdin and stdout (the only transport).
        #[arg(long, required = true)]
        stdio: bool,
    },
    /// Python environments for local machines.
    #[cfg(feature = "pyenv")]
    Pyenv {
        #[command(subcommand)]
        command: PyenvCommand,
    },
}

/// Options that pick a backend and describe the machine.
#[derive(clap::Args, Debug, Clone)]
pub struct MachineArgs {
    /// Backend: sim (default), local or docker.
    #[arg(long, default_value = "sim")]
    pub backend: String,
    /// docker: an image the engine already has (never pulled).
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
    /// docker: an image reference to pull from its registry.
    #[arg(long, value_name = "REFERENCE", conflicts_with = "image")]
    pub registry_image: Option<String>,
    /// docker: a Dockerfile to build (context: --context, else the Dockerfile's directory).
    #[arg(long, value_name = "PATH", conflicts_with_all = ["image", "registry_image"])]
    pub dockerfile: Option<PathBuf>,
    /// docker: the build context of --dockerfile.
    #[arg(long, value_name = "DIR", requires = "dockerfile")]
    pub context: Option<PathBuf>,
    /// docker: an image tarball in `docker save` format to load.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["image", "registry_image", "dockerfile"])]
    pub image_archive: Option<PathBuf>,
    /// Working directory of the machine (default /workspace).
    #[arg(long)]
    pub workdir: Option<String>,
    /// Network policy: deny (default) or allow.
    #[arg(long, default_value = "deny", value_parser = ["allow", "deny"])]
    pub network: String,
    /// local: a host directory mounted read-only at its own path (repeatable).
    #[arg(long = "read-only", value_name = "DIR")]
    pub read_only: Vec<PathBuf>,
    /// local: a directory put first on PATH (repeatable).
    #[arg(long = "bin-dir", value_name = "DIR")]
    pub bin_dirs: Vec<PathBuf>,
    /// local: a host path shown read-only at a machine path, HOST:GUEST (repeatable).
    #[arg(long = "mount", value_name = "HOST:GUEST", value_parser = parse_host_guest)]
    pub mounts: Vec<HostGuest>,
    /// Memory limit in MiB.
    #[arg(long)]
    pub memory_mb: Option<u64>,
    /// CPU limit in whole CPUs.
    #[arg(long)]
    pub cpus: Option<u32>,
}

impl MachineArgs {
    pub fn backend(&self) -> Result<Backend, Error> {
        self.backend.parse()
    }

    /// The machine spec these options describe.
    pub fn spec(&self) -> Result<MachineSpec, Error> {
        let backend = self.backend()?;
        let mut spec = match backend {
            Backend::Docker => {
                let source = if let Some(image) = &self.image {
                    ImageSource::Docker(shellbox::DockerImage {
                        reference: image.clone(),
                    })
                } else if let Some(reference) = &self.registry_image {
                    ImageSource::Registry(shellbox::RegistryImage {
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
                    ImageSource::Dockerfile(shellbox::DockerfileSource {
                        context,
                        dockerfile,
                    })
                } else if let Some(path) = &self.image_archive {
                    ImageSource::Archive(shellbox::ImageArchive { path: path.clone() })
                } else {
                    return Err(Error::invalid(
                        "the docker backend needs --image, --registry-image, --dockerfile or --image-archive",
                    ));
                };
                MachineSpec::new(source)
            }
            Backend::Local => MachineSpec::new(ImageSource::Host(HostImage {
                read_only: self.read_only.clone(),
                bin_dirs: self.bin_dirs.clone(),
                mounts: self
                    .mounts
                    .iter()
                    .map(|m| Mount {
                        host: m.host.clone(),
                        guest: m.guest.clone(),
                    })
                    .collect(),
            })),
            Backend::Sim => MachineSpec::sim(),
        };
        if backend != Backend::Local
            && !(self.read_only.is_empty() && self.bin_dirs.is_empty() && self.mounts.is_empty())
        {
            return Err(Error::unsupported(format!(
                "--read-only, --bin-dir and --mount need --backend local, not {backend}"
            )));
        }
        if backend != Backend::Docker
            && (self.image.is_some()
                || self.registry_image.is_some()
                || self.dockerfile.is_some()
                || self.image_archive.is_some())
        {
            return Err(Error::unsupported(format!(
                "image options need --backend docker, not {backend}"
            )));
        }
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
    /// Deadline: 30s, 1.5s, 2m, 250ms or plain seconds. On expiry exit 124.
    #[arg(long, value_parser = parse_duration)]
    timeout: Option<Duration>,
    /// Bytes kept per stream: bytes, or with KiB, MiB, GiB (default 1MiB).
    #[arg(long, value_parser = parse_bytes, default_value = "1MiB")]
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
    /// Print one JSON object with the result instead of streaming the output.
    #[arg(long)]
    json: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "ARGV")]
    argv: Vec<String>,
}

#[derive(clap::Args, Debug)]
struct GcArgs {
    /// Backend to clean: docker.
    #[arg(long, default_value = "docker")]
    backend: String,
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
    },
}

pub fn main() -> ExitCode {
    let wants_json = std::env::args_os()
        .take_while(|a| a != "--")
        .any(|a| a == "--json");
    let cli = match Cli::try_parse() {
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
            return fail(wants_json, "invalid_input", &first, Some(&message));
        }
    };
    init_tracing();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return fail(
                wants_json,
                "io",
                &format!("cannot start the async runtime: {e}"),
                None,
            )
        }
    };
    let outcome = runtime.block_on(async move {
        match cli.command {
            Sub::Run(args) => {
                let json = args.json;
                run(args).await.map_err(|e| (json, e))
            }
            Sub::Compare(args) => {
                let json = args.json;
                compare::compare(args).await.map_err(|e| (json, e))
            }
            Sub::Bench(args) => {
                let json = args.json;
                bench::bench(args).await.map_err(|e| (json, e))
            }
            Sub::Gc(args) => gc(args).await.map_err(|e| (false, e)),
            Sub::Serve { stdio: _ } => {
                Ok(ExitCode::from(shellbox::serve::serve_stdio().await as u8))
            }
            #[cfg(feature = "pyenv")]
            Sub::Pyenv { command } => pyenv(command).await.map_err(|e| (false, e)),
        }
    });
    // Leave background tasks (e.g. a docker cleanup on drop) a moment, not forever.
    runtime.shutdown_timeout(Duration::from_secs(10));
    match outcome {
        Ok(code) => code,
        Err((json, e)) => fail(json, e.kind(), &e.to_string(), None),
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new("warn,shellbox_docker=info,shellbox_pyenv=info")
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

/// Prints shellbox's own failure (one line, or the JSON error object) and returns 125.
fn fail(json: bool, kind: &str, message: &str, detail: Option<&str>) -> ExitCode {
    if json {
        let value = serde_json::json!({"error": {"kind": kind, "message": message}});
        out!("{value}");
    } else {
        eprintln!("shellbox: {message}");
        if let Some(detail) = detail {
            if detail.contains("Usage:") {
                if let Some(usage) = detail.lines().find(|l| l.starts_with("Usage:")) {
                    eprintln!("{usage}");
                }
            }
        }
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

async fn create(backend: Backend, spec: MachineSpec) -> Result<Created, Error> {
    #[cfg(feature = "sim")]
    if backend == Backend::Sim {
        let machine = Arc::new(shellbox::sim::SimMachineFactory::default().create_sim(spec)?);
        return Ok(Created {
            machine: Box::new(SharedMachine(machine.clone())),
            sim: Some(machine),
        });
    }
    let factory: Arc<dyn MachineFactory> = shellbox::factory(backend).await?;
    Ok(Created {
        machine: factory.create(spec).await?,
        #[cfg(feature = "sim")]
        sim: None,
    })
}

/// Lets the CLI keep a typed handle on a simulator machine it also uses as `dyn Machine`.
#[cfg(feature = "sim")]
struct SharedMachine(Arc<shellbox::sim::SimMachine>);

#[cfg(feature = "sim")]
#[shellbox::async_trait]
impl Machine for SharedMachine {
    async fn run(&self, command: Command) -> Result<shellbox::CommandResult, Error> {
        self.0.run(command).await
    }
    async fn run_stream(&self, command: Command) -> Result<shellbox::EventStream, Error> {
        self.0.run_stream(command).await
    }
    async fn upload(&self, source: &std::path::Path, target: &str) -> Result<(), Error> {
        self.0.upload(source, target).await
    }
    async fn download(&self, source: &str, target: &std::path::Path) -> Result<(), Error> {
        self.0.download(source, target).await
    }
    async fn close(&self) -> Result<(), Error> {
        self.0.close().await
    }
}

async fn run(args: RunArgs) -> Result<ExitCode, Error> {
    let backend = args.machine.backend()?;
    let mut spec = args.machine.spec()?;
    for (k, v) in &args.env {
        spec.env.insert(k.clone(), v.clone());
    }
    spec.validate()?;
    let mut command = Command::from_argv(args.argv.clone()).output_limit_bytes(args.output_limit);
    command.cwd = args.cwd.clone();
    // As with timeout(1), a zero duration disables the timeout.
    command.timeout = args.timeout.filter(|t| !t.is_zero());
    command.user = args.user.clone();
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
            )));
        }
        command.stdin = input.into();
    }
    command.validate()?;
    for up in &args.upload {
        shellbox::validate::validate_guest_path(&up.guest)?;
    }
    for down in &args.download {
        shellbox::validate::validate_guest_path(&down.guest)?;
    }

    // SIGINT, SIGTERM and SIGHUP stop the command and close the machine (nothing is left
    // behind), then exit 128 + N as a shell reports a signalled process.
    let signal = termination_signal();
    tokio::pin!(signal);
    let creating = create(backend, spec);
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
    let machine = &*created.machine;
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
    if let Some(value) = result_json {
        #[cfg(feature = "sim")]
        let value = {
            let mut value = value;
            if let Some(sim) = &created.sim {
                value["unsupported"] = serde_json::json!(sim.unsupported());
            }
            value
        };
        out!("{value}");
    }
    Ok(code)
}

/// Uploads, runs (streaming, or collected for `--json`), downloads.
async fn run_in(
    machine: &dyn Machine,
    args: &RunArgs,
    command: Command,
) -> Result<(ExitCode, Option<serde_json::Value>), Error> {
    for up in &args.upload {
        machine.upload(&up.host, &up.guest).await?;
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
                }
                Event::Stderr(chunk) => {
                    let mut err = stderr.lock();
                    let _ = err.write_all(&chunk).and_then(|_| err.flush());
                }
                Event::Exit(status) => {
                    if status.reason == ExitReason::TimedOut {
                        eprintln!("shellbox: command timed out");
                    }
                    for (truncated, name) in [
                        (status.stdout_truncated, "stdout"),
                        (status.stderr_truncated, "stderr"),
                    ] {
                        if truncated {
                            eprintln!("shellbox: {name} was cut at {limit} bytes (--output-limit)");
                        }
                    }
                    code = status_code(status.exit_code, status.reason);
                }
            }
        }
        (code, None)
    };
    for down in &args.download {
        machine.download(&down.guest, &down.host).await?;
    }
    Ok((code, json))
}

/// Resolves with the number of the first SIGINT, SIGTERM or SIGHUP this process gets (never,
/// if the handlers cannot be installed).
async fn termination_signal() -> i32 {
    use tokio::signal::unix::{signal, Signal, SignalKind};
    async fn next(signal: &mut Option<Signal>) {
        match signal {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending().await,
        }
    }
    let mut interrupt = signal(SignalKind::interrupt()).ok();
    let mut terminate = signal(SignalKind::terminate()).ok();
    let mut hangup = signal(SignalKind::hangup()).ok();
    tokio::select! {
        _ = next(&mut interrupt) => 2,
        _ = next(&mut terminate) => 15,
        _ = next(&mut hangup) => 1,
    }
}

async fn gc(args: GcArgs) -> Result<ExitCode, Error> {
    let backend: Backend = args.backend.parse()?;
    match backend {
        #[cfg(feature = "docker")]
        Backend::Docker => {
            let factory = shellbox::docker::DockerMachineFactory::connect().await?;
            let report = shellbox::docker::gc(factory.docker()).await?;
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
            if !report.failed.is_empty() {
                return Ok(ExitCode::from(1));
            }
            Ok(ExitCode::SUCCESS)
        }
        other => Err(Error::unsupported(format!(
            "gc cleans docker containers; {other} machines leave nothing behind once their process ends{}",
            if cfg!(feature = "docker") { "" } else { " (and this build has no docker backend)" }
        ))),
    }
}

#[cfg(feature = "pyenv")]
async fn pyenv(command: PyenvCommand) -> Result<ExitCode, Error> {
    match command {
        PyenvCommand::Build { root, lock, python } => {
            let env = tokio::task::spawn_blocking(move || {
                shellbox::pyenv::build_python_environment(&root, &lock, &python)
            })
            .await
            .map_err(|e| Error::backend("build python environment", e.to_string()))?
            .map_err(|e| Error::backend("build python environment", e))?;
            out!("{}", env.python().display());
            Ok(ExitCode::SUCCESS)
        }
    }
}
