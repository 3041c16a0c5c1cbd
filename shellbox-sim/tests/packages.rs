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
            .tool("/bin/cat")
            .tool("/usr/bin/tar"),
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

    let missing = MachineSpec::packages(
        PackageSpec::shell()
            .tool("sh")
            .tool("python3")
            .tool("git")
            .tool("/opt/cat"),
    );
    for e in [
        factory
            .check_environment(&ExecutionRequirements::default(), &missing)
            .await
            .unwrap_err(),
        factory.create(missing.clone()).await.err().unwrap(),
    ] {
        assert!(e.is_unsupported(), "{e:?}");
        assert!(
            e.to_string().contains("no program python3, git, /opt/cat"),
            "{e}"
        );
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
    // A bad tool name is malformed input before any backend rule.
    let e = factory
        .create(MachineSpec::packages(PackageSpec::shell().tool("a\nb")))
        .await
        .err()
        .unwrap();
    assert!(matches!(e, shellbox_core::Error::InvalidInput(_)), "{e:?}");
}
