//! The supervisor program's `--pty-relay` mode, started on the host as a child of the test
//! and spoken to in its own frames, with real bash on its terminal.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use shellbox_supervisor::proto::{self, pty_frame, pty_numbered};

const NONCE: &str = "0123456789abcdef0123456789abcdef";

/// Frames the relay wrote, read by a thread of their own.
struct Frames {
    rx: mpsc::Receiver<Vec<u8>>,
    buf: Vec<u8>,
}

impl Frames {
    /// The next `PTY_DONE` (command number, status) within `bound`, `None` past it; other
    /// frames are skipped.
    fn done(&mut self, bound: Duration) -> Option<(u64, i32)> {
        let until = std::time::Instant::now() + bound;
        loop {
            while let Some((kind, payload, used)) = proto::parse_pty_frame(&self.buf) {
                let found = (kind == proto::PTY_DONE && payload.len() == 12).then(|| {
                    (
                        u64::from_le_bytes(payload[..8].try_into().unwrap()),
                        i32::from_le_bytes(payload[8..].try_into().unwrap()),
                    )
                });
                self.buf.drain(..used);
                if found.is_some() {
                    return found;
                }
            }
            let left = until.checked_duration_since(std::time::Instant::now())?;
            match self.rx.recv_timeout(left) {
                Ok(chunk) => self.buf.extend_from_slice(&chunk),
                Err(_) => return None,
            }
        }
    }
}

/// A line typed ahead of the first prompt makes that prompt's typeahead drain wait (its
/// `read -t 0.05`, a `pselect6` of fd 0) before the prompt's own `read`: the relay must not
/// take the drain's wait for the prompt's, or no later prompt is ever confirmed and the
/// first command never completes (issue 11: the Podman `session_plumbing_changes` hang,
/// found with the relay's debug log: the signature learned was `270 0x1 ...`).
#[test]
fn typeahead_at_the_first_prompt_does_not_mislead_the_relay() {
    let dir = std::env::temp_dir().join(format!("shellbox-sup-pty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let program = dir.join("shellbox-supervisor");
    std::fs::write(&program, shellbox_supervisor::SUPERVISOR_PROGRAM).unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut child = Command::new(&program)
        .args(["--pty-relay", "24", "80", "/bin/bash"])
        .args(["--noprofile", "--norc", "--noediting", "-i"])
        .env("PATH", "/usr/bin:/bin")
        .env("TERM", "xterm")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut b = [0u8; 65536];
        while let Ok(n) = stdout.read(&mut b) {
            if n == 0 || tx.send(b[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut frames = Frames {
        rx,
        buf: Vec::new(),
    };
    let mut stdin = child.stdin.take().unwrap();
    let setup = format!(
        "unset HISTFILE; set +o history; PS1=''; PS2=''; \
         PROMPT_COMMAND='\\builtin printf \"SB{NONCE}:0:%s;\" \"$?\" >/dev/tty; \
         {{ \\builtin read -t 0 && \\builtin read -r -d \"\" -t 0.05 _; }} </dev/tty 2>/dev/null'\n\
         echo typed-ahead\n"
    );
    let mut first = pty_frame(proto::PTY_CREDIT, &(1u64 << 20).to_le_bytes());
    first.extend_from_slice(&pty_frame(
        proto::PTY_MARKER,
        format!("SB{NONCE}:").as_bytes(),
    ));
    first.extend_from_slice(&pty_frame(proto::PTY_DATA, setup.as_bytes()));
    stdin.write_all(&first).unwrap();
    stdin.flush().unwrap();
    let bound = Duration::from_secs(20);
    assert_eq!(frames.done(bound), Some((0, 0)), "the first prompt");
    for seq in 1..=3u64 {
        let line = pty_frame(
            proto::PTY_LINE,
            &pty_numbered(seq, format!("(exit {seq})\n").as_bytes()),
        );
        stdin.write_all(&line).unwrap();
        stdin.flush().unwrap();
        assert_eq!(
            frames.done(bound),
            Some((seq, seq as i32)),
            "command {seq} never completed"
        );
    }
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
