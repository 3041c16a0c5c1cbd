//! The fast path: commands through `shellbox-supervisor` inside the container.
//!
//! At create the factory copies [`shellbox_supervisor::SUPERVISOR_PROGRAM`] into the
//! container over the archive endpoint (`PUT /containers/{id}/archive`, root-owned: the
//! directory `/.shellbox` `0511`, the program `0555`, so any account can run it — the shell
//! session's terminal relay runs as the session's user — and no account but root can change
//! or list it; a root command can replace it, which changes nothing: the supervisor starts
//! relays from its own program, [`RELAY_PATH`]) and starts it with one attached exec as
//! root: the exec's stdin and stdout are the supervisor's framed control channel, so a
//! command costs a fork
//! and an exec inside the container and no Engine API request. The supervisor runs under
//! its own account (`--own-account`), each command under a keeper (its kill scope). A
//! command has what a `docker exec` of it would have: the container's whole capability
//! set for root (`--keep-caps` of every capability), the account's supplementary groups.
//! A root command can therefore signal the supervisor and the keepers (`CAP_KILL`), but
//! never trace them or reach their files (they are non-dumpable and the container has no
//! `CAP_SYS_PTRACE` unless its creator added it); a killed keeper's processes are killed by
//! the supervisor (`--reap-strays`) and its command fails, a killed supervisor terminates
//! the machine, a stopped one or a stopped keeper ends a timed-out command within
//! [`KILL_BOUND`] (docs/DESIGN.md, "A root command and its keeper").

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bollard::container::LogOutput;
use bollard::errors::Error as BollardError;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use bollard::query_parameters::UploadToContainerOptions;
use bollard::Docker;
use bytes::Bytes;
use futures::Stream;
use shellbox_core::capture::{timed_out_status, EventStream};
use shellbox_core::{Command, Error, Event, ExitReason, ExitStatus, MachineSpec};
use shellbox_supervisor::{proto, Client, OutputStream, Reply};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::mpsc;

/// The supervisor program's path inside the container (in `/.shellbox`, root-owned,
/// mode `0555` in a `0511` directory).
pub(crate) const SUPERVISOR_PATH: &str = "/.shellbox/supervisor";

/// The path the supervisor starts a shell session's terminal relay from: its own program
/// (the relay is an ordinary command, forked from the supervisor, so `/proc/self/exe` is
/// the file the supervisor was started from). A root command can replace
/// [`SUPERVISOR_PATH`] (root passes the file's modes) but not that file, which the kernel
/// keeps while the supervisor runs and refuses to write to (`ETXTBSY`): every session runs
/// shellbox's relay.
pub(crate) const RELAY_PATH: &str = "/proc/self/exe";

/// The capabilities a command's bounding set keeps (`--keep-caps`): all, so it is the
/// container's own (Docker's default set with the container's `CapAdd`/`CapDrop`), and a
/// root command has what a root `docker exec` has.
pub(crate) const KEPT_CAPS: u64 = u64::MAX;

/// How long the supervisor may take to say READY.
const READY_BOUND: Duration = Duration::from_secs(15);

/// The default `PATH` Docker gives a container whose image sets none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Run as root through the supervisor: `sh -c LOOKUP sh USER`. Resolves `name`, `uid`,
/// `name:group` or `uid:gid` against the image's `/etc/passwd` and `/etc/group` (a name or
/// a number matches the first entry with that name or id, as runc does; a numeric group
/// needs no entry, as with runc) and prints `uid gid members home`, where `members` is the
/// comma-separated list of the groups in `/etc/group` that list the account's name as a
/// member (only when USER names no group, as runc does), `-` for none. Exit 3: no such
/// user; 4: no such group.
pub(crate) const LOOKUP: &str = r#"u=${1%%:*}; g=; case "$1" in *:*) g=${1#*:};; esac
f=
while IFS=: read -r n x i j c h rest; do
  if [ "$n" = "$u" ] || [ "$i" = "$u" ]; then f=1; break; fi
done < /etc/passwd
[ -n "$f" ] || exit 3
s=
if [ -n "$g" ]; then
  k=
  while IFS=: read -r n2 x d rest; do
    if [ "$n2" = "$g" ] || [ "$d" = "$g" ]; then k=$d; break; fi
  done < /etc/group
  if [ -z "$k" ]; then
    case "$g" in *[!0-9]*) exit 4;; esac
    k=$g
  fi
  j=$k
elif [ -n "$n" ]; then
  while IFS=: read -r n2 x d m; do
    case ",$m," in *",$n,"*) case "$d" in ''|*[!0-9]*) ;; *) s="${s:+$s,}$d";; esac;; esac
  done < /etc/group
fi
echo "$i $j ${s:--} ${h:-/}""#;

/// Which way a machine's commands run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CommandPath {
    /// The supervisor where it can run in the container, else Engine execs
    /// (the default; see [`DockerMachineFactory::command_path`](crate::DockerMachineFactory::command_path)).
    #[default]
    Auto,
    /// Always the supervisor: a container where it cannot run fails to create.
    Supervisor,
    /// Always one Engine exec per command (the fallback path).
    Exec,
}

impl CommandPath {
    /// Reads [`COMMAND_PATH_ENV`]: `supervisor`, `exec` or `auto` (any case); `None` when
    /// unset or empty.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for another value.
    pub fn from_env() -> Result<Option<CommandPath>, Error> {
        match std::env::var(COMMAND_PATH_ENV) {
            Ok(v) if v.is_empty() => Ok(None),
            Ok(v) => match v.to_ascii_lowercase().as_str() {
                "auto" => Ok(Some(CommandPath::Auto)),
                "supervisor" => Ok(Some(CommandPath::Supervisor)),
                "exec" => Ok(Some(CommandPath::Exec)),
                _ => Err(Error::invalid(format!(
                    "{COMMAND_PATH_ENV}={v:?}: expected supervisor, exec or auto"
                ))),
            },
            Err(_) => Ok(None),
        }
    }
}

/// The environment variable that forces a factory's [`CommandPath`] (`supervisor`, `exec`,
/// `auto`), read when the factory is made;
/// [`DockerMachineFactory::command_path`](crate::DockerMachineFactory::command_path) wins
/// over it. Another value makes every create fail with `InvalidInput`.
pub const COMMAND_PATH_ENV: &str = "SHELLBOX_DOCKER_COMMAND_PATH";

/// The supervisor's stdout as a byte stream: the exec's stdout frames, in order. Its
/// stderr (only the supervisor's own start-up complaints) is kept, bounded, for errors.
struct ExecReader {
    output: Pin<Box<dyn Stream<Item = Result<LogOutput, BollardError>> + Send>>,
    buf: Bytes,
    stderr: Arc<Mutex<Vec<u8>>>,
}

impl AsyncRead for ExecReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        loop {
            if !self.buf.is_empty() {
                let n = self.buf.len().min(out.remaining());
                let chunk = self.buf.split_to(n);
                out.put_slice(&chunk);
                return Poll::Ready(Ok(()));
            }
            match self.output.as_mut().poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Ready(Some(Err(e))) => {
                    return Poll::Ready(Err(std::io::Error::other(e.to_string())))
                }
                Poll::Ready(Some(Ok(LogOutput::StdOut { message })))
                | Poll::Ready(Some(Ok(LogOutput::Console { message }))) => self.buf = message,
                Poll::Ready(Some(Ok(LogOutput::StdErr { message }))) => {
                    let mut e = self.stderr.lock().unwrap_or_else(|p| p.into_inner());
                    let room = (16 * 1024usize).saturating_sub(e.len());
                    e.extend_from_slice(&message[..message.len().min(room)]);
                }
                Poll::Ready(Some(Ok(LogOutput::StdIn { .. }))) => {}
            }
        }
    }
}

/// An account of the image, as a command runs under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Account {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups, as the engine sets them for `docker exec -u`: the groups that
    /// list the account (see [`LOOKUP`]), and on Docker the primary group too (Podman
    /// leaves it out).
    pub groups: Vec<u32>,
    pub home: String,
}

/// A machine's running supervisor and what its commands need.
pub(crate) struct Supervised {
    pub client: Client,
    /// The environment PID 1 got from the engine (the container's, with the engine's
    /// additions such as `HOSTNAME`), without `HOME` unless the spec or image set it.
    pub env: Vec<(String, String)>,
    /// Whether `HOME` comes from the container's configuration (else from the account).
    pub home_configured: bool,
    /// The image's configured user (`Config.User`), empty for root.
    pub default_user: String,
    /// The default account, resolved at create (as the engine resolves a container's user
    /// once, at its start: an exec without a user gets that account's groups even after
    /// `/etc/group` changed, one naming a user gets them read anew).
    pub default_account: Option<Account>,
    /// The image's working directory (`Config.WorkingDir`, else `/`).
    pub image_workdir: String,
    /// Whether the engine is Podman, whose execs leave the primary group out of the
    /// supplementary groups (Docker puts it in).
    pub podman: bool,
}

/// A tar holding `/.shellbox` (root, `0511`) and the program in it (root, `0555`).
pub(crate) fn supervisor_tar() -> std::io::Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    let mut dir = tar::Header::new_gnu();
    dir.set_entry_type(tar::EntryType::Directory);
    dir.set_mode(0o511);
    dir.set_uid(0);
    dir.set_gid(0);
    dir.set_size(0);
    dir.set_mtime(0);
    b.append_data(&mut dir, ".shellbox/", std::io::empty())?;
    let program = shellbox_supervisor::SUPERVISOR_PROGRAM;
    let mut file = tar::Header::new_gnu();
    file.set_entry_type(tar::EntryType::Regular);
    file.set_mode(0o555);
    file.set_uid(0);
    file.set_gid(0);
    file.set_size(program.len() as u64);
    file.set_mtime(0);
    b.append_data(&mut file, ".shellbox/supervisor", program)?;
    b.into_inner()
}

/// Copies the supervisor in and starts it; `Err` says why it cannot run here (the caller
/// falls back to execs or refuses, per [`CommandPath`]).
pub(crate) async fn start(docker: &Docker, id: &str, podman: bool) -> Result<Supervised, String> {
    let tar = supervisor_tar().map_err(|e| format!("pack the supervisor: {e}"))?;
    let options = UploadToContainerOptions {
        path: "/".to_string(),
        ..Default::default()
    };
    docker
        .upload_to_container(id, Some(options), bollard::body_full(Bytes::from(tar)))
        .await
        .map_err(|e| format!("copy the supervisor into the container: {e}"))?;
    let config = ExecConfig {
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(false),
        cmd: Some(vec![
            SUPERVISOR_PATH.to_string(),
            "--own-account".to_string(),
            "--reap-strays".to_string(),
            format!("--keep-caps={KEPT_CAPS}"),
        ]),
        user: Some("0".to_string()),
        working_dir: Some("/".to_string()),
        ..Default::default()
    };
    let exec = docker
        .create_exec(id, config)
        .await
        .map_err(|e| format!("create the supervisor's exec: {e}"))?;
    let started = docker
        .start_exec(&exec.id, None::<StartExecOptions>)
        .await
        .map_err(|e| format!("start the supervisor's exec: {e}"))?;
    let StartExecResults::Attached { output, input } = started else {
        return Err("the engine did not attach the supervisor's exec".into());
    };
    let stderr = Arc::new(Mutex::new(Vec::new()));
    let reader = ExecReader {
        output,
        buf: Bytes::new(),
        stderr: stderr.clone(),
    };
    let client = match tokio::time::timeout(READY_BOUND, Client::connect(reader, input)).await {
        Ok(Ok(client)) => client,
        Ok(Err(e)) => {
            let said = String::from_utf8_lossy(&stderr.lock().unwrap_or_else(|p| p.into_inner()))
                .trim()
                .to_string();
            return Err(format!("the supervisor did not start ({e}): {said}"));
        }
        Err(_) => {
            return Err(format!(
                "the supervisor did not start within {READY_BOUND:?}"
            ))
        }
    };
    let info = docker
        .inspect_container(id, None)
        .await
        .map_err(|e| format!("inspect the container: {e}"))?;
    let config = info.config.unwrap_or_default();
    let configured: Vec<(String, String)> = config
        .env
        .unwrap_or_default()
        .iter()
        .filter_map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect();
    let home_configured = configured.iter().any(|(k, _)| k == "HOME");
    let mut sup = Supervised {
        client,
        env: Vec::new(),
        home_configured,
        default_user: config.user.unwrap_or_default(),
        default_account: None,
        image_workdir: config
            .working_dir
            .filter(|w| !w.is_empty())
            .unwrap_or_else(|| "/".to_string()),
        podman,
    };
    // PID 1's environment is what the engine gives every process of the container.
    let pid1 = sup
        .collect_root(&["/bin/sh", "-c", "cat /proc/1/environ"])
        .await;
    let mut env: Vec<(String, String)> = match pid1 {
        Ok((0, out)) => out
            .split(|&b| b == 0)
            .filter_map(|kv| std::str::from_utf8(kv).ok())
            .filter_map(|kv| {
                kv.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            })
            .collect(),
        _ => configured.clone(),
    };
    if !home_configured {
        env.retain(|(k, _)| k != "HOME");
    }
    if !env.iter().any(|(k, _)| k == "PATH") {
        env.push(("PATH".into(), DEFAULT_PATH.into()));
    }
    sup.env = env;
    let default_user = if sup.default_user.is_empty() {
        "0".to_string()
    } else {
        sup.default_user.clone()
    };
    sup.default_account = sup.lookup(&default_user).await.ok();
    Ok(sup)
}

impl Supervised {
    /// Runs `argv` as root with an empty stdin and returns (exit code, stdout) (at most
    /// 1 MiB kept).
    pub(crate) async fn collect_root(&self, argv: &[&str]) -> Result<(i32, Vec<u8>), String> {
        let start = proto::Start {
            argv: argv.iter().map(|a| a.as_bytes().to_vec()).collect(),
            env: if self.env.is_empty() {
                vec![format!("PATH={DEFAULT_PATH}").into_bytes()]
            } else {
                self.env
                    .iter()
                    .map(|(k, v)| format!("{k}={v}").into_bytes())
                    .collect()
            },
            cwd: b"/".to_vec(),
            user: Some((0, 0)),
            groups: vec![0],
            rlimits: Vec::new(),
            output_limit_bytes: 1 << 20,
        };
        let mut running = self.client.start(&start, &[]).map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        loop {
            match running.next().await {
                Some(Reply::Output(OutputStream::Stdout, b)) => out.extend_from_slice(&b),
                Some(Reply::Output(OutputStream::Stderr, _)) => {}
                Some(Reply::Exit(exit)) => return Ok((exit.shell_code(), out)),
                Some(Reply::Fail(fail)) => return Err(fail.message),
                None => return Err("the supervisor is gone".into()),
            }
        }
    }

    /// Resolves a user (`name`, `uid`, `name:group`, `uid:gid`) in the image's account
    /// files: its ids, supplementary groups (Docker's rule, see [`LOOKUP`]) and home.
    ///
    /// # Errors
    /// [`Error::Unsupported`] "no such user: NAME" (or group) when the image has no such
    /// account, numeric or not; [`Error::Backend`] when the lookup cannot run.
    pub(crate) async fn lookup(&self, user: &str) -> Result<Account, Error> {
        let (code, out) = self
            .collect_root(&["/bin/sh", "-c", LOOKUP, "sh", user])
            .await
            .map_err(|e| {
                Error::backend(format!("look up user {user:?}"), std::io::Error::other(e))
            })?;
        let mut account = parse_lookup(user, code, &out)?;
        if !self.podman {
            account.groups.push(account.gid);
            account.groups.sort_unstable();
            account.groups.dedup();
        }
        Ok(account)
    }
}

/// Reads [`LOOKUP`]'s result for `user`.
pub(crate) fn parse_lookup(user: &str, code: i32, out: &[u8]) -> Result<Account, Error> {
    let name = user.split(':').next().unwrap_or(user);
    match code {
        0 => {}
        3 => {
            return Err(Error::unsupported(format!(
            "no such user: {name} (user {user:?}; the image's /etc/passwd has no such name or UID)"
        )))
        }
        4 => {
            let group = user.split_once(':').map_or("", |(_, g)| g);
            return Err(Error::unsupported(format!(
                "no such group: {group} (user {user:?}; the image's /etc/group has no such name)"
            )));
        }
        _ => {
            return Err(Error::backend(
                format!("look up user {user:?}"),
                std::io::Error::other(format!("exit {code}")),
            ))
        }
    }
    let text = String::from_utf8_lossy(out);
    let mut parts = text.trim_end_matches('\n').splitn(4, ' ');
    let uid = parts.next().and_then(|p| p.parse().ok());
    let gid = parts.next().and_then(|p| p.parse().ok());
    let groups: Option<Vec<u32>> = parts.next().and_then(|p| match p {
        "-" => Some(Vec::new()),
        _ => p.split(',').map(|g| g.parse().ok()).collect(),
    });
    let home = parts.next().unwrap_or("/").to_string();
    match (uid, gid, groups) {
        (Some(uid), Some(gid), Some(mut groups)) => {
            groups.sort_unstable();
            groups.dedup();
            Ok(Account {
                uid,
                gid,
                groups,
                home,
            })
        }
        _ => Err(Error::unsupported(format!(
            "no such user: {name} (user {user:?}; the image's account entry is malformed: {text:?})"
        ))),
    }
}

/// The supervisor's request for `command` in a machine of `spec`: the container's
/// environment, `HOME` from the account when the configuration sets none, the command's
/// own variables over both; the command's cwd, else the spec's workdir, else the image's.
pub(crate) fn start_request(
    sup: &Supervised,
    spec: &MachineSpec,
    command: &Command,
    account: Option<&Account>,
) -> proto::Start {
    let mut env: Vec<(String, String)> = sup.env.clone();
    if !sup.home_configured {
        let home = account.map_or("/", |a| a.home.as_str());
        env.push(("HOME".into(), home.to_string()));
    }
    for (k, v) in &command.env {
        env.retain(|(key, _)| key != k);
        env.push((k.clone(), v.clone()));
    }
    let cwd = command
        .cwd
        .clone()
        .or_else(|| (!spec.workdir.is_empty()).then(|| spec.workdir.clone()))
        .unwrap_or_else(|| sup.image_workdir.clone());
    proto::Start {
        argv: command.argv.iter().map(|a| a.as_bytes().to_vec()).collect(),
        env: env
            .iter()
            .map(|(k, v)| format!("{k}={v}").into_bytes())
            .collect(),
        cwd: cwd.into_bytes(),
        user: account.map(|a| (a.uid, a.gid)),
        groups: account.map_or_else(Vec::new, |a| a.groups.clone()),
        rlimits: Vec::new(),
        output_limit_bytes: command.output_limit_bytes,
    }
}

/// What ended a supervised command's driver without an exit.
pub(crate) enum Gone {
    /// The machine was closed.
    Closed,
    /// The supervisor's channel ended.
    Supervisor,
    /// A timed-out command was not confirmed killed within [`KILL_BOUND`] (a frozen or
    /// paused container).
    Unkillable,
}

/// How long a timed-out command's KILL may take to be confirmed by its EXIT.
pub(crate) const KILL_BOUND: Duration = Duration::from_secs(10);

/// The event stream of a command started on the supervisor: output as it comes, the
/// timeout as a KILL of the command's whole subtree (then the output written before it and
/// a timed-out status), and the exit. `on_gone` turns a lost channel into the run's error
/// (Closed, or Terminated after disposing of the machine). Dropping the stream drops the
/// [`shellbox_supervisor::Running`], which kills the command's subtree.
pub(crate) fn drive<F, Fut>(
    mut running: shellbox_supervisor::Running,
    timeout: Option<Duration>,
    label: String,
    mut closed: tokio::sync::watch::Receiver<bool>,
    on_gone: F,
) -> EventStream
where
    F: FnOnce(Gone) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Error> + Send,
{
    let (tx, mut rx) = mpsc::channel::<Result<Event, Error>>(16);
    tokio::spawn(async move {
        let deadline = async {
            match timeout {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(deadline);
        let kill_bound = tokio::time::sleep(Duration::MAX / 4);
        tokio::pin!(kill_bound);
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
            KillBound,
            Dropped,
        }
        let item = loop {
            let step = tokio::select! {
                biased;
                _ = closed.wait_for(|c| *c) => Step::Closed,
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
                // Not while the reader holds back an event: the replies after the KILL wait
                // in `running` then, and are taken once it reads.
                () = &mut kill_bound, if timed_out && pending.is_none() => Step::KillBound,
                () = tx.closed() => Step::Dropped,
            };
            match step {
                Step::Closed => break Err(on_gone(Gone::Closed).await),
                Step::Dropped => return,
                Step::Delivered => {}
                Step::Deadline => {
                    timed_out = true;
                    running.kill();
                    kill_bound
                        .as_mut()
                        .reset(tokio::time::Instant::now() + KILL_BOUND);
                }
                Step::KillBound => break Err(on_gone(Gone::Unkillable).await),
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
                Step::Reply(None) if *closed.borrow() => break Err(on_gone(Gone::Closed).await),
                Step::Reply(None) => break Err(on_gone(Gone::Supervisor).await),
            }
        };
        let _ = tx.send(item).await;
    });
    Box::pin(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_results() {
        assert_eq!(
            parse_lookup("nobody", 0, b"65534 65534 65534,50,10,50 /my home\n").unwrap(),
            Account {
                uid: 65534,
                gid: 65534,
                groups: vec![10, 50, 65534],
                home: "/my home".to_string()
            }
        );
        assert_eq!(
            parse_lookup("x", 0, b"1 2 - /").unwrap().groups,
            Vec::<u32>::new()
        );
        assert!(parse_lookup("x", 0, b"1 1 1,a /")
            .unwrap_err()
            .is_unsupported());
        assert!(parse_lookup("x", 0, b"1 1 /").unwrap_err().is_unsupported());
        let e = parse_lookup("4242", 3, b"").unwrap_err();
        assert!(
            e.is_unsupported() && e.to_string().contains("no such user: 4242"),
            "{e}"
        );
        let e = parse_lookup("root:nogroup", 4, b"").unwrap_err();
        assert!(e.to_string().contains("no such group: nogroup"), "{e}");
        assert!(parse_lookup("x", 0, b"a b").unwrap_err().is_unsupported());
        assert!(matches!(
            parse_lookup("x", 2, b""),
            Err(Error::Backend { .. })
        ));
    }

    #[test]
    fn the_tar_holds_a_private_directory_and_the_program() {
        let tar = supervisor_tar().unwrap();
        let mut a = tar::Archive::new(&tar[..]);
        let entries: Vec<(String, u32, u64)> = a
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let h = e.header();
                (
                    e.path().unwrap().to_string_lossy().into_owned(),
                    h.mode().unwrap(),
                    h.uid().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            entries,
            vec![
                (".shellbox/".to_string(), 0o511, 0),
                (".shellbox/supervisor".to_string(), 0o555, 0)
            ]
        );
    }
}
