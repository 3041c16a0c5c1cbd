//! The `python` argument: a CPython version for uv to install, or an existing interpreter.

use std::path::{Path, PathBuf};

use crate::PyenvError;

/// Where a build's interpreter comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PythonSource {
    /// A full CPython version (`X.Y.Z`, e.g. `3.12.12`) that `uv python install` downloads
    /// into `root/python`; every file and symlink of the environment then lies under root.
    Managed(String),
    /// An existing interpreter (an absolute path), for hosts that cannot download
    /// interpreters. The environment's venv refers to it, so a sandbox must also mount its
    /// installation prefix (see [`PythonEnvironment::read_only_dirs`](crate::PythonEnvironment::read_only_dirs)).
    Interpreter(PathBuf),
}

impl PythonSource {
    /// Parses the `python` argument of a build.
    ///
    /// Three dot-separated runs of ASCII digits are a [`PythonSource::Managed`] version; a
    /// value containing `/` is an interpreter path, made absolute against the current
    /// directory (not resolved: the marker records it as given).
    ///
    /// # Errors
    /// [`PyenvError::InvalidPython`] for anything else (a partial version such as `3.12`,
    /// a bare name such as `python3`, an empty value) and for a value holding a newline or
    /// NUL byte (the completion marker is line-based).
    pub fn parse(value: &str) -> Result<Self, PyenvError> {
        let invalid = |reason: &str| PyenvError::InvalidPython {
            value: value.to_string(),
            reason: reason.to_string(),
        };
        if value.contains(['\n', '\r', '\0']) {
            return Err(invalid("it contains a newline or NUL byte"));
        }
        if is_full_version(value) {
            return Ok(PythonSource::Managed(value.to_string()));
        }
        if value.contains('/') {
            let path = std::path::absolute(Path::new(value))
                .map_err(|e| invalid(&format!("cannot make the path absolute: {e}")))?;
            return Ok(PythonSource::Interpreter(path));
        }
        Err(invalid(
            "expected a full CPython version such as 3.12.12 or the path of an interpreter \
             such as /usr/bin/python3",
        ))
    }

    /// The value recorded in the completion marker: the version, or the interpreter path.
    pub fn marker_text(&self) -> String {
        match self {
            PythonSource::Managed(version) => version.clone(),
            PythonSource::Interpreter(path) => path.display().to_string(),
        }
    }
}

fn is_full_version(value: &str) -> bool {
    let parts: Vec<&str> = value.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_versions_and_paths() {
        assert_eq!(
            PythonSource::parse("3.12.12").unwrap(),
            PythonSource::Managed("3.12.12".into())
        );
        assert_eq!(
            PythonSource::parse("/usr/bin/python3").unwrap(),
            PythonSource::Interpreter("/usr/bin/python3".into())
        );
        let relative = PythonSource::parse("bin/python3").unwrap();
        assert_eq!(
            relative,
            PythonSource::Interpreter(std::env::current_dir().unwrap().join("bin/python3"))
        );
        for bad in [
            "3.12", "3", "python3", "", "3.12.x", "3..1", "3.12.1.2", "/a\nb",
        ] {
            assert!(
                matches!(
                    PythonSource::parse(bad),
                    Err(PyenvError::InvalidPython { .. })
                ),
                "{bad:?}"
            );
        }
        assert_eq!(
            PythonSource::parse("3.11.7").unwrap().marker_text(),
            "3.11.7"
        );
        assert_eq!(
            PythonSource::parse("/x/python").unwrap().marker_text(),
            "/x/python"
        );
    }
}
