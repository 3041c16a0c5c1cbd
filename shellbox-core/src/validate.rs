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

/// The longest single argument or `NAME=value` environment string `execve(2)` accepts on
/// Linux, its terminating NUL included (`MAX_ARG_STRLEN`, 32 pages of 4 KiB).
pub const EXEC_STRING_MAX_BYTES: usize = 32 * 4096;

/// Checks each argument and `NAME=value` environment string on its own against what one
/// `execve(2)` string may hold on Linux ([`EXEC_STRING_MAX_BYTES`], the kernel's
/// `MAX_ARG_STRLEN`), the rule [`Command::validate`](crate::Command::validate) and
/// [`MachineSpec::validate`](crate::MachineSpec::validate) apply on every backend: such a
/// string can never run (the kernel refuses the whole exec with `E2BIG`), whatever else the
/// backend adds, so it is refused before anything runs rather than reported as a command
/// result. The total (`ARG_MAX`) is each backend's to check, with what it adds
/// ([`validate_exec_size`]).
///
/// # Errors
/// [`Error::InvalidInput`] naming the first argument (its index) or variable of
/// [`EXEC_STRING_MAX_BYTES`] bytes or more (the limit counts the terminating NUL).
pub fn validate_exec_strings<'a>(
    argv: impl IntoIterator<Item = &'a str>,
    env: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<(), Error> {
    for (i, arg) in argv.into_iter().enumerate() {
        if arg.len() >= EXEC_STRING_MAX_BYTES {
            return Err(argument_too_long(i, arg.len()));
        }
    }
    for (key, value) in env {
        let len = env_string_len(key, value);
        if len >= EXEC_STRING_MAX_BYTES {
            return Err(variable_too_long(key, len));
        }
    }
    Ok(())
}

/// The length of `NAME=value`, without its NUL.
fn env_string_len(key: &str, value: &str) -> usize {
    key.len().saturating_add(1).saturating_add(value.len())
}

fn argument_too_long(i: usize, len: usize) -> Error {
    Error::invalid(format!(
        "argument {i} is {len} bytes; execve(2) takes at most {} bytes per argument \
         (Linux's MAX_ARG_STRLEN)",
        EXEC_STRING_MAX_BYTES - 1
    ))
}

fn variable_too_long(key: &str, len: usize) -> Error {
    Error::invalid(format!(
        "environment variable {key} is {len} bytes as NAME=value; execve(2) takes at most {} \
         bytes per variable (Linux's MAX_ARG_STRLEN)",
        EXEC_STRING_MAX_BYTES - 1
    ))
}

/// The most that argv and the environment together may take in one `execve(2)`: each
/// string with its NUL plus one 8-byte pointer. This is Linux's `ARG_MAX` under the usual
/// 8 MiB stack limit (a quarter of it; `getconf ARG_MAX` says 2097152), the bound a
/// program meets on almost every host and container.
pub const EXEC_ARGS_MAX_BYTES: usize = 2 * 1024 * 1024;

/// Checks that a program started with `argv` and `env` fits what `execve(2)` accepts
/// (POSIX's `ARG_MAX`, Linux's `MAX_ARG_STRLEN`), so a backend can refuse it before
/// anything runs rather than report the kernel's `E2BIG` as a command result.
/// `reserved_bytes` is what the backend itself adds to the same exec (a wrapper script and
/// its arguments, its own variables, the image's environment): the budget for `argv` and
/// `env` is [`EXEC_ARGS_MAX_BYTES`] less that. Each string is counted with its NUL plus an
/// 8-byte pointer; an env entry as `NAME=value`.
///
/// # Errors
/// [`Error::InvalidInput`] naming the argument (its index) or variable longer than
/// [`EXEC_STRING_MAX_BYTES`] − 1 bytes, or giving the total when the whole is over budget.
pub fn validate_exec_size<'a>(
    argv: impl IntoIterator<Item = &'a str>,
    env: impl IntoIterator<Item = (&'a str, &'a str)>,
    reserved_bytes: usize,
) -> Result<(), Error> {
    const POINTER: usize = 8;
    let mut total = 0usize;
    for (i, arg) in argv.into_iter().enumerate() {
        if arg.len() >= EXEC_STRING_MAX_BYTES {
            return Err(argument_too_long(i, arg.len()));
        }
        total = total.saturating_add(arg.len() + 1 + POINTER);
    }
    for (key, value) in env {
        let len = env_string_len(key, value);
        if len >= EXEC_STRING_MAX_BYTES {
            return Err(variable_too_long(key, len));
        }
        total = total.saturating_add(len + 1 + POINTER);
    }
    let budget = EXEC_ARGS_MAX_BYTES.saturating_sub(reserved_bytes);
    if total > budget {
        return Err(Error::invalid(format!(
            "argv and environment take {total} bytes (each string with its NUL and a pointer); \
             execve(2) takes at most {budget} here (ARG_MAX, {EXEC_ARGS_MAX_BYTES} bytes, less \
             {reserved_bytes} the backend adds)"
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
    fn exec_sizes() {
        let none = std::iter::empty::<(&str, &str)>;
        validate_exec_size(["echo", "hi"], [("A", "1")], 0).unwrap();
        let long = "a".repeat(EXEC_STRING_MAX_BYTES - 1);
        validate_exec_size([long.as_str()], none(), 0).unwrap();
        let too_long = "a".repeat(EXEC_STRING_MAX_BYTES);
        let err = validate_exec_size(["x", too_long.as_str()], none(), 0).unwrap_err();
        assert!(err.to_string().contains("argument 1"), "{err}");
        let value = "v".repeat(EXEC_STRING_MAX_BYTES - 3);
        validate_exec_size(["x"], [("A", value.as_str())], 0).unwrap();
        let value = "v".repeat(EXEC_STRING_MAX_BYTES - 2);
        let err = validate_exec_size(["x"], [("A", value.as_str())], 0).unwrap_err();
        assert!(err.to_string().contains("variable A"), "{err}");
        // 16 strings of 128 KiB − 1 (with NUL and pointer: 131080 each) fill 2 MiB + 128.
        let args: Vec<String> = (0..16)
            .map(|_| "a".repeat(EXEC_STRING_MAX_BYTES - 1))
            .collect();
        let err = validate_exec_size(args.iter().map(String::as_str), none(), 0).unwrap_err();
        assert!(matches!(err, Error::InvalidInput(_)), "{err}");
        validate_exec_size(args[..15].iter().map(String::as_str), none(), 0).unwrap();
        let err =
            validate_exec_size(args[..15].iter().map(String::as_str), none(), 200_000).unwrap_err();
        assert!(err.to_string().contains("200000"), "{err}");
    }

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
