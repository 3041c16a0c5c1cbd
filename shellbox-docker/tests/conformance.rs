//! The shared contract suite (`shellbox_core::conformance`) against real Docker containers
//! of the busybox test image.

mod common;

use std::sync::Arc;

use shellbox_core::conformance::Harness;

async fn harness(test: &str) -> Option<Harness> {
    let factory = common::setup(test).await?;
    Some(Harness {
        factory: Arc::new(factory),
        spec: common::spec(),
    })
}

shellbox_core::conformance_tests!(harness);

/// The session cases again on an image with bash (`shellbox-test/bash:1`, the host's bash
/// over the busybox image), where the session runs `bash --noediting -i` and detects
/// completion through `PROMPT_COMMAND` instead of ash's `PS1`.
mod bash {
    use super::*;

    async fn harness(test: &str) -> Option<Harness> {
        let factory = common::setup(test).await?;
        let image = common::bash_image(test, factory.docker()).await?;
        Some(Harness {
            factory: Arc::new(factory),
            spec: shellbox_core::MachineSpec::docker(image),
        })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_session_runs_bash() {
        let Some(h) = harness("the_session_runs_bash").await else {
            return;
        };
        let m = h.machine().await;
        let s = m.open_shell().await.unwrap();
        let u = s
            .execute(
                "echo \"${BASH_VERSION:+bash}\"; stty size",
                std::time::Duration::from_secs(30),
                1 << 20,
            )
            .await
            .unwrap();
        assert_eq!(&u.output[..], b"bash\n24 80\n");
        m.close().await.unwrap();
    }

    shellbox_core::conformance_tests!(@cases harness;
        session_state_persists,
        session_running_then_read,
        session_write_feeds_read,
        session_interrupt,
        session_prompt_cannot_be_faked,
        session_interrupt_races_the_command,
        session_late_interrupt_is_harmless,
        session_write_racing_the_end_keeps_answers_in_step,
        session_interrupt_racing_the_end_hits_nothing,
        session_commands_get_default_signals,
        session_background_job_ending_between_calls,
        session_reset_after_exit,
        session_output_is_exact,
        session_plumbing_changes,
        session_output_limit,
        session_close
    );
}

/// The session cases on the exec path ([`shellbox_docker::CommandPath::Exec`]: no
/// supervisor in the container), where the session is the supervisor program's terminal
/// relay run by one Engine exec (the program copied in for the session), with the same
/// rules as on the supervisor's path, so every session case is claimed. The snapshot cases again
/// (above they run on the supervisor's path): a machine started from a snapshot is made
/// as this factory makes one. The process-model cases and the command cases they touch
/// (issue 14): the exec path follows the same process model.
mod exec_path {
    use super::*;

    async fn harness(test: &str) -> Option<Harness> {
        let factory = common::setup(test)
            .await?
            .command_path(shellbox_docker::CommandPath::Exec);
        Some(Harness {
            factory: Arc::new(factory),
            spec: common::spec(),
        })
    }

    shellbox_core::conformance_tests!(@cases harness;
        session_state_persists,
        session_running_then_read,
        session_write_feeds_read,
        session_interrupt,
        session_prompt_cannot_be_faked,
        session_interrupt_races_the_command,
        session_late_interrupt_is_harmless,
        session_write_racing_the_end_keeps_answers_in_step,
        session_interrupt_racing_the_end_hits_nothing,
        session_commands_get_default_signals,
        session_background_job_ending_between_calls,
        session_reset_after_exit,
        session_output_is_exact,
        session_plumbing_changes,
        session_output_limit,
        session_close,
        fork_sees_files_at_snapshot_time,
        forks_are_private,
        deleted_snapshot_keeps_its_forks,
        background_process_outlives_its_command,
        timeout_kills_only_its_command,
        timeout_before_the_command_starts_still_kills,
        cancel_kills_only_its_command,
        close_leaves_no_process_on_the_host,
        timeout_kills_descendants,
        timeout_keeps_partial_output,
        run_stream_matches_run,
        concurrent_commands
    );
}

/// The exec path's session on the bash image: bash's `PROMPT_COMMAND` marker through the
/// relay run by an Engine exec.
mod exec_path_bash {
    use super::*;

    async fn harness(test: &str) -> Option<Harness> {
        let factory = common::setup(test)
            .await?
            .command_path(shellbox_docker::CommandPath::Exec);
        let image = common::bash_image(test, factory.docker()).await?;
        Some(Harness {
            factory: Arc::new(factory),
            spec: shellbox_core::MachineSpec::docker(image),
        })
    }

    shellbox_core::conformance_tests!(@cases harness;
        session_state_persists,
        session_running_then_read,
        session_write_feeds_read,
        session_interrupt,
        session_prompt_cannot_be_faked,
        session_interrupt_races_the_command,
        session_late_interrupt_is_harmless,
        session_write_racing_the_end_keeps_answers_in_step,
        session_interrupt_racing_the_end_hits_nothing,
        session_commands_get_default_signals,
        session_background_job_ending_between_calls,
        session_reset_after_exit,
        session_output_is_exact,
        session_plumbing_changes,
        session_output_limit,
        session_close
    );
}

/// The exec path's older session ([`shellbox_docker::DockerSession`]: one Engine exec on a
/// terminal, the marker taken at its word), which machines get where the relay cannot be
/// copied or run; here forced by
/// [`exec_session_relay(false)`](shellbox_docker::DockerMachineFactory::exec_session_relay).
/// The cases only the relay's rules pass (a faked prompt, racing and late interrupts) are
/// not claimed.
mod exec_path_terminal {
    use super::*;

    async fn harness(test: &str) -> Option<Harness> {
        let factory = common::setup(test)
            .await?
            .command_path(shellbox_docker::CommandPath::Exec)
            .exec_session_relay(false);
        Some(Harness {
            factory: Arc::new(factory),
            spec: common::spec(),
        })
    }

    shellbox_core::conformance_tests!(@cases harness;
        session_state_persists,
        session_running_then_read,
        session_write_feeds_read,
        session_interrupt,
        session_reset_after_exit,
        session_output_is_exact,
        session_plumbing_changes,
        session_output_limit,
        session_close
    );
}
