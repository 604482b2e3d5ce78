//! The command suite: RunCommand against the real Docker daemon (the
//! timeout and kill ladder, capped output, stdin, background children,
//! isolation, cwd confinement, the slip guard, limits, the warm pool and
//! containers dying under a session), written once and run in every mode
//! commands can reach a container: [`stamp!`] makes one `#[tokio::test]`
//! per suite test in the module that invokes it, running it in that mode.
//! Each test takes the mode as its argument.

mod containers;
mod isolation;
mod ladder;
mod output;

pub use containers::*;
pub use isolation::*;
pub use ladder::*;
pub use output::*;

/// Stamps the suite into the invoking module: one `#[tokio::test]` per
/// suite test, each running it in mode `$mode`. The invoking module's
/// parent holds the suite as `suite`. A suite test missing from the list
/// below is reported unused when the `it` binary is built.
macro_rules! stamp {
    ($mode:expr) => {
        super::suite::stamp!(@tests $mode;
            timeout_kills_whole_process_group,
            ignored_term_escalates_to_kill,
            exit_codes_are_results_not_errors,
            output_is_capped_while_streaming,
            output_is_sent_once_when_the_caller_says_which_it_reads,
            multibyte_output_is_never_split,
            stdin_is_closed,
            background_child_holding_output_does_not_hold_the_call,
            network_is_off,
            root_filesystem_is_read_only_and_commands_are_not_root,
            files_are_shared_both_ways_with_the_file_tools,
            cwd_is_pinned_inside_the_workspace,
            slip_guard_refuses_destructive_commands,
            limits_past_the_ceilings_are_refused,
            environment_reaches_commands,
            client_cancel_runs_the_ladder,
            fork_bomb_is_stopped_by_the_pids_limit_without_harming_others,
            closing_a_session_removes_its_container,
            unreachable_docker_fails_commands_but_not_file_tools,
            container_killed_from_outside_is_replaced_on_the_next_command,
            commands_take_the_configured_path,
            sessions_start_from_the_warm_pool_which_refills_and_is_cleaned_up,
            memory_bomb_is_reported_as_out_of_memory,
            full_tmp_fails_cleanly_and_the_session_keeps_working,
            container_killed_during_a_command_ends_it_cleanly,
            another_command_cannot_redirect_the_kill_ladder
        );
    };
    (@tests $mode:expr; $($name:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $name() {
                super::suite::$name($mode).await
            }
        )+
    };
}
pub(crate) use stamp;
