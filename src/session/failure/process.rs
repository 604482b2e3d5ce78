//! What a caller is told when a call about a long-running process is
//! refused: part of the one table in [`super`].

use tonic::Code;

use super::{Described, reason, status};
pub(super) fn not_found(id: &str) -> Described {
    status(
        Code::NotFound,
        reason::PROCESS_NOT_FOUND,
        format!(
            "The session has no process {id:?}. Nothing was changed. ListProcesses names every \
             process the session started (ids look like \"p3\")."
        ),
        &[("process_id", id.to_string())],
    )
}

pub(super) fn too_many(max: usize, running: &[String]) -> Described {
    status(
        Code::ResourceExhausted,
        reason::TOO_MANY_PROCESSES,
        format!(
            "The session already runs its limit of {max} processes: {}. Nothing was started. \
             Stop one you no longer need (StopProcess), then retry.",
            running.join(", ")
        ),
        &[("max", max.to_string())],
    )
}

pub(super) fn too_many_readers(max: usize, of: &str) -> Described {
    status(
        Code::ResourceExhausted,
        reason::TOO_MANY_READERS,
        format!(
            "This {of} already has its limit of {max} open ReadProcessOutput streams. Nothing \
             was opened. Close a stream you no longer read (a follower of a process that has \
             ended closes by itself), or read without `follow`, then retry."
        ),
        &[("max", max.to_string()), ("of", of.to_string())],
    )
}

pub(super) fn reader_stalled(secs: u64) -> Described {
    status(
        Code::Aborted,
        reason::READER_STALLED,
        format!(
            "This ReadProcessOutput stream was not read for {secs} s while output waited, and \
             another reader took its place. Nothing of the process changed. Read again from the \
             offsets of the last piece you received."
        ),
        &[("stalled_secs", secs.to_string())],
    )
}

pub(super) fn ended(id: &str, how: &str) -> Described {
    status(
        Code::FailedPrecondition,
        reason::PROCESS_ENDED,
        format!(
            "Process {id} has ended ({how}), so it takes no input, resize or signal. Nothing was \
             sent. Read what it wrote with ReadProcessOutput, or start it again."
        ),
        &[("process_id", id.to_string())],
    )
}

pub(super) fn input_closed(id: &str, never_opened: bool) -> Described {
    status(
        Code::FailedPrecondition,
        reason::PROCESS_INPUT_CLOSED,
        if never_opened {
            format!(
                "Process {id} was started without an input pipe, so nothing can be written to \
                 it. Nothing was sent. Start it with `stdin` (or `pty`) to give it input."
            )
        } else {
            format!(
                "The input of process {id} was closed, so nothing more can be written to it. \
                 Nothing was sent."
            )
        },
        &[("process_id", id.to_string())],
    )
}

pub(super) fn not_reading(id: &str, written: u64, why: &str) -> Described {
    status(
        Code::DeadlineExceeded,
        reason::PROCESS_NOT_READING,
        format!(
            "Process {id} did not take its input: {why}. It took {written} bytes of it; the rest \
             was not sent. See what it is doing with ReadProcessOutput, or stop it."
        ),
        &[
            ("process_id", id.to_string()),
            ("written", written.to_string()),
        ],
    )
}

pub(super) fn no_terminal(id: &str) -> Described {
    status(
        Code::FailedPrecondition,
        reason::NOT_A_TERMINAL,
        format!(
            "Process {id} does not run on a terminal, so it has no size to set. Nothing was \
             changed. Start it with `pty` to give it one."
        ),
        &[("process_id", id.to_string())],
    )
}

pub(super) fn unavailable(why: &str) -> Described {
    status(
        Code::FailedPrecondition,
        reason::PROCESSES_UNAVAILABLE,
        format!(
            "Long-running processes need the sandbox's supervisor, which is not available here \
             ({why}). Nothing was started. Run the command with RunCommand instead, or ask the \
             operator to run the service with its supervisor."
        ),
        &[],
    )
}
