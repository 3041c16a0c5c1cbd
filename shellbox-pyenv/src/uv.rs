//! The uv command lines of a build (pure), and the thin runner that executes them.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::{BuildOptions, PyenvError, PythonSource};

/// The most of uv's stderr kept in an error (its tail), in bytes.
const STDERR_KEEP_BYTES: usize = 64 * 1024;

/// Which part of the build a [`UvStep`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StepKind {
    /// `uv python install`: download CPython into `root/python` (managed builds only).
    InstallPython,
    /// `uv venv`: create `root/venv`.
    CreateVenv,
    /// `uv pip sync`: install exactly the locked packages into the venv.
    SyncPackages,
    /// `uv pip compile --generate-hashes --no-build`: lock a set of requirements
    /// ([`resolve_python_environment`](crate::resolve_python_environment) only).
    CompileLock,
}

/// One uv invocation of a build: its argv (starting with the uv executable) and the
/// variables set on top of the inherited environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UvStep {
    /// Which step this is.
    pub kind: StepKind,
    /// Program and arguments; `argv[0]` is the uv executable.
    pub argv: Vec<OsString>,
    /// Variables set for this step (the rest of the builder's environment is inherited,
    /// so `UV_PYTHON_INSTALL_MIRROR`, `UV_INDEX_URL`, proxies and the like pass through).
    pub env: Vec<(OsString, OsString)>,
}

impl UvStep {
    /// The step's argv as one shell-quoted line, the uv executable first, e.g.
    /// `uv python install --no-config --no-bin 3.12.12`: how error messages begin (the
    /// reference library's form). The variables are in [`UvStep::env_line`].
    pub fn command_line(&self) -> String {
        self.argv
            .iter()
            .map(|a| shell_quote(a))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The variables set for the step as shell-quoted `NAME=value` words, e.g.
    /// `UV_PYTHON_INSTALL_DIR=/envs/a/python`; empty when there are none.
    /// `format!("{} {}", env_line, command_line)` is the step as a shell would run it.
    pub fn env_line(&self) -> String {
        self.env
            .iter()
            .map(|(key, value)| {
                let mut assignment = key.clone();
                assignment.push("=");
                assignment.push(value);
                shell_quote(&assignment)
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The uv steps that build `root` from `lock` with `python`, in order. Pure: nothing is run
/// or checked.
///
/// `root` and `lock` should be absolute (the builder passes resolved paths). The steps are
/// the reference library's (`marin-shellbox`, REFERENCE.md section 7): `--no-config` so no
/// user or project `uv.toml` changes the build. For a [`PythonSource::Managed`] version `V`:
///
/// 1. `uv python install --no-config --no-bin V` with `UV_PYTHON_INSTALL_DIR=root/python`
///    (and `UV_PYTHON_INSTALL_MIRROR` when [`BuildOptions::python_install_mirror`] is set);
/// 2. `uv venv --no-config --managed-python --no-python-downloads --python V root/venv`
///    with the same `UV_PYTHON_INSTALL_DIR`;
/// 3. `uv pip sync --no-config --python root/venv/bin/python3 --require-hashes --link-mode copy [--no-build] lock`.
///
/// For a [`PythonSource::Interpreter`] path `P`, step 1 is absent and step 2 is
/// `uv venv --no-config --no-managed-python --no-python-downloads --python P root/venv`.
/// `--no-build` is added when [`BuildOptions::only_binary`] is set; `--link-mode copy` keeps
/// anything from pointing into uv's cache.
pub fn uv_steps(
    uv: &Path,
    root: &Path,
    lock: &Path,
    python: &PythonSource,
    options: &BuildOptions,
) -> Vec<UvStep> {
    let uv: OsString = uv.as_os_str().to_owned();
    let venv = root.join("venv");
    let install_dir = || {
        (
            OsString::from("UV_PYTHON_INSTALL_DIR"),
            root.join("python").into_os_string(),
        )
    };
    let argv = |args: &[&OsStr]| -> Vec<OsString> {
        std::iter::once(uv.clone())
            .chain(args.iter().map(|a| a.to_os_string()))
            .collect()
    };
    let mut steps = Vec::new();
    match python {
        PythonSource::Managed(version) => {
            let mut env = vec![install_dir()];
            if let Some(mirror) = &options.python_install_mirror {
                env.push(("UV_PYTHON_INSTALL_MIRROR".into(), mirror.into()));
            }
            steps.push(UvStep {
                kind: StepKind::InstallPython,
                argv: argv(&[
                    "python".as_ref(),
                    "install".as_ref(),
                    "--no-config".as_ref(),
                    "--no-bin".as_ref(),
                    version.as_ref(),
                ]),
                env,
            });
            steps.push(UvStep {
                kind: StepKind::CreateVenv,
                argv: argv(&[
                    "venv".as_ref(),
                    "--no-config".as_ref(),
                    "--managed-python".as_ref(),
                    "--no-python-downloads".as_ref(),
                    "--python".as_ref(),
                    version.as_ref(),
                    venv.as_os_str(),
                ]),
                env: vec![install_dir()],
            });
        }
        PythonSource::Interpreter(path) => {
            steps.push(UvStep {
                kind: StepKind::CreateVenv,
                argv: argv(&[
                    "venv".as_ref(),
                    "--no-config".as_ref(),
                    "--no-managed-python".as_ref(),
                    "--no-python-downloads".as_ref(),
                    "--python".as_ref(),
                    path.as_os_str(),
                    venv.as_os_str(),
                ]),
                env: Vec::new(),
            });
        }
    }
    let venv_python = venv.join("bin").join("python3");
    let mut sync: Vec<&OsStr> = vec![
        "pip".as_ref(),
        "sync".as_ref(),
        "--no-config".as_ref(),
        "--python".as_ref(),
        venv_python.as_os_str(),
        "--require-hashes".as_ref(),
        "--link-mode".as_ref(),
        "copy".as_ref(),
    ];
    if options.only_binary {
        sync.push("--no-build".as_ref());
    }
    sync.push(lock.as_os_str());
    steps.push(UvStep {
        kind: StepKind::SyncPackages,
        argv: argv(&sync),
        env: Vec::new(),
    });
    steps
}

/// Whether uv's stderr from `uv python install` says the interpreter could not be
/// downloaded (network down, DNS failure, unreachable or missing mirror, `UV_OFFLINE`),
/// as opposed to other failures (e.g. `No download found for request`, an unknown version).
///
/// The phrases are uv's own (checked against uv 0.13): "Failed to download `URL`",
/// `Network connectivity is disabled`, and for a `file://` mirror
/// `failed to query metadata of file`.
pub fn is_download_failure(stderr: &str) -> bool {
    const SIGNS: [&str; 5] = [
        "Failed to download",
        "Network connectivity is disabled",
        "failed to query metadata of file",
        "error sending request",
        "dns error",
    ];
    SIGNS.iter().any(|sign| stderr.contains(sign))
}

/// Single-quotes `word` for a POSIX shell unless it consists only of characters that need
/// no quoting.
pub(crate) fn shell_quote(word: &OsStr) -> String {
    let bytes = word.as_bytes();
    let plain = !bytes.is_empty()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"_@%+=:,./-".contains(b));
    let text = word.to_string_lossy();
    if plain {
        text.into_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// Finds the uv executable: [`BuildOptions::uv`] when set (a path containing `/` must be an
/// executable file; a bare name is searched like `uv`), else `uv` in
/// [`BuildOptions::search_path`] or the process's `PATH`.
pub(crate) fn locate_uv(options: &BuildOptions) -> Result<PathBuf, PyenvError> {
    let name: &Path = options.uv.as_deref().unwrap_or(Path::new("uv"));
    if name.as_os_str().as_bytes().contains(&b'/') {
        return if is_executable_file(name) {
            Ok(name.to_path_buf())
        } else {
            Err(PyenvError::UvMissing {
                reason: format!("{} is not an executable file", name.display()),
            })
        };
    }
    let search = options
        .search_path
        .clone()
        .or_else(|| std::env::var_os("PATH"))
        .unwrap_or_default();
    for dir in std::env::split_paths(&search) {
        let candidate = dir.join(name);
        if dir.is_absolute() && is_executable_file(&candidate) {
            return Ok(candidate);
        }
    }
    Err(PyenvError::UvMissing {
        reason: format!("no executable {:?} in PATH {:?}", name.as_os_str(), search),
    })
}

/// How long [`check_download`] waits for one connection to the download's host (or proxy).
const PROBE_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether `uv python install V` could get CPython `version` here, judged without
/// downloading it (for [`check_resolve`](crate::check_resolve)): asks uv where it would
/// download from (`uv python list --no-config --only-downloads --show-urls V`, with the
/// options' mirror as `UV_PYTHON_INSTALL_MIRROR`, as the install step gets it), then
/// accepts when the archive is in `UV_PYTHON_CACHE_DIR` (where uv keeps downloaded archives
/// when that is set), else refuses under `UV_OFFLINE`, and otherwise checks that the URL
/// can be reached: a `file:` URL's file exists; an `http(s)` URL's host (or the proxy of
/// `HTTPS_PROXY`/`HTTP_PROXY`/`ALL_PROXY`, either case) resolves and accepts a TCP
/// connection within [`PROBE_CONNECT_TIMEOUT`] (for uv's default host, the GitHub releases
/// it falls back to count too). Whether the server then has the file is not checked. When
/// uv names no download (an unknown version, uv failing), nothing is judged here: the
/// install step says what is wrong.
///
/// # Errors
/// [`PyenvError::DownloadUnreachable`] when the download cannot be reached.
pub(crate) fn check_download(
    uv: &Path,
    version: &str,
    options: &BuildOptions,
) -> Result<(), PyenvError> {
    let mut command = std::process::Command::new(uv);
    command.args([
        "python",
        "list",
        "--no-config",
        "--only-downloads",
        "--show-urls",
        version,
    ]);
    if let Some(mirror) = &options.python_install_mirror {
        command.env("UV_PYTHON_INSTALL_MIRROR", mirror);
    }
    let output = match command.stdin(Stdio::null()).output() {
        Ok(output) if output.status.success() => output,
        _ => return Ok(()),
    };
    let Some(url) = download_url(&String::from_utf8_lossy(&output.stdout), version) else {
        return Ok(());
    };
    let refused = |reason: String| PyenvError::DownloadUnreachable {
        version: version.to_string(),
        url: url.clone(),
        reason,
    };
    if let Some(dir) = std::env::var_os("UV_PYTHON_CACHE_DIR").filter(|d| !d.is_empty()) {
        let name = percent_decode(url.rsplit('/').next().unwrap_or_default());
        if Path::new(&dir).join(name).is_file() {
            return Ok(());
        }
    }
    if env_flag("UV_OFFLINE") {
        return Err(refused(
            "UV_OFFLINE is set and the archive is not in UV_PYTHON_CACHE_DIR".into(),
        ));
    }
    if let Some(path) = url.strip_prefix("file://") {
        let path = percent_decode(path);
        return if Path::new(&path).is_file() {
            Ok(())
        } else {
            Err(refused(format!("no file {path}")))
        };
    }
    let Some((scheme, host, port)) = url_authority(&url) else {
        return Ok(());
    };
    let proxy = proxy_for(&scheme);
    let mut targets = vec![match &proxy {
        Some(p) => p.clone(),
        None => (host.clone(), port),
    }];
    if proxy.is_none() && host == "releases.astral.sh" {
        targets.push(("github.com".to_string(), 443));
    }
    let mut why = Vec::new();
    for (host, port) in &targets {
        match connect(host, *port) {
            Ok(()) => return Ok(()),
            Err(e) => why.push(format!("{host}:{port}: {e}")),
        }
    }
    let through = if proxy.is_some() { " (the proxy)" } else { "" };
    Err(refused(format!(
        "cannot connect to {}{through}",
        why.join("; ")
    )))
}

/// The URL of `uv python list --show-urls` output for CPython `version`: the second field of
/// the first line whose key names it.
fn download_url(listing: &str, version: &str) -> Option<String> {
    let key = format!("cpython-{version}-");
    listing.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let name = fields.next()?;
        let url = fields.next()?;
        (name.starts_with(&key) && url.contains("://")).then(|| url.to_string())
    })
}

/// Whether an environment flag is set to something other than empty, `0` or `false`.
fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false" | "no"))
}

/// `%XX` escapes decoded (a URL path's file name).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `(scheme, host, port)` of an `http`, `https` (or proxy) URL; `None` for another scheme.
fn url_authority(url: &str) -> Option<(String, String, u16)> {
    let (scheme, rest) = url.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "https" => 443,
        "http" => 80,
        "socks5" | "socks5h" => 1080,
        _ => return None,
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit('@').next()?;
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (host, after) = v6.split_once(']')?;
            (host, after.strip_prefix(':'))
        }
        None => match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    let port = match port {
        Some(p) => p.parse().ok()?,
        None => default_port,
    };
    (!host.is_empty()).then(|| (scheme, host.to_string(), port))
}

/// The proxy uv would use for a `scheme` URL, as `(host, port)`, from the usual variables.
fn proxy_for(scheme: &str) -> Option<(String, u16)> {
    let names: &[&str] = match scheme {
        "https" => &["HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"],
        _ => &["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"],
    };
    names.iter().find_map(|name| {
        let value = std::env::var(name).ok().filter(|v| !v.trim().is_empty())?;
        let value = if value.contains("://") {
            value
        } else {
            format!("http://{value}")
        };
        url_authority(&value).map(|(_, host, port)| (host, port))
    })
}

/// Resolves `host` and connects to one of its addresses within [`PROBE_CONNECT_TIMEOUT`].
fn connect(host: &str, port: u16) -> std::io::Result<()> {
    use std::net::ToSocketAddrs;
    let mut last = std::io::Error::other("the name resolves to no address");
    for address in (host, port).to_socket_addrs()? {
        match std::net::TcpStream::connect_timeout(&address, PROBE_CONNECT_TIMEOUT) {
            Ok(_) => return Ok(()),
            Err(e) => last = e,
        }
    }
    Err(last)
}

fn is_executable_file(path: &Path) -> bool {
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Runs one step, capturing stdout (logged at debug level) and stderr (kept for errors).
pub(crate) fn run_step(step: &UvStep, version: Option<&str>) -> Result<(), PyenvError> {
    run_step_in(step, version, None)
}

/// [`run_step`] in the working directory `cwd` (the process's own when `None`).
pub(crate) fn run_step_in(
    step: &UvStep,
    version: Option<&str>,
    cwd: Option<&Path>,
) -> Result<(), PyenvError> {
    let command_line = step.command_line();
    let env_line = step.env_line();
    tracing::debug!(command = %command_line, env = %env_line, "running uv");
    let mut command = std::process::Command::new(&step.argv[0]);
    if let Some(cwd) = cwd {
        command.current_dir(cwd);
    }
    die_with_owner(&mut command);
    let output = command
        .args(&step.argv[1..])
        .envs(step.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied => {
                PyenvError::UvMissing {
                    reason: format!("cannot run {}: {e}", Path::new(&step.argv[0]).display()),
                }
            }
            _ => PyenvError::io("run", PathBuf::from(&step.argv[0]), e),
        })?;
    if !output.stdout.is_empty() {
        tracing::debug!(stdout = %String::from_utf8_lossy(&output.stdout), "uv output");
    }
    if output.status.success() {
        return Ok(());
    }
    let tail = &output.stderr[output.stderr.len().saturating_sub(STDERR_KEEP_BYTES)..];
    let stderr = String::from_utf8_lossy(tail).trim_end().to_string();
    let exit_code = output.status.code();
    if step.kind == StepKind::InstallPython && is_download_failure(&stderr) {
        return Err(PyenvError::DownloadUnavailable {
            version: version.unwrap_or_default().to_string(),
            command: command_line,
            env: env_line,
            exit_code,
            stderr,
        });
    }
    Err(PyenvError::UvFailed {
        command: command_line,
        env: env_line,
        exit_code,
        stderr,
    })
}

/// Makes the spawned uv die (`SIGKILL`) when the thread that spawned it ends
/// (`PR_SET_PDEATHSIG`), so a build whose owner is killed (`kill -9` of the process) leaves
/// no uv writing into the environment or its cache; the next build takes the lock, finds
/// no marker and rebuilds. The death signal fires when the spawning *thread* exits; this
/// one waits for uv, so it outlives it. Should the owner have died between the fork and
/// the `prctl` (the parent pid is no longer the spawner's), the child exits at once. The
/// child's umask is 022 (its files are writable by their owner only).
#[allow(unsafe_code)]
fn die_with_owner(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let owner = nix::unistd::getpid();
    // SAFETY: the closure runs in the forked child before exec and calls only
    // async-signal-safe system calls (prctl, getppid), allocating nothing.
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(std::io::Error::from)?;
            if nix::unistd::getppid() != owner {
                return Err(std::io::Error::other("the build's owner exited"));
            }
            // What uv makes in the cache (the environment, the lock) is never group- or
            // world-writable, whatever the owner's umask (second break-it pass of issue 12:
            // under umask 000 every file of the environment was 0666/0777, and another
            // user planted a .pth file that the next machine imported).
            nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(argv: &[OsString]) -> Vec<&str> {
        argv.iter().map(|a| a.to_str().unwrap()).collect()
    }

    #[test]
    fn managed_steps_are_exact() {
        let options = BuildOptions::default();
        let steps = uv_steps(
            Path::new("/opt/uv"),
            Path::new("/envs/a"),
            Path::new("/locks/req.txt"),
            &PythonSource::Managed("3.12.12".into()),
            &options,
        );
        assert_eq!(steps.len(), 3);
        assert_eq!(steps[0].kind, StepKind::InstallPython);
        assert_eq!(
            strings(&steps[0].argv),
            [
                "/opt/uv",
                "python",
                "install",
                "--no-config",
                "--no-bin",
                "3.12.12"
            ]
        );
        assert_eq!(
            steps[0].env,
            [("UV_PYTHON_INSTALL_DIR".into(), "/envs/a/python".into())]
        );
        assert_eq!(steps[1].kind, StepKind::CreateVenv);
        assert_eq!(
            strings(&steps[1].argv),
            [
                "/opt/uv",
                "venv",
                "--no-config",
                "--managed-python",
                "--no-python-downloads",
                "--python",
                "3.12.12",
                "/envs/a/venv"
            ]
        );
        assert_eq!(
            steps[1].env,
            [("UV_PYTHON_INSTALL_DIR".into(), "/envs/a/python".into())]
        );
        assert_eq!(steps[2].kind, StepKind::SyncPackages);
        assert_eq!(
            strings(&steps[2].argv),
            [
                "/opt/uv",
                "pip",
                "sync",
                "--no-config",
                "--python",
                "/envs/a/venv/bin/python3",
                "--require-hashes",
                "--link-mode",
                "copy",
                "/locks/req.txt"
            ]
        );
        assert!(steps[2].env.is_empty());
    }

    #[test]
    fn mirror_and_only_binary_options() {
        let options = BuildOptions {
            python_install_mirror: Some("file:///srv/mirror".into()),
            only_binary: true,
            ..BuildOptions::default()
        };
        let steps = uv_steps(
            Path::new("uv"),
            Path::new("/envs/a"),
            Path::new("/l"),
            &PythonSource::Managed("3.13.1".into()),
            &options,
        );
        assert_eq!(
            steps[0].env,
            [
                ("UV_PYTHON_INSTALL_DIR".into(), "/envs/a/python".into()),
                (
                    "UV_PYTHON_INSTALL_MIRROR".into(),
                    "file:///srv/mirror".into()
                )
            ]
        );
        assert_eq!(strings(&steps[2].argv)[8..], ["copy", "--no-build", "/l"]);
        assert_eq!(
            steps[0].command_line(),
            "uv python install --no-config --no-bin 3.13.1"
        );
        assert_eq!(
            steps[0].env_line(),
            "UV_PYTHON_INSTALL_DIR=/envs/a/python UV_PYTHON_INSTALL_MIRROR=file:///srv/mirror"
        );
        assert_eq!(steps[2].env_line(), "");
        let failed = PyenvError::UvFailed {
            command: steps[0].command_line(),
            env: steps[0].env_line(),
            exit_code: Some(2),
            stderr: "error: boom".into(),
        };
        assert_eq!(
            failed.to_string(),
            "uv python install --no-config --no-bin 3.13.1 exited with status 2:\nerror: boom\n\
             (uv ran with UV_PYTHON_INSTALL_DIR=/envs/a/python \
             UV_PYTHON_INSTALL_MIRROR=file:///srv/mirror)"
        );
        let failed = PyenvError::UvFailed {
            command: steps[2].command_line(),
            env: steps[2].env_line(),
            exit_code: None,
            stderr: "killed".into(),
        };
        assert!(failed
            .to_string()
            .ends_with("was killed by a signal:\nkilled"));
    }

    #[test]
    fn interpreter_steps_are_exact() {
        let steps = uv_steps(
            Path::new("/bin/uv"),
            Path::new("/envs/b"),
            Path::new("/l.txt"),
            &PythonSource::Interpreter("/opt/py/bin/python3.11".into()),
            &BuildOptions::default(),
        );
        assert_eq!(steps.len(), 2);
        assert_eq!(
            strings(&steps[0].argv),
            [
                "/bin/uv",
                "venv",
                "--no-config",
                "--no-managed-python",
                "--no-python-downloads",
                "--python",
                "/opt/py/bin/python3.11",
                "/envs/b/venv"
            ]
        );
        assert!(steps[0].env.is_empty());
        assert_eq!(steps[1].kind, StepKind::SyncPackages);
        assert_eq!(strings(&steps[1].argv)[5], "/envs/b/venv/bin/python3");
    }

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("a/b-c.txt".as_ref()), "a/b-c.txt");
        assert_eq!(shell_quote("".as_ref()), "''");
        assert_eq!(shell_quote("a b".as_ref()), "'a b'");
        assert_eq!(shell_quote("it's".as_ref()), r"'it'\''s'");
        assert_eq!(shell_quote("$HOME".as_ref()), "'$HOME'");
    }

    #[test]
    fn download_failures_are_recognised() {
        // Real uv 0.13 stderr texts.
        let dns = "error: Failed to install cpython-3.12.12-linux-x86_64-gnu\n  cause: Request failed after 3 retries in 11.1s\n  cause: Failed to download `https://github.com/astral-sh/python-build-standalone/releases/download/20260211/cpython-3.12.12%2B20260211-x86_64-unknown-linux-gnu-install_only_stripped.tar.gz`\n  cause: error sending request for url (https://github.com/...)\n  cause: client error (Connect)\n  cause: dns error";
        let offline = "error: Failed to install cpython-3.12.12-linux-x86_64-gnu\n  cause: Failed to download `https://github.com/x.tar.gz`\n  cause: Network connectivity is disabled, but the requested data wasn't found in the cache: https://github.com/x.tar.gz";
        let file_mirror = "error: Failed to install cpython-3.12.12-linux-x86_64-gnu\n  cause: failed to query metadata of file `/nonexistent/mirror/20260211/cpython-3.12.12+20260211-x86_64-unknown-linux-gnu-install_only_stripped.tar.gz`: No such file or directory (os error 2)";
        assert!(is_download_failure(dns));
        assert!(is_download_failure(offline));
        assert!(is_download_failure(file_mirror));
        assert!(!is_download_failure(
            "error: No download found for request: cpython-3.12.99-linux-x86_64-gnu"
        ));
        assert!(!is_download_failure(
            "error: Permission denied (os error 13)"
        ));
    }

    #[test]
    fn download_probe_parsing() {
        let listing = "cpython-3.12.12-linux-x86_64-gnu    https://releases.astral.sh/github/x/cpython-3.12.12%2B20260211-x86_64.tar.gz\n";
        let url = download_url(listing, "3.12.12").unwrap();
        assert!(url.ends_with("%2B20260211-x86_64.tar.gz"), "{url}");
        assert_eq!(download_url(listing, "3.12.1"), None);
        assert_eq!(download_url("", "3.12.12"), None);
        assert_eq!(
            percent_decode("cpython-3.12.12%2B2026.tar.gz%"),
            "cpython-3.12.12+2026.tar.gz%"
        );
        let authority = |u: &str| url_authority(u).map(|(s, h, p)| format!("{s} {h} {p}"));
        assert_eq!(
            authority("https://releases.astral.sh/github/x").as_deref(),
            Some("https releases.astral.sh 443")
        );
        assert_eq!(
            authority("http://user:pw@proxy:3128").as_deref(),
            Some("http proxy 3128")
        );
        assert_eq!(
            authority("http://[::1]:8080/x").as_deref(),
            Some("http ::1 8080")
        );
        assert_eq!(authority("file:///x"), None);
        assert_eq!(authority("https://:443/"), None);
    }

    #[test]
    fn locate_uv_explicit_and_search() {
        let missing = BuildOptions {
            uv: Some("/nonexistent/uv".into()),
            ..BuildOptions::default()
        };
        assert!(matches!(
            locate_uv(&missing),
            Err(PyenvError::UvMissing { .. })
        ));
        let empty_path = BuildOptions {
            search_path: Some("/nonexistent:/proc".into()),
            ..BuildOptions::default()
        };
        let err = locate_uv(&empty_path).unwrap_err();
        assert!(matches!(err, PyenvError::UvMissing { .. }));
        assert!(err.to_string().contains("/nonexistent:/proc"), "{err}");
        // A directory named like the program is not an executable.
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("uv")).unwrap();
        let dir_only = BuildOptions {
            search_path: Some(dir.path().as_os_str().to_owned()),
            ..BuildOptions::default()
        };
        assert!(locate_uv(&dir_only).is_err());
        let file = dir.path().join("bin");
        std::fs::create_dir(&file).unwrap();
        std::fs::write(file.join("uv"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(file.join("uv"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let found = BuildOptions {
            search_path: Some(std::env::join_paths([dir.path(), &file]).unwrap()),
            ..BuildOptions::default()
        };
        assert_eq!(locate_uv(&found).unwrap(), file.join("uv"));
    }
}
