//! `sandboxd start`, `ps`, `logs`, `send`, `signal` and `stop`: the
//! long-running processes of a session (a development server, a watcher, a
//! REPL), started, listed, read, written to and stopped. This file holds
//! the verbs, their flags and their calls; `process/logs` prints a
//! process's output (following it with `-f`), `process/show` the words for
//! a process's state and the `ps` table.

use std::process::ExitCode;

use clap::{ArgGroup, Args, Subcommand};
use sandboxd::pb;
use sandboxd::session::failure::reason;
use tonic_types::StatusExt;

use super::connect::Client;
use super::print::{self, Stdio};
use super::{AnyError, EXIT_FAILURE};

mod logs;
mod show;

/// The readiness wait the service applies when none is given.
const DEFAULT_READY_TIMEOUT_MS: u64 = 30_000;

/// The process verbs, flattened into the client verbs.
#[derive(Debug, Subcommand)]
pub enum ProcessVerb {
    /// Start a long-running process (a server, a watcher, a REPL) in the
    /// session's container and return while it runs; prints its id. With
    /// --ready-port or --ready-match, waits until it is ready, and exits 1
    /// if it is not.
    Start(StartArgs),
    /// List the session's processes, running and ended, oldest first.
    Ps,
    /// Print what a process wrote, as far as it is kept: its stdout to
    /// stdout, its stderr to stderr; -f follows it until it ends.
    Logs(LogsArgs),
    /// Write a line to the input of a process started with --stdin or --pty.
    Send(SendArgs),
    /// Send INT, TERM or KILL to a process's whole process group.
    Signal(SignalArgs),
    /// Stop a process (SIGTERM to its process group, SIGKILL 2 s later if
    /// it is still there) and print how it ended.
    Stop {
        /// The process's id, e.g. p3 (`sandboxd ps` lists them).
        process: String,
    },
}

/// Flags of `sandboxd start`.
#[derive(Debug, Args)]
#[command(group = ArgGroup::new("ready").args(["ready_port", "ready_match"]))]
pub struct StartArgs {
    /// Ready once this TCP port on the container's loopback accepts
    /// connections (a server listening).
    #[arg(long, value_name = "PORT")]
    ready_port: Option<u16>,
    /// Ready once a line of its output (stdout or stderr) matches this
    /// regular expression, e.g. "Listening on".
    #[arg(long, value_name = "RE")]
    ready_match: Option<String>,
    /// How long to wait for readiness (0: 30 s). A process not ready by
    /// then is left running.
    #[arg(long, default_value_t = 0, value_name = "MS", requires = "ready")]
    ready_timeout_ms: u64,
    /// Open a pipe to its input, for `sandboxd send` (without it, or --pty,
    /// its input is empty).
    #[arg(long)]
    stdin: bool,
    /// Run it on a terminal, as a REPL wants: its errors come on stdout
    /// too, and its input is open.
    #[arg(long)]
    pty: bool,
    /// Rows of its terminal (0: 24).
    #[arg(long, default_value_t = 0, requires = "pty")]
    rows: u32,
    /// Columns of its terminal (0: 80).
    #[arg(long, default_value_t = 0, requires = "pty")]
    cols: u32,
    /// Working directory relative to the workspace.
    #[arg(long, default_value = "")]
    cwd: String,
    /// Extra environment, KEY=VALUE (repeatable).
    #[arg(long = "env", value_parser = super::client::parse_key_value)]
    env: Vec<(String, String)>,
    /// The command (joined with spaces, run by /bin/sh -c).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<String>,
}

/// Flags of `sandboxd logs`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The process's id, e.g. p3.
    process: String,
    /// Keep printing new output until the process ends (Ctrl-C stops
    /// following; the process keeps running).
    #[arg(short, long)]
    follow: bool,
    /// Print its stdout only.
    #[arg(long, conflicts_with = "stderr_only")]
    stdout_only: bool,
    /// Print its stderr only.
    #[arg(long)]
    stderr_only: bool,
    /// Write the bytes exactly as they came, even to a terminal, control
    /// sequences included (colours, cursor moves: the process controls
    /// what the terminal does).
    #[arg(long)]
    raw: bool,
}

/// Flags of `sandboxd send`.
#[derive(Debug, Args)]
pub struct SendArgs {
    /// The process's id, e.g. p3.
    process: String,
    /// The text to write; a newline is added unless --no-newline.
    #[arg(required_unless_present = "close")]
    text: Option<String>,
    /// Do not add a newline after the text.
    #[arg(long)]
    no_newline: bool,
    /// Close its input after the text (end of file on a pipe, Ctrl-D on a
    /// terminal); nothing more can be sent after.
    #[arg(long)]
    close: bool,
}

/// Flags of `sandboxd signal`.
#[derive(Debug, Args)]
pub struct SignalArgs {
    /// The process's id, e.g. p3.
    process: String,
    /// INT, TERM or KILL (SIGINT, int, 2, ... are taken too).
    #[arg(value_parser = parse_signal)]
    signal: pb::ProcessSignal,
}

/// Parses a signal's name or number: INT, SIGINT, int or 2; TERM (15);
/// KILL (9).
fn parse_signal(s: &str) -> Result<pb::ProcessSignal, String> {
    let name = s.to_ascii_uppercase();
    match name.strip_prefix("SIG").unwrap_or(&name) {
        "INT" | "2" => Ok(pb::ProcessSignal::Int),
        "TERM" | "15" => Ok(pb::ProcessSignal::Term),
        "KILL" | "9" => Ok(pb::ProcessSignal::Kill),
        _ => Err(format!(
            "{s:?} is not a signal sent here: give INT, TERM or KILL"
        )),
    }
}

/// Makes the call of `verb` about a process of `session_id` and prints its
/// result; a refusal prints its reason and message and exits 1.
pub async fn call(
    c: &mut Client,
    session_id: String,
    verb: ProcessVerb,
    con: &mut Stdio,
) -> Result<ExitCode, AnyError> {
    let outcome = match verb {
        ProcessVerb::Start(a) => start(c, session_id, a, con).await,
        ProcessVerb::Ps => c
            .list_processes(pb::ListProcessesRequest { session_id })
            .await
            .map(|r| {
                show::table(con, &r.into_inner().processes, show::now_ms());
                ExitCode::SUCCESS
            }),
        ProcessVerb::Logs(a) => logs::logs(c, session_id, a, con).await,
        ProcessVerb::Send(a) => send(c, session_id, a, con).await,
        ProcessVerb::Signal(a) => c
            .signal_process(pb::SignalProcessRequest {
                session_id,
                process_id: a.process.clone(),
                signal: a.signal.into(),
            })
            .await
            .map(|r| {
                let p = r.into_inner().process.unwrap_or_default();
                let now = if p.state() == pb::ProcessState::Running {
                    "it is still running".to_string()
                } else {
                    format!("it {}", show::how(&p))
                };
                con.out(format_args!(
                    "sent SIG{} to the process group of {}; {now}\n",
                    signal_name(a.signal),
                    a.process
                ));
                ExitCode::SUCCESS
            }),
        ProcessVerb::Stop { process } => c
            .stop_process(pb::StopProcessRequest {
                session_id,
                process_id: process,
            })
            .await
            .map(|r| {
                let p = r.into_inner().process.unwrap_or_default();
                con.out(format_args!("{} {}\n", p.process_id, show::how(&p)));
                show::notes(con, &p);
                ExitCode::SUCCESS
            }),
    };
    Ok(outcome.unwrap_or_else(|status| {
        print::refusal(con, &status);
        let not_found = status
            .get_details_error_info()
            .is_some_and(|i| i.reason == reason::PROCESS_NOT_FOUND);
        if not_found {
            con.status(format_args!("`sandboxd ps` lists the session's processes"));
        }
        ExitCode::from(EXIT_FAILURE)
    }))
}

fn signal_name(s: pb::ProcessSignal) -> &'static str {
    match s {
        pb::ProcessSignal::Int => "INT",
        pb::ProcessSignal::Term => "TERM",
        pb::ProcessSignal::Kill => "KILL",
        pb::ProcessSignal::Unspecified => "?",
    }
}

/// `sandboxd start`: prints the process's id on stdout (for `P=$(sandboxd
/// start ...)`) and how it started on stderr; when it is not ready (or
/// could not start), the end of its output so far. Exits 1 when readiness
/// was asked for and did not come, or when it could not start.
async fn start(
    c: &mut Client,
    session_id: String,
    a: StartArgs,
    con: &mut Stdio,
) -> Result<ExitCode, tonic::Status> {
    let condition = match (a.ready_port, a.ready_match) {
        (Some(port), _) => Some(pb::readiness::Condition::Port(port.into())),
        (None, Some(re)) => Some(pb::readiness::Condition::OutputRegex(re)),
        (None, None) => None,
    };
    let ready = condition.map(|condition| pb::Readiness {
        condition: Some(condition),
        timeout_ms: a.ready_timeout_ms,
    });
    let r = c
        .start_process(pb::StartProcessRequest {
            session_id,
            command: a.command.join(" "),
            cwd: a.cwd,
            env: a.env.into_iter().collect(),
            stdin: a.stdin,
            pty: a.pty.then_some(pb::Pty {
                rows: a.rows,
                cols: a.cols,
            }),
            ready,
        })
        .await?
        .into_inner();
    if let Some(rejected) = &r.rejected {
        print::rejection(con, rejected);
        return Ok(ExitCode::from(EXIT_FAILURE));
    }
    let p = r.process.clone().unwrap_or_default();
    let id = &p.process_id;
    con.out(format_args!("{id}\n"));
    let waited = match a.ready_timeout_ms {
        0 => DEFAULT_READY_TIMEOUT_MS,
        ms => ms,
    };
    let (readiness, ok) = match r.ready_state() {
        pb::ReadyState::Unspecified => (String::new(), true),
        pb::ReadyState::Ready => (format!(", ready after {} ms", r.ready_ms), true),
        pb::ReadyState::Exited => (": it ended before it was ready".to_string(), false),
        pb::ReadyState::TimedOut => (
            format!(
                ", NOT ready within {}: it is left running; `sandboxd logs {id}` shows what \
                 it writes, `sandboxd stop {id}` stops it",
                show::span(waited)
            ),
            false,
        ),
    };
    con.status(format_args!("[{id} {}{readiness}]", show::state(&p)));
    show::notes(con, &p);
    let failed = p.state() == pb::ProcessState::Failed;
    if !ok || failed {
        for (stream, tail) in [("stdout", &r.stdout_tail), ("stderr", &r.stderr_tail)] {
            if tail.is_empty() {
                con.status(format_args!("[nothing on its {stream} so far]"));
            } else {
                con.status(format_args!("[the end of its {stream} so far:]"));
                con.err(format_args!("{tail}"));
                if !tail.ends_with('\n') {
                    con.err(format_args!("\n"));
                }
            }
        }
    }
    Ok(if ok && !failed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_FAILURE)
    })
}

/// `sandboxd send`: writes the text (and a newline) to the process's input,
/// closing it after with --close; says what the process took.
async fn send(
    c: &mut Client,
    session_id: String,
    a: SendArgs,
    con: &mut Stdio,
) -> Result<ExitCode, tonic::Status> {
    // With --close alone there is no text, and no newline either.
    let data = match a.text {
        Some(text) if !a.no_newline => format!("{text}\n").into_bytes(),
        Some(text) => text.into_bytes(),
        None => Vec::new(),
    };
    let r = c
        .write_process_input(pb::WriteProcessInputRequest {
            session_id,
            process_id: a.process.clone(),
            data,
            close: a.close,
        })
        .await?
        .into_inner();
    let closed = if r.closed {
        "; its input is closed now"
    } else {
        ""
    };
    con.out(format_args!(
        "{} took {} bytes{closed}\n",
        a.process, r.written
    ));
    Ok(ExitCode::SUCCESS)
}
