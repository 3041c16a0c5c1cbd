//! Bounds on a machine's `/dev` and `/dev/pts`, set once when its sandbox has started.
//!
//! bwrap 0.8's `--dev` mounts `/dev` as a `tmpfs` with no `size` (the kernel's default:
//! half the host's memory) and a new `devpts` instance at `/dev/pts` with no `max` (every
//! instance shares the host's pool of `kernel.pty.max` ptys), and offers no option for
//! either (its `--size` applies to `--tmpfs` only). So a command could fill host memory
//! through `/dev/x` whatever `storage_mb` says, or take every pty of the host so another
//! machine's shell sessions fail. Once the supervisor is READY (bwrap's set-up is done and
//! no command has run yet) the host reconfigures both superblocks in the sandbox's mount
//! namespace: `fspick(2)` on `/proc/PID/root/dev` (and `.../dev/pts`) of the sandbox's
//! PID 1, then `fsconfig(2)` with the new options and `FSCONFIG_CMD_RECONFIGURE`. The
//! mounts' own flags are untouched.
//!
//! This needs `CAP_SYS_ADMIN` over the host's mount namespace: a root host process. A
//! non-root host process's machines (bwrap in a user namespace) keep bwrap's defaults.

use std::ffi::CString;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The `tmpfs` options `/dev` is reconfigured to: 64 KiB of data and 128 inodes. `/dev`
/// holds only what bwrap's `--dev` puts there (about 20 inodes: bind-mounted device
/// nodes, which take no data, the `stdin`/`fd`/`ptmx`... symlinks, the `pts` and `shm`
/// directories), so a write of data there fails with `ENOSPC` after at most 64 KiB.
pub const DEV_TMPFS_OPTIONS: [(&str, &str); 2] = [("size", "64k"), ("nr_inodes", "128")];

/// The most ptys one machine's `devpts` instance hands out (its `max` mount option): 256.
/// A pty past it fails with `ENOSPC` in that machine only. The host's pool is
/// `kernel.pty.max` (4096 by default) less `kernel.pty.reserve` (1024) kept for the host's
/// own `/dev/pts`, so without a bound one machine's `openpty` loop took all 3072 the
/// machines share and every other machine's shell sessions failed. 256 is far more than
/// the sessions and commands of one machine use (each `open_shell` session and each
/// command with a pty takes one), and lets a dozen machines hold their whole share at
/// once before the shared pool runs out.
pub const PTY_MAX_PER_MACHINE: u32 = 256;

/// The `devpts` options `/dev/pts` is reconfigured to. A `devpts` reconfigure resets
/// every option not given to the kernel's default, so bwrap's own `mode=620` and
/// `ptmxmode=0666` (its `--dev` mount) are given again beside `max`.
pub fn devpts_options() -> [(&'static str, String); 3] {
    [
        ("mode", "620".to_string()),
        ("ptmxmode", "0666".to_string()),
        ("max", PTY_MAX_PER_MACHINE.to_string()),
    ]
}

const FSPICK_CLOEXEC: libc::c_uint = 0x1;
const FSCONFIG_SET_STRING: libc::c_uint = 1;
const FSCONFIG_CMD_RECONFIGURE: libc::c_uint = 7;

fn cstr(s: &[u8]) -> std::io::Result<CString> {
    CString::new(s).map_err(|_| std::io::Error::other("a NUL byte in a mount option or path"))
}

/// Reconfigures the superblock of the mount whose root is `mount` with `options`
/// (`fspick(2)`, `fsconfig(2)` `FSCONFIG_SET_STRING` each, `FSCONFIG_CMD_RECONFIGURE`).
fn reconfigure(mount: &Path, options: &[(&str, &str)]) -> std::io::Result<()> {
    let path = cstr(mount.as_os_str().as_bytes())?;
    let fail = |op: &str| {
        let e = std::io::Error::last_os_error();
        std::io::Error::new(e.kind(), format!("{op} {}: {e}", mount.display()))
    };
    // SAFETY: fspick on a NUL-terminated path; the fd is owned by `fd` at once.
    let raw = unsafe {
        libc::syscall(
            libc::SYS_fspick,
            libc::AT_FDCWD,
            path.as_ptr(),
            FSPICK_CLOEXEC,
        )
    };
    if raw < 0 {
        return Err(fail("fspick"));
    }
    // SAFETY: `raw` is a new fd owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw as i32) };
    let fd_raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
    for (key, value) in options {
        let (k, v) = (cstr(key.as_bytes())?, cstr(value.as_bytes())?);
        // SAFETY: fsconfig on our fs-context fd with NUL-terminated strings.
        let r = unsafe {
            libc::syscall(
                libc::SYS_fsconfig,
                fd_raw,
                FSCONFIG_SET_STRING,
                k.as_ptr(),
                v.as_ptr(),
                0,
            )
        };
        if r < 0 {
            return Err(fail(&format!("set {key}={value} on")));
        }
    }
    // SAFETY: fsconfig on our fs-context fd, no strings.
    let r = unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fd_raw,
            FSCONFIG_CMD_RECONFIGURE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_void>(),
            0,
        )
    };
    if r < 0 {
        return Err(fail("reconfigure"));
    }
    Ok(())
}

/// The host pid of bwrap's one child (the sandbox's PID 1) of the bwrap whose pid is
/// `bwrap`: the first entry of `/proc/BWRAP/task/BWRAP/children`.
fn sandbox_pid1(bwrap: i32) -> std::io::Result<i32> {
    let path = format!("/proc/{bwrap}/task/{bwrap}/children");
    let text = std::fs::read_to_string(&path)?;
    text.split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("{path} names no child")))
}

/// The size in bytes of a machine's `/dev/shm` (a `tmpfs` of its sandbox, memory that
/// lives as long as the sandbox): [`SHM_SIZE_BYTES`](crate::plan::SHM_SIZE_BYTES)
/// (64 MiB, Docker's default), or `storage_mb` MiB where that is less, so a machine with
/// a small `storage_mb` cannot put more than that in shared memory either.
pub fn shm_bytes(storage_mb: Option<u64>) -> u64 {
    let shm = crate::plan::SHM_SIZE_BYTES;
    storage_mb.map_or(shm, |mb| shm.min(mb.saturating_mul(1 << 20)).max(4096))
}

/// The most files a machine's `/dev/shm` of `shm_bytes` holds: one per 4 KiB page, at
/// least 1,024 (16,384 for the default 64 MiB). Without it an empty file costs no page of
/// the size bound, and a guest made 300,000 of them (issue 12's break-it pass), each an
/// inode of kernel memory.
pub fn shm_inodes(shm_bytes: u64) -> u64 {
    (shm_bytes / 4096).max(1024)
}

/// Bounds `/dev` ([`DEV_TMPFS_OPTIONS`]), `/dev/pts` ([`devpts_options`]) and `/dev/shm`
/// (`shm_bytes`, [`shm_inodes`]) of the sandbox started by the bwrap whose host pid is
/// `bwrap`, through its PID 1's root.
///
/// # Errors
/// The error of finding PID 1 or of `fspick`/`fsconfig` (`EPERM` without `CAP_SYS_ADMIN`).
pub(crate) fn bound_dev(bwrap: i32, shm_bytes: u64) -> std::io::Result<()> {
    let pid1 = sandbox_pid1(bwrap)?;
    let root = std::path::PathBuf::from(format!("/proc/{pid1}/root"));
    reconfigure(&root.join("dev"), &DEV_TMPFS_OPTIONS)?;
    reconfigure(
        &root.join("dev/shm"),
        &[
            ("size", &shm_bytes.to_string()),
            ("nr_inodes", &shm_inodes(shm_bytes).to_string()),
        ],
    )?;
    let pts = devpts_options();
    let pts: Vec<(&str, &str)> = pts.iter().map(|(k, v)| (*k, v.as_str())).collect();
    reconfigure(&root.join("dev/pts"), &pts)
}
