//! What the machine says about itself: `uname` (coreutils 9.1: `-a -s -n -r -v -m -p -i
//! -o`), `hostname` (`-s -f` and their long forms), `whoami`, `id` (`-u -g -G -n -r`, a
//! user operand), `nproc` (`--all`, `--ignore=N`) and `which` (debianutils 5.7: `-a`).
//! The machine is a fixed virtual one: Linux on x86_64 named `sandbox`, one user (root,
//! uid 0), [`NPROC`] processors. Other options fail visibly with the tool's usage status.

use super::opts::{Arg, Parser};
use super::Ctx;
use crate::shell::R;

/// The machine's name.
pub(crate) const HOSTNAME: &str = "sandbox";
/// The processors the machine reports.
pub(crate) const NPROC: usize = 2;
/// `uname`'s fields: kernel name, node name, release, version, machine, processor,
/// hardware platform, operating system.
const UNAME: [&str; 8] = [
    "Linux",
    HOSTNAME,
    "6.1.0-shellbox",
    "#1 SMP PREEMPT_DYNAMIC Debian 6.1.0 (shellbox-sim)",
    "x86_64",
    "unknown",
    "unknown",
    "GNU/Linux",
];

/// hostname 3.23's usage text.
const HOSTNAME_USAGE: &str =
    "Usage: hostname [-b] {hostname|-F file}         set host name (from file)
       hostname [-a|-A|-d|-f|-i|-I|-s|-y]       display formatted name
       hostname                                 display host name

       {yp,nis,}domainname {nisdomain|-F file}  set NIS domain name (from file)
       {yp,nis,}domainname                      display NIS domain name

       dnsdomainname                            display dns domain name

       hostname -V|--version|-h|--help          print info and exit

Program name:
       {yp,nis,}domainname=hostname -y
       dnsdomainname=hostname -d

Program options:
    -a, --alias            alias names
    -A, --all-fqdns        all long host names (FQDNs)
    -b, --boot             set default hostname if none available
    -d, --domain           DNS domain name
    -f, --fqdn, --long     long host name (FQDN)
    -F, --file             read host name or NIS domain name from given file
    -i, --ip-address       addresses for the host name
    -I, --all-ip-addresses all addresses for the host
    -s, --short            short host name
    -y, --yp, --nis        NIS/YP domain name

Description:
   This command can get or set the host name or the NIS domain name. You can
   also get the DNS domain or the FQDN (fully qualified domain name).
   Unless you are using bind or NIS for host lookups you can change the
   FQDN (Fully Qualified Domain Name) and the DNS domain name (which is
   part of the FQDN) in the /etc/hosts file.
";

/// Fails for an extra operand as coreutils does (status 1).
fn extra(cx: &mut Ctx<'_, '_>, prog: &str, op: &str) -> R<i32> {
    cx.err_line(&format!(
        "{prog}: extra operand '{op}'\nTry '{prog} --help' for more information."
    ));
    Ok(1)
}

pub(super) fn uname(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let longs = &[
        "all",
        "kernel-name",
        "nodename",
        "kernel-release",
        "kernel-version",
        "machine",
        "processor",
        "hardware-platform",
        "operating-system",
    ];
    let mut p = Parser::new("uname", args, longs);
    let mut want = [false; 8];
    let mut all = false;
    loop {
        let i = match p.next_in(cx)? {
            Ok(Some(Arg::Short('a'))) | Ok(Some(Arg::Long("all"))) => {
                all = true;
                continue;
            }
            Ok(Some(Arg::Short(c))) => match "snrvmpio".find(c) {
                Some(i) => i,
                None => return super::usage(cx, p.invalid_short(c), 1),
            },
            Ok(Some(Arg::Long(l))) => longs[1..].iter().position(|x| *x == l).unwrap_or(0),
            Ok(Some(Arg::Operand(o))) => return extra(cx, "uname", &o),
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, 1),
        };
        want[i] = true;
    }
    let fields: Vec<&str> = if all {
        // -a leaves out the processor and platform when unknown
        UNAME
            .iter()
            .enumerate()
            .filter(|(i, v)| !(matches!(i, 5 | 6) && **v == "unknown"))
            .map(|(_, v)| *v)
            .collect()
    } else if want.iter().any(|w| *w) {
        UNAME
            .iter()
            .zip(want)
            .filter(|(_, w)| *w)
            .map(|(v, _)| *v)
            .collect()
    } else {
        vec![UNAME[0]]
    };
    cx.out(format!("{}\n", fields.join(" ")).as_bytes())?;
    Ok(0)
}

pub(super) fn hostname(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new("hostname", args, &["short", "fqdn", "long"]);
    loop {
        match p.next_in(cx)? {
            Ok(Some(Arg::Short('s' | 'f'))) | Ok(Some(Arg::Long(_))) => {}
            Ok(Some(Arg::Short(c @ ('a' | 'A' | 'b' | 'd' | 'F' | 'i' | 'I' | 'y')))) => {
                return cx.unsupported_status(&format!("hostname -{c}"), 255)
            }
            Ok(Some(Arg::Short(c))) => {
                // net-tools prints its usage on standard output
                cx.err_line(&format!("hostname: invalid option -- '{c}'"));
                cx.out(HOSTNAME_USAGE.as_bytes())?;
                return Ok(255);
            }
            Ok(Some(Arg::Operand(_))) => {
                return cx.unsupported_status("hostname: setting the host name", 1)
            }
            Ok(None) => break,
            Err(u) => {
                cx.err_line(u.0.lines().next().unwrap_or_default());
                cx.out(HOSTNAME_USAGE.as_bytes())?;
                return Ok(255);
            }
        }
    }
    cx.out(format!("{HOSTNAME}\n").as_bytes())?;
    Ok(0)
}

pub(super) fn whoami(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new("whoami", args, &[]);
    match p.next_in(cx)? {
        Ok(None) => {}
        Ok(Some(Arg::Operand(o))) => return extra(cx, "whoami", &o),
        Ok(Some(Arg::Short(c))) => return super::usage(cx, p.invalid_short(c), 1),
        Ok(Some(Arg::Long(_))) => return cx.unsupported_status("whoami option", 1),
        Err(u) => return super::usage(cx, u, 1),
    }
    cx.out(b"root\n")?;
    Ok(0)
}

pub(super) fn id(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new("id", args, &["user", "group", "groups", "name", "real"]);
    let (mut what, mut name) = (None, false);
    let mut users = Vec::new();
    loop {
        match p.next_in(cx)? {
            Ok(Some(Arg::Short('u'))) | Ok(Some(Arg::Long("user"))) => what = Some('u'),
            Ok(Some(Arg::Short('g'))) | Ok(Some(Arg::Long("group"))) => what = Some('g'),
            Ok(Some(Arg::Short('G'))) | Ok(Some(Arg::Long("groups"))) => what = Some('G'),
            Ok(Some(Arg::Short('n'))) | Ok(Some(Arg::Long("name"))) => name = true,
            Ok(Some(Arg::Short('r'))) | Ok(Some(Arg::Long("real"))) => {}
            Ok(Some(Arg::Short(c @ ('a' | 'Z' | 'z')))) => {
                return cx.unsupported_status(&format!("id -{c}"), 1)
            }
            Ok(Some(Arg::Short(c))) => return super::usage(cx, p.invalid_short(c), 1),
            Ok(Some(Arg::Long(l))) => return cx.unsupported_status(&format!("id --{l}"), 1),
            Ok(Some(Arg::Operand(o))) => users.push(o),
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, 1),
        }
    }
    if users.len() > 1 {
        return extra(cx, "id", &users[1]);
    }
    if let Some(u) = users.first() {
        if u != "root" && u != "0" {
            cx.err_line(&format!("id: '{u}': no such user"));
            return Ok(1);
        }
    }
    let line = match (what, name) {
        (None, true) => {
            cx.err_line("id: cannot print only names or real IDs in default format");
            return Ok(1);
        }
        (None, false) => "uid=0(root) gid=0(root) groups=0(root)",
        (Some(_), true) => "root",
        (Some(_), false) => "0",
    };
    cx.out(format!("{line}\n").as_bytes())?;
    Ok(0)
}

pub(super) fn nproc(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut p = Parser::new("nproc", args, &["all", "ignore"]);
    let mut ignore = 0usize;
    loop {
        match p.next_in(cx)? {
            Ok(Some(Arg::Long("all"))) => {}
            Ok(Some(Arg::Long("ignore"))) => {
                let v = match p.value() {
                    Ok(v) => v,
                    Err(u) => return super::usage(cx, u, 1),
                };
                match v.parse() {
                    Ok(n) => ignore = n,
                    Err(_) => {
                        cx.err_line(&format!("nproc: invalid number: '{v}'"));
                        return Ok(1);
                    }
                }
            }
            Ok(Some(Arg::Operand(o))) => return extra(cx, "nproc", &o),
            Ok(Some(Arg::Short(c))) => return super::usage(cx, p.invalid_short(c), 1),
            Ok(Some(Arg::Long(l))) => return cx.unsupported_status(&format!("nproc --{l}"), 1),
            Ok(None) => break,
            Err(u) => return super::usage(cx, u, 1),
        }
    }
    let n = NPROC.saturating_sub(ignore).max(1);
    cx.out(format!("{n}\n").as_bytes())?;
    Ok(0)
}

pub(super) fn which(cx: &mut Ctx<'_, '_>) -> R<i32> {
    let args = cx.args();
    let mut all = false;
    let mut names = Vec::new();
    let mut opts_done = false;
    for a in args {
        if !opts_done && a == "--" {
            opts_done = true;
        } else if !opts_done && a.starts_with('-') && a.len() > 1 {
            for c in a[1..].chars() {
                if c == 'a' {
                    all = true;
                } else {
                    // debianutils prints its usage on standard output
                    cx.err_line(&format!("Illegal option -{c}"));
                    cx.out(b"Usage: /usr/bin/which [-a] args\n")?;
                    return Ok(2);
                }
            }
        } else {
            opts_done = true;
            names.push(a.clone());
        }
    }
    let path = cx.env("PATH").unwrap_or_default();
    let cwd = cx.cwd().to_string();
    let mut status = if names.is_empty() { 1 } else { 0 };
    let mut out = String::new();
    for name in &names {
        cx.check_time()?;
        let candidates: Vec<String> = if name.contains('/') {
            vec![name.clone()]
        } else {
            path.split(':')
                .map(|d| {
                    let d = if d.is_empty() { "." } else { d };
                    format!("{}/{name}", d.trim_end_matches('/'))
                })
                .collect()
        };
        let mut found = false;
        for c in candidates {
            if executable(cx, &cwd, &c) {
                out.push_str(&c);
                out.push('\n');
                found = true;
                if !all {
                    break;
                }
            }
        }
        if !found {
            status = 1;
        }
    }
    cx.out(out.as_bytes())?;
    Ok(status)
}

/// Whether `path` is an executable file (a program of the table or a file with an `x`
/// bit), following links.
fn executable(cx: &mut Ctx<'_, '_>, cwd: &str, path: &str) -> bool {
    match cx.vfs().resolve(cwd, path, true) {
        Ok(ino) => {
            let node = cx.vfs().get(ino);
            match node.kind {
                crate::vfs::Kind::Exe(_) => true,
                crate::vfs::Kind::File(_) => node.mode & 0o111 != 0,
                _ => false,
            }
        }
        Err(_) => false,
    }
}
