//! `ImageSource::Packages` without Python on the local backend: required tools are checked
//! on the sandbox's `PATH`; a refused spec leaves no machine behind. The only test of this
//! binary, so the count of this process's machine roots is its own.

mod common;

use shellbox_core::{
    Command, ExecutionRequirements, Machine, MachineFactory, MachineSpec, PackageSpec,
};
use shellbox_local::{OWNER_FILE, ROOT_PREFIX, TOOLS_REFUSAL};

/// This process's machine roots in the host temp dir.
fn my_roots() -> usize {
    let pid = std::process::id();
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(ROOT_PREFIX))
        .filter(|e| {
            std::fs::read_to_string(e.path().join(OWNER_FILE))
                .ok()
                .and_then(|t| shellbox_local::Owner::from_json(&t))
                .is_some_and(|o| o.pid == pid)
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_must_be_executable_on_the_sandbox_path() {
    let test = "tools_must_be_executable_on_the_sandbox_path";
    let Some(factory) = common::factory(test) else {
        return;
    };
    // Shell only, present tools: the host's programs.
    let spec = MachineSpec::packages(PackageSpec::shell().tool("sh").tool("cat").tool("env"));
    factory
        .check_environment(&ExecutionRequirements::default(), &spec)
        .await
        .unwrap();
    let m = factory.create(spec).await.unwrap();
    let r = m
        .run(Command::shell(
            "echo ok; command -v python3 >/dev/null || echo no-venv",
        ))
        .await
        .unwrap();
    assert_eq!(r.stdout, "ok\n");
    m.close().await.unwrap();

    let before = my_roots();
    let spec = MachineSpec::packages(
        PackageSpec::shell()
            .tool("sh")
            .tool("shellbox-no-such-tool")
            .tool("passwd-shellbox-absent"),
    );
    let e = factory
        .create(spec)
        .await
        .err()
        .expect("missing tools refused");
    assert!(e.is_unsupported(), "{e:?}");
    let text = e.to_string();
    assert!(text.contains(TOOLS_REFUSAL), "{text}");
    assert!(
        text.contains("shellbox-no-such-tool, passwd-shellbox-absent not found"),
        "{text}"
    );
    assert!(!text.contains("sh,"), "{text}");
    assert!(text.contains("PATH=/usr/local/sbin:"), "{text}");
    assert_eq!(my_roots(), before, "the refused machine was not closed");

    // Many missing tools: the message names the first ones and counts the rest, from the
    // check and from create (it was every name: 1.5 MB for 100,000).
    let many: Vec<String> = (0..20_000)
        .map(|i| format!("shellbox-absent-{i}"))
        .collect();
    let mut spec = PackageSpec::shell();
    for tool in &many {
        spec = spec.tool(tool.as_str());
    }
    let spec = MachineSpec::packages(spec);
    let checked = factory
        .check_environment(&ExecutionRequirements::default(), &spec)
        .await
        .expect_err("check refuses missing tools");
    let created = factory
        .create(spec)
        .await
        .map(drop)
        .expect_err("create refuses");
    for e in [checked, created] {
        let text = e.to_string();
        assert!(e.is_unsupported(), "{e:?}");
        assert!(text.len() < 2_000, "{} bytes: {}", text.len(), &text[..200]);
        assert!(
            text.contains("shellbox-absent-19 and 19980 more not found"),
            "{text}"
        );
    }
    assert_eq!(my_roots(), before, "the refused machine was not closed");

    // A tool is a program name: a path is refused before anything is made.
    let e = factory
        .create(MachineSpec::packages(
            PackageSpec::shell().tool("/usr/bin/env"),
        ))
        .await
        .err()
        .expect("a tool by path refused");
    assert!(matches!(e, shellbox_core::Error::InvalidInput(_)), "{e:?}");
    assert_eq!(my_roots(), before, "a machine was made for an invalid spec");

    // The spec's env reaches the check: a tool found only on its PATH.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let e = factory
        .create(
            MachineSpec::packages(PackageSpec::shell().tool("sh"))
                .env("PATH", dir.path().to_str().unwrap()),
        )
        .await
        .err()
        .expect("sh is not on this PATH");
    assert!(e.to_string().contains("sh not found"), "{e}");

    // Validation comes before anything is made; resources are refused as for host specs.
    let e = factory
        .create(MachineSpec::packages(PackageSpec::python(["-e ."])))
        .await
        .err()
        .unwrap();
    assert!(matches!(e, shellbox_core::Error::InvalidInput(_)), "{e:?}");
    let e = factory
        .create(MachineSpec::packages(PackageSpec::python(["six"])).cpus(1))
        .await
        .err()
        .unwrap();
    assert!(e.is_unsupported() && e.to_string().contains("cpus"), "{e}");
    assert_eq!(my_roots(), before);
}
