//! Shell-style exit statuses.

/// The status a POSIX shell reports for a process killed by signal `signal`: 128 + N.
pub fn signal_exit_code(signal: i32) -> i32 {
    128 + signal
}

/// The shell-style exit code of a finished process: its exit status, or 128 + N when
/// signal N killed it.
pub fn exit_code_of(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => signal_exit_code(signal),
        (None, None) => 255,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn maps_signals() {
        assert_eq!(exit_code_of(std::process::ExitStatus::from_raw(9)), 137);
        assert_eq!(exit_code_of(std::process::ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(signal_exit_code(15), 143);
    }
}
