//! Building an environment once per root: locking, the marker check, the uv steps.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use sha2::{Digest, Sha256};
use tracing::{info, warn};

use crate::environment::in_system_directories;
use crate::marker::Marker;
use crate::uv::{locate_uv, run_step, uv_steps, StepKind};
use crate::{DifferingInput, PyenvError, PythonEnvironment, PythonSource, MARKER_NAME};

/// The copy of the lock file kept inside the root; uv installs from it, so what was
/// hashed is exactly what was installed.
pub const LOCK_COPY_NAME: &str = "requirements.lock";

/// How to run uv for a build. `BuildOptions::default()` finds `uv` on `PATH`, inherits the
/// process environment (so `UV_PYTHON_INSTALL_MIRROR`, `UV_INDEX_URL`, `UV_OFFLINE` and
/// proxy variables pass through to uv) and lets uv build sdists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BuildOptions {
    /// The uv executable: a path (containing `/`, must be an executable file) or a bare
    /// name searched on the `PATH`. `None` means `uv`.
    pub uv: Option<PathBuf>,
    /// The `PATH`-style list searched for uv; `None` uses the process's `PATH`.
    pub search_path: Option<OsString>,
    /// Sets `UV_PYTHON_INSTALL_MIRROR` for `uv python install` (a URL, `file://` allowed),
    /// overriding the inherited variable.
    pub python_install_mirror: Option<String>,
    /// Install wheels only (`uv pip sync --no-build`): an sdist in the lock fails the build
    /// instead of running its build hooks on the host.
    pub only_binary: bool,
    /// How long to wait for another builder of the same root; `None` waits as long as it
    /// takes (the reference library's behaviour).
    pub lock_timeout: Option<Duration>,
}

impl BuildOptions {
    /// Uses this uv executable (see [`BuildOptions::uv`]).
    pub fn uv(mut self, uv: impl Into<PathBuf>) -> Self {
        self.uv = Some(uv.into());
        self
    }

    /// Searches uv in this `PATH`-style list (see [`BuildOptions::search_path`]).
    pub fn search_path(mut self, path: impl Into<OsString>) -> Self {
        self.search_path = Some(path.into());
        self
    }

    /// Sets the interpreter download mirror (see [`BuildOptions::python_install_mirror`]).
    pub fn python_install_mirror(mut self, mirror: impl Into<String>) -> Self {
        self.python_install_mirror = Some(mirror.into());
        self
    }

    /// Gives up waiting for another builder after `timeout` (see [`BuildOptions::lock_timeout`]).
    pub fn lock_timeout(mut self, timeout: Duration) -> Self {
        self.lock_timeout = Some(timeout);
        self
    }

    /// Installs wheels only (see [`BuildOptions::only_binary`]).
    pub fn only_binary(mut self, only_binary: bool) -> Self {
        self.only_binary = only_binary;
        self
    }
}

/// Builds (or reuses) the Python environment at `root` with uv on `PATH`; the same as
/// [`build_python_environment_with`] and `BuildOptions::default()`.
///
/// # Errors
/// As [`build_python_environment_with`].
pub fn build_python_environment(
    root: impl AsRef<Path>,
    lock: impl AsRef<Path>,
    python: &str,
) -> Result<PythonEnvironment, PyenvError> {
    build_python_environment_with(root, lock, python, &BuildOptions::default())
}

/// Builds the Python environment at `root` from the hash lock `lock` with `python`, once:
/// concurrent callers (threads or processes) wait for one build and reuse it. Blocking; call
/// it from `tokio::task::spawn_blocking` in async code.
///
/// - `root`: a directory path, made absolute, parent created and resolved; its final
///   component names the environment.
/// - `lock`: a requirements file with `--hash` entries (e.g. from
///   `uv pip compile --generate-hashes`); it is copied to `root/requirements.lock` and
///   installed from there.
/// - `python`: a full CPython version such as `3.12.12` (installed by uv under
///   `root/python`, so every file and symlink lies under root), or the path of an existing
///   interpreter (see [`PythonSource::parse`]).
///
/// Steps (as the reference library's `build_python_environment`): take an exclusive `flock`
/// on `<parent>/<root name>.lock` (blocking until free, held throughout); if
/// `root/.complete` exists and records the same python and lock SHA-256, return at once
/// without running uv; if it records others, fail with [`PyenvError::InputsDiffer`]; if the
/// marker is absent, remove whatever directory is at `root` (an interrupted build) and
/// build: the uv steps of [`uv_steps`](crate::uv_steps), a check that every symlink under
/// root stays within the environment's read-only directories, then the marker, written
/// atomically. A failed build removes the partial root. Emits `tracing::info!` events per
/// step. The marker records only `python` and the lock: `options` (uv, mirror,
/// `only_binary`) are not compared when a finished root is reused.
///
/// # Errors
/// [`PyenvError::InvalidPython`] for a bad `python`, [`PyenvError::LockUnreadable`] when the
/// lock cannot be read, [`PyenvError::InvalidRoot`] for a root without a final component or
/// one that exists as a non-directory, [`PyenvError::InputsDiffer`] for a finished root from
/// other inputs, [`PyenvError::LockTimeout`] when another builder holds the root longer
/// than [`BuildOptions::lock_timeout`], [`PyenvError::UvMissing`] when no uv can be run,
/// [`PyenvError::InterpreterUnusable`] when an interpreter path cannot report its
/// `sys.base_prefix`, [`PyenvError::DownloadUnavailable`] when uv cannot download the
/// version, [`PyenvError::UvFailed`] for any other failing uv step (e.g. a hash mismatch or
/// unparseable lock), [`PyenvError::NotSelfContained`], [`PyenvError::Marker`] for an
/// unparseable existing marker, [`PyenvError::Io`] for the builder's own file operations.
pub fn build_python_environment_with(
    root: impl AsRef<Path>,
    lock: impl AsRef<Path>,
    python: &str,
    options: &BuildOptions,
) -> Result<PythonEnvironment, PyenvError> {
    let source = PythonSource::parse(python)?;
    let lock = lock.as_ref();
    let lock_bytes = std::fs::read(lock).map_err(|source| PyenvError::LockUnreadable {
        path: lock.to_path_buf(),
        source,
    })?;
    let lock_sha256 = sha256_hex(&lock_bytes);
    let root = resolve_root(root.as_ref(), true)?;
    let lock_file = lock_file_path(&root);

    let _guard = lock_exclusive(&lock_file, options.lock_timeout)?;
    info!(root = %root.display(), lock = %lock_file.display(), "pyenv: holding the build lock");

    let marker_path = root.join(MARKER_NAME);
    match std::fs::read_to_string(&marker_path) {
        Ok(text) => {
            let marker = Marker::parse(&text).map_err(|reason| PyenvError::Marker {
                path: marker_path.clone(),
                reason,
            })?;
            let requested_python = source.marker_text();
            if marker.python != requested_python {
                return Err(PyenvError::InputsDiffer {
                    root,
                    input: DifferingInput::Python,
                    existing: format!("python {}", marker.python),
                    requested: format!("python {requested_python}"),
                    marker: text,
                });
            }
            if marker.lock_sha256 != lock_sha256 {
                return Err(PyenvError::InputsDiffer {
                    root,
                    input: DifferingInput::Lock,
                    existing: format!("a lock with sha256 {}", marker.lock_sha256),
                    requested: format!("{} with sha256 {lock_sha256}", lock.display()),
                    marker: text,
                });
            }
            info!(root = %root.display(), "pyenv: environment already built; reusing it");
            return Ok(PythonEnvironment::new(root, marker.base_prefix));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            return Err(PyenvError::InvalidRoot {
                root,
                reason: "it exists and is not a directory".into(),
            })
        }
        Err(e) => return Err(PyenvError::io("read marker", marker_path, e)),
    }

    match std::fs::symlink_metadata(&root) {
        Ok(meta) if meta.is_dir() => {
            info!(root = %root.display(), "pyenv: removing an unfinished build (no completion marker)");
            shellbox_core::remove_tree(&root)
                .map_err(|e| PyenvError::io("remove unfinished root", &root, e))?;
        }
        Ok(_) => {
            return Err(PyenvError::InvalidRoot {
                root,
                reason: "it exists and is not a directory".into(),
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(PyenvError::io("inspect root", &root, e)),
    }

    let uv = locate_uv(options)?;
    let result = build_locked(&root, &uv, &source, &lock_bytes, &lock_sha256, options);
    if result.is_err() {
        if let Err(e) = shellbox_core::remove_tree(&root) {
            if e.kind() != std::io::ErrorKind::NotFound {
                warn!(root = %root.display(), error = %e, "pyenv: cannot remove the failed build");
            }
        }
    }
    result
}

fn build_locked(
    root: &Path,
    uv: &Path,
    source: &PythonSource,
    lock_bytes: &[u8],
    lock_sha256: &str,
    options: &BuildOptions,
) -> Result<PythonEnvironment, PyenvError> {
    let base_prefix = match source {
        PythonSource::Interpreter(path) => Some(interpreter_base_prefix(path)?),
        PythonSource::Managed(_) => None,
    };
    std::fs::create_dir(root).map_err(|e| PyenvError::io("create directory", root, e))?;
    let lock_copy = root.join(LOCK_COPY_NAME);
    std::fs::write(&lock_copy, lock_bytes).map_err(|e| PyenvError::io("write", &lock_copy, e))?;

    let version = match source {
        PythonSource::Managed(version) => Some(version.as_str()),
        PythonSource::Interpreter(_) => None,
    };
    for step in uv_steps(uv, root, &lock_copy, source, options) {
        match step.kind {
            StepKind::InstallPython => info!(
                version = version.unwrap_or_default(),
                dir = %root.join("python").display(),
                "pyenv: installing CPython with uv"
            ),
            StepKind::CreateVenv => info!(
                python = %source.marker_text(),
                venv = %root.join("venv").display(),
                "pyenv: creating the virtual environment"
            ),
            StepKind::SyncPackages => {
                info!(lock = %lock_copy.display(), "pyenv: installing the locked packages")
            }
            StepKind::CompileLock => {}
        }
        run_step(&step, version)?;
    }

    let mut allowed = vec![root.to_path_buf()];
    allowed.extend(base_prefix.clone());
    let external = base_prefix.is_some();
    if let Some((path, target)) = find_escaping_symlink(root, &allowed, external)? {
        return Err(PyenvError::NotSelfContained { path, target });
    }

    // Writable by the owner only, whatever the umask of whoever made each file (second
    // break-it pass of issue 12: under umask 000 the environment was 0777 through and
    // another user planted a .pth file the next machine imported).
    restrict_to_owner(root)?;
    let marker = Marker {
        python: source.marker_text(),
        lock_sha256: lock_sha256.to_string(),
        base_prefix: base_prefix.clone(),
    };
    write_atomically(&root.join(MARKER_NAME), marker.render().as_bytes())?;
    info!(root = %root.display(), "pyenv: environment ready");
    Ok(PythonEnvironment::new(root.to_path_buf(), base_prefix))
}

/// Clears the group and others write bits of `dir` and of every file and directory below
/// it (symlinks are left as they are: their own mode is never used).
///
/// # Errors
/// [`PyenvError::Io`] when a directory cannot be read or a mode cannot be set.
fn restrict_to_owner(dir: &Path) -> Result<(), PyenvError> {
    use std::os::unix::fs::PermissionsExt;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        let meta =
            std::fs::symlink_metadata(&path).map_err(|e| PyenvError::io("inspect", &path, e))?;
        if meta.file_type().is_symlink() {
            continue;
        }
        let mode = meta.permissions().mode();
        if mode & 0o022 != 0 {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode & !0o022))
                .map_err(|e| PyenvError::io("set the mode of", &path, e))?;
        }
        if meta.is_dir() {
            for entry in
                std::fs::read_dir(&path).map_err(|e| PyenvError::io("read directory", &path, e))?
            {
                let entry = entry.map_err(|e| PyenvError::io("read directory", &path, e))?;
                pending.push(entry.path());
            }
        }
    }
    Ok(())
}

/// Makes `root` absolute with its parent resolved (created first when `create_parent`).
pub(crate) fn resolve_root(root: &Path, create_parent: bool) -> Result<PathBuf, PyenvError> {
    let invalid = |reason: &str| PyenvError::InvalidRoot {
        root: root.to_path_buf(),
        reason: reason.to_string(),
    };
    let absolute =
        std::path::absolute(root).map_err(|e| invalid(&format!("cannot make it absolute: {e}")))?;
    let name = match absolute.components().next_back() {
        Some(Component::Normal(name)) => name.to_owned(),
        _ => return Err(invalid("it has no final directory name")),
    };
    let parent = absolute
        .parent()
        .ok_or_else(|| invalid("it has no parent directory"))?;
    if create_parent {
        std::fs::create_dir_all(parent)
            .map_err(|e| PyenvError::io("create directory", parent, e))?;
    }
    let parent = parent
        .canonicalize()
        .map_err(|e| PyenvError::io("resolve directory", parent, e))?;
    Ok(parent.join(name))
}

/// `<parent>/<root name>.lock`, beside the root (never inside it, so removing an
/// unfinished root never removes the lock).
fn lock_file_path(root: &Path) -> PathBuf {
    let mut name = root.file_name().unwrap_or_default().to_owned();
    name.push(".lock");
    root.with_file_name(name)
}

/// How often a builder with a [`BuildOptions::lock_timeout`] retries the lock.
const LOCK_POLL: Duration = Duration::from_millis(50);

pub(crate) fn lock_exclusive(
    path: &Path,
    timeout: Option<Duration>,
) -> Result<Flock<File>, PyenvError> {
    // O_NOFOLLOW: a lock file linked elsewhere is refused (ELOOP), never created or
    // opened where the link leads (break-it of issue 12: the cache's entries are its own).
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .mode(0o644)
        .open(path)
        .map_err(|e| PyenvError::io("open lock file", path, e))?;
    let start = Instant::now();
    let mut announced = false;
    loop {
        let mode = if timeout.is_some() || !announced {
            FlockArg::LockExclusiveNonblock
        } else {
            FlockArg::LockExclusive
        };
        match Flock::lock(file, mode) {
            Ok(guard) => return Ok(guard),
            Err((returned, Errno::EINTR)) => file = returned,
            Err((returned, Errno::EWOULDBLOCK)) => {
                file = returned;
                if !announced {
                    info!(lock = %path.display(), "pyenv: another builder holds the lock; waiting for it");
                    announced = true;
                }
                if let Some(timeout) = timeout {
                    let waited = start.elapsed();
                    if waited >= timeout {
                        return Err(PyenvError::LockTimeout {
                            lock: path.to_path_buf(),
                            waited,
                        });
                    }
                    std::thread::sleep(LOCK_POLL.min(timeout - waited));
                }
            }
            Err((_, errno)) => {
                return Err(PyenvError::io("lock", path, std::io::Error::from(errno)))
            }
        }
    }
}

/// Asks the interpreter for its `sys.base_prefix` (isolated mode: `PYTHON*` variables and
/// user site ignored) and resolves it.
pub(crate) fn interpreter_base_prefix(python: &Path) -> Result<PathBuf, PyenvError> {
    let unusable = |reason: String| PyenvError::InterpreterUnusable {
        path: python.to_path_buf(),
        reason,
    };
    info!(python = %python.display(), "pyenv: asking the interpreter for sys.base_prefix");
    let output = std::process::Command::new(python)
        .args(["-I", "-c", "import sys; sys.stdout.write(sys.base_prefix)"])
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
    let text = String::from_utf8(output.stdout)
        .map_err(|_| unusable("sys.base_prefix is not UTF-8".into()))?;
    if text.is_empty() || text.contains(['\n', '\r']) || !text.starts_with('/') {
        return Err(unusable(format!("unexpected sys.base_prefix {text:?}")));
    }
    Path::new(&text)
        .canonicalize()
        .map_err(|e| unusable(format!("cannot resolve sys.base_prefix {text}: {e}")))
}

/// The first symlink under `root` whose target (taken lexically, relative to the link's
/// directory) leaves every directory of `allowed` (and, when `system_ok`, the system
/// directories), with its stored target.
pub(crate) fn find_escaping_symlink(
    root: &Path,
    allowed: &[PathBuf],
    system_ok: bool,
) -> Result<Option<(PathBuf, PathBuf)>, PyenvError> {
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries =
            std::fs::read_dir(&dir).map_err(|e| PyenvError::io("read directory", &dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| PyenvError::io("read directory", &dir, e))?;
            let path = entry.path();
            let file_type = entry
                .file_type()
                .map_err(|e| PyenvError::io("inspect", &path, e))?;
            if file_type.is_dir() {
                pending.push(path);
            } else if file_type.is_symlink() {
                let target = std::fs::read_link(&path)
                    .map_err(|e| PyenvError::io("read symlink", &path, e))?;
                let resolved = normalize(&dir.join(&target));
                let inside = allowed.iter().any(|a| resolved.starts_with(a))
                    || (system_ok && in_system_directories(&resolved));
                if !inside {
                    return Ok(Some((path, target)));
                }
            }
        }
    }
    Ok(None)
}

/// Removes `.` and resolves `..` lexically (never above `/`).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), PyenvError> {
    let mut tmp_name = path.file_name().unwrap_or_default().to_owned();
    tmp_name.push(".tmp");
    let tmp = path.with_file_name(tmp_name);
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(&tmp)
        .map_err(|e| PyenvError::io("create", &tmp, e))?;
    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .map_err(|e| PyenvError::io("create", &tmp, e))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| PyenvError::io("write", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| PyenvError::io("rename", &tmp, e))?;
    if let Some(dir) = path.parent() {
        if let Ok(dir) = File::open(dir) {
            let _ = dir.sync_all();
        }
    }
    Ok(())
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn hashing_and_paths() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(lock_file_path(Path::new("/e/a")), Path::new("/e/a.lock"));
        assert_eq!(normalize(Path::new("/a/b/../c/./d")), Path::new("/a/c/d"));
        assert_eq!(normalize(Path::new("/../x")), Path::new("/x"));
    }

    #[test]
    fn resolve_root_rules() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().canonicalize().unwrap();
        let nested = dir.path().join("a/b/env");
        assert_eq!(resolve_root(&nested, true).unwrap(), real.join("a/b/env"));
        assert!(real.join("a/b").is_dir());
        symlink(real.join("a"), real.join("link")).unwrap();
        assert_eq!(
            resolve_root(&real.join("link/b/env"), false).unwrap(),
            real.join("a/b/env")
        );
        assert!(matches!(
            resolve_root(Path::new("/"), false),
            Err(PyenvError::InvalidRoot { .. })
        ));
        assert!(matches!(
            resolve_root(&real.join(".."), false),
            Err(PyenvError::InvalidRoot { .. })
        ));
        assert!(matches!(
            resolve_root(&real.join("missing/env"), false),
            Err(PyenvError::Io { .. })
        ));
    }

    #[test]
    fn escaping_symlinks_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap().join("env");
        std::fs::create_dir_all(root.join("venv/bin")).unwrap();
        std::fs::create_dir_all(root.join("python/bin")).unwrap();
        symlink("python3.12", root.join("python/bin/python3")).unwrap();
        symlink(
            root.join("python/bin/python3"),
            root.join("venv/bin/python"),
        )
        .unwrap();
        symlink("../../python/bin/python3", root.join("venv/bin/python3")).unwrap();
        let allowed = vec![root.clone()];
        assert_eq!(find_escaping_symlink(&root, &allowed, false).unwrap(), None);

        symlink("/usr/bin/python3", root.join("venv/bin/sys")).unwrap();
        assert_eq!(
            find_escaping_symlink(&root, &allowed, false).unwrap(),
            Some((root.join("venv/bin/sys"), PathBuf::from("/usr/bin/python3")))
        );
        assert_eq!(find_escaping_symlink(&root, &allowed, true).unwrap(), None);

        symlink("../../../outside", root.join("venv/bin/up")).unwrap();
        let found = find_escaping_symlink(&root, &allowed, true).unwrap();
        assert_eq!(found.unwrap().0, root.join("venv/bin/up"));
        let with_prefix = vec![root.clone(), dir.path().canonicalize().unwrap()];
        assert_eq!(
            find_escaping_symlink(&root, &with_prefix, true).unwrap(),
            None
        );
    }
}
