//! shellbox-supervisor: runs inside a machine (as its PID 1 on the local backend) and starts
//! the machine's commands on request over stdin/stdout (see `proto.rs` for the frames).
//!
//! std only (no crates), so it links statically with `+crt-static`. The host's build script
//! compiles this file with `$RUSTC`; the library embeds the result.
//!
//! Per command: pipes for stdin/stdout/stderr and a status pipe; a *keeper* process
//! (`PR_SET_CHILD_SUBREAPER`, non-dumpable like the supervisor) forks the command's process
//! and reaps it and every orphan of its subtree, reporting the main process's wait status
//! on the status pipe; it exits once its subtree is gone. A KILL request SIGKILLs the
//! keeper's children until it has none (orphans reparent to the keeper, so `setsid` and
//! double-fork escapees are found too), which touches nothing of other commands. Output is
//! cut at the command's limit here: the rest is read and counted, never sent.

#![allow(unsafe_code)]

#[path = "../proto.rs"]
#[allow(dead_code)]
mod proto;
mod pty;

use std::collections::HashMap;
use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, RawFd};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

#[allow(non_camel_case_types)]
type c_int = i32;

#[repr(C)]
struct PollFd {
    fd: c_int,
    events: i16,
    revents: i16,
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: c_int,
}

#[repr(C)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

extern "C" {
    fn fork() -> c_int;
    fn _exit(code: c_int) -> !;
    fn setsid() -> c_int;
    fn signal(sig: c_int, handler: usize) -> usize;
    fn dup2(old: c_int, new: c_int) -> c_int;
    fn close(fd: c_int) -> c_int;
    fn pipe2(fds: *mut c_int, flags: c_int) -> c_int;
    fn read(fd: c_int, buf: *mut u8, n: usize) -> isize;
    fn write(fd: c_int, buf: *const u8, n: usize) -> isize;
    fn poll(fds: *mut PollFd, n: u64, timeout: c_int) -> c_int;
    fn waitpid(pid: c_int, status: *mut c_int, options: c_int) -> c_int;
    fn pthread_sigmask(how: c_int, set: *const [u64; 16], old: *mut [u64; 16]) -> c_int;
    fn sigwaitinfo(set: *const [u64; 16], info: *mut u8) -> c_int;
    fn kill(pid: c_int, sig: c_int) -> c_int;
    fn prctl(option: c_int, a2: u64, a3: u64, a4: u64, a5: u64) -> c_int;
    fn setgroups(n: usize, list: *const u32) -> c_int;
    fn setresuid(r: u32, e: u32, s: u32) -> c_int;
    fn setresgid(r: u32, e: u32, s: u32) -> c_int;
    fn getuid() -> u32;
    fn getgid() -> u32;
    fn syscall(n: i64, ...) -> i64;
    fn sigaction(sig: c_int, act: *const usize, old: *mut usize) -> c_int;
    fn fcntl(fd: c_int, cmd: c_int, ...) -> c_int;
    fn mmap(addr: *mut u8, len: usize, prot: c_int, flags: c_int, fd: c_int, off: i64) -> *mut u8;
    fn mprotect(addr: *mut u8, len: usize, prot: c_int) -> c_int;
    fn munmap(addr: *mut u8, len: usize) -> c_int;
    fn sysconf(name: c_int) -> i64;
    fn open(path: *const i8, flags: c_int, ...) -> c_int;
    fn pread(fd: c_int, buf: *mut u8, n: usize, off: i64) -> isize;
    fn pwrite(fd: c_int, buf: *const u8, n: usize, off: i64) -> isize;
    fn __errno_location() -> *mut c_int;
}

const O_RDWR: c_int = 2;
const PROT_NONE: c_int = 0;
const PROT_READ: c_int = 1;
const PROT_WRITE: c_int = 2;
const MAP_PRIVATE: c_int = 0x02;
const MAP_ANONYMOUS: c_int = 0x20;
const MAP_STACK: c_int = 0x20000;
const SC_PAGESIZE: c_int = 30;
const O_CLOEXEC: c_int = 0o2000000;
const O_NONBLOCK: c_int = 0o4000;
const F_GETFL: c_int = 3;
const F_SETFL: c_int = 4;
const F_DUPFD_CLOEXEC: c_int = 1030;
const POLLIN: i16 = 1;
const POLLOUT: i16 = 4;
const EINTR: c_int = 4;
const EAGAIN: c_int = 11;
const ECHILD: c_int = 10;
const EACCES: c_int = 13;
const ENOEXEC: c_int = 8;
const EPERM: c_int = 1;
const ENOENT: c_int = 2;
const EIO: c_int = 5;
const E2BIG: c_int = 7;
const ENOMEM: c_int = 12;
const EFAULT: c_int = 14;
const ENODEV: c_int = 19;
const ENOTDIR: c_int = 20;
const EISDIR: c_int = 21;
const EINVAL: c_int = 22;
const ETXTBSY: c_int = 26;
const ENAMETOOLONG: c_int = 36;
const ELOOP: c_int = 40;
const ELIBBAD: c_int = 80;
const ETIMEDOUT: c_int = 110;
const ESTALE: c_int = 116;
const SIGKILL: c_int = 9;
const SIGCONT: c_int = 18;
const WALL: c_int = 0x4000_0000;
const WNOHANG: c_int = 1;
const PR_SET_DUMPABLE: c_int = 4;
const PR_SET_CHILD_SUBREAPER: c_int = 36;
const PR_CAP_AMBIENT: c_int = 47;
const PR_CAPBSET_DROP: c_int = 24;
const PR_CAPBSET_READ: c_int = 23;
const PR_CAP_AMBIENT_CLEAR_ALL: u64 = 4;
const SYS_CAPSET: i64 = 126;
const CLONE_VM: c_int = 0x100;
const CLONE_VFORK: c_int = 0x4000;
const SIGCHLD: c_int = 17;
/// Stack of the command's vforked child (it runs `command_child` up to the exec).
const CHILD_STACK_BYTES: usize = 64 * 1024;
const SYS_CLOSE_RANGE: i64 = 436;
const CAP_VERSION_3: u32 = 0x2008_0522;

/// The system calls of a keeper and of a command's process before its exec. Both share the
/// supervisor's memory (`CLONE_VM`) and its thread-local storage, errno among it, so none
/// of these goes through a libc wrapper that writes errno or takes a lock: each returns
/// the kernel's result, `-errno` on failure. On architectures without the raw calls here
/// a keeper is a copy of the supervisor (see [`KEEPER_SHARES_MEMORY`]) and these are
/// libc's calls, whose errno is the copy's own.
mod sys {
    #[allow(non_camel_case_types)]
    type c_int = i32;

    /// Whether a keeper shares the supervisor's memory (`CLONE_VM`: no page tables to copy,
    /// no copy-on-write faults, nothing to tear down) or is a copy of it.
    ///
    /// What sharing costs (known, not fixed): the kernel's OOM killer treats every process
    /// of one memory as one. A *root* command can raise a keeper's `/proc/K/oom_score_adj`
    /// (a non-dumpable process's `/proc` files belong to root of its memory's user
    /// namespace, mode 0644, and raising the value needs no capability; lowering it below
    /// its floor needs `CAP_SYS_RESOURCE`, which no command has). The kernel applies the new
    /// value to every process sharing that memory (`__set_oom_adj`), the supervisor
    /// included, and an OOM kill of one kills them all (`__oom_kill_process`). The raise
    /// does not carry over: before each keeper starts the supervisor puts its own value
    /// back ([`super::OomScore`]), which the kernel applies to every keeper too. Until the
    /// next command starts, under
    /// memory pressure (the machine's memory limit, or the host's) such a command can make
    /// its own machine's supervisor the OOM killer's pick: that machine ends (its runs fail
    /// as with a supervisor gone), no other machine or host process is touched, and nothing
    /// runs with more than it had. Other accounts cannot (the file is not theirs); on docker
    /// a root command can kill the supervisor outright anyway (`CAP_KILL`). Closing it would
    /// take keepers that are copies (a page-table copy per command, what sharing removed) or
    /// keepers hidden from the machine's `/proc` (a `hidepid` mount of the backend's).
    pub const KEEPER_SHARES_MEMORY: bool = cfg!(target_arch = "x86_64");

    #[cfg(target_arch = "x86_64")]
    mod nr {
        pub const WRITE: usize = 1;
        pub const CLOSE: usize = 3;
        pub const RT_SIGACTION: usize = 13;
        pub const RT_SIGPROCMASK: usize = 14;
        pub const CLONE: usize = 56;
        pub const EXECVE: usize = 59;
        pub const WAIT4: usize = 61;
        pub const FCNTL: usize = 72;
        pub const CHDIR: usize = 80;
        pub const SETSID: usize = 112;
        pub const SETGROUPS: usize = 116;
        pub const SETRESUID: usize = 117;
        pub const SETRESGID: usize = 119;
        pub const CAPSET: usize = 126;
        pub const PRCTL: usize = 157;
        pub const EXIT_GROUP: usize = 231;
        pub const DUP3: usize = 292;
        pub const PRLIMIT64: usize = 302;
        pub const CLOSE_RANGE: usize = 436;
        pub const PREAD64: usize = 17;
        pub const PWRITE64: usize = 18;
        pub const OPENAT: usize = 257;
    }

    #[cfg(target_arch = "x86_64")]
    unsafe fn raw(n: usize, a: usize, b: usize, c: usize, d: usize, e: usize) -> isize {
        let ret: isize;
        core::arch::asm!(
            "syscall",
            inlateout("rax") n as isize => ret,
            in("rdi") a,
            in("rsi") b,
            in("rdx") c,
            in("r10") d,
            in("r8") e,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
        ret
    }

    #[cfg(not(target_arch = "x86_64"))]
    extern "C" {
        fn __errno_location() -> *mut c_int;
    }

    /// libc's result as the kernel's: `-errno` on failure.
    #[cfg(not(target_arch = "x86_64"))]
    unsafe fn ret(r: i64) -> isize {
        if r < 0 {
            -(*__errno_location()) as isize
        } else {
            r as isize
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    mod libc {
        #[allow(non_camel_case_types)]
        type c_int = i32;
        extern "C" {
            pub fn write(fd: c_int, buf: *const u8, n: usize) -> isize;
            pub fn close(fd: c_int) -> c_int;
            pub fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int;
            pub fn fcntl(fd: c_int, cmd: c_int, ...) -> c_int;
            pub fn setsid() -> c_int;
            pub fn syscall(n: i64, ...) -> i64;
            pub fn prctl(option: c_int, a2: u64, a3: u64, a4: u64, a5: u64) -> c_int;
            pub fn prlimit(pid: c_int, resource: c_int, new: *const u64, old: *mut u64) -> c_int;
            pub fn chdir(path: *const i8) -> c_int;
            pub fn execve(path: *const i8, argv: *const *const i8, envp: *const *const i8) -> c_int;
            pub fn waitpid(pid: c_int, status: *mut c_int, options: c_int) -> c_int;
            pub fn _exit(code: c_int) -> !;
            pub fn signal(sig: c_int, handler: usize) -> usize;
            pub fn pthread_sigmask(how: c_int, set: *const [u64; 16], old: *mut [u64; 16]) -> c_int;
            pub fn clone(f: extern "C" fn(*mut u8) -> c_int, stack: *mut u8, flags: c_int, arg: *mut u8, ...) -> c_int;
            pub fn setgroups(n: usize, list: *const u32) -> c_int;
            pub fn setresuid(r: u32, e: u32, s: u32) -> c_int;
            pub fn setresgid(r: u32, e: u32, s: u32) -> c_int;
            pub fn open(path: *const i8, flags: c_int, ...) -> c_int;
            pub fn pread(fd: c_int, buf: *mut u8, n: usize, off: i64) -> isize;
            pub fn pwrite(fd: c_int, buf: *const u8, n: usize, off: i64) -> isize;
        }
    }

    /// `open(path, O_RDWR | O_CLOEXEC)`: an fd, or `-errno`.
    pub unsafe fn open_rdwr(path: *const i8) -> isize {
        const FLAGS: c_int = 2 | 0o2000000;
        #[cfg(target_arch = "x86_64")]
        return raw(nr::OPENAT, -100isize as usize, path as usize, FLAGS as usize, 0, 0);
        #[cfg(not(target_arch = "x86_64"))]
        return ret(libc::open(path, FLAGS) as i64);
    }

    /// `pread(fd, buf, n, 0)`.
    pub unsafe fn pread0(fd: c_int, buf: *mut u8, n: usize) -> isize {
        #[cfg(target_arch = "x86_64")]
        return raw(nr::PREAD64, fd as usize, buf as usize, n, 0, 0);
        #[cfg(not(target_arch = "x86_64"))]
        return ret(libc::pread(fd, buf, n, 0) as i64);
    }

    /// `pwrite(fd, buf, n, 0)`.
    pub unsafe fn pwrite0(fd: c_int, buf: *const u8, n: usize) -> isize {
        #[cfg(target_arch = "x86_64")]
        return raw(nr::PWRITE64, fd as usize, buf as usize, n, 0, 0);
        #[cfg(not(target_arch = "x86_64"))]
        return ret(libc::pwrite(fd, buf, n, 0) as i64);
    }

    pub unsafe fn write(fd: c_int, buf: *const u8, n: usize) -> isize {
        #[cfg(target_arch = "x86_64")]
        return raw(nr::WRITE, fd as usize, buf as usize, n, 0, 0);
        #[cfg(not(target_arch = "x86_64"))]
        return ret(libc::write(fd, buf, n) as i64);
    }

    pub unsafe fn close(fd: c_int) -> isize {
        #[cfg(target_arch = "x86_64")]
        return raw(nr::CLOSE, fd as usize, 0, 0, 0, 0);
        #[cfg(not(target_arch = "x86_64"))]
        return ret(libc::close(fd) as i64);
    }

    /// `old` at fd `new`, without close-on-exec (also when they are the same fd).
    pub unsafe fn dup_to(old: c_int, new: c_int) -> isize {
        const F_SETFD: usize = 2;
        if old == new {
            #[cfg(target_arch = "x86_64")]
            return raw(nr::FCNTL, old as usize, F_SETFD, 0, 0, 0);
            #[cfg(not(target_arch = "x86_64"))]
            return ret(libc::fcntl(old, F_SETFD as c_int, 0) as i64);
        }
        #[cfg(target_arch = "x86_64")]
        return raw(nr::DUP3, old as usize, new as usize, 0, 0, 0);
        #[cfg(not(target_arch = "x86_64"))]
        return ret(libc::dup3(old, new, 0) as i64);
    }

    pub unsafe fn setsid() -> isize {
        #[cfg(target_arch = "x86_64")]
        return raw(nr::SETSID, 0, 0, 0, 0, 0);
        #[cfg(not(target_arch = "x86_64"))]
        return ret(libc::setsid() as i64);
    }

    /// Unblocks every signal of this thread.
    pub unsafe fn unblock_signals() -> isize {
        const SIG_SETMASK: usize = 2;
        #[cfg(target_arch = "x86_64")]
        {
            let empty = 0u64;
            raw(nr::RT_SIGPROCMASK, SIG_SETMASK, &empty as *const u64 as usize, 0, 8, 0)
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let empty = [0u64; 16];
            ret(libc::pthread_sigmask(SIG_SETMASK as c_int, &empty, std::ptr::null_mut()) as i64)
        }
    }

    /// Sets `sig`'s disposition to the default.
    pub unsafe fn default_signal(sig: c_int) -> isize {
        #[cfg(target_arch = "x86_64")]
        {
            // The kernel's struct: handler (SIG_DFL), flags, restorer, mask.
            let act = [0u64; 4];
            raw(nr::RT_SIGACTION, sig as usize, act.as_ptr() as usize, 0, 8, 0)
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            libc::signal(sig, 0);
            0
        }
    }

    pub unsafe fn set_rlimit(resource: u32, value: u64) -> isize {
        let limit = [value, value];
        #[cfg(target_arch = "x86_64")]
        return raw(nr::PRLIMIT64, 0, resource as usize, limit.as_ptr() as usize, 0, 0);
        #[cfg(not(target_arch = "x86_64"))]
        return ret(libc::prlimit(0, resource as c_int, limit.as_ptr(), std::ptr::null_mut()) as i64);
    }

    pub unsafe fn prctl(option: c_int, a2: u64, a3: u64, a4: u64, a5: u64) -> isize {
        #[cfg(target_arch = "x86_64")]
        return raw(nr::PRCTL, option as usize, a2 as usize, a3 as usize, a4 as usize, a5 as usize);
        #[cfg(not(target_arch = "x86_64"))]
        return ret(libc::prctl(option, a2, a3, a4, a5) as i64);
    }

    pub unsafe fn setgroups(n: usize, list: *const u32) -> isize {
        #[cfg(target_arch = "x86_64")]
        return raw(nr::SETGROUPS, n, list as usize, 0, 0, 0);
        // The raw call, not libc's all-threads broadcast (a copy has one thread anyway).
        #[cfg(not(target_arch = "x86_64"))]
        return ret(libc::setgroups(n, list) as i64);
    }

    /// The raw `setresgid(2)` of this process only (libc's broadcasts to every thread).
    pub unsafe fn setresgid(id: u32) -> isize {
        #[cfg(target_arch = "x86_64")]
        return raw(nr::SETRESGID, id as usize, id as usize, id as usize, 0, 0);
        #[cfg(not(target_arch = "x86_64"))]
        return ret(libc::setresgid(id, id, id) as i64);
    }

    /// The raw `setresuid(2)` of this process only.
    pub unsafe fn setresuid(id: u32) -> isize {
        #[cfg(target_arch = "x86_64")]
        return raw(nr::SETRESUID, id as usize, id as usize, id as usize, 0, 0);
        #[cfg(not(target_arch = "x86_64"))]
        return ret(libc::setresuid(id, id, id) as i64);
    }

    /// `capset(2)` of this thread: `kept` (capabilities 0-31) effective and permitted,
    /// nothing inheritable, nothing of 32-63.
    pub unsafe fn capset(kept: u32) -> isize {
        const CAP_VERSION_3: u32 = 0x2008_0522;
        let header = [CAP_VERSION_3, 0u32];
        // effective, permitted, inheritable; twice (capabilities 0-31, then 32-63).
        let data = [kept, kept, 0u32, 0, 0, 0];
        #[cfg(target_arch = "x86_64")]
        return raw(nr::CAPSET, header.as_ptr() as usize, data.as_ptr() as usize, 0, 0, 0);
        #[cfg(not(target_arch = "x86_64"))]
        return ret(libc::syscall(super::SYS_CAPSET, header.as_ptr(), data.as_ptr()));
    }

    pub unsafe fn chdir(path: *const i8) -> isize {
        #[cfg(target_arch = "x86_64")]
        return raw(nr::CHDIR, path as usize, 0, 0, 0, 0);
        #[cfg(not(target_arch = "x86_64"))]
        return ret(libc::chdir(path) as i64);
    }

    /// Returns only on failure: `-errno`.
    pub unsafe fn execve(path: *const i8, argv: *const *const i8, envp: *const *const i8) -> isize {
        #[cfg(target_arch = "x86_64")]
        return raw(nr::EXECVE, path as usize, argv as usize, envp as usize, 0, 0);
        #[cfg(not(target_arch = "x86_64"))]
        return ret(libc::execve(path, argv, envp) as i64);
    }

    /// `wait4(-1, status, __WALL)`: a pid, or `-errno`.
    pub unsafe fn wait_any(status: &mut c_int) -> isize {
        const WALL: usize = 0x4000_0000;
        #[cfg(target_arch = "x86_64")]
        return raw(nr::WAIT4, -1isize as usize, status as *mut c_int as usize, WALL, 0, 0);
        #[cfg(not(target_arch = "x86_64"))]
        return ret(libc::waitpid(-1, status, WALL as c_int) as i64);
    }

    pub unsafe fn close_range(first: u32, last: u32) -> isize {
        #[cfg(target_arch = "x86_64")]
        return raw(nr::CLOSE_RANGE, first as usize, last as usize, 0, 0, 0);
        #[cfg(not(target_arch = "x86_64"))]
        return ret(libc::syscall(super::SYS_CLOSE_RANGE, first, last, 0u32));
    }

    /// Ends this process (its thread group: a keeper or a command's process is one).
    pub unsafe fn exit(code: c_int) -> ! {
        #[cfg(target_arch = "x86_64")]
        {
            raw(nr::EXIT_GROUP, code as usize, 0, 0, 0, 0);
            core::arch::asm!("ud2", options(noreturn));
        }
        #[cfg(not(target_arch = "x86_64"))]
        libc::_exit(code)
    }

    /// `clone(2)` running `f(arg)` on the stack ending at `stack_top` (16-byte aligned) in
    /// the child, which exits with its result; `flags` as the kernel takes them (the exit
    /// signal in the low byte). Returns the child's pid or `-errno`.
    ///
    /// # Safety
    /// With `CLONE_VM`, the child runs in this process's memory: `f` may make only the
    /// calls of this module, on data that outlives its use.
    pub unsafe fn clone(flags: usize, stack_top: *mut u8, f: extern "C" fn(*mut u8) -> c_int, arg: *mut u8) -> isize {
        #[cfg(target_arch = "x86_64")]
        {
            let ret: isize;
            // The child starts on `stack_top` with the registers of this call: it calls
            // `f(arg)` (kept in callee-saved registers) and exits with its result.
            core::arch::asm!(
                "syscall",
                "test rax, rax",
                "jnz 2f",
                "xor ebp, ebp",
                "mov rdi, r13",
                "call r12",
                "mov edi, eax",
                "mov eax, {exit}",
                "syscall",
                "ud2",
                "2:",
                exit = const nr::EXIT_GROUP,
                inlateout("rax") nr::CLONE as isize => ret,
                in("rdi") flags,
                in("rsi") stack_top,
                in("rdx") 0usize,
                in("r10") 0usize,
                in("r8") 0usize,
                in("r12") f,
                in("r13") arg,
                lateout("rcx") _,
                lateout("r11") _,
            );
            ret
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let exit_signal = (flags & 0xff) as c_int;
            ret(libc::clone(f, stack_top, (flags as c_int & !0xff) | exit_signal, arg) as i64)
        }
    }
}

fn errno() -> c_int {
    // SAFETY: glibc's thread-local errno.
    unsafe { *__errno_location() }
}

/// Writes all of `b` to `fd` (raw system calls only: also for keepers and commands'
/// processes, see [`sys`]).
fn raw_write_all(fd: c_int, mut b: &[u8]) {
    while !b.is_empty() {
        // SAFETY: writing from a live slice.
        let n = unsafe { sys::write(fd, b.as_ptr(), b.len()) };
        if n == -(EINTR as isize) {
            continue;
        }
        if n <= 0 {
            return;
        }
        b = &b[n as usize..];
    }
}

fn pipe_cloexec() -> std::io::Result<(RawFd, RawFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two ints.
    if unsafe { pipe2(fds.as_mut_ptr(), O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((fds[0], fds[1]))
}

fn close_fd(fd: RawFd) {
    if fd >= 0 {
        // SAFETY: closing an fd this code owns.
        unsafe { close(fd) };
    }
}

fn set_nonblocking(fd: RawFd) {
    // SAFETY: fcntl on an fd this code owns.
    unsafe {
        let fl = fcntl(fd, F_GETFL);
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    }
}

/// Sends whole frames to the host, one writer at a time.
struct Out {
    file: Mutex<File>,
}

impl Out {
    fn send(&self, kind: u8, id: u32, payload: &[u8]) {
        let frame = proto::frame(kind, id, payload);
        let mut f = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if f.write_all(&frame).is_err() {
            // The host is gone: the machine ends with its PID 1.
            // SAFETY: _exit ends the process.
            unsafe { _exit(0) }
        }
    }

    fn fail(&self, id: u32, kind: u8, message: &str) {
        let f = proto::Fail {
            kind,
            message: message.to_string(),
        };
        self.send(proto::FAIL, id, &f.encode());
    }
}

/// What the control thread hands a command's thread.
#[derive(Default)]
struct Inbox {
    stdin: Vec<u8>,
    stdin_end: bool,
    kill: bool,
    /// Output credit granted by [`proto::CREDIT`] frames since the command's thread last
    /// took it.
    credit: u64,
}

struct Cmd {
    wake_w: RawFd,
    inbox: Mutex<Inbox>,
}

impl Cmd {
    fn poke(&self) {
        raw_write_all(self.wake_w, b"x");
    }
}

impl Drop for Cmd {
    fn drop(&mut self) {
        close_fd(self.wake_w);
    }
}

type Commands = Arc<Mutex<HashMap<u32, Arc<Cmd>>>>;

/// Knows which children are keepers.
struct Children {
    /// The keepers not reaped yet, by pid, with the job each runs on (freed when it is
    /// reaped). Held across each keeper's start until its pid is in, so [`kill_strays`]
    /// never takes a keeper being born for a stray.
    keepers: Mutex<HashMap<c_int, Box<KeeperJob>>>,
}

/// Reaps every child of the supervisor. With `--reap-strays` (or as PID 1), after each reaped child
/// that may leave strays (a keeper killed by a signal, or a stray) kills the strays: a keeper's children
/// reparent to the supervisor (a child subreaper) before the keeper can be reaped, so a
/// killed keeper's subtree is found at once, and each stray killed is another reaped child,
/// whose own children are found after it.
///
/// It sleeps in `sigwaitinfo(SIGCHLD)` (blocked in every thread since the start, so an exit
/// that comes before the wait stays pending and ends it at once) whenever no child is left
/// to reap: a new keeper needs no wake-up of its own (a condvar notify per command cost a
/// futex wake and a reaper run, an IPI in a VM, on every command's start).
fn reaper(children: Arc<Children>) {
    loop {
        let mut status = 0;
        // SAFETY: waitpid with a valid status pointer.
        let r = unsafe { waitpid(-1, &mut status, WALL | WNOHANG) };
        if r > 0 {
            let job = children.keepers.lock().unwrap_or_else(|e| e.into_inner()).remove(&r);
            let keeper = job.is_some();
            if let Some(job) = job {
                if sys::KEEPER_SHARES_MEMORY && !job.started.load(std::sync::atomic::Ordering::Acquire) {
                    // Killed before its command's process exec'd, which may still run on
                    // this memory: never freed.
                    std::mem::forget(job);
                }
            }
            // A keeper that exited on its own had no child left (it exits at ECHILD), so
            // only a killed keeper or a stray can leave strays.
            if settings().reap_strays && (!keeper || status & 0x7f != 0) {
                kill_strays(&children);
            }
        } else if r == 0 || errno() == ECHILD {
            // Children that have not ended, or none: the next SIGCHLD says one ended.
            wait_sigchld();
        }
    }
}

/// The signal set holding SIGCHLD alone (glibc's `sigset_t`: bit N-1 for signal N).
fn sigchld_set() -> [u64; 16] {
    let mut set = [0u64; 16];
    set[0] = 1 << (SIGCHLD - 1);
    set
}

/// Blocks SIGCHLD in this thread and so in every thread it starts (they inherit its mask),
/// the reaper's included: a child's exit stays pending until [`wait_sigchld`] takes it.
/// Keepers inherit it too (their `wait4` does not care); each command's process unblocks
/// every signal before its exec.
fn block_sigchld() {
    const SIG_BLOCK: c_int = 0;
    let set = sigchld_set();
    // SAFETY: a valid set; no old mask asked for.
    unsafe { pthread_sigmask(SIG_BLOCK, &set, std::ptr::null_mut()) };
}

/// Waits until a SIGCHLD is pending (a child of the supervisor ended, stopped or went on)
/// and takes it; returns at once when one already is.
fn wait_sigchld() {
    let set = sigchld_set();
    let mut info = [0u64; 16];
    // SAFETY: a valid set and a siginfo_t-sized buffer (128 bytes).
    unsafe { sigwaitinfo(&set, info.as_mut_ptr().cast()) };
}

/// SIGKILLs every child of the supervisor (of any of its threads: a child belongs to the
/// thread that forked it, an orphan to any live thread) that is not a keeper. Such a child
/// can only be an orphan of a keeper that was killed (a root command has `CAP_KILL`), or a
/// process such an orphan made; none of it may outlive its lost command.
fn kill_strays(children: &Children) {
    let keepers = children.keepers.lock().unwrap_or_else(|e| e.into_inner());
    let kill_stray = |pid: c_int| {
        if !keepers.contains_key(&pid) {
            // SAFETY: kill(2) of a child of this process not reaped yet (the reaper
            // thread, which alone reaps, is here), so the pid cannot have been reused.
            unsafe { kill(pid, SIGKILL) };
        }
    };
    if std::process::id() == 1 {
        // PID 1 (local): its own /proc/1 is masked from the machine, itself included, so
        // its children are found by their parent, in every process's stat.
        let Ok(procs) = std::fs::read_dir("/proc") else {
            return;
        };
        let mut text = String::new();
        for entry in procs.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse::<c_int>().ok()) else {
                continue;
            };
            text.clear();
            if pid == 1 || File::open(entry.path().join("stat")).and_then(|mut f| f.read_to_string(&mut text)).is_err() {
                continue;
            }
            // `pid (comm) S ppid ...`: the parent is the second field after the last ')'.
            let ppid = text.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1));
            if ppid == Some("1") {
                kill_stray(pid);
            }
        }
        return;
    }
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return;
    };
    let mut text = String::new();
    for task in tasks.flatten() {
        text.clear();
        let path = task.path().join("children");
        if File::open(&path).and_then(|mut f| f.read_to_string(&mut text)).is_err() {
            continue;
        }
        for pid in text.split_whitespace().filter_map(|p| p.parse::<c_int>().ok()) {
            kill_stray(pid);
        }
    }
}

/// Everything the forked children need, built before the fork (no allocation after it).
struct Exec {
    /// Candidate program paths (argv[0] itself, or each `PATH` entry joined with it).
    candidates: Vec<CString>,
    argv: Vec<CString>,
    env: Vec<CString>,
    cwd: CString,
    user: Option<(u32, u32)>,
    /// Supplementary groups set with `user`.
    groups: Vec<u32>,
    /// The supervisor's own (uid, gid) at its start, which a command runs as by default.
    own: (u32, u32),
    /// Capabilities still in the bounding set that a command must not keep (what the
    /// supervisor's drop at its start left; normally none).
    bounding_left: u64,
    /// Signals (bit N for signal N) whose disposition is not the default in the supervisor.
    non_default_signals: u64,
    rlimits: Vec<(u32, u64)>,
}

fn nul_free(b: &[u8]) -> Option<CString> {
    CString::new(b.to_vec()).ok()
}

impl Exec {
    fn new(start: &proto::Start) -> Result<Exec, String> {
        let argv: Vec<CString> = start
            .argv
            .iter()
            .map(|a| nul_free(a))
            .collect::<Option<_>>()
            .ok_or("an argument holds a NUL byte")?;
        let env: Vec<CString> = start
            .env
            .iter()
            .map(|a| nul_free(a))
            .collect::<Option<_>>()
            .ok_or("an environment entry holds a NUL byte")?;
        let program = start.argv.first().ok_or("argv is empty")?;
        if program.is_empty() {
            return Err("the program name is empty".into());
        }
        let cwd = nul_free(&start.cwd).ok_or("the cwd holds a NUL byte")?;
        let candidates = if program.contains(&b'/') {
            vec![argv[0].clone()]
        } else {
            let path = start
                .env
                .iter()
                .find_map(|e| e.strip_prefix(b"PATH="))
                .unwrap_or(b"/usr/local/bin:/usr/bin:/bin");
            path.split(|&b| b == b':')
                .map(|dir| {
                    let mut p = if dir.is_empty() { b".".to_vec() } else { dir.to_vec() };
                    p.push(b'/');
                    p.extend_from_slice(program);
                    CString::new(p).expect("no NUL: checked above")
                })
                .collect()
        };
        Ok(Exec {
            candidates,
            argv,
            env,
            cwd,
            user: start.user,
            groups: start.groups.clone(),
            own: settings().own,
            bounding_left: settings().bounding_left,
            non_default_signals: settings().non_default_signals,
            rlimits: start.rlimits.clone(),
        })
    }
}

fn null_terminated(v: &[CString]) -> Vec<*const i8> {
    v.iter()
        .map(|c| c.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// Everything a keeper and its command's process read, alive until the keeper was reaped
/// (both run in the supervisor's memory: [`sys::KEEPER_SHARES_MEMORY`]). Built before the
/// keeper starts; the supervisor's threads never touch it after that.
struct KeeperJob {
    ex: Exec,
    stdio: [RawFd; 3],
    status_w: RawFd,
    argv: Vec<*const i8>,
    envp: Vec<*const i8>,
    /// `/bin/sh`, a placeholder for the script, the arguments: a script without `#!`.
    sh_argv: Vec<*const i8>,
    /// The keeper's stack and the command process's, each above a guard page.
    stacks: Stacks,
    /// [`Stacks::child_top`] of `stacks`, read by the keeper.
    child_top: *mut u8,
    /// Set by the keeper once its command's process exec'd or exited: from then on only
    /// the keeper (on its own stack) uses this job. A keeper killed before (only a command
    /// with `CAP_KILL` can) leaves a process that may still run on it, so such a job is
    /// never freed. Shared with the command's runner, whose kill waits for it (see
    /// [`kill_scope`]).
    started: Arc<std::sync::atomic::AtomicBool>,
}

// SAFETY: the raw pointers point into the job's own strings, which move with it.
unsafe impl Send for KeeperJob {}

/// Stack of a keeper (its loop and its account switch; it makes raw system calls only).
const KEEPER_STACK_BYTES: usize = 32 * 1024;

/// A keeper's stack ([`KEEPER_STACK_BYTES`]) and its command process's
/// ([`CHILD_STACK_BYTES`]) in one private anonymous mapping, each right above a
/// `PROT_NONE` guard page: `[guard][keeper][guard][child]`. Both run in the supervisor's
/// memory ([`sys::KEEPER_SHARES_MEMORY`]), so an overflow without the guard would write
/// into whatever lies below (the heap, the other stack); with it the overflowing process
/// faults (SIGSEGV, which it cannot take on the overflowed stack: the kernel kills it — a
/// keeper has no alternate signal stack, `clone(CLONE_VM)` clears it) and the supervisor's
/// memory is untouched. Mappings are reused through [`STACK_CACHE`] (a fresh `mmap` and two
/// `mprotect` per command would cost more than the rest of the keeper's start).
struct Stacks {
    base: *mut u8,
    len: usize,
    page: usize,
}

// SAFETY: a mapping owned by this value alone; whoever holds it may use it.
unsafe impl Send for Stacks {}

/// Spare [`Stacks`] of reaped keepers, at most [`STACK_CACHE_MAX`].
static STACK_CACHE: Mutex<Vec<Stacks>> = Mutex::new(Vec::new());

/// The most spare stack mappings kept (about 100 KiB of address space each, resident only
/// where a keeper touched them).
const STACK_CACHE_MAX: usize = 32;

impl Stacks {
    /// A spare mapping, or a new one (`mmap`, then `mprotect` of both guard pages).
    ///
    /// # Errors
    /// The `mmap(2)` or `mprotect(2)` failure (`ENOMEM`: the address space or map count
    /// limit).
    fn take() -> std::io::Result<Stacks> {
        if let Some(s) = STACK_CACHE.lock().unwrap_or_else(|e| e.into_inner()).pop() {
            return Ok(s);
        }
        // SAFETY: sysconf has no preconditions.
        let page = match unsafe { sysconf(SC_PAGESIZE) } {
            p if p > 0 => p as usize,
            _ => 4096,
        };
        let round = |n: usize| n.div_ceil(page) * page;
        let len = 2 * page + round(KEEPER_STACK_BYTES) + round(CHILD_STACK_BYTES);
        // SAFETY: a new private anonymous mapping; nothing else refers to it.
        let base = unsafe {
            mmap(std::ptr::null_mut(), len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0)
        };
        if base as isize == -1 {
            return Err(std::io::Error::last_os_error());
        }
        let stacks = Stacks { base: base.cast(), len, page };
        let second_guard = page + round(KEEPER_STACK_BYTES);
        for at in [0, second_guard] {
            // SAFETY: a page of the mapping just made.
            if unsafe { mprotect(stacks.base.add(at).cast(), page, PROT_NONE) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(stacks)
    }

    /// The top of the keeper's stack (16-byte aligned).
    fn keeper_top(&self) -> *mut u8 {
        let round = KEEPER_STACK_BYTES.div_ceil(self.page) * self.page;
        // SAFETY: within the mapping (page boundaries are 16-byte aligned).
        unsafe { self.base.add(self.page + round) }
    }

    /// The top of the command process's stack: the end of the mapping.
    fn child_top(&self) -> *mut u8 {
        // SAFETY: one past the end of the mapping.
        unsafe { self.base.add(self.len) }
    }
}

impl Drop for Stacks {
    fn drop(&mut self) {
        let mut cache = STACK_CACHE.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() < STACK_CACHE_MAX {
            cache.push(Stacks { base: self.base, len: self.len, page: self.page });
            return;
        }
        drop(cache);
        // SAFETY: the mapping is this value's and nothing runs on it any more (a job is
        // dropped only once its keeper was reaped and its command's process exec'd).
        unsafe { munmap(self.base.cast(), self.len) };
    }
}

/// The command's process, in the keeper's `CLONE_VM | CLONE_VFORK` child: stdio, session,
/// limits, cwd, user, capabilities, default signals, then exec. Never returns.
///
/// # Safety
/// `job` is the keeper's live job; only [`sys`] calls (this process shares the keeper's
/// memory and thread-local storage).
unsafe fn command_child(job: *mut KeeperJob) -> ! {
    let ex = &(*job).ex;
    for (i, &fd) in (*job).stdio.iter().enumerate() {
        if sys::dup_to(fd, i as c_int) < 0 {
            sys::exit(126);
        }
    }
    sys::setsid();
    sys::unblock_signals();
    // Default dispositions: only those the supervisor changed (read at its start: the
    // ignored SIGPIPE and std's fault handlers) differ from the default.
    for sig in 1..32 {
        if ex.non_default_signals & (1 << sig) != 0 {
            sys::default_signal(sig);
        }
    }
    for &(resource, value) in &ex.rlimits {
        sys::set_rlimit(resource, value);
    }
    // No capability can come back: the supervisor emptied its bounding set (but for
    // `--keep-caps`) at its start, which every keeper and command inherits; whatever that
    // drop left (it needs CAP_SETPCAP) is dropped here, while CAP_SETPCAP is still
    // effective (before the account switch clears it).
    for cap in 0..64u64 {
        if ex.bounding_left & (1 << cap) != 0 {
            sys::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
        }
    }
    // The keeper runs as its own account: the command gets the requested one, or the
    // supervisor's (`ex.own`) when none was asked for.
    let (uid, gid) = ex.user.unwrap_or(ex.own);
    let groups_ok = ex.user.is_none() || sys::setgroups(ex.groups.len(), ex.groups.as_ptr()) == 0;
    if !groups_ok || sys::setresgid(gid) != 0 || sys::setresuid(uid) != 0 {
        raw_write_all(2, b"shellbox: cannot switch user\n");
        sys::exit(126);
    }
    // No capability survives into the command (no_new_privs keeps exec from granting any).
    sys::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    if sys::capset(0) != 0 {
        sys::exit(126);
    }
    if sys::chdir(ex.cwd.as_ptr()) != 0 {
        raw_write_all(2, b"sh: cd: can't cd to ");
        raw_write_all(2, ex.cwd.as_bytes());
        raw_write_all(2, b"\n");
        sys::exit(2);
    }
    let argv = (*job).argv.as_ptr();
    let envp = (*job).envp.as_ptr();
    let sh_argv = (*job).sh_argv.as_mut_ptr();
    let mut denied = false;
    let mut failed = 0;
    for c in &ex.candidates {
        match -sys::execve(c.as_ptr(), argv, envp) as c_int {
            ENOEXEC => {
                // POSIX: a file the kernel cannot run is a shell script.
                *sh_argv.add(1) = c.as_ptr();
                match -sys::execve(c"/bin/sh".as_ptr(), sh_argv, envp) as c_int {
                    E2BIG => failed = E2BIG,
                    _ => denied = true,
                }
            }
            EACCES => denied = true,
            // Not this candidate: the search goes on (as execvp's does).
            ENOENT | ENOTDIR | ESTALE | ENODEV | ETIMEDOUT => {}
            // The file was found but cannot be run: the search ends here.
            e => failed = e,
        }
        if failed != 0 {
            break;
        }
    }
    let (code, message) = exec_failure(failed, denied);
    raw_write_all(2, b"sh: ");
    raw_write_all(2, ex.argv[0].as_bytes());
    raw_write_all(2, b": ");
    raw_write_all(2, message);
    raw_write_all(2, b"\n");
    sys::exit(code)
}

/// The exit status and message of a command whose program could not be run, as a shell
/// reports it (bash's `shell_execve`, dash's `exerror`): 127 `not found` when no candidate
/// of the search exists (`ENOENT` and the errors glibc's `execvp` also passes over), 126 otherwise — `Permission denied` for a
/// file that is not executable (`EACCES`), `Argument list too long` when `execve(2)`
/// refused the argv and environment (`E2BIG`: a string over Linux's `MAX_ARG_STRLEN`, or
/// the whole over `ARG_MAX`, a quarter of the stack limit), and the error's own text for
/// the rest (`failed`: the errno that ended the search, 0 for none).
fn exec_failure(failed: c_int, denied: bool) -> (c_int, &'static [u8]) {
    let text: &'static [u8] = match failed {
        0 if denied => return (126, b"Permission denied"),
        0 => return (127, b"not found"),
        E2BIG => b"Argument list too long",
        ETXTBSY => b"Text file busy",
        ENOMEM => b"Cannot allocate memory",
        EISDIR => b"Is a directory",
        EPERM => b"Operation not permitted",
        EINVAL => b"Invalid argument",
        EIO => b"Input/output error",
        ELIBBAD => b"Accessing a corrupted shared library",
        EFAULT => b"Bad address",
        ELOOP => b"Too many levels of symbolic links",
        ENAMETOOLONG => b"File name too long",
        _ => b"cannot execute",
    };
    (126, text)
}

extern "C" fn command_main(arg: *mut u8) -> c_int {
    // SAFETY: `arg` is the keeper's job, alive while the keeper lives (it is suspended
    // until this process execs or exits).
    unsafe { command_child(arg.cast()) }
}

/// The keeper, started by the supervisor with [`sys::clone`] (sharing its memory where
/// [`sys::KEEPER_SHARES_MEMORY`]): becomes the subreaper of the command's subtree, starts
/// the command's process (`CLONE_VM | CLONE_VFORK`, as `posix_spawn` does), reports its
/// wait status on the job's status pipe and reaps until the subtree is gone. Never returns.
extern "C" fn keeper_main(arg: *mut u8) -> c_int {
    let job: *mut KeeperJob = arg.cast();
    // SAFETY: the job lives until this process is reaped; only `sys` calls.
    unsafe {
        sys::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        // Before the account switch: the file of a non-dumpable process is root's.
        keeper_reset_oom_score_adj();
        become_keeper_account();
        let top = (*job).child_top;
        let pid = sys::clone((CLONE_VM | CLONE_VFORK | SIGCHLD) as usize, top, command_main, arg);
        (*job).started.store(true, std::sync::atomic::Ordering::Release);
        // Each account switch (the keeper's, the command's in this memory) reset the
        // memory's dumpable flag to the system's `suid_dumpable`: not dumpable, again.
        sys::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
        // Only the status pipe stays open here, so the command's pipes end when it does.
        let status_w = (*job).status_w;
        if status_w > 0 {
            sys::close_range(0, (status_w - 1) as u32);
        }
        sys::close_range((status_w + 1) as u32, u32::MAX);
        if pid < 0 {
            // The process limit refused the command's process: say so (see `run_command`).
            if pid == -(EAGAIN as isize) {
                raw_write_all(status_w, &KEEPER_FORK_REFUSED.to_ne_bytes());
            }
            sys::exit(1);
        }
        let mut reported = false;
        loop {
            let mut st = 0;
            let r = sys::wait_any(&mut st);
            if r == pid && !reported {
                raw_write_all(status_w, &st.to_ne_bytes());
                sys::close(status_w);
                reported = true;
            } else if r < 0 && r != -(EINTR as isize) {
                sys::exit(0);
            }
        }
    }
}

/// What a keeper reports on its status pipe in place of a wait status (which is never
/// negative) when the process limit refused its command's process (`EAGAIN`).
const KEEPER_FORK_REFUSED: c_int = -EAGAIN;

/// The account keepers run as, which no command runs as: a command cannot signal its
/// keeper (it has neither the keeper's UID nor `CAP_KILL`), so it can neither kill it nor
/// stop it from reporting. `2^31 - 2`, far from any account a host hands out.
const KEEPER_ID: u32 = 0x7fff_fffe;

/// The account the supervisor itself switches to with `--own-account` (where it is not the
/// PID 1 of its PID namespace, so the kernel does not shield it from its commands' signals):
/// `2^31 - 3`, which no command runs as.
const SUPERVISOR_ID: u32 = 0x7fff_fffd;

/// The supervisor's own `/proc/self/oom_score_adj`, opened for writing at start (before it
/// leaves root: the file of a non-dumpable process belongs to root), and the value it had
/// then.
///
/// A root command can raise the supervisor's or a keeper's value (see
/// [`sys::KEEPER_SHARES_MEMORY`]: the file is root's, and raising needs no capability),
/// and every keeper and command started after would inherit it (the kernel copies the
/// value at `fork`). So before each keeper starts, the supervisor puts its own value back
/// ([`reset_oom_score_adj`]; lowering down to the start value needs no capability either,
/// since no command had `CAP_SYS_RESOURCE` to move the floor): a raise never carries over
/// to a later command, its keeper or the supervisor past the next command's start.
struct OomScore {
    fd: c_int,
    start: [u8; 16],
    len: usize,
}

static OOM_SCORE: std::sync::OnceLock<OomScore> = std::sync::OnceLock::new();

/// Opens `/proc/self/oom_score_adj` and reads it (see [`OomScore`]); `None` where `/proc`
/// has no such file or refuses it (nothing to reset then).
///
/// # Safety
/// Plain system calls; call once at start.
unsafe fn open_oom_score_adj() -> Option<OomScore> {
    let fd = open(c"/proc/self/oom_score_adj".as_ptr(), O_RDWR | O_CLOEXEC);
    if fd < 0 {
        return None;
    }
    let mut start = [0u8; 16];
    let n = pread(fd, start.as_mut_ptr(), start.len(), 0);
    if n <= 0 || n as usize >= start.len() {
        close(fd);
        return None;
    }
    Some(OomScore { fd, start, len: n as usize })
}

/// Puts the supervisor's `oom_score_adj` back to its start value when a command changed it
/// (see [`OomScore`]): one `pread`, and a `pwrite` only after a change. Where keepers share
/// the supervisor's memory the kernel applies the write to every keeper too.
fn reset_oom_score_adj() {
    let Some(oom) = OOM_SCORE.get() else {
        return;
    };
    let mut now = [0u8; 16];
    // SAFETY: reads into and writes from local buffers on an fd this process owns.
    unsafe {
        let n = pread(oom.fd, now.as_mut_ptr(), now.len(), 0);
        if n >= 0 && now[..n as usize] == oom.start[..oom.len] {
            return;
        }
        pwrite(oom.fd, oom.start.as_ptr(), oom.len, 0);
    }
}

/// The `oom_score_adj` the first keeper found (see [`keeper_reset_oom_score_adj`]), or
/// `i32::MIN` before.
static KEEPER_OOM_START: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(i32::MIN);

/// Where the supervisor cannot open its own `/proc/self/oom_score_adj` (local: it is the
/// PID 1 of its machine, whose `/proc/1` is masked) and keepers share its memory, a keeper
/// puts the value back itself, before its command starts: the kernel applies a write to
/// every process of the memory (the supervisor and every keeper), and the command inherits
/// the keeper's. The start value is what the first keeper found: no command can have run
/// before the first keeper records it (a keeper records before it starts its command, and
/// a raise needs a command), so whichever keeper records first read the start value. Only
/// calls of [`sys`] (it runs in the supervisor's memory); one `open`, one `pread` and one
/// `close`, and a `pwrite` only after a change.
///
/// # Safety
/// Called by a keeper before its account switch.
unsafe fn keeper_reset_oom_score_adj() {
    use std::sync::atomic::Ordering;
    if !sys::KEEPER_SHARES_MEMORY || OOM_SCORE.get().is_some() {
        return;
    }
    let fd = sys::open_rdwr(c"/proc/self/oom_score_adj".as_ptr());
    if fd < 0 {
        return;
    }
    let fd = fd as c_int;
    let mut buf = [0u8; 16];
    let n = sys::pread0(fd, buf.as_mut_ptr(), buf.len());
    if let Some(now) = (n > 0).then(|| parse_oom_score(&buf[..n as usize])).flatten() {
        match KEEPER_OOM_START.compare_exchange(i32::MIN, now, Ordering::AcqRel, Ordering::Acquire) {
            Err(start) if start != now => {
                let len = format_oom_score(start, &mut buf);
                sys::pwrite0(fd, buf.as_ptr(), len);
            }
            _ => {}
        }
    }
    sys::close(fd);
}

/// An `oom_score_adj` file's text (`-1000` to `1000`, then a newline).
fn parse_oom_score(text: &[u8]) -> Option<i32> {
    let text = text.strip_suffix(b"\n").unwrap_or(text);
    let (neg, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    if digits.is_empty() || digits.len() > 4 {
        return None;
    }
    let mut v = 0i32;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v * 10 + i32::from(d - b'0');
    }
    Some(if neg { -v } else { v })
}

/// Writes `v` (within `-1000..=1000`) in decimal at the start of `buf`; its length.
fn format_oom_score(v: i32, buf: &mut [u8; 16]) -> usize {
    let mut digits = [0u8; 8];
    let mut n = 0;
    let mut u = v.unsigned_abs();
    loop {
        digits[n] = b'0' + (u % 10) as u8;
        n += 1;
        u /= 10;
        if u == 0 {
            break;
        }
    }
    let mut len = 0;
    if v < 0 {
        buf[0] = b'-';
        len = 1;
    }
    for i in (0..n).rev() {
        buf[len] = digits[i];
        len += 1;
    }
    len
}

/// What the program's arguments set, once at start.
struct Settings {
    /// The (uid, gid) the supervisor started as: a command's account when it names none.
    own: (u32, u32),
    /// Capabilities left in the supervisor's bounding set after its start that are not in
    /// `--keep-caps=MASK` (decimal bit mask of capability numbers: what a command keeps in
    /// its bounding set, so a root command gets them back at its exec — the container's
    /// own set, minus what would reach the supervisor; default 0, no capability at all):
    /// a drop refused (no CAP_SETPCAP). Each command drops them itself.
    bounding_left: u64,
    /// Signals (bit N for signal N) whose disposition was not the default at start (std
    /// ignores SIGPIPE and handles SIGSEGV/SIGBUS); a command's process resets these.
    non_default_signals: u64,
    /// `--reap-strays`, or the supervisor is its PID namespace's PID 1 (local): it is a
    /// child subreaper (PID 1 is the reaper of every orphan anyway) and SIGKILLs every child
    /// of its own that is not one of its keepers — the orphans of a keeper killed by a
    /// command with `CAP_KILL` (docker) or from outside the machine (a host's SIGKILL to
    /// the keeper's pid), which would otherwise run on until the machine closes.
    reap_strays: bool,
}

static SETTINGS: std::sync::OnceLock<Settings> = std::sync::OnceLock::new();

fn settings() -> &'static Settings {
    SETTINGS.get().expect("set at start")
}

/// Reads `--keep-caps=MASK`, `--own-account` and `--reap-strays`: (keep_caps,
/// own_account, reap_strays); exits 1 on anything else.
fn parse_args() -> (u64, bool, bool) {
    let mut keep = 0u64;
    let mut own_account = false;
    let mut reap_strays = false;
    for arg in std::env::args().skip(1) {
        if let Some(mask) = arg.strip_prefix("--keep-caps=") {
            match mask.parse() {
                Ok(m) => keep = m,
                Err(_) => {
                    raw_write_all(2, b"shellbox-supervisor: bad --keep-caps\n");
                    // SAFETY: _exit ends the process.
                    unsafe { _exit(1) }
                }
            }
        } else if arg == "--own-account" {
            own_account = true;
        } else if arg == "--reap-strays" {
            reap_strays = true;
        } else {
            raw_write_all(2, b"shellbox-supervisor: unknown argument\n");
            // SAFETY: _exit ends the process.
            unsafe { _exit(1) }
        }
    }
    (keep, own_account, reap_strays)
}

/// Empties this thread's capability bounding set but for `keep` (each drop allocates new
/// credentials, so it is done once here instead of in every command), and reads which
/// signals have a disposition other than the default. Returns (the capabilities left that
/// are not in `keep`, the non-default signals), as bit masks.
///
/// # Safety
/// At start, before any thread exists.
unsafe fn drop_bounding_set(keep: u64) -> (u64, u64) {
    let mut left = 0u64;
    // A read past the kernel's last capability fails, which ends the walk.
    for cap in 0..64u64 {
        match prctl(PR_CAPBSET_READ, cap, 0, 0, 0) {
            1 if keep & (1 << cap) == 0 => {
                if prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                    left |= 1 << cap;
                }
            }
            0 | 1 => {}
            _ => break,
        }
    }
    let mut signals = 0u64;
    for sig in 1..32 {
        if sig == SIGKILL || sig == 19 {
            continue;
        }
        // glibc's `struct sigaction` starts with the handler (0 is SIG_DFL); a query
        // only (no new action).
        let mut old = [0usize; 32];
        if sigaction(sig, std::ptr::null(), old.as_mut_ptr()) == 0 && old[0] != 0 {
            signals |= 1 << sig;
        }
    }
    (left, signals)
}

/// Switches the supervisor to [`SUPERVISOR_ID`] (real, effective, saved UID and GID),
/// keeping `CAP_KILL`, `CAP_SETUID`, `CAP_SETGID` and `CAP_SETPCAP` (for its keepers and
/// their commands' account switches), so no command can signal, trace or read it: a command
/// has neither its UID nor `CAP_KILL`/`CAP_SYS_PTRACE`. Exits 1 when the switch fails.
///
/// # Safety
/// At start, before any thread exists.
unsafe fn become_supervisor_account() {
    const PR_SET_KEEPCAPS: c_int = 8;
    const KEPT: u32 = (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8);
    prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0);
    if setgroups(0, std::ptr::null()) != 0
        || setresgid(SUPERVISOR_ID, SUPERVISOR_ID, SUPERVISOR_ID) != 0
        || setresuid(SUPERVISOR_ID, SUPERVISOR_ID, SUPERVISOR_ID) != 0
        || set_effective_and_permitted(KEPT) != 0
    {
        raw_write_all(2, b"shellbox-supervisor: cannot switch to its own account\n");
        _exit(1);
    }
    prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0);
    // The UID change reset it.
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}

/// Switches the keeper to [`KEEPER_ID`] (real, effective and saved UID and GID), keeping
/// `CAP_SETUID`, `CAP_SETGID`, `CAP_KILL` and `CAP_SETPCAP` in its permitted and effective sets so the
/// command's child can switch back to the command's account. Where the switch is not
/// possible (a user namespace mapping only one UID), the keeper stays as it is.
///
/// # Safety
/// In a keeper; [`sys`] calls only (with the raw `setresuid`, which changes this process
/// alone, not every thread that shares its memory as libc's would).
unsafe fn become_keeper_account() {
    const PR_SET_KEEPCAPS: c_int = 8;
    // CAP_KILL, CAP_SETGID, CAP_SETUID, CAP_SETPCAP
    const KEPT: u32 = (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8);
    sys::prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0);
    if sys::setresgid(KEEPER_ID) != 0 || sys::setresuid(KEEPER_ID) != 0 {
        return;
    }
    sys::capset(KEPT);
}

/// `capset(2)` of this thread: `kept` (bits of capabilities 0–31) as its effective and
/// permitted sets, nothing inheritable. Returns the syscall's result (0, or -1 with errno).
///
/// # Safety
/// Async-signal-safe (a raw syscall on stack data); callers are a forked child or the
/// supervisor before any thread exists.
unsafe fn set_effective_and_permitted(kept: u32) -> i64 {
    let header = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let data = [
        CapData {
            effective: kept,
            permitted: kept,
            inheritable: 0,
        },
        CapData {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        },
    ];
    syscall(SYS_CAPSET, &header as *const CapHeader, data.as_ptr())
}

/// SIGKILLs the keeper's children until it has none left (each killed process's orphans
/// reparent to the keeper and are found in the next round), for up to 30 s. Each round
/// also SIGCONTs the keeper, which a root command may have stopped (it must run to reap
/// its children and report).
///
/// A kill can come before the keeper has started its command (a timeout of microseconds,
/// a run dropped at once): the keeper then has no child yet, but will start one. So "no
/// child" ends the kill only once the keeper reported `started` (read before its children
/// are, so a command started meanwhile is listed), or once the keeper is gone (a zombie or
/// reaped: it never started one, or a fork-copy keeper whose `started` this memory never
/// sees has finished). Returning earlier let such a command run to its end, its timeout
/// not enforced.
fn kill_scope(keeper: i32, started: &std::sync::atomic::AtomicBool) {
    let path = format!("/proc/{keeper}/task/{keeper}/children");
    let begun = Instant::now();
    let mut text = String::new();
    while begun.elapsed() < Duration::from_secs(30) {
        let was_started = started.load(std::sync::atomic::Ordering::Acquire);
        text.clear();
        match File::open(&path).and_then(|mut f| f.read_to_string(&mut text)) {
            Ok(_) => {}
            Err(_) => return,
        }
        // SAFETY: kill(2) of this process's keeper, listed a moment ago (a SIGCONT to a
        // pid reused meanwhile would be harmless).
        unsafe { kill(keeper, SIGCONT) };
        let mut any = false;
        for pid in text.split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
            any = true;
            // SAFETY: kill(2) of a pid the keeper holds as its child (not yet reaped, so
            // the pid cannot have been reused).
            unsafe { kill(pid, SIGKILL) };
        }
        if !any && (was_started || keeper_ended(keeper)) {
            return;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Whether the keeper `pid` has exited (a zombie not reaped yet) or is gone.
fn keeper_ended(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    // `pid (comm) S ...`: the state follows the last ')'.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_none_or(|state| state == "Z" || state == "X")
}

/// Keeps the first `limit` bytes of a stream and counts the rest.
struct Limiter {
    limit: u64,
    kept: u64,
    truncated: bool,
}

impl Limiter {
    fn admit<'a>(&mut self, chunk: &'a [u8]) -> &'a [u8] {
        let room = self.limit - self.kept;
        let take = if (chunk.len() as u64) > room {
            self.truncated = true;
            room as usize
        } else {
            chunk.len()
        };
        self.kept += take as u64;
        &chunk[..take]
    }
}

/// One output stream of a command: its read end and limiter.
struct Stream {
    fd: RawFd,
    which: u8,
    limiter: Limiter,
}

impl Stream {
    /// Whether reading this stream now needs output credit: it is still within its output
    /// limit (bytes past the limit are read and dropped, so they need none).
    fn needs_credit(&self) -> bool {
        self.limiter.kept < self.limiter.limit
    }

    /// Reads once, at most what `credit` lets through unless `free` (the command was
    /// killed), and takes the bytes sent from `credit`; false at EOF or error.
    fn pump(&mut self, id: u32, out: &Out, buf: &mut [u8], credit: &mut u64, free: bool) -> Result<bool, c_int> {
        let room = self.limiter.limit - self.limiter.kept;
        // Whatever is admitted is at most `room`: when that fits the credit, a full read
        // cannot overdraw it (the rest past the limit is dropped).
        let want = if free || room <= *credit {
            buf.len()
        } else {
            buf.len().min(*credit as usize)
        };
        if want == 0 {
            return Err(EAGAIN);
        }
        // SAFETY: reading into a live buffer.
        let n = unsafe { read(self.fd, buf.as_mut_ptr(), want) };
        if n < 0 {
            let e = errno();
            if e == EINTR || e == EAGAIN {
                return Err(e);
            }
            return Ok(false);
        }
        if n == 0 {
            return Ok(false);
        }
        let kept = self.limiter.admit(&buf[..n as usize]);
        *credit = credit.saturating_sub(kept.len() as u64);
        if !kept.is_empty() {
            let mut payload = Vec::with_capacity(kept.len() + 1);
            payload.push(self.which);
            payload.extend_from_slice(kept);
            out.send(proto::OUTPUT, id, &payload);
        }
        Ok(true)
    }
}

/// A command whose keeper was started ([`launch`]): what its runner ([`run_command`])
/// takes over. The runner owns the pipe ends from then on.
struct Launched {
    keeper_pid: c_int,
    /// The job's `started` flag (see [`KeeperJob::started`]).
    started: Arc<std::sync::atomic::AtomicBool>,
    /// The write end of the command's stdin.
    in_w: RawFd,
    /// The read ends of its stdout and stderr.
    out_r: RawFd,
    err_r: RawFd,
    /// The read end of the keeper's status pipe.
    st_r: RawFd,
}

/// Starts one command's keeper (which starts the command's process): its pipes, its job,
/// the `clone`. Done by the control thread itself, so the command's exec is under way
/// before a pool thread has woken for the rest ([`run_command`]): that wake-up is off the
/// command's path. Returns `None` once the failure was reported to the host (FAIL).
fn launch(id: u32, start: &proto::Start, out: &Out, children: &Children) -> Option<Launched> {
    let ex = match Exec::new(start) {
        Ok(ex) => ex,
        Err(why) => {
            out.fail(id, proto::FAIL_INVALID_INPUT, &why);
            return None;
        }
    };
    let stacks = match Stacks::take() {
        Ok(s) => s,
        Err(e) => {
            out.fail(id, proto::FAIL_SYSTEM, &format!("map the keeper's stacks: {e}"));
            return None;
        }
    };
    let pipes = (|| Ok::<_, std::io::Error>([pipe_cloexec()?, pipe_cloexec()?, pipe_cloexec()?, pipe_cloexec()?]))();
    let [(in_r, in_w), (out_r, out_w), (err_r, err_w), (st_r, st_w)] = match pipes {
        Ok(p) => p,
        Err(e) => {
            out.fail(id, proto::FAIL_SYSTEM, &format!("pipe: {e}"));
            return None;
        }
    };
    let mut job = Box::new(KeeperJob {
        ex,
        stdio: [in_r, out_w, err_w],
        status_w: st_w,
        argv: Vec::new(),
        envp: Vec::new(),
        sh_argv: Vec::new(),
        child_top: stacks.child_top(),
        stacks,
        started: Arc::new(std::sync::atomic::AtomicBool::new(false)),
    });
    job.argv = null_terminated(&job.ex.argv);
    job.envp = null_terminated(&job.ex.env);
    let mut sh_argv: Vec<*const i8> = vec![c"/bin/sh".as_ptr(), std::ptr::null()];
    sh_argv.extend(job.ex.argv.iter().skip(1).map(|c| c.as_ptr()));
    sh_argv.push(std::ptr::null());
    job.sh_argv = sh_argv;
    let keeper_top = job.stacks.keeper_top();
    let started = job.started.clone();
    let job_ptr: *mut KeeperJob = &mut *job;
    let flags = if sys::KEEPER_SHARES_MEMORY { CLONE_VM } else { 0 } | SIGCHLD;
    // The keeper and its command inherit the supervisor's value: never a command's raise.
    reset_oom_score_adj();
    // Held until the new keeper's pid is in the set (see `kill_strays`); the keeper never
    // touches it.
    let mut keepers = children.keepers.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: the keeper runs `keeper_main` on the job, which lives until it is reaped
    // (the reaper frees it, under this lock, so not before it is in the set).
    let keeper_pid = unsafe { sys::clone(flags as usize, keeper_top, keeper_main, job_ptr.cast()) };
    let clone_error = (keeper_pid < 0).then(|| std::io::Error::from_raw_os_error(-keeper_pid as c_int));
    let keeper_pid = keeper_pid as c_int;
    if keeper_pid > 0 {
        keepers.insert(keeper_pid, job);
    }
    drop(keepers);
    for fd in [in_r, out_w, err_w, st_w] {
        close_fd(fd);
    }
    if keeper_pid < 0 {
        for fd in [in_w, out_r, err_r, st_r] {
            close_fd(fd);
        }
        let e = clone_error.unwrap_or_else(|| std::io::Error::other("no pid"));
        if e.raw_os_error() == Some(EAGAIN) {
            out.fail(id, proto::FAIL_PIDS_LIMIT, PIDS_LIMIT_MESSAGE);
        } else {
            out.fail(id, proto::FAIL_SYSTEM, &format!("start its keeper (clone): {e}"));
        }
        return None;
    }
    Some(Launched { keeper_pid, started, in_w, out_r, err_r, st_r })
}

/// The [`proto::FAIL_PIDS_LIMIT`] message.
const PIDS_LIMIT_MESSAGE: &str = "the machine's process limit is reached: the fork of the command's keeper or process \
     was refused (EAGAIN), so nothing of the command ran; there is room again once some of the machine's processes end";

/// Runs one started command ([`launch`]) to its end: pumps its pipes, applies its stdin,
/// kill requests and output limit, and sends its EXIT (or FAIL).
fn run_command(id: u32, output_limit_bytes: u64, launched: Launched, cmd: Arc<Cmd>, wake_r: RawFd, out: Arc<Out>) {
    let Launched { keeper_pid, started, in_w, out_r, err_r, st_r } = launched;
    set_nonblocking(in_w);
    let mut streams = [
        Stream {
            fd: out_r,
            which: proto::STDOUT,
            limiter: Limiter {
                limit: output_limit_bytes,
                kept: 0,
                truncated: false,
            },
        },
        Stream {
            fd: err_r,
            which: proto::STDERR,
            limiter: Limiter {
                limit: output_limit_bytes,
                kept: 0,
                truncated: false,
            },
        },
    ];
    let mut open = [true, true];
    let mut stdin_fd = in_w;
    let mut pending: Vec<u8> = Vec::new();
    let mut pending_at = 0usize;
    let mut stdin_end = false;
    let mut status: Option<c_int> = None;
    let mut status_buf: Vec<u8> = Vec::new();
    let mut status_open = true;
    let mut buf = vec![0u8; proto::CHUNK_BYTES];
    let mut killed = false;
    // Output bytes the host still takes (see proto's flow control): a stream within its
    // limit is read only while there is credit, or once the command was killed.
    let mut credit: u64 = proto::OUTPUT_WINDOW_BYTES;
    while status_open {
        let mut fds: Vec<PollFd> = Vec::with_capacity(5);
        fds.push(PollFd { fd: wake_r, events: POLLIN, revents: 0 });
        fds.push(PollFd { fd: st_r, events: POLLIN, revents: 0 });
        for (s, &o) in streams.iter().zip(&open) {
            let readable = o && (killed || credit > 0 || !s.needs_credit());
            fds.push(PollFd { fd: if readable { s.fd } else { -1 }, events: POLLIN, revents: 0 });
        }
        let want_out = stdin_fd >= 0 && pending_at < pending.len();
        fds.push(PollFd { fd: if want_out { stdin_fd } else { -1 }, events: POLLOUT, revents: 0 });
        // SAFETY: poll over a live array.
        let r = unsafe { poll(fds.as_mut_ptr(), fds.len() as u64, -1) };
        if r < 0 {
            continue;
        }
        if fds[0].revents != 0 {
            let mut junk = [0u8; 64];
            // SAFETY: reading into a live buffer.
            unsafe { read(wake_r, junk.as_mut_ptr(), junk.len()) };
            let mut inbox = cmd.inbox.lock().unwrap_or_else(|e| e.into_inner());
            if !inbox.stdin.is_empty() {
                pending.drain(..pending_at);
                pending_at = 0;
                pending.append(&mut inbox.stdin);
            }
            stdin_end |= inbox.stdin_end;
            credit = credit.saturating_add(std::mem::take(&mut inbox.credit));
            let kill_now = inbox.kill && !killed;
            drop(inbox);
            if kill_now {
                killed = true;
                kill_scope(keeper_pid, &started);
            }
        }
        if stdin_fd >= 0 && stdin_end && pending_at >= pending.len() {
            close_fd(stdin_fd);
            stdin_fd = -1;
        }
        if fds[1].revents != 0 {
            // SAFETY: reading into a live buffer.
            let n = unsafe { read(st_r, buf.as_mut_ptr(), 8) };
            if n > 0 {
                status_buf.extend_from_slice(&buf[..n as usize]);
                if status_buf.len() >= 4 {
                    status = Some(c_int::from_ne_bytes([status_buf[0], status_buf[1], status_buf[2], status_buf[3]]));
                    status_open = false;
                }
            } else if n == 0 || (errno() != EINTR && errno() != EAGAIN) {
                status_open = false;
            }
        }
        for i in 0..2 {
            if open[i] && fds[2 + i].revents != 0 && streams[i].pump(id, &out, &mut buf, &mut credit, killed) == Ok(false) {
                open[i] = false;
                close_fd(streams[i].fd);
            }
        }
        if want_out && fds[4].revents != 0 {
            // SAFETY: writing from a live slice.
            let n = unsafe { write(stdin_fd, pending[pending_at..].as_ptr(), pending.len() - pending_at) };
            if n > 0 {
                pending_at += n as usize;
            } else if n < 0 && errno() != EAGAIN && errno() != EINTR {
                // The command stopped reading (EPIPE): drop the rest.
                close_fd(stdin_fd);
                stdin_fd = -1;
            }
            if stdin_fd >= 0 && stdin_end && pending_at >= pending.len() {
                close_fd(stdin_fd);
                stdin_fd = -1;
            }
        }
    }
    close_fd(st_r);
    close_fd(stdin_fd);
    // The main process ended, so everything it wrote is in the pipes: drain what is there
    // (at most a few MiB more, so a background writer cannot hold the exit back).
    for i in 0..2 {
        if !open[i] {
            continue;
        }
        set_nonblocking(streams[i].fd);
        let mut budget: usize = 4 << 20;
        loop {
            if !killed && credit == 0 && streams[i].needs_credit() {
                // Out of credit: wait for the host's consumer (or a KILL, after which the
                // little the killed processes left is sent freely).
                let mut pfd = PollFd { fd: wake_r, events: POLLIN, revents: 0 };
                // SAFETY: poll over one live entry.
                if unsafe { poll(&mut pfd, 1, -1) } > 0 {
                    let mut junk = [0u8; 64];
                    // SAFETY: reading into a live buffer.
                    unsafe { read(wake_r, junk.as_mut_ptr(), junk.len()) };
                    let mut inbox = cmd.inbox.lock().unwrap_or_else(|e| e.into_inner());
                    credit = credit.saturating_add(std::mem::take(&mut inbox.credit));
                    let kill_now = inbox.kill;
                    drop(inbox);
                    if kill_now {
                        killed = true;
                        kill_scope(keeper_pid, &started);
                    }
                }
                continue;
            }
            match streams[i].pump(id, &out, &mut buf, &mut credit, killed) {
                Ok(true) if budget > buf.len() => budget -= buf.len(),
                Err(EINTR) => {}
                Ok(false) => {
                    open[i] = false;
                    close_fd(streams[i].fd);
                    break;
                }
                _ => break,
            }
        }
        if open[i] {
            // Processes left running in the background keep a working stdout/stderr: what
            // they write after the command ended is read and dropped.
            Drain::hand_over(streams[i].fd);
        }
    }
    close_fd(wake_r);
    match status {
        Some(KEEPER_FORK_REFUSED) => out.fail(id, proto::FAIL_PIDS_LIMIT, PIDS_LIMIT_MESSAGE),
        Some(st) => {
            let (code, signal) = if st & 0x7f == 0 {
                (Some((st >> 8) & 0xff), None)
            } else {
                (None, Some(st & 0x7f))
            };
            let exit = proto::Exit {
                code,
                signal,
                stdout_truncated: streams[0].limiter.truncated,
                stderr_truncated: streams[1].limiter.truncated,
            };
            out.send(proto::EXIT, id, &exit.encode());
        }
        None if settings().reap_strays => out.fail(
            id,
            proto::FAIL_SYSTEM,
            "the command's keeper was killed before it reported the command's exit status \
             (by a command with CAP_KILL, or from outside the machine); every process it kept \
             was killed",
        ),
        None => out.fail(id, proto::FAIL_SYSTEM, "the command's keeper ended before reporting its exit status"),
    }
    let _ = cmd;
}

/// The one thread that reads and drops what processes left running in the background write
/// to their finished command's stdout or stderr (so their writes never block or fail), for
/// every such stream of the machine: one thread however many there are (a thread per stream
/// kept two threads per background service for its whole life).
struct Drain {
    /// Streams handed over since the thread last looked.
    new: Mutex<Vec<RawFd>>,
    /// Written once per hand-over, to wake the thread's poll.
    wake_w: RawFd,
}

static DRAIN: std::sync::OnceLock<Option<Drain>> = std::sync::OnceLock::new();

impl Drain {
    /// Gives `fd` (non-blocking, owned from here on) to the drain thread, started on first
    /// use; where it cannot start (no pipe, no thread), the stream is closed, so a background
    /// writer gets EPIPE, as with no reader at all.
    fn hand_over(fd: RawFd) {
        let drain = DRAIN.get_or_init(|| {
            let (wake_r, wake_w) = pipe_cloexec().ok()?;
            let spawned = std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || Drain::run(wake_r));
            if spawned.is_err() {
                close_fd(wake_r);
                close_fd(wake_w);
                return None;
            }
            Some(Drain {
                new: Mutex::new(Vec::new()),
                wake_w,
            })
        });
        match drain {
            Some(d) => {
                d.new.lock().unwrap_or_else(|e| e.into_inner()).push(fd);
                raw_write_all(d.wake_w, b"x");
            }
            None => close_fd(fd),
        }
    }

    /// The drain thread: polls every stream handed over, reads what comes and drops it,
    /// and closes a stream at its end (its last writer gone).
    fn run(wake_r: RawFd) {
        let mut fds: Vec<RawFd> = Vec::new();
        let mut junk = vec![0u8; 16 * 1024];
        let mut pfds: Vec<PollFd> = Vec::new();
        loop {
            pfds.clear();
            pfds.push(PollFd { fd: wake_r, events: POLLIN, revents: 0 });
            pfds.extend(fds.iter().map(|&fd| PollFd { fd, events: POLLIN, revents: 0 }));
            // SAFETY: poll over a live array.
            if unsafe { poll(pfds.as_mut_ptr(), pfds.len() as u64, -1) } < 0 {
                continue;
            }
            let mut ended = Vec::new();
            for (k, p) in pfds.iter().enumerate().skip(1) {
                if p.revents == 0 {
                    continue;
                }
                // SAFETY: reading into a live buffer from a stream this thread owns.
                let n = unsafe { read(p.fd, junk.as_mut_ptr(), junk.len()) };
                if n == 0 || (n < 0 && errno() != EAGAIN && errno() != EINTR) {
                    ended.push(k - 1);
                }
            }
            for &k in ended.iter().rev() {
                close_fd(fds.swap_remove(k));
            }
            if pfds[0].revents != 0 {
                // SAFETY: reading into a live buffer.
                unsafe { read(wake_r, junk.as_mut_ptr(), junk.len()) };
                if let Some(Some(d)) = DRAIN.get() {
                    fds.append(&mut d.new.lock().unwrap_or_else(|e| e.into_inner()));
                }
            }
        }
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// The threads commands run on: an idle one takes the next command, a new one is started
/// when none is idle (a command holds its thread until it ends, so the pool cannot cap how
/// many run at once without stalling the machine), a thread that finds no work while
/// [`POOL_KEPT_IDLE`] others already wait ends at once, and one idle for [`POOL_IDLE`]
/// ends (a thread start per command cost more than the command's fork). So after a burst
/// the pool falls back to at most [`POOL_KEPT_IDLE`] threads as its commands end, and to
/// none when the machine stays idle.
#[derive(Default)]
struct Pool {
    state: Mutex<PoolState>,
    cond: Condvar,
}

#[derive(Default)]
struct PoolState {
    jobs: std::collections::VecDeque<Job>,
    idle: usize,
}

/// How long a pool thread waits for work before it ends.
const POOL_IDLE: Duration = Duration::from_secs(10);

/// The most pool threads kept waiting for work: enough for a few commands in flight at
/// once (a host's concurrency is usually its core count), few enough that their stacks
/// (256 KiB reserved each) cost nothing to speak of.
const POOL_KEPT_IDLE: usize = 8;

impl Pool {
    fn submit(self: &Arc<Self>, job: Job) -> std::io::Result<()> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.jobs.push_back(job);
        if st.idle >= st.jobs.len() {
            self.cond.notify_one();
            return Ok(());
        }
        drop(st);
        let pool = self.clone();
        let spawned = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || pool.work());
        if let Err(e) = spawned {
            let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            // Taken back unless a worker got to it meanwhile.
            if st.idle < st.jobs.len() {
                st.jobs.pop_back();
                return Err(e);
            }
        }
        Ok(())
    }

    fn work(&self) {
        loop {
            let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let job = loop {
                if let Some(job) = st.jobs.pop_front() {
                    break job;
                }
                if st.idle >= POOL_KEPT_IDLE {
                    return;
                }
                st.idle += 1;
                let (next, timeout) = self
                    .cond
                    .wait_timeout(st, POOL_IDLE)
                    .unwrap_or_else(|e| e.into_inner());
                st = next;
                st.idle -= 1;
                if timeout.timed_out() && st.jobs.is_empty() {
                    return;
                }
            };
            drop(st);
            job();
        }
    }
}

fn read_exact_or_exit(f: &mut impl Read, buf: &mut [u8]) {
    if f.read_exact(buf).is_err() {
        // The host closed the control channel: the machine ends with its PID 1.
        // SAFETY: _exit ends the process.
        unsafe { _exit(0) }
    }
}

fn main() {
    if std::env::args_os().nth(1).is_some_and(|a| a == "--pty-relay") {
        pty::main();
    }
    let (keep_caps, own_account, reap_strays) = parse_args();
    // As PID 1 (local) every orphan of the machine is the supervisor's child anyway: those
    // of a keeper killed from outside (a host's SIGKILL) die at once, not at the close.
    let reap_strays = reap_strays || std::process::id() == 1;
    // SAFETY: getuid/getgid cannot fail.
    let own = unsafe { (getuid(), getgid()) };
    // SAFETY: plain system calls at start-up, before any thread exists (the bounding set
    // is per thread: every thread, keeper and command started later inherits it).
    let (bounding_left, non_default_signals) = unsafe { drop_bounding_set(keep_caps) };
    let _ = SETTINGS.set(Settings {
        own,
        bounding_left,
        non_default_signals,
        reap_strays,
    });
    // SAFETY: plain system calls at start-up, before any thread exists.
    let (ctl_in, ctl_out) = unsafe {
        prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
        if reap_strays {
            prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        }
        syscall(SYS_CLOSE_RANGE, 3u32, u32::MAX, 0u32);
        let ctl_in = fcntl(0, F_DUPFD_CLOEXEC, 3);
        let ctl_out = fcntl(1, F_DUPFD_CLOEXEC, 3);
        let null = open(c"/dev/null".as_ptr(), O_RDWR | O_CLOEXEC);
        if ctl_in < 0 || ctl_out < 0 || null < 0 {
            raw_write_all(2, b"shellbox-supervisor: cannot set up its control channel\n");
            _exit(1);
        }
        for fd in [0, 1] {
            dup2(null, fd);
        }
        close(null);
        if let Some(oom) = open_oom_score_adj() {
            let _ = OOM_SCORE.set(oom);
        }
        if own_account {
            become_supervisor_account();
        }
        (File::from_raw_fd(ctl_in), File::from_raw_fd(ctl_out))
    };
    let out = Arc::new(Out {
        file: Mutex::new(ctl_out),
    });
    let children = Arc::new(Children {
        keepers: Mutex::default(),
    });
    // Before any thread starts, so every thread inherits it (see `reaper`).
    block_sigchld();
    {
        let children = children.clone();
        std::thread::spawn(move || reaper(children));
    }
    out.send(proto::READY, 0, &[]);
    let commands: Commands = Arc::default();
    let pool = Arc::new(Pool::default());
    // Buffered: a command's request, stdin and end usually arrive in one write.
    let mut ctl_in = std::io::BufReader::with_capacity(64 * 1024, ctl_in);
    let mut header = [0u8; proto::HEADER_BYTES];
    loop {
        read_exact_or_exit(&mut ctl_in, &mut header);
        let (len, kind, id) = proto::parse_header(&header);
        if len > proto::MAX_PAYLOAD_BYTES {
            // Read past it so the stream stays in step, then refuse it.
            let mut left = len as u64;
            let mut sink = vec![0u8; 64 * 1024];
            while left > 0 {
                let n = left.min(sink.len() as u64) as usize;
                read_exact_or_exit(&mut ctl_in, &mut sink[..n]);
                left -= n as u64;
            }
            if kind == proto::START {
                out.fail(id, proto::FAIL_INVALID_INPUT, &format!("a request of {len} bytes is over the supervisor's {} byte limit", proto::MAX_PAYLOAD_BYTES));
            }
            continue;
        }
        let mut payload = vec![0u8; len];
        read_exact_or_exit(&mut ctl_in, &mut payload);
        match kind {
            proto::START => {
                let Some(start) = proto::Start::decode(&payload) else {
                    out.fail(id, proto::FAIL_INVALID_INPUT, "malformed start request");
                    continue;
                };
                if start.argv_env_bytes() > proto::MAX_ARGV_ENV_BYTES {
                    out.fail(id, proto::FAIL_INVALID_INPUT, &format!("argv and environment hold {} bytes, over the {} byte limit", start.argv_env_bytes(), proto::MAX_ARGV_ENV_BYTES));
                    continue;
                }
                if commands.lock().unwrap_or_else(|e| e.into_inner()).contains_key(&id) {
                    out.fail(id, proto::FAIL_INVALID_INPUT, "a command with this id is running");
                    continue;
                }
                let (wake_r, wake_w) = match pipe_cloexec() {
                    Ok(p) => p,
                    Err(e) => {
                        out.fail(id, proto::FAIL_SYSTEM, &format!("pipe: {e}"));
                        continue;
                    }
                };
                let cmd = Arc::new(Cmd {
                    wake_w,
                    inbox: Mutex::default(),
                });
                let Some(launched) = launch(id, &start, &out, &children) else {
                    close_fd(wake_r);
                    continue;
                };
                let (keeper_pid, started) = (launched.keeper_pid, launched.started.clone());
                let fds = [launched.in_w, launched.out_r, launched.err_r, launched.st_r];
                commands.lock().unwrap_or_else(|e| e.into_inner()).insert(id, cmd.clone());
                let (out2, commands2) = (out.clone(), commands.clone());
                let limit = start.output_limit_bytes;
                let spawned = pool.submit(Box::new(move || {
                    run_command(id, limit, launched, cmd, wake_r, out2);
                    commands2.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
                }));
                if let Err(e) = spawned {
                    // No thread runs it: the command is killed (its whole scope) and its
                    // pipes closed (the job that held them was dropped unrun).
                    commands.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
                    kill_scope(keeper_pid, &started);
                    for fd in fds.into_iter().chain([wake_r]) {
                        close_fd(fd);
                    }
                    out.fail(id, proto::FAIL_SYSTEM, &format!("start a thread: {e}"));
                }
            }
            proto::STDIN | proto::STDIN_END | proto::KILL | proto::CREDIT => {
                let cmd = commands.lock().unwrap_or_else(|e| e.into_inner()).get(&id).cloned();
                if let Some(cmd) = cmd {
                    {
                        let mut inbox = cmd.inbox.lock().unwrap_or_else(|e| e.into_inner());
                        match kind {
                            proto::STDIN => inbox.stdin.extend_from_slice(&payload),
                            proto::STDIN_END => inbox.stdin_end = true,
                            proto::CREDIT => {
                                if let Ok(b) = <[u8; 8]>::try_from(&payload[..]) {
                                    inbox.credit = inbox.credit.saturating_add(u64::from_le_bytes(b));
                                }
                            }
                            _ => inbox.kill = true,
                        }
                    }
                    cmd.poke();
                }
            }
            _ => {}
        }
    }
}
