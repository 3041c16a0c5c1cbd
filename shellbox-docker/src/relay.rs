//! The exec path's shell session over the supervisor program's terminal relay: where a
//! machine runs its commands as Engine execs (the supervisor was not started, by choice or
//! because it could not be), its session still runs `shellbox-supervisor --pty-relay` when
//! the program can be copied into the container and run there, as one attached exec of the
//! image's user (non-TTY: the exec's stdin and stdout carry the relay's frames). The
//! session then has the relay's rules (completion confirmed from outside the shell,
//! interrupts signalled by the relay, the session's processes killed at its end: see
//! [`PtySession`](shellbox_supervisor::session::PtySession)). Where the program cannot be
//! copied (a read-only root refuses the archive) or cannot run (another architecture), the
//! session is the older [`DockerSession`](crate::DockerSession).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::container::LogOutput;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use bollard::query_parameters::UploadToContainerOptions;
use bytes::Bytes;
use futures::StreamExt;
use shellbox_core::async_trait;
use shellbox_supervisor::session::{RelayChannel, RelayInput, RelayLauncher, RelayOutput};
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, Notify};

use crate::machine::Inner;
use crate::supervised::SUPERVISOR_PATH;

/// How long the relay may take to end after its stdin closed before its session's
/// processes are killed from outside.
const END_GRACE: Duration = Duration::from_secs(3);
/// How long the sweep of a session's processes may take.
const SWEEP_BOUND: Duration = Duration::from_secs(8);

/// Run by `sh -c WRAP sh RELAY ARGS...` as the image's user: starts an audit session of
/// its own where the kernel lets it (see [`DockerSession`](crate::DockerSession): every
/// process of the session inherits its number, and none can drop it) and says its number
/// on stderr, then becomes the relay.
const WRAP: &str =
    "if echo \"$(id -u 2>/dev/null || echo 0)\" > /proc/self/loginuid 2>/dev/null; then
  read -r s < /proc/self/sessionid && printf 'SBAUDIT:%s;\\n' \"$s\" >&2; fi
exec \"$@\"";

/// Starts the relay in one container (a [`RelayLauncher`]).
pub(crate) struct DockerRelay {
    inner: Arc<Inner>,
    /// The value of `SHELLBOX_SESSION_ID` the session's processes carry (for the sweep).
    session_id: String,
}

impl DockerRelay {
    /// Copies the supervisor program into the container (as the fast path does: root-owned,
    /// `0555` in a `0511` `/.shellbox`) and checks that the image's user can run its relay
    /// mode there (its usage answer, exit 2). `Err` says why not.
    pub(crate) async fn install(inner: &Arc<Inner>) -> Result<Self, String> {
        copy_in(inner)
            .await
            .map_err(|e| format!("copy the relay program into the container: {e}"))?;
        let config = ExecConfig {
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            cmd: Some(vec![SUPERVISOR_PATH.to_string(), "--pty-relay".to_string()]),
            working_dir: Some("/".to_string()),
            ..Default::default()
        };
        let (code, _, err) = crate::machine::exec_collect(&inner.docker, &inner.id, config)
            .await
            .map_err(|e| match e {
                crate::machine::ExecError::Engine(op, e) => format!("{op}: {e}"),
                crate::machine::ExecError::Other(e) => e.to_string(),
            })?;
        if code != 2 || !err.contains("--pty-relay") {
            return Err(format!(
                "the relay program does not run in this container (exit {code}: {})",
                err.trim()
            ));
        }
        Ok(DockerRelay {
            inner: inner.clone(),
            session_id: crate::factory::unique_hex(),
        })
    }
}

/// Copies the supervisor program into the container (`/.shellbox/supervisor`, root-owned,
/// `0555` in a `0511` `/.shellbox`), replacing whatever is there.
///
/// # Errors
/// Packing the archive, or the Engine's answer to `PUT /containers/{id}/archive`.
async fn copy_in(inner: &Inner) -> std::io::Result<()> {
    let tar = crate::supervised::supervisor_tar()?;
    let options = UploadToContainerOptions {
        path: "/".to_string(),
        ..Default::default()
    };
    inner
        .docker
        .upload_to_container(
            &inner.id,
            Some(options),
            bollard::body_full(Bytes::from(tar)),
        )
        .await
        .map_err(std::io::Error::other)
}

/// Kills every process of a session (its `SHELLBOX_SESSION_ID`, its terminal session, its
/// audit session), as root and bounded; a failure is logged.
async fn sweep(inner: &Inner, session_id: &str, audit: &str) {
    if inner.closed.load(std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    let attempt = tokio::time::timeout(
        SWEEP_BOUND,
        inner.root_exec(crate::session::SESSION_KILL, &[session_id, audit]),
    )
    .await;
    match attempt {
        Ok(Ok((0, _, _))) => {}
        Ok(Ok((code, out, err))) => {
            tracing::warn!(target: "shellbox_docker", container = %inner.name, "killing a shell session's processes failed (exit {code}): {}{}", out.trim(), err.trim())
        }
        Ok(Err(e)) => {
            tracing::warn!(target: "shellbox_docker", container = %inner.name, "could not kill a shell session's processes: {e}")
        }
        Err(_) => {
            tracing::warn!(target: "shellbox_docker", container = %inner.name, "killing a shell session's processes took more than {SWEEP_BOUND:?}")
        }
    }
}

/// The relay's stdin: bytes queued for a writer task; closed (end of input, which ends the
/// relay and everything of its session) by [`RelayInput::kill`].
struct ExecInput {
    tx: Mutex<Option<mpsc::UnboundedSender<Vec<u8>>>>,
    killed: Arc<Notify>,
}

impl RelayInput for ExecInput {
    fn send(&self, data: &[u8]) -> std::io::Result<()> {
        let gone = || std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the relay is gone");
        match &*self.tx.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(tx) => tx.send(data.to_vec()).map_err(|_| gone()),
            None => Err(gone()),
        }
    }

    fn kill(&self) {
        self.tx.lock().unwrap_or_else(|p| p.into_inner()).take();
        self.killed.notify_one();
    }
}

/// Takes the audit session's report (`SBAUDIT:<n>;\n`, the wrapper's first stderr line)
/// off the front of the relay's stderr.
fn take_audit(buf: &mut Vec<u8>) -> Option<Option<String>> {
    const TAG: &[u8] = b"SBAUDIT:";
    let n = TAG.len().min(buf.len());
    if buf[..n] != TAG[..n] {
        return Some(None);
    }
    let end = buf.iter().position(|&b| b == b'\n')?;
    let line = String::from_utf8_lossy(&buf[TAG.len().min(end)..end]).into_owned();
    buf.drain(..=end);
    let number = line.trim_end_matches(';').to_string();
    Some(
        number
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then_some(number)
            .filter(|s| !s.is_empty()),
    )
}

#[async_trait]
impl RelayLauncher for DockerRelay {
    async fn launch(&self, argv: Vec<Vec<u8>>, first: Vec<u8>) -> std::io::Result<RelayChannel> {
        let inner = &self.inner;
        // A root command of the machine can replace the program (root in the container
        // passes the file's modes): it is copied in again before every relay starts, so
        // what a session runs is shellbox's relay (a root command racing this copy and the
        // exec below can still win; the exec path has no process of its own in the
        // container to run the relay from).
        copy_in(inner).await.map_err(|e| {
            std::io::Error::other(format!("copy the relay program into the container: {e}"))
        })?;
        let workdir = if inner.spec.workdir.is_empty() {
            "/".to_string()
        } else {
            inner.spec.workdir.clone()
        };
        let mut env = vec![format!("SHELLBOX_SESSION_ID={}", self.session_id)];
        if !inner.spec.env.contains_key("TERM") {
            env.push("TERM=xterm".to_string());
        }
        let mut cmd = vec![
            "/bin/sh".to_string(),
            "-c".to_string(),
            WRAP.to_string(),
            "sh".to_string(),
        ];
        cmd.extend(argv.iter().map(|a| String::from_utf8_lossy(a).into_owned()));
        let config = ExecConfig {
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(false),
            env: Some(env),
            cmd: Some(cmd),
            working_dir: Some(workdir),
            ..Default::default()
        };
        let exec = inner
            .docker
            .create_exec(&inner.id, config)
            .await
            .map_err(std::io::Error::other)?;
        let started = inner
            .docker
            .start_exec(&exec.id, None::<StartExecOptions>)
            .await
            .map_err(std::io::Error::other)?;
        let StartExecResults::Attached {
            mut output,
            mut input,
        } = started
        else {
            return Err(std::io::Error::other(
                "the engine did not attach the relay's exec",
            ));
        };
        let (in_tx, mut in_rx) = mpsc::unbounded_channel::<Vec<u8>>();
        in_tx
            .send(first)
            .map_err(|_| std::io::Error::other("the relay's input closed"))?;
        tokio::spawn(async move {
            while let Some(b) = in_rx.recv().await {
                if input.write_all(&b).await.is_err() || input.flush().await.is_err() {
                    break;
                }
            }
            let _ = input.shutdown().await;
        });
        let (out_tx, out_rx) = mpsc::unbounded_channel();
        let killed = Arc::new(Notify::new());
        let reader_killed = killed.clone();
        let inner = inner.clone();
        let session_id = self.session_id.clone();
        tokio::spawn(async move {
            let mut audit = String::new();
            let mut head: Option<Vec<u8>> = Some(Vec::new());
            let mut kill_deadline: Option<tokio::time::Instant> = None;
            loop {
                let item = tokio::select! {
                    item = output.next() => item,
                    _ = reader_killed.notified(), if kill_deadline.is_none() => {
                        kill_deadline = Some(tokio::time::Instant::now() + END_GRACE);
                        continue;
                    }
                    _ = async {
                        match kill_deadline {
                            Some(d) => tokio::time::sleep_until(d).await,
                            None => std::future::pending().await,
                        }
                    } => {
                        // The relay did not end on its input's end: kill from outside.
                        sweep(&inner, &session_id, &audit).await;
                        kill_deadline = Some(tokio::time::Instant::now() + END_GRACE);
                        continue;
                    }
                };
                match item {
                    Some(Ok(LogOutput::StdOut { message })) => {
                        let _ = out_tx.send(RelayOutput::Stdout(message));
                    }
                    Some(Ok(LogOutput::StdErr { message })) => match head.as_mut() {
                        Some(buf) => {
                            buf.extend_from_slice(&message);
                            match take_audit(buf) {
                                None if buf.len() < 256 => {}
                                found => {
                                    if let Some(Some(n)) = found {
                                        audit = n;
                                    }
                                    let rest = head.take().unwrap_or_default();
                                    if !rest.is_empty() {
                                        let _ = out_tx.send(RelayOutput::Stderr(rest.into()));
                                    }
                                }
                            }
                        }
                        None => {
                            let _ = out_tx.send(RelayOutput::Stderr(message));
                        }
                    },
                    Some(Ok(_)) => {}
                    Some(Err(_)) | None => break,
                }
            }
            // The relay ended (it killed what it could reach): whatever escaped it (a
            // command killed the relay first) goes too, then the channel ends.
            sweep(&inner, &session_id, &audit).await;
            drop(out_tx);
        });
        Ok(RelayChannel {
            output: out_rx,
            input: Arc::new(ExecInput {
                tx: Mutex::new(Some(in_tx)),
                killed,
            }),
        })
    }
}

#[test]
fn the_audit_report_is_taken_off_stderr() {
    let mut b = b"SBAUDIT:12;\nrest".to_vec();
    assert_eq!(take_audit(&mut b), Some(Some("12".to_string())));
    assert_eq!(b, b"rest");
    let mut b = b"SBAU".to_vec();
    assert_eq!(take_audit(&mut b), None);
    let mut b = b"oops".to_vec();
    assert_eq!(take_audit(&mut b), Some(None));
}
