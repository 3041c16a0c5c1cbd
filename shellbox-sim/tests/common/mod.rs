//! What the differential tests share: one script run through the host's real `bash` and
//! through the simulator, in the same environment, and the two outcomes compared.

use shellbox_core::{Command, MachineSpec};
use shellbox_sim::SimMachineFactory;

/// Whether the host has bash 5 (the version the simulator follows); a test that needs it
/// prints its `SKIP` line when it does not.
pub fn has_bash5() -> bool {
    std::process::Command::new("bash")
        .arg("-c")
        .arg("[ ${BASH_VERSINFO[0]} -ge 5 ]")
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// The environment both shells get, as a fresh machine has it.
const ENV: [(&str, &str); 6] = [
    ("HOME", "/root"),
    ("HOSTNAME", "sandbox"),
    ("LANG", "C.UTF-8"),
    (
        "PATH",
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    ),
    ("SHELL", "/bin/bash"),
    ("USER", "root"),
];

/// One script's stdout and exit status on each side.
pub struct Compared {
    bash: (String, Option<i32>),
    sim: (String, Option<i32>),
    sim_stderr: String,
}

impl Compared {
    /// Whether stdout and exit status are the same.
    pub fn same(&self) -> bool {
        self.bash == self.sim
    }

    /// Both outcomes, for a failure message.
    pub fn describe(&self, script: &str) -> String {
        format!(
            "{script}\n  bash: {:?} {:?}\n  sim:  {:?} {:?} (stderr {:?})",
            self.bash.1, self.bash.0, self.sim.1, self.sim.0, self.sim_stderr
        )
    }
}

/// Runs `script` with `bash --norc --noprofile -c` in an empty temporary directory, and
/// with `bash -c` in a fresh simulator machine whose workdir is `/work`.
pub fn run_both(script: &str) -> Compared {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let mut real = std::process::Command::new("bash");
    real.args(["--norc", "--noprofile", "-c", script])
        .current_dir(dir.path())
        .env_clear()
        .envs(ENV)
        .stdin(std::process::Stdio::null());
    // SAFETY: only async-signal-safe calls between fork and exec. A test run started in the
    // background of a shell ignores SIGINT and SIGQUIT, and bash cannot trap a signal
    // ignored at its start (`trap -p INT` then shows '' where a fresh machine shows the
    // trap): the real bash starts with their default dispositions, as a machine's does.
    unsafe {
        real.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGQUIT, libc::SIG_DFL);
            Ok(())
        });
    }
    let real = real.output().unwrap();
    let m = SimMachineFactory::new()
        .create_sim(MachineSpec::sim().workdir("/work"))
        .unwrap();
    let sim = m
        .run_sync(Command::from_argv(["bash", "-c", script]).envs(ENV))
        .unwrap();
    Compared {
        bash: (
            String::from_utf8_lossy(&real.stdout).into_owned(),
            real.status.code(),
        ),
        sim: (
            String::from_utf8_lossy(&sim.stdout).into_owned(),
            sim.exit_code,
        ),
        sim_stderr: String::from_utf8_lossy(&sim.stderr).into_owned(),
    }
}
