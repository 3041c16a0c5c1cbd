//! `shellbox bench`: in-process measurements of a backend, many runs per case, with the
//! floors (what the same work costs without shellbox) measured in the same run.

use std::future::Future;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use shellbox::{Backend, Command, Error, Machine as _, MachineFactory, MachineSpec};

use super::MachineArgs;

#[derive(clap::Args, Debug)]
pub(crate) struct BenchArgs {
    #[command(flatten)]
    machine: MachineArgs,
    /// Only these cases (repeatable); default: every case of the backend.
    #[arg(long = "case")]
    cases: Vec<String>,
    /// Print one JSON object per case instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Measure the cases in this process even when they report peak RSS (used by the
    /// parent bench, which runs such cases in a child process of their own).
    #[arg(long, hide = true)]
    in_process: bool,
}

/// One measured case.
struct Measured {
    case: String,
    runs: usize,
    median_us: f64,
    p90_us: f64,
    extra: Vec<(&'static str, serde_json::Value)>,
}

fn stats(case: &str, mut samples: Vec<Duration>) -> Measured {
    samples.sort();
    let pick = |q: f64| {
        let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples[i].as_secs_f64() * 1e6
    };
    Measured {
        case: case.to_string(),
        runs: samples.len(),
        median_us: pick(0.5),
        p90_us: pick(0.9),
        extra: Vec::new(),
    }
}

async fn time_runs<F, Fut>(case: &str, runs: usize, mut f: F) -> Result<Measured, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), Error>>,
{
    // One warm-up run, not counted.
    f().await?;
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        f().await?;
        samples.push(start.elapsed());
    }
    Ok(stats(case, samples))
}

/// Issue 10's pipeline benchmark, and what it prints (the numbers of 1..=100000 holding a 7).
const PIPELINE_SEQ_GREP_WC: &str = "seq 1 100000 | grep 7 | wc -l";
const PIPELINE_SEQ_GREP_WC_OUTPUT: &str = "40951";

fn check(result: &shellbox::CommandResult, what: &str) -> Result<(), Error> {
    if result.success() {
        Ok(())
    } else {
        Err(Error::backend(
            format!("bench {what}"),
            format!(
                "exit {:?} ({:?}): {}",
                result.exit_code,
                result.reason,
                result.stderr_lossy()
            ),
        ))
    }
}

/// Kibibytes from a `/proc/self/status` line such as `VmHWM:  1234 kB`.
fn proc_status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The cases of `backend`, in order. Cases marked `true` report peak RSS and run in a child
/// process of their own.
fn case_names(backend: Backend) -> Vec<(&'static str, bool)> {
    let mut names = vec![
        ("create_close", false),
        ("create_run_close", false),
        ("run_true", false),
        ("run_echo", false),
        ("concurrent_8x50", false),
        ("upload_1000_files", false),
        ("download_1000_files", false),
        ("pool_create", false),
    ];
    match backend {
        #[cfg(feature = "local")]
        Backend::Local => names.extend([
            ("create_close_copy_on_write", false),
            ("create_run_close_copy_on_write", false),
            ("flood_200mb_1mib", true),
            ("download_file_1gib", true),
            ("floor_spawn_true", false),
            ("floor_fork_exec_true", false),
            ("floor_bwrap_true", false),
            ("floor_write_1000_files", false),
            ("session_execute_true", false),
            ("fork_10k_files", false),
        ]),
        #[cfg(feature = "docker")]
        Backend::Docker => names.extend([
            ("flood_1gb_1mib", true),
            ("floor_exec_true", false),
            ("session_execute_true", false),
            ("fork_10k_files", false),
            ("floor_write_10k_files", false),
        ]),
        #[cfg(feature = "sim")]
        Backend::Sim => names.extend([
            ("loop_1000", false),
            ("pipeline_seq_grep_wc", false),
            ("idle_10000", true),
            ("floor_bash_true", false),
            ("floor_bash_loop_1000", false),
            ("floor_bash_pipeline_seq_grep_wc", false),
            ("session_execute_true", false),
            ("fork_10k_files", false),
        ]),
    }
    names
}

pub(crate) async fn bench(args: BenchArgs) -> Result<ExitCode, Error> {
    let backend = args.machine.backend()?;
    let spec = args.machine.spec()?;
    let all = case_names(backend);
    for wanted in &args.cases {
        if !all.iter().any(|(n, _)| n == wanted) {
            return Err(Error::invalid(format!(
                "{backend} has no bench case {wanted:?}; cases: {}",
                all.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
            )));
        }
    }
    let selected: Vec<(&str, bool)> = all
        .into_iter()
        .filter(|(n, _)| args.cases.is_empty() || args.cases.iter().any(|c| c == n))
        .collect();
    let factory = args.machine.factory(backend).await?;
    if !args.json {
        out!(
            "{:<8} {:<22} {:>6} {:>12} {:>12}  extra",
            "backend",
            "case",
            "runs",
            "median_us",
            "p90_us"
        );
    }
    for (case, own_process) in selected {
        let measured = if own_process && !args.in_process {
            in_child(case)?
        } else {
            run_case(backend, &factory, &spec, case).await?
        };
        print(backend, &measured, args.json);
    }
    Ok(ExitCode::SUCCESS)
}

fn print(backend: Backend, m: &Measured, json: bool) {
    if json {
        let mut value = serde_json::json!({
            "backend": backend.name(),
            "case": m.case,
            "runs": m.runs,
            "median_us": (m.median_us * 10.0).round() / 10.0,
            "p90_us": (m.p90_us * 10.0).round() / 10.0,
        });
        for (k, v) in &m.extra {
            value[*k] = v.clone();
        }
        out!("{value}");
    } else {
        let extra: Vec<String> = m.extra.iter().map(|(k, v)| format!("{k}={v}")).collect();
        out!(
            "{:<8} {:<22} {:>6} {:>12.1} {:>12.1}  {}",
            backend.name(),
            m.case,
            m.runs,
            m.median_us,
            m.p90_us,
            extra.join(" ")
        );
    }
}

/// Runs one case in a child `shellbox bench` so its peak RSS is its own.
fn in_child(case: &str) -> Result<Measured, Error> {
    let exe = std::env::current_exe().map_err(|e| Error::io("find the shellbox executable", e))?;
    let mut argv: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    // Keep the machine options, replace the case selection.
    let mut cleaned = Vec::new();
    let mut skip_next = false;
    for a in argv.drain(..) {
        if skip_next {
            skip_next = false;
            continue;
        }
        if a == "--case" {
            skip_next = true;
            continue;
        }
        if a.to_string_lossy().starts_with("--case=") || a == "--json" {
            continue;
        }
        cleaned.push(a);
    }
    cleaned.extend([
        "--case".into(),
        case.into(),
        "--json".into(),
        "--in-process".into(),
    ]);
    let output = std::process::Command::new(exe)
        .args(&cleaned)
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| Error::io("run the bench child", e))?;
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text.lines().last().unwrap_or("");
    let value: serde_json::Value = serde_json::from_str(line).map_err(|e| {
        Error::backend(
            format!("bench child for {case}"),
            format!("{e}: exit {:?}, output {text:?}", output.status.code()),
        )
    })?;
    if let Some(err) = value.get("error") {
        return Err(Error::backend(format!("bench {case}"), err.to_string()));
    }
    let mut m = Measured {
        case: case.to_string(),
        runs: value["runs"].as_u64().unwrap_or(0) as usize,
        median_us: value["median_us"].as_f64().unwrap_or(0.0),
        p90_us: value["p90_us"].as_f64().unwrap_or(0.0),
        extra: Vec::new(),
    };
    for key in [
        "peak_rss_kib",
        "rss_kib",
        "commands_per_s",
        "peak_rss_growth_kib",
        "floor_dd_median_us",
    ] {
        if let Some(v) = value.get(key) {
            m.extra.push((key, v.clone()));
        }
    }
    Ok(m)
}

async fn run_case(
    backend: Backend,
    factory: &Arc<dyn MachineFactory>,
    spec: &MachineSpec,
    case: &str,
) -> Result<Measured, Error> {
    // Runs per case: a docker exec costs ~100 ms, a bwrap sandbox ~10 ms, a sim run µs.
    let many = match backend {
        #[cfg(feature = "sim")]
        Backend::Sim => 10_000,
        #[cfg(feature = "local")]
        Backend::Local => 200,
        #[cfg(feature = "docker")]
        Backend::Docker => 30,
    };
    match case {
        // Issue 12's bar: a copy-on-write machine (its overlays, their layer directories)
        // costs at most 3 ms more than create_close. Each run is paired with one on this
        // bench's own factory (read-only unless --system-directories says otherwise), in
        // alternating order, so host load drifting during the case weighs on both alike;
        // `read_only_median_us` is the paired runs' median, `extra_us` the difference.
        #[cfg(feature = "local")]
        "create_close_copy_on_write" | "create_run_close_copy_on_write" => {
            let options = shellbox::local::LocalOptions {
                system_directories: shellbox::local::SystemDirectories::CopyOnWrite,
                ..Default::default()
            };
            let cow: Arc<dyn MachineFactory> = Arc::new(
                tokio::task::spawn_blocking(move || {
                    shellbox::local::LocalMachineFactory::new(options)
                })
                .await
                .map_err(|e| Error::backend("start the local factory", e.to_string()))??,
            );
            let run = case == "create_run_close_copy_on_write";
            let once = |f: &Arc<dyn MachineFactory>| {
                let f = f.clone();
                let spec = spec.clone();
                async move {
                    let start = Instant::now();
                    let m = f.create(spec).await?;
                    if run {
                        check(&m.run(Command::new("true")).await?, case)?;
                    }
                    m.close().await?;
                    Ok::<_, Error>(start.elapsed())
                }
            };
            once(&cow).await?;
            once(factory).await?;
            let (mut layered, mut plain) = (Vec::new(), Vec::new());
            for i in 0..many {
                if i % 2 == 0 {
                    layered.push(once(&cow).await?);
                    plain.push(once(factory).await?);
                } else {
                    plain.push(once(factory).await?);
                    layered.push(once(&cow).await?);
                }
            }
            let baseline = stats(case, plain);
            let mut measured = stats(case, layered);
            let round = |v: f64| (v * 10.0).round() / 10.0;
            measured
                .extra
                .push(("read_only_median_us", round(baseline.median_us).into()));
            measured.extra.push((
                "extra_us",
                round(measured.median_us - baseline.median_us).into(),
            ));
            Ok(measured)
        }
        // Issue 15's bar: a pooled create is at most 1 ms once the pool is warm. Each timed
        // create is handed a machine from a full pool (the refill it starts is waited for,
        // untimed, before the next); the machine is closed untimed.
        "pool_create" => {
            let pool = shellbox::PoolFactory::new(factory.clone(), spec.clone(), POOL_SIZE);
            pool.fill().await?;
            let runs = many.min(200);
            let mut samples = Vec::with_capacity(runs);
            for _ in 0..runs {
                let start = Instant::now();
                let m = pool.create(spec.clone()).await?;
                samples.push(start.elapsed());
                m.close().await?;
                let deadline = Instant::now() + Duration::from_secs(60);
                while pool.idle_machines() < POOL_SIZE {
                    if Instant::now() > deadline {
                        return Err(Error::backend(
                            case.to_string(),
                            "the pool did not refill within 60 s",
                        ));
                    }
                    tokio::time::sleep(Duration::from_micros(200)).await;
                }
            }
            pool.close().await?;
            Ok(stats(case, samples))
        }
        "create_close" => {
            time_runs(case, many, || async {
                let m = factory.create(spec.clone()).await?;
                m.close().await
            })
            .await
        }
        // The full cost of a machine that does something: create returns before its
        // sandbox runs on local, so create_close alone does not show the start.
        "create_run_close" => {
            time_runs(case, many, || async {
                let m = factory.create(spec.clone()).await?;
                check(&m.run(Command::new("true")).await?, case)?;
                m.close().await
            })
            .await
        }
        "run_true" | "run_echo" | "loop_1000" => {
            let m = factory.create(spec.clone()).await?;
            let command = match case {
                "run_true" => Command::new("true"),
                "run_echo" => Command::from_argv(["echo", "hello"]),
                _ => Command::shell("i=0; while [ $i -lt 1000 ]; do i=$((i+1)); done"),
            };
            let runs = if case == "loop_1000" { many / 10 } else { many };
            let r = time_runs(case, runs, || async {
                check(&m.run(command.clone()).await?, case)
            })
            .await;
            m.close().await?;
            r
        }
        // Issue 10's pipeline: three programs of the command table over 100,000 lines.
        "pipeline_seq_grep_wc" => {
            let m = factory.create(spec.clone()).await?;
            let r = time_runs(case, 20, || async {
                let r = m.run(Command::shell(PIPELINE_SEQ_GREP_WC)).await?;
                check(&r, case)?;
                if r.stdout.trim_ascii() != PIPELINE_SEQ_GREP_WC_OUTPUT.as_bytes() {
                    return Err(Error::backend(
                        case.to_string(),
                        format!("printed {:?}", String::from_utf8_lossy(&r.stdout)),
                    ));
                }
                Ok(())
            })
            .await;
            m.close().await?;
            r
        }
        "concurrent_8x50" => {
            let machines =
                futures::future::try_join_all((0..8).map(|_| factory.create(spec.clone()))).await?;
            let mut samples = Vec::new();
            for _ in 0..3 {
                let start = Instant::now();
                futures::future::try_join_all(machines.iter().map(|m| async move {
                    for _ in 0..50 {
                        check(&m.run(Command::new("true")).await?, case)?;
                    }
                    Ok::<(), Error>(())
                }))
                .await?;
                samples.push(start.elapsed());
            }
            for m in &machines {
                m.close().await?;
            }
            let mut measured = stats(case, samples);
            let per_s = 400.0 / (measured.median_us / 1e6);
            measured
                .extra
                .push(("commands_per_s", serde_json::json!(per_s.round())));
            Ok(measured)
        }
        "flood_200mb_1mib" | "flood_1gb_1mib" => {
            let bytes: u64 = if case == "flood_200mb_1mib" {
                200 << 20
            } else {
                1 << 30
            };
            let m = factory.create(spec.clone()).await?;
            let command = Command::from_argv(["head", "-c", &bytes.to_string(), "/dev/zero"])
                .output_limit_bytes(1 << 20);
            let r = time_runs(case, 3, || async {
                let r = m.run(command.clone()).await?;
                check(&r, case)?;
                if r.stdout.len() != 1 << 20 || !r.stdout_truncated {
                    return Err(Error::backend(
                        "bench flood",
                        format!(
                            "kept {} bytes, truncated {}",
                            r.stdout.len(),
                            r.stdout_truncated
                        ),
                    ));
                }
                Ok(())
            })
            .await;
            m.close().await?;
            let mut measured = r?;
            if let Some(kib) = proc_status_kib("VmHWM:") {
                measured
                    .extra
                    .push(("peak_rss_kib", serde_json::json!(kib)));
            }
            Ok(measured)
        }
        #[cfg(feature = "local")]
        "download_file_1gib" => download_file_1gib(factory, spec, case).await,
        "upload_1000_files" | "download_1000_files" => {
            transfers(factory, spec, case, case == "upload_1000_files").await
        }
        "idle_10000" => {
            let before = proc_status_kib("VmRSS:").unwrap_or(0);
            let start = Instant::now();
            let mut machines = Vec::with_capacity(10_000);
            for _ in 0..10_000 {
                machines.push(factory.create(spec.clone()).await?);
            }
            let elapsed = start.elapsed();
            let after = proc_status_kib("VmRSS:").unwrap_or(0);
            for m in &machines {
                m.close().await?;
            }
            let mut measured = stats(case, vec![elapsed / 10_000]);
            measured.runs = 10_000;
            measured
                .extra
                .push(("rss_kib", serde_json::json!(after.saturating_sub(before))));
            Ok(measured)
        }
        "floor_spawn_true" => {
            time_runs(case, many, || async {
                let status = tokio::process::Command::new("/bin/true")
                    .status()
                    .await
                    .map_err(|e| Error::io("spawn /bin/true", e))?;
                if status.success() {
                    Ok(())
                } else {
                    Err(Error::backend("floor_spawn_true", "/bin/true failed"))
                }
            })
            .await
        }
        // A fork and exec of /bin/true from this process, waited for: what a local command
        // costs at least now that the sandbox is built once per machine (issue 14's floor).
        "floor_fork_exec_true" => {
            time_runs(case, many, || async {
                let status = std::process::Command::new("/bin/true")
                    .status()
                    .map_err(|e| Error::io("fork and exec /bin/true", e))?;
                if status.success() {
                    Ok(())
                } else {
                    Err(Error::backend("floor_fork_exec_true", "/bin/true failed"))
                }
            })
            .await
        }
        "floor_bash_true" | "floor_bash_loop_1000" | "floor_bash_pipeline_seq_grep_wc" => {
            let (script, runs) = match case {
                "floor_bash_true" => ("true", 200),
                "floor_bash_loop_1000" => ("i=0; while [ $i -lt 1000 ]; do i=$((i+1)); done", 100),
                _ => (PIPELINE_SEQ_GREP_WC, 20),
            };
            time_runs(case, runs, || async {
                let out = tokio::process::Command::new("bash")
                    .args(["-c", script])
                    .stderr(std::process::Stdio::inherit())
                    .output()
                    .await
                    .map_err(|e| Error::io("spawn bash", e))?;
                let pipeline = case == "floor_bash_pipeline_seq_grep_wc";
                if !out.status.success()
                    || (pipeline
                        && out.stdout.trim_ascii() != PIPELINE_SEQ_GREP_WC_OUTPUT.as_bytes())
                {
                    return Err(Error::backend(case.to_string(), "bash failed"));
                }
                Ok(())
            })
            .await
        }
        // What download_1000_files costs at least: the same 1,000 small files written
        // into a fresh directory of the same host temp dir, with std::fs.
        "floor_write_1000_files" => {
            let host = tempfile::tempdir().map_err(|e| Error::io("create a temp dir", e))?;
            let mut n = 0u32;
            time_runs(case, 10, || {
                n += 1;
                let dir = host.path().join(format!("out-{n}"));
                async move {
                    std::fs::create_dir(&dir).map_err(|e| Error::io("create bench dir", e))?;
                    for i in 0..1000 {
                        std::fs::write(dir.join(format!("f{i:04}.txt")), format!("file {i}\n"))
                            .map_err(|e| Error::io("write bench files", e))?;
                    }
                    count_files(&dir, 1000)
                }
            })
            .await
        }
        // What a docker fork's image layer costs at least: the files fork_10k_files puts
        // in the machine (10,000 small files and 100 MiB) written with std::fs into a fresh
        // directory of the host temp dir (on this machine the disk of the engine's data
        // root too), as `commit` must write them into the new layer. Each run's directory is
        // removed after its timing, outside it.
        "floor_write_10k_files" => {
            let host = tempfile::tempdir().map_err(|e| Error::io("create a temp dir", e))?;
            let dir = host.path().join("out");
            let big = vec![0x5a_u8; 104_857_600];
            let mut samples = Vec::new();
            // Three runs: removing 10,000 files takes far longer than writing them here
            // (ext4 with `discard`), and is not part of what is measured.
            for _ in 0..3 {
                let start = Instant::now();
                std::fs::create_dir(&dir).map_err(|e| Error::io("create bench dir", e))?;
                for i in 0..10_000 {
                    std::fs::write(dir.join(format!("f{i}")), format!("{i}\n"))
                        .map_err(|e| Error::io("write bench files", e))?;
                }
                std::fs::write(dir.join("big"), &big)
                    .map_err(|e| Error::io("write bench files", e))?;
                samples.push(start.elapsed());
                count_files(&dir, 10_001)?;
                std::fs::remove_dir_all(&dir).map_err(|e| Error::io("remove bench dir", e))?;
            }
            Ok(stats(case, samples))
        }
        "floor_bwrap_true" => floor_bwrap_true(factory, spec, case, many).await,
        "floor_exec_true" => floor_exec_true(spec, case, many).await,
        "fork_10k_files" => fork_10k_files(factory, spec, case).await,
        "session_execute_true" => {
            // `execute("true")` on an open session (its shell already started): issue 11.
            let m = factory.create(spec.clone()).await?;
            let session = m.open_shell().await?;
            let r = time_runs(case, many * 10, || async {
                let u = session
                    .execute("true", Duration::from_secs(30), 1 << 20)
                    .await?;
                if u.status == shellbox::ShellStatus::Completed && u.exit_code == Some(0) {
                    Ok(())
                } else {
                    Err(Error::backend(
                        "bench session_execute_true",
                        format!("{u:?}"),
                    ))
                }
            })
            .await;
            m.close().await?;
            r
        }
        other => Err(Error::invalid(format!("unknown bench case {other}"))),
    }
}

/// Machines `pool_create` keeps ahead of demand.
const POOL_SIZE: usize = 4;

/// What `fork_10k_files` puts in the machine it forks: 10,000 small files and 100 MiB of
/// random bytes.
const FORK_FILES: &str = "mkdir -p fork && cd fork && i=0; \
     while [ $i -lt 10000 ]; do echo $i > f$i; i=$((i+1)); done && \
     head -c 104857600 /dev/urandom > big";

/// Issue 15's fork bar: `Machine::snapshot` then `MachineFactory::create_from` of a machine
/// holding 10,000 small files and 100 MiB, each run one fork (closed after it is timed,
/// the snapshot dropped first, so its close releases what the snapshot held);
/// `snapshot_median_us` and `create_from_median_us` split the median.
async fn fork_10k_files(
    factory: &Arc<dyn MachineFactory>,
    spec: &MachineSpec,
    case: &str,
) -> Result<Measured, Error> {
    let m = factory.create(spec.clone()).await?;
    let r = fork_runs(factory, &*m, spec, case).await;
    m.close().await?;
    r
}

async fn fork_runs(
    factory: &Arc<dyn MachineFactory>,
    m: &dyn shellbox::Machine,
    spec: &MachineSpec,
    case: &str,
) -> Result<Measured, Error> {
    check(&m.run(Command::shell(FORK_FILES)).await?, case)?;
    let (mut total, mut snapshots, mut creates) = (Vec::new(), Vec::new(), Vec::new());
    // One warm-up fork, not counted, which also checks what a fork sees.
    for run in 0..6 {
        let start = Instant::now();
        let snapshot = m.snapshot().await?;
        let taken = start.elapsed();
        let fork = factory.create_from(&snapshot, spec.clone()).await?;
        let made = start.elapsed();
        drop(snapshot);
        if run == 0 {
            let r = fork
                .run(Command::shell("ls fork | wc -l; wc -c < fork/big"))
                .await?;
            check(&r, case)?;
            let seen = String::from_utf8_lossy(&r.stdout);
            if seen.split_whitespace().collect::<Vec<_>>() != ["10001", "104857600"] {
                return Err(Error::backend(
                    case.to_string(),
                    format!("the fork sees {seen:?}"),
                ));
            }
        } else {
            total.push(made);
            snapshots.push(taken);
            creates.push(made - taken);
        }
        fork.close().await?;
    }
    let mut measured = stats(case, total);
    let round = |v: f64| (v * 10.0).round() / 10.0;
    for (key, samples) in [
        ("snapshot_median_us", snapshots),
        ("create_from_median_us", creates),
    ] {
        measured
            .extra
            .push((key, round(stats(case, samples).median_us).into()));
    }
    Ok(measured)
}

/// Bytes of `download_file_1gib`'s file.
#[cfg(feature = "local")]
const GIB: u64 = 1 << 30;

/// Issue 12's bar for `Machine::download_file`: a 1 GiB file streams out of the machine with
/// peak memory under 8 MiB. The guest file is sparse (`truncate`), so reading it costs
/// little and the host side writes every byte; `peak_rss_growth_kib` is how far this
/// process's peak RSS (VmHWM, reset to the current RSS through `/proc/self/clear_refs` just
/// before) rose above its RSS before the first download. `floor_dd_median_us` is `dd bs=1M
/// conv=fsync` of a sparse 1 GiB host file into the same host directory, in the same run:
/// what writing every byte and syncing it (as `download_file` does before its rename) costs
/// without a machine (`cp` would not sync, so it would not be a floor).
#[cfg(feature = "local")]
async fn download_file_1gib(
    factory: &Arc<dyn MachineFactory>,
    spec: &MachineSpec,
    case: &str,
) -> Result<Measured, Error> {
    let host = tempfile::tempdir().map_err(|e| Error::io("create a temp dir", e))?;
    let m = factory.create(spec.clone()).await?;
    let setup = m
        .run(Command::from_argv([
            "truncate",
            "-s",
            &GIB.to_string(),
            "/tmp/bench-1gib",
        ]))
        .await;
    if let Err(e) = setup.and_then(|r| check(&r, case)) {
        let _ = m.close().await;
        return Err(e);
    }
    let target = host.path().join("downloaded");
    let size_of = |path: &Path| {
        std::fs::metadata(path)
            .map(|m| m.len())
            .map_err(|e| Error::io(format!("stat {}", path.display()), e))
    };
    let check_size = |path: &Path| {
        let got = size_of(path)?;
        if got == GIB {
            Ok(())
        } else {
            Err(Error::backend(
                format!("bench {case}"),
                format!("{} holds {got} bytes, expected {GIB}", path.display()),
            ))
        }
    };
    let before = proc_status_kib("VmRSS:").unwrap_or(0);
    // "5" resets VmHWM to the current RSS (Linux 4.0); where it cannot, the peak since
    // start stands, which only overstates the growth.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let measured = time_runs(case, 3, || async {
        m.download_file("/tmp/bench-1gib", &target, GIB).await?;
        check_size(&target)
    })
    .await;
    let peak = proc_status_kib("VmHWM:");
    m.close().await?;
    let mut measured = measured?;
    if let Some(peak) = peak {
        measured.extra.push((
            "peak_rss_growth_kib",
            serde_json::json!(peak.saturating_sub(before)),
        ));
        measured
            .extra
            .push(("peak_rss_kib", serde_json::json!(peak)));
    }
    // The floor, in the same run and the same host directory.
    let source = host.path().join("sparse-1gib");
    std::fs::File::create(&source)
        .and_then(|f| f.set_len(GIB))
        .map_err(|e| Error::io(format!("create {}", source.display()), e))?;
    let copy = host.path().join("copied");
    let floor = time_runs("floor_dd_1gib", 3, || async {
        let status = tokio::process::Command::new("dd")
            .arg(format!("if={}", source.display()))
            .arg(format!("of={}", copy.display()))
            .args(["bs=1M", "conv=fsync", "status=none"])
            .status()
            .await
            .map_err(|e| Error::io("spawn dd", e))?;
        if !status.success() {
            return Err(Error::backend(
                "floor dd",
                format!("dd exited with {status}"),
            ));
        }
        check_size(&copy)
    })
    .await?;
    measured.extra.push((
        "floor_dd_median_us",
        serde_json::json!((floor.median_us * 10.0).round() / 10.0),
    ));
    Ok(measured)
}

async fn transfers(
    factory: &Arc<dyn MachineFactory>,
    spec: &MachineSpec,
    case: &str,
    upload: bool,
) -> Result<Measured, Error> {
    let host = tempfile::tempdir().map_err(|e| Error::io("create a temp dir", e))?;
    let src = host.path().join("src");
    std::fs::create_dir_all(&src).map_err(|e| Error::io("create bench files", e))?;
    for i in 0..1000 {
        std::fs::write(src.join(format!("f{i:04}.txt")), format!("file {i}\n"))
            .map_err(|e| Error::io("create bench files", e))?;
    }
    let m = factory.create(spec.clone()).await?;
    if !upload {
        m.upload(&src, "/tmp/bench-src").await?;
    }
    let mut n = 0u32;
    let target_root = host.path().to_path_buf();
    let r = time_runs(case, 10, || {
        n += 1;
        let (m, src, target_root) = (&m, &src, &target_root);
        async move {
            if upload {
                m.upload(src, &format!("/tmp/bench-{n}")).await
            } else {
                let target = target_root.join(format!("out-{n}"));
                m.download("/tmp/bench-src", &target).await?;
                count_files(&target, 1000)
            }
        }
    })
    .await;
    m.close().await?;
    r
}

fn count_files(dir: &Path, expected: usize) -> Result<(), Error> {
    let n = std::fs::read_dir(dir)
        .map_err(|e| Error::io(format!("read {}", dir.display()), e))?
        .count();
    if n == expected {
        Ok(())
    } else {
        Err(Error::backend(
            "bench download",
            format!("{n} files downloaded, expected {expected}"),
        ))
    }
}

/// `floor_bwrap_true`: the same bwrap flags a `run_true` gets, spawned directly.
#[cfg(feature = "local")]
async fn floor_bwrap_true(
    _factory: &Arc<dyn MachineFactory>,
    spec: &MachineSpec,
    case: &str,
    runs: usize,
) -> Result<Measured, Error> {
    let factory = shellbox::local::LocalMachineFactory::new(Default::default())?;
    let machine = factory.create_local(spec.clone()).await?;
    let machine = &machine;
    let r = time_runs(case, runs, || async move {
        let mut command = tokio::process::Command::from(machine.floor_bwrap_true_command()?);
        command.stdin(std::process::Stdio::null());
        let status = command
            .status()
            .await
            .map_err(|e| Error::io("spawn bwrap", e))?;
        if status.success() {
            Ok(())
        } else {
            Err(Error::backend(
                "floor_bwrap_true",
                format!("bwrap exited with {status}"),
            ))
        }
    })
    .await;
    machine.close().await?;
    r
}

#[cfg(not(feature = "local"))]
async fn floor_bwrap_true(
    _: &Arc<dyn MachineFactory>,
    _: &MachineSpec,
    _: &str,
    _: usize,
) -> Result<Measured, Error> {
    Err(Error::unsupported("this build has no local backend"))
}

/// `floor_exec_true`: a bare Engine API exec of `true` in a machine's container.
#[cfg(feature = "docker")]
async fn floor_exec_true(spec: &MachineSpec, case: &str, runs: usize) -> Result<Measured, Error> {
    let factory = shellbox::docker::DockerMachineFactory::connect().await?;
    let machine = factory.create_machine(spec.clone()).await?;
    let machine = &machine;
    let r = time_runs(case, runs, || async move {
        shellbox::docker::floor_exec_true(machine.docker(), machine.container_id()).await
    })
    .await;
    machine.close().await?;
    r
}

#[cfg(not(feature = "docker"))]
async fn floor_exec_true(_: &MachineSpec, _: &str, _: usize) -> Result<Measured, Error> {
    Err(Error::unsupported("this build has no docker backend"))
}
