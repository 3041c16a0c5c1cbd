//! Namespaces made once per machine and joined by each of its commands.
//!
//! Creating a network namespace per command (bwrap's `--unshare-net`) costs kernel work at
//! every start (device and sysctl registration) and more at every exit (the asynchronous,
//! serialised `cleanup_net`). A machine whose network is denied instead gets one network
//! namespace holding only loopback, made when the machine is created and held by an fd;
//! each command's launcher joins it with `setns(2)` before it execs bwrap. It is released
//! (the fd closed) when the machine is closed or dropped. This needs `CAP_SYS_ADMIN` (a
//! root host process); elsewhere the machine falls back to `--unshare-net` per command.

use std::ffi::CStr;
use std::os::fd::{FromRawFd, OwnedFd};

/// Runs `f` on a short-lived thread of its own, so namespace changes made by `f` (which
/// apply to the calling thread only) never reach a thread of the caller's pool.
fn on_own_thread<T: Send + 'static>(
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    std::thread::Builder::new()
        .name("shellbox-ns".into())
        .spawn(f)?
        .join()
        .map_err(|_| std::io::Error::other("namespace thread panicked"))?
}

fn open_cloexec(path: &CStr) -> std::io::Result<OwnedFd> {
    // SAFETY: a plain open of a NUL-terminated path; the fd is owned by the result.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Brings the loopback interface of the calling thread's network namespace up; the kernel
/// then gives it `127.0.0.1/8` and `::1` (as bwrap's own loopback set-up does).
fn loopback_up() -> std::io::Result<()> {
    // SAFETY: socket/ioctl on a zeroed `ifreq` naming "lo"; the socket is closed by
    // `OwnedFd` on every path.
    unsafe {
        let sock = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if sock < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let sock = OwnedFd::from_raw_fd(sock);
        let raw = std::os::fd::AsRawFd::as_raw_fd(&sock);
        let mut req: libc::ifreq = std::mem::zeroed();
        for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
            *dst = *src as libc::c_char;
        }
        if libc::ioctl(raw, libc::SIOCGIFFLAGS, &mut req) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(raw, libc::SIOCSIFFLAGS, &req) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// A new network namespace with only loopback (up), held by the returned fd; it lives
/// until the fd (and every duplicate) is closed and no process is in it.
///
/// # Errors
/// The `unshare(2)` error (`EPERM` without `CAP_SYS_ADMIN`), or that of bringing `lo` up
/// or opening the namespace file.
pub(crate) fn loopback_netns() -> std::io::Result<OwnedFd> {
    on_own_thread(|| {
        // SAFETY: changes only this thread's network namespace; the thread ends next.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        loopback_up()?;
        open_cloexec(c"/proc/thread-self/ns/net")
    })
}

/// The namespaces a machine made once; each command's launcher joins them (`setns(2)`)
/// before it execs bwrap. Dropping the value closes the fds, which releases the
/// namespaces once no process is in them.
#[derive(Debug, Default)]
pub(crate) struct MachineNamespaces {
    /// The loopback-only network namespace of a machine whose network is denied.
    pub net: Option<OwnedFd>,
}

impl MachineNamespaces {
    /// What bwrap no longer has to do per command.
    pub fn shared(&self) -> crate::plan::Shared {
        crate::plan::Shared {
            net: self.net.is_some(),
        }
    }

    /// `(fd, nstype)` pairs to `setns(2)` in the launcher, in order.
    pub fn joins(&self) -> Vec<(std::os::fd::RawFd, libc::c_int)> {
        use std::os::fd::AsRawFd;
        self.net
            .iter()
            .map(|fd| (fd.as_raw_fd(), libc::CLONE_NEWNET))
            .collect()
    }
}
