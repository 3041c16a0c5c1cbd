//! Issue 11: `run_stream` on the simulator is live. Events leave as the script writes them
//! (bounded buffering: the interpreter waits while the consumer lags, its deadline still
//! counting), multibyte characters split between chunks arrive intact, dropping the stream
//! cancels the command, and collecting the stream gives what `run` gives.

use std::time::Duration;

use futures::StreamExt;
use shellbox_core::capture::collect;
use shellbox_core::{Command, Error, Event, ExitReason, Machine, MachineSpec};
use shellbox_sim::{SimMachine, SimMachineFactory, SimOptions};

/// A hang here is a failure, not a stalled suite.
const HANG: Duration = Duration::from_secs(60);

fn machine() -> SimMachine {
    SimMachineFactory::new()
        .create_sim(MachineSpec::sim())
        .unwrap()
}

/// Every event of a stream, the terminal one last.
async fn events(m: &SimMachine, command: Command) -> Vec<Result<Event, Error>> {
    let stream = m.run_stream(command).await.unwrap();
    tokio::time::timeout(HANG, stream.collect::<Vec<_>>())
        .await
        .expect("the stream ends")
}

fn stdout_of(events: &[Result<Event, Error>]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in events {
        if let Ok(Event::Stdout(b)) = e {
            out.extend_from_slice(b);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_line_arrives_before_the_loop_ends() {
    let m = machine();
    let mut stream = m
        .run_stream(Command::shell(
            "for i in $(seq 1 100000); do echo $i; done; echo END",
        ))
        .await
        .unwrap();
    let first = tokio::time::timeout(HANG, stream.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let Event::Stdout(first) = first else {
        panic!("{first:?}");
    };
    assert!(first.starts_with(b"1\n2\n"), "{first:?}");
    // the loop has not finished: its last line and END come later, in other chunks
    assert!(!first.windows(3).any(|w| w == b"END"));
    assert!(first.len() <= 16 * 1024, "one chunk is at most 16 KiB");
    let mut rest = vec![Ok(Event::Stdout(first))];
    rest.extend(
        tokio::time::timeout(HANG, stream.collect::<Vec<_>>())
            .await
            .unwrap(),
    );
    let mut want = String::new();
    for i in 1..=100_000 {
        want.push_str(&format!("{i}\n"));
    }
    want.push_str("END\n");
    assert_eq!(String::from_utf8(stdout_of(&rest)).unwrap(), want);
    assert!(rest.len() > 3, "many chunks, got {}", rest.len());
    match rest.last().unwrap() {
        Ok(Event::Exit(s)) => {
            assert_eq!((s.exit_code, s.reason), (Some(0), ExitReason::Exited));
            assert!(!s.stdout_truncated);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn multibyte_characters_split_between_chunks_arrive_intact() {
    let m = machine();
    // one write of 2^14 three-byte characters (48 KiB): cut into 16 KiB chunks, mid-character
    let ev = events(
        &m,
        Command::shell("s=€; for i in $(seq 14); do s=$s$s; done; printf %s \"$s\"; echo é"),
    )
    .await;
    let chunks: Vec<&[u8]> = ev
        .iter()
        .filter_map(|e| match e {
            Ok(Event::Stdout(b)) => Some(&b[..]),
            _ => None,
        })
        .collect();
    assert!(chunks.len() >= 3, "{} chunks", chunks.len());
    assert!(
        std::str::from_utf8(chunks[0]).is_err(),
        "the first chunk ends inside a character"
    );
    let want = format!("{}é\n", "€".repeat(1 << 14));
    assert_eq!(stdout_of(&ev), want.as_bytes());
}

#[tokio::test]
async fn stdout_and_stderr_keep_their_order_and_limits() {
    let m = machine();
    let ev = events(
        &m,
        Command::shell("echo a; echo b >&2; echo c; for i in $(seq 1000); do echo $i >&2; done"),
    )
    .await;
    let mut tagged = Vec::new();
    for e in &ev {
        match e {
            Ok(Event::Stdout(b)) => tagged.push(format!("out:{}", String::from_utf8_lossy(b))),
            Ok(Event::Stderr(b)) => tagged.push(format!("err:{}", String::from_utf8_lossy(b))),
            _ => {}
        }
    }
    assert!(tagged.len() >= 3, "{tagged:?}");
    assert_eq!(tagged[..3], ["out:a\n", "err:b\n", "out:c\n"]);
    let ev = events(
        &m,
        Command::shell("seq 1 100000; echo tail >&2").output_limit_bytes(10),
    )
    .await;
    assert_eq!(stdout_of(&ev), b"1\n2\n3\n4\n5\n");
    match ev.last().unwrap() {
        Ok(Event::Exit(s)) => {
            assert_eq!(s.exit_code, Some(0));
            assert!(s.stdout_truncated && !s.stderr_truncated, "{s:?}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn dropping_the_stream_cancels_the_command() {
    let m = machine();
    for script in ["while :; do echo y; done", "while :; do :; done"] {
        let mut stream = m.run_stream(Command::shell(script)).await.unwrap();
        if script.contains("echo") {
            let first = stream.next().await.unwrap().unwrap();
            assert!(matches!(first, Event::Stdout(_)), "{first:?}");
        }
        drop(stream);
        // the machine is free again: the loop was cancelled
        let r = tokio::time::timeout(HANG, m.run(Command::shell("echo next")))
            .await
            .expect("a dropped stream's command must end")
            .unwrap();
        assert_eq!(r.stdout, "next\n");
    }
}

#[tokio::test]
async fn the_deadline_counts_while_the_consumer_lags() {
    let m = machine();
    let mut stream = m
        .run_stream(Command::shell("while :; do echo y; done").timeout(Duration::from_millis(200)))
        .await
        .unwrap();
    // read nothing for a while: the interpreter waits for room, its deadline passes
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mut last = None;
    while let Some(e) = tokio::time::timeout(HANG, stream.next()).await.unwrap() {
        last = Some(e);
    }
    match last {
        Some(Ok(Event::Exit(s))) => {
            assert_eq!((s.exit_code, s.reason), (None, ExitReason::TimedOut))
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn collecting_the_stream_gives_what_run_gives() {
    let m = machine();
    for (script, limit) in [
        ("echo out; echo err >&2; exit 3", 1 << 20),
        ("seq 1 50000; seq 1 20000 >&2", 1000),
        (
            "(sleep 1; echo late) & echo early; wait; echo done",
            1 << 20,
        ),
        ("printf '\\000\\377'; cat /nonexistent", 1 << 20),
        ("echo quick", 1 << 20),
    ] {
        let c = Command::shell(script).output_limit_bytes(limit);
        let streamed = collect(m.run_stream(c.clone()).await.unwrap(), limit)
            .await
            .unwrap();
        let ran = m.run(c).await.unwrap();
        assert_eq!(streamed, ran, "{script}");
    }
}

#[tokio::test]
async fn an_exhausted_budget_ends_the_stream_with_terminated() {
    let f = SimMachineFactory::with_options(SimOptions {
        cpu_fuel: 200_000,
        ..SimOptions::default()
    });
    let m = f.create_sim(MachineSpec::sim()).unwrap();
    let ev = events(&m, Command::shell("while :; do echo y; done")).await;
    assert!(stdout_of(&ev).starts_with(b"y\ny\n"));
    assert!(
        matches!(ev.last(), Some(Err(Error::Terminated(r))) if r.contains("fuel")),
        "{:?}",
        ev.last()
    );
    assert!(
        matches!(
            m.run_stream(Command::shell("while :; do :; done")).await,
            Err(Error::Closed)
        ) || m.is_closed()
    );
}
