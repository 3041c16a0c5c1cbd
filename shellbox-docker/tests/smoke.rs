mod common;
use shellbox_core::{Command, Machine};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread")]
async fn smoke() {
    let Some(f) = common::setup("smoke").await else {
        return;
    };
    let t = Instant::now();
    let m = f.create_machine(common::spec()).await.unwrap();
    eprintln!("create {:?}", t.elapsed());
    let r = m
        .run(Command::shell("echo hi; echo err >&2; pwd; id -u; exit 3"))
        .await
        .unwrap();
    eprintln!("{r:?}");
    let r = m.run(Command::new("nosuch")).await.unwrap();
    eprintln!("{r:?}");
    let r = m.run(Command::new("cat").stdin("abc")).await.unwrap();
    eprintln!("{r:?}");
    let t = Instant::now();
    let r = m
        .run(Command::shell("echo start; sleep 3600 & wait").timeout(Duration::from_secs(1)))
        .await
        .unwrap();
    eprintln!("{r:?} {:?}", t.elapsed());
    let r = m
        .run(Command::shell("ps -o pid,pgid,comm 2>/dev/null || ps"))
        .await
        .unwrap();
    eprintln!("{}", r.stdout_lossy());
    let t = Instant::now();
    for _ in 0..10 {
        m.run(Command::new("true")).await.unwrap();
    }
    eprintln!("run true x10 {:?}", t.elapsed());
    let t = Instant::now();
    for _ in 0..10 {
        shellbox_docker::floor_exec_true(m.docker(), m.container_id())
            .await
            .unwrap();
    }
    eprintln!("floor x10 {:?}", t.elapsed());
    let r = m.run(Command::shell("sleep 100 & echo bg")).await.unwrap();
    eprintln!("{r:?}");
    m.close().await.unwrap();
    m.close().await.unwrap();
    assert!(m.run(Command::new("true")).await.is_err());
}
