//! `ImageSource::Packages` on the simulator: tools from its command table, no Python.

use shellbox_core::{Command, ExecutionRequirements, MachineFactory, MachineSpec, PackageSpec};
use shellbox_sim::SimMachineFactory;

#[tokio::test]
async fn tools_come_from_the_command_table_and_python_is_refused() {
    let factory = SimMachineFactory::new();
    let present = MachineSpec::packages(
        PackageSpec::shell()
            .tool("sh")
            .tool("sed")
            .tool("awk")
            .tool("cat")
            .tool("tar"),
    );
    factory
        .check_environment(&ExecutionRequirements::default(), &present)
        .await
        .unwrap();
    let m = factory.create(present).await.unwrap();
    let r = m
        .run(Command::shell("echo hi | sed s/hi/ok/; pwd"))
        .await
        .unwrap();
    assert_eq!(r.stdout, "ok\n/workspace\n");
    m.close().await.unwrap();

    let missing =
        MachineSpec::packages(PackageSpec::shell().tool("sh").tool("python3").tool("git"));
    for e in [
        factory
            .check_environment(&ExecutionRequirements::default(), &missing)
            .await
            .unwrap_err(),
        factory.create(missing.clone()).await.err().unwrap(),
    ] {
        assert!(e.is_unsupported(), "{e:?}");
        assert!(e.to_string().contains("no program python3, git"), "{e}");
    }

    for pypi in [vec![], vec!["six==1.17.0".to_string()]] {
        let spec = MachineSpec::packages(PackageSpec {
            pypi_packages: Some(pypi),
            tools: vec![],
        });
        let e = factory.create(spec.clone()).await.err().unwrap();
        assert!(
            e.is_unsupported() && e.to_string().contains("no Python"),
            "{e}"
        );
        assert!(factory
            .check_environment(&ExecutionRequirements::default(), &spec)
            .await
            .unwrap_err()
            .is_unsupported());
    }
    // A bad tool name, or a tool by path, is malformed input before any backend rule, in
    // check_environment as in create.
    for bad in ["a\nb", "/bin/cat", "../bin/sh"] {
        let spec = MachineSpec::packages(PackageSpec::shell().tool(bad));
        let e = factory.create(spec.clone()).await.err().unwrap();
        assert!(
            matches!(e, shellbox_core::Error::InvalidInput(_)),
            "{bad:?}: {e:?}"
        );
        let e = factory
            .check_environment(&ExecutionRequirements::default(), &spec)
            .await
            .unwrap_err();
        assert!(
            matches!(e, shellbox_core::Error::InvalidInput(_)),
            "{bad:?}: {e:?}"
        );
    }
}

/// Tools are judged through the PATH the machine's commands will search: a spec whose PATH
/// reaches neither /bin nor /usr/bin (where a fresh machine's programs are) is refused by
/// check_environment and create alike; one that names either is accepted, and the tool
/// then runs.
#[tokio::test]
async fn tools_are_judged_through_the_spec_s_path() {
    let factory = SimMachineFactory::new();
    for path in ["", "/nowhere", "/opt:/usr/local/bin"] {
        let spec = MachineSpec::packages(PackageSpec::shell().tool("sh")).env("PATH", path);
        let e = factory.create(spec.clone()).await.err().unwrap();
        assert!(
            e.is_unsupported() && e.to_string().contains("PATH"),
            "{path:?}: {e}"
        );
        let e = factory
            .check_environment(&ExecutionRequirements::default(), &spec)
            .await
            .unwrap_err();
        assert!(e.is_unsupported(), "{path:?}: {e}");
    }
    for path in ["/bin", "/opt:/usr/bin/"] {
        let spec = MachineSpec::packages(PackageSpec::shell().tool("sh")).env("PATH", path);
        factory
            .check_environment(&ExecutionRequirements::default(), &spec)
            .await
            .unwrap();
        let m = factory.create(spec).await.unwrap();
        let r = m.run(Command::shell("sh -c 'echo found'")).await.unwrap();
        assert_eq!(r.stdout, "found\n", "{path:?}");
        m.close().await.unwrap();
    }
}

/// A refusal naming missing tools stays one short line however many there are (second
/// break-it pass of issue 12: 5,000 missing tools gave a 34 KB message; local's says
/// "... and N more").
#[tokio::test]
async fn a_refusal_of_many_missing_tools_stays_short() {
    let factory = SimMachineFactory::new();
    let mut spec = PackageSpec::shell();
    for i in 0..5_000 {
        spec = spec.tool(format!("shellbox-missing-{i}"));
    }
    let e = factory
        .check_environment(
            &ExecutionRequirements::default(),
            &MachineSpec::packages(spec),
        )
        .await
        .unwrap_err();
    let message = e.to_string();
    assert!(message.contains("and 4980 more"), "{message}");
    assert!(message.len() < 8 * 1024, "{} bytes", message.len());
}
