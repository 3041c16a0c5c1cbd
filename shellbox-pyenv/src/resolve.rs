//! Environments by requirement: lock a set of PyPI requirements once per host cache, then
//! build from that lock with binary wheels only (REFERENCE.md section 7,
//! `resolve_python_environment`).

use std::borrow::Cow;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::str::FromStr;

use shellbox_core::PackageSpec;
use tracing::info;

use crate::build::{interpreter_base_prefix, lock_exclusive, sha256_hex};
use crate::uv::{locate_uv, run_step_in, StepKind, UvStep};
use crate::PythonSource;
use crate::{build_python_environment_with, BuildOptions, PyenvError, PythonEnvironment};

/// The file of a cache directory every resolver of it locks (`flock`, exclusive).
pub const RESOLVE_LOCK_NAME: &str = "resolve.lock";
/// The requirements, one per line, as given to `uv pip compile`.
pub const REQUIREMENTS_IN_NAME: &str = "requirements.in";
/// The lock `uv pip compile` wrote once; every later resolve reuses it.
pub const REQUIREMENTS_LOCK_NAME: &str = "requirements.lock";
/// Where `uv pip compile` writes before the lock is renamed into place.
pub const REQUIREMENTS_PENDING_NAME: &str = "requirements.pending";
/// The environment built from a uv-managed CPython, inside the cache directory.
pub const ENVIRONMENT_NAME: &str = "environment";

/// How [`resolve_python_environment_with`] runs uv and which interpreter it builds from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResolveOptions {
    /// How uv is found and run (see [`BuildOptions`]); `only_binary` is always set.
    pub build: BuildOptions,
    /// A local CPython of the requested version to build from instead of one uv downloads
    /// (for hosts where `uv python install` cannot reach its download host). `None`: uv
    /// installs the version under the environment's root.
    pub python_interpreter: Option<PathBuf>,
}

impl ResolveOptions {
    /// Builds from this local interpreter (see [`ResolveOptions::python_interpreter`]).
    pub fn python_interpreter(mut self, python: impl Into<PathBuf>) -> Self {
        self.python_interpreter = Some(python.into());
        self
    }

    /// Runs uv as `build` says (see [`ResolveOptions::build`]).
    pub fn build(mut self, build: BuildOptions) -> Self {
        self.build = build;
        self
    }
}

/// [`resolve_python_environment_with`] with uv on `PATH` and a uv-managed CPython.
///
/// # Errors
/// As [`resolve_python_environment_with`].
pub fn resolve_python_environment<S: AsRef<str>>(
    cache: impl AsRef<Path>,
    requirements: &[S],
    python_version: &str,
) -> Result<PythonEnvironment, PyenvError> {
    resolve_python_environment_with(
        cache,
        requirements,
        python_version,
        &ResolveOptions::default(),
    )
}

/// The cache directory name of a resolve: the SHA-256 hex of the JSON text
/// `["<version>", ["<req>", ...]]` as Python's `json.dumps` writes it (separators `, `,
/// non-ASCII escaped), so the reference library and this crate share cache directories.
/// `requirements` must already be sorted and deduplicated ([`normalize_requirements`]).
pub fn cache_key(python_version: &str, requirements: &[String]) -> String {
    let mut text = String::from("[");
    text.push_str(&python_json_string(python_version));
    text.push_str(", [");
    let quoted: Vec<String> = requirements.iter().map(|r| python_json_string(r)).collect();
    text.push_str(&quoted.join(", "));
    text.push_str("]]");
    sha256_hex(text.as_bytes())
}

/// Why `requirement` cannot be one line of the `requirements.in` uv compiles, or `None`:
/// core's rules ([`PackageSpec::requirement_problem`]: empty, a leading `-`, CR, LF or NUL),
/// then those uv's (and pip's) requirements-file parsing would otherwise act on:
///
/// - a `$`: uv expands `${VAR}` from the environment it runs in (the host's), so
///   `six @ http://host/${SECRET_TOKEN}/six.whl` would send a host secret to that URL and
///   print it in errors; `$` is refused outright (no PEP 508 requirement needs it);
/// - a `\`: a line ending in one is joined to the next (`si\` then `x==1.17.0` is
///   `six==1.17.0`), so one requirement could change another; a backslash is refused
///   anywhere (PEP 508 names, versions, markers and URLs have none);
/// - a host file: uv installs a local path or `file:` URL (`./x.whl`, `/srv/x.tar.gz`,
///   `pkg @ file:///root/pkg.whl`, `git+file:///repo`) from the host it runs on, so a
///   requirement written by a task could read a host file the machine cannot see (a wheel
///   in `/root`, any git repository). A requirement is a PyPI name with its version and
///   markers, or a direct reference to an `http`, `https`, `git+http` or `git+https` URL
///   (PEP 508's `name @ URL`, or the bare URL uv also takes) on a public host (not this
///   host or a private network address: see `url_host_problem`); a path, a file name ending
///   in an archive suffix (`.whl`, `.tar.gz`, `.zip`, ...) or another URL scheme is refused.
/// - Options: a word after the first that starts with `-` (`six==1.17.0 --hash=...`, which
///   uv's requirements file would take as the line's own option).
/// - Syntax: a requirement that is not a bare URL must be a PEP 508 dependency specifier
///   (name, extras, version specifiers, `@ URL`, markers), parsed with `pep508_rs`, the
///   parser uv's own descends from: `six===`, `six[[[` or `six; python_version <` are
///   refused here with the parser's message instead of failing uv's compile at `create`
///   after `check_environment` accepted them (break-it of issue 12).
pub fn requirement_problem(requirement: &str) -> Option<Cow<'static, str>> {
    if let Some(problem) = PackageSpec::requirement_problem(requirement) {
        Some(problem.into())
    } else if requirement.contains('$') {
        Some(
            "a requirement must not contain '$' (uv would expand ${VAR} from the host's \
             environment)"
                .into(),
        )
    } else if requirement.contains('\\') {
        Some(
            "a requirement must not contain a backslash (a requirements file joins a line \
             ending in one to the next)"
                .into(),
        )
    } else if requirement
        .split_whitespace()
        .skip(1)
        .any(|word| word.starts_with('-'))
    {
        Some(
            "a requirement must not carry options (` --hash=...`, ` -e`): uv's requirements \
             file takes them on a requirement's line"
                .into(),
        )
    } else if let Some(problem) = host_file_problem(requirement.trim()) {
        Some(problem.into())
    } else {
        pep508_problem(requirement.trim())
    }
}

/// [`requirement_problem`]'s syntax rule, on a trimmed requirement that passed the others:
/// `None` for a bare `scheme://` URL (uv takes one and names the package from its file
/// name; its host was checked already), else the PEP 508 parser's message when
/// `requirement` is not a dependency specifier.
fn pep508_problem(requirement: &str) -> Option<Cow<'static, str>> {
    let head = requirement.split(';').next().unwrap_or("").trim();
    // A bare URL: its `://` comes before any `@` (`name @ URL` has the `@` first).
    let bare_url = head
        .find("://")
        .is_some_and(|scheme_end| head.find('@').is_none_or(|at| at > scheme_end));
    if bare_url {
        return None;
    }
    // The parser recurses once per parenthesis of a marker: a deep nesting would overflow the
    // stack and abort the process (second break-it pass of issue 12: 1,000 levels did).
    let mut depth = 0usize;
    for c in requirement.chars() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth > MAX_REQUIREMENT_NESTING {
            return Some(
                format!(
                    "not a PEP 508 requirement: brackets nested deeper than \
                     {MAX_REQUIREMENT_NESTING} levels"
                )
                .into(),
            );
        }
    }
    match pep508_rs::Requirement::<pep508_rs::VerbatimUrl>::from_str(requirement) {
        Ok(_) => None,
        Err(e) => {
            // The parser's message is several lines (the text, then a caret line).
            let text = e.to_string();
            let message: Vec<&str> = text.lines().map(str::trim_end).collect();
            Some(format!("not a PEP 508 requirement: {}", message.join(" / ")).into())
        }
    }
}

/// How deep `(` and `[` may nest in a requirement ([`requirement_problem`]): far past any
/// real marker expression, well short of what the PEP 508 parser's recursion can take on a
/// 2 MiB thread stack (a debug build overflowed at 1,000 levels).
pub const MAX_REQUIREMENT_NESTING: usize = 32;

/// The URL schemes a direct reference may use ([`requirement_problem`]).
const DIRECT_REFERENCE_SCHEMES: [&str; 4] = ["http", "https", "git+http", "git+https"];

/// What uv would take as a local archive when it is not a URL.
const ARCHIVE_SUFFIXES: [&str; 7] = [
    ".whl", ".tar.gz", ".tgz", ".zip", ".tar.bz2", ".tar.xz", ".tar",
];

/// [`requirement_problem`]'s host-file rule, on a trimmed requirement.
fn host_file_problem(requirement: &str) -> Option<&'static str> {
    const LOCAL: &str = "a requirement must not name a host file or directory (a local path \
                         or file: URL): use a PyPI name, or an http(s) URL";
    let lower = requirement.to_ascii_lowercase();
    if lower.contains("file:") {
        return Some(LOCAL);
    }
    // The requirement without its environment markers (`; python_version < "3.13"`).
    let head = lower.split(';').next().unwrap_or("").trim();
    // `name @ URL` (PEP 508), else the whole line may be a bare URL or path.
    let reference = match head.split_once('@') {
        Some((_, url)) => url.trim(),
        None => head,
    };
    if let Some((scheme, rest)) = reference.split_once("://") {
        return if DIRECT_REFERENCE_SCHEMES.contains(&scheme.trim()) {
            url_host_problem(scheme.trim(), rest)
        } else {
            Some(
                "a direct reference must be an http, https, git+http or git+https URL (uv \
                 would run other schemes' tools or read files on the host)",
            )
        };
    }
    let looks_like_path = reference.starts_with(['/', '.', '~'])
        || reference.contains('/')
        || head.split_once('@').is_some()
        || ARCHIVE_SUFFIXES.iter().any(|s| reference.ends_with(s));
    looks_like_path.then_some(LOCAL)
}

/// [`requirement_problem`]'s rule for the host of a direct reference (`scheme` one of
/// [`DIRECT_REFERENCE_SCHEMES`], `rest` the URL after `scheme://`): uv fetches it from the
/// host running the resolve, whatever network the machine is given, so a requirement must
/// not make the host reach itself or its private networks (issue 12's break-it pass:
/// `pkg @ http://127.0.0.1:8765/...` under `--network deny`). The URL is parsed as uv parses
/// it (the WHATWG URL rules of the `url` crate, which uv uses: tabs and newlines dropped,
/// the host percent-decoded and IDNA-mapped, numbers such as `2130706433` or `0x7f.1` read
/// as IPv4), so `%31%32%37.0.0.1`, full-width `１２７．０．０．１` or `ⓛⓞⓒⓐⓛⓗⓞⓢⓣ` are the
/// addresses they name (second break-it pass: the raw text was checked, and uv fetched from
/// 127.0.0.1). Refused: a URL that does not parse, no host, `localhost` and `*.localhost`,
/// addresses that are loopback, private (10/8, 172.16/12, 192.168/16, fc00::/7),
/// link-local (169.254/16, fe80::/10), unspecified, broadcast or shared (100.64/10), and
/// names that resolve here (through /etc/hosts or DNS) to any such address. A name is
/// resolved once, at this check: one whose DNS answer changes between the check and uv's
/// fetch (rebinding), or a public URL that redirects to a private one, is not caught
/// (factories whose hosts must never reach their private networks firewall the host).
fn url_host_problem(scheme: &str, rest: &str) -> Option<&'static str> {
    const PRIVATE: &str = "a direct reference must not name this host or a private network \
                           address (uv fetches it from the host, whatever the machine's \
                           network): use a public URL or a PyPI name";
    const UNPARSED: &str = "a direct reference's URL does not parse (as uv would parse it)";
    let base = scheme.strip_prefix("git+").unwrap_or(scheme);
    let Ok(url) = url::Url::parse(&format!("{base}://{rest}")) else {
        return Some(UNPARSED);
    };
    let private = match url.host() {
        None => true,
        Some(url::Host::Ipv4(v4)) => private_v4(v4),
        Some(url::Host::Ipv6(v6)) => private_ip(std::net::IpAddr::V6(v6)),
        Some(url::Host::Domain(name)) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            name.is_empty()
                || name == "localhost"
                || name.ends_with(".localhost")
                // Numbers a URL parser reads as an IPv4 address (decimal, octal, hex parts),
                // should one reach here unconverted.
                || numeric_host(&name)
                // A name: resolved as uv would resolve it (getaddrinfo: /etc/hosts, then
                // DNS), and refused when any address is private (break-it of issue 12: `vm`
                // in /etc/hosts, `127.0.0.1.nip.io`). A name that does not resolve here is
                // left to uv, which resolves the same ASCII name.
                || {
                    use std::net::ToSocketAddrs;
                    (name.as_str(), 443)
                        .to_socket_addrs()
                        .is_ok_and(|mut addrs| addrs.any(|a| private_ip(a.ip())))
                }
        }
    };
    private.then_some(PRIVATE)
}

/// Whether `host` is written as numbers a URL parser reads as an IPv4 address (`2130706433`,
/// `0x7f.1`, `0177.0.0.1`).
fn numeric_host(host: &str) -> bool {
    host.split('.')
        .all(|part| !part.is_empty() && part.chars().all(|c| c.is_ascii_hexdigit() || c == 'x'))
        && host.starts_with(|c: char| c.is_ascii_digit())
}

/// Whether `ip` is this host or a private network's: loopback, private, link-local,
/// unspecified, broadcast or shared (100.64/10); IPv6 ULA, link-local and IPv4-mapped
/// private addresses.
fn private_ip(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(v4) => private_v4(v4),
        std::net::IpAddr::V6(v6) => {
            v6.is_loopback()
                || v6.is_unspecified()
                || (v6.segments()[0] & 0xfe00) == 0xfc00
                || (v6.segments()[0] & 0xffc0) == 0xfe80
                || v6.to_ipv4_mapped().is_some_and(private_v4)
                // IPv4-compatible (::a.b.c.d, deprecated) and NAT64 (64:ff9b::/96, and
                // 64:ff9b:1::/48 local-use) addresses carry an IPv4 address a translator
                // or stack may reach (second break-it pass of issue 12: [::7f00:1] and
                // [64:ff9b::7f00:1] reached uv)
                || embedded_v4(v6).is_some_and(private_v4)
        }
    }
}

/// The IPv4 address an IPv4-compatible (`::a.b.c.d`, not `::` or `::1`), IPv4-translated
/// (`::ffff:0:a.b.c.d`) or NAT64 (`64:ff9b::/96`, `64:ff9b:1::/48`) IPv6 address carries
/// in its last 32 bits.
fn embedded_v4(v6: std::net::Ipv6Addr) -> Option<std::net::Ipv4Addr> {
    let s = v6.segments();
    let last =
        std::net::Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    let compatible = s[..6].iter().all(|&x| x == 0) && (s[6] != 0 || s[7] > 1);
    let nat64 = s[0] == 0x64 && s[1] == 0xff9b && (s[2..6].iter().all(|&x| x == 0) || s[2] == 1);
    // IPv4-translated (::ffff:0:a.b.c.d, SIIT)
    let translated = s[..4].iter().all(|&x| x == 0) && s[4] == 0xffff && s[5] == 0;
    (compatible || nat64 || translated).then_some(last)
}

fn private_v4(v4: std::net::Ipv4Addr) -> bool {
    let [a, b, ..] = v4.octets();
    v4.is_loopback()
        || v4.is_private()
        || v4.is_link_local()
        || v4.is_unspecified()
        || v4.is_broadcast()
        || (a == 100 && (64..128).contains(&b))
}

/// Checks, trims, sorts and deduplicates requirement lines.
///
/// # Errors
/// [`PyenvError::InvalidRequirement`] for an empty one, one starting with `-` (an option
/// such as `--index-url` or `-e`), one holding CR, LF or NUL, a `$` (an environment
/// variable reference uv would expand from the host), a backslash (a line continuation),
/// or a host path or non-http(s) URL ([`requirement_problem`]).
pub fn normalize_requirements<S: AsRef<str>>(
    requirements: &[S],
) -> Result<Vec<String>, PyenvError> {
    let mut out = Vec::with_capacity(requirements.len());
    for requirement in requirements {
        let requirement = requirement.as_ref();
        if let Some(reason) = requirement_problem(requirement) {
            return Err(PyenvError::InvalidRequirement {
                requirement: requirement.to_string(),
                reason: reason.into_owned(),
            });
        }
        out.push(requirement.trim().to_string());
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// Resolves PyPI `requirements` for CPython `python_version` into an environment under
/// `cache`, once per host: the lock is compiled the first time and reused after that (so a
/// later resolve needs no network: it works with `UV_OFFLINE=1`), and the environment is
/// built once from it with binary wheels only, so no package's build hook ever runs on the
/// host. Blocking; call it from `tokio::task::spawn_blocking` in async code.
///
/// - `cache`: a directory (created when missing); each distinct (version, requirements)
///   gets `cache/<`[`cache_key`]`>/`.
/// - `requirements`: requirement lines such as `six==1.17.0`; trimmed, sorted and
///   deduplicated ([`normalize_requirements`]). Empty: CPython only.
/// - `python_version`: a full CPython version (`3.12.12`), the target of the lock.
///
/// Steps, under an exclusive `flock` on `cache/<key>/resolve.lock` (blocking until free):
///
/// 1. when `requirements.lock` is absent: write `requirements.in` (one per line) and run
///    `uv pip compile --no-config --generate-hashes --no-build --python-version V
///    --output-file requirements.pending requirements.in` in that directory, then rename
///    the pending file to `requirements.lock`; the pending file is removed in every case,
///    and when this first compile fails, `requirements.in`, the lock file and the
///    directory go too (a resolve waiting on that lock then makes the directory anew);
/// 2. [`build_python_environment_with`] with [`BuildOptions::only_binary`] on
///    `cache/<key>/environment` and version `V` (uv downloads that CPython), or, with
///    [`ResolveOptions::python_interpreter`], on `cache/<key>/environment-<hash of the
///    interpreter path>` from that interpreter, after checking it is CPython `V`.
///
/// # Errors
/// [`PyenvError::InvalidPython`] for a `python_version` that is not `X.Y.Z`;
/// [`PyenvError::InvalidRequirement`]; [`PyenvError::UvMissing`]; [`PyenvError::UvFailed`]
/// when `uv pip compile` fails (an unknown package, no network and no lock yet, or a
/// requirement with no wheel: `--no-build` refuses sdists) or a build step fails;
/// [`PyenvError::InterpreterUnavailable`] when uv cannot download `V` and no interpreter
/// was given; [`PyenvError::InterpreterUnusable`] when the given interpreter cannot run or
/// is not CPython `V`; [`PyenvError::Io`] for the cache's own files; and the other errors
/// of [`build_python_environment_with`].
pub fn resolve_python_environment_with<S: AsRef<str>>(
    cache: impl AsRef<Path>,
    requirements: &[S],
    python_version: &str,
    options: &ResolveOptions,
) -> Result<PythonEnvironment, PyenvError> {
    let (requirements, interpreter) = check_inputs(requirements, python_version, options)?;
    let cache = cache.as_ref();
    std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o755)
        .create(cache)
        .map_err(|e| PyenvError::io("create directory", cache, e))?;
    let cache = cache
        .canonicalize()
        .map_err(|e| PyenvError::io("resolve directory", cache, e))?;
    refuse_shared_root(&cache)?;
    let directory = cache.join(cache_key(python_version, &requirements));
    refuse_symlink(&directory)?;
    let _guard = lock_directory(&directory, options)?;
    refuse_foreign_entry(&directory, true)?;
    info!(directory = %directory.display(), "pyenv: holding the resolve lock");

    refuse_foreign_input(&directory, &requirements)?;
    let lock = directory.join(REQUIREMENTS_LOCK_NAME);
    if own_file(&lock)? {
        info!(lock = %lock.display(), "pyenv: reusing the lock");
    } else if let Err(e) = compile_lock(&directory, &requirements, python_version, &options.build) {
        // Nothing of a failed first resolve stays: the directory held only its lock file.
        remove_unused_directory(&directory);
        return Err(e);
    }

    let build = BuildOptions {
        only_binary: true,
        ..options.build.clone()
    };
    let root = directory.join(environment_name(interpreter.as_deref()));
    refuse_foreign_entry(&root, false)?;
    match interpreter {
        Some(text) => build_python_environment_with(root, &lock, &text, &build),
        None => {
            build_python_environment_with(root, &lock, python_version, &build).map_err(
                |e| match e {
                    PyenvError::DownloadUnavailable { .. } => PyenvError::InterpreterUnavailable {
                        version: python_version.to_string(),
                        source: Box::new(e),
                    },
                    other => other,
                },
            )
        }
    }
}

/// What [`resolve_python_environment_with`] would refuse on this host, judged without
/// changing anything (no directory made, no lock taken, uv not run): for a backend's
/// `check_environment`. It checks the version, the requirements and the interpreter as the
/// resolve does first; then, unless the cache already holds the finished environment for
/// this key (its lock and its completion marker: such a resolve needs neither uv nor the
/// network), that uv can be found, that without a `python_interpreter` uv could download
/// CPython `V` (where it would download from is asked of uv and reached, not downloaded:
/// see `uv::check_download`), and that the cache's key directory can be made (its
/// nearest existing ancestor is a directory this process may write). Whether the packages
/// exist and have wheels is not checked: that needs uv and the network. Blocking (it may
/// run the interpreter and uv, and connect to the download's host, up to 5 s per address).
///
/// # Errors
/// Those [`resolve_python_environment_with`] gives for the same inputs before it runs uv:
/// [`PyenvError::InvalidPython`], [`PyenvError::InvalidRequirement`],
/// [`PyenvError::InterpreterUnusable`], [`PyenvError::UvMissing`],
/// [`PyenvError::InterpreterUnavailable`] (wrapping [`PyenvError::DownloadUnreachable`])
/// when no interpreter was given and uv could not download one, and [`PyenvError::Io`]
/// ("create directory") when the key directory could not be made.
pub fn check_resolve<S: AsRef<str>>(
    cache: impl AsRef<Path>,
    requirements: &[S],
    python_version: &str,
    options: &ResolveOptions,
) -> Result<(), PyenvError> {
    let (requirements, interpreter) = check_inputs(requirements, python_version, options)?;
    let cache = cache.as_ref();
    let directory = cache
        .canonicalize()
        .unwrap_or_else(|_| cache.to_path_buf())
        .join(cache_key(python_version, &requirements));
    if let Ok(root) = cache.canonicalize() {
        refuse_shared_root(&root)?;
    }
    refuse_symlink(&directory)?;
    refuse_foreign_entry(&directory, true)?;
    refuse_foreign_input(&directory, &requirements)?;
    refuse_foreign_entry(
        &directory.join(environment_name(interpreter.as_deref())),
        false,
    )?;
    let finished = own_file(&directory.join(REQUIREMENTS_LOCK_NAME))?
        && directory
            .join(environment_name(interpreter.as_deref()))
            .join(crate::MARKER_NAME)
            .is_file();
    if finished {
        return Ok(());
    }
    let uv = locate_uv(&options.build)?;
    if interpreter.is_none() {
        crate::uv::check_download(&uv, python_version, &options.build).map_err(|e| {
            PyenvError::InterpreterUnavailable {
                version: python_version.to_string(),
                source: Box::new(e),
            }
        })?;
    }
    // The nearest ancestor that exists must be a writable directory; a relative cache's
    // walk ends at the working directory (as the resolve's create_dir_all starts there).
    let mut existing = directory.as_path();
    while std::fs::symlink_metadata(existing).is_err() {
        match existing.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => existing = parent,
            Some(_) => {
                existing = Path::new(".");
                break;
            }
            None => break,
        }
    }
    let refused = |e: std::io::Error| PyenvError::io("create directory", &directory, e);
    let metadata = std::fs::metadata(existing).map_err(refused)?;
    if !metadata.is_dir() {
        return Err(refused(std::io::Error::from(nix::errno::Errno::ENOTDIR)));
    }
    nix::unistd::access(
        existing,
        nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK,
    )
    .map_err(|errno| refused(std::io::Error::from(errno)))?;
    Ok(())
}

/// The checks [`resolve_python_environment_with`] makes before any cache or network work:
/// the version, the requirements (normalized) and the interpreter (its absolute path as
/// text, checked to be CPython `python_version`).
fn check_inputs<S: AsRef<str>>(
    requirements: &[S],
    python_version: &str,
    options: &ResolveOptions,
) -> Result<(Vec<String>, Option<String>), PyenvError> {
    if !matches!(
        PythonSource::parse(python_version),
        Ok(PythonSource::Managed(_))
    ) {
        return Err(PyenvError::InvalidPython {
            value: python_version.to_string(),
            reason: "python_version must be a full CPython version such as 3.12.12".into(),
        });
    }
    let requirements = normalize_requirements(requirements)?;
    // The interpreter is checked first: a wrong one fails before any network or cache work.
    let interpreter = match &options.python_interpreter {
        Some(interpreter) => {
            let interpreter =
                std::path::absolute(interpreter).map_err(|e| PyenvError::InterpreterUnusable {
                    path: interpreter.clone(),
                    reason: format!("cannot make the path absolute: {e}"),
                })?;
            let text = interpreter
                .to_str()
                .ok_or_else(|| PyenvError::InterpreterUnusable {
                    path: interpreter.clone(),
                    reason: "its path is not UTF-8".into(),
                })?
                .to_string();
            check_interpreter(&interpreter, python_version)?;
            Some(text)
        }
        None => None,
    };
    Ok((requirements, interpreter))
}

/// The environment's directory name inside a cache directory: [`ENVIRONMENT_NAME`] for a
/// uv-managed CPython, `environment-<16 hex digits of the interpreter path's sha256>` for
/// a given interpreter.
fn environment_name(interpreter: Option<&str>) -> String {
    match interpreter {
        Some(text) => format!("{ENVIRONMENT_NAME}-{}", &sha256_hex(text.as_bytes())[..16]),
        None => ENVIRONMENT_NAME.to_string(),
    }
}

/// Refuses a cache entry that is a symbolic link (break-it of issue 12): a key directory
/// `<cache>/<key>` or a `requirements.lock` linked elsewhere by whoever else can write the
/// cache would make the resolve put its files where the link leads, or read a host file as
/// the lock (and quote it in uv's error). The cache's entries must be its own.
///
/// # Errors
/// [`PyenvError::Io`] (`InvalidData`) when `path` is a symbolic link, or when it cannot be
/// inspected for another reason than not existing.
fn refuse_symlink(path: &Path) -> Result<(), PyenvError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(PyenvError::io(
            "use cache entry",
            path,
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "it is a symbolic link: the package cache's entries must be its own \
                 files (remove the link)",
            ),
        )),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(PyenvError::io("inspect cache entry", path, e)),
    }
}

/// Refuses a cache entry another user could have changed (second break-it pass of issue 12:
/// a copied entry, `chown -R nobody` and `chmod -R a+rwX`, then a poisoned `six.py`, was
/// mounted and imported as found): the key directory must belong to this process's
/// effective user and not be writable by group or others (`writable_check`; the resolve
/// makes it 0755), an environment root must belong to this user (its mode is uv's, after
/// the umask). An entry that does not exist yet passes. What the owner itself changes in
/// its own cache is trusted: the environment is not hashed again at each use.
///
/// # Errors
/// [`PyenvError::Io`] (`PermissionDenied`) naming the entry's owner or mode; an `lstat`
/// failure other than not existing.
fn refuse_foreign_entry(path: &Path, writable_check: bool) -> Result<(), PyenvError> {
    use std::os::unix::fs::MetadataExt;
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(PyenvError::io("inspect cache entry", path, e)),
    };
    let me = nix::unistd::geteuid().as_raw();
    let why = if meta.uid() != me {
        Some(format!(
            "it belongs to uid {}, not to this user (uid {me}): the package cache's entries \
             must be this user's own",
            meta.uid()
        ))
    } else if writable_check && meta.mode() & 0o022 != 0 {
        Some(format!(
            "its mode {:o} lets group or others write it: the package cache's entries must \
             be writable by this user only",
            meta.mode() & 0o7777
        ))
    } else {
        None
    };
    match why {
        Some(why) => Err(PyenvError::io(
            "use cache entry",
            path,
            std::io::Error::new(std::io::ErrorKind::PermissionDenied, why),
        )),
        None => Ok(()),
    }
}

/// Refuses a package cache root that users other than its owner may rename entries in:
/// writable by group or others without the sticky bit (`/tmp`'s 1777 is fine: only an
/// entry's owner may move it there). Second break-it pass of issue 12: in a 0777 cache root,
/// another user swapped two key directories and `six==1.17.0` ran 1.16.0's environment.
/// The resolve makes a new root 0755 whatever the umask.
///
/// # Errors
/// [`PyenvError::Io`] (`PermissionDenied`) naming the mode.
fn refuse_shared_root(root: &Path) -> Result<(), PyenvError> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(root).map_err(|e| PyenvError::io("inspect cache", root, e))?;
    if meta.mode() & 0o022 != 0 && meta.mode() & 0o1000 == 0 {
        return Err(PyenvError::io(
            "use package cache",
            root,
            std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "its mode {:o} lets group or others rename its entries (make it 0755, or \
                     sticky like /tmp)",
                    meta.mode() & 0o7777
                ),
            ),
        ));
    }
    Ok(())
}

/// Refuses a key directory whose `requirements.in` (when there is one) is not the one this
/// resolve would write for `requirements`: the entry was moved from another key.
///
/// # Errors
/// [`PyenvError::Io`] (`InvalidData`) when it differs; those of [`refuse_symlink`].
fn refuse_foreign_input(directory: &Path, requirements: &[String]) -> Result<(), PyenvError> {
    let input = directory.join(REQUIREMENTS_IN_NAME);
    if !own_file(&input)? {
        return Ok(());
    }
    let found = std::fs::read(&input).map_err(|e| PyenvError::io("read", &input, e))?;
    if found != requirements_text(requirements).as_bytes() {
        return Err(PyenvError::io(
            "use cache entry",
            directory,
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "its requirements.in names other requirements than its key: the entry was \
                 moved from another key (remove it)",
            ),
        ));
    }
    Ok(())
}

/// The text of `requirements.in` for sorted, deduplicated `requirements`: one a line.
fn requirements_text(requirements: &[String]) -> String {
    let mut text = requirements.join("\n");
    if !text.is_empty() {
        text.push('\n');
    }
    text
}

/// Whether `path` is a regular file of the cache's own (not a symbolic link, which is
/// refused: [`refuse_symlink`]).
///
/// # Errors
/// Those of [`refuse_symlink`].
fn own_file(path: &Path) -> Result<bool, PyenvError> {
    refuse_symlink(path)?;
    Ok(std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file()))
}

/// Makes `directory` and takes its [`RESOLVE_LOCK_NAME`] lock. A resolve that failed while
/// this one waited may have removed the directory ([`remove_unused_directory`]): the lock
/// then held is on a file no longer at its path, so this one makes the directory again and
/// locks anew.
fn lock_directory(
    directory: &Path,
    options: &ResolveOptions,
) -> Result<nix::fcntl::Flock<std::fs::File>, PyenvError> {
    use std::os::unix::fs::MetadataExt;
    let path = directory.join(RESOLVE_LOCK_NAME);
    loop {
        // 0755 whatever the umask adds (refuse_foreign_entry refuses a key directory group
        // or others may write).
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o755)
            .create(directory)
            .map_err(|e| PyenvError::io("create directory", directory, e))?;
        let guard = lock_exclusive(&path, options.build.lock_timeout)?;
        let held = guard
            .metadata()
            .map_err(|e| PyenvError::io("inspect lock file", &path, e))?;
        match std::fs::metadata(&path) {
            Ok(now) if now.dev() == held.dev() && now.ino() == held.ino() => return Ok(guard),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(PyenvError::io("inspect lock file", &path, e)),
        }
    }
}

/// Removes a cache directory whose first lock failed, while its lock is held, when it holds
/// nothing but [`RESOLVE_LOCK_NAME`] and [`REQUIREMENTS_IN_NAME`] (a directory where an
/// environment or a lock exists is left alone). Failures are logged, not returned: the
/// resolve's own error is the one to report.
fn remove_unused_directory(directory: &Path) {
    let input = directory.join(REQUIREMENTS_IN_NAME);
    if let Err(e) = std::fs::remove_file(&input) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(file = %input.display(), error = %e, "pyenv: cannot remove");
        }
    }
    let only_lock = std::fs::read_dir(directory).is_ok_and(|entries| {
        entries
            .filter_map(Result::ok)
            .all(|entry| entry.file_name() == RESOLVE_LOCK_NAME)
    });
    if only_lock {
        let _ = std::fs::remove_file(directory.join(RESOLVE_LOCK_NAME));
        if let Err(e) = std::fs::remove_dir(directory) {
            tracing::warn!(directory = %directory.display(), error = %e, "pyenv: cannot remove");
        }
    }
}

/// Step 1 of [`resolve_python_environment_with`]: writes `requirements.in` and compiles
/// the lock through a pending file.
fn compile_lock(
    directory: &Path,
    requirements: &[String],
    python_version: &str,
    options: &BuildOptions,
) -> Result<(), PyenvError> {
    let uv = locate_uv(options)?;
    let input = directory.join(REQUIREMENTS_IN_NAME);
    let text = requirements_text(requirements);
    // A new file, never through a link left at its name (create_new does not follow one).
    match std::fs::remove_file(&input) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(PyenvError::io("remove", &input, e)),
    }
    std::os::unix::fs::OpenOptionsExt::mode(
        std::fs::OpenOptions::new().write(true).create_new(true),
        0o644,
    )
    .open(&input)
    .and_then(|mut file| std::io::Write::write_all(&mut file, text.as_bytes()))
    .map_err(|e| PyenvError::io("write", &input, e))?;
    let pending = directory.join(REQUIREMENTS_PENDING_NAME);
    let step = compile_step(&uv, python_version);
    info!(
        directory = %directory.display(),
        requirements = requirements.len(),
        "pyenv: locking the requirements with uv pip compile"
    );
    let result = run_step_in(&step, Some(python_version), Some(directory)).and_then(|()| {
        std::fs::rename(&pending, directory.join(REQUIREMENTS_LOCK_NAME))
            .map_err(|e| PyenvError::io("rename", &pending, e))
    });
    match std::fs::remove_file(&pending) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(pending = %pending.display(), error = %e, "pyenv: cannot remove"),
    }
    result
}

/// The `uv pip compile` step, run in the cache directory with relative file names (so the
/// lock's header names no host path).
pub(crate) fn compile_step(uv: &Path, python_version: &str) -> UvStep {
    let args = [
        "pip",
        "compile",
        "--no-config",
        "--generate-hashes",
        "--no-build",
        "--python-version",
        python_version,
        "--output-file",
        REQUIREMENTS_PENDING_NAME,
        REQUIREMENTS_IN_NAME,
    ];
    UvStep {
        kind: StepKind::CompileLock,
        argv: std::iter::once(uv.as_os_str().to_owned())
            .chain(args.iter().map(OsString::from))
            .collect(),
        env: Vec::new(),
    }
}

/// Checks that the interpreter `python` runs, is CPython `version` (`X.Y.Z`) and has a
/// resolvable prefix: the check [`resolve_python_environment_with`] makes of
/// [`ResolveOptions::python_interpreter`] before any cache or network work, for callers
/// that want its verdict without resolving (a backend's `check_environment`). Blocking (it
/// runs `python` twice).
///
/// # Errors
/// [`PyenvError::InterpreterUnusable`] when it cannot run, fails, or is another
/// implementation or version (the message names what it is).
pub fn check_interpreter(python: &Path, version: &str) -> Result<(), PyenvError> {
    let unusable = |reason: String| PyenvError::InterpreterUnusable {
        path: python.to_path_buf(),
        reason,
    };
    let output = std::process::Command::new(python)
        .args([
            "-I",
            "-c",
            "import platform, sys; sys.stdout.write(platform.python_implementation() + ' ' + '%d.%d.%d' % sys.version_info[:3])",
        ])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| unusable(format!("cannot run it: {e}")))?;
    if !output.status.success() {
        return Err(unusable(format!(
            "it failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    let found = String::from_utf8_lossy(&output.stdout).into_owned();
    let wanted = format!("CPython {version}");
    if found != wanted {
        return Err(unusable(format!(
            "it is {found}, not {wanted}: name a CPython {version} interpreter, or ask for \
             python_version {}",
            found.rsplit(' ').next().unwrap_or_default()
        )));
    }
    // Its prefix must be resolvable too (the builder asks again; this fails early).
    interpreter_base_prefix(python)?;
    Ok(())
}

/// `s` as Python's `json.dumps` writes a string with its defaults (`ensure_ascii=True`):
/// `"` and `\` escaped, `\n \r \t \b \f` by name, other control characters and every
/// non-ASCII character as `\uXXXX` (UTF-16, surrogate pairs above U+FFFF).
fn python_json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The lock a finished resolve installed (`cache/<key>/requirements.lock`); the copy the
/// builder keeps inside the environment is [`LOCK_COPY_NAME`](crate::LOCK_COPY_NAME).
pub fn lock_path(env: &PythonEnvironment) -> Option<PathBuf> {
    let lock = env.root().parent()?.join(REQUIREMENTS_LOCK_NAME);
    lock.is_file().then_some(lock)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_match_python_json() {
        // The expected values are Python's: json.dumps(...) and
        // hashlib.sha256(json.dumps([version, requirements]).encode()).hexdigest().
        assert_eq!(
            python_json_string("a\"b\\c\n\u{1}é😀"),
            "\"a\\\"b\\\\c\\n\\u0001\\u00e9\\ud83d\\ude00\""
        );
        let reqs = normalize_requirements(&["six==1.17.0", " six==1.17.0 ", "attrs"]).unwrap();
        for good in [
            "six",
            "zope.interface>=5",
            "six==1.17.0; python_version >= '3.8'",
            "requests[socks]~=2.31",
            "six @ https://files.example/six-1.17.0-py2.py3-none-any.whl",
            "six@http://93.184.215.14:8765/six-1.17.0-py2.py3-none-any.whl",
            "six @ https://[2606:2800:21f:cb07:6820:80da:af6b:8b2c]/six.whl",
            "six @ https://1files.example/six.whl",
            "pkg @ git+https://git@example.org/org/pkg.git@v1",
            "https://files.example/six-1.17.0-py2.py3-none-any.whl",
        ] {
            assert_eq!(requirement_problem(good), None, "{good:?}");
        }
        assert_eq!(reqs, ["attrs", "six==1.17.0"]);
        assert_eq!(
            normalize_requirements::<&str>(&[]).unwrap(),
            Vec::<String>::new()
        );
        for bad in [
            "",
            " ",
            "-r x.txt",
            "--index-url=http://evil",
            "a\nb",
            "a\rb",
            "six @ http://127.0.0.1:8765/${SECRET_TOKEN}/six-1.17.0-py2.py3-none-any.whl",
            "six==${HOME}",
            "six==$HOME",
            "si\\",
            "six \\",
            "six==1.17.0 \\ ",
            // Host files: paths, file URLs, archives by name, other schemes.
            "hello-pkg @ file:///root/private/hello_pkg-1.0-py3-none-any.whl",
            "hello-pkg@FILE:/root/x.whl",
            "/root/private/hello_pkg-1.0-py3-none-any.whl",
            "./pkg",
            "../pkg.tar.gz",
            "~/pkg",
            "dir/pkg",
            "hello_pkg-1.0-py3-none-any.whl",
            "pkg-1.0.tar.gz ; python_version > '3'",
            "pkg @ /srv/pkg",
            "pkg @ git+file:///srv/repo",
            "git+file:///srv/repo",
            "pkg @ git+ssh://git@host/repo",
            "pkg @ svn+https://host/repo",
            "pkg @ ftp://host/pkg.whl",
            // Options on the line (uv takes them from a requirements file).
            "six==1.17.0 --hash=sha256:0000",
            "six -e .",
            // Not PEP 508 (break-it of issue 12: accepted by check, refused by uv at create).
            "six===",
            "six[[[",
            "six==",
            "six; python_version <",
            "six >= 1 <<",
            "six @",
            // The host itself and private networks (uv fetches from the host).
            "six@http://127.0.0.1:8765/six-1.17.0-py2.py3-none-any.whl",
            "six @ http://localhost/six.whl",
            "six @ https://pkgs.LOCALHOST./six.whl",
            "six @ http://user:pw@10.1.2.3/six.whl",
            "six @ http://192.168.0.1:80/six.whl",
            "six @ http://172.16.0.9/six.whl",
            "six @ http://169.254.169.254/latest/meta-data",
            "six @ http://100.64.0.1/six.whl",
            "six @ http://0.0.0.0/six.whl",
            "six @ http://[::1]:8080/six.whl",
            "six @ http://[fd00::1]/six.whl",
            "six @ http://[fe80::1]/six.whl",
            "six @ http://[::ffff:127.0.0.1]/six.whl",
            "six @ http://2130706433/six.whl",
            "six @ http://0x7f.1/six.whl",
            "pkg @ git+https://git@127.0.0.1/org/pkg.git",
            "https://10.0.0.1/six-1.17.0-py2.py3-none-any.whl",
            // Hosts as uv's URL parser reads them (second break-it pass: the raw text was
            // checked and uv fetched from 127.0.0.1 or the metadata address).
            "six @ http://%31%32%37.0.0.1:18712/six-1.17.0-py2.py3-none-any.whl",
            "six @ http://127%2e0%2e0%2e1/six.whl",
            "six @ http://%31%36%39.254.169.254/latest",
            "six @ http://\u{ff11}\u{ff12}\u{ff17}.0.0.1/six.whl",
            "six @ http://127\u{3002}0\u{3002}0\u{3002}1/six.whl",
            "six @ http://\u{24db}\u{24de}\u{24d2}\u{24d0}\u{24db}\u{24d7}\u{24de}\u{24e2}\u{24e3}/six.whl",
            "six @ http://12\t7.0.0.1/six.whl",
            "six @ http://127.0.0.1\t/six.whl",
            "pkg @ git+http://%31%32%37.0.0.1:18712/evil.git",
            "six @ http://[::1/six.whl",
            "six @ http://[::7f00:1]/six.whl",
            "six @ http://[64:ff9b::7f00:1]/six.whl",
            "six @ http://[64:ff9b::a00:1]/six.whl",
            "six @ http://[::ffff:0:7f00:1]/six.whl",
        ] {
            assert!(
                matches!(
                    normalize_requirements(&[bad]),
                    Err(PyenvError::InvalidRequirement { .. })
                ),
                "{bad:?}"
            );
        }
        // Names that resolve to this host (break-it of issue 12: `vm` in /etc/hosts made
        // the host's uv fetch from 127.0.0.1): every /etc/hosts name of a private address
        // here, `localhost` and its kin aside (refused by name already).
        let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
        let names = hosts.lines().filter_map(|line| {
            let mut words = line.split('#').next()?.split_whitespace();
            let ip = words.next()?.parse::<std::net::IpAddr>().ok()?;
            private_ip(ip).then_some(words)
        });
        for name in names.flatten() {
            let bad = format!("six @ http://{name}:8765/six-1.17.0-py2.py3-none-any.whl");
            assert!(
                matches!(
                    normalize_requirements(&[bad.as_str()]),
                    Err(PyenvError::InvalidRequirement { .. })
                ),
                "{bad:?}"
            );
        }
        assert_eq!(
            cache_key("3.12.12", &["six==1.17.0".to_string()]),
            "c188b6dbfd961e6afce7d0bb9955ef7ce9f8e2f45b23ef67b76ff0a2e43457de"
        );
        assert_eq!(
            cache_key("3.11.2", &[]),
            "1fbe8fcda61a4178ff30997a3e6d688231544e555d45b4c67dd3c072a6520e18"
        );
        assert_eq!(
            cache_key(
                "3.12.12",
                &[
                    "attrs".to_string(),
                    "six==1.17.0".to_string(),
                    "é".to_string()
                ]
            ),
            "848da5dd8511fa5a6aaa9cb9047248372efb7c0a46a0599c0697e7c1428b4f76"
        );
        let step = compile_step(Path::new("/bin/uv"), "3.12.12");
        assert_eq!(
            step.command_line(),
            "/bin/uv pip compile --no-config --generate-hashes --no-build --python-version \
             3.12.12 --output-file requirements.pending requirements.in"
        );
    }
}
