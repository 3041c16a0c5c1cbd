//! A grader in a dozen lines: put a submission in a fresh machine, run its tests under a
//! deadline, read the verdict back, throw the machine away.
//!
//! ```sh
//! cargo run --example grade               # on the simulator
//! cargo run --example grade -- local      # in a bubblewrap sandbox
//! ```

use std::time::Duration;

use shellbox::{Backend, Command};

#[tokio::main]
async fn main() -> Result<(), shellbox::Error> {
    let backend: Backend = std::env::args()
        .nth(1)
        .as_deref()
        .unwrap_or("sim")
        .parse()?;
    let factory = shellbox::factory(backend).await?;
    let spec = shellbox::default_spec(backend, None)?.env("EXPECTED", "42");
    let machine = factory.create(spec).await?;

    let submission = tempfile::tempdir().map_err(|e| shellbox::Error::io("temp dir", e))?;
    std::fs::write(submission.path().join("answer.txt"), "42\n")
        .map_err(|e| shellbox::Error::io("write submission", e))?;
    machine
        .upload(submission.path(), "/workspace/submission")
        .await?;

    let result = machine
        .run(
            Command::shell(r#"read -r got < submission/answer.txt; [ "$got" = "$EXPECTED" ] && echo pass || { echo fail; exit 1; }"#)
                .timeout(Duration::from_secs(10))
                .output_limit_bytes(64 * 1024),
        )
        .await?;
    println!(
        "{backend}: exit {:?}, verdict {}",
        result.exit_code,
        result.stdout_lossy().trim()
    );
    machine.close().await
}
