//! The composable wrappers (`LimitFactory`, `PoolFactory`) over real backends: the
//! simulator and local bubblewrap machines.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shellbox::{
    Backend, Command, Error, LimitFactory, Machine, MachineFactory, MachineSpec, PoolFactory,
};

/// The backends these tests run over, with the spec each accepts; a backend that cannot run
/// here is skipped with a SKIP line.
async fn backends(test: &str) -> Vec<(Arc<dyn MachineFactory>, MachineSpec)> {
    let mut out = Vec::new();
    #[cfg(feature = "sim")]
    out.push((
        shellbox::factory(Backend::Sim).await.unwrap(),
        MachineSpec::sim(),
    ));
    #[cfg(feature = "local")]
    match shellbox::factory(Backend::Local).await {
        Ok(f) => out.push((f, MachineSpec::host())),
        Err(e @ Error::SandboxUnavailable { .. }) => eprintln!("SKIP {test}: local: {e}"),
        Err(e) => panic!("local factory: {e}"),
    }
    out
}

async fn echo(m: &dyn Machine, word: &str) -> String {
    let r = m.run(Command::new("echo").arg(word)).await.unwrap();
    String::from_utf8_lossy(&r.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn limit_holds_under_50_concurrent_creates() {
    for (inner, spec) in backends("limit_holds_under_50_concurrent_creates").await {
        let factory = Arc::new(LimitFactory::new(inner.clone(), 4));
        let live = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..50)
            .map(|i| {
                let (factory, spec, live, most) =
                    (factory.clone(), spec.clone(), live.clone(), most.clone());
                tokio::spawn(async move {
                    let m = factory.create(spec).await.unwrap();
                    let now = live.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    assert_eq!(echo(&*m, &i.to_string()).await, format!("{i}\n"));
                    live.fetch_sub(1, Ordering::SeqCst);
                    m.close().await.unwrap();
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let most = most.load(Ordering::SeqCst);
        assert!(
            most <= 4,
            "{}: {most} machines were live at once",
            inner.backend()
        );
        assert_eq!(factory.live_machines(), 0, "{}", inner.backend());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_fast_refuses_then_frees_on_close_and_drop() {
    for (inner, spec) in backends("fail_fast_refuses_then_frees_on_close_and_drop").await {
        let factory = LimitFactory::new(inner.clone(), 2).fail_fast();
        let a = factory.create(spec.clone()).await.unwrap();
        let b = factory.create(spec.clone()).await.unwrap();
        let err = match factory.create(spec.clone()).await {
            Ok(_) => panic!("{}: a third machine was created", inner.backend()),
            Err(e) => e,
        };
        assert!(matches!(err, Error::LimitReached(_)), "{err:?}");
        assert!(err.is_retryable());
        a.close().await.unwrap();
        let c = factory.create(spec.clone()).await.unwrap();
        drop(b);
        let d = factory.create(spec.clone()).await.unwrap();
        assert_eq!(echo(&*d, "d").await, "d\n");
        c.close().await.unwrap();
        d.close().await.unwrap();
        assert_eq!(factory.live_machines(), 0);
        let err = LimitFactory::new(inner.clone(), 0)
            .create(spec.clone())
            .await
            .err()
            .unwrap();
        assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn commands_per_machine_are_capped() {
    for (inner, spec) in backends("commands_per_machine_are_capped").await {
        let factory = LimitFactory::new(inner.clone(), 1).max_commands_per_machine(1);
        let m: Arc<dyn Machine> = Arc::from(factory.create(spec).await.unwrap());
        // Each command holds a lock directory for a while; two at once would collide.
        let script = "mkdir /tmp/held || exit 9; sleep 0.2; rmdir /tmp/held";
        let runs: Vec<_> = (0..4)
            .map(|_| {
                let m = m.clone();
                tokio::spawn(async move { m.run(Command::shell(script)).await.unwrap() })
            })
            .collect();
        for r in runs {
            let r = r.await.unwrap();
            assert_eq!(r.exit_code, Some(0), "{}: {r:?}", inner.backend());
        }
        m.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_hands_over_warm_machines_and_refills() {
    for (inner, spec) in backends("pool_hands_over_warm_machines_and_refills").await {
        let pool = PoolFactory::new(inner.clone(), spec.clone(), 3);
        pool.fill().await.unwrap();
        assert_eq!(pool.idle_machines(), 3);
        let m = pool.create(spec.clone()).await.unwrap();
        assert_eq!(echo(&*m, "pooled").await, "pooled\n");
        // The handed-over machine is fresh and private: nothing of another's files.
        let other = pool.create(spec.clone()).await.unwrap();
        m.run(Command::shell("echo x > /tmp/mine")).await.unwrap();
        let r = other
            .run(Command::shell("test -e /tmp/mine"))
            .await
            .unwrap();
        assert_eq!(r.exit_code, Some(1), "{}", inner.backend());
        // The pool refills in the background.
        let deadline = Instant::now() + Duration::from_secs(30);
        while pool.idle_machines() < 3 {
            assert!(
                Instant::now() < deadline,
                "{}: pool did not refill",
                inner.backend()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Another spec passes through without touching the pool.
        let custom = pool.create(spec.clone().env("POOL", "no")).await.unwrap();
        assert_eq!(pool.idle_machines(), 3);
        custom.close().await.unwrap();
        pool.close().await.unwrap();
        assert_eq!(pool.idle_machines(), 0);
        let err = pool.create(spec.clone()).await.err().unwrap();
        assert!(matches!(err, Error::Closed), "{err:?}");
        m.close().await.unwrap();
        other.close().await.unwrap();
    }
}

/// A pool from a snapshot hands over forks: each sees the snapshotted files and none of
/// its siblings' or the source's later writes, through `create` and `create_from` of that
/// snapshot alike, and refills with forks; another snapshot passes through. On a backend
/// that declares no snapshots, the snapshot a pool would need is refused as Unsupported;
/// local declares them in a root host process (its root is an overlayfs there), so the
/// whole case runs over local too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_from_snapshot_hands_over_forks() {
    for (inner, spec) in backends("pool_from_snapshot_hands_over_forks").await {
        let source = inner.create(spec.clone()).await.unwrap();
        // `/proc/self` belongs to this process's effective user.
        let root =
            std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap()) == 0;
        if inner.backend() == "local" && root {
            assert!(
                inner.capabilities().snapshots,
                "local in a root host process takes snapshots"
            );
        }
        if !inner.capabilities().snapshots {
            let e = source.snapshot().await.err().unwrap();
            assert!(e.is_unsupported(), "{}: {e:?}", inner.backend());
            source.close().await.unwrap();
            continue;
        }
        source
            .run(Command::shell(
                "mkdir -p /tmp/state && echo prepared > /tmp/state/f",
            ))
            .await
            .unwrap();
        let snapshot = source.snapshot().await.unwrap();
        source
            .run(Command::shell("echo later > /tmp/state/f"))
            .await
            .unwrap();
        let pool = PoolFactory::from_snapshot(inner.clone(), snapshot.clone(), spec.clone(), 2);
        pool.fill().await.unwrap();
        assert_eq!(pool.idle_machines(), 2);
        let a = pool.create(spec.clone()).await.unwrap();
        let b = pool.create_from(&snapshot, spec.clone()).await.unwrap();
        for m in [&a, &b] {
            let r = m.run(Command::shell("cat /tmp/state/f")).await.unwrap();
            assert_eq!(
                String::from_utf8_lossy(&r.stdout),
                "prepared\n",
                "{}",
                inner.backend()
            );
        }
        a.run(Command::shell("echo mine > /tmp/state/f"))
            .await
            .unwrap();
        let r = b.run(Command::shell("cat /tmp/state/f")).await.unwrap();
        assert_eq!(String::from_utf8_lossy(&r.stdout), "prepared\n");
        let r = source
            .run(Command::shell("cat /tmp/state/f"))
            .await
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&r.stdout), "later\n");
        // Refilled with forks of the snapshot, not fresh machines.
        wait_until_refilled(&pool, 2, inner.backend()).await;
        let c = pool.create(spec.clone()).await.unwrap();
        let r = c.run(Command::shell("cat /tmp/state/f")).await.unwrap();
        assert_eq!(String::from_utf8_lossy(&r.stdout), "prepared\n");
        // Another snapshot, or a plain create of another spec, passes through untouched:
        // once the pool is full again (c's refill done), neither takes an idle machine.
        wait_until_refilled(&pool, 2, inner.backend()).await;
        let other = source.snapshot().await.unwrap();
        let d = pool.create_from(&other, spec.clone()).await.unwrap();
        let r = d.run(Command::shell("cat /tmp/state/f")).await.unwrap();
        assert_eq!(String::from_utf8_lossy(&r.stdout), "later\n");
        let fresh = pool.create(spec.clone().env("POOL", "no")).await.unwrap();
        let r = fresh
            .run(Command::shell("test -e /tmp/state/f"))
            .await
            .unwrap();
        assert_eq!(r.exit_code, Some(1));
        assert_eq!(pool.idle_machines(), 2);
        // The pool keeps its own handle: the caller's drop does not stop refills.
        drop(snapshot);
        let e = pool.create(spec.clone()).await.unwrap();
        let r = e.run(Command::shell("cat /tmp/state/f")).await.unwrap();
        assert_eq!(String::from_utf8_lossy(&r.stdout), "prepared\n");
        pool.close().await.unwrap();
        for m in [a, b, c, d, e, fresh, source] {
            m.close().await.unwrap();
        }
    }
}

/// Waits (30 s at most) until `pool` holds `size` idle machines again.
async fn wait_until_refilled(pool: &PoolFactory, size: usize, backend: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while pool.idle_machines() < size {
        assert!(Instant::now() < deadline, "{backend}: pool did not refill");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A transcript recorded on the simulator replays on local bubblewrap with no divergence,
/// and a planted change is reported at its line.
#[cfg(all(feature = "sim", feature = "local"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transcript_recorded_on_sim_replays_on_local() {
    use shellbox::RecordingMachine;

    #[derive(Clone, Default)]
    struct Shared(Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    let local = match shellbox::factory(Backend::Local).await {
        Ok(f) => f,
        Err(e @ Error::SandboxUnavailable { .. }) => {
            eprintln!("SKIP transcript_recorded_on_sim_replays_on_local: {e}");
            return;
        }
        Err(e) => panic!("local factory: {e}"),
    };
    let host = tempfile::tempdir().unwrap();
    std::fs::write(host.path().join("input.txt"), "b\na\nc\n").unwrap();
    let sink = Shared::default();
    let sim = shellbox::factory(Backend::Sim).await.unwrap();
    let recorded =
        RecordingMachine::new(sim.create(MachineSpec::sim()).await.unwrap(), sink.clone());
    let steps = [
        "mkdir -p /tmp/work/sub && cd /tmp/work && printf 'one\\ntwo\\n' > sub/f.txt && ls sub",
        "cat /tmp/work/sub/f.txt; wc -l < /tmp/work/sub/f.txt",
        "test -e /tmp/work/missing || echo absent >&2; exit 3",
        "cd /tmp/work && head -n 1 sub/f.txt && tail -n 1 sub/f.txt",
    ];
    recorded
        .upload(&host.path().join("input.txt"), "/tmp/work/input.txt")
        .await
        .unwrap();
    for step in steps {
        recorded.run(Command::shell(step)).await.unwrap();
    }
    recorded
        .run(Command::new("cat").arg("/tmp/work/input.txt"))
        .await
        .unwrap();
    let err = recorded
        .download("/tmp/work/none", &host.path().join("none"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }));
    recorded.close().await.unwrap();
    let transcript = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
    assert_eq!(transcript.lines().count(), 8, "{transcript}");

    let machine = local.create(MachineSpec::host()).await.unwrap();
    let report = shellbox::replay(&transcript, &*machine).await.unwrap();
    assert_eq!(report.operations, 7);
    assert!(report.divergences.is_empty(), "{:#?}", report.divergences);
    machine.close().await.unwrap();

    // Plant a divergence: line 3 now prints something else.
    let planted: Vec<String> = transcript
        .lines()
        .enumerate()
        .map(|(i, l)| {
            if i == 2 {
                l.replace("wc -l", "wc -c")
            } else {
                l.to_string()
            }
        })
        .collect();
    let machine = local.create(MachineSpec::host()).await.unwrap();
    let report = shellbox::replay(&planted.join("\n"), &*machine)
        .await
        .unwrap();
    assert_eq!(report.divergences.len(), 1, "{:#?}", report.divergences);
    assert_eq!(report.divergences[0].line, 3);
    assert_eq!(report.divergences[0].op, "run");
    machine.close().await.unwrap();
    let err = shellbox::replay(
        "{\"op\":\"bogus\"}",
        &*local.create(MachineSpec::host()).await.unwrap(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, Error::InvalidInput(ref m) if m.contains("line 1")),
        "{err:?}"
    );
}
