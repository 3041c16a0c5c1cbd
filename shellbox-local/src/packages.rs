//! [`ImageSource::Packages`] on the local backend (REFERENCE.md 4.6): software by name.
//!
//! `pypi_packages` resolve through [`shellbox_pyenv::resolve_python_environment_with`] (a
//! lock compiled once per host cache, binary wheels only) and the environment is mounted
//! exactly like a [`HostImage`] with `read_only = [root]` (plus an external interpreter's
//! prefix outside the system directories) and `bin_dirs = [root/venv/bin]`; `None` is the
//! host's programs only. Then every requested tool must be executable on the machine's
//! `PATH`, checked by one command in the machine; otherwise the machine is closed and the
//! create fails with [`Error::Unsupported`] ([`TOOLS_REFUSAL`]).

use std::path::{Path, PathBuf};

use shellbox_core::{
    Capabilities, Command, Error, HostImage, ImageSource, Machine, MachineSpec, PackageSpec,
};
use shellbox_pyenv::{BuildOptions, PyenvError, ResolveOptions};

use crate::plan::ReadOnlyMount;
use crate::LocalMachine;

/// The CPython version of `ImageSource::Packages` environments when the factory names
/// neither [`LocalOptions::python_version`](crate::LocalOptions::python_version) nor an
/// interpreter (the reference library's default).
pub const DEFAULT_PYTHON_VERSION: &str = "3.12.12";

/// How the refusal of a spec whose tools are not all executable begins (the reference
/// library's words); the missing tools and the `PATH` follow.
pub const TOOLS_REFUSAL: &str = "Requested tools must be executable in the sandbox PATH";

/// The factory's settings for `ImageSource::Packages`.
#[derive(Debug, Clone, Default)]
pub(crate) struct PackageSettings {
    pub(crate) cache: Option<PathBuf>,
    pub(crate) python_version: Option<String>,
    pub(crate) python_interpreter: Option<PathBuf>,
    pub(crate) uv: Option<PathBuf>,
}

impl PackageSettings {
    /// The package cache: the option, else `$HOME/.cache/shellbox/python`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for an empty option, or no option and no `HOME`.
    fn cache(&self) -> Result<PathBuf, Error> {
        if let Some(cache) = &self.cache {
            if cache.as_os_str().is_empty() {
                return Err(Error::invalid(
                    "LocalOptions::package_cache (CLI --package-cache) is empty: name a \
                     directory",
                ));
            }
            return Ok(cache.clone());
        }
        match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
            Some(home) => Ok(Path::new(&home).join(".cache/shellbox/python")),
            None => Err(Error::invalid(
                "ImageSource::Packages needs a package cache: HOME is not set, so set \
                 LocalOptions::package_cache (CLI --package-cache)",
            )),
        }
    }

    /// How the resolve runs uv and which interpreter it builds from.
    fn resolve_options(&self) -> ResolveOptions {
        ResolveOptions {
            build: BuildOptions {
                uv: self.uv.clone(),
                ..BuildOptions::default()
            },
            python_interpreter: self.python_interpreter.clone(),
        }
    }

    /// The CPython version: the option, else the interpreter's own `X.Y.Z`, else
    /// [`DEFAULT_PYTHON_VERSION`]. Blocking (it may run the interpreter).
    fn python_version(&self) -> Result<String, Error> {
        if let Some(version) = &self.python_version {
            return Ok(version.clone());
        }
        let Some(python) = &self.python_interpreter else {
            return Ok(DEFAULT_PYTHON_VERSION.to_string());
        };
        let output = std::process::Command::new(python)
            .args([
                "-I",
                "-c",
                "import sys; sys.stdout.write('%d.%d.%d' % sys.version_info[:3])",
            ])
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| {
                Error::invalid(format!(
                    "python_interpreter {} cannot run: {e}",
                    python.display()
                ))
            })?;
        if !output.status.success() {
            return Err(Error::invalid(format!(
                "python_interpreter {} failed ({}): {}",
                python.display(),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }
}

/// Turns a spec with an [`ImageSource::Packages`] source into the [`ImageSource::Host`] spec
/// that runs it, and returns the tools to check once the machine exists; any other spec is
/// returned as it is with no tools. The cheap checks (`capabilities.check_spec`: the spec's
/// validation, resources, network) come before the environment is resolved.
///
/// # Errors
/// Those of [`Capabilities::check_spec`]; [`Error::InvalidInput`] for a bad requirement,
/// `python_version` or `python_interpreter`, or no package cache; [`Error::Backend`] when
/// the environment cannot be resolved or built (uv missing, an unknown package, a
/// requirement with no wheel, no interpreter: the message is `shellbox-pyenv`'s).
pub(crate) async fn host_spec(
    settings: &PackageSettings,
    capabilities: Capabilities,
    spec: MachineSpec,
) -> Result<(MachineSpec, Vec<String>), Error> {
    let ImageSource::Packages(PackageSpec {
        pypi_packages,
        tools,
    }) = &spec.source
    else {
        return Ok((spec, Vec::new()));
    };
    capabilities.check_spec("local", &spec)?;
    let tools = check_tool_list(tools, &spec.env)?;
    if let Some(requirements) = pypi_packages {
        check_requirements(requirements)?;
    }
    let image = match pypi_packages.clone() {
        None => HostImage::default(),
        Some(requirements) => {
            let settings = settings.clone();
            tokio::task::spawn_blocking(move || resolve(&settings, &requirements))
                .await
                .map_err(|e| Error::backend("resolve the Python environment", e.to_string()))??
        }
    };
    Ok((
        MachineSpec {
            source: ImageSource::Host(image),
            ..spec
        },
        tools,
    ))
}

/// Checks the requirements as `shellbox-pyenv` does before it runs uv
/// ([`shellbox_pyenv::requirement_problem`]: empty, a leading `-`, CR/LF/NUL, a `$`
/// environment reference uv would expand from the host, a backslash continuation), for
/// `create` and `check_environment` alike.
///
/// # Errors
/// [`Error::InvalidInput`] naming the first bad requirement.
pub(crate) fn check_requirements(requirements: &[String]) -> Result<(), Error> {
    shellbox_pyenv::normalize_requirements(requirements)
        .map(drop)
        .map_err(|e| Error::invalid(format!("pypi_packages: {e}")))
}

/// Resolves the requirements into an environment and the image that mounts it. Blocking.
fn resolve(settings: &PackageSettings, requirements: &[String]) -> Result<HostImage, Error> {
    let cache = settings.cache()?;
    let version = settings.python_version()?;
    let options = settings.resolve_options();
    tracing::info!(
        cache = %cache.display(),
        version = %version,
        requirements = ?requirements,
        "local: resolving the Python environment of ImageSource::Packages"
    );
    let env =
        shellbox_pyenv::resolve_python_environment_with(&cache, requirements, &version, &options)
            .map_err(resolve_error)?;
    Ok(env.host_image())
}

/// The check of [`TOOLS_REFUSAL`]: prints each argument (a program name, see
/// [`check_tool_list`]) that is not an executable regular file in some directory of `PATH`
/// that counts ([`path_entry_counts`]: the same rule as [`check_tools_on_host`]), then
/// `PATH` on stderr. `set -f`: a `PATH` entry such as `/usr/*` is not a glob.
const TOOLS_SCRIPT: &str = r#"set -f
for t do
  found=
  saved=$IFS; IFS=:
  for d in $PATH; do
    case $d in /*) ;; *) continue ;; esac
    case $d in */./*|*/.|*/../*|*/..|*//*|/etc|/etc/*|/proc|/proc/*|/sys|/sys/*|/dev|/dev/*) continue ;; esac
    [ -f "$d/$t" ] && [ -x "$d/$t" ] && { found=1; break; }
  done
  IFS=$saved
  [ -n "$found" ] || printf '%s\n' "$t"
done
printf '%s' "$PATH" >&2"#;

/// Whether a `PATH` entry is one the tools check looks in, in the machine
/// ([`TOOLS_SCRIPT`]) and on the host ([`check_tools_on_host`]) alike: absolute, with no
/// `.` or `..` component and no empty one (`//`), and not in `/etc` (the machine's own
/// copy), `/proc`, `/sys` or `/dev` (the kernel's). Other entries (`usr/bin`,
/// `/tmp/../usr/bin`) are skipped: a tool found only through them is missing.
fn path_entry_counts(dir: &str) -> bool {
    dir.starts_with('/')
        && !dir.contains("//")
        && !dir.split('/').any(|c| c == "." || c == "..")
        && !["/etc", "/proc", "/sys", "/dev"]
            .iter()
            .any(|k| crate::plan::is_within(dir, k))
}

/// Room kept for what the machine adds to the tools check's environment (`PATH` with the
/// bin dirs, `HOME`, `LANG`, `PYTHONHASHSEED`) when [`check_tool_list`] sizes it.
const TOOLS_CHECK_ENV_RESERVE_BYTES: usize = 64 * 1024;

/// The spec's tools as `create` and `check_environment` both take them: each must be a
/// program name looked up on the machine's `PATH` (REFERENCE.md 4.6: "found on PATH"), so
/// one holding `/` (`/bin/sh`, `../usr/bin/env`, `/proc/self/exe`) is refused; duplicates
/// are dropped (first kept); and the check's command (its script, the tools and the spec's
/// environment, each string with its NUL, plus [`TOOLS_CHECK_ENV_RESERVE_BYTES`]) must fit
/// the supervisor's argv-and-environment bound
/// ([`MAX_ARGV_ENV_BYTES`](shellbox_supervisor::proto::MAX_ARGV_ENV_BYTES)), judged before
/// anything runs.
///
/// # Errors
/// [`Error::InvalidInput`] for a tool holding `/`, or a list too large to check in one
/// command.
pub(crate) fn check_tool_list(
    tools: &[String],
    env: &std::collections::BTreeMap<String, String>,
) -> Result<Vec<String>, Error> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for tool in tools {
        if tool.contains('/') {
            return Err(Error::invalid(format!(
                "tools: {tool:?} holds '/'; a tool is a program name found on the sandbox PATH \
                 (put its directory in the spec's PATH or a bin dir instead)"
            )));
        }
        if seen.insert(tool.as_str()) {
            out.push(tool.clone());
        }
    }
    let strings = ["/bin/sh", "-c", TOOLS_SCRIPT, "sh"]
        .iter()
        .map(|a| a.len() + 1)
        .chain(out.iter().map(|t| t.len() + 1))
        .chain(env.iter().map(|(k, v)| k.len() + v.len() + 2))
        .fold(0usize, usize::saturating_add);
    let most = shellbox_supervisor::proto::MAX_ARGV_ENV_BYTES;
    if strings.saturating_add(TOOLS_CHECK_ENV_RESERVE_BYTES) > most {
        return Err(Error::invalid(format!(
            "tools: {} distinct tools and the spec's environment take {strings} bytes, more than \
             one command's argv and environment may ({most} bytes less \
             {TOOLS_CHECK_ENV_RESERVE_BYTES} kept for the machine's own variables)",
            out.len()
        )));
    }
    Ok(out)
}

/// Checks that every tool is executable on the machine's `PATH` with one command in the
/// machine, and returns the machine; with no tools it is returned at once.
///
/// # Errors
/// [`Error::Unsupported`] beginning with [`TOOLS_REFUSAL`] and naming the missing tools,
/// or the error of the check's command; the machine is closed first in both cases.
pub(crate) async fn check_tools(
    machine: LocalMachine,
    tools: &[String],
) -> Result<LocalMachine, Error> {
    if tools.is_empty() {
        return Ok(machine);
    }
    let mut argv = vec![
        "/bin/sh".to_string(),
        "-c".to_string(),
        TOOLS_SCRIPT.to_string(),
        "sh".to_string(),
    ];
    argv.extend(tools.iter().cloned());
    let outcome = machine.run(Command::from_argv(argv)).await;
    let refusal = match outcome {
        Ok(result) if result.exit_code == Some(0) && result.stdout.is_empty() => {
            return Ok(machine)
        }
        Ok(result) => {
            let missing: Vec<String> = String::from_utf8_lossy(&result.stdout)
                .lines()
                .map(str::to_string)
                .collect();
            let what = if missing.is_empty() {
                format!("the check exited with {:?}", result.exit_code)
            } else {
                format!("{} not found", shellbox_core::list_names(&missing))
            };
            Error::unsupported(format!(
                "{TOOLS_REFUSAL}: {what} (PATH={})",
                String::from_utf8_lossy(&result.stderr)
            ))
        }
        Err(e) => e,
    };
    if let Err(e) = machine.close().await {
        tracing::warn!("closing the machine refused for its tools: {e}");
    }
    Err(refusal)
}

/// The factory's settings a `pypi_packages` spec needs and what the resolve would need of
/// this host, checked as [`host_spec`] would meet them, changing nothing: a package cache,
/// a Python version (the interpreter's own when only `python_interpreter` is set, which
/// runs it), then [`shellbox_pyenv::check_resolve`] (the version, the requirements, the
/// interpreter; and unless the cache already holds this environment, uv and a cache
/// directory that can be made). Whether the packages exist and have wheels is not checked.
/// Blocking.
///
/// # Errors
/// [`Error::InvalidInput`] and [`Error::Backend`], as `create` gives for the same settings
/// and host.
pub(crate) fn check_settings(
    settings: &PackageSettings,
    requirements: &[String],
) -> Result<(), Error> {
    let cache = settings.cache()?;
    let version = settings.python_version()?;
    shellbox_pyenv::check_resolve(&cache, requirements, &version, &settings.resolve_options())
        .map_err(resolve_error)
}

/// `create`'s error for a failed resolve: the caller's mistakes (a requirement, the version,
/// the interpreter) are [`Error::InvalidInput`], the host's (uv, the cache, the network, a
/// package) [`Error::Backend`].
fn resolve_error(e: PyenvError) -> Error {
    match e {
        PyenvError::InvalidRequirement { .. }
        | PyenvError::InvalidPython { .. }
        | PyenvError::InterpreterUnusable { .. } => Error::invalid(e.to_string()),
        other => Error::backend(
            "resolve the Python environment of ImageSource::Packages",
            other,
        ),
    }
}

/// Where the guest path `guest` of a machine with these read-only `mounts` is on the host,
/// as far as the machine shows host files there: below a mount, in the host directory
/// bound there; in a system directory other than `/etc` and `/sys` (bound read-only from
/// the host, or the lower layer of a copy-on-write overlay), the same path; elsewhere
/// (the machine's fresh private root, and `/etc`, which is its own copy) nowhere.
fn host_path_of(guest: &str, mounts: &[ReadOnlyMount]) -> Option<PathBuf> {
    let within = |path: &str, dir: &str| crate::plan::is_within(path, dir);
    let mount = mounts
        .iter()
        .filter(|m| within(guest, &m.guest))
        .max_by_key(|m| m.guest.len());
    if let Some(m) = mount {
        let rest = guest[m.guest.len()..].trim_start_matches('/');
        return Some(if rest.is_empty() {
            m.host.clone()
        } else {
            m.host.join(rest)
        });
    }
    crate::plan::SYSTEM_DIRS
        .iter()
        .filter(|d| !matches!(**d, "/etc" | "/sys"))
        .any(|d| within(guest, d))
        .then(|| PathBuf::from(guest))
}

/// Whether a host file the machine reaches through `host` (its link target resolved on
/// the host) is an executable regular file the machine shows: the resolved path must itself
/// lie where the machine shows host files ([`host_path_of`] of a path the machine sees:
/// its system directories and its mounts at their own path).
fn executable_on_host(host: &Path, mounts: &[ReadOnlyMount]) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let Ok(resolved) = std::fs::canonicalize(host) else {
        return false;
    };
    let shown = resolved.to_str().is_some_and(|r| {
        mounts
            .iter()
            .any(|m| m.host.to_str() == Some(m.guest.as_str()) && resolved.starts_with(&m.host))
            || host_path_of(r, &[]).is_some()
    });
    shown
        && std::fs::metadata(&resolved)
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The tools of a shell-only package spec (program names, as [`check_tool_list`] leaves
/// them) that are not executable on the machine's `PATH`
/// (`bin_dirs`, then [`DEFAULT_PATH`](crate::plan::DEFAULT_PATH); the spec env's `PATH`
/// when it sets one, as it does for commands; only the entries [`path_entry_counts`]
/// keeps), judged on the host
/// directories the machine would show there ([`host_path_of`]) without making it: what
/// `create`'s check in the machine would find. Copy-on-write layers start as the host
/// directories, so the same rule holds for them.
///
/// # Errors
/// [`Error::Unsupported`] beginning with [`TOOLS_REFUSAL`], as `create` refuses.
pub(crate) fn check_tools_on_host(
    tools: &[String],
    planned: &crate::machine::Planned,
    spec_path: Option<&str>,
) -> Result<(), Error> {
    let mounts = &planned.mounts;
    let path: Vec<String> = match spec_path {
        Some(path) => path.split(':').map(str::to_string).collect(),
        None => planned
            .bin_dirs
            .iter()
            .cloned()
            .chain(crate::plan::DEFAULT_PATH.split(':').map(str::to_string))
            .collect(),
    };
    let found = |tool: &str| -> bool {
        path.iter().filter(|d| path_entry_counts(d)).any(|dir| {
            host_path_of(&format!("{}/{tool}", dir.trim_end_matches('/')), mounts)
                .is_some_and(|h| executable_on_host(&h, mounts))
        })
    };
    let missing: Vec<&str> = tools
        .iter()
        .map(String::as_str)
        .filter(|t| !found(t))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::unsupported(format!(
        "{TOOLS_REFUSAL}: {} not found (PATH={})",
        shellbox_core::list_names(&missing),
        path.join(":")
    )))
}
