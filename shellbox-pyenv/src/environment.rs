//! A finished environment and what a sandbox needs to run it.

use std::path::{Component, Path, PathBuf};

use shellbox_core::{HostImage, ImageSource};

use crate::marker::Marker;
use crate::{PyenvError, MARKER_NAME};

/// A built Python environment: a venv at `root/venv` with the locked packages, and its
/// interpreter (under `root/python`, or an external installation).
///
/// Made by [`build_python_environment`](crate::build_python_environment) or
/// [`PythonEnvironment::open`]. The venv refers to its interpreter by absolute path, so the
/// root must not move after the build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PythonEnvironment {
    root: PathBuf,
    base_prefix: Option<PathBuf>,
}

impl PythonEnvironment {
    pub(crate) fn new(root: PathBuf, base_prefix: Option<PathBuf>) -> Self {
        Self { root, base_prefix }
    }

    /// Opens an environment a previous build finished, reading its completion marker
    /// (`root/.complete`); nothing is built or checked against inputs. `root` is made
    /// absolute and its parent resolved, as a build does.
    ///
    /// # Errors
    /// [`PyenvError::InvalidRoot`] for a root without a final component,
    /// [`PyenvError::NotBuilt`] when the marker is absent (never built, or interrupted),
    /// [`PyenvError::Marker`] when it is not in this crate's format, [`PyenvError::Io`] when
    /// the root's parent or the marker cannot be read.
    pub fn open(root: impl AsRef<Path>) -> Result<Self, PyenvError> {
        let root = crate::build::resolve_root(root.as_ref(), false)?;
        let marker_path = root.join(MARKER_NAME);
        let text = match std::fs::read_to_string(&marker_path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(PyenvError::NotBuilt { root })
            }
            Err(e) => return Err(PyenvError::io("read marker", marker_path, e)),
        };
        let marker = Marker::parse(&text).map_err(|reason| PyenvError::Marker {
            path: marker_path,
            reason,
        })?;
        Ok(Self::new(root, marker.base_prefix))
    }

    /// The environment's root directory (absolute, parent resolved).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `root/venv/bin`: the directory to put first on `PATH` (holds `python3`, `python` and
    /// the locked packages' scripts).
    pub fn bin_dir(&self) -> PathBuf {
        self.root.join("venv").join("bin")
    }

    /// `root/venv/bin/python3`: the environment's interpreter (`sys.prefix` is `root/venv`).
    pub fn python(&self) -> PathBuf {
        self.bin_dir().join("python3")
    }

    /// The resolved `sys.base_prefix` of the external interpreter the environment was built
    /// with, or `None` for a uv-managed interpreter (which lies under root).
    pub fn interpreter_prefix(&self) -> Option<&Path> {
        self.base_prefix.as_deref()
    }

    /// Exactly the host directories a sandbox must mount read-only, at their own paths, for
    /// [`PythonEnvironment::python`] to run: the root, then the external interpreter's
    /// prefix. A directory in the system directories every local machine already mounts
    /// (see [`in_system_directories`]) is left out, and so is one lying inside the other
    /// (mounting the outer one shows it), because the local backend refuses mounts inside
    /// system directories or inside other mounts. For a managed environment this is just
    /// the root.
    pub fn read_only_dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        for dir in [Some(&self.root), self.base_prefix.as_ref()]
            .into_iter()
            .flatten()
        {
            if in_system_directories(dir) || dirs.iter().any(|d| dir.starts_with(d)) {
                continue;
            }
            dirs.retain(|d| !d.starts_with(dir));
            dirs.push(dir.clone());
        }
        dirs
    }

    /// A [`HostImage`] that runs this environment: [`read_only_dirs`](Self::read_only_dirs)
    /// mounted read-only and [`bin_dir`](Self::bin_dir) as the only extra `PATH` entry, so
    /// `python3` in a local machine is this environment's interpreter.
    pub fn host_image(&self) -> HostImage {
        let mut image = HostImage::default();
        self.add_to(&mut image);
        image
    }

    /// Adds this environment to an existing image: each of
    /// [`read_only_dirs`](Self::read_only_dirs) not already listed is appended to
    /// `image.read_only`, and [`bin_dir`](Self::bin_dir) is moved or inserted to the front of
    /// `image.bin_dirs`, so this environment's `python3` wins over the image's other bin
    /// directories. Adding the same environment twice changes nothing.
    pub fn add_to(&self, image: &mut HostImage) {
        for dir in self.read_only_dirs() {
            if !image.read_only.contains(&dir) {
                image.read_only.push(dir);
            }
        }
        let bin = self.bin_dir();
        image.bin_dirs.retain(|d| d != &bin);
        image.bin_dirs.insert(0, bin);
    }
}

impl From<&PythonEnvironment> for HostImage {
    /// [`PythonEnvironment::host_image`].
    fn from(env: &PythonEnvironment) -> Self {
        env.host_image()
    }
}

impl From<&PythonEnvironment> for ImageSource {
    /// `ImageSource::Host(env.host_image())`, for `MachineSpec::new((&env).into())`.
    fn from(env: &PythonEnvironment) -> Self {
        ImageSource::Host(env.host_image())
    }
}

/// Whether an absolute path lies in the host system directories a local machine always
/// mounts read-only (`/usr`, `/bin`, `/sbin`, `/lib`, `/lib32`, `/lib64`, `/libx32`, any
/// `/lib*`), per the local backend's sandbox line (REFERENCE.md 4.3). Relative paths are
/// never inside.
pub fn in_system_directories(path: &Path) -> bool {
    let mut components = path.components();
    if components.next() != Some(Component::RootDir) {
        return false;
    }
    match components.next() {
        Some(Component::Normal(first)) => {
            let first = first.to_string_lossy();
            matches!(first.as_ref(), "usr" | "bin" | "sbin") || first.starts_with("lib")
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shellbox_core::Mount;

    #[test]
    fn system_directories() {
        for inside in [
            "/usr",
            "/usr/local",
            "/bin/x",
            "/lib",
            "/lib64/x",
            "/libx32",
            "/sbin",
        ] {
            assert!(in_system_directories(Path::new(inside)), "{inside}");
        }
        for outside in [
            "/",
            "/root/.pyenv/versions/3.11.7",
            "/opt/py",
            "/usrx",
            "/etc",
            "usr",
            "/home/lib",
        ] {
            assert!(!in_system_directories(Path::new(outside)), "{outside}");
        }
    }

    #[test]
    fn dirs_and_images() {
        let managed = PythonEnvironment::new("/envs/a".into(), None);
        assert_eq!(managed.bin_dir(), Path::new("/envs/a/venv/bin"));
        assert_eq!(managed.python(), Path::new("/envs/a/venv/bin/python3"));
        assert_eq!(managed.read_only_dirs(), [PathBuf::from("/envs/a")]);

        let external = PythonEnvironment::new("/envs/b".into(), Some("/opt/py".into()));
        assert_eq!(
            external.read_only_dirs(),
            [PathBuf::from("/envs/b"), PathBuf::from("/opt/py")]
        );
        let system = PythonEnvironment::new("/envs/c".into(), Some("/usr".into()));
        assert_eq!(system.read_only_dirs(), [PathBuf::from("/envs/c")]);
        assert_eq!(system.interpreter_prefix(), Some(Path::new("/usr")));
        let system_root =
            PythonEnvironment::new("/usr/local/envs/d".into(), Some("/opt/py".into()));
        assert_eq!(system_root.read_only_dirs(), [PathBuf::from("/opt/py")]);
        let root_in_prefix =
            PythonEnvironment::new("/opt/py/envs/e".into(), Some("/opt/py".into()));
        assert_eq!(root_in_prefix.read_only_dirs(), [PathBuf::from("/opt/py")]);
        let prefix_in_root =
            PythonEnvironment::new("/envs/f".into(), Some("/envs/f/python".into()));
        assert_eq!(prefix_in_root.read_only_dirs(), [PathBuf::from("/envs/f")]);
        let same = PythonEnvironment::new("/envs/g".into(), Some("/envs/g".into()));
        assert_eq!(same.read_only_dirs(), [PathBuf::from("/envs/g")]);

        assert_eq!(
            external.host_image(),
            HostImage {
                read_only: vec!["/envs/b".into(), "/opt/py".into()],
                bin_dirs: vec!["/envs/b/venv/bin".into()],
                mounts: vec![],
            }
        );
        let mut image = HostImage {
            read_only: vec!["/opt/py".into(), "/data".into()],
            bin_dirs: vec!["/tools/bin".into(), "/envs/b/venv/bin".into()],
            mounts: vec![Mount {
                host: "/srv".into(),
                guest: "/srv".into(),
            }],
        };
        external.add_to(&mut image);
        let expected = HostImage {
            read_only: vec!["/opt/py".into(), "/data".into(), "/envs/b".into()],
            bin_dirs: vec!["/envs/b/venv/bin".into(), "/tools/bin".into()],
            mounts: vec![Mount {
                host: "/srv".into(),
                guest: "/srv".into(),
            }],
        };
        assert_eq!(image, expected);
        external.add_to(&mut image);
        assert_eq!(image, expected);
        assert_eq!(HostImage::from(&external), external.host_image());
        assert_eq!(
            ImageSource::from(&external),
            ImageSource::Host(external.host_image())
        );
    }
}
