//! `ImageSource::Packages` is refused by the docker backend, pointing at Dockerfile images.
//! No engine is needed: the spec is refused before any request.

use shellbox_core::{ExecutionRequirements, MachineFactory, MachineSpec, PackageSpec};
use shellbox_docker::bollard::Docker;
use shellbox_docker::DockerMachineFactory;

#[tokio::test(flavor = "multi_thread")]
async fn packages_are_refused_with_a_pointer_to_dockerfile() {
    let docker = Docker::connect_with_host("tcp://127.0.0.1:1").unwrap();
    let f = DockerMachineFactory::with_client(docker);
    for packages in [
        PackageSpec::shell().tool("sh"),
        PackageSpec::python(["six==1.17.0"]),
    ] {
        let spec = MachineSpec::packages(packages);
        let e = f.create(spec.clone()).await.err().expect("refused");
        assert!(e.is_unsupported(), "{e:?}");
        assert!(e.to_string().contains("ImageSource::Dockerfile"), "{e}");
        let e = f
            .check_environment(&ExecutionRequirements::default(), &spec)
            .await
            .unwrap_err();
        assert!(e.is_unsupported(), "{e:?}");
        assert!(e.to_string().contains("ImageSource::Dockerfile"), "{e}");
    }
}
