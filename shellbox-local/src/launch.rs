//! The thin side-effecting part: spawn bwrap with the planned argv, environment fd, limits
//! and process group, pump its output, enforce the timeout and report how it ended.

use std::ffi::{CString, OsString};
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use shellbox_core::capture::timed_out_status;
use shellbox_core::{Error, Event, EventStream, ExitReason, ExitStatus};
use tokio::sync::{mpsc, watch};

use crate::cgroup::MachineCgroup;
use crate::ns::MachineNamespaces;
use crate::plan::Limit;
use crate::seccomp::SeccompSetup;

/// What confines a command besides bwrap's own options: the machine's namespaces its
/// launcher joins, the seccomp filters, and the machine's pids cgroup the launcher enters.
#[derive(Default)]
pub(crate) struct Confinement {
    pub namespaces: Option<Arc<MachineNamespaces>>,
    pub seccomp: Option<Arc<SeccompSetup>>,
    pub cgroup: Option<Arc<MachineCgroup>>,
    /// The supervisor program's sealed memfd, re-opened in the launcher at its own fd
    /// number for bwrap's `--ro-bind-data`.
    pub program: Option<Arc<OwnedFd>>,
}

/// The fixed environment bwrap itself runs with (REFERENCE 4.4); the sandbox clears it.
pub const CONTROL_ENV: [(&str, &str); 3] = [
    ("PATH", "/usr/bin:/bin"),
    ("HOME", "/home/shellbox"),
    ("LANG", "C.UTF-8"),
];

/// A bwrap command ready to spawn: program, argv, the environment memfd, the JSON status
/// pipe (read end in `status`), the limits and the namespaces its launcher joins.
pub(crate) struct Prepared {
    bwrap: PathBuf,
    args: Vec<OsString>,
    memfd: OwnedFd,
    status_write: Option<OwnedFd>,
    pub status: Option<OwnedFd>,
    limits: Vec<Limit>,
    namespaces: Option<Arc<MachineNamespaces>>,
    seccomp: Option<Arc<SeccompSetup>>,
    cgroup: Option<Arc<MachineCgroup>>,
    program: Option<Arc<OwnedFd>>,
}

fn errno_io(e: nix::errno::Errno) -> std::io::Error {
    std::io::Error::from(e)
}

/// Builds the bwrap process: `args(env_fd, status_fd)` gives its argv; `env_options` (the
/// NUL-separated `--clearenv/--setenv` list) is written to a memfd that the child re-opens
/// (so each spawn reads it from offset 0) at the fd number given to `args`. In the child,
/// before exec: a new session and process group, `limits`, niceness +10, default SIGPIPE
/// and SIGXFSZ dispositions, and every fd but stdio and those two marked close-on-exec.
/// First of all it joins the machine's shared namespaces (`setns(2)`), which `namespaces`
/// keeps open for as long as the command exists. With `seccomp`, its command program's
/// memfd is re-opened in the child at its own fd number (the third value given to `args`,
/// for bwrap's `--seccomp`), and its launcher program, if any, is loaded last, just before
/// the exec. Before anything else it writes itself into the machine's pids cgroup, so
/// bwrap and all it starts are counted. No helper process is involved.
pub(crate) fn prepare(
    bwrap: &Path,
    env_options: &[u8],
    limits: Vec<Limit>,
    with_status: bool,
    confinement: Confinement,
    args: impl FnOnce(i32, Option<i32>, Option<i32>) -> Vec<OsString>,
) -> Result<Prepared, Error> {
    use nix::sys::memfd::{memfd_create, MFdFlags};
    let Confinement {
        namespaces,
        seccomp,
        cgroup,
        program,
    } = confinement;
    let memfd = memfd_create("shellbox-env", MFdFlags::MFD_CLOEXEC)
        .map_err(|e| Error::io("create environment memfd", errno_io(e)))?;
    let written = nix::unistd::write(&memfd, env_options)
        .map_err(|e| Error::io("write environment memfd", errno_io(e)))?;
    if written != env_options.len() {
        let mut file = std::fs::File::from(
            memfd
                .try_clone()
                .map_err(|e| Error::io("dup environment memfd", e))?,
        );
        file.write_all(&env_options[written..])
            .map_err(|e| Error::io("write environment memfd", e))?;
    }
    let (status, status_write) = if with_status {
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| Error::io("create status pipe", errno_io(e)))?;
        (Some(r), Some(w))
    } else {
        (None, None)
    };
    let args = args(
        memfd.as_raw_fd(),
        status_write.as_ref().map(|w| w.as_raw_fd()),
        seccomp.as_ref().map(|s| s.command_fd()),
    );
    Ok(Prepared {
        bwrap: bwrap.to_path_buf(),
        args,
        memfd,
        status_write,
        status,
        limits,
        namespaces,
        seccomp,
        cgroup,
        program,
    })
}

impl Prepared {
    /// The prepared launch as a `std::process::Command` (forking launcher), and the read
    /// end of the status pipe. Stdio is left to the caller.
    pub fn into_command(self) -> (std::process::Command, Option<OwnedFd>) {
        let Prepared {
            bwrap,
            args,
            memfd,
            status_write,
            status,
            limits,
            namespaces,
            seccomp,
            cgroup,
            program,
        } = self;
        let reopens = reopens(
            memfd.as_raw_fd(),
            seccomp.as_deref(),
            program.as_deref().map(AsRawFd::as_raw_fd),
        );
        let status_fd = status_write.as_ref().map(|w| w.as_raw_fd());
        let mut command = std::process::Command::new(bwrap);
        command
            .args(args)
            .env_clear()
            .envs(CONTROL_ENV)
            .current_dir("/");
        let joins = namespaces.as_ref().map(|n| n.joins()).unwrap_or_default();
        let limits: Vec<(libc::__rlimit_resource_t, libc::rlimit)> =
            limits.iter().map(raw_limit).collect();
        let pre_exec = move || -> std::io::Result<()> {
            // Keep the fds alive in the Command; only their numbers are used here.
            let _keep = (&memfd, &status_write, &namespaces, &cgroup, &program);
            let filter = seccomp.as_ref().and_then(|s| s.launcher());
            let procs = cgroup.as_ref().map(|c| c.procs_fd());
            // SAFETY: async-signal-safe system calls in the forked child on values
            // prepared before the fork; no allocation happens here.
            match unsafe { child_setup(procs, &joins, &limits, &reopens, status_fd, filter) } {
                0 => Ok(()),
                errno => Err(std::io::Error::from_raw_os_error(errno)),
            }
        };
        // SAFETY: the closure only makes async-signal-safe system calls (see above).
        unsafe {
            command.pre_exec(pre_exec);
        }
        (command, status)
    }
}

fn raw_limit(limit: &Limit) -> (libc::__rlimit_resource_t, libc::rlimit) {
    (
        limit.resource as libc::__rlimit_resource_t,
        libc::rlimit {
            rlim_cur: limit.value,
            rlim_max: limit.value,
        },
    )
}

/// The fds the child re-opens through `/proc/self/fd` at their own number (a fresh open
/// file description read from offset 0, inheritable): the environment memfd, the
/// command's seccomp program and the supervisor program.
fn reopens(
    env_fd: RawFd,
    seccomp: Option<&SeccompSetup>,
    program: Option<RawFd>,
) -> Vec<(RawFd, CString)> {
    [Some(env_fd), seccomp.map(SeccompSetup::command_fd), program]
        .into_iter()
        .flatten()
        .map(|fd| {
            let path = CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL in a path");
            (fd, path)
        })
        .collect()
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EINVAL)
}

/// The launcher's work between fork (or vfork) and exec, shared by both spawn paths:
/// enter the machine's pids cgroup (write `0` to its open `cgroup.procs`), join the
/// machine's namespaces, new session, limits, niceness +10, default SIGPIPE and
/// SIGXFSZ, every fd from 3 up close-on-exec, each `(fd, /proc/self/fd/N)` of `reopens`
/// re-opened at its number, the status fd made inheritable and, last, the launcher's
/// seccomp `filter` loaded. Returns 0 or the failing call's errno.
///
/// # Safety
/// Only for a freshly forked or vforked child: it makes raw system calls, allocates
/// nothing and touches only its arguments.
unsafe fn child_setup(
    cgroup_procs: Option<RawFd>,
    joins: &[(RawFd, libc::c_int)],
    limits: &[(libc::__rlimit_resource_t, libc::rlimit)],
    reopens: &[(RawFd, CString)],
    status_fd: Option<RawFd>,
    filter: Option<&[seccompiler::sock_filter]>,
) -> i32 {
    if let Some(fd) = cgroup_procs {
        if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
            return errno();
        }
    }
    for &(fd, nstype) in joins {
        if libc::setns(fd, nstype) != 0 {
            return errno();
        }
    }
    if libc::setsid() < 0 {
        return errno();
    }
    for (resource, value) in limits {
        if libc::setrlimit(*resource, value) != 0 {
            return errno();
        }
    }
    libc::nice(10);
    libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    libc::signal(libc::SIGXFSZ, libc::SIG_DFL);
    // Host fds the caller left inheritable must not reach the sandbox: mark every fd from
    // 3 up close-on-exec; the two bwrap needs are made inheritable below.
    if libc::syscall(
        libc::SYS_close_range,
        3 as libc::c_uint,
        libc::c_uint::MAX,
        libc::CLOSE_RANGE_CLOEXEC as libc::c_uint,
    ) != 0
    {
        for fd in 3..4096 {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
    for (target, path) in reopens {
        let fd = libc::open(path.as_ptr(), libc::O_RDONLY);
        if fd < 0 {
            return errno();
        }
        if libc::dup2(fd, *target) < 0 {
            return errno();
        }
        libc::close(fd);
    }
    if let Some(w) = status_fd {
        if libc::fcntl(w, libc::F_SETFD, 0) < 0 {
            return errno();
        }
    }
    if let Some(filter) = filter {
        let prog = libc::sock_fprog {
            len: filter.len() as libc::c_ushort,
            filter: filter.as_ptr().cast_mut().cast(),
        };
        if libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0 as libc::c_uint,
            &prog as *const libc::sock_fprog,
        ) != 0
        {
            return errno();
        }
    }
    0
}

/// Everything the vforked child reads: prepared by the parent before `clone(2)`, on the
/// parent's stack, which stays untouched while the parent waits (`CLONE_VFORK`).
struct ChildContext<'a> {
    cgroup_procs: Option<RawFd>,
    joins: Vec<(RawFd, libc::c_int)>,
    limits: Vec<(libc::__rlimit_resource_t, libc::rlimit)>,
    reopens: Vec<(RawFd, CString)>,
    status_fd: Option<RawFd>,
    filter: Option<&'a [seccompiler::sock_filter]>,
    /// Pipe ends that become the child's stdin, stdout and stderr.
    stdio: [RawFd; 3],
    /// Write end of the close-on-exec pipe the child reports a set-up errno on.
    err_fd: RawFd,
    prog: CString,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
}

extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's `ChildContext`, alive until this child execs or exits
    // (the parent is suspended by CLONE_VFORK). Only raw system calls follow.
    unsafe {
        let ctx = &*(arg as *const ChildContext);
        let mut err = child_setup(
            ctx.cgroup_procs,
            &ctx.joins,
            &ctx.limits,
            &ctx.reopens,
            ctx.status_fd,
            ctx.filter,
        );
        if err == 0 {
            for (i, &fd) in ctx.stdio.iter().enumerate() {
                let target = i as RawFd;
                let r = if fd == target {
                    libc::fcntl(fd, libc::F_SETFD, 0)
                } else {
                    libc::dup2(fd, target)
                };
                if r < 0 {
                    err = errno();
                    break;
                }
            }
        }
        if err == 0 && libc::chdir(c"/".as_ptr()) != 0 {
            err = errno();
        }
        if err == 0 {
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            libc::execve(ctx.prog.as_ptr(), ctx.argv.as_ptr(), ctx.envp.as_ptr());
            err = errno();
        }
        libc::write(
            ctx.err_fd,
            (&err as *const i32).cast(),
            std::mem::size_of::<i32>(),
        );
        libc::_exit(127)
    }
}

fn cstring(bytes: &[u8]) -> std::io::Result<CString> {
    CString::new(bytes).map_err(|_| std::io::Error::other("an argument holds a NUL byte"))
}

fn pipe_cloexec() -> std::io::Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(errno_io)
}

/// A bwrap started by [`spawn_vfork`]: its pid and our pipe ends.
struct RawChild {
    pid: i32,
    reaped: bool,
    stdin: Option<OwnedFd>,
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
}

impl Drop for RawChild {
    fn drop(&mut self) {
        if !self.reaped {
            // Cancelled before reaping (the process group was killed by the KillGuard):
            // reap it off the runtime so no zombie is left.
            let pid = self.pid;
            let _ = std::thread::Builder::new()
                .name("shellbox-reap".into())
                .spawn(move || {
                    let mut status = 0;
                    // SAFETY: blocking waitpid on our own child.
                    unsafe { libc::waitpid(pid, &mut status, 0) };
                });
        }
    }
}

/// Starts the prepared bwrap with `clone(CLONE_VM | CLONE_VFORK)`, as `posix_spawn(3)`
/// does: the child borrows this process's memory until it execs instead of copying its
/// page tables (a fork's cost grows with the caller's size), runs [`child_setup`], wires
/// fresh pipes to its stdin, stdout and stderr and execs bwrap with [`CONTROL_ENV`].
fn spawn_vfork(prepared: &Prepared) -> std::io::Result<RawChild> {
    let (in_r, in_w) = pipe_cloexec()?;
    let (out_r, out_w) = pipe_cloexec()?;
    let (errout_r, errout_w) = pipe_cloexec()?;
    let (report_r, report_w) = pipe_cloexec()?;
    let prog = cstring(prepared.bwrap.as_os_str().as_bytes())?;
    let mut arg_strings = Vec::with_capacity(prepared.args.len() + 1);
    arg_strings.push(prog.clone());
    for a in &prepared.args {
        arg_strings.push(cstring(a.as_bytes())?);
    }
    let env_strings: Vec<CString> = CONTROL_ENV
        .iter()
        .map(|(k, v)| cstring(format!("{k}={v}").as_bytes()))
        .collect::<Result<_, _>>()?;
    let terminated = |v: &[CString]| {
        v.iter()
            .map(|c| c.as_ptr())
            .chain([std::ptr::null()])
            .collect::<Vec<_>>()
    };
    let ctx = ChildContext {
        cgroup_procs: prepared.cgroup.as_ref().map(|c| c.procs_fd()),
        joins: prepared
            .namespaces
            .as_ref()
            .map(|n| n.joins())
            .unwrap_or_default(),
        limits: prepared.limits.iter().map(raw_limit).collect(),
        reopens: reopens(
            prepared.memfd.as_raw_fd(),
            prepared.seccomp.as_deref(),
            prepared.program.as_deref().map(AsRawFd::as_raw_fd),
        ),
        status_fd: prepared.status_write.as_ref().map(|w| w.as_raw_fd()),
        filter: prepared.seccomp.as_ref().and_then(|s| s.launcher()),
        stdio: [in_r.as_raw_fd(), out_w.as_raw_fd(), errout_w.as_raw_fd()],
        err_fd: report_w.as_raw_fd(),
        prog,
        argv: terminated(&arg_strings),
        envp: terminated(&env_strings),
    };
    const STACK_BYTES: usize = 64 * 1024;
    let mut stack = vec![0u8; STACK_BYTES];
    // SAFETY: the child runs `child_main` on `stack` (top end, 16-byte aligned) with
    // `ctx`; CLONE_VFORK suspends this thread until the child execs or exits, so both
    // outlive its use. All signals are blocked around clone so no handler of this process
    // runs on the child's stack; the child unblocks them just before exec.
    let pid = unsafe {
        let top = stack.as_mut_ptr().add(STACK_BYTES);
        let top = top.sub(top as usize % 16);
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let pid = libc::clone(
            child_main,
            top.cast(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&ctx as *const ChildContext).cast_mut().cast(),
        );
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        pid
    };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    drop(ctx);
    drop(stack);
    drop((in_r, out_w, errout_w, report_w));
    let mut child = RawChild {
        pid,
        reaped: false,
        stdin: Some(in_w),
        stdout: Some(out_r),
        stderr: Some(errout_r),
    };
    let mut report = [0u8; 4];
    let n = nix::unistd::read(&report_r, &mut report).unwrap_or(0);
    if n == report.len() {
        let mut status = 0;
        // SAFETY: reaping our own child, which has exited.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        child.reaped = true;
        return Err(std::io::Error::from_raw_os_error(i32::from_ne_bytes(
            report,
        )));
    }
    Ok(child)
}

/// The receiving end of a command: dropping it makes the driver kill the command.
struct CommandStream {
    rx: mpsc::Receiver<Result<Event, Error>>,
}

impl Stream for CommandStream {
    type Item = Result<Event, Error>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

/// The `"exit-code"` bwrap's `--json-status-fd` reports once the sandboxed command ended;
/// absent when the sandbox failed to set up.
pub fn parse_exit_code(status_json: &str) -> Option<i32> {
    status_json
        .split('\n')
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line.trim()).ok())
        .find_map(|v| v.get("exit-code")?.as_i64())
        .and_then(|c| i32::try_from(c).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_parsing() {
        let json = "{ \"child-pid\": 9527, \"pid-namespace\": 4026532181 }\n{ \"exit-code\": 2 }\n";
        assert_eq!(parse_exit_code(json), Some(2));
        assert_eq!(parse_exit_code("{ \"child-pid\": 1 }\n"), None);
        assert_eq!(parse_exit_code(""), None);
    }
}

/// A machine's running sandbox: bwrap with the supervisor as its PID 1.
pub(crate) struct MachineProcess {
    /// bwrap's pid (also its process group: the launcher made a new session).
    pub pid: i32,
    /// Our ends of bwrap's stdin (the supervisor's control input), stdout (its output) and
    /// stderr (bwrap's set-up errors).
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    /// Becomes true once bwrap was reaped (its pid may then be reused).
    pub exited: watch::Receiver<bool>,
}

/// Starts the prepared bwrap from a thread of its own that lives exactly as long as bwrap
/// (bwrap's `--die-with-parent` is a parent-*thread* death signal: a pool thread that
/// exits would take the machine with it), reaps it and then flags `exited`.
///
/// # Errors
/// [`Error::Backend`] when the thread or the launcher cannot start (the launcher's errno,
/// e.g. "No such file or directory" for a removed bwrap), with nothing left behind.
pub(crate) fn start_machine(prepared: Prepared, label: &str) -> Result<MachineProcess, Error> {
    let (tx, rx) = std::sync::mpsc::channel();
    let (exited_tx, exited) = watch::channel(false);
    std::thread::Builder::new()
        .name("shellbox-machine".into())
        .spawn(move || {
            let child = spawn_vfork(&prepared);
            drop(prepared);
            let mut child = match child {
                Ok(child) => child,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            let pid = child.pid;
            let fds = (child.stdin.take(), child.stdout.take(), child.stderr.take());
            let _ = tx.send(Ok((pid, fds)));
            let mut status = 0;
            // SAFETY: blocking waitpid on our own child.
            while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
                && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
            {}
            child.reaped = true;
            // Last: whoever waits for `exited` finds nothing of this start left but the
            // thread's own end.
            drop((child, tx));
            exited_tx.send_replace(true);
        })
        .map_err(|e| Error::backend(format!("start the sandbox thread of {label}"), e))?;
    let spawn_err = |e| Error::backend(format!("spawn bwrap for {label}"), e);
    match rx.recv() {
        Ok(Ok((pid, (Some(stdin), Some(stdout), Some(stderr))))) => Ok(MachineProcess {
            pid,
            stdin,
            stdout,
            stderr,
            exited,
        }),
        Ok(Ok(_)) => Err(spawn_err(std::io::Error::other(
            "bwrap's pipes are missing",
        ))),
        Ok(Err(e)) => Err(spawn_err(e)),
        Err(_) => Err(spawn_err(std::io::Error::other("the sandbox thread ended"))),
    }
}

/// Counts a machine's command drivers, so `close` can wait until they are done.
#[derive(Default)]
pub(crate) struct Drivers {
    running: std::sync::atomic::AtomicUsize,
    /// Set while the machine ends its processes (a snapshot's stop, or close): its pids
    /// cgroup is at `pids.max` 0 then, so a fork refused meanwhile is the stop's doing, not
    /// the spec's pids_limit.
    pub(crate) stopping: std::sync::atomic::AtomicBool,
    /// Notified when the last running driver ends.
    idle: tokio::sync::Notify,
}

impl Drivers {
    /// Number of command drivers not yet finished.
    pub fn len(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    /// Waits until no driver runs, or `limit` passed.
    pub async fn wait_idle(&self, limit: Duration) {
        let _ = tokio::time::timeout(limit, async {
            loop {
                let notified = self.idle.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if self.len() == 0 {
                    return;
                }
                notified.await;
            }
        })
        .await;
    }
}

/// Decrements the driver count when its driver ends, however it ends.
struct DriverGuard(Arc<Drivers>);

impl Drop for DriverGuard {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// What a command's driver needs besides its started command.
pub(crate) struct DriveParams {
    pub timeout: Option<Duration>,
    pub shutdown: watch::Receiver<bool>,
    pub drivers: Arc<Drivers>,
    pub label: String,
}

/// The event stream of a command started on the machine's supervisor: a driver task
/// forwards its output, enforces the timeout (a KILL of the command's whole subtree, then
/// the output written before it and a timed-out status), and ends with the exit status,
/// `Error::Closed` when the machine closes, or an error when the supervisor fails. Dropping
/// the stream drops the driver's [`Running`](shellbox_supervisor::Running), which kills
/// the command's subtree.
pub(crate) fn drive(mut running: shellbox_supervisor::Running, params: DriveParams) -> EventStream {
    use shellbox_supervisor::{proto, OutputStream, Reply};
    let (tx, rx) = mpsc::channel(16);
    params.drivers.running.fetch_add(1, Ordering::SeqCst);
    let guard = DriverGuard(params.drivers.clone());
    tokio::spawn(async move {
        let _guard = guard;
        let DriveParams {
            timeout,
            mut shutdown,
            label,
            drivers,
        } = params;
        let deadline = async {
            match timeout {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(deadline);
        let mut timed_out = false;
        // An output event the stream's reader has no room for yet. Until it is delivered
        // no reply is taken from `running` (so the supervisor's flow control holds the
        // command), while the timeout and close are still watched.
        let mut pending: Option<Event> = None;
        enum Step {
            Closed,
            Reply(Option<Reply>),
            Delivered,
            Deadline,
            Dropped,
        }
        let item = loop {
            // Biased: close marks the machine closed before it kills, so a command killed
            // by close always ends with Closed, never with the kill's 137.
            let step = tokio::select! {
                biased;
                _ = shutdown.wait_for(|closed| *closed) => Step::Closed,
                permit = tx.reserve(), if pending.is_some() => match permit {
                    Ok(permit) => {
                        if let Some(event) = pending.take() {
                            permit.send(Ok(event));
                        }
                        Step::Delivered
                    }
                    Err(_) => Step::Dropped,
                },
                reply = running.next(), if pending.is_none() => Step::Reply(reply),
                () = &mut deadline, if !timed_out => Step::Deadline,
                () = tx.closed() => Step::Dropped,
            };
            match step {
                Step::Closed => break Err(Error::Closed),
                Step::Dropped => return,
                Step::Delivered => {}
                Step::Deadline => {
                    timed_out = true;
                    running.kill();
                }
                Step::Reply(Some(Reply::Output(stream, bytes))) => {
                    pending = Some(match stream {
                        OutputStream::Stdout => Event::Stdout(bytes),
                        OutputStream::Stderr => Event::Stderr(bytes),
                    });
                }
                Step::Reply(Some(Reply::Exit(exit))) if timed_out => {
                    break Ok(Event::Exit(timed_out_status(
                        exit.stdout_truncated,
                        exit.stderr_truncated,
                    )))
                }
                Step::Reply(Some(Reply::Exit(exit))) => {
                    break Ok(Event::Exit(ExitStatus {
                        exit_code: Some(exit.shell_code()),
                        reason: ExitReason::Exited,
                        stdout_truncated: exit.stdout_truncated,
                        stderr_truncated: exit.stderr_truncated,
                    }))
                }
                Step::Reply(Some(Reply::Fail(fail))) if fail.kind == proto::FAIL_INVALID_INPUT => {
                    break Err(Error::invalid(format!("{label}: {}", fail.message)))
                }
                Step::Reply(Some(Reply::Fail(fail)))
                    if fail.kind == proto::FAIL_PIDS_LIMIT
                        && drivers.stopping.load(Ordering::SeqCst) =>
                {
                    // CI of stop 28: during a snapshot's stop this was LimitReached.
                    break Err(Error::backend(
                        format!("run {label}"),
                        std::io::Error::other(
                            "the machine's processes were being ended (a snapshot or close) \
                             when it started (its sandbox ended)",
                        ),
                    ));
                }
                Step::Reply(Some(Reply::Fail(fail))) if fail.kind == proto::FAIL_PIDS_LIMIT => {
                    break Err(Error::LimitReached(format!(
                        "{label}: {} (the spec's pids_limit)",
                        fail.message
                    )))
                }
                Step::Reply(Some(Reply::Fail(fail))) => {
                    break Err(Error::backend(
                        format!("run {label} on the machine's supervisor"),
                        std::io::Error::other(fail.message),
                    ))
                }
                Step::Reply(None) if *shutdown.borrow() => break Err(Error::Closed),
                Step::Reply(None) => {
                    break Err(Error::backend(
                        format!("run {label}"),
                        std::io::Error::other(
                            "the machine's supervisor is gone (its sandbox ended)",
                        ),
                    ))
                }
            }
        };
        let _ = tx.send(item).await;
    });
    Box::pin(CommandStream { rx })
}
