//! Pure decisions: container and exec configurations, the exec wrapper, the PGID header,
//! the reading of engine refusals. No I/O here.

use std::collections::{BTreeMap, HashMap};

use bollard::models::{ContainerCreateBody, DeviceRequest, ExecConfig, HostConfig};
use bytes::{Bytes, BytesMut};
use shellbox_core::{Command, Error, MachineSpec, NetworkPolicy};

use crate::labels;

/// Who created a container: written into its labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owner {
    pub pid: u32,
    pub start: Option<u64>,
    pub host: String,
}

impl Owner {
    /// The current process on this host.
    pub(crate) fn current() -> Self {
        let pid = std::process::id();
        Self {
            pid,
            start: process_start_ticks(pid),
            host: host_name(),
        }
    }

    pub(crate) fn labels(&self) -> HashMap<String, String> {
        let mut l = HashMap::new();
        l.insert(labels::MACHINE.to_string(), "1".to_string());
        l.insert(labels::OWNER_PID.to_string(), self.pid.to_string());
        l.insert(labels::OWNER_HOST.to_string(), self.host.clone());
        if let Some(start) = self.start {
            l.insert(labels::OWNER_START.to_string(), start.to_string());
        }
        l
    }
}

/// This host's name (`/proc/sys/kernel/hostname`, else `/etc/hostname`, else `"unknown"`).
pub(crate) fn host_name() -> String {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|p| {
            std::fs::read_to_string(p)
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        })
        .unwrap_or_else(|| "unknown".to_string())
}

/// Field 22 of `/proc/<pid>/stat` (start time in clock ticks since boot), if readable.
pub(crate) fn process_start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    // rest starts at field 3 (state); field 22 is the 20th of these.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// What the container runs so it stays up; the image's own entrypoint and cmd never run.
///
/// It runs as the container's PID 1 itself (no Docker init): inside its PID namespace the
/// kernel delivers to PID 1 only signals it installed a handler for, and a shell installs
/// none here, so no command can stop it (`kill -9 -1`, `killall sh`, `kill -9 1`); killing
/// its `sleep` only starts the next one. It reaps orphans too: a shell waiting for its
/// foreground job waits for any child (`waitpid(-1)`), so what a command leaves behind and
/// reparents to PID 1 is collected when it ends.
pub(crate) const KEEPALIVE: &str = "while :; do sleep 3600; done";

/// The container configuration for `spec` (the image already resolved to `image`), with
/// the factory's own `labels` beside the owner's (which win: the factory refuses keys in
/// the `dev.shellbox.` namespace).
pub(crate) fn container_config(
    spec: &MachineSpec,
    image: &str,
    runtime: Option<&str>,
    owner: &Owner,
    labels: &BTreeMap<String, String>,
) -> ContainerCreateBody {
    let mut all_labels: HashMap<String, String> =
        labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    all_labels.extend(owner.labels());
    let env: Vec<String> = spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let host_config = HostConfig {
        // The keep-alive is PID 1 (see KEEPALIVE), so no command can stop the container.
        init: Some(false),
        network_mode: Some(
            match spec.network {
                NetworkPolicy::Deny => "none",
                NetworkPolicy::Allow => "bridge",
            }
            .to_string(),
        ),
        memory: spec
            .memory_mb
            .map(|mb| mb.saturating_mul(1024 * 1024).min(i64::MAX as u64) as i64),
        nano_cpus: spec.cpus.map(|c| i64::from(c) * 1_000_000_000),
        storage_opt: spec
            .storage_mb
            .map(|mb| HashMap::from([("size".to_string(), format!("{mb}M"))])),
        device_requests: (spec.gpus > 0).then(|| {
            vec![DeviceRequest {
                driver: Some(String::new()),
                count: Some(i64::from(spec.gpus)),
                device_ids: None,
                capabilities: Some(vec![vec!["gpu".to_string()]]),
                options: None,
            }]
        }),
        runtime: runtime.map(str::to_string),
        // Docker's default is no bound (`pids.max = max`): a fork bomb would reach the
        // host's pid_max. The spec's bound (default 1024) goes to the pids cgroup.
        pids_limit: Some(i64::from(spec.pids_limit)),
        ..Default::default()
    };
    ContainerCreateBody {
        image: Some(image.to_string()),
        entrypoint: Some(vec!["/bin/sh".to_string()]),
        cmd: Some(vec!["-c".to_string(), KEEPALIVE.to_string()]),
        env: (!env.is_empty()).then_some(env),
        labels: Some(all_labels),
        network_disabled: None,
        attach_stdin: Some(false),
        attach_stdout: Some(false),
        attach_stderr: Some(false),
        tty: Some(false),
        host_config: Some(host_config),
        ..Default::default()
    }
}

/// The exec wrapper. Run as `/bin/sh -c WRAPPER sh <setsid> <command id> <argv...>`.
///
/// The outer shell first takes an audit session of its own where the kernel lets it
/// (writing `0` to `/proc/self/loginuid`, allowed once to a process whose login uid is
/// unset: the value is only the handle of the session here, and writing a constant forks
/// nothing, so a machine at its least pids limit still runs the wrapper; `$(id -u)` there
/// made `limits_below_the_least_a_machine_runs_with_are_invalid_input` fail half the time; the
/// new session id, `/proc/self/sessionid`, is inherited by every process started after and
/// none can change it without `CAP_AUDIT_CONTROL`, which Docker's default capabilities
/// lack). It keeps stdin on fd 3, starts `setsid /bin/sh -c INNER` in the background (a
/// background job of a non-interactive shell is never a group leader, so `setsid` makes a
/// new session and process group without forking), waits for it, then writes
/// [`end_marker`] to stdout and to stderr and exits with the command's status. The inner
/// shell prints `SHELLBOX_PGID:<its pid>` (`SHELLBOX_PGID:<its pid>:<audit session>` when
/// the outer shell got one) and execs argv.
///
/// The command runs with `SHELLBOX_COMMAND_ID=<command id>` in its environment (the outer
/// shell itself does not have it), which its descendants inherit even when they leave the
/// group with `setsid`. What the command leaves in the background keeps running after it
/// ends (the process model); the end markers, behind everything the command wrote, tell the
/// host that the command is over although a background process may hold its output open.
/// A timeout or a cancellation kills by group, audit session and marker ([`KILL_GROUP`]).
pub(crate) const WRAPPER: &str = r#"s=$1; m=$2; shift 2
a=
if echo 0 > /proc/self/loginuid 2>/dev/null; then
  read -r a < /proc/self/sessionid 2>/dev/null
  case "$a" in ''|*[!0-9]*|4294967295) a=;; esac
fi
exec 3<&0
SHELLBOX_COMMAND_ID=$m "$s" /bin/sh -c 'echo "SHELLBOX_PGID:$$${1:+:$1}"; shift; exec "$@"' sh "$a" "$@" <&3 3<&- &
p=$!
exec 3<&- 4>&2 2>/dev/null
wait "$p"
r=$?
printf '\000SHELLBOX_END:%s\n' "$m"
printf '\000SHELLBOX_END:%s\n' "$m" >&4
exit "$r""#;

/// What [`WRAPPER`] writes to stdout and to stderr once the command's main process has
/// ended: `\0SHELLBOX_END:<command id>\n`.
pub(crate) fn end_marker(command_id: &str) -> Vec<u8> {
    let mut m = b"\0SHELLBOX_END:".to_vec();
    m.extend_from_slice(command_id.as_bytes());
    m.push(b'\n');
    m
}

/// Finds [`end_marker`] in one output stream of an exec, chunk by chunk: what comes before
/// it is the command's output; the marker and what follows (a background process's later
/// writes) are not. A chunk's tail that could begin the marker is held until the next
/// chunk tells (at most the marker's length less one byte).
#[derive(Debug)]
pub(crate) struct EndScanner {
    marker: Vec<u8>,
    held: BytesMut,
    found: bool,
}

impl EndScanner {
    /// A scanner for `marker` (non-empty, starting with a NUL byte).
    pub(crate) fn new(marker: Vec<u8>) -> Self {
        EndScanner {
            marker,
            held: BytesMut::new(),
            found: false,
        }
    }

    /// Whether the marker was seen.
    pub(crate) fn found(&self) -> bool {
        self.found
    }

    /// The part of `chunk` that is output (nothing once the marker was seen).
    pub(crate) fn feed(&mut self, chunk: Bytes) -> Option<Bytes> {
        if self.found {
            return None;
        }
        let data = if self.held.is_empty() {
            chunk
        } else {
            self.held.extend_from_slice(&chunk);
            self.held.split().freeze()
        };
        let first = self.marker[0];
        let mut at = 0;
        while let Some(i) = data[at..].iter().position(|&b| b == first) {
            let i = at + i;
            let rest = &data[i..];
            if rest.len() >= self.marker.len() {
                if rest[..self.marker.len()] == self.marker[..] {
                    self.found = true;
                    return (i > 0).then(|| data.slice(..i));
                }
            } else if self.marker.starts_with(rest) {
                self.held.extend_from_slice(rest);
                return (i > 0).then(|| data.slice(..i));
            }
            at = i + 1;
        }
        (!data.is_empty()).then_some(data)
    }

    /// What is still held (the stream ended without the marker).
    pub(crate) fn finish(&mut self) -> Option<Bytes> {
        (!self.held.is_empty()).then(|| self.held.split().freeze())
    }
}

/// Run as root after a timeout or a cancelled stream: `sh -c KILL_GROUP sh <pgid> <command
/// id> [<audit session>]`. Kills the group and every process of the audit session
/// (`/proc/PID/sessionid`; see [`WRAPPER`]) or, without one, every process whose
/// environment carries `SHELLBOX_COMMAND_ID=<command id>`, then every 50 ms checks
/// `/proc/*` until none of them is left alive (non-zombie; exit 0), 5 s pass (exit 1), or
/// `/proc` cannot be read (exit 2). With an audit session a round forks nothing (built-ins
/// only), so it works in a machine whose pids limit a fork bomb holds.
pub(crate) const KILL_GROUP: &str = r#"g=$1; m=$2; a=${3-}
case "$g" in ''|*[!0-9]*) exit 3;; esac
[ "$g" -gt 1 ] || exit 3
case "$m" in ''|*[!0-9a-f]*) exit 3;; esac
case "$a" in *[!0-9]*|4294967295) exit 3;; esac
n=0
while :; do
  kill -KILL -"$g" 2>/dev/null
  seen=0; live=0
  for d in /proc/[0-9]*; do
    [ -e "$d/stat" ] || continue
    seen=1
    q=${d#/proc/}
    [ "$q" = 1 ] || [ "$q" = $$ ] && continue
    l=
    read -r l < "$d/stat" 2>/dev/null
    [ -n "$l" ] || continue
    r=${l##*) }
    set -- $r
    [ $# -ge 3 ] || exit 2
    [ "$1" = Z ] || [ "$1" = X ] && continue
    if [ "$3" = "$g" ]; then
      live=1
      continue
    fi
    hit=0
    if [ -n "$a" ]; then
      as=
      read -r as < "$d/sessionid" 2>/dev/null
      [ "$as" = "$a" ] && hit=1
    elif grep -zqsxF "SHELLBOX_COMMAND_ID=$m" "$d/environ" 2>/dev/null; then
      hit=1
    fi
    if [ "$hit" = 1 ]; then
      kill -KILL "$q" 2>/dev/null
      live=1
    fi
  done
  [ "$seen" = 1 ] || exit 2
  [ "$live" = 0 ] && exit 0
  n=$((n+1))
  [ "$n" -ge 100 ] && exit 1
  sleep 0.05
done"#;

/// Run as root at start: `sh -c SETUP sh <workdir or "">`. Prints the path of `setsid` (its
/// name when the shell only knows it as a built-in applet) and
/// creates the workdir. Exit 93: no `setsid`; 94: the workdir cannot be created.
pub(crate) const SETUP: &str = r#"s=
IFS=:
for d in $PATH; do
  if [ -f "$d/setsid" ] && [ -x "$d/setsid" ]; then s=$d/setsid; break; fi
done
unset IFS
if [ -z "$s" ]; then command -v setsid >/dev/null 2>&1 || exit 93; s=setsid; fi
if [ -n "$1" ]; then mkdir -p -- "$1" || exit 94; fi
echo "$s""#;

/// The exec for `command` (already validated) in a machine made from `spec`.
/// `command_id` (lowercase hex) marks the command's processes (see [`WRAPPER`]).
pub(crate) fn exec_config(
    spec: &MachineSpec,
    command: &Command,
    setsid: &str,
    command_id: &str,
) -> ExecConfig {
    let mut cmd = vec![
        "/bin/sh".to_string(),
        "-c".to_string(),
        WRAPPER.to_string(),
        "sh".to_string(),
        setsid.to_string(),
        command_id.to_string(),
    ];
    cmd.extend(command.argv.iter().cloned());
    let workdir = command
        .cwd
        .clone()
        .or_else(|| (!spec.workdir.is_empty()).then(|| spec.workdir.clone()));
    let env: Vec<String> = command
        .env
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    ExecConfig {
        attach_stdin: Some(!command.stdin.is_empty()),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(false),
        env: (!env.is_empty()).then_some(env),
        cmd: Some(cmd),
        user: command.user.clone(),
        working_dir: workdir,
        ..Default::default()
    }
}

/// What an exec adds to a command's argv and environment, kept out of the `execve(2)`
/// budget of [`validate_exec_size`]: the wrapper scripts with their arguments (about 2 KiB),
/// `SHELLBOX_COMMAND_ID`, and the container's own environment beyond the spec's (the
/// image's `ENV`, `PATH`, `HOSTNAME`, `HOME`). An image whose environment is larger still
/// meets the kernel's refusal, which is then reported as the same error
/// ([`exec_setup_failure`]).
pub(crate) const EXEC_RESERVED_BYTES: usize = 64 * 1024;

/// Checks a command against what `execve(2)` accepts
/// ([`shellbox_core::validate::validate_exec_size`]): its argv, and the environment it
/// will run with (the spec's, overridden by its own), with [`EXEC_RESERVED_BYTES`] left for
/// the exec's wrapper.
///
/// # Errors
/// [`Error::InvalidInput`] when a string or the whole is too large.
pub(crate) fn validate_exec_size(spec: &MachineSpec, command: &Command) -> Result<(), Error> {
    let mut env: BTreeMap<&str, &str> = spec
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    env.extend(command.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    shellbox_core::validate::validate_exec_size(
        command.argv.iter().map(String::as_str),
        env,
        EXEC_RESERVED_BYTES,
    )
}

/// Checks the spec's limits against the least a docker machine runs with
/// ([`crate::MIN_PIDS_LIMIT`], [`crate::MIN_MEMORY_MB`]), on every engine.
///
/// # Errors
/// [`Error::InvalidInput`] naming the field when `pids_limit` or `memory_mb` is below it.
pub(crate) fn validate_limits(spec: &MachineSpec) -> Result<(), Error> {
    if spec.pids_limit < crate::MIN_PIDS_LIMIT {
        return Err(Error::invalid(format!(
            "pids_limit {} is below {}, the least a docker machine runs with: the limit \
             counts the container's own tasks too (its keep-alive shell, the supervisor's \
             threads, a keeper per running command)",
            spec.pids_limit,
            crate::MIN_PIDS_LIMIT
        )));
    }
    if let Some(mb) = spec.memory_mb.filter(|mb| *mb < crate::MIN_MEMORY_MB) {
        return Err(Error::invalid(format!(
            "memory_mb {mb} is below {}, the least a docker machine runs with (the Docker \
             Engine's minimum memory limit, 6 MiB)",
            crate::MIN_MEMORY_MB
        )));
    }
    Ok(())
}

/// Checks a spec's environment alone (it is the container's, in every exec) against what
/// `execve(2)` accepts, as [`validate_exec_size`] does for a command.
///
/// # Errors
/// [`Error::InvalidInput`] when a variable or the whole is too large.
pub(crate) fn validate_spec_env_size(spec: &MachineSpec) -> Result<(), Error> {
    shellbox_core::validate::validate_exec_size(
        ["/bin/sh", "-c", KEEPALIVE],
        spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        EXEC_RESERVED_BYTES,
    )
    .map_err(|e| match e {
        Error::InvalidInput(m) => Error::InvalidInput(format!("spec env: {m}")),
        other => other,
    })
}

/// Reads the output of an exec whose wrapper never ran (no PGID header came), for the
/// engine's refusals that are not the command's own result:
///
/// - `unable to find user NAME` / `unable to find group NAME` (runc's lookup in the
///   image's `/etc/passwd` and `/etc/group`): [`Error::Unsupported`] "no such user: NAME"
///   (or group), the rule every backend follows for a user it cannot switch to;
/// - `argument list too long` (`E2BIG` from `execve(2)`, e.g. an image environment larger
///   than [`EXEC_RESERVED_BYTES`]): [`Error::InvalidInput`].
///
/// Anything else (a missing cwd, a failed fork) stays the command's failed result, as in
/// the reference (REFERENCE.md 5.2). `user` is the command's, named when the message
/// does not parse.
pub(crate) fn exec_setup_failure(message: &str, user: Option<&str>) -> Option<Error> {
    let message = message.trim();
    for (needle, what) in [
        ("unable to find user ", "user"),
        ("unable to find group ", "group"),
    ] {
        if let Some(at) = message.find(needle) {
            let rest = &message[at + needle.len()..];
            let name = rest
                .split(':')
                .next()
                .filter(|n| !n.is_empty() && !n.contains(char::is_whitespace))
                .map(str::to_string)
                .or_else(|| user.map(str::to_string))
                .unwrap_or_default();
            return Some(Error::unsupported(format!(
                "no such {what}: {name} (user {:?}; the Docker Engine: {message})",
                user.unwrap_or_default()
            )));
        }
    }
    if message
        .to_ascii_lowercase()
        .contains("argument list too long")
    {
        return Some(Error::invalid(format!(
            "the command's argv and environment are too large for execve(2) in this \
             container (E2BIG; the Docker Engine: {message})"
        )));
    }
    None
}

/// A root exec of `sh -c script sh args...` with output attached.
pub(crate) fn root_exec(script: &str, args: &[&str]) -> ExecConfig {
    let mut cmd = vec![
        "/bin/sh".to_string(),
        "-c".to_string(),
        script.to_string(),
        "sh".to_string(),
    ];
    cmd.extend(args.iter().map(|a| a.to_string()));
    ExecConfig {
        attach_stdin: Some(false),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(false),
        cmd: Some(cmd),
        user: Some("0".to_string()),
        working_dir: Some("/".to_string()),
        ..Default::default()
    }
}

/// The longest header line read before giving up on it.
pub(crate) const HEADER_MAX: usize = 64;

/// What the first stdout bytes say.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Header {
    /// More bytes are needed.
    Incomplete,
    /// A header: the process group id, the command's audit session (when the wrapper could
    /// take one) and how many bytes it took.
    Pgid(u32, Option<u32>, usize),
    /// No header: the bytes are ordinary output.
    Absent,
}

/// A decimal number of 1 to 10 digits that fits a `u32`.
fn decimal(digits: &[u8]) -> Option<u32> {
    if digits.is_empty() || digits.len() > 10 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// Parses `SHELLBOX_PGID:<digits>[:<digits>]\n` (group id > 1, then the audit session) at
/// the start of `buf`.
pub(crate) fn parse_header(buf: &[u8]) -> Header {
    const PREFIX: &[u8] = b"SHELLBOX_PGID:";
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        let n = buf.len().min(PREFIX.len());
        if buf.len() >= HEADER_MAX || buf[..n] != PREFIX[..n] {
            return Header::Absent;
        }
        return Header::Incomplete;
    };
    let line = &buf[..nl];
    let Some(rest) = line.strip_prefix(PREFIX) else {
        return Header::Absent;
    };
    let (pgid, audit) = match rest.iter().position(|&b| b == b':') {
        Some(i) => match decimal(&rest[i + 1..]) {
            Some(a) => (&rest[..i], Some(a)),
            None => return Header::Absent,
        },
        None => (rest, None),
    };
    match decimal(pgid) {
        Some(pgid) if pgid > 1 => Header::Pgid(pgid, audit, nl + 1),
        _ => Header::Absent,
    }
}

/// Which spec field an engine error at create or start is about, if the spec asked for it
/// and the message names it: the engine cannot honour that field.
pub(crate) fn refused_field(
    spec: &MachineSpec,
    runtime: Option<&str>,
    message: &str,
) -> Option<&'static str> {
    let m = message.to_ascii_lowercase();
    if runtime.is_some() && m.contains("runtime") {
        return Some("runtime");
    }
    if spec.storage_mb.is_some()
        && (m.contains("storage") || m.contains("quota") || m.contains("size"))
    {
        return Some("storage_mb");
    }
    if spec.gpus > 0 && (m.contains("gpu") || m.contains("device driver") || m.contains("nvidia")) {
        return Some("gpus");
    }
    if spec.cpus.is_some() && (m.contains("cpu") || m.contains("cfs")) {
        return Some("cpus");
    }
    if spec.memory_mb.is_some() && m.contains("memory") {
        return Some("memory_mb");
    }
    None
}

/// Which spec limit an engine says it discarded when it created the container, if any: the
/// Docker Engine accepts a create whose `HostConfig` asks for a limit the host's cgroups
/// cannot enforce, drops that limit and says so only in the create response's `Warnings`
/// (moby's `verifyPlatformContainerResources`: "Your kernel does not support memory limit
/// capabilities or the cgroup is not mounted. Limitation discarded.", "... PIDs limit
/// discarded.", "... CPU period discarded."). A limit the spec asked for and the engine
/// dropped is one it cannot honour. A warning that a limit applies without its swap part
/// ("Memory limited without swap.") keeps the limit and is not a refusal.
pub(crate) fn discarded_limit(spec: &MachineSpec, warnings: &[String]) -> Option<&'static str> {
    for warning in warnings {
        let w = warning.to_ascii_lowercase();
        if !w.contains("discarded") {
            continue;
        }
        if spec.memory_mb.is_some() && w.contains("memory limit") {
            return Some("memory_mb");
        }
        if spec.cpus.is_some() && (w.contains("cpu") || w.contains("cfs")) {
            return Some("cpus");
        }
        if w.contains("pids limit") {
            return Some("pids_limit");
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> Owner {
        Owner {
            pid: 42,
            start: Some(7),
            host: "h".into(),
        }
    }

    #[test]
    fn container_config_maps_spec_fields() {
        let spec = MachineSpec::docker("img")
            .env("A", "1")
            .memory_mb(64)
            .cpus(2)
            .storage_mb(100)
            .gpus(1)
            .pids_limit(77);
        let extra = BTreeMap::from([
            ("team".to_string(), "grading".to_string()),
            (labels::OWNER_PID.to_string(), "forged".to_string()),
        ]);
        let c = container_config(&spec, "sha256:abc", Some("runsc"), &owner(), &extra);
        assert_eq!(c.image.as_deref(), Some("sha256:abc"));
        assert_eq!(c.entrypoint, Some(vec!["/bin/sh".to_string()]));
        assert_eq!(c.cmd, Some(vec!["-c".to_string(), KEEPALIVE.to_string()]));
        assert_eq!(c.env, Some(vec!["A=1".to_string()]));
        let labels = c.labels.unwrap();
        assert_eq!(labels[labels::OWNER_PID], "42");
        assert_eq!(labels[labels::OWNER_START], "7");
        assert_eq!(labels[labels::OWNER_HOST], "h");
        assert_eq!(labels["team"], "grading");
        let h = c.host_config.unwrap();
        assert_eq!(h.init, Some(false));
        assert_eq!(h.network_mode.as_deref(), Some("none"));
        assert_eq!(h.memory, Some(64 * 1024 * 1024));
        assert_eq!(h.nano_cpus, Some(2_000_000_000));
        assert_eq!(h.storage_opt.unwrap()["size"], "100M");
        let dr = &h.device_requests.unwrap()[0];
        assert_eq!(dr.count, Some(1));
        assert_eq!(dr.capabilities, Some(vec![vec!["gpu".to_string()]]));
        assert_eq!(h.runtime.as_deref(), Some("runsc"));
        assert_eq!(h.pids_limit, Some(77));

        let plain = container_config(
            &MachineSpec::docker("img").network(NetworkPolicy::Allow),
            "img",
            None,
            &owner(),
            &BTreeMap::new(),
        );
        let h = plain.host_config.unwrap();
        assert_eq!(h.network_mode.as_deref(), Some("bridge"));
        assert_eq!(h.memory, None);
        assert_eq!(h.nano_cpus, None);
        assert_eq!(h.storage_opt, None);
        assert_eq!(h.device_requests, None);
        assert_eq!(h.runtime, None);
        assert_eq!(
            h.pids_limit,
            Some(i64::from(shellbox_core::DEFAULT_PIDS_LIMIT))
        );
        assert_eq!(plain.env, None);
    }

    #[test]
    fn exec_config_puts_everything_in_the_body() {
        let spec = MachineSpec::docker("img").workdir("/w");
        let cmd = Command::from_argv(["echo", "a b"])
            .env("SECRET", "s3")
            .user("65534");
        let e = exec_config(&spec, &cmd, "/bin/setsid", "ab12");
        let argv = e.cmd.unwrap();
        assert_eq!(
            argv[..6],
            ["/bin/sh", "-c", WRAPPER, "sh", "/bin/setsid", "ab12"]
        );
        assert_eq!(argv[6..], ["echo", "a b"]);
        assert_eq!(e.env, Some(vec!["SECRET=s3".to_string()]));
        assert_eq!(e.user.as_deref(), Some("65534"));
        assert_eq!(e.working_dir.as_deref(), Some("/w"));
        assert_eq!(e.attach_stdin, Some(false));
        let e = exec_config(&spec, &cmd.clone().cwd("/tmp").stdin("x"), "/s", "1");
        assert_eq!(e.working_dir.as_deref(), Some("/tmp"));
        assert_eq!(e.attach_stdin, Some(true));
        let e = exec_config(&MachineSpec::docker("img").workdir(""), &cmd, "/s", "1");
        assert_eq!(e.working_dir, None);
        assert_eq!(e.user.as_deref(), Some("65534"));
    }

    #[test]
    fn engine_set_up_failures() {
        let e = exec_setup_failure(
            "unable to find user ghost: no matching entries in passwd file\r\n",
            Some("ghost"),
        )
        .unwrap();
        assert!(e.is_unsupported(), "{e:?}");
        assert!(e.to_string().contains("no such user: ghost"), "{e}");
        let e = exec_setup_failure(
            "unable to find group grp: no matching entries in group file",
            Some("root:grp"),
        )
        .unwrap();
        assert!(e.to_string().contains("no such group: grp"), "{e}");
        let e = exec_setup_failure("exec /bin/sh: argument list too long\n", None).unwrap();
        assert!(matches!(e, Error::InvalidInput(_)), "{e:?}");
        assert!(exec_setup_failure(
            "OCI runtime exec failed: exec failed: unable to start container process: chdir to \
             cwd (\"/x\") set in config.json failed: no such file or directory: unknown",
            None
        )
        .is_none());
        assert!(exec_setup_failure("sh: can't fork", None).is_none());
    }

    #[test]
    fn exec_sizes_count_the_specs_env() {
        let big = "v".repeat(100_000);
        let mut spec = MachineSpec::docker("i");
        for i in 0..10 {
            spec = spec.env(format!("S{i}"), &big);
        }
        validate_spec_env_size(&spec).unwrap();
        let command = Command::new("true").arg(&big);
        validate_exec_size(&spec, &command).unwrap();
        // The command's own value replaces the spec's, not added to it.
        validate_exec_size(&spec, &command.clone().env("S0", &big)).unwrap();
        for i in 10..25 {
            spec = spec.env(format!("S{i}"), &big);
        }
        assert!(matches!(
            validate_exec_size(&spec, &Command::new("true")),
            Err(Error::InvalidInput(_))
        ));
        assert!(validate_spec_env_size(&spec)
            .unwrap_err()
            .to_string()
            .contains("spec env"));
    }

    #[test]
    fn header_parsing() {
        assert_eq!(
            parse_header(b"SHELLBOX_PGID:123\nrest"),
            Header::Pgid(123, None, 18)
        );
        assert_eq!(
            parse_header(b"SHELLBOX_PGID:123:4567\nrest"),
            Header::Pgid(123, Some(4567), 23)
        );
        assert_eq!(parse_header(b"SHELLBOX_PGID:123:\n"), Header::Absent);
        assert_eq!(parse_header(b"SHELLBOX_PGID:123:x\n"), Header::Absent);
        assert_eq!(parse_header(b"SHELLBOX_PG"), Header::Incomplete);
        assert_eq!(parse_header(b"SHELLBOX_PGID:12"), Header::Incomplete);
        assert_eq!(parse_header(b"hello\n"), Header::Absent);
        assert_eq!(parse_header(b"hel"), Header::Absent);
        assert_eq!(parse_header(b"SHELLBOX_PGID:1\n"), Header::Absent);
        assert_eq!(parse_header(b"SHELLBOX_PGID:x\n"), Header::Absent);
        assert_eq!(parse_header(b"SHELLBOX_PGID:\n"), Header::Absent);
        assert_eq!(parse_header(&[b'S'; 80]), Header::Absent);
    }

    /// Feeds `chunks` to a scanner of `M`; returns the output and whether the marker was seen.
    fn scan(chunks: &[&[u8]]) -> (Vec<u8>, bool) {
        let mut sc = EndScanner::new(end_marker("ab"));
        let mut out = Vec::new();
        for c in chunks {
            if let Some(b) = sc.feed(Bytes::copy_from_slice(c)) {
                out.extend_from_slice(&b);
            }
        }
        let found = sc.found();
        if let Some(b) = sc.finish() {
            out.extend_from_slice(&b);
        }
        (out, found)
    }

    #[test]
    fn end_marker_scanning() {
        assert_eq!(end_marker("ab"), b"\0SHELLBOX_END:ab\n");
        assert_eq!(
            scan(&[b"hi\n\0SHELLBOX_END:ab\nlater"]),
            (b"hi\n".to_vec(), true)
        );
        // Split anywhere, the marker is still found and nothing after it is output.
        let whole = b"x\0y\0SHELLBOX_END:a\0SHELLBOX_END:ab\nlater".to_vec();
        for cut in 0..whole.len() {
            let (a, b) = whole.split_at(cut);
            assert_eq!(
                scan(&[a, b]),
                (b"x\0y\0SHELLBOX_END:a".to_vec(), true),
                "cut {cut}"
            );
        }
        // A stream that ends with what could have begun the marker keeps those bytes.
        assert_eq!(scan(&[b"abc\0SHELL"]), (b"abc\0SHELL".to_vec(), false));
        assert_eq!(scan(&[b"\0", b"\0"]), (b"\0\0".to_vec(), false));
        // Another command's marker is output.
        assert_eq!(
            scan(&[b"\0SHELLBOX_END:cd\n"]),
            (b"\0SHELLBOX_END:cd\n".to_vec(), false)
        );
    }

    #[test]
    fn refusals_name_the_field() {
        let spec = MachineSpec::docker("i").storage_mb(10);
        assert_eq!(
            refused_field(
                &spec,
                None,
                "--storage-opt is supported only for overlay over xfs"
            ),
            Some("storage_mb")
        );
        assert_eq!(refused_field(&spec, None, "no such image"), None);
        let spec = MachineSpec::docker("i").gpus(1);
        assert_eq!(
            refused_field(
                &spec,
                None,
                "could not select device driver \"\" with capabilities: [[gpu]]"
            ),
            Some("gpus")
        );
        assert_eq!(
            refused_field(
                &MachineSpec::docker("i"),
                Some("runsc"),
                "unknown or invalid runtime name: runsc"
            ),
            Some("runtime")
        );
    }

    #[test]
    fn start_ticks_of_self() {
        assert!(process_start_ticks(std::process::id()).is_some());
        assert!(!host_name().is_empty());
    }

    #[test]
    fn discarded_limits_from_create_warnings() {
        let spec = MachineSpec::docker("i").memory_mb(64).cpus(1);
        let moby = |s: &str| vec![s.to_string()];
        assert_eq!(
            discarded_limit(
                &spec,
                &moby("Your kernel does not support memory limit capabilities or the cgroup is not mounted. Limitation discarded.")
            ),
            Some("memory_mb")
        );
        assert_eq!(
            discarded_limit(
                &spec,
                &moby("Your kernel does not support swap limit capabilities or the cgroup is not mounted. Memory limited without swap.")
            ),
            None
        );
        assert_eq!(
            discarded_limit(
                &spec,
                &moby("Your kernel does not support PIDs limit capabilities or the cgroup is not mounted. PIDs limit discarded.")
            ),
            Some("pids_limit")
        );
        assert_eq!(
            discarded_limit(
                &spec,
                &moby("Your kernel does not support CPU CFS scheduler. CPU period discarded.")
            ),
            Some("cpus")
        );
        // A memory warning for a spec without memory_mb is not about the spec.
        let plain = MachineSpec::docker("i");
        assert_eq!(
            discarded_limit(
                &plain,
                &moby("Your kernel does not support memory limit capabilities or the cgroup is not mounted. Limitation discarded.")
            ),
            None
        );
        assert_eq!(discarded_limit(&spec, &[]), None);
    }
}
