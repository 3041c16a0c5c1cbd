//! Input rules every backend applies the same way.

use std::collections::BTreeMap;

use crate::Error;

/// Checks an environment variable name against the POSIX portable rule
/// `[A-Za-z_][A-Za-z0-9_]*` (the reference library uses the same).
///
/// # Errors
/// [`Error::InvalidInput`] naming the variable when it does not match.
pub fn validate_env_name(name: &str) -> Result<(), Error> {
    let mut chars = name.chars();
    let ok = match chars.next() {
        Some(c) if c.is_ascii_alphabetic() || c == '_' => {
            chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "environment variable name {name:?} does not match [A-Za-z_][A-Za-z0-9_]*"
        )))
    }
}

/// Checks every name with [`validate_env_name`] and that no value holds a NUL byte.
///
/// # Errors
/// [`Error::InvalidInput`] for the first bad name or value.
pub fn validate_env(env: &BTreeMap<String, String>) -> Result<(), Error> {
    for (key, value) in env {
        validate_env_name(key)?;
        if value.contains('\0') {
            return Err(Error::invalid(format!(
                "environment variable {key} contains a NUL byte"
            )));
        }
    }
    Ok(())
}

/// Checks a guest path: absolute, no NUL, and normalised (no empty, `.` or `..`
/// components, no trailing `/` except for `/` itself).
///
/// # Errors
/// [`Error::InvalidInput`] saying which rule the path breaks.
pub fn validate_guest_path(path: &str) -> Result<(), Error> {
    if path.contains('\0') {
        return Err(Error::invalid(format!("path {path:?} contains a NUL byte")));
    }
    if !path.starts_with('/') {
        return Err(Error::invalid(format!("path {path:?} is not absolute")));
    }
    if path == "/" {
        return Ok(());
    }
    for component in path[1..].split('/') {
        if component.is_empty() || component == "." || component == ".." {
            return Err(Error::invalid(format!(
                "path {path:?} is not normalised (empty, '.' or '..' component, or trailing '/')"
            )));
        }
    }
    Ok(())
}

/// The guest directories the kernel provides (`procfs`, `sysfs`, `devtmpfs`): every backend
/// refuses them as a working directory and as a transfer path, since what they hold is not
/// the machine's files (and `/dev/zero` or `/proc/kmsg` never end).
pub const KERNEL_DIRS: [&str; 3] = ["/proc", "/sys", "/dev"];

/// True when the normalised guest `path` is one of [`KERNEL_DIRS`] or lies below one.
pub fn is_kernel_path(path: &str) -> bool {
    KERNEL_DIRS.iter().any(|dir| {
        path.strip_prefix(dir)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

/// Refuses a working directory (`what` names it: `"workdir"`, `"cwd"`) at or below one of
/// [`KERNEL_DIRS`]: the one rule every backend follows (the backends used to disagree).
///
/// # Errors
/// [`Error::Unsupported`] naming the directory when it is kernel-provided.
pub fn validate_not_kernel_dir(what: &str, path: &str) -> Result<(), Error> {
    if is_kernel_path(path) {
        return Err(Error::unsupported(format!(
            "{what} {path} is inside a kernel-provided directory (/proc, /sys, /dev)"
        )));
    }
    Ok(())
}

/// Splits a validated guest path into its components (`"/"` gives none).
pub fn guest_components(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter(|c| !c.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names() {
        for ok in ["A", "_", "a_1", "PATH"] {
            validate_env_name(ok).unwrap();
        }
        for bad in ["", "1A", "A-B", "A B", "Ä", "A=B"] {
            assert!(validate_env_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn guest_paths() {
        for ok in ["/", "/a", "/a/b c", "/a/.hidden", "/a/..b"] {
            validate_guest_path(ok).unwrap();
        }
        for bad in ["", "a", "/a/", "//a", "/a//b", "/./a", "/a/..", "/a\0b"] {
            assert!(validate_guest_path(bad).is_err(), "{bad:?}");
        }
        assert_eq!(guest_components("/a/b").collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(guest_components("/").count(), 0);
    }

    #[test]
    fn kernel_dirs() {
        for yes in ["/proc", "/proc/1", "/sys/kernel", "/dev", "/dev/zero"] {
            assert!(is_kernel_path(yes), "{yes}");
            assert!(validate_not_kernel_dir("cwd", yes)
                .unwrap_err()
                .is_unsupported());
        }
        for no in ["/", "/procs", "/device", "/workspace/proc", "/system"] {
            assert!(!is_kernel_path(no), "{no}");
            validate_not_kernel_dir("cwd", no).unwrap();
        }
    }
}
