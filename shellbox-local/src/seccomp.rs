//! The seccomp filters of local machines: what Docker's default profile (moby
//! `profiles/seccomp/default.json`) refuses to a container without added capabilities,
//! refused to every local command.
//!
//! Docker's profile is an allow-list; this is the matching deny-list ([`refused`]), which
//! keeps every other system call working as on the host. Each refused call fails with
//! `EPERM` (Docker's default action), except `clone3`, which fails with `ENOSYS` as in
//! Docker, so the C library falls back to `clone(2)`, whose flags a filter can inspect
//! (`clone3` passes them in memory), and `inotify_init`/`inotify_init1`, which fail with
//! `ENOSYS` (as on a kernel without inotify): the kernel counts inotify instances per host
//! uid, shared with the host and every other machine, and no capability exempts them.
//! Two more rules have no table entry:
//!
//! - on x86-64, system calls of the x32 ABI (numbers with bit 30 set) fail with `ENOSYS`
//!   (as on a kernel built without x32): the table's numbers are x86-64 ones, and x32
//!   would otherwise reach the same kernel functions under other numbers;
//! - a system call of another architecture (32-bit `int 0x80` on x86-64) kills the process
//!   (seccompiler's architecture check; Docker would allow them by the same list).
//!
//! Two programs are built once per factory from the table:
//!
//! - the **command filter** (every entry) is handed to bwrap (`--seccomp FD`), which loads
//!   it just before it execs the command: it binds the command and all its descendants;
//! - the **launcher filter** (the entries bwrap's own sandbox set-up does not need: all but
//!   the mount family and namespace creation other than user namespaces) is loaded by the
//!   launcher itself just before it execs bwrap, when the host process is root. It also
//!   binds bwrap and the sandbox's PID 1 (bwrap's init, which the command filter does not
//!   reach): without it a command could take over PID 1 through `/proc/1/mem` (same UID, no
//!   capabilities on either side) and run the keyring calls from there, or fake its own
//!   exit status (issue 8, items 3 and 4). PID 1 keeps only what bwrap's set-up needs, and
//!   has no capabilities to use it. A non-root host process gets no launcher filter: its
//!   bwrap may be setuid or create a user namespace, and its keyrings are its own user's.

use std::collections::BTreeMap;

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

/// When a table entry refuses its system call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// Always.
    Always,
    /// When the 32-bit flags argument `arg` (0-based) has any bit of the mask set.
    AnyFlag {
        /// Argument index.
        arg: u8,
        /// Refused bits.
        mask: u32,
    },
    /// When the 32-bit argument `arg` is none of the allowed values.
    NoneOf {
        /// Argument index.
        arg: u8,
        /// Allowed values.
        allowed: &'static [u32],
    },
}

/// One refused system call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// Its name (`man 2` page).
    pub name: &'static str,
    /// Its number on this architecture.
    pub nr: i64,
    /// When it is refused.
    pub when: When,
    /// The errno it fails with.
    pub errno: u32,
    /// True when bwrap's sandbox set-up needs it (so the launcher filter leaves it alone).
    pub setup: bool,
}

/// `CLONE_NEW*` flags `clone(2)` can take (`CLONE_NEWNS`, `CLONE_NEWCGROUP`,
/// `CLONE_NEWUTS`, `CLONE_NEWIPC`, `CLONE_NEWUSER`, `CLONE_NEWPID`, `CLONE_NEWNET`): Docker's
/// mask `0x7E020000`.
pub const CLONE_NAMESPACE_FLAGS: u32 = 0x7E02_0000;

/// The namespace flags `unshare(2)` can take: [`CLONE_NAMESPACE_FLAGS`] and `CLONE_NEWTIME`.
pub const UNSHARE_NAMESPACE_FLAGS: u32 = CLONE_NAMESPACE_FLAGS | 0x80;

/// `CLONE_NEWUSER`.
pub const CLONE_NEWUSER: u32 = 0x1000_0000;

/// The `personality(2)` values Docker allows: `PER_LINUX` (0), `UNAME26` (8),
/// `PER_LINUX32` (0x20000), both (0x20008) and the query `0xffffffff`.
pub const ALLOWED_PERSONAS: [u32; 5] = [0, 8, 0x20000, 0x20008, 0xffff_ffff];

/// Bit 30 of x86-64 system call numbers: the x32 ABI.
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;

const EPERM: u32 = libc::EPERM as u32;
const ENOSYS: u32 = libc::ENOSYS as u32;

fn deny(name: &'static str, nr: i64) -> Refused {
    Refused {
        name,
        nr,
        when: When::Always,
        errno: EPERM,
        setup: false,
    }
}

fn deny_setup(name: &'static str, nr: i64) -> Refused {
    Refused {
        setup: true,
        ..deny(name, nr)
    }
}

/// `open_tree_attr(2)` (Linux 6.15), the same number on x86-64 and aarch64.
const OPEN_TREE_ATTR_NR: i64 = 467;

/// Every refused system call, by family: the keyring; tracing and reading other
/// processes (`ptrace`, `process_vm_*`, `kcmp`, and, unlike Docker, `pidfd_getfd` and
/// `process_madvise`: a Docker container has no process it did not start, while a local
/// command's PID namespace has bwrap's init, whose file descriptors and memory these would
/// reach with the same ptrace check; see `plan::bwrap_args`); `bpf`, `perf_event_open`, `userfaultfd`,
/// `io_uring_*` (refused by Docker since 25.0); `kexec_*` and kernel modules; the mount
/// family and `pivot_root`; namespaces (`unshare` and `clone` with any `CLONE_NEW*` flag,
/// `setns`, and `clone3`, which fails with `ENOSYS`); swap, `reboot`, clocks, `acct`,
/// quotas, `syslog`, I/O ports, `vhangup`, `personality` other than Docker's values
/// ([`ALLOWED_PERSONAS`]), file handles, `fanotify_init`, `inotify_init*` (with `ENOSYS`:
/// inotify is counted per host uid), and the obsolete `uselib`,
/// `ustat`, `sysfs`, `nfsservctl`, `lookup_dcookie` and `*_module` calls.
pub fn refused() -> Vec<Refused> {
    let mut v = vec![
        deny("add_key", libc::SYS_add_key),
        deny("keyctl", libc::SYS_keyctl),
        deny("request_key", libc::SYS_request_key),
        deny("ptrace", libc::SYS_ptrace),
        deny("process_vm_readv", libc::SYS_process_vm_readv),
        deny("process_vm_writev", libc::SYS_process_vm_writev),
        deny("kcmp", libc::SYS_kcmp),
        deny("pidfd_getfd", libc::SYS_pidfd_getfd),
        deny("process_madvise", libc::SYS_process_madvise),
        deny("bpf", libc::SYS_bpf),
        deny("perf_event_open", libc::SYS_perf_event_open),
        deny("userfaultfd", libc::SYS_userfaultfd),
        deny("io_uring_setup", libc::SYS_io_uring_setup),
        deny("io_uring_enter", libc::SYS_io_uring_enter),
        deny("io_uring_register", libc::SYS_io_uring_register),
        deny("kexec_load", libc::SYS_kexec_load),
        deny("kexec_file_load", libc::SYS_kexec_file_load),
        deny("init_module", libc::SYS_init_module),
        deny("finit_module", libc::SYS_finit_module),
        deny("delete_module", libc::SYS_delete_module),
        deny_setup("mount", libc::SYS_mount),
        deny_setup("umount2", libc::SYS_umount2),
        deny_setup("pivot_root", libc::SYS_pivot_root),
        deny_setup("move_mount", libc::SYS_move_mount),
        deny_setup("open_tree", libc::SYS_open_tree),
        deny_setup("open_tree_attr", OPEN_TREE_ATTR_NR),
        deny_setup("fsopen", libc::SYS_fsopen),
        deny_setup("fsconfig", libc::SYS_fsconfig),
        deny_setup("fsmount", libc::SYS_fsmount),
        deny_setup("fspick", libc::SYS_fspick),
        deny_setup("mount_setattr", libc::SYS_mount_setattr),
        Refused {
            name: "unshare",
            nr: libc::SYS_unshare,
            when: When::AnyFlag {
                arg: 0,
                mask: UNSHARE_NAMESPACE_FLAGS,
            },
            errno: EPERM,
            setup: true,
        },
        Refused {
            name: "clone",
            nr: libc::SYS_clone,
            when: When::AnyFlag {
                arg: 0,
                mask: CLONE_NAMESPACE_FLAGS,
            },
            errno: EPERM,
            setup: true,
        },
        // The launcher filter refuses user namespaces even to bwrap (a root bwrap makes none).
        Refused {
            name: "unshare",
            nr: libc::SYS_unshare,
            when: When::AnyFlag {
                arg: 0,
                mask: CLONE_NEWUSER,
            },
            errno: EPERM,
            setup: false,
        },
        Refused {
            name: "clone",
            nr: libc::SYS_clone,
            when: When::AnyFlag {
                arg: 0,
                mask: CLONE_NEWUSER,
            },
            errno: EPERM,
            setup: false,
        },
        Refused {
            name: "clone3",
            nr: libc::SYS_clone3,
            when: When::Always,
            errno: ENOSYS,
            setup: false,
        },
        deny("setns", libc::SYS_setns),
        deny("swapon", libc::SYS_swapon),
        deny("swapoff", libc::SYS_swapoff),
        deny("reboot", libc::SYS_reboot),
        deny("settimeofday", libc::SYS_settimeofday),
        deny("clock_settime", libc::SYS_clock_settime),
        deny("clock_adjtime", libc::SYS_clock_adjtime),
        deny("adjtimex", libc::SYS_adjtimex),
        deny("acct", libc::SYS_acct),
        deny("quotactl", libc::SYS_quotactl),
        deny("quotactl_fd", libc::SYS_quotactl_fd),
        deny("lookup_dcookie", libc::SYS_lookup_dcookie),
        deny("open_by_handle_at", libc::SYS_open_by_handle_at),
        deny("name_to_handle_at", libc::SYS_name_to_handle_at),
        deny("syslog", libc::SYS_syslog),
        deny("vhangup", libc::SYS_vhangup),
        Refused {
            name: "personality",
            nr: libc::SYS_personality,
            when: When::NoneOf {
                arg: 0,
                allowed: &ALLOWED_PERSONAS,
            },
            errno: EPERM,
            setup: false,
        },
        deny("fanotify_init", libc::SYS_fanotify_init),
        deny("nfsservctl", libc::SYS_nfsservctl),
        // Inotify instances and watches are counted per host uid in the kernel
        // (`fs.inotify.max_user_instances`, 128 here), and no capability exempts them: a
        // command running as root would use up root's instances for the host and every
        // other machine (the issue 8 break-it pass). A machine behaves as a kernel built
        // without inotify; `tail -f` and file watchers fall back to polling.
        Refused {
            name: "inotify_init1",
            nr: libc::SYS_inotify_init1,
            when: When::Always,
            errno: ENOSYS,
            setup: false,
        },
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([
        deny("iopl", libc::SYS_iopl),
        deny("ioperm", libc::SYS_ioperm),
        deny("uselib", libc::SYS_uselib),
        deny("ustat", libc::SYS_ustat),
        deny("sysfs", libc::SYS_sysfs),
        deny("create_module", 174),
        deny("get_kernel_syms", 177),
        deny("query_module", 178),
        Refused {
            name: "inotify_init",
            nr: libc::SYS_inotify_init,
            when: When::Always,
            errno: ENOSYS,
            setup: false,
        },
    ]);
    v
}

/// Which of the two programs to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every entry: loaded by bwrap for the command.
    Command,
    /// The entries bwrap's set-up does not need: loaded by the launcher for bwrap itself.
    Launcher,
}

const BPF_LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const BPF_JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const BPF_JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const BPF_RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

fn rules_of(entry: &Refused) -> Result<Vec<SeccompRule>, seccompiler::BackendError> {
    let cond =
        |arg, op, value| SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, u64::from(value));
    Ok(match entry.when {
        When::Always => Vec::new(),
        When::AnyFlag { arg, mask } => (0..32)
            .map(|bit| 1u32 << bit)
            .filter(|flag| mask & flag != 0)
            .map(|flag| {
                SeccompRule::new(vec![cond(
                    arg,
                    SeccompCmpOp::MaskedEq(u64::from(flag)),
                    flag,
                )?])
            })
            .collect::<Result<_, _>>()?,
        When::NoneOf { arg, allowed } => vec![SeccompRule::new(
            allowed
                .iter()
                .map(|v| cond(arg, SeccompCmpOp::Ne, *v))
                .collect::<Result<_, _>>()?,
        )?],
    })
}

/// Builds the BPF program of `scope` for this architecture: the architecture check, the
/// `ENOSYS` rules (`clone3`; x32 numbers on x86-64), then the `EPERM` table entries of
/// `scope`; anything else is allowed.
///
/// # Errors
/// seccompiler's error for an architecture it does not know (only x86-64, aarch64 and
/// riscv64 are) or a program over the kernel's 4096 instructions.
pub fn program(scope: Scope) -> Result<BpfProgram, seccompiler::Error> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)?;
    let entries: Vec<Refused> = refused()
        .into_iter()
        .filter(|e| scope == Scope::Command || !e.setup)
        .collect();
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    let mut enosys = Vec::new();
    for entry in &entries {
        if entry.errno == ENOSYS {
            enosys.push(entry.nr);
            continue;
        }
        let new = rules_of(entry).map_err(seccompiler::Error::Backend)?;
        match rules.get_mut(&entry.nr) {
            // An `Always` entry (no rules) already refuses every call.
            Some(existing) if existing.is_empty() => {}
            Some(existing) if new.is_empty() => existing.clear(),
            Some(existing) => existing.extend(new),
            None => {
                rules.insert(entry.nr, new);
            }
        }
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(EPERM),
        arch,
    )?;
    let mut program: BpfProgram = filter.try_into()?;
    // seccompiler's program starts with the 3-instruction architecture check (load arch,
    // jump over the kill when it matches, kill); the ENOSYS rules go right after it. Its
    // jumps are relative and none crosses this point, so inserting here is safe.
    let mut prefix = vec![stmt(BPF_LD_W_ABS, 0)];
    let ret_enosys = libc::SECCOMP_RET_ERRNO | ENOSYS;
    for nr in &enosys {
        prefix.push(jump(BPF_JEQ_K, *nr as u32, 0, 1));
        prefix.push(stmt(BPF_RET_K, ret_enosys));
    }
    if cfg!(target_arch = "x86_64") {
        prefix.push(jump(BPF_JGE_K, X32_SYSCALL_BIT, 0, 1));
        prefix.push(stmt(BPF_RET_K, ret_enosys));
    }
    program.splice(3..3, prefix);
    Ok(program)
}

/// The bytes of a program as bwrap's `--seccomp FD` reads them: the `struct sock_filter`
/// array in native byte order.
pub fn program_bytes(program: &[sock_filter]) -> Vec<u8> {
    let mut out = Vec::with_capacity(program.len() * 8);
    for f in program {
        out.extend_from_slice(&f.code.to_ne_bytes());
        out.push(f.jt);
        out.push(f.jf);
        out.extend_from_slice(&f.k.to_ne_bytes());
    }
    out
}

/// The filters of one factory, built once: the command program in a sealed memfd (bwrap's
/// `--seccomp FD`, re-opened per command so each bwrap reads it from the start) and the
/// launcher program when the launcher loads one.
#[derive(Debug)]
pub(crate) struct SeccompSetup {
    command: std::os::fd::OwnedFd,
    launcher: Option<BpfProgram>,
}

impl SeccompSetup {
    /// Builds both programs; `launcher` says whether the launcher loads its own (a root
    /// host process, see the module docs).
    ///
    /// # Errors
    /// The program cannot be built for this architecture, or the memfd cannot be made.
    pub fn new(launcher: bool) -> std::io::Result<Self> {
        use nix::sys::memfd::{memfd_create, MFdFlags};
        use std::io::Write;
        let build = |scope| {
            program(scope).map_err(|e| {
                std::io::Error::other(format!("build the {scope:?} seccomp filter: {e}"))
            })
        };
        let bytes = program_bytes(&build(Scope::Command)?);
        let fd = memfd_create(
            "shellbox-seccomp",
            MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
        )?;
        let mut file = std::fs::File::from(fd);
        file.write_all(&bytes)?;
        // Nothing may change the program once commands read it.
        let seals =
            libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
        use std::os::fd::AsRawFd;
        // SAFETY: fcntl on an fd we own.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Self {
            command: file.into(),
            launcher: if launcher {
                Some(build(Scope::Launcher)?)
            } else {
                None
            },
        })
    }

    /// The fd number of the command program's memfd (close-on-exec in this process).
    pub fn command_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.command)
    }

    /// The program the launcher loads before it execs bwrap, if any.
    pub fn launcher(&self) -> Option<&[sock_filter]> {
        self.launcher.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A classic-BPF interpreter for seccomp programs (the instructions seccompiler and the
    /// prefix above emit), so each rule is checked against the program actually built.
    fn run(program: &[sock_filter], arch: u32, nr: u32, args: [u64; 6]) -> u32 {
        let mut data = Vec::new();
        data.extend_from_slice(&nr.to_ne_bytes());
        data.extend_from_slice(&arch.to_ne_bytes());
        data.extend_from_slice(&0u64.to_ne_bytes());
        for a in args {
            data.extend_from_slice(&a.to_ne_bytes());
        }
        let (mut acc, mut pc) = (0u32, 0usize);
        loop {
            let f = &program[pc];
            let class = u32::from(f.code) & 0x07;
            let op = u32::from(f.code) & 0xf0;
            match class {
                c if c == libc::BPF_LD => {
                    let at = f.k as usize;
                    acc = u32::from_ne_bytes(data[at..at + 4].try_into().unwrap());
                    pc += 1;
                }
                c if c == libc::BPF_ALU => {
                    assert_eq!(op, libc::BPF_AND, "unexpected ALU op");
                    acc &= f.k;
                    pc += 1;
                }
                c if c == libc::BPF_JMP => {
                    let taken = match op {
                        o if o == libc::BPF_JA => {
                            pc += 1 + f.k as usize;
                            continue;
                        }
                        o if o == libc::BPF_JEQ => acc == f.k,
                        o if o == libc::BPF_JGE => acc >= f.k,
                        o if o == libc::BPF_JGT => acc > f.k,
                        o if o == libc::BPF_JSET => acc & f.k != 0,
                        _ => panic!("unexpected jump {:#x}", f.code),
                    };
                    pc += 1 + usize::from(if taken { f.jt } else { f.jf });
                }
                c if c == libc::BPF_RET => return f.k,
                c if c == libc::BPF_MISC => {
                    // TAX / TXA are not emitted.
                    panic!("unexpected misc {:#x}", f.code)
                }
                _ => panic!("unexpected instruction {:#x}", f.code),
            }
        }
    }

    fn arch() -> u32 {
        if cfg!(target_arch = "x86_64") {
            0xC000_003E
        } else {
            0xC000_00B7
        }
    }

    const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
    const DENY: u32 = libc::SECCOMP_RET_ERRNO | EPERM;
    const NOSYS: u32 = libc::SECCOMP_RET_ERRNO | ENOSYS;

    fn call(p: &[sock_filter], nr: i64, args: [u64; 6]) -> u32 {
        run(p, arch(), nr as u32, args)
    }

    #[test]
    fn command_filter_refuses_every_family_and_allows_the_rest() {
        let p = program(Scope::Command).unwrap();
        for entry in refused() {
            let args = match entry.when {
                When::Always => [0; 6],
                When::AnyFlag { mask, .. } => {
                    [u64::from(mask & mask.wrapping_neg()), 0, 0, 0, 0, 0]
                }
                When::NoneOf { .. } => [6, 0, 0, 0, 0, 0],
            };
            let want = if entry.errno == ENOSYS { NOSYS } else { DENY };
            assert_eq!(call(&p, entry.nr, args), want, "{}", entry.name);
        }
        for nr in [
            libc::SYS_read,
            libc::SYS_write,
            libc::SYS_openat,
            libc::SYS_execve,
            libc::SYS_getpid,
            libc::SYS_wait4,
            libc::SYS_prctl,
        ] {
            assert_eq!(call(&p, nr, [0; 6]), ALLOW, "{nr}");
        }
        // fork(3) is clone(SIGCHLD); threads use CLONE_VM|CLONE_THREAD|...
        assert_eq!(call(&p, libc::SYS_clone, [17, 0, 0, 0, 0, 0]), ALLOW);
        assert_eq!(call(&p, libc::SYS_clone, [0x3d0f00, 0, 0, 0, 0, 0]), ALLOW);
        for flag in [
            libc::CLONE_NEWUSER,
            libc::CLONE_NEWNS,
            libc::CLONE_NEWPID,
            libc::CLONE_NEWNET,
            libc::CLONE_NEWCGROUP,
            libc::CLONE_NEWIPC,
            libc::CLONE_NEWUTS,
        ] {
            let flags = (flag | libc::SIGCHLD) as u64;
            assert_eq!(call(&p, libc::SYS_clone, [flags, 0, 0, 0, 0, 0]), DENY);
            assert_eq!(call(&p, libc::SYS_unshare, [flags, 0, 0, 0, 0, 0]), DENY);
        }
        assert_eq!(call(&p, libc::SYS_unshare, [0x80, 0, 0, 0, 0, 0]), DENY);
        assert_eq!(
            call(
                &p,
                libc::SYS_unshare,
                [libc::CLONE_FS as u64, 0, 0, 0, 0, 0]
            ),
            ALLOW
        );
        assert_eq!(call(&p, libc::SYS_clone3, [0; 6]), NOSYS);
        for persona in ALLOWED_PERSONAS {
            assert_eq!(
                call(
                    &p,
                    libc::SYS_personality,
                    [u64::from(persona), 0, 0, 0, 0, 0]
                ),
                ALLOW
            );
        }
        assert_eq!(
            call(&p, libc::SYS_personality, [0x0040000, 0, 0, 0, 0, 0]),
            DENY
        );
        if cfg!(target_arch = "x86_64") {
            // x32 numbers (keyctl is 0x40000000 + 250) and foreign architectures.
            assert_eq!(run(&p, arch(), X32_SYSCALL_BIT | 250, [0; 6]), NOSYS);
            assert_eq!(run(&p, arch(), X32_SYSCALL_BIT, [0; 6]), NOSYS);
            assert_eq!(
                run(&p, 0x4000_0003, 1, [0; 6]),
                libc::SECCOMP_RET_KILL_PROCESS
            );
        }
    }

    #[test]
    fn launcher_filter_leaves_bwrap_its_set_up() {
        let p = program(Scope::Launcher).unwrap();
        for nr in [
            libc::SYS_mount,
            libc::SYS_umount2,
            libc::SYS_pivot_root,
            libc::SYS_open_tree,
        ] {
            assert_eq!(call(&p, nr, [0; 6]), ALLOW, "{nr}");
        }
        let ns = (libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWNET) as u64;
        assert_eq!(call(&p, libc::SYS_clone, [ns | 17, 0, 0, 0, 0, 0]), ALLOW);
        assert_eq!(call(&p, libc::SYS_unshare, [ns, 0, 0, 0, 0, 0]), ALLOW);
        let user = libc::CLONE_NEWUSER as u64;
        assert_eq!(call(&p, libc::SYS_clone, [user | 17, 0, 0, 0, 0, 0]), DENY);
        assert_eq!(
            call(&p, libc::SYS_unshare, [user | ns, 0, 0, 0, 0, 0]),
            DENY
        );
        assert_eq!(call(&p, libc::SYS_clone3, [0; 6]), NOSYS);
        for nr in [
            libc::SYS_keyctl,
            libc::SYS_add_key,
            libc::SYS_ptrace,
            libc::SYS_bpf,
            libc::SYS_setns,
            libc::SYS_process_vm_writev,
            libc::SYS_pidfd_getfd,
            libc::SYS_process_madvise,
        ] {
            assert_eq!(call(&p, nr, [0; 6]), DENY, "{nr}");
        }
    }

    #[test]
    fn program_bytes_are_sock_filters() {
        let p = [jump(BPF_JEQ_K, 0x0102_0304, 5, 6)];
        let b = program_bytes(&p);
        assert_eq!(b.len(), 8);
        assert_eq!(&b[..2], &BPF_JEQ_K.to_ne_bytes());
        assert_eq!(b[2..4], [5, 6]);
        assert_eq!(&b[4..], &0x0102_0304u32.to_ne_bytes());
    }
}
